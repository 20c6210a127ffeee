/*
 * test_pick.c — replica selection (pool/pick.c): one candidate, the weighted rotation (two replicas
 * alternate, weights share the reads, a candidate gone from the set is skipped), and a seeded
 * simulation of reads on four replicas of which one is four times slower: power-of-two choices keeps
 * the queues short where a blind rotation lets the slow one's queue grow.
 */
#include "pool/pick.h"

#include <criterion/criterion.h>
#include <string.h>

Test(pick, one_candidate_is_it)
{
	struct pick_state st;
	pick_init(&st, 1);
	struct pick_candidate c[] = {{.server = 3, .weight = 1, .load = 99}};
	for (int i = 0; i < 5; i++)
		cr_assert_eq(pick_server(&st, c, 1), 0);
}

Test(pick, two_replicas_alternate_and_weights_share_the_reads)
{
	struct pick_state st;
	pick_init(&st, 1);
	struct pick_candidate two[] = {{.server = 1, .weight = 1}, {.server = 2, .weight = 1}};
	uint32_t last = pick_server(&st, two, 2);
	for (int i = 0; i < 10; i++) {
		uint32_t now = pick_server(&st, two, 2);
		cr_assert_neq(now, last, "two equal replicas alternate (pick %d)", i);
		last = now;
	}
	struct pick_candidate weighted[] = {{.server = 1, .weight = 2}, {.server = 2, .weight = 1}, {.server = 3, .weight = 1}};
	uint32_t counts[3] = {0};
	for (int i = 0; i < 400; i++)
		counts[pick_server(&st, weighted, 3)]++;
	cr_assert_eq(counts[0], 200, "weight 2 serves half: %u", counts[0]);
	cr_assert_eq(counts[1], 100);
	cr_assert_eq(counts[2], 100);
	/* Only one is at the read's target: the rotation takes it, whatever the credits say. */
	struct pick_candidate only[] = {{.server = 2, .weight = 1}};
	cr_assert_eq(pick_server(&st, only, 1), 0);
}

Test(pick, power_of_two_choices_takes_the_less_loaded_of_two_different_replicas)
{
	struct pick_state st;
	pick_init(&st, 7);
	struct pick_candidate c[] = {{.server = 0, .weight = 1, .load = 9}, {.server = 1, .weight = 1, .load = 0},
				     {.server = 2, .weight = 1, .load = 9}};
	uint32_t counts[3] = {0};
	for (int i = 0; i < 3000; i++)
		counts[pick_server(&st, c, 3)]++;
	/* The idle one wins every pair it is in (2 of 3 pairs); the two loaded ones split the rest. */
	cr_assert(counts[1] > 1800 && counts[1] < 2200, "the idle replica in two pairs of three: %u", counts[1]);
	cr_assert(counts[0] > 400 && counts[2] > 400, "the others share the rest: %u %u", counts[0], counts[2]);
}

/* Reads arrive 2 or 3 per step; each server finishes one queued read per step, the slow one one per 4. Returns the
 * longest queue seen and the total of queue lengths over the steps (time spent waiting). */
static void simulate(bool is_p2c, uint64_t seed, uint32_t *longest, uint64_t *waiting)
{
	enum { SERVERS = 4, STEPS = 20000 };
	static const bool is_slow[SERVERS] = {false, false, false, true}; /* it finishes one read per 4 steps */
	struct pick_state st;
	pick_init(&st, seed);
	uint32_t queue[SERVERS] = {0};
	uint32_t next = 0;
	uint64_t rng = seed;
	*longest = 0;
	*waiting = 0;
	for (uint32_t step = 0; step < STEPS; step++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t arrivals = 2 + (uint32_t)((rng >> 33) % 2); /* 2.5 a step: below the 3.25 served */
		for (uint32_t a = 0; a < arrivals; a++) {
			uint32_t to;
			if (is_p2c) {
				struct pick_candidate c[SERVERS];
				for (uint32_t i = 0; i < SERVERS; i++)
					c[i] = (struct pick_candidate){.server = i, .weight = 1, .load = queue[i]};
				to = pick_server(&st, c, SERVERS);
			} else {
				to = next++ % SERVERS;
			}
			queue[to]++;
		}
		for (uint32_t i = 0; i < SERVERS; i++) {
			uint32_t done = !is_slow[i] || step % 4 == 0; /* one read a step, the slow one a quarter */
			queue[i] -= queue[i] < done ? queue[i] : done;
			*longest = queue[i] > *longest ? queue[i] : *longest;
			*waiting += queue[i];
		}
	}
}

Test(pick, a_seeded_simulation_shows_power_of_two_choices_spreading_better_than_rotation)
{
	for (uint64_t seed = 1; seed <= 3; seed++) {
		uint32_t p2c_longest, rr_longest;
		uint64_t p2c_waiting, rr_waiting;
		simulate(true, seed, &p2c_longest, &p2c_waiting);
		simulate(false, seed, &rr_longest, &rr_waiting);
		cr_log_info("seed %lu: longest queue p2c %u, rotation %u; waiting p2c %lu, rotation %lu", (unsigned long)seed,
			    p2c_longest, rr_longest, (unsigned long)p2c_waiting, (unsigned long)rr_waiting);
		/* Rotation sends the slow replica a quarter of the reads (0.625 a step) where it serves 0.25: its
		 * queue grows all run long. Power-of-two choices sees it and keeps every queue short. */
		cr_assert(rr_longest > 1000, "rotation overloads the slow replica: %u", rr_longest);
		cr_assert(p2c_longest < 50, "p2c keeps queues short: %u", p2c_longest);
		cr_assert(p2c_waiting * 20 < rr_waiting, "p2c waits far less: %lu vs %lu", (unsigned long)p2c_waiting,
			  (unsigned long)rr_waiting);
	}
}
