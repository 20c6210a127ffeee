/*
 * ring_state.h — the state of one worker's ring that both backends keep (ring.c on io_uring,
 * ring_epoll.c on epoll): the op embedded in its owner, the receive buffers and their accounting, the
 * counters. ring.h is the interface the rest of tern calls; this is what it and the backends share, so
 * the epoll backend needs nothing of ring.c.
 *
 * Threads and ownership: as ring.h says.
 * Never: names liburing (the struct io_uring hides behind ring->uring), PostgreSQL, TLS or sessions.
 */
#ifndef TERN_RING_STATE_H
#define TERN_RING_STATE_H

#include "base.h"

#include <linux/time_types.h>
#include <stdint.h>

struct ring;
struct ring_op;

/* res is the completion's result (bytes, fd, or -errno); flags are the completion's flags. */
typedef void (*ring_op_handler)(struct ring_op *op, int res, uint32_t flags);

struct ring_op {
	ring_op_handler handler;
	bool is_armed;        /* a submission is in flight and its final completion has not arrived */
	uint8_t buffer_group; /* for receives: the group its buffers come from */
	uint32_t waiter;      /* epoll backend only: its waiting record, or none once its final result is queued */
};

/* Which kernel interface a ring runs on. AUTO is io_uring where the kernel lets tern set it up, else
 * epoll; IO_URING fails ring_init when io_uring cannot be set up. */
enum ring_backend { RING_BACKEND_AUTO = 0, RING_BACKEND_IO_URING, RING_BACKEND_EPOLL };

struct ring_params {
	uint32_t entries;
	uint32_t buffer_count; /* per group; a power of two */
	uint32_t buffer_size;
	enum ring_backend backend;
};

/* Receive buffers come in separate groups so one kind of reader can never take the buffers another
 * needs to make progress (the owner decides what each group is for). */
#define RING_BUFFER_GROUPS 2u
/* Hard bounds: buffer ids, across all groups, are 16 bits in a completion. A reference is a send slice
 * of at least one byte of the buffer (slices of one buffer that touch merge), and a buffer holds at most
 * RING_BUFFER_SIZE_MAX bytes: its references stay far below 32 bits, whatever a peer sends. */
#define RING_BUFFER_COUNT_MAX 32768u
static_assert(RING_BUFFER_COUNT_MAX * RING_BUFFER_GROUPS <= 65536u, "buffer ids fit 16 bits");
#define RING_BUFFER_SIZE_MAX (1u << 20)
#define RING_BUFFER_REFS_MAX UINT32_MAX
static_assert(RING_BUFFER_SIZE_MAX < RING_BUFFER_REFS_MAX, "a buffer's references fit");

struct ring_stats {
	uint64_t passes; /* ring_run_once calls: one io_uring_enter each (epoll: one epoll_wait), which waits */
	uint64_t completions;
	uint64_t submissions;
	uint64_t enobufs; /* receives that ended because the buffer ring was empty */
};

struct ring_buffer_group {
	void *buf_ring;
	uint32_t out; /* buffers handed out by completions and not yet returned */
	uint32_t pending_return;
};

struct ring {
	void *uring; /* struct io_uring, private to ring.c */
	uint8_t *buf_base;
	uint32_t *buf_refs; /* by buffer id: group * buf_count + index in the group */
	bool is_drop_logged; /* the kernel's dropped completions were logged (ring_get_sqe) */
	uint8_t backend;     /* RING_BACKEND_IO_URING or RING_BACKEND_EPOLL, set by ring_init */
	uint32_t buf_count; /* per group */
	uint32_t buf_size;
	struct ring_buffer_group groups[RING_BUFFER_GROUPS];
	int event_fd;
	uint64_t event_value;
	struct ring_op event_op;
	struct ring_op tick_op;
	uint64_t tick_ns;
	struct __kernel_timespec tick_ts;
	void (*on_tick)(struct ring *ring);
	void (*on_wake)(struct ring *ring);
	void *owner;
	const char *setup_mode; /* which setup flags the kernel took (or "epoll"), for the startup log */
	struct ring_stats stats;
	bool is_fd_registered; /* the ring's own fd is registered (io_uring_register_ring_fd) */
	void *epoll;           /* struct ring_epoll, private to ring_epoll.c; NULL on io_uring */
};

/* Not a receive buffer (ring-wide ids stay below it: RING_BUFFER_GROUPS * buffer_count <= 65535). */
#define RING_NO_BUFFER UINT16_MAX
/* Receive buffers. A completion with IORING_CQE_F_BUFFER hands its buffer to the handler with one
 * reference; every reference is dropped exactly once with ring_buffer_unref. The id in the handler's
 * flags is ring-wide (group * buf_count + index), so it alone names the buffer. */
static inline bool ring_completion_has_buffer(uint32_t flags) { return (flags & 1u) != 0; }
static inline uint16_t ring_completion_buffer_id(uint32_t flags) { return (uint16_t)(flags >> 16); }
static inline bool ring_completion_has_more(uint32_t flags) { return (flags & 2u) != 0; }
static inline uint8_t *ring_buffer_data(struct ring *ring, uint16_t buffer_id)
{
	TERN_DEBUG_ASSERT(buffer_id < ring->buf_count * RING_BUFFER_GROUPS);
	return ring->buf_base + (size_t)buffer_id * ring->buf_size;
}
static inline uint32_t ring_buffers_free(const struct ring *ring, uint8_t group)
{
	return ring->buf_count - ring->groups[group].out;
}
/* A buffer a completion hands out: one reference, counted out of its group (the backends' accounting;
 * ring_buffer_take also tells the epoll backend's free list). */
static inline void ring_buffer_mark_out(struct ring *ring, uint16_t buffer_id)
{
	TERN_ASSERT(buffer_id < ring->buf_count * RING_BUFFER_GROUPS && ring->buf_refs[buffer_id] == 0);
	ring->buf_refs[buffer_id] = 1;
	ring->groups[buffer_id / ring->buf_count].out++;
}

#endif
