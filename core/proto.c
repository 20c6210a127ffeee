/* The wire protocol of proto.h: the frame scanner (forwarded bytes reported as runs of the caller's chunk;
 * a message read or held is assembled only when it spans chunks), the startup and error parsers, and the
 * builders. See proto.h. */
#include "proto.h"

#include <errno.h>
#include <string.h>

static_assert(PROTO_HEADER_LEN == 5, "type byte + int32 length");

void proto_stream_init(struct proto_stream *stream) { memset(stream, 0, sizeof(*stream)); }

void proto_stream_deinit(struct proto_stream *stream)
{
	free(stream->assembly);
	memset(stream, 0, sizeof(*stream));
}

static int proto_assembly_append(struct proto_stream *stream, const uint8_t *p, uint32_t len)
{
	if (len == 0)
		return 0; /* a header that ends its chunk: the assembly may not exist yet (no memcpy to NULL) */
	uint32_t need = stream->assembly_len + len;
	if (need > stream->assembly_cap) {
		uint32_t cap = TERN_MAX(stream->assembly_cap * 2, 256u);
		while (cap < need)
			cap *= 2;
		cap = TERN_MIN(cap, TERN_MAX(stream->body_len, need)); /* a held message may pass 64 KiB */
		uint8_t *grown = realloc(stream->assembly, cap);
		if (!grown)
			return -ENOMEM;
		stream->assembly = grown;
		stream->assembly_cap = cap;
	}
	memcpy(stream->assembly + stream->assembly_len, p, len);
	stream->assembly_len += len;
	return 0;
}

static int proto_stream_scan(struct proto_stream *stream, const uint8_t *chunk, uint32_t len, uint64_t frame_len_max,
			     const struct proto_scan_ops *ops, void *ctx)
{
	uint32_t offset = 0;
	uint32_t run_start = 0; /* start of the pending run of forwarded bytes */
	bool run_open = (stream->header_have > 0 && (stream->action & PROTO_FORWARD));
	int rc = 0;
	stream->is_message_in_chunk = false; /* a message begun in an earlier chunk */

	while (offset < len) {
		if (stream->header_have < PROTO_HEADER_LEN) {
			if (stream->header_have == 0) {
				stream->type = chunk[offset];
				stream->message_offset = offset;
				stream->is_message_in_chunk = true;
				stream->action = ops->on_type(ctx, stream->type);
				if ((stream->action & PROTO_FORWARD) && !run_open) {
					run_start = offset;
					run_open = true;
				} else if (!(stream->action & PROTO_FORWARD) && run_open) {
					if (offset > run_start)
						ops->forward(ctx, run_start, offset - run_start);
					run_open = false;
				}
			}
			uint32_t take = TERN_MIN((uint32_t)(PROTO_HEADER_LEN - stream->header_have), len - offset);
			memcpy(stream->header + stream->header_have, chunk + offset, take);
			stream->header_have = (uint8_t)(stream->header_have + take);
			offset += take;
			if (stream->header_have < PROTO_HEADER_LEN)
				break;
			uint32_t length = proto_read_u32(stream->header + 1);
			if (length < 4) {
				rc = -EPROTO;
				break;
			}
			if ((uint64_t)length + 1 > frame_len_max) {
				rc = -EMSGSIZE;
				break;
			}
			stream->body_len = length - 4;
			stream->body_left = stream->body_len;
			stream->assembly_len = 0;
			if (stream->action & PROTO_INSPECT_SMALL)
				stream->action = (stream->action & ~PROTO_INSPECT_SMALL) |
						 (stream->body_len <= PROTO_INSPECT_LEN_MAX ? PROTO_INSPECT : 0);
			if ((stream->action & PROTO_INSPECT) && stream->body_len > PROTO_INSPECT_LEN_MAX) {
				rc = -EMSGSIZE;
				break;
			}
			stream->is_heading = ((stream->action & PROTO_HOLD_HEAD) && stream->body_len > PROTO_HOLD_HEAD_LEN) ||
					     ((stream->action & PROTO_HOLD_SMALL) && stream->body_len > PROTO_INSPECT_LEN_MAX);
		}
		if (stream->is_heading) {
			uint32_t part = TERN_MIN(PROTO_HOLD_HEAD_LEN - stream->assembly_len, len - offset);
			rc = proto_assembly_append(stream, chunk + offset, part);
			if (rc < 0)
				break;
			offset += part;
			stream->body_left -= part;
			if (stream->assembly_len < PROTO_HOLD_HEAD_LEN)
				break; /* the chunk ended */
			stream->is_heading = false;
			rc = ops->on_head(ctx, stream->type, stream->assembly, PROTO_HOLD_HEAD_LEN, stream->body_len);
			if (rc < 0)
				break;
			stream->action = (unsigned)rc & PROTO_FORWARD; /* the rest: by reference, or nowhere */
			rc = 0;
			if (stream->action) {
				run_start = offset;
				run_open = true;
			}
			continue;
		}
		uint32_t take = TERN_MIN(stream->body_left, len - offset);
		const uint8_t *body = chunk + offset;
		bool whole_in_chunk = (take == stream->body_len);
		if ((stream->action & (PROTO_INSPECT | PROTO_HOLD)) && !whole_in_chunk && take > 0) {
			rc = proto_assembly_append(stream, body, take);
			if (rc < 0)
				break;
		}
		offset += take;
		stream->body_left -= take;
		if (stream->body_left > 0)
			break;
		/* The message is complete. */
		stream->header_have = 0;
		stream->messages++;
		if (stream->action & (PROTO_INSPECT | PROTO_HOLD)) {
			if (run_open && offset > run_start) {
				/* Forward what precedes, so the owner's reaction (release a server, say) follows
				 * the bytes it reacts to. */
				ops->forward(ctx, run_start, offset - run_start);
				run_start = offset;
			}
			const uint8_t *content = whole_in_chunk ? body : stream->assembly;
			rc = ops->on_message(ctx, stream->type, content, stream->body_len);
			if (stream->assembly_cap > PROTO_INSPECT_LEN_MAX) {
				/* A large held message: its assembly is not kept for the session's life. */
				free(stream->assembly);
				stream->assembly = NULL;
				stream->assembly_cap = 0;
			}
			if (rc < 0) {
				stream->stop_offset = offset;
				break;
			}
			rc = 0;
		}
	}
	if (rc == 0 && run_open && offset > run_start)
		ops->forward(ctx, run_start, offset - run_start);
	return rc;
}

int proto_stream_feed(struct proto_stream *stream, const uint8_t *chunk, uint32_t len, uint64_t frame_len_max,
		      const struct proto_scan_ops *ops, void *ctx)
{
	stream->feed_seq++;
	int rc = proto_stream_scan(stream, chunk, len, frame_len_max, ops, ctx);
	stream->feed_seq++;
	return rc;
}

int proto_startup_parse(const uint8_t *body, uint32_t len, struct proto_startup *out)
{
	memset(out, 0, sizeof(*out));
	if (len < 4)
		return -EPROTO;
	out->code = proto_read_u32(body);
	if (out->code == PROTO_CODE_CANCEL) {
		/* A 4-byte key (protocol 3.0) or a longer one (3.2), never more than PostgreSQL's 256. */
		if (len < 12 || len - 8 > PROTO_CANCEL_KEY_MAX)
			return -EPROTO;
		out->cancel_pid = proto_read_u32(body + 4);
		out->cancel_key_len = len - 8;
		memcpy(out->cancel_key, body + 8, out->cancel_key_len);
		return 0;
	}
	if (out->code == PROTO_CODE_SSL || out->code == PROTO_CODE_GSSENC)
		return len == 4 ? 0 : -EPROTO;
	if ((out->code >> 16) != 3)
		return -EPROTONOSUPPORT;
	uint32_t offset = 4;
	for (;;) {
		if (offset >= len)
			return -EPROTO; /* the list must end with an empty name */
		if (body[offset] == '\0') {
			offset++;
			break;
		}
		const char *name = proto_read_cstring(body, len, &offset);
		const char *value = name ? proto_read_cstring(body, len, &offset) : NULL;
		if (!value)
			return -EPROTO;
		if (out->param_count == PROTO_STARTUP_PARAMS_MAX)
			return -E2BIG;
		out->names[out->param_count] = name;
		out->values[out->param_count] = value;
		out->param_count++;
	}
	return offset == len ? 0 : -EPROTO;
}

const char *proto_startup_get(const struct proto_startup *startup, const char *name)
{
	for (uint32_t i = 0; i < startup->param_count; i++)
		if (strcmp(startup->names[i], name) == 0)
			return startup->values[i];
	return NULL;
}

const uint8_t proto_parse_complete[PROTO_HEADER_LEN] = {PROTO_BE_PARSE_COMPLETE, 0, 0, 0, 4};
const uint8_t proto_bind_complete[PROTO_HEADER_LEN] = {PROTO_BE_BIND_COMPLETE, 0, 0, 0, 4};
const uint8_t proto_close_complete[PROTO_HEADER_LEN] = {PROTO_BE_CLOSE_COMPLETE, 0, 0, 0, 4};
const uint8_t proto_no_data[PROTO_HEADER_LEN] = {PROTO_BE_NO_DATA, 0, 0, 0, 4};

int proto_error_parse(const uint8_t *body, uint32_t len, struct proto_error_fields *out)
{
	memset(out, 0, sizeof(*out));
	uint32_t offset = 0;
	while (offset < len && body[offset] != '\0') {
		uint8_t field = body[offset++];
		const char *text = proto_read_cstring(body, len, &offset);
		if (!text)
			return -EPROTO;
		if (field == 'V' || (field == 'S' && out->severity[0] == '\0'))
			base_strlcpy(out->severity, text, sizeof(out->severity));
		else if (field == 'C')
			base_strlcpy(out->sqlstate, text, sizeof(out->sqlstate));
		else if (field == 'M')
			base_strlcpy(out->message, text, sizeof(out->message));
		else if (field == 'R')
			base_strlcpy(out->routine, text, sizeof(out->routine));
	}
	return 0;
}

/* ---- builders ---- */

struct proto_writer {
	uint8_t *out;
	size_t cap;
	size_t len;
	bool overflow;
};

static void proto_put(struct proto_writer *w, const void *p, size_t n)
{
	if (w->overflow || w->len + n > w->cap) {
		w->overflow = true;
		return;
	}
	memcpy(w->out + w->len, p, n);
	w->len += n;
}
static void proto_put_u8(struct proto_writer *w, uint8_t v) { proto_put(w, &v, 1); }
static void proto_put_u32(struct proto_writer *w, uint32_t v)
{
	uint8_t b[4];
	proto_write_u32(b, v);
	proto_put(w, b, 4);
}
static void proto_put_cstring(struct proto_writer *w, const char *s) { proto_put(w, s, strlen(s) + 1); }
static void proto_begin(struct proto_writer *w, uint8_t *out, size_t cap, uint8_t type)
{
	*w = (struct proto_writer){.out = out, .cap = cap};
	proto_put_u8(w, type);
	proto_put_u32(w, 0);
}
static size_t proto_end(struct proto_writer *w)
{
	if (w->overflow)
		return 0;
	proto_write_u32(w->out + 1, (uint32_t)(w->len - 1));
	return w->len;
}

size_t proto_build_error(uint8_t *out, size_t cap, const char *severity, const char *sqlstate, const char *message,
			 const char *hint)
{
	struct proto_writer w;
	proto_begin(&w, out, cap, PROTO_BE_ERROR);
	proto_put_u8(&w, 'S');
	proto_put_cstring(&w, severity);
	proto_put_u8(&w, 'V');
	proto_put_cstring(&w, severity);
	proto_put_u8(&w, 'C');
	proto_put_cstring(&w, sqlstate);
	proto_put_u8(&w, 'M');
	proto_put_cstring(&w, message);
	if (hint) {
		proto_put_u8(&w, 'H');
		proto_put_cstring(&w, hint);
	}
	proto_put_u8(&w, 0);
	return proto_end(&w);
}

size_t proto_build_auth(uint8_t *out, size_t cap, uint32_t code, const void *data, size_t data_len)
{
	struct proto_writer w;
	proto_begin(&w, out, cap, PROTO_BE_AUTH);
	proto_put_u32(&w, code);
	if (data_len)
		proto_put(&w, data, data_len);
	return proto_end(&w);
}

size_t proto_build_parameter_status(uint8_t *out, size_t cap, const char *name, const char *value)
{
	struct proto_writer w;
	proto_begin(&w, out, cap, PROTO_BE_PARAMETER_STATUS);
	proto_put_cstring(&w, name);
	proto_put_cstring(&w, value);
	return proto_end(&w);
}

size_t proto_build_key_data(uint8_t *out, size_t cap, uint32_t pid, const uint8_t *key, uint32_t key_len)
{
	TERN_ASSERT(key_len >= 4 && key_len <= PROTO_CANCEL_KEY_MAX);
	struct proto_writer w;
	proto_begin(&w, out, cap, PROTO_BE_KEY_DATA);
	proto_put_u32(&w, pid);
	proto_put(&w, key, key_len);
	return proto_end(&w);
}

size_t proto_build_ready(uint8_t *out, size_t cap, char status)
{
	struct proto_writer w;
	proto_begin(&w, out, cap, PROTO_BE_READY);
	proto_put_u8(&w, (uint8_t)status);
	return proto_end(&w);
}

size_t proto_build_query(uint8_t *out, size_t cap, const char *sql)
{
	struct proto_writer w;
	proto_begin(&w, out, cap, PROTO_FE_QUERY);
	proto_put_cstring(&w, sql);
	return proto_end(&w);
}
