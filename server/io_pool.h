/* A pool of I/O threads that do the system calls of stream sockets for the loop thread.
 *
 * Why: acceld's loop thread runs every client's protocol, sessions and devices; reading and
 * writing the clients' sockets cost it more than all of that (two thirds of its time with 8
 * clients doing tiny ops: the kernel's work of waking each peer). Here a socket's reads,
 * writes, descriptor receipt and close run on one of the pool's threads, each with its own
 * libuv loop; the loop thread only copies bytes out of a ring and hands messages over, and
 * hears of many sockets' progress in one wake-up. The protocol's decisions (framing, flow
 * control, limits, timers) stay on the loop thread, unchanged.
 *
 * A stream's bytes: its thread reads ahead into the stream's ring (SRV_IOST_RING bytes)
 * whenever there is room, whether or not the loop wants them; the loop takes them with
 * srv_iost_read. So a paused connection holds at most the ring beyond its own buffers, and
 * the kernel's socket buffer stops the peer as before. Descriptors (SCM_RIGHTS) are queued in
 * the order they came, before the bytes they came with are visible; the thread reads no
 * further while SRV_IOST_FDS_AHEAD of them wait, until the loop takes one.
 *
 * Threads: everything here is called on the loop thread (the one srv_iopool_start was given),
 * except srv_iost_write_early, and every callback runs there. */
#ifndef SRV_IO_POOL_H
#define SRV_IO_POOL_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "accel/runtime.h"
#include "runtime/attr.h"

#define SRV_IOPOOL_THREADS_MAX 64
#define SRV_IOPOOL_MIN_CORES 8    /* below: no threads by default (srv_iopool_default_threads) */
#define SRV_IOST_RING (64u << 10) /* bytes read ahead per stream */
#define SRV_IOST_FDS_MAX 64       /* descriptors queued per stream; past it: UV_EPROTO */
#define SRV_IOST_FDS_AHEAD 16     /* no reading ahead while this many descriptors wait */

typedef struct srv_iopool srv_iopool;
typedef struct srv_iost srv_iost;

typedef struct srv_iost_ops {
  /* Bytes (or the stream's end) can be read; called while the loop wants them. */
  void (*readable)(srv_iost *st, void *data);
  /* A message given to srv_iost_write was written whole (status 0), or not (an error, or
   * UV_ECANCELED at close); `m` goes back to the caller. In the order they were given. */
  void (*written)(srv_iost *st, void *data, nng_msg *m, int status);
  /* After srv_iost_close: the socket and its queued descriptors are closed, every write
   * reported; the stream is freed after this returns. */
  void (*closed)(void *data);
} srv_iost_ops;

/* `threads` (up to SRV_IOPOOL_THREADS_MAX) threads reporting to `loop`; 0 or an accel error.
 * With 0 the streams are served on `loop` itself, through the same hand-offs (no thread to
 * wake: on few cores the wake-ups cost more than the system calls they move). */
RT_MUST_USE int srv_iopool_start(srv_iopool **io, uv_loop_t *loop, uint32_t threads);
/* Every stream must have closed. Joins the threads; the pool is freed once its handle on the
 * loop has closed (a later loop iteration). */
void srv_iopool_stop(srv_iopool *io);
/* Events reach the loop as tasks posted to rt's loop `loop` (the index of the loop the pool
 * was started on), which cost no eventfd write or read while that loop spins. Right after
 * srv_iopool_start; nothing changes for a pool without threads. */
void srv_iopool_post_through(srv_iopool *io, accel_runtime *rt, uint32_t loop);
uint32_t srv_iopool_threads(const srv_iopool *io);
/* The default thread count for this machine: none below SRV_IOPOOL_MIN_CORES cores, else an
 * eighth of them, at most 8. */
uint32_t srv_iopool_default_threads(void);

/* A stream's memory (its ring, its first write queue), before it has a socket: taken before
 * a connection is, so that no memory is needed once it is. NULL when out of memory. */
RT_MUST_USE srv_iost *srv_iost_new(void);
/* Frees a stream that was never started. */
void srv_iost_discard(srv_iost *st);
/* Serves fd (connected, non-blocking; the stream owns it from here) on the pool's next
 * thread. */
void srv_iost_start(srv_iost *st, srv_iopool *io, int fd, const srv_iost_ops *ops, void *data);
int srv_iost_fd(const srv_iost *st);
/* Whether `readable` is called when bytes are there; turning it on with bytes (or the end)
 * already there calls it from a later callback of the loop. */
void srv_iost_want_read(srv_iost *st, bool on);
/* Copies up to cap buffered bytes to buf: their count, 0 if none is there now, or, once
 * every byte was taken, the stream's end: UV_EOF, UV_EPROTO (descriptors past
 * SRV_IOST_FDS_MAX, or cut short), UV_EINVAL (on rings: a position the client cannot have
 * written) or a read error. */
RT_MUST_USE ssize_t srv_iost_read(srv_iost *st, void *buf, size_t cap);
/* `readable` again from a later callback (a reader that stopped with bytes left, so that
 * other streams get a turn). */
void srv_iost_read_later(srv_iost *st);
/* Bytes read ahead and not taken yet. */
size_t srv_iost_buffered(const srv_iost *st);
/* Descriptors received and not taken (also read by the stream's thread, under its mutex), and
 * the first of them (-1 if none). */
uint32_t srv_iost_fds_pending(srv_iost *st);
RT_MUST_USE int srv_iost_take_fd(srv_iost *st);
/* Writes the bytes of m from `off` on. 1: written whole at once, on this thread (while the
 * loop is not busy and nothing of the stream's waits: a hand-off costs a wake-up); m not
 * taken, no `written` follows. 0: queued for the stream's thread, `written` reports it. Or,
 * m not taken: ACCEL_ENOMEM, ACCEL_ECLOSED (closing) or ACCEL_ESYS (the socket failed: the
 * peer is gone). */
RT_MUST_USE int srv_iost_write(srv_iost *st, nng_msg *m, size_t off);
/* The stream's frames come and go through the shared rings mapped at `base` (PROTO_RINGS_BYTES,
 * proto/local_rings.h; the stream unmaps it when freed), the socket carrying bells,
 * descriptors and the end: reads from now on (the client writes nothing until it is told),
 * writes after the next one, the reply that tells the client, which goes on the socket at once
 * (the stream fails if the socket cannot take it whole). False (nothing changed) on a stream
 * served on the loop itself (no thread polls there), closing, or with writes queued. */
RT_MUST_USE bool srv_iost_use_rings(srv_iost *st, uint8_t *base);
/* Bytes the peer sent that the stream has not read yet (in the socket, or in its ring). */
size_t srv_iost_unread(srv_iost *st);
/* Bytes queued to write and not written yet. */
size_t srv_iost_write_pending(srv_iost *st);
/* Whether replies go into the client's shared ring (from the WELCOME on). */
bool srv_iost_writes_to_ring(const srv_iost *st);
/* Keeps the stream's memory (not its socket) until srv_iost_release: a stream whose `closed`
 * was called is freed at the last release. For a writer on another thread (srv_iost_write_early).
 * Loop thread. */
void srv_iost_hold(srv_iost *st);
void srv_iost_release(srv_iost *st);
/* From any thread, while a hold is kept (the one exception to "loop thread only"): a whole
 * small frame into the client's shared ring now, where the stream is on rings, nothing of
 * its waits to be written, the ring has room and no other thread holds the stream's lock; a
 * client asleep is rung by the stream's thread. `*count` goes up by one before the client can
 * see the frame. 1: written; 0: not (the caller sends it the usual way). */
RT_MUST_USE int srv_iost_write_early(srv_iost *st, const void *bytes, size_t len,
                                     _Atomic uint32_t *count);
/* Closes the stream: no more `readable`; queued writes end UV_ECANCELED; `closed` follows. */
void srv_iost_close(srv_iost *st);

#endif
