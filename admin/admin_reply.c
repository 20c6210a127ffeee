/*
 * admin_reply.c — the message builder of admin_reply.h.
 */
#include "admin_reply.h"

#include "proto.h"

#include <stdlib.h>
#include <string.h>

void admin_reply_put(struct admin_reply *r, const void *p, size_t n)
{
	if (r->overflow || r->len + n > ADMIN_REPLY_MAX) {
		r->overflow = true;
		return;
	}
	if (r->len + n > r->cap) {
		size_t cap = TERN_MAX(r->cap * 2, (size_t)4096);
		while (cap < r->len + n)
			cap *= 2;
		uint8_t *grown = realloc(r->data, cap);
		if (!grown) {
			r->overflow = true;
			return;
		}
		r->data = grown;
		r->cap = cap;
	}
	memcpy(r->data + r->len, p, n);
	r->len += n;
}

static void admin_reply_u16(struct admin_reply *r, uint16_t v)
{
	uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
	admin_reply_put(r, b, 2);
}

static void admin_reply_u32(struct admin_reply *r, uint32_t v)
{
	uint8_t b[4];
	proto_write_u32(b, v);
	admin_reply_put(r, b, 4);
}

static void admin_reply_begin(struct admin_reply *r, uint8_t type)
{
	r->message_start = r->len;
	admin_reply_put(r, &type, 1);
	admin_reply_u32(r, 0);
}

static void admin_reply_end(struct admin_reply *r)
{
	if (!r->overflow)
		proto_write_u32(r->data + r->message_start + 1, (uint32_t)(r->len - r->message_start - 1));
}

void admin_reply_columns(struct admin_reply *r, const struct admin_column *columns, uint16_t count)
{
	admin_reply_begin(r, PROTO_BE_ROW_DESCRIPTION);
	admin_reply_u16(r, count);
	for (uint16_t i = 0; i < count; i++) {
		admin_reply_put(r, columns[i].name, strlen(columns[i].name) + 1);
		admin_reply_u32(r, 0); /* table */
		admin_reply_u16(r, 0); /* column */
		admin_reply_u32(r, columns[i].type);
		int16_t size = columns[i].type == ADMIN_INT4 ? 4 : columns[i].type == ADMIN_INT8 ? 8 : -1;
		admin_reply_u16(r, (uint16_t)size);
		admin_reply_u32(r, 0xffffffffu); /* no type modifier */
		admin_reply_u16(r, 0);           /* text format */
	}
	admin_reply_end(r);
}

void admin_reply_row(struct admin_reply *r, const char *const *values, uint16_t count)
{
	admin_reply_begin(r, PROTO_BE_DATA_ROW);
	admin_reply_u16(r, count);
	for (uint16_t i = 0; i < count; i++) {
		if (!values[i]) {
			admin_reply_u32(r, 0xffffffffu);
			continue;
		}
		size_t n = strlen(values[i]);
		admin_reply_u32(r, (uint32_t)n);
		admin_reply_put(r, values[i], n);
	}
	admin_reply_end(r);
}

void admin_reply_complete(struct admin_reply *r, const char *tag)
{
	admin_reply_begin(r, PROTO_BE_COMMAND_COMPLETE);
	admin_reply_put(r, tag, strlen(tag) + 1);
	admin_reply_end(r);
}

void admin_reply_notice(struct admin_reply *r, const char *message)
{
	admin_reply_begin(r, 'N');
	static const char severity[] = "SNOTICE";
	static const char code[] = "C00000";
	admin_reply_put(r, severity, sizeof(severity));
	admin_reply_put(r, "V", 1);
	admin_reply_put(r, "NOTICE", 7);
	admin_reply_put(r, code, sizeof(code));
	admin_reply_put(r, "M", 1);
	admin_reply_put(r, message, strlen(message) + 1);
	admin_reply_put(r, "", 1);
	admin_reply_end(r);
}

void admin_reply_error(struct admin_reply *r, const char *sqlstate, const char *message, const char *hint)
{
	uint8_t msg[512];
	size_t n = proto_build_error(msg, sizeof(msg), "ERROR", sqlstate, message, hint);
	admin_reply_put(r, msg, n);
}
