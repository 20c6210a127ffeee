/*
 * observer_stmts_replies.h — what observer_stmts.c asks of the replies the server owes (observer_stmts_replies.c):
 * each leg's queue of the replies owed, in order; the replies tern makes up, sent where the server's would
 * have been; the server's answers matched against the queue (tern's own hidden); and the names DISCARD ALL
 * and DEALLOCATE ALL forget.
 *
 * Threads: the session's worker. Ownership: a leg's reply queue holds the made-up replies' data (taken by
 * stmts_make_reply_for, which frees it on failure) and a reference on the stmt a made ParseComplete is for.
 * Never: included but by observer_stmts*.c (the relay reaches statements through dispatch.c), or rewrites a
 * client message (observer_stmts.c does).
 */
#ifndef TERN_OBSERVER_STMTS_REPLIES_H
#define TERN_OBSERVER_STMTS_REPLIES_H

#include "session.h"

/* A reply tern makes up (enum stmt_reply_kind >= STMT_REPLY_MADE_PARSE_COMPLETE), sent now when nothing is
 * owed before it, else queued behind the server's replies (for stmt: a reference kept). 0 or <0. */
int stmts_make_reply_for(struct session *s, uint8_t kind, void *data, uint32_t len, struct stmt *stmt);
int stmts_make_reply(struct session *s, uint8_t kind, void *data, uint32_t len);
/* One more reply of kind the server owes on leg. 0, or -ENOBUFS past STMT_REPLIES_MAX. */
int stmts_expect(struct leg *leg, uint8_t kind);
/* Nothing of the batch on leg needs a server (Parse and Close tern answered); the Sync tern answers. */
bool stmts_is_local(const struct leg *leg);
void stmts_answer_sync(struct session *s);
/* leg holds a connection that is not being dropped; the session's unnamed statement is stmt (a reference). */
bool stmts_has_backend(const struct leg *leg);
void stmts_set_unnamed(struct session *s, struct stmt *stmt);
/* The server's side: a message's type byte against the head of the reply queue (its action, 0, or
 * OBSERVER_SKIP), the whole message, a COPY IN that leaves ignored_syncs Syncs unanswered. */
unsigned stmts_server_type(struct leg *leg, uint8_t type);
int stmts_on_server_message(struct session *s, struct leg *leg, uint8_t type, const uint8_t *body, uint32_t len);
void stmts_on_copy_in(struct leg *leg, uint32_t ignored_syncs);
/* DISCARD ALL / DEALLOCATE ALL: the names go, from the next request on (ahead) or now; the session's end. */
void stmts_forget_all_ahead(struct session *s);
void stmts_forget_all(struct session *s, struct leg *leg);
void stmts_deinit(struct session *s);

#endif
