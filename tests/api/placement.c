/* api-placement: where an op on ACCEL_DEVICE_ANY runs when nothing tells the devices apart.
 * Three CPU devices (`cpu_devices=3`, each its own memory node), all idle: an op with no
 * input (a fill, a random fill of a new buffer) and an op whose input is on the host (as far
 * from each device as from the others) cost the same everywhere, and run on the lowest
 * index, every time (session.c default_device: "among equals ... the lower index").
 *
 * Where an op ran is seen in the transfer counters (accel_transfer_stats_get): an op on
 * device d that reads the result moves nothing if and only if the result is on d. */
#include <math.h>

#include "api_util.h"

enum { DEVICES = 3 };

static accel_ctx *open_equals(void) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=3&backends=cpu");
  CHECK_EQ(accel_device_count(ctx), DEVICES);
  CHECK_EQ(cpu_device_count(ctx), DEVICES);
  return ctx;
}

/* The device Z is valid on, of those that could have made it (the first found; -1: none). */
static accel_device where(accel_ctx *ctx, accel_buffer Z, accel_buffer scratch) {
  for (accel_device d = 0; d < DEVICES; d++)
    if (valid_on(ctx, d, Z, scratch))
      return d;
  return -1;
}

enum op_kind { FILL, RNG, TANH_OF_HOST_DATA };

/* The device where one op on ANY ran, the first op of a fresh context: every device idle.
 * (Not a second op of the same context: the previous op's task may still count as queued on
 * its device while its waiting client already has the result, and a queued task makes a
 * device cost more, session.c PLACE_TASK_BYTES.) The result is checked too. */
static accel_device placed(enum op_kind kind) {
  accel_ctx *ctx = open_equals();
  size_t n = rnd_range(1000, 100000);
  float *x = rnd_floats(n, -3, 3), *back = xmalloc(n * sizeof *back);
  accel_buffer Z = buf_new(ctx, ACCEL_F32, n), S = buf_new(ctx, ACCEL_F32, n);
  accel_buffer X = kind == TANH_OF_HOST_DATA ? buf_from(ctx, ACCEL_F32, x, n) : 0;
  accel_rng spec = {.dist = ACCEL_DIST_UNIFORM, .seed = rnd64()};
  accel_future *f = NULL;
  if (kind == FILL)
    CHECK_OK(accel_fill_f32(ctx, ACCEL_DEVICE_ANY, Z, x[0], &f));
  else if (kind == RNG)
    CHECK_OK(accel_rng_fill(ctx, ACCEL_DEVICE_ANY, Z, &spec, &f));
  else
    CHECK_OK(accel_tanh(ctx, ACCEL_DEVICE_ANY, Z, X, &f));
  WAIT_OK(f);
  accel_device d = where(ctx, Z, S);
  read_sync(ctx, Z, 0, back, n);
  for (size_t i = 0; i < n; i += n / 7) { /* the op ran, wherever it ran */
    float want = kind == FILL ? x[0] : kind == RNG ? back[i] : tanhf(x[i]);
    CHECK(fabsf(back[i] - want) <= 1e-5f && back[i] != 0);
  }
  accel_close(ctx);
  free(x);
  free(back);
  return d;
}

/* A fill and a random fill of a new buffer: no input at all. */
TEST(any_runs_an_op_without_inputs_on_the_lowest_of_equal_devices) {
  CHECK_EQ(placed(FILL), 0);
  CHECK_EQ(placed(RNG), 0);
}

/* An input written from the host lands there (valid on no device yet): bringing it costs the
 * same on every device. */
TEST(any_runs_an_op_with_host_inputs_on_the_lowest_of_equal_devices) {
  CHECK_EQ(placed(TANH_OF_HOST_DATA), 0);
}

static const test_case tests[] = {
    TEST_CASE(any_runs_an_op_without_inputs_on_the_lowest_of_equal_devices),
    TEST_CASE(any_runs_an_op_with_host_inputs_on_the_lowest_of_equal_devices),
};

TEST_MAIN(tests)
