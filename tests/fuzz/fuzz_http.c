/* libFuzzer target for the request heads of acceld's HTTP endpoint (server/http_parse.c):
 * any bytes, as a client might send them to /metrics, cut into arbitrary reads.
 *   - Where the head ends (http_head_end) found read by read, each call resuming where the
 *     last one stopped as the endpoint's connection does, must be exactly where it ends when
 *     the whole input is scanned at once, whatever the cuts (a terminator may straddle reads).
 *   - A whole head parses to 0, 400 or 505; a GET or HEAD parsed to 0 has a path inside the
 *     head (or "/" for an absolute-form target with no path), starting with '/', with no
 *     '?', no space, no control byte and nothing past ASCII.
 * The first input byte chooses the read sizes. Linked with replay.c it is a plain program
 * that runs the seed corpus through the target. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_priv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_http: %s\n", what);
    abort();
  }
}

/* The end of the head as found read by read, reads of 1 to `step` bytes (varying). */
static size_t end_by_reads(const char *buf, size_t len, unsigned step) {
  size_t have = 0, scanned = 0;
  unsigned k = 0;
  while (have < len) {
    size_t n = 1 + (k++ * 7 + step) % step;
    have = have + n < len ? have + n : len;
    size_t end = http_head_end(buf, have, scanned);
    if (end != 0)
      return end;
    scanned = have;
  }
  return 0;
}

static void check_parse(const char *head, size_t len) {
  http_request req;
  int rc = http_request_parse(head, len, &req);
  check(rc == 0 || rc == 400 || rc == 505, "a status other than 0, 400 or 505");
  if (rc != 0 || req.method == HTTP_OTHER) /* another method gets 405 whatever its target */
    return;
  check(req.method == HTTP_GET || req.method == HTTP_HEAD, "an unknown method");
  check(req.path != NULL && req.path_len > 0 && req.path[0] == '/',
        "a path that does not start with '/'");
  bool inside = req.path >= head && req.path_len <= len &&
                (size_t)(req.path - head) <= len - req.path_len;
  check(inside || req.path_len == 1, "the path lies outside the head"); /* or http://host: / */
  for (size_t i = 0; i < req.path_len; i++)
    check(req.path[i] != '?' && (unsigned char)req.path[i] > ' ' &&
              (unsigned char)req.path[i] < 0x7f,
          "a query, a space or a control byte in the path");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  unsigned step = 1 + data[0] % 64;
  char *buf = malloc(size - 1 ? size - 1 : 1); /* exact size: a read past the end is caught */
  check(buf != NULL, "out of memory");
  memcpy(buf, data + 1, size - 1);
  size_t whole = http_head_end(buf, size - 1, 0);
  check(whole <= size - 1, "an end past the input");
  check(end_by_reads(buf, size - 1, step) == whole, "reads found another end than the whole");
  if (whole != 0)
    check_parse(buf, whole);
  free(buf);
  return 0;
}
