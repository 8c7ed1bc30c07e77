/* Frames in a byte stream (proto/stream.h). */
#include "proto/stream.h"

#include "proto/wire.h"

static uint64_t le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

proto_scan proto_stream_scan(const uint8_t *p, size_t len, uint64_t max_frame, size_t *frame_len,
                             uint64_t *request_id) {
  *frame_len = 0;
  *request_id = 0;
  if (len < PROTO_HEADER_SIZE)
    return PROTO_SCAN_SHORT;
  if (le(p, 4) != PROTO_MAGIC)
    return PROTO_SCAN_FOREIGN;
  uint64_t total = PROTO_HEADER_SIZE + le(p + 12, 4);
  *request_id = le(p + 16, 8);
  if (total > max_frame)
    return PROTO_SCAN_TOO_BIG;
  *frame_len = (size_t)total;
  return PROTO_SCAN_FRAME;
}
