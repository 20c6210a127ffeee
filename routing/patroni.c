/*
 * patroni.c — patroni.h: a GET of /cluster with one deadline, and its leader read out with jansson.
 */
#include "patroni.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *patroni_string(const json_t *object, const char *key)
{
	const char *value = json_string_value(json_object_get(object, key));
	return value ? value : "";
}

int patroni_parse_cluster(const char *body, size_t len, struct patroni_view *out, char *err, size_t err_size)
{
	*out = (struct patroni_view){0};
	json_error_t error;
	json_t *root = json_loadb(body, len, 0, &error);
	json_t *members = root ? json_object_get(root, "members") : NULL;
	if (!json_is_array(members)) {
		snprintf(err, err_size, "/cluster: %s", root ? "no \"members\" array" : error.text);
		json_decref(root);
		return -EINVAL;
	}
	out->member_count = (uint32_t)json_array_size(members);
	size_t i;
	json_t *member;
	json_array_foreach(members, i, member)
	{
		json_int_t port = json_integer_value(json_object_get(member, "port"));
		if (strcmp(patroni_string(member, "role"), "leader") != 0 ||
		    strcmp(patroni_string(member, "state"), "running") != 0 || port <= 0 || port > UINT16_MAX)
			continue;
		if (out->has_leader) { /* two members say they lead: neither is trusted */
			out->has_leader = false;
			break;
		}
		out->has_leader = true;
		base_strlcpy(out->leader_name, patroni_string(member, "name"), sizeof(out->leader_name));
		base_strlcpy(out->leader_host, patroni_string(member, "host"), sizeof(out->leader_host));
		out->leader_port = (uint16_t)port;
	}
	json_decref(root);
	return 0;
}

/* Waits for `events` on fd until deadline_ns: 0, or -ETIMEDOUT. */
static int patroni_wait(int fd, short events, uint64_t deadline_ns)
{
	for (;;) {
		uint64_t now = base_now_ns();
		if (now >= deadline_ns)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, (int)((deadline_ns - now + BASE_NS_PER_MS - 1) / BASE_NS_PER_MS));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int patroni_connect(const char *host, uint16_t port, uint64_t deadline_ns)
{
	char service[8];
	snprintf(service, sizeof(service), "%u", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found = NULL;
	if (getaddrinfo(host, service, &hints, &found) != 0 || !found)
		return -EHOSTUNREACH;
	int fd = -1, rc = -EHOSTUNREACH;
	for (const struct addrinfo *a = found; a && rc < 0; a = a->ai_next) { /* ("localhost": ::1, then 127.0.0.1) */
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		rc = fd < 0 ? -errno : 0;
		if (rc == 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS)
			rc = -errno;
		if (rc == 0 && (rc = patroni_wait(fd, POLLOUT, deadline_ns)) == 0) {
			int so_error = 0;
			socklen_t so_len = sizeof(so_error);
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &so_len);
			rc = -so_error;
		}
		if (rc < 0 && fd >= 0)
			close(fd);
	}
	freeaddrinfo(found);
	return rc < 0 ? rc : fd;
}

/* The whole answer (Patroni closes the connection after it; Content-Length ends it sooner) into buf;
 * its length, or a negative errno. */
static ssize_t patroni_read_answer(int fd, char *buf, size_t size, uint64_t deadline_ns)
{
	size_t used = 0;
	for (;;) {
		buf[used] = '\0';
		const char *body = strstr(buf, "\r\n\r\n");
		const char *length = body ? strcasestr(buf, "\r\ncontent-length:") : NULL;
		if (length && length < body && used - (size_t)(body + 4 - buf) >= strtoul(length + 17, NULL, 10))
			return (ssize_t)used;
		if (used == size - 1)
			return -EMSGSIZE;
		int rc = patroni_wait(fd, POLLIN, deadline_ns);
		if (rc < 0)
			return rc;
		ssize_t n = read(fd, buf + used, size - 1 - used);
		if (n == 0)
			return (ssize_t)used;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		used += n > 0 ? (size_t)n : 0;
	}
}

int patroni_ask(const char *host, uint16_t port, uint32_t timeout_ms, struct patroni_view *out, char *err,
		size_t err_size)
{
	uint64_t deadline_ns = base_now_ns() + (uint64_t)timeout_ms * BASE_NS_PER_MS;
	int fd = patroni_connect(host, port, deadline_ns);
	if (fd < 0) {
		snprintf(err, err_size, "%s:%u: %s", host, port, strerror(-fd));
		return fd;
	}
	char request[PATRONI_HOST_SIZE + 96];
	int request_len = snprintf(request, sizeof(request),
				   "GET /cluster HTTP/1.1\r\nHost: %s:%u\r\nAccept: application/json\r\n"
				   "Connection: close\r\n\r\n",
				   host, port);
	/* A few dozen bytes into a new connection's empty send buffer: one write. */
	ssize_t sent = write(fd, request, (size_t)request_len);
	char *answer = malloc(PATRONI_BODY_MAX);
	ssize_t len = sent != request_len ? -EIO : answer ? patroni_read_answer(fd, answer, PATRONI_BODY_MAX, deadline_ns)
							   : -ENOMEM;
	close(fd);
	int rc = len < 0 ? (int)len : 0;
	const char *body = rc == 0 ? strstr(answer, "\r\n\r\n") : NULL;
	if (rc < 0) {
		snprintf(err, err_size, "%s:%u: %s", host, port, strerror(-rc));
	} else if (!body || strncmp(answer, "HTTP/1.", 7) != 0 || strncmp(answer + 8, " 200", 4) != 0) {
		snprintf(err, err_size, "%s:%u: GET /cluster: not an HTTP 200 answer: %.40s", host, port, answer);
		rc = -EPROTO;
	} else if (strcasestr(answer, "\r\ntransfer-encoding:") && strcasestr(answer, "\r\ntransfer-encoding:") < body) {
		snprintf(err, err_size, "%s:%u: GET /cluster: a chunked answer (Patroni sends a length)", host, port);
		rc = -EPROTO;
	} else {
		rc = patroni_parse_cluster(body + 4, (size_t)(answer + len - (body + 4)), out, err, err_size);
	}
	free(answer);
	return rc;
}
