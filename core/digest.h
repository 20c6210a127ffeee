/*
 * digest.h — query digests: calls, total time and rows per query fingerprint (libpg_query's, which is
 * the same for queries that differ only in their constants). Each worker adds to a table of its own
 * (no lock) and merges it into the shared one when it fills up and at every tick; SHOW DIGESTS and
 * /api/digests read the shared one under its mutex. A fingerprint is computed once per query shape
 * (classify_shape) and remembered in the worker's table; a text whose shape is uncertain is parsed
 * each time. The text shown is the shape (literals as '?'), or libpg_query's normalized text.
 *
 * Threads: digest_local is its worker's; digest_shared any thread (its mutex). Never: holds the mutex
 * longer than one merge or one copy.
 */
#ifndef TERN_DIGEST_H
#define TERN_DIGEST_H

#include "base.h"

#include <pthread.h>

#define DIGEST_TEXT_MAX 160u
#define DIGEST_LOCAL_SLOTS 256u   /* a worker's table: merged when half full, and at every tick */
#define DIGEST_SHARED_MAX 4096u   /* fingerprints kept; more are counted as dropped */
#define DIGEST_SHAPE_SLOTS 512u   /* a worker's shape -> fingerprint memory */
#define DIGEST_TEXT_SLOTS 512u    /* a worker's statement text -> fingerprint memory */

struct digest_entry {
	uint64_t fingerprint; /* 0: empty slot */
	uint64_t calls, total_ns, rows;
	char text[DIGEST_TEXT_MAX];
};

struct digest_shape_slot {
	uint64_t hash; /* of the shape; 0: empty */
	uint64_t fingerprint;
};

struct digest_local {
	uint32_t used;
	struct digest_entry slots[DIGEST_LOCAL_SLOTS];
	struct digest_shape_slot shapes[DIGEST_SHAPE_SLOTS];
	struct digest_shape_slot texts[DIGEST_TEXT_SLOTS]; /* (hash: of the text itself) */
};

struct digest_shared {
	pthread_mutex_t lock;
	uint32_t used;
	uint64_t dropped; /* additions for fingerprints past DIGEST_SHARED_MAX */
	struct digest_entry *slots; /* DIGEST_SHARED_MAX * 2, open addressing */
};

/* 0 or -ENOMEM. */
TERN_MUST_USE int digest_shared_init(struct digest_shared *shared);
void digest_shared_deinit(struct digest_shared *shared);

/* The fingerprint of a Query's text (0 when libpg_query cannot parse it), and its text to show. */
uint64_t digest_fingerprint(struct digest_local *local, const char *sql, char *text, size_t text_size);
/* The same for a prepared statement's text (a Parse's), whose constants are parameters, so the same text
 * comes again and again: remembered by a hash of the text itself, a text seen before costs that hash
 * and no lexing. *text is filled only when the worker's table has no text for the fingerprint yet ("" when
 * it has one). */
uint64_t digest_statement_fingerprint(struct digest_local *local, const char *sql, size_t len, char *text,
				      size_t text_size);
/* Adds to the worker's table (text: shown for a fingerprint it has not seen yet; may be NULL). False
 * when the table is half full: the caller merges, then adds again. */
bool digest_local_add(struct digest_local *local, uint64_t fingerprint, const char *text, uint64_t calls,
		      uint64_t ns, uint64_t rows);
/* Moves the worker's table into the shared one and empties it. */
void digest_merge(struct digest_shared *shared, struct digest_local *local);
/* A copy of the shared table, by total time, longest first (malloc'd; *count entries). 0 or -ENOMEM. */
TERN_MUST_USE int digest_snapshot(struct digest_shared *shared, struct digest_entry **out, uint32_t *count,
				  uint64_t *dropped);
/* The row count a CommandComplete tag reports ("SELECT 5", "INSERT 0 3", "UPDATE 2"), or 0. */
uint64_t digest_tag_rows(const uint8_t *tag, uint32_t len);

/* What observer_digest.c times: a simple-protocol Query (fingerprint 0: none), or the Executes of
 * extended-protocol batches, in the order their CommandComplete messages come. */
#define SESSION_DIGEST_EXECUTES 8u
struct session_digest {
	uint64_t fingerprint;
	uint64_t started_ns;
	uint64_t rows;
	uint64_t unnamed; /* the unnamed statement's fingerprint, from its last Parse */
	uint64_t bound;   /* the statement's of the last Bind */
	uint64_t executes[SESSION_DIGEST_EXECUTES]; /* sent, not yet complete, oldest at execute_head */
	uint32_t execute_head, execute_count;
	uint64_t mark_ns; /* when the oldest of them began: the first Execute, or the last one's completion */
};

#endif
