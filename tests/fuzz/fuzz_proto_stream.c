/*
 * fuzz_proto_stream.c — proto_stream_feed over a message stream cut into chunks at points the input
 * chooses, against a reference model that walks the whole stream at once.
 *
 * Input layout:
 *   byte 0  which type classes are forwarded (bit (type & 7))
 *   byte 1  which type classes are inspected (bit ((type >> 3) & 7)); an inspected type with its top
 *           bit set is held (PROTO_HOLD: not forwarded, no inspect limit) instead
 *   byte 2  bits 0-1: frame_len_max choice; bits 2-4: number of chunk-length bytes (0 = one chunk);
 *           bit 5: on_message refuses messages of the type in byte 3;
 *           bit 6: a held type with its bit 6 set (0x40) is also PROTO_HOLD_HEAD, and on_head answers
 *           PROTO_FORWARD for it when its forward class (byte 0) is set, 0 otherwise;
 *           bit 7: on_head refuses (an error) messages of the type in byte 3
 *   byte 3  the refused type
 *   then that many chunk lengths (0 = an empty chunk, 255 = the rest), used in turn; then the stream.
 *
 * Checked: forwarded runs lie inside their chunk, come in increasing order and never overlap; they cover
 * exactly the bytes of forwarded messages; each inspected content is the message body, whose length is
 * the header's length minus 4, whether it arrived whole or assembled across chunks; a held message said
 * to lie whole in its chunk is there at the offset given; the error returned
 * is the one the model predicts, at the chunk the model predicts.
 * PROTO_HOLD_HEAD: a message whose body is over PROTO_HOLD_HEAD_LEN reaches on_head once, in the chunk
 * holding its PROTO_HOLD_HEAD_LEN-th body byte, with those bytes and the whole body's length, and never
 * on_message; the rest of its body counts as forwarded exactly when on_head answered PROTO_FORWARD; a
 * shorter one reaches on_message whole, as PROTO_HOLD. Every callback finds all that was forwarded
 * before its message already out, and callbacks come one per message in stream order.
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
/* Distinct from on_message's -ECANCELED, so the check says which callback stopped the scan. */
#define FUZZ_HEAD_REFUSED (-ECONNABORTED)

#define FUZZ_CHECK(cond)                                                                              \
	do {                                                                                          \
		if (!(cond)) {                                                                        \
			fprintf(stderr, "fuzz_proto_stream: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort();                                                                      \
		}                                                                                     \
	} while (0)

/* Which callback a message gets from the scan. */
enum fuzz_callback {
	FUZZ_CALLBACK_NONE,
	FUZZ_CALLBACK_MESSAGE, /* on_message, with the whole body */
	FUZZ_CALLBACK_HEAD,    /* on_head, with the first PROTO_HOLD_HEAD_LEN body bytes */
};

/* One message as the model sees it: where it starts in the stream and where it ends (clipped). */
struct fuzz_message {
	uint32_t start, end;
	uint8_t type;
	unsigned action;
	bool is_complete;
	enum fuzz_callback callback;
	int head_answer;          /* what on_head returns for it (FUZZ_CALLBACK_HEAD) */
	bool is_forwarded;        /* its bytes [forward_from, end) go out by reference */
	uint32_t forward_from;    /* its start, or where a PROTO_HOLD_HEAD message's rest begins */
	uint32_t forwarded_before; /* bytes forwarded of the messages before it */
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
	bool hold_head_enabled;
	bool head_refuse_enabled;
	uint8_t refused_type;
	const struct fuzz_model *model;
	uint32_t chunk_start, chunk_len; /* the chunk being fed, as a stream offset */
	const uint8_t *chunk;
	const struct proto_stream *scan;
	uint32_t forwarded_until;        /* every forwarded run starts at or after this stream offset */
	uint32_t forwarded_total;
	uint32_t next_type;     /* index of the next message on_type must announce */
	uint32_t next_callback; /* index of the message on_message or on_head must see next */
	uint32_t inspected;
	uint32_t heads;
	uint32_t forward_message; /* no message before this index ends after forwarded_until */
};

static bool fuzz_is_forward_class(uint8_t forward_mask, uint8_t type)
{
	return (forward_mask >> (type & 7u)) & 1u;
}

static unsigned fuzz_action(const struct fuzz_state *state, uint8_t type)
{
	unsigned action = 0;
	if (fuzz_is_forward_class(state->forward_mask, type))
		action |= PROTO_FORWARD;
	if ((state->inspect_mask >> ((type >> 3) & 7u)) & 1u) {
		action = (type & 0x80u) ? PROTO_HOLD : (action | PROTO_INSPECT);
		if ((action & PROTO_HOLD) && state->hold_head_enabled && (type & 0x40u))
			action |= PROTO_HOLD_HEAD;
	}
	return action;
}

/* on_head's answer for a type: a held type's forward class, unused by PROTO_HOLD, says what becomes of
 * the rest. */
static int fuzz_head_answer(const struct fuzz_state *state, uint8_t type)
{
	if (state->head_refuse_enabled && type == state->refused_type)
		return FUZZ_HEAD_REFUSED;
	return fuzz_is_forward_class(state->forward_mask, type) ? (int)PROTO_FORWARD : 0;
}

static void fuzz_model_build(struct fuzz_model *model, const struct fuzz_state *state, uint64_t frame_len_max)
{
	memset(model, 0, sizeof(*model));
	const uint8_t *s = state->stream;
	uint32_t len = state->stream_len;
	uint32_t at = 0;
	uint32_t forwarded = 0;
	while (at < len) {
		FUZZ_CHECK(model->count < FUZZ_MESSAGES_MAX);
		struct fuzz_message *m = &model->messages[model->count++];
		m->start = at;
		m->type = s[at];
		m->action = fuzz_action(state, m->type);
		m->is_forwarded = (m->action & PROTO_FORWARD) != 0;
		m->forward_from = at;
		m->forwarded_before = forwarded;
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
		if ((m->action & PROTO_HOLD_HEAD) && length - 4 > PROTO_HOLD_HEAD_LEN) {
			/* Not assembled whole: on_head once its head has arrived, never on_message. */
			uint64_t head_end = (uint64_t)at + PROTO_HEADER_LEN + PROTO_HOLD_HEAD_LEN;
			if (head_end <= len) {
				m->callback = FUZZ_CALLBACK_HEAD;
				m->head_answer = fuzz_head_answer(state, m->type);
				if (m->head_answer < 0) {
					model->error = m->head_answer;
					model->error_at = (uint32_t)head_end - 1;
					break;
				}
				m->is_forwarded = m->head_answer == (int)PROTO_FORWARD;
				m->forward_from = (uint32_t)head_end;
			}
		} else if (m->is_complete && (m->action & FUZZ_IS_SEEN)) {
			m->callback = FUZZ_CALLBACK_MESSAGE;
			if (state->refuse_enabled && m->type == state->refused_type) {
				model->error = -ECANCELED;
				/* An empty body completes with its header. */
				model->error_at = m->end - 1;
				break;
			}
		}
		if (m->is_forwarded)
			forwarded += m->end - m->forward_from;
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

/* The next message in stream order that gets a callback, which must be of the kind given. */
static const struct fuzz_message *fuzz_next_callback(struct fuzz_state *state, enum fuzz_callback callback)
{
	const struct fuzz_model *model = state->model;
	while (state->next_callback < model->count &&
	       model->messages[state->next_callback].callback == FUZZ_CALLBACK_NONE)
		state->next_callback++;
	FUZZ_CHECK(state->next_callback < model->count);
	const struct fuzz_message *m = &model->messages[state->next_callback++];
	FUZZ_CHECK(m->callback == callback);
	/* Before the scan moves on to the next message. */
	FUZZ_CHECK(state->next_type == state->next_callback);
	return m;
}

static int fuzz_on_message(void *ctx, uint8_t type, const uint8_t *body, uint32_t body_len)
{
	struct fuzz_state *state = ctx;
	/* The next complete inspected message in stream order. */
	const struct fuzz_message *m = fuzz_next_callback(state, FUZZ_CALLBACK_MESSAGE);
	FUZZ_CHECK(m->is_complete);
	FUZZ_CHECK(m->type == type);
	uint32_t header_length = proto_read_u32(state->stream + m->start + 1);
	FUZZ_CHECK(body_len == header_length - 4);
	FUZZ_CHECK(body_len == m->end - m->start - PROTO_HEADER_LEN);
	FUZZ_CHECK(body_len <= PROTO_INSPECT_LEN_MAX || (m->action & PROTO_HOLD));
	FUZZ_CHECK(body_len <= PROTO_HOLD_HEAD_LEN || !(m->action & PROTO_HOLD_HEAD));
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
	FUZZ_CHECK(state->forwarded_total == m->forwarded_before + (m->is_forwarded ? m->end - m->forward_from : 0));
	state->inspected++;
	if (state->refuse_enabled && type == state->refused_type)
		return -ECANCELED;
	return 0;
}

static int fuzz_on_head(void *ctx, uint8_t type, const uint8_t *head, uint32_t head_len, uint32_t body_len)
{
	struct fuzz_state *state = ctx;
	const struct fuzz_message *m = fuzz_next_callback(state, FUZZ_CALLBACK_HEAD);
	FUZZ_CHECK(m->type == type);
	FUZZ_CHECK(m->action & PROTO_HOLD_HEAD);
	FUZZ_CHECK(head_len == PROTO_HOLD_HEAD_LEN);
	FUZZ_CHECK(body_len == proto_read_u32(state->stream + m->start + 1) - 4);
	FUZZ_CHECK(body_len > PROTO_HOLD_HEAD_LEN);
	FUZZ_CHECK(head != NULL && memcmp(head, state->stream + m->start + PROTO_HEADER_LEN, head_len) == 0);
	/* Called when the head's last byte arrives, within the current chunk. */
	uint32_t head_last = m->start + PROTO_HEADER_LEN + PROTO_HOLD_HEAD_LEN - 1;
	FUZZ_CHECK(head_last >= state->chunk_start && head_last < state->chunk_start + state->chunk_len);
	/* Whatever precedes it has gone out; nothing of it has. */
	FUZZ_CHECK(state->forwarded_total == m->forwarded_before);
	FUZZ_CHECK(state->forwarded_until <= m->start);
	state->heads++;
	return m->head_answer;
}

/* True when every byte of [from, to) belongs to a forwarded message, or to the forwarded rest of a
 * PROTO_HOLD_HEAD message. `first` is where the search starts:
 * forwarded runs only move forward, so the caller keeps it past the messages that end before `from`. */
static bool fuzz_range_is_forwarded(const struct fuzz_model *model, uint32_t *first, uint32_t from, uint32_t to)
{
	while (*first < model->count && model->messages[*first].end <= from)
		(*first)++;
	for (uint32_t i = *first; i < model->count && from < to; i++) {
		const struct fuzz_message *m = &model->messages[i];
		if (m->start > from || !m->is_forwarded || m->forward_from > from)
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
	.on_head = fuzz_on_head,
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
		.hold_head_enabled = (data[2] >> 6) & 1u,
		.head_refuse_enabled = (data[2] >> 7) & 1u,
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

	/* Every callback the model predicts has happened, up to and including the one that failed. */
	uint32_t expected_forwarded = 0, expected_inspected = 0, expected_heads = 0, complete = 0;
	for (uint32_t i = 0; i < model.count; i++) {
		const struct fuzz_message *m = &model.messages[i];
		if (m->is_forwarded)
			expected_forwarded += m->end - m->forward_from;
		expected_inspected += m->callback == FUZZ_CALLBACK_MESSAGE;
		expected_heads += m->callback == FUZZ_CALLBACK_HEAD;
		complete += m->is_complete;
	}
	FUZZ_CHECK(state.inspected == expected_inspected);
	FUZZ_CHECK(state.heads == expected_heads);
	FUZZ_CHECK(state.next_type == model.count);
	if (rc == 0) {
		FUZZ_CHECK(model.error == 0);
		FUZZ_CHECK(state.forwarded_total == expected_forwarded);
		FUZZ_CHECK(stream.messages == complete);
		bool ends_at_boundary = model.count == 0 || model.messages[model.count - 1].is_complete;
		FUZZ_CHECK(proto_stream_is_at_boundary(&stream) == ends_at_boundary);
	} else {
		FUZZ_CHECK(state.forwarded_until <= model.forward_end);
	}
	proto_stream_deinit(&stream);
	return 0;
}
