/* Transaction Replay's record of the client's requests on the primary's leg (s->replay; recover.c reads
 * it when that leg's connection is lost): where they began in both streams, so the loss can tell how far
 * they got, and their messages as the client sent them, so one that never reached the server (or may run
 * twice) runs on the next primary. The record opens at the first message the leg gets while it owes the
 * client nothing and closes at the ReadyForQuery that leaves it owing nothing. It keeps Queries and
 * unnamed extended-protocol messages; a name (a statement or portal lives on one connection), a Bind of
 * a statement parsed before, a FunctionCall or a message too long to read leaves it unkept. Transaction
 * pooling only.
 *
 * Under tr_mode select and transaction it also keeps the transaction open on the primary, from its
 * start: each request (a Query, or unnamed messages up to their Sync) with an XXH3 digest of the bytes of its answer as the client was shown
 * them, ReadyForQuery included. A replay (recover.c) sends them again, hidden, on the new primary, then
 * asks the transaction's isolation; this observer digests the hidden answers the same way and says
 * whether each matches. */
#include "observer.h"
#include "classify.h"
#include "recover.h"
#include "route.h"
#include "session.h"

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
	r->tx_log.len = 0;
	r->step_count = 0;
}

/* The record opens: the leg's position in both directions, and its transaction status before (a
 * detached primary leg holds no transaction in transaction pooling). */
static void replay_open(struct session *s, struct leg *leg)
{
	struct session_replay *r = &s->replay;
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
		r->tx_log.len = 0;
		r->step_count = 0;
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
		replay_open(s, leg);
		s->replay.noted++;
	}
	return OBSERVER_PASS;
}

/* A message another connection could not run as it is: a name of a statement or portal (each lives on one
 * connection), a Bind of an unnamed statement parsed in an earlier request, or a FunctionCall. */
static bool replay_is_connection_bound(const struct session_replay *r, uint8_t type, const uint8_t *body, uint32_t len)
{
	uint32_t offset = 0;
	switch (type) {
	case PROTO_FE_PARSE:
	case PROTO_FE_EXECUTE: {
		const char *name = proto_read_cstring(body, len, &offset);
		return !name || name[0] != '\0';
	}
	case PROTO_FE_BIND: {
		const char *portal = proto_read_cstring(body, len, &offset);
		const char *stmt = portal ? proto_read_cstring(body, len, &offset) : NULL;
		return !stmt || portal[0] != '\0' || stmt[0] != '\0' || !r->has_parse;
	}
	case PROTO_FE_DESCRIBE:
	case PROTO_FE_CLOSE:
		return len < 2 || body[1] != '\0';
	case PROTO_FE_FUNCTION_CALL:
		return true; /* (not kept: a function by OID) */
	default:
		return false;
	}
}

void replay_hash(struct session *s, const void *data, uint32_t len)
{
	struct session_replay *r = &s->replay;
	TERN_ASSERT(r->is_hashing);
	r->hashed_bytes += len;
	if (r->hashed_bytes > runtime_config(s->host->runtime)->tr_max_observation_bytes) {
		s->host->stats.tr_cap_exceeded += r->tx_status == 'T'; /* (an autocommit answer is no transaction's) */
		replay_give_up(r);
		return;
	}
	(void)XXH3_64bits_update(r->hash, data, len);
}

void replay_flush_preamble(struct session *s, struct leg *leg)
{
	struct route_bytes *held = &s->replay.preamble;
	if (held->len == 0)
		return;
	if (s->phase != SESSION_CLOSING)
		session_send_to_client(s, held->data, held->len);
	if (s->replay.is_hashing)
		replay_hash(s, held->data, held->len);
	leg->to_client_bytes += held->len;
	held->len = 0;
}

static void replay_close(struct session_replay *r)
{
	r->is_open = r->is_unloggable = r->has_parse = r->is_hashing = r->has_tx_ended = false;
	r->noted = r->logged = 0;
	r->inflight.len = 0;
}

/* A step whose statements end a transaction (a COMMIT, END, ROLLBACK or PREPARE TRANSACTION among
 * several, "COMMIT; BEGIN" say): the transaction now open began inside it, and its record cannot start
 * there. */
static bool replay_ends_a_transaction(struct session *s, const struct tern_config *cfg)
{
	const struct session_replay *r = &s->replay;
	uint32_t at = 0;
	const char *text;
	while ((text = recover_next_text(r->inflight.data, r->inflight.len, &at))) {
		struct classify_result c;
		route_classify(s, cfg, text, &c);
		if (c.has_commit || c.kind == CLASSIFY_ROLLBACK || c.kind == CLASSIFY_COMMIT ||
		    (c.statement_count > 1 && (strcasestr(text, "rollback") || strcasestr(text, "abort"))))
			return true;
	}
	return false;
}

/* The request just answered becomes the transaction's next step (its one Query, its answer's digest),
 * or the record gives up: a bound, or nothing to replay it from. */
static void replay_add_step(struct session *s)
{
	struct session_replay *r = &s->replay;
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	if (r->is_unloggable || r->noted != r->logged || !r->is_hashing || r->has_tx_ended ||
	    replay_ends_a_transaction(s, cfg)) {
		replay_give_up(r); /* (a transaction that ended inside the record: replaying it would commit it again) */
		return;
	}
	if (r->step_count + 1 > cfg->tr_max_replay_statements || r->tx_log.len + r->inflight.len > cfg->tr_max_replay_bytes) {
		s->host->stats.tr_cap_exceeded++;
		replay_give_up(r);
		return;
	}
	if (r->step_count == r->step_cap) {
		uint32_t cap = r->step_cap ? r->step_cap * 2 : 16;
		struct replay_step *grown = realloc(r->steps, cap * sizeof(*grown));
		if (!grown) {
			replay_give_up(r);
			return;
		}
		r->steps = grown;
		r->step_cap = cap;
	}
	if (session_bytes_append(&r->tx_log, r->inflight.data, r->inflight.len) < 0) {
		replay_give_up(r);
		return;
	}
	r->steps[r->step_count++] = (struct replay_step){.end = r->tx_log.len, .digest = XXH3_64bits_digest(r->hash)};
}

static bool replay_is_on(const struct session *s)
{
	/* On for a session that starts while Transaction Replay may recover it: a reload that turns it on
	 * reaches the sessions that start after it. */
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	return s->is_transaction_pooling && cfg->tr_enabled && cfg->tr_mode != CONFIG_TR_NONE;
}

static int replay_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_replay *r = &s->replay;
	if (leg->role != LEG_PRIMARY || !r->is_open || r->is_unloggable)
		return 0;
	if (replay_is_connection_bound(r, m->type, m->body, m->len)) {
		r->is_unloggable = true;
		return 0;
	}
	if (r->inflight.len + PROTO_HEADER_LEN + m->len > runtime_config(s->host->runtime)->tr_max_replay_bytes) {
		r->is_unloggable = true; /* (a pipelined batch longer than a transaction may be) */
		return 0;
	}
	r->has_parse |= m->type == PROTO_FE_PARSE;
	uint8_t header[PROTO_HEADER_LEN] = {m->type};
	proto_write_u32(header + 1, m->len + 4);
	if (session_bytes_append(&r->inflight, header, sizeof(header)) < 0 ||
	    session_bytes_append(&r->inflight, m->body, m->len) < 0)
		return -ENOMEM;
	r->logged++;
	return 0;
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
	struct session_replay *r = &s->replay;
	if (r->replay_skip > 0) { /* the answer to what another observer restored first */
		r->replay_skip -= m->type == PROTO_BE_READY;
		return 0;
	}
	r->replay_read++;
	bool is_check = r->replay_next == r->step_count; /* the SHOW transaction_isolation after the steps */
	if (m->type == PROTO_BE_ERROR || (is_check && m->type == PROTO_BE_DATA_ROW && !replay_is_read_committed(m->body, m->len)))
		r->is_replay_failed = true;
	if (!is_check && r->is_hashing && m->type != PROTO_BE_NOTICE) { /* (the client is shown notices unhashed) */
		uint8_t header[PROTO_HEADER_LEN] = {m->type};
		proto_write_u32(header + 1, m->len + 4);
		(void)XXH3_64bits_update(r->hash, header, sizeof(header));
		(void)XXH3_64bits_update(r->hash, m->body, m->len);
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
	if (leg->role != LEG_PRIMARY || !s->replay.is_replaying || s->replay.replay_next > s->replay.step_count ||
	    s->replay.replay_skip > 0)
		return 0; /* (what others restored: the relay reads its ReadyForQuery, which reaches us too) */
	s->replay.replay_messages++;
	return PROTO_INSPECT_SMALL; /* one too long to read fails the replay (replay_messages counts it) */
}

static int replay_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_replay *r = &s->replay;
	if (m->is_hidden)
		return leg->role == LEG_PRIMARY && r->is_replaying ? replay_hidden_message(s, leg, m) : 0;
	TERN_ASSERT(m->type == PROTO_BE_READY);
	if (leg->role != LEG_PRIMARY || !r->is_open)
		return 0;
	if (leg_client_owed(leg) > 0 || leg->is_unsynced) {
		r->has_tx_ended |= leg->tx_status != 'T'; /* (a pipelined request ended a transaction) */
		return 0;
	}
	/* The answer is complete (its ReadyForQuery digested: it went out before this call). */
	r->deadline_ns = 0; /* a primary answered: a recovery's deadline is over */
	if (leg->tx_status == 'T' && r->is_tx_recorded && !r->is_tx_unreplayable)
		replay_add_step(s);
	else if (leg->tx_status != 'T')
		recover_forget_tx(r); /* the transaction ended (or failed: it is never replayed) */
	replay_close(r);
	return 0;
}

/* The leg got a connection for a replay: the transaction's steps go first, hidden, then the check of its
 * isolation (behind what the other observers restore, which they push to the front). */
static int replay_attach(struct session *s, struct leg *leg)
{
	struct session_replay *r = &s->replay;
	if (leg->role != LEG_PRIMARY || !r->is_replaying || r->replay_next != 0)
		return 0;
	r->replay_skip = leg->hidden_ready; /* the others attached first: their hidden answers come first */
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
	return leg_push_hidden(leg, show, (uint32_t)n);
}

static void replay_destroy(struct session *s)
{
	struct session_replay *r = &s->replay;
	free(r->inflight.data);
	free(r->preamble.data);
	free(r->tx_log.data);
	free(r->held_back.data);
	free(r->steps);
	XXH3_freeState(r->hash);
	r->inflight = r->preamble = r->tx_log = r->held_back = (struct route_bytes){0};
	r->steps = NULL;
	r->hash = NULL;
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
	.attach = replay_attach,
	.destroy = replay_destroy,
};
