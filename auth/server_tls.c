/* tern as the TLS client of its servers: libpq's state made tern's, the cipher checked. See server_tls.h. */
#include "server_tls.h"
#include "tls.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <poll.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

struct server_tls {
	struct pool_tls_ops ops;
	SSL_CTX *allowed; /* its cipher list is server_tls_ciphers; NULL: any cipher */
	char *ciphers;    /* server_tls_ciphers, for tern's own logins; NULL: OpenSSL's default */
};

/* True when the connection's cipher is one server_tls_ciphers lists (TLS 1.3 suites always are). */
static bool server_tls_cipher_allowed(const struct server_tls *t, const struct tls_conn *conn)
{
	if (!t->allowed || strcmp(tls_conn_protocol_name(conn), "TLSv1.3") == 0)
		return true;
	const char *chosen = tls_conn_cipher_name(conn);
	STACK_OF(SSL_CIPHER) *list = SSL_CTX_get_ciphers(t->allowed);
	for (int i = 0; i < sk_SSL_CIPHER_num(list); i++)
		if (strcmp(SSL_CIPHER_get_name(sk_SSL_CIPHER_value(list, i)), chosen) == 0)
			return true;
	return false;
}

static void *server_tls_adopt(void *ctx, void *ssl_state, char *name, size_t name_size, struct pool_error *err)
{
	const struct server_tls *t = ctx;
	struct tls_conn *conn;
	int rc = tls_conn_adopt(ssl_state, &conn);
	if (rc < 0) {
		*err = rc == -ENOMEM ? (struct pool_error){"53200", "out of memory taking over a server connection's TLS"}
				     : (struct pool_error){"08P01", "the server sent more than its login"};
		return NULL;
	}
	if (!server_tls_cipher_allowed(t, conn)) {
		base_strlcpy(err->sqlstate, "08004", sizeof(err->sqlstate));
		snprintf(err->message, sizeof(err->message),
			 "the server chose TLS cipher %s (%s), which server_tls_ciphers does not allow",
			 tls_conn_cipher_name(conn), tls_conn_protocol_name(conn));
		tls_conn_destroy(conn);
		return NULL;
	}
	snprintf(name, name_size, "%s/%s", tls_conn_protocol_name(conn), tls_conn_cipher_name(conn));
	return conn;
}

static void server_tls_close(void *tls, int fd)
{
	struct tls_conn *conn = tls;
	static const uint8_t terminate[] = {'X', 0, 0, 0, 4};
	if (tls_conn_write_plaintext(conn, terminate, sizeof(terminate)) == (int)sizeof(terminate)) {
		tls_conn_shutdown(conn);
		const uint8_t *data;
		uint32_t len = tls_conn_peek_ciphertext(conn, &data);
		if (len > 0)
			(void)send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	tls_conn_destroy(conn);
}

/* libpq's ssl_min/max_protocol_version names as OpenSSL's versions; 0 for none or unknown. */
static int server_tls_version(const char *name)
{
	static const struct {
		const char *name;
		int version;
	} versions[] = {{"TLSv1", TLS1_VERSION}, {"TLSv1.1", TLS1_1_VERSION}, {"TLSv1.2", TLS1_2_VERSION},
			{"TLSv1.3", TLS1_3_VERSION}};
	for (size_t i = 0; name && i < TERN_ARRAY_LEN(versions); i++)
		if (strcasecmp(name, versions[i].name) == 0)
			return versions[i].version;
	return 0;
}

/* err from OpenSSL's queue (and the certificate's verification), for `what`. */
static void server_tls_error(SSL *ssl, const char *sqlstate, const char *what, struct pool_error *err)
{
	char reason[160] = "";
	long verify = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
	unsigned long e = ERR_peek_last_error();
	if (verify != X509_V_OK)
		snprintf(reason, sizeof(reason), "server certificate: %s", X509_verify_cert_error_string(verify));
	else if (e != 0)
		ERR_error_string_n(e, reason, sizeof(reason));
	else
		snprintf(reason, sizeof(reason), "%s", errno ? strerror(errno) : "the server closed the connection");
	ERR_clear_error();
	base_strlcpy(err->sqlstate, sqlstate, sizeof(err->sqlstate));
	snprintf(err->message, sizeof(err->message), "%s: %s", what, reason);
}

/* A key file's passphrase: the conninfo's sslpassword, else none (OpenSSL would ask the terminal). */
static int server_tls_passphrase(char *buf, int size, int rwflag, void *userdata)
{
	(void)rwflag;
	const char *password = userdata;
	size_t len = password ? strlen(password) : 0;
	if (len == 0 || len >= (size_t)size)
		return 0;
	memcpy(buf, password, len);
	return (int)len;
}

/* As libpq sets up its TLS from the conninfo: the mode verify-* (and require with a root certificate, as
 * libpq does) check the chain against sslrootcert; verify-full also the host name. */
static void *server_tls_login_begin(void *ctx, const struct pool_conninfo *c, const char *host, int fd,
				    struct pool_error *err)
{
	const struct server_tls *t = ctx;
	const char *mode = pool_conninfo_get(c, "sslmode");
	const char *root = pool_conninfo_get(c, "sslrootcert");
	const char *cert = pool_conninfo_get(c, "sslcert");
	const char *key = pool_conninfo_get(c, "sslkey");
	bool is_full = mode && strcmp(mode, "verify-full") == 0;
	bool is_verified = is_full || (mode && strcmp(mode, "verify-ca") == 0) || (root && root[0]);
	ERR_clear_error();
	SSL_CTX *ssl_ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = NULL;
	const char *what = "setting up TLS toward the server";
	if (!ssl_ctx)
		goto fail;
	int min = server_tls_version(pool_conninfo_get(c, "ssl_min_protocol_version"));
	int max = server_tls_version(pool_conninfo_get(c, "ssl_max_protocol_version"));
	if (SSL_CTX_set_min_proto_version(ssl_ctx, min ? min : TLS1_2_VERSION) != 1 ||
	    SSL_CTX_set_max_proto_version(ssl_ctx, max) != 1)
		goto fail;
	what = "server_tls_ciphers";
	if (t->ciphers && SSL_CTX_set_cipher_list(ssl_ctx, t->ciphers) != 1)
		goto fail;
	if (is_verified) {
		what = "reading the server's root certificate file (sslrootcert, server_tls_ca_file)";
		if (!root || !root[0] || SSL_CTX_load_verify_locations(ssl_ctx, root, NULL) != 1)
			goto fail;
		SSL_CTX_set_verify(ssl_ctx, SSL_VERIFY_PEER, NULL);
	}
	SSL_CTX_set_default_passwd_cb(ssl_ctx, server_tls_passphrase);
	SSL_CTX_set_default_passwd_cb_userdata(ssl_ctx, (void *)pool_conninfo_get(c, "sslpassword"));
	if (cert && cert[0]) {
		what = "reading tern's client certificate (sslcert, server_tls_cert_file)";
		if (SSL_CTX_use_certificate_chain_file(ssl_ctx, cert) != 1)
			goto fail;
		what = "reading its key (sslkey, server_tls_key_file)";
		if (SSL_CTX_use_PrivateKey_file(ssl_ctx, key && key[0] ? key : cert, SSL_FILETYPE_PEM) != 1)
			goto fail;
	}
	SSL_CTX_set_default_passwd_cb_userdata(ssl_ctx, NULL); /* (the conninfo's parse goes) */
	/* No compression, no renegotiation, no resumption: as libpq. */
	SSL_CTX_set_options(ssl_ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
	what = "setting up TLS toward the server";
	ssl = SSL_new(ssl_ctx);
	if (!ssl || SSL_set_fd(ssl, fd) != 1)
		goto fail;
	unsigned char addr[sizeof(struct in6_addr)];
	bool is_address = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
	if (!is_address && host[0] && SSL_set_tlsext_host_name(ssl, host) != 1) /* SNI, as libpq's sslsni=1 */
		goto fail;
	if (is_full && SSL_set1_host(ssl, host) != 1)
		goto fail;
	SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_set_connect_state(ssl);
	SSL_CTX_free(ssl_ctx); /* the SSL keeps its own reference */
	return ssl;
fail:
	server_tls_error(NULL, "08004", what, err);
	SSL_free(ssl);
	SSL_CTX_free(ssl_ctx);
	return NULL;
}

static int server_tls_login_io(void *tls, int op, void *data, uint32_t len, short *events, struct pool_error *err)
{
	SSL *ssl = tls;
	size_t n = 0;
	int rc;
	ERR_clear_error();
	errno = 0;
	if (op == POOL_TLS_HANDSHAKE)
		rc = SSL_connect(ssl);
	else if (op == POOL_TLS_READ)
		rc = SSL_read_ex(ssl, data, len, &n);
	else
		rc = SSL_write_ex(ssl, data, len, &n);
	if (rc == 1)
		return op == POOL_TLS_HANDSHAKE ? 1 : (int)n;
	int kind = SSL_get_error(ssl, rc);
	if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) {
		*events = kind == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
		ERR_clear_error();
		return 0;
	}
	if (op == POOL_TLS_HANDSHAKE) /* refused as configured (08004), or the connection broke (08006: retried) */
		server_tls_error(ssl, kind == SSL_ERROR_SSL ? "08004" : "08006", "TLS handshake with the server failed", err);
	else
		server_tls_error(NULL, "08006", kind == SSL_ERROR_ZERO_RETURN ? "the server closed TLS" : "TLS toward the server",
				 err);
	return -EPROTO;
}

static void server_tls_login_end(void *tls) { SSL_free(tls); }

int server_tls_create(const char *ciphers, struct server_tls **out, char *err, size_t err_size)
{
	*out = NULL;
	struct server_tls *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, err_size, "out of memory");
		return -ENOMEM;
	}
	t->ops = (struct pool_tls_ops){.adopt = server_tls_adopt,
				       .close = server_tls_close,
				       .login_begin = server_tls_login_begin,
				       .login_io = server_tls_login_io,
				       .login_end = server_tls_login_end,
				       .ctx = t};
	/* PgBouncer's (libtls's) keywords: default, secure, normal and fast leave the choice to libpq and the
	 * server; all, compat, legacy and insecure allow every cipher OpenSSL has. */
	static const char *const any[] = {"default", "secure", "normal", "fast"};
	static const char *const every[] = {"all", "compat", "legacy", "insecure"};
	bool is_any = !ciphers || !ciphers[0];
	for (size_t i = 0; i < TERN_ARRAY_LEN(any) && !is_any; i++)
		is_any = strcasecmp(ciphers, any[i]) == 0;
	for (size_t i = 0; i < TERN_ARRAY_LEN(every) && !is_any; i++)
		if (strcasecmp(ciphers, every[i]) == 0)
			ciphers = "ALL";
	if (!is_any) {
		t->allowed = SSL_CTX_new(TLS_client_method());
		t->ciphers = strdup(ciphers);
		if (!t->allowed || !t->ciphers || SSL_CTX_set_cipher_list(t->allowed, ciphers) != 1) {
			snprintf(err, err_size, "[tls] server_tls_ciphers \"%s\": %s", ciphers,
				 t->allowed ? "OpenSSL knows no cipher in it" : "out of memory");
			ERR_clear_error();
			server_tls_destroy(t);
			return -EINVAL;
		}
	}
	*out = t;
	return 0;
}

void server_tls_destroy(struct server_tls *tls)
{
	if (!tls)
		return;
	SSL_CTX_free(tls->allowed);
	free(tls->ciphers);
	free(tls);
}

const struct pool_tls_ops *server_tls_ops(const struct server_tls *tls) { return &tls->ops; }
