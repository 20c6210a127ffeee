/*
 * pool.h — the server-first connection pool: servers, exact-match keys, FREE/USED accounting,
 * parking of requests and hand-over of released or newly opened connections to the oldest
 * matching waiter.
 *
 * Threads: every function here may be called from any thread. Each server's lists, index, counters
 * and wait queue change together under that server's mutex; the mutex is held only for list
 * splices and counter updates. Hooks (open a connection, close one, deliver a granted request) are
 * called after the mutex is released.
 * Ownership: the pool owns every server connection; a worker holding one (USED) has a reuse handle
 * and gives it back with pool_checkin or pool_conn_discard. A pool_request is owned by its caller,
 * which must not free it while it is parked (see pool_request_cancel).
 * Decisions take `now_ns` from the caller so unit tests drive them without clocks or sockets.
 * Never: knows the client protocol or sessions.
 */
#ifndef TERN_POOL_H
#define TERN_POOL_H

#include "base.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

/* Servers one pool can front (primary + replicas); a fixed array keeps per-key slots O(1). */
#define POOL_SERVERS_MAX 16u
/* ParameterStatus values remembered per connection; PostgreSQL 15 reports 15 at startup. */
#define POOL_PARAMS_MAX 32u
#define POOL_NAME_LEN_MAX 64u /* NAMEDATALEN */
/* What core keeps on a key to log in without a plaintext password (a SCRAM secret and ClientKey, or
 * an md5 hash): opaque bytes here, sized for core's struct with room to spare. */
#define POOL_SECRET_MAX 320u

struct pool;
struct pool_server;
struct pool_db;
struct pool_conn;
struct pool_raw_cancel;

/* Four-part match key (DESIGN §4): two connections are interchangeable only when all four match. */
struct pool_key {
	uint64_t profile_generation;
	uint64_t user_database_hash;
	uint64_t identity_hash;
	uint64_t options_hash;
};

struct pool_error {
	char sqlstate[6];
	char message[256];
};

struct pool_param {
	char name[POOL_NAME_LEN_MAX];
	char value[128];
};

/* Per (key, server): the exact-match index over FREE and the counts. Guarded by the server mutex. */
struct pool_slot {
	struct base_list free_conns; /* most recently released first */
	uint32_t open_count;          /* FREE + USED of this key on this server */
	uint32_t opening_count;
	uint32_t waiting_count; /* parked requests of this key on this server */
	/* A login failed because the server could not be reached (or was starting, or full): no open for
	 * this key before this time; its requests wait (0: none pending). */
	uint64_t retry_ns;
};

/* The keys of one database name, or of one user name: what max_db_connections and max_user_connections
 * count. Interned by pool_db_get; lives as long as the pool. */
struct pool_group {
	struct base_list link;
	char name[POOL_NAME_LEN_MAX];
	uint32_t counts[POOL_SERVERS_MAX]; /* open + opening on each server, under that server's mutex */
	uint32_t limit; /* atomic: this group's max_db_connections or max_user_connections; 0 = the setting's */
	uint32_t refs;  /* keys in it (dbs_lock): freed with the last */
};

/* One per distinct match key, interned by pool_db_get. Each pool_db_get takes a reference that
 * pool_db_put gives back; a key nobody holds, with no connection open, opening or waited for, is freed
 * by the pool thread's pass (pool_expire), so keys never grow without clients. */
struct pool_db {
	struct base_list link;
	struct base_list hash_link; /* pool->buckets */
	uint32_t refs;              /* dbs_lock */
	struct pool_key key;
	struct pool_group *database_group;
	struct pool_group *user_group;
	/* Atomic: this key's pool_size and reserve_pool_size ([databases]); 0 = the settings'. */
	uint32_t pool_size;
	uint32_t reserve_pool_size;
	char user[POOL_NAME_LEN_MAX];
	char database[POOL_NAME_LEN_MAX];
	char *options;  /* the startup "options" parameter, "" when absent */
	char *password; /* for the server login, NULL when none is known */
	/* Core's answer to the server when password is NULL (pool_db_set_secret); guarded by the pool's db
	 * lock, copied out by the opener. secret_len 0 when none. */
	uint8_t secret[POOL_SECRET_MAX];
	uint32_t secret_len;
	struct pool_slot slots[POOL_SERVERS_MAX];
	/* The server's ParameterStatus set as first seen, for the welcome of later clients; allocated and
	 * written once under the pool's db lock when a login first succeeds (a key no server accepted costs
	 * none of it), then read without a lock once params_ready is set (release/acquire). */
	struct pool_param *params;
	uint32_t param_count;
	int params_ready;
	uint32_t client_count; /* atomic: clients logged in with this key, for SHOW POOLS */
};

enum pool_conn_state { POOL_CONN_FREE = 1, POOL_CONN_USED, POOL_CONN_CLOSING };

struct pool_conn {
	struct base_list link;      /* server->free_conns (oldest first) or server->used_conns */
	struct base_list slot_link; /* slot->free_conns while FREE */
	struct pool_server *server;
	struct pool_db *db;
	enum pool_conn_state state;
	int fd;
	void *pgconn; /* kept only to close it, from the pool thread */
	void *cancel; /* libpq cancel handle, used from a non-worker thread */
	/* Set instead of pgconn and cancel for a connection tern logged in to itself (login.h): where its
	 * cancel goes; the fd is then the pool's to close. */
	struct pool_raw_cancel *raw_cancel;
	/* TLS to the server (pool_tls_ops: core's state, opaque here), used by whichever worker holds the
	 * connection; NULL on a plain connection. tls_close ends it before the socket closes. */
	void *tls;
	void (*tls_close)(void *tls, int fd);
	char tls_name[64]; /* "TLSv1.3/TLS_AES_256_GCM_SHA384" for SHOW SERVERS; "" when plain */
	uint32_t backend_pid;
	uint64_t opened_ns;
	uint64_t released_ns;
	/* The server's address and tern's end, as connected (SHOW SERVERS). */
	struct sockaddr_storage peer_addr, local_addr;
	/* Atomic: the session that holds it (core's, for SHOW SERVERS' link), NULL while FREE. */
	void *holder;
	/* RECONNECT: closed when next released instead of kept (server mutex). */
	bool is_close_needed;
	bool is_polar; /* logged in with the XID-import profile (its server's is_polar when it was opened) */
	struct pool_param params[POOL_PARAMS_MAX];
	uint32_t param_count;
	/* The fingerprint of the client state core last restored on it (tracked parameters, search_path);
	 * 0 when unknown. Written by whichever worker holds the connection. */
	uint64_t restored_fingerprint;
	/* Server-session state kept by whichever worker holds the connection (core's prepared-statement
	 * cache); freed with the connection through extra_free. */
	void *extra;
	void (*extra_free)(void *extra);
};

enum pool_request_state { POOL_REQUEST_IDLE = 0, POOL_REQUEST_PARKED, POOL_REQUEST_DONE };

struct pool_request {
	struct base_list link; /* in the server's wait queue while PARKED; the owner's afterwards */
	struct pool_db *db;
	struct pool_server *server;
	uint64_t parked_ns;
	enum pool_request_state state;
	/* Result, valid once on_done ran: conn, or error.sqlstate set. */
	struct pool_conn *conn;
	struct pool_error error;
	/* Called exactly once for a parked request that was granted or failed, from any thread, without
	 * the server mutex. Not called for requests that pool_checkout satisfied at once, nor for ones
	 * removed by pool_request_cancel. */
	void (*on_done)(struct pool_request *req);
	void *owner;
};

struct pool_server {
	pthread_mutex_t lock;
	uint32_t index;
	char name[POOL_NAME_LEN_MAX];
	char *conninfo;
	struct base_list free_conns; /* every FREE conn, oldest release first (eviction order) */
	struct base_list used_conns;
	struct base_list waiters; /* parked requests, oldest first */
	uint32_t open_count;      /* FREE + USED */
	uint32_t opening_count;
	uint32_t free_count;
	uint32_t waiter_count;
	uint64_t opened_total, open_failed_total, closed_total, granted_total, parked_total;
	uint64_t open_dropped_total; /* opens given up before they began: nobody waited for them any more */
	/* Routing's (set at startup; atomic): its share of the reads as a standby, and the reads running on it
	 * now, the load power-of-two choices compares (pick.h). */
	uint32_t weight;
	uint32_t reads_running;
	/* profile=polar (atomic: set at startup, changed by pool_server_set_profile): the connections opened
	 * from now on ask for the XID-import extension at login (_polar_send_xact); each keeps the profile it
	 * was opened with (pool_conn.is_polar). */
	bool is_polar;
};

/* What the pool asks of its environment. The real pool thread implements these; tests record. */
struct pool_hooks {
	/* Open a connection for db on server; later report with pool_open_finished. */
	void (*open)(struct pool *pool, struct pool_server *server, struct pool_db *db);
	/* Close a connection the pool no longer accounts for, and free it. */
	void (*close)(struct pool *pool, struct pool_conn *conn);
	void *ctx;
};

/* The limits, as PgBouncer's: a key is a user/database pair (with its options), a group every key of one
 * database name or one user name. Each counts open + opening connections on one server. */
struct pool_settings {
	uint32_t pool_size;              /* per key (PgBouncer's default_pool_size) */
	uint32_t reserve_pool_size;      /* more for a key whose oldest request waited reserve_pool_timeout_ns */
	uint64_t reserve_pool_timeout_ns;
	uint32_t max_db_connections;     /* per database name; 0 = no limit */
	uint32_t max_user_connections;   /* per user name; 0 = no limit */
	uint32_t max_server_connections; /* per server across keys; 0 = no limit */
	uint32_t min_pool_size;
	/* After a login the server did not answer (08xxx, 57P03, 53300), the next open of that key waits
	 * this long while its requests stay parked; 0: the oldest request fails at once. */
	uint64_t login_retry_ns;
	uint64_t idle_timeout_ns; /* FREE this long: closed (0 = never) */
	uint64_t lifetime_ns;     /* open this long: closed when next free (0 = never) */
};

struct pool {
	struct pool_server servers[POOL_SERVERS_MAX];
	uint32_t server_count;
	pthread_mutex_t dbs_lock;
	struct base_list dbs; /* in creation order */
	/* The keys by hash, chained; grown to keep about one key a bucket. dbs_lock. */
	struct base_list *buckets;
	uint32_t bucket_count; /* a power of two */
	uint32_t db_count;
	struct base_list database_groups, user_groups; /* dbs_lock */
	struct pool_hooks hooks;
	struct pool_settings settings; /* read under a server mutex; changed by pool_set_settings */
	/* Atomic: the match key's first part for keys interned from now on; pool_server_set_profile moves it
	 * on, so a client logging in after a server's profile changed never gets a connection of the old one. */
	uint64_t profile_generation;
};

TERN_MUST_USE int pool_init(struct pool *pool, const struct pool_settings *settings, const struct pool_hooks *hooks);
/* Frees servers, dbs and every connection (through hooks.close); call once no thread uses the pool. */
void pool_deinit(struct pool *pool);
TERN_MUST_USE int pool_server_add(struct pool *pool, const char *name, const char *conninfo,
				  struct pool_server **out);
void pool_set_settings(struct pool *pool, const struct pool_settings *settings);
/* SIGHUP: server's profile (profile=polar or not) for the connections opened from now on, and a new profile
 * generation when it changed (true then). Connections already open keep theirs and their keys. */
bool pool_server_set_profile(struct pool *pool, struct pool_server *server, bool is_polar);

/* Interns the key for (user, database, options) and takes a reference to it (pool_db_put gives it back);
 * NULL on allocation failure. O(1): a hash lookup under the db lock. */
struct pool_db *pool_db_get(struct pool *pool, const char *user, const char *database, const char *options,
			    const char *password, uint64_t identity_hash);
/* Gives back the reference pool_db_get took; db may be freed by a later pass once nothing uses it. */
void pool_db_put(struct pool *pool, struct pool_db *db);
/* pool.c's own use of db.c, the keys' half of the pool (not for callers of the pool): frees db (its
 * settings, its secret wiped, its groups' share), which nothing can reach any more; frees db when nobody
 * holds it and no server has a connection of it open, opening or waited for, true when it did (under
 * pool->dbs_lock; it takes each server's lock in turn). */
void pool_db_free(struct pool_db *db);
bool pool_db_free_if_unused(struct pool *pool, struct pool_db *db);
/* What [databases] and [users] say of a key, its database and its user; 0 = the pool's settings. */
struct pool_overrides {
	uint32_t pool_size, reserve_pool_size, max_db_connections, max_user_connections;
};
/* Sets db's overrides (the last login's word counts; any thread, no lock: each is one atomic store). */
void pool_db_set_overrides(struct pool_db *db, const struct pool_overrides *overrides);
/* Keeps `secret` (1..POOL_SECRET_MAX bytes) as db's answer to the server, replacing an older one, under
 * the pool's db lock: the latest authenticated client's secret is what the next login uses. */
void pool_db_set_secret(struct pool *pool, struct pool_db *db, const void *secret, size_t len);
/* Copies db's secret into out (POOL_SECRET_MAX bytes); returns its length, 0 when none. */
size_t pool_db_copy_secret(struct pool *pool, const struct pool_db *db, uint8_t out[POOL_SECRET_MAX]);
/* Records the first ParameterStatus set seen for db (no-op when already set). */
void pool_db_set_params(struct pool *pool, struct pool_db *db, const struct pool_param *params, uint32_t count);
static inline bool pool_db_has_params(const struct pool_db *db)
{
	return __atomic_load_n(&db->params_ready, __ATOMIC_ACQUIRE) != 0;
}

enum pool_checkout_result { POOL_CHECKOUT_GOT = 1, POOL_CHECKOUT_PARKED = 2 };
/* req->db, req->server, req->on_done set by the caller. GOT: req->conn is USED by the caller.
 * PARKED: req waits; on_done reports the outcome. */
enum pool_checkout_result pool_checkout(struct pool *pool, struct pool_request *req, uint64_t now_ns);
/* Gives back an idle, reusable connection: to the oldest matching waiter, else FREE. */
void pool_checkin(struct pool *pool, struct pool_conn *conn, uint64_t now_ns);
/* How long an older waiter of another worker may be passed over for the releasing worker's own: a
 * local hand-off saves a wake-up, never a client's wait longer than this. */
#define POOL_LOCAL_BYPASS_NS (10ull * 1000 * 1000)
/* As pool_checkin, but to `req` first: a parked request of the caller's own (its worker hands the
 * connection over itself, no on_done, no wake-up) when it is still parked, wants conn's key, and no
 * waiter of the key has waited POOL_LOCAL_BYPASS_NS longer than it. True when req got conn (req->conn
 * set, req DONE); false when conn went as pool_checkin sends it (to the oldest waiter). */
bool pool_checkin_to(struct pool *pool, struct pool_conn *conn, struct pool_request *req, uint64_t now_ns);
/* Gives back a connection that must not be reused (lost, mid-transaction, protocol error). */
void pool_conn_discard(struct pool *pool, struct pool_conn *conn);
/* True when req was still parked and is now removed (on_done will not run). False when it was
 * already granted or failed: on_done has run or is about to. */
bool pool_request_cancel(struct pool *pool, struct pool_request *req);
/* The opener is about to start a hooks.open of db on server: true when a request still waits for it (or
 * min_pool_size wants it). False: the open is given up, as if never asked (everyone who wanted it left,
 * a client gone before its login reached the server, say), and pool_open_finished is not called. */
TERN_MUST_USE bool pool_open_begin(struct pool *pool, struct pool_server *server, struct pool_db *db);
/* The outcome of a hooks.open: conn (opened, not yet accounted) or err. */
void pool_open_finished(struct pool *pool, struct pool_server *server, struct pool_db *db, struct pool_conn *conn,
			const struct pool_error *err, uint64_t now_ns);
/* Takes a FREE connection out of the pool because its socket showed it is dead; false if it is no
 * longer FREE (a worker holds it and will see the failure itself). */
bool pool_conn_remove_if_free(struct pool *pool, struct pool_conn *conn);
/* Closes FREE connections past idle_timeout_ns or lifetime_ns, or above a limit lowered since they
 * opened, and opens the reserve for keys whose requests waited reserve_pool_timeout_ns; returns how many
 * it closed. Called once a second by the pool thread. */
uint32_t pool_expire(struct pool *pool, uint64_t now_ns);
/* Opens connections so every used key has min_pool_size open on each server; returns how many. */
uint32_t pool_warm(struct pool *pool);

/* RECONNECT: every open connection to `database` (NULL: every one) is closed instead of kept when it is
 * next released, idle ones at once. Returns how many were marked. */
uint32_t pool_reconnect(struct pool *pool, const char *database);
/* WAIT_CLOSE: connections to `database` (NULL: all) marked by pool_reconnect and not closed yet. */
uint32_t pool_close_pending(struct pool *pool, const char *database);

/* ---- snapshots for the admin console: nothing outside pool/ takes a pool mutex ---- */

/* One (key, server) pair of SHOW POOLS, copied under the server's mutex. */
struct pool_db_row {
	char user[POOL_NAME_LEN_MAX];
	char database[POOL_NAME_LEN_MAX];
	uint32_t client_count;
	uint32_t server_index;
	uint32_t free_count; /* idle connections of this key on this server */
	uint32_t used_count; /* open and not free */
	uint32_t opening_count;
	uint32_t waiting_count;    /* parked requests of this key on this server */
	uint64_t oldest_parked_ns; /* parked_ns of its oldest waiter; 0 when none waits */
};
/* Every db (in creation order) x every server added so far, one row each. malloc'd into *rows (the caller frees;
 * NULL and 0 rows when there is no db). 0 or -ENOMEM. */
TERN_MUST_USE int pool_snapshot_dbs(struct pool *pool, struct pool_db_row **rows, uint32_t *count);

/* One server connection of SHOW SERVERS, copied under its server's mutex. */
struct pool_conn_row {
	uintptr_t id; /* the connection's address, as an identifier only (it may be freed after the snapshot) */
	char user[POOL_NAME_LEN_MAX];
	char database[POOL_NAME_LEN_MAX];
	uint32_t server_index;
	enum pool_conn_state state; /* POOL_CONN_USED or POOL_CONN_FREE */
	uint32_t backend_pid;
	uint64_t opened_ns;
	uint64_t released_ns;
	struct sockaddr_storage peer_addr, local_addr;
	uintptr_t holder; /* as an identifier only */
	bool is_close_needed;
	char tls[64]; /* its tls_name */
};
/* Every open connection of every server: USED ones first, then FREE, per server. malloc'd as above. 0 or -ENOMEM. */
TERN_MUST_USE int pool_snapshot_conns(struct pool *pool, struct pool_conn_row **rows, uint32_t *count);

/* True when no server has a connection USED or a request parked (PAUSE is complete); opens under way do
 * not count. Each server is read under its own mutex, one after another. */
bool pool_is_idle(struct pool *pool);
/* As pool_is_idle, for the connections and requests of one database only (NULL: pool_is_idle). */
bool pool_is_idle_for(struct pool *pool, const char *database);

#endif
