/* Routing's extended-protocol batches: a batch read ahead up to its Sync, then routed whole as a read (every
 * statement it runs reads), moved as a BEGIN READ ONLY, or let go to the primary. Owns route->held and the
 * backlog's hand-over; never decides a read's target or replica (route.c). */
#include "route.h"
#include "route_internal.h"

#include "core/observer.h"

#include <stdlib.h>
#include <string.h>

/* ---- extended-protocol batches ---- */

/* How much of a batch is read ahead looking for its Sync; a longer one goes to the primary. */
#define ROUTE_BATCH_MAX (64u * 1024u)
/* Named statements one batch may parse and still be routed. */
#define ROUTE_BATCH_NAMES_MAX 16u

bool route_collects(struct session *s, const uint8_t *data, uint32_t len)
{
	if (len == 0 || (data[0] != PROTO_FE_PARSE && data[0] != PROTO_FE_BIND) || !s->is_transaction_pooling ||
	    s->pinned_server || !proto_stream_is_at_boundary(&s->client_stream) ||
	    !route_wants(s, route_level(s, runtime_config(s->host->runtime))))
		return false;
	if (session_backlog_append(s, data, len) < 0)
		return false;
	s->routing->state = ROUTE_COLLECTING;
	s->routing->held.len = 0;
	s->routing->is_batch = true;
	s->routing->is_tx = false;
	return true;
}

/* A NUL-terminated string at *p within end, or NULL; *p moves past it. */
const char *route_cstring(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *nul = memchr(*p, '\0', (size_t)(end - *p));
	if (!nul)
		return NULL;
	const char *text = (const char *)*p;
	*p = nul + 1;
	return text;
}

static enum route_text route_text_of(struct session *s, const struct tern_config *cfg, const char *sql)
{
	struct classify_result r;
	route_classify(s, cfg, sql, &r);
	if (r.kind == CLASSIFY_READ)
		return ROUTE_TEXT_READ;
	return r.kind == CLASSIFY_BEGIN && r.is_read_only && r.statement_count == 1 ? ROUTE_TEXT_BEGIN_READ_ONLY
										    : ROUTE_TEXT_OTHER;
}

/* ROUTE_TEXT_READ when every statement the held batch runs is a read (each Parse's text; each Bind's
 * statement, parsed in the batch or a named statement tern keeps) and it executes something;
 * ROUTE_TEXT_BEGIN_READ_ONLY when it is that alone, executed once; else ROUTE_TEXT_OTHER. */
enum route_text route_batch_text(struct session *s, const struct tern_config *cfg)
{
	const char *names[ROUTE_BATCH_NAMES_MAX];
	uint32_t name_count = 0, executes = 0, begins = 0;
	bool is_unnamed_known = false;
	bool has_stmts = s->observers_on & (1u << OBSERVER_STMTS);
	const uint8_t *p = s->routing->held.data, *end = p + s->routing->held.len;
	while (p < end) {
		uint8_t type = p[0];
		const uint8_t *body = p + PROTO_HEADER_LEN, *next = p + 1 + proto_read_u32(p + 1);
		p = next;
		switch (type) {
		case PROTO_FE_PARSE: {
			const char *name = route_cstring(&body, next), *sql = name ? route_cstring(&body, next) : NULL;
			enum route_text text = sql ? route_text_of(s, cfg, sql) : ROUTE_TEXT_OTHER;
			if (text == ROUTE_TEXT_OTHER || (text == ROUTE_TEXT_BEGIN_READ_ONLY && (name[0] || begins > 0)))
				return ROUTE_TEXT_OTHER;
			begins += text == ROUTE_TEXT_BEGIN_READ_ONLY;
			if (!name[0])
				is_unnamed_known = true;
			else if (!has_stmts || name_count == ROUTE_BATCH_NAMES_MAX ||
				 stmt_map_get(&s->stmts.statements, name)) /* (42P05 on the primary, as any) */
				return ROUTE_TEXT_OTHER;
			else
				names[name_count++] = name;
			break;
		}
		case PROTO_FE_BIND: {
			const char *portal = route_cstring(&body, next), *name = portal ? route_cstring(&body, next) : NULL;
			if (!name || (!name[0] && !is_unnamed_known))
				return ROUTE_TEXT_OTHER;
			if (!name[0])
				break;
			bool is_known = false;
			for (uint32_t i = 0; i < name_count && !is_known; i++)
				is_known = strcmp(names[i], name) == 0;
			if (is_known)
				break;
			const struct stmt *stmt = has_stmts ? stmt_map_get(&s->stmts.statements, name) : NULL;
			if (!stmt || !memchr(stmt->content, '\0', stmt->content_len) ||
			    route_text_of(s, cfg, (const char *)stmt->content) != ROUTE_TEXT_READ)
				return ROUTE_TEXT_OTHER;
			break;
		}
		case PROTO_FE_EXECUTE:
			executes++;
			break;
		case PROTO_FE_DESCRIBE:
		case PROTO_FE_CLOSE:
		case PROTO_FE_SYNC:
			break;
		default:
			return ROUTE_TEXT_OTHER;
		}
	}
	if (begins)
		return executes == 1 && name_count == 0 ? ROUTE_TEXT_BEGIN_READ_ONLY : ROUTE_TEXT_OTHER;
	return executes ? ROUTE_TEXT_READ : ROUTE_TEXT_OTHER;
}

/* Moves whole messages from the backlog into the held batch up to its Sync, then decides: a batch of
 * reads waits for a replica as a read; anything else (a write, a Flush, a message outside the extended
 * protocol, a batch past ROUTE_BATCH_MAX) goes to the primary as it is. False while the Sync has not
 * come. */
static bool route_collect(struct session *s)
{
	struct session_route *route = s->routing;
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	for (;;) {
		if (s->steer.backlog.len < PROTO_HEADER_LEN)
			return false;
		uint8_t type = s->steer.backlog.data[0];
		uint32_t length = proto_read_u32(s->steer.backlog.data + 1);
		bool is_extended = type == PROTO_FE_PARSE || type == PROTO_FE_BIND || type == PROTO_FE_DESCRIBE ||
				   type == PROTO_FE_EXECUTE || type == PROTO_FE_CLOSE || type == PROTO_FE_SYNC;
		if (!is_extended || length < 4 || route->held.len + 1 + (uint64_t)length > ROUTE_BATCH_MAX)
			break; /* not a batch routing reads: the relay takes it from here */
		if (s->steer.backlog.len < 1 + length)
			return false;
		if (base_bytes_append(&route->held, s->steer.backlog.data, 1 + length) < 0)
			break;
		s->steer.backlog.len -= 1 + length;
		memmove(s->steer.backlog.data, s->steer.backlog.data + 1 + length, s->steer.backlog.len);
		if (type != PROTO_FE_SYNC)
			continue;
		enum route_text text = route_batch_text(s, cfg);
		if (text == ROUTE_TEXT_OTHER)
			break;
		route->is_tx = text == ROUTE_TEXT_BEGIN_READ_ONLY;
		route->is_batch = !route->is_tx; /* a BEGIN alone: its transaction's statements follow as they come */
		route_read_begins(s, cfg, route_level(s, cfg));
		return true;
	}
	route_dispatch(s, session_primary(s), false); /* what was held, as it came; the backlog follows */
	return true;
}

void route_run(struct session *s)
{
	struct session_route *route = s->routing;
	while (s->phase == SESSION_READY) {
		if (route->state == ROUTE_WAITING) {
			if (!route_try(s, base_now_ns()))
				return;
			continue;
		}
		if (route->state == ROUTE_COLLECTING) {
			if (!route_collect(s))
				return;
			continue;
		}
		if (route->state == ROUTE_SETTLING) {
			if (session_client_leg(s)->copy.is_copy_in) {
				/* A COPY FROM STDIN the client began ahead of it: the Query is the COPY's next message,
				 * which the server refuses, as PostgreSQL does any Query there (nothing else ends it). */
				route->state = ROUTE_IDLE;
				struct base_bytes held = route->held;
				route->held = (struct base_bytes){0};
				s->parts->feed(s, session_client_leg(s), true, held.data, held.len);
				free(held.data);
				continue;
			}
			if (!route_is_settled(s))
				return;
			route->state = ROUTE_IDLE;
			route_answer_setting(s, (const char *)route->held.data + PROTO_HEADER_LEN); /* NUL-terminated */
			route->held.len = 0;
			continue;
		}
		bool is_tx = route->state == ROUTE_REPLICA_TX;
		if ((route->state != ROUTE_IDLE && !is_tx) || s->steer.backlog.len == 0)
			break;
		struct base_bytes fed = s->steer.backlog; /* fed whole: what it leaves goes back to an empty backlog */
		s->steer.backlog = (struct base_bytes){0};
		s->parts->feed(s, session_client_leg(s), false, fed.data, fed.len);
		free(fed.data);
	}
	session_client_pace(s);
}
