/*
 * replay_main.c — runs a libFuzzer target's LLVMFuzzerTestOneInput over every file of the corpus
 * directories named on the command line, so builds without libFuzzer (gcc) still run every seed and
 * every saved crasher as an ordinary test. A target fails by crashing or aborting, as under libFuzzer.
 * A missing or empty directory fails too: a replay that finds nothing must not pass.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* libFuzzer calls it when a target defines it; none of tern's needs to. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Far above the seeds and anything libFuzzer writes with its default -max_len. */
#define REPLAY_FILE_MAX (1024u * 1024u)

static int replay_name_compare(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads a whole file into a buffer of exactly its size, so reads past the input are caught under
 * AddressSanitizer as they are under libFuzzer. Returns NULL with a message on failure. */
static uint8_t *replay_read(const char *path, size_t *size)
{
	FILE *file = fopen(path, "rbe");
	if (file == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	uint8_t *data = NULL;
	struct stat st;
	if (fstat(fileno(file), &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size > REPLAY_FILE_MAX) {
		fprintf(stderr, "replay: %s: cannot stat, or larger than %u bytes\n", path, REPLAY_FILE_MAX);
		goto out;
	}
	*size = (size_t)st.st_size;
	data = malloc(*size > 0 ? *size : 1);
	if (data == NULL || fread(data, 1, *size, file) != *size) {
		fprintf(stderr, "replay: %s: cannot read\n", path);
		free(data);
		data = NULL;
	}
out:
	fclose(file);
	return data;
}

/* Runs every regular file of `dir` in name order; returns how many ran, or -1 when the directory cannot
 * be read or a file cannot be loaded. */
static long replay_dir(const char *dir)
{
	struct dirent **entries = NULL;
	int count = scandir(dir, &entries, NULL, NULL);
	if (count < 0) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	char **names = calloc((size_t)count + 1, sizeof(*names));
	if (names == NULL) {
		fprintf(stderr, "replay: out of memory\n");
		return -1;
	}
	size_t name_count = 0;
	for (int i = 0; i < count; i++) {
		if (entries[i]->d_name[0] != '.')
			names[name_count++] = strdup(entries[i]->d_name);
		free(entries[i]);
	}
	free(entries);
	qsort(names, name_count, sizeof(*names), replay_name_compare);

	long ran = 0;
	for (size_t i = 0; i < name_count && ran >= 0; i++) {
		char path[4096];
		if (names[i] == NULL || snprintf(path, sizeof(path), "%s/%s", dir, names[i]) >= (int)sizeof(path)) {
			fprintf(stderr, "replay: %s: a file name is too long, or out of memory\n", dir);
			ran = -1;
			break;
		}
		struct stat st;
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		size_t size = 0;
		uint8_t *data = replay_read(path, &size);
		if (data == NULL) {
			ran = -1;
			break;
		}
		/* Named before it runs, so a crash points at its input. */
		fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
		LLVMFuzzerTestOneInput(data, size);
		free(data);
		ran++;
	}
	for (size_t i = 0; i < name_count; i++)
		free(names[i]);
	free(names);
	return ran;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize != NULL)
		LLVMFuzzerInitialize(&argc, &argv);
	long passed = 0, failed = 0;
	for (int i = 1; i < argc; i++) {
		long ran = replay_dir(argv[i]);
		if (ran <= 0) {
			if (ran == 0)
				fprintf(stderr, "replay: %s: no input files\n", argv[i]);
			failed++;
			continue;
		}
		passed += ran;
	}
	printf("%ld passed, %ld failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}
