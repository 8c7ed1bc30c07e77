/* The I/O threads of server/io_pool.h. Two hand-offs, each a flag word and an intrusive list:
 * the loop posts commands to a stream's thread (open, write, read again, close), a thread
 * posts events to the loop (bytes, writes done, closed). A stream is in at most one list of
 * each kind at a time: it is pushed when its flag word goes from 0 to non-zero, and the taker
 * reads its link before clearing the word. Bytes cross in a ring with one writer (the
 * thread) and one reader (the loop); writes cross in a queue under the stream's mutex, the
 * messages' bytes written from outside it (the loop frees a message only once it is
 * reported). */
#include "server/io_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "accel/runtime.h"
#include "proto/local_rings.h"
#include "runtime/alloc.h"
#include "runtime/shm_ring.h"
#include "runtime/spin.h"

enum { CMD_OPEN = 1, CMD_WRITE = 2, CMD_READ = 4, CMD_CLOSE = 8, CMD_RINGS = 16, CMD_BELL = 32 };
enum { EV_READ = 1, EV_WROTE = 2, EV_CLOSED = 4 };

#define IOV_MAX_GATHER 64
#define FDS_PER_READ 16

typedef struct io_thread {
  srv_iopool *io;
  uv_loop_t own;
  uv_loop_t *loop; /* &own, or the pool's loop when it has no threads */
  uv_async_t wake;
  uv_thread_t tid;
  pthread_mutex_t mu; /* inbox, stop */
  srv_iost *inbox;    /* streams with commands, through cmd_next */
  bool stop;
  /* A command wakes the thread (`wake`) only while it may sleep: awake, it polls has_inbox as
   * it spins. The thread sets `sleeps` and then looks at has_inbox; a poster sets has_inbox
   * and then looks at `sleeps` (both sequentially consistent): one of them sees the other.
   * Always true for a thread that never spins, and for a pool on the loop. */
  _Atomic bool sleeps, has_inbox;
  uint64_t work;    /* callbacks run on the thread: what its spin watches */
  uint64_t spin_ns; /* how long it polls after its last work before it sleeps */
  srv_iost *rings;  /* its streams on shared rings, through ring_next: polled while it spins */
} io_thread;

struct srv_iopool {
  uv_async_t wake; /* first: the handle's data is the pool */
  uv_loop_t *loop;
  pthread_mutex_t mu;           /* inbox */
  srv_iost *inbox, *inbox_tail; /* streams with events, through ev_next */
  io_thread *threads;
  uint32_t nthreads, next, started;
  bool on_loop;     /* no threads: streams are served on the loop itself */
  bool drain_due;   /* on_loop: events posted by a stream's side, handled as its callback ends */
  int handles;      /* handles of the pool on `loop` not closed yet */
  uint32_t streams; /* open, not reported closed */
  bool busy;        /* the last wake-up reported more than one stream */
  /* srv_iopool_post_through: events reach the loop as a task posted to the runtime, which
   * writes its eventfd only while the loop may sleep (a spinning loop finds the task in its
   * next turn), instead of through `wake`, whose eventfd every post writes and the loop reads */
  accel_runtime *rt;
  uint32_t rt_loop; /* the index of the loop the pool was started on (its server's shard) */
  accel_task task;
  bool task_posted;   /* under mu: task is on its way; later events join it */
  bool freed_by_task; /* every handle closed while the task was on its way: it frees the pool */
};

typedef struct wq_item {
  nng_msg *m;
  size_t off; /* the next byte to write */
  int status; /* once done */
} wq_item;

struct srv_iost {
  srv_iopool *io;
  io_thread *t;
  int fd;
  const srv_iost_ops *ops;
  void *data;
  uint8_t *ring;
  _Atomic size_t head, tail; /* bytes taken by the loop, put by the thread (both only grow) */
  _Atomic int end;           /* set by the thread after the last bytes it put */
  _Atomic bool stalled;      /* the thread stopped reading: the ring was full */
  _Atomic unsigned cmd, ev;
  srv_iost *cmd_next, *ev_next;
  pthread_mutex_t mu; /* wq*, fds, shut, down */
  bool shut;          /* closing or closed: no more srv_iost_write_early */
  wq_item *wq;        /* a ring of wq_cap items from wq_head */
  uint32_t wq_head, wq_len, wq_cap;
  uint32_t wq_done; /* items at the front written or failed, not reported yet */
  int fds[SRV_IOST_FDS_MAX];
  uint32_t fd_head;
  _Atomic uint32_t fd_len; /* changed under mu; read without it (srv_iost_fds_pending) */
  /* shared rings (srv_iost_use_rings): set by the loop before the client may use them */
  _Atomic bool rings_on;     /* reads: from the client's ring */
  bool down_on;              /* the loop's: writes go to the client's ring */
  uint8_t *rings_base;       /* the mapping, unmapped with the stream */
  rt_ring up;                /* the thread's: the client's frames */
  rt_ring down;              /* under mu: the replies */
  _Atomic uint64_t up_taken; /* up.pos, for the loop's srv_iost_unread */
  /* the thread's */
  uv_poll_t poll;
  bool poll_open, write_blocked;
  bool in_rings;     /* in its thread's rings list */
  uint32_t fds_seen; /* descriptors received in all (the client counts those it sent) */
  /* On rings: bytes the socket brought, and how many a client may send (one per descriptor,
   * one bell per time this side said it sleeps or waits, which is how a client rings) */
  uint64_t sock_bytes, bells_due;
  int up_end; /* the socket's end seen (a status), to be the stream's once the ring is read */
  int poll_events;
  srv_iost *ring_next;
  /* the loop's */
  bool want_read, closing;
  uint32_t holds; /* srv_iost_hold's not released: the memory stays after `closed` */
  bool gone;      /* `closed` was called: freed at the last release */
};

/* ---- hand-offs ---- */

static void post_cmd(srv_iost *st, unsigned bits) {
  if (atomic_fetch_or(&st->cmd, bits) != 0)
    return;
  io_thread *t = st->t;
  pthread_mutex_lock(&t->mu);
  st->cmd_next = t->inbox;
  t->inbox = st;
  atomic_store(&t->has_inbox, true);
  pthread_mutex_unlock(&t->mu);
  if (atomic_load(&t->sleeps))
    uv_async_send(&t->wake);
}

static void on_loop_task(accel_task *task);

/* After posting EV_CLOSED the thread touches st no more: the loop may free it at once. With
 * no threads, what a stream's side posts is handled when its callback ends (side_done): no
 * wake-up, no extra loop iteration; what the loop posts to itself waits for the wake-up. */
static void post_ev_from(srv_iost *st, unsigned bits, bool by_loop) {
  if (atomic_fetch_or(&st->ev, bits) != 0)
    return;
  srv_iopool *io = st->io;
  pthread_mutex_lock(&io->mu);
  st->ev_next = NULL;
  if (io->inbox_tail)
    io->inbox_tail->ev_next = st;
  else
    io->inbox = st;
  io->inbox_tail = st;
  bool post = io->rt != NULL && !io->task_posted;
  io->task_posted |= post;
  pthread_mutex_unlock(&io->mu);
  if (io->on_loop && !by_loop)
    io->drain_due = true;
  else if (post)
    accel_post_to(io->rt, io->rt_loop, &io->task, on_loop_task);
  else if (io->rt == NULL)
    uv_async_send(&io->wake);
}

static void post_ev(srv_iost *st, unsigned bits) {
  post_ev_from(st, bits, false);
}

static void on_loop_wake(uv_async_t *a);

/* The end of a callback of the streams' side: with no threads, the events it posted. */
static void side_done(srv_iopool *io) {
  if (io->on_loop && io->drain_due) {
    io->drain_due = false;
    on_loop_wake(&io->wake);
  }
}

/* ---- the thread's side: reading ---- */

static size_t ring_space(srv_iost *st) {
  return SRV_IOST_RING - (atomic_load(&st->tail) - atomic_load(&st->head));
}

static void update_poll(srv_iost *st);

static void set_end(srv_iost *st, int end) {
  if (atomic_load(&st->end) == 0)
    atomic_store(&st->end, end);
}

/* The descriptors that came with a read, queued; false if some had no room (closed). */
static bool take_rights(srv_iost *st, struct msghdr *mh) {
  bool ok = (mh->msg_flags & MSG_CTRUNC) == 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char *p = CMSG_DATA(c);
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, p + i * sizeof fd, sizeof fd);
      st->fds_seen++;
      if (st->fd_len < SRV_IOST_FDS_MAX) {
        st->fds[(st->fd_head + st->fd_len++) % SRV_IOST_FDS_MAX] = fd;
      } else {
        close(fd);
        ok = false;
      }
    }
    pthread_mutex_unlock(&st->mu);
  }
  return ok;
}

/* One recvmsg into the ring's free space (one or two pieces): bytes read, 0 at the end or
 * on an error (recorded), -1 when nothing is there now. */
static ssize_t read_once(srv_iost *st, size_t space) {
  size_t tail = atomic_load(&st->tail), at = tail % SRV_IOST_RING;
  size_t first = SRV_IOST_RING - at < space ? SRV_IOST_RING - at : space;
  struct iovec iov[2] = {{st->ring + at, first}, {st->ring, space - first}};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * FDS_PER_READ)];
  } ctl;
  struct msghdr mh = {.msg_iov = iov,
                      .msg_iovlen = space > first ? 2 : 1,
                      .msg_control = ctl.buf,
                      .msg_controllen = sizeof ctl.buf};
  ssize_t n;
  do
    n = recvmsg(st->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return -1;
  bool fds_ok = n < 0 || take_rights(st, &mh);
  /* The bytes, after their descriptors. Once the client's frames come through shared rings
   * (set before the WELCOME that tells it so was written: a byte it sent after reading that is
   * read after the flag is set), the socket carries only bells and descriptors. */
  if (n > 0 && !atomic_load(&st->rings_on))
    atomic_store(&st->tail, tail + (size_t)n);
  if (n < 0)
    set_end(st, uv_translate_sys_error(errno));
  else if (n == 0)
    set_end(st, UV_EOF);
  if (!fds_ok)
    set_end(st, UV_EPROTO);
  return atomic_load(&st->end) != 0 ? 0 : n;
}

/* Room to read into: the ring's, none while SRV_IOST_FDS_AHEAD descriptors wait (each
 * recvmsg that brings some stops there, so a paused peer could otherwise move its
 * descriptors into our table one message at a time). */
static size_t read_room(srv_iost *st) {
  return srv_iost_fds_pending(st) >= SRV_IOST_FDS_AHEAD ? 0 : ring_space(st);
}

static void ring_read_some(srv_iost *st, bool sock);

/* Reads while there is room and the socket had all it asked for (a short read: drained). Out
 * of room, it marks itself stalled: the loop's next take (bytes or a descriptor) wakes it. */
static void read_some(srv_iost *st) {
  if (atomic_load(&st->rings_on)) {
    ring_read_some(st, true);
    return;
  }
  bool got = false;
  while (atomic_load(&st->end) == 0) {
    size_t space = read_room(st);
    if (space == 0) {
      /* Stalled first, then the room looked at again: the loop frees room, then looks at
       * stalled (both sequentially consistent), so one of us sees the other and no wake-up
       * is lost. */
      atomic_store(&st->stalled, true);
      if (read_room(st) == 0)
        break;
      continue;
    }
    ssize_t n = read_once(st, space);
    got |= n != -1;
    if (n <= 0 || ((size_t)n < space && read_room(st) > 0))
      break; /* drained (a short read): the poll says when there is more; no room: stalled */
  }
  if (got)
    post_ev(st, EV_READ);
  if (atomic_load(&st->rings_on)) /* switched meanwhile: its frames wait in the ring */
    ring_read_some(st, true);
}

/* ---- the thread's side: a stream on shared rings ---- */

static void advance(srv_iost *st, size_t bytes);
static void fail_all(srv_iost *st, int status);

/* The socket of a stream on rings: bells dropped, descriptors queued (sent before their
 * frames: queued before the frames are copied), the end noted for after the ring's last
 * bytes. Past SRV_IOST_FDS_MAX descriptors the stream ends (UV_EPROTO): a client passes one
 * per region it registers and waits for each answer. */
/* Says to the client that this side sleeps or waits (*flag: reader_sleeps of the up ring or
 * writer_waits of the down one); each time it goes from 0 to 1 the client may ring once. */
static void ring_say(srv_iost *st, _Atomic uint32_t *flag) {
  if (atomic_exchange(flag, 1) == 0)
    st->bells_due++;
}

#define RING_BELLS_SLACK 64 /* bytes past those due before a client is cut */

static bool ring_drain_socket(srv_iost *st) {
  uint32_t seen = st->fds_seen;
  size_t bytes = 0;
  while (st->up_end == 0 && bytes < SRV_IOST_RING) { /* more: the poll brings it back */
    uint8_t bells[4096];
    struct iovec iov = {bells, sizeof bells};
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(sizeof(int) * FDS_PER_READ)];
    } ctl;
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n;
    do
      n = recvmsg(st->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (n > 0 && !take_rights(st, &mh))
      st->up_end = UV_EPROTO;
    else if (n <= 0)
      st->up_end = n == 0 ? UV_EOF : uv_translate_sys_error(errno);
    /* A client rings once per sleep or wait it was told of and passes a byte per descriptor:
     * more is one keeping this thread reading, not a client. */
    else if ((st->sock_bytes += (uint64_t)n) > st->bells_due + st->fds_seen + RING_BELLS_SLACK)
      st->up_end = UV_EMSGSIZE;
    bytes += n > 0 ? (size_t)n : 0;
  }
  return st->fds_seen != seen;
}

/* Copies what the client's ring holds into the stream's ring while there is room; the
 * socket's end becomes the stream's once the ring is empty. A position the client cannot
 * have written ends the stream (UV_EINVAL). The socket is read when it said it has something
 * (`sock`), or when the client counts more descriptors sent than came: a frame is written
 * after its descriptor was sent and counted, so the count read after the tail covers every
 * frame up to it. While it only polls, the thread makes no system call. */
static void ring_read_some(srv_iost *st, bool sock) {
  bool got = false;
  while (atomic_load(&st->end) == 0) {
    uint64_t have = rt_ring_avail(&st->up);
    if (sock || atomic_load(&st->up.ctl->passes) != st->fds_seen) {
      got |= ring_drain_socket(st); /* descriptors alone: the loop looks at their count */
      sock = false;
    }
    if (have == UINT64_MAX) {
      set_end(st, UV_EINVAL);
    } else if (have == 0) {
      if (st->up_end != 0 && rt_ring_avail(&st->up) == 0)
        set_end(st, st->up_end); /* looked at again: all it wrote before its end is read */
      else if (st->up_end == 0)
        break;
      else
        continue;
    } else {
      size_t space = ring_space(st);
      if (space == 0) {
        atomic_store(&st->stalled, true); /* as read_some: the loop's next take wakes it */
        if (ring_space(st) == 0)
          break;
        continue;
      }
      size_t tail = atomic_load(&st->tail), at = tail % SRV_IOST_RING;
      uint64_t k = have < space ? have : space;
      uint64_t first = SRV_IOST_RING - at < k ? SRV_IOST_RING - at : k;
      rt_ring_take(&st->up, st->ring + at, first);
      rt_ring_take(&st->up, st->ring, k - first);
      atomic_store(&st->up_taken, st->up.pos);
      atomic_store(&st->tail, tail + (size_t)k);
      if (!rt_ring_wake(st->fd, &st->up.ctl->writer_waits))
        set_end(st, UV_EPIPE);
    }
    got = true;
  }
  if (got)
    post_ev(st, EV_READ);
}

/* The queued replies into the client's ring, as far as it has room (the mutex held): false if
 * the client's positions are insane or its bell cannot be sent (every reply then fails). */
static bool ring_put_queued(srv_iost *st) {
  bool put = false;
  while (st->wq_done < st->wq_len) {
    uint64_t room = rt_ring_room(&st->down);
    if (room == UINT64_MAX)
      return false;
    if (room == 0)
      break;
    wq_item *w = &st->wq[(st->wq_head + st->wq_done) % st->wq_cap];
    size_t left = nng_msg_len(w->m) - w->off, k = left < room ? left : (size_t)room;
    rt_ring_put(&st->down, (uint8_t *)nng_msg_body(w->m) + w->off, k);
    advance(st, k);
    put = true;
  }
  return !put || rt_ring_publish(&st->down, st->fd);
}

/* flush, for a stream on rings: what fits goes into the client's ring; the rest waits for
 * room, which the client's reads make (it rings when it sees writer_waits). */
static void ring_flush(srv_iost *st) {
  pthread_mutex_lock(&st->mu);
  uint32_t done = st->wq_done;
  bool ok = ring_put_queued(st);
  if (!ok)
    fail_all(st, UV_EPROTO);
  st->write_blocked = ok && st->wq_done < st->wq_len;
  if (st->write_blocked) { /* asleep for room, then looked at again (shm_ring.h) */
    ring_say(st, &st->down.ctl->writer_waits);
    if (rt_ring_room(&st->down) != 0) {
      ok = ring_put_queued(st);
      if (!ok)
        fail_all(st, UV_EPROTO);
      st->write_blocked = ok && st->wq_done < st->wq_len;
    }
  }
  bool wrote = st->wq_done != done;
  pthread_mutex_unlock(&st->mu);
  if (wrote)
    post_ev(st, EV_WROTE);
}

/* A stream on rings, polled: whatever can move now. */
static void ring_serve(srv_iost *st) {
  ring_read_some(st, false);
  if (st->write_blocked)
    ring_flush(st);
}

/* Whether a stream on rings has something to do now (the thread's poll while it spins). */
static bool ring_has_work(srv_iost *st) {
  uint64_t have = rt_ring_avail(&st->up);
  if (have != 0 && atomic_load(&st->end) == 0 && (have == UINT64_MAX || ring_space(st) > 0))
    return true;
  if (!st->write_blocked)
    return false;
  pthread_mutex_lock(&st->mu);
  bool room = rt_ring_room(&st->down) != 0;
  pthread_mutex_unlock(&st->mu);
  return room;
}

/* ---- the thread's side: writing ---- */

/* The items not done, as iovecs (the mutex held); how many. */
static int gather(srv_iost *st, struct iovec *iov) {
  int n = 0;
  for (uint32_t i = st->wq_done; i < st->wq_len && n < IOV_MAX_GATHER; i++) {
    wq_item *w = &st->wq[(st->wq_head + i) % st->wq_cap];
    iov[n++] = (struct iovec){(uint8_t *)nng_msg_body(w->m) + w->off, nng_msg_len(w->m) - w->off};
  }
  return n;
}

/* Marks `bytes` written from the first item not done on (the mutex held). */
static void advance(srv_iost *st, size_t bytes) {
  while (bytes > 0 && st->wq_done < st->wq_len) {
    wq_item *w = &st->wq[(st->wq_head + st->wq_done) % st->wq_cap];
    size_t left = nng_msg_len(w->m) - w->off, take = bytes < left ? bytes : left;
    w->off += take;
    bytes -= take;
    if (w->off == nng_msg_len(w->m)) {
      w->status = 0;
      st->wq_done++;
    }
  }
}

/* Every item not done ends with status (the mutex held). */
static void fail_all(srv_iost *st, int status) {
  for (uint32_t i = st->wq_done; i < st->wq_len; i++)
    st->wq[(st->wq_head + i) % st->wq_cap].status = status;
  st->wq_done = st->wq_len;
}

static void flush(srv_iost *st) {
  if (atomic_load(&st->rings_on)) {
    ring_flush(st);
    return;
  }
  while (!st->write_blocked) {
    struct iovec iov[IOV_MAX_GATHER];
    pthread_mutex_lock(&st->mu);
    int n = gather(st, iov);
    pthread_mutex_unlock(&st->mu);
    if (n == 0)
      return;
    size_t want = 0;
    for (int i = 0; i < n; i++)
      want += iov[i].iov_len;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w;
    do
      w = sendmsg(st->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      st->write_blocked = true;
      break;
    }
    pthread_mutex_lock(&st->mu);
    if (w < 0)
      fail_all(st, uv_translate_sys_error(errno));
    else
      advance(st, (size_t)w);
    pthread_mutex_unlock(&st->mu);
    post_ev(st, EV_WROTE);
    if (w < 0)
      return;
    if ((size_t)w < want)
      st->write_blocked = true; /* the socket is full: wait until it is writable */
  }
}

/* ---- the thread's side: the stream's poll ---- */

/* Reads what is there until the stream's own end (EOF, a reset); if nothing more comes, it
 * ends with status. A full ring leaves the rest for later (stalled, woken by the loop). */
static void read_rest(srv_iost *st, int status) {
  while (atomic_load(&st->end) == 0) {
    size_t space = read_room(st);
    if (space == 0) {
      read_some(st); /* marks it stalled, or reads on if room came meanwhile */
      return;
    }
    if (read_once(st, space) == -1)
      set_end(st, status);
  }
}

/* Writes cannot go on: those queued end with status. */
static void stream_broken(srv_iost *st, int status) {
  pthread_mutex_lock(&st->mu);
  fail_all(st, status);
  pthread_mutex_unlock(&st->mu);
  post_ev(st, EV_WROTE);
  st->write_blocked = false;
}

/* The stream cannot be served (its poll could not be made or started): it ends with err, and
 * so do its writes. */
static void stream_fails(srv_iost *st, int err) {
  set_end(st, err);
  post_ev(st, EV_READ);
  stream_broken(st, err);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  srv_iost *st = p->data;
  srv_iopool *io = st->io;
  st->t->work++;
  if (status < 0) {
    /* The socket has an error (a peer that closed with our replies unread): libuv stopped the
     * handle. What the peer sent before still waits to be read, and recvmsg gives it first,
     * then the end; the error stands if nothing more comes. A full ring reads on later. */
    st->poll_events = 0;
    if (atomic_load(&st->rings_on)) { /* what the ring holds first; a full one reads on later */
      ring_read_some(st, st->up_end == 0); /* the socket's descriptors and end, if it has them */
      if (st->up_end == 0) {
        st->up_end = status;
        ring_read_some(st, false);
      }
    } else {
      read_rest(st, status);
    }
    post_ev(st, EV_READ);
    stream_broken(st, status);
  } else if (atomic_load(&st->rings_on)) {
    ring_read_some(st, (events & UV_READABLE) != 0); /* a bell, a descriptor or the end */
    if (st->write_blocked)                           /* the bell may say there is room */
      ring_flush(st);
  } else {
    if (events & UV_WRITABLE) {
      st->write_blocked = false;
      flush(st);
    }
    if (events & UV_READABLE)
      read_some(st);
  }
  update_poll(st);
  side_done(io);
}

/* Watches for what the stream waits on: room in the socket to write, bytes while the ring has
 * room and the stream has not ended. */
static void update_poll(srv_iost *st) {
  if (!st->poll_open)
    return;
  /* On rings the socket brings bells (for bytes, or for room to write) and descriptors,
   * whatever room the stream's ring has, until its end (which stays readable: what the ring
   * holds is read as the loop makes room). */
  bool rings = atomic_load(&st->rings_on);
  bool readable = rings ? st->up_end == 0 : read_room(st) > 0;
  int want = (st->write_blocked && !rings ? UV_WRITABLE : 0) |
             (atomic_load(&st->end) == 0 && readable ? UV_READABLE : 0);
  if (want == st->poll_events)
    return;
  st->poll_events = want;
  if (want != 0 && uv_poll_start(&st->poll, want, on_poll) == 0)
    return;
  uv_poll_stop(&st->poll);
  st->poll_events = 0;
  if (want != 0) /* not watched, it would never be served again */
    stream_fails(st, UV_EIO);
}

static void finish_close(srv_iost *st) {
  pthread_mutex_lock(&st->mu);
  st->shut = true;
  close(st->fd); /* under the mutex: a srv_iost_write_early never meets the number reused */
  while (st->fd_len > 0) {
    close(st->fds[st->fd_head]);
    st->fd_head = (st->fd_head + 1) % SRV_IOST_FDS_MAX;
    st->fd_len--;
  }
  fail_all(st, UV_ECANCELED);
  pthread_mutex_unlock(&st->mu);
  post_ev(st, EV_CLOSED);
}

static void on_poll_closed(uv_handle_t *h) {
  srv_iost *st = h->data;
  srv_iopool *io = st->io;
  finish_close(st);
  side_done(io);
}

static void open_on_thread(srv_iost *st) {
  if (uv_poll_init_socket(st->t->loop, &st->poll, st->fd) != 0) {
    stream_fails(st, UV_EIO);
    return;
  }
  st->poll.data = st;
  st->poll_open = true;
  read_some(st);
  update_poll(st);
}

/* The thread's list of streams on rings, which it polls while it spins. */
static void rings_add(srv_iost *st) {
  if (st->in_rings)
    return;
  st->in_rings = true;
  st->ring_next = st->t->rings;
  st->t->rings = st;
}

static void rings_remove(srv_iost *st) {
  for (srv_iost **p = &st->t->rings; st->in_rings && *p != NULL; p = &(*p)->ring_next)
    if (*p == st) {
      *p = st->ring_next;
      st->in_rings = false;
      return;
    }
}

static void run_cmds(srv_iost *st, unsigned bits) {
  if (bits & CMD_CLOSE) {
    rings_remove(st);
    flush(st); /* what the socket takes now: a last reply (why it was refused) goes out */
    if (!st->poll_open) {
      finish_close(st);
      return;
    }
    st->poll_open = false;
    uv_close((uv_handle_t *)&st->poll, on_poll_closed);
    return;
  }
  if (bits & CMD_OPEN)
    open_on_thread(st);
  if (!st->poll_open) { /* it could not be served: what is written fails */
    if (bits & CMD_WRITE)
      stream_broken(st, UV_EIO);
    return;
  }
  if (bits & CMD_RINGS)
    rings_add(st);
  if ((bits & CMD_BELL) && !rt_ring_wake(st->fd, &st->down.ctl->reader_sleeps))
    stream_broken(st, UV_EPIPE);
  if (bits & CMD_WRITE)
    flush(st);
  if ((bits & (CMD_READ | CMD_RINGS)) != 0)
    read_some(st);
  update_poll(st);
}

/* The commands posted; whether the pool stops. */
static bool run_inbox(io_thread *t) {
  t->work++;
  pthread_mutex_lock(&t->mu);
  srv_iost *list = t->inbox;
  t->inbox = NULL;
  atomic_store_explicit(&t->has_inbox, false, memory_order_relaxed);
  bool stop = t->stop;
  pthread_mutex_unlock(&t->mu);
  while (list != NULL) {
    srv_iost *st = list;
    list = st->cmd_next; /* before the flags clear: a new post may link st again */
    run_cmds(st, atomic_exchange(&st->cmd, 0));
  }
  return stop;
}

/* While it spins: commands posted without a wake-up (post_cmd). A stop comes with one. */
static void poll_inbox(io_thread *t) {
  if (atomic_load_explicit(&t->has_inbox, memory_order_acquire)) {
    (void)run_inbox(t);
    side_done(t->io);
  }
}

static void on_thread_wake(uv_async_t *a) {
  io_thread *t = a->data;
  if (run_inbox(t))
    uv_close((uv_handle_t *)&t->wake, NULL);
  else
    side_done(t->io);
}

/* The streams on rings with something to do now, served; work counted. */
static void rings_poll(io_thread *t) {
  for (srv_iost *st = t->rings; st != NULL; st = st->ring_next)
    if (ring_has_work(st)) {
      ring_serve(st);
      update_poll(st);
      t->work++;
    }
  side_done(t->io);
}

/* Before the thread sleeps: each stream on rings says so to its client (whose next write then
 * rings), and is looked at once more. False if one had work meanwhile: no sleep. */
static bool rings_may_sleep(io_thread *t) {
  for (srv_iost *st = t->rings; st != NULL; st = st->ring_next) {
    ring_say(st, &st->up.ctl->reader_sleeps);
    if (st->write_blocked)
      ring_say(st, &st->down.ctl->writer_waits);
  }
  uint64_t work = t->work;
  rings_poll(t);
  return t->work == work;
}

/* Awake again, to spin: posters need not wake it, clients need not ring. */
static void thread_awake(io_thread *t) {
  if (t->spin_ns == 0)
    return;
  atomic_store(&t->sleeps, false);
  for (srv_iost *st = t->rings; st != NULL; st = st->ring_next)
    atomic_store_explicit(&st->up.ctl->reader_sleeps, 0, memory_order_relaxed);
}

/* Polls without sleeping (uv_run NOWAIT, posted commands, and the streams' shared rings) until
 * spin_ns have passed since the thread's last work, then sleeps in the poll (ONCE). A client's next
 * frame, or the loop's reply, that comes within the spin costs no wake-up: on a host with cores to
 * spare (rt_spin_ns' rule, as the loop's own spin) a sleeping thread's wake-up is most of a
 * tiny op's hop. */
static void thread_main(void *arg) {
  io_thread *t = arg;
  pthread_setname_np(pthread_self(), "accel-io"); /* seen in top -H, gdb, perf */
  for (;;) {
    uint64_t seen = t->work, last = uv_hrtime();
    int alive = 1;
    while (t->spin_ns > 0 && (alive = uv_run(t->loop, UV_RUN_NOWAIT)) != 0) {
      poll_inbox(t);
      rings_poll(t);
      uint64_t now = uv_hrtime();
      if (t->work != seen) {
        seen = t->work;
        last = now;
      } else if (now - last >= t->spin_ns) {
        break;
      }
      rt_cpu_relax();
    }
    atomic_store(&t->sleeps, true); /* posters wake it from here */
    if (alive != 0 && (atomic_load(&t->has_inbox) || !rings_may_sleep(t))) {
      thread_awake(t); /* the loop's commands and sockets too */
      if (uv_run(t->loop, UV_RUN_NOWAIT) == 0)
        return;
      continue;
    }
    if (alive == 0 || uv_run(t->loop, UV_RUN_ONCE) == 0)
      return;
    thread_awake(t);
  }
}

/* ---- the loop's side ---- */

static void report_writes(srv_iost *st) {
  for (;;) {
    pthread_mutex_lock(&st->mu);
    if (st->wq_done == 0) {
      pthread_mutex_unlock(&st->mu);
      return;
    }
    wq_item w = st->wq[st->wq_head];
    st->wq_head = (st->wq_head + 1) % st->wq_cap;
    st->wq_len--;
    st->wq_done--;
    pthread_mutex_unlock(&st->mu);
    st->ops->written(st, st->data, w.m, w.status);
  }
}

static void stream_free(srv_iost *st) {
  if (st->rings_base != NULL)
    munmap(st->rings_base, PROTO_RINGS_BYTES);
  pthread_mutex_destroy(&st->mu);
  srv_iost_discard(st);
}

static void on_events(srv_iost *st, unsigned bits) {
  if (bits & EV_WROTE)
    report_writes(st);
  if ((bits & EV_READ) && st->want_read && !st->closing)
    st->ops->readable(st, st->data);
  if (bits & EV_CLOSED) {
    report_writes(st);
    st->io->streams--;
    st->ops->closed(st->data);
    st->gone = true;
    if (st->holds == 0)
      stream_free(st);
  }
}

static void on_loop_wake(uv_async_t *a) {
  srv_iopool *io = a->data;
  pthread_mutex_lock(&io->mu);
  srv_iost *list = io->inbox;
  io->inbox = io->inbox_tail = NULL;
  io->task_posted = false; /* the next event posts again */
  pthread_mutex_unlock(&io->mu);
  uint32_t n = 0;
  while (list != NULL) {
    srv_iost *st = list;
    list = st->ev_next; /* before the flags clear: a new post may link st again */
    on_events(st, atomic_exchange(&st->ev, 0));
    n++;
  }
  io->busy = n > 1;
}

/* ---- the pool ---- */

static void pool_free(srv_iopool *io) {
  pthread_mutex_destroy(&io->mu);
  rt_free(io->threads);
  rt_free(io);
}

static void on_loop_task(accel_task *task) {
  srv_iopool *io = (srv_iopool *)((char *)task - offsetof(srv_iopool, task));
  if (io->freed_by_task)
    pool_free(io); /* stopped meanwhile: every stream had closed, nothing is left to report */
  else
    on_loop_wake(&io->wake);
}

static void on_pool_handle_closed(uv_handle_t *h) {
  srv_iopool *io = h->data;
  if (--io->handles > 0)
    return;
  if (io->task_posted) /* the threads are joined: only the loop reads it now */
    io->freed_by_task = true;
  else
    pool_free(io);
}

/* The pool's own loop serves its streams: its "thread" is a handle there. */
static int thread_on_loop(io_thread *t, srv_iopool *io) {
  t->io = io;
  t->loop = io->loop;
  if (uv_async_init(t->loop, &t->wake, on_thread_wake) != 0)
    return ACCEL_ESYS;
  t->wake.data = t;
  atomic_init(&t->sleeps, true); /* the loop looks at nothing while it spins */
  atomic_init(&t->has_inbox, false);
  pthread_mutex_init(&t->mu, NULL);
  io->handles++;
  return 0;
}

static int thread_start(io_thread *t, srv_iopool *io) {
  t->io = io;
  t->loop = &t->own;
  if (uv_loop_init(t->loop) != 0)
    return ACCEL_ESYS;
  if (uv_async_init(t->loop, &t->wake, on_thread_wake) != 0) {
    uv_loop_close(t->loop);
    return ACCEL_ESYS;
  }
  t->wake.data = t;
  t->spin_ns = rt_spin_ns();
  atomic_init(&t->sleeps, true); /* until it spins */
  atomic_init(&t->has_inbox, false);
  pthread_mutex_init(&t->mu, NULL);
  if (uv_thread_create(&t->tid, thread_main, t) != 0) {
    uv_close((uv_handle_t *)&t->wake, NULL);
    uv_run(t->loop, UV_RUN_DEFAULT);
    uv_loop_close(t->loop);
    pthread_mutex_destroy(&t->mu);
    return ACCEL_ESYS;
  }
  return 0;
}

static void threads_stop(srv_iopool *io) {
  for (uint32_t i = 0; i < io->started; i++) {
    io_thread *t = &io->threads[i];
    if (io->on_loop) {
      t->wake.data = io;
      uv_close((uv_handle_t *)&t->wake, on_pool_handle_closed);
      pthread_mutex_destroy(&t->mu);
      continue;
    }
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_mutex_unlock(&t->mu);
    uv_async_send(&t->wake);
    uv_thread_join(&t->tid);
    uv_loop_close(t->loop);
    pthread_mutex_destroy(&t->mu);
  }
  io->started = 0;
}

int srv_iopool_start(srv_iopool **out, uv_loop_t *loop, uint32_t threads) {
  if (threads > SRV_IOPOOL_THREADS_MAX)
    return ACCEL_EINVAL;
  uint32_t n = threads ? threads : 1;
  srv_iopool *io = rt_calloc(1, sizeof *io);
  io_thread *ts = rt_calloc(n, sizeof *ts);
  if (io == NULL || ts == NULL || uv_async_init(loop, &io->wake, on_loop_wake) != 0) {
    rt_free(io);
    rt_free(ts);
    return io && ts ? ACCEL_ESYS : ACCEL_ENOMEM;
  }
  io->wake.data = io;
  io->handles = 1;
  io->loop = loop;
  io->threads = ts;
  io->nthreads = n;
  io->on_loop = threads == 0;
  pthread_mutex_init(&io->mu, NULL);
  int rc = 0;
  while (io->started < n &&
         (rc = io->on_loop ? thread_on_loop(&ts[0], io) : thread_start(&ts[io->started], io)) == 0)
    io->started++;
  if (rc != 0) {
    threads_stop(io);
    uv_close((uv_handle_t *)&io->wake, on_pool_handle_closed);
    return rc;
  }
  *out = io;
  return 0;
}

void srv_iopool_stop(srv_iopool *io) {
  if (io->streams != 0)
    accel_log(ACCEL_LOG_ERROR, "server", "I/O threads stopped with %u streams open", io->streams);
  threads_stop(io);
  uv_close((uv_handle_t *)&io->wake, on_pool_handle_closed);
}

void srv_iopool_post_through(srv_iopool *io, accel_runtime *rt, uint32_t loop) {
  io->rt = io->on_loop ? NULL : rt;
  io->rt_loop = loop;
}

uint32_t srv_iopool_threads(const srv_iopool *io) {
  return io->on_loop ? 0 : io->nthreads;
}

uint32_t srv_iopool_default_threads(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < SRV_IOPOOL_MIN_CORES)
    return 0;
  uint32_t n = (uint32_t)cores / 8; /* pollers leave the cores to clients (DECISIONS.md) */
  return n > 8 ? 8 : n;
}

/* ---- streams ---- */

#define WQ_FIRST 8 /* write queue items allocated with the stream */

srv_iost *srv_iost_new(void) {
  srv_iost *st = rt_calloc(1, sizeof *st);
  uint8_t *ring = rt_malloc(SRV_IOST_RING);
  wq_item *wq = rt_malloc(sizeof *wq * WQ_FIRST);
  if (st == NULL || ring == NULL || wq == NULL) {
    rt_free(st);
    rt_free(ring);
    rt_free(wq);
    return NULL;
  }
  st->ring = ring;
  st->wq = wq;
  st->wq_cap = WQ_FIRST;
  st->fd = -1;
  return st;
}

void srv_iost_discard(srv_iost *st) {
  rt_free(st->wq);
  rt_free(st->ring);
  rt_free(st);
}

void srv_iost_start(srv_iost *st, srv_iopool *io, int fd, const srv_iost_ops *ops, void *data) {
  st->io = io;
  st->t = &io->threads[io->next++ % io->nthreads];
  st->fd = fd;
  st->ops = ops;
  st->data = data;
  pthread_mutex_init(&st->mu, NULL);
  io->streams++;
  post_cmd(st, CMD_OPEN);
}

int srv_iost_fd(const srv_iost *st) {
  return st->fd;
}

void srv_iost_want_read(srv_iost *st, bool on) {
  bool was = st->want_read;
  st->want_read = on;
  if (on && !was && !st->closing && (srv_iost_buffered(st) > 0 || atomic_load(&st->end) != 0))
    post_ev_from(st, EV_READ, true);
}

size_t srv_iost_buffered(const srv_iost *st) {
  return atomic_load(&st->tail) - atomic_load(&st->head);
}

ssize_t srv_iost_read(srv_iost *st, void *buf, size_t cap) {
  int end = atomic_load(&st->end); /* first: the bytes before it are all visible then */
  size_t head = atomic_load(&st->head), have = atomic_load(&st->tail) - head;
  if (have == 0)
    return end;
  size_t n = have < cap ? have : cap, at = head % SRV_IOST_RING;
  size_t first = SRV_IOST_RING - at < n ? SRV_IOST_RING - at : n;
  memcpy(buf, st->ring + at, first);
  memcpy((uint8_t *)buf + first, st->ring, n - first);
  atomic_store(&st->head, head + n);
  if (!st->closing && atomic_exchange(&st->stalled, false)) /* the thread waits for room */
    post_cmd(st, CMD_READ);
  return (ssize_t)n;
}

/* Without the mutex: the loop asks after every read, and the stream's thread takes the
 * mutex for the replies it moves (its cache line would cross cores twice an op more). */
uint32_t srv_iost_fds_pending(srv_iost *st) {
  return atomic_load(&st->fd_len);
}

int srv_iost_take_fd(srv_iost *st) {
  int fd = -1;
  pthread_mutex_lock(&st->mu);
  if (st->fd_len > 0) {
    fd = st->fds[st->fd_head];
    st->fd_head = (st->fd_head + 1) % SRV_IOST_FDS_MAX;
    st->fd_len--;
  }
  pthread_mutex_unlock(&st->mu);
  if (fd >= 0 && !st->closing && atomic_exchange(&st->stalled, false))
    post_cmd(st, CMD_READ); /* it stopped at SRV_IOST_FDS_AHEAD descriptors */
  return fd;
}

void srv_iost_read_later(srv_iost *st) {
  if (!st->closing)
    post_ev_from(st, EV_READ, true);
}

/* Room for one more item (the mutex held); false when out of memory. */
static bool wq_grow(srv_iost *st) {
  if (st->wq_len < st->wq_cap)
    return true;
  uint32_t cap = st->wq_cap * 2;
  wq_item *n = rt_malloc(sizeof *n * cap);
  if (n == NULL)
    return false;
  for (uint32_t i = 0; i < st->wq_len; i++)
    n[i] = st->wq[(st->wq_head + i) % st->wq_cap];
  rt_free(st->wq);
  st->wq = n;
  st->wq_head = 0;
  st->wq_cap = cap;
  return true;
}

/* The loop writes itself while it is not busy and nothing of the stream's is queued (nor
 * waits to be reported: a write done now is never reported before an earlier one): a
 * hand-off to the thread costs a wake-up, as long as the write. Under the mutex, so the thread
 * cannot start a write meanwhile (even_busy: whether or not the loop is busy). Bytes written
 * (off included), or an error. */
static ssize_t write_now(srv_iost *st, nng_msg *m, size_t off, bool even_busy) {
  if (st->wq_len != 0)
    return (ssize_t)off;
  if (st->down_on) {
    uint64_t room = rt_ring_room(&st->down), len = nng_msg_len(m) - off;
    if (room == UINT64_MAX)
      return ACCEL_ESYS; /* the client wrote a head it cannot have: as a broken socket */
    if (room < len)
      return (ssize_t)off; /* queued: the thread puts it in as room comes */
    rt_ring_put(&st->down, (uint8_t *)nng_msg_body(m) + off, len);
    rt_ring_commit(&st->down);
    /* A client asleep is rung by the stream's thread while the loop is busy or the thread
     * spins (the bell's system call and the wake-up it starts cost the loop more than a
     * hand-off; to a spinning thread that is a store). */
    if (atomic_load(&st->down.ctl->reader_sleeps) != 0 &&
        (st->io->busy || !atomic_load_explicit(&st->t->sleeps, memory_order_relaxed))) {
      post_cmd(st, CMD_BELL);
      return (ssize_t)nng_msg_len(m);
    }
    return rt_ring_wake(st->fd, &st->down.ctl->reader_sleeps) ? (ssize_t)nng_msg_len(m)
                                                              : ACCEL_ESYS;
  }
  if (st->io->busy && !even_busy)
    return (ssize_t)off;
  struct iovec iov = {(uint8_t *)nng_msg_body(m) + off, nng_msg_len(m) - off};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  ssize_t w;
  do
    w = sendmsg(st->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK ? (ssize_t)off : ACCEL_ESYS;
  return (ssize_t)off + w;
}

/* The first write after srv_iost_use_rings: the reply that tells the client, on the socket, at
 * once and whole (a fresh socket takes a few KiB), so that every later one can go through
 * the ring behind it. */
static int write_last_on_socket(srv_iost *st, nng_msg *m, size_t off) {
  pthread_mutex_lock(&st->mu);
  ssize_t done = write_now(st, m, off, true);
  st->down_on = true;
  pthread_mutex_unlock(&st->mu);
  return done == (ssize_t)nng_msg_len(m) ? 1 : ACCEL_ESYS;
}

int srv_iost_write(srv_iost *st, nng_msg *m, size_t off) {
  if (st->closing)
    return ACCEL_ECLOSED;
  if (st->rings_base != NULL && !st->down_on)
    return write_last_on_socket(st, m, off);
  pthread_mutex_lock(&st->mu);
  ssize_t done = write_now(st, m, off, false);
  if (done < 0 || (size_t)done == nng_msg_len(m)) {
    pthread_mutex_unlock(&st->mu);
    return done < 0 ? (int)done : 1;
  }
  off = (size_t)done;
  bool ok = wq_grow(st);
  if (ok) {
    st->wq[(st->wq_head + st->wq_len++) % st->wq_cap] = (wq_item){.m = m, .off = off};
  }
  pthread_mutex_unlock(&st->mu);
  if (!ok)
    return ACCEL_ENOMEM;
  post_cmd(st, CMD_WRITE);
  return 0;
}

bool srv_iost_use_rings(srv_iost *st, uint8_t *base) {
  if (st->closing || st->io->on_loop || st->rings_base != NULL || st->wq_len != 0)
    return false;
  proto_rings_view(base, false, &st->down, &st->up);
  st->bells_due = 1; /* the up ring's reader starts asleep (proto_rings_create) */
  st->rings_base = base;
  atomic_store(&st->rings_on, true);
  post_cmd(st, CMD_RINGS);
  return true;
}

size_t srv_iost_unread(srv_iost *st) {
  if (atomic_load(&st->rings_on)) {
    uint64_t have = atomic_load(&st->up.ctl->tail) - atomic_load(&st->up_taken);
    return have > PROTO_RINGS_UP_BYTES ? 0 : (size_t)have;
  }
  int n = 0;
  if (ioctl(st->fd, FIONREAD, &n) != 0 || n < 0)
    n = 0;
  return (size_t)n;
}

size_t srv_iost_write_pending(srv_iost *st) {
  size_t n = 0;
  pthread_mutex_lock(&st->mu);
  for (uint32_t i = st->wq_done; i < st->wq_len; i++) {
    const wq_item *w = &st->wq[(st->wq_head + i) % st->wq_cap];
    n += nng_msg_len(w->m) - w->off;
  }
  pthread_mutex_unlock(&st->mu);
  return n;
}

bool srv_iost_writes_to_ring(const srv_iost *st) {
  return st->down_on; /* set on the loop */
}

void srv_iost_hold(srv_iost *st) {
  st->holds++;
}

void srv_iost_release(srv_iost *st) {
  if (--st->holds == 0 && st->gone)
    stream_free(st);
}

/* Into the ring of a client that polls it, or of one asleep while the stream's thread spins:
 * that thread rings it (post_cmd: a store), almost never this one, which completes every
 * client's work (only if the thread falls asleep between the look below and the post); with
 * the thread asleep already, the bell would be a system call here (its wake-up), so the loop's
 * path takes the reply (write_now batches the bells). A client that fell asleep as the
 * reply went in is rung by the stream's thread: it set its flag before it looked at the tail
 * once more (shm_ring.h), so one of the two sees the other. */
int srv_iost_write_early(srv_iost *st, const void *bytes, size_t len, _Atomic uint32_t *count) {
  /* Not behind the stream's thread putting a queue in, nor the loop ringing: the caller
   * completes every client's work, and the loop's path is there. */
  if (pthread_mutex_trylock(&st->mu) != 0)
    return 0;
  uint64_t room = st->shut || !st->down_on || st->wq_len != 0 ? 0 : rt_ring_room(&st->down);
  bool put = room != UINT64_MAX && room >= len; /* room: on rings, so a thread of its own */
  if (put && atomic_load(&st->down.ctl->reader_sleeps) != 0 &&
      atomic_load_explicit(&st->t->sleeps, memory_order_relaxed))
    put = false; /* the bell would be a wake-up's system call here */
  if (put) {
    rt_ring_put(&st->down, bytes, len);
    atomic_fetch_add(count, 1); /* the client's next op may reach the loop right after */
    rt_ring_commit(&st->down);
    /* Read after the commit: a client that said it sleeps before it looked at the ring again
     * is seen here. Under the mutex, so the bell goes before a close (shut) can. */
    if (atomic_load(&st->down.ctl->reader_sleeps) != 0)
      post_cmd(st, CMD_BELL);
  }
  pthread_mutex_unlock(&st->mu);
  return put ? 1 : 0;
}

void srv_iost_close(srv_iost *st) {
  if (st->closing)
    return;
  pthread_mutex_lock(&st->mu);
  st->shut = true;
  pthread_mutex_unlock(&st->mu);
  st->closing = true;
  post_cmd(st, CMD_CLOSE);
}
