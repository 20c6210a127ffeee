/* The session's SET state for Transaction Replay (issue 23 #2; ../shared/reference/004_c44c290a4cd34a46.txt,
 * "Session-state restore is transactional"): every simple-protocol SET, RESET, RESET ALL and DISCARD ALL
 * the client ran on its primary, matched to the CommandComplete that says it ran, kept by
 * replay/restore_set.c under PostgreSQL's transactional rules, and sent again, hidden, ahead of the
 * client's messages on the primary's next connection after a move (or once the primary changed).
 * Parameters observer_params restores itself (those the server reports, search_path) are counted here
 * but left to it.
 *
 * What tern cannot follow makes the state unsure, and a move is then refused with 08006 rather than made
 * with part of it: a SET it cannot keep as written (a comment or escape string in the value, SET SESSION
 * CHARACTERISTICS), a SET in a Query too long to read or that libpg_query cannot split, a RESET through
 * the extended protocol, a savepoint it could not read around changes that then commit. A SET through
 * the extended protocol is not tracked (the reference's rule). Owns s->replay->sets; never touches the
 * rest of s->replay-> */
#include "core/observer.h"
#include "core/session.h"
#include "recover.h"

#include "core/classify.h"
#include "core/sql.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A statement kept whole is at most this long (a longer SET is unsure). */
#define SETS_STATEMENT_MAX 1024u

static bool sets_is_on(const struct session *s) { return config_tr_is_on(runtime_config(s->host->runtime)); }

static void sets_end_query(struct session_sets *q)
{
	for (uint32_t i = 0; i < q->query_count; i++)
		free(q->query[i].name);
	free(q->query);
	q->query = NULL;
	q->query_count = q->query_next = q->query_ready_before = 0;
	q->is_query_active = q->is_query_blind = q->is_query_failed = false;
}

/* One statement of a Query: its kind, and its names copied. */
static int sets_keep_statement(struct sets_statement *st, const uint8_t *text, uint32_t len)
{
	char name[RESTORE_NAME_MAX];
	uint32_t start, stmt_len;
	enum sql_set_kind kind = sql_parse_set(text, len, name, sizeof(name), &start, &stmt_len);
	if (kind == SQL_SET_VALUE && stmt_len >= SETS_STATEMENT_MAX)
		kind = SQL_SET_UNKNOWN;
	*st = (struct sets_statement){.kind = (uint8_t)kind};
	if (kind == SQL_SET_NONE || kind == SQL_SET_UNKNOWN)
		return 0;
	size_t name_len = strlen(name) + 1;
	st->name = malloc(name_len + stmt_len + 1);
	if (!st->name)
		return -ENOMEM;
	memcpy(st->name, name, name_len);
	st->statement = st->name + name_len;
	memcpy(st->statement, text + start, stmt_len);
	st->statement[stmt_len] = '\0';
	return 0;
}

static int sets_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_sets *q = &s->replay->sets;
	if (q->queries_unread > 0)
		q->queries_unread--;
	uint32_t len = m->len > 0 && m->body[m->len - 1] == '\0' ? m->len - 1 : m->len;
	const uint8_t *semi = memchr(m->body, ';', len);
	bool is_multi = semi && sql_skip_blank(semi + 1, m->body + len) < m->body + len;
	struct sets_statement one = {0};
	if (!is_multi) {
		if (sets_keep_statement(&one, m->body, len) < 0)
			return -ENOMEM;
		if (one.kind == SQL_SET_NONE)
			return 0; /* most Queries end here, at their first word */
	} else if (!sql_may_set(m->body, len)) {
		return 0;
	}
	if (q->is_query_active) { /* two such Queries in flight: tern follows one at a time */
		free(one.name);
		q->is_unsure = true;
		return 0;
	}
	q->is_query_active = true;
	q->query_ready_before = leg_client_owed(leg) - 1; /* (the Query itself is counted) */
	struct classify_span spans[CLASSIFY_STATEMENTS_MAX];
	int count = !is_multi		  ? 1
		    : m->body[len] == '\0' ? classify_split((const char *)m->body, spans, CLASSIFY_STATEMENTS_MAX)
					    : -1;
	q->is_query_blind = count < 0;
	if (count <= 0)
		return 0;
	q->query = calloc((size_t)count, sizeof(*q->query));
	if (!q->query) {
		free(one.name);
		return -ENOMEM;
	}
	q->query_count = (uint32_t)count;
	if (!is_multi) {
		q->query[0] = one;
		return 0;
	}
	for (int i = 0; i < count; i++)
		if (sets_keep_statement(&q->query[i], m->body + spans[i].start, spans[i].len) < 0)
			return -ENOMEM;
	return 0;
}

static unsigned sets_client_type(struct session *s, struct leg *leg, uint8_t type)
{
	TERN_ASSERT(type == PROTO_FE_QUERY);
	if (leg->role != LEG_PRIMARY)
		return OBSERVER_SKIP;
	s->replay->sets.queries_unread++; /* until read: a Query too long to read may set anything */
	return OBSERVER_PASS;
}

/* The open transaction ended: its changes hold or go. */
static void sets_end_tx(struct session *s, bool is_commit)
{
	struct session_sets *q = &s->replay->sets;
	if (is_commit && q->is_blurred && restore_set_has_pending(&q->set))
		q->is_unsure = true; /* changes around a savepoint tern could not follow */
	if (restore_set_end(&q->set, is_commit) < 0)
		q->is_unsure = true;
	q->is_explicit = q->is_failed = q->is_blurred = false;
	if (is_commit && q->set.count > 0 && !q->server) {
		const struct leg *leg = session_primary(s);
		q->server = leg && leg->conn ? leg->conn->server : NULL;
	}
	uint32_t cap = runtime_config(s->host->runtime)->tr_max_session_set_statements;
	if (!q->is_over_cap && q->set.count > cap) {
		q->is_over_cap = true; /* a move is refused from now on (recover_on_lost) */
		s->host->stats.tr_set_cap_exceeded++;
	}
}

/* A statement tern read ran (its tag is the one it answers with). */
static void sets_on_statement(struct session *s, const struct sets_statement *st, const struct observer_message *m)
{
	struct session_sets *q = &s->replay->sets;
	enum sql_set_kind kind = (enum sql_set_kind)st->kind;
	if (kind == SQL_SET_UNKNOWN || !observer_message_is_tag(m, sql_set_tag(kind))) {
		q->is_unsure = true; /* (a tag that does not match: tern's reading of the text was off) */
		return;
	}
	int rc = 0;
	switch (kind) {
	case SQL_SET_VALUE:
		rc = restore_set_change(&q->set, RESTORE_SET, st->name, st->statement);
		break;
	case SQL_SET_RESET:
		rc = restore_set_change(&q->set, RESTORE_RESET, st->name, NULL);
		break;
	case SQL_SET_RESET_ALL:
		rc = restore_set_change(&q->set, RESTORE_RESET_ALL, NULL, NULL);
		break;
	case SQL_SET_DISCARD_ALL:
		rc = restore_set_change(&q->set, RESTORE_DISCARD_ALL, NULL, NULL);
		break;
	case SQL_SET_SAVEPOINT:
		rc = restore_set_savepoint(&q->set, st->name);
		break;
	case SQL_SET_RELEASE:
		q->is_blurred |= !restore_set_release(&q->set, st->name);
		break;
	case SQL_SET_ROLLBACK_TO:
		q->is_blurred |= !restore_set_rollback_to(&q->set, st->name);
		q->is_failed = false; /* an error after the savepoint is undone too */
		break;
	case SQL_SET_ROLLBACK:
		sets_end_tx(s, false);
		break;
	default:
		TERN_ASSERT(!"a kind sets_keep_statement does not keep");
	}
	if (rc < 0)
		q->is_unsure = true;
}

/* A tag of a statement tern did not read (the extended protocol, a Query it could not read or split)
 * or that is none of sql_parse_set's. */
static void sets_on_tag(struct session *s, const struct observer_message *m, bool is_blind, bool is_read)
{
	struct session_sets *q = &s->replay->sets;
	bool has_state = q->set.count > 0 || restore_set_has_pending(&q->set);
	if (observer_message_is_tag(m, "BEGIN") || observer_message_is_tag(m, "START TRANSACTION")) {
		q->is_explicit = true;
	} else if (observer_message_is_tag(m, "COMMIT")) {
		sets_end_tx(s, true); /* (AND CHAIN: the next transaction's end has its own tag) */
	} else if (observer_message_is_tag(m, "ROLLBACK")) {
		if (is_read)
			sets_end_tx(s, false); /* a COMMIT of a failed transaction, END */
		else
			q->is_rollback_unplaced = true; /* ROLLBACK TO, or the end: the ReadyForQuery tells */
	} else if (observer_message_is_tag(m, "PREPARE TRANSACTION")) {
		/* Whether a prepared transaction's SETs outlive it is not followed: unsure when it made any. */
		q->is_unsure |= restore_set_has_pending(&q->set);
		if (restore_set_end(&q->set, false) < 0)
			q->is_unsure = true;
	} else if (observer_message_is_tag(m, "DISCARD ALL")) {
		if (restore_set_change(&q->set, RESTORE_DISCARD_ALL, NULL, NULL) < 0)
			q->is_unsure = true;
	} else if (observer_message_is_tag(m, "SAVEPOINT") || observer_message_is_tag(m, "RELEASE")) {
		q->is_blurred = true;
	} else if (observer_message_is_tag(m, "SET")) {
		q->is_unsure |= is_blind || is_read; /* (an extended-protocol SET is not tracked) */
	} else if (observer_message_is_tag(m, "RESET")) {
		q->is_unsure |= has_state || is_blind || is_read;
	}
}

static void sets_on_complete(struct session *s, const struct observer_message *m)
{
	struct session_sets *q = &s->replay->sets;
	if (!q->is_query_active || q->query_ready_before > 0) {
		sets_on_tag(s, m, q->queries_unread > 0, false);
		return;
	}
	if (q->is_query_blind) {
		sets_on_tag(s, m, true, false);
		return;
	}
	if (q->query_next >= q->query_count) {
		q->is_unsure = true; /* more completions than tern read statements */
		return;
	}
	const struct sets_statement *st = &q->query[q->query_next++];
	if (st->kind == SQL_SET_NONE)
		sets_on_tag(s, m, false, true);
	else
		sets_on_statement(s, st, m);
}

static void sets_on_ready(struct session *s, struct leg *leg, char status)
{
	struct session_sets *q = &s->replay->sets;
	if (q->is_query_active && q->query_ready_before > 0) {
		q->query_ready_before--;
	} else if (q->is_query_active) {
		if (!q->is_query_blind && !q->is_query_failed && q->query_next != q->query_count)
			q->is_unsure = true; /* fewer completions than statements, and no error */
		sets_end_query(q);
	}
	if (q->is_rollback_unplaced && status == 'T')
		q->is_blurred = true; /* it was a ROLLBACK TO (or AND CHAIN) */
	q->is_rollback_unplaced = false;
	if (status == 'I')
		sets_end_tx(s, !q->is_failed && !q->is_explicit); /* an implicit transaction commits unless it failed */
	else if (status == 'E')
		q->is_failed = true;
	if (leg_client_owed(leg) == 0)
		q->queries_unread = 0;
}

/* ---- the restore ---- */

/* Whether observer_params restores the variable itself (on every connection, in transaction pooling). */
static bool sets_is_params(const struct session *s, const char *name)
{
	return (s->observers_on & (1u << OBSERVER_PARAMS)) &&
	       (strcmp(name, "search_path") == 0 || params_tracked_index(&s->host->runtime->tracked, name) >= 0);
}

static int sets_attach(struct session *s, struct leg *leg)
{
	struct session_sets *q = &s->replay->sets;
	if (leg->role != LEG_PRIMARY || (!q->is_restore_due && leg->conn->server == q->server))
		return 0;
	q->is_restore_due = false;
	if (q->set.count == 0)
		return 0;
	q->server = leg->conn->server;
	struct base_bytes sql = {0};
	int rc = 0;
	for (uint32_t i = 0; i < q->set.count && rc == 0; i++) {
		const struct restore_entry *e = &q->set.entries[i];
		if (sets_is_params(s, e->name))
			continue;
		rc = base_bytes_append(&sql, e->statement, (uint32_t)strlen(e->statement));
		if (rc == 0)
			rc = base_bytes_append(&sql, ";", 1);
	}
	if (rc == 0 && sql.len > 0) {
		rc = leg_push_hidden_query_front(leg, (const char *)sql.data, sql.len);
		q->is_restoring = rc == 0;
		q->is_restore_failed = false;
	}
	free(sql.data);
	return rc < 0 ? -ENOMEM : 0;
}

static unsigned sets_hidden_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)leg;
	return s->replay->sets.is_restoring && (type == PROTO_BE_ERROR || type == PROTO_BE_READY) ? PROTO_INSPECT : 0;
}

/* The answer to the restore, the first hidden one on the connection (pushed to the front last). */
static void sets_on_restored(struct session *s, const struct observer_message *m)
{
	struct session_sets *q = &s->replay->sets;
	if (m->type == PROTO_BE_ERROR) {
		struct proto_error_fields fields;
		bool is_parsed = proto_error_parse(m->body, m->len, &fields) == 0;
		TERN_WARN("client %s/%s: its SET state could not be restored on the new primary: %s", s->user,
			  s->database, is_parsed ? fields.message : "(unreadable error)");
		q->is_restore_failed = true;
		return;
	}
	q->is_restoring = false;
	if (!q->is_restore_failed)
		return;
	s->host->stats.tr_replay_failures++;
	base_strlcpy(s->end.error.sqlstate, "08006", sizeof(s->end.error.sqlstate));
	base_strlcpy(s->end.error.message,
		     "the primary was lost and the session's SET state could not be restored on the new primary (see "
		     "the log)",
		     sizeof(s->end.error.message));
	session_end_later(s, SESSION_END_SERVER_LOST);
}

static int sets_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_sets *q = &s->replay->sets;
	if (leg->role != LEG_PRIMARY)
		return 0;
	if (m->is_hidden) {
		if (q->is_restoring)
			sets_on_restored(s, m);
		return 0;
	}
	switch (m->type) {
	case PROTO_BE_COMMAND_COMPLETE:
		sets_on_complete(s, m);
		break;
	case PROTO_BE_ERROR:
		q->is_failed = true; /* the statement failed, and with it an implicit transaction (or the block) */
		if (q->is_query_active && q->query_ready_before == 0)
			q->is_query_failed = true; /* the Query stops at it */
		break;
	case PROTO_BE_READY:
		if (m->len >= 1)
			sets_on_ready(s, leg, (char)m->body[0]);
		break;
	default:
		break;
	}
	return 0;
}

static void sets_destroy(struct session *s)
{
	sets_end_query(&s->replay->sets);
	restore_set_deinit(&s->replay->sets.set);
}

uint32_t sets_count(const struct session *s)
{
	const struct restore_set *set = &s->replay->sets.set;
	const struct params_tracked *tracked = &s->host->runtime->tracked;
	uint32_t n = set->count;
	for (uint32_t i = 0; i < tracked->count; i++) /* what observer_params keeps and no SET here named */
		n += (s->params.changed & (1u << i)) && restore_set_find(set, tracked->names[i]) < 0;
	return n + (s->params.search_path[0] != '\0' && restore_set_find(set, "search_path") < 0);
}

const struct observer observer_sets = {
	.name = "sets",
	.is_on = sets_is_on,
	.client_types = "Q",
	.client_type = sets_client_type,
	.client_message = sets_client_message,
	.server_types = "CEZ",
	.server_message = sets_server_message,
	.hidden_type = sets_hidden_type,
	.attach = sets_attach,
	.destroy = sets_destroy,
};
