/* libFuzzer target for the wire decoder (proto/codec.c): any bytes, as a whole frame, through
 * the header decoder and then, whatever the header says, through every body decoder; what
 * decodes is encoded again and must decode to the same thing. Linked with replay.c it is a
 * plain program that runs the seed corpus through the target: a regression test with any
 * compiler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/world.h"
#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads every byte the decoder handed out, so that ASan sees a bad pointer or length. */
static unsigned touch(proto_bytes b) {
  unsigned sum = 0;
  for (size_t i = 0; i < b.len; i++)
    sum += b.data[i];
  return sum;
}

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_decode: %s\n", what);
    abort();
  }
}

/* A MODULE_LOAD's options as the daemon makes them: a C string of the bytes the decoder
 * checked (no NUL among them, at most PROTO_OPTIONS_MAX). */
static void take_options(dev_op *op, proto_bytes options, char *buf) {
  if (op->h.kind != DEV_OP_MODULE_LOAD || options.len == 0)
    return;
  check(options.len <= PROTO_OPTIONS_MAX, "options length");
  check(memchr(options.data, '\0', options.len) == NULL, "NUL in options");
  memcpy(buf, options.data, options.len);
  buf[options.len] = '\0';
  op->u.module.options = buf;
}

/* What a decoded op may be used for without looking further: bounded counts, a name that is
 * a C string, buffer arguments that name a buffer of the op. */
static void op_ok(const dev_op *op) {
  check(op->nbufs <= DEV_OP_MAX_BUFS, "op buffers");
  if (op->h.kind == DEV_OP_MODULE_LOAD)
    check(op->u.module.code != NULL && op->u.module.len > 0, "module code");
  if (op->h.kind != DEV_OP_LAUNCH)
    return;
  const dev_launch *l = &op->u.launch;
  check(l->nargs <= BE_LAUNCH_MAX_ARGS, "launch arguments");
  size_t n = strnlen(l->name, sizeof l->name);
  check(n > 0 && n <= BE_KERNEL_NAME_MAX, "kernel name");
  for (uint32_t i = 0; i < l->nargs; i++)
    check(l->args[i].kind != BE_PARAM_BUFFER || l->args[i].bits < op->nbufs, "buffer arg");
}

static void op_again(const dev_op *op, proto_bytes data, proto_bytes options) {
  proto_out o;
  proto_out_init(&o);
  if (proto_encode_op(&o, 1, op, op->h.kind == DEV_OP_WRITE ? data : (proto_bytes){NULL, 0}) == 0) {
    proto_header h;
    dev_op again;
    proto_op_data d2;
    check(proto_decode_header(o.data, o.len, UINT32_MAX, &h) == 0, "op header");
    check(proto_decode_op_ex(o.data + PROTO_HEADER_SIZE, h.body_len, false, &again, &d2) == 0,
          "re-encoded op does not decode");
    check(again.h.kind == op->h.kind && again.nbufs == op->nbufs && d2.bytes.len == data.len &&
              d2.options.len == options.len,
          "re-encoded op differs");
    check(options.len == 0 || memcmp(d2.options.data, options.data, options.len) == 0,
          "re-encoded options differ");
  }
  proto_out_free(&o);
}

/* Strings a caller prints, a state a caller names. */
static void device_ok(const struct accel_device_info *d) {
  check(memchr(d->name, '\0', sizeof d->name) != NULL, "device name not terminated");
  check(memchr(d->backend, '\0', sizeof d->backend) != NULL, "backend not terminated");
  check(d->state >= DEV_NODE_SERVING && d->state <= DEV_NODE_QUARANTINED, "device state");
}

static void welcome_ok(const proto_welcome *w) {
  check(w->device_count <= PROTO_MAX_DEVICES, "welcome devices");
  for (uint32_t i = 0; i < w->device_count; i++)
    device_ok(&w->devices[i]);
}

static void body_decoders(const uint8_t *b, size_t n) {
  proto_hello hello;
  proto_welcome welcome;
  dev_op op;
  proto_bytes data;
  proto_control_req ctl;
  int32_t status;
  struct accel_device_info dev;
  accel_transfer_stats ts;
  volatile unsigned sink = 0;
  if (proto_decode_hello(b, n, &hello) == 0)
    check(strlen(hello.name) <= PROTO_NAME_MAX, "hello name");
  if (proto_decode_welcome(b, n, &welcome) == 0)
    welcome_ok(&welcome);
  proto_op_data od;
  static char options[PROTO_OPTIONS_MAX + 1];
  if (proto_decode_op_ex(b, n, true, &op, &od) == 0) {
    op_ok(&op);
    sink += touch(od.bytes) + touch(od.options);
    take_options(&op, od.options, options);
    if (!(op.h.flags & PROTO_OPF_SHM))
      op_again(&op, od.bytes, od.options);
  }
  if (proto_decode_op(b, n, &op, &data) == 0)
    sink += touch(data);
  if (proto_decode_control(b, n, &ctl) == 0)
    check(ctl.command > 0 && ctl.command < PROTO_CTL_MAX_, "control command");
  if (proto_decode_reply(b, n, &status, &data) == 0) {
    check(status <= 0 && status > ACCEL_ERRNO_MIN_, "reply status");
    sink += touch(data);
  }
  if (proto_decode_device(b, n, &dev) == 0)
    device_ok(&dev);
  if (proto_decode_transfer_stats(b, n, &ts) == 0)
    sink += ts.written;
  (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto_header h;
  if (proto_decode_header(data, size, 1u << 20, &h) == 0) {
    check(h.body_len == size - PROTO_HEADER_SIZE, "body length");
    body_decoders(data + PROTO_HEADER_SIZE, h.body_len);
  }
  body_decoders(data, size); /* the same bytes as a body of every type */
  return 0;
}
