/*
 * monitor_conn.c — the monitor's connection of monitor_conn.h: libpq, or tern's own login and a minimal
 * reader of one simple Query's answer.
 */
#include "monitor_conn.h"

#include "pool/login.h"
#include "pool/opener.h"
#include "core/proto.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct monitor_conn {
	PGconn *pg; /* libpq's; or, for tern's own login: */
	int fd;
	void *tls; /* over TLS (the login's, login.h): its ops */
	const struct pool_tls_ops *tls_ops;
	uint32_t version;
	uint64_t timeout_ms;
	uint8_t in[MONITOR_CONN_IN_MAX];
	uint32_t in_len;
};

/* A failed login's SQLSTATE: class 28 (the credential) is -EACCES, anything else a server not there. */
static int monitor_conn_failed(const struct pool_error *err)
{
	return strncmp(err->sqlstate, "28", 2) == 0 ? -EACCES : -ECONNREFUSED;
}

/* "15.18 (Debian 15.18-0+deb12u1)" as 150018, "9.6.24" as 90624; 0 when it is none of those. */
static uint32_t monitor_conn_parse_version(const char *text)
{
	unsigned major = 0, minor = 0, patch = 0;
	int n = sscanf(text, "%u.%u.%u", &major, &minor, &patch);
	if (n < 1 || major == 0 || major > 999)
		return 0;
	if (major >= 10)
		return major * 10000u + (n >= 2 ? TERN_MIN(minor, 9999u) : 0);
	return major * 10000u + TERN_MIN(minor, 99u) * 100u + TERN_MIN(patch, 99u);
}

static int monitor_conn_open_libpq(struct monitor_conn *c, const struct monitor_login *login, struct pool_error *err)
{
	static const char *const replaced[] = {"user", "dbname", "password", "connect_timeout",
					       "fallback_application_name", NULL};
	struct pool_conninfo params;
	if (pool_conninfo_init(&params, login->conninfo, replaced, err->message, sizeof(err->message)) < 0) {
		base_strlcpy(err->sqlstate, "08006", sizeof(err->sqlstate));
		return -EINVAL;
	}
	char timeout_s[24];
	snprintf(timeout_s, sizeof(timeout_s), "%" PRIu64, TERN_MAX((login->timeout_ms + 999) / 1000, 1u));
	pool_conninfo_set(&params, "user", login->user);
	pool_conninfo_set(&params, "password", login->password ? login->password : pool_conninfo_get(&params, "password"));
	pool_conninfo_set(&params, "dbname", "postgres");
	pool_conninfo_set(&params, "connect_timeout", timeout_s);
	pool_conninfo_set(&params, "fallback_application_name", MONITOR_CONN_APPLICATION_NAME);
	c->pg = PQconnectdbParams(params.keys, params.values, 0);
	pool_conninfo_deinit(&params);
	if (!c->pg) {
		*err = (struct pool_error){"53200", "out of memory connecting to the server"};
		return -ENOMEM;
	}
	if (PQstatus(c->pg) != CONNECTION_OK) {
		pool_error_from_libpq(PQerrorMessage(c->pg), err);
		PQfinish(c->pg);
		c->pg = NULL;
		return monitor_conn_failed(err);
	}
	c->version = (uint32_t)PQserverVersion(c->pg);
	return 0;
}

/* Waits for `events` on c->fd until deadline_ns: 0, or -ETIMEDOUT / -errno. */
static int monitor_conn_wait(int fd, short events, uint64_t deadline_ns)
{
	for (;;) {
		uint64_t now = base_now_ns();
		if (now >= deadline_ns)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int ms = (int)TERN_MIN((deadline_ns - now + BASE_NS_PER_MS - 1) / BASE_NS_PER_MS, (uint64_t)INT32_MAX);
		int n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int monitor_conn_open_own(struct monitor_conn *c, const struct monitor_login *login, struct pool_error *err)
{
	struct pool_login *l = malloc(sizeof(*l));
	if (!l) {
		*err = (struct pool_error){"53200", "out of memory connecting to the server"};
		return -ENOMEM;
	}
	struct pool_login_who who = {.user = login->user, .database = "postgres", .options = "",
				     .application_name = MONITOR_CONN_APPLICATION_NAME};
	int rc = pool_login_start(l, login->conninfo, &who, login->secret, sizeof(*login->secret), &server_auth_ops,
				  login->tls);
	uint64_t deadline_ns = base_now_ns() + login->timeout_ms * BASE_NS_PER_MS;
	while (rc == 0) {
		rc = monitor_conn_wait(l->fd, pool_login_events(l), deadline_ns);
		if (rc < 0) {
			*err = (struct pool_error){"08006", "timeout expired logging in to the server"};
			break;
		}
		rc = pool_login_advance(l);
	}
	if (rc > 0) {
		c->fd = l->fd;
		c->tls = l->tls; /* kept on its socket, as the login used it */
		c->tls_ops = login->tls;
		l->tls = NULL;
		for (uint32_t i = 0; i < l->param_count; i++)
			if (strcmp(l->params[i].name, "server_version") == 0)
				c->version = monitor_conn_parse_version(l->params[i].value);
		explicit_bzero(l, sizeof(*l));
		free(l);
		return 0;
	}
	if (err->sqlstate[0] == '\0')
		*err = l->error;
	pool_login_abandon(l);
	explicit_bzero(l, sizeof(*l));
	free(l);
	return monitor_conn_failed(err);
}

int monitor_conn_open(struct monitor_conn **out, const struct monitor_login *login, struct pool_error *err)
{
	TERN_ASSERT(out && login && login->conninfo && login->user && err);
	*err = (struct pool_error){0};
	struct monitor_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		*err = (struct pool_error){"53200", "out of memory connecting to the server"};
		return -ENOMEM;
	}
	c->fd = -1;
	c->timeout_ms = TERN_MAX(login->timeout_ms, 1u);
	int rc = login->secret ? monitor_conn_open_own(c, login, err) : monitor_conn_open_libpq(c, login, err);
	if (rc < 0) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

static int monitor_conn_query_libpq(struct monitor_conn *c, const char *sql, uint32_t fields, struct monitor_row *row)
{
	PGresult *res = PQexec(c->pg, sql);
	int rc = -EPROTO;
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == (int)fields) {
		rc = 0;
		for (uint32_t i = 0; i < fields && rc == 0; i++)
			if (!base_strlcpy(row->value[i], PQgetvalue(res, 0, (int)i), MONITOR_CONN_VALUE_MAX))
				rc = -EMSGSIZE;
	}
	PQclear(res);
	return rc;
}

/* A TLS read or write of up to len bytes, waiting as TLS asks: bytes moved, or <0. */
static int monitor_conn_tls_io(struct monitor_conn *c, int op, uint8_t *data, size_t len, uint64_t deadline_ns)
{
	for (;;) {
		short events = 0;
		struct pool_error err;
		int n = c->tls_ops->login_io(c->tls, op, data, (uint32_t)TERN_MIN(len, (size_t)INT32_MAX), &events, &err);
		if (n != 0)
			return n < 0 ? -ECONNRESET : n;
		int rc = monitor_conn_wait(c->fd, events, deadline_ns);
		if (rc < 0)
			return rc;
	}
}

static int monitor_conn_send(struct monitor_conn *c, const uint8_t *data, size_t len, uint64_t deadline_ns)
{
	for (size_t sent = 0; sent < len;) {
		if (c->tls) {
			int n = monitor_conn_tls_io(c, POOL_TLS_WRITE, (uint8_t *)data + sent, len - sent, deadline_ns);
			if (n < 0)
				return n;
			sent += (size_t)n;
			continue;
		}
		ssize_t n = send(c->fd, data + sent, len - sent, MSG_NOSIGNAL);
		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -errno;
		int rc = monitor_conn_wait(c->fd, POLLOUT, deadline_ns);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* One DataRow's values into row; false when it is malformed, has another field count, or a value too long. */
static bool monitor_conn_take_row(const uint8_t *body, uint32_t len, uint32_t fields, struct monitor_row *row)
{
	if (len < 2 || ((uint32_t)body[0] << 8 | body[1]) != fields)
		return false;
	uint32_t at = 2;
	for (uint32_t i = 0; i < fields; i++) {
		if (len - at < 4)
			return false;
		int32_t n = (int32_t)proto_read_u32(body + at);
		at += 4;
		if (n < 0) {
			row->value[i][0] = '\0'; /* NULL */
			continue;
		}
		if ((uint32_t)n >= MONITOR_CONN_VALUE_MAX || (uint32_t)n > len - at)
			return false;
		memcpy(row->value[i], body + at, (size_t)n);
		row->value[i][n] = '\0';
		at += (uint32_t)n;
	}
	return at == len;
}

static int monitor_conn_query_own(struct monitor_conn *c, const char *sql, uint32_t fields, struct monitor_row *row)
{
	uint64_t deadline_ns = base_now_ns() + c->timeout_ms * BASE_NS_PER_MS;
	size_t sql_len = strlen(sql) + 1;
	if (sql_len > sizeof(c->in) - PROTO_HEADER_LEN)
		return -EMSGSIZE;
	uint8_t *query = c->in; /* the answer is read once the query is sent */
	query[0] = 'Q';
	proto_write_u32(query + 1, (uint32_t)(4 + sql_len));
	memcpy(query + PROTO_HEADER_LEN, sql, sql_len);
	int rc = monitor_conn_send(c, query, PROTO_HEADER_LEN + sql_len, deadline_ns);
	c->in_len = 0;
	uint32_t rows = 0;
	bool is_failed = false;
	while (rc == 0) {
		while (c->in_len >= PROTO_HEADER_LEN) {
			uint8_t type = c->in[0];
			uint32_t length = proto_read_u32(c->in + 1);
			if (length < 4 || length > sizeof(c->in) - 1)
				return -EMSGSIZE;
			if (c->in_len < 1 + length)
				break;
			const uint8_t *body = c->in + PROTO_HEADER_LEN;
			uint32_t body_len = length - 4;
			switch (type) {
			case 'D':
				if (rows++ == 0 && !monitor_conn_take_row(body, body_len, fields, row))
					is_failed = true;
				break;
			case 'E':
				is_failed = true;
				break;
			case 'Z':
				return is_failed || rows != 1 || c->in_len != 1 + length ? -EPROTO : 0;
			case 'T': /* RowDescription, CommandComplete, a notice, a parameter, a notification */
			case 'C':
			case 'N':
			case 'S':
			case 'A':
				break;
			default:
				return -EPROTO;
			}
			memmove(c->in, c->in + 1 + length, c->in_len - 1 - length);
			c->in_len -= 1 + length;
		}
		if (c->tls) {
			int n = monitor_conn_tls_io(c, POOL_TLS_READ, c->in + c->in_len, sizeof(c->in) - c->in_len, deadline_ns);
			if (n < 0)
				rc = n;
			else
				c->in_len += (uint32_t)n;
			continue;
		}
		ssize_t got = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
		if (got > 0)
			c->in_len += (uint32_t)got;
		else if (got == 0)
			rc = -ECONNRESET;
		else if (errno == EAGAIN)
			rc = monitor_conn_wait(c->fd, POLLIN, deadline_ns);
		else if (errno != EINTR)
			rc = -errno;
	}
	return rc;
}

int monitor_conn_query(struct monitor_conn *c, const char *sql, uint32_t fields, struct monitor_row *row)
{
	TERN_ASSERT(c && sql && row && fields >= 1 && fields <= MONITOR_CONN_FIELDS_MAX);
	return c->pg ? monitor_conn_query_libpq(c, sql, fields, row) : monitor_conn_query_own(c, sql, fields, row);
}

uint32_t monitor_conn_server_version(const struct monitor_conn *c) { return c->version; }

void monitor_conn_close(struct monitor_conn *c)
{
	if (!c)
		return;
	if (c->pg)
		PQfinish(c->pg);
	if (c->fd >= 0) {
		uint8_t terminate[] = {'X', 0, 0, 0, 4};
		if (c->tls) /* the goodbye when the socket takes it at once */
			(void)monitor_conn_tls_io(c, POOL_TLS_WRITE, terminate, sizeof(terminate), base_now_ns());
		else
			(void)send(c->fd, terminate, sizeof(terminate), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (c->tls)
			c->tls_ops->login_end(c->tls);
		close(c->fd);
	}
	free(c);
}
