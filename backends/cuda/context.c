/* The cuda device's incarnation: its context, the module of built-in kernels and an internal
 * stream, made at open and after a reset, dissolved at reset and close (device.h).
 *
 * The context is the device's own (cuCtxCreate) by default, or the CUDA device's primary
 * context with ACCEL_CUDA_CONTEXT=primary (run on the H200 with the API completion and fault
 * checks). Why its own: a restart destroys it and makes another without touching anyone
 * else's, whereas resetting the
 * primary context after a fault pulls it from under every other user in the process (cuBLAS's
 * runtime retains it for good, and so may the application in embedded mode). Neither brings
 * the device back after a real sticky error on current drivers: then cuDevicePrimaryCtxRetain
 * and cuCtxCreate both answer the error (CUDA_ERROR_LAUNCH_FAILED after a trap; H200, driver
 * 580), and only a new process gets the GPU back (backend_cuda.c, inject_fault).
 */
#include <sched.h>
#include <string.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"

/* By be_cuda_fn index. */
static const char *const fn_names[BE_FN_COUNT] = {
    [BE_FN_FILL] = "be_fill_u32",
    [BE_FN_FILL_U64] = "be_fill_u64",
    [BE_FN_RNG_BITS] = "be_rng_bits",
    [BE_FN_RNG_UNIFORM] = "be_rng_uniform",
    [BE_FN_RNG_UNIFORM_F64] = "be_rng_uniform_f64",
    [BE_FN_RNG_UNIFORM_F16] = "be_rng_uniform_f16",
    [BE_FN_RNG_UNIFORM_BF16] = "be_rng_uniform_bf16",
    [BE_FN_RNG_NORMAL] = "be_rng_normal",
    [BE_FN_RNG_NORMAL_F64] = "be_rng_normal_f64",
    [BE_FN_RNG_NORMAL_F16] = "be_rng_normal_f16",
    [BE_FN_RNG_NORMAL_BF16] = "be_rng_normal_bf16",
    [BE_FN_SAXPY] = "be_saxpy",
    [BE_FN_DAXPY] = "be_daxpy",
    [BE_FN_SSCAL] = "be_sscal",
    [BE_FN_DSCAL] = "be_dscal",
    [BE_FN_DOT_PARTIAL] = "be_dot_partial",
    [BE_FN_DOT_PARTIAL_F64] = "be_dot_partial_f64",
    [BE_FN_DOT_FINAL] = "be_dot_final",
    [BE_FN_DOT_FINAL_F64] = "be_dot_final_f64",
#define BE_FN_ROW_(fn, name)                                                               \
  [fn] = name, [fn + 1] = name "_f64", [fn + 2] = name "_f16", [fn + 3] = name "_bf16"
    BE_FN_ROW_(BE_FN_SIGMOID, "be_sigmoid"),
    BE_FN_ROW_(BE_FN_RELU, "be_relu"),
    BE_FN_ROW_(BE_FN_TANH, "be_tanh"),
    BE_FN_ROW_(BE_FN_SOFTMAX, "be_softmax"),
    BE_FN_ROW_(BE_FN_SCALE, "be_scale"),
#undef BE_FN_ROW_
    [BE_FN_NULL] = "be_null",
    [BE_FN_FAULT] = "be_fault",
};

/* Resets of each device's primary context in this process. Every open device of one CUDA
 * device shares its primary context: after a fault each of them dissolves its incarnation,
 * and only the first may reset the context, or it would reset the fresh one another device
 * has made since. */
#define BE_CUDA_EPOCHS 64
static atomic_uint reset_epoch[BE_CUDA_EPOCHS];

static atomic_uint *epoch_of(be_device *dev)
{
  return dev->index >= 0 && dev->index < BE_CUDA_EPOCHS ? &reset_epoch[dev->index] : NULL;
}

/* Resets the primary context unless someone did since this incarnation began. The thread
 * lets go of the context first: the driver refuses to reset one that is current. */
static void reset_context(be_device *dev)
{
  atomic_uint *epoch = epoch_of(dev);
  unsigned seen = dev->epoch;
  if (epoch != NULL && !atomic_compare_exchange_strong(epoch, &seen, seen + 1)) {
    be_cuda_trace("primary context reset by another device already", CUDA_SUCCESS);
    return;
  }
  be_cu.cuCtxSetCurrent(NULL);
  be_cuda_trace("cuDevicePrimaryCtxReset", be_cu.cuDevicePrimaryCtxReset(dev->cu));
}

/* Incarnations get numbers unique in the process: a destroyed context's handle may come back
 * as the next one's, so a thread knows it has the right one current only by this number. */
static atomic_uint_fast64_t incarnations;
static _Thread_local uint64_t current_incarnation;

int be_cuda_enter(be_device *dev)
{
  CUcontext cur = NULL;
  if (current_incarnation == dev->incarnation &&
      be_cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == dev->ctx)
    return 0;
  CUresult r = be_cu.cuCtxSetCurrent(dev->ctx);
  if (r != CUDA_SUCCESS)
    return be_cuda_err(r);
  current_incarnation = dev->incarnation;
  return 0;
}

static bool want_primary(void)
{
  const char *v = getenv("ACCEL_CUDA_CONTEXT");
  return v != NULL && strcmp(v, "primary") == 0;
}

/* The context of a new incarnation, current on this thread. */
static CUresult context_make(be_device *dev)
{
  dev->primary = want_primary();
  dev->incarnation = atomic_fetch_add(&incarnations, 1) + 1;
  if (!dev->primary)
    return be_cuda_trace("cuCtxCreate", be_cu.cuCtxCreate(&dev->ctx, NULL, 0, dev->cu));
  atomic_uint *epoch = epoch_of(dev);
  dev->epoch = epoch != NULL ? atomic_load(epoch) : 0;
  return be_cuda_trace("retain", be_cu.cuDevicePrimaryCtxRetain(&dev->ctx, dev->cu));
}

/* Gives the context up: destroyed (our own) or released (primary, reset first if lost). */
static void context_end(be_device *dev, bool lost)
{
  if (!dev->primary) {
    be_cuda_trace("cuCtxDestroy", be_cu.cuCtxDestroy(dev->ctx));
  } else {
    if (lost)
      reset_context(dev);
    be_cu.cuDevicePrimaryCtxRelease(dev->cu);
  }
  dev->ctx = NULL;
}

static int load_module(be_device *dev)
{
  CUresult r = be_cuda_trace("module load", be_cu.cuModuleLoadData(&dev->module, be_cuda_fatbin));
  for (int i = 0; r == CUDA_SUCCESS && i < BE_FN_COUNT; i++)
    r = be_cu.cuModuleGetFunction(&dev->fn[i], dev->module, fn_names[i]);
  return be_cuda_err(r);
}

static void release_context(be_device *dev, bool lost)
{
  context_end(dev, lost);
  dev->module = NULL;
  dev->aux = NULL;
  for (int i = 0; i < BE_FN_COUNT; i++)
    dev->fn[i] = NULL;
}

static int try_incarnate(be_device *dev)
{
  CUresult r = context_make(dev);
  if (r != CUDA_SUCCESS) {
    dev->ctx = NULL;
    return be_cuda_err(r);
  }
  int rc = be_cuda_enter(dev);
  if (rc == 0)
    rc = load_module(dev);
  if (rc == 0)
    rc = be_cuda_err(be_cu.cuStreamCreate(&dev->aux, CU_STREAM_NON_BLOCKING));
  if (rc != 0) {
    if (dev->module != NULL)
      be_cu.cuModuleUnload(dev->module);
    release_context(dev, rc == ACCEL_EDEVLOST);
  }
  return rc;
}

int be_cuda_incarnate(be_device *dev)
{
  int rc = try_incarnate(dev);
  if (rc != 0)
    return rc == ACCEL_EDEVLOST ? ACCEL_EIO : rc;
  atomic_store(&dev->aborted, false);
  atomic_store(&dev->fault, BE_CUDA_OK);
  return 0;
}

static uint64_t be_cuda_fn_lookup(be_device *dev, const char *name)
{
  for (int i = 0; i < BE_FN_COUNT; i++)
    if (strcmp(fn_names[i], name) == 0)
      return (uint64_t)(uintptr_t)dev->fn[i];
  return 0;
}

uint64_t be_cuda_function(be_device *dev, const char *name)
{
  return dev == NULL || name == NULL || dev->ctx == NULL ? 0 : be_cuda_fn_lookup(dev, name);
}

/* Threads still inside event_sync hold handles of this incarnation: wait them out (they
 * return once their work completes, or at once on a lost device). */
static void wait_syncers(be_device *dev)
{
  while (atomic_load(&dev->syncing) > 0)
    sched_yield();
}

/* A healthy context: everything of the incarnation is idle (the queues were destroyed, and
 * that waited for their streams), so its objects are destroyed one by one before the context
 * goes. A lost context's objects go with it (destroyed, or reset if primary); no host
 * function runs after that. After abort() the work may never end: nothing waits for it, and
 * the context's end stops it. */
void be_cuda_dissolve(be_device *dev)
{
  if (dev->ctx == NULL)
    return;
  bool lost = atomic_load(&dev->fault) != BE_CUDA_OK;
  pthread_mutex_lock(&dev->lock);
  atomic_fetch_add(&dev->gen, 1); /* events still out there are stale from now on */
  pthread_mutex_unlock(&dev->lock);
  wait_syncers(dev);
  be_cuda_enter(dev);
  /* Work still running (a soft fault leaves the context working) ends first: its host
   * functions may not outlive their records. A broken context answers at once. */
  if (!atomic_load(&dev->aborted))
    be_cuda_trace("cuCtxSynchronize", be_cu.cuCtxSynchronize());
  be_cuda_event_pool_clear(dev, !lost);
  be_cuda_modules_dissolve(dev, lost);
  if (!lost) {
    be_cu.cuStreamDestroy(dev->aux);
    be_cu.cuModuleUnload(dev->module);
  }
  be_cuda_reap_wait(dev);
  be_cuda_hostfn_wait(dev);
  release_context(dev, lost);
  be_cuda_callbacks_drain(dev);
}
