/* The last failovers (see failovers.h). */
#include "failovers.h"

void failover_log_init(struct failover_log *log)
{
	*log = (struct failover_log){0};
	pthread_mutex_init(&log->lock, NULL);
}

void failover_log_deinit(struct failover_log *log) { pthread_mutex_destroy(&log->lock); }

void failover_log_add(struct failover_log *log, const struct failover_entry *entry)
{
	pthread_mutex_lock(&log->lock);
	log->entries[log->total % FAILOVERS_KEPT] = *entry;
	log->total++;
	pthread_mutex_unlock(&log->lock);
}

uint32_t failover_log_copy(struct failover_log *log, struct failover_entry *out)
{
	pthread_mutex_lock(&log->lock);
	uint32_t count = (uint32_t)TERN_MIN(log->total, (uint64_t)FAILOVERS_KEPT);
	for (uint32_t i = 0; i < count; i++)
		out[i] = log->entries[(log->total - 1 - i) % FAILOVERS_KEPT];
	pthread_mutex_unlock(&log->lock);
	return count;
}
