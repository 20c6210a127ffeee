/*
 * auth_query.c — the lookup thread of auth_query.h: blocking libpq on a thread of its own.
 */
#include "auth_query.h"

#include "opener.h"

#include <errno.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

struct auth_query_conn {
	char dbname[POOL_NAME_LEN_MAX];
	PGconn *pg;
	uint64_t used_serial; /* the least recently used goes first */
};

/* The settings, copied under the lock: the thread works on its own copy. */
struct auth_query_copy {
	char conninfo[AUTH_QUERY_TEXT_MAX];
	char user[AUTH_NAME_MAX + 1];
	char password[AUTH_PASSWORD_MAX + 1];
	bool has_password;
	char query[AUTH_QUERY_TEXT_MAX];
	char dbname[POOL_NAME_LEN_MAX];
	uint64_t connect_timeout_ms;
	uint64_t generation; /* bumped when anything a connection depends on changed */
};

struct auth_query {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct base_list queue; /* lock */
	uint32_t queued;        /* lock */
	bool stopping;          /* lock */
	struct auth_query_copy settings; /* lock */
	/* The thread's own. */
	struct auth_query_copy current;
	struct auth_query_conn conns[AUTH_QUERY_CONNS_MAX];
	uint64_t serial;
};

static int auth_query_copy_in(struct auth_query_copy *to, const struct auth_query_settings *from)
{
	struct auth_query_copy next = {.connect_timeout_ms = from->connect_timeout_ms,
				       .has_password = from->password != NULL,
				       .generation = to->generation};
	bool fits = base_strlcpy(next.conninfo, from->conninfo, sizeof(next.conninfo)) &&
		    base_strlcpy(next.user, from->user, sizeof(next.user)) &&
		    base_strlcpy(next.password, from->password ? from->password : "", sizeof(next.password)) &&
		    base_strlcpy(next.query, from->query, sizeof(next.query)) &&
		    base_strlcpy(next.dbname, from->dbname, sizeof(next.dbname));
	if (!fits) {
		OPENSSL_cleanse(&next, sizeof(next));
		return -E2BIG;
	}
	bool is_same_login = strcmp(next.conninfo, to->conninfo) == 0 && strcmp(next.user, to->user) == 0 &&
			     strcmp(next.password, to->password) == 0 && next.has_password == to->has_password &&
			     strcmp(next.dbname, to->dbname) == 0 && next.connect_timeout_ms == to->connect_timeout_ms;
	if (!is_same_login)
		next.generation++;
	OPENSSL_cleanse(to, sizeof(*to));
	*to = next;
	OPENSSL_cleanse(&next, sizeof(next));
	return 0;
}

static void auth_query_close_all(struct auth_query *q)
{
	for (uint32_t i = 0; i < AUTH_QUERY_CONNS_MAX; i++) {
		if (q->conns[i].pg)
			PQfinish(q->conns[i].pg);
		q->conns[i] = (struct auth_query_conn){0};
	}
}

static void auth_query_fail(struct auth_lookup *lookup, int status, const char *sqlstate, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void auth_query_fail(struct auth_lookup *lookup, int status, const char *sqlstate, const char *fmt, ...)
{
	lookup->status = status;
	base_strlcpy(lookup->error.sqlstate, sqlstate, sizeof(lookup->error.sqlstate));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(lookup->error.message, sizeof(lookup->error.message), fmt, ap);
	va_end(ap);
}

/* A connection as auth_user to `dbname`, kept or new; NULL with lookup's error set. */
static PGconn *auth_query_connect(struct auth_query *q, const char *dbname, struct auth_lookup *lookup)
{
	const struct auth_query_copy *c = &q->current;
	struct auth_query_conn *slot = &q->conns[0];
	for (uint32_t i = 0; i < AUTH_QUERY_CONNS_MAX; i++) {
		struct auth_query_conn *conn = &q->conns[i];
		if (conn->pg && strcmp(conn->dbname, dbname) == 0) {
			if (PQstatus(conn->pg) == CONNECTION_OK) {
				conn->used_serial = ++q->serial;
				return conn->pg;
			}
			slot = conn;
			break;
		}
		if (!conn->pg || conn->used_serial < slot->used_serial)
			slot = conn;
	}
	if (slot->pg)
		PQfinish(slot->pg);
	*slot = (struct auth_query_conn){0};

	static const char *const replaced[] = {"user", "dbname", "password", "connect_timeout",
					       "fallback_application_name", NULL};
	struct pool_conninfo params;
	char parse_err[128];
	if (pool_conninfo_init(&params, c->conninfo, replaced, parse_err, sizeof(parse_err)) < 0) {
		auth_query_fail(lookup, -EINVAL, "08006", "auth_query: the server's conninfo is invalid");
		return NULL;
	}
	char timeout_s[24];
	snprintf(timeout_s, sizeof(timeout_s), "%llu", (unsigned long long)((c->connect_timeout_ms + 999) / 1000));
	pool_conninfo_set(&params, "user", c->user);
	pool_conninfo_set(&params, "dbname", dbname);
	pool_conninfo_set(&params, "password", c->has_password ? c->password : pool_conninfo_get(&params, "password"));
	pool_conninfo_set(&params, "connect_timeout", timeout_s);
	pool_conninfo_set(&params, "fallback_application_name", "tern auth_query");
	PGconn *pg = PQconnectdbParams(params.keys, params.values, 0);
	pool_conninfo_deinit(&params);
	if (!pg || PQstatus(pg) != CONNECTION_OK) {
		struct pool_error err;
		pool_error_from_libpq(pg ? PQerrorMessage(pg) : "out of memory", &err);
		auth_query_fail(lookup, -ECONNREFUSED, err.sqlstate, "auth_query could not log in as auth_user \"%s\": %s",
				c->user, err.message);
		if (pg)
			PQfinish(pg);
		return NULL;
	}
	base_strlcpy(slot->dbname, dbname, sizeof(slot->dbname));
	slot->pg = pg;
	slot->used_serial = ++q->serial;
	return pg;
}

static void auth_query_run(struct auth_query *q, struct auth_lookup *lookup)
{
	const struct auth_query_copy *c = &q->current;
	const char *dbname = c->dbname[0] ? c->dbname : lookup->database;
	const char *params[1] = {lookup->user};
	PGresult *res = NULL;
	/* A kept connection the server closed since fails once; the second try opens a new one. */
	for (int attempt = 0; attempt < 2 && !res; attempt++) {
		PGconn *pg = auth_query_connect(q, dbname, lookup);
		if (!pg)
			return;
		res = PQexecParams(pg, c->query, 1, NULL, params, NULL, NULL, 0);
		if (PQstatus(pg) != CONNECTION_OK) {
			PQclear(res);
			res = NULL;
		}
	}
	if (!res) {
		auth_query_fail(lookup, -ECONNRESET, "08006", "auth_query: the server closed the connection");
		return;
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		auth_query_fail(lookup, -EIO, sqlstate ? sqlstate : "08006", "auth_query failed: %s",
				message ? message : "no result");
	} else if (PQnfields(res) < 2) {
		auth_query_fail(lookup, -EINVAL, "42601", "auth_query must return the user name and its password");
	} else if (PQntuples(res) == 0 || PQgetisnull(res, 0, 1)) {
		lookup->status = -ENOENT;
	} else {
		const char *secret = PQgetvalue(res, 0, 1);
		int rc = auth_user_from_secret(lookup->user, secret, &lookup->found);
		lookup->status = rc;
		if (rc < 0)
			auth_query_fail(lookup, rc, rc == -ENOMEM ? "53200" : "28000",
					"auth_query returned a password tern cannot use for \"%s\"", lookup->user);
		OPENSSL_cleanse(PQgetvalue(res, 0, 1), strlen(secret));
	}
	PQclear(res);
}

static void *auth_query_main(void *arg)
{
	struct auth_query *q = arg;
	for (;;) {
		pthread_mutex_lock(&q->lock);
		while (base_list_is_empty(&q->queue) && !q->stopping)
			pthread_cond_wait(&q->wake, &q->lock);
		if (q->stopping) {
			pthread_mutex_unlock(&q->lock);
			break;
		}
		struct base_list *node = base_list_pop_head(&q->queue);
		q->queued--;
		uint64_t last_generation = q->current.generation;
		OPENSSL_cleanse(&q->current, sizeof(q->current));
		q->current = q->settings;
		pthread_mutex_unlock(&q->lock);
		if (q->current.generation != last_generation)
			auth_query_close_all(q);
		struct auth_lookup *lookup = TERN_CONTAINER_OF(node, struct auth_lookup, link);
		if (q->current.user[0] == '\0')
			lookup->status = -ENOENT; /* turned off by a reload since it was posted */
		else
			auth_query_run(q, lookup);
		lookup->done(lookup);
	}
	auth_query_close_all(q);
	return NULL;
}

int auth_query_create(struct auth_query **out, const struct auth_query_settings *settings)
{
	struct auth_query *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	base_list_init(&q->queue);
	int rc = auth_query_copy_in(&q->settings, settings);
	if (rc < 0) {
		free(q);
		return rc;
	}
	q->current.generation = q->settings.generation;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->wake, NULL);
	rc = pthread_create(&q->thread, NULL, auth_query_main, q);
	if (rc != 0) {
		pthread_cond_destroy(&q->wake);
		pthread_mutex_destroy(&q->lock);
		free(q);
		return -rc;
	}
	*out = q;
	return 0;
}

int auth_query_set(struct auth_query *q, const struct auth_query_settings *settings)
{
	pthread_mutex_lock(&q->lock);
	int rc = auth_query_copy_in(&q->settings, settings);
	pthread_mutex_unlock(&q->lock);
	return rc;
}

int auth_query_post(struct auth_query *q, struct auth_lookup *lookup)
{
	TERN_ASSERT(lookup->done != NULL && lookup->user[0] != '\0');
	lookup->status = 0;
	pthread_mutex_lock(&q->lock);
	bool is_full = q->queued >= AUTH_QUERY_QUEUE_MAX || q->stopping;
	if (!is_full) {
		base_list_insert_tail(&q->queue, &lookup->link);
		q->queued++;
		pthread_cond_signal(&q->wake);
	}
	pthread_mutex_unlock(&q->lock);
	return is_full ? -EAGAIN : 0;
}

void auth_query_destroy(struct auth_query *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stopping = true;
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	struct base_list *node;
	while ((node = base_list_pop_head(&q->queue)) != NULL) {
		struct auth_lookup *lookup = TERN_CONTAINER_OF(node, struct auth_lookup, link);
		auth_query_fail(lookup, -ESHUTDOWN, "57P01", "tern is shutting down");
		lookup->done(lookup);
	}
	OPENSSL_cleanse(&q->settings, sizeof(q->settings));
	OPENSSL_cleanse(&q->current, sizeof(q->current));
	pthread_cond_destroy(&q->wake);
	pthread_mutex_destroy(&q->lock);
	free(q);
}
