/* COPY on a leg: while the server is in copy-in it ignores the Syncs it receives, so the Syncs a client
 * pipelined behind a COPY's Execute bring no ReadyForQuery; the relay must not wait for them. */
#include "observer.h"
#include "session.h"

#include "proto.h"

#include <string.h>

static unsigned copy_client_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)s;
	struct leg_copy *copy = &leg->copy;
	switch (type) {
	case PROTO_FE_QUERY:
	case PROTO_FE_EXECUTE:
		copy->syncs_since_execute = 0;
		break;
	case PROTO_FE_SYNC:
		if (!copy->is_copy_in)
			copy->syncs_since_execute++;
		break;
	case PROTO_FE_COPY_DONE:
	case PROTO_FE_COPY_FAIL:
		copy->is_copy_in = false;
		break;
	default:
		break;
	}
	return OBSERVER_PASS;
}

static int copy_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct leg_copy *copy = &leg->copy;
	if (m->type == PROTO_BE_READY) {
		copy->is_copy_in = false;
		return 0;
	}
	if (m->type == PROTO_BE_ERROR) {
		/* A request the client pipelined behind its COPY FROM STDIN reached the server in copy-in: the
		 * server ends the COPY with 08P01 and swallows that request, which then brings no ReadyForQuery
		 * of its own; which one it was tern cannot know. The client broke the protocol: it is let go. */
		struct proto_error_fields f;
		if (copy->is_copy_in && leg_client_owed(leg) > 1 && proto_error_parse(m->body, m->len, &f) == 0 &&
		    strcmp(f.sqlstate, "08P01") == 0) {
			base_strlcpy(s->end.error.sqlstate, "08P01", sizeof(s->end.error.sqlstate));
			base_strlcpy(s->end.error.message,
				     "a query was sent during COPY FROM STDIN (only CopyData, CopyDone or CopyFail may follow "
				     "it)", sizeof(s->end.error.message));
			session_end_later(s, SESSION_END_PROTOCOL_VIOLATION);
		}
		return 0;
	}
	TERN_ASSERT(m->type == PROTO_BE_COPY_IN);
	copy->is_copy_in = true;
	copy->syncs_ignored = TERN_MIN(copy->syncs_since_execute, leg->pending_ready);
	leg->pending_ready -= copy->syncs_ignored;
	copy->syncs_since_execute = 0;
	return 0;
}

const struct observer observer_copy = {
	.name = "copy",
	.client_types = "QEScf",
	.client_type = copy_client_type,
	.server_types = "GZE",
	.server_message = copy_server_message,
};
