/*
 * gates.c — the table of gates.h: a small array under a mutex, searched only when a count says it holds
 * something.
 */
#include "gates.h"

#include <errno.h>
#include <string.h>

void gates_init(struct gates *g)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->lock, NULL);
}

void gates_deinit(struct gates *g) { pthread_mutex_destroy(&g->lock); }

/* Under the lock. */
static struct gates_entry *gates_find(struct gates *g, const char *database)
{
	for (uint32_t i = 0; i < g->count; i++)
		if (strcmp(g->entries[i].name, database) == 0)
			return &g->entries[i];
	return NULL;
}

static bool gates_has(struct gates *g, const uint32_t *count, const char *database, bool is_paused)
{
	if (__atomic_load_n(count, __ATOMIC_ACQUIRE) == 0)
		return false;
	pthread_mutex_lock(&g->lock);
	const struct gates_entry *e = gates_find(g, database);
	bool has = e && (is_paused ? e->is_paused : e->is_disabled);
	pthread_mutex_unlock(&g->lock);
	return has;
}

bool gates_is_disabled(struct gates *g, const char *database) { return gates_has(g, &g->disabled_count, database, false); }

bool gates_is_paused(struct gates *g, const char *database) { return gates_has(g, &g->paused_count, database, true); }

static int gates_set(struct gates *g, const char *database, bool is_paused, bool value)
{
	if (strlen(database) >= sizeof(g->entries[0].name))
		return -ENAMETOOLONG;
	pthread_mutex_lock(&g->lock);
	struct gates_entry *e = gates_find(g, database);
	int rc = 0;
	if (!e && value) {
		if (g->count == GATES_MAX) {
			rc = -ENOSPC;
		} else {
			e = &g->entries[g->count++];
			memset(e, 0, sizeof(*e));
			base_strlcpy(e->name, database, sizeof(e->name));
		}
	}
	bool *flag = e ? (is_paused ? &e->is_paused : &e->is_disabled) : NULL;
	uint32_t *count = is_paused ? &g->paused_count : &g->disabled_count;
	if (rc == 0 && (!flag || *flag == value))
		rc = -EALREADY;
	if (rc == 0) {
		*flag = value;
		__atomic_add_fetch(count, value ? 1u : (uint32_t)-1, __ATOMIC_RELEASE);
		if (!e->is_paused && !e->is_disabled) /* the entry says nothing more: its place is freed */
			*e = g->entries[--g->count];
	}
	pthread_mutex_unlock(&g->lock);
	return rc;
}

int gates_set_disabled(struct gates *g, const char *database, bool is_disabled)
{
	return gates_set(g, database, false, is_disabled);
}

int gates_set_paused(struct gates *g, const char *database, bool is_paused)
{
	return gates_set(g, database, true, is_paused);
}
