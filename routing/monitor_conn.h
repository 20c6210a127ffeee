/*
 * monitor_conn.h — one connection of the topology monitor to a server, and the one kind of query the
 * monitor runs on it: a simple Query answered by a single row of short text values.
 *
 * How it logs in (monitor.h names the user):
 * - when the login names a secret (auth_file holds an md5 hash or a SCRAM secret for the user, and the
 *   conninfo brings no password or passfile of its own): tern's own login (pool/login.h) answers with it,
 *   as the pool does for that user's clients. An md5 hash answers an md5 server; a SCRAM secret answers
 *   a scram-sha-256 server only with the ClientKey a client of the user proved in its own SCRAM login
 *   (monitor_learn_key); a server that asks for nothing takes either.
 * - otherwise libpq, with the plaintext password given (or none: trust, peer, .pgpass, the conninfo's).
 *
 * Threads: the monitor's only. Blocking: tern's own login and queries are bounded by the login's timeout;
 * libpq's login by connect_timeout, its queries by TCP alone (a server that stops answering without a reset
 * holds the monitor until the kernel gives up).
 * Ownership: the caller owns the connection from monitor_conn_open to monitor_conn_close.
 * Never: keeps a secret after the login, or parses more of an answer than the one row it asked for.
 */
#ifndef TERN_MONITOR_CONN_H
#define TERN_MONITOR_CONN_H

#include "server_auth.h"

#include <stdint.h>

/* The monitor's queries answer at most four columns of booleans, LSNs, numbers and on/off. */
#define MONITOR_CONN_FIELDS_MAX 4u
#define MONITOR_CONN_VALUE_MAX 64u
/* What the server's pg_stat_activity shows of the monitor's connections. */
#define MONITOR_CONN_APPLICATION_NAME "tern monitor"
/* The longest message the monitor reads on its own login's connection (a row, an error, a notice). */
#define MONITOR_CONN_IN_MAX 16384u

struct monitor_conn;

struct monitor_login {
	const char *conninfo; /* the server's, as in [servers] */
	const char *user;
	const char *password; /* libpq's, or NULL */
	const struct server_auth_secret *secret; /* tern's own login when set */
	const struct pool_tls_ops *tls;          /* TLS for tern's own login, as the conninfo's sslmode says */
	uint64_t timeout_ms;
};

/* One row: each value as text ("" for NULL). */
struct monitor_row {
	char value[MONITOR_CONN_FIELDS_MAX][MONITOR_CONN_VALUE_MAX];
};

/* 0: logged in. -EACCES: the server refused the credential, or asks for one tern does not have (err says
 * which: what to fix); any other <0: the server did not answer (down, unreachable, starting up). */
TERN_MUST_USE int monitor_conn_open(struct monitor_conn **out, const struct monitor_login *login,
				    struct pool_error *err);
/* Runs `sql`; 0 when its answer is exactly one row of `fields` values, each shorter than
 * MONITOR_CONN_VALUE_MAX. <0 otherwise: the connection is no longer usable, the caller closes it. */
TERN_MUST_USE int monitor_conn_query(struct monitor_conn *c, const char *sql, uint32_t fields,
				     struct monitor_row *row);
/* The server's version as PQserverVersion gives it (150018 for 15.18); 0 when unknown. */
uint32_t monitor_conn_server_version(const struct monitor_conn *c);
void monitor_conn_close(struct monitor_conn *c);

#endif
