/*
 * worker.h — one worker thread: its io_uring, its SO_REUSEPORT listener with multishot accept, its
 * client sessions, its mailbox of granted pool requests, and its worker-local cache of server
 * connections released during the current loop pass.
 *
 * Threads: everything in struct worker is the worker thread's, except the mailbox (short mutex) and
 * the ring's eventfd (ring_wake). The runtime is shared and read-only after startup, except the
 * atomic client count.
 */
#ifndef TERN_WORKER_H
#define TERN_WORKER_H

#include "auth.h"
#include "config.h"
#include "params.h"
#include "pool/pool.h"
#include "reasons.h"
#include "ring/ring.h"

#include <pthread.h>

/* Connections one worker keeps for reuse within a loop pass; a pass rarely releases more. */
#define WORKER_LOCAL_CACHE_MAX 32u
/* The worker's housekeeping tick: wait deadlines are checked at this granularity. */
#define WORKER_TICK_MS 100u
/* Worker indexes fit the top byte of the BackendKeyData pid (for cancel routing). */
#define WORKER_COUNT_MAX 128u

struct worker;

struct pool_opener;

struct tern_runtime {
	const struct tern_config *config;
	struct pool *pool;
	struct pool_opener *opener;
	struct pool_server *primary;
	const struct auth_file *auth_file; /* NULL without [auth] auth_file */
	struct worker **workers;
	uint32_t worker_count;
	uint32_t client_count; /* atomic: sessions open in every worker */
	uint64_t identity_hash; /* the listen endpoint, part of the pool match key */
	struct params_tracked tracked; /* parameters kept per client in transaction pooling */
	bool stopping;          /* atomic: leave now (SIGINT, or the drain is over) */
	bool draining;          /* atomic: SIGTERM: accept no one, end sessions as their transactions end */
};

struct worker_stats {
	uint64_t accepted;
	uint64_t local_reuse;
	uint64_t pool_checkouts;
	uint64_t cancels_sent;
	/* Named prepared statements (transaction pooling): Parses tern sent a server, Parses it answered
	 * itself and deferred, statements closed to stay within max_prepared_statements. */
	uint64_t statements_prepared, statements_deferred, statements_evicted;
	uint64_t ended[SESSION_END_REASON_COUNT];
};

struct worker {
	uint32_t index;
	struct tern_runtime *runtime;
	pthread_t thread;
	struct ring ring;
	int listen_fd;
	struct ring_op accept_op;
	struct base_list sessions;
	struct base_list parked;  /* sessions with a parked pool request, oldest first */
	struct base_list flush;   /* send queues with bytes to send this pass */
	struct base_list reaping; /* ended sessions waiting for their ops to finish */
	struct base_list starved; /* sessions whose receive ended for want of buffers */
	pthread_mutex_t mailbox_lock;
	struct base_list mailbox; /* granted or failed pool requests */
	struct base_list cancels; /* CancelRequests for this worker's sessions, from any worker */
	uint32_t mailbox_count;   /* atomic: requests delivered to the mailbox, for a lock-free peek */
	struct pool_conn *local_cache[WORKER_LOCAL_CACHE_MAX];
	uint32_t local_count;
	uint32_t session_serial;
	uint64_t next_timeout_scan_ns;
	uint32_t session_count;
	struct worker_stats stats;
	/* Startup handshake with main: init result. */
	int init_result;
	char init_error[512];
	pthread_mutex_t init_lock;
	pthread_cond_t init_cond;
	bool init_done;
	bool is_drained; /* atomic: draining, and no session is left */
};

/* Creates the worker and its thread; returns after the thread has set up its ring, with the result. */
TERN_MUST_USE int worker_start(struct worker *worker, struct tern_runtime *runtime, uint32_t index, int listen_fd,
			       char *err, size_t err_size);
void worker_stop(struct worker *worker); /* asks the thread to end; join with worker_join */
/* True once a draining worker has no session left. */
bool worker_is_drained(struct worker *worker);
void worker_join(struct worker *worker);

/* A CancelRequest arrived on any worker: hands it to the worker named in the key's top byte. */
void worker_route_cancel(struct tern_runtime *runtime, uint32_t pid, uint32_t secret);

/* Worker-local reuse: a connection released in this pass, kept until its end. */
struct pool_conn *worker_local_take(struct worker *worker, const struct pool_db *db);
void worker_local_put(struct worker *worker, struct pool_conn *conn);

#endif
