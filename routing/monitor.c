/*
 * monitor.c — the topology monitor of monitor.h: blocking libpq on its own thread, one kept connection
 * per server.
 */
#include "monitor.h"

#include "monitor_conn.h"
#include "patroni.h"
#include "pool/login.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one round asks each server: role, WAL position, timeline. */
static const char monitor_query[] =
	"SELECT pg_catalog.pg_is_in_recovery(), "
	"CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() "
	"ELSE pg_catalog.pg_current_wal_lsn() END, "
	/* A primary's timeline from the WAL it writes (its checkpoint says the new one only after the first
	 * checkpoint past a promotion); a standby's from its last checkpoint. */
	"CASE WHEN pg_catalog.pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_catalog.pg_control_checkpoint()) "
	"ELSE ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))"
	"::pg_catalog.bit(32)::pg_catalog.int4 END, "
	/* Read-only for everyone (the server's setting, not a role's or database's, which the monitor's own
	 * session would see): NULL when it comes from those. */
	"(SELECT setting FROM pg_catalog.pg_settings WHERE name = 'default_transaction_read_only' "
	"AND source NOT IN ('database', 'user', 'database user', 'client', 'session'))";

/* The probes: the primary's LSN for a strict read, a standby's replay LSN. The strict level's target, by [routing] strict_target: the primary's flushed WAL (every commit
 * acknowledged with synchronous_commit on is in it), or all it inserted (asynchronous commits too, and
 * the WAL of transactions still open, which a standby gets only once it is flushed). */
static const char *const monitor_probe_primary_queries[] = {"SELECT pg_catalog.pg_current_wal_flush_lsn()",
							     MONITOR_INSERT_LSN_SQL};
static const char monitor_probe_standby_query[] = "SELECT pg_catalog.pg_last_wal_replay_lsn()";
/* Standby probes for a waiting read: at most one per server this often. */
#define MONITOR_STANDBY_PROBE_GAP_NS (1000u * 1000u)
/* The primary's positions remembered, for a standby's lag in time. */
#define MONITOR_SAMPLES 64u
/* A server that refused the monitor's credential is asked again at a learned key, a reload of auth_file,
 * or this long after (pg_hba.conf may have changed): not every round, which would fill its log. */
#define MONITOR_CREDENTIAL_RETRY_NS (30ull * BASE_NS_PER_SEC)

struct monitor_sample {
	uint64_t ns, lsn;
};

struct monitor {
	struct tern_runtime *rt;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stopping; /* lock */
	uint32_t count;
	struct monitor_server servers[POOL_SERVERS_MAX];
	struct monitor_conn *conns[POOL_SERVERS_MAX]; /* the thread's own */
	/* Credentials learned from clients (lock): a server's SCRAM key, for the user key_user names while it
	 * wants one ("" once it has a working credential); key_serial counts the keys learned. */
	struct server_auth_secret keys[POOL_SERVERS_MAX];
	bool has_key[POOL_SERVERS_MAX];
	char key_user[POOL_SERVERS_MAX][AUTH_NAME_MAX + 1];
	uint32_t key_serial[POOL_SERVERS_MAX];
	uint32_t keys_wanted; /* atomic: the servers whose key_user is set */
	/* The thread's own: when a server last refused the credential (0: it did not), the key serial and
	 * auth_file tried then, and what it said. */
	uint64_t refused_ns[POOL_SERVERS_MAX];
	uint32_t tried_serial[POOL_SERVERS_MAX];
	const struct auth_file *tried_auth[POOL_SERVERS_MAX];
	char refusal[POOL_SERVERS_MAX][sizeof(((struct pool_error *)0)->message)];
	/* Probes (atomic): tickets asked for, probes sent and answered, the last answer. */
	uint64_t probe_requested, probe_sent, probe_done, probe_lsn;
	uint64_t want_lsn, want_until_ns; /* the highest replay LSN a read waits for, and until when */
	uint32_t generation;
	bool is_round_asked; /* atomic: a round now, not at the interval (a primary connection was lost) */
	/* The thread's own: the primary's last positions, oldest first in a ring. */
	struct monitor_sample samples[MONITOR_SAMPLES];
	uint32_t sample_count, sample_next;
	uint64_t standby_probed_ns[POOL_SERVERS_MAX];
	/* [routing] patroni_api: the members' REST APIs (the one that answered last is asked first), each
	 * server's host and port as its conninfo says (Patroni names its members' by them), and the server
	 * Patroni last named its running leader (-1: none, or Patroni never answered). */
	struct config_listen patroni[CONFIG_PATRONI_MAX];
	uint32_t patroni_count, patroni_next;
	struct config_listen addresses[POOL_SERVERS_MAX];
	int patroni_leader;
	char patroni_note[512]; /* what was last logged of Patroni, so each change is logged once */
};

uint32_t monitor_server_count(const struct monitor *m) { return m->count; }

struct monitor_lag monitor_lag_of(const struct monitor *m, uint32_t index, const struct pool_server *primary,
				  uint64_t now_ns)
{
	struct monitor_lag lag = {0};
	const struct monitor_server *ms = &m->servers[index];
	if (__atomic_load_n(&ms->role, __ATOMIC_ACQUIRE) != MONITOR_STANDBY)
		return lag;
	uint64_t lsn = __atomic_load_n(&ms->lsn, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < m->count; i++) {
		uint64_t primary_lsn = __atomic_load_n(&m->servers[i].lsn, __ATOMIC_RELAXED);
		if (m->servers[i].server == primary && primary_lsn > lsn)
			lag.bytes = primary_lsn - lsn;
	}
	uint64_t replayed = __atomic_load_n(&ms->replayed_ns, __ATOMIC_RELAXED);
	lag.is_known = replayed != 0 || lag.bytes == 0;
	lag.ns = lag.bytes == 0 || now_ns <= replayed ? 0 : now_ns - replayed; /* at the primary's LSN: no lag */
	return lag;
}

bool monitor_moved(const struct monitor *m, uint32_t *seen)
{
	uint32_t generation = __atomic_load_n(&m->generation, __ATOMIC_ACQUIRE);
	if (generation == *seen)
		return false;
	*seen = generation;
	return true;
}

void monitor_round_request(struct monitor *m)
{
	if (__atomic_exchange_n(&m->is_round_asked, true, __ATOMIC_RELAXED))
		return; /* asked already: that round serves this one too */
	pthread_mutex_lock(&m->lock);
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
}

uint64_t monitor_probe_request(struct monitor *m)
{
	uint64_t ticket = __atomic_load_n(&m->probe_sent, __ATOMIC_ACQUIRE) + 1;
	uint64_t asked = __atomic_load_n(&m->probe_requested, __ATOMIC_RELAXED);
	if (asked >= ticket)
		return ticket; /* asked already, not yet sent: this read shares it */
	pthread_mutex_lock(&m->lock);
	if (__atomic_load_n(&m->probe_requested, __ATOMIC_RELAXED) < ticket)
		__atomic_store_n(&m->probe_requested, ticket, __ATOMIC_RELAXED);
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
	return ticket;
}

bool monitor_probe_answer(const struct monitor *m, uint64_t ticket, uint64_t *lsn)
{
	if (__atomic_load_n(&m->probe_done, __ATOMIC_ACQUIRE) < ticket)
		return false;
	*lsn = __atomic_load_n(&m->probe_lsn, __ATOMIC_RELAXED); /* this probe's or a later one's: higher */
	return true;
}

/* Raises *field to at least value. */
static void monitor_raise(uint64_t *field, uint64_t value)
{
	uint64_t have = __atomic_load_n(field, __ATOMIC_RELAXED);
	while (have < value && !__atomic_compare_exchange_n(field, &have, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

void monitor_want_replay(struct monitor *m, uint64_t lsn, uint64_t until_ns)
{
	bool is_new = __atomic_load_n(&m->want_lsn, __ATOMIC_RELAXED) < lsn ||
		      __atomic_load_n(&m->want_until_ns, __ATOMIC_RELAXED) < until_ns;
	if (!is_new)
		return;
	monitor_raise(&m->want_lsn, lsn);
	monitor_raise(&m->want_until_ns, until_ns);
	pthread_mutex_lock(&m->lock);
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
}

const char *monitor_role_name(enum monitor_role role)
{
	static const char *const names[] = {"unknown", "down", "unmonitored", "primary", "standby", "fenced"};
	return role < TERN_ARRAY_LEN(names) ? names[role] : "unknown";
}

const struct monitor_server *monitor_server_at(const struct monitor *m, uint32_t index)
{
	return index < m->count ? &m->servers[index] : NULL;
}

/* "16/B374D848" as a number, 0 when it is not an LSN. */
static uint64_t monitor_parse_lsn(const char *text)
{
	unsigned int high, low;
	return text && sscanf(text, "%X/%X", &high, &low) == 2 ? (uint64_t)high << 32 | low : 0;
}

/* Server i refused the monitor's credential for `user`: a key learned for it is dropped when it was the
 * one refused, and the next client of the user who proves itself with SCRAM gives one. */
static void monitor_want_key(struct monitor *m, uint32_t i, const char *user, bool is_key_refused)
{
	pthread_mutex_lock(&m->lock);
	if (is_key_refused || (m->has_key[i] && strcmp(m->keys[i].user, user) != 0)) {
		explicit_bzero(&m->keys[i], sizeof(m->keys[i]));
		m->has_key[i] = false;
	}
	if (!m->has_key[i] && m->key_user[i][0] == '\0') {
		base_strlcpy(m->key_user[i], user, sizeof(m->key_user[i]));
		__atomic_add_fetch(&m->keys_wanted, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&m->lock);
}

/* Server i took the monitor's login: it wants no key any more. */
static void monitor_unwant_key(struct monitor *m, uint32_t i)
{
	pthread_mutex_lock(&m->lock);
	if (m->key_user[i][0] != '\0') {
		m->key_user[i][0] = '\0';
		__atomic_sub_fetch(&m->keys_wanted, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&m->lock);
}

void monitor_learn_key(struct monitor *m, const struct server_auth_secret *secret)
{
	if (!m || __atomic_load_n(&m->keys_wanted, __ATOMIC_ACQUIRE) == 0)
		return;
	if (secret->kind != AUTH_SECRET_SCRAM || !secret->has_client_key)
		return;
	bool is_new = false;
	pthread_mutex_lock(&m->lock);
	for (uint32_t i = 0; i < m->count; i++) {
		if (m->key_user[i][0] == '\0' || strcmp(m->key_user[i], secret->user) != 0)
			continue;
		m->keys[i] = *secret;
		m->has_key[i] = true;
		m->key_serial[i]++;
		m->key_user[i][0] = '\0';
		__atomic_sub_fetch(&m->keys_wanted, 1, __ATOMIC_RELEASE);
		is_new = true;
	}
	if (is_new) {
		__atomic_store_n(&m->is_round_asked, true, __ATOMIC_RELAXED);
		pthread_cond_signal(&m->wake);
	}
	pthread_mutex_unlock(&m->lock);
}

/* Opens the kept connection to server i (monitor.h: as whom, with what). 0, -EACCES when the server
 * refused the credential or tern has none it takes (err says what to fix), else <0: not there. */
static int monitor_connect(struct monitor *m, uint32_t i, struct pool_error *err)
{
	const struct tern_config *cfg = runtime_config(m->rt);
	const struct pool_server *server = m->servers[i].server;
	static const char *const replaced_none[] = {NULL};
	struct pool_conninfo own;
	if (pool_conninfo_init(&own, server->conninfo, replaced_none, err->message, sizeof(err->message)) < 0) {
		base_strlcpy(err->sqlstate, "08006", sizeof(err->sqlstate));
		return -EINVAL;
	}
	char user[AUTH_NAME_MAX + 1];
	const char *named = pool_conninfo_get(&own, "user");
	base_strlcpy(user, named ? named : cfg->auth_user[0] ? cfg->auth_user : "postgres", sizeof(user));
	bool has_own_password = pool_conninfo_get(&own, "password") || pool_conninfo_get(&own, "passfile");
	pool_conninfo_deinit(&own);
	const struct auth_file *auth = __atomic_load_n(&m->rt->auth_file, __ATOMIC_ACQUIRE);
	const struct auth_user *entry = auth ? auth_file_find(auth, user) : NULL;
	struct monitor_login login = {.conninfo = server->conninfo, .user = user, .tls = m->rt->server_tls,
				      .timeout_ms = cfg->server_connect_timeout_ms};
	struct server_auth_secret secret;
	bool is_learned = false;
	if (entry && entry->kind == AUTH_SECRET_PLAIN) {
		login.password = entry->secret;
	} else if (!has_own_password) {
		pthread_mutex_lock(&m->lock);
		if (m->has_key[i] && strcmp(m->keys[i].user, user) == 0) {
			secret = m->keys[i];
			is_learned = true;
		}
		m->tried_serial[i] = m->key_serial[i];
		pthread_mutex_unlock(&m->lock);
		if (is_learned || (entry && server_auth_secret_from(entry, NULL, &secret)))
			login.secret = &secret;
	}
	m->tried_auth[i] = auth;
	int rc = monitor_conn_open(&m->conns[i], &login, err);
	explicit_bzero(&secret, sizeof(secret));
	if (rc == -EACCES)
		monitor_want_key(m, i, user, is_learned);
	else if (rc == 0)
		monitor_unwant_key(m, i);
	return rc;
}

/* Server i refused the credential lately and nothing that could change that happened since. */
static bool monitor_is_refusal_fresh(struct monitor *m, uint32_t i, uint64_t now)
{
	if (m->refused_ns[i] == 0 || now >= m->refused_ns[i] + MONITOR_CREDENTIAL_RETRY_NS ||
	    __atomic_load_n(&m->rt->auth_file, __ATOMIC_ACQUIRE) != m->tried_auth[i])
		return false;
	pthread_mutex_lock(&m->lock);
	bool is_same_key = m->key_serial[i] == m->tried_serial[i];
	pthread_mutex_unlock(&m->lock);
	return is_same_key;
}

/* A server's host and port as its conninfo names them (libpq's defaults when it does not). */
static void monitor_address_of(const struct pool_server *server, struct config_listen *out)
{
	struct pool_conninfo params;
	char parse_err[128];
	*out = (struct config_listen){.port = 5432};
	static const char *const replaced[] = {NULL};
	if (pool_conninfo_init(&params, server->conninfo, replaced, parse_err, sizeof(parse_err)) < 0)
		return;
	const char *host = pool_conninfo_get(&params, "host"), *port = pool_conninfo_get(&params, "port");
	base_strlcpy(out->host, host ? host : "", sizeof(out->host));
	if (port && atoi(port) > 0 && atoi(port) <= UINT16_MAX)
		out->port = (uint16_t)atoi(port);
	pool_conninfo_deinit(&params);
}

/* Asks one server: its role as it says (DOWN when it does not answer; UNMONITORED when it does not take
 * the monitor's login; FENCED when it is out of recovery but read-only, as a server being demoted is);
 * its LSN and timeline are stored. */
static uint32_t monitor_ask(struct monitor *m, uint32_t i, const char **why)
{
	struct monitor_server *state = &m->servers[i];
	struct monitor_row row;
	bool has_row = false;
	for (int attempt = 0; attempt < 2 && !has_row; attempt++) { /* a kept connection the server closed: once more */
		if (!m->conns[i]) {
			if (monitor_is_refusal_fresh(m, i, base_now_ns())) {
				*why = m->refusal[i];
				return MONITOR_UNMONITORED;
			}
			struct pool_error err;
			int rc = monitor_connect(m, i, &err);
			if (rc == -EACCES) {
				m->refused_ns[i] = base_now_ns();
				base_strlcpy(m->refusal[i], err.message, sizeof(m->refusal[i]));
				*why = m->refusal[i];
				return MONITOR_UNMONITORED;
			}
			if (rc < 0)
				break;
			m->refused_ns[i] = 0;
			__atomic_store_n(&state->version, monitor_conn_server_version(m->conns[i]), __ATOMIC_RELAXED);
		}
		has_row = monitor_conn_query(m->conns[i], monitor_query, 4, &row) == 0;
		if (!has_row) {
			monitor_conn_close(m->conns[i]);
			m->conns[i] = NULL;
		}
	}
	if (!has_row)
		return MONITOR_DOWN;
	uint32_t role = strcmp(row.value[0], "t") == 0 ? MONITOR_STANDBY : MONITOR_PRIMARY;
	if (role == MONITOR_PRIMARY && strcmp(row.value[3], "on") == 0) {
		role = MONITOR_FENCED; /* a write there would answer 25006 */
		*why = "it is read-only (default_transaction_read_only = on)";
	}
	__atomic_store_n(&state->lsn, monitor_parse_lsn(row.value[1]), __ATOMIC_RELAXED);
	__atomic_store_n(&state->timeline, (uint32_t)strtoul(row.value[2], NULL, 10), __ATOMIC_RELAXED);
	return role;
}

/* Logs a change of what Patroni said, once. */
static void monitor_patroni_note(struct monitor *m, bool is_warning, const char *note)
{
	if (strcmp(note, m->patroni_note) == 0)
		return;
	base_strlcpy(m->patroni_note, note, sizeof(m->patroni_note));
	if (is_warning)
		TERN_WARN("%s", note);
	else
		TERN_INFO("%s", note);
}

/* Asks Patroni for its leader: m->patroni_leader is the server it names, -1 when it names none that runs
 * or none of [servers]; unchanged when no API answers. */
static void monitor_ask_patroni(struct monitor *m)
{
	const struct tern_config *cfg = runtime_config(m->rt);
	uint32_t timeout_ms = (uint32_t)TERN_MIN((uint64_t)TERN_MAX(cfg->monitor_interval_ms, 250u),
						 TERN_MAX(cfg->server_connect_timeout_ms, 1u));
	struct patroni_view view;
	char err[160] = "", note[sizeof(m->patroni_note)];
	int rc = -1;
	for (uint32_t k = 0; k < m->patroni_count && rc < 0; k++) {
		const struct config_listen *api = &m->patroni[(m->patroni_next + k) % m->patroni_count];
		if ((rc = patroni_ask(api->host, api->port, timeout_ms, &view, err, sizeof(err))) == 0)
			m->patroni_next = (m->patroni_next + k) % m->patroni_count;
	}
	if (rc < 0) {
		snprintf(note, sizeof(note), "no Patroni API answered (last: %s): writes stay with its last leader", err);
		monitor_patroni_note(m, true, note);
		return;
	}
	int leader = -1;
	for (uint32_t i = 0; i < m->count && view.has_leader && leader < 0; i++) {
		const struct config_listen *a = &m->addresses[i];
		if (strcmp(m->servers[i].server->name, view.leader_name) == 0 ||
		    (a->port == view.leader_port && strcmp(a->host, view.leader_host) == 0))
			leader = (int)i;
	}
	if (leader >= 0)
		snprintf(note, sizeof(note), "Patroni's leader is %s: server %s", view.leader_name,
			 m->servers[leader].server->name);
	else if (view.has_leader)
		snprintf(note, sizeof(note), "Patroni's leader %s (%s:%u) is none of [servers]: no writes", view.leader_name,
			 view.leader_host, view.leader_port);
	else
		snprintf(note, sizeof(note), "Patroni names no running leader (%u members): writes wait", view.member_count);
	monitor_patroni_note(m, leader < 0, note);
	m->patroni_leader = leader;
}

/* One server says it is the primary: with patroni_api, the leader Patroni names; without, the one on the
 * latest timeline (another was left behind by a promotion). Any other that says so is fenced. */
static void monitor_fence(struct monitor *m, uint32_t *roles, const char **why)
{
	uint32_t top = 0;
	if (m->patroni_count)
		monitor_ask_patroni(m);
	else
		for (uint32_t i = 0; i < m->count; i++)
			if (roles[i] == MONITOR_PRIMARY)
				top = TERN_MAX(top, __atomic_load_n(&m->servers[i].timeline, __ATOMIC_RELAXED));
	for (uint32_t i = 0; i < m->count; i++) {
		if (roles[i] != MONITOR_PRIMARY)
			continue;
		if (m->patroni_count && (int)i != m->patroni_leader) {
			roles[i] = MONITOR_FENCED;
			why[i] = "it is not Patroni's leader";
		} else if (!m->patroni_count && __atomic_load_n(&m->servers[i].timeline, __ATOMIC_RELAXED) < top) {
			roles[i] = MONITOR_FENCED;
			why[i] = "another primary is on a later timeline";
		}
	}
}

static void monitor_store_role(struct monitor *m, uint32_t i, uint32_t role, const char *why, uint64_t asked_ns)
{
	struct monitor_server *state = &m->servers[i];
	uint32_t before = __atomic_load_n(&state->role, __ATOMIC_RELAXED);
	__atomic_store_n(&state->role, role, __ATOMIC_RELEASE);
	/* Release: a reader that sees this time (acquire) sees the role stored before it. */
	__atomic_store_n(&state->checked_ns, asked_ns, __ATOMIC_RELEASE);
	if (role != before && before != MONITOR_UNKNOWN)
		TERN_WARN("server %s is now %s (was %s)%s%s", state->server->name, monitor_role_name(role),
			  monitor_role_name(before), why ? ": " : "", why ? why : "");
	else if (role == MONITOR_FENCED && before == MONITOR_UNKNOWN)
		TERN_WARN("server %s is fenced: %s", state->server->name, why);
	else if (role == MONITOR_UNMONITORED && before == MONITOR_UNKNOWN)
		TERN_WARN("server %s is unmonitored (the monitor cannot log in: %s): while the server writes go to is "
			  "unmonitored they stay with it and no read goes to a replica",
			  state->server->name, why);
}

/* Writes go to the server that says it is the primary and is not fenced; of two that say so (two
 * unrelated servers, on one timeline), the first. With none, they stay where they went. */
static void monitor_publish_primary(struct monitor *m)
{
	const struct monitor_server *best = NULL;
	for (uint32_t i = 0; i < m->count && !best; i++)
		if (__atomic_load_n(&m->servers[i].role, __ATOMIC_ACQUIRE) == MONITOR_PRIMARY)
			best = &m->servers[i];
	if (!best)
		return;
	struct pool_server *was = __atomic_load_n(&m->rt->primary, __ATOMIC_ACQUIRE);
	if (was != best->server) {
		__atomic_store_n(&m->rt->primary, best->server, __ATOMIC_RELEASE);
		TERN_INFO("writes go to server %s (the primary, timeline %u)", best->server->name,
			  __atomic_load_n(&best->timeline, __ATOMIC_RELAXED));
	}
}

/* A position of the primary, for the standbys' lag in time. */
static void monitor_sample_primary(struct monitor *m, uint64_t lsn, uint64_t now)
{
	m->samples[m->sample_next] = (struct monitor_sample){.ns = now, .lsn = lsn};
	m->sample_next = (m->sample_next + 1) % MONITOR_SAMPLES;
	if (m->sample_count < MONITOR_SAMPLES)
		m->sample_count++;
}

/* When the primary was last at or below `lsn`: the newest sample a standby at lsn has (0: none). */
static uint64_t monitor_replayed_ns(const struct monitor *m, uint64_t lsn)
{
	for (uint32_t k = 1; k <= m->sample_count; k++) {
		const struct monitor_sample *sample = &m->samples[(m->sample_next + MONITOR_SAMPLES - k) % MONITOR_SAMPLES];
		if (sample->lsn <= lsn)
			return sample->ns;
	}
	return 0;
}

static void monitor_store_standby_lsn(struct monitor *m, uint32_t i, uint64_t lsn)
{
	struct monitor_server *state = &m->servers[i];
	__atomic_store_n(&state->lsn, lsn, __ATOMIC_RELAXED);
	__atomic_store_n(&state->replayed_ns, monitor_replayed_ns(m, lsn), __ATOMIC_RELAXED);
}

/* New answers are stored: readers look again. */
static void monitor_published(struct monitor *m)
{
	__atomic_add_fetch(&m->generation, 1, __ATOMIC_RELEASE);
	if (m->rt->topology_changed)
		m->rt->topology_changed(m->rt);
}

static void monitor_round(struct monitor *m)
{
	uint64_t now = base_now_ns();
	uint32_t roles[POOL_SERVERS_MAX];
	uint64_t asked_ns[POOL_SERVERS_MAX];
	const char *why[POOL_SERVERS_MAX] = {0};
	for (uint32_t i = 0; i < m->count; i++) {
		asked_ns[i] = base_now_ns(); /* what the answer says holds from here (not from when it came) */
		roles[i] = monitor_ask(m, i, &why[i]);
	}
	monitor_fence(m, roles, why);
	for (uint32_t i = 0; i < m->count; i++)
		monitor_store_role(m, i, roles[i], why[i], asked_ns[i]);
	for (uint32_t i = 0; i < m->count; i++) /* the primary's sample first: the standbys' lag in time */
		if (__atomic_load_n(&m->servers[i].role, __ATOMIC_RELAXED) == MONITOR_PRIMARY)
			monitor_sample_primary(m, __atomic_load_n(&m->servers[i].lsn, __ATOMIC_RELAXED), now);
	for (uint32_t i = 0; i < m->count; i++)
		if (__atomic_load_n(&m->servers[i].role, __ATOMIC_RELAXED) == MONITOR_STANDBY)
			monitor_store_standby_lsn(m, i, __atomic_load_n(&m->servers[i].lsn, __ATOMIC_RELAXED));
	monitor_publish_primary(m);
	monitor_published(m);
}

/* One single-value query on a kept connection; the LSN, or 0 (the connection is closed then; the next
 * round reconnects). */
static uint64_t monitor_ask_lsn(struct monitor *m, uint32_t i, const char *query)
{
	if (!m->conns[i])
		return 0;
	struct monitor_row row;
	__atomic_fetch_add(&m->servers[i].probes, 1, __ATOMIC_RELAXED);
	if (monitor_conn_query(m->conns[i], query, 1, &row) == 0)
		return monitor_parse_lsn(row.value[0]);
	monitor_conn_close(m->conns[i]);
	m->conns[i] = NULL;
	return 0;
}

/* The strict reads' probe: the insert LSN of the server writes go to, sent after every read that asked
 * before probe_sent moved. */
static void monitor_probe_primary(struct monitor *m)
{
	uint64_t ticket = __atomic_load_n(&m->probe_requested, __ATOMIC_RELAXED);
	__atomic_store_n(&m->probe_sent, ticket, __ATOMIC_RELEASE); /* reads arriving from now on need the next */
	struct pool_server *primary = runtime_primary(m->rt);
	uint64_t lsn = 0;
	for (uint32_t i = 0; i < m->count; i++)
		if (m->servers[i].server == primary)
			lsn = monitor_ask_lsn(m, i, monitor_probe_primary_queries[runtime_config(m->rt)->strict_target]);
	__atomic_store_n(&m->probe_lsn, lsn ? lsn : UINT64_MAX, __ATOMIC_RELAXED);
	__atomic_store_n(&m->probe_done, ticket, __ATOMIC_RELEASE);
}

/* A standby a read waits for: up, short of the wanted LSN while the read still waits. True when one may
 * be asked now; else *next_ns gets when one may (UINT64_MAX: none is wanted). */
static bool monitor_standby_due(const struct monitor *m, uint64_t now, uint64_t *next_ns)
{
	*next_ns = UINT64_MAX;
	uint64_t want = __atomic_load_n(&m->want_lsn, __ATOMIC_RELAXED);
	if (want == 0 || now >= __atomic_load_n(&m->want_until_ns, __ATOMIC_RELAXED))
		return false;
	for (uint32_t i = 0; i < m->count; i++) {
		if (__atomic_load_n(&m->servers[i].role, __ATOMIC_RELAXED) != MONITOR_STANDBY ||
		    __atomic_load_n(&m->servers[i].lsn, __ATOMIC_RELAXED) >= want)
			continue;
		uint64_t due = m->standby_probed_ns[i] + MONITOR_STANDBY_PROBE_GAP_NS;
		if (due <= now)
			return true;
		*next_ns = TERN_MIN(*next_ns, due);
	}
	return false;
}

/* Asks the standbys short of the wanted LSN for their replay LSN, each at most once per gap. */
static void monitor_probe_standbys(struct monitor *m, uint64_t now)
{
	uint64_t want = __atomic_load_n(&m->want_lsn, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < m->count; i++) {
		if (__atomic_load_n(&m->servers[i].role, __ATOMIC_RELAXED) != MONITOR_STANDBY ||
		    __atomic_load_n(&m->servers[i].lsn, __ATOMIC_RELAXED) >= want ||
		    now < m->standby_probed_ns[i] + MONITOR_STANDBY_PROBE_GAP_NS)
			continue;
		m->standby_probed_ns[i] = now;
		uint64_t lsn = monitor_ask_lsn(m, i, monitor_probe_standby_query);
		if (lsn)
			monitor_store_standby_lsn(m, i, lsn);
	}
}

static bool monitor_probe_is_asked(const struct monitor *m)
{
	return __atomic_load_n(&m->probe_requested, __ATOMIC_RELAXED) > __atomic_load_n(&m->probe_sent, __ATOMIC_RELAXED);
}

static void *monitor_main(void *arg)
{
	struct monitor *m = arg;
	uint64_t next_round_ns = base_now_ns() + runtime_config(m->rt)->monitor_interval_ms * BASE_NS_PER_MS;
	pthread_mutex_lock(&m->lock);
	while (!m->stopping) {
		uint64_t now = base_now_ns();
		uint64_t standby_ns;
		bool is_standby_due = monitor_standby_due(m, now, &standby_ns);
		if (__atomic_load_n(&m->is_round_asked, __ATOMIC_RELAXED))
			next_round_ns = now;
		if (now < next_round_ns && !is_standby_due && !monitor_probe_is_asked(m)) {
			/* Until the round is due, a standby may be asked again, or a probe is asked for. */
			uint64_t wait_ns = TERN_MIN(next_round_ns, standby_ns) - now;
			struct timespec until;
			clock_gettime(CLOCK_MONOTONIC, &until);
			uint64_t ns = (uint64_t)until.tv_nsec + wait_ns;
			until.tv_sec += (time_t)(ns / BASE_NS_PER_SEC);
			until.tv_nsec = (long)(ns % BASE_NS_PER_SEC);
			(void)pthread_cond_timedwait(&m->wake, &m->lock, &until);
			continue;
		}
		pthread_mutex_unlock(&m->lock);
		if (now >= next_round_ns) {
			__atomic_store_n(&m->is_round_asked, false, __ATOMIC_RELAXED); /* later asks get a later round */
			monitor_round(m);
			next_round_ns = base_now_ns() + runtime_config(m->rt)->monitor_interval_ms * BASE_NS_PER_MS;
		}
		bool probed = false;
		if (monitor_probe_is_asked(m)) {
			monitor_probe_primary(m);
			probed = true;
		}
		if (monitor_standby_due(m, base_now_ns(), &standby_ns)) {
			monitor_probe_standbys(m, base_now_ns());
			probed = true;
		}
		if (probed)
			monitor_published(m);
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	for (uint32_t i = 0; i < m->count; i++)
		monitor_conn_close(m->conns[i]);
	return NULL;
}

int monitor_start(struct monitor **out, struct tern_runtime *rt)
{
	struct monitor *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->rt = rt;
	m->count = rt->pool->server_count;
	m->patroni_leader = -1;
	const char *api = runtime_config(rt)->patroni_api;
	int apis = api && api[0] ? config_parse_addresses(api, m->patroni, CONFIG_PATRONI_MAX) : 0;
	m->patroni_count = apis > 0 ? (uint32_t)apis : 0; /* (config_load checked it) */
	for (uint32_t i = 0; i < m->count; i++) {
		m->servers[i].server = &rt->pool->servers[i];
		monitor_address_of(&rt->pool->servers[i], &m->addresses[i]);
	}
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&m->wake, &attr);
	pthread_condattr_destroy(&attr);
	monitor_round(m); /* the primary is known before any client arrives */
	int rc = pthread_create(&m->thread, NULL, monitor_main, m);
	if (rc != 0) {
		for (uint32_t i = 0; i < m->count; i++)
			monitor_conn_close(m->conns[i]);
		explicit_bzero(m->keys, sizeof(m->keys));
		pthread_cond_destroy(&m->wake);
		pthread_mutex_destroy(&m->lock);
		free(m);
		return -rc;
	}
	*out = m;
	return 0;
}

void monitor_stop(struct monitor *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->thread, NULL);
	explicit_bzero(m->keys, sizeof(m->keys));
	pthread_cond_destroy(&m->wake);
	pthread_mutex_destroy(&m->lock);
	free(m);
}
