/*
 * auth.h — the user list tern authenticates clients against (PgBouncer's userlist.txt format) and
 * PostgreSQL's md5 password scheme. SCRAM itself lives in scram.h; this module only stores secrets.
 *
 * Threads: a loaded auth_file is immutable, so any number of threads may look users up at once; a
 * reload builds a new file and the caller swaps and destroys the old one when no session uses it.
 * Ownership: auth_file_load allocates; auth_file_destroy wipes every secret and frees. Pointers
 * returned by auth_file_find live as long as the file.
 * Never: knows sockets, sessions or the wire protocol, or asks a server for a secret (auth_query.h does).
 *
 * File format: one user per line, `"name" "password"`; a doubled `""` inside quotes is one quote;
 * further fields are ignored; blank lines and lines starting with ';' or '#' are comments.
 * Password forms: plaintext; "md5" + 32 lowercase hex digits (md5(password || name));
 * "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>" (base64 fields).
 */
#ifndef TERN_AUTH_H
#define TERN_AUTH_H

#include "base.h"
#include "scram.h"

/* PostgreSQL's NAMEDATALEN - 1: a longer name could never match a role. */
#define AUTH_NAME_MAX 63
/* Plaintext passwords and SCRAM texts (~140 bytes with a 16-byte salt) fit with room to spare; a
 * longer field is a pasted mistake, not a password. */
#define AUTH_PASSWORD_MAX 1024
/* About 100 bytes a user: room for hundreds of thousands of users; anything bigger is not a userlist. */
#define AUTH_FILE_SIZE_MAX (64u * 1024 * 1024)
/* "md5" + 32 hex digits + NUL */
#define AUTH_MD5_HASH_LEN 35

enum auth_secret_kind { AUTH_SECRET_PLAIN, AUTH_SECRET_MD5, AUTH_SECRET_SCRAM };

struct auth_user {
	char name[AUTH_NAME_MAX + 1];
	enum auth_secret_kind kind;
	char *secret; /* as written in the file: the plaintext, "md5...", or the SCRAM text */
	/* Filled for SCRAM entries, and for PLAIN entries at load time (random salt,
	 * SCRAM_ITERATIONS_DEFAULT) so that no worker ever runs PBKDF2 while serving clients.
	 * MD5 entries cannot be turned into SCRAM: scram.iterations == 0 there. */
	struct scram_secret scram;
};

struct auth_file; /* opaque, immutable after load */

/* Loads `path`. On a bad line nothing is kept and `err` (if not NULL) reads "PATH:LINE: reason";
 * on an I/O problem "PATH: reason". Returns 0, -EINVAL (bad content or duplicate user), -EFBIG
 * (over AUTH_FILE_SIZE_MAX), -ENOMEM, -EIO (OpenSSL) or the negative errno of open/read.
 * Cost: one PBKDF2 of SCRAM_ITERATIONS_DEFAULT rounds per plaintext entry, about 2.4 ms each here
 * (500 users: 1.2 s), so large lists belong off the workers and are better stored as SCRAM secrets. */
TERN_MUST_USE int auth_file_load(const char *path, struct auth_file **out, char *err, size_t err_size);

/* A user from a secret a server reported (auth_query's pg_authid.rolpassword): an md5 hash or a SCRAM
 * secret as PostgreSQL classifies them, anything else a plaintext password. out->secret is allocated;
 * auth_user_deinit wipes and frees it. 0, -EINVAL (a name over AUTH_NAME_MAX, an empty or over-long or
 * malformed SCRAM secret), -ENOMEM or -EIO. */
TERN_MUST_USE int auth_user_from_secret(const char *name, const char *secret, struct auth_user *out);
void auth_user_deinit(struct auth_user *user);

/* NULL if absent. O(log n), no locks. */
const struct auth_user *auth_file_find(const struct auth_file *file, const char *name);
size_t auth_file_count(const struct auth_file *file);
void auth_file_destroy(struct auth_file *file);

/* What PostgreSQL stores for md5: "md5" + hex(md5(password || user)). If OpenSSL refuses MD5 (a FIPS
 * provider), `out` is the empty string, which matches no response. */
void auth_md5_hash(const char *user, const char *password, char out[AUTH_MD5_HASH_LEN + 1]);

/* What an md5 client answers a salt with, from the stored "md5..." hash: "md5" + hex(md5(hash digits ||
 * salt)), NUL-terminated. False when `stored` is not a hash or OpenSSL refuses MD5. */
TERN_MUST_USE bool auth_md5_salted(const char *stored, const uint8_t salt[4], char out[AUTH_MD5_HASH_LEN + 1]);

/* Checks the client's PasswordMessage for AuthenticationMD5Password, which is
 * "md5" + hex(md5(hex(md5(password || user)) || salt)); `response_len` excludes any trailing NUL.
 * Works for PLAIN and MD5 entries; false for SCRAM entries or a NULL user, after the same work as a
 * real check so that timing does not tell them apart. The comparison is constant-time. */
bool auth_md5_verify(const struct auth_user *user, const uint8_t salt[4], const char *response,
		     size_t response_len);

#endif
