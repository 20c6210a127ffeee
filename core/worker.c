/* The worker thread of worker.h: accepts, the loop and the end of each pass (ends, starved reads, local
 * hand-overs, the mailbox, flushes, reaping), the tick, cancels, questions to every worker, the drain. */
#include "worker.h"

#include "auth_query.h"
#include "classify.h"
#include "digest.h"
#include "opener.h"
#include "session.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* SIGTERM: how long the listeners keep accepting after the drain began (see worker_drain). */
#define WORKER_DRAIN_ACCEPT_NS (200 * BASE_NS_PER_MS)
/* SIGTERM: how long a client welcomed but silent stays spared for a first transaction (worker_drain). */
#define WORKER_DRAIN_FIRST_ASK_NS BASE_NS_PER_SEC
/* How long an ended session may take to get its goodbye to the client before the socket is cut. */
#define WORKER_LINGER_NS (2 * BASE_NS_PER_SEC)

/* A client another worker accepted, for this one. */
struct worker_adopt {
	struct base_list link;
	int fd;
	uint32_t index; /* the listener it came in on */
};

/* A client accepted here, or handed over by another worker, becomes a session here (closed when tern
 * stops, or no session can be made for it). */
static void worker_take_client(struct worker *worker, int fd, uint32_t index)
{
	if (__atomic_load_n(&worker->host.runtime->stopping, __ATOMIC_RELAXED) || !session_create(&worker->host, fd, index))
		close(fd);
}

/* What another worker weighs: its sessions and the clients on their way to it. */
static uint32_t worker_load(const struct worker *worker)
{
	return __atomic_load_n(&worker->host.session_count, __ATOMIC_RELAXED) +
	       __atomic_load_n(&worker->incoming, __ATOMIC_RELAXED);
}

/* A client accepted here goes to the worker with the fewest sessions when that is fewer than this one's:
 * the kernel spreads TCP clients over the workers' sockets by a hash, and the Unix socket's all to the
 * first, so a busy worker would leave another idle. True when it was handed over. */
static bool worker_hand_over(struct worker *worker, int fd, uint32_t index)
{
	struct tern_runtime *rt = worker->host.runtime;
	if (__atomic_load_n(&rt->draining, __ATOMIC_ACQUIRE) || __atomic_load_n(&rt->stopping, __ATOMIC_RELAXED))
		return false; /* (while draining, each worker serves what its own listeners still give it) */
	uint32_t count = worker_started_count(rt), least_load = worker_load(worker);
	struct worker *least = NULL;
	for (uint32_t i = 0; i < count; i++) {
		struct worker *other = rt->workers[i];
		uint32_t load = other == worker || __atomic_load_n(&other->is_gone, __ATOMIC_ACQUIRE) ? UINT32_MAX
											: worker_load(other);
		if (load < least_load) {
			least = other;
			least_load = load;
		}
	}
	if (!least)
		return false;
	struct worker_adopt *adopt = malloc(sizeof(*adopt));
	if (!adopt)
		return false; /* served here */
	*adopt = (struct worker_adopt){.fd = fd, .index = index};
	__atomic_add_fetch(&least->incoming, 1, __ATOMIC_RELAXED);
	worker_mail(least, &least->adopts, &adopt->link);
	worker->host.stats.handed_over++;
	return true;
}

static void worker_on_accept(struct ring_op *op, int res, uint32_t flags)
{
	(void)flags;
	struct worker_listener *listener = TERN_CONTAINER_OF(op, struct worker_listener, accept_op);
	struct worker *worker = listener->worker;
	if (res >= 0) {
		int one = 1;
		setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		worker->host.stats.accepted++;
		/* While draining, what the listeners still hand over is served (its first transaction at
		 * least): a rolling restart's clients queued here before the steering are not turned away. */
		uint32_t index = (uint32_t)(listener - worker->listeners); /* the endpoint: the pool key's identity */
		if (!worker_hand_over(worker, res, index))
			worker_take_client(worker, res, index);
	} else if (res != -ECANCELED) {
		/* Out of descriptors or memory: retrying at once would spin; the tick re-arms. */
		TERN_WARN("worker %u: accept failed: %s", worker->host.index, strerror(-res));
		return;
	}
	if (!op->is_armed && listener->fd >= 0 && !__atomic_load_n(&worker->host.runtime->stopping, __ATOMIC_RELAXED))
		ring_accept_multishot(&worker->host.ring, op, listener->fd);
}

struct worker_cancel {
	struct base_list link;
	uint32_t pid;
	uint8_t key[PROTO_CANCEL_KEY_MAX];
	uint32_t key_len;
};

void worker_route_cancel(struct tern_runtime *runtime, uint32_t pid, const uint8_t *key, uint32_t key_len)
{
	TERN_ASSERT(key_len <= PROTO_CANCEL_KEY_MAX);
	uint32_t index = pid >> 24;
	if (index >= worker_started_count(runtime))
		return; /* not a key tern gave out */
	struct worker *target = runtime->workers[index];
	struct worker_cancel *cancel = malloc(sizeof(*cancel));
	if (!cancel)
		return; /* a cancel is best effort, as in PostgreSQL */
	cancel->pid = pid;
	memcpy(cancel->key, key, key_len);
	cancel->key_len = key_len;
	worker_mail(target, &target->cancels, &cancel->link);
}

/* Cancels the running query of the session the key names, if the secret matches. A session with no
 * query on a server (idle, or still waiting for one) is left alone. */
static void worker_apply_cancel(struct worker *worker, const struct worker_cancel *cancel)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->host.sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->key.pid != cancel->pid)
			continue;
		/* Compared without an early exit, so timing does not reveal how much of a guess was right; a
		 * key of another length than the one given (3.0's 4 bytes, 3.2's 32) is no match. */
		const struct leg *leg = session_primary(s);
		uint8_t diff = cancel->key_len != s->key.len;
		for (uint32_t i = 0; i < s->key.len; i++)
			diff |= (uint8_t)(s->key.secret[i] ^ (i < cancel->key_len ? cancel->key[i] : 0));
		if (diff != 0 || !leg->conn || leg->pending_ready == 0)
			return;
		TERN_DEBUG("cancel for client %#x: server pid %u, %u queries pending", cancel->pid,
			   leg->conn->backend_pid, leg->pending_ready);
		if (pool_opener_cancel(worker->host.runtime->opener, leg->conn) == 0)
			worker->host.stats.cancels_sent++;
		return;
	}
}

/* ---- questions to every worker (SHOW CLIENTS, SHOW STATS) ---- */

int worker_job_post(struct tern_runtime *runtime, struct worker_job *job)
{
	TERN_ASSERT(job->origin && job->fill && job->done && !job->parts);
	uint32_t count = worker_started_count(runtime);
	job->parts = calloc(count, sizeof(*job->parts));
	if (!job->parts)
		return -ENOMEM;
	job->part_count = count;
	job->pending = count; /* published with the first part by the mailbox lock */
	for (uint32_t i = 0; i < count; i++) {
		struct worker *target = runtime->workers[i];
		struct worker_job_part *part = &job->parts[i];
		part->job = job; /* part i is worker i's from here on: not touched again until done */
		worker_mail(target, &target->jobs, &part->link);
	}
	return 0;
}

void worker_job_deinit(struct worker_job *job)
{
	for (uint32_t i = 0; i < job->part_count; i++)
		free(job->parts[i].data);
	free(job->parts);
	job->parts = NULL;
	job->part_count = 0;
}

/* Answers one part on this worker; the last part answered hands the job back to its origin. At exit
 * (is_final) every worker thread is joined and its mailbox lock destroyed: no lock, no wake. */
static void worker_job_answer(struct worker *worker, struct worker_job_part *part, bool is_final)
{
	struct worker_job *job = part->job;
	job->fill(worker, part);
	/* Release: this part's answer is written. Acquire (for the last): every other part's is visible. */
	if (__atomic_sub_fetch(&job->pending, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	struct worker *origin = job->origin;
	if (is_final) {
		base_list_insert_tail(&origin->jobs_done, &job->link);
		return;
	}
	worker_mail(origin, &origin->jobs_done, &job->link);
}

void worker_finish_jobs(struct tern_runtime *runtime)
{
	/* Every worker thread is joined (the join orders their writes before these reads), and no other
	 * thread touches jobs lists. Parts still queued are answered here (no session is left), then every
	 * job is done (its admin session is gone: done frees it). */
	for (uint32_t i = 0; i < runtime->worker_count; i++) {
		struct worker *worker = runtime->workers[i];
		struct base_list *node;
		/* Answers auth_query sent before it stopped: their sessions are gone (owner NULL). */
		while ((node = base_list_pop_head(&worker->lookups)) != NULL)
			session_login_on_lookup(TERN_CONTAINER_OF(node, struct auth_lookup, link));
		while ((node = base_list_pop_head(&worker->jobs)) != NULL)
			worker_job_answer(worker, TERN_CONTAINER_OF(node, struct worker_job_part, link), true);
	}
	for (uint32_t i = 0; i < runtime->worker_count; i++) {
		struct base_list *node;
		while ((node = base_list_pop_head(&runtime->workers[i]->jobs_done)) != NULL) {
			struct worker_job *job = TERN_CONTAINER_OF(node, struct worker_job, link);
			job->done(job);
		}
	}
}

struct worker_db_report *worker_stats_report(struct worker *worker, uint32_t *count)
{
	return worker_db_stats_report(&worker->db_stats, &worker->host, count);
}

/* ---- PAUSE's gate ---- */

bool worker_pause_is_acknowledged(struct tern_runtime *runtime, uint32_t generation)
{
	uint32_t count = worker_started_count(runtime);
	for (uint32_t i = 0; i < count; i++)
		if (__atomic_load_n(&runtime->workers[i]->pause_generation_seen, __ATOMIC_ACQUIRE) != generation)
			return false;
	return true;
}

/* The sessions held at the gate: after RESUME each asks for its server again; while paused, those
 * held past query_wait_timeout end as a pool wait would. Recounts the ones still held. */
static void worker_pause_scan(struct worker *worker, uint64_t now_ns)
{
	const struct tern_config *config = runtime_config(worker->host.runtime); /* SIGHUP */
	uint64_t wait_ns = config->query_wait_timeout_ms * BASE_NS_PER_MS;
	uint32_t held = 0;
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->host.sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (!s->gate.is_waiting)
			continue;
		if (!session_is_gated(s)) {
			struct leg *leg = session_primary(s);
			bool wants_server = !leg->conn && !leg->is_request_pending &&
					    (s->phase == SESSION_LOGIN_WAIT ||
					     (s->phase == SESSION_READY && !sendq_is_empty(&leg->to_server)));
			if (wants_server)
				session_acquire(s, leg); /* passes the gate, which counts the wait */
			else
				s->gate.is_waiting = false;
		} else if (wait_ns > 0 && now_ns - s->gate.wait_ns >= wait_ns) {
			s->gate.is_waiting = false;
			session_end(s, SESSION_END_WAIT_TIMEOUT);
		}
		held += s->gate.is_waiting; /* an ended session stays readable until the pass ends */
	}
	worker->host.pause_waiting_count = held;
}

/* A parked request of leg was granted (or failed): the wait ends for SHOW STATS, the session goes on. */
static void worker_grant(struct leg *leg, uint64_t now_ns)
{
	struct session *s = leg->session;
	if (leg->request.conn && s->phase != SESSION_CLOSING) {
		/* SHOW STATS: the wait ends and the server assignment begins. */
		s->stats.wait_ns += now_ns - leg->request.parked_ns;
		s->stats.assigned_ns = now_ns;
	}
	session_on_request_done(leg);
}

/* The oldest leg of this worker parked for conn's key, if any. */
static struct leg *worker_local_waiter(struct worker *worker, const struct pool_conn *conn)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->host.parked)
	{
		struct leg *leg = TERN_CONTAINER_OF(node, struct leg, parked_link);
		if (leg->request.db == conn->db && leg->request.server == conn->server)
			return leg;
	}
	return NULL;
}

/* The end of a pass: each connection released in it goes to this worker's oldest waiter for its key
 * when there is one (no mailbox, no wake-up, no copy of the waiter's bytes), else back to the pool,
 * which may hand it to another worker's waiter (counted there as a mailed grant). */
static void worker_local_flush(struct worker *worker)
{
	struct host *host = &worker->host;
	if (host->local_count == 0)
		return;
	uint64_t now = base_now_ns();
	uint32_t count = host->local_count;
	host->local_count = 0; /* a session attached below may release again: into an empty cache */
	struct pool_conn *released[HOST_LOCAL_CACHE_MAX];
	memcpy(released, host->local_cache, count * sizeof(*released));
	for (uint32_t i = 0; i < count; i++) {
		struct pool_conn *conn = released[i];
		struct leg *leg = base_list_is_empty(&host->parked) ? NULL : worker_local_waiter(worker, conn);
		if (!leg) {
			pool_checkin(host->runtime->pool, conn, now);
		} else if (pool_checkin_to(host->runtime->pool, conn, &leg->request, now)) {
			host->stats.local_handoffs++;
			worker_grant(leg, now);
		}
	}
}

static void worker_on_wake(struct ring *ring)
{
	struct worker *worker = ring->owner;
	if (__atomic_load_n(&worker->mailbox_count, __ATOMIC_ACQUIRE) == 0)
		return;
	struct base_list done, cancels, lookups, adopts, jobs, jobs_done;
	base_list_init(&done);
	base_list_init(&cancels);
	base_list_init(&lookups);
	base_list_init(&adopts);
	base_list_init(&jobs);
	base_list_init(&jobs_done);
	pthread_mutex_lock(&worker->mailbox_lock);
	base_list_splice_tail(&done, &worker->mailbox);
	base_list_splice_tail(&cancels, &worker->cancels);
	base_list_splice_tail(&lookups, &worker->lookups);
	base_list_splice_tail(&adopts, &worker->adopts);
	base_list_splice_tail(&jobs, &worker->jobs);
	base_list_splice_tail(&jobs_done, &worker->jobs_done);
	__atomic_store_n(&worker->mailbox_count, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&worker->mailbox_lock);
	struct base_list *node;
	uint64_t now = base_list_is_empty(&done) ? 0 : base_now_ns();
	while ((node = base_list_pop_head(&done)) != NULL) {
		struct leg *leg = TERN_CONTAINER_OF(node, struct pool_request, link)->owner;
		worker->host.stats.mailed_grants += leg->request.conn != NULL;
		worker_grant(leg, now);
	}
	while ((node = base_list_pop_head(&cancels)) != NULL) {
		struct worker_cancel *cancel = TERN_CONTAINER_OF(node, struct worker_cancel, link);
		worker_apply_cancel(worker, cancel);
		free(cancel);
	}
	while ((node = base_list_pop_head(&lookups)) != NULL)
		session_login_on_lookup(TERN_CONTAINER_OF(node, struct auth_lookup, link));
	while ((node = base_list_pop_head(&adopts)) != NULL) {
		struct worker_adopt *adopt = TERN_CONTAINER_OF(node, struct worker_adopt, link);
		worker_take_client(worker, adopt->fd, adopt->index);
		__atomic_sub_fetch(&worker->incoming, 1, __ATOMIC_RELAXED); /* (counted as a session now) */
		free(adopt);
	}
	while ((node = base_list_pop_head(&jobs)) != NULL)
		worker_job_answer(worker, TERN_CONTAINER_OF(node, struct worker_job_part, link), false);
	while ((node = base_list_pop_head(&jobs_done)) != NULL) {
		struct worker_job *job = TERN_CONTAINER_OF(node, struct worker_job, link);
		job->done(job);
	}
}

/* SIGTERM: no new clients; a session ends (57P01) as soon as it holds no transaction open and no
 * request of it waits for a server (session_is_drainable). The listeners close WORKER_DRAIN_ACCEPT_NS
 * after the drain began: what the kernel queued for them before a rolling restart's steering
 * (listen_steer_away) is accepted, not reset. A session that has not yet finished a transaction of its
 * own (still logging in, welcomed but yet to ask, or accepted after the drain began) is let go at the
 * end of its first one instead, unless it stays silent WORKER_DRAIN_FIRST_ASK_NS once welcomed. */
static void worker_drain(struct worker *worker, uint64_t now_ns)
{
	if (!worker->drain_started_ns) {
		worker->drain_started_ns = now_ns;
		struct base_list *node, *tmp;
		base_list_for_each_safe(node, tmp, &worker->host.sessions)
		{
			struct session *s = TERN_CONTAINER_OF(node, struct session, link);
			s->gate.is_drain_spared = s->phase == SESSION_READY ? s->stats.query_count == 0
									 : s->phase != SESSION_ADMIN;
		}
	}
	bool is_closing = now_ns - worker->drain_started_ns >= WORKER_DRAIN_ACCEPT_NS;
	for (uint32_t i = 0; i < worker->listener_count && is_closing; i++) {
		struct worker_listener *listener = &worker->listeners[i];
		if (listener->fd < 0)
			continue;
		ring_cancel(&worker->host.ring, &listener->accept_op);
		close(listener->fd);
		listener->fd = -1;
	}
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->host.sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->gate.is_drain_spared && s->phase == SESSION_READY && s->stats.query_count == 0 &&
		    now_ns - s->client_active_ns >= WORKER_DRAIN_FIRST_ASK_NS)
			s->gate.is_drain_spared = false; /* welcomed, then silent: not on its way to a transaction */
		if (session_is_drainable(s))
			session_end(s, SESSION_END_SHUTDOWN);
	}
	if (is_closing && base_list_is_empty(&worker->host.sessions) && base_list_is_empty(&worker->host.reaping))
		__atomic_store_n(&worker->is_drained, true, __ATOMIC_RELEASE);
}

/* Copies n uint64_t counters field by field, each store or load atomic. */
static void worker_copy_counters(uint64_t *to, const uint64_t *from, size_t n, bool is_publish)
{
	for (size_t i = 0; i < n; i++) {
		if (is_publish)
			__atomic_store_n(&to[i], from[i], __ATOMIC_RELAXED);
		else
			to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
	}
}

static_assert(sizeof(struct host_stats) % sizeof(uint64_t) == 0, "host_stats is uint64_t fields only");
static_assert(sizeof(struct ring_stats) % sizeof(uint64_t) == 0, "ring_stats is uint64_t fields only");

static void worker_publish_stats(struct worker *worker)
{
	struct host *host = &worker->host;
	if (host->classify_cache) {
		host->stats.classify_hits = host->classify_cache->hits;
		host->stats.classify_misses = host->classify_cache->misses;
	}
	worker_copy_counters((uint64_t *)&worker->published_stats, (const uint64_t *)&host->stats,
			     sizeof(host->stats) / sizeof(uint64_t), true);
	worker_copy_counters((uint64_t *)&worker->published_ring, (const uint64_t *)&host->ring.stats,
			     sizeof(host->ring.stats) / sizeof(uint64_t), true);
}

void worker_read_stats(const struct worker *worker, struct host_stats *stats, struct ring_stats *ring)
{
	worker_copy_counters((uint64_t *)stats, (const uint64_t *)&worker->published_stats,
			     sizeof(*stats) / sizeof(uint64_t), false);
	worker_copy_counters((uint64_t *)ring, (const uint64_t *)&worker->published_ring,
			     sizeof(*ring) / sizeof(uint64_t), false);
}

static void worker_on_tick(struct ring *ring)
{
	struct worker *worker = ring->owner;
	uint64_t now = base_now_ns();
	worker_publish_stats(worker);
	if (worker->host.digests)
		digest_merge(worker->host.runtime->digests, worker->host.digests);
	struct base_list *node, *tmp;
	if (__atomic_load_n(&worker->host.runtime->draining, __ATOMIC_ACQUIRE))
		worker_drain(worker, now);
	if (now >= worker->next_timeout_scan_ns) {
		/* Client timeouts are in whole seconds at best: one scan a second is precise enough. */
		worker->next_timeout_scan_ns = now + BASE_NS_PER_SEC;
		base_list_for_each_safe(node, tmp, &worker->host.sessions)
		{
			struct session *s = TERN_CONTAINER_OF(node, struct session, link);
			session_check_timeouts(s, now);
		}
	}
	uint64_t wait_ns = runtime_config(worker->host.runtime)->query_wait_timeout_ms * BASE_NS_PER_MS;
	if (wait_ns > 0) {
		base_list_for_each_safe(node, tmp, &worker->host.parked)
		{
			struct leg *leg = TERN_CONTAINER_OF(node, struct leg, parked_link);
			if (leg->request.parked_ns + wait_ns > now)
				break; /* parked in order: the rest are younger */
			session_on_wait_timeout(leg);
		}
	}
	base_list_for_each_safe(node, tmp, &worker->host.reaping)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->end.closing_ns + WORKER_LINGER_NS <= now)
			session_linger_expired(s); /* (the client cut already, its servers may still hold it) */
	}
	if (worker->host.pause_waiting_count > 0)
		worker_pause_scan(worker, now);
	worker->host.runtime->parts->host_tick(&worker->host, now); /* routing's and recoveries' timeouts */
	if (worker->host.console_waiting_count > 0)
		worker->host.runtime->console->on_tick(&worker->host);
	if (now >= worker->db_stats.next_period_ns)
		worker_db_stats_period(&worker->db_stats, &worker->host, now);
	for (uint32_t i = 0; i < worker->listener_count; i++) {
		struct worker_listener *listener = &worker->listeners[i];
		if (!listener->accept_op.is_armed && listener->fd >= 0 &&
		    !__atomic_load_n(&worker->host.runtime->stopping, __ATOMIC_RELAXED))
			ring_accept_multishot(&worker->host.ring, &listener->accept_op, listener->fd);
	}
}

/* The end of a loop pass: what the pass queued goes out in one sendmsg per queue, connections
 * released in the pass go back to the pool, ended sessions with nothing in flight are freed. */
static void worker_end_pass(struct worker *worker)
{
	struct tern_runtime *rt = worker->host.runtime;
	if (worker->host.pause_waiting_count > 0 && !__atomic_load_n(&rt->is_paused, __ATOMIC_ACQUIRE))
		worker_pause_scan(worker, base_now_ns()); /* RESUME: before the flush, which sends their bytes */
	struct base_list *node, *tmp;
	while ((node = base_list_pop_head(&worker->host.ending)) != NULL) {
		struct session *s = TERN_CONTAINER_OF(node, struct session, end.link);
		session_end(s, s->end.later_reason);
	}
	base_list_for_each_safe(node, tmp, &worker->host.starved)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, starve.link);
		(void)session_resume_starved(s);
	}
	/* Connections released in the pass go to waiters first; then the mailbox, which holds grants from
	 * this thread's own checkins too (no eventfd write for those): every waiter served in this pass
	 * sends its bytes in this pass's flush, and copies none of them. */
	worker_local_flush(worker);
	worker_on_wake(&worker->host.ring);
	worker_local_flush(worker); /* what a client served just now gave back at once (a welcome, a failure) */
	rt->parts->host_pass(&worker->host); /* reads and recoveries waiting for what the monitor saw */
	while ((node = base_list_pop_head(&worker->host.holds)) != NULL)
		session_hold_now(TERN_CONTAINER_OF(node, struct leg, hold_link));
	while ((node = base_list_pop_head(&worker->host.flush)) != NULL) {
		struct sendq *q = TERN_CONTAINER_OF(node, struct sendq, flush_link);
		q->is_dirty = false;
		sendq_flush(q, &worker->host.ring);
	}
	base_list_for_each_safe(node, tmp, &worker->host.reaping)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (session_is_reapable(s)) {
			worker_db_stats_fold(&worker->db_stats, s);
			session_destroy(s);
		}
	}
	/* PAUSE's acknowledgment, at a pass boundary: every transaction this worker starts after this load
	 * sees is_paused (stored before the generation), and every one it started before has its server
	 * (or its place in the pool's queue) visible to whoever reads this store. */
	uint32_t generation = __atomic_load_n(&rt->pause_generation, __ATOMIC_ACQUIRE);
	if (generation != worker->pause_generation_seen)
		__atomic_store_n(&worker->pause_generation_seen, generation, __ATOMIC_RELEASE);
}

static void worker_pin(struct worker *worker)
{
	if (!runtime_config(worker->host.runtime)->pin_workers)
		return;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus <= 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(worker->host.index % (uint32_t)cpus, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
		TERN_WARN("worker %u: could not pin to CPU %ld", worker->host.index, worker->host.index % cpus);
}

static void worker_report_init(struct worker *worker, int result)
{
	pthread_mutex_lock(&worker->init_lock);
	worker->init_result = result;
	worker->init_done = true;
	pthread_cond_signal(&worker->init_cond);
	pthread_mutex_unlock(&worker->init_lock);
}

static void worker_shutdown_sessions(struct worker *worker)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->host.sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		session_end(s, SESSION_END_SHUTDOWN);
	}
	/* Give goodbyes and resets a bounded time to finish; a client that has its goodbye is cut at once
	 * (tern is leaving: draining what it still sends has no point). Then cut whatever is left, and let
	 * its ops end so every session is freed. */
	uint64_t deadline = base_now_ns() + WORKER_LINGER_NS;
	for (int round = 0; round < 2; round++) {
		while (!base_list_is_empty(&worker->host.reaping) && base_now_ns() < deadline) {
			base_list_for_each_safe(node, tmp, &worker->host.reaping)
			{
				struct session *s = TERN_CONTAINER_OF(node, struct session, link);
				if (s->end.is_client_fin_sent || round > 0)
					session_linger_expired(s);
			}
			worker_end_pass(worker);
			if (base_list_is_empty(&worker->host.reaping) || ring_run_once(&worker->host.ring) < 0)
				break;
		}
		deadline = base_now_ns() + WORKER_LINGER_NS / 4;
	}
}

static_assert((int)RING_BACKEND_AUTO == CONFIG_IO_BACKEND_AUTO &&
		      (int)RING_BACKEND_IO_URING == CONFIG_IO_BACKEND_IO_URING &&
		      (int)RING_BACKEND_EPOLL == CONFIG_IO_BACKEND_EPOLL,
	      "[tern] io_backend's values are ring.h's");
/* The fallback to epoll is logged by the first worker that makes it: every worker meets the same cause. */
static bool worker_fallback_logged;

static void *worker_main(void *arg)
{
	struct worker *worker = arg;
	const struct tern_config *cfg = runtime_config(worker->host.runtime);
	worker_pin(worker);
	struct ring_params params = {
		.entries = cfg->ring_entries,
		.buffer_count = cfg->buffer_count,
		.buffer_size = (uint32_t)cfg->buffer_size,
		.backend = (enum ring_backend)cfg->io_backend,
	};
	int rc = ring_init(&worker->host.ring, &params, worker->init_error, sizeof(worker->init_error));
	if (rc < 0) {
		worker_report_init(worker, rc);
		return NULL;
	}
	bool is_epoll = worker->host.ring.backend == RING_BACKEND_EPOLL;
	if (is_epoll && params.backend == RING_BACKEND_AUTO &&
	    !__atomic_exchange_n(&worker_fallback_logged, true, __ATOMIC_RELAXED))
		TERN_WARN("io_uring is unavailable, so the workers use epoll ([tern] io_backend = auto): %s",
			  worker->init_error);
	worker->init_error[0] = '\0';
	/* Other threads wake the worker through its own descriptor for the ring's eventfd: main may wake a
	 * worker whose ring is already gone at exit, and must never write to a reused descriptor. */
	worker->wake_fd = dup(worker->host.ring.event_fd);
	if (worker->wake_fd < 0) {
		int saved = errno;
		snprintf(worker->init_error, sizeof(worker->init_error), "worker %u: dup: %s", worker->host.index,
			 strerror(saved));
		ring_deinit(&worker->host.ring);
		worker_report_init(worker, -saved);
		return NULL;
	}
	worker->host.ring.owner = worker;
	worker->host.ring.on_wake = worker_on_wake;
	worker->host.ring.on_tick = worker_on_tick;
	ring_tick_start(&worker->host.ring, (uint64_t)WORKER_TICK_MS * BASE_NS_PER_MS);
	worker->db_stats.next_period_ns = base_now_ns() + WORKER_STATS_PERIOD_S * BASE_NS_PER_SEC;
	for (uint32_t i = 0; i < worker->listener_count; i++) {
		worker->listeners[i].accept_op.handler = worker_on_accept;
		ring_accept_multishot(&worker->host.ring, &worker->listeners[i].accept_op, worker->listeners[i].fd);
	}
	TERN_INFO("worker %u: %s%s%s, %u buffers of %u bytes", worker->host.index, is_epoll ? "" : "io_uring ",
		  worker->host.ring.setup_mode, worker->host.ring.is_fd_registered ? ", registered ring fd" : "",
		  params.buffer_count, params.buffer_size);
	worker_report_init(worker, 0);
	while (!__atomic_load_n(&worker->host.runtime->stopping, __ATOMIC_ACQUIRE)) {
		rc = ring_run_once(&worker->host.ring);
		if (rc < 0) {
			TERN_ERROR("worker %u: %s failed: %s", worker->host.index, is_epoll ? "epoll_wait" : "io_uring_enter",
				   strerror(-rc));
			break;
		}
		worker_end_pass(worker);
	}
	__atomic_store_n(&worker->is_gone, true, __ATOMIC_RELEASE); /* what is handed to it still is closed at deinit */
	for (uint32_t i = 0; i < worker->listener_count; i++)
		ring_cancel(&worker->host.ring, &worker->listeners[i].accept_op);
	worker_shutdown_sessions(worker);
	host_local_flush(&worker->host); /* nobody waits any more: straight back to the pool */
	ring_deinit(&worker->host.ring);
	return NULL;
}

/* A parked request was granted or failed, on any thread: the session hears of it on its own. */
static void worker_request_done(struct host *host, struct pool_request *req)
{
	struct worker *worker = worker_of(host);
	worker_mail(worker, &worker->mailbox, &req->link);
}

static void worker_lookup_done(struct auth_lookup *lookup)
{
	struct worker *worker = worker_of(lookup->done_ctx);
	worker_mail(worker, &worker->lookups, &lookup->link);
}

static const struct host_ops worker_host_ops = {
	.request_done = worker_request_done,
	.route_cancel = worker_route_cancel,
	.lookup_done = worker_lookup_done,
};

int worker_start(struct worker *worker, struct tern_runtime *runtime, uint32_t index, const int *listen_fds,
		 uint32_t listen_count, char *err, size_t err_size)
{
	TERN_ASSERT(listen_count > 0 && listen_count <= LISTEN_SOCKETS_MAX);
	memset(worker, 0, sizeof(*worker));
	host_init(&worker->host, index, runtime, &worker_host_ops);
	for (uint32_t i = 0; i < listen_count; i++)
		worker->listeners[i] = (struct worker_listener){.fd = listen_fds[i], .worker = worker};
	worker->listener_count = listen_count;
	worker->wake_fd = -1;
	base_list_init(&worker->mailbox);
	base_list_init(&worker->cancels);
	base_list_init(&worker->lookups);
	base_list_init(&worker->adopts);
	base_list_init(&worker->jobs);
	base_list_init(&worker->jobs_done);
	pthread_mutex_init(&worker->mailbox_lock, NULL);
	pthread_mutex_init(&worker->init_lock, NULL);
	pthread_cond_init(&worker->init_cond, NULL);
	int rc = pthread_create(&worker->thread, NULL, worker_main, worker);
	if (rc != 0) {
		snprintf(err, err_size, "could not start worker thread %u: %s", index, strerror(rc));
		return -rc;
	}
	pthread_mutex_lock(&worker->init_lock);
	while (!worker->init_done)
		pthread_cond_wait(&worker->init_cond, &worker->init_lock);
	pthread_mutex_unlock(&worker->init_lock);
	if (worker->init_result < 0) {
		snprintf(err, err_size, "%s", worker->init_error);
		pthread_join(worker->thread, NULL);
		return worker->init_result;
	}
	return 0;
}

void worker_mail(struct worker *worker, struct base_list *list, struct base_list *link)
{
	pthread_mutex_lock(&worker->mailbox_lock);
	bool was_empty = __atomic_load_n(&worker->mailbox_count, __ATOMIC_RELAXED) == 0;
	base_list_insert_tail(list, link);
	__atomic_add_fetch(&worker->mailbox_count, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&worker->mailbox_lock);
	/* The worker reads its mailbox at the end of every pass, and a wake is on its way for anything
	 * posted before: only the first post to an empty mailbox from another thread needs one. */
	if (was_empty && !pthread_equal(pthread_self(), worker->thread))
		worker_wake(worker);
}

void worker_wake(struct worker *worker)
{
	uint64_t one = 1;
	ssize_t n = write(worker->wake_fd, &one, sizeof(one));
	(void)n; /* EAGAIN: the counter is non-zero, the worker is being woken anyway */
}

void worker_stop(struct worker *worker) { worker_wake(worker); }

void worker_topology_changed(struct tern_runtime *rt)
{
	uint32_t count = __atomic_load_n(&rt->worker_count, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < count; i++) {
		struct host *host = &rt->workers[i]->host;
		if (__atomic_load_n(&host->route_waiting, __ATOMIC_RELAXED) > 0 ||
		    __atomic_load_n(&host->recover_waiting, __ATOMIC_RELAXED) > 0 ||
		    __atomic_load_n(&host->recover_primary, __ATOMIC_RELAXED) != runtime_primary(rt))
			worker_wake(rt->workers[i]);
	}
}

bool worker_is_drained(struct worker *worker) { return __atomic_load_n(&worker->is_drained, __ATOMIC_ACQUIRE); }

void worker_join(struct worker *worker) { pthread_join(worker->thread, NULL); }

void worker_deinit(struct worker *worker)
{
	struct base_list *node;
	while ((node = base_list_pop_head(&worker->adopts)) != NULL) { /* handed over as it stopped */
		struct worker_adopt *adopt = TERN_CONTAINER_OF(node, struct worker_adopt, link);
		close(adopt->fd);
		free(adopt);
	}
	if (worker->wake_fd >= 0)
		close(worker->wake_fd);
	worker->wake_fd = -1;
	worker_db_stats_deinit(&worker->db_stats);
	free(worker->host.classify_cache);
	worker->host.classify_cache = NULL;
	free(worker->host.digests);
	worker->host.digests = NULL;
	pthread_mutex_destroy(&worker->mailbox_lock);
	pthread_mutex_destroy(&worker->init_lock);
	pthread_cond_destroy(&worker->init_cond);
}
