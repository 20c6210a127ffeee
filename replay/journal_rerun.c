/*
 * journal_rerun.c — journal_rerun.h: a snapshot of committed history run again on a target through one
 * libpq connection. Each statement is sent asynchronously and its answer awaited in short polls, so the
 * deadline and the cancel flag are looked at while a statement runs (a statement still running then is
 * cancelled, and the connection abandoned when even the cancel goes unanswered).
 */
#include "journal_rerun.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* After a cancel (the deadline, or tern stopping), how long the server has to answer before the connection
 * is given up: a server that ignores a cancel must not hold the HTTP thread past the deadline for long. */
#define REPLAY_CANCEL_GRACE_NS (5u * BASE_NS_PER_SEC)
/* The ROLLBACK after a failure gets its own bound: the deadline that caused the failure has passed. */
#define REPLAY_ROLLBACK_NS (5u * BASE_NS_PER_SEC)
/* How often a statement's wait looks at the cancel flag. */
#define REPLAY_POLL_SLICE_MS 100
/* libpq's smallest connect_timeout: 1 means 2. */
#define REPLAY_CONNECT_TIMEOUT_MIN_S 2u

enum replay_outcome {
	REPLAY_OK,
	REPLAY_FAILED,  /* the server refused the statement (an error result); the connection is usable */
	REPLAY_STOPPED, /* the deadline or the cancel flag: cancelled (it did not complete) */
	REPLAY_LOST,    /* the connection is unusable (closed, or no answer to a cancel) */
};

struct replay {
	PGconn *conn;
	uint64_t deadline_ns;
	const bool *is_cancelled;
	char tag[32]; /* the last CommandComplete tag of what was awaited */
	/* Scratch reused by every statement: its text with a NUL, its parameters for libpq. */
	char *text;
	size_t text_cap;
	char *values_text; /* text-format values, each with a NUL */
	size_t values_text_cap;
	const char **values;
	int *lengths, *formats;
	Oid *types;
	uint32_t params_cap;
};

/* snprintf for messages, where cutting a long server message short is the intent. */
static void replay_say(char *msg, size_t msg_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void replay_say(char *msg, size_t msg_size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	(void)vsnprintf(msg, msg_size, fmt, ap);
	va_end(ap);
}

static void replay_ignore_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message; /* the target's notices (and warnings) are not tern's log */
}

static bool replay_is_cancelled(const struct replay *r)
{
	return r->is_cancelled && __atomic_load_n(r->is_cancelled, __ATOMIC_ACQUIRE);
}

/* Why a run stops before its next step, into msg; false when it may go on. */
static bool replay_should_stop(const struct replay *r, uint64_t commit_seq, char *msg, size_t msg_size)
{
	if (replay_is_cancelled(r)) {
		replay_say(msg, msg_size, "tern is stopping: the replay stopped before commit_seq %" PRIu64, commit_seq);
		return true;
	}
	if (base_now_ns() >= r->deadline_ns) {
		replay_say(msg, msg_size, "the deadline ([limits] replay_deadline_secs) passed before commit_seq %" PRIu64,
			   commit_seq);
		return true;
	}
	return false;
}

/* What to add to a statement's error when it was cancelled. */
static const char *replay_stop_note(const struct replay *r, enum replay_outcome o)
{
	if (o != REPLAY_STOPPED)
		return "";
	return replay_is_cancelled(r) ? " (cancelled: tern is stopping)"
				      : " (cancelled: the deadline, [limits] replay_deadline_secs, passed)";
}

/* libpq's message without its trailing newline. */
static void replay_message(char *msg, size_t msg_size, const char *what, const char *libpq_text)
{
	replay_say(msg, msg_size, "%s%s", what, libpq_text && libpq_text[0] ? libpq_text : "(no message)");
	size_t len = strlen(msg);
	while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
		msg[--len] = '\0';
}

/* A server's error as "SQLSTATE message" (one line, as an answer's error field wants it). */
static void replay_error(char *msg, size_t msg_size, const PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	if (state && primary)
		replay_say(msg, msg_size, "%s %s", state, primary);
	else
		replay_message(msg, msg_size, "", res ? PQresultErrorMessage(res) : "a replication COPY");
}

static int replay_grow(void **p, size_t *cap, size_t need, size_t item)
{
	if (need <= *cap)
		return 0;
	size_t next = TERN_MAX(need, *cap * 2);
	void *q = realloc(*p, next * item);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = next;
	return 0;
}

/* Room for n parameters in the three arrays libpq takes. */
static int replay_params_reserve(struct replay *r, uint32_t n)
{
	if (n <= r->params_cap)
		return 0;
	uint32_t next = TERN_MAX(n, 2 * r->params_cap);
	const char **values = realloc(r->values, next * sizeof(*values));
	if (values)
		r->values = values;
	int *lengths = realloc(r->lengths, next * sizeof(*lengths));
	if (lengths)
		r->lengths = lengths;
	int *formats = realloc(r->formats, next * sizeof(*formats));
	if (formats)
		r->formats = formats;
	Oid *types = realloc(r->types, next * sizeof(*types));
	if (types)
		r->types = types;
	if (!values || !lengths || !formats || !types)
		return -ENOMEM;
	r->params_cap = next;
	return 0;
}

/* Waits until libpq can hand over the next result without blocking, or (copy_out) a row of COPY OUT data.
 * At the deadline (when may_cancel) or the cancel flag, sends the server a cancel once and waits
 * REPLAY_CANCEL_GRACE_NS more; *is_cancel_sent says it was sent. 0, or -EIO with msg filled. */
static int replay_wait_readable(struct replay *r, uint64_t deadline_ns, bool may_cancel, bool *is_cancel_sent,
				uint64_t *give_up_ns, char *msg, size_t msg_size)
{
	while (PQisBusy(r->conn)) {
		uint64_t now = base_now_ns();
		if (may_cancel && !*is_cancel_sent && (now >= deadline_ns || replay_is_cancelled(r))) {
			char why[256] = "";
			PGcancel *cancel = PQgetCancel(r->conn);
			if (cancel) {
				(void)PQcancel(cancel, why, (int)sizeof(why)); /* (its failure: the grace runs out) */
				PQfreeCancel(cancel);
			}
			*is_cancel_sent = true;
			*give_up_ns = now + REPLAY_CANCEL_GRACE_NS;
		}
		if (now >= *give_up_ns) {
			replay_say(msg, msg_size, "the target did not answer %s",
				   *is_cancel_sent ? "a cancel in time; its connection was given up" : "in time");
			return -EIO;
		}
		int fd = PQsocket(r->conn);
		if (fd < 0) {
			replay_message(msg, msg_size, "the connection to the target was lost: ", PQerrorMessage(r->conn));
			return -EIO;
		}
		uint64_t left_ms = (*give_up_ns - now + BASE_NS_PER_MS - 1) / BASE_NS_PER_MS;
		if (may_cancel && !*is_cancel_sent && deadline_ns > now)
			left_ms = TERN_MIN(left_ms, (deadline_ns - now + BASE_NS_PER_MS - 1) / BASE_NS_PER_MS);
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		(void)poll(&pfd, 1, (int)TERN_MIN(left_ms, (uint64_t)REPLAY_POLL_SLICE_MS)); /* (EINTR: look again) */
		if (!PQconsumeInput(r->conn)) {
			replay_message(msg, msg_size, "the connection to the target was lost: ", PQerrorMessage(r->conn));
			return -EIO;
		}
	}
	return 0;
}

/* Reads every result of what was sent. The first error's text goes to msg; r->tag is the last command's
 * tag. may_cancel: the deadline cancels it (not for a ROLLBACK, which has its own bound). */
static enum replay_outcome replay_await(struct replay *r, uint64_t deadline_ns, bool may_cancel, char *msg,
					size_t msg_size)
{
	bool is_cancel_sent = false, is_failed = false;
	uint64_t give_up_ns = may_cancel ? UINT64_MAX : deadline_ns;
	r->tag[0] = '\0';
	for (;;) {
		if (replay_wait_readable(r, deadline_ns, may_cancel, &is_cancel_sent, &give_up_ns, msg, msg_size) < 0)
			return REPLAY_LOST;
		PGresult *res = PQgetResult(r->conn);
		if (!res)
			break;
		ExecStatusType status = PQresultStatus(res);
		switch (status) {
		case PGRES_COMMAND_OK:
		case PGRES_TUPLES_OK:
		case PGRES_EMPTY_QUERY:
		case PGRES_SINGLE_TUPLE:
			base_strlcpy(r->tag, PQcmdStatus(res), sizeof(r->tag));
			break;
		case PGRES_COPY_IN:
			/* A COPY FROM STDIN: its data was not kept (its transaction is incomplete). */
			if (!is_failed)
				replay_say(msg, msg_size, "a COPY FROM STDIN: its data is not in the journal");
			is_failed = true;
			if (PQputCopyEnd(r->conn, "tern does not replay COPY data") < 0) {
				PQclear(res);
				replay_message(msg, msg_size, "the connection to the target was lost: ", PQerrorMessage(r->conn));
				return REPLAY_LOST;
			}
			break;
		case PGRES_COPY_OUT: {
			/* A COPY TO STDOUT changes nothing: its rows are read and dropped. */
			char *row = NULL;
			int n;
			uint64_t copy_until_ns = give_up_ns == UINT64_MAX ? deadline_ns + REPLAY_CANCEL_GRACE_NS : give_up_ns;
			while ((n = PQgetCopyData(r->conn, &row, 1)) != -1) {
				if (n == -2 || (n == 0 && (PQconsumeInput(r->conn) == 0 || base_now_ns() >= copy_until_ns))) {
					PQclear(res);
					replay_message(msg, msg_size, "the connection to the target was lost: ",
						       PQerrorMessage(r->conn));
					return REPLAY_LOST;
				}
				if (n == 0) {
					struct pollfd pfd = {.fd = PQsocket(r->conn), .events = POLLIN};
					(void)poll(&pfd, 1, REPLAY_POLL_SLICE_MS);
				}
				PQfreemem(row);
				row = NULL;
			}
			break;
		}
		default: /* an error, or COPY BOTH (replication), which a replay has no business with */
			if (!is_failed)
				replay_error(msg, msg_size, status == PGRES_COPY_BOTH ? NULL : res);
			is_failed = true;
			if (status == PGRES_COPY_BOTH) {
				PQclear(res);
				return REPLAY_LOST;
			}
			break;
		}
		PQclear(res);
	}
	if (PQstatus(r->conn) == CONNECTION_BAD) {
		replay_message(msg, msg_size, "the connection to the target was lost: ", PQerrorMessage(r->conn));
		return REPLAY_LOST;
	}
	if (is_failed)
		return is_cancel_sent ? REPLAY_STOPPED : REPLAY_FAILED;
	return REPLAY_OK;
}

/* Runs a statement of tern's own (BEGIN, COMMIT, ROLLBACK). */
static enum replay_outcome replay_command(struct replay *r, const char *sql, uint64_t deadline_ns, bool may_cancel,
					  char *msg, size_t msg_size)
{
	if (!PQsendQuery(r->conn, sql)) {
		replay_message(msg, msg_size, "could not send to the target: ", PQerrorMessage(r->conn));
		return REPLAY_LOST;
	}
	return replay_await(r, deadline_ns, may_cancel, msg, msg_size);
}

/* Sends a captured statement: a Query's text as a Query (it may hold several statements); a Parse's text
 * with its Bind's values in their captured formats (text values copied with a NUL, binary ones passed with
 * their lengths; SQL NULL as NULL) and the parameter types the Parse named, through PQsendQueryParams. */
static enum replay_outcome replay_statement(struct replay *r, const struct journal_statement_view *s, char *msg,
					    size_t msg_size)
{
	if (replay_grow((void **)&r->text, &r->text_cap, (size_t)s->text.len + 1, 1) < 0)
		goto no_memory;
	memcpy(r->text, s->text.data, s->text.len);
	r->text[s->text.len] = '\0';
	int sent;
	if (s->kind == JOURNAL_STATEMENT_SIMPLE) {
		sent = PQsendQuery(r->conn, r->text);
	} else {
		TERN_ASSERT(s->kind == JOURNAL_STATEMENT_EXTENDED);
		uint32_t n = s->param_count;
		if (replay_params_reserve(r, n) < 0)
			goto no_memory;
		/* Every text value with its NUL fits in the values' bytes plus one byte each. */
		if (replay_grow((void **)&r->values_text, &r->values_text_cap, (size_t)s->params_len + n + 1, 1) < 0)
			goto no_memory;
		size_t used = 0;
		struct journal_iter it = {0};
		struct journal_param p;
		for (uint32_t i = 0; i < n; i++) {
			bool is_there = journal_record_param_next(s, &it, &p);
			TERN_ASSERT(is_there); /* the decoder counted them */
			int16_t format = s->param_format_count == 0   ? 0
					 : s->param_format_count == 1 ? journal_record_param_format_at(s, 0)
								      : journal_record_param_format_at(s, (uint16_t)i);
			r->formats[i] = format;
			if (p.len < 0) {
				r->values[i] = NULL;
				r->lengths[i] = 0;
			} else if (format == 1) {
				r->values[i] = (const char *)p.data;
				r->lengths[i] = p.len;
			} else {
				TERN_ASSERT(used + (size_t)p.len + 1 <= r->values_text_cap);
				memcpy(r->values_text + used, p.data, (size_t)p.len);
				r->values_text[used + (size_t)p.len] = '\0';
				r->values[i] = r->values_text + used;
				r->lengths[i] = p.len;
				used += (size_t)p.len + 1;
			}
		}
		/* One result format for every column: the captured one when they agree (the rows are dropped). */
		int result_format = s->result_format_count ? journal_record_result_format_at(s, 0) : 0;
		for (uint16_t i = 1; i < s->result_format_count; i++)
			if (journal_record_result_format_at(s, i) != result_format)
				result_format = 0;
		/* The types the Parse named (a typed binary value needs its type: the server would infer another). */
		for (uint32_t i = 0; i < n; i++)
			r->types[i] = i < s->param_type_count ? (Oid)journal_record_param_type_at(s, (uint16_t)i) : 0;
		sent = PQsendQueryParams(r->conn, r->text, (int)n, n ? r->types : NULL, n ? r->values : NULL,
					 n ? r->lengths : NULL, n ? r->formats : NULL, result_format);
	}
	if (!sent) {
		replay_message(msg, msg_size, "could not send to the target: ", PQerrorMessage(r->conn));
		return REPLAY_LOST;
	}
	return replay_await(r, r->deadline_ns, true, msg, msg_size);
no_memory:
	replay_say(msg, msg_size, "no memory for a statement of %u bytes", s->text.len);
	return REPLAY_FAILED;
}

/* Connects to the target, bounded by the deadline (libpq's connect_timeout, in whole seconds). */
static PGconn *replay_connect(const char *target, uint64_t deadline_ns, char *msg, size_t msg_size)
{
	uint64_t now = base_now_ns();
	uint64_t left_s = deadline_ns > now ? (deadline_ns - now + BASE_NS_PER_SEC - 1) / BASE_NS_PER_SEC : 0;
	char timeout_s[24];
	snprintf(timeout_s, sizeof(timeout_s), "%" PRIu64, TERN_MAX(left_s, (uint64_t)REPLAY_CONNECT_TIMEOUT_MIN_S));
	/* dbname is expanded (a conninfo or URI); connect_timeout after it, so the deadline bounds it. */
	const char *const keys[] = {"dbname", "connect_timeout", "fallback_application_name", NULL};
	const char *const values[] = {target, timeout_s, "tern replay", NULL};
	PGconn *conn = PQconnectdbParams(keys, values, 1);
	if (!conn) {
		replay_say(msg, msg_size, "could not connect to the target: no memory");
		return NULL;
	}
	if (PQstatus(conn) != CONNECTION_OK) {
		replay_message(msg, msg_size, "could not connect to the target: ", PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	PQsetNoticeProcessor(conn, replay_ignore_notice, NULL);
	return conn;
}

/* Appends "; " and `more` to out->error (or sets it). */
static void replay_note(struct rerun_result *out, const char *more)
{
	size_t len = strlen(out->error);
	if (len == 0)
		base_strlcpy(out->error, more, sizeof(out->error));
	else if (len + 2 < sizeof(out->error))
		replay_say(out->error + len, sizeof(out->error) - len, "; %s", more);
}

/* One transaction in its own BEGIN … COMMIT; a transaction of one statement runs as it is, in the implicit
 * transaction PostgreSQL gives a lone statement (the same all or nothing, and what a statement that refuses
 * a transaction block — VACUUM, CREATE DATABASE, … — needs, as its autocommit original ran). REPLAY_OK, or
 * the outcome with msg filled, after a ROLLBACK. */
static enum replay_outcome replay_transaction(struct replay *r, const struct journal_record_view *v, char *msg,
					      size_t msg_size)
{
	char what[RERUN_ERROR_MAX];
	enum replay_outcome o = REPLAY_OK;
	bool is_block = v->statement_count > 1;
	if (v->statement_count == 0)
		return REPLAY_OK; /* nothing kept to redo */
	if (is_block && (o = replay_command(r, "BEGIN", r->deadline_ns, true, what, sizeof(what))) != REPLAY_OK) {
		replay_say(msg, msg_size, "commit_seq %" PRIu64 ": BEGIN: %s", v->commit_seq, what);
		goto rollback;
	}
	struct journal_iter it = {0};
	struct journal_statement_view s;
	for (uint32_t i = 0; journal_record_statement_next(v, &it, &s); i++) {
		if (i > 0 && replay_should_stop(r, v->commit_seq, what, sizeof(what))) {
			o = REPLAY_STOPPED;
			replay_say(msg, msg_size, "%s (it was rolled back)", what);
			goto rollback;
		}
		if ((o = replay_statement(r, &s, what, sizeof(what))) != REPLAY_OK) {
			replay_say(msg, msg_size, "commit_seq %" PRIu64 ", statement %u: %s%s", v->commit_seq, i + 1, what,
				   replay_stop_note(r, o));
			goto rollback;
		}
	}
	if (!is_block)
		return REPLAY_OK;
	/* The COMMIT is never cancelled: past the deadline its answer still says whether it committed. */
	o = replay_command(r, "COMMIT", r->deadline_ns + REPLAY_CANCEL_GRACE_NS, false, what, sizeof(what));
	if (o == REPLAY_OK && strcmp(r->tag, "COMMIT") != 0) {
		o = REPLAY_FAILED;
		replay_say(what, sizeof(what), "the target answered %s", r->tag[0] ? r->tag : "nothing");
	}
	if (o == REPLAY_LOST)
		replay_say(msg, msg_size, "commit_seq %" PRIu64 ": the connection was lost during its COMMIT, whose outcome "
			   "on the target is unknown (check before resuming): %s", v->commit_seq, what);
	else if (o != REPLAY_OK)
		replay_say(msg, msg_size, "commit_seq %" PRIu64 ": COMMIT: %s", v->commit_seq, what);
	return o;
rollback:
	if (o != REPLAY_LOST && PQtransactionStatus(r->conn) != PQTRANS_IDLE)
		(void)replay_command(r, "ROLLBACK", base_now_ns() + REPLAY_ROLLBACK_NS, false, what, sizeof(what));
	return o;
}

static void replay_committed_history(struct replay *r, struct journal_entry **entries, uint32_t count,
				     struct rerun_result *out)
{
	for (uint32_t i = 0; i < count; i++) {
		const struct journal_entry *e = entries[i];
		struct journal_record_view v;
		char msg[RERUN_ERROR_MAX];
		enum replay_outcome o = REPLAY_FAILED;
		if (replay_should_stop(r, e->commit_seq, msg, sizeof(msg)))
			o = REPLAY_STOPPED;
		else if (journal_record_decode(e->bytes, e->len, &v) < 0)
			replay_say(msg, sizeof(msg), "commit_seq %" PRIu64 ": its record does not decode", e->commit_seq);
		else
			o = replay_transaction(r, &v, msg, sizeof(msg));
		if (o == REPLAY_OK) {
			out->applied++;
			out->last_commit_seq = e->commit_seq;
			continue;
		}
		out->failed += o != REPLAY_STOPPED;
		out->is_partial = true;
		out->stopped_at = e->commit_seq;
		replay_note(out, msg);
		return;
	}
}

/* Every statement on its own. An incomplete transaction's statements run too, best effort, as every other's:
 * what it lacks (a COPY's data, a statement over max_statement_bytes) fails or is missing, and a window is
 * best effort anyway. A run stops only at the deadline, the cancel flag or a lost connection. */
static void replay_time_window(struct replay *r, struct journal_entry **entries, uint32_t count,
			       struct rerun_result *out)
{
	char msg[RERUN_ERROR_MAX];
	for (uint32_t i = 0; i < count; i++) {
		const struct journal_entry *e = entries[i];
		struct journal_record_view v;
		if (journal_record_decode(e->bytes, e->len, &v) < 0) {
			out->failed++;
			if (!out->error[0])
				replay_say(out->error, sizeof(out->error), "commit_seq %" PRIu64 ": its record does not decode",
					   e->commit_seq);
			continue;
		}
		struct journal_iter it = {0};
		struct journal_statement_view s;
		for (uint32_t k = 0; journal_record_statement_next(&v, &it, &s); k++) {
			if (replay_should_stop(r, e->commit_seq, msg, sizeof(msg))) {
				out->is_partial = true;
				out->stopped_at = e->commit_seq;
				replay_note(out, msg);
				return;
			}
			enum replay_outcome o = replay_statement(r, &s, msg, sizeof(msg));
			if (o == REPLAY_OK) {
				out->applied++;
				continue;
			}
			char line[RERUN_ERROR_MAX + 64];
			replay_say(line, sizeof(line), "commit_seq %" PRIu64 ", statement %u: %s%s", e->commit_seq, k + 1, msg,
				   replay_stop_note(r, o));
			out->failed++;
			if (o == REPLAY_FAILED) {
				if (out->failed == 1)
					replay_note(out, line);
				continue;
			}
			out->is_partial = true; /* stopped in a statement, or the connection is gone: no going on */
			out->stopped_at = e->commit_seq;
			replay_note(out, line);
			return;
		}
		out->last_commit_seq = e->commit_seq;
	}
}

int journal_rerun(struct journal *h, const struct rerun_request *req, uint64_t deadline_ns,
		       struct rerun_result *out, char *err, size_t err_size)
{
	TERN_ASSERT(h && req && req->target && out && req->from_us <= req->to_us);
	TERN_ASSERT(req->mode == RERUN_TIME_WINDOW || req->mode == RERUN_COMMITTED_HISTORY);
	memset(out, 0, sizeof(*out));
	out->last_commit_seq = req->after_commit_seq;
	journal_count_rerun(h);
	struct journal_entry **entries = NULL;
	uint32_t count = 0;
	int rc = journal_snapshot(h, req->after_commit_seq, req->from_us, req->to_us, &entries, &count);
	if (rc < 0) {
		replay_say(err, err_size, "no memory for a snapshot of committed history");
		journal_coverage(h, &out->coverage);
		return rc;
	}
	if (req->mode == RERUN_COMMITTED_HISTORY)
		for (uint32_t i = 0; i < count; i++)
			if (entries[i]->flags & JOURNAL_RECORD_INCOMPLETE) {
				out->stopped_at = entries[i]->commit_seq;
				replay_say(err, err_size,
					   "commit_seq %" PRIu64 " is incomplete (a COPY, an EXECUTE of an SQL-prepared statement, a "
					   "statement over [journal] max_statement_bytes, ...): committed_history refuses the "
					   "window; nothing ran (after_commit_seq past it, or mode time_window, best effort)",
					   entries[i]->commit_seq);
				journal_release(entries, count);
				journal_coverage(h, &out->coverage);
				return -EPERM;
			}
	struct replay r = {.deadline_ns = deadline_ns, .is_cancelled = req->is_cancelled};
	if (count > 0) {
		char msg[RERUN_ERROR_MAX];
		if (replay_should_stop(&r, entries[0]->commit_seq, msg, sizeof(msg)) ||
		    !(r.conn = replay_connect(req->target, deadline_ns, msg, sizeof(msg)))) {
			out->is_partial = true;
			out->stopped_at = entries[0]->commit_seq;
			replay_note(out, msg);
		} else if (req->mode == RERUN_COMMITTED_HISTORY) {
			replay_committed_history(&r, entries, count, out);
		} else {
			replay_time_window(&r, entries, count, out);
			out->is_partial |= out->failed > 0;
		}
	}
	if (r.conn)
		PQfinish(r.conn);
	free(r.text);
	free(r.values_text);
	free(r.values);
	free(r.lengths);
	free(r.formats);
	free(r.types);
	journal_release(entries, count);
	journal_coverage(h, &out->coverage);
	TERN_ASSERT(!out->is_partial || out->error[0]);
	return 0;
}

/* RFC 3339's date-time ("2024-05-01T12:00:00Z", "2024-05-01t12:00:00.25+02:00") to microseconds since the
 * epoch: the layout checked by hand, the fields read by strptime, the offset applied by hand. 0, or -EINVAL:
 * another form, a field out of range (February 30th too), a time before 1970. */
int rerun_parse_time(const char *text, uint64_t *out_us)
{
	static const char layout[] = "dddd-dd-ddTdd:dd:dd";
	char fields[sizeof(layout)];
	for (size_t i = 0; i + 1 < sizeof(layout); i++) {
		char c = text[i];
		bool is_ok = layout[i] == 'd' ? c >= '0' && c <= '9' : layout[i] == 'T' ? c == 'T' || c == 't' : c == layout[i];
		if (!is_ok)
			return -EINVAL;
		fields[i] = layout[i] == 'T' ? 'T' : c;
	}
	fields[sizeof(layout) - 1] = '\0';
	struct tm tm = {0};
	const char *end = strptime(fields, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end || *end != '\0')
		return -EINVAL;
	const char *p = text + sizeof(layout) - 1;
	uint64_t fraction_us = 0;
	if (*p == '.') { /* (past the microsecond, digits are read and dropped) */
		const char *digits = ++p;
		while (*p >= '0' && *p <= '9')
			p++;
		if (p == digits)
			return -EINVAL;
		for (long k = 0; k < 6; k++)
			fraction_us = fraction_us * 10 + (digits + k < p ? (uint64_t)(digits[k] - '0') : 0);
	}
	long offset_s = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if ((*p == '+' || *p == '-') && p[1] >= '0' && p[1] <= '9' && p[2] >= '0' && p[2] <= '9' && p[3] == ':' &&
		   p[4] >= '0' && p[4] <= '9' && p[5] >= '0' && p[5] <= '9') {
		long hours = (p[1] - '0') * 10 + (p[2] - '0'), minutes = (p[4] - '0') * 10 + (p[5] - '0');
		if (hours > 23 || minutes > 59)
			return -EINVAL;
		offset_s = (*p == '-' ? -1 : 1) * (hours * 3600 + minutes * 60);
		p += 6;
	} else {
		return -EINVAL;
	}
	if (*p != '\0')
		return -EINVAL;
	int mday = tm.tm_mday, mon = tm.tm_mon;
	time_t t = timegm(&tm);
	if (t == (time_t)-1 || tm.tm_mday != mday || tm.tm_mon != mon)
		return -EINVAL; /* (timegm normalised a day the month does not have) */
	if ((long long)t - offset_s < 0)
		return -EINVAL;
	*out_us = (uint64_t)((long long)t - offset_s) * 1000000u + fraction_us;
	return 0;
}
