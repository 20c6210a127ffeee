/* The journal's writer thread (see journal_writer.h). The lock guards the queue, its depth and the pause
 * and stop flags; it is never held across a write or a sync. The counters are atomics the thread updates
 * and anyone reads. */
#include "journal_writer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

const char *const journal_fsync_policy_names[JOURNAL_FSYNC_COUNT] = {"commit", "interval", "none"};

struct journal_writer_item {
	struct base_list node;
	uint32_t len;
	uint8_t payload[];
};

struct journal_writer {
	struct journal_dir *journal;
	enum journal_fsync_policy policy;
	uint64_t interval_ns;
	uint32_t capacity;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* CLOCK_MONOTONIC, for the interval's timed wait */
	struct base_list queue; /* of journal_writer_item, oldest first; under lock */
	bool is_paused;         /* under lock */
	bool is_stopping;       /* under lock */
	struct journal_writer_stats stats; /* atomics; stats.queued rises under the lock, falls outside it */
};

static void stat_add(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static void stat_drop(struct journal_writer *w)
{
	stat_add(&w->stats.dropped, 1);
}

bool journal_writer_submit(struct journal_writer *w, const uint8_t *payload, uint32_t len)
{
	TERN_ASSERT(w != NULL && payload != NULL && len > 0);
	/* A full queue refuses before the copy is made; the check is made again under the lock. */
	if (__atomic_load_n(&w->stats.queued, __ATOMIC_RELAXED) >= w->capacity) {
		stat_drop(w);
		return false;
	}
	struct journal_writer_item *item = malloc(sizeof(*item) + len);
	if (item == NULL) {
		stat_drop(w);
		return false;
	}
	item->len = len;
	memcpy(item->payload, payload, len);
	pthread_mutex_lock(&w->lock);
	/* The writer lowers the depth without the lock (after writing), so it only ever rises here. */
	bool is_queued = !w->is_stopping && __atomic_load_n(&w->stats.queued, __ATOMIC_RELAXED) < w->capacity;
	if (is_queued) {
		base_list_insert_tail(&w->queue, &item->node);
		__atomic_fetch_add(&w->stats.queued, 1, __ATOMIC_RELAXED);
		pthread_cond_signal(&w->wake);
	}
	pthread_mutex_unlock(&w->lock);
	if (!is_queued) {
		free(item);
		stat_drop(w);
	}
	return is_queued;
}

/* Appends and frees every item of `batch`; how many there were. */
static uint64_t writer_write_batch(struct journal_writer *w, struct base_list *batch)
{
	uint64_t count = 0;
	struct base_list *node;
	while ((node = base_list_pop_head(batch)) != NULL) {
		struct journal_writer_item *item = TERN_CONTAINER_OF(node, struct journal_writer_item, node);
		if (journal_dir_append(w->journal, item->payload, item->len) == 0) {
			stat_add(&w->stats.written, 1);
			stat_add(&w->stats.bytes, item->len);
		} else {
			stat_add(&w->stats.write_errors, 1); /* journal_dir_append logged it */
		}
		free(item);
		count++;
	}
	return count;
}

/* Syncs; true when it worked. */
static bool writer_sync(struct journal_writer *w)
{
	int64_t ns = journal_dir_sync(w->journal);
	if (ns < 0) {
		stat_add(&w->stats.fsync_errors, 1);
		TERN_ERROR("journal: fdatasync in %s failed: %s", journal_dir_path(w->journal), strerror((int)-ns));
		return false;
	}
	stat_add(&w->stats.fsyncs, 1);
	stat_add(&w->stats.fsync_ns_total, (uint64_t)ns);
	if ((uint64_t)ns > w->stats.fsync_ns_max)
		__atomic_store_n(&w->stats.fsync_ns_max, (uint64_t)ns, __ATOMIC_RELAXED);
	return true;
}

static struct timespec writer_deadline(uint64_t at_ns)
{
	return (struct timespec){.tv_sec = (time_t)(at_ns / BASE_NS_PER_SEC),
				 .tv_nsec = (long)(at_ns % BASE_NS_PER_SEC)};
}

static void *writer_main(void *arg)
{
	struct journal_writer *w = arg;
	struct base_list batch;
	base_list_init(&batch);
	bool is_dirty = false; /* written since the last sync */
	uint64_t synced_ns = base_now_ns();
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->is_stopping && (w->is_paused || base_list_is_empty(&w->queue))) {
			if (!is_dirty || w->policy != JOURNAL_FSYNC_INTERVAL) {
				pthread_cond_wait(&w->wake, &w->lock);
				continue;
			}
			uint64_t due_ns = synced_ns + w->interval_ns;
			if (base_now_ns() >= due_ns)
				break; /* an interval sync is due and nothing else is */
			struct timespec deadline = writer_deadline(due_ns);
			pthread_cond_timedwait(&w->wake, &w->lock, &deadline);
		}
		bool is_stopping = w->is_stopping;
		if (is_stopping || !w->is_paused)
			base_list_splice_tail(&batch, &w->queue);
		pthread_mutex_unlock(&w->lock);

		uint64_t count = writer_write_batch(w, &batch);
		if (count > 0) {
			is_dirty = true;
			__atomic_fetch_sub(&w->stats.queued, count, __ATOMIC_RELAXED);
		}
		uint64_t now_ns = base_now_ns();
		bool is_interval_due = is_stopping || now_ns - synced_ns >= w->interval_ns;
		bool is_due = w->policy == JOURNAL_FSYNC_COMMIT ||
			      (w->policy == JOURNAL_FSYNC_INTERVAL && is_interval_due);
		if (is_dirty && is_due) {
			if (writer_sync(w))
				is_dirty = false;
			synced_ns = now_ns; /* a failed sync is tried again an interval (or a batch) later */
		}

		pthread_mutex_lock(&w->lock);
		if (is_stopping && base_list_is_empty(&w->queue))
			break;
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int journal_writer_start(struct journal_writer **out, struct journal_dir *j, uint32_t queue_capacity,
			 enum journal_fsync_policy policy, uint32_t fsync_interval_ms)
{
	TERN_ASSERT(out != NULL && j != NULL);
	TERN_ASSERT(queue_capacity > 0 && queue_capacity <= JOURNAL_WRITER_QUEUE_MAX);
	TERN_ASSERT(policy < JOURNAL_FSYNC_COUNT);
	TERN_ASSERT(policy != JOURNAL_FSYNC_INTERVAL ||
		    (fsync_interval_ms > 0 && fsync_interval_ms <= JOURNAL_WRITER_INTERVAL_MS_MAX));
	*out = NULL;
	struct journal_writer *w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -ENOMEM;
	w->journal = j;
	w->policy = policy;
	w->interval_ns = (uint64_t)fsync_interval_ms * BASE_NS_PER_MS;
	w->capacity = queue_capacity;
	base_list_init(&w->queue);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&w->wake, &attr);
	pthread_condattr_destroy(&attr);
	pthread_mutex_init(&w->lock, NULL);

	/* Signals are for the main thread: the writer starts with every one blocked. */
	sigset_t all, saved;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	int rc = pthread_create(&w->thread, NULL, writer_main, w);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&w->wake);
		pthread_mutex_destroy(&w->lock);
		free(w);
		return -rc;
	}
	pthread_setname_np(w->thread, "tern-journal");
	*out = w;
	return 0;
}

void journal_writer_set_paused(struct journal_writer *w, bool is_paused)
{
	TERN_ASSERT(w != NULL);
	pthread_mutex_lock(&w->lock);
	w->is_paused = is_paused;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

void journal_writer_stats(const struct journal_writer *w, struct journal_writer_stats *out)
{
	TERN_ASSERT(w != NULL && out != NULL);
	static_assert(sizeof(struct journal_writer_stats) % sizeof(uint64_t) == 0, "u64 counters only");
	const uint64_t *from = (const uint64_t *)(const void *)&w->stats;
	uint64_t *to = (uint64_t *)(void *)out;
	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
}

void journal_writer_stop(struct journal_writer *w)
{
	if (w == NULL)
		return;
	pthread_mutex_lock(&w->lock);
	TERN_ASSERT(!w->is_stopping);
	w->is_stopping = true;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
	int rc = pthread_join(w->thread, NULL);
	TERN_ASSERT(rc == 0);
	TERN_ASSERT(base_list_is_empty(&w->queue) && w->stats.queued == 0);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
