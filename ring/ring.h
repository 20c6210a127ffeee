/*
 * ring.h — the io_uring runtime of one worker thread: submissions, completions, a provided-buffer
 * ring for receives, reference-counted receive buffers, an eventfd other threads write to wake the
 * worker, and a periodic tick. Where io_uring cannot be set up, the same interface runs on epoll
 * (ring_epoll.c), which emulates the completions: the callers see the same handlers, flags and buffers.
 *
 * Threads: a struct ring is created, used and destroyed by exactly one thread (the ring is set up
 * SINGLE_ISSUER where the kernel allows). The only cross-thread entry point is ring_wake().
 * Ownership: every asynchronous operation is a struct ring_op embedded in its owner; the op's
 * address is the submission's user_data. Memory named in a submission (iovecs, msghdr) belongs to
 * the kernel until the op's final completion — one whose flags lack IORING_CQE_F_MORE. An owner
 * may be freed only when none of its ops is armed.
 * Never: knows PostgreSQL, TLS or sessions.
 */
#ifndef TERN_RING_H
#define TERN_RING_H

#include "ring_state.h"

#include <sys/socket.h>

/* 0 or -errno. On failure `why` holds one line telling the operator what blocked io_uring (or epoll).
 * With RING_BACKEND_AUTO, a ring that fell back to epoll returns 0 with ring->backend EPOLL and `why`
 * naming what blocked io_uring, for the caller to log once. */
TERN_MUST_USE int ring_init(struct ring *ring, const struct ring_params *params, char *why, size_t why_size);
void ring_deinit(struct ring *ring);

/* The loop: waits for at least one completion, runs the handlers of every completion that is ready,
 * returns buffers to the kernel. Returns 0 or -errno from io_uring_enter. */
TERN_MUST_USE int ring_run_once(struct ring *ring);
/* Calls ring->on_tick every interval_ns from inside ring_run_once. */
void ring_tick_start(struct ring *ring, uint64_t interval_ns);
/* Thread-safe: wakes the ring's thread; ring->on_wake runs on it. */
void ring_wake(struct ring *ring);

/* Submissions. Each arms `op` and must not be called while `op` is armed. */
void ring_accept_multishot(struct ring *ring, struct ring_op *op, int listen_fd);
void ring_recv_multishot(struct ring *ring, struct ring_op *op, int fd, uint8_t buffer_group);
void ring_recv(struct ring *ring, struct ring_op *op, int fd, uint8_t buffer_group);
void ring_sendmsg(struct ring *ring, struct ring_op *op, int fd, const struct msghdr *msg);
/* One contiguous range: the kernel copies no msghdr and imports no iovec (a sendq's common case). */
void ring_send(struct ring *ring, struct ring_op *op, int fd, const void *data, size_t len);
/* Asks the kernel to end `target` early; its final completion still arrives. No-op when unarmed.
 * (epoll: a waiting op ends with -ECANCELED at once; results already queued arrive first.) */
void ring_cancel(struct ring *ring, struct ring_op *target);
/* Pushes queued submissions to the kernel without waiting. */
void ring_submit(struct ring *ring);

/* Receive buffers (ring_state.h decodes a completion's buffer): every reference is dropped exactly once
 * with ring_buffer_unref. */
void ring_buffer_ref(struct ring *ring, uint16_t buffer_id);
void ring_buffer_unref(struct ring *ring, uint16_t buffer_id);
/* Marks a buffer as handed out, as a completion does; for tests that stand in for the kernel. */
void ring_buffer_take(struct ring *ring, uint16_t buffer_id);

#endif
