/*
 * shadow.h — [shadow] sample_rate: a sample of live autocommit reads run again on a shadow server, off
 * the hot path, and compared — the way to check a replica, or a copy on a new major version, before
 * moving traffic to it. observer_shadow.c picks a read (one SELECT, VALUES or SHOW in the simple
 * protocol, outside a transaction) with probability sample_rate, hashes the rows its server answers
 * the client with, and offers it here with the session's database and user; a bounded queue
 * ([shadow] queue) takes it or drops it (counted). One thread runs each on the shadow ([shadow] target:
 * a [servers] key, connected with the session's database and user, or a libpq connection string) in a
 * READ ONLY transaction rolled back after it, and counts, per query fingerprint (libpg_query's), the
 * reads compared and those whose row count or order-independent row hash differ. POST /api/shadow
 * (admin/http_shadow.c) compares with the same hash.
 *
 * Threads: shadow_offer from any worker (the queue's mutex, held for a copy); the shadow thread; the
 * snapshot from the admin threads (the table's mutex). Never: blocks a worker on the shadow server, or
 * runs anything but the sampled read there.
 */
#ifndef TERN_SHADOW_H
#define TERN_SHADOW_H

#include "base.h"

#include <stdbool.h>
#include <stdint.h>

struct leg;

struct tern_runtime;
struct shadow;

#define SHADOW_TEXT_MAX 8192u  /* a longer read is not sampled */
#define SHADOW_DIGESTS_MAX 256u /* fingerprints counted; a read of another is counted in the totals only */
#define SHADOW_SHOWN_MAX 160u  /* of a fingerprint's text, as shown */

/* Rows as compared: how many, and the 128-bit sum of each row's XXH3-128 hash over its DataRow body in
 * text format (the column count, then each column's length, -1 for NULL, and bytes, as the protocol
 * carries them): no order of the rows changes it. */
struct shadow_rows {
	uint64_t count;
	uint64_t low, high;
};

struct pg_result;
struct pg_conn;

/* Adds a DataRow (its body as the protocol carries it). */
void shadow_rows_add_wire(struct shadow_rows *rows, const uint8_t *body, uint32_t len);
/* Adds a row of n values (lengths[i] < 0: NULL), as libpq gives them in text format; false when out of
 * memory. */
TERN_MUST_USE bool shadow_rows_add_values(struct shadow_rows *rows, const char *const *values, const int *lengths,
					  int n);
/* Adds every row of a libpq result (a PGresult); false when out of memory. */
TERN_MUST_USE bool shadow_rows_of(const struct pg_result *res, struct shadow_rows *rows);

/* A shadow as [shadow] target and POST /api/shadow name one: a [servers] key's conninfo (*is_server
 * true), or a libpq connection string as given; NULL when it is neither. */
const char *shadow_target_conninfo(const struct tern_runtime *rt, const char *named, bool *is_server);
/* A blocking libpq connection (a PGconn: the caller checks PQstatus and PQfinishes it) to target, with
 * database and user when is_server (a connection string names its own), statement_timeout timeout_ms
 * (0: none) and application_name "tern shadow" unless the target sets them. */
struct pg_conn *shadow_connect(const char *target, bool is_server, const char *database, const char *user,
			       uint32_t timeout_ms);
/* sql on conn: in a READ ONLY transaction rolled back after it (is_read_only), or as it is. Its result
 * (a PGresult, the caller's to PQclear), or BEGIN's when that failed. */
struct pg_result *shadow_exec(struct pg_conn *conn, const char *sql, bool is_read_only);

struct shadow_counts {
	uint64_t sampled;    /* offered by the workers */
	uint64_t dropped;    /* the queue was full */
	uint64_t compared;   /* run on the shadow and compared */
	uint64_t mismatched; /* ... whose rows differed */
	uint64_t failed;     /* the shadow could not run it (no connection, an error) */
};

struct shadow_digest {
	uint64_t fingerprint;
	uint64_t compared, mismatched;
	char text[SHADOW_SHOWN_MAX];
};

/* Starts the thread when [shadow] target is set (*out NULL when it is not). 0, or <0 with err filled. */
TERN_MUST_USE int shadow_start(struct shadow **out, struct tern_runtime *rt, char *err, size_t err_size);
/* Stops the thread (what is queued is dropped) and frees it; NULL is nothing. */
void shadow_stop(struct shadow *sh);
/* A sampled read the client was answered with `seen`: queued for the shadow, or dropped (counted). */
void shadow_offer(struct shadow *sh, const char *database, const char *user, const char *text, uint32_t len,
		  const struct shadow_rows *seen);
/* The counts, and (when digests is not NULL) the fingerprints' table, malloc'd, the most mismatched
 * first. 0 or -ENOMEM. */
TERN_MUST_USE int shadow_snapshot(struct shadow *sh, struct shadow_counts *counts, struct shadow_digest **digests,
				  uint32_t *count);

/* A session's part in [shadow] sampling: the read observer_shadow.c picked, on its leg, while its answer comes. */
struct session_shadow {
	const struct leg *leg; /* NULL: no read sampled now */
	char *text;            /* the Query's text (malloc'd while sampling) */
	uint32_t len;
	uint32_t rows_due;     /* DataRows the server sent, and those read (a longer one is not read) */
	uint32_t rows_read;
	bool is_failed;        /* an error, or a row not read: not compared */
	uint64_t seed;         /* the session's own random numbers (xorshift) */
	struct shadow_rows seen;
};

#endif
