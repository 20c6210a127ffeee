/*
 * fuzz_classify.c — the query classifier: the input, as a NUL-terminated query text (a NUL inside ends
 * it, as it would end a Query's string), is classified; the result must be one of the kinds, and a text
 * the parser refused is a write, never a read.
 */
#include "classify.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                            \
	do {                                                                                        \
		if (!(cond)) {                                                                      \
			fprintf(stderr, "fuzz_classify: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort();                                                                    \
		}                                                                                   \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *sql = malloc(size + 1);
	FUZZ_CHECK(sql != NULL);
	memcpy(sql, data, size);
	sql[size] = '\0';
	struct classify_result r;
	classify_query(sql, "app_read_fn", &r);
	FUZZ_CHECK(r.kind <= CLASSIFY_DISCARD);
	FUZZ_CHECK(!r.is_parse_error || r.kind == CLASSIFY_WRITE);
	/* A read carries none of a write's reasons, whatever else the text holds. */
	FUZZ_CHECK(r.kind != CLASSIFY_READ ||
		   (!r.has_locking_clause && !r.has_write_cte && !r.is_select_into && !r.calls_unsafe_function));
	FUZZ_CHECK(r.statement_count <= CLASSIFY_STATEMENTS_MAX);
	free(sql);
	return 0;
}
