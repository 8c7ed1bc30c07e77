/* The one validator of op envelopes, run by the client library (against its handle table, so
 * an argument error is reported by the call itself) and again by the session (against its
 * own table: the daemon trusts no client). It also sets each buffer's access mode and range
 * from the op itself, so a client cannot claim to overwrite what it only partly writes.
 *
 * What the table row says (the number of buffers, the dtype rule) is checked here for every
 * kind; the rest by each kind's shape_<name> (without the buffers) and check_<name> (against
 * them). */
#include "ops/check.h"

#include <string.h>

#include "runtime/error_detail.h"

static bool is_float(accel_dtype t) {
  return t == ACCEL_F32 || t == ACCEL_F64 || t == ACCEL_F16 || t == ACCEL_BF16;
}

static bool range_ok(uint64_t offset, uint64_t count, uint64_t len) {
  return offset <= len && count <= len - offset;
}

static void set_access(dev_op *op, uint32_t i, uint32_t access, uint64_t offset, uint64_t count) {
  op->bufs[i].access = access;
  op->bufs[i].offset = offset;
  op->bufs[i].count = count;
}

/* Kinds whose payload holds nothing to check before the buffers are known. */
static int shape_none(const dev_op *op) {
  return 0;
}

/* Kinds the session checks against its own tables (a handle it already has, or has not). */
static int check_none(dev_op *op, const dev_buf_info *b) {
  return 0;
}

/* ---- memory ---- */

/* ACCEL_EINVAL, saying which range of which buffer lies past its end. */
static int past_end(const char *what, uint64_t offset, uint64_t count, uint64_t len) {
  return rt_error_detail(ACCEL_EINVAL, "%s: elements [%llu, %llu + %llu) past its %llu elements",
                         what, (unsigned long long)offset, (unsigned long long)offset,
                         (unsigned long long)count, (unsigned long long)len);
}

static int check_io(dev_op *op, const dev_buf_info *b) {
  if (!range_ok(op->bufs[0].offset, op->bufs[0].count, b[0].count))
    return past_end("the buffer", op->bufs[0].offset, op->bufs[0].count, b[0].count);
  bool write = op->h.kind == DEV_OP_WRITE;
  /* A write carries exactly the bytes it names (on the wire, the frame's own length). */
  if (write && op->u.write.bytes != op->bufs[0].count * dev_dtype_size(b[0].dtype))
    return ACCEL_EINVAL;
  if (write && op->u.write.src == NULL && op->u.write.bytes > 0)
    return ACCEL_EINVAL;
  /* A read names its bytes too: acceld sizes its reply (or checks the shared memory it
   * writes into) by them before the buffer is known; they must be the buffer's. */
  if (!write && op->u.read.bytes != op->bufs[0].count * dev_dtype_size(b[0].dtype))
    return ACCEL_EINVAL;
  set_access(op, 0, write ? DEV_WRITE_ALL : DEV_READ, op->bufs[0].offset, op->bufs[0].count);
  return 0;
}

#define shape_write shape_none
#define shape_read shape_none
#define check_write check_io
#define check_read check_io

#define shape_copy shape_none
static int check_copy(dev_op *op, const dev_buf_info *b) {
  uint64_t n = op->bufs[0].count, d = op->bufs[0].offset, s = op->bufs[1].offset;
  if (op->bufs[1].count != n)
    return ACCEL_EINVAL;
  if (!range_ok(d, n, b[0].count))
    return past_end("dst", d, n, b[0].count);
  if (!range_ok(s, n, b[1].count))
    return past_end("src", s, n, b[1].count);
  if (op->bufs[0].handle == op->bufs[1].handle && n > 0 && d < s + n && s < d + n)
    return ACCEL_EINVAL; /* overlapping ranges of one buffer */
  set_access(op, 0, DEV_WRITE_ALL, d, n);
  set_access(op, 1, DEV_READ, s, n);
  return 0;
}

#define shape_fill shape_none
/* The value's bits beyond the element's size must be 0; a bool's value 0 or 1. */
static int check_fill(dev_op *op, const dev_buf_info *b) {
  uint32_t size = be_dtype_size(b[0].dtype);
  if (size < 8 && op->u.fill.value >> (8 * size) != 0)
    return ACCEL_EINVAL;
  if (b[0].dtype == ACCEL_BOOL && op->u.fill.value > 1)
    return rt_error_detail(ACCEL_EINVAL, "fill: a bool is 0 or 1, not %llu",
                           (unsigned long long)op->u.fill.value);
  set_access(op, 0, DEV_WRITE_ALL, 0, b[0].count);
  return 0;
}

/* A buffer holds at least one element. */
static int shape_buffer_create(const dev_op *op) {
  return be_dtype_size(op->u.create.dtype) == 0 || op->bufs[0].count == 0 ? ACCEL_EINVAL : 0;
}
#define check_buffer_create check_none
#define shape_buffer_destroy shape_none
#define check_buffer_destroy check_none

/* ---- sharing memory in the process (embedded contexts only: the codec refuses them) ---- */

/* The exported copy is read and written by someone else: the op reads and writes all of it. */
#define shape_export shape_none
static int check_export(dev_op *op, const dev_buf_info *b) {
  if (op->u.xport.out == NULL)
    return rt_error_detail(ACCEL_EINVAL, "export: no place for the answer");
  set_access(op, 0, DEV_RW, 0, b[0].count);
  return 0;
}
#define shape_export_end shape_none
#define check_export_end check_none

/* Foreign memory: a whole number of elements, aligned to one. */
static int shape_import(const dev_op *op) {
  size_t size = be_dtype_size(op->u.import.dtype);
  uint64_t bytes = op->u.import.bytes;
  if (size == 0)
    return rt_error_detail(ACCEL_EINVAL, "import: no dtype %u", op->u.import.dtype);
  if (op->u.import.address == 0 || op->u.import.address % size != 0)
    return rt_error_detail(ACCEL_EINVAL, "import: address 0x%llx is not one of %zu-byte elements",
                           (unsigned long long)op->u.import.address, size);
  if (bytes == 0 || bytes % size != 0 || op->bufs[0].count != bytes / size)
    return rt_error_detail(ACCEL_EINVAL,
                           "import: %llu bytes are not a whole number of %zu-byte "
                           "elements (at least one)",
                           (unsigned long long)bytes, size);
  return 0;
}
#define check_import check_none

/* ---- blas ---- */

static int shape_gemm(const dev_op *op) {
  return (unsigned)op->u.gemm.math > BE_GEMM_MATH_FP64 ? ACCEL_EINVAL : 0;
}

/* The element types come from the buffers: A and B share one, C may differ (F32 output of
 * 16-bit inputs); be_blas_check_gemm refuses combinations accel does not define. */
static int check_gemm(dev_op *op, const dev_buf_info *b) {
  be_gemm_args *g = &op->u.gemm;
  if (op->bufs[2].handle == op->bufs[0].handle || op->bufs[2].handle == op->bufs[1].handle)
    return ACCEL_EINVAL; /* C must not alias A or B */
  if (b[0].dtype != b[1].dtype)
    return ACCEL_EINVAL;
  g->ab_type = b[0].dtype;
  g->c_type = b[2].dtype;
  int rc = be_blas_check_gemm(g, b[0].count, b[1].count, b[2].count);
  if (rc != 0)
    return rc;
  /* beta = 0 over all of C (one matrix, ldc = m) overwrites it: its old contents need not be
   * brought. */
  bool whole = g->beta == 0.0 && g->batch == 1 && g->ldc == g->m &&
               (uint64_t)g->m * (uint64_t)g->n == b[2].count;
  set_access(op, 0, DEV_READ, 0, b[0].count);
  set_access(op, 1, DEV_READ, 0, b[1].count);
  set_access(op, 2, whole ? DEV_WRITE_ALL : DEV_RW, 0, b[2].count);
  return 0;
}

/* axpy (x, y) and dot (x, y, result): y is read and written by axpy, read by dot. */
static int check_blas2v(dev_op *op, const dev_buf_info *b, uint64_t n, uint32_t y_access) {
  if (n > b[0].count || n > b[1].count)
    return ACCEL_EINVAL;
  set_access(op, 0, DEV_READ, 0, n);
  set_access(op, 1, y_access, 0, n);
  return 0;
}

#define shape_axpy shape_none
static int check_axpy(dev_op *op, const dev_buf_info *b) {
  return check_blas2v(op, b, op->u.axpy.n, DEV_RW);
}

#define shape_dot shape_none
static int check_dot(dev_op *op, const dev_buf_info *b) {
  int rc = check_blas2v(op, b, op->u.dot.n, DEV_READ);
  if (rc != 0)
    return rc;
  if (b[2].count < 1 || op->bufs[2].handle == op->bufs[0].handle ||
      op->bufs[2].handle == op->bufs[1].handle)
    return ACCEL_EINVAL;
  set_access(op, 2, b[2].count == 1 ? DEV_WRITE_ALL : DEV_RW, 0, 1);
  return 0;
}

#define shape_scal shape_none
static int check_scal(dev_op *op, const dev_buf_info *b) {
  if (op->u.axpy.n > b[0].count)
    return ACCEL_EINVAL;
  set_access(op, 0, DEV_RW, 0, op->u.axpy.n);
  return 0;
}

/* ---- rng ---- */

static int shape_rng(const dev_op *op) {
  return op->u.rng.dist > BE_RNG_NORMAL ? ACCEL_EINVAL : 0;
}

static int check_rng(dev_op *op, const dev_buf_info *b) {
  const be_rng_args *r = &op->u.rng;
  bool typed = r->dist == BE_RNG_BITS ? b[0].dtype == ACCEL_U32 : is_float(b[0].dtype);
  if (!typed)
    return ACCEL_EINVAL;
  if (r->dist == BE_RNG_NORMAL && (r->offset % 2 != 0 || !(r->stddev >= 0.0)))
    return ACCEL_EINVAL;
  set_access(op, 0, DEV_WRITE_ALL, 0, b[0].count);
  return 0;
}

/* ---- nn ---- */

/* dst (bufs[0]) is overwritten when the op covers all of it from another buffer. */
static void set_nn_access(dev_op *op, const dev_buf_info *b, uint64_t covered) {
  bool whole = covered == b[0].count && op->bufs[0].handle != op->bufs[1].handle;
  set_access(op, 0, whole ? DEV_WRITE_ALL : DEV_RW, 0, b[0].count);
  set_access(op, 1, DEV_READ, 0, b[1].count);
}

static int shape_unary(const dev_op *op) {
  return op->u.unary.op > BE_UNARY_OP_LAST ? ACCEL_EINVAL : 0;
}

static int check_unary(dev_op *op, const dev_buf_info *b) {
  if (b[0].count != b[1].count)
    return ACCEL_EINVAL;
  set_nn_access(op, b, b[0].count);
  return 0;
}

#define shape_softmax shape_none
static int check_softmax(dev_op *op, const dev_buf_info *b) {
  uint64_t rows = op->u.softmax.rows, cols = op->u.softmax.cols;
  if (cols != 0 && rows > UINT64_MAX / cols)
    return ACCEL_EINVAL;
  uint64_t covered = rows * cols;
  if (covered > b[0].count || covered > b[1].count)
    return ACCEL_EINVAL;
  set_nn_access(op, b, covered);
  return 0;
}

static int shape_binary(const dev_op *op) {
  const be_binary_args *g = &op->u.binary;
  if (g->op > BE_BINARY_OP_LAST || (g->cols != 0 && g->rows > UINT64_MAX / g->cols))
    return ACCEL_EINVAL;
  return 0;
}

/* Strides that read element i where a rows x cols dst writes element i. */
static bool in_step(uint64_t rows, uint64_t cols, uint64_t rs, uint64_t cs) {
  return (rows <= 1 || rs == cols) && (cols <= 1 || cs == 1);
}

/* a and b of one dtype the op takes; dst of that dtype (arithmetic, logical) or BOOL
 * (comparisons). */
static int binary_dtypes(const be_binary_args *g, const dev_buf_info *b) {
  if (b[1].dtype != b[2].dtype)
    return rt_error_detail(ACCEL_EINVAL, "binary: a and b of different dtypes (%s and %s)",
                           dev_dtype_name(b[1].dtype), dev_dtype_name(b[2].dtype));
  if (g->op == BE_DIV && (b[1].dtype == ACCEL_I32 || b[1].dtype == ACCEL_U32))
    return rt_error_detail(ACCEL_EINVAL,
                           "binary: no divide of %s (numpy's / of integers gives floats: "
                           "convert to a float dtype first)",
                           dev_dtype_name(b[1].dtype));
  if (!be_binary_dtype_ok(g->op, b[1].dtype))
    return rt_error_detail(ACCEL_EINVAL, "binary: inputs of %s (%s)", dev_dtype_name(b[1].dtype),
                           be_binary_logical(g->op) ? "the logical ops take bool, i32, u32"
                                                    : "it takes f32, f64, f16, bf16, i32, u32");
  uint32_t want = be_binary_compares(g->op) ? ACCEL_BOOL : b[1].dtype;
  if (b[0].dtype != want)
    return rt_error_detail(ACCEL_EINVAL, "binary: dst is %s where the op writes %s",
                           dev_dtype_name(b[0].dtype), dev_dtype_name(want));
  return 0;
}

/* dst may be an input only where that input is read in step with the writes (in place). */
static int check_binary(dev_op *op, const dev_buf_info *b) {
  const be_binary_args *g = &op->u.binary;
  uint64_t n = g->rows * g->cols; /* checked by the shape */
  uint64_t ea = be_binary_span(g, g->a_rs, g->a_cs), eb = be_binary_span(g, g->b_rs, g->b_cs);
  int rc = binary_dtypes(g, b);
  if (rc != 0)
    return rc;
  if (n > b[0].count)
    return past_end("dst (rows x cols)", 0, n, b[0].count);
  if (ea > b[1].count)
    return past_end("a at its strides", 0, ea, b[1].count);
  if (eb > b[2].count)
    return past_end("b at its strides", 0, eb, b[2].count);
  bool in_a = op->bufs[0].handle == op->bufs[1].handle;
  bool in_b = op->bufs[0].handle == op->bufs[2].handle;
  if ((in_a && !in_step(g->rows, g->cols, g->a_rs, g->a_cs)) ||
      (in_b && !in_step(g->rows, g->cols, g->b_rs, g->b_cs)))
    return rt_error_detail(ACCEL_EINVAL, "dst is an input read at other strides than dst's");
  set_access(op, 0, in_a || in_b ? DEV_RW : DEV_WRITE_ALL, 0, n);
  set_access(op, 1, DEV_READ, 0, ea);
  set_access(op, 2, DEV_READ, 0, eb);
  return 0;
}

static int shape_where(const dev_op *op) {
  const be_where_args *g = &op->u.where;
  return g->cols != 0 && g->rows > UINT64_MAX / g->cols ? ACCEL_EINVAL : 0;
}

/* cond BOOL; dst, a and b of one dtype (any); each input read in step if it is dst. */
static int check_where(dev_op *op, const dev_buf_info *b) {
  const be_where_args *g = &op->u.where;
  static const char *const what[4] = {"dst (rows x cols)", "cond at its strides",
                                      "a at its strides", "b at its strides"};
  uint64_t span[4] = {g->rows * g->cols, be_where_span(g, g->c_rs, g->c_cs),
                      be_where_span(g, g->a_rs, g->a_cs), be_where_span(g, g->b_rs, g->b_cs)};
  const uint64_t rs[4] = {g->cols, g->c_rs, g->a_rs, g->b_rs},
                 cs[4] = {1, g->c_cs, g->a_cs, g->b_cs};
  if (b[1].dtype != ACCEL_BOOL)
    return rt_error_detail(ACCEL_EINVAL, "where: cond is %s, not bool", dev_dtype_name(b[1].dtype));
  if (b[2].dtype != b[0].dtype || b[3].dtype != b[0].dtype)
    return rt_error_detail(ACCEL_EINVAL, "where: dst, a and b of different dtypes (%s, %s, %s)",
                           dev_dtype_name(b[0].dtype), dev_dtype_name(b[2].dtype),
                           dev_dtype_name(b[3].dtype));
  bool in_place = false;
  for (uint32_t i = 0; i < 4; i++) {
    if (span[i] > b[i].count)
      return past_end(what[i], 0, span[i], b[i].count);
    if (i == 0 || op->bufs[i].handle != op->bufs[0].handle)
      continue;
    if (!in_step(g->rows, g->cols, rs[i], cs[i]))
      return rt_error_detail(ACCEL_EINVAL, "where: dst is an input read at other strides");
    in_place = true;
  }
  set_access(op, 0, in_place ? DEV_RW : DEV_WRITE_ALL, 0, span[0]);
  for (uint32_t i = 1; i < 4; i++)
    set_access(op, i, DEV_READ, 0, span[i]);
  return 0;
}

static int shape_convert(const dev_op *op) {
  const be_convert_args *g = &op->u.convert;
  return g->cols != 0 && g->rows > UINT64_MAX / g->cols ? ACCEL_EINVAL : 0;
}

/* Any two of the dtypes (be_convert_dtype_ok); dst and src distinct buffers (elements of
 * different sizes are not read in step with the writes). */
static int check_convert(dev_op *op, const dev_buf_info *b) {
  const be_convert_args *g = &op->u.convert;
  uint64_t n = g->rows * g->cols, span = be_convert_span(g); /* n checked by the shape */
  for (uint32_t i = 0; i < 2; i++)
    if (!be_convert_dtype_ok(b[i].dtype))
      return rt_error_detail(ACCEL_EINVAL,
                             "convert: %s of dtype %s (it takes f32, f64, f16, "
                             "bf16, i32, u32, bool)",
                             i == 0 ? "dst" : "src", dev_dtype_name(b[i].dtype));
  if (n > b[0].count)
    return past_end("dst (rows x cols)", 0, n, b[0].count);
  if (span > b[1].count)
    return past_end("src at its strides", 0, span, b[1].count);
  if (op->bufs[0].handle == op->bufs[1].handle)
    return rt_error_detail(ACCEL_EINVAL, "convert: dst is src");
  set_access(op, 0, DEV_WRITE_ALL, 0, n);
  set_access(op, 1, DEV_READ, 0, span);
  return 0;
}

static int shape_reduce(const dev_op *op) {
  const be_reduction_args *g = &op->u.reduce;
  if (g->op > BE_REDUCTION_OP_LAST || g->axis > BE_REDUCTION_AXIS_LAST ||
      (g->cols != 0 && g->rows > UINT64_MAX / g->cols))
    return ACCEL_EINVAL;
  if (!be_reduction_defined(g))
    return rt_error_detail(ACCEL_EINVAL, "reduce: max or min of no elements (no identity)");
  return 0;
}

/* dst and src are distinct buffers: dst's outputs are written while src is read. */
static int check_reduce(dev_op *op, const dev_buf_info *b) {
  const be_reduction_args *g = &op->u.reduce;
  uint64_t n = be_reduction_outputs(g), span = be_reduction_span(g);
  if (n > b[0].count)
    return past_end("dst (the outputs)", 0, n, b[0].count);
  if (span > b[1].count)
    return past_end("src at its strides", 0, span, b[1].count);
  if (op->bufs[0].handle == op->bufs[1].handle)
    return rt_error_detail(ACCEL_EINVAL, "reduce: dst is src");
  set_access(op, 0, DEV_WRITE_ALL, 0, n);
  set_access(op, 1, DEV_READ, 0, span);
  return 0;
}

/* ---- user kernels ---- */

static int shape_module_load(const dev_op *op) {
  uint32_t src = op->u.module.source;
  if (src < ACCEL_SOURCE_CUDA || src > ACCEL_SOURCE_SPIRV || op->u.module.len == 0 ||
      op->u.module.code == NULL || op->u.module.len > DEV_MODULE_MAX_CODE)
    return ACCEL_EINVAL;
  const char *o = op->u.module.options;
  if (o && strnlen(o, DEV_MODULE_MAX_OPTIONS + 1) > DEV_MODULE_MAX_OPTIONS)
    return ACCEL_EINVAL;
  return 0;
}
#define check_module_load check_none
#define shape_module_unload shape_none
#define check_module_unload check_none

static bool name_ok(const char *name) {
  size_t n = strnlen(name, BE_KERNEL_NAME_MAX + 1);
  return n > 0 && n <= BE_KERNEL_NAME_MAX;
}

static bool geometry_ok(const dev_launch *l) {
  for (int i = 0; i < 3; i++)
    if (l->grid[i] == 0 || l->block[i] == 0)
      return false;
  return true;
}

/* The arguments in themselves: the k-th buffer argument is bufs[k], every buffer is one. */
static bool args_ok(const dev_op *op) {
  const dev_launch *l = &op->u.launch;
  uint32_t next_buf = 0;
  if (l->nargs > BE_LAUNCH_MAX_ARGS)
    return false;
  for (uint32_t i = 0; i < l->nargs; i++) {
    const dev_kernel_arg *a = &l->args[i];
    switch (a->kind) {
    case BE_PARAM_BUFFER:
      if (a->bits != next_buf++ || a->size != 0)
        return false;
      break;
    case BE_PARAM_SCALAR:
      if ((a->size != 1 && a->size != 2 && a->size != 4 && a->size != 8) ||
          (a->size < 8 && a->bits >> (8 * a->size) != 0))
        return false;
      break;
    case BE_PARAM_LOCAL:
      if (a->size == 0 || a->bits != 0)
        return false;
      break;
    default:
      return false;
    }
  }
  return next_buf == op->nbufs;
}

static int shape_launch(const dev_op *op) {
  const dev_launch *l = &op->u.launch;
  if (op->nbufs > ACCEL_LAUNCH_MAX_BUFFERS || !name_ok(l->name) || !geometry_ok(l) ||
      !args_ok(op) || l->module == 0)
    return ACCEL_EINVAL;
  return 0;
}

/* The buffers' modes are the caller's to declare (the kernel is opaque): READ, WRITE (every
 * element of the range written, none read) or both; the ranges must lie in the buffers. */
static int check_launch(dev_op *op, const dev_buf_info *b) {
  for (uint32_t i = 0; i < op->nbufs; i++) {
    dev_op_buf *ob = &op->bufs[i];
    uint32_t a = ob->access;
    if ((a != DEV_READ && a != DEV_WRITE && a != DEV_RW && a != DEV_WRITE_ALL) ||
        !range_ok(ob->offset, ob->count, b[i].count))
      return ACCEL_EINVAL;
    if (a == DEV_WRITE)
      ob->access = DEV_WRITE_ALL;
  }
  return 0;
}

/* ---- collectives ---- */

static uint32_t coll_nbufs(const dev_op *op) {
  return op->u.coll.kind == BE_COLL_ALL_GATHER ? 2 * op->u.coll.ndev : op->u.coll.ndev;
}

/* Devices distinct indexes (the session checks them against the world), one buffer per
 * device (two for all-gather), a root among them. */
static int shape_collective(const dev_op *op) {
  uint32_t n = op->u.coll.ndev;
  if (op->u.coll.kind > BE_COLL_ALL_GATHER || op->u.coll.reduce > BE_REDUCE_MAX || n < 1 ||
      n > BE_COLL_MAX_DEVICES || op->nbufs != coll_nbufs(op) ||
      (op->u.coll.kind == BE_COLL_BROADCAST && op->u.coll.root >= n) ||
      op->h.device != op->u.coll.devices[0])
    return ACCEL_EINVAL;
  for (uint32_t i = 0; i < n; i++) {
    if (op->u.coll.devices[i] < 0)
      return ACCEL_EINVAL;
    for (uint32_t j = 0; j < i; j++)
      if (op->u.coll.devices[j] == op->u.coll.devices[i])
        return ACCEL_EINVAL;
  }
  for (uint32_t i = n; i < BE_COLL_MAX_DEVICES; i++)
    if (op->u.coll.devices[i] != 0)
      return ACCEL_EINVAL;
  return 0;
}

/* Float buffers of one dtype (the table's rule), all distinct; equal counts, an all-gather's
 * receives ndev times its sends'. All-reduce reads and writes every buffer; broadcast reads
 * the root's and overwrites the others; all-gather reads the sends and overwrites the
 * receives. */
static int check_collective(dev_op *op, const dev_buf_info *b) {
  uint32_t n = op->u.coll.ndev, kind = op->u.coll.kind;
  uint64_t count = b[0].count;
  for (uint32_t i = 0; i < op->nbufs; i++)
    for (uint32_t j = 0; j < i; j++)
      if (op->bufs[i].handle == op->bufs[j].handle)
        return ACCEL_EINVAL;
  for (uint32_t i = 0; i < n; i++) {
    if (b[i].count != count)
      return ACCEL_EINVAL;
    if (kind == BE_COLL_ALL_GATHER && (count > UINT64_MAX / n || b[n + i].count != count * n))
      return ACCEL_EINVAL;
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t a = kind == BE_COLL_ALL_REDUCE                           ? DEV_RW
                 : kind == BE_COLL_ALL_GATHER || i == op->u.coll.root ? DEV_READ
                                                                      : DEV_WRITE_ALL;
    set_access(op, i, a, 0, count);
    if (kind == BE_COLL_ALL_GATHER)
      set_access(op, n + i, DEV_WRITE_ALL, 0, count * n);
  }
  return 0;
}

/* ---- the table ---- */

typedef int (*shape_fn)(const dev_op *op);
typedef int (*check_fn)(dev_op *op, const dev_buf_info *b);

#define SHAPE_ROW(K, name, label, nbufs, dtypes, package, queue, runs) [DEV_OP_##K] = shape_##name,
#define CHECK_ROW(K, name, label, nbufs, dtypes, package, queue, runs) [DEV_OP_##K] = check_##name,
static const shape_fn shapes[DEV_OP_KIND_COUNT_] = {DEV_OP_TABLE(SHAPE_ROW)};
static const check_fn checks[DEV_OP_KIND_COUNT_] = {DEV_OP_TABLE(CHECK_ROW)};

int dev_op_check_shape(const dev_op *op) {
  const dev_op_info *info = dev_op_info_of(op->h.kind);
  if (info == NULL || op->h.completion > ACCEL_COMPLETION_POLL)
    return ACCEL_EINVAL;
  if (info->nbufs != DEV_NBUFS_OWN && op->nbufs != info->nbufs)
    return ACCEL_EINVAL;
  return shapes[op->h.kind](op);
}

/* 0, or ACCEL_EINVAL saying which buffers' dtypes break the kind's rule. */
static int dtypes_ok(const dev_op *op, const dev_op_info *info, const dev_buf_info *b) {
  if (info->dtypes == DEV_DT_ANY || op->nbufs == 0)
    return 0;
  for (uint32_t i = 1; i < op->nbufs; i++)
    if (b[i].dtype != b[0].dtype)
      return rt_error_detail(ACCEL_EINVAL, "%s: buffers of different dtypes (%s and %s)",
                             info->label, dev_dtype_name(b[0].dtype), dev_dtype_name(b[i].dtype));
  if (info->dtypes == DEV_DT_FLOAT && !is_float(b[0].dtype))
    return rt_error_detail(ACCEL_EINVAL, "%s: needs a float dtype, not %s", info->label,
                           dev_dtype_name(b[0].dtype));
  return 0;
}

int dev_op_check(dev_op *op, const dev_buf_info *bufs) {
  int rc = dev_op_check_shape(op);
  if (rc == 0)
    rc = dtypes_ok(op, dev_op_info_of(op->h.kind), bufs);
  return rc != 0 ? rc : checks[op->h.kind](op, bufs);
}
