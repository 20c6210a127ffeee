/*
 * journal.c — journal.h: a ring of refcounted encoded records under one mutex, and the journal's segments
 * and writer thread (replay/) behind it.
 */
#include "journal.h"

#include "journal_segment.h"
#include "journal_writer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct journal {
	pthread_mutex_t lock;
	/* The kept entries, oldest first, in a ring of `capacity` (max_committed_transactions). */
	struct journal_entry **ring;
	uint32_t capacity, head, count;
	uint64_t bytes, max_bytes;
	uint64_t commit_seq_high;
	struct journal_counters counters; /* lock; the disk's are read from the writer */
	struct journal_dir *journal;          /* NULL: memory only */
	struct journal_writer *writer;
};

static void journal_entry_unref(struct journal_entry *e)
{
	if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(e);
}

/* Drops the oldest entry from memory. Lock held. */
static void journal_evict_oldest(struct journal *h)
{
	TERN_ASSERT(h->count > 0);
	struct journal_entry *e = h->ring[h->head];
	h->ring[h->head] = NULL;
	h->head = (h->head + 1) % h->capacity;
	h->count--;
	h->bytes -= e->len;
	h->counters.evicted++;
	journal_entry_unref(e);
}

/* Keeps `e` (its reference) as the newest, evicting the oldest beyond the caps. Lock held. */
static void journal_keep(struct journal *h, struct journal_entry *e)
{
	while (h->count > 0 && (h->count == h->capacity || h->bytes + e->len > h->max_bytes))
		journal_evict_oldest(h);
	h->ring[(h->head + h->count) % h->capacity] = e;
	h->count++;
	h->bytes += e->len;
	h->commit_seq_high = TERN_MAX(h->commit_seq_high, e->commit_seq);
}

static struct journal_entry *journal_entry_of(const uint8_t *bytes, uint32_t len, const struct journal_record_view *v)
{
	struct journal_entry *e = malloc(sizeof(*e) + len);
	if (!e)
		return NULL;
	*e = (struct journal_entry){.refs = 1, .len = len, .commit_seq = v->commit_seq,
				    .committed_at_us = v->committed_at_us, .flags = v->flags};
	memcpy(e->bytes, bytes, len);
	return e;
}

/* journal_dir_open's reader: each record read back returns to memory (the caps keep the newest). */
static int journal_reload(void *ctx, const struct journal_record_view *record, const uint8_t *payload, uint32_t len)
{
	struct journal *h = ctx;
	if (len > h->max_bytes) {
		h->commit_seq_high = TERN_MAX(h->commit_seq_high, record->commit_seq);
		return 0;
	}
	struct journal_entry *e = journal_entry_of(payload, len, record);
	if (!e)
		return -ENOMEM;
	journal_keep(h, e);
	return 0;
}

int journal_open(struct journal **out, const struct tern_config *cfg, char *err, size_t err_size)
{
	struct journal *h = calloc(1, sizeof(*h));
	if (h)
		h->ring = calloc(cfg->journal_max_transactions, sizeof(*h->ring));
	if (!h || !h->ring) {
		free(h);
		snprintf(err, err_size, "[journal] max_committed_transactions: no memory for %u", cfg->journal_max_transactions);
		return -ENOMEM;
	}
	pthread_mutex_init(&h->lock, NULL);
	h->capacity = cfg->journal_max_transactions;
	h->max_bytes = cfg->journal_max_bytes;
	int rc = 0;
	if (cfg->journal_dir && cfg->journal_dir[0]) {
		rc = journal_dir_open(cfg->journal_dir, cfg->journal_segment_bytes, cfg->journal_retain_bytes, journal_reload,
				      h, &h->journal, err, err_size);
		if (rc == 0) {
			h->commit_seq_high = TERN_MAX(h->commit_seq_high, journal_dir_commit_seq_high(h->journal));
			rc = journal_writer_start(&h->writer, h->journal, cfg->journal_writer_queue,
						  (enum journal_fsync_policy)cfg->journal_fsync, cfg->journal_fsync_interval_ms);
			if (rc < 0)
				snprintf(err, err_size, "[journal] dir = %s: could not start the writer thread", cfg->journal_dir);
		}
	}
	if (rc < 0) {
		journal_close(h);
		return rc;
	}
	*out = h;
	return 0;
}

void journal_close(struct journal *h)
{
	if (!h)
		return;
	if (h->writer)
		journal_writer_stop(h->writer);
	if (h->journal)
		journal_dir_close(h->journal);
	while (h->count > 0)
		journal_evict_oldest(h);
	free(h->ring);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

uint64_t journal_commit(struct journal *h, struct journal_record *r, uint64_t now_us)
{
	r->commit_seq = UINT64_MAX; /* (the size does not depend on it: it is written under the lock) */
	r->committed_at_us = now_us;
	size_t size = 0;
	struct journal_entry *e = journal_record_size(r, &size) == 0 && size <= h->max_bytes ? malloc(sizeof(*e) + size)
												: NULL;
	size_t len = 0;
	if (e && journal_record_encode(r, e->bytes, size, &len) < 0) {
		free(e);
		e = NULL;
	}
	pthread_mutex_lock(&h->lock);
	if (!e) {
		h->counters.dropped++;
		pthread_mutex_unlock(&h->lock);
		return 0;
	}
	uint64_t seq = ++h->commit_seq_high;
	*e = (struct journal_entry){.refs = 1, .len = (uint32_t)len, .commit_seq = seq, .committed_at_us = now_us,
				    .flags = r->flags};
	for (int i = 0; i < 8; i++) /* commit_seq leads the record, in network order */
		e->bytes[i] = (uint8_t)(seq >> (56 - 8 * i));
	r->commit_seq = seq;
	h->counters.committed++;
	h->counters.incomplete += (r->flags & JOURNAL_RECORD_INCOMPLETE) != 0;
	h->counters.bytes += len;
	/* Handed over in commit_seq order: the writer appends in the order it is given. */
	if (h->writer)
		(void)journal_writer_submit(h->writer, e->bytes, e->len); /* (a full queue: the writer counts it) */
	journal_keep(h, e);
	pthread_mutex_unlock(&h->lock);
	return seq;
}

int journal_snapshot(struct journal *h, uint64_t after_seq, uint64_t from_us, uint64_t to_us,
		     struct journal_entry ***out, uint32_t *count)
{
	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&h->lock);
	struct journal_entry **entries = h->count ? malloc(h->count * sizeof(*entries)) : NULL;
	if (h->count && !entries) {
		pthread_mutex_unlock(&h->lock);
		return -ENOMEM;
	}
	uint32_t n = 0;
	for (uint32_t i = 0; i < h->count; i++) {
		struct journal_entry *e = h->ring[(h->head + i) % h->capacity];
		if (e->commit_seq <= after_seq || e->committed_at_us < from_us || e->committed_at_us > to_us)
			continue;
		__atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
		entries[n++] = e;
	}
	pthread_mutex_unlock(&h->lock);
	*out = entries;
	*count = n;
	return 0;
}

void journal_release(struct journal_entry **entries, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++)
		journal_entry_unref(entries[i]);
	free(entries);
}

void journal_coverage(struct journal *h, struct journal_coverage *out)
{
	struct journal_counters c;
	journal_counters(h, &c);
	pthread_mutex_lock(&h->lock);
	*out = (struct journal_coverage){.retained_transactions = h->count, .retained_bytes = h->bytes,
					 .commit_seq_high = h->commit_seq_high, .is_durable = h->journal != NULL};
	pthread_mutex_unlock(&h->lock);
	out->dropped_transactions = c.dropped + c.disk_dropped;
}

void journal_counters(struct journal *h, struct journal_counters *out)
{
	pthread_mutex_lock(&h->lock);
	*out = h->counters;
	pthread_mutex_unlock(&h->lock);
	if (!h->writer)
		return;
	struct journal_writer_stats w;
	journal_writer_stats(h->writer, &w);
	out->disk_written = w.written;
	out->disk_bytes = w.bytes;
	out->disk_queued = w.queued;
	out->disk_dropped = w.dropped;
	out->disk_errors = w.write_errors + w.fsync_errors;
	out->fsyncs = w.fsyncs;
	out->fsync_ns_total = w.fsync_ns_total;
	out->fsync_ns_max = w.fsync_ns_max;
}

void journal_count_rerun(struct journal *h)
{
	pthread_mutex_lock(&h->lock);
	h->counters.reruns++;
	pthread_mutex_unlock(&h->lock);
}
