/* Writes the fuzzer's seed corpus: one valid frame of every type, every op kind and every
 * control command, made with the encoder. Usage: make-corpus DIR */
#include <stdio.h>
#include <string.h>

#include "proto/wire.h"

static const char *dir;
static int written;

static void save(const char *name, proto_out *o, int rc) {
  char path[4096];
  if (rc != 0 || o->err) {
    fprintf(stderr, "make-corpus: %s: encoding failed\n", name);
    return;
  }
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(o->data, 1, o->len, f) != o->len) {
    fprintf(stderr, "make-corpus: cannot write %s\n", path);
  } else {
    written++;
  }
  if (f)
    fclose(f);
  proto_out_free(o);
}

static void handshake(void) {
  proto_out o;
  proto_hello h = {.version = PROTO_VERSION, .capabilities = 0, .name = "libaccel"};
  proto_out_init(&o);
  save("hello", &o, proto_encode_hello(&o, 1, &h));
  proto_welcome w = {.version = PROTO_VERSION,
                     .limits = {64u << 20, 8192, 65536, 1ull << 34},
                     .device_count = 2};
  for (int i = 0; i < 2; i++) {
    snprintf(w.devices[i].name, sizeof w.devices[i].name, "device %d", i);
    snprintf(w.devices[i].backend, sizeof w.devices[i].backend, i ? "cuda" : "cpu");
    w.devices[i].mem_bytes = 1ull << (30 + i);
    w.devices[i].compute_units = 8u << i;
  }
  proto_out_init(&o);
  save("welcome", &o, proto_encode_welcome(&o, 1, &w));
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
  op("op-read", base_op(DEV_OP_READ, 1), (proto_bytes){NULL, 0});
  op("op-copy", base_op(DEV_OP_COPY, 2), (proto_bytes){NULL, 0});
  dev_op f = base_op(DEV_OP_FILL, 1);
  f.u.fill.value = 0x3f800000u;
  op("op-fill", f, (proto_bytes){NULL, 0});
  dev_op g = base_op(DEV_OP_SGEMM, 3);
  g.u.sgemm = (be_sgemm_args){.trans_a = BE_BLAS_TRANS, .trans_b = BE_BLAS_NO_TRANS, .m = 4,
                               .n = 4, .k = 4, .alpha = 1.0f, .beta = 0.5f, .lda = 4,
                               .ldb = 4, .ldc = 4};
  op("op-sgemm", g, (proto_bytes){NULL, 0});
  dev_op ax = base_op(DEV_OP_SAXPY, 2);
  ax.u.saxpy.n = 16;
  ax.u.saxpy.alpha = 2.0f;
  op("op-saxpy", ax, (proto_bytes){NULL, 0});
  dev_op dot = base_op(DEV_OP_SDOT, 3);
  dot.u.sdot.n = 16;
  op("op-sdot", dot, (proto_bytes){NULL, 0});
  dev_op r = base_op(DEV_OP_RNG, 1);
  r.u.rng = (be_rng_args){.dist = BE_RNG_NORMAL, .seed = 42, .offset = 8, .stddev = 1.0f};
  op("op-rng", r, (proto_bytes){NULL, 0});
  dev_op u = base_op(DEV_OP_UNARY, 2);
  u.u.unary.op = BE_TANH;
  op("op-unary", u, (proto_bytes){NULL, 0});
  dev_op sm = base_op(DEV_OP_SOFTMAX, 2);
  sm.u.softmax.rows = 4;
  sm.u.softmax.cols = 4;
  op("op-softmax", sm, (proto_bytes){NULL, 0});
  dev_op c = base_op(DEV_OP_BUFFER_CREATE, 1);
  c.u.create.dtype = ACCEL_F32;
  op("op-create", c, (proto_bytes){NULL, 0});
  op("op-destroy", base_op(DEV_OP_BUFFER_DESTROY, 1), (proto_bytes){NULL, 0});
}

static void controls_and_replies(void) {
  static const char *const names[] = {"", "ping", "status", "devices", "tree", "inject-fault",
                                      "device-info", "transfer-stats", "ack"};
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

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make-corpus DIR\n");
    return 2;
  }
  dir = argv[1];
  handshake();
  ops();
  controls_and_replies();
  printf("make-corpus: %d files in %s\n", written, dir);
  return written > 0 ? 0 : 1;
}
