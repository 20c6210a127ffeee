/*
 * listen.c — the sockets and files of listen.h. Who holds a port is read from /proc (net/tcp, net/tcp6,
 * net/unix, then the fd links of each process), as ss -p does.
 */
#include "listen.h"

#include <dirent.h>
#include <linux/filter.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Pending connections a listening socket holds; the kernel caps it at somaxconn. */
#define LISTEN_BACKLOG 4096
/* The inode of the Unix socket this tern made, so exit removes only its own. */
static ino_t listen_unix_inode;

/* The pid of the process with a socket of this inode open, or 0. */
static pid_t listen_pid_of_inode(unsigned long inode)
{
	char want[64];
	snprintf(want, sizeof(want), "socket:[%lu]", inode);
	DIR *proc = opendir("/proc");
	if (!proc)
		return 0;
	pid_t found = 0;
	struct dirent *p;
	while (!found && (p = readdir(proc)) != NULL) {
		char *end;
		long pid = strtol(p->d_name, &end, 10);
		if (*end != '\0' || pid <= 0 || pid == getpid())
			continue;
		char fd_dir[64];
		snprintf(fd_dir, sizeof(fd_dir), "/proc/%ld/fd", pid);
		DIR *fds = opendir(fd_dir);
		if (!fds)
			continue;
		struct dirent *f;
		while (!found && (f = readdir(fds)) != NULL) {
			char link_path[PATH_MAX], target[80];
			snprintf(link_path, sizeof(link_path), "%s/%s", fd_dir, f->d_name);
			ssize_t n = readlink(link_path, target, sizeof(target) - 1);
			if (n > 0) {
				target[n] = '\0';
				if (strcmp(target, want) == 0)
					found = (pid_t)pid;
			}
		}
		closedir(fds);
	}
	closedir(proc);
	return found;
}

/* The inode of a TCP socket listening on `port` (any address), or 0. */
static unsigned long listen_tcp_inode(uint16_t port)
{
	static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	for (size_t t = 0; t < TERN_ARRAY_LEN(tables); t++) {
		FILE *f = fopen(tables[t], "re");
		if (!f)
			continue;
		char line[512];
		unsigned long inode = 0;
		while (!inode && fgets(line, sizeof(line), f)) {
			char local[128];
			unsigned state;
			unsigned long node;
			/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
			if (sscanf(line, " %*s %127s %*s %x %*s %*s %*s %*s %*s %lu", local, &state, &node) != 3)
				continue;
			const char *colon = strrchr(local, ':');
			if (state == 0x0A && colon && strtoul(colon + 1, NULL, 16) == port)
				inode = node;
		}
		fclose(f);
		if (inode)
			return inode;
	}
	return 0;
}

/* "pid N (comm)", or "another process" when /proc does not say. */
static void listen_describe_pid(pid_t pid, char *out, size_t size)
{
	if (!pid) {
		snprintf(out, size, "another process");
		return;
	}
	char path[64], comm[64] = "";
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	FILE *f = fopen(path, "re");
	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	snprintf(out, size, "pid %d%s%s%s", (int)pid, comm[0] ? " (" : "", comm, comm[0] ? ")" : "");
}

static void listen_unix_path(const struct tern_config *cfg, struct sockaddr_un *un)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	snprintf(un->sun_path, sizeof(un->sun_path), "%s/.s.PGSQL.%u", cfg->unix_socket_dir, cfg->listen_port);
}

/* __SO_ACCEPTCON in /proc/net/unix's Flags: the socket listens (accepted ones show the path too). */
#define LISTEN_UNIX_ACCEPTCON 0x10000ul

/* The inode of the Unix socket listening at `path` (from /proc/net/unix), or 0. */
static unsigned long listen_unix_inode_of(const char *path)
{
	FILE *f = fopen("/proc/net/unix", "re");
	if (!f)
		return 0;
	char line[PATH_MAX + 128];
	unsigned long inode = 0;
	while (!inode && fgets(line, sizeof(line), f)) {
		unsigned long flags, node;
		char bound[PATH_MAX];
		/* Num RefCount Protocol Flags Type St Inode Path */
		if (sscanf(line, "%*s %*s %*s %lx %*s %*s %lu %4095s", &flags, &node, bound) == 3 &&
		    (flags & LISTEN_UNIX_ACCEPTCON) && strcmp(bound, path) == 0)
			inode = node;
	}
	fclose(f);
	return inode;
}

/* LISTEN sockets on `port` (any address), from /proc/net/tcp and tcp6. */
static uint32_t listen_tcp_count(uint16_t port)
{
	static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	uint32_t count = 0;
	for (size_t t = 0; t < TERN_ARRAY_LEN(tables); t++) {
		FILE *f = fopen(tables[t], "re");
		if (!f)
			continue;
		char line[512];
		while (fgets(line, sizeof(line), f)) {
			char local[128];
			unsigned state;
			if (sscanf(line, " %*s %127s %*s %x", local, &state) != 2)
				continue;
			const char *colon = strrchr(local, ':');
			count += state == 0x0A && colon && strtoul(colon + 1, NULL, 16) == port;
		}
		fclose(f);
	}
	return count;
}

uint32_t listen_steer_away(const struct tern_config *cfg, const int *fds, uint32_t own)
{
	uint32_t steered = 0;
	for (uint32_t i = 0; i < cfg->listen_count; i++) {
		/* This tern's sockets came first in the address's SO_REUSEPORT group (indexes 0..own-1), the
		 * newcomer's after them: index `own` is the newcomer's first, and stays one of its sockets while
		 * this tern's close (the kernel moves the group's last socket into each freed slot) as long as
		 * the newcomer has at least as many as this one. */
		if (listen_tcp_count(cfg->listens[i].port) <= own)
			continue;
		struct sock_filter code[] = {{BPF_RET | BPF_K, 0, 0, own}};
		struct sock_fprog program = {.len = TERN_ARRAY_LEN(code), .filter = code};
		if (setsockopt(fds[i], SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program, sizeof(program)) == 0)
			steered++;
	}
	return steered;
}

static const char listen_takeover_hint[] =
	": a second tern does not share it; stop the other one, or start this one with --takeover for a rolling "
	"restart (README)";

int listen_check_free(const struct tern_config *cfg, char *err, size_t err_size)
{
	for (uint32_t i = 0; i < cfg->listen_count; i++) {
		const struct config_listen *l = &cfg->listens[i];
		struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
		struct addrinfo *res = NULL;
		char port[8];
		snprintf(port, sizeof(port), "%u", l->port);
		if (getaddrinfo(l->host, port, &hints, &res) != 0)
			continue; /* listen_open_worker reports it */
		/* Without SO_REUSEPORT: a bind that succeeds means no one listens there. */
		int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int one = 1;
		int rc = fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
				 bind(fd, res->ai_addr, res->ai_addrlen) < 0
			 ? -errno
			 : 0;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		if (rc == -EADDRINUSE) {
			char who[128];
			listen_describe_pid(listen_pid_of_inode(listen_tcp_inode(l->port)), who, sizeof(who));
			snprintf(err, err_size, "[tern] listen = %s:%u: already in use by %s%s", l->host, l->port, who,
				 listen_takeover_hint);
			return rc;
		}
	}
	if (cfg->unix_socket_dir && cfg->unix_socket_dir[0]) {
		struct sockaddr_un un;
		listen_unix_path(cfg, &un);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool is_live = fd >= 0 && connect(fd, (const struct sockaddr *)&un, sizeof(un)) == 0;
		if (fd >= 0)
			close(fd);
		if (is_live) {
			char who[128];
			listen_describe_pid(listen_pid_of_inode(listen_unix_inode_of(un.sun_path)), who, sizeof(who));
			snprintf(err, err_size, "[tern] unix_socket_dir: %s is already in use by %s%s", un.sun_path, who,
				 listen_takeover_hint);
			return -EADDRINUSE;
		}
	}
	return 0;
}

static int listen_tcp(const struct config_listen *l, char *err, size_t err_size)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	char port[8];
	snprintf(port, sizeof(port), "%u", l->port);
	int rc = getaddrinfo(l->host, port, &hints, &res);
	if (rc != 0) {
		snprintf(err, err_size, "[tern] listen = %s:%u: %s", l->host, l->port, gai_strerror(rc));
		return -EINVAL;
	}
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
		rc = -errno;
		snprintf(err, err_size, "[tern] listen = %s:%u: %s", l->host, l->port, strerror(-rc));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		return rc;
	}
	freeaddrinfo(res);
	return fd;
}

int listen_open_worker(const struct tern_config *cfg, int unix_fd, int fds[LISTEN_SOCKETS_MAX], char *err,
		       size_t err_size)
{
	int n = 0;
	for (uint32_t i = 0; i < cfg->listen_count; i++) {
		int fd = listen_tcp(&cfg->listens[i], err, err_size);
		if (fd < 0) {
			while (n > 0)
				close(fds[--n]);
			return fd;
		}
		fds[n++] = fd;
	}
	if (unix_fd >= 0) {
		int fd = fcntl(unix_fd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0) {
			int rc = -errno;
			snprintf(err, err_size, "[tern] unix_socket_dir: %s", strerror(-rc));
			while (n > 0)
				close(fds[--n]);
			return rc;
		}
		fds[n++] = fd;
	}
	return n;
}

int listen_open_unix(const struct tern_config *cfg, int *out, char *err, size_t err_size)
{
	*out = -1;
	if (!cfg->unix_socket_dir || !cfg->unix_socket_dir[0])
		return 0;
	gid_t group = (gid_t)-1; /* (chown leaves it) */
	/* The group first: a failure here leaves the socket of the tern a takeover starts beside. */
	if (cfg->unix_socket_group && cfg->unix_socket_group[0]) {
		const struct group *g = getgrnam(cfg->unix_socket_group);
		if (!g) {
			snprintf(err, err_size, "[tern] unix_socket_group = %s: no such group", cfg->unix_socket_group);
			return -ENOENT;
		}
		group = g->gr_gid;
	}
	struct sockaddr_un un;
	listen_unix_path(cfg, &un);
	(void)unlink(un.sun_path); /* stale (listen_check_free found no one), or taken over */
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	const char *key = "unix_socket_dir";
	struct stat st;
	bool is_bound = fd >= 0 && bind(fd, (const struct sockaddr *)&un, sizeof(un)) == 0;
	if (is_bound && chown(un.sun_path, (uid_t)-1, group) < 0)
		key = "unix_socket_group";
	else if (is_bound && chmod(un.sun_path, (mode_t)config_unix_socket_mode(cfg)) < 0)
		key = "unix_socket_mode";
	else if (is_bound && listen(fd, LISTEN_BACKLOG) == 0 && stat(un.sun_path, &st) == 0)
		key = NULL;
	if (key) {
		int rc = -errno;
		snprintf(err, err_size, "[tern] %s: %s: %s", key, un.sun_path, strerror(-rc));
		if (is_bound)
			(void)unlink(un.sun_path); /* the socket this tern made, half set up */
		if (fd >= 0)
			close(fd);
		return rc;
	}
	listen_unix_inode = st.st_ino;
	*out = fd;
	return 0;
}

void listen_close_unix(const struct tern_config *cfg)
{
	if (!cfg->unix_socket_dir || !cfg->unix_socket_dir[0] || !listen_unix_inode)
		return;
	struct sockaddr_un un;
	listen_unix_path(cfg, &un);
	struct stat st;
	if (stat(un.sun_path, &st) == 0 && st.st_ino == listen_unix_inode)
		(void)unlink(un.sun_path); /* a takeover's new socket stays */
}

/* The pid a pidfile names, or 0. */
static pid_t listen_read_pidfile(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	long pid = 0;
	if (fscanf(f, "%ld", &pid) != 1 || pid <= 0)
		pid = 0;
	fclose(f);
	return (pid_t)pid;
}

int listen_write_pidfile(const char *path, bool is_takeover, char *err, size_t err_size)
{
	if (!path || !path[0])
		return 0;
	pid_t other = listen_read_pidfile(path);
	if (!is_takeover && other && other != getpid() && (kill(other, 0) == 0 || errno == EPERM)) {
		char who[128];
		listen_describe_pid(other, who, sizeof(who));
		snprintf(err, err_size, "[tern] pidfile = %s: names %s, which is running%s", path, who,
			 listen_takeover_hint);
		return -EEXIST;
	}
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "we");
	int rc = f ? 0 : -errno;
	if (f) {
		if (fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0)
			rc = -EIO;
		if (rc == 0 && rename(tmp, path) < 0) /* whole or not at all */
			rc = -errno;
		if (rc < 0)
			(void)unlink(tmp);
	}
	if (rc < 0)
		snprintf(err, err_size, "[tern] pidfile = %s: %s", path, strerror(-rc));
	return rc;
}

void listen_remove_pidfile(const char *path)
{
	if (path && path[0] && listen_read_pidfile(path) == getpid())
		(void)unlink(path); /* a later tern's (a takeover) stays */
}

int listen_open_logfile(const char *path)
{
	if (!path || !path[0])
		return 0;
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0)
		return -errno;
	int rc = dup2(fd, STDERR_FILENO) < 0 ? -errno : 0;
	close(fd);
	return rc;
}
