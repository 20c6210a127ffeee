/* Named prepared statements in transaction pooling, the client's side. A client's Parse of a named statement
 * is kept by tern (answered at once when no server is needed); the statement is prepared on whichever server
 * connection runs the client's next use of it, under a name derived from its text; Bind, Describe and
 * Close are rewritten to that name. Owns s->stmts' statements and the connections' statement caches; the
 * replies the server owes for all this are observer_stmts_replies.c's. */
#include "observer.h"
#include "observer_stmts_replies.h"
#include "session.h"

#include "sql.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ParameterDescription with no parameters, then NoData: a Describe of a DEALLOCATE statement. */
static const uint8_t stmts_describe_no_data[] = {PROTO_BE_PARAMETER_DESCRIPTION, 0, 0, 0, 6, 0, 0,
						 PROTO_BE_NO_DATA, 0, 0, 0, 4};
static const uint8_t stmts_deallocate_complete[] = {PROTO_BE_COMMAND_COMPLETE, 0, 0, 0, 15, 'D', 'E', 'A', 'L',
						    'L', 'O', 'C', 'A', 'T', 'E', 0};

static struct stmt_cache *stmts_cache_of(struct pool_conn *conn)
{
	if (!conn->extra) {
		conn->extra = stmt_cache_create();
		conn->extra_free = stmt_cache_destroy;
	}
	return conn->extra;
}

/* A message of `type` whose body begins with parts[0..n) end to end, malloc'd: the whole message, or
 * with `rest` more bytes of body that follow it (the length counts them). */
static uint8_t *stmts_build(uint8_t type, const struct iovec *parts, unsigned n, uint32_t rest, uint32_t *len_out)
{
	uint64_t body = 0;
	for (unsigned i = 0; i < n; i++)
		body += parts[i].iov_len;
	if (body + rest > UINT32_MAX - PROTO_HEADER_LEN)
		return NULL;
	uint8_t *msg = malloc(PROTO_HEADER_LEN + body);
	if (!msg)
		return NULL;
	msg[0] = type;
	proto_write_u32(msg + 1, (uint32_t)(body + rest + 4));
	uint8_t *p = msg + PROTO_HEADER_LEN;
	for (unsigned i = 0; i < n; i++) {
		memcpy(p, parts[i].iov_base, parts[i].iov_len);
		p += parts[i].iov_len;
	}
	*len_out = (uint32_t)(PROTO_HEADER_LEN + body);
	return msg;
}

static int stmts_queue_with_rest(struct session *s, uint8_t type, const struct iovec *parts, unsigned n,
				 uint32_t rest, bool at_front)
{
	struct leg *leg = session_client_leg(s);
	uint32_t len;
	uint8_t *msg = stmts_build(type, parts, n, rest, &len);
	if (!msg)
		return -ENOMEM;
	if (!at_front)
		return sendq_push_owned(&leg->to_server, msg, len);
	int rc = sendq_push_front_copy(&leg->to_server, msg, len);
	free(msg);
	return rc;
}

static int stmts_queue(struct session *s, uint8_t type, const struct iovec *parts, unsigned n, bool at_front)
{
	return stmts_queue_with_rest(s, type, parts, n, 0, at_front);
}

static struct iovec stmts_cstring(const char *text) { return (struct iovec){(void *)text, strlen(text) + 1}; }

/* Queues tern's messages that prepare stmt (their answers hidden): a Close of `evicted` when the cache
 * made room, then a Close of stmt itself — harmless when the server lacks it, and it heals a server
 * that kept it where the cache lost track (a Close skipped after an error) — then the Parse. At the
 * front of the queue, or at its end. With `is_clients` the Parse is the client's own: its answer is shown,
 * and if it fails the client's name (`client_name`, taken; NULL for its unnamed statement) is forgotten. */
static int stmts_queue_prepare(struct session *s, struct stmt *stmt, const char *evicted, bool at_front,
			       bool is_clients, char *client_name)
{
	struct leg *leg = session_client_leg(s);
	struct iovec parse[] = {stmts_cstring(stmt->server_name), {stmt->content, stmt->content_len}};
	struct iovec close_self[] = {{(void *)"S", 1}, stmts_cstring(stmt->server_name)};
	struct iovec close_evicted[] = {{(void *)"S", 1}, stmts_cstring(evicted ? evicted : "")};
	struct {
		uint8_t type;
		struct iovec *parts;
		uint8_t reply;
		struct stmt *stmt;
	} steps[] = {
		{PROTO_FE_CLOSE, close_evicted, STMT_REPLY_CLOSE_HIDDEN, NULL},
		{PROTO_FE_CLOSE, close_self, STMT_REPLY_CLOSE_HIDDEN, NULL},
		{PROTO_FE_PARSE, parse, is_clients ? STMT_REPLY_PARSE : STMT_REPLY_PARSE_HIDDEN, stmt},
	};
	unsigned first = evicted ? 0 : 1, count = 3;
	int rc = 0;
	for (unsigned k = 0; rc == 0 && k < count - first; k++) {
		unsigned step = at_front ? count - 1 - k : first + k; /* front insertions go in reverse */
		rc = stmts_queue(s, steps[step].type, steps[step].parts, 2, at_front);
		char *name = steps[step].type == PROTO_FE_PARSE ? client_name : NULL;
		if (rc == 0)
			rc = at_front ? stmt_replies_push_front(&leg->stmts.replies, steps[step].reply, name, 0, steps[step].stmt)
				      : stmt_replies_push_back(&leg->stmts.replies, steps[step].reply, name, 0, steps[step].stmt);
		if (rc == 0 && name)
			client_name = NULL; /* the entry owns it now */
	}
	free(client_name);
	return rc;
}

/* Records in the connection's cache that stmt will be there; *evicted names the statement the cache
 * dropped to stay within max_prepared_statements (NULL when none). */
static int stmts_cache_add(struct session *s, struct stmt_cache *cache, struct stmt *stmt,
			   char evicted[STMT_SERVER_NAME_LEN], const char **evicted_out)
{
	uint32_t max = TERN_MAX(runtime_config(s->host->runtime)->max_prepared_statements, 1u);
	int rc = stmt_cache_add(cache, stmt, max, evicted);
	*evicted_out = rc == 1 ? evicted : NULL;
	return rc < 0 ? rc : 0;
}

/* A queued message uses stmt. With a connection attached, stmt is prepared there now unless its cache
 * has it. Without one, the connection is not known yet: for the first message queued, stmt is
 * prepared in front of it once the connection comes (its cache consulted then); a later message gets
 * tern's Close and Parse right before it whatever the connection holds, so a Parse that fails makes
 * the server skip only what follows, as the client's own Parse would. */
static int stmts_need(struct session *s, struct stmt *stmt)
{
	struct leg *leg = session_client_leg(s);
	const char *evicted;
	char evicted_name[STMT_SERVER_NAME_LEN];
	if (stmts_has_backend(leg)) {
		struct stmt_cache *cache = stmts_cache_of(leg->conn);
		if (!cache)
			return -ENOMEM;
		if (stmt_cache_touch(cache, stmt))
			return 0;
		int rc = stmts_cache_add(s, cache, stmt, evicted_name, &evicted);
		return rc < 0 ? rc : stmts_queue_prepare(s, stmt, evicted, false, false, NULL);
	}
	for (uint32_t i = leg->stmts.needed_barrier; i < leg->stmts.needed_count; i++)
		if (leg->stmts.needed[i].stmt == stmt)
			return 0; /* prepared ahead of an earlier message already */
	if (leg->stmts.needed_count == leg->stmts.needed_cap) {
		uint32_t cap = leg->stmts.needed_cap ? leg->stmts.needed_cap * 2 : 8;
		struct stmt_need *grown = realloc(leg->stmts.needed, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		leg->stmts.needed = grown;
		leg->stmts.needed_cap = cap;
	}
	bool is_first = sendq_is_empty(&leg->to_server) && leg->stmts.needed_count == 0;
	int rc = is_first ? 0 : stmts_queue_prepare(s, stmt, NULL, false, false, NULL);
	if (rc == 0)
		leg->stmts.needed[leg->stmts.needed_count++] = (struct stmt_need){.stmt = stmt_ref(stmt), .is_queued = !is_first};
	return rc;
}

static int stmts_prepare_needed(struct session *s, struct leg *leg)
{
	struct stmt_cache *cache = stmts_cache_of(leg->conn);
	if (cache && leg->stmts.is_stmt_cache_stale)
		stmt_cache_clear(cache); /* a DEALLOCATE ALL or DISCARD ALL is queued for this connection */
	leg->stmts.is_stmt_cache_stale = false;
	if (leg->stmts.needed_count == 0)
		return 0;
	int rc = cache ? 0 : -ENOMEM;
	/* Mark the ones present as just used, so adding the others cannot evict them. */
	for (uint32_t i = 0; rc == 0 && i < leg->stmts.needed_count; i++)
		(void)stmt_cache_touch(cache, leg->stmts.needed[i].stmt);
	for (uint32_t i = leg->stmts.needed_count; rc == 0 && i-- > 0;) {
		struct stmt_need *need = &leg->stmts.needed[i];
		if (stmt_cache_touch(cache, need->stmt))
			continue;
		const char *evicted;
		char evicted_name[STMT_SERVER_NAME_LEN];
		rc = stmts_cache_add(s, cache, need->stmt, evicted_name, &evicted);
		if (rc < 0)
			break;
		if (!need->is_queued) {
			rc = stmts_queue_prepare(s, need->stmt, evicted, true, false, NULL); /* in front of its first use */
		} else if (evicted) {
			struct iovec close[] = {{(void *)"S", 1}, stmts_cstring(evicted)};
			rc = stmts_queue(s, PROTO_FE_CLOSE, close, 2, true);
			if (rc == 0)
				rc = stmt_replies_push_front(&leg->stmts.replies, STMT_REPLY_CLOSE_HIDDEN, NULL, 0, NULL);
		}
	}
	for (uint32_t i = 0; i < leg->stmts.needed_count; i++)
		stmt_unref(leg->stmts.needed[i].stmt);
	leg->stmts.needed_count = leg->stmts.needed_barrier = 0;
	return rc;
}

/* Queues the held message unchanged: by reference when it lies whole in the chunk. */
static int stmts_forward(struct session *s, uint8_t type, const uint8_t *body, uint32_t len, uint16_t buffer_id,
			 const uint8_t *chunk)
{
	struct leg *leg = session_client_leg(s);
	uint32_t offset;
	leg->is_unsynced = true;
	if (proto_stream_message_offset(&s->client_stream, &offset))
		return sendq_push_buffer(&leg->to_server, &s->host->ring, buffer_id, chunk + offset,
					 PROTO_HEADER_LEN + len);
	struct iovec part = {(void *)body, len};
	return stmts_queue(s, type, &part, 1, false);
}

/* A Parse of a name the client uses already: 42P05, as PostgreSQL answers, with the same effect. */
static int stmts_refuse_duplicate(struct session *s, const char *name)
{
	struct leg *leg = session_client_leg(s);
	char text[POOL_NAME_LEN_MAX * 2 + 64];
	snprintf(text, sizeof(text), "prepared statement \"%.*s\" already exists", (int)POOL_NAME_LEN_MAX * 2, name);
	uint8_t msg[1024];
	size_t n = proto_build_error(msg, sizeof(msg), "ERROR", "42P05", text, NULL);
	uint8_t *copy = n ? malloc(n) : NULL;
	if (!copy)
		return -ENOMEM;
	memcpy(copy, msg, n);
	if (!stmts_has_backend(leg) && !leg->is_unsynced && leg->stmts.replies.count == 0 && sendq_is_empty(&leg->to_server)) {
		/* Nothing before it is queued for a server (a BEGIN, say) or owed by one: tern answers and skips
		 * to the Sync, as the server would. */
		leg->is_skipping_to_sync = true;
		return stmts_make_reply(s, STMT_REPLY_MADE_MESSAGES, copy, (uint32_t)n);
	}
	/* The server runs this batch (or a transaction block): it must fail there too, rolling back what the
	 * batch did and skipping to the Sync. A Parse that fails does that: its 42703 (an unknown column) is
	 * replaced by the 42P05, any other error (25P02 in a failed block) shown as it is, as PostgreSQL
	 * checks those first. Named, so that it leaves the unnamed statement alone; it creates nothing. */
	static const char query[] = "SELECT tern_refuses_a_statement_name_in_use";
	struct iovec parse[] = {stmts_cstring("tern_refused"), {(void *)query, sizeof(query)}, {(void *)"\0\0", 2}};
	int rc = stmts_queue(s, PROTO_FE_PARSE, parse, 3, false);
	leg->is_unsynced = true;
	if (rc == 0)
		rc = stmt_replies_push_back(&leg->stmts.replies, STMT_REPLY_PARSE_REFUSED, copy, (uint32_t)n, NULL);
	if (rc < 0)
		free(copy);
	return rc;
}

/* A reply of fixed bytes tern makes up. */
static int stmts_make_bytes(struct session *s, const void *bytes, uint32_t len)
{
	void *copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, bytes, len);
	return stmts_make_reply(s, STMT_REPLY_MADE_MESSAGES, copy, len);
}

/* True when an unnamed Parse's query is "DEALLOCATE [PREPARE] name" for one of the client's statements
 * (as psycopg sends when it drops one): that name is forgotten here, and tern answers the statement. */
static bool stmts_is_deallocate_of_own(struct session *s, const uint8_t *content, uint32_t len)
{
	char name[POOL_NAME_LEN_MAX];
	if (sql_parse_deallocate(content, len, name, sizeof(name)) != 1 || !stmt_map_get(&s->stmts.statements, name))
		return false;
	(void)stmt_map_remove(&s->stmts.statements, name);
	return true;
}

/* tern answers the client's Parse of stmt (name: the client's, owned; NULL for its unnamed statement).
 * With nothing owed before it and Transaction Replay's record open, the ParseComplete is held with the
 * start of the answer the batch's Sync brings, as the server's own would be, and the request stays
 * unsynced (one with what follows it): the batch may run again if that answer is lost, with nothing shown
 * twice, and a transaction's replay digests it as the server's; a client Flush lets it out. */
static int stmts_answer_parse(struct session *s, char *name, struct stmt *stmt)
{
	struct leg *leg = session_client_leg(s);
	if (leg->stmts.replies.count == 0 && leg->role == LEG_PRIMARY) {
		int held = s->parts->replay.hold_parse_complete(s); /* with the answer's start replay holds */
		if (held != 0) {
			free(name);
			leg->is_unsynced = true;
			return held < 0 ? held : 0;
		}
	}
	return stmts_make_reply_for(s, STMT_REPLY_MADE_PARSE_COMPLETE, name, 0, stmt);
}

static int stmts_on_parse(struct session *s, const char *name, const uint8_t *content, uint32_t len,
			  bool names_search_path)
{
	struct leg *leg = session_client_leg(s);
	if (stmt_map_get(&s->stmts.statements, name))
		return stmts_refuse_duplicate(s, name);
	if (s->stmts.statements.count >= runtime_config(s->host->runtime)->max_client_prepared_statements)
		return -E2BIG; /* the session ends: SESSION_END_TOO_MANY_STATEMENTS */
	struct stmt *stmt = stmt_create(content, len);
	if (!stmt)
		return -ENOMEM;
	stmt->names_search_path = names_search_path;
	int rc = stmt_map_put(&s->stmts.statements, name, stmt, leg->stmts.replies.pushed);
	stmt_unref(stmt); /* the map's reference keeps it */
	if (rc < 0)
		return rc;
	char *name_copy = strdup(name);
	if (!name_copy)
		return -ENOMEM;
	struct stmt_cache *cache = stmts_has_backend(leg) ? stmts_cache_of(leg->conn) : NULL;
	if (cache && stmt_cache_touch(cache, stmt)) /* prepared there already */
		return stmts_answer_parse(s, name_copy, stmt);
	if (cache) {
		/* A server is at hand: the client's own Parse goes to it, so an error comes where expected
		 * (after the Closes that make room and heal, as for tern's own Parse). */
		const char *evicted;
		char evicted_name[STMT_SERVER_NAME_LEN];
		rc = stmts_cache_add(s, cache, stmt, evicted_name, &evicted);
		if (rc == 0)
			rc = stmts_queue_prepare(s, stmt, evicted, false, true, name_copy);
		else
			free(name_copy);
		leg->is_unsynced = true;
		return rc;
	}
	/* The prepare waits for the connection that runs the statement's first use. */
	return stmts_make_reply_for(s, STMT_REPLY_MADE_PARSE_COMPLETE, name_copy, 0, stmt);
}

/* server_side_prepare: the client's unnamed statement becomes stmt, prepared under its server name (in
 * the connection's cache, or the client's Parse goes there renamed, or it waits for the first use). */
static int stmts_on_unnamed_parse(struct session *s, struct stmt *stmt)
{
	struct leg *leg = session_client_leg(s);
	struct stmt_cache *cache = stmts_has_backend(leg) ? stmts_cache_of(leg->conn) : NULL;
	/* (unsynced in every case: the batch's Sync goes to the server, whose answer ends the request, as it
	 * would have without tern; a Sync tern answered would leave Transaction Replay's record closed) */
	leg->is_unsynced = true;
	if (cache && !stmt_cache_touch(cache, stmt)) {
		const char *evicted;
		char evicted_name[STMT_SERVER_NAME_LEN];
		int rc = stmts_cache_add(s, cache, stmt, evicted_name, &evicted);
		return rc < 0 ? rc : stmts_queue_prepare(s, stmt, evicted, false, true, NULL);
	}
	return stmts_answer_parse(s, NULL, stmt); /* prepared there already, or at the first use */
}

/* The stmt for an unnamed Parse's content: one of the session's recent ones (moved to the front;
 * *is_again), or a new one in front of them. A reference for the caller; NULL when out of memory. */
static struct stmt *stmts_recent_unnamed(struct session *s, const uint8_t *content, uint32_t len, bool *is_again)
{
	struct stmt **recent = s->stmts.recent_unnamed;
	uint32_t i = 0;
	while (i < STMTS_RECENT_UNNAMED && recent[i] &&
	       (recent[i]->content_len != len || memcmp(recent[i]->content, content, len) != 0))
		i++;
	struct stmt *stmt = i < STMTS_RECENT_UNNAMED ? recent[i] : NULL;
	*is_again = stmt != NULL;
	if (!stmt) {
		if (!(stmt = stmt_create(content, len)))
			return NULL;
		i = STMTS_RECENT_UNNAMED - 1;
		if (recent[i])
			stmt_unref(recent[i]);
	}
	memmove(recent + 1, recent, i * sizeof(*recent));
	recent[0] = stmt;
	return stmt_ref(stmt);
}

/* An unnamed Parse whose statement may be kept under tern's name: the key is its content (text and
 * parameter types) on a connection of the client's pool key (its startup options); PostgreSQL re-parses it
 * where search_path changed since its last use. One that may set search_path or forgets the statements
 * passes on, and so does a long one (its text is kept per session). */
static bool stmts_is_server_prepared(const struct session *s, bool names_search_path, bool is_forget_all, uint32_t len)
{
	return runtime_config(s->host->runtime)->server_side_prepare && !names_search_path && !is_forget_all &&
	       len <= STMTS_UNNAMED_TEXT_MAX;
}

/* A Bind: body holds its first len bytes of body_len (all of them, or the head of a long one whose rest
 * follows). Returns PROTO_FORWARD when the rest is to go on to the server, 0 when tern answered the
 * Bind itself, or <0. */
static int stmts_on_bind(struct session *s, const uint8_t *body, uint32_t len, uint32_t body_len,
			 uint16_t buffer_id, const uint8_t *chunk)
{
	struct leg *leg = session_client_leg(s);
	uint32_t offset = 0;
	const char *portal = proto_read_cstring(body, len, &offset);
	const char *name = portal ? proto_read_cstring(body, len, &offset) : NULL;
	struct stmt *stmt = NULL;
	if (name) {
		if (!portal[0])
			s->stmts.is_portal_deallocate = !name[0] && s->stmts.is_unnamed_deallocate;
		if (!name[0] && s->stmts.is_unnamed_deallocate) {
			int rc = stmts_make_bytes(s, proto_bind_complete, sizeof(proto_bind_complete));
			return rc < 0 ? rc : 0;
		}
		stmt = name[0] ? stmt_map_get(&s->stmts.statements, name) : s->stmts.unnamed;
		bool names = stmt ? stmt->names_search_path : !name[0] && s->params.is_unnamed_naming_search_path;
		params_note_statement(&s->params, names, false);
	} else if (len == body_len) {
		return -EPROTO;
	} /* else names over the head's 1 KiB: passed on unchanged (a statement so named is not rewritten) */
	uint32_t rest = body_len - len;
	int rc;
	if (!stmt && rest == 0) {
		rc = stmts_forward(s, PROTO_FE_BIND, body, len, buffer_id, chunk);
	} else if (!stmt) {
		struct iovec part = {(void *)body, len};
		rc = stmts_queue_with_rest(s, PROTO_FE_BIND, &part, 1, rest, false);
		leg->is_unsynced = true;
	} else {
		rc = stmts_need(s, stmt);
		struct iovec parts[] = {stmts_cstring(portal), stmts_cstring(stmt->server_name),
					{(void *)(body + offset), len - offset}};
		if (rc == 0)
			rc = stmts_queue_with_rest(s, PROTO_FE_BIND, parts, 3, rest, false);
		leg->is_unsynced = true;
	}
	if (rc == 0)
		rc = stmts_expect(leg, STMT_REPLY_BIND);
	return rc < 0 ? rc : PROTO_FORWARD;
}

static int stmts_on_bind_head(struct session *s, const uint8_t *head, uint32_t head_len, uint32_t body_len)
{
	return stmts_on_bind(s, head, head_len, body_len, RING_NO_BUFFER, NULL);
}

static int stmts_on_client_message(struct session *s, uint8_t type, const uint8_t *body, uint32_t len,
				   uint16_t buffer_id, const uint8_t *chunk)
{
	struct leg *leg = session_client_leg(s);
	uint32_t offset = 0;
	if (type == PROTO_FE_PARSE) {
		const char *name = proto_read_cstring(body, len, &offset);
		if (!name)
			return -EPROTO;
		/* A statement that may set search_path may change it whenever it runs (see the relay); a Parse
		 * holds one statement, so most texts are settled by their first word. */
		bool names = sql_statement_may_set_search_path(body + offset, len - offset);
		params_note_statement(&s->params, names, !name[0]);
		if (name[0])
			return stmts_on_parse(s, name, body + offset, len - offset, names);
		bool is_forget_all = sql_is_forget_all(body + offset, len - offset);
		if (is_forget_all)
			stmts_forget_all_ahead(s);
		s->stmts.is_unnamed_deallocate = stmts_is_deallocate_of_own(s, body + offset, len - offset);
		stmts_set_unnamed(s, NULL);
		if (s->stmts.is_unnamed_deallocate)
			return stmts_make_reply(s, STMT_REPLY_MADE_PARSE_COMPLETE, NULL, 0);
		if (stmts_is_server_prepared(s, names, is_forget_all, len - offset)) {
			bool is_again;
			struct stmt *stmt = stmts_recent_unnamed(s, body + offset, len - offset, &is_again);
			if (!stmt)
				return -ENOMEM;
			if (is_again) { /* (a text seen once passes on unnamed: one that never repeats costs nothing) */
				stmts_set_unnamed(s, stmt);
				return stmts_on_unnamed_parse(s, stmt);
			}
			stmt_unref(stmt);
		}
		int rc = stmts_forward(s, type, body, len, buffer_id, chunk);
		return rc < 0 ? rc : stmts_expect(leg, STMT_REPLY_PARSE);
	}
	if (type == PROTO_FE_BIND) {
		int rc = stmts_on_bind(s, body, len, len, buffer_id, chunk);
		return rc < 0 ? rc : 0;
	}
	if (type == PROTO_FE_EXECUTE) {
		const char *portal = proto_read_cstring(body, len, &offset);
		if (!portal)
			return -EPROTO;
		if (!portal[0]) /* the DEALLOCATE tern answers: held only while is_portal_deallocate */
			return stmts_make_bytes(s, stmts_deallocate_complete, sizeof(stmts_deallocate_complete));
		int rc = stmts_forward(s, type, body, len, buffer_id, chunk);
		return rc < 0 ? rc : stmts_expect(leg, STMT_REPLY_EXECUTE);
	}
	TERN_ASSERT(type == PROTO_FE_DESCRIBE || type == PROTO_FE_CLOSE);
	if (len < 2)
		return -EPROTO;
	char kind = (char)body[0];
	offset = 1;
	const char *name = proto_read_cstring(body, len, &offset);
	if (!name)
		return -EPROTO;
	if (type == PROTO_FE_DESCRIBE && !name[0] && kind == 'S' && s->stmts.is_unnamed_deallocate)
		return stmts_make_bytes(s, stmts_describe_no_data, sizeof(stmts_describe_no_data));
	if (type == PROTO_FE_DESCRIBE && !name[0] && kind == 'P' && s->stmts.is_portal_deallocate)
		return stmts_make_bytes(s, proto_no_data, sizeof(proto_no_data));
	struct stmt *stmt = kind != 'S' ? NULL : name[0] ? stmt_map_get(&s->stmts.statements, name) : s->stmts.unnamed;
	if (type == PROTO_FE_CLOSE && stmt) {
		/* The server-side statement stays for other clients; only the client's name goes. */
		if (name[0])
			(void)stmt_map_remove(&s->stmts.statements, name);
		else
			stmts_set_unnamed(s, NULL);
		return stmts_make_reply(s, STMT_REPLY_MADE_CLOSE_COMPLETE, NULL, 0);
	}
	int rc;
	if (stmt) {
		rc = stmts_need(s, stmt);
		struct iovec parts[] = {{(void *)"S", 1}, stmts_cstring(stmt->server_name)};
		if (rc == 0)
			rc = stmts_queue(s, type, parts, 2, false);
		leg->is_unsynced = true;
	} else {
		rc = stmts_forward(s, type, body, len, buffer_id, chunk);
	}
	if (rc < 0)
		return rc;
	if (type == PROTO_FE_CLOSE)
		return stmts_expect(leg, STMT_REPLY_CLOSE);
	return stmts_expect(leg, kind == 'S' ? STMT_REPLY_DESCRIBE_STATEMENT : STMT_REPLY_DESCRIBE_PORTAL);
}

/* ---- the observer ---- */

static bool stmts_is_on(const struct session *s)
{
	/* (in session pooling under Transaction Replay too: a move prepares the statements again) */
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	return (s->is_transaction_pooling || config_tr_is_on(cfg)) && cfg->max_prepared_statements > 0;
}

/* What tern holds, answers or drops; the replies the server will owe. */
static unsigned stmts_client_type(struct session *s, struct leg *leg, uint8_t type)
{
	int rc = 0;
	switch (type) {
	case PROTO_FE_BIND:
		return PROTO_HOLD | PROTO_HOLD_HEAD; /* names rewritten, parameters streamed */
	case PROTO_FE_PARSE:
	case PROTO_FE_DESCRIBE:
	case PROTO_FE_CLOSE:
		return PROTO_HOLD;
	case PROTO_FE_SYNC:
		if (stmts_is_local(leg)) {
			stmts_answer_sync(s); /* a batch of Parse and Close alone needs no server */
			return 0;
		}
		if (!leg->copy.is_copy_in)
			rc = stmts_expect(leg, STMT_REPLY_SYNC);
		break;
	case PROTO_FE_FLUSH:
		if (stmts_is_local(leg))
			return 0;
		break;
	case PROTO_FE_EXECUTE:
		if (s->stmts.is_portal_deallocate)
			return PROTO_HOLD; /* it may be the DEALLOCATE tern answers */
		rc = stmts_expect(leg, STMT_REPLY_EXECUTE);
		break;
	case PROTO_FE_QUERY:
		rc = stmts_expect(leg, STMT_REPLY_QUERY);
		if (rc == 0)
			return OBSERVER_PASS; /* read for DEALLOCATE ALL and DISCARD ALL */
		break;
	case PROTO_FE_FUNCTION_CALL:
		rc = stmts_expect(leg, STMT_REPLY_QUERY);
		break;
	default:
		TERN_ASSERT(!"a type stmts did not register");
	}
	if (rc < 0)
		s->scan.hook_error = rc;
	return OBSERVER_SKIP;
}

static int stmts_client_head(struct session *s, struct leg *leg, uint8_t type, const uint8_t *head, uint32_t head_len,
			     uint32_t body_len)
{
	(void)leg;
	TERN_ASSERT(type == PROTO_FE_BIND);
	return stmts_on_bind_head(s, head, head_len, body_len);
}

static int stmts_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	if (m->type == PROTO_FE_QUERY) {
		if (sql_is_forget_all(m->body, m->len))
			stmts_forget_all_ahead(s);
		return 0;
	}
	return stmts_on_client_message(s, m->type, m->body, m->len, m->buffer_id, m->chunk);
}

static unsigned stmts_observe_server_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)s;
	unsigned action = stmts_server_type(leg, type);
	if (action == OBSERVER_SKIP)
		return action;
	if (type == PROTO_BE_COMMAND_COMPLETE || type == PROTO_BE_READY || type == PROTO_BE_COPY_IN)
		return action ? action : OBSERVER_PASS; /* read for DISCARD ALL, the replies, copy-in */
	return action ? action : OBSERVER_SKIP;
}

static int stmts_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	if (m->type == PROTO_BE_COPY_IN) {
		/* The Syncs pipelined behind the COPY (observer_copy counted them) will bring no reply. */
		stmts_on_copy_in(leg, leg->copy.syncs_ignored);
		return 0;
	}
	if (m->type == PROTO_BE_COMMAND_COMPLETE &&
	    (observer_message_is_tag(m, "DISCARD ALL") || observer_message_is_tag(m, "DEALLOCATE ALL")))
		stmts_forget_all(s, leg); /* before the reply is taken: it marks where the names end */
	return stmts_on_server_message(s, leg, m->type, m->body, m->len);
}

static int stmts_attach(struct session *s, struct leg *leg) { return stmts_prepare_needed(s, leg); }

const struct observer observer_stmts = {
	.name = "stmts",
	.is_on = stmts_is_on,
	.client_types = "PBDCESHQF",
	.client_type = stmts_client_type,
	.client_head = stmts_client_head,
	.client_message = stmts_client_message,
	.server_types = "123nIsCETZG",
	.server_type = stmts_observe_server_type,
	.server_message = stmts_server_message,
	.attach = stmts_attach,
	.destroy = stmts_deinit,
};
