/*
 * runtime.h — what the whole process shares: the running configuration, the pool and its thread, the
 * primary, the user list, the TLS context, the workers, the admin console's handler, and a few atomic
 * counters and flags.
 *
 * Threads: built by main before the workers start; afterwards read-only except the fields marked
 * atomic (SIGHUP swaps config, auth_file and tls; counters and flags change from any thread).
 * Never: holds per-session or per-worker state.
 */
#ifndef TERN_RUNTIME_H
#define TERN_RUNTIME_H

#include "config.h"
#include "gates.h"
#include "params.h"

struct auth_file;
struct digest_shared;
struct failover_log;
struct journal;
struct shadow;
struct auth_query;
struct pool;
struct pool_server;
struct monitor;
struct pool_opener;
struct tls_context;
struct worker;
struct session_console;
struct session_parts;

struct tern_runtime {
	const struct tern_config *config;
	struct pool *pool;
	struct pool_opener *opener;
	struct pool_server *primary; /* atomic: where writes go, as the topology monitor last saw (runtime_primary) */
	struct monitor *monitor;
	struct digest_shared *digests; /* query digests ([admin] query_digests; NULL: off) */
	struct failover_log *failovers; /* the last lost primary connections (recover.c; main's) */
	struct journal *journal;        /* committed history (the journal; NULL with tr_enabled = false) */
	struct shadow *shadow;         /* [shadow] sampling's thread (NULL without [shadow] target) */
	/* The monitor stored new answers (its generation moved: monitor_moved): wake the workers with reads waiting for
	 * a replica. Set by main; any thread. */
	void (*topology_changed)(struct tern_runtime *rt);
	const struct auth_file *auth_file; /* NULL without [auth] auth_file */
	struct auth_query *auth_query;     /* the lookup thread ([auth] auth_user turns lookups on) */
	const struct tls_context *tls;     /* atomic (SIGHUP swaps it); NULL with client_tls_sslmode = disable */
	const struct pool_tls_ops *server_tls; /* TLS toward the servers, for logins tern makes itself */
	/* The admin console: a session whose database is console->database (or its alias) is handed to it
	 * after login. */
	const struct session_console *console;
	/* What works for every session from above it: the login, the relay, routing and Transaction Replay
	 * (session_parts: main/parts.c). */
	const struct session_parts *parts;
	struct worker **workers;
	uint32_t worker_count; /* atomic: main publishes each worker once started (worker_started_count) */
	uint32_t client_count; /* atomic: sessions open in every worker */
	/* The client startup identity of each listen socket (the [tern] listen addresses in order, then the
	 * Unix socket): a hash of the endpoint a client came in on, part of the pool match key (TLS fields
	 * reserved). Set before the workers start; read-only after. */
	uint64_t identity_hashes[CONFIG_LISTEN_MAX + 1];
	struct params_tracked tracked; /* parameters kept per client in transaction pooling */
	bool stopping;          /* atomic: leave now (SIGINT, or the drain is over) */
	bool draining;          /* atomic: SIGTERM: accept no one, end sessions as their transactions end */
	/* Admin PAUSE/RESUME: while is_paused, new transactions wait at the gate (session_pause_gate). Each
	 * PAUSE or RESUME bumps pause_generation; a worker acknowledges a generation at the end of a pass,
	 * after which every transaction it starts sees the gate (see worker_pause_is_acknowledged). */
	bool is_paused;            /* atomic */
	struct gates gates;        /* DISABLE <db>, PAUSE <db> */
	uint32_t pause_generation; /* atomic */
	/* SIGHUP reloads, for the admin RELOAD: odd while main reloads, even when done; reload_result is
	 * the last one's (0 or <0, nothing changed). */
	uint32_t reload_generation; /* atomic */
	int reload_result;          /* atomic */
};

/* The server that says it is the primary, as the topology monitor last saw; any thread. */
static inline struct pool_server *runtime_primary(const struct tern_runtime *rt)
{
	return __atomic_load_n(&rt->primary, __ATOMIC_ACQUIRE);
}

/* The running configuration, from any thread: SIGHUP replaces it (main keeps the old one readable until
 * exit), so read it through here and, for consistent values, once per use. */
static inline const struct tern_config *runtime_config(const struct tern_runtime *rt)
{
	return __atomic_load_n(&rt->config, __ATOMIC_ACQUIRE);
}

#endif
