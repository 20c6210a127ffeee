/* The pool's connections (pool.h): servers, the FREE/USED lists and their counters, the wait queue and its
 * hand-overs, the limits and the evictions they allow, expiry and reconnects; each change under its server's
 * mutex, the hooks after it. Keys and their groups are db.c's, snapshots snapshot.c's. See pool.h. */
#include "pool.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

#define POOL_BUCKETS_INITIAL 64u

/* Rounds of closes one pool_expire pass makes per server: 512 connections a second at most. */
#define POOL_EXPIRE_ROUNDS_MAX 64u

/* Hooks collected under the mutex and run after it is released. */
#define POOL_DEFERRED_MAX 8u
struct pool_deferred {
	struct pool_request *done[POOL_DEFERRED_MAX];
	uint32_t done_count;
	struct pool_db *open[POOL_DEFERRED_MAX];
	uint32_t open_count;
	struct pool_conn *close[POOL_DEFERRED_MAX];
	uint32_t close_count;
};

static void pool_deferred_run(struct pool *pool, struct pool_server *server, struct pool_deferred *d)
{
	for (uint32_t i = 0; i < d->close_count; i++)
		pool->hooks.close(pool, d->close[i]);
	for (uint32_t i = 0; i < d->open_count; i++)
		pool->hooks.open(pool, server, d->open[i]);
	for (uint32_t i = 0; i < d->done_count; i++)
		d->done[i]->on_done(d->done[i]);
}

int pool_init(struct pool *pool, const struct pool_settings *settings, const struct pool_hooks *hooks)
{
	TERN_ASSERT(hooks->open && hooks->close);
	memset(pool, 0, sizeof(*pool));
	pool->hooks = *hooks;
	pool->settings = *settings;
	base_list_init(&pool->dbs);
	base_list_init(&pool->database_groups);
	base_list_init(&pool->user_groups);
	pool->buckets = malloc(POOL_BUCKETS_INITIAL * sizeof(*pool->buckets));
	if (!pool->buckets)
		return -ENOMEM;
	pool->bucket_count = POOL_BUCKETS_INITIAL;
	for (uint32_t i = 0; i < pool->bucket_count; i++)
		base_list_init(&pool->buckets[i]);
	return -pthread_mutex_init(&pool->dbs_lock, NULL);
}

void pool_deinit(struct pool *pool)
{
	/* Every thread that could hold a connection has stopped: close them all, held or not. */
	for (uint32_t s = 0; s < pool->server_count; s++) {
		struct pool_server *server = &pool->servers[s];
		struct base_list *lists[] = {&server->free_conns, &server->used_conns};
		for (size_t l = 0; l < TERN_ARRAY_LEN(lists); l++) {
			struct base_list *node;
			while ((node = base_list_pop_head(lists[l])) != NULL) {
				struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
				if (conn->state == POOL_CONN_FREE)
					base_list_remove(&conn->slot_link);
				conn->state = POOL_CONN_CLOSING;
				pool->hooks.close(pool, conn);
			}
		}
		pthread_mutex_destroy(&server->lock);
		free(server->conninfo);
	}
	struct base_list *node;
	while ((node = base_list_pop_head(&pool->dbs)) != NULL) {
		struct pool_db *db = TERN_CONTAINER_OF(node, struct pool_db, link);
		memset(db->database_group->counts, 0, sizeof(db->database_group->counts));
		memset(db->user_group->counts, 0, sizeof(db->user_group->counts));
		pool_db_free(db);
	}
	TERN_ASSERT(base_list_is_empty(&pool->database_groups) && base_list_is_empty(&pool->user_groups));
	free(pool->buckets);
	pthread_mutex_destroy(&pool->dbs_lock);
}

int pool_server_add(struct pool *pool, const char *name, const char *conninfo, struct pool_server **out)
{
	if (pool->server_count == POOL_SERVERS_MAX)
		return -E2BIG;
	struct pool_server *server = &pool->servers[pool->server_count];
	memset(server, 0, sizeof(*server));
	server->index = pool->server_count;
	base_strlcpy(server->name, name, sizeof(server->name));
	server->conninfo = strdup(conninfo);
	if (!server->conninfo)
		return -ENOMEM;
	base_list_init(&server->free_conns);
	base_list_init(&server->used_conns);
	base_list_init(&server->waiters);
	int rc = pthread_mutex_init(&server->lock, NULL);
	if (rc != 0) {
		free(server->conninfo);
		return -rc;
	}
	pool->server_count++;
	*out = server;
	return 0;
}

static void pool_serve_waiters(struct pool *pool, struct pool_server *server, uint64_t now_ns,
			       struct pool_deferred *d);

void pool_set_settings(struct pool *pool, const struct pool_settings *settings)
{
	for (uint32_t s = 0; s < pool->server_count; s++)
		pthread_mutex_lock(&pool->servers[s].lock);
	pool->settings = *settings;
	for (uint32_t s = pool->server_count; s-- > 0;)
		pthread_mutex_unlock(&pool->servers[s].lock);
	/* A larger pool_size serves requests already parked now, not at the next release. */
	for (uint32_t s = 0; s < pool->server_count; s++) {
		struct pool_server *server = &pool->servers[s];
		struct pool_deferred d = {0};
		pthread_mutex_lock(&server->lock);
		pool_serve_waiters(pool, server, 0, &d);
		pthread_mutex_unlock(&server->lock);
		pool_deferred_run(pool, server, &d);
	}
}

bool pool_server_set_profile(struct pool *pool, struct pool_server *server, bool is_polar)
{
	if (__atomic_load_n(&server->is_polar, __ATOMIC_RELAXED) == is_polar)
		return false;
	/* Profile first: a key of the new generation opens connections of the new profile only. */
	__atomic_store_n(&server->is_polar, is_polar, __ATOMIC_RELEASE);
	__atomic_add_fetch(&pool->profile_generation, 1, __ATOMIC_RELEASE);
	return true;
}

/* Frees the keys nobody holds that have no connection open, opening or waited for; returns how many. */
static uint32_t pool_free_unused(struct pool *pool)
{
	uint32_t freed = 0;
	pthread_mutex_lock(&pool->dbs_lock);
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &pool->dbs)
	{
		freed += pool_db_free_if_unused(pool, TERN_CONTAINER_OF(node, struct pool_db, link));
	}
	pthread_mutex_unlock(&pool->dbs_lock);
	return freed;
}

/* An override when set, else the setting. */
static uint32_t pool_or(const uint32_t *override, uint32_t setting)
{
	uint32_t value = __atomic_load_n(override, __ATOMIC_RELAXED);
	return value ? value : setting;
}

/* ---- state changes: each moves a connection between lists and counters together ---- */

static void pool_conn_make_used(struct pool_server *server, struct pool_conn *conn)
{
	TERN_ASSERT(conn->state == POOL_CONN_FREE);
	base_list_remove(&conn->link);
	base_list_remove(&conn->slot_link);
	TERN_ASSERT(server->free_count > 0);
	server->free_count--;
	conn->state = POOL_CONN_USED;
	base_list_insert_tail(&server->used_conns, &conn->link);
}

static void pool_conn_make_free(struct pool_server *server, struct pool_conn *conn, uint64_t now_ns)
{
	TERN_ASSERT(conn->state == POOL_CONN_USED);
	base_list_remove(&conn->link);
	conn->state = POOL_CONN_FREE;
	conn->released_ns = now_ns;
	base_list_insert_tail(&server->free_conns, &conn->link);
	/* Most recently used first: its server-side caches are warm. */
	struct pool_slot *slot = &conn->db->slots[server->index];
	slot->free_conns.next->prev = &conn->slot_link;
	conn->slot_link.next = slot->free_conns.next;
	conn->slot_link.prev = &slot->free_conns;
	slot->free_conns.next = &conn->slot_link;
	server->free_count++;
}

/* A key's connections open or opening count in its two groups too. */
static void pool_groups_add(const struct pool_server *server, const struct pool_db *db, int delta)
{
	uint32_t *counts[] = {&db->database_group->counts[server->index], &db->user_group->counts[server->index]};
	for (size_t i = 0; i < TERN_ARRAY_LEN(counts); i++) {
		TERN_ASSERT(delta > 0 || *counts[i] > 0);
		*counts[i] += (uint32_t)delta;
	}
}

/* Removes conn from the accounting; the caller has it closed. */
static void pool_conn_forget(struct pool_server *server, struct pool_conn *conn)
{
	if (conn->state == POOL_CONN_FREE) {
		base_list_remove(&conn->slot_link);
		TERN_ASSERT(server->free_count > 0);
		server->free_count--;
	}
	base_list_remove(&conn->link);
	conn->state = POOL_CONN_CLOSING;
	struct pool_slot *slot = &conn->db->slots[server->index];
	TERN_ASSERT(slot->open_count > 0 && server->open_count > 0);
	slot->open_count--;
	server->open_count--;
	server->closed_total++;
	pool_groups_add(server, conn->db, -1);
}

static struct pool_request *pool_oldest_waiter(struct pool_server *server, const struct pool_db *db)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &server->waiters)
	{
		struct pool_request *req = TERN_CONTAINER_OF(node, struct pool_request, link);
		if (!db || req->db == db)
			return req;
	}
	return NULL;
}

/* The request leaves the queue, done (its counters with it). */
static void pool_waiter_unlink(struct pool_server *server, struct pool_request *req)
{
	TERN_ASSERT(req->state == POOL_REQUEST_PARKED);
	base_list_remove(&req->link);
	server->waiter_count--;
	req->db->slots[server->index].waiting_count--;
	req->state = POOL_REQUEST_DONE;
}

/* ... and its on_done runs after the mutex. */
static void pool_waiter_finish(struct pool_server *server, struct pool_request *req, struct pool_deferred *d)
{
	pool_waiter_unlink(server, req);
	TERN_ASSERT(d->done_count < POOL_DEFERRED_MAX);
	d->done[d->done_count++] = req;
}

/* Hand-over: the connection stays USED and changes holder without touching FREE. */
static void pool_grant(struct pool_server *server, struct pool_request *req, struct pool_conn *conn,
		       struct pool_deferred *d)
{
	req->conn = conn;
	server->granted_total++;
	pool_waiter_finish(server, req, d);
}

static void pool_request_open(struct pool_server *server, struct pool_db *db, struct pool_deferred *d)
{
	TERN_ASSERT(d->open_count < POOL_DEFERRED_MAX);
	db->slots[server->index].opening_count++;
	server->opening_count++;
	pool_groups_add(server, db, 1);
	d->open[d->open_count++] = db;
}

/* ---- limits ---- */

enum pool_limit { POOL_LIMIT_KEY = 1, POOL_LIMIT_DATABASE = 2, POOL_LIMIT_USER = 4, POOL_LIMIT_SERVER = 8 };

/* The connections key db may have on server: pool_size, and the reserve once its oldest request has
 * waited reserve_pool_timeout_ns (now_ns 0: no reserve). */
static uint32_t pool_key_limit(const struct pool *pool, struct pool_server *server, const struct pool_db *db,
			       uint64_t now_ns)
{
	const struct pool_settings *s = &pool->settings;
	const struct pool_slot *slot = &db->slots[server->index];
	uint32_t size = pool_or(&db->pool_size, s->pool_size);
	uint32_t reserve = pool_or(&db->reserve_pool_size, s->reserve_pool_size);
	if (reserve == 0 || now_ns == 0 || slot->waiting_count == 0 || slot->open_count + slot->opening_count < size)
		return size; /* the reserve is not needed, or cannot be */
	const struct pool_request *oldest = pool_oldest_waiter(server, db);
	bool has_waited = oldest && now_ns - oldest->parked_ns >= s->reserve_pool_timeout_ns;
	return size + (has_waited ? reserve : 0);
}

/* The limits that key db has reached on server (`extra` 0), or passed (`extra` 1: what a connection
 * released now finds when a reload lowered a limit); 0 when it is under all of them. */
static uint32_t pool_limits(const struct pool *pool, struct pool_server *server, const struct pool_db *db,
			    uint64_t now_ns, uint32_t extra)
{
	const struct pool_settings *s = &pool->settings;
	const struct pool_slot *slot = &db->slots[server->index];
	uint32_t i = server->index, hit = 0;
	if (slot->open_count + slot->opening_count >= pool_key_limit(pool, server, db, now_ns) + extra)
		hit |= POOL_LIMIT_KEY;
	uint32_t db_max = pool_or(&db->database_group->limit, s->max_db_connections);
	uint32_t user_max = pool_or(&db->user_group->limit, s->max_user_connections);
	if (db_max && db->database_group->counts[i] >= db_max + extra)
		hit |= POOL_LIMIT_DATABASE;
	if (user_max && db->user_group->counts[i] >= user_max + extra)
		hit |= POOL_LIMIT_USER;
	if (s->max_server_connections && server->open_count + server->opening_count >= s->max_server_connections + extra)
		hit |= POOL_LIMIT_SERVER;
	return hit;
}

/* An idle connection of another key whose close lifts every limit in `hit`, oldest release first; NULL
 * when none does (a key's own limit is never lifted that way: its idle connection would be given). */
static struct pool_conn *pool_victim(const struct pool_server *server, const struct pool_db *db, uint32_t hit)
{
	if (hit & POOL_LIMIT_KEY)
		return NULL;
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &server->free_conns)
	{
		struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
		if (conn->db == db || ((hit & POOL_LIMIT_DATABASE) && conn->db->database_group != db->database_group) ||
		    ((hit & POOL_LIMIT_USER) && conn->db->user_group != db->user_group))
			continue;
		return conn;
	}
	return NULL;
}

/* Opens for a waiter of db when the limits allow, evicting an idle connection of another key when only a
 * shared limit (database, user, server) stands in the way. True when an open was started. */
static bool pool_try_open(struct pool *pool, struct pool_server *server, struct pool_db *db, uint64_t now_ns,
			  struct pool_deferred *d)
{
	const struct pool_slot *slot = &db->slots[server->index];
	if (slot->waiting_count <= slot->opening_count || d->open_count == POOL_DEFERRED_MAX ||
	    d->close_count == POOL_DEFERRED_MAX)
		return false; /* every waiter of this key has an open on its way, or this pass is full */
	if (slot->retry_ns && (now_ns == 0 || now_ns < slot->retry_ns))
		return false; /* server_login_retry: the pool thread's pass opens again when it is time */
	uint32_t hit = pool_limits(pool, server, db, now_ns, 0);
	if (hit) {
		struct pool_conn *victim = pool_victim(server, db, hit);
		if (!victim)
			return false;
		pool_conn_forget(server, victim);
		d->close[d->close_count++] = victim;
		if (pool_limits(pool, server, db, now_ns, 0) != 0)
			return false; /* still blocked (another limit the victim did not count in) */
	}
	pool_request_open(server, db, d);
	return true;
}

/* Capacity may have appeared (a close, a failed open, a raised limit, the reserve's time): start an open
 * for each waiting key that no pending open will serve, oldest waiter first. now_ns 0: no reserve. */
static void pool_serve_waiters(struct pool *pool, struct pool_server *server, uint64_t now_ns,
			       struct pool_deferred *d)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &server->waiters)
	{
		if (d->open_count == POOL_DEFERRED_MAX || d->close_count == POOL_DEFERRED_MAX)
			return;
		(void)pool_try_open(pool, server, TERN_CONTAINER_OF(node, struct pool_request, link)->db, now_ns, d);
	}
}

enum pool_checkout_result pool_checkout(struct pool *pool, struct pool_request *req, uint64_t now_ns)
{
	struct pool_server *server = req->server;
	struct pool_db *db = req->db;
	TERN_ASSERT(server && db && req->on_done);
	TERN_ASSERT(req->state != POOL_REQUEST_PARKED);
	struct pool_deferred d = {0};
	enum pool_checkout_result result;
	req->conn = NULL;
	req->error.sqlstate[0] = '\0';
	pthread_mutex_lock(&server->lock);
	struct pool_slot *slot = &db->slots[server->index];
	if (!base_list_is_empty(&slot->free_conns)) {
		struct pool_conn *conn = TERN_CONTAINER_OF(slot->free_conns.next, struct pool_conn, slot_link);
		pool_conn_make_used(server, conn);
		req->conn = conn;
		req->state = POOL_REQUEST_DONE;
		server->granted_total++;
		result = POOL_CHECKOUT_GOT;
	} else {
		req->state = POOL_REQUEST_PARKED;
		req->parked_ns = now_ns;
		base_list_insert_tail(&server->waiters, &req->link);
		server->waiter_count++;
		slot->waiting_count++;
		server->parked_total++;
		/* Nothing but this request changed: only its key may need an open. */
		(void)pool_try_open(pool, server, db, now_ns, &d);
		result = POOL_CHECKOUT_PARKED;
	}
	pthread_mutex_unlock(&server->lock);
	pool_deferred_run(pool, server, &d);
	return result;
}

static bool pool_conn_is_past_lifetime(const struct pool *pool, const struct pool_conn *conn, uint64_t now_ns)
{
	return pool->settings.lifetime_ns && now_ns - conn->opened_ns >= pool->settings.lifetime_ns;
}

void pool_checkin(struct pool *pool, struct pool_conn *conn, uint64_t now_ns)
{
	struct pool_server *server = conn->server;
	struct pool_deferred d = {0};
	pthread_mutex_lock(&server->lock);
	TERN_ASSERT(conn->state == POOL_CONN_USED);
	struct pool_request *req = pool_oldest_waiter(server, conn->db);
	if (pool_conn_is_past_lifetime(pool, conn, now_ns) || conn->is_close_needed ||
	    pool_limits(pool, server, conn->db, now_ns, 1)) {
		/* server_lifetime, or a limit lowered by a reload: closed, not reused; a waiter gets a fresh
		 * connection instead when the limits allow one. */
		pool_conn_forget(server, conn);
		d.close[d.close_count++] = conn;
		pool_serve_waiters(pool, server, now_ns, &d);
	} else if (req) {
		pool_grant(server, req, conn, &d);
	} else {
		pool_conn_make_free(server, conn, now_ns);
		pool_serve_waiters(pool, server, now_ns, &d);
	}
	pthread_mutex_unlock(&server->lock);
	pool_deferred_run(pool, server, &d);
}

bool pool_checkin_to(struct pool *pool, struct pool_conn *conn, struct pool_request *req, uint64_t now_ns)
{
	struct pool_server *server = conn->server;
	pthread_mutex_lock(&server->lock);
	TERN_ASSERT(conn->state == POOL_CONN_USED);
	const struct pool_request *oldest = pool_oldest_waiter(server, conn->db);
	bool is_taken = req->state == POOL_REQUEST_PARKED && req->server == server && req->db == conn->db &&
			!pool_conn_is_past_lifetime(pool, conn, now_ns) && !conn->is_close_needed &&
			!pool_limits(pool, server, conn->db, now_ns, 1) &&
			(oldest == req || req->parked_ns - oldest->parked_ns <= POOL_LOCAL_BYPASS_NS);
	if (is_taken) {
		pool_waiter_unlink(server, req); /* as pool_grant, but the caller hands it over: no on_done */
		req->conn = conn;
		server->granted_total++;
	}
	pthread_mutex_unlock(&server->lock);
	if (!is_taken)
		pool_checkin(pool, conn, now_ns);
	return is_taken;
}

void pool_conn_discard(struct pool *pool, struct pool_conn *conn)
{
	struct pool_server *server = conn->server;
	struct pool_deferred d = {0};
	pthread_mutex_lock(&server->lock);
	TERN_ASSERT(conn->state == POOL_CONN_USED);
	pool_conn_forget(server, conn);
	d.close[d.close_count++] = conn;
	pool_serve_waiters(pool, server, 0, &d);
	pthread_mutex_unlock(&server->lock);
	pool_deferred_run(pool, server, &d);
}

bool pool_open_begin(struct pool *pool, struct pool_server *server, struct pool_db *db)
{
	struct pool_deferred d = {0};
	pthread_mutex_lock(&pool->dbs_lock); /* first: a key dropped here may be freed here, as pool_db_put does */
	pthread_mutex_lock(&server->lock);
	struct pool_slot *slot = &db->slots[server->index];
	TERN_ASSERT(slot->opening_count > 0 && server->opening_count > 0);
	uint32_t min = pool->settings.min_pool_size;
	bool is_wanted = slot->waiting_count > 0 || (min && db->params_ready && slot->open_count + slot->opening_count <= min);
	if (!is_wanted) {
		slot->opening_count--;
		server->opening_count--;
		server->open_dropped_total++;
		pool_groups_add(server, db, -1);
		pool_serve_waiters(pool, server, 0, &d); /* the room it held may serve another key */
	}
	pthread_mutex_unlock(&server->lock);
	if (!is_wanted)
		(void)pool_db_free_if_unused(pool, db);
	pthread_mutex_unlock(&pool->dbs_lock);
	pool_deferred_run(pool, server, &d);
	return is_wanted;
}

bool pool_request_cancel(struct pool *pool, struct pool_request *req)
{
	(void)pool;
	struct pool_server *server = req->server;
	pthread_mutex_lock(&server->lock);
	bool removed = req->state == POOL_REQUEST_PARKED;
	if (removed) {
		base_list_remove(&req->link);
		server->waiter_count--;
		req->db->slots[server->index].waiting_count--;
		req->state = POOL_REQUEST_IDLE;
	}
	pthread_mutex_unlock(&server->lock);
	return removed;
}

/* A login that failed before the server could judge it: it may work when retried (08004: tern refused the
 * server's TLS as configured, which a retry does not change). */
static bool pool_error_is_unreachable(const struct pool_error *err)
{
	return (strncmp(err->sqlstate, "08", 2) == 0 && strcmp(err->sqlstate, "08004") != 0) ||
	       strcmp(err->sqlstate, "57P03") == 0 ||
	       strcmp(err->sqlstate, "53300") == 0;
}

void pool_open_finished(struct pool *pool, struct pool_server *server, struct pool_db *db, struct pool_conn *conn,
			const struct pool_error *err, uint64_t now_ns)
{
	struct pool_deferred d = {0};
	pthread_mutex_lock(&server->lock);
	struct pool_slot *slot = &db->slots[server->index];
	TERN_ASSERT(slot->opening_count > 0 && server->opening_count > 0);
	slot->opening_count--;
	server->opening_count--;
	struct pool_request *req = pool_oldest_waiter(server, db);
	if (conn) {
		slot->retry_ns = 0;
		conn->server = server;
		conn->db = db;
		conn->opened_ns = now_ns;
		conn->state = POOL_CONN_USED;
		base_list_init(&conn->slot_link);
		base_list_insert_tail(&server->used_conns, &conn->link);
		slot->open_count++;
		server->open_count++;
		server->opened_total++;
		if (req)
			pool_grant(server, req, conn, &d);
		else
			pool_conn_make_free(server, conn, now_ns);
	} else {
		server->open_failed_total++;
		pool_groups_add(server, db, -1);
		if (req && pool->settings.login_retry_ns && pool_error_is_unreachable(err)) {
			/* The server did not answer: its requests wait (up to query_wait_timeout) for a retry. */
			slot->retry_ns = now_ns + pool->settings.login_retry_ns;
		} else if (req) {
			/* The oldest waiter for this key gets the server's own refusal (unknown database, bad
			 * password); the others get an open of their own so each sees the current answer. */
			req->error = *err;
			pool_waiter_finish(server, req, &d);
		}
	}
	pool_serve_waiters(pool, server, now_ns, &d);
	pthread_mutex_unlock(&server->lock);
	pool_deferred_run(pool, server, &d);
}

bool pool_conn_remove_if_free(struct pool *pool, struct pool_conn *conn)
{
	struct pool_server *server = conn->server;
	struct pool_deferred d = {0};
	pthread_mutex_lock(&server->lock);
	bool removed = conn->state == POOL_CONN_FREE;
	if (removed) {
		pool_conn_forget(server, conn);
		pool_serve_waiters(pool, server, 0, &d);
	}
	pthread_mutex_unlock(&server->lock);
	pool_deferred_run(pool, server, &d);
	return removed;
}

/* Closes up to POOL_DEFERRED_MAX of server's expired connections (one mutex hold); returns how many. */
static uint32_t pool_expire_some(struct pool *pool, struct pool_server *server, uint64_t now_ns)
{
	struct pool_deferred d = {0};
	pthread_mutex_lock(&server->lock);
	uint64_t idle_ns = pool->settings.idle_timeout_ns; /* pool_set_settings writes it under the locks */
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &server->free_conns)
	{
		if (d.close_count == POOL_DEFERRED_MAX)
			break; /* the rest wait for the next round */
		struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
		bool idle_expired = idle_ns && now_ns - conn->released_ns >= idle_ns;
		if (!idle_expired && !conn->is_close_needed && !pool_conn_is_past_lifetime(pool, conn, now_ns) &&
		    !pool_limits(pool, server, conn->db, now_ns, 1))
			continue;
		pool_conn_forget(server, conn);
		d.close[d.close_count++] = conn;
	}
	/* Requests that have waited reserve_pool_timeout (or server_login_retry) may open now. */
	if (!base_list_is_empty(&server->waiters))
		pool_serve_waiters(pool, server, now_ns, &d);
	pthread_mutex_unlock(&server->lock);
	pool_deferred_run(pool, server, &d);
	return d.close_count;
}

uint32_t pool_expire(struct pool *pool, uint64_t now_ns)
{
	uint32_t closed = 0;
	for (uint32_t s = 0; s < pool->server_count; s++) {
		/* Rounds of a few closes each keep every mutex hold short; a pass ends within a bound. */
		for (uint32_t round = 0, n = POOL_DEFERRED_MAX; round < POOL_EXPIRE_ROUNDS_MAX && n == POOL_DEFERRED_MAX;
		     round++) {
			n = pool_expire_some(pool, &pool->servers[s], now_ns);
			closed += n;
		}
	}
	(void)pool_free_unused(pool);
	return closed;
}

/* Every open connection to `database` (NULL: all): marked to close (`is_marking`), returning how many;
 * or counted when already marked. Each server's lists are walked under its mutex. */
static uint32_t pool_conns_to(struct pool *pool, const char *database, bool is_marking)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < pool->server_count; s++) {
		struct pool_server *server = &pool->servers[s];
		pthread_mutex_lock(&server->lock);
		struct base_list *lists[] = {&server->used_conns, &server->free_conns};
		for (size_t l = 0; l < TERN_ARRAY_LEN(lists); l++) {
			for (struct base_list *node = lists[l]->next; node != lists[l]; node = node->next) {
				struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
				if (database && strcmp(conn->db->database, database) != 0)
					continue;
				n += is_marking || conn->is_close_needed;
				conn->is_close_needed |= is_marking;
			}
		}
		pthread_mutex_unlock(&server->lock);
	}
	return n;
}

uint32_t pool_reconnect(struct pool *pool, const char *database)
{
	uint32_t marked = pool_conns_to(pool, database, true);
	/* The idle ones go now, a few per mutex hold. */
	for (uint32_t s = 0; s < pool->server_count; s++) {
		struct pool_server *server = &pool->servers[s];
		uint32_t closed;
		do {
			struct pool_deferred d = {0};
			pthread_mutex_lock(&server->lock);
			struct base_list *node, *tmp;
			base_list_for_each_safe(node, tmp, &server->free_conns)
			{
				struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
				if (d.close_count == POOL_DEFERRED_MAX)
					break;
				if (conn->is_close_needed) {
					pool_conn_forget(server, conn);
					d.close[d.close_count++] = conn;
				}
			}
			pool_serve_waiters(pool, server, 0, &d);
			pthread_mutex_unlock(&server->lock);
			closed = d.close_count;
			pool_deferred_run(pool, server, &d);
		} while (closed == POOL_DEFERRED_MAX);
	}
	return marked;
}

uint32_t pool_close_pending(struct pool *pool, const char *database)
{
	return pool_conns_to(pool, database, false);
}

uint32_t pool_warm(struct pool *pool)
{
	uint32_t started = 0;
	pthread_mutex_lock(&pool->dbs_lock);
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &pool->dbs)
	{
		struct pool_db *db = TERN_CONTAINER_OF(node, struct pool_db, link);
		for (uint32_t s = 0; s < pool->server_count; s++) {
			struct pool_server *server = &pool->servers[s];
			struct pool_deferred d = {0};
			pthread_mutex_lock(&server->lock);
			struct pool_slot *slot = &db->slots[s];
			/* (a key no server accepted yet is not "used": a refused login is never warmed) */
			while (db->params_ready && d.open_count < POOL_DEFERRED_MAX && pool_limits(pool, server, db, 0, 0) == 0 &&
			       slot->open_count + slot->opening_count < pool->settings.min_pool_size)
				pool_request_open(server, db, &d);
			pthread_mutex_unlock(&server->lock);
			started += d.open_count;
			pool_deferred_run(pool, server, &d);
		}
	}
	pthread_mutex_unlock(&pool->dbs_lock);
	return started;
}
