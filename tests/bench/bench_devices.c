/* accel — benchmarks of the device API (embedded mode, CPU backend).
 *
 * Every figure is a ratio against a peer measured in the same run, because the machines are
 * shared and noisy (docs/PERFORMANCE.md, docs/DECISIONS.md "Measured floors"). Inputs are random,
 * never zeros. Each benchmark runs warm-up work first, then `reps` measured repetitions in which
 * accel and its peer alternate (so that noise hits both alike); tables report medians.
 *
 *   1. sgemm: accel_sgemm on device-resident buffers (written once, then K sgemm + accel_finish
 *      per repetition) versus cblas_sgemm (OpenBLAS, the same library the CPU backend calls)
 *      on the same data, n = 256, 512, 1024, square, column-major, alpha 1, beta 0.
 *      Target: accel GFLOP/s / OpenBLAS GFLOP/s >= 0.95 for n >= 512.
 *  1b. dgemm: the same with accel_gemm on F64 buffers (ACCEL_MATH_DEFAULT) versus cblas_dgemm,
 *      n = 512, 1024; same target.
 *   2. per-op overhead of a tiny op, in three patterns:
 *        indep  N ops on N distinct 1-element buffers (accel_fill_u32), then accel_finish
 *        chain  N accel_saxpy(n = 1) reading x and read-writing the same y, then accel_finish
 *        wait   one accel_fill_u32 on a 1-element buffer, accel_future_wait, repeated
 *      versus (a) a direct function call doing the same work, and (b) StarPU: the empty task
 *      (a codelet with an empty CPU function, CPU workers only): indep = N tasks without data
 *      then starpu_task_wait_for_all; chain = N tasks on one registered vector handle in
 *      STARPU_RW (implicit data dependencies); wait = one task (detach = 0), starpu_task_wait.
 *      Also printed, not targeted: StarPU with the same data accesses as accel's ops (indep:
 *      one STARPU_W handle per task; chain: x STARPU_R + y STARPU_RW; wait: one STARPU_W handle).
 *      Target: accel / StarPU <= 0.5 in each pattern.
 *   3. RNG fill bandwidth per core: accel_rng_fill (UNIFORM) into a device-resident 64 MiB
 *      buffer versus memset of a host buffer of the same size (both one thread).
 *   4. completion strategies: latency of submit + wait of a tiny op (accel_fill_u32, 1 element)
 *      with completion = callback, sync and poll (accel_set_completion, per op; ops/4 ops per
 *      strategy per repetition); median, p10, p90, p99, mean and the share of ops over 1 ms,
 *      over every op of every repetition.
 *   5. tracing: the indep and wait patterns of 2 in a context without a trace and in one with
 *      ACCEL_TRACE set, alternating: the cost of a trace that records (its off cost is three
 *      pointer tests per op).
 *
 * Usage: bench-devices [--quick] [--json] [--reps N] [--ops N] [--only LIST] [--rng-mib N]
 *   --quick      fewer repetitions and ops (a run well under a minute)
 *   --json       the figures as one JSON object on stdout (the tables go to stderr)
 *   --reps N     measured repetitions per benchmark (default 9, quick 5)
 *   --ops N      ops per repetition in benchmarks 2 and 4 (default 4000, quick 1500)
 *   --only LIST  comma-separated subset of sgemm,dgemm,overhead,rng,completion,trace
 *   --rng-mib N  size of the RNG / memset buffer in MiB (default 64)
 *   --profile P  only accel's side of overhead pattern P (indep, chain, wait), for perf or
 *                callgrind; --completion callback|sync|poll sets its ops' strategy
 * Environment: ACCEL_BENCH_REPS, ACCEL_BENCH_OPS, ACCEL_BENCH_QUICK=1, ACCEL_BENCH_JSON=1
 * (argv wins); STARPU_NCPU, STARPU_SCHED are StarPU's own (default here: nproc - 1 CPU
 * workers, see starpu_start; StarPU's own scheduler choice).
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "accel/accel.h"

#ifdef BENCH_HAVE_STARPU
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wcast-align"
#include <starpu.h>
#pragma GCC diagnostic pop
#endif

#define TARGET_GEMM_RATIO 0.95
#define TARGET_STARPU_RATIO 0.5

/* ---------------------------------------------------------------------------------------
 * Options, output */

typedef struct bench_opts {
  int json, quick;
  int run_sgemm, run_dgemm, run_overhead, run_rng, run_completion, run_trace;
  uint32_t reps;
  uint32_t ops;
  uint32_t rng_mib;
  int profile; /* --profile PAT: only accel's side of one overhead pattern (for perf), or -1 */
  accel_completion completion; /* --completion S: the strategy of --profile's ops */
} bench_opts;

static FILE *out; /* the human-readable tables: stdout, or stderr with --json */

typedef struct result {
  char name[64];
  double value;
  const char *unit;
} result;

#define MAX_RESULTS 128
static result results[MAX_RESULTS];
static int nresults;

static void record(const char *name, double value, const char *unit) {
  if (nresults >= MAX_RESULTS)
    return;
  result *r = &results[nresults++];
  snprintf(r->name, sizeof r->name, "%s", name);
  r->value = value;
  r->unit = unit;
}

static void die(const char *what, int err) {
  fprintf(stderr, "bench-devices: %s: %s (%d)\n", what, accel_strerror(err), err);
  exit(2);
}

static void check(const char *what, int rc) {
  if (rc != 0)
    die(what, rc);
}

static unsigned long busy_retries; /* submissions refused with ACCEL_EBUSY and retried */

/* Submits, retrying while the session's mailbox is full (backpressure, nothing queued). */
#define SUBMIT(what, expr)                                                                         \
  do {                                                                                             \
    int rc_;                                                                                       \
    while ((rc_ = (expr)) == ACCEL_EBUSY) {                                                        \
      busy_retries++;                                                                              \
      sched_yield();                                                                               \
    }                                                                                              \
    check(what, rc_);                                                                              \
  } while (0)

static uint64_t parse_u64(const char *name, const char *s) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-') {
    fprintf(stderr, "bench-devices: %s wants a non-negative integer, got '%s'\n", name, s);
    exit(2);
  }
  return (uint64_t)v;
}

static void parse_only(bench_opts *o, const char *list) {
  o->run_sgemm = o->run_dgemm = o->run_overhead = o->run_rng = o->run_completion = o->run_trace = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  char *save = NULL;
  for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
    if (strcmp(w, "sgemm") == 0)
      o->run_sgemm = 1;
    else if (strcmp(w, "dgemm") == 0)
      o->run_dgemm = 1;
    else if (strcmp(w, "overhead") == 0)
      o->run_overhead = 1;
    else if (strcmp(w, "rng") == 0)
      o->run_rng = 1;
    else if (strcmp(w, "completion") == 0)
      o->run_completion = 1;
    else if (strcmp(w, "trace") == 0)
      o->run_trace = 1;
    else {
      fprintf(stderr,
              "bench-devices: --only wants sgemm,dgemm,overhead,rng,completion,trace; got '%s'\n",
              w);
      exit(2);
    }
  }
}

static int parse_pattern(const char *s) {
  static const char *const names[] = {"indep", "chain", "wait"};
  for (int p = 0; p < 3; p++)
    if (strcmp(s, names[p]) == 0)
      return p;
  fprintf(stderr, "bench-devices: --profile wants indep, chain or wait; got '%s'\n", s);
  exit(2);
}

static accel_completion parse_completion(const char *s) {
  if (strcmp(s, "callback") == 0)
    return ACCEL_COMPLETION_CALLBACK;
  if (strcmp(s, "sync") == 0)
    return ACCEL_COMPLETION_SYNC;
  if (strcmp(s, "poll") == 0)
    return ACCEL_COMPLETION_POLL;
  fprintf(stderr, "bench-devices: --completion wants callback, sync or poll; got '%s'\n", s);
  exit(2);
}

static void usage(void) {
  fprintf(stderr, "usage: bench-devices [--quick] [--json] [--reps N] [--ops N] "
                  "[--only sgemm,dgemm,overhead,rng,completion] [--rng-mib N] "
                  "[--profile indep|chain|wait [--completion callback|sync|poll]]\n");
  exit(2);
}

static void parse_opts(bench_opts *o, int argc, char **argv) {
  *o = (bench_opts){.run_sgemm = 1,
                    .run_dgemm = 1,
                    .run_overhead = 1,
                    .run_rng = 1,
                    .run_completion = 1,
                    .run_trace = 1,
                    .rng_mib = 64,
                    .profile = -1};
  const char *e;
  long reps = -1, ops = -1;
  if ((e = getenv("ACCEL_BENCH_QUICK")) && *e && strcmp(e, "0") != 0)
    o->quick = 1;
  if ((e = getenv("ACCEL_BENCH_JSON")) && *e && strcmp(e, "0") != 0)
    o->json = 1;
  if ((e = getenv("ACCEL_BENCH_REPS")) && *e)
    reps = (long)parse_u64("ACCEL_BENCH_REPS", e);
  if ((e = getenv("ACCEL_BENCH_OPS")) && *e)
    ops = (long)parse_u64("ACCEL_BENCH_OPS", e);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--quick") == 0)
      o->quick = 1;
    else if (strcmp(a, "--json") == 0)
      o->json = 1;
    else if (strcmp(a, "--reps") == 0 && i + 1 < argc)
      reps = (long)parse_u64("--reps", argv[++i]);
    else if (strcmp(a, "--ops") == 0 && i + 1 < argc)
      ops = (long)parse_u64("--ops", argv[++i]);
    else if (strcmp(a, "--only") == 0 && i + 1 < argc)
      parse_only(o, argv[++i]);
    else if (strcmp(a, "--rng-mib") == 0 && i + 1 < argc)
      o->rng_mib = (uint32_t)parse_u64("--rng-mib", argv[++i]);
    else if (strcmp(a, "--profile") == 0 && i + 1 < argc)
      o->profile = parse_pattern(argv[++i]);
    else if (strcmp(a, "--completion") == 0 && i + 1 < argc)
      o->completion = parse_completion(argv[++i]);
    else
      usage();
  }
  o->reps = reps > 0 ? (uint32_t)reps : o->quick ? 5 : 9;
  o->ops = ops > 0 ? (uint32_t)ops : o->quick ? 1500 : 4000;
  if (o->ops > 12000)
    o->ops = 12000; /* below the session's mailbox: "submit N" never meets backpressure */
  if (o->rng_mib == 0)
    o->rng_mib = 1;
}

/* ---------------------------------------------------------------------------------------
 * Time, statistics, random inputs */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of v[0..n), nearest rank; sorts v. */
static double quantile(double *v, size_t n, double q) {
  if (n == 0)
    return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

static double median(double *v, size_t n) {
  return quantile(v, n, 0.5);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t splitmix64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1), never exactly 0 in practice; F32 or F64. */
static void fill_random(void *v, accel_dtype dt, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double x = (double)(splitmix64() >> 11) * 0x1.0p-52 - 1.0;
    if (dt == ACCEL_F32)
      ((float *)v)[i] = (float)x;
    else
      ((double *)v)[i] = x;
  }
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "bench-devices: out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}

/* The process's CPU time (every thread), seconds. */
static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#ifdef BENCH_HAVE_STARPU
/* The process's CPU time per wall time over 100 ms of sleep: what its idle threads burn. */
static double idle_cpu_share(void) {
  double c0 = cpu_s(), w0 = now_s();
  struct timespec nap = {0, 100 * 1000 * 1000};
  nanosleep(&nap, NULL);
  return (cpu_s() - c0) / (now_s() - w0);
}
#endif

static double ratio(double a, double b) {
  return b > 0 ? a / b : NAN;
}

/* ---------------------------------------------------------------------------------------
 * 1. sgemm, 1b. dgemm */

/* One call on each side: accel's on the device buffers (F32 through accel_sgemm, F64 through
 * accel_gemm), OpenBLAS's on the host arrays. */
static void gemm_accel(accel_ctx *ctx, accel_dtype dt, size_t n, accel_buffer A, accel_buffer B,
                       accel_buffer C) {
  if (dt == ACCEL_F32)
    SUBMIT("sgemm", accel_sgemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0f, A, n, B, n,
                                0.0f, C, n, NULL));
  else
    SUBMIT("gemm", accel_gemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0, A, n, B, n, 0.0,
                              C, n, ACCEL_MATH_DEFAULT, NULL));
}

static void gemm_blas(accel_dtype dt, size_t n, const void *a, const void *b, void *c) {
  blasint N = (blasint)n;
  if (dt == ACCEL_F32)
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
  else
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0, a, N, b, N, 0.0, c, N);
}

static double elem(const void *v, accel_dtype dt, size_t i) {
  return dt == ACCEL_F32 ? (double)((const float *)v)[i] : ((const double *)v)[i];
}

/* One table row: n x n, K calls per repetition and side, `reps` alternating repetitions. */
static void gemm_row(accel_ctx *ctx, accel_dtype dt, size_t n, double flop_target, uint32_t reps) {
  const char *op = dt == ACCEL_F32 ? "sgemm" : "dgemm";
  size_t nn = n * n, es = dt == ACCEL_F32 ? sizeof(float) : sizeof(double);
  double flop = 2.0 * (double)n * (double)n * (double)n;
  uint32_t K = (uint32_t)(flop_target / flop + 0.5);
  if (K < 1)
    K = 1;
  void *a = xmalloc(nn * es), *b = xmalloc(nn * es), *c = xmalloc(nn * es);
  void *c_acc = xmalloc(nn * es);
  fill_random(a, dt, nn);
  fill_random(b, dt, nn);
  fill_random(c, dt, nn);
  accel_buffer A, B, C;
  check("buffer_create", accel_buffer_create(ctx, dt, nn, &A));
  check("buffer_create", accel_buffer_create(ctx, dt, nn, &B));
  check("buffer_create", accel_buffer_create(ctx, dt, nn, &C));
  SUBMIT("write", accel_write(ctx, A, 0, a, nn, NULL));
  SUBMIT("write", accel_write(ctx, B, 0, b, nn, NULL));
  SUBMIT("write", accel_write(ctx, C, 0, c, nn, NULL));
  check("finish", accel_finish(ctx, -1));
  /* Warm-up: moves A and B to the device once (then they stay), warms OpenBLAS's pool. */
  for (int w = 0; w < 2; w++) {
    gemm_accel(ctx, dt, n, A, B, C);
    gemm_blas(dt, n, a, b, c);
  }
  check("finish", accel_finish(ctx, -1));
  accel_transfer_stats st0;
  accel_transfer_stats_get(ctx, &st0);

  double *ga = xmalloc(reps * sizeof *ga), *gb = xmalloc(reps * sizeof *gb);
  for (uint32_t r = 0; r < reps; r++) {
    for (int side = 0; side < 2; side++) {
      int accel_side = (side + (int)r) % 2 == 0; /* alternate who goes first */
      double t0 = now_s();
      if (accel_side) {
        for (uint32_t k = 0; k < K; k++)
          gemm_accel(ctx, dt, n, A, B, C);
        check("finish", accel_finish(ctx, -1));
        ga[r] = flop * K / (now_s() - t0) * 1e-9;
      } else {
        for (uint32_t k = 0; k < K; k++)
          gemm_blas(dt, n, a, b, c);
        gb[r] = flop * K / (now_s() - t0) * 1e-9;
      }
    }
  }
  accel_transfer_stats st1;
  accel_transfer_stats_get(ctx, &st1);
  if (st1.host_to_device != st0.host_to_device || st1.device_to_host != st0.device_to_host) {
    fprintf(stderr, "bench-devices: %s moved data during timing (h2d %llu, d2h %llu)\n", op,
            (unsigned long long)(st1.host_to_device - st0.host_to_device),
            (unsigned long long)(st1.device_to_host - st0.device_to_host));
    exit(1);
  }
  /* Same inputs, same library: the results agree to rounding (threads may split k); the
   * bound scales with the type's epsilon. */
  accel_future *f;
  SUBMIT("read", accel_read(ctx, C, 0, c_acc, nn, &f));
  check("read wait", accel_future_wait(f, -1));
  accel_future_release(f);
  double maxdiff = 0;
  for (size_t i = 0; i < nn; i++)
    maxdiff = fmax(maxdiff, fabs(elem(c_acc, dt, i) - elem(c, dt, i)));
  if (maxdiff > (dt == ACCEL_F32 ? 1e-3 : 1e-11) * (double)n) {
    fprintf(stderr, "bench-devices: %s n=%zu: accel and OpenBLAS differ by %g\n", op, n, maxdiff);
    exit(1);
  }
  double mga = median(ga, reps), mgb = median(gb, reps), q = ratio(mga, mgb);
  double best = ratio(ga[reps - 1], gb[reps - 1]); /* sorted by median() */
  fprintf(out, "%6zu %4u %12.1f %13.1f %8.3f %8s %10.3f %10.2g%s\n", n, K, mga, mgb, q,
          n >= 512 ? ">=0.95" : "-", best, maxdiff,
          n >= 512 ? (q >= TARGET_GEMM_RATIO ? "  met" : "  MISSED") : "");
  char name[64];
  snprintf(name, sizeof name, "%s_%zu_accel_gflops", op, n);
  record(name, mga, "GFLOP/s");
  snprintf(name, sizeof name, "%s_%zu_openblas_gflops", op, n);
  record(name, mgb, "GFLOP/s");
  snprintf(name, sizeof name, "%s_%zu_ratio", op, n);
  record(name, q, "x");
  free(ga);
  free(gb);
  accel_buffer_destroy(ctx, A);
  accel_buffer_destroy(ctx, B);
  accel_buffer_destroy(ctx, C);
  free(a);
  free(b);
  free(c);
  free(c_acc);
}

static void bench_gemm(accel_ctx *ctx, const bench_opts *o, accel_dtype dt) {
  static const size_t sizes[] = {256, 512, 1024};
  const double flop_target = o->quick ? 1.0e9 : 2.5e9; /* per repetition, each side */
  const uint32_t reps = 2 * o->reps; /* compute-bound and short: twice the repetitions */
  fprintf(out, "\n== %s: accel (device-resident buffers) vs cblas_%s, same run ==\n",
          dt == ACCEL_F32 ? "1. sgemm" : "1b. dgemm", dt == ACCEL_F32 ? "sgemm" : "dgemm");
  fprintf(out, "OpenBLAS: %s; %d thread(s)\n", openblas_get_config(), openblas_get_num_threads());
  fprintf(out, "medians of %u repetitions (best-of ratio for information)\n", reps);
  fprintf(out, "%6s %4s %12s %13s %8s %8s %10s %10s\n", "n", "K", "accel GF/s", "OpenBLAS GF/s",
          "ratio", "target", "best ratio", "max |diff|");
  /* dgemm from n = 512: its rows are the targeted ones. */
  for (size_t si = dt == ACCEL_F64; si < sizeof sizes / sizeof sizes[0]; si++)
    gemm_row(ctx, dt, sizes[si], flop_target, reps);
}

/* ---------------------------------------------------------------------------------------
 * 2. per-op overhead */

/* The direct calls: the same work as the tiny ops, through a pointer the compiler cannot
 * see through, so each is a real call. */
static void direct_fill(uint32_t *dst, size_t n, uint32_t v) {
  for (size_t i = 0; i < n; i++)
    dst[i] = v;
}

static void direct_saxpy(size_t n, float alpha, const float *x, float *y) {
  for (size_t i = 0; i < n; i++)
    y[i] += alpha * x[i];
}

static void (*volatile direct_fill_fn)(uint32_t *, size_t, uint32_t) = direct_fill;
static void (*volatile direct_saxpy_fn)(size_t, float, const float *, float *) = direct_saxpy;

enum { PAT_INDEP, PAT_CHAIN, PAT_WAIT, PAT_COUNT };
static const char *const pat_name[PAT_COUNT] = {"indep", "chain", "wait"};
static const char *const pat_desc[PAT_COUNT] = {
    "independent: submit N, then wait all",
    "dependent chain: N read-writes of one buffer",
    "submit-and-wait: one op, wait, repeat",
};

typedef struct overhead_env {
  accel_ctx *ctx;
  uint32_t n;         /* ops per repetition */
  accel_buffer *bufs; /* n distinct 1-element u32 buffers (indep) */
  accel_buffer one, x, y;
  uint32_t *host_u32; /* n elements: direct calls' buffers */
  float hx, hy;
} overhead_env;

/* Seconds per op of one repetition of `pat` through accel. */
static double accel_pattern(overhead_env *e, int pat) {
  accel_ctx *ctx = e->ctx;
  double t0 = now_s();
  switch (pat) {
  case PAT_INDEP:
    for (uint32_t i = 0; i < e->n; i++)
      SUBMIT("fill", accel_fill_u32(ctx, 0, e->bufs[i], i + 1, NULL));
    check("finish", accel_finish(ctx, -1));
    break;
  case PAT_CHAIN:
    for (uint32_t i = 0; i < e->n; i++)
      SUBMIT("saxpy", accel_saxpy(ctx, 0, 1, 1e-3f, e->x, e->y, NULL));
    check("finish", accel_finish(ctx, -1));
    break;
  case PAT_WAIT:
    for (uint32_t i = 0; i < e->n; i++) {
      accel_future *f;
      SUBMIT("fill", accel_fill_u32(ctx, 0, e->one, i + 1, &f));
      check("wait", accel_future_wait(f, -1));
      accel_future_release(f);
    }
    break;
  }
  return (now_s() - t0) / e->n;
}

/* Seconds per call of the direct function; `reps` times more calls than ops, to be timeable. */
static double direct_pattern(overhead_env *e, int pat) {
  const uint32_t m = e->n * 100;
  double t0 = now_s();
  switch (pat) {
  case PAT_INDEP:
    for (uint32_t i = 0; i < m; i++)
      direct_fill_fn(&e->host_u32[i % e->n], 1, i + 1);
    break;
  case PAT_CHAIN:
    for (uint32_t i = 0; i < m; i++)
      direct_saxpy_fn(1, 1e-3f, &e->hx, &e->hy);
    break;
  case PAT_WAIT:
    for (uint32_t i = 0; i < m; i++)
      direct_fill_fn(&e->host_u32[0], 1, i + 1);
    break;
  }
  return (now_s() - t0) / m;
}

#ifdef BENCH_HAVE_STARPU
static void starpu_empty(void *buffers[], void *arg) {
  (void)buffers;
  (void)arg;
}

static struct starpu_codelet cl_none = {
    .where = STARPU_CPU, .cpu_funcs = {starpu_empty}, .nbuffers = 0, .name = "empty"};
static struct starpu_codelet cl_rw = {.where = STARPU_CPU,
                                      .cpu_funcs = {starpu_empty},
                                      .nbuffers = 1,
                                      .modes = {STARPU_RW},
                                      .name = "empty_rw"};
static struct starpu_codelet cl_w = {.where = STARPU_CPU,
                                     .cpu_funcs = {starpu_empty},
                                     .nbuffers = 1,
                                     .modes = {STARPU_W},
                                     .name = "empty_w"};
static struct starpu_codelet cl_r_rw = {.where = STARPU_CPU,
                                        .cpu_funcs = {starpu_empty},
                                        .nbuffers = 2,
                                        .modes = {STARPU_R, STARPU_RW},
                                        .name = "empty_r_rw"};

typedef struct starpu_env {
  uint32_t n;
  starpu_data_handle_t *h; /* n handles on 1-element vectors (indep with data) */
  starpu_data_handle_t x, y;
  uint32_t *hv;
  float vx, vy;
} starpu_env;

static void starpu_check(const char *what, int rc) {
  if (rc != 0) {
    fprintf(stderr, "bench-devices: starpu %s: %d\n", what, rc);
    exit(2);
  }
}

static void starpu_submit(struct starpu_codelet *cl, starpu_data_handle_t h0,
                          starpu_data_handle_t h1, int wait) {
  struct starpu_task *t = starpu_task_create();
  t->cl = cl;
  if (cl->nbuffers > 0)
    t->handles[0] = h0;
  if (cl->nbuffers > 1)
    t->handles[1] = h1;
  if (wait)
    t->detach = 0;
  starpu_check("task_submit", starpu_task_submit(t));
  if (wait)
    starpu_check("task_wait", starpu_task_wait(t)); /* frees it (destroy is set) */
}

/* Seconds per task of one repetition of `pat`; with_data: the same data accesses as accel's
 * op (else the empty task: no data in indep and wait, one RW handle in chain). */
static double starpu_pattern(starpu_env *e, int pat, int with_data) {
  double t0 = now_s();
  switch (pat) {
  case PAT_INDEP:
    for (uint32_t i = 0; i < e->n; i++)
      starpu_submit(with_data ? &cl_w : &cl_none, e->h[i], NULL, 0);
    starpu_check("wait_for_all", starpu_task_wait_for_all());
    break;
  case PAT_CHAIN:
    for (uint32_t i = 0; i < e->n; i++) {
      if (with_data)
        starpu_submit(&cl_r_rw, e->x, e->y, 0);
      else
        starpu_submit(&cl_rw, e->y, NULL, 0);
    }
    starpu_check("wait_for_all", starpu_task_wait_for_all());
    break;
  case PAT_WAIT:
    for (uint32_t i = 0; i < e->n; i++)
      starpu_submit(with_data ? &cl_w : &cl_none, e->h[0], NULL, 1);
    break;
  }
  return (now_s() - t0) / e->n;
}

static int starpu_start(starpu_env *e, uint32_t n) {
  setenv("STARPU_SILENT", "1", 0);
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncuda = 0;
  conf.nopencl = 0;
  conf.nmic = 0;
  conf.nmpi_ms = 0;
  /* StarPU's workers poll for tasks in a tight loop. With one worker per core (its default)
   * they fight the submitting thread for the cores; one core left to the submitter is StarPU's
   * best configuration on a small machine (measured: 2 cores, 1 worker), so that is the peer's
   * default here. STARPU_NCPU overrides. */
  if (getenv("STARPU_NCPU") == NULL) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    conf.ncpus = ncpu > 1 ? (int)(ncpu - 1) : 1;
  }
  int rc = starpu_init(&conf);
  if (rc != 0)
    return rc;
  e->n = n;
  e->h = xmalloc(n * sizeof *e->h);
  e->hv = xmalloc(n * sizeof *e->hv);
  for (uint32_t i = 0; i < n; i++) {
    e->hv[i] = (uint32_t)splitmix64();
    starpu_vector_data_register(&e->h[i], STARPU_MAIN_RAM, (uintptr_t)&e->hv[i], 1,
                                sizeof e->hv[i]);
  }
  e->vx = 0.25f;
  e->vy = 0.75f;
  starpu_vector_data_register(&e->x, STARPU_MAIN_RAM, (uintptr_t)&e->vx, 1, sizeof e->vx);
  starpu_vector_data_register(&e->y, STARPU_MAIN_RAM, (uintptr_t)&e->vy, 1, sizeof e->vy);
  return 0;
}

static void starpu_end(starpu_env *e) {
  for (uint32_t i = 0; i < e->n; i++)
    starpu_data_unregister(e->h[i]);
  starpu_data_unregister(e->x);
  starpu_data_unregister(e->y);
  free(e->h);
  free(e->hv);
  starpu_shutdown();
}
#endif

/* accel, the direct call and StarPU, repetitions interleaved. */
static void overhead_compare(overhead_env *ep, const bench_opts *o) {
  overhead_env e = *ep;
  int have_starpu = 0;
#ifdef BENCH_HAVE_STARPU
  starpu_env se;
  int src = starpu_start(&se, e.n);
  if (src == 0) {
    have_starpu = 1;
    fprintf(out, "starpu %d.%d.%d: %u CPU worker(s), scheduler %s\n", STARPU_MAJOR_VERSION,
            STARPU_MINOR_VERSION, STARPU_RELEASE_VERSION, starpu_cpu_worker_get_count(),
            getenv("STARPU_SCHED") ? getenv("STARPU_SCHED") : "default");
  } else {
    fprintf(out, "starpu: not available (starpu_init: %d)\n", src);
  }
#else
  fprintf(out, "starpu: not available\n");
#endif

  /* Warm-up: every buffer gets its device replica; allocators and threads get going. */
  for (int p = 0; p < PAT_COUNT; p++) {
    accel_pattern(&e, p);
    direct_pattern(&e, p);
#ifdef BENCH_HAVE_STARPU
    if (have_starpu) {
      starpu_pattern(&se, p, 0);
      starpu_pattern(&se, p, 1);
    }
#endif
  }
#ifdef BENCH_HAVE_STARPU
  if (have_starpu) {
    /* Its workers poll in a tight loop unless paused: never while accel is measured. */
    double idle_run = idle_cpu_share();
    starpu_pause();
    double idle_paused = idle_cpu_share();
    fprintf(out, "process CPU while idle: %.0f%% of a core with StarPU running, %.0f%% paused\n",
            idle_run * 100, idle_paused * 100);
  }
#endif

  size_t R = o->reps;
  /* Each pattern's time per op, and the process's CPU time per op over the same run (CPU time
   * over wall time, times the time per op: every thread, the idle ones' burn included). */
  double *acc[PAT_COUNT], *dir[PAT_COUNT], *sp[PAT_COUNT], *spd[PAT_COUNT];
  double *acc_cpu[PAT_COUNT], *sp_cpu[PAT_COUNT];
  for (int p = 0; p < PAT_COUNT; p++) {
    acc[p] = xmalloc(R * sizeof(double));
    dir[p] = xmalloc(R * sizeof(double));
    sp[p] = xmalloc(R * sizeof(double));
    spd[p] = xmalloc(R * sizeof(double));
    acc_cpu[p] = xmalloc(R * sizeof(double));
    sp_cpu[p] = xmalloc(R * sizeof(double));
  }
  for (size_t r = 0; r < R; r++) {
    for (int p = 0; p < PAT_COUNT; p++) {
      double c0 = cpu_s(), w0 = now_s();
      acc[p][r] = accel_pattern(&e, p);
      acc_cpu[p][r] = acc[p][r] * (cpu_s() - c0) / (now_s() - w0);
      dir[p][r] = direct_pattern(&e, p);
      sp[p][r] = spd[p][r] = sp_cpu[p][r] = NAN;
    }
#ifdef BENCH_HAVE_STARPU
    if (have_starpu) {
      starpu_resume();
      for (int p = 0; p < PAT_COUNT; p++) {
        double c0 = cpu_s(), w0 = now_s();
        sp[p][r] = starpu_pattern(&se, p, 0);
        sp_cpu[p][r] = sp[p][r] * (cpu_s() - c0) / (now_s() - w0);
        spd[p][r] = starpu_pattern(&se, p, 1);
      }
      starpu_pause();
    }
#endif
  }

  fprintf(out, "%-6s %-44s %10s %10s %10s %12s %9s %8s %10s %10s\n", "", "pattern", "accel us",
          "StarPU us", "direct us", "accel/StarPU", "target", "accel/dir", "acc CPU us",
          "SPU CPU us");
  for (int p = 0; p < PAT_COUNT; p++) {
    double a = median(acc[p], R) * 1e6, d = median(dir[p], R) * 1e6;
    double s = have_starpu ? median(sp[p], R) * 1e6 : NAN;
    double ac = median(acc_cpu[p], R) * 1e6, sc = have_starpu ? median(sp_cpu[p], R) * 1e6 : NAN;
    double q = ratio(a, s);
    if (have_starpu)
      fprintf(out, "%-6s %-44s %10.2f %10.2f %10.4f %12.3f %9s %8.0f %10.2f %10.2f\n", pat_name[p],
              pat_desc[p], a, s, d, q, q <= TARGET_STARPU_RATIO ? "<=0.5 met" : "<=0.5 MISSED",
              ratio(a, d), ac, sc);
    else
      fprintf(out, "%-6s %-44s %10.2f %10s %10.4f %12s %9s %8.0f %10.2f %10s\n", pat_name[p],
              pat_desc[p], a, "-", d, "-", "-", ratio(a, d), ac, "-");
    char name[64];
    snprintf(name, sizeof name, "overhead_%s_accel_us", pat_name[p]);
    record(name, a, "us");
    snprintf(name, sizeof name, "overhead_%s_accel_cpu_us", pat_name[p]);
    record(name, ac, "us");
    snprintf(name, sizeof name, "overhead_%s_direct_us", pat_name[p]);
    record(name, d, "us");
    snprintf(name, sizeof name, "overhead_%s_accel_over_direct", pat_name[p]);
    record(name, ratio(a, d), "x");
    if (have_starpu) {
      snprintf(name, sizeof name, "overhead_%s_starpu_us", pat_name[p]);
      record(name, s, "us");
      snprintf(name, sizeof name, "overhead_%s_starpu_cpu_us", pat_name[p]);
      record(name, sc, "us");
      snprintf(name, sizeof name, "overhead_%s_accel_over_starpu", pat_name[p]);
      record(name, q, "x");
    }
  }
  if (have_starpu) {
    fprintf(out, "StarPU with accel's data accesses (indep: 1 W handle/task; chain: R x + RW y; "
                 "wait: 1 W handle), not targeted:\n");
    for (int p = 0; p < PAT_COUNT; p++) {
      double a = median(acc[p], R) * 1e6, s = median(spd[p], R) * 1e6;
      fprintf(out, "%-6s %-44s %10.2f %10.2f %10s %12.3f\n", pat_name[p], pat_desc[p], a, s, "",
              ratio(a, s));
      char name[64];
      snprintf(name, sizeof name, "overhead_%s_starpu_data_us", pat_name[p]);
      record(name, s, "us");
    }
  }
  if (busy_retries)
    fprintf(out, "(submissions retried on ACCEL_EBUSY: %lu)\n", busy_retries);

#ifdef BENCH_HAVE_STARPU
  if (have_starpu) {
    starpu_resume();
    starpu_end(&se);
  }
#endif
  for (int p = 0; p < PAT_COUNT; p++) {
    free(acc[p]);
    free(dir[p]);
    free(sp[p]);
    free(spd[p]);
    free(acc_cpu[p]);
    free(sp_cpu[p]);
  }
}

/* --profile PAT: accel's side of one pattern alone, for perf or callgrind. */
static void overhead_profile(overhead_env *e, const bench_opts *o) {
  check("set_completion", accel_set_completion(e->ctx, o->completion));
  double *v = xmalloc(o->reps * sizeof *v);
  accel_pattern(e, o->profile);
  for (uint32_t r = 0; r < o->reps; r++)
    v[r] = accel_pattern(e, o->profile);
  fprintf(out, "profile %s: accel %.2f us per op (median of %u x %u ops; %lu EBUSY retries)\n",
          pat_name[o->profile], median(v, o->reps) * 1e6, o->reps, e->n, busy_retries);
  free(v);
}

/* The buffers of the tiny-op patterns, on ctx. */
static void overhead_setup(overhead_env *e, accel_ctx *ctx, uint32_t n) {
  *e = (overhead_env){.ctx = ctx, .n = n};
  e->bufs = xmalloc(e->n * sizeof *e->bufs);
  e->host_u32 = xmalloc(e->n * sizeof *e->host_u32);
  for (uint32_t i = 0; i < e->n; i++) {
    check("buffer_create", accel_buffer_create(ctx, ACCEL_U32, 1, &e->bufs[i]));
    e->host_u32[i] = (uint32_t)splitmix64();
  }
  check("buffer_create", accel_buffer_create(ctx, ACCEL_U32, 1, &e->one));
  check("buffer_create", accel_buffer_create(ctx, ACCEL_F32, 1, &e->x));
  check("buffer_create", accel_buffer_create(ctx, ACCEL_F32, 1, &e->y));
  float xy[2];
  fill_random(xy, ACCEL_F32, 2);
  e->hx = xy[0];
  e->hy = xy[1];
  SUBMIT("write", accel_write(ctx, e->x, 0, &xy[0], 1, NULL));
  SUBMIT("write", accel_write(ctx, e->y, 0, &xy[1], 1, NULL));
  check("finish", accel_finish(ctx, -1));
}

static void overhead_teardown(overhead_env *e) {
  for (uint32_t i = 0; i < e->n; i++)
    accel_buffer_destroy(e->ctx, e->bufs[i]);
  accel_buffer_destroy(e->ctx, e->one);
  accel_buffer_destroy(e->ctx, e->x);
  accel_buffer_destroy(e->ctx, e->y);
  check("finish", accel_finish(e->ctx, -1));
  free(e->bufs);
  free(e->host_u32);
}

static void bench_overhead(accel_ctx *ctx, const bench_opts *o) {
  fprintf(out, "\n== 2. per-op overhead of a tiny op (N = %u ops per repetition) ==\n", o->ops);
  overhead_env e;
  overhead_setup(&e, ctx, o->ops);
  if (o->profile >= 0)
    overhead_profile(&e, o);
  else
    overhead_compare(&e, o);
  overhead_teardown(&e);
}

/* ---------------------------------------------------------------------------------------
 * 5. What tracing costs: the tiny-op patterns in a context without a trace and in one with
 * ACCEL_TRACE set, alternating. Off, an op meets three pointer tests more than before the trace
 * existed; on, it records four events. */
static void bench_trace(const bench_opts *o) {
  fprintf(out, "\n== 5. tracing: tiny ops without and with ACCEL_TRACE (N = %u) ==\n", o->ops);
  accel_ctx *ctx; /* a fresh context of its own too, so that both start alike */
  check("accel_open", accel_open(&ctx, "embedded:"));
  char path[] = "/tmp/accel-bench-trace-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0)
    die("mkstemp", ACCEL_ESYS);
  close(fd);
  setenv("ACCEL_TRACE", path, 1);
  accel_ctx *traced;
  check("accel_open (traced)", accel_open(&traced, "embedded:"));
  unsetenv("ACCEL_TRACE");
  overhead_env e[2];
  overhead_setup(&e[0], ctx, o->ops);
  overhead_setup(&e[1], traced, o->ops);
  static const int pats[] = {PAT_INDEP, PAT_WAIT};
  fprintf(out, "%-8s %14s %14s %10s\n", "pattern", "off us/op", "on us/op", "on/off");
  for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
    double off[64], on[64];
    uint32_t reps = o->reps < 64 ? o->reps : 64;
    accel_pattern(&e[0], pats[p]); /* warm-up */
    accel_pattern(&e[1], pats[p]);
    for (uint32_t r = 0; r < reps; r++) {
      off[r] = accel_pattern(&e[0], pats[p]);
      on[r] = accel_pattern(&e[1], pats[p]);
    }
    double moff = median(off, reps), mon = median(on, reps);
    fprintf(out, "%-8s %14.3f %14.3f %10.3f\n", pat_name[pats[p]], moff * 1e6, mon * 1e6,
            mon / moff);
    char name[64];
    snprintf(name, sizeof name, "trace_%s_on_over_off", pat_name[pats[p]]);
    record(name, mon / moff, "x");
  }
  overhead_teardown(&e[0]);
  overhead_teardown(&e[1]);
  accel_close(ctx);
  accel_close(traced); /* writes the trace */
  struct stat st;
  if (stat(path, &st) != 0 || st.st_size == 0)
    die("the trace file", ACCEL_EIO);
  fprintf(out, "(the trace of the traced context: %lld bytes)\n", (long long)st.st_size);
  unlink(path);
}

/* ---------------------------------------------------------------------------------------
 * 3. RNG fill bandwidth */

static void bench_rng(accel_ctx *ctx, const bench_opts *o) {
  size_t bytes = (size_t)o->rng_mib << 20, count = bytes / sizeof(float);
  fprintf(out,
          "\n== 3. RNG fill bandwidth per core: accel_rng_fill (UNIFORM, %u MiB, "
          "device-resident) vs memset ==\n",
          o->rng_mib);
  accel_buffer buf;
  check("buffer_create", accel_buffer_create(ctx, ACCEL_F32, count, &buf));
  unsigned char *host = xmalloc(bytes);
  accel_rng spec = {.dist = ACCEL_DIST_UNIFORM, .seed = splitmix64(), .offset = 0};
  /* Warm-up: the device replica is allocated and faulted in; so is the host buffer. */
  SUBMIT("rng_fill", accel_rng_fill(ctx, 0, buf, &spec, NULL));
  memset(host, 0x5a, bytes);
  check("finish", accel_finish(ctx, -1));
  accel_transfer_stats st0;
  accel_transfer_stats_get(ctx, &st0);

  double *ga = xmalloc(o->reps * sizeof *ga), *gm = xmalloc(o->reps * sizeof *gm);
  for (uint32_t r = 0; r < o->reps; r++) {
    for (int side = 0; side < 2; side++) {
      double t0 = now_s();
      if ((side + (int)r) % 2 == 0) {
        spec.seed = splitmix64();
        spec.offset = 4 * (uint64_t)r;
        SUBMIT("rng_fill", accel_rng_fill(ctx, 0, buf, &spec, NULL));
        check("finish", accel_finish(ctx, -1));
        ga[r] = (double)bytes / (now_s() - t0) * 1e-9;
      } else {
        memset(host, (int)(r * 37 + 1) & 0xff, bytes);
        gm[r] = (double)bytes / (now_s() - t0) * 1e-9;
      }
    }
  }
  accel_transfer_stats st1;
  accel_transfer_stats_get(ctx, &st1);
  if (st1.host_to_device != st0.host_to_device || st1.device_to_host != st0.device_to_host) {
    fprintf(stderr, "bench-devices: rng fill moved data during timing\n");
    exit(1);
  }
  /* Sanity: the last fill is uniform in (0, 1] (reads a 1 MiB slice back). */
  size_t probe = count < (1u << 18) ? count : (1u << 18);
  float *p = xmalloc(probe * sizeof *p);
  accel_future *f;
  SUBMIT("read", accel_read(ctx, buf, count - probe, p, probe, &f));
  check("read wait", accel_future_wait(f, -1));
  accel_future_release(f);
  double mean = 0;
  for (size_t i = 0; i < probe; i++) {
    if (!(p[i] > 0.0f && p[i] <= 1.0f)) {
      fprintf(stderr, "bench-devices: rng fill out of (0, 1]: %g\n", (double)p[i]);
      exit(1);
    }
    mean += p[i];
  }
  mean /= (double)probe;
  volatile unsigned char sink = host[bytes / 2];
  (void)sink;
  double a = median(ga, o->reps), m = median(gm, o->reps);
  fprintf(out, "%-22s %10s\n", "", "GB/s");
  fprintf(out, "%-22s %10.2f   (%.2f Gsamples/s; slice mean %.4f)\n", "accel_rng_fill", a, a / 4,
          mean);
  fprintf(out, "%-22s %10.2f\n", "memset", m);
  fprintf(out, "%-22s %10.3f\n", "ratio rng/memset", ratio(a, m));
  record("rng_accel_gbps", a, "GB/s");
  record("rng_memset_gbps", m, "GB/s");
  record("rng_ratio", ratio(a, m), "x");
  free(p);
  free(ga);
  free(gm);
  free(host);
  accel_buffer_destroy(ctx, buf);
  check("finish", accel_finish(ctx, -1));
}

/* ---------------------------------------------------------------------------------------
 * 4. completion strategies */

static void bench_completion(accel_ctx *ctx, const bench_opts *o) {
  static const accel_completion how[] = {ACCEL_COMPLETION_CALLBACK, ACCEL_COMPLETION_SYNC,
                                         ACCEL_COMPLETION_POLL};
  static const char *const how_name[] = {"callback", "sync", "poll"};
  enum { NHOW = 3 };
  uint32_t per = o->ops / 4 ? o->ops / 4 : 1; /* ops per strategy per repetition */
  fprintf(out,
          "\n== 4. completion strategies: submit + wait of accel_fill_u32 (1 element), "
          "%u ops x %u reps each ==\n",
          per, o->reps);
  accel_buffer buf;
  check("buffer_create", accel_buffer_create(ctx, ACCEL_U32, 1, &buf));
  size_t total = (size_t)per * o->reps;
  double *lat[NHOW];
  for (int h = 0; h < NHOW; h++)
    lat[h] = xmalloc(total * sizeof(double));
  /* Warm-up, then interleave the strategies repetition by repetition. */
  for (int h = 0; h < NHOW; h++) {
    check("set_completion", accel_set_completion(ctx, how[h]));
    for (uint32_t i = 0; i < per; i++) {
      accel_future *f;
      SUBMIT("fill", accel_fill_u32(ctx, 0, buf, i + 1, &f));
      check("wait", accel_future_wait(f, -1));
      accel_future_release(f);
    }
  }
  for (uint32_t r = 0; r < o->reps; r++) {
    for (int hh = 0; hh < NHOW; hh++) {
      int h = (hh + (int)r) % NHOW;
      check("set_completion", accel_set_completion(ctx, how[h]));
      for (uint32_t i = 0; i < per; i++) {
        accel_future *f;
        double t0 = now_s();
        SUBMIT("fill", accel_fill_u32(ctx, 0, buf, i + 1, &f));
        check("wait", accel_future_wait(f, -1));
        lat[h][(size_t)r * per + i] = (now_s() - t0) * 1e6;
        accel_future_release(f);
      }
    }
  }
  check("set_completion", accel_set_completion(ctx, ACCEL_COMPLETION_DEFAULT));
  fprintf(out, "%-10s %10s %10s %10s %10s %10s %10s\n", "strategy", "median us", "p10 us", "p90 us",
          "p99 us", "mean us", ">1ms ops");
  for (int h = 0; h < NHOW; h++) {
    double sum = 0;
    size_t slow = 0;
    for (size_t i = 0; i < total; i++) {
      sum += lat[h][i];
      slow += lat[h][i] > 1000.0;
    }
    double p10 = quantile(lat[h], total, 0.1), p50 = quantile(lat[h], total, 0.5);
    double p90 = quantile(lat[h], total, 0.9), p99 = quantile(lat[h], total, 0.99);
    fprintf(out, "%-10s %10.2f %10.2f %10.2f %10.2f %10.2f %9.1f%%\n", how_name[h], p50, p10, p90,
            p99, sum / (double)total, 100.0 * (double)slow / (double)total);
    char name[64];
    snprintf(name, sizeof name, "completion_%s_median_us", how_name[h]);
    record(name, p50, "us");
    snprintf(name, sizeof name, "completion_%s_p90_us", how_name[h]);
    record(name, p90, "us");
    snprintf(name, sizeof name, "completion_%s_mean_us", how_name[h]);
    record(name, sum / (double)total, "us");
    free(lat[h]);
  }
  accel_buffer_destroy(ctx, buf);
  check("finish", accel_finish(ctx, -1));
}

/* ---------------------------------------------------------------------------------------
 * main */

static void print_json(const bench_opts *o) {
  printf("{\"bench\": \"devices\", \"reps\": %u, \"ops\": %u, \"results\": {", o->reps, o->ops);
  for (int i = 0; i < nresults; i++)
    printf("%s\n  \"%s\": {\"value\": %.6g, \"unit\": \"%s\"}", i ? "," : "", results[i].name,
           isfinite(results[i].value) ? results[i].value : -1.0, results[i].unit);
  printf("\n}}\n");
}

int main(int argc, char **argv) {
  bench_opts o;
  parse_opts(&o, argc, argv);
  out = o.json ? stderr : stdout;
  rng_state ^= (uint64_t)time(NULL) * 0x2545f4914f6cdd1dull; /* fresh inputs each run */

  accel_ctx *ctx;
  check("accel_open", accel_open(&ctx, "embedded:"));
  struct accel_device_info info;
  check("device_info", accel_device_info(ctx, 0, &info));
  fprintf(out,
          "bench-devices: %ld online CPU(s); device 0: %s (%s, %u compute units); "
          "reps %u, ops %u%s\n",
          sysconf(_SC_NPROCESSORS_ONLN), info.name, info.backend, info.compute_units, o.reps, o.ops,
          o.quick ? " (quick)" : "");
  if (o.profile >= 0)
    o.run_sgemm = o.run_dgemm = o.run_rng = o.run_completion = o.run_trace = 0, o.run_overhead = 1;
  double t0 = now_s();
  if (o.run_sgemm)
    bench_gemm(ctx, &o, ACCEL_F32);
  if (o.run_dgemm)
    bench_gemm(ctx, &o, ACCEL_F64);
  if (o.run_overhead)
    bench_overhead(ctx, &o);
  if (o.run_rng)
    bench_rng(ctx, &o);
  if (o.run_completion)
    bench_completion(ctx, &o);
  if (o.run_trace)
    bench_trace(&o);
  accel_close(ctx);
  fprintf(out, "\ntotal %.1f s\n", now_s() - t0);
  if (o.json)
    print_json(&o);
  return 0;
}
