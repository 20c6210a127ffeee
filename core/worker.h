/*
 * worker.h — one worker thread: its ring (io_uring, or epoll), its listeners (listen.h's sockets, a
 * multishot accept each), its client sessions, its mailbox (granted pool requests, CancelRequests,
 * auth_query answers, questions to every worker), its worker-local cache of server connections released
 * during the current loop pass, its tick (timeouts, waits, PAUSE's gate, the SIGTERM drain) and the
 * counters it publishes.
 *
 * Threads: everything in struct worker is the worker thread's, except the mailbox (short mutex), the
 * ring's eventfd (worker_wake), and what other threads read atomically (published counters,
 * pause_generation_seen, is_drained). The runtime is shared and read-only after startup, except its
 * fields marked atomic (runtime.h).
 * Ownership: main allocates the struct and ends it (worker_start .. worker_deinit, then closes the listeners
 * a drain left open); the worker owns its ring, its sessions and its SHOW STATS table; a worker_job is its
 * asker's, and worker_job_deinit frees its parts' answers.
 * Never: touches another worker's sessions: what concerns them (a grant, a cancel, an auth_query answer,
 * a job's part) is mailed to their worker.
 */
#ifndef TERN_WORKER_H
#define TERN_WORKER_H

#include "host.h"
#include "listen.h"
#include "worker_stats.h"

#include <pthread.h>

/* The worker's housekeeping tick: wait deadlines are checked at this granularity. */
#define WORKER_TICK_MS 100u
/* Worker indexes fit the top byte of the BackendKeyData pid (for cancel routing). */
#define WORKER_COUNT_MAX 128u
struct worker;

/* A question for every worker (SHOW CLIENTS, SHOW STATS). A session is touched only by its worker, so
 * each worker answers its own part on its own thread, from its mailbox; the last to answer hands the
 * job back to the worker that asked, where `done` runs. The parts' answers are published by the
 * release of `pending` (every answer is written before its worker's decrement; the last decrement
 * acquires them all) and by the mailbox lock of the origin. */
struct worker_job;
struct worker_job_part {
	struct base_list link; /* the answering worker's jobs list while queued */
	struct worker_job *job;
	void *data; /* the answer, malloc'd by fill; freed by worker_job_deinit */
	size_t len;
	bool is_truncated; /* fill ran out of room or memory */
};
struct worker_job {
	struct base_list link; /* the origin's jobs_done list once every part is answered */
	struct worker *origin;
	void (*fill)(struct worker *worker, struct worker_job_part *part); /* on each worker */
	void (*done)(struct worker_job *job); /* on the origin, once; it deinits and frees the job */
	uint32_t pending;                     /* atomic: parts not answered yet */
	uint32_t part_count;
	struct worker_job_part *parts; /* by worker index */
};

/* A socket the worker accepts clients on (listen.h); its multishot accept is embedded. */
struct worker_listener {
	struct ring_op accept_op;
	int fd; /* -1 once closed (SIGTERM) */
	struct worker *worker;
};

struct worker {
	struct host host; /* what its sessions see: ring, session lists, local cache, counters */
	pthread_t thread;
	struct worker_listener listeners[LISTEN_SOCKETS_MAX];
	uint32_t listener_count;
	pthread_mutex_t mailbox_lock;
	struct base_list mailbox; /* granted or failed pool requests */
	struct base_list cancels; /* CancelRequests for this worker's sessions, from any worker */
	struct base_list lookups; /* auth_query answers for this worker's sessions */
	struct base_list adopts;  /* clients another worker accepted and handed to this one (worker_hand_over) */
	uint32_t incoming;        /* atomic: adopts posted and not yet taken, counted in its load */
	bool is_gone;             /* atomic: its loop ended (a stop, or its ring failed): handed nothing more */
	uint32_t mailbox_count;   /* atomic: requests delivered to the mailbox, for a lock-free peek */
	uint64_t next_timeout_scan_ns;
	struct base_list jobs;      /* worker_job_parts to answer (mailbox_lock) */
	struct base_list jobs_done; /* worker_jobs this worker asked, all answered (mailbox_lock) */
	uint32_t pause_generation_seen; /* atomic: written by the worker, read by PAUSE on any worker */
	struct worker_db_stats db_stats; /* SHOW STATS's rows (worker_stats.c) */
	/* Startup handshake with main: init result. */
	int init_result;
	char init_error[512];
	pthread_mutex_t init_lock;
	pthread_cond_t init_cond;
	bool init_done;
	bool is_drained; /* atomic: draining, and no session is left */
	uint64_t drain_started_ns; /* the worker's first drain tick; 0 before SIGTERM */
	int wake_fd;     /* the ring's eventfd, dup'ed: other threads wake the worker here (worker_wake) */
	/* Its counters as of its last tick, for other threads (the admin HTTP endpoint): worker_read_stats. */
	struct host_stats published_stats;
	struct ring_stats published_ring;
};

static inline struct worker *worker_of(struct host *host) { return TERN_CONTAINER_OF(host, struct worker, host); }

/* The workers started so far, for another worker's thread: workers[i] below it are published. */
static inline uint32_t worker_started_count(const struct tern_runtime *runtime)
{
	return __atomic_load_n(&runtime->worker_count, __ATOMIC_ACQUIRE);
}

/* Creates the worker and its thread; returns after the thread has set up its ring, with the result. */
TERN_MUST_USE int worker_start(struct worker *worker, struct tern_runtime *runtime, uint32_t index,
			      const int *listen_fds, uint32_t listen_count,
			       char *err, size_t err_size);
void worker_stop(struct worker *worker); /* asks the thread to end; join with worker_join */
/* Any thread: the worker runs its on_wake (mailbox, cancels, jobs) soon. Safe until worker_deinit. */
void worker_wake(struct worker *worker);
/* Any thread: the worker's counters as of its last tick (each field read atomically). */
void worker_read_stats(const struct worker *worker, struct host_stats *stats, struct ring_stats *ring);
/* The runtime's topology_changed (the monitor's thread): wakes the workers whose reads wait for a replica. */
void worker_topology_changed(struct tern_runtime *rt);
/* Any thread: appends link to one of the worker's mailbox lists (mailbox, cancels, jobs, jobs_done)
 * under its lock, and wakes it if needed. */
void worker_mail(struct worker *worker, struct base_list *list, struct base_list *link);
/* True once a draining worker has no session left. */
bool worker_is_drained(struct worker *worker);
/* Waits for the thread to end. Another worker may still mail this one until it is joined too: what the
 * mailbox needs (its lock, its wake-up) goes only with worker_deinit, once every worker is joined. */
void worker_join(struct worker *worker);
void worker_deinit(struct worker *worker);

/* A CancelRequest arrived on any worker: hands it to the worker named in the key's top byte. */
void worker_route_cancel(struct tern_runtime *runtime, uint32_t pid, const uint8_t *key, uint32_t key_len);

/* Asks every worker to fill its part of `job` (fill, done and origin set by the caller); done runs on
 * the origin's thread. 0 or -ENOMEM (nothing was sent). */
TERN_MUST_USE int worker_job_post(struct tern_runtime *runtime, struct worker_job *job);
/* Frees the parts' answers and the parts. */
void worker_job_deinit(struct worker_job *job);
/* After every worker thread has been joined: answers and ends the jobs still in mailboxes. */
void worker_finish_jobs(struct tern_runtime *runtime);

/* True once every worker has acknowledged pause generation `generation` (PAUSE, on any worker). */
bool worker_pause_is_acknowledged(struct tern_runtime *runtime, uint32_t generation);
/* SHOW STATS: this worker's rows, live sessions included; malloc'd, NULL when out of memory. */
struct worker_db_report *worker_stats_report(struct worker *worker, uint32_t *count);

#endif
