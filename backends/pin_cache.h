/* The pin cache: caller memory made ready for DMA where it is reused (a registration cache, as
 * MPI libraries and libfabric keep for RDMA).
 *
 * A backend whose copies of pageable host memory go through a CPU staging copy (CUDA) asks
 * the cache before each host copy (pin_cache_use) and tells it of each staged copy of
 * PIN_CACHE_MIN bytes or more (pin_cache_note). A range (whole pages) noted twice is pinned by
 * the cache's pinner thread through the backend's registrar (cuMemHostRegister), and copies
 * inside it then go straight by DMA. A range is watched (below) from its first sighting, so
 * memory freed and allocated again at the same address in between starts over. Pinning costs about
 * what one staged copy costs (on the H100 host: 256 MiB pinned in 11.6 ms, unpinned in 4.5 ms,
 * staged at 7 GB/s per thread), so only reuse pays it back: memory copied once is not pinned.
 *
 * Why a watch. A driver keeps its registration of an address range after the memory there is
 * unmapped, and DMA "from" that range then reads the old physical pages, not what is mapped
 * there now (measured with CUDA: register, munmap, mmap at the same address, write new bytes;
 * a copy to the GPU delivered the old ones). So every range the cache pins is watched with
 * userfaultfd, in write-protect mode with no page protected: no fault ever reaches the cache,
 * only the events UNMAP (munmap, brk, mmap over it), REMOVE (madvise DONTNEED/REMOVE) and
 * REMAP (mremap). The kernel holds the unmapping thread until the event is read; the watcher
 * thread reads events under the cache's lock and marks the ranges dying before it lets go, so
 * once munmap has returned no pin_cache_use answers PIN_HIT for that memory. A dying range
 * stays in the table until the pinner has unpinned it: until then copies that touch it are
 * staged, whatever the driver says of the address. Where userfaultfd cannot be had (an old
 * kernel, a seccomp profile), pin_cache_open fails and the backend stages as before.
 *
 * Bounded: the bytes pinned never exceed `max`; to make room the least recently used ranges
 * not in use are unpinned; a range that cannot fit is not pinned. A range is in use from a
 * PIN_HIT until its pin_cache_release (after the DMA): it is never unpinned in use.
 *
 * Owners: each range is pinned through one owner (a device; its context holds the
 * registration). pin_cache_owner_closing, before the owner's context ends, unpins its ranges
 * not in use and orphans the others; pin_cache_owner_gone, once it has ended, lets them go.
 *
 * Threads: every entry may be called from any thread. use and note take the lock for a scan of
 * the table (at most PIN_CACHE_MAX_RANGES + 64 ranges) and never wait for the driver under it;
 * release never takes it (a driver's host function may call it). The registrar runs on the
 * pinner thread, or on the thread of pin_cache_owner_closing / pin_cache_close. */
#ifndef BACKENDS_PIN_CACHE_H
#define BACKENDS_PIN_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/attr.h"

#define PIN_CACHE_MIN (1u << 20)   /* smaller copies are not noted */
#define PIN_CACHE_MAX_RANGES 512u  /* pinned, being pinned or dying (each splits a mapping) */
#define PIN_CACHE_MAX_REQUESTS 16u /* noted twice and waiting for the pinner */
/* Besides those, up to 64 ranges seen once are watched (the oldest not asked for goes). */

typedef struct pin_cache pin_cache;
typedef struct pin_range pin_range;

/* What the backend does for the cache. Both block (the pinner thread calls them). */
typedef struct pin_registrar {
  int (*pin)(void *owner, void *base, size_t bytes); /* 0 or an accel error */
  void (*unpin)(void *owner, void *base);
} pin_registrar;

typedef enum pin_answer {
  PIN_PAGEABLE, /* stage it (and note it) */
  PIN_PINNED,   /* the driver says pinned and the cache has none of it: the caller's own */
  PIN_HIT,      /* inside a range the cache pinned: held until pin_cache_release */
} pin_answer;

typedef struct pin_cache_stats {
  uint64_t hits;        /* copies inside a pinned range */
  uint64_t avoided;     /* copies staged because they touch a range being pinned or dying */
  uint64_t noted;       /* staged copies noted */
  uint64_t pins;        /* ranges pinned */
  uint64_t pin_failed;  /* the watch or the registrar refused (no mapping, driver error) */
  uint64_t refused;     /* not pinned: too large for max, no room, overlapping, queue full */
  uint64_t invalidated; /* ranges that died by unmap, madvise or mremap */
  uint64_t evicted;     /* ranges unpinned to make room */
  uint64_t unpinned;    /* ranges unpinned (invalidated, evicted or owner closing) */
  uint64_t pinned_bytes, ranges; /* registered (or being registered, or let go) */
  uint64_t seen;                 /* ranges seen once and watched, not registered */
} pin_cache_stats;

/* ACCEL_ENOTSUP without userfaultfd (its events or its write-protect mode), ACCEL_ENOMEM, or
 * ACCEL_EINVAL (reg NULL or max 0). */
RT_MUST_USE int pin_cache_open(const pin_registrar *reg, size_t max, pin_cache **out);
/* Stops the threads; unpins every range not orphaned. A range still held is one whose release
 * will never come (a copy that failed): it goes too. */
void pin_cache_close(pin_cache *c);
void pin_cache_set_max(pin_cache *c, size_t max); /* takes effect at the next pin */

/* How to copy [p, p + bytes): `pinned` is the driver's view (called without the lock). With
 * c NULL: the driver's view only. On PIN_HIT *r holds the range until pin_cache_release. */
pin_answer pin_cache_use(pin_cache *c, const void *p, size_t bytes,
                         bool (*pinned)(const void *p, size_t bytes), pin_range **r);
void pin_cache_release(pin_range *r);
/* A copy of [p, p + bytes) was staged by owner (bytes >= PIN_CACHE_MIN, else ignored). */
void pin_cache_note(pin_cache *c, void *owner, const void *p, size_t bytes);

/* The owner's context is about to end: waits for the pinner's call for it to return, then
 * unpins the owner's ranges not in use and orphans the others (in use, or all with unpin
 * false, when its context cannot be called). An orphan is never unpinned and stays in the
 * table, dying and watched (copies that touch it are staged), until pin_cache_owner_gone
 * says the context, and so whatever the driver still registers in it, is gone. Requests of
 * the owner are dropped. */
void pin_cache_owner_closing(pin_cache *c, void *owner, bool unpin);
void pin_cache_owner_gone(pin_cache *c, void *owner);

/* Waits until the pinner has nothing left to do (tests and benchmarks). */
void pin_cache_flush(pin_cache *c);
void pin_cache_stats_get(pin_cache *c, pin_cache_stats *out);

#endif
