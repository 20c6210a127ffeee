/*
 * fuzz_proto_startup.c — the parsers of what a client sends first and what a server sends when it
 * refuses: proto_startup_parse (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest),
 * proto_startup_get, and proto_error_parse. The input is the packet after its 4-byte length, as the
 * session hands it over; the same bytes are also parsed as an ErrorResponse body.
 */
#include "proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                               \
	do {                                                                                           \
		if (!(cond)) {                                                                         \
			fprintf(stderr, "fuzz_proto_startup: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort();                                                                       \
		}                                                                                      \
	} while (0)

static void fuzz_startup(const uint8_t *body, uint32_t len)
{
	struct proto_startup startup;
	int rc = proto_startup_parse(body, len, &startup);
	FUZZ_CHECK(rc == 0 || rc == -EPROTO || rc == -E2BIG || rc == -EPROTONOSUPPORT);
	if (rc != 0)
		return;
	if (startup.code == PROTO_CODE_CANCEL) {
		FUZZ_CHECK(len == 12 && startup.param_count == 0);
		return;
	}
	if (startup.code == PROTO_CODE_SSL || startup.code == PROTO_CODE_GSSENC) {
		FUZZ_CHECK(len == 4 && startup.param_count == 0);
		return;
	}
	FUZZ_CHECK((startup.code >> 16) == 3);
	FUZZ_CHECK(startup.param_count <= PROTO_STARTUP_PARAMS_MAX);
	const char *end = (const char *)body + len;
	for (uint32_t i = 0; i < startup.param_count; i++) {
		const char *name = startup.names[i], *value = startup.values[i];
		/* Both point into the packet and are terminated inside it. */
		FUZZ_CHECK(name >= (const char *)body + 4 && name < end);
		FUZZ_CHECK(value > name && value < end);
		FUZZ_CHECK(memchr(name, '\0', (size_t)(end - name)) != NULL);
		FUZZ_CHECK(memchr(value, '\0', (size_t)(end - value)) != NULL);
		FUZZ_CHECK(name[0] != '\0');
		/* A lookup finds this value or the one of an earlier parameter with the same name. */
		const char *found = proto_startup_get(&startup, name);
		FUZZ_CHECK(found != NULL);
		uint32_t first = 0;
		while (strcmp(startup.names[first], name) != 0)
			first++;
		FUZZ_CHECK(first <= i && found == startup.values[first]);
	}
	(void)proto_startup_get(&startup, "user");
	(void)proto_startup_get(&startup, "database");
	FUZZ_CHECK(proto_startup_get(&startup, "") == NULL);
}

static void fuzz_error(const uint8_t *body, uint32_t len)
{
	struct proto_error_fields fields;
	int rc = proto_error_parse(body, len, &fields);
	FUZZ_CHECK(rc == 0 || rc == -EPROTO);
	/* Each field is terminated within its array whatever came in. */
	FUZZ_CHECK(memchr(fields.severity, '\0', sizeof(fields.severity)) != NULL);
	FUZZ_CHECK(memchr(fields.sqlstate, '\0', sizeof(fields.sqlstate)) != NULL);
	FUZZ_CHECK(memchr(fields.message, '\0', sizeof(fields.message)) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > PROTO_STARTUP_LEN_MAX)
		return 0;
	/* An exact copy, so a read one past the packet is caught by AddressSanitizer. */
	uint8_t *body = malloc(size > 0 ? size : 1);
	FUZZ_CHECK(body != NULL);
	memcpy(body, data, size);
	fuzz_startup(body, (uint32_t)size);
	fuzz_error(body, (uint32_t)size);
	/* ErrorResponse as it comes off the wire: 'E', length, then the fields. */
	if (size >= PROTO_HEADER_LEN && body[0] == PROTO_BE_ERROR)
		fuzz_error(body + PROTO_HEADER_LEN, (uint32_t)(size - PROTO_HEADER_LEN));
	free(body);
	return 0;
}
