/* api-backends: choosing, ordering and excluding backends (the `backends=` URL parameter;
 * acceld's [devices] backends and --backends go to the same place): devices are numbered in
 * the list's order, unlisted backends are not opened, and bad lists are argument errors. */
#include "api_util.h"

static int position(const char *list, const char *backend) {
  int pos = 0;
  for (const char *p = list; *p; pos++) {
    size_t len = strcspn(p, ",");
    if (strlen(backend) == len && strncmp(p, backend, len) == 0)
      return pos;
    p += len + (p[len] == ',');
  }
  return -1;
}

/* Every device's backend is in the list, in non-decreasing list order; the CPU devices are
 * there exactly when "cpu" is listed. */
static void check_order(const char *list) {
  char url[128];
  snprintf(url, sizeof url, "embedded:?cpu_devices=2&backends=%s", list);
  accel_ctx *ctx = ctx_open(url);
  int last = -1, cpus = 0;
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    int pos = position(list, info.backend);
    if (pos < 0 || pos < last)
      TEST_FAIL("backends=%s: device %d is %s (%s), out of the list's order", list, d, info.name,
                info.backend);
    last = pos;
    cpus += strcmp(info.backend, "cpu") == 0;
  }
  CHECK_EQ(cpus, position(list, "cpu") >= 0 ? 2 : 0);
  accel_close(ctx);
}

TEST(devices_are_numbered_in_the_lists_order) {
  static const char *const lists[] = {
      "cpu", "cpu,cuda,opencl", "opencl,cuda,cpu", "cuda,cpu", "opencl,cpu", "cuda", "opencl"};
  for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
    check_order(lists[i]);
}

/* Without a device, an op has nowhere to run; the context still opens and moves data. */
TEST(no_cpu_device_when_cpu_is_not_listed) {
  accel_ctx *ctx = ctx_open("embedded:?backends=cuda");
  for (accel_device d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, d, &info));
    CHECK_STR_EQ(info.backend, "cuda");
  }
  float x[4] = {1, 2, 3, 4}, y[4];
  accel_buffer b = buf_from(ctx, ACCEL_F32, x, 4);
  read_sync(ctx, b, 0, y, 4);
  CHECK(memcmp(x, y, sizeof x) == 0);
  accel_close(ctx);
}

TEST(bad_lists_are_refused) {
  static const char *const bad[] = {"embedded:?backends=nope",      "embedded:?backends=cpu,cpu",
                                    "embedded:?backends=cpu,",      "embedded:?backends=,cpu",
                                    "embedded:?backends=cpu,,cuda", "embedded:?backends=CPU"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    accel_ctx *ctx = (accel_ctx *)0x1;
    int rc = accel_open(&ctx, bad[i]);
    if (rc != ACCEL_EINVAL)
      TEST_FAIL("%s: %d, want EINVAL", bad[i], rc);
  }
}

static const test_case tests[] = {
    TEST_CASE(devices_are_numbered_in_the_lists_order),
    TEST_CASE(no_cpu_device_when_cpu_is_not_listed),
    TEST_CASE(bad_lists_are_refused),
};

TEST_MAIN(tests)
