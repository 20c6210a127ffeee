/*
 * opener.h — the pool's own thread: opens server connections with libpq's non-blocking connect
 * (so every authentication method libpq knows works against the server), reports them with
 * pool_open_finished, closes connections the pool gave up, watches FREE connections' sockets so a
 * server that went away is noticed before a client is handed a dead connection, and keeps
 * min_pool_size warm.
 *
 * Threads: one opener thread; the hooks it provides are called from any thread and only queue work.
 * Ownership: a connection's PGconn lives on this thread's side only: workers use the plain socket and
 * hand the connection back through the close hook; PQfinish runs here.
 * Never: touches a client session, or blocks a worker.
 */
#ifndef TERN_OPENER_H
#define TERN_OPENER_H

#include "login.h"

struct pool_opener;

/* Creates the opener; its hooks are to be given to pool_init. The thread starts with _start. `auth`
 * (kept, may be NULL: every login goes through libpq) answers logins that have only a secret; `tls` (kept,
 * may be NULL when no server conninfo asks for TLS) takes over the TLS state of a login libpq made. */
TERN_MUST_USE int pool_opener_create(struct pool_opener **out, uint64_t connect_timeout_ms,
				     const struct pool_auth_ops *auth, const struct pool_tls_ops *tls);
struct pool_hooks pool_opener_hooks(struct pool_opener *opener);
TERN_MUST_USE int pool_opener_start(struct pool_opener *opener, struct pool *pool);
void pool_opener_set_connect_timeout(struct pool_opener *opener, uint64_t connect_timeout_ms);
/* Stops the thread after closing every queued connection and abandoning logins under way; the
 * hooks stay usable (closing on the caller's thread), so pool_deinit may follow. */
void pool_opener_stop(struct pool_opener *opener);
/* Stops the thread if it runs, then frees the opener. */
void pool_opener_destroy(struct pool_opener *opener);
/* Closes a connection's libpq handle and frees it; for connections never given to the pool. */
void pool_conn_free(struct pool_conn *conn);
/* Cancels whatever runs on conn, from the pool thread, after every job queued before it. The caller
 * holds conn (USED) when it asks; the cancel may still meet a later holder's query if conn changes
 * hands before the pool thread sends it (as with PgBouncer). Blocks the pool thread for the length of
 * one connection to the server. 0 or -ENOMEM. */
TERN_MUST_USE int pool_opener_cancel(struct pool_opener *opener, struct pool_conn *conn);
/* Thread-safe cancel of whatever runs on conn (libpq's cancel API; blocks up to the connect time). */
TERN_MUST_USE int pool_conn_cancel(struct pool_conn *conn, char *err, size_t err_size);
/* Maps a libpq connection failure message to the SQLSTATE the server would have sent. */
void pool_error_from_libpq(const char *message, struct pool_error *out);

#endif
