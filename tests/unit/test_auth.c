/*
 * test_auth.c — userlist loading (forms, comments, escapes, errors with their line numbers), lookup,
 * and md5 against values computed here from PostgreSQL's formula rather than by auth.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "auth.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#define RFC_SECRET_TEXT                                                                             \
	"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:" \
	"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="

/* Writes `content` to a fresh temporary file; the caller unlinks and frees the path. */
static char *temp_userlist(const char *content, size_t len)
{
	const char *dir = getenv("TMPDIR");
	char *path = NULL;
	cr_assert_gt(asprintf(&path, "%s/tern-userlist-XXXXXX", dir != NULL && dir[0] != '\0' ? dir : "/tmp"),
		     0);
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, content, len), (ssize_t)len);
	close(fd);
	return path;
}

struct loaded {
	struct auth_file *file;
	int rc;
	char err[256];
	char *path;
};

static struct loaded load(const char *content)
{
	struct loaded l = {0};
	l.path = temp_userlist(content, strlen(content));
	l.rc = auth_file_load(l.path, &l.file, l.err, sizeof(l.err));
	return l;
}

static void unload(struct loaded *l)
{
	auth_file_destroy(l->file);
	unlink(l->path);
	free(l->path);
}

/* Loading must fail with "PATH:LINE: reason". */
static void expect_line_error(const char *content, unsigned line, const char *reason)
{
	struct loaded l = load(content);
	cr_assert_eq(l.rc, -EINVAL, "loaded what should fail at line %u (%s)", line, reason);
	cr_assert_null(l.file);
	char expected[512];
	snprintf(expected, sizeof(expected), "%s:%u: %s", l.path, line, reason);
	cr_assert_str_eq(l.err, expected);
	unload(&l);
}

/* hex(md5(a || b)), written here independently of auth.c */
static void md5_hex(const void *a, size_t a_len, const void *b, size_t b_len, char out[33])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint8_t digest[16];
	unsigned int n = 0;
	cr_assert(EVP_DigestInit_ex(ctx, EVP_md5(), NULL) == 1 && EVP_DigestUpdate(ctx, a, a_len) == 1 &&
		  EVP_DigestUpdate(ctx, b, b_len) == 1 && EVP_DigestFinal_ex(ctx, digest, &n) == 1);
	EVP_MD_CTX_free(ctx);
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", digest[i]);
}

/* What a client sends: "md5" + md5(md5(password || user) in hex || salt) in hex. */
static void md5_client_response(const char *user, const char *password, const uint8_t salt[4], char out[36])
{
	char inner[33];
	md5_hex(password, strlen(password), user, strlen(user), inner);
	memcpy(out, "md5", 3);
	md5_hex(inner, 32, salt, 4, out + 3);
}

static const uint8_t fixed_salt[4] = {0x01, 0x02, 0x03, 0x04};

/* ---- loading ---- */

Test(auth, loads_plain_md5_and_scram_entries_with_comments_and_escapes)
{
	char bob_md5[33];
	md5_hex("hunter2", 7, "bob", 3, bob_md5);
	char content[1024];
	snprintf(content, sizeof(content),
		 "; PgBouncer-style comment\n"
		 "# another comment\n"
		 "\n"
		 "   \t\n"
		 "  \"alice\" \"secret\" \"a third field is ignored\"\n"
		 "\"bob\"\t\"md5%s\"\n"
		 "\"carol\" \"%s\"\n"
		 "\"quo\"\"te\" \"pa\"\"ss\"\"\"\n"
		 "\"windows\" \"crlf\"\r\n"
		 "  ; indented comment\n"
		 "\"dave\" \"no newline at the end\"",
		 bob_md5, RFC_SECRET_TEXT);
	struct loaded l = load(content);
	cr_assert_eq(l.rc, 0, "%s", l.err);
	cr_assert_str_eq(l.err, "");
	cr_assert_eq(auth_file_count(l.file), 6);

	const struct auth_user *alice = auth_file_find(l.file, "alice");
	cr_assert_not_null(alice);
	cr_assert_str_eq(alice->name, "alice");
	cr_assert_eq(alice->kind, AUTH_SECRET_PLAIN);
	cr_assert_str_eq(alice->secret, "secret");

	const struct auth_user *bob = auth_file_find(l.file, "bob");
	cr_assert_not_null(bob);
	cr_assert_eq(bob->kind, AUTH_SECRET_MD5);
	cr_assert_eq(strncmp(bob->secret, "md5", 3), 0);
	cr_assert_str_eq(bob->secret + 3, bob_md5);
	cr_assert_eq(bob->scram.iterations, 0, "an md5 entry cannot have a SCRAM secret");

	const struct auth_user *carol = auth_file_find(l.file, "carol");
	cr_assert_not_null(carol);
	cr_assert_eq(carol->kind, AUTH_SECRET_SCRAM);
	cr_assert_str_eq(carol->secret, RFC_SECRET_TEXT);
	struct scram_secret parsed;
	cr_assert_eq(scram_secret_parse(RFC_SECRET_TEXT, &parsed), 0);
	cr_assert_eq(carol->scram.iterations, 4096);
	cr_assert_arr_eq(carol->scram.stored_key, parsed.stored_key, SCRAM_KEY_LEN);
	cr_assert_arr_eq(carol->scram.server_key, parsed.server_key, SCRAM_KEY_LEN);

	const struct auth_user *quoted = auth_file_find(l.file, "quo\"te");
	cr_assert_not_null(quoted);
	cr_assert_str_eq(quoted->secret, "pa\"ss\"");

	const struct auth_user *windows = auth_file_find(l.file, "windows");
	cr_assert_not_null(windows);
	cr_assert_str_eq(windows->secret, "crlf");

	const struct auth_user *dave = auth_file_find(l.file, "dave");
	cr_assert_not_null(dave);
	cr_assert_str_eq(dave->secret, "no newline at the end");

	cr_assert_null(auth_file_find(l.file, "mallory"));
	cr_assert_null(auth_file_find(l.file, ""));
	cr_assert_null(auth_file_find(l.file, "Alice"));
	cr_assert_null(auth_file_find(l.file, "alice "));
	unload(&l);
}

Test(auth, plaintext_entries_get_a_scram_secret_derived_at_load)
{
	struct loaded l = load("\"alice\" \"pencil\"\n\"bob\" \"pencil\"\n");
	cr_assert_eq(l.rc, 0, "%s", l.err);
	const struct auth_user *alice = auth_file_find(l.file, "alice");
	const struct auth_user *bob = auth_file_find(l.file, "bob");
	cr_assert_eq(alice->scram.iterations, SCRAM_ITERATIONS_DEFAULT);
	cr_assert_eq(alice->scram.salt_len, SCRAM_SALT_LEN_DEFAULT);
	struct scram_secret again;
	cr_assert_eq(scram_secret_from_password("pencil", alice->scram.salt, alice->scram.salt_len,
						alice->scram.iterations, &again),
		     0);
	cr_assert_arr_eq(again.stored_key, alice->scram.stored_key, SCRAM_KEY_LEN);
	cr_assert_arr_eq(again.server_key, alice->scram.server_key, SCRAM_KEY_LEN);
	/* Random salts: the same password gives different secrets. */
	cr_assert_arr_neq(alice->scram.salt, bob->scram.salt, SCRAM_SALT_LEN_DEFAULT);
	unload(&l);
}

Test(auth, names_of_63_bytes_load_and_passwords_of_1024_bytes_load)
{
	char name[AUTH_NAME_MAX + 1];
	memset(name, 'n', AUTH_NAME_MAX);
	name[AUTH_NAME_MAX] = '\0';
	char password[AUTH_PASSWORD_MAX + 1];
	memset(password, 'p', AUTH_PASSWORD_MAX);
	password[AUTH_PASSWORD_MAX] = '\0';
	char content[2048];
	snprintf(content, sizeof(content), "\"%s\" \"%s\"\n", name, password);
	struct loaded l = load(content);
	cr_assert_eq(l.rc, 0, "%s", l.err);
	const struct auth_user *user = auth_file_find(l.file, name);
	cr_assert_not_null(user);
	cr_assert_eq(strlen(user->secret), AUTH_PASSWORD_MAX);
	unload(&l);
}

Test(auth, a_doubled_quote_counts_as_one_byte_toward_the_limit)
{
	/* 62 'n' plus one escaped quote is 63 bytes, though 64 characters sit between the quotes. */
	char content[256];
	snprintf(content, sizeof(content), "\"%.62s\"\"\" \"pw\"\n",
		 "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn");
	struct loaded l = load(content);
	cr_assert_eq(l.rc, 0, "%s", l.err);
	cr_assert_eq(auth_file_count(l.file), 1);
	unload(&l);
}

Test(auth, empty_and_comment_only_files_load_with_no_users)
{
	struct loaded l = load("");
	cr_assert_eq(l.rc, 0, "%s", l.err);
	cr_assert_eq(auth_file_count(l.file), 0);
	cr_assert_null(auth_file_find(l.file, "alice"));
	unload(&l);
	l = load("; nothing\n# here\n\n");
	cr_assert_eq(l.rc, 0, "%s", l.err);
	cr_assert_eq(auth_file_count(l.file), 0);
	unload(&l);
}

Test(auth, many_users_are_all_found)
{
	enum { USERS = 3000 };
	size_t capacity = USERS * 64;
	char *content = malloc(capacity);
	size_t len = 0;
	/* Written in an order that is not sorted, md5 so that the load runs no PBKDF2. */
	for (int i = 0; i < USERS; i++) {
		int id = (i * 7919) % USERS;
		len += (size_t)snprintf(content + len, capacity - len, "\"user%d\" \"md5%032x\"\n", id,
					(unsigned)id);
	}
	struct loaded l = load(content);
	free(content);
	cr_assert_eq(l.rc, 0, "%s", l.err);
	cr_assert_eq(auth_file_count(l.file), USERS);
	for (int id = 0; id < USERS; id++) {
		char name[32], secret[40];
		snprintf(name, sizeof(name), "user%d", id);
		snprintf(secret, sizeof(secret), "md5%032x", (unsigned)id);
		const struct auth_user *user = auth_file_find(l.file, name);
		cr_assert_not_null(user, "%s missing", name);
		cr_assert_str_eq(user->secret, secret);
	}
	cr_assert_null(auth_file_find(l.file, "user3000"));
	unload(&l);
}

/* ---- errors ---- */

Test(auth, unterminated_quote_names_its_line)
{
	expect_line_error("\"alice\" \"a\"\n; comment\n\"bob\" \"unterminated\n\"carol\" \"c\"\n", 3,
			  "unterminated quote in password");
	/* The quote meant to open the password closes the name instead. */
	expect_line_error("\"alice\" \"a\"\n\"bob \"b\"\n", 2,
			  "expected a double-quoted password after user \"bob \"");
	expect_line_error("\n\n\n\n\"bob\n", 5, "unterminated quote in user name");
}

Test(auth, missing_second_field_names_its_line)
{
	expect_line_error("\"alice\" \"a\"\n\"bob\"\n", 2, "missing password field after user \"bob\"");
	expect_line_error("\"alice\" \"a\"\n\n\"bob\"   \t\r\n", 3,
			  "missing password field after user \"bob\"");
	expect_line_error("\"bob\" secret\n", 1, "expected a double-quoted password after user \"bob\"");
}

Test(auth, name_too_long_names_its_line)
{
	char name[AUTH_NAME_MAX + 2];
	memset(name, 'n', AUTH_NAME_MAX + 1);
	name[AUTH_NAME_MAX + 1] = '\0';
	char content[256];
	snprintf(content, sizeof(content), "\"a\" \"a\"\n# c\n\"b\" \"b\"\n\"%s\" \"pw\"\n", name);
	expect_line_error(content, 4, "user name longer than 63 bytes");
}

Test(auth, password_too_long_names_its_line)
{
	char password[AUTH_PASSWORD_MAX + 2];
	memset(password, 'p', AUTH_PASSWORD_MAX + 1);
	password[AUTH_PASSWORD_MAX + 1] = '\0';
	char content[2048];
	snprintf(content, sizeof(content), "\"a\" \"a\"\n\"b\" \"%s\"\n", password);
	expect_line_error(content, 2, "password longer than 1024 bytes");
}

Test(auth, other_bad_lines_name_their_line)
{
	expect_line_error("alice \"a\"\n", 1, "expected a double-quoted user name");
	expect_line_error("\"a\" \"a\"\n'b' 'b'\n", 2, "expected a double-quoted user name");
	expect_line_error("\"\" \"pw\"\n", 1, "empty user name");
	expect_line_error("\"a\" \"a\"\n\"b\" \"\"\n", 2, "empty password for user \"b\"");
	expect_line_error("\"a\" \"SCRAM-SHA-256$4096:bad\"\n", 1, "malformed SCRAM-SHA-256 secret");
	expect_line_error("\"a\" \"md53175BCE1D3201D16594CEBF9D7EB3F9D\"\n", 1,
			  "md5 hash must use lowercase hex digits");
}

Test(auth, duplicate_user_names_the_second_line_and_the_first)
{
	expect_line_error(
		"\"zed\" \"1\"\n\"bob\" \"1\"\n\"amy\" \"1\"\n\"bob\" \"2\"\n\"zed\" \"2\"\n\"bob\" \"3\"\n",
		4, "duplicate user \"bob\" (first on line 2)");
}

Test(auth, nul_byte_in_a_line_is_an_error)
{
	static const char content[] = "\"a\" \"a\"\n\"b\" \"x\0y\"\n";
	char *path = temp_userlist(content, sizeof(content) - 1);
	struct auth_file *file = NULL;
	char err[256], expected[512];
	cr_assert_eq(auth_file_load(path, &file, err, sizeof(err)), -EINVAL);
	snprintf(expected, sizeof(expected), "%s:2: NUL byte in line", path);
	cr_assert_str_eq(err, expected);
	unlink(path);
	free(path);
}

Test(auth, missing_file_reports_the_path_and_errno)
{
	struct auth_file *file = (struct auth_file *)1;
	char err[256];
	cr_assert_eq(auth_file_load("/nonexistent/tern/userlist.txt", &file, err, sizeof(err)), -ENOENT);
	cr_assert_null(file);
	cr_assert_str_eq(err, "/nonexistent/tern/userlist.txt: No such file or directory");
	/* err is optional */
	cr_assert_eq(auth_file_load("/nonexistent/tern/userlist.txt", &file, NULL, 0), -ENOENT);
}

Test(auth, non_regular_files_are_read_to_the_end)
{
	int fds[2];
	cr_assert_eq(pipe(fds), 0);
	const char *content = "\"alice\" \"md53175bce1d3201d16594cebf9d7eb3f9d\"\n";
	cr_assert_eq(write(fds[1], content, strlen(content)), (ssize_t)strlen(content));
	close(fds[1]);
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[0]);
	struct auth_file *file = NULL;
	char err[256];
	cr_assert_eq(auth_file_load(path, &file, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(auth_file_count(file), 1);
	auth_file_destroy(file);
	close(fds[0]);
}

/* ---- md5 ---- */

Test(auth, md5_hash_matches_the_postgresql_formula)
{
	char out[AUTH_MD5_HASH_LEN + 1];
	/* PostgreSQL stores this for role postgres with password postgres. */
	auth_md5_hash("postgres", "postgres", out);
	cr_assert_str_eq(out, "md53175bce1d3201d16594cebf9d7eb3f9d");
	char expected[33];
	md5_hex("hunter2", 7, "bob", 3, expected);
	auth_md5_hash("bob", "hunter2", out);
	cr_assert_eq(strncmp(out, "md5", 3), 0);
	cr_assert_str_eq(out + 3, expected);
}

Test(auth, md5_verify_accepts_plaintext_and_md5_stored_users)
{
	struct loaded l = load("\"postgres\" \"postgres\"\n\"bob\" \"md53175bce1d3201d16594cebf9d7eb3f9d\"\n"
			       "\"carol\" \"hunter2\"\n");
	cr_assert_eq(l.rc, 0, "%s", l.err);
	const struct auth_user *postgres = auth_file_find(l.file, "postgres");
	/* A fixed vector computed outside tern, then the formula computed here. */
	const char *fixed = "md568be9ed08db75f318087ab337aaea044";
	cr_assert(auth_md5_verify(postgres, fixed_salt, fixed, strlen(fixed)));
	char response[36];
	md5_client_response("postgres", "postgres", fixed_salt, response);
	cr_assert_str_eq(response, fixed);

	/* bob's stored hash is md5("postgres" || "postgres"), so the same response works for him: the
	 * stored hash is what the client proves knowledge of. */
	const struct auth_user *bob = auth_file_find(l.file, "bob");
	cr_assert(auth_md5_verify(bob, fixed_salt, fixed, strlen(fixed)));

	const struct auth_user *carol = auth_file_find(l.file, "carol");
	md5_client_response("carol", "hunter2", fixed_salt, response);
	cr_assert(auth_md5_verify(carol, fixed_salt, response, strlen(response)));
	unload(&l);
}

Test(auth, md5_verify_rejects_wrong_passwords_salts_and_lengths)
{
	struct loaded l = load("\"carol\" \"hunter2\"\n");
	cr_assert_eq(l.rc, 0, "%s", l.err);
	const struct auth_user *carol = auth_file_find(l.file, "carol");
	char response[36];

	md5_client_response("carol", "hunter3", fixed_salt, response);
	cr_assert_not(auth_md5_verify(carol, fixed_salt, response, strlen(response)));

	md5_client_response("carol", "hunter2", fixed_salt, response);
	static const uint8_t other_salt[4] = {0x01, 0x02, 0x03, 0x05};
	cr_assert_not(auth_md5_verify(carol, other_salt, response, strlen(response)));

	/* A trailing NUL counted in, a truncated response, an empty one */
	cr_assert_not(auth_md5_verify(carol, fixed_salt, response, strlen(response) + 1));
	cr_assert_not(auth_md5_verify(carol, fixed_salt, response, strlen(response) - 1));
	cr_assert_not(auth_md5_verify(carol, fixed_salt, "", 0));
	cr_assert_not(auth_md5_verify(carol, fixed_salt, NULL, 0));
	/* The hash of the password alone is not a response. */
	char stored[AUTH_MD5_HASH_LEN + 1];
	auth_md5_hash("carol", "hunter2", stored);
	cr_assert_not(auth_md5_verify(carol, fixed_salt, stored, strlen(stored)));
	/* And the right one still passes. */
	cr_assert(auth_md5_verify(carol, fixed_salt, response, strlen(response)));
	unload(&l);
}

Test(auth, md5_verify_is_false_for_scram_entries_and_unknown_users)
{
	struct loaded l = load("\"carol\" \"" RFC_SECRET_TEXT "\"\n");
	cr_assert_eq(l.rc, 0, "%s", l.err);
	const struct auth_user *carol = auth_file_find(l.file, "carol");
	cr_assert_eq(carol->kind, AUTH_SECRET_SCRAM);
	char response[36];
	md5_client_response("carol", "pencil", fixed_salt, response);
	cr_assert_not(auth_md5_verify(carol, fixed_salt, response, strlen(response)));
	/* Not even with the SCRAM text taken as if it were a plaintext password */
	md5_client_response("carol", RFC_SECRET_TEXT, fixed_salt, response);
	cr_assert_not(auth_md5_verify(carol, fixed_salt, response, strlen(response)));
	/* The dummy hash used for missing users must not be reachable either. */
	md5_client_response("", "tern: no password to hash", fixed_salt, response);
	cr_assert_not(auth_md5_verify(NULL, fixed_salt, response, strlen(response)));
	md5_client_response("carol", "tern: no password to hash", fixed_salt, response);
	cr_assert_not(auth_md5_verify(carol, fixed_salt, response, strlen(response)));
	unload(&l);
}
