/* [shadow] sampling's session side (shadow.h): with probability sample_rate, a Query that is one read
 * (SELECT, VALUES, SHOW: classify.h), sent outside a transaction with nothing else owed on its leg, is
 * picked; the DataRows its server sends the client are hashed as they pass (PROTO_INSPECT_SMALL: a row
 * over 64 kB is not read, and the read is not compared; another session's rows, or this one's when
 * nothing is sampled, are not read at all), and at its ReadyForQuery, unless an error came,
 * it is offered to the shadow thread with the session's database and user. Owns s->shadow; a read not
 * picked costs one random number. */
#include "observer.h"
#include "session.h"

#include "classify.h"

#include <stdlib.h>
#include <string.h>

static bool shadow_is_on(const struct session *s)
{
	return s->host->runtime->shadow && runtime_config(s->host->runtime)->shadow_sample_ppm > 0;
}

/* The session's next random number (xorshift64*), seeded from its address and the clock. */
static uint64_t shadow_random(struct session_shadow *sh, const struct session *s)
{
	if (sh->seed == 0)
		sh->seed = ((uint64_t)(uintptr_t)s ^ base_now_ns()) | 1u;
	sh->seed ^= sh->seed >> 12;
	sh->seed ^= sh->seed << 25;
	sh->seed ^= sh->seed >> 27;
	return sh->seed * UINT64_C(2685821657736338717);
}

static void shadow_forget(struct session_shadow *sh)
{
	free(sh->text);
	sh->text = NULL;
	sh->leg = NULL;
}

static int shadow_client_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_shadow *sh = &s->shadow;
	if (sh->leg && sh->leg != s->legs[LEG_PRIMARY] && sh->leg != s->legs[LEG_REPLICA])
		shadow_forget(sh); /* its leg was lost before the answer came */
	uint32_t ppm = runtime_config(s->host->runtime)->shadow_sample_ppm;
	if (sh->leg || shadow_random(sh, s) % CONFIG_RATIO_ONE >= ppm)
		return 0;
	/* (the relay counted this Query already: it alone is owed) */
	if (leg->tx_status != 'I' || leg_client_owed(leg) != 1 || leg->is_unsynced || m->len < 2 ||
	    m->len - 1 > SHADOW_TEXT_MAX || m->body[m->len - 1] != '\0')
		return 0;
	const char *text = (const char *)m->body;
	struct classify_result c;
	if (!classify_fast_path(text, &c))
		classify_query(text, runtime_config(s->host->runtime)->read_functions, &c);
	if (c.kind != CLASSIFY_READ || c.statement_count != 1)
		return 0;
	sh->text = malloc(m->len);
	if (!sh->text)
		return 0;
	memcpy(sh->text, text, m->len);
	sh->len = m->len - 1;
	sh->leg = leg;
	sh->rows_due = sh->rows_read = 0;
	sh->is_failed = false;
	sh->seen = (struct shadow_rows){0};
	return 0;
}

/* Read only on the sampled read's leg (OBSERVER_SKIP elsewhere: no reader, nothing inspected). */
static unsigned shadow_server_type(struct session *s, struct leg *leg, uint8_t type)
{
	struct session_shadow *sh = &s->shadow;
	if (sh->leg != leg)
		return OBSERVER_SKIP;
	if (type != PROTO_BE_DATA_ROW)
		return OBSERVER_PASS; /* (an error, a ReadyForQuery: read as the relay reads them) */
	sh->rows_due++;
	return PROTO_FORWARD | PROTO_INSPECT_SMALL; /* (a row over 64 kB passes unread: not compared) */
}

static int shadow_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	struct session_shadow *sh = &s->shadow;
	if (sh->leg != leg || m->is_hidden)
		return 0;
	if (m->type == PROTO_BE_DATA_ROW) {
		sh->rows_read++;
		shadow_rows_add_wire(&sh->seen, m->body, m->len);
	} else if (m->type == PROTO_BE_ERROR) {
		sh->is_failed = true;
	} else if (m->type == PROTO_BE_READY) {
		if (!sh->is_failed && sh->rows_read == sh->rows_due)
			shadow_offer(s->host->runtime->shadow, s->database, s->user, sh->text, sh->len, &sh->seen);
		shadow_forget(sh);
	}
	return 0;
}

static void shadow_destroy(struct session *s) { shadow_forget(&s->shadow); }

const struct observer observer_shadow = {
	.name = "shadow",
	.is_on = shadow_is_on,
	.client_types = "Q",
	.client_message = shadow_client_message,
	.server_types = "DEZ",
	.server_type = shadow_server_type,
	.server_message = shadow_server_message,
	.destroy = shadow_destroy,
};
