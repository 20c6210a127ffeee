/* SQL read without a parser, a few words at a time: enough to spot the statements whose effect tern
 * must follow (SET and RESET of search_path, DEALLOCATE and DISCARD ALL, UNLISTEN *), and no more. */
#include "sql.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

const uint8_t *sql_skip_blank(const uint8_t *p, const uint8_t *end)
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

/* ASCII lower case: SQL keywords are ASCII, and a byte of a multi-byte character never matches one. */
static inline uint8_t sql_lower(uint8_t c) { return (uint8_t)((unsigned)c - 'A' < 26u ? c + ('a' - 'A') : c); }

/* One pass, no strlen: most calls end at the first byte (a statement that is not the keyword). */
bool sql_take_word(const uint8_t **p, const uint8_t *end, const char *word)
{
	const uint8_t *q = *p;
	for (; *word; word++, q++)
		if (q == end || sql_lower(*q) != sql_lower((uint8_t)*word))
			return false;
	if (q < end && (isalnum(*q) || *q == '_' || *q == '$'))
		return false; /* a longer identifier */
	*p = sql_skip_blank(q, end);
	return true;
}

/* The n lower-case bytes of `word` begin at p (case-insensitive). */
static bool sql_is_word_at(const uint8_t *p, const char *word, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (sql_lower(p[i]) != (uint8_t)word[i])
			return false;
	return true;
}

bool sql_mentions_search_path(const uint8_t *sql, uint32_t len)
{
	/* Every query passes here: one pass, a word compared only where its first two letters are. */
	for (uint32_t i = 0; i + 5 <= len; i++) {
		uint8_t c = sql_lower(sql[i]), next = sql_lower(sql[i + 1]);
		if (next != 'e')
			continue; /* (both words have 'e' second) */
		if ((c == 'r' && sql_is_word_at(sql + i, "reset", 5)) ||
		    (c == 's' && len - i >= 11 && sql_is_word_at(sql + i, "search_path", 11)))
			return true;
	}
	return false;
}

bool sql_mentions_into(const uint8_t *sql, uint32_t len)
{
	for (uint32_t i = 0; i + 4 <= len; i++)
		if (sql_lower(sql[i]) == 'i' && sql_is_word_at(sql + i + 1, "nto", 3))
			return true;
	return false;
}

bool sql_statement_may_set_search_path(const uint8_t *sql, uint32_t len)
{
	const uint8_t *end = sql + len;
	const uint8_t *p = sql_skip_blank(sql, end);
	if (!sql_take_word(&p, end, "set") && !sql_take_word(&p, end, "reset"))
		return false;
	return sql_mentions_search_path(sql, len);
}

bool sql_is_forget_all(const uint8_t *sql, uint32_t len)
{
	const uint8_t *end = sql + len;
	const uint8_t *p = sql_skip_blank(sql, end);
	if (sql_take_word(&p, end, "deallocate"))
		(void)sql_take_word(&p, end, "prepare");
	else if (!sql_take_word(&p, end, "discard"))
		return false;
	return sql_take_word(&p, end, "all") && (p == end || *p == ';' || *p == '\0');
}

int sql_parse_search_path_set(const uint8_t *sql, uint32_t len, char *value, size_t value_size)
{
	const uint8_t *end = sql + len;
	const uint8_t *p = sql_skip_blank(sql, end);
	if (sql_take_word(&p, end, "reset")) {
		if (!sql_take_word(&p, end, "search_path") && !sql_take_word(&p, end, "all"))
			return 0;
		base_strlcpy(value, SQL_SEARCH_PATH_RESET, value_size);
		return 1;
	}
	if (!sql_take_word(&p, end, "set"))
		return 0;
	(void)sql_take_word(&p, end, "session");
	if (!sql_take_word(&p, end, "search_path"))
		return 0;
	if (p < end && *p == '=')
		p = sql_skip_blank(p + 1, end);
	else if (!sql_take_word(&p, end, "to"))
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

bool sql_is_unlisten_all(const uint8_t *sql, uint32_t len)
{
	const uint8_t *end = sql + len;
	const uint8_t *p = sql_skip_blank(sql, end);
	return sql_take_word(&p, end, "unlisten") && p < end && *p == '*';
}

/* The identifier at p as PostgreSQL reads it (an unquoted one folded to lower case), which must end the
 * statement (a ';' and blanks may follow): 1, or 0 (none, more text, or name_size bytes or more). */
static int sql_take_last_name(const uint8_t *p, const uint8_t *end, char *name, size_t name_size)
{
	size_t n = 0;
	if (p < end && *p == '"') { /* a quoted identifier keeps its case; "" is a quote */
		for (p++; p < end && n + 1 < name_size; p++) {
			if (*p == '"' && !(end - p >= 2 && p[1] == '"'))
				break;
			if (*p == '"')
				p++;
			name[n++] = (char)*p;
		}
		if (p >= end || *p != '"')
			return 0;
		p++;
	} else {
		for (; p < end && n + 1 < name_size && (isalnum(*p) || *p == '_' || *p == '$'); p++)
			name[n++] = (char)tolower(*p); /* an unquoted identifier folds to lower case */
	}
	name[n] = '\0';
	p = sql_skip_blank(p, end);
	if (p < end && *p == ';')
		p = sql_skip_blank(p + 1, end);
	return n > 0 && p == end ? 1 : 0;
}

int sql_parse_deallocate(const uint8_t *sql, uint32_t len, char *name, size_t name_size)
{
	TERN_ASSERT(name_size > 1);
	const uint8_t *end = memchr(sql, '\0', len);
	if (!end)
		end = sql + len;
	const uint8_t *p = sql_skip_blank(sql, end);
	if (!sql_take_word(&p, end, "deallocate"))
		return 0;
	(void)sql_take_word(&p, end, "prepare");
	return sql_take_last_name(p, end, name, name_size);
}

int sql_parse_savepoint(const uint8_t *sql, uint32_t len, char *name, size_t name_size)
{
	TERN_ASSERT(name_size > 1);
	const uint8_t *end = memchr(sql, '\0', len);
	if (!end)
		end = sql + len;
	const uint8_t *p = sql_skip_blank(sql, end);
	int kind = SQL_SAVEPOINT_NONE;
	if (sql_take_word(&p, end, "savepoint")) {
		kind = SQL_SAVEPOINT_SET;
	} else if (sql_take_word(&p, end, "release")) {
		(void)sql_take_word(&p, end, "savepoint");
		kind = SQL_SAVEPOINT_RELEASE;
	} else if (sql_take_word(&p, end, "rollback")) {
		if (!sql_take_word(&p, end, "work"))
			(void)sql_take_word(&p, end, "transaction");
		if (!sql_take_word(&p, end, "to"))
			return SQL_SAVEPOINT_NONE;
		(void)sql_take_word(&p, end, "savepoint");
		kind = SQL_SAVEPOINT_ROLLBACK_TO;
	}
	return kind != SQL_SAVEPOINT_NONE && sql_take_last_name(p, end, name, name_size) ? kind : SQL_SAVEPOINT_NONE;
}
