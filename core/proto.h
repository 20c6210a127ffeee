/*
 * proto.h — the PostgreSQL wire protocol 3.0 as a pure library: frame scanning for forwarding by
 * reference, parsers for the few messages tern reads, and builders for the messages tern writes.
 *
 * Threads: no shared state; any thread. Ownership: parsers borrow (p, len) and keep no pointer
 * after they return, except the proto_startup fields, which point into the caller's buffer and live
 * as long as it does. Builders write into caller memory.
 * Never: does I/O, allocates on the forwarding path, or knows sessions and pools.
 */
#ifndef TERN_PROTO_H
#define TERN_PROTO_H

#include "base.h"

#include <stdint.h>

#define PROTO_HEADER_LEN 5u /* type byte + int32 length (the length counts itself, not the type) */
#define PROTO_VERSION_3_0 196608u
/* PostgreSQL 18's: BackendKeyData and CancelRequest carry keys of up to PROTO_CANCEL_KEY_MAX bytes. */
#define PROTO_VERSION_3_2 196610u
#define PROTO_CANCEL_KEY_MAX 256u
#define PROTO_CODE_CANCEL 80877102u
#define PROTO_CODE_SSL 80877103u
#define PROTO_CODE_GSSENC 80877104u
/* PostgreSQL refuses startup packets over 10000 bytes; so does tern. */
#define PROTO_STARTUP_LEN_MAX 10000u
/* Startup parameters read from one StartupMessage; PostgreSQL has no limit, 64 is far above use. */
#define PROTO_STARTUP_PARAMS_MAX 64u
/* An inspected message's content is assembled only when it straddles receive buffers; no message tern
 * inspects is legitimately larger than this (ParameterStatus, ReadyForQuery, auth messages). */
#define PROTO_INSPECT_LEN_MAX (64u * 1024u)

/* Frontend (client → server) message types. */
enum {
	PROTO_FE_BIND = 'B', PROTO_FE_CLOSE = 'C', PROTO_FE_COPY_DATA = 'd', PROTO_FE_COPY_DONE = 'c',
	PROTO_FE_COPY_FAIL = 'f', PROTO_FE_DESCRIBE = 'D', PROTO_FE_EXECUTE = 'E', PROTO_FE_FLUSH = 'H',
	PROTO_FE_FUNCTION_CALL = 'F', PROTO_FE_PARSE = 'P', PROTO_FE_PASSWORD = 'p', PROTO_FE_QUERY = 'Q',
	PROTO_FE_SYNC = 'S', PROTO_FE_TERMINATE = 'X',
};
/* Backend (server → client) message types. */
enum {
	PROTO_BE_AUTH = 'R', PROTO_BE_KEY_DATA = 'K', PROTO_BE_BIND_COMPLETE = '2', PROTO_BE_CLOSE_COMPLETE = '3',
	PROTO_BE_COMMAND_COMPLETE = 'C', PROTO_BE_COPY_IN = 'G', PROTO_BE_COPY_OUT = 'H', PROTO_BE_COPY_BOTH = 'W',
	PROTO_BE_DATA_ROW = 'D', PROTO_BE_ERROR = 'E', PROTO_BE_NOTICE = 'N', PROTO_BE_NOTIFICATION = 'A',
	PROTO_BE_PARAMETER_STATUS = 'S', PROTO_BE_PARSE_COMPLETE = '1', PROTO_BE_READY = 'Z',
	PROTO_BE_ROW_DESCRIPTION = 'T', PROTO_BE_NO_DATA = 'n', PROTO_BE_PORTAL_SUSPENDED = 's',
	PROTO_BE_EMPTY_QUERY = 'I', PROTO_BE_PARAMETER_DESCRIPTION = 't', PROTO_BE_NEGOTIATE_VERSION = 'v',
};
enum {
	PROTO_AUTH_OK = 0, PROTO_AUTH_CLEARTEXT = 3, PROTO_AUTH_MD5 = 5, PROTO_AUTH_SASL = 10,
	PROTO_AUTH_SASL_CONTINUE = 11, PROTO_AUTH_SASL_FINAL = 12,
};

static inline uint32_t proto_read_u32(const uint8_t *p) { return base_read_be32(p); }
static inline void proto_write_u32(uint8_t *p, uint32_t v) { base_write_be32(p, v); }

/* ---- scanning a typed message stream for forwarding ---- */

/* What the owner wants done with a message, decided from its type byte alone. */
enum {
	PROTO_FORWARD = 1u << 0, /* its bytes go to the peer by reference */
	PROTO_INSPECT = 1u << 1, /* its content is handed to on_message once complete */
	/* As PROTO_INSPECT, but a message over PROTO_INSPECT_LEN_MAX is passed over uninspected instead of
	 * being an error: for content of interest only when short (a query's first statement, say). */
	PROTO_INSPECT_SMALL = 1u << 2,
	/* Not forwarded: assembled whole (up to the frame limit) and handed to on_message, which sends it
	 * on as it is or rewritten. proto_stream_message_offset says whether it can go by reference. */
	PROTO_HOLD = 1u << 3,
	/* With PROTO_HOLD: a body over PROTO_HOLD_HEAD_LEN is not assembled whole; its first
	 * PROTO_HOLD_HEAD_LEN bytes go to on_head, whose answer says what becomes of the rest (a Bind's
	 * names are rewritten while its parameters stream by reference). */
	PROTO_HOLD_HEAD = 1u << 4,
	/* With PROTO_HOLD: a body up to PROTO_INSPECT_LEN_MAX is held whole; a longer one goes to on_head
	 * (as PROTO_HOLD_HEAD) instead of being assembled (a query routed by its text). */
	PROTO_HOLD_SMALL = 1u << 5,
};
#define PROTO_HOLD_HEAD_LEN 1024u

struct proto_scan_ops {
	unsigned (*on_type)(void *ctx, uint8_t type);
	/* Content of an inspected message (body after the header). <0 stops the scan with that error. */
	int (*on_message)(void *ctx, uint8_t type, const uint8_t *body, uint32_t body_len);
	/* Bytes [offset, offset + len) of the current chunk are to be forwarded. */
	void (*forward)(void *ctx, uint32_t offset, uint32_t len);
	/* PROTO_HOLD_HEAD: the first head_len bytes of a body of body_len. Returns PROTO_FORWARD (the rest
	 * is forwarded as it arrives), 0 (the rest is dropped) or <0 to stop the scan with that error. */
	int (*on_head)(void *ctx, uint8_t type, const uint8_t *head, uint32_t head_len, uint32_t body_len);
};

struct proto_stream {
	uint8_t header[PROTO_HEADER_LEN];
	uint8_t header_have;
	uint8_t type;
	unsigned action;
	uint32_t body_left;
	uint32_t body_len;
	uint8_t *assembly; /* grown lazily up to PROTO_INSPECT_LEN_MAX, freed by proto_stream_deinit */
	uint32_t assembly_len;
	uint32_t assembly_cap;
	bool is_heading;           /* assembling a PROTO_HOLD_HEAD message's head */
	uint32_t message_offset;   /* where the current message's type byte is in the chunk being fed */
	bool is_message_in_chunk;  /* ... when the whole message lies in that chunk */
	uint64_t messages; /* complete messages scanned, for statistics */
	/* Odd while a chunk is being fed, one more at each feed's start and end: a pointer into the chunk
	 * noted with this value is still good while this same stream's value is the same (another stream,
	 * one made later at the same address included, counts its own from 0). */
	uint32_t feed_seq;
	uint32_t stop_offset; /* after a scan stopped by on_message: where the unscanned rest of the chunk begins */
};

void proto_stream_init(struct proto_stream *stream);
void proto_stream_deinit(struct proto_stream *stream);
/* True between messages: no partial header or body pending. */
static inline bool proto_stream_is_at_boundary(const struct proto_stream *stream)
{
	return stream->header_have == 0;
}
/* During on_message: true when the whole message (header included) lies in the chunk being fed,
 * starting at *offset, so its bytes can be forwarded by reference. */
static inline bool proto_stream_message_offset(const struct proto_stream *stream, uint32_t *offset)
{
	*offset = stream->message_offset;
	return stream->is_message_in_chunk;
}
/* During a feed: the value that says a pointer into its chunk is still good (see feed_seq). */
static inline uint32_t proto_stream_feed_seq(const struct proto_stream *stream)
{
	return stream->feed_seq;
}
/* Scans one chunk. Returns 0 when the whole chunk was scanned, -EMSGSIZE for a frame over
 * `frame_len_max` or an inspected message over PROTO_INSPECT_LEN_MAX, -EPROTO for a length below 4,
 * or on_message's negative result (the stream is then between messages, and stop_offset says where the
 * chunk's unscanned rest begins). */
TERN_MUST_USE int proto_stream_feed(struct proto_stream *stream, const uint8_t *chunk, uint32_t len,
				    uint64_t frame_len_max, const struct proto_scan_ops *ops, void *ctx);

/* ---- parsers ---- */

struct proto_startup {
	uint32_t code; /* PROTO_VERSION_3_0 or one of the PROTO_CODE_* requests */
	uint32_t cancel_pid;
	uint8_t cancel_key[PROTO_CANCEL_KEY_MAX]; /* 4 bytes under protocol 3.0, up to 256 under 3.2 */
	uint32_t cancel_key_len;
	uint32_t param_count;
	const char *names[PROTO_STARTUP_PARAMS_MAX];
	const char *values[PROTO_STARTUP_PARAMS_MAX];
};
/* `body` is the packet after its 4-byte length. 0, -EPROTO (malformed), -E2BIG (too many params),
 * -EPROTONOSUPPORT (a major version other than 3; code holds it). */
TERN_MUST_USE int proto_startup_parse(const uint8_t *body, uint32_t len, struct proto_startup *out);
const char *proto_startup_get(const struct proto_startup *startup, const char *name);

/* A NUL-terminated string at *offset inside body; advances *offset past it. NULL if unterminated. */
static inline const char *proto_read_cstring(const uint8_t *body, uint32_t len, uint32_t *offset)
{
	return base_read_cstring(body, len, offset);
}

struct proto_error_fields {
	char severity[16];
	char sqlstate[6];
	char message[256];
	char routine[48]; /* R: the server function that raised it (never translated, unlike the message) */
};
/* Reads S/V, C, M and R fields of an ErrorResponse or NoticeResponse body (truncating long text). */
TERN_MUST_USE int proto_error_parse(const uint8_t *body, uint32_t len, struct proto_error_fields *out);

/* The bodiless replies tern makes up in place of a server's (each PROTO_HEADER_LEN bytes). */
extern const uint8_t proto_parse_complete[PROTO_HEADER_LEN], proto_bind_complete[PROTO_HEADER_LEN],
	proto_close_complete[PROTO_HEADER_LEN], proto_no_data[PROTO_HEADER_LEN];

/* What a server says ahead of a statement's first row or completion (nothing of its outcome yet). */
/* A type a server may send once logged in (CopyData 'd', CopyDone 'c' and FunctionCallResponse 'V'
 * among them): any other byte where a message begins is a server tern does not understand. */
static inline bool proto_be_is_known(uint8_t type)
{
	switch (type) {
	case '1': case '2': case '3': case 'A': case 'C': case 'D': case 'E': case 'G': case 'H': case 'I':
	case 'K': case 'N': case 'R': case 'S': case 'T': case 'V': case 'W': case 'Z': case 'c': case 'd':
	case 'n': case 's': case 't': case 'v':
		return true;
	default:
		return false;
	}
}

static inline bool proto_be_is_preamble(uint8_t type)
{
	return type == PROTO_BE_ROW_DESCRIPTION || type == PROTO_BE_PARSE_COMPLETE || type == PROTO_BE_BIND_COMPLETE ||
	       type == PROTO_BE_CLOSE_COMPLETE || type == PROTO_BE_PARAMETER_DESCRIPTION || type == PROTO_BE_NO_DATA;
}

/* ---- builders: each returns the message length, or 0 when `cap` is too small ---- */
size_t proto_build_error(uint8_t *out, size_t cap, const char *severity, const char *sqlstate, const char *message,
			 const char *hint);
size_t proto_build_auth(uint8_t *out, size_t cap, uint32_t code, const void *data, size_t data_len);
size_t proto_build_parameter_status(uint8_t *out, size_t cap, const char *name, const char *value);
/* BackendKeyData with a key of key_len bytes (4 for protocol 3.0; up to PROTO_CANCEL_KEY_MAX for 3.2). */
size_t proto_build_key_data(uint8_t *out, size_t cap, uint32_t pid, const uint8_t *key, uint32_t key_len);
size_t proto_build_ready(uint8_t *out, size_t cap, char status);
size_t proto_build_query(uint8_t *out, size_t cap, const char *sql);

#endif
