/*
 * test_decide.c — tr_decide over every combination of mode, fault phase, transaction state and
 * statement kind: the rules that hold whatever the mode (decide.h), each checked on the whole table,
 * and rows the contract spells out (../shared/reference/004_c44c290a4cd34a46.txt) checked one by one.
 */
#include "replay/decide.h"

#include <criterion/criterion.h>
#include <string.h>

#define EACH_CASE(m, p, t, k)                                                                                         \
	for (int m = 0; m < TR_MODE_COUNT; m++)                                                                       \
		for (int p = 0; p < TR_PHASE_COUNT; p++)                                                              \
			for (int t = 0; t < TR_TX_COUNT; t++)                                                         \
				for (int k = 0; k < TR_KIND_COUNT; k++)

static struct tr_decision decide(int m, int p, int t, int k)
{
	return tr_decide((enum tr_mode)m, (enum tr_phase)p, (enum tr_tx)t, (enum tr_kind)k);
}

static bool is(struct tr_decision d, enum tr_action action, const char *sqlstate)
{
	return d.action == action && (sqlstate ? d.sqlstate && strcmp(d.sqlstate, sqlstate) == 0 : d.sqlstate == NULL);
}

#define CASE_FMT "mode %s, phase %d, tx %d, kind %d: %s %s"
#define CASE_ARGS(m, p, t, k, d) tr_mode_names[m], p, t, k, tr_action_names[(d).action], (d).sqlstate ? (d).sqlstate : "-"

Test(decide, every_case_has_an_action_and_an_error_exactly_when_it_tells_one)
{
	int count = 0;
	EACH_CASE(m, p, t, k)
	{
		struct tr_decision d = decide(m, p, t, k);
		bool tells = d.action == TR_CLOSE || d.action == TR_FAIL || d.action == TR_FAIL_NEXT;
		cr_assert(d.action < TR_ACTION_COUNT, CASE_FMT, CASE_ARGS(m, p, t, k, d));
		cr_assert_eq(tells, d.sqlstate != NULL, CASE_FMT, CASE_ARGS(m, p, t, k, d));
		count++;
	}
	cr_assert_eq(count, TR_MODE_COUNT * TR_PHASE_COUNT * TR_TX_COUNT * TR_KIND_COUNT);
}

Test(decide, none_is_a_plain_pooler)
{
	EACH_CASE(m, p, t, k)
	{
		struct tr_decision d = decide(m, p, t, k);
		if (m == TR_MODE_NONE)
			cr_assert(is(d, TR_CLOSE, "57P01"), CASE_FMT, CASE_ARGS(m, p, t, k, d));
		else
			cr_assert(d.action != TR_CLOSE || strcmp(d.sqlstate, "08006") == 0, CASE_FMT, CASE_ARGS(m, p, t, k, d));
	}
}

Test(decide, only_a_message_cut_at_the_client_or_a_copy_closes_the_session)
{
	EACH_CASE(m, p, t, k)
	{
		struct tr_decision d = decide(m, p, t, k);
		bool must_close = p == TR_PHASE_TORN || p == TR_PHASE_COPY || (p != TR_PHASE_IDLE && k == TR_KIND_COPY);
		if (m != TR_MODE_NONE)
			cr_assert_eq(must_close, is(d, TR_CLOSE, "08006"), CASE_FMT, CASE_ARGS(m, p, t, k, d));
	}
}

Test(decide, a_partly_answered_statement_gets_its_one_error_and_nothing_runs_again)
{
	EACH_CASE(m, p, t, k)
	{
		struct tr_decision d = decide(m, p, t, k);
		if (m == TR_MODE_NONE || p != TR_PHASE_PARTIAL || k == TR_KIND_COPY || k == TR_KIND_NONE)
			continue;
		const char *want = k == TR_KIND_COMMIT || k == TR_KIND_ROLLBACK ? "08007"
				   : t == TR_TX_FAILED	  ? "25P02"
				   : t != TR_TX_NONE	  ? "57P01"
							  : "08007";
		cr_assert(is(d, TR_FAIL, want), "no second result after the first: " CASE_FMT, CASE_ARGS(m, p, t, k, d));
	}
}

Test(decide, a_delivered_commit_is_never_run_again)
{
	EACH_CASE(m, p, t, k)
	{
		struct tr_decision d = decide(m, p, t, k);
		if (m != TR_MODE_NONE && p == TR_PHASE_SENT && k == TR_KIND_COMMIT)
			cr_assert(is(d, TR_FAIL, "08007"), CASE_FMT, CASE_ARGS(m, p, t, k, d));
	}
}

Test(decide, what_may_have_had_an_effect_never_runs_twice)
{
	EACH_CASE(m, p, t, k)
	{
		struct tr_decision d = decide(m, p, t, k);
		if (p != TR_PHASE_SENT || (d.action != TR_REEXECUTE && d.action != TR_REPLAY))
			continue;
		/* Delivered and run again: only what has no effect, or what died with its transaction. */
		bool died_with_tx = t != TR_TX_NONE && k != TR_KIND_COMMIT && k != TR_KIND_READ_OPAQUE;
		bool harmless = k == TR_KIND_CONTROL || k == TR_KIND_ROLLBACK || k == TR_KIND_READ_SAFE;
		cr_assert(died_with_tx || harmless, CASE_FMT, CASE_ARGS(m, p, t, k, d));
		cr_assert(k != TR_KIND_READ_OPAQUE && k != TR_KIND_COMMIT, CASE_FMT, CASE_ARGS(m, p, t, k, d));
		cr_assert(t != TR_TX_NONE || k != TR_KIND_WRITE, CASE_FMT, CASE_ARGS(m, p, t, k, d));
		cr_assert(m != TR_MODE_SESSION || k != TR_KIND_READ_SAFE || t != TR_TX_NONE,
			  "session mode re-runs no delivered read: " CASE_FMT, CASE_ARGS(m, p, t, k, d));
	}
}

Test(decide, only_the_modes_that_replay_replay_and_only_what_may_be_replayed)
{
	EACH_CASE(m, p, t, k)
	{
		struct tr_decision d = decide(m, p, t, k);
		if (d.action != TR_REPLAY)
			continue;
		cr_assert(m == TR_MODE_SELECT || m == TR_MODE_TRANSACTION, CASE_FMT, CASE_ARGS(m, p, t, k, d));
		cr_assert(t == TR_TX_READ_ONLY || t == TR_TX_WRITTEN, "snapshot-pinned, over a bound or failed: "
			  CASE_FMT, CASE_ARGS(m, p, t, k, d));
		cr_assert(m == TR_MODE_TRANSACTION || t == TR_TX_READ_ONLY, "select mode replays read-only ones: "
			  CASE_FMT, CASE_ARGS(m, p, t, k, d));
		cr_assert(m == TR_MODE_TRANSACTION || p != TR_PHASE_SENT || k != TR_KIND_WRITE, CASE_FMT,
			  CASE_ARGS(m, p, t, k, d));
	}
}

Test(decide, one_error_then_the_transaction_is_aborted)
{
	/* In a transaction, a statement that is not re-run fails once (the caller aborts the transaction);
	 * outside one, nothing undelivered fails. */
	EACH_CASE(m, p, t, k)
	{
		struct tr_decision d = decide(m, p, t, k);
		if (m == TR_MODE_NONE || p == TR_PHASE_PARTIAL || p == TR_PHASE_TORN || p == TR_PHASE_COPY ||
		    k == TR_KIND_COPY)
			continue;
		if (t == TR_TX_NONE && (p == TR_PHASE_NOT_SENT || p == TR_PHASE_IDLE || k == TR_KIND_NONE))
			cr_assert(d.action == TR_REEXECUTE || d.action == TR_REHOME, CASE_FMT, CASE_ARGS(m, p, t, k, d));
		if (d.action == TR_FAIL_NEXT)
			cr_assert(t != TR_TX_NONE && (p == TR_PHASE_IDLE || k == TR_KIND_NONE), CASE_FMT, CASE_ARGS(m, p, t, k, d));
	}
}

Test(decide, rows_the_contract_spells_out)
{
	static const struct {
		enum tr_mode mode;
		enum tr_phase phase;
		enum tr_tx tx;
		enum tr_kind kind;
		enum tr_action action;
		const char *sqlstate;
	} rows[] = {
		/* session: undelivered autocommit work re-runs; a delivered one's outcome is unknown */
		{TR_MODE_SESSION, TR_PHASE_NOT_SENT, TR_TX_NONE, TR_KIND_WRITE, TR_REEXECUTE, NULL},
		{TR_MODE_SESSION, TR_PHASE_SENT, TR_TX_NONE, TR_KIND_WRITE, TR_FAIL, "08007"},
		{TR_MODE_SESSION, TR_PHASE_SENT, TR_TX_NONE, TR_KIND_READ_SAFE, TR_FAIL, "08007"},
		{TR_MODE_SESSION, TR_PHASE_IDLE, TR_TX_NONE, TR_KIND_NONE, TR_REHOME, NULL},
		{TR_MODE_SESSION, TR_PHASE_NOT_SENT, TR_TX_WRITTEN, TR_KIND_WRITE, TR_FAIL, "57P01"},
		{TR_MODE_SESSION, TR_PHASE_IDLE, TR_TX_READ_ONLY, TR_KIND_NONE, TR_FAIL_NEXT, "57P01"},
		/* select: a side-effect-free read re-runs, an opaque one never; read-only transactions replay */
		{TR_MODE_SELECT, TR_PHASE_SENT, TR_TX_NONE, TR_KIND_READ_SAFE, TR_REEXECUTE, NULL},
		{TR_MODE_SELECT, TR_PHASE_SENT, TR_TX_NONE, TR_KIND_READ_OPAQUE, TR_FAIL, "08007"},
		{TR_MODE_SELECT, TR_PHASE_SENT, TR_TX_READ_ONLY, TR_KIND_READ_SAFE, TR_REPLAY, NULL},
		{TR_MODE_SELECT, TR_PHASE_SENT, TR_TX_WRITTEN, TR_KIND_READ_SAFE, TR_FAIL, "57P01"},
		{TR_MODE_SELECT, TR_PHASE_SENT, TR_TX_READ_ONLY, TR_KIND_WRITE, TR_FAIL, "57P01"},
		/* transaction: an uncommitted transaction replays, with the statement in flight */
		{TR_MODE_TRANSACTION, TR_PHASE_SENT, TR_TX_WRITTEN, TR_KIND_WRITE, TR_REPLAY, NULL},
		{TR_MODE_TRANSACTION, TR_PHASE_IDLE, TR_TX_WRITTEN, TR_KIND_NONE, TR_REPLAY, NULL},
		{TR_MODE_TRANSACTION, TR_PHASE_NOT_SENT, TR_TX_WRITTEN, TR_KIND_COMMIT, TR_REPLAY, NULL},
		/* always: a COMMIT of unknown outcome, snapshots, copies, partial answers */
		{TR_MODE_TRANSACTION, TR_PHASE_SENT, TR_TX_WRITTEN, TR_KIND_COMMIT, TR_FAIL, "08007"},
		{TR_MODE_TRANSACTION, TR_PHASE_SENT, TR_TX_SNAPSHOT, TR_KIND_WRITE, TR_FAIL, "57P01"},
		{TR_MODE_TRANSACTION, TR_PHASE_SENT, TR_TX_NOT_REPLAYABLE, TR_KIND_READ_SAFE, TR_FAIL, "57P01"},
		{TR_MODE_TRANSACTION, TR_PHASE_COPY, TR_TX_NONE, TR_KIND_COPY, TR_CLOSE, "08006"},
		{TR_MODE_TRANSACTION, TR_PHASE_TORN, TR_TX_NONE, TR_KIND_READ_SAFE, TR_CLOSE, "08006"},
		{TR_MODE_TRANSACTION, TR_PHASE_PARTIAL, TR_TX_NONE, TR_KIND_READ_SAFE, TR_FAIL, "08007"},
		{TR_MODE_SELECT, TR_PHASE_PARTIAL, TR_TX_NONE, TR_KIND_WRITE, TR_FAIL, "08007"},
		{TR_MODE_TRANSACTION, TR_PHASE_PARTIAL, TR_TX_WRITTEN, TR_KIND_WRITE, TR_FAIL, "57P01"},
		{TR_MODE_NONE, TR_PHASE_NOT_SENT, TR_TX_NONE, TR_KIND_READ_SAFE, TR_CLOSE, "57P01"},
		/* a failed transaction: ROLLBACK ends it anywhere; anything else is 25P02 as it was */
		{TR_MODE_TRANSACTION, TR_PHASE_SENT, TR_TX_FAILED, TR_KIND_ROLLBACK, TR_REEXECUTE, NULL},
		{TR_MODE_TRANSACTION, TR_PHASE_SENT, TR_TX_FAILED, TR_KIND_READ_SAFE, TR_FAIL, "25P02"},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct tr_decision d = tr_decide(rows[i].mode, rows[i].phase, rows[i].tx, rows[i].kind);
		cr_assert(is(d, rows[i].action, rows[i].sqlstate), "row %zu: " CASE_FMT, i,
			  CASE_ARGS(rows[i].mode, rows[i].phase, rows[i].tx, rows[i].kind, d));
	}
}
