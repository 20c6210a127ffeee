/*
 * pick.h — which replica serves a read (DESIGN §4), as a pure function of the candidates a worker
 * sees: one candidate, it; candidates of equal weight, three or more, power-of-two choices on their
 * load (reads running now), the pair sampled from the worker's own generator; otherwise (two
 * candidates, or unequal weights) a smooth weighted rotation (each pick adds every candidate's weight
 * to its credit, takes the highest and charges it the total), so two equal replicas alternate and a
 * weight-2 replica serves two reads for its peer's one. The caller passes only the candidates that
 * may serve the read (up, within the lag bounds, at its LSN target), so the rotation shifts to the one
 * already past the target by itself.
 *
 * Threads: any; the state is the caller's (one per worker). Never: locks, allocates, or reads a clock.
 */
#ifndef TERN_POOL_PICK_H
#define TERN_POOL_PICK_H

#include "base.h"

#define PICK_SERVERS_MAX 16u

struct pick_candidate {
	uint32_t server; /* the server's index (the rotation's credit is kept by it) */
	uint32_t weight; /* > 0 */
	uint32_t load;   /* reads running on it now */
};

struct pick_state {
	uint64_t rng; /* xorshift64*; any non-zero seed */
	int64_t credit[PICK_SERVERS_MAX];
};

void pick_init(struct pick_state *st, uint64_t seed);
/* The position in c[] of the candidate to use; count >= 1. */
uint32_t pick_server(struct pick_state *st, const struct pick_candidate *c, uint32_t count);

#endif
