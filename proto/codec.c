/* Encoding and decoding of frames (layout: docs/PROTOCOL.md). Little-endian, byte by byte. */
#include <stdlib.h>
#include <string.h>

#include "actors/check.h"
#include "actors/world.h"
#include "proto/wire.h"
#include "runtime/alloc.h"

_Static_assert(PROTO_OPTIONS_MAX == DEV_MODULE_MAX_OPTIONS, "the wire carries every option");

/* accel_source kinds, as sets of 1 << kind. */
#define SOURCE_BITS (((1u << (ACCEL_SOURCE_SPIRV + 1)) - 1) & ~1u)

/* ---- writing ---- */

void proto_out_init(proto_out *o) {
  memset(o, 0, sizeof *o);
}

void proto_out_free(proto_out *o) {
  rt_free(o->data);
  proto_out_init(o);
}

static uint8_t *reserve(proto_out *o, size_t n) {
  if (o->err)
    return NULL;
  if (n > SIZE_MAX / 2 - o->len) {
    o->err = ACCEL_ENOMEM;
    return NULL;
  }
  if (o->len + n > o->cap) {
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + n)
      cap *= 2;
    uint8_t *p = rt_realloc(o->data, cap);
    if (p == NULL) {
      o->err = ACCEL_ENOMEM;
      return NULL;
    }
    o->data = p;
    o->cap = cap;
  }
  uint8_t *p = o->data + o->len;
  o->len += n;
  return p;
}

static void put_le(proto_out *o, uint64_t v, int bytes) {
  uint8_t *p = reserve(o, (size_t)bytes);
  for (int i = 0; p && i < bytes; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u16(proto_out *o, uint16_t v) {
  put_le(o, v, 2);
}
static void put_u32(proto_out *o, uint32_t v) {
  put_le(o, v, 4);
}
static void put_u64(proto_out *o, uint64_t v) {
  put_le(o, v, 8);
}
static void put_i32(proto_out *o, int32_t v) {
  put_le(o, (uint32_t)v, 4);
}
static void put_i64(proto_out *o, int64_t v) {
  put_le(o, (uint64_t)v, 8);
}

static void put_f64(proto_out *o, double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof u);
  put_u64(o, u);
}

static void put_bytes(proto_out *o, const void *data, size_t n) {
  uint8_t *p = reserve(o, n);
  if (p && n)
    memcpy(p, data, n);
}

/* Starts a frame; returns the offset of its header for finish_frame. */
static size_t begin_frame(proto_out *o, proto_type type, uint64_t request_id) {
  size_t at = o->len;
  put_u32(o, PROTO_MAGIC);
  put_u16(o, PROTO_VERSION);
  put_u16(o, (uint16_t)type);
  put_u32(o, 0); /* flags */
  put_u32(o, 0); /* body length, patched by finish_frame */
  put_u64(o, request_id);
  return at;
}

static int finish_frame(proto_out *o, size_t at) {
  if (o->err)
    return o->err;
  size_t body = o->len - at - PROTO_HEADER_SIZE;
  if (body > UINT32_MAX)
    return ACCEL_ELIMIT;
  for (int i = 0; i < 4; i++)
    o->data[at + 12 + i] = (uint8_t)(body >> (8 * i));
  return 0;
}

/* ---- reading ---- */

typedef struct reader {
  const uint8_t *p;
  size_t len, pos;
  bool bad; /* read past the end */
} reader;

static uint64_t get_le(reader *r, int bytes) {
  if (r->bad || r->len - r->pos < (size_t)bytes) {
    r->bad = true;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++)
    v |= (uint64_t)r->p[r->pos + i] << (8 * i);
  r->pos += (size_t)bytes;
  return v;
}

static uint16_t get_u16(reader *r) {
  return (uint16_t)get_le(r, 2);
}
static uint32_t get_u32(reader *r) {
  return (uint32_t)get_le(r, 4);
}
static uint64_t get_u64(reader *r) {
  return get_le(r, 8);
}
static int32_t get_i32(reader *r) {
  return (int32_t)get_u32(r);
}
static int64_t get_i64(reader *r) {
  return (int64_t)get_u64(r);
}

static double get_f64(reader *r) {
  uint64_t u = get_u64(r);
  double f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static const uint8_t *get_bytes(reader *r, size_t n) {
  if (r->bad || r->len - r->pos < n) {
    r->bad = true;
    return NULL;
  }
  const uint8_t *p = r->p + r->pos;
  r->pos += n;
  return p;
}

/* The whole body was read, exactly. */
static int done(const reader *r) {
  return r->bad || r->pos != r->len ? ACCEL_EPROTO : 0;
}

/* ---- header ---- */

int proto_decode_header(const uint8_t *frame, size_t len, uint32_t max_message, proto_header *h) {
  if (frame == NULL || len < PROTO_HEADER_SIZE)
    return ACCEL_EPROTO;
  if (len > max_message)
    return ACCEL_ELIMIT;
  reader r = {frame, PROTO_HEADER_SIZE, 0, false};
  h->magic = get_u32(&r);
  h->version = get_u16(&r);
  h->type = get_u16(&r);
  h->flags = get_u32(&r);
  h->body_len = get_u32(&r);
  h->request_id = get_u64(&r);
  if (h->magic != PROTO_MAGIC || h->version != PROTO_VERSION || h->flags != 0 || h->type == 0 ||
      h->type >= PROTO_TYPE_MAX_ || h->body_len != len - PROTO_HEADER_SIZE)
    return ACCEL_EPROTO;
  return 0;
}

size_t proto_next_frame(const uint8_t *p, size_t len) {
  if (p == NULL || len < PROTO_HEADER_SIZE)
    return 0;
  reader r = {p + 12, 4, 0, false};
  uint64_t body = get_u32(&r);
  return body <= len - PROTO_HEADER_SIZE ? (size_t)body + PROTO_HEADER_SIZE : 0;
}

/* ---- hello and welcome ---- */

int proto_encode_hello(proto_out *o, uint64_t request_id, const proto_hello *h) {
  size_t at = begin_frame(o, PROTO_HELLO, request_id);
  size_t n = strnlen(h->name, PROTO_NAME_MAX);
  put_u16(o, h->version);
  put_u16(o, (uint16_t)n);
  put_u32(o, h->capabilities);
  put_bytes(o, h->name, n);
  return finish_frame(o, at);
}

int proto_decode_hello(const uint8_t *body, size_t len, proto_hello *h) {
  reader r = {body, len, 0, false};
  memset(h, 0, sizeof *h);
  h->version = get_u16(&r);
  uint16_t n = get_u16(&r);
  h->capabilities = get_u32(&r);
  if (n > PROTO_NAME_MAX) /* name[] holds PROTO_NAME_MAX bytes and the NUL */
    return ACCEL_EPROTO;
  const uint8_t *name = get_bytes(&r, n);
  if (name)
    memcpy(h->name, name, n); /* the memset left name[n] 0: always terminated */
  return done(&r);
}

static void put_device(proto_out *o, const struct accel_device_info *d) {
  put_bytes(o, d->name, sizeof d->name);
  put_bytes(o, d->backend, sizeof d->backend);
  put_u64(o, d->mem_bytes);
  put_u32(o, d->compute_units);
  put_u32(o, (uint32_t)d->state);
  put_u32(o, d->restarts);
  put_u32(o, d->packages);
  put_u32(o, d->gemm_dtypes);
  put_u32(o, d->vector_dtypes);
  put_u32(o, d->rng_dtypes);
  put_u32(o, d->nn_dtypes);
  put_u32(o, d->kind);
  put_u32(o, d->sources);
  put_u32(o, d->collective_dtypes);
}

static void get_device(reader *r, struct accel_device_info *d) {
  const uint8_t *name = get_bytes(r, sizeof d->name);
  const uint8_t *backend = get_bytes(r, sizeof d->backend);
  if (name)
    memcpy(d->name, name, sizeof d->name);
  if (backend)
    memcpy(d->backend, backend, sizeof d->backend);
  d->name[sizeof d->name - 1] = '\0';
  d->backend[sizeof d->backend - 1] = '\0';
  d->mem_bytes = get_u64(r);
  d->compute_units = get_u32(r);
  /* An enum like any other: a client may index a table of state names with it. The daemon
   * sends its nodes' dev_node_state, whose last value is QUARANTINED. */
  uint32_t state = get_u32(r);
  d->state = state <= DEV_NODE_QUARANTINED ? (int)state : (r->bad = true, 0);
  d->restarts = get_u32(r);
  d->packages = get_u32(r);
  d->gemm_dtypes = get_u32(r);
  d->vector_dtypes = get_u32(r);
  d->rng_dtypes = get_u32(r);
  d->nn_dtypes = get_u32(r);
  uint32_t kind = get_u32(r); /* an enum a client may index a table with */
  d->kind = kind <= BE_KIND_ACCELERATOR ? kind : (r->bad = true, 0);
  d->sources = get_u32(r) & SOURCE_BITS; /* a daemon before user kernels sent 0 */
  d->collective_dtypes = get_u32(r);
}

int proto_encode_device(proto_out *o, const struct accel_device_info *d) {
  put_device(o, d);
  return o->err;
}

int proto_decode_device(const uint8_t *p, size_t len, struct accel_device_info *d) {
  reader r = {p, len, 0, false};
  memset(d, 0, sizeof *d);
  get_device(&r, d);
  return done(&r);
}

int proto_encode_transfer_stats(proto_out *o, const accel_transfer_stats *t) {
  put_u64(o, t->host_to_device);
  put_u64(o, t->device_to_host);
  put_u64(o, t->device_to_device);
  put_u64(o, t->written);
  put_u64(o, t->read);
  return o->err;
}

int proto_decode_transfer_stats(const uint8_t *p, size_t len, accel_transfer_stats *t) {
  reader r = {p, len, 0, false};
  t->host_to_device = get_u64(&r);
  t->device_to_host = get_u64(&r);
  t->device_to_device = get_u64(&r);
  t->written = get_u64(&r);
  t->read = get_u64(&r);
  return done(&r);
}

int proto_encode_welcome(proto_out *o, uint64_t request_id, const proto_welcome *w) {
  if (w->device_count > PROTO_MAX_DEVICES)
    return ACCEL_EINVAL;
  size_t at = begin_frame(o, PROTO_WELCOME, request_id);
  put_u16(o, w->version);
  put_u16(o, 0);
  put_u32(o, w->capabilities);
  put_u32(o, w->limits.max_message);
  put_u32(o, w->limits.max_in_flight);
  put_u32(o, w->limits.max_buffers);
  put_u32(o, w->device_count);
  put_u64(o, w->limits.max_memory);
  for (uint32_t i = 0; i < w->device_count; i++)
    put_device(o, &w->devices[i]);
  return finish_frame(o, at);
}

int proto_decode_welcome(const uint8_t *body, size_t len, proto_welcome *w) {
  reader r = {body, len, 0, false};
  memset(w, 0, sizeof *w);
  w->version = get_u16(&r);
  get_u16(&r);
  w->capabilities = get_u32(&r);
  w->limits.max_message = get_u32(&r);
  w->limits.max_in_flight = get_u32(&r);
  w->limits.max_buffers = get_u32(&r);
  w->device_count = get_u32(&r);
  w->limits.max_memory = get_u64(&r);
  if (w->device_count > PROTO_MAX_DEVICES)
    return ACCEL_EPROTO;
  for (uint32_t i = 0; i < w->device_count && !r.bad; i++)
    get_device(&r, &w->devices[i]);
  return done(&r);
}

/* ---- ops: header, buffers, then a payload fixed per kind (+ a write's bytes) ---- */

static size_t options_len(const dev_op *op) {
  const char *opts = op->u.module.options;
  return opts ? strnlen(opts, PROTO_OPTIONS_MAX + 1) : 0;
}

/* source, options_len, code_len, the options; the code follows as the op's data. */
static void put_module(proto_out *o, const dev_op *op) {
  size_t n = options_len(op);
  put_u32(o, op->u.module.source);
  put_u32(o, (uint32_t)n);
  put_u64(o, op->u.module.len);
  put_bytes(o, op->u.module.options, n);
}

/* The name as far as its terminator (all of name[] if it has none: the decoder refuses it). */
static void put_launch(proto_out *o, const dev_launch *l) {
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

static void put_payload(proto_out *o, const dev_op *op, size_t data_len) {
  switch (op->h.kind) {
  case DEV_OP_WRITE:
    put_u64(o, data_len);
    break;
  case DEV_OP_READ:
    put_u64(o, op->u.read.bytes);
    break;
  case DEV_OP_FILL:
    put_u64(o, op->u.fill.value);
    break;
  case DEV_OP_GEMM: {
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
    break;
  }
  case DEV_OP_AXPY:
  case DEV_OP_SCAL:
    put_u64(o, op->u.axpy.n);
    put_f64(o, op->u.axpy.alpha);
    break;
  case DEV_OP_DOT:
    put_u64(o, op->u.dot.n);
    break;
  case DEV_OP_RNG:
    put_u32(o, op->u.rng.dist);
    put_u64(o, op->u.rng.seed);
    put_u64(o, op->u.rng.offset);
    put_f64(o, op->u.rng.mean);
    put_f64(o, op->u.rng.stddev);
    break;
  case DEV_OP_UNARY:
    put_u32(o, op->u.unary.op);
    break;
  case DEV_OP_SOFTMAX:
    put_u64(o, op->u.softmax.rows);
    put_u64(o, op->u.softmax.cols);
    break;
  case DEV_OP_BUFFER_CREATE:
    put_u32(o, op->u.create.dtype);
    break;
  case DEV_OP_MODULE_LOAD:
    put_module(o, op);
    break;
  case DEV_OP_LAUNCH:
    put_launch(o, &op->u.launch);
    break;
  case DEV_OP_COLLECTIVE:
    put_u32(o, op->u.coll.kind);
    put_u32(o, op->u.coll.reduce);
    put_u32(o, op->u.coll.root);
    put_u32(o, op->u.coll.ndev);
    for (uint32_t i = 0; i < BE_COLL_MAX_DEVICES; i++)
      put_i32(o, op->u.coll.devices[i]);
    break;
  default: /* COPY, BUFFER_DESTROY, MODULE_UNLOAD: nothing */
    break;
  }
}

/* A MODULE_LOAD's payload; returns its code's length (the bytes after the options). */
static uint64_t get_module(reader *r, dev_op *op, proto_bytes *options) {
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
static void get_launch(reader *r, dev_op *op) {
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
    return;
  }
  const uint8_t *name = get_bytes(r, n);
  if (name == NULL || memchr(name, '\0', n) != NULL) {
    r->bad = true;
    return;
  }
  memcpy(l->name, name, n); /* the op was zeroed: l->name[n] is its terminator */
  for (uint32_t i = 0; i < l->nargs && !r->bad; i++)
    get_kernel_arg(r, op, &l->args[i]);
  for (uint32_t i = 0; i < op->nbufs; i++)
    if (!launch_access_ok(op->bufs[i].access))
      r->bad = true;
}

static uint64_t get_payload(reader *r, dev_op *op, proto_bytes *options) {
  uint64_t data_len = 0;
  switch (op->h.kind) {
  case DEV_OP_WRITE:
    data_len = get_u64(r);
    break;
  case DEV_OP_READ:
    op->u.read.bytes = get_u64(r);
    break;
  case DEV_OP_FILL:
    op->u.fill.value = get_u64(r);
    break;
  case DEV_OP_GEMM: {
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
    break; /* the types are the buffers': the checker sets them */
  }
  case DEV_OP_AXPY:
  case DEV_OP_SCAL:
    op->u.axpy.n = get_u64(r);
    op->u.axpy.alpha = get_f64(r);
    break;
  case DEV_OP_DOT:
    op->u.dot.n = get_u64(r);
    break;
  case DEV_OP_RNG: {
    uint32_t dist = get_u32(r);
    op->u.rng.dist = dist <= BE_RNG_NORMAL ? (be_rng_dist)dist : (r->bad = true, BE_RNG_BITS);
    op->u.rng.seed = get_u64(r);
    op->u.rng.offset = get_u64(r);
    op->u.rng.mean = get_f64(r);
    op->u.rng.stddev = get_f64(r);
    break;
  }
  case DEV_OP_UNARY: {
    uint32_t u = get_u32(r);
    op->u.unary.op = u <= BE_TANH ? (be_unary_op)u : (r->bad = true, BE_SIGMOID);
    break;
  }
  case DEV_OP_SOFTMAX:
    op->u.softmax.rows = get_u64(r);
    op->u.softmax.cols = get_u64(r);
    break;
  case DEV_OP_BUFFER_CREATE:
    op->u.create.dtype = get_u32(r);
    break;
  case DEV_OP_MODULE_LOAD:
    data_len = get_module(r, op, options);
    break;
  case DEV_OP_MODULE_UNLOAD:
    r->bad |= op->nbufs != 1;
    break;
  case DEV_OP_LAUNCH:
    get_launch(r, op);
    break;
  case DEV_OP_COLLECTIVE: /* enums here; the rest by the checker (dev_op_check_shape) */
    op->u.coll.kind = get_u32(r);
    op->u.coll.reduce = get_u32(r);
    op->u.coll.root = get_u32(r);
    op->u.coll.ndev = get_u32(r);
    r->bad |= op->u.coll.kind > BE_COLL_ALL_GATHER || op->u.coll.reduce > BE_REDUCE_MAX;
    for (uint32_t i = 0; i < BE_COLL_MAX_DEVICES; i++)
      op->u.coll.devices[i] = get_i32(r);
    break;
  default:
    break;
  }
  return data_len;
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
  size_t at = begin_frame(o, PROTO_OP, request_id);
  put_op_head(o, op, 0);
  put_payload(o, op, data.len);
  put_bytes(o, data.data, data.len);
  return finish_frame(o, at);
}

int proto_encode_op_shm(proto_out *o, uint64_t request_id, const dev_op *op, proto_shm_ref ref) {
  bool write = op->h.kind == DEV_OP_WRITE;
  if (op->nbufs > DEV_OP_MAX_BUFS || (!write && op->h.kind != DEV_OP_READ))
    return ACCEL_EINVAL;
  size_t at = begin_frame(o, PROTO_OP, request_id);
  put_op_head(o, op, PROTO_OPF_SHM);
  put_u64(o, write ? op->u.write.bytes : op->u.read.bytes);
  put_u64(o, ref.region);
  put_u64(o, ref.offset);
  return finish_frame(o, at);
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

/* ---- control and replies ---- */

int proto_encode_control(proto_out *o, uint64_t request_id, const proto_control_req *c) {
  size_t at = begin_frame(o, PROTO_CONTROL, request_id);
  put_u32(o, c->command);
  put_u32(o, 0);
  put_u64(o, c->arg);
  return finish_frame(o, at);
}

int proto_decode_control(const uint8_t *body, size_t len, proto_control_req *c) {
  reader r = {body, len, 0, false};
  c->command = get_u32(&r);
  get_u32(&r);
  c->arg = get_u64(&r);
  if (c->command == 0 || c->command >= PROTO_CTL_MAX_)
    return ACCEL_EPROTO;
  return done(&r);
}

int proto_encode_reply(proto_out *o, uint64_t request_id, int32_t status, proto_bytes data) {
  size_t at = begin_frame(o, PROTO_REPLY, request_id);
  put_i32(o, status);
  put_u32(o, 0);
  put_bytes(o, data.data, data.len);
  return finish_frame(o, at);
}

int proto_encode_reply_head(uint8_t out[PROTO_REPLY_HEAD_SIZE], uint64_t request_id, int32_t status,
                            size_t data_len) {
  if (data_len > UINT32_MAX - 8u)
    return ACCEL_ELIMIT;
  uint8_t buf[PROTO_REPLY_HEAD_SIZE];
  proto_out o = {.data = buf, .cap = sizeof buf}; /* fits: reserve() never reallocates */
  size_t at = begin_frame(&o, PROTO_REPLY, request_id);
  put_i32(&o, status);
  put_u32(&o, 0);
  for (int i = 0; i < 4; i++) /* the body length, counting the data that follows */
    o.data[at + 12 + i] = (uint8_t)((data_len + 8u) >> (8 * i));
  memcpy(out, buf, sizeof buf);
  return 0;
}

/* A status is 0 or a code of accel/error.h's table: a hostile daemon's positive or unknown
 * status must not reach a caller that tests `status < 0` or indexes a table with it. On
 * failure the outputs say so too (ACCEL_EPROTO, no data), for callers that look anyway. */
int proto_decode_reply(const uint8_t *body, size_t len, int32_t *status, proto_bytes *data) {
  reader r = {body, len, 0, false};
  int32_t st = get_i32(&r);
  get_u32(&r);
  *status = ACCEL_EPROTO;
  *data = (proto_bytes){NULL, 0};
  if (r.bad || st > 0 || st <= ACCEL_ERRNO_MIN_)
    return ACCEL_EPROTO;
  *status = st;
  data->len = r.len - r.pos;
  data->data = get_bytes(&r, data->len);
  return done(&r);
}
