/*
 * tls.h — TLS over memory: the server side toward clients, and the client side toward servers once a
 * login made the handshake (tls_conn_adopt). Ciphertext received from the socket is
 * fed in and plaintext comes out; plaintext goes in and the ciphertext to send comes out. It never
 * touches a socket, so io_uring keeps doing all I/O, and it knows nothing of sessions or of the
 * PostgreSQL wire format beyond the ALPN name "postgresql" (PostgreSQL 17's direct TLS).
 *
 * Threads: a tls_context is built once (at boot or reload) and is then read-only: any number of
 * workers create connections from it at once. A tls_conn is used by one thread at a time: a client
 * session's worker, or whichever thread holds the server connection (handed over under the pool's lock).
 * The only shared state is OpenSSL's own, plus one BIO method created under pthread_once.
 * Ownership: create/destroy for both. A tls_conn keeps OpenSSL's reference on the context's SSL_CTX
 * and copies the channel-binding data, so a context may be destroyed (say, replaced on reload) while
 * connections made from it live on. Neither keeps any pointer to caller memory after a call returns.
 *
 * Memory per connection: about 55 kB after a handshake and small messages (OpenSSL's SSL object and
 * its two record buffers, allocated at first use and kept, plus ours), at most about 125 kB after
 * large transfers: our two ciphertext buffers grow in 4 kB steps to their high-water mark, bounded
 * by TLS_CIPHERTEXT_IN_MAX and (in practice) TLS_CIPHERTEXT_OUT_MAX. Nothing is allocated per record
 * once warm. SSL_MODE_RELEASE_BUFFERS would save OpenSSL's 34 kB on idle connections at the price
 * of allocations per burst; it is not set.
 *
 * Return values follow tern's convention: 0 or a negative errno; functions that move bytes return
 * >0 bytes moved, 0 for "not now", <0 for an error. After an error a connection only hands out the
 * alert OpenSSL queued (take it and send it, then close); every other call returns the same error.
 */
#ifndef TERN_TLS_H
#define TERN_TLS_H

#include "base.h"

/* RFC 8446 §5.1: a record carries at most 2^14 bytes of plaintext. */
#define TLS_RECORD_PLAINTEXT_MAX 16384u
/* RFC 5246 §6.2.3: a record's ciphertext may exceed its plaintext by 2048 bytes, plus the 5-byte
 * header (OpenSSL's real overhead is under 100 bytes; this is the bound the protocol allows). */
#define TLS_RECORD_EXPANSION_MAX (2048u + 5u)
#define TLS_RECORD_CIPHERTEXT_MAX (TLS_RECORD_PLAINTEXT_MAX + TLS_RECORD_EXPANSION_MAX)
/* Ciphertext fed and not yet decrypted: one whole record always fits (so reading can always make
 * progress) and a default 16 kB receive buffer fits on top of a partial record. Feeding stops here. */
#define TLS_CIPHERTEXT_IN_MAX (32u * 1024u)
/* Ciphertext waiting to be taken that tls_conn_write_plaintext never makes larger: room for two
 * full records (each write call then hands the send queue up to 32 kB at once) while a slow taker
 * leaves at most this much here. */
#define TLS_CIPHERTEXT_OUT_MAX (40u * 1024u)
/* Hard bound on ciphertext waiting to be taken, whatever produced it. Writes stay under
 * TLS_CIPHERTEXT_OUT_MAX; the rest is room for what OpenSSL writes on its own (the handshake flight
 * with the certificate chain, alerts). A connection whose untaken output would pass it fails with
 * -ENOBUFS: a certificate chain about that large (which clients refuse anyway: OpenSSL clients take
 * 100 kB at most by default), or a caller that stopped taking. */
#define TLS_CIPHERTEXT_OUT_LIMIT (256u * 1024u)
/* tls-server-end-point data is one digest: EVP_MAX_MD_SIZE (SHA-512). */
#define TLS_CHANNEL_BINDING_MAX 64u
/* Room for OpenSSL's reason, the certificate verification result and our own words. */
#define TLS_ERROR_TEXT_MAX 256u
/* The ALPN protocol name PostgreSQL 17 defines for its wire protocol over TLS. */
#define TLS_ALPN_POSTGRESQL "postgresql"

struct tls_settings {
	const char *cert_file;    /* PEM: the server certificate, then any intermediate certificates */
	const char *key_file;     /* PEM, unencrypted: there is no one to type a passphrase */
	const char *ca_file;      /* NULL or "": no client certificate is asked for (see below) */
	const char *min_protocol; /* "TLSv1.2" (also for NULL or "") or "TLSv1.3", any case */
	const char *ciphers;      /* OpenSSL cipher string for TLS 1.2; NULL or "": OpenSSL's default.
				   * TLS 1.3 suites are always OpenSSL's defaults (all of them are AEAD). */
};

struct tls_context; /* opaque, read-only once created */
struct tls_conn;    /* opaque, one per client connection */

/* Builds the context: loads the certificate chain and key and checks that they match, applies the
 * protocol floor and ciphers, and computes the channel-binding data once. With a ca_file, clients
 * are asked for a certificate, as PostgreSQL does with ssl_ca_file: one that is sent must verify
 * against that file or the handshake fails; a client that sends none is still accepted, and
 * tls_conn_has_client_certificate() tells the two apart.
 * On failure `err` (if not NULL) names the file or setting and gives OpenSSL's reason, e.g.
 * `key file "/etc/tern/key.pem" does not match certificate file "/etc/tern/cert.pem": key values
 * mismatch`. Returns 0, -EINVAL (bad setting or file content), -ENOMEM, or the negative errno of
 * opening a file (-ENOENT, -EACCES...). Blocking file I/O: call it at boot or reload, not on a worker. */
TERN_MUST_USE int tls_context_create(const struct tls_settings *settings, struct tls_context **out, char *err,
				     size_t err_size);
void tls_context_destroy(struct tls_context *ctx);

/* tls-server-end-point data (RFC 5929 §4.1) for SCRAM-SHA-256-PLUS: the hash of the DER server
 * certificate with its signature's hash algorithm (for RSA-PSS, the one in its parameters), SHA-256
 * when that is MD5 or SHA-1, computed as libpq does. Returns its length and points *data at it; 0
 * when the signature algorithm has no separate hash (Ed25519, Ed448): libpq then fails any login
 * that offers channel binding, so SCRAM-SHA-256-PLUS must not be offered. */
size_t tls_context_channel_binding(const struct tls_context *ctx, const uint8_t **data);

/* A server-side connection that waits for the client's ClientHello. 0 or -ENOMEM. */
TERN_MUST_USE int tls_conn_create(const struct tls_context *ctx, struct tls_conn **out);
void tls_conn_destroy(struct tls_conn *conn);
/* tern as the client of a server: takes over `ssl_state` (an OpenSSL SSL whose handshake libpq finished
 * and whose login it read up to ReadyForQuery; PQsslStruct), taking a reference of its own. From here
 * the connection's bytes go through tern's memory BIO; libpq's later writes (at PQfinish) go nowhere
 * once the connection is destroyed, so destroy it before or after PQfinish, but do not use libpq's
 * connection meanwhile. 0, -EPROTO (plaintext waits in it: the server said more than its login) or
 * -ENOMEM. */
TERN_MUST_USE int tls_conn_adopt(void *ssl_state, struct tls_conn **out);

/* Hands in bytes received from the socket. Returns >0 bytes accepted (possibly fewer than `len`:
 * at most TLS_CIPHERTEXT_IN_MAX wait inside), 0 when full — call tls_conn_read_plaintext() until it
 * returns 0, after which feeding accepts again — or the connection's error. Nothing is decrypted
 * here; `data` is copied and not kept. */
TERN_MUST_USE int tls_conn_feed_ciphertext(struct tls_conn *conn, const uint8_t *data, uint32_t len);

/* Drives the handshake while it is under way, then decrypts. Returns >0 plaintext bytes written to
 * `out` (at most `cap`; call again for more), 0 when it needs more ciphertext fed, or <0:
 * -EPROTO (a TLS failure: bad record, refused protocol or ALPN, certificate rejected...),
 * -ESHUTDOWN (the client sent close_notify: an orderly end), -ENOBUFS (TLS_CIPHERTEXT_OUT_LIMIT
 * reached), -ENOMEM or -EIO. Handshake records and alerts it produces wait in the ciphertext
 * output: take them after every call. */
TERN_MUST_USE int tls_conn_read_plaintext(struct tls_conn *conn, uint8_t *out, uint32_t cap);

/* Encrypts up to `len` bytes of plaintext, a record (TLS_RECORD_PLAINTEXT_MAX) at a time, while the
 * record's largest possible ciphertext still fits under TLS_CIPHERTEXT_OUT_MAX with what waits to be
 * taken. Returns >0 bytes accepted (offer the rest again later), 0 when the output is full (take
 * ciphertext first), or the connection's error. `data` is not kept. Only once the handshake is done. */
TERN_MUST_USE int tls_conn_write_plaintext(struct tls_conn *conn, const uint8_t *data, uint32_t len);

/* Queues close_notify in the ciphertext output (take and send it before closing the socket). Later
 * writes and reads return -ESHUTDOWN. Does nothing before the handshake is done or after an error,
 * except the client's own close_notify, which this answers (as PostgreSQL does). */
void tls_conn_shutdown(struct tls_conn *conn);

/* Ciphertext that must be sent to the socket, in order: handshake records, application data, alerts.
 * Zero copy: points *data at the bytes waiting and returns how many (0 if none). They stay valid and
 * in place until consumed or until the next read, write or shutdown (feeding never moves them). */
uint32_t tls_conn_peek_ciphertext(const struct tls_conn *conn, const uint8_t **data);
/* Drops the first `len` bytes of the output (len <= what peek returned), once they were copied or sent. */
void tls_conn_consume_ciphertext(struct tls_conn *conn, uint32_t len);
/* Copies up to `cap` bytes of output to `out` and consumes them; returns how many (0 if none). */
uint32_t tls_conn_take_ciphertext(struct tls_conn *conn, uint8_t *out, uint32_t cap);
/* Bytes of ciphertext waiting to be taken. */
uint32_t tls_conn_ciphertext_len(const struct tls_conn *conn);

bool tls_conn_is_handshake_done(const struct tls_conn *conn);
/* True once the handshake selected ALPN "postgresql". A client that offered ALPN without it has
 * already failed the handshake (no_application_protocol alert); one that offered no ALPN is accepted,
 * as after an SSLRequest: a session that began with a direct ClientHello must refuse that case. */
bool tls_conn_is_alpn_postgresql(const struct tls_conn *conn);
/* True once the handshake is done with a client certificate that verified against the ca_file. */
bool tls_conn_has_client_certificate(const struct tls_conn *conn);
/* The common name (CN) of a client certificate that client_tls_ca_file vouched for, into out: false when
 * there is none, it has no CN, or the CN does not fit (or holds a NUL). */
bool tls_conn_client_common_name(const struct tls_conn *conn, char *out, size_t size);
/* For logs: "TLSv1.3", "TLS_AES_256_GCM_SHA384"; "" before the handshake is done. */
const char *tls_conn_protocol_name(const struct tls_conn *conn);
const char *tls_conn_cipher_name(const struct tls_conn *conn);
/* What tls_context_channel_binding() returned for the context the connection was made from. */
size_t tls_conn_channel_binding(const struct tls_conn *conn, const uint8_t **data);
/* 0, or the error that ended the connection; the text is readable ("" while there is none). */
int tls_conn_error(const struct tls_conn *conn);
const char *tls_conn_error_text(const struct tls_conn *conn);

#endif
