/*
 * reasons.h — why a session ended: one enum, and one table mapping each reason to the client's
 * SQLSTATE, message and hint, the log level, and the name its log line and metric carry (the counter
 * it feeds is host_stats.ended, by reason).
 *
 * Threads: read-only data, any thread. Ownership: the table and its strings are static.
 * Never: ends a session, sends, logs or counts anything: session_end (session.c) does, from this table.
 */
#ifndef TERN_REASONS_H
#define TERN_REASONS_H

#include "base.h"

enum session_end_reason {
	SESSION_END_NONE = 0,
	SESSION_END_CLIENT_CLOSED,     /* the client closed its socket */
	SESSION_END_CLIENT_TERMINATE,  /* the client sent Terminate */
	SESSION_END_CLIENT_IO_ERROR,   /* reset or other socket error on the client */
	SESSION_END_TOO_MANY_CLIENTS,  /* max_client_conn reached */
	SESSION_END_AUTH_FAILED,       /* wrong password or unknown user */
	SESSION_END_AUTH_UNSUPPORTED,  /* the client cannot do the required method */
	SESSION_END_ADMIN_DENIED,      /* the admin console, for a user not in admin_users */
	SESSION_END_PROTOCOL_VIOLATION,
	SESSION_END_FRAME_TOO_LARGE,
	SESSION_END_UNSUPPORTED_REQUEST, /* e.g. a CancelRequest before cancels are routed */
	SESSION_END_SERVER_REFUSED,    /* the server refused the login; its SQLSTATE is relayed */
	SESSION_END_UNKNOWN_DATABASE,  /* [databases] lists entries, none for this name and no "*" */
	SESSION_END_DATABASE_DISABLED, /* the admin console's DISABLE <db> */
	SESSION_END_ADMIN_KILLED,      /* the admin console's KILL <db> */
	SESSION_END_WAIT_TIMEOUT,      /* query_wait_timeout */
	SESSION_END_CLIENT_IDLE_TIMEOUT,      /* client_idle_timeout */
	SESSION_END_CLIENT_LOGIN_TIMEOUT,     /* client_login_timeout */
	SESSION_END_IDLE_TRANSACTION_TIMEOUT, /* idle_transaction_timeout */
	SESSION_END_QUERY_TIMEOUT,            /* query_timeout */
	SESSION_END_SERVER_LOST,       /* the server connection failed under the session */
	SESSION_END_OUT_OF_MEMORY,
	SESSION_END_SHUTDOWN,
	SESSION_END_TLS_FAILED,        /* the TLS handshake or a record failed (the client gets TLS's alert) */
	SESSION_END_TLS_REQUIRED,      /* client_tls_sslmode = require, and the client did not ask for TLS */
	SESSION_END_TOO_MANY_STATEMENTS, /* a Parse past max_client_prepared_statements */
	SESSION_END_PIPELINE_TOO_DEEP, /* more replies owed than STMT_REPLIES_MAX, or queued than SENDQ_SLICES_MAX */
	SESSION_END_REASON_COUNT
};

struct session_end_info {
	const char *name;     /* for logs and metrics labels */
	const char *sqlstate; /* NULL: the client is told nothing (it left, or asked to leave) */
	const char *message;
	const char *hint;
	enum base_log_level log_level;
};

const struct session_end_info *session_end_info(enum session_end_reason reason);

#endif
