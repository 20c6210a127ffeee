#include "sql.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

TestSuite(sql, .timeout = 10);

static int search_path_of(const char *sql, char *value, size_t size)
{
	return sql_parse_search_path_set((const uint8_t *)sql, (uint32_t)strlen(sql), value, size);
}

Test(sql, search_path_is_read_from_set_and_reset_as_the_client_wrote_it)
{
	char v[64];
	cr_assert_eq(search_path_of("SET search_path TO app, public", v, sizeof(v)), 1);
	cr_assert_str_eq(v, "app, public");
	cr_assert_eq(search_path_of("  /* c */ set Session SEARCH_PATH = \"$user\", 'x;y' ; select 1", v, sizeof(v)), 1);
	cr_assert_str_eq(v, "\"$user\", 'x;y'");
	cr_assert_eq(search_path_of("reset search_path", v, sizeof(v)), 1);
	cr_assert_str_eq(v, SQL_SEARCH_PATH_RESET);
	cr_assert_eq(search_path_of("RESET ALL", v, sizeof(v)), 1);
	cr_assert_str_eq(v, SQL_SEARCH_PATH_RESET);
	/* Not tracked: other statements, SET LOCAL, a longer identifier, comments, empty or unterminated. */
	cr_assert_eq(search_path_of("set local search_path to x", v, sizeof(v)), 0);
	cr_assert_eq(search_path_of("set search_paths to x", v, sizeof(v)), 0);
	cr_assert_eq(search_path_of("set timezone to 'UTC'", v, sizeof(v)), 0);
	cr_assert_eq(search_path_of("select 'set search_path to x'", v, sizeof(v)), 0);
	cr_assert_eq(search_path_of("set search_path to x -- why", v, sizeof(v)), 0);
	cr_assert_eq(search_path_of("set search_path to ;", v, sizeof(v)), 0);
	cr_assert_eq(search_path_of("set search_path to 'x", v, sizeof(v)), 0);
	cr_assert_eq(search_path_of("reset timezone", v, sizeof(v)), 0);
	cr_assert_eq(search_path_of("set search_path to a_very_long_schema_name", v, 8), -ENOSPC);
}

static bool check(bool (*fn)(const uint8_t *, uint32_t), const char *sql)
{
	return fn((const uint8_t *)sql, (uint32_t)strlen(sql));
}

Test(sql, a_text_mentions_search_path_or_reset_in_any_case_anywhere)
{
	cr_assert(check(sql_mentions_search_path, "select 1; SET Search_Path = x"));
	cr_assert(check(sql_mentions_search_path, "begin; reset all"));
	cr_assert(check(sql_mentions_search_path, "search_path"));
	cr_assert(check(sql_mentions_search_path, "RESET"), "a word that ends the text");
	cr_assert(check(sql_mentions_search_path, "select 1;SEARCH_PATH"));
	cr_assert_not(check(sql_mentions_search_path, "rese"));
	cr_assert_not(check(sql_mentions_search_path, "set local app.tenant = '7'; select 'search path'"));
	cr_assert_not(check(sql_mentions_search_path, "search_pat"));
	cr_assert_not(check(sql_mentions_search_path, ""));
}

Test(sql, a_text_that_may_leave_session_state_is_seen_by_its_words)
{
	cr_assert(check(sql_may_hold_session_state, "CREATE TEMP TABLE t(a int)"));
	cr_assert(check(sql_may_hold_session_state, "create temporary sequence s"));
	cr_assert(check(sql_may_hold_session_state, "select 1 into temp t"));
	cr_assert(check(sql_may_hold_session_state, "DECLARE c CURSOR WITH HOLD FOR SELECT 1"));
	cr_assert(check(sql_may_hold_session_state, "select pg_advisory_lock(1)"));
	cr_assert(check(sql_may_hold_session_state, "SELECT PG_TRY_ADVISORY_LOCK_SHARED(1, 2)"));
	cr_assert(check(sql_may_hold_session_state, "select pg_advisory_lock_shared(7);"));
	cr_assert(check(sql_may_hold_session_state, "select temp from readings"), "a column named temp: may hold");
	cr_assert_not(check(sql_may_hold_session_state, "select pg_advisory_xact_lock(1)"), "a transaction's own lock");
	cr_assert_not(check(sql_may_hold_session_state, "select temperature, holder from t"), "longer words");
	cr_assert_not(check(sql_may_hold_session_state, "declare c cursor for select 1"));
	cr_assert_not(check(sql_may_hold_session_state, "select my_pg_advisory_lock(1)"));
	cr_assert_not(check(sql_may_hold_session_state, ""));
}

Test(sql, listen_and_unlisten_are_read_with_their_channel_as_postgresql_folds_it)
{
	char name[64];
	static const struct {
		const char *text;
		int kind;
		const char *name;
	} cases[] = {
		{"LISTEN Jobs", SQL_LISTEN, "jobs"},
		{"  listen \"Mixed \"\"q\"\"\" ;", SQL_LISTEN, "Mixed \"q\""},
		{"UNLISTEN jobs;", SQL_UNLISTEN, "jobs"},
		{"unlisten *", SQL_UNLISTEN_ALL, ""},
		{"unlisten * ;", SQL_UNLISTEN_ALL, ""},
		{"listen a; listen b", SQL_LISTEN_NONE, NULL},
		{"listen", SQL_LISTEN_NONE, NULL},
		{"listener", SQL_LISTEN_NONE, NULL},
		{"select 1", SQL_LISTEN_NONE, NULL},
		{"unlisten *, a", SQL_LISTEN_NONE, NULL},
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(cases); i++) {
		int kind = sql_parse_listen((const uint8_t *)cases[i].text, (uint32_t)strlen(cases[i].text) + 1, name,
					    sizeof(name));
		cr_assert_eq(kind, cases[i].kind, "%s", cases[i].text);
		if (cases[i].name)
			cr_assert_str_eq(name, cases[i].name, "%s", cases[i].text);
	}
	cr_assert_eq(sql_parse_listen((const uint8_t *)"listen aaaaaaaaaa", 17, name, 8), SQL_LISTEN_NONE, "too long");
}

Test(sql, only_a_set_or_reset_statement_may_set_search_path)
{
	cr_assert(check(sql_statement_may_set_search_path, "SET SESSION search_path TO app"));
	cr_assert(check(sql_statement_may_set_search_path, " /* x */ reset ALL"));
	cr_assert_not(check(sql_statement_may_set_search_path, "set local statement_timeout = 5"));
	cr_assert_not(check(sql_statement_may_set_search_path, "select set_config('search_path', 'x', false)"));
	cr_assert_not(check(sql_statement_may_set_search_path, "settings search_path"));
}

Test(sql, deallocate_all_and_discard_all_are_recognised_as_first_statements)
{
	cr_assert(check(sql_is_forget_all, "DEALLOCATE ALL"));
	cr_assert(check(sql_is_forget_all, "deallocate prepare all;"));
	cr_assert(check(sql_is_forget_all, " -- c\n discard all ; select 1"));
	cr_assert_not(check(sql_is_forget_all, "deallocate all_of_them"));
	cr_assert_not(check(sql_is_forget_all, "deallocate \"all\""));
	cr_assert_not(check(sql_is_forget_all, "discard temp"));
	cr_assert_not(check(sql_is_forget_all, "deallocate all x"));
}

Test(sql, words_skip_blanks_and_comments_and_never_match_a_longer_identifier)
{
	const char *text = "  /* a */ -- b\n Set\tsearch_path";
	const uint8_t *p = (const uint8_t *)text, *end = p + strlen(text);
	p = sql_skip_blank(p, end);
	cr_assert_eq(*p, 'S');
	const uint8_t *before = p;
	cr_assert_not(sql_take_word(&p, end, "se"), "a prefix of a longer word is not the word");
	cr_assert_eq(p, before, "nothing consumed");
	cr_assert(sql_take_word(&p, end, "set"));
	cr_assert(sql_take_word(&p, end, "SEARCH_PATH"));
	cr_assert_eq(p, end);
	const char *open_comment = "/* never closed";
	p = (const uint8_t *)open_comment;
	cr_assert_eq(sql_skip_blank(p, p + strlen(open_comment)), p + strlen(open_comment));
}

Test(sql, into_is_found_in_any_case)
{
	cr_assert(check(sql_mentions_into, "select 8 as a into h"));
	cr_assert(check(sql_mentions_into, "SELECT 9 AS a Into k"), "mixed case");
	cr_assert(check(sql_mentions_into, "select * from pointo"), "inside a word: errs on the safe side");
	cr_assert_not(check(sql_mentions_into, "select int from t"));
	cr_assert_not(check(sql_mentions_into, "int"));
}

Test(sql, unlisten_star_is_recognised_as_the_first_statement_only)
{
	cr_assert(check(sql_is_unlisten_all, "UNLISTEN *"));
	cr_assert(check(sql_is_unlisten_all, " -- all\n unlisten\t*; select 1"));
	cr_assert_not(check(sql_is_unlisten_all, "unlisten chan"));
	cr_assert_not(check(sql_is_unlisten_all, "select 1; unlisten *"));
	cr_assert_not(check(sql_is_unlisten_all, "unlistenx *"));
	cr_assert_not(check(sql_is_unlisten_all, "unlisten"));
}

static int deallocate_of(const char *sql, char *name, size_t size)
{
	return sql_parse_deallocate((const uint8_t *)sql, (uint32_t)strlen(sql) + 1, name, size);
}

Test(sql, deallocate_names_fold_unquoted_and_keep_quoted_ones)
{
	char name[16];
	cr_assert_eq(deallocate_of("DEALLOCATE Stmt_1", name, sizeof(name)), 1);
	cr_assert_str_eq(name, "stmt_1");
	cr_assert_eq(deallocate_of(" deallocate prepare \"My \"\"x\"\"\" ;", name, sizeof(name)), 1);
	cr_assert_str_eq(name, "My \"x\"");
	cr_assert_eq(deallocate_of("deallocate a; select 1", name, sizeof(name)), 0, "only the whole text");
	cr_assert_eq(deallocate_of("deallocate \"open", name, sizeof(name)), 0);
	cr_assert_eq(deallocate_of("deallocate", name, sizeof(name)), 0);
	cr_assert_eq(deallocate_of("deallocate a_name_of_sixteen_bytes", name, sizeof(name)), 0, "too long");
	cr_assert_eq(deallocate_of("discard all", name, sizeof(name)), 0);
}

static int savepoint_of(const char *sql, char *name, size_t size)
{
	return sql_parse_savepoint((const uint8_t *)sql, (uint32_t)strlen(sql) + 1, name, size);
}

Test(sql, savepoint_statements_name_their_savepoint_as_postgresql_reads_it)
{
	char name[16];
	cr_assert_eq(savepoint_of("SAVEPOINT Sp1", name, sizeof(name)), SQL_SAVEPOINT_SET);
	cr_assert_str_eq(name, "sp1");
	cr_assert_eq(savepoint_of("release \"Sp 1\";", name, sizeof(name)), SQL_SAVEPOINT_RELEASE);
	cr_assert_str_eq(name, "Sp 1");
	cr_assert_eq(savepoint_of("/* c */ RELEASE SAVEPOINT a", name, sizeof(name)), SQL_SAVEPOINT_RELEASE);
	cr_assert_str_eq(name, "a");
	cr_assert_eq(savepoint_of("rollback to b", name, sizeof(name)), SQL_SAVEPOINT_ROLLBACK_TO);
	cr_assert_str_eq(name, "b");
	cr_assert_eq(savepoint_of("ROLLBACK WORK TO SAVEPOINT c", name, sizeof(name)), SQL_SAVEPOINT_ROLLBACK_TO);
	cr_assert_eq(savepoint_of("rollback transaction to savepoint d ;", name, sizeof(name)), SQL_SAVEPOINT_ROLLBACK_TO);
	cr_assert_str_eq(name, "d");
	cr_assert_eq(savepoint_of("rollback", name, sizeof(name)), SQL_SAVEPOINT_NONE, "a whole rollback");
	cr_assert_eq(savepoint_of("rollback prepared 'x'", name, sizeof(name)), SQL_SAVEPOINT_NONE);
	cr_assert_eq(savepoint_of("savepoint a; insert into t values (1)", name, sizeof(name)), SQL_SAVEPOINT_NONE);
	cr_assert_eq(savepoint_of("savepoints a", name, sizeof(name)), SQL_SAVEPOINT_NONE);
	cr_assert_eq(savepoint_of("savepoint", name, sizeof(name)), SQL_SAVEPOINT_NONE);
}

static enum sql_set_kind set_of(const char *sql, char *name, char *statement)
{
	uint32_t start, len;
	enum sql_set_kind kind = sql_parse_set((const uint8_t *)sql, (uint32_t)strlen(sql), name, 128, &start, &len);
	memcpy(statement, sql + start, len);
	statement[len] = '\0';
	return kind;
}

Test(sql, a_session_set_names_its_variable_and_keeps_the_statement_as_written)
{
	char name[128], stmt[256];
	cr_assert_eq(set_of("  SET statement_timeout = '5s' ;", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "statement_timeout");
	cr_assert_str_eq(stmt, "SET statement_timeout = '5s'");
	cr_assert_eq(set_of("/* c */ set session Work_Mem to '64MB'", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "work_mem");
	cr_assert_str_eq(stmt, "set session Work_Mem to '64MB'");
	cr_assert_eq(set_of("SET \"App\".User_Id = '7'", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "app.user_id");
	cr_assert_eq(set_of("SET TIME ZONE 'UTC'", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "timezone");
	cr_assert_str_eq(stmt, "SET TIME ZONE 'UTC'");
	cr_assert_eq(set_of("set names 'UTF8'", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "client_encoding");
	cr_assert_eq(set_of("SET SESSION AUTHORIZATION alice", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "session_authorization");
	cr_assert_eq(set_of("SET SESSION SESSION AUTHORIZATION alice", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "session_authorization");
	cr_assert_eq(set_of("SET ROLE reader", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "role");
	cr_assert_eq(set_of("SET SCHEMA 'app'", name, stmt), SQL_SET_VALUE);
	cr_assert_str_eq(name, "search_path");
}

Test(sql, a_set_to_the_default_is_a_reset_and_the_resets_name_theirs)
{
	char name[128], stmt[256];
	cr_assert_eq(set_of("SET work_mem TO DEFAULT", name, stmt), SQL_SET_RESET);
	cr_assert_str_eq(name, "work_mem");
	cr_assert_eq(set_of("SET ROLE NONE", name, stmt), SQL_SET_RESET);
	cr_assert_str_eq(name, "role");
	cr_assert_eq(set_of("SET TIME ZONE LOCAL", name, stmt), SQL_SET_RESET);
	cr_assert_str_eq(name, "timezone");
	cr_assert_eq(set_of("reset lock_timeout", name, stmt), SQL_SET_RESET);
	cr_assert_str_eq(name, "lock_timeout");
	cr_assert_eq(set_of("RESET SESSION AUTHORIZATION", name, stmt), SQL_SET_RESET);
	cr_assert_str_eq(name, "session_authorization");
	cr_assert_eq(set_of("RESET ALL", name, stmt), SQL_SET_RESET_ALL);
	cr_assert_eq(set_of("DISCARD ALL", name, stmt), SQL_SET_DISCARD_ALL);
	cr_assert_eq(set_of("DISCARD PLANS", name, stmt), SQL_SET_NONE);
}

Test(sql, transaction_scoped_sets_are_none_and_unkeepable_ones_unknown)
{
	char name[128], stmt[256];
	cr_assert_eq(set_of("SET LOCAL work_mem = '1MB'", name, stmt), SQL_SET_NONE);
	cr_assert_eq(set_of("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", name, stmt), SQL_SET_NONE);
	cr_assert_eq(set_of("SET CONSTRAINTS ALL DEFERRED", name, stmt), SQL_SET_NONE);
	cr_assert_eq(set_of("SELECT 'set x = 1'", name, stmt), SQL_SET_NONE);
	cr_assert_eq(set_of("UPDATE t SET a = 1", name, stmt), SQL_SET_NONE);
	cr_assert_eq(set_of("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", name, stmt), SQL_SET_UNKNOWN);
	cr_assert_eq(set_of("SET work_mem = '1MB' -- why", name, stmt), SQL_SET_UNKNOWN);
	cr_assert_eq(set_of("SET application_name = E'a\\'b'", name, stmt), SQL_SET_UNKNOWN);
	cr_assert_eq(set_of("SET work_mem = 'unterminated", name, stmt), SQL_SET_UNKNOWN);
}

Test(sql, savepoints_and_rollbacks_are_told_apart)
{
	char name[128], stmt[256];
	cr_assert_eq(set_of("SAVEPOINT Sp1", name, stmt), SQL_SET_SAVEPOINT);
	cr_assert_str_eq(name, "sp1");
	cr_assert_eq(set_of("RELEASE SAVEPOINT sp1", name, stmt), SQL_SET_RELEASE);
	cr_assert_eq(set_of("ROLLBACK TO sp1", name, stmt), SQL_SET_ROLLBACK_TO);
	cr_assert_str_eq(name, "sp1");
	cr_assert_eq(set_of("rollback", name, stmt), SQL_SET_ROLLBACK);
	cr_assert_eq(set_of("ROLLBACK AND CHAIN", name, stmt), SQL_SET_ROLLBACK);
	cr_assert_eq(set_of("abort work", name, stmt), SQL_SET_ROLLBACK);
	cr_assert_eq(set_of("ROLLBACK TO", name, stmt), SQL_SET_UNKNOWN);
	cr_assert_str_eq(sql_set_tag(SQL_SET_ROLLBACK_TO), "ROLLBACK");
	cr_assert_str_eq(sql_set_tag(SQL_SET_RESET_ALL), "RESET");
}

Test(sql, a_text_that_may_set_names_one_of_the_words)
{
	cr_assert(sql_may_set((const uint8_t *)"select 1; ReSeT all", 19));
	cr_assert(sql_may_set((const uint8_t *)"begin; savepoint a", 18));
	cr_assert(!sql_may_set((const uint8_t *)"select 1; select 2", 18));
}

static bool chain_of(const char *sql) { return sql_is_chain_end((const uint8_t *)sql, (uint32_t)strlen(sql) + 1); }

Test(sql, a_chained_end_of_a_transaction_is_one_statement_and_chain)
{
	cr_assert(chain_of("COMMIT AND CHAIN"));
	cr_assert(chain_of(" end work and chain ;"));
	cr_assert(chain_of("rollback transaction and chain"));
	cr_assert(chain_of("ABORT AND CHAIN"));
	cr_assert(!chain_of("COMMIT AND NO CHAIN"));
	cr_assert(!chain_of("COMMIT"));
	cr_assert(!chain_of("COMMIT AND CHAIN; SELECT 1"));
	cr_assert(!chain_of("select 'commit and chain'"));
}
