/* Typed messages (accel/runtime.h): a value copied into the message, inline up to
 * ACCEL_MSG_INLINE bytes (the `arg` and `data` fields, side by side), else into an allocation
 * the message owns (its `drop` frees it, after receive or when it is dropped). */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "accel/runtime.h"
#include "runtime/alloc.h"

_Static_assert(offsetof(accel_msg, data) == offsetof(accel_msg, arg) + 8 && sizeof(void *) == 8,
               "the inline value spans arg and data");

static unsigned char *inline_bytes(accel_msg *msg) {
  return (unsigned char *)msg + offsetof(accel_msg, arg);
}

static bool is_typed(const accel_msg *msg) {
  return (msg->flags & ACCEL_MSG_TYPED) != 0;
}

static size_t size_of(const accel_msg *msg) {
  return msg->flags & ACCEL_MSG_SIZE_MAX;
}

int accel_msg_pack(accel_msg *msg, uint32_t type, const void *payload, size_t size) {
  if (msg == NULL || type < ACCEL_MSG_USER || size > ACCEL_MSG_SIZE_MAX ||
      (size > 0 && payload == NULL))
    return ACCEL_EINVAL;
  *msg = (accel_msg){.type = type, .flags = ACCEL_MSG_TYPED | (uint32_t)size};
  if (size <= ACCEL_MSG_INLINE) {
    if (size > 0)
      memcpy(inline_bytes(msg), payload, size);
    return 0;
  }
  void *copy = rt_malloc(size);
  if (copy == NULL)
    return ACCEL_ENOMEM;
  memcpy(copy, payload, size);
  msg->data = copy;
  msg->drop = rt_free;
  return 0;
}

const void *accel_msg_payload(const accel_msg *msg, size_t *size) {
  if (msg == NULL || !is_typed(msg))
    return NULL;
  if (size)
    *size = size_of(msg);
  return size_of(msg) <= ACCEL_MSG_INLINE ? (const void *)inline_bytes((accel_msg *)msg)
                                          : msg->data;
}

int accel_msg_unpack(const accel_msg *msg, void *out, size_t size) {
  size_t have = 0;
  const void *p = accel_msg_payload(msg, &have);
  if (p == NULL || have != size || (size > 0 && out == NULL))
    return ACCEL_EINVAL;
  if (size > 0)
    memcpy(out, p, size);
  return 0;
}

void accel_msg_discard(accel_msg *msg) {
  if (msg && is_typed(msg) && size_of(msg) > ACCEL_MSG_INLINE && msg->data) {
    msg->drop(msg->data);
    msg->data = NULL;
  }
}

int accel_dispatch(accel_actor *self, void *state, accel_msg *msg, const accel_handler *handlers,
                   size_t count, accel_handler_fn otherwise) {
  for (size_t i = 0; i < count; i++) {
    const accel_handler *h = &handlers[i];
    if (h->type != msg->type)
      continue;
    if (h->size != 0 && (!is_typed(msg) || size_of(msg) != h->size))
      return ACCEL_EPROTO;
    return h->fn(self, state, msg);
  }
  return otherwise ? otherwise(self, state, msg) : 0;
}
