/* tern's configuration (config.h): the one table of keys, values parsed and written as text, a file loaded
 * with libinih and checked across keys ([databases] entries go to databases.c), the conninfo for a server
 * with [tls] server_tls_* added, and the reference output (--help-config, the README table, the man page). */
#include "config.h"

#include "databases.h"
#include "stmts.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

/*
 * Debian 12's libinih (55-1) is built with INI_HANDLER_LINENO=1: every handler call in ini_parse_stream
 * loads the line number into the fifth argument register (checked in its disassembly; the line-number
 * tests would fail against a build without it). The handler prototype must match the library, so it is
 * fixed here instead of being left to each build's flags.
 */
#define INI_HANDLER_LINENO 1
#include <ini.h>
#include <libpq-fe.h>

/* A conninfo naming TLS files fits with room to spare; a longer line is surely a mistake. */
#define CONFIG_LINE_MAX 4096
/* What was expected plus the offending value; a longer value is cut in the message only. */
#define CONFIG_REASON_MAX 512
/* Any bound, default or current value of an int, size, duration, bool or enum written as text. */
#define CONFIG_AMOUNT_TEXT_MAX 32

#define CONFIG_KB UINT64_C(1024)
#define CONFIG_MB (1024 * CONFIG_KB)
#define CONFIG_GB (1024 * CONFIG_MB)
#define CONFIG_SECOND_MS UINT64_C(1000)
#define CONFIG_MINUTE_MS (60 * CONFIG_SECOND_MS)

static_assert(BASE_LOG_ERROR == 0 && BASE_LOG_WARNING == 1 && BASE_LOG_INFO == 2 && BASE_LOG_DEBUG == 3,
	      "log_level names below are indexed by enum base_log_level");

enum config_type {
	CONFIG_INT,
	CONFIG_SIZE,
	CONFIG_DURATION,
	CONFIG_RATIO, /* a fraction from 0 to 1, kept in millionths */
	CONFIG_BOOL,
	CONFIG_ENUM,
	CONFIG_STRING,
	CONFIG_LISTEN,
};

/* `what` and `hint` frame the allowed values in an error: "expected {what}{allowed}{hint}, got ...". */
static const struct config_type_info {
	const char *name, *what, *hint;
	size_t field_size;
} config_types[] = {
	[CONFIG_INT] = {"int", "an integer between ", "", sizeof(uint32_t)},
	[CONFIG_SIZE] = {"size", "a size between ", " (bytes, or a whole number with kB, MB or GB)",
			 sizeof(uint64_t)},
	[CONFIG_DURATION] = {"duration", "a duration between ",
			     " (seconds, or a number with ms, s or min; in whole milliseconds)",
			     sizeof(uint64_t)},
	[CONFIG_RATIO] = {"ratio", "a fraction between ", " (such as 0.01; to a millionth)", sizeof(uint32_t)},
	[CONFIG_BOOL] = {"bool", "one of ", "", sizeof(bool)},
	[CONFIG_ENUM] = {"enum", "one of ", "", sizeof(int)},
	[CONFIG_STRING] = {"string", "", "", sizeof(char *)},
	[CONFIG_LISTEN] = {"listen", "", " with a port from 1 to 65535", CONFIG_LISTEN_HOST_SIZE},
};

enum config_flag {
	CONFIG_RESTART = 0,
	CONFIG_RELOAD = 1 << 0, /* a reload may change it; otherwise it takes a restart */
	CONFIG_PATH = 1 << 1, /* a relative string is resolved against the config file's directory */
};

struct config_key {
	const char *section, *key;
	enum config_type type;
	const char *default_text; /* parsed like a value from a file, so a bad default fails at once */
	uint64_t min, max; /* int: the number; size: bytes; duration: milliseconds; ratio: millionths */
	unsigned flags; /* enum config_flag */
	size_t offset, field_size; /* field_size catches an entry pointing at a field of another type */
	const char *const *enum_names; /* NULL-terminated; a name's index is the stored value */
	const char *help;
};

// clang-format off
#define CONFIG_KEY(section, key, type, default_text, min, max, flags, field, enum_names, help) \
	{section, key, type, default_text, min, max, flags, offsetof(struct tern_config, field), \
	 sizeof(((struct tern_config *)0)->field), enum_names, help}
// clang-format on

static const char *const config_pool_mode_names[] = {"session", "transaction", NULL};
static const char *const config_io_backend_names[] = {"auto", "io_uring", "epoll", NULL};
static const char *const config_log_level_names[] = {"error", "warning", "info", "debug", NULL};
static const char *const config_consistency_names[] = {"primary", "eventual", "session", "strict", NULL};
static const char *const config_switch_names[] = {"off", "on", NULL};
static const char *const config_strict_target_names[] = {"flush", "insert", NULL};
static const char *const config_on_lost_names[] = {"replica", "primary", NULL};
static const char *const config_on_error_names[] = {"primary", "client", NULL};
static const char *const config_fsync_names[] = {"commit", "interval", "none", NULL};
static const char *const config_tr_mode_names[] = {"none", "session", "select", "transaction", NULL};
static const char *const config_auth_mode_names[] = {"trust", "md5", "scram", "cert", NULL};
static const char *const config_tls_mode_names[] = {"disable", "allow", "prefer", "require", NULL};
static const char *const config_tls_protocol_names[] = {"TLSv1.2", "TLSv1.3", NULL};
static const char *const config_server_tls_mode_names[] = {"disable", "allow",	   "prefer",
							   "require", "verify-ca", "verify-full", NULL};
/* Other spellings an enum value is read in, as another tool writes it; tern shows its own name. */
static const struct {
	const char *const *names;
	const char *alias;
	const char *name;
} config_enum_aliases[] = {
	{config_auth_mode_names, "scram-sha-256", "scram"}, /* PgBouncer's, so its config carries over as written */
};
/* Even indexes mean true. */
static const char *const config_bool_names[] = {"true", "false", "on", "off", "yes", "no", "1", "0", NULL};

/* Sections without keys yet still load, so a file can be written once for the releases that fill them. */
static const char *const config_sections[] = {"tern",   "servers", "routing", "pool",	"auth",
					      "limits", "journal", "admin",   "tls", "databases", "users", "replay", "shadow"};

static const struct config_key config_keys[] = {
	CONFIG_KEY("tern", "listen", CONFIG_LISTEN, "127.0.0.1:6432", 0, 0, CONFIG_RESTART, listen_host, NULL,
		   "comma-separated address:port pairs clients connect to (\"*:6432\" for all IPv4, \"[::1]:6432\" "
		   "for IPv6), at most 8; another process listening on one stops startup, naming its pid"),
	CONFIG_KEY("tern", "unix_socket_dir", CONFIG_STRING, "", 0, 0, CONFIG_RESTART | CONFIG_PATH, unix_socket_dir,
		   NULL, "folder of a Unix socket for clients, .s.PGSQL.<port of the first listen address>, as "
			 "PostgreSQL names it; empty = none"),
	CONFIG_KEY("tern", "unix_socket_mode", CONFIG_STRING, "0777", 0, 0, CONFIG_RESTART, unix_socket_mode, NULL,
		   "permission bits of the Unix socket, in octal (PgBouncer's unix_socket_mode): 0777 lets any local "
		   "user connect, who then authenticates as over TCP"),
	CONFIG_KEY("tern", "unix_socket_group", CONFIG_STRING, "", 0, 0, CONFIG_RESTART, unix_socket_group, NULL,
		   "group the Unix socket is given (PgBouncer's unix_socket_group), with unix_socket_mode 0770 say; "
		   "empty = the group tern runs as; a group that does not exist stops startup"),
	CONFIG_KEY("tern", "pidfile", CONFIG_STRING, "", 0, 0, CONFIG_RESTART | CONFIG_PATH, pidfile, NULL,
		   "file tern writes its pid to at startup and removes at exit; a live pid in it stops a second "
		   "start; empty = none"),
	CONFIG_KEY("tern", "logfile", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD | CONFIG_PATH, logfile, NULL,
		   "file the log is appended to instead of stderr, reopened on SIGHUP (for logrotate); empty = "
		   "stderr"),
	CONFIG_KEY("tern", "workers", CONFIG_INT, "1", 0, 1024, CONFIG_RESTART, workers, NULL,
		   "worker threads, each with its own io_uring and listener; 0 = one per CPU. One serves a host whose "
		   "cores the database or its clients share (each io_uring pass finds more to do: fewer system calls "
		   "and context switches a transaction); raise it when tern has cores of its own and its worker's "
		   "CPU nears 100% (SHOW WORKERS)"),
	CONFIG_KEY("tern", "pin_workers", CONFIG_BOOL, "false", 0, 0, CONFIG_RESTART, pin_workers, NULL,
		   "pin worker i to CPU i mod CPU count: only for cores that are tern's own (a pinned worker on a "
		   "core shared with the database waits for that core, and costs more CPU per transaction)"),
	CONFIG_KEY("tern", "pool_mode", CONFIG_ENUM, "session", 0, 0, CONFIG_RESTART, pool_mode,
		   config_pool_mode_names,
		   "when a server connection goes back to the pool: at client disconnect (session) or at "
		   "the end of each transaction (transaction)"),
	CONFIG_KEY("tern", "io_backend", CONFIG_ENUM, "auto", 0, 0, CONFIG_RESTART, io_backend, config_io_backend_names,
		   "how workers do socket I/O: auto = io_uring, or epoll where io_uring cannot be set up (a seccomp "
		   "profile such as Docker's default, kernel.io_uring_disabled, an old kernel), with one log line "
		   "saying why; io_uring = io_uring or stop at startup naming what blocks it; epoll = epoll always "
		   "(same behaviour, more system calls per transaction)"),
	CONFIG_KEY("tern", "ring_entries", CONFIG_INT, "1024", 64, 32768, CONFIG_RESTART, ring_entries, NULL,
		   "submission queue depth of each worker's io_uring"),
	CONFIG_KEY("tern", "buffer_count", CONFIG_INT, "512", 16, 16384, CONFIG_RESTART, buffer_count, NULL,
		   "provided receive buffers per worker for each direction (client reads, server reads); "
		   "must be a power of two; each worker's 2 x buffer_count x buffer_size bytes are taken and touched "
		   "at startup (every buffer is in use after a few hundred reads anyway)"),
	CONFIG_KEY("tern", "buffer_size", CONFIG_SIZE, "16kB", 4 * CONFIG_KB, CONFIG_MB, CONFIG_RESTART,
		   buffer_size, NULL, "size of one receive buffer"),
	CONFIG_KEY("tern", "log_level", CONFIG_ENUM, "info", 0, 0, CONFIG_RELOAD, log_level,
		   config_log_level_names, "least severe log level written to stderr"),
	CONFIG_KEY("tern", "shutdown_timeout", CONFIG_DURATION, "30s", 0, 3600 * CONFIG_SECOND_MS, CONFIG_RELOAD,
		   shutdown_timeout_ms, NULL,
		   "on SIGTERM, how long running transactions may take to finish before tern exits anyway"),
	CONFIG_KEY("servers", "primary", CONFIG_STRING, "host=127.0.0.1 port=5432", 0, 0, CONFIG_RESTART,
		   primary_conninfo, NULL,
		   "libpq conninfo of a server (any other key in [servers] names one more, such as replica = "
		   "...); which is the primary the servers say (pg_is_in_recovery), not their names; user, dbname "
		   "and password come from the client and auth_file; weight=N (0..1000, default 1) in it is "
		   "tern's: the server's share of the reads while it is a standby (0: none)"),
	CONFIG_KEY("routing", "monitor_interval_ms", CONFIG_INT, "1000", 50, 3600000, CONFIG_RELOAD, monitor_interval_ms,
		   NULL, "how often the topology monitor asks every server for its role, WAL position and "
			 "timeline"),
	CONFIG_KEY("routing", "patroni_api", CONFIG_STRING, "", 0, 0, CONFIG_RESTART, patroni_api, NULL,
		   "Patroni REST API addresses, host:port[, host:port...]: every monitor round tern asks the first "
		   "that answers for /cluster and writes only to the leader it names (matched to a [servers] key "
		   "by the member's name, or by its host and port), never to another server that says it is a "
		   "primary; Patroni unreachable: its last leader stays; empty = the servers' own answers decide"),
	CONFIG_KEY("routing", "default_consistency", CONFIG_ENUM, "primary", 0, 0, CONFIG_RELOAD, default_consistency,
		   config_consistency_names,
		   "where a client's autocommit reads go unless it sets tern.consistency: primary (no reads on "
		   "replicas), eventual (a replica within the lag bounds), session (a replica that has the client's "
		   "own last write), strict (a replica that has every commit acknowledged before the read arrived); "
		   "transaction pooling only"),
	CONFIG_KEY("routing", "strict_target", CONFIG_ENUM, "flush", 0, 0, CONFIG_RELOAD, strict_target,
		   config_strict_target_names,
		   "what a strict (and split) read waits for a replica to have replayed: flush, the primary's "
		   "flushed WAL, which holds every commit acknowledged with synchronous_commit on (an asynchronous "
		   "commit counts once the WAL writer flushed it); insert, all the WAL the primary inserted, "
		   "asynchronous commits too, which also waits for the WAL of transactions still open to be flushed "
		   "(up to wal_writer_delay when few commits come)"),
	CONFIG_KEY("routing", "on_replica_lost", CONFIG_ENUM, "replica", 0, 0, CONFIG_RELOAD, on_replica_lost,
		   config_on_lost_names,
		   "a routed read whose replica connection is lost (or refused, or ends with a FATAL error) before "
		   "any of its answer reached the client: replica, another replica that may serve it (else the "
		   "primary); primary, the primary at once"),
	CONFIG_KEY("routing", "on_replica_error", CONFIG_ENUM, "primary", 0, 0, CONFIG_RELOAD, on_replica_error,
		   config_on_error_names,
		   "a routed read a replica refuses before its first row with a recovery conflict (40001, 40P01) or "
		   "25006: primary, the primary serves it (the client sees its answer alone); client, the replica's "
		   "error reaches the client"),
	CONFIG_KEY("routing", "transaction_split", CONFIG_ENUM, "off", 0, 0, CONFIG_RELOAD, transaction_split,
		   config_switch_names,
		   "on: the plain SELECTs of a read-committed transaction's read-only prefix run on a replica that "
		   "has every commit acknowledged before each read arrived, while the transaction stays whole on "
		   "the primary (a client sets its own with tern.transaction_split); transaction pooling only"),
	CONFIG_KEY("routing", "wait_timeout_ms", CONFIG_INT, "5000", 0, 3600000, CONFIG_RELOAD, wait_timeout_ms, NULL,
		   "how long a read waits for a replica to replay its target LSN before the primary serves it; 0 = "
		   "never wait (the primary serves it at once)"),
	CONFIG_KEY("routing", "max_replica_lag_bytes", CONFIG_SIZE, "16MB", 0, 1024 * CONFIG_GB, CONFIG_RELOAD,
		   max_replica_lag_bytes, NULL,
		   "eventual: a replica further behind the primary's WAL than this serves no reads; 0 = no bound"),
	CONFIG_KEY("routing", "max_replica_lag_ms", CONFIG_INT, "10000", 0, 86400000, CONFIG_RELOAD,
		   max_replica_lag_ms, NULL,
		   "eventual: a replica that has not replayed what the primary had this long ago (as the monitor "
		   "saw it) serves no reads; 0 = no bound"),
	CONFIG_KEY("routing", "read_functions", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD, read_functions, NULL,
		   "comma-separated functions (schema ignored) a replica read may call beyond the built-in "
		   "side-effect-free list; a read calling any other function goes to the primary"),
	CONFIG_KEY("replay", "tr_enabled", CONFIG_BOOL, "true", 0, 0, CONFIG_RELOAD, tr_enabled, NULL,
		   "Transaction Replay's master switch: false makes tr_mode none whatever it says; tern -c FILE --tr=false "
		   "(or --tr false) sets it over the file, reloads included"),
	CONFIG_KEY("replay", "tr_mode", CONFIG_ENUM, "session", 0, 0, CONFIG_RELOAD, tr_mode, config_tr_mode_names,
		   "what a client sees when its primary connection is lost: none, the session ends (57P01); "
		   "session, it moves to the primary of the moment with its SET state and prepared statements, a "
		   "statement that never reached the server runs there, one whose outcome is unknown gets one "
		   "error (08007, or 57P01 inside a transaction, which is then aborted: 25P02 until ROLLBACK); "
		   "select, also a side-effect-free read in flight runs again and a read-only transaction is replayed; "
		   "transaction, any read-committed transaction is replayed from its BEGIN on the new primary, each "
		   "answer checked against what the client was shown (a difference: ROLLBACK, 40001); transaction "
		   "pooling only"),
	CONFIG_KEY("replay", "write_timeout_secs", CONFIG_INT, "30", 1, 3600, CONFIG_RELOAD, write_timeout_secs, NULL,
		   "the one deadline of a recovery: from when a session whose primary connection was lost first "
		   "needs a primary until one answers it, the wait for a primary (the monitor's), the connect and "
		   "login, the restore, the replay and the re-execution together; past it the session ends with "
		   "08006"),
	CONFIG_KEY("replay", "tr_read_functions", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD, tr_read_functions, NULL,
		   "tr_mode = select: comma-separated functions (unquoted names, any case, schema ignored) a read in "
		   "flight may call and still run again, beyond the built-in side-effect-free list"),
	CONFIG_KEY("pool", "pool_size", CONFIG_INT, "20", 1, 10000, CONFIG_RELOAD, pool_size, NULL,
		   "server connections per user/database pair on each server (PgBouncer's default_pool_size); "
		   "lowered by a reload, connections above it close as they are released"),
	CONFIG_KEY("pool", "reserve_pool_size", CONFIG_INT, "0", 0, 10000, CONFIG_RELOAD, reserve_pool_size, NULL,
		   "more connections a pair may open once a request of it has waited reserve_pool_timeout"),
	CONFIG_KEY("pool", "reserve_pool_timeout", CONFIG_DURATION, "5s", 0, 3600 * CONFIG_SECOND_MS, CONFIG_RELOAD,
		   reserve_pool_timeout_ms, NULL, "how long a request waits before its pair may use the reserve"),
	CONFIG_KEY("pool", "max_db_connections", CONFIG_INT, "0", 0, 100000, CONFIG_RELOAD, max_db_connections, NULL,
		   "server connections per database name on each server, across users; 0 = no limit (an idle "
		   "connection of another user is closed to make room)"),
	CONFIG_KEY("pool", "max_user_connections", CONFIG_INT, "0", 0, 100000, CONFIG_RELOAD, max_user_connections,
		   NULL, "server connections per user name on each server, across databases; 0 = no limit"),
	CONFIG_KEY("pool", "max_server_connections", CONFIG_INT, "0", 0, 100000, CONFIG_RELOAD,
		   max_server_connections, NULL, "server connections to one server in all; 0 = no limit"),
	CONFIG_KEY("pool", "min_pool_size", CONFIG_INT, "0", 0, 10000, CONFIG_RELOAD, min_pool_size, NULL,
		   "server connections kept open per user/database once it has been used"),
	CONFIG_KEY(
		"pool", "query_wait_timeout", CONFIG_DURATION, "120s", 0, 86400 * CONFIG_SECOND_MS,
		CONFIG_RELOAD, query_wait_timeout_ms, NULL,
		"how long a request may wait for a server connection before it gets an error; 0 = forever"),
	CONFIG_KEY("pool", "server_connect_timeout", CONFIG_DURATION, "15s", 100, 3600 * CONFIG_SECOND_MS,
		   CONFIG_RELOAD, server_connect_timeout_ms, NULL,
		   "how long opening one server connection may take"),
	CONFIG_KEY("pool", "server_login_retry", CONFIG_DURATION, "15s", 0, 3600 * CONFIG_SECOND_MS, CONFIG_RELOAD,
		   server_login_retry_ms, NULL,
		   "after a login the server did not answer (down, starting, full), requests wait (up to "
		   "query_wait_timeout) and the login is tried again this much later; 0 = fail at once"),
	CONFIG_KEY("pool", "server_idle_timeout", CONFIG_DURATION, "600s", 0, 86400 * CONFIG_SECOND_MS,
		   CONFIG_RELOAD, server_idle_timeout_ms, NULL,
		   "a server connection unused this long is closed; 0 = never"),
	CONFIG_KEY("pool", "server_lifetime", CONFIG_DURATION, "3600s", 0, 86400 * CONFIG_SECOND_MS, CONFIG_RELOAD,
		   server_lifetime_ms, NULL,
		   "a server connection open this long is closed when it is next free; 0 = never"),
	CONFIG_KEY("pool", "track_extra_parameters", CONFIG_STRING, "", 0, 0, CONFIG_RESTART,
		   track_extra_parameters, NULL,
		   "comma-separated parameters kept per client in transaction pooling besides application_name, "
		   "client_encoding, DateStyle, IntervalStyle, TimeZone and standard_conforming_strings; only "
		   "parameters the server reports (ParameterStatus) can be tracked"),
	CONFIG_KEY("pool", "max_prepared_statements", CONFIG_INT, "200", 0, 100000, CONFIG_RELOAD,
		   max_prepared_statements, NULL,
		   "transaction pooling, and session pooling under Transaction Replay (a move prepares them again): "
		   "named prepared statements one server connection keeps for tern's clients (least recently used "
		   "closed first); 0 passes named statements through, so a client finds them only on the connection "
		   "it prepared them on (in session pooling a session that prepared one then cannot move: 08006)"),
	CONFIG_KEY("pool", "server_side_prepare", CONFIG_BOOL, "true", 0, 0, CONFIG_RELOAD, server_side_prepare, NULL,
		   "with max_prepared_statements tracking statements: an unnamed extended-protocol statement (what "
		   "drivers send for a query with parameters) whose text a session sends again is prepared once per "
		   "server connection under tern's name for its text and parameter types, and then run by that name, "
		   "so the server parses and plans it once, not every time. As with any prepared statement, the "
		   "server may choose a generic plan after five runs (plan_cache_mode decides). One whose result "
		   "columns change under it (an ALTER TABLE of the table a SELECT * reads) gets 0A000 from the "
		   "server: in autocommit, with Transaction Replay on, tern runs the request again, prepared anew, "
		   "and the client sees no error; inside a transaction (or with tr_mode = none) the client gets the "
		   "0A000 once on each server connection that held it, as with a prepared statement of its own"),
	CONFIG_KEY("auth", "mode", CONFIG_ENUM, "trust", 0, 0, CONFIG_RELOAD, auth_mode,
		   config_auth_mode_names,
		   "how clients authenticate to tern; scram-sha-256 is taken for scram, as PgBouncer writes it; cert: "
		   "over TLS with a client certificate client_tls_ca_file vouches for, whose common name (CN) is the "
		   "user name (PgBouncer's auth_type = cert)"),
	CONFIG_KEY(
		"auth", "auth_file", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD | CONFIG_PATH, auth_file, NULL,
		"PgBouncer userlist.txt file with plaintext passwords, md5 hashes or SCRAM secrets; relative "
		"paths are relative to the config file"),
	CONFIG_KEY("auth", "auth_user", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD, auth_user, NULL,
		   "user tern runs auth_query as to find the password of a client not in auth_file (its own "
		   "password from auth_file when plaintext there, else from the primary's conninfo or a server "
		   "that trusts it); empty = no lookups"),
	CONFIG_KEY("auth", "auth_query", CONFIG_STRING,
		   "SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword END FROM "
		   "pg_catalog.pg_authid WHERE rolname = $1 AND rolcanlogin",
		   0, 0, CONFIG_RELOAD, auth_query, NULL,
		   "query that returns (name, password) of the user given as $1; run with the name as a "
		   "parameter, never spliced into the text"),
	CONFIG_KEY("auth", "auth_dbname", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD, auth_dbname, NULL,
		   "database auth_query runs in; empty = the database the client asked for"),
	CONFIG_KEY("admin", "admin_users", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD, admin_users, NULL,
		   "comma-separated users who may connect to the admin console, the virtual database \"tern\" "
		   "(they authenticate like any client)"),
	CONFIG_KEY("admin", "http_listen", CONFIG_STRING, "", 0, 0, CONFIG_RESTART, http_listen, NULL,
		   "address of the admin HTTP endpoint (/metrics in Prometheus text, /api/status in JSON), "
		   "host:port or a port alone (on 127.0.0.1); empty = off"),
	CONFIG_KEY("admin", "query_digests", CONFIG_BOOL, "true", 0, 0, CONFIG_RESTART, query_digests, NULL,
		   "keep calls, time and rows per query fingerprint (SHOW DIGESTS, /api/digests); a query whose "
		   "shape tern cannot be sure of without parsing (comments, dollar quotes) is parsed for it"),
	CONFIG_KEY("admin", "http_token", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD, http_token, NULL,
		   "bearer token POST /api/replay and POST /api/shadow must carry (Authorization: Bearer ...); "
		   "required when http_listen is not a loopback address (without it both refuse every request there)"),
	CONFIG_KEY("shadow", "sample_rate", CONFIG_RATIO, "0", 0, CONFIG_RATIO_ONE, CONFIG_RELOAD, shadow_sample_ppm, NULL,
		   "the share of autocommit reads (one SELECT, VALUES or SHOW in the simple protocol) a session run "
		   "again on [shadow] target, off the hot path, and compared with what its client got (row count and "
		   "an order-independent hash of the rows), counted per query fingerprint in /metrics and SHOW SHADOW; "
		   "0 = none (sessions that start while it is 0 never sample)"),
	CONFIG_KEY("shadow", "target", CONFIG_STRING, "", 0, 0, CONFIG_RESTART, shadow_target, NULL,
		   "the shadow server sampled reads run again on: a [servers] key (with each session's database and "
		   "user) or a libpq connection string; empty = no sampling"),
	CONFIG_KEY("shadow", "queue", CONFIG_INT, "1024", 1, 1048576, CONFIG_RESTART, shadow_queue, NULL,
		   "sampled reads waiting for the shadow thread; past it one is dropped and counted "
		   "(tern_shadow_dropped_total)"),
	CONFIG_KEY("journal", "max_committed_transactions", CONFIG_INT, "50000", 1, 10000000, CONFIG_RESTART,
		   journal_max_transactions, NULL,
		   "committed transactions kept in memory (the newest; reloaded from dir at startup)"),
	CONFIG_KEY("journal", "max_committed_bytes", CONFIG_SIZE, "256MB", CONFIG_KB, 64 * CONFIG_GB, CONFIG_RESTART,
		   journal_max_bytes, NULL, "encoded bytes of the committed transactions kept in memory"),
	CONFIG_KEY("journal", "dir", CONFIG_STRING, "", 0, 0, CONFIG_RESTART | CONFIG_PATH, journal_dir, NULL,
		   "folder of the journal's segments (journal-<commit_seq>.log, CRC-checked records): every "
		   "committed transaction is also appended there by a writer thread; an unwritable folder stops "
		   "startup; empty = memory only"),
	CONFIG_KEY("journal", "segment_bytes", CONFIG_SIZE, "64MB", 4 * CONFIG_KB, CONFIG_GB, CONFIG_RESTART,
		   journal_segment_bytes, NULL, "a segment is closed and a new one begun past this size"),
	CONFIG_KEY("journal", "retain_bytes", CONFIG_SIZE, "1GB", 4 * CONFIG_KB, 1024 * CONFIG_GB, CONFIG_RESTART,
		   journal_retain_bytes, NULL, "the oldest whole segments are deleted while the folder holds more"),
	CONFIG_KEY("journal", "fsync", CONFIG_ENUM, "interval", 0, 0, CONFIG_RESTART, journal_fsync,
		   config_fsync_names,
		   "commit: fdatasync after each batch the writer appends (group commit); interval: at most every "
		   "fsync_interval_ms; none: the page cache decides (the data path never waits on disk under any)"),
	CONFIG_KEY("journal", "fsync_interval_ms", CONFIG_INT, "100", 1, 3600000, CONFIG_RESTART, journal_fsync_interval_ms,
		   NULL, "fsync = interval: the longest a written record waits for its fdatasync"),
	CONFIG_KEY("journal", "writer_queue", CONFIG_INT, "4096", 1, 1048576, CONFIG_RESTART, journal_writer_queue, NULL,
		   "records waiting for the writer thread; a record past it is dropped and counted "
		   "(journal_dropped_total, and the coverage of /api/replay)"),
	CONFIG_KEY("journal", "max_statement_bytes", CONFIG_SIZE, "1MB", CONFIG_KB, CONFIG_GB, CONFIG_RESTART,
		   journal_max_statement_bytes, NULL,
		   "a statement (its text and bound values) longer than this, or a transaction longer than 16 times "
		   "this, is not kept whole: the transaction is kept marked incomplete, which committed-history "
		   "replay refuses"),
	CONFIG_KEY("tls", "client_tls_sslmode", CONFIG_ENUM, "disable", 0, 0, CONFIG_RELOAD, client_tls_sslmode,
		   config_tls_mode_names,
		   "TLS toward clients: disable answers SSLRequest with N and refuses a direct TLS handshake; "
		   "allow and prefer use TLS when the client asks for it; require also refuses clients that "
		   "do not (28000)"),
	CONFIG_KEY("tls", "client_tls_cert_file", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD | CONFIG_PATH,
		   client_tls_cert_file, NULL,
		   "PEM file with tern's certificate, then any intermediate certificates; needed unless "
		   "client_tls_sslmode = disable"),
	CONFIG_KEY("tls", "client_tls_key_file", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD | CONFIG_PATH,
		   client_tls_key_file, NULL, "PEM file with the certificate's private key, unencrypted"),
	CONFIG_KEY("tls", "client_tls_ca_file", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD | CONFIG_PATH,
		   client_tls_ca_file, NULL,
		   "PEM file of CAs: clients are asked for a certificate, and one that is sent must verify "
		   "against these (a client that sends none is still accepted); empty = none asked for"),
	CONFIG_KEY("tls", "client_tls_min_protocol", CONFIG_ENUM, "TLSv1.2", 0, 0, CONFIG_RELOAD,
		   client_tls_min_protocol, config_tls_protocol_names, "oldest TLS version accepted"),
	CONFIG_KEY("tls", "client_tls_ciphers", CONFIG_STRING, "", 0, 0, CONFIG_RELOAD, client_tls_ciphers, NULL,
		   "OpenSSL cipher list for TLS 1.2; empty = OpenSSL's default (TLS 1.3 suites are always "
		   "OpenSSL's defaults)"),
	CONFIG_KEY("tls", "server_tls_sslmode", CONFIG_ENUM, "prefer", 0, 0, CONFIG_RESTART, server_tls_sslmode,
		   config_server_tls_mode_names,
		   "TLS toward the servers, as libpq's sslmode (pool, monitor, auth_query, Transaction Replay, operator "
		   "replay): disable, allow, prefer (TLS when the server offers it), require, verify-ca (the "
		   "certificate must come from server_tls_ca_file), verify-full (and name the conninfo's host); a "
		   "server's conninfo that sets sslmode, sslrootcert, sslcert or sslkey itself keeps its own"),
	CONFIG_KEY("tls", "server_tls_ca_file", CONFIG_STRING, "", 0, 0, CONFIG_RESTART | CONFIG_PATH,
		   server_tls_ca_file, NULL,
		   "PEM file of the CAs a server's certificate is checked against (libpq's sslrootcert); needed by "
		   "verify-ca and verify-full"),
	CONFIG_KEY("tls", "server_tls_cert_file", CONFIG_STRING, "", 0, 0, CONFIG_RESTART | CONFIG_PATH,
		   server_tls_cert_file, NULL,
		   "PEM file of the client certificate tern shows the servers (libpq's sslcert); empty = none"),
	CONFIG_KEY("tls", "server_tls_key_file", CONFIG_STRING, "", 0, 0, CONFIG_RESTART | CONFIG_PATH,
		   server_tls_key_file, NULL, "PEM file of that certificate's private key (libpq's sslkey)"),
	CONFIG_KEY("tls", "server_tls_protocols", CONFIG_STRING, "secure", 0, 0, CONFIG_RESTART, server_tls_protocols,
		   NULL,
		   "TLS versions allowed toward the servers, as PgBouncer: tlsv1.0, tlsv1.1, tlsv1.2, tlsv1.3 (a "
		   "range, separated by commas or spaces), all or legacy (all four), secure or default (tlsv1.2, "
		   "tlsv1.3)"),
	CONFIG_KEY("tls", "server_tls_ciphers", CONFIG_STRING, "default", 0, 0, CONFIG_RESTART, server_tls_ciphers,
		   NULL,
		   "OpenSSL cipher list allowed toward the servers for TLS 1.2 and older (TLS 1.3 suites are "
		   "OpenSSL's defaults); default or secure = whatever libpq and the server agree on. libpq offers "
		   "its own list, so a pool connection whose server picks a cipher outside this one is refused (08004)"),
	CONFIG_KEY("limits", "max_client_conn", CONFIG_INT, "100", 1, 1000000, CONFIG_RELOAD, max_client_conn,
		   NULL, "most client connections tern accepts at once (more get SQLSTATE 53300)"),
	CONFIG_KEY("limits", "client_login_timeout", CONFIG_DURATION, "60s", 0, 86400 * CONFIG_SECOND_MS,
		   CONFIG_RELOAD, client_login_timeout_ms, NULL,
		   "a client that has not finished logging in this long is closed (08P01); 0 = never"),
	CONFIG_KEY("limits", "client_idle_timeout", CONFIG_DURATION, "0", 0, 86400 * CONFIG_SECOND_MS,
		   CONFIG_RELOAD, client_idle_timeout_ms, NULL,
		   "a client with no transaction open that sends nothing this long is closed (57P05); 0 = never"),
	CONFIG_KEY("limits", "idle_transaction_timeout", CONFIG_DURATION, "0", 0, 86400 * CONFIG_SECOND_MS,
		   CONFIG_RELOAD, idle_transaction_timeout_ms, NULL,
		   "a client that leaves a transaction open and idle this long is closed (25P03) and its server "
		   "connection dropped; 0 = never"),
	CONFIG_KEY("limits", "query_timeout", CONFIG_DURATION, "0", 0, 86400 * CONFIG_SECOND_MS, CONFIG_RELOAD,
		   query_timeout_ms, NULL,
		   "a query that runs this long ends its client (57014) and its server connection, for servers "
		   "that stop answering; keep it above the server's statement_timeout; 0 = never"),
	CONFIG_KEY("limits", "max_client_prepared_statements", CONFIG_INT, "10000", 1, STMT_MAP_NAMES_MAX,
		   CONFIG_RELOAD, max_client_prepared_statements, NULL,
		   "transaction pooling: named prepared statements one client may hold at once; a Parse past it ends "
		   "that client with 54000 (each costs tern about 200 bytes plus the statement's text)"),
	CONFIG_KEY("limits", "max_client_frame_bytes", CONFIG_SIZE, "1GB", CONFIG_KB, CONFIG_GB,
		   CONFIG_RESTART, max_client_frame_bytes, NULL,
		   "largest protocol message a client may send (larger closes that connection with 08P01)"),
	CONFIG_KEY("limits", "tr_max_replay_statements", CONFIG_INT, "1000", 1, 1000000, CONFIG_RELOAD,
		   tr_max_replay_statements, NULL,
		   "Transaction Replay: statements kept per transaction; a transaction with more is not replayed"),
	CONFIG_KEY("limits", "tr_max_replay_bytes", CONFIG_SIZE, "4MB", CONFIG_KB, CONFIG_GB, CONFIG_RELOAD,
		   tr_max_replay_bytes, NULL,
		   "Transaction Replay: bytes of statements kept per transaction; a transaction with more is not "
		   "replayed"),
	CONFIG_KEY("limits", "tr_max_observation_bytes", CONFIG_SIZE, "1MB", CONFIG_KB, CONFIG_GB, CONFIG_RELOAD,
		   tr_max_observation_bytes, NULL,
		   "Transaction Replay: bytes of one statement's answer digested; a transaction with a longer answer "
		   "is not replayed (there is nothing to check its replay against)"),
	CONFIG_KEY("limits", "tr_max_session_set_statements", CONFIG_INT, "256", 1, 100000, CONFIG_RELOAD,
		   tr_max_session_set_statements, NULL,
		   "Transaction Replay: distinct session variables a session may have set and move with (its "
		   "simple-protocol SETs, and the tracked parameters and search_path it changed otherwise); past it "
		   "a lost primary connection ends the session with 08006 rather than move it with part of its state"),
	CONFIG_KEY("limits", "replay_deadline_secs", CONFIG_INT, "300", 1, 86400, CONFIG_RELOAD, replay_deadline_secs,
		   NULL, "the longest one POST /api/replay runs (past it the replay stops where it is: partial), and "
		   "the statement_timeout of each side of POST /api/shadow"),
	CONFIG_KEY("limits", "backend_response_timeout_secs", CONFIG_INT, "0", 0, 86400, CONFIG_RELOAD,
		   backend_response_timeout_secs, NULL,
		   "a primary connection whose answer to a request has not ended this many seconds after the request "
		   "went out (a server dripping bytes, or stuck) is closed and decided as a lost connection "
		   "(Transaction Replay: 08007 for the statement, the session goes on); 0 = never"),
	CONFIG_KEY("limits", "max_backend_frame_bytes", CONFIG_SIZE, "100MB", CONFIG_KB, CONFIG_GB,
		   CONFIG_RESTART, max_backend_frame_bytes, NULL,
		   "largest protocol message a server may send (larger closes that server connection)"),
};

#define CONFIG_KEY_COUNT TERN_ARRAY_LEN(config_keys)

/* One load in progress: inih hands this to both the line reader and the value handler. */
struct config_parse {
	struct tern_config *cfg;
	const char *path;
	FILE *file;
	char *line; /* getline's buffer: the line inih is working on, kept for syntax error messages */
	size_t line_capacity;
	int line_number;
	int key_lines[CONFIG_KEY_COUNT]; /* where each key was set; 0 = left at its default */
	int rc; /* the first error; later ones would only be echoes of it */
	char *err;
	size_t err_size;
};

static void *config_field(struct tern_config *cfg, const struct config_key *key)
{
	return (char *)cfg + key->offset;
}

static const struct config_key *config_find_key(const char *section, const char *name)
{
	for (size_t i = 0; i < CONFIG_KEY_COUNT; i++)
		if ((section == NULL || strcmp(config_keys[i].section, section) == 0) &&
		    strcmp(config_keys[i].key, name) == 0)
			return &config_keys[i];
	return NULL;
}

static bool config_is_known_section(const char *name, size_t len)
{
	for (size_t i = 0; i < TERN_ARRAY_LEN(config_sections); i++)
		if (strlen(config_sections[i]) == len && memcmp(config_sections[i], name, len) == 0)
			return true;
	return false;
}

/* ---- values as text ---- */

/* Digits only: strtoull would also take a sign, spaces and hex, none of which belong in a config value.
 * Returns where the digits end, or NULL when there are none or they overflow. */
static const char *config_scan_digits(const char *text, uint64_t *value)
{
	uint64_t v = 0;
	const char *p = text;
	for (; *p >= '0' && *p <= '9'; p++) {
		uint64_t digit = (uint64_t)(*p - '0');
		if (v > (UINT64_MAX - digit) / 10)
			return NULL;
		v = v * 10 + digit;
	}
	if (p == text)
		return NULL;
	*value = v;
	return p;
}

static const char *config_skip_blanks(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

struct config_unit {
	const char *name;
	uint64_t multiplier;
};

/* Largest first, so a size is printed in the biggest unit that divides it exactly. */
static const struct config_unit config_size_units[] = {
	{"GB", CONFIG_GB}, {"MB", CONFIG_MB}, {"kB", CONFIG_KB}, {0}};
static const struct config_unit config_duration_units[] = {
	{"min", CONFIG_MINUTE_MS}, {"s", CONFIG_SECOND_MS}, {"ms", 1}, {0}};
static const struct config_unit config_no_units[] = {{0}}; /* ints */

/*
 * Ints are whole numbers; sizes take kB, MB or GB (1024-based, any case, as PostgreSQL reads them);
 * durations are seconds ("120", "0.5") or say their unit ("250ms", "1.5s", "2min"). A part finer than a
 * millisecond is refused rather than rounded, so what is written is exactly what runs.
 */
static bool config_parse_amount(enum config_type type, const char *text, uint64_t *amount)
{
	const struct config_unit *unit = type == CONFIG_SIZE	   ? config_size_units
					 : type == CONFIG_DURATION ? config_duration_units
								   : config_no_units;
	uint64_t whole, fraction = 0, scale = 1;
	uint64_t multiplier = type == CONFIG_DURATION ? CONFIG_SECOND_MS : type == CONFIG_RATIO ? CONFIG_RATIO_ONE : 1;
	const char *p = config_scan_digits(text, &whole);
	if (p == NULL)
		return false;
	if (*p == '.' && (type == CONFIG_DURATION || type == CONFIG_RATIO)) {
		const char *digits = ++p;
		for (; *p >= '0' && *p <= '9'; p++) {
			if (scale >= 1000000000) /* finer than a millisecond in any unit */
				return false;
			fraction = fraction * 10 + (uint64_t)(*p - '0');
			scale *= 10;
		}
		if (p == digits)
			return false;
	}
	p = config_skip_blanks(p);
	for (; *p != '\0' && unit->name != NULL; unit++) {
		if (strcasecmp(unit->name, p) == 0) {
			multiplier = unit->multiplier;
			break;
		}
	}
	if ((*p != '\0' && unit->name == NULL) || (fraction * multiplier) % scale != 0 ||
	    whole > UINT64_MAX / multiplier ||
	    whole * multiplier > UINT64_MAX - fraction * multiplier / scale)
		return false;
	*amount = whole * multiplier + fraction * multiplier / scale;
	return true;
}

/* Returns the index of `text` among `names` (NULL-terminated), any case, or -1. */
static int config_find_name(const char *const *names, const char *text)
{
	for (int i = 0; names[i] != NULL; i++)
		if (strcasecmp(names[i], text) == 0)
			return i;
	return -1;
}

/* A DNS name or an IPv4 literal; anything made of digits and dots must be a valid address, so a typo
 * such as 127.0.0.1.1 stops startup instead of failing a lookup later. */
static bool config_is_host(const char *host)
{
	static const char name_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_";
	struct in_addr address;
	if (host[0] == '\0' || host[strspn(host, name_chars)] != '\0')
		return false;
	return host[strspn(host, "0123456789.")] != '\0' || inet_pton(AF_INET, host, &address) == 1;
}

/* "host:port", "*:port" (every IPv4 address) or "[ipv6]:port"; a bare IPv6 address is ambiguous. */
static bool config_parse_listen(const char *text, char *host, uint16_t *port)
{
	char candidate[CONFIG_LISTEN_HOST_SIZE];
	const char *host_start = text, *host_end;
	if (text[0] == '[') {
		host_start = text + 1;
		host_end = strchr(host_start, ']');
		if (host_end == NULL || host_end[1] != ':')
			return false;
	} else {
		host_end = strrchr(text, ':');
		if (host_end == NULL)
			return false;
	}
	size_t host_len = (size_t)(host_end - host_start);
	if (host_len == 0 || host_len >= sizeof(candidate))
		return false;
	memcpy(candidate, host_start, host_len);
	candidate[host_len] = '\0';
	if (text[0] == '[') {
		struct in6_addr address;
		if (inet_pton(AF_INET6, candidate, &address) != 1)
			return false;
		host_end++;
	} else if (strcmp(candidate, "*") == 0) {
		base_strlcpy(candidate, "0.0.0.0", sizeof(candidate));
	} else if (!config_is_host(candidate)) {
		return false;
	}
	uint64_t number;
	const char *end = config_scan_digits(host_end + 1, &number);
	if (end == NULL || *end != '\0' || number < 1 || number > UINT16_MAX)
		return false;
	memcpy(host, candidate, sizeof(candidate));
	*port = (uint16_t)number;
	return true;
}

int config_parse_addresses(const char *text, struct config_listen *out, uint32_t max)
{
	uint32_t count = 0;
	bool is_valid = true;
	for (const char *item = text; is_valid && *item;) {
		while (*item == ' ' || *item == '\t')
			item++;
		size_t len = strcspn(item, ",");
		while (len > 0 && (item[len - 1] == ' ' || item[len - 1] == '\t'))
			len--;
		char one[CONFIG_LISTEN_HOST_SIZE + 16];
		is_valid = count < max && len > 0 && len < sizeof(one);
		if (is_valid) {
			memcpy(one, item, len);
			one[len] = '\0';
			is_valid = config_parse_listen(one, out[count].host, &out[count].port);
			count++;
		}
		item += strcspn(item, ",");
		if (*item == ',' && *++item == '\0')
			is_valid = false; /* a comma promises another address */
	}
	return is_valid && count > 0 ? (int)count : -1;
}

/* Sizes in the largest unit that divides them exactly; durations in seconds when whole, else in ms.
 * Returns snprintf's length. */
static int config_format_amount(enum config_type type, uint64_t amount, char *out, size_t out_size)
{
	if (type == CONFIG_SIZE) {
		for (const struct config_unit *unit = config_size_units; unit->name != NULL && amount != 0;
		     unit++) {
			if (amount % unit->multiplier == 0) {
				return snprintf(out, out_size, "%" PRIu64 "%s", amount / unit->multiplier,
						unit->name);
			}
		}
	} else if (type == CONFIG_RATIO) {
		int n = snprintf(out, out_size, "%" PRIu64 ".%06" PRIu64, amount / CONFIG_RATIO_ONE, amount % CONFIG_RATIO_ONE);
		while (n > 3 && (size_t)n < out_size && out[n - 1] == '0' && out[n - 2] != '.')
			out[--n] = '\0'; /* 0.01, not 0.010000 */
		return n;
	} else if (type == CONFIG_DURATION && amount != 0) {
		if (amount % CONFIG_SECOND_MS == 0)
			return snprintf(out, out_size, "%" PRIu64 "s", amount / CONFIG_SECOND_MS);
		return snprintf(out, out_size, "%" PRIu64 "ms", amount);
	}
	return snprintf(out, out_size, "%" PRIu64, amount);
}

/* What a key accepts, as shown in --help-config, the README and error messages. */
static void config_format_allowed(const struct config_key *key, const char *separator,
				  const char *range_joiner, char *out, size_t out_size)
{
	char min[CONFIG_AMOUNT_TEXT_MAX], max[CONFIG_AMOUNT_TEXT_MAX];
	const char *const *names = key->type == CONFIG_BOOL ? config_bool_names : key->enum_names;
	size_t used = 0;
	out[0] = '\0';
	switch (key->type) {
	case CONFIG_INT:
	case CONFIG_SIZE:
	case CONFIG_DURATION:
	case CONFIG_RATIO:
		config_format_amount(key->type, key->min, min, sizeof(min));
		config_format_amount(key->type, key->max, max, sizeof(max));
		snprintf(out, out_size, "%s%s%s", min, range_joiner, max);
		return;
	case CONFIG_BOOL:
	case CONFIG_ENUM:
		for (size_t i = 0; names[i] != NULL && used < out_size; i++) {
			int n = snprintf(out + used, out_size - used, "%s%s", i == 0 ? "" : separator,
					 names[i]);
			used += n > 0 ? (size_t)n : 0;
		}
		return;
	case CONFIG_STRING:
		snprintf(out, out_size, "%s", (key->flags & CONFIG_PATH) != 0 ? "file path" : "text");
		return;
	case CONFIG_LISTEN:
		snprintf(out, out_size, "host:port%s*:port%s[ipv6]:port", separator, separator);
		return;
	}
}

/* Joins a relative path to the config file's directory, so the file is read from beside the config, not
 * from wherever tern was started; the result is as relative as the config path. malloc'd; NULL = no memory.
 */
static char *config_resolve_path(const char *config_path, const char *value)
{
	const char *slash = config_path != NULL ? strrchr(config_path, '/') : NULL;
	if (slash == NULL || value[0] == '\0' || value[0] == '/')
		return strdup(value);
	size_t dir_len = (size_t)(slash - config_path) + 1, value_len = strlen(value);
	char *joined = malloc(dir_len + value_len + 1);
	if (joined != NULL) {
		memcpy(joined, config_path, dir_len);
		memcpy(joined + dir_len, value, value_len + 1);
	}
	return joined;
}

/*
 * Parses `text` into the key's field. The one path both defaults and files take, so a default is held
 * to the same bounds as a value a user writes. On a bad value returns -EINVAL with `reason` saying what
 * was expected; -ENOMEM when a string cannot be copied.
 */
static int config_set(struct tern_config *cfg, const struct config_key *key, const char *text,
		      const char *config_path, char *reason, size_t reason_size)
{
	void *field = config_field(cfg, key);
	uint64_t number;
	int index;
	switch (key->type) {
	case CONFIG_INT:
	case CONFIG_SIZE:
	case CONFIG_DURATION:
	case CONFIG_RATIO:
		if (!config_parse_amount(key->type, text, &number) || number < key->min || number > key->max)
			break;
		if (key->type == CONFIG_INT || key->type == CONFIG_RATIO)
			*(uint32_t *)field = (uint32_t)number;
		else
			*(uint64_t *)field = number;
		return 0;
	case CONFIG_BOOL:
		if ((index = config_find_name(config_bool_names, text)) < 0)
			break;
		*(bool *)field = index % 2 == 0;
		return 0;
	case CONFIG_ENUM:
		for (size_t i = 0; i < TERN_ARRAY_LEN(config_enum_aliases); i++)
			if (key->enum_names == config_enum_aliases[i].names && strcasecmp(text, config_enum_aliases[i].alias) == 0)
				text = config_enum_aliases[i].name;
		if ((index = config_find_name(key->enum_names, text)) < 0)
			break;
		*(int *)field = index;
		return 0;
	case CONFIG_STRING: {
		/* inih keeps quotes; taking one enclosing pair off lets `auth_file = ""` mean empty. */
		size_t len = strlen(text);
		char *unquoted = NULL, *value;
		if (len >= 2 && text[0] == '"' && text[len - 1] == '"') {
			if ((unquoted = strndup(text + 1, len - 2)) == NULL)
				return -ENOMEM;
			text = unquoted;
		}
		value = (key->flags & CONFIG_PATH) != 0 ? config_resolve_path(config_path, text)
							: strdup(text);
		free(unquoted);
		if (value == NULL)
			return -ENOMEM;
		free(*(char **)field);
		*(char **)field = value;
		return 0;
	}
	case CONFIG_LISTEN: {
		TERN_ASSERT(key->offset == offsetof(struct tern_config, listen_host));
		/* "a:1, b:2": each address is checked; the first is also listen_host/listen_port. */
		struct config_listen listens[CONFIG_LISTEN_MAX];
		int count = config_parse_addresses(text, listens, CONFIG_LISTEN_MAX);
		if (count <= 0)
			break;
		memcpy(cfg->listens, listens, sizeof(listens));
		cfg->listen_count = (uint32_t)count;
		memcpy(cfg->listen_host, listens[0].host, sizeof(cfg->listen_host));
		cfg->listen_port = listens[0].port;
		return 0;
	}
	}
	char allowed[CONFIG_REASON_MAX / 4];
	config_format_allowed(key, "|", " and ", allowed, sizeof(allowed));
	const struct config_type_info *type = &config_types[key->type];
	snprintf(reason, reason_size, "expected %s%s%s, got \"%s\"", type->what, allowed, type->hint, text);
	return -EINVAL;
}

/* Writes the key's current value as text config_load accepts back; returns snprintf's length. */
static int config_format_value(const struct tern_config *cfg, const struct config_key *key, char *out,
			       size_t out_size)
{
	const void *field = (const char *)cfg + key->offset;
	switch (key->type) {
	case CONFIG_INT:
	case CONFIG_RATIO:
		return config_format_amount(key->type, *(const uint32_t *)field, out, out_size);
	case CONFIG_SIZE:
	case CONFIG_DURATION:
		return config_format_amount(key->type, *(const uint64_t *)field, out, out_size);
	case CONFIG_BOOL:
		return snprintf(out, out_size, "%s", *(const bool *)field ? "true" : "false");
	case CONFIG_ENUM: {
		int value = *(const int *)field, count = 0;
		while (key->enum_names[count] != NULL)
			count++;
		TERN_ASSERT(value >= 0 && value < count);
		return snprintf(out, out_size, "%s", key->enum_names[value]);
	}
	case CONFIG_STRING:
		return snprintf(out, out_size, "%s",
				*(char *const *)field != NULL ? *(char *const *)field : "");
	case CONFIG_LISTEN: {
		int used = 0;
		for (uint32_t i = 0; i < cfg->listen_count && used >= 0 && (size_t)used < out_size; i++) {
			const struct config_listen *l = &cfg->listens[i];
			bool is_ipv6 = strchr(l->host, ':') != NULL;
			int n = snprintf(out + used, out_size - (size_t)used, "%s%s%s%s:%" PRIu16, i ? ", " : "",
					 is_ipv6 ? "[" : "", l->host, is_ipv6 ? "]" : "", l->port);
			used = n < 0 ? -1 : used + n;
		}
		return used;
	}
	}
	TERN_ASSERT(!"unknown config type");
	return 0;
}

/* ---- loading ---- */

int config_init_defaults(struct tern_config *cfg)
{
	TERN_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
		const struct config_key *key = &config_keys[i];
		char reason[CONFIG_REASON_MAX];
		TERN_ASSERT(key->field_size == config_types[key->type].field_size);
		TERN_ASSERT((key->type == CONFIG_ENUM) == (key->enum_names != NULL));
		TERN_ASSERT((key->flags & CONFIG_PATH) == 0 || key->type == CONFIG_STRING);
		/* (a default the table's own parser refuses is a bad entry: test_config sets every one) */
		if (config_set(cfg, key, key->default_text, NULL, reason, sizeof(reason)) < 0)
			return -ENOMEM;
	}
	TERN_ASSERT(cfg->min_pool_size <= cfg->pool_size);
	TERN_ASSERT((cfg->buffer_count & (cfg->buffer_count - 1)) == 0);
	return 0;
}

void config_deinit(struct tern_config *cfg)
{
	TERN_ASSERT(cfg != NULL);
	for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
		if (config_keys[i].type != CONFIG_STRING)
			continue;
		char **field = config_field(cfg, &config_keys[i]);
		free(*field);
		*field = NULL;
	}
	free(cfg->path);
	cfg->path = NULL;
	databases_destroy(cfg->databases);
	cfg->databases = NULL;
	for (uint32_t i = 0; i < cfg->extra_server_count; i++)
		free(cfg->extra_servers[i].conninfo);
	cfg->extra_server_count = 0;
}

__attribute__((format(printf, 3, 4))) static void config_fail(struct config_parse *parse, int line,
							      const char *fmt, ...)
{
	if (parse->rc != 0)
		return;
	parse->rc = -EINVAL;
	int n = line > 0 ? snprintf(parse->err, parse->err_size, "%s:%d: ", parse->path, line)
			 : snprintf(parse->err, parse->err_size, "%s: ", parse->path);
	if (n < 0 || (size_t)n >= parse->err_size)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(parse->err + n, parse->err_size - (size_t)n, fmt, ap);
	va_end(ap);
}

/* Catches unknown section headers here, where every line passes, so an empty misspelt section fails too. */
static bool config_check_section_line(struct config_parse *parse, const char *line)
{
	if (parse->line_number == 1 && strncmp(line, "\xEF\xBB\xBF", 3) == 0)
		line += 3; /* inih skips a UTF-8 byte order mark */
	line = config_skip_blanks(line);
	if (line[0] != '[')
		return true;
	const char *close = strchr(line, ']');
	if (close == NULL) {
		config_fail(parse, parse->line_number, "expected \"]\" to close the section name");
		return false;
	}
	int len = (int)(close - line - 1);
	if (config_is_known_section(line + 1, (size_t)len))
		return true;
	config_fail(parse, parse->line_number, "[%.*s]: unknown section (tern --help-config lists them)", len,
		    line + 1);
	return false;
}

/* inih's reader: one whole line per call, so inih's line count stays true, and a line longer than inih's
 * buffer stops the load instead of being split into two silently wrong lines. */
static char *config_read_line(char *buffer, int buffer_size, void *stream)
{
	struct config_parse *parse = stream;
	if (parse->rc != 0)
		return NULL;
	errno = 0;
	ssize_t len = getline(&parse->line, &parse->line_capacity, parse->file);
	if (len < 0) {
		if (ferror(parse->file)) {
			int saved = errno != 0 ? errno : EIO;
			config_fail(parse, 0, "cannot read: %s", strerror(saved));
			parse->rc = -saved;
		}
		return NULL;
	}
	parse->line_number++;
	if ((size_t)len + 1 > (size_t)buffer_size) {
		config_fail(parse, parse->line_number, "line is longer than %d bytes", buffer_size - 1);
		return NULL;
	}
	if (strlen(parse->line) != (size_t)len) {
		config_fail(parse, parse->line_number, "line contains a NUL byte");
		return NULL;
	}
	if (!config_check_section_line(parse, parse->line))
		return NULL;
	memcpy(buffer, parse->line, (size_t)len + 1);
	return buffer;
}

/* The next key = value of a conninfo at *cursor (libpq's grammar: the value bare or single-quoted with
 * backslash escapes), moving the cursor past it. False at the end, or where the text is not that grammar
 * (libpq says why later). */
static bool config_conninfo_next(char **cursor, char **key, size_t *key_len, char **value, char **value_end)
{
	char *p = *cursor;
	while (isspace((unsigned char)*p))
		p++;
	if (!*p)
		return false;
	*key = p;
	while (*p && *p != '=' && !isspace((unsigned char)*p))
		p++;
	*key_len = (size_t)(p - *key);
	while (isspace((unsigned char)*p))
		p++;
	if (*p != '=')
		return false;
	for (p++; isspace((unsigned char)*p); p++)
		;
	*value = p;
	if (*p == '\'') {
		for (p++; *p && *p != '\''; p++)
			if (*p == '\\' && p[1])
				p++;
		if (*p)
			p++;
	} else {
		while (*p && !isspace((unsigned char)*p))
			p++;
	}
	*value_end = *cursor = p;
	return true;
}

/* Takes tern's own keys out of a server's conninfo, in place (libpq would refuse them): `weight=N`
 * (0..CONFIG_WEIGHT_MAX; 1 when absent) and `profile=vanilla|polar` (vanilla when absent). NULL, or what
 * is wrong. */
#define CONFIG_WEIGHT_MAX 1000u
static const char *config_take_server_keys(char *conninfo, uint32_t *weight, bool *is_polar)
{
	*weight = 1;
	*is_polar = false;
	char *p = conninfo, *start, *value, *end;
	size_t key_len;
	while (config_conninfo_next(&p, &start, &key_len, &value, &end)) {
		bool is_weight = key_len == 6 && strncmp(start, "weight", 6) == 0;
		bool is_profile = key_len == 7 && strncmp(start, "profile", 7) == 0;
		if (is_weight) {
			char *stop;
			unsigned long w = strtoul(value, &stop, 10);
			if (stop != end || value == end || w > CONFIG_WEIGHT_MAX)
				return "weight must be a whole number from 0 to 1000";
			*weight = (uint32_t)w;
		} else if (is_profile) {
			size_t n = (size_t)(end - value);
			if (n == 5 && strncmp(value, "polar", 5) == 0)
				*is_polar = true;
			else if (n != 7 || strncmp(value, "vanilla", 7) != 0)
				return "profile must be vanilla or polar";
		}
		if (is_weight || is_profile) {
			memmove(start, end, strlen(end) + 1);
			p = start;
		}
	}
	return NULL;
}

static bool config_is_set(const char *text) { return text && text[0]; }

/* server_tls_protocols as libpq's ssl_min/max_protocol_version names ("TLSv1".."TLSv1.3"). NULL, or what
 * is wrong. */
static const char *config_server_tls_range(const char *text, const char **min, const char **max)
{
	static const char *const names[] = {"tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3"};
	static const char *const libpq_names[] = {"TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"};
	uint32_t mask = 0;
	char word[16];
	for (const char *p = text; *p;) {
		size_t n = strcspn(p, ", \t:");
		if (n == 0) {
			p++;
			continue;
		}
		if (n >= sizeof(word))
			return "expected tlsv1.0, tlsv1.1, tlsv1.2, tlsv1.3, all, legacy, secure or default";
		memcpy(word, p, n);
		word[n] = '\0';
		p += n;
		if (strcasecmp(word, "all") == 0 || strcasecmp(word, "legacy") == 0) {
			mask |= 0xfu;
			continue;
		}
		if (strcasecmp(word, "secure") == 0 || strcasecmp(word, "default") == 0) {
			mask |= 0xcu;
			continue;
		}
		uint32_t i = 0;
		while (i < TERN_ARRAY_LEN(names) && strcasecmp(word, names[i]) != 0)
			i++;
		if (i == TERN_ARRAY_LEN(names))
			return "expected tlsv1.0, tlsv1.1, tlsv1.2, tlsv1.3, all, legacy, secure or default";
		mask |= 1u << i;
	}
	if (mask == 0)
		return "names no TLS version";
	uint32_t low = (uint32_t)__builtin_ctz(mask), high = 31u - (uint32_t)__builtin_clz(mask);
	if (mask != ((2u << high) - (1u << low)))
		return "must be a range of versions (libpq takes a lowest and a highest)";
	*min = libpq_names[low];
	*max = libpq_names[high];
	return NULL;
}

/* Appends ` key='value'` to *conninfo (libpq's quoting). 0 or -ENOMEM. */
static int config_conninfo_put(char **conninfo, const char *key, const char *value)
{
	size_t len = strlen(*conninfo), room = len + strlen(key) + 2 * strlen(value) + 6;
	char *out = realloc(*conninfo, room);
	if (!out)
		return -ENOMEM;
	char *w = out + len;
	w += sprintf(w, "%s%s='", len ? " " : "", key);
	for (const char *c = value; *c; c++) {
		if (*c == '\'' || *c == '\\')
			*w++ = '\\';
		*w++ = *c;
	}
	*w++ = '\'';
	*w = '\0';
	*conninfo = out;
	return 0;
}

char *config_server_conninfo(const struct tern_config *cfg, const char *conninfo)
{
	/* A conninfo that says anything of TLS (or takes a service file, which may) keeps its own whole. */
	static const char *const own[] = {"service",  "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword",
					  "ssl_min_protocol_version", "ssl_max_protocol_version"};
	PQconninfoOption *options = PQconninfoParse(conninfo, NULL);
	bool is_own = options == NULL; /* (libpq says what is wrong with it when it connects) */
	for (PQconninfoOption *o = options; o && o->keyword && !is_own; o++)
		for (size_t i = 0; i < TERN_ARRAY_LEN(own) && o->val; i++)
			is_own = is_own || strcmp(o->keyword, own[i]) == 0;
	char *out = strdup(is_own ? conninfo : "");
	int rc = out ? 0 : -ENOMEM;
	/* Rebuilt from libpq's parse as key='value' pairs, so a URI takes the keys as well. */
	for (PQconninfoOption *o = options; o && o->keyword && !is_own && rc == 0; o++)
		if (o->val)
			rc = config_conninfo_put(&out, o->keyword, o->val);
	PQconninfoFree(options);
	const char *min = NULL, *max = NULL;
	const char *wrong = config_server_tls_range(cfg->server_tls_protocols ? cfg->server_tls_protocols : "", &min, &max);
	TERN_ASSERT(wrong == NULL); /* refused at load */
	if (!is_own && rc == 0)
		rc = config_conninfo_put(&out, "sslmode", config_server_tls_mode_names[cfg->server_tls_sslmode]);
	if (!is_own && cfg->server_tls_sslmode != CONFIG_SERVER_TLS_DISABLE) {
		const struct {
			const char *key, *value;
		} keys[] = {{"sslrootcert", cfg->server_tls_ca_file}, {"sslcert", cfg->server_tls_cert_file},
			    {"sslkey", cfg->server_tls_key_file},	  {"ssl_min_protocol_version", min},
			    {"ssl_max_protocol_version", max}};
		for (size_t i = 0; i < TERN_ARRAY_LEN(keys) && rc == 0; i++)
			if (config_is_set(keys[i].value))
				rc = config_conninfo_put(&out, keys[i].key, keys[i].value);
	}
	if (rc < 0) {
		free(out);
		return NULL;
	}
	return out;
}

static int config_on_value(void *user, const char *section, const char *name, const char *value, int line)
{
	struct config_parse *parse = user;
	if (parse->rc != 0)
		return 0;
	if (section[0] == '\0') {
		config_fail(parse, line, "%s: key before any [section] header", name);
		return 0;
	}
	if (!config_is_known_section(section, strlen(section))) {
		config_fail(parse, line, "[%s] %s: unknown section", section, name);
		return 0;
	}
	if (strcmp(section, "servers") == 0 && strcmp(name, "primary") != 0) {
		struct tern_config *cfg = parse->cfg;
		bool is_named = name[0] && strlen(name) < sizeof(cfg->extra_servers[0].name) && value[0];
		for (uint32_t i = 0; i < cfg->extra_server_count && is_named; i++)
			is_named = strcmp(cfg->extra_servers[i].name, name) != 0;
		if (!is_named || cfg->extra_server_count == CONFIG_EXTRA_SERVERS_MAX) {
			config_fail(parse, line, "[servers] %s: %s", name,
				    cfg->extra_server_count == CONFIG_EXTRA_SERVERS_MAX ? "at most 16 servers"
				    : value[0] ? "a name of 1 to 63 bytes, once"
						: "must not be empty (a libpq conninfo such as \"host=10.0.0.2 port=5432\")");
			return 0;
		}
		struct config_server *server = &cfg->extra_servers[cfg->extra_server_count];
		server->conninfo = strdup(value);
		if (!server->conninfo) {
			parse->rc = -ENOMEM;
			config_fail(parse, line, "[servers] %s: out of memory", name);
			return 0;
		}
		base_strlcpy(server->name, name, sizeof(server->name));
		cfg->extra_server_count++;
		const char *wrong = config_take_server_keys(server->conninfo, &server->weight, &server->is_polar);
		if (wrong) {
			config_fail(parse, line, "[servers] %s: %s", name, wrong);
			return 0;
		}
		return 1;
	}
	if (strcmp(section, "databases") == 0 || strcmp(section, "users") == 0) {
		char why[CONFIG_REASON_MAX];
		int rc = databases_add(&parse->cfg->databases, section, name, value, config_pool_mode_names, why,
				       sizeof(why));
		if (rc == -ENOMEM)
			parse->rc = rc;
		if (rc < 0)
			config_fail(parse, line, "[%s] %s: %s", section, name, rc == -ENOMEM ? "out of memory" : why);
		return rc == 0;
	}
	const struct config_key *key = config_find_key(section, name);
	if (key == NULL) {
		const struct config_key *elsewhere = config_find_key(NULL, name);
		if (name[0] == '\0')
			config_fail(parse, line, "[%s]: a key name is missing before \"=\"", section);
		else if (elsewhere != NULL)
			config_fail(parse, line, "[%s] %s: unknown key in this section; it belongs in [%s]",
				    section, name, elsewhere->section);
		else
			config_fail(parse, line, "[%s] %s: unknown key", section, name);
		return 0;
	}
	size_t index = (size_t)(key - config_keys);
	if (parse->key_lines[index] != 0) {
		config_fail(parse, line, "[%s] %s: set twice (first on line %d)", section, name,
			    parse->key_lines[index]);
		return 0;
	}
	parse->key_lines[index] = line;
	char reason[CONFIG_REASON_MAX];
	int rc = config_set(parse->cfg, key, value, parse->path, reason, sizeof(reason));
	if (rc == -ENOMEM) {
		config_fail(parse, line, "[%s] %s: out of memory", section, name);
		parse->rc = rc;
	} else if (rc != 0) {
		config_fail(parse, line, "[%s] %s: %s", section, name, reason);
	}
	return rc == 0;
}

static int config_key_line(const struct config_parse *parse, const char *section, const char *name)
{
	const struct config_key *key = config_find_key(section, name);
	TERN_ASSERT(key != NULL);
	return parse->key_lines[key - config_keys];
}

/* An error about two keys blames the one set later in the file; a key left at its default has line 0. */
static void config_check_across_keys(struct config_parse *parse)
{
	const struct tern_config *cfg = parse->cfg;
	if (cfg->min_pool_size > cfg->pool_size) {
		int min_line = config_key_line(parse, "pool", "min_pool_size");
		int max_line = config_key_line(parse, "pool", "pool_size");
		config_fail(parse, TERN_MAX(min_line, max_line),
			    "[pool] %s: min_pool_size (%" PRIu32 ") is larger than pool_size (%" PRIu32 ")",
			    min_line >= max_line ? "min_pool_size" : "pool_size", cfg->min_pool_size,
			    cfg->pool_size);
	}
	for (size_t i = 0; i < databases_count(cfg->databases); i++) {
		const struct database_entry *e = databases_at(cfg->databases, i);
		bool is_known = !e->server[0] || strcmp(e->server, "primary") == 0;
		for (uint32_t k = 0; k < cfg->extra_server_count && !is_known; k++)
			is_known = strcmp(cfg->extra_servers[k].name, e->server) == 0;
		if (!is_known)
			config_fail(parse, 0, "[databases] %s: server = %s is not a key of [servers]", e->name, e->server);
	}
	const char *wrong = cfg->primary_conninfo ? config_take_server_keys(parse->cfg->primary_conninfo,
									     &parse->cfg->primary_weight,
									     &parse->cfg->primary_is_polar)
						  : NULL;
	if (wrong)
		config_fail(parse, config_key_line(parse, "servers", "primary"), "[servers] primary: %s", wrong);
	/* "primary = ;x" reads as an empty value (inih takes " ;" as a comment): never silently no server. */
	if (cfg->primary_conninfo == NULL || cfg->primary_conninfo[0] == '\0') {
		config_fail(parse, config_key_line(parse, "servers", "primary"),
			    "[servers] primary: must not be empty (a libpq conninfo such as \"host=10.0.0.1 port=5432\")");
	}
	if (cfg->client_tls_sslmode != CONFIG_TLS_DISABLE &&
	    (!cfg->client_tls_cert_file || !cfg->client_tls_cert_file[0] || !cfg->client_tls_key_file ||
	     !cfg->client_tls_key_file[0])) {
		config_fail(parse, config_key_line(parse, "tls", "client_tls_sslmode"),
			    "[tls] client_tls_sslmode: %s needs client_tls_cert_file and client_tls_key_file",
			    config_tls_mode_names[cfg->client_tls_sslmode]);
	}
	if (cfg->server_tls_sslmode >= CONFIG_SERVER_TLS_VERIFY_CA && !config_is_set(cfg->server_tls_ca_file))
		config_fail(parse, config_key_line(parse, "tls", "server_tls_sslmode"),
			    "[tls] server_tls_sslmode = %s needs server_tls_ca_file (the CAs a server's certificate is "
			    "checked against)",
			    config_server_tls_mode_names[cfg->server_tls_sslmode]);
	if (config_is_set(cfg->server_tls_cert_file) != config_is_set(cfg->server_tls_key_file))
		config_fail(parse, config_key_line(parse, "tls", "server_tls_cert_file"),
			    "[tls] server_tls_cert_file and server_tls_key_file go together");
	const char *tls_min, *tls_max;
	const char *tls_wrong = config_server_tls_range(cfg->server_tls_protocols ? cfg->server_tls_protocols : "",
							&tls_min, &tls_max);
	if (tls_wrong)
		config_fail(parse, config_key_line(parse, "tls", "server_tls_protocols"),
			    "[tls] server_tls_protocols = %s: %s", cfg->server_tls_protocols, tls_wrong);
	if (cfg->auth_mode == CONFIG_AUTH_CERT &&
	    (cfg->client_tls_sslmode == CONFIG_TLS_DISABLE || !cfg->client_tls_ca_file || !cfg->client_tls_ca_file[0])) {
		config_fail(parse, config_key_line(parse, "auth", "mode"),
			    "[auth] mode = cert needs [tls] client_tls_sslmode and client_tls_ca_file (the CA that "
			    "vouches for the clients' certificates)");
	}
	struct config_listen patroni[CONFIG_PATRONI_MAX];
	if (cfg->patroni_api && cfg->patroni_api[0] &&
	    config_parse_addresses(cfg->patroni_api, patroni, CONFIG_PATRONI_MAX) < 0)
		config_fail(parse, config_key_line(parse, "routing", "patroni_api"),
			    "[routing] patroni_api = %s: expected host:port[, host:port...] (at most %u)", cfg->patroni_api,
			    CONFIG_PATRONI_MAX);
	/* The admin endpoint starts first: on one of tern's own addresses it would take the port and tern
	 * would refuse it as "in use by another process". */
	if (cfg->http_listen && cfg->http_listen[0]) {
		const char *colon = strrchr(cfg->http_listen, ':');
		uint64_t http_port = 0;
		const char *end = config_scan_digits(colon ? colon + 1 : cfg->http_listen, &http_port);
		char http_host[CONFIG_LISTEN_HOST_SIZE] = "127.0.0.1"; /* http.c's default */
		if (colon && (size_t)(colon - cfg->http_listen) < sizeof(http_host))
			snprintf(http_host, sizeof(http_host), "%.*s", (int)(colon - cfg->http_listen), cfg->http_listen);
		bool is_any = strcmp(http_host, "*") == 0 || strcmp(http_host, "0.0.0.0") == 0;
		for (uint32_t i = 0; end && *end == '\0' && i < cfg->listen_count; i++) {
			const char *host = cfg->listens[i].host;
			bool is_same_host = is_any || strcmp(host, "0.0.0.0") == 0 || strcmp(host, http_host) == 0;
			if (cfg->listens[i].port == http_port && is_same_host)
				config_fail(parse, config_key_line(parse, "admin", "http_listen"),
					    "[admin] http_listen = %s: the same address as [tern] listen's %s:%u",
					    cfg->http_listen, host, cfg->listens[i].port);
		}
	}
	if (config_unix_socket_mode(cfg) < 0)
		config_fail(parse, config_key_line(parse, "tern", "unix_socket_mode"),
			    "[tern] unix_socket_mode = %s: expected octal permission bits such as 0777 or 0770",
			    cfg->unix_socket_mode);
	/* The provided-buffer ring indexes its entries with a mask. */
	if ((cfg->buffer_count & (cfg->buffer_count - 1)) != 0) {
		config_fail(parse, config_key_line(parse, "tern", "buffer_count"),
			    "[tern] buffer_count: must be a power of two, got %" PRIu32, cfg->buffer_count);
	}
}

int config_unix_socket_mode(const struct tern_config *cfg)
{
	const char *text = cfg->unix_socket_mode;
	char *end;
	errno = 0;
	long mode = text && text[0] >= '0' && text[0] <= '7' ? strtol(text, &end, 8) : -1;
	return mode < 0 || errno || *end != '\0' || mode > 0777 ? -1 : (int)mode;
}

int config_bool_of(const char *text)
{
	int index = config_find_name(config_bool_names, text);
	return index < 0 ? -1 : index % 2 == 0;
}

int config_load(struct tern_config *cfg, const char *path, char *err, size_t err_size)
{
	TERN_ASSERT(cfg != NULL && path != NULL && err != NULL && err_size > 0);
	err[0] = '\0';
	struct config_parse parse = {.cfg = cfg, .path = path, .err = err, .err_size = err_size};
	if (config_init_defaults(cfg) < 0) {
		config_fail(&parse, 0, "out of memory");
		return -ENOMEM;
	}

	parse.file = fopen(path, "re");
	if (parse.file == NULL) {
		int saved = errno;
		config_fail(&parse, 0, "cannot open: %s", strerror(saved));
		return -saved;
	}
	cfg->path = strdup(path);
	if (cfg->path == NULL) {
		config_fail(&parse, 0, "out of memory");
		parse.rc = -ENOMEM;
	}

	/* Debian's inih turns its compile-time options into these globals; pin the ones whose defaults
	 * would change a file's meaning. Multi-line values would make an indented key a silent continuation
	 * of the previous value; a heap buffer lets lines reach CONFIG_LINE_MAX instead of 200 bytes. */
	ini_allow_multiline = false;
	ini_allow_inline_comments = true;
	ini_allow_no_value = false;
	ini_stop_on_first_error = true;
	ini_use_stack = false;
	ini_allow_realloc = false;
	ini_max_line = CONFIG_LINE_MAX;
	ini_initial_alloc = CONFIG_LINE_MAX;

	int result = parse.rc == 0 ? ini_parse_stream(config_read_line, &parse, config_on_value, &parse) : 0;
	if (parse.rc == 0 && result == -2) {
		config_fail(&parse, 0, "out of memory");
		parse.rc = -ENOMEM;
	} else if (parse.rc == 0 && result > 0) {
		/* inih stops at its first error, so the line still in our buffer is the one it refused. */
		if (result == parse.line_number)
			parse.line[strcspn(parse.line, "\r\n")] = '\0';
		config_fail(&parse, result,
			    "expected \"key = value\", \"[section]\" or a comment, got \"%s\"",
			    result == parse.line_number ? parse.line : "?");
	}
	if (parse.rc == 0)
		config_check_across_keys(&parse);

	fclose(parse.file);
	free(parse.line);
	if (parse.rc != 0) {
		config_deinit(cfg);
		if (config_init_defaults(cfg) < 0 && parse.rc != -ENOMEM) /* (what was set, as the contract says) */
			parse.rc = -ENOMEM;
	}
	return parse.rc;
}

/* ---- reference output ---- */

/* Help text wrapped at word boundaries so --help-config reads well in a terminal. */
static void config_print_wrapped(FILE *out, const char *text, const char *indent, size_t width)
{
	size_t column = 0;
	for (size_t word; *text != '\0'; text += word + strspn(text + word, " ")) {
		word = strcspn(text, " ");
		if (column > 0 && column + 1 + word > width) {
			fputc('\n', out);
			column = 0;
		}
		column += (size_t)fprintf(out, "%s%.*s", column == 0 ? indent : " ", (int)word, text);
	}
	fputc('\n', out);
}

/* Defaults longer than this are printed under the key's line. */
#define CONFIG_HELP_DEFAULT_INLINE_MAX 48u

void config_print_help(FILE *out)
{
	TERN_ASSERT(out != NULL);
	for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
		const struct config_key *key = &config_keys[i];
		char allowed[CONFIG_REASON_MAX / 4];
		config_format_allowed(key, "|", "..", allowed, sizeof(allowed));
		/* A default too long for the key's line (auth_query's) goes below it, wrapped. */
		bool is_long = strlen(key->default_text) > CONFIG_HELP_DEFAULT_INLINE_MAX;
		char head[CONFIG_REASON_MAX];
		int head_len = snprintf(head, sizeof(head), "[%s] %s%s%s", key->section, key->key, is_long ? "" : " = ",
					is_long ? "" : key->default_text[0] != '\0' ? key->default_text : "\"\"");
		char kind[CONFIG_REASON_MAX];
		int kind_len = snprintf(kind, sizeof(kind), "(%s, %s, %s)", config_types[key->type].name, allowed,
					(key->flags & CONFIG_RELOAD) != 0 ? "reloadable" : "restart to change");
		/* What is allowed goes below the key when the line would not fit a terminal (a long enum). */
		fprintf(out, "%s%s%s%s\n", i == 0 ? "" : "\n", head, head_len + 2 + kind_len > 110 ? "\n    " : "  ", kind);
		if (is_long) {
			char line[CONFIG_REASON_MAX];
			snprintf(line, sizeof(line), "default: %s", key->default_text);
			config_print_wrapped(out, line, "    ", 100);
		}
		config_print_wrapped(out, key->help, "    ", 100);
	}
}

/* A table cell: '|' would end the cell early and '*' could start emphasis, so both are escaped as
 * GitHub Markdown expects (inside code spans only '|' needs it). */
static void config_print_cell(FILE *out, const char *text, bool is_code)
{
	fputs(is_code ? " `" : " ", out);
	for (; *text != '\0'; text++) {
		if (*text == '|' || (*text == '*' && !is_code))
			fputc('\\', out);
		fputc(*text, out);
	}
	fputs(is_code ? "` |" : " |", out);
}

void config_print_markdown(FILE *out)
{
	TERN_ASSERT(out != NULL);
	fputs("| Section | Key | Default | Allowed | Reload | Meaning |\n", out);
	fputs("|---|---|---|---|---|---|\n", out);
	for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
		const struct config_key *key = &config_keys[i];
		char section[64], allowed[CONFIG_REASON_MAX / 4];
		snprintf(section, sizeof(section), "[%s]", key->section);
		config_format_allowed(key, ", ", "..", allowed, sizeof(allowed));
		fputc('|', out);
		config_print_cell(out, section, true);
		config_print_cell(out, key->key, true);
		config_print_cell(out, key->default_text[0] != '\0' ? key->default_text : "\"\"", true);
		config_print_cell(out, allowed, false);
		config_print_cell(out, (key->flags & CONFIG_RELOAD) != 0 ? "yes" : "no", false);
		config_print_cell(out, key->help, false);
		fputc('\n', out);
	}
}

/* Text for roff: a backslash would start an escape and a '.' or '\'' first on a line a request. */
static void config_print_roff(FILE *out, const char *text)
{
	if (*text == '.' || *text == '\'')
		fputs("\\&", out);
	for (; *text != '\0'; text++) {
		if (*text == '\\')
			fputs("\\e", out);
		else if (*text == '-')
			fputs("\\-", out);
		else
			fputc(*text, out);
	}
}

void config_print_man(FILE *out)
{
	TERN_ASSERT(out != NULL);
	const char *section = "";
	for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
		const struct config_key *key = &config_keys[i];
		char allowed[CONFIG_REASON_MAX / 4];
		config_format_allowed(key, ", ", "..", allowed, sizeof(allowed));
		if (strcmp(section, key->section) != 0) {
			section = key->section;
			fprintf(out, ".SS [%s]\n", section);
		}
		fputs(".TP\n\\fB", out);
		config_print_roff(out, key->key);
		fputs("\\fR = ", out);
		config_print_roff(out, key->default_text[0] != '\0' ? key->default_text : "\"\"");
		fputs(" (", out);
		config_print_roff(out, allowed);
		fputs((key->flags & CONFIG_RELOAD) != 0 ? "; reloadable)\n" : "; restart to change)\n", out);
		config_print_roff(out, key->help);
		fputc('\n', out);
	}
}

size_t config_key_count(void)
{
	return CONFIG_KEY_COUNT;
}

int config_describe_key(const struct tern_config *cfg, size_t index, const char **section, const char **key,
			char *value, size_t value_size, const char **default_text, bool *reloadable)
{
	TERN_ASSERT(cfg != NULL && section != NULL && key != NULL && value != NULL && value_size > 0);
	TERN_ASSERT(default_text != NULL && reloadable != NULL);
	if (index >= CONFIG_KEY_COUNT)
		return -ERANGE;
	const struct config_key *entry = &config_keys[index];
	*section = entry->section;
	*key = entry->key;
	*default_text = entry->default_text;
	*reloadable = (entry->flags & CONFIG_RELOAD) != 0;
	int n = config_format_value(cfg, entry, value, value_size);
	return n >= 0 && (size_t)n < value_size ? 0 : -ENOSPC;
}
