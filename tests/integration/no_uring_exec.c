/*
 * no_uring_exec.c — runs a program with io_uring refused as Docker's default seccomp profile refuses
 * it: io_uring_setup, io_uring_enter and io_uring_register fail with EPERM, every other system call is
 * allowed. The integration suite runs tern under it to check that tern stops at startup with one clear
 * line instead of failing later or obscurely.
 *
 * usage: no_uring_exec PROGRAM [ARG]...
 * Exits 77 (skip) on an architecture other than x86-64, 126 when the filter cannot be installed, 127
 * when PROGRAM cannot be run.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define NO_URING_LOAD_ARCH BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch))
#define NO_URING_LOAD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
/* If the loaded value equals `nr`, fall through to the next statement (EPERM); else skip it. */
#define NO_URING_IF_NOT(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1)
#define NO_URING_EPERM BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))

static int no_uring_install(void)
{
	struct sock_filter filter[] = {
		/* A system call made through another ABI would bypass the numbers below: refuse to run. */
		NO_URING_LOAD_ARCH,
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		NO_URING_LOAD_NR,
		NO_URING_IF_NOT(__NR_io_uring_setup),
		NO_URING_EPERM,
		NO_URING_IF_NOT(__NR_io_uring_enter),
		NO_URING_EPERM,
		NO_URING_IF_NOT(__NR_io_uring_register),
		NO_URING_EPERM,
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog program = {.len = (unsigned short)(sizeof(filter) / sizeof(filter[0])), .filter = filter};
	/* Without it an unprivileged process may not install a filter (and a setuid child could misuse one). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		fprintf(stderr, "no_uring_exec: prctl(PR_SET_NO_NEW_PRIVS): %s\n", strerror(errno));
		return -1;
	}
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0) {
		fprintf(stderr, "no_uring_exec: prctl(PR_SET_SECCOMP): %s\n", strerror(errno));
		return -1;
	}
	return 0;
}
#endif

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PROGRAM [ARG]...\n", argv[0]);
		return 2;
	}
#if defined(__x86_64__)
	if (no_uring_install() != 0)
		return 126;
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_uring_exec: %s: %s\n", argv[1], strerror(errno));
	return 127;
#else
	fprintf(stderr, "no_uring_exec: only x86-64 is supported\n");
	return 77;
#endif
}
