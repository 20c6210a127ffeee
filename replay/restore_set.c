/* The SET state Transaction Replay restores (see restore_set.h). */
#include "restore_set.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* name and statement in one allocation; statement may be NULL (a RESET's entry). */
static int restore_entry_make(struct restore_entry *e, const char *name, const char *statement)
{
	size_t name_len = strlen(name) + 1, statement_len = statement ? strlen(statement) + 1 : 0;
	char *both = malloc(name_len + statement_len);
	if (!both)
		return -ENOMEM;
	memcpy(both, name, name_len);
	if (statement)
		memcpy(both + name_len, statement, statement_len);
	*e = (struct restore_entry){.name = both, .statement = statement ? both + name_len : NULL};
	return 0;
}

int restore_set_find(const struct restore_set *set, const char *name)
{
	for (uint32_t i = 0; i < set->count; i++)
		if (strcasecmp(set->entries[i].name, name) == 0)
			return (int)i;
	return -1;
}

static void restore_set_remove(struct restore_set *set, uint32_t i)
{
	TERN_ASSERT(i < set->count);
	free(set->entries[i].name);
	memmove(set->entries + i, set->entries + i + 1, (set->count - i - 1) * sizeof(*set->entries));
	set->count--;
}

/* A committed change, applied to the entries; the pending entry's allocation moves into them. */
static int restore_set_apply(struct restore_set *set, struct restore_pending *p)
{
	int at = p->kind == RESTORE_SET || p->kind == RESTORE_RESET ? restore_set_find(set, p->entry.name) : -1;
	switch (p->kind) {
	case RESTORE_SET:
		if (at >= 0)
			restore_set_remove(set, (uint32_t)at); /* the same variable: set again, at the end */
		if (base_grow((void **)&set->entries, &set->cap, set->count, sizeof(*set->entries)) < 0)
			return -ENOMEM;
		set->entries[set->count++] = p->entry;
		p->entry = (struct restore_entry){0};
		return 0;
	case RESTORE_RESET:
		if (at >= 0)
			restore_set_remove(set, (uint32_t)at);
		return 0;
	case RESTORE_RESET_ALL:
		for (uint32_t i = set->count; i-- > 0;) {
			const char *name = set->entries[i].name;
			if (strcmp(name, "role") != 0 && strcmp(name, "session_authorization") != 0)
				restore_set_remove(set, i);
		}
		return 0;
	case RESTORE_DISCARD_ALL:
		while (set->count > 0)
			restore_set_remove(set, set->count - 1);
		return 0;
	}
	TERN_ASSERT(!"a change kind restore_set_change refuses");
	return 0;
}

static void restore_set_drop_pending(struct restore_set *set, uint32_t keep)
{
	TERN_ASSERT(keep <= set->pending_count);
	while (set->pending_count > keep)
		free(set->pending[--set->pending_count].entry.name);
}

int restore_set_change(struct restore_set *set, enum restore_change_kind kind, const char *name, const char *statement)
{
	TERN_ASSERT(kind >= RESTORE_SET && kind <= RESTORE_DISCARD_ALL);
	TERN_ASSERT((kind == RESTORE_SET) == (statement != NULL) && (kind <= RESTORE_RESET) == (name != NULL));
	if (base_grow((void **)&set->pending, &set->pending_cap, set->pending_count, sizeof(*set->pending)) < 0)
		return -ENOMEM;
	struct restore_pending *p = &set->pending[set->pending_count];
	*p = (struct restore_pending){.kind = kind};
	if (name && restore_entry_make(&p->entry, name, statement) < 0)
		return -ENOMEM;
	set->pending_count++;
	return 0;
}

int restore_set_savepoint(struct restore_set *set, const char *name)
{
	if (base_grow((void **)&set->savepoints, &set->savepoint_cap, set->savepoint_count,
		      sizeof(*set->savepoints)) < 0)
		return -ENOMEM;
	struct restore_savepoint *sp = &set->savepoints[set->savepoint_count++];
	base_strlcpy(sp->name, name, sizeof(sp->name));
	sp->pending_count = set->pending_count;
	return 0;
}

/* The newest savepoint of that name, 1-based (0: none). */
static uint32_t restore_set_savepoint_at(const struct restore_set *set, const char *name)
{
	uint32_t i = set->savepoint_count;
	while (i > 0 && strcmp(set->savepoints[i - 1].name, name) != 0)
		i--;
	return i;
}

bool restore_set_release(struct restore_set *set, const char *name)
{
	uint32_t i = restore_set_savepoint_at(set, name);
	if (i == 0)
		return false;
	set->savepoint_count = i - 1; /* it and the ones after it go; their changes stay */
	return true;
}

bool restore_set_rollback_to(struct restore_set *set, const char *name)
{
	uint32_t i = restore_set_savepoint_at(set, name);
	if (i == 0)
		return false;
	restore_set_drop_pending(set, set->savepoints[i - 1].pending_count);
	set->savepoint_count = i; /* the savepoint itself stays, as on the server */
	return true;
}

int restore_set_end(struct restore_set *set, bool is_commit)
{
	int rc = 0;
	for (uint32_t i = 0; is_commit && i < set->pending_count && rc == 0; i++)
		rc = restore_set_apply(set, &set->pending[i]);
	restore_set_drop_pending(set, 0);
	set->savepoint_count = 0;
	return rc;
}

void restore_set_deinit(struct restore_set *set)
{
	restore_set_drop_pending(set, 0);
	while (set->count > 0)
		restore_set_remove(set, set->count - 1);
	free(set->entries);
	free(set->pending);
	free(set->savepoints);
	*set = (struct restore_set){0};
}
