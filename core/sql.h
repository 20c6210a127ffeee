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

#include "base.h"

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
/* True when `sql` may leave server state that lives as long as the session and that no other connection
 * has: a temporary table, view or sequence (the word TEMP or TEMPORARY), a cursor WITH HOLD (HOLD), a
 * session-level advisory lock (pg_advisory_lock, pg_try_advisory_lock, their _shared forms). Words, any
 * case, anywhere (a column named "temp" too: a caller reading it as "may hold" errs on the safe side). */
bool sql_may_hold_session_state(const uint8_t *sql, uint32_t len);
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

/* What sql_parse_set found: a statement that changes the session's SET state as Transaction Replay
 * restores it (replay/restore_set.h), or the savepoint and rollback statements its rules follow. */
enum sql_set_kind {
	SQL_SET_NONE = 0,     /* none of these; SET LOCAL, SET TRANSACTION and SET CONSTRAINTS included */
	SQL_SET_VALUE,        /* SET [SESSION] name {TO | =} value; SET TIME ZONE, NAMES, SCHEMA, ROLE, SESSION
			       * AUTHORIZATION, XML OPTION as their variables */
	SQL_SET_RESET,        /* RESET name, or a SET of name to its default (TO DEFAULT, ROLE NONE, TIME ZONE LOCAL) */
	SQL_SET_RESET_ALL,
	SQL_SET_DISCARD_ALL,
	SQL_SET_SAVEPOINT,
	SQL_SET_RELEASE,
	SQL_SET_ROLLBACK_TO,
	SQL_SET_ROLLBACK,     /* ROLLBACK or ABORT, [AND [NO] CHAIN] */
	SQL_SET_UNKNOWN,      /* a session SET tern cannot keep as written: a comment or an escape string in its
			       * value, SET SESSION CHARACTERISTICS, a name too long */
};
/* The CommandComplete tag a statement of that kind answers with ("" for SQL_SET_NONE). */
const char *sql_set_tag(enum sql_set_kind kind);
/* The one statement in [sql, sql + len) (a ';' may end it): its kind, with the variable or savepoint it
 * names in `name` (lower case; a custom variable's two parts with their dot), and in *start, *stmt_len
 * the statement as the client wrote it, from its first word to its value's end. */
enum sql_set_kind sql_parse_set(const uint8_t *sql, uint32_t len, char *name, size_t name_size, uint32_t *start,
				uint32_t *stmt_len);
/* Whether a statement sql_parse_set names may be anywhere in the text: a word of them (set, reset,
 * discard, savepoint, release, rollback, abort) in any case, anywhere (inside a word too). */
bool sql_may_set(const uint8_t *sql, uint32_t len);

/* True when `sql` is exactly one COMMIT, END, ROLLBACK or ABORT [WORK | TRANSACTION] AND CHAIN (a ';'
 * may end it): the transaction ends and another with its characteristics begins at once. */
bool sql_is_chain_end(const uint8_t *sql, uint32_t len);

/* What sql_parse_listen found. */
enum sql_listen_kind { SQL_LISTEN_NONE = 0, SQL_LISTEN, SQL_UNLISTEN, SQL_UNLISTEN_ALL };
/* When `sql` (up to its NUL or len) is exactly LISTEN name, UNLISTEN name or UNLISTEN * (a ';' may
 * follow): its kind, with the name written as PostgreSQL reads it (none for UNLISTEN *); else
 * SQL_LISTEN_NONE, also for a name of name_size bytes or more. */
TERN_MUST_USE int sql_parse_listen(const uint8_t *sql, uint32_t len, char *name, size_t name_size);
/* What sql_parse_savepoint found. */
enum sql_savepoint_kind { SQL_SAVEPOINT_NONE = 0, SQL_SAVEPOINT_SET, SQL_SAVEPOINT_RELEASE, SQL_SAVEPOINT_ROLLBACK_TO };
/* When `sql` is exactly SAVEPOINT name, RELEASE [SAVEPOINT] name or ROLLBACK [WORK | TRANSACTION] TO
 * [SAVEPOINT] name: its kind, with the name written as PostgreSQL reads it; else SQL_SAVEPOINT_NONE. */
TERN_MUST_USE int sql_parse_savepoint(const uint8_t *sql, uint32_t len, char *name, size_t name_size);

#endif
