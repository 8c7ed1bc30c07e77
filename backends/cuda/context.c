/* The cuda device's incarnation: its context, the module of built-in kernels and an internal
 * stream, made at open and after a reset, dissolved at reset and close (device.h).
 *
 * The context is the device's own (cuCtxCreate) by default, or the CUDA device's primary
 * context when opened with primary_context (acceld's `[devices] cuda_context = primary`, the
 * embedded URL's `cuda_context=primary`) or with ACCEL_CUDA_CONTEXT=primary (run on the H200 with
 * the API completion and fault checks). Why its own: a restart destroys it and makes another
 * without touching anyone else's, whereas resetting the primary context after a fault pulls it from
 * under every other user in the process (cuBLAS's runtime retains it for good, and so may the
 * application in embedded mode). Neither brings the device back after a real sticky error on
 * current drivers: then cuDevicePrimaryCtxRetain and cuCtxCreate both answer the error
 * (CUDA_ERROR_LAUNCH_FAILED after a trap; H200, driver 580), and only a new process gets the GPU
 * back (backend_cuda.c, inject_fault).
 *
 * Burial: after abort() the incarnation's work may never end, and ending its context waits for
 * that work: cuCtxDestroy and cuDevicePrimaryCtxReset were still blocked after 8 s beside a
 * kernel that spins for ever, which kept running; only the process's exit stopped it (H100,
 * driver 580). Meanwhile other contexts of the GPU work: a new one made, a module loaded and a
 * kernel run in 2.4 ms, beside the spinning one and with a cuCtxDestroy blocked on another
 * thread. So the aborted incarnation's context is handed to a thread of its own that ends it
 * when (if ever) its work ends, and the device goes on: reset makes a new context (own
 * contexts; the GPU is then shared with the stuck kernel, time-sliced, until the process
 * exits), close returns. The host functions' records go with the context (callback.c) and the
 * device struct lives on (a reference) until it is gone. A primary context cannot be replaced
 * while it is being reset: its device cannot incarnate again in this process (ACCEL_EIO)
 * until the burial ends. While a burial of a CUDA device is pending, ending any other context
 * of it blocks as well (the close after a reset beside the spinning kernel never returned),
 * and from then on even making a context blocks (measured), so the contexts of that device
 * that end meanwhile are left as they are, their objects freed as usual, and ended once no
 * burial of the device is pending any more.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "runtime/alloc.h"

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
#define BE_FN_ROW_(fn, name)                                                                       \
  [fn] = name, [fn + 1] = name "_f64", [fn + 2] = name "_f16", [fn + 3] = name "_bf16"
    BE_FN_ROW_(BE_FN_SIGMOID, "be_sigmoid"),
    BE_FN_ROW_(BE_FN_RELU, "be_relu"),
    BE_FN_ROW_(BE_FN_TANH, "be_tanh"),
    BE_FN_ROW_(BE_FN_SOFTMAX, "be_softmax"),
    BE_FN_ROW_(BE_FN_SCALE, "be_scale"),
    BE_FN_ROW_(BE_FN_BINARY, "be_binary"),
    BE_FN_ROW_(BE_FN_EXP, "be_exp"),
    BE_FN_ROW_(BE_FN_LOG, "be_log"),
    BE_FN_ROW_(BE_FN_SQRT, "be_sqrt"),
    BE_FN_ROW_(BE_FN_ABS, "be_abs"),
    BE_FN_ROW_(BE_FN_REDUCE_BLOCKS, "be_reduce_blocks"),
    BE_FN_ROW_(BE_FN_REDUCE_FINAL, "be_reduce_final"),
    BE_FN_ROW_(BE_FN_REDUCE_THREADS, "be_reduce_threads"),
#undef BE_FN_ROW_
    [BE_FN_BINARY_INT] = "be_binary_i32",
    [BE_FN_BINARY_INT + 1] = "be_binary_u32",
    [BE_FN_COMPARE] = "be_compare",
    [BE_FN_COMPARE + 1] = "be_compare_f64",
    [BE_FN_COMPARE + 2] = "be_compare_f16",
    [BE_FN_COMPARE + 3] = "be_compare_bf16",
    [BE_FN_COMPARE + 4] = "be_compare_i32",
    [BE_FN_COMPARE + 5] = "be_compare_u32",
    [BE_FN_WHERE] = "be_where_u8",
    [BE_FN_WHERE + 1] = "be_where_u16",
    [BE_FN_WHERE + 2] = "be_where_u32",
    [BE_FN_WHERE + 3] = "be_where_u64",
    [BE_FN_CONVERT] = "be_convert",
    [BE_FN_BINARY_BOOL] = "be_binary_bool",
    [BE_FN_NULL] = "be_null",
    [BE_FN_FAULT] = "be_fault",
};

/* Resets of each device's primary context in this process. Every open device of one CUDA
 * device shares its primary context: after a fault each of them dissolves its incarnation,
 * and only the first may reset the context, or it would reset the fresh one another device
 * has made since. */
#define BE_CUDA_EPOCHS 64
static atomic_uint reset_epoch[BE_CUDA_EPOCHS];

static atomic_uint *epoch_of(be_device *dev) {
  return dev->index >= 0 && dev->index < BE_CUDA_EPOCHS ? &reset_epoch[dev->index] : NULL;
}

/* Resets the primary context unless someone did since this incarnation began. The thread
 * lets go of the context first: the driver refuses to reset one that is current. */
static void reset_context(be_device *dev) {
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
/* The context this thread last made current for a device (it may be gone since). */
static _Thread_local CUcontext entered_ctx;

int be_cuda_enter(be_device *dev) {
  CUcontext cur = NULL;
  if (current_incarnation == dev->incarnation && be_cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS &&
      cur == dev->ctx)
    return 0;
  CUresult r = be_cu.cuCtxSetCurrent(dev->ctx);
  if (r != CUDA_SUCCESS)
    return be_cuda_err(r);
  current_incarnation = dev->incarnation;
  entered_ctx = dev->ctx;
  return 0;
}

/* Nothing to put back: the thread's current context was one of ours, or none could be read. */
static char leave_as_is;

/* A client's thread's current context, to be put back by be_cuda_thread_leave (be_ops). A
 * context this thread made current for a device itself is not the client's, and may be
 * destroyed by the time the thread leaves (a restart): it is never put back. */
void *be_cuda_thread_enter(void) {
  CUcontext cur = NULL;
  /* The driver first (once per process): an embedded open is usually the process's first
   * accel call, and the caller's context must be read before the devices open. */
  if (be_cuda_driver_load(NULL, 0) != 0 || be_cu.cuCtxGetCurrent(&cur) != CUDA_SUCCESS ||
      (cur != NULL && cur == entered_ctx))
    return &leave_as_is;
  return cur;
}

/* Whatever this thread made current for a device is forgotten once the caller's context is
 * current again (even where it was all along: a primary context may be the caller's and a
 * device's at once), so that a later enter never takes the caller's context for ours. */
void be_cuda_thread_leave(void *saved) {
  CUcontext cur = NULL;
  if (saved == &leave_as_is)
    return;
  if (be_cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != (CUcontext)saved &&
      be_cu.cuCtxSetCurrent((CUcontext)saved) != CUDA_SUCCESS)
    return;
  entered_ctx = NULL; /* the next be_cuda_enter here sets its context again */
  current_incarnation = 0;
}

static bool want_primary(void) {
  const char *v = getenv("ACCEL_CUDA_CONTEXT");
  return v != NULL && strcmp(v, "primary") == 0;
}

/* Primary contexts being buried, and burials pending (under left_lock where it matters), by
 * device index. */
static atomic_bool primary_buried[BE_CUDA_EPOCHS];
static atomic_int burials[BE_CUDA_EPOCHS];

static atomic_bool *buried_of(be_device *dev) {
  return dev->index >= 0 && dev->index < BE_CUDA_EPOCHS ? &primary_buried[dev->index] : NULL;
}

/* A context of our own. cuCtxCreate pushes it on the calling thread's context stack; it is
 * popped again (be_cuda_enter makes it current in place), so that the stack of a client's
 * thread that ran the open keeps its depth and be_cuda_thread_leave can put the client's own
 * context back. */
static CUresult own_context(be_device *dev) {
  CUresult r = be_cuda_trace("cuCtxCreate", be_cu.cuCtxCreate(&dev->ctx, NULL, 0, dev->cu));
  if (r != CUDA_SUCCESS)
    return r;
  CUcontext popped = NULL;
  r = be_cu.cuCtxPopCurrent(&popped);
  if (r != CUDA_SUCCESS)
    be_cu.cuCtxDestroy(dev->ctx);
  return r;
}

/* The context of a new incarnation (try_incarnate makes it current). */
static CUresult context_make(be_device *dev) {
  dev->primary = dev->primary_wanted || want_primary();
  dev->incarnation = atomic_fetch_add(&incarnations, 1) + 1;
  if (!dev->primary)
    return own_context(dev);
  atomic_bool *buried = buried_of(dev);
  if (buried != NULL && atomic_load(buried))
    return be_cuda_trace("primary context still held by work that never ended",
                         CUDA_ERROR_CONTEXT_ALREADY_IN_USE);
  atomic_uint *epoch = epoch_of(dev);
  dev->epoch = epoch != NULL ? atomic_load(epoch) : 0;
  return be_cuda_trace("retain", be_cu.cuDevicePrimaryCtxRetain(&dev->ctx, dev->cu));
}

/* Gives the context up: destroyed (our own) or released (primary, reset first if lost). */
static void context_end(be_device *dev, bool lost) {
  if (entered_ctx == dev->ctx) /* its handle may come back as someone else's context */
    entered_ctx = NULL;
  if (!dev->primary) {
    be_cuda_trace("cuCtxDestroy", be_cu.cuCtxDestroy(dev->ctx));
  } else {
    if (lost)
      reset_context(dev);
    be_cu.cuDevicePrimaryCtxRelease(dev->cu);
  }
  /* Its registrations are gone with it (a primary context others still hold lives on: the
   * pin cache keeps its orphans of this device until the cache closes). */
  if (!dev->primary || lost)
    be_cuda_pins_owner_gone(dev);
  dev->ctx = NULL;
}

static int load_module(be_device *dev) {
  CUresult r = be_cuda_trace("module load", be_cu.cuModuleLoadData(&dev->module, be_cuda_fatbin));
  for (int i = 0; r == CUDA_SUCCESS && i < BE_FN_COUNT; i++)
    r = be_cu.cuModuleGetFunction(&dev->fn[i], dev->module, fn_names[i]);
  return be_cuda_err(r);
}

static void release_context(be_device *dev, bool lost) {
  context_end(dev, lost);
  dev->module = NULL;
  dev->aux = NULL;
  for (int i = 0; i < BE_FN_COUNT; i++)
    dev->fn[i] = NULL;
}

static int try_incarnate(be_device *dev) {
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

int be_cuda_incarnate(be_device *dev) {
  int rc = try_incarnate(dev);
  if (rc != 0)
    return rc == ACCEL_EDEVLOST ? ACCEL_EIO : rc;
  atomic_store(&dev->aborted, false);
  atomic_store(&dev->fault, BE_CUDA_OK);
  be_cuda_peer_join(dev);
  return 0;
}

static uint64_t be_cuda_fn_lookup(be_device *dev, const char *name) {
  for (int i = 0; i < BE_FN_COUNT; i++)
    if (strcmp(fn_names[i], name) == 0)
      return (uint64_t)(uintptr_t)dev->fn[i];
  return 0;
}

uint64_t be_cuda_function(be_device *dev, const char *name) {
  return dev == NULL || name == NULL || dev->ctx == NULL ? 0 : be_cuda_fn_lookup(dev, name);
}

/* ---- burial (above) ---------------------------------------------------------------------- */

/* A context left alone while a burial that blocks it is pending, ended after it. */
typedef struct left_ctx {
  struct left_ctx *next;
  int index; /* the device index of that burial */
  int own;   /* its own device index */
  uint_fast64_t peers;
  CUdevice cu;
  CUcontext ctx;
  bool primary;
} left_ctx;

static pthread_mutex_t left_lock = PTHREAD_MUTEX_INITIALIZER;
static left_ctx *left_list;

typedef struct burial {
  be_device *dev; /* a reference */
  CUcontext ctx;
  bool primary;
  rt_list cbs; /* host functions' records CUDA may still run */
} burial;

static atomic_int *burials_of(be_device *dev) {
  return dev->index >= 0 && dev->index < BE_CUDA_EPOCHS ? &burials[dev->index] : NULL;
}

/* The device index whose pending burial keeps this context from ending, or -1: its own CUDA
 * device's (ending another context of a device with one being buried wedges the driver), or
 * that of a GPU whose contexts it had peer access with (`peers`, ordinal bits; be_cuda_peer_*):
 * with two H200s, cuCtxDestroy of GPU 1's context never returned while GPU 0's aborted context
 * it had peer access with was being buried. Under left_lock. */
static int burial_blocking(int own, uint_fast64_t peers) {
  if (own >= 0 && own < BE_CUDA_EPOCHS && atomic_load(&burials[own]) > 0)
    return own;
  for (int i = 0; i < 64 && i < BE_CUDA_EPOCHS; i++)
    if ((peers >> i & 1) != 0 && atomic_load(&burials[i]) > 0)
      return i;
  return -1;
}

/* Ends the contexts left while device `index`'s burials were pending, once none is. One that
 * another pending burial still blocks (of its own device or a peer's, begun meanwhile) is
 * left again, for that burial to end. */
static void end_left(int index) {
  pthread_mutex_lock(&left_lock);
  left_ctx *mine = NULL, **p = &left_list;
  while (*p != NULL) {
    left_ctx *l = *p;
    int blocker = l->index == index ? burial_blocking(l->own, l->peers) : l->index;
    if (blocker >= 0) {
      l->index = blocker;
      p = &l->next;
      continue;
    }
    *p = l->next;
    l->next = mine;
    mine = l;
  }
  pthread_mutex_unlock(&left_lock);
  for (left_ctx *l = mine, *next; l != NULL; l = next) {
    next = l->next;
    if (l->primary)
      be_cu.cuDevicePrimaryCtxRelease(l->cu);
    else
      be_cuda_trace("left context destroyed", be_cu.cuCtxDestroy(l->ctx));
    rt_free(l);
  }
}

static void *bury_main(void *arg) {
  pthread_setname_np(pthread_self(), "accel-cu-bury"); /* seen in top -H, gdb */
  burial *b = arg;
  be_device *dev = b->dev;
  be_cu.cuCtxSetCurrent(NULL);
  if (!b->primary) {
    be_cuda_trace("buried context destroyed", be_cu.cuCtxDestroy(b->ctx));
  } else {
    reset_context(dev);
    be_cu.cuDevicePrimaryCtxRelease(dev->cu);
    atomic_store(buried_of(dev), false);
  }
  be_cuda_callbacks_free(dev, &b->cbs);
  pthread_mutex_lock(&left_lock);
  bool last = atomic_fetch_sub(burials_of(dev), 1) == 1;
  pthread_mutex_unlock(&left_lock);
  if (last)
    end_left(dev->index);
  be_cuda_dev_unref(dev);
  rt_free(b);
  return NULL;
}

static bool bury_start(burial *b) {
  pthread_attr_t attr;
  pthread_t t;
  if (pthread_attr_init(&attr) != 0)
    return false;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  bool ok = pthread_create(&t, &attr, bury_main, b) == 0;
  pthread_attr_destroy(&attr);
  return ok;
}

static void forget_context(be_device *dev) {
  dev->ctx = NULL;
  dev->module = NULL;
  dev->aux = NULL;
  for (int i = 0; i < BE_FN_COUNT; i++)
    dev->fn[i] = NULL;
}

/* Hands an aborted incarnation's context and its records to a burial thread. Without memory
 * or a thread for one, they are left for good, and a reference to the device with them: CUDA
 * may still run a record, which then unlinks itself under the device's cb_lock. */
static void bury(be_device *dev) {
  burial *b = rt_calloc(1, sizeof *b);
  be_cuda_dev_ref(dev);
  atomic_bool *buried = buried_of(dev);
  if (dev->primary && buried != NULL)
    atomic_store(buried, true);
  be_cuda_trace("context buried: its work may never end", CUDA_SUCCESS);
  if (b == NULL || burials_of(dev) == NULL) {
    be_cuda_callbacks_hand_off(dev, &dev->orphans);
    rt_free(b);
  } else {
    *b = (burial){.dev = dev, .ctx = dev->ctx, .primary = dev->primary};
    rt_list_init(&b->cbs);
    be_cuda_callbacks_hand_off(dev, &b->cbs);
    pthread_mutex_lock(&left_lock);
    atomic_fetch_add(burials_of(dev), 1);
    pthread_mutex_unlock(&left_lock);
    if (!bury_start(b))
      be_cuda_trace("no thread for the burial: the context is left", CUDA_SUCCESS);
  }
  forget_context(dev);
}

/* Ends the context (release_context), or, while a burial that blocks it is pending
 * (burial_blocking), leaves it to be ended after that (its work is done: the caller
 * synchronised it). */
static void end_or_leave(be_device *dev, bool lost, uint_fast64_t peers) {
  left_ctx *l = rt_malloc(sizeof *l);
  pthread_mutex_lock(&left_lock);
  int blocker = burial_blocking(dev->index, peers);
  bool leave = blocker >= 0;
  if (leave && l != NULL) {
    *l = (left_ctx){left_list, blocker, dev->index, peers, dev->cu, dev->ctx, dev->primary};
    left_list = l;
    l = NULL;
  }
  pthread_mutex_unlock(&left_lock);
  rt_free(l);
  if (!leave) {
    release_context(dev, lost);
    return;
  }
  be_cuda_trace("context left: a burial it is tied to is pending", CUDA_SUCCESS);
  forget_context(dev);
}

/* Threads still inside event_sync hold handles of this incarnation: wait them out (they
 * return once their work completes, or at once on a lost device). */
static void wait_syncers(be_device *dev) {
  while (atomic_load(&dev->syncing) > 0)
    sched_yield();
}

/* A healthy context: everything of the incarnation is idle (the queues were destroyed, and
 * that waited for their streams), so its objects are destroyed one by one before the context
 * goes. A lost context's objects go with it (destroyed, or reset if primary); no host
 * function runs after that. After abort() the work may never end: nothing waits for it, and
 * the context is buried (above). */
void be_cuda_dissolve(be_device *dev) {
  if (dev->ctx == NULL)
    return;
  /* The pin cache's registrations of this context go first, while it can still take calls. */
  be_cuda_pins_owner_closing(dev,
                             atomic_load(&dev->fault) == BE_CUDA_OK && !atomic_load(&dev->aborted));
  uint_fast64_t peers = atomic_load(&dev->peer_direct); /* the GPUs it had peer access with */
  be_cuda_peer_leave(dev);
  be_cuda_coll_forget(dev); /* NCCL's objects in this context go first */
  bool lost = atomic_load(&dev->fault) != BE_CUDA_OK;
  pthread_mutex_lock(&dev->lock);
  atomic_fetch_add(&dev->gen, 1); /* events still out there are stale from now on */
  pthread_mutex_unlock(&dev->lock);
  wait_syncers(dev);
  bool entered = be_cuda_enter(dev) == 0;
  /* Work still running (a soft fault leaves the context working) ends first: its host
   * functions may not outlive their records. A broken context answers at once; one that
   * cannot even be made current cannot be waited for (the call would wait for whichever
   * context this thread had). */
  if (entered && !atomic_load(&dev->aborted))
    be_cuda_trace("cuCtxSynchronize", be_cu.cuCtxSynchronize());
  be_cuda_event_pool_clear(dev, !lost);
  be_cuda_modules_dissolve(dev, lost);
  if (atomic_load(&dev->aborted)) {
    be_cuda_reap_wait(dev);
    be_cuda_hostfn_wait(dev);
    bury(dev);
    return;
  }
  if (!lost) {
    be_cu.cuStreamDestroy(dev->aux);
    be_cu.cuModuleUnload(dev->module);
  }
  be_cuda_reap_wait(dev);
  be_cuda_hostfn_wait(dev);
  end_or_leave(dev, lost, peers);
  be_cuda_callbacks_drain(dev);
}
