/* The pool's keys (pool.h: user, database, startup options), their hash table and the per-user and
 * per-database groups the limits count by: a pool_db is made on a session's first use of its key and freed
 * with its last session and connection. Owns pool->buckets, the groups and each pool_db's settings and
 * secret; never moves a connection (pool.c does). */
#include "pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Keys a hash bucket holds on average before the table doubles. */
#define POOL_BUCKET_LOAD_MAX 2u

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

void pool_db_free(struct pool_db *db)
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
		.profile_generation = __atomic_load_n(&pool->profile_generation, __ATOMIC_ACQUIRE),
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
bool pool_db_free_if_unused(struct pool *pool, struct pool_db *db)
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


size_t pool_db_copy_secret(struct pool *pool, const struct pool_db *db, uint8_t out[POOL_SECRET_MAX])
{
	pthread_mutex_lock(&pool->dbs_lock);
	size_t len = db->secret_len;
	memcpy(out, db->secret, len);
	pthread_mutex_unlock(&pool->dbs_lock);
	return len;
}
