/*
 * TLS toward the client. The session keeps speaking plaintext: its client queue (to_client) holds
 * what the client must read, as without TLS, and the queue's filter encrypts it at flush time into a
 * second queue (wire) that the socket sends. Received ciphertext is decrypted into a stack buffer
 * and handed to the phase's handler with RING_NO_BUFFER, so the relay copies what it forwards.
 *
 * Memory per TLS client: the OpenSSL connection (tls.h) plus at most TLS_WIRE_HIGH bytes of
 * ciphertext in the wire queue; plaintext waits in to_client under the usual back pressure.
 */
#include "session.h"
#include "tls.h"
#include "host.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ciphertext queued to the socket above which no more plaintext is encrypted: two full records keep a
 * loopback socket busy while the rest waits, as plaintext, under the relay's back pressure. */
#define TLS_WIRE_HIGH (2u * TLS_RECORD_CIPHERTEXT_MAX)

struct session_tls {
	struct session *s;
	struct tls_conn *conn;
	struct sendq wire;    /* ciphertext (after the SSLRequest's answer 'S', in the clear) to the socket */
	bool is_direct;       /* began with a ClientHello, not an SSLRequest: ALPN must be "postgresql" */
	bool is_checked;      /* the finished handshake was checked */
};

/* Moves what OpenSSL has to send into the wire queue. 0 or -ENOMEM. */
static int tls_take_output(struct session_tls *t)
{
	uint32_t len = tls_conn_ciphertext_len(t->conn);
	if (len == 0)
		return 0;
	uint8_t *block = malloc(len);
	if (!block)
		return -ENOMEM;
	tls_conn_take_ciphertext(t->conn, block, len);
	return sendq_push_owned(&t->wire, block, len);
}

/* A TLS failure: the alert OpenSSL queued goes out, the session ends. The client's close_notify ends it
 * in order: session_end answers with tern's own (tls_flush). */
static void tls_fail(struct session *s, int rc)
{
	struct session_tls *t = s->tls;
	if (rc == -ESHUTDOWN) {
		session_end(s, SESSION_END_CLIENT_CLOSED);
		return;
	}
	TERN_INFO("client %s", rc == -ENOMEM ? "TLS: out of memory" : tls_conn_error_text(t->conn));
	if (tls_take_output(t) == 0)
		sendq_flush(&t->wire, &s->host->ring);
	session_end(s, rc == -ENOMEM ? SESSION_END_OUT_OF_MEMORY : SESSION_END_TLS_FAILED);
}

/* to_client's filter: encrypts its plaintext into the wire queue, and sends. */
static void tls_encrypt(struct sendq *q, struct ring *ring)
{
	struct session *s = TERN_CONTAINER_OF(q, struct session, to_client);
	struct session_tls *t = s->tls;
	uint8_t plain[TLS_RECORD_PLAINTEXT_MAX];
	int rc = 0;
	/* The welcome waits for the handshake (nothing is queued before it in practice). */
	while (q->count > 0 && rc == 0 && tls_conn_is_handshake_done(t->conn) &&
	       t->wire.bytes + tls_conn_ciphertext_len(t->conn) < TLS_WIRE_HIGH) {
		/* A slice of a record or more is encrypted where it lies; smaller messages are gathered to
		 * share a record (one seal and one header for a batch of replies). */
		uint32_t len;
		const uint8_t *p = sendq_front(q, &len);
		if (len < sizeof(plain)) {
			len = sendq_peek_copy(q, plain, sizeof(plain));
			p = plain;
		}
		int n = tls_conn_write_plaintext(t->conn, p, len);
		if (n > 0)
			sendq_sent(q, ring, (uint32_t)n);
		else
			rc = n < 0 ? n : tls_take_output(t); /* 0: OpenSSL's output is full */
	}
	if (rc == 0)
		rc = tls_take_output(t);
	/* An ended session's last words are followed by close_notify (queued once: tls_conn_shutdown does
	 * nothing the second time). */
	if (rc == 0 && s->phase == SESSION_CLOSING && q->count == 0 && !s->client_eof) {
		tls_conn_shutdown(t->conn);
		rc = tls_take_output(t);
	}
	if (rc < 0) {
		sendq_clear(q, ring); /* undeliverable: the session ends (or has ended) */
		if (s->phase != SESSION_CLOSING)
			tls_fail(s, rc);
		return;
	}
	sendq_flush(&t->wire, ring);
}

static void tls_flush(struct session *s) { tls_encrypt(&s->to_client, &s->host->ring); }

static void tls_wire_sent(struct ring_op *op, int res, uint32_t flags)
{
	(void)flags;
	struct sendq *wire = TERN_CONTAINER_OF(op, struct sendq, op);
	struct session_tls *t = TERN_CONTAINER_OF(wire, struct session_tls, wire);
	struct session *s = t->s;
	struct ring *ring = &s->host->ring;
	if (res <= 0) {
		sendq_clear(wire, ring);
		sendq_clear(&s->to_client, ring);
		s->client_eof = true;
		session_end(s, SESSION_END_CLIENT_IO_ERROR);
		return;
	}
	sendq_sent(wire, ring, (uint32_t)res);
	tls_encrypt(&s->to_client, ring);
	session_client_drained(s);
}

static const struct session_transport tls_transport;

int session_tls_start(struct session *s, const struct tls_context *ctx, bool is_direct)
{
	TERN_ASSERT(!s->tls);
	struct session_tls *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (tls_conn_create(ctx, &t->conn) < 0) {
		free(t);
		return -ENOMEM;
	}
	t->s = s;
	t->is_direct = is_direct;
	sendq_init(&t->wire, tls_wire_sent);
	t->wire.fd = s->client_fd;
	s->tls = t;
	s->transport = &tls_transport;
	s->to_client.filter = tls_encrypt;
	if (is_direct)
		return 0;
	/* 'S' goes out in the clear, ahead of any handshake record: straight into the wire queue. */
	int rc = sendq_push_copy(&t->wire, "S", 1);
	if (rc == 0)
		sendq_flush(&t->wire, &s->host->ring);
	return rc;
}

/* The handshake just finished: a direct one must have chosen PostgreSQL's ALPN. False ended the session. */
static bool tls_check_handshake(struct session *s)
{
	struct session_tls *t = s->tls;
	t->is_checked = true;
	TERN_DEBUG("client TLS: %s %s%s", tls_conn_protocol_name(t->conn), tls_conn_cipher_name(t->conn),
		   t->is_direct ? " (direct)" : "");
	if (t->is_direct && !tls_conn_is_alpn_postgresql(t->conn)) {
		/* As PostgreSQL 17: a direct handshake without ALPN could be a confused HTTPS client. */
		session_end_with_error(s, SESSION_END_PROTOCOL_VIOLATION, "08P01",
				       "received direct TLS connection request without ALPN protocol negotiation extension");
		return false;
	}
	/* The welcome and anything else queued while the handshake ran can go out now. */
	session_mark_dirty(s, &s->to_client);
	return true;
}

void session_tls_on_ciphertext(struct session *s, const uint8_t *data, uint32_t len)
{
	struct session_tls *t = s->tls;
	uint8_t plain[TLS_RECORD_PLAINTEXT_MAX];
	while (s->phase != SESSION_CLOSING) {
		int fed = 0;
		if (len > 0) {
			fed = tls_conn_feed_ciphertext(t->conn, data, len);
			if (fed < 0) {
				tls_fail(s, fed);
				return;
			}
			data += fed;
			len -= (uint32_t)fed;
		}
		int n = tls_conn_read_plaintext(t->conn, plain, sizeof(plain));
		int rc = tls_take_output(t); /* handshake records, tickets, alerts */
		if (n < 0 || rc < 0) {
			tls_fail(s, n < 0 ? n : rc);
			return;
		}
		if (!t->is_checked && tls_conn_is_handshake_done(t->conn) && !tls_check_handshake(s))
			return;
		if (n > 0)
			session_on_client_bytes(s, RING_NO_BUFFER, plain, (uint32_t)n);
		else if (len == 0)
			break; /* everything fed is read: wait for more ciphertext */
		else if (fed == 0) { /* full and nothing to read: cannot happen while a record fits (tls.h) */
			tls_fail(s, -EPROTO);
			return;
		}
	}
	if (!sendq_is_empty(&t->wire))
		sendq_flush(&t->wire, &s->host->ring);
}

static bool tls_is_sending(const struct session *s)
{
	return s->tls->wire.op.is_armed || !sendq_is_empty(&s->tls->wire);
}

static bool tls_is_armed(const struct session *s) { return s->tls->wire.op.is_armed; }

size_t session_tls_channel_binding(const struct session *s, const uint8_t **data)
{
	*data = NULL;
	return s->tls ? tls_conn_channel_binding(s->tls->conn, data) : 0;
}

bool session_tls_certificate_names_user(struct session *s)
{
	char cn[POOL_NAME_LEN_MAX];
	if (s->tls && tls_conn_client_common_name(s->tls->conn, cn, sizeof(cn)) && strcmp(cn, s->user) == 0)
		return true;
	char message[POOL_NAME_LEN_MAX + 64];
	snprintf(message, sizeof(message), "certificate authentication failed for user \"%s\"", s->user);
	TERN_INFO("client %s: %s (%s)", s->user, message,
		  s->tls && tls_conn_has_client_certificate(s->tls->conn) ? "its certificate names another user"
									  : "no verified client certificate");
	session_end_with_error(s, SESSION_END_AUTH_FAILED, "28000", message);
	return false;
}

void session_tls_describe(const struct session *s, char *out, size_t size)
{
	out[0] = '\0';
	if (s->tls && tls_conn_is_handshake_done(s->tls->conn))
		snprintf(out, size, "%s/%s", tls_conn_protocol_name(s->tls->conn), tls_conn_cipher_name(s->tls->conn));
}

static void tls_destroy(struct session *s)
{
	struct session_tls *t = s->tls;
	TERN_ASSERT(!t->wire.op.is_armed);
	sendq_deinit(&t->wire, &s->host->ring);
	tls_conn_destroy(t->conn);
	free(t);
	s->tls = NULL;
	s->transport = NULL;
}

static const struct session_transport tls_transport = {
	.on_received = session_tls_on_ciphertext,
	.flush = tls_flush,
	.is_sending = tls_is_sending,
	.is_armed = tls_is_armed,
	.destroy = tls_destroy,
};
