/* Launching the built-in kernels (kernels.cu): check what the kernel relies on (ranges
 * within the buffers, the op's own rules, as the cpu backend checks them), then one launch on
 * the queue's stream. A check that fails queues nothing; an empty range queues nothing. */
#include <stdint.h>

#include "accel/error.h"
#include "backends/cuda/device.h"

#define THREADS 256
/* Resident blocks of THREADS per multiprocessor that a grid-stride kernel needs to keep the
 * memory system busy (2048 threads per SM on Hopper). */
#define BLOCKS_PER_SM 8
/* Philox fills run in four waves of that instead: measured on an H100 (256 MiB uniform, 10
 * launches), 8 blocks per SM wrote 3.00 TB/s, 16 3.08 and 32 3.11 (cuRAND: 2.90); the grid-
 * stride loop of a single wave keeps too few stores in flight behind its ten rounds. */
#define RNG_BLOCKS_PER_SM 32

/* Blocks for `items` threads' worth of work, capped at `per_sm` blocks per multiprocessor
 * (grid-stride loops do the rest). */
static unsigned grid_capped(be_device *dev, uint64_t items, unsigned per_sm) {
  uint64_t blocks = (items + THREADS - 1) / THREADS;
  uint64_t cap = (uint64_t)(dev->sms > 0 ? dev->sms : 1) * per_sm;
  return blocks == 0 ? 1 : (unsigned)(blocks < cap ? blocks : cap);
}

static unsigned grid_for(be_device *dev, uint64_t items) {
  return grid_capped(dev, items, BLOCKS_PER_SM);
}

static int launch(be_queue *q, be_cuda_fn fn, unsigned grid, void **args) {
  be_device *dev = q->dev;
  int rc = be_cuda_enter(dev);
  if (rc != 0)
    return rc;
  return be_cuda_check(dev, be_cu.cuLaunchKernel(dev->fn[fn], grid, 1, 1, THREADS, 1, 1, 0,
                                                 q->stream, args, NULL));
}

/* The checks every kernel starts with: the argument error first, then the queue. */
static int ready(be_queue *q, int arg_err) {
  if (q == NULL)
    return ACCEL_EINVAL;
  return arg_err != 0 ? arg_err : be_cuda_queue_ok(q);
}

/* Fills up to this many bytes go through the driver's memset, larger ones through the fill
 * kernel (16-byte stores; no slower than the memset at bandwidth). A memset costs the
 * submitting thread far less than a kernel launch: on an H200, a 1-element fill + wait in one
 * thread took 6.0 µs against 10.4 µs, and eight clients' pipelined tiny fills through acceld
 * went from 211 to 351–405 kops/s, the worker's submitting thread being their limit
 * (docs/PERFORMANCE.md "Small fills through the driver's memset"). */
#define MEMSET_FILL_MAX ((size_t)64 << 10)

static int memset32(be_queue *q, CUdeviceptr d, uint32_t value, size_t count) {
  int rc = be_cuda_enter(q->dev);
  return rc != 0 ? rc : be_cuda_check(q->dev, be_cu.cuMemsetD32Async(d, value, count, q->stream));
}

int be_cuda_fill_u32(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t value) {
  CUdeviceptr d = 0;
  int rc = ready(q, be_cuda_span(dst, off, count, 4, &d));
  if (rc != 0 || count == 0)
    return rc;
  if (count * 4 <= MEMSET_FILL_MAX)
    return memset32(q, d, value, count);
  uint64_t n = count;
  void *args[] = {&d, &n, &value};
  return launch(q, BE_FN_FILL, grid_for(q->dev, n / 4 + 4), args);
}

int be_cuda_fill_u64(be_queue *q, be_mem dst, size_t off, size_t count, uint64_t value) {
  CUdeviceptr d = 0;
  int rc = ready(q, be_cuda_span(dst, off, count, 8, &d));
  if (rc != 0 || count == 0)
    return rc;
  /* A value whose halves are equal (zeros, most often) is a 32-bit pattern twice as long. */
  if ((uint32_t)value == (uint32_t)(value >> 32) && count * 8 <= MEMSET_FILL_MAX)
    return memset32(q, d, (uint32_t)value, count * 2);
  uint64_t n = count;
  void *args[] = {&d, &n, &value};
  return launch(q, BE_FN_FILL_U64, grid_for(q->dev, n), args);
}

/* Normals come in Box-Muller pairs: an odd offset would split one (backends/cpu/philox.h). */
static int rng_check(const be_rng_args *r) {
  if (r == NULL ||
      (r->dist != BE_RNG_BITS && r->dist != BE_RNG_UNIFORM && r->dist != BE_RNG_NORMAL))
    return ACCEL_EINVAL;
  return r->dist == BE_RNG_NORMAL && r->offset % 2 != 0 ? ACCEL_EINVAL : 0;
}

/* The kernel for (dist, dtype): BITS fills U32, the others a float type; else ENOTSUP. */
static int rng_fn(const be_rng_args *r, uint32_t dtype, be_cuda_fn *fn) {
  int slot = be_cuda_slot(dtype);
  if (r->dist == BE_RNG_BITS) {
    *fn = BE_FN_RNG_BITS;
    return dtype == ACCEL_U32 ? 0 : ACCEL_ENOTSUP;
  }
  if (slot < 0)
    return ACCEL_ENOTSUP;
  *fn = (r->dist == BE_RNG_UNIFORM ? BE_FN_RNG_UNIFORM : BE_FN_RNG_NORMAL) + slot;
  return 0;
}

/* One thread per Philox block: four elements of 32 bits or less, two of F64. F64 takes its
 * scalars as doubles; the others as floats (rounded first, as the cpu backend does). */
int be_cuda_rng_fill(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                     const be_rng_args *r) {
  CUdeviceptr d = 0;
  be_cuda_fn fn = BE_FN_RNG_BITS;
  int rc = rng_check(r);
  if (rc == 0)
    rc = rng_fn(r, dtype, &fn);
  size_t esize = be_cuda_esize(dtype);
  rc = ready(q, rc != 0 ? rc : be_cuda_span(dst, off, count, esize, &d));
  if (rc != 0 || count == 0)
    return rc;
  uint64_t n = count, offset = r->offset;
  uint32_t k0 = (uint32_t)r->seed, k1 = (uint32_t)(r->seed >> 32);
  float mean = (float)r->mean, stddev = (float)r->stddev;
  double mean64 = r->mean, stddev64 = r->stddev;
  bool f64 = dtype == ACCEL_F64;
  void *args[] = {&d,
                  &n,
                  &offset,
                  &k0,
                  &k1,
                  f64 ? (void *)&mean64 : (void *)&mean,
                  f64 ? (void *)&stddev64 : (void *)&stddev};
  uint64_t blocks = f64 ? (offset % 2 + n + 1) / 2 : (offset % 4 + n + 3) / 4;
  return launch(q, fn, grid_capped(q->dev, blocks, RNG_BLOCKS_PER_SM), args);
}

/* ---- BLAS level 1: F32 and F64 kernels -------------------------------------------------- */

static int vector_type(uint32_t dtype, size_t *esize) {
  if (dtype != ACCEL_F32 && dtype != ACCEL_F64)
    return ACCEL_ENOTSUP; /* as every dtype outside vector_dtypes */
  *esize = be_cuda_esize(dtype);
  return 0;
}

int be_cuda_axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off,
                 be_mem y, size_t y_off) {
  CUdeviceptr px = 0, py = 0;
  size_t es = 4;
  int rc = vector_type(dtype, &es);
  if (rc == 0)
    rc = be_cuda_span(x, x_off, n, es, &px);
  rc = ready(q, rc != 0 ? rc : be_cuda_span(y, y_off, n, es, &py));
  if (rc != 0 || n == 0)
    return rc;
  uint64_t n64 = n;
  float a32 = (float)alpha;
  void *args[] = {&n64, es == 8 ? (void *)&alpha : (void *)&a32, &px, &py};
  return launch(q, es == 8 ? BE_FN_DAXPY : BE_FN_SAXPY, grid_for(q->dev, n64), args);
}

int be_cuda_scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off) {
  CUdeviceptr px = 0;
  size_t es = 4;
  int rc = vector_type(dtype, &es);
  rc = ready(q, rc != 0 ? rc : be_cuda_span(x, x_off, n, es, &px));
  if (rc != 0 || n == 0)
    return rc;
  uint64_t n64 = n;
  float a32 = (float)alpha;
  void *args[] = {&n64, es == 8 ? (void *)&alpha : (void *)&a32, &px};
  return launch(q, es == 8 ? BE_FN_DSCAL : BE_FN_SSCAL, grid_for(q->dev, n64), args);
}

/* Two launches: partial sums per block into the queue's scratch, then their sum. With
 * n = 0 the result is 0 (one block sums nothing). */
int be_cuda_dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
                size_t y_off, be_mem result, size_t result_off) {
  CUdeviceptr px = 0, py = 0, pr = 0;
  size_t es = 4;
  int rc = vector_type(dtype, &es);
  if (rc == 0)
    rc = be_cuda_span(x, x_off, n, es, &px);
  if (rc == 0)
    rc = be_cuda_span(y, y_off, n, es, &py);
  rc = ready(q, rc != 0 ? rc : be_cuda_span(result, result_off, 1, es, &pr));
  if (rc != 0)
    return rc;
  uint64_t n64 = n;
  unsigned parts = grid_for(q->dev, n64);
  parts = parts > BE_CUDA_DOT_PARTS ? BE_CUDA_DOT_PARTS : parts;
  void *pargs[] = {&n64, &px, &py, &q->scratch};
  void *fargs[] = {&parts, &q->scratch, &pr};
  int f64 = es == 8;
  rc = launch(q, BE_FN_DOT_PARTIAL + f64, parts, pargs);
  return rc != 0 ? rc : launch(q, BE_FN_DOT_FINAL + f64, 1, fargs);
}

/* ---- nn: F32, F64, F16, BF16 ------------------------------------------------------------ */

static int nn_type(uint32_t dtype, int *slot) {
  *slot = be_cuda_slot(dtype);
  return *slot >= 0 ? 0 : ACCEL_ENOTSUP;
}

int be_cuda_unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                  be_mem src, size_t src_off, size_t count) {
  static const be_cuda_fn fns[BE_UNARY_OP_LAST + 1] = {
      [BE_SIGMOID] = BE_FN_SIGMOID, [BE_RELU] = BE_FN_RELU, [BE_TANH] = BE_FN_TANH,
      [BE_EXP] = BE_FN_EXP,         [BE_LOG] = BE_FN_LOG,   [BE_SQRT] = BE_FN_SQRT,
      [BE_ABS] = BE_FN_ABS};
  CUdeviceptr d = 0, s = 0;
  int slot = 0;
  int rc = op <= BE_UNARY_OP_LAST ? 0 : ACCEL_EINVAL;
  if (rc == 0)
    rc = nn_type(dtype, &slot);
  size_t es = be_cuda_esize(dtype);
  if (rc == 0)
    rc = be_cuda_span(dst, dst_off, count, es, &d);
  rc = ready(q, rc != 0 ? rc : be_cuda_span(src, src_off, count, es, &s));
  if (rc != 0 || count == 0)
    return rc;
  uint64_t n = count;
  void *args[] = {&d, &s, &n};
  return launch(q, fns[op] + slot, grid_for(q->dev, n), args);
}

/* One block per row (grid-stride over rows). */
int be_cuda_softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                    size_t src_off, size_t rows, size_t cols) {
  if (cols > 0 && rows > SIZE_MAX / cols)
    return ACCEL_EINVAL;
  CUdeviceptr d = 0, s = 0;
  int slot = 0;
  int rc = nn_type(dtype, &slot);
  size_t es = be_cuda_esize(dtype);
  if (rc == 0)
    rc = be_cuda_span(dst, dst_off, rows * cols, es, &d);
  rc = ready(q, rc != 0 ? rc : be_cuda_span(src, src_off, rows * cols, es, &s));
  if (rc != 0 || rows * cols == 0)
    return rc;
  uint64_t r64 = rows, c64 = cols, cap = (uint64_t)q->dev->sms * 32;
  void *args[] = {&d, &s, &r64, &c64};
  return launch(q, BE_FN_SOFTMAX + slot, (unsigned)(r64 < cap ? r64 : cap), args);
}

/* The kernel of a binary op on dtype: one per float type (the op an argument), I32 and U32
 * for the integer arithmetic and bitwise ops, BOOL's logical ops, a comparison per input
 * type. ACCEL_ENOTSUP for other dtypes, ACCEL_EINVAL for an op the dtype does not take (DIV
 * of integers, logic of floats). */
static int binary_fn(uint32_t dtype, be_binary_op op, be_cuda_fn *fn) {
  if (dtype == ACCEL_BOOL) {
    *fn = BE_FN_BINARY_BOOL;
    return be_binary_dtype_ok(op, dtype) ? 0 : ACCEL_EINVAL;
  }
  int slot = be_cuda_slot(dtype);
  if (slot < 0)
    slot = dtype == ACCEL_I32 ? 4 : dtype == ACCEL_U32 ? 5 : -1;
  if (slot < 0)
    return ACCEL_ENOTSUP;
  if (!be_binary_dtype_ok(op, dtype))
    return ACCEL_EINVAL;
  *fn = be_binary_compares(op) ? (be_cuda_fn)(BE_FN_COMPARE + slot)
        : slot < 4             ? (be_cuda_fn)(BE_FN_BINARY + slot)
                               : (be_cuda_fn)(BE_FN_BINARY_INT + slot - 4);
  return 0;
}

/* Grid-stride over dst's elements; the op is an argument (one kernel per type). */
int be_cuda_binary(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst, size_t dst_off,
                   be_mem a, size_t a_off, be_mem b, size_t b_off) {
  if (g->op > BE_BINARY_OP_LAST || (g->cols != 0 && g->rows > SIZE_MAX / g->cols))
    return ACCEL_EINVAL;
  CUdeviceptr d = 0, pa = 0, pb = 0;
  be_cuda_fn fn = BE_FN_BINARY;
  int rc = binary_fn(dtype, g->op, &fn);
  size_t es = be_cuda_esize(dtype), n = g->rows * g->cols;
  if (rc == 0)
    rc = be_cuda_span(dst, dst_off, n, be_binary_compares(g->op) ? 1 : es, &d);
  if (rc == 0)
    rc = be_cuda_span(a, a_off, be_binary_span_size(g, g->a_rs, g->a_cs), es, &pa);
  rc = ready(
      q, rc != 0 ? rc : be_cuda_span(b, b_off, be_binary_span_size(g, g->b_rs, g->b_cs), es, &pb));
  if (rc != 0 || n == 0)
    return rc;
  int32_t op = (int32_t)g->op;
  uint64_t rows = g->rows, cols = g->cols, ars = g->a_rs, acs = g->a_cs, brs = g->b_rs,
           bcs = g->b_cs;
  void *args[] = {&d, &pa, &pb, &op, &rows, &cols, &ars, &acs, &brs, &bcs};
  return launch(q, fn, grid_for(q->dev, n), args);
}

/* A select of bits: one kernel per element size. */
int be_cuda_where(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst, size_t dst_off,
                  be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b, size_t b_off) {
  size_t es = be_cuda_esize(dtype), n = 0;
  int rc = es == 0 ? ACCEL_ENOTSUP : 0;
  if (rc == 0 && g->cols != 0 && g->rows > SIZE_MAX / g->cols)
    rc = ACCEL_EINVAL;
  CUdeviceptr d = 0, pc = 0, pa = 0, pb = 0;
  if (rc == 0) {
    n = g->rows * g->cols;
    rc = be_cuda_span(dst, dst_off, n, es, &d);
  }
  if (rc == 0)
    rc = be_cuda_span(cond, c_off, be_where_span_size(g, g->c_rs, g->c_cs), 1, &pc);
  if (rc == 0)
    rc = be_cuda_span(a, a_off, be_where_span_size(g, g->a_rs, g->a_cs), es, &pa);
  rc = ready(q, rc != 0 ? rc
                        : be_cuda_span(b, b_off, be_where_span_size(g, g->b_rs, g->b_cs), es, &pb));
  if (rc != 0 || n == 0)
    return rc;
  uint64_t rows = g->rows, cols = g->cols, crs = g->c_rs, ccs = g->c_cs, ars = g->a_rs,
           acs = g->a_cs, brs = g->b_rs, bcs = g->b_cs;
  void *args[] = {&d, &pc, &pa, &pb, &rows, &cols, &crs, &ccs, &ars, &acs, &brs, &bcs};
  int slot = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : 3;
  return launch(q, (be_cuda_fn)(BE_FN_WHERE + slot), grid_for(q->dev, n), args);
}

/* ---- reductions ---------------------------------------------------------------------------
 * A view as nout outputs of len elements: element k of output o at o * os + (k / n2) * s1 +
 * (k % n2) * s2 (kernels.cu). Three ways to run one:
 *   - outputs side by side and each read across rows (a row-major matrix's columns, enough of
 *     them to fill the GPU): a thread per output, a warp's loads one row segment;
 *   - enough outputs for the grid: a block per output;
 *   - few long ones (the whole view above all): parts blocks per output write partials (as
 *     doubles) into the queue's scratch (BE_CUDA_DOT_PARTS of them, as dot's), and a second
 *     launch folds them. */
typedef struct red_plan {
  uint64_t nout, len, os, n2, s1, s2;
} red_plan;

static red_plan red_plan_of(const be_reduction_args *g) {
  red_plan p = {.nout = be_reduction_outputs(g), .len = be_reduction_length(g)};
  if (g->axis == BE_AXIS_ROWS)
    p.os = g->cs, p.n2 = p.len, p.s2 = g->rs;
  else if (g->axis == BE_AXIS_COLS)
    p.os = g->rs, p.n2 = p.len, p.s2 = g->cs;
  else if ((g->cols <= 1 || g->cs == 1) && (g->rows <= 1 || g->rs == g->cols))
    p.n2 = p.len, p.s2 = 1; /* contiguous: one run */
  else if (g->rows == 1 || g->cols == 1)
    p.n2 = p.len, p.s2 = g->rows == 1 ? g->cs : g->rs;
  else
    p.n2 = g->cols, p.s1 = g->rs, p.s2 = g->cs;
  return p;
}

int be_cuda_reduce(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                   size_t dst_off, be_mem src, size_t src_off) {
  CUdeviceptr d = 0, s = 0;
  int slot = 0;
  int rc = be_reduction_ok(g) ? nn_type(dtype, &slot) : ACCEL_EINVAL;
  size_t es = be_cuda_esize(dtype);
  red_plan p = red_plan_of(g);
  if (rc == 0)
    rc = be_cuda_span(dst, dst_off, (size_t)p.nout, es, &d);
  rc = ready(q, rc != 0 ? rc : be_cuda_span(src, src_off, be_reduction_span_size(g), es, &s));
  if (rc != 0 || p.nout == 0)
    return rc;
  int32_t op = (int32_t)g->op;
  uint64_t target = (uint64_t)(q->dev->sms > 0 ? q->dev->sms : 1) * BLOCKS_PER_SM;
  if (p.os == 1 && p.s2 != 1 && p.nout >= target * 32) {
    void *args[] = {&d, &s, &op, &p.nout, &p.len, &p.os, &p.s2};
    return launch(q, BE_FN_REDUCE_THREADS + slot, grid_for(q->dev, p.nout), args);
  }
  uint64_t parts = 1, useful = (p.len + THREADS - 1) / THREADS;
  if (p.nout < target && 2 * p.nout <= BE_CUDA_DOT_PARTS && useful > 1) {
    parts = (target + p.nout - 1) / p.nout;
    parts = parts < useful ? parts : useful;
    parts = parts < BE_CUDA_DOT_PARTS / p.nout ? parts : BE_CUDA_DOT_PARTS / p.nout;
  }
  uint32_t parts32 = (uint32_t)parts;
  uint64_t units = p.nout * parts;
  unsigned grid = (unsigned)(units < 4 * target ? units : 4 * target);
  void *bargs[] = {&d, &q->scratch, &s, &op, &p.nout, &p.len, &p.os, &p.n2, &p.s1, &p.s2, &parts32};
  rc = launch(q, BE_FN_REDUCE_BLOCKS + slot, grid, bargs);
  if (rc != 0 || parts == 1)
    return rc;
  void *fargs[] = {&d, &q->scratch, &op, &p.nout, &parts32, &p.len};
  return launch(q, BE_FN_REDUCE_FINAL + slot, (unsigned)p.nout, fargs);
}

/* beta travels as the kernel's compute type: double for F64, float for the others. */
int be_cuda_scale(be_queue *q, uint32_t c_type, CUdeviceptr c, const be_gemm_args *g) {
  int slot = be_cuda_slot(c_type);
  if (slot < 0)
    return ACCEL_EINVAL;
  int64_t m = g->m, n = g->n, ldc = g->ldc, batch = g->batch;
  int64_t stride = batch > 1 ? g->stride_c : 0;
  double beta = g->beta;
  float beta32 = (float)beta;
  void *args[] = {
      &c, &m, &n, &ldc, &batch, &stride, c_type == ACCEL_F64 ? (void *)&beta : (void *)&beta32};
  uint64_t items = (uint64_t)m * (uint64_t)n * (uint64_t)batch;
  return launch(q, BE_FN_SCALE + slot, grid_for(q->dev, items), args);
}

/* One kernel for every pair (kernels.cu be_convert), a copy of bits for the same dtype. */
int be_cuda_convert(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype, const be_convert_args *g,
                    be_mem dst, size_t dst_off, be_mem src, size_t src_off) {
  size_t ds = be_cuda_esize(dst_dtype), ss = be_cuda_esize(src_dtype), n = 0;
  bool known = be_convert_dtype_ok(dst_dtype) && be_convert_dtype_ok(src_dtype);
  int rc = known && ds != 0 && ss != 0 ? 0 : ACCEL_ENOTSUP;
  if (rc == 0 && g->cols != 0 && g->rows > SIZE_MAX / g->cols)
    rc = ACCEL_EINVAL;
  CUdeviceptr d = 0, s = 0;
  if (rc == 0) {
    n = g->rows * g->cols;
    rc = be_cuda_span(dst, dst_off, n, ds, &d);
  }
  rc = ready(q, rc != 0 ? rc : be_cuda_span(src, src_off, be_convert_span_size(g), ss, &s));
  if (rc != 0 || n == 0)
    return rc;
  int32_t ddt = (int32_t)dst_dtype, sdt = (int32_t)src_dtype;
  int32_t same = dst_dtype == src_dtype ? (int32_t)ds : 0;
  uint64_t rows = g->rows, cols = g->cols, rs = g->rs, cs = g->cs;
  void *args[] = {&d, &s, &ddt, &sdt, &same, &rows, &cols, &rs, &cs};
  return launch(q, BE_FN_CONVERT, grid_for(q->dev, n), args);
}
