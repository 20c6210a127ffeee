/* observer_polar (observer.h): the ReadyForQuery of a profile=polar server carries, after the status byte,
 * the transaction's marker ('x' splittable, 'w' its WAL not yet flushed) and its XIDs ("cid,xid,...").
 * This observer reads them into the leg on every ReadyForQuery (tern's own queries' too), for route.c's
 * split decision and the XIDs a split read imports, and shows the client PostgreSQL's own ReadyForQuery in
 * that one's place. Never: a vanilla server's messages (its hooks pass those legs by), a decision of its own. */
#include "core/dispatch.h"
#include "core/observer.h"
#include "core/session.h"
#include "route_types.h"

#include <errno.h>

static bool polar_is_leg(const struct leg *leg) { return leg->conn && leg->conn->is_polar; }

static unsigned polar_server_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)s;
	(void)type; /* (ReadyForQuery alone: server_types) */
	return polar_is_leg(leg) ? OBSERVER_PASS : OBSERVER_SKIP;
}

static unsigned polar_hidden_type(struct session *s, struct leg *leg, uint8_t type)
{
	(void)s;
	return type == PROTO_BE_READY && polar_is_leg(leg) ? PROTO_INSPECT : 0;
}

/* A polar leg's ReadyForQuery, shown or hidden: its marker and XIDs. -EPROTO when they are not there. */
static int polar_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)s;
	if (m->type != PROTO_BE_READY || !polar_is_leg(leg))
		return 0;
	if (m->len < 3 || m->body[m->len - 1] != '\0' || (m->body[1] != 'x' && m->body[1] != 'w'))
		return -EPROTO;
	leg->route->polar_marker = (char)m->body[1];
	if (!base_strlcpy(leg->route->polar_xids, (const char *)m->body + 2, sizeof(leg->route->polar_xids)))
		leg->route->polar_marker = 'w'; /* more XIDs than tern keeps: not splittable */
	return 0;
}

static bool polar_watches(const struct session *s, const struct leg *leg)
{
	(void)s;
	return polar_is_leg(leg);
}

/* Last of the show stage: a ReadyForQuery nobody else claimed is shown as PostgreSQL's own. */
static unsigned polar_show_type(struct session *s, struct leg *leg, uint8_t type, unsigned action, bool *claims)
{
	(void)s;
	(void)leg;
	*claims = type == PROTO_BE_READY;
	return *claims ? (action & ~(unsigned)PROTO_FORWARD) | PROTO_INSPECT : action;
}

static int polar_show(struct session *s, struct leg *leg, const struct observer_message *m)
{
	if (s->phase == SESSION_CLOSING)
		return 0;
	uint8_t ready[PROTO_HEADER_LEN + 1] = {PROTO_BE_READY, 0, 0, 0, 5, m->body[0]};
	session_send_to_client(s, ready, sizeof(ready));
	dispatch_shown(s, leg, ready, sizeof(ready));
	leg->to_client_bytes += sizeof(ready);
	return 0;
}

const struct observer observer_polar = {
	.name = "polar",
	.server_types = (const char[]){PROTO_BE_READY, 0},
	.server_type = polar_server_type,
	.server_message = polar_server_message,
	.hidden_type = polar_hidden_type,
	.watches = polar_watches,
	.show_type = polar_show_type,
	.show = polar_show,
};
