/*
 * test_leg.c — a session's server legs over a real ring: a leg is attached from the pool, dropped and
 * replaced while its session stays open, the dropped one drains aside and its connection is discarded,
 * and the new leg relays server bytes to the client; a lost connection goes through the session's one
 * decision. Client and server sockets are AF_UNIX socketpairs (no network); the pool is the real one
 * with hooks that record opens and closes; the test completes ops with ring_run_once and never sleeps.
 * Over TLS (suite leg_tls): a leg whose connection holds an adopted client tls_conn, the far end of its
 * socketpair played by the test as a tern server tls_conn pumped by hand: plaintext both ways (past the
 * 40 KiB output bound, across partial sends), the wire block's share in idleness and reaping, and what
 * ends the connection (garbage, the server's close_notify).
 */
#include "dispatch.h"
#include "main/parts.h"
#include "replay/failovers.h"
#include "session.h"
#include "tls.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/* Completions one test may wait for before it gives up (each step needs a handful). */
#define TEST_PASSES_MAX 64u

struct fixture {
	struct tern_config config;
	struct tern_runtime runtime;
	struct failover_log failovers;
	struct pool pool;
	struct pool_server *server;
	struct host host;
	struct pool_request *granted; /* the last request host_ops.request_done received */
	uint32_t opens, closes;
	struct pool_conn *closed[8];
	int client[2]; /* [0] the session's socket, [1] the test's client end */
};

static struct fixture fx;

static void hook_open(struct pool *pool, struct pool_server *server, struct pool_db *db)
{
	(void)pool, (void)server, (void)db;
	fx.opens++;
}

static void hook_close(struct pool *pool, struct pool_conn *conn)
{
	(void)pool;
	cr_assert_lt(fx.closes, TERN_ARRAY_LEN(fx.closed));
	fx.closed[fx.closes++] = conn;
	close(conn->fd);
	/* freed at teardown: the test compares pointers after the close */
}

static void ops_request_done(struct host *host, struct pool_request *req)
{
	(void)host;
	fx.granted = req;
}

static void ops_route_cancel(struct tern_runtime *runtime, uint32_t pid, const uint8_t *key, uint32_t key_len)
{
	(void)runtime, (void)pid, (void)key, (void)key_len;
}

static void ops_lookup_done(struct auth_lookup *lookup)
{
	(void)lookup;
	cr_assert_fail("no login runs here");
}

static const struct host_ops test_host_ops = {
	.request_done = ops_request_done, .route_cancel = ops_route_cancel, .lookup_done = ops_lookup_done};

static void setup(void)
{
	memset(&fx, 0, sizeof(fx));
	cr_assert_eq(config_init_defaults(&fx.config), 0);
	fx.config.pool_mode = CONFIG_POOL_SESSION;
	fx.runtime.config = &fx.config;
	fx.runtime.parts = &tern_parts;
	dispatch_init(tern_parts.observers);
	failover_log_init(&fx.failovers);
	fx.runtime.failovers = &fx.failovers;
	cr_assert_eq(params_tracked_init(&fx.runtime.tracked, NULL), 0);
	struct pool_settings settings = {.pool_size = 4};
	struct pool_hooks hooks = {.open = hook_open, .close = hook_close};
	cr_assert_eq(pool_init(&fx.pool, &settings, &hooks), 0);
	cr_assert_eq(pool_server_add(&fx.pool, "primary", "", &fx.server), 0);
	fx.runtime.pool = &fx.pool;
	fx.runtime.primary = fx.server;
	host_init(&fx.host, 0, &fx.runtime, &test_host_ops);
	struct ring_params params = {.entries = 64, .buffer_count = 16, .buffer_size = 4096};
	char why[256] = "";
	cr_assert_eq(ring_init(&fx.host.ring, &params, why, sizeof(why)), 0, "ring_init: %s", why);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fx.client), 0);
	cr_assert_eq(fcntl(fx.client[1], F_SETFL, O_NONBLOCK), 0);
}

static void teardown(void)
{
	close(fx.client[1]);
	ring_deinit(&fx.host.ring);
	pool_deinit(&fx.pool);
	for (uint32_t i = 0; i < fx.closes; i++)
		free(fx.closed[i]);
	params_tracked_deinit(&fx.runtime.tracked);
	failover_log_deinit(&fx.failovers);
	config_deinit(&fx.config);
}

TestSuite(leg, .init = setup, .fini = teardown, .timeout = 20);

/* What the worker does at the end of a pass: the queued sends go, released connections go back. */
static void end_pass(void)
{
	struct base_list *node;
	while ((node = base_list_pop_head(&fx.host.flush)) != NULL) {
		struct sendq *q = TERN_CONTAINER_OF(node, struct sendq, flush_link);
		q->is_dirty = false;
		sendq_flush(q, &fx.host.ring);
	}
	host_local_flush(&fx.host);
}

static void run_until(bool (*done)(void *), void *arg)
{
	for (uint32_t i = 0; i < TEST_PASSES_MAX && !done(arg); i++) {
		cr_assert_eq(ring_run_once(&fx.host.ring), 0);
		end_pass();
	}
	cr_assert(done(arg), "not done after %u passes", TEST_PASSES_MAX);
}

/* A logged-in session whose primary leg holds a new connection (server end in *server_end). */
static struct session *session_with_connection(int *server_end)
{
	struct session *s = session_create(&fx.host, fx.client[0], 0);
	cr_assert_not_null(s);
	s->phase = SESSION_READY;
	s->db = pool_db_get(&fx.pool, "alice", "app", "", NULL, 0);
	cr_assert_not_null(s->db);
	struct leg *leg = session_primary(s);
	uint32_t opens = fx.opens;
	session_acquire(s, leg);
	cr_assert(leg->is_request_pending, "nothing free: the request parks");
	cr_assert_eq(fx.opens, opens + 1, "and the pool opens a connection");
	int fds[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
	cr_assert_eq(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
	struct pool_conn *conn = calloc(1, sizeof(*conn));
	cr_assert_not_null(conn);
	conn->fd = fds[0];
	conn->backend_pid = 4242;
	pool_open_finished(&fx.pool, fx.server, s->db, conn, NULL, base_now_ns());
	cr_assert_eq(fx.granted, &leg->request, "the new connection goes to the parked request");
	session_on_request_done(leg);
	cr_assert_eq(leg->conn, conn);
	cr_assert(leg->recv.is_armed, "its receive is armed");
	*server_end = fds[1];
	return s;
}

static bool is_reapable(void *arg) { return session_is_reapable(arg); }

static bool leg_recv_is_disarmed(void *arg) { return !((struct leg *)arg)->recv.is_armed; }

static bool server_has_bytes(void *arg)
{
	uint8_t byte;
	return recv(*(int *)arg, &byte, 1, MSG_PEEK) == 1;
}

static void end_and_free(struct session *s)
{
	session_end(s, SESSION_END_CLIENT_CLOSED);
	session_linger_expired(s); /* cut now: the test has no ticks */
	run_until(is_reapable, s);
	session_destroy(s);
}

static bool leg_has_no_connection(void *arg) { return ((struct leg *)arg)->conn == NULL; }

static bool client_has_bytes(void *arg)
{
	uint8_t *out = arg;
	return recv(fx.client[1], out, 6, MSG_PEEK) == 6;
}

Test(leg, a_leg_is_dropped_and_replaced_while_its_session_stays_open)
{
	int server_end;
	struct session *s = session_with_connection(&server_end);
	struct leg *old = session_primary(s);
	struct pool_conn *old_conn = old->conn;

	struct leg *leg = session_replace_leg(s, LEG_PRIMARY);
	cr_assert_not_null(leg);
	cr_assert_neq(leg, old);
	cr_assert_eq(session_primary(s), leg, "the role has the new leg");
	cr_assert_null(leg->conn, "which waits for a connection");
	cr_assert(old->is_dropping, "the old one is shut");
	cr_assert(base_list_is_linked(&old->link), "and drains aside while its receive is armed");
	run_until(leg_has_no_connection, old);
	cr_assert_eq(fx.closes, 1);
	cr_assert_eq(fx.closed[0], old_conn, "its connection is discarded, never reused");
	cr_assert_eq(s->phase, SESSION_READY, "a dropped leg is no loss: the session stays, no decision is made");
	cr_assert_eq(s->end.reason, SESSION_END_NONE);
	close(server_end);

	/* The new leg gets a connection of its own and relays what the server says. */
	session_acquire(s, leg);
	cr_assert(leg->is_request_pending);
	int fds[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
	struct pool_conn *conn = calloc(1, sizeof(*conn));
	cr_assert_not_null(conn);
	conn->fd = fds[0];
	pool_open_finished(&fx.pool, fx.server, s->db, conn, NULL, base_now_ns());
	cr_assert_eq(fx.granted, &leg->request);
	session_on_request_done(leg);
	cr_assert_eq(leg->conn, conn);
	static const uint8_t notice[] = {'Z', 0, 0, 0, 5, 'I'};
	cr_assert_eq(write(fds[1], notice, sizeof(notice)), (ssize_t)sizeof(notice));
	uint8_t got[6];
	run_until(client_has_bytes, got);
	cr_assert_arr_eq(got, notice, sizeof(notice), "the server's bytes reach the client through the new leg");
	end_and_free(s);
	close(fds[1]);
	cr_assert_eq(fx.closes, 2, "the second connection is discarded at the end too (it was cut)");
}

static bool has_ended(void *arg) { return ((struct session *)arg)->phase == SESSION_CLOSING; }

static bool goodbye_is_out(void *arg) { return ((struct session *)arg)->end.is_client_fin_sent; }

Test(leg, a_lost_connection_goes_through_the_sessions_one_decision)
{
	int server_end;
	struct session *s = session_with_connection(&server_end);
	close(server_end); /* the server goes away between two transactions */
	run_until(has_ended, s);
	cr_assert_eq(s->end.reason, SESSION_END_SERVER_LOST);
	cr_assert_eq(fx.host.stats.ended[SESSION_END_SERVER_LOST], 1);
	run_until(goodbye_is_out, s);
	uint8_t buf[256];
	ssize_t n = recv(fx.client[1], buf, sizeof(buf), 0);
	cr_assert_gt(n, 5);
	cr_assert_eq(buf[0], 'E', "the client is told");
	/* (no observer records this session, as under tr_mode = none: 57P01, in either pool mode) */
	cr_assert_not_null(memmem(buf, (size_t)n, "57P01", 5), "with 57P01");
	cr_assert_eq(recv(fx.client[1], buf, sizeof(buf), 0), 0, "then FIN");
	cr_assert_not(session_is_reapable(s), "tern still reads what the client sends until it closes too");
	shutdown(fx.client[1], SHUT_WR);
	run_until(is_reapable, s);
	cr_assert_eq(fx.closes, 1, "the lost connection is discarded");
	session_destroy(s);
}

Test(leg, a_leg_starved_for_buffers_when_its_session_ends_reads_its_reset_answer)
{
	int server_end;
	struct session *s = session_with_connection(&server_end);
	struct leg *leg = session_primary(s);
	/* What a receive that found no buffer leaves (leg_recv_done, -ENOBUFS): the leg waits for buffers,
	 * its receive not armed. */
	leg->is_starved = true;
	session_starve(s, HOST_BUFFERS_SERVER);
	ring_cancel(&fx.host.ring, &leg->recv);
	run_until(leg_recv_is_disarmed, leg);
	session_end(s, SESSION_END_CLIENT_TERMINATE); /* told nothing: the client cut at once */
	cr_assert_not(leg->is_starved, "the ended session no longer waits on the starved list for it");
	cr_assert(leg->recv.is_armed, "the leg reads again: the DISCARD ALL's answer is coming");
	uint8_t query[64];
	run_until(server_has_bytes, &server_end);
	cr_assert_gt(recv(server_end, query, sizeof(query), 0), 5, "the reset went out");
	static const uint8_t answer[] = {'C', 0, 0, 0, 16, 'D', 'I', 'S', 'C', 'A', 'R', 'D', ' ', 'A', 'L', 'L', 0,
					 'Z', 0, 0, 0, 5, 'I'};
	cr_assert_eq(write(server_end, answer, sizeof(answer)), (ssize_t)sizeof(answer));
	run_until(is_reapable, s);
	cr_assert_eq(fx.closes, 0, "the connection went back to the pool, reset, not discarded");
	session_destroy(s);
	close(server_end);
}

Test(leg, without_transaction_replay_the_decision_ends_the_session_for_every_fault)
{
	static const struct session_parts parts = {0}; /* no replay.lost: what a session below the relay gets */
	struct session s = {.parts = &parts};
	struct leg leg = {0};
	enum leg_fault faults[] = {LEG_FAULT_CLOSED, LEG_FAULT_MALFORMED, LEG_FAULT_REFUSED};
	enum session_end_reason reasons[] = {SESSION_END_SERVER_LOST, SESSION_END_SERVER_LOST, SESSION_END_SERVER_REFUSED};
	for (size_t i = 0; i < TERN_ARRAY_LEN(faults); i++) {
		struct session_lost_decision d = session_decide_lost(&s, &leg, faults[i]);
		cr_assert_eq(d.action, SESSION_LOST_END);
		cr_assert_eq(d.reason, reasons[i]);
	}
}

/* ---- a leg over TLS: the test plays the server by hand on the far end of the leg's socket ---- */

/* Plaintext either side may collect in one test. */
#define TLS_COLLECT_MAX (512u * 1024u)
/* Passes a TLS test may take: each waits for a completion or the tick, so a leg that stalls fails the
 * test within a few seconds instead of hanging it. */
#define TLS_PASSES_MAX 1000u
#define TLS_TICK_NS (5ull * 1000 * 1000)
/* Handshake rounds before the test gives up: TLS 1.3 needs 2. */
#define TLS_ROUNDS_MAX 32

struct tls_fixture {
	char dir[64];
	char cert_path[128], key_path[128];
	struct tls_context *ctx;
	struct tls_conn *server; /* the test's end: a tern server connection */
	struct tls_conn *client; /* the leg's: an OpenSSL client's, adopted */
	int server_fd;           /* the test's end of the socketpair (the leg's is conn->fd) */
	struct pool_db *db;
	struct pool_request request;
	struct pool_conn *conn;
	struct leg *leg;
	/* What the leg's ops saw. */
	uint8_t *got;
	size_t got_len, got_want;
	uint32_t got_calls, got_foreign; /* on_bytes calls; those whose buffer id was not RING_NO_BUFFER */
	uint32_t got_call_max;           /* the most plaintext one call carried */
	uint32_t progress, starved, lost;
	enum leg_fault fault;
	bool is_lost_shut; /* on_lost found the leg already shut (is_dropping) */
	/* What reached the server's end, decrypted. */
	uint8_t *heard;
	size_t heard_len, heard_want;
	bool is_server_eof;
};

static struct tls_fixture tx;

static int tls_on_bytes(struct leg *leg, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	cr_assert_eq(leg, tx.leg);
	tx.got_calls++;
	if (buffer_id != RING_NO_BUFFER)
		tx.got_foreign++;
	tx.got_call_max = TERN_MAX(tx.got_call_max, len);
	cr_assert_leq(len, TLS_COLLECT_MAX - tx.got_len);
	memcpy(tx.got + tx.got_len, data, len);
	tx.got_len += len;
	return 0;
}

static void tls_on_progress(struct leg *leg)
{
	cr_assert_eq(leg, tx.leg);
	tx.progress++;
}

static void tls_on_starved(struct leg *leg)
{
	cr_assert_eq(leg, tx.leg);
	tx.starved++;
}

static void tls_on_lost(struct leg *leg, enum leg_fault fault)
{
	cr_assert_eq(leg, tx.leg);
	tx.lost++;
	tx.fault = fault;
	tx.is_lost_shut = leg->is_dropping;
}

static const struct leg_ops tls_leg_ops = {
	.on_bytes = tls_on_bytes, .on_progress = tls_on_progress, .on_starved = tls_on_starved, .on_lost = tls_on_lost};

static void tls_request_done(struct pool_request *req) { (void)req; }

/* A throwaway server identity: an EC P-256 key and a self-signed certificate, in tx.dir. */
static void tls_identity_write(void)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	cr_assert_not_null(key);
	X509 *cert = X509_new();
	cr_assert_not_null(cert);
	cr_assert_eq(X509_set_version(cert, 2), 1);
	cr_assert_eq(ASN1_INTEGER_set(X509_get_serialNumber(cert), 1), 1);
	cr_assert_not_null(X509_gmtime_adj(X509_getm_notBefore(cert), -3600));
	cr_assert_not_null(X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600));
	cr_assert_eq(X509_set_pubkey(cert, key), 1);
	X509_NAME *name = X509_get_subject_name(cert);
	cr_assert_eq(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"server", -1, -1, 0), 1);
	cr_assert_eq(X509_set_issuer_name(cert, name), 1);
	cr_assert_gt(X509_sign(cert, key, EVP_sha256()), 0);
	FILE *f = fopen(tx.cert_path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(PEM_write_X509(f, cert), 1);
	cr_assert_eq(fclose(f), 0);
	f = fopen(tx.key_path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
	cr_assert_eq(fclose(f), 0);
	X509_free(cert);
	EVP_PKEY_free(key);
}

static void tls_setup(void)
{
	setup();
	memset(&tx, 0, sizeof(tx));
	tx.server_fd = -1;
	tx.got = malloc(TLS_COLLECT_MAX);
	tx.heard = malloc(TLS_COLLECT_MAX);
	cr_assert(tx.got != NULL && tx.heard != NULL);
	snprintf(tx.dir, sizeof(tx.dir), "/tmp/tern-test-leg-tls-XXXXXX");
	cr_assert_not_null(mkdtemp(tx.dir));
	snprintf(tx.cert_path, sizeof(tx.cert_path), "%s/server.crt", tx.dir);
	snprintf(tx.key_path, sizeof(tx.key_path), "%s/server.key", tx.dir);
	tls_identity_write();
	struct tls_settings settings = {.cert_file = tx.cert_path, .key_file = tx.key_path};
	char err[512] = "";
	int rc = tls_context_create(&settings, &tx.ctx, err, sizeof(err));
	cr_assert_eq(rc, 0, "tls_context_create: %d %s", rc, err);
	/* Wakes ring_run_once when nothing completes, so the bounded loops end a stalled test. */
	ring_tick_start(&fx.host.ring, TLS_TICK_NS);
}

static void tls_teardown(void)
{
	if (tx.db)
		pool_db_put(&fx.pool, tx.db);
	teardown(); /* the connection and the leg's end of the socket went to hook_close (or go at pool_deinit) */
	if (tx.client)
		tls_conn_destroy(tx.client); /* the pool's tls_close would in tern; the test's close hook does not */
	if (tx.server)
		tls_conn_destroy(tx.server);
	if (tx.server_fd >= 0)
		close(tx.server_fd);
	if (tx.ctx)
		tls_context_destroy(tx.ctx);
	unlink(tx.cert_path);
	unlink(tx.key_path);
	rmdir(tx.dir);
	free(tx.got);
	free(tx.heard);
}

TestSuite(leg_tls, .init = tls_setup, .fini = tls_teardown, .timeout = 30);

/* Bytes waiting on a socket, without taking them. */
static size_t socket_waiting(int fd)
{
	uint8_t byte;
	ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
	return n > 0 ? (size_t)n : 0;
}

/* Reads what reached the server's end and decrypts it into tx.heard. True when a byte came. */
static bool server_hear(void)
{
	uint8_t chunk[16384];
	bool is_moved = false;
	for (;;) {
		ssize_t n = recv(tx.server_fd, chunk, sizeof(chunk), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno == ECONNRESET)) {
			tx.is_server_eof = true;
			return is_moved;
		}
		if (n < 0) {
			cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "server recv: %s", strerror(errno));
			return is_moved;
		}
		is_moved = true;
		for (ssize_t at = 0; at < n;) {
			int fed = tls_conn_feed_ciphertext(tx.server, chunk + at, (uint32_t)(n - at));
			cr_assert_geq(fed, 0, "server feed: %d %s", fed, tls_conn_error_text(tx.server));
			at += fed;
			int plain;
			while ((plain = tls_conn_read_plaintext(tx.server, tx.heard + tx.heard_len,
								(uint32_t)(TLS_COLLECT_MAX - tx.heard_len))) > 0)
				tx.heard_len += (size_t)plain;
			cr_assert_eq(plain, 0, "server read: %d %s", plain, tls_conn_error_text(tx.server));
			cr_assert_lt(tx.heard_len, TLS_COLLECT_MAX);
		}
	}
}

/* The handshake's pump: the client's flight into the server, the server's onto the socket. */
static bool handshake_pump(void)
{
	bool is_moved = false;
	uint8_t chunk[16384];
	ssize_t n;
	while ((n = recv(tx.server_fd, chunk, sizeof(chunk), MSG_DONTWAIT)) > 0) {
		is_moved = true;
		for (ssize_t at = 0; at < n;) {
			int fed = tls_conn_feed_ciphertext(tx.server, chunk + at, (uint32_t)(n - at));
			cr_assert_geq(fed, 0, "feed: %d %s", fed, tls_conn_error_text(tx.server));
			at += fed;
			uint8_t plain[256];
			int rc = tls_conn_read_plaintext(tx.server, plain, sizeof(plain));
			cr_assert_eq(rc, 0, "server handshake: %d %s", rc, tls_conn_error_text(tx.server));
		}
	}
	cr_assert(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "recv: %zd %s", n, strerror(errno));
	const uint8_t *data;
	uint32_t len;
	while ((len = tls_conn_peek_ciphertext(tx.server, &data)) > 0) {
		ssize_t sent = send(tx.server_fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		cr_assert_gt(sent, 0, "send: %s", strerror(errno));
		tls_conn_consume_ciphertext(tx.server, (uint32_t)sent);
		is_moved = true;
	}
	return is_moved;
}

/* A leg attached to a connection over TLS: a plain OpenSSL client made the handshake on the leg's end
 * of a socketpair (as libpq does) with the test's server on the other, then tls_conn_adopt took it over
 * as the connection's tls. sndbuf > 0: the leg's socket's send buffer (SO_SNDBUF). Nothing is armed. */
static struct leg *tls_leg_attached(int sndbuf)
{
	int fds[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
	cr_assert_eq(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
	cr_assert_eq(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0); /* as libpq leaves its socket */
	tx.server_fd = fds[0];
	cr_assert_eq(tls_conn_create(tx.ctx, &tx.server), 0);
	SSL_CTX *client_ctx = SSL_CTX_new(TLS_client_method());
	cr_assert_not_null(client_ctx);
	SSL_CTX_set_verify(client_ctx, SSL_VERIFY_NONE, NULL);
	SSL *ssl = SSL_new(client_ctx);
	SSL_CTX_free(client_ctx); /* the SSL keeps its own reference */
	cr_assert_not_null(ssl);
	cr_assert_eq(SSL_set_fd(ssl, fds[1]), 1);
	SSL_set_connect_state(ssl);
	for (int round = 0;; round++) {
		cr_assert_lt(round, TLS_ROUNDS_MAX, "the handshake did not settle");
		int rc = SSL_do_handshake(ssl);
		int kind = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, rc);
		cr_assert(kind == SSL_ERROR_NONE || kind == SSL_ERROR_WANT_READ, "client handshake: %d %s", kind,
			  ERR_error_string(ERR_peek_last_error(), NULL));
		bool is_moved = handshake_pump();
		if (rc == 1 && tls_conn_is_handshake_done(tx.server))
			break;
		cr_assert(is_moved || rc == 1, "the handshake stalled");
	}
	cr_assert_eq(socket_waiting(fds[0]), 0, "each side read all the other sent");
	cr_assert_eq(socket_waiting(fds[1]), 0);
	cr_assert_eq(tls_conn_adopt(ssl, &tx.client), 0);
	SSL_free(ssl); /* the adopted connection keeps its own reference */
	if (sndbuf > 0)
		cr_assert_eq(setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);

	/* The connection comes from the pool, as a login's would. */
	tx.db = pool_db_get(&fx.pool, "alice", "app", "", NULL, 0);
	cr_assert_not_null(tx.db);
	tx.request.db = tx.db;
	tx.request.server = fx.server;
	tx.request.on_done = tls_request_done;
	uint32_t opens = fx.opens;
	cr_assert_eq(pool_checkout(&fx.pool, &tx.request, base_now_ns()), POOL_CHECKOUT_PARKED);
	cr_assert_eq(fx.opens, opens + 1);
	struct pool_conn *conn = calloc(1, sizeof(*conn));
	cr_assert_not_null(conn);
	conn->fd = fds[1];
	conn->backend_pid = 4343;
	conn->tls = tx.client;
	/* The leg never ends TLS itself (only pool/opener.c's close calls tls_close); here the pool's close
	 * is hook_close, and the test destroys tx.client. */
	conn->tls_close = NULL;
	snprintf(conn->tls_name, sizeof(conn->tls_name), "%s/%s", tls_conn_protocol_name(tx.client),
		 tls_conn_cipher_name(tx.client));
	pool_open_finished(&fx.pool, fx.server, tx.db, conn, NULL, base_now_ns());
	cr_assert_eq(tx.request.conn, conn, "the new connection goes to the parked request");
	tx.conn = conn;

	struct leg *leg = leg_create(NULL, &fx.host, &tls_leg_ops, LEG_PRIMARY, 0);
	cr_assert_not_null(leg);
	tx.leg = leg;
	leg_attach(leg, conn);
	cr_assert_not_null(leg->to_server.filter, "a TLS connection's queue is encrypted at flush time");
	return leg;
}

/* Runs the ring, the server's end hearing between passes, until done. */
static void tls_run_until(bool (*done)(void), const char *what)
{
	for (uint32_t pass = 0; pass < TLS_PASSES_MAX && !done(); pass++) {
		(void)server_hear();
		if (done())
			break;
		cr_assert_eq(ring_run_once(&fx.host.ring), 0);
	}
	cr_assert(done(), "%s: not after %u passes", what, TLS_PASSES_MAX);
}

static bool tls_leg_is_reapable(void) { return leg_is_reapable(tx.leg); }

/* What the session does for a dropped leg: reap it once its ops ended (a completion may have already). */
static bool tls_leg_is_reaped(void) { return leg_reap(tx.leg) && leg_is_reapable(tx.leg); }

static bool tls_got_wanted(void) { return tx.got_len >= tx.got_want; }

static bool tls_heard_wanted(void) { return tx.heard_len >= tx.heard_want; }

static bool tls_is_lost(void) { return tx.lost > 0; }

static bool tls_wire_is_done(void) { return !tx.leg->wire.op.is_armed; }

static uint32_t tls_progress_mark;

static bool tls_progress_moved(void) { return tx.progress > tls_progress_mark; }

/* Drops the leg and waits until nothing of it is in flight, then frees it. */
static void tls_leg_end(struct leg *leg)
{
	uint32_t lost = tx.lost;
	leg_drop(leg);
	tls_run_until(tls_leg_is_reaped, "the dropped leg's ops end");
	cr_assert_null(leg->conn, "its connection is discarded");
	cr_assert_null(leg->wire.block);
	cr_assert_eq(tx.lost, lost, "a dropped leg is only reaped: no loss is reported");
	leg_destroy(leg);
	tx.leg = NULL;
}

/* The server's ciphertext for data[0..len) into out (cap bytes); returns its length. */
static size_t server_seal(const void *data, size_t len, uint8_t *out, size_t cap)
{
	const uint8_t *p = data;
	size_t at = 0, out_len = 0;
	for (uint32_t pass = 0; at < len; pass++) {
		cr_assert_lt(pass, len / TLS_RECORD_PLAINTEXT_MAX + 8);
		int n = tls_conn_write_plaintext(tx.server, p + at, (uint32_t)(len - at));
		cr_assert_gt(n, 0, "server write: %d %s", n, tls_conn_error_text(tx.server));
		at += (size_t)n;
		out_len += tls_conn_take_ciphertext(tx.server, out + out_len, (uint32_t)(cap - out_len));
		cr_assert_eq(tls_conn_ciphertext_len(tx.server), 0, "out of room for the server's ciphertext");
	}
	return out_len;
}

/* Writes bytes to the server's end of the socket, running the ring while it is full. */
static void server_write(const void *data, size_t len)
{
	const uint8_t *p = data;
	size_t at = 0;
	for (uint32_t pass = 0; at < len; pass++) {
		cr_assert_lt(pass, TLS_PASSES_MAX, "the leg does not read");
		ssize_t n = send(tx.server_fd, p + at, len - at, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			at += (size_t)n;
			continue;
		}
		cr_assert(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "server send: %s", strerror(errno));
		cr_assert_eq(ring_run_once(&fx.host.ring), 0);
	}
}

/* Where two byte strings first differ (len when they do not), for failure messages. */
static size_t first_difference(const uint8_t *a, const uint8_t *b, size_t len)
{
	size_t i = 0;
	while (i < len && a[i] == b[i])
		i++;
	return i;
}

static const uint8_t msg_query[] = {'Q', 0, 0, 0, 13, 'S', 'E', 'L', 'E', 'C', 'T', ' ', '1', 0};
static const uint8_t msg_sync[] = {'S', 0, 0, 0, 4};
static const uint8_t msg_ready[] = {'Z', 0, 0, 0, 5, 'I'};

static void pattern(uint8_t *data, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++) {
		seed = seed * 1103515245u + 12345u;
		data[i] = (uint8_t)(seed >> 16);
	}
}

/* Queues a copy of data toward the server and appends it to what the server must hear. */
static void tls_queue(struct leg *leg, const void *data, uint32_t len, uint8_t *expected, size_t *total)
{
	cr_assert_eq(sendq_push_copy(&leg->to_server, data, len), 0);
	cr_assert_leq(*total + len, TLS_COLLECT_MAX);
	memcpy(expected + *total, data, len);
	*total += len;
}

/* Queues a few small messages, then over 100 KiB in all (one 70 kB block and forty 1,000-byte slices),
 * then flushes once, as the end of a pass does. Returns the total; expected holds the bytes. */
static size_t tls_queue_past_the_bound(struct leg *leg, uint8_t *expected)
{
	size_t total = 0;
	tls_queue(leg, msg_query, sizeof(msg_query), expected, &total);
	for (int i = 0; i < 3; i++)
		tls_queue(leg, msg_sync, sizeof(msg_sync), expected, &total);
	const uint32_t block_len = 70001;
	uint8_t *block = malloc(block_len);
	cr_assert_not_null(block);
	pattern(block, block_len, 7);
	memcpy(expected + total, block, block_len);
	total += block_len;
	cr_assert_eq(sendq_push_owned(&leg->to_server, block, block_len), 0);
	uint8_t slice[1000];
	for (uint32_t i = 0; i < 40; i++) {
		pattern(slice, sizeof(slice), 100 + i);
		tls_queue(leg, slice, sizeof(slice), expected, &total);
	}
	tls_queue(leg, msg_sync, sizeof(msg_sync), expected, &total);
	cr_assert_gt(total, 100u * 1024u);

	sendq_flush(&leg->to_server, &fx.host.ring); /* the end of the pass: the filter encrypts */
	cr_assert(leg->wire.op.is_armed, "a block is on the wire");
	cr_assert_gt(leg->wire.len, 0);
	cr_assert_leq(leg->wire.len, TLS_CIPHERTEXT_OUT_MAX, "no larger than OpenSSL's output bound");
	cr_assert_eq(tls_conn_ciphertext_len(tx.client), 0, "the block took all the ciphertext there was");
	cr_assert_gt(leg->to_server.bytes, 0, "the bound was reached: the rest of the plaintext waits");
	return total;
}

/* Runs the ring until the server heard `total` bytes. Nothing but the wire's completions may encrypt the
 * rest (no end_pass, no sendq_flush): a block that is not followed by the next stalls the loop. Counts
 * the passes that ended with a partial send's rest on the wire. */
static void tls_wire_carries(struct leg *leg, size_t total, uint32_t *partials)
{
	for (uint32_t pass = 0;; pass++) {
		cr_assert_lt(pass, TLS_PASSES_MAX, "%zu of %zu bytes reached the server", tx.heard_len, total);
		(void)server_hear();
		if (tx.heard_len >= total)
			break;
		cr_assert(leg->wire.op.is_armed,
			  "stalled: %zu of %zu bytes reached the server, %llu bytes of plaintext and %u of ciphertext "
			  "wait, and nothing is on the wire",
			  tx.heard_len, total, (unsigned long long)leg->to_server.bytes,
			  tls_conn_ciphertext_len(tx.client));
		cr_assert_eq(ring_run_once(&fx.host.ring), 0);
		if (leg->wire.op.is_armed && leg->wire.sent > 0)
			++*partials;
	}
}

Test(leg_tls, queued_plaintext_reaches_the_server_decrypted_past_the_output_bound)
{
	struct leg *leg = tls_leg_attached(0); /* no receive armed: only the wire's completions come */
	uint8_t *expected = malloc(TLS_COLLECT_MAX);
	cr_assert_not_null(expected);
	size_t total = tls_queue_past_the_bound(leg, expected);
	uint32_t partials = 0;
	tls_wire_carries(leg, total, &partials);
	cr_assert_eq(tx.heard_len, total, "the server heard %zu bytes, %zu queued", tx.heard_len, total);
	size_t at = first_difference(tx.heard, expected, total);
	cr_assert_eq(at, total, "byte for byte, in order: the server's differs at %zu of %zu", at, total);
	cr_assert(sendq_is_empty(&leg->to_server));
	cr_assert_not(leg->wire.op.is_armed);
	cr_assert_null(leg->wire.block, "each block is freed once sent");
	uint32_t blocks_min = (uint32_t)((total + TLS_CIPHERTEXT_OUT_MAX - 1) / TLS_CIPHERTEXT_OUT_MAX);
	cr_assert_geq(tx.progress, blocks_min, "every block's completion is progress: %u of at least %u", tx.progress,
		      blocks_min);
	cr_assert_eq(tx.lost, 0);
	cr_assert_eq(tls_conn_error(tx.client), 0, "%s", tls_conn_error_text(tx.client));
	cr_assert(leg_is_idle(leg), "all sent: idle");
	tls_leg_end(leg);
	free(expected);
}

Test(leg_tls, a_partial_wire_send_sends_the_rest)
{
	/* An 8 kB socket buffer (4096 doubled) takes a fraction of each ~32 kB block per send. */
	struct leg *leg = tls_leg_attached(4096);
	uint8_t *expected = malloc(TLS_COLLECT_MAX);
	cr_assert_not_null(expected);
	size_t total = tls_queue_past_the_bound(leg, expected);
	uint32_t partials = 0;
	tls_wire_carries(leg, total, &partials);
	cr_assert_gt(partials, 0, "the premise: some sends were partial");
	cr_assert_eq(tx.heard_len, total, "the server heard %zu bytes, %zu queued", tx.heard_len, total);
	size_t at = first_difference(tx.heard, expected, total);
	cr_assert_eq(at, total, "byte for byte, in order: the server's differs at %zu of %zu", at, total);
	cr_assert_not(leg->wire.op.is_armed);
	cr_assert_eq(tx.lost, 0);
	cr_assert(leg_is_idle(leg));
	tls_leg_end(leg);
	free(expected);
}

Test(leg_tls, server_records_reach_on_bytes_as_plaintext_without_a_buffer)
{
	struct leg *leg = tls_leg_attached(0);
	leg_resume(leg);
	cr_assert(leg->recv.is_armed);
	uint8_t *expected = malloc(TLS_COLLECT_MAX);
	const size_t cipher_cap = 256u * 1024u;
	uint8_t *cipher = malloc(cipher_cap);
	cr_assert(expected != NULL && cipher != NULL);
	size_t total = 0;

	/* One small record, whole. */
	size_t len = server_seal(msg_ready, sizeof(msg_ready), cipher, cipher_cap);
	memcpy(expected + total, msg_ready, sizeof(msg_ready));
	total += sizeof(msg_ready);
	server_write(cipher, len);
	tx.got_want = total;
	tls_run_until(tls_got_wanted, "a ReadyForQuery");

	/* One record split across two writes: its first half alone decrypts to nothing. */
	uint8_t row[300];
	pattern(row, sizeof(row), 3);
	len = server_seal(row, sizeof(row), cipher, cipher_cap);
	cr_assert_gt(len, sizeof(row));
	tls_progress_mark = tx.progress;
	server_write(cipher, len / 2);
	tls_run_until(tls_progress_moved, "the first half's receive");
	cr_assert_eq(tx.got_len, total, "half a record yields no plaintext");
	cr_assert(leg->recv.is_armed, "and the leg reads on");
	cr_assert_eq(tx.lost, 0);
	server_write(cipher + len / 2, len - len / 2);
	memcpy(expected + total, row, sizeof(row));
	total += sizeof(row);
	tx.got_want = total;
	tls_run_until(tls_got_wanted, "the split record");

	/* Several small records in one write. */
	size_t at = 0;
	for (uint32_t i = 0; i < 3; i++) {
		uint8_t small[40];
		pattern(small, sizeof(small), 20 + i);
		at += server_seal(small, sizeof(small), cipher + at, cipher_cap - at);
		memcpy(expected + total, small, sizeof(small));
		total += sizeof(small);
	}
	server_write(cipher, at);
	tx.got_want = total;
	tls_run_until(tls_got_wanted, "three records in one write");

	/* 50,000 bytes: full 16 kB records (ciphertext over 16 kB each, several receive buffers long). */
	const size_t large = 50000;
	uint8_t *big = malloc(large);
	cr_assert_not_null(big);
	pattern(big, large, 5);
	len = server_seal(big, large, cipher, cipher_cap);
	cr_assert_gt(len, large);
	memcpy(expected + total, big, large);
	total += large;
	server_write(cipher, len);
	tx.got_want = total;
	tls_run_until(tls_got_wanted, "50,000 bytes");

	cr_assert_eq(tx.got_len, total, "on_bytes got %zu bytes, the server sent %zu", tx.got_len, total);
	at = first_difference(tx.got, expected, total);
	cr_assert_eq(at, total, "byte for byte, in order: on_bytes' differ at %zu of %zu", at, total);
	cr_assert_eq(tx.got_foreign, 0, "%u of %u calls named a receive buffer, not RING_NO_BUFFER", tx.got_foreign,
		     tx.got_calls);
	cr_assert_leq(tx.got_call_max, TLS_RECORD_PLAINTEXT_MAX);
	cr_assert_eq(tx.lost, 0);
	cr_assert_eq(tx.starved, 0);
	cr_assert(leg->recv.is_armed, "the leg reads on");
	cr_assert_eq(tls_conn_error(tx.client), 0, "%s", tls_conn_error_text(tx.client));
	tls_leg_end(leg);
	free(big);
	free(cipher);
	free(expected);
}

Test(leg_tls, a_leg_is_idle_only_once_its_ciphertext_is_sent)
{
	struct leg *leg = tls_leg_attached(0);
	leg_resume(leg);
	cr_assert(leg_is_idle(leg), "attached, nothing owed, queued or in flight");

	/* Ciphertext OpenSSL holds (as a read's answer, a key update's, would leave it): not idle, though
	 * nothing is queued or on the wire. */
	cr_assert_eq(tls_conn_write_plaintext(tx.client, msg_sync, sizeof(msg_sync)), (int)sizeof(msg_sync));
	cr_assert_gt(tls_conn_ciphertext_len(tx.client), 0);
	cr_assert(sendq_is_idle(&leg->to_server));
	cr_assert_not(leg->wire.op.is_armed);
	cr_assert_not(leg_is_idle(leg), "ciphertext waits to be sent");

	/* A message queued and flushed: every byte is encrypted and taken into the block, which is in flight
	 * until its completion. */
	cr_assert_eq(sendq_push_copy(&leg->to_server, msg_query, sizeof(msg_query)), 0);
	sendq_flush(&leg->to_server, &fx.host.ring);
	cr_assert(sendq_is_idle(&leg->to_server), "the plaintext is all encrypted");
	cr_assert_eq(tls_conn_ciphertext_len(tx.client), 0, "and taken");
	cr_assert(leg->wire.op.is_armed, "the block is on the wire");
	cr_assert_not(leg_is_idle(leg), "a block in flight is not idle");
	cr_assert_not(leg_is_reapable(leg));
	tls_progress_mark = tx.progress;
	tls_run_until(tls_wire_is_done, "the block's completion");
	cr_assert_eq(tx.progress, tls_progress_mark + 1, "the block's completion is progress (a release may follow)");
	cr_assert_null(leg->wire.block);
	cr_assert(leg_is_idle(leg), "sent: idle");
	tx.heard_want = sizeof(msg_sync) + sizeof(msg_query);
	tls_run_until(tls_heard_wanted, "the server hears both");
	cr_assert_eq(tx.heard_len, tx.heard_want);
	cr_assert_arr_eq(tx.heard, msg_sync, sizeof(msg_sync));
	cr_assert_arr_eq(tx.heard + sizeof(msg_sync), msg_query, sizeof(msg_query));

	/* The server answers: read, the leg is idle still. */
	uint8_t cipher[256];
	size_t len = server_seal(msg_ready, sizeof(msg_ready), cipher, sizeof(cipher));
	server_write(cipher, len);
	tx.got_want = sizeof(msg_ready);
	tls_run_until(tls_got_wanted, "the answer");
	cr_assert(leg_is_idle(leg), "everything sent and received: idle");
	tls_leg_end(leg);
	cr_assert_eq(fx.closes, 1);
	cr_assert_eq(fx.closed[0], tx.conn);
}

Test(leg_tls, a_dropped_leg_is_reaped_only_once_its_block_is_off_the_wire)
{
	struct leg *leg = tls_leg_attached(0); /* no receive armed: the wire op alone holds the leg */
	cr_assert_eq(sendq_push_copy(&leg->to_server, msg_query, sizeof(msg_query)), 0);
	sendq_flush(&leg->to_server, &fx.host.ring);
	cr_assert(leg->wire.op.is_armed);
	leg_drop(leg);
	cr_assert_not(leg_reap(leg), "a block is in flight: the connection stays");
	cr_assert_not_null(leg->conn);
	cr_assert_not(leg_is_reapable(leg));
	cr_assert_eq(fx.closes, 0);
	tls_run_until(tls_leg_is_reapable, "the block's completion");
	cr_assert_null(leg->conn);
	cr_assert_null(leg->wire.block, "the block is freed");
	cr_assert_eq(fx.closes, 1, "the connection is discarded");
	cr_assert_eq(fx.closed[0], tx.conn);
	cr_assert_eq(tx.lost, 0, "a dropped leg is only reaped: no loss is reported");
	leg_destroy(leg);
	tx.leg = NULL;
}

/* After the loss: the leg lost its TLS connection as closed (LEG_FAULT_CLOSED, never malformed) after delivering the
 * plaintext `delivered`; its connection is discarded and the leg freed. */
static void tls_expect_closed_after(struct leg *leg, const char *delivered, uint32_t len)
{
	cr_assert_eq(tx.lost, 1);
	cr_assert_eq(tx.fault, LEG_FAULT_CLOSED, "a TLS failure is a lost connection (%d), not a malformed one (%d): %d",
		     LEG_FAULT_CLOSED, LEG_FAULT_MALFORMED, tx.fault);
	cr_assert_eq(tx.got_len, len, "what came before it was delivered");
	cr_assert_arr_eq(tx.got, delivered, len);
	cr_assert(leg_is_reapable(leg), "nothing of the leg is in flight");
	cr_assert_null(leg->conn);
	cr_assert_eq(fx.closes, 1, "its connection is discarded");
	cr_assert_eq(fx.closed[0], tx.conn);
	leg_destroy(leg);
	tx.leg = NULL;
}

Test(leg_tls, garbage_from_the_server_is_a_closed_connection_not_a_malformed_one)
{
	struct leg *leg = tls_leg_attached(0);
	leg_resume(leg);
	/* A record, then what a server that forgot TLS would say: an ErrorResponse in the clear. */
	uint8_t bytes[512];
	size_t len = server_seal("before", 6, bytes, sizeof(bytes));
	static const uint8_t error[] = {'E', 0, 0, 0, 23, 'S', 'F', 'A', 'T', 'A', 'L', 0, 'C', '0', '8',
					'P', '0', '1', 0, 'M', 'n', 'o', 0, 0};
	memcpy(bytes + len, error, sizeof(error));
	len += sizeof(error);
	server_write(bytes, len);
	tls_run_until(tls_is_lost, "the loss");
	cr_assert(tx.is_lost_shut, "the connection was shut before the session heard");
	cr_assert_neq(tls_conn_error(tx.client), 0);
	tls_expect_closed_after(leg, "before", 6);
}

Test(leg_tls, the_servers_close_notify_is_a_closed_connection)
{
	struct leg *leg = tls_leg_attached(0);
	leg_resume(leg);
	uint8_t bytes[512];
	size_t len = server_seal("last", 4, bytes, sizeof(bytes));
	tls_conn_shutdown(tx.server);
	len += tls_conn_take_ciphertext(tx.server, bytes + len, (uint32_t)(sizeof(bytes) - len));
	cr_assert_eq(tls_conn_ciphertext_len(tx.server), 0);
	server_write(bytes, len);
	tls_run_until(tls_is_lost, "the loss");
	cr_assert_eq(tls_conn_error(tx.client), -ESHUTDOWN, "%s", tls_conn_error_text(tx.client));
	tls_expect_closed_after(leg, "last", 4);
}

/* leg_tls_fail (core/leg.c) logs tls_conn_error_text, whose texts already begin with "TLS" ("TLS: wrong
 * version number"): the line says TLS once, not "server connection pid 4343: TLS: TLS: ...". */
Test(leg_tls, a_tls_failure_is_logged_with_one_tls_prefix)
{
	struct leg *leg = tls_leg_attached(0);
	leg_resume(leg);
	char log_path[160];
	snprintf(log_path, sizeof(log_path), "%s/stderr.log", tx.dir);
	int log_fd = open(log_path, O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert_geq(log_fd, 0);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	cr_assert_geq(saved, 0);
	cr_assert_eq(dup2(log_fd, STDERR_FILENO), STDERR_FILENO);
	static const uint8_t garbage[] = {'E', 0, 0, 0, 8, 'M', 'n', 'o', 0}; /* plaintext where a record belongs */
	server_write(garbage, sizeof(garbage));
	tls_run_until(tls_is_lost, "the loss");
	fflush(stderr);
	cr_assert_eq(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	char log[1024] = "";
	ssize_t n = pread(log_fd, log, sizeof(log) - 1, 0);
	close(log_fd);
	unlink(log_path);
	cr_assert_gt(n, 0, "a TLS failure is logged");
	log[n] = '\0';
	cr_assert_not_null(strstr(log, "server connection pid 4343: TLS"), "%s", log);
	cr_assert_null(strstr(log, "TLS: TLS"), "the reason says TLS once: %s", log);
	cr_assert_eq(tx.fault, LEG_FAULT_CLOSED);
	leg_destroy(leg);
	tx.leg = NULL;
}
