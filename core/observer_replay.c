/* Transaction Replay's record of the client's requests on the primary's leg (s->replay; recover.c reads
 * it when that leg's connection is lost): where they began in both streams, so the loss can tell how far
 * they got, and their Query messages, so one that never reached the server (or may run twice) runs on
 * the next primary. The record opens at the first message the leg gets while it owes the client nothing
 * and closes at the ReadyForQuery that leaves it owing nothing; it holds the client's Queries only
 * (an extended-protocol request is marked, never kept). Transaction pooling only. */
#include "observer.h"
#include "route.h"
#include "session.h"

#include <errno.h>
#include <stdlib.h>

/* The record opens: the leg's position in both directions, and its transaction status before. */
void replay_note_message(struct session *s, struct leg *leg, uint8_t type)
{
	struct session_replay *r = &s->replay;
	if (!r->is_open) {
		r->is_open = true;
		r->tx_status = leg->conn ? leg->tx_status : 0;
		r->client_mark = leg->to_client_bytes;
		r->sent_mark = leg->to_server.sent_bytes_total + leg->to_server.bytes;
	}
	switch (type) {
	case PROTO_FE_QUERY:
		r->requests++;
		r->unlogged++; /* until its text is read (replay_client_message): a long one never is */
		break;
	case PROTO_FE_SYNC:
	case PROTO_FE_FUNCTION_CALL:
		r->requests++;
		r->is_extended = true;
		break;
	default:
		r->is_extended = true;
		break;
	}
}

int replay_hold_preamble(struct session *s, const void *data, uint32_t len)
{
	return route_bytes_append(&s->replay.preamble, data, len);
}

void replay_flush_preamble(struct session *s, struct leg *leg)
{
	struct route_bytes *held = &s->replay.preamble;
	if (held->len == 0)
		return;
	if (s->phase != SESSION_CLOSING)
		session_send_to_client(s, held->data, held->len);
	leg->to_client_bytes += held->len;
	held->len = 0;
}

static void replay_close(struct session_replay *r)
{
	r->is_open = r->is_extended = false;
	r->requests = r->unlogged = 0;
	r->inflight.len = 0;
}

/* On for a session that starts while Transaction Replay may recover it: a reload that turns it on
 * reaches the sessions that start after it. */
static bool replay_is_on(const struct session *s)
{
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	return s->is_transaction_pooling && cfg->tr_enabled && cfg->tr_mode != CONFIG_TR_NONE;
}

static int replay_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_replay *r = &s->replay;
	if (leg->role != LEG_PRIMARY || !r->is_open || r->unlogged == 0)
		return 0;
	uint8_t header[PROTO_HEADER_LEN] = {PROTO_FE_QUERY};
	proto_write_u32(header + 1, m->len + 4);
	if (route_bytes_append(&r->inflight, header, sizeof(header)) < 0 ||
	    route_bytes_append(&r->inflight, m->body, m->len) < 0)
		return -ENOMEM;
	r->unlogged--;
	return 0;
}

static int replay_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_replay *r = &s->replay;
	TERN_ASSERT(m->type == PROTO_BE_READY);
	if (leg->role != LEG_PRIMARY || !r->is_open)
		return 0;
	if (r->requests > 0)
		r->requests--;
	if (r->requests == 0 && !leg->is_unsynced)
		replay_close(r);
	return 0;
}

static void replay_destroy(struct session *s)
{
	free(s->replay.inflight.data);
	free(s->replay.preamble.data);
	s->replay.inflight = s->replay.preamble = (struct route_bytes){0};
}

const struct observer observer_replay = {
	.name = "replay",
	.is_on = replay_is_on,
	.client_types = "Q",
	.client_message = replay_client_message,
	.server_types = "Z",
	.server_message = replay_server_message,
	.destroy = replay_destroy,
};
