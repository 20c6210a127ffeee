/*
 * listen.h — the sockets tern listens on and the files that say it runs: a TCP socket per `listen`
 * address for each worker (SO_REUSEPORT spreads clients over them), one Unix socket in
 * unix_socket_dir that every worker accepts on, the check that no other process already listens there
 * (so a second tern never silently shares a port with a stale one), the pidfile, and the logfile.
 *
 * A deliberate rolling restart (`--takeover`) skips the check: the new tern listens beside the old one,
 * and the old one, sent SIGTERM, stops accepting and lets its clients go between transactions.
 *
 * Threads: main's, before the workers start (and at SIGHUP for the logfile). Never: touches sessions.
 */
#ifndef TERN_LISTEN_H
#define TERN_LISTEN_H

#include "config.h"

/* Sockets one worker accepts on: every TCP address and the Unix socket. */
#define LISTEN_SOCKETS_MAX (CONFIG_LISTEN_MAX + 1u)

/* Fails with a message naming the pid (and command) of a process already listening on one of the
 * addresses, or on the Unix socket (a stale socket file is removed). 0 or <0 with `err` filled. */
TERN_MUST_USE int listen_check_free(const struct tern_config *cfg, char *err, size_t err_size);
/* The sockets of one worker: a new SO_REUSEPORT socket per TCP address, then a dup of `unix_fd` when
 * it is >= 0. Returns how many (fds[0..n)) or <0 with `err` filled (nothing left open). */
TERN_MUST_USE int listen_open_worker(const struct tern_config *cfg, int unix_fd, int fds[LISTEN_SOCKETS_MAX],
				     char *err, size_t err_size);
/* The Unix socket of unix_socket_dir (replacing a stale file there, or a taken-over one) in *fd; -1 when
 * unix_socket_dir is empty. 0 or a negative errno with `err` filled. */
TERN_MUST_USE int listen_open_unix(const struct tern_config *cfg, int *fd, char *err, size_t err_size);
/* Removes the Unix socket file at exit (only when it is still the one this tern made). */
void listen_close_unix(const struct tern_config *cfg);

/* A rolling restart, on the old tern's side, at SIGTERM: when more sockets listen on an address than
 * this tern's `own` (a tern started with --takeover beside it), every new connection to the address is
 * steered to the first of the others (SO_ATTACH_REUSEPORT_CBPF on `fd`, one of this tern's), so the
 * old tern's accept queues empty before it closes them and no queued connection is reset. Returns how
 * many addresses were steered. */
uint32_t listen_steer_away(const struct tern_config *cfg, const int *fds, uint32_t own);
/* Writes the pidfile, refusing when it names a live process unless `is_takeover`. 0 or <0 with `err`. */
TERN_MUST_USE int listen_write_pidfile(const char *path, bool is_takeover, char *err, size_t err_size);
void listen_remove_pidfile(const char *path);
/* Points stderr (the log) at `path`, appending; "" leaves stderr as it is. 0 or a negative errno. */
TERN_MUST_USE int listen_open_logfile(const char *path);

#endif
