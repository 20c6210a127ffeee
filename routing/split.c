/* The five conditions of a split read (see split.h). */
#include "split.h"

#include <string.h>

const char *const split_refusal_names[SPLIT_REFUSAL_COUNT] = {
	[SPLIT_ELIGIBLE] = "eligible",
	[SPLIT_NOT_READ_COMMITTED] = "not_read_committed",
	[SPLIT_NOT_ONE_COMMAND] = "not_one_command",
	[SPLIT_NOT_SELECT] = "not_select",
	[SPLIT_NOT_SPLITTABLE] = "not_splittable",
	[SPLIT_SET_IN_TRANSACTION] = "set_in_transaction",
};

/* PostgreSQL runs READ UNCOMMITTED as READ COMMITTED. */
static bool split_is_rc(enum classify_isolation level)
{
	return level == CLASSIFY_READ_COMMITTED || level == CLASSIFY_READ_UNCOMMITTED;
}

void split_tx_note(struct split_tx *tx, const struct classify_result *r)
{
	switch (r->kind) {
	case CLASSIFY_BEGIN:
	case CLASSIFY_SET_TRANSACTION:
		/* A level named by a BEGIN (a no-op inside a transaction) or a SET TRANSACTION: another than
		 * read committed is kept whatever follows. */
		if (r->isolation != CLASSIFY_ISOLATION_DEFAULT &&
		    (tx->isolation == CLASSIFY_ISOLATION_DEFAULT || split_is_rc(tx->isolation)))
			tx->isolation = r->isolation;
		break;
	case CLASSIFY_READ:
	case CLASSIFY_COMMIT:
	case CLASSIFY_ROLLBACK:
	case CLASSIFY_TRANSACTION: /* SAVEPOINT, RELEASE, ROLLBACK TO: nothing written */
		break;
	case CLASSIFY_SET:
	case CLASSIFY_DISCARD:
		tx->has_set = true;
		break;
	case CLASSIFY_WRITE:
		tx->has_write = true;
		break;
	}
	if (r->statement_count > 1 && r->kind != CLASSIFY_READ)
		tx->has_write = true; /* a text of several statements: one of them may have written or set */
}

bool split_is_read_committed(const struct split_tx *tx)
{
	return split_is_rc(tx->server_isolation) && (tx->isolation == CLASSIFY_ISOLATION_DEFAULT || split_is_rc(tx->isolation));
}

bool split_is_splittable(const struct split_tx *tx, bool is_polar)
{
	return is_polar ? tx->xact == SPLIT_XACT_SPLITTABLE : !tx->has_write;
}

bool split_is_plain_select(const struct classify_result *r)
{
	return r->kind == CLASSIFY_READ && !r->is_show && !r->is_parse_error;
}

bool split_is_one_command(const struct classify_result *r, bool is_simple)
{
	return is_simple && r->statement_count == 1;
}

bool split_has_no_set_before_write(const struct split_tx *tx) { return !tx->has_set || tx->has_write; }

enum split_refusal split_check(const struct split_tx *tx, const struct classify_result *r, bool is_simple,
			       bool is_polar)
{
	if (!split_is_read_committed(tx))
		return SPLIT_NOT_READ_COMMITTED;
	if (!split_is_one_command(r, is_simple))
		return SPLIT_NOT_ONE_COMMAND;
	if (!split_is_plain_select(r))
		return SPLIT_NOT_SELECT;
	if (!split_is_splittable(tx, is_polar))
		return SPLIT_NOT_SPLITTABLE;
	if (!split_has_no_set_before_write(tx))
		return SPLIT_SET_IN_TRANSACTION;
	return SPLIT_ELIGIBLE;
}
