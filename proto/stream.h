/* Frames in a byte stream (the local transport): where the next one starts and ends. Both
 * the daemon (server/server_local.c) and clients (proto/local.c) split a stream with it; it is
 * fuzzed (tests/fuzz/fuzz_stream.c). Pure, no allocation. */
#ifndef PROTO_STREAM_H
#define PROTO_STREAM_H

#include <stddef.h>
#include <stdint.h>

typedef enum proto_scan {
  PROTO_SCAN_SHORT,   /* fewer bytes than a header: wait for more */
  PROTO_SCAN_FRAME,   /* a header of ours: the frame is *frame_len bytes (perhaps more than
                         are here yet) */
  PROTO_SCAN_FOREIGN, /* not a frame of ours (magic): the stream cannot be resynchronised */
  PROTO_SCAN_TOO_BIG, /* our magic, but the frame would exceed max_frame (*request_id says
                         whose) */
} proto_scan;

/* Looks at the `len` bytes at p, the start of the next frame. */
proto_scan proto_stream_scan(const uint8_t *p, size_t len, uint64_t max_frame, size_t *frame_len,
                             uint64_t *request_id);

#endif
