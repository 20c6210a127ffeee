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

/* A SET's value at *p, which runs to the statement's end (a ';' outside quotes, a NUL, or end): true
 * with *p at its last byte's end (trailing blanks left out); false when it is empty or unterminated (the
 * server refuses it), or holds a comment (it would swallow what tern appends when it sends the value
 * again) or an escape string (E'\'' is not read here). */
static bool sql_take_value(const uint8_t **at, const uint8_t *end)
{
	const uint8_t *start = *at, *p = start;
	char quote = 0;
	for (; p < end && *p != '\0' && (quote || *p != ';'); p++) {
		if (!quote && end - p >= 2 && ((p[0] == '-' && p[1] == '-') || (p[0] == '/' && p[1] == '*')))
			return false;
		if (quote && *p == (uint8_t)quote)
			quote = 0;
		else if (!quote && *p == '\'' && p > start && (p[-1] == 'e' || p[-1] == 'E'))
			return false;
		else if (!quote && (*p == '\'' || *p == '"'))
			quote = (char)*p;
	}
	while (p > start && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' || p[-1] == '\r'))
		p--;
	if (quote || p == start)
		return false;
	*at = p;
	return true;
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
	const uint8_t *start = p;
	if (!sql_take_value(&p, end))
		return 0;
	if ((size_t)(p - start) >= value_size)
		return -ENOSPC;
	memcpy(value, start, (size_t)(p - start));
	value[p - start] = '\0';
	return 1;
}

/* The word of n bytes at sql[i] stands alone: no identifier byte right before or after it. */
static bool sql_is_alone(const uint8_t *sql, uint32_t len, uint32_t i, uint32_t n)
{
	bool before = i > 0 && (isalnum(sql[i - 1]) || sql[i - 1] == '_' || sql[i - 1] == '$');
	bool after = i + n < len && (isalnum(sql[i + n]) || sql[i + n] == '_' || sql[i + n] == '$');
	return !before && !after;
}

bool sql_may_hold_session_state(const uint8_t *sql, uint32_t len)
{
	static const struct {
		const char *word;
		uint32_t len;
	} words[] = {{"temp", 4},
		     {"temporary", 9},
		     {"hold", 4},
		     {"pg_advisory_lock", 16},
		     {"pg_advisory_lock_shared", 23},
		     {"pg_try_advisory_lock", 20},
		     {"pg_try_advisory_lock_shared", 27}};
	for (uint32_t i = 0; i < len; i++) {
		uint8_t c = sql_lower(sql[i]);
		if (c != 't' && c != 'h' && c != 'p')
			continue; /* (every word's first letter) */
		for (size_t w = 0; w < TERN_ARRAY_LEN(words); w++)
			if (words[w].word[0] == c && len - i >= words[w].len &&
			    sql_is_word_at(sql + i, words[w].word, words[w].len) && sql_is_alone(sql, len, i, words[w].len))
				return true;
	}
	return false;
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

int sql_parse_listen(const uint8_t *sql, uint32_t len, char *name, size_t name_size)
{
	TERN_ASSERT(name_size > 1);
	const uint8_t *end = sql + len, *p = sql_skip_blank(sql, end);
	name[0] = '\0';
	if (p == end || (sql_lower(*p) != 'l' && sql_lower(*p) != 'u'))
		return SQL_LISTEN_NONE; /* (most texts: one byte read) */
	const uint8_t *nul = memchr(p, '\0', (size_t)(end - p));
	end = nul ? nul : end;
	if (sql_take_word(&p, end, "listen"))
		return sql_take_last_name(p, end, name, name_size) ? SQL_LISTEN : SQL_LISTEN_NONE;
	if (!sql_take_word(&p, end, "unlisten"))
		return SQL_LISTEN_NONE;
	if (p < end && *p == '*') {
		p = sql_skip_blank(p + 1, end);
		if (p < end && *p == ';')
			p = sql_skip_blank(p + 1, end);
		return p == end ? SQL_UNLISTEN_ALL : SQL_LISTEN_NONE;
	}
	return sql_take_last_name(p, end, name, name_size) ? SQL_UNLISTEN : SQL_LISTEN_NONE;
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

/* An identifier at *p as PostgreSQL reads a variable's name (folded to lower case, a quoted one too: GUC
 * names match in any case), with a custom variable's ".part": true, or false (none, or name_size bytes
 * or more). */
static bool sql_take_name(const uint8_t **at, const uint8_t *end, char *name, size_t name_size)
{
	const uint8_t *p = *at;
	size_t n = 0;
	for (bool is_part = true; is_part;) {
		size_t part = n;
		if (p < end && *p == '"') {
			for (p++; p < end && !(*p == '"' && !(end - p >= 2 && p[1] == '"')); p++) {
				if (*p == '"')
					p++;
				if (n + 1 >= name_size)
					return false;
				name[n++] = (char)tolower(*p);
			}
			if (p >= end)
				return false;
			p++;
		} else {
			for (; p < end && (isalnum(*p) || *p == '_' || *p == '$'); p++) {
				if (n + 1 >= name_size)
					return false;
				name[n++] = (char)tolower(*p);
			}
		}
		if (n == part)
			return false;
		is_part = p < end && *p == '.';
		if (is_part) {
			if (n + 1 >= name_size)
				return false;
			name[n++] = '.';
			p++;
		}
	}
	name[n] = '\0';
	*at = sql_skip_blank(p, end);
	return true;
}

/* The special forms of SET and RESET: their words, and the variable they set. */
static const struct sql_set_form {
	const char *words[2];
	const char *variable;
	const char *default_word; /* the value that means the default ("": none) */
} sql_set_forms[] = {
	{{"time", "zone"}, "timezone", "local"},
	{{"names", NULL}, "client_encoding", "default"},
	{{"schema", NULL}, "search_path", ""},
	{{"role", NULL}, "role", "none"},
	{{"session", "authorization"}, "session_authorization", "default"},
	{{"xml", "option"}, "xmloption", ""},
};

static const struct sql_set_form *sql_take_form(const uint8_t **p, const uint8_t *end)
{
	for (size_t i = 0; i < TERN_ARRAY_LEN(sql_set_forms); i++) {
		const uint8_t *q = *p;
		const struct sql_set_form *f = &sql_set_forms[i];
		if (sql_take_word(&q, end, f->words[0]) && (!f->words[1] || sql_take_word(&q, end, f->words[1]))) {
			*p = q;
			return f;
		}
	}
	return NULL;
}

const char *sql_set_tag(enum sql_set_kind kind)
{
	switch (kind) {
	case SQL_SET_VALUE:
	case SQL_SET_UNKNOWN:
		return "SET";
	case SQL_SET_RESET:
	case SQL_SET_RESET_ALL:
		return "RESET";
	case SQL_SET_DISCARD_ALL:
		return "DISCARD ALL";
	case SQL_SET_SAVEPOINT:
		return "SAVEPOINT";
	case SQL_SET_RELEASE:
		return "RELEASE";
	case SQL_SET_ROLLBACK_TO:
	case SQL_SET_ROLLBACK:
		return "ROLLBACK";
	case SQL_SET_NONE:
		break;
	}
	return "";
}

/* SET ... after its first word: a variable's value, its default, or a scope tern does not keep. */
static enum sql_set_kind sql_parse_set_value(const uint8_t *p, const uint8_t *end, char *name, size_t name_size,
					     const uint8_t **value_end)
{
	if (sql_take_word(&p, end, "local") || sql_take_word(&p, end, "transaction") ||
	    sql_take_word(&p, end, "constraints"))
		return SQL_SET_NONE; /* the transaction's own: gone at its end */
	const uint8_t *q = p;
	if (sql_take_word(&q, end, "session")) {
		if (sql_take_word(&q, end, "characteristics"))
			return SQL_SET_UNKNOWN; /* three variables at once */
		if (!sql_take_word(&q, end, "authorization"))
			p = q; /* the scope word (SET SESSION name), not SET SESSION AUTHORIZATION */
	}
	const struct sql_set_form *form = sql_take_form(&p, end);
	if (form) {
		base_strlcpy(name, form->variable, name_size);
	} else if (!sql_take_name(&p, end, name, name_size)) {
		return SQL_SET_UNKNOWN;
	} else if (p < end && *p == '=') {
		p = sql_skip_blank(p + 1, end);
	} else if (!sql_take_word(&p, end, "to")) {
		return SQL_SET_NONE; /* (SET x FROM CURRENT is a function's, refused here) */
	}
	const uint8_t *start = p;
	if (!sql_take_value(&p, end))
		return SQL_SET_UNKNOWN;
	const uint8_t *w = start;
	const char *default_word = form ? form->default_word : "default";
	if (default_word[0] && sql_take_word(&w, end, default_word) && w >= p)
		return SQL_SET_RESET;
	*value_end = p;
	return SQL_SET_VALUE;
}

enum sql_set_kind sql_parse_set(const uint8_t *sql, uint32_t len, char *name, size_t name_size, uint32_t *start,
				uint32_t *stmt_len)
{
	TERN_ASSERT(name_size > 1);
	const uint8_t *end = memchr(sql, '\0', len);
	if (!end)
		end = sql + len;
	const uint8_t *first = sql_skip_blank(sql, end), *p = first, *value_end = NULL;
	name[0] = '\0';
	*start = (uint32_t)(first - sql);
	*stmt_len = 0;
	enum sql_set_kind kind = SQL_SET_NONE;
	if (sql_take_word(&p, end, "set")) {
		kind = sql_parse_set_value(p, end, name, name_size, &value_end);
		if (kind == SQL_SET_VALUE)
			*stmt_len = (uint32_t)(value_end - first);
	} else if (sql_take_word(&p, end, "reset")) {
		const struct sql_set_form *form = sql_take_form(&p, end);
		if (form)
			base_strlcpy(name, form->variable, name_size);
		kind = form ? SQL_SET_RESET
		       : sql_take_word(&p, end, "all") ? SQL_SET_RESET_ALL
		       : sql_take_name(&p, end, name, name_size) ? SQL_SET_RESET
								   : SQL_SET_UNKNOWN;
	} else if (sql_take_word(&p, end, "discard")) {
		kind = sql_take_word(&p, end, "all") ? SQL_SET_DISCARD_ALL : SQL_SET_NONE;
	} else if (sql_take_word(&p, end, "savepoint") || sql_take_word(&p, end, "release") ||
		   sql_take_word(&p, end, "rollback") || sql_take_word(&p, end, "abort")) {
		const uint8_t *rest = p;
		switch (sql_parse_savepoint(first, (uint32_t)(end - first), name, name_size)) {
		case SQL_SAVEPOINT_SET:
			return SQL_SET_SAVEPOINT;
		case SQL_SAVEPOINT_RELEASE:
			return SQL_SET_RELEASE;
		case SQL_SAVEPOINT_ROLLBACK_TO:
			return SQL_SET_ROLLBACK_TO;
		default:
			break;
		}
		name[0] = '\0';
		/* A savepoint tern could not read stays unknown (its tag tells the caller); a ROLLBACK that
		 * names none ends the transaction. */
		const uint8_t *q = first;
		bool is_rollback = sql_take_word(&q, end, "rollback") || sql_take_word(&q, end, "abort");
		if (is_rollback) {
			if (!sql_take_word(&rest, end, "work"))
				(void)sql_take_word(&rest, end, "transaction");
			kind = sql_take_word(&rest, end, "to") ? SQL_SET_UNKNOWN : SQL_SET_ROLLBACK;
		} else {
			kind = SQL_SET_UNKNOWN;
		}
	}
	return kind;
}

bool sql_may_set(const uint8_t *sql, uint32_t len)
{
	/* Every query passes here: one pass, the words compared only where their first two letters are. */
	static const char *const words[] = {"set", "reset", "discard", "savepoint", "release", "rollback", "abort"};
	for (uint32_t i = 0; i + 3 <= len; i++) {
		uint8_t c = sql_lower(sql[i]);
		if (c != 's' && c != 'r' && c != 'd' && c != 'a')
			continue;
		for (size_t w = 0; w < TERN_ARRAY_LEN(words); w++) {
			size_t n = strlen(words[w]);
			if (c == (uint8_t)words[w][0] && len - i >= n && sql_is_word_at(sql + i, words[w], n))
				return true;
		}
	}
	return false;
}

bool sql_is_chain_end(const uint8_t *sql, uint32_t len)
{
	const uint8_t *end = memchr(sql, '\0', len);
	if (!end)
		end = sql + len;
	const uint8_t *p = sql_skip_blank(sql, end);
	if (!sql_take_word(&p, end, "commit") && !sql_take_word(&p, end, "end") && !sql_take_word(&p, end, "rollback") &&
	    !sql_take_word(&p, end, "abort"))
		return false;
	if (!sql_take_word(&p, end, "work"))
		(void)sql_take_word(&p, end, "transaction");
	if (!sql_take_word(&p, end, "and") || !sql_take_word(&p, end, "chain"))
		return false;
	if (p < end && *p == ';')
		p = sql_skip_blank(p + 1, end);
	return p == end;
}
