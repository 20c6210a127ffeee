/* The replies the server owes for a session's messages in transaction pooling, in order (each leg's
 * reply queue): the answers to tern's own Parse and Close are hidden, the answers tern makes up for what it
 * took over (a Parse it kept, a Close, a Sync of a batch that needed no server) go out where the server's
 * would have, an error is shown as the client's own statement would have caused it, and DISCARD ALL /
 * DEALLOCATE ALL forget the names. Owns the legs' reply queues and s->stmts' made replies; never rewrites
 * a client message (observer_stmts.c). */
#include "observer_stmts_replies.h"

#include "observer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const uint8_t stmts_ready_idle[] = {PROTO_BE_READY, 0, 0, 0, 5, 'I'};

static bool stmts_kind_is_made(uint8_t kind) { return kind >= STMT_REPLY_MADE_PARSE_COMPLETE; }

static void stmts_send_made(struct session *s, uint8_t kind, const void *data, uint32_t len)
{
	if (s->phase == SESSION_CLOSING)
		return;
	if (kind == STMT_REPLY_MADE_PARSE_COMPLETE)
		session_send_reply(s, proto_parse_complete, sizeof(proto_parse_complete));
	else if (kind == STMT_REPLY_MADE_CLOSE_COMPLETE)
		session_send_reply(s, proto_close_complete, sizeof(proto_close_complete));
	else
		session_send_reply(s, data, len);
}

/* Sends the made-up replies that have reached the head of the queue. */
static void stmts_send_made_replies(struct session *s)
{
	struct leg *leg = session_client_leg(s);
	struct stmt_reply_entry *e;
	while ((e = stmt_replies_head(&leg->stmts.replies)) && stmts_kind_is_made(e->kind)) {
		stmts_send_made(s, e->kind, e->data, e->data_len);
		stmt_replies_pop(&leg->stmts.replies);
	}
}

/* A reply tern makes up: sent now when the server owes nothing before it, else queued (with stmt, for a
 * ParseComplete, so a skip can forget the name). Takes `data`. */
int stmts_make_reply_for(struct session *s, uint8_t kind, void *data, uint32_t len, struct stmt *stmt)
{
	struct leg *leg = session_client_leg(s);
	if (leg->stmts.replies.count == 0) {
		stmts_send_made(s, kind, data, len);
		free(data);
		return 0;
	}
	int rc = stmt_replies_push_back(&leg->stmts.replies, kind, data, len, stmt);
	if (rc < 0)
		free(data);
	return rc;
}

int stmts_make_reply(struct session *s, uint8_t kind, void *data, uint32_t len)
{
	return stmts_make_reply_for(s, kind, data, len, NULL);
}

int stmts_expect(struct leg *leg, uint8_t kind)
{
	switch (kind) {
	case STMT_REPLY_PARSE: /* an unnamed one: the client's named Parse carries its name */
	case STMT_REPLY_BIND:
	case STMT_REPLY_DESCRIBE_STATEMENT:
	case STMT_REPLY_DESCRIBE_PORTAL:
	case STMT_REPLY_EXECUTE:
	case STMT_REPLY_CLOSE:
		return stmt_replies_push_plain(&leg->stmts.replies);
	default:
		return stmt_replies_push_back(&leg->stmts.replies, kind, NULL, 0, NULL);
	}
}
bool stmts_is_local(const struct leg *leg)
{
	return leg->stmts.replies.count == 0 && !leg->is_unsynced && leg->tx_status == 'I' && !leg->copy.is_copy_in;
}

void stmts_answer_sync(struct session *s)
{
	session_send_reply(s, stmts_ready_idle, sizeof(stmts_ready_idle));
}

/* The connection's statement cache, created at its first use. */

bool stmts_has_backend(const struct leg *leg) { return leg->conn && !leg->is_dropping; }

void stmts_set_unnamed(struct session *s, struct stmt *stmt)
{
	if (s->stmts.unnamed)
		stmt_unref(s->stmts.unnamed);
	s->stmts.unnamed = stmt;
}

/* True for the message types that end one reply of a plain run. */
static bool stmts_ends_plain_reply(uint8_t type)
{
	switch (type) {
	case PROTO_BE_PARSE_COMPLETE:
	case PROTO_BE_BIND_COMPLETE:
	case PROTO_BE_CLOSE_COMPLETE:
	case PROTO_BE_ROW_DESCRIPTION: /* within extended-protocol replies, only a Describe's */
	case PROTO_BE_NO_DATA:
	case PROTO_BE_COMMAND_COMPLETE:
	case PROTO_BE_EMPTY_QUERY:
	case PROTO_BE_PORTAL_SUSPENDED:
		return true;
	default:
		return false;
	}
}

unsigned stmts_server_type(struct leg *leg, uint8_t type)
{
	struct stmt_reply_entry *head = stmt_replies_head(&leg->stmts.replies);
	if (!head)
		return 0;
	if (head->kind == STMT_REPLY_PLAIN && stmts_ends_plain_reply(type)) {
		/* Counted at the type byte, unread, but for the run's last reply (its end may release replies
		 * tern made up, which must follow it) and CommandComplete (read for DISCARD ALL anyway). */
		TERN_ASSERT(head->data_len > 0);
		if (head->data_len > 1 && type != PROTO_BE_COMMAND_COMPLETE) {
			head->data_len--;
			return OBSERVER_SKIP;
		}
		return PROTO_FORWARD | PROTO_INSPECT;
	}
	switch (type) {
	case PROTO_BE_PARSE_COMPLETE:
	case PROTO_BE_CLOSE_COMPLETE:
		if (head->kind == STMT_REPLY_PARSE_HIDDEN || head->kind == STMT_REPLY_CLOSE_HIDDEN)
			return PROTO_INSPECT; /* the answer to tern's own message: hidden */
		return PROTO_FORWARD | PROTO_INSPECT;
	case PROTO_BE_BIND_COMPLETE:
	case PROTO_BE_NO_DATA:
	case PROTO_BE_EMPTY_QUERY:
	case PROTO_BE_PORTAL_SUSPENDED:
	case PROTO_BE_COMMAND_COMPLETE:
		return PROTO_FORWARD | PROTO_INSPECT;
	case PROTO_BE_ERROR:
		if (head->kind == STMT_REPLY_PARSE_REFUSED)
			return PROTO_INSPECT; /* shown in session_stmts_on_server_message: the 42P05, or as it is */
		return PROTO_FORWARD | PROTO_INSPECT;
	case PROTO_BE_ROW_DESCRIPTION:
		if (head->kind == STMT_REPLY_DESCRIBE_STATEMENT || head->kind == STMT_REPLY_DESCRIBE_PORTAL)
			return PROTO_FORWARD | PROTO_INSPECT;
		return 0;
	default:
		return 0;
	}
}

/* The error of tern's stand-in Parse for a name in use: the expected 42703 becomes the client's 42P05;
 * another error (25P02 in a failed block, a cancel, a shutdown) is what PostgreSQL would have said. */
static void stmts_show_refusal(struct session *s, const struct stmt_reply_entry *head, const uint8_t *body,
			       uint32_t len)
{
	if (s->phase == SESSION_CLOSING)
		return;
	struct proto_error_fields fields;
	if (proto_error_parse(body, len, &fields) == 0 && strcmp(fields.sqlstate, "42703") == 0) {
		stmts_send_made(s, STMT_REPLY_MADE_MESSAGES, head->data, head->data_len);
		return;
	}
	uint8_t header[PROTO_HEADER_LEN] = {PROTO_BE_ERROR};
	proto_write_u32(header + 1, len + 4);
	session_send_reply(s, header, sizeof(header));
	session_send_reply(s, body, len);
}

/* The server did not prepare stmt (its Parse failed or was skipped): the connection lacks it. */
static void stmts_forget_on_connection(struct session *s, const struct stmt *stmt)
{
	struct leg *leg = session_client_leg(s);
	if (stmt && leg->conn && leg->conn->extra)
		stmt_cache_remove(leg->conn->extra, stmt);
}

/* A client statement the server never created: the client's name for it goes too, as in PostgreSQL,
 * if it still names that statement (the client may have closed and reused it since); NULL: its unnamed
 * statement, if still that one (server_side_prepare). */
static void stmts_forget_name(struct session *s, const char *name, struct stmt *stmt)
{
	if (name && stmt && stmt_map_get(&s->stmts.statements, name) == stmt)
		(void)stmt_map_remove(&s->stmts.statements, name);
	else if (!name && stmt && s->stmts.unnamed == stmt)
		stmts_set_unnamed(s, NULL);
}

/* An ErrorResponse for the head reply: after an extended-protocol message's error the server skips
 * everything up to the next Sync, and so do the replies it owes. */
static void stmts_on_error(struct session *s, struct stmt_reply_entry *head)
{
	struct leg *leg = session_client_leg(s);
	if (head->kind == STMT_REPLY_QUERY || head->kind == STMT_REPLY_SYNC)
		return; /* ends at ReadyForQuery */
	do {
		switch (head->kind) {
		case STMT_REPLY_PARSE:
			stmts_forget_name(s, head->data, head->stmt);
			stmts_forget_on_connection(s, head->stmt);
			break;
		case STMT_REPLY_MADE_PARSE_COMPLETE:
			stmts_forget_name(s, head->data, head->stmt);
			break;
		case STMT_REPLY_PARSE_HIDDEN:
			stmts_forget_on_connection(s, head->stmt);
			break;
		case STMT_REPLY_QUERY:
			/* A Query the server skips brings no ReadyForQuery. */
			TERN_ASSERT(leg->pending_ready > 0);
			leg->pending_ready--;
			break;
		default:
			break;
		}
		stmt_replies_pop(&leg->stmts.replies);
		head = stmt_replies_head(&leg->stmts.replies);
	} while (head && head->kind != STMT_REPLY_SYNC);
	if (!head)
		leg->is_skipping_to_sync = true; /* the client has not sent the Sync yet: the server skips to it */
}

/* "cached plan must not change result type" (0A000 from RevalidateCachedQuery, matched by that routine,
 * which no translation changes): a statement on this connection no longer fits its tables (a column added
 * to what a SELECT * reads). The connection's statements are forgotten, so each is prepared again at its
 * next use there (tern's Close before its Parse heals the server's copy): the client sees the error once
 * on each server connection that held the statement, as with a prepared statement of its own. One never
 * used again stays on the server until the connection closes (server_lifetime). */
static void stmts_on_stale_plan(struct leg *leg, const uint8_t *body, uint32_t len)
{
	struct proto_error_fields fields;
	if (leg->conn && leg->conn->extra && proto_error_parse(body, len, &fields) == 0 &&
	    strcmp(fields.sqlstate, "0A000") == 0 && strcmp(fields.routine, "RevalidateCachedQuery") == 0)
		stmt_cache_clear(leg->conn->extra);
}

int stmts_on_server_message(struct session *s, struct leg *leg, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct stmt_reply_entry *head = stmt_replies_head(&leg->stmts.replies);
	if (!head)
		return 0; /* asynchronous: a notice, a notification, a parameter's new value */
	uint8_t kind = head->kind;
	bool matches;
	if (kind == STMT_REPLY_PLAIN && stmts_ends_plain_reply(type)) {
		if (head->data_len > 1) { /* a CommandComplete inside the run */
			head->data_len--;
			return 0;
		}
		stmt_replies_pop(&leg->stmts.replies);
		stmts_send_made_replies(s);
		return 0;
	}
	switch (type) {
	case PROTO_BE_PARSE_COMPLETE:
		matches = kind == STMT_REPLY_PARSE || kind == STMT_REPLY_PARSE_HIDDEN;
		break;
	case PROTO_BE_BIND_COMPLETE:
		matches = kind == STMT_REPLY_BIND;
		break;
	case PROTO_BE_CLOSE_COMPLETE:
		matches = kind == STMT_REPLY_CLOSE || kind == STMT_REPLY_CLOSE_HIDDEN;
		break;
	case PROTO_BE_NO_DATA:
	case PROTO_BE_ROW_DESCRIPTION:
		matches = kind == STMT_REPLY_DESCRIBE_STATEMENT || kind == STMT_REPLY_DESCRIBE_PORTAL;
		break;
	case PROTO_BE_COMMAND_COMPLETE:
	case PROTO_BE_EMPTY_QUERY:
	case PROTO_BE_PORTAL_SUSPENDED:
		if (kind == STMT_REPLY_QUERY)
			return 0; /* one of the statements of a simple Query */
		matches = kind == STMT_REPLY_EXECUTE;
		break;
	case PROTO_BE_READY:
		matches = kind == STMT_REPLY_SYNC || kind == STMT_REPLY_QUERY;
		break;
	case PROTO_BE_ERROR:
		if (kind == STMT_REPLY_PARSE_REFUSED)
			stmts_show_refusal(s, head, body, len);
		stmts_on_stale_plan(leg, body, len);
		stmts_on_error(s, head);
		stmts_send_made_replies(s);
		return 0;
	default:
		return 0;
	}
	if (!matches) {
		TERN_WARN("server pid %u answered '%c' where tern expected reply kind %u; closing the connection",
			  leg->conn ? leg->conn->backend_pid : 0, type, kind);
		return -EPROTO;
	}
	stmt_replies_pop(&leg->stmts.replies);
	stmts_send_made_replies(s);
	return 0;
}

void stmts_on_copy_in(struct leg *leg, uint32_t ignored_syncs)
{
	(void)stmt_replies_remove_after_head(&leg->stmts.replies, STMT_REPLY_SYNC, ignored_syncs);
}

void stmts_forget_all_ahead(struct session *s)
{
	struct leg *leg = session_client_leg(s);
	stmt_map_clear(&s->stmts.statements);
	if (stmts_has_backend(leg) && leg->conn->extra)
		stmt_cache_clear(leg->conn->extra);
	else
		leg->stmts.is_stmt_cache_stale = true;
	leg->stmts.needed_barrier = leg->stmts.needed_count; /* later uses prepare again, after the command */
}

void stmts_forget_all(struct session *s, struct leg *leg)
{
	/* Only the names the client put before the command: a Parse pipelined behind it stays. */
	const struct stmt_reply_entry *head = stmt_replies_head(&leg->stmts.replies);
	if (head)
		stmt_map_remove_before(&s->stmts.statements, head->seq);
	else
		stmt_map_clear(&s->stmts.statements);
	if (leg->conn && leg->conn->extra)
		stmt_cache_clear(leg->conn->extra);
}

void stmts_deinit(struct session *s)
{
	stmt_map_deinit(&s->stmts.statements);
	stmts_set_unnamed(s, NULL);
	for (uint32_t i = 0; i < STMTS_RECENT_UNNAMED; i++)
		if (s->stmts.recent_unnamed[i])
			stmt_unref(s->stmts.recent_unnamed[i]);
}
