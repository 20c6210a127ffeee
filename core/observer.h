/*
 * observer.h — what watches the messages of a session's client and of its server legs, one concern
 * each, in a file of its own with its state in a struct of its own:
 *   observer_copy.c           COPY: copy-in, and the Syncs the server ignores during it (leg->copy);
 *   observer_stmts.c          named prepared statements in transaction pooling, the replies owed (s->stmts);
 *   observer_params.c         tracked parameters and search_path (s->params);
 *   observer_pins.c           LISTEN and SQL PREPARE, which keep the client on its connection (s->pins);
 *   replay/observer_sets.c    the SET state Transaction Replay restores on a new primary (s->replay->sets);
 *   observer_stats.c          SHOW STATS (s->stats);
 *   routing/route_observer.c  routing: the write-LSN probe, a replica answer's guard (s->routing);
 *   observer_digest.c         query digests (s->digest);
 *   observer_shadow.c         [shadow] sampling: a read's rows, compared on a shadow server (s->shadow);
 *   replay/observer_replay.c  Transaction Replay: the client's requests in flight on the primary (s->replay);
 *   routing/polar.c           a profile=polar server's ReadyForQuery: its marker and XIDs read, PostgreSQL's
 *                             own shown (last of the show stage).
 * The relay moves bytes and asks them through dispatch.c, which calls an observer only for the message
 * types it registered, only in the sessions it is on for, in the registry's order. Later concerns (the
 * commit-LSN probe, response digests, the journal) plug in the same way: a file, and a line in the
 * registry.
 *
 * Threads: the session's worker. Ownership: an observer keeps no pointer into a message after its hook
 * returns; what must outlive it is copied into the observer's bounded state.
 * Never: sees the worker or the admin console (no observer includes them), or reads a socket: messages
 * reach an observer from the relay, through dispatch.c.
 */
#ifndef TERN_OBSERVER_H
#define TERN_OBSERVER_H

#include "base.h"

#include <stdint.h>

struct session;
struct leg;

/* A type hook's answers when it does not take the message over: PASS leaves it to the relay and reads it
 * (the observer's message hook is called); SKIP leaves it to the relay unread by this observer. */
#define OBSERVER_PASS UINT32_MAX
#define OBSERVER_SKIP (UINT32_MAX - 1)

enum observer_id {
	OBSERVER_COPY = 0,
	OBSERVER_STMTS,
	OBSERVER_PARAMS,
	OBSERVER_PINS, /* (before sets: at attach sets pushes its restore to the front last, so it is answered first) */
	OBSERVER_SETS,
	OBSERVER_STATS,
	OBSERVER_ROUTE,
	OBSERVER_DIGEST,
	OBSERVER_SHADOW,
	OBSERVER_JOURNAL,
	OBSERVER_REPLAY,
	OBSERVER_POLAR, /* (last: what the others show of a ReadyForQuery comes first) */
	OBSERVER_COUNT
};

struct observer_message {
	uint8_t type;
	const uint8_t *body; /* the content after the 5-byte header */
	uint32_t len;
	/* The receive buffer and chunk it was read from (a client message held for an observer, PROTO_HOLD;
	 * any server message), so it can go on by reference (proto_stream_message_offset says where). */
	uint16_t buffer_id;
	const uint8_t *chunk;
	bool is_hidden; /* a server message answering tern's own query: never shown to the client */
};

struct observer {
	const char *name;
	const char *client_types; /* the client message types it reads, as a string of type bytes */
	const char *server_types; /* ... and the server's */
	/* On for this session? Asked once, when it is created (NULL: always). */
	bool (*is_on)(const struct session *s);
	/* At a client message's type byte: OBSERVER_PASS, OBSERVER_SKIP, or the PROTO_* action when the
	 * observer takes the message over (holds, answers or drops it); the relay then neither forwards nor
	 * counts it, and the other observers of the type still read it if the action inspects it. A hook
	 * that fails sets s->scan.hook_error (-ENOMEM, -ENOBUFS). */
	unsigned (*client_type)(struct session *s, struct leg *leg, uint8_t type);
	/* PROTO_HOLD_HEAD, for the observer that took a long message over: its first head_len bytes of
	 * body_len. PROTO_FORWARD (the rest follows by reference), 0 (the rest is dropped) or <0. */
	int (*client_head)(struct session *s, struct leg *leg, uint8_t type, const uint8_t *head, uint32_t head_len,
			   uint32_t body_len);
	/* A complete client message of its types. 0, or <0 to end the session: -EPROTO (malformed), -ENOMEM,
	 * -E2BIG (too many prepared statements), -ENOBUFS (too many replies or slices queued). */
	int (*client_message)(struct session *s, struct leg *leg, const struct observer_message *m);
	/* At a server message's type byte: OBSERVER_PASS, OBSERVER_SKIP, or the PROTO_* action that shows it
	 * differently (hidden, held); the others of the type still read it. */
	unsigned (*server_type)(struct session *s, struct leg *leg, uint8_t type);
	/* A complete server message of its types, after the relay's own accounting (a ReadyForQuery has
	 * already been counted). 0, or <0 when the server broke the protocol. */
	int (*server_message)(struct session *s, struct leg *leg, const struct observer_message *m);
	/* The show stage: what the client is shown of a leg's answer, on the legs the observer watches
	 * (watches, asked when the leg gets a connection, sets its bit in leg->watchers; NULL: none). */
	bool (*watches)(const struct session *s, const struct leg *leg);
	/* At a server message's type byte, after the type hooks, when their `action` forwards it (never a
	 * hidden answer's): the action to take instead. To show the message its own way (hold it, put
	 * another in its place) the observer drops PROTO_FORWARD, adds PROTO_INSPECT and sets *claims: its
	 * show hook then has the message. Those after it are not asked once the action forwards nothing. */
	unsigned (*show_type)(struct session *s, struct leg *leg, uint8_t type, unsigned action, bool *claims);
	/* The message it claimed, complete, before the readers' message hooks. 0, or -ENOMEM. */
	int (*show)(struct session *s, struct leg *leg, const struct observer_message *m);
	/* Bytes of the leg's answer that reached the client as the server sent them, or in a message's place. */
	void (*shown)(struct session *s, struct leg *leg, const void *data, uint32_t len);
	/* While the leg owes answers to tern's own queries: the action for a server message of any type (0:
	 * dropped unread; the relay reads ReadyForQuery itself). Such messages reach only observers with
	 * this hook, through server_message with is_hidden. */
	unsigned (*hidden_type)(struct session *s, struct leg *leg, uint8_t type);
	/* The leg got a connection: restore there what the observer keeps, ahead of the client's queued
	 * messages (called in registry order, each pushing to the queue's front: the last goes first). 0 or
	 * -ENOMEM. */
	int (*attach)(struct session *s, struct leg *leg);
	/* The leg is idle and about to go back to the pool: true when the observer queued something first
	 * (the release waits for its answer). */
	bool (*before_release)(struct session *s, struct leg *leg);
	/* The session is freed: the observer's state goes. */
	void (*destroy)(struct session *s);
};

/* A CommandComplete whose tag is exactly `tag` ("LISTEN", "DISCARD ALL"). */
static inline bool observer_message_is_tag(const struct observer_message *m, const char *tag)
{
	size_t n = __builtin_strlen(tag) + 1; /* the tag's NUL too */
	return m->len == n && __builtin_memcmp(m->body, tag, n) == 0;
}

extern const struct observer observer_copy;
extern const struct observer observer_stmts;
extern const struct observer observer_params;
extern const struct observer observer_pins;
extern const struct observer observer_stats;
extern const struct observer observer_digest;
extern const struct observer observer_shadow;


#endif
