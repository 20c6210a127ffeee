/*
 * session.h — a client session: the client's socket, its login (startup, authentication, welcome), its
 * tracked state (parameters, search_path, named statements, pins), its server legs by role (leg.h: the
 * primary's while it runs a transaction, or for its whole life in session pooling), and the relay of
 * protocol messages both ways by reference.
 *
 * Threads: a session lives on the worker that accepted it and is touched only there; the pool may
 * hand it a connection from any thread, through the worker's mailbox. It sees its worker only as a
 * host (host.h), and the admin console only as a session_console handler.
 * Ownership: the session owns its client socket, its client queue and its legs (each with its queue
 * toward the server and, while attached, a pool connection). It is freed by the worker only when none
 * of its ops or its legs' is armed. Every session ends through session_end with one reason (see
 * reasons.h); a lost server connection goes through one decision (session_decide_lost) first.
 * Never: calls the worker, the admin console or the parts above it directly (session.c, session_events.c):
 * the worker is a host, the console a session_console, and the login, the relay, routing and Transaction
 * Replay are reached through session_parts alone.
 */
#ifndef TERN_SESSION_H
#define TERN_SESSION_H

#include "host.h"
#include "leg.h"
#include "params.h"
#include "proto.h"
#include "reasons.h"
#include "sendq.h"
#include "shadow.h"
#include "stmts.h"

#include "replay/decide.h"
#include "replay/restore_set.h"

struct scram_server;
struct auth_lookup;
struct auth_user;
struct database_entry;
struct session_tls;
struct tls_context;

/* A client that waits for a server may queue only this much: parked clients must not take the buffers
 * that the transactions they wait for need to finish. */
#define SESSION_QUEUE_PARKED_BYTES (32u * 1024u)

enum session_phase {
	SESSION_STARTUP = 1, /* reading the startup packet (or an SSLRequest) */
	SESSION_AUTH,        /* an authentication exchange is under way */
	SESSION_LOGIN_WAIT,  /* authenticated, waiting for a server connection to welcome with */
	SESSION_READY,       /* relaying */
	SESSION_ADMIN,       /* the admin console: tern answers the queries itself */
	SESSION_CLOSING,     /* ending: the client gets no more bytes; waiting for ops to finish */
};

/* Transaction pooling: a client that ran LISTEN keeps its server connection (its notifications arrive
 * there) until UNLISTEN * or DISCARD ALL, and one that ran SQL PREPARE keeps it (EXECUTE finds the
 * statement only there) until DEALLOCATE ALL or DISCARD ALL; at its exit that connection is closed.
 * Kept by observer_pins.c. */
struct session_pins {
	bool is_listening;
	bool is_unlisten_all_sent; /* a query starting with UNLISTEN * is in flight */
	bool is_sql_prepared;
	bool is_holding; /* session pooling: a temporary table, cursor WITH HOLD or advisory lock, maybe */
	/* Session pooling under Transaction Replay: the channels its autocommit LISTENs left (each name as
	 * PostgreSQL folded it, then NUL), listened to again on the connection a move brings. */
	struct base_bytes channels;
	uint8_t listen_pending;  /* enum sql_listen_kind: the LISTEN or UNLISTEN in flight (listen_name) */
	bool is_listen_done;     /* ... its CommandComplete came */
	bool is_listen_unsure;   /* a LISTEN or UNLISTEN not followed: the session cannot move */
	char listen_name[64];
};

/* What SHOW STATS counts for one session, kept by its worker (plain increments, no atomics): added to
 * the worker's per-database totals when the session is freed, read from the live session when asked.
 * A server assignment is one transaction in transaction pooling (the server goes back when the
 * transaction ends); in session pooling it spans the session. */
struct session_stats {
	uint64_t xact_count;  /* server assignments that ended, with at least one ReadyForQuery */
	uint64_t xact_ns;     /* from each assignment to its last ReadyForQuery */
	uint64_t query_count; /* ReadyForQuery replies to the client's own requests */
	uint64_t query_ns;    /* from a request to the ReadyForQuery that leaves nothing pending */
	uint64_t wait_ns;     /* waiting for a server, in the pool or behind PAUSE */
	uint64_t assigned_ns; /* when the current assignment began; 0 when none is open */
	uint32_t slot;        /* the worker's per-database row + 1; 0 until looked up */
	uint64_t started_ns;  /* when the client connected (SHOW CLIENTS, client_login_timeout) */
};

/* The client's transport when it is not the plain socket: TLS (session_tls.c, set by session_tls_start). */
struct session_transport {
	/* Bytes received from the client socket (ciphertext): the transport hands the plaintext on. */
	void (*on_received)(struct session *s, const uint8_t *data, uint32_t len);
	/* Sends what the client queue holds now, then close_notify once the session has ended. */
	void (*flush)(struct session *s);
	/* True while bytes are queued or in flight to the client; while its send is in flight. */
	bool (*is_sending)(const struct session *s);
	bool (*is_armed)(const struct session *s);
	void (*destroy)(struct session *s);
};

/* What works for the session from above it: the login and the relay with its observers. main puts
 * session_relay_parts in the runtime; the session calls up only through here, so it depends on none
 * of them. */
struct session_parts {
	/* Client bytes before the welcome (startup, TLS negotiation, authentication). */
	void (*on_login_bytes)(struct session *s, const uint8_t *data, uint32_t len);
	/* Client bytes after it (SESSION_READY), in receive buffer buffer_id or RING_NO_BUFFER. */
	void (*on_client_chunk)(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len);
	/* Routing's: client bytes it held, to leg (is_routed: a query or batch routing placed already). */
	void (*feed)(struct session *s, struct leg *leg, bool is_routed, const uint8_t *data, uint32_t len);
	/* leg_ops.on_bytes: what the server sent. */
	int (*on_server_bytes)(struct leg *leg, uint16_t buffer_id, const uint8_t *data, uint32_t len);
	/* leg got a connection: the client's state is restored on it, then the queued bytes go. */
	void (*attach)(struct session *s, struct leg *leg, struct pool_conn *conn);
	/* leg is idle and about to go back: true when something was queued first (the release waits). */
	bool (*before_release)(struct session *s, struct leg *leg);
	/* The session is freed: what the parts keep goes. */
	void (*deinit)(struct session *s);
	/* Routing (route.c), at a leg's progress, its lost connection (true: routing re-runs its read; the
	 * session goes on), and the session's end. */
	void (*leg_progress)(struct session *s, struct leg *leg);
	bool (*leg_lost)(struct session *s, struct leg *leg);
	void (*ending)(struct session *s);
	/* Routing's: a reply tern made up for the client's leg while it guards that leg's answer. */
	void (*hold_reply)(struct session *s, const void *data, uint32_t len);
	/* Transaction Replay's (observer_replay.c): a reply tern made up while it holds the start of an answer. */
	void (*preamble_reply)(struct session *s, const void *data, uint32_t len);
	/* Transaction Replay's (recover.h): the decision about a lost or refused primary connection, the
	 * recovery it starts, and the gate a primary leg passes before it asks the pool. */
	struct session_lost_decision (*decide_lost)(const struct session *s, const struct leg *leg,
						    enum leg_fault fault);
	void (*recover)(struct session *s, struct leg *leg, const struct session_lost_decision *d);
	bool (*awaits_primary)(struct session *s, struct leg *leg);
	/* ... and, once a second (session_check_timeouts), the recovery's one deadline: true when it ended
	 * the session. */
	bool (*check_deadline)(struct session *s, uint64_t now_ns);
};
extern const struct session_parts session_relay_parts;

/* What observer_digest.c times: a simple-protocol Query (fingerprint 0: none), or the Executes of
 * extended-protocol batches, in the order their CommandComplete messages come. */
#define SESSION_DIGEST_EXECUTES 8u
struct session_digest {
	uint64_t fingerprint;
	uint64_t started_ns;
	uint64_t rows;
	uint64_t unnamed; /* the unnamed statement's fingerprint, from its last Parse */
	uint64_t bound;   /* the statement's of the last Bind */
	uint64_t executes[SESSION_DIGEST_EXECUTES]; /* sent, not yet complete, oldest at execute_head */
	uint32_t execute_head, execute_count;
	uint64_t mark_ns; /* when the oldest of them began: the first Execute, or the last one's completion */
};

/* [shadow] sampling (shadow.h): the read observer_shadow.c picked, on its leg, while its answer comes. */
struct session_shadow {
	const struct leg *leg; /* NULL: no read sampled now */
	char *text;            /* the Query's text (malloc'd while sampling) */
	uint32_t len;
	uint32_t rows_due;     /* DataRows the server sent, and those read (a longer one is not read) */
	uint32_t rows_read;
	bool is_failed;        /* an error, or a row not read: not compared */
	uint64_t seed;         /* the session's own random numbers (xorshift) */
	struct shadow_rows seen;
};

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

/* The client's traffic as routing steers it (routing/route*.c write it; the relay reads it): the leg its
 * messages go to now (NULL: the primary's), and its bytes that wait while routing holds them. */
struct session_steer {
	struct leg *leg;
	struct base_bytes backlog;
};

/* A protocol 3.2 client's cancel key: 32 random bytes, as PostgreSQL 18 gives (the pid names the worker). */
#define SESSION_CANCEL_KEY_LEN 32u
/* Protocol 3.0's key is 4 bytes. */
#define SESSION_CANCEL_KEY_LEN_3_0 4u

/* What only the login needs (session_login.c; the admin console reads buf and len). */
struct session_login {
	uint8_t *buf; /* startup and auth messages, assembled (the admin console's queries) */
	uint32_t len;
	uint32_t cap;
	/* Until the password is checked, the startup packet stays at the front of buf (kept bytes): the
	 * pool key is made from it only for a client that authenticated. */
	uint32_t kept;
	bool is_startup_kept;
	bool is_options_taken; /* its tern.* startup settings were read (they are read once) */
	bool ssl_request_seen;
	bool gss_request_seen;
	bool is_lookup_done;
	uint8_t md5_salt[4];
	struct scram_server *scram;
	struct auth_user *looked_up; /* what auth_query found (NULL: the user is auth_file's, or unknown) */
	uint64_t identity_hash; /* the endpoint it came in on (runtime identity_hashes), for the pool key */
};

/* The BackendKeyData tern gave the client: the pid (the worker index is its top byte) and the secret, the
 * first 4 bytes under protocol 3.0, all SESSION_CANCEL_KEY_LEN under 3.2. */
struct session_key {
	uint32_t pid;
	uint8_t secret[SESSION_CANCEL_KEY_LEN];
	uint8_t len;
};

/* The relay's scan of the client message under way (session_relay.c), and what the observers' type hooks
 * report back into it. */
struct session_scan {
	uint32_t client_readers; /* the observers that read the client message being scanned */
	uint8_t client_taker;    /* the observer that took it over, if one did */
	int hook_error;          /* an observer's type hook failed (-ENOMEM, -ENOBUFS): the relay ends the session */
};

/* The one end (session.c): why, what the client is told, and the goodbye. */
struct session_end {
	enum session_end_reason reason;
	uint64_t closing_ns;
	struct base_list link; /* host->ending: session_end_later */
	enum session_end_reason later_reason;
	/* What the client is told at the end instead of the reason's words ("" sqlstate: the reason's): the
	 * server's own refusal, or a specific error (session_end_with_error). */
	struct pool_error error;
	bool is_client_cut; /* the client socket is shut both ways: the linger has nothing left to cut */
	/* Ended, saying goodbye: what the client still sends is read and dropped until it closes (its
	 * unread bytes would make the close a reset that loses the goodbye), and FIN follows the goodbye. */
	bool is_client_draining;
	bool is_client_fin_sent;
};

/* The gate a session's next transaction passes (session_pause_gate; worker.c opens it). */
struct session_gate {
	/* PAUSE: the next transaction waits at the gate since wait_ns (worker.c lets it go at RESUME, or
	 * ends it at query_wait_timeout). */
	bool is_waiting;
	uint64_t wait_ns;
	/* SIGTERM came before this client finished a transaction of its own: it is let go at the end of
	 * its first one, not at once (a rolling restart's late arrivals, and a client welcomed just before
	 * the signal, are served; worker_drain lets one go that stays silent once welcomed). */
	bool is_drain_spared;
};

struct session {
	struct base_list link; /* host->sessions, or host->reaping once ended */
	struct host *host;
	const struct session_parts *parts; /* the runtime's */
	enum session_phase phase;
	bool is_transaction_pooling; /* pool_mode, fixed for tern's life: read once, not per message */
	int client_fd;
	struct ring_op client_recv; /* multishot */
	bool client_recv_paused;   /* back pressure (session_client_pace) */
	bool is_client_send_recalled; /* its send was cancelled to copy its bytes out of the ring */
	bool client_eof;
	struct sendq to_client;
	struct proto_stream client_stream;

	/* The login's own state (session_login.c): from creation to READY, when it is freed; the admin console
	 * keeps it (its buffer assembles the console's queries). NULL after. */
	struct session_login *login;
	bool is_over_client_limit;
	bool is_admin;
	bool is_counted; /* in db->client_count */
	char user[POOL_NAME_LEN_MAX];
	char database[POOL_NAME_LEN_MAX]; /* as the client asked for it */
	/* Its [databases] entry (NULL: none, the name passes through); lives as long as tern, since a reload
	 * keeps the configuration it came from. */
	const struct database_entry *db_entry;
	struct pool_server *pinned_server; /* the entry's `server`; NULL: the primary of the moment */
	char application_name[POOL_NAME_LEN_MAX];
	/* auth_query: the lookup in flight (its owner is this session until it is freed); what it found is
	 * login->looked_up. */
	struct auth_lookup *lookup;
	struct pool_db *db;
	struct session_key key; /* the BackendKeyData tern gave the client (worker.c matches a cancel to it) */

	/* The server side: a leg per role (the primary's exists from the start), and legs set aside while
	 * their dropped connection drains (leg.link). */
	struct leg *legs[LEG_ROLE_COUNT];
	struct base_list legs_draining;
	/* A receive ended for want of buffers, by buffer group; the session is on host->starved (session.c). */
	struct session_starve {
		bool groups[RING_BUFFER_GROUPS];
		struct base_list link;
	} starve;
	struct session_tls *tls; /* NULL: the client speaks in the clear (see session_tls.c) */
	const struct session_transport *transport; /* NULL: the plain socket */
	/* What the observers keep (observer.h), each in its own struct. */
	uint32_t observers_on;   /* bit per observer id: on for this session (set at login) */
	struct session_scan scan; /* session_relay.c: the client message being scanned */
	struct params_state params;     /* observer_params.c: parameters and search_path */
	struct session_pins pins;       /* observer_pins.c: LISTEN, SQL PREPARE */
	struct stmts_state stmts;       /* observer_stmts.c: the client's named statements */
	struct session_steer steer;      /* where routing sends the client's messages, and what waits */
	struct session_route routing;   /* route.c: reads on replicas */
	struct session_digest digest;   /* observer_digest.c: the Query being timed */
	struct session_shadow shadow;   /* observer_shadow.c: a read sampled for [shadow] */
	struct session_replay replay;   /* observer_replay.c, recover.c: Transaction Replay */
	struct session_journal journal; /* observer_journal.c: the recovery journal's capture */

	struct session_end end; /* session.c: the one end */
	/* For the timeouts, read once a second by the worker: when the client last sent bytes (the legs
	 * keep when they last answered). */
	uint64_t client_active_ns;

	struct session_stats stats;
	struct session_gate gate; /* PAUSE and SIGTERM's drain (session_pause_gate, worker.c) */
	/* The admin console's own state for this session (session_console.destroy frees it). */
	void *console;
};

/* The admin console, as a session sees it: a handler main registers in the runtime (admin.c). A client
 * that logs in to console->database is handed to it after authentication. */
struct session_console {
	const char *database;
	const char *alias; /* another database name that opens it (NULL: none) */
	bool (*is_allowed)(const struct tern_config *config, const char *user);
	/* After authentication: the welcome; the session answers its queries itself from now on. */
	void (*welcome)(struct session *s);
	void (*on_bytes)(struct session *s, const uint8_t *data, uint32_t len);
	/* The worker's tick, while host->console_waiting_count > 0. */
	void (*on_tick)(struct host *host);
	/* The session is freed: its console state goes (s->console may be NULL). */
	void (*destroy)(struct session *s);
};

struct session *session_create(struct host *host, int client_fd, uint32_t listener);
/* The one way a session ends: tells the client why (when it can still hear), releases or discards
 * its server connections, and lets the worker free it once nothing is in flight. */
void session_end(struct session *s, enum session_end_reason reason);
/* session_end at the end of the worker's pass (host->ending): for a failure found in the middle of a
 * change the caller must finish first (a message that could not be queued). */
void session_end_later(struct session *s, enum session_end_reason reason);
/* session_end, telling the client this instead of the reason's own SQLSTATE and message. */
void session_end_with_error(struct session *s, enum session_end_reason reason, const char *sqlstate,
			    const char *message);
/* The one place a session's phase changes (test_layout.c checks no other file writes it). The moves:
 * STARTUP at creation; AUTH from STARTUP, or from AUTH again (an auth_query answer begins the exchange
 * anew); LOGIN_WAIT or ADMIN from STARTUP (trust) or AUTH; READY from LOGIN_WAIT; CLOSING from any but
 * itself. Each caller's own state implies its move (no input chooses one), so a move outside these is a
 * bug in tern, and asserted. */
void session_set_phase(struct session *s, enum session_phase to);
/* True while the client has a transaction (or a statement) open on a server. */
bool session_is_in_transaction(const struct session *s);
/* SIGTERM's drain: true when the session can go now (57P01) and lose nothing it asked: it holds no
 * transaction open, no request of it waits for a server, and it is not spared for a first transaction
 * of its own (struct session_gate). */
bool session_is_drainable(const struct session *s);
/* Debug builds: checks what must hold between the session and its legs (each leg's connection, queue,
 * owed replies and parked request agree), before and after each change of a leg. */
#ifdef NDEBUG
static inline void session_assert_invariants(const struct session *s) { (void)s; }
#else
void session_assert_invariants(const struct session *s);
#endif
/* True when nothing of the session is in flight and it may be freed. */
bool session_is_reapable(const struct session *s);
void session_destroy(struct session *s);
/* Frees s->login (at READY, and with the session); none left is a no-op. */
void session_login_free(struct session *s);

/* ---- the server legs ---- */

/* The primary's leg: it exists from session_create on. */
static inline struct leg *session_primary(const struct session *s) { return s->legs[LEG_PRIMARY]; }
/* Each leg the session holds, in role order (a role may have none); `leg` is declared by the caller. */
#define SESSION_EACH_LEG(s, leg)                                  \
	for (uint32_t role_ = 0; role_ < LEG_ROLE_COUNT; role_++) \
		if (((leg) = (s)->legs[role_]) == NULL) {         \
		} else
/* The leg the client's messages go to now: a replica's while a routed batch runs there, else the
 * primary's (observer_stmts.c keeps its replies on it). */
static inline struct leg *session_client_leg(const struct session *s)
{
	return s->steer.leg ? s->steer.leg : s->legs[LEG_PRIMARY];
}
/* Client bytes to the backlog that waits while routing holds the client's traffic. 0 or -ENOMEM. */
static inline int session_backlog_append(struct session *s, const uint8_t *data, uint32_t len)
{
	return len ? base_bytes_append(&s->steer.backlog, data, len) : 0;
}
/* What a lost server connection means for the session: its end (for any leg outside transaction
 * pooling, or with the reason's or a given SQLSTATE), or Transaction Replay's recovery (recover.h), as
 * tr_decide says. A pool's refusal to connect a leg (LEG_FAULT_REFUSED) is decided the same way. The
 * paths that report a loss all come through leg_fail → session_leg_on_lost, or session_on_request_done. */
enum session_lost_action { SESSION_LOST_END = 1, SESSION_LOST_RECOVER };
struct session_lost_decision {
	enum session_lost_action action;
	enum session_end_reason reason; /* END */
	const char *sqlstate, *message; /* END: what the client is told instead of the reason's (NULL: its own) */
	struct tr_decision tr;          /* RECOVER */
	enum tr_phase phase;            /* RECOVER: how far the request in flight got */
	bool is_in_tx;                  /* RECOVER: the client's transaction was open */
	bool is_commit;                 /* RECOVER: the statement in flight is known to be a COMMIT or ROLLBACK
					 * (it ends the transaction, whatever became of it) */
};
struct session_lost_decision session_decide_lost(const struct session *s, const struct leg *leg,
						 enum leg_fault fault);
/* Asks for a server connection for leg: the worker-local cache, the pool, or a parked request that the
 * worker hands back through the mailbox (session_on_request_done). */
void session_acquire(struct session *s, struct leg *leg);
/* A parked request of leg was granted or failed (worker thread, from the mailbox). */
void session_on_request_done(struct leg *leg);
/* query_wait_timeout passed for leg's parked request. */
void session_on_wait_timeout(struct leg *leg);
/* Gives leg's connection back when its transaction (or its reset) is over and the session lets it go. */
void session_try_release(struct session *s, struct leg *leg);
/* For an ended session, or a dropping leg: discards or releases the connection once its ops are done. */
void session_settle(struct session *s, struct leg *leg);
/* Shuts the role's connection and gives the role a new, detached leg while the session stays (the old
 * one drains aside). NULL when out of memory (nothing changed). */
struct leg *session_replace_leg(struct session *s, enum leg_role role);
/* From the leg's own on_lost (its connection is still held, shut): the role gets a new, detached leg and
 * the old one drains aside, reaped by its own completions. NULL when out of memory. */
struct leg *session_set_aside_leg(struct session *s, enum leg_role role);
/* PAUSE's gate, where a session asks for a server: true when it must wait (it is held, its bytes
 * copied out of receive buffers, and let go at RESUME); false when it may go on. */
bool session_pause_gate(struct session *s);
/* True while the admin console's PAUSE (all, or of this client's database) holds new transactions. */
bool session_is_gated(struct session *s);
/* The server this session's transactions go to: its [databases] entry's server, else the primary. */
struct pool_server *session_server(const struct session *s);
/* While parked: the bytes queued for the server are to leave the receive buffers (by the end of the
 * pass: session_hold_now). */
void session_hold_parked_bytes(struct session *s);
/* The end of a pass (host->holds): a leg that still waits moves its queued bytes into owned copies. */
void session_hold_now(struct leg *leg);
/* Transaction pooling: the client keeps its server connection (LISTEN, SQL PREPARE). */
static inline bool session_is_pinned(const struct session *s)
{
	return s->pins.is_listening || s->pins.is_sql_prepared;
}

/* ---- the client side ---- */

/* Arms the client's multishot receive unless something holds it back. */
void session_client_recv_resume(struct session *s);
/* A receive of `group` ended for want of buffers: re-armed when that group has buffers again. */
void session_starve(struct session *s, uint8_t group);
/* Copies the bytes queued to the client out of the worker's receive buffers, which other sessions need
 * (a client that reads slower than its server writes; every client when the server buffers run out). */
void session_release_client_buffers(struct session *s);
/* Re-arms the receives whose group has free buffers again; true when none is left waiting. */
bool session_resume_starved(struct session *s);
/* Off host->starved: its receives are re-armed by whoever arms them next (at the end, and when freed). */
void session_unstarve(struct session *s);
/* Ends the session if one of the client-side timeouts has passed. */
void session_check_timeouts(struct session *s, uint64_t now_ns);
/* The session's time to say goodbye ran out: cut the client, and the servers it still waits for (a reset
 * whose answer does not come, say). Again at each tick while something remains. */
void session_linger_expired(struct session *s);

/* ---- login (session_login.c) and relay (session_relay.c): session_relay_parts ---- */

void session_login_on_bytes(struct session *s, const uint8_t *data, uint32_t len);
/* Appends to login->buf (startup and auth messages; the admin console's queries), at most `max` bytes in
 * all. False when the session ended instead (over max: protocol violation; out of memory). */
TERN_MUST_USE bool session_login_buf_append(struct session *s, const uint8_t *data, uint32_t len, uint32_t max);
/* The primary leg got a connection while the session waits to be welcomed. */
void session_login_on_backend(struct session *s);
/* auth_query answered, on the worker's thread: the login goes on, or the lookup is freed when its session
 * has gone. */
void session_login_on_lookup(struct auth_lookup *lookup);
void session_relay_on_client_chunk(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len);
/* The relay's side of leg_ops.on_bytes: scans what the server sent and forwards it to the client. */
int session_relay_on_server_bytes(struct leg *leg, uint16_t buffer_id, const uint8_t *data, uint32_t len);
/* leg got a connection: the client's state is restored on it (welcome, statements, parameters), then
 * the queued bytes go. */
void session_relay_attach(struct session *s, struct leg *leg, struct pool_conn *conn);

/* ---- SHOW STATS ---- */

/* Closes the server assignment the session gave back (at its last ReadyForQuery). */
static inline void session_stats_close_assignment(struct session *s)
{
	const struct leg *leg = session_primary(s);
	if (s->stats.assigned_ns == 0 || leg->conn)
		return;
	if (leg->ready_ns > s->stats.assigned_ns) {
		s->stats.xact_count++;
		s->stats.xact_ns += leg->ready_ns - s->stats.assigned_ns;
	}
	s->stats.assigned_ns = 0;
}
/* For the relay at a ReadyForQuery that answers the client (not tern's own SET), after pending_ready and
 * ready_ns are updated: one query; the server's busy time once nothing is pending. */
static inline void session_stats_on_ready(struct session *s, const struct leg *leg)
{
	s->stats.query_count++;
	if (leg->pending_ready == 0 && leg->ready_ns > leg->request_sent_ns)
		s->stats.query_ns += leg->ready_ns - leg->request_sent_ns;
}
/* Bytes the client sent, in the clear (decrypted when TLS is on): to the phase's handler. buffer_id is
 * the receive buffer they lie in, or RING_NO_BUFFER when they must be copied to be kept. */
void session_on_client_bytes(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len);
/* Pauses or resumes the client's reads for back pressure (see session.c). */
void session_client_pace(struct session *s);
/* The client's queue went below its low marks after a send: the servers may be read again. */
void session_client_drained(struct session *s);
/* TLS toward the client (session_tls.c). */
/* Starts TLS: after an SSLRequest (is_direct false) it answers 'S' in the clear, ahead of the handshake;
 * a direct handshake (is_direct: the client's first bytes are a ClientHello) must select ALPN
 * "postgresql". The client queue must be idle: a client sends its SSLRequest only after it has read
 * every byte tern sent before. 0 or -ENOMEM. */
TERN_MUST_USE int session_tls_start(struct session *s, const struct tls_context *ctx, bool is_direct);
/* Ciphertext received from the client: drives the handshake, hands the plaintext on (a direct
 * handshake's first bytes come through here; later ones through the transport). */
void session_tls_on_ciphertext(struct session *s, const uint8_t *data, uint32_t len);
/* For SCRAM-SHA-256-PLUS: the tls-server-end-point data (0: none, or no TLS). */
size_t session_tls_channel_binding(const struct session *s, const uint8_t **data);
/* [auth] mode = cert, as PostgreSQL's and PgBouncer's: the client came over TLS with a certificate that
 * client_tls_ca_file vouches for, and its common name is the user it logs in as (no password asked);
 * false when not, the session then ending with 28000. */
bool session_tls_certificate_names_user(struct session *s);
/* SHOW CLIENTS: "TLSv1.3/TLS_AES_256_GCM_SHA384" as PgBouncer shows it; "" without TLS. */
void session_tls_describe(const struct session *s, char *out, size_t size);
/* Generated bytes to the client (errors, auth, welcome). */
void session_send_to_client(struct session *s, const void *data, uint32_t len);
/* The same by reference to a receive buffer's bytes (sendq_push_buffer: no copy). */
void session_send_buffer_to_client(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len);
/* A reply tern makes up in place of a server's, in the answer of session_client_leg: sent, or held with
 * that answer while routing guards it (route_types.h: leg_route.is_reply_guarded). */
void session_send_reply(struct session *s, const void *data, uint32_t len);
void session_send_error(struct session *s, const char *severity, const char *sqlstate, const char *message,
			const char *hint);
void session_mark_dirty(struct session *s, struct sendq *q);
/* After client bytes were queued toward leg's server: back pressure, and a server if none is held. */
void session_leg_queue_grew(struct session *s, struct leg *leg);
/* The replica's leg, created the first time a read goes to a replica; NULL when out of memory. */
struct leg *session_replica_leg(struct session *s);
/* The relay: client bytes to leg (routing places no query in them when is_routed: route_dispatch). */
void session_relay_feed(struct session *s, struct leg *leg, bool is_routed, uint16_t buffer_id, const uint8_t *data,
			uint32_t len);
/* session_parts.feed: bytes routing holds (copies) to the relay. */
void session_relay_feed_held(struct session *s, struct leg *leg, bool is_routed, const uint8_t *data, uint32_t len);

#endif
