/* Pins in transaction pooling: a client that ran LISTEN keeps its server connection (its notifications
 * arrive there) until a query starting with UNLISTEN *, or DISCARD ALL, completes; one that ran SQL
 * PREPARE keeps it (its EXECUTE finds the statement only there) until DEALLOCATE ALL or DISCARD ALL. A
 * pinned client that leaves has its connection closed (session_is_pinned). */
#include "observer.h"
#include "session.h"

#include "proto.h"
#include "sql.h"

static bool pins_is_on(const struct session *s) { return s->is_transaction_pooling; }

static int pins_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	if (s->pins.is_listening)
		s->pins.is_unlisten_all_sent |= sql_is_unlisten_all(m->body, m->len);
	return 0;
}

static int pins_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	struct session_pins *pins = &s->pins;
	if (m->type == PROTO_BE_READY) {
		pins->is_unlisten_all_sent = false;
		return 0;
	}
	if (observer_message_is_tag(m, "LISTEN")) {
		pins->is_listening = true; /* conservative: kept even if the transaction rolls back */
	} else if (observer_message_is_tag(m, "UNLISTEN") && pins->is_unlisten_all_sent) {
		pins->is_listening = false;
	} else if (observer_message_is_tag(m, "PREPARE")) {
		pins->is_sql_prepared = true;
	} else if (observer_message_is_tag(m, "DISCARD ALL")) {
		pins->is_listening = false;
		pins->is_sql_prepared = false;
	} else if (observer_message_is_tag(m, "DEALLOCATE ALL")) {
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
