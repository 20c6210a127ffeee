/*
 * test_databases.c — the [databases] and [users] entries: PgBouncer's key=value syntax, the "*" fallback,
 * and a refusal naming what is wrong for every key tern does not take.
 */
#include "databases.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

static const char *const modes[] = {"session", "transaction", NULL};

static struct databases *dbs;

static void add_ok(const char *section, const char *name, const char *value)
{
	char reason[256] = "";
	cr_assert_eq(databases_add(&dbs, section, name, value, modes, reason, sizeof(reason)), 0, "%s = %s: %s", name,
		     value, reason);
}

static void add_refused(const char *section, const char *name, const char *value, const char *needle)
{
	char reason[256] = "";
	cr_assert_eq(databases_add(&dbs, section, name, value, modes, reason, sizeof(reason)), -EINVAL, "%s = %s",
		     name, value);
	cr_assert_not_null(strstr(reason, needle), "%s = %s: \"%s\" lacks \"%s\"", name, value, reason, needle);
}

static void fini(void)
{
	databases_destroy(dbs);
	dbs = NULL;
}

TestSuite(databases, .fini = fini);

Test(databases, entries_take_pgbouncers_keys_with_quotes_and_escapes)
{
	add_ok("databases", "shop", "dbname=shop_prod user=app password='p w' pool_size=7 "
				    "reserve_pool_size=2 max_db_connections=30 pool_mode=session");
	const struct database_entry *e = databases_find(dbs, "shop");
	cr_assert_not_null(e);
	cr_assert_str_eq(e->dbname, "shop_prod");
	cr_assert_str_eq(e->user, "app");
	cr_assert_str_eq(e->password, "p w");
	cr_assert_eq(e->pool_size, 7);
	cr_assert_eq(e->reserve_pool_size, 2);
	cr_assert_eq(e->max_db_connections, 30);
	cr_assert_eq(e->pool_mode, 0);
	fini();
	add_ok("databases", "reports", "server=standby");
	cr_assert_str_eq(databases_find(dbs, "reports")->server, "standby");
	fini();
	add_ok("databases", "shop", "password='it\\'s \\\\ x'");
	cr_assert_str_eq(databases_find(dbs, "shop")->password, "it's \\ x");
	cr_assert_eq(databases_find(dbs, "shop")->pool_mode, -1, "unset: [tern] pool_mode");
	cr_assert_eq(databases_find(dbs, "shop")->dbname[0], '\0', "unset: the name asked for");
	cr_assert_eq(databases_find(dbs, "shop")->server[0], '\0', "unset: the primary of the moment");
}

Test(databases, a_name_not_listed_takes_the_star_entry_or_nothing)
{
	cr_assert_null(databases_find(NULL, "x"));
	cr_assert_not(databases_is_routing(NULL));
	add_ok("databases", "shop", "dbname=s");
	cr_assert(databases_is_routing(dbs));
	cr_assert_null(databases_find(dbs, "web"), "no \"*\": unknown");
	add_ok("databases", "*", "");
	cr_assert_str_eq(databases_find(dbs, "web")->name, "*");
	cr_assert_str_eq(databases_find(dbs, "shop")->dbname, "s", "its own entry before \"*\"");
	cr_assert_eq(databases_count(dbs), 2);
}

Test(databases, users_take_pool_mode_and_max_user_connections)
{
	add_ok("users", "batch", "pool_mode=session max_user_connections=3");
	const struct user_entry *u = databases_find_user(dbs, "batch");
	cr_assert_not_null(u);
	cr_assert_eq(u->pool_mode, 0);
	cr_assert_eq(u->max_user_connections, 3);
	cr_assert_null(databases_find_user(dbs, "web"));
	cr_assert_not(databases_is_routing(dbs), "[users] alone routes nothing");
}

Test(databases, refusals_say_what_is_wrong)
{
	add_refused("databases", "a", "host=10.0.0.1", "[servers]");
	add_refused("databases", "a", "port=5433", "[servers]");
	add_refused("databases", "a", "connect_query='select 1'", "unknown key (known: dbname");
	add_refused("databases", "a", "pool_size=-1", "between 0 and 10000");
	add_refused("databases", "a", "pool_size=10001", "between 0 and 10000");
	add_refused("databases", "a", "pool_mode=statement", "session or transaction");
	add_refused("databases", "a", "dbname", "without \"=\"");
	add_refused("databases", "a", "password='open", "unterminated quote");
	add_refused("databases", "a", "dbname=", "1 to 63 bytes");
	add_refused("users", "u", "pool_size=3", "known: pool_mode, max_user_connections");
	add_ok("databases", "a", "");
	add_refused("databases", "a", "", "listed twice");
	add_refused("databases", "", "dbname=x", "a name of 1 to 63 bytes");
	char long_name[80];
	memset(long_name, 'n', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	add_refused("databases", long_name, "", "a name of 1 to 63 bytes");
}

Test(databases, entries_are_bounded)
{
	char name[16], reason[128];
	for (unsigned i = 0; i < DATABASES_ENTRIES_MAX; i++) {
		snprintf(name, sizeof(name), "d%u", i);
		cr_assert_eq(databases_add(&dbs, "databases", name, "", modes, reason, sizeof(reason)), 0);
	}
	cr_assert_eq(databases_add(&dbs, "databases", "one_more", "", modes, reason, sizeof(reason)), -E2BIG);
	cr_assert_not_null(strstr(reason, "more than 4096 entries"));
}
