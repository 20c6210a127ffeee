/* The recovery journal's capture (issue 13; ../shared/reference/004_c44c290a4cd34a46.txt, "What the journal
 * records"): what the client sends on its primary leg — Query texts, and Parse texts with each Bind's
 * formats and values byte for byte — reconciled with what the server answers: each CommandComplete tag,
 * the first ErrorResponse, and ReadyForQuery's transaction status. A transaction enters committed history
 * (journal.h) at the ReadyForQuery that leaves no transaction open, when the server said COMMIT to its
 * BEGIN, or when it ran without one (autocommit statements, an implicit transaction of one request).
 *
 * Never kept: reads (a SELECT, SHOW or FETCH tag), a transaction that failed, was rolled back or was
 * prepared for two-phase commit; ROLLBACK TO SAVEPOINT drops the statements after the savepoint. Kept but
 * marked incomplete (committed-history replay refuses it): a COPY FROM STDIN, an EXECUTE of an SQL
 * PREPAREd statement, a statement over [journal] max_statement_bytes, a FunctionCall, a transaction that
 * Transaction Replay moved to another server (journal_on_lost), and a completion tern could not match to
 * what was sent.
 * Named protocol-level statements are kept with their text (observer_stmts keeps it); with
 * max_prepared_statements = 0 tern does not, and a Bind of one marks the transaction incomplete. */
#include "core/observer.h"
#include "core/session.h"
#include "recover.h"

#include "journal.h"
#include "core/sql.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* What one transaction's capture holds at most (its texts, values and tags): past it, incomplete. */
#define JOURNAL_TX_BYTES(cfg) \
	TERN_MIN(TERN_MIN(16u * (cfg)->journal_max_statement_bytes, (cfg)->journal_max_bytes), JOURNAL_RECORD_BYTES_MAX)

/* journal_capture.kind beyond enum journal_statement_kind. */
#define JOURNAL_KIND_MASK 0x0fu
#define JOURNAL_KIND_READ 0x10u /* its text looked like a read: not copied */
#define JOURNAL_KIND_SYNC 0x20u /* a Sync (or a FunctionCall): the end of an extended request */
#define JOURNAL_KIND_SKIP 0x40u /* tern answers it (a DEALLOCATE of the client's own statement) */
#define JOURNAL_KIND_COPY_OUT 0x80u /* a COPY TO STDOUT: its "COPY n" tag is a read's */

static bool journal_is_on(const struct session *s)
{
	return s->host->runtime->journal != NULL && runtime_config(s->host->runtime)->tr_enabled;
}

/* ---- the capture's own storage ---- */

/* Appends to the arena: its offset, or UINT32_MAX when it is over its bound (the transaction is then
 * incomplete). */
static uint32_t journal_store(struct session *s, const void *data, uint32_t len)
{
	struct session_journal *j = s->journal;
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	uint32_t at = j->arena.len;
	if (len > cfg->journal_max_statement_bytes || (uint64_t)at + len > JOURNAL_TX_BYTES(cfg) ||
	    base_bytes_append(&j->arena, data, len) < 0) {
		j->is_incomplete = true;
		return UINT32_MAX;
	}
	return at;
}

static int journal_push_pending(struct session *s, struct journal_capture c)
{
	struct session_journal *j = s->journal;
	if (j->pending_head > 0 && j->pending_head * 2 >= j->pending_count) { /* (a client that always pipelines) */
		memmove(j->pending, j->pending + j->pending_head, (j->pending_count - j->pending_head) * sizeof(*j->pending));
		j->pending_count -= j->pending_head;
		j->pending_head = 0;
	}
	if (base_grow((void **)&j->pending, &j->pending_cap, j->pending_count, sizeof(*j->pending)) < 0)
		return -ENOMEM;
	j->pending[j->pending_count++] = c;
	return 0;
}

static struct journal_capture *journal_pending_head(struct session_journal *j)
{
	return j->pending_head < j->pending_count ? &j->pending[j->pending_head] : NULL;
}

static const char *journal_text(const struct session_journal *j, const struct journal_capture *c)
{
	return c->text_len == 0 ? "" : (const char *)j->arena.data + c->text_at; /* (an empty text: no arena yet) */
}

/* The first word of a statement says it reads: its text is not copied (its tag decides in the end). */
static bool journal_looks_read(const uint8_t *text, uint32_t len)
{
	static const char *const reads[] = {"select", "show", "fetch", "move", "values", "table"};
	const uint8_t *end = text + len, *p = sql_skip_blank(text, end);
	for (size_t i = 0; i < TERN_ARRAY_LEN(reads); i++)
		if (sql_take_word(&p, end, reads[i]))
			return i > 0 || !sql_mentions_into(text, len); /* SELECT INTO writes */
	return false;
}

/* A statement's text as a capture; kind 0 when it is too long to keep. An extended one's: `text` is the
 * Parse content after its name (the text, its NUL, the parameter types), and its Bind tail follows. */
static struct journal_capture journal_capture_of(struct session *s, uint8_t kind, const uint8_t *text,
						 uint32_t text_len, const uint8_t *tail, uint32_t tail_len)
{
	const uint8_t *types = NULL;
	uint32_t types_len = 0;
	if (kind == JOURNAL_STATEMENT_EXTENDED) {
		const uint8_t *nul = memchr(text, '\0', text_len);
		if (!nul)
			return (struct journal_capture){0};
		types = nul + 1;
		types_len = text_len - (uint32_t)(types - text);
		text_len = (uint32_t)(nul - text);
	}
	if (journal_looks_read(text, text_len))
		return (struct journal_capture){.kind = kind | JOURNAL_KIND_READ};
	struct journal_capture c = {.kind = kind, .text_len = text_len, .tail_len = tail_len, .types_len = types_len};
	if (kind == JOURNAL_STATEMENT_SIMPLE) {
		/* Several statements (a ';' with more after it; one inside a string literal counts too, which
		 * only errs toward incomplete): tern follows their tags, not which text each ran. */
		const uint8_t *semi = memchr(text, ';', text_len);
		c.is_multi = semi && sql_skip_blank(semi + 1, text + text_len) < text + text_len;
	}
	c.text_at = journal_store(s, text, text_len);
	c.types_at = types_len ? journal_store(s, types, types_len) : 0;
	c.tail_at = tail_len ? journal_store(s, tail, tail_len) : 0;
	if (c.text_at == UINT32_MAX || c.tail_at == UINT32_MAX || c.types_at == UINT32_MAX)
		c.kind = 0; /* (incomplete: the statement is not kept) */
	return c;
}

/* ---- the transaction ---- */

static void journal_reset_tx(struct session_journal *j)
{
	j->kept_count = j->savepoint_count = 0;
	j->is_explicit = j->is_commit = j->is_failed = j->is_incomplete = false;
	if (journal_pending_head(j) != NULL)
		return; /* what is pending still points into the arena: it is emptied at the next chance */
	j->pending_head = j->pending_count = 0;
	j->portal = (struct journal_capture){0}; /* (a portal ends with its transaction) */
	if ((j->unnamed.kind & JOURNAL_KIND_MASK) && !(j->unnamed.kind & JOURNAL_KIND_READ)) {
		/* The unnamed statement lives on (a later request may bind it): its text and types move to the
		 * front (stored in that order, the types after the text). */
		TERN_ASSERT(j->unnamed.types_len == 0 || j->unnamed.types_at >= j->unnamed.text_at + j->unnamed.text_len);
		uint8_t *a = j->arena.data;
		memmove(a, a + j->unnamed.text_at, j->unnamed.text_len);
		memmove(a + j->unnamed.text_len, a + j->unnamed.types_at, j->unnamed.types_len);
		j->unnamed.text_at = 0;
		j->unnamed.types_at = j->unnamed.text_len;
		j->arena.len = j->unnamed.text_len + j->unnamed.types_len;
	} else {
		j->arena.len = 0;
	}
}

void journal_on_lost(struct session *s, bool is_moved)
{
	if (!(s->observers_on & (1u << OBSERVER_JOURNAL)))
		return;
	struct session_journal *j = s->journal;
	j->pending_head = j->pending_count = 0;
	j->unread = 0;
	if (is_moved && j->kept_count > 0) {
		j->is_incomplete = true; /* replayed elsewhere: kept if it commits, not replayed from here */
		j->is_failed = false;    /* (the server's FATAL as it went away) */
	} else {
		journal_reset_tx(j);
	}
	j->portal = (struct journal_capture){0};
}

/* A Parse or Bind whose type was seen but that was not read (too long): what it replaced is unknown. */
static void journal_settle_unread(struct session_journal *j)
{
	if (j->unread == PROTO_FE_PARSE)
		j->unnamed = (struct journal_capture){0};
	else if (j->unread == PROTO_FE_BIND)
		j->portal = (struct journal_capture){0};
	j->unread = 0;
}

void journal_note_unread_query(struct session *s)
{
	if (!(s->observers_on & (1u << OBSERVER_JOURNAL)))
		return;
	/* Its completion is matched; its text is unknown (a write there makes its transaction incomplete). */
	if (journal_push_pending(s, (struct journal_capture){.kind = JOURNAL_STATEMENT_SIMPLE | JOURNAL_KIND_READ}) < 0)
		s->scan.hook_error = -ENOMEM;
}

static void journal_client_address(struct session *s)
{
	struct sockaddr_storage ss = {0};
	socklen_t len = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "";
	if (getpeername(s->client_fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
	else if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
	else
		snprintf(host, sizeof(host), "unix");
	snprintf(s->journal->client_addr, sizeof(s->journal->client_addr), "%s", host);
}

/* The transaction committed: into committed history. */
static void capture_commit(struct session *s, struct leg *leg)
{
	struct session_journal *j = s->journal;
	struct journal_statement *statements = malloc(j->kept_count * sizeof(*statements));
	if (!statements)
		return;
	for (uint32_t i = 0; i < j->kept_count; i++) {
		const struct journal_capture *c = &j->kept[i];
		statements[i] = (struct journal_statement){
			.kind = (enum journal_statement_kind)(c->kind & JOURNAL_KIND_MASK),
			.text = {journal_text(j, c), c->text_len},
			.tag = {c->tag_len ? (const char *)j->arena.data + c->tag_at : "", c->tag_len},
			.bind_tail = c->tail_len ? j->arena.data + c->tail_at : NULL,
			.bind_tail_len = c->tail_len,
			.type_tail = c->types_len ? j->arena.data + c->types_at : NULL,
			.type_tail_len = c->types_len,
		};
		if (statements[i].kind == JOURNAL_STATEMENT_EXTENDED && !statements[i].bind_tail) {
			static const uint8_t no_parameters[6] = {0};
			statements[i].bind_tail = no_parameters; /* (a Bind is never shorter: counts of 0) */
			statements[i].bind_tail_len = sizeof(no_parameters);
		}
	}
	if (!j->client_addr[0])
		journal_client_address(s);
	const char *server = leg->conn ? leg->conn->server->name : "";
	struct journal_record r = {
		.flags = j->is_incomplete ? JOURNAL_RECORD_INCOMPLETE : 0,
		.client_addr = {j->client_addr, (uint32_t)strlen(j->client_addr)},
		.user = {s->user, (uint32_t)strlen(s->user)},
		.database = {s->database, (uint32_t)strlen(s->database)},
		.server = {server, (uint32_t)strlen(server)},
		.statements = statements,
		.statement_count = j->kept_count,
	};
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	(void)journal_commit(s->host->runtime->journal, &r,
			     (uint64_t)wall.tv_sec * 1000000u + (uint64_t)wall.tv_nsec / 1000u);
	free(statements);
}

/* A tag whose statement changes nothing a replay must redo (reads, cursors, session notices). */
static bool journal_tag_is_read(const uint8_t *tag, uint32_t len)
{
	static const char *const reads[] = {"SELECT",  "SHOW",	 "FETCH",    "MOVE",	   "DECLARE CURSOR",
					    "CLOSE CURSOR", "EXPLAIN", "LISTEN", "UNLISTEN", "NOTIFY",
					    "DISCARD", "DEALLOCATE", "PREPARE"};
	for (size_t i = 0; i < TERN_ARRAY_LEN(reads); i++) {
		size_t n = strlen(reads[i]);
		if (len >= n + 1 && memcmp(tag, reads[i], n) == 0 && (tag[n] == ' ' || tag[n] == '\0'))
			return strcmp(reads[i], "PREPARE") != 0 || tag[n] == '\0'; /* (not PREPARE TRANSACTION) */
	}
	return false;
}

/* A read's tag that a write may complete with too (CREATE TABLE AS and SELECT INTO say SELECT). */
static bool journal_tag_may_write(const uint8_t *tag, uint32_t len)
{
	return (len >= 7 && memcmp(tag, "SELECT", 6) == 0) || (len >= 8 && memcmp(tag, "EXPLAIN", 7) == 0);
}

/* Its text was not kept: it looked like a read, was too long, or its statement is unknown to tern. */
static bool journal_text_is_unknown(const struct journal_capture *c)
{
	return (c->kind & JOURNAL_KIND_READ) || (c->kind & JOURNAL_KIND_MASK) == 0;
}

static bool journal_tag_is(const uint8_t *tag, uint32_t len, const char *word)
{
	size_t n = strlen(word) + 1;
	return len == n && memcmp(tag, word, n) == 0;
}

/* A savepoint statement ran: the savepoint stack follows it. */
static void journal_on_savepoint(struct session_journal *j, const struct journal_capture *c)
{
	char name[sizeof(j->savepoints[0].name)];
	int kind = c->kind & JOURNAL_KIND_READ || !(c->kind & JOURNAL_KIND_MASK)
			   ? SQL_SAVEPOINT_NONE
			   : sql_parse_savepoint((const uint8_t *)journal_text(j, c), c->text_len, name,
								    sizeof(name));
	if (kind == SQL_SAVEPOINT_SET) {
		if (base_grow((void **)&j->savepoints, &j->savepoint_cap, j->savepoint_count, sizeof(*j->savepoints)) < 0) {
			j->is_incomplete = true;
			return;
		}
		struct journal_savepoint *sp = &j->savepoints[j->savepoint_count++];
		memcpy(sp->name, name, sizeof(sp->name));
		sp->count = j->kept_count;
		return;
	}
	uint32_t i = j->savepoint_count;
	while (i > 0 && strcmp(j->savepoints[i - 1].name, name) != 0)
		i--;
	if (kind == SQL_SAVEPOINT_NONE || i == 0) {
		j->is_incomplete = true; /* (several statements in one Query, say: tern cannot follow it) */
		return;
	}
	if (kind == SQL_SAVEPOINT_RELEASE) {
		j->savepoint_count = i - 1; /* it and the ones after it go; their statements stay */
	} else {
		j->kept_count = j->savepoints[i - 1].count; /* ROLLBACK TO: the statements after it go */
		j->savepoint_count = i;
		j->is_failed = false; /* (an error after it is undone too) */
	}
}

/* The transaction ended: into committed history when it committed with something kept and no error. */
static void journal_end_tx(struct session *s, struct leg *leg, bool is_commit)
{
	struct session_journal *j = s->journal;
	if (is_commit && j->kept_count > 0 && !j->is_failed)
		capture_commit(s, leg);
	journal_reset_tx(j);
}

/* A CommandComplete: what the statement at the head of what was sent did. */
static void journal_on_complete(struct session *s, struct leg *leg, const uint8_t *tag, uint32_t len)
{
	struct session_journal *j = s->journal;
	struct journal_capture *c = journal_pending_head(j);
	if (!c || (c->kind & (JOURNAL_KIND_SYNC | JOURNAL_KIND_SKIP))) {
		j->is_incomplete = true; /* a completion tern cannot match to what it saw sent */
		return;
	}
	bool is_simple = (c->kind & JOURNAL_KIND_MASK) == JOURNAL_STATEMENT_SIMPLE;
	j->is_incomplete |= c->is_multi;
	bool is_commit = journal_tag_is(tag, len, "COMMIT");
	bool is_rollback = !is_commit && journal_tag_is(tag, len, "ROLLBACK");
	if ((is_commit || is_rollback) && !journal_text_is_unknown(c) &&
	    sql_is_chain_end((const uint8_t *)journal_text(j, c), c->text_len)) {
		/* AND CHAIN: the transaction ends here (committed, or not: a failed one answers ROLLBACK) and
		 * the next one, as explicit, begins at once. */
		journal_end_tx(s, leg, is_commit);
		j->is_explicit = true;
	} else if (journal_tag_is(tag, len, "BEGIN") || journal_tag_is(tag, len, "START TRANSACTION")) {
		j->is_explicit = true;
	} else if (is_commit) {
		j->is_commit = true;
	} else if (is_rollback && c->is_multi) {
		j->is_commit = false; /* (a later COMMIT in the same Query commits what follows) */
	} else if (is_rollback) {
		char name[sizeof(j->savepoints[0].name)];
		if ((c->kind & JOURNAL_KIND_MASK) && !(c->kind & JOURNAL_KIND_READ) &&
		    sql_parse_savepoint((const uint8_t *)journal_text(j, c), c->text_len, name, sizeof(name)) ==
			    SQL_SAVEPOINT_ROLLBACK_TO)
			journal_on_savepoint(j, c);
		else
			j->is_failed = true;
	} else if (journal_tag_is(tag, len, "SAVEPOINT") || journal_tag_is(tag, len, "RELEASE")) {
		if (!c->is_multi)
			journal_on_savepoint(j, c);
	} else if (journal_tag_is(tag, len, "PREPARE TRANSACTION")) {
		j->is_failed = true; /* two-phase: never committed history */
	} else if (journal_tag_is(tag, len, "COMMIT PREPARED") || journal_tag_is(tag, len, "ROLLBACK PREPARED") ||
		   (c->kind & JOURNAL_KIND_COPY_OUT) ||
		   (journal_tag_is_read(tag, len) && (journal_text_is_unknown(c) || !journal_tag_may_write(tag, len)))) {
		/* nothing to keep (a SELECT or EXPLAIN tag of a text that is not a read's: CREATE TABLE AS,
		 * SELECT INTO, EXPLAIN ANALYZE of a write, a WITH holding one; kept below) */
	} else if (journal_text_is_unknown(c)) {
		j->is_incomplete = true; /* a write whose text tern did not keep */
	} else if (j->kept_count >= JOURNAL_RECORD_STATEMENTS_MAX) {
		j->is_incomplete = true;
	} else if (!(is_simple && c->tag_len > 0)) { /* (a second statement of one Query: its text is kept once) */
		uint32_t tag_at = journal_store(s, tag, len - 1);
		if (tag_at != UINT32_MAX && base_grow((void **)&j->kept, &j->kept_cap, j->kept_count, sizeof(*j->kept)) == 0) {
			c->tag_at = tag_at;
			c->tag_len = len - 1;
			j->kept[j->kept_count++] = *c;
			const uint8_t *text = (const uint8_t *)journal_text(j, c), *end = text + c->text_len;
			const uint8_t *p = sql_skip_blank(text, end);
			if (sql_take_word(&p, end, "execute"))
				j->is_incomplete = true; /* an SQL PREPAREd statement: its text lives on one connection */
		} else {
			j->is_incomplete = true;
		}
	}
	if (!is_simple)
		j->pending_head++; /* an Execute has one completion; a Query's last comes with its ReadyForQuery */
}

/* A ReadyForQuery: the request at the head was answered; with no transaction left open, the one that ran
 * committed (or not). */
static void journal_on_ready(struct session *s, struct leg *leg, char status)
{
	struct session_journal *j = s->journal;
	/* The head's request: one Query, or an extended request up to its Sync (what an error skipped goes
	 * with it). */
	struct journal_capture *c;
	while ((c = journal_pending_head(j))) {
		j->pending_head++;
		if ((c->kind & JOURNAL_KIND_SYNC) || (c->kind & JOURNAL_KIND_MASK) == JOURNAL_STATEMENT_SIMPLE)
			break;
	}
	if (leg_client_owed(leg) == 0 && !leg->is_unsynced && journal_pending_head(j)) {
		/* Nothing more is owed, yet something is pending (a Sync the server ignored, a request it
		 * skipped): what tern matched may be off by it. */
		j->is_incomplete = true;
		j->pending_head = j->pending_count = 0;
	}
	if (status == 'E')
		j->is_failed = true;
	if (status == 'I')
		journal_end_tx(s, leg, j->is_commit || !j->is_explicit);
}

/* ---- the observer ---- */

static unsigned journal_client_type(struct session *s, struct leg *leg, uint8_t type)
{
	struct session_journal *j = s->journal;
	if (leg->role != LEG_PRIMARY)
		return OBSERVER_SKIP;
	journal_settle_unread(j);
	if (type == PROTO_FE_PARSE || type == PROTO_FE_BIND)
		j->unread = type;
	/* Nothing open on the primary (transaction pooling: no connection): what a lost connection left of a
	 * transaction tern ended itself (Transaction Replay) is not the client's any more. */
	if ((!leg->conn || leg->tx_status == 'I') && leg_client_owed(leg) == 0 &&
	    !leg->is_unsynced && (j->kept_count > 0 || j->is_explicit))
		journal_reset_tx(j);
	return OBSERVER_PASS;
}

static int journal_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	struct session_journal *j = s->journal;
	uint32_t offset = 0;
	j->unread = 0;
	switch (m->type) {
	case PROTO_FE_QUERY: {
		uint32_t len = m->len > 0 && m->body[m->len - 1] == '\0' ? m->len - 1 : m->len;
		return journal_push_pending(s, journal_capture_of(s, JOURNAL_STATEMENT_SIMPLE, m->body, len, NULL, 0));
	}
	case PROTO_FE_PARSE: {
		const char *name = proto_read_cstring(m->body, m->len, &offset);
		if (!name || name[0])
			return 0; /* a named one: observer_stmts keeps its text */
		j->unnamed = s->stmts.is_unnamed_deallocate
				     ? (struct journal_capture){.kind = JOURNAL_KIND_SKIP}
				     : journal_capture_of(s, JOURNAL_STATEMENT_EXTENDED, m->body + offset, m->len - offset,
							  NULL, 0);
		return 0;
	}
	case PROTO_FE_BIND: {
		const char *portal = proto_read_cstring(m->body, m->len, &offset);
		const char *name = portal ? proto_read_cstring(m->body, m->len, &offset) : NULL;
		if (!name)
			return 0;
		const uint8_t *tail = m->body + offset;
		uint32_t tail_len = m->len - offset;
		if (name[0]) {
			const struct stmt *stmt = (s->observers_on & (1u << OBSERVER_STMTS))
							  ? stmt_map_get(&s->stmts.statements, name)
							  : NULL;
			j->portal = stmt ? journal_capture_of(s, JOURNAL_STATEMENT_EXTENDED, stmt->content, stmt->content_len,
							      tail, tail_len)
					 : (struct journal_capture){0}; /* (its text unknown: incomplete if it writes) */
		} else {
			j->portal = j->unnamed;
		}
		if (!name[0] && (j->unnamed.kind & JOURNAL_KIND_MASK) && !(j->unnamed.kind & JOURNAL_KIND_READ)) {
			j->portal.tail_len = tail_len;
			j->portal.tail_at = journal_store(s, tail, tail_len);
			if (j->portal.tail_at == UINT32_MAX)
				j->portal.kind = 0;
		}
		if (portal[0])
			j->portal.kind = 0; /* a named portal: its Execute's text unknown (a write: incomplete) */
		return 0;
	}
	case PROTO_FE_EXECUTE: {
		const char *portal = proto_read_cstring(m->body, m->len, &offset);
		if (portal && !portal[0] && (j->portal.kind & JOURNAL_KIND_SKIP || s->stmts.is_portal_deallocate))
			return 0; /* tern answers it: no completion comes from the server */
		return journal_push_pending(s, j->portal);
	}
	case PROTO_FE_SYNC:
		return journal_push_pending(s, (struct journal_capture){.kind = JOURNAL_KIND_SYNC});
	case PROTO_FE_FUNCTION_CALL:
		j->is_incomplete = true; /* a function by OID, with effects tern cannot tell */
		return journal_push_pending(s, (struct journal_capture){.kind = JOURNAL_KIND_SYNC});
	default:
		return 0;
	}
}

static int journal_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_journal *j = s->journal;
	if (leg->role != LEG_PRIMARY)
		return 0;
	journal_settle_unread(j);
	struct journal_capture *c = journal_pending_head(j);
	switch (m->type) {
	case PROTO_BE_COMMAND_COMPLETE:
		if (m->len > 0 && m->body[m->len - 1] == '\0')
			journal_on_complete(s, leg, m->body, m->len);
		break;
	case PROTO_BE_ERROR:
		j->is_failed = true; /* the statement failed, and with it an implicit transaction (or the block) */
		if (c && (c->kind & JOURNAL_KIND_MASK) == JOURNAL_STATEMENT_EXTENDED && !(c->kind & JOURNAL_KIND_SYNC))
			j->pending_head++;
		break;
	case PROTO_BE_PORTAL_SUSPENDED:
		/* The rows go on at the next Execute, which completes it; a write's portal may be closed before
		 * (INSERT ... RETURNING with max_rows): no completion will say it ran. */
		if (c && !journal_text_is_unknown(c))
			j->is_incomplete = true;
		/* fall through */
	case PROTO_BE_EMPTY_QUERY:
		if (c && (c->kind & JOURNAL_KIND_MASK) == JOURNAL_STATEMENT_EXTENDED && !(c->kind & JOURNAL_KIND_SYNC))
			j->pending_head++;
		break;
	case PROTO_BE_COPY_IN:
		j->is_incomplete = true; /* COPY FROM STDIN: its rows are not kept */
		break;
	case PROTO_BE_COPY_OUT:
		if (c)
			c->kind |= JOURNAL_KIND_COPY_OUT;
		break;
	case PROTO_BE_READY:
		if (m->len >= 1)
			journal_on_ready(s, leg, (char)m->body[0]);
		break;
	default:
		break;
	}
	return 0;
}

static void journal_destroy(struct session *s)
{
	struct session_journal *j = s->journal;
	free(j->arena.data);
	free(j->kept);
	free(j->pending);
	free(j->savepoints);
	*j = (struct session_journal){0};
}

const struct observer observer_journal = {
	.name = "journal",
	.is_on = journal_is_on,
	.client_types = "QPBESF",
	.client_type = journal_client_type,
	.client_message = journal_client_message,
	.server_types = "CEIsGHZ",
	.server_message = journal_server_message,
	.destroy = journal_destroy,
};
