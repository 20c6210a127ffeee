/* The epoll backend (ring_internal.h): io_uring's completions emulated with readiness. An armed op becomes a
 * waiter chained on its descriptor (readers: accept, receives, reads, the tick; writers: sends). A send is
 * tried at once and waits only when the socket is full; the others wait for readiness. The descriptor is
 * in the epoll set, level-triggered, exactly while some waiter is chained on it: a descriptor that goes
 * back to the pool, to another worker, or is closed by its owner after its last op ended is never left
 * behind in this worker's set. What an op yields goes to the results queue; ring_epoll_run_once runs the
 * handlers from it, never from inside an arm or a cancel, so a handler may arm and cancel as it likes. */
#include "ring_internal.h"
#include "ring_state.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* Readiness events taken per epoll_wait; the rest stay ready (level-triggered) for the next pass. */
#define RING_EPOLL_EVENTS_MAX 256u
/* Receives (or accepts) one op makes per readiness: a fast peer cannot hold the pass, and what it left
 * is reported ready again at the next epoll_wait. */
#define RING_EPOLL_READS_PER_READY_MAX 16u
/* Tables start this big and double (waiters: ops waiting at once; descriptors: by fd number). */
#define RING_EPOLL_TABLE_MIN 64u
#define RING_EPOLL_NO_WAITER UINT32_MAX

enum ring_epoll_kind {
	RING_EPOLL_ACCEPT,
	RING_EPOLL_RECV,
	RING_EPOLL_RECV_MULTISHOT,
	RING_EPOLL_READ,
	RING_EPOLL_TIMEOUT,
	RING_EPOLL_SEND, /* writers from here on */
	RING_EPOLL_SENDMSG,
};

/* An armed op waiting for its descriptor, chained per descriptor and direction by index: the table grows
 * by realloc, so nothing holds a waiter's address across an arm. */
struct ring_epoll_waiter {
	struct ring_op *op;
	int fd;
	uint8_t kind;
	uint32_t prev, next; /* next also chains the free waiters */
	const void *data;    /* send */
	void *dst;           /* read */
	size_t len;
	const struct msghdr *msg;
};

struct ring_epoll_fd {
	uint32_t readers, writers; /* chains of waiters */
	uint32_t events;           /* what the epoll set holds for it; 0 = not in the set */
};

struct ring_epoll_result {
	struct ring_op *op;
	int res;
	uint32_t flags;
};

struct ring_epoll {
	int epoll_fd;
	int timer_fd;
	struct ring_epoll_waiter *waiters;
	uint32_t waiter_cap, waiter_free;
	struct ring_epoll_fd *fds; /* by fd number */
	uint32_t fd_cap;
	struct ring_epoll_result *results; /* circular, in the order the ops yielded them; capacity a power of two */
	uint32_t result_head, result_count, result_cap;
	/* The provided buffers: per group a stack of free ids (group g's from g * buf_count), and where each
	 * free id sits in it, so ring_buffer_take can take any id as a test standing in for a completion does. */
	uint16_t *free_ids;
	uint32_t *free_pos;
	uint32_t free_count[RING_BUFFER_GROUPS];
	struct epoll_event events[RING_EPOLL_EVENTS_MAX];
};

static struct ring_epoll *ring_epoll_of(struct ring *ring) { return ring->epoll; }

static bool ring_epoll_is_writer(uint8_t kind) { return kind >= RING_EPOLL_SEND; }

/* A bigger table, or the same one a millisecond later: memory short for a few dozen bytes passes, as
 * ring.c waits out the kernel's ENOMEM. */
static void *ring_epoll_resize(void *items, size_t size, uint32_t cap)
{
	for (;;) {
		void *grown = realloc(items, (size_t)cap * size);
		if (grown)
			return grown;
		(void)nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
}

static uint32_t ring_epoll_grown_cap(uint32_t cap, uint32_t needed)
{
	uint32_t next = cap ? cap : RING_EPOLL_TABLE_MIN;
	while (next < needed)
		next *= 2;
	return next;
}

static struct ring_epoll_fd *ring_epoll_fd_entry(struct ring_epoll *ep, int fd)
{
	TERN_ASSERT(fd >= 0);
	if ((uint32_t)fd >= ep->fd_cap) {
		uint32_t old = ep->fd_cap;
		uint32_t cap = ring_epoll_grown_cap(old, (uint32_t)fd + 1);
		ep->fds = ring_epoll_resize(ep->fds, sizeof(*ep->fds), cap);
		for (uint32_t i = old; i < cap; i++)
			ep->fds[i] = (struct ring_epoll_fd){.readers = RING_EPOLL_NO_WAITER, .writers = RING_EPOLL_NO_WAITER};
		ep->fd_cap = cap;
	}
	return &ep->fds[fd];
}

static uint32_t *ring_epoll_chain(struct ring_epoll *ep, int fd, uint8_t kind)
{
	struct ring_epoll_fd *entry = &ep->fds[fd];
	return ring_epoll_is_writer(kind) ? &entry->writers : &entry->readers;
}

static void ring_epoll_post(struct ring_epoll *ep, struct ring_op *op, int res, uint32_t flags)
{
	if (ep->result_count == ep->result_cap) {
		/* Unwrapped into a table twice the size. */
		uint32_t cap = ep->result_cap * 2;
		struct ring_epoll_result *grown = ring_epoll_resize(NULL, sizeof(*grown), cap);
		for (uint32_t i = 0; i < ep->result_count; i++)
			grown[i] = ep->results[(ep->result_head + i) & (ep->result_cap - 1)];
		free(ep->results);
		ep->results = grown;
		ep->result_head = 0;
		ep->result_cap = cap;
	}
	ep->results[(ep->result_head + ep->result_count) & (ep->result_cap - 1)] =
		(struct ring_epoll_result){.op = op, .res = res, .flags = flags};
	ep->result_count++;
}

/* Brings the epoll set in line with the waiters chained on `fd`. A descriptor the set refuses fails its
 * waiters with that error, as io_uring would fail the ops themselves. */
static void ring_epoll_fd_sync(struct ring_epoll *ep, int fd);

static uint32_t ring_epoll_arm(struct ring *ring, struct ring_op *op, int fd, uint8_t kind)
{
	TERN_ASSERT(!op->is_armed);
	TERN_ASSERT(op->handler != NULL);
	struct ring_epoll *ep = ring_epoll_of(ring);
	(void)ring_epoll_fd_entry(ep, fd);
	if (ep->waiter_free == RING_EPOLL_NO_WAITER) {
		uint32_t old = ep->waiter_cap;
		uint32_t cap = ring_epoll_grown_cap(old, old + 1);
		ep->waiters = ring_epoll_resize(ep->waiters, sizeof(*ep->waiters), cap);
		for (uint32_t i = cap; i-- > old;) {
			ep->waiters[i].next = ep->waiter_free;
			ep->waiter_free = i;
		}
		ep->waiter_cap = cap;
	}
	uint32_t w = ep->waiter_free;
	ep->waiter_free = ep->waiters[w].next;
	ep->waiters[w] = (struct ring_epoll_waiter){
		.op = op, .fd = fd, .kind = kind, .prev = RING_EPOLL_NO_WAITER, .next = RING_EPOLL_NO_WAITER};
	op->is_armed = true;
	op->waiter = w;
	ring->stats.submissions++;
	return w;
}

static void ring_epoll_wait_on(struct ring_epoll *ep, uint32_t w)
{
	struct ring_epoll_waiter *waiter = &ep->waiters[w];
	uint32_t *head = ring_epoll_chain(ep, waiter->fd, waiter->kind);
	waiter->next = *head;
	if (*head != RING_EPOLL_NO_WAITER)
		ep->waiters[*head].prev = w;
	*head = w;
	ring_epoll_fd_sync(ep, waiter->fd);
}

/* The op's final result: queued, and the waiter unchained and freed (the caller syncs its descriptor). */
static void ring_epoll_finish(struct ring_epoll *ep, uint32_t w, int res, uint32_t flags)
{
	struct ring_epoll_waiter *waiter = &ep->waiters[w];
	uint32_t *head = ring_epoll_chain(ep, waiter->fd, waiter->kind);
	if (waiter->prev != RING_EPOLL_NO_WAITER)
		ep->waiters[waiter->prev].next = waiter->next;
	else if (*head == w)
		*head = waiter->next;
	if (waiter->next != RING_EPOLL_NO_WAITER)
		ep->waiters[waiter->next].prev = waiter->prev;
	ring_epoll_post(ep, waiter->op, res, flags);
	waiter->op->waiter = RING_EPOLL_NO_WAITER;
	waiter->op = NULL;
	waiter->next = ep->waiter_free;
	ep->waiter_free = w;
}

static void ring_epoll_fd_sync(struct ring_epoll *ep, int fd)
{
	struct ring_epoll_fd *entry = &ep->fds[fd];
	uint32_t want = (entry->readers != RING_EPOLL_NO_WAITER ? (uint32_t)EPOLLIN : 0) |
			(entry->writers != RING_EPOLL_NO_WAITER ? (uint32_t)EPOLLOUT : 0);
	if (want == entry->events)
		return;
	struct epoll_event event = {.events = want, .data.fd = fd};
	int rc;
	if (want == 0) {
		/* (ENOENT or EBADF: the set let it go already) */
		(void)epoll_ctl(ep->epoll_fd, EPOLL_CTL_DEL, fd, NULL);
		entry->events = 0;
		return;
	}
	if (entry->events == 0) {
		rc = epoll_ctl(ep->epoll_fd, EPOLL_CTL_ADD, fd, &event);
		if (rc < 0 && errno == EEXIST)
			rc = epoll_ctl(ep->epoll_fd, EPOLL_CTL_MOD, fd, &event);
	} else {
		rc = epoll_ctl(ep->epoll_fd, EPOLL_CTL_MOD, fd, &event);
		if (rc < 0 && errno == ENOENT)
			rc = epoll_ctl(ep->epoll_fd, EPOLL_CTL_ADD, fd, &event);
	}
	if (rc == 0) {
		entry->events = want;
		return;
	}
	int err = errno;
	entry->events = 0;
	while (entry->readers != RING_EPOLL_NO_WAITER)
		ring_epoll_finish(ep, entry->readers, -err, 0);
	while (entry->writers != RING_EPOLL_NO_WAITER)
		ring_epoll_finish(ep, entry->writers, -err, 0);
}

/* ---- what each kind of op does when its descriptor is ready: true when its final result is queued ---- */

static bool ring_epoll_try_recv(struct ring *ring, struct ring_epoll *ep, uint32_t w)
{
	const struct ring_epoll_waiter *waiter = &ep->waiters[w];
	struct ring_op *op = waiter->op;
	uint8_t group = op->buffer_group;
	for (uint32_t i = 0; i < RING_EPOLL_READS_PER_READY_MAX; i++) {
		if (ep->free_count[group] == 0) {
			ring_epoll_finish(ep, w, -ENOBUFS, 0); /* the caller re-arms once buffers are back */
			return true;
		}
		uint16_t bid = ep->free_ids[group * ring->buf_count + ep->free_count[group] - 1];
		ssize_t n = recv(waiter->fd, ring_buffer_data(ring, bid), ring->buf_size, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return false;
		if (n <= 0) {
			ring_epoll_finish(ep, w, n == 0 ? 0 : -errno, 0);
			return true;
		}
		ring_buffer_mark_out(ring, bid);
		ring_epoll_buffer_taken(ring, bid);
		uint32_t flags = RING_FLAG_BUFFER | ((uint32_t)bid << RING_FLAG_BUFFER_SHIFT);
		if (waiter->kind == RING_EPOLL_RECV) {
			ring_epoll_finish(ep, w, (int)n, flags);
			return true;
		}
		ring_epoll_post(ep, op, (int)n, flags | RING_FLAG_MORE);
		if ((size_t)n < ring->buf_size)
			return false; /* a stream's short read: nothing more is queued, no EAGAIN to learn it */
	}
	return false;
}

static bool ring_epoll_try_accept(struct ring_epoll *ep, uint32_t w)
{
	const struct ring_epoll_waiter *waiter = &ep->waiters[w];
	for (uint32_t i = 0; i < RING_EPOLL_READS_PER_READY_MAX; i++) {
		int fd = accept4(waiter->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			ring_epoll_post(ep, waiter->op, fd, RING_FLAG_MORE);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue; /* (a client gone before its accept: the next one) */
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return false;
		ring_epoll_finish(ep, w, -errno, 0); /* out of descriptors: the caller decides when to re-arm */
		return true;
	}
	return false;
}

static bool ring_epoll_try_io(struct ring_epoll *ep, uint32_t w)
{
	const struct ring_epoll_waiter *waiter = &ep->waiters[w];
	for (;;) {
		ssize_t n;
		uint64_t expirations;
		switch (waiter->kind) {
		case RING_EPOLL_SEND:
			n = send(waiter->fd, waiter->data, waiter->len, MSG_NOSIGNAL | MSG_DONTWAIT);
			break;
		case RING_EPOLL_SENDMSG:
			n = sendmsg(waiter->fd, waiter->msg, MSG_NOSIGNAL | MSG_DONTWAIT);
			break;
		case RING_EPOLL_READ:
			n = read(waiter->fd, waiter->dst, waiter->len);
			break;
		default:
			TERN_ASSERT(waiter->kind == RING_EPOLL_TIMEOUT);
			n = read(waiter->fd, &expirations, sizeof(expirations));
			if (n == (ssize_t)sizeof(expirations)) {
				ring_epoll_finish(ep, w, -ETIME, 0); /* as an io_uring timeout that expired */
				return true;
			}
			break;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return false;
		/* A send's count may be short of what was asked: the caller sends the rest, as after io_uring's. */
		ring_epoll_finish(ep, w, n < 0 ? -errno : (int)n, 0);
		return true;
	}
}

static bool ring_epoll_try(struct ring *ring, struct ring_epoll *ep, uint32_t w)
{
	switch (ep->waiters[w].kind) {
	case RING_EPOLL_ACCEPT:
		return ring_epoll_try_accept(ep, w);
	case RING_EPOLL_RECV:
	case RING_EPOLL_RECV_MULTISHOT:
		return ring_epoll_try_recv(ring, ep, w);
	default:
		return ring_epoll_try_io(ep, w);
	}
}

static void ring_epoll_try_chain(struct ring *ring, struct ring_epoll *ep, int fd, bool is_writers)
{
	struct ring_epoll_fd *entry = &ep->fds[fd];
	uint32_t w = is_writers ? entry->writers : entry->readers;
	while (w != RING_EPOLL_NO_WAITER) {
		uint32_t next = ep->waiters[w].next; /* (trying frees at most w itself) */
		(void)ring_epoll_try(ring, ep, w);
		w = next;
	}
}

/* ---- ring.h's functions on this backend ---- */

void ring_epoll_accept(struct ring *ring, struct ring_op *op, int listen_fd)
{
	/* Non-blocking: workers' duplicates of one Unix listener are all told of a client only one gets, and
	 * a losing accept4 must say EAGAIN, not wait. (io_uring polls such a socket just the same.) */
	int fl = fcntl(listen_fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		(void)fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK);
	ring_epoll_wait_on(ring_epoll_of(ring), ring_epoll_arm(ring, op, listen_fd, RING_EPOLL_ACCEPT));
}

void ring_epoll_recv(struct ring *ring, struct ring_op *op, int fd, uint8_t buffer_group, bool is_multishot)
{
	op->buffer_group = buffer_group;
	/* Straight to waiting: a level-triggered set reports bytes already there at the next epoll_wait. */
	uint32_t w = ring_epoll_arm(ring, op, fd, is_multishot ? RING_EPOLL_RECV_MULTISHOT : RING_EPOLL_RECV);
	ring_epoll_wait_on(ring_epoll_of(ring), w);
}

void ring_epoll_send(struct ring *ring, struct ring_op *op, int fd, const void *data, size_t len,
		     const struct msghdr *msg)
{
	struct ring_epoll *ep = ring_epoll_of(ring);
	uint32_t w = ring_epoll_arm(ring, op, fd, msg ? RING_EPOLL_SENDMSG : RING_EPOLL_SEND);
	ep->waiters[w].data = data;
	ep->waiters[w].len = len;
	ep->waiters[w].msg = msg;
	/* Tried at once: a socket with room takes it without a trip through the epoll set. */
	if (!ring_epoll_try_io(ep, w))
		ring_epoll_wait_on(ep, w);
}

void ring_epoll_read(struct ring *ring, struct ring_op *op, int fd, void *dst, size_t len)
{
	struct ring_epoll *ep = ring_epoll_of(ring);
	uint32_t w = ring_epoll_arm(ring, op, fd, RING_EPOLL_READ);
	ep->waiters[w].dst = dst;
	ep->waiters[w].len = len;
	ring_epoll_wait_on(ep, w);
}

void ring_epoll_timeout(struct ring *ring, struct ring_op *op, uint64_t interval_ns)
{
	TERN_ASSERT(interval_ns > 0);
	struct ring_epoll *ep = ring_epoll_of(ring);
	struct itimerspec when = {.it_value = {.tv_sec = (time_t)(interval_ns / BASE_NS_PER_SEC),
					      .tv_nsec = (long)(interval_ns % BASE_NS_PER_SEC)}};
	int rc = timerfd_settime(ep->timer_fd, 0, &when, NULL);
	TERN_ASSERT(rc == 0); /* (a valid timerfd and a valid time: nothing a peer can change) */
	ring_epoll_wait_on(ep, ring_epoll_arm(ring, op, ep->timer_fd, RING_EPOLL_TIMEOUT));
}

void ring_epoll_cancel(struct ring *ring, struct ring_op *target)
{
	struct ring_epoll *ep = ring_epoll_of(ring);
	uint32_t w = target->waiter;
	if (w == RING_EPOLL_NO_WAITER)
		return; /* its final result is queued: it arrives as it is, as after a cancel that came too late */
	TERN_ASSERT(w < ep->waiter_cap && ep->waiters[w].op == target);
	int fd = ep->waiters[w].fd;
	ring_epoll_finish(ep, w, -ECANCELED, 0);
	ring_epoll_fd_sync(ep, fd);
}

int ring_epoll_run_once(struct ring *ring)
{
	struct ring_epoll *ep = ring_epoll_of(ring);
	/* Results still queued (a pass stops at RING_COMPLETIONS_PER_PASS_MAX): look, but do not wait. */
	int n = epoll_wait(ep->epoll_fd, ep->events, (int)RING_EPOLL_EVENTS_MAX, ep->result_count > 0 ? 0 : -1);
	ring->stats.passes++;
	if (n < 0) {
		if (errno != EINTR)
			return -errno;
		n = 0;
	}
	for (int i = 0; i < n; i++) {
		int fd = ep->events[i].data.fd;
		uint32_t events = ep->events[i].events;
		TERN_ASSERT(fd >= 0 && (uint32_t)fd < ep->fd_cap);
		/* An error or hang-up wakes both directions: each op learns it from its own call. */
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
			ring_epoll_try_chain(ring, ep, fd, true);
		if (events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))
			ring_epoll_try_chain(ring, ep, fd, false);
		ring_epoll_fd_sync(ep, fd);
	}
	unsigned handled = 0;
	while (handled < RING_COMPLETIONS_PER_PASS_MAX && ep->result_count > 0) {
		struct ring_epoll_result r = ep->results[ep->result_head]; /* a copy: handlers may grow the queue */
		ep->result_head = (ep->result_head + 1) & (ep->result_cap - 1);
		ep->result_count--;
		handled++;
		if (r.res == -ENOBUFS)
			ring->stats.enobufs++;
		if (!(r.flags & RING_FLAG_MORE))
			r.op->is_armed = false;
		r.op->handler(r.op, r.res, r.flags);
	}
	ring->stats.completions += handled;
	return 0;
}

/* ---- the provided buffers ---- */

void ring_epoll_buffer_taken(struct ring *ring, uint16_t buffer_id)
{
	struct ring_epoll *ep = ring_epoll_of(ring);
	uint32_t group = buffer_id / ring->buf_count;
	uint16_t *stack = ep->free_ids + (size_t)group * ring->buf_count;
	uint32_t pos = ep->free_pos[buffer_id];
	TERN_ASSERT(pos < ep->free_count[group] && stack[pos] == buffer_id);
	uint16_t last = stack[--ep->free_count[group]];
	stack[pos] = last;
	ep->free_pos[last] = pos;
	ep->free_pos[buffer_id] = UINT32_MAX;
	TERN_DEBUG_ASSERT(ep->free_count[group] == ring_buffers_free(ring, (uint8_t)group));
}

void ring_epoll_buffer_returned(struct ring *ring, uint16_t buffer_id)
{
	struct ring_epoll *ep = ring_epoll_of(ring);
	uint32_t group = buffer_id / ring->buf_count;
	TERN_ASSERT(ep->free_pos[buffer_id] == UINT32_MAX && ep->free_count[group] < ring->buf_count);
	uint32_t pos = ep->free_count[group]++;
	ep->free_ids[(size_t)group * ring->buf_count + pos] = buffer_id;
	ep->free_pos[buffer_id] = pos;
	TERN_DEBUG_ASSERT(ep->free_count[group] == ring_buffers_free(ring, (uint8_t)group));
}

/* ---- setup ---- */

int ring_epoll_init(struct ring *ring, uint32_t entries, char *why, size_t why_size)
{
	struct ring_epoll *ep = calloc(1, sizeof(*ep));
	if (!ep) {
		snprintf(why, why_size, "out of memory");
		return -ENOMEM;
	}
	ring->epoll = ep;
	ep->epoll_fd = ep->timer_fd = -1;
	ep->waiter_free = RING_EPOLL_NO_WAITER;
	size_t total = (size_t)ring->buf_count * RING_BUFFER_GROUPS;
	ep->free_ids = malloc(total * sizeof(*ep->free_ids));
	ep->free_pos = malloc(total * sizeof(*ep->free_pos));
	/* As deep as io_uring's completion queue would be; it doubles past that. */
	ep->result_cap = ring_epoll_grown_cap(RING_EPOLL_TABLE_MIN, 2 * entries);
	ep->results = malloc((size_t)ep->result_cap * sizeof(*ep->results));
	if (!ep->free_ids || !ep->free_pos || !ep->results) {
		snprintf(why, why_size, "out of memory for the epoll backend's tables");
		return -ENOMEM;
	}
	ep->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (ep->epoll_fd < 0) {
		int rc = -errno;
		snprintf(why, why_size, "epoll_create1: %s", strerror(errno));
		return rc;
	}
	ep->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (ep->timer_fd < 0) {
		int rc = -errno;
		snprintf(why, why_size, "timerfd_create: %s", strerror(errno));
		return rc;
	}
	/* Each group's stack holds its ids with the group's first on top, as io_uring's ring hands them. */
	for (uint32_t g = 0; g < RING_BUFFER_GROUPS; g++) {
		for (uint32_t pos = 0; pos < ring->buf_count; pos++) {
			uint16_t id = (uint16_t)(g * ring->buf_count + (ring->buf_count - 1 - pos));
			ep->free_ids[g * ring->buf_count + pos] = id;
			ep->free_pos[id] = pos;
		}
		ep->free_count[g] = ring->buf_count;
	}
	return 0;
}

void ring_epoll_deinit(struct ring *ring)
{
	struct ring_epoll *ep = ring_epoll_of(ring);
	if (ep->epoll_fd >= 0)
		close(ep->epoll_fd);
	if (ep->timer_fd >= 0)
		close(ep->timer_fd);
	free(ep->waiters);
	free(ep->fds);
	free(ep->results);
	free(ep->free_ids);
	free(ep->free_pos);
	free(ep);
	ring->epoll = NULL;
}
