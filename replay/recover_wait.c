/* Transaction Replay's wait for a primary (recover.h): a session whose primary is gone waits, within one
 * deadline for the whole recovery, until the monitor vouches for one; fencing cuts what is left on a
 * server that is no longer the primary. */
#include "recover.h"

#include "routing/monitor.h"
#include "core/observer.h"

#include <inttypes.h>
#include <stdio.h>

/* ---- the wait for a primary ---- */

/* How often waiting sessions ask the monitor for a round (the worker's tick checks them as often). */
#define RECOVER_ASK_GAP_NS (100u * BASE_NS_PER_MS)

/* A primary the monitor vouches for: another server it says is the primary, or the lost one answering as
 * the primary after the loss. */
static bool recover_primary_is_there(const struct session *s)
{
	struct tern_runtime *rt = s->host->runtime;
	struct pool_server *primary = runtime_primary(rt);
	if (!rt->monitor)
		return true;
	const struct monitor_server *ms = monitor_server_at(rt->monitor, primary->index);
	uint64_t checked_ns = __atomic_load_n(&ms->checked_ns, __ATOMIC_ACQUIRE);
	uint32_t role = __atomic_load_n(&ms->role, __ATOMIC_ACQUIRE);
	if (role == MONITOR_UNMONITORED)
		return true; /* the monitor cannot log in there: as without a monitor, the pool's login tells */
	if (role != MONITOR_PRIMARY)
		return false;
	return primary != s->replay->lost_server || checked_ns > s->replay->lost_ns;
}

/* What the monitor last said of a server. */
static uint32_t recover_role_of(const struct tern_runtime *rt, const struct pool_server *server)
{
	if (!rt->monitor)
		return MONITOR_PRIMARY;
	return __atomic_load_n(&monitor_server_at(rt->monitor, server->index)->role, __ATOMIC_ACQUIRE);
}

/* What the monitor last said of the server writes go to. */
static uint32_t recover_primary_role(const struct tern_runtime *rt) { return recover_role_of(rt, runtime_primary(rt)); }

/* The session's primary is gone (its connection was lost, or the monitor says it is down): it waits. */
void recover_lose(struct session *s, struct pool_server *server, uint64_t now_ns)
{
	if (!s->replay->lost_server) {
		s->replay->lost_server = server;
		s->replay->lost_ns = now_ns;
	}
}

/* A request for the primary waits while the server writes go to has `role`: any but a primary with
 * Transaction Replay on; a fenced one without it too (no answer ends that wait: its deadline goes). */
static bool recover_must_wait(const struct session *s, uint32_t role)
{
	return role != MONITOR_PRIMARY && role != MONITOR_UNMONITORED &&
	       ((s->observers_on & (1u << OBSERVER_REPLAY)) || role == MONITOR_FENCED);
}

static void recover_unwait(struct session *s)
{
	if (!s->replay->is_waiting)
		return;
	if (!(s->observers_on & (1u << OBSERVER_REPLAY)))
		s->replay->deadline_ns = 0;
	s->replay->is_waiting = false;
	base_list_remove(&s->replay->wait_link);
	__atomic_sub_fetch(&s->host->recover_waiting, 1, __ATOMIC_RELAXED);
}

bool recover_awaits_primary(struct session *s, struct leg *leg)
{
	struct session_replay *r = s->replay;
	TERN_ASSERT(leg == session_primary(s));
	/* A client still logging in never waits here (recover_check_waits serves sessions past their welcome):
	 * its login goes to the pool, which waits for a server that is down (query_wait_timeout) and retries
	 * the login (server_login_retry). */
	if (s->phase != SESSION_READY)
		return false;
	if (!r->lost_server) {
		/* The monitor says the server writes go to is no primary (down, or fenced): wait here for the
		 * next (write_timeout_secs), not in the pool for a login that cannot work (query_wait_timeout). A
		 * fenced one never gets the request, under tr_mode none too. */
		if (s->pinned_server || !recover_must_wait(s, recover_primary_role(s->host->runtime)))
			return false;
		recover_lose(s, runtime_primary(s->host->runtime), base_now_ns());
	}
	/* The one deadline runs from when the session first needs a primary after the loss until an answer
	 * comes from one (observer_replay clears it): the wait for a primary, the pool's connect and login, the
	 * restore, the replay and the re-execution all fit in it (recover_check_deadline), and a refused login
	 * does not restart it. Without Transaction Replay (a fenced primary) it bounds the wait alone. */
	uint64_t deadline_ns =
		base_now_ns() + (uint64_t)runtime_config(s->host->runtime)->write_timeout_secs * BASE_NS_PER_SEC;
	if (r->deadline_ns == 0 && (s->observers_on & (1u << OBSERVER_REPLAY)))
		r->deadline_ns = deadline_ns;
	if (recover_primary_is_there(s)) {
		recover_unwait(s);
		r->lost_server = NULL;
		return false;
	}
	if (!r->is_waiting) {
		if (r->deadline_ns == 0)
			r->deadline_ns = deadline_ns;
		r->is_waiting = true;
		base_list_insert_tail(&s->host->recover_waits, &r->wait_link);
		__atomic_add_fetch(&s->host->recover_waiting, 1, __ATOMIC_RELAXED);
		if (s->host->runtime->monitor)
			monitor_round_request(s->host->runtime->monitor);
	}
	session_hold_parked_bytes(s); /* a waiting client holds no receive buffers */
	return true;
}

void recover_check_waits(struct host *host, uint64_t now_ns)
{
	/* While sessions wait, the monitor looks every RECOVER_ASK_GAP_NS, whatever monitor_interval_ms says. */
	if (host->runtime->monitor && now_ns >= host->recover_asked_ns + RECOVER_ASK_GAP_NS) {
		host->recover_asked_ns = now_ns;
		monitor_round_request(host->runtime->monitor);
	}
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &host->recover_waits)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session_replay, wait_link)->session;
		TERN_ASSERT(s->replay->is_waiting && s->phase == SESSION_READY);
		if (recover_primary_is_there(s)) {
			recover_unwait(s);
			s->replay->lost_server = NULL;
			struct leg *leg = session_primary(s);
			if (!leg->conn && !leg->is_request_pending &&
			    (!sendq_is_empty(&leg->to_server) || s->replay->is_replaying || !s->is_transaction_pooling))
				session_acquire(s, leg);
		} else if (now_ns >= s->replay->deadline_ns) {
			recover_unwait(s);
			host->stats.tr_replay_failures++;
			char message[160];
			snprintf(message, sizeof(message),
				 "no primary answered within write_timeout_secs (%" PRIu32
				 " s): the primary was lost, or is fenced (see the log)",
				 runtime_config(host->runtime)->write_timeout_secs);
			session_end_with_error(s, SESSION_END_SERVER_LOST, "08006", message);
		}
	}
}

bool recover_check_deadline(struct session *s, uint64_t now_ns)
{
	const struct session_replay *r = s->replay;
	if (r->deadline_ns == 0 || r->is_waiting || now_ns < r->deadline_ns || s->phase != SESSION_READY ||
	    !(s->observers_on & (1u << OBSERVER_REPLAY)))
		return false; /* (one waiting for a primary is recover_check_waits'; observer_replay clears it) */
	s->host->stats.tr_replay_failures++;
	char message[200];
	snprintf(message, sizeof(message),
		 "the primary was lost and the session's recovery (connect, login, restore, replay) did not finish "
		 "within write_timeout_secs (%" PRIu32 " s)",
		 runtime_config(s->host->runtime)->write_timeout_secs);
	session_end_with_error(s, SESSION_END_SERVER_LOST, "08006", message);
	return true;
}

void recover_repoint_parked(struct host *host)
{
	struct tern_runtime *rt = host->runtime;
	struct pool_server *primary = runtime_primary(rt);
	bool is_primary_change = primary != host->recover_primary;
	uint32_t role = recover_primary_role(rt);
	__atomic_store_n(&host->recover_primary, primary, __ATOMIC_RELAXED);
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &host->parked)
	{
		/* A request parked on the primary of before (never sent) asks the primary of the moment; one
		 * parked on a primary the monitor says is down waits for the next (recover_awaits_primary). */
		struct leg *leg = TERN_CONTAINER_OF(node, struct leg, parked_link);
		struct session *s = leg->session;
		if (leg->role != LEG_PRIMARY || s->pinned_server || s->phase != SESSION_READY ||
		    (leg->request.server == primary && !recover_must_wait(s, role)))
			continue;
		if (!pool_request_cancel(rt->pool, &leg->request))
			continue; /* granted meanwhile: the mailbox has it */
		leg->is_request_pending = false;
		base_list_remove(&leg->parked_link);
		session_acquire(s, leg);
	}
	bool is_any_fenced = false; /* (a [databases] server= pin's own server, fenced with no primary change) */
	for (uint32_t i = 0; rt->monitor && i < rt->pool->server_count && !is_any_fenced; i++)
		is_any_fenced = recover_role_of(rt, &rt->pool->servers[i]) == MONITOR_FENCED;
	if (!is_primary_change && !is_any_fenced)
		return;
	/* Fencing: a connection still open on a server that is no longer the primary (a promote left it
	 * behind, a lower timeline, Patroni named another leader, it went read-only) writes nothing more
	 * there; its session decides as for a loss (a session-pooled one's connection is its own, so it is
	 * cut idle too; a [databases] server= pinned one, when its own server is fenced: it ends). */
	base_list_for_each_safe(node, tmp, &host->sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		struct leg *leg = session_primary(s);
		if (s->phase != SESSION_READY || !leg || !leg->conn || leg->is_dropping)
			continue;
		bool is_fenced = s->pinned_server ? recover_role_of(rt, leg->conn->server) == MONITOR_FENCED
						  : leg->conn->server != primary || role == MONITOR_FENCED;
		if (is_fenced) {
			TERN_WARN("client %s/%s: server %s is no longer a primary to write to: its connection is dropped", s->user,
				  s->database, leg->conn->server->name);
			leg_fail(leg, LEG_FAULT_CLOSED);
		}
	}
}

void recover_end(struct session *s) { recover_unwait(s); }

void recover_host_pass(struct host *host)
{
	if (runtime_primary(host->runtime) != host->recover_primary)
		recover_repoint_parked(host); /* requests parked on the primary of before ask again */
	if (host->recover_waiting > 0 && monitor_moved(host->runtime->monitor, &host->recover_generation))
		recover_check_waits(host, base_now_ns());
}

void recover_host_tick(struct host *host, uint64_t now_ns)
{
	recover_repoint_parked(host); /* requests parked on a primary the monitor says is down */
	if (host->recover_waiting > 0)
		recover_check_waits(host, now_ns); /* write_timeout_secs: they end */
}

bool recover_is_waiting(const struct session *s) { return s->replay->is_waiting; }
