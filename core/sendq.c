/* The send queue of sendq.h: slices in a circular array, their buffer references and heap blocks released as
 * sends complete, one send in flight. See sendq.h. */
#include "sendq.h"

#include <errno.h>
#include <string.h>

/* Starting capacity; a queue grows by doubling, bounded in practice by the worker's buffer count. */
#define SENDQ_SLICES_INITIAL 16u

void sendq_init(struct sendq *q, ring_op_handler on_sent)
{
	memset(q, 0, sizeof(*q));
	q->op.handler = on_sent;
	q->fd = -1;
	base_list_init(&q->flush_link);
}

static void sendq_release(struct sendq *q, struct ring *ring, struct sendq_slice *slice)
{
	if (slice->buffer_id >= 0) {
		ring_buffer_unref(ring, (uint16_t)slice->buffer_id);
		q->buffers--;
	} else {
		free((void *)slice->data);
	}
}

void sendq_clear(struct sendq *q, struct ring *ring)
{
	TERN_ASSERT(!q->op.is_armed);
	while (q->count > 0) {
		sendq_release(q, ring, &q->slices[q->head]);
		q->head = (q->head + 1) & (q->cap - 1);
		q->count--;
	}
	q->head = 0;
	q->head_sent = 0;
	q->bytes = 0;
	if (base_list_is_linked(&q->flush_link))
		base_list_remove(&q->flush_link);
	q->is_dirty = false;
}

void sendq_deinit(struct sendq *q, struct ring *ring)
{
	sendq_clear(q, ring);
	free(q->slices);
	q->slices = NULL;
	q->cap = 0;
}

static int sendq_reserve(struct sendq *q)
{
	if (q->count < q->cap)
		return 0;
	if (q->count >= SENDQ_SLICES_MAX)
		return -ENOBUFS;
	uint32_t cap = q->cap ? q->cap * 2 : SENDQ_SLICES_INITIAL;
	struct sendq_slice *grown = malloc(cap * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	for (uint32_t i = 0; i < q->count; i++)
		grown[i] = q->slices[(q->head + i) & (q->cap - 1)];
	free(q->slices);
	q->slices = grown;
	q->cap = cap;
	q->head = 0;
	return 0;
}

static void sendq_append(struct sendq *q, const uint8_t *data, uint32_t len, int32_t buffer_id)
{
	q->slices[(q->head + q->count) & (q->cap - 1)] =
		(struct sendq_slice){.data = data, .len = len, .buffer_id = buffer_id};
	q->count++;
	q->bytes += len;
}

int sendq_push_buffer(struct sendq *q, struct ring *ring, uint16_t buffer_id, const uint8_t *data, uint32_t len)
{
	TERN_DEBUG_ASSERT(len > 0);
	if (buffer_id == RING_NO_BUFFER)
		return sendq_push_copy(q, data, len);
	/* Bytes that continue the previous slice of the same buffer extend it: one iovec, no new ref. */
	if (q->count > 0) {
		struct sendq_slice *last = &q->slices[(q->head + q->count - 1) & (q->cap - 1)];
		/* Safe while a send is in flight: that send named its ranges when it was armed (q->iov, which
		 * nothing touches until it completes, or one range), and sendq_sent accounts by bytes, so the
		 * extension simply goes out with the next send. */
		if (last->buffer_id == buffer_id && last->data + last->len == data) {
			last->len += len;
			q->bytes += len;
			return 0;
		}
	}
	int rc = sendq_reserve(q);
	if (rc < 0)
		return rc;
	ring_buffer_ref(ring, buffer_id);
	sendq_append(q, data, len, buffer_id);
	q->buffers++;
	return 0;
}

/* Room for one more slice and an owned copy of the bytes; NULL with *rc set when either fails. */
static void *sendq_copy_for_slice(struct sendq *q, const void *data, uint32_t len, int *rc)
{
	*rc = sendq_reserve(q);
	if (*rc < 0)
		return NULL;
	void *copy = malloc(len);
	if (!copy) {
		*rc = -ENOMEM;
		return NULL;
	}
	memcpy(copy, data, len);
	return copy;
}

int sendq_push_copy(struct sendq *q, const void *data, uint32_t len)
{
	if (len == 0)
		return 0; /* an empty slice would sit at the head forever: sendq_sent only moves on bytes */
	int rc;
	void *copy = sendq_copy_for_slice(q, data, len, &rc);
	if (copy)
		sendq_append(q, copy, len, -1);
	return rc;
}

int sendq_push_owned(struct sendq *q, void *data, uint32_t len)
{
	int rc = len > 0 ? sendq_reserve(q) : 0;
	if (len == 0 || rc < 0) {
		free(data);
		return rc;
	}
	sendq_append(q, data, len, -1);
	return 0;
}

int sendq_push_front_copy(struct sendq *q, const void *data, uint32_t len)
{
	TERN_ASSERT(!q->op.is_armed && q->head_sent == 0);
	if (len == 0)
		return 0;
	int rc;
	void *copy = sendq_copy_for_slice(q, data, len, &rc);
	if (!copy)
		return rc;
	q->head = (q->head + q->cap - 1) & (q->cap - 1);
	q->slices[q->head] = (struct sendq_slice){.data = copy, .len = len, .buffer_id = -1};
	q->count++;
	q->bytes += len;
	return 0;
}

int sendq_own_copies(struct sendq *q, struct ring *ring)
{
	/* Slices named by an armed send belong to the kernel until it completes: leave those. */
	uint32_t first = q->op.is_armed ? q->iov_count : 0;
	for (uint32_t i = first; i < q->count; i++) {
		struct sendq_slice *slice = &q->slices[(q->head + i) & (q->cap - 1)];
		if (slice->buffer_id < 0)
			continue;
		uint8_t *copy = malloc(slice->len);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, slice->data, slice->len);
		ring_buffer_unref(ring, (uint16_t)slice->buffer_id);
		q->buffers--;
		slice->data = copy;
		slice->buffer_id = -1;
	}
	return 0;
}

void sendq_flush(struct sendq *q, struct ring *ring)
{
	if (q->filter) {
		q->filter(q, ring);
		return;
	}
	if (q->op.is_armed || q->count == 0 || q->fd < 0)
		return;
	uint32_t n = 0;
	uint64_t budget = SENDQ_SEND_BYTES_MAX;
	for (uint32_t i = 0; i < q->count && n < SENDQ_IOV_MAX && budget > 0; i++) {
		struct sendq_slice *slice = &q->slices[(q->head + i) & (q->cap - 1)];
		uint32_t skip = (i == 0) ? q->head_sent : 0;
		uint32_t len = (uint32_t)TERN_MIN((uint64_t)(slice->len - skip), budget);
		q->iov[n].iov_base = (void *)(slice->data + skip);
		q->iov[n].iov_len = len;
		budget -= len;
		n++;
	}
	q->iov_count = n;
	if (n == 1) {
		ring_send(ring, &q->op, q->fd, q->iov[0].iov_base, q->iov[0].iov_len);
		return;
	}
	memset(&q->msg, 0, sizeof(q->msg));
	q->msg.msg_iov = q->iov;
	q->msg.msg_iovlen = n;
	ring_sendmsg(ring, &q->op, q->fd, &q->msg);
}

uint32_t sendq_peek_copy(const struct sendq *q, uint8_t *out, uint32_t cap)
{
	uint32_t copied = 0;
	for (uint32_t i = 0; i < q->count && copied < cap; i++) {
		const struct sendq_slice *slice = &q->slices[(q->head + i) & (q->cap - 1)];
		uint32_t skip = (i == 0) ? q->head_sent : 0;
		uint32_t len = TERN_MIN(slice->len - skip, cap - copied);
		memcpy(out + copied, slice->data + skip, len);
		copied += len;
	}
	return copied;
}

void sendq_sent(struct sendq *q, struct ring *ring, uint32_t sent)
{
	TERN_ASSERT(sent <= q->bytes);
	q->bytes -= sent;
	q->sent_bytes_total += sent;
	while (sent > 0) {
		TERN_ASSERT(q->count > 0);
		struct sendq_slice *slice = &q->slices[q->head];
		uint32_t left = slice->len - q->head_sent;
		if (sent < left) {
			q->head_sent += sent;
			return;
		}
		sent -= left;
		sendq_release(q, ring, slice);
		q->head = (q->head + 1) & (q->cap - 1);
		q->count--;
		q->head_sent = 0;
	}
}
