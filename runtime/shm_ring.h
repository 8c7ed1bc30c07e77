/* A byte ring in memory two processes map, one writer and one reader, beside a socket that
 * carries what memory cannot: a bell for a side that sleeps, descriptors, the end.
 *
 * Why: a frame through a Unix socket costs a system call on each side and often a wake-up
 * (about 2 us a hop on a 16-core host); through shared memory it is a copy and a store, and a
 * reader that polls sees it at once. Two links use it: acceld to its device workers
 * (backends/worker/ring.h) and local clients to acceld (proto/local_rings.h).
 *
 * Trust: each side keeps its own count of its position (`pos`) and takes the other side's
 * only through a bounds check (rt_ring_avail, rt_ring_room): a peer that writes nonsense into
 * the region gets an error, never a read or write outside the ring.
 *
 * Sleeping: a reader that found nothing for a while sets `reader_sleeps` and then looks at
 * the tail again before it sleeps on the socket; the writer moves the tail and then looks at
 * `reader_sleeps` (all sequentially consistent, so one of the two sees the other's store) and,
 * if set, clears it and sends one byte (rt_ring_wake). The same the other way round for a
 * writer waiting for room (`writer_waits`, the reader's head). */
#ifndef RT_SHM_RING_H
#define RT_SHM_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* One direction's positions, in the shared region; each on a cache line of its own. */
typedef struct rt_ring_ctl {
  _Alignas(64) _Atomic uint64_t tail; /* the writer's: bytes written in all */
  _Atomic uint32_t reader_sleeps;     /* the reader's: it sleeps (or is about to) on the socket */
  /* the writer's, where frames take descriptors: how many it sent on the socket in all, each
   * counted before the frame it goes with is written (the client link's) */
  _Atomic uint32_t passes;
  _Alignas(64) _Atomic uint64_t head; /* the reader's: bytes taken in all */
  _Atomic uint32_t writer_waits;      /* the writer's: it sleeps for room on the socket */
} rt_ring_ctl;

/* One side's view of a direction. */
typedef struct rt_ring {
  rt_ring_ctl *ctl;
  uint8_t *data;
  uint64_t size; /* a power of two */
  uint64_t pos;  /* the writer's tail or the reader's head: this side's own count */
} rt_ring;

#define RT_RING_BELL 'B' /* the byte a bell sends */

/* The writer: bytes that fit now; UINT64_MAX if the reader's head is not one it can have
 * reached (the peer breaks the protocol). */
uint64_t rt_ring_room(const rt_ring *w);
/* Copies n bytes (at most the room) at the writer's position and moves it; the reader sees
 * them once published. */
void rt_ring_put(rt_ring *w, const void *p, uint64_t n);
/* Makes what was put visible (the tail), then rings a reader that sleeps on `fd`; false if
 * the bell could not be sent (the peer is gone). */
bool rt_ring_publish(rt_ring *w, int fd);
/* Makes what was put visible; the caller rings (rt_ring_wake on reader_sleeps) itself, or has
 * another thread do it. */
void rt_ring_commit(rt_ring *w);

/* The reader: bytes there now; UINT64_MAX if the writer's tail is not one it can have
 * reached. */
uint64_t rt_ring_avail(const rt_ring *r);
/* Copies n bytes (at most those there) out and gives their room back (the head). The caller
 * then wakes a writer waiting for room (rt_ring_wake on writer_waits). */
void rt_ring_take(rt_ring *r, void *p, uint64_t n);

/* One byte on the socket for a peer that sleeps; false if the peer is gone. A full socket
 * means bells are waiting there already. */
bool rt_ring_bell(int fd);
/* After this side moved its position: a peer that said it sleeps (*flag) gets one bell (the
 * exchange makes it one per sleep); false if the bell could not be sent. */
bool rt_ring_wake(int fd, _Atomic uint32_t *flag);

#endif
