#include "admin.h"

#include "worker.h"

#include <signal.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* One admin answer; the largest (SHOW SERVERS) is a row per server connection. */
#define ADMIN_REPLY_MAX (4u * 1024u * 1024u)
/* Admin queries are short commands; a longer message is a mistake, not a command. */
#define ADMIN_MESSAGE_MAX 8192u

struct admin_reply {
	uint8_t *data;
	size_t len;
	size_t cap;
	bool overflow;
	size_t row_start;
};

static void admin_put(struct admin_reply *r, const void *p, size_t n)
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

static void admin_put_u16(struct admin_reply *r, uint16_t v)
{
	uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
	admin_put(r, b, 2);
}

static void admin_put_u32(struct admin_reply *r, uint32_t v)
{
	uint8_t b[4];
	proto_write_u32(b, v);
	admin_put(r, b, 4);
}

static void admin_begin(struct admin_reply *r, uint8_t type)
{
	r->row_start = r->len;
	admin_put(r, &type, 1);
	admin_put_u32(r, 0);
}

static void admin_end(struct admin_reply *r)
{
	if (!r->overflow)
		proto_write_u32(r->data + r->row_start + 1, (uint32_t)(r->len - r->row_start - 1));
}

/* RowDescription of text columns. */
static void admin_columns(struct admin_reply *r, const char *const *names, uint16_t count)
{
	admin_begin(r, PROTO_BE_ROW_DESCRIPTION);
	admin_put_u16(r, count);
	for (uint16_t i = 0; i < count; i++) {
		admin_put(r, names[i], strlen(names[i]) + 1);
		admin_put_u32(r, 0);      /* table */
		admin_put_u16(r, 0);      /* column */
		admin_put_u32(r, 25);     /* text */
		admin_put_u16(r, 0xffff); /* variable length */
		admin_put_u32(r, 0xffffffffu);
		admin_put_u16(r, 0); /* text format */
	}
	admin_end(r);
}

static void admin_row(struct admin_reply *r, const char *const *values, uint16_t count)
{
	admin_begin(r, PROTO_BE_DATA_ROW);
	admin_put_u16(r, count);
	for (uint16_t i = 0; i < count; i++) {
		size_t n = strlen(values[i]);
		admin_put_u32(r, (uint32_t)n);
		admin_put(r, values[i], n);
	}
	admin_end(r);
}

static void admin_complete(struct admin_reply *r, const char *tag)
{
	admin_begin(r, PROTO_BE_COMMAND_COMPLETE);
	admin_put(r, tag, strlen(tag) + 1);
	admin_end(r);
}

static void admin_show_version(struct admin_reply *r)
{
	static const char *const columns[] = {"version"};
	const char *values[] = {"tern " TERN_VERSION};
	admin_columns(r, columns, 1);
	admin_row(r, values, 1);
}

static void admin_show_config(struct admin_reply *r, const struct tern_config *cfg)
{
	static const char *const columns[] = {"key", "value", "default", "changeable"};
	admin_columns(r, columns, 4);
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *section, *key, *default_text;
		char value[512];
		bool reloadable;
		if (config_describe_key(cfg, i, &section, &key, value, sizeof(value), &default_text, &reloadable) < 0)
			continue;
		const char *values[] = {key, value, default_text, reloadable ? "yes" : "no"};
		admin_row(r, values, 4);
	}
}

static void admin_show_pools(struct admin_reply *r, struct tern_runtime *rt)
{
	static const char *const columns[] = {"database", "user",    "cl_active", "cl_waiting", "sv_active",
					      "sv_idle",  "sv_login", "maxwait",   "maxwait_us", "pool_mode"};
	admin_columns(r, columns, 10);
	struct pool *pool = rt->pool;
	uint64_t now = base_now_ns();
	const char *mode = rt->config->pool_mode == CONFIG_POOL_TRANSACTION ? "transaction" : "session";
	pthread_mutex_lock(&pool->dbs_lock);
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &pool->dbs)
	{
		struct pool_db *db = TERN_CONTAINER_OF(node, struct pool_db, link);
		struct pool_server *server = rt->primary;
		pthread_mutex_lock(&server->lock);
		struct pool_slot *slot = &db->slots[server->index];
		uint32_t idle = 0;
		struct base_list *c, *ctmp;
		base_list_for_each_safe(c, ctmp, &slot->free_conns) idle++;
		uint64_t oldest_ns = now;
		base_list_for_each_safe(c, ctmp, &server->waiters)
		{
			struct pool_request *req = TERN_CONTAINER_OF(c, struct pool_request, link);
			if (req->db == db && req->parked_ns < oldest_ns)
				oldest_ns = req->parked_ns;
		}
		uint32_t waiting = slot->waiting_count;
		uint32_t active_servers = slot->open_count - idle;
		uint32_t opening = slot->opening_count;
		pthread_mutex_unlock(&server->lock);
		uint32_t clients = __atomic_load_n(&db->client_count, __ATOMIC_RELAXED);
		char f[7][24];
		snprintf(f[0], sizeof(f[0]), "%u", clients > waiting ? clients - waiting : 0);
		snprintf(f[1], sizeof(f[1]), "%u", waiting);
		snprintf(f[2], sizeof(f[2]), "%u", active_servers);
		snprintf(f[3], sizeof(f[3]), "%u", idle);
		snprintf(f[4], sizeof(f[4]), "%u", opening);
		snprintf(f[5], sizeof(f[5]), "%llu", (unsigned long long)((now - oldest_ns) / BASE_NS_PER_SEC));
		snprintf(f[6], sizeof(f[6]), "%llu",
			 (unsigned long long)((now - oldest_ns) % BASE_NS_PER_SEC / 1000));
		const char *values[] = {db->database, db->user, f[0], f[1], f[2], f[3], f[4], f[5], f[6], mode};
		admin_row(r, values, 10);
	}
	pthread_mutex_unlock(&pool->dbs_lock);
}

static void admin_show_servers(struct admin_reply *r, struct tern_runtime *rt)
{
	static const char *const columns[] = {"type", "user", "database", "state", "connect_time", "remote_pid"};
	admin_columns(r, columns, 6);
	struct pool_server *server = rt->primary;
	uint64_t now = base_now_ns();
	pthread_mutex_lock(&server->lock);
	struct base_list *lists[] = {&server->used_conns, &server->free_conns};
	for (size_t l = 0; l < TERN_ARRAY_LEN(lists); l++) {
		struct base_list *node, *tmp;
		base_list_for_each_safe(node, tmp, lists[l])
		{
			struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
			char age[24], pid[16];
			/* Seconds open, not a wall-clock time: tern keeps monotonic clocks only. */
			snprintf(age, sizeof(age), "%llu", (unsigned long long)((now - conn->opened_ns) / BASE_NS_PER_SEC));
			snprintf(pid, sizeof(pid), "%u", conn->backend_pid);
			const char *values[] = {"S", conn->db->user, conn->db->database, l == 0 ? "active" : "idle",
						age, pid};
			admin_row(r, values, 6);
		}
	}
	pthread_mutex_unlock(&server->lock);
}

/* The command in `sql`, lowercased and without surrounding blanks or a final ';'. */
static void admin_normalize(const char *sql, char *out, size_t size)
{
	while (*sql == ' ' || *sql == '\t' || *sql == '\n' || *sql == '\r')
		sql++;
	size_t n = 0;
	for (; *sql && n + 1 < size; sql++) {
		char c = *sql;
		if (c == '\t' || c == '\n' || c == '\r')
			c = ' ';
		if (c == ' ' && (n == 0 || out[n - 1] == ' '))
			continue;
		out[n++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	while (n > 0 && (out[n - 1] == ' ' || out[n - 1] == ';'))
		n--;
	out[n] = '\0';
}

static void admin_error(struct admin_reply *r, const char *sqlstate, const char *message)
{
	uint8_t msg[512];
	size_t n = proto_build_error(msg, sizeof(msg), "ERROR", sqlstate, message,
				     "The admin console knows SHOW VERSION, SHOW CONFIG, SHOW POOLS, SHOW SERVERS "
				     "and SHUTDOWN.");
	admin_put(r, msg, n);
}

static void admin_on_query(struct session *s, const char *sql)
{
	struct tern_runtime *rt = s->worker->runtime;
	struct admin_reply r = {0};
	char command[64];
	admin_normalize(sql, command, sizeof(command));
	if (strcmp(command, "show version") == 0) {
		admin_show_version(&r);
		admin_complete(&r, "SHOW");
	} else if (strcmp(command, "show config") == 0) {
		admin_show_config(&r, rt->config);
		admin_complete(&r, "SHOW");
	} else if (strcmp(command, "show pools") == 0) {
		admin_show_pools(&r, rt);
		admin_complete(&r, "SHOW");
	} else if (strcmp(command, "show servers") == 0) {
		admin_show_servers(&r, rt);
		admin_complete(&r, "SHOW");
	} else if (strcmp(command, "shutdown") == 0) {
		TERN_INFO("SHUTDOWN from the admin console by %s", s->user);
		kill(getpid(), SIGINT); /* main takes it like any SIGINT: every session ends now */
		admin_complete(&r, "SHUTDOWN");
	} else {
		admin_error(&r, "42601", "unknown admin command");
	}
	uint8_t ready[6];
	admin_put(&r, ready, proto_build_ready(ready, sizeof(ready), 'I'));
	if (r.overflow)
		session_end(s, SESSION_END_OUT_OF_MEMORY);
	else
		session_send_to_client(s, r.data, (uint32_t)r.len);
	free(r.data);
}

bool admin_is_allowed(const struct tern_config *config, const char *user)
{
	const char *list = config->admin_users;
	size_t n = strlen(user);
	while (list && *list) {
		while (*list == ',' || *list == ' ')
			list++;
		size_t len = strcspn(list, ", ");
		if (len == n && strncmp(list, user, n) == 0)
			return true;
		list += len;
	}
	return false;
}

void admin_welcome(struct session *s)
{
	static const char *const params[][2] = {
		{"server_version", "15.0 (tern " TERN_VERSION ")"}, {"client_encoding", "UTF8"},
		{"server_encoding", "UTF8"}, {"DateStyle", "ISO, MDY"}, {"integer_datetimes", "on"},
		{"standard_conforming_strings", "on"}, {"application_name", ""},
	};
	uint8_t msg[256];
	for (size_t i = 0; i < TERN_ARRAY_LEN(params); i++) {
		const char *value = i + 1 == TERN_ARRAY_LEN(params) ? s->application_name : params[i][1];
		size_t n = proto_build_parameter_status(msg, sizeof(msg), params[i][0], value);
		session_send_to_client(s, msg, (uint32_t)n);
	}
	size_t n = proto_build_key_data(msg, sizeof(msg), s->key_pid, s->key_secret);
	session_send_to_client(s, msg, (uint32_t)n);
	n = proto_build_ready(msg, sizeof(msg), 'I');
	session_send_to_client(s, msg, (uint32_t)n);
	s->phase = SESSION_ADMIN; /* login_buf stays: it assembles the admin queries */
}

void admin_on_bytes(struct session *s, const uint8_t *data, uint32_t len)
{
	if (s->login_len + len > ADMIN_MESSAGE_MAX || !s->login_buf) {
		session_end(s, SESSION_END_PROTOCOL_VIOLATION);
		return;
	}
	if (s->login_len + len > s->login_cap) {
		uint8_t *grown = realloc(s->login_buf, ADMIN_MESSAGE_MAX);
		if (!grown) {
			session_end(s, SESSION_END_OUT_OF_MEMORY);
			return;
		}
		s->login_buf = grown;
		s->login_cap = ADMIN_MESSAGE_MAX;
	}
	memcpy(s->login_buf + s->login_len, data, len);
	s->login_len += len;
	while (s->phase == SESSION_ADMIN && s->login_len >= PROTO_HEADER_LEN) {
		uint8_t type = s->login_buf[0];
		uint32_t length = proto_read_u32(s->login_buf + 1);
		if (length < 4 || length + 1 > ADMIN_MESSAGE_MAX) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		}
		if (s->login_len < length + 1)
			return;
		if (type == PROTO_FE_TERMINATE) {
			session_end(s, SESSION_END_CLIENT_TERMINATE);
			return;
		}
		if (type == PROTO_FE_QUERY && s->login_buf[length] == '\0') {
			admin_on_query(s, (const char *)s->login_buf + PROTO_HEADER_LEN);
		} else if (type == PROTO_FE_SYNC) {
			struct admin_reply r = {0};
			admin_error(&r, "0A000", "the admin console answers simple queries only");
			uint8_t ready[6];
			admin_put(&r, ready, proto_build_ready(ready, sizeof(ready), 'I'));
			if (!r.overflow)
				session_send_to_client(s, r.data, (uint32_t)r.len);
			free(r.data);
		} else if (type == PROTO_FE_QUERY) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		} /* other extended-protocol messages wait for their Sync, which answers for them */
		memmove(s->login_buf, s->login_buf + length + 1, s->login_len - length - 1);
		s->login_len -= length + 1;
	}
}
