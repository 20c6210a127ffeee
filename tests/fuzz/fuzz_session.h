/*
 * fuzz_session.h — what fuzz_session.c (the harness that drives a whole session) shares with
 * fuzz_session_server.c (the fake PostgreSQL server that answers what tern sends it, and the canned
 * messages the input names by number). Nothing here is tern's: it stands where a client and a server
 * would.
 */
#ifndef TERN_FUZZ_SESSION_H
#define TERN_FUZZ_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pool_conn;

/* Bytes one fake peer keeps in one direction; past it the oldest input's bytes are dropped (a run that
 * large says nothing more about tern, and must stay fast). */
#define FUZZ_BYTES_MAX (4u << 20)

#define FUZZ_CHECK(cond)                                                                               \
	do {                                                                                           \
		if (!(cond)) {                                                                         \
			fprintf(stderr, "fuzz_session: check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
			abort();                                                                       \
		}                                                                                      \
	} while (0)

struct fuzz_bytes {
	uint8_t *data;
	uint32_t len, cap;
};

void fuzz_bytes_append(struct fuzz_bytes *b, const void *data, uint32_t len);
/* Drops the first n bytes. */
void fuzz_bytes_consume(struct fuzz_bytes *b, uint32_t n);
void fuzz_bytes_free(struct fuzz_bytes *b);
/* A whole message: type, the length, then body. */
void fuzz_bytes_message(struct fuzz_bytes *b, uint8_t type, const void *body, uint32_t len);

/* A name the fake server knows (a prepared statement or a portal), with what its statement does. */
#define FUZZ_SERVER_NAMES_MAX 16u
struct fuzz_server_name {
	char name[64];
	uint8_t kind; /* enum fuzz_sql_kind */
	bool is_used;
};

/* One fake server connection: tern holds `conn` (its end of a socketpair), the harness `fd`. */
struct fuzz_server {
	int fd;                 /* the server's end; -1 once closed */
	struct pool_conn *conn; /* tern's end as the pool knows it; NULL once the pool closed it */
	bool is_eof;            /* tern shut or closed its end */
	struct fuzz_bytes rx;   /* what tern sent, not yet answered */
	struct fuzz_bytes held; /* what the server says, not yet released to the socket */
	struct fuzz_bytes out;  /* released, not yet taken by the socket */
	char tx_status;         /* 'I', 'T' or 'E', as its ReadyForQuery says */
	bool is_copy_in, is_copy_extended;
	bool is_skipping; /* an error in an extended-protocol batch: its messages are ignored to the Sync */
	uint32_t copy_rows;
	struct fuzz_server_name statements[FUZZ_SERVER_NAMES_MAX], portals[FUZZ_SERVER_NAMES_MAX];
};

void fuzz_server_init(struct fuzz_server *srv, int fd, struct pool_conn *conn);
void fuzz_server_deinit(struct fuzz_server *srv);
/* Answers the requests tern sent that are complete, as a PostgreSQL server would (simplified): at most
 * `limit` of them (a Query, or an extended-protocol batch up to its Sync; 0: all). The `fail_at`-th
 * statement answered (1-based; 0: none) fails with the error numbered `error`. The answer goes to
 * srv->held. */
void fuzz_server_answer(struct fuzz_server *srv, uint32_t limit, uint32_t fail_at, uint8_t error);
/* An ErrorResponse of the fake server's table (index taken modulo its size), severity included. */
void fuzz_server_error(struct fuzz_bytes *b, uint8_t error);

/* Canned messages, numbered modulo their count: frontend for the client, backend for the server. */
void fuzz_canned_client(struct fuzz_bytes *b, uint8_t index);
void fuzz_canned_server(struct fuzz_bytes *b, uint8_t index);

#endif
