/*
 * test_scram.c — the SCRAM-SHA-256 server exchange against RFC 7677's example, a small client written
 * here from RFC 5802 (so the server is not checked against itself), and hostile input.
 */
#include "scram.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

/* RFC 7677 section 3 */
#define RFC_PASSWORD "pencil"
#define RFC_SALT_B64 "W22ZaJ0SNY7soEsUEjb6gQ=="
#define RFC_CLIENT_FIRST "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
#define RFC_SERVER_NONCE "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
#define RFC_NONCE "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
#define RFC_SERVER_FIRST "r=" RFC_NONCE ",s=" RFC_SALT_B64 ",i=4096"
#define RFC_PROOF "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
#define RFC_CLIENT_FINAL "c=biws,r=" RFC_NONCE ",p=" RFC_PROOF
#define RFC_SERVER_FINAL "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
/* The same secret as PostgreSQL would store it, computed outside tern (Python hashlib/hmac). */
#define RFC_SECRET_TEXT                                                                     \
	"SCRAM-SHA-256$4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:" \
	"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="

static const uint8_t rfc_salt[16] = {0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e,
				     0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36, 0xfa, 0x81};

/* PBKDF2 with 4096 rounds is the slow part; compute the RFC secret once per process. */
static struct scram_secret rfc_secret(void)
{
	static struct scram_secret secret;
	static bool is_ready;
	if (!is_ready) {
		cr_assert_eq(
			scram_secret_from_password(RFC_PASSWORD, rfc_salt, sizeof(rfc_salt), 4096, &secret),
			0);
		is_ready = true;
	}
	return secret;
}

static int first(struct scram_server *s, const char *message, char *out, size_t out_size)
{
	return scram_server_first(s, (const uint8_t *)message, strlen(message), out, out_size);
}

static int final(struct scram_server *s, const char *message, char *out, size_t out_size)
{
	return scram_server_final(s, (const uint8_t *)message, strlen(message), out, out_size);
}

/* Begins against the RFC secret with the RFC server nonce and sends client-first. */
static void rfc_begin(struct scram_server *s, const char *client_first)
{
	struct scram_secret secret = rfc_secret();
	char out[SCRAM_SERVER_FIRST_MAX];
	cr_assert_eq(scram_server_begin(s, &secret, RFC_SERVER_NONCE), 0);
	cr_assert_gt(first(s, client_first, out, sizeof(out)), 0);
}

/* ---- a client, from RFC 5802 section 3 ---- */

static void b64(const uint8_t *in, size_t len, char *out)
{
	EVP_EncodeBlock((unsigned char *)out, in, (int)len);
}

/* Returns the client-final-message for `without_proof`, given what the server sent, and the
 * server-final-message the client must then receive: "v=" + base64(HMAC(ServerKey, AuthMessage)). */
static void client_final_build(const char *password, const char *client_first_bare, const char *server_first,
			       const char *without_proof, char *out, size_t out_size,
			       char expected_server_final[SCRAM_SERVER_FINAL_MAX])
{
	const char *salt_b64 = strstr(server_first, ",s=") + 3;
	const char *iterations_text = strstr(server_first, ",i=") + 3;
	uint8_t salt[96];
	int salt_raw =
		EVP_DecodeBlock(salt, (const unsigned char *)salt_b64, (int)(iterations_text - 3 - salt_b64));
	cr_assert_gt(salt_raw, 0);
	size_t salt_len = (size_t)salt_raw - (iterations_text[-4] == '=') - (iterations_text[-5] == '=');
	int iterations = atoi(iterations_text);

	uint8_t salted[32], client_key[32], stored_key[32], signature[32], proof[32];
	unsigned int n = 0;
	cr_assert_eq(PKCS5_PBKDF2_HMAC(password, (int)strlen(password), salt, (int)salt_len, iterations,
				       EVP_sha256(), 32, salted),
		     1);
	HMAC(EVP_sha256(), salted, 32, (const unsigned char *)"Client Key", 10, client_key, &n);
	EVP_Digest(client_key, 32, stored_key, &n, EVP_sha256(), NULL);
	char auth_message[2048];
	snprintf(auth_message, sizeof(auth_message), "%s,%s,%s", client_first_bare, server_first,
		 without_proof);
	HMAC(EVP_sha256(), stored_key, 32, (const unsigned char *)auth_message, strlen(auth_message),
	     signature, &n);
	for (int i = 0; i < 32; i++)
		proof[i] = client_key[i] ^ signature[i];
	char proof_b64[64];
	b64(proof, 32, proof_b64);
	snprintf(out, out_size, "%s,p=%s", without_proof, proof_b64);

	uint8_t server_key[32], server_signature[32];
	HMAC(EVP_sha256(), salted, 32, (const unsigned char *)"Server Key", 10, server_key, &n);
	HMAC(EVP_sha256(), server_key, 32, (const unsigned char *)auth_message, strlen(auth_message),
	     server_signature, &n);
	memcpy(expected_server_final, "v=", 2);
	b64(server_signature, 32, expected_server_final + 2);
}

/* Channel binding on both sides of an exchange; all zero is plain SCRAM-SHA-256 as callers had it. */
struct exchange_options {
	const uint8_t *server_binding; /* given to scram_server_set_channel_binding() when non-NULL */
	size_t server_binding_len;
	const char *mechanism;	       /* given to scram_server_select_mechanism() when non-NULL */
	const uint8_t *client_binding; /* what the client puts after the gs2 header in c= */
	size_t client_binding_len;
	const char *server_nonce; /* NULL: random */
};

/* The full exchange for `password`; returns the first error, or scram_server_final's result after
 * checking the server-final against what the client computed itself. */
static int exchange_with(const struct scram_secret *secret, const struct exchange_options *options,
			 const char *gs2_header, const char *bare, const char *final_extension,
			 const char *password)
{
	struct scram_server s;
	char client_first[512], server_first[SCRAM_SERVER_FIRST_MAX], client_final[1024];
	char server_final[SCRAM_SERVER_FINAL_MAX], expected_server_final[SCRAM_SERVER_FINAL_MAX];
	snprintf(client_first, sizeof(client_first), "%s%s", gs2_header, bare);
	cr_assert_eq(scram_server_begin(&s, secret, options->server_nonce), 0);
	if (options->server_binding != NULL)
		scram_server_set_channel_binding(&s, options->server_binding, options->server_binding_len);
	int rc = 0;
	if (options->mechanism != NULL)
		rc = scram_server_select_mechanism(&s, options->mechanism);
	if (rc == 0)
		rc = first(&s, client_first, server_first, sizeof(server_first));
	if (rc < 0) {
		cr_assert_eq(s.step, SCRAM_STEP_FAILED);
		scram_server_deinit(&s);
		return rc;
	}
	/* c= is base64(gs2-header || channel binding data), RFC 5802 section 7 (cbind-input). */
	uint8_t cbind_input[256];
	size_t header_len = strlen(gs2_header);
	cr_assert_leq(header_len + options->client_binding_len, sizeof(cbind_input));
	memcpy(cbind_input, gs2_header, header_len);
	if (options->client_binding_len > 0)
		memcpy(cbind_input + header_len, options->client_binding, options->client_binding_len);
	char cbind_b64[360], without_proof[768];
	b64(cbind_input, header_len + options->client_binding_len, cbind_b64);
	const char *nonce_end = strchr(server_first, ',');
	snprintf(without_proof, sizeof(without_proof), "c=%s,r=%.*s%s", cbind_b64,
		 (int)(nonce_end - server_first - 2), server_first + 2, final_extension);
	client_final_build(password, bare, server_first, without_proof, client_final, sizeof(client_final),
			   expected_server_final);
	rc = final(&s, client_final, server_final, sizeof(server_final));
	if (rc > 0) {
		cr_assert(scram_server_is_done(&s));
		cr_assert_str_eq(server_final, expected_server_final);
	} else {
		cr_assert_eq(s.step, SCRAM_STEP_FAILED);
	}
	scram_server_deinit(&s);
	return rc;
}

static int exchange(const struct scram_secret *secret, const char *gs2_header, const char *bare,
		    const char *final_extension, const char *password)
{
	static const struct exchange_options plain = {0};
	return exchange_with(secret, &plain, gs2_header, bare, final_extension, password);
}

/* ---- RFC 7677 ---- */

Test(scram, rfc7677_example_with_the_server_part_of_the_nonce)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];
	cr_assert_eq(scram_server_begin(&s, &secret, RFC_SERVER_NONCE), 0);
	int n = first(&s, RFC_CLIENT_FIRST, out, sizeof(out));
	cr_assert_eq(n, (int)strlen(RFC_SERVER_FIRST));
	cr_assert_str_eq(out, RFC_SERVER_FIRST);
	cr_assert_not(scram_server_is_done(&s));
	n = final(&s, RFC_CLIENT_FINAL, out, sizeof(out));
	cr_assert_eq(n, (int)strlen(RFC_SERVER_FINAL));
	cr_assert_str_eq(out, RFC_SERVER_FINAL);
	cr_assert(scram_server_is_done(&s));
	scram_server_deinit(&s);
}

Test(scram, rfc7677_example_from_the_stored_secret_text)
{
	struct scram_secret secret;
	cr_assert_eq(scram_secret_parse(RFC_SECRET_TEXT, &secret), 0);
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];
	cr_assert_eq(scram_server_begin(&s, &secret, RFC_SERVER_NONCE), 0);
	cr_assert_gt(first(&s, RFC_CLIENT_FIRST, out, sizeof(out)), 0);
	cr_assert_str_eq(out, RFC_SERVER_FIRST);
	cr_assert_gt(final(&s, RFC_CLIENT_FINAL, out, sizeof(out)), 0);
	cr_assert_str_eq(out, RFC_SERVER_FINAL);
	scram_server_deinit(&s);
}

/* ---- secrets ---- */

Test(scram, secret_parse_matches_secret_from_password)
{
	struct scram_secret parsed, derived = rfc_secret();
	cr_assert_eq(scram_secret_parse(RFC_SECRET_TEXT, &parsed), 0);
	cr_assert_eq(parsed.iterations, 4096);
	cr_assert_eq(parsed.salt_len, sizeof(rfc_salt));
	cr_assert_arr_eq(parsed.salt, rfc_salt, sizeof(rfc_salt));
	cr_assert_eq(derived.iterations, parsed.iterations);
	cr_assert_eq(derived.salt_len, parsed.salt_len);
	cr_assert_arr_eq(derived.salt, parsed.salt, parsed.salt_len);
	cr_assert_arr_eq(derived.stored_key, parsed.stored_key, SCRAM_KEY_LEN);
	cr_assert_arr_eq(derived.server_key, parsed.server_key, SCRAM_KEY_LEN);
}

Test(scram, secret_parse_rejects_every_malformed_form)
{
	static const char *const bad[] = {
		"",
		"SCRAM-SHA-256$",
		"SCRAM-SHA-1$4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"scram-sha-256$4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$0:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$-1:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$2147483648:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$99999999999:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$ 4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$4096:$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ=$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$4096:W22ZaJ0S NY7soEsUEjb6gQ=$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=",
		"SCRAM-SHA-256$4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:",
		"SCRAM-SHA-256$4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"SCRAM-SHA-256$4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU= ",
		"SCRAM-SHA-256$4096:" RFC_SALT_B64 "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=$extra",
		/* a 66-byte salt: over SCRAM_SALT_MAX */
		"SCRAM-SHA-256$4096:"
		"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		"AAAA$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
		"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(bad); i++) {
		struct scram_secret secret;
		memset(&secret, 0xa5, sizeof(secret));
		cr_assert_eq(scram_secret_parse(bad[i], &secret), -EINVAL, "accepted [%zu] %s", i, bad[i]);
		cr_assert_eq(secret.iterations, 0, "left a half-parsed secret for [%zu]", i);
	}
}

Test(scram, secret_parse_accepts_a_64_byte_salt)
{
	/* 64 zero bytes are 86 'A's and "==" */
	char salt_b64[89];
	memset(salt_b64, 'A', 86);
	memcpy(salt_b64 + 86, "==", 3);
	char text[256];
	snprintf(text, sizeof(text), "SCRAM-SHA-256$1:%s$%s", salt_b64,
		 "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=");
	struct scram_secret secret;
	cr_assert_eq(scram_secret_parse(text, &secret), 0);
	cr_assert_eq(secret.salt_len, 64);
	cr_assert_eq(secret.iterations, 1);
}

Test(scram, secret_from_password_rejects_bad_arguments)
{
	struct scram_secret secret;
	uint8_t salt[SCRAM_SALT_MAX + 1] = {0};
	cr_assert_eq(scram_secret_from_password("x", salt, 0, 4096, &secret), -EINVAL);
	cr_assert_eq(scram_secret_from_password("x", salt, sizeof(salt), 4096, &secret), -EINVAL);
	cr_assert_eq(scram_secret_from_password("x", salt, 16, 0, &secret), -EINVAL);
	cr_assert_eq(scram_secret_from_password("x", salt, 16, SCRAM_ITERATIONS_MAX + 1u, &secret), -EINVAL);
	cr_assert_eq(scram_secret_from_password("x", salt, SCRAM_SALT_MAX, 1, &secret), 0);
}

Test(scram, mock_secret_is_stable_per_name_and_differs_between_names)
{
	struct scram_secret a1, a2, b;
	cr_assert_eq(scram_secret_mock("alice", &a1), 0);
	cr_assert_eq(scram_secret_mock("alice", &a2), 0);
	cr_assert_eq(scram_secret_mock("bob", &b), 0);
	cr_assert_eq(a1.iterations, SCRAM_ITERATIONS_DEFAULT);
	cr_assert_eq(a1.salt_len, SCRAM_SALT_LEN_DEFAULT);
	cr_assert_arr_eq(a1.salt, a2.salt, a1.salt_len);
	cr_assert_arr_eq(a1.stored_key, a2.stored_key, SCRAM_KEY_LEN);
	cr_assert_arr_neq(a1.salt, b.salt, a1.salt_len);
	cr_assert_arr_neq(a1.stored_key, b.stored_key, SCRAM_KEY_LEN);
}

/* ---- the exchange, with the test client ---- */

Test(scram, test_client_succeeds_with_a_random_server_nonce)
{
	struct scram_secret secret = rfc_secret();
	cr_assert_gt(exchange(&secret, "n,,", "n=,r=fyko+d2lbbFgONRv9qkxdawL", "", RFC_PASSWORD), 0);
}

Test(scram, y_flag_is_accepted_while_plus_is_not_offered)
{
	struct scram_secret secret = rfc_secret();
	cr_assert_gt(exchange(&secret, "y,,", "n=,r=fyko+d2lbbFgONRv9qkxdawL", "", RFC_PASSWORD), 0);
}

Test(scram, unknown_extensions_are_ignored_and_escaped_names_accepted)
{
	struct scram_secret secret = rfc_secret();
	cr_assert_gt(
		exchange(&secret, "n,,", "n=us=2Cer=3D,r=abc,x=ext,Y=more", ",z=final-ext", RFC_PASSWORD), 0);
}

Test(scram, wrong_password_is_eacces)
{
	struct scram_secret secret = rfc_secret();
	cr_assert_eq(exchange(&secret, "n,,", "n=,r=abc", "", "pencil2"), -EACCES);
	cr_assert_eq(exchange(&secret, "n,,", "n=,r=abc", "", ""), -EACCES);
}

Test(scram, mock_secret_fails_only_at_the_proof)
{
	struct scram_secret mock;
	cr_assert_eq(scram_secret_mock("nobody", &mock), 0);
	cr_assert_eq(exchange(&mock, "n,,", "n=,r=abc", "", RFC_PASSWORD), -EACCES);
}

/* ---- failures ---- */

Test(scram, wrong_proof_is_eacces)
{
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];
	rfc_begin(&s, RFC_CLIENT_FIRST);
	/* Same length, valid base64, one bit of the first byte changed. */
	const char *tampered = "c=biws,r=" RFC_NONCE ",p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
	cr_assert_eq(final(&s, tampered, out, sizeof(out)), -EACCES);
	cr_assert_not(scram_server_is_done(&s));
	cr_assert_eq(s.step, SCRAM_STEP_FAILED);
	scram_server_deinit(&s);
}

Test(scram, tampered_or_missing_nonce_is_eproto)
{
	static const char *const finals[] = {
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k1,p=" RFC_PROOF,
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k,p=" RFC_PROOF,
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k00,p=" RFC_PROOF,
		"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=" RFC_PROOF,
		"c=biws,r=,p=" RFC_PROOF,
		"c=biws,p=" RFC_PROOF,
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(finals); i++) {
		struct scram_server s;
		char out[SCRAM_SERVER_FIRST_MAX];
		rfc_begin(&s, RFC_CLIENT_FIRST);
		cr_assert_eq(final(&s, finals[i], out, sizeof(out)), -EPROTO, "accepted %s", finals[i]);
		scram_server_deinit(&s);
	}
}

Test(scram, channel_binding_mismatch_and_final_grammar_errors_are_eproto)
{
	static const char *const finals[] = {
		"c=eSws,r=" RFC_NONCE ",p=" RFC_PROOF,	       /* "y,," while "n,," was sent */
		"c=biwsbmFtZQ==,r=" RFC_NONCE ",p=" RFC_PROOF, /* header plus data */
		"c=biw,r=" RFC_NONCE ",p=" RFC_PROOF,	       /* not base64 */
		"c=,r=" RFC_NONCE ",p=" RFC_PROOF,
		"r=" RFC_NONCE ",c=biws,p=" RFC_PROOF,		       /* order */
		"c=biws,r=" RFC_NONCE,				       /* no proof */
		"c=biws,r=" RFC_NONCE ",p=" RFC_PROOF ",x=after",      /* proof not last */
		"c=biws,r=" RFC_NONCE ",r=" RFC_NONCE ",p=" RFC_PROOF, /* duplicate r */
		"c=biws,r=" RFC_NONCE ",c=biws,p=" RFC_PROOF,	       /* duplicate c */
		"c=biws,r=" RFC_NONCE ",m=x,p=" RFC_PROOF,	       /* mext */
		"c=biws,r=" RFC_NONCE ",x=,p=" RFC_PROOF,	       /* empty value */
		"c=biws,r=" RFC_NONCE ",1=x,p=" RFC_PROOF,	       /* not ALPHA */
		"c=biws,r=" RFC_NONCE ",,p=" RFC_PROOF,
		"c=biws,r=" RFC_NONCE ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndQ==", /* 31 bytes */
		"c=biws,r=" RFC_NONCE ",p=" RFC_PROOF "AAAA",				 /* 35 bytes */
		"c=biws,r=" RFC_NONCE ",p=",
		"",
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(finals); i++) {
		struct scram_server s;
		char out[SCRAM_SERVER_FIRST_MAX];
		rfc_begin(&s, RFC_CLIENT_FIRST);
		cr_assert_eq(final(&s, finals[i], out, sizeof(out)), -EPROTO, "accepted [%zu] %s", i,
			     finals[i]);
		scram_server_deinit(&s);
	}
}

Test(scram, channel_binding_request_without_plus_is_eproto)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];
	/* PostgreSQL: "The client selected SCRAM-SHA-256 without channel binding, but the SCRAM message
	 * includes channel binding data." */
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(first(&s, "p=tls-server-end-point,,n=,r=rOprNGfwEbeRWgbNEkqO", out, sizeof(out)),
		     -EPROTO);
	cr_assert_eq(s.step, SCRAM_STEP_FAILED);
	scram_server_deinit(&s);
	/* A malformed request is malformed before anything else. */
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(first(&s, "p=tls server,,n=,r=abc", out, sizeof(out)), -EPROTO);
	scram_server_deinit(&s);
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(first(&s, "p=,,n=,r=abc", out, sizeof(out)), -EPROTO);
	scram_server_deinit(&s);
}

/* ---- channel binding (SCRAM-SHA-256-PLUS, tls-server-end-point) ---- */

#define GS2_PLUS "p=tls-server-end-point,,"
#define PLAIN_BARE "n=,r=fyko+d2lbbFgONRv9qkxdawL"

/* Stands in for the SHA-256 of a server certificate; NUL and high bytes on purpose. */
static const uint8_t end_point_hash[32] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
					   0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x2c, 0x3d, 0x3d, 0x2c, 0x00, 0x00,
					   0x80, 0x7f, 0xfe, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07};

static const struct exchange_options plus = {
	.server_binding = end_point_hash,
	.server_binding_len = sizeof(end_point_hash),
	.mechanism = "SCRAM-SHA-256-PLUS",
	.client_binding = end_point_hash,
	.client_binding_len = sizeof(end_point_hash),
};

Test(scram, plus_exchange_with_a_32_byte_binding_succeeds_and_server_final_verifies)
{
	struct scram_secret secret = rfc_secret();
	cr_assert_gt(exchange_with(&secret, &plus, GS2_PLUS, PLAIN_BARE, "", RFC_PASSWORD), 0);
	cr_assert_eq(exchange_with(&secret, &plus, GS2_PLUS, PLAIN_BARE, "", "pencil2"), -EACCES);
}

Test(scram, plus_with_the_wrong_binding_in_c_fails_the_binding_check)
{
	struct scram_secret secret = rfc_secret();
	uint8_t other[sizeof(end_point_hash)];
	/* One bit off in the first, a middle and the last byte: another certificate's hash. */
	static const size_t flipped[] = {0, 16, sizeof(end_point_hash) - 1};
	for (size_t i = 0; i < TERN_ARRAY_LEN(flipped); i++) {
		memcpy(other, end_point_hash, sizeof(other));
		other[flipped[i]] ^= 0x01;
		struct exchange_options options = plus;
		options.client_binding = other;
		cr_assert_eq(exchange_with(&secret, &options, GS2_PLUS, PLAIN_BARE, "", RFC_PASSWORD),
			     -EKEYREJECTED, "accepted a flip of byte %zu", flipped[i]);
	}
	/* The header alone, a truncated hash, the hash with a byte more. */
	static const size_t lengths[] = {0, sizeof(end_point_hash) - 1};
	for (size_t i = 0; i < TERN_ARRAY_LEN(lengths); i++) {
		struct exchange_options options = plus;
		options.client_binding_len = lengths[i];
		cr_assert_eq(exchange_with(&secret, &options, GS2_PLUS, PLAIN_BARE, "", RFC_PASSWORD),
			     -EKEYREJECTED, "accepted %zu bytes of binding", lengths[i]);
	}
	uint8_t longer[sizeof(end_point_hash) + 1];
	memcpy(longer, end_point_hash, sizeof(end_point_hash));
	longer[sizeof(end_point_hash)] = 0;
	struct exchange_options options = plus;
	options.client_binding = longer;
	options.client_binding_len = sizeof(longer);
	cr_assert_eq(exchange_with(&secret, &options, GS2_PLUS, PLAIN_BARE, "", RFC_PASSWORD), -EKEYREJECTED);
	/* Plain SCRAM-SHA-256 with a binding available: c= is the header alone, as before. */
	options = plus;
	options.mechanism = "SCRAM-SHA-256";
	cr_assert_eq(exchange_with(&secret, &options, "n,,", PLAIN_BARE, "", RFC_PASSWORD), -EPROTO);
	options.client_binding_len = 0;
	cr_assert_gt(exchange_with(&secret, &options, "n,,", PLAIN_BARE, "", RFC_PASSWORD), 0);
}

Test(scram, plus_without_a_binding_is_enotsup_from_select)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(scram_server_select_mechanism(&s, "SCRAM-SHA-256-PLUS"), -ENOTSUP);
	cr_assert_eq(s.step, SCRAM_STEP_FAILED);
	scram_server_deinit(&s);
	/* len 0 means unavailable */
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	scram_server_set_channel_binding(&s, end_point_hash, 0);
	cr_assert_eq(scram_server_select_mechanism(&s, "SCRAM-SHA-256-PLUS"), -ENOTSUP);
	scram_server_deinit(&s);
}

Test(scram, select_accepts_only_the_two_mechanism_names)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	static const char *const bad[] = {"", "SCRAM-SHA-1", "scram-sha-256", "SCRAM-SHA-256 ",
					  "SCRAM-SHA-256-PLUS2", "SCRAM-SHA-256-", "MD5"};
	for (size_t i = 0; i < TERN_ARRAY_LEN(bad); i++) {
		cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
		scram_server_set_channel_binding(&s, end_point_hash, sizeof(end_point_hash));
		cr_assert_eq(scram_server_select_mechanism(&s, bad[i]), -ENOTSUP, "accepted \"%s\"", bad[i]);
		scram_server_deinit(&s);
	}
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(scram_server_select_mechanism(&s, "SCRAM-SHA-256"), 0);
	scram_server_deinit(&s);
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	scram_server_set_channel_binding(&s, end_point_hash, sizeof(end_point_hash));
	cr_assert_eq(scram_server_select_mechanism(&s, "SCRAM-SHA-256"), 0);
	cr_assert_eq(scram_server_select_mechanism(&s, "SCRAM-SHA-256-PLUS"), 0);
	scram_server_deinit(&s);
}

Test(scram, y_flag_is_eproto_when_a_binding_is_offered_and_accepted_otherwise)
{
	struct scram_secret secret = rfc_secret();
	/* A binding set and the plain mechanism, selected or by default: PLUS was stripped on the way. */
	struct exchange_options options = {.server_binding = end_point_hash,
					   .server_binding_len = sizeof(end_point_hash)};
	cr_assert_eq(exchange_with(&secret, &options, "y,,", PLAIN_BARE, "", RFC_PASSWORD), -EPROTO);
	options.mechanism = "SCRAM-SHA-256";
	cr_assert_eq(exchange_with(&secret, &options, "y,,", PLAIN_BARE, "", RFC_PASSWORD), -EPROTO);
	/* "n" (the client chose not to bind) stays fine. */
	cr_assert_gt(exchange_with(&secret, &options, "n,,", PLAIN_BARE, "", RFC_PASSWORD), 0);
	/* No binding: the client rightly believes we cannot bind. */
	options = (struct exchange_options){.mechanism = "SCRAM-SHA-256"};
	cr_assert_gt(exchange_with(&secret, &options, "y,,", PLAIN_BARE, "", RFC_PASSWORD), 0);
}

Test(scram, gs2_flag_that_contradicts_the_mechanism_is_refused)
{
	struct scram_secret secret = rfc_secret();
	struct exchange_options plain_offered = plus;
	plain_offered.mechanism = "SCRAM-SHA-256";
	cr_assert_eq(exchange_with(&secret, &plain_offered, GS2_PLUS, PLAIN_BARE, "", RFC_PASSWORD), -EPROTO);
	cr_assert_eq(exchange_with(&secret, &plus, "p=tls-unique,,", PLAIN_BARE, "", RFC_PASSWORD), -ENOTSUP);
	cr_assert_eq(exchange_with(&secret, &plus, "p=tls-server-end-point2,,", PLAIN_BARE, "", RFC_PASSWORD),
		     -ENOTSUP);
	cr_assert_eq(exchange_with(&secret, &plus, "p=tls-exporter,,", PLAIN_BARE, "", RFC_PASSWORD),
		     -ENOTSUP);
	cr_assert_eq(exchange_with(&secret, &plus, "n,,", PLAIN_BARE, "", RFC_PASSWORD), -EPROTO);
	cr_assert_eq(exchange_with(&secret, &plus, "y,,", PLAIN_BARE, "", RFC_PASSWORD), -EPROTO);
	/* Malformed stays malformed, and an authzid is still refused. */
	cr_assert_eq(exchange_with(&secret, &plus, "p=,,", PLAIN_BARE, "", RFC_PASSWORD), -EPROTO);
	cr_assert_eq(exchange_with(&secret, &plus, "p=tls-server-end-point,a=admin,", PLAIN_BARE, "",
				   RFC_PASSWORD),
		     -EPROTO);
}

Test(scram, longest_plus_client_final_is_accepted_and_a_longer_c_is_eproto)
{
	struct scram_secret secret = rfc_secret();
	/* A SHA-512 certificate hash, the longest client nonce and the longest server nonce. */
	uint8_t hash[SCRAM_CHANNEL_BINDING_MAX];
	for (size_t i = 0; i < sizeof(hash); i++)
		hash[i] = (uint8_t)(0xff - i * 7);
	char server_nonce[SCRAM_SERVER_NONCE_MAX + 1];
	memset(server_nonce, 'S', SCRAM_SERVER_NONCE_MAX);
	server_nonce[SCRAM_SERVER_NONCE_MAX] = '\0';
	char bare[8 + SCRAM_CLIENT_NONCE_MAX + 1];
	snprintf(bare, sizeof(bare), "n=,r=%0*d", SCRAM_CLIENT_NONCE_MAX, 7);
	struct exchange_options options = {.server_binding = hash,
					   .server_binding_len = sizeof(hash),
					   .mechanism = "SCRAM-SHA-256-PLUS",
					   .client_binding = hash,
					   .client_binding_len = sizeof(hash),
					   .server_nonce = server_nonce};
	cr_assert_gt(exchange_with(&secret, &options, GS2_PLUS, bare, "", RFC_PASSWORD), 0);

	/* c= of more bytes than any valid cbind-input: refused, never copied past a buffer. */
	uint8_t too_long[SCRAM_GS2_HEADER_MAX + SCRAM_CHANNEL_BINDING_MAX + 32];
	memset(too_long, 0x5a, sizeof(too_long));
	static const size_t lengths[] = {SCRAM_CHANNEL_BINDING_MAX + 1, SCRAM_CHANNEL_BINDING_MAX + 17,
					 sizeof(too_long)};
	for (size_t i = 0; i < TERN_ARRAY_LEN(lengths); i++) {
		options.client_binding = too_long;
		options.client_binding_len = lengths[i];
		/* Refused as other binding data where it decodes, as malformed where it does not fit. */
		int rc = exchange_with(&secret, &options, GS2_PLUS, bare, "", RFC_PASSWORD);
		cr_assert(rc == (lengths[i] < sizeof(too_long) ? -EKEYREJECTED : -EPROTO),
			  "%zu bytes of binding: %d", lengths[i], rc);
	}
}

Test(scram, channel_binding_over_the_max_is_a_programmer_error, .signal = SIGABRT)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	uint8_t hash[SCRAM_CHANNEL_BINDING_MAX + 1] = {0};
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	scram_server_set_channel_binding(&s, hash, sizeof(hash));
}

Test(scram, channel_binding_after_the_mechanism_is_a_programmer_error, .signal = SIGABRT)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	scram_server_set_channel_binding(&s, end_point_hash, sizeof(end_point_hash));
	cr_assert_eq(scram_server_select_mechanism(&s, "SCRAM-SHA-256-PLUS"), 0);
	scram_server_set_channel_binding(&s, end_point_hash, sizeof(end_point_hash));
}

Test(scram, client_first_grammar_errors_are_eproto)
{
	static const char *const firsts[] = {
		"",
		"n",
		"n,",
		"n,,",
		"x,,n=,r=abc",	      /* unknown gs2 flag */
		"n,a=admin,n=,r=abc", /* authzid */
		"n,,m=ext,n=,r=abc",  /* reserved mext */
		"n,,r=abc",	      /* missing n= */
		"n,,n=",	      /* missing r= */
		"n,,n=,",
		"n,,n=,r=",	  /* empty nonce */
		"n,,n=,r=a,b",	  /* nonce with a comma, then junk */
		"n,,n=,r=ab\x7f", /* nonce not printable */
		"n,,n=,r=a b",
		"n,,n=,r=abc,r=def", /* duplicate r */
		"n,,n=,r=abc,n=x",   /* duplicate n */
		"n,,n=,r=abc,m=x",   /* mext out of place */
		"n,,n=,r=abc,p=x",   /* mandatory attribute of the wrong message */
		"n,,n=,r=abc,x=",    /* empty extension value */
		"n,,n=,r=abc,",
		"n,,n=us=er,r=abc", /* bad escape */
		"n,,n=user=2,r=abc",
		"n,,n=,x=1,r=abc", /* extension before r */
		"N,,n=,r=abc",
		" n,,n=,r=abc",
		"n,,n=,r=abc\n",
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(firsts); i++) {
		struct scram_secret secret = rfc_secret();
		struct scram_server s;
		char out[SCRAM_SERVER_FIRST_MAX];
		cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
		cr_assert_eq(first(&s, firsts[i], out, sizeof(out)), -EPROTO, "accepted [%zu] %s", i,
			     firsts[i]);
		scram_server_deinit(&s);
	}
}

Test(scram, nul_bytes_are_eproto)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];
	static const uint8_t first_with_nul[] = "n,,n=u\0r,r=abc";
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(scram_server_first(&s, first_with_nul, sizeof(first_with_nul) - 1, out, sizeof(out)),
		     -EPROTO);
	scram_server_deinit(&s);

	static const uint8_t extension_with_nul[] = "n,,n=,r=abc,x=a\0b";
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(
		scram_server_first(&s, extension_with_nul, sizeof(extension_with_nul) - 1, out, sizeof(out)),
		-EPROTO);
	scram_server_deinit(&s);

	static const uint8_t final_with_nul[] = "c=biws,r=" RFC_NONCE ",p=" RFC_PROOF "\0";
	rfc_begin(&s, RFC_CLIENT_FIRST);
	cr_assert_eq(scram_server_final(&s, final_with_nul, sizeof(final_with_nul), out, sizeof(out)),
		     -EPROTO);
	scram_server_deinit(&s);
}

Test(scram, empty_payloads_without_a_buffer_are_eproto)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(scram_server_first(&s, NULL, 0, out, sizeof(out)), -EPROTO);
	scram_server_deinit(&s);
	rfc_begin(&s, RFC_CLIENT_FIRST);
	cr_assert_eq(scram_server_final(&s, NULL, 0, out, sizeof(out)), -EPROTO);
	scram_server_deinit(&s);
}

Test(scram, every_prefix_of_client_first_is_refused_or_a_shorter_nonce)
{
	const char *message = RFC_CLIENT_FIRST;
	size_t shortest_valid = strlen("n,,n=user,r=r");
	for (size_t len = 0; len <= strlen(message); len++) {
		struct scram_secret secret = rfc_secret();
		struct scram_server s;
		char out[SCRAM_SERVER_FIRST_MAX];
		cr_assert_eq(scram_server_begin(&s, &secret, "srv"), 0);
		/* A heap copy of exactly `len` bytes, so ASan sees any read past the end. */
		uint8_t *copy = malloc(len + 1);
		memcpy(copy, message, len);
		int rc = scram_server_first(&s, copy, len, out, sizeof(out));
		if (len < shortest_valid) {
			cr_assert_eq(rc, -EPROTO, "prefix of %zu bytes gave %d", len, rc);
		} else {
			char expected[128];
			snprintf(expected, sizeof(expected), "r=%.*ssrv,s=" RFC_SALT_B64 ",i=4096",
				 (int)(len - strlen("n,,n=user,r=")), message + strlen("n,,n=user,r="));
			cr_assert_str_eq(out, expected);
		}
		free(copy);
		scram_server_deinit(&s);
	}
}

Test(scram, every_proper_prefix_of_client_final_is_eproto)
{
	const char *message = RFC_CLIENT_FINAL;
	for (size_t len = 0; len < strlen(message); len++) {
		struct scram_server s;
		char out[SCRAM_SERVER_FIRST_MAX];
		rfc_begin(&s, RFC_CLIENT_FIRST);
		uint8_t *copy = malloc(len + 1);
		memcpy(copy, message, len);
		int rc = scram_server_final(&s, copy, len, out, sizeof(out));
		cr_assert_eq(rc, -EPROTO, "prefix of %zu bytes gave %d", len, rc);
		free(copy);
		scram_server_deinit(&s);
	}
}

/* xorshift: a fixed sequence, so a failure replays. */
static uint32_t next_random(uint32_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 17;
	*state ^= *state << 5;
	return *state;
}

Test(scram, mutated_messages_never_crash_or_succeed_wrongly)
{
	const char *valid_first = RFC_CLIENT_FIRST;
	const char *valid_final = RFC_CLIENT_FINAL;
	uint32_t state = 0x2545f491;
	for (int round = 0; round < 3000; round++) {
		struct scram_server s;
		char out[SCRAM_SERVER_FIRST_MAX];
		uint8_t message[128];
		bool mutate_final = round % 2 == 1;
		const char *base = mutate_final ? valid_final : valid_first;
		size_t len = strlen(base);
		memcpy(message, base, len);
		int changes = 1 + (int)(next_random(&state) % 3);
		for (int i = 0; i < changes; i++)
			message[next_random(&state) % len] = (uint8_t)next_random(&state);
		if (next_random(&state) % 4 == 0)
			len = next_random(&state) % (len + 1);

		if (!mutate_final) {
			struct scram_secret secret = rfc_secret();
			cr_assert_eq(scram_server_begin(&s, &secret, RFC_SERVER_NONCE), 0);
			int rc = scram_server_first(&s, message, len, out, sizeof(out));
			cr_assert(rc > 0 || rc == -EPROTO || rc == -ENOTSUP, "round %d gave %d", round, rc);
		} else {
			rfc_begin(&s, RFC_CLIENT_FIRST);
			int rc = scram_server_final(&s, message, len, out, sizeof(out));
			/* Only a change that leaves the message as it was may pass. */
			if (rc > 0)
				cr_assert(len == strlen(base) && memcmp(message, base, len) == 0);
			else
				cr_assert(rc == -EPROTO || rc == -EACCES, "round %d gave %d", round, rc);
		}
		scram_server_deinit(&s);
	}
}

Test(scram, oversized_messages_are_eproto)
{
	char message[SCRAM_CLIENT_FIRST_BARE_MAX + 64];
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];

	/* A nonce over SCRAM_CLIENT_NONCE_MAX */
	int n = snprintf(message, sizeof(message), "n,,n=,r=%0*d", SCRAM_CLIENT_NONCE_MAX + 1, 7);
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(scram_server_first(&s, (const uint8_t *)message, (size_t)n, out, sizeof(out)), -EPROTO);
	scram_server_deinit(&s);

	/* A bare message over SCRAM_CLIENT_FIRST_BARE_MAX */
	n = snprintf(message, sizeof(message), "n,,n=,r=abc,x=%0*d", SCRAM_CLIENT_FIRST_BARE_MAX, 7);
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	cr_assert_eq(scram_server_first(&s, (const uint8_t *)message, (size_t)n, out, sizeof(out)), -EPROTO);
	scram_server_deinit(&s);

	/* A nonce of exactly SCRAM_CLIENT_NONCE_MAX is fine, with the longest server nonce. */
	char server_nonce[SCRAM_SERVER_NONCE_MAX + 1];
	memset(server_nonce, 'S', SCRAM_SERVER_NONCE_MAX);
	server_nonce[SCRAM_SERVER_NONCE_MAX] = '\0';
	n = snprintf(message, sizeof(message), "n,,n=,r=%0*d", SCRAM_CLIENT_NONCE_MAX, 7);
	cr_assert_eq(scram_server_begin(&s, &secret, server_nonce), 0);
	cr_assert_gt(scram_server_first(&s, (const uint8_t *)message, (size_t)n, out, sizeof(out)), 0);
	/* A client-final over SCRAM_CLIENT_FINAL_MAX */
	char final_message[SCRAM_CLIENT_FINAL_MAX + 2];
	memset(final_message, 'A', sizeof(final_message));
	cr_assert_eq(scram_server_final(&s, (const uint8_t *)final_message, sizeof(final_message), out,
					sizeof(out)),
		     -EPROTO);
	scram_server_deinit(&s);
}

/* ---- unknown users ---- */

Test(scram, unknown_user_fails_only_at_the_proof)
{
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];
	cr_assert_eq(scram_server_begin(&s, NULL, RFC_SERVER_NONCE), 0);
	int n = first(&s, RFC_CLIENT_FIRST, out, sizeof(out));
	cr_assert_gt(n, 0);
	/* Looks like a real server-first: our nonce, a 16-byte salt, the default iterations. */
	cr_assert(strncmp(out, "r=" RFC_NONCE ",s=", strlen("r=" RFC_NONCE ",s=")) == 0);
	cr_assert_eq(strlen(out), strlen("r=" RFC_NONCE ",s=") + 24 + strlen(",i=4096"));
	cr_assert_str_eq(out + strlen(out) - strlen(",i=4096"), ",i=4096");
	cr_assert_eq(final(&s, RFC_CLIENT_FINAL, out, sizeof(out)), -EACCES);
	scram_server_deinit(&s);
}

/* ---- the caller's buffers and nonces ---- */

Test(scram, small_output_buffers_are_enospc)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	char out[SCRAM_SERVER_FIRST_MAX];
	cr_assert_eq(scram_server_begin(&s, &secret, RFC_SERVER_NONCE), 0);
	/* Room for the text but not its NUL */
	cr_assert_eq(first(&s, RFC_CLIENT_FIRST, out, strlen(RFC_SERVER_FIRST)), -ENOSPC);
	scram_server_deinit(&s);

	rfc_begin(&s, RFC_CLIENT_FIRST);
	cr_assert_eq(final(&s, RFC_CLIENT_FINAL, out, strlen(RFC_SERVER_FINAL)), -ENOSPC);
	cr_assert_not(scram_server_is_done(&s));
	scram_server_deinit(&s);

	rfc_begin(&s, RFC_CLIENT_FIRST);
	cr_assert_eq(final(&s, RFC_CLIENT_FINAL, out, strlen(RFC_SERVER_FINAL) + 1),
		     (int)strlen(RFC_SERVER_FINAL));
	scram_server_deinit(&s);
}

Test(scram, invalid_server_nonces_are_einval)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	char too_long[SCRAM_SERVER_NONCE_MAX + 2];
	memset(too_long, 'a', sizeof(too_long) - 1);
	too_long[sizeof(too_long) - 1] = '\0';
	static const char *const bad[] = {"", "a,b", "a b", "\x7f", "caf\xc3\xa9"};
	for (size_t i = 0; i < TERN_ARRAY_LEN(bad); i++) {
		cr_assert_eq(scram_server_begin(&s, &secret, bad[i]), -EINVAL, "accepted [%zu]", i);
		cr_assert_eq(s.step, SCRAM_STEP_FAILED);
	}
	cr_assert_eq(scram_server_begin(&s, &secret, too_long), -EINVAL);
	too_long[SCRAM_SERVER_NONCE_MAX] = '\0';
	cr_assert_eq(scram_server_begin(&s, &secret, too_long), 0);
	scram_server_deinit(&s);
}

Test(scram, random_server_nonces_differ_and_are_base64_of_18_bytes)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server a, b;
	cr_assert_eq(scram_server_begin(&a, &secret, NULL), 0);
	cr_assert_eq(scram_server_begin(&b, &secret, NULL), 0);
	cr_assert_eq(a.server_nonce_len, 24);
	cr_assert_str_neq(a.server_nonce, b.server_nonce);
	scram_server_deinit(&a);
	scram_server_deinit(&b);
}

Test(scram, deinit_wipes_keys_and_messages)
{
	struct scram_server s;
	rfc_begin(&s, RFC_CLIENT_FIRST);
	scram_server_deinit(&s);
	static const uint8_t zero[sizeof(struct scram_server)];
	cr_assert_eq(s.step, SCRAM_STEP_NONE);
	cr_assert_arr_eq(&s, zero, sizeof(s));
}

Test(scram, calling_final_before_first_is_a_programmer_error, .signal = SIGABRT)
{
	struct scram_secret secret = rfc_secret();
	struct scram_server s;
	char out[64];
	cr_assert_eq(scram_server_begin(&s, &secret, NULL), 0);
	int rc = final(&s, RFC_CLIENT_FINAL, out, sizeof(out));
	(void)rc;
}

/* ---- the client side: a login with the key recovered from a client's proof ---- */

/* The ClientKey the RFC client's proof yields to a server holding the RFC secret. */
static void rfc_recovered_client_key(uint8_t out[SCRAM_KEY_LEN])
{
	struct scram_server s;
	char reply[SCRAM_SERVER_FIRST_MAX];
	rfc_begin(&s, RFC_CLIENT_FIRST);
	cr_assert_gt(final(&s, RFC_CLIENT_FINAL, reply, sizeof(reply)), 0);
	cr_assert(scram_server_is_done(&s));
	memcpy(out, s.client_key, SCRAM_KEY_LEN);
	scram_server_deinit(&s);
}

/* tern (client side, with `client_key` and `client_secret`) against a server holding `server_secret`.
 * Returns the first error of either side, or 0 when both sides finished. */
static int passthrough(const struct scram_secret *client_secret, const uint8_t client_key[SCRAM_KEY_LEN],
		       const struct scram_secret *server_secret)
{
	struct scram_client c;
	struct scram_server s;
	char client_first[SCRAM_CLIENT_FIRST_BARE_MAX], server_first[SCRAM_SERVER_FIRST_MAX];
	char client_final[SCRAM_CLIENT_FINAL_MAX], server_final[SCRAM_SERVER_FINAL_MAX];
	cr_assert_eq(scram_client_begin(&c, client_secret, client_key), 0);
	cr_assert_eq(scram_server_begin(&s, server_secret, NULL), 0);
	int rc = scram_client_first(&c, client_first, sizeof(client_first));
	cr_assert_gt(rc, 0);
	cr_assert_eq(strncmp(client_first, "n,,n=,r=", 8), 0);
	rc = first(&s, client_first, server_first, sizeof(server_first));
	cr_assert_gt(rc, 0);
	rc = scram_client_final(&c, (const uint8_t *)server_first, strlen(server_first), client_final,
				sizeof(client_final));
	if (rc > 0) {
		cr_assert_eq(rc, (int)strlen(client_final));
		rc = final(&s, client_final, server_final, sizeof(server_final));
	}
	if (rc > 0)
		rc = scram_client_verify(&c, (const uint8_t *)server_final, strlen(server_final));
	if (rc == 0)
		cr_assert(scram_server_is_done(&s) && c.step == SCRAM_STEP_DONE);
	else
		cr_assert_neq(c.step, SCRAM_STEP_DONE);
	scram_client_deinit(&c);
	scram_server_deinit(&s);
	return rc;
}

Test(scram, a_key_recovered_from_a_client_proof_logs_in_to_a_server_with_the_same_secret)
{
	struct scram_secret secret = rfc_secret();
	uint8_t client_key[SCRAM_KEY_LEN];
	rfc_recovered_client_key(client_key);
	cr_assert_eq(passthrough(&secret, client_key, &secret), 0);
}

Test(scram, a_server_with_another_salt_or_count_is_ekeyrejected_before_any_proof)
{
	struct scram_secret secret = rfc_secret(), other;
	uint8_t client_key[SCRAM_KEY_LEN];
	rfc_recovered_client_key(client_key);
	uint8_t salt[sizeof(rfc_salt)];
	memcpy(salt, rfc_salt, sizeof(salt));
	salt[0] ^= 1;
	cr_assert_eq(scram_secret_from_password(RFC_PASSWORD, salt, sizeof(salt), 4096, &other), 0);
	cr_assert_eq(passthrough(&secret, client_key, &other), -EKEYREJECTED);
	cr_assert_eq(scram_secret_from_password(RFC_PASSWORD, rfc_salt, sizeof(rfc_salt), 4097, &other), 0);
	cr_assert_eq(passthrough(&secret, client_key, &other), -EKEYREJECTED);
}

Test(scram, a_wrong_key_is_refused_by_the_server_and_a_wrong_server_signature_by_tern)
{
	struct scram_secret secret = rfc_secret();
	uint8_t client_key[SCRAM_KEY_LEN];
	rfc_recovered_client_key(client_key);
	client_key[5] ^= 0x40;
	cr_assert_eq(passthrough(&secret, client_key, &secret), -EACCES);
	client_key[5] ^= 0x40;
	/* A server that accepts the proof but signs with another ServerKey does not know the secret. */
	struct scram_secret impostor = secret;
	impostor.server_key[0] ^= 1;
	cr_assert_eq(passthrough(&secret, client_key, &impostor), -EACCES);
}

Test(scram, malformed_server_messages_are_eproto_for_the_client)
{
	struct scram_secret secret = rfc_secret();
	uint8_t client_key[SCRAM_KEY_LEN] = {0};
	static const char *const firsts[] = {"", "r=", "s=abc,i=1", "r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
					     "r=%s,s=!!!!,i=4096", "r=%s,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=x",
					     "r=%s,s=W22ZaJ0SNY7soEsUEjb6gQ==", "r=%s,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-1"};
	for (size_t i = 0; i < sizeof(firsts) / sizeof(firsts[0]); i++) {
		struct scram_client c;
		char out[SCRAM_CLIENT_FINAL_MAX], message[2 * SCRAM_CLIENT_FIRST_BARE_MAX];
		cr_assert_eq(scram_client_begin(&c, &secret, client_key), 0);
		cr_assert_gt(scram_client_first(&c, out, sizeof(out)), 0);
		/* The combined nonce: ours plus the server's part, where the case has one. */
		char combined[SCRAM_CLIENT_FIRST_BARE_MAX + 4];
		snprintf(combined, sizeof(combined), "%.100sXYZ", c.client_first_bare + 5);
		snprintf(message, sizeof(message), firsts[i], combined);
		cr_assert_eq(scram_client_final(&c, (const uint8_t *)message, strlen(message), out, sizeof(out)),
			     -EPROTO, "case %zu: %s", i, message);
		scram_client_deinit(&c);
	}
	/* The nonce exactly ours, with nothing of the server's, is not a server nonce. */
	struct scram_client c;
	char out[SCRAM_CLIENT_FINAL_MAX], message[2 * SCRAM_CLIENT_FIRST_BARE_MAX];
	cr_assert_eq(scram_client_begin(&c, &secret, client_key), 0);
	cr_assert_gt(scram_client_first(&c, out, sizeof(out)), 0);
	snprintf(message, sizeof(message), "r=%s,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", c.client_first_bare + 5);
	cr_assert_eq(scram_client_final(&c, (const uint8_t *)message, strlen(message), out, sizeof(out)), -EPROTO);
	scram_client_deinit(&c);
}
