/*
 * config.h — tern's configuration: one INI file (read with libinih) turned into a struct tern_config.
 * One table in config.c holds every key (section, type, default, bounds, reloadable, help); it builds
 * the defaults, validates a file, prints `--help-config` and the README's reference table, so the four
 * never drift.
 *
 * Threads: config_load sets libinih's process-wide options, so load on one thread at a time (the main
 * thread, at boot and on reload). A loaded config is plain data: share it read-only, never mutate it.
 * Ownership: the caller owns the struct's storage; the strings inside belong to the struct and are
 * freed by config_deinit. Never: opens sockets, resolves names, reads auth_file or knows sessions.
 */
#ifndef TERN_CONFIG_H
#define TERN_CONFIG_H

#include "base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Room for any IPv6 literal or DNS name (253 characters) plus the terminator. */
#define CONFIG_LISTEN_HOST_SIZE 256

enum config_pool_mode { CONFIG_POOL_SESSION = 0, CONFIG_POOL_TRANSACTION = 1 };
/* [tern] io_backend, in ring.h's enum ring_backend order (worker.c asserts it). */
enum config_io_backend { CONFIG_IO_BACKEND_AUTO = 0, CONFIG_IO_BACKEND_IO_URING = 1, CONFIG_IO_BACKEND_EPOLL = 2 };
/* [routing] default_consistency: where an autocommit read may go (routing.c). */
enum config_consistency {
	CONFIG_CONSISTENCY_PRIMARY = 0, /* no reads on replicas */
	CONFIG_CONSISTENCY_EVENTUAL = 1, /* any replica within max_replica_lag_bytes / _ms */
	CONFIG_CONSISTENCY_SESSION = 2,  /* read-your-writes: the client's own last write */
	CONFIG_CONSISTENCY_STRICT = 3,   /* every commit acknowledged before the read arrived */
};
/* [replay] tr_mode, in replay/decide.h's enum tr_mode order. */
enum config_tr_mode { CONFIG_TR_NONE = 0, CONFIG_TR_SESSION, CONFIG_TR_SELECT, CONFIG_TR_TRANSACTION };
enum config_auth_mode { CONFIG_AUTH_TRUST = 0, CONFIG_AUTH_MD5 = 1, CONFIG_AUTH_SCRAM = 2, CONFIG_AUTH_CERT = 3 };
/* client_tls_sslmode: allow and prefer behave alike on the server side (TLS when the client asks). */
enum config_tls_mode { CONFIG_TLS_DISABLE = 0, CONFIG_TLS_ALLOW = 1, CONFIG_TLS_PREFER = 2, CONFIG_TLS_REQUIRE = 3 };
/* server_tls_sslmode: libpq's sslmode, in its order (the names are libpq's values). */
enum config_server_tls_mode {
	CONFIG_SERVER_TLS_DISABLE = 0,
	CONFIG_SERVER_TLS_ALLOW,
	CONFIG_SERVER_TLS_PREFER,
	CONFIG_SERVER_TLS_REQUIRE,
	CONFIG_SERVER_TLS_VERIFY_CA,
	CONFIG_SERVER_TLS_VERIFY_FULL,
};

struct databases;

/* Servers besides `primary` (the pool fronts 16 in all). */
#define CONFIG_EXTRA_SERVERS_MAX 15u
/* Addresses one `listen` may name; far beyond hosts with a few interfaces. */
#define CONFIG_LISTEN_MAX 8u

struct config_listen {
	char host[CONFIG_LISTEN_HOST_SIZE]; /* "0.0.0.0" for "*"; an IPv6 address without brackets */
	uint16_t port;
};

/* Addresses of [routing] patroni_api: the members of one Patroni cluster. */
#define CONFIG_PATRONI_MAX 8u

struct tern_config {
	/* [tern] */
	char listen_host[CONFIG_LISTEN_HOST_SIZE]; /* the first of listens[], for messages and the pool key */
	uint16_t listen_port;
	struct config_listen listens[CONFIG_LISTEN_MAX]; /* every address of `listen`, in order */
	uint32_t listen_count;
	char *unix_socket_dir, *pidfile, *logfile; /* "" = none (logfile: stderr) */
	char *unix_socket_mode, *unix_socket_group; /* octal permission bits; a group name, "" = tern's own */
	uint32_t workers; /* 0 = one per CPU */
	bool pin_workers;
	int pool_mode; /* enum config_pool_mode */
	int io_backend; /* enum config_io_backend */
	uint32_t ring_entries;
	uint32_t buffer_count; /* a power of two */
	uint64_t buffer_size;
	int log_level; /* enum base_log_level */
	uint64_t shutdown_timeout_ms;
	/* [servers]: `primary` and any other keys, each one server; its role comes from the server. */
	char *primary_conninfo;
	/* [routing] */
	uint32_t monitor_interval_ms;
	char *patroni_api; /* "" = off; else config_parse_addresses' list, at most CONFIG_PATRONI_MAX */
	int default_consistency; /* enum config_consistency */
	int transaction_split;   /* 0 off, 1 on */
	int strict_target;       /* 0 flush, 1 insert: the primary LSN a strict read's probe asks */
	int on_replica_lost;     /* 0 another replica (else the primary), 1 the primary */
	int on_replica_error;    /* 0 the primary re-runs it, 1 the client gets the replica's error */
	uint32_t wait_timeout_ms; /* 0: a read whose replica is not known to be there goes to the primary */
	uint64_t max_replica_lag_bytes; /* eventual; 0 = no bound */
	uint32_t max_replica_lag_ms;
	char *read_functions; /* beyond classify's built-in list; "" = none */
	/* [replay] */
	bool tr_enabled;
	int tr_mode; /* enum config_tr_mode (as replay/decide.h's enum tr_mode) */
	uint32_t write_timeout_secs;
	char *tr_read_functions; /* "" = none */
	struct config_server {
		char name[64];
		char *conninfo; /* without its weight= and profile= */
		uint32_t weight;
		bool is_polar; /* profile=polar: it speaks the XID-import extension (split.h) */
	} extra_servers[CONFIG_EXTRA_SERVERS_MAX];
	uint32_t primary_weight; /* `weight=N` in a server's conninfo (taken out): its share of the reads */
	bool primary_is_polar;   /* `profile=polar` in a server's conninfo (taken out) */
	uint32_t extra_server_count;
	/* [pool] */
	uint32_t pool_size, min_pool_size; /* min_pool_size <= pool_size */
	uint32_t reserve_pool_size, max_db_connections, max_user_connections, max_server_connections;
	uint64_t reserve_pool_timeout_ms;
	uint64_t server_login_retry_ms; /* 0: a failed login fails the waiting request at once */
	uint64_t query_wait_timeout_ms, server_connect_timeout_ms, server_idle_timeout_ms, server_lifetime_ms;
	char *track_extra_parameters;
	uint32_t max_prepared_statements; /* 0 = named statements pass through untouched */
	bool server_side_prepare; /* unnamed extended statements prepared once per connection under tern's name */
	/* [auth] */
	int auth_mode; /* enum config_auth_mode */
	char *auth_file; /* already resolved against the config file's directory; "" when unset */
	char *auth_user, *auth_query, *auth_dbname; /* auth_user "" = no lookups */
	/* [databases] and [users] (databases.h); NULL when both are empty */
	struct databases *databases;
	char *admin_users;
	char *http_listen; /* "" = off */
	char *http_token;  /* "" = none */
	bool query_digests;
	/* [tls] */
	int client_tls_sslmode; /* enum config_tls_mode */
	char *client_tls_cert_file, *client_tls_key_file, *client_tls_ca_file; /* resolved paths; "" unset */
	int client_tls_min_protocol; /* 0: TLSv1.2, 1: TLSv1.3 */
	char *client_tls_ciphers;    /* "" = OpenSSL's default */
	int server_tls_sslmode; /* enum config_server_tls_mode; written into each server's conninfo */
	char *server_tls_ca_file, *server_tls_cert_file, *server_tls_key_file; /* resolved paths; "" unset */
	char *server_tls_protocols, *server_tls_ciphers;
	/* [limits] */
	uint32_t max_client_conn;
	uint32_t max_client_prepared_statements;
	uint64_t client_idle_timeout_ms, idle_transaction_timeout_ms, query_timeout_ms, client_login_timeout_ms;
	uint64_t max_client_frame_bytes, max_backend_frame_bytes;
	uint32_t tr_max_replay_statements;
	uint32_t backend_response_timeout_secs; /* 0: none */
	uint32_t tr_max_session_set_statements;
	uint64_t tr_max_replay_bytes, tr_max_observation_bytes;
	uint32_t replay_deadline_secs;
	/* [journal] */
	uint32_t journal_max_transactions;
	uint64_t journal_max_bytes;
	char *journal_dir; /* resolved; "" = memory only */
	uint64_t journal_segment_bytes, journal_retain_bytes, journal_max_statement_bytes;
	int journal_fsync; /* 0 commit, 1 interval, 2 none: enum journal_fsync_policy's order */
	uint32_t journal_fsync_interval_ms, journal_writer_queue;

	/* [shadow] (shadow.h) */
	uint32_t shadow_sample_ppm; /* sample_rate in millionths (CONFIG_RATIO_ONE is 1) */
	char *shadow_target;
	uint32_t shadow_queue;

	char *path; /* the file it was loaded from, or NULL for pure defaults */
};

/* A [shadow] sample_rate of 1 (every read), in the millionths the config keeps. */
#define CONFIG_RATIO_ONE UINT64_C(1000000)

/* Transaction Replay may recover a session that starts now (both pool modes). */
static inline bool config_tr_is_on(const struct tern_config *cfg)
{
	return cfg->tr_enabled && cfg->tr_mode != CONFIG_TR_NONE;
}

/* Fills `cfg` with every key's default, ignoring (not freeing) what it held before. 0, or -ENOMEM when a
 * default string could not be copied (cfg then holds what was set: pass it to config_deinit). */
TERN_MUST_USE int config_init_defaults(struct tern_config *cfg);

/*
 * Fills `cfg` with the defaults, then the keys set in the file at `path`. Like config_init_defaults it
 * ignores what `cfg` held before, so deinit an earlier config first (or load a reload into a fresh one).
 * Returns 0, or a negative errno with `err` holding one line: "FILE:LINE: [section] key: reason", or
 * "FILE: reason" when the file cannot be read ("out of memory" when that ran out, at a reload say). On
 * error `cfg` holds the pure defaults (path NULL; out of memory: what was set); either way it must be
 * passed to config_deinit.
 */
TERN_MUST_USE int config_load(struct tern_config *cfg, const char *path, char *err, size_t err_size);
/* [tern] unix_socket_mode as permission bits (octal, up to 0777), or -1 when it is not one. */
int config_unix_socket_mode(const struct tern_config *cfg);
/* A boolean as the config file writes one (true, false, on, off, yes, no, 1, 0; any case): 1, 0, or -1. */
int config_bool_of(const char *text);
/* "host:port, host:port" (as `listen` takes it: "*:port", "[ipv6]:port") into out: the count, or -1 when
 * an address is malformed, there are more than max, or none. */
TERN_MUST_USE int config_parse_addresses(const char *text, struct config_listen *out, uint32_t max);

/* Frees the strings; safe on a zeroed struct and when called twice. */
void config_deinit(struct tern_config *cfg);

/* Plain text for `tern --help-config`: per key "[section] key = default  (type, allowed, reload)" + help. */
void config_print_help(FILE *out);

/* A Markdown table | Section | Key | Default | Allowed | Reload | Meaning |; README's reference is this
 * output verbatim. */
void config_print_markdown(FILE *out);
/* The keys as the CONFIGURATION section of tern(1): roff, one .SS per section, one .TP per key. */
void config_print_man(FILE *out);

size_t config_key_count(void);

/*
 * One key for SHOW CONFIG: its section and name, its current value in `cfg` written to `value` as text
 * that config_load accepts back, its default as written in the table, and whether a reload may change
 * it. The pointers returned are static. Returns 0, -ERANGE for an index past config_key_count(), or
 * -ENOSPC when the value did not fit (it is then cut short, still terminated).
 */
TERN_MUST_USE int config_describe_key(const struct tern_config *cfg, size_t index, const char **section,
				      const char **key, char *value, size_t value_size,
				      const char **default_text, bool *reloadable);

/* A server's conninfo (primary_conninfo or an extra server's) as tern's libpq connections to it use it:
 * rebuilt from libpq's parse as key='value' pairs (a URI too) with [tls] server_tls_* added as libpq's
 * keys (sslmode, sslrootcert, sslcert, sslkey, ssl_min/max_protocol_version); one that names any TLS key
 * or a service file keeps its own, unchanged. Malloc'd; NULL when out of memory. */
char *config_server_conninfo(const struct tern_config *cfg, const char *conninfo);

#endif
