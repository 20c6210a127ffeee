/*
 * journal_record.h — one committed transaction as the recovery journal keeps it, and its codec (DESIGN §6;
 * ../shared/reference/004_c44c290a4cd34a46.txt, "Recovery journal and committed-history replay"). An
 * encoded record is the payload of one segment frame (journal_segment.h); it carries no version of its
 * own: the segment's format version is the record's.
 *
 * Encoding (format version 1), network byte order throughout as in PostgreSQL's wire protocol, so the
 * extended part of a statement is byte for byte the tail of the Bind message it was captured from:
 *   u64  commit_seq
 *   u64  committed_at_us                 wall clock, microseconds since the epoch
 *   u32  flags                           bit 0: incomplete; every other bit is 0
 *   text client_addr, user, database, server   (text: u32 length, then that many bytes, no NUL among them)
 *   u32  statement_count
 *   statement_count times:
 *     u8   kind                          1 simple query, 2 extended (Parse/Bind/Execute)
 *     text statement text
 *     extended only:
 *       u16 param_type_count, then that many u32 type OIDs (0: the server infers it), as the Parse named them
 *       u16 param_format_count, then that many i16 (0 text, 1 binary); the count is 0, 1 or param_count
 *       u16 param_count, then that many: i32 length (-1: NULL, no bytes follow), then that many bytes
 *       u16 result_format_count, then that many i16 (0 or 1)
 *     text CommandComplete tag
 * and nothing after the last statement. Every value has one encoding, so decoding then encoding again
 * gives the same bytes.
 *
 * Threads: any; nothing here is shared. Ownership: the encoder writes into the caller's buffer; a decoded
 * view points into the bytes it was decoded from and is valid as long as they are.
 * Never: allocates, reads outside the bytes it is given, or accepts what it would not encode.
 */
#ifndef TERN_REPLAY_JOURNAL_RECORD_H
#define TERN_REPLAY_JOURNAL_RECORD_H

#include "base.h"

/* The default max_committed_bytes: a record larger than the whole in-memory journal could never be kept. */
#define JOURNAL_RECORD_BYTES_MAX (256u * 1024u * 1024u)
/* Client address, user, database and server names: PostgreSQL's names are at most 63 bytes and an address
 * with its port fits in 64; longer is corruption. */
#define JOURNAL_RECORD_NAME_MAX 1024u
/* PostgreSQL's CommandComplete tags are at most 63 bytes (COMPLETION_TAG_BUFSIZE); room for other servers. */
#define JOURNAL_RECORD_TAG_MAX 256u
/* An autocommit statement is a record of its own and a transaction's capture stops at its caps (1000
 * statements by default), so a larger count is corruption. */
#define JOURNAL_RECORD_STATEMENTS_MAX 65536u
/* The encoded size of a record with empty names and no statement. */
#define JOURNAL_RECORD_BYTES_MIN 40u

#define JOURNAL_RECORD_INCOMPLETE 0x1u /* flags: committed-history replay refuses it */
#define JOURNAL_RECORD_FLAGS_KNOWN JOURNAL_RECORD_INCOMPLETE

enum journal_statement_kind {
	JOURNAL_STATEMENT_SIMPLE = 1,   /* a Query message's text */
	JOURNAL_STATEMENT_EXTENDED = 2, /* Parse text, and the Bind's formats and values */
};

/* Bytes of text, not terminated. */
struct journal_text {
	const char *data;
	uint32_t len;
};

/* One bound parameter value: `len` bytes at `data`, or SQL NULL when len is -1 (data unused; NULL when
 * decoded). */
struct journal_param {
	const uint8_t *data;
	int32_t len;
};

/* A statement to encode. The extended fields are 0/NULL for a simple query. */
struct journal_statement {
	enum journal_statement_kind kind;
	struct journal_text text;
	struct journal_text tag;
	const int16_t *param_formats;
	const struct journal_param *params;
	const int16_t *result_formats;
	uint16_t param_format_count;
	uint16_t param_count;
	uint16_t result_format_count;
	/* Extended, instead of the five fields above: the three parts as a Bind message carried them after
	 * its statement name (checked as the decoder would read them, then copied as they are). */
	const uint8_t *bind_tail;
	uint32_t bind_tail_len;
	/* Extended: the parameter types the Parse named, as OIDs, or (type_tail) as the Parse carried them
	 * after its text (u16 count, u32 OIDs, checked, then copied). */
	const uint32_t *param_types;
	uint16_t param_type_count;
	const uint8_t *type_tail;
	uint32_t type_tail_len;
};

/* A record to encode. */
struct journal_record {
	uint64_t commit_seq;
	uint64_t committed_at_us;
	uint32_t flags;
	struct journal_text client_addr, user, database, server;
	const struct journal_statement *statements;
	uint32_t statement_count;
};

/* A decoded record: every pointer is into the decoded bytes. Its statements are read in order with
 * journal_record_statement_next, which allocates nothing. */
struct journal_record_view {
	uint64_t commit_seq;
	uint64_t committed_at_us;
	uint32_t flags;
	struct journal_text client_addr, user, database, server;
	uint32_t statement_count;
	const uint8_t *statements; /* the encoded statements */
	uint32_t statements_len;
};

/* A decoded statement. Formats are read with journal_record_*_format_at, values with
 * journal_record_param_next. */
struct journal_statement_view {
	enum journal_statement_kind kind;
	struct journal_text text;
	struct journal_text tag;
	uint16_t param_type_count;
	uint16_t param_format_count;
	uint16_t param_count;
	uint16_t result_format_count;
	const uint8_t *param_types;    /* param_type_count big-endian u32 OIDs */
	const uint8_t *param_formats;  /* param_format_count big-endian i16 */
	const uint8_t *params;         /* param_count times: i32 length, bytes */
	uint32_t params_len;
	const uint8_t *result_formats; /* result_format_count big-endian i16 */
	/* Extended: the three parts as a Bind message carries them after its statement name, ready to send. */
	const uint8_t *bind_tail;
	uint32_t bind_tail_len;
};

/* A position in a decoded record's statements or a statement's parameters; start from {0}. */
struct journal_iter {
	uint32_t offset;
	uint32_t index;
};

/* The encoded size of `r` into *size. -E2BIG: a part is over its limit (a name over JOURNAL_RECORD_NAME_MAX,
 * a tag over JOURNAL_RECORD_TAG_MAX, too many statements, or the whole over JOURNAL_RECORD_BYTES_MAX);
 * -EINVAL: a text holds a NUL, a format code is not 0 or 1, a parameter length is below -1, or the number
 * of parameter formats is not 0, 1 or the number of parameters. */
TERN_MUST_USE int journal_record_size(const struct journal_record *r, size_t *size);

/* Encodes `r` into buf[0..cap) and its length into *len. The errors of journal_record_size, and -ENOBUFS
 * when cap is too small (*len is then the size needed). */
TERN_MUST_USE int journal_record_encode(const struct journal_record *r, uint8_t *buf, size_t cap, size_t *len);

/* Decodes p[0..len) into *out, checking every length against the bytes left. 0, or -EINVAL for anything
 * the encoder would not have written: short, trailing bytes, an unknown flag or kind, a count or length
 * over its limit. */
TERN_MUST_USE int journal_record_decode(const uint8_t *p, size_t len, struct journal_record_view *out);

/* The commit_seq of an encoded record without decoding the rest: 0, or -EINVAL when it is too short. */
TERN_MUST_USE int journal_record_peek_commit_seq(const uint8_t *p, size_t len, uint64_t *commit_seq);

/* The next statement of a decoded record: true and *out filled, or false after the last. */
bool journal_record_statement_next(const struct journal_record_view *r, struct journal_iter *it,
				   struct journal_statement_view *out);

/* The next parameter value of a decoded statement: true and *out filled, or false after the last. */
bool journal_record_param_next(const struct journal_statement_view *s, struct journal_iter *it,
			       struct journal_param *out);

/* Format codes of a decoded statement, i below its count. */
int16_t journal_record_param_format_at(const struct journal_statement_view *s, uint16_t i);
uint32_t journal_record_param_type_at(const struct journal_statement_view *s, uint16_t i);
int16_t journal_record_result_format_at(const struct journal_statement_view *s, uint16_t i);

#endif
