/*
 * server_tls.h — tern as the TLS client of its servers, after the login: libpq makes the handshake and
 * checks the certificate as the server's conninfo says (sslmode, sslrootcert...; config.c writes [tls]
 * server_tls_* there), then the opener hands its TLS state over through these ops and the workers keep
 * using it over io_uring (tls.h's memory BIO). What libpq cannot be told is checked here: the cipher the
 * server chose against server_tls_ciphers.
 *
 * Threads: built at startup, then read-only; its ops run on the opener's thread.
 * Ownership: server_tls_create/destroy; the state adopt returns is the pool_conn's, freed by close.
 * Never: touches a session or a worker's ring.
 */
#ifndef TERN_SERVER_TLS_H
#define TERN_SERVER_TLS_H

#include "opener.h"

struct server_tls;

/* `ciphers`: server_tls_ciphers (OpenSSL's cipher list for TLS 1.2 and older; "", "default" or "secure":
 * whatever libpq and the server agree on). 0, or -EINVAL / -ENOMEM with `err` set. */
TERN_MUST_USE int server_tls_create(const char *ciphers, struct server_tls **out, char *err, size_t err_size);
void server_tls_destroy(struct server_tls *tls);
const struct pool_tls_ops *server_tls_ops(const struct server_tls *tls);

#endif
