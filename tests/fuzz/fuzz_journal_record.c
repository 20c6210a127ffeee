/*
 * fuzz_journal_record.c — the recovery journal's readers of bytes from disk: journal_record_decode (a
 * frame's payload) and journal_segment_scan (a segment's frames, in memory). Every input either decodes or
 * is refused; what decodes lies inside the input, walks to its declared counts, and encodes back to the
 * same bytes. The scan's intact prefix scans again to the same records, cleanly. The same bytes go to
 * both readers.
 */
#include "replay/journal_record.h"
#include "replay/journal_segment.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                                      \
	do {                                                                                                  \
		if (!(cond)) {                                                                                \
			fprintf(stderr, "fuzz_journal_record: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort();                                                                              \
		}                                                                                             \
	} while (0)

/* Inputs above this teach nothing more and slow the fuzzer. */
#define FUZZ_INPUT_MAX (1u << 20)

static bool fuzz_is_inside(const void *p, size_t n, const uint8_t *data, size_t size)
{
	return n == 0 || ((const uint8_t *)p >= data && (const uint8_t *)p + n <= data + size);
}

/* Rebuilds the record the view describes, encodes it, and checks the bytes are the input's. */
static void fuzz_record(const uint8_t *data, size_t size)
{
	struct journal_record_view v;
	int rc = journal_record_decode(data, size, &v);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	if (rc != 0)
		return;
	FUZZ_CHECK(v.statement_count <= JOURNAL_RECORD_STATEMENTS_MAX);
	FUZZ_CHECK((v.flags & ~(uint32_t)JOURNAL_RECORD_FLAGS_KNOWN) == 0);
	const struct journal_text names[] = {v.client_addr, v.user, v.database, v.server};
	for (size_t i = 0; i < TERN_ARRAY_LEN(names); i++)
		FUZZ_CHECK(fuzz_is_inside(names[i].data, names[i].len, data, size) &&
			   names[i].len <= JOURNAL_RECORD_NAME_MAX);

	struct journal_statement *statements = calloc(v.statement_count + 1u, sizeof(*statements));
	FUZZ_CHECK(statements != NULL);
	/* Every format and parameter of every statement, so the rebuilt record can point at them. */
	size_t slots = size / 2u + 1u;
	int16_t *formats = calloc(slots, sizeof(*formats));
	struct journal_param *params = calloc(slots, sizeof(*params));
	FUZZ_CHECK(formats != NULL && params != NULL);
	size_t formats_used = 0, params_used = 0;

	struct journal_iter it = {0};
	struct journal_statement_view s;
	uint32_t count = 0;
	while (journal_record_statement_next(&v, &it, &s)) {
		FUZZ_CHECK(count < v.statement_count);
		FUZZ_CHECK(s.kind == JOURNAL_STATEMENT_SIMPLE || s.kind == JOURNAL_STATEMENT_EXTENDED);
		FUZZ_CHECK(fuzz_is_inside(s.text.data, s.text.len, data, size));
		FUZZ_CHECK(fuzz_is_inside(s.tag.data, s.tag.len, data, size) && s.tag.len <= JOURNAL_RECORD_TAG_MAX);
		FUZZ_CHECK(fuzz_is_inside(s.bind_tail, s.bind_tail_len, data, size));
		struct journal_statement *out = &statements[count];
		*out = (struct journal_statement){.kind = s.kind, .text = s.text, .tag = s.tag};
		if (s.kind == JOURNAL_STATEMENT_EXTENDED) {
			/* the types as the record carries them (count, then OIDs): re-encoded as they are */
			FUZZ_CHECK(fuzz_is_inside(s.param_types - 2, 2u + 4u * s.param_type_count, data, size));
			out->type_tail = s.param_types - 2;
			out->type_tail_len = 2u + 4u * s.param_type_count;
			FUZZ_CHECK(s.param_format_count <= 1 || s.param_format_count == s.param_count);
			out->param_formats = formats + formats_used;
			out->param_format_count = s.param_format_count;
			for (uint16_t i = 0; i < s.param_format_count; i++) {
				FUZZ_CHECK(formats_used < slots);
				formats[formats_used++] = journal_record_param_format_at(&s, i);
			}
			out->params = params + params_used;
			out->param_count = s.param_count;
			struct journal_iter pit = {0};
			struct journal_param param;
			uint32_t param_count = 0;
			while (journal_record_param_next(&s, &pit, &param)) {
				FUZZ_CHECK(param.len >= -1 && params_used < slots);
				FUZZ_CHECK(param.len == -1 ? param.data == NULL
							   : fuzz_is_inside(param.data, (size_t)param.len, data, size));
				params[params_used++] = param;
				param_count++;
			}
			FUZZ_CHECK(param_count == s.param_count);
			out->result_formats = formats + formats_used;
			out->result_format_count = s.result_format_count;
			for (uint16_t i = 0; i < s.result_format_count; i++) {
				FUZZ_CHECK(formats_used < slots);
				formats[formats_used++] = journal_record_result_format_at(&s, i);
			}
		}
		count++;
	}
	FUZZ_CHECK(count == v.statement_count);

	const struct journal_record r = {.commit_seq = v.commit_seq, .committed_at_us = v.committed_at_us,
					 .flags = v.flags, .client_addr = v.client_addr, .user = v.user,
					 .database = v.database, .server = v.server, .statements = statements,
					 .statement_count = v.statement_count};
	uint8_t *again = malloc(size);
	FUZZ_CHECK(again != NULL);
	size_t len = 0;
	rc = journal_record_encode(&r, again, size, &len);
	FUZZ_CHECK(rc == 0 && len == size && memcmp(again, data, size) == 0);
	uint64_t seq = 0;
	FUZZ_CHECK(journal_record_peek_commit_seq(data, size, &seq) == 0 && seq == v.commit_seq);
	free(again);
	free(params);
	free(formats);
	free(statements);
}

static int fuzz_count(void *ctx, const struct journal_record_view *record, const uint8_t *payload, uint32_t len)
{
	(void)record;
	(void)payload;
	(void)len;
	(*(uint64_t *)ctx)++;
	return 0;
}

static void fuzz_scan(const uint8_t *data, size_t size)
{
	uint64_t seen = 0;
	struct journal_scan scan;
	FUZZ_CHECK(journal_segment_scan(data, size, fuzz_count, &seen, &scan) == 0);
	FUZZ_CHECK(scan.intact_bytes <= size && seen == scan.records);
	FUZZ_CHECK((scan.end == JOURNAL_SCAN_CLEAN) == (scan.intact_bytes == size));
	struct journal_scan again;
	FUZZ_CHECK(journal_segment_scan(data, (size_t)scan.intact_bytes, NULL, NULL, &again) == 0);
	FUZZ_CHECK(again.end == JOURNAL_SCAN_CLEAN && again.records == scan.records &&
		   again.intact_bytes == scan.intact_bytes && again.commit_seq_high == scan.commit_seq_high);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > FUZZ_INPUT_MAX)
		return 0;
	/* An exact copy, so a read one past the input is caught by AddressSanitizer. */
	uint8_t *copy = malloc(size > 0 ? size : 1);
	FUZZ_CHECK(copy != NULL);
	if (size > 0)
		memcpy(copy, data, size);
	fuzz_record(copy, size);
	fuzz_scan(copy, size);
	free(copy);
	return 0;
}
