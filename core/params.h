/*
 * params.h — the server parameters tern keeps for each client in transaction pooling, so a client
 * that lands on a server connection set up differently gets its own values back with one SET before
 * its own messages (PgBouncer's "tracked parameters"). Only parameters the server reports with
 * ParameterStatus can be tracked: that is how tern learns a client changed one.
 *
 * Threads: the tracked-name list is built once at startup and read-only after; a session's values
 * belong to its worker. Ownership: callers own every buffer; a params_tracked owns its extra names.
 * Never: reads a message or sends a SET: observer_params.c watches the protocol and sends what this builds.
 */
#ifndef TERN_PARAMS_H
#define TERN_PARAMS_H

#include "base.h"
#include "pool.h"
#include "sql.h"

/* Names tracked at once: the built-in six plus track_extra_parameters. */
#define PARAMS_TRACKED_MAX 16u
/* A tracked value longer than this is left untracked (and logged): no reported parameter's usual values
 * come close (application_name is at most 63 bytes). */
#define PARAMS_VALUE_MAX 128u

struct params_tracked {
	const char *names[PARAMS_TRACKED_MAX];
	uint32_t count;
	char *storage; /* the extra names, owned */
};

/* The built-in names, then the comma-separated `extra` ones. 0 or -E2BIG / -ENOMEM. */
TERN_MUST_USE int params_tracked_init(struct params_tracked *tracked, const char *extra);
void params_tracked_deinit(struct params_tracked *tracked);
/* The index of `name` (case-insensitive, as GUC names are), or -1. */
int params_tracked_index(const struct params_tracked *tracked, const char *name);

/* A client's tracked values; value[i][0] == '\0' with is_set clear means "as the server has it". */
struct params_values {
	char value[PARAMS_TRACKED_MAX][PARAMS_VALUE_MAX];
	uint32_t is_set; /* bit i: value[i] holds the client's value */
};

/* A client's parameters and search_path, as observer_params.c keeps them in transaction pooling. */
struct params_state {
	struct params_values values; /* the tracked parameters */
	uint32_t changed; /* bit i: the client's own statements changed tracked parameter i since its login */
	/* search_path as the client last SET it outside a transaction ("" = never), and the value of a SET
	 * sent whose success (its CommandComplete, then ReadyForQuery 'I' with no error) is awaited. */
	char search_path[PARAMS_VALUE_MAX];
	char pending_search_path[PARAMS_VALUE_MAX];
	bool is_search_path_pending;
	bool is_search_path_confirmed;
	/* A SET tern could not attribute ran (extended protocol, in a transaction block, a second SET in one
	 * query): search_path above may be stale. Before the connection goes back, tern asks the server
	 * (a hidden SHOW search_path, is_learning_search_path while its answer comes). */
	bool is_search_path_stale;
	bool is_learning_search_path;
	/* Since nothing was last in flight: a Query or Parse text read named search_path (or RESET), or a
	 * Query was too long to read (queries_unread counts those begun and not read). A SET tag with
	 * neither cannot have changed search_path (SET LOCAL app.x in every transaction costs nothing). */
	bool is_search_path_mentioned;
	bool is_unnamed_naming_search_path; /* the unnamed statement's text names search_path or RESET */
	uint32_t queries_unread;
	/* The tracked values and search_path as one number (0: not computed since they last changed): a
	 * connection whose restored_fingerprint equals it needs no SET. */
	uint64_t fingerprint;
};

/* The client's value of tracked parameter `index` (its startup packet's, or the welcome's). */
static inline void params_set_client_value(struct params_state *p, int index, const char *value)
{
	if (value != p->values.value[index])
		base_strlcpy(p->values.value[index], value, PARAMS_VALUE_MAX);
	p->values.is_set |= 1u << index;
}

/* observer_stmts reads the extended protocol: a Parse whose text names search_path (or RESET), or a
 * Bind of a statement whose text did, may change it; `is_unnamed` records the unnamed statement's. */
static inline void params_note_statement(struct params_state *p, bool names_search_path, bool is_unnamed_parse)
{
	p->is_search_path_mentioned |= names_search_path;
	if (is_unnamed_parse)
		p->is_unnamed_naming_search_path = names_search_path;
}

/* The value of `name` among a connection's reported parameters (case-insensitive), or NULL. */
const char *params_find(const struct pool_param *params, uint32_t count, const char *name);
/* Records a reported value in a connection's parameter list, replacing or appending. */
void params_store(struct pool_param *params, uint32_t *count, const char *name, const char *value);
/* "SET a TO 'x'; SET b TO 'y'" for every tracked value the client set that the connection has
 * differently. Returns the length, 0 when nothing differs, or -ENOSPC. */
TERN_MUST_USE int params_build_set(const struct params_tracked *tracked, const struct params_values *client,
				   const struct pool_param *conn, uint32_t conn_count, char *out, size_t out_size);

/* search_path, which PostgreSQL before 18 does not report, is tracked from the client's own SQL: the
 * value as the client wrote it, replayed verbatim with "SET search_path TO <value>" (so it parses as
 * the client's did). PARAMS_SEARCH_PATH_DEFAULT stands for RESET; PARAMS_SEARCH_PATH_KEY is where a
 * connection's value is kept among its parameters (a name no server reports). */
#define PARAMS_SEARCH_PATH_DEFAULT SQL_SEARCH_PATH_RESET
#define PARAMS_SEARCH_PATH_KEY "tern.search_path"
/* A connection whose search_path may have been changed in a way tern could not follow. */
#define PARAMS_SEARCH_PATH_UNKNOWN "\x01unknown"
#endif
