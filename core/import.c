/*
 * import.c — pgbouncer.ini → tern.ini (import.h). One table says where each [pgbouncer] key goes and how
 * its value changes; [databases] and [users] entries are rewritten key by key.
 */
#include "import.h"

#include "base.h"
#include "databases.h"

#include <errno.h>
/* As config.c: Debian's libinih passes the line number to handlers. */
#define INI_HANDLER_LINENO 1
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum import_conversion {
	IMPORT_COPY,      /* the same value */
	IMPORT_SECONDS,   /* PgBouncer's seconds (a fraction allowed) → milliseconds */
	IMPORT_PATH,      /* relative to pgbouncer.ini → absolute */
	IMPORT_POOL_MODE, /* statement has no equivalent */
	IMPORT_AUTH_TYPE,
	IMPORT_TLS_MODE,
};

static const struct import_key {
	const char *name; /* in [pgbouncer] */
	const char *section, *key;
	enum import_conversion conversion;
} import_keys[] = {
	{"pool_mode", "tern", "pool_mode", IMPORT_POOL_MODE},
	{"default_pool_size", "pool", "pool_size", IMPORT_COPY},
	{"min_pool_size", "pool", "min_pool_size", IMPORT_COPY},
	{"reserve_pool_size", "pool", "reserve_pool_size", IMPORT_COPY},
	{"reserve_pool_timeout", "pool", "reserve_pool_timeout", IMPORT_SECONDS},
	{"max_db_connections", "pool", "max_db_connections", IMPORT_COPY},
	{"max_user_connections", "pool", "max_user_connections", IMPORT_COPY},
	{"server_lifetime", "pool", "server_lifetime", IMPORT_SECONDS},
	{"server_idle_timeout", "pool", "server_idle_timeout", IMPORT_SECONDS},
	{"server_connect_timeout", "pool", "server_connect_timeout", IMPORT_SECONDS},
	{"query_wait_timeout", "pool", "query_wait_timeout", IMPORT_SECONDS},
	{"max_prepared_statements", "pool", "max_prepared_statements", IMPORT_COPY},
	{"track_extra_parameters", "pool", "track_extra_parameters", IMPORT_COPY},
	{"auth_type", "auth", "mode", IMPORT_AUTH_TYPE},
	{"auth_file", "auth", "auth_file", IMPORT_PATH},
	{"auth_user", "auth", "auth_user", IMPORT_COPY},
	{"auth_query", "auth", "auth_query", IMPORT_COPY},
	{"auth_dbname", "auth", "auth_dbname", IMPORT_COPY},
	{"admin_users", "admin", "admin_users", IMPORT_COPY},
	{"max_client_conn", "limits", "max_client_conn", IMPORT_COPY},
	{"client_login_timeout", "limits", "client_login_timeout", IMPORT_SECONDS},
	{"client_idle_timeout", "limits", "client_idle_timeout", IMPORT_SECONDS},
	{"idle_transaction_timeout", "limits", "idle_transaction_timeout", IMPORT_SECONDS},
	{"query_timeout", "limits", "query_timeout", IMPORT_SECONDS},
	{"unix_socket_dir", "tern", "unix_socket_dir", IMPORT_PATH},
	{"unix_socket_mode", "tern", "unix_socket_mode", IMPORT_COPY},
	{"unix_socket_group", "tern", "unix_socket_group", IMPORT_COPY},
	{"client_tls_sslmode", "tls", "client_tls_sslmode", IMPORT_TLS_MODE},
	{"client_tls_cert_file", "tls", "client_tls_cert_file", IMPORT_PATH},
	{"client_tls_key_file", "tls", "client_tls_key_file", IMPORT_PATH},
	{"client_tls_ca_file", "tls", "client_tls_ca_file", IMPORT_PATH},
	{"client_tls_ciphers", "tls", "client_tls_ciphers", IMPORT_COPY},
	{"server_tls_sslmode", "tls", "server_tls_sslmode", IMPORT_COPY}, /* libpq's names, as tern's */
	{"server_tls_ca_file", "tls", "server_tls_ca_file", IMPORT_PATH},
	{"server_tls_cert_file", "tls", "server_tls_cert_file", IMPORT_PATH},
	{"server_tls_key_file", "tls", "server_tls_key_file", IMPORT_PATH},
	{"server_tls_protocols", "tls", "server_tls_protocols", IMPORT_COPY},
	{"server_tls_ciphers", "tls", "server_tls_ciphers", IMPORT_COPY},
};

/* Servers one tern fronts ([servers] keys). */
#define IMPORT_SERVERS_MAX 16u

/* The sections tern.ini is written in, in this order. */
static const char *const import_sections[] = {"tern", "servers", "pool", "auth", "admin", "tls", "limits",
					      "databases", "users"};
#define IMPORT_SECTION_COUNT TERN_ARRAY_LEN(import_sections)

struct import {
	const char *path;
	char dir[PATH_MAX];
	FILE *sections[IMPORT_SECTION_COUNT];
	char *texts[IMPORT_SECTION_COUNT];
	size_t sizes[IMPORT_SECTION_COUNT];
	FILE *notes;
	char *notes_text;
	size_t notes_size;
	uint32_t lines;
	char listen_addr[256];
	char listen_port[16];
	/* The servers [databases] names, in order: the first is `primary`, the others server2, server3, ... */
	struct import_server {
		char host[256];
		char port[16];
	} servers[IMPORT_SERVERS_MAX];
	uint32_t server_count;
	bool is_failed;
};

static FILE *import_section(struct import *im, const char *section)
{
	for (size_t i = 0; i < IMPORT_SECTION_COUNT; i++)
		if (strcmp(import_sections[i], section) == 0)
			return im->sections[i];
	TERN_ASSERT(!"a section of import_sections");
	return NULL;
}

static void import_note(struct import *im, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void import_note(struct import *im, int line, const char *fmt, ...)
{
	if (im->lines++ >= IMPORT_LINES_MAX)
		return;
	fprintf(im->notes, "%s:%d: ", im->path, line);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(im->notes, fmt, ap);
	va_end(ap);
	fputc('\n', im->notes);
}

static void import_put(struct import *im, const char *section, const char *key, const char *value)
{
	if (im->lines++ < IMPORT_LINES_MAX)
		fprintf(import_section(im, section), "%s = %s\n", key, value);
}

/* A PgBouncer duration in seconds ("30", "0.5") as tern's milliseconds; false when it is not a number. */
static bool import_seconds(const char *value, char *out, size_t out_size)
{
	char *end = NULL;
	double seconds = strtod(value, &end);
	if (end == value || *end != '\0' || seconds < 0 || seconds > 1e9)
		return false;
	snprintf(out, out_size, "%llums", (unsigned long long)(seconds * 1000.0 + 0.5));
	return true;
}

static void import_path(const struct import *im, const char *value, char *out, size_t out_size)
{
	if (value[0] == '/' || value[0] == '\0')
		snprintf(out, out_size, "%s", value);
	else
		snprintf(out, out_size, "%s/%s", im->dir, value);
}

static void import_pgbouncer_key(struct import *im, const char *name, const char *value, int line)
{
	if (strcmp(name, "listen_addr") == 0) {
		size_t n = strcspn(value, ",");
		snprintf(im->listen_addr, sizeof(im->listen_addr), "%.*s", (int)n, value);
		if (value[n] != '\0')
			import_note(im, line, "listen_addr = %s: tern listens on one address; %s is kept", value,
				    im->listen_addr);
		return;
	}
	if (strcmp(name, "listen_port") == 0) {
		snprintf(im->listen_port, sizeof(im->listen_port), "%s", value);
		return;
	}
	const struct import_key *key = NULL;
	for (size_t i = 0; i < TERN_ARRAY_LEN(import_keys) && !key; i++)
		if (strcmp(import_keys[i].name, name) == 0)
			key = &import_keys[i];
	if (!key) {
		import_note(im, line, "[pgbouncer] %s = %s: no equivalent in tern; left out", name, value);
		return;
	}
	char converted[PATH_MAX + 64];
	const char *put = value;
	switch (key->conversion) {
	case IMPORT_COPY:
		break;
	case IMPORT_SECONDS:
		if (!import_seconds(value, converted, sizeof(converted))) {
			import_note(im, line, "[pgbouncer] %s = %s: not a number of seconds; left out", name, value);
			return;
		}
		put = converted;
		break;
	case IMPORT_PATH:
		import_path(im, value, converted, sizeof(converted));
		put = converted;
		break;
	case IMPORT_POOL_MODE:
		if (strcasecmp(value, "statement") == 0) {
			import_note(im, line, "pool_mode = statement: tern has session and transaction pooling; "
					      "transaction is written");
			put = "transaction";
		}
		break;
	case IMPORT_AUTH_TYPE:
		if (strcasecmp(value, "scram-sha-256") == 0 || strcasecmp(value, "md5") == 0 ||
		    strcasecmp(value, "trust") == 0 || strcasecmp(value, "cert") == 0)
			break;
		if (strcasecmp(value, "any") == 0) {
			put = "trust";
			import_note(im, line, "auth_type = any: tern's trust also checks the user is named; trust is written");
			break;
		}
		put = "md5";
		import_note(im, line,
			    "auth_type = %s: tern knows trust, md5, scram-sha-256 and cert; md5 (which asks SCRAM of "
			    "users with SCRAM secrets) is written: check it is what you want",
			    value);
		break;
	case IMPORT_TLS_MODE:
		if (strcasecmp(value, "verify-ca") == 0 || strcasecmp(value, "verify-full") == 0) {
			put = "require";
			import_note(im, line,
				    "client_tls_sslmode = %s: tern checks client certificates against "
				    "client_tls_ca_file but has no %s mode; require is written",
				    value, value);
		}
		break;
	}
	import_put(im, key->section, key->key, put);
}

/* Writes `value` quoted when a word would not carry it whole. */
static void import_put_word(FILE *out, const char *key, const char *value)
{
	bool plain = value[0] != '\0' && strpbrk(value, " \t'\\") == NULL;
	fprintf(out, " %s=", key);
	if (plain) {
		fputs(value, out);
		return;
	}
	fputc('\'', out);
	for (const char *c = value; *c; c++) {
		if (*c == '\'' || *c == '\\')
			fputc('\\', out);
		fputc(*c, out);
	}
	fputc('\'', out);
}

static void import_database(struct import *im, const char *name, const char *value, int line)
{
	char key[32], text[DATABASES_PASSWORD_MAX + 1], reason[256];
	char host[256] = "", port[16] = "5432";
	char *carried = NULL;
	size_t carried_size = 0;
	FILE *out = open_memstream(&carried, &carried_size);
	if (!out) {
		im->is_failed = true;
		return;
	}
	size_t pos = 0;
	int rc;
	while ((rc = databases_scan_pair(value, &pos, key, sizeof(key), text, sizeof(text), reason, sizeof(reason))) >
	       0) {
		if (strcmp(key, "host") == 0 || strcmp(key, "hostaddr") == 0)
			snprintf(host, sizeof(host), "%.255s", text);
		else if (strcmp(key, "port") == 0)
			snprintf(port, sizeof(port), "%.15s", text);
		else if (strcmp(key, "pool_mode") == 0 && strcasecmp(text, "statement") == 0)
			import_note(im, line, "[databases] %s: pool_mode = statement has no equivalent; left out", name);
		else if (strcmp(key, "dbname") == 0 || strcmp(key, "user") == 0 || strcmp(key, "password") == 0 ||
			 strcmp(key, "pool_size") == 0 || strcmp(key, "pool_mode") == 0 ||
			 strcmp(key, "max_db_connections") == 0 || strcmp(key, "reserve_pool") == 0 ||
			 strcmp(key, "reserve_pool_size") == 0)
			import_put_word(out, strcmp(key, "reserve_pool") == 0 ? "reserve_pool_size" : key, text);
		else
			import_note(im, line, "[databases] %s: %s = %s has no equivalent in tern; left out", name, key, text);
	}
	fclose(out); /* carried holds the entry's keys from here */
	/* Its server: the first one named is [servers] primary; another becomes serverN, pinned by server=. */
	uint32_t index = 0;
	while (index < im->server_count &&
	       (strcmp(im->servers[index].host, host) != 0 || strcmp(im->servers[index].port, port) != 0))
		index++;
	if (rc == 0 && index == im->server_count && index == IMPORT_SERVERS_MAX) {
		rc = -E2BIG;
		snprintf(reason, sizeof(reason), "more than %u servers", IMPORT_SERVERS_MAX);
	} else if (rc == 0 && index == im->server_count) {
		im->servers[index] = (struct import_server){0};
		snprintf(im->servers[index].host, sizeof(im->servers[index].host), "%s", host);
		snprintf(im->servers[index].port, sizeof(im->servers[index].port), "%s", port);
		im->server_count++;
	}
	if (rc < 0) {
		import_note(im, line, "[databases] %s: %s; the entry is left out", name, reason);
	} else if (im->lines++ < IMPORT_LINES_MAX) {
		fprintf(import_section(im, "databases"), "%s =%s", name, carried ? carried : "");
		if (index > 0)
			fprintf(import_section(im, "databases"), " server=server%u", index + 1);
		fputc('\n', import_section(im, "databases"));
	}
	free(carried);
}

static void import_user(struct import *im, const char *name, const char *value, int line)
{
	char key[32], text[256], reason[256];
	size_t pos = 0;
	int rc;
	FILE *out = import_section(im, "users");
	bool has_any = false;
	while ((rc = databases_scan_pair(value, &pos, key, sizeof(key), text, sizeof(text), reason, sizeof(reason))) >
	       0) {
		if ((strcmp(key, "pool_mode") == 0 && strcasecmp(text, "statement") != 0) ||
		    strcmp(key, "max_user_connections") == 0) {
			fprintf(out, "%s%s", has_any ? "" : name, has_any ? "" : " =");
			import_put_word(out, key, text);
			has_any = true;
		} else {
			import_note(im, line, "[users] %s: %s = %s has no equivalent in tern; left out", name, key, text);
		}
	}
	if (has_any)
		fputc('\n', out);
	if (rc < 0)
		import_note(im, line, "[users] %s: %s", name, reason);
}

static int import_on_value(void *user, const char *section, const char *name, const char *value, int line)
{
	struct import *im = user;
	if (strcmp(section, "pgbouncer") == 0)
		import_pgbouncer_key(im, name, value, line);
	else if (strcmp(section, "databases") == 0)
		import_database(im, name, value, line);
	else if (strcmp(section, "users") == 0)
		import_user(im, name, value, line);
	else
		import_note(im, line, "[%s] %s: tern has no [%s] section; left out", section, name, section);
	return 1;
}

int import_pgbouncer(const char *path, FILE *out, FILE *notes)
{
	struct import im = {.path = path};
	snprintf(im.listen_port, sizeof(im.listen_port), "6432");
	/* Relative paths in it (auth_file, certificates) are relative to its folder. */
	if (!realpath(path, im.dir)) {
		int rc = -errno;
		fprintf(notes, "tern: %s: %s\n", path, strerror(-rc));
		return rc;
	}
	*strrchr(im.dir, '/') = '\0';
	int rc = 0;
	im.notes = open_memstream(&im.notes_text, &im.notes_size);
	for (size_t i = 0; i < IMPORT_SECTION_COUNT && im.notes; i++)
		if (!(im.sections[i] = open_memstream(&im.texts[i], &im.sizes[i])))
			rc = -ENOMEM;
	if (!im.notes || rc < 0) {
		fprintf(notes, "tern: out of memory\n");
		rc = -ENOMEM;
		goto out;
	}
	int parsed = ini_parse(path, import_on_value, &im);
	if (parsed != 0 || im.is_failed) {
		if (parsed < 0)
			fprintf(notes, "tern: %s: cannot read: %s\n", path, strerror(errno));
		else
			fprintf(notes, "tern: %s:%d: not an ini line\n", path, parsed);
		rc = -EINVAL;
		goto out;
	}
	if (im.listen_addr[0] == '\0')
		import_note(&im, 0, "no listen_addr (PgBouncer then listens on its Unix socket only): tern listens on "
				    "127.0.0.1 and has no Unix socket for clients yet");
	char listen[300];
	const char *addr = strcmp(im.listen_addr, "*") == 0 ? "*" : im.listen_addr[0] ? im.listen_addr : "127.0.0.1";
	snprintf(listen, sizeof(listen), "listen = %s:%s\n", addr, im.listen_port);
	if (im.server_count == 0)
		import_note(&im, 0, "no [databases] entry names a server: [servers] primary is libpq's default (the "
				    "local socket, port 5432); edit it");
	for (size_t i = 0; i < IMPORT_SECTION_COUNT; i++)
		fflush(im.sections[i]);
	fflush(im.notes);
	fprintf(out, "# tern.ini imported from %s by tern --import-pgbouncer\n", path);
	for (size_t i = 0; i < IMPORT_SECTION_COUNT; i++) {
		const char *text = im.texts[i] ? im.texts[i] : "";
		if (i == 0) {
			fprintf(out, "\n[tern]\n%s%s", listen, text);
			continue;
		}
		if (i == 1) {
			fputs("\n[servers]\n", out);
			for (uint32_t s = 0; s < TERN_MAX(im.server_count, 1u); s++) {
				const struct import_server *server = &im.servers[s]; /* zero: libpq's default */
				char name[16];
				snprintf(name, sizeof(name), s == 0 ? "primary" : "server%u", s + 1);
				fprintf(out, "%s = %s%s%sport=%s\n", name, server->host[0] ? "host=" : "", server->host,
					server->host[0] ? " " : "", server->port[0] ? server->port : "5432");
			}
			continue;
		}
		if (text[0])
			fprintf(out, "\n[%s]\n%s", import_sections[i], text);
	}
	if (im.notes_text && im.notes_text[0]) {
		fputs(im.notes_text, notes);
		fputs("\n# Not carried over (see above for each line):\n", out);
		for (const char *line = im.notes_text; *line;) {
			size_t n = strcspn(line, "\n");
			fprintf(out, "#   %.*s\n", (int)n, line);
			line += n + (line[n] == '\n');
		}
	}
out:
	for (size_t i = 0; i < IMPORT_SECTION_COUNT; i++) {
		if (im.sections[i])
			fclose(im.sections[i]);
		free(im.texts[i]);
	}
	if (im.notes)
		fclose(im.notes);
	free(im.notes_text);
	return rc;
}
