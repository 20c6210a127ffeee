/* The base helpers' out-of-line half: the assertion's report, the log line and its lock, byte buffers and
 * growing arrays, C strings read from a body and copied with a bound. See base.h. */
#include "base.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int base_log_level_current = BASE_LOG_INFO;
static pthread_mutex_t base_log_lock = PTHREAD_MUTEX_INITIALIZER;

void base_assert_fail(const char *expr, const char *file, int line, const char *func)
{
	fprintf(stderr, "tern: assertion failed: %s (%s:%d, %s)\n", expr, file, line, func);
	fflush(stderr);
	abort();
}

void base_log_write(enum base_log_level level, const char *fmt, ...)
{
	static const char *const names[] = {"ERROR", "WARNING", "INFO", "DEBUG"};
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char line[1024];
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02d %02d:%02d:%02d.%03ld UTC %s: ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
			 names[level]);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&base_log_lock);
	fprintf(stderr, "%s\n", line);
	pthread_mutex_unlock(&base_log_lock);
}

bool base_strlcpy(char *dst, const char *src, size_t dst_size)
{
	TERN_ASSERT(dst_size > 0);
	size_t n = strlen(src);
	if (n >= dst_size) {
		memcpy(dst, src, dst_size - 1);
		dst[dst_size - 1] = '\0';
		return false;
	}
	memcpy(dst, src, n + 1);
	return true;
}

int base_bytes_append(struct base_bytes *b, const void *data, uint32_t len)
{
	if (len == 0)
		return 0; /* (an empty Query's text, say: nothing to copy into a buffer not yet made) */
	if (b->len + len > b->cap) {
		uint32_t cap = TERN_MAX(b->cap * 2, b->len + len);
		uint8_t *grown = realloc(b->data, cap);
		if (!grown)
			return -ENOMEM;
		b->data = grown;
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, len);
	b->len += len;
	return 0;
}

int base_grow(void **items, uint32_t *cap, uint32_t count, size_t size)
{
	if (count < *cap)
		return 0;
	uint32_t grown_cap = *cap ? *cap * 2 : 8;
	void *grown = realloc(*items, grown_cap * size);
	if (!grown)
		return -ENOMEM;
	*items = grown;
	*cap = grown_cap;
	return 0;
}

const char *base_read_cstring(const uint8_t *body, uint32_t len, uint32_t *offset)
{
	if (*offset >= len)
		return NULL;
	const uint8_t *start = body + *offset;
	const uint8_t *nul = memchr(start, '\0', len - *offset);
	if (!nul)
		return NULL;
	*offset += (uint32_t)(nul - start) + 1;
	return (const char *)start;
}
