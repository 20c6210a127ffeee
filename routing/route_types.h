/*
 * route_types.h — routing's state, per session (struct session_route, s->routing) and per leg (struct
 * leg_route, leg->route): the session and the leg point to them, laid out after each
 * (session_parts.place, place_leg: main's), so routing's files own them and core never reads them.
 *
 * Threads: the session's worker. Ownership: laid out with the session and the leg; the held query and the
 * held reply are freed by route_deinit; the pool_server pointers name servers, which the pool owns.
 * Never: written outside routing/route*.c (tests/unit/test_layout.c fails such a line); no behaviour here.
 */
#ifndef TERN_ROUTE_TYPES_H
#define TERN_ROUTE_TYPES_H

#include "base.h"
#include "core/config.h"
#include "split.h"

#include <stdint.h>

struct leg;
struct pool_server;

/* Routing of autocommit reads to replicas (route.c), in transaction pooling. */
enum route_state {
	ROUTE_IDLE = 0,   /* client messages go to the primary's leg as they are read */
	ROUTE_WAITING,    /* a read waits (host->route_waits) for its LSN target, or for a replica to reach it */
	ROUTE_ON_REPLICA, /* a read runs on the replica's leg: the client's next bytes wait in the backlog */
	ROUTE_SETTLING,   /* a SET tern.* waits for the replies owed before it */
	ROUTE_COLLECTING, /* an extended-protocol batch is read up to its Sync before routing decides */
	ROUTE_REPLICA_TX, /* a BEGIN READ ONLY transaction runs on the replica's leg: client bytes go there */
	ROUTE_REPLICA_TX_BUSY, /* ... one request of it is in flight: the client's next bytes wait */
};

/* tern's own session parameters (route.c). */
enum route_setting {
	ROUTE_SETTING_CONSISTENCY = 0, /* tern.consistency: enum config_consistency */
	ROUTE_SETTING_SPLIT,           /* tern.transaction_split: 0 off, 1 on */
	ROUTE_SETTING_COUNT
};

struct session_route {
	struct session *session; /* the owner (route_place), for host->route_waits */
	uint8_t state;         /* enum route_state */
	/* The client's own values of tern's parameters (SET tern.*), by enum route_setting, for those whose
	 * bit is in settings_set; the others follow the configuration's defaults of the moment. */
	uint8_t settings[ROUTE_SETTING_COUNT];
	uint8_t settings_set;
	bool is_write_unprobed; /* session: a request on the primary's leg may have written since the last probe */
	uint64_t write_lsn;     /* session: the primary's insert LSN after the client's last write (0: none) */
	/* The read being routed (or the SET tern.* waiting its turn): its Query message, header included, or
	 * the messages of an extended-protocol batch up to its Sync. */
	struct base_bytes held;
	/* What the client sent after it, not yet read: fed to the relay once the read is answered. */
	/* The wait: the LSN a replica must have replayed (known once the strict probe answered). */
	uint64_t target_lsn;
	uint64_t probe_ticket; /* strict: the monitor's probe this read waits for; 0 when none */
	uint64_t arrived_ns, deadline_ns;
	bool is_waited;        /* it waited for an LSN (for the counters) */
	bool is_awaiting_probe; /* session: the last write's probe is still to answer on the primary's leg */
	bool is_rerun;          /* the replica refused the read in a way the primary may not (40001, 25006) */
	bool is_batch;          /* the held messages are an extended-protocol batch */
	bool is_tx;             /* the held Query is a BEGIN READ ONLY: its transaction follows it to the replica */
	/* A plain BEGIN went to the primary with nothing after it yet (is_begin_sent: the Query being
	 * admitted is it); a SET TRANSACTION READ ONLY then moves the transaction to a replica, where a hidden
	 * BEGIN (is_begin_hidden) precedes it, and a hidden ROLLBACK ends the empty one on the primary. */
	bool is_begin_sent, is_begin_alone, is_begin_hidden;
	/* The replica's answer up to its first row or completion (ParseComplete, RowDescription, ... and what
	 * tern made up among them), whole messages, held until the answer is known to be the client's. */
	struct base_bytes reply_held;
	struct base_list wait_link; /* host->route_waits while ROUTE_WAITING */
	uint64_t replica_mark; /* the replica leg's to_client_bytes when the read went to it */
	struct pool_server *server; /* the replica it goes to */
	struct pool_server *excluded; /* the replica whose connection the read lost: not picked again */
	bool is_read_on_primary; /* a routed read is being queued on the primary's leg: it writes nothing */
	bool is_split;           /* the read being routed is a split read of the client's transaction */
	bool is_awaiting_isolation; /* split: its transaction's isolation is still to come (SHOW, hidden) */
	bool is_awaiting_wal;       /* split, a 'w' transaction: its insert-LSN probe is still to come */
	uint64_t wal_lsn;           /* ... its answer, when a replica was past it: the read's target is no lower */
	bool is_xid_import;         /* split after a write (REPLICA_TXN_SPLIT): only a polar replica may serve it */
	bool is_wait_for_lsn;       /* it goes to a replica behind WAIT FOR LSN (PostgreSQL 19), not yet at its target */
	/* transaction_split: the client's transaction on the primary, and the replica its split reads keep. */
	struct route_split {
		struct split_tx tx;
		bool is_unread; /* a Parse or Bind it must note was not read yet (too long: then it may write) */
		bool is_followed; /* every statement since the primary was last seen idle was noted */
		/* The replica the transaction's split reads keep until it ends (the replica leg holds a
		 * connection to it; what that says unasked is hidden) */
		struct pool_server *server;
	} split;
	enum config_consistency level; /* of the read being routed */
};

/* A leg as routing uses it. */
struct leg_route {
	/* A routed read's answer is held back until it is known not to be one routing re-runs on the
	 * primary (route_guard.c, through the show stage): what precedes its first row or completion waits. */
	bool is_reply_guarded;
	uint8_t probe_kind;        /* enum route_probe: what tern's probe behind or answering asks */
	bool has_polar_settings;   /* a split read's SET polar_* went to its connection: RESET before it goes */
	bool is_waiting_for_lsn;   /* a hidden WAIT FOR LSN is ahead of the read: its status is looked at */
	bool is_wait_status_next;  /* ... and its RowDescription came: the next DataRow is the status */
	/* A polar server's last ReadyForQuery (polar.c): its marker ('x', 'w') and the transaction's XIDs
	 * ("cid,xid,..."), what a split read after a write imports on the replica. */
	char polar_marker;
	char polar_xids[128];
};

#endif
