/*
 * monitor.h — the topology monitor: a thread of its own that asks every server in [servers], once per
 * monitor_interval_ms, whether it is in recovery, where its WAL is (the primary's current LSN, a
 * standby's replay LSN) and on which timeline, and publishes the answers and the server writes go to.
 * A server's role comes from the server, never from its name: a promoted standby becomes the primary
 * with no config change. A server that does not answer is marked down, and up again when it answers.
 *
 * It logs in as the server conninfo's own user if it names one, else as [auth] auth_user, else as
 * postgres, to database postgres (monitor_conn.h says with what): the user's plaintext password from
 * auth_file or the conninfo; else the md5 hash auth_file holds, or the SCRAM ClientKey the first client of
 * that user proved in its own SCRAM login (monitor_learn_key: in memory only, never written). A server it
 * cannot log in to is UNMONITORED (logged once), tried again when a key is learned, at a reload, and every
 * MONITOR_CREDENTIAL_RETRY_NS.
 *
 * Threads: the monitor's thread writes; any thread reads (each field one atomic load). The first round
 * runs on the caller's thread in monitor_start, so the primary is known before clients are accepted.
 * Never: touches sessions or the pool's lists.
 */
#ifndef TERN_MONITOR_H
#define TERN_MONITOR_H

#include "auth.h"
#include "server_auth.h"
#include "pool/pool.h"
#include "core/runtime.h"

/* FENCED: the server says it is out of recovery but takes no writes: it is read-only (a write would
 * answer 25006), another primary is on a later timeline, or [routing] patroni_api's leader is another
 * server. Neither writes nor reads go to it; at most one server is PRIMARY after a round, unless two
 * unrelated servers share a timeline. */
/* UNMONITORED: the monitor cannot log in to the server (no usable credential for its user): its role and
 * LSN are unknown. Writes stay with the server they went to ([servers] primary at startup) and a lost
 * connection there is decided as without a monitor; no read goes to a replica while the server writes go
 * to is unmonitored, and no read to an unmonitored replica. */
enum monitor_role { MONITOR_UNKNOWN = 0, MONITOR_DOWN, MONITOR_UNMONITORED, MONITOR_PRIMARY, MONITOR_STANDBY, MONITOR_FENCED };
/* The last round got an answer from it. */
static inline bool monitor_role_is_up(uint32_t role) { return role >= MONITOR_PRIMARY; }

/* What the last round or probe saw of one server; every field atomic. */
struct monitor_server {
	struct pool_server *server;
	uint32_t role;     /* enum monitor_role */
	uint32_t timeline; /* 0 when unknown */
	uint64_t lsn;      /* the primary's pg_current_wal_lsn, a standby's pg_last_wal_replay_lsn */
	uint64_t checked_ns;
	/* A standby: when the primary was last seen at or below the LSN it has replayed (its lag in time is
	 * now minus this, as precise as the rounds); 0 when unknown. */
	uint64_t replayed_ns;
	uint32_t version; /* PQserverVersion of its last connection (190000: PostgreSQL 19, WAIT FOR LSN); 0 unknown */
	uint64_t probes;  /* on-demand LSN probes sent to it (strict reads' primary probes, waiting reads' standby ones) */
};
/* The first server version with WAIT FOR LSN, which a replica read waits with in-band (route.c). */
#define MONITOR_WAIT_FOR_LSN_VERSION 190000u

struct monitor;

/* The primary's insert LSN: past the end of every record inserted so far, committed or not; a standby
 * that has replayed it has every commit acknowledged before it was asked (the session level's write
 * probe, and the strict level's with strict_target = insert). */
#define MONITOR_INSERT_LSN_SQL "SELECT pg_catalog.pg_current_wal_insert_lsn()"

/* Runs the first round, then starts the thread; the primary it found is stored in rt->primary (the
 * first server when none answers as a primary). 0 or a negative errno. */
TERN_MUST_USE int monitor_start(struct monitor **out, struct tern_runtime *rt);
/* One server's state (index as in the pool); NULL past the count. */
const struct monitor_server *monitor_server_at(const struct monitor *m, uint32_t index);
/* The number of servers (as in the pool). */
uint32_t monitor_server_count(const struct monitor *m);
/* A standby's lag behind the server writes go to: in WAL bytes, and in time (now minus when the
 * primary was last seen where the standby is now). is_known is false for a server that is not a
 * standby, or whose lag in time the rounds have not seen yet (bytes still hold then). */
struct monitor_lag {
	uint64_t bytes;
	uint64_t ns;
	bool is_known;
};
struct monitor_lag monitor_lag_of(const struct monitor *m, uint32_t index, const struct pool_server *primary,
				  uint64_t now_ns);

/* ---- on-demand probes, from any thread (a worker takes the monitor's lock only to signal it) ---- */

/* Every round and probe bumps the generation once its answers are stored, then calls the runtime's
 * topology_changed hook: a worker with waiting reads looks again when it changed. True when it moved
 * since *seen (which then takes the new one). */
bool monitor_moved(const struct monitor *m, uint32_t *seen);
/* A primary connection was lost: asks for a round now rather than at the interval (one for every ask
 * that came before it started). */
void monitor_round_request(struct monitor *m);
/* A strict read arrived: asks for a probe of the primary's WAL insert LSN sent after now. The ticket
 * names it; every read that asks before it is sent shares it. */
uint64_t monitor_probe_request(struct monitor *m);
/* True once the probe `ticket` names (or a later one) answered: *lsn is the primary's insert LSN then,
 * or UINT64_MAX when the primary did not answer (no replica can be known to have it). */
bool monitor_probe_answer(const struct monitor *m, uint64_t ticket, uint64_t *lsn);
/* A read waits for a standby to replay `lsn` until `until_ns`: the monitor asks the standbys short of
 * it again and again (at most once a millisecond) until one has it or the time is up. */
void monitor_want_replay(struct monitor *m, uint64_t lsn, uint64_t until_ns);

/* A client of secret->user proved itself with SCRAM (secret: server_auth_secret_from's, with its
 * ClientKey): kept, in memory only, for each server the monitor logs in to as that user without a working
 * credential, and a round is asked. Any thread; one atomic load when no server wants a key. */
void monitor_learn_key(struct monitor *m, const struct server_auth_secret *secret);

/* Stops the thread and frees the monitor. */
void monitor_stop(struct monitor *m);

const char *monitor_role_name(enum monitor_role role);

#endif
