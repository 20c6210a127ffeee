/*
 * test_ring_epoll.c — the epoll backend behind ring.h, driven as core drives io_uring: multishot and
 * single receives into provided buffers (ids, references, `out`), EOF, -ENOBUFS when a group runs dry
 * and a re-arm once buffers are back, send and sendmsg (a short count for a send larger than the socket
 * takes; a send that waits for room), a cancel's final completion (from a handler too), a multishot
 * accept, a wake from another thread and the tick. Real AF_UNIX socketpairs and a loopback listener on
 * a port the kernel picks; every wait is ring_run_once under a deadline, never a sleep.
 */
#include "ring/ring.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TEST_BUFFER_COUNT 16u
#define TEST_BUFFER_SIZE 4096u /* (ring_init takes whole pages) */
#define TEST_DEADLINE_NS (5 * BASE_NS_PER_SEC)
#define TEST_COMPLETIONS_MAX 256u
#define TEST_LARGE_SEND (8u * 1024u * 1024u)

struct completion {
	struct ring_op *op;
	int res;
	uint32_t flags;
};

struct fixture {
	struct ring ring;
	int fds[2]; /* [0] the ring's end, [1] the peer the test writes and reads directly */
	struct completion seen[TEST_COMPLETIONS_MAX];
	uint32_t seen_count;
	bool is_buffer_kept; /* handlers keep buffers (their references) instead of dropping them */
	struct ring_op *cancel_from_handler;
	uint32_t ticks, wakes;
};

static struct fixture fx;

static void on_done(struct ring_op *op, int res, uint32_t flags)
{
	cr_assert_lt(fx.seen_count, TEST_COMPLETIONS_MAX);
	fx.seen[fx.seen_count++] = (struct completion){.op = op, .res = res, .flags = flags};
	if (ring_completion_has_buffer(flags) && !fx.is_buffer_kept)
		ring_buffer_unref(&fx.ring, ring_completion_buffer_id(flags));
	if (fx.cancel_from_handler) {
		ring_cancel(&fx.ring, fx.cancel_from_handler);
		fx.cancel_from_handler = NULL;
	}
}

static void on_tick(struct ring *ring)
{
	(void)ring;
	fx.ticks++;
}

static void on_wake(struct ring *ring)
{
	(void)ring;
	fx.wakes++;
}

static void setup(void)
{
	memset(&fx, 0, sizeof(fx));
	struct ring_params params = {.entries = 64,
				     .buffer_count = TEST_BUFFER_COUNT,
				     .buffer_size = TEST_BUFFER_SIZE,
				     .backend = RING_BACKEND_EPOLL};
	char why[256] = "";
	int rc = ring_init(&fx.ring, &params, why, sizeof(why));
	cr_assert_eq(rc, 0, "ring_init: %d %s", rc, why);
	cr_assert_eq(fx.ring.backend, RING_BACKEND_EPOLL);
	cr_assert_str_eq(fx.ring.setup_mode, "epoll");
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fx.fds), 0);
}

static void teardown(void)
{
	for (int i = 0; i < 2; i++)
		if (fx.fds[i] >= 0)
			close(fx.fds[i]);
	ring_deinit(&fx.ring);
}

TestSuite(ring_epoll, .init = setup, .fini = teardown, .timeout = 30);

static void op_init(struct ring_op *op)
{
	memset(op, 0, sizeof(*op));
	op->handler = on_done;
}

/* Runs passes until `count` completions were seen in all, or fails at the deadline. */
static void run_until_seen(uint32_t count)
{
	uint64_t deadline = base_now_ns() + TEST_DEADLINE_NS;
	while (fx.seen_count < count) {
		cr_assert_lt(base_now_ns(), deadline, "%u of %u completions by the deadline", fx.seen_count, count);
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	}
}

/* A pass that must find nothing: a wake (nothing armed on it) makes epoll_wait return. */
static void run_one_empty_pass(void)
{
	uint32_t before = fx.seen_count;
	ring_tick_start(&fx.ring, 3600 * BASE_NS_PER_SEC);
	ring_wake(&fx.ring);
	cr_assert_eq(ring_run_once(&fx.ring), 0);
	cr_assert_eq(fx.seen_count, before, "a completion arrived for nothing");
}

static void peer_write(const void *data, size_t len)
{
	cr_assert_eq(write(fx.fds[1], data, len), (ssize_t)len);
}

Test(ring_epoll, multishot_recv_delivers_buffers_until_eof)
{
	struct ring_op op;
	op_init(&op);
	fx.is_buffer_kept = true;
	ring_recv_multishot(&fx.ring, &op, fx.fds[0], 1);
	cr_assert(op.is_armed);
	peer_write("hello", 5);
	run_until_seen(1);
	struct completion c = fx.seen[0];
	cr_assert_eq(c.op, &op);
	cr_assert_eq(c.res, 5);
	cr_assert(ring_completion_has_buffer(c.flags));
	cr_assert(ring_completion_has_more(c.flags));
	uint16_t bid = ring_completion_buffer_id(c.flags);
	cr_assert_geq(bid, TEST_BUFFER_COUNT, "group 1's ids are ring-wide: %u", bid);
	cr_assert_lt(bid, 2 * TEST_BUFFER_COUNT);
	cr_assert_eq(memcmp(ring_buffer_data(&fx.ring, bid), "hello", 5), 0);
	cr_assert_eq(fx.ring.buf_refs[bid], 1, "a handler's buffer carries one reference");
	cr_assert_eq(ring_buffers_free(&fx.ring, 1), TEST_BUFFER_COUNT - 1);
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), TEST_BUFFER_COUNT);
	cr_assert(op.is_armed, "a multishot receive stays armed");
	ring_buffer_ref(&fx.ring, bid); /* a send queue's slice */
	ring_buffer_unref(&fx.ring, bid);
	cr_assert_eq(ring_buffers_free(&fx.ring, 1), TEST_BUFFER_COUNT - 1);
	ring_buffer_unref(&fx.ring, bid);
	cr_assert_eq(ring_buffers_free(&fx.ring, 1), TEST_BUFFER_COUNT);

	fx.is_buffer_kept = false;
	peer_write("world!", 6);
	run_until_seen(2);
	cr_assert_eq(fx.seen[1].res, 6);
	cr_assert(ring_completion_has_more(fx.seen[1].flags));
	close(fx.fds[1]);
	fx.fds[1] = -1;
	run_until_seen(3);
	cr_assert_eq(fx.seen[2].res, 0, "EOF: %d", fx.seen[2].res);
	cr_assert_not(ring_completion_has_more(fx.seen[2].flags));
	cr_assert_not(ring_completion_has_buffer(fx.seen[2].flags));
	cr_assert_not(op.is_armed);
	cr_assert_eq(ring_buffers_free(&fx.ring, 1), TEST_BUFFER_COUNT);
}

Test(ring_epoll, single_recv_completes_once_with_its_buffer)
{
	struct ring_op op;
	op_init(&op);
	ring_recv(&fx.ring, &op, fx.fds[0], 0);
	peer_write("abc", 3);
	run_until_seen(1);
	cr_assert_eq(fx.seen[0].res, 3);
	cr_assert(ring_completion_has_buffer(fx.seen[0].flags));
	cr_assert_not(ring_completion_has_more(fx.seen[0].flags));
	cr_assert_lt(ring_completion_buffer_id(fx.seen[0].flags), TEST_BUFFER_COUNT);
	cr_assert_not(op.is_armed);
	peer_write("def", 3); /* nothing armed: no completion, the bytes wait in the socket */
	run_one_empty_pass();
	uint64_t submissions = fx.ring.stats.submissions;
	ring_recv(&fx.ring, &op, fx.fds[0], 0);
	cr_assert_eq(fx.ring.stats.submissions, submissions + 1);
	run_until_seen(2);
	cr_assert_eq(fx.seen[1].res, 3);
}

Test(ring_epoll, exhausted_group_ends_the_receive_with_enobufs_until_buffers_return)
{
	struct ring_op op;
	op_init(&op);
	fx.is_buffer_kept = true;
	static uint8_t bytes[TEST_BUFFER_SIZE * (TEST_BUFFER_COUNT + 2)];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (uint8_t)i;
	peer_write(bytes, sizeof(bytes));
	ring_recv_multishot(&fx.ring, &op, fx.fds[0], 0);
	run_until_seen(TEST_BUFFER_COUNT + 1);
	for (uint32_t i = 0; i < TEST_BUFFER_COUNT; i++) {
		cr_assert_eq(fx.seen[i].res, (int)TEST_BUFFER_SIZE);
		cr_assert(ring_completion_has_more(fx.seen[i].flags));
		uint16_t bid = ring_completion_buffer_id(fx.seen[i].flags);
		cr_assert_eq(memcmp(ring_buffer_data(&fx.ring, bid), bytes + i * TEST_BUFFER_SIZE, TEST_BUFFER_SIZE), 0);
	}
	struct completion last = fx.seen[TEST_BUFFER_COUNT];
	cr_assert_eq(last.res, -ENOBUFS);
	cr_assert_not(ring_completion_has_more(last.flags));
	cr_assert_not(op.is_armed, "the caller re-arms after -ENOBUFS");
	cr_assert_eq(fx.ring.stats.enobufs, 1);
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), 0);
	cr_assert_eq(ring_buffers_free(&fx.ring, 1), TEST_BUFFER_COUNT, "the other group is untouched");

	for (uint32_t i = 0; i < TEST_BUFFER_COUNT; i++)
		ring_buffer_unref(&fx.ring, ring_completion_buffer_id(fx.seen[i].flags));
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), TEST_BUFFER_COUNT);
	fx.is_buffer_kept = false;
	ring_recv_multishot(&fx.ring, &op, fx.fds[0], 0);
	run_until_seen(TEST_BUFFER_COUNT + 3);
	for (uint32_t i = 0; i < 2; i++) {
		struct completion c = fx.seen[TEST_BUFFER_COUNT + 1 + i];
		cr_assert_eq(c.res, (int)TEST_BUFFER_SIZE);
		cr_assert(ring_completion_has_buffer(c.flags));
	}
}

Test(ring_epoll, buffer_taken_by_hand_leaves_the_free_list)
{
	ring_buffer_take(&fx.ring, 0); /* as a test standing in for the kernel does */
	ring_buffer_take(&fx.ring, 5);
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), TEST_BUFFER_COUNT - 2);
	struct ring_op op;
	op_init(&op);
	fx.is_buffer_kept = true;
	static uint8_t bytes[TEST_BUFFER_SIZE * TEST_BUFFER_COUNT];
	memset(bytes, 'x', sizeof(bytes));
	peer_write(bytes, sizeof(bytes));
	ring_recv_multishot(&fx.ring, &op, fx.fds[0], 0);
	run_until_seen(TEST_BUFFER_COUNT - 1);
	for (uint32_t i = 0; i < TEST_BUFFER_COUNT - 2; i++) {
		uint16_t bid = ring_completion_buffer_id(fx.seen[i].flags);
		cr_assert(bid != 0 && bid != 5, "buffer %u was handed out twice", bid);
	}
	cr_assert_eq(fx.seen[TEST_BUFFER_COUNT - 2].res, -ENOBUFS);
	ring_buffer_unref(&fx.ring, 5);
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), 1);
}

Test(ring_epoll, send_and_sendmsg_complete_with_the_bytes_written)
{
	struct ring_op op;
	op_init(&op);
	ring_send(&fx.ring, &op, fx.fds[0], "ping", 4);
	run_until_seen(1);
	cr_assert_eq(fx.seen[0].res, 4);
	cr_assert_not(op.is_armed);
	struct iovec iov[2] = {{.iov_base = "foo", .iov_len = 3}, {.iov_base = "barbaz", .iov_len = 6}};
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
	ring_sendmsg(&fx.ring, &op, fx.fds[0], &msg);
	run_until_seen(2);
	cr_assert_eq(fx.seen[1].res, 9);
	char got[16] = "";
	cr_assert_eq(read(fx.fds[1], got, sizeof(got)), 13);
	cr_assert_eq(memcmp(got, "pingfoobarbaz", 13), 0);
}

Test(ring_epoll, large_send_is_short_and_a_full_socket_waits_for_room)
{
	uint8_t *big = calloc(1, TEST_LARGE_SEND);
	cr_assert_not_null(big);
	struct ring_op op;
	op_init(&op);
	ring_send(&fx.ring, &op, fx.fds[0], big, TEST_LARGE_SEND);
	run_until_seen(1);
	cr_assert_gt(fx.seen[0].res, 0);
	cr_assert_lt(fx.seen[0].res, (int)TEST_LARGE_SEND, "a socket takes less than 8 MB at once: %d", fx.seen[0].res);
	/* The socket is full now: the next send waits, and completes once the peer reads. */
	ring_send(&fx.ring, &op, fx.fds[0], big, TEST_LARGE_SEND);
	run_one_empty_pass();
	cr_assert(op.is_armed, "a send into a full socket waits");
	uint64_t deadline = base_now_ns() + TEST_DEADLINE_NS;
	size_t drained = 0;
	while (fx.seen_count < 2) {
		cr_assert_lt(base_now_ns(), deadline);
		ssize_t n = read(fx.fds[1], big, TEST_LARGE_SEND);
		if (n > 0)
			drained += (size_t)n;
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	}
	cr_assert_gt(fx.seen[1].res, 0);
	cr_assert_gt(drained, 0);
	free(big);
}

Test(ring_epoll, send_to_a_closed_peer_fails_with_epipe)
{
	close(fx.fds[1]);
	fx.fds[1] = -1;
	struct ring_op op;
	op_init(&op);
	ring_send(&fx.ring, &op, fx.fds[0], "x", 1);
	run_until_seen(1);
	cr_assert_eq(fx.seen[0].res, -EPIPE);
}

Test(ring_epoll, cancel_gives_the_armed_receive_its_final_completion)
{
	struct ring_op multi, single;
	op_init(&multi);
	op_init(&single);
	ring_recv_multishot(&fx.ring, &multi, fx.fds[0], 0);
	peer_write("a", 1);
	run_until_seen(1);
	ring_cancel(&fx.ring, &multi);
	cr_assert(multi.is_armed, "armed until its final completion arrives");
	run_until_seen(2);
	cr_assert_eq(fx.seen[1].op, &multi);
	cr_assert_eq(fx.seen[1].res, -ECANCELED);
	cr_assert_not(ring_completion_has_more(fx.seen[1].flags));
	cr_assert_not(multi.is_armed);
	ring_cancel(&fx.ring, &multi); /* unarmed: nothing */
	peer_write("b", 1);
	run_one_empty_pass(); /* cancelled: the descriptor is watched no more */

	/* From inside a handler: the receive that finds "b" cancels one that waits on the other end. */
	ring_recv(&fx.ring, &single, fx.fds[1], 0);
	fx.cancel_from_handler = &single;
	ring_recv(&fx.ring, &multi, fx.fds[0], 1);
	run_until_seen(4);
	cr_assert_eq(fx.seen[2].op, &multi);
	cr_assert_eq(fx.seen[2].res, 1);
	cr_assert_eq(fx.seen[3].op, &single);
	cr_assert_eq(fx.seen[3].res, -ECANCELED);
	cr_assert_not(single.is_armed);
	cr_assert_not(multi.is_armed);
}

static void *wake_thread(void *arg)
{
	ring_wake(arg);
	return NULL;
}

Test(ring_epoll, wake_from_another_thread_runs_on_wake)
{
	fx.ring.on_wake = on_wake;
	ring_tick_start(&fx.ring, 3600 * BASE_NS_PER_SEC);
	pthread_t thread;
	cr_assert_eq(pthread_create(&thread, NULL, wake_thread, &fx.ring), 0);
	uint64_t deadline = base_now_ns() + TEST_DEADLINE_NS;
	while (fx.wakes == 0) {
		cr_assert_lt(base_now_ns(), deadline);
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	}
	pthread_join(thread, NULL);
	cr_assert_eq(fx.wakes, 1);
	ring_wake(&fx.ring); /* re-armed by its handler: a second wake is heard too */
	while (fx.wakes == 1) {
		cr_assert_lt(base_now_ns(), deadline);
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	}
}

Test(ring_epoll, tick_runs_every_interval)
{
	fx.ring.on_tick = on_tick;
	ring_tick_start(&fx.ring, BASE_NS_PER_MS);
	uint64_t deadline = base_now_ns() + TEST_DEADLINE_NS;
	while (fx.ticks < 3) {
		cr_assert_lt(base_now_ns(), deadline);
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	}
	cr_assert_geq(fx.ring.stats.passes, 3);
}

Test(ring_epoll, multishot_accept_hands_over_each_connection)
{
	int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(listener, 0);
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert_eq(bind(listener, (struct sockaddr *)&addr, sizeof(addr)), 0);
	cr_assert_eq(listen(listener, 8), 0);
	socklen_t len = sizeof(addr);
	cr_assert_eq(getsockname(listener, (struct sockaddr *)&addr, &len), 0);
	struct ring_op op;
	op_init(&op);
	ring_accept_multishot(&fx.ring, &op, listener);
	int clients[2];
	for (int i = 0; i < 2; i++) {
		clients[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		cr_assert_eq(connect(clients[i], (struct sockaddr *)&addr, sizeof(addr)), 0);
	}
	run_until_seen(2);
	for (int i = 0; i < 2; i++) {
		cr_assert_geq(fx.seen[i].res, 0);
		cr_assert(ring_completion_has_more(fx.seen[i].flags));
		cr_assert(fcntl(fx.seen[i].res, F_GETFL) & O_NONBLOCK);
		close(fx.seen[i].res);
		close(clients[i]);
	}
	ring_cancel(&fx.ring, &op);
	run_until_seen(3);
	cr_assert_eq(fx.seen[2].res, -ECANCELED);
	cr_assert_not(op.is_armed);
	close(listener);
}

Test(ring_epoll, auto_takes_io_uring_or_says_why_not)
{
	struct ring other;
	struct ring_params params = {.entries = 64, .buffer_count = 16, .buffer_size = 4096, .backend = RING_BACKEND_AUTO};
	char why[256] = "";
	cr_assert_eq(ring_init(&other, &params, why, sizeof(why)), 0, "%s", why);
	if (other.backend == RING_BACKEND_EPOLL)
		cr_assert_neq(why[0], '\0', "a fallback names what blocked io_uring");
	else
		cr_assert_eq(other.backend, RING_BACKEND_IO_URING);
	ring_deinit(&other);
}
