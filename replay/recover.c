/* Transaction Replay's recovery of a session whose primary connection was lost (see recover.h). */
#include "recover.h"

#include "core/classify.h"
#include "routing/monitor.h"
#include "routing/route_types.h"
#include "core/observer.h"
#include "failovers.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum tr_kind recover_kind_of(const struct classify_result *r)
{
	if (r->has_commit)
		return TR_KIND_COMMIT;
	if (r->has_copy)
		return TR_KIND_COPY;
	if (r->is_parse_error)
		return TR_KIND_WRITE;
	if (r->statement_count == 0)
		return TR_KIND_CONTROL; /* an empty query */
	switch (r->kind) {
	case CLASSIFY_READ:
		return TR_KIND_READ_SAFE;
	case CLASSIFY_ROLLBACK:
		return TR_KIND_ROLLBACK;
	case CLASSIFY_BEGIN:
	case CLASSIFY_TRANSACTION:
	case CLASSIFY_SET:
	case CLASSIFY_SET_TRANSACTION:
	case CLASSIFY_DISCARD:
		return TR_KIND_CONTROL;
	case CLASSIFY_COMMIT:
		return TR_KIND_COMMIT;
	case CLASSIFY_WRITE:
		break;
	}
	bool is_opaque_read = r->is_select_only && r->calls_unsafe_function && !r->has_locking_clause &&
			      !r->has_write_cte && !r->is_select_into;
	return is_opaque_read ? TR_KIND_READ_OPAQUE : TR_KIND_WRITE;
}

static const char recover_msg_not_sent[] =
	"the connection to the primary was lost before the statement reached it; it did not run (the session "
	"goes on with the primary of the moment)";
static const char recover_msg_unknown[] =
	"transaction resolution unknown: the connection to the primary was lost while the statement ran; it may "
	"or may not have taken effect (check before retrying)";
static const char recover_msg_lost_tx[] =
	"the connection to the primary was lost: the transaction is aborted (nothing of it committed)";
static const char recover_msg_diverged[] =
	"could not serialize access: the connection to the primary was lost and the transaction's replay on the "
	"new primary did not give the answers the client was shown; it is rolled back";
static const char recover_msg_aborted[] =
	"current transaction is aborted, commands ignored until end of transaction block";

static const char *const recover_phase_names[TR_PHASE_COUNT] = {"idle", "not sent", "sent", "partly answered",
								   "cut mid-message", "copy"};

static enum tr_mode recover_mode(const struct tern_config *cfg)
{
	return cfg->tr_enabled ? (enum tr_mode)cfg->tr_mode : TR_MODE_NONE;
}

/* What recover_decide_all decides: core's part (an end, or a recovery), and what the recovery needs. */
struct recover_decision {
	struct session_lost_decision lost;
	struct tr_decision tr; /* RECOVER */
	enum tr_phase phase;   /* RECOVER: how far the request in flight got */
	bool is_in_tx;         /* RECOVER: the client's transaction was open */
	bool is_commit;        /* RECOVER: the statement in flight is known to be a COMMIT or ROLLBACK (it ends
				* the transaction, whatever became of it) */
};

static struct recover_decision recover_end_with(enum session_end_reason reason, const char *sqlstate,
						     const char *message)
{
	return (struct recover_decision){
		.lost = {.action = SESSION_LOST_END, .reason = reason, .sqlstate = sqlstate, .message = message}};
}

/* A pool error that says the server could not be reached (not that it refused the login). */
static bool recover_is_unreachable(const struct pool_error *err)
{
	return strncmp(err->sqlstate, "08", 2) == 0 || strcmp(err->sqlstate, "57P03") == 0;
}

bool recover_is_logged_request(const struct session_replay *r, const struct leg *leg)
{
	return !r->is_unloggable && !r->has_named_parse && r->noted == r->logged && leg_client_owed(leg) == 1 &&
	       !leg->is_unsynced && r->inflight.len > PROTO_HEADER_LEN;
}

/* The text of the named statement a Bind binds: the client's (by its name, in the request in flight),
 * or one tx_log uses (by its server name). */
static const char *recover_bound_text(const struct session *s, const uint8_t *body, uint32_t len)
{
	uint32_t offset = 0;
	const char *name = proto_read_cstring(body, len, &offset) ? proto_read_cstring(body, len, &offset) : NULL;
	if (!name || !name[0])
		return NULL;
	for (uint32_t i = 0; i < s->replay->tx_stmt_count; i++)
		if (strcmp(s->replay->tx_stmts[i]->server_name, name) == 0)
			return (const char *)s->replay->tx_stmts[i]->content;
	const struct stmt *stmt = (s->observers_on & (1u << OBSERVER_STMTS)) ? stmt_map_get(&s->stmts.statements, name)
									    : NULL;
	return stmt ? (const char *)stmt->content : NULL;
}

const char *recover_next_text(const struct session *s, const uint8_t *msgs, uint32_t len, uint32_t *at)
{
	while (*at + PROTO_HEADER_LEN <= len) {
		uint8_t type = msgs[*at];
		uint32_t body = proto_read_u32(msgs + *at + 1) - 4;
		const uint8_t *p = msgs + *at + PROTO_HEADER_LEN;
		*at += PROTO_HEADER_LEN + body;
		uint32_t offset = 0;
		const char *text = NULL;
		if (type == PROTO_FE_QUERY)
			text = proto_read_cstring(p, body, &offset);
		else if (type == PROTO_FE_PARSE && proto_read_cstring(p, body, &offset)) /* (its name first) */
			text = proto_read_cstring(p, body, &offset);
		else if (type == PROTO_FE_BIND)
			text = recover_bound_text(s, p, body); /* (a stmt's content is its text, then NUL) */
		if (text)
			return text;
	}
	return NULL;
}

/* The text of the one statement in messages; NULL when there is none or more than one. */
static const char *recover_text_of(const struct session *s, const uint8_t *msgs, uint32_t len)
{
	uint32_t at = 0;
	const char *text = recover_next_text(s, msgs, len, &at);
	return text && !recover_next_text(s, msgs, len, &at) ? text : NULL;
}

/* A statement's classification, with tr_read_functions as the side-effect-free functions beyond the list. */
static void recover_classify(const struct tern_config *cfg, const char *text, struct classify_result *c)
{
	classify_query(text, cfg->tr_read_functions[0] ? cfg->tr_read_functions : NULL, c);
}

/* What the request in flight is, from its one statement (or the worst it may be when tern did not keep it
 * or it holds several: a COMMIT inside a transaction, a write outside one). */
static enum tr_kind recover_kind(const struct tern_config *cfg, const char *text, bool is_in_tx)
{
	if (!text)
		return is_in_tx ? TR_KIND_COMMIT : TR_KIND_WRITE;
	struct classify_result c;
	recover_classify(cfg, text, &c);
	return recover_kind_of(&c);
}

/* How far the request in flight got. */
static enum tr_phase recover_phase(const struct session *s, const struct leg *leg)
{
	const struct session_replay *r = s->replay;
	if (!r->is_open)
		return TR_PHASE_IDLE;
	if (leg->copy.is_copy_in)
		return TR_PHASE_COPY;
	if (leg->to_client_bytes != r->client_mark) /* whole messages, or one of them cut (forwarded as it came) */
		return leg_is_client_mid_message(leg) ? TR_PHASE_TORN : TR_PHASE_PARTIAL;
	/* (a send still armed may have handed the kernel bytes that still reach the server) */
	return leg->to_server.sent_bytes_total <= r->sent_mark && !leg->to_server.op.is_armed ? TR_PHASE_NOT_SENT
												: TR_PHASE_SENT;
}

/* One request in flight, whole (a Query, or a batch up to its Sync), or one batch not yet synced. */
static bool recover_is_one_request(const struct leg *leg)
{
	uint32_t owed = leg_client_owed(leg);
	return (owed == 1 && !leg->is_unsynced) || (owed == 0 && leg->is_unsynced);
}

/* Server state the session holds that no other connection has: it cannot move. */
static bool recover_is_pinned(const struct session *s)
{
	const struct leg *replica = s->legs[LEG_REPLICA];
	/* (a session-pooled session's LISTENs are listened to again, when tern followed them all) */
	bool is_listening = s->pins.is_listening && (s->is_transaction_pooling || s->pins.is_listen_unsure);
	return s->pinned_server || is_listening || s->pins.is_sql_prepared || s->pins.is_holding ||
	       s->routing->state != ROUTE_IDLE || s->routing->split.server ||
	       (replica && (replica->conn || replica->is_request_pending));
}

/* One line of SHOW FAILOVERS. */
static void recover_log(const struct session *s, const struct pool_server *server, enum tr_phase phase, const char *action,
			const char *sqlstate)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct failover_entry e = {.wall_ns = (uint64_t)now.tv_sec * BASE_NS_PER_SEC + (uint64_t)now.tv_nsec};
	base_strlcpy(e.user, s->user, sizeof(e.user));
	base_strlcpy(e.database, s->database, sizeof(e.database));
	base_strlcpy(e.server, server ? server->name : "", sizeof(e.server));
	base_strlcpy(e.phase, recover_phase_names[phase], sizeof(e.phase));
	base_strlcpy(e.action, action, sizeof(e.action));
	base_strlcpy(e.sqlstate, sqlstate ? sqlstate : "", sizeof(e.sqlstate));
	failover_log_add(s->host->runtime->failovers, &e);
}

/* The session ends (08006 unless sqlstate says otherwise) with `message`: a recovery it gets an error from,
 * counted, listed and logged. */
static struct recover_decision recover_refuse(const struct session *s, const struct pool_server *server,
						   enum tr_phase phase, const char *sqlstate, const char *message)
{
	s->host->stats.tr_replay_failures++;
	recover_log(s, server, phase, "close", sqlstate ? sqlstate : "08006");
	TERN_INFO("client %s/%s: the connection to server %s was lost (%s) and the session ends: %s", s->user,
		  s->database, server ? server->name : "-", recover_phase_names[phase], message);
	return recover_end_with(SESSION_END_SERVER_LOST, sqlstate, message);
}

static struct recover_decision recover_decide_all(const struct session *s, const struct leg *leg, enum leg_fault fault)
{
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	/* Recorded from the session's start (observer_replay is on when tr_mode was not none then), and the
	 * mode of the moment allows it. */
	enum tr_mode mode = (s->observers_on & (1u << OBSERVER_REPLAY)) ? recover_mode(cfg) : TR_MODE_NONE;
	bool is_primary = leg->role == LEG_PRIMARY && s->phase == SESSION_READY;
	if (fault == LEG_FAULT_REFUSED) {
		/* Never sent: it waits for a primary, as long as the one it asked for cannot be reached. */
		if (!is_primary || mode == TR_MODE_NONE || recover_is_pinned(s) ||
		    !recover_is_unreachable(&leg->request.error))
			return recover_end_with(SESSION_END_SERVER_REFUSED, NULL, NULL);
		return (struct recover_decision){.lost.action = SESSION_LOST_RECOVER,
						      .tr = {.action = TR_REEXECUTE},
						      .phase = TR_PHASE_NOT_SENT};
	}
	if (!is_primary)
		return recover_end_with(SESSION_END_SERVER_LOST, NULL, NULL);
	struct pool_server *server = leg->conn ? leg->conn->server : NULL;
	if (mode == TR_MODE_NONE) {
		recover_log(s, server, recover_phase(s, leg), "close", "57P01");
		return recover_end_with(SESSION_END_SERVER_LOST, "57P01",
					"terminating connection: the connection to the primary was lost");
	}
	enum tr_phase phase = recover_phase(s, leg);
	/* The rest of a client message that went to the lost leg would reach the new one headless; what a
	 * replay held back cannot be placed if it is lost again. */
	if (!proto_stream_is_at_boundary(&s->client_stream))
		return recover_refuse(s, server, phase, NULL,
				      "the connection to the primary was lost while a client message was only partly "
				      "sent to it: the session cannot move");
	if (s->replay->is_replaying) /* lost again before the replay was verified: it starts over (recover_start) */
		return (struct recover_decision){.lost.action = SESSION_LOST_RECOVER, .tr = {.action = TR_REPLAY}, .phase = TR_PHASE_IDLE};
	if (s->replay->sets.is_over_cap || sets_count(s) > cfg->tr_max_session_set_statements) {
		/* it would move with part of its state */
		return recover_refuse(s, server, phase, "08006",
				      "the connection to the primary was lost and the session set more variables than "
				      "[limits] tr_max_session_set_statements: it cannot move with all of them");
	}
	if (s->replay->sets.is_unsure)
		return recover_refuse(s, server, phase, "08006",
				      "the connection to the primary was lost and the session changed its settings in a "
				      "way tern could not follow (see README, Transaction Replay): it cannot move with "
				      "them");
	char status = s->replay->is_open ? s->replay->tx_status : leg->tx_status;
	bool is_in_tx = status == 'T' || status == 'E';
	enum tr_tx tx = mode >= TR_MODE_SELECT ? recover_tx_state(s, status)
			: status == 'E'	      ? TR_TX_FAILED
			: is_in_tx	      ? TR_TX_WRITTEN
					      : TR_TX_NONE;
	bool is_logged = recover_is_logged_request(s->replay, leg);
	const char *text = is_logged ? recover_text_of(s, s->replay->inflight.data, s->replay->inflight.len) : NULL;
	enum tr_kind kind = phase == TR_PHASE_IDLE ? TR_KIND_NONE : recover_kind(cfg, text, is_in_tx);
	struct tr_decision tr = tr_decide(mode, phase, tx, kind);
	if (tr.action == TR_CLOSE)
		return recover_refuse(s, server, phase, tr.sqlstate,
				      "the connection to the primary was lost in the middle of a message of the answer, "
				      "or during a COPY: the session cannot go on");
	if (recover_is_pinned(s))
		return recover_refuse(s, server, phase, NULL,
				      "the connection to the primary was lost while the session was bound to its server "
				      "(a [databases] server= pin, LISTEN, SQL PREPARE, a read on a replica under way; in "
				      "session pooling a temporary table, a cursor WITH HOLD or an advisory lock): it "
				      "cannot move");
	if (phase != TR_PHASE_IDLE && !recover_is_one_request(leg))
		return recover_refuse(s, server, phase, NULL,
				      "the connection to the primary was lost with several requests in flight "
				      "(pipelined): the session cannot move");
	/* Only a request tern kept runs again (through the relay, as the client's), after a replay or alone;
	 * another fails as never run, or as of unknown outcome. */
	if (tr.action == TR_REPLAY && phase != TR_PHASE_IDLE && !is_logged)
		tr = (struct tr_decision){TR_FAIL, "57P01"};
	if (tr.action == TR_REEXECUTE && !is_logged)
		tr = (struct tr_decision){TR_FAIL, phase == TR_PHASE_NOT_SENT ? "57P01" : "08007"};
	return (struct recover_decision){.lost.action = SESSION_LOST_RECOVER,
					      .tr = tr,
					      .phase = phase,
					      .is_in_tx = is_in_tx,
					      .is_commit = (kind == TR_KIND_COMMIT || kind == TR_KIND_ROLLBACK) && text};
}

enum tr_tx recover_tx_state(const struct session *s, char status)
{
	const struct session_replay *r = s->replay;
	if (status == 'E')
		return TR_TX_FAILED;
	if (status != 'T')
		return TR_TX_NONE;
	if (!r->is_tx_recorded || r->is_tx_unreplayable)
		return TR_TX_NOT_REPLAYABLE;
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	enum tr_tx tx = TR_TX_READ_ONLY;
	uint32_t start = 0;
	for (uint32_t i = 0; i < r->step_count; i++) {
		const char *text = recover_text_of(s, r->tx_log.data + start, r->steps[i].end - start);
		start = r->steps[i].end;
		if (!text) {
			tx = TR_TX_WRITTEN; /* (several statements in one step: what they are is not looked into) */
			continue;
		}
		struct classify_result c;
		recover_classify(cfg, text, &c);
		if ((c.kind == CLASSIFY_BEGIN || c.kind == CLASSIFY_SET_TRANSACTION) &&
		    (c.isolation == CLASSIFY_REPEATABLE_READ || c.isolation == CLASSIFY_SERIALIZABLE))
			return TR_TX_SNAPSHOT;
		enum tr_kind kind = recover_kind_of(&c);
		if (kind != TR_KIND_READ_SAFE && kind != TR_KIND_CONTROL)
			tx = TR_TX_WRITTEN;
	}
	return tx;
}

void recover_clear_tx_log(struct session_replay *r)
{
	r->tx_log.len = 0;
	r->step_count = 0;
	for (uint32_t i = 0; i < r->tx_stmt_count; i++)
		stmt_unref(r->tx_stmts[i]);
	r->tx_stmt_count = 0;
	r->tx_parsed = 0;
}

void recover_forget_tx(struct session_replay *r)
{
	r->is_tx_recorded = false;
	recover_clear_tx_log(r);
}

void recover_close_record(struct session_replay *r)
{
	r->is_open = r->is_unloggable = r->has_parse = r->has_named_parse = r->is_hashing = r->has_tx_ended = false;
	r->noted = r->logged = 0;
	r->inflight.len = 0;
	r->stale_plan = REPLAY_STALE_NONE;
}

void recover_drop_preamble(struct session_replay *r)
{
	r->preamble.len = 0;
	r->preamble_ref.at = NULL;
}

/* ---- the decision carried out ---- */

void recover_send_ready(struct session *s, char status)
{
	uint8_t ready[PROTO_HEADER_LEN + 1];
	size_t n = proto_build_ready(ready, sizeof(ready), status);
	session_send_to_client(s, ready, (uint32_t)n);
}

/* The statement in flight gets its one error: with its ReadyForQuery, or (a batch not yet synced) the
 * batch is skipped to its Sync, which tern answers. */
static void recover_fail(struct session *s, const struct leg *lost, const struct recover_decision *d)
{
	struct session_replay *r = s->replay;
	const char *sqlstate = d->tr.sqlstate;
	const char *message = strcmp(sqlstate, "08007") == 0   ? recover_msg_unknown
			      : strcmp(sqlstate, "25P02") == 0 ? recover_msg_aborted
			      : d->is_in_tx			 ? recover_msg_lost_tx
								 : recover_msg_not_sent;
	if (strcmp(sqlstate, "08007") == 0)
		s->host->stats.tr_unknown_outcome++;
	session_send_error(s, "ERROR", sqlstate, message, NULL);
	/* A COMMIT ends the transaction whatever became of it; any other error leaves it aborted (an
	 * unknown statement in a transaction may not have been its COMMIT: aborted, the safe side). */
	bool is_aborted = d->is_in_tx && !d->is_commit;
	r->aborted = is_aborted ? REPLAY_TX_ABORTED : REPLAY_TX_LIVE;
	if (lost->is_unsynced)
		r->is_skipping = true;
	else
		recover_send_ready(s, is_aborted ? 'E' : 'I');
}

static void recover_start(struct session *s, struct leg *leg, const struct recover_decision *d)
{
	struct session_replay *r = s->replay;
	struct host *host = s->host;
	uint64_t now = base_now_ns();
	TERN_ASSERT(d->lost.action == SESSION_LOST_RECOVER && leg == session_primary(s));
	struct pool_server *server = leg->conn ? leg->conn->server : leg->request.server;
	recover_lose(s, server, now);
	r->sets.is_restore_due = true; /* (observer_sets, on the next connection) */
	if (d->phase == TR_PHASE_NOT_SENT && !leg->conn) {
		/* The pool could not reach it: the request, still queued, waits for a primary. */
		TERN_INFO("client %s/%s: server %s cannot be reached (%s); the request waits for a primary", s->user,
			  s->database, server->name, leg->request.error.message);
		session_acquire(s, leg);
		return;
	}
	host->stats.tr_failovers++;
	recover_log(s, server, d->phase, tr_action_names[d->tr.action], d->tr.sqlstate);
	/* Lost again while its transaction was being replayed (a switchover's old primary that still answered
	 * as one, then went): nothing of the replay reached the client, and what the client sent since the
	 * first loss is still held (held_back), so the replay starts over on the next connection, within the
	 * deadline that began at the first loss. */
	TERN_ASSERT(!r->is_replaying || (d->tr.action == TR_REPLAY && r->inflight.len == 0));
	TERN_INFO("client %s/%s: the connection to server %s was lost (%s); %s%s%s%s", s->user, s->database,
		  server->name, recover_phase_names[d->phase], tr_action_names[d->tr.action],
		  d->tr.sqlstate ? " with " : "", d->tr.sqlstate ? d->tr.sqlstate : "",
		  r->is_replaying ? ": lost again during the replay of its transaction, the replay starts over" : "");
	journal_on_lost(s, d->tr.action == TR_REPLAY); /* what it sent there is answered here, or again */
	struct base_bytes again = r->inflight; /* the Query in flight, for TR_REEXECUTE */
	r->inflight = (struct base_bytes){0};
	recover_close_record(r);
	recover_drop_preamble(r); /* the start of the lost answer, never shown */
	struct leg *fresh = session_set_aside_leg(s, LEG_PRIMARY); /* set aside: this runs in its completion */
	if (!fresh) {
		free(again.data);
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	if (d->tr.action != TR_REPLAY)
		recover_forget_tx(r); /* the transaction, if one was open, is lost */
	switch (d->tr.action) {
	case TR_REPLAY:
		/* The transaction's steps go first, hidden, once a connection is there (observer_replay's
		 * attach); the statement in flight, and what the client sends meanwhile, wait until they are
		 * verified (recover_replay_done). */
		if (!r->is_replaying) { /* (lost again during the replay: what is held stays held) */
			r->held_back = again;
			r->held_inflight = d->phase == TR_PHASE_IDLE ? 0 : again.len;
			again = (struct base_bytes){0};
		}
		r->is_replaying = true;
		r->is_replay_failed = false;
		r->replay_next = 0;
		session_acquire(s, fresh);
		break;
	case TR_REHOME:
		if (!s->is_transaction_pooling)
			session_acquire(s, fresh); /* (session pooling holds a connection: its LISTENs are heard again now) */
		break;
	case TR_REEXECUTE:
		host->stats.tr_reexecuted++;
		s->client_active_ns = now; /* its timeouts count from here, not from its first sending */
		s->parts->feed(s, fresh, true, again.data, again.len);
		break;
	case TR_FAIL:
		host->stats.tr_replay_failures++;
		recover_fail(s, leg, d);
		break;
	case TR_FAIL_NEXT:
		host->stats.tr_replay_failures++;
		r->aborted = REPLAY_TX_LOST_NEXT;
		base_strlcpy(r->fail_sqlstate, d->tr.sqlstate, sizeof(r->fail_sqlstate));
		break;
	default:
		TERN_ASSERT(false);
	}
	free(again.data);
}

void recover_replay_done(struct session *s, struct leg *leg)
{
	struct session_replay *r = s->replay;
	TERN_ASSERT(r->is_replaying);
	r->is_replaying = false;
	struct base_bytes held = r->held_back;
	uint32_t inflight = r->held_inflight;
	r->held_back = (struct base_bytes){0};
	r->held_inflight = 0;
	if (!r->is_replay_failed) {
		s->host->stats.tr_replayed++;
		TERN_INFO("client %s/%s: its transaction was replayed on server %s (%u statements, verified)", s->user,
			  s->database, leg->conn->server->name, r->step_count);
	} else {
		/* It diverged (or failed, or runs at another isolation): it is rolled back there, and the
		 * client's transaction is lost with 40001, as PostgreSQL's serialization failure. */
		s->host->stats.tr_replay_failures++;
		TERN_INFO("client %s/%s: the replay of its transaction on server %s differed from what the client saw; "
			  "it is rolled back (40001)", s->user, s->database, leg->conn->server->name);
		recover_forget_tx(r);
		uint8_t rollback[32];
		size_t n = proto_build_query(rollback, sizeof(rollback), "ROLLBACK");
		if (leg_push_hidden(leg, rollback, (uint32_t)n) < 0) {
			free(held.data);
			session_end_later(s, SESSION_END_OUT_OF_MEMORY);
			return;
		}
		session_mark_dirty(s, &leg->to_server);
		if (inflight > 0) { /* the statement in flight gets the error: what follows it goes on */
			session_send_error(s, "ERROR", "40001", recover_msg_diverged, NULL);
			recover_send_ready(s, 'E');
			r->aborted = REPLAY_TX_ABORTED;
			memmove(held.data, held.data + inflight, held.len - inflight);
			held.len -= inflight;
		} else {
			r->aborted = REPLAY_TX_LOST_NEXT;
			base_strlcpy(r->fail_sqlstate, "40001", sizeof(r->fail_sqlstate));
		}
	}
	if (held.len > 0 && s->phase != SESSION_CLOSING) { /* (an ended session's client sends nothing more) */
		s->client_active_ns = base_now_ns();
		s->parts->feed(s, leg, true, held.data, held.len);
	}
	free(held.data);
}

/* ---- the client's messages while its transaction is lost ---- */

/* A text that ends the transaction: ROLLBACK (ABORT), or COMMIT (END), which answers ROLLBACK in an
 * aborted transaction. */
enum recover_end { RECOVER_END_NONE = 0, RECOVER_END_ROLLBACK, RECOVER_END_COMMIT };
static enum recover_end recover_ends_tx(const uint8_t *body, uint32_t len)
{
	if (len == 0 || body[len - 1] != '\0')
		return RECOVER_END_NONE; /* a long text's head */
	struct classify_result c;
	classify_query((const char *)body, NULL, &c);
	if (c.statement_count != 1)
		return RECOVER_END_NONE;
	return c.kind == CLASSIFY_ROLLBACK ? RECOVER_END_ROLLBACK
	       : c.kind == CLASSIFY_COMMIT ? RECOVER_END_COMMIT
					   : RECOVER_END_NONE;
}

/* The transaction ends: ROLLBACK's answer; but a COMMIT of a transaction whose loss the client has not been
 * told gets that error (it must not read as a success), the transaction over either way. */
static void recover_send_end(struct session *s, enum recover_end end)
{
	static const uint8_t complete[] = {PROTO_BE_COMMAND_COMPLETE, 0, 0, 0, 13, 'R', 'O', 'L', 'L', 'B', 'A', 'C', 'K', 0};
	struct session_replay *r = s->replay;
	if (end == RECOVER_END_COMMIT && r->aborted == REPLAY_TX_LOST_NEXT)
		session_send_error(s, "ERROR", r->fail_sqlstate, recover_msg_lost_tx, NULL);
	else
		session_send_to_client(s, complete, sizeof(complete));
}

/* The transaction's one error (the loss's, first) or 25P02. */
static void recover_send_aborted(struct session *s)
{
	struct session_replay *r = s->replay;
	if (r->aborted == REPLAY_TX_LOST_NEXT) {
		session_send_error(s, "ERROR", r->fail_sqlstate, recover_msg_lost_tx, NULL);
		r->aborted = REPLAY_TX_ABORTED;
	} else {
		session_send_error(s, "ERROR", "25P02", recover_msg_aborted, NULL);
	}
}

unsigned recover_client_type(uint8_t type)
{
	switch (type) {
	case PROTO_FE_COPY_DATA:
	case PROTO_FE_COPY_DONE:
	case PROTO_FE_COPY_FAIL:
	case PROTO_FE_FLUSH:
		return 0; /* dropped */
	case PROTO_FE_TERMINATE:
		return PROTO_INSPECT;
	default:
		return PROTO_HOLD | PROTO_HOLD_HEAD; /* a long one's head is enough */
	}
}

int recover_client_message(struct session *s, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct session_replay *r = s->replay;
	bool is_aborted = r->aborted != REPLAY_TX_LIVE;
	if (type == PROTO_FE_SYNC) {
		r->is_skipping = false;
		if (r->is_batch_ending)
			r->aborted = REPLAY_TX_LIVE;
		r->is_batch_ending = false;
		recover_send_ready(s, r->aborted != REPLAY_TX_LIVE ? 'E' : 'I');
		return 0;
	}
	if (r->is_skipping)
		return 0; /* the rest of a batch that failed */
	TERN_ASSERT(is_aborted);
	switch (type) {
	case PROTO_FE_QUERY: {
		enum recover_end end = recover_ends_tx(body, len);
		if (end != RECOVER_END_NONE) {
			recover_send_end(s, end);
			r->aborted = REPLAY_TX_LIVE;
			recover_send_ready(s, 'I');
		} else {
			recover_send_aborted(s);
			recover_send_ready(s, 'E');
		}
		return 0;
	}
	case PROTO_FE_PARSE: {
		/* name\0 text\0 ...: a ROLLBACK or COMMIT batch (as drivers send them) is answered */
		uint32_t offset = 0;
		const char *text = proto_read_cstring(body, len, &offset) ? proto_read_cstring(body, len, &offset) : NULL;
		enum recover_end ending = text ? recover_ends_tx((const uint8_t *)text, (uint32_t)strlen(text) + 1)
					       : RECOVER_END_NONE;
		if (ending != RECOVER_END_NONE) {
			r->is_batch_ending = true;
			r->is_batch_commit = ending == RECOVER_END_COMMIT;
			session_send_to_client(s, proto_parse_complete, sizeof(proto_parse_complete));
			return 0;
		}
		break;
	}
	case PROTO_FE_BIND:
		if (r->is_batch_ending) {
			session_send_to_client(s, proto_bind_complete, sizeof(proto_bind_complete));
			return 0;
		}
		break;
	case PROTO_FE_DESCRIBE:
		if (r->is_batch_ending) {
			session_send_to_client(s, proto_no_data, sizeof(proto_no_data));
			return 0;
		}
		break;
	case PROTO_FE_EXECUTE:
		if (r->is_batch_ending) {
			recover_send_end(s, r->is_batch_commit ? RECOVER_END_COMMIT : RECOVER_END_ROLLBACK);
			return 0;
		}
		break;
	case PROTO_FE_CLOSE:
		session_send_to_client(s, proto_close_complete, sizeof(proto_close_complete));
		return 0;
	case PROTO_FE_FUNCTION_CALL:
		recover_send_aborted(s);
		recover_send_ready(s, 'E');
		return 0;
	default:
		break;
	}
	recover_send_aborted(s);
	r->is_skipping = true;
	r->is_batch_ending = false;
	return 0;
}

bool recover_shows_notice(struct session *s, const uint8_t *body, uint32_t len)
{
	struct proto_error_fields f;
	if (proto_error_parse(body, len, &f) < 0)
		return true;
	/* The primary refused a write as read-only: the monitor looks now (and fences it if it stays so). */
	if (strcmp(f.sqlstate, "25006") == 0 && s->host->runtime->monitor)
		monitor_round_request(s->host->runtime->monitor);
	if (strncmp(f.sqlstate, "57P0", 4) != 0 || f.sqlstate[4] > '3')
		return true;
	return strcmp(f.severity, "FATAL") != 0 && strcmp(f.severity, "PANIC") != 0 && strcmp(f.severity, "WARNING") != 0;
}

struct session_lost_decision recover_on_lost(struct session *s, struct leg *leg, enum leg_fault fault)
{
	struct recover_decision d = recover_decide_all(s, leg, fault); /* once: the config may change after */
	if (d.lost.action == SESSION_LOST_RECOVER)
		recover_start(s, leg, &d);
	return d.lost;
}
