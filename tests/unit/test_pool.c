/*
 * test_pool.c — the pool's decisions driven through fake hooks: opens and closes are recorded, not
 * performed, and the test itself plays the opener by calling pool_open_finished. No threads, no
 * sockets. After every step a checker recomputes each counter from the lists and compares.
 */
#include "pool/opener.h"
#include "pool/pool.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define ENV_OPENS_MAX 64u
#define ENV_CLOSES_MAX 64u
#define ENV_DONE_MAX 64u

struct env_open {
	struct pool_server *server;
	struct pool_db *db;
	bool is_finished;
};

/* What the fake environment saw: opens asked for, connections closed, requests completed. */
struct env {
	struct pool pool;
	struct pool_server *server;
	struct env_open opens[ENV_OPENS_MAX];
	uint32_t open_calls;
	uint32_t closed_ids[ENV_CLOSES_MAX]; /* backend_pid of each closed connection */
	struct pool_db *closed_dbs[ENV_CLOSES_MAX];
	uint32_t close_calls;
	struct pool_request *done[ENV_DONE_MAX];
	uint32_t done_calls;
	uint32_t conns_live; /* allocated by the test and not yet freed */
	uint32_t next_id;
	uint64_t now_ns;
};

static struct env *env_of(struct pool *pool) { return pool->hooks.ctx; }

static void env_hook_open(struct pool *pool, struct pool_server *server, struct pool_db *db)
{
	struct env *e = env_of(pool);
	cr_assert_lt(e->open_calls, ENV_OPENS_MAX);
	e->opens[e->open_calls++] = (struct env_open){.server = server, .db = db};
}

static void env_hook_close(struct pool *pool, struct pool_conn *conn)
{
	struct env *e = env_of(pool);
	cr_assert_lt(e->close_calls, ENV_CLOSES_MAX);
	cr_assert_eq(conn->state, POOL_CONN_CLOSING, "a closed connection is no longer accounted");
	e->closed_ids[e->close_calls] = conn->backend_pid;
	e->closed_dbs[e->close_calls] = conn->db;
	e->close_calls++;
	cr_assert_gt(e->conns_live, 0);
	e->conns_live--;
	free(conn);
}

/* A parked request's owner: counts its completions. */
struct waiter {
	struct pool_request req;
	uint32_t done_calls;
};

static struct env *current_env; /* on_done has no pool argument; the test's env is a singleton */

static void waiter_done(struct pool_request *req)
{
	struct waiter *w = req->owner;
	w->done_calls++;
	cr_assert_lt(current_env->done_calls, ENV_DONE_MAX);
	current_env->done[current_env->done_calls++] = req;
}

static void env_init(struct env *e, uint32_t pool_size, uint32_t min_pool_size)
{
	memset(e, 0, sizeof(*e));
	current_env = e;
	e->next_id = 1000;
	e->now_ns = 1000000;
	/* One key's limit and the server's: the eviction tests use keys of one database under the server's. */
	struct pool_settings settings = {
		.pool_size = pool_size, .max_server_connections = pool_size, .min_pool_size = min_pool_size};
	struct pool_hooks hooks = {.open = env_hook_open, .close = env_hook_close, .ctx = e};
	cr_assert_eq(pool_init(&e->pool, &settings, &hooks), 0);
	cr_assert_eq(pool_server_add(&e->pool, "primary", "host=127.0.0.1 port=1", &e->server), 0);
}

static void env_deinit(struct env *e)
{
	pool_deinit(&e->pool);
	cr_assert_eq(e->conns_live, 0, "%u connections leaked", e->conns_live);
	current_env = NULL;
}

static struct pool_db *env_db(struct env *e, const char *user)
{
	struct pool_db *db = pool_db_get(&e->pool, user, "shop", NULL, NULL, 0);
	cr_assert_not_null(db);
	return db;
}

/* A key a server has accepted a login for (its welcome's parameters are known): one min_pool_size warms. */
static struct pool_db *env_used_db(struct env *e, const char *user)
{
	struct pool_db *db = env_db(e, user);
	struct pool_param param = {.name = "server_version", .value = "15.18"};
	pool_db_set_params(&e->pool, db, &param, 1);
	return db;
}

static void waiter_init(struct waiter *w, struct env *e, struct pool_db *db)
{
	memset(w, 0, sizeof(*w));
	w->req.db = db;
	w->req.server = e->server;
	w->req.on_done = waiter_done;
	w->req.owner = w;
}

static enum pool_checkout_result env_checkout(struct env *e, struct waiter *w)
{
	e->now_ns += 1000;
	return pool_checkout(&e->pool, &w->req, e->now_ns);
}

/* Plays the opener: the open number `index` produced a connection. */
static struct pool_conn *env_open_succeeds(struct env *e, uint32_t index)
{
	cr_assert_lt(index, e->open_calls);
	cr_assert_not(e->opens[index].is_finished, "open %u reported twice", index);
	e->opens[index].is_finished = true;
	struct pool_conn *conn = calloc(1, sizeof(*conn));
	cr_assert_not_null(conn);
	conn->fd = -1;
	conn->backend_pid = e->next_id++;
	e->conns_live++;
	e->now_ns += 1000;
	pool_open_finished(&e->pool, e->opens[index].server, e->opens[index].db, conn, NULL, e->now_ns);
	return conn;
}

static void env_open_fails(struct env *e, uint32_t index, const char *sqlstate, const char *message)
{
	cr_assert_lt(index, e->open_calls);
	cr_assert_not(e->opens[index].is_finished);
	e->opens[index].is_finished = true;
	struct pool_error err = {0};
	base_strlcpy(err.sqlstate, sqlstate, sizeof(err.sqlstate));
	base_strlcpy(err.message, message, sizeof(err.message));
	e->now_ns += 1000;
	pool_open_finished(&e->pool, e->opens[index].server, e->opens[index].db, NULL, &err, e->now_ns);
}

static void env_checkin(struct env *e, struct pool_conn *conn)
{
	e->now_ns += 1000;
	pool_checkin(&e->pool, conn, e->now_ns);
}

static uint32_t env_unfinished_opens(const struct env *e, const struct pool_server *server, const struct pool_db *db)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < e->open_calls; i++)
		if (!e->opens[i].is_finished && e->opens[i].server == server && e->opens[i].db == db)
			n++;
	return n;
}

/* Recomputes every counter of every server and slot from the lists and compares. */
static void check_invariants(const struct env *e, const char *step)
{
	const struct pool *pool = &e->pool;
	uint32_t open_total = 0;
	for (uint32_t s = 0; s < pool->server_count; s++) {
		const struct pool_server *server = &pool->servers[s];
		uint32_t free_n = 0, used_n = 0, waiting_n = 0;
		const struct base_list *node;
		for (node = server->free_conns.next; node != &server->free_conns; node = node->next) {
			const struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
			cr_assert_eq(conn->state, POOL_CONN_FREE, "%s: non-FREE conn on the free list", step);
			cr_assert_eq(conn->server, server, "%s", step);
			free_n++;
		}
		for (node = server->used_conns.next; node != &server->used_conns; node = node->next) {
			const struct pool_conn *conn = TERN_CONTAINER_OF(node, struct pool_conn, link);
			cr_assert_eq(conn->state, POOL_CONN_USED, "%s: non-USED conn on the used list", step);
			cr_assert_eq(conn->server, server, "%s", step);
			used_n++;
		}
		for (node = server->waiters.next; node != &server->waiters; node = node->next) {
			const struct pool_request *req = TERN_CONTAINER_OF(node, struct pool_request, link);
			cr_assert_eq(req->state, POOL_REQUEST_PARKED, "%s: non-PARKED request waits", step);
			cr_assert_eq(req->server, server, "%s", step);
			waiting_n++;
		}
		cr_assert_eq(server->free_count, free_n, "%s: free_count %u, list %u", step, server->free_count, free_n);
		cr_assert_eq(server->open_count, free_n + used_n, "%s: open_count %u, lists %u + %u", step,
			     server->open_count, free_n, used_n);
		cr_assert_eq(server->waiter_count, waiting_n, "%s: waiter_count %u, list %u", step,
			     server->waiter_count, waiting_n);
		if (pool->settings.max_server_connections)
			cr_assert_leq(server->open_count + server->opening_count, pool->settings.max_server_connections,
				      "%s: %u open + %u opening past max_server_connections %u", step, server->open_count,
				      server->opening_count, pool->settings.max_server_connections);
		uint32_t slot_open = 0, slot_opening = 0, slot_waiting = 0;
		for (node = pool->dbs.next; node != &pool->dbs; node = node->next) {
			const struct pool_db *db = TERN_CONTAINER_OF(node, struct pool_db, link);
			const struct pool_slot *slot = &db->slots[s];
			uint32_t db_free = 0, db_used = 0, db_waiting = 0;
			const struct base_list *n2;
			for (n2 = server->free_conns.next; n2 != &server->free_conns; n2 = n2->next)
				db_free += TERN_CONTAINER_OF(n2, struct pool_conn, link)->db == db;
			for (n2 = server->used_conns.next; n2 != &server->used_conns; n2 = n2->next)
				db_used += TERN_CONTAINER_OF(n2, struct pool_conn, link)->db == db;
			for (n2 = server->waiters.next; n2 != &server->waiters; n2 = n2->next)
				db_waiting += TERN_CONTAINER_OF(n2, struct pool_request, link)->db == db;
			uint32_t slot_free = 0;
			for (n2 = slot->free_conns.next; n2 != &slot->free_conns; n2 = n2->next) {
				const struct pool_conn *conn = TERN_CONTAINER_OF(n2, struct pool_conn, slot_link);
				cr_assert_eq(conn->state, POOL_CONN_FREE, "%s: non-FREE conn in a slot index", step);
				cr_assert_eq(conn->db, db, "%s: conn indexed under another key", step);
				slot_free++;
			}
			cr_assert_eq(slot_free, db_free, "%s: slot index holds %u, free list %u of this key", step,
				     slot_free, db_free);
			cr_assert_eq(slot->open_count, db_free + db_used, "%s: slot open_count %u, conns %u", step,
				     slot->open_count, db_free + db_used);
			cr_assert_eq(slot->waiting_count, db_waiting, "%s: slot waiting_count %u, waiters %u", step,
				     slot->waiting_count, db_waiting);
			cr_assert_eq(slot->opening_count, env_unfinished_opens(e, server, db), "%s: slot opening_count %u, "
				     "unfinished opens %u", step, slot->opening_count, env_unfinished_opens(e, server, db));
			/* A waiter never parks beside an idle connection it could have had. */
			cr_assert(db_waiting == 0 || db_free == 0, "%s: %u waiters beside %u FREE conns of their key",
				  step, db_waiting, db_free);
			/* A key's connections count in its groups: every key of the group summed is the group's. */
			const struct pool_group *groups[] = {db->database_group, db->user_group};
			for (size_t g = 0; g < 2; g++) {
				uint32_t sum = 0;
				for (const struct base_list *n3 = pool->dbs.next; n3 != &pool->dbs; n3 = n3->next) {
					const struct pool_db *other = TERN_CONTAINER_OF(n3, struct pool_db, link);
					if ((g == 0 ? other->database_group : other->user_group) == groups[g])
						sum += other->slots[s].open_count + other->slots[s].opening_count;
				}
				cr_assert_eq(groups[g]->counts[s], sum, "%s: group %s counts %u, its keys %u", step,
					     groups[g]->name, groups[g]->counts[s], sum);
			}
			slot_open += slot->open_count;
			slot_opening += slot->opening_count;
			slot_waiting += slot->waiting_count;
		}
		cr_assert_eq(slot_open, server->open_count, "%s: slots sum to %u open, server %u", step, slot_open,
			     server->open_count);
		cr_assert_eq(slot_opening, server->opening_count, "%s: slots sum to %u opening, server %u", step,
			     slot_opening, server->opening_count);
		cr_assert_eq(slot_waiting, server->waiter_count, "%s: slots sum to %u waiting, server %u", step,
			     slot_waiting, server->waiter_count);
		open_total += server->open_count;
	}
	/* The test frees connections only through the close hook, so live == accounted. */
	cr_assert_eq(e->conns_live, open_total, "%s: %u connections alive, %u accounted", step, e->conns_live,
		     open_total);
}

/* Every test is bounded even if a corrupted list would make the checker loop. */
TestSuite(pool, .timeout = 10);

/* ---- setup ---- */

Test(pool, init_and_server_add_set_up_empty_servers)
{
	struct env e;
	env_init(&e, 4, 0);
	cr_assert_eq(e.pool.server_count, 1);
	cr_assert_eq(e.server->index, 0);
	cr_assert_str_eq(e.server->name, "primary");
	cr_assert_str_eq(e.server->conninfo, "host=127.0.0.1 port=1");
	for (uint32_t i = 1; i < POOL_SERVERS_MAX; i++) {
		struct pool_server *server;
		cr_assert_eq(pool_server_add(&e.pool, "replica", "host=x", &server), 0);
		cr_assert_eq(server->index, i);
	}
	struct pool_server *server = NULL;
	cr_assert_eq(pool_server_add(&e.pool, "one too many", "host=y", &server), -E2BIG);
	cr_assert_null(server);
	cr_assert_eq(e.pool.server_count, POOL_SERVERS_MAX);
	check_invariants(&e, "after adding servers");
	env_deinit(&e);
}

Test(pool, db_get_interns_equal_strings_and_separates_different_ones)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *a = pool_db_get(&e.pool, "alice", "shop", "-c work_mem=1MB", "secret", 7);
	cr_assert_not_null(a);
	cr_assert_eq(pool_db_get(&e.pool, "alice", "shop", "-c work_mem=1MB", "secret", 7), a);
	cr_assert_str_eq(a->user, "alice");
	cr_assert_str_eq(a->database, "shop");
	cr_assert_str_eq(a->options, "-c work_mem=1MB");
	cr_assert_str_eq(a->password, "secret");
	cr_assert_neq(pool_db_get(&e.pool, "alice", "shop", "-c work_mem=2MB", "secret", 7), a, "other options");
	cr_assert_neq(pool_db_get(&e.pool, "alice", "shop", NULL, "secret", 7), a, "no options");
	cr_assert_neq(pool_db_get(&e.pool, "bob", "shop", "-c work_mem=1MB", "secret", 7), a, "other user");
	cr_assert_neq(pool_db_get(&e.pool, "alice", "web", "-c work_mem=1MB", "secret", 7), a, "other database");
	cr_assert_neq(pool_db_get(&e.pool, "alice", "shop", "-c work_mem=1MB", "secret", 8), a, "other identity");
	/* The pair is hashed with its separator: moving a character across it is another key. */
	struct pool_db *ab_c = pool_db_get(&e.pool, "ab", "c", NULL, NULL, 0);
	struct pool_db *a_bc = pool_db_get(&e.pool, "a", "bc", NULL, NULL, 0);
	cr_assert_neq(ab_c, a_bc);
	/* Absent options and empty options are the same startup. */
	struct pool_db *none = pool_db_get(&e.pool, "carol", "shop", NULL, NULL, 0);
	cr_assert_eq(pool_db_get(&e.pool, "carol", "shop", "", NULL, 0), none);
	cr_assert_str_eq(none->options, "");
	cr_assert_null(none->password);
	env_deinit(&e);
}

Test(pool, a_changed_profile_starts_a_new_generation_of_keys)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_server *server = &e.pool.servers[0];
	struct pool_db *before = pool_db_get(&e.pool, "alice", "shop", NULL, NULL, 7);
	cr_assert_not(pool_server_set_profile(&e.pool, server, server->is_polar), "the same profile: no change");
	cr_assert_eq(pool_db_get(&e.pool, "alice", "shop", NULL, NULL, 7), before);
	cr_assert(pool_server_set_profile(&e.pool, server, !server->is_polar));
	struct pool_db *after = pool_db_get(&e.pool, "alice", "shop", NULL, NULL, 7);
	cr_assert_neq(after, before, "a client logging in after the change never shares the old key's connections");
	cr_assert_neq(after->key.profile_generation, before->key.profile_generation);
	cr_assert_eq(pool_db_get(&e.pool, "alice", "shop", NULL, NULL, 7), after, "and the new key is shared");
	env_deinit(&e);
}

Test(pool, db_get_refuses_names_longer_than_namedatalen)
{
	struct env e;
	env_init(&e, 4, 0);
	char long_name[POOL_NAME_LEN_MAX + 1];
	memset(long_name, 'u', POOL_NAME_LEN_MAX);
	long_name[POOL_NAME_LEN_MAX] = '\0';
	cr_assert_null(pool_db_get(&e.pool, long_name, "shop", NULL, NULL, 0));
	cr_assert_null(pool_db_get(&e.pool, "alice", long_name, NULL, NULL, 0));
	long_name[POOL_NAME_LEN_MAX - 1] = '\0';
	struct pool_db *db = pool_db_get(&e.pool, long_name, "shop", NULL, NULL, 0);
	cr_assert_not_null(db, "63 characters fit");
	cr_assert_str_eq(db->user, long_name);
	env_deinit(&e);
}

Test(pool, db_params_are_recorded_once_and_truncated_to_the_maximum)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	cr_assert_not(pool_db_has_params(db));
	struct pool_param first[POOL_PARAMS_MAX + 3];
	memset(first, 0, sizeof(first));
	for (uint32_t i = 0; i < TERN_ARRAY_LEN(first); i++) {
		snprintf(first[i].name, sizeof(first[i].name), "name%u", i);
		snprintf(first[i].value, sizeof(first[i].value), "value%u", i);
	}
	pool_db_set_params(&e.pool, db, first, TERN_ARRAY_LEN(first));
	cr_assert(pool_db_has_params(db));
	cr_assert_eq(db->param_count, POOL_PARAMS_MAX);
	cr_assert_str_eq(db->params[POOL_PARAMS_MAX - 1].value, "value31");
	struct pool_param later = {.name = "TimeZone", .value = "UTC"};
	pool_db_set_params(&e.pool, db, &later, 1);
	cr_assert_eq(db->param_count, POOL_PARAMS_MAX, "the first set seen is kept");
	cr_assert_str_eq(db->params[0].name, "name0");
	env_deinit(&e);
}

/* ---- checkout, open, grant ---- */

Test(pool, checkout_on_empty_pool_parks_and_asks_for_one_open)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w;
	waiter_init(&w, &e, db);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	cr_assert_eq(w.req.state, POOL_REQUEST_PARKED);
	cr_assert_null(w.req.conn);
	cr_assert_eq(e.open_calls, 1);
	cr_assert_eq(e.opens[0].db, db);
	cr_assert_eq(e.opens[0].server, e.server);
	cr_assert_eq(w.done_calls, 0);
	cr_assert_eq(e.server->opening_count, 1);
	check_invariants(&e, "parked");
	cr_assert(pool_request_cancel(&e.pool, &w.req));
	env_deinit(&e);
}

Test(pool, open_finished_grants_the_oldest_waiter_once)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	cr_assert_eq(w2.req.state, POOL_REQUEST_PARKED);
	cr_assert_eq(e.open_calls, 2, "each waiter of the key has its own open on the way");
	check_invariants(&e, "two parked");
	/* Whichever open finishes first serves the oldest waiter. */
	struct pool_conn *conn = env_open_succeeds(&e, 1);
	cr_assert_eq(w1.done_calls, 1);
	cr_assert_eq(w1.req.state, POOL_REQUEST_DONE);
	cr_assert_eq(w1.req.conn, conn);
	cr_assert_eq(w1.req.error.sqlstate[0], '\0');
	cr_assert_eq(conn->state, POOL_CONN_USED);
	cr_assert_eq(conn->db, db);
	cr_assert_eq(conn->server, e.server);
	cr_assert_eq(w2.done_calls, 0);
	cr_assert_eq(w2.req.state, POOL_REQUEST_PARKED);
	cr_assert_eq(e.done_calls, 1);
	check_invariants(&e, "first granted");
	struct pool_conn *conn2 = env_open_succeeds(&e, 0);
	cr_assert_eq(w2.done_calls, 1);
	cr_assert_eq(w2.req.conn, conn2);
	cr_assert_eq(w1.done_calls, 1, "on_done runs once per request");
	check_invariants(&e, "both granted");
	env_deinit(&e);
}

Test(pool, checkin_hands_the_conn_to_the_oldest_matching_waiter_only)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *a = env_db(&e, "alice");
	struct pool_db *b = env_db(&e, "bob");
	struct waiter holder, b1, a2, a3;
	waiter_init(&holder, &e, a);
	waiter_init(&b1, &e, b);
	waiter_init(&a2, &e, a);
	waiter_init(&a3, &e, a);
	cr_assert_eq(env_checkout(&e, &holder), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	cr_assert_eq(holder.req.conn, conn);
	cr_assert_eq(env_checkout(&e, &b1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &a2), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &a3), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 1, "a full pool with nothing idle opens nothing");
	check_invariants(&e, "three parked behind a full pool");
	env_checkin(&e, conn);
	cr_assert_eq(a2.done_calls, 1);
	cr_assert_eq(a2.req.conn, conn);
	cr_assert_eq(a2.req.state, POOL_REQUEST_DONE);
	cr_assert_eq(conn->state, POOL_CONN_USED, "a hand-over never passes through FREE");
	cr_assert_eq(e.server->free_count, 0);
	cr_assert_eq(b1.done_calls, 0, "the older waiter of another key is not given it");
	cr_assert_eq(a3.done_calls, 0);
	cr_assert_eq(b1.req.state, POOL_REQUEST_PARKED);
	cr_assert_eq(a3.req.state, POOL_REQUEST_PARKED);
	cr_assert_eq(e.open_calls, 1);
	cr_assert_eq(e.close_calls, 0);
	check_invariants(&e, "handed over");
	cr_assert(pool_request_cancel(&e.pool, &b1.req));
	cr_assert(pool_request_cancel(&e.pool, &a3.req));
	env_deinit(&e);
}

Test(pool, checkin_without_waiter_frees_the_conn_and_the_next_checkout_gets_it_at_once)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	env_checkin(&e, conn);
	cr_assert_eq(conn->state, POOL_CONN_FREE);
	cr_assert_eq(conn->released_ns, e.now_ns);
	cr_assert_eq(e.server->free_count, 1);
	check_invariants(&e, "checked in");
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_GOT);
	cr_assert_eq(w2.req.conn, conn);
	cr_assert_eq(w2.req.state, POOL_REQUEST_DONE);
	cr_assert_eq(w2.done_calls, 0, "on_done is only for parked requests");
	cr_assert_eq(conn->state, POOL_CONN_USED);
	cr_assert_eq(e.open_calls, 1, "no open for a checkout served from FREE");
	cr_assert_eq(e.server->granted_total, 2);
	check_invariants(&e, "reused");
	env_deinit(&e);
}

Test(pool, checkout_takes_the_most_recently_released_conn_of_its_key)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2, w3;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	waiter_init(&w3, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	struct pool_conn *c1 = env_open_succeeds(&e, 0);
	struct pool_conn *c2 = env_open_succeeds(&e, 1);
	env_checkin(&e, c1);
	env_checkin(&e, c2);
	check_invariants(&e, "two free");
	/* Eviction order is oldest release first; reuse order is newest first (warm caches). */
	cr_assert_eq(TERN_CONTAINER_OF(e.server->free_conns.next, struct pool_conn, link), c1);
	cr_assert_eq(env_checkout(&e, &w3), POOL_CHECKOUT_GOT);
	cr_assert_eq(w3.req.conn, c2);
	check_invariants(&e, "newest reused");
	env_deinit(&e);
}

Test(pool, full_pool_parks_without_asking_for_an_open)
{
	struct env e;
	env_init(&e, 2, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w[4];
	for (int i = 0; i < 4; i++) {
		waiter_init(&w[i], &e, db);
		cr_assert_eq(env_checkout(&e, &w[i]), POOL_CHECKOUT_PARKED);
	}
	cr_assert_eq(e.open_calls, 2, "pool_size 2 allows two opens");
	check_invariants(&e, "four parked, two opening");
	(void)env_open_succeeds(&e, 0);
	(void)env_open_succeeds(&e, 1);
	cr_assert_eq(w[0].done_calls + w[1].done_calls, 2);
	cr_assert_eq(e.open_calls, 2, "a pool of two USED conns opens nothing more");
	check_invariants(&e, "full");
	cr_assert(pool_request_cancel(&e.pool, &w[2].req));
	cr_assert(pool_request_cancel(&e.pool, &w[3].req));
	env_deinit(&e);
}

Test(pool, waiter_of_another_key_evicts_the_oldest_free_conn_when_the_pool_is_full)
{
	struct env e;
	env_init(&e, 2, 0);
	struct pool_db *a = env_db(&e, "alice");
	struct pool_db *c = env_db(&e, "carol");
	struct pool_db *b = env_db(&e, "bob");
	struct waiter wa, wc, wb;
	waiter_init(&wa, &e, a);
	waiter_init(&wc, &e, c);
	waiter_init(&wb, &e, b);
	cr_assert_eq(env_checkout(&e, &wa), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &wc), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn_a = env_open_succeeds(&e, 0);
	struct pool_conn *conn_c = env_open_succeeds(&e, 1);
	uint32_t id_a = conn_a->backend_pid;
	env_checkin(&e, conn_a);
	env_checkin(&e, conn_c);
	check_invariants(&e, "full of FREE conns");
	cr_assert_eq(env_checkout(&e, &wb), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.close_calls, 1);
	cr_assert_eq(e.closed_ids[0], id_a, "the connection released longest ago is evicted");
	cr_assert_eq(e.closed_dbs[0], a);
	cr_assert_eq(e.open_calls, 3);
	cr_assert_eq(e.opens[2].db, b);
	cr_assert_eq(conn_c->state, POOL_CONN_FREE);
	check_invariants(&e, "evicted");
	struct pool_conn *conn_b = env_open_succeeds(&e, 2);
	cr_assert_eq(wb.req.conn, conn_b);
	check_invariants(&e, "granted after eviction");
	env_deinit(&e);
}

Test(pool, conn_released_into_a_full_pool_is_evicted_for_a_waiter_of_another_key)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *a = env_db(&e, "alice");
	struct pool_db *b = env_db(&e, "bob");
	struct waiter wa, wb;
	waiter_init(&wa, &e, a);
	waiter_init(&wb, &e, b);
	cr_assert_eq(env_checkout(&e, &wa), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn_a = env_open_succeeds(&e, 0);
	uint32_t id_a = conn_a->backend_pid;
	cr_assert_eq(env_checkout(&e, &wb), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 1);
	env_checkin(&e, conn_a);
	cr_assert_eq(e.close_calls, 1);
	cr_assert_eq(e.closed_ids[0], id_a);
	cr_assert_eq(e.open_calls, 2);
	cr_assert_eq(e.opens[1].db, b);
	check_invariants(&e, "released and evicted");
	(void)env_open_succeeds(&e, 1);
	cr_assert_eq(wb.done_calls, 1);
	check_invariants(&e, "bob served");
	env_deinit(&e);
}

/* ---- cancel ---- */

Test(pool, cancel_of_a_parked_request_removes_it_and_on_done_never_runs)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w;
	waiter_init(&w, &e, db);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	cr_assert(pool_request_cancel(&e.pool, &w.req));
	cr_assert_eq(w.req.state, POOL_REQUEST_IDLE);
	cr_assert_eq(e.server->waiter_count, 0);
	check_invariants(&e, "cancelled");
	/* The open already asked for still lands, into FREE. */
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	cr_assert_eq(w.done_calls, 0);
	cr_assert_eq(conn->state, POOL_CONN_FREE);
	cr_assert_not(pool_request_cancel(&e.pool, &w.req), "a second cancel finds nothing");
	check_invariants(&e, "open landed after cancel");
	env_deinit(&e);
}

Test(pool, cancel_after_the_grant_returns_false)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w;
	waiter_init(&w, &e, db);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	cr_assert_eq(w.done_calls, 1);
	cr_assert_not(pool_request_cancel(&e.pool, &w.req));
	cr_assert_eq(w.req.state, POOL_REQUEST_DONE);
	cr_assert_eq(w.req.conn, conn);
	cr_assert_eq(conn->state, POOL_CONN_USED);
	check_invariants(&e, "cancel after grant");
	env_deinit(&e);
}

Test(pool, cancel_of_a_request_served_at_once_returns_false)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	env_checkin(&e, env_open_succeeds(&e, 0));
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_GOT);
	cr_assert_not(pool_request_cancel(&e.pool, &w2.req));
	check_invariants(&e, "cancel of GOT");
	env_deinit(&e);
}

/* ---- failures and discards ---- */

Test(pool, failed_open_fails_the_oldest_waiter_and_opens_again_for_the_rest)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 1);
	env_open_fails(&e, 0, "3D000", "database \"shop\" does not exist");
	cr_assert_eq(w1.done_calls, 1);
	cr_assert_eq(w1.req.state, POOL_REQUEST_DONE);
	cr_assert_null(w1.req.conn);
	cr_assert_str_eq(w1.req.error.sqlstate, "3D000");
	cr_assert_str_eq(w1.req.error.message, "database \"shop\" does not exist");
	cr_assert_eq(w2.done_calls, 0);
	cr_assert_eq(w2.req.state, POOL_REQUEST_PARKED);
	cr_assert_eq(e.open_calls, 2, "the remaining waiter gets an open of its own");
	cr_assert_eq(e.opens[1].db, db);
	cr_assert_eq(e.server->open_failed_total, 1);
	check_invariants(&e, "after the failure");
	struct pool_conn *conn = env_open_succeeds(&e, 1);
	cr_assert_eq(w2.req.conn, conn);
	cr_assert_eq(w2.req.error.sqlstate[0], '\0');
	check_invariants(&e, "second open served");
	env_deinit(&e);
}

Test(pool, failed_open_with_no_waiter_left_opens_nothing)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w;
	waiter_init(&w, &e, db);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	cr_assert(pool_request_cancel(&e.pool, &w.req));
	env_open_fails(&e, 0, "57P03", "the database system is starting up");
	cr_assert_eq(w.done_calls, 0);
	cr_assert_eq(e.open_calls, 1);
	cr_assert_eq(e.server->opening_count, 0);
	check_invariants(&e, "failure with nobody waiting");
	env_deinit(&e);
}

Test(pool, discard_frees_capacity_and_opens_for_a_waiter)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *a = env_db(&e, "alice");
	struct pool_db *b = env_db(&e, "bob");
	struct waiter wa, wb;
	waiter_init(&wa, &e, a);
	waiter_init(&wb, &e, b);
	cr_assert_eq(env_checkout(&e, &wa), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	uint32_t id = conn->backend_pid;
	cr_assert_eq(env_checkout(&e, &wb), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 1);
	pool_conn_discard(&e.pool, conn);
	cr_assert_eq(e.close_calls, 1);
	cr_assert_eq(e.closed_ids[0], id);
	cr_assert_eq(e.open_calls, 2);
	cr_assert_eq(e.opens[1].db, b);
	cr_assert_eq(e.server->closed_total, 1);
	cr_assert_eq(wb.done_calls, 0);
	check_invariants(&e, "discarded");
	(void)env_open_succeeds(&e, 1);
	cr_assert_eq(wb.done_calls, 1);
	check_invariants(&e, "waiter served after discard");
	env_deinit(&e);
}

Test(pool, discard_with_no_waiter_only_closes)
{
	struct env e;
	env_init(&e, 2, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w;
	waiter_init(&w, &e, db);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	pool_conn_discard(&e.pool, env_open_succeeds(&e, 0));
	cr_assert_eq(e.close_calls, 1);
	cr_assert_eq(e.open_calls, 1);
	cr_assert_eq(e.server->open_count, 0);
	check_invariants(&e, "discarded, nobody waiting");
	env_deinit(&e);
}

Test(pool, remove_if_free_removes_only_free_conns)
{
	struct env e;
	env_init(&e, 2, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	struct pool_conn *used = env_open_succeeds(&e, 0);
	struct pool_conn *idle = env_open_succeeds(&e, 1);
	env_checkin(&e, idle);
	cr_assert_not(pool_conn_remove_if_free(&e.pool, used), "a worker holds it");
	cr_assert_eq(used->state, POOL_CONN_USED);
	check_invariants(&e, "USED conn not removed");
	cr_assert(pool_conn_remove_if_free(&e.pool, idle));
	cr_assert_eq(idle->state, POOL_CONN_CLOSING);
	cr_assert_eq(e.close_calls, 0, "the caller closes what it removed");
	cr_assert_eq(e.server->free_count, 0);
	cr_assert_eq(e.server->open_count, 1);
	/* The caller owns the removed connection now, as the opener thread does. */
	free(idle);
	e.conns_live--;
	check_invariants(&e, "FREE conn removed");
	env_deinit(&e);
}

Test(pool, remove_if_free_gives_back_capacity_to_the_next_checkout)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *a = env_db(&e, "alice");
	struct pool_db *b = env_db(&e, "bob");
	struct waiter wa, wb;
	waiter_init(&wa, &e, a);
	waiter_init(&wb, &e, b);
	cr_assert_eq(env_checkout(&e, &wa), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	env_checkin(&e, conn);
	cr_assert(pool_conn_remove_if_free(&e.pool, conn));
	free(conn);
	e.conns_live--;
	check_invariants(&e, "removed the only conn");
	cr_assert_eq(env_checkout(&e, &wb), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.close_calls, 0, "nothing left to evict: the removed conn freed the room");
	cr_assert_eq(e.open_calls, 2);
	cr_assert_eq(e.opens[1].db, b);
	(void)env_open_succeeds(&e, 1);
	cr_assert_eq(wb.done_calls, 1);
	check_invariants(&e, "bob served");
	env_deinit(&e);
}

/* ---- warmup ---- */

Test(pool, warm_opens_up_to_min_pool_size_for_each_known_key)
{
	struct env e;
	env_init(&e, 10, 2);
	cr_assert_eq(pool_warm(&e.pool), 0, "no key known yet");
	(void)env_db(&e, "refused");
	cr_assert_eq(pool_warm(&e.pool), 0, "a key no server accepted a login for is not warmed");
	struct pool_db *a = env_used_db(&e, "alice");
	struct pool_db *b = env_used_db(&e, "bob");
	cr_assert_eq(pool_warm(&e.pool), 4);
	cr_assert_eq(e.open_calls, 4);
	uint32_t for_a = 0, for_b = 0;
	for (uint32_t i = 0; i < e.open_calls; i++) {
		for_a += e.opens[i].db == a;
		for_b += e.opens[i].db == b;
	}
	cr_assert_eq(for_a, 2);
	cr_assert_eq(for_b, 2);
	check_invariants(&e, "warming");
	cr_assert_eq(pool_warm(&e.pool), 0, "opens on the way count toward the minimum");
	for (uint32_t i = 0; i < 4; i++)
		(void)env_open_succeeds(&e, i);
	cr_assert_eq(e.server->free_count, 4, "warmed conns wait FREE");
	check_invariants(&e, "warm");
	cr_assert_eq(pool_warm(&e.pool), 0, "open conns count toward the minimum");
	/* A lost connection is replaced on the next pass. */
	struct waiter w;
	waiter_init(&w, &e, a);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_GOT);
	pool_conn_discard(&e.pool, w.req.conn);
	cr_assert_eq(pool_warm(&e.pool), 1);
	cr_assert_eq(e.opens[e.open_calls - 1].db, a);
	check_invariants(&e, "rewarming");
	(void)env_open_succeeds(&e, e.open_calls - 1);
	env_deinit(&e);
}

Test(pool, an_open_whose_waiters_left_is_dropped_before_it_begins_and_its_key_freed)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = pool_db_get(&e.pool, "gone", "nowhere", NULL, NULL, 0);
	cr_assert_not_null(db);
	struct waiter w;
	waiter_init(&w, &e, db);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 1, "an open for the waiter");
	cr_assert(pool_request_cancel(&e.pool, &w.req), "the client left before its login began");
	pool_db_put(&e.pool, db);
	cr_assert_eq(e.pool.db_count, 1, "the open on its way still names the key");
	cr_assert_not(pool_open_begin(&e.pool, e.server, db), "nobody waits: the open is given up");
	cr_assert_eq(e.server->opening_count, 0);
	cr_assert_eq(e.server->open_dropped_total, 1);
	cr_assert_eq(e.pool.db_count, 0, "and the key goes with it, at once");
	check_invariants(&e, "dropped");
	env_deinit(&e);
}

Test(pool, an_open_a_request_still_waits_for_begins)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w;
	waiter_init(&w, &e, db);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	cr_assert(pool_open_begin(&e.pool, e.server, db));
	cr_assert_eq(e.server->opening_count, 1);
	(void)env_open_succeeds(&e, 0);
	cr_assert_eq(w.done_calls, 1, "granted");
	check_invariants(&e, "granted");
	pool_checkin(&e.pool, w.req.conn, e.now_ns);
	pool_db_put(&e.pool, db);
	cr_assert_eq(e.pool.db_count, 1, "a key with a connection open stays after its last client");
	env_deinit(&e);
}

Test(pool, a_key_with_no_connection_goes_with_its_last_holder)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct pool_db *again = env_db(&e, "alice");
	cr_assert_eq(db, again);
	pool_db_put(&e.pool, db);
	cr_assert_eq(e.pool.db_count, 1, "one holder left");
	pool_db_put(&e.pool, again);
	cr_assert_eq(e.pool.db_count, 0, "freed at once, not at the next sweep");
	env_deinit(&e);
}

Test(pool, warm_never_passes_pool_size)
{
	struct env e;
	env_init(&e, 3, 2);
	(void)env_used_db(&e, "alice");
	(void)env_used_db(&e, "bob");
	cr_assert_eq(pool_warm(&e.pool), 3);
	cr_assert_eq(e.server->opening_count, 3);
	check_invariants(&e, "warm within pool_size");
	for (uint32_t i = 0; i < 3; i++)
		(void)env_open_succeeds(&e, i);
	check_invariants(&e, "warm done");
	env_deinit(&e);
}

Test(pool, open_landing_after_its_waiter_was_handed_a_conn_goes_free)
{
	struct env e;
	env_init(&e, 2, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	struct pool_conn *c1 = env_open_succeeds(&e, 0);
	cr_assert_eq(w1.req.conn, c1);
	env_checkin(&e, c1);
	cr_assert_eq(w2.req.conn, c1, "w2 takes the released conn before its own open lands");
	check_invariants(&e, "handed over with an open pending");
	struct pool_conn *c2 = env_open_succeeds(&e, 1);
	cr_assert_eq(c2->state, POOL_CONN_FREE);
	cr_assert_eq(w2.done_calls, 1);
	check_invariants(&e, "late open went FREE");
	env_deinit(&e);
}

Test(pool, each_server_counts_its_own_slots_and_pool_size)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_server *replica;
	cr_assert_eq(pool_server_add(&e.pool, "replica", "host=r", &replica), 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter on_primary, on_replica;
	waiter_init(&on_primary, &e, db);
	waiter_init(&on_replica, &e, db);
	on_replica.req.server = replica;
	cr_assert_eq(env_checkout(&e, &on_primary), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &on_replica), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 2, "pool_size is per server");
	cr_assert_eq(e.opens[1].server, replica);
	struct pool_conn *conn = env_open_succeeds(&e, 1);
	cr_assert_eq(on_replica.req.conn, conn);
	cr_assert_eq(conn->server, replica);
	cr_assert_eq(on_primary.done_calls, 0, "a replica conn never serves a primary waiter");
	cr_assert_eq(db->slots[1].open_count, 1);
	cr_assert_eq(db->slots[0].open_count, 0);
	check_invariants(&e, "one conn per server");
	(void)env_open_succeeds(&e, 0);
	cr_assert_eq(on_primary.done_calls, 1);
	check_invariants(&e, "both served");
	env_deinit(&e);
}

Test(pool, deinit_closes_every_conn_free_or_held)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	(void)env_open_succeeds(&e, 0);
	env_checkin(&e, env_open_succeeds(&e, 1));
	cr_assert_eq(e.conns_live, 2);
	pool_deinit(&e.pool);
	cr_assert_eq(e.close_calls, 2);
	cr_assert_eq(e.conns_live, 0);
}

Test(pool, settings_change_applies_to_the_next_decision)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	struct pool_settings bigger = {.pool_size = 2, .max_server_connections = 2};
	pool_set_settings(&e.pool, &bigger);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 2, "the larger pool_size allows a second open");
	(void)env_open_succeeds(&e, 0);
	(void)env_open_succeeds(&e, 1);
	check_invariants(&e, "after growing");
	env_deinit(&e);
}

/* server_idle_timeout and server_lifetime: FREE connections past either are closed by pool_expire. */
Test(pool, expire_closes_free_conns_idle_or_old_and_keeps_the_rest)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_settings settings = {.pool_size = 4, .max_server_connections = 4, .idle_timeout_ns = 10000, .lifetime_ns = 100000};
	pool_set_settings(&e.pool, &settings);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	struct pool_conn *old = env_open_succeeds(&e, 0);
	struct pool_conn *young = env_open_succeeds(&e, 1);
	env_checkin(&e, old);
	e.now_ns += 4000;
	env_checkin(&e, young);
	cr_assert_eq(pool_expire(&e.pool, e.now_ns), 0, "old idle 5 us, young 0: under 10 us");
	e.now_ns += 6000; /* old: idle 11 us; young: idle 6 us */
	uint32_t old_id = old->backend_pid;
	cr_assert_eq(pool_expire(&e.pool, e.now_ns), 1);
	cr_assert_eq(e.close_calls, 1);
	cr_assert_eq(e.closed_ids[0], old_id, "the idle one went");
	check_invariants(&e, "idle expired");
	cr_assert_eq(e.server->free_count, 1);
	/* A connection past its lifetime goes even if it was just used. */
	e.now_ns = young->opened_ns + 100000;
	young->released_ns = e.now_ns;
	cr_assert_eq(pool_expire(&e.pool, e.now_ns), 1);
	cr_assert_eq(e.server->open_count, 0);
	check_invariants(&e, "lifetime expired");
	env_deinit(&e);
}

Test(pool, checkin_past_lifetime_closes_the_conn_and_opens_a_fresh_one_for_a_waiter)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_settings settings = {.pool_size = 1, .max_server_connections = 1, .lifetime_ns = 50000};
	pool_set_settings(&e.pool, &settings);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED, "the only connection is held");
	e.now_ns = conn->opened_ns + 50000;
	env_checkin(&e, conn);
	cr_assert_eq(e.close_calls, 1, "not handed over past its lifetime");
	cr_assert_eq(w2.done_calls, 0);
	cr_assert_eq(e.open_calls, 2, "a fresh open for the waiter");
	check_invariants(&e, "replaced");
	struct pool_conn *fresh = env_open_succeeds(&e, 1);
	cr_assert_eq(w2.req.conn, fresh);
	env_checkin(&e, fresh);
	env_deinit(&e);
}

/* A reload that raises pool_size serves requests already parked at once. */
Test(pool, raising_pool_size_opens_for_requests_already_parked)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter w1, w2;
	waiter_init(&w1, &e, db);
	waiter_init(&w2, &e, db);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	(void)env_open_succeeds(&e, 0);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 1, "the pool is full");
	struct pool_settings settings = {.pool_size = 2, .max_server_connections = 2};
	pool_set_settings(&e.pool, &settings);
	cr_assert_eq(e.open_calls, 2, "an open for the parked request, without waiting for a release");
	check_invariants(&e, "raised");
	struct pool_conn *second = env_open_succeeds(&e, 1);
	cr_assert_eq(w2.req.conn, second);
	env_checkin(&e, w1.req.conn);
	env_checkin(&e, second);
	env_deinit(&e);
}

/* ---- snapshots for the admin console ---- */

static void check_db_row(const struct pool_db_row *row, const struct pool_db *db, uint32_t server_index,
			 uint32_t free_count, uint32_t used_count, uint32_t opening_count, uint32_t waiting_count,
			 uint64_t oldest_parked_ns)
{
	cr_assert(strcmp(row->user, db->user) == 0 && strcmp(row->database, db->database) == 0,
		  "row of %s/%u: another db (%s/%s)", db->user, server_index, row->user, row->database);
	cr_assert_eq(row->server_index, server_index, "row of %s: server %u", db->user, row->server_index);
	cr_assert_eq(row->free_count, free_count, "%s/%u: free %u", db->user, server_index, row->free_count);
	cr_assert_eq(row->used_count, used_count, "%s/%u: used %u", db->user, server_index, row->used_count);
	cr_assert_eq(row->opening_count, opening_count, "%s/%u: opening %u", db->user, server_index,
		     row->opening_count);
	cr_assert_eq(row->waiting_count, waiting_count, "%s/%u: waiting %u", db->user, server_index,
		     row->waiting_count);
	cr_assert_eq(row->oldest_parked_ns, oldest_parked_ns, "%s/%u: oldest parked %llu", db->user, server_index,
		     (unsigned long long)row->oldest_parked_ns);
}

Test(pool, snapshots_of_a_pool_without_dbs_or_conns_are_empty)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_db_row *db_rows = (struct pool_db_row *)&e; /* must be overwritten */
	uint32_t db_count = 99;
	cr_assert_eq(pool_snapshot_dbs(&e.pool, &db_rows, &db_count), 0);
	cr_assert_null(db_rows);
	cr_assert_eq(db_count, 0);
	struct pool_conn_row *conn_rows = (struct pool_conn_row *)&e;
	uint32_t conn_count = 99;
	cr_assert_eq(pool_snapshot_conns(&e.pool, &conn_rows, &conn_count), 0);
	cr_assert_null(conn_rows);
	cr_assert_eq(conn_count, 0);
	cr_assert(pool_is_idle(&e.pool));
	/* A known key with nothing open still has its row on every server. */
	struct pool_server *replica;
	cr_assert_eq(pool_server_add(&e.pool, "replica", "host=r", &replica), 0);
	struct pool_db *db = env_db(&e, "alice");
	cr_assert_eq(pool_snapshot_dbs(&e.pool, &db_rows, &db_count), 0);
	cr_assert_eq(db_count, 2);
	check_db_row(&db_rows[0], db, 0, 0, 0, 0, 0, 0);
	check_db_row(&db_rows[1], db, 1, 0, 0, 0, 0, 0);
	free(db_rows);
	conn_rows = (struct pool_conn_row *)&e;
	cr_assert_eq(pool_snapshot_conns(&e.pool, &conn_rows, &conn_count), 0);
	cr_assert_null(conn_rows, "no connection is open");
	cr_assert_eq(conn_count, 0);
	env_deinit(&e);
}

Test(pool, snapshot_dbs_counts_each_key_on_each_server)
{
	struct env e;
	env_init(&e, 10, 0);
	struct pool_server *replica;
	cr_assert_eq(pool_server_add(&e.pool, "replica", "host=r", &replica), 0);
	struct pool_db *alice = env_db(&e, "alice");
	struct pool_db *bob = env_db(&e, "bob");
	/* alice on the primary: one USED, one FREE, one open on its way for a cancelled request. */
	struct waiter a1, a2, a3;
	waiter_init(&a1, &e, alice);
	waiter_init(&a2, &e, alice);
	waiter_init(&a3, &e, alice);
	cr_assert_eq(env_checkout(&e, &a1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &a2), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &a3), POOL_CHECKOUT_PARKED);
	cr_assert(pool_request_cancel(&e.pool, &a3.req));
	(void)env_open_succeeds(&e, 0);
	env_checkin(&e, env_open_succeeds(&e, 1));
	/* bob on the primary: one USED, two waiting, two opens on their way. */
	struct waiter b1, b2, b3;
	waiter_init(&b1, &e, bob);
	waiter_init(&b2, &e, bob);
	waiter_init(&b3, &e, bob);
	cr_assert_eq(env_checkout(&e, &b1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &b2), POOL_CHECKOUT_PARKED);
	(void)env_open_succeeds(&e, 3);
	cr_assert_eq(b1.done_calls, 1);
	cr_assert_eq(env_checkout(&e, &b3), POOL_CHECKOUT_PARKED);
	/* alice on the replica: one waiting; bob on the replica: two FREE. */
	struct waiter ra, rb1, rb2;
	waiter_init(&ra, &e, alice);
	waiter_init(&rb1, &e, bob);
	waiter_init(&rb2, &e, bob);
	ra.req.server = rb1.req.server = rb2.req.server = replica;
	cr_assert_eq(env_checkout(&e, &ra), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &rb1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &rb2), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 9);
	struct pool_conn *r1 = env_open_succeeds(&e, 7);
	struct pool_conn *r2 = env_open_succeeds(&e, 8);
	env_checkin(&e, r1);
	env_checkin(&e, r2);
	check_invariants(&e, "mixed state");

	struct pool_db_row *rows = NULL;
	uint32_t count = 0;
	cr_assert_eq(pool_snapshot_dbs(&e.pool, &rows, &count), 0);
	cr_assert_eq(count, 4, "two dbs x two servers");
	cr_assert_not_null(rows);
	check_db_row(&rows[0], alice, 0, 1, 1, 1, 0, 0);
	check_db_row(&rows[1], alice, 1, 0, 0, 1, 1, ra.req.parked_ns);
	check_db_row(&rows[2], bob, 0, 0, 1, 2, 2, b2.req.parked_ns);
	check_db_row(&rows[3], bob, 1, 2, 0, 0, 0, 0);
	cr_assert_lt(b2.req.parked_ns, b3.req.parked_ns, "b2 is the oldest bob waiter left on the primary");
	free(rows);

	/* A request whose caller's clock ran behind still counts as the oldest. */
	b3.req.parked_ns = b2.req.parked_ns - 1;
	cr_assert_eq(pool_snapshot_dbs(&e.pool, &rows, &count), 0);
	check_db_row(&rows[2], bob, 0, 0, 1, 2, 2, b3.req.parked_ns);
	free(rows);

	cr_assert(pool_request_cancel(&e.pool, &b2.req));
	cr_assert(pool_request_cancel(&e.pool, &b3.req));
	cr_assert(pool_request_cancel(&e.pool, &ra.req));
	env_deinit(&e);
}

Test(pool, snapshot_conns_lists_used_then_free_per_server)
{
	struct env e;
	env_init(&e, 10, 0);
	struct pool_server *replica;
	cr_assert_eq(pool_server_add(&e.pool, "replica", "host=r", &replica), 0);
	struct pool_db *alice = env_db(&e, "alice");
	struct pool_db *bob = env_db(&e, "bob");
	struct waiter w[5];
	struct pool_db *dbs[5] = {alice, bob, alice, bob, alice};
	for (uint32_t i = 0; i < 5; i++) {
		waiter_init(&w[i], &e, dbs[i]);
		if (i >= 3)
			w[i].req.server = replica;
		cr_assert_eq(env_checkout(&e, &w[i]), POOL_CHECKOUT_PARKED);
	}
	struct pool_conn *c[5];
	for (uint32_t i = 0; i < 5; i++)
		c[i] = env_open_succeeds(&e, i);
	/* Primary: c0, c2 USED, c1 FREE. Replica: c4 USED, c3 FREE. */
	env_checkin(&e, c[1]);
	env_checkin(&e, c[3]);
	check_invariants(&e, "three USED, two FREE");

	struct pool_conn_row *rows = NULL;
	uint32_t count = 0;
	cr_assert_eq(pool_snapshot_conns(&e.pool, &rows, &count), 0);
	cr_assert_eq(count, 5);
	cr_assert_not_null(rows);
	uint32_t order[5] = {0, 2, 1, 4, 3};
	enum pool_conn_state states[5] = {POOL_CONN_USED, POOL_CONN_USED, POOL_CONN_FREE, POOL_CONN_USED,
					  POOL_CONN_FREE};
	uint32_t servers[5] = {0, 0, 0, 1, 1};
	for (uint32_t i = 0; i < 5; i++) {
		const struct pool_conn *conn = c[order[i]];
		cr_assert_eq(rows[i].id, (uintptr_t)conn, "row %u is not conn %u", i, order[i]);
		cr_assert_str_eq(rows[i].user, conn->db->user, "row %u", i);
		cr_assert_str_eq(rows[i].user, dbs[order[i]]->user, "row %u", i);
		cr_assert_eq(rows[i].server_index, servers[i], "row %u", i);
		cr_assert_eq(rows[i].state, states[i], "row %u: state %d", i, rows[i].state);
		cr_assert_eq(rows[i].backend_pid, conn->backend_pid, "row %u", i);
		cr_assert_eq(rows[i].opened_ns, conn->opened_ns, "row %u", i);
		cr_assert_eq(rows[i].released_ns, conn->released_ns, "row %u", i);
	}
	cr_assert_eq(rows[2].backend_pid, 1001, "pids count from 1000 in open order");
	cr_assert_gt(rows[2].released_ns, rows[2].opened_ns, "a FREE conn's release time is its checkin's");
	free(rows);

	/* A connection closed after the snapshot keeps its row; the next snapshot no longer lists it. */
	pool_conn_discard(&e.pool, c[0]);
	cr_assert_eq(pool_snapshot_conns(&e.pool, &rows, &count), 0);
	cr_assert_eq(count, 4);
	cr_assert_eq(rows[0].id, (uintptr_t)c[2]);
	free(rows);
	env_deinit(&e);
}

Test(pool, is_idle_only_with_nothing_used_and_nothing_parked_on_any_server)
{
	struct env e;
	env_init(&e, 4, 0);
	struct pool_server *replica;
	cr_assert_eq(pool_server_add(&e.pool, "replica", "host=r", &replica), 0);
	struct pool_db *db = env_db(&e, "alice");
	cr_assert(pool_is_idle(&e.pool));
	struct waiter w;
	waiter_init(&w, &e, db);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	cr_assert_not(pool_is_idle(&e.pool), "a request is parked");
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	cr_assert_eq(w.req.conn, conn);
	cr_assert_eq(e.server->waiter_count, 0);
	cr_assert_not(pool_is_idle(&e.pool), "a connection is USED");
	env_checkin(&e, conn);
	cr_assert(pool_is_idle(&e.pool), "FREE connections only");
	/* Every server counts, not only the first. */
	struct waiter on_replica;
	waiter_init(&on_replica, &e, db);
	on_replica.req.server = replica;
	cr_assert_eq(env_checkout(&e, &on_replica), POOL_CHECKOUT_PARKED);
	cr_assert_not(pool_is_idle(&e.pool), "a request is parked on the replica");
	cr_assert(pool_request_cancel(&e.pool, &on_replica.req));
	cr_assert_eq(replica->opening_count, 1);
	cr_assert(pool_is_idle(&e.pool), "an open on its way holds no session");
	struct pool_conn *late = env_open_succeeds(&e, 1);
	cr_assert_eq(late->state, POOL_CONN_FREE);
	cr_assert(pool_is_idle(&e.pool));
	check_invariants(&e, "idle");
	env_deinit(&e);
}

Test(pool, checkin_to_hands_a_connection_to_the_callers_own_waiter_ahead_of_older_ones)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter holder, older, mine, other_key;
	waiter_init(&holder, &e, db);
	waiter_init(&older, &e, db);
	waiter_init(&mine, &e, db);
	waiter_init(&other_key, &e, env_db(&e, "bob"));
	cr_assert_eq(env_checkout(&e, &holder), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	cr_assert_eq(holder.req.conn, conn);
	cr_assert_eq(env_checkout(&e, &older), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &mine), POOL_CHECKOUT_PARKED);

	cr_assert(pool_checkin_to(&e.pool, conn, &mine.req, e.now_ns), "the caller's waiter gets it");
	cr_assert_eq(mine.req.conn, conn);
	cr_assert_eq(mine.req.state, POOL_REQUEST_DONE);
	cr_assert_eq(mine.done_calls, 0, "handed over by the caller: no on_done");
	cr_assert_eq(older.done_calls, 0, "the older waiter still waits");
	cr_assert_eq(e.server->waiter_count, 1);
	cr_assert_eq(db->slots[0].waiting_count, 1);
	cr_assert_eq(conn->state, POOL_CONN_USED, "it stays in use, changing holder");

	/* A request that is no longer parked, or of another key: the connection goes as pool_checkin sends it. */
	cr_assert_not(pool_checkin_to(&e.pool, conn, &other_key.req, e.now_ns));
	cr_assert_eq(older.done_calls, 1, "to the oldest waiter of its key");
	cr_assert_eq(older.req.conn, conn);
	pool_checkin(&e.pool, conn, e.now_ns);
	env_deinit(&e);
}

Test(pool, checkin_to_never_hands_over_a_connection_past_its_lifetime)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_settings settings = {.pool_size = 1, .max_server_connections = 1, .lifetime_ns = 5000};
	pool_set_settings(&e.pool, &settings);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter holder, mine;
	waiter_init(&holder, &e, db);
	waiter_init(&mine, &e, db);
	cr_assert_eq(env_checkout(&e, &holder), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	cr_assert_eq(env_checkout(&e, &mine), POOL_CHECKOUT_PARKED);
	e.now_ns += 10000;
	cr_assert_not(pool_checkin_to(&e.pool, conn, &mine.req, e.now_ns), "too old to hand on");
	cr_assert_eq(e.close_calls, 1, "closed instead");
	cr_assert_eq(e.open_calls, 2, "and a fresh one opened for the waiter");
	cr_assert_eq(mine.req.state, POOL_REQUEST_PARKED);
	env_open_succeeds(&e, 1);
	cr_assert_eq(mine.done_calls, 1);
	pool_checkin(&e.pool, mine.req.conn, e.now_ns);
	env_deinit(&e);
}

Test(pool, checkin_to_passes_over_an_older_waiter_for_a_short_while_only)
{
	struct env e;
	env_init(&e, 1, 0);
	struct pool_db *db = env_db(&e, "alice");
	struct waiter holder, remote, mine;
	waiter_init(&holder, &e, db);
	waiter_init(&remote, &e, db);
	waiter_init(&mine, &e, db);
	cr_assert_eq(env_checkout(&e, &holder), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	cr_assert_eq(env_checkout(&e, &remote), POOL_CHECKOUT_PARKED); /* another worker's, older */
	e.now_ns += POOL_LOCAL_BYPASS_NS + 1;
	cr_assert_eq(env_checkout(&e, &mine), POOL_CHECKOUT_PARKED);
	cr_assert_not(pool_checkin_to(&e.pool, conn, &mine.req, e.now_ns),
		      "the older waiter has waited too long to be passed over");
	cr_assert_eq(remote.done_calls, 1, "it gets the connection");
	cr_assert_eq(remote.req.conn, conn);
	cr_assert_eq(mine.req.state, POOL_REQUEST_PARKED, "the local one waits its turn");
	pool_checkin(&e.pool, conn, e.now_ns); /* remote's release: now mine is the oldest */
	cr_assert_eq(mine.done_calls, 1);
	pool_checkin(&e.pool, mine.req.conn, e.now_ns);
	env_deinit(&e);
}

/* ---- PgBouncer's limits: per pair, per database, per user, the reserve, and a lowered size ---- */

static void env_settings(struct env *e, struct pool_settings settings)
{
	pool_set_settings(&e->pool, &settings);
}

static struct pool_db *env_db_in(struct env *e, const char *user, const char *database)
{
	struct pool_db *db = pool_db_get(&e->pool, user, database, NULL, NULL, 0);
	cr_assert_not_null(db);
	return db;
}

Test(pool, pool_size_limits_each_pair_and_not_the_others)
{
	struct env e;
	env_init(&e, 2, 0);
	env_settings(&e, (struct pool_settings){.pool_size = 2});
	struct pool_db *a = env_db(&e, "alice"), *b = env_db(&e, "bob");
	struct waiter wa[3], wb[2];
	for (int i = 0; i < 3; i++) {
		waiter_init(&wa[i], &e, a);
		cr_assert_eq(env_checkout(&e, &wa[i]), POOL_CHECKOUT_PARKED);
	}
	cr_assert_eq(e.open_calls, 2, "alice's pair stops at pool_size");
	for (int i = 0; i < 2; i++) {
		waiter_init(&wb[i], &e, b);
		cr_assert_eq(env_checkout(&e, &wb[i]), POOL_CHECKOUT_PARKED);
	}
	cr_assert_eq(e.open_calls, 4, "bob's pair has its own pool_size");
	check_invariants(&e, "two pairs");
	for (uint32_t i = 0; i < 4; i++)
		(void)env_open_succeeds(&e, i);
	cr_assert(pool_request_cancel(&e.pool, &wa[2].req));
	check_invariants(&e, "served");
	env_deinit(&e);
}

Test(pool, max_db_connections_counts_every_user_of_a_database_and_evicts_an_idle_one_for_another)
{
	struct env e;
	env_init(&e, 5, 0);
	env_settings(&e, (struct pool_settings){.pool_size = 5, .max_db_connections = 2});
	struct pool_db *a = env_db(&e, "alice"), *b = env_db(&e, "bob"), *elsewhere = env_db_in(&e, "bob", "web");
	struct waiter wa[2], wb, we;
	for (int i = 0; i < 2; i++) {
		waiter_init(&wa[i], &e, a);
		cr_assert_eq(env_checkout(&e, &wa[i]), POOL_CHECKOUT_PARKED);
	}
	struct pool_conn *ca0 = env_open_succeeds(&e, 0), *ca1 = env_open_succeeds(&e, 1);
	waiter_init(&wb, &e, b);
	cr_assert_eq(env_checkout(&e, &wb), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 2, "database shop is at max_db_connections: bob waits");
	waiter_init(&we, &e, elsewhere);
	cr_assert_eq(env_checkout(&e, &we), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 3, "another database is not limited by shop's");
	cr_assert_eq(e.opens[2].db, elsewhere);
	check_invariants(&e, "shop full");
	uint32_t id = ca0->backend_pid;
	env_checkin(&e, ca0); /* no alice waits: it would stay idle, so bob's request takes its place */
	cr_assert_eq(e.close_calls, 1);
	cr_assert_eq(e.closed_ids[0], id);
	cr_assert_eq(e.open_calls, 4);
	cr_assert_eq(e.opens[3].db, b);
	check_invariants(&e, "evicted for bob");
	(void)env_open_succeeds(&e, 3);
	(void)env_open_succeeds(&e, 2);
	cr_assert_eq(wb.done_calls + we.done_calls, 2);
	env_checkin(&e, ca1);
	check_invariants(&e, "both served");
	env_deinit(&e);
}

Test(pool, max_user_connections_counts_every_database_of_a_user)
{
	struct env e;
	env_init(&e, 5, 0);
	env_settings(&e, (struct pool_settings){.pool_size = 5, .max_user_connections = 1});
	struct pool_db *shop = env_db(&e, "alice"), *web = env_db_in(&e, "alice", "web"), *bob = env_db(&e, "bob");
	struct waiter w1, w2, w3;
	waiter_init(&w1, &e, shop);
	waiter_init(&w2, &e, web);
	waiter_init(&w3, &e, bob);
	cr_assert_eq(env_checkout(&e, &w1), POOL_CHECKOUT_PARKED);
	cr_assert_eq(env_checkout(&e, &w2), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 1, "alice's second database waits for her one connection");
	cr_assert_eq(env_checkout(&e, &w3), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 2, "bob is not alice");
	check_invariants(&e, "alice at her limit");
	struct pool_conn *c1 = env_open_succeeds(&e, 0);
	(void)env_open_succeeds(&e, 1);
	env_checkin(&e, c1);
	cr_assert_eq(e.close_calls, 1, "her idle connection to shop makes room for web");
	cr_assert_eq(e.opens[2].db, web);
	(void)env_open_succeeds(&e, 2);
	cr_assert_eq(w2.done_calls, 1);
	check_invariants(&e, "web served");
	env_deinit(&e);
}

Test(pool, the_reserve_opens_only_for_a_request_that_waited_reserve_pool_timeout)
{
	struct env e;
	env_init(&e, 1, 0);
	env_settings(&e, (struct pool_settings){.pool_size = 1, .reserve_pool_size = 1, .reserve_pool_timeout_ns = 50000});
	struct pool_db *a = env_db(&e, "alice");
	struct waiter w[3];
	for (int i = 0; i < 3; i++)
		waiter_init(&w[i], &e, a);
	cr_assert_eq(env_checkout(&e, &w[0]), POOL_CHECKOUT_PARKED);
	struct pool_conn *held = env_open_succeeds(&e, 0);
	cr_assert_eq(env_checkout(&e, &w[1]), POOL_CHECKOUT_PARKED);
	uint64_t parked = e.now_ns;
	(void)pool_expire(&e.pool, parked + 49999);
	cr_assert_eq(e.open_calls, 1, "not before reserve_pool_timeout");
	(void)pool_expire(&e.pool, parked + 50000);
	cr_assert_eq(e.open_calls, 2, "the reserve opens one more for the waiter");
	check_invariants(&e, "reserve opening");
	e.now_ns = parked + 50000;
	(void)env_open_succeeds(&e, 1);
	cr_assert_eq(w[1].done_calls, 1);
	cr_assert_eq(env_checkout(&e, &w[2]), POOL_CHECKOUT_PARKED);
	(void)pool_expire(&e.pool, e.now_ns + 100000);
	cr_assert_eq(e.open_calls, 2, "the reserve is one connection: a third waits");
	/* Released with no one waiting long, a connection over pool_size is closed, not kept. */
	cr_assert(pool_request_cancel(&e.pool, &w[2].req));
	env_checkin(&e, w[1].req.conn);
	cr_assert_eq(e.close_calls, 1, "the reserve connection goes when it is no longer needed");
	env_checkin(&e, held);
	cr_assert_eq(e.close_calls, 1, "pool_size's own stays");
	check_invariants(&e, "back to pool_size");
	env_deinit(&e);
}

Test(pool, a_lowered_pool_size_closes_connections_as_they_are_released_and_idle_ones_at_the_next_pass)
{
	struct env e;
	env_init(&e, 4, 0);
	env_settings(&e, (struct pool_settings){.pool_size = 4});
	struct pool_db *a = env_db(&e, "alice");
	struct waiter w[4];
	struct pool_conn *conns[4];
	for (int i = 0; i < 4; i++) {
		waiter_init(&w[i], &e, a);
		cr_assert_eq(env_checkout(&e, &w[i]), POOL_CHECKOUT_PARKED);
	}
	for (uint32_t i = 0; i < 4; i++)
		conns[i] = env_open_succeeds(&e, i);
	env_checkin(&e, conns[3]); /* idle when the size drops */
	env_settings(&e, (struct pool_settings){.pool_size = 1});
	struct waiter late;
	waiter_init(&late, &e, a);
	cr_assert_eq(env_checkout(&e, &late), POOL_CHECKOUT_GOT, "the idle one is still there to take");
	env_checkin(&e, late.req.conn);
	cr_assert_eq(e.close_calls, 1, "released above the new size: closed");
	env_checkin(&e, conns[0]);
	env_checkin(&e, conns[1]);
	cr_assert_eq(e.close_calls, 3);
	env_checkin(&e, conns[2]);
	cr_assert_eq(e.close_calls, 3, "the last one fits the new size and stays");
	cr_assert_eq(e.server->open_count, 1);
	check_invariants(&e, "shrunk");
	/* An idle connection above a lowered size goes at the next pass of the pool thread. */
	env_settings(&e, (struct pool_settings){.pool_size = 1, .max_user_connections = 1});
	struct pool_db *b = env_db_in(&e, "alice", "web");
	struct waiter wb;
	waiter_init(&wb, &e, b);
	cr_assert_eq(env_checkout(&e, &wb), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.close_calls, 4, "her idle shop connection makes room for web at once");
	(void)env_open_succeeds(&e, 4);
	env_settings(&e, (struct pool_settings){.pool_size = 1, .max_user_connections = 1, .max_server_connections = 0});
	env_checkin(&e, wb.req.conn);
	cr_assert_eq(pool_expire(&e.pool, e.now_ns + 1), 0, "within every limit: nothing closes");
	env_settings(&e, (struct pool_settings){.pool_size = 0});
	cr_assert_eq(pool_expire(&e.pool, e.now_ns + 1), 1, "pool_size 0: the idle one closes at the pass");
	check_invariants(&e, "expired above the limit");
	env_deinit(&e);
}

/* ---- server_login_retry ---- */

Test(pool, a_server_that_did_not_answer_keeps_its_requests_parked_until_the_retry_succeeds)
{
	struct env e;
	env_init(&e, 2, 0);
	env_settings(&e, (struct pool_settings){.pool_size = 2, .login_retry_ns = 10000});
	struct pool_db *a = env_db(&e, "alice");
	struct waiter w[2];
	for (int i = 0; i < 2; i++) {
		waiter_init(&w[i], &e, a);
		cr_assert_eq(env_checkout(&e, &w[i]), POOL_CHECKOUT_PARKED);
	}
	cr_assert_eq(e.open_calls, 2);
	env_open_fails(&e, 0, "08006", "could not connect to the server: Connection refused");
	env_open_fails(&e, 1, "57P03", "the database system is starting up");
	uint64_t failed = e.now_ns;
	cr_assert_eq(w[0].done_calls + w[1].done_calls, 0, "nobody is failed: the server may come back");
	cr_assert_eq(e.open_calls, 2, "and nothing is opened before server_login_retry");
	check_invariants(&e, "waiting for the retry");
	struct waiter late;
	waiter_init(&late, &e, a);
	cr_assert_eq(env_checkout(&e, &late), POOL_CHECKOUT_PARKED);
	cr_assert_eq(e.open_calls, 2, "a new request waits for the retry too");
	(void)pool_expire(&e.pool, failed + 9999);
	cr_assert_eq(e.open_calls, 2);
	(void)pool_expire(&e.pool, failed + 10000);
	cr_assert_eq(e.open_calls, 2 + 2, "the pass retries for the waiting requests, within pool_size");
	e.now_ns = failed + 10000;
	(void)env_open_succeeds(&e, 2);
	(void)env_open_succeeds(&e, 3);
	cr_assert_eq(w[0].done_calls + w[1].done_calls, 2);
	cr_assert(w[0].req.conn && w[0].req.error.sqlstate[0] == '\0', "granted, not failed");
	cr_assert(pool_request_cancel(&e.pool, &late.req));
	check_invariants(&e, "served after the retry");
	env_deinit(&e);
}

/* One server, pool_size 1, login retries on: alice's request parks and its open fails with sqlstate. */
static struct pool_db *env_first_open_fails(struct env *e, struct waiter *w, const char *sqlstate,
					     const char *message)
{
	env_init(e, 1, 0);
	env_settings(e, (struct pool_settings){.pool_size = 1, .login_retry_ns = 10000});
	struct pool_db *a = env_db(e, "alice");
	waiter_init(w, e, a);
	cr_assert_eq(env_checkout(e, w), POOL_CHECKOUT_PARKED);
	env_open_fails(e, 0, sqlstate, message);
	return a;
}

Test(pool, a_server_that_refused_the_login_fails_the_request_at_once_and_retry_0_fails_every_error_at_once)
{
	struct env e;
	struct waiter w;
	struct pool_db *a = env_first_open_fails(&e, &w, "28P01", "password authentication failed");
	cr_assert_eq(w.done_calls, 1, "the server's own verdict goes to the client");
	cr_assert_str_eq(w.req.error.sqlstate, "28P01");
	env_settings(&e, (struct pool_settings){.pool_size = 1, .login_retry_ns = 0});
	waiter_init(&w, &e, a);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	env_open_fails(&e, 1, "08006", "could not connect to the server: Connection refused");
	cr_assert_eq(w.done_calls, 1, "server_login_retry 0: fail fast");
	cr_assert_str_eq(w.req.error.sqlstate, "08006");
	check_invariants(&e, "failed fast");
	env_deinit(&e);
}

Test(pool, a_server_tls_refused_as_configured_fails_the_request_at_once_though_retries_are_on)
{
	struct env e;
	struct waiter w;
	(void)env_first_open_fails(&e, &w, "08004",
				   "server certificate for \"localhost\" does not match host name \"127.0.0.1\"");
	cr_assert_eq(w.done_calls, 1, "08004: a retry would meet the same certificate");
	cr_assert_str_eq(w.req.error.sqlstate, "08004");
	check_invariants(&e, "failed at once");
	env_deinit(&e);
}

/* libpq's words as the client's SQLSTATE: TLS refused as configured is 08004 (not retried), a TLS
 * connection that broke is 08006 (retried), and a FATAL of the server's keeps its own meaning. */
Test(pool, libpq_messages_map_tls_refusals_to_08004_and_the_rest_as_before)
{
	static const struct {
		const char *message, *sqlstate;
	} cases[] = {
		{"connection to server at \"h\" (127.0.0.1), port 5 failed: server certificate for \"localhost\" does not "
		 "match host name \"127.0.0.1\"", "08004"},
		{"connection to server at \"h\", port 5 failed: SSL error: certificate verify failed", "08004"},
		{"connection to server at \"h\", port 5 failed: server does not support SSL, but SSL was required", "08004"},
		{"connection to server at \"h\", port 5 failed: root certificate file \"/x.pem\" does not exist", "08004"},
		{"connection to server at \"h\", port 5 failed: could not load private key file \"/k\": No such file",
		 "08004"},
		{"connection to server at \"h\", port 5 failed: SSL error: tlsv1 alert unknown ca", "08004"},
		{"connection to server at \"h\", port 5 failed: SSL SYSCALL error: EOF detected", "08006"},
		{"connection to server at \"h\", port 5 failed: Connection refused", "08006"},
		{"connection to server at \"h\", port 5 failed: FATAL:  connection requires a valid client certificate",
		 "08006"},
		{"connection to server at \"h\", port 5 failed: FATAL:  database \"x\" does not exist", "3D000"},
		{"connection to server at \"h\", port 5 failed: FATAL:  password authentication failed for user \"a\"",
		 "28P01"},
	};
	for (size_t i = 0; i < TERN_ARRAY_LEN(cases); i++) {
		struct pool_error err;
		pool_error_from_libpq(cases[i].message, &err);
		cr_assert_str_eq(err.sqlstate, cases[i].sqlstate, "%s", cases[i].message);
		cr_assert_null(strstr(err.message, "127.0.0.1\"), port"), "no server address: %s", err.message);
	}
}

/* ---- keys come and go ---- */

static uint32_t env_db_count(struct env *e)
{
	uint32_t n = 0;
	for (struct base_list *node = e->pool.dbs.next; node != &e->pool.dbs; node = node->next)
		n++;
	cr_assert_eq(n, e->pool.db_count);
	return n;
}

Test(pool, a_key_nobody_holds_with_nothing_open_is_freed_by_the_pass_and_others_stay)
{
	struct env e;
	env_init(&e, 2, 0);
	struct pool_db *idle = env_db(&e, "idle");
	struct pool_db *busy = env_db(&e, "busy");
	struct pool_db *held = env_db(&e, "held");
	cr_assert_eq(env_db(&e, "held"), held, "the same key again");
	struct waiter w;
	waiter_init(&w, &e, busy);
	cr_assert_eq(env_checkout(&e, &w), POOL_CHECKOUT_PARKED);
	struct pool_conn *conn = env_open_succeeds(&e, 0);
	pool_db_put(&e.pool, idle);
	pool_db_put(&e.pool, busy);
	pool_db_put(&e.pool, held); /* one of its two references */
	(void)pool_expire(&e.pool, e.now_ns);
	cr_assert_eq(env_db_count(&e), 2, "only the idle key goes");
	env_checkin(&e, conn);
	(void)pool_expire(&e.pool, e.now_ns);
	cr_assert_eq(env_db_count(&e), 2, "an idle connection keeps its key");
	env_settings(&e, (struct pool_settings){.pool_size = 2, .idle_timeout_ns = 1});
	(void)pool_expire(&e.pool, e.now_ns + 10);
	cr_assert_eq(env_db_count(&e), 1, "the connection closed: its key goes at the same pass");
	cr_assert_eq(TERN_CONTAINER_OF(e.pool.dbs.next, struct pool_db, link), held);
	struct pool_db *again = env_db(&e, "idle");
	cr_assert_str_eq(again->user, "idle", "a freed key is made anew when asked for");
	check_invariants(&e, "keys freed");
	env_deinit(&e);
}

Test(pool, thousands_of_keys_are_found_again_across_table_growth)
{
	struct env e;
	env_init(&e, 2, 0);
	static struct pool_db *dbs[3000];
	char name[32];
	for (uint32_t i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "u%u", i);
		dbs[i] = env_db(&e, name);
	}
	cr_assert_gt(e.pool.bucket_count, 64u, "the table grew");
	for (uint32_t i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "u%u", i);
		cr_assert_eq(env_db(&e, name), dbs[i], "key %u found again", i);
		pool_db_put(&e.pool, dbs[i]);
		pool_db_put(&e.pool, dbs[i]);
	}
	(void)pool_expire(&e.pool, e.now_ns);
	cr_assert_eq(env_db_count(&e), 0);
	cr_assert(base_list_is_empty(&e.pool.database_groups) && base_list_is_empty(&e.pool.user_groups),
		  "groups go with their last key");
	env_deinit(&e);
}
