/* The arguments ops carry that the backends take as they are: element-wise functions, random
 * distributions, a launch's limits and parameter kinds, collectives. They belong to the op
 * vocabulary (the wire codec and the checker read them) and keep the be_ prefix because the
 * backend contract (backends/backend.h) passes them on unchanged. */
#ifndef OPS_ARGS_H
#define OPS_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/dtype.h"

/* Element-wise functions of one input (values on the wire: append only). */
typedef enum be_unary_op {
  BE_SIGMOID = 0,
  BE_RELU,
  BE_TANH,
  BE_EXP,
  BE_LOG, /* NaN below 0, -inf at 0 */
  BE_SQRT,
  BE_ABS
} be_unary_op;
#define BE_UNARY_OP_LAST BE_ABS

/* Element-wise functions of two inputs (values on the wire: append only). The arithmetic
 * (ADD .. MINIMUM) writes the inputs' dtype: floats, and I32 and U32 wrapping as two's
 * complement does (numpy's), DIV excepted (numpy's `/` of integers gives floats). MAXIMUM and
 * MINIMUM propagate NaN (as numpy's maximum and minimum do). The comparisons (EQUAL ..
 * GREATER_EQUAL) write BOOL, 1 where true: IEEE's, so a NaN is only NOT_EQUAL to anything.
 * The logical ops (BITAND .. BITXOR) take and write BOOL, I32 or U32: bitwise on the integers;
 * on BOOL the truth of each input (any byte but 0 is true), the answer 0 or 1. */
typedef enum be_binary_op {
  BE_ADD = 0,
  BE_SUB,
  BE_MUL,
  BE_DIV,
  BE_MAXIMUM,
  BE_MINIMUM,
  BE_EQUAL,
  BE_NOT_EQUAL,
  BE_LESS,
  BE_LESS_EQUAL,
  BE_GREATER,
  BE_GREATER_EQUAL,
  BE_BITAND,
  BE_BITOR,
  BE_BITXOR
} be_binary_op;
#define BE_BINARY_ARITH_LAST BE_MINIMUM
#define BE_BINARY_COMPARE_LAST BE_GREATER_EQUAL
#define BE_BINARY_OP_LAST BE_BITXOR

/* Whether op compares (its dst is BOOL). */
static inline bool be_binary_compares(be_binary_op op) {
  return op > BE_BINARY_ARITH_LAST && op <= BE_BINARY_COMPARE_LAST;
}

/* Whether op is one of the logical (bitwise) ops. */
static inline bool be_binary_logical(be_binary_op op) {
  return op > BE_BINARY_COMPARE_LAST && op <= BE_BINARY_OP_LAST;
}

/* Whether the binary ops run on the inputs' dtype: op is known, of a dtype it takes (the
 * floats, I32 and U32; DIV the floats only; the logical ops BOOL, I32 and U32 only). Every
 * backend checks it before it runs one. */
static inline bool be_binary_dtype_ok(be_binary_op op, uint32_t dtype) {
  bool is_int = dtype == ACCEL_I32 || dtype == ACCEL_U32;
  bool is_float = dtype == ACCEL_F32 || dtype == ACCEL_F64 || dtype == ACCEL_F16 ||
                  dtype == ACCEL_BF16;
  if (be_binary_logical(op))
    return is_int || dtype == ACCEL_BOOL;
  return op <= BE_BINARY_OP_LAST && (is_float || (is_int && op != BE_DIV));
}

/* dst, a rows x cols row-major matrix (contiguous), = a op b element-wise, where each input's
 * element (r, c) lies r * rs + c * cs elements from its start. A stride of 0 repeats the input
 * along that dimension, as numpy broadcasts: (0, 0) a scalar, (0, 1) a row, (1, 0) a column;
 * (cols, 1) is a whole matrix, (1, rows) its transpose. */
typedef struct be_binary_args {
  be_binary_op op;
  uint64_t rows, cols;
  uint64_t a_rs, a_cs; /* a's strides, in elements */
  uint64_t b_rs, b_cs; /* b's */
} be_binary_args;

/* The elements an input with strides (rs, cs) spans: 0 for an empty dst, UINT64_MAX where
 * that would not fit (never a valid buffer). rows * cols must fit (the checker's). */
static inline uint64_t be_binary_span(const be_binary_args *g, uint64_t rs, uint64_t cs) {
  if (g->rows == 0 || g->cols == 0)
    return 0;
  uint64_t r = g->rows - 1, c = g->cols - 1;
  if ((rs != 0 && r > UINT64_MAX / 4 / rs) || (cs != 0 && c > UINT64_MAX / 4 / cs))
    return UINT64_MAX;
  return r * rs + c * cs + 1;
}

/* The same as a size for a backend's span check: SIZE_MAX where it does not fit (no buffer
 * holds that many, so the check refuses it). */
static inline size_t be_binary_span_size(const be_binary_args *g, uint64_t rs, uint64_t cs) {
  uint64_t n = be_binary_span(g, rs, cs);
  return n > SIZE_MAX ? SIZE_MAX : (size_t)n;
}

/* dst = cond ? a : b element-wise over rows x cols (dst contiguous, row-major), each input
 * read at its strides as be_binary_args' (a 0 stride broadcasts). cond is BOOL (any byte but
 * 0 is true); dst, a and b share a dtype, any (BOOL included): the select moves bits. */
typedef struct be_where_args {
  uint64_t rows, cols;
  uint64_t c_rs, c_cs; /* cond's strides, in elements */
  uint64_t a_rs, a_cs;
  uint64_t b_rs, b_cs;
} be_where_args;

/* The elements input (rs, cs) spans, as be_binary_span (and as a size for a backend). */
static inline uint64_t be_where_span(const be_where_args *g, uint64_t rs, uint64_t cs) {
  be_binary_args v = {.rows = g->rows, .cols = g->cols};
  return be_binary_span(&v, rs, cs);
}

static inline size_t be_where_span_size(const be_where_args *g, uint64_t rs, uint64_t cs) {
  be_binary_args v = {.rows = g->rows, .cols = g->cols};
  return be_binary_span_size(&v, rs, cs);
}

/* dst (contiguous, rows x cols, row-major, its own dtype) = src's rows x cols view (element
 * (r, c) at r * rs + c * cs, as be_binary_args' inputs) converted as numpy's astype does:
 *   - the same dtype: the bits copied (a strided copy);
 *   - between I32 and U32 (and from BOOL): modulo 2^32, two's complement;
 *   - to BOOL: 1 where the element is not zero (NaN is not zero; -0.0 is);
 *   - float to I32/U32: truncated toward zero, saturating at the type's limits, NaN to 0
 *     (numpy's result is undefined there; this is C's saturating conversion, as CUDA's);
 *   - to a float: rounded once to nearest even (F16 and BF16 from F64, I32 and U32 through
 *     an f32 rounded to odd, which rounds once: dtype_conv.h be_f64_to_f32_odd). */
typedef struct be_convert_args {
  uint64_t rows, cols;
  uint64_t rs, cs; /* src's strides, in elements */
} be_convert_args;

/* The elements src spans at its strides (as be_binary_span), and the same as a size. */
static inline uint64_t be_convert_span(const be_convert_args *g) {
  be_binary_args v = {.rows = g->rows, .cols = g->cols};
  return be_binary_span(&v, g->rs, g->cs);
}

static inline size_t be_convert_span_size(const be_convert_args *g) {
  be_binary_args v = {.rows = g->rows, .cols = g->cols};
  return be_binary_span_size(&v, g->rs, g->cs);
}

/* The dtypes convert takes, on either side: every dtype of accel.h's list. */
static inline bool be_convert_dtype_ok(uint32_t dtype) {
  return dtype == ACCEL_F32 || dtype == ACCEL_F64 || dtype == ACCEL_F16 || dtype == ACCEL_BF16 ||
         dtype == ACCEL_I32 || dtype == ACCEL_U32 || dtype == ACCEL_BOOL;
}

/* Reductions of a 2-D strided view (values on the wire: append only). MAX and MIN propagate
 * NaN (as numpy's max and min do) and need at least one element per output; SUM of nothing is
 * 0, MEAN of nothing NaN. */
typedef enum be_reduction_op {
  BE_RED_SUM = 0,
  BE_RED_MAX,
  BE_RED_MIN,
  BE_RED_MEAN
} be_reduction_op;
#define BE_REDUCTION_OP_LAST BE_RED_MEAN

/* What a reduction folds: every element into one value (ALL), each column into one value
 * (ROWS: numpy's axis 0, cols outputs), or each row into one (COLS: axis 1, rows outputs). */
typedef enum be_reduction_axis { BE_AXIS_ALL = 0, BE_AXIS_ROWS, BE_AXIS_COLS } be_reduction_axis;
#define BE_REDUCTION_AXIS_LAST BE_AXIS_COLS

/* dst (contiguous, be_reduction_outputs elements) = op over the rows x cols view of src whose
 * element (r, c) lies r * rs + c * cs elements from its start (strides as be_binary_args'). */
typedef struct be_reduction_args {
  be_reduction_op op;
  be_reduction_axis axis;
  uint64_t rows, cols;
  uint64_t rs, cs; /* src's strides, in elements */
} be_reduction_args;

/* The elements dst receives. */
static inline uint64_t be_reduction_outputs(const be_reduction_args *g) {
  return g->axis == BE_AXIS_ALL ? 1 : g->axis == BE_AXIS_ROWS ? g->cols : g->rows;
}

/* The elements folded into each output. rows * cols must fit (the checker's). */
static inline uint64_t be_reduction_length(const be_reduction_args *g) {
  return g->axis == BE_AXIS_ALL ? g->rows * g->cols : g->axis == BE_AXIS_ROWS ? g->rows : g->cols;
}

/* Whether the reduction has an answer: MAX and MIN of no element have none (numpy raises). */
static inline bool be_reduction_defined(const be_reduction_args *g) {
  bool folds_nothing = be_reduction_outputs(g) > 0 && be_reduction_length(g) == 0;
  return !(folds_nothing && (g->op == BE_RED_MAX || g->op == BE_RED_MIN));
}

/* The elements src spans at its strides (0 for an empty view, UINT64_MAX where it would not
 * fit), and the same as a size for a backend's span check. */
static inline uint64_t be_reduction_span(const be_reduction_args *g) {
  be_binary_args v = {.rows = g->rows, .cols = g->cols};
  return be_binary_span(&v, g->rs, g->cs);
}

static inline size_t be_reduction_span_size(const be_reduction_args *g) {
  be_binary_args v = {.rows = g->rows, .cols = g->cols};
  return be_binary_span_size(&v, g->rs, g->cs);
}

/* What every backend checks before it runs one: a known op and axis, rows x cols that fits a
 * size, an answer (not max or min of no elements). */
static inline bool be_reduction_ok(const be_reduction_args *g) {
  return g->op <= BE_REDUCTION_OP_LAST && g->axis <= BE_REDUCTION_AXIS_LAST &&
         (g->cols == 0 || g->rows <= SIZE_MAX / g->cols) && be_reduction_defined(g);
}

typedef enum be_rng_dist { BE_RNG_BITS = 0, BE_RNG_UNIFORM, BE_RNG_NORMAL } be_rng_dist;

typedef struct be_rng_args {
  be_rng_dist dist;
  uint64_t seed, offset; /* Philox4x32-10 stream position, in elements of the output */
  double mean, stddev;   /* NORMAL only; rounded to the output's type first for F32 and below */
} be_rng_args;

#define BE_KERNEL_NAME_MAX 127u
#define BE_LAUNCH_MAX_ARGS 32u

typedef enum be_param_kind {
  BE_PARAM_UNKNOWN = 0, /* the driver cannot tell: any argument of the right size */
  BE_PARAM_BUFFER,      /* a device pointer (CUDA: 8 bytes), a __global/__constant buffer */
  BE_PARAM_SCALAR,      /* by value, `size` bytes */
  BE_PARAM_LOCAL        /* OpenCL __local pointer: the launch gives its size */
} be_param_kind;

#define BE_COLL_MAX_DEVICES 8u

typedef enum be_coll_kind {
  BE_COLL_ALL_REDUCE = 0, /* every buf[i] = reduce(buf[0..n)) element-wise, in place */
  BE_COLL_BROADCAST,      /* every buf[i] = buf[root] */
  BE_COLL_ALL_GATHER      /* every recv[i] = send[0] ++ send[1] ++ ... ++ send[n-1] */
} be_coll_kind;

typedef enum be_reduce_op {
  BE_REDUCE_SUM = 0,
  BE_REDUCE_PROD,
  BE_REDUCE_MIN,
  BE_REDUCE_MAX
} be_reduce_op;

#endif
