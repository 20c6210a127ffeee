/* A routed read's answer from a replica, until it is the client's: what precedes its first row or
 * completion is held, an error the primary may serve instead is judged (the read runs again there), and
 * the leg's progress, loss and the session's end settle the read. Owns route->reply_held; never shows the
 * client anything of a leg routing does not guard. */
#include "route.h"
#include "monitor.h"
#include "route_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- a replica's answer, held until it is the client's ---- */

/* What a replica may refuse and the primary serve: a recovery conflict (40001), a deadlock with the
 * startup process (40P01), a write taken for a read (25006: a read_functions entry that writes), and
 * any FATAL error (its connection ends: terminated, shut down), which the primary would not say. */
static bool route_is_rerunnable(const struct session *s, const struct proto_error_fields *fields)
{
	const char *code = fields->sqlstate;
	if (strcmp(fields->severity, "FATAL") == 0 || strcmp(fields->severity, "PANIC") == 0)
		return true; /* (in a read-only transaction's BEGIN too: route_on_lost re-runs it) */
	return s->routing->state == ROUTE_ON_REPLICA && runtime_config(s->host->runtime)->on_replica_error == 0 &&
	       (strcmp(code, "40001") == 0 || strcmp(code, "40P01") == 0 || strcmp(code, "25006") == 0);
}

/* Sends a message (header rebuilt) to the client, counted as the leg's. */
static void route_guard_send(struct session *s, struct leg *leg, uint8_t type, const uint8_t *body, uint32_t len)
{
	uint8_t header[PROTO_HEADER_LEN] = {type};
	proto_write_u32(header + 1, len + 4);
	session_send_to_client(s, header, sizeof(header));
	if (len > 0)
		session_send_to_client(s, body, len);
	leg->to_client_bytes += PROTO_HEADER_LEN + len;
}

/* The answer is the client's: what was held goes first, the rest flows. */
static void route_guard_release(struct session *s, struct leg *leg)
{
	struct session_route *route = s->routing;
	leg->route->is_reply_guarded = false;
	if (route->reply_held.len > 0) {
		session_send_to_client(s, route->reply_held.data, route->reply_held.len);
		leg->to_client_bytes += route->reply_held.len;
	}
	route->reply_held.len = 0;
}

/* What an answer says before its first row or completion: the primary would say it too. */
enum route_guard route_guard_type(struct session *s, struct leg *leg, uint8_t type)
{
	enum route_state state = (enum route_state)s->routing->state;
	if (s->routing->is_rerun || (state != ROUTE_ON_REPLICA && state != ROUTE_REPLICA_TX_BUSY))
		return ROUTE_GUARD_HIDE; /* the rest of a refused answer; what a kept replica says unasked */
	if (proto_be_is_preamble(type) || type == PROTO_BE_ERROR)
		return ROUTE_GUARD_HOLD;
	route_guard_release(s, leg); /* a row, a CommandComplete, a notice: the answer is the client's */
	return ROUTE_GUARD_PASS;
}

int route_guard_message(struct session *s, struct leg *leg, uint8_t type, const uint8_t *body, uint32_t len)
{
	struct session_route *route = s->routing;
	if (type != PROTO_BE_ERROR) {
		uint8_t header[PROTO_HEADER_LEN] = {type};
		proto_write_u32(header + 1, len + 4);
		if (base_bytes_append(&route->reply_held, header, sizeof(header)) < 0 ||
		    base_bytes_append(&route->reply_held, body, len) < 0)
			return -ENOMEM;
		return 0;
	}
	struct proto_error_fields fields;
	if (proto_error_parse(body, len, &fields) == 0 && route_is_rerunnable(s, &fields)) {
		TERN_INFO("client %s/%s: a replica refused a read (%s: %s); the primary serves it", s->user, s->database,
			  fields.sqlstate, fields.message);
		route->is_rerun = true;
		route->reply_held.len = 0;
		return 0;
	}
	route_guard_release(s, leg);
	route_guard_send(s, leg, type, body, len);
	return 0;
}

void route_hold_reply(struct session *s, const void *data, uint32_t len)
{
	if (!s->routing->is_rerun && base_bytes_append(&s->routing->reply_held, data, len) < 0)
		session_end_later(s, SESSION_END_OUT_OF_MEMORY);
}

/* A batch runs again: the names its Parse messages gave (none was in use before it: route_batch_text)
 * are forgotten, so they are given again, as the client asked, on the primary. */
static void route_forget_batch_names(struct session *s)
{
	const uint8_t *p = s->routing->held.data, *end = p + s->routing->held.len;
	while (s->routing->is_batch && p < end) {
		const uint8_t *body = p + PROTO_HEADER_LEN, *next = p + 1 + proto_read_u32(p + 1);
		const char *name = p[0] == PROTO_FE_PARSE ? route_cstring(&body, next) : NULL;
		if (name && name[0])
			(void)stmt_map_remove(&s->stmts.statements, name);
		p = next;
	}
}

/* The read runs again on the primary: what the replica said is dropped. */
static void route_rerun(struct session *s, uint64_t *counter)
{
	s->routing->is_rerun = false;
	s->routing->reply_held.len = 0;
	route_forget_batch_names(s);
	route_to_primary(s, counter);
}

void route_on_progress(struct session *s, struct leg *leg)
{
	struct session_route *route = s->routing;
	if (route->state == ROUTE_REPLICA_TX_BUSY) {
		if (leg->role != LEG_REPLICA || !route_leg_owes_nothing(leg))
			return;
		if (leg->conn && leg->tx_status != 'I') {
			route->state = ROUTE_REPLICA_TX; /* answered, the transaction goes on: the next request */
		} else if (!leg->conn) { /* it ended, and its connection went back */
			route_release_server(s);
			route_done(s);
		} else {
			return; /* ended: released at the end of the receive (a later progress) */
		}
	} else if (route->state == ROUTE_ON_REPLICA) {
		bool is_kept = leg->conn && route->split.server && leg_is_idle(leg); /* the transaction's replica */
		if (leg->role != LEG_REPLICA || leg->is_request_pending || (leg->conn && !is_kept))
			return;
		route_release_server(s);
		leg->route->is_waiting_for_lsn = leg->route->is_wait_status_next = false; /* (a WAIT FOR that failed with an error) */
		if (route->is_rerun) { /* its refusal is hidden and its connection went back: the primary's turn */
			leg->route->is_reply_guarded = false;
			route_rerun(s, &route_paths(s)->error);
		} else {
			route_guard_release(s, leg); /* (what tern made up after the last of the server's answer) */
			route_done(s); /* answered, and its connection went back (or is kept) */
		}
		leg->route->is_reply_guarded = is_kept; /* kept: what it says unasked is hidden */
	}
	route_split_settle(s);
	route_run(s);
}

bool route_on_lost(struct session *s, struct leg *leg)
{
	struct session_route *route = s->routing;
	bool is_routed = route->state == ROUTE_ON_REPLICA || route->state == ROUTE_REPLICA_TX_BUSY;
	if (leg->role == LEG_REPLICA && !is_routed && route->state != ROUTE_REPLICA_TX && leg == s->legs[LEG_REPLICA] &&
	    s->phase == SESSION_READY && !leg->is_request_pending) {
		/* An idle replica connection (the one a transaction's split reads keep, or one on its way back):
		 * nothing of the client's was on it; the next read picks again. */
		TERN_INFO("client %s/%s: an idle replica connection was lost; the next read picks again", s->user,
			  s->database);
		route->split.server = NULL;
		return session_set_aside_leg(s, LEG_REPLICA) != NULL;
	}
	if (leg->role != LEG_REPLICA || !is_routed || !leg->route->is_reply_guarded || s->phase != SESSION_READY ||
	    leg != s->legs[LEG_REPLICA])
		return false; /* part of its answer reached the client: the session decides */
	TERN_ASSERT(leg->to_client_bytes == route->replica_mark);
	if (!session_set_aside_leg(s, LEG_REPLICA))
		return false;
	struct pool_server *lost = route->server;
	route_release_server(s);
	route->split.server = NULL;
	if (lost && runtime_config(s->host->runtime)->on_replica_lost == 0) {
		TERN_INFO("client %s/%s: a read's replica connection (%s) was lost before it answered; another replica "
			  "serves it if one may, else the primary",
			  s->user, s->database, lost->name);
		route->is_rerun = false;
		route->reply_held.len = 0;
		route_forget_batch_names(s);
		route->excluded = lost;
		s->steer.leg = NULL;
		route->is_wait_for_lsn = false;
		route->state = ROUTE_WAITING; /* with its target: route_try picks among the others */
	} else {
		TERN_INFO("client %s/%s: a read's replica connection was lost before it answered; the primary serves it",
			  s->user, s->database);
		route_rerun(s, &route_paths(s)->lost);
	}
	route_run(s);
	return true;
}

void route_end(struct session *s)
{
	route_unwait(s);
	route_release_server(s);
	s->routing->split.server = NULL; /* (the replica leg's connection goes as the session's do) */
}

void route_deinit(struct session *s)
{
	route_unwait(s);
	free(s->routing->held.data);
	free(s->routing->reply_held.data);
	s->routing->held = s->routing->reply_held = (struct base_bytes){0};
}

void route_check_waits(struct host *host, uint64_t now_ns)
{
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &host->route_waits)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session_route, wait_link)->session;
		TERN_ASSERT(s->routing->state == ROUTE_WAITING);
		if (route_try(s, now_ns))
			route_run(s);
	}
}

void route_host_pass(struct host *host)
{
	if (host->route_waiting > 0 && monitor_moved(host->runtime->monitor, &host->route_generation))
		route_check_waits(host, base_now_ns());
}

void route_host_tick(struct host *host, uint64_t now_ns)
{
	if (host->route_waiting > 0)
		route_check_waits(host, now_ns); /* wait_timeout_ms: the primary serves them */
}
