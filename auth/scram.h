/*
 * scram.h — the server side of SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL speaks it inside
 * SASLInitialResponse / SASLResponse, plus the stored secret ("SCRAM-SHA-256$iter:salt$stored:server").
 * It knows nothing of sockets, sessions or the PostgreSQL wire format: callers hand in the SASL payloads
 * and send back what it writes.
 *
 * Threads: a struct scram_server belongs to one session on one thread; there is no shared state except
 * the process-wide key behind scram_secret_mock(), created once under pthread_once.
 * Ownership: the caller owns every struct (a scram_server is 1280 bytes); the exchange
 * copies what it must keep into bounded buffers and keeps no pointer to caller memory.
 *
 * SASLprep (RFC 4013) is not applied to passwords: PostgreSQL applies it, so a non-ASCII password that
 * SASLprep would change yields a different secret here; ASCII passwords are unaffected.
 * Channel binding (SCRAM-SHA-256-PLUS, RFC 5802 sections 6-7) supports only tls-server-end-point
 * (RFC 5929), as PostgreSQL does: the caller, which owns the TLS connection, hands in the hash of the
 * server certificate with scram_server_set_channel_binding() and passes the client's mechanism choice to
 * scram_server_select_mechanism(); this module never sees TLS. A caller that does neither gets plain
 * SCRAM-SHA-256 exactly as before.
 * Never: sees a socket, a session, TLS (the binding's hash is handed in) or the PostgreSQL wire format.
 */
#ifndef TERN_SCRAM_H
#define TERN_SCRAM_H

#include "base.h"

#define SCRAM_KEY_LEN 32 /* SHA-256 output */
/* PostgreSQL writes 16-byte salts; 64 leaves room for hand-made secrets without unbounded storage. */
#define SCRAM_SALT_MAX 64
#define SCRAM_SALT_LEN_DEFAULT 16
/* Clients send 18-32 random bytes in base64 (libpq: 24 characters); 128 is generous and bounded. */
#define SCRAM_CLIENT_NONCE_MAX 128
/* Our own part of the nonce; the default is 18 random bytes in base64 (24 characters), as PostgreSQL. */
#define SCRAM_SERVER_NONCE_MAX 64
#define SCRAM_SERVER_NONCE_RAW_LEN 18
/* Bare client-first: "n=" + a NAMEDATALEN name escaped to 3x (189) + ",r=" + nonce, with room to spare. */
#define SCRAM_CLIENT_FIRST_BARE_MAX 512
/* "r=" + both nonces + ",s=" + base64 of the largest salt (88) + ",i=" + 10 digits fits in 384. */
#define SCRAM_SERVER_FIRST_MAX 384
/* Client-final is "c=..,r=..,p=.." plus optional extensions; longer is treated as malformed. The longest
 * valid form without extensions, c= of a 40-byte header and 64 bytes of binding (140 characters), both
 * nonces and the proof, is 384. */
#define SCRAM_CLIENT_FINAL_MAX 512
/* "v=" + base64 of a 32-byte signature (44) + NUL. */
#define SCRAM_SERVER_FINAL_MAX 64
/* gs2 header "p=<cb-name>,," — cb-names are short tokens; the one accepted, "p=tls-server-end-point,,",
 * is 24 bytes. A longer header is refused as malformed. */
#define SCRAM_GS2_HEADER_MAX 40
/* tls-server-end-point data is a hash of the server certificate with the certificate's own digest
 * (SHA-256 at least); SHA-512's 64 bytes is the longest in use. */
#define SCRAM_CHANNEL_BINDING_MAX 64
/* PostgreSQL's default scram_iterations; used for derived and mock secrets. */
#define SCRAM_ITERATIONS_DEFAULT 4096
/* PBKDF2 in OpenSSL counts iterations in an int. */
#define SCRAM_ITERATIONS_MAX 2147483647u

/* The verifier PostgreSQL stores in pg_authid.rolpassword. iterations == 0 means "no secret". */
struct scram_secret {
	uint32_t iterations;
	uint8_t salt[SCRAM_SALT_MAX];
	size_t salt_len;
	uint8_t stored_key[SCRAM_KEY_LEN];
	uint8_t server_key[SCRAM_KEY_LEN];
};

/* Parses "SCRAM-SHA-256$<iterations>:<salt base64>$<StoredKey base64>:<ServerKey base64>".
 * Returns 0 or -EINVAL (any deviation from that form, salt over SCRAM_SALT_MAX, keys not 32 bytes). */
TERN_MUST_USE int scram_secret_parse(const char *text, struct scram_secret *out);

/* Derives the secret PostgreSQL would store for `password` (no SASLprep, see above).
 * Returns 0, -EINVAL (salt_len 0 or over SCRAM_SALT_MAX, iterations 0 or over the max) or -EIO (OpenSSL). */
TERN_MUST_USE int scram_secret_from_password(const char *password, const uint8_t *salt, size_t salt_len,
					     uint32_t iterations, struct scram_secret *out);

/* A secret for a user that does not exist (or has no SCRAM secret): salt and keys are derived from
 * `user_name` and a random per-process key, so repeated attempts for one name see the same salt, as
 * they would for a real user, and no one can produce a matching proof. Prefer it to passing NULL to
 * scram_server_begin(), whose salt changes on every attempt. Returns 0 or -EIO (OpenSSL). */
TERN_MUST_USE int scram_secret_mock(const char *user_name, struct scram_secret *out);

enum scram_step {
	SCRAM_STEP_NONE = 0,   /* not begun, or deinitialised */
	SCRAM_STEP_BEGUN,      /* waiting for client-first */
	SCRAM_STEP_FIRST_SENT, /* server-first written, waiting for client-final */
	SCRAM_STEP_FINAL_SENT, /* client side: client-final written, waiting for server-final */
	SCRAM_STEP_DONE,       /* proof verified */
	SCRAM_STEP_FAILED,     /* any error: the exchange is over */
};

struct scram_server {
	enum scram_step step;
	struct scram_secret secret;
	char server_nonce[SCRAM_SERVER_NONCE_MAX + 1];
	size_t server_nonce_len;
	/* gs2-header as received ("n,,", "y,,", "p=tls-server-end-point,,"); c= in client-final must decode
	 * to exactly this, followed by channel_binding when SCRAM-SHA-256-PLUS was selected. */
	char gs2_header[SCRAM_GS2_HEADER_MAX];
	size_t gs2_header_len;
	/* tls-server-end-point data of this connection; length 0 means channel binding is unavailable. */
	uint8_t channel_binding[SCRAM_CHANNEL_BINDING_MAX];
	size_t channel_binding_len;
	/* The client selected SCRAM-SHA-256-PLUS; implies channel_binding_len > 0. */
	bool channel_binding_is_used;
	char client_first_bare[SCRAM_CLIENT_FIRST_BARE_MAX];
	size_t client_first_bare_len;
	/* Starts "r=<client nonce><server nonce>,", so the combined nonce is server_first + 2. */
	char server_first[SCRAM_SERVER_FIRST_MAX];
	size_t server_first_len;
	size_t nonce_len;
	/* Recovered from the client's proof once the step is DONE (ClientProof XOR ClientSignature): with
	 * the secret's salt, iterations and ServerKey it logs in to a server that stores the same secret,
	 * with no password known (scram_client_begin). Wiped by deinit. */
	uint8_t client_key[SCRAM_KEY_LEN];
};

/* Starts an exchange; `s` needs no prior initialisation. `secret` is copied; NULL means an unknown
 * user: the exchange runs against a random secret and fails only at the proof with -EACCES, as
 * PostgreSQL does, so a client cannot tell a missing user from a wrong password in one attempt
 * (see scram_secret_mock() for several attempts). A non-NULL secret must have iterations > 0.
 * `server_nonce` is only the server's part of the nonce (it is appended to the client's); NULL makes
 * SCRAM_SERVER_NONCE_RAW_LEN random bytes in base64. A given nonce must be 1..SCRAM_SERVER_NONCE_MAX
 * printable ASCII characters other than ','. Returns 0, -EINVAL (bad nonce) or -EIO (OpenSSL). */
TERN_MUST_USE int scram_server_begin(struct scram_server *s, const struct scram_secret *secret,
				     const char *server_nonce);

/* Makes channel binding available: `data` (1..SCRAM_CHANNEL_BINDING_MAX bytes) is the connection's
 * tls-server-end-point hash and is copied. Call it after scram_server_begin() and before the mechanism is
 * selected, only on a TLS connection whose certificate yields that hash; the caller then offers
 * SCRAM-SHA-256-PLUS besides SCRAM-SHA-256. len 0 leaves channel binding unavailable. */
void scram_server_set_channel_binding(struct scram_server *s, const uint8_t *data, size_t len);

/* `mechanism` is the name the client chose in SASLInitialResponse. "SCRAM-SHA-256" is always accepted,
 * "SCRAM-SHA-256-PLUS" only once a binding is set. Returns 0 or -ENOTSUP (any other name, or PLUS without
 * a binding); an error ends the exchange. Optional: without it the mechanism is SCRAM-SHA-256. Call it
 * after scram_server_begin() and any scram_server_set_channel_binding(), before scram_server_first(). */
TERN_MUST_USE int scram_server_select_mechanism(struct scram_server *s, const char *mechanism);

/* `client_first` is the SASLInitialResponse payload. Writes server-first-message ("r=..,s=..,i=..")
 * to `out` with a terminating NUL and returns its length without the NUL, or -ENOSPC, or the refusals
 * PostgreSQL makes:
 * -EPROTO: malformed, over-long, authzid or "m=" present; a gs2 flag that contradicts the mechanism
 *   ("p" under SCRAM-SHA-256, "n" or "y" under SCRAM-SHA-256-PLUS); or "y" under SCRAM-SHA-256 while a
 *   binding is set, since we offered PLUS and the client's belief that we did not means a downgrade.
 * -ENOTSUP: under SCRAM-SHA-256-PLUS, a channel binding type other than tls-server-end-point.
 * Any error ends the exchange (step FAILED). Must be called once, after scram_server_begin(). */
TERN_MUST_USE int scram_server_first(struct scram_server *s, const uint8_t *client_first, size_t len,
				     char *out, size_t out_size);

/* `client_final` is the SASLResponse payload. Checks c= (base64 of the gs2 header, followed under
 * SCRAM-SHA-256-PLUS by the channel binding data, RFC 5802 section 7's cbind-input), r= (the combined
 * nonce) and p= (the proof). Writes server-final-message ("v=...") with a NUL and returns its length,
 * or -EPROTO (malformed, nonce mismatch), -EKEYREJECTED (under PLUS, c= carries other binding data: the
 * client saw another certificate), -EACCES (wrong password or unknown user),
 * -ENOSPC or -EIO (OpenSSL). Any error ends the exchange. Must be called once, after scram_server_first()
 * succeeded. */
TERN_MUST_USE int scram_server_final(struct scram_server *s, const uint8_t *client_final, size_t len,
				     char *out, size_t out_size);

static inline bool scram_server_is_done(const struct scram_server *s) { return s->step == SCRAM_STEP_DONE; }

/* Wipes the keys and messages; `s` may be begun again afterwards. */
void scram_server_deinit(struct scram_server *s);

/* ---- the client side: tern logging in to a server with a ClientKey recovered from a client's proof ----
 * No password is known: the proof is ClientKey XOR HMAC(H(ClientKey), AuthMessage), and the server is
 * checked with the ServerKey of the same secret. That works only when the server stores exactly that
 * secret (same salt and iteration count), which scram_client_final checks first. Plain SCRAM-SHA-256
 * only: the client-first says "n" (no channel binding), whether or not the login runs over TLS. */
struct scram_client {
	enum scram_step step;
	struct scram_secret secret; /* salt and iterations the server must offer; ServerKey checks it */
	uint8_t client_key[SCRAM_KEY_LEN];
	char client_first_bare[SCRAM_CLIENT_FIRST_BARE_MAX]; /* "n=,r=<nonce>" */
	size_t client_first_bare_len;
	uint8_t server_signature[SCRAM_KEY_LEN]; /* what server-final must carry */
};

/* Starts an exchange with a fresh random nonce; `secret` (iterations > 0) and `client_key` are copied.
 * Returns 0 or -EIO (OpenSSL). */
TERN_MUST_USE int scram_client_begin(struct scram_client *c, const struct scram_secret *secret,
				     const uint8_t client_key[SCRAM_KEY_LEN]);
/* Writes client-first ("n,,n=,r=<nonce>") with a NUL; returns its length or -ENOSPC. */
TERN_MUST_USE int scram_client_first(struct scram_client *c, char *out, size_t out_size);
/* `server_first` is the AuthenticationSASLContinue payload. Writes client-final with a NUL and returns its
 * length, or -EPROTO (malformed, or a nonce that does not extend ours), -EKEYREJECTED (the server's salt
 * or iteration count is not the secret's: it stores another secret), -ENOSPC or -EIO. */
TERN_MUST_USE int scram_client_final(struct scram_client *c, const uint8_t *server_first, size_t len, char *out,
				     size_t out_size);
/* `server_final` is the AuthenticationSASLFinal payload. 0 when it carries the server signature the
 * secret's ServerKey gives; -EACCES when it carries another, -EPROTO when malformed. */
TERN_MUST_USE int scram_client_verify(struct scram_client *c, const uint8_t *server_final, size_t len);
void scram_client_deinit(struct scram_client *c);

#endif
