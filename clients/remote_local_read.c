/* Reading the local link (clients/remote.h): who reads the daemon's replies, and when.
 *
 * One thread at a time reads the socket and hands the frames to remote_on_frame, in order
 * (rd_mu). That is the link's receiver thread, except while a thread waits on one of the
 * link's ops: the op's future was offered help (runtime/future_help.h), and the waiting
 * thread reads the socket itself, polling for the spin time and then sleeping in poll(2) on
 * it, until its op is answered. Its reply then wakes nobody else: the receiver's watch of the
 * socket (an epoll set, one-shot) is switched off while a waiter reads, and back on when it
 * leaves, so an op and its wait cost the reply's one wake-up of the waiting thread (none while
 * it still polls), instead of the receiver's and then the waiter's. One waiter reads at a time;
 * others wait on their futures, completed by whoever reads.
 *
 * The end of the connection (the daemon gone, garbage, accel_close) is reported once, by
 * whoever reads it (remote_on_lost), and stops the receiver. */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "clients/remote.h"
#include "runtime/alloc.h"
#include "runtime/future_help.h"
#include "runtime/spin.h"

enum { WATCH_SOCKET = 0, WATCH_STOP = 1, WATCH_KICK = 2 };

/* A waiter's poll wakes at least this often to look at its future (completed by another
 * thread's reading, or by the end of the connection). */
#define HELP_POLL_MAX_MS 50

/* The receiver's watch of the socket on (one-shot: off again once it fires) or off. False if
 * the kernel refused: a watch left off would leave the replies nobody waits for unread, so the
 * callers give the connection up (lose) instead. */
static bool watch_socket(remote *r, bool on) {
  struct epoll_event ev = {.events = on ? EPOLLIN | EPOLLONESHOT : EPOLLONESHOT,
                           .data.u32 = WATCH_SOCKET};
  return epoll_ctl(r->rx_epfd, EPOLL_CTL_MOD, r->fd, &ev) == 0;
}

/* rd_mu held. The end of the stream: every pending request completes, the receiver stops. */
static void lose(accel_ctx *ctx) {
  remote *r = remote_of(ctx);
  if (r->rd_lost)
    return;
  r->rd_lost = true;
  /* Nothing is read from here on (a malformed frame, no memory, or the end): nothing is sent
   * either, and the daemon ends the session; a writer waiting for room in the ring leaves. */
  atomic_store(&r->rings_closing, true);
  shutdown(r->fd, SHUT_RDWR);
  remote_on_lost(ctx);
  (void)eventfd_write(r->rx_stop, 1);
}

/* rd_mu held. Hands over every whole frame the socket (or the ring) holds now: 0 once it has
 * no more, else ACCEL_ENOMEM (the bytes wait) or the loss (ECLOSED, EPROTO). On rings the
 * socket is read when it may have something (`sock`: woken by it): bells, the end. */
static int drain(accel_ctx *ctx, bool sock) {
  remote *r = remote_of(ctx);
  if (r->rings && sock)
    (void)rings_drain_socket(r); /* its end counts once the ring is read */
  for (;;) {
    const uint8_t *frame;
    long long n = proto_reader_try_next_from(&r->reader, r->fd, r->rings ? &r->down : NULL,
                                             atomic_load(&r->max_body), &frame);
    if (n == ACCEL_EAGAIN)
      return r->rings && r->rings_eof ? ACCEL_ECLOSED : 0;
    if (n < 0)
      return (int)n;
    remote_on_frame(ctx, frame, (size_t)n);
  }
}

/* rd_mu held. One round of reading; true while the connection lives. */
static bool read_round(accel_ctx *ctx, int *rc, bool sock) {
  remote *r = remote_of(ctx);
  *rc = r->rd_lost ? ACCEL_ECLOSED : drain(ctx, sock);
  if (*rc != 0 && *rc != ACCEL_ENOMEM)
    lose(ctx);
  return !r->rd_lost;
}

/* Out of memory for a frame's bytes: they wait in the socket, so the reader waits too (this is
 * its own thread) and tries again, 1 ms then doubling, for about 4 s in all before it gives
 * the connection up. False when it is time to give up. */
static bool wait_for_memory(int *tries) {
  if (*tries >= 12)
    return false;
  long long ms = 1LL << *tries;
  struct timespec d = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
  ++*tries;
  return true;
}

/* The receiver: reads whenever the socket has bytes and no waiter reads. */
static void *receiver(void *arg) {
  accel_ctx *ctx = arg;
  remote *r = remote_of(ctx);
  int tries = 0;
  bool retry = false; /* on rings, after ENOMEM: the bytes wait in memory, no watch fires */
  for (;;) {
    struct epoll_event ev = {.data.u32 = WATCH_SOCKET};
    int n = retry ? 1 : epoll_wait(r->rx_epfd, &ev, 1, -1);
    retry = false;
    if (n < 0 && errno == EINTR)
      continue;
    bool stop = n < 0 || ev.data.u32 == WATCH_STOP;
    if (n > 0 && ev.data.u32 == WATCH_KICK) {
      eventfd_t v;
      (void)eventfd_read(r->rx_kick, &v);
    }
    pthread_mutex_lock(&r->rd_mu);
    if (!stop && r->rd_helping) {
      /* The watch fired just before a waiter took over: the waiter reads now, and re-arms the
       * watch when it leaves. Reading here could take its reply between its look at its future
       * and its sleep in poll, which would then last until the poll's timeout. */
      pthread_mutex_unlock(&r->rd_mu);
      continue;
    }
    int rc = 0;
    bool alive = !stop ? read_round(ctx, &rc, true) : (lose(ctx), false);
    /* On rings: asleep again for the daemon, then a last look (a reply that came before it
     * saw that rang nobody). */
    while (alive && rc == 0 && r->rings && rings_reader_sleeps(r, true))
      alive = read_round(ctx, &rc, false);
    if (alive && rc == ACCEL_ENOMEM) {
      pthread_mutex_unlock(&r->rd_mu);
      bool again = wait_for_memory(&tries);
      pthread_mutex_lock(&r->rd_mu);
      if (!again)
        lose(ctx), alive = false;
      retry = alive && r->rings;
    } else if (alive) {
      tries = 0;
    }
    if (alive && !r->rd_helping && !watch_socket(r, true)) /* bytes left after ENOMEM fire it */
      lose(ctx), alive = false;
    pthread_mutex_unlock(&r->rd_mu);
    if (!alive)
      return NULL;
  }
}

/* ---- a waiting thread reads ---- */

/* What helpers share with the link, apart from it: a helper may be run by a thread that took
 * it from its future just as the context closes, so it touches the link only once registered
 * here, and the close waits for the registered ones to leave. */
struct local_gate {
  atomic_int refs; /* the link's and each helper's */
  pthread_mutex_t mu;
  pthread_cond_t idle;
  bool closed;
  int inside; /* helpers using the link now */
};

static void gate_release(local_gate *g) {
  if (atomic_fetch_sub(&g->refs, 1) != 1)
    return;
  pthread_cond_destroy(&g->idle);
  pthread_mutex_destroy(&g->mu);
  rt_free(g);
}

/* False once the link is closing: the helper must not touch it. */
static bool gate_enter(local_gate *g) {
  pthread_mutex_lock(&g->mu);
  bool open = !g->closed;
  g->inside += open;
  pthread_mutex_unlock(&g->mu);
  return open;
}

static void gate_leave(local_gate *g) {
  pthread_mutex_lock(&g->mu);
  if (--g->inside == 0)
    pthread_cond_broadcast(&g->idle);
  pthread_mutex_unlock(&g->mu);
}

typedef struct local_help {
  rt_helper h;    /* first */
  accel_ctx *ctx; /* used only inside the gate */
  local_gate *gate;
  accel_future *f; /* alive while a thread that waits on it runs this */
} local_help;

static void help_free(rt_helper *h) {
  gate_release(((local_help *)h)->gate);
  rt_free(h);
}

static bool future_done(accel_future *f) {
  return accel_future_poll(f) != ACCEL_EAGAIN;
}

/* How long a waiter sleeps in poll: until `until_ns` (uv_hrtime's clock, 0: none) or
 * HELP_POLL_MAX_MS, whichever comes first. */
static int sleep_ms(uint64_t until_ns) {
  int ms = HELP_POLL_MAX_MS;
  if (until_ns != 0) {
    uint64_t now = uv_hrtime();
    uint64_t left = until_ns > now ? (until_ns - now + 999999) / 1000000 : 0;
    ms = left < (uint64_t)ms ? (int)left : ms;
  }
  return ms;
}

/* How long a waiter polls the socket before it sleeps: the spin time (runtime/spin.h), unless
 * the waits of late outlast it twice over. Then the reply would come after the polling ended
 * anyway, and a polling thread only takes a CPU from the threads that make the reply: with 32
 * clients on 16 cores, everyone polling served 0.79x the ops of no one polling
 * (docs/PERFORMANCE.md, "Threads that spin"). A wait's length is measured whether it polled
 * or slept, so the polling comes back when the waits shorten. */
static uint64_t poll_time(uint64_t wait_mean_ns) {
  uint64_t spin = rt_spin_ns();
  return wait_mean_ns > 2 * spin ? 0 : spin;
}

/* The moving mean of the waits' lengths, each new one weighing an eighth. */
static uint64_t wait_mean(uint64_t mean, uint64_t took) {
  return mean - mean / 8 + took / 8;
}

/* Reads the connection until the future is done, the connection ends, or until_ns passes:
 * true if the future is done. Only one waiter reads at a time: another returns false at once
 * and waits on its future as usual. */
static bool help_read_inside(local_help *lh, uint64_t until_ns) {
  remote *r = remote_of(lh->ctx);
  pthread_mutex_lock(&r->rd_mu);
  if (r->rd_helping || r->rd_lost) {
    pthread_mutex_unlock(&r->rd_mu);
    return future_done(lh->f);
  }
  r->rd_helping = true;
  (void)watch_socket(r, false); /* if it stays on, the receiver leaves the reading to us */
  uint64_t started = uv_hrtime(), spin = poll_time(r->rd_wait_ns);
  if (r->rings && spin)
    (void)rings_reader_sleeps(r, false); /* it polls: the daemon need not ring */
  pthread_mutex_unlock(&r->rd_mu);
  uint64_t polled_until = spin ? started + spin : 0;
  bool done, gave_up = false, woke = false;
  for (;;) {
    int rc;
    uint64_t now = uv_hrtime(); /* one reading: a sleep below is one said to the daemon here */
    bool polling = now < polled_until;
    pthread_mutex_lock(&r->rd_mu);
    bool alive = read_round(lh->ctx, &rc, woke);
    bool more = alive && rc == 0 && r->rings && !polling &&
                rings_reader_sleeps(r, true); /* about to sleep: said first, then looked */
    pthread_mutex_unlock(&r->rd_mu);
    woke = false;
    done = future_done(lh->f);
    if (done || !alive || rc == ACCEL_ENOMEM) /* ENOMEM: the receiver's retries take over */
      break;
    if (until_ns != 0 && now >= until_ns) {
      gave_up = true;
      break;
    }
    if (polling || more) {
      rt_cpu_relax();
    } else {
      (void)proto_wait_readable(r->fd, sleep_ms(until_ns)); /* what ends it, the loop sees */
      woke = true;
    }
  }
  pthread_mutex_lock(&r->rd_mu);
  if (done || gave_up) /* a wait given up lasted at least this long: counted as that */
    r->rd_wait_ns = wait_mean(r->rd_wait_ns, uv_hrtime() - started);
  r->rd_helping = false;
  int rc = 0; /* the receiver reads from here: asleep for the daemon, then a last look */
  while (r->rings && !r->rd_lost && rc == 0 && rings_reader_sleeps(r, true))
    (void)read_round(lh->ctx, &rc, false);
  /* Bytes left in the ring (no memory for them now) ring no bell and fire no watch: the
   * receiver is kicked to retry them. */
  if (r->rings && !r->rd_lost && rc == ACCEL_ENOMEM)
    (void)eventfd_write(r->rx_kick, 1);
  if (!r->rd_lost && !watch_socket(r, true)) /* bytes already there fire it at once */
    lose(lh->ctx);
  pthread_mutex_unlock(&r->rd_mu);
  return done;
}

static bool help_read(rt_helper *h, uint64_t until_ns) {
  local_help *lh = (local_help *)h;
  if (!gate_enter(lh->gate))
    return future_done(lh->f);
  bool done = help_read_inside(lh, until_ns);
  gate_leave(lh->gate);
  return done;
}

static void help_run(rt_helper *h) {
  (void)help_read(h, 0);
}

void local_offer_help(accel_ctx *ctx, accel_future *f) {
  remote *r = remote_of(ctx);
  local_help *lh = r->gate ? rt_malloc(sizeof *lh) : NULL;
  if (lh == NULL)
    return; /* the receiver reads, as without help */
  *lh = (local_help){.h = {.run = help_run, .free = help_free, .try_run = help_read},
                     .ctx = ctx,
                     .gate = r->gate,
                     .f = f};
  atomic_fetch_add(&r->gate->refs, 1);
  atomic_init(&lh->h.refs, 1);
  (void)rt_future_offer_help(f, &lh->h);
  rt_helper_release(&lh->h); /* the future holds its own reference, if it took it */
}

/* ---- start and stop ---- */

static local_gate *gate_new(void) {
  local_gate *g = rt_calloc(1, sizeof *g);
  if (g == NULL)
    return NULL;
  atomic_init(&g->refs, 1);
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->idle, NULL);
  return g;
}

/* No helper touches the link after this: those inside have left, later ones stay out. */
static void gate_close(local_gate *g) {
  pthread_mutex_lock(&g->mu);
  g->closed = true;
  while (g->inside > 0)
    pthread_cond_wait(&g->idle, &g->mu);
  pthread_mutex_unlock(&g->mu);
  gate_release(g);
}

int local_reader_start(accel_ctx *ctx) {
  remote *r = remote_of(ctx);
  r->gate = gate_new(); /* without it, no help is offered: the receiver reads */
  r->rx_epfd = epoll_create1(EPOLL_CLOEXEC);
  r->rx_stop = eventfd(0, EFD_CLOEXEC);
  r->rx_kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  pthread_mutex_init(&r->rd_mu, NULL);
  r->rx_made = true;
  struct epoll_event sock = {.events = EPOLLIN | EPOLLONESHOT, .data.u32 = WATCH_SOCKET};
  struct epoll_event stop = {.events = EPOLLIN, .data.u32 = WATCH_STOP};
  struct epoll_event kick = {.events = EPOLLIN, .data.u32 = WATCH_KICK};
  if (r->rx_epfd < 0 || r->rx_stop < 0 || r->rx_kick < 0 ||
      epoll_ctl(r->rx_epfd, EPOLL_CTL_ADD, r->fd, &sock) != 0 ||
      epoll_ctl(r->rx_epfd, EPOLL_CTL_ADD, r->rx_stop, &stop) != 0 ||
      epoll_ctl(r->rx_epfd, EPOLL_CTL_ADD, r->rx_kick, &kick) != 0 ||
      pthread_create(&r->rx, NULL, receiver, ctx) != 0)
    return ACCEL_ESYS;
  r->rx_started = true;
  return 0;
}

void local_reader_stop(accel_ctx *ctx) {
  remote *r = remote_of(ctx);
  if (!r->rx_made)
    return;
  if (r->gate != NULL) { /* a helper inside reads until the shut-down socket says the end */
    gate_close(r->gate);
    r->gate = NULL;
  }
  if (r->rx_started) {
    (void)eventfd_write(r->rx_stop, 1);
    pthread_join(r->rx, NULL);
    r->rx_started = false;
  }
  if (r->rx_epfd >= 0)
    close(r->rx_epfd);
  if (r->rx_stop >= 0)
    close(r->rx_stop);
  if (r->rx_kick >= 0)
    close(r->rx_kick);
  pthread_mutex_destroy(&r->rd_mu);
  r->rx_made = false;
}
