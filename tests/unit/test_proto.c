/*
 * test_proto.c — the wire protocol library: stream scanning (runs of forwarded bytes, dropped and
 * inspected messages, messages split across chunks at every offset, limits), the startup and error
 * parsers on valid and hostile input, and the builders checked byte for byte against PostgreSQL's
 * documented message formats.
 */
#include "proto.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- a recording owner for proto_stream_feed ---- */

#define REC_BYTES_MAX (256u * 1024u)
#define REC_RUNS_MAX 256u
#define REC_EVENTS_MAX 512u

struct rec_run {
	uint32_t offset, len;
};

/* One callback as it happened, to check the order of forwards and inspections. */
struct rec_event {
	char kind; /* 'F' forward, 'M' on_message */
	uint8_t type;
	uint32_t len;
};

struct rec {
	unsigned actions[256]; /* what on_type answers per type byte; 0 (drop) unless set */
	int message_rc;        /* what on_message returns */
	const uint8_t *chunk;  /* the chunk being fed, to copy forwarded bytes out of */
	uint32_t chunk_len;
	uint32_t type_calls;
	struct rec_run runs[REC_RUNS_MAX]; /* forward calls of the last chunk only */
	uint32_t run_count;
	uint8_t *forwarded; /* every forwarded byte, in order, across chunks */
	uint32_t forwarded_len;
	uint8_t *inspected; /* every inspected message as type, u32 body length, body */
	uint32_t inspected_len;
	uint32_t message_count;
	struct rec_event events[REC_EVENTS_MAX];
	uint32_t event_count;
};

static void rec_init(struct rec *r)
{
	memset(r, 0, sizeof(*r));
	r->forwarded = malloc(REC_BYTES_MAX);
	r->inspected = malloc(REC_BYTES_MAX);
	cr_assert(r->forwarded != NULL && r->inspected != NULL);
}

/* Forgets what was recorded, keeping the chosen actions. */
static void rec_reset(struct rec *r)
{
	r->type_calls = 0;
	r->run_count = 0;
	r->forwarded_len = 0;
	r->inspected_len = 0;
	r->message_count = 0;
	r->event_count = 0;
}

static void rec_deinit(struct rec *r)
{
	free(r->forwarded);
	free(r->inspected);
}

static void rec_event_add(struct rec *r, char kind, uint8_t type, uint32_t len)
{
	cr_assert_lt(r->event_count, REC_EVENTS_MAX);
	r->events[r->event_count++] = (struct rec_event){.kind = kind, .type = type, .len = len};
}

static unsigned rec_on_type(void *ctx, uint8_t type)
{
	struct rec *r = ctx;
	r->type_calls++;
	return r->actions[type];
}

static int rec_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t body_len)
{
	struct rec *r = ctx;
	cr_assert_leq((uint64_t)r->inspected_len + 5 + body_len, REC_BYTES_MAX);
	r->inspected[r->inspected_len] = type;
	proto_write_u32(r->inspected + r->inspected_len + 1, body_len);
	if (body_len > 0)
		memcpy(r->inspected + r->inspected_len + 5, body, body_len);
	r->inspected_len += 5 + body_len;
	r->message_count++;
	rec_event_add(r, 'M', type, body_len);
	return r->message_rc;
}

static void rec_forward(void *ctx, uint32_t offset, uint32_t len)
{
	struct rec *r = ctx;
	cr_assert_gt(len, 0, "an empty run was forwarded");
	cr_assert_leq((uint64_t)offset + len, r->chunk_len, "run [%u, +%u) beyond the chunk of %u", offset, len,
		      r->chunk_len);
	cr_assert_lt(r->run_count, REC_RUNS_MAX);
	cr_assert_leq((uint64_t)r->forwarded_len + len, REC_BYTES_MAX);
	r->runs[r->run_count++] = (struct rec_run){offset, len};
	memcpy(r->forwarded + r->forwarded_len, r->chunk + offset, len);
	r->forwarded_len += len;
	rec_event_add(r, 'F', 0, len);
}

static const struct proto_scan_ops rec_ops = {
	.on_type = rec_on_type,
	.on_message = rec_on_message,
	.forward = rec_forward,
};

/* Feeds one chunk; the runs recorded are those of this chunk. */
static int rec_feed(struct rec *r, struct proto_stream *stream, const uint8_t *chunk, uint32_t len,
		    uint64_t frame_len_max)
{
	r->chunk = chunk;
	r->chunk_len = len;
	r->run_count = 0;
	return proto_stream_feed(stream, chunk, len, frame_len_max, &rec_ops, r);
}

/* ---- building message streams ---- */

struct buf {
	uint8_t *p;
	uint32_t len;
	uint32_t cap;
};

static void buf_init(struct buf *b, uint32_t cap)
{
	b->p = malloc(cap);
	cr_assert(b->p != NULL);
	b->len = 0;
	b->cap = cap;
}

/* Appends one typed message with the given body; the length field counts itself and the body. */
static void buf_message(struct buf *b, uint8_t type, const void *body, uint32_t body_len)
{
	cr_assert_leq((uint64_t)b->len + 5 + body_len, b->cap);
	b->p[b->len] = type;
	proto_write_u32(b->p + b->len + 1, body_len + 4);
	if (body_len > 0)
		memcpy(b->p + b->len + 5, body, body_len);
	b->len += 5 + body_len;
}

/* Appends what rec_on_message records for this message, to build expectations independently. */
static void buf_inspected(struct buf *b, uint8_t type, const void *body, uint32_t body_len)
{
	cr_assert_leq((uint64_t)b->len + 5 + body_len, b->cap);
	b->p[b->len] = type;
	proto_write_u32(b->p + b->len + 1, body_len);
	if (body_len > 0)
		memcpy(b->p + b->len + 5, body, body_len);
	b->len += 5 + body_len;
}

static void buf_free(struct buf *b) { free(b->p); }

static void assert_bytes(const uint8_t *actual, uint32_t actual_len, const uint8_t *expected, uint32_t expected_len,
			 const char *what)
{
	cr_assert_eq(actual_len, expected_len, "%s: %u bytes, expected %u", what, actual_len, expected_len);
	for (uint32_t i = 0; i < expected_len; i++)
		cr_assert_eq(actual[i], expected[i], "%s: byte %u is 0x%02x, expected 0x%02x", what, i, actual[i],
			     expected[i]);
}

#define FRAME_MAX_LARGE (1ull << 30)

/* ---- stream scanning ---- */

Test(proto, several_forwarded_messages_in_one_chunk_are_one_run)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	r.actions['C'] = PROTO_FORWARD;
	struct buf b;
	buf_init(&b, 256);
	buf_message(&b, 'D', "row1", 4);
	buf_message(&b, 'D', "row-two", 7);
	buf_message(&b, 'C', "SELECT 2", 9);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, b.len, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.run_count, 1, "%u runs for one chunk of forwarded messages", r.run_count);
	cr_assert_eq(r.runs[0].offset, 0);
	cr_assert_eq(r.runs[0].len, b.len);
	cr_assert_eq(r.type_calls, 3);
	cr_assert_eq(r.message_count, 0);
	cr_assert_eq(stream.messages, 3);
	cr_assert(proto_stream_is_at_boundary(&stream));
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, dropped_message_breaks_the_run_and_is_not_forwarded)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	r.actions['X'] = 0;
	struct buf b;
	buf_init(&b, 256);
	buf_message(&b, 'D', "aaaa", 4);
	buf_message(&b, 'D', "bb", 2);
	uint32_t drop_at = b.len;
	buf_message(&b, 'X', "dropped", 7);
	uint32_t second_at = b.len;
	buf_message(&b, 'D', "cccccc", 6);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, b.len, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.run_count, 2);
	cr_assert_eq(r.runs[0].offset, 0);
	cr_assert_eq(r.runs[0].len, drop_at);
	cr_assert_eq(r.runs[1].offset, second_at);
	cr_assert_eq(r.runs[1].len, b.len - second_at);
	cr_assert_eq(r.message_count, 0, "a dropped message is not inspected");
	cr_assert_eq(stream.messages, 4);
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, inspect_only_message_is_handed_over_but_not_forwarded)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	r.actions['p'] = PROTO_INSPECT;
	struct buf b;
	buf_init(&b, 256);
	buf_message(&b, 'D', "before", 6);
	uint32_t inspect_at = b.len;
	buf_message(&b, 'p', "secret\0", 7);
	uint32_t after_at = b.len;
	buf_message(&b, 'D', "after", 5);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, b.len, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.run_count, 2);
	cr_assert_eq(r.runs[0].offset, 0);
	cr_assert_eq(r.runs[0].len, inspect_at);
	cr_assert_eq(r.runs[1].offset, after_at);
	cr_assert_eq(r.runs[1].len, b.len - after_at);
	struct buf want;
	buf_init(&want, 64);
	buf_inspected(&want, 'p', "secret\0", 7);
	assert_bytes(r.inspected, r.inspected_len, want.p, want.len, "inspected");
	buf_free(&want);
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, forwarded_and_inspected_message_is_forwarded_before_it_is_inspected)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	r.actions['Z'] = PROTO_FORWARD | PROTO_INSPECT;
	struct buf b;
	buf_init(&b, 256);
	buf_message(&b, 'D', "row", 3);
	buf_message(&b, 'Z', "I", 1);
	buf_message(&b, 'D', "next", 4);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, b.len, FRAME_MAX_LARGE), 0);
	/* The owner reacts to ReadyForQuery (releases a server, say) only after its bytes went out. */
	cr_assert_eq(r.event_count, 3);
	cr_assert_eq(r.events[0].kind, 'F');
	cr_assert_eq(r.events[0].len, 8 + 6, "the run up to and including the Z message");
	cr_assert_eq(r.events[1].kind, 'M');
	cr_assert_eq(r.events[1].type, 'Z');
	cr_assert_eq(r.events[2].kind, 'F');
	cr_assert_eq(r.events[2].len, 9);
	assert_bytes(r.forwarded, r.forwarded_len, b.p, b.len, "forwarded");
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

/* A stream mixing every action: forwarded, forwarded+inspected, inspect-only, dropped, empty bodies. */
struct mixed {
	struct buf stream;
	struct buf want_forwarded;
	struct buf want_inspected;
};

static void mixed_add(struct mixed *m, const struct rec *r, uint8_t type, const void *body, uint32_t body_len)
{
	uint32_t at = m->stream.len;
	buf_message(&m->stream, type, body, body_len);
	if (r->actions[type] & PROTO_FORWARD) {
		cr_assert_leq(m->want_forwarded.len + (m->stream.len - at), m->want_forwarded.cap);
		memcpy(m->want_forwarded.p + m->want_forwarded.len, m->stream.p + at, m->stream.len - at);
		m->want_forwarded.len += m->stream.len - at;
	}
	if (r->actions[type] & PROTO_INSPECT)
		buf_inspected(&m->want_inspected, type, body, body_len);
}

static void mixed_build(struct mixed *m, struct rec *r)
{
	r->actions['D'] = PROTO_FORWARD;
	r->actions['Z'] = PROTO_FORWARD | PROTO_INSPECT;
	r->actions['S'] = PROTO_INSPECT;
	r->actions['X'] = 0;
	r->actions['n'] = PROTO_FORWARD;
	buf_init(&m->stream, 512);
	buf_init(&m->want_forwarded, 512);
	buf_init(&m->want_inspected, 512);
	mixed_add(m, r, 'D', "first row", 9);
	mixed_add(m, r, 'n', NULL, 0);
	mixed_add(m, r, 'S', "TimeZone\0UTC\0", 13);
	mixed_add(m, r, 'X', "gone", 4);
	mixed_add(m, r, 'D', "second", 6);
	mixed_add(m, r, 'Z', "T", 1);
	mixed_add(m, r, 'S', NULL, 0);
	mixed_add(m, r, 'Z', "I", 1);
	mixed_add(m, r, 'n', NULL, 0);
}

static void mixed_free(struct mixed *m)
{
	buf_free(&m->stream);
	buf_free(&m->want_forwarded);
	buf_free(&m->want_inspected);
}

Test(proto, message_stream_split_into_two_chunks_at_every_offset_scans_the_same)
{
	struct rec r;
	rec_init(&r);
	struct mixed m;
	mixed_build(&m, &r);
	for (uint32_t cut = 0; cut <= m.stream.len; cut++) {
		rec_reset(&r);
		struct proto_stream stream;
		proto_stream_init(&stream);
		cr_assert_eq(rec_feed(&r, &stream, m.stream.p, cut, FRAME_MAX_LARGE), 0, "cut %u", cut);
		cr_assert_eq(rec_feed(&r, &stream, m.stream.p + cut, m.stream.len - cut, FRAME_MAX_LARGE), 0,
			     "cut %u", cut);
		char what[64];
		snprintf(what, sizeof(what), "forwarded, cut at %u", cut);
		assert_bytes(r.forwarded, r.forwarded_len, m.want_forwarded.p, m.want_forwarded.len, what);
		snprintf(what, sizeof(what), "inspected, cut at %u", cut);
		assert_bytes(r.inspected, r.inspected_len, m.want_inspected.p, m.want_inspected.len, what);
		cr_assert_eq(stream.messages, 9, "cut %u", cut);
		cr_assert(proto_stream_is_at_boundary(&stream));
		proto_stream_deinit(&stream);
	}
	mixed_free(&m);
	rec_deinit(&r);
}

Test(proto, message_stream_split_into_three_chunks_at_every_pair_of_offsets_scans_the_same)
{
	struct rec r;
	rec_init(&r);
	struct mixed m;
	mixed_build(&m, &r);
	for (uint32_t a = 0; a <= m.stream.len; a++) {
		for (uint32_t b = a; b <= m.stream.len; b++) {
			rec_reset(&r);
			struct proto_stream stream;
			proto_stream_init(&stream);
			cr_assert_eq(rec_feed(&r, &stream, m.stream.p, a, FRAME_MAX_LARGE), 0);
			cr_assert_eq(rec_feed(&r, &stream, m.stream.p + a, b - a, FRAME_MAX_LARGE), 0);
			cr_assert_eq(rec_feed(&r, &stream, m.stream.p + b, m.stream.len - b, FRAME_MAX_LARGE), 0);
			char what[64];
			snprintf(what, sizeof(what), "forwarded, cuts at %u and %u", a, b);
			assert_bytes(r.forwarded, r.forwarded_len, m.want_forwarded.p, m.want_forwarded.len, what);
			snprintf(what, sizeof(what), "inspected, cuts at %u and %u", a, b);
			assert_bytes(r.inspected, r.inspected_len, m.want_inspected.p, m.want_inspected.len, what);
			proto_stream_deinit(&stream);
		}
	}
	mixed_free(&m);
	rec_deinit(&r);
}

Test(proto, forwarded_message_split_in_its_header_forwards_both_parts_as_runs)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	struct buf b;
	buf_init(&b, 64);
	buf_message(&b, 'D', "payload", 7);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, 3, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.run_count, 1);
	cr_assert_eq(r.runs[0].offset, 0);
	cr_assert_eq(r.runs[0].len, 3);
	cr_assert_not(proto_stream_is_at_boundary(&stream));
	cr_assert_eq(rec_feed(&r, &stream, b.p + 3, b.len - 3, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.run_count, 1);
	cr_assert_eq(r.runs[0].offset, 0);
	cr_assert_eq(r.runs[0].len, b.len - 3);
	cr_assert_eq(r.type_calls, 1, "the type is decided once per message");
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, inspected_message_straddling_three_chunks_is_assembled)
{
	struct rec r;
	rec_init(&r);
	r.actions['S'] = PROTO_FORWARD | PROTO_INSPECT;
	/* Longer than the first assembly allocation (256), so the buffer has to grow. */
	uint32_t body_len = 1000;
	uint8_t *body = malloc(body_len);
	cr_assert(body != NULL);
	for (uint32_t i = 0; i < body_len; i++)
		body[i] = (uint8_t)(i * 7 + 3);
	struct buf b;
	buf_init(&b, 2048);
	buf_message(&b, 'S', body, body_len);
	struct proto_stream stream;
	proto_stream_init(&stream);
	uint32_t cuts[] = {0, 2, 400, b.len};
	for (size_t i = 0; i + 1 < TERN_ARRAY_LEN(cuts); i++) {
		cr_assert_eq(rec_feed(&r, &stream, b.p + cuts[i], cuts[i + 1] - cuts[i], FRAME_MAX_LARGE), 0);
		cr_assert_eq(r.message_count, i + 2 == TERN_ARRAY_LEN(cuts) ? 1u : 0u, "after chunk %zu", i);
	}
	struct buf want;
	buf_init(&want, 2048);
	buf_inspected(&want, 'S', body, body_len);
	assert_bytes(r.inspected, r.inspected_len, want.p, want.len, "assembled");
	assert_bytes(r.forwarded, r.forwarded_len, b.p, b.len, "forwarded");
	buf_free(&want);
	proto_stream_deinit(&stream);
	buf_free(&b);
	free(body);
	rec_deinit(&r);
}

Test(proto, second_inspected_message_after_an_assembled_one_is_not_mixed_with_it)
{
	struct rec r;
	rec_init(&r);
	r.actions['S'] = PROTO_INSPECT;
	struct buf b;
	buf_init(&b, 256);
	buf_message(&b, 'S', "first\0value\0", 12);
	buf_message(&b, 'S', "second\0v\0", 9);
	struct proto_stream stream;
	proto_stream_init(&stream);
	/* Both bodies straddle a cut, so both are assembled in the same buffer one after the other. */
	uint32_t cut1 = 10, cut2 = 17 + 8;
	cr_assert_eq(rec_feed(&r, &stream, b.p, cut1, FRAME_MAX_LARGE), 0);
	cr_assert_eq(rec_feed(&r, &stream, b.p + cut1, cut2 - cut1, FRAME_MAX_LARGE), 0);
	cr_assert_eq(rec_feed(&r, &stream, b.p + cut2, b.len - cut2, FRAME_MAX_LARGE), 0);
	struct buf want;
	buf_init(&want, 256);
	buf_inspected(&want, 'S', "first\0value\0", 12);
	buf_inspected(&want, 'S', "second\0v\0", 9);
	assert_bytes(r.inspected, r.inspected_len, want.p, want.len, "inspected");
	buf_free(&want);
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, length_below_four_is_a_protocol_error)
{
	for (uint32_t length = 0; length < 4; length++) {
		for (uint32_t cut = 0; cut <= 5; cut++) {
			struct rec r;
			rec_init(&r);
			r.actions['D'] = PROTO_FORWARD;
			uint8_t msg[5] = {'D'};
			proto_write_u32(msg + 1, length);
			struct proto_stream stream;
			proto_stream_init(&stream);
			int rc = rec_feed(&r, &stream, msg, cut, FRAME_MAX_LARGE);
			if (cut < 5) {
				cr_assert_eq(rc, 0, "length %u, header cut at %u", length, cut);
				rc = rec_feed(&r, &stream, msg + cut, 5 - cut, FRAME_MAX_LARGE);
			}
			cr_assert_eq(rc, -EPROTO, "length %u, header cut at %u: %d", length, cut, rc);
			proto_stream_deinit(&stream);
			rec_deinit(&r);
		}
	}
}

Test(proto, frame_over_frame_len_max_is_too_big_and_one_at_it_passes)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	struct buf b;
	buf_init(&b, 128);
	buf_message(&b, 'D', "0123456789", 10); /* frame: 1 + 4 + 10 = 15 bytes */
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, b.len, 15), 0);
	proto_stream_deinit(&stream);
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, b.len, 14), -EMSGSIZE);
	proto_stream_deinit(&stream);
	/* The limit is checked from the header alone, before the body arrives. */
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, 5, 14), -EMSGSIZE);
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, inspected_message_over_the_inspect_limit_is_too_big)
{
	struct rec r;
	rec_init(&r);
	r.actions['S'] = PROTO_FORWARD | PROTO_INSPECT;
	r.actions['D'] = PROTO_FORWARD;
	uint8_t header[5] = {'S'};
	proto_write_u32(header + 1, PROTO_INSPECT_LEN_MAX + 1 + 4);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, header, 5, FRAME_MAX_LARGE), -EMSGSIZE);
	proto_stream_deinit(&stream);
	/* A forwarded-only message of that size is fine: it is never copied. */
	header[0] = 'D';
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, header, 5, FRAME_MAX_LARGE), 0);
	proto_stream_deinit(&stream);
	rec_deinit(&r);
}

Test(proto, inspected_message_at_the_inspect_limit_is_assembled)
{
	struct rec r;
	rec_init(&r);
	r.actions['S'] = PROTO_INSPECT;
	uint32_t body_len = PROTO_INSPECT_LEN_MAX;
	struct buf b;
	buf_init(&b, body_len + 5);
	uint8_t *body = malloc(body_len);
	cr_assert(body != NULL);
	for (uint32_t i = 0; i < body_len; i++)
		body[i] = (uint8_t)(i ^ (i >> 8));
	buf_message(&b, 'S', body, body_len);
	struct proto_stream stream;
	proto_stream_init(&stream);
	/* Receive-buffer sized chunks, as a worker would feed them. */
	for (uint32_t at = 0; at < b.len; at += 4096) {
		uint32_t len = TERN_MIN(4096u, b.len - at);
		cr_assert_eq(rec_feed(&r, &stream, b.p + at, len, FRAME_MAX_LARGE), 0, "chunk at %u", at);
	}
	cr_assert_eq(r.message_count, 1);
	cr_assert_eq(r.inspected_len, body_len + 5);
	cr_assert_eq(memcmp(r.inspected + 5, body, body_len), 0);
	cr_assert_eq(r.forwarded_len, 0);
	proto_stream_deinit(&stream);
	free(body);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, on_message_error_stops_the_scan_and_is_returned)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	r.actions['Z'] = PROTO_FORWARD | PROTO_INSPECT;
	r.actions['C'] = PROTO_FORWARD;
	r.message_rc = -ECONNABORTED;
	struct buf b;
	buf_init(&b, 128);
	buf_message(&b, 'D', "row", 3);
	buf_message(&b, 'Z', "E", 1);
	uint32_t stop_at = b.len;
	buf_message(&b, 'C', "after", 5);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, b.len, FRAME_MAX_LARGE), -ECONNABORTED);
	cr_assert_eq(r.type_calls, 2, "no message after the failing one is looked at");
	cr_assert_eq(r.message_count, 1);
	assert_bytes(r.forwarded, r.forwarded_len, b.p, stop_at, "forwarded before the stop");
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, positive_on_message_result_does_not_stop_the_scan)
{
	struct rec r;
	rec_init(&r);
	r.actions['Z'] = PROTO_INSPECT;
	r.message_rc = 7;
	struct buf b;
	buf_init(&b, 64);
	buf_message(&b, 'Z', "I", 1);
	buf_message(&b, 'Z', "T", 1);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, b.p, b.len, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.message_count, 2);
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, zero_length_bodies_complete_at_their_header)
{
	struct rec r;
	rec_init(&r);
	r.actions['S'] = PROTO_FORWARD | PROTO_INSPECT;
	r.actions['H'] = PROTO_FORWARD;
	struct buf b;
	buf_init(&b, 64);
	buf_message(&b, 'S', NULL, 0);
	buf_message(&b, 'H', NULL, 0);
	buf_message(&b, 'S', NULL, 0);
	struct proto_stream stream;
	proto_stream_init(&stream);
	/* Each header on its own chunk boundary: the message is complete without any body byte. */
	cr_assert_eq(rec_feed(&r, &stream, b.p, 5, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.message_count, 1);
	cr_assert(proto_stream_is_at_boundary(&stream));
	cr_assert_eq(rec_feed(&r, &stream, b.p + 5, 10, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.message_count, 2);
	cr_assert_eq(stream.messages, 3);
	struct buf want;
	buf_init(&want, 64);
	buf_inspected(&want, 'S', NULL, 0);
	buf_inspected(&want, 'S', NULL, 0);
	assert_bytes(r.inspected, r.inspected_len, want.p, want.len, "inspected");
	assert_bytes(r.forwarded, r.forwarded_len, b.p, b.len, "forwarded");
	buf_free(&want);
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, stream_is_at_a_boundary_only_between_messages)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	struct buf b;
	buf_init(&b, 64);
	buf_message(&b, 'D', "abcdef", 6);
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert(proto_stream_is_at_boundary(&stream));
	for (uint32_t i = 0; i < b.len; i++) {
		cr_assert_eq(rec_feed(&r, &stream, b.p + i, 1, FRAME_MAX_LARGE), 0);
		bool is_last = (i + 1 == b.len);
		cr_assert_eq(proto_stream_is_at_boundary(&stream), is_last, "after byte %u", i);
	}
	cr_assert_eq(stream.messages, 1);
	assert_bytes(r.forwarded, r.forwarded_len, b.p, b.len, "forwarded one byte at a time");
	proto_stream_deinit(&stream);
	buf_free(&b);
	rec_deinit(&r);
}

Test(proto, empty_chunk_is_scanned_without_callbacks)
{
	struct rec r;
	rec_init(&r);
	r.actions['D'] = PROTO_FORWARD;
	struct proto_stream stream;
	proto_stream_init(&stream);
	uint8_t none[1] = {0};
	cr_assert_eq(rec_feed(&r, &stream, none, 0, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.type_calls + r.run_count + r.message_count, 0);
	cr_assert(proto_stream_is_at_boundary(&stream));
	proto_stream_deinit(&stream);
	rec_deinit(&r);
}

/* ---- startup ---- */

struct packet {
	uint8_t p[PROTO_STARTUP_LEN_MAX];
	uint32_t len;
};

static void packet_u32(struct packet *pk, uint32_t v)
{
	cr_assert_leq(pk->len + 4, sizeof(pk->p));
	proto_write_u32(pk->p + pk->len, v);
	pk->len += 4;
}

/* Appends raw bytes, NULs included. */
static void packet_raw(struct packet *pk, const void *data, uint32_t len)
{
	cr_assert_leq(pk->len + len, sizeof(pk->p));
	memcpy(pk->p + pk->len, data, len);
	pk->len += len;
}

static void packet_param(struct packet *pk, const char *name, const char *value)
{
	packet_raw(pk, name, (uint32_t)strlen(name) + 1);
	packet_raw(pk, value, (uint32_t)strlen(value) + 1);
}

Test(proto, startup_3_0_with_parameters_is_parsed)
{
	struct packet pk = {0};
	packet_u32(&pk, PROTO_VERSION_3_0);
	packet_param(&pk, "user", "alice");
	packet_param(&pk, "database", "shop");
	packet_param(&pk, "options", "-c search_path=x");
	packet_param(&pk, "application_name", "");
	packet_raw(&pk, "", 1);
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), 0);
	cr_assert_eq(s.code, PROTO_VERSION_3_0);
	cr_assert_eq(s.param_count, 4);
	cr_assert_str_eq(s.names[0], "user");
	cr_assert_str_eq(s.values[0], "alice");
	cr_assert_str_eq(proto_startup_get(&s, "database"), "shop");
	cr_assert_str_eq(proto_startup_get(&s, "options"), "-c search_path=x");
	cr_assert_str_eq(proto_startup_get(&s, "application_name"), "");
	cr_assert_null(proto_startup_get(&s, "replication"));
	/* The fields point into the caller's packet. */
	cr_assert((const uint8_t *)s.values[0] > pk.p && (const uint8_t *)s.values[0] < pk.p + pk.len);
}

Test(proto, startup_with_no_parameters_is_parsed)
{
	struct packet pk = {0};
	packet_u32(&pk, PROTO_VERSION_3_0);
	packet_raw(&pk, "", 1);
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), 0);
	cr_assert_eq(s.param_count, 0);
}

Test(proto, startup_minor_version_3_2_is_accepted)
{
	struct packet pk = {0};
	packet_u32(&pk, (3u << 16) | 2u);
	packet_param(&pk, "user", "bob");
	packet_raw(&pk, "", 1);
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), 0);
	cr_assert_eq(s.code, (3u << 16) | 2u);
	cr_assert_str_eq(proto_startup_get(&s, "user"), "bob");
}

Test(proto, startup_version_other_than_3_is_not_supported)
{
	uint32_t versions[] = {2u << 16, (2u << 16) | 9u, 4u << 16, 0u};
	for (size_t i = 0; i < TERN_ARRAY_LEN(versions); i++) {
		struct packet pk = {0};
		packet_u32(&pk, versions[i]);
		packet_param(&pk, "user", "bob");
		packet_raw(&pk, "", 1);
		struct proto_startup s;
		cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), -EPROTONOSUPPORT, "version 0x%x", versions[i]);
		cr_assert_eq(s.code, versions[i], "the code is kept for the refusal message");
	}
}

Test(proto, ssl_and_gssenc_requests_are_recognised_only_at_length_4)
{
	uint32_t codes[] = {PROTO_CODE_SSL, PROTO_CODE_GSSENC};
	for (size_t i = 0; i < TERN_ARRAY_LEN(codes); i++) {
		struct packet pk = {0};
		packet_u32(&pk, codes[i]);
		struct proto_startup s;
		cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), 0);
		cr_assert_eq(s.code, codes[i]);
		cr_assert_eq(s.param_count, 0);
		packet_u32(&pk, 0);
		cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), -EPROTO, "code %u with 4 extra bytes", codes[i]);
		cr_assert_eq(proto_startup_parse(pk.p, 5, &s), -EPROTO, "code %u with 1 extra byte", codes[i]);
	}
}

Test(proto, cancel_request_carries_pid_and_key)
{
	struct packet pk = {0};
	packet_u32(&pk, PROTO_CODE_CANCEL);
	packet_u32(&pk, 4242);
	packet_u32(&pk, 0xdeadbeefu);
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), 0);
	cr_assert_eq(s.code, PROTO_CODE_CANCEL);
	cr_assert_eq(s.cancel_pid, 4242);
	static const uint8_t key[] = {0xde, 0xad, 0xbe, 0xef};
	cr_assert_eq(s.cancel_key_len, 4);
	cr_assert_eq(memcmp(s.cancel_key, key, 4), 0);
	cr_assert_eq(proto_startup_parse(pk.p, 11, &s), -EPROTO);
}

Test(proto, cancel_request_of_protocol_3_2_carries_a_key_of_up_to_256_bytes)
{
	struct packet pk = {0};
	packet_u32(&pk, PROTO_CODE_CANCEL);
	packet_u32(&pk, 4242);
	uint8_t key[PROTO_CANCEL_KEY_MAX + 1];
	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)i;
	packet_raw(&pk, (const char *)key, 32);
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), 0);
	cr_assert_eq(s.cancel_key_len, 32);
	cr_assert_eq(memcmp(s.cancel_key, key, 32), 0);
	packet_raw(&pk, (const char *)key + 32, PROTO_CANCEL_KEY_MAX - 32);
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), 0, "256 bytes, PostgreSQL's most");
	cr_assert_eq(s.cancel_key_len, PROTO_CANCEL_KEY_MAX);
	packet_raw(&pk, "x", 1);
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), -EPROTO, "a longer key is malformed");
}

Test(proto, startup_shorter_than_its_code_is_malformed)
{
	uint8_t body[4] = {0, 3, 0, 0};
	struct proto_startup s;
	for (uint32_t len = 0; len < 4; len++)
		cr_assert_eq(proto_startup_parse(body, len, &s), -EPROTO, "len %u", len);
}

Test(proto, startup_without_the_final_empty_name_is_malformed)
{
	struct packet pk = {0};
	packet_u32(&pk, PROTO_VERSION_3_0);
	packet_param(&pk, "user", "alice");
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), -EPROTO);
	/* Nothing at all after the version. */
	cr_assert_eq(proto_startup_parse(pk.p, 4, &s), -EPROTO);
}

Test(proto, startup_with_unterminated_name_or_value_is_malformed)
{
	struct packet pk = {0};
	packet_u32(&pk, PROTO_VERSION_3_0);
	packet_raw(&pk, "user\0ali", 8);
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), -EPROTO, "unterminated value");
	struct packet name_only = {0};
	packet_u32(&name_only, PROTO_VERSION_3_0);
	packet_raw(&name_only, "user\0", 5);
	cr_assert_eq(proto_startup_parse(name_only.p, name_only.len, &s), -EPROTO, "name without value");
	struct packet cut_name = {0};
	packet_u32(&cut_name, PROTO_VERSION_3_0);
	packet_raw(&cut_name, "use", 3);
	cr_assert_eq(proto_startup_parse(cut_name.p, cut_name.len, &s), -EPROTO, "unterminated name");
}

Test(proto, startup_with_bytes_after_the_final_empty_name_is_malformed)
{
	struct packet pk = {0};
	packet_u32(&pk, PROTO_VERSION_3_0);
	packet_param(&pk, "user", "alice");
	packet_raw(&pk, "", 1);
	packet_raw(&pk, "zz", 2);
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), -EPROTO);
}

Test(proto, startup_with_too_many_parameters_is_refused)
{
	struct packet pk = {0};
	packet_u32(&pk, PROTO_VERSION_3_0);
	char name[16];
	for (uint32_t i = 0; i < PROTO_STARTUP_PARAMS_MAX; i++) {
		snprintf(name, sizeof(name), "p%u", i);
		packet_param(&pk, name, "v");
	}
	struct packet full = pk;
	packet_raw(&full, "", 1);
	struct proto_startup s;
	cr_assert_eq(proto_startup_parse(full.p, full.len, &s), 0, "exactly the maximum is accepted");
	cr_assert_eq(s.param_count, PROTO_STARTUP_PARAMS_MAX);
	cr_assert_str_eq(proto_startup_get(&s, "p63"), "v");
	packet_param(&pk, "one", "more");
	packet_raw(&pk, "", 1);
	cr_assert_eq(proto_startup_parse(pk.p, pk.len, &s), -E2BIG);
}

Test(proto, read_cstring_advances_past_the_nul_and_refuses_unterminated_text)
{
	const uint8_t body[] = {'a', 'b', 0, 0, 'c'};
	uint32_t offset = 0;
	cr_assert_str_eq(proto_read_cstring(body, sizeof(body), &offset), "ab");
	cr_assert_eq(offset, 3);
	cr_assert_str_eq(proto_read_cstring(body, sizeof(body), &offset), "");
	cr_assert_eq(offset, 4);
	cr_assert_null(proto_read_cstring(body, sizeof(body), &offset));
	cr_assert_eq(offset, 4, "a failed read leaves the offset alone");
	offset = 5;
	cr_assert_null(proto_read_cstring(body, sizeof(body), &offset));
}

/* ---- errors ---- */

Test(proto, error_fields_are_read_with_the_nonlocalized_severity_preferred)
{
	static const uint8_t body[] = "SFEHLER\0VERROR\0C42P01\0Mrelation \"x\" does not exist\0P15\0";
	struct proto_error_fields f;
	cr_assert_eq(proto_error_parse(body, sizeof(body), &f), 0); /* sizeof includes the final NUL */
	cr_assert_str_eq(f.severity, "ERROR");
	cr_assert_str_eq(f.sqlstate, "42P01");
	cr_assert_str_eq(f.message, "relation \"x\" does not exist");
	static const uint8_t v_first[] = "VFATAL\0SSCHWER\0C28P01\0Mbad\0";
	cr_assert_eq(proto_error_parse(v_first, sizeof(v_first), &f), 0);
	cr_assert_str_eq(f.severity, "FATAL");
	static const uint8_t s_only[] = "SNOTICE\0Mhello\0";
	cr_assert_eq(proto_error_parse(s_only, sizeof(s_only), &f), 0);
	cr_assert_str_eq(f.severity, "NOTICE");
	cr_assert_str_eq(f.sqlstate, "");
}

Test(proto, error_fields_too_long_are_truncated)
{
	uint8_t body[600];
	uint32_t len = 0;
	body[len++] = 'M';
	memset(body + len, 'm', 400);
	len += 400;
	body[len++] = 0;
	memcpy(body + len, "C1234567\0", 9);
	len += 9;
	memcpy(body + len, "VAVERYLONGSEVERITYNAME\0", 23);
	len += 23;
	body[len++] = 0;
	struct proto_error_fields f;
	cr_assert_eq(proto_error_parse(body, len, &f), 0);
	cr_assert_eq(strlen(f.message), sizeof(f.message) - 1);
	cr_assert_eq(f.message[0], 'm');
	cr_assert_str_eq(f.sqlstate, "12345");
	cr_assert_str_eq(f.severity, "AVERYLONGSEVERI");
}

Test(proto, error_with_an_unterminated_field_is_malformed)
{
	static const uint8_t body[] = {'C', '4', '2'};
	struct proto_error_fields f;
	cr_assert_eq(proto_error_parse(body, sizeof(body), &f), -EPROTO);
	cr_assert_eq(proto_error_parse(body, 1, &f), -EPROTO, "a field code with no text");
	cr_assert_eq(proto_error_parse(body, 0, &f), 0, "an empty body has no fields");
	cr_assert_str_eq(f.message, "");
}

/* ---- builders ---- */

Test(proto, built_error_parses_back)
{
	uint8_t out[512];
	size_t len = proto_build_error(out, sizeof(out), "FATAL", "53300", "too many clients", "try later");
	cr_assert_gt(len, 5);
	cr_assert_eq(out[0], 'E');
	cr_assert_eq(proto_read_u32(out + 1), len - 1);
	cr_assert_eq(out[len - 1], 0, "the field list ends with a NUL");
	struct proto_error_fields f;
	cr_assert_eq(proto_error_parse(out + 5, (uint32_t)len - 5, &f), 0);
	cr_assert_str_eq(f.severity, "FATAL");
	cr_assert_str_eq(f.sqlstate, "53300");
	cr_assert_str_eq(f.message, "too many clients");
	/* The hint is its own 'H' field. */
	cr_assert_not_null(memmem(out, len, "Htry later\0", 11));
	/* The same message scans as one complete frame. */
	struct rec r;
	rec_init(&r);
	r.actions['E'] = PROTO_INSPECT;
	struct proto_stream stream;
	proto_stream_init(&stream);
	cr_assert_eq(rec_feed(&r, &stream, out, (uint32_t)len, FRAME_MAX_LARGE), 0);
	cr_assert_eq(r.message_count, 1);
	cr_assert(proto_stream_is_at_boundary(&stream));
	proto_stream_deinit(&stream);
	rec_deinit(&r);
}

Test(proto, built_error_without_hint_has_exact_bytes)
{
	static const uint8_t want[] = "E\0\0\0\x1dSERROR\0VERROR\0C08P01\0Mx\0";
	uint8_t out[64];
	size_t len = proto_build_error(out, sizeof(out), "ERROR", "08P01", "x", NULL);
	/* sizeof(want) counts the string's own NUL, which is the list terminator here. */
	assert_bytes(out, (uint32_t)len, want, sizeof(want), "ErrorResponse");
}

Test(proto, built_ready_has_exact_bytes)
{
	static const uint8_t want[] = {'Z', 0, 0, 0, 5, 'T'};
	uint8_t out[16];
	size_t len = proto_build_ready(out, sizeof(out), 'T');
	assert_bytes(out, (uint32_t)len, want, sizeof(want), "ReadyForQuery");
}

Test(proto, built_auth_has_exact_bytes)
{
	static const uint8_t want_ok[] = {'R', 0, 0, 0, 8, 0, 0, 0, 0};
	uint8_t out[64];
	size_t len = proto_build_auth(out, sizeof(out), PROTO_AUTH_OK, NULL, 0);
	assert_bytes(out, (uint32_t)len, want_ok, sizeof(want_ok), "AuthenticationOk");
	static const uint8_t want_sasl[] = "R\0\0\0\x17\0\0\0\x0aSCRAM-SHA-256\0";
	len = proto_build_auth(out, sizeof(out), PROTO_AUTH_SASL, "SCRAM-SHA-256\0", 15);
	assert_bytes(out, (uint32_t)len, want_sasl, sizeof(want_sasl), "AuthenticationSASL");
	static const uint8_t want_md5[] = {'R', 0, 0, 0, 12, 0, 0, 0, 5, 1, 2, 3, 4};
	len = proto_build_auth(out, sizeof(out), PROTO_AUTH_MD5, "\x01\x02\x03\x04", 4);
	assert_bytes(out, (uint32_t)len, want_md5, sizeof(want_md5), "AuthenticationMD5Password");
}

Test(proto, built_parameter_status_has_exact_bytes)
{
	static const uint8_t want[] = "S\0\0\0\x15TimeZone\0Etc/UTC";
	uint8_t out[64];
	size_t len = proto_build_parameter_status(out, sizeof(out), "TimeZone", "Etc/UTC");
	assert_bytes(out, (uint32_t)len, want, sizeof(want), "ParameterStatus");
}

Test(proto, built_key_data_has_exact_bytes)
{
	static const uint8_t want[] = {'K', 0, 0, 0, 12, 0, 0, 0x30, 0x39, 0xca, 0xfe, 0xba, 0xbe};
	static const uint8_t key[] = {0xca, 0xfe, 0xba, 0xbe};
	uint8_t out[64];
	size_t len = proto_build_key_data(out, sizeof(out), 12345, key, sizeof(key));
	assert_bytes(out, (uint32_t)len, want, sizeof(want), "BackendKeyData");
	uint8_t long_key[32];
	memset(long_key, 0x5a, sizeof(long_key));
	len = proto_build_key_data(out, sizeof(out), 7, long_key, sizeof(long_key));
	cr_assert_eq(len, 1 + 4 + 4 + 32, "protocol 3.2's key: %zu", len);
	cr_assert_eq(memcmp(out + 9, long_key, 32), 0);
}

Test(proto, built_query_has_exact_bytes)
{
	static const uint8_t want[] = "Q\0\0\0\x0dSELECT 1";
	uint8_t out[32];
	size_t len = proto_build_query(out, sizeof(out), "SELECT 1");
	assert_bytes(out, (uint32_t)len, want, sizeof(want), "Query");
}

/* Calls one builder with a given cap; `which` picks it. */
static size_t build_with_cap(int which, uint8_t *out, size_t cap)
{
	switch (which) {
	case 0:
		return proto_build_error(out, cap, "ERROR", "XX000", "internal", "a hint");
	case 1:
		return proto_build_auth(out, cap, PROTO_AUTH_SASL_CONTINUE, "r=abc,s=def,i=4096", 18);
	case 2:
		return proto_build_parameter_status(out, cap, "server_version", "17.2");
	case 3:
		return proto_build_key_data(out, cap, 1, (const uint8_t *)"\0\0\0\2", 4);
	case 4:
		return proto_build_ready(out, cap, 'I');
	default:
		return proto_build_query(out, cap, "SELECT now()");
	}
}

Test(proto, builders_return_zero_and_stay_inside_a_cap_too_small)
{
	for (int which = 0; which < 6; which++) {
		uint8_t full[256];
		size_t need = build_with_cap(which, full, sizeof(full));
		cr_assert_gt(need, 5, "builder %d", which);
		cr_assert_eq(build_with_cap(which, full, need), need, "builder %d with an exact cap", which);
		for (size_t cap = 0; cap < need; cap++) {
			uint8_t out[256];
			memset(out, 0xa5, sizeof(out));
			cr_assert_eq(build_with_cap(which, out, cap), 0, "builder %d, cap %zu of %zu", which, cap, need);
			for (size_t i = cap; i < sizeof(out); i++)
				cr_assert_eq(out[i], 0xa5, "builder %d, cap %zu: wrote byte %zu", which, cap, i);
		}
	}
}

static unsigned inspect_small_on_type(void *ctx, uint8_t type)
{
	(void)ctx;
	(void)type;
	return PROTO_FORWARD | PROTO_INSPECT_SMALL;
}

static int inspect_small_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t len)
{
	(void)type;
	(void)body;
	*(uint32_t *)ctx += 1;
	cr_assert_leq(len, PROTO_INSPECT_LEN_MAX);
	return 0;
}

static void inspect_small_forward(void *ctx, uint32_t offset, uint32_t len)
{
	(void)ctx;
	(void)offset;
	(void)len;
}

/* PROTO_INSPECT_SMALL inspects short messages and forwards long ones uninspected, without an error. */
Test(proto, inspect_small_passes_over_long_messages_without_error)
{
	static uint8_t chunk[PROTO_INSPECT_LEN_MAX + 64];
	uint32_t big = PROTO_INSPECT_LEN_MAX + 1;
	chunk[0] = 'Q';
	proto_write_u32(chunk + 1, big + 4);
	memset(chunk + 5, 'x', big);
	uint32_t small_at = 5 + big;
	chunk[small_at] = 'Q';
	proto_write_u32(chunk + small_at + 1, 4 + 3);
	memcpy(chunk + small_at + 5, "ab", 3);
	uint32_t total = small_at + 5 + 3;
	struct proto_stream st;
	proto_stream_init(&st);
	uint32_t inspected = 0;
	struct proto_scan_ops ops = {inspect_small_on_type, inspect_small_on_message, inspect_small_forward, NULL};
	cr_assert_eq(proto_stream_feed(&st, chunk, total, UINT32_MAX, &ops, &inspected), 0);
	cr_assert_eq(inspected, 1, "only the short message is inspected");
	proto_stream_deinit(&st);
}

/* Held messages: never forwarded, assembled past the inspect limit, located in their chunk when whole. */
static const struct proto_stream *held_stream;
static bool held_in_chunk[8];
static uint32_t held_offset[8];
static uint32_t held_count;

static uint32_t held_feed_seq[8];

static int held_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t body_len)
{
	cr_assert_lt(held_count, 8u);
	held_feed_seq[held_count] = proto_stream_feed_seq(held_stream);
	held_in_chunk[held_count] = proto_stream_message_offset(held_stream, &held_offset[held_count]);
	held_count++;
	return rec_on_message(ctx, type, body, body_len);
}

static const struct proto_scan_ops held_ops = {
	.on_type = rec_on_type,
	.on_message = held_on_message,
	.forward = rec_forward,
};

Test(proto, held_messages_are_not_forwarded_and_may_pass_the_inspect_limit)
{
	struct rec r;
	rec_init(&r);
	r.actions['B'] = PROTO_HOLD;
	r.actions['E'] = PROTO_FORWARD;
	uint32_t big = PROTO_INSPECT_LEN_MAX + 1000;
	uint8_t *body = calloc(1, big);
	cr_assert(body != NULL);
	body[big - 1] = 0x5a;
	struct buf b;
	buf_init(&b, 2 * big);
	buf_message(&b, 'E', "ab", 2);
	buf_message(&b, 'B', "xyz", 3);
	buf_message(&b, 'B', body, big);
	buf_message(&b, 'E', "c", 1);
	struct proto_stream stream;
	proto_stream_init(&stream);
	held_stream = &stream;
	held_count = 0;
	/* The first 20 bytes in one chunk (E and the small B whole), the rest in 4 kB chunks. */
	r.chunk = b.p;
	r.chunk_len = 20;
	cr_assert_eq(proto_stream_feed(&stream, b.p, 20, FRAME_MAX_LARGE, &held_ops, &r), 0);
	for (uint32_t at = 20; at < b.len; at += 4096) {
		uint32_t len = TERN_MIN(4096u, b.len - at);
		r.chunk = b.p + at;
		r.chunk_len = len;
		cr_assert_eq(proto_stream_feed(&stream, b.p + at, len, FRAME_MAX_LARGE, &held_ops, &r), 0);
	}
	cr_assert_eq(held_count, 2u);
	cr_assert(held_in_chunk[0], "the small held message lies whole in the first chunk");
	cr_assert_eq(held_offset[0], 7u);
	cr_assert_not(held_in_chunk[1], "the big one was assembled");
	/* A pointer into a chunk is good while the feed_seq it was noted with is the stream's: odd during a
	 * feed, another value in every later feed, and changed once the feed returns. */
	cr_assert(held_feed_seq[0] % 2 == 1 && held_feed_seq[1] % 2 == 1, "odd while a chunk is fed");
	cr_assert_neq(held_feed_seq[0], held_feed_seq[1], "each feed its own");
	cr_assert_neq(proto_stream_feed_seq(&stream), held_feed_seq[1], "not the same once the feed returned");
	cr_assert_eq(r.inspected_len, (5 + 3) + (5 + big));
	cr_assert_eq(r.inspected[8 + 5 + big - 1], 0x5a);
	cr_assert_eq(r.forwarded_len, 7u + 6u, "only the E messages are forwarded");
	cr_assert_null(stream.assembly, "a big assembly is not kept");
	proto_stream_deinit(&stream);
	free(body);
	buf_free(&b);
	rec_deinit(&r);
}

/* PROTO_HOLD_HEAD: a long held message's head goes to on_head; its answer streams or drops the rest. */
static int head_answer;
static uint32_t head_body_len;
static uint8_t head_seen[PROTO_HOLD_HEAD_LEN];
static uint32_t head_calls;

static int head_on_head(void *ctx, uint8_t type, const uint8_t *head, uint32_t head_len, uint32_t body_len)
{
	struct rec *r = ctx;
	cr_assert_eq(type, 'B');
	cr_assert_eq(head_len, PROTO_HOLD_HEAD_LEN);
	memcpy(head_seen, head, head_len);
	head_body_len = body_len;
	head_calls++;
	rec_event_add(r, 'H', type, head_len);
	return head_answer;
}

static const struct proto_scan_ops head_ops = {
	.on_type = rec_on_type,
	.on_message = rec_on_message,
	.forward = rec_forward,
	.on_head = head_on_head,
};

static void head_feed_in_chunks(struct rec *r, const struct buf *b, uint32_t chunk_len)
{
	struct proto_stream stream;
	proto_stream_init(&stream);
	for (uint32_t at = 0; at < b->len; at += chunk_len) {
		uint32_t len = TERN_MIN(chunk_len, b->len - at);
		r->chunk = b->p + at;
		r->chunk_len = len;
		r->run_count = r->event_count = 0; /* per chunk: one-byte chunks make thousands */
		cr_assert_eq(proto_stream_feed(&stream, b->p + at, len, FRAME_MAX_LARGE, &head_ops, r), 0);
	}
	cr_assert(proto_stream_is_at_boundary(&stream));
	proto_stream_deinit(&stream);
}

Test(proto, hold_head_streams_or_drops_the_rest_of_a_long_message)
{
	uint32_t big = 5000;
	uint8_t *body = malloc(big);
	cr_assert(body != NULL);
	for (uint32_t i = 0; i < big; i++)
		body[i] = (uint8_t)(i * 7);
	struct buf b;
	buf_init(&b, 2 * big);
	buf_message(&b, 'B', "short", 5); /* at most PROTO_HOLD_HEAD_LEN: held whole, as PROTO_HOLD */
	buf_message(&b, 'B', body, big);
	buf_message(&b, 'E', "e", 1);
	uint32_t chunk_lengths[] = {1, 700, 1024, 4096, 100000};
	for (uint32_t c = 0; c < TERN_ARRAY_LEN(chunk_lengths); c++) {
		for (int answer = 0; answer <= 1; answer++) {
			struct rec r;
			rec_init(&r);
			r.actions['B'] = PROTO_HOLD | PROTO_HOLD_HEAD;
			r.actions['E'] = PROTO_FORWARD;
			head_answer = answer ? PROTO_FORWARD : 0;
			head_calls = 0;
			head_feed_in_chunks(&r, &b, chunk_lengths[c]);
			cr_assert_eq(r.message_count, 1u, "the short one is handed over whole");
			cr_assert_eq(r.inspected_len, 5u + 5u);
			cr_assert_eq(head_calls, 1u);
			cr_assert_eq(head_body_len, big);
			cr_assert_eq(memcmp(head_seen, body, PROTO_HOLD_HEAD_LEN), 0);
			uint32_t rest = big - PROTO_HOLD_HEAD_LEN;
			if (answer) {
				cr_assert_eq(r.forwarded_len, rest + 6u, "chunk %u: the rest, then E", chunk_lengths[c]);
				cr_assert_eq(memcmp(r.forwarded, body + PROTO_HOLD_HEAD_LEN, rest), 0);
			} else {
				cr_assert_eq(r.forwarded_len, 6u, "chunk %u: only E", chunk_lengths[c]);
			}
			cr_assert_eq(r.forwarded[r.forwarded_len - 6], 'E');
			rec_deinit(&r);
		}
	}
	free(body);
	buf_free(&b);
}
