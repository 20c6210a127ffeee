#include "params.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

TestSuite(params, .timeout = 10);

Test(params, tracked_names_are_the_builtins_then_the_extra_ones_case_insensitively)
{
	struct params_tracked t;
	cr_assert_eq(params_tracked_init(&t, "search_path, DateStyle,default_transaction_read_only"), 0);
	cr_assert_eq(t.count, 8, "6 built-in + 2 new (DateStyle is already there)");
	cr_assert_geq(params_tracked_index(&t, "datestyle"), 0);
	cr_assert_geq(params_tracked_index(&t, "SEARCH_PATH"), 0);
	cr_assert_eq(params_tracked_index(&t, "work_mem"), -1);
	params_tracked_deinit(&t);
}

Test(params, too_many_extra_names_are_refused)
{
	struct params_tracked t;
	char extra[1024] = "";
	for (int i = 0; i < 20; i++)
		snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), "p%d,", i);
	cr_assert_eq(params_tracked_init(&t, extra), -E2BIG);
	params_tracked_deinit(&t);
}

Test(params, store_replaces_by_name_and_find_ignores_case)
{
	struct pool_param list[POOL_PARAMS_MAX];
	uint32_t count = 0;
	params_store(list, &count, "TimeZone", "UTC");
	params_store(list, &count, "timezone", "Asia/Tokyo");
	cr_assert_eq(count, 1);
	cr_assert_str_eq(params_find(list, count, "TIMEZONE"), "Asia/Tokyo");
	cr_assert_null(params_find(list, count, "DateStyle"));
}

Test(params, set_lists_only_values_that_differ_and_quotes_them)
{
	struct params_tracked t;
	cr_assert_eq(params_tracked_init(&t, NULL), 0);
	struct params_values client = {0};
	int app = params_tracked_index(&t, "application_name");
	int tz = params_tracked_index(&t, "TimeZone");
	int ds = params_tracked_index(&t, "DateStyle");
	strcpy(client.value[app], "it's \\ mine");
	strcpy(client.value[tz], "UTC");
	strcpy(client.value[ds], "ISO, MDY");
	client.is_set = (1u << app) | (1u << tz) | (1u << ds);
	struct pool_param conn[POOL_PARAMS_MAX];
	uint32_t count = 0;
	params_store(conn, &count, "TimeZone", "UTC");             /* same: no SET */
	params_store(conn, &count, "DateStyle", "SQL, DMY");       /* differs */
	params_store(conn, &count, "application_name", "another"); /* differs, needs escaping */
	char sql[512];
	int n = params_build_set(&t, &client, conn, count, sql, sizeof(sql));
	cr_assert_gt(n, 0);
	cr_assert_str_eq(sql, "SET application_name TO E'it''s \\\\ mine'; SET DateStyle TO 'ISO, MDY'");
	cr_assert_eq((size_t)n, strlen(sql));
	params_store(conn, &count, "DateStyle", "ISO, MDY");
	params_store(conn, &count, "application_name", "it's \\ mine");
	cr_assert_eq(params_build_set(&t, &client, conn, count, sql, sizeof(sql)), 0, "nothing differs");
	cr_assert_eq(params_build_set(&t, &client, conn, 0, sql, 8), -ENOSPC, "a short buffer is refused");
	params_tracked_deinit(&t);
}
