/*
 * relay.c — the zero-logic relay of the benchmarks: every client connection gets its own connection to
 * the server and bytes are copied both ways, nothing read, nothing pooled. One thread, epoll, a 64 KiB
 * buffer per direction. What it costs per transaction is what any proxy hop costs on this machine (the
 * kernel's TCP work and a wakeup each way); a proxy's own logic is what it costs above that.
 *
 *   relay LISTEN_PORT SERVER_PORT      (both on 127.0.0.1; runs until SIGTERM)
 *
 * Not part of tern: bench/pgbench_driver.py compiles it (cc -O2) into a temp dir and starts it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define RELAY_BUFFER 65536u
#define RELAY_EVENTS 256

struct relay_side {
	int fd;
	struct relay_side *peer;
	uint8_t buf[RELAY_BUFFER]; /* bytes read from this side, waiting to be written to the peer */
	size_t have, sent;
	int is_read_closed;
};

static volatile sig_atomic_t relay_stopping;
static char relay_gone; /* an event of a pair already closed in this batch points here */

static void relay_on_signal(int sig) { (void)sig; relay_stopping = 1; }

static int relay_socket_to(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		close(fd);
		return -1;
	}
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

static void relay_watch(int epoll_fd, struct relay_side *side)
{
	/* Read while the peer has room; write while bytes wait. */
	struct epoll_event ev = {.data.ptr = side};
	if (!side->is_read_closed && side->peer->have == 0)
		ev.events |= EPOLLIN;
	if (side->peer->have > side->peer->sent)
		ev.events |= EPOLLOUT;
	(void)epoll_ctl(epoll_fd, EPOLL_CTL_MOD, side->fd, &ev);
}

static void relay_close(int epoll_fd, struct relay_side *side)
{
	struct relay_side *peer = side->peer;
	close(side->fd);
	close(peer->fd);
	(void)epoll_fd;
	free(side < peer ? side : peer); /* the pair is one allocation */
}

/* Moves what side read to its peer; -1 when the pair is to be closed. */
static int relay_flush(struct relay_side *from)
{
	struct relay_side *to = from->peer;
	while (from->sent < from->have) {
		ssize_t n = send(to->fd, from->buf + from->sent, from->have - from->sent, MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		from->sent += (size_t)n;
	}
	from->have = from->sent = 0;
	return 0;
}

static int relay_on_event(int epoll_fd, struct relay_side *side, uint32_t events)
{
	if (events & EPOLLOUT && relay_flush(side->peer) < 0)
		return -1;
	if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && side->have == 0) {
		ssize_t n = recv(side->fd, side->buf, sizeof(side->buf), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return -1;
		if (n > 0) {
			side->have = (size_t)n;
			if (relay_flush(side) < 0)
				return -1;
		}
	}
	relay_watch(epoll_fd, side);
	relay_watch(epoll_fd, side->peer);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: relay LISTEN_PORT SERVER_PORT\n");
		return 2;
	}
	uint16_t listen_port = (uint16_t)atoi(argv[1]), server_port = (uint16_t)atoi(argv[2]);
	signal(SIGTERM, relay_on_signal);
	signal(SIGINT, relay_on_signal);
	signal(SIGPIPE, SIG_IGN);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int one = 1;
	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(listen_port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 1024) < 0) {
		perror("relay: listen");
		return 1;
	}
	int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
	(void)epoll_ctl(epoll_fd, EPOLL_CTL_ADD, lfd, &lev);
	struct epoll_event events[RELAY_EVENTS];
	while (!relay_stopping) {
		int n = epoll_wait(epoll_fd, events, RELAY_EVENTS, 1000);
		for (int i = 0; i < n; i++) {
			struct relay_side *side = events[i].data.ptr;
			if (side == (void *)&relay_gone)
				continue;
			if (side == NULL) {
				int cfd;
				while ((cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					int sfd = relay_socket_to(server_port);
					struct relay_side *pair = sfd < 0 ? NULL : calloc(2, sizeof(*pair));
					if (!pair) {
						close(cfd);
						if (sfd >= 0)
							close(sfd);
						continue;
					}
					(void)setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					pair[0] = (struct relay_side){.fd = cfd, .peer = &pair[1]};
					pair[1] = (struct relay_side){.fd = sfd, .peer = &pair[0]};
					for (int k = 0; k < 2; k++) {
						struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &pair[k]};
						(void)epoll_ctl(epoll_fd, EPOLL_CTL_ADD, pair[k].fd, &ev);
					}
				}
				continue;
			}
			if (relay_on_event(epoll_fd, side, events[i].events) < 0) {
				/* (the pair's other events of this batch are dropped: a closed pair is not looked at again) */
				for (int k = i + 1; k < n; k++)
					if (events[k].data.ptr == side->peer)
						events[k].data.ptr = &relay_gone;
				relay_close(epoll_fd, side);
			}
		}
	}
	return 0;
}
