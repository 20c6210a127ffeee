/*
 * stmts.h — named prepared statements in transaction pooling (PgBouncer's max_prepared_statements).
 * A client's statement names map to statements identified by their text and parameter types; on a
 * server connection a statement lives under one name derived from that identity, so any client that
 * prepared the same text can use it there. Three pieces:
 *  - stmt: one statement's identity and Parse content (refcounted, shared by the maps that hold it);
 *  - stmt_map: a client's names → stmts;
 *  - stmt_cache: which statements a server connection holds, least recently used first out;
 *  - stmt_replies: the replies a session still expects from its server, in order, so tern can hide the
 *    answers to its own messages and place the answers it makes up itself where the server would.
 *
 * Threads: a map and a reply queue belong to one session (one worker); a cache to the connection and
 * so to whichever worker holds it. Ownership: maps and queues hold one reference on each stmt.
 * Never: does I/O or knows sessions and pools.
 */
#ifndef TERN_STMTS_H
#define TERN_STMTS_H

#include "base.h"

#include <stdint.h>

/* "tern_" + 32 hex digits of a 128-bit hash + NUL: well under PostgreSQL's NAMEDATALEN (64). */
#define STMT_SERVER_NAME_LEN 38u
/* A server connection holds at most this many statements whatever the config says: each costs the
 * server memory, and eviction scans the cache. */
#define STMT_CACHE_MAX 100000u
/* A client holds at most this many names whatever the config says (max_client_prepared_statements):
 * each costs tern about 200 bytes plus its text, so one client stays far below a gigabyte. */
#define STMT_MAP_NAMES_MAX 1000000u
/* Replies one leg may owe before the relay stops reading its client (back pressure), and below which it
 * reads again: a client that pipelines without reading the answers waits, as PostgreSQL makes it wait. */
#define STMT_REPLIES_HIGH 16384u
#define STMT_REPLIES_LOW 4096u
/* What one leg may owe at most: the high mark plus what one receive chunk (a buffer of at most 1 MiB,
 * messages of at least 5 bytes, at most 4 replies for one message) can add before reading stops. A push
 * past it fails; the session ends. */
#define STMT_REPLIES_MAX (STMT_REPLIES_HIGH + 4u * ((1u << 20) / 5u))

struct stmt {
	uint32_t refs;
	uint64_t hash_high, hash_low; /* of the Parse content: query text, NUL, parameter types */
	char server_name[STMT_SERVER_NAME_LEN];
	uint32_t content_len;
	bool names_search_path; /* its text names search_path or RESET: running it may change search_path */
	uint64_t digest; /* its query digest's fingerprint (observer_digest.c); 0 until its first Bind */
	uint8_t content[]; /* the Parse body after the statement name */
};

/* A statement for a Parse body's content after its name; NULL when out of memory. One reference. */
struct stmt *stmt_create(const uint8_t *content, uint32_t len);
static inline struct stmt *stmt_ref(struct stmt *stmt)
{
	stmt->refs++;
	return stmt;
}
void stmt_unref(struct stmt *stmt);

/* ---- a client's names ---- */

struct stmt_map_entry {
	char *name; /* owned; NULL for an empty slot */
	struct stmt *stmt;
	uint64_t seq; /* the session's stmt_replies.pushed when the name was put (stream order) */
};

struct stmt_map {
	struct stmt_map_entry *slots; /* open addressing, linear probing; power-of-two capacity */
	uint32_t capacity;
	uint32_t count;
};

void stmt_map_init(struct stmt_map *map);
void stmt_map_deinit(struct stmt_map *map);
struct stmt *stmt_map_get(const struct stmt_map *map, const char *name);
/* Adds name → stmt (taking a reference) at position `seq` of the client's stream; the name must not be
 * present, and the map must hold fewer than STMT_MAP_NAMES_MAX (the caller checks its own limit). 0 or
 * -ENOMEM. */
TERN_MUST_USE int stmt_map_put(struct stmt_map *map, const char *name, struct stmt *stmt, uint64_t seq);
/* True when the name was present and is now gone. */
bool stmt_map_remove(struct stmt_map *map, const char *name);
void stmt_map_clear(struct stmt_map *map);
/* Forgets the names put with a seq below `seq` (those the client sent before a DEALLOCATE ALL). */
void stmt_map_remove_before(struct stmt_map *map, uint64_t seq);

/* ---- a server connection's statements ---- */

struct stmt_cache_entry {
	uint64_t hash_high, hash_low;
	uint64_t last_use; /* 0 marks an empty slot */
};

struct stmt_cache {
	struct stmt_cache_entry *slots; /* open addressing, linear probing; power-of-two capacity */
	uint32_t capacity;
	uint32_t count;
	uint64_t clock; /* uses so far: orders entries for eviction */
};

struct stmt_cache *stmt_cache_create(void);
/* void * so a pool connection can free it without knowing the type. */
void stmt_cache_destroy(void *cache);
/* True when the connection holds the statement; marks it most recently used. */
bool stmt_cache_touch(struct stmt_cache *cache, const struct stmt *stmt);
/* Records that the connection now holds stmt (which it must not hold yet). When that leaves more than
 * `max` entries, the least recently used other one is removed and returned in *evicted_name (the
 * caller closes it on the server): returns 1 then, 0 when nothing was evicted, -ENOMEM. */
TERN_MUST_USE int stmt_cache_add(struct stmt_cache *cache, const struct stmt *stmt, uint32_t max,
				 char evicted_name[STMT_SERVER_NAME_LEN]);
void stmt_cache_remove(struct stmt_cache *cache, const struct stmt *stmt);
void stmt_cache_clear(struct stmt_cache *cache);

/* Unnamed statements a session keeps prepared under tern's names (server_side_prepare): the last few
 * texts, so a client that cycles through its statements allocates nothing per Parse; a longer text passes
 * on unnamed (it would be kept eight times over, per session). */
#define STMTS_RECENT_UNNAMED 8u
#define STMTS_UNNAMED_TEXT_MAX 8192u
/* A session's named statements, as observer_stmts.c keeps them (transaction pooling with
 * max_prepared_statements): the client's names, and whether the unnamed statement and portal are a SQL
 * DEALLOCATE of one of them, which tern answers itself (the server knows the statement by another name). */
struct stmts_state {
	struct stmt_map statements;
	bool is_unnamed_deallocate;
	bool is_portal_deallocate;
	/* server_side_prepare: what the client's unnamed statement is on the server (a reference; NULL: the
	 * server's own unnamed statement, the client's Parse passed on), and the recent ones, newest first. */
	struct stmt *unnamed;
	struct stmt *recent_unnamed[STMTS_RECENT_UNNAMED];
};

/* A statement a session's queued messages use, collected while no connection is attached. */
struct stmt_need {
	struct stmt *stmt; /* a reference */
	bool is_queued;    /* tern's Close and Parse are queued before its use already */
};

/* ---- the replies a session waits for ---- */

enum stmt_reply {
	STMT_REPLY_PARSE = 1,     /* a client's Parse: ParseComplete */
	STMT_REPLY_PARSE_HIDDEN,  /* tern's Parse before a use: its ParseComplete is hidden */
	STMT_REPLY_BIND,          /* BindComplete */
	STMT_REPLY_DESCRIBE_STATEMENT, /* ParameterDescription, then RowDescription or NoData */
	STMT_REPLY_DESCRIBE_PORTAL,    /* RowDescription or NoData */
	STMT_REPLY_EXECUTE,       /* rows, then CommandComplete, EmptyQueryResponse or PortalSuspended */
	STMT_REPLY_CLOSE,         /* CloseComplete */
	STMT_REPLY_CLOSE_HIDDEN,  /* tern's Close of an evicted statement: hidden */
	STMT_REPLY_SYNC,          /* ReadyForQuery */
	STMT_REPLY_QUERY,         /* a simple Query or FunctionCall: everything up to ReadyForQuery */
	/* tern's Parse that cannot succeed, sent to fail the server's batch for a client's Parse of a name in
	 * use: its ErrorResponse is replaced by data (the client's 42P05, owned). */
	STMT_REPLY_PARSE_REFUSED,
	/* A run of replies (data_len of them, counted by the message that ends each: ParseComplete,
	 * BindComplete, CloseComplete, RowDescription or NoData, CommandComplete, EmptyQueryResponse,
	 * PortalSuspended) to client messages that pass unchanged: unnamed Parse, Bind, Describe, Execute, a
	 * Close tern forwards. One entry for the run: plain unnamed traffic costs a count, not an entry each. */
	STMT_REPLY_PLAIN,
	/* Made up by tern, sent to the client when they reach the head of the queue. */
	STMT_REPLY_MADE_PARSE_COMPLETE,
	STMT_REPLY_MADE_CLOSE_COMPLETE,
	STMT_REPLY_MADE_MESSAGES, /* data: whole messages (an ErrorResponse, say), owned */
};

struct stmt_reply_entry {
	uint8_t kind; /* enum stmt_reply */
	/* PARSE and MADE_PARSE_COMPLETE: the client's statement name (owned; NULL for the unnamed one),
	 * forgotten if the Parse fails or is skipped. MADE_MESSAGES and PARSE_REFUSED: the messages (owned). */
	void *data;
	uint32_t data_len;
	/* PARSE, PARSE_HIDDEN, MADE_PARSE_COMPLETE: the statement (a reference), which the connection
	 * lacks if the Parse fails or is skipped, and which the client's name must still name to be forgotten. */
	struct stmt *stmt;
	uint64_t seq; /* push_back order: 1, 2, ...; 0 for entries pushed at the front (tern's own) */
};

struct stmt_replies {
	struct stmt_reply_entry *entries; /* circular; power-of-two capacity */
	uint32_t capacity;
	uint32_t head;
	uint32_t count;
	uint64_t pushed; /* entries pushed at the back so far */
};

/* Statement tracking's part of a leg (observer_stmts*.c write it; the relay and routing read
 * replies.count): every reply the leg owes, in order, and the statements its queued messages use that its
 * connection must prepare (collected while detached). */
struct leg_stmts {
	struct stmt_replies replies;
	struct stmt_need *needed;
	uint32_t needed_count, needed_cap;
	/* A DEALLOCATE ALL or DISCARD ALL was read: the statements needed before it do not count for the
	 * messages after it, and the cache of the connection that comes is wrong until the command runs. */
	uint32_t needed_barrier;
	bool is_stmt_cache_stale;
};
void leg_stmts_init(struct leg_stmts *ls);
/* Frees what it holds: the replies' entries and the needed statements' references. */
void leg_stmts_deinit(struct leg_stmts *ls);

void stmt_replies_init(struct stmt_replies *replies);
void stmt_replies_deinit(struct stmt_replies *replies);
/* Queue an entry; it owns `data` and takes a reference on `stmt` (either may be NULL) once queued. 0,
 * -ENOMEM, or -ENOBUFS with STMT_REPLIES_MAX entries queued (nothing is taken then). */
TERN_MUST_USE int stmt_replies_push_back(struct stmt_replies *replies, uint8_t kind, void *data, uint32_t data_len,
					 struct stmt *stmt);
TERN_MUST_USE int stmt_replies_push_front(struct stmt_replies *replies, uint8_t kind, void *data, uint32_t data_len,
					  struct stmt *stmt);
static inline struct stmt_reply_entry *stmt_replies_head(struct stmt_replies *replies)
{
	return replies->count ? &replies->entries[replies->head] : NULL;
}
/* One more reply of a plain run: the tail's count grows, or a new run starts. 0 or as push_back. */
TERN_MUST_USE int stmt_replies_push_plain(struct stmt_replies *replies);
/* Removes the head, freeing what it owns. */
void stmt_replies_pop(struct stmt_replies *replies);
/* Removes up to n entries of `kind` that follow the head; returns how many. */
uint32_t stmt_replies_remove_after_head(struct stmt_replies *replies, uint8_t kind, uint32_t n);
void stmt_replies_clear(struct stmt_replies *replies);

#endif
