/*
 * http.h — the admin HTTP endpoint on [admin] http_listen (libmicrohttpd, a thread per connection):
 *   GET /metrics      Prometheus text: servers (role, up, LSN, lag), pools, routing decisions by path, the
 *                     read-wait histogram, ring and session counters per worker, the journal's counters;
 *   GET /api/status   the same state as JSON (jansson), with the journal's coverage;
 *   GET /api/digests  the query digests (digest.h), by total time;
 *   POST /api/replay  operator replay of committed history (journal_rerun.h), a JSON body {"mode":
 *                     "committed_history" | "time_window" (the default), "target": a libpq conninfo, "from",
 *                     "to": RFC 3339 times, "after_commit_seq": N}. 200 with {applied, failed, partial,
 *                     stopped_at, last_commit_seq, error?, coverage}; 400 a bad body; 401 no or a wrong
 *                     "Authorization: Bearer <[admin] http_token>" when http_token is set; 403 no http_token
 *                     while http_listen is not a loopback address; 409 a replay already running, or
 *                     committed_history over an incomplete transaction ({error, commit_seq}); 413 a body over
 *                     64 kB; 503 tr_enabled = false. One replay at a time, bounded by replay_deadline_secs.
 *   POST /api/shadow  one statement on a source and a shadow server, compared (shadow.h); the same token
 *                     rule and size bound.
 * Anything else is 404, another method 405.
 *
 * Threads: libmicrohttpd's; it reads the monitor's and the workers' published counters (atomics), each
 * pool server under its mutex and committed history under its own, never a session; a replay blocks only
 * its connection's thread. Ownership: main starts and stops it (a running replay is told to stop first).
 * Never: touches a session, a worker's ring or a pool connection: it reads what the others publish, and a
 * replay or a shadow run opens libpq connections of its own.
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
