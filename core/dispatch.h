/*
 * dispatch.h — the one dispatch between the relay and the observers (observer.h): the registry of
 * observers in the order they are asked (main's), the tables of which observer reads which message type, built
 * from it once, and the calls the relay makes at each message and each change of a leg.
 *
 * Threads: dispatch_init runs once, before any session (main, or a test); the tables are read-only after.
 * Never: moves bytes (the relay does), or knows what an observer keeps.
 */
#ifndef TERN_DISPATCH_H
#define TERN_DISPATCH_H

#include "observer.h"

/* Bit i: observer id i reads messages of the type, by type byte. */
struct dispatch_tables {
	uint32_t client[256];
	uint32_t server[256];
	uint32_t hidden; /* observers with a hidden_type hook */
	uint32_t shown;  /* ... with a shown hook */
	bool is_ready;
};
extern struct dispatch_tables dispatch_tables;

/* Takes the registry (OBSERVER_COUNT observers, by id: session_parts.observers) and builds the tables
 * from it (idempotent; before any session). */
void dispatch_init(const struct observer *const registry[OBSERVER_COUNT]);
/* The observers on for s (their is_on), as a mask for s->observers_on. */
uint32_t dispatch_observers_for(const struct session *s);
/* The observers of s that read a client / server message of `type` (0 for most rows of a result). */
static inline uint32_t dispatch_client_mask(uint32_t observers_on, uint8_t type)
{
	return dispatch_tables.client[type] & observers_on;
}
static inline uint32_t dispatch_server_mask(uint32_t observers_on, uint8_t type)
{
	return dispatch_tables.server[type] & observers_on;
}
/* At a message's type byte, for the observers in mask: OBSERVER_PASS, or the first action one took;
 * *readers gets the observers that read the complete message (the taker, if its action inspects, and
 * those that did not skip it), *taker the id of the one that took it. */
unsigned dispatch_client_type(struct session *s, struct leg *leg, uint8_t type, uint32_t mask, uint32_t *readers,
			      uint8_t *taker);
unsigned dispatch_server_type(struct session *s, struct leg *leg, uint8_t type, uint32_t mask, uint32_t *readers);
/* PROTO_HOLD_HEAD for the observer that took the message (see observer.client_head). */
int dispatch_client_head(struct session *s, struct leg *leg, uint8_t taker, uint8_t type, const uint8_t *head,
			 uint32_t head_len, uint32_t body_len);
/* A complete message, to every observer in mask in registry order; stops at the first error. */
int dispatch_client_message(struct session *s, struct leg *leg, const struct observer_message *m, uint32_t mask);
int dispatch_server_message(struct session *s, struct leg *leg, const struct observer_message *m, uint32_t mask);
/* While leg owes answers to tern's own queries: the union of the hidden_type actions (0: drop). */
unsigned dispatch_hidden_type(struct session *s, struct leg *leg, uint8_t type);
/* A hidden server message to the observers with a hidden_type hook. */
int dispatch_hidden_message(struct session *s, struct leg *leg, const struct observer_message *m);
/* The show stage (observer.watches): the observers of s that watch leg, for leg->watchers. */
uint32_t dispatch_watchers_for(const struct session *s, const struct leg *leg);
/* A server message the type hooks let forward, to the show_type hooks of leg->watchers in registry order:
 * the action; *claimer gets the id of the observer that claimed it (else it is left as it was). */
unsigned dispatch_show_type(struct session *s, struct leg *leg, uint8_t type, unsigned action, uint8_t *claimer);
/* The claimed message, to its claimer's show hook. */
int dispatch_show(struct session *s, struct leg *leg, uint8_t claimer, const struct observer_message *m);
/* Bytes of leg's answer the client was shown, to the shown hooks of leg->watchers. */
void dispatch_shown(struct session *s, struct leg *leg, const void *data, uint32_t len);
/* leg got a connection: every observer restores its part. 0 or -ENOMEM. */
TERN_MUST_USE int dispatch_attach(struct session *s, struct leg *leg);
/* leg is idle and about to go back: true when an observer queued something first. */
bool dispatch_before_release(struct session *s, struct leg *leg);
/* s is freed: every observer frees its state. */
void dispatch_destroy(struct session *s);

#endif
