/* The pieces of stmts.h: stmts named by a 128-bit hash of their Parse content, a client's name map and a
 * connection's cache (open addressing; the cache evicts its least recently used), the reply queue. See stmts.h. */
#include "stmts.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

/* ---- stmt ---- */

struct stmt *stmt_create(const uint8_t *content, uint32_t len)
{
	struct stmt *stmt = malloc(sizeof(*stmt) + len);
	if (!stmt)
		return NULL;
	XXH128_hash_t hash = XXH3_128bits(content, len);
	stmt->refs = 1;
	stmt->hash_high = hash.high64;
	stmt->hash_low = hash.low64;
	snprintf(stmt->server_name, sizeof(stmt->server_name), "tern_%016llx%016llx",
		 (unsigned long long)hash.high64, (unsigned long long)hash.low64);
	stmt->content_len = len;
	stmt->names_search_path = false;
	stmt->digest = 0;
	memcpy(stmt->content, content, len);
	return stmt;
}

void stmt_unref(struct stmt *stmt)
{
	TERN_ASSERT(stmt->refs > 0);
	if (--stmt->refs == 0)
		free(stmt);
}

/* ---- stmt_map ---- */

void stmt_map_init(struct stmt_map *map) { memset(map, 0, sizeof(*map)); }

static uint32_t stmt_map_slot_of(const struct stmt_map *map, const char *name)
{
	return (uint32_t)XXH3_64bits(name, strlen(name)) & (map->capacity - 1);
}

static struct stmt_map_entry *stmt_map_find(const struct stmt_map *map, const char *name)
{
	if (map->count == 0)
		return NULL;
	for (uint32_t i = stmt_map_slot_of(map, name);; i = (i + 1) & (map->capacity - 1)) {
		struct stmt_map_entry *e = &map->slots[i];
		if (!e->name)
			return NULL;
		if (strcmp(e->name, name) == 0)
			return e;
	}
}

struct stmt *stmt_map_get(const struct stmt_map *map, const char *name)
{
	struct stmt_map_entry *e = stmt_map_find(map, name);
	return e ? e->stmt : NULL;
}

static void stmt_map_insert_slot(struct stmt_map *map, struct stmt_map_entry entry)
{
	uint32_t i = stmt_map_slot_of(map, entry.name);
	while (map->slots[i].name)
		i = (i + 1) & (map->capacity - 1);
	map->slots[i] = entry;
}

static int stmt_map_grow(struct stmt_map *map)
{
	uint32_t capacity = map->capacity ? map->capacity * 2 : 16;
	struct stmt_map_entry *old = map->slots;
	uint32_t old_capacity = map->capacity;
	map->slots = calloc(capacity, sizeof(*map->slots));
	if (!map->slots) {
		map->slots = old;
		return -ENOMEM;
	}
	map->capacity = capacity;
	for (uint32_t i = 0; i < old_capacity; i++)
		if (old[i].name)
			stmt_map_insert_slot(map, old[i]);
	free(old);
	return 0;
}

int stmt_map_put(struct stmt_map *map, const char *name, struct stmt *stmt, uint64_t seq)
{
	TERN_ASSERT(!stmt_map_find(map, name));
	TERN_ASSERT(map->count < STMT_MAP_NAMES_MAX);
	if ((map->count + 1) * 4 > map->capacity * 3 && stmt_map_grow(map) < 0) /* load ≤ 3/4 */
		return -ENOMEM;
	char *copy = strdup(name);
	if (!copy)
		return -ENOMEM;
	stmt_map_insert_slot(map, (struct stmt_map_entry){.name = copy, .stmt = stmt_ref(stmt), .seq = seq});
	map->count++;
	return 0;
}

static void stmt_map_remove_entry(struct stmt_map *map, struct stmt_map_entry *e)
{
	free(e->name);
	stmt_unref(e->stmt);
	e->name = NULL;
	map->count--;
	/* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
	uint32_t mask = map->capacity - 1;
	uint32_t hole = (uint32_t)(e - map->slots);
	for (uint32_t i = (hole + 1) & mask; map->slots[i].name; i = (i + 1) & mask) {
		uint32_t home = stmt_map_slot_of(map, map->slots[i].name);
		/* Move i into the hole when its home lies cyclically outside (hole, i]. */
		if (((i - home) & mask) >= ((i - hole) & mask)) {
			map->slots[hole] = map->slots[i];
			map->slots[i].name = NULL;
			hole = i;
		}
	}
}

bool stmt_map_remove(struct stmt_map *map, const char *name)
{
	struct stmt_map_entry *e = stmt_map_find(map, name);
	if (!e)
		return false;
	stmt_map_remove_entry(map, e);
	return true;
}

void stmt_map_remove_before(struct stmt_map *map, uint64_t seq)
{
	/* A removal shifts later entries of the chain back, possibly into slot i: look at i again. Entries
	 * only move into holes at or after i (or, wrapping, among the slots already kept). */
	for (uint32_t i = 0; i < map->capacity;) {
		struct stmt_map_entry *e = &map->slots[i];
		if (e->name && e->seq < seq)
			stmt_map_remove_entry(map, e);
		else
			i++;
	}
}

void stmt_map_clear(struct stmt_map *map)
{
	for (uint32_t i = 0; i < map->capacity; i++) {
		if (map->slots[i].name) {
			free(map->slots[i].name);
			stmt_unref(map->slots[i].stmt);
			map->slots[i].name = NULL;
		}
	}
	map->count = 0;
}

void stmt_map_deinit(struct stmt_map *map)
{
	stmt_map_clear(map);
	free(map->slots);
	memset(map, 0, sizeof(*map));
}

/* ---- stmt_cache ---- */

struct stmt_cache *stmt_cache_create(void) { return calloc(1, sizeof(struct stmt_cache)); }

void stmt_cache_destroy(void *cache)
{
	struct stmt_cache *c = cache;
	if (!c)
		return;
	free(c->slots);
	free(c);
}

static uint32_t stmt_cache_slot_of(const struct stmt_cache *cache, uint64_t hash_low)
{
	return (uint32_t)hash_low & (cache->capacity - 1);
}

static struct stmt_cache_entry *stmt_cache_find(const struct stmt_cache *cache, uint64_t high, uint64_t low)
{
	if (cache->count == 0)
		return NULL;
	for (uint32_t i = stmt_cache_slot_of(cache, low);; i = (i + 1) & (cache->capacity - 1)) {
		struct stmt_cache_entry *e = &cache->slots[i];
		if (e->last_use == 0)
			return NULL;
		if (e->hash_low == low && e->hash_high == high)
			return e;
	}
}

bool stmt_cache_touch(struct stmt_cache *cache, const struct stmt *stmt)
{
	struct stmt_cache_entry *e = stmt_cache_find(cache, stmt->hash_high, stmt->hash_low);
	if (!e)
		return false;
	e->last_use = ++cache->clock;
	return true;
}

static void stmt_cache_insert_slot(struct stmt_cache *cache, struct stmt_cache_entry entry)
{
	uint32_t i = stmt_cache_slot_of(cache, entry.hash_low);
	while (cache->slots[i].last_use)
		i = (i + 1) & (cache->capacity - 1);
	cache->slots[i] = entry;
}

static int stmt_cache_grow(struct stmt_cache *cache)
{
	uint32_t capacity = cache->capacity ? cache->capacity * 2 : 16;
	struct stmt_cache_entry *old = cache->slots;
	uint32_t old_capacity = cache->capacity;
	cache->slots = calloc(capacity, sizeof(*cache->slots));
	if (!cache->slots) {
		cache->slots = old;
		return -ENOMEM;
	}
	cache->capacity = capacity;
	for (uint32_t i = 0; i < old_capacity; i++)
		if (old[i].last_use)
			stmt_cache_insert_slot(cache, old[i]);
	free(old);
	return 0;
}

static void stmt_cache_delete(struct stmt_cache *cache, struct stmt_cache_entry *e)
{
	e->last_use = 0;
	cache->count--;
	uint32_t mask = cache->capacity - 1;
	uint32_t hole = (uint32_t)(e - cache->slots);
	for (uint32_t i = (hole + 1) & mask; cache->slots[i].last_use; i = (i + 1) & mask) {
		uint32_t home = stmt_cache_slot_of(cache, cache->slots[i].hash_low);
		if (((i - home) & mask) >= ((i - hole) & mask)) {
			cache->slots[hole] = cache->slots[i];
			cache->slots[i].last_use = 0;
			hole = i;
		}
	}
}

int stmt_cache_add(struct stmt_cache *cache, const struct stmt *stmt, uint32_t max,
		   char evicted_name[STMT_SERVER_NAME_LEN])
{
	TERN_ASSERT(max > 0 && !stmt_cache_find(cache, stmt->hash_high, stmt->hash_low));
	max = TERN_MIN(max, STMT_CACHE_MAX);
	int evicted = 0;
	if (cache->count >= max) {
		/* Eviction is rare (max_prepared_statements is sized above a client's working set): a scan. */
		struct stmt_cache_entry *oldest = NULL;
		for (uint32_t i = 0; i < cache->capacity; i++) {
			struct stmt_cache_entry *e = &cache->slots[i];
			if (e->last_use && (!oldest || e->last_use < oldest->last_use))
				oldest = e;
		}
		TERN_ASSERT(oldest != NULL);
		snprintf(evicted_name, STMT_SERVER_NAME_LEN, "tern_%016llx%016llx",
			 (unsigned long long)oldest->hash_high, (unsigned long long)oldest->hash_low);
		stmt_cache_delete(cache, oldest);
		evicted = 1;
	}
	if ((cache->count + 1) * 4 > cache->capacity * 3 && stmt_cache_grow(cache) < 0)
		return -ENOMEM;
	stmt_cache_insert_slot(cache, (struct stmt_cache_entry){.hash_high = stmt->hash_high,
								.hash_low = stmt->hash_low,
								.last_use = ++cache->clock});
	cache->count++;
	return evicted;
}

void stmt_cache_remove(struct stmt_cache *cache, const struct stmt *stmt)
{
	struct stmt_cache_entry *e = stmt_cache_find(cache, stmt->hash_high, stmt->hash_low);
	if (e)
		stmt_cache_delete(cache, e);
}

void stmt_cache_clear(struct stmt_cache *cache)
{
	if (cache->slots)
		memset(cache->slots, 0, cache->capacity * sizeof(*cache->slots));
	cache->count = 0;
}

/* ---- stmt_replies ---- */

void stmt_replies_init(struct stmt_replies *replies) { memset(replies, 0, sizeof(*replies)); }

static void stmt_reply_free(struct stmt_reply_entry *e)
{
	free(e->data);
	e->data = NULL;
	if (e->stmt)
		stmt_unref(e->stmt);
	e->stmt = NULL;
}

static int stmt_replies_reserve(struct stmt_replies *replies)
{
	if (replies->count >= STMT_REPLIES_MAX)
		return -ENOBUFS;
	if (replies->count < replies->capacity)
		return 0;
	uint32_t capacity = replies->capacity ? replies->capacity * 2 : 16;
	struct stmt_reply_entry *entries = malloc(capacity * sizeof(*entries));
	if (!entries)
		return -ENOMEM;
	for (uint32_t i = 0; i < replies->count; i++)
		entries[i] = replies->entries[(replies->head + i) & (replies->capacity - 1)];
	free(replies->entries);
	replies->entries = entries;
	replies->capacity = capacity;
	replies->head = 0;
	return 0;
}

int stmt_replies_push_back(struct stmt_replies *replies, uint8_t kind, void *data, uint32_t data_len,
			   struct stmt *stmt)
{
	int rc = stmt_replies_reserve(replies);
	if (rc < 0)
		return rc;
	uint32_t i = (replies->head + replies->count) & (replies->capacity - 1);
	replies->entries[i] = (struct stmt_reply_entry){.kind = kind,
							.data = data,
							.data_len = data_len,
							.stmt = stmt ? stmt_ref(stmt) : NULL,
							.seq = ++replies->pushed};
	replies->count++;
	return 0;
}

int stmt_replies_push_front(struct stmt_replies *replies, uint8_t kind, void *data, uint32_t data_len,
			    struct stmt *stmt)
{
	int rc = stmt_replies_reserve(replies);
	if (rc < 0)
		return rc;
	replies->head = (replies->head - 1) & (replies->capacity - 1);
	replies->entries[replies->head] = (struct stmt_reply_entry){
		.kind = kind, .data = data, .data_len = data_len, .stmt = stmt ? stmt_ref(stmt) : NULL};
	replies->count++;
	return 0;
}

int stmt_replies_push_plain(struct stmt_replies *replies)
{
	if (replies->count > 0) {
		struct stmt_reply_entry *tail =
			&replies->entries[(replies->head + replies->count - 1) & (replies->capacity - 1)];
		if (tail->kind == STMT_REPLY_PLAIN && tail->data_len < UINT32_MAX) {
			tail->data_len++;
			return 0;
		}
	}
	int rc = stmt_replies_push_back(replies, STMT_REPLY_PLAIN, NULL, 1, NULL);
	return rc;
}

void stmt_replies_pop(struct stmt_replies *replies)
{
	TERN_ASSERT(replies->count > 0);
	stmt_reply_free(&replies->entries[replies->head]);
	replies->head = (replies->head + 1) & (replies->capacity - 1);
	replies->count--;
}

uint32_t stmt_replies_remove_after_head(struct stmt_replies *replies, uint8_t kind, uint32_t n)
{
	uint32_t mask = replies->capacity - 1;
	uint32_t removed = 0;
	uint32_t kept = 1; /* the head stays */
	for (uint32_t i = 1; i < replies->count; i++) {
		struct stmt_reply_entry *e = &replies->entries[(replies->head + i) & mask];
		if (e->kind == kind && removed < n) {
			stmt_reply_free(e);
			removed++;
			continue;
		}
		replies->entries[(replies->head + kept) & mask] = *e;
		kept++;
	}
	if (replies->count > 0)
		replies->count = kept;
	return removed;
}

void stmt_replies_clear(struct stmt_replies *replies)
{
	while (replies->count > 0)
		stmt_replies_pop(replies);
}

void stmt_replies_deinit(struct stmt_replies *replies)
{
	stmt_replies_clear(replies);
	free(replies->entries);
	memset(replies, 0, sizeof(*replies));
}

void leg_stmts_init(struct leg_stmts *ls)
{
	memset(ls, 0, sizeof(*ls));
	stmt_replies_init(&ls->replies);
}

void leg_stmts_deinit(struct leg_stmts *ls)
{
	stmt_replies_deinit(&ls->replies);
	for (uint32_t i = 0; i < ls->needed_count; i++)
		stmt_unref(ls->needed[i].stmt);
	free(ls->needed);
	ls->needed = NULL;
	ls->needed_count = ls->needed_cap = 0;
}
