/*
 * base.h — the leaf helpers every tern module may include: assertions, branch hints, intrusive
 * lists, a growable byte buffer, big-endian integers and NUL-terminated strings, a monotonic clock,
 * logging and a bounded string copy.
 *
 * Threads: any. The logger takes one short lock per line and returns at once when the level is off;
 * the level is read and written atomically (a reload sets it while every thread logs). Nothing else
 * here keeps state: lists and buffers are their caller's, and so is their locking.
 * Ownership: a base_bytes' data and a base_grow array are the caller's, grown with realloc and freed
 * with free().
 * Never: includes another tern folder, or knows PostgreSQL's messages, io_uring or sessions (the byte
 * readers know network order and C strings, nothing more).
 */
#ifndef TERN_BASE_H
#define TERN_BASE_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TERN_LIKELY(x) __builtin_expect(!!(x), 1)
#define TERN_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TERN_MUST_USE __attribute__((warn_unused_result))
#define TERN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TERN_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
#define TERN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TERN_MAX(a, b) ((a) > (b) ? (a) : (b))

void base_assert_fail(const char *expr, const char *file, int line, const char *func)
	__attribute__((noreturn));

/* Always on: a broken invariant must stop the process with context, never corrupt a session. */
#define TERN_ASSERT(expr) \
	(TERN_LIKELY(expr) ? (void)0 : base_assert_fail(#expr, __FILE__, __LINE__, __func__))
#ifdef NDEBUG
#define TERN_DEBUG_ASSERT(expr) ((void)0)
#else
#define TERN_DEBUG_ASSERT(expr) TERN_ASSERT(expr)
#endif

/* ---- intrusive doubly linked list (circular, with a head sentinel) ---- */
struct base_list {
	struct base_list *next, *prev;
};

static inline void base_list_init(struct base_list *head) { head->next = head->prev = head; }
static inline bool base_list_is_empty(const struct base_list *head) { return head->next == head; }
static inline bool base_list_is_linked(const struct base_list *node)
{
	return node->next != NULL && node->next != node;
}
static inline void base_list_insert_tail(struct base_list *head, struct base_list *node)
{
	node->prev = head->prev;
	node->next = head;
	head->prev->next = node;
	head->prev = node;
}
static inline void base_list_remove(struct base_list *node)
{
	node->prev->next = node->next;
	node->next->prev = node->prev;
	node->next = node->prev = node;
}
static inline struct base_list *base_list_pop_head(struct base_list *head)
{
	if (base_list_is_empty(head))
		return NULL;
	struct base_list *node = head->next;
	base_list_remove(node);
	return node;
}
/* Moves every node of `from` to the tail of `to`; `from` ends empty. */
static inline void base_list_splice_tail(struct base_list *to, struct base_list *from)
{
	if (base_list_is_empty(from))
		return;
	from->next->prev = to->prev;
	to->prev->next = from->next;
	from->prev->next = to;
	to->prev = from->prev;
	base_list_init(from);
}
#define base_list_for_each_safe(pos, tmp, head) \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

/* ---- a growable byte buffer (a held query, a record's bytes, an arena) ---- */
struct base_bytes {
	uint8_t *data;
	uint32_t len, cap;
};

/* Appends len bytes (nothing for len 0, which makes no buffer); 0 or -ENOMEM, b unchanged then. */
TERN_MUST_USE int base_bytes_append(struct base_bytes *b, const void *data, uint32_t len);
/* Room for one more item of `size` bytes in an array of count items (capacity *cap, doubled from 8 when
 * full). 0 or -ENOMEM, the array unchanged then. */
TERN_MUST_USE int base_grow(void **items, uint32_t *cap, uint32_t count, size_t size);

/* Big-endian (network order) integers and NUL-terminated strings, as the PostgreSQL protocol writes them. */
static inline uint32_t base_read_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline void base_write_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}
/* The string at body[*offset] (NUL-terminated within len), moving *offset past its NUL; NULL when none is
 * there. */
const char *base_read_cstring(const uint8_t *body, uint32_t len, uint32_t *offset);

/* ---- clocks ---- */
static inline uint64_t base_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#define BASE_NS_PER_MS 1000000ull
#define BASE_NS_PER_SEC 1000000000ull

/* ---- logging ---- */
enum base_log_level { BASE_LOG_ERROR = 0, BASE_LOG_WARNING, BASE_LOG_INFO, BASE_LOG_DEBUG };
extern int base_log_level_current; /* atomic: a reload sets it while every thread logs */
void base_log_write(enum base_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define TERN_LOG(level, ...) \
	do { \
		if ((int)(level) <= __atomic_load_n(&base_log_level_current, __ATOMIC_RELAXED)) \
			base_log_write((level), __VA_ARGS__); \
	} while (0)
#define TERN_ERROR(...) TERN_LOG(BASE_LOG_ERROR, __VA_ARGS__)
#define TERN_WARN(...) TERN_LOG(BASE_LOG_WARNING, __VA_ARGS__)
#define TERN_INFO(...) TERN_LOG(BASE_LOG_INFO, __VA_ARGS__)
#define TERN_DEBUG(...) TERN_LOG(BASE_LOG_DEBUG, __VA_ARGS__)

/* Bounded string copy that always terminates; returns false when `src` did not fit. */
bool base_strlcpy(char *dst, const char *src, size_t dst_size);

#endif
