/* The stream links' sending (clients/remote.h, sendq_*; ipc:// and tcp://): frames gathered
 * while others are in flight, written by a thread of the link's own.
 *
 * Why: one send(2) per frame costs the sender the kernel's whole path, the receiver's wake-up
 * included; over loopback TCP a client that pipelines tiny ops moved 82 kops/s against 190
 * over ipc:// on the 2-vCPU VM (nng's link, one message in flight and the frames sent
 * meanwhile gathered into the next, had moved them at 0.6-1.1x ipc://), and ipc:// itself
 * moved 0.28x what the same ops move embedded.
 *
 * How: a frame sent while no other op of the connection is unanswered and nothing is being
 * written goes out at once, on the caller's thread (an op and a wait for it costs no thread
 * hop). Otherwise it is appended to the queue and the writer thread writes the queue whole,
 * as often as it can; frames sent meanwhile gather behind. Order is the order of the calls:
 * nothing is written directly while the queue holds frames or a write is in progress, and a
 * large write's bytes (send_gather, taken from the caller's memory) wait for the queue to
 * drain, as does a frame with a descriptor (send_fd). At most SENDQ_MAX bytes queue; a sender past
 * it waits for room. A write that fails shuts the socket down, which the receiver reports as the
 * connection's end. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "clients/remote.h"
#include "runtime/alloc.h"

#define SENDQ_MAX ((size_t)1 << 20) /* bytes queued before senders wait */

struct send_queue {
  pthread_mutex_t mu;
  pthread_cond_t work;    /* the writer: frames queued, or stop */
  pthread_cond_t drained; /* senders: a write ended, room in the queue, or failure */
  uint8_t *buf, *spare;   /* the queue; the writer's buffer while it writes */
  size_t len, cap, spare_cap;
  bool writing; /* the writer or a direct sender is in a write */
  bool failed;  /* a write failed: every later send is ACCEL_ECLOSED */
  bool stop;
  uint32_t after_waiting; /* senders waiting to write after the queue: the queue takes no
                           * more until they have (else a pipelining thread starves them) */
  bool has_thread;
  pthread_t thread;
};

/* The link's bytes: the shared ring once the daemon took it, else the socket. */
static int stream_write(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                        size_t tail_len, int fd_pass) {
  if (r->rings)
    return rings_write(r, head, head_len, tail, tail_len, fd_pass);
  return tail_len > 0 ? proto_local_send_gather(r->fd, head, head_len, tail, tail_len)
                      : proto_local_send(r->fd, head, head_len, fd_pass);
}

/* Under mu. */
static void fail(remote *r, send_queue *o) {
  if (!o->failed)
    shutdown(r->fd, SHUT_RDWR); /* the receiver sees the end and fails what is pending */
  o->failed = true;
  pthread_cond_broadcast(&o->drained);
}

/* Under mu: a write of the caller's ends. */
static void write_done(remote *r, send_queue *o, int rc) {
  o->writing = false;
  if (rc != 0)
    fail(r, o);
  if (o->len > 0)
    pthread_cond_signal(&o->work);
  pthread_cond_broadcast(&o->drained);
}

static void *writer_main(void *arg) {
  remote *r = arg;
  send_queue *o = r->sendq;
  pthread_setname_np(pthread_self(), "accel-send"); /* seen in top -H, gdb, perf */
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
    int rc = stream_write(r, b, len, NULL, 0, -1);
    pthread_mutex_lock(&o->mu);
    write_done(r, o, rc);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

int sendq_start(remote *r) {
  send_queue *o = rt_calloc(1, sizeof *o);
  if (o == NULL)
    return ACCEL_ENOMEM;
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->work, NULL);
  pthread_cond_init(&o->drained, NULL);
  r->sendq = o;
  o->has_thread = pthread_create(&o->thread, NULL, writer_main, r) == 0;
  return o->has_thread ? 0 : ACCEL_ENOMEM; /* the close and remote_free free it */
}

void sendq_stop(remote *r) {
  send_queue *o = r->sendq;
  if (o == NULL)
    return;
  pthread_mutex_lock(&o->mu);
  o->stop = true;
  fail(r, o); /* senders waiting for room or for the queue give up; later ones too */
  pthread_cond_signal(&o->work);
  while (o->writing) /* one on a caller's thread: the descriptor stays ours until it is done */
    pthread_cond_wait(&o->drained, &o->mu);
  pthread_mutex_unlock(&o->mu);
  if (o->has_thread) { /* one blocked in send(2) left when the caller shut the socket down */
    pthread_join(o->thread, NULL);
    o->has_thread = false;
  }
}

void sendq_free(remote *r) {
  send_queue *o = r->sendq;
  if (o == NULL)
    return;
  pthread_cond_destroy(&o->work);
  pthread_cond_destroy(&o->drained);
  pthread_mutex_destroy(&o->mu);
  rt_free(o->buf);
  rt_free(o->spare);
  rt_free(o);
  r->sendq = NULL;
}

/* Under mu: room for n more bytes in the queue (it grows up to SENDQ_MAX, or to one frame
 * larger than that). */
static bool reserve(send_queue *o, size_t n) {
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

static int send_after_the_queue(remote *r, const uint8_t *head, size_t head_len,
                                const uint8_t *tail, size_t tail_len, int fd_pass);

int sendq_send(remote *r, const uint8_t *bytes, size_t len) {
  send_queue *o = r->sendq;
  if (len > SENDQ_MAX) /* a module's code, say: not copied, and the queue stays small */
    return send_after_the_queue(r, bytes, len, NULL, 0, -1);
  /* Into a ring a write is a copy: nothing to gather for (a frame waits only while another
   * is being written). */
  bool alone = r->rings || !remote_others_in_flight(r);
  pthread_mutex_lock(&o->mu);
  while (!o->failed && o->after_waiting > 0) /* they came first */
    pthread_cond_wait(&o->drained, &o->mu);
  if (!o->failed && alone && !o->writing && o->len == 0) {
    o->writing = true; /* an op alone: out at once, on this thread */
    pthread_mutex_unlock(&o->mu);
    int rc = stream_write(r, bytes, len, NULL, 0, -1);
    pthread_mutex_lock(&o->mu);
    write_done(r, o, rc);
    pthread_mutex_unlock(&o->mu);
    return rc;
  }
  while (!o->failed && o->len > 0 && o->len + len > SENDQ_MAX)
    pthread_cond_wait(&o->drained, &o->mu);
  int rc = o->failed ? ACCEL_ECLOSED : reserve(o, len) ? 0 : ACCEL_ENOMEM;
  if (rc == 0) {
    memcpy(o->buf + o->len, bytes, len);
    o->len += len;
    if (!o->writing)
      pthread_cond_signal(&o->work);
  }
  pthread_mutex_unlock(&o->mu);
  return rc;
}

/* Waits until what was sent before is out, then writes on this thread: frames whose bytes are
 * not copied (a large write's, taken from the caller; any frame past SENDQ_MAX) or that carry
 * a descriptor. */
static int send_after_the_queue(remote *r, const uint8_t *head, size_t head_len,
                                const uint8_t *tail, size_t tail_len, int fd_pass) {
  send_queue *o = r->sendq;
  pthread_mutex_lock(&o->mu);
  o->after_waiting++;
  while (!o->failed && (o->writing || o->len > 0))
    pthread_cond_wait(&o->drained, &o->mu);
  o->after_waiting--;
  if (o->failed) {
    pthread_cond_broadcast(&o->drained); /* senders held back for this one */
    pthread_mutex_unlock(&o->mu);
    return ACCEL_ECLOSED;
  }
  o->writing = true;
  pthread_mutex_unlock(&o->mu);
  int rc = stream_write(r, head, head_len, tail, tail_len, fd_pass);
  pthread_mutex_lock(&o->mu);
  write_done(r, o, rc);
  pthread_mutex_unlock(&o->mu);
  return rc;
}

int sendq_send_gather(remote *r, const uint8_t *head, size_t head_len, const uint8_t *tail,
                      size_t tail_len) {
  return send_after_the_queue(r, head, head_len, tail, tail_len, -1);
}

int sendq_send_fd(remote *r, const uint8_t *bytes, size_t len, int fd) {
  return send_after_the_queue(r, bytes, len, NULL, 0, fd);
}
