/* Small messages used again (server_priv.h). A tiny op's frame becomes a message, the message
 * its reply, and the reply is written or copied into a batch and then released: nng's making
 * of a message (two zeroed allocations) and its release cost about 900 of the 7500
 * instructions acceld spent on a tiny op (callgrind). The loop keeps up to SRV_MSG_POOL
 * released messages of at most SRV_MSG_POOL_BYTES and makes the next frames in them. Loop
 * thread only. */
#include <string.h>

#include "server/server_priv.h"

nng_msg *srv_msg_take(srv_server *s, const void *bytes, size_t len) {
  nng_msg *m;
  if (s->msg_pool_len > 0 && len <= SRV_MSG_POOL_BYTES) {
    m = s->msg_pool[--s->msg_pool_len];
    nng_msg_clear(m);
    nng_msg_header_clear(m);
    if (nng_msg_append(m, bytes, len) == 0)
      return m;
    nng_msg_free(m);
    return NULL;
  }
  if (nng_msg_alloc(&m, len) != 0)
    return NULL;
  memcpy(nng_msg_body(m), bytes, len);
  return m;
}

/* Only a local connection's messages (no routing header) are kept: nng's may have a trimmed
 * front (split_frames), which nng_msg_capacity does not count, and only local frames are made
 * in kept messages. */
void srv_msg_give(srv_server *s, nng_msg *m) {
  if (s->msg_pool_len < SRV_MSG_POOL && nng_msg_header_len(m) == 0 &&
      nng_msg_capacity(m) <= SRV_MSG_POOL_BYTES)
    s->msg_pool[s->msg_pool_len++] = m;
  else
    nng_msg_free(m);
}

void srv_msg_pool_free(srv_server *s) {
  while (s->msg_pool_len > 0)
    nng_msg_free(s->msg_pool[--s->msg_pool_len]);
}
