#include "config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each test writes its file into a fresh directory, so relative auth_file paths have a known base. */
static char test_dir[64];
static char test_path[128];
static char test_err[512];

static void test_config_setup(void)
{
	strcpy(test_dir, "/tmp/tern_config_XXXXXX");
	cr_assert_not_null(mkdtemp(test_dir));
	snprintf(test_path, sizeof(test_path), "%s/tern.ini", test_dir);
	test_err[0] = '\0';
}

static void test_config_teardown(void)
{
	unlink(test_path);
	rmdir(test_dir);
}

TestSuite(config, .init = test_config_setup, .fini = test_config_teardown, .timeout = 10);

static void write_file(const char *text)
{
	FILE *file = fopen(test_path, "w");
	cr_assert_not_null(file);
	cr_assert_eq(fputs(text, file) >= 0, true);
	cr_assert_eq(fclose(file), 0);
}

static int load_text(struct tern_config *cfg, const char *text)
{
	write_file(text);
	return config_load(cfg, test_path, test_err, sizeof(test_err));
}

/* Loads `text`, expecting failure, and checks the message begins with FILE:LINE and mentions `needle`. */
static void expect_error_at(const char *text, int line, const char *needle)
{
	struct tern_config cfg;
	int rc = load_text(&cfg, text);
	cr_assert_eq(rc, -EINVAL, "expected -EINVAL for:\n%s\ngot %d (%s)", text, rc, test_err);
	char prefix[160];
	snprintf(prefix, sizeof(prefix), "%s:%d: ", test_path, line);
	cr_assert_eq(strncmp(test_err, prefix, strlen(prefix)), 0, "message \"%s\" lacks \"%s\"", test_err,
		     prefix);
	cr_assert_not_null(strstr(test_err, needle), "message \"%s\" lacks \"%s\"", test_err, needle);
	cr_assert_null(strchr(test_err, '\n'), "message spans lines: %s", test_err);
	/* A failed load leaves the defaults, deinit-safe. */
	cr_assert_null(cfg.path);
	cr_assert_eq(cfg.pool_size, 20);
	config_deinit(&cfg);
}

static struct tern_config load_ok(const char *text)
{
	struct tern_config cfg;
	int rc = load_text(&cfg, text);
	cr_assert_eq(rc, 0, "load failed: %d %s\n%s", rc, test_err, text);
	cr_assert_str_eq(test_err, "");
	return cfg;
}

static void expect_value(const char *section_and_key, const char *value, const char *expected_described)
{
	char text[256], section[32], key[64], described[256];
	cr_assert_eq(sscanf(section_and_key, "%31[^.].%63s", section, key), 2);
	snprintf(text, sizeof(text), "[%s]\n%s = %s\n", section, key, value);
	struct tern_config cfg = load_ok(text);
	bool found = false;
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *s, *k, *default_text;
		bool reloadable;
		cr_assert_eq(config_describe_key(&cfg, i, &s, &k, described, sizeof(described), &default_text,
						 &reloadable),
			     0);
		if (strcmp(s, section) == 0 && strcmp(k, key) == 0) {
			cr_assert_str_eq(described, expected_described, "%s = %s", section_and_key, value);
			found = true;
		}
	}
	cr_assert(found);
	config_deinit(&cfg);
}

Test(config, defaults_match_the_documented_table)
{
	struct tern_config cfg;
	cr_assert_eq(config_init_defaults(&cfg), 0);
	cr_assert_str_eq(cfg.listen_host, "127.0.0.1");
	cr_assert_eq(cfg.listen_port, 6432);
	cr_assert_eq(cfg.workers, 1);
	cr_assert_eq(cfg.pin_workers, false);
	cr_assert_eq(cfg.pool_mode, CONFIG_POOL_SESSION);
	cr_assert_eq(cfg.ring_entries, 1024);
	cr_assert_eq(cfg.buffer_count, 512);
	cr_assert_eq(cfg.buffer_size, 16384);
	cr_assert_eq(cfg.log_level, BASE_LOG_INFO);
	cr_assert_str_eq(cfg.primary_conninfo, "host=127.0.0.1 port=5432");
	cr_assert_eq(cfg.pool_size, 20);
	cr_assert_eq(cfg.min_pool_size, 0);
	cr_assert_eq(cfg.query_wait_timeout_ms, 120000);
	cr_assert_eq(cfg.server_connect_timeout_ms, 15000);
	cr_assert_eq(cfg.auth_mode, CONFIG_AUTH_TRUST);
	cr_assert_str_eq(cfg.auth_file, "");
	cr_assert_eq(cfg.max_client_conn, 100);
	cr_assert_eq(cfg.max_client_frame_bytes, 1024ull * 1024 * 1024);
	cr_assert_eq(cfg.max_backend_frame_bytes, 100ull * 1024 * 1024);
	cr_assert_null(cfg.path);
	config_deinit(&cfg);
	config_deinit(&cfg); /* twice is harmless */
}

Test(config, example_file_loads_with_its_values)
{
	struct tern_config cfg = load_ok("[tern]\n"
					 "listen = 127.0.0.1:6432\n"
					 "workers = 2\n"
					 "pool_mode = transaction\n"
					 "[servers]\n"
					 "primary = host=127.0.0.1 port=5432\n"
					 "[pool]\n"
					 "pool_size = 20\n"
					 "[auth]\n"
					 "mode = trust            ; trust | md5 | scram\n"
					 "auth_file = users.txt   ; PgBouncer userlist.txt format\n");
	char auth_file[PATH_MAX];
	snprintf(auth_file, sizeof(auth_file), "%s/users.txt", test_dir);
	cr_assert_str_eq(cfg.listen_host, "127.0.0.1");
	cr_assert_eq(cfg.listen_port, 6432);
	cr_assert_eq(cfg.workers, 2);
	cr_assert_eq(cfg.pool_mode, CONFIG_POOL_TRANSACTION);
	cr_assert_str_eq(cfg.primary_conninfo, "host=127.0.0.1 port=5432");
	cr_assert_eq(cfg.pool_size, 20);
	cr_assert_eq(cfg.auth_mode, CONFIG_AUTH_TRUST);
	cr_assert_str_eq(cfg.auth_file, auth_file);
	cr_assert_str_eq(cfg.path, test_path);
	cr_assert_eq(cfg.ring_entries, 1024, "keys not in the file keep their defaults");
	config_deinit(&cfg);
}

Test(config, empty_file_gives_defaults_and_remembers_its_path)
{
	struct tern_config cfg = load_ok("");
	cr_assert_str_eq(cfg.path, test_path);
	cr_assert_eq(cfg.pool_size, 20);
	config_deinit(&cfg);
}

Test(config, sizes_accept_bytes_and_1024_based_units_in_any_case)
{
	struct tern_config cfg =
		load_ok("[tern]\nbuffer_size = 16kB\n[limits]\nmax_client_frame_bytes = 1MB\n"
			"max_backend_frame_bytes = 512 mb\n");
	cr_assert_eq(cfg.buffer_size, 16 * 1024);
	cr_assert_eq(cfg.max_client_frame_bytes, 1024 * 1024);
	cr_assert_eq(cfg.max_backend_frame_bytes, 512 * 1024 * 1024);
	config_deinit(&cfg);
	expect_value("tern.buffer_size", "8192", "8kB");
	expect_value("tern.buffer_size", "4100", "4100");
	expect_value("tern.buffer_size", "64KB", "64kB");
	expect_value("tern.buffer_size", "1mb", "1MB");
	expect_value("limits.max_backend_frame_bytes", "1GB", "1GB");
}

Test(config, sizes_out_of_bounds_or_malformed_are_refused)
{
	expect_error_at("[tern]\nbuffer_size = 2MB\n", 2, "expected a size between 4kB and 1MB");
	expect_error_at("[tern]\nbuffer_size = 4095\n", 2, "got \"4095\"");
	expect_error_at("[tern]\nbuffer_size = 16 KiB\n", 2, "[tern] buffer_size:");
	expect_error_at("[tern]\nbuffer_size = 1.5kB\n", 2, "buffer_size");
	expect_error_at("[tern]\nbuffer_size = -16kB\n", 2, "buffer_size");
	expect_error_at("[limits]\nmax_client_frame_bytes = 99999999999999999999999\n", 2,
			"max_client_frame_bytes");
}

Test(config, durations_accept_seconds_fractions_and_units)
{
	struct tern_config cfg =
		load_ok("[pool]\nquery_wait_timeout = 0.5\nserver_connect_timeout = 250ms\n");
	cr_assert_eq(cfg.query_wait_timeout_ms, 500);
	cr_assert_eq(cfg.server_connect_timeout_ms, 250);
	config_deinit(&cfg);
	cfg = load_ok("[pool]\nquery_wait_timeout = 2min\nserver_connect_timeout = 1.5s\n");
	cr_assert_eq(cfg.query_wait_timeout_ms, 120000);
	cr_assert_eq(cfg.server_connect_timeout_ms, 1500);
	config_deinit(&cfg);
	expect_value("pool.query_wait_timeout", "120", "120s");
	expect_value("pool.query_wait_timeout", "0", "0");
	expect_value("pool.query_wait_timeout", "0.25 min", "15s");
	expect_value("pool.server_connect_timeout", "100ms", "100ms");
	expect_value("pool.server_connect_timeout", "3600S", "3600s");
}

Test(config, durations_out_of_bounds_or_finer_than_a_millisecond_are_refused)
{
	expect_error_at("[pool]\nserver_connect_timeout = 99ms\n", 2,
			"expected a duration between 100ms and 3600s");
	expect_error_at("[pool]\nquery_wait_timeout = 86401\n", 2, "got \"86401\"");
	expect_error_at("[pool]\nquery_wait_timeout = 0.0005\n", 2, "query_wait_timeout");
	expect_error_at("[pool]\nquery_wait_timeout = 1h\n", 2, "query_wait_timeout");
	expect_error_at("[pool]\nquery_wait_timeout = .5\n", 2, "query_wait_timeout");
	expect_error_at("[pool]\nquery_wait_timeout = 5.\n", 2, "query_wait_timeout");
}

Test(config, ratios_are_fractions_to_a_millionth)
{
	struct tern_config cfg = load_ok("[shadow]\nsample_rate = 0.01\n");
	cr_assert_eq(cfg.shadow_sample_ppm, 10000);
	config_deinit(&cfg);
	cfg = load_ok("[shadow]\nsample_rate = 1\n");
	cr_assert_eq(cfg.shadow_sample_ppm, CONFIG_RATIO_ONE);
	config_deinit(&cfg);
	expect_value("shadow.sample_rate", "0.000001", "0.000001");
	expect_value("shadow.sample_rate", "0.25", "0.25");
	expect_value("shadow.sample_rate", "0", "0.0");
	expect_error_at("[shadow]\nsample_rate = 1.5\n", 2, "expected a fraction between 0.0 and 1.0");
	expect_error_at("[shadow]\nsample_rate = 0.0000001\n", 2, "sample_rate");
	expect_error_at("[shadow]\nsample_rate = 5%\n", 2, "sample_rate");
	expect_error_at("[shadow]\nsample_rate = -0.1\n", 2, "sample_rate");
}

Test(config, bools_accept_every_documented_spelling)
{
	static const char *const true_names[] = {"true", "on", "yes", "1", "TRUE", "On"};
	static const char *const false_names[] = {"false", "off", "no", "0", "False", "NO"};
	for (size_t i = 0; i < sizeof(true_names) / sizeof(true_names[0]); i++) {
		char text[64];
		snprintf(text, sizeof(text), "[tern]\npin_workers = %s\n", false_names[i]);
		struct tern_config cfg = load_ok(text);
		cr_assert_eq(cfg.pin_workers, false, "%s", false_names[i]);
		config_deinit(&cfg);
		snprintf(text, sizeof(text), "[tern]\npin_workers = %s\n", true_names[i]);
		cfg = load_ok(text);
		cr_assert_eq(cfg.pin_workers, true, "%s", true_names[i]);
		config_deinit(&cfg);
	}
	expect_error_at("[tern]\npin_workers = maybe\n", 2,
			"expected one of true|false|on|off|yes|no|1|0, got \"maybe\"");
}

Test(config, enums_take_their_names_and_refuse_others_listing_the_choices)
{
	struct tern_config cfg =
		load_ok("[tern]\npool_mode = transaction\nlog_level = debug\n[auth]\nmode = scram\n");
	cr_assert_eq(cfg.pool_mode, CONFIG_POOL_TRANSACTION);
	cr_assert_eq(cfg.log_level, BASE_LOG_DEBUG);
	cr_assert_eq(cfg.auth_mode, CONFIG_AUTH_SCRAM);
	config_deinit(&cfg);
	expect_value("tern.log_level", "Warning", "warning");
	expect_value("auth.mode", "md5", "md5");
	expect_value("auth.mode", "scram-sha-256", "scram"); /* PgBouncer's spelling */
	expect_value("auth.mode", "SCRAM-SHA-256", "scram");
	expect_error_at("[auth]\nmode = scram-sha-1\n", 2, "expected one of trust|md5|scram");
	expect_error_at("[tern]\npool_mode = statement\n", 2,
			"[tern] pool_mode: expected one of session|transaction, got \"statement\"");
}

Test(config, ints_refuse_text_signs_and_values_out_of_bounds)
{
	expect_error_at("[pool]\npool_size = abc\n", 2,
			"expected an integer between 1 and 10000, got \"abc\"");
	expect_error_at("[pool]\npool_size = 0\n", 2, "expected an integer between 1 and 10000, got \"0\"");
	expect_error_at("[pool]\npool_size = 10001\n", 2, "got \"10001\"");
	expect_error_at("[pool]\npool_size = -1\n", 2, "got \"-1\"");
	expect_error_at("[pool]\npool_size = +5\n", 2, "got \"+5\"");
	expect_error_at("[pool]\npool_size = 0x10\n", 2, "got \"0x10\"");
	expect_error_at("[pool]\npool_size =\n", 2, "got \"\"");
	expect_error_at("[tern]\nworkers = 4294967297\n", 2, "workers");
	expect_error_at("[tern]\nring_entries = 63\n", 2, "between 64 and 32768");
	expect_value("tern.workers", "1024", "1024");
	expect_value("limits.max_client_conn", "1000000", "1000000");
}

Test(config, unknown_key_names_file_line_and_key)
{
	expect_error_at("; a comment\n"
			"# another comment\n"
			"[pool]\n"
			"\n"
			"pool_size = 10\n"
			"pool_sizee = 10\n",
			6, "[pool] pool_sizee: unknown key");
}

Test(config, key_in_the_wrong_section_says_where_it_belongs)
{
	expect_error_at("[tern]\npool_size = 10\n", 2, "it belongs in [pool]");
}

Test(config, unknown_section_is_refused_at_its_header_even_when_empty)
{
	expect_error_at("[tern]\nworkers = 1\n[bogus]\n[pool]\n", 3, "[bogus]: unknown section");
	expect_error_at("[tern]\n[Pool]\npool_size = 1\n", 2, "[Pool]: unknown section");
	expect_error_at("[tern\nworkers = 1\n", 1, "expected \"]\"");
}

Test(config, sections_without_keys_yet_are_accepted)
{
	struct tern_config cfg =
		load_ok("[routing]\n[journal]\n[admin]\n[limits]\n[servers]\n[auth]\n[pool]\n[tern]\n");
	config_deinit(&cfg);
}

Test(config, key_before_any_section_is_refused)
{
	expect_error_at("\nworkers = 2\n[tern]\n", 2, "workers: key before any [section] header");
}

Test(config, duplicate_key_is_refused_naming_the_first_line)
{
	expect_error_at("[pool]\npool_size = 10\n[tern]\n[pool]\npool_size = 11\n", 5,
			"[pool] pool_size: set twice (first on line 2)");
}

Test(config, min_pool_size_above_pool_size_is_refused_at_the_later_key)
{
	expect_error_at("[pool]\npool_size = 5\nmin_pool_size = 6\n", 3,
			"min_pool_size (6) is larger than pool_size (5)");
	expect_error_at("[pool]\nmin_pool_size = 6\npool_size = 5\n", 3, "[pool] pool_size:");
	expect_error_at("[pool]\nmin_pool_size = 21\n", 2, "[pool] min_pool_size:");
	struct tern_config cfg = load_ok("[pool]\npool_size = 5\nmin_pool_size = 5\n");
	config_deinit(&cfg);
}

Test(config, buffer_count_must_be_a_power_of_two)
{
	expect_error_at("[tern]\nworkers = 1\nbuffer_count = 1000\n", 3,
			"[tern] buffer_count: must be a power of two");
	expect_value("tern.buffer_count", "16", "16");
	expect_value("tern.buffer_count", "16384", "16384");
	/* Ring-wide buffer ids of both groups stay below SENDQ_NO_BUFFER (65535). */
	expect_error_at("[tern]\nbuffer_count = 32768\n", 2, "between 16 and 16384");
}

Test(config, unix_socket_mode_is_octal_permission_bits)
{
	struct tern_config cfg = load_ok("[tern]\nunix_socket_mode = 0770\n");
	cr_assert_eq(config_unix_socket_mode(&cfg), 0770);
	config_deinit(&cfg);
	cfg = load_ok("[tern]\n");
	cr_assert_eq(config_unix_socket_mode(&cfg), 0777, "PgBouncer's default");
	config_deinit(&cfg);
	expect_error_at("[tern]\nworkers = 1\nunix_socket_mode = 0778\n", 3, "expected octal permission bits");
	expect_error_at("[tern]\nunix_socket_mode = 1777\n", 2, "expected octal permission bits");
	expect_error_at("[tern]\nunix_socket_mode = rwx\n", 2, "expected octal permission bits");
}

Test(config, listen_accepts_ipv4_any_ipv4_ipv6_and_names)
{
	struct tern_config cfg = load_ok("[tern]\nlisten = 127.0.0.1:6432\n");
	cr_assert_str_eq(cfg.listen_host, "127.0.0.1");
	cr_assert_eq(cfg.listen_port, 6432);
	config_deinit(&cfg);
	cfg = load_ok("[tern]\nlisten = *:7000\n");
	cr_assert_str_eq(cfg.listen_host, "0.0.0.0");
	cr_assert_eq(cfg.listen_port, 7000);
	config_deinit(&cfg);
	cfg = load_ok("[tern]\nlisten = [::1]:6433\n");
	cr_assert_str_eq(cfg.listen_host, "::1");
	cr_assert_eq(cfg.listen_port, 6433);
	config_deinit(&cfg);
	expect_value("tern.listen", "[::1]:6433", "[::1]:6433");
	expect_value("tern.listen", "localhost:65535", "localhost:65535");
	expect_value("tern.listen", "*:1", "0.0.0.0:1");
}

Test(config, listen_takes_several_addresses_up_to_eight)
{
	struct tern_config cfg = load_ok("[tern]\nlisten = 127.0.0.1:6432, [::1]:6433 ,*:7000\n");
	cr_assert_eq(cfg.listen_count, 3);
	cr_assert_str_eq(cfg.listens[0].host, "127.0.0.1");
	cr_assert_eq(cfg.listens[1].port, 6433);
	cr_assert_str_eq(cfg.listens[1].host, "::1");
	cr_assert_str_eq(cfg.listens[2].host, "0.0.0.0");
	cr_assert_str_eq(cfg.listen_host, "127.0.0.1", "the first is also listen_host");
	config_deinit(&cfg);
	expect_value("tern.listen", "127.0.0.1:1,127.0.0.1:2", "127.0.0.1:1, 127.0.0.1:2");
	/* [routing] patroni_api: host:port pairs, as listen takes them. */
	expect_error_at("[routing]\npatroni_api = 127.0.0.1\n", 2, "patroni_api");
	expect_error_at("[routing]\npatroni_api = 127.0.0.1:8008,\n", 2, "patroni_api");
	struct tern_config apis = load_ok("[routing]\npatroni_api = 127.0.0.1:8008, db2.example:8009\n");
	struct config_listen parsed[CONFIG_PATRONI_MAX];
	cr_assert_eq(config_parse_addresses(apis.patroni_api, parsed, CONFIG_PATRONI_MAX), 2);
	cr_assert(strcmp(parsed[1].host, "db2.example") == 0 && parsed[1].port == 8009);
	config_deinit(&apis);
	/* The admin endpoint on tern's own address (a port picked twice) would take it from tern. */
	expect_error_at("[tern]\nlisten = 127.0.0.1:6432\n[admin]\nhttp_listen = 127.0.0.1:6432\n", 4, "same address");
	expect_error_at("[tern]\nlisten = *:6432\n[admin]\nhttp_listen = 127.0.0.1:6432\n", 4, "same address");
	expect_error_at("[tern]\nlisten = 127.0.0.1:6432\n[admin]\nhttp_listen = 6432\n", 4, "same address");
	struct tern_config other = load_ok("[tern]\nlisten = 127.0.0.1:6432\n[admin]\nhttp_listen = 127.0.0.2:6432\n");
	config_deinit(&other);
	expect_error_at("[tern]\nlisten = 127.0.0.1:1,\n", 2, "listen");
	expect_error_at("[tern]\nlisten = 127.0.0.1:1, nonsense\n", 2, "listen");
	expect_error_at("[tern]\nlisten = a:1,a:2,a:3,a:4,a:5,a:6,a:7,a:8,a:9\n", 2, "listen");
}

Test(config, listen_refuses_missing_or_bad_ports_and_hosts)
{
	static const char *const bad[] = {"127.0.0.1",	     "127.0.0.1:",     "127.0.0.1:0",
					  "127.0.0.1:70000", ":6432",	       "::1:6432",
					  "[::1]6432",	     "[nothost]:6432", "127.0.0.1.1:6432",
					  "127.0.0.1:64x",   "bad host:6432",  "[]:6432"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[128], needle[64];
		snprintf(text, sizeof(text), "[tern]\nlisten = %s\n", bad[i]);
		snprintf(needle, sizeof(needle), "got \"%s\"", bad[i]);
		expect_error_at(text, 2, needle);
	}
	expect_error_at("[tern]\nlisten = 1.2.3.4:0\n", 2, "with a port from 1 to 65535");
}

Test(config, auth_file_is_resolved_against_the_config_directory)
{
	char expected[PATH_MAX];
	struct tern_config cfg = load_ok("[auth]\nauth_file = sub/users.txt\n");
	snprintf(expected, sizeof(expected), "%s/sub/users.txt", test_dir);
	cr_assert_str_eq(cfg.auth_file, expected);
	config_deinit(&cfg);
	cfg = load_ok("[auth]\nauth_file = /etc/tern/users.txt\n");
	cr_assert_str_eq(cfg.auth_file, "/etc/tern/users.txt");
	config_deinit(&cfg);
	cfg = load_ok("[auth]\nauth_file = \"\"\n");
	cr_assert_str_eq(cfg.auth_file, "");
	config_deinit(&cfg);
}

Test(config, auth_file_next_to_a_config_named_without_a_directory_stays_relative)
{
	write_file("[auth]\nauth_file = users.txt\n");
	char cwd[PATH_MAX];
	cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
	cr_assert_eq(chdir(test_dir), 0);
	struct tern_config cfg;
	int rc = config_load(&cfg, "tern.ini", test_err, sizeof(test_err));
	cr_assert_eq(chdir(cwd), 0);
	cr_assert_eq(rc, 0, "%s", test_err);
	cr_assert_str_eq(cfg.auth_file, "users.txt");
	config_deinit(&cfg);
}

Test(config, comments_and_inline_comments_are_ignored)
{
	struct tern_config cfg = load_ok("; leading comment\n"
					 "# hash comment\n"
					 "[tern] ; section comment\n"
					 "  ; indented comment\n"
					 "workers = 3   ; three workers\n"
					 "log_level = debug\t; tab before the comment\n"
					 "[servers]\n"
					 "primary = host=db port=5433 ; the primary\n");
	cr_assert_eq(cfg.workers, 3);
	cr_assert_eq(cfg.log_level, BASE_LOG_DEBUG);
	cr_assert_str_eq(cfg.primary_conninfo, "host=db port=5433");
	config_deinit(&cfg);
	/* inih only takes ';' after whitespace as a comment, and never '#' after a value. */
	expect_error_at("[tern]\nworkers = 3; no space\n", 2, "got \"3; no space\"");
	expect_error_at("[tern]\nworkers = 3 # hash\n", 2, "got \"3 # hash\"");
}

Test(config, indented_key_is_a_key_not_a_continuation)
{
	struct tern_config cfg = load_ok("[tern]\nworkers = 3\n    ring_entries = 64\n");
	cr_assert_eq(cfg.workers, 3);
	cr_assert_eq(cfg.ring_entries, 64);
	config_deinit(&cfg);
}

Test(config, crlf_line_endings_and_byte_order_mark_are_accepted)
{
	struct tern_config cfg = load_ok("\xEF\xBB\xBF[tern]\r\nworkers = 5\r\n");
	cr_assert_eq(cfg.workers, 5);
	config_deinit(&cfg);
}

Test(config, long_lines_load_and_too_long_lines_are_refused_with_their_line)
{
	static char text[8192];
	char conninfo[2001];
	memset(conninfo, 'x', sizeof(conninfo) - 1);
	memcpy(conninfo, "host=", 5);
	conninfo[sizeof(conninfo) - 1] = '\0';
	snprintf(text, sizeof(text), "[servers]\nprimary = %s\n[pool]\npool_size = 7\n", conninfo);
	struct tern_config cfg = load_ok(text);
	cr_assert_str_eq(cfg.primary_conninfo, conninfo);
	cr_assert_eq(cfg.pool_size, 7);
	config_deinit(&cfg);

	memset(text, 0, sizeof(text));
	strcpy(text, "[servers]\n\nprimary = ");
	memset(text + strlen(text), 'y', 5000);
	strcat(text, "\n");
	expect_error_at(text, 3, "line is longer than");
}

Test(config, syntax_error_names_the_line_and_quotes_it)
{
	expect_error_at("[tern]\nworkers = 1\njust words\n", 3, "got \"just words\"");
	expect_error_at("[tern]\n= 4\n", 2, "key name is missing");
}

Test(config, missing_file_reports_errno_and_the_path)
{
	struct tern_config cfg;
	int rc = config_load(&cfg, "/nonexistent/tern.ini", test_err, sizeof(test_err));
	cr_assert_eq(rc, -ENOENT);
	cr_assert_str_eq(test_err, "/nonexistent/tern.ini: cannot open: No such file or directory");
	cr_assert_null(cfg.path);
	config_deinit(&cfg);
}

Test(config, a_directory_is_a_read_error_not_a_crash)
{
	struct tern_config cfg;
	int rc = config_load(&cfg, test_dir, test_err, sizeof(test_err));
	cr_assert_eq(rc, -EISDIR, "%d %s", rc, test_err);
	cr_assert_not_null(strstr(test_err, "cannot read"));
	config_deinit(&cfg);
}

Test(config, small_error_buffer_is_cut_not_overrun)
{
	struct tern_config cfg;
	char small[8];
	write_file("[nope]\n");
	cr_assert_eq(config_load(&cfg, test_path, small, sizeof(small)), -EINVAL);
	cr_assert_eq(strlen(small), sizeof(small) - 1);
	config_deinit(&cfg);
}

Test(config, every_described_value_loads_back_to_the_same_value)
{
	struct tern_config cfg =
		load_ok("[tern]\nlisten = [fe80::1]:5000\nworkers = 7\npin_workers = off\n"
			"pool_mode = transaction\nring_entries = 4096\nbuffer_count = 64\n"
			"buffer_size = 12288\nlog_level = error\n[servers]\nprimary = host=a\n"
			"[pool]\npool_size = 9\nmin_pool_size = 3\nquery_wait_timeout = 1.25\n"
			"server_connect_timeout = 3min\n[auth]\nmode = md5\nauth_file = /u.txt\n"
			"[limits]\nmax_client_conn = 5\nmax_client_frame_bytes = 3000\n"
			"max_backend_frame_bytes = 5MB\n");
	static char text[8192];
	size_t used = 0;
	const char *previous_section = "";
	char first[96][256];
	cr_assert_leq(config_key_count(), 96);
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *section, *key, *default_text;
		bool reloadable;
		cr_assert_eq(config_describe_key(&cfg, i, &section, &key, first[i], sizeof(first[i]),
						 &default_text, &reloadable),
			     0);
		if (strcmp(section, previous_section) != 0)
			used += (size_t)snprintf(text + used, sizeof(text) - used, "[%s]\n", section);
		used += (size_t)snprintf(text + used, sizeof(text) - used, "%s = %s\n", key, first[i]);
		previous_section = section;
	}
	config_deinit(&cfg);
	cfg = load_ok(text);
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *section, *key, *default_text;
		bool reloadable;
		char again[256];
		cr_assert_eq(config_describe_key(&cfg, i, &section, &key, again, sizeof(again), &default_text,
						 &reloadable),
			     0);
		cr_assert_str_eq(again, first[i], "[%s] %s", section, key);
	}
	cr_assert_eq(cfg.query_wait_timeout_ms, 1250);
	cr_assert_eq(cfg.max_client_frame_bytes, 3000);
	config_deinit(&cfg);
}

Test(config, describe_reports_defaults_reloadability_and_bounds)
{
	struct tern_config cfg;
	cr_assert_eq(config_init_defaults(&cfg), 0);
	const char *section, *key, *default_text;
	bool reloadable;
	char value[512]; /* as main's reload log: auth_query's default is 130 characters */
	bool saw_log_level = false;
	for (size_t i = 0; i < config_key_count(); i++) {
		cr_assert_eq(config_describe_key(&cfg, i, &section, &key, value, sizeof(value), &default_text,
						 &reloadable),
			     0);
		if (strcmp(key, "log_level") == 0) {
			saw_log_level = true;
			cr_assert_str_eq(value, "info");
			cr_assert_str_eq(default_text, "info");
			cr_assert(reloadable);
		}
		if (strcmp(key, "listen") == 0)
			cr_assert_not(reloadable);
	}
	cr_assert(saw_log_level);
	cr_assert_eq(config_describe_key(&cfg, config_key_count(), &section, &key, value, sizeof(value),
					 &default_text, &reloadable),
		     -ERANGE);
	char tiny[4];
	cr_assert_eq(
		config_describe_key(&cfg, 0, &section, &key, tiny, sizeof(tiny), &default_text, &reloadable),
		-ENOSPC);
	cr_assert_eq(strlen(tiny), 3);
	config_deinit(&cfg);
}

static char *capture(void (*print)(FILE *))
{
	char *text = NULL;
	size_t size = 0;
	FILE *out = open_memstream(&text, &size);
	cr_assert_not_null(out);
	print(out);
	cr_assert_eq(fclose(out), 0);
	return text;
}

Test(config, markdown_has_one_row_per_key)
{
	char *text = capture(config_print_markdown);
	size_t rows = 0;
	for (char *line = text; line != NULL && *line != '\0';) {
		char *end = strchr(line, '\n');
		cr_assert_not_null(end, "every line ends with a newline");
		cr_assert_eq(line[0], '|');
		rows++;
		line = end + 1;
	}
	cr_assert_eq(rows, config_key_count() + 2, "header + separator + one row per key:\n%s", text);
	cr_assert(strncmp(text, "| Section | Key | Default | Allowed | Reload | Meaning |\n", 55) == 0);
	for (size_t i = 0; i < config_key_count(); i++) {
		const char *section, *key, *default_text;
		bool reloadable;
		char value[256], cell[128];
		struct tern_config cfg;
		cr_assert_eq(config_init_defaults(&cfg), 0);
		cr_assert_eq(config_describe_key(&cfg, i, &section, &key, value, sizeof(value), &default_text,
						 &reloadable),
			     0);
		config_deinit(&cfg);
		snprintf(cell, sizeof(cell), "| `[%s]` | `%s` |", section, key);
		cr_assert_not_null(strstr(text, cell), "no row for %s", cell);
	}
	cr_assert_not_null(strstr(text, "session, transaction"));
	cr_assert_not_null(strstr(text, "`\"\"`"), "an empty default is shown as \"\"");
	free(text);
}

Test(config, help_has_one_block_per_key_with_default_and_reload)
{
	char *text = capture(config_print_help);
	cr_assert_not_null(strstr(text, "[tern] listen = 127.0.0.1:6432  (listen, "));
	cr_assert_not_null(strstr(text, "[pool] pool_size = 20  (int, 1..10000, reloadable)\n"));
	cr_assert_not_null(strstr(text, "[tern] buffer_size = 16kB  (size, 4kB..1MB, restart to change)\n"));
	cr_assert_not_null(
		strstr(text, "[pool] query_wait_timeout = 120s  (duration, 0..86400s, reloadable)\n"));
	cr_assert_not_null(
		strstr(text, "[tern] pool_mode = session  (enum, session|transaction, restart to change)"));
	size_t blocks = 0;
	for (const char *p = text; (p = strstr(p, "\n[")) != NULL; p++)
		blocks++;
	cr_assert_eq(blocks + 1, config_key_count());
	for (const char *line = text; *line != '\0'; line = strchr(line, '\n') + 1)
		cr_assert_leq(strcspn(line, "\n"), 110, "help lines fit a terminal");
	free(text);
}

/* Found by fuzz_config: " ;" starts an inline comment, so this used to load an empty conninfo. */
Test(config, an_empty_primary_is_refused_with_its_line)
{
	expect_error_at("[tern]\nworkers = 1\n[servers]\nprimary = ;host=a\n", 4, "[servers] primary: must not be empty");
}

Test(config, a_database_entry_names_a_server_of_servers_or_is_refused)
{
	struct tern_config cfg = load_ok("[servers]\nprimary = host=a\nstandby = host=b\n[databases]\n"
					 "reports = server=standby\nmain = server=primary\n");
	cr_assert_eq(cfg.extra_server_count, 1);
	cr_assert_str_eq(cfg.extra_servers[0].name, "standby");
	cr_assert_str_eq(cfg.extra_servers[0].conninfo, "host=b");
	config_deinit(&cfg);
	cr_assert_eq(load_text(&cfg, "[databases]\nreports = server=nope\n"), -EINVAL);
	cr_assert_not_null(strstr(test_err, "reports: server = nope is not a key of [servers]"), "%s", test_err);
	expect_error_at("[servers]\nstandby =\n", 2, "must not be empty");
	expect_error_at("[servers]\nb = host=b\nb = host=c\n", 3, "once");
}

Test(config, a_server_weight_is_taken_out_of_its_conninfo)
{
	struct tern_config cfg = load_ok("[servers]\nprimary = host=a weight=0\nreplica = host=b weight = 3 port=5433\n"
					 "replica2 = host=c application_name='x weight=9'\nreplica3 = weight=2 host=d\n");
	cr_assert_eq(cfg.primary_weight, 0);
	cr_assert_str_eq(cfg.primary_conninfo, "host=a ");
	cr_assert_eq(cfg.extra_servers[0].weight, 3);
	cr_assert_str_eq(cfg.extra_servers[0].conninfo, "host=b  port=5433");
	cr_assert_eq(cfg.extra_servers[1].weight, 1, "a quoted value is not a key");
	cr_assert_str_eq(cfg.extra_servers[1].conninfo, "host=c application_name='x weight=9'");
	cr_assert_eq(cfg.extra_servers[2].weight, 2);
	cr_assert_str_eq(cfg.extra_servers[2].conninfo, " host=d");
	config_deinit(&cfg);
	expect_error_at("[servers]\nprimary = host=a\nreplica = host=b weight=many\n", 3, "[servers] replica: weight");
	expect_error_at("[servers]\nprimary = host=a\nreplica = host=b weight=1001\n", 3, "weight must be a whole number");
	expect_error_at("[servers]\nprimary = host=a weight=-1\n", 2, "[servers] primary: weight");
}

Test(config, a_server_profile_is_taken_out_of_its_conninfo)
{
	struct tern_config cfg = load_ok("[servers]\nprimary = host=a profile=polar\nreplica = host=b profile = vanilla "
					 "weight=2\nreplica2 = host=c\n");
	cr_assert(cfg.primary_is_polar);
	cr_assert_str_eq(cfg.primary_conninfo, "host=a ");
	cr_assert_not(cfg.extra_servers[0].is_polar);
	cr_assert_eq(cfg.extra_servers[0].weight, 2);
	cr_assert_str_eq(cfg.extra_servers[0].conninfo, "host=b  ");
	cr_assert_not(cfg.extra_servers[1].is_polar, "vanilla when absent");
	config_deinit(&cfg);
	expect_error_at("[servers]\nprimary = host=a\nreplica = host=b profile=aurora\n", 3,
			"[servers] replica: profile must be vanilla or polar");
	expect_error_at("[servers]\nprimary = host=a profile=\n", 2, "[servers] primary: profile must be");
}

/* [tls] server_tls_* become libpq's keys in a server's conninfo, unless it says anything of TLS itself. */
Test(config, server_tls_keys_join_a_servers_conninfo_unless_it_names_its_own)
{
	struct tern_config cfg = load_ok("[servers]\nprimary = host=a\nreplica = host=b sslmode=disable\n");
	char *c = config_server_conninfo(&cfg, cfg.primary_conninfo);
	cr_assert_str_eq(c, "host='a' sslmode='prefer' ssl_min_protocol_version='TLSv1.2' "
			    "ssl_max_protocol_version='TLSv1.3'");
	free(c);
	c = config_server_conninfo(&cfg, cfg.extra_servers[0].conninfo);
	cr_assert_str_eq(c, "host=b sslmode=disable", "its own TLS stays whole");
	free(c);
	/* A URI is rebuilt as key='value' pairs, so the keys join it too; a service file keeps its own. */
	c = config_server_conninfo(&cfg, "postgresql://db.example:5433/app");
	cr_assert_str_eq(c, "dbname='app' host='db.example' port='5433' sslmode='prefer' "
			    "ssl_min_protocol_version='TLSv1.2' ssl_max_protocol_version='TLSv1.3'");
	free(c);
	c = config_server_conninfo(&cfg, "service=prod");
	cr_assert_str_eq(c, "service=prod");
	free(c);
	config_deinit(&cfg);

	cfg = load_ok("[servers]\nprimary = host=a\n[tls]\nserver_tls_sslmode = verify-full\n"
		      "server_tls_ca_file = /etc/x/ca'1.pem\nserver_tls_cert_file = /c.pem\nserver_tls_key_file = /k.pem\n"
		      "server_tls_protocols = tlsv1.3\n");
	c = config_server_conninfo(&cfg, "host=a application_name='it\\'s'");
	cr_assert_str_eq(c, "host='a' application_name='it\\'s' sslmode='verify-full' sslrootcert='/etc/x/ca\\'1.pem' "
			    "sslcert='/c.pem' sslkey='/k.pem' ssl_min_protocol_version='TLSv1.3' "
			    "ssl_max_protocol_version='TLSv1.3'");
	free(c);
	c = config_server_conninfo(&cfg, "host=a sslcert=/mine.pem sslkey=/mine.key");
	cr_assert_str_eq(c, "host=a sslcert=/mine.pem sslkey=/mine.key", "its own certificate goes with its own key");
	free(c);
	config_deinit(&cfg);

	cfg = load_ok("[servers]\nprimary = host=a\n[tls]\nserver_tls_sslmode = disable\nserver_tls_ca_file = /ca.pem\n");
	c = config_server_conninfo(&cfg, cfg.primary_conninfo);
	cr_assert_str_eq(c, "host='a' sslmode='disable'", "disable adds nothing else");
	free(c);
	config_deinit(&cfg);

	cfg = load_ok("[servers]\nprimary = host=a\n[tls]\nserver_tls_protocols = legacy\n");
	c = config_server_conninfo(&cfg, cfg.primary_conninfo);
	cr_assert_not_null(strstr(c, "ssl_min_protocol_version='TLSv1' ssl_max_protocol_version='TLSv1.3'"), "%s", c);
	free(c);
	config_deinit(&cfg);
}

Test(config, server_tls_settings_that_cannot_work_are_refused_with_their_line)
{
	expect_error_at("[tls]\nserver_tls_sslmode = verify-ca\n", 2, "needs server_tls_ca_file");
	expect_error_at("[tls]\nserver_tls_protocols = tlsv1.0, tlsv1.3\n", 2, "must be a range");
	expect_error_at("[tls]\nserver_tls_protocols = sslv3\n", 2, "expected tlsv1.0");
	expect_error_at("[tls]\nserver_tls_cert_file = /c.pem\n", 2, "go together");
	expect_error_at("[tls]\nserver_tls_sslmode = sometimes\n", 2, "server_tls_sslmode");
}
