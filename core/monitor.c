/*
 * monitor.c — the topology monitor of monitor.h: blocking libpq on its own thread, one kept connection
 * per server.
 */
#include "monitor.h"

#include "pool/opener.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one round asks each server: role, WAL position, timeline. */
static const char monitor_query[] =
	"SELECT pg_catalog.pg_is_in_recovery(), "
	"CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() "
	"ELSE pg_catalog.pg_current_wal_lsn() END, "
	"(SELECT timeline_id FROM pg_catalog.pg_control_checkpoint())";

struct monitor {
	struct tern_runtime *rt;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stopping; /* lock */
	uint32_t count;
	struct monitor_server servers[POOL_SERVERS_MAX];
	PGconn *conns[POOL_SERVERS_MAX]; /* the thread's own */
};

const char *monitor_role_name(enum monitor_role role)
{
	static const char *const names[] = {"unknown", "down", "primary", "standby"};
	return role < TERN_ARRAY_LEN(names) ? names[role] : "unknown";
}

const struct monitor_server *monitor_server_at(const struct monitor *m, uint32_t index)
{
	return index < m->count ? &m->servers[index] : NULL;
}

/* "16/B374D848" as a number, 0 when it is not an LSN. */
static uint64_t monitor_parse_lsn(const char *text)
{
	unsigned int high, low;
	return text && sscanf(text, "%X/%X", &high, &low) == 2 ? (uint64_t)high << 32 | low : 0;
}

static PGconn *monitor_connect(struct monitor *m, const struct pool_server *server)
{
	const struct tern_config *cfg = runtime_config(m->rt);
	static const char *const replaced[] = {"user", "dbname", "password", "connect_timeout",
					       "fallback_application_name", NULL};
	struct pool_conninfo params;
	char parse_err[128];
	if (pool_conninfo_init(&params, server->conninfo, replaced, parse_err, sizeof(parse_err)) < 0)
		return NULL;
	const char *user = pool_conninfo_get(&params, "user");
	if (!user)
		user = cfg->auth_user[0] ? cfg->auth_user : "postgres";
	const struct auth_file *auth = __atomic_load_n(&m->rt->auth_file, __ATOMIC_ACQUIRE);
	const struct auth_user *entry = auth ? auth_file_find(auth, user) : NULL;
	char timeout_s[24];
	snprintf(timeout_s, sizeof(timeout_s), "%" PRIu64, (cfg->server_connect_timeout_ms + 999) / 1000);
	pool_conninfo_set(&params, "user", user);
	pool_conninfo_set(&params, "password", entry && entry->kind == AUTH_SECRET_PLAIN
							? entry->secret
							: pool_conninfo_get(&params, "password"));
	pool_conninfo_set(&params, "dbname", "postgres");
	pool_conninfo_set(&params, "connect_timeout", timeout_s);
	pool_conninfo_set(&params, "fallback_application_name", "tern monitor");
	PGconn *pg = PQconnectdbParams(params.keys, params.values, 0);
	pool_conninfo_deinit(&params);
	if (pg && PQstatus(pg) != CONNECTION_OK) {
		PQfinish(pg);
		pg = NULL;
	}
	return pg;
}

/* Asks one server; marks it down when it does not answer. */
static void monitor_check(struct monitor *m, uint32_t i)
{
	struct monitor_server *state = &m->servers[i];
	uint32_t before = __atomic_load_n(&state->role, __ATOMIC_RELAXED);
	PGresult *res = NULL;
	for (int attempt = 0; attempt < 2 && !res; attempt++) { /* a kept connection the server closed: once more */
		if (!m->conns[i])
			m->conns[i] = monitor_connect(m, state->server);
		if (!m->conns[i])
			break;
		res = PQexec(m->conns[i], monitor_query);
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
			PQclear(res);
			res = NULL;
			PQfinish(m->conns[i]);
			m->conns[i] = NULL;
		}
	}
	uint32_t role = MONITOR_DOWN;
	if (res) {
		role = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? MONITOR_STANDBY : MONITOR_PRIMARY;
		__atomic_store_n(&state->lsn, monitor_parse_lsn(PQgetvalue(res, 0, 1)), __ATOMIC_RELAXED);
		__atomic_store_n(&state->timeline, (uint32_t)strtoul(PQgetvalue(res, 0, 2), NULL, 10), __ATOMIC_RELAXED);
		PQclear(res);
	}
	__atomic_store_n(&state->role, role, __ATOMIC_RELEASE);
	__atomic_store_n(&state->checked_ns, base_now_ns(), __ATOMIC_RELAXED);
	if (role != before && before != MONITOR_UNKNOWN)
		TERN_WARN("server %s is now %s (was %s)", state->server->name, monitor_role_name(role),
			  monitor_role_name(before));
}

/* Writes go to the server that says it is the primary; of two that say so, the one on the later
 * timeline (the other was left behind by a promotion). With none, they stay where they went. */
static void monitor_publish_primary(struct monitor *m)
{
	const struct monitor_server *best = NULL;
	for (uint32_t i = 0; i < m->count; i++) {
		const struct monitor_server *s = &m->servers[i];
		if (__atomic_load_n(&s->role, __ATOMIC_ACQUIRE) != MONITOR_PRIMARY)
			continue;
		if (!best || __atomic_load_n(&s->timeline, __ATOMIC_RELAXED) > __atomic_load_n(&best->timeline, __ATOMIC_RELAXED))
			best = s;
	}
	if (!best)
		return;
	struct pool_server *was = __atomic_load_n(&m->rt->primary, __ATOMIC_ACQUIRE);
	if (was != best->server) {
		__atomic_store_n(&m->rt->primary, best->server, __ATOMIC_RELEASE);
		TERN_INFO("writes go to server %s (the primary, timeline %u)", best->server->name,
			  __atomic_load_n(&best->timeline, __ATOMIC_RELAXED));
	}
}

static void monitor_round(struct monitor *m)
{
	for (uint32_t i = 0; i < m->count; i++)
		monitor_check(m, i);
	monitor_publish_primary(m);
}

static void *monitor_main(void *arg)
{
	struct monitor *m = arg;
	pthread_mutex_lock(&m->lock);
	while (!m->stopping) {
		uint64_t interval_ms = runtime_config(m->rt)->monitor_interval_ms;
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		uint64_t ns = (uint64_t)until.tv_nsec + interval_ms * BASE_NS_PER_MS;
		until.tv_sec += (time_t)(ns / BASE_NS_PER_SEC);
		until.tv_nsec = (long)(ns % BASE_NS_PER_SEC);
		while (!m->stopping && pthread_cond_timedwait(&m->wake, &m->lock, &until) != ETIMEDOUT)
			;
		if (m->stopping)
			break;
		pthread_mutex_unlock(&m->lock);
		monitor_round(m);
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	for (uint32_t i = 0; i < m->count; i++)
		if (m->conns[i])
			PQfinish(m->conns[i]);
	return NULL;
}

int monitor_start(struct monitor **out, struct tern_runtime *rt)
{
	struct monitor *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->rt = rt;
	m->count = rt->pool->server_count;
	for (uint32_t i = 0; i < m->count; i++)
		m->servers[i].server = &rt->pool->servers[i];
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&m->wake, &attr);
	pthread_condattr_destroy(&attr);
	monitor_round(m); /* the primary is known before any client arrives */
	int rc = pthread_create(&m->thread, NULL, monitor_main, m);
	if (rc != 0) {
		for (uint32_t i = 0; i < m->count; i++)
			if (m->conns[i])
				PQfinish(m->conns[i]);
		pthread_cond_destroy(&m->wake);
		pthread_mutex_destroy(&m->lock);
		free(m);
		return -rc;
	}
	*out = m;
	return 0;
}

void monitor_stop(struct monitor *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->thread, NULL);
	pthread_cond_destroy(&m->wake);
	pthread_mutex_destroy(&m->lock);
	free(m);
}
