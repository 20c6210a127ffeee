/* tern's entry point: command line, config, the pool and its thread, listeners, workers, signals. */
#include "parts.h"
#include "replay/failovers.h"
#include "admin.h"
#include "auth.h"
#include "auth_query.h"
#include "config.h"
#include "import.h"
#include "listen.h"
#include "digest.h"
#include "replay/journal.h"
#include "shadow.h"
#include "http.h"
#include "routing/monitor.h"
#include "dispatch.h"
#include "pool/opener.h"
#include "pool/pool.h"
#include "server_auth.h"
#include "server_tls.h"
#include "session.h"
#include "tls.h"
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#ifndef TERN_VERSION
#define TERN_VERSION "0.0.0"
#endif
/* Pending connections per listener: bursts of pgbench -C or a fleet's reconnect storm. */

/* systemd's readiness protocol (Type=notify): one datagram of "KEY=VALUE" lines to the socket named by
 * NOTIFY_SOCKET ('@' first: the abstract namespace). No-op when tern was not started by systemd. */
static void main_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	size_t len = path ? strlen(path) : 0;
	/* (an abstract name, '@' first, needs no terminating NUL: it may fill sun_path) */
	if (len == 0 || len > sizeof(un.sun_path) || (path[0] == '/' && len == sizeof(un.sun_path)) ||
	    (path[0] != '/' && path[0] != '@'))
		return;
	memcpy(un.sun_path, path, len);
	if (un.sun_path[0] == '@')
		un.sun_path[0] = '\0';
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&un,
			     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
		TERN_WARN("NOTIFY_SOCKET %s: cannot tell systemd \"%s\": %s", path, state, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void main_usage(FILE *out)
{
	fprintf(out, "usage: tern -c FILE          run with the config in FILE\n"
		     "       tern -c FILE --tr=false\n"
		     "                             [replay] tr_enabled from the command line, whatever FILE says\n"
		     "                             (also --tr false; true, on, off, yes, no, 1, 0)\n"
		     "       tern -c FILE --takeover\n"
		     "                             a rolling restart: listen beside the tern already running\n"
		     "                             (send that one SIGTERM to let it drain)\n"
		     "       tern --import-pgbouncer FILE\n"
		     "                             print the tern.ini that does what pgbouncer.ini FILE does,\n"
		     "                             naming on stderr every setting it cannot carry over\n"
		     "       tern --version        print the version\n"
		     "       tern --help           print this text\n"
		     "       tern --help-config    describe every config key (--help-config=markdown: as a table)\n"
		     "       tern --man            print the manual page, tern(1)\n");
}

/* tern(1), as `meson install` puts it: the usage, the signals, and every config key from the table. */
static void main_print_man(FILE *out)
{
	fprintf(out, ".TH TERN 1 \"\" \"tern %s\" \"User Commands\"\n"
		     ".SH NAME\ntern \\- a PostgreSQL proxy: pooling, reads on replicas, Transaction Replay\n"
		     ".SH SYNOPSIS\n.B tern \\-c\n.I FILE\n.RB [ \\-\\-tr=false ]\n.RB [ \\-\\-takeover ]\n.br\n"
		     ".B tern \\-\\-import\\-pgbouncer\n.I FILE\n.br\n"
		     ".B tern\n.RB [ \\-\\-version | \\-\\-help | \\-\\-help\\-config | \\-\\-man ]\n"
		     ".SH DESCRIPTION\n"
		     "tern sits between applications and a PostgreSQL primary with streaming replicas. It pools server\n"
		     "connections (session or transaction pooling), sends reads to replicas without stale results, and\n"
		     "on a primary failure keeps the client's connection open and moves its session to the new primary\n"
		     "(Transaction Replay). Its configuration is one ini file, described below key by key.\n"
		     ".SH OPTIONS\n.nf\n",
		TERN_VERSION);
	main_usage(out);
	fputs(".fi\n.SH SIGNALS\n"
	      ".TP\n.B SIGHUP\nreloads the configuration file: reloadable keys take effect, the others are logged as\n"
	      "needing a restart. Under systemd: systemctl reload tern.\n"
	      ".TP\n.B SIGTERM\nstops accepting clients and exits when every session holds no open transaction, or at\n"
	      "shutdown_timeout.\n"
	      ".TP\n.B SIGINT\nends every session at once.\n"
	      ".SH SYSTEMD\nStarted with Type=notify, tern says READY=1 once it listens, RELOADING=1 and READY=1\n"
	      "around a reload, and STOPPING=1 when it stops (NOTIFY_SOCKET).\n"
	      ".SH CONFIGURATION\n",
	      out);
	config_print_man(out);
	fputs(".SH SEE ALSO\n.BR psql (1),\n.BR pgbench (1),\n.BR pgbouncer (1)\n", out);
}

/* Configs and user lists replaced by a reload: a worker may still be reading one, so they are freed
 * only at exit. A reload a second for a minute stays within this. */
#define MAIN_RETIRED_MAX 64u

struct main_retired {
	struct tern_config *configs[MAIN_RETIRED_MAX];
	struct auth_file *auth_files[MAIN_RETIRED_MAX];
	struct tls_context *tls_contexts[MAIN_RETIRED_MAX];
	uint32_t config_count, auth_file_count, tls_context_count;
};

/* The TLS context [tls] describes, or NULL with client_tls_sslmode = disable. 0 or <0 with `err` set. */
static int main_tls_context(const struct tern_config *cfg, struct tls_context **out, char *err, size_t err_size)
{
	*out = NULL;
	if (cfg->client_tls_sslmode == CONFIG_TLS_DISABLE)
		return 0;
	struct tls_settings settings = {
		.cert_file = cfg->client_tls_cert_file,
		.key_file = cfg->client_tls_key_file,
		.ca_file = cfg->client_tls_ca_file,
		.min_protocol = cfg->client_tls_min_protocol == 1 ? "TLSv1.3" : "TLSv1.2",
		.ciphers = cfg->client_tls_ciphers,
	};
	return tls_context_create(&settings, out, err, err_size);
}

/* A restart-only string keeps its running value: a copy, since workers may still read the old config. */
static bool main_keep_string(char **next, const char *running)
{
	char *copy = strdup(running);
	if (!copy)
		return false;
	free(*next);
	*next = copy;
	return true;
}

static struct pool_settings main_pool_settings(const struct tern_config *cfg)
{
	return (struct pool_settings){
		.pool_size = cfg->pool_size,
		.reserve_pool_size = cfg->reserve_pool_size,
		.reserve_pool_timeout_ns = cfg->reserve_pool_timeout_ms * BASE_NS_PER_MS,
		.max_db_connections = cfg->max_db_connections,
		.max_user_connections = cfg->max_user_connections,
		.max_server_connections = cfg->max_server_connections,
		.min_pool_size = cfg->min_pool_size,
		.login_retry_ns = cfg->server_login_retry_ms * BASE_NS_PER_MS,
		.idle_timeout_ns = cfg->server_idle_timeout_ms * BASE_NS_PER_MS,
		.lifetime_ns = cfg->server_lifetime_ms * BASE_NS_PER_MS,
	};
}

/* A server of [servers] into the pool, with the conninfo every libpq connection to it uses (config.h). */
static int main_server_add(struct pool *pool, const struct tern_config *cfg, const char *name, const char *conninfo,
			   struct pool_server **out)
{
	char *full = config_server_conninfo(cfg, conninfo);
	int rc = full ? pool_server_add(pool, name, full, out) : -ENOMEM;
	free(full);
	return rc;
}

/* What auth_query runs with: auth_user's password is its plaintext auth_file entry, if it has one; the
 * primary's conninfo is the pool's (with [tls] server_tls_* in it). */
static struct auth_query_settings main_auth_query_settings(const struct tern_config *cfg, const struct pool *pool,
							   const struct auth_file *auth_file)
{
	const struct auth_user *user = auth_file && cfg->auth_user[0] ? auth_file_find(auth_file, cfg->auth_user) : NULL;
	return (struct auth_query_settings){
		.conninfo = pool->servers[0].conninfo,
		.user = cfg->auth_user,
		.password = user && user->kind == AUTH_SECRET_PLAIN ? user->secret : NULL,
		.query = cfg->auth_query,
		.dbname = cfg->auth_dbname,
		.connect_timeout_ms = cfg->server_connect_timeout_ms,
	};
}

/* SIGHUP: reloadable keys take effect now; the others keep their running values, and the log says
 * which changed and need a restart. A bad file changes nothing (and the result is <0). */
/* --tr on the command line: [replay] tr_enabled whatever the file says (-1: the file's). */
static int main_tr_flag = -1;

/* A loaded configuration, with what the command line sets over it. */
static void main_override(struct tern_config *cfg)
{
	if (main_tr_flag >= 0)
		cfg->tr_enabled = main_tr_flag;
}

/* Each server's profile= as cfg has it (the pool's servers are the primary, then [servers] in order): a
 * changed one holds for connections opened from now on, and clients logging in from now on get only
 * those (pool_server_set_profile). */
static void main_apply_profiles(struct pool *pool, const struct tern_config *cfg)
{
	TERN_ASSERT(pool->server_count == cfg->extra_server_count + 1);
	for (uint32_t i = 0; i < pool->server_count; i++) {
		bool is_polar = i == 0 ? cfg->primary_is_polar : cfg->extra_servers[i - 1].is_polar;
		if (pool_server_set_profile(pool, &pool->servers[i], is_polar))
			TERN_INFO("SIGHUP: [servers] %s: profile = %s for the connections opened from now on",
				  pool->servers[i].name, is_polar ? "polar" : "vanilla");
	}
}

static int main_reload(struct tern_runtime *rt, struct pool_opener *opener, const char *path,
			struct main_retired *retired)
{
	struct tern_config *next = calloc(1, sizeof(*next));
	char err[1024];
	if (!next || retired->config_count == MAIN_RETIRED_MAX) {
		TERN_ERROR("SIGHUP: cannot reload (out of memory, or more than %u reloads): restart tern",
			   MAIN_RETIRED_MAX);
		free(next);
		return -ENOMEM;
	}
	if (config_load(next, path, err, sizeof(err)) < 0) {
		TERN_ERROR("SIGHUP: %s; nothing changed", err);
		config_deinit(next);
		free(next);
		return -EINVAL;
	}
	main_override(next);
	struct tern_config *old = (struct tern_config *)rt->config;
	struct auth_file *auth_file = NULL;
	struct tls_context *tls = NULL;
	if (next->auth_file[0] && auth_file_load(next->auth_file, &auth_file, err, sizeof(err)) < 0) {
		TERN_ERROR("SIGHUP: [auth] auth_file: %s; nothing changed", err);
		goto fail;
	}
	if (!auth_file && !next->auth_user[0] && next->auth_mode != CONFIG_AUTH_TRUST &&
	    next->auth_mode != CONFIG_AUTH_CERT) {
		TERN_ERROR("SIGHUP: [auth] mode needs an auth_file or an auth_user; nothing changed");
		goto fail;
	}
	if (main_tls_context(next, &tls, err, sizeof(err)) < 0) {
		TERN_ERROR("SIGHUP: [tls] %s; nothing changed", err);
		goto fail;
	}
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *section, *key, *default_text;
		char before[512], after[512];
		bool reloadable;
		if (config_describe_key(old, i, &section, &key, before, sizeof(before), &default_text, &reloadable) < 0 ||
		    config_describe_key(next, i, &section, &key, after, sizeof(after), &default_text, &reloadable) < 0 ||
		    strcmp(before, after) == 0)
			continue;
		if (reloadable)
			TERN_INFO("SIGHUP: [%s] %s = %s (was %s)", section, key, after, before);
		else
			TERN_WARN("SIGHUP: [%s] %s changed to %s; it needs a restart, %s stays in effect", section, key,
				  after, before);
	}
	/* Keys that only a restart can change keep their running values; of [servers], only each server's
	 * profile= is reloaded (main_apply_profiles), matched by name. */
	struct config_server profiles[CONFIG_EXTRA_SERVERS_MAX];
	uint32_t profile_count = next->extra_server_count;
	memcpy(profiles, next->extra_servers, sizeof(profiles));
	memcpy(next->listen_host, old->listen_host, sizeof(next->listen_host));
	next->listen_port = old->listen_port;
	memcpy(next->listens, old->listens, sizeof(next->listens));
	next->listen_count = old->listen_count;
	for (uint32_t i = 0; i < next->extra_server_count; i++)
		free(next->extra_servers[i].conninfo);
	next->extra_server_count = 0;
	for (uint32_t i = 0; i < old->extra_server_count; i++) {
		next->extra_servers[i] = old->extra_servers[i];
		next->extra_servers[i].conninfo = NULL;
		if (!main_keep_string(&next->extra_servers[i].conninfo, old->extra_servers[i].conninfo)) {
			TERN_ERROR("SIGHUP: out of memory; nothing changed");
			goto fail;
		}
		next->extra_server_count = i + 1;
		for (uint32_t j = 0; j < profile_count; j++)
			if (strcmp(profiles[j].name, old->extra_servers[i].name) == 0)
				next->extra_servers[i].is_polar = profiles[j].is_polar;
	}
	next->workers = old->workers;
	next->pin_workers = old->pin_workers;
	next->pool_mode = old->pool_mode;
	next->io_backend = old->io_backend;
	next->ring_entries = old->ring_entries;
	next->buffer_count = old->buffer_count;
	next->buffer_size = old->buffer_size;
	next->max_client_frame_bytes = old->max_client_frame_bytes;
	next->max_backend_frame_bytes = old->max_backend_frame_bytes;
	if (!main_keep_string(&next->primary_conninfo, old->primary_conninfo) ||
	    !main_keep_string(&next->track_extra_parameters, old->track_extra_parameters) ||
	    !main_keep_string(&next->unix_socket_dir, old->unix_socket_dir) ||
	    !main_keep_string(&next->pidfile, old->pidfile)) {
		TERN_ERROR("SIGHUP: out of memory; nothing changed");
		goto fail;
	}

	__atomic_store_n(&base_log_level_current, next->log_level, __ATOMIC_RELAXED);
	/* Reopened every time: logrotate has moved the old file away. */
	if (listen_open_logfile(next->logfile) < 0)
		TERN_ERROR("SIGHUP: [tern] logfile = %s: %s; the log goes on where it went", next->logfile,
			   strerror(errno));
	struct pool_settings settings = main_pool_settings(next);
	pool_set_settings(rt->pool, &settings);
	main_apply_profiles(rt->pool, next);
	pool_opener_set_connect_timeout(opener, next->server_connect_timeout_ms);
	struct auth_query_settings lookups = main_auth_query_settings(next, rt->pool, auth_file);
	if (auth_query_set(rt->auth_query, &lookups) < 0)
		TERN_ERROR("SIGHUP: [auth] auth_query or auth_user is too long; lookups go on as before");
	struct auth_file *old_auth = (struct auth_file *)rt->auth_file;
	struct tls_context *old_tls = (struct tls_context *)rt->tls;
	__atomic_store_n(&rt->auth_file, auth_file, __ATOMIC_RELEASE);
	__atomic_store_n(&rt->tls, tls, __ATOMIC_RELEASE);
	__atomic_store_n(&rt->config, next, __ATOMIC_RELEASE);
	retired->configs[retired->config_count++] = old;
	if (old_auth && retired->auth_file_count < MAIN_RETIRED_MAX)
		retired->auth_files[retired->auth_file_count++] = old_auth;
	if (old_tls && retired->tls_context_count < MAIN_RETIRED_MAX)
		retired->tls_contexts[retired->tls_context_count++] = old_tls;
	TERN_INFO("SIGHUP: configuration reloaded from %s", path);
	return 0;
fail:
	tls_context_destroy(tls);
	if (auth_file)
		auth_file_destroy(auth_file);
	config_deinit(next);
	free(next);
	return -EINVAL;
}

int main(int argc, char **argv)
{
	const char *config_path = NULL;
	bool is_takeover = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--takeover") == 0) {
			is_takeover = true;
		} else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
			config_path = argv[++i];
		} else if (strncmp(argv[i], "--tr=", 5) == 0 || (strcmp(argv[i], "--tr") == 0 && i + 1 < argc)) {
			const char *value = argv[i][4] == '=' ? argv[i] + 5 : argv[++i];
			if ((main_tr_flag = config_bool_of(value)) < 0) {
				fprintf(stderr, "tern: --tr %s: not true or false (true, false, on, off, yes, no, 1, 0)\n", value);
				return 2;
			}
		} else if (strcmp(argv[i], "--import-pgbouncer") == 0 && i + 1 < argc) {
			return import_pgbouncer(argv[i + 1], stdout, stderr) == 0 ? 0 : 2;
		} else if (strcmp(argv[i], "--version") == 0) {
			printf("tern %s\n", TERN_VERSION);
			return 0;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			main_usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--help-config") == 0) {
			config_print_help(stdout);
			return 0;
		} else if (strcmp(argv[i], "--help-config=markdown") == 0) {
			config_print_markdown(stdout);
			return 0;
		} else if (strcmp(argv[i], "--man") == 0) {
			main_print_man(stdout);
			return 0;
		} else {
			fprintf(stderr, "tern: unknown argument \"%s\"\n", argv[i]);
			main_usage(stderr);
			return 2;
		}
	}
	if (!config_path) {
		main_usage(stderr);
		return 2;
	}
	static struct tern_config cfg;
	char err[1024];
	if (config_load(&cfg, config_path, err, sizeof(err)) < 0) {
		fprintf(stderr, "tern: %s\n", err);
		config_deinit(&cfg);
		return 2;
	}
	main_override(&cfg);
	if (listen_open_logfile(cfg.logfile) < 0) {
		fprintf(stderr, "tern: %s: [tern] logfile = %s: %s\n", config_path, cfg.logfile, strerror(errno));
		return 2;
	}
	base_log_level_current = cfg.log_level;
	if (main_tr_flag >= 0)
		TERN_INFO("[replay] tr_enabled = %s from the command line (--tr), whatever %s says", main_tr_flag ? "true" : "false",
			  config_path);
	static struct tern_runtime rt;
	static struct failover_log failovers;
	gates_init(&rt.gates);
	rt.config = &cfg;
	rt.console = &admin_console;
	rt.parts = &tern_parts;
	dispatch_init(tern_parts.observers);
	struct auth_file *auth_file = NULL;
	if (cfg.auth_file[0]) {
		if (auth_file_load(cfg.auth_file, &auth_file, err, sizeof(err)) < 0) {
			fprintf(stderr, "tern: [auth] auth_file: %s\n", err);
			return 2;
		}
		rt.auth_file = auth_file;
	} else if (cfg.auth_mode != CONFIG_AUTH_TRUST && cfg.auth_mode != CONFIG_AUTH_CERT && !cfg.auth_user[0]) {
		fprintf(stderr, "tern: %s: [auth] mode = %s needs [auth] auth_file with the users' passwords, or an auth_user\n",
			config_path, cfg.auth_mode == CONFIG_AUTH_MD5 ? "md5" : "scram");
		return 2;
	}
	struct tls_context *tls = NULL;
	if (main_tls_context(&cfg, &tls, err, sizeof(err)) < 0) {
		fprintf(stderr, "tern: %s: [tls] %s\n", config_path, err);
		return 2;
	}
	rt.tls = tls;

	/* Signals are taken by this thread alone, with sigwaitinfo; every thread inherits the mask. */
	sigset_t signals;
	sigemptyset(&signals);
	sigaddset(&signals, SIGINT);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct pool_opener *opener;
	static struct pool pool;
	struct pool_server *primary;
	struct server_tls *server_tls;
	char server_tls_err[256];
	if (server_tls_create(cfg.server_tls_ciphers, &server_tls, server_tls_err, sizeof(server_tls_err)) < 0) {
		fprintf(stderr, "tern: %s\n", server_tls_err);
		return 1;
	}
	rt.server_tls = server_tls_ops(server_tls);
	if (pool_opener_create(&opener, cfg.server_connect_timeout_ms, &server_auth_ops, rt.server_tls) < 0) {
		fprintf(stderr, "tern: could not create the pool thread\n");
		return 1;
	}
	struct pool_settings settings = main_pool_settings(&cfg);
	struct pool_hooks hooks = pool_opener_hooks(opener);
	if (pool_init(&pool, &settings, &hooks) < 0 || main_server_add(&pool, &cfg, "primary", cfg.primary_conninfo, &primary) < 0) {
		fprintf(stderr, "tern: could not start the pool\n");
		return 1;
	}
	primary->weight = cfg.primary_weight;
	primary->is_polar = cfg.primary_is_polar;
	for (uint32_t i = 0; i < cfg.extra_server_count; i++) {
		struct pool_server *server;
		if (main_server_add(&pool, &cfg, cfg.extra_servers[i].name, cfg.extra_servers[i].conninfo, &server) < 0) {
			fprintf(stderr, "tern: could not add server %s\n", cfg.extra_servers[i].name);
			return 1;
		}
		server->weight = cfg.extra_servers[i].weight;
		server->is_polar = cfg.extra_servers[i].is_polar;
	}
	if (pool_opener_start(opener, &pool) < 0) {
		fprintf(stderr, "tern: could not start the pool thread\n");
		return 1;
	}
	struct auth_query_settings lookups = main_auth_query_settings(&cfg, &pool, auth_file);
	if (auth_query_create(&rt.auth_query, &lookups) < 0) {
		fprintf(stderr, "tern: %s: [auth] auth_query or auth_user is too long (or no memory)\n", config_path);
		return 2;
	}
	rt.pool = &pool;
	rt.opener = opener;
	rt.primary = primary; /* until the monitor's first round says which server is the primary */
	rt.topology_changed = worker_topology_changed;
	failover_log_init(&failovers);
	rt.failovers = &failovers;
	/* Committed history: before the listeners, so an unwritable [journal] dir stops startup. */
	if (cfg.tr_enabled && journal_open(&rt.journal, &cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "tern: %s: %s\n", config_path, err);
		return 1;
	}
	static struct digest_shared digests;
	if (cfg.query_digests) {
		if (digest_shared_init(&digests) < 0) {
			fprintf(stderr, "tern: out of memory for the query digests\n");
			return 1;
		}
		rt.digests = &digests;
	}
	if (monitor_start(&rt.monitor, &rt) < 0) {
		fprintf(stderr, "tern: could not start the topology monitor\n");
		return 1;
	}
	if (shadow_start(&rt.shadow, &rt, err, sizeof(err)) < 0) {
		fprintf(stderr, "tern: %s: %s\n", config_path, err);
		return 1;
	}
	/* Each listen socket's endpoint, in listen_open_worker's order: the addresses, then the Unix socket. */
	for (uint32_t i = 0; i <= cfg.listen_count; i++) {
		char endpoint[CONFIG_LISTEN_HOST_SIZE + 300];
		bool is_tcp = i < cfg.listen_count;
		const char *host = is_tcp ? cfg.listens[i].host : cfg.unix_socket_dir;
		uint32_t port = is_tcp ? cfg.listens[i].port : cfg.listen_port;
		int len = snprintf(endpoint, sizeof(endpoint), "%s%s:%u", is_tcp ? "" : "unix:", host, port);
		rt.identity_hashes[i] = XXH3_64bits(endpoint, (size_t)TERN_MIN(len, (int)sizeof(endpoint) - 1));
	}

	if (params_tracked_init(&rt.tracked, cfg.track_extra_parameters) < 0) {
		fprintf(stderr, "tern: %s: [pool] track_extra_parameters: at most %u names in all\n", config_path,
			PARAMS_TRACKED_MAX);
		return 2;
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t count = cfg.workers ? cfg.workers : (uint32_t)(cpus > 0 ? cpus : 1);
	if (count > WORKER_COUNT_MAX) {
		fprintf(stderr, "tern: %s: [tern] workers: at most %u workers (cancel keys carry the worker in one byte)\n",
			config_path, WORKER_COUNT_MAX);
		return 2;
	}
	/* Another process on one of the addresses stops startup (a stale tern must not silently take half
	 * the clients), unless this is a deliberate rolling restart. */
	int unix_fd = -1;
	/* Before the listeners: whoever sees tern's port open finds the endpoint up too. */
	struct http_admin *http = NULL;
	if (cfg.http_listen[0]) {
		if (http_admin_start(&http, &rt, cfg.http_listen, err, sizeof(err)) < 0) {
			fprintf(stderr, "tern: %s\n", err);
			return 1;
		}
		TERN_INFO("admin HTTP endpoint on %s (/metrics, /api/status, /api/digests, POST /api/replay)", cfg.http_listen);
	}
	if ((!is_takeover && listen_check_free(&cfg, err, sizeof(err)) < 0) ||
	    listen_open_unix(&cfg, &unix_fd, err, sizeof(err)) < 0 ||
	    listen_write_pidfile(cfg.pidfile, is_takeover, err, sizeof(err)) < 0) {
		fprintf(stderr, "tern: %s: %s\n", config_path, err);
		return 1;
	}
	rt.workers = calloc(count, sizeof(*rt.workers));
	for (uint32_t i = 0; i < count; i++) {
		int fds[LISTEN_SOCKETS_MAX];
		int fd_count = listen_open_worker(&cfg, unix_fd, fds, err, sizeof(err));
		if (fd_count < 0) {
			fprintf(stderr, "tern: %s: %s\n", config_path, err);
			return 1;
		}
		rt.workers[i] = calloc(1, sizeof(struct worker));
		if (worker_start(rt.workers[i], &rt, i, fds, (uint32_t)fd_count, err, sizeof(err)) < 0) {
			fprintf(stderr, "tern: %s\n", err);
			return 1;
		}
		/* Release: workers already running read workers[i] once they see the count (main alone writes it). */
		__atomic_store_n(&rt.worker_count, rt.worker_count + 1, __ATOMIC_RELEASE);
	}
	if (unix_fd >= 0)
		close(unix_fd); /* each worker accepts on its own dup */
	char listening[CONFIG_LISTEN_MAX * (CONFIG_LISTEN_HOST_SIZE + 16)];
	size_t used = 0;
	for (uint32_t i = 0; i < cfg.listen_count && used < sizeof(listening); i++)
		used += (size_t)snprintf(listening + used, sizeof(listening) - used, "%s%s:%u", i ? ", " : "",
					 cfg.listens[i].host, cfg.listens[i].port);
	TERN_INFO("tern %s listening on %s%s%s with %u workers, %s pooling, primary \"%s\"%s", TERN_VERSION, listening,
		  cfg.unix_socket_dir[0] ? " and in " : "", cfg.unix_socket_dir, count,
		  cfg.pool_mode == CONFIG_POOL_TRANSACTION ? "transaction" : "session", cfg.primary_conninfo,
		  is_takeover ? " (a takeover: beside the tern already there)" : "");

	main_notify("READY=1\nSTATUS=accepting clients");

	/* SIGINT ends every session at once. SIGTERM drains: tern accepts no one and ends each session
	 * as soon as it holds no transaction open, then exits, or at shutdown_timeout, whatever is left. */
	uint64_t drain_deadline_ns = 0;
	static struct main_retired retired;
	for (;;) {
		struct timespec wait = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
		siginfo_t info;
		int sig = sigtimedwait(&signals, &info, drain_deadline_ns ? &wait : NULL);
		if (sig == SIGHUP) {
			/* Odd while reloading, even after: the admin RELOAD waits for a reload begun after it asked. */
			__atomic_add_fetch(&rt.reload_generation, 1, __ATOMIC_RELEASE);
			char reloading[64]; /* (systemd 253+ matches the reload by the time) */
			snprintf(reloading, sizeof(reloading), "RELOADING=1\nMONOTONIC_USEC=%" PRIu64,
				 base_now_ns() / 1000);
			main_notify(reloading);
			int rc = main_reload(&rt, opener, config_path, &retired);
			__atomic_store_n(&rt.reload_result, rc, __ATOMIC_RELAXED);
			__atomic_add_fetch(&rt.reload_generation, 1, __ATOMIC_RELEASE);
			main_notify(rc == 0 ? "READY=1\nSTATUS=accepting clients"
					    : "READY=1\nSTATUS=accepting clients; the last reload failed (see the log)");
			continue;
		}
		if (sig == SIGINT) {
			TERN_INFO("SIGINT: shutting down now");
			main_notify("STOPPING=1");
			break;
		}
		if (sig == SIGTERM && !drain_deadline_ns) {
			main_notify("STOPPING=1\nSTATUS=draining: accepting no new clients");
			TERN_INFO("SIGTERM: accepting no new clients; exiting when running transactions end "
				  "(shutdown_timeout %.1fs, SIGINT to stop at once)",
				  rt.config->shutdown_timeout_ms / 1000.0);
			drain_deadline_ns = base_now_ns() + rt.config->shutdown_timeout_ms * BASE_NS_PER_MS;
			/* A rolling restart: new connections go to the tern started with --takeover from now on. */
			int first_worker_fds[LISTEN_SOCKETS_MAX];
			for (uint32_t l = 0; l < rt.workers[0]->listener_count; l++)
				first_worker_fds[l] = rt.workers[0]->listeners[l].fd;
			if (listen_steer_away(&cfg, first_worker_fds, rt.worker_count) > 0)
				TERN_INFO("SIGTERM: another tern listens beside this one: new clients go to it");
			__atomic_store_n(&rt.draining, true, __ATOMIC_RELEASE);
			for (uint32_t i = 0; i < rt.worker_count; i++)
				worker_stop(rt.workers[i]);
			continue;
		}
		if (drain_deadline_ns) {
			uint32_t drained = 0;
			for (uint32_t i = 0; i < rt.worker_count; i++)
				drained += worker_is_drained(rt.workers[i]);
			if (drained == rt.worker_count) {
				TERN_INFO("drained: every session has ended");
				break;
			}
			if (base_now_ns() >= drain_deadline_ns) {
				TERN_WARN("shutdown_timeout reached with transactions still open; ending them");
				break;
			}
		}
	}
	__atomic_store_n(&rt.stopping, true, __ATOMIC_RELEASE);
	http_admin_stop(http); /* it reads the workers and the monitor */
	/* Before the workers stop: its last answers go to their mailboxes, which close at the join. */
	auth_query_destroy(rt.auth_query);
	for (uint32_t i = 0; i < rt.worker_count; i++)
		worker_stop(rt.workers[i]);
	for (uint32_t i = 0; i < rt.worker_count; i++)
		worker_join(rt.workers[i]);
	worker_finish_jobs(&rt);
	monitor_stop(rt.monitor);
	shadow_stop(rt.shadow); /* the workers and the HTTP thread have stopped */
	if (rt.digests)
		digest_shared_deinit(rt.digests); /* the workers and the HTTP thread have stopped */
	failover_log_deinit(&failovers);
	journal_close(rt.journal); /* the workers and the HTTP thread have stopped: the writer drains */
	/* The pool thread stops before pool_deinit (it must not touch what that frees) and before the
	 * workers are freed (a late answer to a parked request still lands in a worker's mailbox). */
	pool_opener_stop(opener);
	pool_deinit(&pool);
	pool_opener_destroy(opener);
	server_tls_destroy(server_tls);
	for (uint32_t i = 0; i < rt.worker_count; i++) {
		worker_deinit(rt.workers[i]); /* nothing mails a worker any more: the pool thread has stopped */
		for (uint32_t l = 0; l < rt.workers[i]->listener_count; l++)
			if (rt.workers[i]->listeners[l].fd >= 0)
				close(rt.workers[i]->listeners[l].fd);
		free(rt.workers[i]);
	}
	listen_close_unix(&cfg);
	listen_remove_pidfile(cfg.pidfile);
	free(rt.workers);
	if (rt.auth_file)
		auth_file_destroy((struct auth_file *)rt.auth_file);
	for (uint32_t i = 0; i < retired.auth_file_count; i++)
		auth_file_destroy(retired.auth_files[i]);
	tls_context_destroy((struct tls_context *)rt.tls);
	for (uint32_t i = 0; i < retired.tls_context_count; i++)
		tls_context_destroy(retired.tls_contexts[i]);
	params_tracked_deinit(&rt.tracked);
	gates_deinit(&rt.gates);
	config_deinit((struct tern_config *)rt.config);
	if (rt.config != &cfg)
		free((struct tern_config *)rt.config);
	for (uint32_t i = 0; i < retired.config_count; i++) {
		config_deinit(retired.configs[i]);
		if (retired.configs[i] != &cfg)
			free(retired.configs[i]);
	}
	return 0;
}
