/*
 * login.c — the server login of login.h: a socket, a startup packet, the answers core's auth ops give,
 * and what the server reports up to its first ReadyForQuery.
 */
#include "login.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#define LOGIN_PROTOCOL_3_0 196608u
#define LOGIN_HEADER_LEN 5u /* type byte and length */
/* libpq's defaults when neither the conninfo nor the environment names them (Debian's socket dir). */
static const char login_default_socket_dir[] = "/var/run/postgresql";
static const char login_default_port[] = "5432";

static void login_fail(struct pool_login *l, const char *sqlstate, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void login_fail(struct pool_login *l, const char *sqlstate, const char *fmt, ...)
{
	base_strlcpy(l->error.sqlstate, sqlstate, sizeof(l->error.sqlstate));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(l->error.message, sizeof(l->error.message), fmt, ap);
	va_end(ap);
}

/* Appends "name\0value\0" to the startup packet; false when it does not fit. */
static bool login_put_pair(struct pool_login *l, const char *name, const char *value)
{
	size_t a = strlen(name) + 1, b = strlen(value) + 1;
	if (l->out_len + a + b + 1 > sizeof(l->out))
		return false;
	memcpy(l->out + l->out_len, name, a);
	memcpy(l->out + l->out_len + a, value, b);
	l->out_len += (uint32_t)(a + b);
	return true;
}

int pool_conninfo_init(struct pool_conninfo *c, const char *conninfo, const char *const *replaced, char *err,
		       size_t err_size)
{
	memset(c, 0, sizeof(*c));
	char *parse_err = NULL;
	c->parsed = PQconninfoParse(conninfo, &parse_err);
	if (!c->parsed) {
		snprintf(err, err_size, "%s", parse_err ? parse_err : "out of memory parsing the server's conninfo");
		PQfreemem(parse_err);
		return -EINVAL;
	}
	for (PQconninfoOption *o = c->parsed; o->keyword; o++) {
		bool is_replaced = !o->val;
		for (const char *const *r = replaced; r && *r && !is_replaced; r++)
			is_replaced = strcmp(o->keyword, *r) == 0;
		if (!is_replaced)
			pool_conninfo_set(c, o->keyword, o->val);
	}
	return 0;
}

void pool_conninfo_set(struct pool_conninfo *c, const char *key, const char *value)
{
	if (!value || c->count == POOL_CONNINFO_KEYS_MAX)
		return;
	c->keys[c->count] = key;
	c->values[c->count++] = value;
	c->keys[c->count] = c->values[c->count] = NULL;
}

const char *pool_conninfo_get(const struct pool_conninfo *c, const char *key)
{
	for (const PQconninfoOption *o = c->parsed; o && o->keyword; o++)
		if (strcmp(o->keyword, key) == 0)
			return o->val && o->val[0] ? o->val : NULL;
	return NULL;
}

void pool_conninfo_deinit(struct pool_conninfo *c)
{
	if (c->parsed)
		PQconninfoFree(c->parsed);
	c->parsed = NULL;
}

/* The first entry of a libpq host list ("a,b" tries a then b; tern takes a). */
static void login_first_of_list(const char *list, char *out, size_t out_size)
{
	size_t n = strcspn(list, ",");
	snprintf(out, out_size, "%.*s", (int)TERN_MIN(n, out_size - 1), list);
}

static int login_resolve(struct pool_login *l, const struct pool_conninfo *options)
{
	const char *hostaddr = pool_conninfo_get(options, "hostaddr");
	const char *host = pool_conninfo_get(options, "host");
	const char *port = pool_conninfo_get(options, "port");
	char first_host[256], first_port[16];
	login_first_of_list(hostaddr ? hostaddr : host ? host : getenv("PGHOST") ? getenv("PGHOST") : login_default_socket_dir,
			    first_host, sizeof(first_host));
	login_first_of_list(port ? port : getenv("PGPORT") ? getenv("PGPORT") : login_default_port, first_port,
			    sizeof(first_port));
	if (!hostaddr && first_host[0] == '/') {
		struct sockaddr_un *un = (struct sockaddr_un *)&l->target.addr;
		un->sun_family = AF_UNIX;
		int n = snprintf(un->sun_path, sizeof(un->sun_path), "%s/.s.PGSQL.%s", first_host, first_port);
		if (n < 0 || (size_t)n >= sizeof(un->sun_path)) {
			login_fail(l, "08006", "the server's socket directory is too long");
			return -ENAMETOOLONG;
		}
		l->target.addr_len = (socklen_t)sizeof(*un);
		return 0;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = hostaddr ? AI_NUMERICHOST : 0};
	struct addrinfo *found = NULL;
	int rc = getaddrinfo(first_host, first_port, &hints, &found);
	if (rc != 0 || !found) {
		login_fail(l, "08006", "could not resolve the server's host name: %s", gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	memcpy(&l->target.addr, found->ai_addr, found->ai_addrlen);
	l->target.addr_len = found->ai_addrlen;
	freeaddrinfo(found);
	return 0;
}

static int login_build_startup(struct pool_login *l, const struct pool_conninfo *options,
			       const struct pool_login_who *who)
{
	const char *application_name = who->application_name ? who->application_name
							      : pool_conninfo_get(options, "application_name");
	const char *client_encoding = pool_conninfo_get(options, "client_encoding");
	l->out_len = 8;
	bool fits = login_put_pair(l, "user", who->user) && login_put_pair(l, "database", who->database) &&
		    login_put_pair(l, "application_name", application_name ? application_name : "tern") &&
		    (!client_encoding || strcmp(client_encoding, "auto") == 0 ||
		     login_put_pair(l, "client_encoding", client_encoding)) &&
		    (!who->options[0] || login_put_pair(l, "options", who->options)) &&
		    (!who->is_polar || login_put_pair(l, "_polar_send_xact", "on")); /* the XID-import profile */
	if (!fits) {
		login_fail(l, "54000", "the startup packet for the server is too long");
		return -E2BIG;
	}
	l->out[l->out_len++] = '\0';
	base_write_be32(l->out, l->out_len);
	base_write_be32(l->out + 4, LOGIN_PROTOCOL_3_0);
	return 0;
}

/* Whether the login asks for TLS, as libpq with the conninfo's sslmode (prefer when absent; allow tries
 * without first, which is all tern's own login does with it). */
static void login_tls_plan(struct pool_login *l, const struct pool_conninfo *options, bool *wants)
{
	const char *mode = pool_conninfo_get(options, "sslmode");
	l->is_tls_required = mode && (strcmp(mode, "require") == 0 || strncmp(mode, "verify-", 7) == 0);
	*wants = l->target.addr.ss_family != AF_UNIX &&
		 (!mode || (strcmp(mode, "disable") != 0 && strcmp(mode, "allow") != 0));
}

int pool_login_start(struct pool_login *l, const char *conninfo, const struct pool_login_who *who, const void *secret,
		     size_t secret_len, const struct pool_auth_ops *ops, const struct pool_tls_ops *tls)
{
	TERN_ASSERT(conninfo && who && who->user && who->database && who->options && secret &&
		    (secret_len > 0 || who->is_polar) && ops);
	memset(l, 0, offsetof(struct pool_login, out));
	l->fd = -1;
	l->ops = ops;
	l->tls_ops = tls;
	struct pool_conninfo options;
	char parse_err[160];
	if (pool_conninfo_init(&options, conninfo, NULL, parse_err, sizeof(parse_err)) < 0) {
		login_fail(l, "08006", "the server's conninfo is invalid: %s", parse_err);
		return -EINVAL;
	}
	int rc = login_resolve(l, &options);
	if (rc == 0)
		rc = login_build_startup(l, &options, who);
	if (rc == 0) {
		l->exchange = ops->begin(secret, secret_len);
		if (!l->exchange) {
			login_fail(l, "53200", "out of memory logging in to the server");
			rc = -ENOMEM;
		}
	}
	int family = l->target.addr.ss_family;
	if (rc == 0) {
		l->fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (l->fd < 0) {
			rc = -errno;
			login_fail(l, "08006", "could not create a socket for the server: %s", strerror(-rc));
		}
	}
	bool wants_tls = false;
	if (rc == 0)
		login_tls_plan(l, &options, &wants_tls);
	if (rc == 0 && wants_tls && tls) {
		const char *host = pool_conninfo_get(&options, "host");
		const char *hostaddr = pool_conninfo_get(&options, "hostaddr");
		char first_host[256];
		login_first_of_list(host ? host : hostaddr ? hostaddr : "", first_host, sizeof(first_host));
		l->tls = tls->login_begin(tls->ctx, &options, first_host, l->fd, &l->error);
		if (!l->tls)
			rc = -EPROTO;
	} else if (rc == 0 && wants_tls && l->is_tls_required) {
		login_fail(l, "08004", "TLS toward this server is required, and this login cannot make it");
		rc = -EPROTO;
	}
	pool_conninfo_deinit(&options);
	if (rc < 0) {
		pool_login_abandon(l);
		return rc;
	}
	if (family != AF_UNIX) { /* as libpq sets them */
		int one = 1;
		(void)setsockopt(l->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		(void)setsockopt(l->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	}
	l->phase = POOL_LOGIN_CONNECTING;
	if (connect(l->fd, (const struct sockaddr *)&l->target.addr, l->target.addr_len) == 0)
		l->phase = l->tls ? POOL_LOGIN_TLS_ASK : POOL_LOGIN_WRITING;
	else if (errno != EINPROGRESS && errno != EAGAIN) {
		rc = -errno;
		login_fail(l, "08006", "could not connect to the server: %s", strerror(-rc));
		pool_login_abandon(l);
		return rc;
	}
	return 0;
}

short pool_login_events(const struct pool_login *l)
{
	if (l->tls_events)
		return l->tls_events;
	return l->phase == POOL_LOGIN_READING || l->phase == POOL_LOGIN_TLS_ANSWER ? POLLIN : POLLOUT;
}

/* Queues a 'p' message with `body` as the next thing to send. */
static void login_queue_answer(struct pool_login *l, const uint8_t *body, size_t len)
{
	TERN_ASSERT(1 + 4 + len <= sizeof(l->out));
	l->out[0] = 'p';
	base_write_be32(l->out + 1, (uint32_t)(4 + len));
	memcpy(l->out + LOGIN_HEADER_LEN, body, len);
	l->out_len = (uint32_t)(LOGIN_HEADER_LEN + len);
	l->out_sent = 0;
	l->phase = POOL_LOGIN_WRITING;
}

/* The server's ErrorResponse as the client will see it: its SQLSTATE and message. */
static void login_take_error(struct pool_login *l, const uint8_t *body, uint32_t len)
{
	login_fail(l, "08006", "the server refused the login");
	for (uint32_t at = 0; at < len && body[at] != '\0';) {
		uint8_t field = body[at++];
		const uint8_t *end = memchr(body + at, '\0', len - at);
		if (!end)
			break;
		const char *value = (const char *)body + at;
		if (field == 'C')
			base_strlcpy(l->error.sqlstate, value, sizeof(l->error.sqlstate));
		else if (field == 'M')
			base_strlcpy(l->error.message, value, sizeof(l->error.message));
		at = (uint32_t)(end - body) + 1;
	}
}

/* One complete message. 1: ReadyForQuery; 0: go on; <0: failed. */
static int login_on_message(struct pool_login *l, uint8_t type, const uint8_t *body, uint32_t len)
{
	switch (type) {
	case 'R': {
		if (len < 4)
			break;
		uint32_t code = base_read_be32(body);
		uint8_t answer[POOL_LOGIN_OUT_MAX - LOGIN_HEADER_LEN];
		int n = l->ops->answer(l->exchange, code, body + 4, len - 4, answer, sizeof(answer), &l->error);
		if (n < 0)
			return -EACCES;
		TERN_ASSERT(n == 0 || code != POOL_AUTH_OK);
		if (n > 0)
			login_queue_answer(l, answer, (size_t)n);
		explicit_bzero(answer, (size_t)n);
		return 0;
	}
	case 'E':
		login_take_error(l, body, len);
		return -ECONNREFUSED;
	case 'S': {
		const uint8_t *name_end = memchr(body, '\0', len);
		if (!name_end || body[len - 1] != '\0')
			break;
		if (l->param_count < POOL_PARAMS_MAX) {
			struct pool_param *param = &l->params[l->param_count++];
			base_strlcpy(param->name, (const char *)body, sizeof(param->name));
			base_strlcpy(param->value, (const char *)name_end + 1, sizeof(param->value));
		}
		return 0;
	}
	case 'K':
		if (len < 8)
			break;
		l->target.backend_pid = base_read_be32(body);
		l->target.backend_secret = base_read_be32(body + 4);
		return 0;
	case 'Z':
		return 1;
	case 'N': /* a notice, or the answer to a protocol option we never ask for */
	case 'v':
		return 0;
	default:
		break;
	}
	login_fail(l, "08P01", "the server sent an unexpected message '%c' during the login", type);
	return -EPROTO;
}

/* Handles every complete message in l->in, stopping after one that needs an answer sent. */
static int login_take_messages(struct pool_login *l)
{
	uint32_t at = 0;
	int rc = 0;
	while (rc == 0 && l->phase == POOL_LOGIN_READING && l->in_len - at >= LOGIN_HEADER_LEN) {
		uint32_t length = base_read_be32(l->in + at + 1);
		if (length < 4 || length > sizeof(l->in) - 1) {
			login_fail(l, "08P01", "the server sent a login message of %u bytes", length);
			return -EPROTO;
		}
		if (l->in_len - at < 1 + length)
			break;
		rc = login_on_message(l, l->in[at], l->in + at + LOGIN_HEADER_LEN, length - 4);
		at += 1 + length;
	}
	memmove(l->in, l->in + at, l->in_len - at);
	l->in_len -= at;
	return rc;
}

/* Moves the login's bytes, in the clear or through its TLS: >0 bytes moved, 0 to wait (pool_login_events),
 * <0 failed with l->error set. */
static int login_io(struct pool_login *l, int op, uint8_t *data, uint32_t len)
{
	if (l->tls) {
		l->tls_events = 0;
		return l->tls_ops->login_io(l->tls, op, data, len, &l->tls_events, &l->error);
	}
	for (;;) {
		ssize_t n = op == POOL_TLS_WRITE ? send(l->fd, data, len, MSG_NOSIGNAL) : recv(l->fd, data, len, 0);
		if (n > 0)
			return (int)n;
		if (n == 0) { /* (a send of len > 0 never returns 0) */
			login_fail(l, "08006", "the server closed the connection during the login");
			return -ECONNRESET;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN)
			return 0;
		int rc = -errno;
		login_fail(l, "08006", "could not %s the server: %s", op == POOL_TLS_WRITE ? "write to" : "read from",
			   strerror(-rc));
		return rc;
	}
}

static int login_read(struct pool_login *l)
{
	for (;;) {
		int rc = login_take_messages(l);
		if (rc != 0 || l->phase == POOL_LOGIN_WRITING)
			return rc;
		rc = login_io(l, POOL_TLS_READ, l->in + l->in_len, sizeof(l->in) - l->in_len);
		if (rc <= 0)
			return rc;
		l->in_len += (uint32_t)rc;
	}
}

/* SSLRequest, the server's answer, the handshake: 1 once the login can write its startup packet, 0 to wait
 * (pool_login_events), <0 failed. */
static int login_tls_advance(struct pool_login *l)
{
	static const uint8_t ssl_request[8] = {0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}; /* 1234.5679 */
	while (l->phase == POOL_LOGIN_TLS_ASK) {
		ssize_t sent = send(l->fd, ssl_request + l->tls_asked, sizeof(ssl_request) - l->tls_asked, MSG_NOSIGNAL);
		if (sent < 0 && errno == EINTR)
			continue;
		if (sent < 0 && errno == EAGAIN)
			return 0;
		if (sent < 0) {
			int rc = -errno;
			login_fail(l, "08006", "could not write to the server: %s", strerror(-rc));
			return rc;
		}
		l->tls_asked += (uint8_t)sent;
		if (l->tls_asked == sizeof(ssl_request))
			l->phase = POOL_LOGIN_TLS_ANSWER;
	}
	if (l->phase == POOL_LOGIN_TLS_ANSWER) {
		uint8_t answer;
		ssize_t got = recv(l->fd, &answer, 1, 0);
		if (got < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (got <= 0) {
			login_fail(l, "08006", "the server closed the connection during the login");
			return -ECONNRESET;
		}
		if (answer == 'N' && l->is_tls_required) {
			login_fail(l, "08004", "server does not support SSL, but SSL was required");
			return -EPROTO;
		}
		if (answer == 'N') { /* prefer: in the clear */
			l->tls_ops->login_end(l->tls);
			l->tls = NULL;
			l->phase = POOL_LOGIN_WRITING;
			return 1;
		}
		if (answer != 'S') {
			login_fail(l, "08P01", "the server answered SSLRequest with neither S nor N");
			return -EPROTO;
		}
		l->phase = POOL_LOGIN_TLS_HANDSHAKE;
	}
	l->tls_events = 0;
	int rc = l->tls_ops->login_io(l->tls, POOL_TLS_HANDSHAKE, NULL, 0, &l->tls_events, &l->error);
	if (rc > 0)
		l->phase = POOL_LOGIN_WRITING;
	return rc;
}

int pool_login_advance(struct pool_login *l)
{
	TERN_ASSERT(l->fd >= 0);
	if (l->phase == POOL_LOGIN_CONNECTING) {
		int so_error = 0;
		socklen_t len = sizeof(so_error);
		if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &so_error, &len) < 0)
			so_error = errno;
		if (so_error != 0) {
			login_fail(l, "08006", "could not connect to the server: %s", strerror(so_error));
			return -so_error;
		}
		l->phase = l->tls ? POOL_LOGIN_TLS_ASK : POOL_LOGIN_WRITING;
	}
	if (l->phase == POOL_LOGIN_TLS_ASK || l->phase == POOL_LOGIN_TLS_ANSWER || l->phase == POOL_LOGIN_TLS_HANDSHAKE) {
		int rc = login_tls_advance(l);
		if (rc <= 0)
			return rc;
	}
	while (l->phase == POOL_LOGIN_WRITING) {
		int rc = login_io(l, POOL_TLS_WRITE, l->out + l->out_sent, l->out_len - l->out_sent);
		if (rc <= 0)
			return rc;
		l->out_sent += (uint32_t)rc;
		if (l->out_sent == l->out_len) {
			explicit_bzero(l->out, l->out_len);
			l->out_len = l->out_sent = 0;
			l->phase = POOL_LOGIN_READING;
		}
	}
	int rc = login_read(l);
	if (rc != 0 && l->exchange) {
		l->ops->end(l->exchange);
		l->exchange = NULL;
	}
	if (rc > 0 && l->in_len > 0) { /* nothing may follow ReadyForQuery before we ask */
		login_fail(l, "08P01", "the server sent more than its login");
		return -EPROTO;
	}
	return rc;
}

void pool_login_abandon(struct pool_login *l)
{
	if (l->tls) {
		l->tls_ops->login_end(l->tls);
		l->tls = NULL;
	}
	if (l->exchange) {
		l->ops->end(l->exchange);
		l->exchange = NULL;
	}
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}

int pool_login_cancel(const struct pool_raw_cancel *target, uint64_t timeout_ms, char *err, size_t err_size)
{
	int fd = socket(target->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int rc = 0;
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	if (connect(fd, (const struct sockaddr *)&target->addr, target->addr_len) < 0) {
		if (errno != EINPROGRESS && errno != EAGAIN) {
			rc = -errno;
			goto out;
		}
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int so_error = 0;
		socklen_t len = sizeof(so_error);
		if (poll(&p, 1, (int)timeout_ms) <= 0) {
			rc = -ETIMEDOUT;
			goto out;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) < 0 || so_error != 0) {
			rc = -(so_error ? so_error : errno);
			goto out;
		}
	}
	uint8_t packet[16];
	base_write_be32(packet, sizeof(packet));
	base_write_be32(packet + 4, 80877102u); /* CancelRequest */
	base_write_be32(packet + 8, target->backend_pid);
	base_write_be32(packet + 12, target->backend_secret);
	if (send(fd, packet, sizeof(packet), MSG_NOSIGNAL) != (ssize_t)sizeof(packet))
		rc = -EIO;
	else { /* the server closes once it has read the request; wait for that, as libpq does */
		struct pollfd p = {.fd = fd, .events = POLLIN};
		(void)poll(&p, 1, (int)timeout_ms);
	}
out:
	if (rc < 0)
		snprintf(err, err_size, "could not send a cancel request to the server: %s", strerror(-rc));
	if (fd >= 0)
		close(fd);
	return rc;
}
