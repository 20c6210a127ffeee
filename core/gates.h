/*
 * gates.h — what the admin console says of single databases: DISABLE (new clients of it are refused,
 * ENABLE lets them in again) and PAUSE <db> (its new transactions wait until RESUME <db>). Sessions ask
 * at login and at each transaction's start; with no database disabled or paused that is one atomic load.
 *
 * Threads: any; the table changes under its mutex, the counts are atomic. Names are databases as
 * clients ask for them.
 * Ownership: the runtime embeds the table (main's gates_init and gates_deinit); it holds names, no pointers.
 * Never: holds or wakes a session (the console bumps the pause generation and the workers look again), or
 * knows the PAUSE of every database (the runtime's is_paused).
 */
#ifndef TERN_GATES_H
#define TERN_GATES_H

#include "base.h"

#include <pthread.h>

/* Databases disabled or paused at once; a console command past it is refused (54000). */
#define GATES_MAX 64u

struct gates {
	pthread_mutex_t lock;
	struct gates_entry {
		char name[64];
		bool is_disabled;
		bool is_paused;
	} entries[GATES_MAX];
	uint32_t count;          /* lock */
	uint32_t disabled_count; /* atomic */
	uint32_t paused_count;   /* atomic */
};

void gates_init(struct gates *g);
void gates_deinit(struct gates *g);
bool gates_is_disabled(struct gates *g, const char *database);
bool gates_is_paused(struct gates *g, const char *database);
/* 0, -EALREADY (already so), -ENOSPC (GATES_MAX databases are disabled or paused) or -ENAMETOOLONG. */
TERN_MUST_USE int gates_set_disabled(struct gates *g, const char *database, bool is_disabled);
TERN_MUST_USE int gates_set_paused(struct gates *g, const char *database, bool is_paused);

#endif
