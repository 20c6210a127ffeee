/* The relay: client messages to a leg and a leg's messages to the client, scanned by header and
 * forwarded by reference. The relay counts what each leg owes (ReadyForQuery, Syncs, the hidden answers
 * to tern's own queries) and asks the observers (dispatch.h) about the messages they registered; it
 * knows nothing of what they keep. ReadyForQuery ends a transaction: the leg may go back. */
#include "dispatch.h"
#include "session.h"

#include <errno.h>
#include <string.h>

/* Returned by on_message to stop the scan at a client's Terminate. */
#define RELAY_STOP_TERMINATE (-ECONNRESET)
/* A message type tern does not know after login: the server would close the connection; tern must
 * not forward what it cannot account for. */
#define RELAY_UNKNOWN_TYPE (-EBADMSG)
/* Returned by on_message when routing took a query (route.c): the rest of the chunk waits. */
#define RELAY_STOP_ROUTED (-EINPROGRESS)

struct relay_chunk {
	struct session *s;
	struct leg *leg; /* client → server: the leg the chunk's messages go to; server → client: the sender */
	uint16_t buffer_id;
	const uint8_t *data;
	int error; /* a queue push failed (-ENOMEM, -ENOBUFS): the scan goes on, the session ends after it */
	bool is_routed; /* client → server: a query routing placed already (route_dispatch): not held again */
};

/* Why a client's chunk ends its session: a scan's or a push's error. */
static enum session_end_reason relay_client_reason(int rc)
{
	switch (rc) {
	case -EMSGSIZE:
		return SESSION_END_FRAME_TOO_LARGE;
	case -ENOMEM:
		return SESSION_END_OUT_OF_MEMORY;
	case -E2BIG:
		return SESSION_END_TOO_MANY_STATEMENTS;
	case -ENOBUFS:
		return SESSION_END_PIPELINE_TOO_DEEP;
	case RELAY_STOP_TERMINATE:
		return SESSION_END_CLIENT_TERMINATE;
	default:
		return SESSION_END_PROTOCOL_VIOLATION;
	}
}

/* ---- client → server ---- */

/* What the leg owes for a client message the observers left to the relay. */
static unsigned relay_client_count(struct session *s, struct leg *leg, uint8_t type)
{
	switch (type) {
	case PROTO_FE_TERMINATE:
		return PROTO_INSPECT; /* not forwarded: the server connection outlives the client */
	case PROTO_FE_QUERY:
	case PROTO_FE_FUNCTION_CALL:
		leg_expect_ready(leg, s->client_active_ns);
		s->parts->route.note_request(s, leg);
		return PROTO_FORWARD;
	case PROTO_FE_SYNC:
		leg->is_unsynced = false;
		if (!leg->copy.is_copy_in) /* the server ignores a Sync in copy-in: no ReadyForQuery comes */
			leg_expect_ready(leg, s->client_active_ns);
		s->parts->route.note_request(s, leg);
		return PROTO_FORWARD;
	case PROTO_FE_EXECUTE:
	case PROTO_FE_PARSE:
	case PROTO_FE_BIND:
	case PROTO_FE_DESCRIBE:
	case PROTO_FE_CLOSE:
	case PROTO_FE_FLUSH:
		leg->is_unsynced = true;
		return PROTO_FORWARD;
	case PROTO_FE_COPY_DATA:
	case PROTO_FE_COPY_DONE:
	case PROTO_FE_COPY_FAIL:
		return PROTO_FORWARD; /* outside copy-in the server ignores them, by the protocol */
	default:
		return PROTO_INSPECT; /* refused in on_message, before a byte of it is forwarded */
	}
}

/* The observers' and the relay's part in a client message going to leg: what becomes of it. */
static unsigned relay_client_admit(struct session *s, struct leg *leg, uint8_t type)
{
	s->parts->route.note_admit(s); /* a statement after the BEGIN: the transaction stays where it is */
	uint32_t mask = dispatch_client_mask(s->observers_on, type);
	s->scan.client_readers = 0; /* (admit comes again for a Query routing held) */
	if (mask) {
		unsigned taken = dispatch_client_type(s, leg, type, mask, &s->scan.client_readers, &s->scan.client_taker);
		if (taken != OBSERVER_PASS)
			return taken;
	}
	unsigned action = relay_client_count(s, leg, type);
	if (s->scan.client_readers)
		/* Observers read a query's text (and digests a Parse or Bind they did not take) only when short; a
		 * long one passes unread, which they allow for. */
		action |= type == PROTO_FE_QUERY || type == PROTO_FE_PARSE || type == PROTO_FE_BIND ? PROTO_INSPECT_SMALL
													  : PROTO_INSPECT;
	return action;
}

static unsigned relay_client_on_type(void *ctx, uint8_t type)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	struct leg *leg = chunk->leg;
	s->scan.client_readers = 0; /* what read or took the message before this one has nothing of this one */
	s->scan.client_taker = 0;
	if (s->parts->replay.is_answering(s))
		return s->parts->replay.answer_type(type); /* its transaction was lost: tern answers */
	if (leg->is_skipping_to_sync && type != PROTO_FE_SYNC && type != PROTO_FE_TERMINATE)
		return 0; /* as the server would after an error tern made up */
	if (type == PROTO_FE_SYNC)
		leg->is_skipping_to_sync = false;
	if (type == PROTO_FE_FLUSH && leg->role == LEG_PRIMARY)
		s->parts->replay.flush(s, leg); /* the client asks for what it is owed so far: tern's own replies too */
	if (type == PROTO_FE_QUERY && !chunk->is_routed)
		return PROTO_HOLD | PROTO_HOLD_SMALL; /* routing reads its text first (relay_client_query) */
	if (type == PROTO_FE_SYNC && s->parts->route.is_replica_tx(s))
		return PROTO_HOLD; /* one request at a time (relay_client_tx_sync) */
	return relay_client_admit(s, leg, type);
}

static void relay_client_forward(void *ctx, uint32_t offset, uint32_t len)
{
	struct relay_chunk *chunk = ctx;
	int rc = sendq_push_buffer(&chunk->leg->to_server, &chunk->s->host->ring, chunk->buffer_id,
				   chunk->data + offset, len);
	if (rc < 0)
		chunk->error = rc;
}

/* A message's header (for a body of body_len) and its first len bytes, copied to the chunk's leg. */
static void relay_client_push_copy(struct relay_chunk *chunk, uint8_t type, uint32_t body_len, const uint8_t *data,
				   uint32_t len)
{
	uint8_t header[PROTO_HEADER_LEN] = {type};
	proto_write_u32(header + 1, body_len + 4);
	int rc = sendq_push_copy(&chunk->leg->to_server, header, sizeof(header));
	if (rc == 0 && len > 0)
		rc = sendq_push_copy(&chunk->leg->to_server, data, len);
	if (rc < 0)
		chunk->error = rc;
}

/* A message the relay held, to the chunk's leg: by reference when it lies in the chunk, else copied. */
static void relay_client_forward_held(struct relay_chunk *chunk, uint8_t type, const uint8_t *body, uint32_t len)
{
	uint32_t offset;
	if (proto_stream_message_offset(&chunk->s->client_stream, &offset))
		relay_client_forward(chunk, offset, PROTO_HEADER_LEN + len);
	else
		relay_client_push_copy(chunk, type, len, body, len);
}

/* A complete client message to the observers that read it (s->scan.client_readers). */
static int relay_client_read(struct relay_chunk *chunk, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct session *s = chunk->s;
	if (!s->scan.client_readers)
		return 0;
	struct observer_message m = {
		.type = type, .body = body, .len = len, .buffer_id = chunk->buffer_id, .chunk = chunk->data};
	return dispatch_client_message(s, chunk->leg, &m, s->scan.client_readers);
}

/* A Query held for routing: tern answers it (SET tern.*), routing takes it for a replica (the scan stops
 * there), or it goes to the chunk's leg as any message would, with the write-LSN probe behind it when
 * routing asks for one. */
static int relay_client_query(struct relay_chunk *chunk, const uint8_t *body, uint32_t len)
{
	struct session *s = chunk->s;
	uint8_t probe = 0;
	enum session_query_route routed = s->parts->route.query(s, body, len, &probe);
	switch (routed) {
	case SESSION_QUERY_ANSWERED:
		return 0;
	case SESSION_QUERY_TAKEN:
		return RELAY_STOP_ROUTED;
	case SESSION_QUERY_ADMIT:
	case SESSION_QUERY_ADMIT_LAST:
		break;
	}
	unsigned action = relay_client_admit(s, chunk->leg, PROTO_FE_QUERY);
	TERN_ASSERT(action & PROTO_FORWARD); /* no observer takes a Query over */
	relay_client_forward_held(chunk, PROTO_FE_QUERY, body, len);
	s->parts->route.query_sent(s);
	int rc = relay_client_read(chunk, PROTO_FE_QUERY, body, len);
	if (rc == 0 && probe && chunk->error == 0)
		chunk->error = s->parts->route.push_probe(s, chunk->leg, probe);
	if (rc == 0 && routed == SESSION_QUERY_ADMIT_LAST) {
		s->parts->route.tx_request_sent(s);
		return RELAY_STOP_ROUTED; /* the rest waits for its answer */
	}
	return rc;
}

/* A Sync of a read-only transaction on a replica: it ends one request; the rest waits for its answer. */
static int relay_client_tx_sync(struct relay_chunk *chunk, const uint8_t *body, uint32_t len)
{
	struct session *s = chunk->s;
	unsigned action = relay_client_admit(s, chunk->leg, PROTO_FE_SYNC);
	if (action & PROTO_FORWARD)
		relay_client_forward_held(chunk, PROTO_FE_SYNC, body, len);
	int rc = relay_client_read(chunk, PROTO_FE_SYNC, body, len);
	if (rc < 0)
		return rc;
	s->parts->route.tx_request_sent(s);
	return RELAY_STOP_ROUTED;
}

static int relay_client_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	if (type == PROTO_FE_TERMINATE)
		return RELAY_STOP_TERMINATE;
	if (s->parts->replay.is_answering(s))
		return s->parts->replay.answer_message(s, type, body, len);
	if (type == PROTO_FE_QUERY && !chunk->is_routed)
		return relay_client_query(chunk, body, len);
	if (type == PROTO_FE_SYNC && s->parts->route.is_replica_tx(s))
		return relay_client_tx_sync(chunk, body, len);
	if (s->scan.client_readers)
		return relay_client_read(chunk, type, body, len);
	return RELAY_UNKNOWN_TYPE;
}

/* The head of a long message an observer took over (a Bind: names rewritten, parameters streamed), or
 * of a Query too long for routing to read: it goes to the chunk's leg, the rest by reference. */
static int relay_client_on_head(void *ctx, uint8_t type, const uint8_t *head, uint32_t head_len, uint32_t body_len)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	if (s->parts->replay.is_answering(s))
		return s->parts->replay.answer_message(s, type, head, head_len); /* 0: the rest is dropped */
	if (type != PROTO_FE_QUERY || chunk->is_routed)
		return dispatch_client_head(s, chunk->leg, s->scan.client_taker, type, head, head_len, body_len);
	unsigned action = relay_client_admit(s, chunk->leg, type);
	TERN_ASSERT(action & PROTO_FORWARD);
	s->parts->unread_query(s, chunk->leg);
	relay_client_push_copy(chunk, type, body_len, head, head_len);
	return PROTO_FORWARD; /* observers read no query this long (they allow for it) */
}

static const struct proto_scan_ops relay_client_ops = {
	.on_type = relay_client_on_type,
	.on_message = relay_client_on_message,
	.forward = relay_client_forward,
	.on_head = relay_client_on_head,
};

void session_relay_feed(struct session *s, struct leg *leg, bool is_routed, uint16_t buffer_id, const uint8_t *data,
			uint32_t len)
{
	struct relay_chunk chunk = {.s = s, .leg = leg, .buffer_id = buffer_id, .data = data, .is_routed = is_routed};
	uint64_t frame_max = runtime_config(s->host->runtime)->max_client_frame_bytes;
	int rc = proto_stream_feed(&s->client_stream, data, len, frame_max, &relay_client_ops, &chunk);
	bool is_taken = rc == RELAY_STOP_ROUTED;
	if (is_taken) /* the rest waits for the routed read's answer */
		rc = session_backlog_append(s, data + s->client_stream.stop_offset, len - s->client_stream.stop_offset);
	if (rc == 0)
		rc = chunk.error ? chunk.error : s->scan.hook_error;
	if (rc < 0) {
		session_end(s, relay_client_reason(rc));
		return;
	}
	session_leg_queue_grew(s, leg);
	session_assert_invariants(s);
}

void session_relay_feed_held(struct session *s, struct leg *leg, bool is_routed, const uint8_t *data, uint32_t len)
{
	session_relay_feed(s, leg, is_routed, RING_NO_BUFFER, data, len);
}

void session_relay_on_client_chunk(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	s->client_active_ns = base_now_ns();
	if (s->parts->replay.takes_chunk(s, data, len)) /* a replay runs: what it sends waits for the verdict */
		return;
	if (s->parts->route.chunk(s, buffer_id, data, len)) /* routing holds the client's traffic */
		return;
	session_relay_feed(s, session_primary(s), false, buffer_id, data, len);
	s->parts->route.fed(s); /* a query routing took in it: to a replica, or to wait for one */
}

/* ---- server → client ---- */

static unsigned relay_server_on_type(void *ctx, uint8_t type)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	struct leg *leg = chunk->leg;
	leg->server_readers = 0; /* (the message's state is the leg's: its end may come in a later receive) */
	leg->server_claimer = OBSERVER_COUNT;
	if (!leg->conn)
		return 0; /* let go in this chunk (a message before this one ended the session): the rest is nobody's */
	if (!proto_be_is_known(type)) {
		chunk->error = -EPROTO; /* garbage where a message begins: the connection is closed (a lost server) */
		return 0;
	}
	unsigned counted = type == PROTO_BE_READY ? PROTO_INSPECT : 0; /* the relay counts every ReadyForQuery */
	if (leg->hidden_ready > 0) /* the answer to tern's own query: the observer that asked reads it */
		return dispatch_hidden_type(s, leg, type) | counted; /* the client is shown nothing */
	uint32_t mask = dispatch_server_mask(s->observers_on, type);
	unsigned action = PROTO_FORWARD | counted;
	if (mask) {
		unsigned taken = dispatch_server_type(s, leg, type, mask, &leg->server_readers);
		action = taken != OBSERVER_PASS ? taken : action | (leg->server_readers ? PROTO_INSPECT : 0);
	}
	/* (what an observer hides, tern's own Parse's answer, is no part of the client's answer) */
	if (leg->watchers && (action & PROTO_FORWARD))
		action = dispatch_show_type(s, leg, type, action, &leg->server_claimer);
	return action;
}

/* A ReadyForQuery: one less owed (and one less hidden, when it answers tern's own query). A polar
 * server's carries more after the status byte (observer_polar reads it). */
static int relay_count_ready(struct leg *leg, const uint8_t *body, uint32_t len)
{
	if (len < 1 || (len != 1 && !leg->conn->is_polar) || (body[0] != 'I' && body[0] != 'T' && body[0] != 'E'))
		return -EPROTO;
	leg->tx_status = (char)body[0];
	if (leg->pending_ready > 0)
		leg->pending_ready--;
	if (leg->hidden_ready > 0)
		leg->hidden_ready--;
	else if (leg->probe_behind > 0 && --leg->probe_behind == 0) {
		leg->hidden_ready++; /* the client's last reply before tern's probe: the probe's answer is next */
		leg->is_probe_answering = true;
	}
	leg->ready_ns = base_now_ns();
	if (leg->pending_ready > 0)
		leg->request_sent_ns = leg->ready_ns; /* the next answer's clock (query_timeout and the like) */
	return 0; /* the release, if due, comes after the whole chunk is scanned */
}

static int relay_server_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	struct leg *leg = chunk->leg;
	struct observer_message m = {.type = type,
				     .body = body,
				     .len = len,
				     .buffer_id = chunk->buffer_id,
				     .chunk = chunk->data,
				     .is_hidden = leg->hidden_ready > 0};
	if (type == PROTO_BE_READY) {
		int rc = relay_count_ready(leg, body, len);
		if (rc < 0)
			return rc;
	}
	if (m.is_hidden)
		return dispatch_hidden_message(s, leg, &m);
	if (leg->server_claimer < OBSERVER_COUNT) {
		int rc = dispatch_show(s, leg, leg->server_claimer, &m);
		if (rc < 0) {
			chunk->error = rc;
			return 0;
		}
	}
	return leg->server_readers ? dispatch_server_message(s, leg, &m, leg->server_readers) : 0;
}

static void relay_server_forward(void *ctx, uint32_t offset, uint32_t len)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	if (s->phase == SESSION_CLOSING)
		return; /* the client is gone or going: what the server says (a reset's answer) stays here */
	int rc = sendq_push_buffer(&s->to_client, &s->host->ring, chunk->buffer_id, chunk->data + offset, len);
	if (rc < 0) {
		chunk->error = rc;
		return;
	}
	chunk->leg->to_client_bytes += len;
	if (chunk->leg->watchers)
		dispatch_shown(s, chunk->leg, chunk->data + offset, len);
	session_mark_dirty(s, &s->to_client);
}

static const struct proto_scan_ops relay_server_ops = {
	.on_type = relay_server_on_type,
	.on_message = relay_server_on_message,
	.forward = relay_server_forward,
};

int session_relay_on_server_bytes(struct leg *leg, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	struct session *s = leg->session;
	struct relay_chunk chunk = {.s = s, .leg = leg, .buffer_id = buffer_id, .data = data};
	int rc = proto_stream_feed(&leg->stream, data, len, runtime_config(s->host->runtime)->max_backend_frame_bytes,
				   &relay_server_ops, &chunk);
	if (rc == 0 && chunk.error == -EPROTO)
		return -EPROTO; /* a message type no server sends */
	if (rc == 0 && chunk.error < 0) {
		session_end(s, chunk.error == -ENOBUFS ? SESSION_END_PIPELINE_TOO_DEEP : SESSION_END_OUT_OF_MEMORY);
		return 0; /* the server did nothing wrong: its connection is settled as the session ends */
	}
	return rc < 0 ? -EPROTO : 0;
}

void session_relay_attach(struct session *s, struct leg *leg, struct pool_conn *conn)
{
	leg_attach(leg, conn);
	leg->watchers = dispatch_watchers_for(s, leg);
	if (s->client_recv_paused)
		session_client_pace(s); /* paused while parked: the server drains the queue now */
	if (s->phase == SESSION_LOGIN_WAIT) {
		session_login_on_backend(s);
	} else if (dispatch_attach(s, leg) < 0) { /* the client's state, ahead of its queued messages */
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	if (!sendq_is_empty(&leg->to_server))
		session_mark_dirty(s, &leg->to_server);
	session_try_release(s, leg);
	leg_resume(leg);
	session_assert_invariants(s);
}
