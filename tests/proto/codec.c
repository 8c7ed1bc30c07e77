/* The wire codec: every frame type survives a round trip on random contents; every
 * truncation of a valid frame is refused, and so is every corruption of a field no legal
 * frame can change (OP and WELCOME); corruptions anywhere never read past the end. */
#include <stdlib.h>
#include <string.h>

#include "actors/world.h"
#include "proto/wire.h"
#include "test.h"

static uint64_t seed;

static uint64_t rnd(void) {
  seed ^= seed << 13;
  seed ^= seed >> 7;
  seed ^= seed << 17;
  return seed;
}

static void start(void) {
  const char *env = getenv("ACCEL_TEST_SEED");
  seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 2654435761u + 1;
  printf("# seed %llu (rerun with ACCEL_TEST_SEED)\n", (unsigned long long)seed);
}

static const uint8_t *body_of(const proto_out *o, proto_header *h) {
  CHECK_OK(proto_decode_header(o->data, o->len, UINT32_MAX, h));
  return o->data + PROTO_HEADER_SIZE;
}

static dev_op random_gemm(void) {
  dev_op op = {.h = {.kind = DEV_OP_GEMM,
                     .device = (int32_t)(rnd() % 4),
                     .completion = 2,
                     .deadline_ms = (int64_t)(rnd() % 1000)},
               .nbufs = 3};
  for (int i = 0; i < 3; i++)
    op.bufs[i] = (dev_op_buf){rnd(), DEV_READ, rnd(), rnd()};
  /* The types are not on the wire (the checker takes them from the buffers): 0 here. */
  op.u.gemm = (be_gemm_args){.trans_a = BE_BLAS_TRANS,
                             .trans_b = BE_BLAS_NO_TRANS,
                             .m = (int64_t)(rnd() % 999),
                             .n = (int64_t)(rnd() % 999),
                             .k = (int64_t)(rnd() % 999),
                             .alpha = 1.5,
                             .beta = -0.1,
                             .lda = 7,
                             .ldb = 8,
                             .ldc = 9,
                             .math = BE_GEMM_MATH_FP64,
                             .batch = (int64_t)(rnd() % 99 + 1),
                             .stride_a = (int64_t)rnd(),
                             .stride_b = (int64_t)rnd(),
                             .stride_c = (int64_t)rnd()};
  return op;
}

static bool same_gemm(const be_gemm_args *a, const be_gemm_args *b) {
  return a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->m == b->m && a->n == b->n &&
         a->k == b->k && a->alpha == b->alpha && a->beta == b->beta && a->lda == b->lda &&
         a->ldb == b->ldb && a->ldc == b->ldc && a->math == b->math && a->batch == b->batch &&
         a->stride_a == b->stride_a && a->stride_b == b->stride_b && a->stride_c == b->stride_c &&
         b->ab_type == 0 && b->c_type == 0;
}

TEST(op_round_trip) {
  start();
  for (int round = 0; round < 200; round++) {
    dev_op op = random_gemm(), back;
    proto_out o;
    proto_out_init(&o);
    uint64_t id = rnd();
    CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
    proto_header h;
    const uint8_t *body = body_of(&o, &h);
    CHECK_EQ(h.type, PROTO_OP);
    CHECK(h.request_id == id);
    proto_bytes data;
    CHECK_OK(proto_decode_op(body, h.body_len, &back, &data));
    CHECK_EQ(back.h.kind, op.h.kind);
    CHECK_EQ(back.h.device, op.h.device);
    CHECK_EQ(back.nbufs, 3);
    for (int i = 0; i < 3; i++) {
      CHECK(back.bufs[i].handle == op.bufs[i].handle);
      CHECK(back.bufs[i].offset == op.bufs[i].offset);
      CHECK(back.bufs[i].count == op.bufs[i].count);
    }
    CHECK(same_gemm(&back.u.gemm, &op.u.gemm));
    proto_out_free(&o);
  }
}

TEST(write_carries_its_bytes) {
  start();
  uint8_t bytes[64];
  for (size_t i = 0; i < sizeof bytes; i++)
    bytes[i] = (uint8_t)rnd();
  dev_op op = {.h = {.kind = DEV_OP_WRITE, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){rnd(), DEV_WRITE_ALL, 3, 16};
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 1, &op, (proto_bytes){bytes, sizeof bytes}));
  proto_header h;
  const uint8_t *body = body_of(&o, &h);
  dev_op back;
  proto_bytes data;
  CHECK_OK(proto_decode_op(body, h.body_len, &back, &data));
  CHECK(data.len == sizeof bytes);
  CHECK(back.u.write.bytes == sizeof bytes);
  CHECK(memcmp(back.u.write.src, bytes, sizeof bytes) == 0);
  proto_out_free(&o);
}

TEST(hello_welcome_control_reply_round_trip) {
  start();
  proto_out o;
  proto_out_init(&o);
  proto_hello hi = {.version = PROTO_VERSION, .capabilities = 5, .name = "tester"}, hi2;
  CHECK_OK(proto_encode_hello(&o, 9, &hi));
  proto_header h;
  const uint8_t *body = body_of(&o, &h);
  CHECK_OK(proto_decode_hello(body, h.body_len, &hi2));
  CHECK_STR_EQ(hi2.name, "tester");
  proto_out_free(&o);

  proto_welcome w = {.version = 1, .limits = {1 << 20, 77, 99, 1ull << 40}, .device_count = 2};
  strcpy(w.devices[1].name, "some device");
  strcpy(w.devices[1].backend, "cpu");
  w.devices[1].restarts = 3;
  proto_welcome w2;
  CHECK_OK(proto_encode_welcome(&o, 10, &w));
  body = body_of(&o, &h);
  CHECK_OK(proto_decode_welcome(body, h.body_len, &w2));
  CHECK_EQ(w2.device_count, 2);
  CHECK_STR_EQ(w2.devices[1].name, "some device");
  CHECK_EQ(w2.devices[1].restarts, 3);
  CHECK(w2.limits.max_memory == 1ull << 40);
  proto_out_free(&o);

  proto_control_req c = {PROTO_CTL_INJECT_FAULT, 3}, c2;
  CHECK_OK(proto_encode_control(&o, 11, &c));
  body = body_of(&o, &h);
  CHECK_OK(proto_decode_control(body, h.body_len, &c2));
  CHECK(c2.command == c.command && c2.arg == 3);
  proto_out_free(&o);

  const char text[] = "{\"ok\":true}";
  CHECK_OK(proto_encode_reply(&o, 12, ACCEL_EDEVLOST, (proto_bytes){(const uint8_t *)text, 11}));
  body = body_of(&o, &h);
  int32_t status;
  proto_bytes data;
  CHECK_OK(proto_decode_reply(body, h.body_len, &status, &data));
  CHECK_EQ(status, ACCEL_EDEVLOST);
  CHECK(data.len == 11 && memcmp(data.data, text, 11) == 0);
  proto_out_free(&o);
}

/* Decodes a frame with the decoder its header names; 0 only if everything is accepted. */
static int decode_any(const uint8_t *frame, size_t len) {
  proto_header h;
  int rc = proto_decode_header(frame, len, 1u << 20, &h);
  if (rc != 0)
    return rc;
  const uint8_t *b = frame + PROTO_HEADER_SIZE;
  dev_op op;
  proto_bytes data;
  proto_hello hi;
  proto_welcome w;
  proto_control_req c;
  int32_t st;
  switch (h.type) {
  case PROTO_OP:
    return proto_decode_op(b, h.body_len, &op, &data);
  case PROTO_HELLO:
    return proto_decode_hello(b, h.body_len, &hi);
  case PROTO_WELCOME:
    return proto_decode_welcome(b, h.body_len, &w);
  case PROTO_CONTROL:
    return proto_decode_control(b, h.body_len, &c);
  case PROTO_REPLY:
    return proto_decode_reply(b, h.body_len, &st, &data);
  default:
    return 0;
  }
}

TEST(truncations_are_refused) {
  start();
  dev_op op = random_gemm();
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 5, &op, (proto_bytes){NULL, 0}));
  for (size_t n = 0; n < o.len; n++) {
    /* A copy of exactly n bytes, so a read past the end is caught by the sanitizers. */
    uint8_t *cut = malloc(n ? n : 1);
    memcpy(cut, o.data, n);
    CHECK_LT(decode_any(cut, n), 0);
    free(cut);
  }
  CHECK_OK(decode_any(o.data, o.len));
  proto_out_free(&o);
}

TEST(bad_enums_and_counts_are_refused) {
  dev_op op = random_gemm();
  op.nbufs = 2; /* gemm needs three */
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}));
  CHECK_ERR(decode_any(o.data, o.len), ACCEL_EPROTO);
  proto_out_free(&o);
  op = random_gemm();
  op.h.kind = 999;
  op.nbufs = 1;
  CHECK_OK(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}));
  CHECK_ERR(decode_any(o.data, o.len), ACCEL_EPROTO);
  proto_out_free(&o);
  dev_op rng = {.h = {.kind = DEV_OP_RNG}, .nbufs = 1};
  rng.u.rng.dist = (be_rng_dist)7;
  CHECK_OK(proto_encode_op(&o, 1, &rng, (proto_bytes){NULL, 0}));
  CHECK_ERR(decode_any(o.data, o.len), ACCEL_EPROTO);
  proto_out_free(&o);
  proto_control_req c = {99, 0};
  CHECK_OK(proto_encode_control(&o, 1, &c));
  CHECK_ERR(decode_any(o.data, o.len), ACCEL_EPROTO);
  proto_out_free(&o);
}

/* ---- every limit of the decoders, at the limit and one past it ---- */

static void set_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* The body of the only frame in o (checked with the header decoder), and its length. */
static const uint8_t *only_body(const proto_out *o, size_t *len) {
  proto_header h;
  CHECK_OK(proto_decode_header(o->data, o->len, UINT32_MAX, &h));
  *len = h.body_len;
  return o->data + PROTO_HEADER_SIZE;
}

/* Guards after a decoded struct: a decoder writing past the struct changes them. */
#define GUARD_BYTE 0xa5
static int guard_intact(const uint8_t *g, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (g[i] != GUARD_BYTE)
      return 0;
  return 1;
}

/* A HELLO body by hand: the encoder cannot say a name longer than PROTO_NAME_MAX. */
static size_t hello_body(uint8_t *b, uint16_t name_len, size_t name_bytes) {
  set_le(b, PROTO_VERSION, 2);
  set_le(b + 2, name_len, 2);
  set_le(b + 4, 0, 4);
  memset(b + 8, 'n', name_bytes);
  return 8 + name_bytes;
}

typedef struct guarded_hello {
  proto_hello h;
  uint8_t guard[256];
} guarded_hello;

TEST(hello_name_at_the_limit_and_one_past) {
  proto_hello hi = {.version = PROTO_VERSION};
  memset(hi.name, 'x', PROTO_NAME_MAX);
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_hello(&o, 1, &hi));
  size_t len;
  const uint8_t *body = only_body(&o, &len);
  guarded_hello g;
  memset(&g, GUARD_BYTE, sizeof g); /* so a missing terminator is not a lucky 0 */
  CHECK_OK(proto_decode_hello(body, len, &g.h));
  CHECK_EQ(strnlen(g.h.name, sizeof g.h.name), PROTO_NAME_MAX);
  CHECK(memcmp(g.h.name, hi.name, PROTO_NAME_MAX) == 0);
  proto_out_free(&o);
  /* One past: 65 bytes named and sent. And the most a u16 can name. */
  static uint8_t b[8 + UINT16_MAX];
  CHECK_ERR(proto_decode_hello(b, hello_body(b, PROTO_NAME_MAX + 1, PROTO_NAME_MAX + 1), &g.h),
            ACCEL_EPROTO);
  CHECK_ERR(proto_decode_hello(b, hello_body(b, UINT16_MAX, UINT16_MAX), &g.h), ACCEL_EPROTO);
  CHECK(guard_intact(g.guard, sizeof g.guard));
  /* The length field and the bytes disagree, at the limit. */
  CHECK_ERR(proto_decode_hello(b, hello_body(b, PROTO_NAME_MAX, PROTO_NAME_MAX - 1), &g.h),
            ACCEL_EPROTO);
  CHECK_ERR(proto_decode_hello(b, hello_body(b, PROTO_NAME_MAX, PROTO_NAME_MAX + 1), &g.h),
            ACCEL_EPROTO);
  CHECK_OK(proto_decode_hello(b, hello_body(b, 0, 0), &g.h));
  CHECK_STR_EQ(g.h.name, "");
}

/* The encoder's side of the same limit: a name with no terminator is cut at the limit. */
TEST(hello_encoder_cuts_an_unterminated_name) {
  proto_hello hi = {.version = PROTO_VERSION};
  memset(hi.name, 'y', sizeof hi.name); /* PROTO_NAME_MAX + 1 bytes, no NUL */
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_hello(&o, 1, &hi));
  size_t len;
  const uint8_t *body = only_body(&o, &len);
  CHECK_EQ(len, 8 + PROTO_NAME_MAX);
  proto_hello back;
  CHECK_OK(proto_decode_hello(body, len, &back));
  CHECK_EQ(strlen(back.name), PROTO_NAME_MAX);
  proto_out_free(&o);
}

#define WELCOME_HEAD 32u               /* a WELCOME body before its devices */
#define WELCOME_COUNT_AT 20u           /* device_count's offset in the body */
#define DEVICE_STATE_AT (96 + 16 + 12) /* state's offset in a device record */

static proto_welcome welcome_of(uint32_t count) {
  proto_welcome w = {
      .version = PROTO_VERSION, .limits = {1u << 20, 8, 64, 0}, .device_count = count};
  for (uint32_t i = 0; i < count && i < PROTO_MAX_DEVICES; i++) {
    snprintf(w.devices[i].name, sizeof w.devices[i].name, "device %u", i);
    snprintf(w.devices[i].backend, sizeof w.devices[i].backend, "cpu");
    w.devices[i].mem_bytes = (uint64_t)i << 30;
    w.devices[i].state = (int)(i % 3);
    w.devices[i].restarts = i;
  }
  return w;
}

typedef struct guarded_welcome {
  proto_welcome w;
  uint8_t guard[2 * sizeof(struct accel_device_info)];
} guarded_welcome;

/* The body of an encoded WELCOME copied into a buffer with `extra` bytes of room after it. */
static uint8_t *welcome_body(uint32_t count, size_t extra, size_t *len) {
  proto_welcome w = welcome_of(count);
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_welcome(&o, 1, &w));
  const uint8_t *body = only_body(&o, len);
  CHECK_EQ(*len, WELCOME_HEAD + count * PROTO_DEVICE_SIZE); /* the layout this test forges */
  uint8_t *copy = malloc(*len + extra);
  CHECK(copy != NULL);
  memcpy(copy, body, *len);
  proto_out_free(&o);
  return copy;
}

/* ---- corruption: every field a legal frame cannot change is guarded ---- */

/* Bits of a frame that no legal frame of that shape can have flipped: bytes [at, at + width)
 * (a little-endian integer) and which of its bits. Flipping any non-empty subset of them must
 * make the decoder refuse the frame: the magic, version, type, flags and body length of the
 * header; an OP's kind, flags and buffer count; the sign of its device and deadline; the
 * bits above an enum's largest value; a WELCOME's device count. Other fields (request ids,
 * handles, sizes, limits, names) take any value on the wire: the session checks them. */
typedef struct guarded_bits {
  const char *name;
  size_t at;
  int width;
  uint64_t bits;
} guarded_bits;

/* The bits above the highest bit of `max`: set, any enum up to max is out of range. */
static uint64_t above(uint64_t max) {
  int n = 0;
  while (n < 64 && (max >> n) != 0)
    n++;
  return n >= 64 ? 0 : ~0ull << n;
}

static uint64_t width_mask(int width) {
  return width == 8 ? ~0ull : (1ull << (8 * width)) - 1;
}

static size_t header_fields(guarded_bits *f) {
  f[0] = (guarded_bits){"magic", 0, 4, ~0ull};
  f[1] = (guarded_bits){"version", 4, 2, ~0ull};
  f[2] = (guarded_bits){"type", 6, 2, ~0ull};
  f[3] = (guarded_bits){"flags", 8, 4, ~0ull};
  f[4] = (guarded_bits){"body length", 12, 4, ~0ull};
  return 5;
}

/* A GEMM OP of three buffers: its head, then its payload after the buffers. */
static size_t gemm_fields(guarded_bits *f) {
  size_t n = header_fields(f);
  const size_t op = PROTO_HEADER_SIZE, pay = op + PROTO_OP_HEAD_SIZE + 3 * PROTO_BUF_SIZE;
  f[n++] = (guarded_bits){"op kind", op, 4, ~0ull};
  f[n++] = (guarded_bits){"op device sign", op + 4, 4, 1ull << 31};
  f[n++] = (guarded_bits){"op completion", op + 8, 4, above(ACCEL_COMPLETION_POLL)};
  f[n++] = (guarded_bits){"op flags", op + 12, 4, ~0ull};
  f[n++] = (guarded_bits){"op deadline sign", op + 16, 8, 1ull << 63};
  f[n++] = (guarded_bits){"op buffer count", op + 24, 4, ~0ull};
  f[n++] = (guarded_bits){"gemm trans_a", pay, 4, above(BE_BLAS_TRANS)};
  f[n++] = (guarded_bits){"gemm trans_b", pay + 4, 4, above(BE_BLAS_TRANS)};
  f[n++] = (guarded_bits){"gemm math", pay + 72, 4, above(BE_GEMM_MATH_FP64)};
  return n;
}

/* A WELCOME of `count` devices: the count, and each device's state and kind. */
static size_t welcome_fields(guarded_bits *f, uint32_t count) {
  size_t n = header_fields(f);
  const size_t body = PROTO_HEADER_SIZE, kind_at = 96 + 16 + 8 + 4 * 8;
  f[n++] = (guarded_bits){"welcome device count", body + WELCOME_COUNT_AT, 4, ~0ull};
  for (uint32_t i = 0; i < count; i++) {
    size_t dev = body + WELCOME_HEAD + i * PROTO_DEVICE_SIZE;
    f[n++] = (guarded_bits){"device state", dev + DEVICE_STATE_AT, 4, above(DEV_NODE_QUARANTINED)};
    f[n++] = (guarded_bits){"device kind", dev + kind_at, 4, above(BE_KIND_ACCELERATOR)};
  }
  return n;
}

/* A copy of the frame with `x` (within the field) flipped must be refused. */
static void check_refused(const proto_out *o, const guarded_bits *f, uint64_t x) {
  uint8_t *copy = malloc(o->len);
  CHECK(copy != NULL);
  memcpy(copy, o->data, o->len);
  for (int i = 0; i < f->width; i++)
    copy[f->at + (size_t)i] ^= (uint8_t)(x >> (8 * i));
  if (decode_any(copy, o->len) >= 0)
    TEST_FAIL("%s ^ 0x%llx: accepted", f->name, (unsigned long long)x);
  free(copy);
}

/* Every guarded bit alone, then random non-empty sets of one field's guarded bits. */
static void check_corruptions(const proto_out *o, const guarded_bits *f, size_t nf) {
  CHECK_OK(decode_any(o->data, o->len));
  for (size_t i = 0; i < nf; i++) {
    CHECK_LE(f[i].at + (size_t)f[i].width, o->len);
    uint64_t bits = f[i].bits & width_mask(f[i].width);
    CHECK_NE(bits, 0);
    for (int b = 0; b < 8 * f[i].width; b++)
      if (bits >> b & 1)
        check_refused(o, &f[i], 1ull << b);
  }
  for (int round = 0; round < 20000; round++) {
    const guarded_bits *g = &f[rnd() % nf];
    uint64_t x = rnd() & g->bits & width_mask(g->width);
    if (x != 0)
      check_refused(o, g, x);
  }
}

TEST(corruptions_of_guarded_fields_are_all_refused) {
  start();
  guarded_bits f[32];
  dev_op op = random_gemm();
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 5, &op, (proto_bytes){NULL, 0}));
  CHECK_EQ(o.len, PROTO_HEADER_SIZE + PROTO_OP_HEAD_SIZE + 3 * PROTO_BUF_SIZE + 112u);
  check_corruptions(&o, f, gemm_fields(f));
  proto_out_free(&o);

  proto_welcome w = welcome_of(3); /* the daemon's answer to HELLO, decoded by the client */
  CHECK_OK(proto_encode_welcome(&o, 1, &w));
  CHECK_EQ(o.len, PROTO_HEADER_SIZE + WELCOME_HEAD + 3 * PROTO_DEVICE_SIZE);
  check_corruptions(&o, f, welcome_fields(f, 3));
  proto_out_free(&o);
}

/* Flips anywhere: a frame is refused or decodes within its bounds (the sanitizers watch). */
TEST(corruptions_anywhere_stay_in_bounds) {
  start();
  dev_op op = random_gemm();
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 5, &op, (proto_bytes){NULL, 0}));
  for (int round = 0; round < 20000; round++) {
    uint8_t *copy = malloc(o.len);
    memcpy(copy, o.data, o.len);
    copy[rnd() % o.len] ^= (uint8_t)(1u << (rnd() % 8));
    int rc = decode_any(copy, o.len);
    CHECK(rc == 0 || rc == ACCEL_EPROTO);
    free(copy);
  }
  uint8_t bad[PROTO_HEADER_SIZE];
  memcpy(bad, o.data, sizeof bad);
  bad[0] ^= 1;
  CHECK_ERR(decode_any(o.data, o.len - 1), ACCEL_EPROTO);
  CHECK_ERR(proto_decode_header(bad, sizeof bad, 1u << 20, &(proto_header){0}), ACCEL_EPROTO);
  CHECK_ERR(proto_decode_header(o.data, o.len, 10, &(proto_header){0}), ACCEL_ELIMIT);
  proto_out_free(&o);
}

TEST(welcome_devices_at_the_limit_and_one_past) {
  size_t len;
  uint8_t *b = welcome_body(PROTO_MAX_DEVICES, PROTO_DEVICE_SIZE, &len);
  guarded_welcome g;
  CHECK_OK(proto_decode_welcome(b, len, &g.w));
  CHECK_EQ(g.w.device_count, PROTO_MAX_DEVICES);
  CHECK_STR_EQ(g.w.devices[PROTO_MAX_DEVICES - 1].name, "device 15");
  CHECK_EQ(g.w.devices[PROTO_MAX_DEVICES - 1].restarts, PROTO_MAX_DEVICES - 1);
  /* One more device than devices[] holds: the count says 17 and 17 records follow. */
  memcpy(b + len, b + len - PROTO_DEVICE_SIZE, PROTO_DEVICE_SIZE);
  set_le(b + WELCOME_COUNT_AT, PROTO_MAX_DEVICES + 1, 4);
  memset(&g, GUARD_BYTE, sizeof g);
  CHECK_ERR(proto_decode_welcome(b, len + PROTO_DEVICE_SIZE, &g.w), ACCEL_EPROTO);
  CHECK(guard_intact(g.guard, sizeof g.guard));
  set_le(b + WELCOME_COUNT_AT, UINT32_MAX, 4);
  CHECK_ERR(proto_decode_welcome(b, len + PROTO_DEVICE_SIZE, &g.w), ACCEL_EPROTO);
  CHECK(guard_intact(g.guard, sizeof g.guard));
  free(b);
  /* The encoder refuses to say it, and writes nothing. */
  proto_welcome w = welcome_of(PROTO_MAX_DEVICES + 1);
  proto_out o;
  proto_out_init(&o);
  CHECK_ERR(proto_encode_welcome(&o, 1, &w), ACCEL_EINVAL);
  CHECK_EQ(o.len, 0);
  proto_out_free(&o);
}

TEST(welcome_count_disagrees_with_the_body) {
  size_t len;
  uint8_t *b = welcome_body(2, 0, &len);
  proto_welcome w;
  CHECK_OK(proto_decode_welcome(b, len, &w));
  set_le(b + WELCOME_COUNT_AT, 3, 4); /* one more than follows */
  CHECK_ERR(proto_decode_welcome(b, len, &w), ACCEL_EPROTO);
  set_le(b + WELCOME_COUNT_AT, 1, 4); /* one less: a record left over */
  CHECK_ERR(proto_decode_welcome(b, len, &w), ACCEL_EPROTO);
  set_le(b + WELCOME_COUNT_AT, 2, 4);
  CHECK_ERR(proto_decode_welcome(b, len - 1, &w), ACCEL_EPROTO); /* a record cut short */
  CHECK_ERR(proto_decode_welcome(b, WELCOME_HEAD - 1, &w), ACCEL_EPROTO);
  free(b);
  b = welcome_body(0, 0, &len);
  CHECK_OK(proto_decode_welcome(b, len, &w));
  CHECK_EQ(w.device_count, 0);
  free(b);
}

/* One device record (a DEVICE_INFO reply's data), by the encoder. */
static void device_record(uint8_t out[PROTO_DEVICE_SIZE + 1], int state) {
  struct accel_device_info d = {.mem_bytes = 1u << 30, .state = state};
  memset(d.name, 'N', sizeof d.name); /* no terminators: the decoder must add them */
  memset(d.backend, 'B', sizeof d.backend);
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_device(&o, &d));
  CHECK_EQ(o.len, PROTO_DEVICE_SIZE);
  memcpy(out, o.data, o.len);
  out[PROTO_DEVICE_SIZE] = 0;
  proto_out_free(&o);
}

TEST(device_record_at_the_limit_and_one_past) {
  uint8_t rec[PROTO_DEVICE_SIZE + 1];
  struct accel_device_info d;
  device_record(rec, DEV_NODE_QUARANTINED); /* the last state */
  CHECK_OK(proto_decode_device(rec, PROTO_DEVICE_SIZE, &d));
  CHECK_EQ(d.state, DEV_NODE_QUARANTINED);
  CHECK_EQ(strlen(d.name), sizeof d.name - 1);
  CHECK_EQ(strlen(d.backend), sizeof d.backend - 1);
  CHECK_ERR(proto_decode_device(rec, PROTO_DEVICE_SIZE - 1, &d), ACCEL_EPROTO);
  CHECK_ERR(proto_decode_device(rec, PROTO_DEVICE_SIZE + 1, &d), ACCEL_EPROTO);
  set_le(rec + DEVICE_STATE_AT, DEV_NODE_QUARANTINED + 1, 4);
  CHECK_ERR(proto_decode_device(rec, PROTO_DEVICE_SIZE, &d), ACCEL_EPROTO);
  set_le(rec + DEVICE_STATE_AT, UINT32_MAX, 4); /* -1 as an int */
  CHECK_ERR(proto_decode_device(rec, PROTO_DEVICE_SIZE, &d), ACCEL_EPROTO);
  /* The same in a WELCOME. */
  size_t len;
  uint8_t *b = welcome_body(1, 0, &len);
  proto_welcome w;
  set_le(b + WELCOME_HEAD + DEVICE_STATE_AT, DEV_NODE_QUARANTINED + 1, 4);
  CHECK_ERR(proto_decode_welcome(b, len, &w), ACCEL_EPROTO);
  free(b);
}

TEST(transfer_stats_at_the_limit_and_one_past) {
  accel_transfer_stats t = {1, 2, 3, 4, UINT64_MAX}, back;
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_transfer_stats(&o, &t));
  CHECK_EQ(o.len, 40);
  CHECK_OK(proto_decode_transfer_stats(o.data, o.len, &back));
  CHECK(back.read == UINT64_MAX && back.host_to_device == 1);
  CHECK_ERR(proto_decode_transfer_stats(o.data, o.len - 1, &back), ACCEL_EPROTO);
  CHECK_OK(proto_encode_transfer_stats(&o, &t)); /* 80 bytes: one record and more */
  CHECK_ERR(proto_decode_transfer_stats(o.data, 41, &back), ACCEL_EPROTO);
  proto_out_free(&o);
}

/* The most negative code of accel/error.h's table, from the table itself. */
static int lowest_error(void) {
  int low = 0;
#define LOWEST_(name, value, msg) low = (value) < low ? (value) : low;
  ACCEL_ERRNO_MAP(LOWEST_)
#undef LOWEST_
  return low;
}

static int reply_with(int32_t status, int32_t *got, proto_bytes *data) {
  static uint8_t body[9]; /* static: *data points into it after the return */
  memset(body, 0, sizeof body);
  set_le(body, (uint32_t)status, 4);
  body[8] = 42; /* one byte of data */
  return proto_decode_reply(body, sizeof body, got, data);
}

TEST(reply_status_at_the_limits_and_one_past) {
  int32_t st;
  proto_bytes data;
  CHECK_OK(reply_with(0, &st, &data));
  CHECK_EQ(st, 0);
  CHECK(data.len == 1 && data.data[0] == 42);
  int low = lowest_error();
  CHECK_OK(reply_with(low, &st, &data));
  CHECK_EQ(st, low);
  const int32_t bad[] = {low - 1, 1, INT32_MAX, INT32_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_ERR(reply_with(bad[i], &st, &data), ACCEL_EPROTO);
    CHECK_EQ(st, ACCEL_EPROTO); /* a caller that looks anyway sees the refusal */
    CHECK(data.data == NULL && data.len == 0);
  }
  uint8_t body[8] = {0};
  CHECK_OK(proto_decode_reply(body, 8, &st, &data)); /* no data */
  CHECK_EQ(data.len, 0);
  CHECK_ERR(proto_decode_reply(body, 7, &st, &data), ACCEL_EPROTO);
}

/* A CONTROL frame (40 bytes) to forge headers from. */
static void control_frame(uint8_t out[40]) {
  proto_control_req c = {PROTO_CTL_PING, 0};
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, 3, &c));
  CHECK_EQ(o.len, 40);
  memcpy(out, o.data, 40);
  proto_out_free(&o);
}

/* The frame with the header field at `at` (`bytes` wide) set to v. */
static int header_with(size_t at, int bytes, uint64_t v, size_t len, uint32_t max_message) {
  uint8_t f[40];
  control_frame(f);
  set_le(f + at, v, bytes);
  proto_header h;
  return proto_decode_header(f, len, max_message, &h);
}

/* Known bytes, not a round trip (an encoder and a decoder wrong alike would pass those): a
 * header is the magic "ACC1", then each field least significant byte first. */
static void expect_header(const uint8_t *f, uint16_t type, uint32_t body_len, uint64_t id) {
  uint8_t want[PROTO_HEADER_SIZE] = {'A',
                                     'C',
                                     'C',
                                     '1',
                                     PROTO_VERSION & 0xff,
                                     PROTO_VERSION >> 8,
                                     (uint8_t)type,
                                     (uint8_t)(type >> 8)}; /* flags: 0 */
  for (int i = 0; i < 4; i++)
    want[12 + i] = (uint8_t)(body_len >> (8 * i));
  for (int i = 0; i < 8; i++)
    want[16 + i] = (uint8_t)(id >> (8 * i));
  CHECK_EQ(memcmp(f, want, sizeof want), 0);
}

TEST(the_wire_is_little_endian) {
  uint8_t f[PROTO_REPLY_HEAD_SIZE];
  CHECK_OK(proto_encode_reply_head(f, 0x0102030405060708ull, -2, 0x0a0b0c));
  expect_header(f, PROTO_REPLY, 8 + 0x0a0b0c, 0x0102030405060708ull);
  static const uint8_t want_body[] = {0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0}; /* -2, padding */
  CHECK_EQ(memcmp(f + PROTO_HEADER_SIZE, want_body, sizeof want_body), 0);
  proto_header h;
  CHECK_OK(proto_decode_header(f, PROTO_HEADER_SIZE + 8 + 0x0a0b0c, UINT32_MAX, &h));
  CHECK_EQ(h.request_id, 0x0102030405060708ull);
  CHECK_EQ(h.body_len, 8u + 0x0a0b0c);
  CHECK_EQ(h.type, PROTO_REPLY);
  /* a frame begun in a proto_out: a PING, its 16-byte body (command, argument) */
  proto_out o = {0};
  proto_control_req c = {.command = PROTO_CTL_PING, .arg = 0x1122334455667788ull};
  CHECK_OK(proto_encode_control(&o, 0x8877665544332211ull, &c));
  CHECK_EQ(o.len, (size_t)PROTO_HEADER_SIZE + 16);
  expect_header(o.data, PROTO_CONTROL, 16, 0x8877665544332211ull);
  static const uint8_t want_arg[] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  CHECK_EQ(memcmp(o.data + PROTO_HEADER_SIZE + 8, want_arg, 8), 0);
  proto_out_free(&o);
}

TEST(header_at_the_limits_and_one_past) {
  CHECK_OK(header_with(8, 4, 0, 40, 40));                /* max_message: exactly */
  CHECK_ERR(header_with(8, 4, 0, 40, 39), ACCEL_ELIMIT); /* one byte over */
  CHECK_OK(header_with(12, 4, 16, 40, 40));              /* body_len = frame - header */
  CHECK_ERR(header_with(12, 4, 17, 40, 40), ACCEL_EPROTO);
  CHECK_ERR(header_with(12, 4, 15, 40, 40), ACCEL_EPROTO);
  CHECK_ERR(header_with(12, 4, UINT32_MAX, 40, 40), ACCEL_EPROTO);
  CHECK_OK(header_with(6, 2, PROTO_TYPE_MAX_ - 1, 40, 40)); /* types: the last */
  CHECK_ERR(header_with(6, 2, PROTO_TYPE_MAX_, 40, 40), ACCEL_EPROTO);
  CHECK_ERR(header_with(6, 2, 0, 40, 40), ACCEL_EPROTO);
  CHECK_ERR(header_with(4, 2, PROTO_VERSION + 1, 40, 40), ACCEL_EPROTO);
  CHECK_ERR(header_with(4, 2, PROTO_VERSION - 1, 40, 40), ACCEL_EPROTO);
  CHECK_ERR(header_with(8, 4, 1, 40, 40), ACCEL_EPROTO); /* flags */
  CHECK_ERR(header_with(0, 4, PROTO_MAGIC + 1, 40, 40), ACCEL_EPROTO);
  /* A header alone (an empty body) is whole; one byte less is not a frame. */
  CHECK_OK(header_with(12, 4, 0, PROTO_HEADER_SIZE, 40));
  CHECK_ERR(header_with(12, 4, 0, PROTO_HEADER_SIZE - 1, 40), ACCEL_EPROTO);
}

TEST(next_frame_at_the_limits) {
  uint8_t two[80];
  control_frame(two);
  control_frame(two + 40);
  CHECK_EQ(proto_next_frame(two, 80), 40);
  CHECK_EQ(proto_next_frame(two, 40), 40);
  CHECK_EQ(proto_next_frame(two, 39), 0); /* the body cut by one */
  CHECK_EQ(proto_next_frame(two, PROTO_HEADER_SIZE - 1), 0);
  set_le(two + 12, 56, 4); /* the body claims every byte: one whole frame */
  CHECK_EQ(proto_next_frame(two, 80), 80);
  set_le(two + 12, 57, 4); /* and one more than there is */
  CHECK_EQ(proto_next_frame(two, 80), 0);
  set_le(two + 12, UINT32_MAX, 4);
  CHECK_EQ(proto_next_frame(two, 80), 0);
  CHECK_EQ(proto_next_frame(NULL, 80), 0);
}

/* Encodes op and returns what decoding it says. */
static int op_decodes(const dev_op *op) {
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 1, op, (proto_bytes){NULL, 0}));
  size_t len;
  const uint8_t *body = only_body(&o, &len);
  dev_op back;
  proto_bytes data;
  int rc = proto_decode_op(body, len, &back, &data);
  proto_out_free(&o);
  return rc;
}

static dev_op op_of(uint32_t kind, uint32_t nbufs) {
  dev_op op = {.h = {.kind = kind, .device = ACCEL_DEVICE_ANY}, .nbufs = nbufs};
  for (uint32_t i = 0; i < nbufs; i++)
    op.bufs[i] = (dev_op_buf){.handle = ((uint64_t)1 << 32) | (i + 1), .count = 4};
  return op;
}

/* A launch the checker's shape test takes: `nbufs` buffer arguments (bufs[0..nbufs) in
 * order), then scalars up to `nargs` arguments. */
static dev_op launch_of(uint32_t nbufs, uint32_t nargs) {
  dev_op op = op_of(DEV_OP_LAUNCH, nbufs);
  dev_launch *l = &op.u.launch;
  for (uint32_t i = 0; i < nbufs; i++)
    op.bufs[i].access = i % 2 ? DEV_RW : DEV_READ;
  l->module = ((uint64_t)1 << 32) | 99;
  for (int i = 0; i < 3; i++) {
    l->grid[i] = 7u + (uint32_t)i;
    l->block[i] = 32u >> i;
  }
  l->shared_bytes = 256;
  l->nargs = nargs;
  for (uint32_t i = 0; i < nargs; i++)
    l->args[i] = i < nbufs ? (dev_kernel_arg){BE_PARAM_BUFFER, 0, i}
                           : (dev_kernel_arg){BE_PARAM_SCALAR, 4, 0xfeed0000u + i};
  strcpy(l->name, "saxpy_kernel");
  return op;
}

/* An all-gather over three devices (the sends, then the receives). */
static dev_op collective_of(void) {
  dev_op op = op_of(DEV_OP_COLLECTIVE, 6);
  op.u.coll.kind = BE_COLL_ALL_GATHER;
  op.u.coll.reduce = BE_REDUCE_MAX;
  op.u.coll.root = 2;
  op.u.coll.ndev = 3;
  op.u.coll.devices[0] = op.h.device = 4;
  op.u.coll.devices[1] = 0;
  op.u.coll.devices[2] = 7;
  return op;
}

/* Every field of a collective comes back as it went. */
TEST(collective_round_trips) {
  dev_op op = collective_of(), back;
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}));
  size_t len;
  const uint8_t *body = only_body(&o, &len);
  proto_bytes data;
  CHECK_OK(proto_decode_op(body, len, &back, &data));
  CHECK_EQ(back.h.kind, DEV_OP_COLLECTIVE);
  CHECK_EQ(back.nbufs, 6u);
  CHECK_EQ(back.h.device, 4);
  CHECK_EQ(back.u.coll.kind, (uint32_t)BE_COLL_ALL_GATHER);
  CHECK_EQ(back.u.coll.reduce, (uint32_t)BE_REDUCE_MAX);
  CHECK_EQ(back.u.coll.root, 2u);
  CHECK_EQ(back.u.coll.ndev, 3u);
  CHECK(memcmp(back.u.coll.devices, op.u.coll.devices, sizeof op.u.coll.devices) == 0);
  for (uint32_t i = 0; i < 6; i++)
    CHECK_EQ(back.bufs[i].handle, op.bufs[i].handle);
  proto_out_free(&o);
}

/* Encodes op, decodes it into *back and checks its head and buffer handles; the caller checks
 * the payload. */
static void payload_round_trip(const dev_op *op, dev_op *back) {
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 9, op, (proto_bytes){NULL, 0}));
  size_t len;
  const uint8_t *body = only_body(&o, &len);
  proto_bytes data;
  CHECK_OK(proto_decode_op(body, len, back, &data));
  CHECK_EQ(back->h.kind, op->h.kind);
  CHECK_EQ(back->nbufs, op->nbufs);
  for (uint32_t i = 0; i < op->nbufs; i++)
    CHECK_EQ(back->bufs[i].handle, op->bufs[i].handle);
  proto_out_free(&o);
}

/* A binary op: a 2 x 3 dst, a transposed, b a row; the last op of the enum. */
static dev_op binary_of(void) {
  dev_op op = op_of(DEV_OP_BINARY, 3);
  op.u.binary = (be_binary_args){
      .op = BE_MINIMUM, .rows = 2, .cols = 3, .a_rs = 1, .a_cs = 2, .b_rs = 0, .b_cs = 1};
  return op;
}

/* Every field of a binary op comes back as it went. */
TEST(binary_round_trips) {
  dev_op op = binary_of(), back;
  payload_round_trip(&op, &back);
  CHECK(memcmp(&back.u.binary, &op.u.binary, sizeof op.u.binary) == 0);
}

/* A reduction: the columns of a 3 x 4 view with padded rows; the last op and axis. */
static dev_op reduce_of(void) {
  dev_op op = op_of(DEV_OP_REDUCE, 2);
  op.u.reduce = (be_reduction_args){
      .op = BE_RED_MEAN, .axis = BE_AXIS_COLS, .rows = 3, .cols = 4, .rs = 6, .cs = 1};
  return op;
}

/* Every field of a reduction comes back as it went. */
TEST(reduce_round_trips) {
  dev_op op = reduce_of(), back;
  payload_round_trip(&op, &back);
  CHECK(memcmp(&back.u.reduce, &op.u.reduce, sizeof op.u.reduce) == 0);
}

/* A where: a 3 x 4 dst, cond a column, a transposed, b a scalar. */
static dev_op where_of(void) {
  dev_op op = op_of(DEV_OP_WHERE, 4);
  op.u.where = (be_where_args){
      .rows = 3, .cols = 4, .c_rs = 1, .c_cs = 0, .a_rs = 1, .a_cs = 3, .b_rs = 0, .b_cs = 0};
  return op;
}

/* Every field of a where comes back as it went. */
TEST(where_round_trips) {
  dev_op op = where_of(), back;
  payload_round_trip(&op, &back);
  CHECK(memcmp(&back.u.where, &op.u.where, sizeof op.u.where) == 0);
}

/* A convert: a 5 x 2 dst from the transpose of a padded 2 x 7 src. */
static dev_op convert_of(void) {
  dev_op op = op_of(DEV_OP_CONVERT, 2);
  op.u.convert = (be_convert_args){.rows = 5, .cols = 2, .rs = 1, .cs = 7};
  return op;
}

/* Every field of a convert comes back as it went. */
TEST(convert_round_trips) {
  dev_op op = convert_of(), back;
  payload_round_trip(&op, &back);
  CHECK(memcmp(&back.u.convert, &op.u.convert, sizeof op.u.convert) == 0);
}

TEST(op_head_enums_at_the_limit_and_one_past) {
  dev_op op = convert_of(); /* the last kind that travels */
  CHECK_OK(op_decodes(&op));
  CHECK_EQ(DEV_OP_IMPORT, DEV_OP_KIND_COUNT_ - 1); /* after it, kinds of one process only */
  for (uint32_t k = DEV_OP_EXPORT; k <= DEV_OP_IMPORT; k++) {
    dev_op local = op_of(k, 1);
    CHECK_ERR(op_decodes(&local), ACCEL_EPROTO);
  }
  op.h.kind = DEV_OP_KIND_COUNT_;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op.h.kind = 0;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = op_of(DEV_OP_READ, 1);
  op.h.completion = ACCEL_COMPLETION_POLL;
  CHECK_OK(op_decodes(&op));
  op.h.completion = ACCEL_COMPLETION_POLL + 1;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = op_of(DEV_OP_READ, 1);
  op.h.deadline_ms = 0;
  CHECK_OK(op_decodes(&op));
  op.h.deadline_ms = -1;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = op_of(DEV_OP_READ, 1);
  op.h.device = ACCEL_DEVICE_ANY;
  CHECK_OK(op_decodes(&op));
  op.h.device = ACCEL_DEVICE_ANY - 1;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
}

TEST(op_payload_enums_at_the_limit_and_one_past) {
  dev_op op = collective_of();
  CHECK_OK(op_decodes(&op)); /* ALL_GATHER and MAX: the last of each */
  op.u.coll.kind = BE_COLL_ALL_GATHER + 1;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = collective_of();
  op.u.coll.reduce = BE_REDUCE_MAX + 1;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = op_of(DEV_OP_RNG, 1);
  op.u.rng.dist = BE_RNG_NORMAL;
  CHECK_OK(op_decodes(&op));
  op.u.rng.dist = (be_rng_dist)(BE_RNG_NORMAL + 1);
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = op_of(DEV_OP_UNARY, 2);
  op.u.unary.op = BE_UNARY_OP_LAST; /* the last */
  CHECK_OK(op_decodes(&op));
  op.u.unary.op = (be_unary_op)(BE_UNARY_OP_LAST + 1);
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = binary_of();
  op.u.binary.op = BE_GREATER_EQUAL;
  CHECK_OK(op_decodes(&op)); /* the last comparison: the last op */
  op.u.binary.op = (be_binary_op)(BE_BINARY_OP_LAST + 1);
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = reduce_of();
  CHECK_OK(op_decodes(&op)); /* MEAN and COLS: the last */
  op.u.reduce.op = (be_reduction_op)(BE_REDUCTION_OP_LAST + 1);
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = reduce_of();
  op.u.reduce.axis = (be_reduction_axis)(BE_REDUCTION_AXIS_LAST + 1);
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = op_of(DEV_OP_BUFFER_CREATE, 1);
  op.u.create.dtype = ACCEL_DTYPE_MAX_;
  CHECK_OK(op_decodes(&op));
  op.u.create.dtype = (accel_dtype)(ACCEL_DTYPE_MAX_ + 1);
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op.u.create.dtype = (accel_dtype)0;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
}

TEST(gemm_enums_at_the_limit_and_one_past) {
  dev_op op = op_of(DEV_OP_GEMM, 3);
  op.u.gemm = (be_gemm_args){
      .trans_a = BE_BLAS_TRANS, .trans_b = BE_BLAS_TRANS, .math = BE_GEMM_MATH_FP64, .batch = 1};
  CHECK_OK(op_decodes(&op));
  dev_op bad = op;
  bad.u.gemm.trans_a = (be_blas_trans)(BE_BLAS_TRANS + 1);
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  bad = op;
  bad.u.gemm.trans_b = (be_blas_trans)(BE_BLAS_TRANS + 1);
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  bad = op;
  bad.u.gemm.math = (be_gemm_math)(BE_GEMM_MATH_FP64 + 1);
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
}

typedef struct guarded_op {
  dev_op op;
  uint8_t guard[4 * PROTO_BUF_SIZE + 64];
} guarded_op;

/* nbufs is the head's u32 at 24; buffers follow the 32-byte head. */
TEST(op_buffers_at_the_limit_and_one_past) {
  dev_op op = launch_of(DEV_OP_MAX_BUFS, DEV_OP_MAX_BUFS); /* the one kind that takes 16 */
  CHECK_OK(op_decodes(&op));
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}));
  size_t len;
  const uint8_t *body = only_body(&o, &len);
  /* One buffer more than bufs[] holds: the count says 17 and 17 references follow. */
  size_t refs_end = PROTO_OP_HEAD_SIZE + DEV_OP_MAX_BUFS * PROTO_BUF_SIZE;
  uint8_t *b = malloc(len + PROTO_BUF_SIZE);
  CHECK(b != NULL);
  memcpy(b, body, refs_end);
  memcpy(b + refs_end, body + refs_end - PROTO_BUF_SIZE, PROTO_BUF_SIZE);
  memcpy(b + refs_end + PROTO_BUF_SIZE, body + refs_end, len - refs_end);
  set_le(b + 24, DEV_OP_MAX_BUFS + 1, 4);
  guarded_op g;
  memset(&g, GUARD_BYTE, sizeof g);
  proto_bytes data;
  CHECK_ERR(proto_decode_op(b, len + PROTO_BUF_SIZE, &g.op, &data), ACCEL_EPROTO);
  CHECK(guard_intact(g.guard, sizeof g.guard));
  free(b);
  proto_out_free(&o);
  op.nbufs = DEV_OP_MAX_BUFS + 1; /* the encoder refuses it too */
  proto_out_init(&o);
  CHECK_ERR(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}), ACCEL_EINVAL);
  proto_out_free(&o);
}

/* A write's data_len (the u64 after its one buffer reference) against the bytes sent. */
TEST(write_length_at_the_limit_and_one_past) {
  static const uint8_t bytes[16] = {1, 2, 3};
  dev_op op = op_of(DEV_OP_WRITE, 1);
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 1, &op, (proto_bytes){bytes, sizeof bytes}));
  size_t len;
  only_body(&o, &len);
  uint8_t *body = o.data + PROTO_HEADER_SIZE; /* writable: data_len is changed below */
  size_t at = PROTO_OP_HEAD_SIZE + PROTO_BUF_SIZE;
  dev_op back;
  proto_bytes data;
  CHECK_OK(proto_decode_op(body, len, &back, &data));
  CHECK(data.len == sizeof bytes);
  set_le(body + at, sizeof bytes + 1, 8); /* one byte more than follows */
  CHECK_ERR(proto_decode_op(body, len, &back, &data), ACCEL_EPROTO);
  set_le(body + at, sizeof bytes - 1, 8); /* one byte left over */
  CHECK_ERR(proto_decode_op(body, len, &back, &data), ACCEL_EPROTO);
  set_le(body + at, UINT64_MAX, 8);
  CHECK_ERR(proto_decode_op(body, len, &back, &data), ACCEL_EPROTO);
  proto_out_free(&o);
}

TEST(control_at_the_limit_and_one_past) {
  uint8_t body[17] = {0};
  proto_control_req c;
  set_le(body, PROTO_CTL_MAX_ - 1, 4); /* the last command */
  CHECK_OK(proto_decode_control(body, 16, &c));
  CHECK_ERR(proto_decode_control(body, 15, &c), ACCEL_EPROTO);
  CHECK_ERR(proto_decode_control(body, 17, &c), ACCEL_EPROTO);
  set_le(body, PROTO_CTL_MAX_, 4);
  CHECK_ERR(proto_decode_control(body, 16, &c), ACCEL_EPROTO);
  set_le(body, 0, 4);
  CHECK_ERR(proto_decode_control(body, 16, &c), ACCEL_EPROTO);
}

/* ---- user kernels: MODULE_LOAD, MODULE_UNLOAD, LAUNCH ---- */

#define MODULE_PAYLOAD_AT (PROTO_OP_HEAD_SIZE + PROTO_BUF_SIZE) /* source, in the body */
#define MODULE_OPTIONS_AT (MODULE_PAYLOAD_AT + 16)              /* the options' bytes */

static const char module_code[] = "__kernel void k(__global float *x) { x[0] = 1.0f; }";

static dev_op module_load_of(uint32_t source, const char *options) {
  dev_op op = op_of(DEV_OP_MODULE_LOAD, 1);
  op.bufs[0].count = 0;
  op.u.module.source = source;
  op.u.module.code = module_code;
  op.u.module.len = sizeof module_code - 1;
  op.u.module.options = options;
  return op;
}

/* The body of one encoded op, copied into a buffer of its own with `extra` bytes of room. */
static uint8_t *op_body(const dev_op *op, size_t extra, size_t *len) {
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 1, op, (proto_bytes){NULL, 0}));
  const uint8_t *body = only_body(&o, len);
  uint8_t *copy = malloc(*len + extra);
  CHECK(copy != NULL);
  memcpy(copy, body, *len);
  proto_out_free(&o);
  return copy;
}

static int decode_ex(const uint8_t *b, size_t len, dev_op *op, proto_op_data *out) {
  return proto_decode_op_ex(b, len, true, op, out);
}

TEST(module_load_round_trip) {
  dev_op op = module_load_of(ACCEL_SOURCE_OPENCL, "-DN=4 -cl-fast-relaxed-math"), back;
  op.h.deadline_ms = 1234;
  size_t len;
  uint8_t *b = op_body(&op, 0, &len);
  CHECK_EQ(len, MODULE_OPTIONS_AT + strlen(op.u.module.options) + op.u.module.len);
  proto_op_data out;
  CHECK_OK(decode_ex(b, len, &back, &out));
  CHECK_EQ(back.h.kind, DEV_OP_MODULE_LOAD);
  CHECK_EQ(back.nbufs, 1);
  CHECK(back.bufs[0].handle == op.bufs[0].handle);
  CHECK_EQ(back.h.deadline_ms, 1234);
  CHECK_EQ(back.u.module.source, ACCEL_SOURCE_OPENCL);
  /* The code is borrowed from the body; the options too, but not as a string. */
  CHECK(back.u.module.len == op.u.module.len && out.bytes.len == op.u.module.len);
  CHECK(back.u.module.code == out.bytes.data);
  CHECK(memcmp(back.u.module.code, module_code, op.u.module.len) == 0);
  CHECK(back.u.module.options == NULL);
  CHECK(out.options.len == strlen(op.u.module.options));
  CHECK(memcmp(out.options.data, op.u.module.options, out.options.len) == 0);
  CHECK(out.options.data >= b && out.options.data + out.options.len <= b + len);
  /* proto_decode_op: the code as the op's data. */
  proto_bytes data;
  CHECK_OK(proto_decode_op(b, len, &back, &data));
  CHECK(data.data == back.u.module.code && data.len == op.u.module.len);
  free(b);
  /* No options: none on the wire. */
  op = module_load_of(ACCEL_SOURCE_PTX, NULL);
  b = op_body(&op, 0, &len);
  CHECK_EQ(len, MODULE_OPTIONS_AT + op.u.module.len);
  CHECK_OK(decode_ex(b, len, &back, &out));
  CHECK(out.options.len == 0 && back.u.module.options == NULL);
  free(b);
  op = module_load_of(ACCEL_SOURCE_CUDA, "-arch=sm_90");
  b = op_body(&op, 0, &len);
  for (size_t n = 0; n < len; n++) {
    uint8_t *cut = malloc(n ? n : 1);
    memcpy(cut, b, n);
    CHECK_ERR(decode_ex(cut, n, &back, &out), ACCEL_EPROTO);
    free(cut);
  }
  free(b);
}

/* A MODULE_LOAD whose options are n bytes of 'O' (forged past what the encoder says). */
static uint8_t *module_with_options(size_t n, size_t *len) {
  char *opts = malloc(n + 1);
  CHECK(opts != NULL);
  memset(opts, 'O', n);
  opts[n] = '\0';
  dev_op op = module_load_of(ACCEL_SOURCE_CUDA, NULL);
  size_t code = (size_t)op.u.module.len;
  uint8_t *b = op_body(&op, n, len);
  memmove(b + MODULE_OPTIONS_AT + n, b + MODULE_OPTIONS_AT, code);
  memcpy(b + MODULE_OPTIONS_AT, opts, n);
  set_le(b + MODULE_PAYLOAD_AT + 4, n, 4);
  *len += n;
  free(opts);
  return b;
}

TEST(module_options_at_the_limit_and_one_past) {
  size_t len;
  dev_op back;
  proto_op_data out;
  uint8_t *b = module_with_options(PROTO_OPTIONS_MAX, &len);
  CHECK_OK(decode_ex(b, len, &back, &out));
  CHECK_EQ(out.options.len, PROTO_OPTIONS_MAX);
  CHECK(back.u.module.len == sizeof module_code - 1);
  b[MODULE_OPTIONS_AT + PROTO_OPTIONS_MAX - 1] = '\0'; /* a NUL inside: not a C string */
  CHECK_ERR(decode_ex(b, len, &back, &out), ACCEL_EPROTO);
  CHECK(out.options.data == NULL && out.options.len == 0);
  b[MODULE_OPTIONS_AT + PROTO_OPTIONS_MAX - 1] = 'O';
  b[MODULE_OPTIONS_AT] = '\0';
  CHECK_ERR(decode_ex(b, len, &back, &out), ACCEL_EPROTO);
  free(b);
  b = module_with_options(PROTO_OPTIONS_MAX + 1, &len);
  CHECK_ERR(decode_ex(b, len, &back, &out), ACCEL_EPROTO);
  set_le(b + MODULE_PAYLOAD_AT + 4, UINT32_MAX, 4);
  CHECK_ERR(decode_ex(b, len, &back, &out), ACCEL_EPROTO);
  free(b);
  /* The encoder's side: options it cannot send are ACCEL_ELIMIT, and nothing is written. */
  char *opts = malloc(PROTO_OPTIONS_MAX + 2);
  CHECK(opts != NULL);
  memset(opts, 'O', PROTO_OPTIONS_MAX + 1);
  opts[PROTO_OPTIONS_MAX + 1] = '\0';
  dev_op op = module_load_of(ACCEL_SOURCE_CUDA, opts);
  proto_out o;
  proto_out_init(&o);
  CHECK_ERR(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}), ACCEL_ELIMIT);
  CHECK_EQ(o.len, 0);
  opts[PROTO_OPTIONS_MAX] = '\0';
  CHECK_OK(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}));
  proto_out_free(&o);
  free(opts);
}

TEST(module_source_code_and_buffers_at_the_limit_and_one_past) {
  dev_op op = module_load_of(ACCEL_SOURCE_SPIRV, "-x"), back;
  proto_op_data out;
  CHECK_OK(op_decodes(&op)); /* the last source */
  op.u.module.source = ACCEL_SOURCE_SPIRV + 1;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op.u.module.source = ACCEL_SOURCE_CUDA;
  CHECK_OK(op_decodes(&op)); /* the first */
  op.u.module.source = 0;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op = module_load_of(ACCEL_SOURCE_CUDA, "-x");
  op.nbufs = 2;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op.nbufs = 0;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  /* code_len against the bytes that follow the options: equal, one more, one less, none. */
  op = module_load_of(ACCEL_SOURCE_CUDA, "-x");
  size_t len;
  uint8_t *b = op_body(&op, 0, &len);
  uint8_t *code_len = b + MODULE_PAYLOAD_AT + 8;
  CHECK_OK(decode_ex(b, len, &back, &out));
  set_le(code_len, op.u.module.len + 1, 8);
  CHECK_ERR(decode_ex(b, len, &back, &out), ACCEL_EPROTO);
  set_le(code_len, op.u.module.len - 1, 8);
  CHECK_ERR(decode_ex(b, len, &back, &out), ACCEL_EPROTO);
  set_le(code_len, UINT64_MAX, 8);
  CHECK_ERR(decode_ex(b, len, &back, &out), ACCEL_EPROTO);
  set_le(code_len, 0, 8); /* and no code at all: not a module */
  CHECK_ERR(decode_ex(b, MODULE_OPTIONS_AT + 2, &back, &out), ACCEL_EPROTO);
  set_le(code_len, 1, 8);
  CHECK_OK(decode_ex(b, MODULE_OPTIONS_AT + 2 + 1, &back, &out));
  CHECK(back.u.module.len == 1);
  free(b);
}

TEST(module_unload_round_trip_and_limits) {
  dev_op op = op_of(DEV_OP_MODULE_UNLOAD, 1), back;
  size_t len;
  uint8_t *b = op_body(&op, 1, &len);
  CHECK_EQ(len, PROTO_OP_HEAD_SIZE + PROTO_BUF_SIZE); /* no payload */
  proto_bytes data;
  CHECK_OK(proto_decode_op(b, len, &back, &data));
  CHECK(back.h.kind == DEV_OP_MODULE_UNLOAD && back.bufs[0].handle == op.bufs[0].handle);
  CHECK_EQ(data.len, 0);
  b[len] = 0;
  CHECK_ERR(proto_decode_op(b, len + 1, &back, &data), ACCEL_EPROTO); /* a byte too many */
  free(b);
  op.nbufs = 2;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
  op.nbufs = 0;
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
}

/* Where a launch's fields are in its body (nbufs buffers, a name of name_len bytes). */
static size_t launch_at(uint32_t nbufs) {
  return PROTO_OP_HEAD_SIZE + (size_t)nbufs * PROTO_BUF_SIZE;
}
#define LAUNCH_NARGS_AT(nbufs) (launch_at(nbufs) + 36)
#define LAUNCH_NAME_LEN_AT(nbufs) (launch_at(nbufs) + 40)
#define LAUNCH_NAME_AT(nbufs) (launch_at(nbufs) + 44)
#define LAUNCH_ARG_AT(nbufs, name_len, i) (LAUNCH_NAME_AT(nbufs) + (name_len) + 16 * (size_t)(i))

TEST(launch_round_trip) {
  dev_op op = launch_of(3, 6), back;
  op.u.launch.args[4] = (dev_kernel_arg){BE_PARAM_LOCAL, 1024, 0};
  op.u.launch.args[5] = (dev_kernel_arg){BE_PARAM_SCALAR, 8, UINT64_MAX};
  op.bufs[2].access = DEV_WRITE_ALL;
  op.bufs[1].offset = 5;
  size_t len;
  uint8_t *b = op_body(&op, 0, &len);
  CHECK_EQ(len, LAUNCH_ARG_AT(3, strlen("saxpy_kernel"), 6));
  proto_bytes data;
  CHECK_OK(proto_decode_op(b, len, &back, &data));
  CHECK_EQ(data.len, 0);
  const dev_launch *l = &op.u.launch, *k = &back.u.launch;
  CHECK_EQ(back.nbufs, 3);
  for (int i = 0; i < 3; i++) {
    CHECK(back.bufs[i].handle == op.bufs[i].handle && back.bufs[i].access == op.bufs[i].access);
    CHECK(back.bufs[i].offset == op.bufs[i].offset && back.bufs[i].count == op.bufs[i].count);
    CHECK_EQ(k->grid[i], l->grid[i]);
    CHECK_EQ(k->block[i], l->block[i]);
  }
  CHECK(k->module == l->module);
  CHECK_EQ(k->shared_bytes, 256);
  CHECK_EQ(k->nargs, 6);
  for (int i = 0; i < 6; i++)
    CHECK(k->args[i].kind == l->args[i].kind && k->args[i].size == l->args[i].size &&
          k->args[i].bits == l->args[i].bits);
  CHECK_STR_EQ(k->name, "saxpy_kernel");
  /* Cut anywhere (an exact-size copy, so that a read past the end is caught): refused. */
  for (size_t n = 0; n < len; n++) {
    uint8_t *cut = malloc(n ? n : 1);
    memcpy(cut, b, n);
    CHECK_ERR(proto_decode_op(cut, n, &back, &data), ACCEL_EPROTO);
    free(cut);
  }
  free(b);
}

TEST(launch_args_at_the_limit_and_one_past) {
  dev_op op = launch_of(DEV_OP_MAX_BUFS, BE_LAUNCH_MAX_ARGS);
  CHECK_OK(op_decodes(&op));
  size_t len, name_len = strlen(op.u.launch.name);
  uint8_t *b = op_body(&op, 16, &len);
  CHECK_EQ(len, LAUNCH_ARG_AT(DEV_OP_MAX_BUFS, name_len, BE_LAUNCH_MAX_ARGS));
  /* 33 arguments, all sent: one more than args[] holds. */
  set_le(b + len, BE_PARAM_SCALAR, 4);
  set_le(b + len + 4, 4, 4);
  set_le(b + len + 8, 1, 8);
  set_le(b + LAUNCH_NARGS_AT(DEV_OP_MAX_BUFS), BE_LAUNCH_MAX_ARGS + 1, 4);
  guarded_op g;
  memset(&g, GUARD_BYTE, sizeof g);
  proto_bytes data;
  CHECK_ERR(proto_decode_op(b, len + 16, &g.op, &data), ACCEL_EPROTO);
  CHECK(guard_intact(g.guard, sizeof g.guard));
  set_le(b + LAUNCH_NARGS_AT(DEV_OP_MAX_BUFS), UINT32_MAX, 4);
  CHECK_ERR(proto_decode_op(b, len + 16, &g.op, &data), ACCEL_EPROTO);
  /* The count and the arguments sent disagree. */
  set_le(b + LAUNCH_NARGS_AT(DEV_OP_MAX_BUFS), BE_LAUNCH_MAX_ARGS - 1, 4);
  CHECK_ERR(proto_decode_op(b, len, &g.op, &data), ACCEL_EPROTO);
  free(b);
  /* The encoder cannot say 33 either. */
  op.u.launch.nargs = BE_LAUNCH_MAX_ARGS + 1;
  proto_out o;
  proto_out_init(&o);
  CHECK_ERR(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}), ACCEL_EINVAL);
  CHECK_EQ(o.len, 0);
  proto_out_free(&o);
  op = launch_of(0, 0); /* no arguments at all */
  CHECK_OK(op_decodes(&op));
}

TEST(launch_name_at_the_limit_and_one_past) {
  dev_op op = launch_of(1, 1);
  memset(op.u.launch.name, 'k', BE_KERNEL_NAME_MAX);
  op.u.launch.name[BE_KERNEL_NAME_MAX] = '\0';
  size_t len;
  uint8_t *b = op_body(&op, 0, &len);
  guarded_op g;
  memset(&g, GUARD_BYTE, sizeof g);
  proto_bytes data;
  CHECK_OK(proto_decode_op(b, len, &g.op, &data));
  CHECK_EQ(strlen(g.op.u.launch.name), BE_KERNEL_NAME_MAX);
  b[LAUNCH_NAME_AT(1) + 5] = '\0'; /* a NUL inside the name */
  CHECK_ERR(proto_decode_op(b, len, &g.op, &data), ACCEL_EPROTO);
  b[LAUNCH_NAME_AT(1) + 5] = 'k';
  b[LAUNCH_NAME_AT(1) + BE_KERNEL_NAME_MAX - 1] = '\0'; /* or as its last byte */
  CHECK_ERR(proto_decode_op(b, len, &g.op, &data), ACCEL_EPROTO);
  free(b);
  /* 128 bytes (name[] with no terminator: the encoder sends all of it). */
  memset(op.u.launch.name, 'k', sizeof op.u.launch.name);
  b = op_body(&op, 0, &len);
  CHECK_EQ(len, LAUNCH_ARG_AT(1, BE_KERNEL_NAME_MAX + 1, 1));
  memset(&g, GUARD_BYTE, sizeof g);
  CHECK_ERR(proto_decode_op(b, len, &g.op, &data), ACCEL_EPROTO);
  CHECK(guard_intact(g.guard, sizeof g.guard));
  set_le(b + LAUNCH_NAME_LEN_AT(1), UINT32_MAX, 4);
  CHECK_ERR(proto_decode_op(b, len, &g.op, &data), ACCEL_EPROTO);
  free(b);
  op.u.launch.name[0] = '\0'; /* empty */
  CHECK_ERR(op_decodes(&op), ACCEL_EPROTO);
}

TEST(launch_arg_kinds_and_buffer_indices_at_the_limit_and_one_past) {
  dev_op op = launch_of(2, 4);
  op.u.launch.args[3] = (dev_kernel_arg){BE_PARAM_LOCAL, 64, 0}; /* the last kind */
  CHECK_OK(op_decodes(&op));
  dev_op bad = op;
  bad.u.launch.args[3].kind = BE_PARAM_LOCAL + 1;
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  bad.u.launch.args[3].kind = BE_PARAM_UNKNOWN;
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  bad.u.launch.args[3].kind = UINT32_MAX;
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  /* A buffer argument names bufs[bits]: the last buffer, then one past it. */
  CHECK(op.u.launch.args[1].kind == BE_PARAM_BUFFER && op.u.launch.args[1].bits == 1);
  bad = op;
  bad.u.launch.args[1].bits = 2;
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  bad.u.launch.args[1].bits = UINT64_MAX;
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  bad = launch_of(0, 1);
  bad.u.launch.args[0] = (dev_kernel_arg){BE_PARAM_BUFFER, 0, 0}; /* and with no buffers */
  CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  /* The access a launch asks for per buffer: read, write, both, write-all; nothing else. */
  static const uint32_t good[] = {DEV_READ, DEV_WRITE, DEV_RW, DEV_WRITE_ALL};
  static const uint32_t wrong[] = {0, 4, 5, 7, UINT32_MAX};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    bad = op;
    bad.bufs[1].access = good[i];
    CHECK_OK(op_decodes(&bad));
  }
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
    bad = op;
    bad.bufs[1].access = wrong[i];
    CHECK_ERR(op_decodes(&bad), ACCEL_EPROTO);
  }
}

/* A module load's REPLY carries the build log as its data, with any status. */
TEST(build_log_reply_and_device_sources) {
  static const char log[] = "<kernel>:1:5: error: use of undeclared identifier 'y'";
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_reply(&o, 77, ACCEL_EBUILD,
                              (proto_bytes){(const uint8_t *)log, sizeof log - 1}));
  size_t len;
  const uint8_t *body = only_body(&o, &len);
  int32_t status;
  proto_bytes data;
  CHECK_OK(proto_decode_reply(body, len, &status, &data));
  CHECK_EQ(status, ACCEL_EBUILD);
  CHECK(data.len == sizeof log - 1 && memcmp(data.data, log, data.len) == 0);
  proto_out_free(&o);
  /* A device's sources travel in its record (the field a daemon before them left 0). */
  struct accel_device_info d = {.name = "gpu",
                                .backend = "opencl",
                                .packages = ACCEL_PKG_MODULE,
                                .sources = 1u << ACCEL_SOURCE_OPENCL | 1u << ACCEL_SOURCE_SPIRV},
                           back;
  CHECK_OK(proto_encode_device(&o, &d));
  CHECK_OK(proto_decode_device(o.data, o.len, &back));
  CHECK_EQ(back.sources, d.sources);
  CHECK_EQ(back.packages, ACCEL_PKG_MODULE);
  o.data[PROTO_DEVICE_SIZE - 4] |= 1; /* bit 0 names no source: dropped, not refused */
  o.data[PROTO_DEVICE_SIZE - 1] = 0x80;
  CHECK_OK(proto_decode_device(o.data, o.len, &back));
  CHECK_EQ(back.sources, d.sources);
  proto_out_free(&o);
}

static const test_case tests[] = {
    TEST_CASE(op_round_trip),
    TEST_CASE(write_carries_its_bytes),
    TEST_CASE(hello_welcome_control_reply_round_trip),
    TEST_CASE(truncations_are_refused),
    TEST_CASE(corruptions_of_guarded_fields_are_all_refused),
    TEST_CASE(corruptions_anywhere_stay_in_bounds),
    TEST_CASE(bad_enums_and_counts_are_refused),
    TEST_CASE(hello_name_at_the_limit_and_one_past),
    TEST_CASE(hello_encoder_cuts_an_unterminated_name),
    TEST_CASE(welcome_devices_at_the_limit_and_one_past),
    TEST_CASE(welcome_count_disagrees_with_the_body),
    TEST_CASE(device_record_at_the_limit_and_one_past),
    TEST_CASE(transfer_stats_at_the_limit_and_one_past),
    TEST_CASE(reply_status_at_the_limits_and_one_past),
    TEST_CASE(the_wire_is_little_endian),
    TEST_CASE(header_at_the_limits_and_one_past),
    TEST_CASE(next_frame_at_the_limits),
    TEST_CASE(collective_round_trips),
    TEST_CASE(binary_round_trips),
    TEST_CASE(reduce_round_trips),
    TEST_CASE(where_round_trips),
    TEST_CASE(convert_round_trips),
    TEST_CASE(op_head_enums_at_the_limit_and_one_past),
    TEST_CASE(op_payload_enums_at_the_limit_and_one_past),
    TEST_CASE(gemm_enums_at_the_limit_and_one_past),
    TEST_CASE(op_buffers_at_the_limit_and_one_past),
    TEST_CASE(write_length_at_the_limit_and_one_past),
    TEST_CASE(control_at_the_limit_and_one_past),
    TEST_CASE(module_load_round_trip),
    TEST_CASE(module_options_at_the_limit_and_one_past),
    TEST_CASE(module_source_code_and_buffers_at_the_limit_and_one_past),
    TEST_CASE(module_unload_round_trip_and_limits),
    TEST_CASE(launch_round_trip),
    TEST_CASE(launch_args_at_the_limit_and_one_past),
    TEST_CASE(launch_name_at_the_limit_and_one_past),
    TEST_CASE(launch_arg_kinds_and_buffer_indices_at_the_limit_and_one_past),
    TEST_CASE(build_log_reply_and_device_sources),
};

TEST_MAIN(tests)
