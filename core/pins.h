/*
 * pins.h — what binds a session to its server connection (observer_pins.c follows it): LISTEN, SQL
 * PREPARE, and in session pooling what only that backend holds (a temporary table, a cursor WITH HOLD,
 * an advisory lock), and the channels a move listens to again. The session holds one (s->pins).
 *
 * Threads: the session's worker. Ownership: the channels' bytes are the session's, freed with it.
 * Never: written outside observer_pins.c (tests/unit/test_layout.c checks); no behaviour here.
 */
#ifndef TERN_PINS_H
#define TERN_PINS_H

#include "base.h"

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

#endif
