/*
 * databases.c — the [databases] and [users] entries of databases.h: a small `key=value` scanner and two
 * arrays searched linearly (a few entries in practice; a login looks one name up).
 */
#include "databases.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

struct databases {
	struct database_entry *entries;
	size_t count, capacity;
	struct user_entry *users;
	size_t user_count, user_capacity;
};

static int databases_refuse(char *reason, size_t reason_size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int databases_refuse(char *reason, size_t reason_size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(reason, reason_size, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int databases_scan_pair(const char *text, size_t *pos, char *key, size_t key_size, char *value,
			       size_t value_size, char *reason, size_t reason_size)
{
	size_t at = *pos;
	while (text[at] == ' ' || text[at] == '\t')
		at++;
	if (text[at] == '\0')
		return 0;
	size_t k = 0;
	while (text[at] != '\0' && text[at] != '=' && text[at] != ' ' && text[at] != '\t') {
		if (k + 1 >= key_size)
			return databases_refuse(reason, reason_size, "a key name is too long");
		key[k++] = text[at++];
	}
	key[k] = '\0';
	while (text[at] == ' ' || text[at] == '\t')
		at++;
	if (text[at] != '=')
		return databases_refuse(reason, reason_size, "expected key=value, got \"%s\" without \"=\"", key);
	at++;
	while (text[at] == ' ' || text[at] == '\t')
		at++;
	size_t v = 0;
	bool quoted = text[at] == '\'';
	if (quoted)
		at++;
	for (;;) {
		char c = text[at];
		if (c == '\0') {
			if (quoted)
				return databases_refuse(reason, reason_size, "%s: unterminated quote", key);
			break;
		}
		if (!quoted && (c == ' ' || c == '\t'))
			break;
		if (quoted && c == '\'') {
			at++;
			break;
		}
		if (quoted && c == '\\' && text[at + 1] != '\0')
			c = text[++at];
		if (v + 1 >= value_size)
			return databases_refuse(reason, reason_size, "%s: value is too long", key);
		value[v++] = c;
		at++;
	}
	value[v] = '\0';
	*pos = at;
	return 1;
}

static int databases_count_value(const char *key, const char *value, uint32_t max, uint32_t *out, char *reason,
				 size_t reason_size)
{
	char *end = NULL;
	unsigned long n = strtoul(value, &end, 10);
	if (value[0] < '0' || value[0] > '9' || *end != '\0' || n > max)
		return databases_refuse(reason, reason_size, "%s: expected an integer between 0 and %u, got \"%s\"",
					key, max, value);
	*out = (uint32_t)n;
	return 0;
}

static int databases_mode_value(const char *value, const char *const *names, int *out, char *reason,
				size_t reason_size)
{
	for (int i = 0; names[i]; i++) {
		if (strcasecmp(names[i], value) == 0) {
			*out = i;
			return 0;
		}
	}
	return databases_refuse(reason, reason_size, "pool_mode: expected session or transaction, got \"%s\"", value);
}

static bool databases_copy_name(char *to, const char *from, const char *key, char *reason, size_t reason_size)
{
	if (!base_strlcpy(to, from, DATABASES_NAME_MAX + 1) || from[0] == '\0') {
		databases_refuse(reason, reason_size, "%s: expected a name of 1 to %u bytes", key, DATABASES_NAME_MAX);
		return false;
	}
	return true;
}

/* One key of a [databases] entry. */
static int databases_entry_key(struct database_entry *e, const char *key, const char *value,
			       const char *const *pool_mode_names, char *reason, size_t reason_size)
{
	if (strcmp(key, "dbname") == 0)
		return databases_copy_name(e->dbname, value, key, reason, reason_size) ? 0 : -EINVAL;
	if (strcmp(key, "user") == 0)
		return databases_copy_name(e->user, value, key, reason, reason_size) ? 0 : -EINVAL;
	if (strcmp(key, "server") == 0)
		return databases_copy_name(e->server, value, key, reason, reason_size) ? 0 : -EINVAL;
	if (strcmp(key, "password") == 0) {
		if (strlen(value) == 0 || strlen(value) > DATABASES_PASSWORD_MAX)
			return databases_refuse(reason, reason_size, "password: expected 1 to %u bytes",
						DATABASES_PASSWORD_MAX);
		free(e->password);
		e->password = strdup(value);
		return e->password ? 0 : -ENOMEM;
	}
	if (strcmp(key, "pool_mode") == 0)
		return databases_mode_value(value, pool_mode_names, &e->pool_mode, reason, reason_size);
	if (strcmp(key, "pool_size") == 0 || strcmp(key, "default_pool_size") == 0)
		return databases_count_value(key, value, 10000, &e->pool_size, reason, reason_size);
	if (strcmp(key, "reserve_pool_size") == 0 || strcmp(key, "reserve_pool") == 0)
		return databases_count_value(key, value, 10000, &e->reserve_pool_size, reason, reason_size);
	if (strcmp(key, "max_db_connections") == 0)
		return databases_count_value(key, value, 100000, &e->max_db_connections, reason, reason_size);
	if (strcmp(key, "host") == 0 || strcmp(key, "port") == 0 || strcmp(key, "hostaddr") == 0)
		return databases_refuse(reason, reason_size,
					"%s: tern takes servers from [servers]: name one there and write server=<its key> "
					"here", key);
	return databases_refuse(reason, reason_size,
				"%s: unknown key (known: dbname, user, password, server, pool_mode, pool_size, "
				"reserve_pool_size, max_db_connections)",
				key);
}

static int databases_user_key(struct user_entry *u, const char *key, const char *value,
			      const char *const *pool_mode_names, char *reason, size_t reason_size)
{
	if (strcmp(key, "pool_mode") == 0)
		return databases_mode_value(value, pool_mode_names, &u->pool_mode, reason, reason_size);
	if (strcmp(key, "max_user_connections") == 0)
		return databases_count_value(key, value, 100000, &u->max_user_connections, reason, reason_size);
	return databases_refuse(reason, reason_size, "%s: unknown key (known: pool_mode, max_user_connections)", key);
}

/* Room for one more element of `size` bytes in *array. */
static int databases_grow(void **array, size_t *capacity, size_t count, size_t size)
{
	if (count < *capacity)
		return 0;
	if (count >= DATABASES_ENTRIES_MAX)
		return -E2BIG;
	size_t next = *capacity ? *capacity * 2 : 8;
	void *grown = realloc(*array, next * size);
	if (!grown)
		return -ENOMEM;
	*array = grown;
	*capacity = next;
	return 0;
}

int databases_add(struct databases **dbs, const char *section, const char *name, const char *value,
		  const char *const *pool_mode_names, char *reason, size_t reason_size)
{
	bool is_users = strcmp(section, "users") == 0;
	TERN_ASSERT(is_users || strcmp(section, "databases") == 0);
	if (!*dbs && !(*dbs = calloc(1, sizeof(**dbs))))
		return -ENOMEM;
	struct databases *d = *dbs;
	if (name[0] == '\0' || strlen(name) > DATABASES_NAME_MAX)
		return databases_refuse(reason, reason_size, "a name of 1 to %u bytes is needed before \"=\"",
					DATABASES_NAME_MAX);
	const struct database_entry *same = databases_find(d, name);
	if (is_users ? databases_find_user(d, name) != NULL : same && strcmp(same->name, name) == 0)
		return databases_refuse(reason, reason_size, "%s is listed twice", name);
	struct database_entry entry = {.pool_mode = -1};
	struct user_entry user = {.pool_mode = -1};
	base_strlcpy(is_users ? user.name : entry.name, name, DATABASES_NAME_MAX + 1);
	char key[32], text[DATABASES_PASSWORD_MAX + 1];
	size_t pos = 0;
	int rc;
	while ((rc = databases_scan_pair(value, &pos, key, sizeof(key), text, sizeof(text), reason, reason_size)) > 0) {
		rc = is_users ? databases_user_key(&user, key, text, pool_mode_names, reason, reason_size)
			      : databases_entry_key(&entry, key, text, pool_mode_names, reason, reason_size);
		if (rc < 0)
			break;
	}
	OPENSSL_cleanse(text, sizeof(text));
	if (rc == 0)
		rc = is_users ? databases_grow((void **)&d->users, &d->user_capacity, d->user_count, sizeof(user))
			      : databases_grow((void **)&d->entries, &d->capacity, d->count, sizeof(entry));
	if (rc == -E2BIG)
		databases_refuse(reason, reason_size, "more than %u entries", DATABASES_ENTRIES_MAX);
	if (rc < 0) {
		if (entry.password) {
			OPENSSL_cleanse(entry.password, strlen(entry.password));
			free(entry.password);
		}
		return rc;
	}
	if (is_users)
		d->users[d->user_count++] = user;
	else
		d->entries[d->count++] = entry;
	return 0;
}

const struct database_entry *databases_find(const struct databases *dbs, const char *name)
{
	if (!dbs)
		return NULL;
	const struct database_entry *fallback = NULL;
	for (size_t i = 0; i < dbs->count; i++) {
		if (strcmp(dbs->entries[i].name, name) == 0)
			return &dbs->entries[i];
		if (strcmp(dbs->entries[i].name, "*") == 0)
			fallback = &dbs->entries[i];
	}
	return fallback;
}

bool databases_is_routing(const struct databases *dbs) { return dbs && dbs->count > 0; }

const struct user_entry *databases_find_user(const struct databases *dbs, const char *name)
{
	for (size_t i = 0; dbs && i < dbs->user_count; i++)
		if (strcmp(dbs->users[i].name, name) == 0)
			return &dbs->users[i];
	return NULL;
}

size_t databases_count(const struct databases *dbs) { return dbs ? dbs->count : 0; }

const struct database_entry *databases_at(const struct databases *dbs, size_t i)
{
	TERN_ASSERT(dbs && i < dbs->count);
	return &dbs->entries[i];
}

void databases_destroy(struct databases *dbs)
{
	if (!dbs)
		return;
	for (size_t i = 0; i < dbs->count; i++) {
		if (dbs->entries[i].password) {
			OPENSSL_cleanse(dbs->entries[i].password, strlen(dbs->entries[i].password));
			free(dbs->entries[i].password);
		}
	}
	free(dbs->entries);
	free(dbs->users);
	free(dbs);
}
