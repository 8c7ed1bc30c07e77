/* The cuda backend: CUDA devices through the Driver API, loaded at run time (driver.h). This
 * file holds discovery, the device's life cycle, its faults and the ops table; device.h says
 * how the pieces fit. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/nccl_lib.h"
#include "backends/cuda/nvrtc_lib.h"
#include "backends/nvml/nvml.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"

/* How long inject_fault waits for its kernel to break the context (a kernel ahead of it may
 * hold every multiprocessor for a while). */
#define BE_CUDA_FAULT_WAIT_NS 5000000000ull

/* Threads per large pageable copy by default, at most (stage.c): three quarters of the cores,
 * up to this. One thread copies about 5 GB/s on the H200 machine's host, and the DMA engine
 * moves 55 GB/s: a dozen threads keep up with it. */
#define BE_CUDA_COPY_THREADS_MAX 16

/* ---- discovery ------------------------------------------------------------------------ */

static int cuda_probe(int *count, char *why, size_t why_len) {
  if (count == NULL)
    return ACCEL_EINVAL;
  *count = 0;
  int rc = be_cuda_driver_load(why, why_len);
  if (rc != 0)
    return rc;
  int n = 0;
  CUresult r = be_cu.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n <= 0) {
    if (why != NULL && why_len > 0)
      snprintf(why, why_len, "%s", r == CUDA_SUCCESS ? "no device" : be_cuda_err_name(r));
    return ACCEL_ENOTSUP;
  }
  *count = n;
  return 0;
}

static int attribute(CUdevice cu, CUdevice_attribute a) {
  int v = 0;
  return be_cu.cuDeviceGetAttribute(&v, a, cu) == CUDA_SUCCESS ? v : 0;
}

static void fill_info(be_device *dev) {
  size_t mem = 0;
  if (be_cu.cuDeviceGetName(dev->info.name, (int)sizeof dev->info.name, dev->cu) != CUDA_SUCCESS)
    snprintf(dev->info.name, sizeof dev->info.name, "cuda:%d", dev->index);
  dev->info.name[sizeof dev->info.name - 1] = '\0';
  be_cu.cuDeviceTotalMem(&mem, dev->cu);
  dev->info.mem_bytes = mem;
  dev->sms = attribute(dev->cu, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  dev->info.compute_units = dev->sms > 0 ? (uint32_t)dev->sms : 1;
  dev->info.kind = BE_KIND_GPU;
  dev->cc = attribute(dev->cu, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
            attribute(dev->cu, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  char bus[32];
  if (be_cu.cuDeviceGetPCIBusId == NULL ||
      be_cu.cuDeviceGetPCIBusId(bus, (int)sizeof bus, dev->cu) != CUDA_SUCCESS ||
      !be_pci_bus_id_normalize(bus, dev->info.pci_bus_id, sizeof dev->info.pci_bus_id))
    dev->info.pci_bus_id[0] = '\0'; /* no telemetry matched to it */
}

static int cuda_info(be_device *dev, be_device_info *out) {
  if (dev == NULL || out == NULL)
    return ACCEL_EINVAL;
  *out = dev->info;
  return 0;
}

/* ---- open and close ------------------------------------------------------------------- */

static bool env_is(const char *name, const char *value) {
  const char *v = getenv(name);
  return v != NULL && strcmp(v, value) == 0;
}

static unsigned default_copy_threads(void) {
  const char *env = getenv("ACCEL_CUDA_COPY_THREADS");
  long n = env != NULL ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN) * 3 / 4;
  return n < 1                                         ? 1
         : n > BE_CUDA_COPY_THREADS_MAX && env == NULL ? BE_CUDA_COPY_THREADS_MAX
                                                       : (unsigned)n;
}

static be_device *dev_new(int index, const be_open_opts *opts) {
  be_device *dev = rt_calloc(1, sizeof *dev);
  if (dev == NULL)
    return NULL;
  atomic_init(&dev->refs, 1);
  atomic_init(&dev->fault, BE_CUDA_OK);
  atomic_init(&dev->aborted, false);
  atomic_init(&dev->gen, 0);
  atomic_init(&dev->syncing, 0);
  atomic_init(&dev->tf32, (opts && opts->tf32) || env_is("ACCEL_CUDA_TF32", "1"));
  atomic_init(&dev->memops, !env_is("ACCEL_CUDA_STAGER", "0"));
  atomic_init(&dev->gemm_graphs, !env_is("ACCEL_CUDA_GEMM_GRAPHS", "0"));
  dev->index = index;
  dev->fault_injection = opts != NULL && opts->fault_injection != 0;
  dev->primary_wanted = opts != NULL && opts->primary_context != 0;
  dev->copy_threads = default_copy_threads();
  pthread_rwlock_init(&dev->copy_lock, NULL);
  pthread_mutex_init(&dev->lock, NULL);
  pthread_mutex_init(&dev->cb_lock, NULL);
  pthread_mutex_init(&dev->reap_lock, NULL);
  pthread_cond_init(&dev->cb_idle, NULL);
  rt_list_init(&dev->queues);
  rt_list_init(&dev->blocks);
  rt_list_init(&dev->modules);
  rt_list_init(&dev->cbs);
  rt_list_init(&dev->orphans);
  return dev;
}

void be_cuda_dev_ref(be_device *dev) {
  atomic_fetch_add_explicit(&dev->refs, 1, memory_order_relaxed);
}

void be_cuda_dev_unref(be_device *dev) {
  if (atomic_fetch_sub_explicit(&dev->refs, 1, memory_order_acq_rel) != 1)
    return;
  pthread_cond_destroy(&dev->cb_idle);
  pthread_mutex_destroy(&dev->cb_lock);
  pthread_mutex_destroy(&dev->reap_lock);
  pthread_mutex_destroy(&dev->lock);
  pthread_rwlock_destroy(&dev->copy_lock);
  rt_free(dev->pool);
  rt_free(dev);
}

static int cuda_open(int index, const be_open_opts *opts, be_device **out) {
  if (out == NULL)
    return ACCEL_EINVAL;
  int count = 0, rc = cuda_probe(&count, NULL, 0);
  if (rc != 0)
    return rc;
  if (index < 0 || index >= count)
    return ACCEL_ENOENT;
  be_device *dev = dev_new(index, opts);
  if (dev == NULL)
    return ACCEL_ENOMEM;
  rc = be_cuda_err(be_cu.cuDeviceGet(&dev->cu, index));
  if (rc == 0) {
    fill_info(dev);
    /* Stream waits on host memory need host and device addresses to agree (stage.c). */
    if (!attribute(dev->cu, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING))
      atomic_store(&dev->memops, false);
    be_cuda_limits_read(dev);
    be_nvrtc(); /* looked for here, where blocking is allowed: sources() must not block */
    be_nccl();  /* and NCCL: the collectives' supports() must not block either */
    rc = be_cuda_incarnate(dev);
  }
  if (rc != 0) {
    be_cuda_dev_unref(dev);
    return rc;
  }
  be_cuda_pins_attach(opts);
  *out = dev;
  return 0;
}

/* The first queue still open, or NULL. */
static be_queue *first_queue(be_device *dev) {
  pthread_mutex_lock(&dev->lock);
  rt_list *l = dev->queues.next;
  pthread_mutex_unlock(&dev->lock);
  return l == &dev->queues ? NULL : (be_queue *)l;
}

/* Queues left open are destroyed (which waits for their work, unless the device is lost),
 * then memory left allocated is freed, then the incarnation goes, and the records of modules
 * left loaded with it. Events are not the device's to free: the struct lives on while they
 * do. */
static void cuda_close(be_device *dev) {
  if (dev == NULL)
    return;
  be_queue *q;
  while ((q = first_queue(dev)) != NULL)
    be_cuda_queue_destroy(q);
  be_cuda_mem_free_all(dev);
  be_cuda_dissolve(dev);
  be_cuda_modules_free_all(dev);
  pthread_mutex_lock(&dev->lock);
  dev->closed = true;
  pthread_mutex_unlock(&dev->lock);
  be_cuda_pins_detach();
  be_cuda_dev_unref(dev);
}

/* ---- faults --------------------------------------------------------------------------- */

static int cuda_status(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  return be_cuda_lost(dev) || dev->ctx == NULL ? ACCEL_EDEVLOST : 0;
}

/* Launches the fault kernel (mode 0: a trap, 1: an illegal write) and waits until the driver
 * reports the context broken. */
static void break_context(be_device *dev, int mode) {
  CUdeviceptr bad = (CUdeviceptr)1 << 47; /* maps nothing */
  void *args[] = {&mode, &bad};
  if (be_cuda_enter(dev) != 0 || be_cu.cuLaunchKernel(dev->fn[BE_FN_FAULT], 1, 1, 1, 1, 1, 1, 0,
                                                      dev->aux, args, NULL) != CUDA_SUCCESS)
    return;
  uint64_t t0 = rt_mono_ns();
  CUresult r;
  while ((r = be_cu.cuStreamQuery(dev->aux)) == CUDA_ERROR_NOT_READY &&
         rt_mono_ns() - t0 < BE_CUDA_FAULT_WAIT_NS)
    sched_yield();
  be_cuda_trace("fault kernel", r);
}

/* ACCEL_CUDA_FAULT: "trap" or "oob" break the context for real with the fault kernel; by
 * default ("soft") the device is only marked lost. A real break cannot be undone inside the
 * process on current drivers: after a sticky error even a new context cannot be made
 * (cuCtxCreate answers the error; measured on the H200, driver 580), so only the soft fault
 * lets a test go on to restart the device. Every other step is the same either way. */
static int fault_mode(void) {
  const char *v = getenv("ACCEL_CUDA_FAULT");
  return v == NULL ? -1 : strcmp(v, "trap") == 0 ? 0 : strcmp(v, "oob") == 0 ? 1 : -1;
}

/* The device is marked lost first, so that nothing that runs while the context breaks (a
 * callback the driver lets through) is taken for a success. Work in flight then fails as
 * after a real sticky error, whatever the driver says. */
static int cuda_inject_fault(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  if (!dev->fault_injection)
    return ACCEL_EPERM;
  bool live = !be_cuda_lost(dev) && dev->ctx != NULL;
  be_cuda_fault(dev);
  int mode = fault_mode();
  if (live && mode >= 0)
    break_context(dev, mode);
  return 0;
}

/* Work past its deadline: the device is lost from now on, as after a fault (pending callbacks
 * hear ACCEL_EDEVLOST, events report it, waits in event_sync end), and nothing waits for the
 * device any more (device.h, "Abort"): queue_destroy, close and reset return without it. The
 * work itself cannot be stopped inside the process on current drivers: its context is left
 * to end when it does (context.c, "Burial"); only the process's exit stops it for sure. */
static void cuda_abort(be_device *dev) {
  if (dev == NULL)
    return;
  atomic_store(&dev->aborted, true);
  be_cuda_trace("abort", CUDA_SUCCESS);
  be_cuda_fault(dev);
}

/* Callers destroy the old context's queues and events first (backend.h); stagers of queues
 * left behind are stopped, as their pinned memory goes with the context. */
static int cuda_reset(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  pthread_mutex_lock(&dev->lock);
  for (rt_list *l = dev->queues.next; l != &dev->queues; l = l->next)
    be_cuda_stage_free((be_queue *)l);
  pthread_mutex_unlock(&dev->lock);
  be_cuda_dissolve(dev);
  return be_cuda_incarnate(dev);
}

/* ---- beyond backend.h ----------------------------------------------------------------- */

uint64_t be_cuda_context(be_device *dev) {
  return dev == NULL ? 0 : (uint64_t)(uintptr_t)dev->ctx;
}

int be_cuda_set_copy_threads(be_device *dev, unsigned n) {
  if (dev == NULL || n == 0)
    return ACCEL_EINVAL;
  dev->copy_threads = n;
  return 0;
}

const be_ops be_cuda_ops = {
    .abi_version = BE_ABI_VERSION,
    .name = "cuda",
    .probe = cuda_probe,
    .open = cuda_open,
    .close = cuda_close,
    .info = cuda_info,
    .status = cuda_status,
    .reset = cuda_reset,
    .inject_fault = cuda_inject_fault,
    .abort = cuda_abort,
    .queue_create = be_cuda_queue_create,
    .queue_destroy = be_cuda_queue_destroy,
    .mem_alloc = be_cuda_mem_alloc,
    .mem_free = be_cuda_mem_free,
    .mem_share = be_cuda_mem_share,
    .mem_address = be_cuda_mem_address,
    .mem_wrap = be_cuda_mem_wrap,
    .mem_unwrap = be_cuda_mem_unwrap,
    .copy_h2d = be_cuda_copy_h2d,
    .copy_d2h = be_cuda_copy_d2h,
    .copy_d2d = be_cuda_copy_d2d,
    .can_peer = be_cuda_can_peer,
    .copy_peer = be_cuda_copy_peer,
    .host_register = be_cuda_host_register,
    .pin_stats = be_cuda_pin_stats,
    .host_unregister = be_cuda_host_unregister,
    .event_create = be_cuda_event_create,
    .event_destroy = be_cuda_event_destroy,
    .event_record = be_cuda_event_record,
    .event_query = be_cuda_event_query,
    .event_sync = be_cuda_event_sync,
    .queue_wait = be_cuda_queue_wait,
    .host_callback = be_cuda_callback,
    .host_notify = be_cuda_notify,
    .sticky_errors = true, /* a failed op faults the context: every later one fails too */
    .late_callbacks = true,
    .thread_enter = be_cuda_thread_enter,
    .thread_leave = be_cuda_thread_leave,
    .fill = be_cuda_fill,
    .blas = &be_cuda_blas,
    .rng = &be_cuda_rng,
    .nn = &be_cuda_nn,
    .module = &be_cuda_module,
    .collective = &be_cuda_coll,
};
