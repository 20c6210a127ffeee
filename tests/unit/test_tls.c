/*
 * test_tls.c — a tls_conn (server) against a real OpenSSL client over memory BIOs in one thread: the
 * handshake, data both ways (messages larger than one 16 kB record included), ALPN "postgresql",
 * the protocol floor, client certificates, the memory bounds, the channel-binding data, and refusals
 * at context creation. Keys and self-signed certificates are made at test time in a private temp dir.
 * Adoption (tern as the client of a server): a plain OpenSSL client makes its handshake over a
 * socketpair, as libpq does, then tls_conn_adopt takes it over; data both ways, the close orders of
 * the SSL's other owner, the refusal while plaintext is pending, and the server's close_notify.
 */
#include "tls.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* Handshake rounds before a test gives up: TLS 1.3 needs 2, TLS 1.2 needs 3. */
#define ROUNDS_MAX 32
/* Plaintext a test may collect on either side. */
#define RECEIVED_MAX (2u * 1024u * 1024u)
/* Spans several records (TLS_RECORD_PLAINTEXT_MAX) and several ciphertext bounds. */
#define LARGE_LEN (200u * 1000u + 7u)

/* ---- temp files, keys and certificates, all released after each test ---- */

#define PATHS_MAX 8
#define OBJECTS_MAX 16
static char temp_dir[] = "/tmp/tern-test-tls-XXXXXX";
static char temp_paths[PATHS_MAX][256];
static int temp_count;
static EVP_PKEY *kept_keys[OBJECTS_MAX];
static int kept_key_count;
static X509 *kept_certs[OBJECTS_MAX];
static int kept_cert_count;

static void temp_setup(void) { cr_assert_not_null(mkdtemp(temp_dir)); }

static void temp_teardown(void)
{
	for (int i = 0; i < temp_count; i++)
		unlink(temp_paths[i]);
	rmdir(temp_dir);
	for (int i = 0; i < kept_key_count; i++)
		EVP_PKEY_free(kept_keys[i]);
	for (int i = 0; i < kept_cert_count; i++)
		X509_free(kept_certs[i]);
}

static EVP_PKEY *key_keep(EVP_PKEY *key)
{
	cr_assert_not_null(key);
	cr_assert_lt(kept_key_count, OBJECTS_MAX);
	return kept_keys[kept_key_count++] = key;
}

TestSuite(tls, .init = temp_setup, .fini = temp_teardown, .timeout = 60);

static const char *temp_path(const char *name)
{
	cr_assert_lt(temp_count, PATHS_MAX);
	char *path = temp_paths[temp_count++];
	snprintf(path, sizeof(temp_paths[0]), "%s/%s", temp_dir, name);
	return path;
}

/* ---- keys and certificates ---- */

static EVP_PKEY *key_rsa(void) { return key_keep(EVP_RSA_gen(2048)); }

static EVP_PKEY *key_ec(const char *curve) { return key_keep(EVP_EC_gen(curve)); }

/* Self-signed, CA:TRUE so that it can also stand as its own CA for client certificates.
 * md NULL is for Ed25519, which signs without a separate digest. */
static X509 *cert_self_signed(EVP_PKEY *key, const EVP_MD *md, const char *common_name)
{
	static long serial = 1;
	X509 *cert = X509_new();
	cr_assert_not_null(cert);
	cr_assert_lt(kept_cert_count, OBJECTS_MAX);
	kept_certs[kept_cert_count++] = cert;
	cr_assert_eq(X509_set_version(cert, 2), 1);
	cr_assert_eq(ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++), 1);
	cr_assert_not_null(X509_gmtime_adj(X509_getm_notBefore(cert), -3600));
	cr_assert_not_null(X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600));
	cr_assert_eq(X509_set_pubkey(cert, key), 1);
	X509_NAME *name = X509_get_subject_name(cert);
	cr_assert_eq(
		X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)common_name, -1, -1, 0), 1);
	cr_assert_eq(X509_set_issuer_name(cert, name), 1);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, NULL, NID_basic_constraints, "critical,CA:TRUE");
	cr_assert_not_null(ext);
	cr_assert_eq(X509_add_ext(cert, ext, -1), 1);
	X509_EXTENSION_free(ext);
	cr_assert_gt(X509_sign(cert, key, md), 0);
	return cert;
}

static const char *cert_write(X509 *cert, const char *name)
{
	const char *path = temp_path(name);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(PEM_write_X509(f, cert), 1);
	cr_assert_eq(fclose(f), 0);
	return path;
}

static const char *key_write(EVP_PKEY *key, const char *name, const char *passphrase)
{
	const char *path = temp_path(name);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	if (passphrase != NULL)
		cr_assert_eq(PEM_write_PrivateKey(f, key, EVP_aes_256_cbc(), (const unsigned char *)passphrase,
						  (int)strlen(passphrase), NULL, NULL),
			     1);
	else
		cr_assert_eq(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
	cr_assert_eq(fclose(f), 0);
	return path;
}

/* The server's identity: an EC P-256 key (fast to make) unless a test brings its own. */
struct identity {
	EVP_PKEY *key;
	X509 *cert;
	const char *cert_path;
	const char *key_path;
};

static struct identity identity_make(EVP_PKEY *key, const EVP_MD *md, const char *stem)
{
	char cert_name[64], key_name[64];
	snprintf(cert_name, sizeof(cert_name), "%s.crt", stem);
	snprintf(key_name, sizeof(key_name), "%s.key", stem);
	struct identity id = {.key = key, .cert = cert_self_signed(key, md, stem)};
	id.cert_path = cert_write(id.cert, cert_name);
	id.key_path = key_write(key, key_name, NULL);
	return id;
}

static struct tls_context *context_make(const struct tls_settings *settings)
{
	char err[512] = "";
	struct tls_context *ctx = NULL;
	int rc = tls_context_create(settings, &ctx, err, sizeof(err));
	cr_assert_eq(rc, 0, "tls_context_create: %d %s", rc, err);
	cr_assert_not_null(ctx);
	return ctx;
}

static struct tls_context *context_default(struct identity *id)
{
	*id = identity_make(key_ec("P-256"), EVP_sha256(), "server");
	struct tls_settings settings = {.cert_file = id->cert_path, .key_file = id->key_path};
	return context_make(&settings);
}

/* ---- an OpenSSL client and a pump between it and the server ---- */

struct client_options {
	int min_version, max_version; /* 0: OpenSSL's defaults */
	const unsigned char *alpn;    /* wire format: length-prefixed names */
	unsigned int alpn_len;
	X509 *cert; /* a client certificate to present */
	EVP_PKEY *key;
};

/* The last alert the client received (its description byte), from the info callback. */
static int client_alert_received = -1;

static void client_info(const SSL *ssl, int where, int ret)
{
	(void)ssl;
	if (where & SSL_CB_READ_ALERT)
		client_alert_received = ret & 0xff;
}

struct pair {
	struct tls_conn *server;
	SSL_CTX *client_ctx;
	SSL *client;
	BIO *client_in;  /* ciphertext for the client */
	BIO *client_out; /* ciphertext from the client */
	int server_rc;   /* the server's first error, 0 while none */
	uint8_t *server_received;
	size_t server_received_len;
	uint8_t *client_received;
	size_t client_received_len;
	char client_error[256]; /* why the client's handshake failed, for messages */
};

static void pair_init(struct pair *p, const struct tls_context *ctx, X509 *trusted,
		      const struct client_options *options)
{
	memset(p, 0, sizeof(*p));
	cr_assert_eq(tls_conn_create(ctx, &p->server), 0);
	p->server_received = malloc(RECEIVED_MAX);
	p->client_received = malloc(RECEIVED_MAX);
	cr_assert(p->server_received != NULL && p->client_received != NULL);

	p->client_ctx = SSL_CTX_new(TLS_client_method());
	cr_assert_not_null(p->client_ctx);
	if (options->min_version != 0 && options->min_version < TLS1_2_VERSION) {
		/* Let this client really offer an old protocol, so only the server can refuse it. */
		SSL_CTX_set_security_level(p->client_ctx, 0);
		cr_assert_eq(SSL_CTX_set_cipher_list(p->client_ctx, "DEFAULT:@SECLEVEL=0"), 1);
	}
	if (options->min_version != 0)
		cr_assert_eq(SSL_CTX_set_min_proto_version(p->client_ctx, options->min_version), 1);
	if (options->max_version != 0)
		cr_assert_eq(SSL_CTX_set_max_proto_version(p->client_ctx, options->max_version), 1);
	if (trusted != NULL) {
		/* The client checks the server's certificate, as sslmode=verify-ca would. */
		cr_assert_eq(X509_STORE_add_cert(SSL_CTX_get_cert_store(p->client_ctx), trusted), 1);
		SSL_CTX_set_verify(p->client_ctx, SSL_VERIFY_PEER, NULL);
	}
	if (options->cert != NULL) {
		cr_assert_eq(SSL_CTX_use_certificate(p->client_ctx, options->cert), 1);
		cr_assert_eq(SSL_CTX_use_PrivateKey(p->client_ctx, options->key), 1);
	}
	p->client = SSL_new(p->client_ctx);
	cr_assert_not_null(p->client);
	p->client_in = BIO_new(BIO_s_mem());
	p->client_out = BIO_new(BIO_s_mem());
	cr_assert(p->client_in != NULL && p->client_out != NULL);
	BIO_set_mem_eof_return(p->client_in, -1);
	BIO_set_mem_eof_return(p->client_out, -1);
	SSL_set_bio(p->client, p->client_in, p->client_out);
	SSL_set_connect_state(p->client);
	SSL_set_info_callback(p->client, client_info);
	if (options->alpn != NULL)
		cr_assert_eq(SSL_set_alpn_protos(p->client, options->alpn, options->alpn_len), 0); /* 0 is success */
}

static void pair_deinit(struct pair *p)
{
	tls_conn_destroy(p->server);
	SSL_free(p->client);
	SSL_CTX_free(p->client_ctx);
	free(p->server_received);
	free(p->client_received);
}

/* Reads server plaintext until it wants more ciphertext or fails. */
static void server_read_all(struct pair *p)
{
	while (p->server_rc == 0) {
		cr_assert_lt(p->server_received_len, RECEIVED_MAX);
		int n = tls_conn_read_plaintext(p->server, p->server_received + p->server_received_len,
						(uint32_t)(RECEIVED_MAX - p->server_received_len));
		if (n < 0)
			p->server_rc = n;
		if (n <= 0)
			return;
		p->server_received_len += (size_t)n;
	}
}

/* Moves ciphertext both ways once: client → server through the bounded feed (reading the server's
 * plaintext whenever the feed is full), then server → client without copying out of the server.
 * Returns true when any byte moved. */
static bool pump(struct pair *p)
{
	bool is_moved = false;
	uint8_t chunk[16384];
	int n;
	while ((n = BIO_read(p->client_out, chunk, sizeof(chunk))) > 0) {
		is_moved = true;
		for (int at = 0; at < n && p->server_rc == 0;) {
			int fed = tls_conn_feed_ciphertext(p->server, chunk + at, (uint32_t)(n - at));
			if (fed < 0) {
				p->server_rc = fed;
				break;
			}
			at += fed;
			server_read_all(p);
		}
	}
	server_read_all(p);
	const uint8_t *data;
	uint32_t len;
	while ((len = tls_conn_peek_ciphertext(p->server, &data)) > 0) {
		cr_assert_eq(BIO_write(p->client_in, data, (int)len), (int)len);
		tls_conn_consume_ciphertext(p->server, len);
		is_moved = true;
	}
	return is_moved;
}

/* Runs both handshakes as far as they go. Returns true when both sides finished. */
static bool handshake(struct pair *p)
{
	for (int round = 0; round < ROUNDS_MAX; round++) {
		int rc = SSL_do_handshake(p->client);
		/* Now: SSL_get_error reads this thread's error queue and the BIO's retry flags, which the
		 * pump changes. */
		int kind = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(p->client, rc);
		bool is_moved = pump(p);
		if (rc == 1 && tls_conn_is_handshake_done(p->server))
			return true;
		if (kind != SSL_ERROR_NONE && kind != SSL_ERROR_WANT_READ) {
			ERR_error_string_n(ERR_peek_last_error(), p->client_error, sizeof(p->client_error));
			long verify = SSL_get_verify_result(p->client);
			if (verify != X509_V_OK)
				snprintf(p->client_error, sizeof(p->client_error), "verify: %s",
					 X509_verify_cert_error_string(verify));
			return false;
		}
		if (!is_moved)
			return false;
	}
	cr_assert_fail("the handshake did not settle in %d rounds", ROUNDS_MAX);
	return false;
}

/* Reads client plaintext until it wants more ciphertext. */
static void client_read_all(struct pair *p)
{
	for (;;) {
		cr_assert_lt(p->client_received_len, RECEIVED_MAX);
		size_t n = 0;
		if (SSL_read_ex(p->client, p->client_received + p->client_received_len,
				RECEIVED_MAX - p->client_received_len, &n) != 1) {
			cr_assert_eq(SSL_get_error(p->client, 0), SSL_ERROR_WANT_READ);
			return;
		}
		p->client_received_len += n;
	}
}

static void client_send(struct pair *p, const uint8_t *data, size_t len)
{
	size_t n = 0;
	cr_assert_eq(SSL_write_ex(p->client, data, len, &n), 1);
	cr_assert_eq(n, len);
	for (int round = 0; round < ROUNDS_MAX && pump(p); round++)
		;
	cr_assert_eq(p->server_rc, 0, "server: %d %s", p->server_rc, tls_conn_error_text(p->server));
}

/* Offers everything to the server's write, delivering its output to the client in between. */
static void server_send(struct pair *p, const uint8_t *data, size_t len)
{
	size_t at = 0;
	/* Each pass moves at least one record, or the loop fails the test. */
	for (size_t pass = 0; at < len; pass++) {
		cr_assert_lt(pass, len / TLS_RECORD_PLAINTEXT_MAX + 8);
		int n = tls_conn_write_plaintext(p->server, data + at, (uint32_t)(len - at));
		cr_assert_gt(n, 0, "write: %d %s", n, tls_conn_error_text(p->server));
		at += (size_t)n;
		pump(p);
		client_read_all(p);
	}
}

static void pattern_fill(uint8_t *data, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++) {
		seed = seed * 1103515245u + 12345u;
		data[i] = (uint8_t)(seed >> 16);
	}
}

static const unsigned char alpn_postgresql[] = "\x0apostgresql";
static const unsigned char alpn_http[] = "\x08http/1.1";
static const unsigned char alpn_both[] = "\x08http/1.1\x0apostgresql";

/* Handshake with `options`, then a large message each way; checks every byte. */
static void exchange_both_ways(const struct client_options *options, const char *protocol)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct pair p;
	pair_init(&p, ctx, id.cert, options);
	cr_assert(handshake(&p), "server: %d %s; client: %s", p.server_rc, tls_conn_error_text(p.server),
		  p.client_error);
	cr_assert_str_eq(tls_conn_protocol_name(p.server), protocol);
	cr_assert_str_eq(SSL_get_version(p.client), protocol);
	cr_assert_neq(tls_conn_cipher_name(p.server)[0], '\0');

	uint8_t *up = malloc(LARGE_LEN), *down = malloc(LARGE_LEN);
	cr_assert(up != NULL && down != NULL);
	pattern_fill(up, LARGE_LEN, 1);
	pattern_fill(down, LARGE_LEN, 2);

	client_send(&p, (const uint8_t *)"Q", 1);
	cr_assert_eq(p.server_received_len, 1);
	cr_assert_eq(p.server_received[0], 'Q');
	p.server_received_len = 0;
	client_send(&p, up, LARGE_LEN);
	cr_assert_eq(p.server_received_len, LARGE_LEN);
	cr_assert_eq(memcmp(p.server_received, up, LARGE_LEN), 0);

	server_send(&p, (const uint8_t *)"Z", 1);
	cr_assert_eq(p.client_received_len, 1);
	cr_assert_eq(p.client_received[0], 'Z');
	p.client_received_len = 0;
	server_send(&p, down, LARGE_LEN);
	cr_assert_eq(p.client_received_len, LARGE_LEN);
	cr_assert_eq(memcmp(p.client_received, down, LARGE_LEN), 0);

	cr_assert_eq(tls_conn_error(p.server), 0);
	cr_assert_str_eq(tls_conn_error_text(p.server), "");
	free(up);
	free(down);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

/* ---- handshake and data ---- */

Test(tls, tls13_handshake_carries_large_messages_both_ways)
{
	struct client_options options = {.alpn = alpn_postgresql, .alpn_len = sizeof(alpn_postgresql) - 1};
	exchange_both_ways(&options, "TLSv1.3");
}

Test(tls, tls12_handshake_carries_large_messages_both_ways)
{
	struct client_options options = {.max_version = TLS1_2_VERSION};
	exchange_both_ways(&options, "TLSv1.2");
}

Test(tls, nothing_happens_before_the_client_speaks)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct tls_conn *conn;
	cr_assert_eq(tls_conn_create(ctx, &conn), 0);
	uint8_t out[64];
	cr_assert_eq(tls_conn_read_plaintext(conn, out, sizeof(out)), 0);
	cr_assert_eq(tls_conn_ciphertext_len(conn), 0);
	cr_assert_not(tls_conn_is_handshake_done(conn));
	cr_assert_not(tls_conn_is_alpn_postgresql(conn));
	cr_assert_str_eq(tls_conn_protocol_name(conn), "");
	tls_conn_destroy(conn);
	tls_context_destroy(ctx);
}

Test(tls, connection_outlives_its_context)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct client_options options = {0};
	struct pair p;
	pair_init(&p, ctx, id.cert, &options);
	const uint8_t *expected;
	size_t expected_len = tls_context_channel_binding(ctx, &expected);
	uint8_t copy[TLS_CHANNEL_BINDING_MAX];
	memcpy(copy, expected, expected_len);
	tls_context_destroy(ctx); /* as a reload would, with this client still connecting */
	cr_assert(handshake(&p));
	client_send(&p, (const uint8_t *)"ping", 4);
	cr_assert_eq(p.server_received_len, 4);
	const uint8_t *binding;
	cr_assert_eq(tls_conn_channel_binding(p.server, &binding), expected_len);
	cr_assert_eq(memcmp(binding, copy, expected_len), 0);
	pair_deinit(&p);
}

/* ---- ALPN ---- */

Test(tls, alpn_postgresql_is_selected)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	const unsigned char *offers[] = {alpn_postgresql, alpn_both};
	const unsigned int offer_lens[] = {sizeof(alpn_postgresql) - 1, sizeof(alpn_both) - 1};
	for (size_t i = 0; i < 2; i++) {
		struct client_options options = {.alpn = offers[i], .alpn_len = offer_lens[i]};
		struct pair p;
		pair_init(&p, ctx, id.cert, &options);
		cr_assert(handshake(&p), "offer %zu: %s", i, tls_conn_error_text(p.server));
		cr_assert(tls_conn_is_alpn_postgresql(p.server));
		const unsigned char *selected = NULL;
		unsigned int len = 0;
		SSL_get0_alpn_selected(p.client, &selected, &len);
		cr_assert_eq(len, 10);
		cr_assert_eq(memcmp(selected, "postgresql", 10), 0);
		pair_deinit(&p);
	}
	tls_context_destroy(ctx);
}

Test(tls, alpn_without_postgresql_is_refused_with_no_application_protocol)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct client_options options = {.alpn = alpn_http, .alpn_len = sizeof(alpn_http) - 1};
	struct pair p;
	pair_init(&p, ctx, id.cert, &options);
	cr_assert_not(handshake(&p));
	cr_assert_not(tls_conn_is_handshake_done(p.server));
	cr_assert_eq(p.server_rc, -EPROTO);
	cr_assert_eq(tls_conn_error(p.server), -EPROTO);
	cr_assert_not_null(strstr(tls_conn_error_text(p.server), "ALPN"), "%s", tls_conn_error_text(p.server));
	cr_assert_eq(client_alert_received, SSL_AD_NO_APPLICATION_PROTOCOL);
	/* The error sticks. */
	uint8_t out[16];
	cr_assert_eq(tls_conn_read_plaintext(p.server, out, sizeof(out)), -EPROTO);
	cr_assert_eq(tls_conn_feed_ciphertext(p.server, out, sizeof(out)), -EPROTO);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

Test(tls, no_alpn_is_accepted_as_after_an_ssl_request)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct client_options options = {0};
	struct pair p;
	pair_init(&p, ctx, id.cert, &options);
	cr_assert(handshake(&p), "%s", tls_conn_error_text(p.server));
	cr_assert_not(tls_conn_is_alpn_postgresql(p.server));
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

/* ---- protocol versions ---- */

Test(tls, tls11_client_is_refused)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct client_options options = {.min_version = TLS1_1_VERSION, .max_version = TLS1_1_VERSION};
	struct pair p;
	pair_init(&p, ctx, id.cert, &options);
	cr_assert_not(handshake(&p));
	cr_assert_eq(p.server_rc, -EPROTO);
	cr_assert_not_null(strstr(tls_conn_error_text(p.server), "unsupported protocol"), "%s",
			   tls_conn_error_text(p.server));
	cr_assert_eq(client_alert_received, SSL_AD_PROTOCOL_VERSION);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

Test(tls, tls13_minimum_refuses_a_tls12_client)
{
	struct identity id = identity_make(key_ec("P-256"), EVP_sha256(), "server");
	struct tls_settings settings = {.cert_file = id.cert_path, .key_file = id.key_path, .min_protocol = "tlsv1.3"};
	struct tls_context *ctx = context_make(&settings);
	struct client_options tls12 = {.max_version = TLS1_2_VERSION};
	struct pair p;
	pair_init(&p, ctx, id.cert, &tls12);
	cr_assert_not(handshake(&p));
	cr_assert_eq(p.server_rc, -EPROTO);
	cr_assert_eq(client_alert_received, SSL_AD_PROTOCOL_VERSION);
	pair_deinit(&p);

	struct client_options any = {0};
	pair_init(&p, ctx, id.cert, &any);
	cr_assert(handshake(&p));
	cr_assert_str_eq(tls_conn_protocol_name(p.server), "TLSv1.3");
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

/* ---- context creation ---- */

Test(tls, mismatched_key_is_refused_naming_the_file)
{
	EVP_PKEY *cert_key = key_ec("P-256");
	X509 *cert = cert_self_signed(cert_key, EVP_sha256(), "server");
	struct tls_settings settings = {.cert_file = cert_write(cert, "server.crt"),
					.key_file = key_write(key_ec("P-256"), "other.key", NULL)};
	char err[512] = "";
	struct tls_context *ctx = (struct tls_context *)&err; /* must be reset to NULL */
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -EINVAL);
	cr_assert_null(ctx);
	cr_assert_not_null(strstr(err, settings.key_file), "%s", err);
	cr_assert_not_null(strstr(err, "does not match"), "%s", err);

	/* A key of another type does not match either. */
	settings.key_file = key_write(key_rsa(), "rsa.key", NULL);
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, settings.key_file), "%s", err);
}

Test(tls, missing_or_bad_files_are_refused_naming_them)
{
	struct identity id = identity_make(key_ec("P-256"), EVP_sha256(), "server");
	char err[512] = "";
	struct tls_context *ctx;

	struct tls_settings settings = {.cert_file = temp_path("absent.crt"), .key_file = id.key_path};
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -ENOENT, "%s", err);
	cr_assert_not_null(strstr(err, settings.cert_file), "%s", err);

	settings = (struct tls_settings){.cert_file = id.cert_path, .key_file = temp_path("absent.key")};
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -ENOENT, "%s", err);
	cr_assert_not_null(strstr(err, settings.key_file), "%s", err);

	/* A key file that holds a certificate is not a key. */
	settings = (struct tls_settings){.cert_file = id.cert_path, .key_file = id.cert_path};
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "key file"), "%s", err);

	settings = (struct tls_settings){.cert_file = id.cert_path, .key_file = id.key_path,
					 .ca_file = temp_path("absent-ca.crt")};
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -ENOENT, "%s", err);
	cr_assert_not_null(strstr(err, settings.ca_file), "%s", err);

	settings = (struct tls_settings){.cert_file = "", .key_file = id.key_path};
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "certificate file"), "%s", err);
}

Test(tls, encrypted_key_fails_without_prompting)
{
	EVP_PKEY *key = key_ec("P-256");
	X509 *cert = cert_self_signed(key, EVP_sha256(), "server");
	struct tls_settings settings = {.cert_file = cert_write(cert, "server.crt"),
					.key_file = key_write(key, "server.key", "secret")};
	char err[512] = "";
	struct tls_context *ctx;
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "passphrase"), "%s", err);
	cr_assert_not_null(strstr(err, settings.key_file), "%s", err);
}

Test(tls, bad_protocol_or_ciphers_are_refused)
{
	struct identity id = identity_make(key_ec("P-256"), EVP_sha256(), "server");
	char err[512] = "";
	struct tls_context *ctx;
	struct tls_settings settings = {.cert_file = id.cert_path, .key_file = id.key_path, .min_protocol = "TLSv1.1"};
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "TLSv1.1"), "%s", err);

	settings.min_protocol = "TLSv1.2";
	settings.ciphers = "NO-SUCH-CIPHER";
	cr_assert_eq(tls_context_create(&settings, &ctx, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "NO-SUCH-CIPHER"), "%s", err);

	settings.ciphers = "ECDHE-ECDSA-AES256-GCM-SHA384";
	ctx = context_make(&settings);
	struct client_options tls12 = {.max_version = TLS1_2_VERSION};
	struct pair p;
	pair_init(&p, ctx, id.cert, &tls12);
	cr_assert(handshake(&p), "%s", tls_conn_error_text(p.server));
	cr_assert_str_eq(tls_conn_cipher_name(p.server), "ECDHE-ECDSA-AES256-GCM-SHA384");
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

/* ---- channel binding ---- */

static void der_digest(X509 *cert, const EVP_MD *md, uint8_t *out, unsigned int *len)
{
	unsigned char *der = NULL;
	int der_len = i2d_X509(cert, &der);
	cr_assert_gt(der_len, 0);
	cr_assert_eq(EVP_Digest(der, (size_t)der_len, out, len, md, NULL), 1);
	OPENSSL_free(der);
}

static void channel_binding_check(EVP_PKEY *key, const EVP_MD *sign_md, const EVP_MD *expected_md)
{
	struct identity id = identity_make(key, sign_md, "server");
	struct tls_settings settings = {.cert_file = id.cert_path, .key_file = id.key_path};
	struct tls_context *ctx = context_make(&settings);
	uint8_t expected[EVP_MAX_MD_SIZE];
	unsigned int expected_len = 0;
	der_digest(id.cert, expected_md, expected, &expected_len);

	const uint8_t *binding;
	size_t len = tls_context_channel_binding(ctx, &binding);
	cr_assert_eq(len, expected_len);
	cr_assert_eq(memcmp(binding, expected, len), 0);

	/* The connection carries the same bytes, and they are what the client sees as our certificate. */
	struct client_options options = {0};
	struct pair p;
	pair_init(&p, ctx, id.cert, &options);
	cr_assert(handshake(&p));
	cr_assert_eq(tls_conn_channel_binding(p.server, &binding), expected_len);
	cr_assert_eq(memcmp(binding, expected, expected_len), 0);
	X509 *seen = SSL_get1_peer_certificate(p.client);
	cr_assert_not_null(seen);
	uint8_t seen_digest[EVP_MAX_MD_SIZE];
	unsigned int seen_len = 0;
	der_digest(seen, expected_md, seen_digest, &seen_len);
	cr_assert_eq(memcmp(seen_digest, expected, expected_len), 0);
	X509_free(seen);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

Test(tls, channel_binding_is_the_sha256_of_an_rsa_sha256_certificate)
{
	channel_binding_check(key_rsa(), EVP_sha256(), EVP_sha256());
}

Test(tls, channel_binding_follows_the_signature_hash)
{
	channel_binding_check(key_ec("P-384"), EVP_sha384(), EVP_sha384());
}

Test(tls, channel_binding_is_absent_for_ed25519)
{
	EVP_PKEY *key = key_keep(EVP_PKEY_Q_keygen(NULL, NULL, "ED25519"));
	struct identity id = identity_make(key, NULL, "server");
	struct tls_settings settings = {.cert_file = id.cert_path, .key_file = id.key_path};
	struct tls_context *ctx = context_make(&settings);
	const uint8_t *binding;
	cr_assert_eq(tls_context_channel_binding(ctx, &binding), 0);
	tls_context_destroy(ctx);
}

/* ---- bounds ---- */

Test(tls, ciphertext_input_is_bounded_and_resumes_after_reading)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct client_options options = {0};
	struct pair p;
	pair_init(&p, ctx, id.cert, &options);
	cr_assert(handshake(&p));

	uint8_t *plain = malloc(LARGE_LEN);
	cr_assert_not_null(plain);
	pattern_fill(plain, LARGE_LEN, 3);
	size_t n = 0;
	cr_assert_eq(SSL_write_ex(p.client, plain, LARGE_LEN, &n), 1);
	char *cipher;
	long cipher_len = BIO_get_mem_data(p.client_out, &cipher);
	cr_assert_gt(cipher_len, (long)LARGE_LEN);

	/* All of it offered at once: only the bound is taken, then nothing until the server reads. */
	int fed = tls_conn_feed_ciphertext(p.server, (const uint8_t *)cipher, (uint32_t)cipher_len);
	cr_assert_eq(fed, (int)TLS_CIPHERTEXT_IN_MAX);
	const uint8_t *rest = (const uint8_t *)cipher + fed;
	cr_assert_eq(tls_conn_feed_ciphertext(p.server, rest, (uint32_t)(cipher_len - fed)), 0);
	long at = fed;
	for (int pass = 0; at < cipher_len; pass++) {
		cr_assert_lt(pass, 100);
		server_read_all(&p);
		cr_assert_eq(p.server_rc, 0, "%s", tls_conn_error_text(p.server));
		fed = tls_conn_feed_ciphertext(p.server, (const uint8_t *)cipher + at, (uint32_t)(cipher_len - at));
		cr_assert_gt(fed, 0);
		cr_assert_leq(fed, (int)TLS_CIPHERTEXT_IN_MAX);
		at += fed;
	}
	server_read_all(&p);
	cr_assert_eq(p.server_received_len, LARGE_LEN);
	cr_assert_eq(memcmp(p.server_received, plain, LARGE_LEN), 0);
	free(plain);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

Test(tls, plaintext_writes_stop_at_the_output_bound_until_taken)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct client_options options = {0};
	struct pair p;
	pair_init(&p, ctx, id.cert, &options);
	cr_assert(handshake(&p));

	const size_t len = 1024u * 1024u;
	uint8_t *plain = malloc(len);
	cr_assert_not_null(plain);
	pattern_fill(plain, len, 4);
	int accepted = tls_conn_write_plaintext(p.server, plain, (uint32_t)len);
	cr_assert_geq(accepted, (int)TLS_RECORD_PLAINTEXT_MAX);
	cr_assert_lt((size_t)accepted, len);
	uint32_t pending = tls_conn_ciphertext_len(p.server);
	cr_assert_leq(pending, TLS_CIPHERTEXT_OUT_MAX);
	cr_assert_gt(pending + TLS_RECORD_CIPHERTEXT_MAX, TLS_CIPHERTEXT_OUT_MAX, "stopped only for want of room");
	cr_assert_eq(tls_conn_write_plaintext(p.server, plain + accepted, (uint32_t)(len - accepted)), 0);
	/* Smaller records still go in while their largest ciphertext fits, never past the bound. */
	for (int pass = 0;; pass++) {
		cr_assert_lt(pass, (int)(TLS_CIPHERTEXT_OUT_MAX / 1000));
		int n = tls_conn_write_plaintext(p.server, plain + accepted, 1000);
		cr_assert_geq(n, 0);
		if (n == 0)
			break;
		accepted += n;
		cr_assert_leq(tls_conn_ciphertext_len(p.server), TLS_CIPHERTEXT_OUT_MAX);
	}
	pending = tls_conn_ciphertext_len(p.server);
	cr_assert_gt(pending + 1000 + TLS_RECORD_EXPANSION_MAX, TLS_CIPHERTEXT_OUT_MAX);

	/* Taking in small pieces (a copy) frees room again. */
	uint8_t piece[1000];
	uint32_t taken = 0, n;
	while ((n = tls_conn_take_ciphertext(p.server, piece, sizeof(piece))) > 0) {
		cr_assert_leq(n, sizeof(piece));
		cr_assert_eq(BIO_write(p.client_in, piece, (int)n), (int)n);
		taken += n;
	}
	cr_assert_eq(taken, pending);
	cr_assert_eq(tls_conn_ciphertext_len(p.server), 0);
	client_read_all(&p);
	cr_assert_eq(p.client_received_len, (size_t)accepted);
	server_send(&p, plain + accepted, len - (size_t)accepted);
	cr_assert_eq(p.client_received_len, len);
	cr_assert_eq(memcmp(p.client_received, plain, len), 0);
	free(plain);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

/* OpenSSL writes a whole handshake flight within one call, whatever the caller takes afterwards: a
 * certificate chain larger than TLS_CIPHERTEXT_OUT_LIMIT can never be sent, and each handshake ends
 * with -ENOBUFS at the limit instead of growing the output buffer. */
Test(tls, output_over_its_hard_limit_ends_the_connection)
{
	EVP_PKEY *key = key_ec("P-256");
	X509 *cert = cert_self_signed(key, EVP_sha256(), "server");
	X509 *filler = cert_self_signed(key_ec("P-256"), EVP_sha256(), "an intermediate that pads the chain");
	const char *cert_path = temp_path("huge-chain.crt");
	FILE *f = fopen(cert_path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(PEM_write_X509(f, cert), 1);
	int der_len = i2d_X509(filler, NULL);
	cr_assert_gt(der_len, 0);
	int copies = (int)(TLS_CIPHERTEXT_OUT_LIMIT / (uint32_t)der_len) + 2;
	for (int i = 0; i < copies; i++)
		cr_assert_eq(PEM_write_X509(f, filler), 1);
	cr_assert_eq(fclose(f), 0);
	struct tls_settings settings = {.cert_file = cert_path, .key_file = key_write(key, "server.key", NULL)};
	struct tls_context *ctx = context_make(&settings);

	struct client_options options = {0};
	struct pair p;
	pair_init(&p, ctx, NULL, &options);
	cr_assert_not(handshake(&p));
	cr_assert_eq(p.server_rc, -ENOBUFS, "%d %s", p.server_rc, tls_conn_error_text(p.server));
	cr_assert_eq(tls_conn_error(p.server), -ENOBUFS);
	cr_assert_not_null(strstr(tls_conn_error_text(p.server), "passed"), "%s", tls_conn_error_text(p.server));
	cr_assert_not_null(strstr(tls_conn_error_text(p.server), "handshake"), "%s", tls_conn_error_text(p.server));
	uint8_t out[16];
	cr_assert_eq(tls_conn_read_plaintext(p.server, out, sizeof(out)), -ENOBUFS);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

/* ---- endings ---- */

Test(tls, garbage_fails_the_handshake_with_a_reason)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct tls_conn *conn;
	cr_assert_eq(tls_conn_create(ctx, &conn), 0);
	static const char request[] = "GET / HTTP/1.1\r\nHost: tern\r\n\r\n";
	cr_assert_eq(tls_conn_feed_ciphertext(conn, (const uint8_t *)request, sizeof(request) - 1),
		     (int)sizeof(request) - 1);
	uint8_t out[64];
	cr_assert_eq(tls_conn_read_plaintext(conn, out, sizeof(out)), -EPROTO);
	cr_assert_eq(tls_conn_error(conn), -EPROTO);
	const char *text = tls_conn_error_text(conn);
	cr_assert_not_null(strstr(text, "TLS handshake: "), "%s", text);
	cr_assert_gt(strlen(text), strlen("TLS handshake: "), "%s", text);
	cr_assert_eq(tls_conn_read_plaintext(conn, out, sizeof(out)), -EPROTO);
	tls_conn_destroy(conn);
	tls_context_destroy(ctx);
}

Test(tls, close_notify_ends_the_connection_in_order)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct client_options options = {0};
	struct pair p;

	/* The client closes: the server reads its last bytes, then -ESHUTDOWN. */
	pair_init(&p, ctx, id.cert, &options);
	cr_assert(handshake(&p));
	size_t n = 0;
	cr_assert_eq(SSL_write_ex(p.client, "bye", 3, &n), 1);
	cr_assert_geq(SSL_shutdown(p.client), 0);
	pump(&p);
	cr_assert_eq(p.server_received_len, 3);
	cr_assert_eq(p.server_rc, -ESHUTDOWN);
	cr_assert_eq(tls_conn_error(p.server), -ESHUTDOWN);
	pair_deinit(&p);

	/* tern closes: the client sees close_notify after the last bytes; later writes are refused. */
	pair_init(&p, ctx, id.cert, &options);
	cr_assert(handshake(&p));
	cr_assert_eq(tls_conn_write_plaintext(p.server, (const uint8_t *)"end", 3), 3);
	tls_conn_shutdown(p.server);
	cr_assert_eq(tls_conn_write_plaintext(p.server, (const uint8_t *)"more", 4), -ESHUTDOWN);
	pump(&p);
	uint8_t out[16];
	cr_assert_eq(SSL_read_ex(p.client, out, sizeof(out), &n), 1);
	cr_assert_eq(n, 3);
	cr_assert_neq(SSL_read_ex(p.client, out, sizeof(out), &n), 1);
	cr_assert_eq(SSL_get_error(p.client, 0), SSL_ERROR_ZERO_RETURN);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

Test(tls, no_session_ticket_is_issued)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct client_options options = {0};
	struct pair p;
	pair_init(&p, ctx, id.cert, &options);
	cr_assert(handshake(&p));
	server_send(&p, (const uint8_t *)"x", 1); /* the client reads whatever followed the handshake */
	cr_assert_eq(p.client_received_len, 1);
	SSL_SESSION *session = SSL_get_session(p.client);
	cr_assert_not_null(session);
	cr_assert_eq(SSL_SESSION_is_resumable(session), 0);
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

/* ---- client certificates ---- */

Test(tls, client_certificate_is_verified_against_the_ca_file)
{
	struct identity server = identity_make(key_ec("P-256"), EVP_sha256(), "server");
	EVP_PKEY *client_key = key_ec("P-256");
	X509 *client_cert = cert_self_signed(client_key, EVP_sha256(), "client");
	EVP_PKEY *stranger_key = key_ec("P-256");
	X509 *stranger_cert = cert_self_signed(stranger_key, EVP_sha256(), "stranger");
	struct tls_settings settings = {.cert_file = server.cert_path,
					.key_file = server.key_path,
					.ca_file = cert_write(client_cert, "clients-ca.crt")};
	struct tls_context *ctx = context_make(&settings);
	struct pair p;

	struct client_options trusted = {.cert = client_cert, .key = client_key};
	pair_init(&p, ctx, server.cert, &trusted);
	cr_assert(handshake(&p), "%s", tls_conn_error_text(p.server));
	cr_assert(tls_conn_has_client_certificate(p.server));
	pair_deinit(&p);

	struct client_options without = {0};
	pair_init(&p, ctx, server.cert, &without);
	cr_assert(handshake(&p), "%s", tls_conn_error_text(p.server));
	cr_assert_not(tls_conn_has_client_certificate(p.server));
	pair_deinit(&p);

	struct client_options untrusted = {.cert = stranger_cert, .key = stranger_key};
	pair_init(&p, ctx, server.cert, &untrusted);
	cr_assert_not(handshake(&p) && p.server_rc == 0);
	cr_assert_eq(p.server_rc, -EPROTO);
	cr_assert_not(tls_conn_has_client_certificate(p.server));
	cr_assert_not_null(strstr(tls_conn_error_text(p.server), "client certificate"), "%s",
			   tls_conn_error_text(p.server));
	pair_deinit(&p);
	tls_context_destroy(ctx);
}

/* ---- adoption: tern takes over a client-side SSL whose handshake was made over a socket ---- */

/* A handshake made the way libpq makes it: a plain OpenSSL client on one end of a socketpair (a
 * socket BIO from SSL_set_fd, no verification), and a tern server connection whose ciphertext the
 * test carries to and from the other end by hand. */
struct socket_pair {
	int fds[2]; /* [0] the server's end (pumped by hand), [1] the client's (its SSL's socket BIO) */
	struct tls_conn *server;
	SSL_CTX *client_ctx;
	SSL *client;
};

static void socket_nonblocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);
	cr_assert_geq(flags, 0);
	cr_assert_eq(fcntl(fd, F_SETFL, flags | O_NONBLOCK), 0);
}

/* Counts in *freed when OpenSSL really frees the SSL (its last reference went): leaks and early frees
 * fail the test in every build, not only under a sanitizer (LeakSanitizer's reports in Criterion's
 * workers do not fail a test). */
static void ssl_ex_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	(void)parent;
	(void)ad;
	(void)idx;
	(void)argl;
	(void)argp;
	if (ptr != NULL)
		++*(int *)ptr;
}

static void ssl_watch_free(SSL *ssl, int *freed)
{
	static int index = -1;
	if (index < 0)
		index = SSL_get_ex_new_index(0, NULL, NULL, NULL, ssl_ex_free);
	cr_assert_gt(index, 0); /* 0 is the app data, which libpq uses */
	*freed = 0;
	cr_assert_eq(SSL_set_ex_data(ssl, index, freed), 1);
}

/* Bytes waiting on a socket (without taking them): 0 when nothing was written to its peer. */
static size_t socket_waiting(int fd)
{
	uint8_t byte;
	ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
	if (n < 0) {
		cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s", strerror(errno));
		return 0;
	}
	return (size_t)n;
}

/* Moves what the client wrote into the server (reading the server's plaintext, which the caller
 * wants none of here), then the server's output to the socket. True when a byte moved. */
static bool socket_pump(struct socket_pair *sp)
{
	bool is_moved = false;
	uint8_t chunk[16384];
	ssize_t n;
	while ((n = recv(sp->fds[0], chunk, sizeof(chunk), MSG_DONTWAIT)) > 0) {
		is_moved = true;
		for (ssize_t at = 0; at < n;) {
			int fed = tls_conn_feed_ciphertext(sp->server, chunk + at, (uint32_t)(n - at));
			cr_assert_geq(fed, 0, "feed: %d %s", fed, tls_conn_error_text(sp->server));
			at += fed;
			uint8_t plain[256];
			int rc = tls_conn_read_plaintext(sp->server, plain, sizeof(plain));
			cr_assert_eq(rc, 0, "server read: %d %s", rc, tls_conn_error_text(sp->server));
		}
	}
	cr_assert(n == 0 || errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s", strerror(errno));
	const uint8_t *data;
	uint32_t len;
	while ((len = tls_conn_peek_ciphertext(sp->server, &data)) > 0) {
		ssize_t sent = send(sp->fds[0], data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		cr_assert_gt(sent, 0, "send: %s", strerror(errno));
		tls_conn_consume_ciphertext(sp->server, (uint32_t)sent);
		is_moved = true;
	}
	return is_moved;
}

static void socket_pair_handshake(struct socket_pair *sp, const struct tls_context *ctx, int max_version)
{
	memset(sp, 0, sizeof(*sp));
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp->fds), 0);
	socket_nonblocking(sp->fds[0]);
	socket_nonblocking(sp->fds[1]);
	cr_assert_eq(tls_conn_create(ctx, &sp->server), 0);
	sp->client_ctx = SSL_CTX_new(TLS_client_method());
	cr_assert_not_null(sp->client_ctx);
	SSL_CTX_set_verify(sp->client_ctx, SSL_VERIFY_NONE, NULL);
	if (max_version != 0)
		cr_assert_eq(SSL_CTX_set_max_proto_version(sp->client_ctx, max_version), 1);
	sp->client = SSL_new(sp->client_ctx);
	cr_assert_not_null(sp->client);
	cr_assert_eq(SSL_set_fd(sp->client, sp->fds[1]), 1);
	SSL_set_connect_state(sp->client);
	for (int round = 0;; round++) {
		cr_assert_lt(round, ROUNDS_MAX, "the handshake did not settle");
		int rc = SSL_do_handshake(sp->client);
		int kind = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(sp->client, rc);
		cr_assert(kind == SSL_ERROR_NONE || kind == SSL_ERROR_WANT_READ, "client handshake: %d %s", kind,
			  ERR_error_string(ERR_peek_last_error(), NULL));
		bool is_moved = socket_pump(sp);
		if (rc == 1 && tls_conn_is_handshake_done(sp->server))
			break;
		cr_assert(is_moved || rc == 1, "the handshake stalled");
	}
	cr_assert(SSL_is_init_finished(sp->client));
	/* Everything each side sent was read: adoption loses nothing left on the socket. */
	cr_assert_eq(socket_waiting(sp->fds[0]), 0);
	cr_assert_eq(socket_waiting(sp->fds[1]), 0);
}

static void socket_pair_close(struct socket_pair *sp)
{
	tls_conn_destroy(sp->server);
	SSL_CTX_free(sp->client_ctx); /* any SSL still alive keeps its own reference */
	close(sp->fds[0]);
	close(sp->fds[1]);
}

/* Carries `len` bytes of plaintext from one tls_conn to the other through their memory BIOs (the
 * socket is no one's any more), respecting both bounds, and reads them out of `to` into `received`
 * (at most RECEIVED_MAX). Returns the bytes received. */
static size_t conn_carry(struct tls_conn *from, struct tls_conn *to, const uint8_t *data, size_t len,
			 uint8_t *received)
{
	size_t at = 0, received_len = 0;
	uint8_t chunk[8192];
	for (size_t pass = 0; at < len || tls_conn_ciphertext_len(from) > 0; pass++) {
		cr_assert_lt(pass, 10000, "no progress");
		if (at < len) {
			uint32_t offer = (uint32_t)TERN_MIN(len - at, (size_t)UINT32_MAX);
			int n = tls_conn_write_plaintext(from, data + at, offer);
			cr_assert_geq(n, 0, "write: %d %s", n, tls_conn_error_text(from));
			at += (size_t)n;
		}
		uint32_t taken = tls_conn_take_ciphertext(from, chunk, sizeof(chunk));
		for (uint32_t fed_at = 0; fed_at < taken;) {
			int fed = tls_conn_feed_ciphertext(to, chunk + fed_at, taken - fed_at);
			cr_assert_geq(fed, 0, "feed: %d %s", fed, tls_conn_error_text(to));
			fed_at += (uint32_t)fed;
			int n;
			while ((n = tls_conn_read_plaintext(to, received + received_len,
							    (uint32_t)(RECEIVED_MAX - received_len))) > 0)
				received_len += (size_t)n;
			cr_assert_eq(n, 0, "read: %d %s", n, tls_conn_error_text(to));
			cr_assert_lt(received_len, RECEIVED_MAX);
		}
	}
	return received_len;
}

/* Both directions through an adopted client, one byte and then 100 kB (several records, several
 * output bounds), every byte checked. */
static void adopted_exchange(struct tls_conn *client, struct tls_conn *server)
{
	const size_t large = 100u * 1000u;
	uint8_t *up = malloc(large), *down = malloc(large), *received = malloc(RECEIVED_MAX);
	cr_assert(up != NULL && down != NULL && received != NULL);
	pattern_fill(up, large, 11);
	pattern_fill(down, large, 12);

	cr_assert_eq(conn_carry(client, server, (const uint8_t *)"Q", 1, received), 1);
	cr_assert_eq(received[0], 'Q');
	cr_assert_eq(conn_carry(client, server, up, large, received), large);
	cr_assert_eq(memcmp(received, up, large), 0);

	cr_assert_eq(conn_carry(server, client, (const uint8_t *)"Z", 1, received), 1);
	cr_assert_eq(received[0], 'Z');
	cr_assert_eq(conn_carry(server, client, down, large, received), large);
	cr_assert_eq(memcmp(received, down, large), 0);

	cr_assert_eq(tls_conn_error(client), 0, "%s", tls_conn_error_text(client));
	cr_assert_eq(tls_conn_error(server), 0, "%s", tls_conn_error_text(server));
	free(up);
	free(down);
	free(received);
}

static void adopt_carries_data_both_ways(int max_version, const char *protocol)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct socket_pair sp;
	socket_pair_handshake(&sp, ctx, max_version);
	cr_assert_str_eq(tls_conn_protocol_name(sp.server), protocol);

	int freed;
	ssl_watch_free(sp.client, &freed);
	struct tls_conn *client = (struct tls_conn *)&sp; /* must be set */
	cr_assert_eq(tls_conn_adopt(sp.client, &client), 0);
	cr_assert_not_null(client);
	SSL_free(sp.client); /* the test's reference: the adopted connection keeps its own */
	sp.client = NULL;
	cr_assert_eq(freed, 0);

	cr_assert(tls_conn_is_handshake_done(client));
	cr_assert_neq(tls_conn_protocol_name(client)[0], '\0');
	cr_assert_neq(tls_conn_cipher_name(client)[0], '\0');
	cr_assert_str_eq(tls_conn_protocol_name(client), protocol);
	cr_assert_str_eq(tls_conn_cipher_name(client), tls_conn_cipher_name(sp.server));
	cr_assert_eq(tls_conn_error(client), 0);
	cr_assert_str_eq(tls_conn_error_text(client), "");

	adopted_exchange(client, sp.server);
	/* Nothing went through the socket after adoption. */
	cr_assert_eq(socket_waiting(sp.fds[0]), 0);
	cr_assert_eq(socket_waiting(sp.fds[1]), 0);

	tls_conn_destroy(client); /* the last reference: frees the SSL */
	cr_assert_eq(freed, 1);
	socket_pair_close(&sp);
	tls_context_destroy(ctx);
}

Test(tls, adopted_tls13_client_carries_data_both_ways)
{
	adopt_carries_data_both_ways(0, "TLSv1.3");
}

Test(tls, adopted_tls12_client_carries_data_both_ways)
{
	adopt_carries_data_both_ways(TLS1_2_VERSION, "TLSv1.2");
}

/* libpq keeps its reference and, at PQfinish, writes Terminate, sends close_notify and frees the SSL,
 * after tern destroyed its connection: all of it must go into the null BIO, not into freed memory
 * nor onto the socket. */
Test(tls, adopted_client_destroyed_before_its_other_owner_closes)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct socket_pair sp;
	socket_pair_handshake(&sp, ctx, 0);
	SSL *ssl = sp.client;
	int freed;
	ssl_watch_free(ssl, &freed);
	cr_assert_eq(SSL_up_ref(ssl), 1); /* libpq's reference */
	struct tls_conn *client;
	cr_assert_eq(tls_conn_adopt(ssl, &client), 0);
	SSL_free(ssl); /* the test's own (from SSL_new) */
	sp.client = NULL;

	uint8_t received[64];
	cr_assert_eq(conn_carry(client, sp.server, (const uint8_t *)"hello", 5, received), 5);
	/* Ciphertext left untaken in the connection when it goes. */
	cr_assert_eq(tls_conn_write_plaintext(client, (const uint8_t *)"untaken", 7), 7);
	cr_assert_gt(tls_conn_ciphertext_len(client), 0);
	tls_conn_destroy(client);
	cr_assert_eq(freed, 0, "libpq's reference was dropped too");

	/* The SSL now writes into a null BIO, not into tern's (whose connection is gone). */
	cr_assert_not_null(SSL_get_wbio(ssl));
	cr_assert_eq(BIO_method_type(SSL_get_wbio(ssl)), BIO_TYPE_NULL);
	cr_assert_eq(BIO_method_type(SSL_get_rbio(ssl)), BIO_TYPE_NULL);

	static const uint8_t terminate[5] = {'X', 0, 0, 0, 4};
	ERR_clear_error();
	int written = SSL_write(ssl, terminate, sizeof(terminate));
	cr_assert_eq(written, (int)sizeof(terminate), "SSL_write: %d %d", written, SSL_get_error(ssl, written));
	int shut = SSL_shutdown(ssl);
	cr_assert_geq(shut, 0, "SSL_shutdown: %d %d", shut, SSL_get_error(ssl, shut));
	SSL_free(ssl); /* libpq's: the last */
	cr_assert_eq(freed, 1);
	ERR_clear_error();

	cr_assert_eq(socket_waiting(sp.fds[0]), 0, "the goodbye reached the socket");
	cr_assert_eq(socket_waiting(sp.fds[1]), 0);
	socket_pair_close(&sp);
	tls_context_destroy(ctx);
}

/* The other order tls.h allows: the other owner closes (its writes then land in tern's output, which
 * tern must not send) and frees its reference first, tern destroys after. */
Test(tls, adopted_client_destroyed_after_its_other_owner_closes)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct socket_pair sp;
	socket_pair_handshake(&sp, ctx, 0);
	SSL *ssl = sp.client;
	int freed;
	ssl_watch_free(ssl, &freed);
	cr_assert_eq(SSL_up_ref(ssl), 1);
	struct tls_conn *client;
	cr_assert_eq(tls_conn_adopt(ssl, &client), 0);
	SSL_free(ssl);
	sp.client = NULL;

	static const uint8_t terminate[5] = {'X', 0, 0, 0, 4};
	cr_assert_eq(SSL_write(ssl, terminate, sizeof(terminate)), (int)sizeof(terminate));
	cr_assert_geq(SSL_shutdown(ssl), 0);
	SSL_free(ssl);
	cr_assert_eq(freed, 0, "tern's reference was dropped");
	ERR_clear_error();
	cr_assert_eq(socket_waiting(sp.fds[0]), 0);
	tls_conn_destroy(client);
	cr_assert_eq(freed, 1);
	socket_pair_close(&sp);
	tls_context_destroy(ctx);
}

/* Plaintext the owner has not read yet cannot move into tern: adoption refuses, and the owner keeps
 * an SSL that still reads from its socket and is freed once. */
Test(tls, adopting_with_plaintext_pending_is_refused)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct socket_pair sp;
	socket_pair_handshake(&sp, ctx, 0);
	cr_assert_eq(tls_conn_write_plaintext(sp.server, (const uint8_t *)"0123456789", 10), 10);
	cr_assert_eq(tls_conn_write_plaintext(sp.server, (const uint8_t *)"abcdefghij", 10), 10);
	cr_assert(socket_pump(&sp));

	uint8_t out[32];
	size_t n = 0;
	cr_assert_eq(SSL_read_ex(sp.client, out, 1, &n), 1);
	cr_assert_eq(n, 1);
	cr_assert_eq(out[0], '0');
	cr_assert_eq(SSL_pending(sp.client), 9);

	int freed;
	ssl_watch_free(sp.client, &freed);
	struct tls_conn *client = (struct tls_conn *)&sp;
	cr_assert_eq(tls_conn_adopt(sp.client, &client), -EPROTO);
	cr_assert_null(client);

	/* Untouched: still its socket BIO, the rest of the first record, then the second from the socket. */
	cr_assert_eq(BIO_method_type(SSL_get_rbio(sp.client)), BIO_TYPE_SOCKET);
	cr_assert_eq(SSL_read_ex(sp.client, out, sizeof(out), &n), 1);
	cr_assert_eq(n, 9);
	cr_assert_eq(memcmp(out, "123456789", 9), 0);
	cr_assert_eq(SSL_read_ex(sp.client, out, sizeof(out), &n), 1);
	cr_assert_eq(n, 10);
	cr_assert_eq(memcmp(out, "abcdefghij", 10), 0);
	/* And it still writes to its socket. */
	cr_assert_eq(SSL_write_ex(sp.client, "ok", 2, &n), 1);
	cr_assert_gt(socket_waiting(sp.fds[0]), 0);

	SSL_free(sp.client); /* once: adoption kept no reference */
	cr_assert_eq(freed, 1, "a refused adoption kept a reference to the SSL");
	sp.client = NULL;
	socket_pair_close(&sp);
	tls_context_destroy(ctx);
}

/* The server's close_notify, after its last bytes, ends the adopted connection in order, and the
 * words say who closed. */
Test(tls, adopted_client_sees_the_server_close_notify)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct socket_pair sp;
	socket_pair_handshake(&sp, ctx, 0);
	int freed;
	ssl_watch_free(sp.client, &freed);
	struct tls_conn *client;
	cr_assert_eq(tls_conn_adopt(sp.client, &client), 0);
	SSL_free(sp.client);
	sp.client = NULL;

	cr_assert_eq(tls_conn_write_plaintext(sp.server, (const uint8_t *)"last", 4), 4);
	tls_conn_shutdown(sp.server);
	uint8_t cipher[4096];
	uint32_t len = tls_conn_take_ciphertext(sp.server, cipher, sizeof(cipher));
	cr_assert_gt(len, 0);
	cr_assert_eq(tls_conn_ciphertext_len(sp.server), 0);
	cr_assert_eq(tls_conn_feed_ciphertext(client, cipher, len), (int)len);

	uint8_t out[64];
	cr_assert_eq(tls_conn_read_plaintext(client, out, sizeof(out)), 4);
	cr_assert_eq(memcmp(out, "last", 4), 0);
	int rc = tls_conn_read_plaintext(client, out, sizeof(out));
	cr_assert_eq(rc, -ESHUTDOWN, "%d %s", rc, tls_conn_error_text(client));
	cr_assert_eq(tls_conn_error(client), -ESHUTDOWN);
	const char *text = tls_conn_error_text(client);
	cr_assert_not_null(strstr(text, "server"), "%s", text);
	cr_assert_null(strstr(text, "client"), "%s", text);
	cr_assert_str_eq(text, "the server closed TLS (close_notify)");
	/* The error sticks. */
	cr_assert_eq(tls_conn_read_plaintext(client, out, sizeof(out)), -ESHUTDOWN);
	cr_assert_eq(tls_conn_write_plaintext(client, (const uint8_t *)"x", 1), -ESHUTDOWN);
	tls_conn_destroy(client);
	cr_assert_eq(freed, 1);
	socket_pair_close(&sp);
	tls_context_destroy(ctx);
}

/* A bad record after adoption is a TLS failure, not a certificate one: a login that did not verify the
 * server (sslmode=require, as here: a self-signed certificate, verify none) leaves a verification
 * result in the SSL that has nothing to do with what fails later. */
Test(tls, adopted_client_names_a_bad_record_not_the_certificate)
{
	struct identity id;
	struct tls_context *ctx = context_default(&id);
	struct socket_pair sp;
	socket_pair_handshake(&sp, ctx, 0);
	cr_assert_neq(SSL_get_verify_result(sp.client), X509_V_OK, "the premise: an unverified self-signed server");
	struct tls_conn *client;
	cr_assert_eq(tls_conn_adopt(sp.client, &client), 0);
	SSL_free(sp.client);
	sp.client = NULL;

	cr_assert_eq(tls_conn_write_plaintext(sp.server, (const uint8_t *)"0123456789", 10), 10);
	uint8_t cipher[256];
	uint32_t len = tls_conn_take_ciphertext(sp.server, cipher, sizeof(cipher));
	cr_assert_gt(len, 10);
	cipher[len - 1] ^= 1; /* the record's authentication tag */
	cr_assert_eq(tls_conn_feed_ciphertext(client, cipher, len), (int)len);
	uint8_t out[32];
	int rc = tls_conn_read_plaintext(client, out, sizeof(out));
	cr_assert_eq(rc, -EPROTO, "%d %s", rc, tls_conn_error_text(client));
	const char *text = tls_conn_error_text(client);
	cr_assert_eq(strncmp(text, "TLS: ", 5), 0, "%s", text);
	cr_assert_null(strstr(text, "certificate"), "%s", text);
	tls_conn_destroy(client);
	socket_pair_close(&sp);
	tls_context_destroy(ctx);
}
