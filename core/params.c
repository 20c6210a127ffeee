/* Tracked parameters (params.h): the tracked names, a connection's reported values, and the SET that gives
 * a client its own values back. See params.h. */
#include "params.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

/* What PgBouncer tracks by default, plus IntervalStyle, which PostgreSQL also reports. */
static const char *const params_builtin[] = {"application_name", "client_encoding", "DateStyle",
					     "IntervalStyle",    "TimeZone",        "standard_conforming_strings"};

int params_tracked_init(struct params_tracked *tracked, const char *extra)
{
	memset(tracked, 0, sizeof(*tracked));
	for (size_t i = 0; i < TERN_ARRAY_LEN(params_builtin); i++)
		tracked->names[tracked->count++] = params_builtin[i];
	if (!extra || !extra[0])
		return 0;
	tracked->storage = strdup(extra);
	if (!tracked->storage)
		return -ENOMEM;
	char *save = NULL;
	for (char *name = strtok_r(tracked->storage, ", \t", &save); name; name = strtok_r(NULL, ", \t", &save)) {
		if (params_tracked_index(tracked, name) >= 0)
			continue;
		if (tracked->count == PARAMS_TRACKED_MAX)
			return -E2BIG;
		tracked->names[tracked->count++] = name;
	}
	return 0;
}

void params_tracked_deinit(struct params_tracked *tracked)
{
	free(tracked->storage);
	memset(tracked, 0, sizeof(*tracked));
}

int params_tracked_index(const struct params_tracked *tracked, const char *name)
{
	for (uint32_t i = 0; i < tracked->count; i++)
		if (strcasecmp(tracked->names[i], name) == 0)
			return (int)i;
	return -1;
}

const char *params_find(const struct pool_param *params, uint32_t count, const char *name)
{
	for (uint32_t i = 0; i < count; i++)
		if (strcasecmp(params[i].name, name) == 0)
			return params[i].value;
	return NULL;
}

void params_store(struct pool_param *params, uint32_t *count, const char *name, const char *value)
{
	for (uint32_t i = 0; i < *count; i++) {
		if (strcasecmp(params[i].name, name) == 0) {
			base_strlcpy(params[i].value, value, sizeof(params[i].value));
			return;
		}
	}
	if (*count == POOL_PARAMS_MAX)
		return; /* a connection reporting more than POOL_PARAMS_MAX names: the rest go unrecorded */
	base_strlcpy(params[*count].name, name, sizeof(params[*count].name));
	base_strlcpy(params[*count].value, value, sizeof(params[*count].value));
	(*count)++;
}

/* Appends s to out; as the inside of a string literal when `quote`: quotes doubled, and backslashes
 * doubled, which the caller pairs with E'' so the literal reads the same whatever
 * standard_conforming_strings says. */
static bool params_append(char *out, size_t out_size, size_t *len, const char *s, bool quote)
{
	for (const char *c = s; *c; c++) {
		size_t need = (quote && (*c == '\'' || *c == '\\')) ? 2 : 1;
		if (*len + need >= out_size)
			return false;
		if (need == 2)
			out[(*len)++] = *c;
		out[(*len)++] = *c;
	}
	out[*len] = '\0';
	return true;
}

int params_build_set(const struct params_tracked *tracked, const struct params_values *client,
		     const struct pool_param *conn, uint32_t conn_count, char *out, size_t out_size)
{
	size_t len = 0;
	out[0] = '\0';
	for (uint32_t i = 0; i < tracked->count; i++) {
		if (!(client->is_set & (1u << i)))
			continue;
		const char *have = params_find(conn, conn_count, tracked->names[i]);
		if (have && strcmp(have, client->value[i]) == 0)
			continue;
		bool backslash = strchr(client->value[i], '\\') != NULL;
		if (!params_append(out, out_size, &len, len ? "; SET " : "SET ", false) ||
		    !params_append(out, out_size, &len, tracked->names[i], false) ||
		    !params_append(out, out_size, &len, backslash ? " TO E'" : " TO '", false) ||
		    !params_append(out, out_size, &len, client->value[i], true) ||
		    !params_append(out, out_size, &len, "'", false))
			return -ENOSPC;
	}
	return (int)len;
}
