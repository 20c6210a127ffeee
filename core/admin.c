#include "admin.h"

#include "config.h"
#include "worker.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* One admin answer; the largest (SHOW CLIENTS) is a row of about 250 bytes per client: 64 MiB holds
 * a quarter of a million. Past it the admin session ends with 53200, as when memory runs out. */
#define ADMIN_REPLY_MAX (64u * 1024u * 1024u)
/* Admin queries are short commands; a longer message is a mistake, not a command. */
#define ADMIN_MESSAGE_MAX 8192u

/* A command whose answer is not ready when it arrives (admin_state.waiting). Queries behind it
 * wait in login_buf, so answers keep the order of the questions. */
enum admin_wait {
	ADMIN_WAIT_NONE = 0,
	ADMIN_WAIT_PAUSE,  /* polled on the tick: every worker acknowledged, no server connection in use */
	ADMIN_WAIT_RELOAD, /* polled on the tick: main finished a reload begun after the command */
	ADMIN_WAIT_JOB,    /* SHOW CLIENTS, SHOW STATS: every worker answers its part (worker_job) */
};

/* A SHOW CLIENTS or SHOW STATS out to the workers. The asking session may be gone when the answers
 * are in: it is found again by its key (and its state's job), never kept by pointer. */
struct admin_job {
	struct worker_job job;
	uint32_t key_pid;
	uint8_t what; /* enum admin_ask */
};

/* What a question to every worker is for. */
enum admin_ask { ADMIN_ASK_CLIENTS = 0, ADMIN_ASK_STATS, ADMIN_ASK_WORKERS, ADMIN_ASK_ENDS };

/* A console session's state (session->console). */
struct admin_state {
	uint8_t waiting;     /* enum admin_wait: a command whose answer is not ready yet */
	uint32_t target;     /* PAUSE, RELOAD: the generation that answers it */
	struct admin_job *job; /* SHOW CLIENTS, SHOW STATS: the question out to the workers */
};

static struct admin_state *admin_of(struct session *s) { return s->console; }

struct admin_reply {
	uint8_t *data;
	size_t len;
	size_t cap;
	bool overflow;
	size_t row_start;
};

static void admin_put(struct admin_reply *r, const void *p, size_t n)
{
	if (r->overflow || r->len + n > ADMIN_REPLY_MAX) {
		r->overflow = true;
		return;
	}
	if (r->len + n > r->cap) {
		size_t cap = TERN_MAX(r->cap * 2, (size_t)4096);
		while (cap < r->len + n)
			cap *= 2;
		uint8_t *grown = realloc(r->data, cap);
		if (!grown) {
			r->overflow = true;
			return;
		}
		r->data = grown;
		r->cap = cap;
	}
	memcpy(r->data + r->len, p, n);
	r->len += n;
}

static void admin_put_u16(struct admin_reply *r, uint16_t v)
{
	uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
	admin_put(r, b, 2);
}

static void admin_put_u32(struct admin_reply *r, uint32_t v)
{
	uint8_t b[4];
	proto_write_u32(b, v);
	admin_put(r, b, 4);
}

static void admin_begin(struct admin_reply *r, uint8_t type)
{
	r->row_start = r->len;
	admin_put(r, &type, 1);
	admin_put_u32(r, 0);
}

static void admin_end(struct admin_reply *r)
{
	if (!r->overflow)
		proto_write_u32(r->data + r->row_start + 1, (uint32_t)(r->len - r->row_start - 1));
}

/* RowDescription of text columns. */
static void admin_columns(struct admin_reply *r, const char *const *names, uint16_t count)
{
	admin_begin(r, PROTO_BE_ROW_DESCRIPTION);
	admin_put_u16(r, count);
	for (uint16_t i = 0; i < count; i++) {
		admin_put(r, names[i], strlen(names[i]) + 1);
		admin_put_u32(r, 0);      /* table */
		admin_put_u16(r, 0);      /* column */
		admin_put_u32(r, 25);     /* text */
		admin_put_u16(r, 0xffff); /* variable length */
		admin_put_u32(r, 0xffffffffu);
		admin_put_u16(r, 0); /* text format */
	}
	admin_end(r);
}

static void admin_row(struct admin_reply *r, const char *const *values, uint16_t count)
{
	admin_begin(r, PROTO_BE_DATA_ROW);
	admin_put_u16(r, count);
	for (uint16_t i = 0; i < count; i++) {
		size_t n = strlen(values[i]);
		admin_put_u32(r, (uint32_t)n);
		admin_put(r, values[i], n);
	}
	admin_end(r);
}

static void admin_complete(struct admin_reply *r, const char *tag)
{
	admin_begin(r, PROTO_BE_COMMAND_COMPLETE);
	admin_put(r, tag, strlen(tag) + 1);
	admin_end(r);
}

static void admin_show_version(struct admin_reply *r)
{
	static const char *const columns[] = {"version"};
	const char *values[] = {"tern " TERN_VERSION};
	admin_columns(r, columns, 1);
	admin_row(r, values, 1);
}

static void admin_show_config(struct admin_reply *r, const struct tern_config *cfg)
{
	static const char *const columns[] = {"key", "value", "default", "changeable"};
	admin_columns(r, columns, 4);
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *section, *key, *default_text;
		char value[512];
		bool reloadable;
		if (config_describe_key(cfg, i, &section, &key, value, sizeof(value), &default_text, &reloadable) < 0)
			continue;
		const char *values[] = {key, value, default_text, reloadable ? "yes" : "no"};
		admin_row(r, values, 4);
	}
}

static void admin_show_pools(struct admin_reply *r, struct tern_runtime *rt)
{
	static const char *const columns[] = {"database", "user",    "cl_active", "cl_waiting", "sv_active",
					      "sv_idle",  "sv_login", "maxwait",   "maxwait_us", "pool_mode"};
	struct pool_db_row *rows;
	uint32_t count;
	if (pool_snapshot_dbs(rt->pool, &rows, &count) < 0) {
		r->overflow = true;
		return;
	}
	admin_columns(r, columns, 10);
	uint64_t now = base_now_ns();
	const char *mode = runtime_config(rt)->pool_mode == CONFIG_POOL_TRANSACTION ? "transaction" : "session";
	for (uint32_t i = 0; i < count; i++) {
		const struct pool_db_row *row = &rows[i];
		if (row->server_index != rt->primary->index)
			continue;
		uint64_t oldest_ns = row->waiting_count ? TERN_MIN(row->oldest_parked_ns, now) : now;
		uint32_t clients = row->client_count;
		char f[7][24];
		snprintf(f[0], sizeof(f[0]), "%u", clients > row->waiting_count ? clients - row->waiting_count : 0);
		snprintf(f[1], sizeof(f[1]), "%u", row->waiting_count);
		snprintf(f[2], sizeof(f[2]), "%u", row->used_count);
		snprintf(f[3], sizeof(f[3]), "%u", row->free_count);
		snprintf(f[4], sizeof(f[4]), "%u", row->opening_count);
		snprintf(f[5], sizeof(f[5]), "%llu", (unsigned long long)((now - oldest_ns) / BASE_NS_PER_SEC));
		snprintf(f[6], sizeof(f[6]), "%llu",
			 (unsigned long long)((now - oldest_ns) % BASE_NS_PER_SEC / 1000));
		const char *values[] = {row->database, row->user, f[0], f[1], f[2], f[3], f[4], f[5], f[6], mode};
		admin_row(r, values, 10);
	}
	free(rows);
}

static void admin_show_servers(struct admin_reply *r, struct tern_runtime *rt)
{
	static const char *const columns[] = {"type", "user", "database", "state", "connect_time", "remote_pid"};
	struct pool_conn_row *rows;
	uint32_t count;
	if (pool_snapshot_conns(rt->pool, &rows, &count) < 0) {
		r->overflow = true;
		return;
	}
	admin_columns(r, columns, 6);
	uint64_t now = base_now_ns();
	for (uint32_t i = 0; i < count; i++) {
		const struct pool_conn_row *row = &rows[i];
		char age[24], pid[16];
		/* Seconds open, not a wall-clock time: tern keeps monotonic clocks only. */
		snprintf(age, sizeof(age), "%llu", (unsigned long long)((now - TERN_MIN(row->opened_ns, now)) / BASE_NS_PER_SEC));
		snprintf(pid, sizeof(pid), "%u", row->backend_pid);
		const char *values[] = {"S", row->user, row->database,
					row->state == POOL_CONN_USED ? "active" : "idle", age, pid};
		admin_row(r, values, 6);
	}
	free(rows);
}

/* The command in `sql`, lowercased and without surrounding blanks or a final ';'. */
static void admin_normalize(const char *sql, char *out, size_t size)
{
	while (*sql == ' ' || *sql == '\t' || *sql == '\n' || *sql == '\r')
		sql++;
	size_t n = 0;
	for (; *sql && n + 1 < size; sql++) {
		char c = *sql;
		if (c == '\t' || c == '\n' || c == '\r')
			c = ' ';
		if (c == ' ' && (n == 0 || out[n - 1] == ' '))
			continue;
		out[n++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	while (n > 0 && (out[n - 1] == ' ' || out[n - 1] == ';'))
		n--;
	out[n] = '\0';
}

static void admin_error(struct admin_reply *r, const char *sqlstate, const char *message, const char *hint)
{
	uint8_t msg[512];
	size_t n = proto_build_error(msg, sizeof(msg), "ERROR", sqlstate, message, hint);
	admin_put(r, msg, n);
}

/* The answer and its ReadyForQuery go out together. */
static void admin_send(struct session *s, struct admin_reply *r)
{
	uint8_t ready[6];
	admin_put(r, ready, proto_build_ready(ready, sizeof(ready), 'I'));
	if (r->overflow)
		session_end(s, SESSION_END_OUT_OF_MEMORY);
	else
		session_send_to_client(s, r->data, (uint32_t)r->len);
	free(r->data);
	r->data = NULL;
}

static void admin_run(struct session *s);

static void admin_wait_start(struct session *s, enum admin_wait wait, uint32_t target)
{
	TERN_ASSERT(admin_of(s)->waiting == ADMIN_WAIT_NONE && wait != ADMIN_WAIT_NONE);
	admin_of(s)->waiting = (uint8_t)wait;
	admin_of(s)->target = target;
	if (wait == ADMIN_WAIT_PAUSE || wait == ADMIN_WAIT_RELOAD)
		s->host->console_waiting_count++; /* the tick polls it */
}

/* The waited-for answer is ready: send it, then answer the queries that queued behind it. */
static void admin_wait_end(struct session *s, struct admin_reply *r)
{
	TERN_ASSERT(admin_of(s)->waiting != ADMIN_WAIT_NONE);
	admin_of(s)->waiting = ADMIN_WAIT_NONE;
	admin_of(s)->job = NULL;
	admin_send(s, r);
	if (s->phase == SESSION_ADMIN)
		admin_run(s);
}

/* ---- SHOW CLIENTS ---- */

static const char *const admin_client_columns[] = {
	"type", "user", "database", "state", "addr", "port", "local_addr", "local_port", "connect_time",
	"request_time", "wait", "wait_us", "close_needed", "ptr", "link", "remote_pid", "tls", "application_name",
};
#define ADMIN_CLIENT_COLUMNS ((uint16_t)TERN_ARRAY_LEN(admin_client_columns))

/* The client's address (peer) or tern's end of the connection (local), as text. */
static void admin_socket_address(int fd, bool local, char *addr, size_t addr_size, char *port, size_t port_size)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int rc = local ? getsockname(fd, (struct sockaddr *)&ss, &len) : getpeername(fd, (struct sockaddr *)&ss, &len);
	addr[0] = '\0';
	snprintf(port, port_size, "0");
	if (rc < 0)
		return; /* the client is gone: the row stays, the address is empty */
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &in->sin_addr, addr, (socklen_t)addr_size);
		snprintf(port, port_size, "%u", ntohs(in->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, addr, (socklen_t)addr_size);
		snprintf(port, port_size, "%u", ntohs(in6->sin6_port));
	}
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

/* One client's row; runs on the session's own worker. States: login (before the welcome), waiting
 * (for a server: in the pool's queue or behind PAUSE), active (holds a server connection, or is an
 * admin console), idle (logged in, holding none). */
static void admin_client_row(struct admin_reply *r, struct session *s, uint64_t now_ns, const struct timespec *wall)
{
	const char *state = "idle";
	uint64_t waited_ns = 0;
	const struct leg *leg = session_primary(s);
	if (s->phase == SESSION_ADMIN) {
		state = "active";
	} else if (leg->is_request_pending) {
		state = "waiting";
		waited_ns = now_ns - TERN_MIN(leg->request.parked_ns, now_ns);
	} else if (s->is_pause_waiting) {
		state = "waiting";
		waited_ns = now_ns - TERN_MIN(s->pause_wait_ns, now_ns);
	} else if (leg->conn) {
		state = "active";
	} else if (s->phase != SESSION_READY) {
		state = "login";
	}
	char addr[INET6_ADDRSTRLEN], port[8], local_addr[INET6_ADDRSTRLEN], local_port[8];
	admin_socket_address(s->client_fd, false, addr, sizeof(addr), port, sizeof(port));
	admin_socket_address(s->client_fd, true, local_addr, sizeof(local_addr), local_port, sizeof(local_port));
	char connect_time[40], request_time[40], wait[24], wait_us[16], ptr[24], link[24];
	admin_format_time(connect_time, sizeof(connect_time), wall, now_ns, s->started_ns);
	admin_format_time(request_time, sizeof(request_time), wall, now_ns, s->client_active_ns);
	snprintf(wait, sizeof(wait), "%llu", (unsigned long long)(waited_ns / BASE_NS_PER_SEC));
	snprintf(wait_us, sizeof(wait_us), "%llu", (unsigned long long)(waited_ns % BASE_NS_PER_SEC / 1000));
	snprintf(ptr, sizeof(ptr), "%p", (void *)s);
	if (leg->conn)
		snprintf(link, sizeof(link), "%p", (void *)leg->conn);
	else
		link[0] = '\0';
	char tls[96];
	session_tls_describe(s, tls, sizeof(tls));
	const char *values[] = {
		"C", s->user, s->database, state, addr, port, local_addr, local_port, connect_time,
		request_time, wait, wait_us, "0", ptr, link, "0", tls, s->application_name,
	};
	static_assert(TERN_ARRAY_LEN(values) == TERN_ARRAY_LEN(admin_client_columns), "a value per column");
	admin_row(r, values, ADMIN_CLIENT_COLUMNS);
}

/* On each worker: the rows of its own sessions (touched by no other thread). */
static void admin_clients_fill(struct worker *worker, struct worker_job_part *part)
{
	struct admin_reply r = {0};
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	uint64_t now = base_now_ns();
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->host.sessions)
	{
		admin_client_row(&r, TERN_CONTAINER_OF(node, struct session, link), now, &wall);
	}
	part->data = r.data;
	part->len = r.len;
	part->is_truncated = r.overflow;
}

/* ---- SHOW STATS ---- */

static const char *const admin_stats_columns[] = {
	"database", "total_xact_count", "total_query_count", "total_received", "total_sent", "total_xact_time",
	"total_query_time", "total_wait_time", "avg_xact_count", "avg_query_count", "avg_recv", "avg_sent",
	"avg_xact_time", "avg_query_time", "avg_wait_time",
};
#define ADMIN_STATS_COLUMNS ((uint16_t)TERN_ARRAY_LEN(admin_stats_columns))

static void admin_stats_fill(struct worker *worker, struct worker_job_part *part)
{
	uint32_t count = 0;
	struct worker_db_report *rows = worker_stats_report(worker, &count);
	part->data = rows;
	part->len = rows ? count * sizeof(*rows) : 0;
	part->is_truncated = rows == NULL;
}

static int admin_report_compare(const void *a, const void *b)
{
	return strcmp(((const struct worker_db_report *)a)->database, ((const struct worker_db_report *)b)->database);
}

static void admin_stats_row(struct admin_reply *r, const struct worker_db_report *row)
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
	for (size_t i = 0; i < TERN_ARRAY_LEN(fields); i++) {
		snprintf(text[i], sizeof(text[i]), "%llu", (unsigned long long)fields[i]);
		values[i + 1] = text[i];
	}
	admin_row(r, values, ADMIN_STATS_COLUMNS);
}

/* Every worker's rows, merged by database name. */
static void admin_show_stats(struct admin_reply *r, const struct worker_job *job)
{
	size_t count = 0;
	for (uint32_t i = 0; i < job->part_count; i++) {
		if (job->parts[i].is_truncated) {
			r->overflow = true; /* a worker ran out of memory: no partial sums */
			return;
		}
		count += job->parts[i].len / sizeof(struct worker_db_report);
	}
	struct worker_db_report *all = malloc(TERN_MAX(count, (size_t)1) * sizeof(*all));
	if (!all) {
		r->overflow = true;
		return;
	}
	size_t n = 0;
	for (uint32_t i = 0; i < job->part_count; i++) {
		memcpy(all + n, job->parts[i].data, job->parts[i].len);
		n += job->parts[i].len / sizeof(*all);
	}
	qsort(all, n, sizeof(*all), admin_report_compare);
	admin_columns(r, admin_stats_columns, ADMIN_STATS_COLUMNS);
	for (size_t i = 0; i < n;) {
		struct worker_db_report sum = all[i];
		size_t j = i + 1;
		for (; j < n && strcmp(all[j].database, sum.database) == 0; j++) {
			const uint64_t *total = (const uint64_t *)&all[j].total, *last = (const uint64_t *)&all[j].last;
			uint64_t *sum_total = (uint64_t *)&sum.total, *sum_last = (uint64_t *)&sum.last;
			for (size_t f = 0; f < sizeof(sum.total) / sizeof(uint64_t); f++) {
				sum_total[f] += total[f];
				sum_last[f] += last[f];
			}
		}
		admin_stats_row(r, &sum);
		i = j;
	}
	free(all);
}

/* ---- SHOW WORKERS, SHOW ENDS: each worker's counters ---- */

/* What one worker answers: its own counters, read on its own thread. */
struct admin_worker_report {
	uint32_t index;
	uint32_t sessions;
	struct host_stats host;
	struct ring_stats ring;
};

static void admin_workers_fill(struct worker *worker, struct worker_job_part *part)
{
	struct admin_worker_report *report = malloc(sizeof(*report));
	part->data = report;
	part->len = report ? sizeof(*report) : 0;
	part->is_truncated = report == NULL;
	if (report)
		*report = (struct admin_worker_report){.index = worker->host.index,
						       .sessions = worker->host.session_count,
						       .host = worker->host.stats,
						       .ring = worker->host.ring.stats};
}

static void admin_show_workers(struct admin_reply *r, const struct worker_job *job)
{
	static const char *const columns[] = {
		"worker",	 "sessions",	"accepted",	"local_reuse",	    "pool_checkouts",	"local_handoffs",
		"mailed_grants", "cancels_sent", "ring_passes", "ring_submissions", "ring_completions", "ring_enobufs"};
	admin_columns(r, columns, TERN_ARRAY_LEN(columns));
	for (uint32_t i = 0; i < job->part_count; i++) {
		const struct admin_worker_report *w = job->parts[i].data;
		if (!w) {
			r->overflow = true;
			return;
		}
		uint64_t fields[] = {w->index,		     w->sessions,	       w->host.accepted,
				     w->host.local_reuse,    w->host.pool_checkouts,   w->host.local_handoffs,
				     w->host.mailed_grants,  w->host.cancels_sent,     w->ring.passes,
				     w->ring.submissions,    w->ring.completions,      w->ring.enobufs};
		static_assert(TERN_ARRAY_LEN(fields) == TERN_ARRAY_LEN(columns), "a value per column");
		char text[TERN_ARRAY_LEN(fields)][24];
		const char *values[TERN_ARRAY_LEN(fields)];
		for (size_t f = 0; f < TERN_ARRAY_LEN(fields); f++) {
			snprintf(text[f], sizeof(text[f]), "%llu", (unsigned long long)fields[f]);
			values[f] = text[f];
		}
		admin_row(r, values, TERN_ARRAY_LEN(columns));
	}
}

/* Sessions ended since start, by reason, summed over the workers (reasons never met are left out). */
static void admin_show_ends(struct admin_reply *r, const struct worker_job *job)
{
	static const char *const columns[] = {"reason", "sqlstate", "count"};
	uint64_t counts[SESSION_END_REASON_COUNT] = {0};
	for (uint32_t i = 0; i < job->part_count; i++) {
		const struct admin_worker_report *w = job->parts[i].data;
		if (!w) {
			r->overflow = true;
			return;
		}
		for (size_t reason = 0; reason < SESSION_END_REASON_COUNT; reason++)
			counts[reason] += w->host.ended[reason];
	}
	admin_columns(r, columns, TERN_ARRAY_LEN(columns));
	for (size_t reason = 0; reason < SESSION_END_REASON_COUNT; reason++) {
		if (counts[reason] == 0)
			continue;
		const struct session_end_info *info = session_end_info((enum session_end_reason)reason);
		char count[24];
		snprintf(count, sizeof(count), "%llu", (unsigned long long)counts[reason]);
		const char *values[] = {info->name, info->sqlstate ? info->sqlstate : "", count};
		admin_row(r, values, TERN_ARRAY_LEN(columns));
	}
}

/* ---- answers from every worker ---- */

static struct session *admin_job_session(struct admin_job *aj)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &aj->job.origin->host.sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->key_pid == aj->key_pid && s->phase == SESSION_ADMIN && admin_of(s)->job == aj)
			return s;
	}
	return NULL; /* the console left before the answers were in */
}

static void admin_job_done(struct worker_job *job)
{
	struct admin_job *aj = TERN_CONTAINER_OF(job, struct admin_job, job);
	struct session *s = admin_job_session(aj);
	if (s) {
		struct admin_reply r = {0};
		if (job->fill == admin_clients_fill) {
			admin_columns(&r, admin_client_columns, ADMIN_CLIENT_COLUMNS);
			for (uint32_t i = 0; i < job->part_count; i++) {
				if (job->parts[i].is_truncated)
					r.overflow = true;
				else if (job->parts[i].len > 0)
					admin_put(&r, job->parts[i].data, job->parts[i].len);
			}
		} else if (job->fill == admin_stats_fill) {
			admin_show_stats(&r, job);
		} else if (aj->what == ADMIN_ASK_WORKERS) {
			admin_show_workers(&r, job);
		} else {
			admin_show_ends(&r, job);
		}
		admin_complete(&r, "SHOW");
		admin_wait_end(s, &r);
	}
	worker_job_deinit(job);
	free(aj);
}

/* Sends the question to every worker; the answer goes out from admin_job_done. */
static void admin_ask_workers(struct session *s, struct admin_reply *r, enum admin_ask what)
{
	static void (*const fills[])(struct worker *, struct worker_job_part *) = {
		[ADMIN_ASK_CLIENTS] = admin_clients_fill,
		[ADMIN_ASK_STATS] = admin_stats_fill,
		[ADMIN_ASK_WORKERS] = admin_workers_fill,
		[ADMIN_ASK_ENDS] = admin_workers_fill,
	};
	void (*fill)(struct worker *, struct worker_job_part *) = fills[what];
	struct admin_job *aj = calloc(1, sizeof(*aj));
	if (!aj) {
		r->overflow = true;
		return;
	}
	aj->what = (uint8_t)what;
	aj->key_pid = s->key_pid;
	aj->job.origin = worker_of(s->host);
	aj->job.fill = fill;
	aj->job.done = admin_job_done;
	if (worker_job_post(s->host->runtime, &aj->job) < 0) {
		free(aj);
		r->overflow = true;
		return;
	}
	admin_of(s)->job = aj;
	admin_wait_start(s, ADMIN_WAIT_JOB, 0);
}

/* ---- PAUSE, RESUME, RELOAD ---- */

static void admin_wake_workers(struct tern_runtime *rt, const struct worker *self)
{
	uint32_t count = worker_started_count(rt);
	for (uint32_t i = 0; i < count; i++)
		if (rt->workers[i] != self)
			worker_wake(rt->workers[i]);
}

static void admin_pause(struct session *s, struct admin_reply *r)
{
	struct tern_runtime *rt = s->host->runtime;
	bool expected = false;
	if (!__atomic_compare_exchange_n(&rt->is_paused, &expected, true, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		admin_error(r, "55000", "tern is already paused", "RESUME lets new transactions go.");
		return;
	}
	uint32_t generation = __atomic_add_fetch(&rt->pause_generation, 1, __ATOMIC_ACQ_REL);
	TERN_INFO("PAUSE from the admin console by %s: new transactions wait; waiting for running ones to end",
		  s->user);
	admin_wake_workers(rt, worker_of(s->host)); /* each acknowledges at the end of its next pass */
	admin_wait_start(s, ADMIN_WAIT_PAUSE, generation);
}

static void admin_resume(struct session *s, struct admin_reply *r)
{
	struct tern_runtime *rt = s->host->runtime;
	bool expected = true;
	if (!__atomic_compare_exchange_n(&rt->is_paused, &expected, false, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		admin_error(r, "55000", "tern is not paused", NULL);
		return;
	}
	__atomic_add_fetch(&rt->pause_generation, 1, __ATOMIC_ACQ_REL);
	TERN_INFO("RESUME from the admin console by %s", s->user);
	admin_wake_workers(rt, worker_of(s->host)); /* the sessions held at the gate go at once */
	admin_complete(r, "RESUME");
}

static void admin_reload(struct session *s)
{
	struct tern_runtime *rt = s->host->runtime;
	/* A reload that begins after this load reads the file as it is now: the next even generation if
	 * none is running, the one after the running one's end otherwise. */
	uint32_t generation = __atomic_load_n(&rt->reload_generation, __ATOMIC_ACQUIRE);
	TERN_INFO("RELOAD from the admin console by %s", s->user);
	kill(getpid(), SIGHUP); /* main takes it like any SIGHUP */
	admin_wait_start(s, ADMIN_WAIT_RELOAD, generation + 2 + (generation & 1));
}

/* A waiting PAUSE or RELOAD: answers it if its moment has come. */
static void admin_poll(struct session *s)
{
	struct tern_runtime *rt = s->host->runtime;
	struct admin_reply r = {0};
	if (admin_of(s)->waiting == ADMIN_WAIT_RELOAD) {
		uint32_t generation = __atomic_load_n(&rt->reload_generation, __ATOMIC_ACQUIRE);
		if ((int32_t)(generation - admin_of(s)->target) < 0)
			return;
		if (__atomic_load_n(&rt->reload_result, __ATOMIC_RELAXED) < 0)
			admin_error(&r, "F0000", "the configuration could not be reloaded; nothing changed",
				    "tern's log names the key or line.");
		else
			admin_complete(&r, "RELOAD");
		admin_wait_end(s, &r);
		return;
	}
	TERN_ASSERT(admin_of(s)->waiting == ADMIN_WAIT_PAUSE);
	if (__atomic_load_n(&rt->pause_generation, __ATOMIC_ACQUIRE) != admin_of(s)->target ||
	    !__atomic_load_n(&rt->is_paused, __ATOMIC_ACQUIRE)) {
		admin_error(&r, "57014", "PAUSE was cancelled by RESUME before every server connection was free",
			    NULL);
		admin_wait_end(s, &r);
		return;
	}
	/* Acknowledged first: a transaction a worker started before it saw the gate is then visible as a
	 * server connection in use (or a request in the pool's queue). */
	if (!worker_pause_is_acknowledged(rt, admin_of(s)->target) || !pool_is_idle(rt->pool))
		return;
	TERN_INFO("PAUSE: paused; every server connection is free");
	admin_complete(&r, "PAUSE");
	admin_wait_end(s, &r);
}

static void admin_on_tick(struct host *host)
{
	uint32_t waiting = 0;
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &host->sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->phase != SESSION_ADMIN ||
		    (admin_of(s)->waiting != ADMIN_WAIT_PAUSE && admin_of(s)->waiting != ADMIN_WAIT_RELOAD))
			continue;
		admin_poll(s);
		waiting += s->phase == SESSION_ADMIN &&
			   (admin_of(s)->waiting == ADMIN_WAIT_PAUSE || admin_of(s)->waiting == ADMIN_WAIT_RELOAD);
	}
	host->console_waiting_count = waiting;
}

/* ---- commands ---- */

static void admin_on_query(struct session *s, const char *sql)
{
	struct tern_runtime *rt = s->host->runtime;
	struct admin_reply r = {0};
	char command[64];
	admin_normalize(sql, command, sizeof(command));
	if (strcmp(command, "show version") == 0) {
		admin_show_version(&r);
		admin_complete(&r, "SHOW");
	} else if (strcmp(command, "show config") == 0) {
		admin_show_config(&r, runtime_config(rt)); /* SIGHUP swaps it */
		admin_complete(&r, "SHOW");
	} else if (strcmp(command, "show pools") == 0) {
		admin_show_pools(&r, rt);
		admin_complete(&r, "SHOW");
	} else if (strcmp(command, "show servers") == 0) {
		admin_show_servers(&r, rt);
		admin_complete(&r, "SHOW");
	} else if (strcmp(command, "show clients") == 0 || strcmp(command, "show stats") == 0 ||
		   strcmp(command, "show workers") == 0 || strcmp(command, "show ends") == 0) {
		enum admin_ask what = command[5] == 'c'	  ? ADMIN_ASK_CLIENTS
				      : command[6] == 't' ? ADMIN_ASK_STATS
				      : command[5] == 'w' ? ADMIN_ASK_WORKERS
							  : ADMIN_ASK_ENDS;
		admin_ask_workers(s, &r, what);
		if (admin_of(s)->waiting)
			return; /* answered from admin_job_done */
	} else if (strcmp(command, "pause") == 0) {
		admin_pause(s, &r);
		if (admin_of(s)->waiting)
			return; /* answered from admin_poll */
	} else if (strcmp(command, "resume") == 0) {
		admin_resume(s, &r);
	} else if (strcmp(command, "reload") == 0) {
		admin_reload(s);
		return; /* answered from admin_poll */
	} else if (strcmp(command, "shutdown") == 0) {
		TERN_INFO("SHUTDOWN from the admin console by %s", s->user);
		kill(getpid(), SIGINT); /* main takes it like any SIGINT: every session ends now */
		admin_complete(&r, "SHUTDOWN");
	} else {
		admin_error(&r, "42601", "unknown admin command",
			    "The admin console knows SHOW VERSION, SHOW CONFIG, SHOW POOLS, SHOW SERVERS, "
			    "SHOW CLIENTS, SHOW STATS, SHOW WORKERS, SHOW ENDS, RELOAD, PAUSE, RESUME and SHUTDOWN.");
	}
	admin_send(s, &r);
}

static bool admin_is_allowed(const struct tern_config *config, const char *user)
{
	const char *list = config->admin_users;
	size_t n = strlen(user);
	while (list && *list) {
		while (*list == ',' || *list == ' ')
			list++;
		size_t len = strcspn(list, ", ");
		if (len == n && strncmp(list, user, n) == 0)
			return true;
		list += len;
	}
	return false;
}

static void admin_welcome(struct session *s)
{
	TERN_ASSERT(!s->console);
	s->console = calloc(1, sizeof(struct admin_state));
	if (!s->console) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	static const char *const params[][2] = {
		{"server_version", "15.0 (tern " TERN_VERSION ")"}, {"client_encoding", "UTF8"},
		{"server_encoding", "UTF8"}, {"DateStyle", "ISO, MDY"}, {"integer_datetimes", "on"},
		{"standard_conforming_strings", "on"}, {"application_name", ""},
	};
	uint8_t msg[256];
	for (size_t i = 0; i < TERN_ARRAY_LEN(params); i++) {
		const char *value = i + 1 == TERN_ARRAY_LEN(params) ? s->application_name : params[i][1];
		size_t n = proto_build_parameter_status(msg, sizeof(msg), params[i][0], value);
		session_send_to_client(s, msg, (uint32_t)n);
	}
	size_t n = proto_build_key_data(msg, sizeof(msg), s->key_pid, s->key_secret);
	session_send_to_client(s, msg, (uint32_t)n);
	n = proto_build_ready(msg, sizeof(msg), 'I');
	session_send_to_client(s, msg, (uint32_t)n);
	s->phase = SESSION_ADMIN; /* login_buf stays: it assembles the admin queries */
}

static void admin_on_bytes(struct session *s, const uint8_t *data, uint32_t len)
{
	s->client_active_ns = base_now_ns(); /* SHOW CLIENTS's request_time */
	if (session_login_buf_append(s, data, len, ADMIN_MESSAGE_MAX))
		admin_run(s);
}

/* Answers the complete messages in login_buf in order, until one must wait for its answer. */
static void admin_run(struct session *s)
{
	while (s->phase == SESSION_ADMIN && admin_of(s)->waiting == ADMIN_WAIT_NONE && s->login_len >= PROTO_HEADER_LEN) {
		uint8_t type = s->login_buf[0];
		uint32_t length = proto_read_u32(s->login_buf + 1);
		if (length < 4 || length + 1 > ADMIN_MESSAGE_MAX) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		}
		if (s->login_len < length + 1)
			return;
		if (type == PROTO_FE_TERMINATE) {
			session_end(s, SESSION_END_CLIENT_TERMINATE);
			return;
		}
		if (type == PROTO_FE_QUERY && s->login_buf[length] == '\0') {
			admin_on_query(s, (const char *)s->login_buf + PROTO_HEADER_LEN);
		} else if (type == PROTO_FE_SYNC || type == PROTO_FE_FLUSH) {
			/* A Flush is answered like a Sync: a pipelining driver that flushes to read would wait
			 * for ever for an answer the console cannot give. */
			struct admin_reply r = {0};
			admin_error(&r, "0A000", "the admin console answers simple queries only", NULL);
			admin_send(s, &r);
		} else if (type == PROTO_FE_QUERY) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		} /* other extended-protocol messages wait for their Sync, which answers for them */
		memmove(s->login_buf, s->login_buf + length + 1, s->login_len - length - 1);
		s->login_len -= length + 1;
	}
}

static void admin_destroy(struct session *s)
{
	free(s->console);
	s->console = NULL;
}

const struct session_console admin_console = {
	.database = ADMIN_DATABASE,
	.alias = ADMIN_DATABASE_ALIAS,
	.is_allowed = admin_is_allowed,
	.welcome = admin_welcome,
	.on_bytes = admin_on_bytes,
	.on_tick = admin_on_tick,
	.destroy = admin_destroy,
};
