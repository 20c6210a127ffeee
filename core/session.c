/* A session's life: creation, the client socket's handlers, its server legs' acquisition, release
 * and loss (the one decision), and the one way it ends. */
#include "session.h"

#include "auth_query.h"
#include "scram.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

static void session_client_recv_done(struct ring_op *op, int res, uint32_t flags);
static void session_client_sent(struct ring_op *op, int res, uint32_t flags);
static const struct leg_ops session_leg_ops;

/* Each leg the session holds, in role order (a role may have none); `leg` is declared by the caller. */
#define SESSION_EACH_LEG(s, leg)                                  \
	for (uint32_t role_ = 0; role_ < LEG_ROLE_COUNT; role_++) \
		if (((leg) = (s)->legs[role_]) == NULL) {         \
		} else

static struct leg *session_leg_create(struct session *s, enum leg_role role)
{
	struct leg *leg = leg_create(s, s->host, &session_leg_ops, role);
	if (leg)
		leg->downstream = &s->to_client;
	return leg;
}

void session_set_phase(struct session *s, enum session_phase to)
{
#define FROM(phase) (1u << (phase))
	static const uint8_t allowed_from[] = {
		[SESSION_STARTUP] = FROM(0), /* (calloc'd) */
		[SESSION_AUTH] = FROM(SESSION_STARTUP) | FROM(SESSION_AUTH),
		[SESSION_LOGIN_WAIT] = FROM(SESSION_STARTUP) | FROM(SESSION_AUTH),
		[SESSION_ADMIN] = FROM(SESSION_STARTUP) | FROM(SESSION_AUTH),
		[SESSION_READY] = FROM(SESSION_LOGIN_WAIT),
		[SESSION_CLOSING] = FROM(SESSION_STARTUP) | FROM(SESSION_AUTH) | FROM(SESSION_LOGIN_WAIT) |
				    FROM(SESSION_READY) | FROM(SESSION_ADMIN),
	};
#undef FROM
	TERN_ASSERT((size_t)to < TERN_ARRAY_LEN(allowed_from) && (allowed_from[to] >> s->phase & 1u));
	s->phase = to;
}

struct session *session_create(struct host *host, int client_fd, uint32_t listener)
{
	TERN_ASSERT(listener < TERN_ARRAY_LEN(host->runtime->identity_hashes));
	struct session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->login = calloc(1, sizeof(*s->login));
	if (!s->login) {
		free(s);
		return NULL;
	}
	struct tern_runtime *rt = host->runtime;
	s->login->identity_hash = rt->identity_hashes[listener];
	s->host = host;
	s->parts = rt->parts;
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
	s->started_ns = base_now_ns();
	s->client_active_ns = s->legs[LEG_PRIMARY]->ready_ns = s->started_ns;
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
	host->session_count++;
	ring_recv_multishot(&host->ring, &s->client_recv, client_fd, HOST_BUFFERS_CLIENT);
	return s;
}

void session_mark_dirty(struct session *s, struct sendq *q) { host_mark_dirty(s->host, q); }

/* After a push onto the client's queue. */
static void session_client_pushed(struct session *s, int rc)
{
	if (rc < 0) {
		/* The client would miss this message: it must not hear anything after it. The caller may be in
		 * the middle of a change (a welcome, a reply), so the end comes at the end of the pass. */
		session_end_later(s, rc == -ENOBUFS ? SESSION_END_PIPELINE_TOO_DEEP : SESSION_END_OUT_OF_MEMORY);
		return;
	}
	session_mark_dirty(s, &s->to_client);
}

void session_send_to_client(struct session *s, const void *data, uint32_t len)
{
	session_client_pushed(s, sendq_push_copy(&s->to_client, data, len));
}

void session_send_buffer_to_client(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	session_client_pushed(s, sendq_push_buffer(&s->to_client, &s->host->ring, buffer_id, data, len));
}

void session_send_reply(struct session *s, const void *data, uint32_t len)
{
	const struct leg *leg = session_client_leg(s);
	if (leg->route.is_reply_guarded)
		s->parts->hold_reply(s, data, len);
	else if (s->replay.preamble.len > 0)
		s->parts->preamble_reply(s, data, len); /* behind the start of the answer Transaction Replay holds */
	else
		session_send_to_client(s, data, len);
}

void session_end_later(struct session *s, enum session_end_reason reason)
{
	if (s->phase == SESSION_CLOSING || base_list_is_linked(&s->end.link))
		return;
	s->end.later_reason = reason;
	base_list_insert_tail(&s->host->ending, &s->end.link);
}

void session_send_error(struct session *s, const char *severity, const char *sqlstate, const char *message,
			const char *hint)
{
	uint8_t msg[1024];
	size_t n = proto_build_error(msg, sizeof(msg), severity, sqlstate, message, hint);
	if (n > 0)
		session_send_to_client(s, msg, (uint32_t)n);
}

void session_client_recv_resume(struct session *s)
{
	if (s->client_recv.is_armed || s->client_eof || s->starve.groups[HOST_BUFFERS_CLIENT])
		return;
	if (s->phase == SESSION_CLOSING ? !s->end.is_client_draining : s->client_recv_paused)
		return;
	ring_recv_multishot(&s->host->ring, &s->client_recv, s->client_fd, HOST_BUFFERS_CLIENT);
}

void session_starve(struct session *s, uint8_t group)
{
	if (!s->starve.groups[HOST_BUFFERS_CLIENT] && !s->starve.groups[HOST_BUFFERS_SERVER])
		base_list_insert_tail(&s->host->starved, &s->starve.link);
	s->starve.groups[group] = true;
	if (group == HOST_BUFFERS_SERVER) {
		/* Server responses are what ends transactions: take the rows that clients which stopped reading
		 * leave queued out of the ring, so the others' responses find buffers again. (A client that keeps
		 * up pays a copy too, only while the ring is exhausted.) */
		struct base_list *node, *tmp;
		base_list_for_each_safe(node, tmp, &s->host->sessions)
		{
			struct session *other = TERN_CONTAINER_OF(node, struct session, link);
			if (other->to_client.buffers > 0)
				session_release_client_buffers(other);
		}
	}
}

void session_release_client_buffers(struct session *s)
{
	struct sendq *q = &s->to_client;
	if (sendq_is_empty(q) || s->client_eof)
		return;
	if (q->op.is_armed) {
		/* A send waiting for a client that does not read names its buffers to the kernel: call it back,
		 * and copy when it returns (session_client_sent). */
		if (!s->is_client_send_recalled) {
			s->is_client_send_recalled = true;
			ring_cancel(&s->host->ring, &q->op);
		}
		return;
	}
	if (sendq_own_copies(q, &s->host->ring) < 0)
		session_end(s, SESSION_END_OUT_OF_MEMORY);
}

/* Off host->starved: its receives are re-armed by whoever arms them next (a leg's flag too, or the
 * ended session's reset could never be read: leg_resume refuses a starved leg). */
static void session_unstarve(struct session *s)
{
	s->starve.groups[HOST_BUFFERS_CLIENT] = s->starve.groups[HOST_BUFFERS_SERVER] = false;
	struct leg *leg;
	SESSION_EACH_LEG(s, leg)
		leg->is_starved = false;
	if (base_list_is_linked(&s->starve.link))
		base_list_remove(&s->starve.link);
}

bool session_resume_starved(struct session *s)
{
	struct ring *ring = &s->host->ring;
	if (s->starve.groups[HOST_BUFFERS_CLIENT] && ring_buffers_free(ring, HOST_BUFFERS_CLIENT) > 0) {
		s->starve.groups[HOST_BUFFERS_CLIENT] = false;
		session_client_recv_resume(s);
	}
	if (s->starve.groups[HOST_BUFFERS_SERVER] && ring_buffers_free(ring, HOST_BUFFERS_SERVER) > 0) {
		s->starve.groups[HOST_BUFFERS_SERVER] = false;
		struct leg *leg;
		SESSION_EACH_LEG(s, leg)
		{
			if (leg->is_starved) {
				leg->is_starved = false;
				leg_resume(leg);
			}
		}
	}
	if (s->starve.groups[HOST_BUFFERS_CLIENT] || s->starve.groups[HOST_BUFFERS_SERVER])
		return false;
	session_unstarve(s);
	return true;
}

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

/* Back pressure on the client's reads: they pause while what the client sent is not yet gone (the
 * queue toward its server over its high mark, or the parked mark while it waits for one), while what it
 * must read is not read (its own queue over the high mark), or while its server owes more replies than
 * STMT_REPLIES_HIGH; they resume once all three are under their low marks. */
static bool session_client_is_backed_up(const struct session *s)
{
	const struct leg *leg = session_primary(s);
	uint64_t high = leg->conn ? SENDQ_HIGH_BYTES : SESSION_QUEUE_PARKED_BYTES;
	return sendq_is_full(&leg->to_server, high) || sendq_is_full(&s->to_client, SENDQ_HIGH_BYTES) ||
	       leg->replies.count > STMT_REPLIES_HIGH || s->routing.backlog.len > SESSION_QUEUE_PARKED_BYTES;
}

static bool session_client_is_drained(const struct session *s)
{
	const struct leg *leg = session_primary(s);
	return sendq_is_low(&leg->to_server) && sendq_is_low(&s->to_client) && leg->replies.count < STMT_REPLIES_LOW &&
	       s->routing.backlog.len <= SESSION_QUEUE_PARKED_BYTES / 2;
}

void session_client_pace(struct session *s)
{
	if (!s->client_recv_paused) {
		if (session_client_is_backed_up(s)) {
			s->client_recv_paused = true;
			ring_cancel(&s->host->ring, &s->client_recv);
		}
	} else if (session_client_is_drained(s)) {
		s->client_recv_paused = false;
		session_client_recv_resume(s);
	}
}

/* An ended session's goodbye is out (its queue and TLS's are empty): FIN, while the client's last bytes
 * are still read and dropped until it closes too, or the linger cuts it. */
static void session_client_goodbye_check(struct session *s)
{
	if (s->end.is_client_cut || s->end.is_client_fin_sent || !sendq_is_idle(&s->to_client) ||
	    (s->transport && s->transport->is_sending(s)))
		return;
	shutdown(s->client_fd, SHUT_WR);
	s->end.is_client_fin_sent = true;
}

void session_client_drained(struct session *s)
{
	if (s->phase == SESSION_CLOSING)
		session_client_goodbye_check(s);
	if (s->client_recv_paused)
		session_client_pace(s);
	if (!sendq_is_low(&s->to_client))
		return;
	struct leg *leg;
	SESSION_EACH_LEG(s, leg)
	{
		if (leg->is_recv_paused) {
			leg->is_recv_paused = false;
			leg_resume(leg);
		}
	}
}

#ifndef NDEBUG
static void session_assert_leg(const struct session *s, const struct leg *leg)
{
	TERN_ASSERT(leg->session == s && leg->host == s->host);
	TERN_ASSERT(leg->hidden_ready <= leg->pending_ready);
	TERN_ASSERT(!leg->is_dropping || leg->is_failed);
	TERN_ASSERT(leg->is_request_pending == base_list_is_linked(&leg->parked_link));
	TERN_ASSERT(leg->replies.count <= STMT_REPLIES_MAX && leg->to_server.count <= SENDQ_SLICES_MAX);
	TERN_ASSERT(!(leg->is_recv_paused && leg->recv.is_armed));
	TERN_ASSERT(!leg->is_starved || s->starve.groups[HOST_BUFFERS_SERVER] || s->phase == SESSION_CLOSING);
	if (leg->conn) {
		TERN_ASSERT(leg->conn->state == POOL_CONN_USED);
		TERN_ASSERT(leg->to_server.fd == leg->conn->fd);
		TERN_ASSERT(!leg->is_request_pending);
	} else {
		TERN_ASSERT(leg->to_server.fd == -1);
		TERN_ASSERT(!leg->recv.is_armed && !leg->is_dropping && !leg->is_release_after_recv);
	}
}

void session_assert_invariants(const struct session *s)
{
	TERN_ASSERT(s->host && s->parts);
	TERN_ASSERT(s->stmts.statements.count <= STMT_MAP_NAMES_MAX);
	TERN_ASSERT(s->to_client.count <= SENDQ_SLICES_MAX);
	TERN_ASSERT(s->legs[LEG_PRIMARY]);
	const struct leg *leg;
	SESSION_EACH_LEG(s, leg)
	{
		TERN_ASSERT(s->legs[leg->role] == leg && !base_list_is_linked(&leg->link));
		session_assert_leg(s, leg);
	}
	const struct base_list *node;
	for (node = s->legs_draining.next; node != &s->legs_draining; node = node->next) {
		leg = TERN_CONTAINER_OF(node, const struct leg, link);
		TERN_ASSERT(leg != s->legs[leg->role]);
		TERN_ASSERT(!leg->conn || leg->is_dropping);
		session_assert_leg(s, leg);
	}
}
#endif

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
	if ((s->routing.state != ROUTE_IDLE || (replica && replica->conn)) && s->phase == SESSION_READY)
		s->parts->leg_progress(s, leg); /* a read's answer is in (or a transaction ended): what waits goes on */
	/* SIGTERM: a client goes at the ReadyForQuery that leaves it idle, so one that starts its next
	 * transaction right after each COMMIT is let go between two, not cut at shutdown_timeout. */
	if (s->phase == SESSION_READY && __atomic_load_n(&s->host->runtime->draining, __ATOMIC_RELAXED) &&
	    session_is_drainable(s))
		session_end_later(s, SESSION_END_SHUTDOWN);
	session_assert_invariants(s);
}

static void session_leg_on_starved(struct leg *leg) { session_starve(leg->session, HOST_BUFFERS_SERVER); }

struct session_lost_decision session_decide_lost(const struct session *s, const struct leg *leg,
						 enum leg_fault fault)
{
	TERN_ASSERT(fault != LEG_FAULT_NONE);
	if (s->parts->decide_lost)
		return s->parts->decide_lost(s, leg, fault);
	return (struct session_lost_decision){
		.action = SESSION_LOST_END,
		.reason = fault == LEG_FAULT_REFUSED ? SESSION_END_SERVER_REFUSED : SESSION_END_SERVER_LOST};
}

/* Carries out the decision about leg's lost or refused connection. */
static void session_lost(struct session *s, struct leg *leg, enum leg_fault fault)
{
	struct session_lost_decision decision = session_decide_lost(s, leg, fault);
	if (decision.action == SESSION_LOST_RECOVER) {
		s->parts->recover(s, leg, &decision);
		return;
	}
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
	if (s->parts->leg_lost(s, leg))
		return; /* a read that reached no client byte runs again on the primary */
	session_lost(s, leg, fault);
}

static const struct leg_ops session_leg_ops = {
	.on_bytes = session_leg_on_bytes,
	.on_progress = session_leg_on_progress,
	.on_starved = session_leg_on_starved,
	.on_lost = session_leg_on_lost,
};

struct leg *session_replica_leg(struct session *s)
{
	if (!s->legs[LEG_REPLICA])
		s->legs[LEG_REPLICA] = session_leg_create(s, LEG_REPLICA);
	return s->legs[LEG_REPLICA];
}

/* Called after client bytes were queued toward the server. */
void session_leg_queue_grew(struct session *s, struct leg *leg)
{
	session_client_pace(s);
	if (leg->conn)
		session_mark_dirty(s, &leg->to_server);
	else if (leg->is_request_pending)
		session_hold_parked_bytes(s);
	else if (!sendq_is_empty(&leg->to_server))
		session_acquire(s, leg);
}

static void session_request_done_hook(struct pool_request *req)
{
	struct host *host = ((struct leg *)req->owner)->host;
	host->ops->request_done(host, req);
}

struct pool_server *session_server(const struct session *s)
{
	return s->pinned_server ? s->pinned_server : runtime_primary(s->host->runtime);
}

bool session_is_gated(struct session *s)
{
	struct tern_runtime *rt = s->host->runtime;
	return __atomic_load_n(&rt->is_paused, __ATOMIC_ACQUIRE) || gates_is_paused(&rt->gates, s->database);
}

bool session_pause_gate(struct session *s)
{
	if (session_is_gated(s)) {
		if (!s->gate.is_waiting) {
			s->gate.is_waiting = true;
			s->gate.wait_ns = base_now_ns();
			s->host->pause_waiting_count++;
		}
		session_hold_parked_bytes(s); /* a waiting client holds no receive buffers */
		return true;
	}
	if (s->gate.is_waiting) {
		uint64_t now = base_now_ns();
		s->gate.is_waiting = false;
		s->stats.wait_ns += now - s->gate.wait_ns;
		s->gate.wait_ns = now; /* the server assignment starts after the wait, not before it */
	}
	return false;
}

/* A connection out of the pool whose server has gone: an idle server says nothing unasked but its last
 * words (a FATAL such as 57P01 from a terminated backend or a shutdown, then its FIN), so anything waiting
 * unread means it is gone. One recv that never blocks, skipped for a connection released less than
 * SESSION_PEEK_IDLE_NS ago: its server answered ReadyForQuery that recently, and a server that goes in
 * that window races the request just as one that goes right after the recv would (most connections of
 * a busy pool come back within a pass or two, and this recv was a syscall per transaction). */
#define SESSION_PEEK_IDLE_NS BASE_NS_PER_MS

static bool session_conn_is_closed(const struct pool_conn *conn, uint64_t now_ns)
{
	if (now_ns - conn->released_ns < SESSION_PEEK_IDLE_NS)
		return false;
	uint8_t byte;
	ssize_t n = recv(conn->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void session_acquire(struct session *s, struct leg *leg)
{
	struct host *host = s->host;
	TERN_ASSERT(leg->session == s && !leg->conn && !leg->is_request_pending);
	session_assert_invariants(s);
	bool is_replica = leg->role == LEG_REPLICA;
	if (!is_replica && session_pause_gate(s))
		return; /* PAUSE: the worker asks again at RESUME (reads on replicas go on) */
	if (!is_replica && s->parts->awaits_primary && s->parts->awaits_primary(s, leg))
		return; /* its primary connection was lost: the worker asks again once a primary is there */
	if (!is_replica)
		session_stats_close_assignment(s);
	struct pool_server *server = is_replica ? s->routing.server : session_server(s);
	struct pool_conn *conn = host_local_take(host, s->db, server);
	if (conn) {
		host->stats.local_reuse++;
		/* The request arrived just now (no clock read here), or left the PAUSE gate just now. */
		s->stats.assigned_ns = TERN_MAX(s->client_active_ns, s->gate.wait_ns);
		s->parts->attach(s, leg, conn);
		return;
	}
	struct pool_request *req = &leg->request;
	req->db = s->db;
	req->server = server;
	req->on_done = session_request_done_hook;
	req->owner = leg;
	host->stats.pool_checkouts++;
	uint64_t now = base_now_ns();
	while (pool_checkout(host->runtime->pool, req, now) == POOL_CHECKOUT_GOT) {
		if (session_conn_is_closed(req->conn, now)) {
			/* The server closed it while it sat in the pool (a terminated backend, a server that went
			 * down) before the opener noticed: a request sent on it would never be known not to
			 * have run. */
			TERN_LOG(BASE_LOG_DEBUG, "server %s had closed idle connection pid %u", req->conn->server->name,
				 req->conn->backend_pid);
			pool_conn_discard(host->runtime->pool, req->conn);
			continue;
		}
		s->stats.assigned_ns = now;
		s->parts->attach(s, leg, req->conn);
		return;
	}
	leg->is_request_pending = true;
	base_list_insert_tail(&host->parked, &leg->parked_link);
	session_hold_parked_bytes(s);
	session_assert_invariants(s);
}

void session_hold_parked_bytes(struct session *s)
{
	/* A waiting client must hold no receive buffers across passes: the transactions it waits for may
	 * need them. Its few bytes (bounded by SESSION_QUEUE_PARKED_BYTES) are copied out of the ring at the
	 * end of the pass if it still waits then (session_hold_now); most waits end within the pass. */
	struct leg *leg = session_primary(s);
	if (!base_list_is_linked(&leg->hold_link))
		base_list_insert_tail(&s->host->holds, &leg->hold_link);
}

void session_hold_now(struct leg *leg)
{
	struct session *s = leg->session;
	if (s->phase == SESSION_CLOSING || !(leg->is_request_pending || s->gate.is_waiting || s->replay.is_waiting))
		return; /* its wait ended in the pass: its bytes went on by reference */
	if (leg_hold_queued(leg) < 0)
		session_end(s, SESSION_END_OUT_OF_MEMORY);
}

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
	if (s->parts->leg_lost(s, leg))
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
	if (s->parts->leg_lost(s, leg))
		return; /* no replica connection in time: the primary serves the read */
	session_end(s, SESSION_END_WAIT_TIMEOUT);
}

/* Both streams between messages: a connection released while the server still waits for the rest of a
 * client's message would read the next client's bytes as that message's body. */
static bool session_leg_is_idle(const struct session *s, const struct leg *leg)
{
	return leg_is_idle(leg) && proto_stream_is_at_boundary(&s->client_stream);
}

void session_try_release(struct session *s, struct leg *leg)
{
	if (!session_leg_is_idle(s, leg))
		return;
	/* An ended session's server goes back once idle (after its reset, in session pooling); a live one's
	 * only in transaction pooling, and not while the client LISTENs on it. */
	if (s->phase != SESSION_CLOSING &&
	    !(s->is_transaction_pooling && s->phase == SESSION_READY && !session_is_pinned(s)))
		return;
	if (s->parts->before_release(s, leg))
		return; /* the connection goes back once the answer is in */
	(void)leg_release(leg); /* or at the end of the cancelled receive, through on_progress */
	session_assert_invariants(s);
}

void session_settle(struct session *s, struct leg *leg)
{
	if (!leg->conn)
		return;
	if (!leg->is_dropping && s->phase == SESSION_CLOSING && !leg_is_idle(leg) && leg->pending_ready == 0 &&
	    !leg->is_unsynced && sendq_is_idle(&leg->to_server) && proto_stream_is_at_boundary(&leg->stream))
		/* An ended session's server owes nothing more yet is not idle (a transaction left open, a
		 * replay's that tern's own hidden answers began): nothing will end it, so it goes. */
		leg_drop(leg);
	if (leg->is_dropping) {
		(void)leg_reap(leg);
		return;
	}
	session_try_release(s, leg);
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

/* True when all the server owes are answers to tern's own hidden queries (a SET, SHOW search_path) and
 * nothing of the client's is in flight: once they are in, the connection is idle. */
static bool session_leg_awaits_only_tern(const struct session *s, const struct leg *leg)
{
	return leg->hidden_ready > 0 && leg->pending_ready == leg->hidden_ready && leg->replies.count == 0 &&
	       !leg->is_unsynced && !leg->copy.is_copy_in && proto_stream_is_at_boundary(&s->client_stream);
}

/* At the end of a session: reset and release an idle server, or drop a busy one. */
static void session_leg_finish(struct session *s, struct leg *leg)
{
	leg->downstream = NULL; /* what the server says now stays here: no back pressure from the client */
	if (!leg->conn)
		return;
	if (session_leg_awaits_only_tern(s, leg) && !session_is_pinned(s)) {
		/* The answer comes soon; the receive releases the connection then (session_settle). */
		leg->is_recv_paused = false;
		leg_resume(leg);
		return;
	}
	if (!session_leg_is_idle(s, leg) || session_is_pinned(s)) {
		/* Busy, or still subscribed to channels whose notifications must not reach the next client,
		 * or holding SQL prepared statements whose names the next client could trip over. */
		leg_drop(leg);
		session_settle(s, leg);
		return;
	}
	if (!s->is_transaction_pooling) {
		/* Session pooling hands the next client a clean session, as PgBouncer's server_reset_query. */
		uint8_t msg[64];
		size_t n = proto_build_query(msg, sizeof(msg), "DISCARD ALL");
		if (sendq_push_copy(&leg->to_server, msg, (uint32_t)n) < 0) {
			leg_drop(leg);
			session_settle(s, leg);
			return;
		}
		leg->pending_ready++;
		leg->tx_status = 'T';
		if (leg->conn->extra_free) { /* what an observer kept of the connection (its statements) is gone */
			leg->conn->extra_free(leg->conn->extra);
			leg->conn->extra = NULL;
			leg->conn->extra_free = NULL;
		}
		session_mark_dirty(s, &leg->to_server);
		leg->is_recv_paused = false;
		leg_resume(leg);
		return;
	}
	session_try_release(s, leg);
}

/* A server message was being forwarded to the client when the stream stopped: the client has part of
 * it, and anything tern sent now would be read as its rest. */
static bool session_client_is_mid_message(const struct session *s)
{
	const struct leg *leg;
	SESSION_EACH_LEG(s, leg)
	{
		if (leg_is_client_mid_message(leg))
			return true;
	}
	return false;
}

/* The client hears nothing more: both directions shut, its receive and a send still waiting for room
 * called back (a shutdown wakes a send waiting on a TCP socket, not on every kind: an AF_UNIX stream's
 * stays armed, and the session could never be freed; found by the whole-session fuzzer). The send's
 * -ECANCELED, not recalled, ends what is queued (session_client_sent). */
static void session_client_cut(struct session *s)
{
	shutdown(s->client_fd, SHUT_RDWR);
	s->end.is_client_cut = true;
	ring_cancel(&s->host->ring, &s->client_recv);
	if (s->to_client.op.is_armed && !s->is_client_send_recalled)
		ring_cancel(&s->host->ring, &s->to_client.op);
}

void session_end(struct session *s, enum session_end_reason reason)
{
	if (s->phase == SESSION_CLOSING)
		return;
	struct host *host = s->host;
	if (base_list_is_linked(&s->end.link))
		base_list_remove(&s->end.link);
	const struct session_end_info *info = session_end_info(reason);
	if (s->lookup) { /* an auth_query answer still to come finds no owner: the worker frees it */
		s->lookup->owner = NULL;
		s->lookup = NULL;
	}
	s->end.reason = reason;
	host->stats.ended[reason]++;
	bool tell_client = info->sqlstate != NULL && !s->client_eof && !session_client_is_mid_message(s);
	if (tell_client) {
		if (s->end.error.sqlstate[0])
			session_send_error(s, "FATAL", s->end.error.sqlstate, s->end.error.message, NULL);
		else
			session_send_error(s, "FATAL", info->sqlstate, info->message, info->hint);
	}
	TERN_LOG(info->log_level, "client %s/%s (worker %u) ended: %s%s%s", s->user[0] ? s->user : "-",
		 s->database[0] ? s->database : "-", host->index, info->name,
		 reason == SESSION_END_SERVER_REFUSED ? ": " : "",
		 reason == SESSION_END_SERVER_REFUSED ? s->end.error.message : "");
	session_set_phase(s, SESSION_CLOSING);
	s->end.closing_ns = base_now_ns();
	__atomic_sub_fetch(&host->runtime->client_count, 1, __ATOMIC_RELAXED);
	if (s->is_counted)
		__atomic_sub_fetch(&s->db->client_count, 1, __ATOMIC_RELAXED);
	struct leg *leg;
	SESSION_EACH_LEG(s, leg)
	{
		if (leg->is_request_pending && pool_request_cancel(host->runtime->pool, &leg->request)) {
			leg->is_request_pending = false;
			base_list_remove(&leg->parked_link);
		}
	}
	session_unstarve(s);
	s->parts->ending(s);
	/* Keep writing until the goodbye is out (bounded by the linger): the error, a TLS alert,
	 * close_notify; then FIN. Meanwhile what the client still sends is read and dropped: closing a
	 * socket with unread bytes resets it, and the client would lose the goodbye and the answers before
	 * it. A client that closed its end, or said Terminate, hears nothing more. */
	if (s->transport)
		s->transport->flush(s);
	bool keep_writing = tell_client || (s->transport && s->transport->is_sending(s) && !s->client_eof);
	if (keep_writing) {
		s->end.is_client_draining = !s->client_eof;
		session_client_recv_resume(s);
		session_client_goodbye_check(s);
	} else {
		session_client_cut(s);
	}
	SESSION_EACH_LEG(s, leg)
		session_leg_finish(s, leg);
	base_list_remove(&s->link);
	base_list_insert_tail(&host->reaping, &s->link);
	session_assert_invariants(s);
}

void session_end_with_error(struct session *s, enum session_end_reason reason, const char *sqlstate,
			    const char *message)
{
	base_strlcpy(s->end.error.sqlstate, sqlstate, sizeof(s->end.error.sqlstate));
	base_strlcpy(s->end.error.message, message, sizeof(s->end.error.message));
	session_end(s, reason);
}

void session_linger_expired(struct session *s)
{
	TERN_ASSERT(s->phase == SESSION_CLOSING);
	if (!s->end.is_client_cut) {
		session_client_cut(s);
		s->client_eof = true;
		s->end.is_client_draining = false;
	} else if (s->to_client.op.is_armed) {
		/* A cancel that found the send being tried (-EALREADY: an io-wq worker had it) does not stop
		 * it from waiting for room again: asked again at every tick until it returns. */
		ring_cancel(&s->host->ring, &s->to_client.op);
	}
	struct leg *leg;
	SESSION_EACH_LEG(s, leg)
	{
		if (leg->conn) {
			leg_drop(leg);
			session_settle(s, leg);
		}
	}
}

void session_check_timeouts(struct session *s, uint64_t now_ns)
{
	/* A client that reads slower than its server writes keeps its queue in heap memory, not the ring. */
	struct leg *leg = session_primary(s);
	if (leg->is_recv_paused)
		session_release_client_buffers(s);
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	uint64_t login_ns = cfg->client_login_timeout_ms * BASE_NS_PER_MS;
	if ((s->phase == SESSION_STARTUP || s->phase == SESSION_AUTH) && login_ns && now_ns - s->started_ns > login_ns) {
		session_end(s, SESSION_END_CLIENT_LOGIN_TIMEOUT);
		return;
	}
	if (s->phase == SESSION_READY && s->parts->check_deadline && s->parts->check_deadline(s, now_ns))
		return;
	if (s->phase != SESSION_READY ||
	    (s->routing.state != ROUTE_IDLE && s->routing.state != ROUTE_SETTLING && s->routing.state != ROUTE_COLLECTING))
		return; /* a routed read has its own deadline (a SET tern.* or a batch being read waits on the primary) */
	uint64_t query_ns = cfg->query_timeout_ms * BASE_NS_PER_MS;
	uint64_t idle_tx_ns = cfg->idle_transaction_timeout_ms * BASE_NS_PER_MS;
	uint64_t idle_ns = cfg->client_idle_timeout_ms * BASE_NS_PER_MS;
	if (leg->pending_ready > 0) {
		uint64_t response_ns = (uint64_t)cfg->backend_response_timeout_secs * BASE_NS_PER_SEC;
		if (query_ns && leg->conn && now_ns - leg->request_sent_ns > query_ns) {
			session_end(s, SESSION_END_QUERY_TIMEOUT);
		} else if (response_ns && leg->conn && !leg->is_dropping && now_ns - leg->request_sent_ns > response_ns) {
			TERN_WARN("client %s/%s: server %s did not finish an answer within backend_response_timeout_secs; "
				  "its connection is closed", s->user, s->database, leg->conn->server->name);
			leg_fail(leg, LEG_FAULT_CLOSED); /* decided as a lost connection (session_leg_on_lost) */
		}
		return;
	}
	uint64_t quiet_since = TERN_MAX(s->client_active_ns, leg->ready_ns);
	if (session_is_in_transaction(s)) {
		if (idle_tx_ns && now_ns - quiet_since > idle_tx_ns)
			session_end(s, SESSION_END_IDLE_TRANSACTION_TIMEOUT);
		return;
	}
	if (idle_ns && now_ns - quiet_since > idle_ns)
		session_end(s, SESSION_END_CLIENT_IDLE_TIMEOUT);
}

bool session_is_in_transaction(const struct session *s)
{
	if (s->phase != SESSION_READY)
		return false;
	const struct leg *leg = session_primary(s);
	return (leg->conn != NULL && !session_leg_is_idle(s, leg)) || s->routing.state != ROUTE_IDLE;
}

bool session_is_drainable(const struct session *s)
{
	if (s->gate.is_drain_spared && s->stats.query_count == 0)
		return false;
	if (s->phase != SESSION_READY)
		return true;
	/* A request parked for a server has been sent: it is answered before the client goes. */
	return !session_is_in_transaction(s) && !session_primary(s)->is_request_pending &&
	       proto_stream_is_at_boundary(&s->client_stream);
}

bool session_is_reapable(const struct session *s)
{
	if (s->phase != SESSION_CLOSING || s->client_recv.is_armed || s->to_client.op.is_armed ||
	    !((sendq_is_empty(&s->to_client) && !(s->transport && s->transport->is_sending(s))) || s->client_eof) ||
	    (s->transport && s->transport->is_armed(s)))
		return false;
	const struct leg *leg;
	SESSION_EACH_LEG(s, leg)
		if (!leg_is_reapable(leg))
			return false;
	const struct base_list *node;
	for (node = s->legs_draining.next; node != &s->legs_draining; node = node->next)
		if (!leg_is_reapable(TERN_CONTAINER_OF(node, const struct leg, link)))
			return false;
	return true;
}

void session_login_free(struct session *s)
{
	struct session_login *login = s->login;
	if (!login)
		return;
	free(login->buf);
	if (login->scram) {
		scram_server_deinit(login->scram);
		free(login->scram);
	}
	if (login->looked_up) {
		auth_user_deinit(login->looked_up);
		free(login->looked_up);
	}
	free(login);
	s->login = NULL;
}

void session_destroy(struct session *s)
{
	TERN_ASSERT(session_is_reapable(s));
	struct host *host = s->host;
	base_list_remove(&s->link);
	session_unstarve(s); /* a closing session may starve again (its reset's answer); never leave it linked */
	if (base_list_is_linked(&s->end.link))
		base_list_remove(&s->end.link);
	host->session_count--;
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
	session_login_free(s);
	if (s->console)
		s->host->runtime->console->destroy(s);
	if (s->lookup)
		s->lookup->owner = NULL; /* the worker frees it when it comes back */
	if (s->db)
		pool_db_put(s->host->runtime->pool, s->db); /* (freed now when it has no connection, else with its last) */
	free(s);
}
