/* The pin cache (backends/pin_cache.h) with a registrar of its own that behaves as CUDA's does:
 * a registration lasts until it is undone, whatever happens to the memory (the fake driver's
 * "pinned" keeps saying yes after munmap, which is what makes a stale registration dangerous).
 * The watch is the real one (userfaultfd), so are the unmaps, madvises and mremaps. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "backends/pin_cache.h"
#include "tests/oom/failing_alloc.h"
#include "tests/test.h"

#define MIB (1u << 20)

/* ---- the fake driver ------------------------------------------------------------------- */

#define FAKE_MAX 1024
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fake_cv = PTHREAD_COND_INITIALIZER;
static struct {
  uintptr_t base;
  size_t bytes;
  void *owner;
} fake[FAKE_MAX];
static int fake_n, fake_pins, fake_unpins, fake_fail;
static bool fake_gate_closed, fake_in_pin;

static void fake_reset(void) {
  pthread_mutex_lock(&fake_lock);
  fake_n = fake_pins = fake_unpins = fake_fail = 0;
  fake_gate_closed = fake_in_pin = false;
  pthread_mutex_unlock(&fake_lock);
}

static int fake_pin(void *owner, void *base, size_t bytes) {
  pthread_mutex_lock(&fake_lock);
  fake_in_pin = true;
  pthread_cond_broadcast(&fake_cv);
  while (fake_gate_closed)
    pthread_cond_wait(&fake_cv, &fake_lock);
  fake_in_pin = false;
  int rc = 0;
  if (fake_fail)
    rc = ACCEL_EDEVLOST;
  for (int i = 0; rc == 0 && i < fake_n; i++)
    if (fake[i].base == (uintptr_t)base)
      rc = ACCEL_EINVAL; /* as CUDA: already registered */
  if (rc == 0) {
    CHECK_LT(fake_n, FAKE_MAX);
    fake[fake_n].base = (uintptr_t)base;
    fake[fake_n].bytes = bytes;
    fake[fake_n].owner = owner;
    fake_n++;
    fake_pins++;
  }
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

static void fake_unpin(void *owner, void *base) {
  pthread_mutex_lock(&fake_lock);
  bool found = false;
  for (int i = 0; i < fake_n; i++)
    if (fake[i].base == (uintptr_t)base) {
      CHECK_PTR_EQ(fake[i].owner, owner);
      fake[i] = fake[--fake_n];
      found = true;
      break;
    }
  CHECK(found); /* never an unpin of what was not pinned */
  fake_unpins++;
  pthread_mutex_unlock(&fake_lock);
}

static bool fake_pinned(const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  pthread_mutex_lock(&fake_lock);
  bool in = false;
  for (int i = 0; i < fake_n && !in; i++)
    in = a >= fake[i].base && a + bytes <= fake[i].base + fake[i].bytes;
  pthread_mutex_unlock(&fake_lock);
  return in;
}

static int fake_count(void) {
  pthread_mutex_lock(&fake_lock);
  int n = fake_n;
  pthread_mutex_unlock(&fake_lock);
  return n;
}

static void gate(bool closed) {
  pthread_mutex_lock(&fake_lock);
  fake_gate_closed = closed;
  pthread_cond_broadcast(&fake_cv);
  pthread_mutex_unlock(&fake_lock);
}

static void wait_in_pin(void) {
  pthread_mutex_lock(&fake_lock);
  while (!fake_in_pin)
    pthread_cond_wait(&fake_cv, &fake_lock);
  pthread_mutex_unlock(&fake_lock);
}

static const pin_registrar fake_registrar = {.pin = fake_pin, .unpin = fake_unpin};

/* ---- helpers ---------------------------------------------------------------------------- */

static int owner_a, owner_b; /* their addresses are owners */

static pin_cache *try_open(size_t max) {
  fake_reset();
  pin_cache *c = NULL;
  int rc = pin_cache_open(&fake_registrar, max, &c);
  if (rc != ACCEL_ENOTSUP)
    CHECK_OK(rc);
  return c;
}

/* Without userfaultfd (a kernel or seccomp profile without it) there is no cache to test. */
#define OPEN_CACHE(c, max)                                                                         \
  do {                                                                                             \
    (c) = try_open(max);                                                                           \
    if ((c) == NULL)                                                                               \
      TEST_SKIP("userfaultfd is not available here: the cache is never made");                     \
  } while (0)

static char *map_untouched(size_t bytes) {
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  return p;
}

static char *map(size_t bytes) {
  char *p = map_untouched(bytes);
  memset(p, 0x5a, bytes); /* pages there, as a caller's buffer has */
  return p;
}

static pin_cache_stats stats(pin_cache *c) {
  pin_cache_stats s;
  pin_cache_stats_get(c, &s);
  return s;
}

/* Noted twice (two staged copies), then the pinner's work done. */
static void pin_now(pin_cache *c, void *owner, const void *p, size_t bytes) {
  pin_cache_note(c, owner, p, bytes);
  pin_cache_note(c, owner, p, bytes);
  pin_cache_flush(c);
}

static pin_answer use(pin_cache *c, const void *p, size_t bytes) {
  pin_range *r;
  pin_answer a = pin_cache_use(c, p, bytes, fake_pinned, &r);
  CHECK_EQ(a == PIN_HIT, r != NULL);
  if (r != NULL)
    pin_cache_release(r);
  return a;
}

/* ---- tests ------------------------------------------------------------------------------- */

TEST(memory_copied_once_is_never_pinned) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  pin_cache_note(c, &owner_a, p, 4 * MIB);
  pin_cache_flush(c);
  CHECK_EQ(stats(c).pins, 0);
  CHECK_EQ(fake_count(), 0);
  CHECK_EQ(use(c, p, 4 * MIB), PIN_PAGEABLE);
  /* Seen once, not registered by the cache: the driver's view decides (here the caller
   * registered it since), not the cache's. */
  CHECK_OK(fake_pin(&owner_b, p, 4 * MIB));
  CHECK_EQ(use(c, p, 4 * MIB), PIN_PINNED);
  CHECK_EQ(stats(c).avoided, 0);
  fake_unpin(&owner_b, p);
  pin_cache_close(c);
  munmap(p, 4 * MIB);
}

/* A buffer freed and allocated again at the same address (as glibc often does) between two
 * copies is new memory: its first copy starts over, and nothing is pinned for it. */
TEST(memory_freed_and_mapped_again_between_two_copies_is_not_pinned) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  pin_cache_note(c, &owner_a, p, 4 * MIB);
  pin_cache_flush(c); /* watched from its first copy */
  CHECK_EQ(stats(c).seen, 1);
  /* New memory over the old at once (the old unmapped by the kernel: an event), so that no
   * other thread can take the addresses in between. */
  char *q = mmap(p, 4 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0);
  CHECK(q == p);
  pin_cache_flush(c); /* the dead sighting goes */
  CHECK_EQ(stats(c).seen, 0);
  pin_cache_note(c, &owner_a, q, 4 * MIB);
  pin_cache_flush(c);
  CHECK_EQ(stats(c).pins, 0); /* q's first copy, not p's second */
  CHECK_EQ(fake_pins, 0);
  pin_cache_note(c, &owner_a, q, 4 * MIB);
  pin_cache_flush(c);
  CHECK_EQ(stats(c).pins, 1); /* q's second */
  CHECK_EQ(use(c, q, 4 * MIB), PIN_HIT);
  pin_cache_close(c);
  munmap(q, 4 * MIB);
}

/* 64 ranges seen once are watched; a 65th takes the oldest one's place. */
TEST(ranges_seen_once_at_their_limit_and_one_past) {
  pin_cache *c;
  OPEN_CACHE(c, 256 * MIB);
  static char *p[65];
  for (int i = 0; i < 65; i++)
    p[i] = map_untouched(MIB);
  for (int i = 0; i < 64; i++)
    pin_cache_note(c, &owner_a, p[i], MIB);
  pin_cache_flush(c);
  CHECK_EQ(stats(c).seen, 64);
  CHECK_EQ(stats(c).refused, 0);
  pin_cache_note(c, &owner_a, p[64], MIB);
  pin_cache_flush(c);
  CHECK_EQ(stats(c).seen, 64);
  pin_cache_note(c, &owner_a, p[0], MIB); /* forgotten: a first copy again */
  pin_cache_flush(c);
  CHECK_EQ(stats(c).pins, 0);
  pin_cache_note(c, &owner_a, p[64], MIB); /* remembered: pinned */
  pin_cache_flush(c);
  CHECK_EQ(stats(c).pins, 1);
  pin_cache_close(c);
  for (int i = 0; i < 65; i++)
    munmap(p[i], MIB);
}

TEST(memory_copied_twice_is_pinned_and_copies_inside_it_hit) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  pin_now(c, &owner_a, p + 100, 2 * MIB); /* whole pages around it */
  CHECK_EQ(stats(c).pins, 1);
  CHECK_EQ(stats(c).pinned_bytes, 2 * MIB + 4096);
  CHECK_EQ(fake_count(), 1);
  CHECK_EQ(use(c, p + 100, 2 * MIB), PIN_HIT);
  CHECK_EQ(use(c, p, 4096), PIN_HIT);
  /* Partly outside: staged, though the driver says the first part is pinned. */
  CHECK_EQ(use(c, p, 3 * MIB), PIN_PAGEABLE);
  CHECK_EQ(stats(c).hits, 2);
  CHECK_EQ(stats(c).avoided, 1);
  /* Smaller copies are not noted; below the minimum nothing is asked. */
  char *q = map(4 * MIB);
  pin_now(c, &owner_a, q, PIN_CACHE_MIN - 1);
  CHECK_EQ(stats(c).pins, 1);
  pin_now(c, &owner_a, q, PIN_CACHE_MIN);
  CHECK_EQ(stats(c).pins, 2);
  pin_cache_close(c);
  CHECK_EQ(fake_count(), 0); /* close unpinned both */
  CHECK_EQ(fake_unpins, 2);
  munmap(p, 4 * MIB);
  munmap(q, 4 * MIB);
}

/* The danger the watch exists for: the driver still says "pinned" for an address whose memory
 * is gone. Once munmap has returned, the cache must never answer HIT or PINNED there. */
TEST(an_unmapped_range_is_never_used_again_once_munmap_returns) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  for (int i = 0; i < 200; i++) {
    char *p = map(2 * MIB);
    pin_now(c, &owner_a, p, 2 * MIB);
    CHECK_EQ(use(c, p, 2 * MIB), PIN_HIT);
    CHECK_EQ(munmap(p, 2 * MIB), 0);
    /* The same addresses mapped again, with other bytes: a stale registration would DMA the
     * old pages. */
    char *again = mmap(p, 2 * MIB, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK_EQ(use(c, p, 2 * MIB), PIN_PAGEABLE);
    pin_cache_flush(c);
    CHECK_EQ(fake_count(), 0); /* unpinned by the pinner */
    CHECK_EQ(use(c, p, 2 * MIB), PIN_PAGEABLE);
    if (again != MAP_FAILED)
      munmap(again, 2 * MIB);
  }
  CHECK_EQ(stats(c).invalidated, 200);
  CHECK_EQ(stats(c).unpinned, 200);
  CHECK_EQ(stats(c).ranges, 0);
  pin_cache_close(c);
}

TEST(part_of_a_range_unmapped_kills_all_of_it) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  pin_now(c, &owner_a, p, 4 * MIB);
  CHECK_EQ(munmap(p + 3 * MIB, MIB), 0);
  CHECK_EQ(use(c, p, MIB), PIN_PAGEABLE);
  pin_cache_flush(c);
  CHECK_EQ(fake_count(), 0);
  pin_cache_close(c);
  munmap(p, 3 * MIB);
}

TEST(madvise_dontneed_kills_the_range) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  pin_now(c, &owner_a, p, 4 * MIB);
  CHECK_EQ(madvise(p + MIB, MIB, MADV_DONTNEED), 0);
  CHECK_EQ(use(c, p, MIB), PIN_PAGEABLE);
  pin_cache_flush(c);
  CHECK_EQ(fake_count(), 0);
  CHECK_EQ(stats(c).invalidated, 1);
  /* The memory is still the caller's: noted twice again, it is pinned again. */
  pin_now(c, &owner_a, p, 4 * MIB);
  CHECK_EQ(use(c, p, 4 * MIB), PIN_HIT);
  pin_cache_close(c);
  munmap(p, 4 * MIB);
}

TEST(mremap_kills_the_range) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  pin_now(c, &owner_a, p, 4 * MIB);
  char *q = mremap(p, 4 * MIB, 8 * MIB, MREMAP_MAYMOVE);
  CHECK(q != MAP_FAILED);
  CHECK_EQ(use(c, p, MIB), PIN_PAGEABLE);
  pin_cache_flush(c);
  CHECK_EQ(fake_count(), 0);
  pin_cache_close(c);
  munmap(q, 8 * MIB);
}

TEST(unmapped_before_the_pinner_gets_to_it_is_not_pinned) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  gate(true);
  char *other = map(2 * MIB); /* keeps the pinner busy while p goes */
  pin_cache_note(c, &owner_a, other, 2 * MIB);
  pin_cache_note(c, &owner_a, other, 2 * MIB);
  wait_in_pin();
  pin_cache_note(c, &owner_a, p, 4 * MIB);
  pin_cache_note(c, &owner_a, p, 4 * MIB);
  CHECK_EQ(munmap(p, 4 * MIB), 0);
  gate(false);
  pin_cache_flush(c);
  CHECK_EQ(stats(c).pins, 1); /* `other` only */
  CHECK_EQ(stats(c).seen, 0); /* p could not be watched: dropped, never handed to the driver */
  CHECK_EQ(fake_pins, 1);
  CHECK_EQ(fake_count(), 1);
  pin_cache_close(c);
  munmap(other, 2 * MIB);
}

TEST(unmapped_while_being_pinned_is_unpinned_at_once) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  gate(true);
  pin_cache_note(c, &owner_a, p, 4 * MIB);
  pin_cache_note(c, &owner_a, p, 4 * MIB);
  wait_in_pin();                          /* watched, the registrar not yet done */
  CHECK_EQ(use(c, p, MIB), PIN_PAGEABLE); /* being pinned: not trusted yet */
  CHECK_EQ(munmap(p, 4 * MIB), 0);
  gate(false);
  pin_cache_flush(c);
  CHECK_EQ(fake_pins, 1);
  CHECK_EQ(fake_count(), 0);
  CHECK_EQ(stats(c).ranges, 0);
  pin_cache_close(c);
}

TEST(a_registrar_failure_leaves_nothing_pinned) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  fake_fail = 1;
  pin_now(c, &owner_a, p, 4 * MIB);
  CHECK_EQ(stats(c).pin_failed, 1);
  CHECK_EQ(stats(c).ranges, 0);
  CHECK_EQ(stats(c).pinned_bytes, 0);
  CHECK_EQ(use(c, p, MIB), PIN_PAGEABLE);
  fake_fail = 0;
  pin_now(c, &owner_a, p, 4 * MIB); /* and works when the driver does */
  CHECK_EQ(use(c, p, MIB), PIN_HIT);
  pin_cache_close(c);
  munmap(p, 4 * MIB);
}

/* Exactly max fits; one page more evicts the least recently used range not in use. */
TEST(the_bound_at_max_and_one_page_past) {
  pin_cache *c;
  OPEN_CACHE(c, 8 * MIB);
  char *a = map(4 * MIB), *b = map(4 * MIB), *d = map(4 * MIB + 4096);
  pin_now(c, &owner_a, a, 4 * MIB);
  pin_now(c, &owner_a, b, 4 * MIB);
  CHECK_EQ(stats(c).pinned_bytes, 8 * MIB);
  CHECK_EQ(stats(c).evicted, 0);
  CHECK_EQ(use(c, a, MIB), PIN_HIT); /* b is now the least recently used */
  pin_now(c, &owner_a, d, 4 * MIB);  /* 4 MiB: b goes */
  CHECK_EQ(stats(c).evicted, 1);
  CHECK_EQ(use(c, b, MIB), PIN_PAGEABLE);
  CHECK_EQ(use(c, a, MIB), PIN_HIT);
  CHECK_EQ(use(c, d, MIB), PIN_HIT);
  CHECK_EQ(stats(c).pinned_bytes, 8 * MIB);
  CHECK_EQ(fake_count(), 2);
  pin_cache_close(c);

  /* One page past max never fits. */
  OPEN_CACHE(c, 8 * MIB);
  char *big = map(8 * MIB + 4096);
  pin_now(c, &owner_a, big, 8 * MIB + 4096);
  CHECK_EQ(stats(c).pins, 0);
  CHECK_EQ(stats(c).refused, 1);
  pin_now(c, &owner_a, big, 8 * MIB);
  CHECK_EQ(stats(c).pins, 1);
  pin_cache_close(c);
  munmap(a, 4 * MIB);
  munmap(b, 4 * MIB);
  munmap(d, 4 * MIB + 4096);
  munmap(big, 8 * MIB + 4096);
}

TEST(a_range_in_use_is_neither_evicted_nor_unpinned) {
  pin_cache *c;
  OPEN_CACHE(c, 4 * MIB);
  char *a = map(4 * MIB), *b = map(4 * MIB);
  pin_now(c, &owner_a, a, 4 * MIB);
  pin_range *held;
  CHECK_EQ(pin_cache_use(c, a, MIB, fake_pinned, &held), PIN_HIT);
  pin_now(c, &owner_a, b, 4 * MIB); /* no room while a is in use */
  CHECK_EQ(stats(c).refused, 1);
  CHECK_EQ(stats(c).evicted, 0);
  /* Unmapped while in use (the caller broke the rules): dying, but pinned until released. */
  CHECK_EQ(munmap(a, 4 * MIB), 0);
  pin_cache_flush(c);
  CHECK_EQ(fake_count(), 1);
  CHECK_EQ(use(c, a, MIB), PIN_PAGEABLE);
  pin_cache_release(held);
  pin_cache_flush(c);
  CHECK_EQ(fake_count(), 0);
  pin_now(c, &owner_a, b, 4 * MIB);
  CHECK_EQ(use(c, b, MIB), PIN_HIT);
  pin_cache_close(c);
  munmap(b, 4 * MIB);
}

TEST(the_range_count_at_its_limit_and_one_past) {
  pin_cache *c;
  OPEN_CACHE(c, (size_t)PIN_CACHE_MAX_RANGES * 2 * MIB);
  static char *p[PIN_CACHE_MAX_RANGES + 1];
  for (unsigned i = 0; i <= PIN_CACHE_MAX_RANGES; i++)
    p[i] = map_untouched(MIB);
  for (unsigned i = 0; i < PIN_CACHE_MAX_RANGES; i++)
    pin_now(c, &owner_a, p[i], MIB);
  CHECK_EQ(stats(c).ranges, PIN_CACHE_MAX_RANGES);
  CHECK_EQ(stats(c).evicted, 0);
  pin_now(c, &owner_a, p[PIN_CACHE_MAX_RANGES], MIB);
  CHECK_EQ(stats(c).ranges, PIN_CACHE_MAX_RANGES);
  CHECK_EQ(stats(c).evicted, 1);
  CHECK_EQ(use(c, p[0], MIB), PIN_PAGEABLE); /* the least recently used went */
  CHECK_EQ(use(c, p[PIN_CACHE_MAX_RANGES], MIB), PIN_HIT);
  pin_cache_close(c);
  for (unsigned i = 0; i <= PIN_CACHE_MAX_RANGES; i++)
    munmap(p[i], MIB);
}

/* The pinner held in the registrar: PIN_CACHE_MAX_REQUESTS wait, one more is refused. */
TEST(the_request_queue_at_its_limit_and_one_past) {
  pin_cache *c;
  OPEN_CACHE(c, 256 * MIB);
  static char *p[PIN_CACHE_MAX_REQUESTS + 2];
  for (unsigned i = 0; i < PIN_CACHE_MAX_REQUESTS + 2; i++)
    p[i] = map(MIB);
  gate(true);
  pin_cache_note(c, &owner_a, p[0], MIB);
  pin_cache_note(c, &owner_a, p[0], MIB);
  wait_in_pin();
  for (unsigned i = 1; i <= PIN_CACHE_MAX_REQUESTS; i++) {
    pin_cache_note(c, &owner_a, p[i], MIB);
    pin_cache_note(c, &owner_a, p[i], MIB);
  }
  CHECK_EQ(stats(c).refused, 0);
  pin_cache_note(c, &owner_a, p[PIN_CACHE_MAX_REQUESTS + 1], MIB);
  pin_cache_note(c, &owner_a, p[PIN_CACHE_MAX_REQUESTS + 1], MIB);
  CHECK_EQ(stats(c).refused, 1);
  gate(false);
  pin_cache_flush(c);
  CHECK_EQ(stats(c).pins, PIN_CACHE_MAX_REQUESTS + 1);
  pin_cache_close(c);
  for (unsigned i = 0; i < PIN_CACHE_MAX_REQUESTS + 2; i++)
    munmap(p[i], MIB);
}

TEST(an_owner_closing_unpins_its_ranges_and_orphans_those_in_use) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *a = map(2 * MIB), *b = map(2 * MIB), *d = map(2 * MIB);
  pin_now(c, &owner_a, a, 2 * MIB);
  pin_now(c, &owner_b, b, 2 * MIB);
  pin_now(c, &owner_a, d, 2 * MIB);
  pin_range *held;
  CHECK_EQ(pin_cache_use(c, d, MIB, fake_pinned, &held), PIN_HIT);
  pin_cache_owner_closing(c, &owner_a, true);
  CHECK_EQ(fake_unpins, 1); /* a; d is in use */
  CHECK_EQ(use(c, a, MIB), PIN_PAGEABLE);
  CHECK_EQ(use(c, d, MIB), PIN_PAGEABLE); /* orphaned: its context is going */
  CHECK_EQ(use(c, b, MIB), PIN_HIT);
  pin_cache_release(held);
  pin_cache_flush(c);
  CHECK_EQ(fake_unpins, 1); /* an orphan is never unpinned... */
  CHECK_EQ(stats(c).ranges, 2);
  CHECK_EQ(use(c, d, MIB), PIN_PAGEABLE); /* ...nor trusted, while its context may live */
  pin_cache_owner_gone(c, &owner_a);
  CHECK_EQ(stats(c).ranges, 1);
  pin_cache_owner_closing(c, &owner_b, false); /* a context that cannot be called */
  CHECK_EQ(fake_unpins, 1);
  CHECK_EQ(stats(c).ranges, 1);
  CHECK(fake_pinned(b, MIB));             /* the driver still has it... */
  CHECK_EQ(use(c, b, MIB), PIN_PAGEABLE); /* ...the cache does not trust it */
  pin_cache_owner_gone(c, &owner_b);
  CHECK_EQ(stats(c).ranges, 0);
  pin_cache_close(c);
  CHECK_EQ(fake_unpins, 1);
  munmap(a, 2 * MIB);
  munmap(b, 2 * MIB);
  munmap(d, 2 * MIB);
}

/* A range with a hole when it is watched: memory mapped into the hole while the registrar
 * runs would be pinned and never watched; the check after the registrar refuses it. */
TEST(a_hole_filled_while_pinning_is_not_trusted) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(4 * MIB);
  CHECK_EQ(munmap(p + 2 * MIB, 2 * MIB), 0);
  gate(true);
  pin_cache_note(c, &owner_a, p, 4 * MIB);
  pin_cache_note(c, &owner_a, p, 4 * MIB);
  wait_in_pin();
  char *b = mmap(p + 2 * MIB, 2 * MIB, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(b == p + 2 * MIB);
  gate(false);
  pin_cache_flush(c);
  CHECK_EQ(stats(c).pin_failed, 1);
  CHECK_EQ(fake_count(), 0); /* pinned, then unpinned at once */
  CHECK_EQ(use(c, p, 4 * MIB), PIN_PAGEABLE);
  pin_cache_close(c);
  munmap(p, 4 * MIB);
}

/* Shared memory changes under a mapping without an event (truncation): never pinned. */
TEST(shared_memory_is_never_pinned) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  int fd = memfd_create("pin-cache-test", MFD_CLOEXEC);
  CHECK(fd >= 0);
  CHECK_EQ(ftruncate(fd, 2 * MIB), 0);
  char *p = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(p != MAP_FAILED);
  memset(p, 1, 2 * MIB);
  pin_now(c, &owner_a, p, 2 * MIB);
  CHECK_EQ(stats(c).pins, 0);
  CHECK_EQ(fake_count(), 0);
  CHECK_EQ(use(c, p, MIB), PIN_PAGEABLE);
  /* A private mapping of a file is not private anonymous memory either. */
  char *q = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  CHECK(q != MAP_FAILED);
  pin_now(c, &owner_a, q, 2 * MIB);
  CHECK_EQ(stats(c).pins, 0);
  pin_cache_close(c);
  munmap(p, 2 * MIB);
  munmap(q, 2 * MIB);
  close(fd);
}

/* A dying range that stays in use must not stop every later pin (it cannot make room). */
TEST(a_dying_range_in_use_does_not_stop_all_pinning) {
  pin_cache *c;
  OPEN_CACHE(c, 8 * MIB);
  char *a = map(4 * MIB), *b = map(4 * MIB), *d = map(2 * MIB), *e = map(2 * MIB);
  pin_now(c, &owner_a, a, 4 * MIB);
  pin_range *held;
  CHECK_EQ(pin_cache_use(c, a, MIB, fake_pinned, &held), PIN_HIT);
  CHECK_EQ(munmap(a, 4 * MIB), 0); /* dying, held for good */
  pin_now(c, &owner_a, b, 4 * MIB);
  CHECK_EQ(use(c, b, MIB), PIN_HIT);
  pin_now(c, &owner_a, d, 2 * MIB); /* no room unless b goes: b is idle, so it does */
  CHECK_EQ(use(c, d, MIB), PIN_HIT);
  pin_now(c, &owner_a, e, 2 * MIB);
  CHECK_EQ(use(c, e, MIB), PIN_HIT);
  CHECK_EQ(stats(c).evicted, 1);
  pin_cache_release(held);
  pin_cache_close(c);
  munmap(b, 4 * MIB);
  munmap(d, 2 * MIB);
  munmap(e, 2 * MIB);
}

static atomic_bool gate_opened;

static void *open_gate_later(void *arg) {
  (void)arg;
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_store(&gate_opened, true);
  gate(false);
  return NULL;
}

TEST(an_owner_closing_waits_for_the_pinner_working_for_it) {
  pin_cache *c;
  OPEN_CACHE(c, 64 * MIB);
  char *p = map(2 * MIB);
  gate(true);
  pin_cache_note(c, &owner_a, p, 2 * MIB);
  pin_cache_note(c, &owner_a, p, 2 * MIB);
  wait_in_pin();
  atomic_store(&gate_opened, false);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, open_gate_later, NULL), 0);
  pin_cache_owner_closing(c, &owner_a, true); /* waits out the registrar's call, then unpins */
  CHECK(atomic_load(&gate_opened));
  CHECK_EQ(fake_pins, 1);
  CHECK_EQ(fake_count(), 0);
  CHECK_EQ(stats(c).ranges, 0);
  pthread_join(t, NULL);
  pin_cache_close(c);
  munmap(p, 2 * MIB);
}

TEST(without_a_cache_the_driver_decides) {
  char *p = map(MIB);
  pin_range *r;
  fake_reset();
  CHECK_EQ(pin_cache_use(NULL, p, MIB, fake_pinned, &r), PIN_PAGEABLE);
  CHECK(r == NULL);
  CHECK_OK(fake_pin(&owner_a, p, MIB));
  CHECK_EQ(pin_cache_use(NULL, p, MIB, fake_pinned, &r), PIN_PINNED);
  fake_unpin(&owner_a, p);
  pin_cache_note(NULL, &owner_a, p, MIB); /* nothing to do, no crash */
  pin_cache_flush(NULL);
  pin_cache_owner_closing(NULL, &owner_a, true);
  munmap(p, MIB);
}

TEST(open_refuses_bad_arguments) {
  pin_cache *c = (pin_cache *)&owner_a;
  CHECK_ERR(pin_cache_open(NULL, MIB, &c), ACCEL_EINVAL);
  CHECK(c == NULL);
  CHECK_ERR(pin_cache_open(&fake_registrar, 0, &c), ACCEL_EINVAL);
  pin_registrar half = {.pin = fake_pin};
  CHECK_ERR(pin_cache_open(&half, MIB, &c), ACCEL_EINVAL);
  CHECK_ERR(pin_cache_open(&fake_registrar, MIB, NULL), ACCEL_EINVAL);
}

/* Every allocation of open failed in turn: a clean error, nothing leaked; and the pinner's
 * allocation failing refuses the request without harm. */
TEST(allocation_failures) {
  fa_install();
  long long live = fa_live();
  for (unsigned long long n = 1;; n++) {
    fa_arm(n);
    pin_cache *c = NULL;
    int rc = pin_cache_open(&fake_registrar, 64 * MIB, &c);
    bool failed = fa_failed();
    fa_disarm();
    if (rc == ACCEL_ENOTSUP)
      TEST_SKIP("userfaultfd is not available here");
    if (!failed) {
      CHECK_OK(rc);
      char *p = map(2 * MIB);
      fa_arm(1); /* the pinner's next allocation */
      pin_now(c, &owner_a, p, 2 * MIB);
      fa_disarm();
      CHECK_EQ(stats(c).refused, 1); /* the pinner had no memory for the range */
      CHECK_EQ(stats(c).pins, 0);
      pin_cache_close(c);
      munmap(p, 2 * MIB);
      break;
    }
    CHECK_ERR(rc, ACCEL_ENOMEM);
    CHECK(c == NULL);
    CHECK_EQ(fa_live(), live);
  }
  CHECK_EQ(fa_live(), live);
}

static const test_case tests[] = {
    TEST_CASE(memory_copied_once_is_never_pinned),
    TEST_CASE(memory_freed_and_mapped_again_between_two_copies_is_not_pinned),
    TEST_CASE(ranges_seen_once_at_their_limit_and_one_past),
    TEST_CASE(memory_copied_twice_is_pinned_and_copies_inside_it_hit),
    TEST_CASE(an_unmapped_range_is_never_used_again_once_munmap_returns),
    TEST_CASE(part_of_a_range_unmapped_kills_all_of_it),
    TEST_CASE(madvise_dontneed_kills_the_range),
    TEST_CASE(mremap_kills_the_range),
    TEST_CASE(unmapped_before_the_pinner_gets_to_it_is_not_pinned),
    TEST_CASE(unmapped_while_being_pinned_is_unpinned_at_once),
    TEST_CASE(a_registrar_failure_leaves_nothing_pinned),
    TEST_CASE(the_bound_at_max_and_one_page_past),
    TEST_CASE(a_range_in_use_is_neither_evicted_nor_unpinned),
    TEST_CASE(the_range_count_at_its_limit_and_one_past),
    TEST_CASE(the_request_queue_at_its_limit_and_one_past),
    TEST_CASE(an_owner_closing_unpins_its_ranges_and_orphans_those_in_use),
    TEST_CASE(an_owner_closing_waits_for_the_pinner_working_for_it),
    TEST_CASE(a_hole_filled_while_pinning_is_not_trusted),
    TEST_CASE(shared_memory_is_never_pinned),
    TEST_CASE(a_dying_range_in_use_does_not_stop_all_pinning),
    TEST_CASE(without_a_cache_the_driver_decides),
    TEST_CASE(open_refuses_bad_arguments),
    TEST_CASE(allocation_failures),
};

TEST_MAIN(tests)
