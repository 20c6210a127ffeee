/*
 * test_sendq.c — the send queue over a real ring: references taken and dropped on receive buffers,
 * heap copies, iovec building within SENDQ_IOV_MAX and SENDQ_SEND_BYTES_MAX, and partial sends
 * resumed mid-slice. Sends are real sendmsg submissions over an AF_UNIX socketpair (no network),
 * completed with ring_run_once; the peer end is non-blocking and drained after every completion, so
 * every send makes progress and no test waits on time.
 */
#include "sendq.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TEST_BUFFER_COUNT 16u
#define TEST_BUFFER_SIZE 4096u
#define TEST_RECEIVED_MAX (4u * 1024u * 1024u)
/* Completions one test may wait for; every send moves at least one byte, so this is never reached. */
#define TEST_SENDS_MAX 100000u

struct fixture {
	struct ring ring;
	struct sendq q;
	int fds[2]; /* [0] is the queue's fd, [1] the peer the test drains */
	int last_res;
	uint32_t completions;
	uint8_t *received;
	size_t received_len;
};

static struct fixture fx;

static void on_sent(struct ring_op *op, int res, uint32_t flags)
{
	(void)flags;
	cr_assert_eq(op, &fx.q.op);
	fx.last_res = res;
	fx.completions++;
}

static void setup(void)
{
	memset(&fx, 0, sizeof(fx));
	struct ring_params params = {.entries = 64, .buffer_count = TEST_BUFFER_COUNT, .buffer_size = TEST_BUFFER_SIZE};
	char why[256] = "";
	int rc = ring_init(&fx.ring, &params, why, sizeof(why));
	cr_assert_eq(rc, 0, "ring_init: %d %s", rc, why);
	sendq_init(&fx.q, on_sent);
	fx.fds[0] = fx.fds[1] = -1;
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fx.fds), 0);
	cr_assert_eq(fcntl(fx.fds[1], F_SETFL, O_NONBLOCK), 0);
	fx.received = malloc(TEST_RECEIVED_MAX);
	cr_assert_not_null(fx.received);
}

static void teardown(void)
{
	if (!fx.q.op.is_armed)
		sendq_deinit(&fx.q, &fx.ring);
	for (int i = 0; i < 2; i++)
		if (fx.fds[i] >= 0)
			close(fx.fds[i]);
	ring_deinit(&fx.ring);
	free(fx.received);
}

TestSuite(sendq, .init = setup, .fini = teardown, .timeout = 20);

/* Simulates a receive completion handing out buffer `bid` (of group 0) with one reference, exactly as
 * ring_run_once does for a completion with IORING_CQE_F_BUFFER. The buffer was never taken from the
 * kernel's buffer ring, which is harmless: these tests submit no receive, so the kernel never selects
 * a buffer. */
static uint8_t *take_buffer(uint16_t bid)
{
	cr_assert_lt(bid, fx.ring.buf_count);
	cr_assert_eq(fx.ring.buf_refs[bid], 0, "buffer %u is already out", bid);
	ring_buffer_take(&fx.ring, bid);
	return ring_buffer_data(&fx.ring, bid);
}

/* Fills `len` bytes with a pattern that depends on `seed` and the position, so misordered or
 * duplicated bytes show up. */
static void fill(uint8_t *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)((seed * 131u) + i * 7u + (i >> 8));
}

static void drain_peer(void)
{
	for (;;) {
		cr_assert_lt(fx.received_len, TEST_RECEIVED_MAX);
		ssize_t n = recv(fx.fds[1], fx.received + fx.received_len, TEST_RECEIVED_MAX - fx.received_len, 0);
		if (n < 0) {
			cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s", strerror(errno));
			return;
		}
		cr_assert_gt(n, 0, "peer closed");
		fx.received_len += (size_t)n;
	}
}

/* Starts one send and waits for its completion; returns the bytes the kernel took. */
static uint32_t send_once(void)
{
	sendq_flush(&fx.q, &fx.ring);
	cr_assert(fx.q.op.is_armed, "flush with queued bytes armed no send");
	uint32_t before = fx.completions;
	while (fx.completions == before)
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	cr_assert_eq(fx.completions, before + 1);
	cr_assert_not(fx.q.op.is_armed);
	cr_assert_gt(fx.last_res, 0, "sendmsg failed: %d", fx.last_res);
	uint32_t sent = (uint32_t)fx.last_res;
	sendq_sent(&fx.q, &fx.ring, sent);
	drain_peer();
	return sent;
}

/* Sends until the queue is empty; returns how many sends it took. */
static uint32_t send_all(void)
{
	uint32_t sends = 0;
	while (!sendq_is_empty(&fx.q)) {
		cr_assert_lt(sends, TEST_SENDS_MAX);
		(void)send_once();
		sends++;
	}
	cr_assert(sendq_is_idle(&fx.q));
	cr_assert_eq(fx.q.bytes, 0);
	return sends;
}

static void assert_received(const uint8_t *want, size_t want_len)
{
	cr_assert_eq(fx.received_len, want_len, "received %zu bytes, expected %zu", fx.received_len, want_len);
	for (size_t i = 0; i < want_len; i++)
		cr_assert_eq(fx.received[i], want[i], "byte %zu is 0x%02x, expected 0x%02x", i, fx.received[i],
			     want[i]);
}

static void assert_all_buffers_back(void)
{
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), TEST_BUFFER_COUNT, "%u buffers still out", fx.ring.groups[0].out);
	for (uint32_t i = 0; i < TEST_BUFFER_COUNT; i++)
		cr_assert_eq(fx.ring.buf_refs[i], 0, "buffer %u keeps %u references", i, fx.ring.buf_refs[i]);
}

/* A small send buffer on the queue's end makes large sends partial. */
static void shrink_send_buffer(void)
{
	int size = 4096;
	cr_assert_eq(setsockopt(fx.fds[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)), 0);
}

/* ---- references and accounting, no send ---- */

Test(sendq, push_buffer_takes_a_reference_that_clear_drops)
{
	uint8_t *data = take_buffer(3);
	fill(data, 100, 1);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 3, data, 100), 0);
	cr_assert_eq(fx.ring.buf_refs[3], 2);
	cr_assert_eq(fx.q.count, 1);
	cr_assert_eq(fx.q.bytes, 100);
	cr_assert_not(sendq_is_empty(&fx.q));
	/* The receive handler lets go of its own reference: the queue keeps the buffer out. */
	ring_buffer_unref(&fx.ring, 3);
	cr_assert_eq(fx.ring.buf_refs[3], 1);
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), TEST_BUFFER_COUNT - 1);
	sendq_clear(&fx.q, &fx.ring);
	cr_assert(sendq_is_empty(&fx.q));
	cr_assert_eq(fx.q.bytes, 0);
	assert_all_buffers_back();
}

Test(sendq, one_buffer_takes_more_references_than_sixteen_bits_hold)
{
	/* A large buffer can hold more than 65535 messages a peer makes the relay slice apart (a Flush by
	 * reference between rewritten Describes, say): each slice is a reference. Before: an assertion at
	 * 65535 ended the process. */
	uint8_t *data = take_buffer(5);
	fill(data, 2, 5);
	for (uint32_t i = 0; i < 70000u; i++)
		cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 5, data, 1), 0); /* (the same byte: never contiguous) */
	cr_assert_eq(fx.ring.buf_refs[5], 70001u);
	ring_buffer_unref(&fx.ring, 5);
	sendq_clear(&fx.q, &fx.ring);
	assert_all_buffers_back();
}

Test(sendq, contiguous_pushes_of_one_buffer_extend_one_slice)
{
	uint8_t *a = take_buffer(0);
	uint8_t *b = take_buffer(1);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 0, a, 100), 0);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 0, a + 100, 50), 0);
	cr_assert_eq(fx.q.count, 1, "contiguous bytes of one buffer are one slice");
	cr_assert_eq(fx.q.slices[fx.q.head].len, 150);
	cr_assert_eq(fx.ring.buf_refs[0], 2, "an extension takes no new reference");
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 0, a + 200, 10), 0);
	cr_assert_eq(fx.q.count, 2, "a gap starts a new slice");
	cr_assert_eq(fx.ring.buf_refs[0], 3);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 1, b, 10), 0);
	cr_assert_eq(fx.q.count, 3);
	cr_assert_eq(fx.ring.buf_refs[1], 2);
	cr_assert_eq(sendq_push_copy(&fx.q, "xyz", 3), 0);
	cr_assert_eq(fx.q.count, 4);
	cr_assert_eq(fx.q.bytes, 150 + 10 + 10 + 3);
	ring_buffer_unref(&fx.ring, 0);
	ring_buffer_unref(&fx.ring, 1);
	sendq_clear(&fx.q, &fx.ring);
	assert_all_buffers_back();
}

Test(sendq, buffers_counts_the_receive_buffers_held_whatever_their_bytes)
{
	uint8_t *a = take_buffer(0);
	uint8_t *b = take_buffer(1);
	uint8_t *c = take_buffer(2);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 0, a, 10), 0);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 0, a + 10, 10), 0);
	cr_assert_eq(fx.q.buffers, 1u, "an extension holds no new buffer");
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 1, b, 10), 0);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 2, c, 10), 0);
	cr_assert_eq(sendq_push_copy(&fx.q, "xyz", 3), 0);
	cr_assert_eq(fx.q.buffers, 3u, "40 bytes, 3 buffers: a copy holds none");
	ring_buffer_unref(&fx.ring, 0);
	ring_buffer_unref(&fx.ring, 1);
	ring_buffer_unref(&fx.ring, 2);
	sendq_sent(&fx.q, &fx.ring, 20);
	cr_assert_eq(fx.q.buffers, 2u, "a slice sent in full lets its buffer go");
	cr_assert_eq(sendq_own_copies(&fx.q, &fx.ring), 0);
	cr_assert_eq(fx.q.buffers, 0u, "copied out of the ring");
	assert_all_buffers_back();
	sendq_clear(&fx.q, &fx.ring);
	cr_assert_eq(fx.q.buffers, 0u);
}

Test(sendq, push_copy_keeps_its_own_copy)
{
	char text[] = "SELECT 1";
	cr_assert_eq(sendq_push_copy(&fx.q, text, sizeof(text)), 0);
	memset(text, 'x', sizeof(text) - 1);
	const struct sendq_slice *slice = &fx.q.slices[fx.q.head];
	cr_assert_eq(slice->buffer_id, -1);
	cr_assert_eq(slice->len, sizeof(text));
	cr_assert_str_eq((const char *)slice->data, "SELECT 1");
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), TEST_BUFFER_COUNT, "a copy holds no receive buffer");
}

Test(sendq, sent_releases_only_slices_sent_in_full)
{
	uint8_t *a = take_buffer(4);
	uint8_t *b = take_buffer(5);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 4, a, 100), 0);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 5, b, 100), 0);
	ring_buffer_unref(&fx.ring, 4);
	ring_buffer_unref(&fx.ring, 5);
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), TEST_BUFFER_COUNT - 2);
	/* Pure accounting: sendq_sent does not care whether a real send happened. */
	sendq_sent(&fx.q, &fx.ring, 60);
	cr_assert_eq(fx.q.count, 2);
	cr_assert_eq(fx.q.head_sent, 60);
	cr_assert_eq(fx.q.bytes, 140);
	cr_assert_eq(fx.ring.buf_refs[4], 1);
	sendq_sent(&fx.q, &fx.ring, 40);
	cr_assert_eq(fx.q.count, 1, "a slice sent to its last byte is released");
	cr_assert_eq(fx.q.head_sent, 0);
	cr_assert_eq(fx.ring.buf_refs[4], 0);
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), TEST_BUFFER_COUNT - 1);
	sendq_sent(&fx.q, &fx.ring, 100);
	cr_assert(sendq_is_empty(&fx.q));
	cr_assert_eq(fx.q.bytes, 0);
	assert_all_buffers_back();
}

Test(sendq, one_completion_across_several_slices_releases_each_in_full)
{
	uint8_t *a = take_buffer(0);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 0, a, 10), 0);
	cr_assert_eq(sendq_push_copy(&fx.q, "0123456789", 10), 0);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 0, a + 500, 10), 0);
	ring_buffer_unref(&fx.ring, 0);
	cr_assert_eq(fx.ring.buf_refs[0], 2, "two slices, two references");
	sendq_sent(&fx.q, &fx.ring, 25);
	cr_assert_eq(fx.q.count, 1);
	cr_assert_eq(fx.q.head_sent, 5);
	cr_assert_eq(fx.ring.buf_refs[0], 1);
	sendq_sent(&fx.q, &fx.ring, 5);
	assert_all_buffers_back();
}

Test(sendq, flush_does_nothing_without_a_peer_or_bytes)
{
	uint64_t submissions = fx.ring.stats.submissions;
	sendq_flush(&fx.q, &fx.ring);
	cr_assert_not(fx.q.op.is_armed, "an empty queue sends nothing");
	cr_assert_eq(sendq_push_copy(&fx.q, "abc", 3), 0);
	sendq_flush(&fx.q, &fx.ring);
	cr_assert_not(fx.q.op.is_armed, "fd -1: no server attached yet");
	cr_assert_eq(fx.ring.stats.submissions, submissions);
}

/* ---- real sends ---- */

Test(sendq, flush_sends_every_slice_in_order_with_one_iovec_each)
{
	fx.q.fd = fx.fds[0];
	uint8_t want[4096];
	size_t want_len = 0;
	uint8_t *a = take_buffer(2);
	fill(a, 300, 2);
	uint8_t *b = take_buffer(7);
	fill(b, 300, 7);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 2, a, 120), 0);
	memcpy(want + want_len, a, 120);
	want_len += 120;
	cr_assert_eq(sendq_push_copy(&fx.q, "Z\0\0\0\5I", 6), 0);
	memcpy(want + want_len, "Z\0\0\0\5I", 6);
	want_len += 6;
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 7, b + 10, 200), 0);
	memcpy(want + want_len, b + 10, 200);
	want_len += 200;
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 2, a + 150, 100), 0);
	memcpy(want + want_len, a + 150, 100);
	want_len += 100;
	ring_buffer_unref(&fx.ring, 2);
	ring_buffer_unref(&fx.ring, 7);

	sendq_flush(&fx.q, &fx.ring);
	cr_assert(fx.q.op.is_armed);
	cr_assert_eq(fx.q.iov_count, 4);
	cr_assert_eq(fx.q.msg.msg_iov, fx.q.iov);
	cr_assert_eq(fx.q.msg.msg_iovlen, 4);
	cr_assert_eq(fx.q.iov[0].iov_base, a);
	cr_assert_eq(fx.q.iov[0].iov_len, 120);
	cr_assert_eq(fx.q.iov[1].iov_len, 6);
	cr_assert_eq(fx.q.iov[2].iov_base, b + 10);
	cr_assert_eq(fx.q.iov[2].iov_len, 200);
	cr_assert_eq(fx.q.iov[3].iov_base, a + 150);
	cr_assert_eq(fx.q.iov[3].iov_len, 100);
	/* A second flush while the send is in flight must not submit another. */
	uint64_t submissions = fx.ring.stats.submissions;
	sendq_flush(&fx.q, &fx.ring);
	cr_assert_eq(fx.ring.stats.submissions, submissions);

	while (fx.completions == 0)
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	cr_assert_eq(fx.last_res, (int)want_len);
	sendq_sent(&fx.q, &fx.ring, (uint32_t)fx.last_res);
	drain_peer();
	assert_received(want, want_len);
	cr_assert(sendq_is_idle(&fx.q));
	assert_all_buffers_back();
}

Test(sendq, flush_uses_at_most_SENDQ_IOV_MAX_iovecs)
{
	fx.q.fd = fx.fds[0];
	uint32_t slices = SENDQ_IOV_MAX * 2 + 5;
	uint8_t want[1024];
	for (uint32_t i = 0; i < slices; i++) {
		uint8_t piece[3] = {(uint8_t)i, (uint8_t)(i >> 8), 0xee};
		cr_assert_eq(sendq_push_copy(&fx.q, piece, 3), 0);
		memcpy(want + i * 3, piece, 3);
	}
	cr_assert_eq(fx.q.count, slices, "the queue grew past its first capacity");
	sendq_flush(&fx.q, &fx.ring);
	cr_assert_eq(fx.q.iov_count, SENDQ_IOV_MAX);
	while (fx.completions == 0)
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	cr_assert_eq(fx.last_res, (int)(SENDQ_IOV_MAX * 3));
	sendq_sent(&fx.q, &fx.ring, (uint32_t)fx.last_res);
	drain_peer();
	cr_assert_eq(fx.q.count, slices - SENDQ_IOV_MAX);
	cr_assert_eq(send_all(), 2, "the rest takes one full and one partial batch");
	assert_received(want, slices * 3);
}

Test(sendq, flush_stops_at_SENDQ_SEND_BYTES_MAX_inside_a_slice)
{
	fx.q.fd = fx.fds[0];
	uint32_t big = 300u * 1024u;
	uint8_t *block = malloc(big);
	cr_assert_not_null(block);
	uint8_t *want = malloc(3 * (size_t)big);
	cr_assert_not_null(want);
	for (uint32_t i = 0; i < 3; i++) {
		fill(block, big, 10 + i);
		cr_assert_eq(sendq_push_copy(&fx.q, block, big), 0);
		memcpy(want + (size_t)i * big, block, big);
	}
	sendq_flush(&fx.q, &fx.ring);
	cr_assert_eq(fx.q.iov_count, 2);
	cr_assert_eq(fx.q.iov[0].iov_len, big);
	cr_assert_eq(fx.q.iov[1].iov_len, SENDQ_SEND_BYTES_MAX - big, "the budget cuts the second slice");
	while (fx.completions == 0)
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	cr_assert_gt(fx.last_res, 0);
	cr_assert_leq(fx.last_res, (int)SENDQ_SEND_BYTES_MAX);
	sendq_sent(&fx.q, &fx.ring, (uint32_t)fx.last_res);
	drain_peer();
	(void)send_all();
	assert_received(want, 3 * (size_t)big);
	free(block);
	free(want);
}

Test(sendq, partial_sends_resume_mid_slice_and_return_each_buffer_when_sent)
{
	fx.q.fd = fx.fds[0];
	shrink_send_buffer();
	uint8_t *want = malloc((size_t)TEST_BUFFER_COUNT * TEST_BUFFER_SIZE);
	cr_assert_not_null(want);
	for (uint16_t bid = 0; bid < TEST_BUFFER_COUNT; bid++) {
		uint8_t *data = take_buffer(bid);
		fill(data, TEST_BUFFER_SIZE, bid);
		cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, bid, data, TEST_BUFFER_SIZE), 0);
		memcpy(want + (size_t)bid * TEST_BUFFER_SIZE, data, TEST_BUFFER_SIZE);
		ring_buffer_unref(&fx.ring, bid); /* the queue now holds the only reference */
	}
	cr_assert_eq(ring_buffers_free(&fx.ring, 0), 0);
	uint64_t total = 0;
	uint32_t partial_sends = 0;
	uint32_t mid_slice_resumes = 0;
	for (uint32_t sends = 0; !sendq_is_empty(&fx.q); sends++) {
		cr_assert_lt(sends, TEST_SENDS_MAX);
		uint64_t queued = fx.q.bytes;
		uint32_t head_sent = fx.q.head_sent;
		const uint8_t *head_data = fx.q.slices[fx.q.head].data;
		sendq_flush(&fx.q, &fx.ring);
		cr_assert_eq(fx.q.iov[0].iov_base, head_data + head_sent, "the next send starts where the last ended");
		if (head_sent > 0)
			mid_slice_resumes++;
		while (fx.completions == sends)
			cr_assert_eq(ring_run_once(&fx.ring), 0);
		cr_assert_gt(fx.last_res, 0, "sendmsg: %d", fx.last_res);
		if ((uint64_t)fx.last_res < queued)
			partial_sends++;
		sendq_sent(&fx.q, &fx.ring, (uint32_t)fx.last_res);
		total += (uint64_t)fx.last_res;
		drain_peer();
		/* Exactly the buffers sent to their last byte are back. */
		uint32_t whole = (uint32_t)(total / TEST_BUFFER_SIZE);
		cr_assert_eq(ring_buffers_free(&fx.ring, 0), whole, "after %llu bytes: %u buffers free, expected %u",
			     (unsigned long long)total, ring_buffers_free(&fx.ring, 0), whole);
	}
	cr_assert_gt(partial_sends, 0, "the small send buffer never cut a send short");
	cr_assert_gt(mid_slice_resumes, 0, "no send ever ended inside a slice");
	assert_received(want, (size_t)TEST_BUFFER_COUNT * TEST_BUFFER_SIZE);
	assert_all_buffers_back();
	free(want);
}

Test(sendq, bytes_pushed_while_a_send_is_in_flight_follow_it)
{
	fx.q.fd = fx.fds[0];
	uint8_t *a = take_buffer(9);
	fill(a, 600, 9);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 9, a, 100), 0);
	sendq_flush(&fx.q, &fx.ring);
	cr_assert(fx.q.op.is_armed);
	/* The receive continues in the same buffer while the first send is in flight. */
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 9, a + 100, 200), 0);
	cr_assert_eq(sendq_push_copy(&fx.q, "tail", 4), 0);
	cr_assert_eq(fx.q.iov[0].iov_len, 100, "the in-flight iovec is left alone");
	while (fx.completions == 0)
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	cr_assert_eq(fx.last_res, 100);
	sendq_sent(&fx.q, &fx.ring, 100);
	cr_assert_eq(fx.q.count, 2, "the extended slice is still owed 200 bytes");
	cr_assert_eq(fx.ring.buf_refs[9], 2);
	drain_peer();
	(void)send_all();
	ring_buffer_unref(&fx.ring, 9);
	uint8_t want[304];
	memcpy(want, a, 300);
	memcpy(want + 300, "tail", 4);
	assert_received(want, sizeof(want));
	assert_all_buffers_back();
}

Test(sendq, queue_wrapped_around_grows_and_keeps_order)
{
	fx.q.fd = fx.fds[0];
	uint8_t want[512];
	uint32_t want_len = 0;
	uint8_t piece[4];
	uint32_t next = 0;
	for (; next < 12; next++) {
		memcpy(piece, &next, 4);
		cr_assert_eq(sendq_push_copy(&fx.q, piece, 4), 0);
	}
	/* Send ten slices so the head moves forward, then push past the end of the circular array. */
	sendq_sent(&fx.q, &fx.ring, 40);
	cr_assert_eq(fx.q.head, 10);
	for (uint32_t i = 10; i < 12; i++) {
		memcpy(want + want_len, &i, 4);
		want_len += 4;
	}
	for (; next < 60; next++) {
		memcpy(piece, &next, 4);
		cr_assert_eq(sendq_push_copy(&fx.q, piece, 4), 0);
		memcpy(want + want_len, piece, 4);
		want_len += 4;
	}
	cr_assert_eq(fx.q.count, 50);
	(void)send_all();
	assert_received(want, want_len);
}

/* A zero-length slice at the head would never be released (sendq_sent moves on by bytes), leaving a
 * queue that never drains and a 0-byte sendmsg loop; push_copy ignores empty copies (this failed
 * before that fix). */
Test(sendq, empty_copy_does_not_keep_the_queue_from_draining)
{
	fx.q.fd = fx.fds[0];
	cr_assert_eq(sendq_push_copy(&fx.q, "abc", 3), 0);
	cr_assert_eq(sendq_push_copy(&fx.q, "", 0), 0);
	sendq_flush(&fx.q, &fx.ring);
	while (fx.completions == 0)
		cr_assert_eq(ring_run_once(&fx.ring), 0);
	cr_assert_eq(fx.last_res, 3);
	sendq_sent(&fx.q, &fx.ring, 3);
	cr_assert_eq(fx.q.bytes, 0);
	cr_assert(sendq_is_empty(&fx.q), "every byte was sent, yet %u slice(s) remain", fx.q.count);
	drain_peer();
	assert_received((const uint8_t *)"abc", 3);
}

Test(sendq, deinit_drops_references_of_unsent_slices)
{
	uint8_t *a = take_buffer(11);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 11, a, 64), 0);
	cr_assert_eq(sendq_push_copy(&fx.q, "abc", 3), 0);
	ring_buffer_unref(&fx.ring, 11);
	sendq_deinit(&fx.q, &fx.ring);
	cr_assert_null(fx.q.slices);
	cr_assert_eq(fx.q.count, 0);
	assert_all_buffers_back();
}

/* tern's own SET goes ahead of client bytes already queued (and of a wrapped-around queue). */
Test(sendq, push_front_copy_goes_out_before_everything_queued)
{
	fx.q.fd = fx.fds[0];
	uint8_t *b = take_buffer(3);
	memcpy(b, "client", 6);
	cr_assert_eq(sendq_push_buffer(&fx.q, &fx.ring, 3, b, 6), 0);
	ring_buffer_unref(&fx.ring, 3);
	cr_assert_eq(sendq_push_copy(&fx.q, "+tail", 5), 0);
	cr_assert_eq(sendq_push_front_copy(&fx.q, "SET;", 4), 0);
	cr_assert_eq(fx.q.bytes, 15);
	(void)send_all();
	assert_received((const uint8_t *)"SET;client+tail", 15);
	assert_all_buffers_back();
}

Test(sendq, a_queue_holds_at_most_SENDQ_SLICES_MAX_slices_and_then_refuses)
{
	static const uint8_t byte = 'x';
	for (uint32_t i = 0; i < SENDQ_SLICES_MAX; i++)
		cr_assert_eq(sendq_push_copy(&fx.q, &byte, 1), 0, "slice %u", i);
	cr_assert_eq(fx.q.count, SENDQ_SLICES_MAX);
	cr_assert_eq(sendq_push_copy(&fx.q, &byte, 1), -ENOBUFS, "one past the bound is refused");
	cr_assert_eq(sendq_push_owned(&fx.q, malloc(1), 1), -ENOBUFS, "an owned block too (and it is freed)");
	cr_assert_eq(sendq_push_front_copy(&fx.q, &byte, 1), -ENOBUFS, "and in front");
	cr_assert_eq(fx.q.count, SENDQ_SLICES_MAX, "nothing was taken");
	cr_assert_eq(fx.q.bytes, SENDQ_SLICES_MAX, "nor counted");
}
