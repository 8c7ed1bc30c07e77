/* api-interop: sharing buffers' memory with other code of the process (accel_buffer_export,
 * accel_buffer_import) on the CPU backend's devices, whose memory is host memory. Zero copy is
 * checked by address and by writing through one side and reading through the other; pins by
 * ops on another device (ACCEL_EBUSY) and after the release (allowed again); imports' release
 * callbacks run exactly once, at destroy or close, and never for a refused import. Through
 * acceld every call is ACCEL_ENOTSUP, saying why. Inputs are fresh random numbers (the seed is
 * printed); every comparison is exact (copies and fills of float bits, additions of values
 * exact in f32). */
#include <math.h>
#include <stdalign.h>
#include <stdatomic.h>

#include "api_util.h"

#define URL "embedded:?backends=cpu&cpu_devices=2"

static void check_detail(const char *words) {
  const char *d = accel_last_error_detail();
  if (d == NULL || strstr(d, words) == NULL)
    TEST_FAIL("detail \"%s\" does not say \"%s\"", d ? d : "(none)", words);
}

static float *random_floats(size_t n) {
  float *x = rnd_floats(n, -8.0f, 8.0f);
  for (size_t i = 0; i < n; i++)
    x[i] = roundf(x[i] * 256) / 256; /* sums of two are exact in f32 */
  return x;
}

/* x + y into dst on device dev, all n long; its status. */
static int add_on(accel_ctx *ctx, accel_device dev, accel_buffer dst, accel_buffer x,
                  accel_buffer y, size_t n) {
  accel_future *f = NULL;
  accel_strides s = {n, 1};
  int rc = accel_binary(ctx, dev, ACCEL_ADD, dst, 1, n, x, s, y, s, &f);
  return rc != 0 ? rc : fut_status(f);
}

TEST(export_shares_the_copy_both_ways_until_released) {
  accel_ctx *ctx = ctx_open(URL);
  size_t n = rnd_range(1, 5000);
  float *x = random_floats(n), *back = xmalloc(n * sizeof *back);
  accel_buffer b = buf_from(ctx, ACCEL_F32, x, n), other = buf_new(ctx, ACCEL_F32, n);
  accel_device d0 = cpu_dev(ctx, 0), d1 = cpu_dev(ctx, 1);
  accel_export_info info;
  memset(&info, 0xA5, sizeof info);
  if (test_daemon_mode()) {
    CHECK_ERR(accel_buffer_export(ctx, b, d0, &info), ACCEL_ENOTSUP);
    check_detail("acceld");
    CHECK_ERR(accel_buffer_export_release(ctx, b), ACCEL_ENOTSUP);
    check_detail("acceld");
    accel_close(ctx);
    free(x);
    free(back);
    return;
  }
  CHECK_OK(accel_buffer_export(ctx, b, d0, &info));
  CHECK(info.address != 0 && info.bytes == n * sizeof(float));
  CHECK(info.device_type == 1 && info.device_id == 0);
  float *p = (float *)(uintptr_t)info.address;
  CHECK(memcmp(p, x, n * sizeof *x) == 0); /* accel's latest data, at that address */
  /* The same address again: the copy does not move while exported (a second export nests). */
  accel_export_info again;
  CHECK_OK(accel_buffer_export(ctx, b, d0, &again));
  CHECK(again.address == info.address);
  CHECK_OK(accel_buffer_export_release(ctx, b));
  for (size_t i = 0; i < n; i++) /* written by the importer: accel's ops see it */
    p[i] = -x[i] * 2;
  read_sync(ctx, b, 0, back, n);
  for (size_t i = 0; i < n; i++)
    CHECK(back[i] == -x[i] * 2);
  CHECK_OK(add_on(ctx, ACCEL_DEVICE_ANY, b, b, b, n)); /* runs where the copy is pinned */
  for (size_t i = 0; i < n; i++) /* accel's writes: the importer sees them in place */
    CHECK(p[i] == -x[i] * 4);
  CHECK_ERR(add_on(ctx, d1, other, b, b, n), ACCEL_EBUSY); /* another device: refused */
  CHECK_ERR(accel_buffer_export(ctx, b, d1, &again), ACCEL_EBUSY);
  CHECK_OK(accel_buffer_export_release(ctx, b));
  CHECK_ERR(accel_buffer_export_release(ctx, b), ACCEL_EINVAL); /* one past the exports */
  check_detail("not exported");
  CHECK_OK(add_on(ctx, d1, other, b, b, n)); /* free to move again */
  read_sync(ctx, other, 0, back, n);
  for (size_t i = 0; i < n; i++)
    CHECK(back[i] == -x[i] * 8);
  CHECK_OK(accel_buffer_export(ctx, other, d0, &info)); /* brought back to d0 for the export */
  CHECK(memcmp((float *)(uintptr_t)info.address, back, n * sizeof *back) == 0);
  CHECK_ERR(accel_finish(ctx, -1), ACCEL_EBUSY); /* the refused ops' error, as any op's */
  accel_close(ctx); /* destroys `other` while exported: its export ends with it */
  free(x);
  free(back);
}

TEST(export_of_a_never_written_buffer_is_zeros_and_bad_calls_are_refused) {
  accel_ctx *ctx = ctx_open(URL);
  size_t n = rnd_range(1, 3000);
  accel_buffer b = buf_new(ctx, ACCEL_I32, n);
  accel_export_info info;
  int count = accel_device_count(ctx);
  if (test_daemon_mode()) {
    CHECK_ERR(accel_buffer_export(ctx, b, 0, &info), ACCEL_ENOTSUP);
    accel_close(ctx);
    return;
  }
  CHECK_ERR(accel_buffer_export(ctx, b, count, &info), ACCEL_EINVAL); /* one past the devices */
  CHECK_ERR(accel_buffer_export(ctx, b, ACCEL_DEVICE_ANY, &info), ACCEL_EINVAL);
  CHECK_ERR(accel_buffer_export(ctx, b, 0, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_buffer_export(ctx, b + 1, 0, &info), ACCEL_ESTALE);
  CHECK_OK(accel_buffer_export(ctx, b, count - 1, &info)); /* the last device */
  const int32_t *p = (const int32_t *)(uintptr_t)info.address;
  for (size_t i = 0; i < n; i++)
    CHECK(p[i] == 0);
  CHECK_OK(accel_buffer_export_release(ctx, b));
  accel_close(ctx);
}

typedef struct released {
  atomic_int calls;
  void *arg_seen;
} released;

static void on_release(void *arg) {
  released *r = arg;
  r->arg_seen = arg;
  atomic_fetch_add(&r->calls, 1);
}

TEST(import_wraps_foreign_memory_without_a_copy) {
  accel_ctx *ctx = ctx_open(URL);
  size_t n = rnd_range(2, 5000);
  float *mine = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  float *x = random_floats(n), *back = xmalloc(n * sizeof *back);
  memcpy(mine, x, n * sizeof *x);
  released r = {0};
  accel_buffer b = 0;
  accel_device d0 = cpu_dev(ctx, 0), d1 = cpu_dev(ctx, 1);
  if (test_daemon_mode()) {
    CHECK_ERR(accel_buffer_import(ctx, d0, (uintptr_t)mine, n * sizeof(float), ACCEL_F32,
                                  on_release, &r, &b),
              ACCEL_ENOTSUP);
    check_detail("acceld");
  } else {
    CHECK_OK(accel_buffer_import(ctx, d0, (uintptr_t)mine, n * sizeof(float), ACCEL_F32, on_release,
                                 &r, &b));
    read_sync(ctx, b, 0, back, n); /* accel reads what the owner wrote */
    CHECK(memcmp(back, x, n * sizeof *x) == 0);
    accel_export_info info;
    CHECK_OK(accel_buffer_export(ctx, b, d0, &info)); /* its address is the owner's */
    CHECK(info.address == (uintptr_t)mine && info.bytes == n * sizeof(float));
    CHECK_OK(accel_buffer_export_release(ctx, b));
    CHECK_OK(add_on(ctx, ACCEL_DEVICE_ANY, b, b, b, n)); /* accel writes: the owner sees it */
    for (size_t i = 0; i < n; i++)
      CHECK(mine[i] == x[i] * 2);
    mine[n - 1] = 0.5f; /* the owner writes: accel sees it */
    read_sync(ctx, b, n - 1, back, 1);
    CHECK(back[0] == 0.5f);
    accel_buffer other = buf_new(ctx, ACCEL_F32, n);
    CHECK_ERR(add_on(ctx, d1, other, b, b, n), ACCEL_EBUSY); /* pinned for its life */
    CHECK(atomic_load(&r.calls) == 0);
    CHECK_OK(accel_buffer_destroy(ctx, b));
    CHECK_ERR(accel_finish(ctx, -1), ACCEL_EBUSY);
    /* freed once the loop has seen the ops on it end (maybe after their futures) */
    TEST_WAIT_FOR(atomic_load(&r.calls) > 0, 1);
    CHECK(r.arg_seen == &r);
  }
  accel_close(ctx);
  CHECK(atomic_load(&r.calls) == (test_daemon_mode() ? 0 : 1)); /* once, with its argument */
  free(mine);
  free(x);
  free(back);
}

TEST(refused_imports_never_release_and_close_releases_the_rest) {
  accel_ctx *ctx = ctx_open(URL);
  if (test_daemon_mode()) {
    accel_close(ctx);
    return;
  }
  alignas(8) static double mem[64];
  released r = {0}, kept = {0};
  accel_buffer b = 0;
  uintptr_t a = (uintptr_t)mem;
  int count = accel_device_count(ctx);
  CHECK_ERR(accel_buffer_import(ctx, 0, a, 0, ACCEL_F64, on_release, &r, &b), ACCEL_EINVAL);
  CHECK_ERR(accel_buffer_import(ctx, 0, a, 8 * 64 + 1, ACCEL_F64, on_release, &r, &b),
            ACCEL_EINVAL); /* one byte past a whole element */
  check_detail("whole number");
  CHECK_ERR(accel_buffer_import(ctx, 0, a + 4, 8 * 8, ACCEL_F64, on_release, &r, &b),
            ACCEL_EINVAL); /* not aligned to an element */
  CHECK_ERR(accel_buffer_import(ctx, 0, 0, 8, ACCEL_F64, on_release, &r, &b), ACCEL_EINVAL);
  CHECK_ERR(accel_buffer_import(ctx, count, a, 8, ACCEL_F64, on_release, &r, &b), ACCEL_EINVAL);
  CHECK_ERR(accel_buffer_import(ctx, 0, a, 8, (accel_dtype)(ACCEL_DTYPE_MAX_ + 1), on_release, &r,
                                &b),
            ACCEL_EINVAL);
  CHECK_ERR(accel_buffer_import(ctx, 0, a, 8, ACCEL_F64, on_release, &r, NULL), ACCEL_EINVAL);
  CHECK_OK(accel_finish(ctx, -1));
  CHECK(atomic_load(&r.calls) == 0);
  for (size_t i = 0; i < 64; i++)
    mem[i] = (double)rnd_float(-1, 1);
  CHECK_OK(accel_buffer_import(ctx, count - 1, a, 8 * 64, ACCEL_F64, on_release, &kept, &b));
  double back[64];
  read_sync(ctx, b, 0, back, 64);
  CHECK(memcmp(back, mem, sizeof back) == 0);
  accel_buffer c = 0; /* a NULL release is allowed */
  CHECK_OK(accel_buffer_import(ctx, count - 1, a, 8, ACCEL_F64, NULL, NULL, &c));
  accel_close(ctx); /* b and c never destroyed: close frees them */
  CHECK(atomic_load(&kept.calls) == 1);
}

static const test_case tests[] = {
    TEST_CASE(export_shares_the_copy_both_ways_until_released),
    TEST_CASE(export_of_a_never_written_buffer_is_zeros_and_bad_calls_are_refused),
    TEST_CASE(import_wraps_foreign_memory_without_a_copy),
    TEST_CASE(refused_imports_never_release_and_close_releases_the_rest),
};

TEST_MAIN(tests)
