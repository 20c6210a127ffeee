/* The admin HTTP endpoint's POST requests (http.h): the body read on the connection's thread, who may ask
 * (http_token, a loopback listener), then POST /api/replay (journal_rerun.h, on that thread: a replay of
 * minutes leaves the rest answering) or POST /api/shadow (shadow.h). */
#include "http_internal.h"
#include "http_shadow.h"

#include "replay/journal.h"
#include "replay/journal_rerun.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- POST /api/replay ---- */

/* Whether the Authorization header is "Bearer <token>", compared in a time that depends on the token's
 * length only (not on where a guess first differs). */
static bool http_token_matches(const char *header, const char *token)
{
	static const char scheme[] = "Bearer ";
	if (!header || strncasecmp(header, scheme, sizeof(scheme) - 1) != 0)
		return false;
	const char *given = header + sizeof(scheme) - 1;
	size_t given_len = strlen(given), token_len = strlen(token);
	volatile unsigned char diff = given_len != token_len;
	for (size_t i = 0; i < token_len; i++)
		diff |= (unsigned char)(token[i] ^ (i < given_len ? given[i] : 0));
	return diff == 0;
}

/* The request's JSON into *req, its strings pointing into *root (the caller's to json_decref). 0, or -EINVAL
 * with the reason in err (400). Every key but target is optional; a key tern does not know is refused, so a
 * misspelt after_commit_seq never silently means "everything". */
static int http_replay_parse(const struct http_upload *u, struct rerun_request *req, json_t **root,
			     char *err, size_t err_size)
{
	json_error_t jerr;
	*req = (struct rerun_request){.mode = RERUN_TIME_WINDOW, .to_us = UINT64_MAX};
	*root = json_loadb(u->data ? u->data : "", u->len, JSON_REJECT_DUPLICATES, &jerr);
	if (!*root) {
		snprintf(err, err_size, "the body is not JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
		return -EINVAL;
	}
	if (!json_is_object(*root)) {
		snprintf(err, err_size, "the body must be a JSON object: {\"mode\", \"target\", \"from\", \"to\", "
			 "\"after_commit_seq\"}");
		return -EINVAL;
	}
	const char *key;
	json_t *value;
	json_object_foreach(*root, key, value) {
		if (strcmp(key, "mode") == 0) {
			const char *mode = json_string_value(value);
			if (mode && strcmp(mode, "committed_history") == 0) {
				req->mode = RERUN_COMMITTED_HISTORY;
			} else if (mode && strcmp(mode, "time_window") == 0) {
				req->mode = RERUN_TIME_WINDOW;
			} else {
				snprintf(err, err_size, "mode: expected \"committed_history\" or \"time_window\"");
				return -EINVAL;
			}
		} else if (strcmp(key, "target") == 0) {
			req->target = json_string_value(value);
			if (!req->target || !req->target[0]) {
				snprintf(err, err_size, "target: expected a libpq connection string");
				return -EINVAL;
			}
		} else if (strcmp(key, "from") == 0 || strcmp(key, "to") == 0) {
			const char *text = json_string_value(value);
			if (!text || rerun_parse_time(text, key[0] == 'f' ? &req->from_us : &req->to_us) < 0) {
				snprintf(err, err_size, "%s: expected an RFC 3339 time such as 2024-05-01T12:00:00Z or "
					 "2024-05-01T14:00:00.5+02:00", key);
				return -EINVAL;
			}
		} else if (strcmp(key, "after_commit_seq") == 0) {
			if (!json_is_integer(value) || json_integer_value(value) < 0) {
				snprintf(err, err_size, "after_commit_seq: expected a commit_seq (an integer, 0 or more)");
				return -EINVAL;
			}
			req->after_commit_seq = (uint64_t)json_integer_value(value);
		} else {
			snprintf(err, err_size, "unknown key \"%.64s\": expected mode, target, from, to, after_commit_seq", key);
			return -EINVAL;
		}
	}
	if (!req->target) {
		snprintf(err, err_size, "target is required: the libpq connection string of the database to replay into");
		return -EINVAL;
	}
	if (req->from_us > req->to_us) {
		snprintf(err, err_size, "from is after to");
		return -EINVAL;
	}
	return 0;
}

/* A replay's answer: what applied, where it stopped, and what backed it. */
static char *http_replay_result_body(const struct rerun_result *r, struct journal *h)
{
	json_t *body = json_pack("{s:I, s:I, s:b, s:o, s:I, s:o}", "applied", (json_int_t)r->applied, "failed",
				 (json_int_t)r->failed, "partial", r->is_partial, "stopped_at",
				 r->stopped_at ? json_integer((json_int_t)r->stopped_at) : json_null(), "last_commit_seq",
				 (json_int_t)r->last_commit_seq, "coverage", http_coverage_json(h));
	if (body && r->error[0])
		json_object_set_new(body, "error", json_string(r->error));
	char *text = body ? json_dumps(body, JSON_INDENT(2)) : NULL;
	json_decref(body);
	return text;
}

/* A POST's sender and size: true when it may go on, else *answer is the refusal (401, 403, 413). */
static bool http_post_is_allowed(struct http_admin *h, struct MHD_Connection *conn, const struct http_upload *u,
				 const char *url, enum MHD_Result *answer)
{
	const struct tern_config *cfg = runtime_config(h->rt);
	const char *header = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	bool has_token = cfg->http_token[0] != '\0';
	char message[128];
	if (has_token && !http_token_matches(header, cfg->http_token)) {
		snprintf(message, sizeof(message), "POST %s needs Authorization: Bearer <[admin] http_token>", url);
		*answer = http_reply_with(conn, MHD_HTTP_UNAUTHORIZED, "application/json", http_error_body(message),
					  MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	} else if (!has_token && !h->is_loopback) {
		*answer = http_reply(conn, MHD_HTTP_FORBIDDEN, "application/json",
				     http_error_body("[admin] http_token is required: http_listen is not a loopback "
						     "address, and a replay or a shadow run reaches any database it is given"));
	} else if (u->is_too_large) {
		snprintf(message, sizeof(message), "the body is over %u bytes", HTTP_BODY_MAX);
		*answer = http_reply(conn, MHD_HTTP_CONTENT_TOO_LARGE, "application/json", http_error_body(message));
	} else {
		return true;
	}
	return false;
}

/* POST /api/shadow: the whole request has arrived (shadow.h). */
static enum MHD_Result http_shadow_answer(struct http_admin *h, struct MHD_Connection *conn,
					  const struct http_upload *u)
{
	enum MHD_Result answer;
	if (!http_post_is_allowed(h, conn, u, "/api/shadow", &answer))
		return answer;
	(void)MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u); /* (while it runs) */
	unsigned status = 500;
	char *body = http_shadow_request(h->rt, u->data, u->len, &status);
	(void)MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, HTTP_CONNECTION_TIMEOUT_S);
	return http_reply(conn, body ? status : MHD_HTTP_INTERNAL_SERVER_ERROR, "application/json",
			  body ? body : http_error_body("no memory"));
}

/* The whole request has arrived: who asks, then what, then run it. */
static enum MHD_Result http_replay_answer(struct http_admin *h, struct MHD_Connection *conn,
					  const struct http_upload *u)
{
	const struct tern_config *cfg = runtime_config(h->rt);
	enum MHD_Result refusal;
	if (!http_post_is_allowed(h, conn, u, "/api/replay", &refusal))
		return refusal;
	if (!h->rt->journal || !cfg->tr_enabled)
		return http_reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json",
				  http_error_body(h->rt->journal ? "tr_enabled = false: operator replay is off"
								 : "tr_enabled = false at startup: there is no committed history"));
	struct rerun_request req;
	json_t *root = NULL;
	char err[RERUN_ERROR_MAX];
	if (http_replay_parse(u, &req, &root, err, sizeof(err)) < 0) {
		json_decref(root);
		return http_reply(conn, MHD_HTTP_BAD_REQUEST, "application/json", http_error_body(err));
	}
	if (__atomic_exchange_n(&h->is_replaying, true, __ATOMIC_ACQ_REL)) {
		json_decref(root);
		return http_reply(conn, MHD_HTTP_CONFLICT, "application/json", http_error_body("a replay is already running"));
	}
	req.is_cancelled = &h->is_stopping;
	uint64_t started = base_now_ns();
	TERN_INFO("POST /api/replay: %s after commit_seq %" PRIu64 " (deadline %u s)",
		  req.mode == RERUN_COMMITTED_HISTORY ? "committed_history" : "time_window", req.after_commit_seq,
		  cfg->replay_deadline_secs);
	/* No idle timeout while the replay runs; setting it again afterwards restarts its clock. */
	(void)MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	struct rerun_result *result = malloc(sizeof(*result));
	int rc = result ? journal_rerun(h->rt->journal, &req, started + cfg->replay_deadline_secs * BASE_NS_PER_SEC,
					     result, err, sizeof(err))
			: -ENOMEM;
	(void)MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, HTTP_CONNECTION_TIMEOUT_S);
	__atomic_store_n(&h->is_replaying, false, __ATOMIC_RELEASE);
	json_decref(root);
	enum MHD_Result answer;
	if (rc == 0) {
		TERN_INFO("POST /api/replay: applied %" PRIu64 ", failed %" PRIu64 "%s in %.1f s%s%s", result->applied,
			  result->failed, result->is_partial ? ", partial" : "", (double)(base_now_ns() - started) / 1e9,
			  result->error[0] ? ": " : "", result->error);
		answer = http_reply(conn, MHD_HTTP_OK, "application/json", http_replay_result_body(result, h->rt->journal));
	} else if (rc == -EPERM) {
		TERN_INFO("POST /api/replay refused: %s", err);
		json_t *body = json_pack("{s:s, s:I, s:o}", "error", err, "commit_seq", (json_int_t)result->stopped_at,
					 "coverage", http_coverage_json(h->rt->journal));
		char *text = body ? json_dumps(body, JSON_INDENT(2)) : NULL;
		json_decref(body);
		answer = http_reply(conn, MHD_HTTP_CONFLICT, "application/json", text);
	} else {
		answer = http_reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "application/json",
				    http_error_body(result ? err : "no memory"));
	}
	free(result);
	return answer;
}

/* libmicrohttpd calls this once with the headers, then with each piece of the body, then once more with none
 * left: the body is kept (up to HTTP_BODY_MAX) in the connection's http_upload, and answered at the end. */
enum MHD_Result http_post_request(struct http_admin *h, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *upload_data, size_t *upload_data_size, void **state)
{
	if (strcmp(method, "POST") != 0)
		return http_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json", http_error_body("POST only"));
	struct http_upload *u = *state;
	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u)
			return MHD_NO;
		*state = u;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		u->seen += n;
		if (u->seen > HTTP_BODY_DISCARD_MAX)
			return MHD_NO; /* (closes the connection) */
		if (u->is_too_large || u->len + n > HTTP_BODY_MAX) {
			u->is_too_large = true;
			return MHD_YES;
		}
		if (u->len + n > u->cap) {
			size_t cap = TERN_MIN(TERN_MAX(u->len + n, 2 * u->cap), (size_t)HTTP_BODY_MAX);
			char *data = realloc(u->data, cap);
			if (!data)
				return MHD_NO;
			u->data = data;
			u->cap = cap;
		}
		memcpy(u->data + u->len, upload_data, n);
		u->len += n;
		return MHD_YES;
	}
	return strcmp(url, "/api/replay") == 0 ? http_replay_answer(h, conn, u) : http_shadow_answer(h, conn, u);
}

void http_completed(void *cls, struct MHD_Connection *conn, void **state, enum MHD_RequestTerminationCode why)
{
	(void)cls;
	(void)conn;
	(void)why;
	struct http_upload *u = *state;
	if (u) {
		free(u->data);
		free(u);
		*state = NULL;
	}
}
