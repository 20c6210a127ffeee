/*
 * worker_stats.h — SHOW STATS's per-database totals of one worker (worker_stats.c): the rows, the period
 * bookkeeping, and what a worker answers for them.
 *
 * Threads: a worker's own table, its thread's alone.
 * Ownership: the worker embeds the table (its rows freed by worker_db_stats_deinit); a report is the
 * caller's to free.
 * Never: reads another worker's table (admin.c sums the workers' answers), or changes a session but for
 * its stats (its row, its open server assignment closed).
 */
#ifndef TERN_WORKER_STATS_H
#define TERN_WORKER_STATS_H

#include "host.h"
#include "session.h"

/* SHOW STATS's averages are over the last full period of this many seconds (PgBouncer's stats_period). */
#define WORKER_STATS_PERIOD_S 60u
/* Database names one worker keeps SHOW STATS totals for: a table scanned by name when a session first
 * needs its row. Past it, sessions of further names are counted in the row WORKER_STATS_OTHER. */
#define WORKER_STATS_DATABASES_MAX 1024u
#define WORKER_STATS_OTHER "(other)"

/* SHOW STATS's sums for one database (times in ns). */
struct worker_totals {
	uint64_t xact_count;
	uint64_t query_count;
	uint64_t received_bytes; /* from clients, sent on to servers (with tern's own parameter restores) */
	uint64_t sent_bytes;     /* to clients */
	uint64_t xact_ns;
	uint64_t query_ns;
	uint64_t wait_ns;
};

/* One worker's row of SHOW STATS: totals of freed sessions, and the period bookkeeping. */
struct worker_db_totals {
	char database[POOL_NAME_LEN_MAX];
	struct worker_totals freed; /* sessions freed since start */
	struct worker_totals mark;  /* everything (freed + live) at the start of the current period */
	struct worker_totals last;  /* the increase over the last full period */
};

/* A worker's answer to SHOW STATS for one database. */
struct worker_db_report {
	char database[POOL_NAME_LEN_MAX];
	struct worker_totals total; /* since start, live sessions included */
	struct worker_totals last;  /* the last full period's increase */
};

/* A worker's rows, made as databases are first seen, and when the current period ends. */
struct worker_db_stats {
	struct worker_db_totals *rows;
	uint32_t count, cap;
	uint64_t next_period_ns;
};

/* A session is freed: what it counted joins its row. */
void worker_db_stats_fold(struct worker_db_stats *st, struct session *s);
/* The period's end (host: the worker's sessions, live and ending): its increase becomes each row's `last`,
 * which the averages are made of. */
void worker_db_stats_period(struct worker_db_stats *st, struct host *host, uint64_t now_ns);
/* Every row, live sessions included; malloc'd, *count rows; NULL when out of memory. */
struct worker_db_report *worker_db_stats_report(struct worker_db_stats *st, struct host *host, uint32_t *count);
void worker_db_stats_deinit(struct worker_db_stats *st);

#endif
