/* The journal record's codec (see journal_record.h for the byte layout). The encoder checks everything
 * first (journal_record_size) and then writes without checks; the decoder reads through one bounded
 * cursor, so every read is checked against the bytes left, and the statement and parameter walks after a
 * decode go through the same reading functions the decode did. */
#include "journal_record.h"

#include <errno.h>
#include <string.h>

/* kind + text length + tag length: the smallest statement. */
#define JOURNAL_STATEMENT_BYTES_MIN 9u

/* ---- reading ---- */

struct journal_reader {
	const uint8_t *p;
	size_t left;
};

static bool reader_take(struct journal_reader *r, size_t n, const uint8_t **out)
{
	if (n > r->left)
		return false;
	*out = r->p;
	r->p += n;
	r->left -= n;
	return true;
}

static uint16_t load_u16(const uint8_t *p)
{
	return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static uint32_t load_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t load_u64(const uint8_t *p)
{
	return (uint64_t)load_u32(p) << 32 | load_u32(p + 4);
}

static bool read_u8(struct journal_reader *r, uint8_t *v)
{
	const uint8_t *p;
	if (!reader_take(r, 1, &p))
		return false;
	*v = p[0];
	return true;
}

static bool read_u16(struct journal_reader *r, uint16_t *v)
{
	const uint8_t *p;
	if (!reader_take(r, 2, &p))
		return false;
	*v = load_u16(p);
	return true;
}

static bool read_u32(struct journal_reader *r, uint32_t *v)
{
	const uint8_t *p;
	if (!reader_take(r, 4, &p))
		return false;
	*v = load_u32(p);
	return true;
}

static bool read_u64(struct journal_reader *r, uint64_t *v)
{
	const uint8_t *p;
	if (!reader_take(r, 8, &p))
		return false;
	*v = load_u64(p);
	return true;
}

/* A text of at most `max` bytes with no NUL among them. */
static bool read_text(struct journal_reader *r, uint32_t max, struct journal_text *out)
{
	uint32_t len;
	const uint8_t *p;
	if (!read_u32(r, &len) || len > max || !reader_take(r, len, &p) || memchr(p, '\0', len) != NULL)
		return false;
	out->data = (const char *)p;
	out->len = len;
	return true;
}

static bool format_is_valid(int16_t format)
{
	return format == 0 || format == 1;
}

/* `count` format codes, each 0 or 1. */
static bool read_formats(struct journal_reader *r, uint16_t count, const uint8_t **out)
{
	if (!reader_take(r, (size_t)count * 2u, out))
		return false;
	for (uint16_t i = 0; i < count; i++)
		if (!format_is_valid((int16_t)load_u16(*out + 2u * i)))
			return false;
	return true;
}

static bool read_param(struct journal_reader *r, struct journal_param *out)
{
	uint32_t raw;
	if (!read_u32(r, &raw))
		return false;
	int32_t len = (int32_t)raw;
	if (len == -1) {
		*out = (struct journal_param){.data = NULL, .len = -1};
		return true;
	}
	const uint8_t *p;
	if (len < 0 || !reader_take(r, (size_t)len, &p))
		return false;
	*out = (struct journal_param){.data = p, .len = len};
	return true;
}

/* An extended statement's parameter types, as a Parse carries them after its text. */
static bool read_types(struct journal_reader *r, struct journal_statement_view *out)
{
	return read_u16(r, &out->param_type_count) && reader_take(r, 4u * out->param_type_count, &out->param_types);
}

/* An extended statement's formats and values, as a Bind carries them after its statement name. */
static bool read_bind_tail(struct journal_reader *r, struct journal_statement_view *out)
{
	out->bind_tail = r->p;
	if (!read_u16(r, &out->param_format_count) || !read_formats(r, out->param_format_count, &out->param_formats) ||
	    !read_u16(r, &out->param_count))
		return false;
	if (out->param_format_count > 1 && out->param_format_count != out->param_count)
		return false;
	out->params = r->p;
	for (uint16_t i = 0; i < out->param_count; i++) {
		struct journal_param param;
		if (!read_param(r, &param))
			return false;
	}
	out->params_len = (uint32_t)(r->p - out->params);
	if (!read_u16(r, &out->result_format_count) || !read_formats(r, out->result_format_count, &out->result_formats))
		return false;
	out->bind_tail_len = (uint32_t)(r->p - out->bind_tail);
	return true;
}

static bool read_statement(struct journal_reader *r, struct journal_statement_view *out)
{
	uint8_t kind;
	memset(out, 0, sizeof(*out));
	if (!read_u8(r, &kind) || (kind != JOURNAL_STATEMENT_SIMPLE && kind != JOURNAL_STATEMENT_EXTENDED))
		return false;
	out->kind = (enum journal_statement_kind)kind;
	if (!read_text(r, JOURNAL_RECORD_BYTES_MAX, &out->text))
		return false;
	if (kind == JOURNAL_STATEMENT_EXTENDED && (!read_types(r, out) || !read_bind_tail(r, out)))
		return false;
	return read_text(r, JOURNAL_RECORD_TAG_MAX, &out->tag);
}

int journal_record_decode(const uint8_t *p, size_t len, struct journal_record_view *out)
{
	TERN_ASSERT(out != NULL);
	TERN_ASSERT(p != NULL || len == 0);
	memset(out, 0, sizeof(*out));
	if (len < JOURNAL_RECORD_BYTES_MIN || len > JOURNAL_RECORD_BYTES_MAX)
		return -EINVAL;
	struct journal_reader r = {.p = p, .left = len};
	if (!read_u64(&r, &out->commit_seq) || !read_u64(&r, &out->committed_at_us) || !read_u32(&r, &out->flags) ||
	    (out->flags & ~(uint32_t)JOURNAL_RECORD_FLAGS_KNOWN) != 0 ||
	    !read_text(&r, JOURNAL_RECORD_NAME_MAX, &out->client_addr) ||
	    !read_text(&r, JOURNAL_RECORD_NAME_MAX, &out->user) ||
	    !read_text(&r, JOURNAL_RECORD_NAME_MAX, &out->database) ||
	    !read_text(&r, JOURNAL_RECORD_NAME_MAX, &out->server) || !read_u32(&r, &out->statement_count))
		goto invalid;
	if (out->statement_count > JOURNAL_RECORD_STATEMENTS_MAX ||
	    (uint64_t)out->statement_count * JOURNAL_STATEMENT_BYTES_MIN > r.left)
		goto invalid;
	out->statements = r.p;
	for (uint32_t i = 0; i < out->statement_count; i++) {
		struct journal_statement_view statement;
		if (!read_statement(&r, &statement))
			goto invalid;
	}
	if (r.left != 0)
		goto invalid;
	out->statements_len = (uint32_t)(r.p - out->statements);
	return 0;
invalid:
	memset(out, 0, sizeof(*out));
	return -EINVAL;
}

int journal_record_peek_commit_seq(const uint8_t *p, size_t len, uint64_t *commit_seq)
{
	TERN_ASSERT(commit_seq != NULL);
	if (p == NULL || len < JOURNAL_RECORD_BYTES_MIN)
		return -EINVAL;
	*commit_seq = load_u64(p);
	return 0;
}

bool journal_record_statement_next(const struct journal_record_view *r, struct journal_iter *it,
				   struct journal_statement_view *out)
{
	TERN_ASSERT(r != NULL && it != NULL && out != NULL);
	if (it->index >= r->statement_count)
		return false;
	TERN_ASSERT(it->offset < r->statements_len);
	struct journal_reader reader = {.p = r->statements + it->offset, .left = r->statements_len - it->offset};
	bool is_read = read_statement(&reader, out);
	TERN_ASSERT(is_read); /* the decode read the same bytes */
	it->offset = (uint32_t)(reader.p - r->statements);
	it->index++;
	return true;
}

bool journal_record_param_next(const struct journal_statement_view *s, struct journal_iter *it,
			       struct journal_param *out)
{
	TERN_ASSERT(s != NULL && it != NULL && out != NULL);
	if (it->index >= s->param_count)
		return false;
	TERN_ASSERT(it->offset < s->params_len);
	struct journal_reader reader = {.p = s->params + it->offset, .left = s->params_len - it->offset};
	bool is_read = read_param(&reader, out);
	TERN_ASSERT(is_read);
	it->offset = (uint32_t)(reader.p - s->params);
	it->index++;
	return true;
}

int16_t journal_record_param_format_at(const struct journal_statement_view *s, uint16_t i)
{
	TERN_ASSERT(s != NULL && i < s->param_format_count);
	return (int16_t)load_u16(s->param_formats + 2u * i);
}

uint32_t journal_record_param_type_at(const struct journal_statement_view *s, uint16_t i)
{
	TERN_ASSERT(i < s->param_type_count);
	return load_u32(s->param_types + 4u * i);
}

int16_t journal_record_result_format_at(const struct journal_statement_view *s, uint16_t i)
{
	TERN_ASSERT(s != NULL && i < s->result_format_count);
	return (int16_t)load_u16(s->result_formats + 2u * i);
}

/* ---- encoding ---- */

static int text_check(struct journal_text t, uint32_t max)
{
	TERN_ASSERT(t.data != NULL || t.len == 0);
	if (t.len > max)
		return -E2BIG;
	return t.len > 0 && memchr(t.data, '\0', t.len) != NULL ? -EINVAL : 0;
}

static int formats_check(const int16_t *formats, uint16_t count)
{
	TERN_ASSERT(formats != NULL || count == 0);
	for (uint16_t i = 0; i < count; i++)
		if (!format_is_valid(formats[i]))
			return -EINVAL;
	return 0;
}

/* The encoded size of one statement added to *size, the checks the decoder makes made here first. */
static int statement_size(const struct journal_statement *s, uint64_t *size)
{
	TERN_ASSERT(s->kind == JOURNAL_STATEMENT_SIMPLE || s->kind == JOURNAL_STATEMENT_EXTENDED);
	int rc;
	if ((rc = text_check(s->text, JOURNAL_RECORD_BYTES_MAX)) != 0 ||
	    (rc = text_check(s->tag, JOURNAL_RECORD_TAG_MAX)) != 0)
		return rc;
	*size += 1u + 4u + s->text.len + 4u + s->tag.len;
	if (s->kind == JOURNAL_STATEMENT_SIMPLE) {
		TERN_ASSERT(s->param_format_count == 0 && s->param_count == 0 && s->result_format_count == 0);
		return 0;
	}
	if (s->type_tail && s->type_tail_len != 2u + 4u * (((uint32_t)s->type_tail[0] << 8) | s->type_tail[1]))
		return -EINVAL;
	*size += s->type_tail ? s->type_tail_len : 2u + 4u * (uint64_t)s->param_type_count;
	TERN_ASSERT(s->param_types != NULL || s->param_type_count == 0);
	if (s->bind_tail) { /* as a Bind carried it: checked as the decoder reads it, then taken as it is */
		struct journal_reader tail = {.p = s->bind_tail, .left = s->bind_tail_len};
		struct journal_statement_view view;
		if (!read_bind_tail(&tail, &view) || tail.left != 0)
			return -EINVAL;
		*size += s->bind_tail_len;
		return *size > JOURNAL_RECORD_BYTES_MAX ? -E2BIG : 0;
	}
	if ((rc = formats_check(s->param_formats, s->param_format_count)) != 0 ||
	    (rc = formats_check(s->result_formats, s->result_format_count)) != 0)
		return rc;
	if (s->param_format_count > 1 && s->param_format_count != s->param_count)
		return -EINVAL;
	*size += 2u + 2u * (uint64_t)s->param_format_count + 2u + 2u + 2u * (uint64_t)s->result_format_count;
	TERN_ASSERT(s->params != NULL || s->param_count == 0);
	for (uint16_t i = 0; i < s->param_count; i++) {
		const struct journal_param *param = &s->params[i];
		if (param->len < -1)
			return -EINVAL;
		TERN_ASSERT(param->data != NULL || param->len <= 0);
		*size += 4u + (param->len > 0 ? (uint64_t)param->len : 0u);
		if (*size > JOURNAL_RECORD_BYTES_MAX)
			return -E2BIG;
	}
	return 0;
}

int journal_record_size(const struct journal_record *r, size_t *size)
{
	TERN_ASSERT(r != NULL && size != NULL);
	TERN_ASSERT((r->flags & ~(uint32_t)JOURNAL_RECORD_FLAGS_KNOWN) == 0);
	TERN_ASSERT(r->statements != NULL || r->statement_count == 0);
	const struct journal_text names[] = {r->client_addr, r->user, r->database, r->server};
	uint64_t total = 8u + 8u + 4u + 4u;
	int rc;
	for (size_t i = 0; i < TERN_ARRAY_LEN(names); i++) {
		if ((rc = text_check(names[i], JOURNAL_RECORD_NAME_MAX)) != 0)
			return rc;
		total += 4u + names[i].len;
	}
	if (r->statement_count > JOURNAL_RECORD_STATEMENTS_MAX)
		return -E2BIG;
	for (uint32_t i = 0; i < r->statement_count; i++) {
		if ((rc = statement_size(&r->statements[i], &total)) != 0)
			return rc;
		if (total > JOURNAL_RECORD_BYTES_MAX)
			return -E2BIG;
	}
	TERN_ASSERT(total >= JOURNAL_RECORD_BYTES_MIN);
	*size = (size_t)total;
	return 0;
}

struct record_out {
	uint8_t *p;
};

static void put_u8(struct record_out *w, uint8_t v)
{
	*w->p++ = v;
}

static void put_u16(struct record_out *w, uint16_t v)
{
	w->p[0] = (uint8_t)(v >> 8);
	w->p[1] = (uint8_t)v;
	w->p += 2;
}

static void put_u32(struct record_out *w, uint32_t v)
{
	w->p[0] = (uint8_t)(v >> 24);
	w->p[1] = (uint8_t)(v >> 16);
	w->p[2] = (uint8_t)(v >> 8);
	w->p[3] = (uint8_t)v;
	w->p += 4;
}

static void put_u64(struct record_out *w, uint64_t v)
{
	put_u32(w, (uint32_t)(v >> 32));
	put_u32(w, (uint32_t)v);
}

static void put_bytes(struct record_out *w, const void *p, size_t n)
{
	if (n > 0)
		memcpy(w->p, p, n);
	w->p += n;
}

static void put_text(struct record_out *w, struct journal_text t)
{
	put_u32(w, t.len);
	put_bytes(w, t.data, t.len);
}

static void put_formats(struct record_out *w, const int16_t *formats, uint16_t count)
{
	put_u16(w, count);
	for (uint16_t i = 0; i < count; i++)
		put_u16(w, (uint16_t)formats[i]);
}

int journal_record_encode(const struct journal_record *r, uint8_t *buf, size_t cap, size_t *len)
{
	TERN_ASSERT(len != NULL);
	TERN_ASSERT(buf != NULL || cap == 0);
	size_t size;
	int rc = journal_record_size(r, &size);
	if (rc != 0)
		return rc;
	*len = size;
	if (size > cap)
		return -ENOBUFS;
	struct record_out w = {.p = buf};
	put_u64(&w, r->commit_seq);
	put_u64(&w, r->committed_at_us);
	put_u32(&w, r->flags);
	put_text(&w, r->client_addr);
	put_text(&w, r->user);
	put_text(&w, r->database);
	put_text(&w, r->server);
	put_u32(&w, r->statement_count);
	for (uint32_t i = 0; i < r->statement_count; i++) {
		const struct journal_statement *s = &r->statements[i];
		put_u8(&w, (uint8_t)s->kind);
		put_text(&w, s->text);
		if (s->kind == JOURNAL_STATEMENT_EXTENDED && s->type_tail) {
			put_bytes(&w, s->type_tail, s->type_tail_len);
		} else if (s->kind == JOURNAL_STATEMENT_EXTENDED) {
			put_u16(&w, s->param_type_count);
			for (uint16_t k = 0; k < s->param_type_count; k++)
				put_u32(&w, s->param_types[k]);
		}
		if (s->kind == JOURNAL_STATEMENT_EXTENDED && s->bind_tail) {
			put_bytes(&w, s->bind_tail, s->bind_tail_len);
		} else if (s->kind == JOURNAL_STATEMENT_EXTENDED) {
			put_formats(&w, s->param_formats, s->param_format_count);
			put_u16(&w, s->param_count);
			for (uint16_t k = 0; k < s->param_count; k++) {
				put_u32(&w, (uint32_t)s->params[k].len);
				if (s->params[k].len > 0)
					put_bytes(&w, s->params[k].data, (size_t)s->params[k].len);
			}
			put_formats(&w, s->result_formats, s->result_format_count);
		}
		put_text(&w, s->tag);
	}
	TERN_ASSERT((size_t)(w.p - buf) == size);
	return 0;
}
