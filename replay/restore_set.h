/*
 * restore_set.h — the SET state Transaction Replay restores on a new primary
 * (../shared/reference/004_c44c290a4cd34a46.txt, "Session-state restore is transactional"): each session
 * variable a client's simple-protocol SET or RESET changed, keyed by name, with the statement that set it
 * as the client wrote it. The rules are PostgreSQL's: a change inside a transaction holds only once the
 * transaction commits; ROLLBACK TO SAVEPOINT undoes the changes made after the savepoint (RELEASE keeps
 * them); RESET, RESET ALL and DISCARD ALL wait for the commit like a SET. Repeating a SET of one variable
 * reuses its entry, moved to the end: restoring the entries in order gives the state the client had
 * (SET SESSION AUTHORIZATION after SET ROLE undoes it, as on the server).
 *
 * Threads: the owning session's worker. Ownership: the set owns copies of every name and statement.
 * Never: reads SQL (observer_sets.c tells it what ran) or allocates more than its entries.
 */
#ifndef TERN_REPLAY_RESTORE_SET_H
#define TERN_REPLAY_RESTORE_SET_H

#include "base.h"

/* A variable's or a savepoint's name, folded to lower case (a custom one's two parts and the dot). */
#define RESTORE_NAME_MAX 128u

enum restore_change_kind {
	RESTORE_SET = 1,     /* name = the statement */
	RESTORE_RESET,       /* name back to its default */
	RESTORE_RESET_ALL,   /* every variable but role and session_authorization, which RESET ALL keeps */
	RESTORE_DISCARD_ALL, /* every variable */
};

struct restore_entry {
	char *name;      /* owned, with the statement in one allocation */
	char *statement; /* the SET as the client wrote it, without its ';' */
};

struct restore_set {
	struct restore_entry *entries; /* what committed, in the order last set */
	uint32_t count, cap;
	/* The open transaction's changes, in order (one allocation each, freed when it ends). */
	struct restore_pending {
		enum restore_change_kind kind;
		struct restore_entry entry; /* RESTORE_SET: name and statement; RESTORE_RESET: name */
	} *pending;
	uint32_t pending_count, pending_cap;
	struct restore_savepoint {
		char name[RESTORE_NAME_MAX];
		uint32_t pending_count; /* the changes before it */
	} *savepoints;
	uint32_t savepoint_count, savepoint_cap;
};

void restore_set_deinit(struct restore_set *set);
/* A change that ran in the open transaction (or in an implicit one). 0 or -ENOMEM. */
TERN_MUST_USE int restore_set_change(struct restore_set *set, enum restore_change_kind kind, const char *name,
				     const char *statement);
/* SAVEPOINT name ran. 0 or -ENOMEM. */
TERN_MUST_USE int restore_set_savepoint(struct restore_set *set, const char *name);
/* RELEASE [SAVEPOINT] name, ROLLBACK TO [SAVEPOINT] name ran: false when tern saw no such savepoint. */
bool restore_set_release(struct restore_set *set, const char *name);
bool restore_set_rollback_to(struct restore_set *set, const char *name);
/* The open transaction ended: its changes hold (is_commit) or go. 0, or -ENOMEM (what committed is then
 * incomplete: the caller no longer trusts the set). */
TERN_MUST_USE int restore_set_end(struct restore_set *set, bool is_commit);
/* The changes of the open transaction not yet ended. */
static inline bool restore_set_has_pending(const struct restore_set *set) { return set->pending_count > 0; }
/* The committed entry of `name` (in any case), or -1. */
int restore_set_find(const struct restore_set *set, const char *name);

#endif
