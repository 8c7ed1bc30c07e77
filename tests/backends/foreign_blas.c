/* The cpu backend's BLAS in a process where another BLAS owns the global names: Debian's
 * reference libblas.so.3 is linked ahead of OpenBLAS (so the loader binds cblas_* to it), and
 * this program defines its own sgemm_, saxpy_, sdot_, ... that count their calls and compute
 * nothing (the reference cblas_sgemm calls sgemm_ by its global name, so it lands here). The
 * kernels must still reach OpenBLAS's own functions (backends/cpu/openblas.h): right results
 * against float64 references, and none of this program's BLAS called.
 *
 * The test first checks that the trap is set (the global cblas_sgemm is the reference one and
 * reaches this program's sgemm_); without the reference library it fails, it does not skip.
 * Fresh random inputs each run; ACCEL_TEST_SEED=<seed> reproduces one. */
#include <cblas.h>
#include <dlfcn.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/openblas.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond);                            \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

/* ---- this program's own BLAS ------------------------------------------------------------
 * Exported (export_dynamic in meson.build) like an application's would be. The reference
 * library calls them with Fortran arguments; they look at none and return garbage. */

#define APP_BLAS(X) X(sgemm_) X(dgemm_) X(saxpy_) X(daxpy_) X(sdot_) X(ddot_) X(sscal_) X(dscal_)

#define APP_ENUM_(fn) APP_##fn,
enum { APP_BLAS(APP_ENUM_) APP_COUNT };
#define APP_NAME_(fn) #fn,
static const char *const app_names[] = {APP_BLAS(APP_NAME_)};
static int app_calls[APP_COUNT];

#define APP_DEFINE_(fn)                                                                            \
  void fn(void);                                                                                   \
  void fn(void) {                                                                                  \
    app_calls[APP_##fn]++;                                                                         \
  }
APP_BLAS(APP_DEFINE_)

/* ---- the trap is set --------------------------------------------------------------------- */

/* The file holding `sym` as the global lookup sees it, resolved through symlinks. */
static char *file_of_global(const char *sym) {
  Dl_info info;
  void *p = dlsym(RTLD_DEFAULT, sym);
  if (p == NULL || dladdr(p, &info) == 0 || info.dli_fname == NULL)
    return NULL;
  return realpath(info.dli_fname, NULL);
}

/* Returns 0 when the global cblas_sgemm is the reference library's and calls our sgemm_. */
static int check_trap(void) {
  char *want = FOREIGN_BLAS_PATH[0] != '\0' ? realpath(FOREIGN_BLAS_PATH, NULL) : NULL;
  char *got = file_of_global("cblas_sgemm");
  int ok = want != NULL && got != NULL && strcmp(want, got) == 0;
  if (!ok)
    fprintf(stderr,
            "FAILED: the global cblas_sgemm is in %s, not in the reference BLAS (%s): "
            "install libblas3 (scripts/deps), reconfigure, and run this through meson "
            "test (it sets LD_LIBRARY_PATH). Without it this test proves nothing.\n",
            got != NULL ? got : "no file",
            FOREIGN_BLAS_PATH[0] != '\0' ? FOREIGN_BLAS_PATH : "not found by meson");
  free(want);
  free(got);
  if (!ok)
    return -1;
  /* What the old kernels did: the reference cblas_sgemm, which calls our sgemm_. (This call
   * is also what keeps the library linked under --as-needed.) */
  float a = 1.0f, b = 2.0f, c = 0.0f;
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  if (app_calls[APP_sgemm_] != 1) {
    fprintf(stderr,
            "FAILED: the global cblas_sgemm did not reach this program's sgemm_ "
            "(%d calls, c = %g): the test proves nothing\n",
            app_calls[APP_sgemm_], (double)c);
    return -1;
  }
  app_calls[APP_sgemm_] = 0;
  return 0;
}

/* Whether the code at p lies in `file` (a resolved path). */
static bool lies_in(const void *p, const char *file) {
  Dl_info info;
  if (p == NULL || file == NULL || dladdr(p, &info) == 0 || info.dli_fname == NULL)
    return false;
  char *path = realpath(info.dli_fname, NULL);
  bool same = path != NULL && strcmp(path, file) == 0;
  free(path);
  return same;
}

/* Every entry of the table lies in OpenBLAS's file, the one holding openblas_get_config. */
static void test_table(void) {
  const be_openblas_api *ob = be_openblas();
  CHECK(ob != NULL, "be_openblas: %s", be_openblas_error());
  if (ob == NULL)
    return;
  char *openblas = file_of_global("openblas_get_config");
  CHECK(openblas != NULL, "no file holds openblas_get_config");
#define CHECK_ENTRY_(fn)                                                                           \
  CHECK(lies_in(*(void *const *)(const void *)&ob->fn, openblas), #fn " is not OpenBLAS's");
  BE_OPENBLAS_FUNCS(CHECK_ENTRY_)
  if (ob->cblas_sbgemm != NULL)
    CHECK_ENTRY_(cblas_sbgemm)
#undef CHECK_ENTRY_
  printf("OpenBLAS: %s (%s); cblas_sbgemm %s\n", openblas != NULL ? openblas : "?",
         openblas_get_config(), ob->cblas_sbgemm != NULL ? "present" : "absent");
  free(openblas);
}

/* ---- the kernels against float64 references --------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static float rnd_float(void) {
  return (float)((double)(rnd64() >> 11) * 0x1p-52 - 1.0); /* [-1, 1) */
}

static float *rnd_vec(size_t n) {
  float *x = malloc((n > 0 ? n : 1) * sizeof *x);
  if (x == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  for (size_t i = 0; i < n; i++)
    x[i] = rnd_float();
  return x;
}

/* op(X)(i, j) of a column-major matrix with leading dimension ld. */
static double at(const float *x, int64_t ld, bool trans, int64_t i, int64_t j) {
  return trans ? x[j + i * ld] : x[i + j * ld];
}

/* Tolerance per element: 2 (k + 2) eps times the magnitudes summed (the bound of a float
 * dot product of length k, plus the beta term). */
static void test_sgemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  int64_t lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 3;
  size_t a_len = (size_t)(lda * (ta ? m : k)), b_len = (size_t)(ldb * (tb ? k : n));
  size_t c_len = (size_t)(ldc * n);
  float *a = rnd_vec(a_len), *b = rnd_vec(b_len), *c = rnd_vec(c_len), *c0 = rnd_vec(c_len);
  memcpy(c0, c, c_len * sizeof *c);
  be_sgemm_args g = {ta ? BE_BLAS_TRANS : BE_BLAS_NO_TRANS,
                     tb ? BE_BLAS_TRANS : BE_BLAS_NO_TRANS,
                     m,
                     n,
                     k,
                     1.25f,
                     -0.5f,
                     lda,
                     ldb,
                     ldc,
                     BE_SGEMM_MATH_DEVICE};
  int err = be_cpu_sgemm(&g, a, a_len, b, b_len, c, c_len);
  CHECK(err == 0, "sgemm %" PRId64 "x%" PRId64 "x%" PRId64 ": %d", m, n, k, err);
  int bad = 0;
  for (int64_t j = 0; j < n && err == 0 && bad < 5; j++) {
    for (int64_t i = 0; i < m && bad < 5; i++) {
      double want = g.beta * (double)c0[i + j * ldc], mag = fabs(want);
      for (int64_t l = 0; l < k; l++) {
        double t = g.alpha * at(a, lda, ta, i, l) * at(b, ldb, tb, l, j);
        want += t;
        mag += fabs(t);
      }
      double got = c[i + j * ldc], tol = 2.0 * (double)(k + 2) * FLT_EPSILON * mag + 1e-30;
      bool ok = fabs(got - want) <= tol;
      bad += !ok;
      CHECK(ok,
            "sgemm %" PRId64 "x%" PRId64 "x%" PRId64 " ta=%d tb=%d: C(%" PRId64 ",%" PRId64
            ") = %.9g, want %.9g (tol %.3g)",
            m, n, k, ta, tb, i, j, got, want, tol);
    }
  }
  free(a), free(b), free(c), free(c0);
}

/* saxpy: two roundings per element, so 2 eps of the magnitudes; sdot: as one gemm element. */
static void test_vectors(int64_t n) {
  float *x = rnd_vec((size_t)n * 2), *y = rnd_vec((size_t)n * 3), *y0 = rnd_vec((size_t)n * 3);
  memcpy(y0, y, (size_t)n * 3 * sizeof *y);
  float alpha = -0.75f, dot = NAN;
  CHECK(be_cpu_saxpy(n, alpha, x, 2, (size_t)n * 2, y, 3, (size_t)n * 3) == 0, "saxpy");
  for (int64_t i = 0, bad = 0; i < n && bad < 5; i++) {
    double want = (double)alpha * x[2 * i] + y0[3 * i];
    double tol = 2 * FLT_EPSILON * (fabs((double)alpha * x[2 * i]) + fabs((double)y0[3 * i]));
    bool ok = fabs(y[3 * i] - want) <= tol;
    bad += !ok;
    CHECK(ok, "saxpy y[%" PRId64 "] = %.9g, want %.9g", i, (double)y[3 * i], want);
  }
  CHECK(be_cpu_sdot(n, x, 2, (size_t)n * 2, y0, 3, (size_t)n * 3, &dot) == 0, "sdot");
  double want = 0, mag = 0;
  for (int64_t i = 0; i < n; i++) {
    want += (double)x[2 * i] * y0[3 * i];
    mag += fabs((double)x[2 * i] * y0[3 * i]);
  }
  double tol = 2.0 * (double)(n + 2) * FLT_EPSILON * mag;
  CHECK(fabs(dot - want) <= tol, "sdot n=%" PRId64 " = %.9g, want %.9g (tol %.3g)", n, (double)dot,
        want, tol);
  free(x), free(y), free(y0);
}

/* The table's double and scal entries, which no kernel uses yet, on a small exact case. */
static void test_table_calls(void) {
  const be_openblas_api *ob = be_openblas();
  if (ob == NULL)
    return;
  double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
  ob->cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0, a, 2, b, 2, 0.0, c, 2);
  CHECK(c[0] == 23 && c[1] == 34 && c[2] == 31 && c[3] == 46, "dgemm %g %g %g %g", c[0], c[1], c[2],
        c[3]);
  CHECK(ob->cblas_ddot(4, a, 1, b, 1) == 70, "ddot");
  ob->cblas_daxpy(4, 2.0, a, 1, b, 1);
  ob->cblas_dscal(4, 0.5, b, 1);
  CHECK(b[0] == 3.5 && b[3] == 8, "daxpy, dscal: %g %g", b[0], b[3]);
  float s[2] = {1, -2};
  ob->cblas_sscal(2, 3.0f, s, 1);
  CHECK(s[0] == 3 && s[1] == -6, "sscal: %g %g", (double)s[0], (double)s[1]);
}

int main(void) {
  const char *env = getenv("ACCEL_TEST_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock();
  rng_state = seed;
  printf("seed %" PRIu64 " (ACCEL_TEST_SEED reproduces it)\n", seed);
  if (check_trap() != 0)
    return 1;
  test_table();
  test_sgemm(1, 1, 1, false, false);
  for (int t = 0; t < 12; t++)
    test_sgemm(1 + (int64_t)(rnd64() % 70), 1 + (int64_t)(rnd64() % 70),
               1 + (int64_t)(rnd64() % 70), t & 1, t & 2);
  test_sgemm(300, 200, 250, false, true); /* big enough for OpenBLAS's threads */
  test_vectors(1);
  test_vectors(1000 + (int64_t)(rnd64() % 1000));
  test_table_calls();
  for (int i = 0; i < APP_COUNT; i++)
    CHECK(app_calls[i] == 0, "this program's %s was called %d times", app_names[i], app_calls[i]);
  printf("%s: %d failures\n", failures == 0 ? "PASS" : "FAIL", failures);
  return failures == 0 ? 0 : 1;
}
