/*
 * admin.h — the admin console: the virtual database "tern" (or "pgbouncer", as PgBouncer's is named), open
 * to the users in [admin] admin_users,
 * answering PgBouncer's SHOW commands with its column names, order and types (admin_show.c), and
 * RELOAD, PAUSE/RESUME [db], SUSPEND, KILL, DISABLE/ENABLE, RECONNECT, WAIT_CLOSE and SHUTDOWN.
 *
 * Threads: runs on the session's worker; reads the pool through its snapshots and the config, which is
 * read-only; KILL, RECONNECT and WAIT_CLOSE call the pool (pool_reconnect, pool_close_pending,
 * pool_is_idle_for), which take each server's mutex for a moment. What lives in other workers' sessions (SHOW CLIENTS, SHOW STATS) is
 * asked of those workers through their mailboxes (worker_job), never read from here. RELOAD and
 * SHUTDOWN signal the main thread; PAUSE and RESUME flip the runtime's gate (session_pause_gate).
 * main registers admin_console in the runtime; sessions and workers reach it only through that handler.
 * Never: forwards anything to a server.
 */
#ifndef TERN_ADMIN_H
#define TERN_ADMIN_H

#include "session.h"

#define ADMIN_DATABASE "tern"
/* The name PgBouncer's console has: exporters and scripts written for PgBouncer connect to it. */
#define ADMIN_DATABASE_ALIAS "pgbouncer"

extern const struct session_console admin_console;

#endif
