/* Encoding and decoding of op frames (layout: docs/PROTOCOL.md): a header, the buffers, then
 * a payload fixed per kind (+ a write's bytes, a module's code). The decoder takes untrusted
 * bytes; the checker (ops/check.h) runs last, on what was decoded. */
#include <string.h>

#include "ops/check.h"
#include "proto/codec_io.h"

_Static_assert(PROTO_OPTIONS_MAX == DEV_MODULE_MAX_OPTIONS, "the wire carries every option");

static size_t options_len(const dev_op *op) {
  const char *opts = op->u.module.options;
  return opts ? strnlen(opts, PROTO_OPTIONS_MAX + 1) : 0;
}

/* source, options_len, code_len, the options; the code follows as the op's data. */
static void put_module_load(proto_out *o, const dev_op *op, size_t data_len) {
  size_t n = options_len(op);
  put_u32(o, op->u.module.source);
  put_u32(o, (uint32_t)n);
  put_u64(o, op->u.module.len);
  put_bytes(o, op->u.module.options, n);
}

/* The name as far as its terminator (all of name[] if it has none: the decoder refuses it). */
static void put_launch(proto_out *o, const dev_op *op, size_t data_len) {
  const dev_launch *l = &op->u.launch;
  size_t n = strnlen(l->name, sizeof l->name);
  put_u64(o, l->module);
  for (int i = 0; i < 3; i++)
    put_u32(o, l->grid[i]);
  for (int i = 0; i < 3; i++)
    put_u32(o, l->block[i]);
  put_u32(o, l->shared_bytes);
  put_u32(o, l->nargs);
  put_u32(o, (uint32_t)n);
  put_bytes(o, l->name, n);
  for (uint32_t i = 0; i < l->nargs; i++) {
    put_u32(o, l->args[i].kind);
    put_u32(o, l->args[i].size);
    put_u64(o, l->args[i].bits);
  }
}

/* Each kind's payload: put_<name> writes it, get_<name> reads it (and returns the length of
 * the bytes after it: a write's data, a module's code), refusing what is out of range for
 * the decoder (enums, lengths): the checker does the rest. The table picks them by kind. */

static void put_none(proto_out *o, const dev_op *op, size_t data_len) {
}

static uint64_t get_none(reader *r, dev_op *op, proto_bytes *options) {
  return 0;
}

/* The length of the data that follows (the frame's own length checks it). */
static void put_write(proto_out *o, const dev_op *op, size_t data_len) {
  put_u64(o, data_len);
}

static uint64_t get_write(reader *r, dev_op *op, proto_bytes *options) {
  return get_u64(r);
}

static void put_read(proto_out *o, const dev_op *op, size_t data_len) {
  put_u64(o, op->u.read.bytes);
}

static uint64_t get_read(reader *r, dev_op *op, proto_bytes *options) {
  op->u.read.bytes = get_u64(r);
  return 0;
}

#define put_copy put_none
#define get_copy get_none

static void put_fill(proto_out *o, const dev_op *op, size_t data_len) {
  put_u64(o, op->u.fill.value);
}

static uint64_t get_fill(reader *r, dev_op *op, proto_bytes *options) {
  op->u.fill.value = get_u64(r);
  return 0;
}

static void put_gemm(proto_out *o, const dev_op *op, size_t data_len) {
  const be_gemm_args *g = &op->u.gemm;
  put_u32(o, g->trans_a);
  put_u32(o, g->trans_b);
  put_i64(o, g->m);
  put_i64(o, g->n);
  put_i64(o, g->k);
  put_f64(o, g->alpha);
  put_f64(o, g->beta);
  put_i64(o, g->lda);
  put_i64(o, g->ldb);
  put_i64(o, g->ldc);
  put_u32(o, g->math);
  put_u32(o, 0);
  put_i64(o, g->batch);
  put_i64(o, g->stride_a);
  put_i64(o, g->stride_b);
  put_i64(o, g->stride_c);
}

/* The types are the buffers': the checker sets them. */
static uint64_t get_gemm(reader *r, dev_op *op, proto_bytes *options) {
  be_gemm_args *g = &op->u.gemm;
  uint32_t ta = get_u32(r), tb = get_u32(r);
  g->trans_a = ta <= BE_BLAS_TRANS ? (be_blas_trans)ta : (r->bad = true, BE_BLAS_NO_TRANS);
  g->trans_b = tb <= BE_BLAS_TRANS ? (be_blas_trans)tb : (r->bad = true, BE_BLAS_NO_TRANS);
  g->m = get_i64(r);
  g->n = get_i64(r);
  g->k = get_i64(r);
  g->alpha = get_f64(r);
  g->beta = get_f64(r);
  g->lda = get_i64(r);
  g->ldb = get_i64(r);
  g->ldc = get_i64(r);
  uint32_t math = get_u32(r);
  g->math = math <= BE_GEMM_MATH_FP64 ? (be_gemm_math)math : (r->bad = true, BE_GEMM_MATH_DEVICE);
  get_u32(r);
  g->batch = get_i64(r);
  g->stride_a = get_i64(r);
  g->stride_b = get_i64(r);
  g->stride_c = get_i64(r);
  return 0;
}

/* axpy and scal: n and alpha. */
static void put_axpy(proto_out *o, const dev_op *op, size_t data_len) {
  put_u64(o, op->u.axpy.n);
  put_f64(o, op->u.axpy.alpha);
}

static uint64_t get_axpy(reader *r, dev_op *op, proto_bytes *options) {
  op->u.axpy.n = get_u64(r);
  op->u.axpy.alpha = get_f64(r);
  return 0;
}

#define put_scal put_axpy
#define get_scal get_axpy

static void put_dot(proto_out *o, const dev_op *op, size_t data_len) {
  put_u64(o, op->u.dot.n);
}

static uint64_t get_dot(reader *r, dev_op *op, proto_bytes *options) {
  op->u.dot.n = get_u64(r);
  return 0;
}

static void put_rng(proto_out *o, const dev_op *op, size_t data_len) {
  put_u32(o, op->u.rng.dist);
  put_u64(o, op->u.rng.seed);
  put_u64(o, op->u.rng.offset);
  put_f64(o, op->u.rng.mean);
  put_f64(o, op->u.rng.stddev);
}

static uint64_t get_rng(reader *r, dev_op *op, proto_bytes *options) {
  uint32_t dist = get_u32(r);
  op->u.rng.dist = dist <= BE_RNG_NORMAL ? (be_rng_dist)dist : (r->bad = true, BE_RNG_BITS);
  op->u.rng.seed = get_u64(r);
  op->u.rng.offset = get_u64(r);
  op->u.rng.mean = get_f64(r);
  op->u.rng.stddev = get_f64(r);
  return 0;
}

static void put_unary(proto_out *o, const dev_op *op, size_t data_len) {
  put_u32(o, op->u.unary.op);
}

static uint64_t get_unary(reader *r, dev_op *op, proto_bytes *options) {
  uint32_t u = get_u32(r);
  op->u.unary.op = u <= BE_UNARY_OP_LAST ? (be_unary_op)u : (r->bad = true, BE_SIGMOID);
  return 0;
}

static void put_softmax(proto_out *o, const dev_op *op, size_t data_len) {
  put_u64(o, op->u.softmax.rows);
  put_u64(o, op->u.softmax.cols);
}

static uint64_t get_softmax(reader *r, dev_op *op, proto_bytes *options) {
  op->u.softmax.rows = get_u64(r);
  op->u.softmax.cols = get_u64(r);
  return 0;
}

static void put_buffer_create(proto_out *o, const dev_op *op, size_t data_len) {
  put_u32(o, op->u.create.dtype);
}

static uint64_t get_buffer_create(reader *r, dev_op *op, proto_bytes *options) {
  op->u.create.dtype = get_u32(r);
  return 0;
}

#define put_buffer_destroy put_none
#define get_buffer_destroy get_none
#define put_module_unload put_none
#define get_module_unload get_none

/* Kinds that share memory inside one process: never on the wire. The client library refuses
 * them before encoding (accel_buffer_export through acceld is ACCEL_ENOTSUP), and the decoder
 * refuses them from a peer. */
static uint64_t get_in_process(reader *r, dev_op *op, proto_bytes *options) {
  r->bad = true;
  return 0;
}

#define put_export put_none
#define get_export get_in_process
#define put_export_end put_none
#define get_export_end get_in_process
#define put_import put_none
#define get_import get_in_process

static void put_collective(proto_out *o, const dev_op *op, size_t data_len) {
  put_u32(o, op->u.coll.kind);
  put_u32(o, op->u.coll.reduce);
  put_u32(o, op->u.coll.root);
  put_u32(o, op->u.coll.ndev);
  for (uint32_t i = 0; i < BE_COLL_MAX_DEVICES; i++)
    put_i32(o, op->u.coll.devices[i]);
}

static void put_binary(proto_out *o, const dev_op *op, size_t data_len) {
  const be_binary_args *g = &op->u.binary;
  put_u32(o, g->op);
  put_u32(o, 0);
  put_u64(o, g->rows);
  put_u64(o, g->cols);
  put_u64(o, g->a_rs);
  put_u64(o, g->a_cs);
  put_u64(o, g->b_rs);
  put_u64(o, g->b_cs);
}

static uint64_t get_binary(reader *r, dev_op *op, proto_bytes *options) {
  be_binary_args *g = &op->u.binary;
  uint32_t f = get_u32(r);
  g->op = f <= BE_BINARY_OP_LAST ? (be_binary_op)f : (r->bad = true, BE_ADD);
  get_u32(r);
  g->rows = get_u64(r);
  g->cols = get_u64(r);
  g->a_rs = get_u64(r);
  g->a_cs = get_u64(r);
  g->b_rs = get_u64(r);
  g->b_cs = get_u64(r);
  return 0;
}

static void put_reduce(proto_out *o, const dev_op *op, size_t data_len) {
  const be_reduction_args *g = &op->u.reduce;
  put_u32(o, g->op);
  put_u32(o, g->axis);
  put_u64(o, g->rows);
  put_u64(o, g->cols);
  put_u64(o, g->rs);
  put_u64(o, g->cs);
}

static uint64_t get_reduce(reader *r, dev_op *op, proto_bytes *options) {
  be_reduction_args *g = &op->u.reduce;
  uint32_t f = get_u32(r), axis = get_u32(r);
  g->op = f <= BE_REDUCTION_OP_LAST ? (be_reduction_op)f : (r->bad = true, BE_RED_SUM);
  g->axis = axis <= BE_REDUCTION_AXIS_LAST ? (be_reduction_axis)axis : (r->bad = true, BE_AXIS_ALL);
  g->rows = get_u64(r);
  g->cols = get_u64(r);
  g->rs = get_u64(r);
  g->cs = get_u64(r);
  return 0;
}

static void put_where(proto_out *o, const dev_op *op, size_t data_len) {
  const be_where_args *g = &op->u.where;
  put_u64(o, g->rows);
  put_u64(o, g->cols);
  put_u64(o, g->c_rs);
  put_u64(o, g->c_cs);
  put_u64(o, g->a_rs);
  put_u64(o, g->a_cs);
  put_u64(o, g->b_rs);
  put_u64(o, g->b_cs);
}

static uint64_t get_where(reader *r, dev_op *op, proto_bytes *options) {
  be_where_args *g = &op->u.where;
  g->rows = get_u64(r);
  g->cols = get_u64(r);
  g->c_rs = get_u64(r);
  g->c_cs = get_u64(r);
  g->a_rs = get_u64(r);
  g->a_cs = get_u64(r);
  g->b_rs = get_u64(r);
  g->b_cs = get_u64(r);
  return 0;
}

static void put_convert(proto_out *o, const dev_op *op, size_t data_len) {
  const be_convert_args *g = &op->u.convert;
  put_u64(o, g->rows);
  put_u64(o, g->cols);
  put_u64(o, g->rs);
  put_u64(o, g->cs);
}

static uint64_t get_convert(reader *r, dev_op *op, proto_bytes *options) {
  be_convert_args *g = &op->u.convert;
  g->rows = get_u64(r);
  g->cols = get_u64(r);
  g->rs = get_u64(r);
  g->cs = get_u64(r);
  return 0;
}

/* Enums here; the rest by the checker (dev_op_check_shape). */
static uint64_t get_collective(reader *r, dev_op *op, proto_bytes *options) {
  op->u.coll.kind = get_u32(r);
  op->u.coll.reduce = get_u32(r);
  op->u.coll.root = get_u32(r);
  op->u.coll.ndev = get_u32(r);
  r->bad |= op->u.coll.kind > BE_COLL_ALL_GATHER || op->u.coll.reduce > BE_REDUCE_MAX;
  for (uint32_t i = 0; i < BE_COLL_MAX_DEVICES; i++)
    op->u.coll.devices[i] = get_i32(r);
  return 0;
}

/* A MODULE_LOAD's payload; returns its code's length (the bytes after the options). */
static uint64_t get_module_load(reader *r, dev_op *op, proto_bytes *options) {
  uint32_t source = get_u32(r);
  uint32_t n = get_u32(r);
  uint64_t code_len = get_u64(r);
  if (source < ACCEL_SOURCE_CUDA || source > ACCEL_SOURCE_SPIRV || n > PROTO_OPTIONS_MAX ||
      code_len == 0 || op->nbufs != 1) {
    r->bad = true;
    return 0;
  }
  const uint8_t *p = get_bytes(r, n);
  if (p && memchr(p, '\0', n) != NULL) /* it becomes a C string */
    r->bad = true;
  op->u.module.source = source;
  *options = (proto_bytes){p, p ? n : 0};
  return code_len;
}

static void get_kernel_arg(reader *r, const dev_op *op, dev_kernel_arg *a) {
  a->kind = get_u32(r);
  a->size = get_u32(r);
  a->bits = get_u64(r);
  if (a->kind < BE_PARAM_BUFFER || a->kind > BE_PARAM_LOCAL ||
      (a->kind == BE_PARAM_BUFFER && a->bits >= op->nbufs))
    r->bad = true;
}

/* The access a launch asks for, per buffer: the client's (the checker holds it to the
 * arguments); other kinds' access modes are the checker's alone. */
static bool launch_access_ok(uint32_t access) {
  return access == DEV_READ || access == DEV_WRITE || access == DEV_RW || access == DEV_WRITE_ALL;
}

/* Everything is bounded before it is stored: nargs by args[], the name by name[] (and it
 * must hold no NUL: it is looked up as a C string). */
static uint64_t get_launch(reader *r, dev_op *op, proto_bytes *options) {
  dev_launch *l = &op->u.launch;
  l->module = get_u64(r);
  for (int i = 0; i < 3; i++)
    l->grid[i] = get_u32(r);
  for (int i = 0; i < 3; i++)
    l->block[i] = get_u32(r);
  l->shared_bytes = get_u32(r);
  l->nargs = get_u32(r);
  uint32_t n = get_u32(r);
  if (r->bad || l->nargs > BE_LAUNCH_MAX_ARGS || n == 0 || n > BE_KERNEL_NAME_MAX) {
    r->bad = true;
    return 0;
  }
  const uint8_t *name = get_bytes(r, n);
  if (name == NULL || memchr(name, '\0', n) != NULL) {
    r->bad = true;
    return 0;
  }
  memcpy(l->name, name, n); /* the op was zeroed: l->name[n] is its terminator */
  for (uint32_t i = 0; i < l->nargs && !r->bad; i++)
    get_kernel_arg(r, op, &l->args[i]);
  for (uint32_t i = 0; i < op->nbufs; i++)
    if (!launch_access_ok(op->bufs[i].access))
      r->bad = true;
  return 0;
}

typedef void (*put_fn)(proto_out *o, const dev_op *op, size_t data_len);
typedef uint64_t (*get_fn)(reader *r, dev_op *op, proto_bytes *options);

#define PUT_ROW(K, name, label, nbufs, dtypes, package, queue, runs) [DEV_OP_##K] = put_##name,
#define GET_ROW(K, name, label, nbufs, dtypes, package, queue, runs) [DEV_OP_##K] = get_##name,
static const put_fn put_by_kind[DEV_OP_KIND_COUNT_] = {DEV_OP_TABLE(PUT_ROW)};
static const get_fn get_by_kind[DEV_OP_KIND_COUNT_] = {DEV_OP_TABLE(GET_ROW)};

/* A kind the table does not know has no payload: the encoder writes none (tests send such
 * ops to acceld on purpose), the decoder refuses it. */
static void put_payload(proto_out *o, const dev_op *op, size_t data_len) {
  if (dev_op_info_of(op->h.kind) != NULL)
    put_by_kind[op->h.kind](o, op, data_len);
}

static uint64_t get_payload(reader *r, dev_op *op, proto_bytes *options) {
  if (dev_op_info_of(op->h.kind) == NULL) {
    r->bad = true;
    return 0;
  }
  return get_by_kind[op->h.kind](r, op, options);
}

static void put_op_head(proto_out *o, const dev_op *op, uint32_t flags) {
  put_u32(o, op->h.kind);
  put_i32(o, op->h.device);
  put_u32(o, op->h.completion);
  put_u32(o, flags);
  put_i64(o, op->h.deadline_ms);
  put_u32(o, op->nbufs);
  put_u32(o, 0);
  for (uint32_t i = 0; i < op->nbufs; i++) {
    put_u64(o, op->bufs[i].handle);
    put_u32(o, op->bufs[i].access);
    put_u32(o, 0);
    put_u64(o, op->bufs[i].offset);
    put_u64(o, op->bufs[i].count);
  }
}

int proto_encode_op(proto_out *o, uint64_t request_id, const dev_op *op, proto_bytes data) {
  if (op->nbufs > DEV_OP_MAX_BUFS || (data.len && op->h.kind != DEV_OP_WRITE))
    return ACCEL_EINVAL;
  if (op->h.kind == DEV_OP_LAUNCH && op->u.launch.nargs > BE_LAUNCH_MAX_ARGS)
    return ACCEL_EINVAL;
  if (op->h.kind == DEV_OP_MODULE_LOAD) {
    if (options_len(op) > PROTO_OPTIONS_MAX)
      return ACCEL_ELIMIT;
    if (op->u.module.code == NULL && op->u.module.len > 0)
      return ACCEL_EINVAL;
    data = (proto_bytes){op->u.module.code, (size_t)op->u.module.len};
  }
  size_t at = proto_begin_frame(o, PROTO_OP, request_id);
  put_op_head(o, op, 0);
  put_payload(o, op, data.len);
  put_bytes(o, data.data, data.len);
  return proto_finish_frame(o, at);
}

int proto_encode_write_head(proto_out *o, uint64_t request_id, const dev_op *op,
                            uint64_t data_len) {
  if (op->nbufs > DEV_OP_MAX_BUFS || op->h.kind != DEV_OP_WRITE)
    return ACCEL_EINVAL;
  size_t at = proto_begin_frame(o, PROTO_OP, request_id);
  put_op_head(o, op, 0);
  put_payload(o, op, data_len);
  int rc = proto_finish_frame(o, at);
  uint64_t body = o->len - at - PROTO_HEADER_SIZE + data_len;
  if (rc == 0 && body > UINT32_MAX)
    return ACCEL_ELIMIT;
  for (int i = 0; rc == 0 && i < 4; i++)
    o->data[at + 12 + i] = (uint8_t)(body >> (8 * i));
  return rc;
}

int proto_encode_op_shm(proto_out *o, uint64_t request_id, const dev_op *op, proto_shm_ref ref) {
  bool write = op->h.kind == DEV_OP_WRITE;
  if (op->nbufs > DEV_OP_MAX_BUFS || (!write && op->h.kind != DEV_OP_READ))
    return ACCEL_EINVAL;
  size_t at = proto_begin_frame(o, PROTO_OP, request_id);
  put_op_head(o, op, PROTO_OPF_SHM);
  put_u64(o, write ? op->u.write.bytes : op->u.read.bytes);
  put_u64(o, ref.region);
  put_u64(o, ref.offset);
  return proto_finish_frame(o, at);
}

static void get_op_head(reader *r, dev_op *op) {
  op->h.kind = get_u32(r);
  op->h.device = get_i32(r);
  op->h.completion = get_u32(r);
  op->h.flags = get_u32(r);
  op->h.deadline_ms = get_i64(r);
  op->nbufs = get_u32(r);
  get_u32(r);
  if (op->nbufs > DEV_OP_MAX_BUFS) {
    r->bad = true;
    return;
  }
  for (uint32_t i = 0; i < op->nbufs; i++) {
    op->bufs[i].handle = get_u64(r);
    op->bufs[i].access = get_u32(r);
    get_u32(r);
    op->bufs[i].offset = get_u64(r);
    op->bufs[i].count = get_u64(r);
  }
}

/* A WRITE or READ whose data is in shared memory: its reference instead of inline bytes. */
static int get_shm_payload(reader *r, dev_op *op, proto_shm_ref *shm) {
  bool write = op->h.kind == DEV_OP_WRITE;
  if (shm == NULL || (!write && op->h.kind != DEV_OP_READ))
    return ACCEL_EPROTO;
  if (write)
    op->u.write.bytes = get_u64(r);
  else
    op->u.read.bytes = get_u64(r);
  shm->region = get_u64(r);
  shm->offset = get_u64(r);
  if (r->bad || dev_op_check_shape(op) != 0)
    return ACCEL_EPROTO;
  return done(r);
}

/* The bytes after the payload: a write's data or a module's code. */
static void take_data(dev_op *op, proto_bytes data) {
  if (op->h.kind == DEV_OP_WRITE) {
    op->u.write.src = data.data;
    op->u.write.bytes = data.len;
  } else if (op->h.kind == DEV_OP_MODULE_LOAD) {
    op->u.module.code = data.data;
    op->u.module.len = data.len;
  }
}

int proto_decode_op_ex(const uint8_t *body, size_t len, bool shm, dev_op *op, proto_op_data *out) {
  reader r = {body, len, 0, false};
  memset(op, 0, sizeof *op);
  memset(out, 0, sizeof *out);
  get_op_head(&r, op);
  if (r.bad || op->h.deadline_ms < 0 || (op->h.device < 0 && op->h.device != ACCEL_DEVICE_ANY) ||
      (op->h.flags & ~(uint32_t)PROTO_OPF_SHM) != 0)
    return ACCEL_EPROTO;
  if (op->h.flags & PROTO_OPF_SHM)
    return get_shm_payload(&r, op, shm ? &out->shm : NULL);
  uint64_t data_len = get_payload(&r, op, &out->options);
  if (r.bad || data_len != r.len - r.pos) {
    out->options = (proto_bytes){NULL, 0};
    return ACCEL_EPROTO;
  }
  out->bytes.data = get_bytes(&r, (size_t)data_len);
  out->bytes.len = (size_t)data_len;
  take_data(op, out->bytes);
  /* The shape check reads the payload too (a created buffer's dtype, a module's code, a
   * launch's arguments): last. */
  if (dev_op_check_shape(op) != 0) {
    memset(out, 0, sizeof *out);
    return ACCEL_EPROTO;
  }
  return done(&r);
}

int proto_decode_op(const uint8_t *body, size_t len, dev_op *op, proto_bytes *data) {
  proto_op_data out;
  int rc = proto_decode_op_ex(body, len, false, op, &out);
  *data = out.bytes;
  return rc;
}
