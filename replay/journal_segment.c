/* The journal's segment files (see journal_segment.h). The journal keeps the list of its segments, oldest
 * first, with their sizes; the last one is open for appending. Every file operation is relative to the
 * directory's descriptor, so a rename of the path while tern runs changes nothing. */
#include "journal_segment.h"
#include "crc32c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define JOURNAL_NAME_PREFIX "journal-"
#define JOURNAL_NAME_SUFFIX ".log"
#define JOURNAL_NAME_DIGITS 20u
#define JOURNAL_NAME_LEN (sizeof(JOURNAL_NAME_PREFIX) - 1 + JOURNAL_NAME_DIGITS + sizeof(JOURNAL_NAME_SUFFIX) - 1)
/* No segment tern writes is larger: a full one, or a header and one frame of the largest record. */
#define JOURNAL_SEGMENT_FILE_MAX \
	(JOURNAL_SEGMENT_BYTES_MAX + JOURNAL_SEGMENT_HEADER_BYTES + JOURNAL_FRAME_HEADER_BYTES + \
	 JOURNAL_RECORD_BYTES_MAX)

static_assert(sizeof(JOURNAL_SEGMENT_MAGIC) - 1 + 4 == JOURNAL_SEGMENT_HEADER_BYTES, "magic and version");

struct journal_segment_file {
	uint64_t first_seq; /* the number in its name */
	uint64_t bytes;     /* on disk, header included */
};

struct journal_dir {
	int dir_fd; /* open for the whole life of the journal: the lock, and every *at() call */
	int fd;     /* the newest segment, appended to */
	uint64_t segment_bytes;
	uint64_t retain_bytes;
	struct journal_segment_file *segments; /* oldest first; the last is the one open for appending */
	uint32_t segment_count;
	uint32_t segment_cap;
	uint64_t disk_bytes; /* the sum of segments[].bytes */
	bool is_dir_dirty;   /* a segment was created or deleted since the directory was last synced */
	bool must_rotate;    /* a failed write left a partial frame that could not be cut off */
	int last_errno;      /* of the last failed write, so a run of the same failure is logged once */
	struct journal_dir_stats stats; /* counters: written by the owner thread, read by any (atomics) */
	char path[PATH_MAX];
};

static void stat_add(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static void stat_set(uint64_t *counter, uint64_t v)
{
	__atomic_store_n(counter, v, __ATOMIC_RELAXED);
}

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errsize, const char *fmt, ...)
{
	if (errsize == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errsize, fmt, ap);
	va_end(ap);
}

static uint32_t load_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void segment_header(uint8_t out[JOURNAL_SEGMENT_HEADER_BYTES])
{
	memcpy(out, JOURNAL_SEGMENT_MAGIC, 4);
	store_u32(out + 4, JOURNAL_FORMAT_VERSION);
}

static void segment_name(char out[JOURNAL_NAME_LEN + 1], uint64_t first_seq)
{
	int n = snprintf(out, JOURNAL_NAME_LEN + 1, JOURNAL_NAME_PREFIX "%020" PRIu64 JOURNAL_NAME_SUFFIX, first_seq);
	TERN_ASSERT(n == (int)JOURNAL_NAME_LEN);
}

/* Whether `name` is a segment's (exactly journal-<20 digits>.log), and its number. */
static bool segment_name_parse(const char *name, uint64_t *first_seq)
{
	const size_t prefix_len = sizeof(JOURNAL_NAME_PREFIX) - 1;
	if (strlen(name) != JOURNAL_NAME_LEN || strncmp(name, JOURNAL_NAME_PREFIX, prefix_len) != 0 ||
	    strcmp(name + prefix_len + JOURNAL_NAME_DIGITS, JOURNAL_NAME_SUFFIX) != 0)
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < JOURNAL_NAME_DIGITS; i++) {
		char c = name[prefix_len + i];
		if (c < '0' || c > '9')
			return false;
		uint64_t digit = (uint64_t)(c - '0');
		if (v > (UINT64_MAX - digit) / 10u)
			return false;
		v = v * 10u + digit;
	}
	*first_seq = v;
	return true;
}

/* Writes all of iov[0..count) at the end of `fd`, through short writes and signals. 0 or a negative errno. */
static int write_all(int fd, struct iovec *iov, int count)
{
	while (count > 0) {
		ssize_t n = writev(fd, iov, count);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		size_t done = (size_t)n;
		while (count > 0 && done >= iov->iov_len) {
			done -= iov->iov_len;
			iov++;
			count--;
		}
		if (count > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + done;
			iov->iov_len -= done;
		}
	}
	return 0;
}

/* ---- the frame scanner ---- */

int journal_segment_scan(const uint8_t *body, size_t len, journal_record_fn fn, void *ctx, struct journal_scan *out)
{
	TERN_ASSERT(out != NULL);
	TERN_ASSERT(body != NULL || len == 0);
	memset(out, 0, sizeof(*out));
	size_t offset = 0;
	for (;;) {
		size_t left = len - offset;
		if (left == 0) {
			out->end = JOURNAL_SCAN_CLEAN;
			return 0;
		}
		if (left < JOURNAL_FRAME_HEADER_BYTES) {
			out->end = JOURNAL_SCAN_TORN;
			return 0;
		}
		uint32_t payload_len = load_u32(body + offset);
		uint32_t crc = load_u32(body + offset + 4);
		/* Too short to be a record covers a run of zero bytes, whose CRC-32C would be 0 as well. */
		if (payload_len < JOURNAL_RECORD_BYTES_MIN || payload_len > JOURNAL_RECORD_BYTES_MAX) {
			out->end = JOURNAL_SCAN_CORRUPT;
			return 0;
		}
		if (payload_len > left - JOURNAL_FRAME_HEADER_BYTES) {
			out->end = JOURNAL_SCAN_TORN;
			return 0;
		}
		const uint8_t *payload = body + offset + JOURNAL_FRAME_HEADER_BYTES;
		struct journal_record_view view;
		if (crc32c(payload, payload_len) != crc || journal_record_decode(payload, payload_len, &view) != 0) {
			out->end = JOURNAL_SCAN_CORRUPT;
			return 0;
		}
		if (fn != NULL) {
			int rc = fn(ctx, &view, payload, payload_len);
			if (rc != 0)
				return rc;
		}
		offset += JOURNAL_FRAME_HEADER_BYTES + payload_len;
		out->intact_bytes = offset;
		out->records++;
		out->commit_seq_high = TERN_MAX(out->commit_seq_high, view.commit_seq);
	}
}

/* ---- the segment list ---- */

/* Room for one more segment in the list. */
static int segments_reserve(struct journal_dir *j)
{
	if (j->segment_count < j->segment_cap)
		return 0;
	uint32_t cap = j->segment_cap ? j->segment_cap * 2u : 16u;
	struct journal_segment_file *grown = realloc(j->segments, cap * sizeof(*grown));
	if (grown == NULL)
		return -ENOMEM;
	j->segments = grown;
	j->segment_cap = cap;
	return 0;
}

static int segments_push(struct journal_dir *j, uint64_t first_seq, uint64_t bytes)
{
	int rc = segments_reserve(j);
	if (rc != 0)
		return rc;
	TERN_ASSERT(j->segment_count == 0 || first_seq > j->segments[j->segment_count - 1].first_seq);
	j->segments[j->segment_count++] = (struct journal_segment_file){.first_seq = first_seq, .bytes = bytes};
	j->disk_bytes += bytes;
	return 0;
}

static int segment_compare(const void *a, const void *b)
{
	uint64_t x = ((const struct journal_segment_file *)a)->first_seq;
	uint64_t y = ((const struct journal_segment_file *)b)->first_seq;
	return x < y ? -1 : x > y;
}

/* The segments in the directory, oldest first (sizes filled in as each is read). */
static int segments_list(struct journal_dir *j, char *err, size_t errsize)
{
	int fd = dup(j->dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		int rc = -errno;
		if (fd >= 0)
			close(fd);
		set_err(err, errsize, "journal: cannot list directory %s: %s", j->path, strerror(-rc));
		return rc;
	}
	rewinddir(d);
	int rc = 0;
	struct dirent *entry;
	while (rc == 0 && (errno = 0, entry = readdir(d)) != NULL) {
		uint64_t first_seq;
		if (!segment_name_parse(entry->d_name, &first_seq))
			continue;
		struct stat st;
		if (fstatat(j->dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
			set_err(err, errsize, "journal: %s/%s is not a regular file", j->path, entry->d_name);
			rc = -EINVAL;
			break;
		}
		if ((rc = segments_reserve(j)) != 0)
			break;
		/* In directory order here, sorted below; sizes come as each is read. */
		j->segments[j->segment_count++] = (struct journal_segment_file){.first_seq = first_seq, .bytes = 0};
	}
	if (rc == 0 && errno != 0) {
		rc = -errno;
		set_err(err, errsize, "journal: cannot list directory %s: %s", j->path, strerror(-rc));
	}
	if (rc == -ENOMEM)
		set_err(err, errsize, "journal: out of memory listing %s", j->path);
	closedir(d);
	if (rc == 0 && j->segment_count > 1)
		qsort(j->segments, j->segment_count, sizeof(*j->segments), segment_compare);
	return rc;
}

/* ---- reading back ---- */

struct segment_open {
	journal_record_fn fn;
	void *ctx;
	char *err;
	size_t errsize;
};

/* A newest segment shorter than its header was cut while it was being created: it gets its header again.
 * Anything else shorter than a header is refused. */
static int segment_repair_header(struct journal_dir *j, int fd, const char *name, uint64_t size, bool is_newest,
				 const struct segment_open *o)
{
	uint8_t expected[JOURNAL_SEGMENT_HEADER_BYTES], found[JOURNAL_SEGMENT_HEADER_BYTES];
	segment_header(expected);
	ssize_t n = pread(fd, found, (size_t)size, 0);
	if (n != (ssize_t)size) {
		int rc = n < 0 ? -errno : -EIO;
		set_err(o->err, o->errsize, "journal: cannot read %s/%s: %s", j->path, name, strerror(-rc));
		return rc;
	}
	if (memcmp(found, expected, (size_t)size) != 0 || !is_newest) {
		set_err(o->err, o->errsize,
			"journal: %s/%s is %" PRIu64 " bytes, shorter than a segment header, and %s", j->path, name,
			size, is_newest ? "not the start of one" : "not the newest segment");
		return -EINVAL;
	}
	struct iovec iov = {.iov_base = expected, .iov_len = sizeof(expected)};
	int rc = ftruncate(fd, 0) != 0 ? -errno : write_all(fd, &iov, 1);
	if (rc == 0 && fdatasync(fd) != 0)
		rc = -errno;
	if (rc != 0) {
		set_err(o->err, o->errsize, "journal: cannot repair the header of %s/%s: %s", j->path, name,
			strerror(-rc));
		return rc;
	}
	TERN_WARN("journal: %s/%s was cut while it was created (%" PRIu64 " bytes); its header is written again",
		  j->path, name, size);
	stat_add(&j->stats.bytes_truncated, size);
	return 0;
}

/* Reads one segment back: its header checked, each intact record to the callback, and the tail cut when it
 * is the newest. Its size after that goes into the list. */
static int segment_read(struct journal_dir *j, uint32_t index, int fd, const struct segment_open *o)
{
	struct journal_segment_file *segment = &j->segments[index];
	bool is_newest = index + 1 == j->segment_count;
	char name[JOURNAL_NAME_LEN + 1];
	segment_name(name, segment->first_seq);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int rc = -errno;
		set_err(o->err, o->errsize, "journal: cannot stat %s/%s: %s", j->path, name, strerror(-rc));
		return rc;
	}
	uint64_t size = (uint64_t)st.st_size;
	if (size < JOURNAL_SEGMENT_HEADER_BYTES) {
		int rc = segment_repair_header(j, fd, name, size, is_newest, o);
		segment->bytes = JOURNAL_SEGMENT_HEADER_BYTES;
		return rc;
	}
	if (size > JOURNAL_SEGMENT_FILE_MAX) {
		set_err(o->err, o->errsize, "journal: %s/%s is %" PRIu64 " bytes, larger than any segment tern writes",
			j->path, name, size);
		return -EFBIG;
	}
	const uint8_t *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		int rc = -errno;
		set_err(o->err, o->errsize, "journal: cannot map %s/%s: %s", j->path, name, strerror(-rc));
		return rc;
	}
	int rc = 0;
	struct journal_scan scan = {0};
	if (memcmp(map, JOURNAL_SEGMENT_MAGIC, 4) != 0) {
		set_err(o->err, o->errsize,
			"journal: %s/%s is not a tern journal segment (its magic is %02x %02x %02x %02x, not \"%s\")",
			j->path, name, map[0], map[1], map[2], map[3], JOURNAL_SEGMENT_MAGIC);
		rc = -EINVAL;
	} else if (load_u32(map + 4) != JOURNAL_FORMAT_VERSION) {
		set_err(o->err, o->errsize,
			"journal: %s/%s has journal format version %" PRIu32 "; this tern reads version %u only",
			j->path, name, load_u32(map + 4), JOURNAL_FORMAT_VERSION);
		rc = -EPROTONOSUPPORT;
	} else {
		size_t body_len = (size_t)size - JOURNAL_SEGMENT_HEADER_BYTES;
		rc = journal_segment_scan(map + JOURNAL_SEGMENT_HEADER_BYTES, body_len, o->fn, o->ctx, &scan);
		if (rc != 0)
			set_err(o->err, o->errsize, "journal: loading %s/%s: %s", j->path, name,
				strerror(rc < 0 ? -rc : rc));
	}
	munmap((void *)map, (size_t)size);
	if (rc != 0)
		return rc;
	stat_add(&j->stats.records_recovered, scan.records);
	stat_set(&j->stats.commit_seq_high, TERN_MAX(j->stats.commit_seq_high, scan.commit_seq_high));
	uint64_t intact = JOURNAL_SEGMENT_HEADER_BYTES + scan.intact_bytes;
	segment->bytes = size;
	if (scan.end == JOURNAL_SCAN_CLEAN)
		return 0;
	const char *what = scan.end == JOURNAL_SCAN_TORN ? "torn" : "corrupt";
	if (!is_newest) {
		TERN_WARN("journal: %s/%s has a %s record at offset %" PRIu64 "; its reading stops there (%" PRIu64
			  " bytes after it are kept, unread)",
			  j->path, name, what, intact, size - intact);
		stat_add(&j->stats.segments_damaged, 1);
		return 0;
	}
	if (ftruncate(fd, (off_t)intact) != 0 || fdatasync(fd) != 0) {
		rc = -errno;
		set_err(o->err, o->errsize, "journal: cannot cut the %s tail of %s/%s: %s", what, j->path, name,
			strerror(-rc));
		return rc;
	}
	TERN_WARN("journal: %s/%s had a %s tail; cut at offset %" PRIu64 " (%" PRIu64 " bytes dropped)", j->path, name,
		  what, intact, size - intact);
	stat_add(&j->stats.bytes_truncated, size - intact);
	segment->bytes = intact;
	return 0;
}

/* ---- creating, rotating, retention ---- */

/* Creates a segment for records from `first_seq` on (named after the newest one's when that is not
 * higher, so names stay in order) and makes it the one appended to. */
static int segment_create(struct journal_dir *j, uint64_t first_seq)
{
	if (j->segment_count > 0)
		first_seq = TERN_MAX(first_seq, j->segments[j->segment_count - 1].first_seq + 1);
	char name[JOURNAL_NAME_LEN + 1];
	segment_name(name, first_seq);
	int fd = openat(j->dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	uint8_t header[JOURNAL_SEGMENT_HEADER_BYTES];
	segment_header(header);
	struct iovec iov = {.iov_base = header, .iov_len = sizeof(header)};
	int rc = write_all(fd, &iov, 1);
	if (rc == 0)
		rc = segments_push(j, first_seq, JOURNAL_SEGMENT_HEADER_BYTES);
	if (rc != 0) {
		close(fd);
		unlinkat(j->dir_fd, name, 0);
		return rc;
	}
	if (j->fd >= 0)
		close(j->fd);
	j->fd = fd;
	j->is_dir_dirty = true;
	stat_add(&j->stats.bytes_written, JOURNAL_SEGMENT_HEADER_BYTES);
	return 0;
}

/* Deletes the oldest whole segments while the directory holds more than retain_bytes; never the newest. */
static void segments_retain(struct journal_dir *j)
{
	uint32_t deleted = 0;
	while (j->segment_count - deleted > 1 && j->disk_bytes > j->retain_bytes) {
		const struct journal_segment_file *oldest = &j->segments[deleted];
		char name[JOURNAL_NAME_LEN + 1];
		segment_name(name, oldest->first_seq);
		if (unlinkat(j->dir_fd, name, 0) != 0 && errno != ENOENT) {
			TERN_WARN("journal: cannot delete %s/%s: %s; it is kept", j->path, name, strerror(errno));
			break;
		}
		j->disk_bytes -= oldest->bytes;
		deleted++;
	}
	if (deleted == 0)
		return;
	j->segment_count -= deleted;
	memmove(j->segments, j->segments + deleted, j->segment_count * sizeof(*j->segments));
	j->is_dir_dirty = true;
	stat_add(&j->stats.segments_deleted, deleted);
}

static void stats_publish(struct journal_dir *j)
{
	stat_set(&j->stats.segment_count, j->segment_count);
	stat_set(&j->stats.disk_bytes, j->disk_bytes);
}

/* The segment left behind is synced first, whatever the policy, so only the newest may have a torn tail. */
static int segment_rotate(struct journal_dir *j, uint64_t first_seq)
{
	if (fdatasync(j->fd) != 0)
		TERN_WARN("journal: fdatasync of a full segment in %s failed: %s", j->path, strerror(errno));
	int rc = segment_create(j, first_seq);
	if (rc != 0)
		return rc;
	j->must_rotate = false;
	stat_add(&j->stats.segments_rotated, 1);
	segments_retain(j);
	return 0;
}

int journal_dir_append(struct journal_dir *j, const uint8_t *payload, uint32_t len)
{
	TERN_ASSERT(j != NULL && j->fd >= 0 && j->segment_count > 0);
	TERN_ASSERT(payload != NULL);
	uint64_t seq;
	if (len > JOURNAL_RECORD_BYTES_MAX || journal_record_peek_commit_seq(payload, len, &seq) != 0)
		return -EINVAL;
	uint64_t frame_bytes = JOURNAL_FRAME_HEADER_BYTES + (uint64_t)len;
	const struct journal_segment_file *current = &j->segments[j->segment_count - 1];
	bool is_full = current->bytes > JOURNAL_SEGMENT_HEADER_BYTES && current->bytes + frame_bytes > j->segment_bytes;
	int rc = 0;
	if (j->must_rotate || is_full)
		rc = segment_rotate(j, seq);
	if (rc == 0) {
		uint8_t header[JOURNAL_FRAME_HEADER_BYTES];
		store_u32(header, len);
		store_u32(header + 4, crc32c(payload, len));
		struct iovec iov[2] = {{.iov_base = header, .iov_len = sizeof(header)},
				       {.iov_base = (void *)payload, .iov_len = len}};
		rc = write_all(j->fd, iov, 2);
		struct journal_segment_file *segment = &j->segments[j->segment_count - 1];
		if (rc != 0 && ftruncate(j->fd, (off_t)segment->bytes) != 0)
			j->must_rotate = true; /* the partial frame stays: the next record starts a new segment */
		if (rc == 0) {
			segment->bytes += frame_bytes;
			j->disk_bytes += frame_bytes;
			stat_add(&j->stats.records_written, 1);
			stat_add(&j->stats.bytes_written, frame_bytes);
			if (seq > j->stats.commit_seq_high)
				stat_set(&j->stats.commit_seq_high, seq);
			j->last_errno = 0;
		}
	}
	stats_publish(j);
	if (rc == 0)
		return 0;
	stat_add(&j->stats.write_errors, 1);
	if (j->last_errno != -rc)
		TERN_ERROR("journal: cannot append to %s: %s (records are lost until it works again)", j->path,
			   strerror(-rc));
	j->last_errno = -rc;
	return rc;
}

int64_t journal_dir_sync(struct journal_dir *j)
{
	TERN_ASSERT(j != NULL && j->fd >= 0);
	uint64_t start_ns = base_now_ns();
	if (fdatasync(j->fd) != 0)
		return -errno;
	if (j->is_dir_dirty) {
		if (fsync(j->dir_fd) != 0)
			return -errno;
		j->is_dir_dirty = false;
	}
	return (int64_t)(base_now_ns() - start_ns);
}

/* ---- opening ---- */

/* mkdir -p, each new folder 0700. */
static int dir_create(const char *path, char *err, size_t errsize)
{
	char partial[PATH_MAX];
	size_t len = strlen(path);
	TERN_ASSERT(len < sizeof(partial));
	memcpy(partial, path, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (partial[i] != '/' && partial[i] != '\0')
			continue;
		char saved = partial[i];
		partial[i] = '\0';
		if (mkdir(partial, 0700) != 0 && errno != EEXIST) {
			int rc = -errno;
			set_err(err, errsize, "journal: cannot create directory %s: %s", partial, strerror(-rc));
			return rc;
		}
		partial[i] = saved;
	}
	return 0;
}

static int journal_load(struct journal_dir *j, const struct segment_open *o)
{
	int rc = segments_list(j, o->err, o->errsize);
	for (uint32_t i = 0; rc == 0 && i < j->segment_count; i++) {
		bool is_newest = i + 1 == j->segment_count;
		char name[JOURNAL_NAME_LEN + 1];
		segment_name(name, j->segments[i].first_seq);
		int fd = openat(j->dir_fd, name, (is_newest ? O_RDWR | O_APPEND : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			rc = -errno;
			set_err(o->err, o->errsize, "journal: cannot open %s/%s%s: %s", j->path, name,
				is_newest ? " for writing" : "", strerror(-rc));
			break;
		}
		rc = segment_read(j, i, fd, o);
		j->disk_bytes += j->segments[i].bytes;
		if (is_newest && rc == 0)
			j->fd = fd;
		else
			close(fd);
	}
	if (rc == 0 && j->segment_count == 0) {
		rc = segment_create(j, j->stats.commit_seq_high + 1);
		if (rc != 0) {
			char name[JOURNAL_NAME_LEN + 1];
			segment_name(name, j->stats.commit_seq_high + 1);
			set_err(o->err, o->errsize, "journal: cannot create %s/%s: %s", j->path, name, strerror(-rc));
		}
	}
	return rc;
}

int journal_dir_open(const char *dir, uint64_t segment_bytes, uint64_t retain_bytes, journal_record_fn fn,
		     void *ctx, struct journal_dir **out, char *err, size_t errsize)
{
	TERN_ASSERT(dir != NULL && out != NULL && (err != NULL || errsize == 0));
	TERN_ASSERT(segment_bytes >= JOURNAL_SEGMENT_BYTES_MIN && segment_bytes <= JOURNAL_SEGMENT_BYTES_MAX);
	TERN_ASSERT(retain_bytes > 0);
	*out = NULL;
	if (dir[0] == '\0' || strlen(dir) >= PATH_MAX) {
		set_err(err, errsize, "journal: directory name is empty or too long");
		return -EINVAL;
	}
	struct journal_dir *j = calloc(1, sizeof(*j));
	if (j == NULL) {
		set_err(err, errsize, "journal: out of memory");
		return -ENOMEM;
	}
	j->fd = -1;
	j->dir_fd = -1;
	j->segment_bytes = segment_bytes;
	j->retain_bytes = retain_bytes;
	memcpy(j->path, dir, strlen(dir) + 1);
	int rc = dir_create(dir, err, errsize);
	if (rc == 0 && (j->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		rc = -errno;
		set_err(err, errsize, "journal: cannot open directory %s: %s", dir, strerror(-rc));
	}
	if (rc == 0 && faccessat(j->dir_fd, ".", W_OK | X_OK, AT_EACCESS) != 0) {
		rc = -errno;
		set_err(err, errsize, "journal: directory %s is not writable: %s", dir, strerror(-rc));
	}
	if (rc == 0 && flock(j->dir_fd, LOCK_EX | LOCK_NB) != 0) {
		rc = -errno;
		set_err(err, errsize, "journal: directory %s is in use by another process (%s)", dir, strerror(-rc));
	}
	if (rc == 0) {
		struct segment_open o = {.fn = fn, .ctx = ctx, .err = err, .errsize = errsize};
		rc = journal_load(j, &o);
	}
	if (rc != 0) {
		journal_dir_close(j);
		return rc;
	}
	segments_retain(j);
	stats_publish(j);
	*out = j;
	return 0;
}

void journal_dir_stats(const struct journal_dir *j, struct journal_dir_stats *out)
{
	TERN_ASSERT(j != NULL && out != NULL);
	const uint64_t *from = (const uint64_t *)(const void *)&j->stats;
	uint64_t *to = (uint64_t *)(void *)out;
	static_assert(sizeof(struct journal_dir_stats) % sizeof(uint64_t) == 0, "journal_dir_stats holds u64 only");
	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
}

uint64_t journal_dir_commit_seq_high(const struct journal_dir *j)
{
	TERN_ASSERT(j != NULL);
	return __atomic_load_n(&j->stats.commit_seq_high, __ATOMIC_RELAXED);
}

const char *journal_dir_path(const struct journal_dir *j)
{
	TERN_ASSERT(j != NULL);
	return j->path;
}

void journal_dir_close(struct journal_dir *j)
{
	if (j == NULL)
		return;
	if (j->fd >= 0)
		close(j->fd);
	if (j->dir_fd >= 0)
		close(j->dir_fd); /* and the lock with it */
	free(j->segments);
	free(j);
}
