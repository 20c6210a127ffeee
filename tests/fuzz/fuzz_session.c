/*
 * fuzz_session.c — a whole client session of tern, driven step by step: client bytes and server bytes
 * interleaved against the real relay (session.c, session_relay.c, dispatch.c and every observer, routing,
 * Transaction Replay's recorder and its recovery, the journal's capture), over the real io_uring (ring.c),
 * with the real pool (pool.c) handing out fake server connections. Each connection is an AF_UNIX
 * socketpair: tern holds one end as a pool connection that is already logged in, the harness holds the
 * other and plays the server (fuzz_session_server.c answers what tern sent, or the input says the bytes).
 * Clients are socketpairs too. Bytes reach tern through its own receives (leg_recv_done → leg_ops.on_bytes
 * → session_relay_on_server_bytes; the client's multishot receive → session_on_client_bytes), in the
 * receive buffers a real worker uses, one chunk per step; a client's bytes may also go straight to
 * session_on_client_bytes with RING_NO_BUFFER, as TLS hands over its plaintext. The harness stands in for
 * the worker (worker.c's end of pass, tick and mailbox, mirrored below): no network, no PostgreSQL, no
 * monitor (so no read goes to a replica: route.c and recover.c take their no-monitor paths).
 *
 * Input: byte 0 is the configuration:
 *   bit 0     pool_mode: 0 session, 1 transaction
 *   bits 1-2  tr_mode: none, session, select, transaction
 *   bit 3     max_prepared_statements = 200 (named statements tracked in transaction pooling), else 0
 *   bit 4     query_digests on
 *   bit 5     tr_enabled = false (Transaction Replay and the journal's capture off)
 *   bit 6     pool_size = 1 and query_timeout = 5 s; else pool_size = 4 and backend_response_timeout = 5 s
 *   bit 7     the input sends its own startup packet (trust); else the harness logs each client in
 * then steps. A step is an op byte: kind = op & 15; bit 4: hold (queue the bytes, send them with a later
 * DELIVER); bit 5: the client slot (0 or 1) the step is about, whose session's server connection server
 * steps go to; bits 6-7: a variant. n below is one length byte, 255 meaning a 16-bit length follows.
 *    0 CLIENT_RAW    n, bytes                  the client sends them
 *    1 CLIENT_MSG    type, n, body             a framed message (variant: body padded to 1100, 70000,
 *                                              20000 bytes)
 *    2 CLIENT_CANNED index                     a canned message (fuzz_session_server.c's table)
 *    3 CLIENT_QUERY  n, text                   a Query (variant: padded as CLIENT_MSG)
 *    4 CLIENT_EXT    b [n, text]               extended protocol: b & 7 = Parse (reads n, text), Bind,
 *                                              Describe S, Describe P, Execute, Close S, Close P, Sync;
 *                                              (b >> 3) & 3 the statement "", s1, s2, s3; bit 5 the portal
 *                                              "" or p1; bit 6 one parameter (Bind) or one row (Execute)
 *    5 SERVER_RAW    n, bytes                  the server sends them
 *    6 SERVER_MSG    type, n, body             (variant: padded)
 *    7 SERVER_CANNED index
 *    8 SERVER_AUTO                             the fake server answers what it was sent (variant: all,
 *                                              or at most 1, 2, 3 requests)
 *    9 SERVER_FAIL   b                         ... with statement 1 + (b >> 3) failing with error b & 7
 *   10 DELIVER       n                         variant 0: the server's held bytes (n: at most n, 0: all),
 *                                              1: the client's (likewise), 2: everything held, 3: as 2
 *   11 SERVER_CLOSE                            variant 0: FIN, 1: half-close (FIN, still reading), 2:
 *                                              what is held then FIN, 3: FATAL 57P01 then FIN
 *   12 CLIENT_CLOSE                            variant 0: FIN, 1: close, 2: Terminate then FIN, 3: the
 *                                              client stops (or starts again) reading what tern sends
 *   13 TICK          secs                      time moves on (0: 100 ms): the worker's tick runs
 *   14 POOL          [b]                       variant 0: opens are held (or no longer), 1: the oldest
 *                                              open succeeds, 2: it fails with error b, 3: all succeed
 *   15 CLIENT_DIRECT n, bytes                  straight to session_on_client_bytes (RING_NO_BUFFER)
 *                                              when the client's receive is armed, else as CLIENT_RAW
 * A client slot with no session gets a new client (up to FUZZ_SESSIONS_MAX per input). At the end every
 * client closes, the servers answer, the linger passes, and the harness checks that every session was
 * freed, no server connection is still held, every receive buffer went back to the ring, and the
 * worker's lists are empty.
 *
 * A session still there then is a failure (tern would keep it, and its server connection, forever): the
 * harness prints what it waits for, and whether the input scripted the server's bytes or the fake server
 * answered as PostgreSQL would. FUZZ_SESSION_STUCK=report prints each way of being stuck once and goes
 * on (its servers are closed, which must free it), so a campaign is not stopped by a known one.
 *
 * Run: build-fuzz/tests/fuzz/fuzz_session -workers=1 -jobs=1 -max_len=8192 /tmp/session-corpus
 * tests/fuzz/corpus/session. FUZZ_SESSION_TRACE=1 prints every byte each peer sends and gets;
 * FUZZ_SESSION_LOG=3 shows tern's log (debug). The seeds come from gen_session_corpus.py.
 */
#include "main/parts.h"
#include "replay/failovers.h"
#include "digest.h"
#include "dispatch.h"
#include "replay/journal.h"
#include "replay/recover.h"
#include "routing/route.h"
#include "session.h"

#include "fuzz_session.h"

#include "pool/opener.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SLOTS 2u
/* Sessions one input may start: enough for a client after a client, fast enough to run often. */
#define FUZZ_SESSIONS_MAX 6u
#define FUZZ_SERVERS_MAX 24u
#define FUZZ_OPENS_MAX 32u
#define FUZZ_STEPS_MAX 1024u
/* Loop passes one step may take before tern counts as spinning: a bounded input has a bounded answer. */
#define FUZZ_PASSES_MAX 20000u
/* worker.c's WORKER_LINGER_NS: how long an ended session may take to say goodbye. */
#define FUZZ_LINGER_NS (2 * BASE_NS_PER_SEC)
/* Rounds of answers the end of a run waits through: more than any input can pipeline requests that tern
 * sends one at a time (each SET tern.* waits for the answer before it). */
#define FUZZ_FINISH_ROUNDS 64u
/* A small ring: buffers run out (starvation, back pressure) and messages straddle buffers. */
#define FUZZ_RING_ENTRIES 256u
#define FUZZ_RING_BUFFERS 16u
#define FUZZ_RING_BUFFER_SIZE 1024u
/* The ring's own tick never fires during a run: the input's TICK steps stand for it. */
#define FUZZ_RING_TICK_NS (3600 * BASE_NS_PER_SEC)
#define FUZZ_PAD_SIZES {0, 1100, 70000, 20000}

enum fuzz_kind {
	FUZZ_CLIENT_RAW = 0,
	FUZZ_CLIENT_MSG,
	FUZZ_CLIENT_CANNED,
	FUZZ_CLIENT_QUERY,
	FUZZ_CLIENT_EXT,
	FUZZ_SERVER_RAW,
	FUZZ_SERVER_MSG,
	FUZZ_SERVER_CANNED,
	FUZZ_SERVER_AUTO,
	FUZZ_SERVER_FAIL,
	FUZZ_DELIVER,
	FUZZ_SERVER_CLOSE,
	FUZZ_CLIENT_CLOSE,
	FUZZ_TICK,
	FUZZ_POOL,
	FUZZ_CLIENT_DIRECT,
};
#define FUZZ_OP_HOLD 0x10u
#define FUZZ_OP_SLOT 0x20u

struct fuzz_client {
	struct session *s; /* NULL: none yet, or freed */
	int fd;            /* the client's end; -1 when none */
	bool is_reading;   /* the client reads what tern sends it */
	bool is_write_shut;
	struct fuzz_bytes held, out; /* what it will send; what it sent that the socket has not taken */
};

struct fuzz_open {
	struct pool_server *server;
	struct pool_db *db;
};

static struct {
	bool is_ready;
	struct host host; /* its ring lives for the process; everything else is reset per input */
	struct tern_runtime runtime;
	struct pool pool;
	struct digest_shared digests;
	struct tern_config *configs[128];
	struct base_list mailbox; /* granted or failed pool requests, as worker.c's */
	struct fuzz_client clients[FUZZ_SLOTS];
	struct fuzz_server servers[FUZZ_SERVERS_MAX];
	uint32_t server_count;
	struct fuzz_open opens[FUZZ_OPENS_MAX];
	uint32_t open_count;
	bool is_open_held;
	bool is_input_login;
	bool is_server_scripted; /* the input wrote server bytes itself (or cut them), not only the fake server */
	uint32_t sessions_started;
	uint32_t backend_pid;
	uint64_t clock_offset_ns; /* how far the input's TICKs moved time past the clock */
} fz;

/* ---- the pool's environment: opens the input grants or refuses, closes ---- */

static void fuzz_hook_open(struct pool *pool, struct pool_server *server, struct pool_db *db)
{
	(void)pool;
	if (fz.open_count == FUZZ_OPENS_MAX)
		return; /* the request waits until its query_wait_timeout */
	fz.opens[fz.open_count++] = (struct fuzz_open){.server = server, .db = db};
}

static void fuzz_hook_close(struct pool *pool, struct pool_conn *conn)
{
	(void)pool;
	for (uint32_t i = 0; i < fz.server_count; i++)
		if (fz.servers[i].conn == conn)
			fz.servers[i].conn = NULL;
	close(conn->fd);
	pool_conn_free(conn);
}

static void fuzz_socketpair(int fds[2])
{
	FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
}

static void fuzz_open_take(uint32_t i, struct fuzz_open *open)
{
	FUZZ_CHECK(i < fz.open_count);
	*open = fz.opens[i];
	memmove(&fz.opens[i], &fz.opens[i + 1], (fz.open_count - i - 1) * sizeof(fz.opens[0]));
	fz.open_count--;
}

static const struct pool_error fuzz_open_errors[] = {
	{"08006", "could not connect to server: Connection refused"},
	{"57P03", "the database system is starting up"},
	{"53300", "sorry, too many clients already"},
	{"28P01", "password authentication failed for user \"fuzz\""},
	{"3D000", "database \"app\" does not exist"},
	{"28000", "no pg_hba.conf entry"},
};

/* The oldest open fails with error `error`, as the opener reports a failed login. */
static void fuzz_open_refuse(uint8_t error)
{
	struct fuzz_open open;
	fuzz_open_take(0, &open);
	if (!pool_open_begin(&fz.pool, open.server, open.db))
		return; /* nobody waits for it any more */
	const struct pool_error *err = &fuzz_open_errors[error % TERN_ARRAY_LEN(fuzz_open_errors)];
	pool_open_finished(&fz.pool, open.server, open.db, NULL, err, base_now_ns());
}

/* The oldest open succeeds: a new fake server connection, logged in, with the parameters a server
 * reports. */
static void fuzz_open_grant(void)
{
	if (fz.server_count == FUZZ_SERVERS_MAX) {
		fuzz_open_refuse(2);
		return;
	}
	struct fuzz_open open;
	fuzz_open_take(0, &open);
	if (!pool_open_begin(&fz.pool, open.server, open.db))
		return;
	int fds[2];
	fuzz_socketpair(fds);
	struct pool_conn *conn = calloc(1, sizeof(*conn));
	FUZZ_CHECK(conn != NULL);
	conn->fd = fds[0];
	conn->backend_pid = ++fz.backend_pid;
	static const char *const params[][2] = {
		{"server_version", "17.2"}, {"server_encoding", "UTF8"}, {"client_encoding", "UTF8"},
		{"DateStyle", "ISO, MDY"}, {"integer_datetimes", "on"}, {"IntervalStyle", "postgres"},
		{"is_superuser", "off"}, {"session_authorization", "fuzz"}, {"standard_conforming_strings", "on"},
		{"TimeZone", "Etc/UTC"}, {"application_name", ""}, {"in_hot_standby", "off"}};
	for (size_t i = 0; i < TERN_ARRAY_LEN(params); i++)
		params_store(conn->params, &conn->param_count, params[i][0], params[i][1]);
	fuzz_server_init(&fz.servers[fz.server_count++], fds[1], conn);
	pool_db_set_params(&fz.pool, open.db, conn->params, conn->param_count);
	pool_open_finished(&fz.pool, open.server, open.db, conn, NULL, base_now_ns());
}

/* Unless the input holds them, opens succeed as soon as they are asked. True when one was answered. */
static bool fuzz_open_auto(void)
{
	bool any = fz.open_count > 0 && !fz.is_open_held;
	while (fz.open_count > 0 && !fz.is_open_held)
		fuzz_open_grant();
	return any;
}

/* ---- the worker's part, mirrored (worker.c: worker_grant, worker_local_flush, worker_end_pass,
 * worker_on_tick), minus what needs a monitor, threads or listeners ---- */

static void fuzz_request_done(struct host *host, struct pool_request *req)
{
	(void)host;
	base_list_insert_tail(&fz.mailbox, &req->link);
}

static void fuzz_route_cancel(struct tern_runtime *runtime, uint32_t pid, const uint8_t *key, uint32_t key_len)
{
	(void)runtime, (void)pid, (void)key, (void)key_len; /* no server to cancel on */
}

static void fuzz_lookup_done(struct auth_lookup *lookup)
{
	(void)lookup;
	FUZZ_CHECK(!"no auth_query runs here");
}

static const struct host_ops fuzz_host_ops = {
	.request_done = fuzz_request_done, .route_cancel = fuzz_route_cancel, .lookup_done = fuzz_lookup_done};

static void fuzz_grant(struct leg *leg, uint64_t now_ns)
{
	struct session *s = leg->session;
	if (leg->request.conn && s->phase != SESSION_CLOSING) {
		s->stats.wait_ns += now_ns - leg->request.parked_ns;
		s->stats.assigned_ns = now_ns;
	}
	session_on_request_done(leg);
}

static void fuzz_mailbox(void)
{
	struct base_list done;
	base_list_init(&done);
	base_list_splice_tail(&done, &fz.mailbox);
	struct base_list *node;
	uint64_t now = base_now_ns();
	while ((node = base_list_pop_head(&done)) != NULL) {
		struct leg *leg = TERN_CONTAINER_OF(node, struct pool_request, link)->owner;
		fz.host.stats.mailed_grants += leg->request.conn != NULL;
		fuzz_grant(leg, now);
	}
}

static void fuzz_local_flush(void)
{
	struct host *host = &fz.host;
	if (host->local_count == 0)
		return;
	uint64_t now = base_now_ns();
	uint32_t count = host->local_count;
	host->local_count = 0;
	struct pool_conn *released[HOST_LOCAL_CACHE_MAX];
	memcpy(released, host->local_cache, count * sizeof(*released));
	for (uint32_t i = 0; i < count; i++) {
		struct pool_conn *conn = released[i];
		struct leg *leg = NULL;
		struct base_list *node, *tmp;
		base_list_for_each_safe(node, tmp, &host->parked)
		{
			struct leg *waiter = TERN_CONTAINER_OF(node, struct leg, parked_link);
			if (waiter->request.db == conn->db && waiter->request.server == conn->server) {
				leg = waiter;
				break;
			}
		}
		if (!leg) {
			pool_checkin(&fz.pool, conn, now);
		} else if (pool_checkin_to(&fz.pool, conn, &leg->request, now)) {
			host->stats.local_handoffs++;
			fuzz_grant(leg, now);
		}
	}
}

static struct fuzz_client *fuzz_client_of(const struct session *s)
{
	for (uint32_t i = 0; i < FUZZ_SLOTS; i++)
		if (fz.clients[i].s == s)
			return &fz.clients[i];
	return NULL;
}

static void fuzz_end_pass(void)
{
	struct host *host = &fz.host;
	struct base_list *node, *tmp;
	while ((node = base_list_pop_head(&host->ending)) != NULL) {
		struct session *s = TERN_CONTAINER_OF(node, struct session, end.link);
		session_end(s, s->end.later_reason);
	}
	base_list_for_each_safe(node, tmp, &host->starved)
	{
		(void)session_resume_starved(TERN_CONTAINER_OF(node, struct session, starve.link));
	}
	fuzz_local_flush();
	fuzz_mailbox();
	fuzz_local_flush();
	if (runtime_primary(&fz.runtime) != host->recover_primary)
		recover_repoint_parked(host);
	if (host->recover_waiting > 0)
		recover_check_waits(host, base_now_ns());
	while ((node = base_list_pop_head(&host->holds)) != NULL)
		session_hold_now(TERN_CONTAINER_OF(node, struct leg, hold_link));
	while ((node = base_list_pop_head(&host->flush)) != NULL) {
		struct sendq *q = TERN_CONTAINER_OF(node, struct sendq, flush_link);
		q->is_dirty = false;
		sendq_flush(q, &host->ring);
	}
	base_list_for_each_safe(node, tmp, &host->reaping)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (!session_is_reapable(s))
			continue;
		struct fuzz_client *c = fuzz_client_of(s);
		FUZZ_CHECK(c != NULL);
		c->s = NULL;
		session_destroy(s);
	}
}

static void fuzz_tick(void)
{
	struct host *host = &fz.host;
	uint64_t now = base_now_ns() + fz.clock_offset_ns;
	if (host->digests && fz.runtime.digests)
		digest_merge(fz.runtime.digests, host->digests);
	struct base_list *node, *tmp;
	base_list_for_each_safe(node, tmp, &host->sessions)
	{
		session_check_timeouts(TERN_CONTAINER_OF(node, struct session, link), now);
	}
	uint64_t wait_ns = runtime_config(&fz.runtime)->query_wait_timeout_ms * BASE_NS_PER_MS;
	if (wait_ns > 0) {
		base_list_for_each_safe(node, tmp, &host->parked)
		{
			struct leg *leg = TERN_CONTAINER_OF(node, struct leg, parked_link);
			if (leg->request.parked_ns + wait_ns > now)
				break;
			session_on_wait_timeout(leg);
		}
	}
	base_list_for_each_safe(node, tmp, &host->reaping)
	{
		struct session *s = TERN_CONTAINER_OF(node, struct session, link);
		if (s->end.closing_ns + FUZZ_LINGER_NS <= now) /* (as worker.c: the servers of a cut client too) */
			session_linger_expired(s);
	}
	if (host->route_waiting > 0)
		route_check_waits(host, now);
	recover_repoint_parked(host);
	if (host->recover_waiting > 0)
		recover_check_waits(host, now);
}

/* ---- the peers' sockets ---- */

static bool fuzz_is_tracing;

/* FUZZ_SESSION_TRACE=1: what each peer sent and got, printably (for reading a crash's input). */
static void fuzz_trace(const char *who, int index, const uint8_t *data, size_t len)
{
	if (!fuzz_is_tracing)
		return;
	fprintf(stderr, "  %s %d (%zu): ", who, index, len);
	for (size_t i = 0; i < len; i++) {
		if (len > 200 && i == 100) { /* the head and the tail of a long one */
			fputs(" ... ", stderr);
			i = len - 100;
		}
		fputc(data[i] >= 0x20 && data[i] < 0x7f ? data[i] : '.', stderr);
	}
	fputc('\n', stderr);
}

/* Writes what `out` holds as far as the socket takes it; false when nothing moved. */
static bool fuzz_write(int fd, struct fuzz_bytes *out, const char *who, int index)
{
	if (fd < 0 || out->len == 0)
		return false;
	ssize_t n = send(fd, out->data, out->len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n > 0) {
		fuzz_trace(who, index, out->data, (size_t)n);
		fuzz_bytes_consume(out, (uint32_t)n);
		return true;
	}
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
		out->len = 0; /* tern's end is gone */
	return false;
}

/* Reads what tern sent the peers, writes what they release; true when a byte moved. */
static bool fuzz_io(void)
{
	static uint8_t scratch[64 * 1024];
	bool moved = false;
	for (uint32_t i = 0; i < FUZZ_SLOTS; i++) {
		struct fuzz_client *c = &fz.clients[i];
		moved |= fuzz_write(c->fd, &c->out, "client sends", (int)i);
		ssize_t n;
		while (c->fd >= 0 && c->is_reading && (n = recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT)) > 0) {
			fuzz_trace("client gets", (int)i, scratch, (size_t)n);
			moved = true;
		}
	}
	for (uint32_t i = 0; i < fz.server_count; i++) {
		struct fuzz_server *srv = &fz.servers[i];
		moved |= fuzz_write(srv->fd, &srv->out, "server sends", (int)i);
		ssize_t n;
		while (srv->fd >= 0 && !srv->is_eof &&
		       (n = recv(srv->fd, scratch, sizeof(scratch), MSG_DONTWAIT)) >= 0) {
			if (n == 0) {
				srv->is_eof = true;
				break;
			}
			fuzz_trace("server gets", (int)i, scratch, (size_t)n);
			fuzz_bytes_append(&srv->rx, scratch, (uint32_t)n);
			moved = true;
		}
	}
	return moved;
}

/* Runs the loop until nothing moves: every completion that the bytes sent so far cause has run, every
 * answer that can go out has gone. The ring is woken each pass so a pass never blocks. */
static void fuzz_pump(void)
{
	struct ring *ring = &fz.host.ring;
	for (uint32_t pass = 0;; pass++) {
		FUZZ_CHECK(pass < FUZZ_PASSES_MAX); /* tern keeps itself busy on a bounded input */
		bool moved = fuzz_io();
		moved |= fuzz_open_auto();
		uint64_t submitted = ring->stats.submissions, completed = ring->stats.completions;
		ring_wake(ring);
		FUZZ_CHECK(ring_run_once(ring) == 0);
		fuzz_end_pass();
		/* (a quiet pass completes the wake-up's read alone, and re-arms it) */
		if (!moved && ring->stats.completions - completed <= 1 && ring->stats.submissions - submitted <= 1 &&
		    base_list_is_empty(&fz.mailbox))
			break;
	}
	for (uint32_t i = 0; i < FUZZ_SLOTS; i++)
		if (fz.clients[i].s)
			session_assert_invariants(fz.clients[i].s);
}

/* ---- clients ---- */

static void fuzz_startup_packet(struct fuzz_bytes *b)
{
	static const char params[] = "user\0fuzz\0database\0app\0application_name\0fz\0";
	uint8_t header[8];
	proto_write_u32(header, (uint32_t)(sizeof(header) + sizeof(params)));
	proto_write_u32(header + 4, PROTO_VERSION_3_0);
	fuzz_bytes_append(b, header, sizeof(header));
	fuzz_bytes_append(b, params, sizeof(params)); /* the last NUL ends the list */
}

static void fuzz_client_release(struct fuzz_client *c, uint32_t max)
{
	uint32_t n = max == 0 ? c->held.len : TERN_MIN(max, c->held.len);
	fuzz_bytes_append(&c->out, c->held.data, n);
	fuzz_bytes_consume(&c->held, n);
}

/* The slot's client, a new one when it has none (logged in by the harness unless the input does it). */
static struct fuzz_client *fuzz_client(uint32_t slot)
{
	struct fuzz_client *c = &fz.clients[slot];
	if (c->s || fz.sessions_started == FUZZ_SESSIONS_MAX)
		return c;
	if (c->fd >= 0)
		close(c->fd);
	fuzz_bytes_free(&c->held);
	fuzz_bytes_free(&c->out);
	int fds[2];
	fuzz_socketpair(fds);
	c->fd = fds[1];
	c->is_reading = true;
	c->is_write_shut = false;
	c->s = session_create(&fz.host, fds[0], 0);
	FUZZ_CHECK(c->s != NULL);
	fz.sessions_started++;
	if (!fz.is_input_login) {
		fuzz_startup_packet(&c->out);
		fuzz_pump();
	}
	return c;
}

static void fuzz_client_close(struct fuzz_client *c, uint32_t variant)
{
	if (c->fd < 0)
		return;
	switch (variant) {
	case 2:
		fuzz_bytes_message(&c->out, PROTO_FE_TERMINATE, NULL, 0);
		(void)fuzz_write(c->fd, &c->out, "client sends", -1);
		/* fall through */
	case 0:
		if (!c->is_write_shut)
			shutdown(c->fd, SHUT_WR);
		c->is_write_shut = true;
		break;
	case 1:
		close(c->fd);
		c->fd = -1;
		break;
	default:
		c->is_reading = !c->is_reading;
		break;
	}
}

/* ---- servers ---- */

/* The server the step is about: the one the slot's session holds on its primary leg, else the newest
 * still open. NULL when none is. */
static struct fuzz_server *fuzz_server_of(uint32_t slot)
{
	const struct session *s = fz.clients[slot].s;
	const struct pool_conn *conn = s ? session_primary(s)->conn : NULL;
	for (uint32_t i = 0; conn && i < fz.server_count; i++)
		if (fz.servers[i].conn == conn && fz.servers[i].fd >= 0)
			return &fz.servers[i];
	for (uint32_t i = fz.server_count; i-- > 0;)
		if (fz.servers[i].fd >= 0)
			return &fz.servers[i];
	return NULL;
}

static void fuzz_server_release(struct fuzz_server *srv, uint32_t max)
{
	uint32_t n = max == 0 ? srv->held.len : TERN_MIN(max, srv->held.len);
	fuzz_bytes_append(&srv->out, srv->held.data, n);
	fuzz_bytes_consume(&srv->held, n);
}

static void fuzz_server_close(struct fuzz_server *srv, uint32_t variant)
{
	if (variant == 3) {
		srv->held.len = 0;
		fuzz_server_error(&srv->held, 4); /* FATAL 57P01: an administrator's shutdown */
	}
	if (variant >= 2)
		fuzz_server_release(srv, 0);
	(void)fuzz_write(srv->fd, &srv->out, "server sends", -1);
	if (variant == 1) {
		shutdown(srv->fd, SHUT_WR);
		return;
	}
	close(srv->fd);
	srv->fd = -1;
}

/* ---- the input ---- */

struct fuzz_input {
	const uint8_t *p;
	size_t left;
};

static uint8_t fuzz_u8(struct fuzz_input *in)
{
	if (in->left == 0)
		return 0;
	in->left--;
	return *in->p++;
}

static uint32_t fuzz_len(struct fuzz_input *in)
{
	uint32_t n = fuzz_u8(in);
	if (n == 255)
		n = ((uint32_t)fuzz_u8(in) << 8) | fuzz_u8(in);
	return (uint32_t)TERN_MIN((size_t)n, in->left);
}

static const uint8_t *fuzz_take(struct fuzz_input *in, uint32_t n)
{
	const uint8_t *p = in->p;
	in->p += n;
	in->left -= n;
	return p;
}

/* A framed message whose body is `body` padded with 'x' to the variant's size. */
static void fuzz_padded_message(struct fuzz_bytes *b, uint8_t type, const uint8_t *body, uint32_t len, uint32_t variant,
				bool is_cstring)
{
	static const uint32_t pads[] = FUZZ_PAD_SIZES;
	uint32_t total = TERN_MAX(len + is_cstring, pads[variant & 3]);
	uint8_t *msg = malloc(total);
	FUZZ_CHECK(msg != NULL);
	memcpy(msg, body, len);
	memset(msg + len, is_cstring ? ' ' : 'x', total - len);
	if (is_cstring)
		msg[total - 1] = '\0';
	fuzz_bytes_message(b, type, msg, total);
	free(msg);
}

/* CLIENT_EXT: one extended-protocol message from b's fields. */
static void fuzz_extended(struct fuzz_bytes *b, struct fuzz_input *in, uint8_t spec)
{
	static const char *const statements[] = {"", "s1", "s2", "s3"};
	const char *statement = statements[(spec >> 3) & 3];
	const char *portal = (spec & 0x20) ? "p1" : "";
	bool is_one = (spec & 0x40) != 0;
	uint8_t body[600];
	uint32_t n = 0;
#define FUZZ_PUT_STR(str)                                  \
	do {                                               \
		size_t l_ = strlen(str) + 1;               \
		memcpy(body + n, (str), l_);               \
		n += (uint32_t)l_;                         \
	} while (0)
	switch (spec & 7) {
	case 0: { /* Parse */
		uint32_t text_len = fuzz_len(in);
		text_len = TERN_MIN(text_len, 512u); /* (TERN_MIN evaluates its arguments twice) */
		const uint8_t *text = fuzz_take(in, text_len);
		FUZZ_PUT_STR(statement);
		memcpy(body + n, text, text_len);
		n += text_len;
		body[n++] = '\0';
		body[n++] = 0;
		body[n++] = 0; /* no parameter types */
		fuzz_bytes_message(b, PROTO_FE_PARSE, body, n);
		return;
	}
	case 1: /* Bind */
		FUZZ_PUT_STR(portal);
		FUZZ_PUT_STR(statement);
		memcpy(body + n, "\0\0", 2);
		n += 2;
		if (is_one) {
			memcpy(body + n, "\0\1\0\0\0\1" "1", 7);
			n += 7;
		} else {
			memcpy(body + n, "\0\0", 2);
			n += 2;
		}
		memcpy(body + n, "\0\0", 2);
		n += 2;
		fuzz_bytes_message(b, PROTO_FE_BIND, body, n);
		return;
	case 2:
	case 3:
	case 5:
	case 6: /* Describe, Close */
		body[n++] = (spec & 7) == 2 || (spec & 7) == 5 ? 'S' : 'P';
		FUZZ_PUT_STR((spec & 7) == 2 || (spec & 7) == 5 ? statement : portal);
		fuzz_bytes_message(b, (spec & 7) <= 3 ? PROTO_FE_DESCRIBE : PROTO_FE_CLOSE, body, n);
		return;
	case 4: /* Execute */
		FUZZ_PUT_STR(portal);
		proto_write_u32(body + n, is_one ? 1 : 0);
		n += 4;
		fuzz_bytes_message(b, PROTO_FE_EXECUTE, body, n);
		return;
	default:
		fuzz_bytes_message(b, PROTO_FE_SYNC, NULL, 0);
		return;
	}
#undef FUZZ_PUT_STR
}

/* Client bytes straight to the session, as TLS hands over plaintext: only while the client's receive
 * would deliver them (armed, not paused, nothing of the client's still in the socket before them). */
static bool fuzz_client_direct(struct fuzz_client *c, const uint8_t *data, uint32_t len)
{
	struct session *s = c->s;
	if (!s || len == 0 || s->phase == SESSION_CLOSING || !s->client_recv.is_armed || s->client_recv_paused ||
	    s->client_eof || c->held.len > 0 || c->out.len > 0 || c->is_write_shut || c->fd < 0)
		return false;
	uint8_t *copy = malloc(len); /* exactly its size: a read past it is caught */
	FUZZ_CHECK(copy != NULL);
	memcpy(copy, data, len);
	session_on_client_bytes(s, RING_NO_BUFFER, copy, len);
	free(copy);
	return true;
}

static void fuzz_step(struct fuzz_input *in)
{
	uint8_t op = fuzz_u8(in);
	uint32_t kind = op & 15u, slot = (op & FUZZ_OP_SLOT) ? 1 : 0, variant = op >> 6;
	bool is_held = (op & FUZZ_OP_HOLD) != 0;
	struct fuzz_client *c = NULL;
	struct fuzz_server *srv = NULL;
	if (kind <= FUZZ_CLIENT_EXT || kind == FUZZ_CLIENT_DIRECT || kind == FUZZ_CLIENT_CLOSE) {
		c = fuzz_client(slot);
	} else if (kind <= FUZZ_SERVER_FAIL || kind == FUZZ_SERVER_CLOSE ||
		   (kind == FUZZ_DELIVER && variant == 0)) {
		srv = fuzz_server_of(slot);
	}
	switch (kind) {
	case FUZZ_CLIENT_RAW: {
		uint32_t n = fuzz_len(in);
		fuzz_bytes_append(&c->held, fuzz_take(in, n), n);
		break;
	}
	case FUZZ_CLIENT_MSG: {
		uint8_t type = fuzz_u8(in);
		uint32_t n = fuzz_len(in);
		fuzz_padded_message(&c->held, type, fuzz_take(in, n), n, variant, false);
		break;
	}
	case FUZZ_CLIENT_CANNED:
		fuzz_canned_client(&c->held, fuzz_u8(in));
		break;
	case FUZZ_CLIENT_QUERY: {
		uint32_t n = fuzz_len(in);
		fuzz_padded_message(&c->held, PROTO_FE_QUERY, fuzz_take(in, n), n, variant, true);
		break;
	}
	case FUZZ_CLIENT_EXT:
		fuzz_extended(&c->held, in, fuzz_u8(in));
		break;
	case FUZZ_CLIENT_DIRECT: {
		uint32_t n = fuzz_len(in);
		const uint8_t *bytes = fuzz_take(in, n);
		if (!is_held && fuzz_client_direct(c, bytes, n)) {
			fuzz_pump();
			return;
		}
		fuzz_bytes_append(&c->held, bytes, n);
		break;
	}
	case FUZZ_SERVER_RAW:
	case FUZZ_SERVER_MSG:
	case FUZZ_SERVER_CANNED: {
		struct fuzz_bytes *b = srv ? &srv->held : NULL;
		struct fuzz_bytes scratch = {0};
		fz.is_server_scripted |= srv != NULL;
		if (!b)
			b = &scratch; /* no server is open: its operands are read all the same */
		if (kind == FUZZ_SERVER_RAW) {
			uint32_t n = fuzz_len(in);
			fuzz_bytes_append(b, fuzz_take(in, n), n);
		} else if (kind == FUZZ_SERVER_MSG) {
			uint8_t type = fuzz_u8(in);
			uint32_t n = fuzz_len(in);
			fuzz_padded_message(b, type, fuzz_take(in, n), n, variant, false);
		} else {
			fuzz_canned_server(b, fuzz_u8(in));
		}
		fuzz_bytes_free(&scratch);
		break;
	}
	case FUZZ_SERVER_AUTO:
	case FUZZ_SERVER_FAIL: {
		uint8_t spec = kind == FUZZ_SERVER_FAIL ? fuzz_u8(in) : 0;
		if (srv)
			fuzz_server_answer(srv, variant, kind == FUZZ_SERVER_FAIL ? 1u + (spec >> 3) : 0, spec & 7);
		break;
	}
	case FUZZ_DELIVER: {
		uint32_t n = fuzz_u8(in);
		if (variant == 0 && srv) {
			fz.is_server_scripted |= n > 0 && n < srv->held.len;
			fuzz_server_release(srv, n);
		}
		else if (variant == 1)
			fuzz_client_release(&fz.clients[slot], n);
		for (uint32_t i = 0; variant >= 2 && i < fz.server_count; i++)
			fuzz_server_release(&fz.servers[i], 0);
		for (uint32_t i = 0; variant >= 2 && i < FUZZ_SLOTS; i++)
			fuzz_client_release(&fz.clients[i], 0);
		fuzz_pump();
		return;
	}
	case FUZZ_SERVER_CLOSE:
		if (srv)
			fuzz_server_close(srv, variant);
		fuzz_pump();
		return;
	case FUZZ_CLIENT_CLOSE:
		fuzz_client_close(c, variant);
		fuzz_pump();
		return;
	case FUZZ_TICK: {
		uint8_t secs = fuzz_u8(in);
		fz.clock_offset_ns += secs ? secs * BASE_NS_PER_SEC : 100 * BASE_NS_PER_MS;
		fuzz_tick();
		fuzz_pump();
		return;
	}
	case FUZZ_POOL:
		if (variant == 0)
			fz.is_open_held = !fz.is_open_held;
		else if (variant == 1 && fz.open_count > 0)
			fuzz_open_grant();
		else if (variant == 2 && fz.open_count > 0)
			fuzz_open_refuse(fuzz_u8(in));
		while (variant == 3 && fz.open_count > 0)
			fuzz_open_grant();
		fuzz_pump();
		return;
	default:
		FUZZ_CHECK(false);
	}
	if (is_held)
		return;
	if (c)
		fuzz_client_release(c, 0);
	if (srv)
		fuzz_server_release(srv, 0);
	fuzz_pump();
}

/* ---- a run's setup and its end ---- */

static const struct tern_config *fuzz_config(uint8_t bits)
{
	bits &= 0x7f;
	if (fz.configs[bits])
		return fz.configs[bits];
	struct tern_config *cfg = calloc(1, sizeof(*cfg));
	FUZZ_CHECK(cfg != NULL && config_init_defaults(cfg) == 0);
	cfg->pool_mode = (bits & 1) ? CONFIG_POOL_TRANSACTION : CONFIG_POOL_SESSION;
	cfg->tr_mode = (bits >> 1) & 3;
	cfg->max_prepared_statements = (bits & 8) ? 200 : 0;
	cfg->query_digests = (bits & 16) != 0;
	cfg->tr_enabled = (bits & 32) == 0;
	if (bits & 64) {
		cfg->pool_size = 1;
		cfg->query_timeout_ms = 5 * 1000;
	} else {
		cfg->pool_size = 4;
		cfg->backend_response_timeout_secs = 5;
	}
	cfg->client_idle_timeout_ms = 600 * 1000;
	cfg->idle_transaction_timeout_ms = 60 * 1000;
	cfg->query_wait_timeout_ms = 10 * 1000;
	cfg->client_login_timeout_ms = 30 * 1000;
	cfg->server_login_retry_ms = 0; /* a refused open fails its request at once */
	cfg->journal_max_transactions = 64;
	fz.configs[bits] = cfg;
	return cfg;
}

static void fuzz_init_process(void)
{
	const char *log = getenv("FUZZ_SESSION_LOG");
	base_log_level_current = log ? atoi(log) : -1; /* tern's log is noise at this rate */
	fuzz_is_tracing = getenv("FUZZ_SESSION_TRACE") != NULL;
	signal(SIGPIPE, SIG_IGN);
	dispatch_init(tern_parts.observers);
	gates_init(&fz.runtime.gates);
	static struct failover_log failovers;
	failover_log_init(&failovers);
	fz.runtime.failovers = &failovers;
	FUZZ_CHECK(params_tracked_init(&fz.runtime.tracked, NULL) == 0);
	FUZZ_CHECK(digest_shared_init(&fz.digests) == 0);
	fz.runtime.parts = &tern_parts;
	struct ring_params params = {
		.entries = FUZZ_RING_ENTRIES, .buffer_count = FUZZ_RING_BUFFERS, .buffer_size = FUZZ_RING_BUFFER_SIZE};
	char why[256] = "";
	if (ring_init(&fz.host.ring, &params, why, sizeof(why)) < 0) {
		fprintf(stderr, "fuzz_session: ring_init: %s\n", why);
		abort();
	}
	ring_tick_start(&fz.host.ring, FUZZ_RING_TICK_NS); /* arms the wake-up's read, which fuzz_pump uses */
	for (uint32_t i = 0; i < FUZZ_SLOTS; i++)
		fz.clients[i].fd = -1;
	fz.is_ready = true;
}

static void fuzz_begin(uint8_t bits)
{
	const struct tern_config *cfg = fuzz_config(bits);
	struct tern_runtime *rt = &fz.runtime;
	rt->config = cfg;
	struct host *host = &fz.host;
	host_init(host, 0, rt, &fuzz_host_ops); /* its lists and pick; the counters below */
	memset(&host->stats, 0, sizeof(host->stats));
	host->route_waiting = host->route_generation = host->recover_waiting = host->recover_generation = 0;
	host->recover_asked_ns = 0;
	host->recover_primary = NULL;
	host->session_serial = host->session_count = host->pause_waiting_count = host->console_waiting_count = 0;
	host->local_count = 0;
	struct pool_settings settings = {.pool_size = cfg->pool_size};
	struct pool_hooks hooks = {.open = fuzz_hook_open, .close = fuzz_hook_close};
	struct pool_server *primary;
	FUZZ_CHECK(pool_init(&fz.pool, &settings, &hooks) == 0);
	FUZZ_CHECK(pool_server_add(&fz.pool, "primary", "", &primary) == 0);
	rt->pool = &fz.pool;
	rt->primary = primary;
	rt->digests = cfg->query_digests ? &fz.digests : NULL;
	rt->journal = NULL;
	char err[256];
	if (cfg->tr_enabled)
		FUZZ_CHECK(journal_open(&rt->journal, cfg, err, sizeof(err)) == 0);
	base_list_init(&fz.mailbox);
	fz.server_count = fz.open_count = fz.sessions_started = fz.backend_pid = 0;
	fz.is_open_held = fz.is_server_scripted = false;
	fz.is_input_login = (bits & 0x80) != 0;
	fz.clock_offset_ns = 0;
}

/* What a session that is never freed is waiting for, on one line (its legs, and a replay's state). */
static void fuzz_describe(const struct session *s, char *out, size_t size)
{
	int n = snprintf(out, size, "phase %d, ended %s, client %s%s%s%s%s; replay %s", (int)s->phase,
			 session_end_info(s->end.reason)->name, s->end.is_client_cut ? "cut" : "open",
			 s->client_recv.is_armed ? ", receive armed" : "", s->to_client.op.is_armed ? ", send armed" : "",
			 sendq_is_empty(&s->to_client) ? "" : ", bytes queued", s->client_eof ? ", eof" : "",
			 s->replay->is_replaying ? "replaying" : s->replay->is_waiting ? "waiting" : "none");
	const struct base_list *node = s->legs_draining.next;
	for (uint32_t i = 0; n > 0 && (size_t)n < size; i++) {
		const struct leg *leg;
		if (i < LEG_ROLE_COUNT) {
			leg = s->legs[i];
			if (!leg)
				continue;
		} else if (node != &s->legs_draining) {
			leg = TERN_CONTAINER_OF(node, const struct leg, link);
			node = node->next;
		} else {
			break;
		}
		n += snprintf(out + n, size - (size_t)n,
			      "; %s leg: %s, status %c, owes %u (%u hidden), %s, %s%s%s%s",
			      i >= LEG_ROLE_COUNT ? "set-aside" : leg->role == LEG_PRIMARY ? "primary" : "replica",
			      leg->conn ? "connected" : "no connection", leg->tx_status, leg->pending_ready,
			      leg->hidden_ready,
			      proto_stream_is_at_boundary(&leg->stream) ? "between messages" : "mid-message",
			      leg->is_dropping ? "dropping, " : "", leg->recv.is_armed ? "reading" : "not reading",
			      leg->is_request_pending ? ", parked" : "", leg->to_server.op.is_armed ? ", sending" : "");
	}
}

/* The way a session is stuck, coarsely (what it waits for, not how much), to report each way once. */
static uint64_t fuzz_stuck_kind(const struct session *s)
{
	uint64_t h = (uint64_t)s->phase * 31 + s->end.is_client_cut * 7 + s->replay->is_replaying * 3 +
		     fz.is_server_scripted;
	const struct leg *leg = session_primary(s);
	h = h * 131 + (leg->conn != NULL) * 64 + (uint64_t)leg->tx_status + (leg->pending_ready > 0) * 97 +
	    (leg->hidden_ready > 0) * 193 + !proto_stream_is_at_boundary(&leg->stream) * 389;
	return h * 2 + !base_list_is_empty(&s->legs_draining);
}

/* FUZZ_SESSION_STUCK=report: a session still there at the end is described (once for each way it
 * is stuck) and its servers are closed, so the campaign goes on; unset, it is a failure. */
static void fuzz_report_stuck(void)
{
	static uint64_t seen[256];
	static uint32_t seen_count;
	bool is_lenient = getenv("FUZZ_SESSION_STUCK") != NULL;
	for (uint32_t i = 0; i < FUZZ_SLOTS; i++) {
		const struct session *s = fz.clients[i].s;
		if (!s)
			continue;
		uint64_t kind = fuzz_stuck_kind(s);
		bool is_new = true;
		for (uint32_t k = 0; k < seen_count; k++)
			is_new &= seen[k] != kind;
		if (is_new && seen_count < TERN_ARRAY_LEN(seen))
			seen[seen_count++] = kind;
		if (!is_new && is_lenient)
			continue;
		char what[1024];
		fuzz_describe(s, what, sizeof(what));
		fprintf(stderr,
			"fuzz_session: a session is never freed though its servers answered and the linger passed "
			"(%s): %s\n",
			fz.is_server_scripted ? "the input scripted the server's bytes"
					      : "the servers answered as PostgreSQL",
			what);
	}
	if (!is_lenient)
		abort();
}

static bool fuzz_any_session(void)
{
	for (uint32_t i = 0; i < FUZZ_SLOTS; i++)
		if (fz.clients[i].s)
			return true;
	return false;
}

/* Every client leaves; the servers answer what they were still asked (a session pooling reset, say);
 * time passes the linger. Then nothing of the run may be left. */
static void fuzz_finish(void)
{
	for (uint32_t i = 0; i < FUZZ_SLOTS; i++) {
		struct fuzz_client *c = &fz.clients[i];
		c->is_reading = true;
		if (c->s)
			fuzz_client_close(c, 0);
	}
	fz.is_open_held = false;
	fuzz_pump();
	/* (a round a request: a client may have pipelined a few dozen that tern releases one by one) */
	for (uint32_t round = 0; round < FUZZ_FINISH_ROUNDS && fuzz_any_session(); round++) {
		for (uint32_t i = 0; i < fz.server_count; i++) {
			struct fuzz_server *srv = &fz.servers[i];
			if (srv->fd < 0)
				continue;
			fuzz_server_answer(srv, 0, 0, 0);
			fuzz_server_release(srv, 0);
		}
		fuzz_pump();
		if (!fuzz_any_session())
			break;
		fz.clock_offset_ns += FUZZ_LINGER_NS + BASE_NS_PER_SEC;
		fuzz_tick();
		fuzz_pump();
	}
	if (fuzz_any_session()) {
		fuzz_report_stuck();
		for (uint32_t i = 0; i < fz.server_count; i++)
			if (fz.servers[i].fd >= 0)
				fuzz_server_close(&fz.servers[i], 0);
		fuzz_pump();
		fz.clock_offset_ns += FUZZ_LINGER_NS + BASE_NS_PER_SEC;
		fuzz_tick();
		fuzz_pump();
	}
	FUZZ_CHECK(!fuzz_any_session()); /* a session that is never freed, even once its servers are gone */
	struct host *host = &fz.host;
	host_local_flush(host);
	while (fz.open_count > 0) { /* nobody waits for them any more */
		struct fuzz_open open;
		fuzz_open_take(0, &open);
		FUZZ_CHECK(!pool_open_begin(&fz.pool, open.server, open.db));
	}
	FUZZ_CHECK(base_list_is_empty(&fz.mailbox));
	FUZZ_CHECK(pool_is_idle(&fz.pool)); /* no server connection is held by a session that is gone */
	for (uint32_t g = 0; g < RING_BUFFER_GROUPS; g++)
		FUZZ_CHECK(host->ring.groups[g].out == 0); /* every receive buffer went back to the ring */
	FUZZ_CHECK(base_list_is_empty(&host->sessions) && base_list_is_empty(&host->reaping));
	FUZZ_CHECK(base_list_is_empty(&host->parked) && base_list_is_empty(&host->flush));
	FUZZ_CHECK(base_list_is_empty(&host->starved) && base_list_is_empty(&host->ending));
	FUZZ_CHECK(base_list_is_empty(&host->holds) && base_list_is_empty(&host->route_waits));
	FUZZ_CHECK(base_list_is_empty(&host->recover_waits) && host->recover_waiting == 0);
	FUZZ_CHECK(host->session_count == 0 && fz.runtime.client_count == 0);
	pool_deinit(&fz.pool);
	for (uint32_t i = 0; i < fz.server_count; i++) {
		if (fz.servers[i].fd >= 0)
			close(fz.servers[i].fd);
		fuzz_server_deinit(&fz.servers[i]);
	}
	for (uint32_t i = 0; i < FUZZ_SLOTS; i++) {
		struct fuzz_client *c = &fz.clients[i];
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		fuzz_bytes_free(&c->held);
		fuzz_bytes_free(&c->out);
	}
	journal_close(fz.runtime.journal);
	fz.runtime.journal = NULL;
	free(host->classify_cache);
	host->classify_cache = NULL;
	free(host->digests);
	host->digests = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (!fz.is_ready)
		fuzz_init_process();
	struct fuzz_input in = {.p = data + 1, .left = size - 1};
	fuzz_begin(data[0]);
	(void)fuzz_client(0); /* the first client, logged in unless the input logs in itself */
	for (uint32_t steps = 0; in.left > 0 && steps < FUZZ_STEPS_MAX; steps++)
		fuzz_step(&in);
	fuzz_finish();
	return 0;
}
