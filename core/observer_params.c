/* Tracked parameters and search_path in transaction pooling (PgBouncer's tracked parameters): what the
 * client has (from its startup packet, the welcome, every ParameterStatus the server sends while it
 * runs, and search_path from its own SQL) is set again on whichever connection it lands on, with one
 * hidden SET ahead of its messages; a search_path tern could not follow is asked with a hidden SHOW
 * before the connection goes back. See README "Client parameters in transaction pooling". */
#include "observer.h"
#include "session.h"

#include "sql.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static bool params_is_on(const struct session *s) { return s->is_transaction_pooling; }

/* The client's tracked values and search_path as one number, computed once after each change. */
static uint64_t params_fingerprint(struct params_state *p)
{
	if (p->fingerprint)
		return p->fingerprint;
	uint64_t h = XXH3_64bits(&p->values.is_set, sizeof(p->values.is_set));
	for (uint32_t i = 0; i < PARAMS_TRACKED_MAX; i++)
		if (p->values.is_set & (1u << i))
			h = XXH3_64bits_withSeed(p->values.value[i], strlen(p->values.value[i]) + 1, h);
	h = XXH3_64bits_withSeed(p->search_path, strlen(p->search_path), h);
	p->fingerprint = h | 1; /* never 0, which means "unknown" */
	return p->fingerprint;
}

/* The connection's search_path is `value` (known, or PARAMS_SEARCH_PATH_UNKNOWN). */
static void params_connection_search_path(struct leg *leg, const char *value)
{
	if (!leg->conn)
		return;
	params_store(leg->conn->params, &leg->conn->param_count, PARAMS_SEARCH_PATH_KEY, value);
	leg->conn->restored_fingerprint = 0;
}

/* The client's search_path took effect on its connection. */
static void params_keep_search_path(struct session *s, struct leg *leg, const char *value)
{
	base_strlcpy(s->params.search_path, value, sizeof(s->params.search_path));
	s->params.fingerprint = 0;
	params_connection_search_path(leg, value);
}

static unsigned params_client_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)leg;
	TERN_ASSERT(type == PROTO_FE_QUERY);
	s->params.queries_unread++; /* until read: a query too long to read may have set anything */
	return OBSERVER_PASS;
}

static int params_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct params_state *p = &s->params;
	if (p->queries_unread > 0)
		p->queries_unread--;
	p->is_search_path_mentioned |= sql_mentions_search_path(m->body, m->len);
	/* Only a query with nothing before it in flight: its own CommandComplete must confirm it. */
	if (leg->pending_ready == 1 && leg->tx_status == 'I' &&
	    sql_parse_search_path_set(m->body, m->len, p->pending_search_path, PARAMS_VALUE_MAX) == 1) {
		p->is_search_path_pending = true;
		p->is_search_path_confirmed = false;
	}
	return 0;
}

/* A ParameterStatus: the connection now has this value, and so does the client, unless it answers
 * tern's own SET (the client had the value already). */
static void params_learn(struct session *s, struct leg *leg, const struct observer_message *m)
{
	uint32_t offset = 0;
	const char *name = proto_read_cstring(m->body, m->len, &offset);
	const char *value = name ? proto_read_cstring(m->body, m->len, &offset) : NULL;
	if (!value || !leg->conn)
		return;
	params_store(leg->conn->params, &leg->conn->param_count, name, value);
	if (m->is_hidden)
		return; /* the answer to tern's own SET: the values the fingerprint already says */
	leg->conn->restored_fingerprint = 0;
	int i = params_tracked_index(&s->host->runtime->tracked, name);
	if (i >= 0)
		s->params.changed |= 1u << i; /* the client's own statements changed it (Transaction Replay's cap) */
	if (i < 0)
		return;
	s->params.fingerprint = 0;
	struct params_values *values = &s->params.values;
	if (strlen(value) >= PARAMS_VALUE_MAX) {
		values->is_set &= ~(1u << i);
		TERN_WARN("parameter %s of client %s/%s is too long to keep across connections", name, s->user,
			  s->database);
		return;
	}
	base_strlcpy(values->value[i], value, PARAMS_VALUE_MAX);
	values->is_set |= 1u << i;
}

/* The hidden SHOW search_path's row: the value in effect, which SET accepts back as written. */
static void params_learn_search_path_row(struct session *s, struct leg *leg, const struct observer_message *m)
{
	const uint8_t *body = m->body;
	if (m->len < 6 || body[0] != 0 || body[1] != 1) /* one column */
		return;
	uint32_t n = proto_read_u32(body + 2);
	if (n == UINT32_MAX || n > m->len - 6 || n >= PARAMS_VALUE_MAX) {
		TERN_WARN("search_path of client %s/%s is too long to keep across connections", s->user, s->database);
		return;
	}
	char value[PARAMS_VALUE_MAX];
	memcpy(value, body + 6, n);
	value[n] = '\0';
	/* SHOW writes an empty list as "", which SET refuses (a zero-length identifier); '' means the same. */
	params_keep_search_path(s, leg, strcmp(value, "\"\"") == 0 ? "''" : value);
}

static void params_on_command_complete(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct params_state *p = &s->params;
	if (observer_message_is_tag(m, "SET") || observer_message_is_tag(m, "RESET")) {
		if (p->is_search_path_pending && !p->is_search_path_confirmed) {
			p->is_search_path_confirmed = true;
		} else if (p->is_search_path_mentioned || p->queries_unread > 0 ||
			   !(s->observers_on & (1u << OBSERVER_STMTS))) {
			/* A SET tern cannot attribute (in a transaction block, through the extended protocol, a
			 * second one in a query; any SET when tern does not read the extended protocol): it may have
			 * changed search_path, so the connection's value is unknown and the next client gets its own
			 * replayed. */
			p->is_search_path_pending = false;
			p->is_search_path_stale = true;
			params_connection_search_path(leg, PARAMS_SEARCH_PATH_UNKNOWN);
		}
	} else if (observer_message_is_tag(m, "DISCARD ALL")) {
		params_keep_search_path(s, leg, PARAMS_SEARCH_PATH_DEFAULT);
	}
}

static void params_on_ready(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct params_state *p = &s->params;
	if (p->is_search_path_pending && !m->is_hidden) {
		if (p->is_search_path_confirmed && leg->tx_status == 'I') {
			params_keep_search_path(s, leg, p->pending_search_path);
		} else if (p->is_search_path_confirmed) { /* it ran inside a transaction block */
			params_connection_search_path(leg, PARAMS_SEARCH_PATH_UNKNOWN);
			p->is_search_path_stale = true;
		}
		p->is_search_path_pending = false;
	}
	if (m->is_hidden && leg->hidden_ready == 0)
		p->is_learning_search_path = false;
	if (leg->pending_ready == 0) { /* every text read so far is answered */
		p->is_search_path_mentioned = false;
		p->queries_unread = 0;
	}
}

static int params_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	switch (m->type) {
	case PROTO_BE_DATA_ROW:
		TERN_ASSERT(m->is_hidden);
		if (s->params.is_learning_search_path && !leg->is_probe_answering) /* not routing's probe's row */
			params_learn_search_path_row(s, leg, m);
		break;
	case PROTO_BE_PARAMETER_STATUS:
		params_learn(s, leg, m);
		break;
	case PROTO_BE_ERROR:
		if (!m->is_hidden) {
			s->params.is_search_path_pending = false; /* the SET failed */
		} else if (!leg->is_probe_answering) {
			if (leg->conn)
				leg->conn->restored_fingerprint = 0; /* the SET failed: what it set is unknown */
			struct proto_error_fields fields;
			if (proto_error_parse(m->body, m->len, &fields) == 0)
				TERN_WARN("could not restore client %s/%s's parameters on server pid %u: %s (%s)", s->user,
					  s->database, leg->conn ? leg->conn->backend_pid : 0, fields.message,
					  fields.sqlstate);
		}
		break;
	case PROTO_BE_COMMAND_COMPLETE:
		if (!m->is_hidden)
			params_on_command_complete(s, leg, m);
		break;
	case PROTO_BE_READY:
		params_on_ready(s, leg, m);
		break;
	default:
		break;
	}
	return 0;
}

/* The answers to tern's own SET and SHOW: read what matters, show the client nothing. */
static unsigned params_hidden_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)leg;
	bool wanted = type == PROTO_BE_READY || type == PROTO_BE_PARAMETER_STATUS || type == PROTO_BE_ERROR ||
		      (type == PROTO_BE_DATA_ROW && s->params.is_learning_search_path);
	return wanted ? PROTO_INSPECT : 0;
}

/* Before the client's own messages, make the connection's tracked parameters the client's. The SET's
 * answer is hidden from the client (hidden_ready). */
static int params_attach(struct session *s, struct leg *leg)
{
	struct pool_conn *conn = leg->conn;
	struct params_state *p = &s->params;
	uint64_t fingerprint = params_fingerprint(p);
	if (conn->restored_fingerprint == fingerprint)
		return 0; /* the client's state is this connection's already */
	char sql[PARAMS_TRACKED_MAX * (PARAMS_VALUE_MAX * 2 + 64)];
	int n = params_build_set(&s->host->runtime->tracked, &p->values, conn->params, conn->param_count, sql,
				 sizeof(sql));
	if (n < 0)
		return 0;
	const char *want = p->search_path[0] ? p->search_path : PARAMS_SEARCH_PATH_DEFAULT;
	const char *have = params_find(conn->params, conn->param_count, PARAMS_SEARCH_PATH_KEY);
	if (strcmp(want, have ? have : PARAMS_SEARCH_PATH_DEFAULT) != 0) {
		int m = snprintf(sql + n, sizeof(sql) - (size_t)n, "%sSET search_path TO %s", n ? "; " : "", want);
		if (m < 0 || (size_t)m >= sizeof(sql) - (size_t)n)
			return 0;
		n += m;
		params_store(conn->params, &conn->param_count, PARAMS_SEARCH_PATH_KEY, want);
	}
	if (n > 0 && leg_push_hidden_query_front(leg, sql, (uint32_t)n) < 0)
		return 0; /* the client runs with the connection's values: as without tracking */
	conn->restored_fingerprint = fingerprint;
	return 0;
}

/* A search_path tern could not follow: ask the server (a hidden SHOW search_path) before the
 * connection goes back; the answer is the client's value. */
static bool params_before_release(struct session *s, struct leg *leg)
{
	if (!s->params.is_search_path_stale || s->phase != SESSION_READY)
		return false;
	s->params.is_search_path_stale = false;
	uint8_t msg[64];
	size_t len = proto_build_query(msg, sizeof(msg), "SHOW search_path");
	if (sendq_push_copy(&leg->to_server, msg, (uint32_t)len) < 0) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return true;
	}
	s->params.is_learning_search_path = true;
	leg->pending_ready++;
	leg->hidden_ready++; /* pending_ready keeps the connection until the answer is in */
	session_mark_dirty(s, &leg->to_server);
	leg_resume(leg);
	return true;
}

const struct observer observer_params = {
	.name = "params",
	.is_on = params_is_on,
	.client_types = "Q",
	.client_type = params_client_type,
	.client_message = params_client_message,
	.server_types = "SCEZ",
	.server_message = params_server_message,
	.hidden_type = params_hidden_type,
	.attach = params_attach,
	.before_release = params_before_release,
};
