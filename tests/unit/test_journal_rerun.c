/* journal_rerun.c without a server: the request's RFC 3339 times, and what a run decides before it ever
 * reaches a target (an incomplete transaction refused, an empty window, a target that cannot be reached, a
 * deadline already passed). Replays against a real PostgreSQL are tests/integration/run_journal.py's. */
#include "replay/journal_rerun.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

Test(history_replay, rfc3339_times_read_as_microseconds_since_the_epoch)
{
	static const struct {
		const char *text;
		uint64_t us;
	} cases[] = {
		{"1970-01-01T00:00:00Z", 0},
		{"2024-05-01T12:00:00Z", 1714564800000000ull},
		{"2024-05-01t12:00:00z", 1714564800000000ull},
		{"2024-05-01T14:00:00+02:00", 1714564800000000ull},
		{"2024-05-01T06:30:00-05:30", 1714564800000000ull},
		{"2024-05-01T12:00:00.5Z", 1714564800500000ull},
		{"2024-05-01T12:00:00.123456789Z", 1714564800123456ull},
		{"2024-02-29T00:00:00Z", 1709164800000000ull}, /* a leap day */
		{"1970-01-01T01:00:00+01:00", 0},
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(cases); i++) {
		uint64_t us = 1;
		cr_assert_eq(rerun_parse_time(cases[i].text, &us), 0, "%s", cases[i].text);
		cr_assert_eq(us, cases[i].us, "%s: %llu", cases[i].text, (unsigned long long)us);
	}
}

Test(history_replay, other_time_forms_are_refused)
{
	static const char *const cases[] = {
		"",
		"2024-05-01",                    /* a date alone */
		"2024-05-01T12:00:00",           /* no offset */
		"2024-05-01 12:00:00Z",          /* a space for the T */
		"2024-5-01T12:00:00Z",           /* a one-digit month */
		"2024-13-01T12:00:00Z",          /* month 13 */
		"2023-02-29T00:00:00Z",          /* not a leap year */
		"2024-04-31T00:00:00Z",          /* April has 30 days */
		"2024-05-01T24:00:00Z",          /* hour 24 */
		"2024-05-01T12:00:00.Z",         /* a dot without digits */
		"2024-05-01T12:00:00+2:00",      /* a one-digit offset hour */
		"2024-05-01T12:00:00+24:00",     /* offset hour 24 */
		"2024-05-01T12:00:00+02:60",     /* offset minute 60 */
		"2024-05-01T12:00:00Z ",         /* trailing bytes */
		"1969-12-31T23:59:59Z",          /* before the epoch */
		"1970-01-01T00:30:00+01:00",     /* ... after its offset */
		"now",
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(cases); i++) {
		uint64_t us = 7;
		cr_assert_eq(rerun_parse_time(cases[i], &us), -EINVAL, "%s", cases[i]);
		cr_assert_eq(us, 7, "%s: untouched", cases[i]);
	}
}

/* A memory-only journal holding `count` one-statement transactions; flags[i] for the i-th. */
static struct journal *journal_of(uint32_t count, const uint32_t *flags)
{
	struct tern_config cfg;
	cr_assert_eq(config_init_defaults(&cfg), 0); /* (its [journal] dir is empty: memory only) */
	struct journal *h = NULL;
	char err[256] = "";
	cr_assert_eq(journal_open(&h, &cfg, err, sizeof(err)), 0, "%s", err);
	config_deinit(&cfg);
	static const struct journal_statement statement = {
		.kind = JOURNAL_STATEMENT_SIMPLE, .text = {"insert into t values (1)", 24}, .tag = {"INSERT 0 1", 10}};
	for (uint32_t i = 0; i < count; i++) {
		struct journal_record r = {.flags = flags ? flags[i] : 0, .statements = &statement, .statement_count = 1};
		cr_assert_eq(journal_commit(h, &r, 1000000u * (i + 1)), i + 1);
	}
	return h;
}

static struct rerun_request request(enum rerun_mode mode, const char *target)
{
	return (struct rerun_request){.mode = mode, .target = target, .to_us = UINT64_MAX};
}

/* A unix socket folder that does not exist: libpq fails at once, without the network. */
static const char unreachable[] = "host=/nonexistent/tern-test dbname=x connect_timeout=2";

Test(history_replay, committed_history_refuses_a_window_with_an_incomplete_transaction_before_it_connects)
{
	const uint32_t flags[] = {0, JOURNAL_RECORD_INCOMPLETE, 0, JOURNAL_RECORD_INCOMPLETE};
	struct journal *h = journal_of(4, flags);
	struct rerun_request req = request(RERUN_COMMITTED_HISTORY, unreachable);
	struct rerun_result out;
	char err[RERUN_ERROR_MAX] = "";
	cr_assert_eq(journal_rerun(h, &req, base_now_ns() + BASE_NS_PER_SEC, &out, err, sizeof(err)), -EPERM);
	cr_assert_eq(out.stopped_at, 2, "the first incomplete one is named");
	cr_assert(strstr(err, "commit_seq 2 is incomplete"), "%s", err);
	cr_assert_eq(out.applied, 0);
	cr_assert_eq(out.coverage.retained_transactions, 4);
	cr_assert_eq(out.coverage.commit_seq_high, 4);
	cr_assert(!out.coverage.is_durable);

	/* Past it, or best effort over it: the run goes on (here to a target it cannot reach). */
	req.after_commit_seq = 2;
	req.mode = RERUN_COMMITTED_HISTORY;
	cr_assert_eq(journal_rerun(h, &req, base_now_ns() + BASE_NS_PER_SEC, &out, err, sizeof(err)), -EPERM,
		     "commit_seq 4 is incomplete too");
	cr_assert_eq(out.stopped_at, 4);
	req.after_commit_seq = 0;
	req.mode = RERUN_TIME_WINDOW;
	cr_assert_eq(journal_rerun(h, &req, base_now_ns() + BASE_NS_PER_SEC, &out, err, sizeof(err)), 0);
	cr_assert(out.is_partial);

	struct journal_counters c;
	journal_counters(h, &c);
	cr_assert_eq(c.reruns, 3, "every run is counted, a refused one too");
	journal_close(h);
}

Test(history_replay, an_unreachable_target_stops_at_the_first_transaction_with_nothing_applied)
{
	struct journal *h = journal_of(3, NULL);
	struct rerun_request req = request(RERUN_COMMITTED_HISTORY, unreachable);
	req.after_commit_seq = 1;
	struct rerun_result out;
	char err[RERUN_ERROR_MAX] = "";
	cr_assert_eq(journal_rerun(h, &req, base_now_ns() + 5 * BASE_NS_PER_SEC, &out, err, sizeof(err)), 0);
	cr_assert(out.is_partial);
	cr_assert_eq(out.applied, 0);
	cr_assert_eq(out.stopped_at, 2);
	cr_assert_eq(out.last_commit_seq, 1, "nothing applied: still where the request began, to resume from");
	cr_assert(strstr(out.error, "could not connect to the target"), "%s", out.error);
	journal_close(h);
}

Test(history_replay, an_empty_window_applies_nothing_and_connects_to_nothing)
{
	struct journal *h = journal_of(3, NULL);
	struct rerun_request req = request(RERUN_COMMITTED_HISTORY, unreachable);
	req.from_us = 5000000; /* after the third's commit (3 s) */
	struct rerun_result out;
	char err[RERUN_ERROR_MAX] = "";
	cr_assert_eq(journal_rerun(h, &req, base_now_ns() + BASE_NS_PER_SEC, &out, err, sizeof(err)), 0);
	cr_assert(!out.is_partial, "%s", out.error);
	cr_assert_eq(out.applied + out.failed + out.stopped_at + out.last_commit_seq, 0);
	cr_assert_str_empty(out.error);
	cr_assert_eq(out.coverage.retained_transactions, 3);
	journal_close(h);
}

Test(history_replay, a_deadline_already_passed_stops_before_the_first_transaction)
{
	struct journal *h = journal_of(2, NULL);
	for (int mode = RERUN_TIME_WINDOW; mode <= RERUN_COMMITTED_HISTORY; mode++) {
		struct rerun_request req = request((enum rerun_mode)mode, unreachable);
		struct rerun_result out;
		char err[RERUN_ERROR_MAX] = "";
		cr_assert_eq(journal_rerun(h, &req, base_now_ns() - 1, &out, err, sizeof(err)), 0);
		cr_assert(out.is_partial);
		cr_assert_eq(out.stopped_at, 1);
		cr_assert(strstr(out.error, "deadline"), "%s", out.error);
	}
	journal_close(h);
}
