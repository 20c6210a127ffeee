/*
 * parts.h — the table main composes for every session (session_parts, core/session.h): core's login and
 * relay, the observers in the order they are asked, and the hooks through which the relay, the session and
 * the worker reach routing and Transaction Replay. core names neither of them; here, at the top, they meet.
 *
 * Threads: read-only, any. Never: holds state.
 */
#ifndef TERN_PARTS_H
#define TERN_PARTS_H

#include "core/session.h"

extern const struct session_parts tern_parts;

#endif
