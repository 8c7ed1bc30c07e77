/* libFuzzer target for the client's side of the wire: any bytes as one message from a
 * (hostile) daemon, handled as libaccel's remote client (clients/remote.c) and accelctl handle
 * one. The message is split with proto_next_frame(); each frame goes through
 * proto_decode_header() with the max_message of the last WELCOME (as the client does), then
 * a REPLY through proto_decode_reply() and its data through the decoders of the records a
 * control returns (a device, transfer stats), a WELCOME through proto_decode_welcome(). What
 * decodes must be within the protocol's limits, and encode back to the same; what does not
 * must leave nothing a careless caller could trip on. Each frame is decoded from an
 * exact-size copy, so that reading past a frame (though inside the message) is caught too.
 * Linked with replay.c it is a plain program that runs the seed corpus through the target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/world.h"
#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WELCOME_HEAD 32u /* a WELCOME body before its devices */

/* What a client remembers between frames. */
typedef struct client {
  uint32_t max_message; /* from the WELCOME; until then any size, as clients/remote.c */
} client;

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_client: %s\n", what);
    abort();
  }
}

/* Reads every byte handed out, so that ASan sees a bad pointer or length. */
static unsigned touch(proto_bytes b) {
  unsigned sum = 0;
  for (size_t i = 0; i < b.len; i++)
    sum += b.data[i];
  return sum;
}

/* What a client may do with a device: print its strings, name its state. */
static void device_ok(const struct accel_device_info *d) {
  check(memchr(d->name, '\0', sizeof d->name) != NULL, "device name not terminated");
  check(memchr(d->backend, '\0', sizeof d->backend) != NULL, "backend not terminated");
  check(d->state >= DEV_NODE_SERVING && d->state <= DEV_NODE_QUARANTINED, "device state");
}

static int device_same(const struct accel_device_info *a, const struct accel_device_info *b) {
  return memcmp(a->name, b->name, sizeof a->name) == 0 &&
         memcmp(a->backend, b->backend, sizeof a->backend) == 0 && a->mem_bytes == b->mem_bytes &&
         a->compute_units == b->compute_units && a->state == b->state && a->restarts == b->restarts;
}

/* A DEVICE_INFO reply's data: one record, exactly. */
static void device_record(proto_bytes data) {
  struct accel_device_info d, again;
  if (proto_decode_device(data.data, data.len, &d) != 0)
    return;
  check(data.len == PROTO_DEVICE_SIZE, "device record length");
  device_ok(&d);
  proto_out o;
  proto_out_init(&o);
  check(proto_encode_device(&o, &d) == 0 && o.len == PROTO_DEVICE_SIZE, "device encode");
  check(proto_decode_device(o.data, o.len, &again) == 0 && device_same(&d, &again),
        "device round trip");
  proto_out_free(&o);
}

/* A TRANSFER_STATS reply's data: five u64, every bit meaningful, so it encodes back as is. */
static void transfer_stats(proto_bytes data) {
  accel_transfer_stats t;
  if (proto_decode_transfer_stats(data.data, data.len, &t) != 0)
    return;
  proto_out o;
  proto_out_init(&o);
  check(proto_encode_transfer_stats(&o, &t) == 0, "transfer stats encode");
  check(o.len == data.len && memcmp(o.data, data.data, o.len) == 0, "transfer stats differ");
  proto_out_free(&o);
}

static void reply_round_trip(int32_t status, proto_bytes data) {
  proto_out o;
  proto_out_init(&o);
  proto_header h;
  int32_t st;
  proto_bytes d2;
  check(proto_encode_reply(&o, 1, status, data) == 0, "reply encode");
  check(proto_decode_header(o.data, o.len, UINT32_MAX, &h) == 0, "reply header");
  check(proto_decode_reply(o.data + PROTO_HEADER_SIZE, h.body_len, &st, &d2) == 0,
        "re-encoded reply does not decode");
  check(st == status && d2.len == data.len &&
            (data.len == 0 || memcmp(d2.data, data.data, data.len) == 0),
        "re-encoded reply differs");
  proto_out_free(&o);
}

static void on_reply(const uint8_t *b, size_t n) {
  int32_t status;
  proto_bytes data;
  if (proto_decode_reply(b, n, &status, &data) != 0) {
    /* remote.c completes the request with ACCEL_EPROTO: nothing else may leak out. */
    check(status == ACCEL_EPROTO && data.data == NULL && data.len == 0, "refused reply");
    return;
  }
  check(status <= 0 && status > ACCEL_ERRNO_MIN_, "reply status out of range");
  check(strcmp(accel_err_name(status), "UNKNOWN") != 0, "reply status has no name");
  check(data.len == n - 8 && (data.len == 0 || data.data == b + 8), "reply data");
  volatile unsigned sink = touch(data);
  (void)sink;
  reply_round_trip(status, data);
  device_record(data);
  transfer_stats(data);
}

static void welcome_round_trip(const proto_welcome *w) {
  proto_out o;
  proto_out_init(&o);
  proto_header h;
  proto_welcome again;
  check(proto_encode_welcome(&o, 1, w) == 0, "welcome encode");
  check(proto_decode_header(o.data, o.len, UINT32_MAX, &h) == 0, "welcome header");
  check(proto_decode_welcome(o.data + PROTO_HEADER_SIZE, h.body_len, &again) == 0,
        "re-encoded welcome does not decode");
  check(again.version == w->version && again.capabilities == w->capabilities &&
            again.device_count == w->device_count &&
            memcmp(&again.limits, &w->limits, sizeof w->limits) == 0,
        "re-encoded welcome differs");
  for (uint32_t i = 0; i < w->device_count; i++)
    check(device_same(&again.devices[i], &w->devices[i]), "re-encoded device differs");
  proto_out_free(&o);
}

static void on_welcome(client *c, const uint8_t *b, size_t n) {
  proto_welcome w;
  if (proto_decode_welcome(b, n, &w) != 0)
    return;
  check(w.device_count <= PROTO_MAX_DEVICES, "welcome devices");
  check(n == WELCOME_HEAD + (size_t)w.device_count * PROTO_DEVICE_SIZE, "welcome length");
  for (uint32_t i = 0; i < w.device_count; i++)
    device_ok(&w.devices[i]);
  welcome_round_trip(&w);
  if (w.version == PROTO_VERSION) /* remote.c refuses another version's WELCOME */
    c->max_message = w.limits.max_message ? w.limits.max_message : UINT32_MAX;
}

static void on_frame(client *c, const uint8_t *frame, size_t n) {
  proto_header h;
  if (proto_decode_header(frame, n, c->max_message, &h) != 0)
    return; /* the client drops it */
  check(h.body_len == n - PROTO_HEADER_SIZE, "body length");
  const uint8_t *body = frame + PROTO_HEADER_SIZE;
  if (h.type == PROTO_REPLY)
    on_reply(body, h.body_len);
  else if (h.type == PROTO_WELCOME)
    on_welcome(c, body, h.body_len);
}

/* An exact-size copy of a frame, so that a read past it is past an allocation. */
static void frame_alone(client *c, const uint8_t *p, size_t n) {
  uint8_t *copy = malloc(n);
  check(copy != NULL, "out of memory");
  memcpy(copy, p, n);
  on_frame(c, copy, n);
  free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  client c = {UINT32_MAX};
  proto_header h;
  if (proto_decode_header(data, size, UINT32_MAX, &h) == 0)
    check(proto_next_frame(data, size) == size, "a whole frame is not one frame");
  const uint8_t *p = data;
  size_t len = size;
  for (size_t n; len > 0 && (n = proto_next_frame(p, len)) > 0; p += n, len -= n) {
    check(n >= PROTO_HEADER_SIZE && n <= len, "frame length");
    frame_alone(&c, p, n);
  }
  /* The client drops what is left; as a frame of its own it must not decode either. */
  if (len > 0)
    check(proto_decode_header(p, len, UINT32_MAX, &h) != 0, "the tail decodes as a frame");
  return 0;
}
