/* Streaming-store copies (stream_copy.h). */
#include "backends/stream_copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>

#define LINE 64u

void stream_copy(void *dst, const void *src, size_t bytes) {
  char *d = dst;
  const char *s = src;
  size_t head = (LINE - ((uintptr_t)d & (LINE - 1))) & (LINE - 1); /* to the destination's line */
  if (bytes < 2 * LINE) {
    memcpy(d, s, bytes);
    return;
  }
  memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= LINE; bytes -= LINE, d += LINE, s += LINE) {
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
    _mm_stream_si128((__m128i *)(void *)d, a);
    _mm_stream_si128((__m128i *)(void *)(d + 16), b);
    _mm_stream_si128((__m128i *)(void *)(d + 32), c);
    _mm_stream_si128((__m128i *)(void *)(d + 48), e);
  }
  _mm_sfence(); /* streaming stores are weakly ordered: drained before what follows */
  memcpy(d, s, bytes);
}

#else

void stream_copy(void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
}

#endif
