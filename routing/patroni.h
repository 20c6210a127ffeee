/*
 * patroni.h — the Patroni topology source: one GET of a Patroni REST API's /cluster, and what it says
 * of the leader. tern follows an HA manager's choice rather than guessing; it never promotes a server.
 *
 * The request is plain HTTP/1.1 over a non-blocking socket polled up to one deadline (no HTTP client
 * library is in the dependency list, and /cluster needs a GET and a body); the name lookup before it
 * (getaddrinfo) is not bounded by that deadline. The answer is parsed with jansson.
 *
 * Threads: the monitor's thread alone calls it; nothing here keeps state between calls.
 * Ownership: the caller owns the view and the error text; the socket and the answer live for one call.
 * Never: promotes or fences a server, or names one of [servers]: monitor.c matches the leader to one.
 */
#ifndef TERN_PATRONI_H
#define TERN_PATRONI_H

#include "base.h"

#include <stddef.h>
#include <stdint.h>

#define PATRONI_NAME_SIZE 64u
#define PATRONI_HOST_SIZE 256u
/* A /cluster answer is a few hundred bytes per member; more than this is not Patroni's. */
#define PATRONI_BODY_MAX (256u * 1024u)

/* What /cluster said: its leader, when one is running (role "leader", state "running"), and how many
 * members it listed. A leader that is starting, stopping or a standby cluster's "standby_leader" takes
 * no writes: has_leader is false then. */
struct patroni_view {
	bool has_leader;
	char leader_name[PATRONI_NAME_SIZE];
	char leader_host[PATRONI_HOST_SIZE];
	uint16_t leader_port;
	uint32_t member_count;
};

/* Parses a /cluster body. 0, or -EINVAL with the reason in err (not JSON, no "members" array). */
TERN_MUST_USE int patroni_parse_cluster(const char *body, size_t len, struct patroni_view *out, char *err,
					size_t err_size);

/* GET /cluster from host:port, everything within timeout_ms. 0 with the view, or a negative errno with
 * the reason in err (refused, timed out, not HTTP 200, a chunked or oversized body, bad JSON). */
TERN_MUST_USE int patroni_ask(const char *host, uint16_t port, uint32_t timeout_ms, struct patroni_view *out,
			      char *err, size_t err_size);

#endif
