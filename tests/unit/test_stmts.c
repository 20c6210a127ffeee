/*
 * test_stmts.c — named prepared statements: statement identity and server names, a client's name map
 * (growth, removal keeping probe chains intact), a connection's cache (least recently used out at the
 * bound), and the queue of expected replies (both ends, removal after the head, ownership).
 */
#include "stmts.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static struct stmt *make(const char *sql)
{
	/* A Parse body after the name: the query, NUL, no parameter types. */
	uint8_t content[256];
	size_t n = strlen(sql) + 1;
	cr_assert_leq(n + 2, sizeof(content));
	memcpy(content, sql, n);
	content[n] = content[n + 1] = 0;
	struct stmt *stmt = stmt_create(content, (uint32_t)(n + 2));
	cr_assert(stmt != NULL);
	return stmt;
}

Test(stmts, same_text_gives_the_same_server_name_and_other_text_another)
{
	struct stmt *a = make("select 1"), *b = make("select 1"), *c = make("select 2");
	cr_assert_str_eq(a->server_name, b->server_name);
	cr_assert_str_neq(a->server_name, c->server_name);
	cr_assert_eq(strncmp(a->server_name, "tern_", 5), 0);
	cr_assert_eq(strlen(a->server_name), STMT_SERVER_NAME_LEN - 1);
	stmt_unref(a);
	stmt_unref(b);
	stmt_unref(c);
}

Test(stmts, map_keeps_every_name_through_growth_and_removals)
{
	struct stmt_map map;
	stmt_map_init(&map);
	struct stmt *stmt = make("select 1");
	char name[32];
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		cr_assert_eq(stmt_map_put(&map, name, stmt, (uint64_t)i), 0);
	}
	cr_assert_eq(stmt->refs, 1001u);
	/* Remove every third name: the rest must still be found (backward-shift deletion). */
	for (int i = 0; i < 1000; i += 3) {
		snprintf(name, sizeof(name), "s%d", i);
		cr_assert(stmt_map_remove(&map, name));
		cr_assert_not(stmt_map_remove(&map, name), "removed twice");
	}
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		cr_assert_eq(stmt_map_get(&map, name) != NULL, i % 3 != 0, "name %s", name);
	}
	cr_assert_eq(map.count, 666u);
	/* DEALLOCATE ALL forgets the names put before it in the stream, whatever slots they landed in. */
	stmt_map_remove_before(&map, 500);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		cr_assert_eq(stmt_map_get(&map, name) != NULL, i >= 500 && i % 3 != 0, "name %s", name);
	}
	cr_assert_eq(map.count, 333u);
	stmt_map_clear(&map);
	cr_assert_eq(stmt->refs, 1u);
	cr_assert_null(stmt_map_get(&map, "s1"));
	stmt_map_deinit(&map);
	stmt_unref(stmt);
}

Test(stmts, cache_evicts_the_least_recently_used_at_its_bound)
{
	struct stmt_cache *cache = stmt_cache_create();
	cr_assert(cache != NULL);
	struct stmt *s[4] = {make("select 0"), make("select 1"), make("select 2"), make("select 3")};
	char evicted[STMT_SERVER_NAME_LEN];
	cr_assert_eq(stmt_cache_add(cache, s[0], 3, evicted), 0);
	cr_assert_eq(stmt_cache_add(cache, s[1], 3, evicted), 0);
	cr_assert_eq(stmt_cache_add(cache, s[2], 3, evicted), 0);
	cr_assert(stmt_cache_touch(cache, s[0])); /* s[1] is now the least recently used */
	cr_assert_eq(stmt_cache_add(cache, s[3], 3, evicted), 1);
	cr_assert_str_eq(evicted, s[1]->server_name);
	cr_assert_not(stmt_cache_touch(cache, s[1]));
	cr_assert(stmt_cache_touch(cache, s[0]) && stmt_cache_touch(cache, s[2]) && stmt_cache_touch(cache, s[3]));
	cr_assert_eq(cache->count, 3u);
	stmt_cache_remove(cache, s[2]);
	cr_assert_not(stmt_cache_touch(cache, s[2]));
	cr_assert_eq(cache->count, 2u);
	stmt_cache_clear(cache);
	cr_assert_not(stmt_cache_touch(cache, s[0]));
	stmt_cache_destroy(cache);
	for (int i = 0; i < 4; i++)
		stmt_unref(s[i]);
}

Test(stmts, cache_finds_every_entry_after_many_adds_and_removals)
{
	struct stmt_cache *cache = stmt_cache_create();
	enum { N = 500 };
	struct stmt *s[N];
	char sql[32], evicted[STMT_SERVER_NAME_LEN];
	for (int i = 0; i < N; i++) {
		snprintf(sql, sizeof(sql), "select %d", i);
		s[i] = make(sql);
		cr_assert_eq(stmt_cache_add(cache, s[i], STMT_CACHE_MAX, evicted), 0);
	}
	for (int i = 0; i < N; i += 2)
		stmt_cache_remove(cache, s[i]);
	for (int i = 0; i < N; i++)
		cr_assert_eq(stmt_cache_touch(cache, s[i]), i % 2 == 1, "entry %d", i);
	stmt_cache_destroy(cache);
	for (int i = 0; i < N; i++)
		stmt_unref(s[i]);
}

static uint8_t kinds_of(struct stmt_replies *r, char *out)
{
	uint8_t n = 0;
	for (uint32_t i = 0; i < r->count; i++)
		out[n++] = (char)('0' + r->entries[(r->head + i) & (r->capacity - 1)].kind);
	out[n] = 0;
	return n;
}

Test(stmts, replies_keep_order_at_both_ends_and_across_growth)
{
	struct stmt_replies r;
	stmt_replies_init(&r);
	for (int i = 0; i < 40; i++)
		cr_assert_eq(stmt_replies_push_back(&r, STMT_REPLY_BIND, NULL, 0, NULL), 0);
	for (int i = 0; i < 35; i++)
		stmt_replies_pop(&r);
	/* The head has wrapped; pushing at the front and back keeps the order. */
	struct stmt *stmt = make("select 1");
	cr_assert_eq(stmt_replies_push_front(&r, STMT_REPLY_PARSE_HIDDEN, NULL, 0, stmt), 0);
	stmt_unref(stmt); /* the queue holds its own reference */
	cr_assert_eq(stmt_replies_push_front(&r, STMT_REPLY_CLOSE_HIDDEN, NULL, 0, NULL), 0);
	cr_assert_eq(stmt_replies_push_back(&r, STMT_REPLY_SYNC, NULL, 0, NULL), 0);
	char kinds[64];
	kinds_of(&r, kinds);
	cr_assert_str_eq(kinds, "8233333" "9");
	stmt_replies_deinit(&r); /* frees the PARSE_HIDDEN reference (ASan checks) */
}

Test(stmts, syncs_after_the_head_are_removed_up_to_the_count)
{
	struct stmt_replies r;
	stmt_replies_init(&r);
	uint8_t seq[] = {STMT_REPLY_EXECUTE, STMT_REPLY_SYNC, STMT_REPLY_BIND, STMT_REPLY_SYNC, STMT_REPLY_SYNC};
	for (size_t i = 0; i < sizeof(seq); i++)
		cr_assert_eq(stmt_replies_push_back(&r, seq[i], NULL, 0, NULL), 0);
	cr_assert_eq(stmt_replies_remove_after_head(&r, STMT_REPLY_SYNC, 2), 2u);
	char kinds[16];
	kinds_of(&r, kinds);
	cr_assert_str_eq(kinds, "639"); /* EXECUTE, BIND, the third SYNC */
	stmt_replies_deinit(&r);
}

Test(stmts, a_reply_queue_holds_at_most_STMT_REPLIES_MAX_entries_and_then_refuses)
{
	struct stmt_replies r;
	stmt_replies_init(&r);
	for (uint32_t i = 0; i < STMT_REPLIES_MAX; i++)
		cr_assert_eq(stmt_replies_push_back(&r, STMT_REPLY_BIND, NULL, 0, NULL), 0, "entry %u", i);
	cr_assert_eq(stmt_replies_push_back(&r, STMT_REPLY_SYNC, NULL, 0, NULL), -ENOBUFS);
	cr_assert_eq(stmt_replies_push_front(&r, STMT_REPLY_CLOSE_HIDDEN, NULL, 0, NULL), -ENOBUFS);
	cr_assert_eq(r.count, STMT_REPLIES_MAX, "nothing was taken");
	stmt_replies_pop(&r);
	cr_assert_eq(stmt_replies_push_back(&r, STMT_REPLY_SYNC, NULL, 0, NULL), 0, "room again once one is popped");
	stmt_replies_deinit(&r);
}

Test(stmts, plain_replies_share_one_entry_until_another_kind_comes)
{
	struct stmt_replies r;
	stmt_replies_init(&r);
	for (int i = 0; i < 4; i++) /* Parse, Bind, Describe, Execute of unnamed statements */
		cr_assert_eq(stmt_replies_push_plain(&r), 0);
	cr_assert_eq(r.count, 1, "one entry for the run");
	cr_assert_eq(stmt_replies_head(&r)->kind, STMT_REPLY_PLAIN);
	cr_assert_eq(stmt_replies_head(&r)->data_len, 4);
	cr_assert_eq(stmt_replies_push_back(&r, STMT_REPLY_SYNC, NULL, 0, NULL), 0);
	cr_assert_eq(stmt_replies_push_plain(&r), 0);
	cr_assert_eq(r.count, 3, "a Sync ends the run; the next plain reply starts another");
	cr_assert_eq(stmt_replies_push_front(&r, STMT_REPLY_CLOSE_HIDDEN, NULL, 0, NULL), 0);
	cr_assert_eq(stmt_replies_push_plain(&r), 0);
	cr_assert_eq(r.count, 4, "a push at the front leaves the tail's run growing");
	char kinds[16];
	kinds_of(&r, kinds);
	cr_assert_str_eq(kinds, "8<9<"); /* CLOSE_HIDDEN, PLAIN, SYNC, PLAIN ('0' + 12 is '<') */
	stmt_replies_deinit(&r);
}
