/* What a session does, asked by its handlers (session_events.c) and its parts: its phase, what goes to the
 * client and how fast its reads go (back pressure, buffer starvation), its legs' server connections (asked
 * for, held behind PAUSE, given back, settled), and the one way it ends. Owns the session's state moves;
 * never sets a handler or an op, nor decides what a completion means (session_events.c, which calls here;
 * nothing here calls there). */
#include "session.h"

#include "auth_query.h"
#include "scram.h"

#include <errno.h>
#include <sys/socket.h>

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
	if (!s->parts->hold_reply(s, data, len)) /* held with the answer routing guards, or Transaction Replay */
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

/* (a leg's flag too, or the ended session's reset could never be read: leg_resume refuses a starved leg) */
void session_unstarve(struct session *s)
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

/* Back pressure on the client's reads: they pause while what the client sent is not yet gone (the
 * queue toward its server over its high mark, or the parked mark while it waits for one), while what it
 * must read is not read (its own queue over the high mark), or while its server owes more replies than
 * STMT_REPLIES_HIGH; they resume once all three are under their low marks. */
static bool session_client_is_backed_up(const struct session *s)
{
	const struct leg *leg = session_primary(s);
	uint64_t high = leg->conn ? SENDQ_HIGH_BYTES : SESSION_QUEUE_PARKED_BYTES;
	return sendq_is_full(&leg->to_server, high) || sendq_is_full(&s->to_client, SENDQ_HIGH_BYTES) ||
	       leg->stmts.replies.count > STMT_REPLIES_HIGH || s->steer.backlog.len > SESSION_QUEUE_PARKED_BYTES;
}

static bool session_client_is_drained(const struct session *s)
{
	const struct leg *leg = session_primary(s);
	return sendq_is_low(&leg->to_server) && sendq_is_low(&s->to_client) && leg->stmts.replies.count < STMT_REPLIES_LOW &&
	       s->steer.backlog.len <= SESSION_QUEUE_PARKED_BYTES / 2;
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
	TERN_ASSERT(leg->stmts.replies.count <= STMT_REPLIES_MAX && leg->to_server.count <= SENDQ_SLICES_MAX);
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
	if (!is_replica && s->parts->replay.awaits_primary && s->parts->replay.awaits_primary(s, leg))
		return; /* its primary connection was lost: the worker asks again once a primary is there */
	if (!is_replica)
		session_stats_close_assignment(s);
	struct pool_server *server = is_replica ? s->parts->route.replica_server(s) : session_server(s);
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
	bool is_waiting = leg->is_request_pending || s->gate.is_waiting || s->parts->replay.waits_for_primary(s);
	if (s->phase == SESSION_CLOSING || !is_waiting)
		return; /* its wait ended in the pass: its bytes went on by reference */
	if (leg_hold_queued(leg) < 0)
		session_end(s, SESSION_END_OUT_OF_MEMORY);
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
	    !leg->is_unsynced && sendq_is_idle(&leg->to_server) && !leg->wire.op.is_armed &&
	    proto_stream_is_at_boundary(&leg->stream))
		/* An ended session's server owes nothing more yet is not idle (a transaction left open, a
		 * replay's that tern's own hidden answers began): nothing will end it, so it goes. */
		leg_drop(leg);
	if (leg->is_dropping) {
		(void)leg_reap(leg);
		return;
	}
	session_try_release(s, leg);
}

/* True when all the server owes are answers to tern's own hidden queries (a SET, SHOW search_path) and
 * nothing of the client's is in flight: once they are in, the connection is idle. */
static bool session_leg_awaits_only_tern(const struct session *s, const struct leg *leg)
{
	return leg->hidden_ready > 0 && leg->pending_ready == leg->hidden_ready && leg->stmts.replies.count == 0 &&
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
	if ((s->phase == SESSION_STARTUP || s->phase == SESSION_AUTH) && login_ns && now_ns - s->stats.started_ns > login_ns) {
		session_end(s, SESSION_END_CLIENT_LOGIN_TIMEOUT);
		return;
	}
	if (s->phase == SESSION_READY && s->parts->replay.check_deadline && s->parts->replay.check_deadline(s, now_ns))
		return;
	if (s->phase != SESSION_READY || s->parts->route.has_deadline(s))
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
	return (leg->conn != NULL && !session_leg_is_idle(s, leg)) || s->parts->route.is_busy(s);
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
