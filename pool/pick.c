/* Replica selection of pick.h: smooth weighted rotation, and power-of-two choices on load. */
#include "pick.h"

void pick_init(struct pick_state *st, uint64_t seed)
{
	*st = (struct pick_state){.rng = seed ? seed : 0x9e3779b97f4a7c15ull};
}

static uint64_t pick_next(struct pick_state *st)
{
	uint64_t x = st->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	st->rng = x;
	return x * 0x2545f4914f6cdd1dull;
}

static bool pick_weights_equal(const struct pick_candidate *c, uint32_t count)
{
	for (uint32_t i = 1; i < count; i++)
		if (c[i].weight != c[0].weight)
			return false;
	return true;
}

uint32_t pick_server(struct pick_state *st, const struct pick_candidate *c, uint32_t count)
{
	TERN_ASSERT(count >= 1 && count <= PICK_SERVERS_MAX);
	if (count == 1)
		return 0;
	if (count >= 3 && pick_weights_equal(c, count)) {
		uint32_t a = (uint32_t)(pick_next(st) % count);
		uint32_t b = (uint32_t)(pick_next(st) % (count - 1));
		if (b >= a)
			b++; /* two different ones */
		return c[b].load < c[a].load ? b : a;
	}
	int64_t total = 0;
	uint32_t best = 0;
	for (uint32_t i = 0; i < count; i++) {
		TERN_ASSERT(c[i].server < PICK_SERVERS_MAX && c[i].weight > 0);
		st->credit[c[i].server] += c[i].weight;
		total += c[i].weight;
		if (st->credit[c[i].server] > st->credit[c[best].server])
			best = i;
	}
	st->credit[c[best].server] -= total;
	return best;
}
