/*
 * auth_query.h — the secret of a user who is not in auth_file, asked of the server as PgBouncer's
 * auth_user + auth_query do. A thread of its own runs the query with libpq as auth_user, with the user
 * name as the parameter $1 (the query text is the operator's, never built from a startup packet:
 * CVE-2025-12819), on one connection per database that it keeps, and hands each answer back through
 * the lookup's done callback. A login asks once per attempt, so a password changed on the server
 * counts at the next login.
 *
 * Threads: auth_query_post and auth_query_set from any thread; done runs on the lookup thread.
 * Ownership: a posted lookup is the lookup thread's until its done is called, then done's.
 * Never: blocks a worker, or builds SQL from what a client sent.
 */
#ifndef TERN_AUTH_QUERY_H
#define TERN_AUTH_QUERY_H

#include "auth.h"
#include "pool.h"

/* Databases with a kept connection; past it the least recently used is closed. */
#define AUTH_QUERY_CONNS_MAX 16u
/* Lookups waiting for the thread; past it a login is refused (53300), as a full pool would. */
#define AUTH_QUERY_QUEUE_MAX 1024u
/* auth_query and the conninfo it runs with are config strings; longer is a config mistake. */
#define AUTH_QUERY_TEXT_MAX 2048u

struct auth_query;

struct auth_lookup {
	struct base_list link;
	char user[AUTH_NAME_MAX + 1];
	char database[POOL_NAME_LEN_MAX]; /* where the query runs unless auth_dbname names one */
	void *owner;                      /* the asker's; never touched here */
	void *done_ctx;
	void (*done)(struct auth_lookup *lookup);
	/* The answer: 0 with `found` (auth_user_deinit frees it); -ENOENT when the server has no such
	 * login role, no password, or an expired one; another <0 with `error` (what the client is told). */
	int status;
	struct auth_user found;
	struct pool_error error;
};

struct auth_query_settings {
	const char *conninfo; /* the primary's; user, dbname and password are set here */
	const char *user;     /* auth_user: "" turns lookups off */
	const char *password; /* auth_user's plaintext from auth_file, or NULL */
	const char *query;    /* with $1 for the user name */
	const char *dbname;   /* "" = the client's database */
	uint64_t connect_timeout_ms;
};

/* Starts the thread. 0, -ENOMEM, -E2BIG (a setting over AUTH_QUERY_TEXT_MAX) or a pthread error. */
TERN_MUST_USE int auth_query_create(struct auth_query **out, const struct auth_query_settings *settings);
/* New settings (a reload): kept connections are closed when anything but the query changed.
 * 0 or -E2BIG (nothing changed then). */
TERN_MUST_USE int auth_query_set(struct auth_query *q, const struct auth_query_settings *settings);
/* Queues a lookup (user, database, done, done_ctx set). 0, or -EAGAIN when AUTH_QUERY_QUEUE_MAX wait. */
TERN_MUST_USE int auth_query_post(struct auth_query *q, struct auth_lookup *lookup);
/* Answers the lookups still queued with -ESHUTDOWN, stops the thread and frees everything. */
void auth_query_destroy(struct auth_query *q);

#endif
