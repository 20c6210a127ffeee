/*
 * classify.c — classify.h: libpg_query's JSON parse tree, walked with jansson.
 */
#include "classify.h"

#include <ctype.h>
#include <jansson.h>
#include <pg_query.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

/* Built-in functions with no side effects a replica read may call (lowercase, schema ignored). Volatile
 * ones that change nothing (random, clock_timestamp, pg_sleep) are reads too; anything that writes,
 * takes a lock, assigns a transaction id or changes a setting (nextval, setval, pg_advisory_lock,
 * set_config, txid_current, pg_notify, lo_*) is not here. */
static const char *const classify_read_functions[] = {
	"abs", "age", "array_agg", "array_append", "array_cat", "array_length", "array_position",
	"array_remove", "array_to_string", "avg", "bit_and", "bit_or", "bool_and", "bool_or", "btrim",
	"cardinality", "ceil", "ceiling", "char_length", "character_length", "clock_timestamp", "coalesce",
	"concat", "concat_ws", "count", "cume_dist", "current_database", "current_date", "current_schema",
	"current_setting", "current_time", "current_timestamp", "current_user", "date_part", "date_trunc",
	"decode", "dense_rank", "encode", "every", "exp", "extract", "first_value", "floor", "format",
	"generate_series", "greatest", "initcap", "json_agg", "json_array_length", "json_build_array",
	"json_build_object", "json_extract_path", "json_extract_path_text", "json_object_agg", "jsonb_agg",
	"jsonb_array_elements", "jsonb_array_length", "jsonb_build_array", "jsonb_build_object",
	"jsonb_each", "jsonb_extract_path", "jsonb_extract_path_text", "jsonb_object_agg", "jsonb_set",
	"jsonb_typeof", "lag", "last_value", "lead", "least", "left", "length", "ln", "localtime",
	"localtimestamp", "log", "lower", "lpad", "ltrim", "make_date", "make_interval", "make_timestamp",
	"max", "md5", "min", "mod", "now", "nth_value", "ntile", "nullif", "octet_length", "percent_rank",
	"percentile_cont", "percentile_disc", "pg_backend_pid", "pg_is_in_recovery",
	"pg_last_wal_replay_lsn", "pg_sleep", "position", "power", "random", "rank", "regexp_match",
	"regexp_matches", "regexp_replace", "regexp_split_to_array", "repeat", "replace", "reverse", "right",
	"round", "row_number", "row_to_json", "rpad", "rtrim", "session_user", "sign", "split_part", "sqrt",
	"statement_timestamp", "stddev", "string_agg", "string_to_array", "strpos", "substr", "substring",
	"sum", "timeofday", "to_char", "to_date", "to_json", "to_jsonb", "to_number", "to_timestamp",
	"transaction_timestamp", "translate", "trim", "trunc", "unnest", "upper", "variance", "version",
};

/* The text starting at `p` (after blanks), lowercased into `word` (at most size-1 letters). */
static const char *classify_word(const char *p, char *word, size_t size)
{
	while (isspace((unsigned char)*p))
		p++;
	size_t n = 0;
	while (isalpha((unsigned char)*p) || *p == '_') {
		if (n + 1 < size)
			word[n++] = (char)tolower((unsigned char)*p);
		p++;
	}
	word[n] = '\0';
	return p;
}

/* Past one name (letters, digits, '_', '.') at p after blanks; NULL when there is none. */
static const char *classify_name(const char *p)
{
	while (isspace((unsigned char)*p))
		p++;
	const char *name = p;
	while (isalnum((unsigned char)*p) || *p == '_' || *p == '.')
		p++;
	return p == name ? NULL : p;
}

/* SET [SESSION | LOCAL] name {= | TO} value, value one name or number or a plain quoted string: past it,
 * or NULL when the text is any other SET (SET TRANSACTION, TIME ZONE, ROLE, lists: the parser decides). */
static const char *classify_fast_set(const char *p, bool *is_local)
{
	char word[16];
	const char *q = classify_word(p, word, sizeof(word));
	*is_local = strcmp(word, "local") == 0;
	if (*is_local || strcmp(word, "session") == 0)
		p = q;
	const char *name_end = classify_name(p);
	if (!name_end)
		return NULL;
	q = classify_word(p, word, sizeof(word));
	if (strcmp(word, "transaction") == 0 || strcmp(word, "session") == 0 || strcmp(word, "local") == 0)
		return NULL;
	p = name_end;
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '=') {
		p++;
	} else {
		q = classify_word(p, word, sizeof(word));
		if (strcmp(word, "to") != 0)
			return NULL;
		p = q;
	}
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '\'') {
		for (p++; *p && *p != '\''; p++)
			if (*p == '\\')
				return NULL;
		return *p ? p + 1 : NULL;
	}
	return classify_name(p);
}

/* The lexer's fast path: a bare BEGIN/COMMIT/END/ROLLBACK/ABORT [WORK|TRANSACTION], a plain SET, or SHOW
 * name, alone. */
static bool classify_fast(const char *sql, struct classify_result *out)
{
	char first[16], second[16];
	const char *p = classify_word(sql, first, sizeof(first));
	enum classify_kind kind;
	bool is_local = false;
	if (strcmp(first, "begin") == 0)
		kind = CLASSIFY_BEGIN;
	else if (strcmp(first, "set") == 0)
		kind = CLASSIFY_SET;
	else if (strcmp(first, "commit") == 0 || strcmp(first, "end") == 0)
		kind = CLASSIFY_COMMIT;
	else if (strcmp(first, "rollback") == 0 || strcmp(first, "abort") == 0)
		kind = CLASSIFY_ROLLBACK;
	else if (strcmp(first, "show") == 0)
		kind = CLASSIFY_READ;
	else
		return false;
	if (kind == CLASSIFY_READ) { /* SHOW name: one word of letters, digits, '_' or '.' */
		p = classify_name(p);
		if (!p)
			return false;
	} else if (kind == CLASSIFY_SET) {
		p = classify_fast_set(p, &is_local);
		if (!p)
			return false;
	} else {
		const char *q = classify_word(p, second, sizeof(second));
		if (strcmp(second, "work") == 0 || strcmp(second, "transaction") == 0)
			p = q;
		else if (second[0])
			return false; /* ROLLBACK TO, COMMIT PREPARED, ...: the parser decides */
	}
	while (isspace((unsigned char)*p))
		p++;
	if (*p == ';')
		p++;
	while (isspace((unsigned char)*p))
		p++;
	if (*p)
		return false; /* something follows: more statements, or not this grammar */
	out->kind = kind;
	out->is_local = is_local;
	out->is_show = out->is_select_only = kind == CLASSIFY_READ;
	out->has_commit = kind == CLASSIFY_COMMIT;
	out->statement_count = 1;
	out->is_fast_path = true;
	return true;
}

static bool classify_name_is_listed(const char *name, const char *read_functions)
{
	for (size_t i = 0; i < TERN_ARRAY_LEN(classify_read_functions); i++)
		if (strcmp(classify_read_functions[i], name) == 0)
			return true;
	size_t n = strlen(name);
	for (const char *p = read_functions; p && *p;) {
		while (*p == ',' || *p == ' ')
			p++;
		size_t len = strcspn(p, ", ");
		const char *entry = p; /* "schema.name" names `name`: schemas are ignored, as for calls */
		for (size_t k = 0; k < len; k++)
			if (p[k] == '.')
				entry = p + k + 1;
		size_t entry_len = len - (size_t)(entry - p);
		if (entry_len == n && strncasecmp(entry, name, n) == 0)
			return true;
		p += len;
	}
	return false;
}

/* A FuncCall node: on the list, and not named through a quoted identifier (its text from `location` up to
 * the '(' holds no '"'). */
static bool classify_call_is_read(json_t *call, const char *sql, size_t sql_len, const char *read_functions)
{
	json_t *names = json_object_get(call, "funcname");
	size_t count = json_array_size(names);
	json_t *last = count ? json_object_get(json_object_get(json_array_get(names, count - 1), "String"), "sval") : NULL;
	const char *name = json_string_value(last);
	json_int_t location = json_integer_value(json_object_get(call, "location"));
	if (!name)
		return false;
	for (size_t at = (size_t)location; json_object_get(call, "location") && at < sql_len && sql[at] != '('; at++)
		if (sql[at] == '"')
			return false;
	return classify_name_is_listed(name, read_functions);
}

/* Walks a subtree: function calls, locking clauses, SELECT INTO and data-modifying statements nested
 * in CTEs or subqueries. */
static void classify_walk(json_t *node, const char *sql, size_t sql_len, const char *read_functions,
			  struct classify_result *out, unsigned depth)
{
	if (depth > 512) { /* libpg_query's own limit is near; past it, do not risk the stack */
		out->is_parse_error = true;
		return;
	}
	if (json_is_array(node)) {
		size_t i;
		json_t *item;
		json_array_foreach(node, i, item) classify_walk(item, sql, sql_len, read_functions, out, depth + 1);
		return;
	}
	if (!json_is_object(node))
		return;
	const char *key;
	json_t *value;
	json_object_foreach(node, key, value)
	{
		if (strcmp(key, "FuncCall") == 0 && !classify_call_is_read(value, sql, sql_len, read_functions))
			out->calls_unsafe_function = true;
		else if (strcmp(key, "lockingClause") == 0 && json_array_size(value) > 0)
			out->has_locking_clause = true;
		else if (strcmp(key, "intoClause") == 0)
			out->is_select_into = true;
		else if (strcmp(key, "InsertStmt") == 0 || strcmp(key, "UpdateStmt") == 0 ||
			 strcmp(key, "DeleteStmt") == 0 || strcmp(key, "MergeStmt") == 0)
			out->has_write_cte = true; /* nested under a SELECT: a data-modifying CTE */
		classify_walk(value, sql, sql_len, read_functions, out, depth + 1);
	}
}

static enum classify_isolation classify_isolation_of(const char *level)
{
	if (!level)
		return CLASSIFY_ISOLATION_DEFAULT;
	if (strcasecmp(level, "read uncommitted") == 0)
		return CLASSIFY_READ_UNCOMMITTED;
	if (strcasecmp(level, "read committed") == 0)
		return CLASSIFY_READ_COMMITTED;
	if (strcasecmp(level, "repeatable read") == 0)
		return CLASSIFY_REPEATABLE_READ;
	return strcasecmp(level, "serializable") == 0 ? CLASSIFY_SERIALIZABLE : CLASSIFY_ISOLATION_DEFAULT;
}

/* transaction_isolation and transaction_read_only among a BEGIN's or SET TRANSACTION's DefElems. */
static void classify_transaction_options(json_t *options, struct classify_result *out)
{
	size_t i;
	json_t *item;
	json_array_foreach(options, i, item)
	{
		json_t *def = json_object_get(item, "DefElem");
		const char *name = json_string_value(json_object_get(def, "defname"));
		json_t *constant = json_object_get(json_object_get(def, "arg"), "A_Const");
		if (!name || !constant)
			continue;
		if (strcmp(name, "transaction_isolation") == 0)
			out->isolation = classify_isolation_of(
				json_string_value(json_object_get(json_object_get(constant, "sval"), "sval")));
		else if (strcmp(name, "transaction_read_only") == 0)
			out->is_read_only = json_integer_value(json_object_get(json_object_get(constant, "ival"), "ival")) != 0;
	}
}

/* One statement's kind. */
static enum classify_kind classify_statement(json_t *stmt, const char *sql, size_t sql_len, const char *read_functions,
					     struct classify_result *out)
{
	const char *type = json_object_iter_key(json_object_iter(stmt));
	json_t *body = json_object_iter_value(json_object_iter(stmt));
	if (!type)
		return CLASSIFY_WRITE;
	if (strcmp(type, "SelectStmt") != 0 && strcmp(type, "VariableShowStmt") != 0)
		out->is_select_only = false;
	if (strcmp(type, "SelectStmt") == 0) {
		struct classify_result why = {0};
		classify_walk(body, sql, sql_len, read_functions, &why, 0);
		out->has_locking_clause |= why.has_locking_clause;
		out->has_write_cte |= why.has_write_cte;
		out->is_select_into |= why.is_select_into;
		out->calls_unsafe_function |= why.calls_unsafe_function;
		out->is_parse_error |= why.is_parse_error;
		bool is_read = !why.has_locking_clause && !why.has_write_cte && !why.is_select_into &&
			       !why.calls_unsafe_function && !why.is_parse_error;
		return is_read ? CLASSIFY_READ : CLASSIFY_WRITE;
	}
	if (strcmp(type, "VariableShowStmt") == 0) {
		out->is_show = true;
		return CLASSIFY_READ;
	}
	if (strcmp(type, "CopyStmt") == 0)
		out->has_copy = true; /* the server may then take COPY data, not queries */
	if (strcmp(type, "DiscardStmt") == 0)
		return CLASSIFY_DISCARD;
	if (strcmp(type, "TransactionStmt") == 0) {
		const char *kind = json_string_value(json_object_get(body, "kind"));
		if (!kind)
			return CLASSIFY_TRANSACTION;
		if (strcmp(kind, "TRANS_STMT_BEGIN") == 0 || strcmp(kind, "TRANS_STMT_START") == 0) {
			classify_transaction_options(json_object_get(body, "options"), out);
			return CLASSIFY_BEGIN;
		}
		if (strcmp(kind, "TRANS_STMT_COMMIT") == 0 || strcmp(kind, "TRANS_STMT_PREPARE") == 0 ||
		    strcmp(kind, "TRANS_STMT_COMMIT_PREPARED") == 0)
			out->has_commit = true;
		if (strcmp(kind, "TRANS_STMT_COMMIT") == 0)
			return CLASSIFY_COMMIT;
		if (strcmp(kind, "TRANS_STMT_ROLLBACK") == 0)
			return CLASSIFY_ROLLBACK;
		return CLASSIFY_TRANSACTION;
	}
	if (strcmp(type, "VariableSetStmt") == 0) {
		const char *name = json_string_value(json_object_get(body, "name"));
		if (name && strcmp(name, "TRANSACTION") == 0) { /* SET TRANSACTION ... */
			classify_transaction_options(json_object_get(body, "args"), out);
			return CLASSIFY_SET_TRANSACTION;
		}
		out->is_local = json_is_true(json_object_get(body, "is_local"));
		return CLASSIFY_SET;
	}
	return CLASSIFY_WRITE;
}

bool classify_fast_path(const char *sql, struct classify_result *out)
{
	memset(out, 0, sizeof(*out));
	return classify_fast(sql, out);
}

int classify_split(const char *sql, struct classify_span *spans, uint32_t max)
{
	if (strlen(sql) > CLASSIFY_TEXT_MAX)
		return -1;
	PgQuerySplitResult split = pg_query_split_with_parser(sql);
	int count = split.error || split.n_stmts < 0 || (uint32_t)split.n_stmts > max ? -1 : split.n_stmts;
	for (int i = 0; i < count; i++)
		spans[i] = (struct classify_span){.start = (uint32_t)split.stmts[i]->stmt_location,
						  .len = (uint32_t)split.stmts[i]->stmt_len};
	pg_query_free_split_result(split);
	return count;
}

void classify_query(const char *sql, const char *read_functions, struct classify_result *out)
{
	memset(out, 0, sizeof(*out));
	size_t sql_len = strlen(sql);
	if (sql_len > CLASSIFY_TEXT_MAX) {
		out->is_parse_error = true;
		return;
	}
	if (classify_fast(sql, out))
		return;
	PgQueryParseResult parsed = pg_query_parse(sql);
	json_t *tree = parsed.error ? NULL : json_loads(parsed.parse_tree, 0, NULL);
	pg_query_free_parse_result(parsed);
	json_t *stmts = json_object_get(tree, "stmts");
	if (!tree || (stmts && !json_is_array(stmts)) || json_array_size(stmts) > CLASSIFY_STATEMENTS_MAX) {
		out->is_parse_error = true;
		json_decref(tree);
		return;
	}
	out->statement_count = (uint32_t)json_array_size(stmts);
	out->kind = out->statement_count ? CLASSIFY_READ : CLASSIFY_WRITE;
	out->is_select_only = out->statement_count > 0;
	size_t i;
	json_t *item;
	json_array_foreach(stmts, i, item)
	{
		enum classify_kind kind = classify_statement(json_object_get(item, "stmt"), sql, sql_len, read_functions, out);
		if (out->statement_count == 1)
			out->kind = kind;
		else if (kind != CLASSIFY_READ)
			out->kind = CLASSIFY_WRITE; /* a multi-statement text is a read only if every one is */
	}
	json_decref(tree);
}

/* ---- the cache ---- */

static bool classify_is_ident_start(char c) { return isalpha((unsigned char)c) || c == '_' || (c & 0x80); }
static bool classify_is_ident_char(char c) { return classify_is_ident_start(c) || isdigit((unsigned char)c) || c == '$'; }

size_t classify_shape(const char *sql, char *out, size_t cap)
{
	size_t n = 0;
	const char *p = sql;
#define SHAPE_PUT(c)                    \
	do {                            \
		if (n + 1 >= cap)       \
			return 0;       \
		out[n++] = (char)(c);   \
	} while (0)
	while (*p) {
		char c = *p;
		if (isspace((unsigned char)c)) {
			while (isspace((unsigned char)*p))
				p++;
			if (n > 0 && *p)
				SHAPE_PUT(' ');
			continue;
		}
		if (classify_is_ident_start(c)) {
			const char *start = p;
			while (classify_is_ident_char(*p))
				p++;
			if ((*p == '\'' || *p == '&') && p - start == 1)
				return 0; /* E'', B'', X'', N'', U&'': another string syntax */
			for (; start < p; start++)
				SHAPE_PUT(*start);
			continue;
		}
		if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)p[1]))) {
			/* digits [. digits] [e [+-] digits], as PostgreSQL's lexer reads a number */
			while (isdigit((unsigned char)*p))
				p++;
			if (*p == '.')
				for (p++; isdigit((unsigned char)*p); p++)
					;
			if (*p == 'e' || *p == 'E') {
				const char *q = p + 1 + (p[1] == '+' || p[1] == '-');
				if (!isdigit((unsigned char)*q))
					return 0;
				for (p = q; isdigit((unsigned char)*p); p++)
					;
			}
			if (classify_is_ident_char(*p) || *p == '.')
				return 0; /* 0x1F, 1_000, 12abc, 1.2.3: not this lexer's */
			SHAPE_PUT('?');
			continue;
		}
		if (c == '\'') {
			for (p++;; p++) {
				if (*p == '\0' || *p == '\\')
					return 0; /* unterminated, or an escape whose meaning depends on a setting */
				if (*p == '\'' && p[1] == '\'')
					p++;
				else if (*p == '\'')
					break;
			}
			p++;
			SHAPE_PUT('?');
			continue;
		}
		if (c == '$') {
			if (!isdigit((unsigned char)p[1]))
				return 0; /* a dollar quote */
			SHAPE_PUT(*p++);
			while (isdigit((unsigned char)*p))
				SHAPE_PUT(*p++);
			continue;
		}
		if (c == '"' || (c == '-' && p[1] == '-') || (c == '/' && p[1] == '*'))
			return 0;
		SHAPE_PUT(*p++);
	}
#undef SHAPE_PUT
	out[n] = '\0';
	return n;
}

void classify_cached(struct classify_cache *cache, const void *tag, const char *sql, const char *read_functions,
		     struct classify_result *out)
{
	if (cache->tag != tag) {
		memset(cache->slots, 0, sizeof(cache->slots));
		cache->tag = tag;
	}
	char shape[CLASSIFY_SHAPE_MAX];
	size_t len = classify_shape(sql, shape, sizeof(shape));
	if (len == 0) {
		classify_query(sql, read_functions, out);
		return;
	}
	uint64_t hash = XXH3_64bits(shape, len) | 1; /* never 0: 0 marks an empty slot */
	struct classify_cache_slot *slot = &cache->slots[hash % CLASSIFY_CACHE_SLOTS];
	if (slot->hash == hash && slot->len == len && memcmp(slot->shape, shape, len) == 0) {
		cache->hits++;
		*out = slot->result;
		return;
	}
	cache->misses++;
	classify_query(sql, read_functions, out);
	slot->hash = hash;
	slot->len = (uint16_t)len;
	memcpy(slot->shape, shape, len);
	slot->result = *out;
}
