/*
 * route_internal.h — what the files of routing (route*.c) share among themselves: the five are one
 * concern cut by what each holds, so they call each other here. No other file includes it (test_layout.c).
 *
 * Threads and ownership: as route.h says (the session's worker; routing's state in the session and its legs).
 * Never: a way in for the rest of tern, which calls routing through route.h and route_setting.h alone.
 */
#ifndef TERN_ROUTE_INTERNAL_H
#define TERN_ROUTE_INTERNAL_H

#include "core/classify.h"
#include "core/session.h"

/* What a batch's statement is to routing: a read, a BEGIN READ ONLY, or neither (route_batch.c). */
enum route_text { ROUTE_TEXT_OTHER = 0, ROUTE_TEXT_READ, ROUTE_TEXT_BEGIN_READ_ONLY };
/* route_guard_type's answers (route_guard.c): HOLD, route_guard_message has it (what precedes a first row
 * or a completion is kept, an ErrorResponse judged); HIDE, not shown (the answer of a read routing re-runs
 * on the primary); PASS, the answer is the client's. */
enum route_guard { ROUTE_GUARD_PASS = 0, ROUTE_GUARD_HOLD, ROUTE_GUARD_HIDE };

/* ---- route.c ---- */
bool route_leg_owes_nothing(const struct leg *leg);
bool route_is_settled(const struct session *s);
bool route_wants(const struct session *s, enum config_consistency level);
void route_read_begins(struct session *s, const struct tern_config *cfg, enum config_consistency level);
int route_push_hidden(struct leg *leg, const char *sql);
bool route_split_is_on(const struct session *s);
void route_split_reset_if_idle(struct session *s);
void route_split_note(struct session *s, const struct classify_result *r);
void route_split_note_unread(struct session *s);
void route_split_settle(struct session *s);
void route_release_server(struct session *s);
void route_unwait(struct session *s);
void route_done(struct session *s);
void route_dispatch(struct session *s, struct leg *leg, bool is_read);
struct host_route_paths *route_paths(struct session *s);
void route_to_primary(struct session *s, uint64_t *counter);
bool route_try(struct session *s, uint64_t now);

/* ---- route_batch.c ---- */
const char *route_cstring(const uint8_t **p, const uint8_t *end);
enum route_text route_batch_text(struct session *s, const struct tern_config *cfg);

/* ---- route_guard.c ---- */
enum route_guard route_guard_type(struct session *s, struct leg *leg, uint8_t type);
int route_guard_message(struct session *s, struct leg *leg, uint8_t type, const uint8_t *body, uint32_t len);

#endif
