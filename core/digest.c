/* Query digests of digest.h: open-addressing tables keyed by fingerprint. */
#include "digest.h"

#include "classify.h"

#include <errno.h>
#include <pg_query.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int digest_shared_init(struct digest_shared *shared)
{
	memset(shared, 0, sizeof(*shared));
	shared->slots = calloc(DIGEST_SHARED_MAX * 2, sizeof(*shared->slots));
	if (!shared->slots)
		return -ENOMEM;
	pthread_mutex_init(&shared->lock, NULL);
	return 0;
}

void digest_shared_deinit(struct digest_shared *shared)
{
	if (!shared->slots)
		return;
	pthread_mutex_destroy(&shared->lock);
	free(shared->slots);
	shared->slots = NULL;
}

/* libpg_query's fingerprint of sql, 0 when it cannot parse it. */
static uint64_t digest_parse_fingerprint(const char *sql)
{
	PgQueryFingerprintResult result = pg_query_fingerprint(sql);
	uint64_t fingerprint = result.error ? 0 : result.fingerprint;
	pg_query_free_fingerprint_result(result);
	return fingerprint;
}

/* The slot of fingerprint in a table of `cap` slots (a power of two): its own, or the empty one it
 * would take. */
static struct digest_entry *digest_find(struct digest_entry *slots, uint32_t cap, uint64_t fingerprint)
{
	for (uint32_t i = (uint32_t)fingerprint & (cap - 1);; i = (i + 1) & (cap - 1))
		if (slots[i].fingerprint == fingerprint || slots[i].fingerprint == 0)
			return &slots[i];
}

uint64_t digest_fingerprint(struct digest_local *local, const char *sql, char *text, size_t text_size)
{
	char shape[CLASSIFY_SHAPE_MAX];
	size_t len = classify_shape(sql, shape, sizeof(shape));
	if (len == 0) { /* uncertain shape: parse it; libpg_query's normalized text only for a new digest */
		uint64_t fingerprint = digest_parse_fingerprint(sql);
		const struct digest_entry *e = digest_find(local->slots, DIGEST_LOCAL_SLOTS, fingerprint);
		text[0] = '\0';
		if (fingerprint && !(e->fingerprint == fingerprint && e->text[0])) {
			PgQueryNormalizeResult normalized = pg_query_normalize(sql);
			base_strlcpy(text, normalized.error ? "" : normalized.normalized_query, text_size);
			pg_query_free_normalize_result(normalized);
		}
		return fingerprint;
	}
	base_strlcpy(text, shape, text_size);
	uint64_t hash = XXH3_64bits(shape, len) | 1;
	struct digest_shape_slot *slot = &local->shapes[hash % DIGEST_SHAPE_SLOTS];
	if (slot->hash != hash) { /* a 64-bit hash of the shape: a collision only merges two digests */
		slot->hash = hash;
		slot->fingerprint = digest_parse_fingerprint(sql);
	}
	return slot->fingerprint;
}

uint64_t digest_statement_fingerprint(struct digest_local *local, const char *sql, size_t len, char *text,
				      size_t text_size)
{
	uint64_t hash = XXH3_64bits(sql, len) | 1; /* 64 bits: a collision only merges two digests */
	struct digest_shape_slot *slot = &local->texts[hash % DIGEST_TEXT_SLOTS];
	if (slot->hash != hash) {
		slot->hash = hash;
		slot->fingerprint = digest_fingerprint(local, sql, text, text_size);
		return slot->fingerprint;
	}
	const struct digest_entry *e = digest_find(local->slots, DIGEST_LOCAL_SLOTS, slot->fingerprint);
	if (slot->fingerprint && !(e->fingerprint == slot->fingerprint && e->text[0]))
		(void)digest_fingerprint(local, sql, text, text_size); /* its text, for a new entry */
	else
		text[0] = '\0';
	return slot->fingerprint;
}

static void digest_add_to(struct digest_entry *e, uint64_t fingerprint, const char *text, uint64_t calls, uint64_t ns,
			  uint64_t rows)
{
	if (e->fingerprint == 0) {
		e->fingerprint = fingerprint;
		e->text[0] = '\0';
	}
	if (!e->text[0] && text)
		base_strlcpy(e->text, text, sizeof(e->text));
	e->calls += calls;
	e->total_ns += ns;
	e->rows += rows;
}

bool digest_local_add(struct digest_local *local, uint64_t fingerprint, const char *text, uint64_t calls,
		      uint64_t ns, uint64_t rows)
{
	static_assert((DIGEST_LOCAL_SLOTS & (DIGEST_LOCAL_SLOTS - 1)) == 0, "a power of two");
	if (fingerprint == 0)
		return true; /* unparsable: no digest */
	struct digest_entry *e = digest_find(local->slots, DIGEST_LOCAL_SLOTS, fingerprint);
	if (e->fingerprint == 0) {
		if (local->used >= DIGEST_LOCAL_SLOTS / 2)
			return false;
		local->used++;
	}
	digest_add_to(e, fingerprint, text, calls, ns, rows);
	return true;
}

void digest_merge(struct digest_shared *shared, struct digest_local *local)
{
	if (local->used == 0)
		return;
	pthread_mutex_lock(&shared->lock);
	for (uint32_t i = 0; i < DIGEST_LOCAL_SLOTS; i++) {
		struct digest_entry *from = &local->slots[i];
		if (from->fingerprint == 0)
			continue;
		struct digest_entry *to = digest_find(shared->slots, DIGEST_SHARED_MAX * 2, from->fingerprint);
		if (to->fingerprint == 0 && shared->used >= DIGEST_SHARED_MAX) {
			shared->dropped += from->calls;
			continue;
		}
		shared->used += to->fingerprint == 0;
		digest_add_to(to, from->fingerprint, from->text, from->calls, from->total_ns, from->rows);
	}
	pthread_mutex_unlock(&shared->lock);
	memset(local->slots, 0, sizeof(local->slots));
	local->used = 0;
}

static int digest_by_total_time(const void *a, const void *b)
{
	const struct digest_entry *x = a, *y = b;
	return x->total_ns < y->total_ns ? 1 : x->total_ns > y->total_ns ? -1 : 0;
}

int digest_snapshot(struct digest_shared *shared, struct digest_entry **out, uint32_t *count, uint64_t *dropped)
{
	struct digest_entry *copy = malloc(DIGEST_SHARED_MAX * sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	uint32_t n = 0;
	pthread_mutex_lock(&shared->lock);
	for (uint32_t i = 0; i < DIGEST_SHARED_MAX * 2 && n < DIGEST_SHARED_MAX; i++)
		if (shared->slots[i].fingerprint)
			copy[n++] = shared->slots[i];
	*dropped = shared->dropped;
	pthread_mutex_unlock(&shared->lock);
	qsort(copy, n, sizeof(*copy), digest_by_total_time);
	*out = copy;
	*count = n;
	return 0;
}

uint64_t digest_tag_rows(const uint8_t *tag, uint32_t len)
{
	/* The last space-separated word, when it is a number (SELECT n, INSERT oid n, UPDATE n, COPY n, ...). */
	uint32_t end = len;
	while (end > 0 && tag[end - 1] == '\0')
		end--;
	uint32_t start = end;
	while (start > 0 && tag[start - 1] >= '0' && tag[start - 1] <= '9')
		start--;
	if (start == end || start == 0 || tag[start - 1] != ' ')
		return 0;
	uint64_t rows = 0;
	for (uint32_t i = start; i < end && rows < UINT64_MAX / 10; i++)
		rows = rows * 10 + (uint64_t)(tag[i] - '0');
	return rows;
}
