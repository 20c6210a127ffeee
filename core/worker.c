#include "worker.h"

#include "pool/opener.h"
#include "session.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* How long an ended session may take to get its goodbye to the client before the socket is cut. */
#define WORKER_LINGER_NS (2 * BASE_NS_PER_SEC)

struct pool_conn *worker_local_take(struct worker *worker, const struct pool_db *db)
{
	for (uint32_t i = worker->local_count; i-- > 0;) {
		struct pool_conn *conn = worker->local_cache[i];
		if (conn->db == db) {
			worker->local_cache[i] = worker->local_cache[--worker->local_count];
			return conn;
		}
	}
	return NULL;
}

void worker_local_put(struct worker *worker, struct pool_conn *conn)
{
	if (worker->local_count == WORKER_LOCAL_CACHE_MAX) {
		pool_checkin(worker->runtime->pool, conn, base_now_ns());
		return;
	}
	worker->local_cache[worker->local_count++] = conn;
}

static void worker_local_flush(struct worker *worker)
{
	if (worker->local_count == 0)
		return;
	uint64_t now = base_now_ns();
	for (uint32_t i = 0; i < worker->local_count; i++)
		pool_checkin(worker->runtime->pool, worker->local_cache[i], now);
	worker->local_count = 0;
}

static void worker_on_accept(struct ring_op *op, int res, uint32_t flags)
{
	(void)flags;
	struct worker *worker = TERN_CONTAINER_OF(op, struct worker, accept_op);
	if (res >= 0) {
		int one = 1;
		setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		worker->stats.accepted++;
		if (__atomic_load_n(&worker->runtime->stopping, __ATOMIC_RELAXED) ||
		    __atomic_load_n(&worker->runtime->draining, __ATOMIC_RELAXED) || !session_create(worker, res))
			close(res);
	} else if (res != -ECANCELED) {
		/* Out of descriptors or memory: retrying at once would spin; the tick re-arms. */
		TERN_WARN("worker %u: accept failed: %s", worker->index, strerror(-res));
		return;
	}
	if (!op->is_armed && worker->listen_fd >= 0 && !__atomic_load_n(&worker->runtime->stopping, __ATOMIC_RELAXED))
		ring_accept_multishot(&worker->ring, op, worker->listen_fd);
}

struct worker_cancel {
	struct base_list link;
	uint32_t pid;
	uint32_t secret;
};

void worker_route_cancel(struct tern_runtime *runtime, uint32_t pid, uint32_t secret)
{
	uint32_t index = pid >> 24;
	if (index >= runtime->worker_count)
		return; /* not a key tern gave out */
	struct worker *target = runtime->workers[index];
	struct worker_cancel *cancel = malloc(sizeof(*cancel));
	if (!cancel)
		return; /* a cancel is best effort, as in PostgreSQL */
	cancel->pid = pid;
	cancel->secret = secret;
	pthread_mutex_lock(&target->mailbox_lock);
	base_list_insert_tail(&target->cancels, &cancel->link);
	__atomic_add_fetch(&target->mailbox_count, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&target->mailbox_lock);
	if (!pthread_equal(pthread_self(), target->thread))
		ring_wake(&target->ring);
}

/* Cancels the running query of the session the key names, if the secret matches. A session with no
 * query on a server (idle, or still waiting for one) is left alone. */
static void worker_apply_cancel(struct worker *worker, const struct worker_cancel *cancel)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->key_pid != cancel->pid)
			continue;
		/* Compared without an early exit, so timing does not reveal how much of a guess was right. */
		if ((s->key_secret ^ cancel->secret) != 0 || !s->backend || s->pending_ready == 0)
			return;
		TERN_DEBUG("cancel for client %#x: server pid %u, %u queries pending", cancel->pid,
			   s->backend->backend_pid, s->pending_ready);
		if (pool_opener_cancel(worker->runtime->opener, s->backend) == 0)
			worker->stats.cancels_sent++;
		return;
	}
}

static void worker_on_wake(struct ring *ring)
{
	struct worker *worker = ring->owner;
	if (__atomic_load_n(&worker->mailbox_count, __ATOMIC_ACQUIRE) == 0)
		return;
	struct base_list done, cancels;
	base_list_init(&done);
	base_list_init(&cancels);
	pthread_mutex_lock(&worker->mailbox_lock);
	base_list_splice_tail(&done, &worker->mailbox);
	base_list_splice_tail(&cancels, &worker->cancels);
	__atomic_store_n(&worker->mailbox_count, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&worker->mailbox_lock);
	struct base_list *node;
	while ((node = base_list_pop_head(&done)) != NULL) {
		struct pool_request *req = TERN_CONTAINER_OF(node, struct pool_request, link);
		session_on_request_done(req->owner);
	}
	while ((node = base_list_pop_head(&cancels)) != NULL) {
		struct worker_cancel *cancel = TERN_CONTAINER_OF(node, struct worker_cancel, link);
		worker_apply_cancel(worker, cancel);
		free(cancel);
	}
}

/* SIGTERM: no new clients; a session ends (57P01) as soon as it holds no transaction open. */
static void worker_drain(struct worker *worker)
{
	if (worker->listen_fd >= 0) {
		ring_cancel(&worker->ring, &worker->accept_op);
		close(worker->listen_fd);
		worker->listen_fd = -1;
	}
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (!session_is_in_transaction(s))
			session_end(s, SESSION_END_SHUTDOWN);
	}
	if (base_list_is_empty(&worker->sessions) && base_list_is_empty(&worker->reaping))
		__atomic_store_n(&worker->is_drained, true, __ATOMIC_RELEASE);
}

static void worker_on_tick(struct ring *ring)
{
	struct worker *worker = ring->owner;
	uint64_t now = base_now_ns();
	struct base_list *node, *tmp;
	if (__atomic_load_n(&worker->runtime->draining, __ATOMIC_ACQUIRE))
		worker_drain(worker);
	if (now >= worker->next_timeout_scan_ns) {
		/* Client timeouts are in whole seconds at best: one scan a second is precise enough. */
		worker->next_timeout_scan_ns = now + BASE_NS_PER_SEC;
		base_list_for_each_safe(node, tmp, &worker->sessions)
		{
			struct session *s = TERN_CONTAINER_OF(node, struct session, link);
			session_check_timeouts(s, now);
		}
	}
	uint64_t wait_ns = worker->runtime->config->query_wait_timeout_ms * BASE_NS_PER_MS;
	if (wait_ns > 0) {
		base_list_for_each_safe(node, tmp, &worker->parked)
		{
			struct session *s = TERN_CONTAINER_OF(node, struct session, parked_link);
			if (s->request.parked_ns + wait_ns > now)
				break; /* parked in order: the rest are younger */
			session_on_wait_timeout(s);
		}
	}
	base_list_for_each_safe(node, tmp, &worker->reaping)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->closing_ns + WORKER_LINGER_NS <= now && !s->client_eof)
			session_linger_expired(s);
	}
	if (!worker->accept_op.is_armed && worker->listen_fd >= 0 &&
	    !__atomic_load_n(&worker->runtime->stopping, __ATOMIC_RELAXED))
		ring_accept_multishot(&worker->ring, &worker->accept_op, worker->listen_fd);
}

/* The end of a loop pass: what the pass queued goes out in one sendmsg per queue, connections
 * released in the pass go back to the pool, ended sessions with nothing in flight are freed. */
static void worker_end_pass(struct worker *worker)
{
	/* Mailbox deliveries from this thread's own checkins (no eventfd write for those). */
	worker_on_wake(&worker->ring);
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &worker->starved)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, starved_link);
		(void)session_resume_starved(s);
	}
	while ((node = base_list_pop_head(&worker->flush)) != NULL) {
		struct sendq *q = TERN_CONTAINER_OF(node, struct sendq, flush_link);
		q->is_dirty = false;
		sendq_flush(q, &worker->ring);
	}
	worker_local_flush(worker);
	base_list_for_each_safe(node, tmp, &worker->reaping)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (session_is_reapable(s))
			session_destroy(s);
	}
}

static void worker_pin(struct worker *worker)
{
	if (!worker->runtime->config->pin_workers)
		return;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus <= 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(worker->index % (uint32_t)cpus, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
		TERN_WARN("worker %u: could not pin to CPU %ld", worker->index, worker->index % cpus);
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
	base_list_for_each_safe(node, tmp, &worker->sessions)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		session_end(s, SESSION_END_SHUTDOWN);
	}
	/* Give goodbyes and resets a bounded time to finish, then leave the rest to the kernel. */
	uint64_t deadline = base_now_ns() + WORKER_LINGER_NS;
	while (!base_list_is_empty(&worker->reaping) && base_now_ns() < deadline) {
		worker_end_pass(worker);
		if (base_list_is_empty(&worker->reaping) || ring_run_once(&worker->ring) < 0)
			break;
	}
}

static void *worker_main(void *arg)
{
	struct worker *worker = arg;
	const struct tern_config *cfg = worker->runtime->config;
	worker_pin(worker);
	struct ring_params params = {
		.entries = cfg->ring_entries,
		.buffer_count = cfg->buffer_count,
		.buffer_size = (uint32_t)cfg->buffer_size,
	};
	int rc = ring_init(&worker->ring, &params, worker->init_error, sizeof(worker->init_error));
	if (rc < 0) {
		worker_report_init(worker, rc);
		return NULL;
	}
	worker->ring.owner = worker;
	worker->ring.on_wake = worker_on_wake;
	worker->ring.on_tick = worker_on_tick;
	ring_tick_start(&worker->ring, (uint64_t)WORKER_TICK_MS * BASE_NS_PER_MS);
	worker->accept_op.handler = worker_on_accept;
	ring_accept_multishot(&worker->ring, &worker->accept_op, worker->listen_fd);
	TERN_INFO("worker %u: io_uring %s, %u buffers of %u bytes", worker->index, worker->ring.setup_mode,
		  params.buffer_count, params.buffer_size);
	worker_report_init(worker, 0);
	while (!__atomic_load_n(&worker->runtime->stopping, __ATOMIC_ACQUIRE)) {
		rc = ring_run_once(&worker->ring);
		if (rc < 0) {
			TERN_ERROR("worker %u: io_uring_enter failed: %s", worker->index, strerror(-rc));
			break;
		}
		worker_end_pass(worker);
	}
	ring_cancel(&worker->ring, &worker->accept_op);
	worker_shutdown_sessions(worker);
	worker_local_flush(worker);
	ring_deinit(&worker->ring);
	return NULL;
}

int worker_start(struct worker *worker, struct tern_runtime *runtime, uint32_t index, int listen_fd, char *err,
		 size_t err_size)
{
	memset(worker, 0, sizeof(*worker));
	worker->index = index;
	worker->runtime = runtime;
	worker->listen_fd = listen_fd;
	base_list_init(&worker->sessions);
	base_list_init(&worker->parked);
	base_list_init(&worker->flush);
	base_list_init(&worker->reaping);
	base_list_init(&worker->starved);
	base_list_init(&worker->mailbox);
	base_list_init(&worker->cancels);
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

void worker_stop(struct worker *worker) { ring_wake(&worker->ring); }

bool worker_is_drained(struct worker *worker) { return __atomic_load_n(&worker->is_drained, __ATOMIC_ACQUIRE); }

void worker_join(struct worker *worker)
{
	pthread_join(worker->thread, NULL);
	pthread_mutex_destroy(&worker->mailbox_lock);
	pthread_mutex_destroy(&worker->init_lock);
	pthread_cond_destroy(&worker->init_cond);
}
