/*
 * failovers.h — the last lost primary connections sessions survived or ended with (Transaction Replay,
 * recover.c), kept for SHOW FAILOVERS and /api/status: when, whose, which server, how far the request in
 * flight got, and what tern did (recover.h's decision, with its SQLSTATE).
 *
 * Threads: any (a mutex; failovers are rare, each adds one entry). Never: grows past FAILOVERS_KEPT.
 */
#ifndef TERN_FAILOVERS_H
#define TERN_FAILOVERS_H

#include "base.h"

#include <pthread.h>

#define FAILOVERS_KEPT 32u

struct failover_entry {
	uint64_t wall_ns; /* CLOCK_REALTIME */
	char user[64], database[64];
	char server[64];  /* the server whose connection was lost */
	char phase[20];   /* idle, not sent, sent, partly answered, copy */
	char action[12];  /* tr_decide's: rehome, reexecute, replay, fail, fail_next; close */
	char sqlstate[6]; /* what the client was told ("" for none) */
};

struct failover_log {
	pthread_mutex_t lock;
	uint64_t total;
	struct failover_entry entries[FAILOVERS_KEPT]; /* a ring: the newest at (total - 1) % FAILOVERS_KEPT */
};

void failover_log_init(struct failover_log *log);
void failover_log_deinit(struct failover_log *log);
void failover_log_add(struct failover_log *log, const struct failover_entry *entry);
/* The entries kept, newest first, into out (FAILOVERS_KEPT of them); their count. */
uint32_t failover_log_copy(struct failover_log *log, struct failover_entry *out);

#endif
