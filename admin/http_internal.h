/*
 * http_internal.h — what http.c (GET, the daemon), http_post.c (POST), http_shadow.c and http_reply.c (the
 * replies, below the others) share: the endpoint's state, a POST body being read, the replies. Not for
 * other files.
 *
 * Threads: libmicrohttpd's, a thread per connection; is_replaying and is_stopping are atomics shared by them.
 * Ownership: main owns the struct http_admin (http_admin_start/stop); a connection owns its http_upload,
 * which http_completed frees; a body handed to http_reply or http_reply_with is theirs from then on.
 * Never: seen outside admin/http*.c, or touches a session, a worker's ring or a pool connection.
 */
#ifndef TERN_HTTP_INTERNAL_H
#define TERN_HTTP_INTERNAL_H

#include "runtime.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

struct journal;

/* A replay request is a conninfo, two times and a number: a few hundred bytes. */
#define HTTP_BODY_MAX (64u * 1024u)
/* Past HTTP_BODY_MAX a body is still read (and dropped) so the 413 reaches a client that sends it all
 * before reading; past this the connection is closed instead. */
#define HTTP_BODY_DISCARD_MAX (1024u * 1024u)
/* A connection idle this long is closed (none while its replay runs). */
#define HTTP_CONNECTION_TIMEOUT_S 10u
/* Connections (each a thread) at once. */
#define HTTP_CONNECTIONS_MAX 64u

struct http_admin {
	struct MHD_Daemon *daemon;
	struct tern_runtime *rt;
	bool is_loopback;  /* http_listen is a 127.0.0.0/8 address: a replay needs no token there */
	bool is_replaying; /* atomic: one replay at a time */
	bool is_stopping;  /* atomic: http_admin_stop began; a running replay stops between statements */
};

/* A POST body being read: the connection's state (libmicrohttpd's con_cls), freed when it completes. */
struct http_upload {
	char *data;
	size_t len, cap;
	size_t seen; /* bytes received, kept or not */
	bool is_too_large;
};

/* Answers with `body` (malloc'd text, freed here; NULL: out of memory, a 500) and one more header when
 * header_name is not NULL. */
enum MHD_Result http_reply_with(struct MHD_Connection *conn, unsigned int code, const char *type, char *body,
				const char *header_name, const char *header_value);
enum MHD_Result http_reply(struct MHD_Connection *conn, unsigned int code, const char *type, char *body);
/* {"error": message} as text (malloc'd; NULL when out of memory). */
char *http_error_body(const char *message);
/* Committed history's coverage as /api/status and /api/replay give it. */
json_t *http_coverage_json(struct journal *h);
/* A POST to /api/replay or /api/shadow: libmicrohttpd's calls for one request (headers, each piece of the
 * body, then none left), answered once the body is in. */
enum MHD_Result http_post_request(struct http_admin *h, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *upload_data, size_t *upload_data_size, void **state);
/* libmicrohttpd's end of a request: its body is freed. */
void http_completed(void *cls, struct MHD_Connection *conn, void **state, enum MHD_RequestTerminationCode why);

#endif
