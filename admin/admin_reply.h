/*
 * admin_reply.h — an admin console answer being built: RowDescription with PgBouncer's column types,
 * DataRows in text format, CommandComplete, NoticeResponse and ErrorResponse, in one growing buffer
 * that the console sends in one piece with its ReadyForQuery.
 *
 * Threads: the building worker's. Ownership: the reply owns its buffer until admin_send (admin.c)
 * takes it. A reply past ADMIN_REPLY_MAX, or one whose allocation failed, is marked overflow and the
 * console ends the session (53200) instead of sending half an answer.
 * Never: sends (admin.c does), reads tern's state (admin_show.c and admin.c fill the rows) or ends a session.
 */
#ifndef TERN_ADMIN_REPLY_H
#define TERN_ADMIN_REPLY_H

#include "base/base.h"

/* One admin answer; the largest (SHOW CLIENTS) is a row of about 250 bytes per client: 64 MiB holds
 * a quarter of a million. */
#define ADMIN_REPLY_MAX (64u * 1024u * 1024u)

/* The type OIDs PgBouncer gives its columns: exporters read integers as integers. */
enum admin_type { ADMIN_TEXT = 25, ADMIN_INT4 = 23, ADMIN_INT8 = 20, ADMIN_NUMERIC = 1700, ADMIN_BYTEA = 17 };

struct admin_column {
	const char *name;
	enum admin_type type;
};

struct admin_reply {
	uint8_t *data;
	size_t len;
	size_t cap;
	bool overflow;
	size_t message_start;
};

void admin_reply_put(struct admin_reply *r, const void *p, size_t n);
void admin_reply_columns(struct admin_reply *r, const struct admin_column *columns, uint16_t count);
/* A row of text values, one per column (NULL: SQL NULL). */
void admin_reply_row(struct admin_reply *r, const char *const *values, uint16_t count);
void admin_reply_complete(struct admin_reply *r, const char *tag);
void admin_reply_notice(struct admin_reply *r, const char *message);
void admin_reply_error(struct admin_reply *r, const char *sqlstate, const char *message, const char *hint);

#endif
