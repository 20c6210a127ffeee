/*
 * admin_show.c — the SHOW tables of admin_show.h. Counts PgBouncer has and tern does not (cancel
 * requests in flight, servers being tested) are 0; values are PgBouncer's units.
 */
#include "replay/failovers.h"
#include "admin_show.h"

#include "config.h"
#include "databases.h"
#include "gates.h"
#include "digest.h"
#include "routing/monitor.h"
#include "shadow.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define ADMIN_COLUMNS(array) (array), (uint16_t)TERN_ARRAY_LEN(array)

/* PgBouncer's own console, as it lists itself in SHOW DATABASES. */
static const char admin_show_console_name[] = "pgbouncer";

static const char *admin_mode_name(int mode) { return mode == CONFIG_POOL_TRANSACTION ? "transaction" : "session"; }

/* The pool mode of a database on the server (its [databases] entry's, else its user's, else the
 * global one), as SHOW POOLS and SHOW DATABASES name it. */
static const char *admin_pool_mode(const struct tern_config *cfg, const char *database, const char *user)
{
	const struct databases *dbs = cfg->databases;
	for (size_t i = 0; i < databases_count(dbs); i++) {
		const struct database_entry *e = databases_at(dbs, i);
		if (e->pool_mode >= 0 && strcmp(e->dbname[0] ? e->dbname : e->name, database) == 0)
			return admin_mode_name(e->pool_mode);
	}
	const struct user_entry *u = user ? databases_find_user(dbs, user) : NULL;
	return admin_mode_name(u && u->pool_mode >= 0 ? u->pool_mode : cfg->pool_mode);
}

/* "%u" into one of a row's text fields. */
#define ADMIN_UINT(buffer, value) (snprintf((buffer), sizeof(buffer), "%llu", (unsigned long long)(value)), (buffer))

/* An address as text and its port; "" and 0 when the socket could not say. */
static void admin_format_address(const struct sockaddr_storage *ss, char *addr, size_t addr_size, char *port,
				 size_t port_size)
{
	addr[0] = '\0';
	snprintf(port, port_size, "0");
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &in->sin_addr, addr, (socklen_t)addr_size);
		snprintf(port, port_size, "%u", ntohs(in->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, addr, (socklen_t)addr_size);
		snprintf(port, port_size, "%u", ntohs(in6->sin6_port));
	} else if (ss->ss_family == AF_UNIX) {
		snprintf(addr, addr_size, "unix");
	}
}

/* The client's address (peer) or tern's end of the connection (local). */
static void admin_socket_address(int fd, bool local, char *addr, size_t addr_size, char *port, size_t port_size)
{
	struct sockaddr_storage ss = {0};
	socklen_t len = sizeof(ss);
	int rc = local ? getsockname(fd, (struct sockaddr *)&ss, &len) : getpeername(fd, (struct sockaddr *)&ss, &len);
	if (rc < 0)
		ss.ss_family = AF_UNSPEC; /* the client is gone: the row stays, the address is empty */
	admin_format_address(&ss, addr, addr_size, port, port_size);
}

/* A monotonic instant as PgBouncer shows times: the wall clock then, in UTC. */
static void admin_format_time(char *out, size_t size, const struct timespec *wall, uint64_t now_ns, uint64_t at_ns)
{
	uint64_t wall_ns = (uint64_t)wall->tv_sec * BASE_NS_PER_SEC + (uint64_t)wall->tv_nsec;
	uint64_t ago_ns = now_ns > at_ns ? now_ns - at_ns : 0;
	time_t t = (time_t)((wall_ns - TERN_MIN(ago_ns, wall_ns)) / BASE_NS_PER_SEC);
	struct tm tm;
	gmtime_r(&t, &tm);
	if (strftime(out, size, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
		out[0] = '\0';
}

void admin_show_version(struct admin_reply *r, struct tern_runtime *rt)
{
	(void)rt;
	static const struct admin_column columns[] = {{"version", ADMIN_TEXT}};
	const char *values[] = {"tern " TERN_VERSION};
	admin_reply_columns(r, ADMIN_COLUMNS(columns));
	admin_reply_row(r, values, 1);
}

/* SHOW DIGESTS: tern's own, by total time: the query fingerprint, its calls, time and rows, and its
 * text with literals as '?'. */
void admin_show_digests(struct admin_reply *r, struct tern_runtime *rt)
{
	static const struct admin_column columns[] = {{"fingerprint", ADMIN_TEXT}, {"calls", ADMIN_INT8},
						      {"total_ms", ADMIN_NUMERIC},  {"mean_ms", ADMIN_NUMERIC},
						      {"rows", ADMIN_INT8},	    {"query", ADMIN_TEXT}};
	admin_reply_columns(r, ADMIN_COLUMNS(columns));
	struct digest_entry *entries = NULL;
	uint32_t count = 0;
	uint64_t dropped = 0;
	if (!rt->digests)
		return;
	if (digest_snapshot(rt->digests, &entries, &count, &dropped) < 0) {
		r->overflow = true;
		return;
	}
	for (uint32_t i = 0; i < count; i++) {
		const struct digest_entry *e = &entries[i];
		char fingerprint[20], calls[24], total[32], mean[32], rows[24];
		snprintf(fingerprint, sizeof(fingerprint), "%016llx", (unsigned long long)e->fingerprint);
		snprintf(calls, sizeof(calls), "%llu", (unsigned long long)e->calls);
		snprintf(total, sizeof(total), "%.3f", (double)e->total_ns / 1e6);
		snprintf(mean, sizeof(mean), "%.3f", e->calls ? (double)e->total_ns / 1e6 / (double)e->calls : 0.0);
		snprintf(rows, sizeof(rows), "%llu", (unsigned long long)e->rows);
		const char *values[] = {fingerprint, calls, total, mean, rows, e->text};
		admin_reply_row(r, values, TERN_ARRAY_LEN(values));
	}
	free(entries);
}

/* SHOW SHADOW: [shadow] sampling's query fingerprints, the most mismatched first: reads compared on the
 * shadow, those that differed, and the text (libpg_query's normalized). Empty without [shadow] target. */
void admin_show_shadow(struct admin_reply *r, struct tern_runtime *rt)
{
	static const struct admin_column columns[] = {{"fingerprint", ADMIN_TEXT},
						      {"compared", ADMIN_INT8},
						      {"mismatched", ADMIN_INT8},
						      {"query", ADMIN_TEXT}};
	admin_reply_columns(r, ADMIN_COLUMNS(columns));
	struct shadow_counts counts;
	struct shadow_digest *digests = NULL;
	uint32_t count = 0;
	if (!rt->shadow)
		return;
	if (shadow_snapshot(rt->shadow, &counts, &digests, &count) < 0) {
		r->overflow = true;
		return;
	}
	for (uint32_t i = 0; i < count; i++) {
		char fingerprint[20], compared[24], mismatched[24];
		snprintf(fingerprint, sizeof(fingerprint), "%016llx", (unsigned long long)digests[i].fingerprint);
		snprintf(compared, sizeof(compared), "%llu", (unsigned long long)digests[i].compared);
		snprintf(mismatched, sizeof(mismatched), "%llu", (unsigned long long)digests[i].mismatched);
		const char *values[] = {fingerprint, compared, mismatched, digests[i].text};
		admin_reply_row(r, values, TERN_ARRAY_LEN(values));
	}
	free(digests);
}

void admin_show_failovers(struct admin_reply *r, struct tern_runtime *rt)
{
	static const struct admin_column columns[] = {{"at", ADMIN_TEXT},	  {"user", ADMIN_TEXT},
						      {"database", ADMIN_TEXT}, {"server", ADMIN_TEXT},
						      {"phase", ADMIN_TEXT},	  {"action", ADMIN_TEXT},
						      {"sqlstate", ADMIN_TEXT}};
	admin_reply_columns(r, ADMIN_COLUMNS(columns));
	struct failover_entry *entries = malloc(FAILOVERS_KEPT * sizeof(*entries));
	if (!entries) {
		r->overflow = true;
		return;
	}
	uint32_t count = failover_log_copy(rt->failovers, entries);
	for (uint32_t i = 0; i < count; i++) {
		const struct failover_entry *e = &entries[i];
		char at[40];
		time_t t = (time_t)(e->wall_ns / BASE_NS_PER_SEC);
		struct tm tm;
		gmtime_r(&t, &tm);
		size_t n = strftime(at, sizeof(at), "%Y-%m-%d %H:%M:%S", &tm);
		snprintf(at + n, sizeof(at) - n, ".%03u UTC", (unsigned)(e->wall_ns % BASE_NS_PER_SEC / 1000000));
		const char *values[] = {at, e->user, e->database, e->server, e->phase, e->action, e->sqlstate};
		admin_reply_row(r, values, TERN_ARRAY_LEN(values));
	}
	free(entries);
}

void admin_show_config(struct admin_reply *r, struct tern_runtime *rt)
{
	const struct tern_config *cfg = runtime_config(rt); /* SIGHUP swaps it */
	static const struct admin_column columns[] = {
		{"key", ADMIN_TEXT}, {"value", ADMIN_TEXT}, {"default", ADMIN_TEXT}, {"changeable", ADMIN_TEXT}};
	admin_reply_columns(r, ADMIN_COLUMNS(columns));
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *section, *key, *default_text;
		char value[512];
		bool reloadable;
		if (config_describe_key(cfg, i, &section, &key, value, sizeof(value), &default_text, &reloadable) < 0)
			continue;
		const char *values[] = {key, value, default_text, reloadable ? "yes" : "no"};
		admin_reply_row(r, values, 4);
	}
}

void admin_show_pools(struct admin_reply *r, struct tern_runtime *rt)
{
	static const struct admin_column columns[] = {
		{"database", ADMIN_TEXT},	  {"user", ADMIN_TEXT},		    {"cl_active", ADMIN_INT4},
		{"cl_waiting", ADMIN_INT4},	  {"cl_active_cancel_req", ADMIN_INT4}, {"cl_waiting_cancel_req", ADMIN_INT4},
		{"sv_active", ADMIN_INT4},	  {"sv_active_cancel", ADMIN_INT4},     {"sv_being_canceled", ADMIN_INT4},
		{"sv_idle", ADMIN_INT4},	  {"sv_used", ADMIN_INT4},	    {"sv_tested", ADMIN_INT4},
		{"sv_login", ADMIN_INT4},	  {"maxwait", ADMIN_INT4},	    {"maxwait_us", ADMIN_INT4},
		{"pool_mode", ADMIN_TEXT},
	};
	struct pool_db_row *rows;
	uint32_t count;
	if (pool_snapshot_dbs(rt->pool, &rows, &count) < 0) {
		r->overflow = true;
		return;
	}
	admin_reply_columns(r, ADMIN_COLUMNS(columns));
	const struct tern_config *cfg = runtime_config(rt);
	uint64_t now = base_now_ns();
	for (uint32_t i = 0; i < count; i++) {
		const struct pool_db_row *row = &rows[i];
		if (row->server_index != runtime_primary(rt)->index)
			continue;
		uint64_t oldest_ns = row->waiting_count ? TERN_MIN(row->oldest_parked_ns, now) : now;
		uint32_t clients = row->client_count;
		char f[8][24];
		const char *values[] = {
			row->database,
			row->user,
			ADMIN_UINT(f[0], clients > row->waiting_count ? clients - row->waiting_count : 0),
			ADMIN_UINT(f[1], row->waiting_count),
			"0",
			"0",
			ADMIN_UINT(f[2], row->used_count),
			"0",
			"0",
			ADMIN_UINT(f[3], row->free_count),
			"0",
			"0",
			ADMIN_UINT(f[4], row->opening_count),
			ADMIN_UINT(f[5], (now - oldest_ns) / BASE_NS_PER_SEC),
			ADMIN_UINT(f[6], (now - oldest_ns) % BASE_NS_PER_SEC / 1000),
			admin_pool_mode(cfg, row->database, row->user),
		};
		static_assert(TERN_ARRAY_LEN(values) == TERN_ARRAY_LEN(columns), "a value per column");
		admin_reply_row(r, values, TERN_ARRAY_LEN(values));
	}
	free(rows);
}

/* SHOW CLIENTS and SHOW SERVERS have PgBouncer's same columns (the first ADMIN_SOCKET_COLUMNS); SHOW
 * SERVERS then adds tern's: which server ([servers] key), its role as the server says, a standby's lag
 * behind the primary in WAL bytes, and its LSN (the monitor's last round or probe). */
static const struct admin_column admin_socket_columns[] = {
	{"type", ADMIN_TEXT},	     {"user", ADMIN_TEXT},	   {"database", ADMIN_TEXT},
	{"state", ADMIN_TEXT},	     {"addr", ADMIN_TEXT},	   {"port", ADMIN_INT4},
	{"local_addr", ADMIN_TEXT},  {"local_port", ADMIN_INT4},   {"connect_time", ADMIN_TEXT},
	{"request_time", ADMIN_TEXT}, {"wait", ADMIN_INT4},	   {"wait_us", ADMIN_INT4},
	{"close_needed", ADMIN_INT4}, {"ptr", ADMIN_TEXT},	   {"link", ADMIN_TEXT},
	{"remote_pid", ADMIN_INT4},  {"tls", ADMIN_TEXT},	   {"application_name", ADMIN_TEXT},
	{"server", ADMIN_TEXT},	     {"role", ADMIN_TEXT},	   {"lag_bytes", ADMIN_INT8},
	{"lsn", ADMIN_TEXT},
};
#define ADMIN_SOCKET_COLUMNS 18u

void admin_show_servers(struct admin_reply *r, struct tern_runtime *rt)
{
	struct pool_conn_row *rows;
	uint32_t count;
	if (pool_snapshot_conns(rt->pool, &rows, &count) < 0) {
		r->overflow = true;
		return;
	}
	admin_reply_columns(r, ADMIN_COLUMNS(admin_socket_columns));
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	uint64_t now = base_now_ns();
	const struct pool_server *primary = runtime_primary(rt);
	for (uint32_t i = 0; i < count; i++) {
		const struct pool_conn_row *row = &rows[i];
		const struct monitor_server *ms = monitor_server_at(rt->monitor, row->server_index);
		struct monitor_lag lag = monitor_lag_of(rt->monitor, row->server_index, primary, now);
		uint64_t lsn = ms ? __atomic_load_n(&ms->lsn, __ATOMIC_RELAXED) : 0;
		char lag_bytes[24], lsn_text[24];
		snprintf(lag_bytes, sizeof(lag_bytes), "%llu", (unsigned long long)lag.bytes);
		snprintf(lsn_text, sizeof(lsn_text), "%X/%X", (unsigned)(lsn >> 32), (unsigned)lsn);
		char addr[INET6_ADDRSTRLEN], port[8], local_addr[INET6_ADDRSTRLEN], local_port[8];
		admin_format_address(&row->peer_addr, addr, sizeof(addr), port, sizeof(port));
		admin_format_address(&row->local_addr, local_addr, sizeof(local_addr), local_port, sizeof(local_port));
		char connect_time[40], request_time[40], ptr[24], link[24], pid[16];
		admin_format_time(connect_time, sizeof(connect_time), &wall, now, row->opened_ns);
		admin_format_time(request_time, sizeof(request_time), &wall, now,
				  row->released_ns ? row->released_ns : row->opened_ns);
		snprintf(ptr, sizeof(ptr), "%p", (void *)row->id); /* SHOW CLIENTS's link names this */
		if (row->holder)
			snprintf(link, sizeof(link), "%p", (void *)row->holder);
		else
			link[0] = '\0';
		const char *values[] = {
			"S", row->user, row->database, row->state == POOL_CONN_USED ? "active" : "idle", addr, port,
			local_addr, local_port, connect_time, request_time, "0", "0", row->is_close_needed ? "1" : "0",
			ptr, link, ADMIN_UINT(pid, row->backend_pid), row->tls, "", rt->pool->servers[row->server_index].name,
			ms ? monitor_role_name(__atomic_load_n(&ms->role, __ATOMIC_ACQUIRE)) : "unknown", lag_bytes, lsn_text,
		};
		static_assert(TERN_ARRAY_LEN(values) == TERN_ARRAY_LEN(admin_socket_columns), "a value per column");
		admin_reply_row(r, values, TERN_ARRAY_LEN(values));
	}
	free(rows);
}

void admin_show_client_columns(struct admin_reply *r) { admin_reply_columns(r, admin_socket_columns, ADMIN_SOCKET_COLUMNS); }

/* One client's row; runs on the session's own worker. States: login (before the welcome), waiting
 * (for a server: in the pool's queue or behind PAUSE), active (holds a server connection, or is an
 * admin console), idle (logged in, holding none). */
void admin_show_client_row(struct admin_reply *r, struct session *s, uint64_t now_ns, const struct timespec *wall)
{
	const char *state = "idle";
	uint64_t waited_ns = 0;
	const struct leg *leg = session_primary(s);
	if (s->phase == SESSION_ADMIN) {
		state = "active";
	} else if (leg->is_request_pending) {
		state = "waiting";
		waited_ns = now_ns - TERN_MIN(leg->request.parked_ns, now_ns);
	} else if (s->gate.is_waiting) {
		state = "waiting";
		waited_ns = now_ns - TERN_MIN(s->gate.wait_ns, now_ns);
	} else if (leg->conn) {
		state = "active";
	} else if (s->phase != SESSION_READY) {
		state = "login";
	}
	char addr[INET6_ADDRSTRLEN], port[8], local_addr[INET6_ADDRSTRLEN], local_port[8];
	admin_socket_address(s->client_fd, false, addr, sizeof(addr), port, sizeof(port));
	admin_socket_address(s->client_fd, true, local_addr, sizeof(local_addr), local_port, sizeof(local_port));
	char connect_time[40], request_time[40], wait[24], wait_us[16], ptr[24], link[24];
	admin_format_time(connect_time, sizeof(connect_time), wall, now_ns, s->stats.started_ns);
	admin_format_time(request_time, sizeof(request_time), wall, now_ns, s->client_active_ns);
	snprintf(ptr, sizeof(ptr), "%p", (void *)s); /* SHOW SERVERS's link names this */
	if (leg->conn)
		snprintf(link, sizeof(link), "%p", (void *)leg->conn);
	else
		link[0] = '\0';
	char tls[96];
	session_tls_describe(s, tls, sizeof(tls));
	const char *values[] = {
		"C", s->user, s->database, state, addr, port, local_addr, local_port, connect_time, request_time,
		ADMIN_UINT(wait, waited_ns / BASE_NS_PER_SEC), ADMIN_UINT(wait_us, waited_ns % BASE_NS_PER_SEC / 1000),
		"0", ptr, link, "0", tls, s->application_name,
	};
	static_assert(TERN_ARRAY_LEN(values) == ADMIN_SOCKET_COLUMNS, "a value per column");
	admin_reply_row(r, values, TERN_ARRAY_LEN(values));
}

/* A server's host and port, from its conninfo, for SHOW DATABASES. */
static void admin_server_address(const struct pool_server *server, char *host, size_t host_size, char *port,
				 size_t port_size)
{
	snprintf(host, host_size, "%s", "");
	snprintf(port, port_size, "5432");
	PQconninfoOption *options = PQconninfoParse(server->conninfo, NULL);
	for (PQconninfoOption *o = options; o && o->keyword; o++) {
		if (o->val && strcmp(o->keyword, "host") == 0)
			snprintf(host, host_size, "%s", o->val);
		else if (o->val && strcmp(o->keyword, "port") == 0)
			snprintf(port, port_size, "%s", o->val);
	}
	PQconninfoFree(options);
}

static const struct admin_column admin_database_columns[] = {
	{"name", ADMIN_TEXT},	     {"host", ADMIN_TEXT},	      {"port", ADMIN_INT4},
	{"database", ADMIN_TEXT},    {"force_user", ADMIN_TEXT},      {"pool_size", ADMIN_INT4},
	{"min_pool_size", ADMIN_INT4}, {"reserve_pool", ADMIN_INT4},  {"pool_mode", ADMIN_TEXT},
	{"max_connections", ADMIN_INT4}, {"current_connections", ADMIN_INT4}, {"paused", ADMIN_INT4},
	{"disabled", ADMIN_INT4},
};

/* Server connections open to `database` on the primary, from a SHOW POOLS snapshot. */
static uint32_t admin_connections_to(const struct pool_db_row *rows, uint32_t count, const char *database,
				     uint32_t primary)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < count; i++)
		if (rows[i].server_index == primary && strcmp(rows[i].database, database) == 0)
			n += rows[i].used_count + rows[i].free_count;
	return n;
}

static void admin_database_row(struct admin_reply *r, struct tern_runtime *rt, const char *name,
			       const struct database_entry *e, const struct pool_db_row *rows, uint32_t count)
{
	const struct tern_config *cfg = runtime_config(rt);
	char host[256], port[16], f[6][24];
	const struct pool_server *server = runtime_primary(rt);
	for (uint32_t i = 0; e && e->server[0] && i < rt->pool->server_count; i++)
		if (strcmp(rt->pool->servers[i].name, e->server) == 0)
			server = &rt->pool->servers[i];
	admin_server_address(server, host, sizeof(host), port, sizeof(port));
	const char *database = e && e->dbname[0] ? e->dbname : name;
	const char *values[] = {
		name,
		host,
		port,
		database,
		e && e->user[0] ? e->user : NULL,
		ADMIN_UINT(f[0], e && e->pool_size ? e->pool_size : cfg->pool_size),
		ADMIN_UINT(f[1], cfg->min_pool_size),
		ADMIN_UINT(f[2], e && e->reserve_pool_size ? e->reserve_pool_size : cfg->reserve_pool_size),
		e && e->pool_mode >= 0 ? admin_mode_name(e->pool_mode) : admin_mode_name(cfg->pool_mode),
		ADMIN_UINT(f[3], e && e->max_db_connections ? e->max_db_connections : cfg->max_db_connections),
		ADMIN_UINT(f[4], admin_connections_to(rows, count, database, runtime_primary(rt)->index)),
		gates_is_paused(&rt->gates, name) || __atomic_load_n(&rt->is_paused, __ATOMIC_ACQUIRE) ? "1" : "0",
		gates_is_disabled(&rt->gates, name) ? "1" : "0",
	};
	static_assert(TERN_ARRAY_LEN(values) == TERN_ARRAY_LEN(admin_database_columns), "a value per column");
	admin_reply_row(r, values, TERN_ARRAY_LEN(values));
}

/* [databases]'s entries; without any, every database a client has a pool for; then the console. */
void admin_show_databases(struct admin_reply *r, struct tern_runtime *rt)
{
	struct pool_db_row *rows = NULL;
	uint32_t count = 0;
	if (pool_snapshot_dbs(rt->pool, &rows, &count) < 0) {
		r->overflow = true;
		return;
	}
	admin_reply_columns(r, ADMIN_COLUMNS(admin_database_columns));
	const struct databases *dbs = runtime_config(rt)->databases;
	if (databases_is_routing(dbs)) {
		for (size_t i = 0; i < databases_count(dbs); i++)
			admin_database_row(r, rt, databases_at(dbs, i)->name, databases_at(dbs, i), rows, count);
	} else {
		for (uint32_t i = 0; i < count; i++) {
			bool is_seen = false;
			for (uint32_t j = 0; j < i && !is_seen; j++)
				is_seen = strcmp(rows[j].database, rows[i].database) == 0;
			if (!is_seen && rows[i].server_index == runtime_primary(rt)->index)
				admin_database_row(r, rt, rows[i].database, NULL, rows, count);
		}
	}
	const char *console[] = {admin_show_console_name, NULL, "6432", admin_show_console_name, admin_show_console_name,
				 "2", "0", "0", "statement", "0", "0", "0", "0"};
	admin_reply_row(r, console, TERN_ARRAY_LEN(console));
	free(rows);
}

/* The users with a pool on the primary, and [users]'s, each once, with its pool mode. */
void admin_show_users(struct admin_reply *r, struct tern_runtime *rt)
{
	static const struct admin_column columns[] = {{"name", ADMIN_TEXT}, {"pool_mode", ADMIN_TEXT}};
	struct pool_db_row *rows = NULL;
	uint32_t count = 0;
	if (pool_snapshot_dbs(rt->pool, &rows, &count) < 0) {
		r->overflow = true;
		return;
	}
	admin_reply_columns(r, ADMIN_COLUMNS(columns));
	const struct tern_config *cfg = runtime_config(rt);
	for (uint32_t i = 0; i < count; i++) {
		bool is_seen = false;
		for (uint32_t j = 0; j < i && !is_seen; j++)
			is_seen = strcmp(rows[j].user, rows[i].user) == 0;
		if (is_seen)
			continue;
		const struct user_entry *u = databases_find_user(cfg->databases, rows[i].user);
		const char *values[] = {rows[i].user, u && u->pool_mode >= 0 ? admin_mode_name(u->pool_mode) : NULL};
		admin_reply_row(r, values, 2);
	}
	free(rows);
}

void admin_show_lists(struct admin_reply *r, struct tern_runtime *rt)
{
	static const struct admin_column columns[] = {{"list", ADMIN_TEXT}, {"items", ADMIN_INT4}};
	struct pool_db_row *rows = NULL;
	struct pool_conn_row *conns = NULL;
	uint32_t count = 0, conn_count = 0;
	if (pool_snapshot_dbs(rt->pool, &rows, &count) < 0 || pool_snapshot_conns(rt->pool, &conns, &conn_count) < 0) {
		free(rows);
		r->overflow = true;
		return;
	}
	uint32_t databases = 0, users = 0, pools = 0, free_servers = 0, used_servers = 0;
	for (uint32_t i = 0; i < count; i++) {
		bool is_database_seen = false, is_user_seen = false;
		for (uint32_t j = 0; j < i; j++) {
			is_database_seen |= strcmp(rows[j].database, rows[i].database) == 0;
			is_user_seen |= strcmp(rows[j].user, rows[i].user) == 0;
		}
		databases += !is_database_seen;
		users += !is_user_seen;
		pools += rows[i].server_index == runtime_primary(rt)->index;
	}
	for (uint32_t i = 0; i < conn_count; i++) {
		free_servers += conns[i].state == POOL_CONN_FREE;
		used_servers += conns[i].state == POOL_CONN_USED;
	}
	if (databases_is_routing(runtime_config(rt)->databases))
		databases = (uint32_t)databases_count(runtime_config(rt)->databases);
	uint32_t clients = __atomic_load_n(&rt->client_count, __ATOMIC_RELAXED);
	const struct {
		const char *name;
		uint32_t items;
	} lists[] = {
		{"databases", databases + 1 /* the console */},
		{"users", users},
		{"pools", pools},
		{"free_clients", 0},
		{"used_clients", clients},
		{"login_clients", 0},
		{"free_servers", free_servers},
		{"used_servers", used_servers},
		{"dns_names", 0},
		{"dns_zones", 0},
		{"dns_queries", 0},
		{"dns_pending", 0},
	};
	admin_reply_columns(r, ADMIN_COLUMNS(columns));
	for (size_t i = 0; i < TERN_ARRAY_LEN(lists); i++) {
		char items[24];
		const char *values[] = {lists[i].name, ADMIN_UINT(items, lists[i].items)};
		admin_reply_row(r, values, 2);
	}
	free(rows);
	free(conns);
}

void admin_show_help(struct admin_reply *r, struct tern_runtime *rt)
{
	(void)rt;
	static const char *const lines[] = {
		"Console usage",
		"\tSHOW HELP|CONFIG|DATABASES|POOLS|CLIENTS|SERVERS|USERS|VERSION",
		"\tSHOW STATS|LISTS|WORKERS|ENDS|DIGESTS|FAILOVERS|SHADOW",
		"\tSET key = arg",
		"\tRELOAD",
		"\tPAUSE [<db>]",
		"\tRESUME [<db>]",
		"\tDISABLE <db>",
		"\tENABLE <db>",
		"\tRECONNECT [<db>]",
		"\tKILL <db>",
		"\tSUSPEND",
		"\tSHUTDOWN",
		"\tWAIT_CLOSE [<db>]",
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(lines); i++)
		admin_reply_notice(r, lines[i]);
}

static const struct admin_column admin_stats_columns[] = {
	{"database", ADMIN_TEXT},	    {"total_xact_count", ADMIN_NUMERIC}, {"total_query_count", ADMIN_NUMERIC},
	{"total_received", ADMIN_NUMERIC},  {"total_sent", ADMIN_NUMERIC},	  {"total_xact_time", ADMIN_NUMERIC},
	{"total_query_time", ADMIN_NUMERIC}, {"total_wait_time", ADMIN_NUMERIC},  {"avg_xact_count", ADMIN_NUMERIC},
	{"avg_query_count", ADMIN_NUMERIC}, {"avg_recv", ADMIN_NUMERIC},	  {"avg_sent", ADMIN_NUMERIC},
	{"avg_xact_time", ADMIN_NUMERIC},   {"avg_query_time", ADMIN_NUMERIC},	  {"avg_wait_time", ADMIN_NUMERIC},
};

void admin_show_stats_columns(struct admin_reply *r) { admin_reply_columns(r, ADMIN_COLUMNS(admin_stats_columns)); }

void admin_show_stats_row(struct admin_reply *r, const struct worker_db_report *row)
{
	const struct worker_totals *t = &row->total, *l = &row->last;
	uint64_t period = WORKER_STATS_PERIOD_S;
	/* PgBouncer's units: times in microseconds; averages per second over the last full period,
	 * except the durations, which are per transaction and per query. */
	uint64_t fields[] = {
		t->xact_count,
		t->query_count,
		t->received_bytes,
		t->sent_bytes,
		t->xact_ns / 1000,
		t->query_ns / 1000,
		t->wait_ns / 1000,
		l->xact_count / period,
		l->query_count / period,
		l->received_bytes / period,
		l->sent_bytes / period,
		l->xact_count ? l->xact_ns / 1000 / l->xact_count : 0,
		l->query_count ? l->query_ns / 1000 / l->query_count : 0,
		l->wait_ns / 1000 / period,
	};
	static_assert(TERN_ARRAY_LEN(fields) + 1 == TERN_ARRAY_LEN(admin_stats_columns), "a value per column");
	char text[TERN_ARRAY_LEN(fields)][24];
	const char *values[TERN_ARRAY_LEN(fields) + 1] = {row->database};
	for (size_t i = 0; i < TERN_ARRAY_LEN(fields); i++)
		values[i + 1] = ADMIN_UINT(text[i], fields[i]);
	admin_reply_row(r, values, TERN_ARRAY_LEN(values));
}
