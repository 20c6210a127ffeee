/*
 * journal.h — committed history: the transactions tern saw commit, as the recovery journal keeps them
 * (../shared/reference/004_c44c290a4cd34a46.txt, "Recovery journal"; issue 13). The newest are kept in
 * memory, bounded by [journal] max_committed_transactions and max_committed_bytes; with [journal] dir each
 * one is also handed to the writer thread for the segments on disk (replay/journal_writer.h), and at
 * startup the segments are read back: the newest records return to memory and commit_seq continues
 * after the highest on disk. commit_seq numbers the transactions in the order tern saw them commit.
 *
 * Threads: journal_commit from any worker (one mutex, held to number, link and hand over one record);
 * snapshots and coverage from any thread. Ownership: journal_open allocates, journal_close frees (after the
 * workers stopped); a snapshot holds a reference on each entry until journal_release.
 * Never: waits on disk (the writer's queue drops a record when full, and counts it).
 */
#ifndef TERN_JOURNAL_H
#define TERN_JOURNAL_H

#include "core/config.h"

#include "journal_record.h"

/* One committed transaction, encoded (journal_record.h); refcounted, immutable once kept. */
struct journal_entry {
	uint32_t refs; /* atomic */
	uint32_t len;
	uint64_t commit_seq;
	uint64_t committed_at_us;
	uint32_t flags; /* JOURNAL_RECORD_INCOMPLETE */
	uint8_t bytes[];
};

struct journal;

/* What backs committed history now (the coverage block of an operator replay's answer). */
struct journal_coverage {
	uint64_t retained_transactions, retained_bytes;
	uint64_t commit_seq_high;
	uint64_t dropped_transactions; /* not kept at all: the writer's queue was full, or no memory */
	bool is_durable;               /* [journal] dir is set */
};

/* The counters /metrics shows. */
struct journal_counters {
	uint64_t committed;           /* transactions that entered committed history */
	uint64_t incomplete;          /* ... of them marked incomplete */
	uint64_t bytes;               /* their encoded bytes */
	uint64_t evicted;             /* left memory for the caps (still on disk with dir) */
	uint64_t dropped;             /* see journal_coverage */
	uint64_t disk_written, disk_bytes, disk_queued, disk_dropped, disk_errors;
	uint64_t fsyncs, fsync_ns_total, fsync_ns_max;
	uint64_t reruns;
};

/* Opens committed history for `cfg` ([journal]): with dir, reads the segments back (a torn tail cut) and
 * starts the writer. 0 and *out, or a negative errno with the reason in err (an unwritable dir, a segment
 * of an unknown format version). */
TERN_MUST_USE int journal_open(struct journal **out, const struct tern_config *cfg, char *err, size_t err_size);
/* Writes what the writer holds (synced per the policy) and frees everything. */
void journal_close(struct journal *h);

/* `r` committed at wall-clock now_us: it is numbered (r->commit_seq, r->committed_at_us are set here),
 * encoded and kept. Its commit_seq, or 0 when it could not be kept (too large, no memory: counted). */
uint64_t journal_commit(struct journal *h, struct journal_record *r, uint64_t now_us);

/* The kept entries with commit_seq > after_seq and from_us <= committed_at_us <= to_us, oldest first, each
 * with a reference: *out (malloc'd, NULL when none) and *count. 0 or -ENOMEM. */
TERN_MUST_USE int journal_snapshot(struct journal *h, uint64_t after_seq, uint64_t from_us, uint64_t to_us,
				   struct journal_entry ***out, uint32_t *count);
/* Drops a snapshot's references and frees its array. */
void journal_release(struct journal_entry **entries, uint32_t count);

void journal_coverage(struct journal *h, struct journal_coverage *out);
void journal_counters(struct journal *h, struct journal_counters *out);
/* An operator replay ran (counted on /metrics). */
void journal_count_rerun(struct journal *h);

#endif
