/*
 * buf_ring_compat.h — liburing 2.3 (Debian 12) has io_uring_register_buf_ring but not the
 * io_uring_setup_buf_ring / io_uring_free_buf_ring helpers added in 2.4; these are the few lines
 * they would do: map page-aligned memory for the ring of buffer descriptors and register it.
 * Private to ring/: ring.c alone includes it.
 *
 * Threads: the ring's own thread, from ring_init and ring_deinit.
 * Ownership: the mapping is the caller's (ring.c keeps it in groups[g].buf_ring) until
 * ring_compat_free_buf_ring unregisters and unmaps it.
 * Never: touches the receive buffers themselves (ring.c adds them to the ring), or keeps state of its own.
 */
#ifndef TERN_BUF_RING_COMPAT_H
#define TERN_BUF_RING_COMPAT_H

#include <errno.h>
#include <liburing.h>
#include <string.h>
#include <sys/mman.h>

static inline struct io_uring_buf_ring *ring_compat_setup_buf_ring(struct io_uring *uring, unsigned entries,
								   int group_id, int *err)
{
	size_t size = (size_t)entries * sizeof(struct io_uring_buf);
	void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	if (mem == MAP_FAILED) {
		*err = -errno;
		return NULL;
	}
	struct io_uring_buf_ring *br = mem;
	io_uring_buf_ring_init(br);
	struct io_uring_buf_reg reg;
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (unsigned long)br;
	reg.ring_entries = entries;
	reg.bgid = (unsigned short)group_id;
	int rc = io_uring_register_buf_ring(uring, &reg, 0);
	if (rc < 0) {
		munmap(mem, size);
		*err = rc;
		return NULL;
	}
	*err = 0;
	return br;
}

static inline void ring_compat_free_buf_ring(struct io_uring *uring, struct io_uring_buf_ring *br, unsigned entries,
					     int group_id)
{
	(void)io_uring_unregister_buf_ring(uring, group_id);
	munmap(br, (size_t)entries * sizeof(struct io_uring_buf));
}

#endif
