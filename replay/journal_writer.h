/*
 * journal_writer.h — the journal's writer thread (DESIGN §2 and §6): workers hand it encoded records and
 * go on; it appends them to the segments (journal_segment.h) in the order they were handed over and syncs
 * per the fsync policy. Workers never wait on disk: a record is copied into a bounded queue, and when the
 * queue already holds its capacity the record is dropped and counted instead
 * (../shared/reference/004_c44c290a4cd34a46.txt: "a full queue drops the record and counts it").
 *
 * The queue's capacity counts every record handed over and not yet written, the batch being written
 * included, so the memory it holds is bounded by capacity records. The writer takes the whole queue at
 * once (one lock, one splice), writes it without the lock, and under fsync = commit syncs once per
 * batch: a group commit, so one fdatasync covers every record that queued while the last one ran.
 * fsync = interval syncs at most every fsync_interval_ms (and within it after the last write); none
 * leaves it to the page cache.
 *
 * Threads: journal_writer_submit and journal_writer_stats from any thread; start, set_paused and stop from
 * one owner. Ownership: start allocates, stop frees; the journal is borrowed: it must outlive the writer,
 * and only the writer thread touches it between start and stop (journal_dir_stats excepted).
 * Never: blocks a submitter on disk or on a lock held across I/O; reorders records.
 */
#ifndef TERN_REPLAY_JOURNAL_WRITER_H
#define TERN_REPLAY_JOURNAL_WRITER_H

#include "base.h"
#include "journal_segment.h"

/* [journal] writer_queue's hard bound: a million records waiting means the disk has stopped. */
#define JOURNAL_WRITER_QUEUE_MAX (1u << 20)
/* [journal] fsync_interval_ms's hard bound: an hour. */
#define JOURNAL_WRITER_INTERVAL_MS_MAX 3600000u

/* [journal] fsync. */
enum journal_fsync_policy {
	JOURNAL_FSYNC_COMMIT = 0, /* fdatasync after each batch written */
	JOURNAL_FSYNC_INTERVAL,   /* fdatasync at most every fsync_interval_ms */
	JOURNAL_FSYNC_NONE,       /* never: the page cache decides */
	JOURNAL_FSYNC_COUNT
};

extern const char *const journal_fsync_policy_names[JOURNAL_FSYNC_COUNT];

struct journal_writer_stats {
	uint64_t queued;  /* handed over and not yet written, now */
	uint64_t written; /* records appended */
	uint64_t bytes;   /* their payload bytes */
	uint64_t dropped; /* records refused: the queue was full (or a copy could not be allocated) */
	uint64_t write_errors; /* records taken but not appended: the disk refused them (journal_dir_append's error) */
	uint64_t fsyncs;
	uint64_t fsync_errors;
	uint64_t fsync_ns_total;
	uint64_t fsync_ns_max;
};

struct journal_writer;

/* Starts the writer thread over `j`. 0 and *out, or a negative errno (the thread could not start). */
TERN_MUST_USE int journal_writer_start(struct journal_writer **out, struct journal_dir *j, uint32_t queue_capacity,
				       enum journal_fsync_policy policy, uint32_t fsync_interval_ms);

/* Copies payload[0..len) (an encoded record) into the queue: true, or false when it was dropped. */
bool journal_writer_submit(struct journal_writer *w, const uint8_t *payload, uint32_t len);

/* A paused writer takes nothing from the queue (submits still queue, then drop when it is full); a test's
 * way to hold the thread still. journal_writer_stop drains a paused writer too. */
void journal_writer_set_paused(struct journal_writer *w, bool is_paused);

void journal_writer_stats(const struct journal_writer *w, struct journal_writer_stats *out);

/* Writes what is queued, syncs per the policy (commit and interval: once more, if anything was written
 * since the last sync), joins the thread and frees `w`. The journal stays open. */
void journal_writer_stop(struct journal_writer *w);

#endif
