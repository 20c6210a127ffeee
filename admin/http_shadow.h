/*
 * http_shadow.h — POST /api/shadow: one statement run on a source (the primary by default) and on a shadow
 * server (a [servers] key or a libpq connection string), each on a connection of its own opened for the
 * request, and compared: row count, columns, an order-independent hash of the rows (shadow.h's, as
 * [shadow] sampling compares), the command tag, both timings and both errors. A read unless the body
 * says "allow_writes": true (then it runs as given on both, in autocommit); a read runs in a READ ONLY
 * transaction rolled back after it. statement_timeout is [limits] replay_deadline_secs. The connection
 * and the run are shadow.h's (shadow_connect, shadow_exec), as the sampling thread's.
 *
 * Threads: the HTTP connection's (blocking libpq). Ownership: the answer is the caller's to free.
 * Never: takes a connection from the pool, or touches a worker or a session.
 */
#ifndef TERN_HTTP_SHADOW_H
#define TERN_HTTP_SHADOW_H

#include "runtime.h"

/* The JSON body of a request run: the answer's JSON text (malloc'd; NULL when out of memory) and its HTTP
 * status in *status (200, or 400 with {"error"} for a body tern refuses). */
char *http_shadow_request(struct tern_runtime *rt, const char *body, size_t len, unsigned *status);

#endif
