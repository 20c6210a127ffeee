/*
 * fuzz_config.c — the INI configuration loader: the input is written to a memfd and loaded through its
 * /proc/self/fd path. config_load sets libinih's process-wide options, which is fine in a fuzzer's one
 * thread. A loaded config is then described key by key, as SHOW CONFIG does, and that text must load
 * back to the same values (config_describe_key's promise).
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Lines are bounded at 4096 bytes by the loader; a few of them say all a file can. */
#define FUZZ_INPUT_MAX (64u * 1024u)
/* A value is at most a line plus the config file's directory for a resolved path. */
#define FUZZ_VALUE_MAX 8192u
/* Every key's line: a few hold a long string, the rest a number or a name. */
#define FUZZ_DESCRIBED_MAX (64u * 1024u)

#define FUZZ_CHECK(cond)                                                                          \
	do {                                                                                      \
		if (!(cond)) {                                                                    \
			fprintf(stderr, "fuzz_config: check failed: %s (line %d)\n", #cond, __LINE__); \
			abort();                                                                  \
		}                                                                                 \
	} while (0)

static int fuzz_memfd(const void *data, size_t size, char *path, size_t path_size)
{
	int fd = memfd_create("fuzz_config", MFD_CLOEXEC);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(write(fd, data, size) == (ssize_t)size);
	snprintf(path, path_size, "/proc/self/fd/%d", fd);
	return fd;
}

/* Writes every key into `text` as a config file ("[section]" then "key =value" lines); returns its
 * length. */
static size_t fuzz_describe(const struct tern_config *cfg, char *text, size_t text_size)
{
	static char value[FUZZ_VALUE_MAX];
	size_t len = 0;
	const char *section_last = NULL;
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *section = NULL, *key = NULL, *default_text = NULL;
		bool reloadable = false;
		int rc = config_describe_key(cfg, i, &section, &key, value, sizeof(value), &default_text,
					     &reloadable);
		FUZZ_CHECK(rc == 0);
		FUZZ_CHECK(section != NULL && key != NULL && default_text != NULL);
		/* No blank after "=": inih takes a ';' that follows a blank as the start of a comment, so
		 * "primary = ;x" means "" where the file said "primary =;x", which loads as ";x". */
		int n = section_last == NULL || strcmp(section, section_last) != 0
				? snprintf(text + len, text_size - len, "[%s]\n%s =%s\n", section, key, value)
				: snprintf(text + len, text_size - len, "%s =%s\n", key, value);
		FUZZ_CHECK(n > 0 && (size_t)n < text_size - len);
		len += (size_t)n;
		section_last = section;
	}
	FUZZ_CHECK(config_describe_key(cfg, config_key_count(), &section_last, &section_last, value,
				       sizeof(value), &section_last, &(bool){false}) == -ERANGE);
	return len;
}

static void fuzz_check_described(const struct tern_config *cfg)
{
	static char described[FUZZ_DESCRIBED_MAX], described_again[FUZZ_DESCRIBED_MAX];
	size_t described_len = fuzz_describe(cfg, described, sizeof(described));
	char path[64];
	int fd = fuzz_memfd(described, described_len, path, sizeof(path));
	struct tern_config again;
	char err[1024] = "";
	int rc = config_load(&again, path, err, sizeof(err));
	if (rc != 0)
		fprintf(stderr, "fuzz_config: the described config is refused: %s\n", err);
	FUZZ_CHECK(rc == 0);
	size_t again_len = fuzz_describe(&again, described_again, sizeof(described_again));
	FUZZ_CHECK(again_len == described_len && memcmp(described, described_again, again_len) == 0);
	config_deinit(&again);
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > FUZZ_INPUT_MAX)
		return 0;
	char path[64];
	int fd = fuzz_memfd(data, size, path, sizeof(path));

	struct tern_config cfg;
	char err[1024] = "";
	int rc = config_load(&cfg, path, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	if (rc == 0) {
		FUZZ_CHECK(err[0] == '\0');
		FUZZ_CHECK(cfg.path != NULL && strcmp(cfg.path, path) == 0);
		FUZZ_CHECK(cfg.min_pool_size <= cfg.pool_size);
		FUZZ_CHECK(cfg.buffer_count != 0 && (cfg.buffer_count & (cfg.buffer_count - 1)) == 0);
		FUZZ_CHECK(cfg.primary_conninfo != NULL && cfg.auth_file != NULL);
		fuzz_check_described(&cfg);
	} else {
		/* Every refusal names the file, and the config is back to the defaults. */
		FUZZ_CHECK(strncmp(err, path, strlen(path)) == 0 && err[strlen(path)] == ':');
		FUZZ_CHECK(cfg.path == NULL);
	}
	config_deinit(&cfg);
	close(fd);
	return 0;
}
