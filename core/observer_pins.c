/* Pins in transaction pooling: a client that ran LISTEN keeps its server connection (its notifications
 * arrive there) until a query starting with UNLISTEN *, or DISCARD ALL, completes; one that ran SQL
 * PREPARE keeps it (its EXECUTE finds the statement only there) until DEALLOCATE ALL or DISCARD ALL. A
 * pinned client that leaves has its connection closed (session_is_pinned). In session pooling under
 * Transaction Replay the same state, and a text that may have left a temporary table, a cursor WITH HOLD
 * or a session advisory lock, or a named statement with max_prepared_statements = 0 (is_holding, until
 * DISCARD ALL), is what makes a session unable to move (recover.c). */
#include "observer.h"
#include "session.h"

#include "proto.h"
#include "sql.h"

#include <string.h>

static bool pins_is_on(const struct session *s)
{
	return s->is_transaction_pooling || config_tr_is_on(runtime_config(s->host->runtime));
}

static int pins_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	const uint8_t *text = m->body;
	uint32_t len = m->len;
	if (m->type == PROTO_FE_PARSE) { /* name\0 text\0 ... */
		const uint8_t *name_end = memchr(m->body, '\0', m->len);
		if (!name_end)
			return 0;
		text = name_end + 1;
		len = m->len - (uint32_t)(text - m->body);
	} else if (s->pins.is_listening) {
		s->pins.is_unlisten_all_sent |= sql_is_unlisten_all(m->body, m->len);
	}
	if (!s->is_transaction_pooling && !s->pins.is_holding)
		s->pins.is_holding = sql_may_hold_session_state(text, len) ||
				     /* a named statement no observer keeps (max_prepared_statements = 0) */
				     (m->type == PROTO_FE_PARSE && m->body[0] && !(s->observers_on & (1u << OBSERVER_STMTS)));
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
		pins->is_holding = false;
	} else if (observer_message_is_tag(m, "DEALLOCATE ALL")) {
		pins->is_sql_prepared = false;
	}
	return 0;
}

const struct observer observer_pins = {
	.name = "pins",
	.is_on = pins_is_on,
	.client_types = "QP",
	.client_message = pins_client_message,
	.server_types = "CZ",
	.server_message = pins_server_message,
};
