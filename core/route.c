/* Reads on replicas: the decision for a Query, the wait for an LSN target, the dispatch to a leg, the
 * backlog, tern.consistency, and the write-LSN probe (observer_route). See route.h. */
#include "route.h"

#include "classify.h"
#include "monitor.h"
#include "observer.h"
#include "stmts.h"

#include <ctype.h>
#include <inttypes.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const route_level_names[] = {"primary", "eventual", "session", "strict", NULL};
/* (false and true are on and off's synonyms: the index modulo 2) */
static const char *const route_switch_names[] = {"off", "on", "false", "true", NULL};

/* tern's own settings, by enum route_setting: SET, RESET and SHOW of them are answered by tern. */
static const struct {
	const char *name;
	const char *const *values;
	uint32_t distinct; /* values[i] means i % distinct */
	const char *hint;
} route_settings[ROUTE_SETTING_COUNT] = {
	[ROUTE_SETTING_CONSISTENCY] = {"tern.consistency", route_level_names, 4,
				       "Available values: primary, eventual, session, strict, default."},
	[ROUTE_SETTING_SPLIT] = {"tern.transaction_split", route_switch_names, 2, "Available values: off, on, default."},
};

/* The value of setting `id` that `word` names (any case), or -1. */
static int route_value_of(enum route_setting id, const char *word, size_t len)
{
	const char *const *values = route_settings[id].values;
	for (int i = 0; values[i]; i++)
		if (strlen(values[i]) == len && strncasecmp(word, values[i], len) == 0)
			return i % (int)route_settings[id].distinct;
	return -1;
}

int route_setting_from_name(const char *name, size_t len)
{
	for (int i = 0; i < ROUTE_SETTING_COUNT; i++)
		if (strlen(route_settings[i].name) == len && strncasecmp(name, route_settings[i].name, len) == 0)
			return i;
	return -1;
}

int route_setting_take(struct session *s, enum route_setting id, const char *value)
{
	int v = route_value_of(id, value, strlen(value));
	if (v < 0)
		return -1;
	s->routing.settings[id] = (uint8_t)v;
	s->routing.settings_set |= 1u << id;
	return 0;
}

const char *route_setting_hint(enum route_setting id) { return route_settings[id].hint; }

/* The client's value of setting id, or the configuration's default of the moment. */
static int route_setting(const struct session *s, const struct tern_config *cfg, enum route_setting id)
{
	if (s->routing.settings_set & (1u << id))
		return s->routing.settings[id];
	return id == ROUTE_SETTING_CONSISTENCY ? cfg->default_consistency : cfg->transaction_split;
}

static enum config_consistency route_level(const struct session *s, const struct tern_config *cfg)
{
	return (enum config_consistency)route_setting(s, cfg, ROUTE_SETTING_CONSISTENCY);
}

/* ---- tern.consistency and tern.transaction_split: SET, RESET, SHOW, answered here ---- */

static const char *route_skip_space(const char *p)
{
	while (isspace((unsigned char)*p))
		p++;
	return p;
}

/* The keyword at *p (case-insensitive, not followed by an identifier character): true and *p past it. */
static bool route_keyword(const char **p, const char *word)
{
	size_t n = strlen(word);
	if (strncasecmp(*p, word, n) != 0 || isalnum((unsigned char)(*p)[n]) || (*p)[n] == '_' || (*p)[n] == '.')
		return false;
	*p = route_skip_space(*p + n);
	return true;
}

/* The end of a statement: blanks, one optional ';', blanks. */
static bool route_is_end(const char *p)
{
	p = route_skip_space(p);
	if (*p == ';')
		p = route_skip_space(p + 1);
	return *p == '\0';
}

static void route_send_ready(struct session *s)
{
	const struct leg *leg = session_client_leg(s);
	uint8_t msg[8];
	size_t n = proto_build_ready(msg, sizeof(msg), leg->conn ? leg->tx_status : 'I');
	session_send_to_client(s, msg, (uint32_t)n);
}

static void route_send_complete(struct session *s, const char *tag)
{
	uint8_t msg[32] = {PROTO_BE_COMMAND_COMPLETE};
	uint32_t n = (uint32_t)strlen(tag) + 1;
	proto_write_u32(msg + 1, 4 + n);
	memcpy(msg + PROTO_HEADER_LEN, tag, n);
	session_send_to_client(s, msg, PROTO_HEADER_LEN + n);
}

/* SHOW's one text column and row. */
static void route_send_show(struct session *s, const char *name, const char *value)
{
	uint8_t msg[128];
	uint8_t *p = msg + PROTO_HEADER_LEN;
	size_t name_size = strlen(name) + 1;
	*p++ = 0;
	*p++ = 1;
	memcpy(p, name, name_size);
	p += name_size;
	static const uint8_t attrs[18] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 25, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0};
	memcpy(p, attrs, sizeof(attrs)); /* table 0, column 0, type text (25), length -1, modifier -1, text */
	p += sizeof(attrs);
	msg[0] = PROTO_BE_ROW_DESCRIPTION;
	proto_write_u32(msg + 1, (uint32_t)(p - msg - 1));
	session_send_to_client(s, msg, (uint32_t)(p - msg));
	uint32_t n = (uint32_t)strlen(value);
	msg[0] = PROTO_BE_DATA_ROW;
	proto_write_u32(msg + 1, 4 + 2 + 4 + n);
	msg[5] = 0;
	msg[6] = 1;
	proto_write_u32(msg + 7, n);
	memcpy(msg + 11, value, n);
	session_send_to_client(s, msg, 11 + n);
	route_send_complete(s, "SHOW");
}

/* The value of SET tern.x {TO|=} value: one of the setting's names, bare or quoted, or DEFAULT (-1). -2
 * when it is none of them; *end past it. */
static int route_parse_value(enum route_setting id, const char *p, const char **end)
{
	bool quoted = *p == '\'';
	if (quoted)
		p++;
	const char *word = p;
	while (isalpha((unsigned char)*p) || *p == '_')
		p++;
	size_t len = (size_t)(p - word);
	if (quoted && *p++ != '\'')
		return -2;
	*end = p;
	if (!quoted && len == 7 && strncasecmp(word, "default", len) == 0)
		return -1;
	int value = route_value_of(id, word, len);
	return value >= 0 ? value : -2;
}

/* Refuses the statement (an ErrorResponse, then ReadyForQuery). */
static void route_refuse(struct session *s, const char *sqlstate, const char *message, const char *hint)
{
	session_send_error(s, "ERROR", sqlstate, message, hint);
	route_send_ready(s);
}

/* Answers a SET/RESET/SHOW of a tern.* name (the client has nothing in flight). */
static void route_answer_setting(struct session *s, const char *sql)
{
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	const char *p = route_skip_space(sql);
	bool is_show = route_keyword(&p, "show"), is_reset = !is_show && route_keyword(&p, "reset");
	if (!is_show && !is_reset) {
		(void)route_keyword(&p, "set");
		if (route_keyword(&p, "local")) {
			route_refuse(s, "0A000", "SET LOCAL of a tern.* parameter is not supported",
				     "tern's parameters hold for the session: SET them, and SET them back");
			return;
		}
		(void)route_keyword(&p, "session");
	}
	size_t name_len = strcspn(p, " \t\r\n;=");
	int id = route_setting_from_name(p, name_len);
	if (id < 0) {
		char message[128];
		snprintf(message, sizeof(message), "unrecognized configuration parameter \"%.*s\"",
			 (int)TERN_MIN(name_len, 64u), p);
		route_refuse(s, "42704", message, "tern's own parameters: tern.consistency, tern.transaction_split");
		return;
	}
	const char *name = route_settings[id].name;
	p = route_skip_space(p + name_len);
	int value = -1;
	if (!is_show && !is_reset) {
		if (*p == '=')
			p = route_skip_space(p + 1);
		else if (!route_keyword(&p, "to"))
			p = "?"; /* refused below */
		value = route_parse_value((enum route_setting)id, p, &p);
		if (value == -2) {
			char message[96];
			snprintf(message, sizeof(message), "invalid value for parameter \"%s\"", name);
			route_refuse(s, "22023", message, route_settings[id].hint);
			return;
		}
	}
	if (!route_is_end(p)) {
		char message[96];
		snprintf(message, sizeof(message), "%s must be set, reset or shown in a query of its own", name);
		route_refuse(s, "0A000", message, NULL);
		return;
	}
	if (is_show) {
		route_send_show(s, name, route_settings[id].values[route_setting(s, cfg, (enum route_setting)id)]);
	} else {
		if (value >= 0)
			s->routing.settings_set |= 1u << id;
		else
			s->routing.settings_set &= ~(1u << id);
		s->routing.settings[id] = (uint8_t)(value >= 0 ? value : 0);
		route_send_complete(s, is_reset ? "RESET" : "SET");
	}
	route_send_ready(s);
}

/* SET, RESET or SHOW followed by a tern.* name: tern's, never a server's. */
static bool route_is_setting(const char *sql)
{
	const char *p = route_skip_space(sql);
	if (!route_keyword(&p, "set") && !route_keyword(&p, "reset") && !route_keyword(&p, "show"))
		return false;
	if (!route_keyword(&p, "session"))
		(void)route_keyword(&p, "local");
	return strncasecmp(p, "tern.", 5) == 0;
}

/* Nothing of the client's is owed by a server: tern may answer in its place now. */
static bool route_leg_owes_nothing(const struct leg *leg)
{
	return !leg || (leg->pending_ready == 0 && leg->replies.count == 0 && !leg->is_unsynced &&
			!leg->is_request_pending && sendq_is_empty(&leg->to_server));
}

static bool route_is_settled(const struct session *s)
{
	if (s->routing.state == ROUTE_REPLICA_TX) /* between two of its requests; the primary owes only tern's */
		return route_leg_owes_nothing(session_client_leg(s));
	return route_leg_owes_nothing(session_primary(s)) && route_leg_owes_nothing(s->legs[LEG_REPLICA]);
}

/* ---- the decision ---- */

/* A read may go elsewhere than the primary now: transaction pooling, a level other than primary, and
 * nothing in flight or queued on either leg (a read must not pass what the client sent before it). */
static bool route_wants(const struct session *s, enum config_consistency level)
{
	if (level == CONFIG_CONSISTENCY_PRIMARY || s->phase != SESSION_READY || s->is_pause_waiting ||
	    session_is_pinned(s) || !s->host->runtime->monitor)
		return false;
	const struct leg *p = session_primary(s), *r = s->legs[LEG_REPLICA];
	if (r && (r->conn || r->is_request_pending || !sendq_is_empty(&r->to_server)))
		return false;
	if (!p->conn)
		return !p->is_request_pending && route_is_settled(s);
	/* Only the write-LSN probe is owed: the read waits for its answer, its target (route_try). */
	return p->is_probe_answering && p->pending_ready == p->hidden_ready && p->replies.count == 0 &&
	       !p->is_unsynced && sendq_is_empty(&p->to_server);
}

/* The Query (body as sent) becomes the held message, header included. */
static int route_hold(struct session *s, const uint8_t *body, uint32_t len)
{
	uint8_t header[PROTO_HEADER_LEN] = {PROTO_FE_QUERY};
	proto_write_u32(header + 1, len + 4);
	s->routing.held.len = 0;
	return base_bytes_append(&s->routing.held, header, sizeof(header)) < 0 ? -ENOMEM
									: base_bytes_append(&s->routing.held, body, len);
}

/* The read's target: strict, a primary LSN probed after now; session, the client's last write's
 * (unless a write ran that no probe covers: its probe failed, or it ran at another level; then
 * strict's). Not while the write's probe is still to answer (route_try sets it then). */
static void route_set_target(struct session *s)
{
	struct session_route *route = &s->routing;
	if (route->is_awaiting_probe)
		return;
	if (route->level == CONFIG_CONSISTENCY_STRICT ||
	    (route->level == CONFIG_CONSISTENCY_SESSION && route->is_write_unprobed))
		route->probe_ticket = monitor_probe_request(s->host->runtime->monitor);
	else if (route->level == CONFIG_CONSISTENCY_SESSION)
		route->target_lsn = route->write_lsn;
}

void route_classify(struct session *s, const struct tern_config *cfg, const char *sql, struct classify_result *r)
{
	if (!s->host->classify_cache)
		s->host->classify_cache = calloc(1, sizeof(*s->host->classify_cache));
	if (s->host->classify_cache)
		classify_cached(s->host->classify_cache, cfg, sql, cfg->read_functions, r);
	else
		classify_query(sql, cfg->read_functions, r);
}

/* The held read (a Query, or a batch) starts its wait for a replica at `level`. */
static void route_read_begins(struct session *s, const struct tern_config *cfg, enum config_consistency level)
{
	struct session_route *route = &s->routing;
	route->state = ROUTE_WAITING;
	route->level = level;
	route->is_waited = false;
	route->target_lsn = 0;
	route->probe_ticket = 0;
	route->arrived_ns = s->client_active_ns;
	route->deadline_ns = route->arrived_ns + (uint64_t)cfg->wait_timeout_ms * BASE_NS_PER_MS;
	route->is_awaiting_probe = level == CONFIG_CONSISTENCY_SESSION && session_primary(s)->is_probe_answering;
	route_set_target(s);
}

/* A Query in a read-only transaction on a replica: one request at a time (the scan stops behind it, so
 * nothing the client sent after a COMMIT reaches the replica); a text of several statements that is not
 * all reads is refused (one of them could end the transaction, and the rest must not run on the replica). */
static enum route_query route_tx_query(struct session *s, const struct tern_config *cfg, const char *sql)
{
	struct classify_result r;
	if (!classify_fast_path(sql, &r))
		route_classify(s, cfg, sql, &r);
	if (r.statement_count > 1 && r.kind != CLASSIFY_READ) {
		session_send_error(s, "ERROR", "0A000",
				   "tern runs this READ ONLY transaction on a replica: send its statements other than "
				   "reads one per query",
				   NULL);
		route_send_ready(s);
		return ROUTE_QUERY_REFUSED;
	}
	return ROUTE_QUERY_ADMIT_LAST;
}

void route_tx_request_sent(struct session *s)
{
	TERN_ASSERT(s->routing.state == ROUTE_REPLICA_TX);
	s->routing.state = ROUTE_REPLICA_TX_BUSY;
}

/* Queues tern's own Query behind what leg holds; one more ReadyForQuery owed. 0 or -ENOMEM. */
static int route_push_query(struct leg *leg, const char *sql)
{
	uint8_t msg[256];
	size_t n = proto_build_query(msg, sizeof(msg), sql);
	int rc = n ? sendq_push_copy(&leg->to_server, msg, (uint32_t)n) : -ENOMEM;
	if (rc == 0)
		leg->pending_ready++;
	return rc;
}

/* Queues a hidden Query (its answer never reaches the client) behind what leg holds. 0 or -ENOMEM. */
static int route_push_hidden(struct leg *leg, const char *sql)
{
	TERN_ASSERT(leg->pending_ready == leg->hidden_ready); /* hidden answers come first */
	int rc = route_push_query(leg, sql);
	if (rc < 0)
		return rc;
	leg->hidden_ready++;
	return 0;
}

/* SET TRANSACTION READ ONLY as the first statement after a plain BEGIN on the primary: the transaction,
 * empty so far (no snapshot yet), may move to a replica (not a serializable one: a standby refuses it). */
static bool route_begin_may_move(struct session *s, const struct tern_config *cfg, const char *sql)
{
	const struct leg *primary = session_primary(s), *replica = s->legs[LEG_REPLICA];
	struct classify_result r;
	s->routing.is_begin_alone = false;
	if (!primary->conn || primary->tx_status != 'T' || !route_leg_owes_nothing(primary) || (replica && replica->conn) ||
	    s->is_pause_waiting || session_is_pinned(s) || !s->host->runtime->monitor)
		return false;
	if (!classify_fast_path(sql, &r))
		route_classify(s, cfg, sql, &r);
	return r.kind == CLASSIFY_SET_TRANSACTION && r.is_read_only && r.statement_count == 1 &&
	       r.isolation != CLASSIFY_SERIALIZABLE;
}

/* It moves: a hidden ROLLBACK ends the primary's (its connection goes back), and the held SET waits for
 * a replica as a BEGIN READ ONLY would, behind a hidden BEGIN there (route_dispatch). 0 or -ENOMEM. */
static int route_begin_move(struct session *s)
{
	struct leg *primary = session_primary(s);
	int rc = route_push_hidden(primary, "ROLLBACK");
	if (rc < 0)
		return rc;
	session_mark_dirty(s, &primary->to_server);
	leg_resume(primary);
	s->routing.is_batch = false;
	s->routing.is_tx = true;
	s->routing.is_begin_hidden = true;
	return 0;
}

/* ---- transaction_split: reads of a read-committed transaction on the primary ---- */

static bool route_split_is_on(const struct session *s)
{
	return route_setting(s, runtime_config(s->host->runtime), ROUTE_SETTING_SPLIT) && s->host->runtime->monitor;
}

/* The primary was seen idle (nothing owed, no transaction): what follows is noted afresh. */
static void route_split_reset_if_idle(struct session *s)
{
	const struct leg *p = session_primary(s);
	if (route_leg_owes_nothing(p) && (!p->conn || p->tx_status == 'I')) {
		s->routing.split.tx = (struct split_tx){0};
		s->routing.split.is_followed = true;
	}
}

/* A statement going to the primary while transaction_split is on: noted (after the idle check). */
static void route_split_note(struct session *s, const struct classify_result *r)
{
	route_split_reset_if_idle(s);
	split_tx_note(&s->routing.split.tx, r);
}

/* A message routing could not read (too long): it may have written. */
static void route_split_note_unread(struct session *s)
{
	route_split_reset_if_idle(s);
	s->routing.split.tx.has_write = true;
}

void route_note_unread_query(struct session *s)
{
	if (route_split_is_on(s))
		route_split_note_unread(s);
	else
		s->routing.split.is_followed = false;
}

/* The split read may go now: the transaction is open on the primary's connection, which owes nothing
 * (the read must not pass what the client sent before it), and the replica leg is free or idle on the
 * transaction's replica. */
static bool route_split_is_ready(const struct session *s)
{
	const struct leg *p = session_primary(s), *r = s->legs[LEG_REPLICA];
	if (s->phase != SESSION_READY || s->is_pause_waiting || session_is_pinned(s) || !route_leg_owes_nothing(p))
		return false;
	if (!r)
		return true;
	if (r->is_request_pending || !sendq_is_empty(&r->to_server))
		return false;
	return !r->conn || (s->routing.split.server && leg_is_idle(r));
}

/* The transaction's replica is let go: its connection goes back (drop: it is closed, its server down). */
static void route_split_unpin(struct session *s, bool drop)
{
	struct route_split *sp = &s->routing.split;
	if (!sp->server)
		return;
	sp->server = NULL;
	struct leg *leg = s->legs[LEG_REPLICA];
	if (!leg || !leg->conn || s->routing.state == ROUTE_ON_REPLICA)
		return;
	if (drop) { /* set aside, not freed: this may run inside that leg's own completion */
		leg_drop(leg);
		(void)session_set_aside_leg(s, LEG_REPLICA);
	} else {
		/* (if it cannot go back now, a later progress lets it go; what it says unasked stays hidden) */
		session_try_release(s, leg);
	}
}

/* The transaction ended (its COMMIT or ROLLBACK answered, or an error ended it): its replica goes. A
 * replica connection nothing keeps and that could not go back when let go goes now if it can. */
static void route_split_settle(struct session *s)
{
	const struct leg *p = session_primary(s);
	struct leg *r = s->legs[LEG_REPLICA];
	if (s->routing.split.server && route_leg_owes_nothing(p) && (!p->conn || p->tx_status == 'I'))
		route_split_unpin(s, false);
	else if (!s->routing.split.server && s->routing.state == ROUTE_IDLE && r && r->conn)
		session_try_release(s, r);
}

/* A Query while transaction_split is on: noted, unless it is a read of the transaction that meets the
 * five conditions (split.h), which is taken for a replica at the strict level (ROUTE_QUERY_TAKEN). The
 * transaction's isolation is asked of the server at its first such read (a hidden SHOW
 * transaction_isolation, which takes no snapshot), while the strict probe goes out. */
static enum route_query route_split_query(struct session *s, const struct tern_config *cfg, const uint8_t *body,
					  uint32_t len)
{
	struct route_split *sp = &s->routing.split;
	struct leg *p = session_primary(s);
	struct classify_result r;
	const char *sql = (const char *)body;
	if (!classify_fast_path(sql, &r))
		route_classify(s, cfg, sql, &r);
	if (sp->is_unread) { /* a Parse or Bind too long to read went before it */
		route_split_note_unread(s);
		sp->is_unread = false;
	}
	route_split_reset_if_idle(s);
	if (!sp->is_followed) /* splitting was off for some of the transaction: what it did is not known */
		sp->tx.has_write = true;
	bool is_read = r.kind == CLASSIFY_READ || r.kind == CLASSIFY_WRITE; /* what the conditions are about */
	if (!is_read || !p->conn || p->tx_status != 'T') { /* not a transaction's read (or a failed one's) */
		split_tx_note(&sp->tx, &r);
		return ROUTE_QUERY_ADMIT;
	}
	struct split_tx assumed = sp->tx;
	bool is_polar = p->conn->server->is_polar; /* its ReadyForQuery says whether the transaction splits */
	assumed.xact = p->polar_marker == 'x' ? SPLIT_XACT_SPLITTABLE
		       : p->polar_marker == 'w' ? SPLIT_XACT_WAL_PENDING
						: SPLIT_XACT_NONE;
	bool is_isolation_asked = sp->tx.server_isolation == CLASSIFY_ISOLATION_DEFAULT;
	if (is_isolation_asked)
		assumed.server_isolation = CLASSIFY_READ_COMMITTED; /* the rest first: ask only for a read that may go */
	enum split_refusal why = split_check(&assumed, &r, true, is_polar);
	if (why != SPLIT_ELIGIBLE) {
		s->host->stats.split_refused[why]++;
		split_tx_note(&sp->tx, &r);
		return ROUTE_QUERY_ADMIT;
	}
	if (!route_split_is_ready(s)) {
		s->host->stats.split_pipelined++;
		return ROUTE_QUERY_ADMIT;
	}
	if (route_hold(s, body, len) < 0)
		return ROUTE_QUERY_ADMIT;
	if (is_isolation_asked) {
		if (route_push_probe(s, p, ROUTE_PROBE_ISOLATION) < 0) {
			s->routing.held.len = 0;
			return ROUTE_QUERY_ADMIT;
		}
		session_mark_dirty(s, &p->to_server);
		leg_resume(p);
	}
	s->routing.is_batch = s->routing.is_tx = false;
	s->routing.is_split = true;
	s->routing.is_xid_import = is_polar && sp->tx.has_write; /* REPLICA_TXN_SPLIT: a polar replica only */
	route_read_begins(s, cfg, CONFIG_CONSISTENCY_STRICT); /* every commit acknowledged before it arrived */
	s->routing.is_awaiting_isolation = is_isolation_asked;
	return ROUTE_QUERY_TAKEN;
}

enum route_query route_on_query(struct session *s, const uint8_t *body, uint32_t len, enum route_probe *probe_after)
{
	if (len == 0 || body[len - 1] != '\0')
		return ROUTE_QUERY_ADMIT; /* malformed: the server says so */
	const char *sql = (const char *)body;
	if (route_is_setting(sql)) {
		if (session_client_leg(s)->copy.is_copy_in)
			return ROUTE_QUERY_ADMIT; /* a Query inside COPY FROM STDIN: the server refuses it, as any other */
		if (route_is_settled(s)) {
			route_answer_setting(s, sql);
			return ROUTE_QUERY_ANSWERED;
		}
		const struct leg *replica = s->legs[LEG_REPLICA];
		if (s->routing.state != ROUTE_IDLE || session_primary(s)->is_unsynced || (replica && replica->is_unsynced)) {
			/* Behind extended-protocol messages with no Sync yet (in a read-only transaction on a replica,
			 * the only way a replica transaction is not settled here): their answers come only after a
			 * Sync the client sends behind this, so tern can never answer it in its turn. */
			base_strlcpy(s->end_error.sqlstate, "0A000", sizeof(s->end_error.sqlstate));
			base_strlcpy(s->end_error.message,
				     "SET, SHOW or RESET of tern.* behind extended-protocol messages not yet synced is not "
				     "supported: send a Sync first",
				     sizeof(s->end_error.message));
			session_end_later(s, SESSION_END_PROTOCOL_VIOLATION);
			return ROUTE_QUERY_REFUSED;
		}
		if (route_hold(s, body, len) < 0)
			return ROUTE_QUERY_ADMIT; /* out of memory: the server answers it (as a placeholder) */
		s->routing.state = ROUTE_SETTLING; /* answered once what is owed before it is in */
		return ROUTE_QUERY_TAKEN;
	}
	if (!s->is_transaction_pooling || s->pinned_server)
		return ROUTE_QUERY_ADMIT; /* every query goes to the one server */
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	if (route_is_replica_tx(s))
		return route_tx_query(s, cfg, sql);
	enum config_consistency level = route_level(s, cfg);
	struct classify_result r;
	if (!route_split_is_on(s))
		s->routing.split.is_followed = false; /* a statement it did not note */
	else if (route_split_query(s, cfg, body, len) == ROUTE_QUERY_TAKEN)
		return ROUTE_QUERY_TAKEN;
	if (s->routing.is_begin_alone && level != CONFIG_CONSISTENCY_PRIMARY && route_begin_may_move(s, cfg, sql) &&
	    route_hold(s, body, len) == 0 && route_begin_move(s) == 0) {
		route_read_begins(s, cfg, level);
		return ROUTE_QUERY_TAKEN;
	}
	if (!route_wants(s, level)) {
		/* In a transaction, the session level probes behind its COMMIT (the lexer knows it alone). */
		const struct leg *leg = session_primary(s);
		if (level == CONFIG_CONSISTENCY_SESSION && leg->conn && leg->tx_status != 'I' &&
		    classify_fast_path(sql, &r) && r.kind == CLASSIFY_COMMIT)
			*probe_after = ROUTE_PROBE_LSN;
		return ROUTE_QUERY_ADMIT;
	}
	route_classify(s, cfg, sql, &r);
	bool is_tx = r.kind == CLASSIFY_BEGIN && r.is_read_only && r.statement_count == 1;
	if (r.kind != CLASSIFY_READ && !is_tx) {
		/* Behind a COPY the server reads COPY data, not a query: its write is probed at the release. */
		if (level == CONFIG_CONSISTENCY_SESSION && r.kind == CLASSIFY_WRITE && !r.has_copy && !r.is_parse_error)
			*probe_after = ROUTE_PROBE_LSN;
		s->routing.is_begin_sent = r.kind == CLASSIFY_BEGIN && r.statement_count == 1 &&
					   r.isolation != CLASSIFY_SERIALIZABLE; /* SET TRANSACTION READ ONLY may follow */
		return ROUTE_QUERY_ADMIT;
	}
	if (route_hold(s, body, len) < 0)
		return ROUTE_QUERY_ADMIT;
	s->routing.is_batch = false;
	s->routing.is_tx = is_tx;
	route_read_begins(s, cfg, level);
	return ROUTE_QUERY_TAKEN;
}

int route_backlog_append(struct session *s, const uint8_t *data, uint32_t len)
{
	return len ? base_bytes_append(&s->routing.backlog, data, len) : 0;
}

/* The replica to serve the read (pick.h) among the standbys that may: up, not the primary, a weight
 * above 0, at the target (or, eventual, within the lag bounds). *any: a standby may serve reads at all
 * (at some LSN). */
static struct pool_server *route_pick(struct session *s, const struct tern_config *cfg, uint64_t now, bool *any,
				      bool is_wait_for)
{
	const struct monitor *m = s->host->runtime->monitor;
	struct tern_runtime *rt = s->host->runtime;
	const struct pool_server *primary = runtime_primary(rt);
	uint32_t count = monitor_server_count(m);
	struct pick_candidate ready[PICK_SERVERS_MAX];
	uint32_t ready_count = 0;
	*any = false;
	if (__atomic_load_n(&monitor_server_at(m, primary->index)->role, __ATOMIC_ACQUIRE) == MONITOR_UNMONITORED)
		return NULL; /* no LSN of the primary to hold a replica to: every read stays there */
	for (uint32_t i = 0; i < count && i < PICK_SERVERS_MAX; i++) {
		const struct monitor_server *ms = monitor_server_at(m, i);
		struct pool_server *server = &rt->pool->servers[i];
		if (__atomic_load_n(&ms->role, __ATOMIC_ACQUIRE) != MONITOR_STANDBY || server == primary ||
		    server->weight == 0 || server == s->routing.excluded || (s->routing.is_xid_import && !server->is_polar) ||
		    (s->routing.is_split && s->routing.split.server && server != s->routing.split.server))
			continue; /* (a split read: the transaction's replica, once it has one) */
		if (s->routing.level == CONFIG_CONSISTENCY_EVENTUAL) {
			struct monitor_lag lag = monitor_lag_of(m, i, primary, now);
			if ((cfg->max_replica_lag_bytes && lag.bytes > cfg->max_replica_lag_bytes) ||
			    (cfg->max_replica_lag_ms &&
			     (!lag.is_known || lag.ns > (uint64_t)cfg->max_replica_lag_ms * BASE_NS_PER_MS)))
				continue;
		}
		*any = true;
		if (is_wait_for ? __atomic_load_n(&ms->version, __ATOMIC_RELAXED) < MONITOR_WAIT_FOR_LSN_VERSION
				: __atomic_load_n(&ms->lsn, __ATOMIC_RELAXED) < s->routing.target_lsn)
			continue; /* (not at the target; or, waiting in-band, a server without WAIT FOR LSN) */
		ready[ready_count++] = (struct pick_candidate){
			.server = i, .weight = server->weight, .load = __atomic_load_n(&server->reads_running, __ATOMIC_RELAXED)};
	}
	if (ready_count == 0)
		return NULL;
	return &rt->pool->servers[ready[pick_server(&s->host->pick, ready, ready_count)].server];
}

/* The read running on a replica is over (answered, lost, or its session ended): off its load. */
static void route_release_server(struct session *s)
{
	if (!s->routing.server)
		return;
	__atomic_sub_fetch(&s->routing.server->reads_running, 1, __ATOMIC_RELAXED);
	s->routing.server = NULL;
}

static void route_unwait(struct session *s)
{
	if (!base_list_is_linked(&s->routing.wait_link))
		return;
	base_list_remove(&s->routing.wait_link);
	__atomic_store_n(&s->host->route_waiting, s->host->route_waiting - 1, __ATOMIC_RELAXED);
}

static void route_observe_wait(struct host_stats *stats, uint64_t waited_ns)
{
	static const uint64_t bounds_us[HOST_ROUTE_WAIT_BUCKETS] = HOST_ROUTE_WAIT_BOUNDS_US;
	uint64_t us = waited_ns / 1000u;
	uint32_t i = 0;
	while (i < HOST_ROUTE_WAIT_BUCKETS && us > bounds_us[i])
		i++;
	stats->route_wait_buckets[i]++;
	stats->route_wait_us_sum += us;
}

/* The routed read, batch or transaction is over: client bytes go to the primary's leg again. */
static void route_done(struct session *s)
{
	struct session_route *route = &s->routing;
	route->state = ROUTE_IDLE;
	route->held.len = 0;
	route->client_leg = NULL;
	route->is_batch = route->is_tx = route->is_split = route->is_awaiting_isolation = route->is_xid_import = false;
	route->is_wait_for_lsn = false;
	route->excluded = NULL;
}

/* The XID-import profile's four settings, hidden, ahead of a split read on a polar replica: the
 * transaction's XIDs as the primary's last ReadyForQuery gave them (none before its first write), the
 * strict mode, the wait's bound, and the LSN to have replayed (tern waited for it already). */
static int route_push_polar_settings(struct session *s, struct leg *leg)
{
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	char sql[4][200];
	snprintf(sql[0], sizeof(sql[0]), "SET polar_xact_split_xids = '%s'", session_primary(s)->polar_xids);
	snprintf(sql[1], sizeof(sql[1]), "SET polar_consistency_mode = 'strict'");
	snprintf(sql[2], sizeof(sql[2]), "SET polar_proxy_wait_timeout_ms = %" PRIu32, cfg->wait_timeout_ms);
	snprintf(sql[3], sizeof(sql[3]), "SET polar_xact_split_wait_lsn = '%" PRIu64 "'", s->routing.target_lsn);
	for (size_t i = 0; i < TERN_ARRAY_LEN(sql); i++) {
		int rc = route_push_hidden(leg, sql[i]);
		if (rc < 0)
			return rc;
	}
	leg->has_polar_settings = true;
	return 0;
}

/* PostgreSQL 19's in-band wait, hidden, ahead of the read on a replica not known to be at its target
 * yet: the replica waits (holding no snapshot) up to the read's deadline, and says how it ended; any
 * answer but success re-runs the read on the primary (route_hidden_message). */
static int route_push_wait_for_lsn(struct session *s, struct leg *leg)
{
	uint64_t lsn = s->routing.target_lsn, now = base_now_ns();
	uint64_t left_ms = s->routing.deadline_ns > now ? (s->routing.deadline_ns - now + BASE_NS_PER_MS - 1) / BASE_NS_PER_MS : 1;
	char sql[128];
	snprintf(sql, sizeof(sql), "WAIT FOR LSN '%X/%08X' WITH (TIMEOUT '%" PRIu64 "ms', NO_THROW)",
		 (unsigned int)(lsn >> 32), (unsigned int)lsn, left_ms);
	int rc = route_push_hidden(leg, sql);
	if (rc == 0)
		leg->is_waiting_for_lsn = true;
	return rc;
}

/* The held read (or, is_read false, a batch routing found not to be one) to leg: the relay queues it
 * there as any message, and the leg asks for a connection. */
static void route_dispatch(struct session *s, struct leg *leg, bool is_read)
{
	struct session_route *route = &s->routing;
	route_unwait(s);
	if (route->is_waited)
		route_observe_wait(&s->host->stats, base_now_ns() - route->arrived_ns);
	bool is_replica = leg->role == LEG_REPLICA;
	route->state = !is_replica ? ROUTE_IDLE : route->is_tx ? ROUTE_REPLICA_TX_BUSY : ROUTE_ON_REPLICA;
	if (is_replica)
		route->replica_mark = leg->to_client_bytes;
	route->is_read_on_primary = !is_replica && is_read; /* a read writes nothing: no probe after it */
	bool is_begin_moved = route->is_begin_hidden;
	if (is_begin_moved) { /* the transaction the client began, where its SET TRANSACTION goes */
		route->is_begin_hidden = false;
		if (route_push_hidden(leg, "BEGIN") < 0) {
			session_end(s, SESSION_END_OUT_OF_MEMORY);
			return;
		}
	}
	if (is_replica && route->is_wait_for_lsn && route_push_wait_for_lsn(s, leg) < 0) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	if (is_replica && route->is_split && route->server->is_polar && route_push_polar_settings(s, leg) < 0) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	/* stmts keeps a batch's replies there, and a transaction's statements go there */
	route->client_leg = is_replica && (route->is_batch || route->is_tx) ? leg : NULL;
	/* A read's or a batch's answer, or a BEGIN READ ONLY's (not a moved transaction's SET: its BEGIN is
	 * on the primary no more) */
	leg->is_reply_guarded = is_replica && !is_begin_moved;
	route->reply_held.len = 0;
	route->is_rerun = false;
	s->parts->feed(s, leg, true, route->held.data, route->held.len);
	route->is_read_on_primary = false;
	if (!is_replica)
		route_done(s);
}

/* The counters of the read being routed: an autocommit read's, or a split read's. */
static struct host_route_paths *route_paths(struct session *s)
{
	return s->routing.is_split ? &s->host->stats.split : &s->host->stats.reads;
}

static void route_to_primary(struct session *s, uint64_t *counter)
{
	(*counter)++;
	route_dispatch(s, session_primary(s), true);
}

/* The read waits: on the host's list (the monitor's answers and the tick look at it again). */
static void route_wait(struct session *s)
{
	struct session_route *route = &s->routing;
	route->is_waited = true;
	if (base_list_is_linked(&route->wait_link))
		return;
	base_list_insert_tail(&s->host->route_waits, &route->wait_link);
	__atomic_store_n(&s->host->route_waiting, s->host->route_waiting + 1, __ATOMIC_RELAXED);
}

static bool route_is_standby(const struct monitor *m, const struct tern_runtime *rt, const struct pool_server *server)
{
	const struct monitor_server *ms = monitor_server_at(m, (uint32_t)(server - rt->pool->servers));
	return __atomic_load_n(&ms->role, __ATOMIC_ACQUIRE) == MONITOR_STANDBY;
}

/* The waiting read looks again: true when it went somewhere (the primary, or a replica). */
static bool route_try(struct session *s, uint64_t now)
{
	struct session_route *route = &s->routing;
	struct host *host = s->host;
	struct monitor *m = host->runtime->monitor;
	const struct tern_config *cfg = runtime_config(host->runtime);
	if (route->is_awaiting_isolation) {
		if (session_primary(s)->is_probe_answering) { /* its answer wakes it (route_on_progress) */
			if (now >= route->deadline_ns) {
				route_to_primary(s, &route_paths(s)->timeout);
				return true;
			}
			route_wait(s);
			return false;
		}
		route->is_awaiting_isolation = false;
		if (!split_is_read_committed(&route->split.tx)) {
			route_to_primary(s, &host->stats.split_refused[SPLIT_NOT_READ_COMMITTED]);
			return true;
		}
	}
	if (route->is_awaiting_probe) {
		if (session_primary(s)->is_probe_answering) { /* the write's target is still to come */
			if (cfg->wait_timeout_ms == 0 || now >= route->deadline_ns) {
				route_to_primary(s, &route_paths(s)->timeout);
				return true;
			}
			route_wait(s); /* its answer wakes it (route_on_progress), the tick its deadline */
			return false;
		}
		route->is_awaiting_probe = false;
		route_set_target(s);
	}
	if (route->probe_ticket) {
		uint64_t lsn;
		if (monitor_probe_answer(m, route->probe_ticket, &lsn)) {
			route->probe_ticket = 0;
			route->target_lsn = lsn;
			if (route->level == CONFIG_CONSISTENCY_SESSION && lsn != UINT64_MAX) {
				route->write_lsn = TERN_MAX(route->write_lsn, lsn); /* covers every write before it */
				route->is_write_unprobed = false;
			}
		}
	}
	if (route->target_lsn == UINT64_MAX) { /* the primary did not answer the probe */
		route_to_primary(s, &route_paths(s)->no_replica);
		return true;
	}
	if (route->is_split && route->split.server && !route_is_standby(m, host->runtime, route->split.server))
		route_split_unpin(s, true); /* the transaction's replica is down (or promoted): another one */
	bool any = false;
	route->is_wait_for_lsn = false;
	struct pool_server *server = route->probe_ticket ? NULL : route_pick(s, cfg, now, &any, false);
	if (!server && !route->probe_ticket && route->target_lsn && !route->is_tx && route->level != CONFIG_CONSISTENCY_EVENTUAL &&
	    cfg->wait_timeout_ms > 0 && now < route->deadline_ns) {
		bool also = false; /* a replica with WAIT FOR LSN waits for its target itself, the read behind it */
		server = route_pick(s, cfg, now, &also, true);
		route->is_wait_for_lsn = server != NULL;
		route->is_waited |= route->is_wait_for_lsn; /* (counted as a read served after its wait) */
	}
	if (server) {
		struct leg *leg = session_replica_leg(s);
		if (!leg) {
			route_to_primary(s, &route_paths(s)->no_replica);
			return true;
		}
		route->server = server;
		if (route->is_split)
			route->split.server = server; /* the transaction keeps it */
		__atomic_add_fetch(&server->reads_running, 1, __ATOMIC_RELAXED);
		struct host_route_paths *paths = route_paths(s);
		(*(route->excluded ? &paths->lost_replica : route->is_waited ? &paths->replica_wait : &paths->replica))++;
		route_dispatch(s, leg, true);
		return true;
	}
	if (!route->probe_ticket && (!any || route->level == CONFIG_CONSISTENCY_EVENTUAL)) {
		route_to_primary(s, route->excluded ? &route_paths(s)->lost : &route_paths(s)->no_replica);
		return true;
	}
	if (cfg->wait_timeout_ms == 0 || now >= route->deadline_ns) {
		route_to_primary(s, &route_paths(s)->timeout);
		return true;
	}
	route_wait(s);
	if (!route->probe_ticket)
		monitor_want_replay(m, route->target_lsn, route->deadline_ns);
	return false;
}

/* ---- extended-protocol batches ---- */

/* How much of a batch is read ahead looking for its Sync; a longer one goes to the primary. */
#define ROUTE_BATCH_MAX (64u * 1024u)
/* Named statements one batch may parse and still be routed. */
#define ROUTE_BATCH_NAMES_MAX 16u

bool route_collects(struct session *s, const uint8_t *data, uint32_t len)
{
	if (len == 0 || (data[0] != PROTO_FE_PARSE && data[0] != PROTO_FE_BIND) || !s->is_transaction_pooling ||
	    s->pinned_server || !proto_stream_is_at_boundary(&s->client_stream) ||
	    !route_wants(s, route_level(s, runtime_config(s->host->runtime))))
		return false;
	if (route_backlog_append(s, data, len) < 0)
		return false;
	s->routing.state = ROUTE_COLLECTING;
	s->routing.held.len = 0;
	s->routing.is_batch = true;
	s->routing.is_tx = false;
	return true;
}

/* A NUL-terminated string at *p within end, or NULL; *p moves past it. */
static const char *route_cstring(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *nul = memchr(*p, '\0', (size_t)(end - *p));
	if (!nul)
		return NULL;
	const char *text = (const char *)*p;
	*p = nul + 1;
	return text;
}

/* What a batch's statement is to routing: a read, a BEGIN READ ONLY, or neither. */
enum route_text { ROUTE_TEXT_OTHER = 0, ROUTE_TEXT_READ, ROUTE_TEXT_BEGIN_READ_ONLY };

static enum route_text route_text_of(struct session *s, const struct tern_config *cfg, const char *sql)
{
	struct classify_result r;
	route_classify(s, cfg, sql, &r);
	if (r.kind == CLASSIFY_READ)
		return ROUTE_TEXT_READ;
	return r.kind == CLASSIFY_BEGIN && r.is_read_only && r.statement_count == 1 ? ROUTE_TEXT_BEGIN_READ_ONLY
										    : ROUTE_TEXT_OTHER;
}

/* ROUTE_TEXT_READ when every statement the held batch runs is a read (each Parse's text; each Bind's
 * statement, parsed in the batch or a named statement tern keeps) and it executes something;
 * ROUTE_TEXT_BEGIN_READ_ONLY when it is that alone, executed once; else ROUTE_TEXT_OTHER. */
static enum route_text route_batch_text(struct session *s, const struct tern_config *cfg)
{
	const char *names[ROUTE_BATCH_NAMES_MAX];
	uint32_t name_count = 0, executes = 0, begins = 0;
	bool is_unnamed_known = false;
	bool has_stmts = s->observers_on & (1u << OBSERVER_STMTS);
	const uint8_t *p = s->routing.held.data, *end = p + s->routing.held.len;
	while (p < end) {
		uint8_t type = p[0];
		const uint8_t *body = p + PROTO_HEADER_LEN, *next = p + 1 + proto_read_u32(p + 1);
		p = next;
		switch (type) {
		case PROTO_FE_PARSE: {
			const char *name = route_cstring(&body, next), *sql = name ? route_cstring(&body, next) : NULL;
			enum route_text text = sql ? route_text_of(s, cfg, sql) : ROUTE_TEXT_OTHER;
			if (text == ROUTE_TEXT_OTHER || (text == ROUTE_TEXT_BEGIN_READ_ONLY && (name[0] || begins > 0)))
				return ROUTE_TEXT_OTHER;
			begins += text == ROUTE_TEXT_BEGIN_READ_ONLY;
			if (!name[0])
				is_unnamed_known = true;
			else if (!has_stmts || name_count == ROUTE_BATCH_NAMES_MAX ||
				 stmt_map_get(&s->stmts.statements, name)) /* (42P05 on the primary, as any) */
				return ROUTE_TEXT_OTHER;
			else
				names[name_count++] = name;
			break;
		}
		case PROTO_FE_BIND: {
			const char *portal = route_cstring(&body, next), *name = portal ? route_cstring(&body, next) : NULL;
			if (!name || (!name[0] && !is_unnamed_known))
				return ROUTE_TEXT_OTHER;
			if (!name[0])
				break;
			bool is_known = false;
			for (uint32_t i = 0; i < name_count && !is_known; i++)
				is_known = strcmp(names[i], name) == 0;
			if (is_known)
				break;
			const struct stmt *stmt = has_stmts ? stmt_map_get(&s->stmts.statements, name) : NULL;
			if (!stmt || !memchr(stmt->content, '\0', stmt->content_len) ||
			    route_text_of(s, cfg, (const char *)stmt->content) != ROUTE_TEXT_READ)
				return ROUTE_TEXT_OTHER;
			break;
		}
		case PROTO_FE_EXECUTE:
			executes++;
			break;
		case PROTO_FE_DESCRIBE:
		case PROTO_FE_CLOSE:
		case PROTO_FE_SYNC:
			break;
		default:
			return ROUTE_TEXT_OTHER;
		}
	}
	if (begins)
		return executes == 1 && name_count == 0 ? ROUTE_TEXT_BEGIN_READ_ONLY : ROUTE_TEXT_OTHER;
	return executes ? ROUTE_TEXT_READ : ROUTE_TEXT_OTHER;
}

/* Moves whole messages from the backlog into the held batch up to its Sync, then decides: a batch of
 * reads waits for a replica as a read; anything else (a write, a Flush, a message outside the extended
 * protocol, a batch past ROUTE_BATCH_MAX) goes to the primary as it is. False while the Sync has not
 * come. */
static bool route_collect(struct session *s)
{
	struct session_route *route = &s->routing;
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	for (;;) {
		if (route->backlog.len < PROTO_HEADER_LEN)
			return false;
		uint8_t type = route->backlog.data[0];
		uint32_t length = proto_read_u32(route->backlog.data + 1);
		bool is_extended = type == PROTO_FE_PARSE || type == PROTO_FE_BIND || type == PROTO_FE_DESCRIBE ||
				   type == PROTO_FE_EXECUTE || type == PROTO_FE_CLOSE || type == PROTO_FE_SYNC;
		if (!is_extended || length < 4 || route->held.len + 1 + (uint64_t)length > ROUTE_BATCH_MAX)
			break; /* not a batch routing reads: the relay takes it from here */
		if (route->backlog.len < 1 + length)
			return false;
		if (base_bytes_append(&route->held, route->backlog.data, 1 + length) < 0)
			break;
		route->backlog.len -= 1 + length;
		memmove(route->backlog.data, route->backlog.data + 1 + length, route->backlog.len);
		if (type != PROTO_FE_SYNC)
			continue;
		enum route_text text = route_batch_text(s, cfg);
		if (text == ROUTE_TEXT_OTHER)
			break;
		route->is_tx = text == ROUTE_TEXT_BEGIN_READ_ONLY;
		route->is_batch = !route->is_tx; /* a BEGIN alone: its transaction's statements follow as they come */
		route_read_begins(s, cfg, route_level(s, cfg));
		return true;
	}
	route_dispatch(s, session_primary(s), false); /* what was held, as it came; the backlog follows */
	return true;
}

void route_run(struct session *s)
{
	struct session_route *route = &s->routing;
	while (s->phase == SESSION_READY) {
		if (route->state == ROUTE_WAITING) {
			if (!route_try(s, base_now_ns()))
				return;
			continue;
		}
		if (route->state == ROUTE_COLLECTING) {
			if (!route_collect(s))
				return;
			continue;
		}
		if (route->state == ROUTE_SETTLING) {
			if (session_client_leg(s)->copy.is_copy_in) {
				/* A COPY FROM STDIN the client began ahead of it: the Query is the COPY's next message,
				 * which the server refuses, as PostgreSQL does any Query there (nothing else ends it). */
				route->state = ROUTE_IDLE;
				struct base_bytes held = route->held;
				route->held = (struct base_bytes){0};
				s->parts->feed(s, session_client_leg(s), true, held.data, held.len);
				free(held.data);
				continue;
			}
			if (!route_is_settled(s))
				return;
			route->state = ROUTE_IDLE;
			route_answer_setting(s, (const char *)route->held.data + PROTO_HEADER_LEN); /* NUL-terminated */
			route->held.len = 0;
			continue;
		}
		bool is_tx = route->state == ROUTE_REPLICA_TX;
		if ((route->state != ROUTE_IDLE && !is_tx) || route->backlog.len == 0)
			break;
		struct base_bytes fed = route->backlog; /* fed whole: what it leaves goes back to an empty backlog */
		route->backlog = (struct base_bytes){0};
		s->parts->feed(s, session_client_leg(s), false, fed.data, fed.len);
		free(fed.data);
	}
	session_client_pace(s);
}

/* ---- a replica's answer, held until it is the client's ---- */

/* What a replica may refuse and the primary serve: a recovery conflict (40001), a deadlock with the
 * startup process (40P01), a write taken for a read (25006: a read_functions entry that writes), and
 * any FATAL error (its connection ends: terminated, shut down), which the primary would not say. */
static bool route_is_rerunnable(const struct session *s, const struct proto_error_fields *fields)
{
	const char *code = fields->sqlstate;
	if (strcmp(fields->severity, "FATAL") == 0 || strcmp(fields->severity, "PANIC") == 0)
		return true; /* (in a read-only transaction's BEGIN too: route_on_lost re-runs it) */
	return s->routing.state == ROUTE_ON_REPLICA && runtime_config(s->host->runtime)->on_replica_error == 0 &&
	       (strcmp(code, "40001") == 0 || strcmp(code, "40P01") == 0 || strcmp(code, "25006") == 0);
}

/* Sends a message (header rebuilt) to the client, counted as the leg's. */
static void route_guard_send(struct session *s, struct leg *leg, uint8_t type, const uint8_t *body, uint32_t len)
{
	uint8_t header[PROTO_HEADER_LEN] = {type};
	proto_write_u32(header + 1, len + 4);
	session_send_to_client(s, header, sizeof(header));
	if (len > 0)
		session_send_to_client(s, body, len);
	leg->to_client_bytes += PROTO_HEADER_LEN + len;
}

/* The answer is the client's: what was held goes first, the rest flows. */
static void route_guard_release(struct session *s, struct leg *leg)
{
	struct session_route *route = &s->routing;
	leg->is_reply_guarded = false;
	if (route->reply_held.len > 0) {
		session_send_to_client(s, route->reply_held.data, route->reply_held.len);
		leg->to_client_bytes += route->reply_held.len;
	}
	route->reply_held.len = 0;
}

/* A routed read's answer from a replica, before any of it reached the client, at the type byte of a
 * message it would show (on legs with is_reply_guarded). HOLD: route_guard_message has it (what precedes
 * a first row or a completion is kept, an ErrorResponse judged); HIDE: not shown (the answer of a read
 * routing re-runs on the primary); PASS: the answer is the client's. */
enum route_guard { ROUTE_GUARD_PASS = 0, ROUTE_GUARD_HOLD, ROUTE_GUARD_HIDE };

/* What an answer says before its first row or completion: the primary would say it too. */
static enum route_guard route_guard_type(struct session *s, struct leg *leg, uint8_t type)
{
	enum route_state state = (enum route_state)s->routing.state;
	if (s->routing.is_rerun || (state != ROUTE_ON_REPLICA && state != ROUTE_REPLICA_TX_BUSY))
		return ROUTE_GUARD_HIDE; /* the rest of a refused answer; what a kept replica says unasked */
	if (proto_be_is_preamble(type) || type == PROTO_BE_ERROR)
		return ROUTE_GUARD_HOLD;
	route_guard_release(s, leg); /* a row, a CommandComplete, a notice: the answer is the client's */
	return ROUTE_GUARD_PASS;
}

static int route_guard_message(struct session *s, struct leg *leg, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct session_route *route = &s->routing;
	if (type != PROTO_BE_ERROR) {
		uint8_t header[PROTO_HEADER_LEN] = {type};
		proto_write_u32(header + 1, len + 4);
		if (base_bytes_append(&route->reply_held, header, sizeof(header)) < 0 ||
		    base_bytes_append(&route->reply_held, body, len) < 0)
			return -ENOMEM;
		return 0;
	}
	struct proto_error_fields fields;
	if (proto_error_parse(body, len, &fields) == 0 && route_is_rerunnable(s, &fields)) {
		TERN_INFO("client %s/%s: a replica refused a read (%s: %s); the primary serves it", s->user, s->database,
			  fields.sqlstate, fields.message);
		route->is_rerun = true;
		route->reply_held.len = 0;
		return 0;
	}
	route_guard_release(s, leg);
	route_guard_send(s, leg, type, body, len);
	return 0;
}

void route_hold_reply(struct session *s, const void *data, uint32_t len)
{
	if (!s->routing.is_rerun && base_bytes_append(&s->routing.reply_held, data, len) < 0)
		session_end_later(s, SESSION_END_OUT_OF_MEMORY);
}

/* A batch runs again: the names its Parse messages gave (none was in use before it: route_batch_text)
 * are forgotten, so they are given again, as the client asked, on the primary. */
static void route_forget_batch_names(struct session *s)
{
	const uint8_t *p = s->routing.held.data, *end = p + s->routing.held.len;
	while (s->routing.is_batch && p < end) {
		const uint8_t *body = p + PROTO_HEADER_LEN, *next = p + 1 + proto_read_u32(p + 1);
		const char *name = p[0] == PROTO_FE_PARSE ? route_cstring(&body, next) : NULL;
		if (name && name[0])
			(void)stmt_map_remove(&s->stmts.statements, name);
		p = next;
	}
}

/* The read runs again on the primary: what the replica said is dropped. */
static void route_rerun(struct session *s, uint64_t *counter)
{
	s->routing.is_rerun = false;
	s->routing.reply_held.len = 0;
	route_forget_batch_names(s);
	route_to_primary(s, counter);
}

void route_on_progress(struct session *s, struct leg *leg)
{
	struct session_route *route = &s->routing;
	if (route->state == ROUTE_REPLICA_TX_BUSY) {
		if (leg->role != LEG_REPLICA || !route_leg_owes_nothing(leg))
			return;
		if (leg->conn && leg->tx_status != 'I') {
			route->state = ROUTE_REPLICA_TX; /* answered, the transaction goes on: the next request */
		} else if (!leg->conn) { /* it ended, and its connection went back */
			route_release_server(s);
			route_done(s);
		} else {
			return; /* ended: released at the end of the receive (a later progress) */
		}
	} else if (route->state == ROUTE_ON_REPLICA) {
		bool is_kept = leg->conn && route->split.server && leg_is_idle(leg); /* the transaction's replica */
		if (leg->role != LEG_REPLICA || leg->is_request_pending || (leg->conn && !is_kept))
			return;
		route_release_server(s);
		leg->is_waiting_for_lsn = leg->is_wait_status_next = false; /* (a WAIT FOR that failed with an error) */
		if (route->is_rerun) { /* its refusal is hidden and its connection went back: the primary's turn */
			leg->is_reply_guarded = false;
			route_rerun(s, &route_paths(s)->error);
		} else {
			route_guard_release(s, leg); /* (what tern made up after the last of the server's answer) */
			route_done(s); /* answered, and its connection went back (or is kept) */
		}
		leg->is_reply_guarded = is_kept; /* kept: what it says unasked is hidden */
	}
	route_split_settle(s);
	route_run(s);
}

bool route_on_lost(struct session *s, struct leg *leg)
{
	struct session_route *route = &s->routing;
	bool is_routed = route->state == ROUTE_ON_REPLICA || route->state == ROUTE_REPLICA_TX_BUSY;
	if (leg->role == LEG_REPLICA && !is_routed && route->state != ROUTE_REPLICA_TX && leg == s->legs[LEG_REPLICA] &&
	    s->phase == SESSION_READY && !leg->is_request_pending) {
		/* An idle replica connection (the one a transaction's split reads keep, or one on its way back):
		 * nothing of the client's was on it; the next read picks again. */
		TERN_INFO("client %s/%s: an idle replica connection was lost; the next read picks again", s->user,
			  s->database);
		route->split.server = NULL;
		return session_set_aside_leg(s, LEG_REPLICA) != NULL;
	}
	if (leg->role != LEG_REPLICA || !is_routed || !leg->is_reply_guarded || s->phase != SESSION_READY ||
	    leg != s->legs[LEG_REPLICA])
		return false; /* part of its answer reached the client: the session decides */
	TERN_ASSERT(leg->to_client_bytes == route->replica_mark);
	if (!session_set_aside_leg(s, LEG_REPLICA))
		return false;
	struct pool_server *lost = route->server;
	route_release_server(s);
	route->split.server = NULL;
	if (lost && runtime_config(s->host->runtime)->on_replica_lost == 0) {
		TERN_INFO("client %s/%s: a read's replica connection (%s) was lost before it answered; another replica "
			  "serves it if one may, else the primary",
			  s->user, s->database, lost->name);
		route->is_rerun = false;
		route->reply_held.len = 0;
		route_forget_batch_names(s);
		route->excluded = lost;
		route->client_leg = NULL;
		route->is_wait_for_lsn = false;
		route->state = ROUTE_WAITING; /* with its target: route_try picks among the others */
	} else {
		TERN_INFO("client %s/%s: a read's replica connection was lost before it answered; the primary serves it",
			  s->user, s->database);
		route_rerun(s, &route_paths(s)->lost);
	}
	route_run(s);
	return true;
}

void route_end(struct session *s)
{
	route_unwait(s);
	route_release_server(s);
	s->routing.split.server = NULL; /* (the replica leg's connection goes as the session's do) */
}

void route_deinit(struct session *s)
{
	route_unwait(s);
	free(s->routing.held.data);
	free(s->routing.backlog.data);
	free(s->routing.reply_held.data);
	s->routing.held = s->routing.backlog = s->routing.reply_held = (struct base_bytes){0};
}

void route_check_waits(struct host *host, uint64_t now_ns)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &host->route_waits)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, routing.wait_link);
		TERN_ASSERT(s->routing.state == ROUTE_WAITING);
		if (route_try(s, now_ns))
			route_run(s);
	}
}

/* ---- the write-LSN probe ---- */

int route_push_probe(struct session *s, struct leg *leg, enum route_probe kind)
{
	TERN_ASSERT(kind != ROUTE_PROBE_NONE);
	if (leg->probe_behind > 0 || leg->is_probe_answering)
		return 0; /* one at a time: a write stays unprobed (the release probes it), an isolation unknown */
	uint32_t ahead = leg->pending_ready - leg->hidden_ready; /* the client's replies owed before it */
	int rc = route_push_query(leg, kind == ROUTE_PROBE_LSN ? MONITOR_INSERT_LSN_SQL : "SHOW transaction_isolation");
	if (rc < 0)
		return rc;
	leg->probe_kind = (uint8_t)kind;
	if (ahead == 0) {
		leg->hidden_ready++;
		leg->is_probe_answering = true;
	} else {
		leg->probe_behind = ahead;
	}
	if (kind == ROUTE_PROBE_LSN)
		s->routing.is_write_unprobed = false;
	return 0;
}

static bool route_observer_is_on(const struct session *s) { return s->is_transaction_pooling; }

/* transaction_split notes what each extended-protocol statement and function call sent to the primary
 * does: a Parse's text, a Bind's named statement (an unnamed one's Parse was noted), a call: a write. */
static unsigned route_client_type(struct session *s, struct leg *leg, uint8_t type)
{
	struct route_split *sp = &s->routing.split;
	if (leg->role != LEG_PRIMARY)
		return OBSERVER_SKIP;
	if (!route_split_is_on(s)) {
		sp->is_followed = false; /* a statement it did not note */
		return OBSERVER_SKIP;
	}
	if (sp->is_unread) /* the last one was too long to read */
		route_split_note_unread(s);
	sp->is_unread = false;
	route_split_reset_if_idle(s); /* (the first message of a batch, after an idle moment) */
	if (type == PROTO_FE_FUNCTION_CALL) {
		route_split_note_unread(s);
		return OBSERVER_SKIP;
	}
	sp->is_unread = true; /* until read */
	return OBSERVER_PASS;
}

static int route_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	struct route_split *sp = &s->routing.split;
	if (!sp->is_unread)
		return 0;
	sp->is_unread = false;
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	const uint8_t *p = m->body, *end = m->body + m->len;
	const char *name = route_cstring(&p, end), *text = NULL;
	if (name && m->type == PROTO_FE_PARSE) {
		text = route_cstring(&p, end);
	} else if (name && m->type == PROTO_FE_BIND) {
		const char *stmt_name = route_cstring(&p, end);
		if (stmt_name && !stmt_name[0])
			return 0; /* the unnamed statement: its Parse was noted */
		const struct stmt *stmt = stmt_name && (s->observers_on & (1u << OBSERVER_STMTS))
						  ? stmt_map_get(&s->stmts.statements, stmt_name)
						  : NULL;
		if (stmt && memchr(stmt->content, '\0', stmt->content_len))
			text = (const char *)stmt->content;
	}
	if (!text) {
		route_split_note_unread(s);
		return 0;
	}
	struct classify_result r;
	if (!classify_fast_path(text, &r))
		route_classify(s, cfg, text, &r);
	route_split_note(s, &r);
	return 0;
}

static unsigned route_hidden_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)s;
	if (leg->role == LEG_REPLICA) /* a split read's SET polar_* (an error), WAIT FOR LSN (its status, too) */
		return (type == PROTO_BE_ERROR && (leg->has_polar_settings || leg->is_waiting_for_lsn)) ||
				       ((type == PROTO_BE_DATA_ROW || type == PROTO_BE_ROW_DESCRIPTION) &&
					leg->is_waiting_for_lsn)
			       ? PROTO_INSPECT
			       : 0;
	if (!leg->is_probe_answering)
		return 0;
	return type == PROTO_BE_DATA_ROW || type == PROTO_BE_ERROR || type == PROTO_BE_READY ? PROTO_INSPECT : 0;
}

/* SHOW transaction_isolation's answer; DEFAULT when it is none of PostgreSQL's four. */
static enum classify_isolation route_isolation_of(const char *text)
{
	static const char *const names[] = {
		[CLASSIFY_READ_UNCOMMITTED] = "read uncommitted",
		[CLASSIFY_READ_COMMITTED] = "read committed",
		[CLASSIFY_REPEATABLE_READ] = "repeatable read",
		[CLASSIFY_SERIALIZABLE] = "serializable",
	};
	for (int i = CLASSIFY_READ_UNCOMMITTED; i <= CLASSIFY_SERIALIZABLE; i++)
		if (strcmp(text, names[i]) == 0)
			return (enum classify_isolation)i;
	return CLASSIFY_ISOLATION_DEFAULT;
}

static int route_hidden_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	if (leg->role == LEG_REPLICA && m->is_hidden && leg->is_waiting_for_lsn && m->type != PROTO_BE_ERROR) {
		static const uint8_t status_column[] = {0, 1, 's', 't', 'a', 't', 'u', 's', 0};
		if (m->type == PROTO_BE_ROW_DESCRIPTION) { /* WAIT FOR's one column, among other hidden answers */
			leg->is_wait_status_next = m->len >= sizeof(status_column) &&
						   memcmp(m->body, status_column, sizeof(status_column)) == 0;
			return 0;
		}
		if (!leg->is_wait_status_next)
			return 0;
		leg->is_waiting_for_lsn = leg->is_wait_status_next = false;
		if (s->routing.state == ROUTE_ON_REPLICA && !s->routing.is_rerun &&
		    !(m->len == 2 + 4 + 7 && memcmp(m->body + 6, "success", 7) == 0)) {
			TERN_INFO("client %s/%s: a replica's WAIT FOR LSN did not succeed; the primary serves the read",
				  s->user, s->database);
			s->routing.is_rerun = true; /* (timeout, not in recovery) */
		}
		return 0;
	}
	if (leg->role == LEG_REPLICA && m->is_hidden && m->type == PROTO_BE_ERROR &&
	    s->routing.state == ROUTE_ON_REPLICA && !s->routing.is_rerun) {
		/* The replica did not take the transaction's XIDs or its wait: the read must not run there. */
		TERN_INFO("client %s/%s: a replica refused a split read's settings; the primary serves the read",
			  s->user, s->database);
		s->routing.is_rerun = true;
		return 0;
	}
	if (!m->is_hidden || !leg->is_probe_answering)
		return 0;
	bool is_lsn = leg->probe_kind == ROUTE_PROBE_LSN;
	switch (m->type) {
	case PROTO_BE_DATA_ROW: {
		/* One column: the LSN as text, "16/B374D848"; or the isolation level, "read committed". */
		char text[32];
		uint32_t n = m->len >= 6 ? proto_read_u32(m->body + 2) : UINT32_MAX;
		unsigned int high, low;
		if (m->len < 6 || n >= sizeof(text) || n > m->len - 6) {
			s->routing.is_write_unprobed |= is_lsn;
			break;
		}
		memcpy(text, m->body + 6, n);
		text[n] = '\0';
		if (!is_lsn)
			s->routing.split.tx.server_isolation = route_isolation_of(text);
		else if (sscanf(text, "%X/%X", &high, &low) == 2)
			s->routing.write_lsn = TERN_MAX(s->routing.write_lsn, (uint64_t)high << 32 | low);
		else
			s->routing.is_write_unprobed = true;
		break;
	}
	case PROTO_BE_ERROR: /* (a failed transaction, a server in recovery): the next session read probes */
		s->routing.is_write_unprobed |= is_lsn;
		break;
	case PROTO_BE_READY:
		leg->is_probe_answering = false;
		break;
	default:
		break;
	}
	return 0;
}

/* The primary's connection goes back after requests no probe covered (a transaction's statements, a
 * write behind another probe): at the session level, probe first. */
static bool route_before_release(struct session *s, struct leg *leg)
{
	if (leg->role == LEG_REPLICA && s->routing.split.server && s->phase == SESSION_READY)
		return true; /* kept for the transaction's reads */
	if (leg->role == LEG_REPLICA && leg->has_polar_settings) { /* never left to the connection's next user */
		leg->has_polar_settings = false;
		static const char *const resets[] = {"RESET polar_xact_split_xids", "RESET polar_consistency_mode",
						      "RESET polar_proxy_wait_timeout_ms", "RESET polar_xact_split_wait_lsn"};
		for (size_t i = 0; i < TERN_ARRAY_LEN(resets); i++) {
			if (route_push_hidden(leg, resets[i]) < 0) {
				session_end(s, SESSION_END_OUT_OF_MEMORY);
				return true;
			}
		}
		session_mark_dirty(s, &leg->to_server);
		leg_resume(leg);
		return true;
	}
	if (leg->role == LEG_REPLICA)
		return false;
	if (leg->role != LEG_PRIMARY || !s->routing.is_write_unprobed || s->phase != SESSION_READY ||
	    route_level(s, runtime_config(s->host->runtime)) != CONFIG_CONSISTENCY_SESSION)
		return false;
	if (route_push_probe(s, leg, ROUTE_PROBE_LSN) < 0) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return true;
	}
	session_mark_dirty(s, &leg->to_server);
	leg_resume(leg);
	return true;
}

/* The show stage on a replica's legs: a routed read's answer is guarded until it is the client's, and a
 * split read's ReadyForQuery says the replica is idle where the client's transaction goes on on the
 * primary. */
static bool route_watches(const struct session *s, const struct leg *leg)
{
	(void)s;
	return leg->role == LEG_REPLICA;
}

static unsigned route_show_type(struct session *s, struct leg *leg, uint8_t type, unsigned action, bool *claims)
{
	enum route_guard guard = leg->is_reply_guarded ? route_guard_type(s, leg, type) : ROUTE_GUARD_PASS;
	if (guard == ROUTE_GUARD_HIDE)
		return action & ~(unsigned)PROTO_FORWARD;
	*claims = guard == ROUTE_GUARD_HOLD || (type == PROTO_BE_READY && s->routing.is_split);
	return *claims ? (action & ~(unsigned)PROTO_FORWARD) | PROTO_INSPECT : action;
}

static int route_show(struct session *s, struct leg *leg, const struct observer_message *m)
{
	if (m->type != PROTO_BE_READY) /* (route_guard_type holds none) */
		return route_guard_message(s, leg, m->type, m->body, m->len);
	if (s->phase != SESSION_CLOSING) {
		uint8_t ready[PROTO_HEADER_LEN + 1] = {PROTO_BE_READY, 0, 0, 0, 5, (uint8_t)session_primary(s)->tx_status};
		session_send_to_client(s, ready, sizeof(ready));
		leg->to_client_bytes += sizeof(ready);
	}
	return 0;
}

const struct observer observer_route = {
	.name = "route",
	.is_on = route_observer_is_on,
	.client_types = (const char[]){PROTO_FE_PARSE, PROTO_FE_BIND, PROTO_FE_FUNCTION_CALL, 0},
	.client_type = route_client_type,
	.client_message = route_client_message,
	.server_types = "",
	.server_message = route_hidden_message,
	.hidden_type = route_hidden_type,
	.watches = route_watches,
	.show_type = route_show_type,
	.show = route_show,
	.before_release = route_before_release,
	.destroy = route_deinit,
};
