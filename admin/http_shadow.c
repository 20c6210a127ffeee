/* POST /api/shadow (http_shadow.h): one statement on a source and on a shadow server, compared. Owns the two
 * libpq connections of a request, for its length only; never touches the pool, a worker or a session. */
#include "http_internal.h"
#include "http_shadow.h"
#include "shadow.h"

#include "classify.h"
#include "config.h"
#include "runtime.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one side did. */
struct shadow_side {
	const char *name;   /* "source" or "shadow" */
	const char *target; /* its conninfo (shadow_target_conninfo) */
	bool is_server;     /* a [servers] key's: the body's database and user go with it */
	bool is_ok;         /* the statement ran (its rows are below) */
	char sqlstate[6];   /* else: its error (or 08006 when it could not connect) */
	char message[256];
	double ms;          /* connect excluded: the statement (and its read-only transaction) */
	struct shadow_rows rows;
	int columns;
	char tag[64]; /* its CommandComplete tag ("SELECT 3", "UPDATE 1") */
};

static void http_shadow_fail(struct shadow_side *side, const char *sqlstate, const char *message)
{
	side->is_ok = false;
	snprintf(side->sqlstate, sizeof(side->sqlstate), "%s", sqlstate ? sqlstate : "XX000");
	snprintf(side->message, sizeof(side->message), "%s", message ? message : "");
	size_t n = strlen(side->message); /* (libpq ends its messages with a newline) */
	while (n > 0 && side->message[n - 1] == '\n')
		side->message[--n] = '\0';
}

/* The statement on one side (shadow_exec: a READ ONLY transaction unless writes are allowed), bounded
 * by statement_timeout. */
static void http_shadow_run_side(struct shadow_side *side, const char *sql, const char *database, const char *user,
				 bool allow_writes, uint32_t timeout_ms)
{
	PGconn *conn = shadow_connect(side->target, side->is_server, database, user, timeout_ms);
	if (PQstatus(conn) != CONNECTION_OK) {
		http_shadow_fail(side, "08006", PQerrorMessage(conn));
		PQfinish(conn);
		return;
	}
	uint64_t started = base_now_ns();
	PGresult *res = shadow_exec(conn, sql, !allow_writes);
	side->ms = (double)(base_now_ns() - started) / 1e6;
	ExecStatusType status = PQresultStatus(res);
	if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
		http_shadow_fail(side, res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : "08006",
				 res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : PQerrorMessage(conn));
	} else if (!shadow_rows_of(res, &side->rows)) {
		http_shadow_fail(side, "53200", "out of memory");
	} else {
		side->is_ok = true;
		side->columns = PQnfields(res);
		snprintf(side->tag, sizeof(side->tag), "%s", PQcmdStatus(res));
	}
	PQclear(res);
	PQfinish(conn);
}

static json_t *http_shadow_side_json(const struct shadow_side *side)
{
	char hash[33];
	snprintf(hash, sizeof(hash), "%016llx%016llx", (unsigned long long)side->rows.high,
		 (unsigned long long)side->rows.low);
	if (!side->is_ok)
		return json_pack("{s:n, s:n, s:f, s:{s:s, s:s}}", "rows", "hash", "ms", side->ms, "error", "sqlstate",
				 side->sqlstate, "message", side->message);
	return json_pack("{s:I, s:i, s:s, s:s, s:f, s:n}", "rows", (json_int_t)side->rows.count, "columns", side->columns,
			 "hash", hash, "tag", side->tag, "ms", side->ms, "error");
}

/* Both sides ran: the same rows (count, columns, hash) and tag, or the same SQLSTATE. */
static bool http_shadow_is_clean(const struct shadow_side *a, const struct shadow_side *b)
{
	if (!a->is_ok || !b->is_ok)
		return !a->is_ok && !b->is_ok && strcmp(a->sqlstate, b->sqlstate) == 0;
	return a->rows.count == b->rows.count && a->columns == b->columns && a->rows.low == b->rows.low &&
	       a->rows.high == b->rows.high && strcmp(a->tag, b->tag) == 0;
}

static char *http_shadow_error(unsigned *status, unsigned code, const char *message)
{
	*status = code;
	return http_error_body(message);
}

char *http_shadow_request(struct tern_runtime *rt, const char *body, size_t len, unsigned *status)
{
	const struct tern_config *cfg = runtime_config(rt);
	json_error_t jerr;
	json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
	char err[256];
	if (!root || !json_is_object(root)) {
		json_decref(root);
		return http_shadow_error(status, 400, "the body must be a JSON object: {\"sql\", \"shadow\", \"source\", "
						 "\"database\", \"user\", \"allow_writes\"}");
	}
	const char *sql = NULL, *source = NULL, *shadow = NULL, *database = "postgres", *user = "postgres";
	bool allow_writes = false;
	const char *key;
	json_t *value;
	json_object_foreach(root, key, value) {
		const char **text = strcmp(key, "sql") == 0	       ? &sql
				    : strcmp(key, "source") == 0   ? &source
				    : strcmp(key, "shadow") == 0   ? &shadow
				    : strcmp(key, "database") == 0 ? &database
				    : strcmp(key, "user") == 0	       ? &user
								       : NULL;
		if (text && json_is_string(value) && json_string_value(value)[0]) {
			*text = json_string_value(value);
		} else if (strcmp(key, "allow_writes") == 0 && json_is_boolean(value)) {
			allow_writes = json_is_true(value);
		} else {
			snprintf(err, sizeof(err), "%.64s: expected %s", key,
				 text ? "a non-empty string"
				 : strcmp(key, "allow_writes") == 0
				     ? "true or false"
				     : "one of sql, shadow, source, database, user, allow_writes");
			json_decref(root);
			return http_shadow_error(status, 400, err);
		}
	}
	if (!sql || !shadow) {
		json_decref(root);
		return http_shadow_error(status, 400, "sql and shadow are required (shadow: a [servers] key or a libpq "
						 "connection string; source defaults to the primary)");
	}
	struct classify_result c;
	classify_query(sql, cfg->read_functions, &c);
	if (!allow_writes && (c.kind != CLASSIFY_READ || c.statement_count != 1)) {
		json_decref(root);
		return http_shadow_error(status, 400, "only one read (a SELECT, VALUES or SHOW tern classifies as a read) runs "
						 "without \"allow_writes\": true");
	}
	struct shadow_side *sides = calloc(2, sizeof(*sides));
	if (!sides) {
		json_decref(root);
		return http_shadow_error(status, 500, "no memory");
	}
	sides[0].name = "source";
	sides[1].name = "shadow";
	const char *named[] = {source ? source : runtime_primary(rt)->name, shadow};
	for (int i = 0; i < 2; i++) {
		sides[i].target = shadow_target_conninfo(rt, named[i], &sides[i].is_server);
		if (!sides[i].target) {
			snprintf(err, sizeof(err), "%s: \"%.64s\" is neither a [servers] key nor a libpq connection "
				 "string (key=value)", sides[i].name, named[i]);
			free(sides);
			json_decref(root);
			return http_shadow_error(status, 400, err);
		}
	}
	for (int i = 0; i < 2; i++)
		http_shadow_run_side(&sides[i], sql, database, user, allow_writes, cfg->replay_deadline_secs * 1000u);
	bool is_clean = http_shadow_is_clean(&sides[0], &sides[1]);
	TERN_INFO("POST /api/shadow: %s (source %.1f ms, shadow %.1f ms)", is_clean ? "clean" : "differs", sides[0].ms,
		  sides[1].ms);
	json_t *answer = json_pack("{s:b, s:o, s:o}", "is_clean", is_clean, "source", http_shadow_side_json(&sides[0]),
				   "shadow", http_shadow_side_json(&sides[1]));
	char *text = answer ? json_dumps(answer, JSON_INDENT(2)) : NULL;
	json_decref(answer);
	json_decref(root);
	free(sides);
	*status = text ? 200 : 500;
	return text;
}
