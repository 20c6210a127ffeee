/* The session_parts main composes (parts.h): each hook is a concern's own function, or two concerns'
 * called in turn where the relay asks one question of both. */
#include "parts.h"

#include "core/dispatch.h"
#include "replay/recover.h"
#include "routing/monitor.h"
#include "routing/route.h"

#include <stdalign.h>

/* Each concern's state in the session's block, 16-byte aligned as the block is. */
#define PARTS_ALIGN(n) (((n) + 15u) & ~(size_t)15u)
#define PARTS_REPLAY_AT PARTS_ALIGN(sizeof(struct session_route))
#define PARTS_JOURNAL_AT (PARTS_REPLAY_AT + PARTS_ALIGN(sizeof(struct session_replay)))
static_assert(alignof(struct session_route) <= 16 && alignof(struct session_replay) <= 16 &&
		      alignof(struct session_journal) <= 16 && alignof(struct leg_route) <= 16,
	      "the state blocks are 16-byte aligned");

static void parts_place(struct session *s, uint8_t *state)
{
	route_place(s, (struct session_route *)state);
	replay_place(s, (struct session_replay *)(state + PARTS_REPLAY_AT),
		     (struct session_journal *)(state + PARTS_JOURNAL_AT));
}

static void parts_place_leg(struct leg *leg, uint8_t *state) { leg->route = (struct leg_route *)state; }

/* The observers, in the order they are asked: COPY first (others read the Syncs it counts), statements
 * before parameters (at attach, each pushes to the queue's front: the parameters' SET must go before the
 * statements' Parses, whose names resolve through search_path), Transaction Replay after the journal (at a
 * stale plan's ReadyForQuery it runs the request again, once every other observer has read it), polar
 * last (what the others show of a ReadyForQuery comes first). */
static const struct observer *const parts_observers[OBSERVER_COUNT] = {
	[OBSERVER_COPY] = &observer_copy,
	[OBSERVER_STMTS] = &observer_stmts,
	[OBSERVER_PARAMS] = &observer_params,
	[OBSERVER_PINS] = &observer_pins,
	[OBSERVER_SETS] = &observer_sets,
	[OBSERVER_STATS] = &observer_stats,
	[OBSERVER_ROUTE] = &observer_route,
	[OBSERVER_DIGEST] = &observer_digest,
	[OBSERVER_SHADOW] = &observer_shadow,
	[OBSERVER_JOURNAL] = &observer_journal,
	[OBSERVER_REPLAY] = &observer_replay,
	[OBSERVER_POLAR] = &observer_polar,
};

static void parts_route_query_sent(struct session *s) { route_note_query_sent(s); }
static int parts_route_push_probe(struct session *s, struct leg *leg, uint8_t probe)
{
	return route_push_probe(s, leg, (enum route_probe)probe);
}
static bool parts_route_is_replica_tx(const struct session *s) { return route_is_replica_tx(s); }
static void parts_route_note_request(struct session *s, const struct leg *leg) { route_note_request(s, leg); }
static void parts_route_note_admit(struct session *s) { route_note_admit(s); }

/* A Query too long to read: routing allows for a write; on the primary, the journal for a statement it
 * cannot match. */
static void parts_unread_query(struct session *s, struct leg *leg)
{
	route_note_unread_query(s);
	if (leg->role == LEG_PRIMARY)
		journal_note_unread_query(s);
}

/* The session ends: routing's waits, and a recovery's wait. */
static void parts_ending(struct session *s)
{
	route_end(s);
	recover_end(s);
}

/* A reply tern made up: with the answer routing guards, or behind the start of the answer Transaction
 * Replay holds. */
static bool parts_hold_reply(struct session *s, const void *data, uint32_t len)
{
	return route_holds_reply(s, data, len) || replay_reply(s, data, len);
}

static void parts_learn_key(const struct tern_runtime *rt, const struct server_auth_secret *secret)
{
	monitor_learn_key(rt->monitor, secret);
}

static bool parts_replay_is_answering(const struct session *s) { return recover_is_answering(s); }

static void parts_host_pass(struct host *host)
{
	route_host_pass(host);
	recover_host_pass(host);
}

static void parts_host_tick(struct host *host, uint64_t now_ns)
{
	route_host_tick(host, now_ns);
	recover_host_tick(host, now_ns);
}

const struct session_parts tern_parts = {
	.on_login_bytes = session_login_on_bytes,
	.on_client_chunk = session_relay_on_client_chunk,
	.feed = session_relay_feed_held,
	.on_server_bytes = session_relay_on_server_bytes,
	.attach = session_relay_attach,
	.before_release = dispatch_before_release,
	.deinit = dispatch_destroy,
	.observers = parts_observers,

	.session_state_bytes = PARTS_JOURNAL_AT + PARTS_ALIGN(sizeof(struct session_journal)),
	.leg_state_bytes = PARTS_ALIGN(sizeof(struct leg_route)),
	.place = parts_place,
	.place_leg = parts_place_leg,

	.route = {
		.chunk = route_chunk,
		.fed = route_fed,
		.query = route_query,
		.query_sent = parts_route_query_sent,
		.push_probe = parts_route_push_probe,
		.is_replica_tx = parts_route_is_replica_tx,
		.tx_request_sent = route_tx_request_sent,
		.note_request = parts_route_note_request,
		.note_admit = parts_route_note_admit,
		.replica_server = route_server,
		.is_busy = route_is_busy,
		.has_deadline = route_has_deadline,
		.leg_progress = route_on_progress,
		.leg_lost = route_on_lost,
		.take_setting = route_take_setting,
		.learn_key = parts_learn_key,
	},
	.replay = {
		.takes_chunk = replay_takes_chunk,
		.is_answering = parts_replay_is_answering,
		.answer_type = recover_client_type,
		.answer_message = recover_client_message,
		.flush = replay_flush_preamble,
		.hold_parse_complete = replay_hold_parse_complete,
		.lost = recover_on_lost,
		.awaits_primary = recover_awaits_primary,
		.waits_for_primary = recover_is_waiting,
		.check_deadline = recover_check_deadline,
	},
	.hold_reply = parts_hold_reply,
	.unread_query = parts_unread_query,
	.ending = parts_ending,

	.host_pass = parts_host_pass,
	.host_tick = parts_host_tick,
};
