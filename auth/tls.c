/*
 * tls.c — TLS over tern's own memory BIO (tern as the server of its clients, or as the client of a
 * server whose handshake a login made). One BIO per connection serves both directions:
 * OpenSSL reads ciphertext from conn->in (filled by tls_conn_feed_ciphertext) and writes ciphertext to
 * conn->out (emptied by tls_conn_take_ciphertext). Both are linear buffers that grow to their
 * high-water mark under a hard bound, so peeking at the output needs no copy and nothing is allocated
 * per record once a connection has warmed up.
 */
#include "tls.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

/* Ciphertext buffers grow in steps of this (a handshake flight with a short chain, or a few small
 * records, fits the first): a few reallocations while a connection warms up, little slack after. */
#define TLS_BUFFER_CAP_STEP 4096u

static_assert(TLS_CIPHERTEXT_IN_MAX >= TLS_RECORD_CIPHERTEXT_MAX, "one whole record must fit the input");
static_assert(TLS_CIPHERTEXT_OUT_MAX >= 2 * TLS_RECORD_CIPHERTEXT_MAX, "two full records per write call");
static_assert(TLS_CIPHERTEXT_OUT_MAX < TLS_CIPHERTEXT_OUT_LIMIT, "writes stop below the hard output bound");
static_assert(TLS_CIPHERTEXT_OUT_LIMIT <= INT_MAX / 2, "byte counts are returned as int");
static_assert(TLS_CHANNEL_BINDING_MAX == EVP_MAX_MD_SIZE, "a digest must fit");
static_assert(TLS_CIPHERTEXT_IN_MAX % TLS_BUFFER_CAP_STEP == 0 && TLS_CIPHERTEXT_OUT_LIMIT % TLS_BUFFER_CAP_STEP == 0,
	      "growing by steps reaches the bounds exactly");

struct tls_context {
	SSL_CTX *ssl_ctx;
	uint8_t channel_binding[TLS_CHANNEL_BINDING_MAX];
	size_t channel_binding_len;
};

/* Bytes data[start, end) are held; cap grows by TLS_BUFFER_CAP_STEP, never past the owner's bound. */
struct tls_buffer {
	uint8_t *data;
	uint32_t start;
	uint32_t end;
	uint32_t cap;
};

struct tls_conn {
	SSL *ssl;
	struct tls_buffer in;  /* ciphertext fed, not yet read by OpenSSL */
	struct tls_buffer out; /* ciphertext written by OpenSSL, not yet taken */
	int error;             /* 0, or what ended the connection; every later call returns it */
	bool is_handshake_done;
	/* Set inside OpenSSL's callbacks, turned into an error code and text when the call returns. */
	bool is_alpn_refused;
	bool is_peer_closed; /* the client sent close_notify: tern may still answer with its own */
	bool is_out_over_limit;
	bool is_out_of_memory;
	bool is_adopted; /* the SSL came from libpq, which frees it too (tls_conn_adopt) */
	uint8_t channel_binding[TLS_CHANNEL_BINDING_MAX];
	size_t channel_binding_len;
	char error_text[TLS_ERROR_TEXT_MAX];
};

/* ---- growing linear buffers ---- */

static uint32_t tls_buffer_len(const struct tls_buffer *b) { return b->end - b->start; }

/* Makes room for `extra` bytes after the end: compacts first, then grows. -ENOBUFS when the bytes
 * held plus `extra` would pass `max`, -ENOMEM when memory ran out. */
static int tls_buffer_reserve(struct tls_buffer *b, size_t extra, uint32_t max)
{
	uint32_t len = tls_buffer_len(b);
	TERN_DEBUG_ASSERT(b->start <= b->end && b->end <= b->cap && len <= max);
	if (extra > (size_t)(max - len))
		return -ENOBUFS;
	if (b->cap - b->end >= extra)
		return 0;
	if (b->start > 0) {
		memmove(b->data, b->data + b->start, len);
		b->start = 0;
		b->end = len;
		if (b->cap - b->end >= extra)
			return 0;
	}
	uint32_t need = len + (uint32_t)extra;
	uint32_t cap = TERN_MIN((need + TLS_BUFFER_CAP_STEP - 1) / TLS_BUFFER_CAP_STEP * TLS_BUFFER_CAP_STEP, max);
	TERN_ASSERT(cap >= need && cap > b->cap);
	uint8_t *data = realloc(b->data, cap);
	if (data == NULL)
		return -ENOMEM;
	b->data = data;
	b->cap = cap;
	return 0;
}

static void tls_buffer_consume(struct tls_buffer *b, uint32_t len)
{
	TERN_ASSERT(len <= tls_buffer_len(b));
	b->start += len;
	if (b->start == b->end)
		b->start = b->end = 0;
}

static void tls_buffer_deinit(struct tls_buffer *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* ---- the BIO OpenSSL reads and writes ciphertext through ---- */

static int tls_bio_write(BIO *bio, const char *data, size_t len, size_t *written)
{
	struct tls_conn *conn = BIO_get_data(bio);
	BIO_clear_retry_flags(bio);
	*written = 0;
	if (conn == NULL) { /* an adopted SSL outliving its tls_conn (tls_conn_destroy): into nothing */
		*written = len;
		return 1;
	}
	/* No retry flag on failure: the connection is over, and OpenSSL must not hold half a record
	 * for a retry that will never come. */
	int rc = tls_buffer_reserve(&conn->out, len, TLS_CIPHERTEXT_OUT_LIMIT);
	if (rc < 0) {
		if (rc == -ENOBUFS)
			conn->is_out_over_limit = true;
		else
			conn->is_out_of_memory = true;
		return 0;
	}
	memcpy(conn->out.data + conn->out.end, data, len);
	conn->out.end += (uint32_t)len;
	*written = len;
	return 1;
}

static int tls_bio_read(BIO *bio, char *out, size_t cap, size_t *read_len)
{
	struct tls_conn *conn = BIO_get_data(bio);
	BIO_clear_retry_flags(bio);
	uint32_t n = conn != NULL ? (uint32_t)TERN_MIN((size_t)tls_buffer_len(&conn->in), cap) : 0;
	*read_len = n;
	if (n == 0) {
		BIO_set_retry_read(bio); /* SSL_ERROR_WANT_READ: feed more */
		return 0;
	}
	memcpy(out, conn->in.data + conn->in.start, n);
	tls_buffer_consume(&conn->in, n);
	return 1;
}

static long tls_bio_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
	(void)num;
	(void)ptr;
	const struct tls_conn *conn = BIO_get_data(bio);
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1; /* written bytes already wait in conn->out for the caller */
	case BIO_CTRL_PENDING:
		return conn != NULL ? (long)tls_buffer_len(&conn->in) : 0;
	case BIO_CTRL_WPENDING:
		return conn != NULL ? (long)tls_buffer_len(&conn->out) : 0;
	default:
		return 0; /* not supported: no kTLS, no duplication, no EOF (the socket is not ours) */
	}
}

static int tls_bio_create(BIO *bio)
{
	BIO_set_init(bio, 1);
	return 1;
}

static int tls_bio_destroy(BIO *bio)
{
	BIO_set_data(bio, NULL);
	BIO_set_init(bio, 0);
	return 1;
}

/* Created once per process and never changed after: contexts come and go on reload, connections
 * may outlive their context, so the method cannot belong to either. */
static pthread_once_t tls_bio_once = PTHREAD_ONCE_INIT;
static BIO_METHOD *tls_bio_method;

static void tls_bio_method_create(void)
{
	int index = BIO_get_new_index();
	if (index == -1)
		return;
	BIO_METHOD *method = BIO_meth_new(index | BIO_TYPE_SOURCE_SINK, "tern memory");
	if (method == NULL)
		return;
	if (BIO_meth_set_write_ex(method, tls_bio_write) != 1 || BIO_meth_set_read_ex(method, tls_bio_read) != 1 ||
	    BIO_meth_set_ctrl(method, tls_bio_ctrl) != 1 || BIO_meth_set_create(method, tls_bio_create) != 1 ||
	    BIO_meth_set_destroy(method, tls_bio_destroy) != 1) {
		BIO_meth_free(method);
		return;
	}
	tls_bio_method = method;
}

/* ---- OpenSSL's error queue, in words ---- */

/* Appends the reasons queued on this thread, earliest (most specific) first, skipping a reason equal
 * to the one before, and empties the queue. Returns the negative errno they point at: a system
 * error's own, -ENOMEM for an allocation failure, else `fallback`. */
static int tls_error_queue_drain(char *text, size_t text_size, int fallback)
{
	int rc = fallback;
	bool is_errno_found = false;
	const char *previous = NULL;
	unsigned long e;
	size_t at = strnlen(text, text_size);
	while ((e = ERR_get_error()) != 0) {
		char system_text[128];
		const char *reason;
		if (ERR_SYSTEM_ERROR(e)) {
			int system_errno = ERR_GET_REASON(e);
			if (!is_errno_found && system_errno > 0) {
				rc = -system_errno;
				is_errno_found = true;
			}
			reason = strerror_r(system_errno, system_text, sizeof(system_text)); /* GNU: thread-safe */
		} else {
			if (!is_errno_found && ERR_GET_REASON(e) == ERR_R_MALLOC_FAILURE) {
				rc = -ENOMEM;
				is_errno_found = true;
			}
			reason = ERR_reason_error_string(e);
			if (reason == NULL) {
				snprintf(system_text, sizeof(system_text), "OpenSSL error %#lx", e);
				reason = system_text;
			}
		}
		/* Library layers often repeat the reason below them ("system lib", "PEM lib"). */
		bool is_repeat = previous != NULL && strcmp(previous, reason) == 0;
		bool is_layer_only = strcmp(reason, "system lib") == 0 || strcmp(reason, "PEM lib") == 0;
		if (!ERR_SYSTEM_ERROR(e) && reason != system_text)
			previous = reason; /* OpenSSL's static strings: safe to keep across iterations */
		if (is_repeat || (is_layer_only && at > 0) || at + 1 >= text_size)
			continue;
		int n = snprintf(text + at, text_size - at, "%s%s", at > 0 ? ": " : "", reason);
		if (n > 0)
			at = TERN_MIN(at + (size_t)n, text_size - 1);
	}
	return rc;
}

/* Writes "<what>: <OpenSSL's reasons>" to err (if any) and returns the errno that suits it. */
static int tls_context_fail(char *err, size_t err_size, int fallback, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int tls_context_fail(char *err, size_t err_size, int fallback, const char *fmt, ...)
{
	char text[TLS_ERROR_TEXT_MAX * 2] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	int rc = tls_error_queue_drain(text, sizeof(text), fallback);
	if (err != NULL && err_size > 0)
		snprintf(err, err_size, "%s", text);
	return rc;
}

/* ---- the context ---- */

/* tern runs unattended: an encrypted key must fail at once, never prompt on a terminal. */
static int tls_passphrase_refuse(char *buf, int size, int rwflag, void *userdata)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	*(bool *)userdata = true;
	return -1;
}

/* PostgreSQL 17 direct TLS (sslnegotiation=direct) requires the server to select "postgresql"; a
 * client offering other protocols only is refused with no_application_protocol (RFC 7301 §3.2). A
 * client offering no ALPN never reaches this callback and is accepted, as after an SSLRequest. */
static int tls_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *out_len, const unsigned char *in,
			   unsigned int in_len, void *arg)
{
	(void)arg;
	static const char name[] = TLS_ALPN_POSTGRESQL;
	const size_t name_len = sizeof(name) - 1;
	/* OpenSSL checked the list's framing; walk it defensively all the same. */
	for (unsigned int at = 0; at < in_len;) {
		unsigned int len = in[at++];
		if (len > in_len - at)
			break;
		if (len == name_len && memcmp(in + at, name, name_len) == 0) {
			*out = (const unsigned char *)name;
			*out_len = (unsigned char)name_len;
			return SSL_TLSEXT_ERR_OK;
		}
		at += len;
	}
	struct tls_conn *conn = SSL_get_app_data(ssl);
	if (conn != NULL)
		conn->is_alpn_refused = true;
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* RFC 5929 §4.1, computed the way libpq does (X509_get_signature_info, then SHA-256 for MD5/SHA-1),
 * since the client's value is what ours must equal. Leaves *len at 0 when there is no such hash. */
static int tls_channel_binding_compute(X509 *cert, uint8_t out[TLS_CHANNEL_BINDING_MAX], size_t *len)
{
	*len = 0;
	int md_nid = NID_undef;
	if (X509_get_signature_info(cert, &md_nid, NULL, NULL, NULL) != 1)
		return 0;
	const EVP_MD *md = md_nid == NID_md5 || md_nid == NID_sha1 ? EVP_sha256() : EVP_get_digestbynid(md_nid);
	if (md == NULL)
		return 0;
	unsigned int n = 0;
	if (X509_digest(cert, md, out, &n) != 1)
		return -EIO;
	TERN_ASSERT(n > 0 && n <= TLS_CHANNEL_BINDING_MAX);
	*len = n;
	return 0;
}

static bool tls_text_is_set(const char *text) { return text != NULL && text[0] != '\0'; }

static int tls_context_configure(struct tls_context *ctx, const struct tls_settings *settings, char *err,
				 size_t err_size)
{
	SSL_CTX *ssl_ctx = ctx->ssl_ctx;

	int min_version = TLS1_2_VERSION;
	if (tls_text_is_set(settings->min_protocol)) {
		if (strcasecmp(settings->min_protocol, "TLSv1.3") == 0)
			min_version = TLS1_3_VERSION;
		else if (strcasecmp(settings->min_protocol, "TLSv1.2") != 0)
			return tls_context_fail(err, err_size, -EINVAL,
						"minimum TLS protocol \"%s\": expected TLSv1.2 or TLSv1.3",
						settings->min_protocol);
	}
	if (SSL_CTX_set_min_proto_version(ssl_ctx, min_version) != 1)
		return tls_context_fail(err, err_size, -EINVAL, "minimum TLS protocol %d", min_version);

	/* No resumption: libpq never resumes a session, so tickets would only cost a ticket encryption
	 * and ~250 bytes per connection, and a cache would be one more lock shared by every worker.
	 * A never-rotated ticket key would also weaken forward secrecy. */
	SSL_CTX_set_session_cache_mode(ssl_ctx, SSL_SESS_CACHE_OFF);
	if (SSL_CTX_set_num_tickets(ssl_ctx, 0) != 1)
		return tls_context_fail(err, err_size, -EIO, "disabling TLS 1.3 session tickets");
	/* No renegotiation (TLS 1.2): a client could make us redo the expensive half of a handshake at
	 * will, and PostgreSQL refuses it too. No compression: CRIME. Our cipher order wins, as with
	 * PostgreSQL's ssl_prefer_server_ciphers default. */
	SSL_CTX_set_options(ssl_ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
					     SSL_OP_CIPHER_SERVER_PREFERENCE);
	/* Partial writes are not needed (one record per SSL_write) but moving buffers are: a caller may
	 * offer the same bytes again from another address. */
	SSL_CTX_set_mode(ssl_ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (SSL_CTX_set_dh_auto(ssl_ctx, 1) != 1)
		return tls_context_fail(err, err_size, -EIO, "enabling DHE parameters");
	/* Required by OpenSSL whenever client certificates are verified and sessions could be reused. */
	static const unsigned char session_id_context[] = "tern";
	if (SSL_CTX_set_session_id_context(ssl_ctx, session_id_context, sizeof(session_id_context) - 1) != 1)
		return tls_context_fail(err, err_size, -EIO, "setting the session id context");

	bool is_passphrase_asked = false;
	SSL_CTX_set_default_passwd_cb(ssl_ctx, tls_passphrase_refuse);
	SSL_CTX_set_default_passwd_cb_userdata(ssl_ctx, &is_passphrase_asked);

	if (SSL_CTX_use_certificate_chain_file(ssl_ctx, settings->cert_file) != 1)
		return tls_context_fail(err, err_size, -EINVAL, "certificate file \"%s\"", settings->cert_file);
	int rc = 0;
	if (SSL_CTX_use_PrivateKey_file(ssl_ctx, settings->key_file, SSL_FILETYPE_PEM) != 1) {
		if (is_passphrase_asked)
			rc = tls_context_fail(err, err_size, -EINVAL,
					      "key file \"%s\": protected by a passphrase, which tern cannot ask for",
					      settings->key_file);
		else if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
			rc = tls_context_fail(err, err_size, -EINVAL,
					      "key file \"%s\" does not match certificate file \"%s\"",
					      settings->key_file, settings->cert_file);
		else
			rc = tls_context_fail(err, err_size, -EINVAL, "key file \"%s\"", settings->key_file);
	} else if (SSL_CTX_check_private_key(ssl_ctx) != 1) {
		rc = tls_context_fail(err, err_size, -EINVAL, "key file \"%s\" does not match certificate file \"%s\"",
				      settings->key_file, settings->cert_file);
	}
	SSL_CTX_set_default_passwd_cb(ssl_ctx, NULL);
	SSL_CTX_set_default_passwd_cb_userdata(ssl_ctx, NULL);
	if (rc < 0)
		return rc;

	if (tls_text_is_set(settings->ca_file)) {
		if (SSL_CTX_load_verify_locations(ssl_ctx, settings->ca_file, NULL) != 1)
			return tls_context_fail(err, err_size, -EINVAL, "CA file \"%s\"", settings->ca_file);
		/* The names sent in CertificateRequest let a client pick the right certificate. */
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(settings->ca_file);
		if (names == NULL)
			return tls_context_fail(err, err_size, -EINVAL, "CA file \"%s\": no certificate names",
						settings->ca_file);
		SSL_CTX_set_client_CA_list(ssl_ctx, names);
		/* Ask, verify what is sent, require nothing: what a missing certificate means is the
		 * caller's policy (tls_conn_has_client_certificate). */
		SSL_CTX_set_verify(ssl_ctx, SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE, NULL);
	}

	if (tls_text_is_set(settings->ciphers) && SSL_CTX_set_cipher_list(ssl_ctx, settings->ciphers) != 1)
		return tls_context_fail(err, err_size, -EINVAL, "cipher list \"%s\"", settings->ciphers);

	SSL_CTX_set_alpn_select_cb(ssl_ctx, tls_alpn_select, NULL);

	X509 *cert = SSL_CTX_get0_certificate(ssl_ctx);
	TERN_ASSERT(cert != NULL);
	rc = tls_channel_binding_compute(cert, ctx->channel_binding, &ctx->channel_binding_len);
	if (rc < 0)
		return tls_context_fail(err, err_size, rc, "certificate file \"%s\": hashing the certificate",
					settings->cert_file);
	return 0;
}

int tls_context_create(const struct tls_settings *settings, struct tls_context **out, char *err, size_t err_size)
{
	TERN_ASSERT(settings != NULL && out != NULL);
	*out = NULL;
	if (err != NULL && err_size > 0)
		err[0] = '\0';
	ERR_clear_error();
	if (!tls_text_is_set(settings->cert_file))
		return tls_context_fail(err, err_size, -EINVAL, "no certificate file is set");
	if (!tls_text_is_set(settings->key_file))
		return tls_context_fail(err, err_size, -EINVAL, "no key file is set");
	int once_rc = pthread_once(&tls_bio_once, tls_bio_method_create);
	TERN_ASSERT(once_rc == 0);
	if (tls_bio_method == NULL)
		return tls_context_fail(err, err_size, -ENOMEM, "creating the TLS memory BIO method");

	struct tls_context *ctx = calloc(1, sizeof(*ctx));
	if (ctx == NULL)
		return tls_context_fail(err, err_size, -ENOMEM, "out of memory");
	ctx->ssl_ctx = SSL_CTX_new(TLS_server_method());
	if (ctx->ssl_ctx == NULL) {
		free(ctx);
		return tls_context_fail(err, err_size, -ENOMEM, "creating the TLS context");
	}
	int rc = tls_context_configure(ctx, settings, err, err_size);
	if (rc < 0) {
		tls_context_destroy(ctx);
		return rc;
	}
	*out = ctx;
	return 0;
}

void tls_context_destroy(struct tls_context *ctx)
{
	if (ctx == NULL)
		return;
	SSL_CTX_free(ctx->ssl_ctx); /* connections still alive hold their own references */
	free(ctx);
}

size_t tls_context_channel_binding(const struct tls_context *ctx, const uint8_t **data)
{
	TERN_ASSERT(ctx != NULL && data != NULL);
	*data = ctx->channel_binding;
	return ctx->channel_binding_len;
}

/* ---- connections ---- */

int tls_conn_create(const struct tls_context *ctx, struct tls_conn **out)
{
	TERN_ASSERT(ctx != NULL && out != NULL);
	TERN_ASSERT(tls_bio_method != NULL); /* made by tls_context_create */
	*out = NULL;
	struct tls_conn *conn = calloc(1, sizeof(*conn));
	if (conn == NULL)
		return -ENOMEM;
	/* SSL_new only reads the context and takes a reference atomically: safe from any worker. */
	conn->ssl = SSL_new(ctx->ssl_ctx);
	BIO *bio = BIO_new(tls_bio_method);
	if (conn->ssl == NULL || bio == NULL) {
		BIO_free(bio);
		SSL_free(conn->ssl);
		free(conn);
		ERR_clear_error();
		return -ENOMEM;
	}
	BIO_set_data(bio, conn);
	SSL_set_bio(conn->ssl, bio, bio); /* the SSL owns the BIO (one reference for both directions) */
	SSL_set_app_data(conn->ssl, conn);
	SSL_set_accept_state(conn->ssl);
	memcpy(conn->channel_binding, ctx->channel_binding, ctx->channel_binding_len);
	conn->channel_binding_len = ctx->channel_binding_len;
	*out = conn;
	return 0;
}

int tls_conn_adopt(void *ssl_state, struct tls_conn **out)
{
	TERN_ASSERT(ssl_state != NULL && out != NULL);
	*out = NULL;
	int once_rc = pthread_once(&tls_bio_once, tls_bio_method_create);
	TERN_ASSERT(once_rc == 0);
	SSL *ssl = ssl_state;
	TERN_ASSERT(SSL_is_init_finished(ssl));
	if (SSL_pending(ssl) > 0)
		return -EPROTO; /* the server sent more than its login */
	struct tls_conn *conn = calloc(1, sizeof(*conn));
	BIO *bio = tls_bio_method != NULL ? BIO_new(tls_bio_method) : NULL;
	if (conn == NULL || bio == NULL || SSL_up_ref(ssl) != 1) {
		BIO_free(bio);
		free(conn);
		ERR_clear_error();
		return -ENOMEM;
	}
	*conn = (struct tls_conn){.ssl = ssl, .is_adopted = true, .is_handshake_done = true};
	BIO_set_data(bio, conn);
	SSL_set_bio(ssl, bio, bio); /* frees libpq's socket BIO */
	SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER); /* as tls_context_configure; one record a write: */
	SSL_clear_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE);
	*out = conn;
	return 0;
}

void tls_conn_destroy(struct tls_conn *conn)
{
	if (conn == NULL)
		return;
	if (conn->is_adopted) {
		/* libpq still holds the SSL and writes its goodbye through it when it closes: into nothing. */
		BIO *null_bio = BIO_new(BIO_s_null());
		if (null_bio != NULL)
			SSL_set_bio(conn->ssl, null_bio, null_bio); /* ends our BIO, which forgets conn */
		else
			BIO_set_data(SSL_get_rbio(conn->ssl), NULL); /* ours stays, forgetting conn (tls_bio_write) */
		ERR_clear_error();
	}
	SSL_free(conn->ssl);
	tls_buffer_deinit(&conn->in);
	tls_buffer_deinit(&conn->out);
	OPENSSL_cleanse(conn, sizeof(*conn));
	free(conn);
}

/* Ends the connection with `rc` (-ENOMEM instead if OpenSSL ran out of memory); the text is `what`
 * followed by OpenSSL's reasons, if any. The first error stays (a close_notify of tern's own that fails
 * after the peer's, out of memory, says nothing new). */
static int tls_conn_fail(struct tls_conn *conn, int rc, const char *what)
{
	TERN_ASSERT(rc < 0);
	if (conn->error != 0) {
		ERR_clear_error();
		return conn->error;
	}
	snprintf(conn->error_text, sizeof(conn->error_text), "%s", what);
	if (tls_error_queue_drain(conn->error_text, sizeof(conn->error_text), rc) == -ENOMEM)
		rc = -ENOMEM;
	conn->error = rc;
	return rc;
}

/* Turns what an SSL_* call returned into 0 (needs ciphertext) or the connection's error. */
static int tls_conn_result(struct tls_conn *conn, int ssl_rc)
{
	int kind = SSL_get_error(conn->ssl, ssl_rc);
	char what[TLS_ERROR_TEXT_MAX];
	if (conn->is_out_over_limit) {
		snprintf(what, sizeof(what), "TLS output waiting to be sent passed %u bytes%s",
			 TLS_CIPHERTEXT_OUT_LIMIT,
			 conn->is_handshake_done ? "" : " in the handshake (is the certificate chain that large?)");
		return tls_conn_fail(conn, -ENOBUFS, what);
	}
	if (conn->is_out_of_memory)
		return tls_conn_fail(conn, -ENOMEM, "out of memory for TLS output");
	const char *stage = conn->is_handshake_done ? "TLS" : "TLS handshake";
	switch (kind) {
	case SSL_ERROR_WANT_READ:
		ERR_clear_error();
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		conn->is_peer_closed = true;
		return tls_conn_fail(conn, -ESHUTDOWN, conn->is_adopted ? "the server closed TLS (close_notify)"
									: "the client closed TLS (close_notify)");
	case SSL_ERROR_SSL: {
		long verify = SSL_get_verify_result(conn->ssl);
		if (conn->is_alpn_refused)
			snprintf(what, sizeof(what), "%s: the client offered ALPN without \"%s\"", stage,
				 TLS_ALPN_POSTGRESQL);
		else if (!conn->is_handshake_done && verify != X509_V_OK) /* (an adopted SSL keeps its login's) */
			snprintf(what, sizeof(what), "%s: %s certificate: %s", stage, conn->is_adopted ? "server" : "client",
				 X509_verify_cert_error_string(verify));
		else
			snprintf(what, sizeof(what), "%s", stage);
		return tls_conn_fail(conn, -EPROTO, what);
	}
	case SSL_ERROR_SYSCALL:
		/* Our BIO sets no errno: this is an I/O failure we did not flag, or an OpenSSL bug. */
		snprintf(what, sizeof(what), "%s: unexpected I/O failure", stage);
		return tls_conn_fail(conn, -EIO, what);
	default:
		snprintf(what, sizeof(what), "%s: unexpected OpenSSL state %d", stage, kind);
		return tls_conn_fail(conn, -EIO, what);
	}
}

int tls_conn_feed_ciphertext(struct tls_conn *conn, const uint8_t *data, uint32_t len)
{
	TERN_ASSERT(conn != NULL && data != NULL && len > 0);
	if (conn->error < 0)
		return conn->error;
	uint32_t room = TLS_CIPHERTEXT_IN_MAX - tls_buffer_len(&conn->in);
	uint32_t n = TERN_MIN(len, room);
	if (n == 0)
		return 0;
	int rc = tls_buffer_reserve(&conn->in, n, TLS_CIPHERTEXT_IN_MAX);
	if (rc < 0) {
		TERN_ASSERT(rc == -ENOMEM);
		return tls_conn_fail(conn, rc, "out of memory for TLS input");
	}
	memcpy(conn->in.data + conn->in.end, data, n);
	conn->in.end += n;
	TERN_DEBUG_ASSERT(tls_buffer_len(&conn->in) <= TLS_CIPHERTEXT_IN_MAX);
	return (int)n;
}

int tls_conn_read_plaintext(struct tls_conn *conn, uint8_t *out, uint32_t cap)
{
	TERN_ASSERT(conn != NULL && out != NULL && cap > 0);
	if (conn->error < 0)
		return conn->error;
	ERR_clear_error(); /* SSL_get_error reads this thread's queue: it must hold only this call's errors */
	if (!conn->is_handshake_done) {
		int rc = SSL_do_handshake(conn->ssl);
		if (rc != 1)
			return tls_conn_result(conn, rc);
		conn->is_handshake_done = true;
	}
	size_t n = 0;
	int rc = SSL_read_ex(conn->ssl, out, TERN_MIN(cap, (uint32_t)INT_MAX), &n);
	if (rc != 1)
		return tls_conn_result(conn, rc);
	TERN_ASSERT(n > 0 && n <= cap);
	return (int)n;
}

int tls_conn_write_plaintext(struct tls_conn *conn, const uint8_t *data, uint32_t len)
{
	TERN_ASSERT(conn != NULL && data != NULL && len > 0);
	if (conn->error < 0)
		return conn->error;
	TERN_ASSERT(conn->is_handshake_done);
	uint32_t accepted = 0;
	/* One record per SSL_write, made only when its largest possible ciphertext fits under the
	 * bound: the output never passes TLS_CIPHERTEXT_OUT_MAX because of a write, and OpenSSL never
	 * holds half a record waiting for room. */
	while (accepted < len) {
		size_t chunk = TERN_MIN(len - accepted, TLS_RECORD_PLAINTEXT_MAX);
		if (tls_buffer_len(&conn->out) + chunk + TLS_RECORD_EXPANSION_MAX > TLS_CIPHERTEXT_OUT_MAX)
			break;
		size_t n = 0;
		ERR_clear_error();
		if (SSL_write_ex(conn->ssl, data + accepted, chunk, &n) != 1) {
			int rc = tls_conn_result(conn, -1);
			/* With our BIO a write never waits for input (renegotiation is off). */
			return rc < 0 ? rc : tls_conn_fail(conn, -EIO, "TLS: a write asked for input");
		}
		TERN_ASSERT(n == chunk);
		accepted += (uint32_t)n;
	}
	TERN_DEBUG_ASSERT(accepted == 0 || tls_buffer_len(&conn->out) <= TLS_CIPHERTEXT_OUT_MAX);
	return (int)accepted;
}

void tls_conn_shutdown(struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	if ((conn->error < 0 && !conn->is_peer_closed) || !conn->is_handshake_done)
		return;
	conn->is_peer_closed = false; /* once */
	ERR_clear_error();
	/* 0 means "close_notify queued, the client's not seen yet", which is all we wait for. */
	int rc = SSL_shutdown(conn->ssl);
	if (rc < 0 && tls_conn_result(conn, rc) < 0)
		return;
	ERR_clear_error();
	conn->error = -ESHUTDOWN;
	snprintf(conn->error_text, sizeof(conn->error_text), "tern closed TLS (close_notify)");
}

uint32_t tls_conn_peek_ciphertext(const struct tls_conn *conn, const uint8_t **data)
{
	TERN_ASSERT(conn != NULL && data != NULL);
	uint32_t len = tls_buffer_len(&conn->out);
	*data = len > 0 ? conn->out.data + conn->out.start : NULL;
	return len;
}

void tls_conn_consume_ciphertext(struct tls_conn *conn, uint32_t len)
{
	TERN_ASSERT(conn != NULL);
	tls_buffer_consume(&conn->out, len);
}

uint32_t tls_conn_take_ciphertext(struct tls_conn *conn, uint8_t *out, uint32_t cap)
{
	TERN_ASSERT(conn != NULL && out != NULL);
	const uint8_t *data;
	uint32_t n = TERN_MIN(tls_conn_peek_ciphertext(conn, &data), cap);
	if (n > 0) {
		memcpy(out, data, n);
		tls_buffer_consume(&conn->out, n);
	}
	return n;
}

uint32_t tls_conn_ciphertext_len(const struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	return tls_buffer_len(&conn->out);
}

bool tls_conn_is_handshake_done(const struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	return conn->is_handshake_done;
}

bool tls_conn_is_alpn_postgresql(const struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	if (!conn->is_handshake_done)
		return false;
	const unsigned char *selected = NULL;
	unsigned int len = 0;
	SSL_get0_alpn_selected(conn->ssl, &selected, &len);
	return len == sizeof(TLS_ALPN_POSTGRESQL) - 1 && memcmp(selected, TLS_ALPN_POSTGRESQL, len) == 0;
}

bool tls_conn_has_client_certificate(const struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	return conn->is_handshake_done && SSL_get0_peer_certificate(conn->ssl) != NULL &&
	       SSL_get_verify_result(conn->ssl) == X509_V_OK;
}

bool tls_conn_client_common_name(const struct tls_conn *conn, char *out, size_t size)
{
	TERN_ASSERT(conn != NULL && size > 0);
	out[0] = '\0';
	if (!tls_conn_has_client_certificate(conn))
		return false;
	X509_NAME *subject = X509_get_subject_name(SSL_get0_peer_certificate(conn->ssl));
	/* Its whole length first: the copy below cuts a longer one short and says only what it copied. */
	int whole = subject ? X509_NAME_get_text_by_NID(subject, NID_commonName, NULL, 0) : -1;
	if (whole <= 0 || (size_t)whole >= size)
		return false;
	int n = X509_NAME_get_text_by_NID(subject, NID_commonName, out, (int)size);
	if (n != whole || strlen(out) != (size_t)n) {
		out[0] = '\0';
		return false;
	}
	return true;
}

const char *tls_conn_protocol_name(const struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	return conn->is_handshake_done ? SSL_get_version(conn->ssl) : "";
}

const char *tls_conn_cipher_name(const struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	const char *name = conn->is_handshake_done ? SSL_get_cipher_name(conn->ssl) : NULL;
	return name != NULL ? name : "";
}

size_t tls_conn_channel_binding(const struct tls_conn *conn, const uint8_t **data)
{
	TERN_ASSERT(conn != NULL && data != NULL);
	*data = conn->channel_binding;
	return conn->channel_binding_len;
}

int tls_conn_error(const struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	return conn->error;
}

const char *tls_conn_error_text(const struct tls_conn *conn)
{
	TERN_ASSERT(conn != NULL);
	return conn->error_text;
}
