/* Reductions of a strided 2-D view (cpu_kernels.h: be_cpu_reduce). Accumulation is in double
 * (a contiguous F32 run: float lanes within blocks of 4096, blocks added in double, below)
 * and the result rounds once to the output; F64's eight running lanes keep the error within
 * (n / 8 + 3) eps of the sum of magnitudes. Three loops:
 *   - a run of elements at one step (a row, a column, a whole contiguous view): eight lanes,
 *     so a step of 1 vectorises (contiguous F32: sixteen float lanes);
 *   - per output along a row-major view's columns (axis ROWS with column stride 1): blocks of
 *     COL_BLOCK outputs held in doubles on the stack, rows added in turn, so each row's block
 *     is read contiguously (COL_BLOCK doubles, 16 KiB, on the stack: no scratch);
 *   - anything else: one run per output at its stride. */
#include <math.h>
#include <stdint.h>

#include "accel/error.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/dtype_conv.h"

#define LANES 8
#define COL_BLOCK 2048

/* The state of a fold: NaN is sticky for MAX and MIN (x > NaN and x < NaN are false). */
#define FOLD_MAX(m, x) ((x) > (m) || (x) != (x) ? (x) : (m))
#define FOLD_MIN(m, x) ((x) < (m) || (x) != (x) ? (x) : (m))
#define FOLD_SUM(m, x) ((m) + (x))

static inline double load_f32(const void *p, uint64_t i) {
  return ((const float *)p)[i];
}
static inline double load_f64(const void *p, uint64_t i) {
  return ((const double *)p)[i];
}
static inline double load_f16(const void *p, uint64_t i) {
  return be_f16_to_f32(((const uint16_t *)p)[i]);
}
static inline double load_bf16(const void *p, uint64_t i) {
  return be_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* f16 through f32: a double rounded twice can differ from once by an ulp of the f16 result
 * only at an exact f32 tie, which the tolerance of the tests allows (one ulp of the output). */
static void store(uint32_t dtype, void *dst, uint64_t i, double v) {
  switch (dtype) {
  case ACCEL_F32:
    ((float *)dst)[i] = (float)v;
    break;
  case ACCEL_F64:
    ((double *)dst)[i] = v;
    break;
  case ACCEL_F16:
    ((uint16_t *)dst)[i] = be_f32_to_f16((float)v);
    break;
  default:
    ((uint16_t *)dst)[i] = be_f32_to_bf16((float)v);
    break;
  }
}

/* One run of n elements at `step` from p, folded from `init` in LANES running lanes. */
#define RUN_FN(NAME, LOAD, FOLD)                                                                   \
  static double NAME(const void *p, uint64_t n, uint64_t step, double init) {                      \
    double lane[LANES];                                                                            \
    for (int l = 0; l < LANES; l++)                                                                \
      lane[l] = init;                                                                              \
    uint64_t i = 0;                                                                                \
    if (step == 1) {                                                                               \
      for (; i + LANES <= n; i += LANES)                                                           \
        for (int l = 0; l < LANES; l++)                                                            \
          lane[l] = FOLD(lane[l], LOAD(p, i + l));                                                 \
    }                                                                                              \
    for (; i < n; i++)                                                                             \
      lane[i % LANES] = FOLD(lane[i % LANES], LOAD(p, i * step));                                  \
    double m = lane[0];                                                                            \
    for (int l = 1; l < LANES; l++)                                                                \
      m = FOLD(m, lane[l]);                                                                        \
    return m;                                                                                      \
  }

/* Column blocks: acc[c] = FOLD over rows of p[r * rs + c] for c < nc. */
#define COLS_FN(NAME, LOAD, FOLD)                                                                  \
  static void NAME(const void *p, uint64_t rows, uint64_t rs, uint64_t nc, double *acc) {          \
    for (uint64_t r = 0; r < rows; r++)                                                            \
      for (uint64_t c = 0; c < nc; c++)                                                            \
        acc[c] = FOLD(acc[c], LOAD(p, r * rs + c));                                                \
  }

#define PER_DTYPE(X, FOLD, OPN)                                                                    \
  X(OPN##_f32, load_f32, FOLD)                                                                     \
  X(OPN##_f64, load_f64, FOLD)                                                                     \
  X(OPN##_f16, load_f16, FOLD) X(OPN##_bf16, load_bf16, FOLD)

PER_DTYPE(RUN_FN, FOLD_SUM, run_sum)
PER_DTYPE(RUN_FN, FOLD_MAX, run_max)
PER_DTYPE(RUN_FN, FOLD_MIN, run_min)
PER_DTYPE(COLS_FN, FOLD_SUM, cols_sum)
PER_DTYPE(COLS_FN, FOLD_MAX, cols_max)
PER_DTYPE(COLS_FN, FOLD_MIN, cols_min)

/* Contiguous F32, the common case, at memory speed: 16 float lanes over blocks of F32_BLOCK
 * elements (within a block each lane adds F32_BLOCK / 16 elements: an error within
 * (F32_BLOCK / 16 + 4) eps_f32 of the block's magnitudes), each block's total added in
 * double. Max and min keep a NaN flag beside the lanes, so the compare-and-pick vectorises. */
#define F32_LANES 16
#define F32_BLOCK 4096

static double sum_f32_block(const float *x, uint64_t n) {
  float lane[F32_LANES] = {0};
  uint64_t i = 0;
  for (; i + F32_LANES <= n; i += F32_LANES)
    for (int l = 0; l < F32_LANES; l++)
      lane[l] += x[i + l];
  for (; i < n; i++)
    lane[i % F32_LANES] += x[i];
  for (int h = F32_LANES / 2; h > 0; h /= 2) /* a tree over the lanes */
    for (int l = 0; l < h; l++)
      lane[l] += lane[l + h];
  return lane[0];
}

static double sum_f32_run(const void *p, uint64_t n, uint64_t step, double init) {
  if (step != 1)
    return run_sum_f32(p, n, step, init);
  const float *x = p;
  double total = init;
  for (uint64_t i = 0; i < n; i += F32_BLOCK)
    total += sum_f32_block(x + i, n - i < F32_BLOCK ? n - i : F32_BLOCK);
  return total;
}

#define F32_PICK(NAME, CMP, SLOW)                                                                  \
  static double NAME(const void *p, uint64_t n, uint64_t step, double init) {                      \
    if (step != 1 || n < F32_LANES)                                                                \
      return SLOW(p, n, step, init);                                                               \
    const float *x = p;                                                                            \
    float lane[F32_LANES];                                                                         \
    int nan[F32_LANES] = {0};                                                                      \
    for (int l = 0; l < F32_LANES; l++)                                                            \
      lane[l] = (float)init;                                                                       \
    uint64_t i = 0;                                                                                \
    for (; i + F32_LANES <= n; i += F32_LANES)                                                     \
      for (int l = 0; l < F32_LANES; l++) {                                                        \
        float v = x[i + l];                                                                        \
        lane[l] = v CMP lane[l] ? v : lane[l];                                                     \
        nan[l] |= v != v;                                                                          \
      }                                                                                            \
    double m = SLOW(x + i, n - i, 1, init);                                                        \
    for (int l = 0; l < F32_LANES; l++)                                                            \
      m = nan[l] ? NAN : (m != m || !(lane[l] CMP m)) ? m : lane[l];                               \
    return m;                                                                                      \
  }

F32_PICK(max_f32_run, >, run_max_f32)
F32_PICK(min_f32_run, <, run_min_f32)

typedef double (*run_fn)(const void *p, uint64_t n, uint64_t step, double init);
typedef void (*cols_fn)(const void *p, uint64_t rows, uint64_t rs, uint64_t nc, double *acc);

/* [fold][dtype slot]: fold 0 sum (and mean), 1 max, 2 min; slot as dtype_slot. */
static const run_fn runs[3][4] = {{sum_f32_run, run_sum_f64, run_sum_f16, run_sum_bf16},
                                  {max_f32_run, run_max_f64, run_max_f16, run_max_bf16},
                                  {min_f32_run, run_min_f64, run_min_f16, run_min_bf16}};
static const cols_fn colss[3][4] = {{cols_sum_f32, cols_sum_f64, cols_sum_f16, cols_sum_bf16},
                                    {cols_max_f32, cols_max_f64, cols_max_f16, cols_max_bf16},
                                    {cols_min_f32, cols_min_f64, cols_min_f16, cols_min_bf16}};

static int dtype_slot(uint32_t dtype) {
  switch (dtype) {
  case ACCEL_F32:
    return 0;
  case ACCEL_F64:
    return 1;
  case ACCEL_F16:
    return 2;
  case ACCEL_BF16:
    return 3;
  default:
    return -1;
  }
}

typedef struct reducer {
  run_fn run;
  cols_fn cols;
  int fold;    /* 0 sum, 1 max, 2 min */
  double init; /* the fold's identity */
  bool mean;
  uint64_t len;
  uint32_t dtype;
  uint64_t esize;
} reducer;

/* The fold's result as the op's answer: the mean divides by the length (NaN of nothing). */
static double finish(const reducer *rd, double v) {
  return rd->mean ? v / (double)rd->len : v;
}

static const char *at(const reducer *rd, const void *src, uint64_t i) {
  return (const char *)src + i * rd->esize;
}

/* The whole view into one value: a view that is one run (contiguous, one row or one column)
 * as one run, else row by row. */
static double fold_all(const reducer *rd, const be_reduction_args *g, const void *src) {
  uint64_t n = g->rows * g->cols;
  if ((g->cols <= 1 || g->cs == 1) && (g->rows <= 1 || g->rs == g->cols))
    return rd->run(src, n, 1, rd->init);
  if (g->rows == 1 || g->cols == 1)
    return rd->run(src, n, g->rows == 1 ? g->cs : g->rs, rd->init);
  double m = rd->init;
  for (uint64_t r = 0; r < g->rows; r++) {
    double v = rd->run(at(rd, src, r * g->rs), g->cols, g->cs, rd->init);
    m = rd->fold == 0 ? m + v : rd->fold == 1 ? FOLD_MAX(m, v) : FOLD_MIN(m, v);
  }
  return m;
}

/* One value per column of a view whose rows are contiguous: blocks of columns on the stack. */
static void fold_columns(const reducer *rd, const be_reduction_args *g, void *dst,
                         const void *src) {
  double acc[COL_BLOCK];
  for (uint64_t c0 = 0; c0 < g->cols; c0 += COL_BLOCK) {
    uint64_t nc = g->cols - c0 < COL_BLOCK ? g->cols - c0 : COL_BLOCK;
    for (uint64_t c = 0; c < nc; c++)
      acc[c] = rd->init;
    rd->cols(at(rd, src, c0), g->rows, g->rs, nc, acc);
    for (uint64_t c = 0; c < nc; c++)
      store(rd->dtype, dst, c0 + c, finish(rd, acc[c]));
  }
}

int be_cpu_reduce(uint32_t dtype, const be_reduction_args *g, void *dst, const void *src) {
  int slot = dtype_slot(dtype);
  if (slot < 0)
    return ACCEL_ENOTSUP;
  if (g->op > BE_REDUCTION_OP_LAST || g->axis > BE_REDUCTION_AXIS_LAST || !be_reduction_defined(g))
    return ACCEL_EINVAL;
  int fold = g->op == BE_RED_MAX ? 1 : g->op == BE_RED_MIN ? 2 : 0;
  reducer rd = {.run = runs[fold][slot],
                .cols = colss[fold][slot],
                .fold = fold,
                .init = fold == 0   ? 0.0
                        : fold == 1 ? -INFINITY
                                    : INFINITY,
                .mean = g->op == BE_RED_MEAN,
                .len = be_reduction_length(g),
                .dtype = dtype,
                .esize = be_dtype_size(dtype)};
  uint64_t outs = be_reduction_outputs(g);
  if (outs == 0)
    return 0;
  if (g->axis == BE_AXIS_ALL) {
    store(dtype, dst, 0, finish(&rd, rd.len == 0 ? rd.init : fold_all(&rd, g, src)));
  } else if (g->axis == BE_AXIS_ROWS && g->cs == 1 && g->rows > 1) {
    fold_columns(&rd, g, dst, src);
  } else {
    /* ROWS: output c runs down column c (step rs); COLS: output r along row r (step cs). */
    uint64_t os = g->axis == BE_AXIS_ROWS ? g->cs : g->rs;
    uint64_t step = g->axis == BE_AXIS_ROWS ? g->rs : g->cs;
    for (uint64_t o = 0; o < outs; o++)
      store(dtype, dst, o, finish(&rd, rd.run(at(&rd, src, o * os), rd.len, step, rd.init)));
  }
  return 0;
}
