/* The login half of a session: startup packet, SSLRequest (TLS) and GSS refusal, authentication and
 * the welcome. */
#include "auth.h"
#include "auth_query.h"
#include "databases.h"
#include "dispatch.h"
#include "scram.h"
#include "server_auth.h"
#include "session.h"
#include "host.h"

#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

/* Startup plus auth messages assembled at once; SCRAM's largest (client-final) is under 1 KiB. */
#define LOGIN_BUF_MAX (PROTO_STARTUP_LEN_MAX + 2048u)
/* The startup "options" string tern passes on, with the client's other parameters as -c flags. */
#define LOGIN_OPTIONS_MAX 4096u

static const char *const login_not_forwarded[] = {"user", "database", "options", "application_name",
						  "replication"};

static void login_random(void *out, size_t len)
{
	uint8_t *p = out;
	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);
		if (n <= 0)
			continue; /* only EINTR is possible for requests this small */
		p += n;
		len -= (size_t)n;
	}
}

static bool login_is_forwarded(const char *name)
{
	for (size_t i = 0; i < TERN_ARRAY_LEN(login_not_forwarded); i++)
		if (strcmp(name, login_not_forwarded[i]) == 0)
			return false;
	return strncmp(name, "_pq_.", 5) != 0;
}

/* Appends " -c name=value", escaping spaces and backslashes the way the server's options parser
 * reads them. False when it does not fit. */
static bool login_append_option(char *out, size_t cap, size_t *len, const char *name, const char *value)
{
	const char *parts[] = {" -c ", name, "=", value};
	for (size_t i = 0; i < TERN_ARRAY_LEN(parts); i++) {
		for (const char *c = parts[i]; *c; c++) {
			bool escape = i >= 1 && (*c == ' ' || *c == '\\');
			if (*len + 2 + escape >= cap)
				return false;
			if (escape)
				out[(*len)++] = '\\';
			out[(*len)++] = *c;
		}
	}
	out[*len] = '\0';
	return true;
}

/* One token of a startup options string (blank-separated, a backslash escapes the next character):
 * its raw span [*start, returned) and, unescaped, `text`. NULL at the end. */
static const char *login_option_token(const char *p, const char **start, char *text, size_t cap)
{
	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p)
		return NULL;
	*start = p;
	size_t n = 0;
	while (*p && *p != ' ' && *p != '\t') {
		if (*p == '\\' && p[1])
			p++;
		if (n + 1 < cap)
			text[n++] = *p;
		p++;
	}
	text[n] = '\0';
	return p;
}

/* A tern.* setting "name=value" from the client's startup: one of tern's parameters (route.h) is the
 * client's own; any other tern.* name is refused. False when the session ended. */
static bool login_take_tern_setting(struct session *s, const char *setting)
{
	const char *eq = strchr(setting, '=');
	const char *value = eq ? eq + 1 : "";
	size_t name_len = eq ? (size_t)(eq - setting) : strlen(setting);
	const char *hint = "";
	int rc = s->parts->route.take_setting(s, setting, name_len, value, &hint);
	if (rc == -ENOENT) {
		session_end_with_error(s, SESSION_END_PROTOCOL_VIOLATION, "42704",
				       "unrecognized configuration parameter in the startup options: tern's own "
				       "parameters are tern.consistency and tern.transaction_split");
		return false;
	}
	if (rc < 0) {
		char message[160];
		snprintf(message, sizeof(message), "invalid value for parameter \"%.*s\": %s", (int)name_len, setting,
			 hint);
		session_end_with_error(s, SESSION_END_PROTOCOL_VIOLATION, "22023", message);
		return false;
	}
	return true;
}

/* The client's options without its tern.* settings (-c tern.x=v, -ctern.x=v, --tern.x=v), which are
 * tern's and never reach a server: taken by login_take_tern_setting when `take`. False when the options
 * do not fit in out, or the session ended. */
static bool login_split_options(struct session *s, const char *options, bool take, char *out, size_t cap)
{
	size_t len = 0;
	char text[256], next_text[256];
	const char *start, *next_start;
	const char *p = options;
	out[0] = '\0';
	while ((p = login_option_token(p, &start, text, sizeof(text))) != NULL) {
		const char *setting = NULL;
		const char *end = p;
		if (strcmp(text, "-c") == 0) {
			const char *q = login_option_token(p, &next_start, next_text, sizeof(next_text));
			if (q && strncasecmp(next_text, "tern.", 5) == 0) {
				setting = next_text;
				p = q;
			}
		} else if (strncasecmp(text, "-ctern.", 7) == 0) {
			setting = text + 2;
		} else if (strncasecmp(text, "--tern.", 7) == 0) {
			setting = text + 2;
		}
		if (setting) {
			if (take && !login_take_tern_setting(s, setting))
				return false;
			continue;
		}
		size_t n = (size_t)(end - start);
		if (len + n + 2 > cap)
			return false;
		if (len > 0)
			out[len++] = ' ';
		memcpy(out + len, start, n);
		len += n;
		out[len] = '\0';
	}
	return true;
}

/* The connection key's options: the client's own options, then every other startup parameter as a
 * -c flag in name order, so two clients asking for the same settings share connections and a client
 * never gets a connection set up differently from what it asked. In transaction pooling the tracked
 * parameters are left out: they become the client's values, set on whichever connection it lands. */
static bool login_build_options(struct session *s, const struct proto_startup *st, char *out, size_t cap)
{
	const struct tern_runtime *rt = s->host->runtime;
	bool track = s->is_transaction_pooling;
	size_t len = 0;
	out[0] = '\0';
	const char *options = proto_startup_get(st, "options");
	if (options) {
		if (!login_split_options(s, options, !s->login->is_options_taken, out, cap))
			return false;
		len = strlen(out);
	}
	uint32_t order[PROTO_STARTUP_PARAMS_MAX];
	uint32_t n = 0;
	for (uint32_t i = 0; i < st->param_count; i++) {
		if (strncasecmp(st->names[i], "tern.", 5) == 0) { /* tern's own, as a startup parameter */
			char setting[256];
			snprintf(setting, sizeof(setting), "%s=%s", st->names[i], st->values[i]);
			if (!s->login->is_options_taken && !login_take_tern_setting(s, setting))
				return false;
			continue;
		}
		if (!login_is_forwarded(st->names[i]))
			continue;
		int tracked = track ? params_tracked_index(&rt->tracked, st->names[i]) : -1;
		if (tracked >= 0 && strlen(st->values[i]) < PARAMS_VALUE_MAX) {
			params_set_client_value(&s->params, tracked, st->values[i]);
			continue;
		}
		uint32_t j = n++;
		while (j > 0 && strcmp(st->names[order[j - 1]], st->names[i]) > 0) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
	for (uint32_t k = 0; k < n; k++)
		if (!login_append_option(out, cap, &len, st->names[order[k]], st->values[order[k]]))
			return false;
	s->login->is_options_taken = true;
	return true;
}

static void login_send_auth(struct session *s, uint32_t code, const void *data, size_t len)
{
	uint8_t msg[512];
	size_t n = proto_build_auth(msg, sizeof(msg), code, data, len);
	TERN_ASSERT(n > 0);
	session_send_to_client(s, msg, (uint32_t)n);
}

static void login_send_welcome(struct session *s, const struct pool_param *params, uint32_t count)
{
	const struct params_tracked *tracked = &s->host->runtime->tracked;
	uint8_t msg[512];
	for (uint32_t i = 0; i < count; i++) {
		const char *value = params[i].value;
		/* What the client asked for, as the server would have reported it. */
		int t = params_tracked_index(tracked, params[i].name);
		if (t >= 0 && (s->params.values.is_set & (1u << t)))
			value = s->params.values.value[t];
		else if (strcmp(params[i].name, "application_name") == 0)
			value = s->application_name;
		/* What the welcome says is what the client believes: keep it, so another client's SET on a
		 * shared connection is undone before this one runs there. */
		if (t >= 0 && strlen(value) < PARAMS_VALUE_MAX)
			params_set_client_value(&s->params, t, value);
		size_t n = proto_build_parameter_status(msg, sizeof(msg), params[i].name, value);
		if (n > 0)
			session_send_to_client(s, msg, (uint32_t)n);
	}
	size_t n = proto_build_key_data(msg, sizeof(msg), s->key.pid, s->key.secret, s->key.len);
	session_send_to_client(s, msg, (uint32_t)n);
	n = proto_build_ready(msg, sizeof(msg), 'I');
	session_send_to_client(s, msg, (uint32_t)n);
	session_set_phase(s, SESSION_READY);
	s->is_counted = true;
	__atomic_add_fetch(&s->db->client_count, 1, __ATOMIC_RELAXED);
	session_login_free(s);
}

/* The client's user as tern knows it: auth_file's entry, or what auth_query found for this login; NULL
 * when neither knows it. */
static const struct auth_user *login_user_entry(const struct session *s)
{
	if (s->login->looked_up)
		return s->login->looked_up;
	const struct auth_file *auth = __atomic_load_n(&s->host->runtime->auth_file, __ATOMIC_ACQUIRE); /* SIGHUP swaps it */
	return auth ? auth_file_find(auth, s->user) : NULL;
}

/* The database on the server: the [databases] entry's dbname, else the name the client asked for. */
static const char *login_server_database(const struct session *s)
{
	return s->db_entry && s->db_entry->dbname[0] ? s->db_entry->dbname : s->database;
}

/* The pool key of an authenticated client (options: login_build_options'). False when the session ended.
 * A [databases] entry with a user logs every client in as that user, with the entry's password or the
 * user's plaintext in auth_file. */
static bool login_take_db(struct session *s, const char *options)
{
	const struct tern_runtime *rt = s->host->runtime;
	const struct database_entry *route = s->db_entry;
	bool is_forced = route && route->user[0];
	const struct auth_user *entry = NULL;
	if (is_forced) {
		const struct auth_file *auth = __atomic_load_n(&rt->auth_file, __ATOMIC_ACQUIRE);
		entry = auth ? auth_file_find(auth, route->user) : NULL;
	} else {
		entry = login_user_entry(s);
	}
	const char *server_password = entry && entry->kind == AUTH_SECRET_PLAIN ? entry->secret : NULL;
	if (is_forced && route->password)
		server_password = route->password;
	s->db = pool_db_get(rt->pool, is_forced ? route->user : s->user, login_server_database(s), options,
			    server_password, s->login->identity_hash);
	if (!s->db) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return false;
	}
	const struct user_entry *user = databases_find_user(runtime_config(rt)->databases, s->db->user);
	struct pool_overrides overrides = {
		.pool_size = route ? route->pool_size : 0,
		.reserve_pool_size = route ? route->reserve_pool_size : 0,
		.max_db_connections = route ? route->max_db_connections : 0,
		.max_user_connections = user ? user->max_user_connections : 0,
	};
	pool_db_set_overrides(s->db, &overrides);
	struct server_auth_secret secret;
	/* A forced user has no proof of the client's to log in with: its plaintext, or libpq's own. */
	if (entry && !is_forced && server_auth_secret_from(entry, s->login->scram, &secret)) {
		pool_db_set_secret(rt->pool, s->db, &secret, sizeof(secret));
		s->parts->route.learn_key(rt, &secret); /* the monitor may need this user's key too */
		explicit_bzero(&secret, sizeof(secret));
	}
	return true;
}

static void login_drop_scram(struct session *s)
{
	if (s->login->scram) {
		scram_server_deinit(s->login->scram);
		free(s->login->scram);
		s->login->scram = NULL;
	}
}

static void login_complete(struct session *s)
{
	login_send_auth(s, PROTO_AUTH_OK, NULL, 0);
	if (s->is_admin) {
		login_drop_scram(s);
		s->host->runtime->console->welcome(s);
		return;
	}
	if (!s->db) { /* the startup packet kept at the front of login->buf, checked at startup */
		struct proto_startup st;
		char options[LOGIN_OPTIONS_MAX];
		/* (kept by every login that did not make its key at its startup packet: login_on_startup read the
		 * mode once, and passed it on) */
		TERN_ASSERT(s->login->kept >= 8);
		if (proto_startup_parse(s->login->buf + 4, s->login->kept - 4, &st) < 0 ||
		    !login_build_options(s, &st, options, sizeof(options))) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		}
		if (!login_take_db(s, options)) /* keeps what the SCRAM exchange proved */
			return;
	}
	login_drop_scram(s);
	session_set_phase(s, SESSION_LOGIN_WAIT);
	s->observers_on = dispatch_observers_for(s);
	if (s->is_transaction_pooling && pool_db_has_params(s->db)) {
		login_send_welcome(s, s->db->params, s->db->param_count);
		return;
	}
	/* Session pooling welcomes with the connection's own parameters; a key never seen before needs a
	 * server to learn them (and to hear the server's verdict on the user and database). */
	session_acquire(s, session_primary(s));
}

void session_login_on_backend(struct session *s)
{
	const struct pool_conn *conn = session_primary(s)->conn;
	TERN_ASSERT(s->phase == SESSION_LOGIN_WAIT && conn);
	login_send_welcome(s, conn->params, conn->param_count);
}

/* Asks auth_query for the secret of a user auth_file does not know; the login goes on in
 * session_login_on_lookup. */
static void login_look_up(struct session *s)
{
	struct auth_lookup *lookup = calloc(1, sizeof(*lookup));
	if (!lookup) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	base_strlcpy(lookup->user, s->user, sizeof(lookup->user));
	base_strlcpy(lookup->database, login_server_database(s), sizeof(lookup->database));
	lookup->owner = s;
	lookup->done = s->host->ops->lookup_done;
	lookup->done_ctx = s->host;
	if (auth_query_post(s->host->runtime->auth_query, lookup) < 0) {
		free(lookup);
		session_end_with_error(s, SESSION_END_SERVER_REFUSED, "53300",
				       "too many logins are waiting for auth_query");
		return;
	}
	s->lookup = lookup;
}

/* `mode` is [auth] mode as the login read it at its startup packet (a reload in between changes nothing
 * of this login: what it kept of the startup packet depends on it). */
static void login_begin_auth(struct session *s, int mode)
{
	const struct tern_runtime *rt = s->host->runtime;
	const struct auth_user *user = login_user_entry(s);
	const struct tern_config *config = runtime_config(rt);
	if (mode == CONFIG_AUTH_TRUST) {
		login_complete(s);
		return;
	}
	if (mode == CONFIG_AUTH_CERT) { /* the admin console's login (a pool's checked it at its startup packet) */
		if (session_tls_certificate_names_user(s))
			login_complete(s);
		return;
	}
	session_set_phase(s, SESSION_AUTH);
	if (!user && !s->login->is_lookup_done && config->auth_user[0] && rt->auth_query && !s->is_admin) {
		login_look_up(s);
		return;
	}
	/* A user whose only secret is SCRAM cannot answer md5; PostgreSQL upgrades such users too. */
	if (mode == CONFIG_AUTH_MD5 && !(user && user->kind == AUTH_SECRET_SCRAM)) {
		login_random(s->login->md5_salt, sizeof(s->login->md5_salt));
		login_send_auth(s, PROTO_AUTH_MD5, s->login->md5_salt, sizeof(s->login->md5_salt));
		return;
	}
	s->login->scram = calloc(1, sizeof(*s->login->scram));
	if (!s->login->scram) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	struct scram_secret mock;
	const struct scram_secret *secret = NULL;
	if (user && user->scram.iterations > 0)
		secret = &user->scram;
	else if (scram_secret_mock(s->user, &mock) == 0)
		secret = &mock;
	if (scram_server_begin(s->login->scram, secret, NULL) < 0) {
		session_end(s, SESSION_END_OUT_OF_MEMORY);
		return;
	}
	/* Over TLS, SCRAM-SHA-256-PLUS binds the proof to tern's certificate (tls-server-end-point); a
	 * certificate whose signature has no separate hash (Ed25519) gives no binding data, and libpq then
	 * refuses PLUS, so it is not offered. Each list ends with an empty name. */
	static const char plain[] = "SCRAM-SHA-256\0";
	static const char plus[] = "SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0";
	const uint8_t *binding;
	size_t binding_len = session_tls_channel_binding(s, &binding);
	if (binding_len > 0 && binding_len <= SCRAM_CHANNEL_BINDING_MAX) {
		scram_server_set_channel_binding(s->login->scram, binding, binding_len);
		login_send_auth(s, PROTO_AUTH_SASL, plus, sizeof(plus));
	} else {
		login_send_auth(s, PROTO_AUTH_SASL, plain, sizeof(plain));
	}
}

/* The protocol version tern speaks with a client that asked for `code`: 3.2 (PostgreSQL 18's, with long
 * cancel keys) to one that asked for 3.2 or newer, else 3.0 (3.1 was never a version). */
static uint32_t login_protocol_version(uint32_t code)
{
	return (code & 0xffff) >= 2 ? PROTO_VERSION_3_2 : PROTO_VERSION_3_0;
}

/* NegotiateProtocolVersion, as PostgreSQL words it: the newest version tern speaks that is not newer
 * than the one asked for, as its full code (libpq 18 and later read a bare minor number as a downgrade
 * to before 3.0), and every _pq_.* option named back, since tern knows no protocol extensions. */
static void login_negotiate_version(struct session *s, const struct proto_startup *st)
{
	uint8_t msg[1024];
	size_t len = PROTO_HEADER_LEN + 8;
	uint32_t unknown = 0;
	for (uint32_t i = 0; i < st->param_count; i++) {
		size_t n = strlen(st->names[i]) + 1;
		if (strncmp(st->names[i], "_pq_.", 5) != 0 || len + n > sizeof(msg))
			continue;
		memcpy(msg + len, st->names[i], n);
		len += n;
		unknown++;
	}
	msg[0] = PROTO_BE_NEGOTIATE_VERSION;
	proto_write_u32(msg + 1, (uint32_t)len - 1);
	proto_write_u32(msg + 5, login_protocol_version(st->code));
	proto_write_u32(msg + 9, unknown);
	session_send_to_client(s, msg, (uint32_t)len);
}

/* A version tern does not speak as asked, or options it does not know: the client must be told. */
static bool login_needs_negotiation(const struct proto_startup *st)
{
	if (st->code != login_protocol_version(st->code))
		return true;
	for (uint32_t i = 0; i < st->param_count; i++)
		if (strncmp(st->names[i], "_pq_.", 5) == 0)
			return true;
	return false;
}

static void login_on_startup(struct session *s, const struct proto_startup *st)
{
	struct tern_runtime *rt = s->host->runtime;
	const char *user = proto_startup_get(st, "user");
	const char *database = proto_startup_get(st, "database");
	const char *application_name = proto_startup_get(st, "application_name");
	if (!user || !user[0] || strlen(user) >= sizeof(s->user)) {
		session_end_with_error(s, SESSION_END_PROTOCOL_VIOLATION, "28000",
				       "no valid PostgreSQL user name specified in startup packet");
		return;
	}
	if (proto_startup_get(st, "replication")) {
		session_end_with_error(s, SESSION_END_PROTOCOL_VIOLATION, "0A000",
				       "replication connections are not supported by tern");
		return;
	}
	if (!database || !database[0])
		database = user;
	if (strlen(database) >= sizeof(s->database)) {
		session_end(s, SESSION_END_PROTOCOL_VIOLATION);
		return;
	}
	if (s->is_over_client_limit) {
		session_end(s, SESSION_END_TOO_MANY_CLIENTS);
		return;
	}
	base_strlcpy(s->user, user, sizeof(s->user));
	base_strlcpy(s->database, database, sizeof(s->database));
	base_strlcpy(s->application_name, application_name ? application_name : "", sizeof(s->application_name));
	if (login_needs_negotiation(st))
		login_negotiate_version(s, st);
	if (login_protocol_version(st->code) == PROTO_VERSION_3_2)
		s->key.len = SESSION_CANCEL_KEY_LEN; /* 3.2's long key */
	const struct session_console *console = rt->console;
	bool is_console = console && (strcmp(s->database, console->database) == 0 ||
				      (console->alias && strcmp(s->database, console->alias) == 0));
	const struct tern_config *config = runtime_config(rt);
	if (!is_console && gates_is_disabled(&rt->gates, s->database)) {
		session_end(s, SESSION_END_DATABASE_DISABLED);
		return;
	}
	if (!is_console && databases_is_routing(config->databases)) {
		s->db_entry = databases_find(config->databases, s->database);
		if (!s->db_entry) {
			session_end(s, SESSION_END_UNKNOWN_DATABASE);
			return;
		}
		for (uint32_t i = 0; s->db_entry->server[0] && i < rt->pool->server_count; i++)
			if (strcmp(rt->pool->servers[i].name, s->db_entry->server) == 0)
				s->pinned_server = &rt->pool->servers[i];
	}
	/* The pool mode: the database's, else the user's, else [tern] pool_mode. */
	const struct user_entry *user_entry = databases_find_user(config->databases, s->user);
	int pool_mode = s->db_entry && s->db_entry->pool_mode >= 0	  ? s->db_entry->pool_mode
			: user_entry && user_entry->pool_mode >= 0 ? user_entry->pool_mode
								   : config->pool_mode;
	s->is_transaction_pooling = pool_mode == CONFIG_POOL_TRANSACTION;
	char options[LOGIN_OPTIONS_MAX];
	if (s->application_name[0] && s->is_transaction_pooling) {
		int i = params_tracked_index(&rt->tracked, "application_name");
		params_set_client_value(&s->params, i, s->application_name);
	}
	if (!login_build_options(s, st, options, sizeof(options))) {
		if (s->phase != SESSION_CLOSING) /* else a tern.* setting was refused */
			session_end_with_error(s, SESSION_END_PROTOCOL_VIOLATION, "54000", "startup parameters too long");
		return;
	}
	if (is_console) {
		if (!console->is_allowed(runtime_config(rt), s->user)) {
			session_end(s, SESSION_END_ADMIN_DENIED);
			return;
		}
		s->is_admin = true;
		login_begin_auth(s, runtime_config(rt)->auth_mode);
		return;
	}
	/* Nothing of the pool before the client has authenticated (a startup packet alone must grow
	 * nothing, and take no pool lock): without a password to check, now; else the packet stays at the
	 * front of login->buf and the pool key is made from it once the password is right. */
	int mode = runtime_config(rt)->auth_mode;
	if (mode == CONFIG_AUTH_CERT) {
		if (!session_tls_certificate_names_user(s) || !login_take_db(s, options))
			return;
		mode = CONFIG_AUTH_TRUST; /* nothing more to ask */
	} else if (mode == CONFIG_AUTH_TRUST) {
		if (!login_take_db(s, options))
			return;
	} else {
		s->login->is_startup_kept = true;
	}
	login_begin_auth(s, mode);
}

/* One complete untyped startup-phase packet: 0 consumed it, <0 ended the session. */
static int login_on_startup_packet(struct session *s, const uint8_t *body, uint32_t len, bool more_follows)
{
	struct proto_startup st;
	int rc = proto_startup_parse(body, len, &st);
	if (rc < 0) {
		if (rc == -EPROTONOSUPPORT)
			session_end_with_error(s, SESSION_END_PROTOCOL_VIOLATION, "0A000",
					       "unsupported frontend protocol version");
		else
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
		return -1;
	}
	if (st.code == PROTO_CODE_SSL || st.code == PROTO_CODE_GSSENC) {
		/* One of each, as PostgreSQL allows: a client repeating them forever must not grow tern's
		 * queue of answers. */
		bool *seen = st.code == PROTO_CODE_SSL ? &s->login->ssl_request_seen : &s->login->gss_request_seen;
		if (*seen || s->tls) { /* inside TLS, as PostgreSQL: encryption is negotiated already */
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return -1;
		}
		*seen = true;
		/* Bytes sent before the answer would be read as if they had come over the encrypted channel
		 * (CVE-2021-23214): a client must wait for 'N' before it sends anything more. */
		if (more_follows) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return -1;
		}
		const struct tls_context *tls = __atomic_load_n(&s->host->runtime->tls, __ATOMIC_ACQUIRE);
		if (st.code == PROTO_CODE_GSSENC || !tls) {
			session_send_to_client(s, "N", 1);
			return 0;
		}
		if (!sendq_is_idle(&s->to_client)) { /* it sent this before reading all tern sent ('N') */
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return -1;
		}
		if (session_tls_start(s, tls, false) < 0) {
			session_end(s, SESSION_END_OUT_OF_MEMORY);
			return -1;
		}
		return 0;
	}
	if (st.code == PROTO_CODE_CANCEL) {
		/* A cancel connection gets no answer, whatever happens to the cancel (as in PostgreSQL). */
		s->host->ops->route_cancel(s->host->runtime, st.cancel_pid, st.cancel_key, st.cancel_key_len);
		session_end(s, SESSION_END_CLIENT_CLOSED);
		return -1;
	}
	if (!s->tls && runtime_config(s->host->runtime)->client_tls_sslmode == CONFIG_TLS_REQUIRE) {
		session_end(s, SESSION_END_TLS_REQUIRED);
		return -1;
	}
	login_on_startup(s, &st);
	return s->phase == SESSION_CLOSING ? -1 : 0;
}

static int login_on_password(struct session *s, const uint8_t *body, uint32_t len)
{
	if (!s->login->scram) {
		const struct auth_user *user = login_user_entry(s);
		size_t response_len = len > 0 && body[len - 1] == '\0' ? len - 1 : len;
		if (!auth_md5_verify(user, s->login->md5_salt, (const char *)body, response_len)) {
			session_end(s, SESSION_END_AUTH_FAILED);
			return -1;
		}
		login_complete(s);
		return 0;
	}
	char out[SCRAM_SERVER_FIRST_MAX];
	int n;
	if (s->login->scram->step == SCRAM_STEP_BEGUN) {
		uint32_t offset = 0;
		const char *mechanism = proto_read_cstring(body, len, &offset);
		if (!mechanism || offset + 4 > len) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return -1;
		}
		if (scram_server_select_mechanism(s->login->scram, mechanism) < 0) {
			session_end(s, SESSION_END_AUTH_UNSUPPORTED);
			return -1;
		}
		uint32_t data_len = proto_read_u32(body + offset);
		offset += 4;
		if (data_len != len - offset) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return -1;
		}
		n = scram_server_first(s->login->scram, body + offset, data_len, out, sizeof(out));
		if (n < 0) {
			session_end(s, n == -ENOTSUP ? SESSION_END_AUTH_UNSUPPORTED : SESSION_END_PROTOCOL_VIOLATION);
			return -1;
		}
		login_send_auth(s, PROTO_AUTH_SASL_CONTINUE, out, (size_t)n);
		return 0;
	}
	n = scram_server_final(s->login->scram, body, len, out, sizeof(out));
	if (n == -EKEYREJECTED) { /* as PostgreSQL words it */
		session_end_with_error(s, SESSION_END_PROTOCOL_VIOLATION, "08P01", "SCRAM channel binding check failed");
		return -1;
	}
	if (n < 0) {
		session_end(s, n == -EACCES ? SESSION_END_AUTH_FAILED : SESSION_END_PROTOCOL_VIOLATION);
		return -1;
	}
	login_send_auth(s, PROTO_AUTH_SASL_FINAL, out, (size_t)n);
	login_complete(s);
	return 0;
}

void session_login_on_lookup(struct auth_lookup *lookup)
{
	struct session *s = lookup->owner;
	if (s) {
		/* (owner is set while its session authenticates, and cleared by session_end and session_destroy) */
		TERN_ASSERT(s->lookup == lookup && s->phase == SESSION_AUTH);
		s->lookup = NULL;
		s->login->is_lookup_done = true;
		if (lookup->status == 0) {
			s->login->looked_up = malloc(sizeof(*s->login->looked_up));
			if (s->login->looked_up) {
				*s->login->looked_up = lookup->found; /* its secret moves to the session */
				explicit_bzero(&lookup->found, sizeof(lookup->found));
			}
		}
		if (lookup->status == 0 && !s->login->looked_up)
			session_end(s, SESSION_END_OUT_OF_MEMORY);
		else if (lookup->status < 0 && lookup->status != -ENOENT)
			session_end_with_error(s, SESSION_END_SERVER_REFUSED, lookup->error.sqlstate, lookup->error.message);
		else
			/* (the startup packet is kept by now: the mode of the moment may be any) An unknown user goes
			 * through the same exchange and fails at the proof. */
			login_begin_auth(s, runtime_config(s->host->runtime)->auth_mode);
	}
	if (lookup->status == 0 && lookup->found.secret)
		auth_user_deinit(&lookup->found);
	free(lookup);
}

bool session_login_buf_append(struct session *s, const uint8_t *data, uint32_t len, uint32_t max)
{
	if (s->login->len + len > max) {
		session_end(s, SESSION_END_PROTOCOL_VIOLATION);
		return false;
	}
	if (s->login->len + len > s->login->cap) {
		uint32_t cap = TERN_MAX(s->login->cap * 2, 512u);
		while (cap < s->login->len + len)
			cap *= 2;
		uint8_t *grown = realloc(s->login->buf, TERN_MIN(cap, max));
		if (!grown) {
			session_end(s, SESSION_END_OUT_OF_MEMORY);
			return false;
		}
		s->login->buf = grown;
		s->login->cap = TERN_MIN(cap, max);
	}
	memcpy(s->login->buf + s->login->len, data, len);
	s->login->len += len;
	return true;
}

/* TLS's record type for a handshake: a client's first byte 0x16 is a ClientHello (a startup packet would
 * start with the high byte of its length, always 0). */
#define LOGIN_TLS_HANDSHAKE 0x16

void session_login_on_bytes(struct session *s, const uint8_t *data, uint32_t len)
{
	if (s->phase == SESSION_STARTUP && s->login->len == 0 && !s->tls && !s->login->ssl_request_seen &&
	    !s->login->gss_request_seen && data[0] == LOGIN_TLS_HANDSHAKE) {
		/* Direct TLS (PostgreSQL 17's sslnegotiation=direct): the handshake with no SSLRequest. */
		const struct tls_context *tls = __atomic_load_n(&s->host->runtime->tls, __ATOMIC_ACQUIRE);
		if (!tls) {
			session_end(s, SESSION_END_TLS_FAILED); /* a TLS client cannot read a plaintext error */
			return;
		}
		if (session_tls_start(s, tls, true) < 0) {
			session_end(s, SESSION_END_OUT_OF_MEMORY);
			return;
		}
		session_tls_on_ciphertext(s, data, len);
		return;
	}
	if (!session_login_buf_append(s, data, len, LOGIN_BUF_MAX))
		return;

	while (s->phase == SESSION_STARTUP || s->phase == SESSION_AUTH) {
		bool typed = s->phase == SESSION_AUTH;
		uint32_t header = typed ? PROTO_HEADER_LEN : 4;
		uint8_t *buf = s->login->buf + s->login->kept; /* after the startup packet kept for the pool key */
		uint32_t have = s->login->len - s->login->kept;
		if (have < header)
			return;
		uint32_t length = proto_read_u32(buf + (typed ? 1 : 0));
		if (length < 4 || length > (typed ? LOGIN_BUF_MAX - 1 : PROTO_STARTUP_LEN_MAX) || (!typed && length < 8)) {
			session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		}
		uint32_t total = length + (typed ? 1 : 0);
		if (have < total)
			return;
		bool leftover = have > total;
		int rc;
		if (typed) {
			if (buf[0] != PROTO_FE_PASSWORD || s->lookup) { /* nothing was asked for yet */
				session_end(s, buf[0] == PROTO_FE_TERMINATE ? SESSION_END_CLIENT_TERMINATE
									   : SESSION_END_PROTOCOL_VIOLATION);
				return;
			}
			rc = login_on_password(s, buf + PROTO_HEADER_LEN, length - 4);
		} else {
			rc = login_on_startup_packet(s, buf + 4, length - 4, leftover);
		}
		if (rc < 0 || s->phase == SESSION_CLOSING)
			return;
		if (!s->login) { /* welcomed: the login's state is gone */
			if (leftover)
				session_end(s, SESSION_END_PROTOCOL_VIOLATION);
			return;
		}
		if (s->login->is_startup_kept && s->login->kept == 0) {
			s->login->kept = total; /* the startup packet stays: the pool key is made from it later */
			continue;
		}
		memmove(s->login->buf + s->login->kept, s->login->buf + s->login->kept + total, s->login->len - s->login->kept - total);
		s->login->len -= total;
	}
	/* A client must wait for the welcome before it sends queries; bytes already here broke that. */
	if (s->login && s->login->len > s->login->kept && s->phase != SESSION_STARTUP && s->phase != SESSION_AUTH)
		session_end(s, SESSION_END_PROTOCOL_VIOLATION);
}
