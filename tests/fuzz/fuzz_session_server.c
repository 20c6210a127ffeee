/*
 * fuzz_session_server.c — the fake PostgreSQL server of fuzz_session.c, and the canned messages its
 * input names by number.
 *
 * The fake server reads what tern sent on one connection and answers each request the way PostgreSQL
 * would in outline: a Query statement by statement (BEGIN, COMMIT and ROLLBACK move its transaction
 * status; SELECT and SHOW return one row; COPY FROM STDIN waits for CopyData and CopyDone; COPY TO STDOUT
 * sends a row; a statement whose text holds "error" fails), and the extended protocol message by message
 * (Parse, Bind, Describe, Execute, Close, Sync, with the statements and portals it was given, and the skip
 * to Sync after an error). It is deterministic: the same requests get the same bytes, so Transaction
 * Replay's check of a replayed answer passes when the requests are the same. It is no oracle: tern's own
 * assertions, the sanitizers and the harness's end-of-run checks are.
 */
#include "fuzz_session.h"

#include "proto.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- bytes ---- */

void fuzz_bytes_append(struct fuzz_bytes *b, const void *data, uint32_t len)
{
	if (len == 0 || b->len + (uint64_t)len > FUZZ_BYTES_MAX)
		return;
	if (b->len + len > b->cap) {
		uint32_t cap = b->cap ? b->cap : 256u;
		while (cap < b->len + len)
			cap *= 2;
		b->data = realloc(b->data, cap);
		FUZZ_CHECK(b->data != NULL);
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

void fuzz_bytes_consume(struct fuzz_bytes *b, uint32_t n)
{
	FUZZ_CHECK(n <= b->len);
	if (n == 0)
		return;
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
}

void fuzz_bytes_free(struct fuzz_bytes *b)
{
	free(b->data);
	*b = (struct fuzz_bytes){0};
}

void fuzz_bytes_message(struct fuzz_bytes *b, uint8_t type, const void *body, uint32_t len)
{
	if (b->len + (uint64_t)len + PROTO_HEADER_LEN > FUZZ_BYTES_MAX)
		return; /* whole or not at all: the peer's stream stays framed */
	uint8_t header[PROTO_HEADER_LEN] = {type};
	proto_write_u32(header + 1, len + 4);
	fuzz_bytes_append(b, header, sizeof(header));
	fuzz_bytes_append(b, body, len);
}

/* ---- canned messages ---- */

struct fuzz_canned {
	uint8_t type;
	const char *body;
	uint32_t len;
};
/* A body written as a string literal, its NULs included (the literal's own terminator is not). */
#define FUZZ_M(type, literal) {(type), (literal), sizeof(literal) - 1}

static const struct fuzz_canned fuzz_client_canned[] = {
	FUZZ_M('Q', "SELECT 1\0"),
	FUZZ_M('Q', "BEGIN\0"),
	FUZZ_M('Q', "COMMIT\0"),
	FUZZ_M('Q', "ROLLBACK\0"),
	FUZZ_M('Q', "INSERT INTO t VALUES (1)\0"),
	FUZZ_M('Q', "UPDATE t SET a = 2\0"),
	FUZZ_M('Q', "COPY t FROM STDIN\0"),
	FUZZ_M('Q', "COPY t TO STDOUT\0"),
	FUZZ_M('Q', "SET search_path TO app\0"),
	FUZZ_M('Q', "SET application_name = 'fz2'\0"),
	FUZZ_M('Q', "SET TimeZone = 'UTC'\0"),
	FUZZ_M('Q', "RESET ALL\0"),
	FUZZ_M('Q', "DISCARD ALL\0"),
	FUZZ_M('Q', "LISTEN ch\0"),
	FUZZ_M('Q', "UNLISTEN *\0"),
	FUZZ_M('Q', "PREPARE q AS SELECT 1\0"),
	FUZZ_M('Q', "EXECUTE q\0"),
	FUZZ_M('Q', "DEALLOCATE ALL\0"),
	FUZZ_M('Q', "SET tern.consistency = eventual\0"),
	FUZZ_M('Q', "SHOW tern.consistency\0"),
	FUZZ_M('Q', "SET tern.transaction_split = on\0"),
	FUZZ_M('Q', "RESET tern.consistency\0"),
	FUZZ_M('Q', "BEGIN READ ONLY\0"),
	FUZZ_M('Q', "SET TRANSACTION READ ONLY\0"),
	FUZZ_M('Q', "BEGIN ISOLATION LEVEL SERIALIZABLE\0"),
	FUZZ_M('Q', "SAVEPOINT a\0"),
	FUZZ_M('Q', "ROLLBACK TO SAVEPOINT a\0"),
	FUZZ_M('Q', "RELEASE SAVEPOINT a\0"),
	FUZZ_M('Q', "SELECT 1; SELECT 2\0"),
	FUZZ_M('Q', "\0"),
	FUZZ_M('Q', "SET LOCAL work_mem = '1MB'\0"),
	FUZZ_M('Q', "PREPARE TRANSACTION 'x'\0"),
	FUZZ_M('Q', "SELECT error\0"),
	FUZZ_M('Q', "END\0"),
	FUZZ_M('Q', "START TRANSACTION\0"),
	FUZZ_M('Q', "SHOW search_path\0"),
	FUZZ_M('Q', "SET search_path = \"$user\", other\0"),
	FUZZ_M('Q', "DECLARE c CURSOR WITH HOLD FOR SELECT 1\0"),
	FUZZ_M('Q', "SELECT set_config('search_path', 'x', false)\0"),
	FUZZ_M('Q', "BEGIN; INSERT INTO t VALUES (1); COMMIT\0"),
	FUZZ_M('Q', "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY\0"),
	/* Parse: name, text, parameter types */
	FUZZ_M('P', "\0SELECT $1\0\0\1\0\0\0\x17"),
	FUZZ_M('P', "s1\0SELECT 1\0\0\0"),
	FUZZ_M('P', "s2\0INSERT INTO t VALUES ($1)\0\0\0"),
	FUZZ_M('P', "\0BEGIN\0\0\0"),
	FUZZ_M('P', "\0COMMIT\0\0\0"),
	FUZZ_M('P', "s3\0COPY t FROM STDIN\0\0\0"),
	FUZZ_M('P', "\0SELECT error\0\0\0"),
	FUZZ_M('P', "s1\0SELECT 2\0\0\0"),
	FUZZ_M('P', "\0DEALLOCATE ALL\0\0\0"),
	FUZZ_M('P', "\0SET search_path TO x\0\0\0"),
	FUZZ_M('P', "\0SELECT 1\0\0\0"),
	/* Bind: portal, statement, formats, parameters, result formats */
	FUZZ_M('B', "\0\0\0\0\0\0\0\0"),
	FUZZ_M('B', "\0s1\0\0\0\0\0\0\0"),
	FUZZ_M('B', "\0s2\0\0\0\0\1\0\0\0\1" "1" "\0\0"),
	FUZZ_M('B', "p1\0s1\0\0\0\0\0\0\0"),
	FUZZ_M('B', "\0\0\0\0\0\1\0\0\0\1" "7" "\0\0"),
	FUZZ_M('B', "\0s3\0\0\0\0\0\0\0"),
	/* Describe, Execute, Close */
	FUZZ_M('D', "Ss1\0"),
	FUZZ_M('D', "P\0"),
	FUZZ_M('D', "S\0"),
	FUZZ_M('D', "Pp1\0"),
	FUZZ_M('E', "\0\0\0\0\0"),
	FUZZ_M('E', "p1\0\0\0\0\0"),
	FUZZ_M('E', "\0\0\0\0\1"),
	FUZZ_M('C', "Ss1\0"),
	FUZZ_M('C', "Pp1\0"),
	FUZZ_M('C', "S\0"),
	FUZZ_M('S', ""),
	FUZZ_M('H', ""),
	FUZZ_M('X', ""),
	FUZZ_M('F', "\0\0\0\1\0\0\0\0\0\0"),
	FUZZ_M('d', "1\n"),
	FUZZ_M('c', ""),
	FUZZ_M('f', "bad\0"),
};

/* RowDescription of one text column "x". */
#define FUZZ_ROW_DESCRIPTION "\0\1x\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0"

static const struct fuzz_canned fuzz_server_canned[] = {
	FUZZ_M('Z', "I"),
	FUZZ_M('Z', "T"),
	FUZZ_M('Z', "E"),
	FUZZ_M('C', "SELECT 1\0"),
	FUZZ_M('C', "BEGIN\0"),
	FUZZ_M('C', "COMMIT\0"),
	FUZZ_M('C', "ROLLBACK\0"),
	FUZZ_M('C', "SET\0"),
	FUZZ_M('C', "INSERT 0 1\0"),
	FUZZ_M('C', "COPY 1\0"),
	FUZZ_M('C', "DISCARD ALL\0"),
	FUZZ_M('C', "LISTEN\0"),
	FUZZ_M('C', "UNLISTEN\0"),
	FUZZ_M('C', "PREPARE\0"),
	FUZZ_M('C', "DEALLOCATE ALL\0"),
	FUZZ_M('C', "SHOW\0"),
	FUZZ_M('C', "RESET\0"),
	FUZZ_M('T', FUZZ_ROW_DESCRIPTION),
	FUZZ_M('D', "\0\1\0\0\0\1" "1"),
	FUZZ_M('1', ""),
	FUZZ_M('2', ""),
	FUZZ_M('3', ""),
	FUZZ_M('n', ""),
	FUZZ_M('t', "\0\0"),
	FUZZ_M('s', ""),
	FUZZ_M('I', ""),
	FUZZ_M('G', "\0\0\1\0\0"),
	FUZZ_M('H', "\0\0\1\0\0"),
	FUZZ_M('d', "1\n"),
	FUZZ_M('c', ""),
	FUZZ_M('E', "SERROR\0C42601\0Msyntax error\0\0"),
	FUZZ_M('E', "SFATAL\0C57P01\0Mterminating connection due to administrator command\0\0"),
	FUZZ_M('N', "SNOTICE\0C00000\0Mnotice\0\0"),
	FUZZ_M('S', "application_name\0other\0"),
	FUZZ_M('S', "search_path\0x\0"),
	FUZZ_M('A', "\0\0\0\1" "ch\0hello\0"),
	FUZZ_M('V', "\xff\xff\xff\xff"),
	FUZZ_M('W', "\0\0\0"),
	FUZZ_M('K', "\0\0\0\1\0\0\0\2"),
};

/* What the fake server fails a statement with, by number. */
static const struct fuzz_canned fuzz_server_errors[] = {
	FUZZ_M('E', "SERROR\0C42601\0Msyntax error\0\0"),
	FUZZ_M('E', "SERROR\0C40001\0Mcould not serialize access\0\0"),
	FUZZ_M('E', "SERROR\0C25006\0Mcannot execute in a read-only transaction\0\0"),
	FUZZ_M('E', "SERROR\0C57014\0Mcanceling statement due to user request\0\0"),
	FUZZ_M('E', "SFATAL\0C57P01\0Mterminating connection due to administrator command\0\0"),
	FUZZ_M('E', "SERROR\0C26000\0Mprepared statement does not exist\0\0"),
	FUZZ_M('E', "SERROR\0C42P05\0Mprepared statement already exists\0\0"),
	FUZZ_M('E', "SFATAL\0C08006\0Mconnection lost\0\0"),
};

static void fuzz_canned_put(struct fuzz_bytes *b, const struct fuzz_canned *table, size_t count, uint8_t index)
{
	const struct fuzz_canned *m = &table[index % count];
	fuzz_bytes_message(b, m->type, m->body, m->len);
}

void fuzz_canned_client(struct fuzz_bytes *b, uint8_t index)
{
	fuzz_canned_put(b, fuzz_client_canned, TERN_ARRAY_LEN(fuzz_client_canned), index);
}

void fuzz_canned_server(struct fuzz_bytes *b, uint8_t index)
{
	fuzz_canned_put(b, fuzz_server_canned, TERN_ARRAY_LEN(fuzz_server_canned), index);
}

void fuzz_server_error(struct fuzz_bytes *b, uint8_t error)
{
	fuzz_canned_put(b, fuzz_server_errors, TERN_ARRAY_LEN(fuzz_server_errors), error);
}

/* ---- the fake server ---- */

enum fuzz_sql_kind {
	FUZZ_SQL_OTHER = 0,
	FUZZ_SQL_SELECT,
	FUZZ_SQL_SHOW,
	FUZZ_SQL_BEGIN,
	FUZZ_SQL_COMMIT,
	FUZZ_SQL_ROLLBACK,
	FUZZ_SQL_ROLLBACK_TO,
	FUZZ_SQL_COPY_IN,
	FUZZ_SQL_COPY_OUT,
	FUZZ_SQL_EMPTY,
	FUZZ_SQL_ERROR,
};

void fuzz_server_init(struct fuzz_server *srv, int fd, struct pool_conn *conn)
{
	memset(srv, 0, sizeof(*srv));
	srv->fd = fd;
	srv->conn = conn;
	srv->tx_status = 'I';
}

void fuzz_server_deinit(struct fuzz_server *srv)
{
	fuzz_bytes_free(&srv->rx);
	fuzz_bytes_free(&srv->held);
	fuzz_bytes_free(&srv->out);
}

static bool fuzz_has_word(const char *text, size_t len, const char *word)
{
	size_t n = strlen(word);
	for (size_t i = 0; i + n <= len; i++)
		if (strncasecmp(text + i, word, n) == 0)
			return true;
	return false;
}

static bool fuzz_starts(const char *text, size_t len, const char *word)
{
	size_t n = strlen(word);
	return len >= n && strncasecmp(text, word, n) == 0;
}

static enum fuzz_sql_kind fuzz_sql_kind(const char *text, size_t len)
{
	while (len > 0 && (isspace((unsigned char)*text) || *text == '('))
		text++, len--;
	if (len == 0)
		return FUZZ_SQL_EMPTY;
	if (fuzz_has_word(text, len, "error"))
		return FUZZ_SQL_ERROR;
	if (fuzz_starts(text, len, "BEGIN") || fuzz_starts(text, len, "START"))
		return FUZZ_SQL_BEGIN;
	if (fuzz_starts(text, len, "COMMIT") || fuzz_starts(text, len, "END"))
		return FUZZ_SQL_COMMIT;
	if (fuzz_starts(text, len, "ROLLBACK TO"))
		return FUZZ_SQL_ROLLBACK_TO;
	if (fuzz_starts(text, len, "ROLLBACK") || fuzz_starts(text, len, "ABORT"))
		return FUZZ_SQL_ROLLBACK;
	if (fuzz_starts(text, len, "COPY"))
		return fuzz_has_word(text, len, "STDIN") ? FUZZ_SQL_COPY_IN : FUZZ_SQL_COPY_OUT;
	if (fuzz_starts(text, len, "SELECT") || fuzz_starts(text, len, "VALUES") || fuzz_starts(text, len, "WITH") ||
	    fuzz_starts(text, len, "EXECUTE") || fuzz_starts(text, len, "FETCH") || fuzz_starts(text, len, "TABLE"))
		return FUZZ_SQL_SELECT;
	if (fuzz_starts(text, len, "SHOW"))
		return FUZZ_SQL_SHOW;
	return FUZZ_SQL_OTHER;
}

static void fuzz_put(struct fuzz_server *srv, uint8_t type, const void *body, uint32_t len)
{
	fuzz_bytes_message(&srv->held, type, body, len);
}

static void fuzz_put_tag(struct fuzz_server *srv, const char *tag)
{
	fuzz_put(srv, PROTO_BE_COMMAND_COMPLETE, tag, (uint32_t)strlen(tag) + 1);
}

static void fuzz_put_row(struct fuzz_server *srv, const char *value)
{
	uint8_t row[160];
	uint32_t n = (uint32_t)TERN_MIN(strlen(value), sizeof(row) - 6);
	row[0] = 0;
	row[1] = 1;
	proto_write_u32(row + 2, n);
	memcpy(row + 6, value, n);
	fuzz_put(srv, PROTO_BE_DATA_ROW, row, 6 + n);
}

static void fuzz_put_row_description(struct fuzz_server *srv)
{
	fuzz_put(srv, PROTO_BE_ROW_DESCRIPTION, FUZZ_ROW_DESCRIPTION, sizeof(FUZZ_ROW_DESCRIPTION) - 1);
}

static void fuzz_put_ready(struct fuzz_server *srv)
{
	uint8_t status = (uint8_t)srv->tx_status;
	fuzz_put(srv, PROTO_BE_READY, &status, 1);
}

/* A statement failed: in a transaction, it is aborted. */
static void fuzz_put_error(struct fuzz_server *srv, uint8_t error)
{
	fuzz_server_error(&srv->held, error);
	if (srv->tx_status == 'T')
		srv->tx_status = 'E';
}

/* A message other than CopyData, CopyDone, CopyFail, Flush or Sync in copy-in: PostgreSQL ends the COPY
 * with this error and swallows the message (a Query so swallowed brings no ReadyForQuery of its own). */
static void fuzz_put_copy_violation(struct fuzz_server *srv, uint8_t type)
{
	char body[96];
	int n = snprintf(body, sizeof(body), "SERROR%cC08P01%cMunexpected message type 0x%02X during COPY from stdin%c", 0,
			 0, type, 0);
	fuzz_bytes_message(&srv->held, 'E', (const uint8_t *)body, (uint32_t)n + 1);
	if (srv->tx_status == 'T')
		srv->tx_status = 'E';
}

/* The tag PostgreSQL would give a statement the fake server knows nothing of: its first word, or two. */
static void fuzz_put_other_tag(struct fuzz_server *srv, const char *text, size_t len)
{
	static const struct {
		const char *prefix, *tag;
	} tags[] = {{"INSERT", "INSERT 0 1"}, {"UPDATE", "UPDATE 1"}, {"DELETE", "DELETE 1"},
		    {"DISCARD", "DISCARD ALL"}, {"DEALLOCATE ALL", "DEALLOCATE ALL"}, {"DEALLOCATE", "DEALLOCATE"},
		    {"RESET", "RESET"}, {"SET", "SET"}, {"LISTEN", "LISTEN"}, {"UNLISTEN", "UNLISTEN"},
		    {"PREPARE TRANSACTION", "PREPARE TRANSACTION"}, {"PREPARE", "PREPARE"}, {"SAVEPOINT", "SAVEPOINT"},
		    {"RELEASE", "RELEASE"}, {"DECLARE", "DECLARE CURSOR"}, {"CREATE", "CREATE TABLE"}};
	while (len > 0 && isspace((unsigned char)*text))
		text++, len--;
	for (size_t i = 0; i < TERN_ARRAY_LEN(tags); i++) {
		if (fuzz_starts(text, len, tags[i].prefix)) {
			fuzz_put_tag(srv, tags[i].tag);
			if (strcmp(tags[i].tag, "PREPARE TRANSACTION") == 0)
				srv->tx_status = 'I';
			return;
		}
	}
	fuzz_put_tag(srv, "OK");
}

/* One statement's answer without its ReadyForQuery; false when the rest of its Query is not run (an
 * error, or a COPY FROM STDIN that waits for its data). */
static bool fuzz_answer_statement(struct fuzz_server *srv, enum fuzz_sql_kind kind, const char *text, size_t len,
				  bool is_failed, uint8_t error, bool is_extended, uint32_t max_rows)
{
	if (srv->tx_status == 'E' && kind != FUZZ_SQL_COMMIT && kind != FUZZ_SQL_ROLLBACK &&
	    kind != FUZZ_SQL_ROLLBACK_TO) {
		fuzz_server_error(&srv->held, 0); /* 25P02 in PostgreSQL: any error does here */
		return false;
	}
	if (is_failed || kind == FUZZ_SQL_ERROR) {
		fuzz_put_error(srv, error);
		return false;
	}
	switch (kind) {
	case FUZZ_SQL_EMPTY:
		fuzz_put(srv, PROTO_BE_EMPTY_QUERY, NULL, 0);
		break;
	case FUZZ_SQL_BEGIN:
		fuzz_put_tag(srv, "BEGIN");
		if (srv->tx_status == 'I')
			srv->tx_status = 'T';
		break;
	case FUZZ_SQL_COMMIT:
		fuzz_put_tag(srv, srv->tx_status == 'E' ? "ROLLBACK" : "COMMIT");
		srv->tx_status = 'I';
		break;
	case FUZZ_SQL_ROLLBACK:
		fuzz_put_tag(srv, "ROLLBACK");
		srv->tx_status = 'I';
		break;
	case FUZZ_SQL_ROLLBACK_TO:
		fuzz_put_tag(srv, "ROLLBACK");
		if (srv->tx_status == 'E')
			srv->tx_status = 'T';
		break;
	case FUZZ_SQL_SELECT:
		if (!is_extended)
			fuzz_put_row_description(srv);
		fuzz_put_row(srv, "1");
		if (is_extended && max_rows == 1)
			fuzz_put(srv, PROTO_BE_PORTAL_SUSPENDED, NULL, 0);
		else
			fuzz_put_tag(srv, "SELECT 1");
		break;
	case FUZZ_SQL_SHOW:
		if (!is_extended)
			fuzz_put_row_description(srv);
		fuzz_put_row(srv, fuzz_has_word(text, len, "isolation") ? "read committed"
				  : fuzz_has_word(text, len, "search_path") ? "\"$user\", public"
									     : "on");
		fuzz_put_tag(srv, "SHOW");
		break;
	case FUZZ_SQL_COPY_IN:
		fuzz_put(srv, PROTO_BE_COPY_IN, "\0\0\1\0\0", 5);
		srv->is_copy_in = true;
		srv->is_copy_extended = is_extended;
		srv->copy_rows = 0;
		return false;
	case FUZZ_SQL_COPY_OUT:
		fuzz_put(srv, PROTO_BE_COPY_OUT, "\0\0\1\0\0", 5);
		fuzz_put(srv, 'd', "1\n", 2); /* CopyData */
		fuzz_put(srv, 'c', NULL, 0);
		fuzz_put_tag(srv, "COPY 1");
		break;
	case FUZZ_SQL_OTHER:
	case FUZZ_SQL_ERROR:
		fuzz_put_other_tag(srv, text, len);
		break;
	}
	return true;
}

/* A simple-protocol Query: each statement (split at semicolons outside quotes), then ReadyForQuery. */
static void fuzz_answer_query(struct fuzz_server *srv, const char *text, size_t len, uint32_t *statement,
			      uint32_t fail_at, uint8_t error)
{
	if (srv->is_copy_in) { /* a Query in copy-in ends the COPY with an error */
		srv->is_copy_in = false;
		fuzz_put_copy_violation(srv, 'Q');
		fuzz_put_ready(srv);
		return;
	}
	size_t start = 0;
	bool any = false;
	char quote = 0;
	for (size_t i = 0; i <= len; i++) {
		char c = i < len ? text[i] : ';';
		if (quote) {
			quote = c == quote ? 0 : quote;
			continue;
		}
		if (c == '\'' || c == '"') {
			quote = c;
			continue;
		}
		if (c != ';')
			continue;
		const char *part = text + start;
		size_t part_len = i - start;
		start = i + 1;
		enum fuzz_sql_kind kind = fuzz_sql_kind(part, part_len);
		if (kind == FUZZ_SQL_EMPTY && any)
			continue; /* "a;" is one statement */
		any = true;
		bool is_failed = ++*statement == fail_at;
		if (!fuzz_answer_statement(srv, kind, part, part_len, is_failed, error, false, 0)) {
			if (srv->is_copy_in)
				return; /* its ReadyForQuery follows CopyDone or CopyFail */
			break;
		}
	}
	fuzz_put_ready(srv);
}

static struct fuzz_server_name *fuzz_name_find(struct fuzz_server_name *names, const char *name)
{
	for (uint32_t i = 0; i < FUZZ_SERVER_NAMES_MAX; i++)
		if (names[i].is_used && strcmp(names[i].name, name) == 0)
			return &names[i];
	return NULL;
}

static void fuzz_name_put(struct fuzz_server_name *names, const char *name, uint8_t kind)
{
	struct fuzz_server_name *slot = fuzz_name_find(names, name);
	for (uint32_t i = 0; !slot && i < FUZZ_SERVER_NAMES_MAX; i++)
		if (!names[i].is_used)
			slot = &names[i];
	if (!slot)
		slot = &names[0]; /* full: the oldest name goes */
	slot->is_used = true;
	slot->kind = kind;
	snprintf(slot->name, sizeof(slot->name), "%s", name);
}

/* One extended-protocol message (or a COPY message, or a FunctionCall). True when it ended a request
 * (a Sync answered, a FunctionCall). */
static bool fuzz_answer_extended(struct fuzz_server *srv, uint8_t type, const uint8_t *body, uint32_t len,
				 uint32_t *statement, uint32_t fail_at, uint8_t error)
{
	uint32_t at = 0;
	if (srv->is_copy_in) {
		switch (type) {
		case 'd':
			srv->copy_rows++;
			return false;
		case 'c': {
			srv->is_copy_in = false;
			char tag[32];
			snprintf(tag, sizeof(tag), "COPY %u", srv->copy_rows);
			fuzz_put_tag(srv, tag);
			if (!srv->is_copy_extended) {
				fuzz_put_ready(srv);
				return true;
			}
			return false;
		}
		case 'f':
			srv->is_copy_in = false;
			fuzz_put_error(srv, 3);
			if (!srv->is_copy_extended) {
				fuzz_put_ready(srv);
				return true;
			}
			srv->is_skipping = true;
			return false;
		case 'S':
		case 'H':
			return false; /* ignored in copy-in, as PostgreSQL does */
		default:
			srv->is_copy_in = false;
			fuzz_put_copy_violation(srv, type);
			srv->is_skipping = srv->is_copy_extended;
			if (!srv->is_copy_extended) {
				fuzz_put_ready(srv);
				return true;
			}
			break; /* the message itself is skipped too */
		}
		return false;
	}
	if (type == 'S') {
		srv->is_skipping = false;
		fuzz_put_ready(srv);
		return true;
	}
	if (srv->is_skipping || type == 'H' || type == 'd' || type == 'c' || type == 'f')
		return false;
	switch (type) {
	case 'P': {
		const char *name = proto_read_cstring(body, len, &at);
		const char *text = name ? proto_read_cstring(body, len, &at) : NULL;
		if (!text)
			break;
		enum fuzz_sql_kind kind = fuzz_sql_kind(text, strlen(text));
		if (++*statement == fail_at || kind == FUZZ_SQL_ERROR ||
		    (name[0] && fuzz_name_find(srv->statements, name))) {
			fuzz_put_error(srv, kind == FUZZ_SQL_ERROR || *statement == fail_at ? error : 6);
			srv->is_skipping = true;
			break;
		}
		fuzz_name_put(srv->statements, name, (uint8_t)kind);
		fuzz_put(srv, PROTO_BE_PARSE_COMPLETE, NULL, 0);
		break;
	}
	case 'B': {
		const char *portal = proto_read_cstring(body, len, &at);
		const char *name = portal ? proto_read_cstring(body, len, &at) : NULL;
		const struct fuzz_server_name *stmt = name ? fuzz_name_find(srv->statements, name) : NULL;
		if (!stmt) {
			fuzz_put_error(srv, 5);
			srv->is_skipping = true;
			break;
		}
		fuzz_name_put(srv->portals, portal, stmt->kind);
		fuzz_put(srv, PROTO_BE_BIND_COMPLETE, NULL, 0);
		break;
	}
	case 'D': {
		if (len < 2)
			break;
		uint32_t name_at = 1;
		const char *name = proto_read_cstring(body, len, &name_at);
		bool is_statement = body[0] == 'S';
		struct fuzz_server_name *names = is_statement ? srv->statements : srv->portals;
		const struct fuzz_server_name *n = name ? fuzz_name_find(names, name) : NULL;
		if (!n) {
			fuzz_put_error(srv, 5);
			srv->is_skipping = true;
			break;
		}
		if (is_statement)
			fuzz_put(srv, PROTO_BE_PARAMETER_DESCRIPTION, "\0\0", 2);
		if (n->kind == FUZZ_SQL_SELECT || n->kind == FUZZ_SQL_SHOW)
			fuzz_put_row_description(srv);
		else
			fuzz_put(srv, PROTO_BE_NO_DATA, NULL, 0);
		break;
	}
	case 'E': {
		const char *portal = proto_read_cstring(body, len, &at);
		const struct fuzz_server_name *n = portal ? fuzz_name_find(srv->portals, portal) : NULL;
		if (!n) {
			fuzz_put_error(srv, 5);
			srv->is_skipping = true;
			break;
		}
		uint32_t max_rows = at + 4 <= len ? proto_read_u32(body + at) : 0;
		bool is_failed = ++*statement == fail_at;
		if (!fuzz_answer_statement(srv, n->kind, "", 0, is_failed, error, true, max_rows) && !srv->is_copy_in)
			srv->is_skipping = true;
		break;
	}
	case 'C': {
		if (len >= 2) {
			uint32_t name_at = 1;
			const char *name = proto_read_cstring(body, len, &name_at);
			struct fuzz_server_name *n =
				name ? fuzz_name_find(body[0] == 'S' ? srv->statements : srv->portals, name) : NULL;
			if (n)
				n->is_used = false;
		}
		fuzz_put(srv, PROTO_BE_CLOSE_COMPLETE, NULL, 0);
		break;
	}
	case 'F':
		fuzz_put(srv, 'V', "\xff\xff\xff\xff", 4);
		fuzz_put_ready(srv);
		return true;
	default:
		/* A type PostgreSQL does not know: it would end the connection; here it is only refused. */
		fuzz_put_error(srv, 0);
		srv->is_skipping = true;
		break;
	}
	return false;
}

void fuzz_server_answer(struct fuzz_server *srv, uint32_t limit, uint32_t fail_at, uint8_t error)
{
	uint32_t answered = 0, statement = 0;
	while (srv->rx.len >= PROTO_HEADER_LEN && (limit == 0 || answered < limit)) {
		uint8_t type = srv->rx.data[0];
		uint32_t length = proto_read_u32(srv->rx.data + 1);
		if (length < 4) { /* tern never frames so: the rest is dropped (tern's own checks say more) */
			srv->rx.len = 0;
			break;
		}
		if ((uint64_t)length + 1 > srv->rx.len)
			break; /* its rest has not come */
		const uint8_t *body = srv->rx.data + PROTO_HEADER_LEN;
		uint32_t body_len = length - 4;
		bool is_request_end;
		if (type == 'Q') {
			size_t text_len = strnlen((const char *)body, body_len);
			fuzz_answer_query(srv, (const char *)body, text_len, &statement, fail_at, error);
			is_request_end = true;
		} else {
			is_request_end = fuzz_answer_extended(srv, type, body, body_len, &statement, fail_at, error);
		}
		fuzz_bytes_consume(&srv->rx, length + 1);
		answered += is_request_end;
	}
}
