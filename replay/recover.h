/*
 * recover.h — Transaction Replay's recovery of a session whose primary connection was lost (DESIGN §6;
 * ../shared/reference/004_c44c290a4cd34a46.txt is the contract), in either pool mode. The loss is
 * decided once (session_decide_lost asks recover_on_lost): how far the request in flight got
 * (observer_replay.c's record: nothing in flight, never sent, sent with no byte of its answer at the
 * client, part of its answer at the client, a COPY), the client's transaction, and what the statement
 * is (recover_kind_of) go to tr_decide (replay/decide.h). Then the session moves (recover_on_lost): its
 * primary leg is set aside, and a new one waits (recover_awaits_primary, on host->recover_waits, in
 * recover_wait.c with the deadline and fencing) until a
 * primary the monitor vouches for is there — another server the monitor says is the primary, or the lost
 * one seen answering as the primary after the loss — for at most write_timeout_secs from when the session
 * needs it until a primary answers it: the connect, login, restore, replay and re-execution fit in the
 * same deadline (recover_check_deadline; 08006 then). Its parameters and named prepared statements come
 * back on the new connection as on any other (observer_params, observer_stmts). A statement that never
 * reached the server, or that has no effect, runs there; one whose outcome is unknown gets one error
 * (08007; a COMMIT in flight always); a transaction that was lost is answered by tern as PostgreSQL
 * answers an aborted one (25P02 until ROLLBACK, which tern answers too). A pool refusal for a primary that
 * cannot be reached goes through the same decision: the request, never sent, waits for the next primary.
 *
 * Under tr_mode transaction (select: a read-only one) the transaction open at the loss is replayed:
 * observer_replay.c kept its requests and the digests of their answers; they run again, hidden, on the
 * new connection, then its isolation is asked; each answer must match, and the isolation be read
 * committed, before the statement in flight and what the client sent meanwhile go on; else ROLLBACK there
 * and 40001.
 *
 * A transaction's requests that parse, bind or describe the client's named statements replay under the
 * statements' server names (observer_replay.c). Not built yet: a Close of a named statement in the
 * transaction (it makes the transaction unreplayable), SET tracking beyond the parameters tern restores
 * on every connection.
 *
 * Threads: the session's worker. Never: runs a statement twice that may have written, retries a COMMIT,
 * or writes to a server the monitor has not seen answer as the primary since the loss.
 */
#ifndef TERN_RECOVER_H
#define TERN_RECOVER_H

#include "core/classify.h"
#include "core/observer.h"
#include "core/session.h"
#include "decide.h"
#include "replay_types.h"

extern const struct observer observer_sets;    /* the SET state a move restores */
extern const struct observer observer_replay;  /* Transaction Replay's record of the requests in flight */
extern const struct observer observer_journal; /* the recovery journal's capture of committed transactions */

/* The distinct variables the session's state holds: its SETs (observer_sets) and the parameters
 * observer_params keeps that no SET named (Transaction Replay's cap). */
uint32_t sets_count(const struct session *s);
/* A Query too long for the observers to read went to the primary (observer_journal matches its answer). */
void journal_note_unread_query(struct session *s);
/* The primary connection was lost and the session goes on (recover.c): what was sent there will not be
 * answered there; with is_moved, the transaction goes on on the next primary (a replay). */
void journal_on_lost(struct session *s, bool is_moved);
/* What is held goes to the client (counted as leg's), ahead of what leg says next. */
void replay_flush_preamble(struct session *s, struct leg *leg);
/* For session_parts.hold_reply: false when no start of an answer is held. While one is, a reply tern made
 * up ahead of the answer's first row or completion joins it; any other (a ReadyForQuery tern answers a
 * Sync with, an error) first lets out what is held, as a server's own completion does, and is sent. */
bool replay_reply(struct session *s, const void *data, uint32_t len);
/* session_parts.hold_parse_complete: while the request is recorded, a ParseComplete tern answers joins
 * the start of its answer (1; -ENOMEM), else 0. */
int replay_hold_parse_complete(struct session *s);
/* session_parts.replay_takes_chunk: while a replay runs, the client's bytes wait for its verdict. */
bool replay_takes_chunk(struct session *s, const uint8_t *data, uint32_t len);

/* What tr_decide (decide.h) calls a classified statement: a commit wherever it hides
 * (behind a comment, END WORK, in a text of several statements, PREPARE TRANSACTION), a read whose only
 * flaw is a call outside the side-effect-free list (opaque: never run twice), a control statement that
 * is harmless to run again, a COPY, or a write. */
enum tr_kind recover_kind_of(const struct classify_result *r);
/* session_parts.replay.lost: what a lost (or refused) primary connection means for the session, decided
 * once; SESSION_LOST_RECOVER: the recovery it decided on is under way (recover_start). */
struct session_lost_decision recover_on_lost(struct session *s, struct leg *leg, enum leg_fault fault);
/* session_parts.awaits_primary: a primary leg about to ask the pool: true when it waits for a primary
 * instead (the session is on host->recover_waits). */
bool recover_awaits_primary(struct session *s, struct leg *leg);
/* The worker, at its tick and when the monitor published new answers: waiting sessions whose primary is
 * there go on, those past their deadline end; primary legs parked on a server that is no longer the
 * primary ask again for the one that is. */
void recover_check_waits(struct host *host, uint64_t now_ns);
/* session_parts.check_deadline, from the session's timeout scan: a recovery past its one deadline
 * (write_timeout_secs from when the session first needed a primary after the loss, until a primary
 * answers) ends the session with 08006; true then. */
bool recover_check_deadline(struct session *s, uint64_t now_ns);
void recover_repoint_parked(struct host *host);
/* session_parts.host_pass's part: requests parked on the primary of before ask again, recoveries waiting
 * look again when the monitor's generation moved; host_tick's: the same once a second, and deadlines. */
void recover_host_pass(struct host *host);
void recover_host_tick(struct host *host, uint64_t now_ns);
/* session_parts.waits_for_primary: its primary leg waits for a primary (on host->recover_waits). */
bool recover_is_waiting(const struct session *s);
/* session_parts.place's part: s->replay and s->journal are `replay` and `journal` (zeroed). */
void replay_place(struct session *s, struct session_replay *replay, struct session_journal *journal);
/* The session's primary (server) is gone, as of now_ns unless it was already: recover_awaits_primary
 * waits for the monitor to vouch for a primary from then on. (recover_wait.c, as the four above.) */
void recover_lose(struct session *s, struct pool_server *server, uint64_t now_ns);
/* A ReadyForQuery of tern's own to the client. */
void recover_send_ready(struct session *s, char status);
/* The request in flight is one request tern kept whole (a Query, or unnamed extended-protocol messages up
 * to their Sync): what it can run again. */
bool recover_is_logged_request(const struct session_replay *r, const struct leg *leg);
/* The next statement text in messages kept whole (a Query's, a Parse's, the named statement a Bind binds)
 * from *at, which moves past it; NULL at the end. */
const char *recover_next_text(const struct session *s, const uint8_t *msgs, uint32_t len, uint32_t *at);
/* What the transaction open on the primary is, for a replay (tr_mode select, transaction), from the
 * primary's status ('I', 'T', 'E') and the steps observer_replay kept: none, failed, not replayable,
 * snapshot, read-only or written. */
enum tr_tx recover_tx_state(const struct session *s, char status);
/* The transaction's record is dropped (it ended, or was lost). */
void recover_forget_tx(struct session_replay *r);
/* Empties the transaction's record (its steps, and the statements they use). */
void recover_clear_tx_log(struct session_replay *r);
/* The record of the requests in flight closes: the primary's leg owes the client nothing more
 * (observer_replay.c: the ReadyForQuery that answers it all, or tern answered it itself), a stale plan's
 * request is about to run again (observer_replay.c), or the leg was lost (recover_start, which took what
 * the record held). */
void recover_close_record(struct session_replay *r);
/* What the record held of an answer's start is let go unshown (a loss, a stale plan's run again), with
 * the note of where it lay in a receive. */
void recover_drop_preamble(struct session_replay *r);
/* The session ends: off the waits. */
void recover_end(struct session *s);
/* observer_replay, at the last hidden answer of a replay: verified, the statement in flight and what the
 * client sent meanwhile go on; not, the transaction is rolled back there and lost with 40001. */
void recover_replay_done(struct session *s, struct leg *leg);

/* While the client's transaction is lost (or a batch that failed is skipped to its Sync): tern answers
 * the client's messages itself. */
static inline bool recover_is_answering(const struct session *s)
{
	return s->replay->aborted != REPLAY_TX_LIVE || s->replay->is_skipping;
}
/* The relay's type hook then: how the message is read (whole, or its head when long). */
unsigned recover_client_type(uint8_t type);
/* ... and its content (a long one's head): answered. 0. */
int recover_client_message(struct session *s, uint8_t type, const uint8_t *body, uint32_t len);
/* An ErrorResponse or NoticeResponse the primary's leg sent: false when it is the server going away
 * (57P01, 57P02, 57P03 as FATAL, or the WARNING an immediate shutdown sends), which the client is not
 * shown while a recovery may follow. A 25006 (a write the primary refused as read-only) asks the monitor
 * for a round now, which fences a read-only primary. */
bool recover_shows_notice(struct session *s, const uint8_t *body, uint32_t len);

#endif
