/* SHOW STATS: each ReadyForQuery that answers the client is one query, and ends the server's busy time
 * once nothing is pending. The server assignments (transactions) and waits are counted where they
 * begin and end (session.c, worker.c). */
#include "observer.h"
#include "session.h"

static int stats_server_message(struct session *s, struct leg *leg, const struct observer_message *m)
{
	if (!m->is_hidden)
		session_stats_on_ready(s, leg);
	return 0;
}

const struct observer observer_stats = {
	.name = "stats",
	.server_types = "Z",
	.server_message = stats_server_message,
};
