/* Query digests (digest.h) of a session's simple-protocol Queries: the fingerprint when a Query is read
 * with nothing else owed before it, its rows at each CommandComplete, its time at the ReadyForQuery that
 * answers it. A Query pipelined behind another is not digested (its time would be the other's too). */
#include "observer.h"
#include "session.h"

#include "digest.h"

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

static int digest_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_digest *d = &s->digest;
	if (d->fingerprint || leg->pending_ready != 1 || m->len == 0 || m->body[m->len - 1] != '\0')
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
	if (!d->fingerprint || m->is_hidden)
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
	.client_types = "Q",
	.client_message = digest_client_message,
	.server_types = "CZ",
	.server_message = digest_server_message,
};
