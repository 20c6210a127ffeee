/*
 * test_leg.c — a session's server legs over a real ring: a leg is attached from the pool, dropped and
 * replaced while its session stays open, the dropped one drains aside and its connection is discarded,
 * and the new leg relays server bytes to the client; a lost connection goes through the session's one
 * decision. Client and server sockets are AF_UNIX socketpairs (no network); the pool is the real one
 * with hooks that record opens and closes; the test completes ops with ring_run_once and never sleeps.
 */
#include "session.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Completions one test may wait for before it gives up (each step needs a handful). */
#define TEST_PASSES_MAX 64u

struct fixture {
	struct tern_config config;
	struct tern_runtime runtime;
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
	fx.runtime.parts = &session_relay_parts;
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
	static const struct session_parts parts = {0}; /* no decide_lost: what a session below the relay gets */
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
