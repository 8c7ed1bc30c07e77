/* acceld's count of light clients (server/server_conn.c srv_conn_ops_add): a connection is
 * light while it waits for the reply to its only op in flight and has had no more since it
 * last had none. Beside a light one, connections with several ops in flight make one frame a
 * turn (server_local.c); a pipelining client draining its last op must not count, or every
 * pipelining client would slow the others at each of its pauses. (A closed connection never
 * counts: srv_conn_end takes it out.) */
#include <stdlib.h>

#include "server/server_priv.h"
#include "test.h"

static void add(srv_server *s, srv_conn *c, int delta, int times) {
  for (int i = 0; i < times; i++)
    srv_conn_ops_add(s, c, delta, false);
}

static void job(srv_server *s, srv_conn *c, int delta) {
  srv_conn_ops_add(s, c, delta, true);
}

TEST(one_op_in_flight_is_light_until_it_ends) {
  srv_server s = {0};
  srv_conn a = {0}, b = {0};
  add(&s, &a, +1, 1);
  CHECK_EQ(s.light_conns, 1);
  add(&s, &b, +1, 1);
  CHECK_EQ(s.light_conns, 2);
  add(&s, &a, -1, 1);
  CHECK_EQ(a.ops, 0);
  CHECK_EQ(s.light_conns, 1);
  add(&s, &a, +1, 1); /* waiting again */
  CHECK_EQ(s.light_conns, 2);
  add(&s, &a, -1, 1);
  add(&s, &b, -1, 1);
  CHECK_EQ(s.light_conns, 0);
}

TEST(a_second_op_ends_lightness_until_none_is_left) {
  srv_server s = {0};
  srv_conn a = {0};
  add(&s, &a, +1, 1);
  add(&s, &a, +1, 1);
  CHECK_EQ(s.light_conns, 0);
  add(&s, &a, -1, 1); /* one left, after two: draining, not waiting alone */
  CHECK_EQ(a.ops, 1);
  CHECK_EQ(s.light_conns, 0);
  add(&s, &a, -1, 1);
  CHECK_EQ(s.light_conns, 0);
  add(&s, &a, +1, 1); /* a fresh start */
  CHECK_EQ(s.light_conns, 1);
  add(&s, &a, -1, 1);
}

TEST(a_pipelining_client_never_counts) {
  srv_server s = {0};
  srv_conn a = {0}, b = {0};
  add(&s, &b, +1, 1); /* one light client beside it */
  for (int round = 0; round < 3; round++) {
    add(&s, &a, +1, 1); /* the first op of a window: light for that moment */
    CHECK_EQ(s.light_conns, 2);
    add(&s, &a, +1, 31);
    CHECK_EQ(s.light_conns, 1);
    add(&s, &a, -1, 16);
    add(&s, &a, +1, 16);
    add(&s, &a, -1, 31);
    CHECK_EQ(a.ops, 1);
    CHECK_EQ(s.light_conns, 1); /* only b */
    add(&s, &a, -1, 1);
  }
  CHECK_EQ(a.ops_peak, 0);
  add(&s, &b, -1, 1);
  CHECK_EQ(s.light_conns, 0);
}

/* Background jobs (a shared-memory registration, a fault injection) keep a connection's
 * record and count among its ops, but no reply of an op waits for them. */
TEST(background_jobs_neither_make_nor_break_lightness) {
  srv_server s = {0};
  srv_conn a = {0};
  job(&s, &a, +1);
  CHECK_EQ(s.light_conns, 0); /* a registration alone: nothing to wait for */
  add(&s, &a, +1, 1);
  CHECK_EQ(a.ops, 2);
  CHECK_EQ(s.light_conns, 1); /* its one op, beside the job */
  job(&s, &a, -1);
  CHECK_EQ(s.light_conns, 1);
  add(&s, &a, -1, 1);
  CHECK_EQ(s.light_conns, 0);
  CHECK_EQ(a.ops, 0);
  CHECK_EQ(a.jobs, 0);
}

static const test_case tests[] = {
    TEST_CASE(one_op_in_flight_is_light_until_it_ends),
    TEST_CASE(a_second_op_ends_lightness_until_none_is_left),
    TEST_CASE(a_pipelining_client_never_counts),
    TEST_CASE(background_jobs_neither_make_nor_break_lightness),
};

TEST_MAIN(tests)
