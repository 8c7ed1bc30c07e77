/* The cuda backend's pin cache (backends/pin_cache.h): caller memory that is copied again and
 * again is registered (cuMemHostRegister) and then moved by DMA at pinned speed; memory used
 * once goes through the stager as before (copy.c).
 *
 * One cache for the process, shared by every device: a registration is portable (every
 * context may DMA from it) and the driver refuses to register an address range twice. Made
 * when a device that wants one opens (a device opened with BE_PINNED_OFF does not make one,
 * but uses one that is there: its copies must not trust the driver where the cache does
 * not), closed when the last device closes. A range is registered in the
 * context of the device whose copy asked for it (its owner); before a context ends
 * (be_cuda_dissolve) its ranges are unregistered, or forgotten if the context is lost. */
#include <stdatomic.h>
#include <unistd.h>

#include "accel/error.h"
#include "accel/runtime.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"

static pthread_mutex_t pins_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(pin_cache *) pins;
static unsigned pins_devices;
static bool pins_refused; /* said once why there is none */

static int pin_fn(void *owner, void *base, size_t bytes) {
  return be_cuda_host_register(owner, base, bytes);
}

static void unpin_fn(void *owner, void *base) {
  be_cuda_host_unregister(owner, base);
}

static const pin_registrar registrar = {.pin = pin_fn, .unpin = unpin_fn};

/* A quarter of the host's memory. */
static uint64_t default_max(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t all = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 4ull << 30;
  return all / 4;
}

void be_cuda_pins_attach(const be_open_opts *opts) {
  uint64_t max = opts != NULL ? opts->pinned_max : 0;
  pthread_mutex_lock(&pins_lock);
  pins_devices++;
  pin_cache *c = atomic_load(&pins);
  if (max == BE_PINNED_OFF) {
    pthread_mutex_unlock(&pins_lock);
    return;
  }
  if (max == 0)
    max = default_max();
  if (c != NULL) {
    pin_cache_set_max(c, (size_t)max);
  } else {
    int rc = pin_cache_open(&registrar, (size_t)max, &c);
    if (rc == 0)
      atomic_store(&pins, c);
    else if (!pins_refused)
      accel_log(ACCEL_LOG_WARN, "cuda",
                "no pin cache (%s): copies of pageable memory are staged, never registered",
                rc == ACCEL_ENOTSUP ? "userfaultfd is not available" : accel_strerror(rc));
    pins_refused |= rc != 0;
  }
  pthread_mutex_unlock(&pins_lock);
}

void be_cuda_pins_detach(void) {
  pthread_mutex_lock(&pins_lock);
  pin_cache *c = NULL;
  if (--pins_devices == 0)
    c = atomic_exchange(&pins, NULL);
  pthread_mutex_unlock(&pins_lock);
  pin_cache_close(c); /* every owner closed before: only orphans are left */
}

pin_cache *be_cuda_pins(void) {
  return atomic_load_explicit(&pins, memory_order_acquire);
}

void be_cuda_pins_owner_closing(be_device *dev, bool unpin) {
  pin_cache_owner_closing(be_cuda_pins(), dev, unpin);
}

void be_cuda_pins_owner_gone(be_device *dev) {
  pin_cache_owner_gone(be_cuda_pins(), dev);
}

void be_cuda_pin_stats(pin_cache_stats *out) {
  pin_cache_stats_get(be_cuda_pins(), out);
}

void be_cuda_pin_flush(void) {
  pin_cache_flush(be_cuda_pins());
}
