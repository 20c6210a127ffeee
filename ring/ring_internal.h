/*
 * ring_internal.h — private to ring/ (tests/unit/test_layout.c keeps it so): what ring.c and its epoll
 * backend, ring_epoll.c, share. The epoll backend serves ring.h where io_uring cannot be set up; ring.c
 * calls these from its public functions when ring->backend is RING_BACKEND_EPOLL, so the callers see one
 * interface. The backend emulates completions: an op waits on its descriptor's readiness
 * (level-triggered, registered only while some op waits on it), its results go to a queue, and
 * ring_epoll_run_once runs the handlers from that queue with the same (res, flags) an io_uring completion
 * would carry: ring-wide buffer ids in flags >> 16, the buffer and more bits, -ENOBUFS, -ECANCELED.
 * Threads and ownership as ring.h says; memory named in an op (data, msghdr, iovecs) is read only until
 * its final result is queued, which is no earlier than io_uring would let it go.
 * Never: names liburing (ring_epoll.c includes only this and ring_state.h), PostgreSQL, TLS or sessions.
 */
#ifndef TERN_RING_INTERNAL_H
#define TERN_RING_INTERNAL_H

#include "base.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct ring;
struct ring_op;

/* Completions handled per pass (both backends); bounds the pass's latency. */
#define RING_COMPLETIONS_PER_PASS_MAX 256u
/* The completion flags ring.h decodes, as io_uring sets them (ring.c asserts they agree with liburing). */
#define RING_FLAG_BUFFER 1u
#define RING_FLAG_MORE 2u
#define RING_FLAG_BUFFER_SHIFT 16u

/* Sets up the epoll instance, the tick's timerfd and the buffer free lists of a ring whose buffers and
 * eventfd ring.c made. 0 or -errno with `why` set. */
TERN_MUST_USE int ring_epoll_init(struct ring *ring, uint32_t entries, char *why, size_t why_size);
void ring_epoll_deinit(struct ring *ring);
TERN_MUST_USE int ring_epoll_run_once(struct ring *ring);

void ring_epoll_accept(struct ring *ring, struct ring_op *op, int listen_fd);
void ring_epoll_recv(struct ring *ring, struct ring_op *op, int fd, uint8_t buffer_group, bool is_multishot);
/* One of data/len or msg. */
void ring_epoll_send(struct ring *ring, struct ring_op *op, int fd, const void *data, size_t len,
		     const struct msghdr *msg);
/* A plain read of `len` bytes into `dst` (the wake-up eventfd). */
void ring_epoll_read(struct ring *ring, struct ring_op *op, int fd, void *dst, size_t len);
/* Completes `op` with -ETIME after interval_ns (the tick; one at a time). */
void ring_epoll_timeout(struct ring *ring, struct ring_op *op, uint64_t interval_ns);
void ring_epoll_cancel(struct ring *ring, struct ring_op *target);

/* The free lists follow ring_buffer_take and ring_buffer_unref's last reference. */
void ring_epoll_buffer_taken(struct ring *ring, uint16_t buffer_id);
void ring_epoll_buffer_returned(struct ring *ring, uint16_t buffer_id);

#endif
