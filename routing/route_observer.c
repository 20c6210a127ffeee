/* observer_route (observer.h): routing's hooks in the relay's dispatch. The write-LSN probe (tern's hidden
 * query behind the client's request on the primary, whose answer is the session's read-your-writes target
 * and a transaction's isolation), transaction_split's notes of what each extended-protocol statement does,
 * and the show stage of a replica's legs (route_guard.c decides). Never: a decision of its own. */
#include "route.h"
#include "route_internal.h"

#include "core/observer.h"

#include <string.h>

static bool route_observer_is_on(const struct session *s) { return s->is_transaction_pooling; }

/* transaction_split notes what each extended-protocol statement and function call sent to the primary
 * does: a Parse's text, a Bind's named statement (an unnamed one's Parse was noted), a call: a write. */
static unsigned route_client_type(struct session *s, struct leg *leg, uint8_t type)
{
	struct route_split *sp = &s->routing->split;
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
	struct route_split *sp = &s->routing->split;
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
		return (type == PROTO_BE_ERROR && (leg->route->has_polar_settings || leg->route->is_waiting_for_lsn)) ||
				       ((type == PROTO_BE_DATA_ROW || type == PROTO_BE_ROW_DESCRIPTION) &&
					leg->route->is_waiting_for_lsn)
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
	if (leg->role == LEG_REPLICA && m->is_hidden && leg->route->is_waiting_for_lsn && m->type != PROTO_BE_ERROR) {
		static const uint8_t status_column[] = {0, 1, 's', 't', 'a', 't', 'u', 's', 0};
		if (m->type == PROTO_BE_ROW_DESCRIPTION) { /* WAIT FOR's one column, among other hidden answers */
			leg->route->is_wait_status_next = m->len >= sizeof(status_column) &&
						   memcmp(m->body, status_column, sizeof(status_column)) == 0;
			return 0;
		}
		if (!leg->route->is_wait_status_next)
			return 0;
		leg->route->is_waiting_for_lsn = leg->route->is_wait_status_next = false;
		if (s->routing->state == ROUTE_ON_REPLICA && !s->routing->is_rerun &&
		    !(m->len == 2 + 4 + 7 && memcmp(m->body + 6, "success", 7) == 0)) {
			TERN_INFO("client %s/%s: a replica's WAIT FOR LSN did not succeed; the primary serves the read",
				  s->user, s->database);
			s->routing->is_rerun = true; /* (timeout, not in recovery) */
		}
		return 0;
	}
	if (leg->role == LEG_REPLICA && m->is_hidden && m->type == PROTO_BE_ERROR &&
	    s->routing->state == ROUTE_ON_REPLICA && !s->routing->is_rerun) {
		/* The replica did not take the transaction's XIDs or its wait: the read must not run there. */
		TERN_INFO("client %s/%s: a replica refused a split read's settings; the primary serves the read",
			  s->user, s->database);
		s->routing->is_rerun = true;
		return 0;
	}
	if (!m->is_hidden || !leg->is_probe_answering)
		return 0;
	bool is_lsn = leg->route->probe_kind == ROUTE_PROBE_LSN;
	switch (m->type) {
	case PROTO_BE_DATA_ROW: {
		/* One column: the LSN as text, "16/B374D848"; or the isolation level, "read committed". */
		char text[32];
		uint32_t n = m->len >= 6 ? proto_read_u32(m->body + 2) : UINT32_MAX;
		unsigned int high, low;
		if (m->len < 6 || n >= sizeof(text) || n > m->len - 6) {
			s->routing->is_write_unprobed |= is_lsn;
			break;
		}
		memcpy(text, m->body + 6, n);
		text[n] = '\0';
		if (!is_lsn)
			s->routing->split.tx.server_isolation = route_isolation_of(text);
		else if (sscanf(text, "%X/%X", &high, &low) == 2)
			s->routing->write_lsn = TERN_MAX(s->routing->write_lsn, (uint64_t)high << 32 | low);
		else
			s->routing->is_write_unprobed = true;
		break;
	}
	case PROTO_BE_ERROR: /* (a failed transaction, a server in recovery): the next session read probes */
		s->routing->is_write_unprobed |= is_lsn;
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
	if (leg->role == LEG_REPLICA && s->routing->split.server && s->phase == SESSION_READY)
		return true; /* kept for the transaction's reads */
	if (leg->role == LEG_REPLICA && leg->route->has_polar_settings) { /* never left to the connection's next user */
		leg->route->has_polar_settings = false;
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
	if (leg->role != LEG_PRIMARY || !s->routing->is_write_unprobed || s->phase != SESSION_READY ||
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
	enum route_guard guard = leg->route->is_reply_guarded ? route_guard_type(s, leg, type) : ROUTE_GUARD_PASS;
	if (guard == ROUTE_GUARD_HIDE)
		return action & ~(unsigned)PROTO_FORWARD;
	*claims = guard == ROUTE_GUARD_HOLD || (type == PROTO_BE_READY && s->routing->is_split);
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
