/*
 * fuzz_auth_file.c — the userlist parser: the input is written to a memfd and loaded through its
 * /proc/self/fd path, as auth_file_load reads any file. A loaded file is then searched and used for
 * an md5 check, so what the parser kept is exercised too.
 */
#include "auth.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Each plaintext entry costs a PBKDF2 of 4096 rounds (about 2 ms): bound the work per input so the
 * fuzzer explores instead of hashing. Both bounds are far above what the parser's branches need. */
#define FUZZ_INPUT_MAX 4096u
#define FUZZ_LINES_MAX 16u

#define FUZZ_CHECK(cond)                                                                             \
	do {                                                                                         \
		if (!(cond)) {                                                                       \
			fprintf(stderr, "fuzz_auth_file: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort();                                                                     \
		}                                                                                    \
	} while (0)

static size_t fuzz_count_lines(const uint8_t *data, size_t size)
{
	size_t lines = 0;
	for (const uint8_t *p = data; (p = memchr(p, '\n', size - (size_t)(p - data))) != NULL; p++)
		lines++;
	return lines + 1;
}

static void fuzz_use(const struct auth_file *file)
{
	static const uint8_t salt[4] = {1, 2, 3, 4};
	static const char *const names[] = {"user", "alice", "bob", "\"", ""};
	for (size_t i = 0; i < TERN_ARRAY_LEN(names); i++) {
		const struct auth_user *user = auth_file_find(file, names[i]);
		if (user == NULL)
			continue;
		FUZZ_CHECK(strcmp(user->name, names[i]) == 0);
		FUZZ_CHECK(user->secret != NULL && user->secret[0] != '\0');
		FUZZ_CHECK(user->kind != AUTH_SECRET_MD5 || user->scram.iterations == 0);
		FUZZ_CHECK(user->kind == AUTH_SECRET_MD5 || user->scram.iterations > 0);
		const char response[] = "md5000102030405060708090a0b0c0d0e0f";
		FUZZ_CHECK(!auth_md5_verify(user, salt, response, sizeof(response) - 1) ||
			   user->kind != AUTH_SECRET_SCRAM);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > FUZZ_INPUT_MAX || fuzz_count_lines(data, size) > FUZZ_LINES_MAX)
		return 0;
	int fd = memfd_create("fuzz_auth_file", MFD_CLOEXEC);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(write(fd, data, size) == (ssize_t)size);
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);

	struct auth_file *file = NULL;
	char err[512] = "";
	int rc = auth_file_load(path, &file, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	if (rc == 0) {
		FUZZ_CHECK(file != NULL && err[0] == '\0');
		FUZZ_CHECK(auth_file_count(file) <= fuzz_count_lines(data, size));
		fuzz_use(file);
		auth_file_destroy(file);
	} else {
		/* Every refusal names the file and the line. */
		FUZZ_CHECK(file == NULL);
		FUZZ_CHECK(strncmp(err, path, strlen(path)) == 0 && err[strlen(path)] == ':');
	}
	close(fd);
	return 0;
}
