/*
 * fuzz_scram.c — the SCRAM-SHA-256 server exchange. The input is client-first, a NUL, client-final
 * (without a NUL only client-first is tried). The secret is "pencil" with the salt and iteration count of
 * RFC 7677's example and the server nonce is the one it uses, so its messages (the seed corpus) run the
 * exchange to a verified proof and mutations explore every step around it. The client-first part is
 * also parsed as a stored secret ("SCRAM-SHA-256$iter:salt$stored:server"), the other SCRAM text tern
 * reads, which costs nothing here while the userlist target pays a PBKDF2 per plaintext line.
 * The same two parts also play a server's messages to tern's client side (scram_client): server-first
 * after "r=<the client's nonce>", so mutations reach the salt and count, and server-final.
 */
#include "scram.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                         \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "fuzz_scram: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort();                                                                 \
		}                                                                                \
	} while (0)

/* RFC 7677, section 3. */
static const uint8_t fuzz_salt[SCRAM_SALT_LEN_DEFAULT] = {0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e,
							   0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36, 0xfa, 0x81};
static const char fuzz_server_nonce[] = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";

static struct scram_secret fuzz_secret;
static pthread_once_t fuzz_secret_once = PTHREAD_ONCE_INIT;

/* PBKDF2 of 4096 rounds costs milliseconds: once per process, not per input. */
static void fuzz_secret_create(void)
{
	int rc = scram_secret_from_password("pencil", fuzz_salt, sizeof(fuzz_salt), SCRAM_ITERATIONS_DEFAULT,
					    &fuzz_secret);
	FUZZ_CHECK(rc == 0);
}

/* An exact copy, so a read one past the message is caught by AddressSanitizer. */
static uint8_t *fuzz_copy(const uint8_t *p, size_t len)
{
	uint8_t *copy = malloc(len > 0 ? len : 1);
	FUZZ_CHECK(copy != NULL);
	memcpy(copy, p, len);
	return copy;
}

static void fuzz_secret_parse(const uint8_t *text, size_t len)
{
	char *copy = malloc(len + 1);
	FUZZ_CHECK(copy != NULL);
	memcpy(copy, text, len);
	copy[len] = '\0';
	struct scram_secret secret;
	int rc = scram_secret_parse(copy, &secret);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	if (rc == 0) {
		FUZZ_CHECK(secret.iterations > 0 && secret.iterations <= SCRAM_ITERATIONS_MAX);
		FUZZ_CHECK(secret.salt_len > 0 && secret.salt_len <= SCRAM_SALT_MAX);
		/* A parsed secret is one scram_server_begin accepts. */
		struct scram_server server;
		FUZZ_CHECK(scram_server_begin(&server, &secret, fuzz_server_nonce) == 0);
		scram_server_deinit(&server);
	}
	free(copy);
}

static void fuzz_client(const uint8_t *server_first_tail, size_t tail_len, const uint8_t *server_final,
			size_t final_len)
{
	static const uint8_t client_key[SCRAM_KEY_LEN] = {1};
	struct scram_client client;
	char out[SCRAM_CLIENT_FINAL_MAX];
	FUZZ_CHECK(scram_client_begin(&client, &fuzz_secret, client_key) == 0);
	FUZZ_CHECK(scram_client_first(&client, out, sizeof(out)) > 0);
	size_t nonce_len = client.client_first_bare_len - 3; /* "r=<nonce>" of "n=,r=<nonce>" */
	size_t len = nonce_len + tail_len;
	uint8_t *message = malloc(len > 0 ? len : 1);
	FUZZ_CHECK(message != NULL);
	memcpy(message, client.client_first_bare + 3, nonce_len);
	memcpy(message + nonce_len, server_first_tail, tail_len);
	int rc = scram_client_final(&client, message, len, out, sizeof(out));
	FUZZ_CHECK(rc > 0 || rc == -EPROTO || rc == -EKEYREJECTED);
	FUZZ_CHECK(rc > 0 ? client.step == SCRAM_STEP_FINAL_SENT && (size_t)rc == strlen(out)
			  : client.step == SCRAM_STEP_FAILED);
	if (rc > 0 && server_final != NULL) {
		uint8_t *final = fuzz_copy(server_final, final_len);
		rc = scram_client_verify(&client, final, final_len);
		FUZZ_CHECK(rc == -EPROTO || rc == -EACCES); /* no input knows the signature of a random nonce */
		free(final);
	}
	free(message);
	scram_client_deinit(&client);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	pthread_once(&fuzz_secret_once, fuzz_secret_create);

	const uint8_t *nul = memchr(data, '\0', size);
	size_t first_len = nul != NULL ? (size_t)(nul - data) : size;
	uint8_t *first = fuzz_copy(data, first_len);
	fuzz_secret_parse(first, first_len);

	struct scram_server server;
	int rc = scram_server_begin(&server, &fuzz_secret, fuzz_server_nonce);
	FUZZ_CHECK(rc == 0);

	char out[SCRAM_SERVER_FIRST_MAX];
	rc = scram_server_first(&server, first, first_len, out, sizeof(out));
	FUZZ_CHECK(rc > 0 || rc == -EPROTO || rc == -ENOTSUP);
	if (rc > 0) {
		FUZZ_CHECK((size_t)rc == strlen(out));
		FUZZ_CHECK(strncmp(out, "r=", 2) == 0);
		FUZZ_CHECK(strstr(out, fuzz_server_nonce) != NULL);
		FUZZ_CHECK(strstr(out, ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096") != NULL);
		FUZZ_CHECK(server.step == SCRAM_STEP_FIRST_SENT);
	} else {
		FUZZ_CHECK(server.step == SCRAM_STEP_FAILED);
	}

	if (rc > 0 && nul != NULL) {
		size_t final_len = size - first_len - 1;
		uint8_t *final = fuzz_copy(nul + 1, final_len);
		char final_out[SCRAM_SERVER_FINAL_MAX];
		rc = scram_server_final(&server, final, final_len, final_out, sizeof(final_out));
		FUZZ_CHECK(rc > 0 || rc == -EPROTO || rc == -EACCES);
		if (rc > 0) {
			FUZZ_CHECK((size_t)rc == strlen(final_out));
			FUZZ_CHECK(strncmp(final_out, "v=", 2) == 0 && rc == 2 + 44);
			FUZZ_CHECK(scram_server_is_done(&server));
		} else {
			FUZZ_CHECK(!scram_server_is_done(&server));
		}
		free(final);
	}
	scram_server_deinit(&server);
	fuzz_client(first, first_len, nul != NULL ? nul + 1 : NULL, nul != NULL ? size - first_len - 1 : 0);
	free(first);
	return 0;
}
