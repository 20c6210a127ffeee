/*
 * route_setting.h — routing's own session parameters, tern.consistency and tern.transaction_split
 * (route_setting.c): what the login reads of them in a startup packet, and what routing's files ask.
 *
 * Threads: the session's worker. Ownership: the client's values live in the session's routing state
 * (struct session_route's settings), which route_setting.c alone writes.
 * Never: sends a tern.* setting to a server, or routes a query (route.c does).
 */
#ifndef TERN_ROUTE_SETTING_H
#define TERN_ROUTE_SETTING_H

#include "core/session.h"
#include "route_types.h"

#include <stddef.h>

/* tern's own session parameters, answered by tern and never sent to a server (SET, RESET, SHOW, or the
 * startup option -c name=value). */
/* The setting of that name (name_len bytes, any case), or -1. */
int route_setting_from_name(const char *name, size_t name_len);
/* The client's value of setting id from its startup: 0, or -1 when value is not one of its values. */
int route_setting_take(struct session *s, enum route_setting id, const char *value);
/* "Available values: ..." of setting id. */
const char *route_setting_hint(enum route_setting id);

/* Within routing (route*.c): the client's value of setting id, or the configuration's default of the
 * moment, and its consistency level so; SET, RESET or SHOW of a tern.* name, told apart and answered
 * (the client has nothing in flight), with the ReadyForQuery that ends tern's answer. */
enum config_consistency route_level(const struct session *s, const struct tern_config *cfg);
int route_setting(const struct session *s, const struct tern_config *cfg, enum route_setting id);
void route_send_ready(struct session *s);
void route_answer_setting(struct session *s, const char *sql);
bool route_is_setting(const char *sql);

#endif
