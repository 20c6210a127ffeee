/*
 * server_auth.c — the answers of server_auth.h. Messages name the user and the file to fix.
 */
#include "server_auth.h"


#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

static const char server_auth_mechanism[] = "SCRAM-SHA-256";

struct server_auth_exchange {
	struct server_auth_secret secret;
	struct scram_client scram;
	bool is_scram_begun;
	bool has_secret; /* none: a login tern makes itself only for a server's profile, answering trust alone */
};

bool server_auth_secret_from(const struct auth_user *entry, const struct scram_server *scram,
			     struct server_auth_secret *out)
{
	TERN_ASSERT(entry != NULL && out != NULL);
	if (entry->kind == AUTH_SECRET_PLAIN)
		return false;
	memset(out, 0, sizeof(*out));
	out->kind = entry->kind;
	base_strlcpy(out->user, entry->name, sizeof(out->user));
	if (entry->kind == AUTH_SECRET_MD5) {
		base_strlcpy(out->md5, entry->secret, sizeof(out->md5));
		return true;
	}
	out->scram = entry->scram;
	if (scram && scram_server_is_done(scram)) {
		memcpy(out->client_key, scram->client_key, SCRAM_KEY_LEN);
		out->has_client_key = true;
	}
	return true;
}

static void *server_auth_begin(const void *secret, size_t len)
{
	TERN_ASSERT(len == sizeof(struct server_auth_secret) || len == 0);
	struct server_auth_exchange *x = calloc(1, sizeof(*x));
	if (x && len > 0) {
		memcpy(&x->secret, secret, sizeof(x->secret));
		x->has_secret = true;
	}
	return x;
}

static void server_auth_end(void *exchange)
{
	struct server_auth_exchange *x = exchange;
	OPENSSL_cleanse(x, sizeof(*x));
	free(x);
}

static int server_auth_refuse(struct pool_error *err, const char *sqlstate, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int server_auth_refuse(struct pool_error *err, const char *sqlstate, const char *fmt, ...)
{
	base_strlcpy(err->sqlstate, sqlstate, sizeof(err->sqlstate));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

/* True when the NUL-separated, empty-terminated list holds `name`. */
static bool server_auth_lists(const uint8_t *list, size_t len, const char *name)
{
	uint32_t at = 0;
	const char *item;
	while ((item = base_read_cstring(list, (uint32_t)len, &at)) != NULL && item[0] != '\0')
		if (strcmp(item, name) == 0)
			return true;
	return false;
}

static int server_auth_sasl_begin(struct server_auth_exchange *x, const uint8_t *data, size_t len,
				  uint8_t *out, size_t out_size, struct pool_error *err)
{
	const char *user = x->secret.user;
	if (x->secret.kind == AUTH_SECRET_MD5)
		return server_auth_refuse(err, "28000",
					  "the server asks for SCRAM and auth_file holds an md5 hash for \"%s\", which "
					  "logs in to md5 servers only: put the server's SCRAM secret "
					  "(pg_authid.rolpassword) or the password in auth_file", user);
	if (!x->secret.has_client_key)
		return server_auth_refuse(err, "28000",
					  "tern has no SCRAM key to log in to the server as \"%s\": it comes from the "
					  "client's own SCRAM login ([auth] mode = scram), or put the password in auth_file",
					  user);
	if (!server_auth_lists(data, len, server_auth_mechanism) || x->is_scram_begun)
		return server_auth_refuse(err, "08P01", "the server offers no SCRAM-SHA-256 to log in as \"%s\"", user);
	if (scram_client_begin(&x->scram, &x->secret.scram, x->secret.client_key) < 0)
		return server_auth_refuse(err, "58000", "could not start SCRAM for \"%s\"", user);
	x->is_scram_begun = true;
	char first[SCRAM_CLIENT_FIRST_BARE_MAX];
	int n = scram_client_first(&x->scram, first, sizeof(first));
	size_t name_len = sizeof(server_auth_mechanism);
	TERN_ASSERT(n > 0 && name_len + 4 + (size_t)n <= out_size);
	memcpy(out, server_auth_mechanism, name_len);
	base_write_be32(out + name_len, (uint32_t)n);
	memcpy(out + name_len + 4, first, (size_t)n);
	return (int)(name_len + 4 + (size_t)n);
}

static int server_auth_answer(void *exchange, uint32_t code, const uint8_t *data, size_t len, uint8_t *out,
			      size_t out_size, struct pool_error *err)
{
	struct server_auth_exchange *x = exchange;
	const char *user = x->secret.user;
	const char *what = x->secret.kind == AUTH_SECRET_MD5 ? "an md5 hash" : "a SCRAM secret";
	int n;
	if (!x->has_secret && code != POOL_AUTH_OK)
		return server_auth_refuse(err, "28000",
					  "the server asks for a password, and tern, which logs in to a profile=polar "
					  "server itself (to ask for _polar_send_xact), has none: put the user's secret in "
					  "auth_file");
	switch (code) {
	case POOL_AUTH_OK:
		if (x->is_scram_begun && x->scram.step != SCRAM_STEP_DONE)
			return server_auth_refuse(err, "08P01", "the server ended SCRAM for \"%s\" before proving itself",
						  user);
		return 0;
	case POOL_AUTH_CLEARTEXT:
		return server_auth_refuse(err, "28000",
					  "the server asks for the password of \"%s\" and auth_file holds only %s: put "
					  "the password in auth_file, or have the server use scram-sha-256",
					  user, what);
	case POOL_AUTH_MD5: {
		char answer[AUTH_MD5_HASH_LEN + 1];
		if (x->secret.kind != AUTH_SECRET_MD5 || len < 4)
			return server_auth_refuse(err, "28000",
						  "the server asks for md5 and auth_file holds a SCRAM secret for \"%s\": "
						  "have the server use scram-sha-256, or put the password in auth_file",
						  user);
		if (!auth_md5_salted(x->secret.md5, data, answer))
			return server_auth_refuse(err, "58000", "MD5 is not available to answer the server");
		TERN_ASSERT(out_size >= sizeof(answer));
		memcpy(out, answer, sizeof(answer)); /* with its NUL, as a PasswordMessage */
		return (int)sizeof(answer);
	}
	case POOL_AUTH_SASL:
		return server_auth_sasl_begin(x, data, len, out, out_size, err);
	case POOL_AUTH_SASL_CONTINUE:
		if (!x->is_scram_begun || x->scram.step != SCRAM_STEP_FIRST_SENT)
			break;
		n = scram_client_final(&x->scram, data, len, (char *)out, out_size);
		if (n == -EKEYREJECTED)
			return server_auth_refuse(err, "28P01",
						  "the SCRAM secret in auth_file for \"%s\" is not the server's (another salt "
						  "or iteration count): copy it from pg_authid.rolpassword",
						  user);
		if (n < 0)
			break;
		return n;
	case POOL_AUTH_SASL_FINAL:
		if (!x->is_scram_begun || x->scram.step != SCRAM_STEP_FINAL_SENT)
			break;
		n = scram_client_verify(&x->scram, data, len);
		if (n == -EACCES)
			return server_auth_refuse(err, "28P01",
						  "the server's SCRAM signature for \"%s\" does not match auth_file's secret",
						  user);
		if (n < 0)
			break;
		return 0;
	default:
		return server_auth_refuse(err, "28000",
					  "the server asks \"%s\" for an authentication method (%u) that tern cannot "
					  "answer without the password: put the password in auth_file",
					  user, code);
	}
	return server_auth_refuse(err, "08P01", "the server's SCRAM exchange for \"%s\" is malformed", user);
}

const struct pool_auth_ops server_auth_ops = {
	.begin = server_auth_begin,
	.answer = server_auth_answer,
	.end = server_auth_end,
};
