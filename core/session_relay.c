/* The relay half of a session: client messages to the server and server messages to the client,
 * scanned by header and forwarded by reference; ReadyForQuery ends a transaction. */
#include "session.h"
#include "host.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Returned by on_message to stop the scan at a client's Terminate. */
#define RELAY_STOP_TERMINATE (-ECONNRESET)

struct relay_chunk {
	struct session *s;
	struct leg *leg; /* client → server: the leg the chunk's messages go to; server → client: the sender */
	uint16_t buffer_id;
	const uint8_t *data;
	bool out_of_memory;
};

/* ---- client → server ---- */

/* A message type tern does not know after login: the server would close the connection; tern must
 * not forward what it cannot account for. */
#define RELAY_UNKNOWN_TYPE (-EBADMSG)

static void relay_expect(struct relay_chunk *chunk, uint8_t kind)
{
	if (session_stmts_expect(chunk->leg, kind) < 0)
		chunk->out_of_memory = true;
}

/* Transaction pooling with named-statement tracking: what tern holds, answers or drops; the replies
 * the server will owe. Returns UINT32_MAX when the type is left to the untracked rules. */
static unsigned relay_client_tracked_type(struct relay_chunk *chunk, uint8_t type)
{
	struct session *s = chunk->s;
	struct leg *leg = chunk->leg;
	if (leg->is_skipping_to_sync && type != PROTO_FE_SYNC && type != PROTO_FE_TERMINATE)
		return 0; /* as the server would after the error tern made up */
	switch (type) {
	case PROTO_FE_BIND:
		return PROTO_HOLD | PROTO_HOLD_HEAD; /* names rewritten, parameters streamed */
	case PROTO_FE_PARSE:
	case PROTO_FE_DESCRIBE:
	case PROTO_FE_CLOSE:
		return PROTO_HOLD;
	case PROTO_FE_SYNC:
		leg->is_skipping_to_sync = false;
		if (session_stmts_is_local(leg)) {
			session_stmts_answer_sync(s); /* a batch of Parse and Close alone needs no server */
			return 0;
		}
		if (!leg->is_copy_in)
			relay_expect(chunk, STMT_REPLY_SYNC);
		break;
	case PROTO_FE_FLUSH:
		if (session_stmts_is_local(leg))
			return 0;
		break;
	case PROTO_FE_EXECUTE:
		if (s->is_portal_deallocate)
			return PROTO_HOLD; /* it may be the DEALLOCATE tern answers */
		relay_expect(chunk, STMT_REPLY_EXECUTE);
		break;
	case PROTO_FE_QUERY:
	case PROTO_FE_FUNCTION_CALL:
		relay_expect(chunk, STMT_REPLY_QUERY);
		break;
	default:
		break;
	}
	return UINT32_MAX;
}

static unsigned relay_client_on_type(void *ctx, uint8_t type)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	struct leg *leg = chunk->leg;
	if (s->tracks_statements) {
		unsigned action = relay_client_tracked_type(ctx, type);
		if (action != UINT32_MAX)
			return action;
	}
	switch (type) {
	case PROTO_FE_TERMINATE:
		return PROTO_INSPECT; /* not forwarded: the server connection outlives the client */
	case PROTO_FE_QUERY:
		leg_expect_ready(leg, s->client_active_ns);
		leg->syncs_since_execute = 0;
		if (!s->is_transaction_pooling)
			return PROTO_FORWARD;
		/* Transaction pooling reads a query: UNLISTEN *, SET search_path, DEALLOCATE ALL. */
		s->queries_unread++;
		return PROTO_FORWARD | PROTO_INSPECT_SMALL;
	case PROTO_FE_FUNCTION_CALL:
		leg_expect_ready(leg, s->client_active_ns);
		return PROTO_FORWARD;
	case PROTO_FE_SYNC:
		leg->is_unsynced = false;
		if (leg->is_copy_in)
			return PROTO_FORWARD; /* the server ignores a Sync in copy-in: no ReadyForQuery comes */
		leg_expect_ready(leg, s->client_active_ns);
		leg->syncs_since_execute++;
		return PROTO_FORWARD;
	case PROTO_FE_EXECUTE:
		leg->syncs_since_execute = 0;
		leg->is_unsynced = true;
		return PROTO_FORWARD;
	case PROTO_FE_PARSE:
	case PROTO_FE_BIND:
	case PROTO_FE_DESCRIBE:
	case PROTO_FE_CLOSE:
	case PROTO_FE_FLUSH:
		leg->is_unsynced = true;
		return PROTO_FORWARD;
	case PROTO_FE_COPY_DONE:
	case PROTO_FE_COPY_FAIL:
		leg->is_copy_in = false;
		return PROTO_FORWARD;
	case PROTO_FE_COPY_DATA:
		return PROTO_FORWARD; /* outside copy-in the server ignores it, by the protocol */
	default:
		return PROTO_INSPECT; /* refused in on_message, before a byte of it is forwarded */
	}
}

static int relay_client_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	if (type == PROTO_FE_PARSE || type == PROTO_FE_BIND || type == PROTO_FE_DESCRIBE || type == PROTO_FE_CLOSE ||
	    type == PROTO_FE_EXECUTE) {
		int rc = session_stmts_on_client_message(s, type, body, len, chunk->buffer_id, chunk->data);
		if (rc == -ENOMEM)
			chunk->out_of_memory = true;
		return rc == -ENOMEM ? 0 : rc;
	}
	if (type == PROTO_FE_QUERY) {
		if (s->queries_unread > 0)
			s->queries_unread--;
		s->is_search_path_mentioned |= sql_mentions_search_path(body, len);
		if (s->is_listening)
			s->is_unlisten_all_sent |= sql_is_unlisten_all(body, len);
		if (s->tracks_statements && sql_is_forget_all(body, len))
			session_stmts_forget_all_ahead(s);
		/* Only a query with nothing before it in flight: its own CommandComplete must confirm it. */
		if (chunk->leg->pending_ready == 1 && chunk->leg->tx_status == 'I' &&
		    sql_parse_search_path_set(body, len, s->pending_search_path, PARAMS_VALUE_MAX) == 1) {
			s->is_search_path_pending = true;
			s->is_search_path_confirmed = false;
		}
		return 0;
	}
	if (type != PROTO_FE_TERMINATE)
		return RELAY_UNKNOWN_TYPE;
	return RELAY_STOP_TERMINATE;
}

static void relay_client_forward(void *ctx, uint32_t offset, uint32_t len)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	if (sendq_push_buffer(&chunk->leg->to_server, &s->host->ring, chunk->buffer_id, chunk->data + offset, len) < 0)
		chunk->out_of_memory = true;
}

/* The head of a long Bind: its names are rewritten, its parameters follow by reference. */
static int relay_client_on_head(void *ctx, uint8_t type, const uint8_t *head, uint32_t head_len, uint32_t body_len)
{
	struct relay_chunk *chunk = ctx;
	TERN_ASSERT(type == PROTO_FE_BIND);
	int rc = session_stmts_on_bind_head(chunk->s, head, head_len, body_len);
	if (rc == -ENOMEM) {
		chunk->out_of_memory = true;
		return 0;
	}
	return rc;
}

static const struct proto_scan_ops relay_client_ops = {
	.on_type = relay_client_on_type,
	.on_message = relay_client_on_message,
	.forward = relay_client_forward,
	.on_head = relay_client_on_head,
};

void session_relay_on_client_chunk(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	struct relay_chunk chunk = {.s = s, .leg = session_primary(s), .buffer_id = buffer_id, .data = data};
	uint64_t frame_max = runtime_config(s->host->runtime)->max_client_frame_bytes;
	s->client_active_ns = base_now_ns();
	int rc = proto_stream_feed(&s->client_stream, data, len, frame_max, &relay_client_ops, &chunk);
	if (chunk.out_of_memory) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	if (rc == RELAY_STOP_TERMINATE) {
		session_end(s, SESSION_END_CLIENT_TERMINATE);
		return;
	}
	if (rc < 0) {
		session_end(s, rc == -EMSGSIZE ? SESSION_END_FRAME_TOO_LARGE : SESSION_END_PROTOCOL_VIOLATION);
		return;
	}
	session_client_queue_grew(s);
}

/* ---- server → client ---- */

static unsigned relay_server_on_type(void *ctx, uint8_t type)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	struct leg *leg = chunk->leg;
	if (leg->hidden_ready > 0) {
		/* The answer to tern's own SET or SHOW: read what matters, show the client nothing. */
		bool wanted = type == PROTO_BE_READY || type == PROTO_BE_PARAMETER_STATUS || type == PROTO_BE_ERROR ||
			      (type == PROTO_BE_DATA_ROW && s->is_learning_search_path);
		return wanted ? PROTO_INSPECT : 0;
	}
	if (s->tracks_statements) {
		unsigned action = session_stmts_server_type(leg, type);
		if (action)
			return action;
	}
	if (type == PROTO_BE_READY || type == PROTO_BE_COPY_IN)
		return PROTO_FORWARD | PROTO_INSPECT;
	if (type == PROTO_BE_PARAMETER_STATUS && s->is_transaction_pooling)
		return PROTO_FORWARD | PROTO_INSPECT;
	if (type == PROTO_BE_ERROR && s->is_search_path_pending)
		return PROTO_FORWARD | PROTO_INSPECT; /* the SET failed */
	/* Command tags tell whether the client LISTENs; only transaction pooling needs to know. */
	if (type == PROTO_BE_COMMAND_COMPLETE && s->is_transaction_pooling)
		return PROTO_FORWARD | PROTO_INSPECT;
	return PROTO_FORWARD;
}

/* A ParameterStatus: the connection now has this value, and so does the client, unless it answers
 * tern's own SET (the client had the value already). */
static void relay_learn_parameter(struct session *s, struct leg *leg, const uint8_t *body, uint32_t len)
{
	uint32_t offset = 0;
	const char *name = proto_read_cstring(body, len, &offset);
	const char *value = name ? proto_read_cstring(body, len, &offset) : NULL;
	if (!value || !leg->conn)
		return;
	params_store(leg->conn->params, &leg->conn->param_count, name, value);
	int i = params_tracked_index(&s->host->runtime->tracked, name);
	if (i < 0 || leg->hidden_ready > 0)
		return;
	if (strlen(value) >= PARAMS_VALUE_MAX) {
		s->params.is_set &= ~(1u << i);
		TERN_WARN("parameter %s of client %s/%s is too long to keep across connections", name, s->user,
			  s->database);
		return;
	}
	base_strlcpy(s->params.value[i], value, PARAMS_VALUE_MAX);
	s->params.is_set |= 1u << i;
}

/* Transaction pooling: before the client's own messages, make the connection's tracked parameters the
 * client's. The SET's answer is hidden from the client (hidden_ready). */
static void relay_restore_parameters(struct session *s, struct leg *leg)
{
	struct pool_conn *conn = leg->conn;
	char sql[PARAMS_TRACKED_MAX * (PARAMS_VALUE_MAX * 2 + 64)];
	int n = params_build_set(&s->host->runtime->tracked, &s->params, conn->params, conn->param_count, sql,
				 sizeof(sql));
	if (n < 0)
		return;
	const char *want = s->search_path[0] ? s->search_path : PARAMS_SEARCH_PATH_DEFAULT;
	const char *have = params_find(conn->params, conn->param_count, PARAMS_SEARCH_PATH_KEY);
	if (strcmp(want, have ? have : PARAMS_SEARCH_PATH_DEFAULT) != 0) {
		int m = snprintf(sql + n, sizeof(sql) - (size_t)n, "%sSET search_path TO %s", n ? "; " : "", want);
		if (m < 0 || (size_t)m >= sizeof(sql) - (size_t)n)
			return;
		n += m;
		params_store(conn->params, &conn->param_count, PARAMS_SEARCH_PATH_KEY, want);
	}
	if (n == 0)
		return;
	uint8_t msg[sizeof(sql) + 8];
	size_t len = proto_build_query(msg, sizeof(msg), sql);
	if (len == 0 || sendq_push_front_copy(&leg->to_server, msg, (uint32_t)len) < 0)
		return;
	leg->pending_ready++;
	leg->hidden_ready++;
}

/* The connection's search_path is `value` (known, or PARAMS_SEARCH_PATH_UNKNOWN). */
static void relay_connection_search_path(struct leg *leg, const char *value)
{
	if (leg->conn)
		params_store(leg->conn->params, &leg->conn->param_count, PARAMS_SEARCH_PATH_KEY, value);
}

/* The client's search_path took effect on its connection. */
static void relay_keep_search_path(struct session *s, struct leg *leg, const char *value)
{
	base_strlcpy(s->search_path, value, sizeof(s->search_path));
	relay_connection_search_path(leg, value);
}

static bool relay_tag_is(const uint8_t *body, uint32_t len, const char *tag)
{
	size_t n = strlen(tag) + 1; /* the tag's NUL too */
	return len == n && memcmp(body, tag, n) == 0;
}

void session_relay_learn_search_path(struct session *s, struct leg *leg)
{
	uint8_t msg[64];
	size_t len = proto_build_query(msg, sizeof(msg), "SHOW search_path");
	s->is_search_path_stale = false;
	if (sendq_push_copy(&leg->to_server, msg, (uint32_t)len) < 0) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	s->is_learning_search_path = true;
	leg->pending_ready++;
	leg->hidden_ready++; /* pending_ready keeps the connection until the answer is in */
	session_mark_dirty(s, &leg->to_server);
	leg_resume(leg);
}

/* The hidden SHOW search_path's row: the value in effect, which SET accepts back as written. */
static void relay_learn_search_path_row(struct session *s, struct leg *leg, const uint8_t *body, uint32_t len)
{
	if (len < 6 || body[0] != 0 || body[1] != 1) /* one column */
		return;
	uint32_t n = proto_read_u32(body + 2);
	if (n == UINT32_MAX || n > len - 6 || n >= PARAMS_VALUE_MAX) {
		TERN_WARN("search_path of client %s/%s is too long to keep across connections", s->user, s->database);
		return;
	}
	char value[PARAMS_VALUE_MAX];
	memcpy(value, body + 6, n);
	value[n] = '\0';
	/* SHOW writes an empty list as "", which SET refuses (a zero-length identifier); '' means the same. */
	relay_keep_search_path(s, leg, strcmp(value, "\"\"") == 0 ? "''" : value);
}

static int relay_server_message(struct session *s, struct leg *leg, uint8_t type, const uint8_t *body, uint32_t len,
				bool hidden)
{
	if (type == PROTO_BE_DATA_ROW) {
		relay_learn_search_path_row(s, leg, body, len);
		return 0;
	}
	if (type == PROTO_BE_PARAMETER_STATUS) {
		relay_learn_parameter(s, leg, body, len);
		return 0;
	}
	if (type == PROTO_BE_COPY_IN) {
		/* Syncs the client pipelined behind the COPY's Execute reach a server in copy-in, which
		 * ignores them: they will bring no ReadyForQuery. */
		leg->is_copy_in = true;
		uint32_t ignored = TERN_MIN(leg->syncs_since_execute, leg->pending_ready);
		leg->pending_ready -= ignored;
		leg->syncs_since_execute = 0;
		if (s->tracks_statements)
			session_stmts_on_copy_in(leg, ignored);
		return 0;
	}
	if (type == PROTO_BE_ERROR) {
		if (!hidden)
			s->is_search_path_pending = false;
		struct proto_error_fields fields;
		if (hidden && proto_error_parse(body, len, &fields) == 0)
			TERN_WARN("could not restore client %s/%s's parameters on server pid %u: %s (%s)", s->user,
				  s->database, leg->conn ? leg->conn->backend_pid : 0, fields.message, fields.sqlstate);
		return 0;
	}
	if (type == PROTO_BE_COMMAND_COMPLETE) {
		if (relay_tag_is(body, len, "SET") || relay_tag_is(body, len, "RESET")) {
			if (s->is_search_path_pending && !s->is_search_path_confirmed) {
				s->is_search_path_confirmed = true;
			} else if (s->is_search_path_mentioned || s->queries_unread > 0 || !s->tracks_statements) {
				/* A SET tern cannot attribute (in a transaction block, through the extended
				 * protocol, a second one in a query): it may have changed search_path, so the
				 * connection's value is unknown and the next client gets its own replayed. */
				s->is_search_path_pending = false;
				s->is_search_path_stale = true;
				relay_connection_search_path(leg, PARAMS_SEARCH_PATH_UNKNOWN);
			}
		}
		if (relay_tag_is(body, len, "LISTEN")) {
			s->is_listening = true; /* conservative: kept even if the transaction rolls back */
		} else if (relay_tag_is(body, len, "UNLISTEN") && s->is_unlisten_all_sent) {
			s->is_listening = false;
		} else if (relay_tag_is(body, len, "PREPARE")) {
			s->is_sql_prepared = true; /* SQL PREPARE pins: EXECUTE finds it only on this connection */
		} else if (relay_tag_is(body, len, "DISCARD ALL") || relay_tag_is(body, len, "DEALLOCATE ALL")) {
			if (relay_tag_is(body, len, "DISCARD ALL")) {
				s->is_listening = false;
				relay_keep_search_path(s, leg, PARAMS_SEARCH_PATH_DEFAULT);
			}
			s->is_sql_prepared = false;
			if (s->tracks_statements)
				session_stmts_forget_all(s, leg);
		}
		return 0;
	}
	if (type != PROTO_BE_READY)
		return 0; /* inspected for the reply tracking alone */
	if (len != 1 || (body[0] != 'I' && body[0] != 'T' && body[0] != 'E'))
		return -EPROTO;
	leg->tx_status = (char)body[0];
	if (s->is_search_path_pending && !hidden) {
		if (s->is_search_path_confirmed && leg->tx_status == 'I') {
			relay_keep_search_path(s, leg, s->pending_search_path);
		} else if (s->is_search_path_confirmed) { /* it ran inside a transaction block */
			relay_connection_search_path(leg, PARAMS_SEARCH_PATH_UNKNOWN);
			s->is_search_path_stale = true;
		}
		s->is_search_path_pending = false;
	}
	if (hidden && leg->hidden_ready == 1)
		s->is_learning_search_path = false;
	if (leg->pending_ready > 0)
		leg->pending_ready--;
	if (leg->hidden_ready > 0)
		leg->hidden_ready--;
	if (leg->pending_ready == 0) { /* every text read so far is answered */
		s->is_search_path_mentioned = false;
		s->queries_unread = 0;
	}
	s->is_unlisten_all_sent = false;
	leg->is_copy_in = false;
	leg->ready_ns = base_now_ns();
	if (!hidden)
		session_stats_on_ready(s, leg);
	return 0; /* the release, if due, comes after the whole chunk is scanned */
}

static int relay_server_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	struct leg *leg = chunk->leg;
	bool hidden = leg->hidden_ready > 0; /* an answer to tern's SET, which the reply tracking never saw */
	int rc = relay_server_message(s, leg, type, body, len, hidden);
	if (rc == 0 && s->tracks_statements && !hidden)
		rc = session_stmts_on_server_message(s, leg, type, body, len);
	return rc;
}

static void relay_server_forward(void *ctx, uint32_t offset, uint32_t len)
{
	struct relay_chunk *chunk = ctx;
	struct session *s = chunk->s;
	if (s->phase == SESSION_CLOSING)
		return; /* the client is gone or going: what the server says (a reset's answer) stays here */
	if (sendq_push_buffer(&s->to_client, &s->host->ring, chunk->buffer_id, chunk->data + offset, len) < 0) {
		chunk->out_of_memory = true;
		return;
	}
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
	return rc < 0 || chunk.out_of_memory ? -EPROTO : 0;
}

void session_relay_attach(struct session *s, struct leg *leg, struct pool_conn *conn)
{
	leg_attach(leg, conn);
	if (s->client_recv_paused && sendq_is_low(&leg->to_server)) {
		s->client_recv_paused = false; /* paused while parked; the server now drains the queue */
		session_client_recv_resume(s);
	}
	if (s->phase == SESSION_LOGIN_WAIT)
		session_login_on_backend(s);
	else if (s->is_transaction_pooling) {
		/* Tern's Parses go in front of the client's messages, and its SET in front of them all. */
		if (s->tracks_statements && session_stmts_prepare_needed(s, leg) < 0) {
			session_end(s, SESSION_END_OUT_OF_MEMORY);
			return;
		}
		relay_restore_parameters(s, leg);
	}
	if (!sendq_is_empty(&leg->to_server))
		session_mark_dirty(s, &leg->to_server);
	session_try_release(s, leg);
	leg_resume(leg);
}
