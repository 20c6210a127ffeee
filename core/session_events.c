/* What happens to a session from outside, and what it means: its creation at accept (the handlers of its
 * client socket and the ops of its legs set), its client socket's completions (bytes received, to the
 * phase's handler; a send done), its legs' (leg_ops: bytes, progress, starvation, and a lost connection
 * with the one decision about it), the pool's answer to a parked request (granted, refused, timed out),
 * the legs made with those ops (the replica's, one set aside, one replaced), and its freeing. Owns the
 * handlers and the ops; never queues bytes, paces the client, asks for a server connection or ends a
 * session itself: it asks session.c, which never calls here. */
#include "session.h"

#include "auth_query.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static void session_client_recv_done(struct ring_op *op, int res, uint32_t flags);
static void session_client_sent(struct ring_op *op, int res, uint32_t flags);
static const struct leg_ops session_leg_ops;

static struct leg *session_leg_create(struct session *s, enum leg_role role)
{
	struct leg *leg = leg_create(s, s->host, &session_leg_ops, role, s->parts->leg_state_bytes);
	if (!leg)
		return NULL;
	leg->downstream = &s->to_client;
	if (s->parts->place_leg)
		s->parts->place_leg(leg, (uint8_t *)leg + LEG_STATE_AT);
	return leg;
}

struct session *session_create(struct host *host, int client_fd, uint32_t listener)
{
	TERN_ASSERT(listener < TERN_ARRAY_LEN(host->runtime->identity_hashes));
	struct tern_runtime *rt = host->runtime;
	struct session *s = calloc(1, SESSION_STATE_AT + rt->parts->session_state_bytes);
	if (!s)
		return NULL;
	s->parts = rt->parts;
	if (s->parts->place)
		s->parts->place(s, (uint8_t *)s + SESSION_STATE_AT);
	s->login = calloc(1, sizeof(*s->login));
	if (!s->login) {
		free(s);
		return NULL;
	}
	s->login->identity_hash = rt->identity_hashes[listener];
	s->host = host;
	session_set_phase(s, SESSION_STARTUP);
	s->is_transaction_pooling = runtime_config(rt)->pool_mode == CONFIG_POOL_TRANSACTION;
	s->client_fd = client_fd;
	s->client_recv.handler = session_client_recv_done;
	sendq_init(&s->to_client, session_client_sent);
	s->to_client.fd = client_fd;
	proto_stream_init(&s->client_stream);
	base_list_init(&s->starve.link);
	base_list_init(&s->end.link);
	base_list_init(&s->legs_draining);
	s->legs[LEG_PRIMARY] = session_leg_create(s, LEG_PRIMARY);
	if (!s->legs[LEG_PRIMARY]) {
		free(s->login);
		free(s);
		return NULL;
	}
	s->stats.started_ns = base_now_ns();
	s->client_active_ns = s->legs[LEG_PRIMARY]->ready_ns = s->stats.started_ns;
	host->session_serial = (host->session_serial + 1) & 0xffffffu;
	s->key.pid = (host->index << 24) | host->session_serial;
	if (getrandom(s->key.secret, sizeof(s->key.secret), 0) != sizeof(s->key.secret)) {
		uint64_t now = base_now_ns(); /* no entropy yet: a guessable key is better than no session */
		memcpy(s->key.secret, &now, sizeof(now));
	}
	s->key.len = SESSION_CANCEL_KEY_LEN_3_0; /* a client that negotiates 3.2 gets the whole key */
	s->gate.is_drain_spared = __atomic_load_n(&rt->draining, __ATOMIC_RELAXED); /* accepted while draining */
	uint32_t clients = __atomic_add_fetch(&rt->client_count, 1, __ATOMIC_RELAXED);
	s->is_over_client_limit = clients > runtime_config(rt)->max_client_conn;
	base_list_insert_tail(&host->sessions, &s->link);
	__atomic_add_fetch(&host->session_count, 1, __ATOMIC_RELAXED); /* (other workers weigh it) */
	ring_recv_multishot(&host->ring, &s->client_recv, client_fd, HOST_BUFFERS_CLIENT);
	return s;
}

/* ---- the client socket: what its completions mean ---- */

void session_on_client_bytes(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	if (s->phase == SESSION_READY)
		s->parts->on_client_chunk(s, buffer_id, data, len);
	else if (s->phase == SESSION_ADMIN)
		s->host->runtime->console->on_bytes(s, data, len);
	else if (s->phase != SESSION_CLOSING)
		s->parts->on_login_bytes(s, data, len);
}

static void session_client_recv_done(struct ring_op *op, int res, uint32_t flags)
{
	struct session *s = TERN_CONTAINER_OF(op, struct session, client_recv);
	struct ring *ring = &s->host->ring;
	if (res > 0) {
		TERN_ASSERT(ring_completion_has_buffer(flags));
		uint16_t bid = ring_completion_buffer_id(flags);
		const uint8_t *data = ring_buffer_data(ring, bid);
		if (s->transport)
			s->transport->on_received(s, data, (uint32_t)res);
		else
			session_on_client_bytes(s, bid, data, (uint32_t)res);
		ring_buffer_unref(ring, bid);
	} else if (res == 0) {
		s->client_eof = true;
		s->end.is_client_draining = false;
		session_end(s, SESSION_END_CLIENT_CLOSED);
	} else if (res == -ENOBUFS) {
		session_starve(s, HOST_BUFFERS_CLIENT);
	} else if (res != -ECANCELED) {
		s->client_eof = true;
		s->end.is_client_draining = false;
		session_end(s, SESSION_END_CLIENT_IO_ERROR);
	}
	if (!op->is_armed)
		session_client_recv_resume(s);
}

static void session_client_sent(struct ring_op *op, int res, uint32_t flags)
{
	(void)flags;
	struct sendq *q = TERN_CONTAINER_OF(op, struct sendq, op);
	struct session *s = TERN_CONTAINER_OF(q, struct session, to_client);
	bool recalled = s->is_client_send_recalled;
	s->is_client_send_recalled = false;
	if (res <= 0 && !(res == -ECANCELED && recalled)) { /* a stream socket that takes nothing is gone */
		sendq_clear(q, &s->host->ring);
		s->client_eof = true;
		session_end(s, SESSION_END_CLIENT_IO_ERROR);
		return;
	}
	if (res > 0)
		sendq_sent(q, &s->host->ring, (uint32_t)res);
	if (recalled)
		session_release_client_buffers(s);
	if (!sendq_is_empty(q))
		session_mark_dirty(s, q);
	session_client_drained(s);
}

/* ---- the legs: what their completions mean for the session ---- */

static int session_leg_on_bytes(struct leg *leg, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	return leg->session->parts->on_server_bytes(leg, buffer_id, data, len);
}

static void session_leg_on_progress(struct leg *leg)
{
	struct session *s = leg->session;
	session_assert_invariants(s);
	if (s->client_recv_paused)
		session_client_pace(s);
	if (s->phase == SESSION_CLOSING || leg->is_dropping)
		session_settle(s, leg);
	else
		session_try_release(s, leg);
	const struct leg *replica = s->legs[LEG_REPLICA];
	if ((s->parts->route.is_busy(s) || (replica && replica->conn)) && s->phase == SESSION_READY)
		s->parts->route.leg_progress(s, leg); /* a read's answer is in (or a transaction ended): what waits goes on */
	/* SIGTERM: a client goes at the ReadyForQuery that leaves it idle, so one that starts its next
	 * transaction right after each COMMIT is let go between two, not cut at shutdown_timeout. */
	if (s->phase == SESSION_READY && __atomic_load_n(&s->host->runtime->draining, __ATOMIC_RELAXED) &&
	    session_is_drainable(s))
		session_end_later(s, SESSION_END_SHUTDOWN);
	session_assert_invariants(s);
}

static void session_leg_on_starved(struct leg *leg) { session_starve(leg->session, HOST_BUFFERS_SERVER); }

struct session_lost_decision session_decide_lost(struct session *s, struct leg *leg, enum leg_fault fault)
{
	TERN_ASSERT(fault != LEG_FAULT_NONE);
	if (s->parts->replay.lost)
		return s->parts->replay.lost(s, leg, fault);
	return (struct session_lost_decision){
		.action = SESSION_LOST_END,
		.reason = fault == LEG_FAULT_REFUSED ? SESSION_END_SERVER_REFUSED : SESSION_END_SERVER_LOST};
}

/* Carries out the decision about leg's lost or refused connection. */
static void session_lost(struct session *s, struct leg *leg, enum leg_fault fault)
{
	struct session_lost_decision decision = session_decide_lost(s, leg, fault);
	if (decision.action == SESSION_LOST_RECOVER)
		return; /* Transaction Replay's recovery is under way */
	TERN_ASSERT(decision.action == SESSION_LOST_END);
	if (fault == LEG_FAULT_REFUSED)
		s->end.error = leg->request.error; /* the server's own refusal, or why it could not be reached */
	if (decision.sqlstate)
		session_end_with_error(s, decision.reason, decision.sqlstate, decision.message);
	else
		session_end(s, decision.reason);
}

static void session_leg_on_lost(struct leg *leg, enum leg_fault fault)
{
	struct session *s = leg->session;
	session_assert_invariants(s);
	if (s->parts->route.leg_lost(s, leg))
		return; /* a read that reached no client byte runs again on the primary */
	session_lost(s, leg, fault);
}

static const struct leg_ops session_leg_ops = {
	.on_bytes = session_leg_on_bytes,
	.on_progress = session_leg_on_progress,
	.on_starved = session_leg_on_starved,
	.on_lost = session_leg_on_lost,
};

/* ---- the pool's answer to a parked request ---- */

void session_on_request_done(struct leg *leg)
{
	struct session *s = leg->session;
	TERN_ASSERT(leg->is_request_pending);
	leg->is_request_pending = false;
	base_list_remove(&leg->parked_link);
	struct pool_conn *conn = leg->request.conn;
	if (s->phase == SESSION_CLOSING) {
		if (conn)
			pool_checkin(s->host->runtime->pool, conn, base_now_ns());
		return;
	}
	if (conn) {
		s->parts->attach(s, leg, conn);
		return;
	}
	if (s->parts->route.leg_lost(s, leg))
		return; /* a replica refused: the primary serves the read */
	session_lost(s, leg, LEG_FAULT_REFUSED);
}

void session_on_wait_timeout(struct leg *leg)
{
	struct session *s = leg->session;
	if (!pool_request_cancel(s->host->runtime->pool, &leg->request))
		return; /* granted meanwhile: the mailbox has it */
	leg->is_request_pending = false;
	base_list_remove(&leg->parked_link);
	if (s->parts->route.leg_lost(s, leg))
		return; /* no replica connection in time: the primary serves the read */
	session_end(s, SESSION_END_WAIT_TIMEOUT);
}

/* ---- the legs made with these ops ---- */

struct leg *session_replica_leg(struct session *s)
{
	if (!s->legs[LEG_REPLICA])
		s->legs[LEG_REPLICA] = session_leg_create(s, LEG_REPLICA);
	return s->legs[LEG_REPLICA];
}

/* Frees the legs set aside whose dropped connections have drained (a completion on a dropping leg
 * discards its connection as soon as nothing is in flight: leg_fail, leg_reap). */
static void session_free_drained(struct session *s)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &s->legs_draining)
	{
		struct leg *leg = TERN_CONTAINER_OF(node, struct leg, link);
		if (leg_is_reapable(leg))
			leg_destroy(leg);
	}
}

struct leg *session_set_aside_leg(struct session *s, enum leg_role role)
{
	struct leg *old = s->legs[role];
	struct leg *leg = session_leg_create(s, role);
	if (!leg)
		return NULL;
	session_free_drained(s);
	TERN_ASSERT(old && !old->is_request_pending);
	old->is_starved = false; /* a leg set aside reads nothing more: no receive waits for buffers */
	base_list_insert_tail(&s->legs_draining, &old->link);
	s->legs[role] = leg;
	return leg;
}

struct leg *session_replace_leg(struct session *s, enum leg_role role)
{
	TERN_ASSERT(role < LEG_ROLE_COUNT);
	struct leg *old = s->legs[role];
	struct leg *leg = session_leg_create(s, role);
	if (!leg)
		return NULL;
	session_free_drained(s);
	if (old) {
		TERN_ASSERT(!old->is_request_pending);
		old->is_starved = false; /* (as in session_set_aside_leg) */
		leg_drop(old);
		(void)leg_reap(old);
		if (leg_is_reapable(old))
			leg_destroy(old);
		else
			base_list_insert_tail(&s->legs_draining, &old->link);
	}
	s->legs[role] = leg;
	session_assert_invariants(s);
	return leg;
}

void session_destroy(struct session *s)
{
	TERN_ASSERT(session_is_reapable(s));
	struct host *host = s->host;
	base_list_remove(&s->link);
	session_unstarve(s); /* a closing session may starve again (its reset's answer); never leave it linked */
	if (base_list_is_linked(&s->end.link))
		base_list_remove(&s->end.link);
	__atomic_sub_fetch(&host->session_count, 1, __ATOMIC_RELAXED);
	close(s->client_fd);
	sendq_deinit(&s->to_client, &host->ring);
	if (s->transport)
		s->transport->destroy(s);
	struct leg *leg;
	SESSION_EACH_LEG(s, leg)
		leg_destroy(leg);
	session_free_drained(s);
	TERN_ASSERT(base_list_is_empty(&s->legs_draining));
	proto_stream_deinit(&s->client_stream);
	s->parts->deinit(s);
	free(s->steer.backlog.data);
	session_login_free(s);
	if (s->console)
		s->host->runtime->console->destroy(s);
	if (s->lookup)
		s->lookup->owner = NULL; /* the worker frees it when it comes back */
	if (s->db)
		pool_db_put(s->host->runtime->pool, s->db); /* (freed now when it has no connection, else with its last) */
	free(s);
}
