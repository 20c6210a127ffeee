/*
 * scram.c — SCRAM-SHA-256 server exchange and secrets, written from RFC 5802 and RFC 7677.
 * Messages are parsed as (bytes, length): SASL payloads are length-delimited and carry no NUL.
 */
#include "scram.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

static const char scram_secret_prefix[] = "SCRAM-SHA-256$";
static const char scram_mechanism[] = "SCRAM-SHA-256";
static const char scram_mechanism_plus[] = "SCRAM-SHA-256-PLUS";
/* The one channel binding type PostgreSQL (and so every libpq client) uses. */
static const char scram_cb_name_end_point[] = "tls-server-end-point";

/* c= of client-final decodes to this: the gs2 header, then under PLUS the channel binding data. */
#define SCRAM_CBIND_INPUT_MAX (SCRAM_GS2_HEADER_MAX + SCRAM_CHANNEL_BINDING_MAX)
/* The longest base64 values we decode are a SCRAM_SALT_MAX salt and the cbind-input; anything longer is
 * malformed. */
#define SCRAM_B64_DECODED_MAX ((TERN_MAX(SCRAM_SALT_MAX, SCRAM_CBIND_INPUT_MAX) + 2) / 3 * 3)
#define SCRAM_B64_LEN(raw_len) (((raw_len) + 2) / 3 * 4)

static_assert(SCRAM_B64_LEN(SCRAM_KEY_LEN) + 2 + 1 <= SCRAM_SERVER_FINAL_MAX, "server-final must fit");
/* "r=" nonces ",s=" salt ",i=" up to 10 digits, NUL */
#define SCRAM_SERVER_FIRST_LONGEST \
	(2 + SCRAM_CLIENT_NONCE_MAX + SCRAM_SERVER_NONCE_MAX + 3 + SCRAM_B64_LEN(SCRAM_SALT_MAX) + 3 + 10 + 1)
static_assert(SCRAM_SERVER_FIRST_LONGEST <= SCRAM_SERVER_FIRST_MAX, "server-first must fit its buffer");
static_assert(SCRAM_B64_LEN(SCRAM_SERVER_NONCE_RAW_LEN) <= SCRAM_SERVER_NONCE_MAX, "random nonce must fit");
static_assert(SCRAM_CBIND_INPUT_MAX <= SCRAM_B64_DECODED_MAX, "c= of the longest header must be decodable");
static_assert(2 + sizeof(scram_cb_name_end_point) - 1 + 2 <= SCRAM_GS2_HEADER_MAX,
	      "the tls-server-end-point gs2 header must be kept");
/* "c=" cbind-input ",r=" nonces ",p=" proof: the longest client-final without extensions. */
#define SCRAM_CLIENT_FINAL_LONGEST                                                                        \
	(2 + SCRAM_B64_LEN(SCRAM_CBIND_INPUT_MAX) + 3 + SCRAM_CLIENT_NONCE_MAX + SCRAM_SERVER_NONCE_MAX + \
	 3 + SCRAM_B64_LEN(SCRAM_KEY_LEN))
static_assert(SCRAM_CLIENT_FINAL_LONGEST <= SCRAM_CLIENT_FINAL_MAX, "a valid client-final must be accepted");

/* ---- base64 (RFC 4648, padded, no whitespace) ---- */

static int scram_b64_encode(const uint8_t *in, size_t len, char *out, size_t out_size)
{
	TERN_ASSERT(len <= INT_MAX / 2);
	size_t need = SCRAM_B64_LEN(len);
	if (need + 1 > out_size)
		return -ENOSPC;
	int n = EVP_EncodeBlock((unsigned char *)out, in, (int)len);
	TERN_ASSERT(n >= 0 && (size_t)n == need);
	return n;
}

static bool scram_b64_char_is_valid(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
	       c == '/';
}

/* EVP_DecodeBlock skips surrounding whitespace and counts padding as zero bytes, so the alphabet and
 * padding are checked here and the real length is computed from the padding. */
static int scram_b64_decode(const uint8_t *in, size_t len, uint8_t *out, size_t out_size)
{
	if (len == 0 || len % 4 != 0)
		return -EINVAL;
	size_t pad = 0;
	if (in[len - 1] == '=')
		pad = in[len - 2] == '=' ? 2 : 1;
	for (size_t i = 0; i < len - pad; i++)
		if (!scram_b64_char_is_valid(in[i]))
			return -EINVAL;
	size_t raw_len = len / 4 * 3;
	uint8_t raw[SCRAM_B64_DECODED_MAX];
	if (raw_len > sizeof(raw) || raw_len - pad > out_size)
		return -EINVAL;
	int n = EVP_DecodeBlock(raw, in, (int)len);
	if (n < 0 || (size_t)n != raw_len)
		return -EINVAL;
	memcpy(out, raw, raw_len - pad);
	OPENSSL_cleanse(raw, sizeof(raw));
	return (int)(raw_len - pad);
}

/* ---- primitives ---- */

static bool scram_sha256(const void *in, size_t len, uint8_t out[SCRAM_KEY_LEN])
{
	unsigned int n = 0;
	return EVP_Digest(in, len, out, &n, EVP_sha256(), NULL) == 1 && n == SCRAM_KEY_LEN;
}

static bool scram_hmac(const uint8_t *key, size_t key_len, const void *msg, size_t msg_len,
		       uint8_t out[SCRAM_KEY_LEN])
{
	unsigned int n = 0;
	return HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, out, &n) != NULL && n == SCRAM_KEY_LEN;
}

/* ---- secrets ---- */

int scram_secret_from_password(const char *password, const uint8_t *salt, size_t salt_len,
			       uint32_t iterations, struct scram_secret *out)
{
	TERN_ASSERT(password != NULL && out != NULL);
	TERN_ASSERT(salt != NULL || salt_len == 0);
	memset(out, 0, sizeof(*out));
	if (salt_len == 0 || salt_len > SCRAM_SALT_MAX || iterations == 0 ||
	    iterations > SCRAM_ITERATIONS_MAX)
		return -EINVAL;
	/* No SASLprep (RFC 4013) here: PostgreSQL normalises non-ASCII passwords first, we use the bytes. */
	size_t password_len = strlen(password);
	if (password_len > INT_MAX)
		return -EINVAL;

	uint8_t salted_password[SCRAM_KEY_LEN];
	uint8_t client_key[SCRAM_KEY_LEN];
	int rc = -EIO;
	if (PKCS5_PBKDF2_HMAC(password, (int)password_len, salt, (int)salt_len, (int)iterations, EVP_sha256(),
			      SCRAM_KEY_LEN, salted_password) != 1)
		goto out;
	if (!scram_hmac(salted_password, SCRAM_KEY_LEN, "Client Key", 10, client_key))
		goto out;
	if (!scram_sha256(client_key, SCRAM_KEY_LEN, out->stored_key))
		goto out;
	if (!scram_hmac(salted_password, SCRAM_KEY_LEN, "Server Key", 10, out->server_key))
		goto out;
	out->iterations = iterations;
	memcpy(out->salt, salt, salt_len);
	out->salt_len = salt_len;
	rc = 0;
out:
	OPENSSL_cleanse(salted_password, sizeof(salted_password));
	OPENSSL_cleanse(client_key, sizeof(client_key));
	if (rc < 0)
		OPENSSL_cleanse(out, sizeof(*out));
	return rc;
}

static int scram_secret_parse_fields(const char *text, struct scram_secret *out)
{
	size_t prefix_len = sizeof(scram_secret_prefix) - 1;
	if (strncmp(text, scram_secret_prefix, prefix_len) != 0)
		return -EINVAL;
	const char *p = text + prefix_len;

	/* Digits only: strtol's signs, spaces and overflow rules have no place in a stored secret. */
	uint64_t iterations = 0;
	size_t digits = 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (++digits > 10)
			return -EINVAL;
		iterations = iterations * 10 + (uint64_t)(*p - '0');
	}
	if (digits == 0 || iterations == 0 || iterations > SCRAM_ITERATIONS_MAX || *p != ':')
		return -EINVAL;
	p++;

	const char *salt_end = strchr(p, '$');
	if (salt_end == NULL)
		return -EINVAL;
	int n = scram_b64_decode((const uint8_t *)p, (size_t)(salt_end - p), out->salt, sizeof(out->salt));
	if (n <= 0)
		return -EINVAL;
	out->salt_len = (size_t)n;
	p = salt_end + 1;

	const char *keys_colon = strchr(p, ':');
	if (keys_colon == NULL)
		return -EINVAL;
	n = scram_b64_decode((const uint8_t *)p, (size_t)(keys_colon - p), out->stored_key, SCRAM_KEY_LEN);
	if (n != SCRAM_KEY_LEN)
		return -EINVAL;
	p = keys_colon + 1;
	n = scram_b64_decode((const uint8_t *)p, strlen(p), out->server_key, SCRAM_KEY_LEN);
	if (n != SCRAM_KEY_LEN)
		return -EINVAL;
	out->iterations = (uint32_t)iterations;
	return 0;
}

int scram_secret_parse(const char *text, struct scram_secret *out)
{
	TERN_ASSERT(text != NULL && out != NULL);
	memset(out, 0, sizeof(*out));
	int rc = scram_secret_parse_fields(text, out);
	if (rc < 0)
		OPENSSL_cleanse(out, sizeof(*out));
	return rc;
}

/* One random key per process: mock secrets must be stable across attempts yet unpredictable. */
static pthread_once_t scram_mock_once = PTHREAD_ONCE_INIT;
static uint8_t scram_mock_key[SCRAM_KEY_LEN];
static bool scram_mock_key_is_ready;

static void scram_mock_key_create(void)
{
	scram_mock_key_is_ready = RAND_bytes(scram_mock_key, sizeof(scram_mock_key)) == 1;
}

int scram_secret_mock(const char *user_name, struct scram_secret *out)
{
	TERN_ASSERT(user_name != NULL && out != NULL);
	memset(out, 0, sizeof(*out));
	int once_rc = pthread_once(&scram_mock_once, scram_mock_key_create);
	TERN_ASSERT(once_rc == 0);
	if (!scram_mock_key_is_ready)
		return -EIO;

	uint8_t user_key[SCRAM_KEY_LEN];
	uint8_t salt[SCRAM_KEY_LEN];
	int rc = -EIO;
	if (!scram_hmac(scram_mock_key, sizeof(scram_mock_key), user_name, strlen(user_name), user_key))
		goto out;
	if (!scram_hmac(user_key, sizeof(user_key), "salt", 4, salt))
		goto out;
	if (!scram_hmac(user_key, sizeof(user_key), "stored key", 10, out->stored_key))
		goto out;
	if (!scram_hmac(user_key, sizeof(user_key), "server key", 10, out->server_key))
		goto out;
	static_assert(SCRAM_SALT_LEN_DEFAULT <= SCRAM_KEY_LEN, "mock salt is cut from one HMAC");
	memcpy(out->salt, salt, SCRAM_SALT_LEN_DEFAULT);
	out->salt_len = SCRAM_SALT_LEN_DEFAULT;
	out->iterations = SCRAM_ITERATIONS_DEFAULT;
	rc = 0;
out:
	OPENSSL_cleanse(user_key, sizeof(user_key));
	if (rc < 0)
		OPENSSL_cleanse(out, sizeof(*out));
	return rc;
}

/* ---- exchange ---- */

/* RFC 5802 "printable": what a nonce may hold. */
static bool scram_char_is_printable(uint8_t c) { return c >= 0x21 && c <= 0x7e && c != ','; }

static int scram_server_begin_state(struct scram_server *s, const struct scram_secret *secret,
				    const char *server_nonce)
{
	if (secret != NULL) {
		s->secret = *secret;
	} else {
		/* Random keys: no proof can match, and the exchange looks like any other until the end. */
		s->secret.iterations = SCRAM_ITERATIONS_DEFAULT;
		s->secret.salt_len = SCRAM_SALT_LEN_DEFAULT;
		if (RAND_bytes(s->secret.salt, SCRAM_SALT_LEN_DEFAULT) != 1 ||
		    RAND_bytes(s->secret.stored_key, SCRAM_KEY_LEN) != 1 ||
		    RAND_bytes(s->secret.server_key, SCRAM_KEY_LEN) != 1)
			return -EIO;
	}

	if (server_nonce != NULL) {
		size_t n = strnlen(server_nonce, SCRAM_SERVER_NONCE_MAX + 1);
		if (n == 0 || n > SCRAM_SERVER_NONCE_MAX)
			return -EINVAL;
		for (size_t i = 0; i < n; i++)
			if (!scram_char_is_printable((uint8_t)server_nonce[i]))
				return -EINVAL;
		memcpy(s->server_nonce, server_nonce, n + 1);
		s->server_nonce_len = n;
	} else {
		uint8_t raw[SCRAM_SERVER_NONCE_RAW_LEN];
		if (RAND_bytes(raw, sizeof(raw)) != 1)
			return -EIO;
		int n = scram_b64_encode(raw, sizeof(raw), s->server_nonce, sizeof(s->server_nonce));
		TERN_ASSERT(n > 0);
		s->server_nonce_len = (size_t)n;
	}
	return 0;
}

int scram_server_begin(struct scram_server *s, const struct scram_secret *secret, const char *server_nonce)
{
	TERN_ASSERT(s != NULL);
	if (secret != NULL)
		TERN_ASSERT(secret->iterations > 0 && secret->salt_len > 0 &&
			    secret->salt_len <= SCRAM_SALT_MAX);
	memset(s, 0, sizeof(*s));
	int rc = scram_server_begin_state(s, secret, server_nonce);
	if (rc < 0) {
		scram_server_deinit(s);
		s->step = SCRAM_STEP_FAILED;
		return rc;
	}
	s->step = SCRAM_STEP_BEGUN;
	return 0;
}

void scram_server_set_channel_binding(struct scram_server *s, const uint8_t *data, size_t len)
{
	TERN_ASSERT(s != NULL);
	TERN_ASSERT(data != NULL || len == 0);
	TERN_ASSERT(len <= SCRAM_CHANNEL_BINDING_MAX);
	TERN_ASSERT(s->step == SCRAM_STEP_BEGUN);
	/* The mechanism list offered depends on the binding, so the choice cannot precede it. */
	TERN_ASSERT(!s->channel_binding_is_used);
	if (len > 0)
		memcpy(s->channel_binding, data, len);
	s->channel_binding_len = len;
}

int scram_server_select_mechanism(struct scram_server *s, const char *mechanism)
{
	TERN_ASSERT(s != NULL && mechanism != NULL);
	TERN_ASSERT(s->step == SCRAM_STEP_BEGUN);
	if (strcmp(mechanism, scram_mechanism) == 0) {
		s->channel_binding_is_used = false;
		return 0;
	}
	/* PLUS without a binding was never offered: a client choosing it is as wrong as an unknown name. */
	if (strcmp(mechanism, scram_mechanism_plus) == 0 && s->channel_binding_len > 0) {
		s->channel_binding_is_used = true;
		return 0;
	}
	s->step = SCRAM_STEP_FAILED;
	return -ENOTSUP;
}

/* A read position over one borrowed message. */
struct scram_cursor {
	const uint8_t *p;
	size_t len;
	size_t pos;
};

static bool scram_cursor_is_end(const struct scram_cursor *c) { return c->pos == c->len; }

static bool scram_cursor_take(struct scram_cursor *c, uint8_t byte)
{
	if (c->pos < c->len && c->p[c->pos] == byte) {
		c->pos++;
		return true;
	}
	return false;
}

/* Reads "<name>=<value>" up to the next ',' or the end. The value may be empty: callers decide. */
static bool scram_cursor_attribute(struct scram_cursor *c, uint8_t name, const uint8_t **value,
				   size_t *value_len)
{
	if (c->len - c->pos < 2 || c->p[c->pos] != name || c->p[c->pos + 1] != '=')
		return false;
	c->pos += 2;
	size_t start = c->pos;
	while (c->pos < c->len && c->p[c->pos] != ',')
		c->pos++;
	*value = c->p + start;
	*value_len = c->pos - start;
	return true;
}

/* Attribute names RFC 5802 gives a meaning; seen where an extension belongs, they are duplicates or
 * misplaced mandatory attributes, which the RFC's grammar does not allow. */
static bool scram_attribute_is_reserved(uint8_t name)
{
	return name != '\0' && strchr("acenimprsv", name) != NULL;
}

/* extensions = attr-val *("," attr-val); attr-val = ALPHA "=" value; value = 1*value-char.
 * Unknown extensions are ignored, as the RFC allows for everything but "m". */
static bool scram_cursor_extension(struct scram_cursor *c)
{
	if (c->len - c->pos < 2)
		return false;
	uint8_t name = c->p[c->pos];
	bool is_alpha = (name >= 'a' && name <= 'z') || (name >= 'A' && name <= 'Z');
	if (!is_alpha || scram_attribute_is_reserved(name))
		return false;
	const uint8_t *value;
	size_t value_len;
	if (!scram_cursor_attribute(c, name, &value, &value_len) || value_len == 0)
		return false;
	return memchr(value, '\0', value_len) == NULL;
}

static bool scram_nonce_is_valid(const uint8_t *nonce, size_t len, size_t len_max)
{
	if (len == 0 || len > len_max)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!scram_char_is_printable(nonce[i]))
			return false;
	return true;
}

/* saslname may be empty here: PostgreSQL clients send "n=," because the startup packet names the user.
 * UTF-8 sequences are not validated since the name is never used. */
static bool scram_saslname_is_valid(const uint8_t *name, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (name[i] == '\0')
			return false;
		if (name[i] == '=') {
			if (len - i < 3)
				return false;
			bool is_comma = name[i + 1] == '2' && name[i + 2] == 'C';
			bool is_equals = name[i + 1] == '3' && name[i + 2] == 'D';
			if (!is_comma && !is_equals)
				return false;
			i += 2;
		}
	}
	return true;
}

static bool scram_cb_name_char_is_valid(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
	       c == '-';
}

/* Validates client-first-message and keeps the gs2 header and the bare message. */
static int scram_parse_client_first(struct scram_server *s, const uint8_t *msg, size_t len,
				    size_t *nonce_offset, size_t *nonce_len)
{
	struct scram_cursor c = {.p = msg, .len = len, .pos = 0};
	uint8_t flag = len > 0 ? msg[0] : 0;
	size_t cb_name_start = 0, cb_name_len = 0;

	if (scram_cursor_take(&c, 'p')) {
		if (!scram_cursor_take(&c, '='))
			return -EPROTO;
		cb_name_start = c.pos;
		while (c.pos < c.len && scram_cb_name_char_is_valid(c.p[c.pos]))
			c.pos++;
		cb_name_len = c.pos - cb_name_start;
		if (cb_name_len == 0)
			return -EPROTO;
	} else if (!scram_cursor_take(&c, 'n') && !scram_cursor_take(&c, 'y')) {
		return -EPROTO;
	}
	if (!scram_cursor_take(&c, ','))
		return -EPROTO;
	/* authzid: PostgreSQL refuses it as a protocol violation; the startup packet names the user. */
	if (!scram_cursor_take(&c, ','))
		return -EPROTO;
	if (c.pos > sizeof(s->gs2_header))
		return -EPROTO;
	size_t gs2_len = c.pos;

	size_t bare_start = c.pos;
	if (len - bare_start > sizeof(s->client_first_bare))
		return -EPROTO;
	/* A leading "m=" (reserved-mext) fails here too: RFC 5802 says a server that does not know it
	 * must fail the authentication. */
	const uint8_t *value;
	size_t value_len;
	if (!scram_cursor_attribute(&c, 'n', &value, &value_len) ||
	    !scram_saslname_is_valid(value, value_len))
		return -EPROTO;
	if (!scram_cursor_take(&c, ','))
		return -EPROTO;
	if (!scram_cursor_attribute(&c, 'r', &value, &value_len) ||
	    !scram_nonce_is_valid(value, value_len, SCRAM_CLIENT_NONCE_MAX))
		return -EPROTO;
	*nonce_offset = (size_t)(value - (msg + bare_start));
	*nonce_len = value_len;
	while (!scram_cursor_is_end(&c))
		if (!scram_cursor_take(&c, ',') || !scram_cursor_extension(&c))
			return -EPROTO;

	/* Well formed; now whether the flag agrees with the mechanism, as PostgreSQL checks. */
	if (flag == 'p') {
		if (!s->channel_binding_is_used)
			return -EPROTO; /* binding data under the mechanism without binding */
		if (cb_name_len != sizeof(scram_cb_name_end_point) - 1 ||
		    memcmp(msg + cb_name_start, scram_cb_name_end_point, cb_name_len) != 0)
			return -ENOTSUP;
	} else {
		if (s->channel_binding_is_used)
			return -EPROTO; /* PLUS chosen, then no binding data */
		/* "y": the client could bind but believes we cannot. We offered PLUS, so someone stripped it
		 * from the mechanism list on the way. */
		if (flag == 'y' && s->channel_binding_len > 0)
			return -EPROTO;
	}
	memcpy(s->gs2_header, msg, gs2_len);
	s->gs2_header_len = gs2_len;
	memcpy(s->client_first_bare, msg + bare_start, len - bare_start);
	s->client_first_bare_len = len - bare_start;
	return 0;
}

static int scram_copy_out(const char *text, size_t len, char *out, size_t out_size)
{
	if (len + 1 > out_size)
		return -ENOSPC;
	memcpy(out, text, len);
	out[len] = '\0';
	return (int)len;
}

int scram_server_first(struct scram_server *s, const uint8_t *client_first, size_t len, char *out,
		       size_t out_size)
{
	TERN_ASSERT(s != NULL && out != NULL);
	TERN_ASSERT(client_first != NULL || len == 0);
	TERN_ASSERT(s->step == SCRAM_STEP_BEGUN);
	TERN_ASSERT(s->channel_binding_len <= SCRAM_CHANNEL_BINDING_MAX);
	TERN_ASSERT(!s->channel_binding_is_used || s->channel_binding_len > 0);
	s->step = SCRAM_STEP_FAILED;

	size_t nonce_offset = 0, client_nonce_len = 0;
	int rc = scram_parse_client_first(s, client_first, len, &nonce_offset, &client_nonce_len);
	if (rc < 0)
		return rc;

	char salt_b64[SCRAM_B64_LEN(SCRAM_SALT_MAX) + 1];
	rc = scram_b64_encode(s->secret.salt, s->secret.salt_len, salt_b64, sizeof(salt_b64));
	TERN_ASSERT(rc > 0);
	int n = snprintf(s->server_first, sizeof(s->server_first), "r=%.*s%s,s=%s,i=%" PRIu32,
			 (int)client_nonce_len, s->client_first_bare + nonce_offset, s->server_nonce,
			 salt_b64, s->secret.iterations);
	TERN_ASSERT(n > 0 && (size_t)n < sizeof(s->server_first));
	s->server_first_len = (size_t)n;
	s->nonce_len = client_nonce_len + s->server_nonce_len;

	rc = scram_copy_out(s->server_first, s->server_first_len, out, out_size);
	if (rc < 0)
		return rc;
	s->step = SCRAM_STEP_FIRST_SENT;
	return rc;
}

/* ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage); valid when H(ClientKey) == StoredKey.
 * Writes "v=" + base64(HMAC(ServerKey, AuthMessage)) on success. */
static int scram_verify_proof(struct scram_server *s, const uint8_t *without_proof, size_t without_proof_len,
			      const uint8_t proof[SCRAM_KEY_LEN], char *out, size_t out_size)
{
	char auth_message[SCRAM_CLIENT_FIRST_BARE_MAX + 1 + SCRAM_SERVER_FIRST_MAX + 1 +
			  SCRAM_CLIENT_FINAL_MAX];
	TERN_ASSERT(s->client_first_bare_len + 1 + s->server_first_len + 1 + without_proof_len <=
		    sizeof(auth_message));
	size_t at = 0;
	memcpy(auth_message + at, s->client_first_bare, s->client_first_bare_len);
	at += s->client_first_bare_len;
	auth_message[at++] = ',';
	memcpy(auth_message + at, s->server_first, s->server_first_len);
	at += s->server_first_len;
	auth_message[at++] = ',';
	memcpy(auth_message + at, without_proof, without_proof_len);
	at += without_proof_len;

	uint8_t client_signature[SCRAM_KEY_LEN];
	uint8_t client_key[SCRAM_KEY_LEN];
	uint8_t stored_key[SCRAM_KEY_LEN];
	uint8_t server_signature[SCRAM_KEY_LEN];
	char final[SCRAM_SERVER_FINAL_MAX] = "v=";
	int rc = -EIO;
	if (!scram_hmac(s->secret.stored_key, SCRAM_KEY_LEN, auth_message, at, client_signature))
		goto out;
	for (size_t i = 0; i < SCRAM_KEY_LEN; i++)
		client_key[i] = proof[i] ^ client_signature[i];
	if (!scram_sha256(client_key, SCRAM_KEY_LEN, stored_key))
		goto out;
	if (CRYPTO_memcmp(stored_key, s->secret.stored_key, SCRAM_KEY_LEN) != 0) {
		rc = -EACCES;
		goto out;
	}
	memcpy(s->client_key, client_key, SCRAM_KEY_LEN);
	if (!scram_hmac(s->secret.server_key, SCRAM_KEY_LEN, auth_message, at, server_signature))
		goto out;
	int n = scram_b64_encode(server_signature, SCRAM_KEY_LEN, final + 2, sizeof(final) - 2);
	TERN_ASSERT(n > 0);
	rc = scram_copy_out(final, (size_t)n + 2, out, out_size);
out:
	OPENSSL_cleanse(client_signature, sizeof(client_signature));
	OPENSSL_cleanse(client_key, sizeof(client_key));
	OPENSSL_cleanse(stored_key, sizeof(stored_key));
	OPENSSL_cleanse(server_signature, sizeof(server_signature));
	return rc;
}

int scram_server_final(struct scram_server *s, const uint8_t *client_final, size_t len, char *out,
		       size_t out_size)
{
	TERN_ASSERT(s != NULL && out != NULL);
	TERN_ASSERT(client_final != NULL || len == 0);
	TERN_ASSERT(s->step == SCRAM_STEP_FIRST_SENT);
	s->step = SCRAM_STEP_FAILED;
	if (len > SCRAM_CLIENT_FINAL_MAX)
		return -EPROTO;

	struct scram_cursor c = {.p = client_final, .len = len, .pos = 0};
	const uint8_t *value;
	size_t value_len;

	/* c= is the gs2 header, and under PLUS the tls-server-end-point hash after it: a client that saw
	 * another certificate (a man in the middle's) sends another hash. */
	uint8_t cbind_input[SCRAM_B64_DECODED_MAX];
	if (!scram_cursor_attribute(&c, 'c', &value, &value_len))
		return -EPROTO;
	size_t binding_len = s->channel_binding_is_used ? s->channel_binding_len : 0;
	int n = scram_b64_decode(value, value_len, cbind_input, sizeof(cbind_input));
	if (n < 0 || (size_t)n < s->gs2_header_len || memcmp(cbind_input, s->gs2_header, s->gs2_header_len) != 0)
		return -EPROTO;
	if ((size_t)n != s->gs2_header_len + binding_len ||
	    memcmp(cbind_input + s->gs2_header_len, s->channel_binding, binding_len) != 0)
		return s->channel_binding_is_used ? -EKEYREJECTED : -EPROTO;

	if (!scram_cursor_take(&c, ',') || !scram_cursor_attribute(&c, 'r', &value, &value_len))
		return -EPROTO;
	if (value_len != s->nonce_len || memcmp(value, s->server_first + 2, s->nonce_len) != 0)
		return -EPROTO;

	size_t without_proof_len;
	for (;;) {
		without_proof_len = c.pos;
		if (!scram_cursor_take(&c, ','))
			return -EPROTO; /* no proof */
		if (scram_cursor_attribute(&c, 'p', &value, &value_len))
			break;
		if (!scram_cursor_extension(&c))
			return -EPROTO;
	}
	if (!scram_cursor_is_end(&c))
		return -EPROTO; /* the proof must come last */
	uint8_t proof[SCRAM_KEY_LEN];
	if (scram_b64_decode(value, value_len, proof, sizeof(proof)) != SCRAM_KEY_LEN)
		return -EPROTO;

	int rc = scram_verify_proof(s, client_final, without_proof_len, proof, out, out_size);
	OPENSSL_cleanse(proof, sizeof(proof));
	if (rc < 0)
		return rc;
	s->step = SCRAM_STEP_DONE;
	return rc;
}

void scram_server_deinit(struct scram_server *s)
{
	TERN_ASSERT(s != NULL);
	OPENSSL_cleanse(s, sizeof(*s));
	s->step = SCRAM_STEP_NONE;
}

/* ---- the client side ---- */

/* base64("n,,"): the gs2 header of a client that does not bind the channel. */
static const char scram_client_cbind_plain[] = "biws";

int scram_client_begin(struct scram_client *c, const struct scram_secret *secret,
		       const uint8_t client_key[SCRAM_KEY_LEN])
{
	TERN_ASSERT(c != NULL && secret != NULL && client_key != NULL);
	TERN_ASSERT(secret->iterations > 0 && secret->salt_len > 0 && secret->salt_len <= SCRAM_SALT_MAX);
	memset(c, 0, sizeof(*c));
	c->secret = *secret;
	memcpy(c->client_key, client_key, SCRAM_KEY_LEN);
	uint8_t raw[SCRAM_SERVER_NONCE_RAW_LEN];
	char nonce[SCRAM_B64_LEN(SCRAM_SERVER_NONCE_RAW_LEN) + 1];
	if (RAND_bytes(raw, sizeof(raw)) != 1) {
		scram_client_deinit(c);
		c->step = SCRAM_STEP_FAILED;
		return -EIO;
	}
	int n = scram_b64_encode(raw, sizeof(raw), nonce, sizeof(nonce));
	TERN_ASSERT(n > 0);
	/* The user name is empty: PostgreSQL takes it from the startup packet, as libpq relies on. */
	n = snprintf(c->client_first_bare, sizeof(c->client_first_bare), "n=,r=%s", nonce);
	TERN_ASSERT(n > 0 && (size_t)n < sizeof(c->client_first_bare));
	c->client_first_bare_len = (size_t)n;
	c->step = SCRAM_STEP_BEGUN;
	return 0;
}

int scram_client_first(struct scram_client *c, char *out, size_t out_size)
{
	TERN_ASSERT(c != NULL && out != NULL);
	TERN_ASSERT(c->step == SCRAM_STEP_BEGUN);
	int n = snprintf(out, out_size, "n,,%s", c->client_first_bare);
	if (n < 0 || (size_t)n >= out_size)
		return -ENOSPC;
	c->step = SCRAM_STEP_FIRST_SENT;
	return n;
}

int scram_client_final(struct scram_client *c, const uint8_t *server_first, size_t len, char *out,
		       size_t out_size)
{
	TERN_ASSERT(c != NULL && out != NULL);
	TERN_ASSERT(server_first != NULL || len == 0);
	TERN_ASSERT(c->step == SCRAM_STEP_FIRST_SENT);
	c->step = SCRAM_STEP_FAILED;
	if (len > SCRAM_SERVER_FIRST_MAX)
		return -EPROTO;
	struct scram_cursor cur = {.p = server_first, .len = len, .pos = 0};
	const uint8_t *nonce, *salt_b64, *iterations_text;
	size_t nonce_len, salt_b64_len, iterations_len;
	if (!scram_cursor_attribute(&cur, 'r', &nonce, &nonce_len) || !scram_cursor_take(&cur, ',') ||
	    !scram_cursor_attribute(&cur, 's', &salt_b64, &salt_b64_len) || !scram_cursor_take(&cur, ',') ||
	    !scram_cursor_attribute(&cur, 'i', &iterations_text, &iterations_len))
		return -EPROTO;
	/* Our nonce ("n=,r=" skipped) must start the combined one, and the server must add to it. */
	const char *own = c->client_first_bare + 5;
	size_t own_len = c->client_first_bare_len - 5;
	if (nonce_len <= own_len || memcmp(nonce, own, own_len) != 0 ||
	    !scram_nonce_is_valid(nonce, nonce_len, SCRAM_CLIENT_NONCE_MAX + SCRAM_SERVER_NONCE_MAX))
		return -EPROTO;
	uint8_t salt[SCRAM_SALT_MAX];
	int salt_len = scram_b64_decode(salt_b64, salt_b64_len, salt, sizeof(salt));
	char digits[11];
	if (salt_len <= 0 || iterations_len == 0 || iterations_len >= sizeof(digits))
		return -EPROTO;
	memcpy(digits, iterations_text, iterations_len);
	digits[iterations_len] = '\0';
	char *end = NULL;
	unsigned long iterations = strtoul(digits, &end, 10);
	if (*end != '\0' || digits[0] < '0' || digits[0] > '9')
		return -EPROTO;
	/* Another salt or count means the server's secret is not the one our key belongs to. */
	if (iterations != c->secret.iterations || (size_t)salt_len != c->secret.salt_len ||
	    memcmp(salt, c->secret.salt, c->secret.salt_len) != 0)
		return -EKEYREJECTED;

	char auth_message[SCRAM_CLIENT_FIRST_BARE_MAX + 1 + SCRAM_SERVER_FIRST_MAX + 1 + SCRAM_CLIENT_FINAL_MAX];
	int without_proof_len = snprintf(out, out_size, "c=%s,r=%.*s", scram_client_cbind_plain, (int)nonce_len,
					 (const char *)nonce);
	if (without_proof_len < 0 || (size_t)without_proof_len + 3 + SCRAM_B64_LEN(SCRAM_KEY_LEN) + 1 > out_size)
		return -ENOSPC;
	int at = snprintf(auth_message, sizeof(auth_message), "%s,%.*s,%s", c->client_first_bare, (int)len,
			  (const char *)server_first, out);
	TERN_ASSERT(at > 0 && (size_t)at < sizeof(auth_message));

	uint8_t stored_key[SCRAM_KEY_LEN];
	uint8_t client_signature[SCRAM_KEY_LEN];
	uint8_t proof[SCRAM_KEY_LEN];
	int rc = -EIO;
	if (!scram_sha256(c->client_key, SCRAM_KEY_LEN, stored_key) ||
	    !scram_hmac(stored_key, SCRAM_KEY_LEN, auth_message, (size_t)at, client_signature) ||
	    !scram_hmac(c->secret.server_key, SCRAM_KEY_LEN, auth_message, (size_t)at, c->server_signature))
		goto out;
	for (size_t i = 0; i < SCRAM_KEY_LEN; i++)
		proof[i] = c->client_key[i] ^ client_signature[i];
	memcpy(out + without_proof_len, ",p=", 3);
	int n = scram_b64_encode(proof, SCRAM_KEY_LEN, out + without_proof_len + 3,
				 out_size - (size_t)without_proof_len - 3);
	TERN_ASSERT(n > 0);
	rc = without_proof_len + 3 + n;
	c->step = SCRAM_STEP_FINAL_SENT;
out:
	OPENSSL_cleanse(stored_key, sizeof(stored_key));
	OPENSSL_cleanse(client_signature, sizeof(client_signature));
	OPENSSL_cleanse(proof, sizeof(proof));
	return rc;
}

int scram_client_verify(struct scram_client *c, const uint8_t *server_final, size_t len)
{
	TERN_ASSERT(c != NULL);
	TERN_ASSERT(server_final != NULL || len == 0);
	TERN_ASSERT(c->step == SCRAM_STEP_FINAL_SENT);
	c->step = SCRAM_STEP_FAILED;
	struct scram_cursor cur = {.p = server_final, .len = len, .pos = 0};
	const uint8_t *value;
	size_t value_len;
	uint8_t signature[SCRAM_KEY_LEN];
	if (!scram_cursor_attribute(&cur, 'v', &value, &value_len) ||
	    scram_b64_decode(value, value_len, signature, sizeof(signature)) != SCRAM_KEY_LEN)
		return -EPROTO;
	if (CRYPTO_memcmp(signature, c->server_signature, SCRAM_KEY_LEN) != 0)
		return -EACCES;
	c->step = SCRAM_STEP_DONE;
	return 0;
}

void scram_client_deinit(struct scram_client *c)
{
	TERN_ASSERT(c != NULL);
	OPENSSL_cleanse(c, sizeof(*c));
	c->step = SCRAM_STEP_NONE;
}
