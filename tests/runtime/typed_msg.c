/* Typed messages: values up to 16 bytes travel inline with no allocation, larger ones in an
 * allocation freed after receive (or when the message is dropped or discarded); unpack checks
 * the size; accel_dispatch matches by type and size; ACCEL_MSG_DEFINE's tell and get; limits. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct point {
  int32_t x, y;
} point; /* 8 bytes: inline */
typedef struct box {
  double lo[2], hi[2];
} box; /* 32 bytes: allocated */

ACCEL_MSG_DEFINE(MSG_POINT, MSG_FIRST_LOCAL, point)
ACCEL_MSG_DEFINE(MSG_BOX, MSG_FIRST_LOCAL + 1, box)
enum { MSG_PLAIN = MSG_FIRST_LOCAL + 2, MSG_SUM };

/* Allocations made while counting (accel's own allocator hook). */
static atomic_long allocs;
static void *count_malloc(size_t n) {
  atomic_fetch_add(&allocs, 1);
  return malloc(n);
}
static void *count_realloc(void *p, size_t n) {
  atomic_fetch_add(&allocs, 1);
  return realloc(p, n);
}
static void *count_calloc(size_t c, size_t n) {
  atomic_fetch_add(&allocs, 1);
  return calloc(c, n);
}

TEST(small_values_go_inline_large_ones_allocated) {
  CHECK_OK(accel_replace_allocator(count_malloc, count_realloc, count_calloc, free));
  accel_msg m;
  atomic_store(&allocs, 0);
  CHECK_OK(accel_msg_pack(&m, MSG_POINT, &(point){3, -4}, sizeof(point)));
  CHECK_EQ(atomic_load(&allocs), 0);
  point p;
  CHECK_OK(MSG_POINT_get(&m, &p));
  CHECK(p.x == 3 && p.y == -4);
  unsigned char sixteen[16], back[16];
  for (int i = 0; i < 16; i++)
    sixteen[i] = (unsigned char)(i * 7 + 1);
  CHECK_OK(accel_msg_pack(&m, MSG_PLAIN, sixteen, 16)); /* the limit: still inline */
  CHECK_EQ(atomic_load(&allocs), 0);
  CHECK(m.drop == NULL);
  CHECK_OK(accel_msg_unpack(&m, back, 16));
  CHECK(memcmp(back, sixteen, 16) == 0);
  unsigned char seventeen[17] = {1};
  CHECK_OK(accel_msg_pack(&m, MSG_PLAIN, seventeen, 17)); /* one past: allocated */
  CHECK_EQ(atomic_load(&allocs), 1);
  CHECK(m.drop != NULL);
  accel_msg_discard(&m);
  CHECK(m.data == NULL);
  CHECK_OK(accel_replace_allocator(NULL, NULL, NULL, NULL));
}

TEST(unpack_checks_type_and_size) {
  accel_msg m;
  CHECK_OK(accel_msg_pack(&m, MSG_BOX, &(box){{1, 2}, {3, 4}}, sizeof(box)));
  point p;
  CHECK_ERR(MSG_POINT_get(&m, &p), ACCEL_EINVAL); /* 32 bytes are not a point */
  box b;
  CHECK_OK(MSG_BOX_get(&m, &b));
  CHECK(b.hi[1] == 4.0);
  size_t size = 0;
  CHECK(accel_msg_payload(&m, &size) != NULL && size == sizeof(box));
  accel_msg_discard(&m);
  accel_msg plain = {.type = MSG_PLAIN, .arg = 5};
  CHECK_ERR(accel_msg_unpack(&plain, &p, sizeof p), ACCEL_EINVAL);
  CHECK(accel_msg_payload(&plain, &size) == NULL);
  /* limits: a runtime type, a NULL value with a size, a size past the maximum and at it */
  CHECK_ERR(accel_msg_pack(&m, ACCEL_MSG_USER - 1, &p, sizeof p), ACCEL_EINVAL);
  CHECK_ERR(accel_msg_pack(&m, MSG_PLAIN, NULL, 4), ACCEL_EINVAL);
  CHECK_ERR(accel_msg_pack(&m, MSG_PLAIN, &p, (size_t)ACCEL_MSG_SIZE_MAX + 1), ACCEL_EINVAL);
  void *big = calloc(1, ACCEL_MSG_SIZE_MAX);
  CHECK(big != NULL);
  CHECK_OK(accel_msg_pack(&m, MSG_PLAIN, big, ACCEL_MSG_SIZE_MAX));
  CHECK_OK(accel_msg_unpack(&m, big, ACCEL_MSG_SIZE_MAX));
  accel_msg_discard(&m);
  free(big);
  CHECK_OK(accel_msg_pack(&m, MSG_PLAIN, NULL, 0)); /* an empty value */
  CHECK_OK(accel_msg_unpack(&m, NULL, 0));
}

/* An actor that sums what typed messages bring, through a dispatch table. */
typedef struct summer {
  double sum;
  int others;
} summer;

static int on_point(accel_actor *self, void *state, accel_msg *msg) {
  point p;
  int rc = MSG_POINT_get(msg, &p);
  ((summer *)state)->sum += p.x + p.y;
  return rc;
}

static int on_box(accel_actor *self, void *state, accel_msg *msg) {
  const box *b = accel_msg_payload(msg, NULL); /* read in place */
  ((summer *)state)->sum += b->lo[0] + b->lo[1] + b->hi[0] + b->hi[1];
  return 0;
}

static int on_sum(accel_actor *self, void *state, accel_msg *msg) {
  summer *s = state;
  double *v = malloc(2 * sizeof *v);
  if (v == NULL)
    return ACCEL_ENOMEM;
  v[0] = s->sum, v[1] = s->others;
  return accel_reply(msg, 0, v, free);
}

static int on_other(accel_actor *self, void *state, accel_msg *msg) {
  ((summer *)state)->others++;
  return 0;
}

static const accel_handler summer_handlers[] = {
    {MSG_POINT, sizeof(point), on_point},
    {MSG_BOX, sizeof(box), on_box},
    {MSG_SUM, 0, on_sum},
};

static int summer_receive(accel_actor *self, void *state, accel_msg *msg) {
  return accel_dispatch(self, state, msg, summer_handlers,
                        sizeof summer_handlers / sizeof summer_handlers[0], on_other);
}

static const accel_behavior summer_b = {
    .name = "summer", .state_size = sizeof(summer), .receive = summer_receive};

TEST(dispatch_by_type_through_the_runtime) {
  accel_runtime *rt = runtime_started();
  accel_ref s = spawn_ok(rt, NULL, &summer_b, NULL, NULL);
  double want = 0;
  for (int i = 0; i < 100; i++) {
    CHECK_OK(MSG_POINT_tell(rt, s, &(point){i, 2 * i}));
    CHECK_OK(MSG_BOX_tell(rt, s, &(box){{i, 1}, {2, 0.5}}));
    want += 3.0 * i + i + 3.5;
  }
  CHECK_OK(accel_tell(rt, s, &(accel_msg){.type = MSG_PLAIN}));
  accel_future *f;
  CHECK_OK(accel_ask(rt, s, &(accel_msg){.type = MSG_SUM}, &f));
  CHECK_OK(accel_future_wait(f, 10000));
  const double *got = accel_future_value(f);
  CHECK(got[0] == want);
  CHECK(got[1] == 1.0); /* the plain message went to `otherwise` */
  accel_future_release(f);
  /* a typed message of the wrong size for its type: the sender and receiver disagree */
  accel_msg bad;
  CHECK_OK(accel_msg_pack(&bad, MSG_POINT, &(box){{0, 0}, {0, 0}}, sizeof(box)));
  accel_runtime_stats before = stats_of(rt);
  CHECK_OK(accel_tell(rt, s, &bad));
  for (int i = 0; i < 1000 && stats_of(rt).failures == before.failures; i++)
    test_sleep_ms(1);
  CHECK_EQ(stats_of(rt).failures, before.failures + 1); /* its receive returned EPROTO */
  runtime_stop_then_destroy(rt, NULL);
}

static const test_case tests[] = {
    TEST_CASE(small_values_go_inline_large_ones_allocated),
    TEST_CASE(unpack_checks_type_and_size),
    TEST_CASE(dispatch_by_type_through_the_runtime),
};

TEST_MAIN(tests)
