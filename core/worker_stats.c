/* SHOW STATS's per-database totals, one table per worker (struct worker_db_stats): a session's counts join
 * its database's row when it is freed, live sessions are added when a report or a period's end asks, and
 * each period's increase is kept for the averages. Never reads another worker's table (admin.c sums the
 * workers' answers). */
#include "worker_stats.h"

#include <stdlib.h>
#include <string.h>

/* worker_totals is added and subtracted as an array of counters. */
static_assert(sizeof(struct worker_totals) % sizeof(uint64_t) == 0, "worker_totals holds uint64_t only");
#define WORKER_TOTALS_FIELDS (sizeof(struct worker_totals) / sizeof(uint64_t))

static void worker_totals_add(struct worker_totals *to, const struct worker_totals *from)
{
	uint64_t *a = (uint64_t *)to;
	const uint64_t *b = (const uint64_t *)from;
	for (size_t i = 0; i < WORKER_TOTALS_FIELDS; i++)
		a[i] += b[i];
}

static void worker_totals_add_session(struct worker_totals *to, struct session *s)
{
	session_stats_close_assignment(s);
	struct worker_totals t = {
		.xact_count = s->stats.xact_count,
		.query_count = s->stats.query_count,
		.received_bytes = session_primary(s)->to_server.sent_bytes_total,
		.sent_bytes = s->to_client.sent_bytes_total,
		.xact_ns = s->stats.xact_ns,
		.query_ns = s->stats.query_ns,
		.wait_ns = s->stats.wait_ns,
	};
	worker_totals_add(to, &t);
}

#define WORKER_STATS_NO_SLOT UINT32_MAX

static uint32_t worker_stats_find(const struct worker_db_stats *st, const char *database)
{
	for (uint32_t i = 0; i < st->count; i++)
		if (strcmp(st->rows[i].database, database) == 0)
			return i;
	return WORKER_STATS_NO_SLOT;
}

/* The session's row, made on first use; WORKER_STATS_NO_SLOT for an admin session or out of memory. */
static uint32_t worker_stats_slot(struct worker_db_stats *st, struct session *s)
{
	if (!s->db)
		return WORKER_STATS_NO_SLOT; /* the admin console, or a client that never named a database */
	if (s->stats.slot)
		return s->stats.slot - 1;
	const char *database = s->database;
	uint32_t i = worker_stats_find(st, database);
	if (i == WORKER_STATS_NO_SLOT && st->count >= WORKER_STATS_DATABASES_MAX - 1) {
		database = WORKER_STATS_OTHER; /* the last row is kept for every further name */
		i = worker_stats_find(st, database);
	}
	if (i == WORKER_STATS_NO_SLOT) {
		if (st->count == st->cap) {
			uint32_t cap = TERN_MIN(TERN_MAX(st->cap * 2, 8u), WORKER_STATS_DATABASES_MAX);
			struct worker_db_totals *grown = realloc(st->rows, cap * sizeof(*grown));
			if (!grown)
				return WORKER_STATS_NO_SLOT; /* this session goes uncounted */
			st->rows = grown;
			st->cap = cap;
		}
		i = st->count++;
		memset(&st->rows[i], 0, sizeof(st->rows[i]));
		base_strlcpy(st->rows[i].database, database, sizeof(st->rows[i].database));
	}
	s->stats.slot = i + 1;
	return i;
}

/* A session is freed: what it counted joins its row. */
void worker_db_stats_fold(struct worker_db_stats *st, struct session *s)
{
	uint32_t slot = worker_stats_slot(st, s);
	if (slot != WORKER_STATS_NO_SLOT)
		worker_totals_add_session(&st->rows[slot].freed, s);
}

/* Every row's count so far: freed sessions, live ones and ending ones. Malloc'd; NULL: no memory. */
static struct worker_totals *worker_stats_current(struct worker_db_stats *st, struct host *host)
{
	struct base_list *lists[] = {&host->sessions, &host->reaping};
	struct base_list *node, *tmp;
	for (size_t l = 0; l < TERN_ARRAY_LEN(lists); l++) { /* rows first: the table may grow */
		base_list_for_each_safe(node, tmp, lists[l])
		{
			(void)worker_stats_slot(st, TERN_CONTAINER_OF(node, struct session, link));
		}
	}
	struct worker_totals *current = calloc(TERN_MAX(st->count, 1u), sizeof(*current));
	if (!current)
		return NULL;
	for (uint32_t i = 0; i < st->count; i++)
		current[i] = st->rows[i].freed;
	for (size_t l = 0; l < TERN_ARRAY_LEN(lists); l++) {
		base_list_for_each_safe(node, tmp, lists[l])
		{
			struct session *s = TERN_CONTAINER_OF(node, struct session, link);
			uint32_t slot = worker_stats_slot(st, s);
			if (slot != WORKER_STATS_NO_SLOT)
				worker_totals_add_session(&current[slot], s);
		}
	}
	return current;
}

/* The period's end: its increase becomes `last`, which the averages are made of. */
void worker_db_stats_period(struct worker_db_stats *st, struct host *host, uint64_t now_ns)
{
	st->next_period_ns = now_ns + WORKER_STATS_PERIOD_S * BASE_NS_PER_SEC;
	struct worker_totals *current = worker_stats_current(st, host);
	if (!current)
		return; /* out of memory: the averages stay those of the period before */
	for (uint32_t i = 0; i < st->count; i++) {
		struct worker_db_totals *row = &st->rows[i];
		uint64_t *last = (uint64_t *)&row->last;
		const uint64_t *now = (const uint64_t *)&current[i], *mark = (const uint64_t *)&row->mark;
		for (size_t f = 0; f < WORKER_TOTALS_FIELDS; f++)
			last[f] = now[f] - mark[f];
		row->mark = current[i];
	}
	free(current);
}

struct worker_db_report *worker_db_stats_report(struct worker_db_stats *st, struct host *host, uint32_t *count)
{
	struct worker_totals *current = worker_stats_current(st, host);
	struct worker_db_report *rows =
		current ? calloc(TERN_MAX(st->count, 1u), sizeof(*rows)) : NULL;
	if (!rows) {
		free(current);
		return NULL;
	}
	for (uint32_t i = 0; i < st->count; i++) {
		memcpy(rows[i].database, st->rows[i].database, sizeof(rows[i].database));
		rows[i].total = current[i];
		rows[i].last = st->rows[i].last;
	}
	*count = st->count;
	free(current);
	return rows;
}

void worker_db_stats_deinit(struct worker_db_stats *st)
{
	free(st->rows);
	*st = (struct worker_db_stats){0};
}
