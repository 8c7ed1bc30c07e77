/* Commands to a device worker gathered per loop iteration (proxy.h bw_cork).
 *
 * acceld's loop thread dispatches a few ops to a worker in each iteration of its loop under
 * load (a fill per client, then the completion's notify), and wrote each as a frame of its own:
 * one sendmsg per command, on the thread every session waits for. Frames a loop thread sends
 * without waiting for a reply are now copied into the link's cork, and the cork is written in
 * one system call before the loop next polls (runtime/defer.h). Everything else writes
 * through: a call (its thread waits for the reply, so its frame cannot wait for a loop's
 * iteration to end; the loop thread itself may be the caller), a frame with a descriptor, a
 * frame from another thread, a frame too big to copy. Each first flushes the cork under
 * send_mu, so the worker reads the frames in the order they were sent. And a thread about to
 * wait for the worker (staging pages, an event, host functions) flushes first (bw_link_flush):
 * the frames it waits on may sit in the cork of the loop it runs on. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "backends/worker/proxy.h"

/* Frames bigger than this go straight out (a module's code: the copy would cost more than the
 * call saved). A cork of CORK_FRAMES frames or CORK_MAX bytes is written at once: in a long
 * iteration (a client's 256 pipelined ops) the worker would otherwise idle until its end,
 * where before it ran each command while the loop planned the next. */
#define CORK_FRAME_MAX ((size_t)4 << 10)
#define CORK_MAX ((size_t)16 << 10)
#define CORK_FRAMES 16

/* A write to the worker failed: frames already reported sent are lost, and the stream may
 * end mid-frame. The worker is ended, and the reader, seeing its note channel end, fails
 * everything pending with ACCEL_EDEVLOST (a link with no process behind it too). */
void bw_link_fail(bw_link *l) {
  bw_link_kill(l);
  if (l->note.fd >= 0)
    bw_chan_shutdown(&l->note, SHUT_RD);
  /* Now, not when the reader sees the end: the call whose write failed answers
   * ACCEL_EDEVLOST, and the device's status asked right after must say so as well. */
  pthread_mutex_lock(&l->mu);
  bw_link_mark_dead(l);
  pthread_mutex_unlock(&l->mu);
}

/* send_mu held. Writes what the cork holds; false if the worker is gone. */
bool bw_cork_flush(bw_link *l) {
  bw_cork *k = &l->cork;
  if (k->len == 0)
    return true;
  size_t len = k->len;
  k->len = 0;
  k->frames = 0;
  return !__atomic_load_n(&l->dead, __ATOMIC_RELAXED) && bw_send_bytes(&l->cmd, k->buf, len);
}

/* The end of the loop's iteration. A write that fails lost commands the worker's state
 * depended on: the worker is ended, and its end fails everything pending (ACCEL_EDEVLOST),
 * as if it had died with the commands in its socket. */
static void run_flush(rt_deferred *d) {
  bw_link *l = (void *)((char *)d - offsetof(bw_link, cork.job));
  pthread_mutex_lock(&l->send_mu);
  l->cork.queued = false;
  bool ok = l->cork.off || bw_cork_flush(l);
  if (!ok)
    bw_link_fail(l); /* under send_mu: the link cannot be closing (`off` is not set) */
  pthread_mutex_unlock(&l->send_mu);
  bw_link_release(l);
}

void bw_link_flush(bw_link *l) {
  pthread_mutex_lock(&l->send_mu);
  if (!l->cork.off && !bw_cork_flush(l))
    bw_link_fail(l);
  pthread_mutex_unlock(&l->send_mu);
}

/* send_mu held. Room for `need` more bytes; false if there is none to be had. */
static bool cork_room(bw_cork *k, size_t need) {
  if (k->cap - k->len >= need)
    return true;
  size_t cap = k->cap ? k->cap : CORK_FRAME_MAX;
  while (cap - k->len < need)
    cap *= 2;
  uint8_t *buf = realloc(k->buf, cap);
  if (buf == NULL)
    return false;
  k->buf = buf;
  k->cap = cap;
  return true;
}

/* send_mu held. Copies the frame into the cork, to go out at the end of the calling loop
 * thread's iteration; false (nothing kept) when it must be written now: a link through rings
 * (a frame there costs a copy, not a system call: the worker may start on it at once), not a
 * loop thread, a big frame, a full cork, no memory, or the link closing. */
bool bw_cork_frame(bw_link *l, uint16_t type, uint64_t tag, const void *a, size_t alen,
                   const void *b, size_t blen, const void *c, size_t clen) {
  bw_cork *k = &l->cork;
  size_t need = bw_frame_len(alen, blen, clen);
  if (k->off || l->cmd.ring.ctl != NULL || need > CORK_FRAME_MAX || k->len + need > CORK_MAX ||
      k->frames >= CORK_FRAMES || !rt_defer_here() || !cork_room(k, need))
    return false;
  if (!k->queued) {
    k->job.run = run_flush;
    (void)rt_defer_before_poll(&k->job); /* rt_defer_here said yes, on this thread */
    bw_link_hold(l);                     /* the memory stays until the flush ran */
    k->queued = true;
  }
  bw_frame_put(k->buf + k->len, type, tag, a, alen, b, blen, c, clen);
  k->len += need;
  k->frames++;
  return true;
}

/* The link closes: what the cork holds goes out now, later frames go straight out. A queued
 * flush finds nothing and lets the link's memory go. */
void bw_cork_close(bw_link *l) {
  pthread_mutex_lock(&l->send_mu);
  (void)bw_cork_flush(l);
  l->cork.off = true;
  pthread_mutex_unlock(&l->send_mu);
}

void bw_cork_free(bw_link *l) {
  free(l->cork.buf);
  l->cork.buf = NULL;
  l->cork.len = l->cork.cap = 0;
}
