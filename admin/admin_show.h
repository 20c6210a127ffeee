/*
 * admin_show.h — the tables of the admin console's SHOW commands, with PgBouncer's columns, order and
 * types (a test compares them with Debian's PgBouncer, command by command), filled from the pool's
 * snapshots, the config and, for what lives in other workers, the rows those workers sent.
 *
 * Threads: the console session's worker, except admin_show_client_row, which each worker runs for its
 * own sessions. Never: takes a pool mutex (snapshots only) or touches another worker's sessions.
 */
#ifndef TERN_ADMIN_SHOW_H
#define TERN_ADMIN_SHOW_H

#include "admin_reply.h"
#include "session.h"
#include "worker.h"

#include <time.h>

/* The tables the console answers at once, each (reply, runtime), for admin.c's command table. */
void admin_show_version(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_digests(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_shadow(struct admin_reply *r, struct tern_runtime *rt);
/* SHOW FAILOVERS: the last lost primary connections (failovers.h), newest first. */
void admin_show_failovers(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_config(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_pools(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_servers(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_databases(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_users(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_lists(struct admin_reply *r, struct tern_runtime *rt);
void admin_show_help(struct admin_reply *r, struct tern_runtime *rt);

/* SHOW CLIENTS: the columns, and one session's row (on its own worker). */
void admin_show_client_columns(struct admin_reply *r);
void admin_show_client_row(struct admin_reply *r, struct session *s, uint64_t now_ns, const struct timespec *wall);
/* SHOW STATS: the columns, and one database's row from the workers' sums. */
void admin_show_stats_columns(struct admin_reply *r);
void admin_show_stats_row(struct admin_reply *r, const struct worker_db_report *row);

#endif
