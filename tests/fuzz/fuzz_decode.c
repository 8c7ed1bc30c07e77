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

static void op_again(const dev_op *op, proto_bytes data) {
  proto_out o;
  proto_out_init(&o);
  if (proto_encode_op(&o, 1, op, data) == 0) {
    proto_header h;
    dev_op again;
    proto_bytes d2;
    check(proto_decode_header(o.data, o.len, UINT32_MAX, &h) == 0, "op header");
    check(proto_decode_op(o.data + PROTO_HEADER_SIZE, h.body_len, &again, &d2) == 0,
          "re-encoded op does not decode");
    check(again.h.kind == op->h.kind && again.nbufs == op->nbufs && d2.len == data.len,
          "re-encoded op differs");
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
  if (proto_decode_op(b, n, &op, &data) == 0) {
    check(op.nbufs <= DEV_OP_MAX_BUFS, "op buffers");
    sink += touch(data);
    op_again(&op, data);
  }
  if (proto_decode_control(b, n, &ctl) == 0)
    check(ctl.command > 0 && ctl.command < PROTO_CTL_MAX_, "control command");
  if (proto_decode_reply(b, n, &status, &data) == 0) {
    check(status <= 0 && status > ACCEL_ERRNO_MIN_, "reply status");
    sink += touch(data);
  }
  if (proto_decode_device(b, n, &dev) == 0)
    device_ok(&dev);
  (void)proto_decode_transfer_stats(b, n, &ts);
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
