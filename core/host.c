/* The host of host.h: its lists set up, and the worker-local cache of released connections (take, put, and
 * the flush back to the pool). See host.h. */
#include "host.h"

void host_init(struct host *host, uint32_t index, struct tern_runtime *runtime, const struct host_ops *ops)
{
	TERN_ASSERT(ops->request_done && ops->route_cancel && ops->lookup_done);
	host->index = index;
	host->runtime = runtime;
	host->ops = ops;
	base_list_init(&host->sessions);
	base_list_init(&host->reaping);
	base_list_init(&host->parked);
	base_list_init(&host->flush);
	base_list_init(&host->starved);
	base_list_init(&host->ending);
	base_list_init(&host->holds);
	base_list_init(&host->route_waits);
	base_list_init(&host->recover_waits);
	pick_init(&host->pick, ((uint64_t)index + 1) * 0x9e3779b97f4a7c15ull);
}

struct pool_conn *host_local_take(struct host *host, const struct pool_db *db, const struct pool_server *server)
{
	for (uint32_t i = host->local_count; i-- > 0;) {
		struct pool_conn *conn = host->local_cache[i];
		if (conn->db == db && conn->server == server) {
			host->local_cache[i] = host->local_cache[--host->local_count];
			return conn;
		}
	}
	return NULL;
}

void host_local_put(struct host *host, struct pool_conn *conn)
{
	TERN_ASSERT(conn->state == POOL_CONN_USED);
	if (host->local_count == HOST_LOCAL_CACHE_MAX) {
		pool_checkin(host->runtime->pool, conn, base_now_ns());
		return;
	}
	host->local_cache[host->local_count++] = conn;
}

void host_local_flush(struct host *host)
{
	if (host->local_count == 0)
		return;
	uint64_t now = base_now_ns();
	for (uint32_t i = 0; i < host->local_count; i++)
		pool_checkin(host->runtime->pool, host->local_cache[i], now);
	host->local_count = 0;
}
