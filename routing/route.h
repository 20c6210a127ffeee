/*
 * route.h — reads on replicas (DESIGN §5), in transaction pooling. A simple-protocol Query that arrives
 * while the client has nothing in flight is classified (classify.h); a read goes to a replica known to
 * hold what it must see at the client's consistency level (config.h: eventual, session, strict), or
 * waits for one (on host->route_waits, looked at again whenever the topology monitor stores new
 * answers) until wait_timeout_ms, after which the primary serves it. The client's next bytes wait
 * unread meanwhile (the backlog), so answers reach it in order. tern answers SET, RESET and SHOW of
 * tern.consistency itself.
 *
 * The session level's target is the LSN of the client's last write: a probe of the primary's insert
 * LSN that tern queues right behind the write (or its COMMIT) on the same connection, answered hidden
 * from the client (observer_route); the strict level's, a probe the monitor sends after the read
 * arrived (monitor_probe_request), shared by every read that asked before it went out.
 *
 * Threads: the session's worker. Ownership: the held query and the held reply are routing's, freed by
 * route_deinit; the backlog is the session's (s->steer). Never: sends a statement that may write to a replica, or blocks.
 */
#ifndef TERN_ROUTE_H
#define TERN_ROUTE_H

#include "core/classify.h"
#include "core/observer.h"
#include "core/session.h"
#include "route_setting.h"
#include "route_types.h"

/* A text's classification (classify.h) through the worker's shape cache, under cfg's read_functions. */
void route_classify(struct session *s, const struct tern_config *cfg, const char *sql, struct classify_result *r);

/* What becomes of a Query routing read (route_on_query). */
enum route_query {
	ROUTE_QUERY_ADMIT = 0, /* to the primary's leg, as any message */
	ROUTE_QUERY_TAKEN,     /* routing holds it (a read, or a SET tern.* waiting its turn): stop the scan */
	ROUTE_QUERY_ANSWERED,  /* tern answered it (SET tern.*): nothing goes to a server */
	ROUTE_QUERY_ADMIT_LAST, /* to the client's leg, and the scan stops behind it until its answer is in */
	ROUTE_QUERY_REFUSED,   /* tern answered it with an error */
};

/* What a probe tern queues on the primary's leg behind the client's request asks (its answer hidden). */
enum route_probe {
	ROUTE_PROBE_NONE = 0,
	ROUTE_PROBE_LSN,       /* the primary's insert LSN after a write (session level) */
	ROUTE_PROBE_ISOLATION, /* the isolation level of the client's transaction (transaction_split) */
};

/* A Query (body NUL-terminated as sent) arriving on the primary's leg. *probe_after: queue that probe
 * behind it (route_push_probe) once it is queued. */
enum route_query route_on_query(struct session *s, const uint8_t *body, uint32_t len, enum route_probe *probe_after);
/* In a read-only transaction on a replica (ROUTE_REPLICA_TX): a Sync ends one request; the scan stops
 * behind it until its answer is in (the transaction may have ended with it). */
static inline bool route_is_replica_tx(const struct session *s) { return s->routing->state == ROUTE_REPLICA_TX; }
/* The request that route_is_replica_tx let through is queued: the client's next bytes wait. */
void route_tx_request_sent(struct session *s);
/* A client chunk that begins an extended-protocol batch (Parse or Bind) while a read may go to a replica:
 * routing takes it (the batch is read up to its Sync before it decides; route_run). */
bool route_collects(struct session *s, const uint8_t *data, uint32_t len);
/* Drives the routed read: dispatch it if its replica is known to be there (or the primary must serve
 * it), then the backlog, until a read waits or runs on a replica, or nothing is left. */
void route_run(struct session *s);
/* Queues a probe on leg behind what is queued (one at a time: none when one is under way). 0 or -ENOMEM. */
TERN_MUST_USE int route_push_probe(struct session *s, struct leg *leg, enum route_probe kind);
/* A Query too long for routing to read goes to the primary's leg: it may have written. */
void route_note_unread_query(struct session *s);
/* A client message is admitted to a leg: a plain BEGIN sent before it is alone no more. */
static inline void route_note_admit(struct session *s) { s->routing->is_begin_alone = false; }
/* A Query went to its leg: a plain BEGIN it was is alone so far (route_begin_may_move looks at it). */
static inline void route_note_query_sent(struct session *s)
{
	s->routing->is_begin_alone = s->routing->is_begin_sent;
	s->routing->is_begin_sent = false;
}
/* A request went to leg (Query, Sync, FunctionCall): on the primary's it may have written. */
static inline void route_note_request(struct session *s, const struct leg *leg)
{
	if (leg->role == LEG_PRIMARY && !s->routing->is_read_on_primary)
		s->routing->is_write_unprobed = true;
}
/* A reply tern made up for a guarded answer (observer_stmts' ParseComplete, say): held with the server's
 * messages, or dropped when the read re-runs (session_send_reply). */
void route_hold_reply(struct session *s, const void *data, uint32_t len);

/* From the session at a leg's progress: a replica read answered and its connection went back, or what
 * a SET tern.* waited for is in. */
void route_on_progress(struct session *s, struct leg *leg);
/* A leg lost its connection, or could not get one: true when routing re-runs its read on the primary
 * (a replica's, before any of its bytes reached the client); false: the session decides. */
bool route_on_lost(struct session *s, struct leg *leg);
/* The session ends: off the host's wait list. */
void route_end(struct session *s);
/* The session is freed: the held query and the held reply go (observer_route's destroy). */
void route_deinit(struct session *s);
/* The worker, after the monitor's generation moved (is_tick: or once per tick, for deadlines): every
 * waiting read looks again. */
void route_check_waits(struct host *host, uint64_t now_ns);
/* session_parts.host_pass's part: the monitor's generation moved, waiting reads look again; host_tick's:
 * their deadlines. */
void route_host_pass(struct host *host);
void route_host_tick(struct host *host, uint64_t now_ns);


/* ---- session_parts' routing hooks (route_relay.c) ---- */
/* A client chunk while routing holds the client's traffic: true when routing took it. */
bool route_chunk(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len);
/* A chunk went to the primary: a query routing took in it goes on. */
void route_fed(struct session *s);
/* route_on_query in the relay's words; *probe: a route_probe. */
enum session_query_route route_query(struct session *s, const uint8_t *body, uint32_t len, uint8_t *probe);
/* The server the replica's leg asks for; routing holds the client's traffic; ... under its own deadline. */
struct pool_server *route_server(const struct session *s);
bool route_is_busy(const struct session *s);
bool route_has_deadline(const struct session *s);
/* A reply tern made up for the client's leg: held (true) while routing guards that leg's answer. */
bool route_holds_reply(struct session *s, const void *data, uint32_t len);
/* A startup option tern.<name>=<value>: 0, -ENOENT (not one of tern's), -EINVAL (*hint says why). */
int route_take_setting(struct session *s, const char *name, size_t name_len, const char *value, const char **hint);
/* session_parts.place's part: s->routing is `route` (zeroed), which knows its session. */
void route_place(struct session *s, struct session_route *route);

extern const struct observer observer_route; /* route_observer.c: the write-LSN probe, the replica legs' show stage */
extern const struct observer observer_polar; /* polar.c: a polar server's ReadyForQuery */

#endif
