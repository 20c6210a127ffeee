/*
 * sql.h — SQL words read without a parser: the few statements whose effect tern must follow in a
 * client's text (SET and RESET of search_path, DEALLOCATE and DISCARD ALL, UNLISTEN *), found by their
 * first words. The SQL classifier of the replicas work (libpg_query) lives here too.
 *
 * Threads: no state; any thread. Ownership: borrows (sql, len), keeps nothing; writes into caller memory.
 * Never: parses more than the first words of a statement it does not need.
 */
#ifndef TERN_SQL_H
#define TERN_SQL_H

#include "base/base.h"

#include <stddef.h>
#include <stdint.h>

/* What sql_parse_search_path_set writes for RESET search_path or RESET ALL: the value that SET takes to
 * mean the server's default. */
#define SQL_SEARCH_PATH_RESET "DEFAULT"

/* Skips blanks and comments from p. */
const uint8_t *sql_skip_blank(const uint8_t *p, const uint8_t *end);
/* Consumes `word` (ASCII, case-insensitive, not a prefix of a longer identifier) and the blanks after it;
 * false, with *p unchanged, when the text does not start with it. */
bool sql_take_word(const uint8_t **p, const uint8_t *end, const char *word);
/* True when `sql` holds "search_path" or "reset" anywhere (ASCII, any case): without either, a SET it
 * runs (SET LOCAL, SET TRANSACTION...) cannot have changed search_path. */
bool sql_mentions_search_path(const uint8_t *sql, uint32_t len);
/* "into" anywhere in the text, in any case (inside a word or a literal too: a caller that reads it as
 * "may write" errs on the safe side). */
bool sql_mentions_into(const uint8_t *sql, uint32_t len);
/* For the one statement of a Parse: true when it is a SET or RESET that mentions search_path (above).
 * Reads the first word of most texts only. */
bool sql_statement_may_set_search_path(const uint8_t *sql, uint32_t len);
/* True when the first statement of `sql` is DEALLOCATE [PREPARE] ALL or DISCARD ALL. */
bool sql_is_forget_all(const uint8_t *sql, uint32_t len);
/* True when the first statement of `sql` is UNLISTEN *, which ends every LISTEN of the session. */
bool sql_is_unlisten_all(const uint8_t *sql, uint32_t len);
/* When the first statement of a simple query is SET [SESSION] search_path {TO | =} value, RESET
 * search_path or RESET ALL: writes the value as written (SQL_SEARCH_PATH_RESET for a reset) and returns
 * 1. 0 for any other statement (SET LOCAL included), -ENOSPC when the value does not fit. */
TERN_MUST_USE int sql_parse_search_path_set(const uint8_t *sql, uint32_t len, char *value, size_t value_size);
/* When `sql` (up to its NUL or len) is exactly "DEALLOCATE [PREPARE] name [;]": writes the name as
 * PostgreSQL reads it (an unquoted one folded to lower case) and returns 1; else 0, also for a name of
 * name_size bytes or more. */
TERN_MUST_USE int sql_parse_deallocate(const uint8_t *sql, uint32_t len, char *name, size_t name_size);

/* What sql_parse_savepoint found. */
enum sql_savepoint_kind { SQL_SAVEPOINT_NONE = 0, SQL_SAVEPOINT_SET, SQL_SAVEPOINT_RELEASE, SQL_SAVEPOINT_ROLLBACK_TO };
/* When `sql` is exactly SAVEPOINT name, RELEASE [SAVEPOINT] name or ROLLBACK [WORK | TRANSACTION] TO
 * [SAVEPOINT] name: its kind, with the name written as PostgreSQL reads it; else SQL_SAVEPOINT_NONE. */
TERN_MUST_USE int sql_parse_savepoint(const uint8_t *sql, uint32_t len, char *name, size_t name_size);

#endif
