/* Routing's own session parameters, tern.consistency and tern.transaction_split: their names and values,
 * SET, RESET and SHOW of them answered by tern (never a server's). Owns s->routing->settings; never
 * routes anything. */
#include "route_setting.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const route_level_names[] = {"primary", "eventual", "session", "strict", NULL};
/* (false and true are on and off's synonyms: the index modulo 2) */
static const char *const route_switch_names[] = {"off", "on", "false", "true", NULL};

/* tern's own settings, by enum route_setting: SET, RESET and SHOW of them are answered by tern. */
static const struct {
	const char *name;
	const char *const *values;
	uint32_t distinct; /* values[i] means i % distinct */
	const char *hint;
} route_settings[ROUTE_SETTING_COUNT] = {
	[ROUTE_SETTING_CONSISTENCY] = {"tern.consistency", route_level_names, 4,
				       "Available values: primary, eventual, session, strict, default."},
	[ROUTE_SETTING_SPLIT] = {"tern.transaction_split", route_switch_names, 2, "Available values: off, on, default."},
};

/* The value of setting `id` that `word` names (any case), or -1. */
static int route_value_of(enum route_setting id, const char *word, size_t len)
{
	const char *const *values = route_settings[id].values;
	for (int i = 0; values[i]; i++)
		if (strlen(values[i]) == len && strncasecmp(word, values[i], len) == 0)
			return i % (int)route_settings[id].distinct;
	return -1;
}

int route_setting_from_name(const char *name, size_t len)
{
	for (int i = 0; i < ROUTE_SETTING_COUNT; i++)
		if (strlen(route_settings[i].name) == len && strncasecmp(name, route_settings[i].name, len) == 0)
			return i;
	return -1;
}

int route_setting_take(struct session *s, enum route_setting id, const char *value)
{
	int v = route_value_of(id, value, strlen(value));
	if (v < 0)
		return -1;
	s->routing->settings[id] = (uint8_t)v;
	s->routing->settings_set |= 1u << id;
	return 0;
}

const char *route_setting_hint(enum route_setting id) { return route_settings[id].hint; }

/* The client's value of setting id, or the configuration's default of the moment. */
int route_setting(const struct session *s, const struct tern_config *cfg, enum route_setting id)
{
	if (s->routing->settings_set & (1u << id))
		return s->routing->settings[id];
	return id == ROUTE_SETTING_CONSISTENCY ? cfg->default_consistency : cfg->transaction_split;
}

enum config_consistency route_level(const struct session *s, const struct tern_config *cfg)
{
	return (enum config_consistency)route_setting(s, cfg, ROUTE_SETTING_CONSISTENCY);
}

/* ---- tern.consistency and tern.transaction_split: SET, RESET, SHOW, answered here ---- */

static const char *route_skip_space(const char *p)
{
	while (isspace((unsigned char)*p))
		p++;
	return p;
}

/* The keyword at *p (case-insensitive, not followed by an identifier character): true and *p past it. */
static bool route_keyword(const char **p, const char *word)
{
	size_t n = strlen(word);
	if (strncasecmp(*p, word, n) != 0 || isalnum((unsigned char)(*p)[n]) || (*p)[n] == '_' || (*p)[n] == '.')
		return false;
	*p = route_skip_space(*p + n);
	return true;
}

/* The end of a statement: blanks, one optional ';', blanks. */
static bool route_is_end(const char *p)
{
	p = route_skip_space(p);
	if (*p == ';')
		p = route_skip_space(p + 1);
	return *p == '\0';
}

void route_send_ready(struct session *s)
{
	const struct leg *leg = session_client_leg(s);
	uint8_t msg[8];
	size_t n = proto_build_ready(msg, sizeof(msg), leg->conn ? leg->tx_status : 'I');
	session_send_to_client(s, msg, (uint32_t)n);
}

static void route_send_complete(struct session *s, const char *tag)
{
	uint8_t msg[32] = {PROTO_BE_COMMAND_COMPLETE};
	uint32_t n = (uint32_t)strlen(tag) + 1;
	proto_write_u32(msg + 1, 4 + n);
	memcpy(msg + PROTO_HEADER_LEN, tag, n);
	session_send_to_client(s, msg, PROTO_HEADER_LEN + n);
}

/* SHOW's one text column and row. */
static void route_send_show(struct session *s, const char *name, const char *value)
{
	uint8_t msg[128];
	uint8_t *p = msg + PROTO_HEADER_LEN;
	size_t name_size = strlen(name) + 1;
	*p++ = 0;
	*p++ = 1;
	memcpy(p, name, name_size);
	p += name_size;
	static const uint8_t attrs[18] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 25, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0};
	memcpy(p, attrs, sizeof(attrs)); /* table 0, column 0, type text (25), length -1, modifier -1, text */
	p += sizeof(attrs);
	msg[0] = PROTO_BE_ROW_DESCRIPTION;
	proto_write_u32(msg + 1, (uint32_t)(p - msg - 1));
	session_send_to_client(s, msg, (uint32_t)(p - msg));
	uint32_t n = (uint32_t)strlen(value);
	msg[0] = PROTO_BE_DATA_ROW;
	proto_write_u32(msg + 1, 4 + 2 + 4 + n);
	msg[5] = 0;
	msg[6] = 1;
	proto_write_u32(msg + 7, n);
	memcpy(msg + 11, value, n);
	session_send_to_client(s, msg, 11 + n);
	route_send_complete(s, "SHOW");
}

/* The value of SET tern.x {TO|=} value: one of the setting's names, bare or quoted, or DEFAULT (-1). -2
 * when it is none of them; *end past it. */
static int route_parse_value(enum route_setting id, const char *p, const char **end)
{
	bool quoted = *p == '\'';
	if (quoted)
		p++;
	const char *word = p;
	while (isalpha((unsigned char)*p) || *p == '_')
		p++;
	size_t len = (size_t)(p - word);
	if (quoted && *p++ != '\'')
		return -2;
	*end = p;
	if (!quoted && len == 7 && strncasecmp(word, "default", len) == 0)
		return -1;
	int value = route_value_of(id, word, len);
	return value >= 0 ? value : -2;
}

/* Refuses the statement (an ErrorResponse, then ReadyForQuery). */
static void route_refuse(struct session *s, const char *sqlstate, const char *message, const char *hint)
{
	session_send_error(s, "ERROR", sqlstate, message, hint);
	route_send_ready(s);
}

/* Answers a SET/RESET/SHOW of a tern.* name (the client has nothing in flight). */
void route_answer_setting(struct session *s, const char *sql)
{
	const struct tern_config *cfg = runtime_config(s->host->runtime);
	const char *p = route_skip_space(sql);
	bool is_show = route_keyword(&p, "show"), is_reset = !is_show && route_keyword(&p, "reset");
	if (!is_show && !is_reset) {
		(void)route_keyword(&p, "set");
		if (route_keyword(&p, "local")) {
			route_refuse(s, "0A000", "SET LOCAL of a tern.* parameter is not supported",
				     "tern's parameters hold for the session: SET them, and SET them back");
			return;
		}
		(void)route_keyword(&p, "session");
	}
	size_t name_len = strcspn(p, " \t\r\n;=");
	int id = route_setting_from_name(p, name_len);
	if (id < 0) {
		char message[128];
		snprintf(message, sizeof(message), "unrecognized configuration parameter \"%.*s\"",
			 (int)TERN_MIN(name_len, 64u), p);
		route_refuse(s, "42704", message, "tern's own parameters: tern.consistency, tern.transaction_split");
		return;
	}
	const char *name = route_settings[id].name;
	p = route_skip_space(p + name_len);
	int value = -1;
	if (!is_show && !is_reset) {
		if (*p == '=')
			p = route_skip_space(p + 1);
		else if (!route_keyword(&p, "to"))
			p = "?"; /* refused below */
		value = route_parse_value((enum route_setting)id, p, &p);
		if (value == -2) {
			char message[96];
			snprintf(message, sizeof(message), "invalid value for parameter \"%s\"", name);
			route_refuse(s, "22023", message, route_settings[id].hint);
			return;
		}
	}
	if (!route_is_end(p)) {
		char message[96];
		snprintf(message, sizeof(message), "%s must be set, reset or shown in a query of its own", name);
		route_refuse(s, "0A000", message, NULL);
		return;
	}
	if (is_show) {
		route_send_show(s, name, route_settings[id].values[route_setting(s, cfg, (enum route_setting)id)]);
	} else {
		if (value >= 0)
			s->routing->settings_set |= 1u << id;
		else
			s->routing->settings_set &= ~(1u << id);
		s->routing->settings[id] = (uint8_t)(value >= 0 ? value : 0);
		route_send_complete(s, is_reset ? "RESET" : "SET");
	}
	route_send_ready(s);
}

/* SET, RESET or SHOW followed by a tern.* name: tern's, never a server's. */
bool route_is_setting(const char *sql)
{
	const char *p = route_skip_space(sql);
	if (!route_keyword(&p, "set") && !route_keyword(&p, "reset") && !route_keyword(&p, "show"))
		return false;
	if (!route_keyword(&p, "session"))
		(void)route_keyword(&p, "local");
	return strncasecmp(p, "tern.", 5) == 0;
}
