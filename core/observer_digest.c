/* Query digests (digest.h) of a session's queries. A simple-protocol Query: the fingerprint when it is read
 * with nothing else owed before it, its rows at each CommandComplete, its time at the ReadyForQuery that
 * answers it (one pipelined behind another is not digested: its time would be the other's too). The
 * extended protocol: each Execute's statement (the unnamed one's last Parse, or a named one tern keeps),
 * timed from the Execute, or the previous one's completion, to its own CommandComplete. */
#include "observer.h"
#include "session.h"

#include "digest.h"
#include "stmts.h"

#include <string.h>

#include <stdlib.h>

static bool digest_is_on(const struct session *s) { return s->host->runtime->digests != NULL; }

static struct digest_local *digest_local_of(struct host *host)
{
	if (!host->digests)
		host->digests = calloc(1, sizeof(*host->digests));
	return host->digests;
}

/* Adds to the worker's table, merging it into the shared one first when it is full. */
static void digest_add(struct session *s, uint64_t fingerprint, const char *text, uint64_t calls, uint64_t ns,
		       uint64_t rows)
{
	struct digest_local *local = digest_local_of(s->host);
	if (!local)
		return;
	if (!digest_local_add(local, fingerprint, text, calls, ns, rows)) {
		digest_merge(s->host->runtime->digests, local);
		(void)digest_local_add(local, fingerprint, text, calls, ns, rows);
	}
}

/* The fingerprint of a statement's text, its digest entry made (with no call yet) so the text is there. */
static uint64_t digest_statement(struct session *s, const char *sql, size_t len)
{
	struct digest_local *local = digest_local_of(s->host);
	if (!local)
		return 0;
	char text[DIGEST_TEXT_MAX];
	uint64_t fingerprint = digest_statement_fingerprint(local, sql, len, text, sizeof(text));
	if (fingerprint)
		digest_add(s, fingerprint, text, 0, 0, 0);
	return fingerprint;
}

/* The extended protocol: a Parse names the text, a Bind the statement, an Execute queues it. */
static int digest_extended_message(struct session *s, const struct observer_message *m)
{
	struct session_digest *d = &s->digest;
	const uint8_t *end = m->body + m->len;
	const uint8_t *name_end = memchr(m->body, '\0', m->len);
	if (!name_end)
		return 0;
	if (m->type == PROTO_FE_PARSE) {
		const uint8_t *sql = name_end + 1;
		const uint8_t *sql_end = sql < end ? memchr(sql, '\0', (size_t)(end - sql)) : NULL;
		if (m->body[0] == '\0' && sql_end)
			d->unnamed = digest_statement(s, (const char *)sql, (size_t)(sql_end - sql));
	} else if (m->type == PROTO_FE_BIND) {
		const char *stmt_name = (const char *)name_end + 1; /* after the portal's name */
		if ((const uint8_t *)stmt_name >= end || !memchr(stmt_name, '\0', (size_t)(end - (const uint8_t *)stmt_name))) {
			d->bound = 0;
		} else if (!stmt_name[0]) {
			d->bound = d->unnamed;
		} else {
			struct stmt *stmt = (s->observers_on & (1u << OBSERVER_STMTS))
						    ? stmt_map_get(&s->stmts.statements, stmt_name)
						    : NULL;
			const char *content_end = stmt && !stmt->digest ? memchr(stmt->content, '\0', stmt->content_len) : NULL;
			if (content_end) /* once a statement */
				stmt->digest = digest_statement(s, (const char *)stmt->content,
								(size_t)(content_end - (const char *)stmt->content));
			d->bound = stmt ? stmt->digest : 0;
		}
	} else if (m->type == PROTO_FE_EXECUTE) {
		if (d->bound && !d->fingerprint && d->execute_count < SESSION_DIGEST_EXECUTES) {
			if (d->execute_count == 0)
				d->mark_ns = s->client_active_ns;
			d->executes[(d->execute_head + d->execute_count++) % SESSION_DIGEST_EXECUTES] = d->bound;
		}
		d->bound = 0; /* the next Execute needs a Bind read since (a long one passes unread) */
	}
	return 0;
}

static int digest_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_digest *d = &s->digest;
	if (m->type != PROTO_FE_QUERY)
		return digest_extended_message(s, m);
	if (d->fingerprint || d->execute_count || leg->pending_ready != 1 || m->len == 0 || m->body[m->len - 1] != '\0')
		return 0; /* one in flight, or something owed before it: not timed */
	struct digest_local *local = digest_local_of(s->host);
	if (!local)
		return 0;
	char text[DIGEST_TEXT_MAX];
	d->fingerprint = digest_fingerprint(local, (const char *)m->body, text, sizeof(text));
	d->started_ns = s->client_active_ns;
	d->rows = 0;
	if (d->fingerprint)
		digest_add(s, d->fingerprint, text, 1, 0, 0);
	return 0;
}

static int digest_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_digest *d = &s->digest;
	if (m->is_hidden)
		return 0;
	if (d->execute_count > 0 && (m->type == PROTO_BE_COMMAND_COMPLETE || m->type == PROTO_BE_EMPTY_QUERY)) {
		uint64_t now = base_now_ns(), fingerprint = d->executes[d->execute_head];
		d->execute_head = (d->execute_head + 1) % SESSION_DIGEST_EXECUTES;
		d->execute_count--;
		if (m->type == PROTO_BE_COMMAND_COMPLETE)
			digest_add(s, fingerprint, NULL, 1, now - d->mark_ns, digest_tag_rows(m->body, m->len));
		d->mark_ns = now;
		return 0;
	}
	if (m->type == PROTO_BE_READY)
		d->execute_count = 0; /* an error skipped the rest, or a portal was suspended: nothing more is owed */
	if (!d->fingerprint)
		return 0;
	if (m->type == PROTO_BE_COMMAND_COMPLETE) {
		d->rows += digest_tag_rows(m->body, m->len);
	} else if (m->type == PROTO_BE_READY && leg->pending_ready == leg->hidden_ready) {
		digest_add(s, d->fingerprint, NULL, 0, base_now_ns() - d->started_ns, d->rows);
		d->fingerprint = 0;
	}
	return 0;
}

const struct observer observer_digest = {
	.name = "digest",
	.is_on = digest_is_on,
	.client_types = "QPBE",
	.client_message = digest_client_message,
	.server_types = "CIZ",
	.server_message = digest_server_message,
};
