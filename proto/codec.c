/* Encoding and decoding of frames (layout: docs/PROTOCOL.md) but ops' (codec_op.c).
 * Little-endian, byte by byte. */
#include <stdlib.h>
#include <string.h>

#include "proto/codec_io.h"
#include "runtime/alloc.h"

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

uint8_t *proto_reserve(proto_out *o, size_t n) {
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

/* The header's fields at p (PROTO_HEADER_SIZE bytes). */
static void header_at(uint8_t *p, proto_type type, uint32_t body_len, uint64_t request_id) {
  put_u32_at(p, PROTO_MAGIC);
  put_u16_at(p + 4, PROTO_VERSION);
  put_u16_at(p + 6, (uint16_t)type);
  put_u32_at(p + 8, 0); /* flags */
  put_u32_at(p + 12, body_len);
  put_u64_at(p + 16, request_id);
}

/* Starts a frame; returns the offset of its header for finish_frame. */
size_t proto_begin_frame(proto_out *o, proto_type type, uint64_t request_id) {
  size_t at = o->len;
  uint8_t *p = proto_reserve(o, PROTO_HEADER_SIZE);
  if (p != NULL)
    header_at(p, type, 0, request_id); /* the body's length: patched by finish_frame */
  return at;
}

int proto_finish_frame(proto_out *o, size_t at) {
  if (o->err)
    return o->err;
  size_t body = o->len - at - PROTO_HEADER_SIZE;
  if (body > UINT32_MAX)
    return ACCEL_ELIMIT;
  put_u32_at(o->data + at + 12, (uint32_t)body);
  return 0;
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
  size_t at = proto_begin_frame(o, PROTO_HELLO, request_id);
  size_t n = strnlen(h->name, PROTO_NAME_MAX);
  put_u16(o, h->version);
  put_u16(o, (uint16_t)n);
  put_u32(o, h->capabilities);
  put_bytes(o, h->name, n);
  return proto_finish_frame(o, at);
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
   * sends its nodes' state: 0 serving, 1 restarting, 2 quarantined. */
  uint32_t state = get_u32(r);
  d->state = state <= PROTO_DEVICE_STATE_MAX ? (int)state : (r->bad = true, 0);
  d->restarts = get_u32(r);
  d->packages = get_u32(r);
  d->gemm_dtypes = get_u32(r);
  d->vector_dtypes = get_u32(r);
  d->rng_dtypes = get_u32(r);
  d->nn_dtypes = get_u32(r);
  uint32_t kind = get_u32(r); /* an enum a client may index a table with */
  d->kind = kind <= PROTO_DEVICE_KIND_MAX ? kind : (r->bad = true, 0);
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
  size_t at = proto_begin_frame(o, PROTO_WELCOME, request_id);
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
  return proto_finish_frame(o, at);
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

/* ---- control and replies ---- */

int proto_encode_control(proto_out *o, uint64_t request_id, const proto_control_req *c) {
  size_t at = proto_begin_frame(o, PROTO_CONTROL, request_id);
  put_u32(o, c->command);
  put_u32(o, 0);
  put_u64(o, c->arg);
  return proto_finish_frame(o, at);
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
  size_t at = proto_begin_frame(o, PROTO_REPLY, request_id);
  put_i32(o, status);
  put_u32(o, 0);
  put_bytes(o, data.data, data.len);
  return proto_finish_frame(o, at);
}

int proto_encode_reply_head(uint8_t out[PROTO_REPLY_HEAD_SIZE], uint64_t request_id, int32_t status,
                            size_t data_len) {
  if (data_len > UINT32_MAX - 8u)
    return ACCEL_ELIMIT;
  /* the body: the status, 4 bytes of padding, then the data that follows */
  header_at(out, PROTO_REPLY, (uint32_t)data_len + 8u, request_id);
  put_u32_at(out + PROTO_HEADER_SIZE, (uint32_t)status);
  put_u32_at(out + PROTO_HEADER_SIZE + 4, 0);
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
