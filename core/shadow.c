/* [shadow] sampling's queue, thread and counts (shadow.h). Owns the shadow thread's libpq connections
 * and the fingerprints' table; never touches a session or the pool. */
#include "shadow.h"

#include "config.h"
#include "runtime.h"

#include <errno.h>
#include <libpq-fe.h>
#include <pg_query.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The shadow thread's connections kept, one per database and user (the least recently used closed). */
#define SHADOW_CONNS 4u
#define SHADOW_NAME_MAX 64u

struct shadow_item {
	char database[SHADOW_NAME_MAX], user[SHADOW_NAME_MAX];
	struct shadow_rows seen;
	uint32_t len;
	char text[]; /* NUL-terminated */
};

struct shadow_conn {
	PGconn *conn; /* NULL: free */
	char database[SHADOW_NAME_MAX], user[SHADOW_NAME_MAX];
	uint64_t used; /* the item count when it was last used */
};

struct shadow {
	struct tern_runtime *rt;
	pthread_t thread;
	pthread_mutex_t lock; /* the queue, the counts and the table */
	pthread_cond_t wake;
	bool is_stopping;
	struct shadow_item **queue; /* a ring of cap */
	uint32_t cap, head, count;
	struct shadow_counts counts;
	struct shadow_digest digests[SHADOW_DIGESTS_MAX];
	uint32_t digest_count;
	/* The shadow thread's own. */
	char target[1024];     /* a libpq connection string, or a [servers] key's conninfo */
	bool is_server_target; /* then the session's database and user go with it */
	struct shadow_conn conns[SHADOW_CONNS];
	uint64_t runs;
};

/* ---- the rows' hash ---- */

static void shadow_rows_sum(struct shadow_rows *rows, XXH128_hash_t row)
{
	rows->count++;
	rows->low += row.low64;
	rows->high += row.high64 + (rows->low < row.low64); /* (a 128-bit sum) */
}

void shadow_rows_add_wire(struct shadow_rows *rows, const uint8_t *body, uint32_t len)
{
	shadow_rows_sum(rows, XXH3_128bits(body, len));
}

bool shadow_rows_add_values(struct shadow_rows *rows, const char *const *values, const int *lengths, int n)
{
	size_t len = 2;
	for (int c = 0; c < n; c++)
		len += 4 + (size_t)(lengths[c] < 0 ? 0 : lengths[c]);
	uint8_t *body = malloc(len), *p = body;
	if (!body)
		return false;
	*p++ = (uint8_t)(n >> 8);
	*p++ = (uint8_t)n;
	for (int c = 0; c < n; c++) {
		uint32_t field = lengths[c] < 0 ? UINT32_MAX : (uint32_t)lengths[c];
		*p++ = (uint8_t)(field >> 24);
		*p++ = (uint8_t)(field >> 16);
		*p++ = (uint8_t)(field >> 8);
		*p++ = (uint8_t)field;
		if (lengths[c] > 0) {
			memcpy(p, values[c], (size_t)lengths[c]);
			p += lengths[c];
		}
	}
	shadow_rows_sum(rows, XXH3_128bits(body, len));
	free(body);
	return true;
}

/* ---- the queue ---- */

void shadow_offer(struct shadow *sh, const char *database, const char *user, const char *text, uint32_t len,
		  const struct shadow_rows *seen)
{
	struct shadow_item *item = len <= SHADOW_TEXT_MAX ? malloc(sizeof(*item) + len + 1) : NULL;
	if (item) {
		base_strlcpy(item->database, database, sizeof(item->database));
		base_strlcpy(item->user, user, sizeof(item->user));
		item->seen = *seen;
		item->len = len;
		memcpy(item->text, text, len);
		item->text[len] = '\0';
	}
	pthread_mutex_lock(&sh->lock);
	sh->counts.sampled++;
	bool is_taken = item && sh->count < sh->cap && !sh->is_stopping;
	if (is_taken) {
		sh->queue[(sh->head + sh->count++) % sh->cap] = item;
		pthread_cond_signal(&sh->wake);
	} else {
		sh->counts.dropped++;
	}
	pthread_mutex_unlock(&sh->lock);
	if (!is_taken)
		free(item);
}

/* ---- the shadow thread ---- */

/* A connection for the item's database and user: kept, or opened (NULL when it cannot be). */
static PGconn *shadow_conn_for(struct shadow *sh, const struct shadow_item *item)
{
	struct shadow_conn *slot = &sh->conns[0];
	for (uint32_t i = 0; i < SHADOW_CONNS; i++) {
		struct shadow_conn *c = &sh->conns[i];
		if (c->conn && (!sh->is_server_target ||
				(strcmp(c->database, item->database) == 0 && strcmp(c->user, item->user) == 0))) {
			c->used = sh->runs;
			return c->conn;
		}
		if (!c->conn || (slot->conn && c->used < slot->used))
			slot = c; /* a free one, else the least recently used */
	}
	PQfinish(slot->conn);
	slot->conn = NULL;
	PGconn *conn = shadow_connect(sh->target, sh->is_server_target, item->database, item->user,
				      runtime_config(sh->rt)->replay_deadline_secs * 1000u);
	if (PQstatus(conn) != CONNECTION_OK) {
		TERN_WARN("[shadow] target: could not connect for %s/%s: %s", item->user, item->database,
			  PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	slot->conn = conn;
	base_strlcpy(slot->database, item->database, sizeof(slot->database));
	base_strlcpy(slot->user, item->user, sizeof(slot->user));
	slot->used = sh->runs;
	return conn;
}

static void shadow_drop_conn(struct shadow *sh, PGconn *conn)
{
	for (uint32_t i = 0; i < SHADOW_CONNS; i++)
		if (sh->conns[i].conn == conn) {
			PQfinish(conn);
			sh->conns[i].conn = NULL;
		}
}

bool shadow_rows_of(const struct pg_result *res, struct shadow_rows *rows)
{
	int columns = PQnfields(res);
	const char **values = malloc((size_t)(columns ? columns : 1) * sizeof(*values));
	int *lengths = malloc((size_t)(columns ? columns : 1) * sizeof(*lengths));
	bool is_ok = values && lengths;
	for (int r = 0; is_ok && r < PQntuples(res); r++) {
		for (int c = 0; c < columns; c++) {
			values[c] = PQgetvalue(res, r, c);
			lengths[c] = PQgetisnull(res, r, c) ? -1 : PQgetlength(res, r, c);
		}
		is_ok = shadow_rows_add_values(rows, values, lengths, columns);
	}
	free(values);
	free(lengths);
	return is_ok;
}

const char *shadow_target_conninfo(const struct tern_runtime *rt, const char *named, bool *is_server)
{
	*is_server = strchr(named, '=') == NULL;
	if (!*is_server)
		return named;
	for (uint32_t i = 0; i < rt->pool->server_count; i++)
		if (strcmp(rt->pool->servers[i].name, named) == 0)
			return rt->pool->servers[i].conninfo;
	return NULL;
}

struct pg_conn *shadow_connect(const char *target, bool is_server, const char *database, const char *user,
			       uint32_t timeout_ms)
{
	char timeout[48];
	snprintf(timeout, sizeof(timeout), "-c statement_timeout=%u", timeout_ms);
	/* (the target's own settings override the first three; a connection string names its database and
	 * user, a [servers] key gets the caller's) */
	const char *keys[] = {"options", "connect_timeout", "application_name", "dbname", "dbname", "user", NULL};
	const char *values[] = {timeout, "10", "tern shadow", target, database, user, NULL};
	if (!is_server)
		keys[4] = NULL;
	return PQconnectdbParams(keys, values, 1);
}

struct pg_result *shadow_exec(struct pg_conn *conn, const char *sql, bool is_read_only)
{
	if (is_read_only) {
		PGresult *begin = PQexec(conn, "BEGIN TRANSACTION READ ONLY");
		if (PQresultStatus(begin) != PGRES_COMMAND_OK)
			return begin;
		PQclear(begin);
	}
	PGresult *res = PQexec(conn, sql);
	if (is_read_only)
		PQclear(PQexec(conn, "ROLLBACK"));
	return res;
}

/* The item's read on the shadow: its rows, or false (it failed). */
static bool shadow_run(struct shadow *sh, const struct shadow_item *item, struct shadow_rows *rows)
{
	PGconn *conn = shadow_conn_for(sh, item);
	if (!conn)
		return false;
	PGresult *res = shadow_exec(conn, item->text, true);
	ExecStatusType status = PQresultStatus(res);
	bool is_ok = (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) && shadow_rows_of(res, rows);
	PQclear(res);
	if (PQstatus(conn) != CONNECTION_OK)
		shadow_drop_conn(sh, conn);
	return is_ok;
}

/* The item's fingerprint and shown text (libpg_query's normalized text), once it ran. */
static void shadow_count(struct shadow *sh, const struct shadow_item *item, bool is_ok, bool is_same)
{
	PgQueryFingerprintResult fp = pg_query_fingerprint(item->text);
	uint64_t fingerprint = fp.error ? 0 : fp.fingerprint;
	pg_query_free_fingerprint_result(fp);
	pthread_mutex_lock(&sh->lock);
	if (!is_ok) {
		sh->counts.failed++;
		pthread_mutex_unlock(&sh->lock);
		return;
	}
	sh->counts.compared++;
	sh->counts.mismatched += !is_same;
	struct shadow_digest *d = NULL;
	for (uint32_t i = 0; i < sh->digest_count && !d; i++)
		if (sh->digests[i].fingerprint == fingerprint)
			d = &sh->digests[i];
	bool is_new = !d && fingerprint && sh->digest_count < SHADOW_DIGESTS_MAX;
	if (is_new)
		d = &sh->digests[sh->digest_count++];
	if (d) {
		d->fingerprint = fingerprint;
		d->compared++;
		d->mismatched += !is_same;
	}
	pthread_mutex_unlock(&sh->lock);
	if (is_new) { /* (its text: outside the lock; only this thread writes a digest's text) */
		PgQueryNormalizeResult normalized = pg_query_normalize(item->text);
		const char *text = normalized.error ? item->text : normalized.normalized_query;
		pthread_mutex_lock(&sh->lock);
		base_strlcpy(d->text, text, sizeof(d->text));
		pthread_mutex_unlock(&sh->lock);
		pg_query_free_normalize_result(normalized);
	}
}

static void *shadow_main(void *arg)
{
	struct shadow *sh = arg;
	pthread_mutex_lock(&sh->lock);
	for (;;) {
		while (!sh->is_stopping && sh->count == 0)
			pthread_cond_wait(&sh->wake, &sh->lock);
		if (sh->is_stopping)
			break;
		struct shadow_item *item = sh->queue[sh->head];
		sh->head = (sh->head + 1) % sh->cap;
		sh->count--;
		pthread_mutex_unlock(&sh->lock);
		sh->runs++;
		struct shadow_rows rows = {0};
		bool is_ok = shadow_run(sh, item, &rows);
		bool is_same = rows.count == item->seen.count && rows.low == item->seen.low && rows.high == item->seen.high;
		shadow_count(sh, item, is_ok, is_same);
		free(item);
		pthread_mutex_lock(&sh->lock);
	}
	pthread_mutex_unlock(&sh->lock);
	for (uint32_t i = 0; i < SHADOW_CONNS; i++)
		PQfinish(sh->conns[i].conn);
	return NULL;
}

int shadow_start(struct shadow **out, struct tern_runtime *rt, char *err, size_t err_size)
{
	const struct tern_config *cfg = runtime_config(rt);
	*out = NULL;
	if (!cfg->shadow_target || !cfg->shadow_target[0])
		return 0;
	struct shadow *sh = calloc(1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	sh->rt = rt;
	sh->cap = cfg->shadow_queue;
	const char *target = shadow_target_conninfo(rt, cfg->shadow_target, &sh->is_server_target);
	if (!target) {
		snprintf(err, err_size, "[shadow] target = %s: neither a [servers] key nor a libpq connection string "
			 "(key=value)", cfg->shadow_target);
		free(sh);
		return -EINVAL;
	}
	if (strlen(target) >= sizeof(sh->target)) {
		snprintf(err, err_size, "[shadow] target: the connection string is over %zu bytes", sizeof(sh->target) - 1);
		free(sh);
		return -EINVAL;
	}
	strcpy(sh->target, target);
	sh->queue = calloc(sh->cap, sizeof(*sh->queue));
	if (!sh->queue) {
		free(sh);
		return -ENOMEM;
	}
	pthread_mutex_init(&sh->lock, NULL);
	pthread_cond_init(&sh->wake, NULL);
	int rc = pthread_create(&sh->thread, NULL, shadow_main, sh);
	if (rc != 0) {
		pthread_cond_destroy(&sh->wake);
		pthread_mutex_destroy(&sh->lock);
		free(sh->queue);
		free(sh);
		return -rc;
	}
	*out = sh;
	return 0;
}

void shadow_stop(struct shadow *sh)
{
	if (!sh)
		return;
	pthread_mutex_lock(&sh->lock);
	sh->is_stopping = true;
	pthread_cond_signal(&sh->wake);
	pthread_mutex_unlock(&sh->lock);
	pthread_join(sh->thread, NULL);
	for (; sh->count > 0; sh->count--, sh->head = (sh->head + 1) % sh->cap)
		free(sh->queue[sh->head]);
	pthread_cond_destroy(&sh->wake);
	pthread_mutex_destroy(&sh->lock);
	free(sh->queue);
	free(sh);
}

static int shadow_digest_order(const void *a, const void *b)
{
	const struct shadow_digest *x = a, *y = b;
	return x->mismatched != y->mismatched ? (x->mismatched < y->mismatched ? 1 : -1)
	       : x->compared != y->compared   ? (x->compared < y->compared ? 1 : -1)
					      : 0;
}

int shadow_snapshot(struct shadow *sh, struct shadow_counts *counts, struct shadow_digest **digests, uint32_t *count)
{
	struct shadow_digest *copy = digests ? malloc(SHADOW_DIGESTS_MAX * sizeof(*copy)) : NULL;
	if (digests && !copy)
		return -ENOMEM;
	pthread_mutex_lock(&sh->lock);
	*counts = sh->counts;
	uint32_t n = sh->digest_count;
	if (copy)
		memcpy(copy, sh->digests, n * sizeof(*copy));
	pthread_mutex_unlock(&sh->lock);
	if (digests) {
		qsort(copy, n, sizeof(*copy), shadow_digest_order);
		*digests = copy;
		*count = n;
	}
	return 0;
}
