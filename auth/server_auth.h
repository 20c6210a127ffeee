/*
 * server_auth.h — what tern answers a server's authentication requests with when it holds no plaintext
 * password for the user: the SCRAM ClientKey recovered from the client's own SCRAM proof (with the
 * auth_file's secret, which must be the server's), or the auth_file's md5 hash for an md5 server, as
 * PgBouncer does. A session fills a server_auth_secret when its client authenticates and stores it on
 * the pool key; the opener's thread runs server_auth_ops with a copy. Every refusal says what to fix,
 * never the server's address.
 *
 * Threads: server_auth_ops run on the opener's thread, one exchange per login, sharing nothing.
 * Ownership: an exchange is allocated by begin (with no secret when a profile=polar server's key has none:
 * that login answers trust alone) and wiped and freed by end.
 * Never: touches a socket, TLS or a session: the login (pool/login.c) reads the server's requests and sends
 * the answers written here.
 */
#ifndef TERN_SERVER_AUTH_H
#define TERN_SERVER_AUTH_H

#include "auth.h"
#include "opener.h"

struct server_auth_secret {
	enum auth_secret_kind kind; /* AUTH_SECRET_MD5 or AUTH_SECRET_SCRAM */
	bool has_client_key;        /* SCRAM: the client proved it (mode scram); without it no login */
	char user[AUTH_NAME_MAX + 1];
	char md5[AUTH_MD5_HASH_LEN + 1];
	struct scram_secret scram;
	uint8_t client_key[SCRAM_KEY_LEN];
};
static_assert(sizeof(struct server_auth_secret) <= POOL_SECRET_MAX, "a secret fits the pool key");

/* Fills `out` for a client that authenticated against `entry`; `scram` is its finished SCRAM exchange or
 * NULL. False when there is nothing to keep: a plaintext entry (libpq logs in with the password). */
TERN_MUST_USE bool server_auth_secret_from(const struct auth_user *entry, const struct scram_server *scram,
					   struct server_auth_secret *out);

extern const struct pool_auth_ops server_auth_ops;

#endif
