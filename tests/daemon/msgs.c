/* acceld's pool of released small messages (server/server_msgs.c) on its own: a released
 * local message makes the next frame (its bytes, no header left), messages with a routing
 * header (nng's, possibly trimmed) and messages past SRV_MSG_POOL_BYTES of room are freed,
 * not kept, and at most SRV_MSG_POOL are kept. Leaks show under ASan and valgrind. */
#include <stdlib.h>
#include <string.h>

#include "server/server_priv.h"
#include "test.h"

static srv_server *server_new(void) {
  srv_server *s = calloc(1, sizeof *s); /* only the pool's fields are used */
  CHECK(s != NULL);
  return s;
}

static void server_free(srv_server *s) {
  srv_msg_pool_free(s);
  CHECK_EQ(s->msg_pool_len, 0);
  free(s);
}

TEST(a_released_local_message_makes_the_next_frame) {
  srv_server *s = server_new();
  uint8_t a[40], b[100];
  memset(a, 1, sizeof a);
  for (size_t i = 0; i < sizeof b; i++)
    b[i] = (uint8_t)i;
  nng_msg *m = srv_msg_take(s, a, sizeof a);
  CHECK(m != NULL);
  CHECK_OK(nng_msg_header_append_u32(m, 7)); /* as if made into something, then released */
  nng_msg_header_clear(m);
  srv_msg_give(s, m);
  CHECK_EQ(s->msg_pool_len, 1);
  nng_msg *n = srv_msg_take(s, b, sizeof b);
  CHECK(n == m); /* the kept one */
  CHECK_EQ(s->msg_pool_len, 0);
  CHECK_EQ(nng_msg_len(n), sizeof b);
  CHECK_EQ(nng_msg_header_len(n), 0);
  CHECK(memcmp(nng_msg_body(n), b, sizeof b) == 0);
  srv_msg_give(s, n);
  uint8_t big[SRV_MSG_POOL_BYTES + 1] = {0};
  nng_msg *l = srv_msg_take(s, big, sizeof big); /* past the limit: a new one */
  CHECK(l != NULL && l != n);
  CHECK_EQ(s->msg_pool_len, 1);
  nng_msg_free(l);
  server_free(s);
}

TEST(messages_with_a_routing_header_are_freed) {
  srv_server *s = server_new();
  nng_msg *m;
  CHECK_OK(nng_msg_alloc(&m, 16));
  CHECK_OK(nng_msg_header_append_u32(m, 0x80000001u));
  srv_msg_give(s, m); /* nng's: its front may be trimmed (room unknown) */
  CHECK_EQ(s->msg_pool_len, 0);
  server_free(s);
}

TEST(room_at_the_limit_is_kept_and_one_past_is_not) {
  srv_server *s = server_new();
  nng_msg *at, *past;
  CHECK_OK(nng_msg_alloc(&at, 0));
  CHECK_OK(nng_msg_reserve(at, SRV_MSG_POOL_BYTES));
  CHECK_OK(nng_msg_alloc(&past, 0));
  CHECK_OK(nng_msg_reserve(past, SRV_MSG_POOL_BYTES + 1));
  CHECK_EQ(nng_msg_capacity(at), SRV_MSG_POOL_BYTES);
  CHECK(nng_msg_capacity(past) > SRV_MSG_POOL_BYTES);
  srv_msg_give(s, past);
  CHECK_EQ(s->msg_pool_len, 0);
  srv_msg_give(s, at);
  CHECK_EQ(s->msg_pool_len, 1);
  server_free(s);
}

TEST(at_most_the_pool_size_is_kept) {
  srv_server *s = server_new();
  uint8_t b[8] = {0};
  nng_msg *m[SRV_MSG_POOL + 1];
  for (int i = 0; i <= SRV_MSG_POOL; i++)
    CHECK((m[i] = srv_msg_take(s, b, sizeof b)) != NULL);
  for (int i = 0; i <= SRV_MSG_POOL; i++)
    srv_msg_give(s, m[i]);
  CHECK_EQ(s->msg_pool_len, SRV_MSG_POOL); /* the one past it was freed */
  server_free(s);
}

static const test_case tests[] = {
    TEST_CASE(a_released_local_message_makes_the_next_frame),
    TEST_CASE(messages_with_a_routing_header_are_freed),
    TEST_CASE(room_at_the_limit_is_kept_and_one_past_is_not),
    TEST_CASE(at_most_the_pool_size_is_kept),
};

TEST_MAIN(tests)
