/* The stager: large copies of pageable host memory at close to pinned speed (copy.c).
 *
 * A queue's stager owns SLOTS pinned chunks, a thread (with helpers that split each chunk's
 * memcpy) and two 32-bit words in pinned memory the GPU can see: host_done, the last chunk
 * the thread has finished, and gpu_done, the last chunk the stream has finished. Chunks are
 * numbered from 1 across the queue's staged copies; chunk s uses slot s mod SLOTS. The
 * stream and the thread meet only through the two words (stream memory operations), so the
 * memcpy of one chunk overlaps the DMA of the next and neither side blocks the other's
 * threads:
 *
 *   host to device, chunks f..l   stream: write gpu_done = f - 1 (the copy has begun: the
 *                                 caller's memory is ready), then per chunk s: wait
 *                                 host_done >= s, DMA slot -> device, write gpu_done = s.
 *                                 thread: per chunk s: wait gpu_done >= max(f - 1, s - SLOTS)
 *                                 (begun, and the slot's last DMA is done), memcpy caller ->
 *                                 slot, host_done = s.
 *   device to host                stream: per chunk s: wait host_done >= s - SLOTS (the slot
 *                                 was emptied), DMA device -> slot, write gpu_done = s; at
 *                                 the end wait host_done >= l (the caller's memory holds it
 *                                 all before anything later on the stream runs).
 *                                 thread: per chunk s: wait gpu_done >= s, memcpy slot ->
 *                                 caller, host_done = s.
 *
 * Comparisons are cyclic (CU_STREAM_WAIT_VALUE_GEQ is), so the numbers may wrap. The thread
 * polls gpu_done (spinning briefly, then sleeping a little longer each time); it stops
 * waiting once the device is lost or the stager is stopped, and never touches the caller's
 * memory after a fault (be_cuda_copy_begin).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/error.h"
#include "backends/cuda/device.h"
#include "backends/stream_copy.h"
#include "runtime/alloc.h"

#define SLOTS 4u
#define CHUNK (8u << 20)
#define MIN_PART (512u << 10) /* below this a helper costs more than it copies */
#define SPINS 2000
#define SLEEP_MAX_NS 200000

typedef struct stage_job {
  struct stage_job *next;
  bool to_device;
  char *host;
  size_t bytes;
  uint32_t first, n; /* chunks first .. first + n - 1 */
} stage_job;

/* Helpers that split one memcpy (a round) with the stager thread. */
typedef struct team {
  pthread_mutex_t lock;
  pthread_cond_t go, done;
  unsigned helpers, parts, left;
  uint64_t round;
  char *dst;
  const char *src;
  size_t bytes, part;
  bool streaming; /* the round's stores bypass the caches (stage_memcpy) */
  bool stop;
  pthread_t *threads;
} team;

struct be_cuda_stage {
  be_device *dev;
  char *ring;
  _Atomic uint32_t *words; /* [0] host_done, [1] gpu_done */
  CUdeviceptr words_dev;   /* the same words as the GPU addresses them */
  uint32_t seq;            /* the last chunk queued (the queue's thread) */
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  stage_job *head, *tail;
  bool stop;
  team team;
};

enum { HOST_DONE = 0, GPU_DONE = 1 };

static bool cyc_ge(uint32_t a, uint32_t b) {
  return (int32_t)(a - b) >= 0;
}

static CUdeviceptr word_addr(be_cuda_stage *s, int w) {
  return s->words_dev + (CUdeviceptr)w * sizeof(uint32_t);
}

/* ---- the team ------------------------------------------------------------------------- */

/* A part of a chunk. Device to host, the destination is the caller's memory, which the stager
 * does not read again: streaming stores skip reading each line before writing it and leave the
 * caches alone (backends/stream_copy.h), unless ACCEL_CUDA_STREAM_COPY=0 (read once; for
 * comparisons). Host to device, the destination is a slot the DMA engine reads next: plain
 * stores leave it in the last-level cache, which the engine reads from. On an H200 host (300 MiB
 * of L3, 12 copy threads), streaming stores took device-to-host staging from 0.72-0.74 of pinned
 * speed to 0.88-0.94 with 8 threads, and host-to-device from 0.61-0.83 down to 0.50-0.64. */
static void stage_memcpy(void *dst, const void *src, size_t n, bool streaming) {
  static atomic_int on = -1;
  if (atomic_load(&on) < 0) {
    const char *v = getenv("ACCEL_CUDA_STREAM_COPY");
    atomic_store(&on, !(v != NULL && strcmp(v, "0") == 0));
  }
  if (streaming && atomic_load(&on))
    stream_copy(dst, src, n);
  else
    memcpy(dst, src, n);
}

static void part_range(team *t, unsigned i, char **dst, const char **src, size_t *n) {
  size_t off = (size_t)i * t->part;
  *n = off >= t->bytes ? 0 : t->bytes - off < t->part ? t->bytes - off : t->part;
  *dst = t->dst + off;
  *src = t->src + off;
}

static void *helper(void *arg) {
  pthread_setname_np(pthread_self(), "accel-cu-copy"); /* seen in top -H, gdb */
  team *t = ((void **)arg)[0];
  unsigned idx = (unsigned)(uintptr_t)((void **)arg)[1];
  rt_free(arg);
  uint64_t seen = 0;
  pthread_mutex_lock(&t->lock);
  for (;;) {
    while (t->round == seen && !t->stop)
      pthread_cond_wait(&t->go, &t->lock);
    if (t->stop)
      break;
    seen = t->round;
    if (idx >= t->parts)
      continue;
    char *dst;
    const char *src;
    size_t n;
    part_range(t, idx, &dst, &src, &n);
    bool streaming = t->streaming;
    pthread_mutex_unlock(&t->lock);
    stage_memcpy(dst, src, n, streaming);
    __sync_synchronize(); /* a full barrier: orders non-temporal stores too */
    pthread_mutex_lock(&t->lock);
    if (--t->left == 0)
      pthread_cond_signal(&t->done);
  }
  pthread_mutex_unlock(&t->lock);
  return NULL;
}

static void team_copy(team *t, char *dst, const char *src, size_t bytes, bool streaming) {
  unsigned parts = (unsigned)(bytes / MIN_PART);
  parts = parts > t->helpers + 1 ? t->helpers + 1 : parts;
  if (parts <= 1) {
    stage_memcpy(dst, src, bytes, streaming);
    return;
  }
  pthread_mutex_lock(&t->lock);
  t->dst = dst;
  t->src = src;
  t->bytes = bytes;
  t->streaming = streaming;
  t->parts = parts;
  t->part = ((bytes + parts - 1) / parts + 63) & ~(size_t)63; /* covers it all; the last
                                                               * part is shorter */
  t->left = parts - 1;
  t->round++;
  pthread_cond_broadcast(&t->go);
  pthread_mutex_unlock(&t->lock);
  size_t n;
  part_range(t, 0, &dst, &src, &n);
  stage_memcpy(dst, src, n, streaming);
  pthread_mutex_lock(&t->lock);
  while (t->left > 0)
    pthread_cond_wait(&t->done, &t->lock);
  pthread_mutex_unlock(&t->lock);
}

static void team_stop(team *t) {
  pthread_mutex_lock(&t->lock);
  t->stop = true;
  pthread_cond_broadcast(&t->go);
  pthread_mutex_unlock(&t->lock);
  for (unsigned i = 0; i < t->helpers; i++)
    pthread_join(t->threads[i], NULL);
  rt_free(t->threads);
  pthread_cond_destroy(&t->done);
  pthread_cond_destroy(&t->go);
  pthread_mutex_destroy(&t->lock);
}

/* Starts up to `helpers` threads (fewer if threads run out: the copies just use fewer). */
static void team_start(team *t, unsigned helpers) {
  pthread_mutex_init(&t->lock, NULL);
  pthread_cond_init(&t->go, NULL);
  pthread_cond_init(&t->done, NULL);
  t->threads = helpers > 0 ? rt_calloc(helpers, sizeof *t->threads) : NULL;
  for (unsigned i = 0; t->threads != NULL && i < helpers; i++) {
    void **arg = rt_malloc(2 * sizeof *arg);
    if (arg == NULL)
      break;
    arg[0] = t;
    arg[1] = (void *)(uintptr_t)(i + 1);
    if (pthread_create(&t->threads[i], NULL, helper, arg) != 0) {
      rt_free(arg);
      break;
    }
    t->helpers++;
  }
}

/* ---- the stager thread ---------------------------------------------------------------- */

static bool stopped(be_cuda_stage *s) {
  pthread_mutex_lock(&s->lock);
  bool stop = s->stop;
  pthread_mutex_unlock(&s->lock);
  return stop || be_cuda_lost(s->dev);
}

/* Until gpu_done >= target; false if the stager stops or the device is lost first. */
static bool wait_gpu(be_cuda_stage *s, uint32_t target) {
  long sleep_ns = 2000;
  for (unsigned i = 0;; i++) {
    if (cyc_ge(atomic_load_explicit(&s->words[GPU_DONE], memory_order_acquire), target))
      return true;
    if (i < SPINS) {
      sched_yield();
      continue;
    }
    if (stopped(s))
      return false;
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    sleep_ns = sleep_ns * 2 > SLEEP_MAX_NS ? SLEEP_MAX_NS : sleep_ns * 2;
  }
}

static bool copy_chunk(be_cuda_stage *s, char *dst, const char *src, size_t n, bool to_host) {
  if (!be_cuda_copy_begin(s->dev))
    return false;
  team_copy(&s->team, dst, src, n, to_host);
  be_cuda_copy_end(s->dev);
  /* The data before the word, for the DMA: a full hardware barrier (a C11 fence would do as
   * well, but ThreadSanitizer builds refuse fences). */
  __sync_synchronize();
  return true;
}

static bool run_chunk(be_cuda_stage *s, const stage_job *j, uint32_t c) {
  uint32_t seq = j->first + c;
  char *slot = s->ring + (size_t)(seq % SLOTS) * CHUNK;
  char *host = j->host + (size_t)c * CHUNK;
  size_t n = j->bytes - (size_t)c * CHUNK < CHUNK ? j->bytes - (size_t)c * CHUNK : CHUNK;
  bool ok;
  if (j->to_device) {
    uint32_t begun = j->first - 1, free_ = seq - SLOTS;
    ok = wait_gpu(s, cyc_ge(begun, free_) ? begun : free_) && copy_chunk(s, slot, host, n, false);
  } else {
    ok = wait_gpu(s, seq) && copy_chunk(s, host, slot, n, true);
  }
  if (ok)
    atomic_store_explicit(&s->words[HOST_DONE], seq, memory_order_release);
  return ok;
}

static stage_job *next_job(be_cuda_stage *s) {
  pthread_mutex_lock(&s->lock);
  while (s->head == NULL && !s->stop)
    pthread_cond_wait(&s->cv, &s->lock);
  stage_job *j = s->head;
  if (j != NULL) {
    s->head = j->next;
    if (s->head == NULL)
      s->tail = NULL;
  }
  pthread_mutex_unlock(&s->lock);
  return j;
}

/* A job dropped (after a fault or a stop) still lets its stream go on: the stream would
 * otherwise wait for it for ever (a soft fault leaves the context running). */
static void release_job(be_cuda_stage *s, stage_job *j) {
  atomic_store_explicit(&s->words[HOST_DONE], j->first + j->n - 1, memory_order_release);
  rt_free(j);
}

/* Runs the jobs in order; after a fault or a stop it only drops them. */
static void *stager(void *arg) {
  pthread_setname_np(pthread_self(), "accel-cu-stage"); /* seen in top -H, gdb */
  be_cuda_stage *s = arg;
  stage_job *j;
  bool ok = true;
  while ((j = next_job(s)) != NULL) {
    for (uint32_t c = 0; ok && c < j->n; c++)
      ok = run_chunk(s, j, c);
    if (ok)
      rt_free(j);
    else
      release_job(s, j);
  }
  return NULL;
}

/* ---- life cycle ----------------------------------------------------------------------- */

static void stage_destroy(be_cuda_stage *s, bool alive) {
  if (s->thread_started) {
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    team_stop(&s->team);
  }
  while (s->head != NULL) {
    stage_job *j = s->head;
    s->head = j->next;
    release_job(s, j);
  }
  if (alive && s->ring != NULL)
    be_cu.cuMemFreeHost(s->ring);
  if (alive && s->words != NULL)
    be_cu.cuMemFreeHost((void *)s->words);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->lock);
  rt_free(s);
}

/* Whether the stream can wait on host memory: a wait that is already satisfied. */
static int probe_memops(be_queue *q, be_cuda_stage *s) {
  CUresult r = be_cu.cuStreamWaitValue32(q->stream, word_addr(s, HOST_DONE), 0,
                                         CU_STREAM_WAIT_VALUE_GEQ);
  if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) {
    atomic_store(&q->dev->memops, false);
    return ACCEL_ENOTSUP;
  }
  return be_cuda_check(q->dev, r);
}

static int stage_alloc(be_queue *q, be_cuda_stage *s) {
  void *words = NULL, *ring = NULL;
  int rc = be_cuda_check(q->dev, be_cu.cuMemHostAlloc(&words, 64, CU_MEMHOSTALLOC_DEVICEMAP));
  s->words = words;
  if (rc == 0)
    rc = be_cuda_check(q->dev, be_cu.cuMemHostGetDevicePointer(&s->words_dev, words, 0));
  if (rc == 0) {
    memset(words, 0, 64);
    rc = be_cuda_check(q->dev, be_cu.cuMemHostAlloc(&ring, (size_t)SLOTS * CHUNK, 0));
    s->ring = ring;
  }
  return rc != 0 ? rc : probe_memops(q, s);
}

static int stage_create(be_queue *q) {
  be_cuda_stage *s = rt_calloc(1, sizeof *s);
  if (s == NULL)
    return ACCEL_ENOMEM;
  s->dev = q->dev;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cv, NULL);
  int rc = stage_alloc(q, s);
  if (rc == 0) {
    team_start(&s->team, q->dev->copy_threads > 1 ? q->dev->copy_threads - 1 : 0);
    rc = pthread_create(&s->thread, NULL, stager, s) == 0 ? 0 : ACCEL_ESYS;
    s->thread_started = rc == 0;
    if (rc != 0)
      team_stop(&s->team);
  }
  if (rc != 0) {
    stage_destroy(s, true);
    return rc;
  }
  q->stage = s;
  return 0;
}

void be_cuda_stage_free(be_queue *q) {
  if (q->stage == NULL)
    return;
  bool alive = q->gen == atomic_load(&q->dev->gen) && !be_cuda_lost(q->dev);
  stage_destroy(q->stage, alive);
  q->stage = NULL;
}

/* ---- submission ----------------------------------------------------------------------- */

static CUresult wait_host(be_queue *q, uint32_t v) {
  return be_cu.cuStreamWaitValue32(q->stream, word_addr(q->stage, HOST_DONE), v,
                                   CU_STREAM_WAIT_VALUE_GEQ);
}

static CUresult write_gpu(be_queue *q, uint32_t v) {
  return be_cu.cuStreamWriteValue32(q->stream, word_addr(q->stage, GPU_DONE), v,
                                    CU_STREAM_WRITE_VALUE_DEFAULT);
}

static CUresult queue_chunk(be_queue *q, const stage_job *j, uint32_t c, CUdeviceptr d) {
  uint32_t seq = j->first + c;
  char *slot = q->stage->ring + (size_t)(seq % SLOTS) * CHUNK;
  size_t off = (size_t)c * CHUNK, n = j->bytes - off < CHUNK ? j->bytes - off : CHUNK;
  CUresult r = j->to_device ? wait_host(q, seq) : wait_host(q, seq - SLOTS);
  if (r == CUDA_SUCCESS)
    r = j->to_device ? be_cu.cuMemcpyHtoDAsync(d + off, slot, n, q->stream)
                     : be_cu.cuMemcpyDtoHAsync(slot, d + off, n, q->stream);
  return r == CUDA_SUCCESS ? write_gpu(q, seq) : r;
}

/* The stream's side of job j; j->n becomes the number of chunks actually queued. */
static CUresult queue_job(be_queue *q, stage_job *j, CUdeviceptr d) {
  uint32_t total = j->n;
  CUresult r = j->to_device ? write_gpu(q, j->first - 1) : CUDA_SUCCESS;
  for (j->n = 0; r == CUDA_SUCCESS && j->n < total; j->n++)
    r = queue_chunk(q, j, j->n, d);
  if (r == CUDA_SUCCESS && !j->to_device)
    r = wait_host(q, j->first + total - 1);
  return r;
}

static void push_job(be_cuda_stage *s, stage_job *j) {
  pthread_mutex_lock(&s->lock);
  if (s->tail != NULL)
    s->tail->next = j;
  else
    s->head = j;
  s->tail = j;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->lock);
}

/* A failure half-way leaves the stream waiting for chunks that may never come, or the
 * thread waiting for DMAs that will not: the device is marked lost, which ends both. A
 * failure before the first chunk queued nothing that waits, and fails this copy alone. */
int be_cuda_stage_copy(be_queue *q, bool to_device, CUdeviceptr d, void *host, size_t bytes) {
  if (q->stage == NULL) {
    int rc = stage_create(q);
    if (rc != 0)
      return rc;
  }
  stage_job *j = rt_calloc(1, sizeof *j);
  if (j == NULL)
    return ACCEL_ENOMEM;
  *j = (stage_job){.to_device = to_device,
                   .host = host,
                   .bytes = bytes,
                   .first = q->stage->seq + 1,
                   .n = (uint32_t)((bytes + CHUNK - 1) / CHUNK)};
  CUresult r = queue_job(q, j, d);
  q->stage->seq = j->first + j->n - 1;
  int rc = be_cuda_check(q->dev, r);
  if (j->n == 0) {
    rt_free(j);
    return rc;
  }
  push_job(q->stage, j);
  if (rc != 0)
    be_cuda_fault(q->dev);
  return rc != 0 ? ACCEL_EDEVLOST : 0;
}
