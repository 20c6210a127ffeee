/*
 * databases.h — the [databases] and [users] sections, as PgBouncer's. [databases]: a database name as
 * clients ask for it → the real name on the server, a server user every client of it logs in as (with
 * its password), and per-database overrides of the pool; `*` is the entry for names not listed. With
 * no [databases] entry at all every name passes through unchanged; with entries and no `*`, a name not
 * listed is refused (3D000), as PgBouncer does. [users]: a user's pool_mode and max_user_connections.
 * The server itself comes from [servers]: an entry's host and port are refused with a message saying so.
 *
 * Threads: built while the config loads, immutable afterwards (a reload builds a new one).
 * Ownership: the config owns it (databases_destroy).
 * Never: opens sockets or knows sessions.
 */
#ifndef TERN_DATABASES_H
#define TERN_DATABASES_H

#include "base.h"

/* Entries in each section; far beyond PgBouncer configs seen in use, bounded so a lookup stays cheap. */
#define DATABASES_ENTRIES_MAX 4096u
#define DATABASES_NAME_MAX 63u /* NAMEDATALEN - 1 */
/* A password in an entry; as long as auth_file's. */
#define DATABASES_PASSWORD_MAX 1024u

/* -1 in pool_mode: [tern] pool_mode; 0 in a count: the [pool] value. */
struct database_entry {
	char name[DATABASES_NAME_MAX + 1];   /* as clients ask for it; "*" for the fallback */
	char dbname[DATABASES_NAME_MAX + 1]; /* on the server; "" = the name asked for */
	char user[DATABASES_NAME_MAX + 1];   /* server user for every client; "" = the client's own */
	char *password;                      /* the forced user's; NULL = auth_file's */
	char server[DATABASES_NAME_MAX + 1]; /* a [servers] key its clients go to; "" = the primary */
	int pool_mode;
	uint32_t pool_size;
	uint32_t reserve_pool_size;
	uint32_t max_db_connections;
};

struct user_entry {
	char name[DATABASES_NAME_MAX + 1];
	int pool_mode;
	uint32_t max_user_connections;
};

struct databases;

/* Adds `name = value` of section "databases" or "users" (value: PgBouncer's `key=value ...`, values
 * optionally 'quoted' with \' and \\ escapes). `pool_mode_names` are config's enum names. On a refusal
 * `reason` says why (an unknown key lists the known ones). 0, -EINVAL, -E2BIG (too many entries) or
 * -ENOMEM. *dbs is created at the first entry. */
TERN_MUST_USE int databases_add(struct databases **dbs, const char *section, const char *name, const char *value,
				const char *const *pool_mode_names, char *reason, size_t reason_size);
/* Reads the next `key=value` of an entry's text from text[*pos]: a value is a word, or '...' with \' and \\
 * escapes as in libpq's conninfo. 1: one read (pos moves past it); 0: the end; <0: malformed (reason set). */
TERN_MUST_USE int databases_scan_pair(const char *text, size_t *pos, char *key, size_t key_size, char *value,
				      size_t value_size, char *reason, size_t reason_size);
/* The entry for a database name: its own, else "*", else NULL. NULL dbs: NULL. */
const struct database_entry *databases_find(const struct databases *dbs, const char *name);
/* True when [databases] has entries (so a name without one is refused). */
bool databases_is_routing(const struct databases *dbs);
const struct user_entry *databases_find_user(const struct databases *dbs, const char *name);
size_t databases_count(const struct databases *dbs);
/* The i-th [databases] entry, for the admin console's SHOW DATABASES. */
const struct database_entry *databases_at(const struct databases *dbs, size_t i);
void databases_destroy(struct databases *dbs);

#endif
