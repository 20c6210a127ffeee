/*
 * test_classify.c — the classifier on a corpus of tricky statements: comments, dollar quotes, CTEs that
 * write, nextval, SELECT ... INTO, locking clauses, quoted-identifier calls, multi-statement texts,
 * transaction control with isolation and READ ONLY, SET and DISCARD.
 */
#include "classify.h"
#include "replay/recover.h"

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static struct classify_result classify(const char *sql)
{
	struct classify_result r;
	classify_query(sql, "app_read_fn, other.fn", &r);
	return r;
}

static void expect_kind(const char *sql, enum classify_kind kind)
{
	struct classify_result r = classify(sql);
	cr_assert_eq(r.kind, kind, "%s: kind %d, expected %d", sql, r.kind, kind);
}

Test(classify, plain_selects_and_show_are_reads)
{
	static const char *const reads[] = {
		"select 1",
		"SELECT * FROM t WHERE a = $1",
		"  select count(*), sum(x), now() from t group by y  ",
		"/* a comment; with a semicolon */ select 1 -- and another\n",
		"select $$ insert into t values (1); $$",
		"select 'nextval(''s'')' as text_not_a_call",
		"with r as (select * from t) select * from r",
		"select lower(name), coalesce(a, b) from t join u using (id) order by 1 limit 10",
		"values (1), (2)",
		"show work_mem",
		"SHOW search_path;",
		"select pg_catalog.now(), app_read_fn(1), other.fn()",
		"select 1; select 2",
	};
	for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++)
		expect_kind(reads[i], CLASSIFY_READ);
}

Test(classify, anything_that_may_write_is_a_write_and_says_why)
{
	/* Each, with the reason it must give (a field of classify_result). */
	static const struct {
		const char *sql;
		size_t reason;
		const char *why;
	} cases[] = {
		{"select * from t for update", offsetof(struct classify_result, has_locking_clause), ""},
		{"select * from t for no key update skip locked", offsetof(struct classify_result, has_locking_clause), ""},
		{"select * from t for key share", offsetof(struct classify_result, has_locking_clause), ""},
		{"with w as (insert into t values (1) returning *) select * from w",
		 offsetof(struct classify_result, has_write_cte), ""},
		{"with w as (delete from t returning *) select count(*) from w",
		 offsetof(struct classify_result, has_write_cte), ""},
		{"select 1 into scratch", offsetof(struct classify_result, is_select_into), ""},
		{"select nextval('s')", offsetof(struct classify_result, calls_unsafe_function), ""},
		{"select pg_advisory_lock(1)", offsetof(struct classify_result, calls_unsafe_function), ""},
		{"select set_config('a.b', 'c', false)", offsetof(struct classify_result, calls_unsafe_function), ""},
		{"select my_function(1)", offsetof(struct classify_result, calls_unsafe_function),
		 "a user function not in read_functions"},
		{"select \"now\"()", offsetof(struct classify_result, calls_unsafe_function),
		 "a quoted identifier is never on the list"},
		{"select public.\"app_read_fn\"(1)", offsetof(struct classify_result, calls_unsafe_function),
		 "quoted after a schema too"},
		{"select * from t where id in (select nextval('s'))", offsetof(struct classify_result, calls_unsafe_function),
		 "in a subquery"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct classify_result r = classify(cases[i].sql);
		bool reason = *(const bool *)((const char *)&r + cases[i].reason);
		cr_assert(r.kind == CLASSIFY_WRITE && reason, "%s: a write, for its reason %s", cases[i].sql, cases[i].why);
	}
	static const char *const writes[] = {
		"insert into t values (1)", "update t set a = 1", "delete from t", "create table x (a int)",
		"copy t from stdin", "lock table t", "vacuum", "call p()", "select 1; insert into t values (2)",
		"notify c", "listen c", "prepare p as select 1", "execute p", "select from", "selec 1", "",
	};
	for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++)
		expect_kind(writes[i], CLASSIFY_WRITE);
	cr_assert(classify("selec 1").is_parse_error);
}

Test(classify, transaction_control_carries_isolation_and_read_only)
{
	struct classify_result r = classify("BEGIN");
	cr_assert(r.kind == CLASSIFY_BEGIN && r.isolation == CLASSIFY_ISOLATION_DEFAULT && !r.is_read_only);
	r = classify("begin isolation level repeatable read read only");
	cr_assert(r.kind == CLASSIFY_BEGIN && r.isolation == CLASSIFY_REPEATABLE_READ && r.is_read_only);
	r = classify("START TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE");
	cr_assert(r.kind == CLASSIFY_BEGIN && r.isolation == CLASSIFY_SERIALIZABLE && !r.is_read_only);
	r = classify("set transaction isolation level read committed read only");
	cr_assert(r.kind == CLASSIFY_SET_TRANSACTION && r.isolation == CLASSIFY_READ_COMMITTED && r.is_read_only);
	r = classify("commit");
	cr_assert(r.kind == CLASSIFY_COMMIT && r.is_fast_path);
	r = classify("END TRANSACTION;");
	cr_assert(r.kind == CLASSIFY_COMMIT && r.is_fast_path);
	r = classify(" rollback work ");
	cr_assert(r.kind == CLASSIFY_ROLLBACK && r.is_fast_path);
	r = classify("rollback to savepoint a");
	cr_assert(r.kind == CLASSIFY_TRANSACTION && !r.is_fast_path, "not the fast path's");
	expect_kind("savepoint a", CLASSIFY_TRANSACTION);
	expect_kind("prepare transaction 'x'", CLASSIFY_TRANSACTION);
	cr_assert(!classify("commit; insert into t values (1)").is_fast_path, "two statements go to the parser");
	expect_kind("commit; insert into t values (1)", CLASSIFY_WRITE);
}

Test(classify, set_reset_and_discard)
{
	struct classify_result r = classify("set search_path = a, b");
	cr_assert(r.kind == CLASSIFY_SET && !r.is_local);
	r = classify("SET LOCAL statement_timeout = '1s'");
	cr_assert(r.kind == CLASSIFY_SET && r.is_local);
	expect_kind("reset all", CLASSIFY_SET);
	expect_kind("discard all", CLASSIFY_DISCARD);
	expect_kind("set default_transaction_isolation = 'serializable'", CLASSIFY_SET);
}

Test(classify, texts_past_the_bound_are_writes_unparsed)
{
	static char big[CLASSIFY_TEXT_MAX + 16];
	memset(big, ' ', sizeof(big) - 1);
	memcpy(big, "select 1", 8);
	struct classify_result r;
	classify_query(big, NULL, &r);
	cr_assert(r.kind == CLASSIFY_WRITE && r.is_parse_error);
}

/* ---- the shape and the cache ---- */

static void expect_shape(const char *sql, const char *shape)
{
	char out[CLASSIFY_SHAPE_MAX];
	size_t n = classify_shape(sql, out, sizeof(out));
	if (!shape) {
		cr_assert_eq(n, 0, "%s: not cacheable, got shape \"%s\"", sql, n ? out : "");
		return;
	}
	cr_assert_neq(n, 0, "%s: cacheable", sql);
	cr_assert_str_eq(out, shape, "%s", sql);
}

Test(classify, shapes_replace_literals_and_refuse_what_they_cannot_read_for_sure)
{
	expect_shape("SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
		     "SELECT abalance FROM pgbench_accounts WHERE aid = ?;");
	expect_shape("  select  'it''s',\t1.5e-3, .5, 7 from t1  ", "select ?, ?, ?, ? from t1");
	expect_shape("select * from t where a = $1 and b = $12", "select * from t where a = $1 and b = $12");
	expect_shape("select nextval('s')", "select nextval(?)");
	/* What a literal-blind lexer could get wrong is not cached. */
	expect_shape("select 1 -- comment", NULL);
	expect_shape("select /* c */ 1", NULL);
	expect_shape("select $$x$$", NULL);
	expect_shape("select $tag$x$tag$", NULL);
	expect_shape("select \"Nextval\"('s')", NULL);
	expect_shape("select E'\\''", NULL);
	expect_shape("select 'a\\'", NULL);
	expect_shape("select x'1F', b'01'", NULL);
	expect_shape("select U&'d\\0061t'", NULL);
	expect_shape("select 'unterminated", NULL);
	expect_shape("select 1.2.3", NULL);
	expect_shape("select 0x1F", NULL);
	expect_shape("select 1e", NULL);
	char long_query[CLASSIFY_SHAPE_MAX + 16];
	memset(long_query, 'a', sizeof(long_query) - 1);
	long_query[sizeof(long_query) - 1] = '\0';
	expect_shape(long_query, NULL);
}

Test(classify, the_cache_answers_as_the_parser_for_every_literal_and_follows_read_functions)
{
	static struct classify_cache cache; /* large: not on the stack */
	const char *const texts[] = {
		"SELECT abalance FROM pgbench_accounts WHERE aid = 1",
		"SELECT abalance FROM pgbench_accounts WHERE aid = 2",
		"select nextval('a')",
		"select nextval('b')",
		"select 1 for update",
		"select 2 for update",
		"select app_read_fn(1)",
		"select app_read_fn(2)",
		"select 'x'; delete from t where a = 'y'",
		"select 'z'; delete from t where a = 'w'",
		"begin isolation level repeatable read",
		"insert into t values (1, 'a')",
		"insert into t values (2, 'b')",
	};
	int tag_a, tag_b;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
			struct classify_result cached, direct;
			classify_cached(&cache, &tag_a, texts[i], "app_read_fn", &cached);
			classify_query(texts[i], "app_read_fn", &direct);
			cr_assert_eq(cached.kind, direct.kind, "%s: cached %d, parsed %d", texts[i], cached.kind, direct.kind);
			cr_assert_eq(cached.has_locking_clause, direct.has_locking_clause, "%s", texts[i]);
			cr_assert_eq(cached.calls_unsafe_function, direct.calls_unsafe_function, "%s", texts[i]);
			cr_assert_eq(cached.isolation, direct.isolation, "%s", texts[i]);
		}
	}
	cr_assert_geq(cache.hits, 13, "the second pass and the second literal of each pair hit: %lu hits",
		      (unsigned long)cache.hits);
	/* Another configuration (read_functions changed by a reload): nothing classified before holds. */
	struct classify_result r;
	classify_cached(&cache, &tag_b, "select app_read_fn(3)", "", &r);
	cr_assert_eq(r.kind, CLASSIFY_WRITE, "app_read_fn is no longer a read function");
}

Test(classify, the_lexer_knows_bare_begin_and_plain_set_as_the_parser_does)
{
	static const struct {
		const char *sql;
		bool is_fast;
	} cases[] = {
		{"begin", true},
		{"BEGIN WORK;", true},
		{"begin transaction", true},
		{"set work_mem = '64MB'", true},
		{"SET LOCAL statement_timeout TO 5000", true},
		{"set session application_name to app", true},
		{"set search_path to a, b", false},
		{"set time zone 'UTC'", false},
		{"set transaction read only", false},
		{"set session characteristics as transaction read only", false},
		{"set local transaction isolation level serializable", false},
		{"set x = 'a\\'b'", false},
		{"set x = 1; delete from t", false},
		{"begin read only", false},
		{"begin; delete from t", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct classify_result fast, parsed;
		bool is_fast = classify_fast_path(cases[i].sql, &fast);
		cr_assert_eq(is_fast, cases[i].is_fast, "%s: fast path %d", cases[i].sql, is_fast);
		if (!is_fast)
			continue;
		/* The same text with a comment after it defeats the lexer: the parser's answer must match. */
		char commented[128];
		snprintf(commented, sizeof(commented), "%s -- c", cases[i].sql);
		classify_query(commented, NULL, &parsed);
		cr_assert(!parsed.is_fast_path, "%s: parsed", commented);
		cr_assert_eq(fast.kind, parsed.kind, "%s: lexer %d, parser %d", cases[i].sql, fast.kind, parsed.kind);
		cr_assert_eq(fast.is_local, parsed.is_local, "%s", cases[i].sql);
		cr_assert_eq(fast.statement_count, parsed.statement_count, "%s", cases[i].sql);
	}
}

Test(classify, copy_is_a_write_that_says_so)
{
	struct classify_result r;
	classify_query("copy t from stdin", NULL, &r);
	cr_assert(r.kind == CLASSIFY_WRITE && r.has_copy, "COPY FROM: a write, marked");
	classify_query("copy (select 1) to stdout", NULL, &r);
	cr_assert(r.kind == CLASSIFY_WRITE && r.has_copy, "COPY TO: kept on the primary, marked");
	classify_query("insert into t values (1); copy t from stdin", NULL, &r);
	cr_assert(r.has_copy, "in a multi-statement text too");
	classify_query("insert into t values (1)", NULL, &r);
	cr_assert(!r.has_copy);
}

Test(classify, transaction_replay_kinds_find_a_commit_wherever_it_hides)
{
	/* The cases a peer's own audit found broken (DESIGN §6): each a COMMIT, never run twice. */
	static const struct {
		const char *sql;
		enum tr_kind kind;
	} cases[] = {
		{"COMMIT", TR_KIND_COMMIT},
		{"/* a comment */ COMMIT", TR_KIND_COMMIT},
		{"-- a comment\ncommit;", TR_KIND_COMMIT},
		{"END WORK", TR_KIND_COMMIT},
		{"end", TR_KIND_COMMIT},
		{"select 1; commit", TR_KIND_COMMIT},
		{"COMMIT; BEGIN", TR_KIND_COMMIT},
		{"commit and chain", TR_KIND_COMMIT},
		{"PREPARE TRANSACTION 'tx1'", TR_KIND_COMMIT},
		{"COMMIT PREPARED 'tx1'", TR_KIND_COMMIT},
		{"select 'commit'", TR_KIND_READ_SAFE},
		{"select $$commit$$, 1", TR_KIND_READ_SAFE},
		{"select * from t where a = 1", TR_KIND_READ_SAFE},
		{"show work_mem", TR_KIND_READ_SAFE},
		{"select nextval('s')", TR_KIND_READ_OPAQUE},
		{"select app_fn()", TR_KIND_READ_SAFE},
		{"select user_fn(1)", TR_KIND_READ_OPAQUE},
		{"select \"Quoted\"()", TR_KIND_READ_OPAQUE},
		{"select set_config('a.b', 'c', false)", TR_KIND_READ_OPAQUE},
		{"select * from t for update", TR_KIND_WRITE},
		{"select 1 into t2", TR_KIND_WRITE},
		{"select nextval('s'); insert into t values (1)", TR_KIND_WRITE},
		{"insert into t values (1)", TR_KIND_WRITE},
		{"selec 1", TR_KIND_WRITE},
		{"copy t from stdin", TR_KIND_COPY},
		{"begin", TR_KIND_CONTROL},
		{"BEGIN ISOLATION LEVEL SERIALIZABLE", TR_KIND_CONTROL},
		{"set work_mem = '8MB'", TR_KIND_CONTROL},
		{"savepoint a", TR_KIND_CONTROL},
		{"rollback to savepoint a", TR_KIND_CONTROL},
		{"release a", TR_KIND_CONTROL},
		{"rollback", TR_KIND_ROLLBACK},
		{"ABORT", TR_KIND_ROLLBACK},
		{"rollback; begin", TR_KIND_WRITE},
		{"", TR_KIND_CONTROL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct classify_result r;
		classify_query(cases[i].sql, "app_fn", &r);
		cr_assert_eq(recover_kind_of(&r), cases[i].kind, "%s: %d, expected %d", cases[i].sql,
			     recover_kind_of(&r), cases[i].kind);
	}
}

Test(classify, a_text_splits_into_its_statements_as_the_parser_reads_them)
{
	const char *sql = "set a = 'x;y'; select 1;; /* c */ set b = 2";
	struct classify_span spans[4];
	int n = classify_split(sql, spans, 4);
	cr_assert_eq(n, 3);
	cr_assert_eq(strncmp(sql + spans[0].start, "set a = 'x;y'", spans[0].len), 0);
	cr_assert_eq(spans[0].len, strlen("set a = 'x;y'"));
	cr_assert_eq(strncmp(sql + spans[1].start, " select 1", spans[1].len), 0);
	cr_assert(strstr(sql + spans[2].start, "set b = 2") != NULL);
	cr_assert_eq(spans[2].start + spans[2].len, strlen(sql));
	cr_assert_eq(classify_split("select 1; selec 2", spans, 4), -1, "a syntax error");
	cr_assert_eq(classify_split("select 1; select 2; select 3", spans, 2), -1, "more than max");
}
