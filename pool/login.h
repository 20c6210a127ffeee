/*
 * login.h — a server login without libpq, for a key with no plaintext password: what the client's own
 * login left on its pool_db (the SCRAM ClientKey recovered from its proof, or the userlist's md5 hash)
 * answers the server, through auth ops core gives the opener (core owns the crypto; libpq 15 cannot log
 * in with a ClientKey). This file opens the socket, sends the startup packet, frames the answers and
 * collects ParameterStatus and BackendKeyData up to the first ReadyForQuery; it never parses more of a
 * message than the login needs.
 *
 * Threads: the opener's thread only. Non-blocking: the caller polls the socket for
 * pool_login_events() and calls pool_login_advance() when it is ready.
 * Ownership: the caller owns the struct; the socket passes to the pool_conn at success and is closed by
 * pool_login_abandon() otherwise.
 * Never: sends a password it was not given, or keeps a server's address in an error a client sees.
 */
#ifndef TERN_POOL_LOGIN_H
#define TERN_POOL_LOGIN_H

#include "pool.h"

#include <sys/socket.h>

/* The AuthenticationRequest codes a server sends and pool_auth_ops.answer is given (the protocol's). */
enum pool_auth_code {
	POOL_AUTH_OK = 0, /* also asked of the auth ops: an exchange must be complete by then */
	POOL_AUTH_CLEARTEXT = 3,
	POOL_AUTH_MD5 = 5,
	POOL_AUTH_SASL = 10,
	POOL_AUTH_SASL_CONTINUE = 11,
	POOL_AUTH_SASL_FINAL = 12,
};

/* How tern answers a server's authentication requests for a key with no plaintext password but a
 * secret core stored on its pool_db (pool_db_set_secret). Core implements them (it owns SCRAM and md5);
 * the opener calls them on its thread, one exchange per login. */
struct pool_auth_ops {
	/* Starts an answer with `secret` (a copy of the pool_db's); NULL when out of memory. */
	void *(*begin)(const void *secret, size_t secret_len);
	/* The body of the message that answers AuthenticationRequest `code` (`data`, `len`: what follows the
	 * code): PasswordMessage, SASLInitialResponse or SASLResponse. Returns its length, 0 when nothing is
	 * to be sent (SASLFinal, verified), or -1 with `err` set to what the client is told. Also called for
	 * AuthenticationOk (code 0): 0 when the exchange it answered is complete, else -1. */
	int (*answer)(void *exchange, uint32_t code, const uint8_t *data, size_t len, uint8_t *out, size_t out_size,
		      struct pool_error *err);
	void (*end)(void *exchange);
};

struct pool_conninfo;

/* TLS on a connection libpq logged in to over TLS (the server's conninfo asked for it); core implements
 * them (it owns OpenSSL), the opener calls them on its thread. */
struct pool_tls_ops {
	/* Makes libpq's TLS state (PQsslStruct) tern's, for the workers to keep using on the socket; names it
	 * in `name` ("TLSv1.3/TLS_AES_256_GCM_SHA384"). NULL with `err` set: the connection is refused (a
	 * cipher server_tls_ciphers does not allow, out of memory). */
	void *(*adopt)(void *ctx, void *ssl_state, char *name, size_t name_size, struct pool_error *err);
	/* Sends Terminate and close_notify on fd (best effort, never waiting) and frees the state. */
	void (*close)(void *tls, int fd);
	/* tern's own login over TLS (pool_login, after the server answered SSLRequest with 'S'): an OpenSSL
	 * connection on the non-blocking `fd` for `host`, set up from the conninfo's libpq keys (sslmode,
	 * sslrootcert, sslcert, sslkey, ssl_min/max_protocol_version) as libpq would. NULL with `err` set. At
	 * the login's end it is adopted (adopt), or ended with login_end. */
	void *(*login_begin)(void *ctx, const struct pool_conninfo *c, const char *host, int fd, struct pool_error *err);
	/* Moves a POOL_TLS_HANDSHAKE, _READ or _WRITE on (plaintext `data`, `len`): >0 (bytes, or 1 for a
	 * finished handshake), 0 to wait for *events on the socket, <0 with `err` set. */
	int (*login_io)(void *tls, int op, void *data, uint32_t len, short *events, struct pool_error *err);
	void (*login_end)(void *tls);
	void *ctx;
};
enum { POOL_TLS_HANDSHAKE = 0, POOL_TLS_READ, POOL_TLS_WRITE };

/* Keyword/value arrays for libpq's *Params calls: a server's conninfo with the keys the caller sets
 * itself left out, then the caller's own. libpq knows about 40 keywords; 64 is room for them all. */
#define POOL_CONNINFO_KEYS_MAX 64u

struct _PQconninfoOption;

struct pool_conninfo {
	struct _PQconninfoOption *parsed;
	const char *keys[POOL_CONNINFO_KEYS_MAX + 1]; /* NULL-terminated, as libpq wants them */
	const char *values[POOL_CONNINFO_KEYS_MAX + 1];
	uint32_t count;
};

/* Parses `conninfo`, keeping every key it sets that is not in `replaced` (NULL-terminated). 0, or
 * -EINVAL with `err` filled (libpq's words). Values point into the parse or the caller's strings: they
 * must outlive the connect call, and pool_conninfo_deinit frees the parse. */
TERN_MUST_USE int pool_conninfo_init(struct pool_conninfo *c, const char *conninfo, const char *const *replaced,
				     char *err, size_t err_size);
/* Adds key=value; a NULL value adds nothing. */
void pool_conninfo_set(struct pool_conninfo *c, const char *key, const char *value);
/* What the conninfo itself says of `key` (replaced or not); NULL when it says nothing. */
const char *pool_conninfo_get(const struct pool_conninfo *c, const char *key);
void pool_conninfo_deinit(struct pool_conninfo *c);

/* The startup packet and every answer fit: names are NAMEDATALEN, options are bounded by core's
 * login buffer (8 KiB), answers by SCRAM's client-final. */
#define POOL_LOGIN_OUT_MAX 12288u
/* A login's server messages are short (ParameterStatus, BackendKeyData, SASL payloads, an error);
 * a longer one is a server we do not understand. */
#define POOL_LOGIN_IN_MAX 8192u

/* Where a cancel for a connection tern logged in itself goes, with its key. */
struct pool_raw_cancel {
	struct sockaddr_storage addr;
	socklen_t addr_len;
	uint32_t backend_pid;
	uint32_t backend_secret;
};

/* TLS_ASK sends SSLRequest, TLS_ANSWER reads the server's 'S' or 'N', TLS_HANDSHAKE runs the handshake. */
enum pool_login_phase {
	POOL_LOGIN_CONNECTING = 1,
	POOL_LOGIN_TLS_ASK,
	POOL_LOGIN_TLS_ANSWER,
	POOL_LOGIN_TLS_HANDSHAKE,
	POOL_LOGIN_WRITING,
	POOL_LOGIN_READING,
};

struct pool_login {
	int fd;
	enum pool_login_phase phase;
	const struct pool_auth_ops *ops;
	void *exchange;
	struct pool_raw_cancel target;
	/* TLS as the conninfo's sslmode asks (not over a Unix socket, as libpq): the state login_begin made,
	 * whether a server without TLS is refused, what the state waits for (0: the phase's event). */
	const struct pool_tls_ops *tls_ops;
	void *tls;
	bool is_tls_required;
	short tls_events;
	uint8_t tls_asked; /* bytes of SSLRequest sent */
	uint8_t out[POOL_LOGIN_OUT_MAX];
	uint32_t out_len, out_sent;
	uint8_t in[POOL_LOGIN_IN_MAX];
	uint32_t in_len;
	struct pool_param params[POOL_PARAMS_MAX];
	uint32_t param_count;
	struct pool_error error;
};

/* Whom a login speaks for: the startup packet's user, database and options ("" for none), the
 * application_name (NULL: the conninfo's, else "tern"), and is_polar: it asks for the XID-import profile
 * (_polar_send_xact). */
struct pool_login_who {
	const char *user, *database, *options, *application_name;
	bool is_polar;
};

/* Starts a login to the first host of `conninfo` (host or hostaddr, port; a host starting with '/' is a
 * Unix socket directory; PGHOST/PGPORT and /var/run/postgresql:5432 when absent) for `who`, answering
 * with `secret` through `ops` (none, secret_len 0, for a polar server: trust alone), over TLS through
 * `tls` as the conninfo's sslmode says (prefer: TLS when the server takes it; require, verify-ca,
 * verify-full: a server without TLS is refused, 08004; NULL tls: never TLS, and require refused). 0, or <0 with
 * l->error set (nothing to abandon). */
TERN_MUST_USE int pool_login_start(struct pool_login *l, const char *conninfo, const struct pool_login_who *who,
				   const void *secret, size_t secret_len, const struct pool_auth_ops *ops,
				   const struct pool_tls_ops *tls);
/* POLLIN or POLLOUT: what the login waits for. */
short pool_login_events(const struct pool_login *l);
/* 1: logged in (l->fd, target, params are the connection's); 0: waiting; <0: failed, l->error set.
 * After 1 or <0 the exchange is over; the caller takes the fd (1) or calls pool_login_abandon (<0). */
TERN_MUST_USE int pool_login_advance(struct pool_login *l);
/* Closes the socket of a login that did not succeed. */
void pool_login_abandon(struct pool_login *l);
/* Sends a CancelRequest to target (blocking up to timeout_ms). 0 or -errno with err filled. */
TERN_MUST_USE int pool_login_cancel(const struct pool_raw_cancel *target, uint64_t timeout_ms, char *err,
				    size_t err_size);

#endif
