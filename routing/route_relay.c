/* What the relay, the login and the session ask routing (session_parts' routing hooks, route.h): the
 * client's chunks while routing holds its traffic, the Query routing reads first, tern's own parameters
 * at startup, and what routing's state says of the session. main puts them in the table.
 * Never: moves a byte itself but through the relay's feed (session_relay_feed), or reads another
 * concern's state. */
#include "route.h"

#include <errno.h>

bool route_chunk(struct session *s, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	if (route_is_replica_tx(s) && s->steer.backlog.len == 0) { /* a read-only transaction's next request */
		session_relay_feed(s, session_client_leg(s), false, buffer_id, data, len);
		if (!route_is_replica_tx(s))
			route_run(s);
		return true;
	}
	if (s->routing->state != ROUTE_IDLE) { /* a routed read is under way: the client's next bytes wait */
		if (session_backlog_append(s, data, len) < 0)
			session_end(s, SESSION_END_OUT_OF_MEMORY);
		else if (s->routing->state == ROUTE_COLLECTING)
			route_run(s); /* the rest of a batch routing reads to its Sync */
		else
			session_client_pace(s);
		return true;
	}
	TERN_ASSERT(s->steer.backlog.len == 0);
	if (route_collects(s, data, len)) { /* an extended-protocol batch: read to its Sync first */
		route_run(s);
		return true;
	}
	return false;
}

void route_fed(struct session *s)
{
	if (s->routing->state != ROUTE_IDLE)
		route_run(s); /* a query routing took: to a replica, or to wait for one */
}

enum session_query_route route_query(struct session *s, const uint8_t *body, uint32_t len, uint8_t *probe)
{
	enum route_probe after = ROUTE_PROBE_NONE;
	enum route_query routed = route_on_query(s, body, len, &after);
	*probe = (uint8_t)after;
	switch (routed) {
	case ROUTE_QUERY_TAKEN:
		return SESSION_QUERY_TAKEN;
	case ROUTE_QUERY_ADMIT:
		return SESSION_QUERY_ADMIT;
	case ROUTE_QUERY_ADMIT_LAST:
		return SESSION_QUERY_ADMIT_LAST;
	case ROUTE_QUERY_ANSWERED:
	case ROUTE_QUERY_REFUSED:
		break;
	}
	return SESSION_QUERY_ANSWERED;
}

struct pool_server *route_server(const struct session *s) { return s->routing->server; }

bool route_is_busy(const struct session *s) { return s->routing->state != ROUTE_IDLE; }

bool route_has_deadline(const struct session *s)
{
	uint8_t state = s->routing->state; /* a SET tern.* or a batch being read waits on the primary's clock */
	return state != ROUTE_IDLE && state != ROUTE_SETTLING && state != ROUTE_COLLECTING;
}

bool route_holds_reply(struct session *s, const void *data, uint32_t len)
{
	if (!session_client_leg(s)->route->is_reply_guarded)
		return false;
	route_hold_reply(s, data, len);
	return true;
}

int route_take_setting(struct session *s, const char *name, size_t name_len, const char *value, const char **hint)
{
	int id = route_setting_from_name(name, name_len);
	if (id < 0)
		return -ENOENT;
	if (route_setting_take(s, (enum route_setting)id, value) < 0) {
		*hint = route_setting_hint((enum route_setting)id);
		return -EINVAL;
	}
	return 0;
}

void route_place(struct session *s, struct session_route *route)
{
	s->routing = route;
	route->session = s;
}
