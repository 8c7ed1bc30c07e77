/* cuda-host: the cuda backend's host side, on any machine (CI has the toolkit but no GPU):
 * the driver is loaded at run time and its absence is an answer, not a failure; errors map
 * onto accel's codes; the kernels are embedded; every entry point refuses bad arguments
 * before touching a device. The process runs with ACCEL_CUDA_DRIVER pointing at a library
 * that does not exist (unless set already), so the no-driver path is what it sees even on a
 * GPU machine. */
#include <string.h>

#include "../be_f32.h"
#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/driver.h"
#include "cuda_test.h"

static const be_ops *B = &be_cuda_ops;

#define NO_DRIVER "libaccel-no-such-driver.so.1"

TEST(registry_has_cuda) {
  const be_entry *e = be_registry();
  while (e->name != NULL && strcmp(e->name, "cuda") != 0)
    e++;
  CHECK(e->name != NULL);
  CHECK_PTR_EQ(e->ops, &be_cuda_ops);
  CHECK_STR_EQ(B->name, "cuda");
  CHECK_EQ(B->abi_version, BE_ABI_VERSION);
}

TEST(driver_missing_is_enotsup) {
  char why[128] = "x";
  CHECK_ERR(be_cuda_driver_try(NO_DRIVER, why, sizeof why), ACCEL_ENOTSUP);
  CHECK_STR_EQ(why, "no driver");
  CHECK_ERR(be_cuda_driver_try(NO_DRIVER, NULL, 0), ACCEL_ENOTSUP);
}

/* The toolkit's stub library (for linking only) exports the API but works nowhere. */
TEST(driver_stub_is_enotsup) {
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) {
    printf("    (no stub at %s)\n", stub);
    return;
  }
  char why[128] = "";
  CHECK_ERR(be_cuda_driver_try(stub, why, sizeof why), ACCEL_ENOTSUP);
  printf("    stub: %s\n", why);
  CHECK(why[0] != '\0');
}

TEST(probe_and_open_without_driver) {
  const char *env = getenv("ACCEL_CUDA_DRIVER");
  if (env == NULL || strcmp(env, NO_DRIVER) != 0) {
    printf("    (ACCEL_CUDA_DRIVER is set to another library: nothing to check)\n");
    return;
  }
  int count = -1;
  char why[128] = "";
  CHECK_ERR(B->probe(&count, why, sizeof why), ACCEL_ENOTSUP);
  CHECK_EQ(count, 0);
  CHECK_STR_EQ(why, "no driver");
  CHECK_ERR(B->probe(&count, NULL, 0), ACCEL_ENOTSUP); /* the answer is kept */
  be_device *d = NULL;
  CHECK_ERR(B->open(0, NULL, &d), ACCEL_ENOTSUP);
  CHECK(d == NULL);
}

TEST(error_mapping) {
  CHECK_EQ(be_cuda_err(CUDA_SUCCESS), 0);
  CHECK_ERR(be_cuda_err(CUDA_ERROR_NOT_READY), ACCEL_EAGAIN);
  CHECK_ERR(be_cuda_err(CUDA_ERROR_OUT_OF_MEMORY), ACCEL_ENOMEM);
  CHECK_ERR(be_cuda_err(CUDA_ERROR_INVALID_VALUE), ACCEL_EINVAL);
  CHECK_ERR(be_cuda_err(CUDA_ERROR_NO_DEVICE), ACCEL_ENOTSUP);
  CHECK_ERR(be_cuda_err(CUDA_ERROR_FILE_NOT_FOUND), ACCEL_EIO);
  CUresult sticky[] = {CUDA_ERROR_ILLEGAL_ADDRESS,      CUDA_ERROR_LAUNCH_FAILED,
                       CUDA_ERROR_ILLEGAL_INSTRUCTION,  CUDA_ERROR_MISALIGNED_ADDRESS,
                       CUDA_ERROR_HARDWARE_STACK_ERROR, CUDA_ERROR_ECC_UNCORRECTABLE};
  for (size_t i = 0; i < sizeof sticky / sizeof sticky[0]; i++) {
    CHECK(be_cuda_sticky(sticky[i]));
    CHECK_ERR(be_cuda_err(sticky[i]), ACCEL_EDEVLOST);
  }
  CHECK(!be_cuda_sticky(CUDA_ERROR_OUT_OF_MEMORY));
  CHECK(!be_cuda_sticky(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)); /* that launch only */
  CHECK(strstr(be_cuda_err_name((CUresult)12345), "12345") != NULL);
}

/* nvcc's fatbin wrapper starts with the magic 0xBA55ED50 (little-endian). */
TEST(kernels_are_embedded) {
  CHECK_GT(be_cuda_fatbin_size, 1024);
  uint32_t magic;
  memcpy(&magic, be_cuda_fatbin, 4);
  CHECK_EQ(magic, 0xBA55ED50u);
  CHECK_EQ((uintptr_t)be_cuda_fatbin % 16, 0);
}

static void nothing(void *arg, int status) {
  (void)arg;
  (void)status;
}

/* Every entry point refuses missing objects without touching a device. */
TEST(null_arguments) {
  be_mem m = {0};
  be_sgemm_args g = {.m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1};
  be_rng_args r = {.dist = BE_RNG_BITS};
  CHECK_ERR(B->probe(NULL, NULL, 0), ACCEL_EINVAL);
  CHECK_ERR(B->open(0, NULL, NULL), ACCEL_EINVAL);
  CHECK_ERR(B->info(NULL, NULL), ACCEL_EINVAL);
  CHECK_ERR(B->status(NULL), ACCEL_EINVAL);
  CHECK_ERR(B->reset(NULL), ACCEL_EINVAL);
  CHECK_ERR(B->inject_fault(NULL), ACCEL_EINVAL);
  CHECK_ERR(B->queue_create(NULL, NULL), ACCEL_EINVAL);
  CHECK_ERR(B->mem_alloc(NULL, 4, &m), ACCEL_EINVAL);
  CHECK_ERR(B->event_create(NULL, NULL), ACCEL_EINVAL);
  CHECK_ERR(B->event_record(NULL, NULL), ACCEL_EINVAL);
  CHECK_ERR(B->event_query(NULL), ACCEL_EINVAL);
  CHECK_ERR(B->event_sync(NULL), ACCEL_EINVAL);
  CHECK_ERR(B->queue_wait(NULL, NULL), ACCEL_EINVAL);
  CHECK_ERR(B->host_callback(NULL, nothing, NULL), ACCEL_EINVAL);
  CHECK_ERR(B->copy_h2d(NULL, m, 0, "", 0), ACCEL_EINVAL);
  CHECK_ERR(B->copy_d2h(NULL, &g, m, 0, 0), ACCEL_EINVAL);
  CHECK_ERR(B->copy_d2d(NULL, m, 0, m, 0, 0), ACCEL_EINVAL);
  CHECK_ERR(be_sgemm(B, NULL, &g, m, 0, m, 0, m, 0), ACCEL_EINVAL);
  CHECK_ERR(be_saxpy(B, NULL, 0, 1, m, 0, m, 0), ACCEL_EINVAL);
  CHECK_ERR(be_sdot(B, NULL, 0, m, 0, m, 0, m, 0), ACCEL_EINVAL);
  CHECK_ERR(be_fill_u32(B, NULL, m, 0, 0, 1), ACCEL_EINVAL);
  CHECK_ERR(be_rng_fill(B, NULL, m, 0, 0, &r), ACCEL_EINVAL);
  CHECK_ERR(be_unary(B, NULL, BE_RELU, m, 0, m, 0, 0), ACCEL_EINVAL);
  CHECK_ERR(be_softmax(B, NULL, m, 0, m, 0, 0, 0), ACCEL_EINVAL);
  CHECK_ERR(be_cuda_set_tf32(NULL, true), ACCEL_EINVAL);
  CHECK_ERR(be_cuda_set_copy_threads(NULL, 2), ACCEL_EINVAL);
  B->close(NULL);
  B->queue_destroy(NULL);
  B->event_destroy(NULL);
  B->mem_free(NULL, &m);
  CHECK_EQ(be_cuda_devptr(m), 0);
  CHECK_EQ(be_cuda_stream(NULL), 0);
  CHECK_EQ(be_cuda_context(NULL), 0);
  CHECK_EQ(be_cuda_function(NULL, "be_null"), 0);
}

static const test_case tests[] = {
    TEST_CASE(registry_has_cuda),      TEST_CASE(driver_missing_is_enotsup),
    TEST_CASE(driver_stub_is_enotsup), TEST_CASE(probe_and_open_without_driver),
    TEST_CASE(error_mapping),          TEST_CASE(kernels_are_embedded),
    TEST_CASE(null_arguments),
};

int main(int argc, char **argv) {
  setenv("ACCEL_CUDA_DRIVER", NO_DRIVER, 0);
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
