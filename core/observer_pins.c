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

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool pins_is_on(const struct session *s)
{
	return s->is_transaction_pooling || config_tr_is_on(runtime_config(s->host->runtime));
}

/* The channels kept at most (past it, a LISTEN is not followed: the session cannot move). */
#define PINS_CHANNELS_BYTES 4096u

static int pins_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	(void)leg;
	struct session_pins *pins = &s->pins;
	if (m->type == PROTO_FE_QUERY && pins->is_listening)
		pins->is_unlisten_all_sent |= sql_is_unlisten_all(m->body, m->len);
	if (s->is_transaction_pooling)
		return 0; /* (what follows is session pooling's: a Parse is read there only) */
	const uint8_t *text = m->body;
	uint32_t len = m->len;
	if (m->type == PROTO_FE_PARSE) { /* name\0 text\0 ... */
		const uint8_t *name_end = memchr(m->body, '\0', m->len);
		if (!name_end)
			return 0;
		text = name_end + 1;
		len = m->len - (uint32_t)(text - m->body);
	}
	if (!pins->is_holding)
		pins->is_holding = sql_may_hold_session_state(text, len) ||
				   /* a named statement no observer keeps (max_prepared_statements = 0) */
				   (m->type == PROTO_FE_PARSE && m->body[0] && !(s->observers_on & (1u << OBSERVER_STMTS)));
	if (m->type == PROTO_FE_QUERY) {
		char name[sizeof(pins->listen_name)];
		int kind = sql_parse_listen(text, len, name, sizeof(name));
		if (kind != SQL_LISTEN_NONE) {
			pins->is_listen_unsure |= pins->listen_pending != SQL_LISTEN_NONE; /* two in flight */
			pins->listen_pending = (uint8_t)kind;
			pins->is_listen_done = false;
			memcpy(pins->listen_name, name, sizeof(name));
		}
	}
	return 0;
}

/* The channel's entry in pins->channels (its offset), or UINT32_MAX. */
static uint32_t pins_find_channel(const struct session_pins *pins, const char *name)
{
	for (uint32_t at = 0; at < pins->channels.len; at += (uint32_t)strlen((const char *)pins->channels.data + at) + 1)
		if (strcmp((const char *)pins->channels.data + at, name) == 0)
			return at;
	return UINT32_MAX;
}

/* An autocommit LISTEN or UNLISTEN ran (its ReadyForQuery said idle): the channels follow it. */
static void pins_apply_listen(struct session_pins *pins)
{
	uint32_t at = pins->listen_pending == SQL_UNLISTEN_ALL ? 0 : pins_find_channel(pins, pins->listen_name);
	if (pins->listen_pending == SQL_UNLISTEN_ALL) {
		pins->channels.len = 0;
	} else if (pins->listen_pending == SQL_UNLISTEN && at != UINT32_MAX) {
		uint32_t n = (uint32_t)strlen(pins->listen_name) + 1;
		memmove(pins->channels.data + at, pins->channels.data + at + n, pins->channels.len - at - n);
		pins->channels.len -= n;
	} else if (pins->listen_pending == SQL_LISTEN && at == UINT32_MAX) {
		uint32_t n = (uint32_t)strlen(pins->listen_name) + 1;
		pins->is_listen_unsure |= pins->channels.len + n > PINS_CHANNELS_BYTES ||
					  base_bytes_append(&pins->channels, pins->listen_name, n) < 0;
	}
}

static int pins_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_pins *pins = &s->pins;
	if (m->type == PROTO_BE_READY) {
		pins->is_unlisten_all_sent = false;
		if (pins->is_listen_done) /* (in a transaction it may yet roll back: not followed) */
			pins->is_listen_unsure |= leg->tx_status != 'I';
		if (pins->is_listen_done && leg->tx_status == 'I')
			pins_apply_listen(pins);
		pins->listen_pending = SQL_LISTEN_NONE;
		pins->is_listen_done = false;
		return 0;
	}
	bool is_listen = observer_message_is_tag(m, "LISTEN"), is_unlisten = observer_message_is_tag(m, "UNLISTEN");
	if (!s->is_transaction_pooling && (is_listen || is_unlisten)) {
		bool is_expected = is_listen ? pins->listen_pending == SQL_LISTEN
					     : pins->listen_pending == SQL_UNLISTEN || pins->listen_pending == SQL_UNLISTEN_ALL;
		pins->is_listen_unsure |= !is_expected || pins->is_listen_done; /* (one not read, or two in a text) */
		pins->is_listen_done = true;
	}
	if (is_listen) {
		pins->is_listening = true; /* conservative: kept even if the transaction rolls back */
	} else if (is_unlisten && pins->is_unlisten_all_sent) {
		pins->is_listening = false;
	} else if (observer_message_is_tag(m, "PREPARE")) {
		pins->is_sql_prepared = true;
	} else if (observer_message_is_tag(m, "DISCARD ALL")) {
		pins->is_listening = false;
		pins->is_sql_prepared = false;
		pins->is_holding = false;
		pins->is_listen_unsure = false;
		pins->channels.len = 0;
	} else if (observer_message_is_tag(m, "DEALLOCATE ALL")) {
		pins->is_sql_prepared = false;
	}
	return 0;
}

/* Session pooling: a connection the primary leg gets after the login is a move's: the session listens
 * there again, hidden, ahead of the client's messages (behind the SET restore: observer_sets pushes to
 * the front after this). */
static int pins_attach(struct session *s, struct leg *leg)
{
	const struct session_pins *pins = &s->pins;
	if (s->is_transaction_pooling || leg->role != LEG_PRIMARY || pins->channels.len == 0)
		return 0;
	struct base_bytes sql = {0};
	int rc = 0;
	for (uint32_t at = 0; at < pins->channels.len && rc == 0;) {
		const char *name = (const char *)pins->channels.data + at;
		rc = base_bytes_append(&sql, "LISTEN \"", 8);
		for (const char *c = name; *c && rc == 0; c++) {
			rc = base_bytes_append(&sql, c, 1);
			if (rc == 0 && *c == '"')
				rc = base_bytes_append(&sql, "\"", 1); /* a quote in the name, doubled */
		}
		if (rc == 0)
			rc = base_bytes_append(&sql, "\";", 2);
		at += (uint32_t)strlen(name) + 1;
	}
	if (rc == 0)
		rc = leg_push_hidden_query_front(leg, (const char *)sql.data, sql.len);
	free(sql.data);
	return rc < 0 ? -ENOMEM : 0;
}

static void pins_destroy(struct session *s)
{
	free(s->pins.channels.data);
	s->pins.channels = (struct base_bytes){0};
}

const struct observer observer_pins = {
	.name = "pins",
	.is_on = pins_is_on,
	.client_types = "QP",
	.client_message = pins_client_message,
	.server_types = "CZ",
	.server_message = pins_server_message,
	.attach = pins_attach,
	.destroy = pins_destroy,
};
