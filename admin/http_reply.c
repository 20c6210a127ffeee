/* The admin HTTP endpoint's replies (http_internal.h): a response queued on its connection, an error
 * body, committed history's coverage. Below both http.c (GET) and http_post.c (POST); calls neither. */
#include "http_internal.h"

#include "replay/journal.h"

#include <stdlib.h>
#include <string.h>

/* Answers with `body` (malloc'd text, freed here; NULL: out of memory, a 500) and one more header when
 * header_name is not NULL. */
enum MHD_Result http_reply_with(struct MHD_Connection *conn, unsigned int code, const char *type, char *body,
				       const char *header_name, const char *header_value)
{
	struct MHD_Response *resp = body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
					 : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", type);
	if (header_name && body)
		MHD_add_response_header(resp, header_name, header_value);
	enum MHD_Result rc = MHD_queue_response(conn, body ? code : MHD_HTTP_INTERNAL_SERVER_ERROR, resp);
	MHD_destroy_response(resp);
	return rc;
}

enum MHD_Result http_reply(struct MHD_Connection *conn, unsigned int code, const char *type, char *body)
{
	return http_reply_with(conn, code, type, body, NULL, NULL);
}

char *http_error_body(const char *message)
{
	json_t *body = json_pack("{s:s}", "error", message);
	char *text = body ? json_dumps(body, JSON_INDENT(2)) : NULL;
	json_decref(body);
	return text;
}

/* What backs committed history now (the coverage block of a replay's answer). */
json_t *http_coverage_json(struct journal *h)
{
	struct journal_coverage c;
	journal_coverage(h, &c);
	return json_pack("{s:I, s:I, s:I, s:I, s:b}", "retained_transactions", (json_int_t)c.retained_transactions,
			 "retained_bytes", (json_int_t)c.retained_bytes, "commit_seq_high", (json_int_t)c.commit_seq_high,
			 "dropped_transactions", (json_int_t)c.dropped_transactions, "durable", c.is_durable);
}
