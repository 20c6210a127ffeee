/*
 * test_digest.c — query digests (core/digest.c): fingerprints shared by queries that differ in their
 * constants, rows from CommandComplete tags, the worker table filling and merging, the shared table's
 * order and its bound.
 */
#include "digest.h"

#include <criterion/criterion.h>
#include <string.h>

static struct digest_local local; /* large: not on the stack */

Test(digest, constants_share_a_fingerprint_and_the_text_shows_their_places)
{
	memset(&local, 0, sizeof(local));
	char a_text[DIGEST_TEXT_MAX], b_text[DIGEST_TEXT_MAX], c_text[DIGEST_TEXT_MAX];
	uint64_t a = digest_fingerprint(&local, "select * from t where id = 1", a_text, sizeof(a_text));
	uint64_t b = digest_fingerprint(&local, "select * from t where id = 2", b_text, sizeof(b_text));
	uint64_t c = digest_fingerprint(&local, "select * from t where id = 2 -- a comment", c_text, sizeof(c_text));
	uint64_t other = digest_fingerprint(&local, "select * from u where id = 2", b_text, sizeof(b_text));
	cr_assert_neq(a, 0);
	cr_assert_eq(a, b, "constants do not count");
	cr_assert_eq(a, c, "nor do comments (the text is parsed: its shape is uncertain)");
	cr_assert_neq(a, other);
	cr_assert_str_eq(a_text, "select * from t where id = ?");
	cr_assert_str_eq(c_text, "select * from t where id = $1 -- a comment", "libpg_query's normalized text");
	cr_assert_eq(digest_fingerprint(&local, "select from where", a_text, sizeof(a_text)), 0, "unparsable: none");
}

Test(digest, a_statement_text_seen_before_is_remembered_and_its_text_given_only_when_wanted)
{
	memset(&local, 0, sizeof(local));
	static const char sql[] = "update t set v = v + $1 where id = $2";
	char text[DIGEST_TEXT_MAX], query_text[DIGEST_TEXT_MAX];
	uint64_t first = digest_statement_fingerprint(&local, sql, strlen(sql), text, sizeof(text));
	cr_assert_neq(first, 0);
	cr_assert_eq(first, digest_fingerprint(&local, sql, query_text, sizeof(query_text)), "as a Query's");
	cr_assert_str_eq(text, query_text, "a new fingerprint: its text");
	cr_assert(digest_local_add(&local, first, text, 1, 10, 1));
	cr_assert_eq(digest_statement_fingerprint(&local, sql, strlen(sql), text, sizeof(text)), first);
	cr_assert_str_eq(text, "", "the table has its text: none made");
	struct digest_shared shared;
	cr_assert_eq(digest_shared_init(&shared), 0);
	digest_merge(&shared, &local);
	cr_assert_eq(digest_statement_fingerprint(&local, sql, strlen(sql), text, sizeof(text)), first, "remembered");
	cr_assert_str_eq(text, query_text, "the emptied table wants its text again");
	static const char other[] = "update u set v = v + $1 where id = $2";
	cr_assert_neq(digest_statement_fingerprint(&local, other, strlen(other), text, sizeof(text)), first);
	cr_assert_eq(digest_statement_fingerprint(&local, "select from where", 17, text, sizeof(text)), 0, "unparsable");
	cr_assert_eq(digest_statement_fingerprint(&local, "select from where", 17, text, sizeof(text)), 0, "still");
	digest_shared_deinit(&shared);
}

Test(digest, rows_come_from_the_command_tag)
{
	cr_assert_eq(digest_tag_rows((const uint8_t *)"SELECT 5", 9), 5);
	cr_assert_eq(digest_tag_rows((const uint8_t *)"INSERT 0 3", 11), 3);
	cr_assert_eq(digest_tag_rows((const uint8_t *)"UPDATE 12", 10), 12);
	cr_assert_eq(digest_tag_rows((const uint8_t *)"BEGIN", 6), 0);
	cr_assert_eq(digest_tag_rows((const uint8_t *)"7", 2), 0, "a number alone is no tag");
}

Test(digest, a_full_worker_table_asks_for_a_merge_and_the_shared_one_sums_and_sorts)
{
	memset(&local, 0, sizeof(local));
	struct digest_shared shared;
	cr_assert_eq(digest_shared_init(&shared), 0);
	uint32_t added = 0;
	while (digest_local_add(&local, 1000 + added, "q", 1, 10, 1))
		added++;
	cr_assert_eq(added, DIGEST_LOCAL_SLOTS / 2, "half full: merge");
	cr_assert(digest_local_add(&local, 1000, NULL, 1, 5000, 2), "a fingerprint it has still adds");
	digest_merge(&shared, &local);
	cr_assert_eq(local.used, 0);
	cr_assert(digest_local_add(&local, 1000, "q", 1, 10, 1));
	digest_merge(&shared, &local);
	struct digest_entry *entries;
	uint32_t count;
	uint64_t dropped;
	cr_assert_eq(digest_snapshot(&shared, &entries, &count, &dropped), 0);
	cr_assert_eq(count, added);
	cr_assert_eq(entries[0].fingerprint, 1000, "longest total time first");
	cr_assert_eq(entries[0].calls, 3);
	cr_assert_eq(entries[0].total_ns, 5020);
	cr_assert_eq(entries[0].rows, 4);
	cr_assert_str_eq(entries[0].text, "q");
	cr_assert_eq(dropped, 0);
	free(entries);
	digest_shared_deinit(&shared);
}
