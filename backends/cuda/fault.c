/* Sticky faults of the cuda backend (device.h, "Faults"). */
#include <sched.h>

#include "accel/error.h"
#include "backends/cuda/device.h"

bool be_cuda_lost(be_device *dev) {
  int f = atomic_load(&dev->fault);
  while (f == BE_CUDA_FAULTING) {
    sched_yield(); /* a host-side copy is finishing: a chunk's memcpy at most */
    f = atomic_load(&dev->fault);
  }
  return f != BE_CUDA_OK;
}

bool be_cuda_gen_lost(be_device *dev, unsigned gen) {
  return gen != atomic_load(&dev->gen) || be_cuda_lost(dev);
}

static void *reap(void *arg) {
  pthread_setname_np(pthread_self(), "accel-cu-reap"); /* seen in top -H, gdb */
  be_cuda_callbacks_fail(arg);
  return NULL;
}

void be_cuda_fault(be_device *dev) {
  int ok = BE_CUDA_OK;
  if (!atomic_compare_exchange_strong(&dev->fault, &ok, BE_CUDA_FAULTING)) {
    be_cuda_lost(dev); /* another thread is marking it: wait until it is done */
    return;
  }
  pthread_rwlock_wrlock(&dev->copy_lock); /* waits out the copies in progress */
  pthread_rwlock_unlock(&dev->copy_lock);
  atomic_store(&dev->fault, BE_CUDA_LOST);
  be_cuda_trace("device marked lost", CUDA_SUCCESS);
  pthread_mutex_lock(&dev->reap_lock);
  bool started = pthread_create(&dev->reaper, NULL, reap, dev) == 0;
  dev->reaper_started = started;
  pthread_mutex_unlock(&dev->reap_lock);
  if (!started)
    be_cuda_callbacks_fail(dev); /* no thread to spare: here, then */
}

void be_cuda_reap_wait(be_device *dev) {
  pthread_mutex_lock(&dev->reap_lock);
  if (dev->reaper_started) {
    pthread_join(dev->reaper, NULL);
    dev->reaper_started = false;
  }
  pthread_mutex_unlock(&dev->reap_lock);
}

int be_cuda_check(be_device *dev, CUresult r) {
  if (r == CUDA_SUCCESS)
    return 0;
  if (be_cuda_sticky(r))
    be_cuda_fault(dev);
  return be_cuda_err(r);
}

bool be_cuda_copy_begin(be_device *dev) {
  pthread_rwlock_rdlock(&dev->copy_lock);
  if (atomic_load(&dev->fault) == BE_CUDA_OK)
    return true;
  pthread_rwlock_unlock(&dev->copy_lock);
  return false;
}

void be_cuda_copy_end(be_device *dev) {
  pthread_rwlock_unlock(&dev->copy_lock);
}
