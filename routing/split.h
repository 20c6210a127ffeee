/*
 * split.h — which reads of an open read-committed transaction may run on a replica while the transaction
 * stays whole on the primary (issue 11, DESIGN §5). The five conditions of
 * ../shared/reference/000_067b628b093530ef.txt, each a predicate: the transaction is read committed; it
 * is splittable; the statement is a top-level SELECT with no locking clause; it is one command in the
 * simple protocol; and, before the first write, no SET ran in the transaction. route.c tracks the
 * transaction (split_tx) and asks split_check for every statement of it. Read committed is what the
 * server answers for the transaction (a level a BEGIN names can be a no-op), unless a level other
 * than read committed was named.
 *
 * Threads: any; pure functions of their inputs. Never: says yes to a statement classify.h calls a write.
 */
#ifndef TERN_SPLIT_H
#define TERN_SPLIT_H

#include "core/classify.h"

/* Why a statement of the transaction stays on the primary (the first condition it fails). */
enum split_refusal {
	SPLIT_ELIGIBLE = 0,
	SPLIT_NOT_READ_COMMITTED, /* repeatable read or serializable, or its isolation is not known */
	SPLIT_NOT_ONE_COMMAND,    /* several statements in one Query, or the extended protocol */
	SPLIT_NOT_SELECT,         /* not a top-level SELECT free of locking clauses and writing calls */
	SPLIT_NOT_SPLITTABLE,     /* vanilla: past the read-only prefix; polar: its own WAL is not flushed */
	SPLIT_SET_IN_TRANSACTION, /* a SET, RESET or DISCARD ran in it before its first write */
	SPLIT_REFUSAL_COUNT
};
/* The names /metrics gives them (tern_split_refused_total{reason=...}). */
extern const char *const split_refusal_names[SPLIT_REFUSAL_COUNT];

/* The XID-import profile's marker on the last ReadyForQuery (a polar server's; vanilla: none). */
enum split_xact { SPLIT_XACT_NONE = 0, SPLIT_XACT_SPLITTABLE /* 'x' */, SPLIT_XACT_WAL_PENDING /* 'w' */ };

/* What routing knows of the client's transaction on the primary: the union of what every statement
 * sent since the primary was last seen idle did (route.c resets it there), so a statement of an
 * earlier transaction pipelined behind it can only make it say no. */
struct split_tx {
	enum classify_isolation isolation;        /* named by a BEGIN or SET TRANSACTION; DEFAULT: not named */
	enum classify_isolation server_isolation; /* the server's answer (SHOW transaction_isolation); DEFAULT: none */
	bool has_write; /* a statement that may write ran, or one tern did not read (too long, a function call) */
	bool has_set;   /* a SET, RESET or DISCARD ran */
	enum split_xact xact;
};

/* A statement went to the primary: what it changes of the transaction. */
void split_tx_note(struct split_tx *tx, const struct classify_result *r);

/* The five conditions. */
bool split_is_read_committed(const struct split_tx *tx);
/* is_polar: the server speaks the XID-import profile (a write need not end the splitting). */
bool split_is_splittable(const struct split_tx *tx, bool is_polar);
bool split_is_plain_select(const struct classify_result *r);
/* is_simple: a Query message (an extended-protocol statement never is one command here). */
bool split_is_one_command(const struct classify_result *r, bool is_simple);
bool split_has_no_set_before_write(const struct split_tx *tx);

/* SPLIT_ELIGIBLE, or the first condition r fails. */
enum split_refusal split_check(const struct split_tx *tx, const struct classify_result *r, bool is_simple,
			       bool is_polar);

#endif
