/* The ring of ring.h on io_uring (the strongest setup the kernel takes; else each call goes to ring_epoll.c):
 * submissions, the completion loop, the tick, the wake-up eventfd and the receive buffers. See ring.h. */
#include "ring.h"

#include "buf_ring_compat.h"
#include "ring_internal.h"

#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static_assert(IORING_CQE_F_BUFFER == RING_FLAG_BUFFER && IORING_CQE_F_MORE == RING_FLAG_MORE &&
		      IORING_CQE_BUFFER_SHIFT == RING_FLAG_BUFFER_SHIFT,
	      "the epoll backend's completion flags are io_uring's");

static struct io_uring *ring_uring(struct ring *ring) { return ring->uring; }

static int ring_read_sysctl(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int value = -1;
	if (fscanf(f, "%d", &value) != 1)
		value = -1;
	fclose(f);
	return value;
}

static void ring_explain_failure(int rc, char *why, size_t why_size)
{
	int disabled = ring_read_sysctl("/proc/sys/kernel/io_uring_disabled");
	if (disabled == 2)
		snprintf(why, why_size,
			 "io_uring is disabled by sysctl kernel.io_uring_disabled=2; allow it with "
			 "`sysctl -w kernel.io_uring_disabled=0`");
	else if (disabled == 1 && rc == -EPERM)
		snprintf(why, why_size,
			 "io_uring is restricted by sysctl kernel.io_uring_disabled=1 to the group in "
			 "kernel.io_uring_group; run tern in that group or set kernel.io_uring_disabled=0");
	else if (rc == -EPERM || rc == -ENOSYS)
		snprintf(why, why_size,
			 "io_uring_setup was refused (%s): a seccomp profile (Docker's default, for one) blocks "
			 "io_uring; allow io_uring_setup, io_uring_enter and io_uring_register in the profile "
			 "(e.g. docker run --security-opt seccomp=<profile>)",
			 strerror(-rc));
	else
		snprintf(why, why_size, "io_uring could not be set up: %s", strerror(-rc));
}

/* The strongest setup the kernel accepts: one issuer with deferred task work runs completions only
 * when this thread asks, which is what a thread-per-core loop wants. */
static int ring_setup(struct io_uring *uring, unsigned entries, const char **mode)
{
	static const struct {
		unsigned flags;
		const char *name;
	} tries[] = {
		{IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, "SINGLE_ISSUER|DEFER_TASKRUN"},
		{IORING_SETUP_COOP_TASKRUN, "COOP_TASKRUN"},
		{0, "plain"},
	};
	int rc = -EINVAL;
	for (size_t i = 0; i < TERN_ARRAY_LEN(tries); i++) {
		struct io_uring_params params;
		memset(&params, 0, sizeof(params));
		params.flags = tries[i].flags | IORING_SETUP_SUBMIT_ALL;
		rc = io_uring_queue_init_params(entries, uring, &params);
		if (rc == 0) {
			*mode = tries[i].name;
			return 0;
		}
		if (rc != -EINVAL)
			return rc;
	}
	return rc;
}

/* What both backends share: the receive buffers (touched) and the wake-up eventfd. */
static int ring_init_common(struct ring *ring, const struct ring_params *params, char *why, size_t why_size)
{
	TERN_ASSERT((size_t)params->buffer_count * RING_BUFFER_GROUPS <= RING_NO_BUFFER);
	ring->buf_count = params->buffer_count;
	ring->buf_size = params->buffer_size;
	size_t total = (size_t)ring->buf_count * RING_BUFFER_GROUPS;
	ring->buf_base = aligned_alloc(4096, total * ring->buf_size);
	ring->buf_refs = calloc(total, sizeof(*ring->buf_refs));
	if (!ring->buf_base || !ring->buf_refs) {
		snprintf(why, why_size, "out of memory for %zu receive buffers of %u bytes", total, ring->buf_size);
		return -ENOMEM;
	}
	/* Touched now, not by the kernel's first receive into each: the ring hands buffers out in turn, so
	 * every one is in use after a few hundred receives anyway. Memory is then what it will be under load
	 * from the start, and no page fault lands on the data path. */
	memset(ring->buf_base, 0, total * ring->buf_size);
	ring->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ring->event_fd < 0) {
		int rc = -errno;
		snprintf(why, why_size, "eventfd: %s", strerror(errno));
		return rc;
	}
	return 0;
}

static int ring_init_uring(struct ring *ring, const struct ring_params *params, char *why, size_t why_size)
{
	struct io_uring *uring = calloc(1, sizeof(*uring));
	if (!uring) {
		snprintf(why, why_size, "out of memory");
		return -ENOMEM;
	}
	int rc = ring_setup(uring, params->entries, &ring->setup_mode);
	if (rc < 0) {
		free(uring);
		ring_explain_failure(rc, why, why_size);
		return rc;
	}
	ring->uring = uring;
	/* io_uring_enter by registered index: the worker's thread skips the file-table lookup and reference
	 * on every enter (kernel 5.18+; without it the plain fd is used). */
	ring->is_fd_registered = io_uring_register_ring_fd(uring) == 1;
	rc = ring_init_common(ring, params, why, why_size);
	if (rc < 0) {
		ring_deinit(ring);
		return rc;
	}
	int mask = io_uring_buf_ring_mask(ring->buf_count);
	for (uint32_t g = 0; g < RING_BUFFER_GROUPS; g++) {
		struct io_uring_buf_ring *br = ring_compat_setup_buf_ring(uring, ring->buf_count, (int)g, &rc);
		if (!br) {
			snprintf(why, why_size,
				 "could not register the provided-buffer ring (kernel 5.19+ needed): %s", strerror(-rc));
			ring_deinit(ring);
			return rc;
		}
		ring->groups[g].buf_ring = br;
		for (uint32_t i = 0; i < ring->buf_count; i++)
			io_uring_buf_ring_add(br, ring_buffer_data(ring, (uint16_t)(g * ring->buf_count + i)),
					      ring->buf_size, (unsigned short)i, mask, (int)i);
		io_uring_buf_ring_advance(br, (int)ring->buf_count);
	}
	return 0;
}

int ring_init(struct ring *ring, const struct ring_params *params, char *why, size_t why_size)
{
	TERN_ASSERT(params->buffer_count > 0 && params->buffer_count <= RING_BUFFER_COUNT_MAX);
	TERN_ASSERT((params->buffer_count & (params->buffer_count - 1)) == 0);
	TERN_ASSERT(params->buffer_size > 0 && params->buffer_size <= RING_BUFFER_SIZE_MAX); /* (config's 1MB) */
	memset(ring, 0, sizeof(*ring));
	ring->event_fd = -1;
	if (params->backend != RING_BACKEND_EPOLL) {
		ring->backend = RING_BACKEND_IO_URING;
		int rc = ring_init_uring(ring, params, why, why_size);
		if (rc == 0 || params->backend == RING_BACKEND_IO_URING)
			return rc;
		/* `why` keeps what blocked io_uring, for the caller's one log line; epoll's own failure replaces it.
		 * A failed ring_init_uring left the ring as memset above (ring_deinit resets it too). */
	}
	ring->backend = RING_BACKEND_EPOLL;
	ring->setup_mode = "epoll";
	int rc = ring_init_common(ring, params, why, why_size);
	if (rc == 0)
		rc = ring_epoll_init(ring, params->entries, why, why_size);
	if (rc < 0)
		ring_deinit(ring);
	return rc;
}

void ring_deinit(struct ring *ring)
{
	struct io_uring *uring = ring_uring(ring);
	if (uring) {
		for (uint32_t g = 0; g < RING_BUFFER_GROUPS; g++)
			if (ring->groups[g].buf_ring)
				ring_compat_free_buf_ring(uring, ring->groups[g].buf_ring, ring->buf_count, (int)g);
		io_uring_queue_exit(uring);
		free(uring);
	}
	if (ring->epoll)
		ring_epoll_deinit(ring);
	if (ring->event_fd >= 0)
		close(ring->event_fd);
	free(ring->buf_base);
	free(ring->buf_refs);
	memset(ring, 0, sizeof(*ring));
	ring->event_fd = -1;
}

static struct io_uring_sqe *ring_get_sqe(struct ring *ring)
{
	struct io_uring *uring = ring_uring(ring);
	struct io_uring_sqe *sqe = io_uring_get_sqe(uring);
	while (!sqe) {
		/* The submission queue is full: hand what is queued to the kernel and take a slot. The kernel's
		 * own shortage (EBUSY, EAGAIN, ENOMEM: completions it holds, memory) passes: try again, after a
		 * millisecond for memory. EBADR says it dropped a completion under memory pressure: logged once,
		 * then on (that op never completes: its owner is never freed, a leak the log line names). Any other
		 * error is tern's misuse of its own ring (EBADF, EFAULT, EINVAL, ENXIO): no peer's bytes reach it. */
		int rc = io_uring_submit(uring);
		if (rc == -ENOMEM)
			(void)nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
		else if (rc == -EBADR && !ring->is_drop_logged) {
			ring->is_drop_logged = true;
			TERN_ERROR("io_uring dropped completions (the kernel is out of memory): some connections may hang "
				   "until their timeouts");
		}
		TERN_ASSERT(rc >= 0 || rc == -EBUSY || rc == -EAGAIN || rc == -EINTR || rc == -ENOMEM || rc == -EBADR);
		sqe = io_uring_get_sqe(uring);
	}
	ring->stats.submissions++;
	return sqe;
}

static void ring_arm(struct ring_op *op, struct io_uring_sqe *sqe)
{
	TERN_ASSERT(!op->is_armed);
	TERN_ASSERT(op->handler != NULL);
	op->is_armed = true;
	io_uring_sqe_set_data(sqe, op);
}

void ring_accept_multishot(struct ring *ring, struct ring_op *op, int listen_fd)
{
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_accept(ring, op, listen_fd);
		return;
	}
	struct io_uring_sqe *sqe = ring_get_sqe(ring);
	io_uring_prep_multishot_accept(sqe, listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	ring_arm(op, sqe);
}

void ring_recv_multishot(struct ring *ring, struct ring_op *op, int fd, uint8_t buffer_group)
{
	TERN_ASSERT(buffer_group < RING_BUFFER_GROUPS);
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_recv(ring, op, fd, buffer_group, true);
		return;
	}
	struct io_uring_sqe *sqe = ring_get_sqe(ring);
	io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = buffer_group;
	op->buffer_group = buffer_group;
	ring_arm(op, sqe);
}

void ring_recv(struct ring *ring, struct ring_op *op, int fd, uint8_t buffer_group)
{
	TERN_ASSERT(buffer_group < RING_BUFFER_GROUPS);
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_recv(ring, op, fd, buffer_group, false);
		return;
	}
	struct io_uring_sqe *sqe = ring_get_sqe(ring);
	io_uring_prep_recv(sqe, fd, NULL, ring->buf_size, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = buffer_group;
	op->buffer_group = buffer_group;
	ring_arm(op, sqe);
}

void ring_sendmsg(struct ring *ring, struct ring_op *op, int fd, const struct msghdr *msg)
{
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_send(ring, op, fd, NULL, 0, msg);
		return;
	}
	struct io_uring_sqe *sqe = ring_get_sqe(ring);
	io_uring_prep_sendmsg(sqe, fd, msg, MSG_NOSIGNAL);
	ring_arm(op, sqe);
}

void ring_send(struct ring *ring, struct ring_op *op, int fd, const void *data, size_t len)
{
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_send(ring, op, fd, data, len, NULL);
		return;
	}
	struct io_uring_sqe *sqe = ring_get_sqe(ring);
	io_uring_prep_send(sqe, fd, data, len, MSG_NOSIGNAL);
	ring_arm(op, sqe);
}

void ring_cancel(struct ring *ring, struct ring_op *target)
{
	if (!target->is_armed)
		return;
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_cancel(ring, target);
		return;
	}
	struct io_uring_sqe *sqe = ring_get_sqe(ring);
	io_uring_prep_cancel(sqe, target, 0);
	io_uring_sqe_set_data(sqe, NULL); /* the cancel's own completion is ignored */
}

void ring_submit(struct ring *ring)
{
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL))
		return; /* epoll: every op was tried or registered when it was armed */
	(void)io_uring_submit(ring_uring(ring));
}

static void ring_event_arm(struct ring *ring)
{
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_read(ring, &ring->event_op, ring->event_fd, &ring->event_value, sizeof(ring->event_value));
		return;
	}
	struct io_uring_sqe *sqe = ring_get_sqe(ring);
	io_uring_prep_read(sqe, ring->event_fd, &ring->event_value, sizeof(ring->event_value), 0);
	ring_arm(&ring->event_op, sqe);
}

static void ring_event_done(struct ring_op *op, int res, uint32_t flags)
{
	(void)res;
	(void)flags;
	struct ring *ring = TERN_CONTAINER_OF(op, struct ring, event_op);
	ring_event_arm(ring);
	if (ring->on_wake)
		ring->on_wake(ring);
}

void ring_wake(struct ring *ring)
{
	uint64_t one = 1;
	ssize_t n = write(ring->event_fd, &one, sizeof(one));
	(void)n; /* EAGAIN means the counter is already non-zero: the ring is being woken anyway */
}

static void ring_tick_arm(struct ring *ring)
{
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_timeout(ring, &ring->tick_op, ring->tick_ns);
		return;
	}
	struct io_uring_sqe *sqe = ring_get_sqe(ring);
	ring->tick_ts.tv_sec = (int64_t)(ring->tick_ns / BASE_NS_PER_SEC);
	ring->tick_ts.tv_nsec = (long long)(ring->tick_ns % BASE_NS_PER_SEC);
	io_uring_prep_timeout(sqe, &ring->tick_ts, 0, 0);
	ring_arm(&ring->tick_op, sqe);
}

static void ring_tick_done(struct ring_op *op, int res, uint32_t flags)
{
	(void)res;
	(void)flags;
	struct ring *ring = TERN_CONTAINER_OF(op, struct ring, tick_op);
	ring_tick_arm(ring);
	if (ring->on_tick)
		ring->on_tick(ring);
}

void ring_tick_start(struct ring *ring, uint64_t interval_ns)
{
	TERN_ASSERT(interval_ns > 0);
	ring->tick_ns = interval_ns;
	ring->tick_op.handler = ring_tick_done;
	ring->event_op.handler = ring_event_done;
	ring_tick_arm(ring);
	ring_event_arm(ring);
}

void ring_buffer_take(struct ring *ring, uint16_t buffer_id)
{
	ring_buffer_mark_out(ring, buffer_id);
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL))
		ring_epoll_buffer_taken(ring, buffer_id);
}

void ring_buffer_ref(struct ring *ring, uint16_t buffer_id)
{
	TERN_DEBUG_ASSERT(buffer_id < ring->buf_count * RING_BUFFER_GROUPS);
	TERN_ASSERT(ring->buf_refs[buffer_id] > 0 && ring->buf_refs[buffer_id] < RING_BUFFER_REFS_MAX); /* ring.h */
	ring->buf_refs[buffer_id]++;
}

void ring_buffer_unref(struct ring *ring, uint16_t buffer_id)
{
	TERN_DEBUG_ASSERT(buffer_id < ring->buf_count * RING_BUFFER_GROUPS);
	TERN_ASSERT(ring->buf_refs[buffer_id] > 0);
	if (--ring->buf_refs[buffer_id] > 0)
		return;
	struct ring_buffer_group *group = &ring->groups[buffer_id / ring->buf_count];
	TERN_ASSERT(group->out > 0);
	group->out--;
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL)) {
		ring_epoll_buffer_returned(ring, buffer_id);
		return;
	}
	io_uring_buf_ring_add(group->buf_ring, ring_buffer_data(ring, buffer_id), ring->buf_size,
			      (unsigned short)(buffer_id % ring->buf_count), io_uring_buf_ring_mask(ring->buf_count),
			      (int)group->pending_return);
	group->pending_return++;
}

static void ring_return_buffers(struct ring *ring)
{
	for (uint32_t g = 0; g < RING_BUFFER_GROUPS; g++) {
		struct ring_buffer_group *group = &ring->groups[g];
		if (group->pending_return == 0)
			continue;
		io_uring_buf_ring_advance(group->buf_ring, (int)group->pending_return);
		group->pending_return = 0;
	}
}

int ring_run_once(struct ring *ring)
{
	if (TERN_UNLIKELY(ring->backend == RING_BACKEND_EPOLL))
		return ring_epoll_run_once(ring);
	struct io_uring *uring = ring_uring(ring);
	int rc = io_uring_submit_and_wait(uring, 1);
	ring->stats.passes++;
	if (rc == -ENOMEM)
		(void)nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL); /* (as in ring_get_sqe) */
	if (rc == -EBADR && !ring->is_drop_logged) {
		ring->is_drop_logged = true;
		TERN_ERROR("io_uring dropped completions (the kernel is out of memory): some connections may hang");
	}
	if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME && rc != -EBADR && rc != -ENOMEM)
		return rc;
	unsigned handled = 0;
	struct io_uring_cqe *cqe;
	while (handled < RING_COMPLETIONS_PER_PASS_MAX && io_uring_peek_cqe(uring, &cqe) == 0) {
		struct ring_op *op = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		uint32_t flags = cqe->flags;
		io_uring_cqe_seen(uring, cqe);
		handled++;
		if (flags & IORING_CQE_F_BUFFER) {
			/* The kernel names the buffer within its group; handlers get the ring-wide id. */
			uint32_t index = flags >> IORING_CQE_BUFFER_SHIFT;
			TERN_ASSERT(op && index < ring->buf_count);
			uint16_t bid = (uint16_t)(op->buffer_group * ring->buf_count + index);
			ring_buffer_mark_out(ring, bid);
			flags = (flags & ((1u << IORING_CQE_BUFFER_SHIFT) - 1)) | ((uint32_t)bid << IORING_CQE_BUFFER_SHIFT);
		}
		if (res == -ENOBUFS)
			ring->stats.enobufs++;
		if (!op)
			continue;
		if (!(flags & IORING_CQE_F_MORE))
			op->is_armed = false;
		op->handler(op, res, flags);
		/* Buffers released by handlers go back before the next completion may need one. */
		ring_return_buffers(ring);
	}
	ring->stats.completions += handled;
	ring_return_buffers(ring);
	return 0;
}
