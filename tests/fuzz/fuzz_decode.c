/* libFuzzer target for the wire decoder (proto/codec.c): any bytes, as a whole frame, through
 * the header decoder and then, whatever the header says, through every body decoder; what
 * decodes is encoded again and must decode to the same thing. Built with -DFUZZ_REPLAY it is a
 * plain program that runs every file of the directories (or files) it is given through the
 * target: the seed corpus as a regression test with any compiler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    check(welcome.device_count <= PROTO_MAX_DEVICES, "welcome devices");
  if (proto_decode_op(b, n, &op, &data) == 0) {
    check(op.nbufs <= DEV_OP_MAX_BUFS, "op buffers");
    sink += touch(data);
    op_again(&op, data);
  }
  if (proto_decode_control(b, n, &ctl) == 0)
    check(ctl.command > 0 && ctl.command < PROTO_CTL_MAX_, "control command");
  if (proto_decode_reply(b, n, &status, &data) == 0)
    sink += touch(data);
  (void)proto_decode_device(b, n, &dev);
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

#ifdef FUZZ_REPLAY
#include <dirent.h>
#include <sys/stat.h>

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return -1;
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  uint8_t *copy = malloc(n ? n : 1); /* an exact-size copy: overreads hit the end */
  if (copy == NULL)
    return -1;
  memcpy(copy, buf, n);
  LLVMFuzzerTestOneInput(copy, n);
  free(copy);
  return 0;
}

static int run_path(const char *path, int *count) {
  struct stat st;
  if (stat(path, &st) != 0)
    return -1;
  if (!S_ISDIR(st.st_mode)) {
    (*count)++;
    return run_file(path);
  }
  DIR *d = opendir(path);
  if (d == NULL)
    return -1;
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    rc = run_path(sub, count);
  }
  closedir(d);
  return rc;
}

int main(int argc, char **argv) {
  int count = 0;
  for (int i = 1; i < argc; i++)
    if (run_path(argv[i], &count) != 0) {
      fprintf(stderr, "fuzz-decode-replay: cannot read %s\n", argv[i]);
      return 1;
    }
  printf("fuzz-decode-replay: %d inputs, no failure\n", count);
  return count > 0 ? 0 : 1;
}
#endif
