/*
 * auth.c — userlist loading, lookup and md5. The whole file is read into one buffer that is wiped
 * afterwards, so no copy of a password outlives the load except the entry that holds it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

struct auth_entry {
	struct auth_user user;
	unsigned line; /* for duplicate reports */
};

struct auth_file {
	struct auth_entry *entries; /* sorted by name after load */
	size_t count;
	size_t capacity;
};

static const char auth_scram_prefix[] = "SCRAM-SHA-256$";

__attribute__((format(printf, 3, 4))) static void auth_error(char *err, size_t err_size, const char *fmt, ...)
{
	if (err == NULL || err_size == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, err_size, fmt, ap);
	va_end(ap);
}

static int auth_errno_error(const char *path, int error, char *err, size_t err_size)
{
	char text[128];
	auth_error(err, err_size, "%s: %s", path, strerror_r(error, text, sizeof(text)));
	return -error;
}

/* ---- reading ---- */

/* Grows by copying and wiping rather than realloc, which would leave password bytes in freed memory. */
static int auth_buffer_grow(char **buf, size_t len, size_t *capacity, size_t capacity_new)
{
	char *bigger = malloc(capacity_new);
	if (bigger == NULL)
		return -ENOMEM;
	memcpy(bigger, *buf, len);
	OPENSSL_cleanse(*buf, len);
	free(*buf);
	*buf = bigger;
	*capacity = capacity_new;
	return 0;
}

static int auth_read_fd(int fd, const char *path, char **out, size_t *out_len, char *err, size_t err_size)
{
	size_t capacity = 4096;
	struct stat st;
	/* Size the buffer once for regular files; pipes and the like grow as they go. */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
		if ((uint64_t)st.st_size > AUTH_FILE_SIZE_MAX)
			goto too_big;
		capacity = (size_t)st.st_size + 1;
	}
	char *buf = malloc(capacity);
	if (buf == NULL) {
		auth_error(err, err_size, "%s: out of memory", path);
		return -ENOMEM;
	}
	size_t len = 0;
	for (;;) {
		if (len > AUTH_FILE_SIZE_MAX) {
			OPENSSL_cleanse(buf, len);
			free(buf);
			goto too_big;
		}
		if (len == capacity &&
		    auth_buffer_grow(&buf, len, &capacity,
				     TERN_MIN(capacity * 2, (size_t)AUTH_FILE_SIZE_MAX + 1)) < 0) {
			OPENSSL_cleanse(buf, len);
			free(buf);
			auth_error(err, err_size, "%s: out of memory", path);
			return -ENOMEM;
		}
		ssize_t n = read(fd, buf + len, capacity - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int error = errno;
			OPENSSL_cleanse(buf, len);
			free(buf);
			return auth_errno_error(path, error, err, err_size);
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*out = buf;
	*out_len = len;
	return 0;
too_big:
	auth_error(err, err_size, "%s: larger than %u bytes", path, AUTH_FILE_SIZE_MAX);
	return -EFBIG;
}

static int auth_read_file(const char *path, char **out, size_t *out_len, char *err, size_t err_size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return auth_errno_error(path, errno, err, err_size);
	int rc = auth_read_fd(fd, path, out, out_len, err, err_size);
	close(fd);
	return rc;
}

/* ---- parsing ---- */

struct auth_loader {
	const char *path;
	unsigned line;
	char *err;
	size_t err_size;
	struct auth_file *file;
};

__attribute__((format(printf, 2, 3))) static int auth_line_error(const struct auth_loader *loader,
								 const char *fmt, ...)
{
	char reason[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (loader) /* NULL for a secret a server reported (auth_user_from_secret) */
		auth_error(loader->err, loader->err_size, "%s:%u: %s", loader->path, loader->line, reason);
	return -EINVAL;
}

/* Reads the quoted field that opens at line[*pos]; "" inside it is one quote. Returns 0,
 * -E2BIG when it holds more than value_max bytes, -EINVAL when the line ends inside it. */
static int auth_parse_field(const char *line, size_t len, size_t *pos, char *value, size_t value_max,
			    size_t *value_len)
{
	TERN_ASSERT(*pos < len && line[*pos] == '"');
	size_t n = 0;
	for (size_t i = *pos + 1; i < len; i++) {
		if (line[i] == '"') {
			if (i + 1 >= len || line[i + 1] != '"') {
				value[n] = '\0';
				*value_len = n;
				*pos = i + 1;
				return 0;
			}
			i++; /* a doubled quote stands for one */
		}
		if (n == value_max)
			return -E2BIG;
		value[n++] = line[i];
	}
	return -EINVAL;
}

static size_t auth_skip_blanks(const char *line, size_t len, size_t pos)
{
	while (pos < len && (line[pos] == ' ' || line[pos] == '\t'))
		pos++;
	return pos;
}

static bool auth_char_is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Fills kind and scram from the password text, as PostgreSQL classifies rolpassword. */
static int auth_classify(const struct auth_loader *loader, const char *password, size_t password_len,
			 struct auth_user *user)
{
	if (strncmp(password, auth_scram_prefix, sizeof(auth_scram_prefix) - 1) == 0) {
		/* PostgreSQL would take a malformed secret as a plaintext password; in a config file it
		 * is far more likely a paste error, so say so. */
		if (scram_secret_parse(password, &user->scram) < 0)
			return auth_line_error(loader, "malformed SCRAM-SHA-256 secret");
		user->kind = AUTH_SECRET_SCRAM;
		return 0;
	}
	if (password_len == AUTH_MD5_HASH_LEN && strncmp(password, "md5", 3) == 0) {
		bool is_hex = true, has_upper = false;
		for (size_t i = 3; i < password_len; i++) {
			is_hex = is_hex && auth_char_is_hex(password[i]);
			has_upper = has_upper || (password[i] >= 'A' && password[i] <= 'F');
		}
		/* PostgreSQL only recognises lowercase; uppercase would silently become a plaintext
		 * password that no client could ever match. */
		if (is_hex && has_upper)
			return auth_line_error(loader, "md5 hash must use lowercase hex digits");
		if (is_hex) {
			user->kind = AUTH_SECRET_MD5;
			return 0;
		}
	}
	user->kind = AUTH_SECRET_PLAIN;
	uint8_t salt[SCRAM_SALT_LEN_DEFAULT];
	if (RAND_bytes(salt, sizeof(salt)) != 1 ||
	    scram_secret_from_password(password, salt, sizeof(salt), SCRAM_ITERATIONS_DEFAULT, &user->scram) <
		    0) {
		auth_line_error(loader, "cannot derive a SCRAM secret (OpenSSL failed)");
		return -EIO;
	}
	return 0;
}

static int auth_file_push(struct auth_file *file, const struct auth_entry *entry)
{
	if (file->count == file->capacity) {
		size_t capacity = file->capacity == 0 ? 16 : file->capacity * 2;
		struct auth_entry *bigger = calloc(capacity, sizeof(*bigger));
		if (bigger == NULL)
			return -ENOMEM;
		if (file->count > 0) {
			memcpy(bigger, file->entries, file->count * sizeof(*bigger));
			OPENSSL_cleanse(file->entries, file->count * sizeof(*bigger));
		}
		free(file->entries);
		file->entries = bigger;
		file->capacity = capacity;
	}
	file->entries[file->count++] = *entry;
	return 0;
}

static int auth_parse_line_into(struct auth_loader *loader, const char *line, size_t len, char *password)
{
	if (len > 0 && line[len - 1] == '\r')
		len--; /* files edited on Windows */
	if (memchr(line, '\0', len) != NULL)
		return auth_line_error(loader, "NUL byte in line");
	size_t pos = auth_skip_blanks(line, len, 0);
	if (pos == len || line[pos] == ';' || line[pos] == '#')
		return 0;
	if (line[pos] != '"')
		return auth_line_error(loader, "expected a double-quoted user name");

	struct auth_entry entry = {.line = loader->line};
	size_t name_len = 0;
	int rc = auth_parse_field(line, len, &pos, entry.user.name, AUTH_NAME_MAX, &name_len);
	if (rc == -E2BIG)
		return auth_line_error(loader, "user name longer than %d bytes", AUTH_NAME_MAX);
	if (rc < 0)
		return auth_line_error(loader, "unterminated quote in user name");
	if (name_len == 0)
		return auth_line_error(loader, "empty user name");

	pos = auth_skip_blanks(line, len, pos);
	if (pos == len)
		return auth_line_error(loader, "missing password field after user \"%s\"", entry.user.name);
	if (line[pos] != '"')
		return auth_line_error(loader, "expected a double-quoted password after user \"%s\"",
				       entry.user.name);
	size_t password_len = 0;
	rc = auth_parse_field(line, len, &pos, password, AUTH_PASSWORD_MAX, &password_len);
	if (rc == -E2BIG)
		return auth_line_error(loader, "password longer than %d bytes", AUTH_PASSWORD_MAX);
	if (rc < 0)
		return auth_line_error(loader, "unterminated quote in password");
	/* An empty password would accept md5("" || name) from anyone who guesses it. */
	if (password_len == 0)
		return auth_line_error(loader, "empty password for user \"%s\"", entry.user.name);
	/* Anything after the password is ignored, as PgBouncer does. */

	rc = auth_classify(loader, password, password_len, &entry.user);
	if (rc < 0)
		return rc;
	entry.user.secret = malloc(password_len + 1);
	rc = -ENOMEM;
	if (entry.user.secret != NULL) {
		memcpy(entry.user.secret, password, password_len + 1);
		rc = auth_file_push(loader->file, &entry);
		if (rc < 0) {
			OPENSSL_cleanse(entry.user.secret, password_len);
			free(entry.user.secret);
		}
	}
	OPENSSL_cleanse(&entry, sizeof(entry));
	if (rc < 0)
		auth_line_error(loader, "out of memory");
	return rc;
}

static int auth_parse_line(struct auth_loader *loader, const char *line, size_t len)
{
	char password[AUTH_PASSWORD_MAX + 1];
	int rc = auth_parse_line_into(loader, line, len, password);
	OPENSSL_cleanse(password, sizeof(password));
	return rc;
}

static int auth_entry_compare(const void *a, const void *b)
{
	const struct auth_entry *x = a, *y = b;
	int by_name = strcmp(x->user.name, y->user.name);
	if (by_name != 0)
		return by_name;
	return x->line < y->line ? -1 : x->line > y->line;
}

/* Sorts by (name, line), then reports the duplicate that appears first in the file, as a line-by-line
 * reader would: the earliest second occurrence, whose predecessor is that name's first line. */
static int auth_file_sort(struct auth_loader *loader)
{
	struct auth_file *file = loader->file;
	if (file->count > 1)
		qsort(file->entries, file->count, sizeof(file->entries[0]), auth_entry_compare);
	const struct auth_entry *first = NULL, *duplicate = NULL;
	for (size_t i = 1; i < file->count; i++) {
		const struct auth_entry *prev = &file->entries[i - 1], *cur = &file->entries[i];
		if (strcmp(prev->user.name, cur->user.name) == 0 &&
		    (duplicate == NULL || cur->line < duplicate->line)) {
			duplicate = cur;
			first = prev;
		}
	}
	if (duplicate == NULL)
		return 0;
	loader->line = duplicate->line;
	return auth_line_error(loader, "duplicate user \"%s\" (first on line %u)", duplicate->user.name,
			       first->line);
}

int auth_file_load(const char *path, struct auth_file **out, char *err, size_t err_size)
{
	TERN_ASSERT(path != NULL && out != NULL);
	*out = NULL;
	if (err != NULL && err_size > 0)
		err[0] = '\0';

	char *buf = NULL;
	size_t len = 0;
	int rc = auth_read_file(path, &buf, &len, err, err_size);
	if (rc < 0)
		return rc;

	struct auth_file *file = calloc(1, sizeof(*file));
	if (file == NULL) {
		OPENSSL_cleanse(buf, len);
		free(buf);
		auth_error(err, err_size, "%s: out of memory", path);
		return -ENOMEM;
	}
	struct auth_loader loader = {.path = path, .err = err, .err_size = err_size, .file = file};
	for (size_t start = 0; start < len && rc == 0;) {
		loader.line++;
		const char *newline = memchr(buf + start, '\n', len - start);
		size_t end = newline != NULL ? (size_t)(newline - buf) : len;
		rc = auth_parse_line(&loader, buf + start, end - start);
		start = end + 1;
	}
	OPENSSL_cleanse(buf, len);
	free(buf);
	if (rc == 0)
		rc = auth_file_sort(&loader);
	if (rc < 0) {
		auth_file_destroy(file);
		return rc;
	}
	*out = file;
	return 0;
}

int auth_user_from_secret(const char *name, const char *secret, struct auth_user *out)
{
	TERN_ASSERT(name != NULL && secret != NULL && out != NULL);
	memset(out, 0, sizeof(*out));
	size_t len = strlen(secret);
	if (!base_strlcpy(out->name, name, sizeof(out->name)) || len == 0 || len > AUTH_PASSWORD_MAX)
		return -EINVAL;
	int rc = auth_classify(NULL, secret, len, out);
	if (rc < 0)
		return rc;
	out->secret = strdup(secret);
	if (!out->secret) {
		OPENSSL_cleanse(out, sizeof(*out));
		return -ENOMEM;
	}
	return 0;
}

void auth_user_deinit(struct auth_user *user)
{
	if (user->secret) {
		OPENSSL_cleanse(user->secret, strlen(user->secret));
		free(user->secret);
	}
	OPENSSL_cleanse(user, sizeof(*user));
}

static int auth_name_compare(const void *key, const void *element)
{
	const struct auth_entry *entry = element;
	return strcmp(key, entry->user.name);
}

const struct auth_user *auth_file_find(const struct auth_file *file, const char *name)
{
	TERN_ASSERT(file != NULL && name != NULL);
	if (file->count == 0)
		return NULL;
	const struct auth_entry *entry =
		bsearch(name, file->entries, file->count, sizeof(file->entries[0]), auth_name_compare);
	return entry != NULL ? &entry->user : NULL;
}

size_t auth_file_count(const struct auth_file *file)
{
	TERN_ASSERT(file != NULL);
	return file->count;
}

void auth_file_destroy(struct auth_file *file)
{
	if (file == NULL)
		return;
	for (size_t i = 0; i < file->count; i++) {
		char *secret = file->entries[i].user.secret;
		if (secret != NULL) {
			OPENSSL_cleanse(secret, strlen(secret));
			free(secret);
		}
	}
	if (file->entries != NULL)
		OPENSSL_cleanse(file->entries, file->capacity * sizeof(file->entries[0]));
	free(file->entries);
	free(file);
}

/* ---- md5 ---- */

/* hex(md5(a || b)), lowercase, NUL-terminated. False when OpenSSL refuses MD5 (FIPS). */
static bool auth_md5_hex(const void *a, size_t a_len, const void *b, size_t b_len, char hex[33])
{
	static const char digits[] = "0123456789abcdef";
	uint8_t digest[16];
	unsigned int digest_len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	bool ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_md5(), NULL) == 1 &&
		  EVP_DigestUpdate(ctx, a, a_len) == 1 && EVP_DigestUpdate(ctx, b, b_len) == 1 &&
		  EVP_DigestFinal_ex(ctx, digest, &digest_len) == 1 && digest_len == sizeof(digest);
	EVP_MD_CTX_free(ctx);
	if (!ok) {
		hex[0] = '\0';
		return false;
	}
	for (size_t i = 0; i < sizeof(digest); i++) {
		hex[2 * i] = digits[digest[i] >> 4];
		hex[2 * i + 1] = digits[digest[i] & 0xf];
	}
	hex[32] = '\0';
	return true;
}

void auth_md5_hash(const char *user, const char *password, char out[AUTH_MD5_HASH_LEN + 1])
{
	TERN_ASSERT(user != NULL && password != NULL && out != NULL);
	if (!auth_md5_hex(password, strlen(password), user, strlen(user), out + 3)) {
		out[0] = '\0';
		return;
	}
	memcpy(out, "md5", 3);
}

bool auth_md5_salted(const char *stored, const uint8_t salt[4], char out[AUTH_MD5_HASH_LEN + 1])
{
	TERN_ASSERT(stored != NULL && salt != NULL && out != NULL);
	memcpy(out, "md5", 4);
	return strlen(stored) == AUTH_MD5_HASH_LEN && auth_md5_hex(stored + 3, 32, salt, 4, out + 3);
}

bool auth_md5_verify(const struct auth_user *user, const uint8_t salt[4], const char *response,
		     size_t response_len)
{
	TERN_ASSERT(salt != NULL);
	TERN_ASSERT(response != NULL || response_len == 0);
	bool is_usable = user != NULL && user->kind != AUTH_SECRET_SCRAM && user->secret != NULL;

	/* The first hash runs for every kind, so an md5 entry, a plaintext entry and a missing user all
	 * cost two MD5s. */
	char computed[AUTH_MD5_HASH_LEN + 1];
	if (is_usable && user->kind == AUTH_SECRET_PLAIN)
		auth_md5_hash(user->name, user->secret, computed);
	else
		auth_md5_hash(user != NULL ? user->name : "", "tern: no password to hash", computed);
	const char *stored = computed;
	if (is_usable && user->kind == AUTH_SECRET_MD5)
		stored = user->secret;

	char expected[AUTH_MD5_HASH_LEN + 1];
	bool hashed = auth_md5_salted(stored, salt, expected);

	char received[AUTH_MD5_HASH_LEN] = {0};
	if (response_len > 0)
		memcpy(received, response, TERN_MIN(response_len, sizeof(received)));
	bool is_match = CRYPTO_memcmp(expected, received, AUTH_MD5_HASH_LEN) == 0;
	OPENSSL_cleanse(computed, sizeof(computed));
	return is_usable && hashed && response_len == AUTH_MD5_HASH_LEN && is_match;
}
