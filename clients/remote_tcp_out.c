/* The tcp link's sending (clients/remote.h, tcp_out_*): frames gathered while others are in
 * flight, written by a thread of the link's own.
 *
 * Why: over loopback TCP one send(2) per frame costs the sender the whole TCP path, the
 * receiver's side included; a client that pipelines tiny ops moved 82 kops/s over tcp://
 * against 190 over ipc:// on the 2-vCPU VM, where nng's link (one message in flight, the
 * frames sent meanwhile gathered into the next) had moved them at 0.6-1.1x ipc://.
 *
 * How: a frame sent while no other op of the connection is unanswered and nothing is being
 * written goes out at once, on the caller's thread (an op and a wait for it costs no thread
 * hop). Otherwise it is appended to the queue and the writer thread writes the queue whole,
 * as often as it can; frames sent meanwhile gather behind. Order is the order of the calls:
 * nothing is written directly while the queue holds frames or a write is in progress, and a
 * large write's bytes (send_gather, taken from the caller's memory) wait for the queue to
 * drain. At most TCP_OUT_MAX bytes queue; a sender past it waits for room. A write that fails
 * shuts the socket down, which the receiver reports as the connection's end. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "clients/remote.h"
#include "runtime/alloc.h"

#define TCP_OUT_MAX ((size_t)1 << 20) /* bytes queued before senders wait */

struct tcp_out {
  pthread_mutex_t mu;
  pthread_cond_t work;    /* the writer: frames queued, or stop */
  pthread_cond_t drained; /* senders: a write ended, room in the queue, or failure */
  uint8_t *buf, *spare;   /* the queue; the writer's buffer while it writes */
  size_t len, cap, spare_cap;
  bool writing; /* the writer or a direct sender is in a write */
  bool failed;  /* a write failed: every later send is ACCEL_ECLOSED */
  bool stop;
  uint32_t inside; /* senders in a call here: stop waits for them to leave */
  bool has_thread;
  pthread_t thread;
};

/* Under mu. */
static void fail(remote *r, tcp_out *o) {
  if (!o->failed)
    shutdown(r->fd, SHUT_RDWR); /* the receiver sees the end and fails what is pending */
  o->failed = true;
  pthread_cond_broadcast(&o->drained);
}

/* Under mu: a write of the caller's ends. */
static void write_done(remote *r, tcp_out *o, int rc) {
  o->writing = false;
  if (rc != 0)
    fail(r, o);
  if (o->len > 0)
    pthread_cond_signal(&o->work);
  pthread_cond_broadcast(&o->drained);
}

static void *writer_main(void *arg) {
  remote *r = arg;
  tcp_out *o = r->out;
  pthread_mutex_lock(&o->mu);
  for (;;) {
    while (!o->stop && (o->len == 0 || o->writing || o->failed))
      pthread_cond_wait(&o->work, &o->mu);
    if (o->stop)
      break;
    uint8_t *b = o->buf; /* swapped: senders append to the other buffer meanwhile */
    size_t len = o->len, cap = o->cap;
    o->buf = o->spare;
    o->cap = o->spare_cap;
    o->len = 0;
    o->spare = b;
    o->spare_cap = cap;
    o->writing = true;
    pthread_cond_broadcast(&o->drained); /* room again */
    pthread_mutex_unlock(&o->mu);
    int rc = proto_local_send(r->fd, b, len, -1);
    pthread_mutex_lock(&o->mu);
    write_done(r, o, rc);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

int tcp_out_start(remote *r) {
  tcp_out *o = rt_calloc(1, sizeof *o);
  if (o == NULL)
    return ACCEL_ENOMEM;
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->work, NULL);
  pthread_cond_init(&o->drained, NULL);
  r->out = o;
  o->has_thread = pthread_create(&o->thread, NULL, writer_main, r) == 0;
  if (!o->has_thread) {
    tcp_out_stop(r);
    return ACCEL_ENOMEM;
  }
  return 0;
}

void tcp_out_stop(remote *r) {
  tcp_out *o = r->out;
  if (o == NULL)
    return;
  pthread_mutex_lock(&o->mu);
  o->stop = true;
  fail(r, o); /* senders waiting for room or for the queue give up */
  pthread_cond_signal(&o->work);
  while (o->inside > 0) /* one in send(2) left when the caller shut the socket down */
    pthread_cond_wait(&o->drained, &o->mu);
  pthread_mutex_unlock(&o->mu);
  if (o->has_thread) /* one blocked in send(2) left when the caller shut the socket down */
    pthread_join(o->thread, NULL);
  pthread_cond_destroy(&o->work);
  pthread_cond_destroy(&o->drained);
  pthread_mutex_destroy(&o->mu);
  rt_free(o->buf);
  rt_free(o->spare);
  rt_free(o);
  r->out = NULL;
}

/* Under mu: room for n more bytes in the queue (it grows up to TCP_OUT_MAX, or to one frame
 * larger than that). */
static bool reserve(tcp_out *o, size_t n) {
  if (o->len + n <= o->cap)
    return true;
  size_t cap = o->cap ? o->cap : 16u << 10;
  while (cap < o->len + n)
    cap *= 2;
  uint8_t *p = rt_realloc(o->buf, cap);
  if (p == NULL)
    return false;
  o->buf = p;
  o->cap = cap;
  return true;
}

/* Under mu: a sender enters, and leaves with rc. */
static void enter(tcp_out *o) {
  o->inside++;
}

static int leave(tcp_out *o, int rc) {
  if (--o->inside == 0 && o->stop)
    pthread_cond_broadcast(&o->drained);
  pthread_mutex_unlock(&o->mu);
  return rc;
}

int tcp_out_send(remote *r, const uint8_t *bytes, size_t len) {
  tcp_out *o = r->out;
  bool alone = !remote_others_in_flight(r);
  pthread_mutex_lock(&o->mu);
  enter(o);
  if (!o->failed && alone && !o->writing && o->len == 0) {
    o->writing = true; /* an op alone: out at once, on this thread */
    pthread_mutex_unlock(&o->mu);
    int rc = proto_local_send(r->fd, bytes, len, -1);
    pthread_mutex_lock(&o->mu);
    write_done(r, o, rc);
    return leave(o, rc);
  }
  while (!o->failed && o->len > 0 && o->len + len > TCP_OUT_MAX)
    pthread_cond_wait(&o->drained, &o->mu);
  int rc = o->failed ? ACCEL_ECLOSED : reserve(o, len) ? 0 : ACCEL_ENOMEM;
  if (rc == 0) {
    memcpy(o->buf + o->len, bytes, len);
    o->len += len;
    if (!o->writing)
      pthread_cond_signal(&o->work);
  }
  return leave(o, rc);
}

int tcp_out_send_gather(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                        size_t tail_len) {
  tcp_out *o = r->out;
  pthread_mutex_lock(&o->mu);
  enter(o);
  while (!o->failed && (o->writing || o->len > 0)) /* what was sent before goes first */
    pthread_cond_wait(&o->drained, &o->mu);
  if (o->failed)
    return leave(o, ACCEL_ECLOSED);
  o->writing = true;
  pthread_mutex_unlock(&o->mu);
  int rc = proto_local_send_gather(r->fd, head, head_len, tail, tail_len);
  pthread_mutex_lock(&o->mu);
  write_done(r, o, rc);
  return leave(o, rc);
}
