/*
 * classify.h — what a query is, for routing reads to replicas (issue 10) and for Transaction Replay's
 * `select` mode: read with the real PostgreSQL parser (libpg_query, PostgreSQL 15's grammar), with a
 * lexer fast path for COMMIT, ROLLBACK and SHOW. A top-level SELECT is a read only if it has no locking
 * clause (FOR UPDATE/SHARE/NO KEY UPDATE/KEY SHARE), no data-modifying CTE, no INTO, and calls no
 * function outside the side-effect-free list (built-in names plus `read_functions`; the schema is
 * ignored; a call through a quoted identifier is never on the list). Anything it cannot parse is a
 * write. route.c routes by it.
 *
 * Threads: any; pure functions of their inputs (libpg_query keeps per-thread memory contexts), but for
 * a classify_cache, which is one worker's.
 * Ownership: the caller owns the result and the cache; nothing points into the query text after a call.
 * Never: sees a session, a connection or a message (it is given a query's text), or decides where a
 * query goes (route.c does) or whether to replay it (replay/decide.c does).
 */
#ifndef TERN_CLASSIFY_H
#define TERN_CLASSIFY_H

#include "base.h"

/* Query texts classified at all; a longer one is taken as a write without parsing (parsing costs). */
#define CLASSIFY_TEXT_MAX (64u * 1024u)
/* Statements of a multi-statement Query looked at one by one. */
#define CLASSIFY_STATEMENTS_MAX 64u

enum classify_kind {
	CLASSIFY_WRITE = 0,      /* may change data or server state: never on a replica */
	CLASSIFY_READ,           /* a read a replica may serve */
	CLASSIFY_BEGIN,          /* BEGIN / START TRANSACTION (isolation, read_only below) */
	CLASSIFY_COMMIT,         /* COMMIT / END */
	CLASSIFY_ROLLBACK,       /* ROLLBACK / ABORT */
	CLASSIFY_TRANSACTION,    /* SAVEPOINT, RELEASE, ROLLBACK TO, PREPARE TRANSACTION, ... */
	CLASSIFY_SET,            /* SET / RESET of a parameter (is_local for SET LOCAL) */
	CLASSIFY_SET_TRANSACTION, /* SET TRANSACTION ... (isolation, read_only below) */
	CLASSIFY_DISCARD,        /* DISCARD ALL / PLANS / SEQUENCES / TEMP */
};

enum classify_isolation {
	CLASSIFY_ISOLATION_DEFAULT = 0, /* not named */
	CLASSIFY_READ_UNCOMMITTED,
	CLASSIFY_READ_COMMITTED,
	CLASSIFY_REPEATABLE_READ,
	CLASSIFY_SERIALIZABLE,
};

struct classify_result {
	enum classify_kind kind;   /* of the whole text: a multi-statement text is a read only if every one is */
	uint32_t statement_count;  /* 0 for an empty query */
	enum classify_isolation isolation; /* BEGIN, SET TRANSACTION */
	bool is_read_only;         /* BEGIN ... READ ONLY, SET TRANSACTION READ ONLY */
	bool is_local;             /* SET LOCAL */
	bool is_show;              /* a read that is a SHOW (not a SELECT) */
	/* Why a SELECT is a write (any of them makes it one). */
	bool has_locking_clause;
	bool has_write_cte;
	bool is_select_into;
	bool calls_unsafe_function;
	bool is_parse_error; /* or too long, or too many statements: a write */
	bool has_copy;       /* a COPY (a write): nothing may be queued behind it before its end */
	bool has_commit;     /* a statement that commits: COMMIT, END, PREPARE TRANSACTION, COMMIT PREPARED */
	bool is_select_only; /* every statement a SELECT, VALUES or SHOW */
	bool is_fast_path;   /* answered by the lexer, without the parser */
};

/* `read_functions`: comma-separated function names a read may call beyond the built-in list (NULL: none).
 * `sql` is NUL-terminated (a Query's text). Always fills `out`. */
void classify_query(const char *sql, const char *read_functions, struct classify_result *out);
/* The lexer's part alone (no parse): true when it knows the text (a bare COMMIT, ROLLBACK, SHOW). */
bool classify_fast_path(const char *sql, struct classify_result *out);

/* One statement of a text: where it starts and how long it is (without its ';'). */
struct classify_span {
	uint32_t start, len;
};
/* The statements of a NUL-terminated text as the server's parser splits it (a function body's ';'
 * inside BEGIN ATOMIC included), at most `max`: their count, or -1 when it does not parse (the server
 * runs none of them, unless its grammar is newer than libpg_query's), is too long or has more. */
int classify_split(const char *sql, struct classify_span *spans, uint32_t max);


/* ---- a worker's cache of classifications, by the query's shape ---- */

/* A query's shape: its text with every number and plain string literal replaced by '?' and blanks
 * collapsed. What classify_query says depends on the shape alone (never on a literal's value), so
 * queries that differ only in their literals share one entry. A text is cached only when its shape is
 * certain: no comment, dollar quote, quoted identifier, prefixed string (E'', B'', X'', U&'', N'') or
 * backslash in a string; at most CLASSIFY_SHAPE_MAX bytes. 0: not cacheable. */
#define CLASSIFY_SHAPE_MAX 240u
size_t classify_shape(const char *sql, char *out, size_t cap);

#define CLASSIFY_CACHE_SLOTS 512u
struct classify_cache_slot {
	uint64_t hash; /* 0: empty */
	uint16_t len;
	char shape[CLASSIFY_SHAPE_MAX];
	struct classify_result result;
};
/* Direct-mapped; one per worker, touched by its thread only. */
struct classify_cache {
	const void *tag; /* what the entries were classified under (the configuration, for read_functions) */
	uint64_t hits, misses;
	struct classify_cache_slot slots[CLASSIFY_CACHE_SLOTS];
};
/* classify_query through the cache; `tag` changing (a reload's new read_functions) empties it. */
void classify_cached(struct classify_cache *cache, const void *tag, const char *sql, const char *read_functions,
		     struct classify_result *out);

#endif
