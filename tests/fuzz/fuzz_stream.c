/* libFuzzer target for the local transport's stream splitting (proto/stream.h): any bytes as
 * a stream, cut into arbitrary chunks as reads deliver them. The splitter below does what the
 * daemon's reader does (server/server_local.c: a small staging buffer; a frame larger than
 * what is buffered continues in a buffer of its own size) with proto_stream_scan(); the frames
 * it yields, and where it stops (a foreign header, a frame over the limit, the end of the
 * bytes), must be exactly those of scanning the whole stream at once, whatever the chunking.
 * Every frame goes through proto_decode_header() at the same limit, which must accept its
 * length. The first two input bytes choose the frame limit and the chunk sizes. Linked with
 * replay.c it is a plain program that runs the seed corpora through the target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/stream.h"
#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STAGING 64u /* small, so that frames often outgrow it */
#define MAX_FRAMES 4096u

typedef struct outcome {
  size_t ends[MAX_FRAMES]; /* where each whole frame ends in the stream */
  size_t n;
  proto_scan stop; /* why splitting stopped */
} outcome;

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_stream: %s\n", what);
    abort();
  }
}

/* Every frame the splitter yields: a copy of exactly its bytes, through the header decoder. */
static void frame(outcome *o, size_t end, const uint8_t *p, size_t len, uint64_t max_frame) {
  uint8_t *copy = malloc(len);
  check(copy != NULL, "out of memory");
  memcpy(copy, p, len);
  proto_header h;
  check(proto_decode_header(copy, len, (uint32_t)max_frame, &h) != ACCEL_ELIMIT,
        "the decoder refuses a length the scanner took");
  free(copy);
  if (o->n < MAX_FRAMES)
    o->ends[o->n++] = end;
}

static void at_once(const uint8_t *s, size_t len, uint64_t max_frame, outcome *o) {
  size_t at = 0, flen;
  uint64_t id;
  for (;;) {
    o->stop = proto_stream_scan(s + at, len - at, max_frame, &flen, &id);
    if (o->stop != PROTO_SCAN_FRAME)
      return;
    check(flen >= PROTO_HEADER_SIZE && flen <= max_frame, "a frame length out of range");
    if (flen > len - at) {
      o->stop = PROTO_SCAN_SHORT; /* its end has not come */
      return;
    }
    frame(o, at + flen, s + at, flen, max_frame);
    at += flen;
  }
}

/* The daemon's way: bytes arrive in chunks into a staging buffer; a frame that is not whole
 * there moves into a buffer of its own size, which the next chunks fill. */
typedef struct splitter {
  uint8_t staging[STAGING];
  size_t staged;
  uint8_t *big;
  size_t big_len, big_have;
  size_t consumed; /* stream offset of staging[0] (or of big) */
  int stopped;
  outcome *o;
  uint64_t max_frame;
} splitter;

static void take_big(splitter *sp) {
  if (sp->big_have < sp->big_len)
    return;
  frame(sp->o, sp->consumed + sp->big_len, sp->big, sp->big_len, sp->max_frame);
  sp->consumed += sp->big_len;
  free(sp->big);
  sp->big = NULL;
}

static void split_staged(splitter *sp) {
  size_t at = 0, flen;
  uint64_t id;
  while (!sp->stopped) {
    proto_scan sc = proto_stream_scan(sp->staging + at, sp->staged - at, sp->max_frame, &flen, &id);
    if (sc == PROTO_SCAN_SHORT)
      break;
    if (sc != PROTO_SCAN_FRAME) {
      sp->stopped = 1;
      sp->o->stop = sc;
      return;
    }
    if (flen > sp->staged - at) { /* continues in a buffer of its own */
      sp->big = malloc(flen);
      check(sp->big != NULL, "out of memory");
      sp->big_len = flen;
      sp->big_have = sp->staged - at;
      memcpy(sp->big, sp->staging + at, sp->big_have);
      sp->consumed += at;
      sp->staged = 0;
      return;
    }
    frame(sp->o, sp->consumed + at + flen, sp->staging + at, flen, sp->max_frame);
    at += flen;
  }
  memmove(sp->staging, sp->staging + at, sp->staged - at);
  sp->staged -= at;
  sp->consumed += at;
}

static void feed(splitter *sp, const uint8_t *p, size_t len) {
  while (len > 0 && !sp->stopped) {
    size_t n;
    if (sp->big) {
      n = sp->big_len - sp->big_have < len ? sp->big_len - sp->big_have : len;
      memcpy(sp->big + sp->big_have, p, n);
      sp->big_have += n;
      take_big(sp);
    } else {
      n = STAGING - sp->staged < len ? STAGING - sp->staged : len;
      memcpy(sp->staging + sp->staged, p, n);
      sp->staged += n;
      split_staged(sp);
    }
    p += n;
    len -= n;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  uint64_t max_frame = PROTO_HEADER_SIZE + (uint64_t)data[0] * 16;
  unsigned chunk_seed = data[1];
  const uint8_t *s = data + 2;
  size_t len = size - 2;
  static outcome whole, pieces;
  memset(&whole, 0, sizeof whole);
  memset(&pieces, 0, sizeof pieces);
  at_once(s, len, max_frame, &whole);
  splitter sp = {.o = &pieces, .max_frame = max_frame};
  pieces.stop = PROTO_SCAN_SHORT;
  for (size_t at = 0, k = 0; at < len && !sp.stopped; k++) {
    size_t n = 1 + (chunk_seed * 31u + k * 17u) % 97u; /* 1 to 97 bytes per read */
    n = n < len - at ? n : len - at;
    feed(&sp, s + at, n);
    at += n;
  }
  free(sp.big);
  check(whole.n == pieces.n, "a different number of frames in pieces");
  check(memcmp(whole.ends, pieces.ends, whole.n * sizeof whole.ends[0]) == 0,
        "frames end elsewhere in pieces");
  check(whole.stop == pieces.stop, "splitting stops for another reason in pieces");
  return 0;
}
