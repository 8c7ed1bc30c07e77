/* The pin cache (pin_cache.h says what and why).
 *
 * One lock guards the table of ranges, the queue of pin requests and the counters. The table
 * holds ranges seen once (SEEN: watched, not pinned, so that memory unmapped and mapped again
 * at the same address before its second copy starts over) as well as the pinned ones. Two threads:
 * the watcher reads userfaultfd events (and nothing else: a thread that unmaps watched memory waits
 * for it, so it must never wait for the driver or for anything but the lock), and the pinner calls
 * the registrar, outside the lock.
 *
 * Nothing is allocated or freed under the lock: free() may give memory back to the kernel,
 * and if that memory is watched the freeing thread waits for the watcher, which waits for the
 * lock. Ranges that go are collected on a list and freed after it is released.
 *
 * A range's `ref` holds the copies in flight and the DYING bit, so that pin_cache_release is
 * one atomic step that never touches the range again: it wakes the pinner when it lets go of
 * the last copy of a dying range. */
#include "backends/pin_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "accel/error.h"
#include "runtime/alloc.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define DYING (1u << 31)
#define MAX_SEEN 64u /* ranges seen once and watched; the oldest not asked for goes first */
#define EVENTS (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP)

typedef enum range_state { RANGE_SEEN, RANGE_PINNING, RANGE_VALID } range_state;

struct pin_range {
  pin_cache *cache;
  pin_range *next_gone; /* on a list of ranges to free */
  uintptr_t base;
  size_t bytes;
  void *owner;
  range_state state;
  bool busy;       /* a thread calls the registrar for it, outside the lock */
  bool orphan;     /* its owner's context is ending: never unpinned, kept (dying, watched)
                    * until that context is gone, since the driver may keep the registration */
  bool owner_gone; /* and now it is: removed once no copy uses it */
  bool watched;    /* registered with userfaultfd */
  bool requested;  /* SEEN, and seen again: a pin request waits for it */
  _Atomic uint32_t ref;
  uint64_t last_use;
};

typedef struct span {
  uintptr_t base;
  size_t bytes;
  void *owner;
} span;

struct pin_cache {
  pthread_mutex_t lock;
  pthread_cond_t idle; /* the pinner finished a call or a pass */
  pin_registrar reg;
  size_t page, max, pinned; /* pinned: bytes of the ranges in the table but SEEN ones */
  pin_range *ranges[PIN_CACHE_MAX_RANGES + MAX_SEEN];
  unsigned nranges, nseen;
  span req[PIN_CACHE_MAX_REQUESTS];
  unsigned nreq;
  uint64_t clock, epoch, kicks, passes;
  void *busy_owner; /* whose registrar call the pinner is in (NULL: none) */
  pin_range *gone;  /* removed, to be freed once the lock is released */
  int uffd, pinner_fd, watcher_fd;
  pthread_t pinner, watcher;
  bool pinner_started, watcher_started, stop;
  pin_cache_stats st;
};

/* ---- small helpers (lock held unless said) ------------------------------------------- */

static void wake(int fd) {
  uint64_t one = 1;
  ssize_t n = write(fd, &one, sizeof one); /* an eventfd's counter: cannot fill up here */
  (void)n;
}

static bool overlaps(uintptr_t a, size_t n, uintptr_t b, size_t m) {
  return a < b + m && b < a + n;
}

static bool is_dying(const pin_range *r) {
  return (atomic_load(&r->ref) & DYING) != 0;
}

static uint32_t users(const pin_range *r) {
  return atomic_load(&r->ref) & ~DYING;
}

/* A range of the table over [a, a + n): any, or (registered) only those pinned or being
 * pinned or let go (a SEEN range is not registered: the driver's view stands there). */
static pin_range *overlapping_of(pin_cache *c, uintptr_t a, size_t n, bool registered) {
  for (unsigned i = 0; i < c->nranges; i++) {
    pin_range *r = c->ranges[i];
    if (overlaps(a, n, r->base, r->bytes) && (!registered || r->state != RANGE_SEEN))
      return r;
  }
  return NULL;
}

static pin_range *overlapping(pin_cache *c, uintptr_t a, size_t n) {
  return overlapping_of(c, a, n, false);
}

/* Whole pages around [p, p + bytes); false when that would wrap. */
static bool span_of(const pin_cache *c, const void *p, size_t bytes, void *owner, span *out) {
  uintptr_t a = (uintptr_t)p, m = c->page - 1;
  if (bytes == 0 || a > UINTPTR_MAX - bytes - m)
    return false;
  out->base = a & ~m;
  out->bytes = ((a + bytes + m) & ~m) - out->base;
  out->owner = owner;
  return true;
}

static void kill_range(pin_cache *c, pin_range *r) {
  if (!(atomic_fetch_or(&r->ref, DYING) & DYING))
    c->st.invalidated++;
}

static void unwatch(pin_cache *c, pin_range *r) {
  if (!r->watched)
    return;
  struct uffdio_range range = {.start = r->base, .len = r->bytes};
  (void)ioctl(c->uffd, UFFDIO_UNREGISTER, &range); /* fails once unmapped: nothing to undo */
  r->watched = false;
}

static void remove_range(pin_cache *c, pin_range *r) {
  for (unsigned i = 0; i < c->nranges; i++)
    if (c->ranges[i] == r) {
      c->ranges[i] = c->ranges[--c->nranges];
      break;
    }
  unwatch(c, r);
  if (r->state == RANGE_SEEN)
    c->nseen--;
  else
    c->pinned -= r->bytes;
  r->next_gone = c->gone;
  c->gone = r;
  pthread_cond_broadcast(&c->idle);
}

/* Takes the ranges removed so far; the caller frees them after unlocking. */
static pin_range *take_gone(pin_cache *c) {
  pin_range *g = c->gone;
  c->gone = NULL;
  return g;
}

static void free_gone(pin_range *g) {
  while (g != NULL) {
    pin_range *next = g->next_gone;
    rt_free(g);
    g = next;
  }
}

/* Unpins r (not in use, not busy) outside the lock, then removes it. */
static void drop_range(pin_cache *c, pin_range *r) {
  r->busy = true;
  if (!r->orphan && r->state == RANGE_VALID) {
    c->busy_owner = r->owner;
    pthread_mutex_unlock(&c->lock);
    c->reg.unpin(r->owner, (void *)r->base);
    pthread_mutex_lock(&c->lock);
    c->busy_owner = NULL;
    c->st.unpinned++;
  }
  remove_range(c, r);
}

/* ---- the watcher --------------------------------------------------------------------- */

/* A write fault cannot happen (no page is ever protected); if one came, the page is
 * unprotected, which also wakes the thread. */
static void unprotect(pin_cache *c, uintptr_t address) {
  struct uffdio_writeprotect wp = {
      .range = {.start = address & ~(uintptr_t)(c->page - 1), .len = c->page}, .mode = 0};
  (void)ioctl(c->uffd, UFFDIO_WRITEPROTECT, &wp);
}

static bool kill_overlapping(pin_cache *c, uintptr_t a, size_t n) {
  bool killed = false;
  for (unsigned i = 0; i < c->nranges; i++)
    if (overlaps(a, n, c->ranges[i]->base, c->ranges[i]->bytes)) {
      kill_range(c, c->ranges[i]);
      killed = true;
    }
  return killed;
}

static bool on_event(pin_cache *c, const struct uffd_msg *m) {
  switch (m->event) {
  case UFFD_EVENT_UNMAP:
  case UFFD_EVENT_REMOVE:
    return kill_overlapping(c, m->arg.remove.start, m->arg.remove.end - m->arg.remove.start);
  case UFFD_EVENT_REMAP: {
    /* The mapping moved and took the watch along: it is not ours any more. */
    struct uffdio_range moved = {.start = m->arg.remap.to, .len = m->arg.remap.len};
    (void)ioctl(c->uffd, UFFDIO_UNREGISTER, &moved);
    return kill_overlapping(c, m->arg.remap.from, m->arg.remap.len);
  }
  case UFFD_EVENT_PAGEFAULT:
    unprotect(c, m->arg.pagefault.address);
    return false;
  default:
    return false;
  }
}

/* Reads every pending event under the lock: the unmapping thread is let go by the read,
 * and by then the range is dying for anyone who takes the lock after. */
static void read_events(pin_cache *c) {
  struct uffd_msg msgs[16];
  bool died = false;
  pthread_mutex_lock(&c->lock);
  for (;;) {
    ssize_t n = read(c->uffd, msgs, sizeof msgs);
    if (n <= 0)
      break;
    for (size_t i = 0; i < (size_t)n / sizeof msgs[0]; i++)
      died |= on_event(c, &msgs[i]);
  }
  pthread_mutex_unlock(&c->lock);
  if (died)
    wake(c->pinner_fd);
}

static void *watcher_main(void *arg) {
  pthread_setname_np(pthread_self(), "accel-pin-watch"); /* seen in top -H, gdb */
  pin_cache *c = arg;
  struct pollfd fds[2] = {{.fd = c->uffd, .events = POLLIN},
                          {.fd = c->watcher_fd, .events = POLLIN}};
  for (;;) {
    if (poll(fds, 2, -1) < 0)
      continue; /* EINTR; never give up: unmapping threads would wait forever */
    if (fds[1].revents != 0)
      return NULL;
    if (fds[0].revents != 0)
      read_events(c);
  }
}

/* ---- the pinner ---------------------------------------------------------------------- */

static pin_range *idle_dying(pin_cache *c) {
  for (unsigned i = 0; i < c->nranges; i++) {
    pin_range *r = c->ranges[i];
    if (!r->busy && atomic_load(&r->ref) == DYING && (!r->orphan || r->owner_gone))
      return r;
  }
  return NULL;
}

static pin_range *least_recent_idle(pin_cache *c) {
  pin_range *lru = NULL;
  for (unsigned i = 0; i < c->nranges; i++) {
    pin_range *r = c->ranges[i];
    if (r->state == RANGE_VALID && !r->busy && atomic_load(&r->ref) == 0 &&
        (lru == NULL || r->last_use < lru->last_use))
      lru = r;
  }
  return lru;
}

/* Room for `bytes` more: 1 there is, 0 once the dying ranges being let go have gone (some were
 * just marked for it), -1 not now (in use, orphaned, or too large). */
static int make_room(pin_cache *c, size_t bytes) {
  size_t after = c->pinned, idle = 0; /* after: once the dying that can go have gone */
  unsigned n = c->nranges - c->nseen, nidle = 0;
  for (unsigned i = 0; i < c->nranges; i++) {
    pin_range *r = c->ranges[i];
    if (r->state == RANGE_SEEN)
      continue;
    if (is_dying(r)) {
      bool goes = r->busy || (users(r) == 0 && (!r->orphan || r->owner_gone));
      after -= goes ? r->bytes : 0;
      n -= goes ? 1 : 0;
    } else if (r->state == RANGE_VALID && !r->busy && users(r) == 0) {
      idle += r->bytes;
      nidle++;
    }
  }
  if (bytes > c->max || after - idle > c->max - bytes || n - nidle >= PIN_CACHE_MAX_RANGES)
    return -1;
  while (after > c->max - bytes || n >= PIN_CACHE_MAX_RANGES) {
    pin_range *r = least_recent_idle(c);
    if (r == NULL) /* cannot happen: counted above */
      return -1;
    atomic_fetch_or(&r->ref, DYING);
    c->st.evicted++;
    after -= r->bytes;
    n--;
  }
  return c->pinned <= c->max - bytes && c->nranges - c->nseen < PIN_CACHE_MAX_RANGES ? 1 : 0;
}

/* Whether [base, base + bytes) is all private anonymous memory, without a hole: the only kind
 * whose pages change only by the events the watch reports (a shared or file mapping's pages
 * change under it by truncation, hole punching, writes to the file). From /proc/self/maps,
 * read in pieces on the stack (no allocation). */
static bool private_anonymous(uintptr_t base, size_t bytes) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char buf[4096];
  size_t have = 0;
  uintptr_t covered = base, end = base + bytes;
  bool ok = true, done = false;
  while (ok && !done) {
    ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n <= 0)
      break;
    have += (size_t)n;
    buf[have] = '\0';
    char *line = buf, *nl;
    while (ok && !done && (nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      char perms[5] = "";
      unsigned long long s = 0, e = 0, off = 0, inode = 0;
      unsigned major = 0, minor = 0;
      if (sscanf(line, "%llx-%llx %4s %llx %x:%x %llu", &s, &e, perms, &off, &major, &minor,
                 &inode) != 7)
        ok = false;
      else if (e > covered && s < end) {
        ok = s <= covered && perms[3] == 'p' && inode == 0 && major == 0 && minor == 0;
        covered = (uintptr_t)e;
      }
      done = covered >= end || s >= end;
      line = nl + 1;
    }
    have = (size_t)(buf + have - line);
    memmove(buf, line, have);
    if (have == sizeof buf - 1)
      ok = false; /* a line longer than the buffer: not a line of ours */
  }
  close(fd);
  return ok && covered >= end;
}

/* After the registrar: the range must be wholly watched (a hole mapped while it was pinned
 * would be pinned and never watched; UFFDIO_WRITEPROTECT fails on an unwatched mapping) and
 * of a kind the watch covers. */
static bool still_watched(pin_cache *c, pin_range *r) {
  struct uffdio_writeprotect wp = {.range = {.start = r->base, .len = r->bytes}, .mode = 0};
  return ioctl(c->uffd, UFFDIO_WRITEPROTECT, &wp) == 0 && private_anonymous(r->base, r->bytes);
}

static int watch(pin_cache *c, pin_range *r) {
  struct uffdio_register reg = {.range = {.start = r->base, .len = r->bytes},
                                .mode = UFFDIO_REGISTER_MODE_WP};
  if (ioctl(c->uffd, UFFDIO_REGISTER, &reg) != 0)
    return ACCEL_EINVAL; /* not all mapped, or not memory userfaultfd can watch */
  r->watched = true;
  return 0;
}

/* Pins the SEEN range r, seen again: it is watched (since its first sighting, or now), so an
 * unmap while the registrar runs leaves it dying (pinned, to be unpinned at once). */
static void pin_seen(pin_cache *c, pin_range *r, void *owner) {
  r->state = RANGE_PINNING;
  r->requested = false;
  r->owner = owner;
  r->busy = true;
  c->nseen--;
  c->pinned += r->bytes;
  c->epoch++;
  c->busy_owner = owner;
  pthread_mutex_unlock(&c->lock);
  int rc = r->watched ? 0 : watch(c, r);
  bool pinned = rc == 0 && c->reg.pin(owner, (void *)r->base, r->bytes) == 0;
  if (pinned && !still_watched(c, r)) {
    c->reg.unpin(owner, (void *)r->base);
    pinned = false;
  }
  pthread_mutex_lock(&c->lock);
  c->busy_owner = NULL;
  r->busy = false;
  if (!pinned) {
    c->st.pin_failed++;
    remove_range(c, r);
    return;
  }
  r->state = RANGE_VALID;
  r->last_use = ++c->clock;
  c->st.pins++;
  pthread_cond_broadcast(&c->idle);
}

/* Watches a range seen once, outside the lock: from now on its unmap is an event. One that
 * cannot be watched (not all mapped, not memory userfaultfd watches) is dropped. */
static bool watch_seen(pin_cache *c) {
  pin_range *r = NULL;
  for (unsigned i = 0; i < c->nranges && r == NULL; i++) {
    pin_range *x = c->ranges[i];
    if (x->state == RANGE_SEEN && !x->watched && !x->busy && !is_dying(x))
      r = x;
  }
  if (r == NULL)
    return false;
  r->busy = true;
  pthread_mutex_unlock(&c->lock);
  int rc = watch(c, r);
  pthread_mutex_lock(&c->lock);
  r->busy = false;
  if (rc != 0)
    remove_range(c, r);
  return true;
}

static void requeue_front(pin_cache *c, span s) {
  memmove(c->req + 1, c->req, c->nreq * sizeof c->req[0]);
  c->req[0] = s;
  c->nreq++;
}

/* The SEEN range a request is for; NULL if it went meanwhile (unmapped, evicted). */
static pin_range *requested_range(pin_cache *c, span s) {
  pin_range *r = overlapping(c, s.base, s.bytes);
  bool same = r != NULL && r->state == RANGE_SEEN && r->base == s.base && r->bytes == s.bytes;
  return same && !is_dying(r) && !r->busy ? r : NULL;
}

/* One piece of work; false when nothing more can be done now. */
static bool pinner_step(pin_cache *c) {
  pin_range *r = idle_dying(c);
  if (r != NULL) {
    drop_range(c, r);
    return true;
  }
  if (watch_seen(c))
    return true;
  if (c->nreq == 0)
    return false;
  span s = c->req[0];
  memmove(c->req, c->req + 1, --c->nreq * sizeof c->req[0]);
  r = requested_range(c, s);
  if (r == NULL)
    return true;
  int room = make_room(c, s.bytes);
  if (room < 0) {
    c->st.refused++;
    r->requested = false; /* a later copy may ask again */
    return true;
  }
  if (room == 0) { /* after the dying ranges go; they may be in use or busy yet */
    requeue_front(c, s);
    return idle_dying(c) != NULL;
  }
  pin_seen(c, r, s.owner);
  return true;
}

/* Work until nothing more can be done. False once stopped. */
static bool pinner_work(pin_cache *c) {
  pthread_mutex_lock(&c->lock);
  if (c->stop) {
    pthread_mutex_unlock(&c->lock);
    return false;
  }
  uint64_t kicks = c->kicks;
  while (pinner_step(c)) {
    pin_range *gone = take_gone(c); /* freed between steps, never under the lock */
    if (gone != NULL) {
      pthread_mutex_unlock(&c->lock);
      free_gone(gone);
      pthread_mutex_lock(&c->lock);
    }
  }
  c->passes = kicks;
  pthread_cond_broadcast(&c->idle);
  pin_range *gone = take_gone(c);
  pthread_mutex_unlock(&c->lock);
  free_gone(gone);
  return true;
}

static void *pinner_main(void *arg) {
  pthread_setname_np(pthread_self(), "accel-pinner"); /* seen in top -H, gdb */
  pin_cache *c = arg;
  for (;;) {
    uint64_t v;
    if (read(c->pinner_fd, &v, sizeof v) < 0 && errno == EINTR)
      continue;
    if (!pinner_work(c))
      return NULL;
  }
}

/* ---- the interface -------------------------------------------------------------------- */

static int open_uffd(void) {
  int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == EPERM) /* vm.unprivileged_userfaultfd = 0: user faults only */
    fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (fd < 0)
    return -1;
  struct uffdio_api api = {.api = UFFD_API, .features = EVENTS};
  if (ioctl(fd, UFFDIO_API, &api) != 0 || (api.features & EVENTS) != EVENTS ||
      !(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
    close(fd);
    return -1;
  }
  return fd;
}

static void close_fd(int fd) {
  if (fd >= 0)
    close(fd);
}

static int start_threads(pin_cache *c) {
  c->pinner_started = pthread_create(&c->pinner, NULL, pinner_main, c) == 0;
  c->watcher_started = c->pinner_started && pthread_create(&c->watcher, NULL, watcher_main, c) == 0;
  return c->watcher_started ? 0 : ACCEL_ENOMEM;
}

int pin_cache_open(const pin_registrar *reg, size_t max, pin_cache **out) {
  if (out == NULL)
    return ACCEL_EINVAL;
  *out = NULL;
  if (reg == NULL || reg->pin == NULL || reg->unpin == NULL || max == 0)
    return ACCEL_EINVAL;
  pin_cache *c = rt_calloc(1, sizeof *c);
  if (c == NULL)
    return ACCEL_ENOMEM;
  c->reg = *reg;
  c->max = max;
  c->page = (size_t)sysconf(_SC_PAGESIZE);
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->idle, NULL);
  c->uffd = open_uffd();
  c->pinner_fd = eventfd(0, EFD_CLOEXEC);
  c->watcher_fd = eventfd(0, EFD_CLOEXEC);
  int rc = c->uffd < 0                             ? ACCEL_ENOTSUP
           : c->pinner_fd < 0 || c->watcher_fd < 0 ? ACCEL_ENOMEM
                                                   : start_threads(c);
  if (rc != 0) {
    pin_cache_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void pin_cache_close(pin_cache *c) {
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->lock);
  c->stop = true;
  pthread_mutex_unlock(&c->lock);
  if (c->pinner_started) {
    wake(c->pinner_fd);
    pthread_join(c->pinner, NULL);
  }
  /* Unwatched while the watcher still reads events: an unmap meanwhile does not stall. */
  pthread_mutex_lock(&c->lock);
  while (c->nranges > 0)
    drop_range(c, c->ranges[0]);
  pin_range *gone = take_gone(c);
  pthread_mutex_unlock(&c->lock);
  free_gone(gone);
  if (c->watcher_started) {
    wake(c->watcher_fd);
    pthread_join(c->watcher, NULL);
  }
  close_fd(c->uffd);
  close_fd(c->pinner_fd);
  close_fd(c->watcher_fd);
  pthread_cond_destroy(&c->idle);
  pthread_mutex_destroy(&c->lock);
  rt_free(c);
}

void pin_cache_set_max(pin_cache *c, size_t max) {
  if (c == NULL || max == 0)
    return;
  pthread_mutex_lock(&c->lock);
  c->max = max;
  pthread_mutex_unlock(&c->lock);
}

pin_answer pin_cache_use(pin_cache *c, const void *p, size_t bytes,
                         bool (*pinned)(const void *p, size_t bytes), pin_range **out) {
  *out = NULL;
  if (c == NULL)
    return pinned(p, bytes) ? PIN_PINNED : PIN_PAGEABLE;
  uintptr_t a = (uintptr_t)p;
  size_t n = bytes > 0 ? bytes : 1;
  pthread_mutex_lock(&c->lock);
  pin_range *r = overlapping_of(c, a, n, true);
  if (r != NULL) {
    bool inside = a >= r->base && n <= r->bytes - (a - r->base);
    bool hit = inside && r->state == RANGE_VALID && !is_dying(r);
    if (hit) {
      atomic_fetch_add(&r->ref, 1); /* DYING is only set under the lock */
      r->last_use = ++c->clock;
      c->st.hits++;
      *out = r;
    } else {
      c->st.avoided++;
    }
    pthread_mutex_unlock(&c->lock);
    return hit ? PIN_HIT : PIN_PAGEABLE;
  }
  uint64_t epoch = c->epoch;
  pthread_mutex_unlock(&c->lock);
  if (!pinned(p, bytes))
    return PIN_PAGEABLE;
  /* A range of ours may have been pinned meanwhile: the driver's "pinned" may be ours. */
  pthread_mutex_lock(&c->lock);
  bool raced = c->epoch != epoch && overlapping_of(c, a, n, true) != NULL;
  pthread_mutex_unlock(&c->lock);
  return raced ? PIN_PAGEABLE : PIN_PINNED;
}

void pin_cache_release(pin_range *r) {
  pin_cache *c = r->cache;
  if (atomic_fetch_sub(&r->ref, 1) - 1 == DYING) /* the last copy of a dying range */
    wake(c->pinner_fd);
}

/* The oldest range seen once that no request waits for (it makes room for a newer one). */
static pin_range *oldest_seen(pin_cache *c) {
  pin_range *old = NULL;
  for (unsigned i = 0; i < c->nranges; i++) {
    pin_range *r = c->ranges[i];
    if (r->state == RANGE_SEEN && !r->requested && !r->busy &&
        (old == NULL || r->last_use < old->last_use))
      old = r;
  }
  return old;
}

/* A first sighting: a SEEN range in *fresh (taken), to be watched by the pinner. */
static bool add_seen(pin_cache *c, pin_range **fresh, span s) {
  pin_range *old = c->nseen < MAX_SEEN ? NULL : oldest_seen(c);
  if (*fresh == NULL || (c->nseen >= MAX_SEEN && old == NULL)) {
    c->st.refused++; /* no memory for it, or every slot waits for the pinner */
    return false;
  }
  if (old != NULL)
    remove_range(c, old);
  pin_range *r = *fresh;
  *fresh = NULL;
  *r = (pin_range){.cache = c,
                   .base = s.base,
                   .bytes = s.bytes,
                   .owner = s.owner,
                   .state = RANGE_SEEN,
                   .last_use = ++c->clock};
  atomic_init(&r->ref, 0);
  c->ranges[c->nranges++] = r;
  c->nseen++;
  return true;
}

/* A range seen before and still there (watched, or about to be): ask the pinner for it. */
static bool request_pin(pin_cache *c, pin_range *r, span s) {
  if (r->state != RANGE_SEEN || is_dying(r) || r->requested || r->base != s.base ||
      r->bytes != s.bytes)
    return false; /* pinned already, going, asked for, or another span over it */
  if (c->nreq == PIN_CACHE_MAX_REQUESTS) {
    c->st.refused++;
    return false;
  }
  r->requested = true;
  c->req[c->nreq++] = s;
  return true;
}

void pin_cache_note(pin_cache *c, void *owner, const void *p, size_t bytes) {
  span s;
  if (c == NULL || bytes < PIN_CACHE_MIN || !span_of(c, p, bytes, owner, &s))
    return;
  pin_range *fresh = rt_calloc(1, sizeof *fresh); /* not under the lock (see the top) */
  pthread_mutex_lock(&c->lock);
  c->st.noted++;
  pin_range *r = overlapping(c, s.base, s.bytes);
  if (r != NULL && r->state == RANGE_SEEN && !r->requested && !r->busy &&
      (r->base != s.base || r->bytes != s.bytes)) {
    remove_range(c, r); /* another span over memory seen once: the newer one counts */
    r = overlapping(c, s.base, s.bytes);
  }
  bool wake_pinner = r == NULL ? add_seen(c, &fresh, s) : request_pin(c, r, s);
  pin_range *gone = take_gone(c);
  pthread_mutex_unlock(&c->lock);
  free_gone(gone);
  rt_free(fresh);
  if (wake_pinner)
    wake(c->pinner_fd);
}

static void forget_owner_requests(pin_cache *c, void *owner) {
  unsigned kept = 0;
  for (unsigned i = 0; i < c->nreq; i++) {
    if (c->req[i].owner != owner) {
      c->req[kept++] = c->req[i];
      continue;
    }
    pin_range *r = requested_range(c, c->req[i]);
    if (r != NULL)
      r->requested = false;
  }
  c->nreq = kept;
}

/* The next range of owner to deal with; waits while the pinner works on one. */
static pin_range *owner_next(pin_cache *c, void *owner) {
  for (;;) {
    pin_range *found = NULL;
    bool busy = false;
    for (unsigned i = 0; i < c->nranges && found == NULL; i++) {
      pin_range *r = c->ranges[i];
      if (r->owner != owner || r->orphan)
        continue;
      if (r->busy)
        busy = true;
      else
        found = r;
    }
    if (found != NULL || !busy)
      return found;
    pthread_cond_wait(&c->idle, &c->lock);
  }
}

void pin_cache_owner_closing(pin_cache *c, void *owner, bool unpin) {
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->lock);
  forget_owner_requests(c, owner);
  while (c->busy_owner == owner)
    pthread_cond_wait(&c->idle, &c->lock);
  pin_range *r;
  while ((r = owner_next(c, owner)) != NULL) {
    if (r->state == RANGE_SEEN) { /* not registered: nothing to undo */
      remove_range(c, r);
      continue;
    }
    atomic_fetch_or(&r->ref, DYING);
    if (users(r) > 0 || !unpin) { /* in flight on another device, or a context not to call */
      r->orphan = true;
      continue;
    }
    r->busy = true;
    pthread_mutex_unlock(&c->lock);
    c->reg.unpin(owner, (void *)r->base);
    pthread_mutex_lock(&c->lock);
    c->st.unpinned++;
    remove_range(c, r);
  }
  pin_range *gone = take_gone(c);
  pthread_mutex_unlock(&c->lock);
  free_gone(gone);
  wake(c->pinner_fd); /* requests may have waited for room */
}

void pin_cache_owner_gone(pin_cache *c, void *owner) {
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->lock);
  for (unsigned i = 0; i < c->nranges;) {
    pin_range *r = c->ranges[i];
    if (r->orphan && r->owner == owner && !r->owner_gone) {
      r->owner_gone = true;
      if (atomic_load(&r->ref) == DYING && !r->busy) {
        remove_range(c, r); /* moved the last range to i */
        continue;
      }
    }
    i++;
  }
  pin_range *gone = take_gone(c);
  pthread_mutex_unlock(&c->lock);
  free_gone(gone);
  wake(c->pinner_fd);
}

void pin_cache_flush(pin_cache *c) {
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->lock);
  uint64_t kick = ++c->kicks;
  pthread_mutex_unlock(&c->lock);
  wake(c->pinner_fd);
  pthread_mutex_lock(&c->lock);
  while (c->passes < kick)
    pthread_cond_wait(&c->idle, &c->lock);
  pthread_mutex_unlock(&c->lock);
}

void pin_cache_stats_get(pin_cache *c, pin_cache_stats *out) {
  *out = (pin_cache_stats){0};
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->lock);
  *out = c->st;
  out->pinned_bytes = c->pinned;
  out->ranges = c->nranges - c->nseen;
  out->seen = c->nseen;
  pthread_mutex_unlock(&c->lock);
}
