/*
 * test_journal.c — the recovery journal's storage layer: CRC-32C against RFC 3720's vectors, the record
 * codec (round trips, every truncation refused, corruptions never crash), the segment files (read back in
 * order, torn and corrupt tails cut, foreign formats refused naming the file, rotation and retention), and
 * the writer thread (each fsync policy, a full queue dropping and counting). Segment tests work in a temp
 * dir under /tmp; nothing sleeps: the writer is stopped (which drains it) before anything is checked.
 * The fuzz seeds in tests/fuzz/corpus/journal_record are written by corpus_seeds below and checked here
 * (TERN_WRITE_JOURNAL_CORPUS=1 rewrites them).
 */
#include "replay/crc32c.h"
#include "replay/journal_record.h"
#include "replay/journal_segment.h"
#include "replay/journal_writer.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TERN_SOURCE_ROOT
#error "TERN_SOURCE_ROOT must name the source tree (set by tests/meson.build)"
#endif

#define TEST_PAYLOAD_MAX (64u * 1024u)
#define TEST_SEQS_MAX 4096u
#define TEST_ERR_MAX 512u

/* ---- helpers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static struct journal_text text_of(const char *s)
{
	return (struct journal_text){.data = s, .len = (uint32_t)strlen(s)};
}

static bool text_is(struct journal_text t, struct journal_text expected)
{
	return t.len == expected.len && (t.len == 0 || memcmp(t.data, expected.data, t.len) == 0);
}

static char temp_dir[64];

static void temp_dir_create(void)
{
	snprintf(temp_dir, sizeof(temp_dir), "/tmp/tern-journal-XXXXXX");
	cr_assert_not_null(mkdtemp(temp_dir));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void temp_dir_remove(void)
{
	nftw(temp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* An encoded record for `seq`: one simple and one extended statement whose texts name it, the first
 * padded with `pad` bytes so tests can size records. Returns its length. */
static size_t make_payload(uint64_t seq, size_t pad, uint8_t *buf, size_t cap)
{
	static char text[TEST_PAYLOAD_MAX];
	cr_assert(pad + 64 < sizeof(text));
	int n = snprintf(text, sizeof(text), "UPDATE t SET v = v + 1 WHERE id = %llu -- ", (unsigned long long)seq);
	memset(text + n, 'x', pad);
	text[(size_t)n + pad] = '\0';
	uint8_t seq_bytes[8];
	memcpy(seq_bytes, &seq, sizeof(seq));
	const struct journal_param params[] = {{.data = seq_bytes, .len = 8}, {.data = NULL, .len = -1}};
	const int16_t formats[] = {1, 0};
	const struct journal_statement statements[] = {
		{.kind = JOURNAL_STATEMENT_SIMPLE, .text = text_of(text), .tag = text_of("UPDATE 1")},
		{.kind = JOURNAL_STATEMENT_EXTENDED, .text = text_of("INSERT INTO log VALUES ($1, $2)"),
		 .tag = text_of("INSERT 0 1"), .param_formats = formats, .param_format_count = 2, .params = params,
		 .param_count = 2},
	};
	const struct journal_record r = {.commit_seq = seq, .committed_at_us = 1700000000000000ull + seq,
					 .client_addr = text_of("10.0.0.7:51234"), .user = text_of("app"),
					 .database = text_of("shop"), .server = text_of("primary"),
					 .statements = statements, .statement_count = 2};
	size_t len = 0;
	cr_assert_eq(journal_record_encode(&r, buf, cap, &len), 0);
	return len;
}

/* What a journal_dir_open handed to its callback. */
struct collected {
	uint64_t seqs[TEST_SEQS_MAX];
	uint32_t count;
};

static int collect(void *ctx, const struct journal_record_view *record, const uint8_t *payload, uint32_t len)
{
	struct collected *c = ctx;
	cr_assert(len >= JOURNAL_RECORD_BYTES_MIN && payload != NULL);
	cr_assert(c->count < TEST_SEQS_MAX);
	c->seqs[c->count++] = record->commit_seq;
	return 0;
}

static struct journal_dir *open_collecting(const char *dir, uint64_t segment_bytes, uint64_t retain_bytes,
				       struct collected *c)
{
	char err[TEST_ERR_MAX] = "";
	memset(c, 0, sizeof(*c));
	struct journal_dir *j = NULL;
	int rc = journal_dir_open(dir, segment_bytes, retain_bytes, collect, c, &j, err, sizeof(err));
	cr_assert_eq(rc, 0, "open %s: %d %s", dir, rc, err);
	cr_assert_not_null(j);
	return j;
}

static void append_seq(struct journal_dir *j, uint64_t seq, size_t pad)
{
	static uint8_t buf[TEST_PAYLOAD_MAX];
	size_t len = make_payload(seq, pad, buf, sizeof(buf));
	cr_assert_eq(journal_dir_append(j, buf, (uint32_t)len), 0, "append %llu", (unsigned long long)seq);
}

static void assert_seqs(const struct collected *c, uint64_t first, uint64_t last)
{
	cr_assert_eq(c->count, last - first + 1, "%u records, expected %llu..%llu", c->count,
		     (unsigned long long)first, (unsigned long long)last);
	for (uint32_t i = 0; i < c->count; i++)
		cr_assert_eq(c->seqs[i], first + i, "record %u is %llu", i, (unsigned long long)c->seqs[i]);
}

/* The segment files of `dir`, oldest first: their number and sizes (up to `max`). */
static uint32_t list_segments(const char *dir, uint64_t *seqs, uint64_t *sizes, uint32_t max)
{
	struct dirent **entries;
	int n = scandir(dir, &entries, NULL, alphasort);
	cr_assert(n >= 0);
	uint32_t count = 0;
	for (int i = 0; i < n; i++) {
		unsigned long long seq;
		char path[512];
		if (sscanf(entries[i]->d_name, "journal-%20llu.log", &seq) == 1 && count < max) {
			snprintf(path, sizeof(path), "%s/%s", dir, entries[i]->d_name);
			struct stat st;
			cr_assert_eq(stat(path, &st), 0);
			seqs[count] = seq;
			sizes[count] = (uint64_t)st.st_size;
			count++;
		}
		free(entries[i]);
	}
	free(entries);
	return count;
}

static void segment_path(char *out, size_t size, const char *dir, uint64_t seq)
{
	snprintf(out, size, "%s/journal-%020llu.log", dir, (unsigned long long)seq);
}

static void write_file(const char *path, const void *data, size_t len, int flags)
{
	int fd = open(path, O_WRONLY | O_CREAT | flags, 0600);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

/* ---- CRC-32C ---- */

Test(journal, crc32c_matches_rfc_3720)
{
	uint8_t zeros[32] = {0}, ones[32], up[32], down[32];
	memset(ones, 0xff, sizeof(ones));
	for (int i = 0; i < 32; i++) {
		up[i] = (uint8_t)i;
		down[i] = (uint8_t)(31 - i);
	}
	cr_assert_eq(crc32c("123456789", 9), 0xE3069283u);
	cr_assert_eq(crc32c(zeros, 32), 0x8A9136AAu);
	cr_assert_eq(crc32c(ones, 32), 0x62A8AB43u);
	cr_assert_eq(crc32c(up, 32), 0x46DD794Eu);
	cr_assert_eq(crc32c(down, 32), 0x113FDB5Cu);
	cr_assert_eq(crc32c_extend_portable(0, "123456789", 9), 0xE3069283u);
	cr_assert_eq(crc32c_extend_portable(0, zeros, 32), 0x8A9136AAu);
	cr_assert_eq(crc32c(NULL, 0), 0u);
}

Test(journal, crc32c_paths_agree_at_every_length_alignment_and_split)
{
	uint8_t data[600];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)rng_next();
	for (size_t offset = 0; offset < 8; offset++)
		for (size_t len = 0; len + offset <= 300; len++) {
			uint32_t whole = crc32c(data + offset, len);
			cr_assert_eq(whole, crc32c_extend_portable(0, data + offset, len), "offset %zu len %zu", offset,
				     len);
			size_t half = len / 3;
			uint32_t split = crc32c_extend(crc32c(data + offset, half), data + offset + half, len - half);
			cr_assert_eq(whole, split, "offset %zu len %zu", offset, len);
		}
}

/* ---- the record codec ---- */

/* Walks every statement and parameter of a decoded record, checking each lies inside p[0..len). */
static uint32_t view_walk(const struct journal_record_view *v, const uint8_t *p, size_t len)
{
	const char *lo = (const char *)p, *hi = (const char *)p + len;
	const struct journal_text names[] = {v->client_addr, v->user, v->database, v->server};
	for (size_t i = 0; i < TERN_ARRAY_LEN(names); i++)
		cr_assert(names[i].data >= lo && names[i].data + names[i].len <= hi);
	struct journal_iter it = {0};
	struct journal_statement_view s;
	uint32_t count = 0;
	while (journal_record_statement_next(v, &it, &s)) {
		cr_assert(s.text.data >= lo && s.text.data + s.text.len <= hi);
		cr_assert(s.tag.data >= lo && s.tag.data + s.tag.len <= hi && s.tag.len <= JOURNAL_RECORD_TAG_MAX);
		struct journal_iter pit = {0};
		struct journal_param param;
		uint32_t params = 0;
		while (journal_record_param_next(&s, &pit, &param)) {
			cr_assert(param.len >= -1);
			if (param.len > 0)
				cr_assert((const char *)param.data >= lo && (const char *)param.data + param.len <= hi);
			params++;
		}
		cr_assert_eq(params, s.param_count);
		for (uint16_t i = 0; i < s.param_format_count; i++)
			cr_assert((uint16_t)journal_record_param_format_at(&s, i) <= 1);
		for (uint16_t i = 0; i < s.result_format_count; i++)
			cr_assert((uint16_t)journal_record_result_format_at(&s, i) <= 1);
		count++;
	}
	cr_assert_eq(count, v->statement_count);
	return count;
}

/* The decoded view holds exactly what `r` said. */
static void assert_same(const struct journal_record *r, const struct journal_record_view *v)
{
	cr_assert_eq(v->commit_seq, r->commit_seq);
	cr_assert_eq(v->committed_at_us, r->committed_at_us);
	cr_assert_eq(v->flags, r->flags);
	cr_assert(text_is(v->client_addr, r->client_addr) && text_is(v->user, r->user));
	cr_assert(text_is(v->database, r->database) && text_is(v->server, r->server));
	cr_assert_eq(v->statement_count, r->statement_count);
	struct journal_iter it = {0};
	struct journal_statement_view s;
	for (uint32_t i = 0; i < r->statement_count; i++) {
		const struct journal_statement *want = &r->statements[i];
		cr_assert(journal_record_statement_next(v, &it, &s));
		cr_assert_eq(s.kind, want->kind);
		cr_assert(text_is(s.text, want->text), "statement %u", i);
		cr_assert(text_is(s.tag, want->tag), "statement %u", i);
		cr_assert_eq(s.param_type_count, want->param_type_count);
		for (uint16_t k = 0; k < want->param_type_count; k++)
			cr_assert_eq(journal_record_param_type_at(&s, k), want->param_types[k]);
		cr_assert_eq(s.param_format_count, want->param_format_count);
		cr_assert_eq(s.param_count, want->param_count);
		cr_assert_eq(s.result_format_count, want->result_format_count);
		for (uint16_t k = 0; k < want->param_format_count; k++)
			cr_assert_eq(journal_record_param_format_at(&s, k), want->param_formats[k]);
		for (uint16_t k = 0; k < want->result_format_count; k++)
			cr_assert_eq(journal_record_result_format_at(&s, k), want->result_formats[k]);
		struct journal_iter pit = {0};
		struct journal_param param;
		for (uint16_t k = 0; k < want->param_count; k++) {
			cr_assert(journal_record_param_next(&s, &pit, &param));
			cr_assert_eq(param.len, want->params[k].len, "statement %u param %u", i, k);
			if (param.len == -1)
				cr_assert_null(param.data);
			else if (param.len > 0)
				cr_assert_eq(memcmp(param.data, want->params[k].data, (size_t)param.len), 0);
		}
		cr_assert_not(journal_record_param_next(&s, &pit, &param));
	}
	cr_assert_not(journal_record_statement_next(v, &it, &s));
}

static const uint8_t binary_value[] = {0x00, 0x01, 0xff, 0x00, 0x7f};
static const struct journal_param sample_params[] = {
	{.data = (const uint8_t *)"42", .len = 2},
	{.data = NULL, .len = -1},
	{.data = binary_value, .len = sizeof(binary_value)},
	{.data = (const uint8_t *)"", .len = 0},
};
static const int16_t sample_formats[] = {0, 0, 1, 0};
static const int16_t sample_results[] = {1, 0, 1};
static const uint32_t sample_types[] = {23, 0, 17}; /* int4, unspecified, bytea */
static const struct journal_statement sample_statements[] = {
	{.kind = JOURNAL_STATEMENT_SIMPLE, .text = {"BEGIN", 5}, .tag = {"BEGIN", 5}},
	{.kind = JOURNAL_STATEMENT_EXTENDED, .text = {"INSERT INTO t VALUES ($1, $2, $3, $4)", 37},
	 .tag = {"INSERT 0 1", 10}, .param_formats = sample_formats, .param_format_count = 4, .params = sample_params,
	 .param_count = 4, .result_formats = sample_results, .result_format_count = 3, .param_types = sample_types,
	 .param_type_count = 3},
	{.kind = JOURNAL_STATEMENT_EXTENDED, .text = {"SELECT 1", 8}, .tag = {"SELECT 1", 8}},
	{.kind = JOURNAL_STATEMENT_SIMPLE, .text = {"", 0}, .tag = {"", 0}},
	{.kind = JOURNAL_STATEMENT_SIMPLE, .text = {"COMMIT", 6}, .tag = {"COMMIT", 6}},
};
static const struct journal_record sample_record = {
	.commit_seq = 0x0102030405060708ull, .committed_at_us = 1712345678901234ull, .flags = JOURNAL_RECORD_INCOMPLETE,
	.client_addr = {"[::1]:5000", 10}, .user = {"", 0}, .database = {"db", 2}, .server = {"pg-a", 4},
	.statements = sample_statements, .statement_count = TERN_ARRAY_LEN(sample_statements),
};

static size_t encode_sample(uint8_t *buf, size_t cap)
{
	size_t len = 0;
	cr_assert_eq(journal_record_encode(&sample_record, buf, cap, &len), 0);
	return len;
}

Test(journal, record_round_trip_keeps_nulls_binary_values_empty_texts_and_formats)
{
	uint8_t buf[1024];
	size_t len = encode_sample(buf, sizeof(buf));
	size_t size = 0;
	cr_assert_eq(journal_record_size(&sample_record, &size), 0);
	cr_assert_eq(size, len);
	struct journal_record_view v;
	cr_assert_eq(journal_record_decode(buf, len, &v), 0);
	assert_same(&sample_record, &v);
	uint64_t seq = 0;
	cr_assert_eq(journal_record_peek_commit_seq(buf, len, &seq), 0);
	cr_assert_eq(seq, sample_record.commit_seq);
	/* Network byte order: commit_seq's most significant byte first. */
	cr_assert_eq(buf[0], 0x01);
	cr_assert_eq(buf[7], 0x08);
	/* The extended part is the Bind message's tail: format count 4, then format 0 ... */
	struct journal_iter it = {0};
	struct journal_statement_view s;
	cr_assert(journal_record_statement_next(&v, &it, &s) && journal_record_statement_next(&v, &it, &s));
	cr_assert_eq(s.bind_tail_len, 2 + 8 + 2 + (4 + 2) + 4 + (4 + 5) + 4 + 2 + 6);
	const uint8_t bind_head[] = {0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 2, '4', '2'};
	cr_assert_eq(memcmp(s.bind_tail, bind_head, sizeof(bind_head)), 0);
}

Test(journal, record_round_trip_with_many_statements)
{
	enum { COUNT = 3000 };
	static struct journal_statement statements[COUNT];
	static char texts[COUNT][32];
	for (int i = 0; i < COUNT; i++) {
		snprintf(texts[i], sizeof(texts[i]), "SELECT %d", i);
		bool is_extended = i % 2 == 1;
		statements[i] = (struct journal_statement){
			.kind = is_extended ? JOURNAL_STATEMENT_EXTENDED : JOURNAL_STATEMENT_SIMPLE,
			.text = text_of(texts[i]), .tag = text_of("SELECT 1"),
			.params = is_extended ? sample_params : NULL, .param_count = is_extended ? 4 : 0,
			.param_formats = is_extended ? sample_formats : NULL,
			.param_format_count = is_extended ? 1 : 0};
	}
	struct journal_record r = sample_record;
	r.statements = statements;
	r.statement_count = COUNT;
	size_t size = 0;
	cr_assert_eq(journal_record_size(&r, &size), 0);
	uint8_t *buf = malloc(size);
	size_t len = 0;
	cr_assert_eq(journal_record_encode(&r, buf, size, &len), 0);
	struct journal_record_view v;
	cr_assert_eq(journal_record_decode(buf, len, &v), 0);
	assert_same(&r, &v);
	free(buf);
}

Test(journal, record_encoder_refuses_what_the_decoder_would)
{
	uint8_t buf[1024];
	size_t len = 0;
	struct journal_record r = sample_record;
	cr_assert_eq(journal_record_encode(&r, buf, 10, &len), -ENOBUFS);
	cr_assert_eq(len, encode_sample(buf, sizeof(buf)), "the size needed is told");

	r.user = (struct journal_text){"a\0b", 3};
	cr_assert_eq(journal_record_encode(&r, buf, sizeof(buf), &len), -EINVAL, "a NUL in a name");
	static char long_name[JOURNAL_RECORD_NAME_MAX + 1];
	memset(long_name, 'n', sizeof(long_name));
	r.user = (struct journal_text){long_name, sizeof(long_name)};
	cr_assert_eq(journal_record_encode(&r, buf, sizeof(buf), &len), -E2BIG, "a name over its limit");

	struct journal_statement s = sample_statements[1];
	r = sample_record;
	r.statements = &s;
	r.statement_count = 1;
	const int16_t bad_format[] = {0, 2, 0, 0};
	s.param_formats = bad_format;
	cr_assert_eq(journal_record_encode(&r, buf, sizeof(buf), &len), -EINVAL, "format 2");
	s = sample_statements[1];
	s.param_format_count = 3;
	cr_assert_eq(journal_record_encode(&r, buf, sizeof(buf), &len), -EINVAL, "3 formats for 4 values");
	s = sample_statements[1];
	const struct journal_param bad_param[] = {{.data = NULL, .len = -2}};
	s.params = bad_param;
	s.param_count = 1;
	s.param_format_count = 0;
	cr_assert_eq(journal_record_encode(&r, buf, sizeof(buf), &len), -EINVAL, "length -2");
	s = sample_statements[1];
	static char long_tag[JOURNAL_RECORD_TAG_MAX + 1];
	memset(long_tag, 't', sizeof(long_tag));
	s.tag = (struct journal_text){long_tag, sizeof(long_tag)};
	cr_assert_eq(journal_record_encode(&r, buf, sizeof(buf), &len), -E2BIG, "a tag over its limit");
}

Test(journal, record_decoder_refuses_every_truncation_and_trailing_bytes)
{
	uint8_t buf[1024];
	size_t len = encode_sample(buf, sizeof(buf));
	struct journal_record_view v;
	for (size_t n = 0; n < len; n++) {
		/* A copy of exactly n bytes, so a read past it would be a read past an allocation. */
		uint8_t *prefix = malloc(n > 0 ? n : 1);
		memcpy(prefix, buf, n);
		cr_assert_eq(journal_record_decode(prefix, n, &v), -EINVAL, "a prefix of %zu of %zu bytes", n, len);
		free(prefix);
	}
	buf[len] = 0;
	cr_assert_eq(journal_record_decode(buf, len + 1, &v), -EINVAL, "one byte after");
	cr_assert_eq(journal_record_decode(NULL, 0, &v), -EINVAL);
}

Test(journal, record_decoder_refuses_unknown_flags_kinds_and_absurd_counts)
{
	uint8_t buf[1024], bad[1024];
	size_t len = encode_sample(buf, sizeof(buf));
	struct journal_record_view v;
	memcpy(bad, buf, len);
	bad[19] |= 0x2; /* flags: an unknown bit */
	cr_assert_eq(journal_record_decode(bad, len, &v), -EINVAL);
	/* The statement count follows the four names. */
	size_t count_at = 20 + 4 + 10 + 4 + 0 + 4 + 2 + 4 + 4;
	memcpy(bad, buf, len);
	memset(bad + count_at, 0xff, 4);
	cr_assert_eq(journal_record_decode(bad, len, &v), -EINVAL, "2^32-1 statements");
	memcpy(bad, buf, len);
	bad[count_at + 4] = 3; /* the first statement's kind */
	cr_assert_eq(journal_record_decode(bad, len, &v), -EINVAL, "kind 3");
	memcpy(bad, buf, len);
	memset(bad + 4, 0xff, 4); /* commit_seq may be any value */
	cr_assert_eq(journal_record_decode(bad, len, &v), 0);
}

Test(journal, record_decoder_survives_random_corruption)
{
	uint8_t buf[1024], bad[1024];
	size_t len = encode_sample(buf, sizeof(buf));
	uint32_t decoded = 0;
	for (size_t at = 0; at < len; at++)
		for (int round = 0; round < 8; round++) {
			memcpy(bad, buf, len);
			bad[at] ^= (uint8_t)(1u + rng_next() % 255u);
			uint8_t *exact = malloc(len);
			memcpy(exact, bad, len);
			struct journal_record_view v;
			int rc = journal_record_decode(exact, len, &v);
			cr_assert(rc == 0 || rc == -EINVAL);
			if (rc == 0) {
				view_walk(&v, exact, len);
				decoded++;
			}
			free(exact);
		}
	cr_assert(decoded > 0, "some corruptions (a byte of text, a timestamp) still decode");
}

/* ---- segments ---- */

Test(journal, segments_read_back_in_order_and_commit_seq_continues, .init = temp_dir_create, .fini = temp_dir_remove)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	cr_assert_eq(c.count, 0);
	cr_assert_eq(journal_dir_commit_seq_high(j), 0);
	for (uint64_t seq = 1; seq <= 100; seq++)
		append_seq(j, seq, seq % 7);
	cr_assert(journal_dir_sync(j) >= 0);
	struct journal_dir_stats stats;
	journal_dir_stats(j, &stats);
	cr_assert_eq(stats.records_written, 100);
	cr_assert_eq(stats.segment_count, 1);
	journal_dir_close(j);

	j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	assert_seqs(&c, 1, 100);
	cr_assert_eq(journal_dir_commit_seq_high(j), 100);
	for (uint64_t seq = 101; seq <= 110; seq++)
		append_seq(j, seq, 0);
	journal_dir_close(j);
	j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	assert_seqs(&c, 1, 110);
	journal_dir_stats(j, &stats);
	cr_assert_eq(stats.records_recovered, 110);
	cr_assert_eq(stats.bytes_truncated, 0);
	journal_dir_close(j);
	uint64_t seqs[4], sizes[4];
	cr_assert_eq(list_segments(temp_dir, seqs, sizes, 4), 1);
	cr_assert_eq(seqs[0], 1, "an empty journal's first segment is named after commit_seq 1");
}

/* Writes records 1..10, closes, lets `damage` change the newest segment, then checks the reopen cut it
 * back to the records it still holds whole, and that appends land after them. */
static void check_tail_repair(void (*damage)(const char *path, uint64_t size), uint64_t intact_expected)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	for (uint64_t seq = 1; seq <= 10; seq++)
		append_seq(j, seq, 0);
	journal_dir_close(j);
	char path[256];
	segment_path(path, sizeof(path), temp_dir, 1);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	damage(path, (uint64_t)st.st_size);

	j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	assert_seqs(&c, 1, intact_expected);
	struct journal_dir_stats stats;
	journal_dir_stats(j, &stats);
	cr_assert(stats.bytes_truncated > 0);
	cr_assert_eq(journal_dir_commit_seq_high(j), intact_expected);
	for (uint64_t seq = intact_expected + 1; seq <= 12; seq++)
		append_seq(j, seq, 0);
	journal_dir_close(j);
	j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	assert_seqs(&c, 1, 12);
	journal_dir_stats(j, &stats);
	cr_assert_eq(stats.bytes_truncated, 0);
	journal_dir_close(j);
}

static void damage_cut_mid_record(const char *path, uint64_t size)
{
	cr_assert_eq(truncate(path, (off_t)size - 5), 0);
}

static void damage_cut_mid_frame_header(const char *path, uint64_t size)
{
	uint8_t one[TEST_PAYLOAD_MAX];
	size_t len = make_payload(10, 0, one, sizeof(one));
	cr_assert_eq(truncate(path, (off_t)(size - len - 3)), 0); /* 5 bytes of record 10's frame header left */
}

static void damage_append_garbage(const char *path, uint64_t size)
{
	(void)size;
	write_file(path, "\x00\x00\x01\x00garbage-tail", 16, O_APPEND);
}

static void damage_append_zeros(const char *path, uint64_t size)
{
	(void)size;
	static const uint8_t zeros[4096];
	write_file(path, zeros, sizeof(zeros), O_APPEND);
}

static void damage_flip_last_record(const char *path, uint64_t size)
{
	int fd = open(path, O_RDWR);
	uint8_t byte;
	cr_assert_eq(pread(fd, &byte, 1, (off_t)size - 3), 1);
	byte ^= 0x40;
	cr_assert_eq(pwrite(fd, &byte, 1, (off_t)size - 3), 1);
	close(fd);
}

Test(journal, torn_tail_cut_mid_record, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_tail_repair(damage_cut_mid_record, 9);
}

Test(journal, torn_tail_cut_mid_frame_header, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_tail_repair(damage_cut_mid_frame_header, 9);
}

Test(journal, garbage_tail_is_cut, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_tail_repair(damage_append_garbage, 10);
}

Test(journal, zero_filled_tail_is_cut, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_tail_repair(damage_append_zeros, 10);
}

Test(journal, corrupt_last_record_is_cut, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_tail_repair(damage_flip_last_record, 9);
}

Test(journal, a_segment_cut_inside_its_header_gets_it_back, .init = temp_dir_create, .fini = temp_dir_remove)
{
	char path[256];
	segment_path(path, sizeof(path), temp_dir, 7);
	write_file(path, "TRN", 3, 0);
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	cr_assert_eq(c.count, 0);
	append_seq(j, 7, 0);
	journal_dir_close(j);
	j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	assert_seqs(&c, 7, 7);
	journal_dir_close(j);
}

static void check_refused(const void *header, size_t len, int rc_expected, const char *words)
{
	char path[256], err[TEST_ERR_MAX] = "";
	segment_path(path, sizeof(path), temp_dir, 1);
	write_file(path, header, len, 0);
	struct journal_dir *j = (struct journal_dir *)1;
	int rc = journal_dir_open(temp_dir, 1u << 20, 1u << 30, NULL, NULL, &j, err, sizeof(err));
	cr_assert_eq(rc, rc_expected, "%d: %s", rc, err);
	cr_assert_null(j);
	cr_assert(strstr(err, "journal-00000000000000000001.log") != NULL, "names the file: %s", err);
	cr_assert(strstr(err, words) != NULL, "'%s' in: %s", words, err);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0, "a refused segment is kept");
	cr_assert_eq((size_t)st.st_size, len);
}

Test(journal, bad_magic_is_refused_naming_the_file, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_refused("HJ02\x00\x00\x00\x01rest", 12, -EINVAL, "not a tern journal segment");
}

Test(journal, unknown_version_is_refused_naming_the_file_and_version, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_refused("TRNJ\x00\x00\x00\x63", 8, -EPROTONOSUPPORT, "version 99");
}

Test(journal, rotation_and_retention_keep_the_newest_whole_segments, .init = temp_dir_create, .fini = temp_dir_remove)
{
	const uint64_t segment_bytes = 4096, retain_bytes = 3 * 4096;
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, segment_bytes, retain_bytes, &c);
	struct journal_dir_stats stats;
	for (uint64_t seq = 1; seq <= 300; seq++) {
		append_seq(j, seq, 200);
		journal_dir_stats(j, &stats);
		cr_assert(stats.disk_bytes <= retain_bytes + segment_bytes, "%llu bytes",
			  (unsigned long long)stats.disk_bytes);
	}
	journal_dir_stats(j, &stats);
	cr_assert(stats.segments_rotated >= 20, "%llu rotations", (unsigned long long)stats.segments_rotated);
	cr_assert(stats.segments_deleted > 0);
	cr_assert_eq(stats.segments_rotated + 1 - stats.segments_deleted, stats.segment_count);
	journal_dir_close(j);

	uint64_t seqs[16], sizes[16];
	uint32_t count = list_segments(temp_dir, seqs, sizes, 16);
	cr_assert_eq(count, stats.segment_count);
	cr_assert(count >= 3 && count <= 4, "%u segments", count);
	uint64_t total = 0;
	for (uint32_t i = 0; i < count; i++) {
		cr_assert(sizes[i] <= segment_bytes);
		total += sizes[i];
	}
	cr_assert(total - sizes[count - 1] <= retain_bytes, "the whole segments before the newest fit the budget");
	/* What is left is a run of whole segments ending with the last record. */
	j = open_collecting(temp_dir, segment_bytes, retain_bytes, &c);
	cr_assert_eq(c.seqs[0], seqs[0], "the oldest segment starts with its first record");
	assert_seqs(&c, seqs[0], 300);
	journal_dir_close(j);
}

Test(journal, retention_below_one_segment_never_deletes_the_current, .init = temp_dir_create, .fini = temp_dir_remove)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 4096, 1, &c);
	for (uint64_t seq = 1; seq <= 50; seq++)
		append_seq(j, seq, 300);
	journal_dir_close(j);
	uint64_t seqs[4], sizes[4];
	cr_assert_eq(list_segments(temp_dir, seqs, sizes, 4), 1);
	j = open_collecting(temp_dir, 4096, 1, &c);
	cr_assert(c.count > 0);
	assert_seqs(&c, seqs[0], 50);
	journal_dir_close(j);
}

Test(journal, a_record_larger_than_a_segment_has_one_of_its_own, .init = temp_dir_create, .fini = temp_dir_remove)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 4096, 1u << 30, &c);
	append_seq(j, 1, 0);
	append_seq(j, 2, 10000);
	append_seq(j, 3, 0);
	journal_dir_close(j);
	uint64_t seqs[4], sizes[4];
	cr_assert_eq(list_segments(temp_dir, seqs, sizes, 4), 3);
	cr_assert(seqs[0] == 1 && seqs[1] == 2 && seqs[2] == 3);
	cr_assert(sizes[1] > 10000);
	j = open_collecting(temp_dir, 4096, 1u << 30, &c);
	assert_seqs(&c, 1, 3);
	journal_dir_close(j);
}

Test(journal, a_bad_record_in_an_older_segment_stops_that_segment_only, .init = temp_dir_create,
     .fini = temp_dir_remove)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 4096, 1u << 30, &c);
	for (uint64_t seq = 1; seq <= 40; seq++)
		append_seq(j, seq, 300);
	journal_dir_close(j);
	uint64_t seqs[16], sizes[16];
	uint32_t count = list_segments(temp_dir, seqs, sizes, 16);
	cr_assert(count >= 3);
	uint32_t in_first = (uint32_t)(seqs[1] - seqs[0]);
	cr_assert(in_first >= 3);
	/* A byte in the first segment's second record (its text, past the frame and record headers). */
	char path[256];
	segment_path(path, sizeof(path), temp_dir, seqs[0]);
	uint8_t one[TEST_PAYLOAD_MAX];
	size_t frame = 8 + make_payload(1, 300, one, sizeof(one));
	int fd = open(path, O_RDWR);
	cr_assert_eq(pwrite(fd, "!", 1, (off_t)(8 + frame + 8 + 100)), 1);
	close(fd);

	j = open_collecting(temp_dir, 4096, 1u << 30, &c);
	struct journal_dir_stats stats;
	journal_dir_stats(j, &stats);
	cr_assert_eq(stats.segments_damaged, 1);
	cr_assert_eq(stats.bytes_truncated, 0);
	cr_assert_eq(c.count, 40 - (in_first - 1));
	cr_assert_eq(c.seqs[0], 1);
	cr_assert_eq(c.seqs[1], seqs[1], "the next segment is read whole");
	cr_assert_eq(c.seqs[c.count - 1], 40);
	journal_dir_close(j);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq((uint64_t)st.st_size, sizes[0], "nothing of the damaged segment is deleted");
}

Test(journal, an_unwritable_dir_fails_open_with_a_clear_error, .init = temp_dir_create, .fini = temp_dir_remove)
{
	char file[256], dir[300], err[TEST_ERR_MAX] = "";
	snprintf(file, sizeof(file), "%s/file", temp_dir);
	write_file(file, "x", 1, 0);
	snprintf(dir, sizeof(dir), "%s/dir", file);
	struct journal_dir *j = NULL;
	int rc = journal_dir_open(dir, 4096, 1u << 30, NULL, NULL, &j, err, sizeof(err));
	cr_assert_eq(rc, -ENOTDIR, "%d %s", rc, err);
	cr_assert_null(j);
	cr_assert(strstr(err, dir) != NULL && strstr(err, "cannot create directory") != NULL, "%s", err);
}

Test(journal, a_missing_dir_is_created_with_its_parents, .init = temp_dir_create, .fini = temp_dir_remove)
{
	char dir[256];
	snprintf(dir, sizeof(dir), "%s/a/b/journal", temp_dir);
	struct collected c;
	struct journal_dir *j = open_collecting(dir, 4096, 1u << 30, &c);
	struct stat st;
	cr_assert_eq(stat(dir, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);
	journal_dir_close(j);
}

Test(journal, a_dir_in_use_is_refused, .init = temp_dir_create, .fini = temp_dir_remove)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 4096, 1u << 30, &c);
	char err[TEST_ERR_MAX] = "";
	struct journal_dir *second = NULL;
	int rc = journal_dir_open(temp_dir, 4096, 1u << 30, NULL, NULL, &second, err, sizeof(err));
	cr_assert_eq(rc, -EWOULDBLOCK, "%d %s", rc, err);
	cr_assert(strstr(err, "in use") != NULL, "%s", err);
	journal_dir_close(j);
}

Test(journal, scan_reports_how_frames_end)
{
	uint8_t body[4096] = {0};
	uint8_t payload[TEST_PAYLOAD_MAX];
	size_t len = make_payload(5, 0, payload, sizeof(payload));
	uint32_t crc = crc32c(payload, len);
	const uint8_t header[8] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len,
				   (uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
	memcpy(body, header, 8);
	memcpy(body + 8, payload, len);
	struct journal_scan scan;
	cr_assert_eq(journal_segment_scan(body, 8 + len, NULL, NULL, &scan), 0);
	cr_assert(scan.end == JOURNAL_SCAN_CLEAN && scan.records == 1 && scan.intact_bytes == 8 + len);
	cr_assert_eq(scan.commit_seq_high, 5);
	cr_assert_eq(journal_segment_scan(body, 8 + len - 1, NULL, NULL, &scan), 0);
	cr_assert(scan.end == JOURNAL_SCAN_TORN && scan.records == 0 && scan.intact_bytes == 0);
	body[8 + len] = 0xff;
	cr_assert_eq(journal_segment_scan(body, 8 + len + 8, NULL, NULL, &scan), 0);
	cr_assert(scan.end == JOURNAL_SCAN_CORRUPT && scan.records == 1 && scan.intact_bytes == 8 + len);
	cr_assert_eq(journal_segment_scan(NULL, 0, NULL, NULL, &scan), 0);
	cr_assert(scan.end == JOURNAL_SCAN_CLEAN && scan.records == 0);
}

/* ---- the writer thread ---- */

static void check_writer_policy(enum journal_fsync_policy policy)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 64 * 1024, 1u << 30, &c);
	struct journal_writer *w = NULL;
	cr_assert_eq(journal_writer_start(&w, j, 4096, policy, 1), 0);
	uint8_t buf[TEST_PAYLOAD_MAX];
	for (uint64_t seq = 1; seq <= 1000; seq++) {
		size_t len = make_payload(seq, seq % 50, buf, sizeof(buf));
		cr_assert(journal_writer_submit(w, buf, (uint32_t)len), "submit %llu", (unsigned long long)seq);
	}
	journal_writer_stop(w);
	struct journal_dir_stats stats;
	journal_dir_stats(j, &stats);
	cr_assert_eq(stats.records_written, 1000);
	cr_assert(stats.segments_rotated > 0, "64 KiB segments rotate under 1000 records");
	journal_dir_close(j);
	j = open_collecting(temp_dir, 64 * 1024, 1u << 30, &c);
	assert_seqs(&c, 1, 1000);
	journal_dir_close(j);
}

Test(journal, writer_fsync_commit_writes_every_record_in_order, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_writer_policy(JOURNAL_FSYNC_COMMIT);
}

Test(journal, writer_fsync_interval_writes_every_record_in_order, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_writer_policy(JOURNAL_FSYNC_INTERVAL);
}

Test(journal, writer_fsync_none_writes_every_record_in_order, .init = temp_dir_create, .fini = temp_dir_remove)
{
	check_writer_policy(JOURNAL_FSYNC_NONE);
}

/* Polls the writer's counters (no sleep) until it has written `count` records, for at most 10 s. */
static void wait_written(struct journal_writer *w, uint64_t count, struct journal_writer_stats *stats)
{
	uint64_t deadline_ns = base_now_ns() + 10 * BASE_NS_PER_SEC;
	do {
		journal_writer_stats(w, stats);
		if (stats->written == count && stats->queued == 0)
			return;
		sched_yield();
	} while (base_now_ns() < deadline_ns);
	cr_assert_fail("the writer wrote %llu of %llu records in 10 s", (unsigned long long)stats->written,
		       (unsigned long long)count);
}

Test(journal, writer_syncs_once_per_batch_under_commit_and_never_under_none, .init = temp_dir_create,
     .fini = temp_dir_remove)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	uint8_t buf[TEST_PAYLOAD_MAX];
	const enum journal_fsync_policy policies[] = {JOURNAL_FSYNC_COMMIT, JOURNAL_FSYNC_NONE};
	for (size_t p = 0; p < TERN_ARRAY_LEN(policies); p++) {
		struct journal_writer *w = NULL;
		cr_assert_eq(journal_writer_start(&w, j, 16, policies[p], 0), 0);
		journal_writer_set_paused(w, true); /* the three go as one batch */
		for (uint64_t i = 1; i <= 3; i++) {
			size_t len = make_payload(3 * p + i, 0, buf, sizeof(buf));
			cr_assert(journal_writer_submit(w, buf, (uint32_t)len));
		}
		journal_writer_set_paused(w, false);
		struct journal_writer_stats stats;
		wait_written(w, 3, &stats);
		if (policies[p] == JOURNAL_FSYNC_COMMIT) {
			/* The sync follows the write: wait for it the same way. */
			uint64_t deadline_ns = base_now_ns() + 10 * BASE_NS_PER_SEC;
			while (stats.fsyncs == 0 && base_now_ns() < deadline_ns) {
				sched_yield();
				journal_writer_stats(w, &stats);
			}
			cr_assert_eq(stats.fsyncs, 1, "one group commit for one batch");
			cr_assert(stats.fsync_ns_max <= stats.fsync_ns_total && stats.fsync_ns_total > 0);
		} else {
			cr_assert_eq(stats.fsyncs, 0);
		}
		cr_assert_eq(stats.dropped, 0);
		cr_assert(stats.bytes > 0);
		journal_writer_stop(w);
	}
	journal_dir_close(j);
	j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	assert_seqs(&c, 1, 6);
	journal_dir_close(j);
}

Test(journal, writer_full_queue_drops_and_counts, .init = temp_dir_create, .fini = temp_dir_remove)
{
	struct collected c;
	struct journal_dir *j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	struct journal_writer *w = NULL;
	cr_assert_eq(journal_writer_start(&w, j, 4, JOURNAL_FSYNC_COMMIT, 0), 0);
	journal_writer_set_paused(w, true);
	uint8_t buf[TEST_PAYLOAD_MAX];
	for (uint64_t seq = 1; seq <= 10; seq++) {
		size_t len = make_payload(seq, 0, buf, sizeof(buf));
		cr_assert_eq(journal_writer_submit(w, buf, (uint32_t)len), seq <= 4, "submit %llu",
			     (unsigned long long)seq);
	}
	struct journal_writer_stats stats;
	journal_writer_stats(w, &stats);
	cr_assert_eq(stats.queued, 4);
	cr_assert_eq(stats.dropped, 6);
	cr_assert_eq(stats.written, 0);
	journal_writer_stop(w); /* drains the paused writer */
	struct journal_dir_stats journal;
	journal_dir_stats(j, &journal);
	cr_assert_eq(journal.records_written, 4);
	journal_dir_close(j);
	j = open_collecting(temp_dir, 1u << 20, 1u << 30, &c);
	assert_seqs(&c, 1, 4);
	journal_dir_close(j);
}

/* ---- the fuzz seeds ---- */

/* The seeds of tests/fuzz/corpus/journal_record: encoded records, and segment bodies (frames). */
static size_t corpus_seed(int index, uint8_t *buf, size_t cap, const char **name)
{
	size_t len = 0;
	switch (index) {
	case 0:
		*name = "seed-record-sample";
		len = encode_sample(buf, cap);
		break;
	case 1:
		*name = "seed-record-update";
		len = make_payload(77, 3, buf, cap);
		break;
	case 2: {
		*name = "seed-record-empty";
		const struct journal_record r = {.commit_seq = 1};
		cr_assert_eq(journal_record_encode(&r, buf, cap, &len), 0);
		break;
	}
	case 3: {
		*name = "seed-frames-two";
		for (uint64_t seq = 1; seq <= 2; seq++) {
			uint8_t payload[1024];
			size_t n = make_payload(seq, 0, payload, sizeof(payload));
			uint32_t crc = crc32c(payload, n);
			const uint8_t header[8] = {0, 0, (uint8_t)(n >> 8), (uint8_t)n, (uint8_t)(crc >> 24),
						   (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
			cr_assert(len + 8 + n <= cap);
			memcpy(buf + len, header, 8);
			memcpy(buf + len + 8, payload, n);
			len += 8 + n;
		}
		break;
	}
	default:
		return 0;
	}
	return len;
}

Test(journal, fuzz_corpus_seeds_are_what_the_codec_writes)
{
	bool is_writing = getenv("TERN_WRITE_JOURNAL_CORPUS") != NULL;
	const char *dir = TERN_SOURCE_ROOT "/tests/fuzz/corpus/journal_record";
	uint8_t buf[4096], file[4096];
	const char *name = NULL;
	size_t len;
	for (int i = 0; (len = corpus_seed(i, buf, sizeof(buf), &name)) > 0; i++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		if (is_writing)
			write_file(path, buf, len, O_TRUNC);
		int fd = open(path, O_RDONLY);
		cr_assert(fd >= 0, "%s: %s (TERN_WRITE_JOURNAL_CORPUS=1 writes it)", path, strerror(errno));
		ssize_t n = read(fd, file, sizeof(file));
		close(fd);
		cr_assert(n == (ssize_t)len && memcmp(file, buf, len) == 0, "%s is not what the codec writes", path);
		struct journal_record_view v;
		struct journal_scan scan;
		if (strncmp(name, "seed-record", 11) == 0) {
			cr_assert_eq(journal_record_decode(file, len, &v), 0, "%s", path);
		} else {
			cr_assert_eq(journal_segment_scan(file, len, NULL, NULL, &scan), 0);
			cr_assert(scan.end == JOURNAL_SCAN_CLEAN && scan.records == 2, "%s", path);
		}
	}
}

Test(journal, a_bind_tail_taken_as_it_is_encodes_as_its_parts_do)
{
	/* The capture hands a statement's formats and values as the Bind carried them (bind_tail): the bytes
	 * are the same as from the separate parts, and a malformed tail is refused as the decoder would. */
	uint8_t buf[1024], again[1024];
	size_t len = encode_sample(buf, sizeof(buf));
	struct journal_record_view v;
	cr_assert_eq(journal_record_decode(buf, len, &v), 0);
	struct journal_statement copies[TERN_ARRAY_LEN(sample_statements)];
	memcpy(copies, sample_statements, sizeof(copies));
	struct journal_iter it = {0};
	struct journal_statement_view s;
	for (uint32_t i = 0; journal_record_statement_next(&v, &it, &s); i++) {
		if (s.kind != JOURNAL_STATEMENT_EXTENDED)
			continue;
		copies[i] = (struct journal_statement){.kind = s.kind, .text = s.text, .tag = s.tag, .bind_tail = s.bind_tail,
						       .bind_tail_len = s.bind_tail_len, .type_tail = s.param_types - 2,
						       .type_tail_len = 2u + 4u * s.param_type_count};
	}
	struct journal_record r = sample_record;
	r.statements = copies;
	size_t again_len = 0;
	cr_assert_eq(journal_record_encode(&r, again, sizeof(again), &again_len), 0);
	cr_assert_eq(again_len, len);
	cr_assert_eq(memcmp(again, buf, len), 0);
	/* A tail one byte short, or with a byte too many, is not a Bind's. */
	for (int delta = -1; delta <= 1; delta += 2) {
		copies[1].bind_tail_len = (uint32_t)((int)copies[1].bind_tail_len + delta);
		size_t size;
		cr_assert_eq(journal_record_size(&r, &size), -EINVAL, "delta %d", delta);
		copies[1].bind_tail_len = (uint32_t)((int)copies[1].bind_tail_len - delta);
	}
}
