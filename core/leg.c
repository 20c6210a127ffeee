/* A server leg: one pool connection as a session uses it, its receive and send completions (in the clear
 * or over the connection's TLS), and its lifecycle (attach, resume, release, drop, reap). See leg.h. */
#include "leg.h"
#include "tls.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static void leg_recv_done(struct ring_op *op, int res, uint32_t flags);
static void leg_sent(struct ring_op *op, int res, uint32_t flags);
static void leg_tls_wire_sent(struct ring_op *op, int res, uint32_t flags);

/* ---- TLS to the server (conn->tls, tls.h's state, kept with the connection between clients) ----
 * The leg keeps queueing plaintext in to_server; its filter encrypts at flush time into one block the
 * wire op sends (freed once sent). Received ciphertext is decrypted into a stack buffer and handed to
 * ops->on_bytes with RING_NO_BUFFER, so what is forwarded is copied. */

static struct tls_conn *leg_tls_conn(const struct leg *leg) { return leg->conn->tls; }

/* Hands what OpenSSL has to send to the wire, unless a block is in flight. 0 or -ENOMEM. */
static int leg_tls_send(struct leg *leg)
{
	struct leg_wire *w = &leg->wire;
	if (w->op.is_armed)
		return 0;
	struct tls_conn *tls = leg_tls_conn(leg);
	uint32_t len = tls_conn_ciphertext_len(tls);
	if (len == 0)
		return 0;
	TERN_ASSERT(w->block == NULL);
	w->block = malloc(len);
	if (!w->block)
		return -ENOMEM;
	w->len = tls_conn_take_ciphertext(tls, w->block, len);
	w->sent = 0;
	w->op.handler = leg_tls_wire_sent;
	ring_send(&leg->host->ring, &w->op, leg->conn->fd, w->block, w->len);
	return 0;
}

static void leg_tls_fail(struct leg *leg, int rc)
{
	TERN_WARN("server connection pid %u: %s", leg->conn->backend_pid,
		  rc == -ENOMEM ? "TLS: out of memory" : tls_conn_error_text(leg_tls_conn(leg)));
}

/* to_server's filter while the leg holds a TLS connection. */
static void leg_tls_encrypt(struct sendq *q, struct ring *ring)
{
	struct leg *leg = TERN_CONTAINER_OF(q, struct leg, to_server);
	TERN_ASSERT(leg->conn && leg->conn->tls);
	if (leg->is_dropping)
		return; /* what is queued goes with the connection (leg_reap) */
	struct tls_conn *tls = leg_tls_conn(leg);
	uint8_t plain[TLS_RECORD_PLAINTEXT_MAX];
	int rc = 0;
	while (q->count > 0) {
		/* A slice of a record or more is encrypted where it lies; smaller ones share a record. */
		uint32_t len;
		const uint8_t *p = sendq_front(q, &len);
		if (len < sizeof(plain)) {
			len = sendq_peek_copy(q, plain, sizeof(plain));
			p = plain;
		}
		rc = tls_conn_write_plaintext(tls, p, len);
		if (rc <= 0)
			break; /* 0: OpenSSL's output is full until the wire takes it */
		sendq_sent(q, ring, (uint32_t)rc);
		rc = 0;
	}
	if (rc == 0)
		rc = leg_tls_send(leg);
	if (rc < 0) {
		leg_tls_fail(leg, rc);
		leg_fail(leg, LEG_FAULT_CLOSED);
	}
}

static void leg_tls_wire_sent(struct ring_op *op, int res, uint32_t flags)
{
	(void)flags;
	struct leg *leg = TERN_CONTAINER_OF(op, struct leg, wire.op);
	struct leg_wire *w = &leg->wire;
	if (res > 0 && !leg->is_dropping) {
		w->sent += (uint32_t)res;
		if (w->sent < w->len) {
			ring_send(&leg->host->ring, &w->op, leg->conn->fd, w->block + w->sent, w->len - w->sent);
			return;
		}
	}
	free(w->block);
	w->block = NULL;
	if (res <= 0 || leg->is_dropping) {
		leg_fail(leg, LEG_FAULT_CLOSED);
		return;
	}
	/* More plaintext may have waited for OpenSSL's output to drain. */
	leg_tls_encrypt(&leg->to_server, &leg->host->ring);
	if (leg->conn && !leg->is_dropping)
		leg->ops->on_progress(leg);
}

/* A TLS failure on receive (logged here): the connection is lost, not malformed. */
#define LEG_TLS_FAILED (-ECONNRESET)

/* Received ciphertext: the plaintext goes to ops->on_bytes. 0, on_bytes' error, or LEG_TLS_FAILED. */
static int leg_tls_on_ciphertext(struct leg *leg, const uint8_t *data, uint32_t len)
{
	struct tls_conn *tls = leg_tls_conn(leg);
	uint8_t plain[TLS_RECORD_PLAINTEXT_MAX];
	for (;;) {
		int fed = 0;
		if (len > 0) {
			fed = tls_conn_feed_ciphertext(tls, data, len);
			if (fed < 0)
				break;
			data += fed;
			len -= (uint32_t)fed;
		}
		int n = tls_conn_read_plaintext(tls, plain, sizeof(plain));
		if (n < 0)
			break;
		if (n > 0) {
			int rc = leg->ops->on_bytes(leg, RING_NO_BUFFER, plain, (uint32_t)n);
			if (rc < 0 || leg->is_dropping || !leg->conn)
				return rc < 0 ? rc : 0;
		} else if (len == 0) {
			/* Everything fed is read; what reading made OpenSSL say (a key update's answer) goes out. */
			int rc = leg_tls_send(leg);
			if (rc == 0)
				return 0;
			leg_tls_fail(leg, rc);
			return LEG_TLS_FAILED;
		} else if (fed == 0) {
			break; /* full and nothing to read: cannot happen while a record fits (tls.h) */
		}
	}
	int rc = tls_conn_error(tls);
	if (rc == 0)
		TERN_WARN("server connection pid %u: TLS input full with nothing to read", leg->conn->backend_pid);
	else if (rc != -ESHUTDOWN) /* the server's close_notify: an orderly end, lost like any close */
		leg_tls_fail(leg, rc);
	return LEG_TLS_FAILED;
}

/* Nothing waits to be sent, nor is in flight. */
static bool leg_tls_is_idle(const struct leg *leg)
{
	return !leg->wire.op.is_armed && (!leg->conn || !leg->conn->tls || tls_conn_ciphertext_len(leg_tls_conn(leg)) == 0);
}

/* Frees a block that will not be sent. */
static void leg_tls_clear(struct leg *leg)
{
	TERN_ASSERT(!leg->wire.op.is_armed);
	free(leg->wire.block);
	leg->wire.block = NULL;
}

struct leg *leg_create(struct session *session, struct host *host, const struct leg_ops *ops, enum leg_role role,
		       size_t state_bytes)
{
	TERN_ASSERT(ops->on_bytes && ops->on_progress && ops->on_starved && ops->on_lost);
	struct leg *leg = calloc(1, LEG_STATE_AT + state_bytes);
	if (!leg)
		return NULL;
	leg->session = session;
	leg->ops = ops;
	leg->host = host;
	leg->role = role;
	leg->recv.handler = leg_recv_done;
	sendq_init(&leg->to_server, leg_sent);
	proto_stream_init(&leg->stream);
	leg_stmts_init(&leg->stmts);
	base_list_init(&leg->parked_link);
	base_list_init(&leg->hold_link);
	base_list_init(&leg->link);
	leg->tx_status = 'I';
	return leg;
}

bool leg_is_reapable(const struct leg *leg)
{
	return !leg->conn && !leg->recv.is_armed && !leg->to_server.op.is_armed && !leg->wire.op.is_armed &&
	       !leg->is_request_pending;
}

void leg_destroy(struct leg *leg)
{
	TERN_ASSERT(leg_is_reapable(leg));
	TERN_ASSERT(!base_list_is_linked(&leg->parked_link));
	struct ring *ring = &leg->host->ring;
	sendq_deinit(&leg->to_server, ring);
	leg_tls_clear(leg);
	proto_stream_deinit(&leg->stream);
	leg_stmts_deinit(&leg->stmts);
	if (base_list_is_linked(&leg->link))
		base_list_remove(&leg->link);
	if (base_list_is_linked(&leg->hold_link))
		base_list_remove(&leg->hold_link);
	free(leg);
}

void leg_attach(struct leg *leg, struct pool_conn *conn)
{
	TERN_ASSERT(!leg->conn && conn->state == POOL_CONN_USED);
	TERN_ASSERT(!leg->is_request_pending && !leg->recv.is_armed && !leg->to_server.op.is_armed);
	TERN_ASSERT(proto_stream_is_at_boundary(&leg->stream));
	leg->conn = conn;
	__atomic_store_n(&conn->holder, leg->session, __ATOMIC_RELAXED); /* SHOW SERVERS' link */
	leg->to_server.fd = conn->fd;
	leg->to_server.filter = conn->tls ? leg_tls_encrypt : NULL;
	leg->is_failed = false;
	leg->is_dropping = false;
	leg->is_release_after_recv = false;
	leg->is_recv_paused = false;
	leg->tx_status = 'I';
}

void leg_resume(struct leg *leg)
{
	if (!leg->conn || leg->recv.is_armed || leg->is_dropping || leg->is_starved || leg->is_recv_paused ||
	    leg->is_release_after_recv)
		return;
	if (leg->downstream && sendq_is_full(leg->downstream, SENDQ_HIGH_BYTES)) {
		leg->is_recv_paused = true; /* the client reads slower than the server writes */
		return;
	}
	ring_recv(&leg->host->ring, &leg->recv, leg->conn->fd, HOST_BUFFERS_SERVER);
}

bool leg_is_idle(const struct leg *leg)
{
	return leg->conn && !leg->is_failed && !leg->is_dropping && leg->tx_status == 'I' && leg->pending_ready == 0 &&
	       !leg->is_unsynced && !leg->copy.is_copy_in && leg->stmts.replies.count == 0 && sendq_is_idle(&leg->to_server) &&
	       leg_tls_is_idle(leg) && proto_stream_is_at_boundary(&leg->stream);
}

/* The leg lets go of its connection (the caller gives it back or discards it). */
static struct pool_conn *leg_detach(struct leg *leg)
{
	struct pool_conn *conn = leg->conn;
	__atomic_store_n(&conn->holder, NULL, __ATOMIC_RELAXED);
	leg->conn = NULL;
	leg->to_server.fd = -1;
	leg->to_server.filter = NULL;
	leg->is_release_after_recv = false;
	leg->is_recv_paused = false;
	return conn;
}

bool leg_release(struct leg *leg)
{
	TERN_ASSERT(leg_is_idle(leg));
	if (leg->recv.is_armed) {
		leg->is_release_after_recv = true;
		ring_cancel(&leg->host->ring, &leg->recv);
		return false;
	}
	host_local_put(leg->host, leg_detach(leg));
	return true;
}

void leg_drop(struct leg *leg)
{
	if (!leg->conn || leg->is_dropping)
		return;
	leg->is_dropping = true;
	leg->is_failed = true; /* a dropped connection is never reused, whatever it was doing */
	/* Ends the armed receive and send on it; their completions come back with 0 or an error. */
	shutdown(leg->conn->fd, SHUT_RDWR);
}

bool leg_reap(struct leg *leg)
{
	if (!leg->conn)
		return true;
	if (!leg->is_dropping || leg->recv.is_armed || leg->to_server.op.is_armed || leg->wire.op.is_armed)
		return false;
	struct pool_conn *conn = leg_detach(leg);
	leg->is_dropping = false; /* dropped: is_failed says it was */
	sendq_clear(&leg->to_server, &leg->host->ring);
	leg_tls_clear(leg);
	pool_conn_discard(leg->host->runtime->pool, conn);
	return true;
}

int leg_push_hidden(struct leg *leg, const void *query, uint32_t len)
{
	int rc = sendq_push_copy(&leg->to_server, query, len);
	if (rc < 0)
		return rc;
	leg_expect_ready(leg, base_now_ns());
	leg->hidden_ready++;
	return 0;
}

int leg_push_hidden_query_front(struct leg *leg, const char *sql, uint32_t len)
{
	uint8_t *msg = malloc(PROTO_HEADER_LEN + (size_t)len + 1);
	if (!msg)
		return -ENOMEM;
	msg[0] = PROTO_FE_QUERY;
	proto_write_u32(msg + 1, len + 5);
	memcpy(msg + PROTO_HEADER_LEN, sql, len);
	msg[PROTO_HEADER_LEN + len] = '\0';
	int rc = sendq_push_front_copy(&leg->to_server, msg, PROTO_HEADER_LEN + len + 1);
	free(msg);
	if (rc < 0)
		return rc;
	leg_expect_ready(leg, base_now_ns());
	leg->hidden_ready++;
	return 0;
}

void leg_fail(struct leg *leg, enum leg_fault fault)
{
	if (leg->is_dropping) {
		(void)leg_reap(leg);
		return;
	}
	leg_drop(leg);
	leg->ops->on_lost(leg, fault);
	(void)leg_reap(leg);
}

int leg_hold_queued(struct leg *leg) { return sendq_own_copies(&leg->to_server, &leg->host->ring); }

static void leg_recv_done(struct ring_op *op, int res, uint32_t flags)
{
	struct leg *leg = TERN_CONTAINER_OF(op, struct leg, recv);
	struct ring *ring = &leg->host->ring;
	TERN_ASSERT(leg->conn != NULL);
	if (res > 0) {
		TERN_ASSERT(ring_completion_has_buffer(flags));
		uint16_t bid = ring_completion_buffer_id(flags);
		const uint8_t *data = ring_buffer_data(ring, bid);
		int rc = leg->is_dropping  ? 0
			 : leg->conn->tls ? leg_tls_on_ciphertext(leg, data, (uint32_t)res)
					   : leg->ops->on_bytes(leg, bid, data, (uint32_t)res);
		ring_buffer_unref(ring, bid);
		if (rc == LEG_TLS_FAILED) {
			leg_fail(leg, LEG_FAULT_CLOSED);
			return;
		}
		if (rc < 0) {
			TERN_WARN("server connection pid %u sent a malformed or oversized message; closing it",
				  leg->conn ? leg->conn->backend_pid : 0);
			leg_fail(leg, LEG_FAULT_MALFORMED);
			return;
		}
	}
	if (leg->is_dropping || (res <= 0 && res != -ENOBUFS && res != -ECANCELED)) {
		leg_fail(leg, LEG_FAULT_CLOSED); /* a dropping leg is only reaped */
		return;
	}
	if (res == -ENOBUFS) {
		if (leg->is_release_after_recv) { /* the cancelled receive ended this way: release as planned */
			leg->is_release_after_recv = false;
			leg->ops->on_progress(leg);
			if (!leg->conn)
				return;
		}
		leg->is_starved = true;
		leg->ops->on_starved(leg);
		return;
	}
	leg->is_release_after_recv = false;
	leg->ops->on_progress(leg);
	leg_resume(leg);
}

static void leg_sent(struct ring_op *op, int res, uint32_t flags)
{
	(void)flags;
	struct sendq *q = TERN_CONTAINER_OF(op, struct sendq, op);
	struct leg *leg = TERN_CONTAINER_OF(q, struct leg, to_server);
	struct ring *ring = &leg->host->ring;
	if (res <= 0) {
		sendq_clear(q, ring);
		leg_fail(leg, LEG_FAULT_CLOSED);
		return;
	}
	sendq_sent(q, ring, (uint32_t)res);
	if (!sendq_is_empty(q))
		host_mark_dirty(leg->host, q);
	leg->ops->on_progress(leg);
}

