/*
 * leg.h — one server connection as a session uses it: the pool connection, its receive op, the queue
 * toward the server, the scanner of what the server sends, the replies it still owes (ReadyForQuery
 * messages, the hidden ones that answer tern's own queries, and, with statement tracking, every reply
 * in order), its transaction status, its COPY state, and its request to the pool while it waits.
 *
 * Life of a leg: leg_create (no connection) → a connection from the worker-local cache or the pool
 * (leg_attach), or a parked request that a worker later hands it → leg_resume arms the receive →
 * server bytes go to ops->on_bytes → leg_release gives an idle connection back, or leg_drop shuts a
 * connection that must not be reused and leg_reap discards it once nothing is in flight on it. A leg
 * that lost its connection can be attached again, so a session keeps its legs while connections come
 * and go; a leg still draining can be set aside (leg_is_reapable) while a new one takes its role.
 *
 * Over a TLS connection (conn->tls, kept with the connection between clients) the leg still queues
 * plaintext in to_server; its filter encrypts at flush time into one block the wire op sends, and what
 * the server sends is decrypted before ops->on_bytes (with RING_NO_BUFFER: the forwarded bytes are copied).
 *
 * Threads: the session's worker only. Ownership: a session owns its legs (leg_destroy once reapable); a
 * leg holds its connection (USED) while attached and its receive buffers' references in to_server.
 * What the leg must tell its session goes through leg_ops: received bytes, progress (release or settle
 * now), starvation, and a lost connection, which the session decides about in one place.
 * Never: knows the client, the session's insides, observers or the admin console.
 */
#ifndef TERN_LEG_H
#define TERN_LEG_H

#include "host.h"
#include "proto.h"
#include "sendq.h"
#include "stmts.h"

/* A session holds at most one leg per role: the primary's, and a replica's for reads routed there. */
enum leg_role { LEG_PRIMARY = 0, LEG_REPLICA, LEG_ROLE_COUNT };

/* How a leg's connection was lost: the session's decision (session_decide_lost) reads it. */
enum leg_fault {
	LEG_FAULT_NONE = 0,
	LEG_FAULT_CLOSED,    /* the server closed the connection, or a receive or send on it failed */
	LEG_FAULT_MALFORMED, /* it sent a message tern cannot account for, or one over max_backend_frame_bytes */
	LEG_FAULT_REFUSED,   /* the pool could not give it a connection (request.error says why) */
};

struct leg;
struct session;
struct leg_route;

/* COPY as observer_copy.c follows it on one leg. */
struct leg_copy {
	bool is_copy_in;              /* the server is in copy-in: it ignores the Syncs it receives */
	uint32_t syncs_since_execute; /* Syncs counted since the last Execute or Query */
	uint32_t syncs_ignored;       /* at the last CopyInResponse: Syncs pipelined behind the COPY */
};

struct leg_ops {
	/* Bytes the server sent, in receive buffer buffer_id (the callee takes references it keeps). <0: the
	 * stream is malformed and the leg is lost with LEG_FAULT_MALFORMED. */
	int (*on_bytes)(struct leg *leg, uint16_t buffer_id, const uint8_t *data, uint32_t len);
	/* A receive or send of the leg completed without a fault: the session may release or settle it. */
	void (*on_progress)(struct leg *leg);
	/* The leg's receive found no free buffer: the session waits for buffers, then leg_resume. */
	void (*on_starved)(struct leg *leg);
	/* The connection is lost (already shut): the session's one decision about what that means. */
	void (*on_lost)(struct leg *leg, enum leg_fault fault);
};

struct leg {
	struct session *session; /* the owner, for its callbacks; never dereferenced here */
	const struct leg_ops *ops;
	struct host *host;
	enum leg_role role;
	struct pool_conn *conn; /* NULL while detached */
	/* Where the server's bytes go (the client's queue): over its high mark, the receive pauses. NULL
	 * while they go nowhere (the session ended). */
	const struct sendq *downstream;
	struct ring_op recv;    /* single shot: nothing is armed when the connection is released */
	struct sendq to_server; /* fd -1 while detached: bytes wait for a connection */
	/* With a TLS connection (conn->tls): the ciphertext block in flight to the socket (leg_tls.h). */
	struct leg_wire {
		struct ring_op op;
		uint8_t *block;
		uint32_t len, sent;
	} wire;
	struct proto_stream stream; /* what the server sends */
	/* The server message being scanned, from its type byte to its end (which may come in a later receive):
	 * the observers that read it, and the one whose show stage claimed it (OBSERVER_COUNT: none). */
	uint32_t server_readers;
	uint8_t server_claimer;
	uint32_t watchers; /* the observers whose show stage sees what it shows the client (its connection's) */
	/* Waiting for a connection from the pool (host->parked, oldest first). */
	struct pool_request request;
	bool is_request_pending; /* must not be freed until the request resolves */
	struct base_list parked_link;
	struct base_list hold_link; /* host->holds: its queued bytes leave the receive buffers at the pass's end */
	/* The replies it owes. */
	uint32_t pending_ready; /* Query/Sync/FunctionCall sent whose ReadyForQuery has not come */
	uint32_t hidden_ready;  /* ... of them, answers to tern's own queries, hidden from the client */
	bool is_unsynced;       /* extended-protocol messages sent since the last Sync */
	struct leg_stmts stmts;      /* statement tracking's (stmts.h): every reply owed, in order, ... */
	bool is_skipping_to_sync;    /* after an error tern made up: the server would skip to the next Sync */
	/* tern's write-LSN probe queued behind the client's requests: the ReadyForQuery messages of the
	 * client's still to come before its answer (0: none queued; see route.c). */
	uint32_t probe_behind;
	bool is_probe_answering; /* the hidden answer being read is the probe's */
	uint64_t to_client_bytes; /* what it forwarded to the client, all told (a replica read re-run only at 0 new) */
	struct leg_route *route; /* routing's (routing/route_types.h), laid out after the leg */
	char tx_status;              /* of the last ReadyForQuery: 'I', 'T' or 'E' */
	struct leg_copy copy;        /* observer_copy.c */
	/* For the timeouts and SHOW STATS: when the oldest unanswered request went out, when the server last
	 * said it was ready. */
	uint64_t request_sent_ns;
	uint64_t ready_ns;
	/* Connection state. */
	bool is_failed;             /* broke or misbehaved: never reused */
	bool is_dropping;           /* its socket is shut; discarded once no op is armed on it */
	bool is_recv_paused;        /* back pressure: the client reads slower than the server writes */
	bool is_release_after_recv; /* a release waits for the cancelled receive to end */
	bool is_starved;            /* its receive ended for want of buffers */
	struct base_list link;      /* the session's list of legs set aside to drain */
};

/* Where the state laid out after a leg begins (leg_create's state_bytes; session_parts.place_leg). */
#define LEG_STATE_AT ((sizeof(struct leg) + 15u) & ~(size_t)15u)
/* A detached leg of `role` for `session`, with state_bytes zeroed at (uint8_t *)leg + LEG_STATE_AT for the
 * concerns that keep state per leg. NULL when out of memory. */
struct leg *leg_create(struct session *session, struct host *host, const struct leg_ops *ops, enum leg_role role,
		       size_t state_bytes);
/* Frees a reapable leg (leg_is_reapable). */
void leg_destroy(struct leg *leg);
/* Takes a USED connection (from the local cache, the pool, or a granted request). The stream toward the
 * server must be between messages. */
void leg_attach(struct leg *leg, struct pool_conn *conn);
/* Arms the receive when attached and nothing holds it back; `downstream` over its high mark pauses it
 * (back pressure) until the session calls again once it drained. */
void leg_resume(struct leg *leg);
/* True between requests: attached, sound, nothing owed, nothing queued or in flight, the server's
 * stream between messages and its transaction idle. */
bool leg_is_idle(const struct leg *leg);
/* Gives an idle connection back to the worker-local cache, or first cancels the armed receive (the
 * release then happens at its completion, through ops->on_progress). True when released now. */
bool leg_release(struct leg *leg);
/* Shuts the connection: it is never reused, its ops end with errors, leg_reap discards it. */
void leg_drop(struct leg *leg);
/* A dropped leg whose ops have ended: discards the connection. True when the leg holds none now. */
bool leg_reap(struct leg *leg);
/* The connection failed or misbehaved: drop it, ask the session (ops->on_lost), then reap. A leg already
 * dropping is only reaped: its failure was expected. */
void leg_fail(struct leg *leg, enum leg_fault fault);
/* True when nothing of the leg is in flight (no op armed, no parked request, no connection). */
bool leg_is_reapable(const struct leg *leg);
/* Receive-buffer slices queued toward the server become owned copies (a parked client must hold no
 * receive buffers). 0 or -ENOMEM. */
TERN_MUST_USE int leg_hold_queued(struct leg *leg);
/* tern's own Query message (whole) behind what leg holds, its answer hidden from the client. 0 or
 * -ENOMEM. */
TERN_MUST_USE int leg_push_hidden(struct leg *leg, const void *query, uint32_t len);
/* tern's own Query of the text sql[0..len) at the front of what leg holds (ahead of the client's queued
 * messages: a restore at attach), its answer hidden from the client. 0 or -ENOMEM. */
TERN_MUST_USE int leg_push_hidden_query_front(struct leg *leg, const char *sql, uint32_t len);
/* The ReadyForQuery messages leg owes the client's own requests (not tern's hidden queries, nor a write
 * probe queued behind them: route.c). */
static inline uint32_t leg_client_owed(const struct leg *leg)
{
	return leg->pending_ready - leg->hidden_ready - (leg->probe_behind > 0);
}
/* True while the client holds part of a server message this leg forwards as it arrives (its rest has not
 * come): a cut frame, after which nothing can be told to the client. */
static inline bool leg_is_client_mid_message(const struct leg *leg)
{
	return !proto_stream_is_at_boundary(&leg->stream) && (leg->stream.action & PROTO_FORWARD);
}
/* A request went out (Query, Sync, FunctionCall): one more ReadyForQuery is owed. */
static inline void leg_expect_ready(struct leg *leg, uint64_t now_ns)
{
	if (leg->pending_ready++ == 0)
		leg->request_sent_ns = now_ns;
}

#endif
