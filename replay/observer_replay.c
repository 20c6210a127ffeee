/* Transaction Replay's record of the client's requests on the primary's leg (s->replay; recover.c reads
 * it when that leg's connection is lost): where they began in both streams, so the loss can tell how far
 * they got, and their messages as the client sent them, so one that never reached the server (or may run
 * twice) runs on the next primary. The record opens at the first message the leg gets while it owes the
 * client nothing and closes at the ReadyForQuery that leaves it owing nothing. It keeps Queries and
 * extended-protocol messages, named portals and the client's named statements (observer_stmts prepares
 * those on any connection) included; a Parse or Close of a named statement, a Bind of an unnamed
 * statement parsed before, a FunctionCall or a message too long to read leaves it unkept. Transaction
 * pooling only.
 *
 * Under tr_mode select and transaction it also keeps the transaction open on the primary, from its
 * start: each request (a Query, or extended messages up to their Sync, a named statement under its server
 * name) with an XXH3 digest of the bytes of its answer as the client was shown them, ReadyForQuery
 * included. A replay (recover.c) prepares the named statements they use and sends them again, hidden, on
 * the new primary, then asks the transaction's isolation; this observer digests the hidden answers the same way and says
 * whether each matches. */
#include "core/observer.h"
#include "core/classify.h"
#include "recover.h"
#include "routing/route.h"
#include "core/session.h"
#include "core/sql.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static bool replay_is_recording(const struct session *s)
{
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	return cfg->tr_enabled && cfg->tr_mode >= CONFIG_TR_SELECT;
}

/* The transaction's record stops here: what it holds cannot be replayed. */
static void replay_give_up(struct session_replay *r)
{
	r->is_tx_unreplayable = true;
	r->is_hashing = false;
	recover_clear_tx_log(r);
}

/* The record opens: the leg's position in both directions, and its transaction status before (a
 * detached primary leg holds no transaction in transaction pooling). */
static void replay_open(struct session *s, struct leg *leg)
{
	struct session_replay *r = s->replay;
	if (r->is_open)
		return;
	r->is_open = true;
	r->tx_status = leg->conn ? leg->tx_status : 'I';
	r->client_mark = leg->to_client_bytes;
	r->sent_mark = leg->to_server.sent_bytes_total + leg->to_server.bytes;
	r->is_hashing = false;
	if (r->tx_status != 'T') { /* a transaction may start: its record with it */
		r->is_tx_recorded = replay_is_recording(s);
		r->is_tx_unreplayable = false;
		recover_clear_tx_log(r);
	}
	if (r->is_tx_recorded && !r->is_tx_unreplayable) {
		if (!r->hash)
			r->hash = XXH3_createState();
		r->is_hashing = r->hash && XXH3_64bits_reset(r->hash) == XXH_OK;
		r->hashed_bytes = 0;
		if (!r->is_hashing)
			replay_give_up(r);
	}
}

/* Every client message of its types, whoever takes it (observer_stmts forwards Parse, Bind, Describe and
 * Close itself): it opens the record, and is counted, so one too long to be read leaves the request
 * unkept. (What the leg owes for them is the leg's own count: leg_client_owed.) */
static unsigned replay_client_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)type;
	if (leg->role == LEG_PRIMARY) {
		if (s->replay->is_open && leg_client_owed(leg) == 0 && !leg->is_unsynced)
			recover_close_record(s->replay); /* tern answered it all (observer_stmts: a Parse and Close batch) */
		replay_open(s, leg);
		s->replay->noted++;
	}
	return OBSERVER_PASS;
}

/* The client's statement `name` when observer_stmts keeps it (so it can be prepared on any connection),
 * else NULL. */
static struct stmt *replay_stmt_of(const struct session *s, const char *name)
{
	return name && name[0] && (s->observers_on & (1u << OBSERVER_STMTS)) ? stmt_map_get(&s->stmts.statements, name)
									     : NULL;
}

/* A message another connection could not run as it is: a Close of a named statement (its answer may be
 * tern's), a statement name observer_stmts does not keep, a Bind of an unnamed statement parsed in an
 * earlier request, or a FunctionCall. A Parse of a name observer_stmts keeps is replayed under its server
 * name (replay_log_parse); named portals are the transaction's own: replayed, they are made again. */
static bool replay_is_connection_bound(const struct session *s, uint8_t type, const uint8_t *body, uint32_t len)
{
	uint32_t offset = 0;
	switch (type) {
	case PROTO_FE_PARSE: {
		const char *name = proto_read_cstring(body, len, &offset);
		return !name || (name[0] != '\0' && !replay_stmt_of(s, name));
	}
	case PROTO_FE_EXECUTE:
		return !proto_read_cstring(body, len, &offset);
	case PROTO_FE_BIND: {
		const char *portal = proto_read_cstring(body, len, &offset);
		const char *stmt = portal ? proto_read_cstring(body, len, &offset) : NULL;
		return !stmt || (stmt[0] ? !replay_stmt_of(s, stmt) : !s->replay->has_parse);
	}
	case PROTO_FE_DESCRIBE:
	case PROTO_FE_CLOSE: {
		offset = 1;
		const char *name = len >= 2 ? proto_read_cstring(body, len, &offset) : NULL;
		return !name || (body[0] == 'S' && name[0] && (type == PROTO_FE_CLOSE || !replay_stmt_of(s, name)));
	}
	case PROTO_FE_FUNCTION_CALL:
		return true; /* (not kept: a function by OID) */
	default:
		return false;
	}
}

/* Bytes of the primary's answer the client is shown, while s->replay->is_hashing. */
static void replay_hash(struct session *s, const void *data, uint32_t len)
{
	struct session_replay *r = s->replay;
	TERN_ASSERT(r->is_hashing);
	r->hashed_bytes += len;
	if (r->hashed_bytes > runtime_config(s->host->runtime)->tr_max_observation_bytes) {
		s->host->stats.tr_cap_exceeded += r->tx_status == 'T'; /* (an autocommit answer is no transaction's) */
		replay_give_up(r);
		return;
	}
	(void)XXH3_64bits_update(r->hash, data, len);
}

/* The held preamble is still the run of leg's receive being scanned that preamble_ref notes. */
static bool replay_preamble_is_in_chunk(const struct session_replay *r, const struct leg *leg)
{
	const struct replay_preamble_ref *ref = &r->preamble_ref;
	return ref->at && ref->stream == &leg->stream && ref->feed == proto_stream_feed_seq(&leg->stream) &&
	       ref->len == r->preamble.len;
}

void replay_flush_preamble(struct session *s, struct leg *leg)
{
	struct base_bytes *held = &s->replay->preamble;
	if (held->len == 0)
		return;
	const struct replay_preamble_ref *ref = &s->replay->preamble_ref;
	if (s->phase != SESSION_CLOSING && replay_preamble_is_in_chunk(s->replay, leg))
		session_send_buffer_to_client(s, ref->buffer_id, ref->at, held->len); /* with what follows it */
	else if (s->phase != SESSION_CLOSING)
		session_send_to_client(s, held->data, held->len);
	s->replay->preamble_ref.at = NULL;
	if (s->replay->is_hashing)
		replay_hash(s, held->data, held->len);
	leg->to_client_bytes += held->len;
	held->len = 0;
}

bool replay_reply(struct session *s, const void *data, uint32_t len)
{
	if (s->replay->preamble.len == 0)
		return false;
	struct leg *leg = session_primary(s);
	if (len > 0 && proto_be_is_preamble(((const uint8_t *)data)[0])) {
		s->replay->preamble_ref.at = NULL; /* (tern's own bytes: no part of any receive) */
		if (base_bytes_append(&s->replay->preamble, data, len) < 0)
			session_end_later(s, SESSION_END_OUT_OF_MEMORY);
		return true;
	}
	replay_flush_preamble(s, leg);
	session_send_to_client(s, data, len); /* (as any reply tern makes up: not the server's answer to digest) */
	return true;
}

int replay_hold_parse_complete(struct session *s)
{
	if (!s->replay->is_open)
		return 0;
	return base_bytes_append(&s->replay->preamble, proto_parse_complete, sizeof(proto_parse_complete)) < 0 ? -ENOMEM
														  : 1;
}

bool replay_takes_chunk(struct session *s, const uint8_t *data, uint32_t len)
{
	if (!s->replay->is_replaying)
		return false;
	if (s->replay->held_back.len + len > SESSION_QUEUE_PARKED_BYTES * 32)
		session_end(s, SESSION_END_PIPELINE_TOO_DEEP); /* (a client that does not wait for its answers) */
	else if (base_bytes_append(&s->replay->held_back, data, len) < 0)
		session_end(s, SESSION_END_OUT_OF_MEMORY);
	return true;
}

/* A step whose statements end a transaction (a COMMIT, END, ROLLBACK or PREPARE TRANSACTION among
 * several, "COMMIT; BEGIN" say): the transaction now open began inside it, and its record cannot start
 * there. */
static bool replay_ends_a_transaction(struct session *s, const struct tern_config *cfg)
{
	const struct session_replay *r = s->replay;
	uint32_t at = 0;
	const char *text;
	while ((text = recover_next_text(s, r->inflight.data, r->inflight.len, &at))) {
		struct classify_result c;
		route_classify(s, cfg, text, &c);
		if (c.has_commit || c.kind == CLASSIFY_ROLLBACK || c.kind == CLASSIFY_COMMIT ||
		    (c.statement_count > 1 && (strcasestr(text, "rollback") || strcasestr(text, "abort"))))
			return true;
	}
	return false;
}

/* tx_log keeps what the server ran: a Bind or Describe of the client's named statement under its
 * server name (observer_stmts' rewrite), and the statement, to be prepared before a replay. */
static int replay_log_stmt_use(struct session_replay *r, const uint8_t *msg, uint32_t name_at, const char *name,
			       struct stmt *stmt)
{
	bool is_known = false;
	for (uint32_t i = 0; i < r->tx_stmt_count && !is_known; i++)
		is_known = r->tx_stmts[i] == stmt;
	if (!is_known) {
		if (r->tx_stmt_count == r->tx_stmt_cap) {
			uint32_t cap = r->tx_stmt_cap ? r->tx_stmt_cap * 2 : 4;
			struct stmt **grown = realloc(r->tx_stmts, cap * sizeof(*grown));
			if (!grown)
				return -ENOMEM;
			r->tx_stmts = grown;
			r->tx_stmt_cap = cap;
		}
		r->tx_stmts[r->tx_stmt_count++] = stmt_ref(stmt);
	}
	uint32_t len = PROTO_HEADER_LEN + proto_read_u32(msg + 1) - 4;
	uint32_t after = name_at + (uint32_t)strlen(name) + 1;
	uint32_t server_len = (uint32_t)strlen(stmt->server_name) + 1;
	uint8_t header[PROTO_HEADER_LEN] = {msg[0]};
	proto_write_u32(header + 1, len - PROTO_HEADER_LEN + 4 - (after - name_at) + server_len);
	if (base_bytes_append(&r->tx_log, header, sizeof(header)) < 0 ||
	    base_bytes_append(&r->tx_log, msg + PROTO_HEADER_LEN, name_at - PROTO_HEADER_LEN) < 0 ||
	    base_bytes_append(&r->tx_log, stmt->server_name, server_len) < 0)
		return -ENOMEM;
	return base_bytes_append(&r->tx_log, msg + after, len - after);
}

/* A Parse of the client's named statement inside the transaction (observer_stmts has it as stmt): a Close
 * of its server name first, since the new connection may hold it already (a pooled one, or tern's own
 * prepare before the replay), then the Parse under that name. */
static int replay_log_parse(struct session_replay *r, const struct stmt *stmt)
{
	uint32_t name_len = (uint32_t)strlen(stmt->server_name) + 1;
	uint8_t header[PROTO_HEADER_LEN] = {PROTO_FE_CLOSE};
	proto_write_u32(header + 1, 4 + 1 + name_len);
	if (base_bytes_append(&r->tx_log, header, sizeof(header)) < 0 || base_bytes_append(&r->tx_log, "S", 1) < 0 ||
	    base_bytes_append(&r->tx_log, stmt->server_name, name_len) < 0)
		return -ENOMEM;
	header[0] = PROTO_FE_PARSE;
	proto_write_u32(header + 1, 4 + name_len + stmt->content_len);
	if (base_bytes_append(&r->tx_log, header, sizeof(header)) < 0 ||
	    base_bytes_append(&r->tx_log, stmt->server_name, name_len) < 0 ||
	    base_bytes_append(&r->tx_log, stmt->content, stmt->content_len) < 0)
		return -ENOMEM;
	r->tx_parsed++;
	return 0;
}

/* The request in flight into tx_log, its named statements under their server names. */
static int replay_log_request(struct session *s)
{
	struct session_replay *r = s->replay;
	for (uint32_t at = 0; at < r->inflight.len;) {
		const uint8_t *msg = r->inflight.data + at;
		uint32_t len = PROTO_HEADER_LEN + proto_read_u32(msg + 1) - 4;
		const uint8_t *body = msg + PROTO_HEADER_LEN;
		uint32_t offset = 0;
		if (msg[0] == PROTO_FE_PARSE) {
			const char *name = proto_read_cstring(body, len - PROTO_HEADER_LEN, &offset);
			struct stmt *stmt = name && name[0] ? replay_stmt_of(s, name) : NULL;
			int rc = stmt ? replay_log_parse(r, stmt) : base_bytes_append(&r->tx_log, msg, len);
			if (rc < 0)
				return rc;
			at += len;
			continue;
		}
		if (msg[0] == PROTO_FE_BIND)
			(void)proto_read_cstring(body, len - PROTO_HEADER_LEN, &offset); /* the portal */
		else if (msg[0] == PROTO_FE_DESCRIBE && body[0] == 'S')
			offset = 1;
		const char *name = msg[0] == PROTO_FE_BIND || offset == 1
					   ? proto_read_cstring(body, len - PROTO_HEADER_LEN, &offset)
					   : NULL;
		struct stmt *stmt = replay_stmt_of(s, name);
		int rc = stmt ? replay_log_stmt_use(r, msg, PROTO_HEADER_LEN + offset - (uint32_t)strlen(name) - 1, name, stmt)
			      : base_bytes_append(&r->tx_log, msg, len);
		if (rc < 0)
			return rc;
		at += len;
	}
	return 0;
}

/* The request in flight is one Query of one COMMIT or ROLLBACK ... AND CHAIN. */
static bool replay_is_chain(const struct session_replay *r)
{
	const uint8_t *msg = r->inflight.data;
	return r->inflight.len > PROTO_HEADER_LEN && msg[0] == PROTO_FE_QUERY &&
	       PROTO_HEADER_LEN + proto_read_u32(msg + 1) - 4 == r->inflight.len &&
	       sql_is_chain_end(msg + PROTO_HEADER_LEN, r->inflight.len - PROTO_HEADER_LEN);
}

/* A transaction chained to one whose record could replay it (read committed, recorded from its BEGIN):
 * its record starts with a BEGIN of its own, whose answer (BEGIN, then ReadyForQuery 'T') is the
 * client's as far as the digest goes. The chained transaction has the first one's isolation, and a
 * replay checks it on the new primary all the same (a SHOW after the steps). */
static void replay_start_chained(struct session *s)
{
	struct session_replay *r = s->replay;
	enum tr_tx was = recover_tx_state(s, 'T');
	recover_clear_tx_log(r);
	if (was == TR_TX_SNAPSHOT || was == TR_TX_NOT_REPLAYABLE) {
		replay_give_up(r);
		return;
	}
	static const uint8_t answer[] = {PROTO_BE_COMMAND_COMPLETE, 0, 0, 0, 10, 'B', 'E', 'G', 'I', 'N', 0,
					 PROTO_BE_READY, 0, 0, 0, 5, 'T'};
	uint8_t begin[PROTO_HEADER_LEN + sizeof("BEGIN")];
	size_t n = proto_build_query(begin, sizeof(begin), "BEGIN");
	if (n == 0 || base_bytes_append(&r->tx_log, begin, (uint32_t)n) < 0 ||
	    base_grow((void **)&r->steps, &r->step_cap, r->step_count, sizeof(*r->steps)) < 0) {
		replay_give_up(r);
		return;
	}
	r->steps[r->step_count++] =
	    (struct replay_step){.end = r->tx_log.len, .digest = XXH3_64bits(answer, sizeof(answer))};
}

/* The request just answered becomes the transaction's next step (its one Query, its answer's digest),
 * or the record gives up: a bound, or nothing to replay it from. */
static void replay_add_step(struct session *s)
{
	struct session_replay *r = s->replay;
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	bool is_whole = !r->is_unloggable && r->noted == r->logged && r->is_hashing && !r->has_tx_ended;
	if (is_whole && r->step_count > 0 && replay_is_chain(r)) {
		replay_start_chained(s); /* (the transaction ended and another began: its record starts anew) */
		return;
	}
	if (!is_whole || replay_ends_a_transaction(s, cfg)) {
		replay_give_up(r); /* (a transaction that ended inside the record: replaying it would commit it again) */
		return;
	}
	if (r->step_count + 1 > cfg->tr_max_replay_statements || r->tx_log.len + r->inflight.len > cfg->tr_max_replay_bytes) {
		s->host->stats.tr_cap_exceeded++;
		replay_give_up(r);
		return;
	}
	if (base_grow((void **)&r->steps, &r->step_cap, r->step_count, sizeof(*r->steps)) < 0 ||
	    replay_log_request(s) < 0) {
		replay_give_up(r);
		return;
	}
	r->steps[r->step_count++] = (struct replay_step){.end = r->tx_log.len, .digest = XXH3_64bits_digest(r->hash)};
}

static bool replay_is_on(const struct session *s)
{
	/* On for a session that starts while Transaction Replay may recover it: a reload that turns it on
	 * reaches the sessions that start after it. */
	return config_tr_is_on(runtime_config(s->host->runtime));
}

static int replay_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_replay *r = s->replay;
	if (leg->role != LEG_PRIMARY || !r->is_open || r->is_unloggable)
		return 0;
	if (replay_is_connection_bound(s, m->type, m->body, m->len)) {
		r->is_unloggable = true;
		return 0;
	}
	if (r->inflight.len + PROTO_HEADER_LEN + m->len > runtime_config(s->host->runtime)->tr_max_replay_bytes) {
		r->is_unloggable = true; /* (a pipelined batch longer than a transaction may be) */
		return 0;
	}
	if (m->type == PROTO_FE_PARSE) {
		bool is_named = m->len > 0 && m->body[0] != '\0';
		r->has_parse |= !is_named;
		r->has_named_parse |= is_named;
	}
	uint8_t header[PROTO_HEADER_LEN] = {m->type};
	proto_write_u32(header + 1, m->len + 4);
	if (base_bytes_append(&r->inflight, header, sizeof(header)) < 0 ||
	    base_bytes_append(&r->inflight, m->body, m->len) < 0)
		return -ENOMEM;
	r->logged++;
	return 0;
}

/* ---- a stale plan: the request runs again ---- */

/* Every Bind among msgs (whole messages, headers included) binds the unnamed statement. */
static bool replay_binds_only_unnamed(const uint8_t *msgs, uint32_t len)
{
	for (uint32_t at = 0; at + PROTO_HEADER_LEN <= len;) {
		uint32_t body_len = proto_read_u32(msgs + at + 1) - 4;
		if (msgs[at] == PROTO_FE_BIND) {
			const uint8_t *body = msgs + at + PROTO_HEADER_LEN;
			uint32_t offset = 0;
			const char *portal = proto_read_cstring(body, body_len, &offset);
			const char *stmt = portal ? proto_read_cstring(body, body_len, &offset) : NULL;
			if (!stmt || stmt[0])
				return false;
		}
		at += PROTO_HEADER_LEN + body_len;
	}
	return true;
}

/* The error m ends an autocommit request that may simply run again: PostgreSQL found the plan of a
 * statement tern keeps prepared under its own name stale (0A000 from RevalidateCachedQuery, which
 * observer_stmts reads too and forgets the connection's statements). The request is kept whole, its
 * statements are its own unnamed ones (the client Describes or gets what they are now; a client's named
 * statement keeps PostgreSQL's error, its result type being fixed), no transaction was open before it
 * (the error ended the implicit one: nothing of it stays), and the client was shown nothing of its answer
 * (so nothing of it completed). */
static bool replay_is_stale_plan(const struct session *s, const struct leg *leg, const struct observer_message *m)
{
	const struct session_replay *r = s->replay;
	struct proto_error_fields fields;
	return r->is_open && r->stale_plan == REPLAY_STALE_NONE && r->tx_status == 'I' && r->has_parse &&
	       leg->to_client_bytes == r->client_mark && s->phase == SESSION_READY &&
	       recover_is_logged_request(r, leg) && replay_binds_only_unnamed(r->inflight.data, r->inflight.len) &&
	       proto_error_parse(m->body, m->len, &fields) == 0 && strcmp(fields.sqlstate, "0A000") == 0 &&
	       strcmp(fields.routine, "RevalidateCachedQuery") == 0;
}

/* The hidden error's ReadyForQuery (also hidden) came: the request runs again, as the client sent it, on
 * the same leg (every other observer has read this ReadyForQuery: the journal before this one). A client
 * that sent more meanwhile (pipelined: its answer would come first) gets the error after all. */
static void replay_run_again(struct session *s, struct leg *leg)
{
	struct session_replay *r = s->replay;
	r->stale_plan = REPLAY_STALE_NONE;
	if (s->phase != SESSION_READY || r->inflight.len != r->stale_len || leg_client_owed(leg) != 0 ||
	    leg->is_unsynced || !proto_stream_is_at_boundary(&s->client_stream)) {
		/* The record goes on with what followed, which can no longer run again as it stands. */
		r->is_unloggable = true;
		if (s->phase == SESSION_CLOSING)
			return;
		session_send_error(s, "ERROR", "0A000", "cached plan must not change result type", NULL);
		recover_send_ready(s, 'I');
		return;
	}
	struct base_bytes again = r->inflight;
	r->inflight = (struct base_bytes){0};
	recover_close_record(r);
	r->stale_plan = REPLAY_STALE_RERUN;
	s->host->stats.stale_plan_reruns++;
	s->parts->feed(s, leg, true, again.data, again.len);
	free(again.data);
}

/* ---- a replay's hidden answers (recover.c sent them) ---- */

/* The isolation the replayed transaction runs at: a DataRow of one text column. */
static bool replay_is_read_committed(const uint8_t *body, uint32_t len)
{
	static const char want[] = "read committed";
	return len == 2 + 4 + sizeof(want) - 1 && proto_read_u32(body + 2) == sizeof(want) - 1 &&
	       memcmp(body + 6, want, sizeof(want) - 1) == 0;
}

static int replay_hidden_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_replay *r = s->replay;
	if (r->replay_skip > 0) { /* the answer to what another observer restored first */
		r->replay_skip -= m->type == PROTO_BE_READY;
		return 0;
	}
	r->replay_read++;
	bool is_check = r->replay_next == r->step_count; /* the SHOW transaction_isolation after the steps */
	if (m->type == PROTO_BE_ERROR || (is_check && m->type == PROTO_BE_DATA_ROW && !replay_is_read_committed(m->body, m->len)))
		r->is_replay_failed = true;
	if (!is_check && r->is_hashing && m->type != PROTO_BE_NOTICE) { /* (the client is shown notices unhashed) */
		/* A CloseComplete right before a ParseComplete answers replay_log_parse's Close, which the client
		 * never sent: it is left out (any other CloseComplete is as the client saw it: all are alike). */
		if (r->is_replay_close_held) {
			r->is_replay_close_held = false;
			if (m->type == PROTO_BE_PARSE_COMPLETE)
				r->replay_closes_left--;
			else
				(void)XXH3_64bits_update(r->hash, proto_close_complete, sizeof(proto_close_complete));
		}
		if (m->type == PROTO_BE_CLOSE_COMPLETE && r->replay_closes_left > 0) {
			r->is_replay_close_held = true;
		} else {
			uint8_t header[PROTO_HEADER_LEN] = {m->type};
			proto_write_u32(header + 1, m->len + 4);
			(void)XXH3_64bits_update(r->hash, header, sizeof(header));
			(void)XXH3_64bits_update(r->hash, m->body, m->len);
		}
	}
	if (m->type != PROTO_BE_READY)
		return 0;
	if (r->replay_messages != r->replay_read ||
	    (!is_check && (!r->is_hashing || XXH3_64bits_digest(r->hash) != r->steps[r->replay_next].digest)))
		r->is_replay_failed = true; /* a message too long to read, or an answer that differs */
	r->replay_messages = r->replay_read = 0;
	r->is_hashing = r->hash && XXH3_64bits_reset(r->hash) == XXH_OK;
	if (r->replay_next++ == r->step_count)
		recover_replay_done(s, leg);
	return 0;
}

static unsigned replay_hidden_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)type;
	if (leg->role != LEG_PRIMARY || !s->replay->is_replaying || s->replay->replay_next > s->replay->step_count ||
	    s->replay->replay_skip > 0)
		return 0; /* (what others restored: the relay reads its ReadyForQuery, which reaches us too) */
	s->replay->replay_messages++;
	return PROTO_INSPECT_SMALL; /* one too long to read fails the replay (replay_messages counts it) */
}

static int replay_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_replay *r = s->replay;
	if (m->is_hidden)
		return leg->role == LEG_PRIMARY && r->is_replaying ? replay_hidden_message(s, leg, m) : 0;
	TERN_ASSERT(m->type == PROTO_BE_READY);
	if (r->stale_plan == REPLAY_STALE_DUE && leg->role == LEG_PRIMARY) {
		replay_run_again(s, leg);
		return 0;
	}
	if (leg->role != LEG_PRIMARY || (!r->is_open && r->deadline_ns == 0))
		return 0;
	bool is_answered = leg_client_owed(leg) == 0 && !leg->is_unsynced;
	if (is_answered)
		r->deadline_ns = 0; /* a primary answered the client: a recovery's deadline is over */
	if (!r->is_open)
		return 0;
	if (!is_answered) {
		r->has_tx_ended |= leg->tx_status != 'T'; /* (a pipelined request ended a transaction) */
		return 0;
	}
	/* The answer is complete (its ReadyForQuery digested: it went out before this call). */
	if (leg->tx_status == 'T' && r->is_tx_recorded && !r->is_tx_unreplayable)
		replay_add_step(s);
	else if (leg->tx_status != 'T')
		recover_forget_tx(r); /* the transaction ended (or failed: it is never replayed) */
	recover_close_record(r);
	return 0;
}

/* The leg got a connection for a replay: the transaction's steps go first, hidden, then the check of its
 * isolation (behind what the other observers restore, which they push to the front). */
static int replay_attach(struct session *s, struct leg *leg)
{
	struct session_replay *r = s->replay;
	if (leg->role != LEG_PRIMARY || !r->is_replaying || r->replay_next != 0)
		return 0;
	r->replay_skip = leg->hidden_ready; /* the others attached first: their hidden answers come first */
	for (uint32_t i = 0; i < r->tx_stmt_count; i++) {
		/* Close first: the server may hold the name from before (a pooled connection), as tern's own
		 * prepare does (observer_stmts). The answers are not the client's: skipped. */
		const struct stmt *stmt = r->tx_stmts[i];
		uint32_t name_len = (uint32_t)strlen(stmt->server_name) + 1;
		uint32_t close_len = PROTO_HEADER_LEN + 1 + name_len, parse_len = PROTO_HEADER_LEN + name_len + stmt->content_len;
		uint8_t *prep = malloc(close_len + parse_len + PROTO_HEADER_LEN);
		if (!prep)
			return -ENOMEM;
		uint8_t *p = prep;
		*p++ = PROTO_FE_CLOSE;
		proto_write_u32(p, close_len - 1);
		p[4] = 'S';
		memcpy(p + 5, stmt->server_name, name_len);
		p += close_len - 1;
		*p++ = PROTO_FE_PARSE;
		proto_write_u32(p, parse_len - 1);
		memcpy(p + 4, stmt->server_name, name_len);
		memcpy(p + 4 + name_len, stmt->content, stmt->content_len);
		p += parse_len - 1;
		static const uint8_t sync[PROTO_HEADER_LEN] = {PROTO_FE_SYNC, 0, 0, 0, 4};
		memcpy(p, sync, sizeof(sync));
		int rc = leg_push_hidden(leg, prep, close_len + parse_len + PROTO_HEADER_LEN);
		free(prep);
		if (rc < 0)
			return rc;
		r->replay_skip++;
	}
	uint32_t start = 0;
	for (uint32_t i = 0; i < r->step_count; i++) {
		int rc = leg_push_hidden(leg, r->tx_log.data + start, r->steps[i].end - start);
		if (rc < 0)
			return rc;
		start = r->steps[i].end;
	}
	uint8_t show[64];
	size_t n = proto_build_query(show, sizeof(show), "SHOW transaction_isolation");
	r->is_hashing = r->hash && XXH3_64bits_reset(r->hash) == XXH_OK;
	r->replay_messages = r->replay_read = 0;
	r->replay_closes_left = r->tx_parsed;
	r->is_replay_close_held = false;
	return leg_push_hidden(leg, show, (uint32_t)n);
}

static void replay_destroy(struct session *s)
{
	struct session_replay *r = s->replay;
	free(r->inflight.data);
	free(r->preamble.data);
	free(r->tx_log.data);
	free(r->held_back.data);
	recover_clear_tx_log(r);
	free(r->tx_stmts);
	free(r->steps);
	XXH3_freeState(r->hash);
	r->inflight = r->preamble = r->tx_log = r->held_back = (struct base_bytes){0};
	r->steps = NULL;
	r->tx_stmts = NULL;
	r->tx_stmt_cap = 0;
	r->hash = NULL;
}

/* The show stage on the primary's legs: under Transaction Replay the client is not shown the server going
 * away (a recovery may follow), what precedes an answer's first row or completion is held until it comes
 * (a loss before it leaves no byte at the client), and what the client is shown is digested. */
static bool replay_watches(const struct session *s, const struct leg *leg)
{
	(void)s;
	return leg->role == LEG_PRIMARY;
}

static unsigned replay_show_type(struct session *s, struct leg *leg, uint8_t type, unsigned action, bool *claims)
{
	/* (routing guards no primary's leg; a preamble is held only ahead of a completion that is sure to come:
	 * after a Flush the client waits for it) */
	*claims = type == PROTO_BE_ERROR || type == PROTO_BE_NOTICE ||
		  (proto_be_is_preamble(type) && leg_client_owed(leg) > 0 && !leg->is_unsynced) ||
		  (type == PROTO_BE_READY && s->replay->stale_plan == REPLAY_STALE_DUE);
	if (*claims)
		return (action & ~(unsigned)PROTO_FORWARD) | PROTO_INSPECT;
	replay_flush_preamble(s, leg); /* the answer's first row or completion: what it held goes first */
	return action;
}

/* A message ahead of the answer's first row or completion, held: copied (a replay digests it; a flush in a
 * later receive sends the copy), and noted where it lies while the held bytes are one run of this receive. */
static int replay_hold_preamble(struct session *s, struct leg *leg, const struct observer_message *m,
				const uint8_t header[PROTO_HEADER_LEN])
{
	struct session_replay *r = s->replay;
	struct replay_preamble_ref *ref = &r->preamble_ref;
	uint32_t offset;
	if (m->buffer_id == RING_NO_BUFFER || !proto_stream_message_offset(&leg->stream, &offset))
		ref->at = NULL;
	else if (r->preamble.len == 0)
		*ref = (struct replay_preamble_ref){.stream = &leg->stream,
						    .at = m->chunk + offset,
						    .feed = proto_stream_feed_seq(&leg->stream),
						    .buffer_id = m->buffer_id};
	else if (!replay_preamble_is_in_chunk(r, leg) || ref->at + ref->len != m->chunk + offset)
		ref->at = NULL;
	ref->len = r->preamble.len + PROTO_HEADER_LEN + m->len;
	return base_bytes_append(&r->preamble, header, PROTO_HEADER_LEN) < 0 ||
		       base_bytes_append(&r->preamble, m->body, m->len) < 0
		       ? -ENOMEM
		       : 0;
}

static int replay_show(struct session *s, struct leg *leg, const struct observer_message *m)
{
	if (m->type == PROTO_BE_READY)
		return 0; /* a stale plan's: the request runs again (replay_server_message) */
	if (m->type == PROTO_BE_ERROR && replay_is_stale_plan(s, leg, m)) {
		recover_drop_preamble(s->replay); /* tern's ParseComplete: the run again brings the server's */
		s->replay->stale_plan = REPLAY_STALE_DUE;
		s->replay->stale_len = s->replay->inflight.len;
		return 0;
	}
	uint8_t header[PROTO_HEADER_LEN] = {m->type};
	proto_write_u32(header + 1, m->len + 4);
	if (proto_be_is_preamble(m->type))
		return replay_hold_preamble(s, leg, m, header);
	if (recover_shows_notice(s, m->body, m->len) && s->phase != SESSION_CLOSING) {
		/* (a notice or an error is not digested: a replay need not raise the same notices) */
		replay_flush_preamble(s, leg);
		session_send_to_client(s, header, sizeof(header));
		session_send_to_client(s, m->body, m->len);
		leg->to_client_bytes += PROTO_HEADER_LEN + m->len;
	}
	return 0;
}

static void replay_shown(struct session *s, struct leg *leg, const void *data, uint32_t len)
{
	(void)leg;
	if (s->replay->is_hashing)
		replay_hash(s, data, len); /* the transaction's answer, for its replay */
}

const struct observer observer_replay = {
	.name = "replay",
	.is_on = replay_is_on,
	.client_types = "QPBDECSHF",
	.client_type = replay_client_type,
	.client_message = replay_client_message,
	.server_types = "Z",
	.server_message = replay_server_message,
	.hidden_type = replay_hidden_type,
	.watches = replay_watches,
	.show_type = replay_show_type,
	.show = replay_show,
	.shown = replay_shown,
	.attach = replay_attach,
	.destroy = replay_destroy,
};

void replay_place(struct session *s, struct session_replay *replay, struct session_journal *journal)
{
	s->replay = replay;
	replay->session = s;
	s->journal = journal;
}
