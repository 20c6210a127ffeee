#include "pool.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

/* Keys a hash bucket holds on average before the table doubles. */
#define POOL_BUCKET_LOAD_MAX 2u
#define POOL_BUCKETS_INITIAL 64u

/* Rounds of closes one pool_expire pass makes per server: 512 connections a second at most. */
#define POOL_EXPIRE_ROUNDS_MAX 64u

static void pool_db_free(struct pool_db *db);

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

static uint64_t pool_hash_pair(const char *a, const char *b)
{
	/* Chained with the NUL included, so ("ab","c") and ("a","bc") differ. */
	return XXH3_64bits_withSeed(b, strlen(b) + 1, XXH3_64bits(a, strlen(a) + 1));
}

static bool pool_key_equal(const struct pool_key *a, const struct pool_key *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

/* The group named `name` in `groups`, made when absent, with a reference taken; NULL when out of memory.
 * Under dbs_lock. Groups are few (one per database name, one per user name): a list is enough. */
static struct pool_group *pool_group_get(struct base_list *groups, const char *name)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, groups)
	{
		struct pool_group *group = TERN_CONTAINER_OF(node, struct pool_group, link);
		if (strcmp(group->name, name) == 0) {
			group->refs++;
			return group;
		}
	}
	struct pool_group *group = calloc(1, sizeof(*group));
	if (group) {
		base_strlcpy(group->name, name, sizeof(group->name));
		group->refs = 1;
		base_list_insert_tail(groups, &group->link);
	}
	return group;
}

static void pool_group_put(struct pool_group *group)
{
	if (!group)
		return;
	TERN_ASSERT(group->refs > 0);
	if (--group->refs > 0)
		return;
	for (uint32_t s = 0; s < POOL_SERVERS_MAX; s++)
		TERN_ASSERT(group->counts[s] == 0);
	base_list_remove(&group->link);
	free(group);
}

static struct base_list *pool_bucket(const struct pool *pool, const struct pool_key *key)
{
	return &pool->buckets[XXH3_64bits(key, sizeof(*key)) & (pool->bucket_count - 1)];
}

/* Doubles the table when it holds POOL_BUCKET_LOAD_MAX keys a bucket; a failed allocation keeps the old
 * one (longer chains, still correct). Under dbs_lock. */
static void pool_buckets_grow(struct pool *pool)
{
	if (pool->db_count <= pool->bucket_count * POOL_BUCKET_LOAD_MAX || pool->bucket_count > UINT32_MAX / 4)
		return;
	uint32_t old_count = pool->bucket_count;
	struct base_list *old = pool->buckets;
	struct base_list *grown = malloc((size_t)old_count * 2 * sizeof(*grown));
	if (!grown)
		return;
	pool->buckets = grown;
	pool->bucket_count = old_count * 2;
	for (uint32_t i = 0; i < pool->bucket_count; i++)
		base_list_init(&grown[i]);
	for (uint32_t i = 0; i < old_count; i++) {
		struct base_list *node;
		while ((node = base_list_pop_head(&old[i])) != NULL) {
			struct pool_db *db = TERN_CONTAINER_OF(node, struct pool_db, hash_link);
			base_list_insert_tail(pool_bucket(pool, &db->key), &db->hash_link);
		}
	}
	free(old);
}

static void pool_db_free(struct pool_db *db)
{
	pool_group_put(db->database_group);
	pool_group_put(db->user_group);
	free(db->options);
	free(db->password);
	free(db->params);
	explicit_bzero(db->secret, sizeof(db->secret));
	free(db);
}

static struct pool_db *pool_db_create(struct pool *pool, const struct pool_key *key, const char *user,
				      const char *database, const char *options, const char *password)
{
	if (strlen(user) >= POOL_NAME_LEN_MAX || strlen(database) >= POOL_NAME_LEN_MAX)
		return NULL;
	struct pool_db *db = calloc(1, sizeof(*db));
	if (!db)
		return NULL;
	db->key = *key;
	base_strlcpy(db->user, user, sizeof(db->user));
	base_strlcpy(db->database, database, sizeof(db->database));
	db->options = strdup(options);
	db->password = password ? strdup(password) : NULL;
	db->database_group = pool_group_get(&pool->database_groups, database);
	db->user_group = pool_group_get(&pool->user_groups, user);
	for (uint32_t s = 0; s < POOL_SERVERS_MAX; s++)
		base_list_init(&db->slots[s].free_conns);
	if (!db->options || (password && !db->password) || !db->database_group || !db->user_group) {
		pool_db_free(db);
		return NULL;
	}
	base_list_insert_tail(&pool->dbs, &db->link);
	base_list_insert_tail(pool_bucket(pool, key), &db->hash_link);
	pool->db_count++;
	pool_buckets_grow(pool);
	return db;
}

struct pool_db *pool_db_get(struct pool *pool, const char *user, const char *database, const char *options,
			    const char *password, uint64_t identity_hash)
{
	if (!options)
		options = "";
	struct pool_key key = {
		.profile_generation = 0,
		.user_database_hash = pool_hash_pair(user, database),
		.identity_hash = identity_hash,
		.options_hash = XXH3_64bits(options, strlen(options)),
	};
	pthread_mutex_lock(&pool->dbs_lock);
	struct base_list *node, *tmp;
	struct pool_db *found = NULL;
	base_list_for_each_safe(node, tmp, pool_bucket(pool, &key))
	{
		struct pool_db *db = TERN_CONTAINER_OF(node, struct pool_db, hash_link);
		/* Compare the strings too: a hash collision must never share a connection. */
		if (pool_key_equal(&db->key, &key) && strcmp(db->user, user) == 0 &&
		    strcmp(db->database, database) == 0 && strcmp(db->options, options) == 0) {
			found = db;
			break;
		}
	}
	if (!found)
		found = pool_db_create(pool, &key, user, database, options, password);
	if (found)
		found->refs++;
	pthread_mutex_unlock(&pool->dbs_lock);
	return found;
}

/* Frees db when nobody holds it and it has no connection open, opening or waited for on any server; true
 * when it did. Under dbs_lock, taking each server's lock in turn (the order pool_warm uses): nothing can
 * reach db after that, since a new holder needs dbs_lock and no connection or request names it. */
static bool pool_db_free_if_unused(struct pool *pool, struct pool_db *db)
{
	if (db->refs > 0)
		return false;
	for (uint32_t s = 0; s < pool->server_count; s++) {
		struct pool_server *server = &pool->servers[s];
		pthread_mutex_lock(&server->lock);
		const struct pool_slot *slot = &db->slots[s];
		bool is_used = slot->open_count > 0 || slot->opening_count > 0 || slot->waiting_count > 0;
		pthread_mutex_unlock(&server->lock);
		if (is_used)
			return false;
	}
	base_list_remove(&db->link);
	base_list_remove(&db->hash_link);
	pool->db_count--;
	pool_db_free(db);
	return true;
}

void pool_db_put(struct pool *pool, struct pool_db *db)
{
	pthread_mutex_lock(&pool->dbs_lock);
	TERN_ASSERT(db->refs > 0);
	db->refs--;
	(void)pool_db_free_if_unused(pool, db); /* a key with no connection goes with its last client */
	pthread_mutex_unlock(&pool->dbs_lock);
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

void pool_db_set_params(struct pool *pool, struct pool_db *db, const struct pool_param *params, uint32_t count)
{
	pthread_mutex_lock(&pool->dbs_lock);
	if (!db->params_ready && (db->params = malloc(POOL_PARAMS_MAX * sizeof(*db->params))) != NULL) {
		db->param_count = TERN_MIN(count, POOL_PARAMS_MAX);
		memcpy(db->params, params, db->param_count * sizeof(*params));
		__atomic_store_n(&db->params_ready, 1, __ATOMIC_RELEASE);
	} /* (out of memory: the next login tries again; until then clients wait for a server to welcome) */
	pthread_mutex_unlock(&pool->dbs_lock);
}

void pool_db_set_secret(struct pool *pool, struct pool_db *db, const void *secret, size_t len)
{
	TERN_ASSERT(secret != NULL && len > 0 && len <= POOL_SECRET_MAX);
	pthread_mutex_lock(&pool->dbs_lock);
	if (db->secret_len != len || memcmp(db->secret, secret, len) != 0) {
		memcpy(db->secret, secret, len);
		db->secret_len = (uint32_t)len;
	}
	pthread_mutex_unlock(&pool->dbs_lock);
}

void pool_db_set_overrides(struct pool_db *db, const struct pool_overrides *o)
{
	__atomic_store_n(&db->pool_size, o->pool_size, __ATOMIC_RELAXED);
	__atomic_store_n(&db->reserve_pool_size, o->reserve_pool_size, __ATOMIC_RELAXED);
	__atomic_store_n(&db->database_group->limit, o->max_db_connections, __ATOMIC_RELAXED);
	__atomic_store_n(&db->user_group->limit, o->max_user_connections, __ATOMIC_RELAXED);
}

/* An override when set, else the setting. */
static uint32_t pool_or(const uint32_t *override, uint32_t setting)
{
	uint32_t value = __atomic_load_n(override, __ATOMIC_RELAXED);
	return value ? value : setting;
}

size_t pool_db_copy_secret(struct pool *pool, const struct pool_db *db, uint8_t out[POOL_SECRET_MAX])
{
	pthread_mutex_lock(&pool->dbs_lock);
	size_t len = db->secret_len;
	memcpy(out, db->secret, len);
	pthread_mutex_unlock(&pool->dbs_lock);
	return len;
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

/* A login that failed before the server could judge it: it may work when retried. */
static bool pool_error_is_unreachable(const struct pool_error *err)
{
	return strncmp(err->sqlstate, "08", 2) == 0 || strcmp(err->sqlstate, "57P03") == 0 ||
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

/* ---- snapshots: copied under the locks so callers never take one ---- */

/* Copies of a count that grew between the count and the copy are retried this often, then what fits is
 * kept: a console listing may lag a busy pool, but it must never loop or allocate under a server mutex. */
#define POOL_SNAPSHOT_ATTEMPTS_MAX 4u

/* Under server->lock. */
static void pool_db_row_fill(const struct pool_server *server, const struct pool_db *db, struct pool_db_row *row)
{
	const struct pool_slot *slot = &db->slots[server->index];
	uint32_t free_count = 0;
	const struct base_list *node;
	for (node = slot->free_conns.next; node != &slot->free_conns; node = node->next)
		free_count++;
	TERN_ASSERT(free_count <= slot->open_count);
	/* Callers pass their own clocks, so the queue's head need not hold the smallest parked_ns: take the
	 * minimum, stopping once every waiter of this key was seen. */
	uint64_t oldest_ns = 0;
	uint32_t seen = 0;
	for (node = server->waiters.next; node != &server->waiters && seen < slot->waiting_count; node = node->next) {
		const struct pool_request *req = TERN_CONTAINER_OF(node, struct pool_request, link);
		if (req->db != db)
			continue;
		if (seen == 0 || req->parked_ns < oldest_ns)
			oldest_ns = req->parked_ns;
		seen++;
	}
	TERN_ASSERT(seen == slot->waiting_count);
	*row = (struct pool_db_row){
		.client_count = __atomic_load_n(&db->client_count, __ATOMIC_RELAXED),
		.server_index = server->index,
		.free_count = free_count,
		.used_count = slot->open_count - free_count,
		.opening_count = slot->opening_count,
		.waiting_count = slot->waiting_count,
		.oldest_parked_ns = oldest_ns,
	};
	base_strlcpy(row->user, db->user, sizeof(row->user));
	base_strlcpy(row->database, db->database, sizeof(row->database));
}

int pool_snapshot_dbs(struct pool *pool, struct pool_db_row **rows, uint32_t *count)
{
	TERN_ASSERT(pool && rows && count);
	*rows = NULL;
	*count = 0;
	uint32_t server_count = pool->server_count;
	/* Keys come and go between the count and the copy: what fits is copied, the rest waits for the next
	 * snapshot. */
	uint32_t db_count = 0;
	struct base_list *node, *tmp;
	pthread_mutex_lock(&pool->dbs_lock);
	base_list_for_each_safe(node, tmp, &pool->dbs) db_count++;
	pthread_mutex_unlock(&pool->dbs_lock);
	if (db_count == 0 || server_count == 0)
		return 0;
	if (db_count > UINT32_MAX / server_count)
		return -ENOMEM;
	uint32_t total = db_count * server_count;
	struct pool_db_row *out = malloc((size_t)total * sizeof(*out));
	if (!out)
		return -ENOMEM;
	uint32_t filled = 0;
	/* The same order as pool_warm: dbs_lock outer, each server's mutex inner. */
	pthread_mutex_lock(&pool->dbs_lock);
	base_list_for_each_safe(node, tmp, &pool->dbs)
	{
		if (filled == total)
			break;
		const struct pool_db *db = TERN_CONTAINER_OF(node, struct pool_db, link);
		for (uint32_t s = 0; s < server_count; s++) {
			struct pool_server *server = &pool->servers[s];
			pthread_mutex_lock(&server->lock);
			pool_db_row_fill(server, db, &out[filled++]);
			pthread_mutex_unlock(&server->lock);
		}
	}
	pthread_mutex_unlock(&pool->dbs_lock);
	TERN_ASSERT(filled <= total);
	*rows = out;
	*count = filled;
	return 0;
}

/* Copies server's USED then FREE connections into rows, at most capacity; returns how many it has. */
static uint32_t pool_conn_rows_fill(struct pool_server *server, struct pool_conn_row *rows, size_t capacity)
{
	uint32_t have = 0;
	pthread_mutex_lock(&server->lock);
	const struct base_list *lists[] = {&server->used_conns, &server->free_conns};
	for (size_t l = 0; l < TERN_ARRAY_LEN(lists); l++) {
		const struct base_list *node;
		for (node = lists[l]->next; node != lists[l]; node = node->next) {
			const struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
			if (have < capacity) {
				rows[have] = (struct pool_conn_row){
					.id = (uintptr_t)conn,
					.server_index = server->index,
					.state = conn->state,
					.backend_pid = conn->backend_pid,
					.opened_ns = conn->opened_ns,
					.released_ns = conn->released_ns,
					.peer_addr = conn->peer_addr,
					.local_addr = conn->local_addr,
					.holder = (uintptr_t)__atomic_load_n(&conn->holder, __ATOMIC_RELAXED),
					.is_close_needed = conn->is_close_needed,
				};
				base_strlcpy(rows[have].user, conn->db->user, sizeof(rows[have].user));
				base_strlcpy(rows[have].database, conn->db->database, sizeof(rows[have].database));
			}
			have++;
		}
	}
	TERN_ASSERT(have == server->open_count);
	pthread_mutex_unlock(&server->lock);
	return have;
}

int pool_snapshot_conns(struct pool *pool, struct pool_conn_row **rows, uint32_t *count)
{
	TERN_ASSERT(pool && rows && count);
	*rows = NULL;
	*count = 0;
	uint32_t server_count = pool->server_count;
	size_t capacity = 0;
	for (uint32_t s = 0; s < server_count; s++) {
		struct pool_server *server = &pool->servers[s];
		pthread_mutex_lock(&server->lock);
		capacity += server->open_count;
		pthread_mutex_unlock(&server->lock);
	}
	for (uint32_t attempt = 1;; attempt++) {
		if (capacity == 0)
			return 0;
		if (capacity > UINT32_MAX)
			return -ENOMEM;
		struct pool_conn_row *out = malloc(capacity * sizeof(*out));
		if (!out)
			return -ENOMEM;
		size_t filled = 0, needed = 0;
		for (uint32_t s = 0; s < server_count; s++) {
			uint32_t have = pool_conn_rows_fill(&pool->servers[s], out + filled, capacity - filled);
			filled += TERN_MIN((size_t)have, capacity - filled);
			needed += have;
		}
		if (needed <= capacity || attempt == POOL_SNAPSHOT_ATTEMPTS_MAX) {
			if (filled == 0) {
				free(out); /* every connection closed meanwhile */
				return 0;
			}
			*rows = out;
			*count = (uint32_t)filled;
			return 0;
		}
		free(out);
		capacity = needed;
	}
}

bool pool_is_idle(struct pool *pool)
{
	bool idle = true;
	for (uint32_t s = 0; s < pool->server_count && idle; s++) {
		struct pool_server *server = &pool->servers[s];
		pthread_mutex_lock(&server->lock);
		idle = server->open_count == server->free_count && server->waiter_count == 0;
		pthread_mutex_unlock(&server->lock);
	}
	return idle;
}

bool pool_is_idle_for(struct pool *pool, const char *database)
{
	if (!database)
		return pool_is_idle(pool);
	bool idle = true;
	for (uint32_t s = 0; s < pool->server_count && idle; s++) {
		struct pool_server *server = &pool->servers[s];
		pthread_mutex_lock(&server->lock);
		struct base_list *node;
		for (node = server->used_conns.next; node != &server->used_conns && idle; node = node->next)
			idle = strcmp(TERN_CONTAINER_OF(node, struct pool_conn, link)->db->database, database) != 0;
		for (node = server->waiters.next; node != &server->waiters && idle; node = node->next)
			idle = strcmp(TERN_CONTAINER_OF(node, struct pool_request, link)->db->database, database) != 0;
		pthread_mutex_unlock(&server->lock);
	}
	return idle;
}
