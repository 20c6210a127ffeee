/*
 * http.h — the admin HTTP endpoint on [admin] http_listen (libmicrohttpd, its own thread):
 *   GET /metrics     Prometheus text: servers (role, up, LSN, lag), pools, routing decisions by path, the
 *                    read-wait histogram, ring and session counters per worker;
 *   GET /api/status  the same state as JSON (jansson);
 *   GET /api/digests the query digests (digest.h), by total time.
 * Anything else is 404, a method other than GET 405.
 *
 * Threads: libmicrohttpd's; it reads the monitor's and the workers' published counters (atomics) and
 * each pool server under its mutex, never a session. Ownership: main starts and stops it.
 */
#ifndef TERN_HTTP_H
#define TERN_HTTP_H

#include "runtime.h"

struct http_admin;

/* Listens on `listen` ("host:port" or a port alone, on 127.0.0.1). 0, or <0 with err filled. */
TERN_MUST_USE int http_admin_start(struct http_admin **out, struct tern_runtime *rt, const char *listen, char *err,
				   size_t err_size);
void http_admin_stop(struct http_admin *h);

/* The bodies, for tests: malloc'd text (NULL when out of memory). */
char *http_metrics_text(struct tern_runtime *rt);
char *http_status_json(struct tern_runtime *rt);
char *http_digests_json(struct tern_runtime *rt);

#endif
