/*
 * journal_rerun.h — operator replay of committed history (POST /api/replay; issue 13;
 * ../shared/reference/004_c44c290a4cd34a46.txt, "Operator replay"): the transactions journal.h kept, run
 * again on a target database through libpq.
 *   committed_history  each transaction in commit order in its own BEGIN … COMMIT, its statements as they
 *                      were sent (a Query's text, or a Parse's text with the Bind's parameter values in their
 *                      captured formats); a transaction of one statement runs alone, in the implicit
 *                      transaction PostgreSQL gives it (the same all or nothing, and what VACUUM and the other
 *                      statements refused inside a block need). The first failure rolls that transaction back
 *                      and stops the run, so the target holds exactly the transactions up to last_commit_seq. A
 *                      snapshot holding an incomplete transaction is refused before anything runs.
 *   time_window        every statement of the window's transactions in commit order, each on its own
 *                      (autocommit); a failure is counted and the run goes on. An incomplete transaction's
 *                      statements run too, best effort (its COPY fails and is counted).
 * Both stop at the deadline, or when the caller's cancel flag is set (tern is stopping).
 *
 * Threads: the caller's, which blocks in libpq for the whole run (the admin HTTP thread; never a worker).
 * Ownership: the request's strings are the caller's; the snapshot's references are dropped before return.
 * Never: touches a session or a worker, or writes to the journal beyond counting the run.
 */
#ifndef TERN_JOURNAL_RERUN_H
#define TERN_JOURNAL_RERUN_H

#include "journal.h"

/* The answer's error text: a server's message and the commit_seq it concerns. */
#define RERUN_ERROR_MAX 512u

enum rerun_mode {
	RERUN_TIME_WINDOW = 0, /* the reference's default */
	RERUN_COMMITTED_HISTORY,
};

struct rerun_request {
	enum rerun_mode mode;
	const char *target;        /* a libpq conninfo string or URI */
	uint64_t after_commit_seq; /* only transactions after it (0: from the oldest kept) */
	uint64_t from_us, to_us;   /* committed_at_us within [from_us, to_us]; 0 and UINT64_MAX: all */
	const bool *is_cancelled;  /* atomic, may be NULL: set by another thread to stop between statements */
};

struct rerun_result {
	uint64_t applied; /* committed_history: transactions committed on the target; time_window: statements run */
	uint64_t failed;  /* time_window: statements that failed (committed_history: 0 or 1) */
	bool is_partial;  /* something in the snapshot did not apply: a failure, the deadline, or the cancel flag */
	uint64_t stopped_at;      /* the commit_seq the run stopped at without applying it (0: it did not stop) */
	uint64_t last_commit_seq; /* the last transaction applied (committed_history: pass it as after_commit_seq to
				     resume; when none applied, the request's after_commit_seq) */
	char error[RERUN_ERROR_MAX]; /* "" when none: the first failure, or why the run stopped */
	struct journal_coverage coverage;
};

/* Runs `req` against the journal `j` until monotonic deadline_ns (base_now_ns). 0: the run happened and *out
 * says how far it went (a target that refused the connection, a failed statement and the deadline are
 * all results, not errors). -EPERM: committed_history and the snapshot holds an incomplete transaction:
 * nothing ran, out->stopped_at is its commit_seq and err names it. -ENOMEM: no snapshot. Counted as one
 * replay run (journal_count_rerun) either way. */
TERN_MUST_USE int journal_rerun(struct journal *j, const struct rerun_request *req, uint64_t deadline_ns,
				     struct rerun_result *out, char *err, size_t err_size);

/* An RFC 3339 date-time ("2024-05-01T12:00:00Z", "2024-05-01t14:00:00.25+02:00": the request's from and to)
 * as microseconds since the epoch (digits past the microsecond dropped). 0, or -EINVAL: another form, a
 * field out of range (February 30th too), a time before 1970. */
TERN_MUST_USE int rerun_parse_time(const char *text, uint64_t *out_us);

#endif
