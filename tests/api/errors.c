/* api-errors: argument errors are reported by the call itself, for every entry point, and
 * leave no trace: no future is made (the out pointer stays untouched), nothing goes in flight
 * and nothing is recorded for accel_finish, the buffers are unchanged. Stale handles (destroyed,
 * never made, 0, another context's) give ACCEL_ESTALE. accel_open refuses bad URLs (EINVAL),
 * unknown schemes (ENOTSUP) and daemons that do not answer (ECLOSED), saying why in
 * accel_last_error_detail. Destroying buffers and closing a context while ops are in flight
 * is safe. An op that runs out of memory fails alone (ENOMEM in its future). A destroyed handle
 * stays stale however often its slot is reused.
 *
 * Every call that must fail is made twice, with a future pointer (which must stay untouched)
 * and with NULL (fire-and-forget: the error must still come from the call). */
#include <errno.h>
#include <math.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api_util.h"

/* The ASan allocator aborts on absurd sizes unless told to return NULL, as malloc does; the
 * out-of-memory test needs malloc's behaviour. Settings in ASAN_OPTIONS still win. */
const char *__asan_default_options(void);
__attribute__((used)) const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}

/* Fails with `code` from the call, with and without a future, leaving the future pointer. */
#define CHECK_CALL_ERR(code, call_with_f)                                                          \
  do {                                                                                             \
    accel_future *f = FUT_SENTINEL, **fp = &f;                                                     \
    CHECK_ERR(call_with_f, code);                                                                  \
    CHECK_PTR_EQ(f, FUT_SENTINEL);                                                                 \
    fp = NULL;                                                                                     \
    CHECK_ERR(call_with_f, code);                                                                  \
    (void)fp;                                                                                      \
  } while (0)

/* A context with a few buffers of known content. */
typedef struct fixture {
  accel_ctx *ctx;
  accel_buffer f16, u16, f1, dead;
} fixture;

static fixture setup(const char *url) {
  fixture x = {.ctx = ctx_open(url)};
  float v[16];
  uint32_t u[16];
  for (int i = 0; i < 16; i++) {
    v[i] = (float)i + 0.5f;
    u[i] = 0x100u + (uint32_t)i;
  }
  x.f16 = buf_from(x.ctx, ACCEL_F32, v, 16);
  x.u16 = buf_from(x.ctx, ACCEL_U32, u, 16);
  x.f1 = buf_from(x.ctx, ACCEL_F32, v, 1);
  x.dead = buf_new(x.ctx, ACCEL_F32, 16);
  CHECK_OK(accel_buffer_destroy(x.ctx, x.dead));
  return x;
}

/* Nothing went in flight, nothing was recorded, the buffers are as set up. */
static void teardown(fixture *x) {
  CHECK_OK(accel_finish(x->ctx, -1));
  float v[16];
  uint32_t u[16];
  read_sync(x->ctx, x->f16, 0, v, 16);
  read_sync(x->ctx, x->u16, 0, u, 16);
  for (int i = 0; i < 16; i++) {
    CHECK(v[i] == (float)i + 0.5f);
    CHECK_EQ(u[i], 0x100u + (uint32_t)i);
  }
  CHECK_OK(accel_finish(x->ctx, -1));
  accel_close(x->ctx);
}

/* ---- contexts ------------------------------------------------------------------------ */

TEST(open_urls) {
  static const char *const bad[] = {"",
                                    "bogus",
                                    "embedded",
                                    "embedded:x",
                                    "embedded:?nope=1",
                                    "embedded:?fault_injection",
                                    "embedded:?cpu_devices=two",
                                    "embedded:?completion=never",
                                    "embedded:?pinned_max=lots",
                                    "embedded:?pinned_max=18446744073709551615",
                                    "embedded:?=1",
                                    "Embedded:"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    accel_ctx *ctx = (accel_ctx *)(uintptr_t)0x5e11;
    int rc = accel_open(&ctx, bad[i]);
    if (rc != ACCEL_EINVAL)
      TEST_FAIL("accel_open(\"%s\") returned %s, want EINVAL", bad[i], accel_err_name(rc));
    CHECK_PTR_EQ(ctx, (accel_ctx *)(uintptr_t)0x5e11);
  }
  /* Remote URLs (accel.h): ipc:// and tcp:// reach acceld, ACCEL_ECLOSED when no daemon
   * answers there (nothing listens at these); any other scheme is ACCEL_ENOTSUP. */
  static const struct {
    const char *url;
    int rc;
  } remote[] = {{"ipc://x", ACCEL_ECLOSED},
                {"ipc:///nonexistent-accel-api-test/acceld.sock", ACCEL_ECLOSED},
                {"tcp://127.0.0.1:1", ACCEL_ECLOSED},
                {"udp://127.0.0.1:5555", ACCEL_ENOTSUP},
                {"http://example.org/", ACCEL_ENOTSUP},
                {"inproc://accel", ACCEL_ENOTSUP}};
  for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++) {
    accel_ctx *ctx = (accel_ctx *)(uintptr_t)0x5e11;
    int rc = accel_open(&ctx, remote[i].url);
    if (rc != remote[i].rc)
      TEST_FAIL("accel_open(\"%s\") returned %s, want %s", remote[i].url, accel_err_name(rc),
                accel_err_name(remote[i].rc));
    CHECK_PTR_EQ(ctx, (accel_ctx *)(uintptr_t)0x5e11);
  }
  CHECK_ERR(accel_open(NULL, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_open(NULL, "embedded:"), ACCEL_EINVAL);
  /* pinned_max: 0 (no pin cache) up to the largest value less one. */
  static const char *const good[] = {NULL, "embedded:", "embedded:?cpu_devices=2&completion=poll",
                                     "embedded:?pinned_max=0",
                                     "embedded:?pinned_max=18446744073709551614"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    accel_ctx *ctx = ctx_open(good[i]);
    CHECK_EQ(cpu_device_count(ctx), i == 2 ? 2 : 1);
    accel_close(ctx);
  }
  accel_close(NULL); /* harmless */
}

/* accel_last_error_detail: why accel_open could not reach acceld, in words (the address, the
 * system call, its errno), where the code alone (ECLOSED) cannot tell a missing socket from a
 * dead one; "" after an open that had nothing to add; per thread. */
static void check_open_detail(const char *url, int code, const char *detail) {
  accel_ctx *ctx = NULL;
  CHECK_ERR(accel_open(&ctx, url), code);
  if (strcmp(accel_last_error_detail(), detail) != 0)
    TEST_FAIL("accel_open(\"%s\"): detail \"%s\", want \"%s\"", url, accel_last_error_detail(),
              detail);
}

static void *open_on_another_thread(void *url) {
  accel_ctx *ctx = NULL;
  CHECK_ERR(accel_open(&ctx, url), ACCEL_ECLOSED);
  CHECK(strstr(accel_last_error_detail(), "no acceld at ") == accel_last_error_detail());
  return NULL;
}

TEST(open_failures_say_why) {
  char want[512], dir[] = "/tmp/accel-api-detail-XXXXXX", url[128];
  const char *missing = "ipc:///nonexistent-accel-api-test/acceld.sock";
  snprintf(want, sizeof want, "no acceld at %s (connect: %s)", missing, strerror(ENOENT));
  check_open_detail(missing, ACCEL_ECLOSED, want);
  /* a socket file with nobody behind it: a daemon that died */
  CHECK(mkdtemp(dir) != NULL);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s/dead.sock", dir);
  CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  snprintf(url, sizeof url, "ipc://%s", sa.sun_path);
  snprintf(want, sizeof want, "no acceld at %s (connect: %s)", url, strerror(ECONNREFUSED));
  check_open_detail(url, ACCEL_ECLOSED, want);
  check_open_detail("bogus", ACCEL_EINVAL, ""); /* cleared: nothing to add to EINVAL */
  check_open_detail("tcp://127.0.0.1:1", ACCEL_ECLOSED,
                    "no acceld at tcp://127.0.0.1:1 (connect: Connection refused)");
  check_open_detail("ipc:///x?nope=1", ACCEL_EINVAL,
                    "ipc:///x?nope=1: 'nope=1' is not a parameter of a daemon's URL (only "
                    "name=NAME, 1 to 64 bytes)");
  const char *empty_name = "ipc:///x?name=: 'name=' is not a parameter of a daemon's URL (only "
                           "name=NAME, 1 to 64 bytes)";
  check_open_detail("ipc:///x?name=", ACCEL_EINVAL, empty_name);
  /* another thread's failure leaves this thread's detail alone */
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, open_on_another_thread, url), 0);
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK_STR_EQ(accel_last_error_detail(), empty_name);
  accel_close(ctx_open(NULL)); /* a success clears it */
  CHECK_STR_EQ(accel_last_error_detail(), "");
  close(fd);
  CHECK_EQ(unlink(sa.sun_path), 0);
  CHECK_EQ(rmdir(dir), 0);
}

TEST(null_context) {
  accel_buffer b = 0x1234;
  uint32_t u = 0;
  accel_rng spec = {.dist = ACCEL_DIST_BITS};
  struct accel_device_info info;
  accel_transfer_stats st;
  CHECK_ERR(accel_device_count(NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_device_info(NULL, 0, &info), ACCEL_EINVAL);
  CHECK_ERR(accel_buffer_create(NULL, ACCEL_F32, 4, &b), ACCEL_EINVAL);
  CHECK_EQ(b, 0x1234);
  CHECK_ERR(accel_buffer_destroy(NULL, b), ACCEL_EINVAL);
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_write(NULL, b, 0, &u, 1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_read(NULL, b, 0, &u, 1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(NULL, 0, b, 0, b, 1, 1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_fill_u32(NULL, 0, b, 1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_fill_f32(NULL, 0, b, 1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_sgemm(NULL, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 1, 1, 1, 1, b,
                                           1, b, 1, 0, b, 1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_saxpy(NULL, 0, 1, 1, b, b, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_sdot(NULL, 0, 1, b, b, b, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(NULL, 0, b, &spec, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_sigmoid(NULL, 0, b, b, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_relu(NULL, 0, b, b, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_tanh(NULL, 0, b, b, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_softmax(NULL, 0, b, b, 1, 1, fp));
  CHECK_ERR(accel_set_completion(NULL, ACCEL_COMPLETION_SYNC), ACCEL_EINVAL);
  CHECK_ERR(accel_finish(NULL, 0), ACCEL_EINVAL);
  CHECK_ERR(accel_inject_fault(NULL, 0), ACCEL_EINVAL);
  CHECK_ERR(accel_transfer_stats_get(NULL, &st), ACCEL_EINVAL);
  CHECK(accel_ctx_runtime(NULL) == NULL);
}

TEST(devices) {
  fixture x = setup("embedded:?cpu_devices=2");
  struct accel_device_info info;
  CHECK_EQ(cpu_device_count(x.ctx), 2);
  for (accel_device d = 0; d < accel_device_count(x.ctx); d++) { /* other backends' too */
    memset(&info, 0xA5, sizeof info);
    CHECK_OK(accel_device_info(x.ctx, d, &info));
    CHECK(info.name[0] != '\0' && memchr(info.name, '\0', sizeof info.name) != NULL);
    CHECK(!strcmp(info.backend, "cpu") || !strcmp(info.backend, "cuda") ||
          !strcmp(info.backend, "opencl"));
    CHECK(info.kind <= 2);
    CHECK_GT(info.mem_bytes, 0);
    CHECK_GE(info.compute_units, 1);
    CHECK_EQ(info.state, 0);
    CHECK_EQ(info.restarts, 0);
  }
  accel_device n = accel_device_count(x.ctx); /* CPU devices, and a GPU if present */
  const accel_device bad[] = {n, n + 1, -2, ACCEL_DEVICE_ANY, INT32_MAX, INT32_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_ERR(accel_device_info(x.ctx, bad[i], &info), ACCEL_EINVAL);
    CHECK_ERR(accel_inject_fault(x.ctx, bad[i]), ACCEL_EINVAL);
  }
  CHECK_ERR(accel_device_info(x.ctx, 0, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_transfer_stats_get(x.ctx, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_set_completion(x.ctx, (accel_completion)4), ACCEL_EINVAL);
  CHECK_ERR(accel_set_completion(x.ctx, (accel_completion)-1), ACCEL_EINVAL);
  teardown(&x);
}

/* A bad device index for every op that takes one. */
TEST(bad_device_for_every_op) {
  fixture x = setup("embedded:?cpu_devices=2");
  accel_rng spec = {.dist = ACCEL_DIST_UNIFORM};
  const accel_device bad[] = {accel_device_count(x.ctx), -2, INT32_MAX, INT32_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    accel_device d = bad[i];
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, d, x.f16, 0, x.f16, 8, 8, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_fill_u32(x.ctx, d, x.u16, 1, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_fill_f32(x.ctx, d, x.f16, 1, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_sgemm(x.ctx, d, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 2, 2, 2, 1,
                                             x.f16, 2, x.f16, 2, 0, x.f1, 1, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_saxpy(x.ctx, d, 4, 1, x.f1, x.f16, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_sdot(x.ctx, d, 1, x.f16, x.f16, x.f1, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(x.ctx, d, x.f16, &spec, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_sigmoid(x.ctx, d, x.f16, x.f16, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_relu(x.ctx, d, x.f16, x.f16, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_tanh(x.ctx, d, x.f16, x.f16, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_softmax(x.ctx, d, x.f16, x.f16, 4, 4, fp));
  }
  teardown(&x);
}

/* ---- buffers ------------------------------------------------------------------------- */

TEST(buffer_create_destroy) {
  fixture x = setup(NULL);
  accel_buffer b = 0x1234;
  static const int bad_dtypes[] = {0, ACCEL_DTYPE_MAX_ + 1, 99, -1}; /* at the limit: below */
  for (size_t i = 0; i < sizeof bad_dtypes / sizeof bad_dtypes[0]; i++) {
    CHECK_ERR(accel_buffer_create(x.ctx, (accel_dtype)bad_dtypes[i], 4, &b), ACCEL_EINVAL);
    CHECK_EQ(b, 0x1234);
  }
  CHECK_ERR(accel_buffer_create(x.ctx, ACCEL_F32, 4, NULL), ACCEL_EINVAL);
  CHECK_ERR(accel_buffer_create(x.ctx, ACCEL_F32, 0, &b), ACCEL_EINVAL); /* no elements */
  CHECK_EQ(b, 0x1234);
  /* A count whose byte size does not fit a size_t. */
  int rc = accel_buffer_create(x.ctx, ACCEL_F32, SIZE_MAX / 2, &b);
  if (rc != ACCEL_EINVAL)
    CHECK_ERR(rc, ACCEL_ENOMEM);
  CHECK_EQ(b, 0x1234);
  /* Destroy: stale after the first time; 0 and made-up handles were never valid. */
  accel_buffer d = buf_new(x.ctx, ACCEL_U32, 3);
  CHECK_OK(accel_buffer_destroy(x.ctx, d));
  CHECK_ERR(accel_buffer_destroy(x.ctx, d), ACCEL_ESTALE);
  CHECK_ERR(accel_buffer_destroy(x.ctx, x.dead), ACCEL_ESTALE);
  CHECK_ERR(accel_buffer_destroy(x.ctx, 0), ACCEL_ESTALE);
  CHECK_ERR(accel_buffer_destroy(x.ctx, UINT64_MAX), ACCEL_ESTALE);
  CHECK_ERR(accel_buffer_destroy(x.ctx, x.f16 ^ ((uint64_t)1 << 40)), ACCEL_ESTALE);
  CHECK_ERR(accel_buffer_destroy(x.ctx, x.f16 + 1000), ACCEL_ESTALE);
  teardown(&x);
}

/* write / read: ranges past the end, NULL caller memory, stale handles. */
TEST(write_read_arguments) {
  fixture x = setup(NULL);
  uint32_t v[32] = {0};
  static const struct {
    size_t off, count;
  } bad[] = {
      {0, 17}, {1, 16}, {16, 1}, {17, 0}, {SIZE_MAX, 1}, {1, SIZE_MAX}, {SIZE_MAX, SIZE_MAX}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_write(x.ctx, x.u16, bad[i].off, v, bad[i].count, fp));
    CHECK_CALL_ERR(ACCEL_EINVAL, accel_read(x.ctx, x.u16, bad[i].off, v, bad[i].count, fp));
  }
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_write(x.ctx, x.u16, 0, NULL, 4, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_read(x.ctx, x.u16, 0, NULL, 4, fp));
  /* never valid: 0, all ones, slot 1 (f16's) with a generation it never had */
  static const accel_buffer stale[] = {0, UINT64_MAX, (0x77ull << 32) | 1};
  for (size_t i = 0; i < 3; i++) {
    CHECK_CALL_ERR(ACCEL_ESTALE, accel_write(x.ctx, stale[i], 0, v, 1, fp));
    CHECK_CALL_ERR(ACCEL_ESTALE, accel_read(x.ctx, stale[i], 0, v, 1, fp));
  }
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_write(x.ctx, x.dead, 0, v, 1, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_read(x.ctx, x.dead, 0, v, 1, fp));
  /* The edges that are fine: an empty range at the end, the whole buffer. */
  accel_future *f = NULL;
  CHECK_OK(accel_read(x.ctx, x.u16, 16, v, 0, &f));
  WAIT_OK(f);
  CHECK_OK(accel_read(x.ctx, x.u16, 0, v, 16, &f));
  WAIT_OK(f);
  CHECK_EQ(v[15], 0x10f);
  teardown(&x);
}

TEST(copy_fill_arguments) {
  fixture x = setup(NULL);
  accel_buffer u8 = buf_new(x.ctx, ACCEL_U32, 8);
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.u16, 0, x.f16, 0, 4, fp)); /* dtypes */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.f16, 0, x.u16, 0, 4, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, u8, 0, x.u16, 0, 9, fp)); /* past dst */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.u16, 0, u8, 1, 8, fp)); /* past src */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.u16, 9, u8, 0, 8, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.u16, SIZE_MAX, u8, 0, 2, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.u16, 0, u8, SIZE_MAX, 2, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.u16, 0, x.u16, 4, 8, fp)); /* overlap */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.u16, 4, x.u16, 0, 8, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_copy(x.ctx, 0, x.u16, 3, x.u16, 3, 1, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_copy(x.ctx, 0, x.dead, 0, x.f16, 0, 1, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_copy(x.ctx, 0, x.f16, 0, x.dead, 0, 1, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_copy(x.ctx, 0, x.f16, 0, 0, 0, 1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_fill_f32(x.ctx, 0, x.u16, 1.0f, fp)); /* f32 into u32 */
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_fill_u32(x.ctx, 0, x.dead, 1, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_fill_f32(x.ctx, 0, x.dead, 1, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_fill_u32(x.ctx, 0, 0, 1, fp));
  CHECK_OK(accel_buffer_destroy(x.ctx, u8));
  teardown(&x);
}

/* sgemm: the buffers must hold what m, n, k and the leading dimensions span: one element short
 * fails, the exact size works (and computes). */
TEST(sgemm_arguments) {
  fixture x = setup(NULL);
  accel_ctx *ctx = x.ctx;
  const size_t m = 3, n = 4, k = 5, lda = 4, ldb = 6, ldc = 5;
  /* spans: A m x k: (k-1) lda + m; B k x n: (n-1) ldb + k; C m x n: (n-1) ldc + m */
  const size_t sa = (k - 1) * lda + m, sb = (n - 1) * ldb + k, sc = (n - 1) * ldc + m;
  float *ones = rnd_floats(64, 1, 1.0001f);
  accel_buffer A = buf_from(ctx, ACCEL_F32, ones, sa), As = buf_from(ctx, ACCEL_F32, ones, sa - 1);
  accel_buffer B = buf_from(ctx, ACCEL_F32, ones, sb), Bs = buf_from(ctx, ACCEL_F32, ones, sb - 1);
  accel_buffer C = buf_from(ctx, ACCEL_F32, ones, sc), Cs = buf_from(ctx, ACCEL_F32, ones, sc - 1);
  accel_buffer U = buf_new(ctx, ACCEL_U32, 64);
  const accel_trans N = ACCEL_NO_TRANS, T = ACCEL_TRANS;
#define GEMM(ta, tb, m_, n_, k_, a, lda_, b, ldb_, c, ldc_)                                        \
  accel_sgemm(ctx, 0, ta, tb, m_, n_, k_, 1.0f, a, lda_, b, ldb_, 0.5f, c, ldc_, fp)
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, As, lda, B, ldb, C, ldc)); /* too small */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda, Bs, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda, B, ldb, Cs, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k + 1, A, lda, B, ldb, C, ldc)); /* by k */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n + 1, k, A, lda, B, ldb, C, ldc)); /* by n */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m + 2, n, k, A, lda, B, ldb, C, ldc)); /* by m */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda + 1, B, ldb, C, ldc)); /* by ld */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda, B, ldb + 1, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda, B, ldb, C, ldc + 1));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, m - 1, B, ldb, C, ldc)); /* ld < rows */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda, B, k - 1, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda, B, ldb, C, m - 1));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(T, N, m, n, k, A, k - 1, B, ldb, C, ldc)); /* stored k x m */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, T, m, n, k, A, lda, B, n - 1, C, ldc)); /* stored n x k */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, 0, n, k, A, lda, B, ldb, C, 0)); /* ld 0, even empty */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, 0, A, 0, B, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM((accel_trans)2, N, m, n, k, A, lda, B, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, (accel_trans)-1, m, n, k, A, lda, B, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, SIZE_MAX, n, k, A, lda, B, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, SIZE_MAX, B, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, SIZE_MAX / 2, k, A, lda, B, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, U, lda, B, ldb, C, ldc)); /* dtype */
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda, U, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_EINVAL, GEMM(N, N, m, n, k, A, lda, B, ldb, U, ldc));
  CHECK_CALL_ERR(ACCEL_ESTALE, GEMM(N, N, m, n, k, x.dead, lda, B, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_ESTALE, GEMM(N, N, m, n, k, A, lda, x.dead, ldb, C, ldc));
  CHECK_CALL_ERR(ACCEL_ESTALE, GEMM(N, N, m, n, k, A, lda, B, ldb, x.dead, ldc));
  CHECK_CALL_ERR(ACCEL_ESTALE, GEMM(N, N, m, n, k, A, lda, B, ldb, 0, ldc));
  /* The exact sizes work: C = A B + 0.5 C with all-ones-ish inputs. */
  accel_future *f = NULL, **fp = &f;
  CHECK_OK(GEMM(N, N, m, n, k, A, lda, B, ldb, C, ldc));
  WAIT_OK(f);
  float c[32];
  read_sync(ctx, C, 0, c, sc);
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < m; i++) {
      double s = 0.5 * ones[i + j * ldc];
      for (size_t l = 0; l < k; l++)
        s += (double)ones[i + l * lda] * ones[l + j * ldb];
      CHECK(fabs(c[i + j * ldc] - s) <= 1e-5);
    }
#undef GEMM
  free(ones);
  teardown(&x);
}

TEST(blas1_nn_rng_arguments) {
  fixture x = setup(NULL);
  accel_ctx *ctx = x.ctx;
  accel_buffer f8 = buf_new(ctx, ACCEL_F32, 8);
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_saxpy(ctx, 0, 9, 1, f8, x.f16, fp)); /* n > x */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_saxpy(ctx, 0, 9, 1, x.f16, f8, fp)); /* n > y */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_saxpy(ctx, 0, SIZE_MAX, 1, x.f16, x.f16, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_saxpy(ctx, 0, 4, 1, x.u16, x.f16, fp)); /* dtype */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_saxpy(ctx, 0, 4, 1, x.f16, x.u16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_saxpy(ctx, 0, 4, 1, x.dead, x.f16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_saxpy(ctx, 0, 4, 1, x.f16, x.dead, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_sdot(ctx, 0, 9, f8, x.f16, x.f1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_sdot(ctx, 0, 9, x.f16, f8, x.f1, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_sdot(ctx, 0, 4, x.f16, x.f16, x.u16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_sdot(ctx, 0, 4, x.f16, x.f16, x.dead, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_sdot(ctx, 0, 4, x.f16, x.f16, 0, fp));
  /* element-wise: same lengths, f32 only */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_sigmoid(ctx, 0, f8, x.f16, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_relu(ctx, 0, x.f16, f8, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_tanh(ctx, 0, x.f16, x.u16, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_sigmoid(ctx, 0, x.u16, x.f16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_relu(ctx, 0, x.dead, x.f16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_tanh(ctx, 0, x.f16, x.dead, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_softmax(ctx, 0, x.f16, x.f16, 4, 5, fp)); /* > 16 */
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_softmax(ctx, 0, f8, x.f16, 4, 4, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_softmax(ctx, 0, x.f16, f8, 4, 4, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_softmax(ctx, 0, x.f16, x.f16, SIZE_MAX, 2, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_softmax(ctx, 0, x.f16, x.f16, (SIZE_MAX >> 1) + 2, 2, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_softmax(ctx, 0, x.u16, x.u16, 4, 4, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_softmax(ctx, 0, x.f16, x.dead, 4, 4, fp));
  /* rng: NULL spec, unknown distribution, the wrong dtype for the distribution, odd offset
   * for normals. */
  accel_rng spec = {.dist = ACCEL_DIST_BITS, .seed = 1, .stddev = 1};
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(ctx, 0, x.u16, NULL, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(ctx, 0, x.f16, &spec, fp)); /* bits into f32 */
  spec.dist = ACCEL_DIST_UNIFORM;
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(ctx, 0, x.u16, &spec, fp));
  spec.dist = ACCEL_DIST_NORMAL;
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(ctx, 0, x.u16, &spec, fp));
  spec.offset = 7;
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(ctx, 0, x.f16, &spec, fp));
  spec.dist = (accel_dist)3;
  spec.offset = 0;
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(ctx, 0, x.f16, &spec, fp));
  CHECK_CALL_ERR(ACCEL_EINVAL, accel_rng_fill(ctx, 0, x.u16, &spec, fp));
  spec.dist = ACCEL_DIST_BITS;
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_rng_fill(ctx, 0, x.dead, &spec, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_rng_fill(ctx, 0, 0, &spec, fp));
  CHECK_OK(accel_buffer_destroy(ctx, f8));
  teardown(&x);
}

/* A slot reused after a destroy gets a new handle: the old one stays stale for every entry
 * point, the new one works. */
TEST(destroyed_handle_stale_everywhere) {
  fixture x = setup(NULL);
  accel_ctx *ctx = x.ctx;
  accel_buffer old = buf_new(ctx, ACCEL_F32, 16);
  CHECK_OK(accel_buffer_destroy(ctx, old));
  accel_buffer fresh = buf_new(ctx, ACCEL_F32, 16); /* likely the same slot */
  CHECK(fresh != old);
  float v[16] = {0};
  accel_rng spec = {.dist = ACCEL_DIST_UNIFORM};
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_write(ctx, old, 0, v, 16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_read(ctx, old, 0, v, 16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_copy(ctx, 0, old, 0, x.f16, 0, 16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_fill_f32(ctx, 0, old, 1, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, 4, 4, 4, 1, old,
                                           4, x.f16, 4, 0, fresh, 4, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_saxpy(ctx, 0, 16, 1, old, fresh, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_sdot(ctx, 0, 16, old, fresh, x.f1, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_rng_fill(ctx, 0, old, &spec, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_sigmoid(ctx, 0, fresh, old, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_softmax(ctx, 0, old, fresh, 4, 4, fp));
  CHECK_ERR(accel_buffer_destroy(ctx, old), ACCEL_ESTALE);
  accel_future *f = NULL;
  CHECK_OK(accel_rng_fill(ctx, 0, fresh, &spec, &f));
  WAIT_OK(f);
  read_sync(ctx, fresh, 0, v, 16);
  for (int i = 0; i < 16; i++)
    CHECK(v[i] > 0.0f && v[i] <= 1.0f);
  CHECK_OK(accel_buffer_destroy(ctx, fresh));
  teardown(&x);
}

/* Creates a buffer, retrying while the session's mailbox is full (backpressure is fine). */
static accel_buffer create_retry(accel_ctx *ctx) {
  accel_buffer b = 0;
  int rc;
  while ((rc = accel_buffer_create(ctx, ACCEL_U32, 1, &b)) == ACCEL_EBUSY)
    test_sleep_ms(1);
  CHECK_OK(rc);
  return b;
}

static void destroy_retry(accel_ctx *ctx, accel_buffer b) {
  int rc;
  while ((rc = accel_buffer_destroy(ctx, b)) == ACCEL_EBUSY)
    test_sleep_ms(1);
  CHECK_OK(rc);
}

/* A destroyed handle stays stale however often its slot is reused: with one slot
 * (max_buffers=2: slot 0 is never used), 70000 create/destroy cycles must never hand the first
 * handle out again (a generation that wraps would make the stale handle name a live buffer). */
TEST(destroyed_handle_never_comes_back) {
  accel_ctx *ctx = ctx_open("embedded:?max_buffers=2");
  accel_buffer first = create_retry(ctx);
  destroy_retry(ctx, first);
  /* A slot is retired before its 16-bit generation would wrap: after that, creates in a
   * table of one slot are refused (ELIMIT) instead of reviving an old handle. */
  long reuses = 0;
  for (long i = 1; i <= 70000; i++) {
    accel_buffer b = 0;
    int rc = accel_buffer_create(ctx, ACCEL_U32, 4, &b);
    if (rc == ACCEL_ELIMIT)
      break;
    if (rc == ACCEL_EBUSY) {
      CHECK_OK(accel_finish(ctx, -1));
      i--;
      continue;
    }
    CHECK_OK(rc);
    if (b == first)
      TEST_FAIL("reuse %ld of the slot gave back the destroyed handle 0x%016" PRIx64, i, b);
    destroy_retry(ctx, b);
    reuses = i;
  }
  CHECK_GT(reuses, 60000);
  uint32_t v = 0;
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_read(ctx, first, 0, &v, 1, fp));
  CHECK_OK(accel_finish(ctx, -1));
  accel_close(ctx);
}

/* An op that runs out of memory fails alone, in its future; the device is not restarted and
 * later ops work. A buffer too large to allocate anywhere (2^60 bytes) is refused by the
 * create call or by the first op that needs its memory. */
TEST(out_of_memory_fails_the_op_only) {
  fixture x = setup(NULL);
  accel_buffer huge = 0;
  int rc = accel_buffer_create(x.ctx, ACCEL_F32, (size_t)1 << 58, &huge);
  if (rc == 0) {
    accel_future *f = NULL;
    uint32_t one = 0;
    CHECK_OK(accel_fill_u32(x.ctx, 0, huge, 1, &f));
    CHECK_ERR(fut_status(f), ACCEL_ENOMEM);
    CHECK_OK(accel_read(x.ctx, huge, 0, &one, 1, &f));
    CHECK_ERR(fut_status(f), ACCEL_ENOMEM);
    int frc = accel_finish(x.ctx, -1);
    if (frc != 0)
      CHECK_ERR(frc, ACCEL_ENOMEM);
    CHECK_OK(accel_buffer_destroy(x.ctx, huge));
  } else if (rc != ACCEL_EINVAL) {
    CHECK_ERR(rc, ACCEL_ENOMEM);
  }
  struct accel_device_info info;
  CHECK_OK(accel_device_info(x.ctx, 0, &info));
  CHECK_EQ(info.restarts, 0);
  CHECK_EQ(info.state, 0);
  accel_future *f = NULL;
  CHECK_OK(accel_sigmoid(x.ctx, 0, x.f16, x.f16, &f));
  WAIT_OK(f);
  float v[16];
  read_sync(x.ctx, x.f16, 0, v, 16);
  for (int i = 0; i < 16; i++)
    CHECK(fabsf(v[i] - (float)(1.0 / (1.0 + exp(-((double)i + 0.5))))) <= 1e-6f);
  float back[16];
  for (int i = 0; i < 16; i++)
    back[i] = (float)i + 0.5f;
  write_sync(x.ctx, x.f16, 0, back, 16); /* as the teardown expects it */
  teardown(&x);
}

/* Destroying buffers while ops on them are in flight: the ops complete (with their results
 * delivered to the caller's memory), the handles are stale at once. Closing a context with
 * fire-and-forget ops in flight waits for them. */
TEST(destroy_and_close_with_ops_in_flight) {
  accel_ctx *ctx = ctx_open("embedded:?cpu_devices=2");
  size_t n = (size_t)test_scaled(384, 96);
  float *a = rnd_floats(n * n, -1, 1), *c = xmalloc(n * n * 4), *c2 = xmalloc(n * n * 4);
  accel_buffer A = buf_new(ctx, ACCEL_F32, n * n), C = buf_new(ctx, ACCEL_F32, n * n);
  accel_future *fs = NULL, *fr = NULL;
  CHECK_OK(accel_write(ctx, A, 0, a, n * n, NULL));
  CHECK_OK(
      accel_sgemm(ctx, 1, ACCEL_NO_TRANS, ACCEL_TRANS, n, n, n, 1.0f, A, n, A, n, 0.0f, C, n, &fs));
  CHECK_OK(accel_read(ctx, C, 0, c, n * n, &fr));
  CHECK_OK(accel_buffer_destroy(ctx, A));
  CHECK_OK(accel_buffer_destroy(ctx, C));
  CHECK_ERR(accel_buffer_destroy(ctx, C), ACCEL_ESTALE);
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_read(ctx, C, 0, c2, 1, fp));
  WAIT_OK(fs);
  WAIT_OK(fr);
  for (size_t i = 0; i < n; i++) { /* C = A A^T: its diagonal holds the squared row norms */
    double s = 0;
    for (size_t l = 0; l < n; l++)
      s += (double)a[i + l * n] * a[i + l * n];
    CHECK(fabs(c[i + i * n] - s) <= 2.0 * (double)(n + 2) * 1.2e-7 * s + 1e-6);
  }
  CHECK_OK(accel_finish(ctx, -1));
  /* Fire-and-forget work left in flight at close, on buffers destroyed or not. */
  for (int i = 0; i < 8; i++) {
    accel_buffer B = buf_new(ctx, ACCEL_F32, n * n), D = buf_new(ctx, ACCEL_F32, n * n);
    CHECK_OK(accel_write(ctx, B, 0, a, n * n, NULL));
    CHECK_OK(accel_sgemm(ctx, i % 2, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, B, n, B, n,
                         0.0f, D, n, NULL));
    CHECK_OK(accel_read(ctx, D, 0, c2, n * n, NULL));
    if (i % 2)
      CHECK_OK(accel_buffer_destroy(ctx, B));
  }
  accel_close(ctx); /* waits: c2 and a stay valid until it returns */
  free(a);
  free(c);
  free(c2);
}

/* A handle is meaningful only in the context that made it: used in another context it is
 * stale (never another context's data), even where that context has a live buffer in the same
 * slot. */
TEST(foreign_handle_stale) {
  fixture x = setup(NULL), y = setup(NULL);
  accel_buffer xb = buf_new(x.ctx, ACCEL_U32, 16), yb = buf_new(y.ctx, ACCEL_U32, 16);
  uint32_t v[16];
  accel_rng spec = {.dist = ACCEL_DIST_BITS};
  printf("# context x's buffer 0x%016" PRIx64 ", context y's 0x%016" PRIx64 "\n", xb, yb);
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_read(y.ctx, xb, 0, v, 16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_write(y.ctx, xb, 0, v, 16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_fill_u32(y.ctx, 0, xb, 7, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_rng_fill(y.ctx, 0, xb, &spec, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_read(y.ctx, x.u16, 0, v, 16, fp));
  CHECK_CALL_ERR(ACCEL_ESTALE, accel_sigmoid(y.ctx, 0, x.f16, x.f16, fp));
  CHECK_ERR(accel_buffer_destroy(y.ctx, xb), ACCEL_ESTALE);
  CHECK_ERR(accel_buffer_destroy(x.ctx, yb), ACCEL_ESTALE);
  CHECK_OK(accel_buffer_destroy(x.ctx, xb));
  CHECK_OK(accel_buffer_destroy(y.ctx, yb));
  teardown(&x);
  teardown(&y);
}

/* The error table: every code has a name and a message. */
/* A refused op says why in accel_last_error_detail (which range of which buffer, which dtypes),
 * and the next op call starts from nothing. */
TEST(refused_ops_say_why) {
  accel_ctx *ctx = ctx_open(NULL);
  accel_buffer f = buf_new(ctx, ACCEL_F32, 6), d = buf_new(ctx, ACCEL_F64, 6);
  accel_buffer u = buf_new(ctx, ACCEL_U32, 6);
  float x[8] = {0};
  CHECK_ERR(accel_write(ctx, f, 3, x, 4, NULL), ACCEL_EINVAL); /* 3 + 4 > 6 */
  CHECK(strstr(accel_last_error_detail(), "[3, 3 + 4) past its 6 elements") != NULL);
  accel_strides full = {3, 1};
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_ADD, f, 2, 3, f, full, d, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "different dtypes (f32 and f64)") != NULL);
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_DIVIDE, u, 2, 3, u, full, u, full, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "no divide of u32") != NULL);
  CHECK_ERR(accel_unary(ctx, 0, ACCEL_UNARY_EXP, u, u, NULL), ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "needs a float dtype, not u32") != NULL);
  CHECK_ERR(accel_binary(ctx, 0, ACCEL_ADD, f, 2, 3, f, full, f, (accel_strides){4, 1}, NULL),
            ACCEL_EINVAL);
  CHECK(strstr(accel_last_error_detail(), "b at its strides") != NULL);
  CHECK_OK(accel_fill(ctx, 0, f, 1.0, NULL)); /* accepted: nothing to say */
  CHECK_STR_EQ(accel_last_error_detail(), "");
  accel_close(ctx);
}

TEST(error_names) {
  CHECK_STR_EQ(accel_err_name(0), "OK");
  CHECK_STR_EQ(accel_err_name(ACCEL_ESTALE), "ESTALE");
  CHECK_STR_EQ(accel_err_name(ACCEL_EDATALOST), "EDATALOST");
  for (int code = -1; code > ACCEL_ERRNO_MIN_; code--) {
    CHECK(strcmp(accel_err_name(code), "UNKNOWN") != 0);
    CHECK(strcmp(accel_strerror(code), "unknown error") != 0);
  }
  CHECK_STR_EQ(accel_err_name(ACCEL_ERRNO_MIN_), "UNKNOWN");
}

/* accel_version() is the meson project's version (ACCEL_VERSION_STRING: the root meson.build
 * passes it to every target). */
TEST(version) {
  CHECK(accel_version() != NULL);
  CHECK_STR_EQ(accel_version(), ACCEL_VERSION_STRING);
}

static const test_case tests[] = {
    TEST_CASE(open_urls),
    TEST_CASE(open_failures_say_why),
    TEST_CASE(null_context),
    TEST_CASE(devices),
    TEST_CASE(bad_device_for_every_op),
    TEST_CASE(buffer_create_destroy),
    TEST_CASE(write_read_arguments),
    TEST_CASE(copy_fill_arguments),
    TEST_CASE(sgemm_arguments),
    TEST_CASE(blas1_nn_rng_arguments),
    TEST_CASE(destroyed_handle_stale_everywhere),
    TEST_CASE(out_of_memory_fails_the_op_only),
    TEST_CASE(destroy_and_close_with_ops_in_flight),
    TEST_CASE(refused_ops_say_why),
    TEST_CASE(error_names),
    TEST_CASE(foreign_handle_stale),
    TEST_CASE(destroyed_handle_never_comes_back),
    TEST_CASE(version),
};

TEST_MAIN(tests)
