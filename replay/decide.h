/*
 * decide.h — Transaction Replay's decision (issue 12; ../shared/reference/004_c44c290a4cd34a46.txt is
 * the contract): what becomes of a session whose primary connection was lost, from four facts known at
 * the fault — the mode (tr_mode), how far the statement in flight got (the fault phase), the state of
 * the client's transaction, and what kind of statement was in flight. tr_decide is a pure function,
 * tested over every combination (tests/unit/test_decide.c).
 *
 * What always holds, whatever the mode: a COMMIT whose outcome is unknown is never retried (08007); a
 * statement part of whose answer reached the client is never run again, nor its transaction replayed (a
 * second result would follow the first): it gets its one error after what the client saw, and only a
 * message cut in the middle at the client closes the session (08006); a COPY in progress closes it
 * (08006); a transaction under REPEATABLE READ or SERIALIZABLE, over a replay bound, or already failed
 * is never replayed; one error, then the transaction is aborted as PostgreSQL would (25P02 until
 * ROLLBACK). The caller refuses a failover outright (08006) when the session's SET state is over
 * tr_max_session_set_statements, before asking.
 *
 * Threads: any. Never: allocates, or reads anything but its arguments.
 */
#ifndef TERN_REPLAY_DECIDE_H
#define TERN_REPLAY_DECIDE_H

#include "base.h"

/* [replay] tr_mode. */
enum tr_mode {
	TR_MODE_NONE = 0,    /* a plain pooler: 57P01, and the connection closes */
	TR_MODE_SESSION,     /* the session moves, SET state restored; undelivered autocommit work re-runs */
	TR_MODE_SELECT,      /* ... and an interrupted side-effect-free read re-runs; read-only transactions replay */
	TR_MODE_TRANSACTION, /* ... and an uncommitted transaction replays from BEGIN, verified */
	TR_MODE_COUNT
};

/* How far the statement in flight got when the connection was lost. */
enum tr_phase {
	TR_PHASE_IDLE = 0,  /* nothing in flight: between statements */
	TR_PHASE_NOT_SENT,  /* queued, never delivered to the server */
	TR_PHASE_SENT,      /* delivered, and no byte of its answer reached the client: its outcome is unknown */
	TR_PHASE_PARTIAL,   /* part of its answer reached the client, whole messages (ParseComplete, rows, ...) */
	TR_PHASE_TORN,      /* ... ending inside a message: the client holds part of a frame */
	TR_PHASE_COPY,      /* a COPY was in progress */
	TR_PHASE_COUNT
};

/* The client's transaction at the fault. */
enum tr_tx {
	TR_TX_NONE = 0,        /* autocommit: no transaction open */
	TR_TX_READ_ONLY,       /* open, and nothing in it may have written so far */
	TR_TX_WRITTEN,         /* open, and something in it may have written */
	TR_TX_SNAPSHOT,        /* open under REPEATABLE READ or SERIALIZABLE: no other server has its snapshot */
	TR_TX_NOT_REPLAYABLE,  /* open, over a tr_max_replay_* bound, or a response over tr_max_observation_bytes */
	TR_TX_FAILED,          /* open and aborted ('E'): only ROLLBACK is answered */
	TR_TX_COUNT
};

/* The statement in flight (TR_PHASE_IDLE: none, whatever is given). */
enum tr_kind {
	TR_KIND_NONE = 0,    /* nothing in flight */
	TR_KIND_READ_SAFE,   /* a read calling only side-effect-free functions (built-ins, tr_read_functions) */
	TR_KIND_READ_OPAQUE, /* a read calling anything else (a user function, nextval, set_config, a quoted call) */
	TR_KIND_WRITE,       /* may change data, or anything not known */
	TR_KIND_CONTROL,     /* BEGIN, SAVEPOINT, RELEASE, ROLLBACK TO, a SET: no durable effect, the same run again */
	TR_KIND_ROLLBACK,    /* ROLLBACK, ABORT: the transaction ends whatever became of it */
	TR_KIND_COMMIT,      /* COMMIT, END, PREPARE TRANSACTION, COMMIT PREPARED, or a text with one of them */
	TR_KIND_COPY,        /* COPY */
	TR_KIND_COUNT
};

/* What becomes of the session. */
enum tr_action {
	TR_CLOSE = 0,     /* the session ends with `sqlstate` */
	TR_REHOME,        /* it moves to the new primary; nothing to tell the client */
	TR_REEXECUTE,     /* it moves, and the statement in flight runs there again */
	TR_REPLAY,        /* it moves, the transaction replays from BEGIN (verified), then the statement in flight */
	TR_FAIL,          /* it moves; the statement in flight gets one error (`sqlstate`), its transaction aborted */
	TR_FAIL_NEXT,     /* it moves; the transaction is lost: the client's next statement gets one error */
	TR_ACTION_COUNT
};

struct tr_decision {
	enum tr_action action;
	const char *sqlstate; /* TR_CLOSE, TR_FAIL, TR_FAIL_NEXT; NULL otherwise */
};

struct tr_decision tr_decide(enum tr_mode mode, enum tr_phase phase, enum tr_tx tx, enum tr_kind kind);

/* Names, for logs, metrics and tests. */
extern const char *const tr_mode_names[TR_MODE_COUNT];
extern const char *const tr_action_names[TR_ACTION_COUNT];

#endif
