/* tern as the TLS client of its servers: libpq's state made tern's, the cipher checked. See server_tls.h. */
#include "server_tls.h"
#include "tls.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

struct server_tls {
	struct pool_tls_ops ops;
	SSL_CTX *allowed; /* its cipher list is server_tls_ciphers; NULL: any cipher */
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
	if (tls_conn_adopt(ssl_state, &conn) < 0) {
		*err = (struct pool_error){"53200", "out of memory taking over a server connection's TLS"};
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

int server_tls_create(const char *ciphers, struct server_tls **out, char *err, size_t err_size)
{
	*out = NULL;
	struct server_tls *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, err_size, "out of memory");
		return -ENOMEM;
	}
	t->ops = (struct pool_tls_ops){.adopt = server_tls_adopt, .close = server_tls_close, .ctx = t};
	bool is_any = !ciphers || !ciphers[0] || strcasecmp(ciphers, "default") == 0 || strcasecmp(ciphers, "secure") == 0;
	if (!is_any) {
		t->allowed = SSL_CTX_new(TLS_client_method());
		if (!t->allowed || SSL_CTX_set_cipher_list(t->allowed, ciphers) != 1) {
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
	free(tls);
}

const struct pool_tls_ops *server_tls_ops(const struct server_tls *tls) { return &tls->ops; }
