/*
 * journal_segment.h — the recovery journal on disk (DESIGN §6; ../shared/reference/004_c44c290a4cd34a46.txt,
 * "Retention and durability"): a directory of append-only segment files, read back at startup and then
 * appended to by the journal's writer thread (journal_writer.h). Synchronous: each call has done its I/O
 * when it returns.
 *
 * Format version 1, network byte order:
 *   file    journal-<commit_seq of its first record, 20 digits>.log
 *   header  "TRNJ", u32 format version
 *   frame   u32 payload length, u32 CRC-32C of the payload, payload (an encoded journal_record)
 * A frame that would take the segment past segment_bytes goes to a new segment (a frame larger than that
 * has a segment of its own); the segment left behind is synced before it is closed, whatever the fsync
 * policy (once per segment, so only the newest segment may ever have a torn tail). After a rotation the
 * oldest whole segments are deleted while the directory holds more than retain_bytes, never the one
 * being written. At open, a torn or corrupt tail of the newest segment is cut at its last intact frame; a
 * bad frame in an older segment ends the reading of that segment, is reported, and nothing is deleted.
 * An unknown version or magic is refused, naming the file.
 *
 * Threads: a journal is used by one thread at a time (the writer thread once it runs); journal_dir_stats and
 * journal_dir_commit_seq_high may be called from any. Ownership: journal_dir_open allocates, journal_dir_close
 * frees. The directory is locked (flock) while open, so two processes never append to one journal.
 * Never: knows sessions or sockets; touches files in the directory other than its segments; deletes
 * the segment being written.
 */
#ifndef TERN_REPLAY_JOURNAL_SEGMENT_H
#define TERN_REPLAY_JOURNAL_SEGMENT_H

#include "base.h"
#include "journal_record.h"

#define JOURNAL_FORMAT_VERSION 1u
#define JOURNAL_SEGMENT_MAGIC "TRNJ"
#define JOURNAL_SEGMENT_HEADER_BYTES 8u
#define JOURNAL_FRAME_HEADER_BYTES 8u
/* The smallest segment_bytes: below a page, rotation would happen on almost every record. */
#define JOURNAL_SEGMENT_BYTES_MIN 4096u
/* The largest segment_bytes: segments are mapped whole when read back at startup. */
#define JOURNAL_SEGMENT_BYTES_MAX (1ull << 30)

/* Called for each intact record at open, oldest first: `payload` (and the view into it) is valid only
 * during the call. A non-zero return (a negative errno) stops the open with that error. */
typedef int (*journal_record_fn)(void *ctx, const struct journal_record_view *record, const uint8_t *payload,
				 uint32_t len);

struct journal_dir_stats {
	/* Since open. */
	uint64_t records_written;
	uint64_t bytes_written; /* frames, headers included */
	uint64_t segments_rotated;
	uint64_t segments_deleted;
	uint64_t write_errors; /* appends that failed; the record is not in the journal */
	/* What open found. */
	uint64_t records_recovered;
	uint64_t bytes_truncated;   /* cut from the newest segment's torn or corrupt tail */
	uint64_t segments_damaged;  /* older segments whose reading stopped at a bad frame (kept as they are) */
	/* Now. */
	uint64_t segment_count;
	uint64_t disk_bytes;
	uint64_t commit_seq_high;
};

/* How a scan of frames ended. */
enum journal_scan_end {
	JOURNAL_SCAN_CLEAN = 0, /* at the end of the bytes, after a whole frame (or none) */
	JOURNAL_SCAN_TORN,      /* at a frame cut short: the bytes end inside it */
	JOURNAL_SCAN_CORRUPT,   /* at a frame whose length is impossible, whose CRC or record does not check */
};

struct journal_scan {
	enum journal_scan_end end;
	uint64_t intact_bytes; /* the bytes up to the end of the last intact frame */
	uint64_t records;
	uint64_t commit_seq_high; /* of the intact records; 0 when none */
};

struct journal_dir;

/* Reads the frames of a segment's body (what follows its header) from memory, handing each intact record to
 * `fn` (may be NULL), until the bytes end or a frame does not check. 0, or what `fn` returned to stop. */
TERN_MUST_USE int journal_segment_scan(const uint8_t *body, size_t len, journal_record_fn fn, void *ctx,
				       struct journal_scan *out);

/* Opens the journal in `dir`: creates it (0700, with missing parents) if it is not there, locks it, reads
 * every segment back in order (each intact record to `fn`), cuts a torn tail of the newest, and opens the
 * newest for appending (a new one when there is none). Retention applies at once. 0 and *out, or a
 * negative errno and a message naming the directory or file in err[0..errsize). */
TERN_MUST_USE int journal_dir_open(const char *dir, uint64_t segment_bytes, uint64_t retain_bytes, journal_record_fn fn,
				   void *ctx, struct journal_dir **out, char *err, size_t errsize);

/* Appends one encoded record (its commit_seq read from it), rotating and deleting old segments as needed.
 * 0; -EINVAL when the payload is too short or too long to be a record; or the errno of the failed write,
 * after which the segment ends at its last whole frame (or, if that cannot be restored, the next append
 * starts a new segment). */
TERN_MUST_USE int journal_dir_append(struct journal_dir *j, const uint8_t *payload, uint32_t len);

/* fdatasync of the segment being written, and fsync of the directory after a segment was created or
 * deleted. The nanoseconds it took, or a negative errno. */
TERN_MUST_USE int64_t journal_dir_sync(struct journal_dir *j);

void journal_dir_stats(const struct journal_dir *j, struct journal_dir_stats *out);
uint64_t journal_dir_commit_seq_high(const struct journal_dir *j);
const char *journal_dir_path(const struct journal_dir *j);

/* Closes the files (without a sync: journal_dir_sync first when that matters) and frees `j`. */
void journal_dir_close(struct journal_dir *j);

#endif
