/* The cpu backend: one device, the host. Its queues are worker threads (queue.c), its memory
 * host blocks (memory.c), its kernels OpenBLAS and plain C (cpu_kernels.h). This file holds the
 * device's life cycle, its faults and the ops table. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/error.h"
#include "backends/cpu/backend_cpu.h"
#include "backends/cpu/queue.h"
#include "runtime/alloc.h"

/* An idle worker's poll before it sleeps (device.h). Long enough to catch the next op of a
 * caller that turns results around quickly, short enough that an idle daemon idles. */
#define BE_CPU_SPIN_NS 20000

/* ---- discovery and information ------------------------------------------------------- */

static int cpu_probe(int *count, char *why, size_t why_len) {
  if (count == NULL)
    return ACCEL_EINVAL;
  *count = 1;
  if (why != NULL && why_len > 0)
    why[0] = '\0';
  return 0;
}

/* The value of /proc/cpuinfo's first "model name" line, or "cpu". */
static void cpu_model_name(char *name, size_t len) {
  snprintf(name, len, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL)
    return;
  char line[256];
  while (fgets(line, sizeof line, f) != NULL) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || colon == NULL)
      continue;
    colon += strspn(colon + 1, " \t") + 1;
    colon[strcspn(colon, "\n")] = '\0';
    if (*colon != '\0')
      snprintf(name, len, "%s", colon);
    break;
  }
  fclose(f);
}

static void cpu_fill_info(be_device_info *info) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_model_name(info->name, sizeof info->name);
  info->mem_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  info->compute_units = cores > 0 ? (uint32_t)cores : 1;
}

static int cpu_info(be_device *dev, be_device_info *out) {
  if (dev == NULL || out == NULL)
    return ACCEL_EINVAL;
  *out = dev->info;
  return 0;
}

/* How long a worker polls for more work (and event_sync for completion) before sleeping:
 * ACCEL_CPU_SPIN_US if set, else BE_CPU_SPIN_NS when there are cores to spare (more than
 * two: the loop, a client and a worker already fill two), else 0. On a busy 2-core machine
 * spinning takes the core the awaited thread needs. */
static uint64_t cpu_spin_ns(uint32_t cores) {
  const char *s = getenv("ACCEL_CPU_SPIN_US");
  char *end = NULL;
  unsigned long us = s ? strtoul(s, &end, 10) : 0;
  if (s && *s && *end == '\0')
    return (uint64_t)us * 1000;
  return cores > 2 ? BE_CPU_SPIN_NS : 0;
}

/* ---- open and close ------------------------------------------------------------------ */

/* opts->threads bounds OpenBLAS's own pool, which is process-wide (there is one cpu device). */
static int cpu_open(int index, const be_open_opts *opts, be_device **out) {
  if (out == NULL)
    return ACCEL_EINVAL;
  if (index != 0)
    return ACCEL_ENOENT;
  be_device *dev = rt_calloc(1, sizeof *dev);
  if (dev == NULL)
    return ACCEL_ENOMEM;
  if (pthread_mutex_init(&dev->lock, NULL) != 0) {
    rt_free(dev);
    return ACCEL_ESYS;
  }
  atomic_init(&dev->refs, 1);
  atomic_init(&dev->fault, false);
  atomic_init(&dev->gen, 0);
  dev->fault_injection = opts != NULL && opts->fault_injection != 0;
  rt_list_init(&dev->queues);
  rt_list_init(&dev->blocks);
  cpu_fill_info(&dev->info);
  dev->spin_ns = cpu_spin_ns(dev->info.compute_units);
  if (opts != NULL && opts->threads > 0)
    openblas_set_num_threads(opts->threads > 4096 ? 4096 : (int)opts->threads);
  *out = dev;
  return 0;
}

void be_cpu_dev_ref(be_device *dev) {
  atomic_fetch_add_explicit(&dev->refs, 1, memory_order_relaxed);
}

void be_cpu_dev_unref(be_device *dev) {
  if (atomic_fetch_sub_explicit(&dev->refs, 1, memory_order_acq_rel) != 1)
    return;
  pthread_mutex_destroy(&dev->lock);
  rt_free(dev);
}

/* Drains and frees the queues left, then frees the memory left. Events are not the device's
 * to free (event_destroy may come later); the struct itself lives on while they do. */
static void cpu_close(be_device *dev) {
  if (dev == NULL)
    return;
  for (;;) {
    pthread_mutex_lock(&dev->lock);
    rt_list *first = dev->queues.next;
    pthread_mutex_unlock(&dev->lock);
    if (first == &dev->queues)
      break;
    be_cpu_queue_destroy((be_queue *)first); /* unlinks it */
  }
  be_cpu_mem_free_all(dev);
  be_cpu_dev_unref(dev);
}

/* ---- faults -------------------------------------------------------------------------- */

static int cpu_status(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  return atomic_load(&dev->fault) ? ACCEL_EDEVLOST : 0;
}

/* Wakes every waiter on every queue: what they wait for has just become lost. */
static void wake_all(be_device *dev) {
  pthread_mutex_lock(&dev->lock);
  for (rt_list *l = dev->queues.next; l != &dev->queues; l = l->next)
    be_cpu_queue_wake((be_queue *)l);
  pthread_mutex_unlock(&dev->lock);
}

static int cpu_inject_fault(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  if (!dev->fault_injection)
    return ACCEL_EPERM;
  atomic_store(&dev->fault, true);
  wake_all(dev);
  return 0;
}

/* Callers destroy the old context's queues and events first (backend.h); should some remain,
 * they stay lost for good (their generation is old) and close frees the queues. Memory stays
 * allocated: host memory is not lost, and its owners or close free it. Generation first, then
 * the flag: an old object never looks alive in between (device.h). */
static int cpu_reset(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  atomic_fetch_add(&dev->gen, 1);
  atomic_store(&dev->fault, false);
  wake_all(dev);
  return 0;
}

/* ---- queues -------------------------------------------------------------------------- */

static int cpu_queue_create(be_device *dev, be_queue **out) {
  if (dev == NULL || out == NULL)
    return ACCEL_EINVAL;
  if (atomic_load(&dev->fault))
    return ACCEL_EDEVLOST;
  return be_cpu_queue_create(dev, out);
}

static void cpu_queue_destroy(be_queue *q) {
  if (q != NULL)
    be_cpu_queue_destroy(q);
}

const be_ops be_cpu_ops = {
    .abi_version = BE_ABI_VERSION,
    .name = "cpu",
    .probe = cpu_probe,
    .open = cpu_open,
    .close = cpu_close,
    .info = cpu_info,
    .status = cpu_status,
    .reset = cpu_reset,
    .inject_fault = cpu_inject_fault,
    .queue_create = cpu_queue_create,
    .queue_destroy = cpu_queue_destroy,
    .mem_alloc = be_cpu_mem_alloc,
    .mem_free = be_cpu_mem_free,
    .mem_share = be_cpu_mem_share,
    .mem_address = be_cpu_mem_address,
    .mem_wrap = be_cpu_mem_wrap,
    .mem_unwrap = be_cpu_mem_unwrap,
    .copy_h2d = be_cpu_submit_h2d,
    .copy_d2h = be_cpu_submit_d2h,
    .copy_d2d = be_cpu_submit_d2d,
    .can_peer = be_cpu_can_peer,
    .copy_peer = be_cpu_submit_peer,
    .event_create = be_cpu_event_create,
    .event_destroy = be_cpu_event_destroy,
    .event_record = be_cpu_event_record,
    .event_query = be_cpu_event_query,
    .event_sync = be_cpu_event_sync,
    .queue_wait = be_cpu_queue_wait_event,
    .host_callback = be_cpu_submit_callback,
    .host_notify = be_cpu_submit_notify,
    .any_thread = true,
    .fill = be_cpu_submit_fill,
    .blas = &be_cpu_blas,
    .rng = &be_cpu_rng,
    .nn = &be_cpu_nn,
    .collective = &be_cpu_collective,
};
