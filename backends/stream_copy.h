/* Copies of large host buffers that bypass the CPU's caches on the way out (non-temporal
 * stores), for staging copies between caller memory and pinned memory that a DMA engine reads
 * or wrote (backends/cuda/stage.c).
 *
 * Why. A plain store to a line not in the cache first reads the line (the read for ownership),
 * so memcpy of a buffer larger than the caches moves three bytes through memory per byte
 * copied: read the source, read the destination, write it back. Streaming stores write whole
 * lines without reading them: two. glibc's memcpy switches to them only above a threshold of
 * its own (a fraction of the shared cache per copy), which the parts a team of copy threads
 * works on (an 8 MiB chunk split 12 ways) stay below. */
#ifndef BACKENDS_STREAM_COPY_H
#define BACKENDS_STREAM_COPY_H

#include <stddef.h>

/* memcpy's contract (no overlap), with streaming stores where the CPU has them (x86-64: SSE2,
 * which every x86-64 CPU has) and memcpy elsewhere. The stores are fenced before it returns:
 * a store that follows (a flag the DMA engine polls) is seen after the data. */
void stream_copy(void *dst, const void *src, size_t bytes);

#endif
