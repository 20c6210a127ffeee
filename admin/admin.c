/* The admin console of admin.h: its commands parsed and answered in order, the waits (PAUSE, RELOAD,
 * WAIT_CLOSE) polled on the tick, and the questions put to every worker (SHOW CLIENTS, STATS, WORKERS, ENDS,
 * KILL). The rows are admin_show.c's, the messages admin_reply.c's. See admin.h. */
#include "admin.h"

#include "admin_reply.h"
#include "admin_show.h"
#include "config.h"
#include "databases.h"
#include "gates.h"
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

/* Admin queries are short commands; a longer message is a mistake, not a command. */
#define ADMIN_MESSAGE_MAX 8192u

/* A command whose answer is not ready when it arrives (admin_state.waiting). Queries behind it
 * wait in login->buf, so answers keep the order of the questions. */
enum admin_wait {
	ADMIN_WAIT_NONE = 0,
	ADMIN_WAIT_PAUSE,  /* polled on the tick: every worker acknowledged, no server connection in use */
	ADMIN_WAIT_RELOAD, /* polled on the tick: main finished a reload begun after the command */
	ADMIN_WAIT_JOB,    /* SHOW CLIENTS, SHOW STATS, KILL: every worker answers its part (worker_job) */
	ADMIN_WAIT_CLOSE,  /* polled on the tick: WAIT_CLOSE, until no connection RECONNECT marked is open */
};

/* A SHOW CLIENTS or SHOW STATS out to the workers. The asking session may be gone when the answers
 * are in: it is found again by its key (and its state's job), never kept by pointer. */
struct admin_job {
	struct worker_job job;
	uint32_t key_pid;
	uint8_t what; /* enum admin_ask */
	char database[POOL_NAME_LEN_MAX]; /* KILL's */
};

/* What a question to every worker is for. */
enum admin_ask { ADMIN_ASK_CLIENTS = 0, ADMIN_ASK_STATS, ADMIN_ASK_WORKERS, ADMIN_ASK_ENDS, ADMIN_ASK_KILL };

/* A console session's state (session->console). */
struct admin_state {
	uint8_t waiting;     /* enum admin_wait: a command whose answer is not ready yet */
	uint32_t target;     /* PAUSE, RELOAD: the generation that answers it */
	/* PAUSE <db>, WAIT_CLOSE <db>: the database as clients name it ("" = every one), and on the server. */
	char database[POOL_NAME_LEN_MAX];
	char server_database[POOL_NAME_LEN_MAX];
	const char *tag; /* PAUSE's answer: "PAUSE", or "SUSPEND" for the same wait under PgBouncer's other name */
	struct admin_job *job; /* SHOW CLIENTS, SHOW STATS: the question out to the workers */
};

static struct admin_state *admin_of(struct session *s) { return s->console; }


/* The answer and its ReadyForQuery go out together. */
static void admin_send(struct session *s, struct admin_reply *r)
{
	uint8_t ready[6];
	admin_reply_put(r, ready, proto_build_ready(ready, sizeof(ready), 'I'));
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
	if (wait == ADMIN_WAIT_PAUSE || wait == ADMIN_WAIT_RELOAD || wait == ADMIN_WAIT_CLOSE)
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
		admin_show_client_row(&r, TERN_CONTAINER_OF(node, struct session, link), now, &wall);
	}
	part->data = r.data;
	part->len = r.len;
	part->is_truncated = r.overflow;
}

/* ---- SHOW STATS ---- */

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

/* Every worker's rows, merged by database name. */
static void admin_stats_table(struct admin_reply *r, const struct worker_job *job)
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
	admin_show_stats_columns(r);
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
		admin_show_stats_row(r, &sum);
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
						       .sessions = __atomic_load_n(&worker->host.session_count, __ATOMIC_RELAXED),
						       .host = worker->host.stats,
						       .ring = worker->host.ring.stats};
}

static void admin_workers_table(struct admin_reply *r, const struct worker_job *job)
{
	static const struct admin_column columns[] = {
		{"worker", ADMIN_INT4},		{"sessions", ADMIN_INT8},	  {"accepted", ADMIN_INT8},
		{"local_reuse", ADMIN_INT8},	{"pool_checkouts", ADMIN_INT8},	  {"local_handoffs", ADMIN_INT8},
		{"mailed_grants", ADMIN_INT8},	{"cancels_sent", ADMIN_INT8},	  {"ring_passes", ADMIN_INT8},
		{"ring_submissions", ADMIN_INT8}, {"ring_completions", ADMIN_INT8}, {"ring_enobufs", ADMIN_INT8},
		{"handed_over", ADMIN_INT8}};
	admin_reply_columns(r, columns, TERN_ARRAY_LEN(columns));
	for (uint32_t i = 0; i < job->part_count; i++) {
		const struct admin_worker_report *w = job->parts[i].data;
		if (!w) {
			r->overflow = true;
			return;
		}
		uint64_t fields[] = {w->index,		     w->sessions,	       w->host.accepted,
				     w->host.local_reuse,    w->host.pool_checkouts,   w->host.local_handoffs,
				     w->host.mailed_grants,  w->host.cancels_sent,     w->ring.passes,
				     w->ring.submissions,    w->ring.completions,      w->ring.enobufs,
				     w->host.handed_over};
		static_assert(TERN_ARRAY_LEN(fields) == TERN_ARRAY_LEN(columns), "a value per column");
		char text[TERN_ARRAY_LEN(fields)][24];
		const char *values[TERN_ARRAY_LEN(fields)];
		for (size_t f = 0; f < TERN_ARRAY_LEN(fields); f++) {
			snprintf(text[f], sizeof(text[f]), "%llu", (unsigned long long)fields[f]);
			values[f] = text[f];
		}
		admin_reply_row(r, values, TERN_ARRAY_LEN(columns));
	}
}

/* Sessions ended since start, by reason, summed over the workers (reasons never met are left out). */
static void admin_ends_table(struct admin_reply *r, const struct worker_job *job)
{
	static const struct admin_column columns[] = {
		{"reason", ADMIN_TEXT}, {"sqlstate", ADMIN_TEXT}, {"count", ADMIN_INT8}};
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
	admin_reply_columns(r, columns, TERN_ARRAY_LEN(columns));
	for (size_t reason = 0; reason < SESSION_END_REASON_COUNT; reason++) {
		if (counts[reason] == 0)
			continue;
		const struct session_end_info *info = session_end_info((enum session_end_reason)reason);
		char count[24];
		snprintf(count, sizeof(count), "%llu", (unsigned long long)counts[reason]);
		const char *values[] = {info->name, info->sqlstate ? info->sqlstate : "", count};
		admin_reply_row(r, values, TERN_ARRAY_LEN(columns));
	}
}

/* ---- answers from every worker ---- */

static struct session *admin_job_session(struct admin_job *aj)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &aj->job.origin->host.sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->key.pid == aj->key_pid && s->phase == SESSION_ADMIN && admin_of(s)->job == aj)
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
			admin_show_client_columns(&r);
			for (uint32_t i = 0; i < job->part_count; i++) {
				if (job->parts[i].is_truncated)
					r.overflow = true;
				else if (job->parts[i].len > 0)
					admin_reply_put(&r, job->parts[i].data, job->parts[i].len);
			}
		} else if (job->fill == admin_stats_fill) {
			admin_stats_table(&r, job);
		} else if (aj->what == ADMIN_ASK_WORKERS) {
			admin_workers_table(&r, job);
		} else if (aj->what == ADMIN_ASK_ENDS) {
			admin_ends_table(&r, job);
		}
		admin_reply_complete(&r, aj->what == ADMIN_ASK_KILL ? "KILL" : "SHOW");
		admin_wait_end(s, &r);
	}
	worker_job_deinit(job);
	free(aj);
}

/* KILL <db>, on each worker: its clients of the database end now (their server connections with them). */
static void admin_kill_fill(struct worker *worker, struct worker_job_part *part)
{
	const struct admin_job *aj = TERN_CONTAINER_OF(part->job, struct admin_job, job);
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->host.sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->phase != SESSION_ADMIN && s->phase != SESSION_CLOSING && strcmp(s->database, aj->database) == 0)
			session_end(s, SESSION_END_ADMIN_KILLED);
	}
	part->data = NULL;
	part->len = 0;
}

/* Sends the question to every worker; the answer goes out from admin_job_done. */
static void admin_ask_workers(struct session *s, struct admin_reply *r, enum admin_ask what, const char *database)
{
	static void (*const fills[])(struct worker *, struct worker_job_part *) = {
		[ADMIN_ASK_CLIENTS] = admin_clients_fill,
		[ADMIN_ASK_STATS] = admin_stats_fill,
		[ADMIN_ASK_WORKERS] = admin_workers_fill,
		[ADMIN_ASK_ENDS] = admin_workers_fill,
		[ADMIN_ASK_KILL] = admin_kill_fill,
	};
	void (*fill)(struct worker *, struct worker_job_part *) = fills[what];
	struct admin_job *aj = calloc(1, sizeof(*aj));
	if (!aj) {
		r->overflow = true;
		return;
	}
	aj->what = (uint8_t)what;
	aj->key_pid = s->key.pid;
	base_strlcpy(aj->database, database ? database : "", sizeof(aj->database));
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

/* ---- PAUSE, RESUME, RELOAD, and the commands on one database ---- */

static void admin_wake_workers(struct tern_runtime *rt, const struct worker *self)
{
	uint32_t count = worker_started_count(rt);
	for (uint32_t i = 0; i < count; i++)
		if (rt->workers[i] != self)
			worker_wake(rt->workers[i]);
}

/* The gate changed: every worker acknowledges the new generation at the end of its next pass (after
 * which each transaction it starts sees the gate), and the sessions held at it look again. */
static uint32_t admin_gate_changed(struct session *s)
{
	struct tern_runtime *rt = s->host->runtime;
	uint32_t generation = __atomic_add_fetch(&rt->pause_generation, 1, __ATOMIC_ACQ_REL);
	admin_wake_workers(rt, worker_of(s->host));
	return generation;
}

/* The database a client-visible name reaches on the server (its [databases] entry's dbname). */
static void admin_server_database(const struct tern_runtime *rt, const char *name, char *out, size_t size)
{
	const struct database_entry *e = databases_find(runtime_config(rt)->databases, name);
	base_strlcpy(out, e && e->dbname[0] ? e->dbname : name, size);
}

/* PAUSE, or PAUSE <db> ("" database: every one); SUSPEND is PAUSE under its own tag. */
static void admin_pause(struct session *s, struct admin_reply *r, const char *database, const char *tag)
{
	struct tern_runtime *rt = s->host->runtime;
	if (database[0]) {
		int rc = gates_set_paused(&rt->gates, database, true);
		if (rc < 0) {
			admin_reply_error(r, rc == -EALREADY ? "55000" : "54000",
					  rc == -EALREADY ? "the database is already paused" : "too many databases paused",
					  NULL);
			return;
		}
	} else {
		bool expected = false;
		if (!__atomic_compare_exchange_n(&rt->is_paused, &expected, true, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			admin_reply_error(r, "55000", "tern is already paused", "RESUME lets new transactions go.");
			return;
		}
	}
	base_strlcpy(admin_of(s)->database, database, sizeof(admin_of(s)->database));
	admin_server_database(rt, database, admin_of(s)->server_database, sizeof(admin_of(s)->server_database));
	admin_of(s)->tag = tag;
	TERN_INFO("PAUSE %s from the admin console by %s: new transactions wait; waiting for running ones to end",
		  database[0] ? database : "(every database)", s->user);
	admin_wait_start(s, ADMIN_WAIT_PAUSE, admin_gate_changed(s));
}

static void admin_resume(struct session *s, struct admin_reply *r, const char *database)
{
	struct tern_runtime *rt = s->host->runtime;
	if (database[0]) {
		if (gates_set_paused(&rt->gates, database, false) < 0) {
			admin_reply_error(r, "55000", "the database is not paused", NULL);
			return;
		}
	} else {
		bool expected = true;
		if (!__atomic_compare_exchange_n(&rt->is_paused, &expected, false, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			admin_reply_error(r, "55000", "tern is not paused", NULL);
			return;
		}
	}
	TERN_INFO("RESUME %s from the admin console by %s", database, s->user);
	(void)admin_gate_changed(s); /* the sessions held at the gate go at once */
	admin_reply_complete(r, "RESUME");
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

/* A waiting PAUSE, RELOAD or WAIT_CLOSE: answers it if its moment has come. */
static void admin_poll(struct session *s)
{
	struct tern_runtime *rt = s->host->runtime;
	struct admin_state *state = admin_of(s);
	struct admin_reply r = {0};
	const char *server_database = state->database[0] ? state->server_database : NULL;
	if (state->waiting == ADMIN_WAIT_RELOAD) {
		uint32_t generation = __atomic_load_n(&rt->reload_generation, __ATOMIC_ACQUIRE);
		if ((int32_t)(generation - state->target) < 0)
			return;
		if (__atomic_load_n(&rt->reload_result, __ATOMIC_RELAXED) < 0)
			admin_reply_error(&r, "F0000", "the configuration could not be reloaded; nothing changed",
					  "tern's log names the key or line.");
		else
			admin_reply_complete(&r, "RELOAD");
		admin_wait_end(s, &r);
		return;
	}
	if (state->waiting == ADMIN_WAIT_CLOSE) {
		if (pool_close_pending(rt->pool, server_database) > 0)
			return;
		admin_reply_complete(&r, "WAIT_CLOSE");
		admin_wait_end(s, &r);
		return;
	}
	TERN_ASSERT(state->waiting == ADMIN_WAIT_PAUSE);
	bool is_still_paused = state->database[0] ? gates_is_paused(&rt->gates, state->database)
						  : __atomic_load_n(&rt->is_paused, __ATOMIC_ACQUIRE) &&
							    __atomic_load_n(&rt->pause_generation, __ATOMIC_ACQUIRE) ==
								    state->target;
	if (!is_still_paused) {
		admin_reply_error(&r, "57014", "PAUSE was cancelled by RESUME before every server connection was free",
				  NULL);
		admin_wait_end(s, &r);
		return;
	}
	/* Acknowledged first: a transaction a worker started before it saw the gate is then visible as a
	 * server connection in use (or a request in the pool's queue). */
	if (!worker_pause_is_acknowledged(rt, state->target) || !pool_is_idle_for(rt->pool, server_database))
		return;
	TERN_INFO("PAUSE: paused; every server connection is free");
	admin_reply_complete(&r, state->tag);
	admin_wait_end(s, &r);
}

static bool admin_is_polled(const struct admin_state *state)
{
	return state->waiting == ADMIN_WAIT_PAUSE || state->waiting == ADMIN_WAIT_RELOAD ||
	       state->waiting == ADMIN_WAIT_CLOSE;
}

static void admin_on_tick(struct host *host)
{
	uint32_t waiting = 0;
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &host->sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->phase != SESSION_ADMIN || !admin_is_polled(admin_of(s)))
			continue;
		admin_poll(s);
		waiting += s->phase == SESSION_ADMIN && admin_is_polled(admin_of(s));
	}
	host->console_waiting_count = waiting;
}

/* ---- commands ---- */

/* Splits a console command into its lowercased words (`command`, at most two: "show pools") and the
 * argument after them as written (a database name keeps its case; double quotes are taken off). */
static void admin_parse(const char *sql, char *command, size_t command_size, char *argument, size_t argument_size)
{
	size_t n = 0;
	const char *p = sql;
	for (int words = 0; words < 2; words++) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (!*p || *p == ';')
			break;
		if (words == 1 && strcmp(command, "show") != 0)
			break; /* only SHOW takes a second keyword */
		if (words == 1 && n + 1 < command_size)
			command[n++] = ' ';
		for (; *p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != ';'; p++)
			if (n + 1 < command_size)
				command[n++] = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
		command[n] = '\0';
	}
	command[n] = '\0';
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	size_t len = strlen(p);
	while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == ';' || p[len - 1] == '\n' || p[len - 1] == '\t' ||
			   p[len - 1] == '\r'))
		len--;
	if (len >= 2 && p[0] == '"' && p[len - 1] == '"')
		p++, len -= 2;
	snprintf(argument, argument_size, "%.*s", (int)TERN_MIN(len, argument_size - 1), p);
}

static const char admin_commands_hint[] =
	"SHOW HELP lists the commands: SHOW VERSION, CONFIG, POOLS, SERVERS, CLIENTS, DATABASES, USERS, LISTS, "
	"STATS, WORKERS, ENDS, DIGESTS, FAILOVERS, SHADOW; RELOAD, PAUSE, RESUME, SUSPEND, KILL, RECONNECT, DISABLE, ENABLE, WAIT_CLOSE, SHUTDOWN.";

/* The SHOW commands answered at once, from what this worker can read (admin_show.c). */
static const struct {
	const char *command;
	void (*show)(struct admin_reply *r, struct tern_runtime *rt);
} admin_shows[] = {
	{"show version", admin_show_version}, {"show config", admin_show_config},
	{"show pools", admin_show_pools},     {"show servers", admin_show_servers},
	{"show databases", admin_show_databases}, {"show users", admin_show_users},
	{"show lists", admin_show_lists},     {"show help", admin_show_help},
	{"show digests", admin_show_digests}, {"show failovers", admin_show_failovers},
	{"show shadow", admin_show_shadow},
	{"show", admin_show_help},
};

static void (*admin_find_show(const char *command))(struct admin_reply *, struct tern_runtime *)
{
	for (size_t i = 0; i < TERN_ARRAY_LEN(admin_shows); i++)
		if (strcmp(admin_shows[i].command, command) == 0)
			return admin_shows[i].show;
	return NULL;
}

static void admin_on_query(struct session *s, const char *sql)
{
	struct tern_runtime *rt = s->host->runtime;
	struct admin_reply r = {0};
	void (*show)(struct admin_reply *, struct tern_runtime *);
	char command[64], arg[POOL_NAME_LEN_MAX + 8];
	admin_parse(sql, command, sizeof(command), arg, sizeof(arg));
	bool has_arg = arg[0] != '\0';
	if (strlen(arg) >= POOL_NAME_LEN_MAX) {
		admin_reply_error(&r, "42602", "the database name is too long", NULL);
	} else if (strncmp(command, "show ", 5) == 0 && has_arg) {
		admin_reply_error(&r, "42601", "SHOW takes no argument here", admin_commands_hint);
	} else if ((show = admin_find_show(command)) != NULL) {
		show(&r, rt);
		admin_reply_complete(&r, "SHOW");
	} else if (strcmp(command, "show clients") == 0 || strcmp(command, "show stats") == 0 ||
		   strcmp(command, "show workers") == 0 || strcmp(command, "show ends") == 0) {
		enum admin_ask what = command[5] == 'c'	  ? ADMIN_ASK_CLIENTS
				      : command[6] == 't' ? ADMIN_ASK_STATS
				      : command[5] == 'w' ? ADMIN_ASK_WORKERS
							  : ADMIN_ASK_ENDS;
		admin_ask_workers(s, &r, what, NULL);
		if (admin_of(s)->waiting)
			return; /* answered from admin_job_done */
	} else if (strcmp(command, "pause") == 0 || (strcmp(command, "suspend") == 0 && !has_arg)) {
		admin_pause(s, &r, arg, command[0] == 'p' ? "PAUSE" : "SUSPEND");
		if (admin_of(s)->waiting)
			return; /* answered from admin_poll */
	} else if (strcmp(command, "resume") == 0) {
		admin_resume(s, &r, arg);
	} else if ((strcmp(command, "disable") == 0 || strcmp(command, "enable") == 0) && has_arg) {
		bool is_disable = command[0] == 'd';
		int rc = gates_set_disabled(&rt->gates, arg, is_disable);
		if (rc == -ENOSPC)
			admin_reply_error(&r, "54000", "too many databases disabled", NULL);
		else
			admin_reply_complete(&r, is_disable ? "DISABLE" : "ENABLE"); /* again is no error, as PgBouncer */
		TERN_INFO("%s %s from the admin console by %s", is_disable ? "DISABLE" : "ENABLE", arg, s->user);
	} else if (strcmp(command, "kill") == 0 && has_arg) {
		/* As PgBouncer: the database's clients end now and its new ones wait until RESUME <db>. */
		TERN_INFO("KILL %s from the admin console by %s", arg, s->user);
		if (gates_set_paused(&rt->gates, arg, true) == -ENOSPC) {
			admin_reply_error(&r, "54000", "too many databases paused", NULL);
		} else {
			char server_database[POOL_NAME_LEN_MAX];
			admin_server_database(rt, arg, server_database, sizeof(server_database));
			(void)pool_reconnect(rt->pool, server_database);
			(void)admin_gate_changed(s);
			admin_ask_workers(s, &r, ADMIN_ASK_KILL, arg);
			if (admin_of(s)->waiting)
				return; /* answered from admin_job_done */
		}
	} else if (strcmp(command, "reconnect") == 0 || strcmp(command, "wait_close") == 0) {
		char server_database[POOL_NAME_LEN_MAX] = "";
		if (has_arg)
			admin_server_database(rt, arg, server_database, sizeof(server_database));
		if (command[0] == 'r') {
			uint32_t marked = pool_reconnect(rt->pool, has_arg ? server_database : NULL);
			TERN_INFO("RECONNECT %s from the admin console by %s: %u server connections close as they are "
				  "released",
				  arg, s->user, marked);
			admin_reply_complete(&r, "RECONNECT");
		} else {
			base_strlcpy(admin_of(s)->database, arg, sizeof(admin_of(s)->database));
			base_strlcpy(admin_of(s)->server_database, server_database, sizeof(admin_of(s)->server_database));
			admin_wait_start(s, ADMIN_WAIT_CLOSE, 0);
			return; /* answered from admin_poll */
		}
	} else if (strcmp(command, "reload") == 0 && !has_arg) {
		admin_reload(s);
		return; /* answered from admin_poll */
	} else if (strcmp(command, "shutdown") == 0 && !has_arg) {
		TERN_INFO("SHUTDOWN from the admin console by %s", s->user);
		kill(getpid(), SIGINT); /* main takes it like any SIGINT: every session ends now */
		admin_reply_complete(&r, "SHUTDOWN");
	} else {
		admin_reply_error(&r, "42601", "unknown admin command", admin_commands_hint);
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
	size_t n = proto_build_key_data(msg, sizeof(msg), s->key.pid, s->key.secret, s->key.len);
	session_send_to_client(s, msg, (uint32_t)n);
	n = proto_build_ready(msg, sizeof(msg), 'I');
	session_send_to_client(s, msg, (uint32_t)n);
	session_set_phase(s, SESSION_ADMIN); /* s->login stays: its buffer assembles the admin queries */
}

static void admin_on_bytes(struct session *s, const uint8_t *data, uint32_t len)
{
	s->client_active_ns = base_now_ns(); /* SHOW CLIENTS's request_time */
	if (session_login_buf_append(s, data, len, ADMIN_MESSAGE_MAX))
		admin_run(s);
}

/* Answers the complete messages in login->buf in order, until one must wait for its answer. */
static void admin_run(struct session *s)
{
	while (s->phase == SESSION_ADMIN && admin_of(s)->waiting == ADMIN_WAIT_NONE && s->login->len >= PROTO_HEADER_LEN) {
		uint8_t type = s->login->buf[0];
		uint32_t length = proto_read_u32(s->login->buf + 1);
		if (length < 4 || length + 1 > ADMIN_MESSAGE_MAX) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		}
		if (s->login->len < length + 1)
			return;
		if (type == PROTO_FE_TERMINATE) {
			session_end(s, SESSION_END_CLIENT_TERMINATE);
			return;
		}
		if (type == PROTO_FE_QUERY && s->login->buf[length] == '\0') {
			admin_on_query(s, (const char *)s->login->buf + PROTO_HEADER_LEN);
		} else if (type == PROTO_FE_SYNC || type == PROTO_FE_FLUSH) {
			/* A Flush is answered like a Sync: a pipelining driver that flushes to read would wait
			 * for ever for an answer the console cannot give. */
			struct admin_reply r = {0};
			admin_reply_error(&r, "0A000", "the admin console answers simple queries only", NULL);
			admin_send(s, &r);
		} else if (type == PROTO_FE_QUERY) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		} /* other extended-protocol messages wait for their Sync, which answers for them */
		memmove(s->login->buf, s->login->buf + length + 1, s->login->len - length - 1);
		s->login->len -= length + 1;
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
