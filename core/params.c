#include "params.h"

#include <ctype.h>
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

const uint8_t *params_sql_skip_blank(const uint8_t *p, const uint8_t *end)
{
	while (p < end) {
		if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f') {
			p++;
		} else if (end - p >= 2 && p[0] == '-' && p[1] == '-') {
			while (p < end && *p != '\n')
				p++;
		} else if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
			p += 2;
			while (end - p >= 2 && !(p[0] == '*' && p[1] == '/'))
				p++;
			p = end - p >= 2 ? p + 2 : end;
		} else {
			break;
		}
	}
	return p;
}

bool params_sql_take_word(const uint8_t **p, const uint8_t *end, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(end - *p) < n || strncasecmp((const char *)*p, word, n) != 0)
		return false;
	const uint8_t *after = *p + n;
	if (after < end && (isalnum(*after) || *after == '_' || *after == '$'))
		return false; /* a longer identifier */
	*p = params_sql_skip_blank(after, end);
	return true;
}

bool params_sql_mentions_search_path(const uint8_t *sql, uint32_t len)
{
	static const char *const words[] = {"search_path", "reset"};
	for (uint32_t i = 0; i < len; i++) {
		int c = tolower(sql[i]);
		if (c != 's' && c != 'r')
			continue;
		for (size_t w = 0; w < TERN_ARRAY_LEN(words); w++) {
			size_t n = strlen(words[w]);
			if (words[w][0] == c && len - i >= n && strncasecmp((const char *)sql + i, words[w], n) == 0)
				return true;
		}
	}
	return false;
}

bool params_sql_statement_may_set_search_path(const uint8_t *sql, uint32_t len)
{
	const uint8_t *end = sql + len;
	const uint8_t *p = params_sql_skip_blank(sql, end);
	if (!params_sql_take_word(&p, end, "set") && !params_sql_take_word(&p, end, "reset"))
		return false;
	return params_sql_mentions_search_path(sql, len);
}

bool params_sql_is_forget_all(const uint8_t *sql, uint32_t len)
{
	const uint8_t *end = sql + len;
	const uint8_t *p = params_sql_skip_blank(sql, end);
	if (params_sql_take_word(&p, end, "deallocate"))
		(void)params_sql_take_word(&p, end, "prepare");
	else if (!params_sql_take_word(&p, end, "discard"))
		return false;
	return params_sql_take_word(&p, end, "all") && (p == end || *p == ';' || *p == '\0');
}

int params_parse_search_path_set(const uint8_t *sql, uint32_t len, char *value, size_t value_size)
{
	const uint8_t *end = sql + len;
	const uint8_t *p = params_sql_skip_blank(sql, end);
	if (params_sql_take_word(&p, end, "reset")) {
		if (!params_sql_take_word(&p, end, "search_path") && !params_sql_take_word(&p, end, "all"))
			return 0;
		base_strlcpy(value, PARAMS_SEARCH_PATH_DEFAULT, value_size);
		return 1;
	}
	if (!params_sql_take_word(&p, end, "set"))
		return 0;
	(void)params_sql_take_word(&p, end, "session");
	if (!params_sql_take_word(&p, end, "search_path"))
		return 0;
	if (p < end && *p == '=')
		p = params_sql_skip_blank(p + 1, end);
	else if (!params_sql_take_word(&p, end, "to"))
		return 0;
	/* The value runs to the statement's end: a ';' outside quotes, or the text's end. */
	const uint8_t *start = p;
	char quote = 0;
	for (; p < end && *p != '\0' && (quote || *p != ';'); p++) {
		/* A comment would swallow what tern appends after the value when it replays it: untracked. */
		if (!quote && end - p >= 2 && ((p[0] == '-' && p[1] == '-') || (p[0] == '/' && p[1] == '*')))
			return 0;
		if (quote && *p == (uint8_t)quote)
			quote = 0;
		else if (!quote && (*p == '\'' || *p == '"'))
			quote = (char)*p;
	}
	while (p > start && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' || p[-1] == '\r'))
		p--;
	if (quote || p == start)
		return 0; /* unterminated or empty: the server will refuse it */
	if ((size_t)(p - start) >= value_size)
		return -ENOSPC;
	memcpy(value, start, (size_t)(p - start));
	value[p - start] = '\0';
	return 1;
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
