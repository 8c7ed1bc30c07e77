/* Writes the fuzzers' seed corpora, made with the encoder (and forged by hand where a frame
 * must break a limit the encoder keeps):
 *   DIR         frames a daemon reads (fuzz-decode): one valid frame of every type, every op
 *               kind and every control command; HELLOs at the name limit and one past it, and
 *               of another protocol version; module loads and launches at their limits
 *               (options, arguments, name) and one past them, with a bad argument kind, a
 *               buffer argument past the op's buffers, NULs where a string is made;
 *               streams for fuzz-stream with a frame at its frame limit and one byte over;
 *   CLIENT_DIR  messages a client reads (fuzz-client): WELCOMEs with 0, 16 and 17 devices or a
 *               count that disagrees with the body, REPLYs at the status limits and one past
 *               them, with device and transfer-stats records, a build log, batches of frames,
 *               truncations.
 * Usage: make-corpus DIR CLIENT_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"

static const char *dir, *client_dir;
static int written, failed;

static void save_bytes(const char *to, const char *name, const uint8_t *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", to, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(p, 1, n, f) != n) {
    fprintf(stderr, "make-corpus: cannot write %s\n", path);
    failed++;
  } else {
    written++;
  }
  if (f)
    fclose(f);
}

/* Saves o's bytes and frees them (an encoder's result `rc` must be 0). */
static void save_in(const char *to, const char *name, proto_out *o, int rc) {
  if (rc != 0 || o->err) {
    fprintf(stderr, "make-corpus: %s: encoding failed\n", name);
    failed++;
  } else {
    save_bytes(to, name, o->data, o->len);
  }
  proto_out_free(o);
}

static void save(const char *name, proto_out *o, int rc) {
  save_in(dir, name, o, rc);
}

/* ---- forging: a frame built by the encoder, then changed where the encoder would not ---- */

static void set_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* After a body changed length, its header says so again. */
static void set_body_len(uint8_t *frame, size_t frame_len) {
  set_le(frame + 12, frame_len - PROTO_HEADER_SIZE, 4);
}

static void handshake(void) {
  proto_out o;
  proto_hello h = {.version = PROTO_VERSION, .capabilities = 0, .name = "libaccel"};
  proto_out_init(&o);
  save("hello", &o, proto_encode_hello(&o, 1, &h));
  proto_welcome w = {
      .version = PROTO_VERSION, .limits = {64u << 20, 8192, 65536, 1ull << 34}, .device_count = 2};
  for (int i = 0; i < 2; i++) {
    snprintf(w.devices[i].name, sizeof w.devices[i].name, "device %d", i);
    snprintf(w.devices[i].backend, sizeof w.devices[i].backend, i ? "cuda" : "cpu");
    w.devices[i].mem_bytes = 1ull << (30 + i);
    w.devices[i].compute_units = 8u << i;
  }
  proto_out_init(&o);
  save("welcome", &o, proto_encode_welcome(&o, 1, &w));
}

/* A HELLO whose name is `n` bytes of 'x' (n <= PROTO_NAME_MAX: the encoder's limit). */
static int hello_named(proto_out *o, size_t n, uint16_t version) {
  proto_hello h = {.version = version};
  memset(h.name, 'x', n);
  proto_out_init(o);
  return proto_encode_hello(o, 2, &h);
}

/* The name at its limit and one past it (forged: name_len 65 and 65 bytes); another protocol
 * version in the body, then in the header. */
static void hello_limits(void) {
  proto_out o;
  save("hello-name-64", &o, hello_named(&o, PROTO_NAME_MAX, PROTO_VERSION));
  uint8_t f[PROTO_HEADER_SIZE + 8 + PROTO_NAME_MAX + 1];
  int rc = hello_named(&o, PROTO_NAME_MAX, PROTO_VERSION);
  if (rc == 0 && o.len + 1 == sizeof f) {
    memcpy(f, o.data, o.len);
    f[o.len] = 'x';
    set_le(f + PROTO_HEADER_SIZE + 2, PROTO_NAME_MAX + 1, 2); /* name_len */
    set_body_len(f, sizeof f);
    save_bytes(dir, "hello-name-65", f, sizeof f);
  } else {
    failed++;
  }
  proto_out_free(&o);
  save("hello-next-version", &o, hello_named(&o, 8, PROTO_VERSION + 1));
  rc = hello_named(&o, 8, PROTO_VERSION);
  if (rc == 0)
    set_le(o.data + 4, PROTO_VERSION + 1, 2);
  save("hello-header-next-version", &o, rc);
}

static dev_op base_op(uint32_t kind, uint32_t nbufs) {
  dev_op op = {.h = {.kind = kind, .device = ACCEL_DEVICE_ANY}, .nbufs = nbufs};
  for (uint32_t i = 0; i < nbufs; i++)
    op.bufs[i] = (dev_op_buf){.handle = ((uint64_t)1 << 32) | (i + 1), .count = 16};
  return op;
}

static void op(const char *name, dev_op o_, proto_bytes data) {
  proto_out o;
  proto_out_init(&o);
  save(name, &o, proto_encode_op(&o, 7, &o_, data));
}

static void ops(void) {
  static const uint8_t bytes[64] = {1, 2, 3, 4};
  dev_op w = base_op(DEV_OP_WRITE, 1);
  op("op-write", w, (proto_bytes){bytes, sizeof bytes});
  dev_op rd = base_op(DEV_OP_READ, 1);
  rd.u.read.bytes = 64;
  op("op-read", rd, (proto_bytes){NULL, 0});
  op("op-copy", base_op(DEV_OP_COPY, 2), (proto_bytes){NULL, 0});
  dev_op f = base_op(DEV_OP_FILL, 1);
  f.u.fill.value = 0x3f800000u;
  op("op-fill", f, (proto_bytes){NULL, 0});
  dev_op g = base_op(DEV_OP_GEMM, 3);
  g.u.gemm = (be_gemm_args){.trans_a = BE_BLAS_TRANS,
                            .trans_b = BE_BLAS_NO_TRANS,
                            .m = 4,
                            .n = 4,
                            .k = 4,
                            .alpha = 1.0,
                            .beta = 0.5,
                            .lda = 4,
                            .ldb = 4,
                            .ldc = 4,
                            .math = BE_GEMM_MATH_FP64,
                            .batch = 1};
  op("op-gemm", g, (proto_bytes){NULL, 0});
  g.u.gemm.batch = 8;
  g.u.gemm.stride_a = g.u.gemm.stride_b = g.u.gemm.stride_c = 16;
  g.u.gemm.math = BE_GEMM_MATH_TF32;
  op("op-gemm-batched", g, (proto_bytes){NULL, 0});
  dev_op ax = base_op(DEV_OP_AXPY, 2);
  ax.u.axpy.n = 16;
  ax.u.axpy.alpha = 2.0;
  op("op-axpy", ax, (proto_bytes){NULL, 0});
  dev_op sc = base_op(DEV_OP_SCAL, 1);
  sc.u.axpy.n = 16;
  sc.u.axpy.alpha = -0.5;
  op("op-scal", sc, (proto_bytes){NULL, 0});
  dev_op dot = base_op(DEV_OP_DOT, 3);
  dot.u.dot.n = 16;
  op("op-dot", dot, (proto_bytes){NULL, 0});
  dev_op r = base_op(DEV_OP_RNG, 1);
  r.u.rng = (be_rng_args){.dist = BE_RNG_NORMAL, .seed = 42, .offset = 8, .stddev = 1.0};
  op("op-rng", r, (proto_bytes){NULL, 0});
  dev_op u = base_op(DEV_OP_UNARY, 2);
  u.u.unary.op = BE_TANH;
  op("op-unary", u, (proto_bytes){NULL, 0});
  dev_op co = base_op(DEV_OP_COLLECTIVE, 4); /* an all-gather over two devices */
  co.u.coll.kind = BE_COLL_ALL_GATHER;
  co.u.coll.ndev = 2;
  co.u.coll.devices[0] = co.h.device = 0;
  co.u.coll.devices[1] = 1;
  op("op-collective", co, (proto_bytes){NULL, 0});
  dev_op bi = base_op(DEV_OP_BINARY, 3); /* a row broadcast over a 4 x 4 matrix */
  bi.u.binary =
      (be_binary_args){.op = BE_DIV, .rows = 4, .cols = 4, .a_rs = 4, .a_cs = 1, .b_cs = 1};
  op("op-binary", bi, (proto_bytes){NULL, 0});
  dev_op re = base_op(DEV_OP_REDUCE, 2); /* the columns of a transposed 4 x 4 matrix */
  re.u.reduce = (be_reduction_args){
      .op = BE_RED_MAX, .axis = BE_AXIS_ROWS, .rows = 4, .cols = 4, .rs = 1, .cs = 4};
  op("op-reduce", re, (proto_bytes){NULL, 0});
  bi.u.binary.op = BE_LESS_EQUAL; /* a comparison: the same frame, BOOL out */
  op("op-compare", bi, (proto_bytes){NULL, 0});
  dev_op wh = base_op(DEV_OP_WHERE, 4); /* cond a column, a the matrix, b a scalar */
  wh.u.where = (be_where_args){.rows = 4, .cols = 4, .c_rs = 1, .a_rs = 4, .a_cs = 1};
  op("op-where", wh, (proto_bytes){NULL, 0});
  dev_op cv = base_op(DEV_OP_CONVERT, 2); /* the transpose of a 4 x 4 matrix */
  cv.u.convert = (be_convert_args){.rows = 4, .cols = 4, .rs = 1, .cs = 4};
  op("op-convert", cv, (proto_bytes){NULL, 0});
  dev_op sm = base_op(DEV_OP_SOFTMAX, 2);
  sm.u.softmax.rows = 4;
  sm.u.softmax.cols = 4;
  op("op-softmax", sm, (proto_bytes){NULL, 0});
  dev_op c = base_op(DEV_OP_BUFFER_CREATE, 1);
  c.u.create.dtype = ACCEL_F32;
  op("op-create", c, (proto_bytes){NULL, 0});
  c.u.create.dtype = ACCEL_BF16;
  op("op-create-bf16", c, (proto_bytes){NULL, 0});
  c.u.create.dtype = ACCEL_F64;
  op("op-create-f64", c, (proto_bytes){NULL, 0});
  op("op-destroy", base_op(DEV_OP_BUFFER_DESTROY, 1), (proto_bytes){NULL, 0});
}

/* ---- user kernels ---- */

#define MODULE_OPTIONS_AT (PROTO_OP_HEAD_SIZE + PROTO_BUF_SIZE + 16) /* in a MODULE_LOAD body */

static const char kernel_code[] = "__kernel void k(__global float *x) { x[0] = 1.0f; }";

static dev_op module_load(uint32_t source, const char *options) {
  dev_op m = base_op(DEV_OP_MODULE_LOAD, 1);
  m.bufs[0].count = 0;
  m.u.module.source = source;
  m.u.module.code = kernel_code;
  m.u.module.len = sizeof kernel_code - 1;
  m.u.module.options = options;
  return m;
}

/* A module load with n bytes of options (n may pass the limit: forged), the byte at `nul`
 * (< n) made a NUL if nul < n. */
static void module_options(const char *name, size_t n, size_t nul) {
  static uint8_t
      f[PROTO_HEADER_SIZE + MODULE_OPTIONS_AT + PROTO_OPTIONS_MAX + 1 + sizeof kernel_code];
  dev_op m = module_load(ACCEL_SOURCE_OPENCL, NULL);
  size_t code = sizeof kernel_code - 1, at = PROTO_HEADER_SIZE + MODULE_OPTIONS_AT;
  proto_out o;
  proto_out_init(&o);
  if (proto_encode_op(&o, 7, &m, (proto_bytes){NULL, 0}) == 0 && at + n + code <= sizeof f) {
    memcpy(f, o.data, at);
    memset(f + at, 'D', n);
    if (nul < n)
      f[at + nul] = '\0';
    memcpy(f + at + n, kernel_code, code);
    set_le(f + at - 12, n, 4); /* options_len */
    set_body_len(f, at + n + code);
    save_bytes(dir, name, f, at + n + code);
  } else {
    failed++;
  }
  proto_out_free(&o);
}

static dev_op launch(uint32_t nbufs, uint32_t nargs) {
  dev_op l = base_op(DEV_OP_LAUNCH, nbufs);
  for (uint32_t i = 0; i < nbufs; i++)
    l.bufs[i].access = i % 2 ? DEV_WRITE : DEV_READ;
  l.u.launch.module = ((uint64_t)1 << 32) | 40;
  for (int i = 0; i < 3; i++)
    l.u.launch.grid[i] = l.u.launch.block[i] = 1;
  l.u.launch.grid[0] = 64;
  l.u.launch.block[0] = 128;
  l.u.launch.nargs = nargs;
  for (uint32_t i = 0; i < nargs; i++)
    l.u.launch.args[i] = i < nbufs ? (dev_kernel_arg){BE_PARAM_BUFFER, 0, i}
                                   : (dev_kernel_arg){BE_PARAM_SCALAR, 4, 0x40490fdbu};
  strcpy(l.u.launch.name, "k");
  return l;
}

/* A launch of 32 arguments with one more sent and counted (forged). */
static void launch_33(void) {
  static uint8_t f[4096];
  dev_op l = launch(4, BE_LAUNCH_MAX_ARGS);
  proto_out o;
  proto_out_init(&o);
  if (proto_encode_op(&o, 7, &l, (proto_bytes){NULL, 0}) == 0 && o.len + 16 <= sizeof f) {
    size_t nargs_at = PROTO_HEADER_SIZE + PROTO_OP_HEAD_SIZE + 4 * PROTO_BUF_SIZE + 36;
    memcpy(f, o.data, o.len);
    memcpy(f + o.len, f + o.len - 16, 16); /* the last argument again */
    set_le(f + nargs_at, BE_LAUNCH_MAX_ARGS + 1, 4);
    set_body_len(f, o.len + 16);
    save_bytes(dir, "op-launch-args-33", f, o.len + 16);
  } else {
    failed++;
  }
  proto_out_free(&o);
}

static void user_kernels(void) {
  op("op-module-load", module_load(ACCEL_SOURCE_OPENCL, "-DN=4 -cl-mad-enable"),
     (proto_bytes){NULL, 0});
  op("op-module-load-ptx", module_load(ACCEL_SOURCE_PTX, NULL), (proto_bytes){NULL, 0});
  module_options("op-module-load-options-4096", PROTO_OPTIONS_MAX, SIZE_MAX);
  module_options("op-module-load-options-4097", PROTO_OPTIONS_MAX + 1, SIZE_MAX);
  module_options("op-module-load-options-nul", 8, 3);
  dev_op m = module_load(ACCEL_SOURCE_SPIRV + 1, NULL);
  op("op-module-load-bad-source", m, (proto_bytes){NULL, 0});
  op("op-module-unload", base_op(DEV_OP_MODULE_UNLOAD, 1), (proto_bytes){NULL, 0});
  dev_op l = launch(2, 4);
  l.u.launch.args[3] = (dev_kernel_arg){BE_PARAM_LOCAL, 256, 0};
  op("op-launch", l, (proto_bytes){NULL, 0});
  op("op-launch-args-32", launch(DEV_OP_MAX_BUFS, BE_LAUNCH_MAX_ARGS), (proto_bytes){NULL, 0});
  launch_33();
  dev_op named = launch(1, 1);
  memset(named.u.launch.name, 'n', BE_KERNEL_NAME_MAX);
  op("op-launch-name-127", named, (proto_bytes){NULL, 0});
  memset(named.u.launch.name, 'n', sizeof named.u.launch.name); /* 128, no terminator */
  op("op-launch-name-128", named, (proto_bytes){NULL, 0});
  dev_op bad = launch(2, 3);
  bad.u.launch.args[2].kind = BE_PARAM_LOCAL + 1;
  op("op-launch-bad-arg-kind", bad, (proto_bytes){NULL, 0});
  bad = launch(2, 3);
  bad.u.launch.args[1].bits = 2; /* bufs[2] of 2 */
  op("op-launch-buffer-past-nbufs", bad, (proto_bytes){NULL, 0});
}

static void controls_and_replies(void) {
  static const char *const names[] = {"",     "ping",         "status",      "devices",
                                      "tree", "inject-fault", "device-info", "transfer-stats",
                                      "ack"};
  for (uint32_t cmd = 1; cmd < PROTO_CTL_MAX_; cmd++) {
    char name[64];
    proto_out o;
    proto_control_req c = {cmd, cmd == PROTO_CTL_STATUS ? 1 : 0};
    snprintf(name, sizeof name, "control-%s", cmd < 9 ? names[cmd] : "other");
    proto_out_init(&o);
    save(name, &o, proto_encode_control(&o, 9, &c));
  }
  proto_out o;
  proto_out_init(&o);
  save("reply-status", &o, proto_encode_reply(&o, 9, ACCEL_ESTALE, (proto_bytes){NULL, 0}));
  static const uint8_t json[] = "{\"devices\":[],\"sessions\":0}";
  proto_out_init(&o);
  save("reply-data", &o, proto_encode_reply(&o, 9, 0, (proto_bytes){json, sizeof json - 1}));
  struct accel_device_info d = {.name = "cpu", .backend = "cpu", .mem_bytes = 1 << 30};
  proto_out_init(&o);
  save("record-device", &o, proto_encode_device(&o, &d));
  accel_transfer_stats t = {1, 2, 3, 4, 5};
  proto_out_init(&o);
  save("record-transfer-stats", &o, proto_encode_transfer_stats(&o, &t));
}

/* ---- the local transport's stream ---- */

/* fuzz-stream reads its first byte as the frame limit, in units of 16 bytes past a header
 * (its second chooses where reads cut the rest): this one makes it PROTO_HEADER_SIZE + 192. */
#define STREAM_UNITS 12u
#define STREAM_LIMIT (PROTO_HEADER_SIZE + 16u * STREAM_UNITS)

/* Those two bytes, then a WRITE whose frame is `len` bytes (its data makes up the length),
 * then a PING. At the limit both frames are taken; one byte over it, the stream stops at the
 * first, as the daemon's reader stops at a frame over max_message (PROTO_SCAN_TOO_BIG). */
static void stream_frame_of(const char *name, size_t len) {
  static const uint8_t bytes[STREAM_LIMIT + 1];
  static uint8_t stream[2 + 2 * STREAM_LIMIT];
  dev_op w = base_op(DEV_OP_WRITE, 1);
  proto_control_req ping = {PROTO_CTL_PING, 0};
  proto_out o;
  proto_out_init(&o);
  int rc = proto_encode_op(&o, 7, &w, (proto_bytes){bytes, 1});
  size_t data = rc == 0 && o.len <= len ? len - o.len + 1 : 0; /* o.len: 1 byte of data */
  proto_out_free(&o);
  proto_out_init(&o);
  if (data > 0 && data <= sizeof bytes &&
      proto_encode_op(&o, 7, &w, (proto_bytes){bytes, data}) == 0 && o.len == len &&
      proto_encode_control(&o, 8, &ping) == 0 && 2 + o.len <= sizeof stream) {
    stream[0] = STREAM_UNITS;
    stream[1] = 5; /* reads of 59, 76, 93, 13, ... bytes: the WRITE outgrows the staging */
    memcpy(stream + 2, o.data, o.len);
    save_bytes(dir, name, stream, 2 + o.len);
  } else {
    failed++;
  }
  proto_out_free(&o);
}

static void stream_limits(void) {
  stream_frame_of("stream-frame-at-limit", STREAM_LIMIT);
  stream_frame_of("stream-frame-one-over", STREAM_LIMIT + 1);
}

/* ---- the client's side: messages from a (possibly hostile) daemon ---- */

#define WELCOME_COUNT_AT (PROTO_HEADER_SIZE + 20)   /* device_count, in a WELCOME frame */
#define WELCOME_DEVICES_AT (PROTO_HEADER_SIZE + 32) /* the first device record */
#define DEVICE_STATE_AT (96 + 16 + 12)              /* state, in a device record */

static void save_client(const char *name, proto_out *o, int rc) {
  save_in(client_dir, name, o, rc);
}

static proto_welcome welcome_of(uint32_t count) {
  proto_welcome w = {.version = PROTO_VERSION,
                     .limits = {64u << 20, 8192, 65536, 1ull << 34},
                     .capabilities = PROTO_CAP_BATCH | PROTO_CAP_ACK,
                     .device_count = count};
  for (uint32_t i = 0; i < count && i < PROTO_MAX_DEVICES; i++) {
    snprintf(w.devices[i].name, sizeof w.devices[i].name, "device %u", i);
    snprintf(w.devices[i].backend, sizeof w.devices[i].backend, i % 2 ? "cuda" : "cpu");
    w.devices[i].mem_bytes = 1ull << (30 + i % 4);
    w.devices[i].compute_units = 8u << (i % 4);
    w.devices[i].state = (int)(i % 3);
    w.devices[i].restarts = i;
  }
  return w;
}

/* A WELCOME whose count says `count` while `sent` device records follow: forged where they
 * disagree or pass PROTO_MAX_DEVICES. */
static void welcome_forged(const char *name, uint32_t count, uint32_t sent) {
  static uint8_t f[WELCOME_DEVICES_AT + (PROTO_MAX_DEVICES + 1) * PROTO_DEVICE_SIZE];
  proto_welcome w = welcome_of(1);
  proto_out o;
  proto_out_init(&o);
  size_t len = WELCOME_DEVICES_AT + (size_t)sent * PROTO_DEVICE_SIZE;
  if (proto_encode_welcome(&o, 1, &w) == 0 && len <= sizeof f) {
    memcpy(f, o.data, WELCOME_DEVICES_AT);
    for (uint32_t i = 0; i < sent; i++)
      memcpy(f + WELCOME_DEVICES_AT + i * PROTO_DEVICE_SIZE, o.data + WELCOME_DEVICES_AT,
             PROTO_DEVICE_SIZE);
    set_le(f + WELCOME_COUNT_AT, count, 4);
    set_body_len(f, len);
    save_bytes(client_dir, name, f, len);
  } else {
    failed++;
  }
  proto_out_free(&o);
}

static void welcomes(void) {
  proto_out o;
  proto_welcome w = welcome_of(0);
  proto_out_init(&o);
  save_client("welcome-0", &o, proto_encode_welcome(&o, 1, &w));
  w = welcome_of(PROTO_MAX_DEVICES);
  proto_out_init(&o);
  save_client("welcome-16", &o, proto_encode_welcome(&o, 1, &w));
  welcome_forged("welcome-17", PROTO_MAX_DEVICES + 1, PROTO_MAX_DEVICES + 1);
  welcome_forged("welcome-count-over", 3, 2);
  welcome_forged("welcome-count-under", 1, 2);
  welcome_forged("welcome-count-huge", UINT32_MAX, 1);
  w = welcome_of(1);
  proto_out_init(&o);
  int rc = proto_encode_welcome(&o, 1, &w);
  if (rc == 0)
    set_le(o.data + WELCOME_DEVICES_AT + DEVICE_STATE_AT, 3, 4); /* one past quarantined */
  save_client("welcome-bad-state", &o, rc);
}

static void reply(const char *name, int32_t status, const void *data, size_t len) {
  proto_out o;
  proto_out_init(&o);
  save_client(name, &o, proto_encode_reply(&o, 9, status, (proto_bytes){data, len}));
}

/* The most negative code of accel/error.h's table, from the table itself. */
static int lowest_error(void) {
  int low = 0;
#define LOWEST_(name, value, msg) low = (value) < low ? (value) : low;
  ACCEL_ERRNO_MAP(LOWEST_)
#undef LOWEST_
  return low;
}

/* Statuses at the limits and one past them; data of a read, a DEVICE_INFO, TRANSFER_STATS. */
static void replies(void) {
  reply("reply-ok", 0, NULL, 0);
  reply("reply-status-lowest", lowest_error(), NULL, 0);
  reply("reply-status-below-lowest", lowest_error() - 1, NULL, 0);
  reply("reply-status-positive", 1, NULL, 0);
  reply("reply-status-int-min", INT32_MIN, NULL, 0);
  uint8_t bytes[64];
  for (size_t i = 0; i < sizeof bytes; i++)
    bytes[i] = (uint8_t)i;
  reply("reply-read", 0, bytes, sizeof bytes);
  static const char log[] = "<kernel>:1:40: error: use of undeclared identifier 'y'\n";
  reply("reply-build-log", ACCEL_EBUILD, log, sizeof log - 1);
  struct accel_device_info d = {.name = "cpu0",
                                .backend = "cpu",
                                .mem_bytes = 1u << 30,
                                .compute_units = 8,
                                .state = 1,
                                .restarts = 2,
                                .packages = ACCEL_PKG_MODULE,
                                .sources = 1u << ACCEL_SOURCE_OPENCL};
  uint8_t rec[PROTO_DEVICE_SIZE] = {0};
  proto_out o;
  proto_out_init(&o);
  if (proto_encode_device(&o, &d) == 0 && o.len == sizeof rec)
    memcpy(rec, o.data, sizeof rec);
  else
    failed++;
  proto_out_free(&o);
  reply("reply-device-info", 0, rec, sizeof rec);
  memset(rec, 'N', 96 + 16); /* a name and a backend with no terminator */
  reply("reply-device-unterminated", 0, rec, sizeof rec);
  reply("reply-device-short", 0, rec, sizeof rec - 1);
  set_le(rec + DEVICE_STATE_AT, 3, 4);
  reply("reply-device-bad-state", 0, rec, sizeof rec);
  accel_transfer_stats t = {1, 2, 3, 4, UINT64_MAX};
  proto_out_init(&o);
  if (proto_encode_transfer_stats(&o, &t) == 0)
    reply("reply-transfer-stats", 0, o.data, o.len);
  proto_out_free(&o);
}

/* Several frames in one message, as the daemon sends them with PROTO_CAP_BATCH; then the same
 * with its last frame cut, and with a few bytes after the last whole frame. */
static void batches(void) {
  static const uint8_t tail[10] = {'A', 'C', 'C', '1', 1, 0, 4, 0};
  proto_welcome w = welcome_of(2);
  accel_transfer_stats t = {5, 4, 3, 2, 1};
  uint8_t stats[40];
  proto_out o;
  proto_out_init(&o);
  int rc = proto_encode_transfer_stats(&o, &t);
  if (rc == 0)
    memcpy(stats, o.data, sizeof stats);
  proto_out_free(&o);
  if (rc == 0)
    rc = proto_encode_welcome(&o, 1, &w);
  if (rc == 0)
    rc = proto_encode_reply(&o, 2, 0, (proto_bytes){stats, sizeof stats});
  if (rc == 0)
    rc = proto_encode_reply(&o, 3, ACCEL_EBUSY, (proto_bytes){NULL, 0});
  if (rc == 0) /* a positive status amid good ones */
    rc = proto_encode_reply(&o, 4, 1, (proto_bytes){NULL, 0});
  if (rc == 0)
    rc = proto_encode_reply(&o, 5, 0, (proto_bytes){stats, 8});
  uint8_t *with_tail = rc == 0 ? malloc(o.len + sizeof tail) : NULL;
  if (with_tail != NULL) {
    save_bytes(client_dir, "batch-welcome-and-replies", o.data, o.len);
    save_bytes(client_dir, "batch-truncated", o.data, o.len - 3);
    memcpy(with_tail, o.data, o.len);
    memcpy(with_tail + o.len, tail, sizeof tail);
    save_bytes(client_dir, "batch-short-tail", with_tail, o.len + sizeof tail);
  } else {
    failed++;
  }
  free(with_tail);
  proto_out_free(&o);
}

/* A WELCOME that lowers max_message to 64, then replies of 64 bytes (taken) and 65 (too big). */
static void small_max_message(void) {
  proto_welcome w = welcome_of(0);
  w.limits.max_message = 64;
  static const uint8_t data[33];
  proto_out o;
  proto_out_init(&o);
  int rc = proto_encode_welcome(&o, 1, &w);
  if (rc == 0)
    rc = proto_encode_reply(&o, 2, 0, (proto_bytes){data, 64 - PROTO_REPLY_HEAD_SIZE});
  if (rc == 0)
    rc = proto_encode_reply(&o, 3, 0, (proto_bytes){data, 65 - PROTO_REPLY_HEAD_SIZE});
  if (rc == 0)
    save_bytes(client_dir, "batch-small-max-message", o.data, o.len);
  else
    failed++;
  proto_out_free(&o);
}

/* One frame cut short, and a REPLY whose body is too short for its status. */
static void truncations(void) {
  static const uint8_t data[16] = {1};
  proto_out o;
  proto_out_init(&o);
  if (proto_encode_reply(&o, 9, 0, (proto_bytes){data, sizeof data}) == 0) {
    save_bytes(client_dir, "frame-truncated", o.data, o.len - 1);
    set_body_len(o.data, PROTO_HEADER_SIZE + 7);
    save_bytes(client_dir, "reply-body-7", o.data, PROTO_HEADER_SIZE + 7);
  }
  proto_out_free(&o);
}

static void client_side(void) {
  welcomes();
  replies();
  batches();
  small_max_message();
  truncations();
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: make-corpus DIR CLIENT_DIR\n");
    return 2;
  }
  dir = argv[1];
  client_dir = argv[2];
  handshake();
  hello_limits();
  ops();
  user_kernels();
  controls_and_replies();
  stream_limits();
  client_side();
  printf("make-corpus: %d files in %s and %s\n", written, dir, client_dir);
  return written > 0 && failed == 0 ? 0 : 1;
}
