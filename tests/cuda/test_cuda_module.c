/* cuda-module: user kernels on the cuda backend (the `module` package: backends/cuda/module.c,
 * module_build.c) and abort(), on a real GPU through be_ops and backend_cuda.h:
 *   - CUDA C built by NVRTC: saxpy on random inputs against a float64 reference, with buffer
 *     offsets; the same source for a virtual architecture (NVRTC's PTX, compiled by the
 *     driver); dynamic shared memory past the default 48 KiB;
 *   - hand-written PTX;
 *   - build errors (ACCEL_EBUILD with the compiler's words in the log), unknown kernel names,
 *     the parameters the driver reports, launches the backend refuses;
 *   - the build caches: a second load compiles nothing (memory), nor does one after the
 *     table in memory is dropped (disk); a corrupt cache file is compiled again;
 *   - modules across a reset (their launches report ACCEL_EDEVLOST) and left at close;
 *   - abort() of a kernel that never ends: the callback after it hears ACCEL_EDEVLOST, a thread
 *     in event_sync returns, queue_destroy, reset and close return at once, and the device
 *     serves again after reset, or after close and a fresh open. Whether the kernel still runs
 *     is printed (a heartbeat it writes to host memory registered through another context):
 *     on driver 580 it runs until the process exits, as no call that ends its context returns
 *     before it does (backends/cuda/context.c, "Burial"). Each abort test also runs alone in
 *     its own process.
 * The build cache lives in a fresh temporary directory (ACCEL_CACHE_DIR). Without a CUDA
 * device it exits 77 (meson's SKIP) and says why. */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>

#include "accel/accel.h"
#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/driver.h"
#include "cuda_fx.h"

static const be_ops *B = &be_cuda_ops;
static const be_module_pkg *M;

#define SRC_CUDA (1u << ACCEL_SOURCE_CUDA)
#define SRC_PTX (1u << ACCEL_SOURCE_PTX)

/* ---- fixtures ------------------------------------------------------------------------- */

static int finish_rc(fx *f) {
  be_event *ev = NULL;
  CHECK_OK(B->event_create(f->d, &ev));
  int rc = B->event_record(ev, f->q);
  if (rc == 0)
    rc = B->event_sync(ev);
  B->event_destroy(ev);
  return rc;
}

static void finish(fx *f) {
  CHECK_OK(finish_rc(f));
}

static be_mem mem_new(fx *f, size_t bytes) {
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(f->d, bytes, &m));
  return m;
}

static void need_nvrtc(fx *f) {
  if (!(M->sources(f->d) & SRC_CUDA)) {
    fx_close(f);
    TEST_FAIL("no NVRTC: CUDA C is not built on this machine (ACCEL_NVRTC names one)");
  }
}

/* Loads code (a string) and prints the log, if any. */
static int load(fx *f, uint32_t source, const char *code, const char *options, be_module **m,
                char **log_out) {
  char *log = NULL;
  *m = NULL;
  int rc = M->load(f->d, source, code, strlen(code), options, m, &log);
  if (log != NULL)
    printf("    build log (%s):\n%s\n", accel_err_name(rc), log);
  if (log_out != NULL)
    *log_out = log;
  else
    free(log);
  return rc;
}

static be_kernel *kernel(be_module *m, const char *name, be_kernel_info *info) {
  be_kernel *k = NULL;
  be_kernel_info scratch;
  CHECK_OK(M->kernel(m, name, &k, info != NULL ? info : &scratch));
  CHECK(k != NULL);
  return k;
}

/* ---- arguments and launches ----------------------------------------------------------- */

static be_kernel_arg arg_buf(be_mem m, size_t offset) {
  return (be_kernel_arg){.kind = BE_PARAM_BUFFER, .mem = m, .offset = offset};
}

static be_kernel_arg arg_bits(uint32_t size, uint64_t bits) {
  return (be_kernel_arg){.kind = BE_PARAM_SCALAR, .size = size, .bits = bits};
}

static be_kernel_arg arg_f32(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return arg_bits(4, u);
}

static be_launch dims1d(uint32_t n, uint32_t block, const be_kernel_arg *a, uint32_t na) {
  be_launch l = {
      .grid = {(n + block - 1) / block, 1, 1}, .block = {block, 1, 1}, .nargs = na, .args = a};
  return l;
}

/* ---- sources -------------------------------------------------------------------------- */

static const char saxpy_src[] =
    "extern \"C\" __global__ void saxpy(float *y, float a, const float *x, int n)\n"
    "{\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n)\n"
    "    y[i] = a * x[i] + y[i];\n"
    "}\n";

/* Reverses each block's span through dynamic shared memory of `words` words per block. */
static const char reverse_src[] =
    "extern \"C\" __global__ void reverse(unsigned *p, unsigned words)\n"
    "{\n"
    "  extern __shared__ unsigned s[];\n"
    "  unsigned *base = p + (size_t)blockIdx.x * words;\n"
    "  for (unsigned i = threadIdx.x; i < words; i += blockDim.x)\n"
    "    s[i] = base[i];\n"
    "  __syncthreads();\n"
    "  for (unsigned i = threadIdx.x; i < words; i += blockDim.x)\n"
    "    base[i] = s[words - 1 - i];\n"
    "}\n";

/* Adds v to p[0 .. n). */
static const char add_ptx[] = ".version 7.0\n"
                              ".target sm_50\n"
                              ".address_size 64\n"
                              "\n"
                              ".visible .entry add_u32(\n"
                              "\t.param .u64 add_u32_p,\n"
                              "\t.param .u32 add_u32_v,\n"
                              "\t.param .u32 add_u32_n\n"
                              ")\n"
                              "{\n"
                              "\t.reg .pred %p<2>;\n"
                              "\t.reg .b32 %r<8>;\n"
                              "\t.reg .b64 %rd<5>;\n"
                              "\tld.param.u64 %rd1, [add_u32_p];\n"
                              "\tld.param.u32 %r1, [add_u32_v];\n"
                              "\tld.param.u32 %r2, [add_u32_n];\n"
                              "\tmov.u32 %r3, %ctaid.x;\n"
                              "\tmov.u32 %r4, %ntid.x;\n"
                              "\tmov.u32 %r5, %tid.x;\n"
                              "\tmad.lo.s32 %r6, %r3, %r4, %r5;\n"
                              "\tsetp.ge.u32 %p1, %r6, %r2;\n"
                              "\t@%p1 bra $L_done;\n"
                              "\tcvta.to.global.u64 %rd2, %rd1;\n"
                              "\tmul.wide.u32 %rd3, %r6, 4;\n"
                              "\tadd.s64 %rd4, %rd2, %rd3;\n"
                              "\tld.global.u32 %r7, [%rd4];\n"
                              "\tadd.s32 %r7, %r7, %r1;\n"
                              "\tst.global.u32 [%rd4], %r7;\n"
                              "$L_done:\n"
                              "\tret;\n"
                              "}\n";

/* Never ends: counts in host memory (a heartbeat the test can watch) for ever. */
static const char spin_src[] = "extern \"C\" __global__ void spin(volatile unsigned *beat)\n"
                               "{\n"
                               "  for (;;) {\n"
                               "    *beat = *beat + 1;\n"
                               "    __threadfence_system();\n"
                               "  }\n"
                               "}\n";

/* ---- saxpy ---------------------------------------------------------------------------- */

/* y[off .. off + n) = a x + y through the kernel, against float64 on the host. */
static void saxpy_check(fx *f, be_kernel *k) {
  size_t n = cuda_rnd_range(1, 1 << 20), off = cuda_rnd_range(0, 1000);
  float a = cuda_rnd_nz(0.25f, 4.0f);
  float *x = cuda_xmalloc(n * 4), *y = cuda_xmalloc(n * 4), *got = cuda_xmalloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    x[i] = cuda_rnd_nz(0.5f, 2.0f);
    y[i] = cuda_rnd_nz(0.5f, 2.0f);
  }
  be_mem dx = mem_new(f, (off + n) * 4), dy = mem_new(f, (off + n) * 4);
  CHECK_OK(B->copy_h2d(f->q, dx, off * 4, x, n * 4));
  CHECK_OK(B->copy_h2d(f->q, dy, off * 4, y, n * 4));
  be_kernel_arg args[] = {arg_buf(dy, off * 4), arg_f32(a), arg_buf(dx, off * 4),
                          arg_bits(4, (uint32_t)n)};
  be_launch l = dims1d((uint32_t)n, 256, args, 4);
  CHECK_OK(M->launch(f->q, k, &l));
  CHECK_OK(B->copy_d2h(f->q, got, dy, off * 4, n * 4));
  finish(f);
  for (size_t i = 0; i < n; i++) {
    double want = (double)a * x[i] + y[i];
    double tol = 2 * FLT_EPSILON * (fabs((double)a * x[i]) + fabs((double)y[i]));
    if (!(fabs(got[i] - want) <= tol))
      TEST_FAIL("saxpy[%zu] of %zu: got %a, want %a", i, n, (double)got[i], want);
  }
  B->mem_free(f->d, &dx);
  B->mem_free(f->d, &dy);
  free(x);
  free(y);
  free(got);
}

TEST(sources_and_limits) {
  fx f = fx_open_with(0);
  uint32_t s = M->sources(f.d);
  be_launch_limits l;
  M->limits(f.d, &l);
  printf("    sources 0x%x; block %u x %u x %u (%u threads), grid %" PRIu64 " x %" PRIu64
         " x %" PRIu64 ", shared %u bytes\n",
         s, l.max_block[0], l.max_block[1], l.max_block[2], l.max_threads_per_block, l.max_grid[0],
         l.max_grid[1], l.max_grid[2], l.max_shared_bytes);
  CHECK(s & SRC_PTX);
  CHECK_EQ(s & ~(SRC_CUDA | SRC_PTX), 0);
  CHECK_GE(l.max_threads_per_block, 1024);
  CHECK_GE(l.max_block[0], 1024);
  CHECK_GE(l.max_grid[0], 2147483647u);
  CHECK_GE(l.max_shared_bytes, 48 << 10);
  fx_close(&f);
}

TEST(saxpy_cuda_c) {
  fx f = fx_open_with(0);
  need_nvrtc(&f);
  be_module *m;
  CHECK_OK(load(&f, ACCEL_SOURCE_CUDA, saxpy_src, NULL, &m, NULL));
  be_kernel *k = kernel(m, "saxpy", NULL);
  for (int rep = 0; rep < 4; rep++)
    saxpy_check(&f, k);
  M->unload(m);
  fx_close(&f);
}

/* The caller's architecture is left alone: compute_75 gives PTX, which the driver compiles. */
TEST(saxpy_cuda_c_virtual_arch) {
  fx f = fx_open_with(0);
  need_nvrtc(&f);
  be_module *m;
  CHECK_OK(load(&f, ACCEL_SOURCE_CUDA, saxpy_src, "--gpu-architecture=compute_75", &m, NULL));
  saxpy_check(&f, kernel(m, "saxpy", NULL));
  M->unload(m);
  CHECK_OK(load(&f, ACCEL_SOURCE_CUDA, saxpy_src, "-arch compute_75 -DUNUSED=\"a b\"", &m, NULL));
  saxpy_check(&f, kernel(m, "saxpy", NULL));
  M->unload(m);
  fx_close(&f);
}

TEST(ptx_hand_written) {
  fx f = fx_open_with(0);
  be_module *m;
  CHECK_OK(load(&f, ACCEL_SOURCE_PTX, add_ptx, NULL, &m, NULL));
  be_kernel_info info;
  be_kernel *k = kernel(m, "add_u32", &info);
  size_t n = cuda_rnd_range(1, 100000);
  uint32_t v = (uint32_t)cuda_rnd64(), *h = cuda_xmalloc(n * 4), *got = cuda_xmalloc(n * 4);
  for (size_t i = 0; i < n; i++)
    h[i] = (uint32_t)cuda_rnd64();
  be_mem d = mem_new(&f, n * 4);
  CHECK_OK(B->copy_h2d(f.q, d, 0, h, n * 4));
  be_kernel_arg args[] = {arg_buf(d, 0), arg_bits(4, v), arg_bits(4, (uint32_t)n)};
  be_launch l = dims1d((uint32_t)n, 128, args, 3);
  CHECK_OK(M->launch(f.q, k, &l));
  CHECK_OK(B->copy_d2h(f.q, got, d, 0, n * 4));
  finish(&f);
  for (size_t i = 0; i < n; i++)
    CHECK_EQ(got[i], h[i] + v);
  B->mem_free(f.d, &d);
  M->unload(m);
  free(h);
  free(got);
  fx_close(&f);
}

/* ---- errors --------------------------------------------------------------------------- */

TEST(build_errors) {
  fx f = fx_open_with(0);
  need_nvrtc(&f);
  be_module *m = NULL;
  char *log = NULL;
  CHECK_ERR(load(&f, ACCEL_SOURCE_CUDA,
                 "extern \"C\" __global__ void k(int *p) { *p = undeclared_name; }", NULL, &m,
                 &log),
            ACCEL_EBUILD);
  CHECK(m == NULL);
  CHECK(log != NULL && strstr(log, "undeclared_name") != NULL && strstr(log, "error") != NULL);
  free(log);
  CHECK_ERR(load(&f, ACCEL_SOURCE_CUDA, saxpy_src, "--no-such-option", &m, &log), ACCEL_EBUILD);
  CHECK(log != NULL && strstr(log, "no-such-option") != NULL);
  free(log);
  CHECK_ERR(load(&f, ACCEL_SOURCE_CUDA, saxpy_src, "-DX=\"unbalanced", &m, &log), ACCEL_EBUILD);
  CHECK(log != NULL && strstr(log, "quote") != NULL);
  free(log);
  CHECK_ERR(load(&f, ACCEL_SOURCE_PTX, ".version 7.0\n.target sm_50\n.entry k( { bad }", NULL, &m,
                 &log),
            ACCEL_EBUILD);
  CHECK(log != NULL);
  free(log);
  CHECK_ERR(load(&f, ACCEL_SOURCE_PTX, add_ptx, "-O3", &m, &log), ACCEL_EBUILD);
  free(log);
  CHECK_ERR(load(&f, ACCEL_SOURCE_OPENCL, "__kernel void k() {}", NULL, &m, NULL), ACCEL_ENOTSUP);
  CHECK_ERR(load(&f, 99, "x", NULL, &m, NULL), ACCEL_ENOTSUP);
  /* A warning comes back on success. */
  CHECK_OK(load(&f, ACCEL_SOURCE_CUDA, "extern \"C\" __global__ void w() { int unused_var; }", NULL,
                &m, &log));
  CHECK(log != NULL && strstr(log, "unused_var") != NULL);
  free(log);
  M->unload(m);
  CHECK_OK(B->status(f.d)); /* none of it hurt the device */
  fx_close(&f);
}

TEST(kernel_names) {
  fx f = fx_open_with(0);
  be_module *m;
  CHECK_OK(load(&f, ACCEL_SOURCE_PTX, add_ptx, NULL, &m, NULL));
  be_kernel *k = NULL, *k2 = NULL;
  be_kernel_info info;
  CHECK_ERR(M->kernel(m, "no_such_kernel", &k, &info), ACCEL_ENOENT);
  CHECK_ERR(M->kernel(m, "", &k, &info), ACCEL_ENOENT);
  char longname[200];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  CHECK_ERR(M->kernel(m, longname, &k, &info), ACCEL_ENOENT);
  CHECK_OK(M->kernel(m, "add_u32", &k, &info));
  CHECK_OK(M->kernel(m, "add_u32", &k2, &info));
  CHECK_PTR_EQ(k, k2);
  M->unload(m);
  fx_close(&f);
}

static int driver_version(void) {
  int v = 0;
  CHECK_EQ(be_cu.cuDriverGetVersion(&v), CUDA_SUCCESS);
  return v;
}

TEST(kernel_params) {
  fx f = fx_open_with(0);
  need_nvrtc(&f);
  be_module *m;
  CHECK_OK(load(&f, ACCEL_SOURCE_CUDA,
                "extern \"C\" __global__ void scale(float *p, float a, int n)"
                " { if ((int)threadIdx.x < n) p[threadIdx.x] *= a; }\n"
                "extern \"C\" __global__ void none() {}\n"
                "struct pair { double a, b; };\n"
                "extern \"C\" __global__ void big(pair p, char c, double *out)"
                " { *out = p.a + p.b + c; }\n",
                NULL, &m, NULL));
  be_kernel_info info, none, big;
  kernel(m, "scale", &info);
  kernel(m, "none", &none);
  kernel(m, "big", &big);
  int v = driver_version();
  printf("    driver %d: scale has %u parameters", v, info.nparams);
  for (uint32_t i = 0; i < info.nparams && i < BE_LAUNCH_MAX_ARGS; i++)
    printf("%s%u bytes", i ? ", " : ": ", info.params[i].size);
  printf("\n");
  if (v < 12040) {
    CHECK_EQ(info.nparams, UINT32_MAX);
  } else {
    CHECK_EQ(info.nparams, 3);
    CHECK_EQ(info.params[0].size, 8);
    CHECK_EQ(info.params[1].size, 4);
    CHECK_EQ(info.params[2].size, 4);
    for (int i = 0; i < 3; i++)
      CHECK_EQ(info.params[i].kind, BE_PARAM_UNKNOWN);
    CHECK_EQ(none.nparams, 0);
    CHECK_EQ(big.nparams, 3);
    CHECK_EQ(big.params[0].size, 16);
    CHECK_EQ(big.params[1].size, 1);
    CHECK_EQ(big.params[2].size, 8);
  }
  M->unload(m);
  fx_close(&f);
}

TEST(launch_refusals) {
  fx f = fx_open_with(0);
  be_module *m;
  CHECK_OK(load(&f, ACCEL_SOURCE_PTX, add_ptx, NULL, &m, NULL));
  be_kernel_info info;
  be_kernel *k = kernel(m, "add_u32", &info);
  be_mem d = mem_new(&f, 4096);
  be_launch_limits lim;
  M->limits(f.d, &lim);
  be_kernel_arg ok[] = {arg_buf(d, 0), arg_bits(4, 1), arg_bits(4, 1024)};
  be_launch l = dims1d(1024, 128, ok, 3);
  CHECK_OK(M->launch(f.q, k, &l));
  be_launch bad = l;
  bad.grid[1] = 0;
  CHECK_ERR(M->launch(f.q, k, &bad), ACCEL_EINVAL);
  bad = l;
  bad.block[0] = lim.max_threads_per_block * 2;
  CHECK_ERR(M->launch(f.q, k, &bad), ACCEL_EINVAL);
  bad = l;
  bad.shared_bytes = lim.max_shared_bytes + 1;
  CHECK_ERR(M->launch(f.q, k, &bad), ACCEL_EINVAL);
  be_kernel_arg past[] = {arg_buf(d, 4097), arg_bits(4, 1), arg_bits(4, 1)};
  bad = dims1d(1, 1, past, 3);
  CHECK_ERR(M->launch(f.q, k, &bad), ACCEL_EINVAL);
  be_kernel_arg local[] = {arg_buf(d, 0), {.kind = BE_PARAM_LOCAL, .size = 64}, arg_bits(4, 1)};
  bad = dims1d(1, 1, local, 3);
  CHECK_ERR(M->launch(f.q, k, &bad), ACCEL_EINVAL);
  be_kernel_arg odd[] = {arg_buf(d, 0), arg_bits(3, 1), arg_bits(4, 1)};
  bad = dims1d(1, 1, odd, 3);
  CHECK_ERR(M->launch(f.q, k, &bad), ACCEL_EINVAL);
  if (info.nparams != UINT32_MAX) { /* where the driver tells the parameters */
    bad = dims1d(1, 1, ok, 2);
    CHECK_ERR(M->launch(f.q, k, &bad), ACCEL_EINVAL);
    be_kernel_arg wide[] = {arg_buf(d, 0), arg_bits(8, 1), arg_bits(4, 1)};
    bad = dims1d(1, 1, wide, 3);
    CHECK_ERR(M->launch(f.q, k, &bad), ACCEL_EINVAL);
  }
  uint32_t got = 0;
  CHECK_OK(B->copy_d2h(f.q, &got, d, 4092, 4));
  finish(&f);
  CHECK_EQ(B->status(f.d), 0);
  B->mem_free(f.d, &d);
  M->unload(m);
  fx_close(&f);
}

/* More dynamic shared memory than the default 48 KiB: the kernel is opened to it. */
TEST(dynamic_shared_memory) {
  fx f = fx_open_with(0);
  need_nvrtc(&f);
  be_launch_limits lim;
  M->limits(f.d, &lim);
  uint32_t words = (uint32_t)((lim.max_shared_bytes - 1024) / 4), blocks = 3;
  if (lim.max_shared_bytes <= (64u << 10)) {
    fx_close(&f);
    TEST_SKIP("the device offers no more than 64 KiB of shared memory per block");
  }
  be_module *m;
  CHECK_OK(load(&f, ACCEL_SOURCE_CUDA, reverse_src, NULL, &m, NULL));
  be_kernel *k = kernel(m, "reverse", NULL);
  size_t n = (size_t)words * blocks;
  uint32_t *h = cuda_xmalloc(n * 4), *got = cuda_xmalloc(n * 4);
  for (size_t i = 0; i < n; i++)
    h[i] = (uint32_t)cuda_rnd64();
  be_mem d = mem_new(&f, n * 4);
  CHECK_OK(B->copy_h2d(f.q, d, 0, h, n * 4));
  be_kernel_arg args[] = {arg_buf(d, 0), arg_bits(4, words)};
  be_launch l = {.grid = {blocks, 1, 1},
                 .block = {256, 1, 1},
                 .shared_bytes = words * 4,
                 .nargs = 2,
                 .args = args};
  CHECK_OK(M->launch(f.q, k, &l));
  CHECK_OK(B->copy_d2h(f.q, got, d, 0, n * 4));
  finish(&f);
  for (uint32_t b = 0; b < blocks; b++)
    for (uint32_t i = 0; i < words; i++)
      CHECK_EQ(got[(size_t)b * words + i], h[(size_t)b * words + words - 1 - i]);
  printf("    %u bytes of dynamic shared memory per block\n", words * 4);
  B->mem_free(f.d, &d);
  M->unload(m);
  free(h);
  free(got);
  fx_close(&f);
}

/* ---- the build caches ----------------------------------------------------------------- */

static char cache_root[256];

static int cache_files(void) {
  DIR *dir = opendir(getenv("ACCEL_CACHE_DIR"));
  int n = 0;
  for (struct dirent *e; dir != NULL && (e = readdir(dir)) != NULL;)
    n += strncmp(e->d_name, "cuda-", 5) == 0 && strstr(e->d_name, ".bin") != NULL;
  if (dir != NULL)
    closedir(dir);
  return n;
}

/* Overwrites bytes in the middle of every cache file: their checksums no longer match. */
static void cache_corrupt(void) {
  DIR *dir = opendir(getenv("ACCEL_CACHE_DIR"));
  CHECK(dir != NULL);
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (strncmp(e->d_name, "cuda-", 5) != 0)
      continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", getenv("ACCEL_CACHE_DIR"), e->d_name);
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL);
    CHECK_EQ(fseek(fp, 200, SEEK_SET), 0);
    CHECK_EQ(fwrite("garbage!", 1, 8, fp), 8);
    CHECK_EQ(fclose(fp), 0);
  }
  closedir(dir);
}

static be_cuda_module_stats stats(void) {
  be_cuda_module_stats s;
  be_cuda_module_cache_stats(&s);
  return s;
}

/* Loads src, checks it runs (saxpy), unloads; returns the milliseconds the load took. */
static double load_run(fx *f, const char *src, const char *options) {
  be_module *m;
  uint64_t t0 = test_now_ns();
  CHECK_OK(load(f, ACCEL_SOURCE_CUDA, src, options, &m, NULL));
  double ms = (double)(test_now_ns() - t0) / 1e6;
  saxpy_check(f, kernel(m, "saxpy", NULL));
  M->unload(m);
  return ms;
}

TEST(build_cache) {
  fx f = fx_open_with(0);
  need_nvrtc(&f);
  char src[1024];
  snprintf(src, sizeof src, "// unique %016" PRIx64 "\n%s", cuda_rnd64(), saxpy_src);
  be_cuda_module_stats s0 = stats();
  int files = cache_files();
  double cold = load_run(&f, src, NULL);
  be_cuda_module_stats s1 = stats();
  CHECK_EQ(s1.compiles, s0.compiles + 1);
  CHECK_EQ(cache_files(), files + 1);
  double warm = load_run(&f, src, NULL); /* the table in memory */
  be_cuda_module_stats s2 = stats();
  CHECK_EQ(s2.compiles, s1.compiles);
  CHECK_EQ(s2.memory_hits, s1.memory_hits + 1);
  be_cuda_module_cache_drop();
  double disk = load_run(&f, src, NULL); /* the disk */
  be_cuda_module_stats s3 = stats();
  CHECK_EQ(s3.compiles, s1.compiles);
  CHECK_EQ(s3.disk_hits, s2.disk_hits + 1);
  load_run(&f, src, "-DOTHER_OPTIONS"); /* another key */
  CHECK_EQ(stats().compiles, s1.compiles + 1);
  be_cuda_module_cache_drop();
  cache_corrupt();
  load_run(&f, src, NULL); /* a corrupt file: compiled again */
  be_cuda_module_stats s4 = stats();
  CHECK_EQ(s4.compiles, s1.compiles + 2);
  CHECK_EQ(s4.disk_hits, s3.disk_hits);
  printf("    load: compiled %.2f ms, from memory %.3f ms, from disk %.3f ms\n", cold, warm, disk);
  fx_close(&f);
}

/* ---- modules across resets and at close --------------------------------------------------- */

TEST(modules_across_reset) {
  fx f = fx_open_with(1);
  be_module *m, *left;
  CHECK_OK(load(&f, ACCEL_SOURCE_PTX, add_ptx, NULL, &m, NULL));
  CHECK_OK(load(&f, ACCEL_SOURCE_PTX, add_ptx, NULL, &left, NULL));
  be_kernel *k = kernel(m, "add_u32", NULL);
  CHECK_OK(B->inject_fault(f.d));
  be_kernel *k2 = NULL;
  be_kernel_info info;
  CHECK_OK(M->kernel(m, "add_u32", &k2, &info)); /* known names need no driver */
  CHECK_PTR_EQ(k, k2);
  B->queue_destroy(f.q);
  CHECK_OK(B->reset(f.d));
  CHECK_OK(B->queue_create(f.d, &f.q));
  be_mem d = mem_new(&f, 4096);
  be_kernel_arg args[] = {arg_buf(d, 0), arg_bits(4, 1), arg_bits(4, 1024)};
  be_launch l = dims1d(1024, 128, args, 3);
  CHECK_ERR(M->launch(f.q, k, &l), ACCEL_EDEVLOST); /* a module of the old context */
  CHECK_ERR(M->kernel(left, "no_lookup_yet", &k2, &info), ACCEL_EDEVLOST);
  M->unload(m); /* frees the record only */
  be_module *fresh;
  CHECK_OK(load(&f, ACCEL_SOURCE_PTX, add_ptx, NULL, &fresh, NULL));
  CHECK_OK(B->fill(f.q, d, 0, 1024, 4, 5));
  CHECK_OK(M->launch(f.q, kernel(fresh, "add_u32", NULL), &l));
  uint32_t got = 0;
  CHECK_OK(B->copy_d2h(f.q, &got, d, 4092, 4));
  finish(&f);
  CHECK_EQ(got, 6);
  B->mem_free(f.d, &d);
  /* `left` (old context) and `fresh` are left to close. */
  fx_close(&f);
}

/* ---- abort ---------------------------------------------------------------------------- */

typedef struct watch {
  atomic_int status, calls;
  atomic_uint_fast64_t at_ns;
} watch;

static void watch_fn(void *arg, int status) {
  watch *w = arg;
  atomic_store(&w->status, status);
  atomic_store(&w->at_ns, test_now_ns());
  atomic_fetch_add(&w->calls, 1);
}

typedef struct syncer {
  be_event *ev;
  atomic_int rc, done;
} syncer;

static void *sync_main(void *arg) {
  syncer *s = arg;
  atomic_store(&s->rc, B->event_sync(s->ev));
  atomic_store(&s->done, 1);
  return NULL;
}

/* Host memory the spinning kernel beats in, registered (portable, mapped) through another
 * device of the same GPU (a context of its own), so that the mapping outlives the context
 * the abort ends; the memory itself is the test's and stays readable whatever happens to
 * the registration (with ACCEL_CUDA_CONTEXT=primary the reset drops it). */
typedef struct heart {
  be_device *owner;
  volatile unsigned *beat;
  CUdeviceptr dptr; /* the same memory, as the kernel sees it */
} heart;

static heart heart_new(void) {
  heart h = {0};
  void *p = aligned_alloc(4096, 4096);
  CHECK(p != NULL);
  memset(p, 0, 4096);
  CHECK_OK(B->open(0, NULL, &h.owner));
  CHECK_EQ(be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(h.owner)), 0);
  CHECK_EQ(be_cu.cuMemHostRegister(p, 4096,
                                   CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
           0);
  CHECK_EQ(be_cu.cuMemHostGetDevicePointer(&h.dptr, p, 0), 0);
  h.beat = p;
  return h;
}

static bool beating(heart *h, unsigned ms) {
  unsigned b0 = *h->beat;
  test_sleep_ms(ms);
  return *h->beat != b0;
}

/* Left as it is while the kernel still writes to it: unmapping memory under a running kernel
 * would fault its context for real, which taints CUDA for the rest of the process. */
static void heart_free(heart *h) {
  if (beating(h, 20)) {
    printf("    (heartbeat memory left registered: the kernel still writes to it)\n");
    return;
  }
  be_cu.cuCtxSetCurrent((CUcontext)(uintptr_t)be_cuda_context(h->owner));
  be_cu.cuMemHostUnregister((void *)h->beat); /* fails harmlessly if a reset dropped it */
  B->close(h->owner);
  free((void *)h->beat);
}

/* Runs fn(d) on a thread; false if it has not returned after `ms` (the thread is left). */
typedef struct call {
  void (*fn)(be_device *);
  int (*fn_rc)(be_device *);
  be_device *d;
  atomic_int done, rc;
} call;

static void *call_main(void *arg) {
  call *c = arg;
  if (c->fn != NULL)
    c->fn(c->d);
  else
    atomic_store(&c->rc, c->fn_rc(c->d));
  atomic_store(&c->done, 1);
  return NULL;
}

static bool call_within(call *c, unsigned ms, double *took_ms) {
  pthread_t t;
  uint64_t t0 = test_now_ns();
  CHECK_EQ(pthread_create(&t, NULL, call_main, c), 0);
  while (!atomic_load(&c->done) && test_now_ns() - t0 < (uint64_t)ms * 1000000u)
    test_sleep_ms(1);
  *took_ms = (double)(test_now_ns() - t0) / 1e6;
  if (!atomic_load(&c->done))
    return false;
  pthread_join(t, NULL);
  return true;
}

/* A kernel that never ends, a callback and an event_sync behind it, then abort(): what the
 * callers hear and how fast, and that the queue goes without waiting. Leaves the device with
 * no queue, the kernel (maybe) still running. */
static void spin_and_abort(fx *f, heart *h) {
  be_module *m;
  CHECK_OK(load(f, ACCEL_SOURCE_CUDA, spin_src, NULL, &m, NULL));
  be_kernel *k = kernel(m, "spin", NULL);
  be_kernel_arg arg = arg_bits(8, h->dptr); /* CUDA cannot tell it from a pointer */
  be_launch l = dims1d(1, 1, &arg, 1);
  watch w = {0};
  syncer s = {0};
  CHECK_OK(M->launch(f->q, k, &l));
  CHECK_OK(B->host_callback(f->q, watch_fn, &w));
  CHECK_OK(B->event_create(f->d, &s.ev));
  CHECK_OK(B->event_record(s.ev, f->q));
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, sync_main, &s), 0);
  for (uint64_t t0 = test_now_ms(); *h->beat == 0;)
    if (test_now_ms() - t0 > 5000)
      TEST_FAIL("the spinning kernel never started");
  test_sleep_ms(200);
  CHECK_EQ(atomic_load(&w.calls), 0);
  CHECK_EQ(atomic_load(&s.done), 0);
  CHECK_ERR(B->event_query(s.ev), RT_PENDING);
  uint64_t t0 = test_now_ns();
  B->abort(f->d);
  double abort_ms = (double)(test_now_ns() - t0) / 1e6;
  while (atomic_load(&w.calls) == 0 || !atomic_load(&s.done))
    if (test_now_ns() - t0 > 5000000000u)
      TEST_FAIL("after abort: callback called %d times, event_sync %s", atomic_load(&w.calls),
                atomic_load(&s.done) ? "returned" : "still waiting");
  pthread_join(t, NULL);
  printf("    abort returned in %.2f ms; callback heard %s after %.2f ms; event_sync %s\n",
         abort_ms, accel_err_name(atomic_load(&w.status)),
         (double)(atomic_load(&w.at_ns) - t0) / 1e6, accel_err_name(atomic_load(&s.rc)));
  CHECK_EQ(atomic_load(&w.calls), 1);
  CHECK_ERR(atomic_load(&w.status), ACCEL_EDEVLOST);
  CHECK_ERR(atomic_load(&s.rc), ACCEL_EDEVLOST);
  CHECK_ERR(B->event_query(s.ev), ACCEL_EDEVLOST);
  CHECK_ERR(B->status(f->d), ACCEL_EDEVLOST);
  CHECK_ERR(M->launch(f->q, k, &l), ACCEL_EDEVLOST);
  B->event_destroy(s.ev);
  M->unload(m);
  printf("    kernel still running after abort: %s\n", beating(h, 50) ? "yes" : "no");
  t0 = test_now_ns();
  B->queue_destroy(f->q);
  f->q = NULL;
  printf("    queue_destroy: %.2f ms\n", (double)(test_now_ns() - t0) / 1e6);
}

/* Saxpy on a fresh queue of d. */
static void serves(be_device *d) {
  fx g = {.d = d};
  CHECK_OK(B->queue_create(d, &g.q));
  be_module *m;
  CHECK_OK(load(&g, ACCEL_SOURCE_CUDA, saxpy_src, NULL, &m, NULL));
  saxpy_check(&g, kernel(m, "saxpy", NULL));
  M->unload(m);
  B->queue_destroy(g.q);
}

TEST(abort_then_reset) {
  fx f = fx_open_with(0);
  need_nvrtc(&f);
  heart h = heart_new();
  spin_and_abort(&f, &h);
  call c = {.fn_rc = B->reset, .d = f.d};
  double ms = 0;
  if (!call_within(&c, 10000, &ms))
    TEST_FAIL("reset after abort has not returned in 10 s (kernel beating: %s)",
              beating(&h, 50) ? "yes" : "no");
  printf("    reset: %s in %.1f ms; kernel still running after it: %s\n",
         accel_err_name(atomic_load(&c.rc)), ms, beating(&h, 100) ? "yes" : "no");
  CHECK_OK(atomic_load(&c.rc));
  CHECK_OK(B->status(f.d));
  uint64_t t0 = test_now_ns();
  serves(f.d);
  printf("    a saxpy module loaded and run after reset: %.1f ms\n",
         (double)(test_now_ns() - t0) / 1e6);
  B->close(f.d);
  heart_free(&h);
}

TEST(abort_then_close_and_open) {
  fx f = fx_open_with(0);
  need_nvrtc(&f);
  heart h = heart_new();
  spin_and_abort(&f, &h);
  call c = {.fn = B->close, .d = f.d};
  double ms = 0;
  if (!call_within(&c, 10000, &ms))
    TEST_FAIL("close after abort has not returned in 10 s (kernel beating: %s)",
              beating(&h, 50) ? "yes" : "no");
  printf("    close: %.1f ms; kernel still running after it: %s\n", ms,
         beating(&h, 100) ? "yes" : "no");
  be_device *d = NULL;
  uint64_t t0 = test_now_ns();
  int rc = B->open(0, NULL, &d);
  printf("    open again: %s in %.1f ms\n", accel_err_name(rc), (double)(test_now_ns() - t0) / 1e6);
  CHECK_OK(rc);
  t0 = test_now_ns();
  serves(d);
  printf("    a saxpy module loaded and run beside it: %.1f ms\n",
         (double)(test_now_ns() - t0) / 1e6);
  B->close(d);
  heart_free(&h);
}

static const test_case tests[] = {
    TEST_CASE(sources_and_limits),
    TEST_CASE(saxpy_cuda_c),
    TEST_CASE(saxpy_cuda_c_virtual_arch),
    TEST_CASE(ptx_hand_written),
    TEST_CASE(build_errors),
    TEST_CASE(kernel_names),
    TEST_CASE(kernel_params),
    TEST_CASE(launch_refusals),
    TEST_CASE(dynamic_shared_memory),
    TEST_CASE(build_cache),
    TEST_CASE(modules_across_reset),
    TEST_CASE(abort_then_reset),
    TEST_CASE(abort_then_close_and_open),
};

int main(int argc, char **argv) {
  char why[128] = "";
  int count = 0;
  if (B->probe(&count, why, sizeof why) != 0 || count == 0)
    return cuda_test_skip(why[0] ? why : "no device");
  M = B->module;
  if (M == NULL || M->version != BE_MODULE_VERSION) {
    fprintf(stderr, "the cuda backend has no module package of version %u\n", BE_MODULE_VERSION);
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach a log even if the watchdog ends the run */
  cuda_test_seed();
  snprintf(cache_root, sizeof cache_root, "/tmp/accel-cuda-module-test-XXXXXX");
  if (mkdtemp(cache_root) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  setenv("ACCEL_CACHE_DIR", cache_root, 1);
  int rc = test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_root);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", cache_root);
  return rc;
}
