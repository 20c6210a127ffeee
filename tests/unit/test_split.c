/*
 * test_split.c — the five conditions of a split read, each on its own, with the statements classified by
 * the real parser (classify_query), and split_check's order of refusals.
 */
#include "routing/split.h"

#include <criterion/criterion.h>
#include <stddef.h>

static struct classify_result classify(const char *sql)
{
	struct classify_result r;
	classify_query(sql, NULL, &r);
	return r;
}

/* A transaction opened by begin_sql, the server's isolation answered (DEFAULT: not), then each of notes. */
static struct split_tx tx_after(const char *begin_sql, enum classify_isolation server, const char *const *notes,
				size_t count)
{
	struct split_tx tx = {0};
	struct classify_result begin = classify(begin_sql);
	cr_assert_eq(begin.kind, CLASSIFY_BEGIN, "%s", begin_sql);
	split_tx_note(&tx, &begin);
	tx.server_isolation = server;
	for (size_t i = 0; i < count; i++) {
		struct classify_result r = classify(notes[i]);
		split_tx_note(&tx, &r);
	}
	return tx;
}

#define TX(begin, server, ...)                                                                                         \
	tx_after(begin, server, (const char *const[]){"", __VA_ARGS__} + 1,                                            \
		 sizeof((const char *const[]){"", __VA_ARGS__}) / sizeof(const char *) - 1)

Test(split, read_committed_comes_from_the_begin_a_set_transaction_or_the_server)
{
	static const struct {
		const char *begin;
		enum classify_isolation server;
		const char *set; /* noted after the BEGIN ("" for none) */
		bool is_rc;
	} cases[] = {
		{"begin", CLASSIFY_READ_COMMITTED, "", true},
		{"begin", CLASSIFY_ISOLATION_DEFAULT, "", false}, /* not known: never split */
		{"begin", CLASSIFY_REPEATABLE_READ, "", false},
		{"begin", CLASSIFY_SERIALIZABLE, "", false},
		{"begin isolation level read committed", CLASSIFY_READ_COMMITTED, "", true},
		{"begin isolation level read committed", CLASSIFY_ISOLATION_DEFAULT, "", false}, /* the server says */
		{"start transaction isolation level read uncommitted", CLASSIFY_READ_UNCOMMITTED, "", true},
		{"begin isolation level repeatable read", CLASSIFY_REPEATABLE_READ, "", false},
		/* a BEGIN inside a transaction is a no-op: a level other than read committed named anywhere holds */
		{"begin isolation level repeatable read", CLASSIFY_READ_COMMITTED, "", false},
		{"BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE", CLASSIFY_READ_COMMITTED, "", false},
		{"begin", CLASSIFY_READ_COMMITTED, "set transaction isolation level repeatable read", false},
		{"begin isolation level repeatable read", CLASSIFY_READ_COMMITTED,
		 "set transaction isolation level read committed", false},
		{"begin", CLASSIFY_READ_COMMITTED, "set transaction read only", true},
		{"begin", CLASSIFY_READ_COMMITTED, "begin isolation level read committed", true},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct split_tx tx = cases[i].set[0] ? TX(cases[i].begin, cases[i].server, cases[i].set)
						     : TX(cases[i].begin, cases[i].server);
		cr_assert_eq(split_is_read_committed(&tx), cases[i].is_rc, "case %zu: %s / %d / %s", i, cases[i].begin,
			     cases[i].server, cases[i].set);
	}
}

Test(split, one_command_is_one_statement_in_a_query)
{
	struct classify_result one = classify("select 1"), two = classify("select 1; select 2");
	cr_assert(split_is_one_command(&one, true));
	cr_assert_not(split_is_one_command(&one, false), "an extended-protocol statement is never one");
	cr_assert_not(split_is_one_command(&two, true));
}

Test(split, a_plain_select_has_no_locking_clause_and_writes_nothing)
{
	static const struct {
		const char *sql;
		bool is_plain;
	} cases[] = {
		{"select * from t where a = 1", true},
		{"with r as (select 1) select * from r", true},
		{"values (1), (2)", true},
		{"/* report */ select count(*) from t", true},
		{"select * from t for update", false},
		{"select * from t for share", false},
		{"select * from t for no key update", false},
		{"select * from t for key share", false},
		{"select nextval('s')", false},
		{"select pg_advisory_lock(1)", false},
		{"with w as (delete from t returning *) select * from w", false},
		{"select * into t2 from t", false},
		{"show work_mem", false},
		{"SHOW search_path", false},
		{"/* through the parser */ show work_mem", false},
		{"update t set a = 1", false},
		{"selec 1", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct classify_result r = classify(cases[i].sql);
		cr_assert_eq(split_is_plain_select(&r), cases[i].is_plain, "%s", cases[i].sql);
	}
}

Test(split, vanilla_splits_in_the_read_only_prefix_and_polar_by_its_marker)
{
	struct split_tx reads = TX("begin", CLASSIFY_READ_COMMITTED, "select 1", "savepoint a", "select 2",
				   "rollback to savepoint a", "release a");
	cr_assert(split_is_splittable(&reads, false));
	static const char *const writes[] = {
		"update t set a = 1", "select * from t for update", "select nextval('s')", "lock table t",
		"select 1; update t set a = 1", "create temp table x (a int)", "notify c", "selec 1",
	};
	for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
		struct split_tx tx = TX("begin", CLASSIFY_READ_COMMITTED, "select 1", writes[i]);
		cr_assert_not(split_is_splittable(&tx, false), "after %s", writes[i]);
		tx.xact = SPLIT_XACT_SPLITTABLE;
		cr_assert(split_is_splittable(&tx, true), "polar, 'x' after %s", writes[i]);
		tx.xact = SPLIT_XACT_WAL_PENDING;
		cr_assert_not(split_is_splittable(&tx, true), "polar, 'w' after %s", writes[i]);
	}
	struct split_tx unmarked = TX("begin", CLASSIFY_READ_COMMITTED);
	cr_assert_not(split_is_splittable(&unmarked, true), "polar without a marker");
}

Test(split, a_set_before_the_first_write_ends_it_and_after_one_does_not)
{
	static const char *const sets[] = {"set work_mem = '64MB'", "set local work_mem = '64MB'", "reset work_mem",
					   "reset all", "set search_path = a", "discard plans"};
	for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
		struct split_tx before = TX("begin", CLASSIFY_READ_COMMITTED, "select 1", sets[i]);
		cr_assert_not(split_has_no_set_before_write(&before), "%s", sets[i]);
		struct split_tx after = TX("begin", CLASSIFY_READ_COMMITTED, "update t set a = 1", sets[i]);
		cr_assert(split_has_no_set_before_write(&after), "%s after a write", sets[i]);
	}
	struct split_tx set_tx = TX("begin", CLASSIFY_READ_COMMITTED, "set transaction read only");
	cr_assert(split_has_no_set_before_write(&set_tx), "SET TRANSACTION is the transaction's, not a setting");
}

Test(split, check_names_the_first_condition_that_fails)
{
	struct classify_result select = classify("select * from t"), two = classify("select 1; select 2"),
			       lock = classify("select * from t for update");
	struct split_tx rc = TX("begin", CLASSIFY_READ_COMMITTED), rr = TX("begin", CLASSIFY_REPEATABLE_READ),
			wrote = TX("begin", CLASSIFY_READ_COMMITTED, "insert into t values (1)"),
			set = TX("begin", CLASSIFY_READ_COMMITTED, "set work_mem = '1MB'");
	cr_assert_eq(split_check(&rc, &select, true, false), SPLIT_ELIGIBLE);
	cr_assert_eq(split_check(&rr, &select, true, false), SPLIT_NOT_READ_COMMITTED);
	cr_assert_eq(split_check(&rr, &lock, false, false), SPLIT_NOT_READ_COMMITTED, "isolation first");
	cr_assert_eq(split_check(&rc, &two, true, false), SPLIT_NOT_ONE_COMMAND);
	cr_assert_eq(split_check(&rc, &select, false, false), SPLIT_NOT_ONE_COMMAND);
	cr_assert_eq(split_check(&rc, &lock, true, false), SPLIT_NOT_SELECT);
	cr_assert_eq(split_check(&wrote, &select, true, false), SPLIT_NOT_SPLITTABLE);
	cr_assert_eq(split_check(&set, &select, true, false), SPLIT_SET_IN_TRANSACTION);
	wrote.xact = SPLIT_XACT_SPLITTABLE;
	cr_assert_eq(split_check(&wrote, &select, true, true), SPLIT_ELIGIBLE, "polar: after a write");
	for (int i = 0; i < SPLIT_REFUSAL_COUNT; i++)
		cr_assert(split_refusal_names[i] && split_refusal_names[i][0], "reason %d has a name", i);
}
