/* The admin HTTP endpoint of http.h: libmicrohttpd answers each connection on a thread of its own, GET
 * /metrics and GET /api/status from the published state (monitor atomics, the workers' published counters,
 * each pool server's counters under its mutex, committed history's counters); the POST endpoints are
 * http_post.c's. */
#include "replay/failovers.h"
#include "routing/split.h"
#include "http.h"
#include "http_internal.h"

#include "digest.h"
#include "replay/journal.h"
#include "replay/journal_rerun.h"
#include "routing/monitor.h"
#include "shadow.h"
#include "replay/decide.h"
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What one scrape reads: every worker's counters summed, and their rings by worker. */
struct http_snapshot {
	struct host_stats total;
	uint32_t worker_count;
	struct ring_stats *rings; /* by worker */
};

static bool http_snapshot_take(struct tern_runtime *rt, struct http_snapshot *snap)
{
	memset(snap, 0, sizeof(*snap));
	snap->worker_count = __atomic_load_n(&rt->worker_count, __ATOMIC_ACQUIRE);
	snap->rings = calloc(snap->worker_count ? snap->worker_count : 1, sizeof(*snap->rings));
	if (!snap->rings)
		return false;
	for (uint32_t i = 0; i < snap->worker_count; i++) {
		struct host_stats one;
		worker_read_stats(rt->workers[i], &one, &snap->rings[i]);
		uint64_t *to = (uint64_t *)&snap->total;
		const uint64_t *from = (const uint64_t *)&one;
		for (size_t k = 0; k < sizeof(one) / sizeof(uint64_t); k++)
			to[k] += from[k];
	}
	return true;
}

/* One pool server's counters, read under its mutex. */
struct http_pool_counts {
	uint32_t free, used, opening, parked;
	uint64_t opened, closed, open_failed, open_dropped, parked_total;
};

static struct http_pool_counts http_pool_counts(struct pool_server *server)
{
	struct http_pool_counts c;
	pthread_mutex_lock(&server->lock);
	c.free = server->free_count;
	c.used = server->open_count - server->free_count;
	c.opening = server->opening_count;
	c.parked = server->waiter_count;
	c.opened = server->opened_total;
	c.closed = server->closed_total;
	c.open_failed = server->open_failed_total;
	c.open_dropped = server->open_dropped_total;
	c.parked_total = server->parked_total;
	pthread_mutex_unlock(&server->lock);
	return c;
}

/* ---- /metrics ---- */

static void http_help(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A counter without labels. */
static void http_counter(FILE *f, const char *name, const char *help, uint64_t value)
{
	http_help(f, name, "counter", help);
	fprintf(f, "%s %llu\n", name, (unsigned long long)value);
}

/* One counter by path: what served the reads, or why the primary did. */
static void http_route_paths(FILE *f, const char *name, const struct host_route_paths *paths)
{
	const struct {
		const char *labels;
		uint64_t value;
	} rows[] = {
		{"path=\"replica\"", paths->replica},
		{"path=\"replica_after_wait\"", paths->replica_wait},
		{"path=\"replica\",reason=\"replica_lost\"", paths->lost_replica},
		{"path=\"primary\",reason=\"wait_timeout\"", paths->timeout},
		{"path=\"primary\",reason=\"no_replica\"", paths->no_replica},
		{"path=\"primary\",reason=\"replica_lost\"", paths->lost},
		{"path=\"primary\",reason=\"replica_error\"", paths->error},
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(rows); i++)
		fprintf(f, "%s{%s} %llu\n", name, rows[i].labels, (unsigned long long)rows[i].value);
}

/* Committed history and its journal on disk (journal.h). */
static void http_journal_metrics(FILE *f, struct journal *h)
{
	struct journal_counters c;
	journal_counters(h, &c);
	http_counter(f, "tern_journal_transactions_total", "committed transactions that entered committed history",
		     c.committed);
	http_counter(f, "tern_journal_incomplete_total",
		     "... of them kept marked incomplete (a COPY, an EXECUTE, a long statement: committed_history replay "
		     "refuses them)",
		     c.incomplete);
	http_counter(f, "tern_journal_bytes_total", "encoded bytes of the transactions that entered committed history",
		     c.bytes);
	http_counter(f, "tern_journal_evicted_total",
		     "transactions that left memory for [journal] max_committed_transactions or max_committed_bytes (still "
		     "on disk with dir)",
		     c.evicted);
	http_counter(f, "tern_journal_dropped_total",
		     "committed transactions not kept: too large or no memory, or the writer's queue was full",
		     c.dropped + c.disk_dropped);
	http_counter(f, "tern_journal_disk_records_total", "records the writer appended to the journal's segments",
		     c.disk_written);
	http_counter(f, "tern_journal_disk_bytes_total", "bytes the writer appended to the journal's segments", c.disk_bytes);
	http_help(f, "tern_journal_queue_depth", "gauge", "records waiting for the writer thread");
	fprintf(f, "tern_journal_queue_depth %llu\n", (unsigned long long)c.disk_queued);
	http_counter(f, "tern_journal_fsyncs_total", "fdatasync calls on the journal's segments", c.fsyncs);
	http_help(f, "tern_journal_fsync_seconds_total", "counter", "time spent in those fdatasync calls");
	fprintf(f, "tern_journal_fsync_seconds_total %.6f\n", (double)c.fsync_ns_total / 1e9);
	http_help(f, "tern_journal_fsync_seconds_max", "gauge", "the longest of those fdatasync calls");
	fprintf(f, "tern_journal_fsync_seconds_max %.6f\n", (double)c.fsync_ns_max / 1e9);
	http_counter(f, "tern_journal_write_errors_total", "failed writes and fdatasync calls of the journal's writer",
		     c.disk_errors);
	http_counter(f, "tern_journal_replay_runs_total", "operator replays asked for (POST /api/replay)", c.reruns);
}

/* [shadow] sampling's counts, and each query fingerprint's (shadow.h). */
static void http_shadow_metrics(FILE *f, struct shadow *sh)
{
	struct shadow_counts c;
	struct shadow_digest *digests = NULL;
	uint32_t count = 0;
	if (shadow_snapshot(sh, &c, &digests, &count) < 0)
		return;
	http_counter(f, "tern_shadow_sampled_total", "autocommit reads sampled for the shadow ([shadow] sample_rate)",
		     c.sampled);
	http_counter(f, "tern_shadow_dropped_total", "sampled reads dropped: the shadow queue was full", c.dropped);
	http_counter(f, "tern_shadow_compared_total", "sampled reads run on the shadow and compared", c.compared);
	http_counter(f, "tern_shadow_mismatched_total", "compared reads whose rows differed on the shadow", c.mismatched);
	http_counter(f, "tern_shadow_failed_total", "sampled reads the shadow could not run (no connection, an error)",
		     c.failed);
	http_help(f, "tern_shadow_digest_compared_total", "counter", "compared reads by query fingerprint");
	for (uint32_t i = 0; i < count; i++)
		fprintf(f, "tern_shadow_digest_compared_total{fingerprint=\"%016llx\"} %llu\n",
			(unsigned long long)digests[i].fingerprint, (unsigned long long)digests[i].compared);
	http_help(f, "tern_shadow_digest_mismatched_total", "counter", "mismatched reads by query fingerprint");
	for (uint32_t i = 0; i < count; i++)
		fprintf(f, "tern_shadow_digest_mismatched_total{fingerprint=\"%016llx\"} %llu\n",
			(unsigned long long)digests[i].fingerprint, (unsigned long long)digests[i].mismatched);
	free(digests);
}

char *http_metrics_text(struct tern_runtime *rt)
{
	struct http_snapshot snap;
	if (!http_snapshot_take(rt, &snap))
		return NULL;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f) {
		free(snap.rings);
		return NULL;
	}
	const struct monitor *m = rt->monitor;
	const struct pool_server *primary = runtime_primary(rt);
	uint64_t now = base_now_ns();
	uint32_t count = rt->pool->server_count;

	http_help(f, "tern_server_up", "gauge", "1 when the topology monitor's last round got an answer from the server");
	for (uint32_t i = 0; i < count; i++) {
		uint32_t role = __atomic_load_n(&monitor_server_at(m, i)->role, __ATOMIC_ACQUIRE);
		fprintf(f, "tern_server_up{server=\"%s\"} %d\n", rt->pool->servers[i].name,
			monitor_role_is_up(role));
	}
	http_help(f, "tern_server_role", "gauge", "the server's role as it says (pg_is_in_recovery): 1 for the role it has");
	for (uint32_t i = 0; i < count; i++) {
		uint32_t role = __atomic_load_n(&monitor_server_at(m, i)->role, __ATOMIC_ACQUIRE);
		fprintf(f, "tern_server_role{server=\"%s\",role=\"%s\"} 1\n", rt->pool->servers[i].name,
			monitor_role_name(role));
	}
	http_help(f, "tern_server_writes", "gauge", "1 for the server writes go to");
	for (uint32_t i = 0; i < count; i++)
		fprintf(f, "tern_server_writes{server=\"%s\"} %d\n", rt->pool->servers[i].name, &rt->pool->servers[i] == primary);
	http_help(f, "tern_server_timeline", "gauge", "the server's timeline");
	for (uint32_t i = 0; i < count; i++)
		fprintf(f, "tern_server_timeline{server=\"%s\"} %u\n", rt->pool->servers[i].name,
			__atomic_load_n(&monitor_server_at(m, i)->timeline, __ATOMIC_RELAXED));
	http_help(f, "tern_server_lsn", "gauge",
		  "the primary's WAL LSN, a standby's replay LSN, as a number of bytes (the latest round or probe)");
	for (uint32_t i = 0; i < count; i++)
		fprintf(f, "tern_server_lsn{server=\"%s\"} %llu\n", rt->pool->servers[i].name,
			(unsigned long long)__atomic_load_n(&monitor_server_at(m, i)->lsn, __ATOMIC_RELAXED));
	http_help(f, "tern_server_probes_total", "counter",
		  "on-demand LSN probes the monitor sent the server: the primary's for strict and split reads, a standby's for reads waiting on it");
	for (uint32_t i = 0; i < count; i++)
		fprintf(f, "tern_server_probes_total{server=\"%s\"} %llu\n", rt->pool->servers[i].name,
			(unsigned long long)__atomic_load_n(&monitor_server_at(m, i)->probes, __ATOMIC_RELAXED));
	http_help(f, "tern_server_lag_bytes", "gauge", "a standby's replay LSN behind the primary's WAL LSN");
	http_help(f, "tern_server_lag_seconds", "gauge",
		  "how long ago the primary was where a standby has replayed to (as precise as the monitor's rounds)");
	for (uint32_t i = 0; i < count; i++) {
		struct monitor_lag lag = monitor_lag_of(m, i, primary, now);
		if (__atomic_load_n(&monitor_server_at(m, i)->role, __ATOMIC_ACQUIRE) != MONITOR_STANDBY)
			continue;
		fprintf(f, "tern_server_lag_bytes{server=\"%s\"} %llu\n", rt->pool->servers[i].name,
			(unsigned long long)lag.bytes);
		if (lag.is_known)
			fprintf(f, "tern_server_lag_seconds{server=\"%s\"} %.6f\n", rt->pool->servers[i].name,
				(double)lag.ns / 1e9);
	}

	http_help(f, "tern_pool_connections", "gauge", "server connections by state (free, used, opening)");
	http_help(f, "tern_pool_parked", "gauge", "requests waiting for a connection to the server");
	http_help(f, "tern_pool_opened_total", "counter", "server connections opened");
	http_help(f, "tern_pool_closed_total", "counter", "server connections closed");
	http_help(f, "tern_pool_open_failed_total", "counter", "server connections that failed to open");
	http_help(f, "tern_pool_open_dropped_total", "counter",
		  "server logins given up before they began: every client that wanted one had left");
	http_help(f, "tern_pool_parked_total", "counter", "requests that waited for a connection");
	for (uint32_t i = 0; i < count; i++) {
		const char *name = rt->pool->servers[i].name;
		struct http_pool_counts c = http_pool_counts(&rt->pool->servers[i]);
		fprintf(f, "tern_pool_connections{server=\"%s\",state=\"free\"} %u\n", name, c.free);
		fprintf(f, "tern_pool_connections{server=\"%s\",state=\"used\"} %u\n", name, c.used);
		fprintf(f, "tern_pool_connections{server=\"%s\",state=\"opening\"} %u\n", name, c.opening);
		fprintf(f, "tern_pool_parked{server=\"%s\"} %u\n", name, c.parked);
		fprintf(f, "tern_pool_opened_total{server=\"%s\"} %llu\n", name, (unsigned long long)c.opened);
		fprintf(f, "tern_pool_closed_total{server=\"%s\"} %llu\n", name, (unsigned long long)c.closed);
		fprintf(f, "tern_pool_open_failed_total{server=\"%s\"} %llu\n", name, (unsigned long long)c.open_failed);
		fprintf(f, "tern_pool_open_dropped_total{server=\"%s\"} %llu\n", name, (unsigned long long)c.open_dropped);
		fprintf(f, "tern_pool_parked_total{server=\"%s\"} %llu\n", name, (unsigned long long)c.parked_total);
	}

	const struct host_stats *t = &snap.total;
	http_help(f, "tern_route_reads_total", "counter",
		  "autocommit reads routing placed, by path: replica, replica_after_wait, or primary with the reason "
		  "it fell back");
	http_route_paths(f, "tern_route_reads_total", &t->reads);
	http_help(f, "tern_split_reads_total", "counter",
		  "reads of read-committed transactions split off to a replica (transaction_split), by path as "
		  "tern_route_reads_total");
	http_route_paths(f, "tern_split_reads_total", &t->split);
	http_help(f, "tern_split_refused_total", "counter",
		  "statements of transactions transaction_split looked at that stayed on the primary, by the first "
		  "condition they failed (pipelined: sent before an answer they must follow)");
	for (int i = SPLIT_ELIGIBLE + 1; i < SPLIT_REFUSAL_COUNT; i++)
		fprintf(f, "tern_split_refused_total{reason=\"%s\"} %llu\n", split_refusal_names[i],
			(unsigned long long)t->split_refused[i]);
	fprintf(f, "tern_split_refused_total{reason=\"pipelined\"} %llu\n", (unsigned long long)t->split_pipelined);
	http_help(f, "tern_route_wait_seconds", "histogram", "how long reads waited for a replica to reach their LSN target");
	static const uint64_t bounds_us[HOST_ROUTE_WAIT_BUCKETS] = HOST_ROUTE_WAIT_BOUNDS_US;
	uint64_t cumulative = 0;
	for (uint32_t i = 0; i < HOST_ROUTE_WAIT_BUCKETS; i++) {
		cumulative += t->route_wait_buckets[i];
		fprintf(f, "tern_route_wait_seconds_bucket{le=\"%g\"} %llu\n", (double)bounds_us[i] / 1e6,
			(unsigned long long)cumulative);
	}
	cumulative += t->route_wait_buckets[HOST_ROUTE_WAIT_BUCKETS];
	fprintf(f, "tern_route_wait_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cumulative);
	fprintf(f, "tern_route_wait_seconds_sum %.6f\n", (double)t->route_wait_us_sum / 1e6);
	fprintf(f, "tern_route_wait_seconds_count %llu\n", (unsigned long long)cumulative);
	http_counter(f, "tr_failovers_total", "lost primary connections a session survived (Transaction Replay)",
		     t->tr_failovers);
	http_counter(f, "tr_statements_reexecuted_total",
		     "statements in flight at a lost primary connection that ran again on the next primary", t->tr_reexecuted);
	http_counter(f, "tr_transactions_replayed_total", "uncommitted transactions replayed and verified on the next primary",
		     t->tr_replayed);
	http_counter(f, "tr_replay_failures_total",
		     "lost primary connections the client got an error from, or that ended its session (tr_mode other than "
		     "none), and recoveries that found no primary within write_timeout_secs",
		     t->tr_replay_failures);
	http_counter(f, "tr_replay_cap_exceeded_total",
		     "transactions made unreplayable by a [limits] tr_max_replay_statements, tr_max_replay_bytes or "
		     "tr_max_observation_bytes bound",
		     t->tr_cap_exceeded);
	http_counter(f, "tern_stale_plan_reruns_total",
		     "autocommit requests run again, prepared anew, after the server found the plan of a statement tern "
		     "kept prepared stale (0A000, server_side_prepare)",
		     t->stale_plan_reruns);
	http_counter(f, "tr_session_set_cap_exceeded_total",
		     "lost primary connections whose session had set more variables than tr_max_session_set_statements "
		     "(refused with 08006)",
		     t->tr_set_cap_exceeded);
	http_counter(f, "tr_unknown_outcome_errors_total",
		     "08007 errors: a statement or COMMIT in flight at a lost primary connection, its outcome unknown",
		     t->tr_unknown_outcome);
	http_help(f, "tern_classify_cache_total", "counter", "query classifications, by whether the shape cache had them");
	fprintf(f, "tern_classify_cache_total{result=\"hit\"} %llu\n", (unsigned long long)t->classify_hits);
	fprintf(f, "tern_classify_cache_total{result=\"miss\"} %llu\n", (unsigned long long)t->classify_misses);

	http_help(f, "tern_clients", "gauge", "client connections open");
	fprintf(f, "tern_clients %u\n", __atomic_load_n(&rt->client_count, __ATOMIC_RELAXED));
	http_help(f, "tern_clients_accepted_total", "counter", "client connections accepted");
	fprintf(f, "tern_clients_accepted_total %llu\n", (unsigned long long)t->accepted);
	http_help(f, "tern_clients_handed_over_total", "counter",
		  "clients a worker accepted and handed to a worker with fewer sessions");
	fprintf(f, "tern_clients_handed_over_total %llu\n", (unsigned long long)t->handed_over);
	http_help(f, "tern_sessions_ended_total", "counter", "client sessions ended, by reason");
	for (uint32_t r = 0; r < SESSION_END_REASON_COUNT; r++)
		fprintf(f, "tern_sessions_ended_total{reason=\"%s\"} %llu\n", session_end_info(r)->name,
			(unsigned long long)t->ended[r]);
	http_help(f, "tern_transactions_total", "counter", "transactions served, by how they got a server connection");
	fprintf(f, "tern_transactions_total{via=\"local_reuse\"} %llu\n", (unsigned long long)t->local_reuse);
	fprintf(f, "tern_transactions_total{via=\"pool\"} %llu\n", (unsigned long long)t->pool_checkouts);

	if (rt->journal)
		http_journal_metrics(f, rt->journal);
	if (rt->shadow)
		http_shadow_metrics(f, rt->shadow);

	http_help(f, "tern_ring_passes_total", "counter",
		  "io_uring_enter calls of each worker's loop (epoll_wait calls on the epoll backend)");
	for (uint32_t i = 0; i < snap.worker_count; i++)
		fprintf(f, "tern_ring_passes_total{worker=\"%u\"} %llu\n", i, (unsigned long long)snap.rings[i].passes);
	http_help(f, "tern_ring_completions_total", "counter", "completions each worker's ring delivered");
	for (uint32_t i = 0; i < snap.worker_count; i++)
		fprintf(f, "tern_ring_completions_total{worker=\"%u\"} %llu\n", i,
			(unsigned long long)snap.rings[i].completions);
	http_help(f, "tern_ring_submissions_total", "counter", "operations each worker submitted");
	for (uint32_t i = 0; i < snap.worker_count; i++)
		fprintf(f, "tern_ring_submissions_total{worker=\"%u\"} %llu\n", i,
			(unsigned long long)snap.rings[i].submissions);
	http_help(f, "tern_ring_enobufs_total", "counter", "receives that found no free buffer");
	for (uint32_t i = 0; i < snap.worker_count; i++)
		fprintf(f, "tern_ring_enobufs_total{worker=\"%u\"} %llu\n", i, (unsigned long long)snap.rings[i].enobufs);
	free(snap.rings);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* ---- /api/status ---- */

/* Transaction Replay: its mode, counters and the last failovers (failovers.h), newest first. */
static json_t *http_replay_json(struct tern_runtime *rt, const struct host_stats *t)
{
	const struct tern_config *cfg = runtime_config(rt);
	json_t *recent = json_array();
	struct failover_entry *entries = malloc(FAILOVERS_KEPT * sizeof(*entries));
	uint32_t count = entries ? failover_log_copy(rt->failovers, entries) : 0;
	for (uint32_t i = 0; i < count; i++) {
		const struct failover_entry *e = &entries[i];
		json_array_append_new(recent, json_pack("{s:f, s:s, s:s, s:s, s:s, s:s, s:s}", "at",
							(double)e->wall_ns / 1e9, "user", e->user, "database", e->database,
							"server", e->server, "phase", e->phase, "action", e->action,
							"sqlstate", e->sqlstate));
	}
	free(entries);
	return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "mode", tr_mode_names[cfg->tr_enabled ? cfg->tr_mode : TR_MODE_NONE],
			 "failovers", (json_int_t)t->tr_failovers, "statements_reexecuted", (json_int_t)t->tr_reexecuted,
			 "transactions_replayed", (json_int_t)t->tr_replayed, "replay_failures",
			 (json_int_t)t->tr_replay_failures, "unknown_outcome_errors", (json_int_t)t->tr_unknown_outcome,
			 "replay_cap_exceeded", (json_int_t)t->tr_cap_exceeded, "recent", recent);
}

/* /api/status's "journal": enabled (tr_enabled at startup), and the coverage. */
static json_t *http_journal_json(struct journal *h)
{
	json_t *journal = h ? http_coverage_json(h) : json_object();
	if (journal)
		json_object_set_new(journal, "enabled", json_boolean(h != NULL));
	return journal;
}

char *http_status_json(struct tern_runtime *rt)
{
	struct http_snapshot snap;
	if (!http_snapshot_take(rt, &snap))
		return NULL;
	free(snap.rings);
	const struct monitor *m = rt->monitor;
	const struct pool_server *primary = runtime_primary(rt);
	uint64_t now = base_now_ns();
	json_t *servers = json_array();
	for (uint32_t i = 0; i < rt->pool->server_count; i++) {
		struct pool_server *server = &rt->pool->servers[i];
		const struct monitor_server *ms = monitor_server_at(m, i);
		struct monitor_lag lag = monitor_lag_of(m, i, primary, now);
		struct http_pool_counts c = http_pool_counts(server);
		uint32_t role = __atomic_load_n(&ms->role, __ATOMIC_ACQUIRE);
		json_t *one = json_pack("{s:s, s:s, s:b, s:b, s:I, s:I, s:{s:i, s:i, s:i, s:i}}", "name", server->name,
					"role", monitor_role_name(role), "up",
					monitor_role_is_up(role), "writes", server == primary,
					"timeline", (json_int_t)__atomic_load_n(&ms->timeline, __ATOMIC_RELAXED), "lsn",
					(json_int_t)__atomic_load_n(&ms->lsn, __ATOMIC_RELAXED), "pool", "free", (int)c.free,
					"used", (int)c.used, "opening", (int)c.opening, "parked", (int)c.parked);
		if (one && role == MONITOR_STANDBY) {
			json_object_set_new(one, "lag_bytes", json_integer((json_int_t)lag.bytes));
			json_object_set_new(one, "lag_seconds", lag.is_known ? json_real((double)lag.ns / 1e9) : json_null());
		}
		json_array_append_new(servers, one);
	}
	const struct host_stats *t = &snap.total;
	json_t *status = json_pack(
		"{s:s, s:o, s:i, s:i, s:{s:I, s:I, s:I, s:I, s:I, s:I}}", "version", TERN_VERSION, "servers", servers, "workers",
		(int)snap.worker_count, "clients", (int)__atomic_load_n(&rt->client_count, __ATOMIC_RELAXED), "routing",
		"replica", (json_int_t)t->reads.replica, "replica_after_wait", (json_int_t)t->reads.replica_wait,
		"primary_wait_timeout", (json_int_t)t->reads.timeout, "primary_no_replica", (json_int_t)t->reads.no_replica,
		"primary_replica_lost", (json_int_t)t->reads.lost, "primary_replica_error", (json_int_t)t->reads.error);
	json_t *split = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "replica", (json_int_t)t->split.replica,
				  "replica_after_wait", (json_int_t)t->split.replica_wait, "primary_wait_timeout",
				  (json_int_t)t->split.timeout, "primary_no_replica", (json_int_t)t->split.no_replica,
				  "primary_replica_lost", (json_int_t)t->split.lost, "primary_replica_error",
				  (json_int_t)t->split.error);
	if (status && split)
		json_object_set_new(status, "split", split);
	else
		json_decref(split);
	if (status)
		json_object_set_new(status, "replay", http_replay_json(rt, t));
	if (status)
		json_object_set_new(status, "journal", http_journal_json(rt->journal));
	char *text = status ? json_dumps(status, JSON_INDENT(2)) : NULL;
	json_decref(status);
	return text;
}

/* ---- /api/digests ---- */

char *http_digests_json(struct tern_runtime *rt)
{
	struct digest_entry *entries = NULL;
	uint32_t count = 0;
	uint64_t dropped = 0;
	if (rt->digests && digest_snapshot(rt->digests, &entries, &count, &dropped) < 0)
		return NULL;
	json_t *list = json_array();
	for (uint32_t i = 0; i < count; i++) {
		const struct digest_entry *e = &entries[i];
		char fingerprint[20];
		snprintf(fingerprint, sizeof(fingerprint), "%016llx", (unsigned long long)e->fingerprint);
		json_array_append_new(list, json_pack("{s:s, s:I, s:f, s:I, s:s}", "fingerprint", fingerprint, "calls",
						      (json_int_t)e->calls, "total_ms", (double)e->total_ns / 1e6, "rows",
						      (json_int_t)e->rows, "query", e->text));
	}
	free(entries);
	json_t *body = json_pack("{s:b, s:o, s:I}", "enabled", rt->digests != NULL, "digests", list, "dropped_calls",
				 (json_int_t)dropped);
	char *text = body ? json_dumps(body, JSON_INDENT(2)) : NULL;
	json_decref(body);
	return text;
}

/* ---- the daemon ---- */

static enum MHD_Result http_handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				   const char *version, const char *upload_data, size_t *upload_data_size, void **state)
{
	(void)version;
	struct http_admin *h = cls;
	if (strcmp(url, "/api/replay") == 0 || strcmp(url, "/api/shadow") == 0)
		return http_post_request(h, conn, url, method, upload_data, upload_data_size, state);
	if (strcmp(url, "/metrics") != 0 && strcmp(url, "/api/status") != 0 && strcmp(url, "/api/digests") != 0)
		return http_reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
				  strdup("not found: /metrics, /api/status, /api/digests, /api/replay and /api/shadow "
					 "(POST)\n"));
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return http_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", strdup("GET only\n"));
	if (strcmp(url, "/metrics") == 0)
		return http_reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", http_metrics_text(h->rt));
	if (strcmp(url, "/api/digests") == 0)
		return http_reply(conn, MHD_HTTP_OK, "application/json", http_digests_json(h->rt));
	return http_reply(conn, MHD_HTTP_OK, "application/json", http_status_json(h->rt));
}

int http_admin_start(struct http_admin **out, struct tern_runtime *rt, const char *listen, char *err, size_t err_size)
{
	char host[64] = "127.0.0.1";
	const char *colon = strrchr(listen, ':');
	const char *port_text = colon ? colon + 1 : listen;
	if (colon && (size_t)(colon - listen) >= sizeof(host)) {
		snprintf(err, err_size, "[admin] http_listen: host too long");
		return -EINVAL;
	}
	if (colon && colon > listen)
		snprintf(host, sizeof(host), "%.*s", (int)(colon - listen), listen);
	char *end;
	unsigned long port = strtoul(port_text, &end, 10);
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (*port_text == '\0' || *end != '\0' || port == 0 || port > 65535 ||
	    inet_pton(AF_INET, strcmp(host, "*") == 0 ? "0.0.0.0" : host, &addr.sin_addr) != 1) {
		snprintf(err, err_size, "[admin] http_listen = %s: expected host:port (an IPv4 address) or a port", listen);
		return -EINVAL;
	}
	struct http_admin *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->rt = rt;
	h->is_loopback = (ntohl(addr.sin_addr.s_addr) >> 24) == 127;
	/* A thread per connection: a replay blocks its connection's thread for up to replay_deadline_secs while
	 * the others (a /metrics scrape) go on. */
	h->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
				     0, NULL, NULL, http_handle, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
				     /* SO_REUSEPORT: a --takeover tern listens beside the one it replaces */
				     MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_CONNECTION_LIMIT, HTTP_CONNECTIONS_MAX,
				     MHD_OPTION_CONNECTION_TIMEOUT, HTTP_CONNECTION_TIMEOUT_S, MHD_OPTION_NOTIFY_COMPLETED,
				     http_completed, NULL, MHD_OPTION_END);
	if (!h->daemon) {
		snprintf(err, err_size, "[admin] http_listen = %s: could not listen (in use?)", listen);
		free(h);
		return -EADDRINUSE;
	}
	*out = h;
	return 0;
}

void http_admin_stop(struct http_admin *h)
{
	if (!h)
		return;
	__atomic_store_n(&h->is_stopping, true, __ATOMIC_RELEASE); /* a running replay stops at its next poll */
	MHD_stop_daemon(h->daemon);
	free(h);
}
