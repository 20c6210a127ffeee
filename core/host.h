/*
 * host.h — the part of a worker that its sessions and their server legs may touch: the worker's
 * io_uring, its lists of sessions (live, ending, starved for buffers, with bytes to flush), its parked
 * requests, its worker-local cache of server connections released in the current loop pass, its
 * counters, and the three calls that reach the worker itself (a granted pool request, a cancel, an
 * auth_query answer).
 *
 * Threads: the worker's thread only, except host_ops.request_done and lookup_done (any thread: the pool's
 * and the auth_query thread post to the worker's mailbox). A worker embeds its host; sessions hold a pointer to it and never see the worker.
 * Ownership: the local cache holds USED connections for the pool (DESIGN §4); host_local_flush gives them
 * back at the end of each pass.
 * Never: knows sessions' insides, the admin console, or the worker's thread, mailbox and jobs.
 */
#ifndef TERN_HOST_H
#define TERN_HOST_H

#include "pick.h"
#include "pool.h"
#include "reasons.h"
#include "ring.h"
#include "runtime.h"
#include "sendq.h"

/* The worker's receive-buffer groups: client reads can never take the buffers server responses need
 * (server responses are what ends transactions and frees connections for waiting clients). */
#define HOST_BUFFERS_CLIENT 0
#define HOST_BUFFERS_SERVER 1
/* Connections one worker keeps for reuse within a loop pass; a pass rarely releases more. */
#define HOST_LOCAL_CACHE_MAX 32u

struct host;
struct auth_lookup;
struct classify_cache;
struct digest_local;

/* The upper bounds of the read-wait histogram's buckets, in microseconds. */
#define HOST_ROUTE_WAIT_BOUNDS_US {100, 250, 500, 1000, 2500, 5000, 10000, 50000, 250000, 1000000, 5000000}
#define HOST_ROUTE_WAIT_BUCKETS 11u
/* Room for routing's reasons a split transaction's statement stays on the primary (route.c asserts it). */
#define HOST_SPLIT_REFUSALS 8u

/* Counters of one worker, kept by its sessions (plain increments, the worker's thread only; the worker
 * publishes a copy for other threads each tick). All uint64_t: the copy goes field by field. */
/* Where routed reads went (route.c): a replica, or the primary and why. */
struct host_route_paths {
	uint64_t replica;      /* a replica served them at once */
	uint64_t replica_wait; /* a replica served them after waiting for their LSN */
	uint64_t timeout;      /* the primary served them after wait_timeout_ms */
	uint64_t no_replica;   /* the primary served them: no replica up (or within the lag bounds) */
	uint64_t lost;         /* re-run on the primary after their replica's connection was lost */
	uint64_t lost_replica; /* re-run on another replica after their replica's connection was lost */
	uint64_t error;        /* re-run on the primary after their replica refused them (40001, 25006) */
};

struct host_stats {
	uint64_t accepted;
	uint64_t handed_over;    /* clients accepted here and handed to a worker with fewer sessions */
	uint64_t local_reuse;    /* transactions served by a connection released in the same pass */
	uint64_t pool_checkouts; /* transactions that asked the pool */
	uint64_t local_handoffs; /* connections released here that went straight to a waiter here */
	uint64_t mailed_grants;  /* waiters here served through the mailbox (another worker, a new connection) */
	uint64_t cancels_sent;
	uint64_t ended[SESSION_END_REASON_COUNT];
	/* Routing (route.c), by path: what served autocommit reads, and split reads of transactions. */
	struct host_route_paths reads, split;
	uint64_t split_refused[HOST_SPLIT_REFUSALS]; /* statements of a split transaction kept on the primary, by why
						   * (routing/split.h's enum split_refusal) */
	uint64_t split_pipelined; /* split reads kept on the primary: sent before an answer they must follow */
	/* How long reads waited for their LSN target, as a histogram (HOST_ROUTE_WAIT_BOUNDS_US, then +Inf). */
	uint64_t route_wait_buckets[HOST_ROUTE_WAIT_BUCKETS + 1];
	uint64_t route_wait_us_sum;
	uint64_t classify_hits, classify_misses; /* the classification cache's */
	/* Transaction Replay (recover.c), as the reference names them (tr_*_total on /metrics). */
	uint64_t tr_failovers;           /* lost primary connections a session survived */
	uint64_t tr_reexecuted;          /* statements run again on the next primary */
	uint64_t tr_replay_failures;     /* recoveries the client got an error from (or that ended it) */
	uint64_t tr_unknown_outcome;     /* 08007 errors: a statement, or a COMMIT, whose outcome is unknown */
	uint64_t tr_replayed;            /* transactions replayed and verified on the next primary */
	uint64_t tr_cap_exceeded;        /* transactions a [limits] tr_max_* bound made unreplayable */
	uint64_t tr_set_cap_exceeded;    /* failovers refused: the session's SET state over its bound */
	uint64_t stale_plan_reruns;      /* autocommit requests run again after 0A000 (a stale plan) */
};

struct host_ops {
	/* Any thread: a parked request of a session on this host was granted or failed; the worker
	 * hands it back to the session on its own thread. */
	void (*request_done)(struct host *host, struct pool_request *req);
	/* A CancelRequest arrived here: to the worker its key names. */
	void (*route_cancel)(struct tern_runtime *runtime, uint32_t pid, const uint8_t *key, uint32_t key_len);
	/* The auth_query thread answered a lookup whose done_ctx is this host: to the worker's mailbox. */
	void (*lookup_done)(struct auth_lookup *lookup);
};

struct host {
	uint32_t index; /* the worker's; the top byte of every cancel key it gives out */
	struct tern_runtime *runtime;
	const struct host_ops *ops;
	struct ring ring;
	struct base_list sessions; /* live sessions */
	struct base_list reaping;  /* ended sessions waiting for their ops to finish */
	struct base_list parked;   /* server legs with a parked pool request, oldest first */
	struct base_list flush;    /* send queues with bytes to send this pass */
	struct base_list starved;  /* sessions whose receive ended for want of buffers */
	struct base_list ending;   /* sessions to end at the end of this pass (session_end_later) */
	/* Legs whose queued bytes must leave the receive buffers by the end of this pass if they still wait
	 * then (parked, or at the PAUSE gate): a wait that ends within the pass copies nothing. */
	struct base_list holds;
	/* Sessions whose read waits for an LSN target (route.c), oldest first; route_waiting is their count
	 * (the monitor reads it to wake only the workers that wait), route_generation the monitor's last
	 * generation they were looked at for. */
	struct base_list route_waits;
	uint32_t route_waiting; /* atomic for readers on other threads */
	uint32_t route_generation;
	/* Sessions whose primary leg waits for a primary after its connection was lost (recover.c), and
	 * their count (atomic for the monitor, which wakes only the workers that wait); the monitor
	 * generation and the primary they were last looked at for. */
	struct base_list recover_waits;
	uint32_t recover_waiting;
	uint64_t recover_asked_ns; /* when a waiting session last asked the monitor for a round */
	uint32_t recover_generation;
	struct pool_server *recover_primary; /* atomic for readers on other threads */
	struct pick_state pick; /* which replica serves the next read (pick.h) */
	struct classify_cache *classify_cache; /* routing's, made at the first read routed (NULL until then) */
	struct digest_local *digests; /* this worker's query digests, merged into runtime->digests each tick */
	uint32_t session_serial;
	uint32_t session_count; /* atomic: other workers weigh it (worker_hand_over) */
	uint32_t pause_waiting_count;   /* sessions held at the PAUSE gate (recounted by each scan) */
	uint32_t console_waiting_count; /* admin sessions the console polls on the tick */
	struct pool_conn *local_cache[HOST_LOCAL_CACHE_MAX];
	uint32_t local_count;
	struct host_stats stats;
};

void host_init(struct host *host, uint32_t index, struct tern_runtime *runtime, const struct host_ops *ops);
/* Queues q for this pass's flush (once). */
static inline void host_mark_dirty(struct host *host, struct sendq *q)
{
	if (q->is_dirty)
		return;
	q->is_dirty = true;
	base_list_insert_tail(&host->flush, &q->flush_link);
}
/* Worker-local reuse: a connection of db to server released in this pass, or NULL (a connection to
 * another server, one the primary was before a failover say, is never handed out for this one). */
struct pool_conn *host_local_take(struct host *host, const struct pool_db *db, const struct pool_server *server);
/* A released connection: kept for this pass (or back to the pool when the cache is full). */
void host_local_put(struct host *host, struct pool_conn *conn);
/* Every cached connection back to the pool (straight to a waiter if one parked). */
void host_local_flush(struct host *host);

#endif
