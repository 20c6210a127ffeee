/* The pool as the console and the admin HTTP endpoint see it (pool.h: snapshots, idleness), copied under
 * the servers' locks so callers never take one. Reads the pool, never changes it (pool.c does). */
#include "pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
				base_strlcpy(rows[have].tls, conn->tls_name, sizeof(rows[have].tls));
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
