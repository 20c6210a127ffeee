/* Pins in transaction pooling: a client that ran LISTEN keeps its server connection (its notifications
 * arrive there) until a query starting with UNLISTEN *, or DISCARD ALL, completes; one that ran SQL
 * PREPARE keeps it (its EXECUTE finds the statement only there) until DEALLOCATE ALL or DISCARD ALL. A
 * pinned client that leaves has its connection closed (session_is_pinned). */
#include "observer.h"
#include "session.h"

#include "proto.h"
#include "sql.h"

#include <string.h>

static bool pins_is_on(const struct session *s) { return s->is_transaction_pooling; }

static int pins_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	if (s->pins.is_listening)
		s->pins.is_unlisten_all_sent |= sql_is_unlisten_all(m->body, m->len);
	return 0;
}

static bool pins_tag_is(const struct observer_message *m, const char *tag)
{
	size_t n = strlen(tag) + 1; /* the tag's NUL too */
	return m->len == n && memcmp(m->body, tag, n) == 0;
}

static int pins_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	struct session_pins *pins = &s->pins;
	if (m->type == PROTO_BE_READY) {
		pins->is_unlisten_all_sent = false;
		return 0;
	}
	if (pins_tag_is(m, "LISTEN")) {
		pins->is_listening = true; /* conservative: kept even if the transaction rolls back */
	} else if (pins_tag_is(m, "UNLISTEN") && pins->is_unlisten_all_sent) {
		pins->is_listening = false;
	} else if (pins_tag_is(m, "PREPARE")) {
		pins->is_sql_prepared = true;
	} else if (pins_tag_is(m, "DISCARD ALL")) {
		pins->is_listening = false;
		pins->is_sql_prepared = false;
	} else if (pins_tag_is(m, "DEALLOCATE ALL")) {
		pins->is_sql_prepared = false;
	}
	return 0;
}

const struct observer observer_pins = {
	.name = "pins",
	.is_on = pins_is_on,
	.client_types = "Q",
	.client_message = pins_client_message,
	.server_types = "CZ",
	.server_message = pins_server_message,
};
