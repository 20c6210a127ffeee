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

#include "digest.h"
#include "host.h"
#include "leg.h"
#include "params.h"
#include "pins.h"
#include "proto.h"
#include "reasons.h"
#include "sendq.h"
#include "shadow.h"
#include "stmts.h"

struct scram_server;
struct auth_lookup;
struct auth_user;
struct database_entry;
struct session_tls;
struct tls_context;
struct leg_route;      /* routing's (routing/route_types.h) */
struct session_route;  /* routing's (routing/route_types.h) */
struct session_replay; /* Transaction Replay's (replay/replay_types.h) */
struct session_journal; /* the journal's capture (replay/replay_types.h) */
struct server_auth_secret;
struct observer;

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

/* What works for the session from above it: the login and the relay with its observers, routing and
 * Transaction Replay. main composes the table (main/parts.c) and puts it in the runtime; the session and
 * the relay call up only through here, so core depends on none of them: routing's and Transaction
 * Replay's state is theirs, laid out after the session and each leg, and core never reads it. */
/* Where the state laid out after a session begins (session_parts.session_state_bytes, place). */
#define SESSION_STATE_AT ((sizeof(struct session) + 15u) & ~(size_t)15u)

/* What a Query held for routing became (session_parts.route_query). */
enum session_query_route {
	SESSION_QUERY_ANSWERED = 0, /* tern answered it (SET tern.*), or refused it: nothing goes on */
	SESSION_QUERY_TAKEN,        /* routing took it for a replica: the relay's scan stops there */
	SESSION_QUERY_ADMIT,        /* it goes on to the chunk's leg as any message would */
	SESSION_QUERY_ADMIT_LAST,   /* ... and the rest waits for its answer (a read-only transaction's request) */
};

/* What the relay, the login and the session ask routing (route.h, route_relay.c; main's table). */
struct session_routing_ops {
	/* A client chunk while routing holds the client's traffic (a read routed or waiting, a batch being
	 * read to its Sync, a read-only transaction on a replica): true when routing took it. */
	bool (*chunk)(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len);
	/* A chunk went to the primary: a query routing took in it goes on. */
	void (*fed)(struct session *s);
	/* A Query held for routing: *probe (0: none) is what push_probe queues behind it. */
	enum session_query_route (*query)(struct session *s, const uint8_t *body, uint32_t len, uint8_t *probe);
	/* The Query went to the primary as it came; ... and the probe behind it. 0 or -ENOMEM. */
	void (*query_sent)(struct session *s);
	int (*push_probe)(struct session *s, struct leg *leg, uint8_t probe);
	/* A read-only transaction on a replica: one request at a time (its Sync is held). */
	bool (*is_replica_tx)(const struct session *s);
	/* ... its request went: the client's next bytes wait. */
	void (*tx_request_sent)(struct session *s);
	/* A Query, Sync or FunctionCall went to leg; any message after the BEGIN was admitted. */
	void (*note_request)(struct session *s, const struct leg *leg);
	void (*note_admit)(struct session *s);
	/* The server a read on the replica's leg asks the pool for. */
	struct pool_server *(*replica_server)(const struct session *s);
	/* Routing holds the client's traffic (the session is not idle); ... under a deadline of its own. */
	bool (*is_busy)(const struct session *s);
	bool (*has_deadline)(const struct session *s);
	/* At a leg's progress, and its lost connection (true: routing re-runs its read; the session goes on). */
	void (*leg_progress)(struct session *s, struct leg *leg);
	bool (*leg_lost)(struct session *s, struct leg *leg);
	/* A startup option tern.<name>=<value>: 0, -ENOENT (no such parameter), -EINVAL (*hint says why). */
	int (*take_setting)(struct session *s, const char *name, size_t name_len, const char *value, const char **hint);
	/* A user's key the login learned (the monitor may log in as that user). */
	void (*learn_key)(const struct tern_runtime *rt, const struct server_auth_secret *secret);
};

/* What the relay and the session ask Transaction Replay (recover.h; main's table). */
struct session_replay_ops {
	/* A chunk while a replay runs on the new primary: held until its verdict (true), or not (false). */
	bool (*takes_chunk)(struct session *s, const uint8_t *data, uint32_t len);
	/* The client's transaction was lost (or a failed batch is skipped): tern answers its messages. */
	bool (*is_answering)(const struct session *s);
	unsigned (*answer_type)(uint8_t type);
	int (*answer_message)(struct session *s, uint8_t type, const uint8_t *body, uint32_t len);
	/* A client Flush to the primary: what the start of the answer held goes now. */
	void (*flush)(struct session *s, struct leg *leg);
	/* A ParseComplete tern answers at once for the primary while the request is recorded: 1 when held
	 * with the start of its answer (and the request stays unsynced), 0 when not, -ENOMEM. */
	int (*hold_parse_complete)(struct session *s);
	/* A lost or refused primary connection, decided once: SESSION_LOST_RECOVER when the recovery it
	 * decided on is under way; else how the session ends. Then the gate a primary leg passes before it
	 * asks the pool (true: it waits for a primary); ... that wait. */
	struct session_lost_decision (*lost)(struct session *s, struct leg *leg, enum leg_fault fault);
	bool (*awaits_primary)(struct session *s, struct leg *leg);
	bool (*waits_for_primary)(const struct session *s);
	/* ... and, once a second (session_check_timeouts), the recovery's one deadline: true when it ended
	 * the session. */
	bool (*check_deadline)(struct session *s, uint64_t now_ns);
};

struct session_parts {
	/* ---- the login and the relay (core's, above the session) ---- */
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
	/* The observers, in the order they are asked (dispatch_init builds its tables from them). */
	const struct observer *const *observers;

	/* ---- routing's and Transaction Replay's state, laid out in the session's and each leg's block ---- */
	size_t session_state_bytes, leg_state_bytes;
	/* Points s->routing, s->replay, s->journal into `state` (zeroed, 16-byte aligned). */
	void (*place)(struct session *s, uint8_t *state);
	/* Points leg->route into `state` (zeroed, 16-byte aligned). */
	void (*place_leg)(struct leg *leg, uint8_t *state);

	/* Routing's and Transaction Replay's hooks (below); and where the relay asks one question of both: */
	struct session_routing_ops route;
	struct session_replay_ops replay;
	/* A reply tern made up for the client's leg: true when held, while routing guards that leg's answer
	 * or Transaction Replay holds the start of the primary's. */
	bool (*hold_reply)(struct session *s, const void *data, uint32_t len);
	/* A Query too long to read went to leg (routing and the journal allow for it). */
	void (*unread_query)(struct session *s, struct leg *leg);
	/* The session ends: routing's waits, a recovery's wait. */
	void (*ending)(struct session *s);

	/* ---- what the worker asks them, once a pass and once a second ---- */
	void (*host_pass)(struct host *host);
	void (*host_tick)(struct host *host, uint64_t now_ns);
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
	struct session_route *routing;  /* routing's (routing/route_types.h): reads on replicas */
	struct session_digest digest;   /* observer_digest.c: the Query being timed */
	struct session_shadow shadow;   /* observer_shadow.c: a read sampled for [shadow] */
	struct session_replay *replay;  /* replay/replay_types.h: Transaction Replay */
	struct session_journal *journal; /* replay/replay_types.h: the recovery journal's capture */

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
};
/* The one decision (session_parts.replay.lost, when there is one): a SESSION_LOST_RECOVER decision's
 * recovery is under way when it returns. */
struct session_lost_decision session_decide_lost(struct session *s, struct leg *leg, enum leg_fault fault);
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

/* ---- login (session_login.c) and relay (session_relay.c): session_parts' first part ---- */

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
 * that answer while routing guards it, or with the start of the primary's answer Transaction Replay
 * holds (session_parts.hold_reply). */
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
