/* Reads on replicas (route.h), the decision and its wait: which Query may go elsewhere than the primary,
 * its LSN target, the replica picked for it, the dispatch to that leg, the backlog of what the client sends
 * meanwhile, and transaction_split's bookkeeping of a read-committed transaction on the primary. The other
 * parts of routing: route_setting.c (tern.* settings), route_batch.c (extended-protocol batches),
 * route_guard.c (a replica's answer until it is the client's), route_observer.c (observer_route).
 * Never: moves bytes itself (the relay does, through session_parts.feed) or reads a server's answer. */
#include "route.h"
#include "route_internal.h"

#include "monitor.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Nothing of the client's is owed by a server: tern may answer in its place now. */
bool route_leg_owes_nothing(const struct leg *leg)
{
	return !leg || (leg->pending_ready == 0 && leg->stmts.replies.count == 0 && !leg->is_unsynced &&
			!leg->is_request_pending && sendq_is_empty(&leg->to_server));
}

bool route_is_settled(const struct session *s)
{
	if (s->routing->state == ROUTE_REPLICA_TX) /* between two of its requests; the primary owes only tern's */
		return route_leg_owes_nothing(session_client_leg(s));
	return route_leg_owes_nothing(session_primary(s)) && route_leg_owes_nothing(s->legs[LEG_REPLICA]);
}

/* ---- the decision ---- */

/* A read may go elsewhere than the primary now: transaction pooling, a level other than primary, and
 * nothing in flight or queued on either leg (a read must not pass what the client sent before it). */
bool route_wants(const struct session *s, enum config_consistency level)
{
	if (level == CONFIG_CONSISTENCY_PRIMARY || s->phase != SESSION_READY || s->gate.is_waiting ||
	    session_is_pinned(s) || !s->host->runtime->monitor)
		return false;
	const struct leg *p = session_primary(s), *r = s->legs[LEG_REPLICA];
	if (r && (r->conn || r->is_request_pending || !sendq_is_empty(&r->to_server)))
		return false;
	if (!p->conn)
		return !p->is_request_pending && route_is_settled(s);
	/* Only the write-LSN probe is owed: the read waits for its answer, its target (route_try). */
	return p->is_probe_answering && p->pending_ready == p->hidden_ready && p->stmts.replies.count == 0 &&
	       !p->is_unsynced && sendq_is_empty(&p->to_server);
}

/* The Query (body as sent) becomes the held message, header included. */
static int route_hold(struct session *s, const uint8_t *body, uint32_t len)
{
	uint8_t header[PROTO_HEADER_LEN] = {PROTO_FE_QUERY};
	proto_write_u32(header + 1, len + 4);
	s->routing->held.len = 0;
	return base_bytes_append(&s->routing->held, header, sizeof(header)) < 0 ? -ENOMEM
									: base_bytes_append(&s->routing->held, body, len);
}

/* The read's target: strict, a primary LSN probed after now; session, the client's last write's
 * (unless a write ran that no probe covers: its probe failed, or it ran at another level; then
 * strict's). Not while the write's probe is still to answer (route_try sets it then). */
static void route_set_target(struct session *s)
{
	struct session_route *route = s->routing;
	if (route->is_awaiting_probe)
		return;
	if (route->level == CONFIG_CONSISTENCY_STRICT ||
	    (route->level == CONFIG_CONSISTENCY_SESSION && route->is_write_unprobed))
		route->probe_ticket = monitor_probe_request(s->host->runtime->monitor);
	else if (route->level == CONFIG_CONSISTENCY_SESSION)
		route->target_lsn = route->write_lsn;
}

void route_classify(struct session *s, const struct tern_config *cfg, const char *sql, struct classify_result *r)
{
	if (!s->host->classify_cache)
		s->host->classify_cache = calloc(1, sizeof(*s->host->classify_cache));
	if (s->host->classify_cache)
		classify_cached(s->host->classify_cache, cfg, sql, cfg->read_functions, r);
	else
		classify_query(sql, cfg->read_functions, r);
}

/* The held read (a Query, or a batch) starts its wait for a replica at `level`. */
void route_read_begins(struct session *s, const struct tern_config *cfg, enum config_consistency level)
{
	struct session_route *route = s->routing;
	route->state = ROUTE_WAITING;
	route->level = level;
	route->is_waited = false;
	route->target_lsn = 0;
	route->wal_lsn = 0;
	route->probe_ticket = 0;
	route->arrived_ns = s->client_active_ns;
	route->deadline_ns = route->arrived_ns + (uint64_t)cfg->wait_timeout_ms * BASE_NS_PER_MS;
	route->is_awaiting_probe = level == CONFIG_CONSISTENCY_SESSION && session_primary(s)->is_probe_answering;
	route_set_target(s);
}

/* A Query in a read-only transaction on a replica: one request at a time (the scan stops behind it, so
 * nothing the client sent after a COMMIT reaches the replica); a text of several statements that is not
 * all reads is refused (one of them could end the transaction, and the rest must not run on the replica). */
static enum route_query route_tx_query(struct session *s, const struct tern_config *cfg, const char *sql)
{
	struct classify_result r;
	if (!classify_fast_path(sql, &r))
		route_classify(s, cfg, sql, &r);
	if (r.statement_count > 1 && r.kind != CLASSIFY_READ) {
		session_send_error(s, "ERROR", "0A000",
				   "tern runs this READ ONLY transaction on a replica: send its statements other than "
				   "reads one per query",
				   NULL);
		route_send_ready(s);
		return ROUTE_QUERY_REFUSED;
	}
	return ROUTE_QUERY_ADMIT_LAST;
}

void route_tx_request_sent(struct session *s)
{
	TERN_ASSERT(s->routing->state == ROUTE_REPLICA_TX);
	s->routing->state = ROUTE_REPLICA_TX_BUSY;
}

/* Queues tern's own Query behind what leg holds; one more ReadyForQuery owed. 0 or -ENOMEM. */
static int route_push_query(struct leg *leg, const char *sql)
{
	uint8_t msg[256];
	size_t n = proto_build_query(msg, sizeof(msg), sql);
	int rc = n ? sendq_push_copy(&leg->to_server, msg, (uint32_t)n) : -ENOMEM;
	if (rc == 0)
		leg->pending_ready++;
	return rc;
}

/* The write-LSN probe (route.h). */
int route_push_probe(struct session *s, struct leg *leg, enum route_probe kind)
{
	TERN_ASSERT(kind != ROUTE_PROBE_NONE);
	if (leg->probe_behind > 0 || leg->is_probe_answering)
		return 0; /* one at a time: a write stays unprobed (the release probes it), an isolation unknown */
	uint32_t ahead = leg->pending_ready - leg->hidden_ready; /* the client's replies owed before it */
	int rc = route_push_query(leg, kind == ROUTE_PROBE_LSN ? MONITOR_INSERT_LSN_SQL : "SHOW transaction_isolation");
	if (rc < 0)
		return rc;
	leg->route->probe_kind = (uint8_t)kind;
	if (ahead == 0) {
		leg->hidden_ready++;
		leg->is_probe_answering = true;
	} else {
		leg->probe_behind = ahead;
	}
	if (kind == ROUTE_PROBE_LSN)
		s->routing->is_write_unprobed = false;
	return 0;
}

/* Queues a hidden Query (its answer never reaches the client) behind what leg holds. 0 or -ENOMEM. */
int route_push_hidden(struct leg *leg, const char *sql)
{
	TERN_ASSERT(leg->pending_ready == leg->hidden_ready); /* hidden answers come first */
	int rc = route_push_query(leg, sql);
	if (rc < 0)
		return rc;
	leg->hidden_ready++;
	return 0;
}

/* SET TRANSACTION READ ONLY as the first statement after a plain BEGIN on the primary: the transaction,
 * empty so far (no snapshot yet), may move to a replica (not a serializable one: a standby refuses it). */
static bool route_begin_may_move(struct session *s, const struct tern_config *cfg, const char *sql)
{
	const struct leg *primary = session_primary(s), *replica = s->legs[LEG_REPLICA];
	struct classify_result r;
	s->routing->is_begin_alone = false;
	if (!primary->conn || primary->tx_status != 'T' || !route_leg_owes_nothing(primary) || (replica && replica->conn) ||
	    s->gate.is_waiting || session_is_pinned(s) || !s->host->runtime->monitor)
		return false;
	if (!classify_fast_path(sql, &r))
		route_classify(s, cfg, sql, &r);
	return r.kind == CLASSIFY_SET_TRANSACTION && r.is_read_only && r.statement_count == 1 &&
	       r.isolation != CLASSIFY_SERIALIZABLE;
}

/* It moves: a hidden ROLLBACK ends the primary's (its connection goes back), and the held SET waits for
 * a replica as a BEGIN READ ONLY would, behind a hidden BEGIN there (route_dispatch). 0 or -ENOMEM. */
static int route_begin_move(struct session *s)
{
	struct leg *primary = session_primary(s);
	int rc = route_push_hidden(primary, "ROLLBACK");
	if (rc < 0)
		return rc;
	session_mark_dirty(s, &primary->to_server);
	leg_resume(primary);
	s->routing->is_batch = false;
	s->routing->is_tx = true;
	s->routing->is_begin_hidden = true;
	return 0;
}

/* ---- transaction_split: reads of a read-committed transaction on the primary ---- */

bool route_split_is_on(const struct session *s)
{
	return route_setting(s, runtime_config(s->host->runtime), ROUTE_SETTING_SPLIT) && s->host->runtime->monitor;
}

/* The primary was seen idle (nothing owed, no transaction): what follows is noted afresh. */
void route_split_reset_if_idle(struct session *s)
{
	const struct leg *p = session_primary(s);
	if (route_leg_owes_nothing(p) && (!p->conn || p->tx_status == 'I')) {
		s->routing->split.tx = (struct split_tx){0};
		s->routing->split.is_followed = true;
	}
}

/* A statement going to the primary while transaction_split is on: noted (after the idle check). */
void route_split_note(struct session *s, const struct classify_result *r)
{
	route_split_reset_if_idle(s);
	split_tx_note(&s->routing->split.tx, r);
}

/* A message routing could not read (too long): it may have written. */
void route_split_note_unread(struct session *s)
{
	route_split_reset_if_idle(s);
	s->routing->split.tx.has_write = true;
}

void route_note_unread_query(struct session *s)
{
	if (route_split_is_on(s))
		route_split_note_unread(s);
	else
		s->routing->split.is_followed = false;
}

/* The split read may go now: the transaction is open on the primary's connection, which owes nothing
 * (the read must not pass what the client sent before it), and the replica leg is free or idle on the
 * transaction's replica. */
static bool route_split_is_ready(const struct session *s)
{
	const struct leg *p = session_primary(s), *r = s->legs[LEG_REPLICA];
	if (s->phase != SESSION_READY || s->gate.is_waiting || session_is_pinned(s) || !route_leg_owes_nothing(p))
		return false;
	if (!r)
		return true;
	if (r->is_request_pending || !sendq_is_empty(&r->to_server))
		return false;
	return !r->conn || (s->routing->split.server && leg_is_idle(r));
}

/* The transaction's replica is let go: its connection goes back (drop: it is closed, its server down). */
static void route_split_unpin(struct session *s, bool drop)
{
	struct route_split *sp = &s->routing->split;
	if (!sp->server)
		return;
	sp->server = NULL;
	struct leg *leg = s->legs[LEG_REPLICA];
	if (!leg || !leg->conn || s->routing->state == ROUTE_ON_REPLICA)
		return;
	if (drop) { /* set aside, not freed: this may run inside that leg's own completion */
		leg_drop(leg);
		(void)session_set_aside_leg(s, LEG_REPLICA);
	} else {
		/* (if it cannot go back now, a later progress lets it go; what it says unasked stays hidden) */
		session_try_release(s, leg);
	}
}

/* The transaction ended (its COMMIT or ROLLBACK answered, or an error ended it): its replica goes. A
 * replica connection nothing keeps and that could not go back when let go goes now if it can. */
void route_split_settle(struct session *s)
{
	const struct leg *p = session_primary(s);
	struct leg *r = s->legs[LEG_REPLICA];
	if (s->routing->split.server && route_leg_owes_nothing(p) && (!p->conn || p->tx_status == 'I'))
		route_split_unpin(s, false);
	else if (!s->routing->split.server && s->routing->state == ROUTE_IDLE && r && r->conn)
		session_try_release(s, r);
}

/* A Query while transaction_split is on: noted, unless it is a read of the transaction that meets the
 * five conditions (split.h), which is taken for a replica at the strict level (ROUTE_QUERY_TAKEN). The
 * transaction's isolation is asked of the server at its first such read (a hidden SHOW
 * transaction_isolation, which takes no snapshot), while the strict probe goes out. */
static enum route_query route_split_query(struct session *s, const struct tern_config *cfg, const uint8_t *body,
					  uint32_t len)
{
	struct route_split *sp = &s->routing->split;
	struct leg *p = session_primary(s);
	struct classify_result r;
	const char *sql = (const char *)body;
	if (!classify_fast_path(sql, &r))
		route_classify(s, cfg, sql, &r);
	if (sp->is_unread) { /* a Parse or Bind too long to read went before it */
		route_split_note_unread(s);
		sp->is_unread = false;
	}
	route_split_reset_if_idle(s);
	if (!sp->is_followed) /* splitting was off for some of the transaction: what it did is not known */
		sp->tx.has_write = true;
	bool is_read = r.kind == CLASSIFY_READ || r.kind == CLASSIFY_WRITE; /* what the conditions are about */
	if (!is_read || !p->conn || p->tx_status != 'T') { /* not a transaction's read (or a failed one's) */
		split_tx_note(&sp->tx, &r);
		return ROUTE_QUERY_ADMIT;
	}
	struct split_tx assumed = sp->tx;
	bool is_polar = p->conn->is_polar; /* its ReadyForQuery says whether the transaction splits */
	assumed.xact = p->route->polar_marker == 'x' ? SPLIT_XACT_SPLITTABLE
		       : p->route->polar_marker == 'w' ? SPLIT_XACT_WAL_PENDING
						: SPLIT_XACT_NONE;
	bool is_isolation_asked = sp->tx.server_isolation == CLASSIFY_ISOLATION_DEFAULT;
	if (is_isolation_asked)
		assumed.server_isolation = CLASSIFY_READ_COMMITTED; /* the rest first: ask only for a read that may go */
	/* Condition 2's exception: a transaction whose own WAL is not flushed ('w') splits once a replica is
	 * seen past the primary's insert LSN probed after the read arrived (it covers the transaction's own
	 * WAL): the probe goes out with the read held, and route_try decides at its answer (the isolation
	 * known already: one probe at a time). */
	bool is_wal_pending = is_polar && assumed.xact == SPLIT_XACT_WAL_PENDING && !is_isolation_asked;
	if (is_wal_pending)
		assumed.xact = SPLIT_XACT_SPLITTABLE;
	enum split_refusal why = split_check(&assumed, &r, true, is_polar);
	if (why != SPLIT_ELIGIBLE) {
		static_assert(SPLIT_REFUSAL_COUNT <= HOST_SPLIT_REFUSALS, "the host counts each refusal");
		s->host->stats.split_refused[why]++;
		split_tx_note(&sp->tx, &r);
		return ROUTE_QUERY_ADMIT;
	}
	if (!route_split_is_ready(s)) {
		s->host->stats.split_pipelined++;
		return ROUTE_QUERY_ADMIT;
	}
	if (route_hold(s, body, len) < 0)
		return ROUTE_QUERY_ADMIT;
	if (is_isolation_asked || is_wal_pending) {
		if (route_push_probe(s, p, is_wal_pending ? ROUTE_PROBE_LSN : ROUTE_PROBE_ISOLATION) < 0) {
			s->routing->held.len = 0;
			return ROUTE_QUERY_ADMIT;
		}
		session_mark_dirty(s, &p->to_server);
		leg_resume(p);
	}
	s->routing->is_batch = s->routing->is_tx = false;
	s->routing->is_split = true;
	s->routing->is_xid_import = is_polar && sp->tx.has_write; /* REPLICA_TXN_SPLIT: a polar replica only */
	route_read_begins(s, cfg, CONFIG_CONSISTENCY_STRICT); /* every commit acknowledged before it arrived */
	s->routing->is_awaiting_isolation = is_isolation_asked;
	s->routing->is_awaiting_wal = is_wal_pending;
	return ROUTE_QUERY_TAKEN;
}

enum route_query route_on_query(struct session *s, const uint8_t *body, uint32_t len, enum route_probe *probe_after)
{
	if (len == 0 || body[len - 1] != '\0')
		return ROUTE_QUERY_ADMIT; /* malformed: the server says so */
	const char *sql = (const char *)body;
	if (route_is_setting(sql)) {
		if (session_client_leg(s)->copy.is_copy_in)
			return ROUTE_QUERY_ADMIT; /* a Query inside COPY FROM STDIN: the server refuses it, as any other */
		if (route_is_settled(s)) {
			route_answer_setting(s, sql);
			return ROUTE_QUERY_ANSWERED;
		}
		const struct leg *replica = s->legs[LEG_REPLICA];
		if (s->routing->state != ROUTE_IDLE || session_primary(s)->is_unsynced || (replica && replica->is_unsynced)) {
			/* Behind extended-protocol messages with no Sync yet (in a read-only transaction on a replica,
			 * the only way a replica transaction is not settled here): their answers come only after a
			 * Sync the client sends behind this, so tern can never answer it in its turn. */
			base_strlcpy(s->end.error.sqlstate, "0A000", sizeof(s->end.error.sqlstate));
			base_strlcpy(s->end.error.message,
				     "SET, SHOW or RESET of tern.* behind extended-protocol messages not yet synced is not "
				     "supported: send a Sync first",
				     sizeof(s->end.error.message));
			session_end_later(s, SESSION_END_PROTOCOL_VIOLATION);
			return ROUTE_QUERY_REFUSED;
		}
		if (route_hold(s, body, len) < 0)
			return ROUTE_QUERY_ADMIT; /* out of memory: the server answers it (as a placeholder) */
		s->routing->state = ROUTE_SETTLING; /* answered once what is owed before it is in */
		return ROUTE_QUERY_TAKEN;
	}
	if (!s->is_transaction_pooling || s->pinned_server)
		return ROUTE_QUERY_ADMIT; /* every query goes to the one server */
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	if (route_is_replica_tx(s))
		return route_tx_query(s, cfg, sql);
	enum config_consistency level = route_level(s, cfg);
	struct classify_result r;
	if (!route_split_is_on(s))
		s->routing->split.is_followed = false; /* a statement it did not note */
	else if (route_split_query(s, cfg, body, len) == ROUTE_QUERY_TAKEN)
		return ROUTE_QUERY_TAKEN;
	if (s->routing->is_begin_alone && level != CONFIG_CONSISTENCY_PRIMARY && route_begin_may_move(s, cfg, sql) &&
	    route_hold(s, body, len) == 0 && route_begin_move(s) == 0) {
		route_read_begins(s, cfg, level);
		return ROUTE_QUERY_TAKEN;
	}
	if (!route_wants(s, level)) {
		/* In a transaction, the session level probes behind its COMMIT (the lexer knows it alone). */
		const struct leg *leg = session_primary(s);
		if (level == CONFIG_CONSISTENCY_SESSION && leg->conn && leg->tx_status != 'I' &&
		    classify_fast_path(sql, &r) && r.kind == CLASSIFY_COMMIT)
			*probe_after = ROUTE_PROBE_LSN;
		return ROUTE_QUERY_ADMIT;
	}
	route_classify(s, cfg, sql, &r);
	bool is_tx = r.kind == CLASSIFY_BEGIN && r.is_read_only && r.statement_count == 1;
	if (r.kind != CLASSIFY_READ && !is_tx) {
		/* Behind a COPY the server reads COPY data, not a query: its write is probed at the release. */
		if (level == CONFIG_CONSISTENCY_SESSION && r.kind == CLASSIFY_WRITE && !r.has_copy && !r.is_parse_error)
			*probe_after = ROUTE_PROBE_LSN;
		s->routing->is_begin_sent = r.kind == CLASSIFY_BEGIN && r.statement_count == 1 &&
					   r.isolation != CLASSIFY_SERIALIZABLE; /* SET TRANSACTION READ ONLY may follow */
		return ROUTE_QUERY_ADMIT;
	}
	if (route_hold(s, body, len) < 0)
		return ROUTE_QUERY_ADMIT;
	s->routing->is_batch = false;
	s->routing->is_tx = is_tx;
	route_read_begins(s, cfg, level);
	return ROUTE_QUERY_TAKEN;
}

/* The replica to serve the read (pick.h) among the standbys that may: up, not the primary, a weight
 * above 0, at the target (or, eventual, within the lag bounds). *any: a standby may serve reads at all
 * (at some LSN). */
static struct pool_server *route_pick(struct session *s, const struct tern_config *cfg, uint64_t now, bool *any,
				      bool is_wait_for)
{
	const struct monitor *m = s->host->runtime->monitor;
	struct tern_runtime *rt = s->host->runtime;
	const struct pool_server *primary = runtime_primary(rt);
	uint32_t count = monitor_server_count(m);
	struct pick_candidate ready[PICK_SERVERS_MAX];
	uint32_t ready_count = 0;
	*any = false;
	if (__atomic_load_n(&monitor_server_at(m, primary->index)->role, __ATOMIC_ACQUIRE) == MONITOR_UNMONITORED)
		return NULL; /* no LSN of the primary to hold a replica to: every read stays there */
	for (uint32_t i = 0; i < count && i < PICK_SERVERS_MAX; i++) {
		const struct monitor_server *ms = monitor_server_at(m, i);
		struct pool_server *server = &rt->pool->servers[i];
		if (__atomic_load_n(&ms->role, __ATOMIC_ACQUIRE) != MONITOR_STANDBY || server == primary ||
		    server->weight == 0 || server == s->routing->excluded ||
		    (s->routing->is_xid_import && !__atomic_load_n(&server->is_polar, __ATOMIC_RELAXED)) ||
		    (s->routing->is_split && s->routing->split.server && server != s->routing->split.server))
			continue; /* (a split read: the transaction's replica, once it has one) */
		if (s->routing->level == CONFIG_CONSISTENCY_EVENTUAL) {
			struct monitor_lag lag = monitor_lag_of(m, i, primary, now);
			if ((cfg->max_replica_lag_bytes && lag.bytes > cfg->max_replica_lag_bytes) ||
			    (cfg->max_replica_lag_ms &&
			     (!lag.is_known || lag.ns > (uint64_t)cfg->max_replica_lag_ms * BASE_NS_PER_MS)))
				continue;
		}
		*any = true;
		if (is_wait_for ? __atomic_load_n(&ms->version, __ATOMIC_RELAXED) < MONITOR_WAIT_FOR_LSN_VERSION
				: __atomic_load_n(&ms->lsn, __ATOMIC_RELAXED) < s->routing->target_lsn)
			continue; /* (not at the target; or, waiting in-band, a server without WAIT FOR LSN) */
		ready[ready_count++] = (struct pick_candidate){
			.server = i, .weight = server->weight, .load = __atomic_load_n(&server->reads_running, __ATOMIC_RELAXED)};
	}
	if (ready_count == 0)
		return NULL;
	return &rt->pool->servers[ready[pick_server(&s->host->pick, ready, ready_count)].server];
}

/* The read running on a replica is over (answered, lost, or its session ended): off its load. */
void route_release_server(struct session *s)
{
	if (!s->routing->server)
		return;
	__atomic_sub_fetch(&s->routing->server->reads_running, 1, __ATOMIC_RELAXED);
	s->routing->server = NULL;
}

void route_unwait(struct session *s)
{
	if (!base_list_is_linked(&s->routing->wait_link))
		return;
	base_list_remove(&s->routing->wait_link);
	__atomic_store_n(&s->host->route_waiting, s->host->route_waiting - 1, __ATOMIC_RELAXED);
}

static void route_observe_wait(struct host_stats *stats, uint64_t waited_ns)
{
	static const uint64_t bounds_us[HOST_ROUTE_WAIT_BUCKETS] = HOST_ROUTE_WAIT_BOUNDS_US;
	uint64_t us = waited_ns / 1000u;
	uint32_t i = 0;
	while (i < HOST_ROUTE_WAIT_BUCKETS && us > bounds_us[i])
		i++;
	stats->route_wait_buckets[i]++;
	stats->route_wait_us_sum += us;
}

/* The routed read, batch or transaction is over: client bytes go to the primary's leg again. */
void route_done(struct session *s)
{
	struct session_route *route = s->routing;
	route->state = ROUTE_IDLE;
	route->held.len = 0;
	s->steer.leg = NULL;
	route->is_batch = route->is_tx = route->is_split = route->is_awaiting_isolation = route->is_xid_import = false;
	route->is_awaiting_wal = false;
	route->is_wait_for_lsn = false;
	route->excluded = NULL;
}

/* The XID-import profile's four settings, hidden, ahead of a split read on a polar replica: the
 * transaction's XIDs as the primary's last ReadyForQuery gave them (none before its first write), the
 * strict mode, the wait's bound, and the LSN to have replayed (tern waited for it already). */
static int route_push_polar_settings(struct session *s, struct leg *leg)
{
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	char sql[4][200];
	snprintf(sql[0], sizeof(sql[0]), "SET polar_xact_split_xids = '%s'", session_primary(s)->route->polar_xids);
	snprintf(sql[1], sizeof(sql[1]), "SET polar_consistency_mode = 'strict'");
	snprintf(sql[2], sizeof(sql[2]), "SET polar_proxy_wait_timeout_ms = %" PRIu32, cfg->wait_timeout_ms);
	snprintf(sql[3], sizeof(sql[3]), "SET polar_xact_split_wait_lsn = '%" PRIu64 "'", s->routing->target_lsn);
	for (size_t i = 0; i < TERN_ARRAY_LEN(sql); i++) {
		int rc = route_push_hidden(leg, sql[i]);
		if (rc < 0)
			return rc;
	}
	leg->route->has_polar_settings = true;
	return 0;
}

/* PostgreSQL 19's in-band wait, hidden, ahead of the read on a replica not known to be at its target
 * yet: the replica waits (holding no snapshot) up to the read's deadline, and says how it ended; any
 * answer but success re-runs the read on the primary (route_hidden_message). */
static int route_push_wait_for_lsn(struct session *s, struct leg *leg)
{
	uint64_t lsn = s->routing->target_lsn, now = base_now_ns();
	uint64_t left_ms = s->routing->deadline_ns > now ? (s->routing->deadline_ns - now + BASE_NS_PER_MS - 1) / BASE_NS_PER_MS : 1;
	char sql[128];
	snprintf(sql, sizeof(sql), "WAIT FOR LSN '%X/%08X' WITH (TIMEOUT '%" PRIu64 "ms', NO_THROW)",
		 (unsigned int)(lsn >> 32), (unsigned int)lsn, left_ms);
	int rc = route_push_hidden(leg, sql);
	if (rc == 0)
		leg->route->is_waiting_for_lsn = true;
	return rc;
}

/* The held read (or, is_read false, a batch routing found not to be one) to leg: the relay queues it
 * there as any message, and the leg asks for a connection. */
void route_dispatch(struct session *s, struct leg *leg, bool is_read)
{
	struct session_route *route = s->routing;
	route_unwait(s);
	if (route->is_waited)
		route_observe_wait(&s->host->stats, base_now_ns() - route->arrived_ns);
	bool is_replica = leg->role == LEG_REPLICA;
	route->state = !is_replica ? ROUTE_IDLE : route->is_tx ? ROUTE_REPLICA_TX_BUSY : ROUTE_ON_REPLICA;
	if (is_replica)
		route->replica_mark = leg->to_client_bytes;
	route->is_read_on_primary = !is_replica && is_read; /* a read writes nothing: no probe after it */
	bool is_begin_moved = route->is_begin_hidden;
	if (is_begin_moved) { /* the transaction the client began, where its SET TRANSACTION goes */
		route->is_begin_hidden = false;
		if (route_push_hidden(leg, "BEGIN") < 0) {
			session_end(s, SESSION_END_OUT_OF_MEMORY);
			return;
		}
	}
	if (is_replica && route->is_wait_for_lsn && route_push_wait_for_lsn(s, leg) < 0) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	if (is_replica && route->is_split && __atomic_load_n(&route->server->is_polar, __ATOMIC_RELAXED) &&
	    route_push_polar_settings(s, leg) < 0) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	/* stmts keeps a batch's replies there, and a transaction's statements go there */
	s->steer.leg = is_replica && (route->is_batch || route->is_tx) ? leg : NULL;
	/* A read's or a batch's answer, or a BEGIN READ ONLY's (not a moved transaction's SET: its BEGIN is
	 * on the primary no more) */
	leg->route->is_reply_guarded = is_replica && !is_begin_moved;
	route->reply_held.len = 0;
	route->is_rerun = false;
	s->parts->feed(s, leg, true, route->held.data, route->held.len);
	route->is_read_on_primary = false;
	if (!is_replica)
		route_done(s);
}

/* The counters of the read being routed: an autocommit read's, or a split read's. */
struct host_route_paths *route_paths(struct session *s)
{
	return s->routing->is_split ? &s->host->stats.split : &s->host->stats.reads;
}

void route_to_primary(struct session *s, uint64_t *counter)
{
	(*counter)++;
	route_dispatch(s, session_primary(s), true);
}

/* The read waits: on the host's list (the monitor's answers and the tick look at it again). */
static void route_wait(struct session *s)
{
	struct session_route *route = s->routing;
	route->is_waited = true;
	if (base_list_is_linked(&route->wait_link))
		return;
	base_list_insert_tail(&s->host->route_waits, &route->wait_link);
	__atomic_store_n(&s->host->route_waiting, s->host->route_waiting + 1, __ATOMIC_RELAXED);
}

/* Condition 2's exception: a polar replica the monitor has seen replay past lsn already. */
static bool route_replica_is_past(const struct session *s, uint64_t lsn)
{
	const struct tern_runtime *rt = s->host->runtime;
	const struct monitor *m = rt->monitor;
	for (uint32_t i = 0; i < monitor_server_count(m) && i < rt->pool->server_count; i++) {
		const struct monitor_server *ms = monitor_server_at(m, i);
		const struct pool_server *server = &rt->pool->servers[i];
		if (__atomic_load_n(&ms->role, __ATOMIC_ACQUIRE) == MONITOR_STANDBY && server->weight > 0 &&
		    __atomic_load_n(&server->is_polar, __ATOMIC_RELAXED) && __atomic_load_n(&ms->lsn, __ATOMIC_RELAXED) >= lsn)
			return true;
	}
	return false;
}

static bool route_is_standby(const struct monitor *m, const struct tern_runtime *rt, const struct pool_server *server)
{
	const struct monitor_server *ms = monitor_server_at(m, (uint32_t)(server - rt->pool->servers));
	return __atomic_load_n(&ms->role, __ATOMIC_ACQUIRE) == MONITOR_STANDBY;
}

/* The waiting read looks again: true when it went somewhere (the primary, or a replica). */
bool route_try(struct session *s, uint64_t now)
{
	struct session_route *route = s->routing;
	struct host *host = s->host;
	struct monitor *m = host->runtime->monitor;
	const struct tern_config *cfg = runtime_config(host->runtime);
	/* A split read's probe on the transaction's own connection (its isolation, or a 'w' transaction's
	 * insert LSN): its answer wakes it (route_on_progress), the tick its deadline. */
	if ((route->is_awaiting_isolation || route->is_awaiting_wal) && session_primary(s)->is_probe_answering) {
		if (now >= route->deadline_ns) {
			route_to_primary(s, &route_paths(s)->timeout);
			return true;
		}
		route_wait(s);
		return false;
	}
	if (route->is_awaiting_isolation) {
		route->is_awaiting_isolation = false;
		if (!split_is_read_committed(&route->split.tx)) {
			route_to_primary(s, &host->stats.split_refused[SPLIT_NOT_READ_COMMITTED]);
			return true;
		}
	}
	if (route->is_awaiting_wal) { /* a 'w' transaction's read: a replica past its own WAL, or the primary */
		route->is_awaiting_wal = false;
		if (route->is_write_unprobed || !route_replica_is_past(s, route->write_lsn)) {
			route_to_primary(s, &host->stats.split_refused[SPLIT_NOT_SPLITTABLE]);
			return true;
		}
		route->wal_lsn = route->write_lsn; /* the read's target is at least that (below) */
	}
	if (route->is_awaiting_probe) {
		if (session_primary(s)->is_probe_answering) { /* the write's target is still to come */
			if (cfg->wait_timeout_ms == 0 || now >= route->deadline_ns) {
				route_to_primary(s, &route_paths(s)->timeout);
				return true;
			}
			route_wait(s); /* its answer wakes it (route_on_progress), the tick its deadline */
			return false;
		}
		route->is_awaiting_probe = false;
		route_set_target(s);
	}
	if (route->probe_ticket) {
		uint64_t lsn;
		if (monitor_probe_answer(m, route->probe_ticket, &lsn)) {
			route->probe_ticket = 0;
			route->target_lsn = lsn != UINT64_MAX ? TERN_MAX(lsn, route->wal_lsn) : lsn;
			if (route->level == CONFIG_CONSISTENCY_SESSION && lsn != UINT64_MAX) {
				route->write_lsn = TERN_MAX(route->write_lsn, lsn); /* covers every write before it */
				route->is_write_unprobed = false;
			}
		}
	}
	if (route->target_lsn == UINT64_MAX) { /* the primary did not answer the probe */
		route_to_primary(s, &route_paths(s)->no_replica);
		return true;
	}
	if (route->is_split && route->split.server && !route_is_standby(m, host->runtime, route->split.server))
		route_split_unpin(s, true); /* the transaction's replica is down (or promoted): another one */
	bool any = false;
	route->is_wait_for_lsn = false;
	struct pool_server *server = route->probe_ticket ? NULL : route_pick(s, cfg, now, &any, false);
	if (!server && !route->probe_ticket && route->target_lsn && !route->is_tx && route->level != CONFIG_CONSISTENCY_EVENTUAL &&
	    cfg->wait_timeout_ms > 0 && now < route->deadline_ns) {
		bool also = false; /* a replica with WAIT FOR LSN waits for its target itself, the read behind it */
		server = route_pick(s, cfg, now, &also, true);
		route->is_wait_for_lsn = server != NULL;
		route->is_waited |= route->is_wait_for_lsn; /* (counted as a read served after its wait) */
	}
	if (server) {
		struct leg *leg = session_replica_leg(s);
		if (!leg) {
			route_to_primary(s, &route_paths(s)->no_replica);
			return true;
		}
		route->server = server;
		if (route->is_split)
			route->split.server = server; /* the transaction keeps it */
		__atomic_add_fetch(&server->reads_running, 1, __ATOMIC_RELAXED);
		struct host_route_paths *paths = route_paths(s);
		(*(route->excluded ? &paths->lost_replica : route->is_waited ? &paths->replica_wait : &paths->replica))++;
		route_dispatch(s, leg, true);
		return true;
	}
	if (!route->probe_ticket && (!any || route->level == CONFIG_CONSISTENCY_EVENTUAL)) {
		route_to_primary(s, route->excluded ? &route_paths(s)->lost : &route_paths(s)->no_replica);
		return true;
	}
	if (cfg->wait_timeout_ms == 0 || now >= route->deadline_ns) {
		route_to_primary(s, &route_paths(s)->timeout);
		return true;
	}
	route_wait(s);
	if (!route->probe_ticket)
		monitor_want_replay(m, route->target_lsn, route->deadline_ns);
	return false;
}
