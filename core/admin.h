/*
 * admin.h — the admin console: the virtual database "tern", open to the users in [admin] admin_users,
 * answering PgBouncer's SHOW commands with PgBouncer's column names where the meaning is the same, and
 * RELOAD, PAUSE, RESUME and SHUTDOWN.
 *
 * Threads: runs on the session's worker; reads pool state under the pool's locks and the config,
 * which is read-only. What lives in other workers' sessions (SHOW CLIENTS, SHOW STATS) is asked of
 * those workers through their mailboxes (worker_job), never read from here. RELOAD and SHUTDOWN
 * signal the main thread; PAUSE and RESUME flip the runtime's gate (worker_pause_gate).
 * Never: forwards anything to a server.
 */
#ifndef TERN_ADMIN_H
#define TERN_ADMIN_H

#include "config.h"
#include "session.h"

#define ADMIN_DATABASE "tern"

/* True when `user` may open the admin console. */
bool admin_is_allowed(const struct tern_config *config, const char *user);
/* After authentication: the welcome, and the session answers queries itself from now on. */
void admin_welcome(struct session *s);
/* Client bytes for an admin session. */
void admin_on_bytes(struct session *s, const uint8_t *data, uint32_t len);
/* The worker's tick, while some admin session waits for PAUSE or RELOAD to finish. */
void admin_on_tick(struct worker *worker);

#endif
