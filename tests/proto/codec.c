/* The wire codec: every frame type survives a round trip on random contents; every
 * truncation and corruption of a valid frame is refused (never read past the end, never
 * accepted as something else). */
#include <stdlib.h>
#include <string.h>

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

static dev_op random_sgemm(void) {
  dev_op op = {.h = {.kind = DEV_OP_SGEMM, .device = (int32_t)(rnd() % 4), .completion = 2,
                     .deadline_ms = (int64_t)(rnd() % 1000)},
               .nbufs = 3};
  for (int i = 0; i < 3; i++)
    op.bufs[i] = (dev_op_buf){rnd(), DEV_READ, rnd(), rnd()};
  op.u.sgemm = (be_sgemm_args){BE_BLAS_TRANS, BE_BLAS_NO_TRANS, (int64_t)(rnd() % 999),
                               (int64_t)(rnd() % 999), (int64_t)(rnd() % 999), 1.5f, -0.25f,
                               7, 8, 9, BE_SGEMM_MATH_DEVICE};
  return op;
}

TEST(op_round_trip) {
  start();
  for (int round = 0; round < 200; round++) {
    dev_op op = random_sgemm(), back;
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
    CHECK(memcmp(&back.u.sgemm, &op.u.sgemm, sizeof op.u.sgemm) == 0);
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
  proto_control_req c;
  int32_t st;
  switch (h.type) {
  case PROTO_OP:
    return proto_decode_op(b, h.body_len, &op, &data);
  case PROTO_HELLO:
    return proto_decode_hello(b, h.body_len, &hi);
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
  dev_op op = random_sgemm();
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

TEST(corruptions_are_refused_or_still_well_formed) {
  start();
  dev_op op = random_sgemm();
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 5, &op, (proto_bytes){NULL, 0}));
  int refused = 0;
  for (int round = 0; round < 20000; round++) {
    uint8_t *copy = malloc(o.len);
    memcpy(copy, o.data, o.len);
    copy[rnd() % o.len] ^= (uint8_t)(1u << (rnd() % 8));
    refused += decode_any(copy, o.len) < 0;
    free(copy);
  }
  /* Flips in the magic, version, type, lengths, kind and counts must be refused. */
  CHECK_GT(refused, 1000);
  uint8_t bad[PROTO_HEADER_SIZE];
  memcpy(bad, o.data, sizeof bad);
  bad[0] ^= 1;
  CHECK_ERR(decode_any(o.data, o.len - 1), ACCEL_EPROTO);
  CHECK_ERR(proto_decode_header(bad, sizeof bad, 1u << 20, &(proto_header){0}), ACCEL_EPROTO);
  CHECK_ERR(proto_decode_header(o.data, o.len, 10, &(proto_header){0}), ACCEL_ELIMIT);
  proto_out_free(&o);
}

TEST(bad_enums_and_counts_are_refused) {
  dev_op op = random_sgemm();
  op.nbufs = 2; /* sgemm needs three */
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 1, &op, (proto_bytes){NULL, 0}));
  CHECK_ERR(decode_any(o.data, o.len), ACCEL_EPROTO);
  proto_out_free(&o);
  op = random_sgemm();
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

static const test_case tests[] = {
    TEST_CASE(op_round_trip),
    TEST_CASE(write_carries_its_bytes),
    TEST_CASE(hello_welcome_control_reply_round_trip),
    TEST_CASE(truncations_are_refused),
    TEST_CASE(corruptions_are_refused_or_still_well_formed),
    TEST_CASE(bad_enums_and_counts_are_refused),
};

TEST_MAIN(tests)
