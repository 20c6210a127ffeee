/*
 * fuzz_proto_stream.c — proto_stream_feed over a message stream cut into chunks at points the input
 * chooses, against a reference model that walks the whole stream at once.
 *
 * Input layout:
 *   byte 0  which type classes are forwarded (bit (type & 7))
 *   byte 1  which type classes are inspected (bit ((type >> 3) & 7)); an inspected type with its top
 *           bit set is held (PROTO_HOLD: not forwarded, no inspect limit) instead
 *   byte 2  bits 0-1: frame_len_max choice; bits 2-4: number of chunk-length bytes (0 = one chunk);
 *           bit 5: on_message refuses messages of the type in byte 3
 *   byte 3  the refused type
 *   then that many chunk lengths (0 = an empty chunk, 255 = the rest), used in turn; then the stream.
 *
 * Checked: forwarded runs lie inside their chunk, come in increasing order and never overlap; they cover
 * exactly the bytes of forwarded messages; each inspected content is the message body, whose length is
 * the header's length minus 4, whether it arrived whole or assembled across chunks; a held message said
 * to lie whole in its chunk is there at the offset given; the error returned
 * is the one the model predicts, at the chunk the model predicts.
 */
#include "proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_HEADER_LEN 4u
#define FUZZ_CHUNK_LENGTHS_MAX 7u
/* Enough for any input libFuzzer makes by default (4096 bytes of 5-byte messages at least). */
#define FUZZ_MESSAGES_MAX 1024u

#define FUZZ_IS_SEEN (PROTO_INSPECT | PROTO_HOLD)

#define FUZZ_CHECK(cond)                                                                              \
	do {                                                                                          \
		if (!(cond)) {                                                                        \
			fprintf(stderr, "fuzz_proto_stream: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort();                                                                      \
		}                                                                                     \
	} while (0)

/* One message as the model sees it: where it starts in the stream and where it ends (clipped). */
struct fuzz_message {
	uint32_t start, end;
	uint8_t type;
	unsigned action;
	bool is_complete;
};

struct fuzz_model {
	struct fuzz_message messages[FUZZ_MESSAGES_MAX];
	uint32_t count;
	int error;            /* what the scan must return, 0 for none */
	uint32_t error_at;    /* stream offset of the byte whose arrival raises it */
	uint32_t forward_end; /* forwarded bytes cannot reach past this when the scan stops early */
};

struct fuzz_state {
	const uint8_t *stream;
	uint32_t stream_len;
	uint8_t forward_mask, inspect_mask;
	bool refuse_enabled;
	uint8_t refused_type;
	const struct fuzz_model *model;
	uint32_t chunk_start, chunk_len; /* the chunk being fed, as a stream offset */
	const uint8_t *chunk;
	const struct proto_stream *scan;
	uint32_t forwarded_until;        /* every forwarded run starts at or after this stream offset */
	uint32_t forwarded_total;
	uint32_t next_type;    /* index of the next message on_type must announce */
	uint32_t next_inspect; /* index of the message whose content on_message must see next */
	uint32_t inspected;
	uint32_t forward_message; /* no message before this index ends after forwarded_until */
};

static unsigned fuzz_action(uint8_t forward_mask, uint8_t inspect_mask, uint8_t type)
{
	unsigned action = 0;
	if ((forward_mask >> (type & 7u)) & 1u)
		action |= PROTO_FORWARD;
	if ((inspect_mask >> ((type >> 3) & 7u)) & 1u)
		action = (type & 0x80u) ? PROTO_HOLD : (action | PROTO_INSPECT);
	return action;
}

static void fuzz_model_build(struct fuzz_model *model, const struct fuzz_state *state, uint64_t frame_len_max)
{
	memset(model, 0, sizeof(*model));
	const uint8_t *s = state->stream;
	uint32_t len = state->stream_len;
	uint32_t at = 0;
	while (at < len) {
		FUZZ_CHECK(model->count < FUZZ_MESSAGES_MAX);
		struct fuzz_message *m = &model->messages[model->count++];
		m->start = at;
		m->type = s[at];
		m->action = fuzz_action(state->forward_mask, state->inspect_mask, m->type);
		if (len - at < PROTO_HEADER_LEN) {
			m->end = len;
			break;
		}
		uint32_t length = proto_read_u32(s + at + 1);
		uint32_t header_done = at + PROTO_HEADER_LEN - 1; /* the byte that completes the header */
		if (length < 4) {
			model->error = -EPROTO;
		} else if ((uint64_t)length + 1 > frame_len_max) {
			model->error = -EMSGSIZE;
		} else if ((m->action & PROTO_INSPECT) && length - 4 > PROTO_INSPECT_LEN_MAX) {
			model->error = -EMSGSIZE;
		}
		if (model->error != 0) {
			m->end = at + PROTO_HEADER_LEN;
			model->error_at = header_done;
			break;
		}
		uint64_t end = (uint64_t)at + 1 + length;
		m->is_complete = end <= len;
		m->end = m->is_complete ? (uint32_t)end : len;
		if (m->is_complete && (m->action & FUZZ_IS_SEEN) && state->refuse_enabled &&
		    m->type == state->refused_type) {
			model->error = -ECANCELED;
			/* An empty body completes with its header. */
			model->error_at = m->end - 1;
			break;
		}
		at = m->end;
	}
	model->forward_end = len;
}

static unsigned fuzz_on_type(void *ctx, uint8_t type)
{
	struct fuzz_state *state = ctx;
	const struct fuzz_model *model = state->model;
	FUZZ_CHECK(state->next_type < model->count);
	const struct fuzz_message *m = &model->messages[state->next_type++];
	FUZZ_CHECK(m->type == type);
	/* Announced while its first byte is in the current chunk. */
	FUZZ_CHECK(m->start >= state->chunk_start && m->start < state->chunk_start + state->chunk_len);
	return m->action;
}

static int fuzz_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t body_len)
{
	struct fuzz_state *state = ctx;
	const struct fuzz_model *model = state->model;
	/* The next complete inspected message in stream order. */
	while (state->next_inspect < model->count &&
	       !(model->messages[state->next_inspect].action & FUZZ_IS_SEEN))
		state->next_inspect++;
	FUZZ_CHECK(state->next_inspect < model->count);
	const struct fuzz_message *m = &model->messages[state->next_inspect++];
	FUZZ_CHECK(m->is_complete);
	FUZZ_CHECK(m->type == type);
	uint32_t header_length = proto_read_u32(state->stream + m->start + 1);
	FUZZ_CHECK(body_len == header_length - 4);
	FUZZ_CHECK(body_len == m->end - m->start - PROTO_HEADER_LEN);
	FUZZ_CHECK(body_len <= PROTO_INSPECT_LEN_MAX || (m->action & PROTO_HOLD));
	uint32_t offset;
	if (proto_stream_message_offset(state->scan, &offset)) {
		FUZZ_CHECK(state->chunk_start + offset == m->start);
		FUZZ_CHECK(offset + PROTO_HEADER_LEN + body_len <= state->chunk_len);
		FUZZ_CHECK(memcmp(state->chunk + offset, state->stream + m->start, PROTO_HEADER_LEN + body_len) == 0);
	} else {
		FUZZ_CHECK(m->start < state->chunk_start); /* it began in an earlier chunk */
	}
	FUZZ_CHECK(body != NULL || body_len == 0);
	if (body_len > 0)
		FUZZ_CHECK(memcmp(body, state->stream + m->start + PROTO_HEADER_LEN, body_len) == 0);
	/* Delivered when its last byte arrives, within the current chunk. */
	FUZZ_CHECK(m->end > state->chunk_start && m->end <= state->chunk_start + state->chunk_len);
	/* Whatever is forwarded of it or before it has already gone out. */
	if (m->action & PROTO_FORWARD)
		FUZZ_CHECK(state->forwarded_until == m->end);
	state->inspected++;
	if (state->refuse_enabled && type == state->refused_type)
		return -ECANCELED;
	return 0;
}

/* True when every byte of [from, to) belongs to a forwarded message. `first` is where the search starts:
 * forwarded runs only move forward, so the caller keeps it past the messages that end before `from`. */
static bool fuzz_range_is_forwarded(const struct fuzz_model *model, uint32_t *first, uint32_t from, uint32_t to)
{
	while (*first < model->count && model->messages[*first].end <= from)
		(*first)++;
	for (uint32_t i = *first; i < model->count && from < to; i++) {
		const struct fuzz_message *m = &model->messages[i];
		if (m->start > from || !(m->action & PROTO_FORWARD))
			return false;
		from = m->end;
	}
	return from >= to;
}

static void fuzz_forward(void *ctx, uint32_t offset, uint32_t len)
{
	struct fuzz_state *state = ctx;
	FUZZ_CHECK(len > 0);
	FUZZ_CHECK(offset < state->chunk_len && len <= state->chunk_len - offset);
	uint32_t from = state->chunk_start + offset;
	FUZZ_CHECK(from >= state->forwarded_until);
	FUZZ_CHECK(fuzz_range_is_forwarded(state->model, &state->forward_message, from, from + len));
	state->forwarded_until = from + len;
	state->forwarded_total += len;
}

static const struct proto_scan_ops fuzz_ops = {
	.on_type = fuzz_on_type,
	.on_message = fuzz_on_message,
	.forward = fuzz_forward,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < FUZZ_HEADER_LEN)
		return 0;
	static const uint64_t frame_len_maxes[] = {UINT64_MAX, 1u << 20, 300, 5};
	struct fuzz_state state = {
		.forward_mask = data[0],
		.inspect_mask = data[1],
		.refuse_enabled = (data[2] >> 5) & 1u,
		.refused_type = data[3],
	};
	uint64_t frame_len_max = frame_len_maxes[data[2] & 3u];
	size_t chunk_lengths_count = (data[2] >> 2) & FUZZ_CHUNK_LENGTHS_MAX;
	if (size < FUZZ_HEADER_LEN + chunk_lengths_count)
		return 0;
	const uint8_t *chunk_lengths = data + FUZZ_HEADER_LEN;
	bool has_progress = false;
	for (size_t i = 0; i < chunk_lengths_count; i++)
		has_progress = has_progress || chunk_lengths[i] != 0;
	if (!has_progress)
		chunk_lengths_count = 0; /* all empty chunks would never end */
	state.stream = data + FUZZ_HEADER_LEN + chunk_lengths_count;
	state.stream_len = (uint32_t)(size - FUZZ_HEADER_LEN - chunk_lengths_count);

	static struct fuzz_model model; /* 16 kB: keep it off the stack */
	fuzz_model_build(&model, &state, frame_len_max);
	state.model = &model;

	struct proto_stream stream;
	proto_stream_init(&stream);
	int rc = 0;
	uint32_t at = 0;
	size_t turn = 0;
	uint64_t complete_before = 0;
	do {
		uint32_t chunk_len = state.stream_len - at;
		if (chunk_lengths_count > 0) {
			uint8_t want = chunk_lengths[turn++ % chunk_lengths_count];
			if (want != 255)
				chunk_len = TERN_MIN(chunk_len, (uint32_t)want);
		}
		/* A copy of exactly the chunk, so reading past it is caught by AddressSanitizer. */
		uint8_t *chunk = malloc(chunk_len > 0 ? chunk_len : 1);
		FUZZ_CHECK(chunk != NULL);
		memcpy(chunk, state.stream + at, chunk_len);
		state.chunk_start = at;
		state.chunk_len = chunk_len;
		state.chunk = chunk;
		state.scan = &stream;
		rc = proto_stream_feed(&stream, chunk, chunk_len, frame_len_max, &fuzz_ops, &state);
		free(chunk);
		if (rc < 0) {
			/* Stopped where the model says, and by the same error. */
			FUZZ_CHECK(rc == model.error);
			FUZZ_CHECK(model.error_at >= at && model.error_at < at + chunk_len);
			break;
		}
		FUZZ_CHECK(rc == 0);
		FUZZ_CHECK(model.error == 0 || model.error_at >= at + chunk_len);
		FUZZ_CHECK(stream.messages >= complete_before);
		complete_before = stream.messages;
		at += chunk_len;
	} while (at < state.stream_len);

	if (rc == 0) {
		FUZZ_CHECK(model.error == 0);
		uint32_t expected_forwarded = 0, expected_inspected = 0, complete = 0;
		for (uint32_t i = 0; i < model.count; i++) {
			const struct fuzz_message *m = &model.messages[i];
			if (m->action & PROTO_FORWARD)
				expected_forwarded += m->end - m->start;
			if ((m->action & FUZZ_IS_SEEN) && m->is_complete)
				expected_inspected++;
			complete += m->is_complete;
		}
		FUZZ_CHECK(state.forwarded_total == expected_forwarded);
		FUZZ_CHECK(state.inspected == expected_inspected);
		FUZZ_CHECK(stream.messages == complete);
		bool ends_at_boundary = model.count == 0 || model.messages[model.count - 1].is_complete;
		FUZZ_CHECK(proto_stream_is_at_boundary(&stream) == ends_at_boundary);
		FUZZ_CHECK(state.next_type == model.count);
	} else {
		FUZZ_CHECK(state.forwarded_until <= model.forward_end);
	}
	proto_stream_deinit(&stream);
	return 0;
}
