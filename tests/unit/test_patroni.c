/* patroni.c's /cluster reading: which member is a leader that takes writes, and what is not Patroni's
 * answer. (The GET itself runs against real Patroni in tests/integration/run_patroni.py.) */
#include "routing/patroni.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

static struct patroni_view parse_ok(const char *json)
{
	struct patroni_view view;
	char err[160] = "";
	cr_assert_eq(patroni_parse_cluster(json, strlen(json), &view, err, sizeof(err)), 0, "%s: %s", json, err);
	return view;
}

/* As Patroni 3.0.2 answers for a healthy two-member cluster. */
static const char healthy[] =
	"{\"members\": [{\"name\": \"pg1\", \"role\": \"leader\", \"state\": \"running\", \"api_url\": "
	"\"http://127.0.0.1:8008/patroni\", \"host\": \"127.0.0.1\", \"port\": 5433, \"timeline\": 3}, "
	"{\"name\": \"pg2\", \"role\": \"replica\", \"state\": \"running\", \"host\": \"127.0.0.1\", "
	"\"port\": 5434, \"timeline\": 3, \"lag\": 0}], \"scope\": \"tern\"}";

Test(patroni, a_running_leader_is_named_with_its_address)
{
	struct patroni_view v = parse_ok(healthy);
	cr_assert(v.has_leader);
	cr_assert_str_eq(v.leader_name, "pg1");
	cr_assert_str_eq(v.leader_host, "127.0.0.1");
	cr_assert_eq(v.leader_port, 5433);
	cr_assert_eq(v.member_count, 2);
}

Test(patroni, a_leader_that_does_not_run_takes_no_writes)
{
	/* During a switchover the old leader stops first; a standby cluster's leader is a replica. */
	static const char *const cases[] = {
		"{\"members\": [{\"name\": \"pg1\", \"role\": \"leader\", \"state\": \"stopping\", \"host\": \"h\", "
		"\"port\": 1}]}",
		"{\"members\": [{\"name\": \"pg1\", \"role\": \"leader\", \"state\": \"starting\", \"host\": \"h\", "
		"\"port\": 1}]}",
		"{\"members\": [{\"name\": \"pg1\", \"role\": \"standby_leader\", \"state\": \"running\", \"host\": "
		"\"h\", \"port\": 1}]}",
		"{\"members\": [{\"name\": \"pg2\", \"role\": \"replica\", \"state\": \"running\", \"host\": \"h\", "
		"\"port\": 1}]}",
		"{\"members\": []}",
		/* two members that say they lead */
		"{\"members\": [{\"name\": \"a\", \"role\": \"leader\", \"state\": \"running\", \"host\": \"h\", "
		"\"port\": 1}, {\"name\": \"b\", \"role\": \"leader\", \"state\": \"running\", \"host\": \"h\", "
		"\"port\": 2}]}",
		/* a leader whose port is not a port */
		"{\"members\": [{\"name\": \"pg1\", \"role\": \"leader\", \"state\": \"running\", \"host\": \"h\", "
		"\"port\": 70000}]}",
		"{\"members\": [{\"name\": \"pg1\", \"role\": \"leader\", \"state\": \"running\", \"host\": \"h\"}]}",
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_not(parse_ok(cases[i]).has_leader, "%s", cases[i]);
}

Test(patroni, what_is_not_a_cluster_answer_is_refused_with_a_reason)
{
	static const char *const cases[] = {"", "not json", "[1, 2]", "{\"members\": {}}", "{\"scope\": \"x\"}",
					    "{\"members\": [1, 2"};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct patroni_view view;
		char err[160] = "";
		cr_assert_eq(patroni_parse_cluster(cases[i], strlen(cases[i]), &view, err, sizeof(err)), -EINVAL, "%s",
			     cases[i]);
		cr_assert(strncmp(err, "/cluster: ", 10) == 0 && strlen(err) > 10, "%s: %s", cases[i], err);
		cr_assert_not(view.has_leader);
	}
}

Test(patroni, long_names_are_cut_not_overrun)
{
	char json[2048], name[600];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	snprintf(json, sizeof(json),
		 "{\"members\": [{\"name\": \"%s\", \"role\": \"leader\", \"state\": \"running\", \"host\": \"%s\", "
		 "\"port\": 5432}]}",
		 name, name);
	struct patroni_view v = parse_ok(json);
	cr_assert(v.has_leader);
	cr_assert_eq(strlen(v.leader_name), PATRONI_NAME_SIZE - 1);
	cr_assert_eq(strlen(v.leader_host), PATRONI_HOST_SIZE - 1);
}
