/* The dispatch of dispatch.h: the observers' registry in the order they are asked, the type tables built
 * from it, and the calls that walk a mask of observers. See dispatch.h. */
#include "dispatch.h"

#include "session.h"

#include <string.h>

/* The observers in the order they are asked (session_parts.observers, main's; dispatch_init copies it). */
static const struct observer *dispatch_registry[OBSERVER_COUNT];
static_assert(OBSERVER_COUNT <= 32, "a mask of 32 bits");

struct dispatch_tables dispatch_tables;

void dispatch_init(const struct observer *const registry[OBSERVER_COUNT])
{
	if (dispatch_tables.is_ready)
		return;
	for (uint32_t id = 0; id < OBSERVER_COUNT; id++) {
		const struct observer *o = dispatch_registry[id] = registry[id];
		TERN_ASSERT(o && o->name);
		for (const char *t = o->client_types ? o->client_types : ""; *t; t++)
			dispatch_tables.client[(uint8_t)*t] |= 1u << id;
		for (const char *t = o->server_types ? o->server_types : ""; *t; t++)
			dispatch_tables.server[(uint8_t)*t] |= 1u << id;
		if (o->hidden_type)
			dispatch_tables.hidden |= 1u << id;
		if (o->shown)
			dispatch_tables.shown |= 1u << id;
		TERN_ASSERT(!o->show_type == !o->watches && !o->show_type == !o->show);
		TERN_ASSERT(!o->client_types || o->client_message || o->client_type);
		TERN_ASSERT(!o->server_types || o->server_message || o->server_type);
	}
	dispatch_tables.is_ready = true;
}

uint32_t dispatch_observers_for(const struct session *s)
{
	TERN_ASSERT(dispatch_tables.is_ready);
	uint32_t on = 0;
	for (uint32_t id = 0; id < OBSERVER_COUNT; id++)
		if (!dispatch_registry[id]->is_on || dispatch_registry[id]->is_on(s))
			on |= 1u << id;
	return on;
}

/* Lowest set bit first: registry order. */
#define DISPATCH_EACH(id, mask) for (uint32_t rest_ = (mask), id; rest_ && ((id = (uint32_t)__builtin_ctz(rest_)), 1); rest_ &= rest_ - 1)

/* The type hooks of the observers in mask; see dispatch.h. */
static unsigned dispatch_type(struct session *s, struct leg *leg, uint8_t type, uint32_t mask, bool is_client,
			      uint32_t *readers, uint8_t *taker)
{
	unsigned taken = OBSERVER_PASS;
	uint32_t read = 0;
	DISPATCH_EACH(id, mask)
	{
		const struct observer *o = dispatch_registry[id];
		unsigned (*hook)(struct session *, struct leg *, uint8_t) = is_client ? o->client_type : o->server_type;
		bool has_message_hook = is_client ? o->client_message != NULL : o->server_message != NULL;
		unsigned action = hook ? hook(s, leg, type) : OBSERVER_PASS;
		if (action == OBSERVER_SKIP)
			continue;
		if (action != OBSERVER_PASS && taken == OBSERVER_PASS) {
			taken = action;
			*taker = (uint8_t)id;
		}
		if (has_message_hook)
			read |= 1u << id;
	}
	*readers = read;
	return taken;
}

unsigned dispatch_client_type(struct session *s, struct leg *leg, uint8_t type, uint32_t mask, uint32_t *readers,
			      uint8_t *taker)
{
	return dispatch_type(s, leg, type, mask, true, readers, taker);
}

unsigned dispatch_server_type(struct session *s, struct leg *leg, uint8_t type, uint32_t mask, uint32_t *readers)
{
	uint8_t taker;
	return dispatch_type(s, leg, type, mask, false, readers, &taker);
}

int dispatch_client_head(struct session *s, struct leg *leg, uint8_t taker, uint8_t type, const uint8_t *head,
			 uint32_t head_len, uint32_t body_len)
{
	TERN_ASSERT(taker < OBSERVER_COUNT && dispatch_registry[taker]->client_head);
	return dispatch_registry[taker]->client_head(s, leg, type, head, head_len, body_len);
}

/* The message hooks of the observers in mask, in registry order; stops at the first error. */
static int dispatch_message(struct session *s, struct leg *leg, const struct observer_message *m, uint32_t mask,
			    bool is_client)
{
	DISPATCH_EACH(id, mask)
	{
		const struct observer *o = dispatch_registry[id];
		int (*hook)(struct session *, struct leg *, const struct observer_message *) =
			is_client ? o->client_message : o->server_message;
		int rc = hook ? hook(s, leg, m) : 0;
		if (rc < 0)
			return rc;
	}
	return 0;
}

int dispatch_client_message(struct session *s, struct leg *leg, const struct observer_message *m, uint32_t mask)
{
	return dispatch_message(s, leg, m, mask, true);
}

int dispatch_server_message(struct session *s, struct leg *leg, const struct observer_message *m, uint32_t mask)
{
	return dispatch_message(s, leg, m, mask, false);
}

unsigned dispatch_hidden_type(struct session *s, struct leg *leg, uint8_t type)
{
	unsigned action = 0;
	DISPATCH_EACH(id, dispatch_tables.hidden & s->observers_on)
	{
		action |= dispatch_registry[id]->hidden_type(s, leg, type);
	}
	return action;
}

int dispatch_hidden_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	TERN_ASSERT(m->is_hidden);
	return dispatch_server_message(s, leg, m, dispatch_tables.hidden & s->observers_on);
}

uint32_t dispatch_watchers_for(const struct session *s, const struct leg *leg)
{
	uint32_t watchers = 0;
	DISPATCH_EACH(id, s->observers_on)
	{
		const struct observer *o = dispatch_registry[id];
		if (o->watches && o->watches(s, leg))
			watchers |= 1u << id;
	}
	return watchers;
}

unsigned dispatch_show_type(struct session *s, struct leg *leg, uint8_t type, unsigned action, uint8_t *claimer)
{
	DISPATCH_EACH(id, leg->watchers)
	{
		if (!(action & PROTO_FORWARD))
			break; /* hidden, or claimed: nothing of it reaches the client as it is */
		bool claims = false;
		action = dispatch_registry[id]->show_type(s, leg, type, action, &claims);
		if (claims) {
			TERN_ASSERT(!(action & PROTO_FORWARD) && (action & PROTO_INSPECT));
			*claimer = (uint8_t)id;
		}
	}
	return action;
}

int dispatch_show(struct session *s, struct leg *leg, uint8_t claimer, const struct observer_message *m)
{
	TERN_ASSERT(claimer < OBSERVER_COUNT && (leg->watchers & (1u << claimer)));
	return dispatch_registry[claimer]->show(s, leg, m);
}

void dispatch_shown(struct session *s, struct leg *leg, const void *data, uint32_t len)
{
	DISPATCH_EACH(id, leg->watchers & dispatch_tables.shown)
	{
		dispatch_registry[id]->shown(s, leg, data, len);
	}
}

int dispatch_attach(struct session *s, struct leg *leg)
{
	DISPATCH_EACH(id, s->observers_on)
	{
		const struct observer *o = dispatch_registry[id];
		int rc = o->attach ? o->attach(s, leg) : 0;
		if (rc < 0)
			return rc;
	}
	return 0;
}

bool dispatch_before_release(struct session *s, struct leg *leg)
{
	DISPATCH_EACH(id, s->observers_on)
	{
		const struct observer *o = dispatch_registry[id];
		if (o->before_release && o->before_release(s, leg))
			return true;
	}
	return false;
}

void dispatch_destroy(struct session *s)
{
	for (uint32_t id = 0; id < OBSERVER_COUNT; id++)
		if (dispatch_registry[id]->destroy)
			dispatch_registry[id]->destroy(s);
}
