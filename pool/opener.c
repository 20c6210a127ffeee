#include "opener.h"

#include "login.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* Connections being opened at once; more wait in the job queue. Bounds the poll set. */
#define OPENER_CONNECTING_MAX 64u
/* FREE connections whose sockets are watched per pass; past this, the rest wait for the next pass. */
#define OPENER_WATCH_MAX 1024u
/* How often FREE sockets are re-listed and min_pool_size checked without any other wake-up. */
#define OPENER_PASS_MS 1000
/* A cancel of a connection tern logged in to itself waits this long for the server's socket. */
#define OPENER_CANCEL_TIMEOUT_MS 5000u
/* The ParameterStatus names PostgreSQL reports at startup; libpq has no way to list them. */
static const char *const opener_param_names[] = {
	"application_name", "client_encoding", "DateStyle", "default_transaction_read_only", "in_hot_standby",
	"integer_datetimes", "IntervalStyle", "is_superuser", "server_encoding", "server_version",
	"session_authorization", "standard_conforming_strings", "TimeZone",
};
static_assert(TERN_ARRAY_LEN(opener_param_names) <= POOL_PARAMS_MAX, "params fit a connection");

struct opener_job {
	struct base_list link;
	struct pool_server *server;
	struct pool_db *db;
	struct pool_conn *conn; /* a close or cancel job when set */
	bool is_cancel;
	bool is_polar; /* the server's profile when the open began: the connection's */
};

struct opener_connecting {
	struct opener_job *job;
	PGconn *pgconn;
	struct pool_login *login; /* instead of pgconn, for a key with only a secret */
	PostgresPollingStatusType status;
	uint64_t deadline_ns;
};

struct pool_opener {
	pthread_t thread;
	bool thread_started;
	struct pool *pool;
	pthread_mutex_t lock;
	struct base_list jobs; /* opens and closes, in order */
	bool stopping;
	int wake_fd;
	uint64_t connect_timeout_ms;
	const struct pool_auth_ops *auth;
	const struct pool_tls_ops *tls;
	struct opener_connecting connecting[OPENER_CONNECTING_MAX];
	uint32_t connecting_count;
};

static void opener_wake(struct pool_opener *opener)
{
	uint64_t one = 1;
	ssize_t n = write(opener->wake_fd, &one, sizeof(one));
	(void)n;
}

static void opener_push(struct pool_opener *opener, struct opener_job *job)
{
	pthread_mutex_lock(&opener->lock);
	base_list_insert_tail(&opener->jobs, &job->link);
	pthread_mutex_unlock(&opener->lock);
	opener_wake(opener);
}

static void opener_hook_open(struct pool *pool, struct pool_server *server, struct pool_db *db)
{
	struct pool_opener *opener = pool->hooks.ctx;
	struct opener_job *job = calloc(1, sizeof(*job));
	if (!job) {
		struct pool_error err = {"53200", "out of memory opening a server connection"};
		pool_open_finished(pool, server, db, NULL, &err, base_now_ns());
		return;
	}
	job->server = server;
	job->db = db;
	opener_push(opener, job);
}

static void opener_hook_close(struct pool *pool, struct pool_conn *conn)
{
	struct pool_opener *opener = pool->hooks.ctx;
	struct opener_job *job = calloc(1, sizeof(*job));
	if (!job || !opener->thread_started) {
		free(job);
		pool_conn_free(conn); /* no thread to hand it to: PQfinish here, never on a worker's hot path */
		return;
	}
	job->conn = conn;
	opener_push(opener, job);
}

int pool_opener_cancel(struct pool_opener *opener, struct pool_conn *conn)
{
	struct opener_job *job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->conn = conn;
	job->is_cancel = true;
	opener_push(opener, job);
	return 0;
}

int pool_opener_create(struct pool_opener **out, uint64_t connect_timeout_ms, const struct pool_auth_ops *auth,
		       const struct pool_tls_ops *tls)
{
	struct pool_opener *opener = calloc(1, sizeof(*opener));
	if (!opener)
		return -ENOMEM;
	base_list_init(&opener->jobs);
	pthread_mutex_init(&opener->lock, NULL);
	opener->connect_timeout_ms = connect_timeout_ms;
	opener->auth = auth;
	opener->tls = tls;
	opener->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (opener->wake_fd < 0) {
		int rc = -errno;
		free(opener);
		return rc;
	}
	*out = opener;
	return 0;
}

struct pool_hooks pool_opener_hooks(struct pool_opener *opener)
{
	return (struct pool_hooks){.open = opener_hook_open, .close = opener_hook_close, .ctx = opener};
}

void pool_opener_set_connect_timeout(struct pool_opener *opener, uint64_t connect_timeout_ms)
{
	__atomic_store_n(&opener->connect_timeout_ms, connect_timeout_ms, __ATOMIC_RELAXED);
}

void pool_conn_free(struct pool_conn *conn)
{
	if (conn->extra_free)
		conn->extra_free(conn->extra);
	if (conn->cancel)
		PQfreeCancel(conn->cancel);
	if (conn->tls)
		conn->tls_close(conn->tls, conn->fd); /* before PQfinish, whose own goodbye then goes nowhere */
	if (conn->pgconn)
		PQfinish(conn->pgconn); /* closes conn->fd */
	if (conn->raw_cancel) {
		free(conn->raw_cancel);
		close(conn->fd);
	}
	free(conn);
}

int pool_conn_cancel(struct pool_conn *conn, char *err, size_t err_size)
{
	if (conn->raw_cancel)
		return pool_login_cancel(conn->raw_cancel, OPENER_CANCEL_TIMEOUT_MS, err, err_size);
	if (!conn->cancel)
		return -ENOTCONN;
	return PQcancel(conn->cancel, err, (int)err_size) ? 0 : -EIO;
}

void pool_error_from_libpq(const char *message, struct pool_error *out)
{
	static const struct {
		const char *needle;
		const char *sqlstate;
	} known[] = {
		{"does not exist", "3D000"}, /* database; a role is matched first below */
		{"password authentication failed", "28P01"},
		{"no pg_hba.conf entry", "28000"},
		{"too many clients", "53300"},
		{"too many connections", "53300"},
		{"the database system is starting up", "57P03"},
		{"the database system is shutting down", "57P03"},
		{"the database system is in recovery mode", "57P03"},
		{"timeout expired", "08006"},
	};
	/* libpq's own words when TLS toward the server failed as configured, not for want of a server (not
	 * retried); never a FATAL of the server's, which says what it refused itself. */
	static const char *const tls_refusals[] = {
		"certificate verify failed", "does not match host name", "root certificate", "certificate file",
		"private key", "server does not support SSL", "unsupported protocol", "no protocols available",
		"alert protocol version", "alert handshake failure", "alert unknown ca", "alert certificate",
		"alert bad certificate",
	};
	const char *fatal = strstr(message, "FATAL:  ");
	const char *text = fatal ? fatal + 8 : message;
	/* libpq names the server's address ("connection to server at \"h\", port p failed: "); a client is
	 * told what failed, never where the server is. */
	const char *failed = strstr(text, " failed: ");
	bool is_connect_failure = !fatal && strncmp(text, "connection to server ", 21) == 0 && failed;
	if (is_connect_failure)
		text = failed + 9;
	if (strncmp(text, "fe_sendauth: no password supplied", 33) == 0) {
		base_strlcpy(out->sqlstate, "28P01", sizeof(out->sqlstate));
		base_strlcpy(out->message,
			     "the server asks for a password and tern has none for this user: put the password, or the "
			     "server's SCRAM secret (pg_authid.rolpassword), in auth_file",
			     sizeof(out->message));
		return;
	}
	snprintf(out->message, sizeof(out->message), "%s%s", is_connect_failure ? "could not connect to the server: " : "",
		 text);
	char *newline = strchr(out->message, '\n');
	if (newline)
		*newline = '\0';
	base_strlcpy(out->sqlstate, "08006", sizeof(out->sqlstate));
	if (strncmp(text, "role \"", 6) == 0 && strstr(text, "does not exist")) {
		base_strlcpy(out->sqlstate, "28000", sizeof(out->sqlstate));
		return;
	}
	for (size_t i = 0; i < TERN_ARRAY_LEN(tls_refusals) && !fatal; i++) {
		if (strstr(text, tls_refusals[i])) { /* (before "does not exist": a root certificate file's) */
			base_strlcpy(out->sqlstate, "08004", sizeof(out->sqlstate));
			return;
		}
	}
	for (size_t i = 0; i < TERN_ARRAY_LEN(known); i++) {
		if (strstr(text, known[i].needle)) {
			base_strlcpy(out->sqlstate, known[i].sqlstate, sizeof(out->sqlstate));
			return;
		}
	}
}

/* Adds a login to the connecting set; its deadline starts now. */
static struct opener_connecting *opener_add_connecting(struct pool_opener *opener, struct opener_job *job)
{
	TERN_ASSERT(opener->connecting_count < OPENER_CONNECTING_MAX);
	struct opener_connecting *c = &opener->connecting[opener->connecting_count++];
	*c = (struct opener_connecting){.job = job, .status = PGRES_POLLING_WRITING};
	uint64_t timeout_ms = __atomic_load_n(&opener->connect_timeout_ms, __ATOMIC_RELAXED);
	c->deadline_ns = base_now_ns() + timeout_ms * BASE_NS_PER_MS;
	return c;
}

static void opener_fail_job(struct pool_opener *opener, struct opener_job *job, const struct pool_error *err)
{
	TERN_WARN("could not open a connection to server %s for %s/%s: %s (%s)", job->server->name, job->db->user,
		  job->db->database, err->message, err->sqlstate);
	pool_open_finished(opener->pool, job->server, job->db, NULL, err, base_now_ns());
	free(job);
}

/* A key with no plaintext password but a secret of core's logs in without libpq (login.h), unless the
 * server's conninfo brings a password or passfile of its own. True when that path took the job. */
static bool opener_start_raw_login(struct pool_opener *opener, struct opener_job *job, const struct pool_conninfo *c)
{
	/* libpq cannot send the profile's startup parameter: tern logs in itself. */
	bool is_polar = job->is_polar = __atomic_load_n(&job->server->is_polar, __ATOMIC_ACQUIRE);
	if (!opener->auth || job->db->password || pool_conninfo_get(c, "password") || pool_conninfo_get(c, "passfile")) {
		if (!is_polar)
			return false;
		struct pool_error err = {"28000", "a profile=polar server is logged in to by tern itself, with the "
						  "user's secret from auth_file (or trust), not a password in the "
						  "conninfo or [databases]"};
		opener_fail_job(opener, job, &err);
		return true;
	}
	uint8_t secret[POOL_SECRET_MAX];
	size_t secret_len = pool_db_copy_secret(opener->pool, job->db, secret);
	if (secret_len == 0 && !is_polar)
		return false;
	struct pool_login *login = malloc(sizeof(*login));
	if (!login) {
		struct pool_error err = {"53200", "out of memory opening a server connection"};
		opener_fail_job(opener, job, &err);
		return true;
	}
	struct pool_login_who who = {.user = job->db->user, .database = job->db->database, .options = job->db->options,
				     .is_polar = is_polar};
	int rc = pool_login_start(login, job->server->conninfo, &who, secret, secret_len, opener->auth, opener->tls);
	explicit_bzero(secret, sizeof(secret));
	if (rc < 0) {
		opener_fail_job(opener, job, &login->error);
		free(login);
		return true;
	}
	opener_add_connecting(opener, job)->login = login;
	return true;
}

static void opener_start_connect(struct pool_opener *opener, struct opener_job *job)
{
	static const char *const replaced[] = {"user",	     "dbname",		       "password",
					       "options",    "gssencmode", "fallback_application_name", NULL};
	struct pool_db *db = job->db;
	struct pool_error err;
	struct pool_conninfo c;
	if (!pool_open_begin(opener->pool, job->server, db)) {
		free(job); /* nobody waits for it any more */
		return;
	}
	if (pool_conninfo_init(&c, job->server->conninfo, replaced, err.message, sizeof(err.message)) < 0) {
		pool_error_from_libpq(err.message, &err);
		opener_fail_job(opener, job, &err);
		return;
	}
	if (opener_start_raw_login(opener, job, &c)) {
		pool_conninfo_deinit(&c);
		return;
	}
	pool_conninfo_set(&c, "user", db->user);
	pool_conninfo_set(&c, "dbname", db->database);
	pool_conninfo_set(&c, "password", db->password ? db->password : pool_conninfo_get(&c, "password"));
	pool_conninfo_set(&c, "options", db->options[0] ? db->options : NULL);
	/* TLS as the conninfo says (config.c put [tls] server_tls_* in it): the state is tern's after the
	 * login (opener_conn_from). GSSAPI encryption could not follow the socket into the workers. */
	pool_conninfo_set(&c, "gssencmode", "disable");
	pool_conninfo_set(&c, "fallback_application_name", "tern");
	PGconn *pgconn = PQconnectStartParams(c.keys, c.values, 0);
	pool_conninfo_deinit(&c);
	if (!pgconn || PQstatus(pgconn) == CONNECTION_BAD) {
		pool_error_from_libpq(pgconn ? PQerrorMessage(pgconn) : "out of memory", &err);
		if (pgconn)
			PQfinish(pgconn);
		opener_fail_job(opener, job, &err);
		return;
	}
	opener_add_connecting(opener, job)->pgconn = pgconn;
}

/* Where the connection goes, for SHOW SERVERS; zeroed when the socket cannot say. */
static void opener_note_addresses(struct pool_conn *conn)
{
	socklen_t len = sizeof(conn->peer_addr);
	if (getpeername(conn->fd, (struct sockaddr *)&conn->peer_addr, &len) < 0)
		memset(&conn->peer_addr, 0, sizeof(conn->peer_addr));
	len = sizeof(conn->local_addr);
	if (getsockname(conn->fd, (struct sockaddr *)&conn->local_addr, &len) < 0)
		memset(&conn->local_addr, 0, sizeof(conn->local_addr));
}

/* The pool_conn of a finished login: libpq's handle (and its TLS state, made tern's), or the socket of
 * tern's own login. NULL with `err` set (the login is then closed by the caller). */
static struct pool_conn *opener_conn_from(struct pool_opener *opener, const struct opener_connecting *c,
					  struct pool_error *err)
{
	struct pool_conn *conn = calloc(1, sizeof(*conn));
	if (!conn) {
		pool_error_from_libpq("out of memory", err);
		return NULL;
	}
	if (c->login) {
		conn->raw_cancel = malloc(sizeof(*conn->raw_cancel));
		if (!conn->raw_cancel) {
			free(conn);
			pool_error_from_libpq("out of memory", err);
			return NULL;
		}
		if (c->login->tls) { /* the login's reference goes; the adopted state keeps its own */
			conn->tls = opener->tls->adopt(opener->tls->ctx, c->login->tls, conn->tls_name, sizeof(conn->tls_name),
						       err);
			opener->tls->login_end(c->login->tls);
			c->login->tls = NULL;
			if (!conn->tls) {
				free(conn->raw_cancel);
				free(conn);
				return NULL;
			}
			conn->tls_close = opener->tls->close;
		}
		*conn->raw_cancel = c->login->target;
		conn->fd = c->login->fd;
		conn->backend_pid = c->login->target.backend_pid;
		conn->param_count = c->login->param_count;
		memcpy(conn->params, c->login->params, conn->param_count * sizeof(conn->params[0]));
		opener_note_addresses(conn);
		return conn;
	}
	if (PQsslInUse(c->pgconn)) {
		TERN_ASSERT(opener->tls != NULL);
		conn->tls = opener->tls->adopt(opener->tls->ctx, PQsslStruct(c->pgconn, "OpenSSL"), conn->tls_name,
					       sizeof(conn->tls_name), err);
		if (!conn->tls) {
			free(conn);
			return NULL;
		}
		conn->tls_close = opener->tls->close;
	}
	conn->fd = PQsocket(c->pgconn);
	conn->pgconn = c->pgconn;
	conn->cancel = PQgetCancel(c->pgconn);
	conn->backend_pid = (uint32_t)PQbackendPID(c->pgconn);
	for (size_t p = 0; p < TERN_ARRAY_LEN(opener_param_names); p++) {
		const char *value = PQparameterStatus(c->pgconn, opener_param_names[p]);
		if (!value)
			continue;
		struct pool_param *param = &conn->params[conn->param_count++];
		base_strlcpy(param->name, opener_param_names[p], sizeof(param->name));
		base_strlcpy(param->value, value, sizeof(param->value));
	}
	opener_note_addresses(conn);
	return conn;
}

static bool opener_is_connected(const struct opener_connecting *c)
{
	return c->login ? c->status == PGRES_POLLING_OK : PQstatus(c->pgconn) == CONNECTION_OK;
}

/* Finishes connecting[i] (success or failure) and removes it from the array. */
static void opener_finish_connect(struct pool_opener *opener, uint32_t i, const char *timeout_reason)
{
	struct opener_connecting c = opener->connecting[i];
	opener->connecting[i] = opener->connecting[--opener->connecting_count];
	struct opener_job *job = c.job;
	struct pool_error err;
	if (!timeout_reason && opener_is_connected(&c)) {
		struct pool_conn *conn = opener_conn_from(opener, &c, &err);
		if (conn) {
			conn->is_polar = job->is_polar;
			free(c.login);
			pool_db_set_params(opener->pool, job->db, conn->params, conn->param_count);
			TERN_DEBUG("opened server connection pid %u to %s for %s/%s", conn->backend_pid,
				   job->server->name, job->db->user, job->db->database);
			pool_open_finished(opener->pool, job->server, job->db, conn, NULL, base_now_ns());
			free(job);
			return;
		}
	} else if (timeout_reason) {
		pool_error_from_libpq(timeout_reason, &err);
		base_strlcpy(err.sqlstate, "08006", sizeof(err.sqlstate));
	} else if (c.login) {
		err = c.login->error;
	} else {
		pool_error_from_libpq(PQerrorMessage(c.pgconn), &err);
	}
	if (c.login) {
		pool_login_abandon(c.login);
		free(c.login);
	} else {
		PQfinish(c.pgconn);
	}
	opener_fail_job(opener, job, &err);
}

static void opener_take_jobs(struct pool_opener *opener)
{
	pthread_mutex_lock(&opener->lock);
	struct base_list jobs;
	base_list_init(&jobs);
	/* Closes and cancels all run now, in order (a cancel queued before its connection's close runs
	 * first, so it never meets a freed connection); opens only while the connecting set has room. */
	struct base_list *node, *tmp;
	uint32_t room = OPENER_CONNECTING_MAX - opener->connecting_count;
	base_list_for_each_safe(node, tmp, &opener->jobs)
	{
		struct opener_job *job = TERN_CONTAINER_OF(node, struct opener_job, link);
		if (!job->conn) {
			if (room == 0)
				continue;
			room--;
		}
		base_list_remove(node);
		base_list_insert_tail(&jobs, node);
	}
	pthread_mutex_unlock(&opener->lock);
	while ((node = base_list_pop_head(&jobs)) != NULL) {
		struct opener_job *job = TERN_CONTAINER_OF(node, struct opener_job, link);
		if (job->is_cancel) {
			char err[256];
			if (pool_conn_cancel(job->conn, err, sizeof(err)) < 0)
				TERN_WARN("cancel of server pid %u failed: %s", job->conn->backend_pid, err);
			free(job);
		} else if (job->conn) {
			pool_conn_free(job->conn);
			free(job);
		} else {
			opener_start_connect(opener, job);
		}
	}
}

struct opener_watch {
	struct pool_conn *conn;
};

static uint32_t opener_list_free(struct pool_opener *opener, struct pollfd *fds, struct opener_watch *watch)
{
	uint32_t n = 0;
	struct pool *pool = opener->pool;
	for (uint32_t s = 0; s < pool->server_count; s++) {
		struct pool_server *server = &pool->servers[s];
		pthread_mutex_lock(&server->lock);
		struct base_list *node, *tmp;
		base_list_for_each_safe(node, tmp, &server->free_conns)
		{
			if (n == OPENER_WATCH_MAX)
				break;
			struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
			/* Only a peer's close is asked for: data on a connection a worker took since the
			 * list was made must not look like a failure. */
			fds[n] = (struct pollfd){.fd = conn->fd, .events = POLLRDHUP};
			watch[n].conn = conn;
			n++;
		}
		pthread_mutex_unlock(&server->lock);
	}
	return n;
}

static void *opener_main(void *arg)
{
	struct pool_opener *opener = arg;
	static struct pollfd fds[1 + OPENER_CONNECTING_MAX + OPENER_WATCH_MAX];
	static struct opener_watch watch[OPENER_WATCH_MAX];
	uint64_t next_warm_ns = 0;
	for (;;) {
		opener_take_jobs(opener);
		pthread_mutex_lock(&opener->lock);
		bool is_stopping = opener->stopping;
		bool stopping = is_stopping && base_list_is_empty(&opener->jobs);
		pthread_mutex_unlock(&opener->lock);
		if (stopping) {
			/* Shutting down: logins still under way are abandoned, not waited for. */
			while (opener->connecting_count > 0)
				opener_finish_connect(opener, opener->connecting_count - 1, "tern is shutting down");
			break;
		}
		uint64_t now = base_now_ns();
		if (now >= next_warm_ns && !is_stopping) {
			(void)pool_expire(opener->pool, now);
			(void)pool_warm(opener->pool);
			next_warm_ns = now + (uint64_t)OPENER_PASS_MS * BASE_NS_PER_MS;
		}
		int timeout_ms = OPENER_PASS_MS;
		uint32_t nfds = 0;
		fds[nfds++] = (struct pollfd){.fd = opener->wake_fd, .events = POLLIN};
		for (uint32_t i = 0; i < opener->connecting_count; i++) {
			struct opener_connecting *c = &opener->connecting[i];
			short events = c->login ? pool_login_events(c->login)
				       : c->status == PGRES_POLLING_READING ? POLLIN
									    : POLLOUT;
			int fd = c->login ? c->login->fd : PQsocket(c->pgconn);
			fds[nfds++] = (struct pollfd){.fd = fd, .events = events};
			int64_t left_ms = ((int64_t)c->deadline_ns - (int64_t)now) / (int64_t)BASE_NS_PER_MS;
			timeout_ms = (int)TERN_MAX(0, TERN_MIN((int64_t)timeout_ms, left_ms + 1));
		}
		uint32_t connecting_fds = nfds;
		uint32_t watched = opener_list_free(opener, fds + nfds, watch);
		nfds += watched;
		int ready = poll(fds, nfds, timeout_ms);
		if (ready < 0 && errno != EINTR)
			TERN_ERROR("pool thread poll: %s", strerror(errno));
		if (fds[0].revents) {
			uint64_t value;
			ssize_t r = read(opener->wake_fd, &value, sizeof(value));
			(void)r;
		}
		now = base_now_ns();
		/* Walk backwards: finishing one moves the last entry into its place. */
		for (uint32_t i = opener->connecting_count; i-- > 0;) {
			struct opener_connecting *c = &opener->connecting[i];
			if (fds[1 + i].revents && c->login) {
				int rc = pool_login_advance(c->login);
				if (rc != 0) {
					c->status = rc > 0 ? PGRES_POLLING_OK : PGRES_POLLING_FAILED;
					opener_finish_connect(opener, i, NULL);
					continue;
				}
			} else if (fds[1 + i].revents) {
				c->status = PQconnectPoll(c->pgconn);
				if (c->status == PGRES_POLLING_OK || c->status == PGRES_POLLING_FAILED) {
					opener_finish_connect(opener, i, NULL);
					continue;
				}
			}
			if (now >= c->deadline_ns)
				opener_finish_connect(opener, i,
						      "server_connect_timeout: the server did not complete the login in time");
		}
		for (uint32_t i = 0; i < watched; i++) {
			struct pollfd *p = &fds[connecting_fds + i];
			if (!(p->revents & (POLLRDHUP | POLLHUP | POLLERR)))
				continue;
			struct pool_conn *conn = watch[i].conn;
			if (pool_conn_remove_if_free(opener->pool, conn)) {
				TERN_INFO("server %s closed idle connection pid %u", conn->server->name, conn->backend_pid);
				/* Through the queue: a cancel queued for this connection earlier runs first. */
				opener_hook_close(opener->pool, conn);
			}
		}
	}
	return NULL;
}

int pool_opener_start(struct pool_opener *opener, struct pool *pool)
{
	opener->pool = pool;
	int rc = pthread_create(&opener->thread, NULL, opener_main, opener);
	if (rc != 0)
		return -rc;
	opener->thread_started = true;
	return 0;
}

void pool_opener_stop(struct pool_opener *opener)
{
	if (!opener->thread_started)
		return;
	pthread_mutex_lock(&opener->lock);
	opener->stopping = true;
	pthread_mutex_unlock(&opener->lock);
	opener_wake(opener);
	pthread_join(opener->thread, NULL);
	opener->thread_started = false; /* from now on the close hook frees on the caller's thread */
}

void pool_opener_destroy(struct pool_opener *opener)
{
	pool_opener_stop(opener);
	struct base_list *node;
	while ((node = base_list_pop_head(&opener->jobs)) != NULL) {
		struct opener_job *job = TERN_CONTAINER_OF(node, struct opener_job, link);
		if (job->conn && !job->is_cancel)
			pool_conn_free(job->conn);
		free(job);
	}
	close(opener->wake_fd);
	pthread_mutex_destroy(&opener->lock);
	free(opener);
}
