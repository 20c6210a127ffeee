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
