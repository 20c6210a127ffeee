/* Transaction Replay's decision table (see decide.h). The rules, in the order they are asked:
 *   1. tr_mode = none: 57P01, closed.
 *   2. part of a message reached the client (a torn frame), or a COPY was under way: 08006, closed.
 *   3. nothing in flight: outside a transaction the session just moves; inside one, the transaction
 *      replays where the mode allows it, else it is lost and the client's next statement says so.
 *   4. a COMMIT delivered is never run again (08007); one never delivered is as any statement.
 *   4b. whole messages of the answer reached the client: nothing runs again (the client would see a
 *      second result after the first). Its one error follows what it saw: 08007 for a ROLLBACK (the
 *      transaction is over either way), 25P02 in a failed transaction, 57P01 in a live one (which is
 *      lost), 08007 outside one (its outcome is unknown).
 *   5. a ROLLBACK ends the transaction either way: it runs again on the new primary.
 *   6. a transaction already failed answers its statements with 25P02 (it is gone: no replay).
 *   7. never delivered: outside a transaction it runs there once; inside, the transaction replays
 *      where the mode allows it, else the statement fails and the transaction is aborted.
 *   8. delivered, outcome unknown: outside a transaction only what has no effect runs again (a
 *      control statement; a side-effect-free read from select mode up), the rest is 08007; inside
 *      one nothing was committed, so a replayable transaction replays (select mode: a read-only one,
 *      for a read), an opaque read is never run twice (08007), and the rest fails (57P01). */
#include "decide.h"

const char *const tr_mode_names[TR_MODE_COUNT] = {"none", "session", "select", "transaction"};
const char *const tr_action_names[TR_ACTION_COUNT] = {"close", "rehome", "reexecute", "replay", "fail", "fail_next"};

static struct tr_decision tr_make(enum tr_action action, const char *sqlstate)
{
	return (struct tr_decision){.action = action, .sqlstate = sqlstate};
}

/* The mode replays this transaction from BEGIN. */
static bool tr_may_replay(enum tr_mode mode, enum tr_tx tx)
{
	if (mode == TR_MODE_TRANSACTION)
		return tx == TR_TX_READ_ONLY || tx == TR_TX_WRITTEN;
	return mode == TR_MODE_SELECT && tx == TR_TX_READ_ONLY;
}

struct tr_decision tr_decide(enum tr_mode mode, enum tr_phase phase, enum tr_tx tx, enum tr_kind kind)
{
	TERN_ASSERT(mode < TR_MODE_COUNT && phase < TR_PHASE_COUNT && tx < TR_TX_COUNT && kind < TR_KIND_COUNT);
	if (mode == TR_MODE_NONE)
		return tr_make(TR_CLOSE, "57P01");
	if (phase == TR_PHASE_TORN || phase == TR_PHASE_COPY || (phase != TR_PHASE_IDLE && kind == TR_KIND_COPY))
		return tr_make(TR_CLOSE, "08006");
	bool in_tx = tx != TR_TX_NONE;
	bool may_replay = tr_may_replay(mode, tx);
	if (phase == TR_PHASE_IDLE || kind == TR_KIND_NONE) {
		if (!in_tx)
			return tr_make(TR_REHOME, NULL);
		return may_replay ? tr_make(TR_REPLAY, NULL) : tr_make(TR_FAIL_NEXT, "57P01");
	}
	if (kind == TR_KIND_COMMIT && (phase == TR_PHASE_SENT || phase == TR_PHASE_PARTIAL))
		return tr_make(TR_FAIL, "08007");
	if (kind == TR_KIND_ROLLBACK && phase == TR_PHASE_PARTIAL)
		return tr_make(TR_FAIL, "08007"); /* its answer began (its CommandComplete, say): over either way */
	if (phase == TR_PHASE_PARTIAL)
		return tr_make(TR_FAIL, tx == TR_TX_FAILED ? "25P02" : in_tx ? "57P01" : "08007");
	if (kind == TR_KIND_ROLLBACK)
		return tr_make(TR_REEXECUTE, NULL);
	if (tx == TR_TX_FAILED)
		return tr_make(TR_FAIL, "25P02");
	if (phase == TR_PHASE_NOT_SENT) {
		if (!in_tx)
			return tr_make(TR_REEXECUTE, NULL);
		return may_replay ? tr_make(TR_REPLAY, NULL) : tr_make(TR_FAIL, "57P01");
	}
	/* Delivered, outcome unknown. */
	if (!in_tx) {
		bool is_harmless = kind == TR_KIND_CONTROL || (kind == TR_KIND_READ_SAFE && mode >= TR_MODE_SELECT);
		return is_harmless ? tr_make(TR_REEXECUTE, NULL) : tr_make(TR_FAIL, "08007");
	}
	if (kind == TR_KIND_READ_OPAQUE)
		return tr_make(TR_FAIL, "08007"); /* its side effects are outside the transaction: never twice */
	if (may_replay && (mode == TR_MODE_TRANSACTION || kind != TR_KIND_WRITE))
		return tr_make(TR_REPLAY, NULL);
	return tr_make(TR_FAIL, "57P01");
}
