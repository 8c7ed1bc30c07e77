/* The primitives of the wire codec, shared by its files (codec.c: frames and control;
 * codec_op.c: op frames). Little-endian, field by field (memcpy and the endian.h
 * conversions: no struct overlays, no alignment assumed). Writers never fail
 * on their own: a proto_out that ran out of memory keeps its error (o->err) and ignores
 * further writes; a reader that ran past its end is `bad` and reads zeros. */
#ifndef PROTO_CODEC_IO_H
#define PROTO_CODEC_IO_H

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "proto/wire.h"

/* n more bytes at the end of o (NULL once o has failed). */
uint8_t *proto_reserve(proto_out *o, size_t n);
/* Starts a frame; returns the offset of its header for proto_finish_frame. */
size_t proto_begin_frame(proto_out *o, proto_type type, uint64_t request_id);
/* Patches the frame's body length in; o's error, or ACCEL_ELIMIT for a body past 4 GiB. */
int proto_finish_frame(proto_out *o, size_t at);

/* Fixed-size little-endian fields: one load or store each (a loop over the bytes was a
 * twentieth of acceld's loop per tiny op). */
static inline void put_u16_at(uint8_t *p, uint16_t v) {
  v = htole16(v);
  memcpy(p, &v, sizeof v);
}
static inline void put_u32_at(uint8_t *p, uint32_t v) {
  v = htole32(v);
  memcpy(p, &v, sizeof v);
}
static inline void put_u64_at(uint8_t *p, uint64_t v) {
  v = htole64(v);
  memcpy(p, &v, sizeof v);
}

static inline void put_u16(proto_out *o, uint16_t v) {
  uint8_t *p = proto_reserve(o, sizeof v);
  v = htole16(v);
  if (p)
    memcpy(p, &v, sizeof v);
}
static inline void put_u32(proto_out *o, uint32_t v) {
  uint8_t *p = proto_reserve(o, sizeof v);
  v = htole32(v);
  if (p)
    memcpy(p, &v, sizeof v);
}
static inline void put_u64(proto_out *o, uint64_t v) {
  uint8_t *p = proto_reserve(o, sizeof v);
  v = htole64(v);
  if (p)
    memcpy(p, &v, sizeof v);
}
static inline void put_i32(proto_out *o, int32_t v) {
  put_u32(o, (uint32_t)v);
}
static inline void put_i64(proto_out *o, int64_t v) {
  put_u64(o, (uint64_t)v);
}

static inline void put_f64(proto_out *o, double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof u);
  put_u64(o, u);
}

static inline void put_bytes(proto_out *o, const void *data, size_t n) {
  uint8_t *p = proto_reserve(o, n);
  if (p && n)
    memcpy(p, data, n);
}

typedef struct reader {
  const uint8_t *p;
  size_t len, pos;
  bool bad; /* read past the end */
} reader;

/* The next `bytes` of the body, or NULL (and r->bad) past its end. */
static inline const uint8_t *get_at(reader *r, size_t bytes) {
  if (r->bad || r->len - r->pos < bytes) {
    r->bad = true;
    return NULL;
  }
  const uint8_t *p = r->p + r->pos;
  r->pos += bytes;
  return p;
}

static inline uint16_t get_u16(reader *r) {
  uint16_t v = 0;
  const uint8_t *p = get_at(r, sizeof v);
  if (p)
    memcpy(&v, p, sizeof v);
  return le16toh(v);
}
static inline uint32_t get_u32(reader *r) {
  uint32_t v = 0;
  const uint8_t *p = get_at(r, sizeof v);
  if (p)
    memcpy(&v, p, sizeof v);
  return le32toh(v);
}
static inline uint64_t get_u64(reader *r) {
  uint64_t v = 0;
  const uint8_t *p = get_at(r, sizeof v);
  if (p)
    memcpy(&v, p, sizeof v);
  return le64toh(v);
}
static inline int32_t get_i32(reader *r) {
  return (int32_t)get_u32(r);
}
static inline int64_t get_i64(reader *r) {
  return (int64_t)get_u64(r);
}

static inline double get_f64(reader *r) {
  uint64_t u = get_u64(r);
  double f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline const uint8_t *get_bytes(reader *r, size_t n) {
  if (r->bad || r->len - r->pos < n) {
    r->bad = true;
    return NULL;
  }
  const uint8_t *p = r->p + r->pos;
  r->pos += n;
  return p;
}

/* The whole body was read, exactly. */
static inline int done(const reader *r) {
  return r->bad || r->pos != r->len ? ACCEL_EPROTO : 0;
}

#endif
