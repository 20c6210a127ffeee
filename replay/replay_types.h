/*
 * replay_types.h — Transaction Replay's and the journal's state per session (DESIGN §6): what
 * observer_replay.c records of the client's requests on the primary, the SET state observer_sets.c keeps
 * for a restore, the recovery recover.c runs, and what observer_journal.c captures of the transaction. The
 * session holds a pointer to each, laid out with it (session_parts.session_state_bytes; main's).
 *
 * Threads: the session's worker. Ownership: written only by replay/'s files (test_layout.c checks); the
 * buffers are freed by the observers' destroy hooks. Never: read by core, which asks through
 * session_parts.
 */
#ifndef TERN_REPLAY_TYPES_H
#define TERN_REPLAY_TYPES_H

#include "core/session.h"
#include "decide.h"
#include "restore_set.h"

/* Transaction Replay (DESIGN §6): what observer_replay.c records of the client's requests on the primary's
 * leg, and the recovery recover.c runs when that leg's connection is lost. */
enum replay_aborted {
	REPLAY_TX_LIVE = 0,  /* the client's transaction, if any, is on a server */
	REPLAY_TX_LOST_NEXT, /* it was lost between statements: the next one gets fail_sqlstate, then 25P02 */
	REPLAY_TX_ABORTED,   /* it was lost and the client told: 25P02 until ROLLBACK (or COMMIT) ends it */
};
/* An autocommit request whose unnamed statement tern ran by its server name (server_side_prepare) and whose
 * plan PostgreSQL found stale (0A000 "cached plan must not change result type"): the client is shown
 * nothing of that answer, and the request runs again as it sent it, prepared anew. */
enum replay_stale_plan {
	REPLAY_STALE_NONE = 0,
	REPLAY_STALE_DUE, /* the error was hidden: its ReadyForQuery is hidden too, then the request runs again */
	REPLAY_STALE_RERUN, /* the request runs again (once: a second stale plan is the client's) */
};
/* The recovery journal's capture of the primary's transaction (observer_journal.c). Texts, Bind tails and
 * tags live in `arena`; the entries below point into it. */
struct journal_capture {
	uint32_t text_at, text_len, tail_at, tail_len; /* tail: an extended statement's Bind after its name */
	uint32_t types_at, types_len; /* ... and its Parse after its text (the parameter types) */
	uint32_t tag_at, tag_len;
	uint8_t kind; /* enum journal_statement_kind, with observer_journal.c's flags; 0: not kept */
	bool is_multi; /* a Query of several statements: kept once, its transaction incomplete */
};
struct journal_savepoint {
	char name[64];
	uint32_t count; /* statements kept before it */
};
struct session_journal {
	struct base_bytes arena;
	struct journal_capture *kept; /* the transaction's statements that ran, in order */
	uint32_t kept_count, kept_cap;
	struct journal_capture *pending; /* sent, their completion not yet read, oldest first */
	uint32_t pending_head, pending_count, pending_cap;
	struct journal_capture unnamed, portal; /* the unnamed statement's text; the unnamed portal's binding */
	struct journal_savepoint *savepoints;
	uint32_t savepoint_count, savepoint_cap;
	bool is_explicit;   /* a BEGIN ran: only a COMMIT commits it */
	bool is_commit;     /* ... and the server said COMMIT */
	bool is_failed;     /* an error, a ROLLBACK or PREPARE TRANSACTION: it does not enter committed history */
	bool is_incomplete; /* kept, but committed-history replay refuses it (COPY, EXECUTE, a long statement) */
	uint8_t unread;     /* a Parse or Bind noted at its type, not yet read (a long one never is) */
	char client_addr[64]; /* "" until its first commit */
};

/* The session's SET state for Transaction Replay (observer_sets.c): what the client's simple-protocol SETs
 * left, restored on the next primary. */
struct session_sets {
	struct restore_set set;
	/* The Query whose answer is being matched to its statements, one CommandComplete each: the
	 * ReadyForQuerys owed ahead of its answer, what sql_parse_set said of each statement (is_blind: tern
	 * could not read them), and the next one to complete. */
	struct sets_statement {
		uint8_t kind;    /* enum sql_set_kind */
		char *name;      /* owned, with the statement after its NUL (NULL for SQL_SET_NONE) */
		char *statement;
	} *query;
	uint32_t query_count, query_next, query_ready_before;
	bool is_query_active, is_query_blind, is_query_failed;
	uint32_t queries_unread; /* Queries begun whose text was not read (too long) */
	/* The transaction on the primary, as its tags and ReadyForQuery tell: BEGIN seen, an error seen, a
	 * savepoint tern could not follow (its changes are then unsure at the commit), a ROLLBACK whose
	 * statement tern did not read (ROLLBACK TO or the end: the ReadyForQuery tells). */
	bool is_explicit, is_failed, is_blurred, is_rollback_unplaced;
	/* A change tern could not follow ran: the session cannot move with its state (08006). */
	bool is_unsure;
	bool is_over_cap; /* more distinct variables than tr_max_session_set_statements (counted once) */
	/* The restore: due on the primary's next connection (the session moved, or its primary changed since
	 * `server`, where the set was made), and under way (its hidden answer comes first). */
	bool is_restore_due, is_restoring, is_restore_failed;
	const struct pool_server *server;
};

struct session_replay {
	struct session *session; /* the owner (replay_place), for host->recover_waits */
	/* The client's requests on the primary's leg since it last owed the client nothing. */
	bool is_open;
	bool is_unloggable;   /* ... something of them tern cannot send again: a FunctionCall, a Close of a
			       * named statement, a name tern does not keep (observer_stmts off), a Bind of an
			       * unnamed statement parsed before */
	bool has_parse;       /* ... an unnamed Parse among them (what their Binds bind) */
	/* ... a Parse of a named statement: a transaction's step replays it (replay_log_parse), but the
	 * request cannot run again as the client sent it (the name is taken by then). */
	bool has_named_parse;
	bool has_tx_ended;    /* ... a ReadyForQuery among their answers said no transaction was open */
	uint8_t stale_plan;   /* enum replay_stale_plan: their run again after a stale plan (observer_replay) */
	uint32_t stale_len;   /* ... REPLAY_STALE_DUE: inflight's length at the error (more: the client sent on) */
	char tx_status;       /* the leg's transaction status before them: 'I', 'T', 'E' */
	uint32_t noted, logged; /* ... their messages, and those kept whole (a long one is not read) */
	uint64_t client_mark; /* the leg's to_client_bytes when they began: more means part of an answer went */
	uint64_t sent_mark;   /* where they begin in the leg's stream toward the server (sendq.sent_bytes_total) */
	struct base_bytes inflight; /* their Query messages, headers included */
	/* What the primary said ahead of the first row or completion of its answer (proto_be_is_preamble),
	 * and the replies tern made up among it, held until then: a loss before it leaves no byte at the
	 * client, so the statement may run again. */
	struct base_bytes preamble;
	/* While the held preamble is one run of the receive being scanned (its first row or completion mostly
	 * comes in the same receive): where it lies, so that it goes on by reference with what follows (one
	 * slice, no copy). Good while `feed` is the stream's feed_seq and `len` the preamble's length. */
	struct replay_preamble_ref {
		const struct proto_stream *stream;
		const uint8_t *at;
		uint32_t feed, len;
		uint16_t buffer_id;
	} preamble_ref;
	/* A recovery: the server whose connection was lost, until a primary takes the session's next request. */
	struct pool_server *lost_server;
	uint64_t lost_ns, deadline_ns; /* deadline: write_timeout_secs after the loss */
	bool is_waiting;               /* on host->recover_waits: its primary leg waits for a primary */
	struct base_list wait_link;
	uint8_t aborted;       /* enum replay_aborted */
	char fail_sqlstate[6]; /* REPLAY_TX_LOST_NEXT: what the next statement is told */
	bool is_skipping;      /* an extended-protocol batch tern failed: its messages are dropped to its Sync */
	bool is_batch_ending;  /* ... a batch that ends the lost transaction (a ROLLBACK, COMMIT or END) */
	bool is_batch_commit;  /* ... with a COMMIT (or END) */
	/* tr_mode select or transaction: the client's transaction on the primary, to replay it. Its requests
	 * (one Query each) in order, each with the digest of the answer the client was shown. */
	struct base_bytes tx_log;
	struct replay_step {
		uint32_t end;    /* where its Query ends in tx_log */
		uint64_t digest; /* XXH3 of the answer's bytes, ReadyForQuery included */
	} *steps;
	uint32_t step_count, step_cap;
	/* The client's named statements tx_log binds or describes (under their server names): prepared on the
	 * new primary, hidden, before the replay (a reference each). */
	struct stmt **tx_stmts;
	uint32_t tx_stmt_count, tx_stmt_cap;
	/* The client's named statements the transaction parsed itself: tx_log runs a Close and a Parse of the
	 * server name for each, and the replay leaves each Close's answer out of its digest (the client was
	 * never shown one): how many are still to come, and one held to see what follows it. */
	uint32_t tx_parsed, replay_closes_left;
	bool is_replay_close_held;
	bool is_tx_recorded;   /* the transaction open on the primary is in tx_log from its start */
	bool is_tx_unreplayable; /* ... but something of it cannot be replayed (an extended request, a long
				  * Query, a bound of [limits], an answer over tr_max_observation_bytes) */
	bool is_hashing;       /* the answer of the request in flight is being digested */
	struct XXH3_state_s *hash;
	uint64_t hashed_bytes;
	/* A replay under way on the new primary: the hidden answers still to verify, and what the client
	 * sent meanwhile (the statement in flight first), sent once the replay is verified. */
	bool is_replaying;
	bool is_replay_failed;
	uint32_t replay_next;   /* the step whose hidden answer comes next; step_count: the isolation check */
	uint32_t replay_messages, replay_read; /* hidden messages of the answer seen, and read (a long one is not) */
	uint32_t replay_skip;   /* hidden answers ahead of the replay's (what the other observers restored) */
	struct base_bytes held_back;
	uint32_t held_inflight; /* held_back's first bytes: the statement in flight at the loss (0: none) */
	struct session_sets sets;
};

#endif
