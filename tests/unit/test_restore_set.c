#include "replay/restore_set.h"

#include <criterion/criterion.h>
#include <string.h>

TestSuite(restore_set, .timeout = 10);

static void change(struct restore_set *set, enum restore_change_kind kind, const char *name, const char *statement)
{
	cr_assert_eq(restore_set_change(set, kind, name, statement), 0);
}

static void end(struct restore_set *set, bool is_commit) { cr_assert_eq(restore_set_end(set, is_commit), 0); }

static const char *statement_of(const struct restore_set *set, const char *name)
{
	int i = restore_set_find(set, name);
	return i < 0 ? NULL : set->entries[i].statement;
}

Test(restore_set, a_change_holds_only_once_its_transaction_commits)
{
	struct restore_set set = {0};
	change(&set, RESTORE_SET, "work_mem", "SET work_mem = '1MB'");
	cr_assert_eq(set.count, 0, "pending until the end");
	end(&set, true);
	cr_assert_str_eq(statement_of(&set, "work_mem"), "SET work_mem = '1MB'");
	change(&set, RESTORE_SET, "work_mem", "SET work_mem = '2MB'");
	change(&set, RESTORE_RESET_ALL, NULL, NULL);
	end(&set, false);
	cr_assert_str_eq(statement_of(&set, "WORK_MEM"), "SET work_mem = '1MB'",
			 "a rolled-back RESET ALL wipes nothing");
	restore_set_deinit(&set);
}

Test(restore_set, a_repeated_set_reuses_its_entry_moved_to_the_end)
{
	struct restore_set set = {0};
	change(&set, RESTORE_SET, "a", "SET a = 1");
	change(&set, RESTORE_SET, "b", "SET b = 1");
	change(&set, RESTORE_SET, "a", "SET a = 2");
	end(&set, true);
	cr_assert_eq(set.count, 2);
	cr_assert_str_eq(set.entries[0].name, "b");
	cr_assert_str_eq(set.entries[1].statement, "SET a = 2");
	change(&set, RESTORE_RESET, "b", NULL);
	end(&set, true);
	cr_assert_eq(set.count, 1);
	cr_assert_null(statement_of(&set, "b"));
	restore_set_deinit(&set);
}

Test(restore_set, rollback_to_a_savepoint_undoes_the_changes_after_it_and_release_keeps_them)
{
	struct restore_set set = {0};
	change(&set, RESTORE_SET, "a", "SET a = 1");
	cr_assert_eq(restore_set_savepoint(&set, "s1"), 0);
	change(&set, RESTORE_SET, "b", "SET b = 1");
	cr_assert_eq(restore_set_savepoint(&set, "s2"), 0);
	change(&set, RESTORE_SET, "c", "SET c = 1");
	cr_assert(restore_set_release(&set, "s2"));
	cr_assert(restore_set_rollback_to(&set, "s1"));
	cr_assert(restore_set_rollback_to(&set, "s1"), "the savepoint stays after a rollback to it");
	cr_assert(!restore_set_release(&set, "s2"), "released savepoints are gone");
	change(&set, RESTORE_SET, "d", "SET d = 1");
	end(&set, true);
	cr_assert_eq(set.count, 2);
	cr_assert_not_null(statement_of(&set, "a"));
	cr_assert_not_null(statement_of(&set, "d"));
	cr_assert_eq(set.savepoint_count, 0);
	restore_set_deinit(&set);
}

Test(restore_set, reset_all_keeps_role_and_session_authorization_and_discard_all_keeps_nothing)
{
	struct restore_set set = {0};
	change(&set, RESTORE_SET, "role", "SET ROLE r");
	change(&set, RESTORE_SET, "session_authorization", "SET SESSION AUTHORIZATION u");
	change(&set, RESTORE_SET, "work_mem", "SET work_mem = '1MB'");
	change(&set, RESTORE_RESET_ALL, NULL, NULL);
	end(&set, true);
	cr_assert_eq(set.count, 2);
	cr_assert_null(statement_of(&set, "work_mem"));
	change(&set, RESTORE_DISCARD_ALL, NULL, NULL);
	end(&set, true);
	cr_assert_eq(set.count, 0);
	restore_set_deinit(&set);
}
