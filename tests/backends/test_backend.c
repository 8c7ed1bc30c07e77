/* Backend conformance: one suite written against be_ops only (backends/backend.h), run on
 * every device of every backend the registry says was built, as nng's NUTS suites run the
 * same tests on every transport.
 *
 * Inputs are random and fresh each run, never zeros; the seed is printed and ACCEL_TEST_SEED
 * reproduces a run (each test reseeds from it and its own name, so one test can be rerun
 * alone). Kernels are checked against float64 references with the tolerance stated at each
 * check; RNG bits and uniforms against the cpu Philox reference, bit for bit. Every op also
 * runs in every dtype its package says the device runs (and answers ACCEL_ENOTSUP in the
 * others), against long double references with per-dtype tolerances.
 *
 * Ordering tests do not rely on timing: a "gate" host callback holds a queue until the test
 * opens it, so what must still be pending is pending when it is checked.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../be_f32.h"
#include "../test.h"
#include "backends/backend.h"
#include "backends/cpu/philox.h"
#include "backends/worker/worker.h"
#include "ops/dtype_conv.h"

/* ---- random inputs ------------------------------------------------------------------- */

static uint64_t base_seed, rng_state;

static uint64_t rnd64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static size_t rnd_range(size_t lo, size_t hi) {
  return lo + (size_t)(rnd64() % (uint64_t)(hi - lo + 1));
}

/* |x| in [lo, hi] with a random sign: never zero. */
static float rnd_nz(float lo, float hi) {
  float mag = lo + (hi - lo) * (float)((double)(rnd64() >> 11) * 0x1p-53);
  return (rnd64() & 1) ? -mag : mag;
}

static void rnd_floats(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++)
    x[i] = rnd_nz(lo, hi);
}

static void rnd_bytes(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)(rnd64() | 1); /* odd: never zero */
}

static void reseed(void) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a of the test's name */
  for (const char *s = test_current_; *s != '\0'; s++)
    h = (h ^ (uint8_t)*s) * 1099511628211ull;
  rng_state = base_seed ^ h;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n > 0 ? n : 1, size > 0 ? size : 1);
  if (p == NULL)
    TEST_FAIL("out of memory");
  return p;
}

/* ---- the backend under test ---------------------------------------------------------- */

static const be_ops *B; /* the backend and device index each_device is running */
static int IDX;

/* ACCEL_TEST_WORKERS=PATH (the accel-device executable): every backend is tested through
 * its proxy, its devices served by worker processes (backends/worker/worker.h). */
static const be_ops *under_test(const be_ops *real) {
  static int workers = -1;
  if (workers < 0) {
    const char *helper = getenv("ACCEL_TEST_WORKERS");
    workers = helper != NULL && helper[0] != '\0';
    if (workers)
      bw_configure(&(bw_options){.helper = helper});
  }
  return workers ? bw_proxy_ops(real) : real;
}

/* Runs body once for every device of every built backend; at least one must run. */
static void each_device(void (*body)(void)) {
  reseed();
  int ran = 0;
  for (const be_entry *e = be_registry(); e->name != NULL; e++) {
    if (e->ops == NULL)
      continue;
    const be_ops *ops = under_test(e->ops);
    int count = 0;
    char why[128] = "";
    int err = ops->probe(&count, why, sizeof why);
    if (err == ACCEL_ENOTSUP || (err == 0 && count == 0)) {
      printf("  %s: skipped (%s)\n", e->name, err != 0 ? why : "no device");
      continue;
    }
    CHECK_OK(err);
    for (B = ops, IDX = 0; IDX < count; IDX++, ran++) {
      printf("  %s:%d\n", e->name, IDX);
      fflush(stdout);
      body();
    }
  }
  CHECK_GE(ran, 1);
}

static be_device *dev_open(int fault_injection) {
  be_open_opts opts = {.fault_injection = fault_injection};
  be_device *d = NULL;
  CHECK_OK(B->open(IDX, &opts, &d));
  CHECK(d != NULL);
  return d;
}

static be_queue *queue_new(be_device *d) {
  be_queue *q = NULL;
  CHECK_OK(B->queue_create(d, &q));
  CHECK(q != NULL);
  return q;
}

static be_event *event_new(be_device *d) {
  be_event *ev = NULL;
  CHECK_OK(B->event_create(d, &ev));
  CHECK(ev != NULL);
  return ev;
}

static be_mem mem_new(be_device *d, size_t bytes) {
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(d, bytes, &m));
  CHECK(m.handle != 0);
  CHECK_EQ(m.bytes, bytes);
  return m;
}

/* Waits for everything submitted to q so far, which must have succeeded. */
static void finish(be_device *d, be_queue *q) {
  be_event *ev = event_new(d);
  CHECK_OK(B->event_record(ev, q));
  CHECK_OK(B->event_sync(ev));
  CHECK_OK(B->event_query(ev));
  B->event_destroy(ev);
}

/* A device and one queue on it. */
typedef struct fx {
  be_device *d;
  be_queue *q;
} fx;

static fx fx_open(void) {
  fx f = {dev_open(1), NULL};
  f.q = queue_new(f.d);
  return f;
}

static void fx_close(fx *f) {
  B->queue_destroy(f->q);
  B->close(f->d);
}

static void put(fx *f, be_mem m, size_t off, const void *src, size_t bytes) {
  CHECK_OK(B->copy_h2d(f->q, m, off, src, bytes));
  finish(f->d, f->q);
}

static void get(fx *f, void *dst, be_mem m, size_t off, size_t bytes) {
  CHECK_OK(B->copy_d2h(f->q, dst, m, off, bytes));
  finish(f->d, f->q);
}

/* ---- host callbacks and gates -------------------------------------------------------- */

typedef struct cb_rec {
  atomic_int *next; /* shared order counter */
  atomic_int calls, status, order;
} cb_rec;

static void cb_fn(void *arg, int status) {
  cb_rec *r = arg;
  atomic_store(&r->status, status);
  atomic_store(&r->order, atomic_fetch_add(r->next, 1));
  atomic_fetch_add(&r->calls, 1); /* last: a waiter that sees it sees the rest */
}

static cb_rec *cb_recs(size_t n, atomic_int *next) {
  cb_rec *r = xcalloc(n, sizeof *r);
  for (size_t i = 0; i < n; i++)
    r[i].next = next;
  return r;
}

/* Waits (up to 20 s) until each of the n callbacks has been called. */
static void cb_wait(cb_rec *r, size_t n) {
  uint64_t t0 = test_now_ms();
  for (size_t i = 0; i < n; i++)
    while (atomic_load(&r[i].calls) == 0) {
      if (test_now_ms() - t0 > 20000)
        TEST_FAIL("callback %zu of %zu never called", i, n);
      test_sleep_ms(1);
    }
}

/* Holds its queue (blocks the backend's thread) until opened; gives up after 20 s. */
typedef struct gate {
  atomic_int open, entered, status;
  unsigned open_after_ms; /* for gate_opener */
} gate;

static void gate_fn(void *arg, int status) {
  gate *g = arg;
  atomic_store(&g->status, status);
  atomic_store(&g->entered, 1);
  uint64_t t0 = test_now_ms();
  while (!atomic_load(&g->open) && test_now_ms() - t0 < 20000)
    test_sleep_ms(1);
}

static void gate_wait_entered(gate *g) {
  uint64_t t0 = test_now_ms();
  while (!atomic_load(&g->entered)) {
    if (test_now_ms() - t0 > 20000)
      TEST_FAIL("the gate callback never ran");
    test_sleep_ms(1);
  }
}

/* A thread that opens the gate later, for calls that block until the queue drains. */
static void *gate_opener(void *arg) {
  gate *g = arg;
  test_sleep_ms(g->open_after_ms);
  atomic_store(&g->open, 1);
  return NULL;
}

static pthread_t open_later(gate *g, unsigned ms) {
  pthread_t t;
  g->open_after_ms = ms;
  CHECK_EQ(pthread_create(&t, NULL, gate_opener, g), 0);
  return t;
}

/* ---- device buffers of floats with a host copy --------------------------------------- */

typedef struct fbuf {
  be_mem m;
  float *host; /* what was written */
  size_t len;
} fbuf;

static fbuf fbuf_new(fx *f, size_t len, float lo, float hi) {
  fbuf b = {mem_new(f->d, len * sizeof(float)), xcalloc(len, sizeof(float)), len};
  rnd_floats(b.host, len, lo, hi);
  put(f, b.m, 0, b.host, len * sizeof(float));
  return b;
}

/* The buffer's contents now (caller frees). */
static float *fbuf_read(fx *f, const fbuf *b) {
  float *out = xcalloc(b->len, sizeof(float));
  get(f, out, b->m, 0, b->len * sizeof(float));
  return out;
}

static void fbuf_free(fx *f, fbuf *b) {
  B->mem_free(f->d, &b->m);
  free(b->host);
}

/* Every element outside [off, off + n) still holds what was written, bit for bit. */
static void check_outside(const float *got, const fbuf *b, size_t off, size_t n) {
  for (size_t i = 0; i < b->len; i++)
    if ((i < off || i >= off + n) && memcmp(&got[i], &b->host[i], sizeof(float)) != 0)
      TEST_FAIL("element %zu outside [%zu, %zu) changed", i, off, off + n);
}

/* |got - want| <= tol, with the values in the message. */
static void check_close(double got, double want, double tol, const char *what, size_t i) {
  if (!(fabs(got - want) <= tol))
    TEST_FAIL("%s[%zu]: got %.9g, want %.9g (tolerance %.3g)", what, i, got, want, tol);
}

/* ---- registry, devices, memory ------------------------------------------------------- */

/* Every entry of a built backend is there. */
static void check_complete(const be_ops *o) {
  CHECK(o->probe && o->open && o->close && o->info && o->status && o->reset);
  CHECK(o->inject_fault && o->queue_create && o->queue_destroy && o->mem_alloc && o->mem_free);
  CHECK(o->copy_h2d && o->copy_d2h && o->copy_d2d && o->event_create && o->event_destroy);
  CHECK(o->event_record && o->event_query && o->event_sync && o->queue_wait);
  CHECK(o->host_callback && o->host_notify && o->fill);
  CHECK(o->blas && o->blas->version == BE_BLAS_VERSION && o->blas->gemm_supports &&
        o->blas->vector_dtypes && o->blas->gemm && o->blas->axpy && o->blas->dot && o->blas->scal);
  CHECK(o->rng && o->rng->version == BE_RNG_VERSION && o->rng->dtypes && o->rng->fill);
  CHECK(o->nn && o->nn->version == BE_NN_VERSION && o->nn->dtypes && o->nn->unary &&
        o->nn->softmax && o->nn->binary && o->nn->reduce && o->nn->where && o->nn->convert);
}

TEST(registry_lists_backends) {
  const be_entry *e = be_registry();
  CHECK_STR_EQ(e[0].name, "cpu"); /* CPU first, always built */
  CHECK(e[0].ops != NULL);
  bool cuda = false, opencl = false;
  for (; e->name != NULL; e++) {
    cuda |= strcmp(e->name, "cuda") == 0;
    opencl |= strcmp(e->name, "opencl") == 0;
    if (e->ops == NULL)
      continue;
    CHECK_EQ(e->ops->abi_version, BE_ABI_VERSION);
    CHECK_STR_EQ(e->ops->name, e->name);
    check_complete(e->ops);
  }
  CHECK(cuda && opencl);
}

static void open_info_close_dev(void) {
  be_device *d = dev_open(0);
  be_device_info info;
  memset(&info, 0xff, sizeof info);
  CHECK_OK(B->info(d, &info));
  CHECK(memchr(info.name, '\0', sizeof info.name) != NULL);
  CHECK_GT(strlen(info.name), 0);
  CHECK_GT(info.mem_bytes, 0);
  CHECK_GE(info.compute_units, 1);
  CHECK_OK(B->status(d));
  printf("    %s, %" PRIu64 " MiB, %u units\n", info.name, info.mem_bytes >> 20,
         info.compute_units);
  B->close(d);
  int count = 0;
  be_device *none = NULL;
  CHECK_OK(B->probe(&count, NULL, 0));
  CHECK_ERR(B->open(count, NULL, &none), ACCEL_ENOENT);
  CHECK_ERR(B->open(-1, NULL, &none), ACCEL_ENOENT);
}

TEST(probe_open_info_close) {
  each_device(open_info_close_dev);
}

static void mem_alloc_free_dev(void) {
  be_device *d = dev_open(0);
  size_t sizes[] = {1, 3, 64, 4096, (size_t)1 << 20, rnd_range(1, (size_t)1 << 22)};
  be_mem m[sizeof sizes / sizeof sizes[0]];
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    m[i] = mem_new(d, sizes[i]);
    for (size_t j = 0; j < i; j++)
      CHECK(m[i].handle != m[j].handle);
  }
  be_mem zero = {0};
  CHECK_ERR(B->mem_alloc(d, 0, &zero), ACCEL_EINVAL);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    B->mem_free(d, &m[i]);
  B->close(d);
}

TEST(mem_alloc_free) {
  each_device(mem_alloc_free_dev);
}

/* ---- copies -------------------------------------------------------------------------- */

/* h2d of random bytes at a random offset, d2h of the whole buffer: the range holds the data,
 * the rest what was there before. */
static void copy_round_trip_dev(void) {
  fx f = fx_open();
  size_t n = rnd_range(1, (size_t)1 << 20), off = rnd_range(0, 4099), size = off + n + 77;
  uint8_t *before = xcalloc(size, 1), *data = xcalloc(n, 1), *got = xcalloc(size, 1);
  rnd_bytes(before, size);
  rnd_bytes(data, n);
  be_mem m = mem_new(f.d, size);
  put(&f, m, 0, before, size);
  put(&f, m, off, data, n);
  get(&f, got, m, 0, size);
  memcpy(before + off, data, n);
  CHECK(memcmp(got, before, size) == 0);
  memset(got, 0, n);
  get(&f, got, m, off, n); /* a d2h at an offset too */
  CHECK(memcmp(got, data, n) == 0);
  B->mem_free(f.d, &m);
  free(before);
  free(data);
  free(got);
  fx_close(&f);
}

TEST(copy_h2d_d2h_round_trip) {
  each_device(copy_round_trip_dev);
}

static void copy_d2d_dev(void) {
  fx f = fx_open();
  size_t n = rnd_range(1, (size_t)1 << 20), so = rnd_range(0, 999), dof = rnd_range(0, 999);
  uint8_t *src = xcalloc(so + n, 1), *dst = xcalloc(dof + n + 5, 1), *got = xcalloc(dof + n + 5, 1);
  rnd_bytes(src, so + n);
  rnd_bytes(dst, dof + n + 5);
  be_mem a = mem_new(f.d, so + n), b = mem_new(f.d, dof + n + 5);
  put(&f, a, 0, src, so + n);
  put(&f, b, 0, dst, dof + n + 5);
  CHECK_OK(B->copy_d2d(f.q, b, dof, a, so, n));
  get(&f, got, b, 0, dof + n + 5);
  memcpy(dst + dof, src + so, n);
  CHECK(memcmp(got, dst, dof + n + 5) == 0);
  B->mem_free(f.d, &a);
  B->mem_free(f.d, &b);
  free(src);
  free(dst);
  free(got);
  fx_close(&f);
}

TEST(copy_d2d) {
  each_device(copy_d2d_dev);
}

/* ---- ordering ------------------------------------------------------------------------ */

/* Step i fills a buffer with v[i] and copies one of its words to log[i]: every word of the log
 * shows the fill just before it, which only holds if the queue runs in order. Callbacks
 * between the steps run in order too. */
static void in_order_dev(void) {
  fx f = fx_open();
  enum { STEPS = 300, WORDS = 4096 };
  uint32_t v[STEPS], got[STEPS];
  atomic_int next = 0;
  cb_rec *r = cb_recs(STEPS, &next);
  be_mem buf = mem_new(f.d, WORDS * 4), log = mem_new(f.d, STEPS * 4);
  for (size_t i = 0; i < STEPS; i++) {
    v[i] = (uint32_t)rnd64() | 1;
    CHECK_OK(be_fill_u32(B, f.q, buf, 0, WORDS, v[i]));
    CHECK_OK(B->copy_d2d(f.q, log, i * 4, buf, rnd_range(0, WORDS - 1) * 4, 4));
    CHECK_OK(B->host_callback(f.q, cb_fn, &r[i]));
  }
  get(&f, got, log, 0, sizeof got);
  for (size_t i = 0; i < STEPS; i++) {
    CHECK_EQ(got[i], v[i]);
    CHECK_EQ(atomic_load(&r[i].order), i);
  }
  B->mem_free(f.d, &buf);
  B->mem_free(f.d, &log);
  fx_close(&f);
  free(r);
}

TEST(in_order_on_one_queue) {
  each_device(in_order_dev);
}

static void callbacks_once_in_order_dev(void) {
  fx f = fx_open();
  be_queue *q2 = queue_new(f.d);
  enum { N = 2000 };
  atomic_int next = 0, next2 = 0;
  cb_rec *r = cb_recs(N, &next), *r2 = cb_recs(N, &next2);
  for (size_t i = 0; i < N; i++) {
    CHECK_OK(B->host_callback(f.q, cb_fn, &r[i]));
    CHECK_OK(B->host_callback(q2, cb_fn, &r2[i]));
  }
  finish(f.d, f.q);
  finish(f.d, q2);
  cb_wait(r, N);
  cb_wait(r2, N);
  B->queue_destroy(q2);
  fx_close(&f); /* nothing may call them again, even at close */
  for (size_t i = 0; i < N; i++) {
    CHECK_EQ(atomic_load(&r[i].calls), 1);
    CHECK_EQ(atomic_load(&r2[i].calls), 1);
    CHECK_OK(atomic_load(&r[i].status));
    CHECK_EQ(atomic_load(&r[i].order), i);
    CHECK_EQ(atomic_load(&r2[i].order), i);
  }
  free(r);
  free(r2);
}

TEST(host_callbacks_once_in_order) {
  each_device(callbacks_once_in_order_dev);
}

/* ---- host_notify --------------------------------------------------------------------- */

/* A notification after a fill and a copy of what it wrote to the host: its function checks
 * that the copy had landed (the work before it was done) when it ran. */
typedef struct note {
  cb_rec cb; /* first */
  const uint32_t *host;
  size_t words;
  uint32_t want;
  atomic_int seen; /* 1: the data was there; -1: it was not */
} note;

static void note_fn(void *arg, int status) {
  note *n = arg;
  bool ok = true;
  for (size_t i = 0; i < n->words && ok; i++)
    ok = n->host[i] == n->want;
  atomic_store(&n->seen, ok ? 1 : -1);
  cb_fn(&n->cb, status);
}

/* Two queues, interleaved steps of fill, copy to the host, notify (small copies and a few
 * large ones, which take other paths in a backend): each function runs once, in order per
 * queue, after the data of its step is in host memory. */
static void notify_in_order_dev(void) {
  fx f = fx_open();
  be_queue *q[2] = {f.q, queue_new(f.d)};
  enum { STEPS = 150, SMALL = 4096, BIG = (1 << 20) + 3 };
  atomic_int next[2] = {0, 0};
  note *n = xcalloc(2 * STEPS, sizeof *n);
  be_mem buf[2] = {mem_new(f.d, BIG * 4), mem_new(f.d, BIG * 4)};
  for (size_t i = 0; i < STEPS; i++)
    for (size_t k = 0; k < 2; k++) {
      note *x = &n[k * STEPS + i];
      uint32_t *host = xcalloc(i % 50 == 7 ? BIG : SMALL, 4);
      x->cb.next = &next[k];
      x->words = i % 50 == 7 ? BIG : rnd_range(1, SMALL);
      x->want = (uint32_t)rnd64() | 1;
      x->host = host;
      CHECK_OK(be_fill_u32(B, q[k], buf[k], 0, x->words, x->want));
      CHECK_OK(B->copy_d2h(q[k], host, buf[k], 0, x->words * 4));
      CHECK_OK(B->host_notify(q[k], note_fn, x));
    }
  for (size_t i = 0; i < 2 * STEPS; i++)
    cb_wait(&n[i].cb, 1);
  B->mem_free(f.d, &buf[0]);
  B->mem_free(f.d, &buf[1]);
  B->queue_destroy(q[1]);
  fx_close(&f); /* nothing may call them again, even at close */
  for (size_t i = 0; i < 2 * STEPS; i++) {
    CHECK_EQ(atomic_load(&n[i].cb.calls), 1);
    CHECK_OK(atomic_load(&n[i].cb.status));
    CHECK_EQ(atomic_load(&n[i].seen), 1);
    CHECK_EQ(atomic_load(&n[i].cb.order), i % STEPS);
    free((void *)n[i].host);
  }
  free(n);
}

TEST(host_notify_once_in_order_after_work) {
  each_device(notify_in_order_dev);
}

static void check_drained(cb_rec *r, size_t n);

/* A gate (host_callback), then n fills and notifications. */
static void gated_notes(be_queue *q, be_mem m, gate *g, cb_rec *r, size_t n) {
  CHECK_OK(B->host_callback(q, gate_fn, g));
  for (size_t i = 0; i < n; i++) {
    CHECK_OK(be_fill_u32(B, q, m, 0, m.bytes / 4, (uint32_t)i + 1));
    CHECK_OK(B->host_notify(q, cb_fn, &r[i]));
  }
  gate_wait_entered(g);
}

/* Notifications pending behind a gate: none runs before the work before it; queue_destroy
 * calls each once (run or canceled); after a fault each is called once with ACCEL_EDEVLOST,
 * and a notification submitted after the fault fails and is never called. */
static void notify_pending_dev(void) {
  enum { N = 24 }; /* see FAULT_N */
  be_device *d = dev_open(1);
  be_mem m = mem_new(d, 1 << 16);
  atomic_int next = 0, next2 = 0;
  cb_rec *r = cb_recs(N, &next), *r2 = cb_recs(N + 1, &next2);
  gate g = {0}, g2 = {0};
  be_queue *q = queue_new(d);
  gated_notes(q, m, &g, r, N);
  test_sleep_ms(20);
  for (size_t i = 0; i < N; i++)
    CHECK_EQ(atomic_load(&r[i].calls), 0);
  pthread_t t = open_later(&g, 30);
  B->queue_destroy(q); /* every notification is called by the time it returns */
  check_drained(r, N);
  for (size_t i = 0; i < N; i++)
    if (atomic_load(&r[i].status) == 0)
      CHECK_EQ(atomic_load(&r[i].order), i);
  pthread_join(t, NULL);
  q = queue_new(d);
  gated_notes(q, m, &g2, r2, N);
  CHECK_OK(B->inject_fault(d));
  CHECK_ERR(B->status(d), ACCEL_EDEVLOST);
  CHECK_ERR(B->host_notify(q, cb_fn, &r2[N]), ACCEL_EDEVLOST);
  atomic_store(&g2.open, 1);
  cb_wait(r2, N);
  for (size_t i = 0; i < N; i++)
    CHECK_ERR(atomic_load(&r2[i].status), ACCEL_EDEVLOST);
  CHECK_OK(atomic_load(&g2.status));
  B->queue_destroy(q);
  B->mem_free(d, &m);
  B->close(d);
  for (size_t i = 0; i < N; i++) {
    CHECK_EQ(atomic_load(&r[i].calls), 1);
    CHECK_EQ(atomic_load(&r2[i].calls), 1);
  }
  CHECK_EQ(atomic_load(&r2[N].calls), 0);
  free(r);
  free(r2);
}

TEST(host_notify_pending_and_fault) {
  each_device(notify_pending_dev);
}

static bool testing_cpu(void) {
  for (const be_entry *e = be_registry(); e->name != NULL; e++)
    if (strcmp(e->name, "cpu") == 0)
      return e->ops == B;
  return false;
}

/* The cpu backend runs tiny work submitted to an idle queue on the submitting thread
 * (backends/cpu/queue.h): it is done, in order, when the submit returns, with no worker in
 * between. A host_callback (it may hold the queue) still goes to the worker, and tiny work
 * behind it waits its turn (host_notify_pending_and_fault). */
static void tiny_at_once_dev(void) {
  if (!testing_cpu()) {
    printf("    not the cpu backend: nothing to check\n");
    return;
  }
  be_device *d = dev_open(0);
  be_queue *q = queue_new(d);
  be_mem m = mem_new(d, 4096);
  be_event *ev = event_new(d);
  atomic_int next = 0;
  cb_rec *r = cb_recs(3, &next);
  for (uint32_t round = 0; round < 3; round++) {
    uint32_t got[1024] = {0};
    CHECK_OK(be_fill_u32(B, q, m, 0, 1024, round + 7));
    CHECK_OK(B->copy_d2h(q, got, m, 0, sizeof got));
    CHECK_OK(B->host_notify(q, cb_fn, &r[round]));
    CHECK_EQ(atomic_load(&r[round].calls), 1);
    CHECK_EQ(atomic_load(&r[round].order), round);
    for (size_t i = 0; i < 1024; i++)
      CHECK_EQ(got[i], round + 7);
    CHECK_OK(B->event_record(ev, q));
    CHECK_OK(B->event_query(ev)); /* complete already: never RT_PENDING */
  }
  B->event_destroy(ev);
  free(r);
  B->queue_destroy(q);
  B->mem_free(d, &m);
  B->close(d);
}

TEST(cpu_tiny_work_on_an_idle_queue_runs_at_once) {
  each_device(tiny_at_once_dev);
}

/* q1 is held by a gate, then fills A; q2 waits for q1's event, then reads A. While the gate
 * is closed q2's work must stay pending; once open, q2 reads the fill. */
static void cross_queue_wait_dev(void) {
  fx f = fx_open();
  be_queue *q2 = queue_new(f.d);
  enum { N = 1 << 16 };
  uint32_t *got = xcalloc(N, 4), value = (uint32_t)rnd64() | 1;
  be_mem a = mem_new(f.d, N * 4);
  gate g = {0};
  be_event *ev = event_new(f.d), *ev2 = event_new(f.d);
  CHECK_OK(B->host_callback(f.q, gate_fn, &g));
  CHECK_OK(be_fill_u32(B, f.q, a, 0, N, value));
  CHECK_OK(B->event_record(ev, f.q));
  CHECK_OK(B->queue_wait(q2, ev));
  CHECK_OK(B->copy_d2h(q2, got, a, 0, N * 4));
  CHECK_OK(B->event_record(ev2, q2));
  gate_wait_entered(&g);
  test_sleep_ms(20);
  CHECK_ERR(B->event_query(ev), RT_PENDING);
  CHECK_ERR(B->event_query(ev2), RT_PENDING);
  atomic_store(&g.open, 1);
  CHECK_OK(B->event_sync(ev2));
  CHECK_OK(B->event_query(ev));
  for (size_t i = 0; i < N; i++)
    CHECK_EQ(got[i], value);
  B->event_destroy(ev);
  B->event_destroy(ev2);
  B->mem_free(f.d, &a);
  B->queue_destroy(q2);
  fx_close(&f);
  free(got);
}

TEST(cross_queue_event_wait) {
  each_device(cross_queue_wait_dev);
}

/* queue_wait captures the event's point: the event may then be recorded again or destroyed
 * and its queue destroyed (here while q2 still waits on it). */
static void wait_captures_point_dev(void) {
  fx f = fx_open();
  be_queue *q1 = queue_new(f.d);
  enum { N = 1 << 14 };
  uint32_t *got = xcalloc(N, 4), value = (uint32_t)rnd64() | 1;
  be_mem a = mem_new(f.d, N * 4);
  gate g = {0};
  be_event *ev = event_new(f.d);
  CHECK_OK(B->host_callback(q1, gate_fn, &g));
  CHECK_OK(be_fill_u32(B, q1, a, 0, N, value));
  CHECK_OK(B->event_record(ev, q1));
  CHECK_OK(B->queue_wait(f.q, ev));
  CHECK_OK(B->copy_d2h(f.q, got, a, 0, N * 4));
  CHECK_OK(B->event_record(ev, f.q)); /* recorded again: q's wait keeps the old point */
  B->event_destroy(ev);
  pthread_t opener = open_later(&g, 30);
  B->queue_destroy(q1); /* drains q1 once the gate opens */
  pthread_join(opener, NULL);
  finish(f.d, f.q);
  for (size_t i = 0; i < N; i++)
    CHECK_EQ(got[i], value);
  B->mem_free(f.d, &a);
  fx_close(&f);
  free(got);
}

TEST(queue_wait_captures_point) {
  each_device(wait_captures_point_dev);
}

static void event_query_sync_dev(void) {
  fx f = fx_open();
  be_queue *q2 = queue_new(f.d);
  be_event *ev = event_new(f.d);
  CHECK_OK(B->event_query(ev)); /* never recorded: complete */
  CHECK_OK(B->event_sync(ev));
  CHECK_OK(B->queue_wait(f.q, ev));
  gate g = {0};
  CHECK_OK(B->host_callback(f.q, gate_fn, &g));
  CHECK_OK(B->event_record(ev, f.q));
  gate_wait_entered(&g);
  CHECK_ERR(B->event_query(ev), RT_PENDING);
  CHECK_OK(B->event_record(ev, q2)); /* recorded again, on an idle queue */
  CHECK_OK(B->event_sync(ev));
  CHECK_OK(B->event_record(ev, f.q));
  CHECK_ERR(B->event_query(ev), RT_PENDING);
  atomic_store(&g.open, 1);
  CHECK_OK(B->event_sync(ev));
  CHECK_OK(B->event_query(ev));
  CHECK_OK(atomic_load(&g.status));
  B->event_destroy(ev);
  B->queue_destroy(q2);
  fx_close(&f);
}

TEST(event_query_sync) {
  each_device(event_query_sync_dev);
}

/* ---- kernels ------------------------------------------------------------------------- */

/* C(i, j) of alpha op(A) op(B) + beta C in double; *mag gets the size of what was summed. */
static double sgemm_ref(const be_sgemm_args *g, const float *a, const float *b, double cij,
                        int64_t i, int64_t j, double *mag) {
  double sum = 0;
  *mag = 0;
  for (int64_t l = 0; l < g->k; l++) {
    double x = g->trans_a ? a[l + i * g->lda] : a[i + l * g->lda];
    double y = g->trans_b ? b[j + l * g->ldb] : b[l + j * g->ldb];
    sum += x * y;
    *mag += fabs(x * y);
  }
  *mag = fabs(g->alpha) * *mag + fabs(g->beta * cij);
  return g->alpha * sum + g->beta * cij;
}

/* Random shape and padded leading dimensions for the given transposes. */
static be_sgemm_args sgemm_shape(be_blas_trans ta, be_blas_trans tb) {
  be_sgemm_args g = {.trans_a = ta,
                     .trans_b = tb,
                     .m = (int64_t)rnd_range(1, 70),
                     .n = (int64_t)rnd_range(1, 70),
                     .k = (int64_t)rnd_range(1, 70),
                     .alpha = rnd_nz(0.5f, 2),
                     .beta = rnd_nz(0.5f, 2)};
  g.lda = (ta ? g.k : g.m) + (int64_t)rnd_range(1, 7);
  g.ldb = (tb ? g.n : g.k) + (int64_t)rnd_range(1, 7);
  g.ldc = g.m + (int64_t)rnd_range(1, 7);
  return g;
}

/* One sgemm with the given transposes, padded leading dimensions and offsets. Tolerance:
 * (k + 4) FLT_EPSILON (|alpha| sum_l |a_il b_lj| + |beta c_ij|), the float error bound of a
 * k-term dot product plus the scaling. The padding of C is left alone. */
static void sgemm_case(fx *f, be_blas_trans ta, be_blas_trans tb) {
  be_sgemm_args g = sgemm_shape(ta, tb);
  int64_t acols = ta ? g.m : g.k, bcols = tb ? g.k : g.n;
  size_t ao = rnd_range(0, 33), bo = rnd_range(0, 33), co = rnd_range(0, 33);
  fbuf a = fbuf_new(f, ao + (size_t)(acols * g.lda) + 3, 0.1f, 1);
  fbuf b = fbuf_new(f, bo + (size_t)(bcols * g.ldb) + 3, 0.1f, 1);
  fbuf c = fbuf_new(f, co + (size_t)(g.n * g.ldc) + 3, 0.1f, 1);
  CHECK_OK(be_sgemm(B, f->q, &g, a.m, ao, b.m, bo, c.m, co));
  float *got = fbuf_read(f, &c);
  for (int64_t j = 0; j < g.n; j++)
    for (int64_t i = 0; i < g.m; i++) {
      size_t at = co + (size_t)(i + j * g.ldc);
      double mag, want = sgemm_ref(&g, a.host + ao, b.host + bo, c.host[at], i, j, &mag);
      check_close(got[at], want, (double)(g.k + 4) * FLT_EPSILON * mag, "sgemm C", at);
      c.host[at] = got[at]; /* so that check_outside sees only the padding */
    }
  check_outside(got, &c, 0, 0);
  free(got);
  fbuf_free(f, &a);
  fbuf_free(f, &b);
  fbuf_free(f, &c);
}

static void kernel_sgemm_dev(void) {
  fx f = fx_open();
  for (int t = 0; t < 4; t++)
    sgemm_case(&f, (be_blas_trans)(t & 1), (be_blas_trans)(t >> 1));
  fx_close(&f);
}

TEST(kernel_sgemm) {
  each_device(kernel_sgemm_dev);
}

/* y = alpha x + y. Tolerance: 2 FLT_EPSILON (|alpha x| + |y|), two roundings (or one fma). */
static void kernel_saxpy_dev(void) {
  fx f = fx_open();
  size_t n = rnd_range(1, 20000), xo = rnd_range(0, 17), yo = rnd_range(0, 17);
  float alpha = rnd_nz(0.5f, 3);
  fbuf x = fbuf_new(&f, xo + n + 5, 0.1f, 4), y = fbuf_new(&f, yo + n + 5, 0.1f, 4);
  CHECK_OK(be_saxpy(B, f.q, n, alpha, x.m, xo, y.m, yo));
  float *got = fbuf_read(&f, &y);
  for (size_t i = 0; i < n; i++) {
    double ax = (double)alpha * x.host[xo + i], yi = y.host[yo + i];
    check_close(got[yo + i], ax + yi, 2 * FLT_EPSILON * (fabs(ax) + fabs(yi)), "saxpy y", i);
  }
  check_outside(got, &y, yo, n);
  free(got);
  fbuf_free(&f, &x);
  fbuf_free(&f, &y);
  fx_close(&f);
}

TEST(kernel_saxpy) {
  each_device(kernel_saxpy_dev);
}

/* result = x . y, in float. Tolerance: (n / 8 + 8) FLT_EPSILON sum |x_i y_i|: a float sum
 * with at least 8 partial sums (SIMD lanes, blocks); a wrong element is far outside it. */
static void kernel_sdot_dev(void) {
  fx f = fx_open();
  size_t n = rnd_range(1, 20000), xo = rnd_range(0, 17), yo = rnd_range(0, 17);
  size_t ro = rnd_range(0, 7);
  fbuf x = fbuf_new(&f, xo + n + 3, 0.1f, 2), y = fbuf_new(&f, yo + n + 3, 0.1f, 2);
  fbuf r = fbuf_new(&f, ro + 4, 1, 2);
  CHECK_OK(be_sdot(B, f.q, n, x.m, xo, y.m, yo, r.m, ro));
  float *got = fbuf_read(&f, &r);
  double sum = 0, mag = 0;
  for (size_t i = 0; i < n; i++) {
    sum += (double)x.host[xo + i] * y.host[yo + i];
    mag += fabs((double)x.host[xo + i] * y.host[yo + i]);
  }
  check_close(got[ro], sum, (double)(n / 8 + 8) * FLT_EPSILON * mag, "sdot", 0);
  check_outside(got, &r, ro, 1);
  free(got);
  fbuf_free(&f, &x);
  fbuf_free(&f, &y);
  fbuf_free(&f, &r);
  fx_close(&f);
}

TEST(kernel_sdot) {
  each_device(kernel_sdot_dev);
}

static void kernel_fill_u32_dev(void) {
  fx f = fx_open();
  size_t n = rnd_range(1, 100000), off = rnd_range(0, 99);
  uint32_t value = (uint32_t)rnd64() | 1;
  fbuf d = fbuf_new(&f, off + n + 9, 1, 2);
  CHECK_OK(be_fill_u32(B, f.q, d.m, off, n, value));
  float *got = fbuf_read(&f, &d);
  for (size_t i = 0; i < n; i++) {
    uint32_t w;
    memcpy(&w, &got[off + i], 4);
    CHECK_EQ(w, value);
  }
  check_outside(got, &d, off, n);
  free(got);
  fbuf_free(&f, &d);
  fx_close(&f);
}

TEST(kernel_fill_u32) {
  each_device(kernel_fill_u32_dev);
}

/* One rng fill at a random seed and offset (odd ones included, even for normals) against the
 * cpu reference. Bits and uniforms: bit for bit. Normals: within 16 FLT_EPSILON (|ref| + 1) *
 * stddev (philox.h: GPUs agree to a few ulp, not bit for bit). */
static void rng_case(fx *f, be_rng_dist dist) {
  size_t n = rnd_range(1, 100000), off = rnd_range(0, 63);
  be_rng_args r = {.dist = dist,
                   .seed = rnd64(),
                   .offset = rnd64() >> rnd_range(20, 63),
                   .mean = rnd_nz(0.5f, 3),
                   .stddev = fabsf(rnd_nz(0.5f, 3))};
  if (dist == BE_RNG_NORMAL)
    r.offset &= ~(uint64_t)1;
  fbuf d = fbuf_new(f, off + n + 5, 1, 2);
  float *want = xcalloc(n, 4);
  CHECK_OK(be_rng_fill(B, f->q, d.m, off, n, &r));
  if (dist == BE_RNG_BITS)
    CHECK_OK(be_cpu_philox_fill_u32((uint32_t *)(void *)want, n, r.seed, r.offset));
  else if (dist == BE_RNG_UNIFORM)
    CHECK_OK(be_cpu_philox_fill_uniform(want, n, r.seed, r.offset));
  else
    CHECK_OK(be_cpu_philox_fill_normal(want, n, r.seed, r.offset, r.mean, r.stddev));
  float *got = fbuf_read(f, &d);
  for (size_t i = 0; i < n; i++) {
    if (dist != BE_RNG_NORMAL && memcmp(&got[off + i], &want[i], 4) != 0)
      TEST_FAIL("rng %d: word %zu (stream offset %" PRIu64 ") differs", dist, i, r.offset + i);
    if (dist == BE_RNG_NORMAL)
      check_close(got[off + i], want[i], 16 * FLT_EPSILON * (fabs(want[i]) + 1) * r.stddev,
                  "normal", i);
  }
  check_outside(got, &d, off, n);
  free(got);
  free(want);
  fbuf_free(f, &d);
}

static void kernel_rng_dev(void) {
  fx f = fx_open();
  for (int i = 0; i < 3; i++) {
    rng_case(&f, BE_RNG_BITS);
    rng_case(&f, BE_RNG_UNIFORM);
    rng_case(&f, BE_RNG_NORMAL);
  }
  fx_close(&f);
}

TEST(kernel_rng_fill) {
  each_device(kernel_rng_dev);
}

static const char *const unary_name[] = {"sigmoid", "relu", "tanh", "exp", "log", "sqrt", "abs"};

static double unary_ref(be_unary_op op, double x) {
  switch (op) {
  case BE_SIGMOID:
    return 1 / (1 + exp(-x));
  case BE_RELU:
    return x < 0 ? 0 : x;
  case BE_TANH:
    return tanh(x);
  case BE_EXP:
    return exp(x);
  case BE_LOG:
    return log(x);
  case BE_SQRT:
    return sqrt(x);
  case BE_ABS:
    return fabs(x);
  }
  return NAN;
}

/* relu and abs are exact; log and sqrt of the negative inputs are NaN on both sides. */
static void check_unary_value(be_unary_op op, double got, double want, double tol, size_t i) {
  if (isnan(want)) {
    if (!isnan(got))
      TEST_FAIL("%s[%zu]: got %.9g, want NaN", unary_name[op], i, got);
    return;
  }
  check_close(got, want, op == BE_RELU || op == BE_ABS ? 0 : tol, unary_name[op], i);
}

/* Tolerance: 4 FLT_EPSILON |ref| + 1e-7 (a few ulp of libm's float functions; relu exact). */
static void unary_case(fx *f, be_unary_op op, bool in_place) {
  size_t n = rnd_range(1, 50000), so = rnd_range(0, 31), dof = in_place ? so : rnd_range(0, 31);
  fbuf src = fbuf_new(f, so + n + 4, 0.05f, 9);
  fbuf dst = in_place ? src : fbuf_new(f, dof + n + 4, 1, 2);
  CHECK_OK(be_unary(B, f->q, op, dst.m, dof, src.m, so, n));
  float *got = fbuf_read(f, &dst);
  for (size_t i = 0; i < n; i++) {
    double want = unary_ref(op, src.host[so + i]);
    check_unary_value(op, got[dof + i], want, 4 * FLT_EPSILON * fabs(want) + 1e-7, i);
  }
  check_outside(got, &dst, dof, n);
  free(got);
  fbuf_free(f, &src);
  if (!in_place)
    fbuf_free(f, &dst);
}

static void kernel_unary_dev(void) {
  fx f = fx_open();
  for (be_unary_op op = BE_SIGMOID; op <= BE_UNARY_OP_LAST; op++) {
    unary_case(&f, op, false);
    unary_case(&f, op, true);
  }
  fx_close(&f);
}

TEST(kernel_unary) {
  each_device(kernel_unary_dev);
}

/* Row-wise softmax of a rows x cols row-major matrix. Tolerance: (cols + 8) FLT_EPSILON
 * |ref| + 1e-9 (exp and a float sum of cols terms). Each row also sums to 1 within it. */
static void kernel_softmax_dev(void) {
  fx f = fx_open();
  size_t rows = rnd_range(1, 64), cols = rnd_range(1, 300), so = rnd_range(0, 9);
  size_t dof = rnd_range(0, 9), n = rows * cols;
  fbuf src = fbuf_new(&f, so + n + 2, 0.01f, 12), dst = fbuf_new(&f, dof + n + 2, 1, 2);
  CHECK_OK(be_softmax(B, f.q, dst.m, dof, src.m, so, rows, cols));
  float *got = fbuf_read(&f, &dst);
  for (size_t r = 0; r < rows; r++) {
    const float *x = src.host + so + r * cols;
    double mx = x[0], sum = 0, tol = (double)(cols + 8) * FLT_EPSILON;
    for (size_t j = 1; j < cols; j++)
      mx = fmax(mx, x[j]);
    for (size_t j = 0; j < cols; j++)
      sum += exp(x[j] - mx);
    double row = 0;
    for (size_t j = 0; j < cols; j++) {
      double want = exp(x[j] - mx) / sum;
      check_close(got[dof + r * cols + j], want, tol * want + 1e-9, "softmax", r * cols + j);
      row += got[dof + r * cols + j];
    }
    check_close(row, 1, tol + 1e-6, "softmax row sum", r);
  }
  check_outside(got, &dst, dof, n);
  free(got);
  fbuf_free(&f, &src);
  fbuf_free(&f, &dst);
  fx_close(&f);
}

TEST(kernel_softmax) {
  each_device(kernel_softmax_dev);
}

/* ---- every dtype of the packages ------------------------------------------------------
 * Typed buffers hold raw elements (16-bit floats as their bits); values go through double.
 * Each op runs in every dtype the device's package says it runs, against a long double
 * reference on the values actually stored; every dtype it says it does not run must answer
 * ACCEL_ENOTSUP. Per-dtype unit roundoff u: F64 2^-53, F32 2^-24, F16 2^-11, BF16 2^-8. */

static const uint32_t all_dtypes[] = {ACCEL_F32, ACCEL_U32,  ACCEL_F64,
                                      ACCEL_F16, ACCEL_BF16, ACCEL_I32};
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

static const char *dt_name(uint32_t t) {
  static const char *const names[] = {"?", "f32", "u32", "f64", "f16", "bf16", "i32", "bool"};
  return t <= ACCEL_BOOL ? names[t] : "?";
}

/* The unit roundoff of a float type, and the smallest spacing near 0 (subnormals). */
static double dt_u(uint32_t t) {
  return t == ACCEL_F64   ? DBL_EPSILON / 2
         : t == ACCEL_F32 ? FLT_EPSILON / 2
         : t == ACCEL_F16 ? 0x1p-11
                          : 0x1p-8;
}

static double dt_tiny(uint32_t t) {
  return t == ACCEL_F16 ? 0x1p-25 : t == ACCEL_BF16 ? 0x1p-134 : t == ACCEL_F32 ? 1e-9 : 1e-300;
}

static double tget(uint32_t t, const void *p, size_t i) {
  switch (t) {
  case ACCEL_F64:
    return ((const double *)p)[i];
  case ACCEL_F32:
    return ((const float *)p)[i];
  case ACCEL_F16:
    return be_f16_to_f32(((const uint16_t *)p)[i]);
  case ACCEL_BF16:
    return be_bf16_to_f32(((const uint16_t *)p)[i]);
  default:
    return ((const uint32_t *)p)[i];
  }
}

static void tset(uint32_t t, void *p, size_t i, double v) {
  switch (t) {
  case ACCEL_F64:
    ((double *)p)[i] = v;
    break;
  case ACCEL_F32:
    ((float *)p)[i] = (float)v;
    break;
  case ACCEL_F16:
    ((uint16_t *)p)[i] = be_f32_to_f16((float)v);
    break;
  case ACCEL_BF16:
    ((uint16_t *)p)[i] = be_f32_to_bf16((float)v);
    break;
  default:
    ((uint32_t *)p)[i] = (uint32_t)v;
  }
}

typedef struct tbuf {
  be_mem m;
  uint32_t t;
  size_t len, es;
  uint8_t *host; /* what was written */
} tbuf;

/* len random nonzero elements of type t, |x| in [lo, hi] (as stored after rounding). */
static tbuf tbuf_new(fx *f, uint32_t t, size_t len, double lo, double hi) {
  tbuf b = {.t = t, .len = len, .es = be_dtype_size(t)};
  b.m = mem_new(f->d, len * b.es);
  b.host = xcalloc(len, b.es);
  for (size_t i = 0; i < len; i++) {
    double mag = lo + (hi - lo) * (double)(rnd64() >> 11) * 0x1p-53;
    tset(t, b.host, i, (rnd64() & 1) ? -mag : mag);
  }
  return b;
}

static void tbuf_put(fx *f, const tbuf *b) {
  put(f, b->m, 0, b->host, b->len * b->es);
}

static uint8_t *tbuf_read(fx *f, const tbuf *b) {
  uint8_t *out = xcalloc(b->len, b->es);
  get(f, out, b->m, 0, b->len * b->es);
  return out;
}

/* After the queue's work is done: memory must outlive the work that uses it (the backend
 * contract), and a case may end on ops it never read back (the refusals' accepted calls). */
static void tbuf_free(fx *f, tbuf *b) {
  finish(f->d, f->q);
  B->mem_free(f->d, &b->m);
  free(b->host);
}

/* Every element outside [off, off + n) still holds what was written, bit for bit. */
static void tcheck_outside(const uint8_t *got, const tbuf *b, size_t off, size_t n) {
  for (size_t i = 0; i < b->len; i++)
    if ((i < off || i >= off + n) && memcmp(got + i * b->es, b->host + i * b->es, b->es) != 0)
      TEST_FAIL("%s element %zu outside [%zu, %zu) changed", dt_name(b->t), i, off, off + n);
}

static bool in_set(uint32_t set, uint32_t t) {
  return (set & ACCEL_DTYPE_BIT(t)) != 0;
}

/* ---- gemm in every combination ---- */

typedef enum gemm_kind { G_PLAIN, G_K0, G_ALPHA0, G_BETA0_NAN, G_BATCH } gemm_kind;

typedef struct gemm_t {
  be_gemm_args g;
  size_t ao, bo, co;
  tbuf a, b, c;
} gemm_t;

/* Random shape with padded leading dimensions, alpha, beta and strides for `kind`. */
static be_gemm_args gemm_shape(uint32_t ab, uint32_t ct, int tr, gemm_kind kind) {
  be_gemm_args g = {.trans_a = (be_blas_trans)(tr & 1),
                    .trans_b = (be_blas_trans)(tr >> 1),
                    .m = (int64_t)rnd_range(1, 70),
                    .n = (int64_t)rnd_range(1, 70),
                    .k = kind == G_K0 ? 0 : (int64_t)rnd_range(1, 70),
                    .alpha = kind == G_ALPHA0 ? 0 : rnd_nz(0.5f, 2),
                    .beta = kind == G_BETA0_NAN ? 0 : rnd_nz(0.5f, 2),
                    .ab_type = ab,
                    .c_type = ct,
                    .batch = kind == G_BATCH ? (int64_t)rnd_range(2, 5) : 1};
  g.lda = (g.trans_a ? g.k : g.m) + (int64_t)rnd_range(0, 7);
  g.ldb = (g.trans_b ? g.n : g.k) + (int64_t)rnd_range(0, 7);
  g.lda = g.lda > 0 ? g.lda : 1;
  g.ldb = g.ldb > 0 ? g.ldb : 1;
  g.ldc = g.m + (int64_t)rnd_range(0, 7);
  if (g.batch > 1) {
    g.stride_a = rnd_range(0, 3) == 0 ? 0
                                      : (g.trans_a ? g.m : g.k) * g.lda + (int64_t)rnd_range(0, 9);
    g.stride_b = rnd_range(0, 3) == 0 ? 0
                                      : (g.trans_b ? g.k : g.n) * g.ldb + (int64_t)rnd_range(0, 9);
    g.stride_c = g.n * g.ldc + (int64_t)rnd_range(0, 9);
    if (g.stride_a == 0 && g.stride_b == 0) /* sharing both is ELIMIT (blas_args.h) */
      g.stride_b = (g.trans_b ? g.k : g.n) * g.ldb;
  }
  return g;
}

static size_t batch_len(int64_t batch, int64_t stride, int64_t cols, int64_t ld) {
  return (size_t)((batch - 1) * stride + cols * ld);
}

/* C_b(i, j) of alpha op(A_b) op(B_b) + beta C_b in long double; *mag the size of what was
 * summed, for the tolerance. */
static long double gemm_ref(const gemm_t *t, int64_t bi, int64_t i, int64_t j, double *mag) {
  const be_gemm_args *g = &t->g;
  size_t a0 = t->ao + (size_t)(bi * g->stride_a), b0 = t->bo + (size_t)(bi * g->stride_b);
  long double sum = 0;
  *mag = 0;
  for (int64_t l = 0; l < g->k && g->alpha != 0; l++) {
    double x = tget(g->ab_type, t->a.host,
                    a0 + (size_t)(g->trans_a ? l + i * g->lda : i + l * g->lda));
    double y = tget(g->ab_type, t->b.host,
                    b0 + (size_t)(g->trans_b ? j + l * g->ldb : l + j * g->ldb));
    sum += (long double)x * y;
    *mag += fabs(x * y);
  }
  size_t at = t->co + (size_t)(bi * g->stride_c + i + j * g->ldc);
  long double cij = g->beta == 0 ? 0 : tget(g->c_type, t->c.host, at);
  *mag = fabs(g->alpha) * *mag + fabs(g->beta * (double)cij);
  return g->alpha * sum + g->beta * cij;
}

/* Tolerance: (k + 4) u_acc mag, u_acc the accumulation's roundoff (F64 for F64, else F32),
 * plus the rounding to a 16-bit C: u_c |want| and half its smallest spacing. */
static double gemm_tol(const be_gemm_args *g, double want, double mag) {
  double acc = g->ab_type == ACCEL_F64 ? DBL_EPSILON : FLT_EPSILON;
  double tol = (double)(g->k + 4) * acc * mag;
  if (g->c_type == ACCEL_F16 || g->c_type == ACCEL_BF16)
    tol += dt_u(g->c_type) * fabs(want) + dt_tiny(g->c_type);
  return tol;
}

static void gemm_verify(fx *f, gemm_t *t) {
  const be_gemm_args *g = &t->g;
  uint8_t *got = tbuf_read(f, &t->c);
  for (int64_t bi = 0; bi < g->batch; bi++)
    for (int64_t j = 0; j < g->n; j++)
      for (int64_t i = 0; i < g->m; i++) {
        size_t at = t->co + (size_t)(bi * g->stride_c + i + j * g->ldc);
        double mag, want = (double)gemm_ref(t, bi, i, j, &mag);
        double v = tget(g->c_type, got, at);
        if (!(fabs(v - want) <= gemm_tol(g, want, mag)))
          TEST_FAIL("gemm %s->%s ta %d tb %d m %" PRId64 " n %" PRId64 " k %" PRId64
                    " batch %" PRId64 ": C_%" PRId64 "(%" PRId64 ", %" PRId64
                    ") = %.17g, want %.17g (tolerance %.3g)",
                    dt_name(g->ab_type), dt_name(g->c_type), g->trans_a, g->trans_b, g->m, g->n,
                    g->k, g->batch, bi, i, j, v, want, gemm_tol(g, want, mag));
        memcpy(t->c.host + at * t->c.es, got + at * t->c.es, t->c.es);
      }
  tcheck_outside(got, &t->c, 0, 0); /* padding, gaps between batches, before and after */
  free(got);
}

static void gemm_case(fx *f, uint32_t ab, uint32_t ct, int tr, gemm_kind kind) {
  gemm_t t = {.g = gemm_shape(ab, ct, tr, kind),
              .ao = rnd_range(0, 9),
              .bo = rnd_range(0, 9),
              .co = rnd_range(0, 9)};
  be_gemm_args *g = &t.g;
  int64_t acols = g->trans_a ? g->m : g->k, bcols = g->trans_b ? g->k : g->n;
  t.a = tbuf_new(f, ab, t.ao + batch_len(g->batch, g->stride_a, acols, g->lda) + 3, 0.1, 1);
  t.b = tbuf_new(f, ab, t.bo + batch_len(g->batch, g->stride_b, bcols, g->ldb) + 3, 0.1, 1);
  t.c = tbuf_new(f, ct, t.co + batch_len(g->batch, g->stride_c, g->n, g->ldc) + 3, 0.1, 1);
  if (kind == G_K0 || kind == G_ALPHA0) /* must not be read */
    for (size_t i = 0; i < t.a.len || i < t.b.len; i++) {
      if (i < t.a.len)
        tset(ab, t.a.host, i, NAN);
      if (i < t.b.len)
        tset(ab, t.b.host, i, NAN);
    }
  if (kind == G_BETA0_NAN) /* must vanish */
    for (int64_t j = 0; j < g->n; j++)
      for (int64_t i = 0; i < g->m; i++)
        tset(ct, t.c.host, t.co + (size_t)(i + j * g->ldc), NAN);
  tbuf_put(f, &t.a);
  tbuf_put(f, &t.b);
  tbuf_put(f, &t.c);
  CHECK_OK(B->blas->gemm(f->q, g, t.a.m, t.ao, t.b.m, t.bo, t.c.m, t.co));
  gemm_verify(f, &t);
  tbuf_free(f, &t.a);
  tbuf_free(f, &t.b);
  tbuf_free(f, &t.c);
}

static const uint32_t gemm_maths[] = {BE_GEMM_MATH_DEVICE, BE_GEMM_MATH_FP32, BE_GEMM_MATH_TF32,
                                      BE_GEMM_MATH_FP64};

/* Every (A/B type, C type) the device runs with its default math: all transposes and every
 * special case. A combination it does not run (supports says so) answers ACCEL_ENOTSUP. */
static void kernel_gemm_dtypes_dev(void) {
  fx f = fx_open();
  tbuf m = tbuf_new(&f, ACCEL_F64, 64, 1, 2);
  be_gemm_args small = {
      .m = 2, .n = 2, .k = 2, .alpha = 1, .lda = 2, .ldb = 2, .ldc = 2, .batch = 1};
  for (size_t x = 0; x < N_DTYPES; x++)
    for (size_t y = 0; y < N_DTYPES; y++)
      for (size_t mi = 0; mi < 4; mi++) {
        uint32_t ab = all_dtypes[x], ct = all_dtypes[y], math = gemm_maths[mi];
        int sup = B->blas->gemm_supports(f.d, ab, ct, math);
        CHECK(sup == 0 || sup == ACCEL_ENOTSUP);
        if (sup == 0) {
          CHECK(be_gemm_combo_ok(ab, ct, math));
          continue;
        }
        small.ab_type = ab, small.c_type = ct, small.math = (be_gemm_math)math;
        CHECK_ERR(B->blas->gemm(f.q, &small, m.m, 0, m.m, 8, m.m, 16), ACCEL_ENOTSUP);
      }
  for (size_t x = 0; x < N_DTYPES; x++)
    for (size_t y = 0; y < N_DTYPES; y++) {
      uint32_t ab = all_dtypes[x], ct = all_dtypes[y];
      if (B->blas->gemm_supports(f.d, ab, ct, BE_GEMM_MATH_DEVICE) != 0)
        continue;
      printf("    gemm %s -> %s\n", dt_name(ab), dt_name(ct));
      for (int tr = 0; tr < 4; tr++)
        for (gemm_kind kind = G_PLAIN; kind <= G_BATCH; kind++)
          gemm_case(&f, ab, ct, tr, kind);
    }
  tbuf_free(&f, &m);
  fx_close(&f);
}

TEST(kernel_gemm_dtypes) {
  each_device(kernel_gemm_dtypes_dev);
}

/* ---- axpy, dot, scal ---- */

/* y = alpha x + y: 2 u_t (|alpha x| + |y|) plus (for 16-bit) the smallest spacing. */
static void axpy_case(fx *f, uint32_t t) {
  size_t n = rnd_range(1, 20000), xo = rnd_range(0, 17), yo = rnd_range(0, 17);
  double alpha = rnd_nz(0.5f, 3);
  tbuf x = tbuf_new(f, t, xo + n + 5, 0.1, 4), y = tbuf_new(f, t, yo + n + 5, 0.1, 4);
  tbuf_put(f, &x);
  tbuf_put(f, &y);
  CHECK_OK(B->blas->axpy(f->q, t, n, alpha, x.m, xo, y.m, yo));
  uint8_t *got = tbuf_read(f, &y);
  double a = t == ACCEL_F64 ? alpha : (float)alpha;
  for (size_t i = 0; i < n; i++) {
    double ax = a * tget(t, x.host, xo + i), yi = tget(t, y.host, yo + i);
    check_close(tget(t, got, yo + i), ax + yi, 4 * dt_u(t) * (fabs(ax) + fabs(yi)), "axpy", i);
  }
  tcheck_outside(got, &y, yo, n);
  free(got);
  tbuf_free(f, &x);
  tbuf_free(f, &y);
}

/* x . y: (n / 8 + 8) 2 u_t sum |x_i y_i| (blocked sums, as kernel_sdot). */
static void dot_case(fx *f, uint32_t t) {
  size_t n = rnd_range(1, 20000), xo = rnd_range(0, 17), yo = rnd_range(0, 17);
  size_t ro = rnd_range(0, 7);
  tbuf x = tbuf_new(f, t, xo + n + 3, 0.1, 2), y = tbuf_new(f, t, yo + n + 3, 0.1, 2);
  tbuf r = tbuf_new(f, t, ro + 4, 1, 2);
  tbuf_put(f, &x);
  tbuf_put(f, &y);
  tbuf_put(f, &r);
  CHECK_OK(B->blas->dot(f->q, t, n, x.m, xo, y.m, yo, r.m, ro));
  uint8_t *got = tbuf_read(f, &r);
  long double sum = 0;
  double mag = 0;
  for (size_t i = 0; i < n; i++) {
    double p = tget(t, x.host, xo + i) * tget(t, y.host, yo + i);
    sum += (long double)tget(t, x.host, xo + i) * tget(t, y.host, yo + i);
    mag += fabs(p);
  }
  check_close(tget(t, got, ro), (double)sum, (double)(n / 8 + 8) * 2 * dt_u(t) * mag, "dot", 0);
  tcheck_outside(got, &r, ro, 1);
  free(got);
  tbuf_free(f, &x);
  tbuf_free(f, &y);
  tbuf_free(f, &r);
}

/* x = alpha x: one rounding, u_t |alpha x|. */
static void scal_case(fx *f, uint32_t t) {
  size_t n = rnd_range(1, 20000), xo = rnd_range(0, 17);
  double alpha = rnd_nz(0.5f, 3);
  tbuf x = tbuf_new(f, t, xo + n + 5, 0.1, 4);
  tbuf_put(f, &x);
  CHECK_OK(B->blas->scal(f->q, t, n, alpha, x.m, xo));
  uint8_t *got = tbuf_read(f, &x);
  double a = t == ACCEL_F64 ? alpha : (float)alpha;
  for (size_t i = 0; i < n; i++) {
    double want = a * tget(t, x.host, xo + i);
    check_close(tget(t, got, xo + i), want, 2 * dt_u(t) * fabs(want), "scal", i);
  }
  tcheck_outside(got, &x, xo, n);
  free(got);
  tbuf_free(f, &x);
}

static void kernel_vector_dtypes_dev(void) {
  fx f = fx_open();
  uint32_t set = B->blas->vector_dtypes(f.d);
  tbuf m = tbuf_new(&f, ACCEL_F64, 64, 1, 2);
  tbuf_put(&f, &m);
  for (size_t x = 0; x < N_DTYPES; x++) {
    uint32_t t = all_dtypes[x];
    if (!in_set(set, t)) {
      CHECK_ERR(B->blas->axpy(f.q, t, 4, 2, m.m, 0, m.m, 16), ACCEL_ENOTSUP);
      CHECK_ERR(B->blas->dot(f.q, t, 4, m.m, 0, m.m, 16, m.m, 32), ACCEL_ENOTSUP);
      CHECK_ERR(B->blas->scal(f.q, t, 4, 2, m.m, 0), ACCEL_ENOTSUP);
      continue;
    }
    printf("    axpy, dot, scal %s\n", dt_name(t));
    for (int i = 0; i < 2; i++) {
      axpy_case(&f, t);
      dot_case(&f, t);
      scal_case(&f, t);
    }
  }
  uint8_t *got = tbuf_read(&f, &m);
  tcheck_outside(got, &m, 0, 0); /* the refused calls wrote nothing */
  free(got);
  tbuf_free(&f, &m);
  fx_close(&f);
}

TEST(kernel_vector_dtypes) {
  each_device(kernel_vector_dtypes_dev);
}

/* ---- element-wise ops and softmax ---- */

static long double unary_ref_l(be_unary_op op, long double x) {
  switch (op) {
  case BE_SIGMOID:
    return 1 / (1 + expl(-x));
  case BE_RELU:
    return x < 0 ? 0 : x;
  case BE_TANH:
    return tanhl(x);
  case BE_EXP:
    return expl(x);
  case BE_LOG:
    return logl(x);
  case BE_SQRT:
    return sqrtl(x);
  case BE_ABS:
    return fabsl(x);
  }
  return NAN;
}

/* The op's own error (8 u of the arithmetic: double for F64, float otherwise; relu exact) plus
 * the rounding to t: u_t |want| and half its smallest spacing. */
static double nn_tol(uint32_t t, double want, double op_ulps) {
  double ar = t == ACCEL_F64 ? DBL_EPSILON : FLT_EPSILON;
  double tol = op_ulps * ar * fabs(want) + (t == ACCEL_F64 ? 1e-300 : 1e-7 * (op_ulps > 0));
  if (t == ACCEL_F16 || t == ACCEL_BF16)
    tol += dt_u(t) * fabs(want) + dt_tiny(t);
  return tol;
}

static void unary_dt_case(fx *f, uint32_t t, be_unary_op op, bool in_place) {
  size_t n = rnd_range(1, 50000), so = rnd_range(0, 31), dof = in_place ? so : rnd_range(0, 31);
  tbuf src = tbuf_new(f, t, so + n + 4, 0.05, 9);
  tbuf dst = in_place ? src : tbuf_new(f, t, dof + n + 4, 1, 2);
  tbuf_put(f, &src);
  if (!in_place)
    tbuf_put(f, &dst);
  CHECK_OK(B->nn->unary(f->q, t, op, dst.m, dof, src.m, so, n));
  uint8_t *got = tbuf_read(f, &dst);
  for (size_t i = 0; i < n; i++) {
    double want = (double)unary_ref_l(op, tget(t, src.host, so + i));
    check_unary_value(op, tget(t, got, dof + i), want, nn_tol(t, want, 4), i);
  }
  tcheck_outside(got, &dst, dof, n);
  free(got);
  tbuf_free(f, &src);
  if (!in_place)
    tbuf_free(f, &dst);
}

/* Tolerance: (cols + 8) ulps of the arithmetic, plus the rounding to t. */
static void softmax_dt_case(fx *f, uint32_t t, bool in_place) {
  size_t rows = rnd_range(1, 64), cols = rnd_range(1, 300), so = rnd_range(0, 9);
  size_t dof = in_place ? so : rnd_range(0, 9), n = rows * cols;
  tbuf src = tbuf_new(f, t, so + n + 2, 0.01, 12);
  tbuf dst = in_place ? src : tbuf_new(f, t, dof + n + 2, 1, 2);
  tbuf_put(f, &src);
  if (!in_place)
    tbuf_put(f, &dst);
  CHECK_OK(B->nn->softmax(f->q, t, dst.m, dof, src.m, so, rows, cols));
  uint8_t *got = tbuf_read(f, &dst);
  for (size_t r = 0; r < rows; r++) {
    size_t x0 = so + r * cols;
    long double mx = tget(t, src.host, x0), sum = 0;
    for (size_t j = 1; j < cols; j++)
      mx = fmaxl(mx, tget(t, src.host, x0 + j));
    for (size_t j = 0; j < cols; j++)
      sum += expl(tget(t, src.host, x0 + j) - mx);
    double row = 0;
    for (size_t j = 0; j < cols; j++) {
      double want = (double)(expl(tget(t, src.host, x0 + j) - mx) / sum);
      double v = tget(t, got, dof + r * cols + j);
      check_close(v, want, nn_tol(t, want, (double)(cols + 8)), "softmax", r * cols + j);
      row += v;
    }
    double row_tol = (double)(cols + 8) * (t == ACCEL_F64 ? DBL_EPSILON : FLT_EPSILON) +
                     (t == ACCEL_F16 || t == ACCEL_BF16 ? dt_u(t) * 2 : 1e-6);
    check_close(row, 1, row_tol, "softmax row sum", r);
  }
  tcheck_outside(got, &dst, dof, n);
  free(got);
  tbuf_free(f, &src);
  if (!in_place)
    tbuf_free(f, &dst);
}

/* ---- binary element-wise ops, broadcast by strides ---- */

static const char *const binary_name[] = {"add",    "subtract", "multiply",
                                          "divide", "maximum",  "minimum"};

static long double binary_ref(be_binary_op op, long double x, long double y) {
  switch (op) {
  case BE_ADD:
    return x + y;
  case BE_SUB:
    return x - y;
  case BE_MUL:
    return x * y;
  case BE_DIV:
    return x / y;
  case BE_MAXIMUM:
    return x > y ? x : y;
  case BE_MINIMUM:
    return x < y ? x : y;
  default: /* the comparisons: kernel_compare */
    return NAN;
  }
}

/* How a case reads its inputs. */
typedef enum { B_FULL, B_SCALAR, B_ROW, B_COLUMN, B_TRANSPOSED } bcast;

static void strides_of(bcast how, uint64_t rows, uint64_t cols, uint64_t *rs, uint64_t *cs,
                       size_t *len) {
  static const uint64_t k[][2] = {{1, 1}, {0, 0}, {0, 1}, {1, 0}, {1, 1}};
  *rs = how == B_FULL ? cols : how == B_TRANSPOSED ? 1 : k[how][0];
  *cs = how == B_TRANSPOSED ? rows : k[how][1];
  *len = how == B_SCALAR ? 1 : how == B_ROW ? cols : how == B_COLUMN ? rows : rows * cols;
}

/* dst = a op b over rows x cols with a read as `ha` and b as `hb` (dst is a when in_place),
 * at random offsets; each element against a long double reference (the op rounds once to
 * its arithmetic, once more to F16/BF16; maximum and minimum exact); nothing else written. */
static void binary_dt_case(fx *f, uint32_t t, be_binary_op op, bcast ha, bcast hb, bool in_place) {
  uint64_t rows = rnd_range(1, 70), cols = rnd_range(1, 90);
  be_binary_args g = {.op = op, .rows = rows, .cols = cols};
  size_t la, lb, ao = rnd_range(0, 7), bo = rnd_range(0, 7), n = rows * cols;
  strides_of(ha, rows, cols, &g.a_rs, &g.a_cs, &la);
  strides_of(hb, rows, cols, &g.b_rs, &g.b_cs, &lb);
  tbuf a = tbuf_new(f, t, ao + la + 3, 0.5, 4), b = tbuf_new(f, t, bo + lb + 3, 0.5, 4);
  size_t dof = in_place ? ao : rnd_range(0, 7);
  tbuf dst = in_place ? a : tbuf_new(f, t, dof + n + 3, 1, 2);
  tbuf_put(f, &a);
  tbuf_put(f, &b);
  if (!in_place)
    tbuf_put(f, &dst);
  CHECK_OK(B->nn->binary(f->q, t, &g, dst.m, dof, a.m, ao, b.m, bo));
  uint8_t *got = tbuf_read(f, &dst);
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t c = 0; c < cols; c++) {
      long double x = tget(t, a.host, ao + r * g.a_rs + c * g.a_cs);
      long double y = tget(t, b.host, bo + r * g.b_rs + c * g.b_cs);
      double want = (double)binary_ref(op, x, y);
      double tol = op >= BE_MAXIMUM ? 0 : nn_tol(t, want, 1);
      check_close(tget(t, got, dof + r * cols + c), want, tol, binary_name[op], r * cols + c);
    }
  tcheck_outside(got, &dst, dof, n);
  free(got);
  tbuf_free(f, &b);
  tbuf_free(f, &a);
  if (!in_place)
    tbuf_free(f, &dst);
}

/* Refused before anything runs: an unknown op, rows x cols past dst, an input's strides past
 * its end (by one element), a dtype the device does not run. */
static void binary_refusals(fx *f, uint32_t set) {
  tbuf m = tbuf_new(f, ACCEL_F32, 64, 1, 2);
  tbuf_put(f, &m);
  be_binary_args g = {.op = BE_ADD, .rows = 4, .cols = 4, .a_rs = 4, .a_cs = 1};
  CHECK_OK(B->nn->binary(f->q, ACCEL_F32, &g, m.m, 0, m.m, 16, m.m, 48)); /* at the limit */
  CHECK_ERR(B->nn->binary(f->q, ACCEL_F32, &g, m.m, 49, m.m, 0, m.m, 0), ACCEL_EINVAL);
  CHECK_ERR(B->nn->binary(f->q, ACCEL_F32, &g, m.m, 0, m.m, 49, m.m, 0), ACCEL_EINVAL);
  g.b_rs = 16; /* b spans 3 * 16 + 1 = 49 elements */
  CHECK_OK(B->nn->binary(f->q, ACCEL_F32, &g, m.m, 0, m.m, 0, m.m, 15));
  CHECK_ERR(B->nn->binary(f->q, ACCEL_F32, &g, m.m, 0, m.m, 0, m.m, 16), ACCEL_EINVAL);
  g.op = (be_binary_op)(BE_BINARY_OP_LAST + 1);
  CHECK_ERR(B->nn->binary(f->q, ACCEL_F32, &g, m.m, 0, m.m, 0, m.m, 0), ACCEL_EINVAL);
  g.op = BE_ADD;
  for (size_t x = 0; x < N_DTYPES; x++)
    if (!in_set(set, all_dtypes[x]) && all_dtypes[x] != ACCEL_I32 && all_dtypes[x] != ACCEL_U32 &&
        all_dtypes[x] != ACCEL_BOOL)
      CHECK_ERR(B->nn->binary(f->q, all_dtypes[x], &g, m.m, 0, m.m, 0, m.m, 0), ACCEL_ENOTSUP);
  /* BOOL takes the logical ops only: arithmetic is an op the dtype does not take */
  CHECK_ERR(B->nn->binary(f->q, ACCEL_BOOL, &g, m.m, 0, m.m, 0, m.m, 0), ACCEL_EINVAL);
  tbuf_free(f, &m);
}

static void kernel_binary_dev(void) {
  fx f = fx_open();
  uint32_t set = B->nn->dtypes(f.d);
  binary_refusals(&f, set);
  for (size_t x = 0; x < N_DTYPES; x++) {
    uint32_t t = all_dtypes[x];
    if (!in_set(set, t))
      continue;
    printf("    add, subtract, multiply, divide, maximum, minimum %s\n", dt_name(t));
    for (be_binary_op op = BE_ADD; op <= BE_BINARY_ARITH_LAST; op++) {
      binary_dt_case(&f, t, op, B_FULL, B_FULL, false);
      binary_dt_case(&f, t, op, B_FULL, B_SCALAR, false);
      binary_dt_case(&f, t, op, B_ROW, B_COLUMN, false);
      binary_dt_case(&f, t, op, B_TRANSPOSED, B_FULL, false);
      binary_dt_case(&f, t, op, B_FULL, B_ROW, true);
    }
  }
  fx_close(&f);
}

TEST(kernel_binary) {
  each_device(kernel_binary_dev);
}

/* ---- integer arithmetic, comparisons and where: exact answers ---- */

/* len elements of t with random bits (BOOL: random bytes, some above 1), or for `ties` values
 * from a handful (so that comparisons meet equal pairs), NaN planted in floats. */
static tbuf tbuf_bits(fx *f, uint32_t t, size_t len, bool ties) {
  tbuf b = {.t = t, .len = len, .es = be_dtype_size(t)};
  b.m = mem_new(f->d, len * b.es);
  b.host = xcalloc(len, b.es);
  bool is_float = t == ACCEL_F32 || t == ACCEL_F64 || t == ACCEL_F16 || t == ACCEL_BF16;
  for (size_t i = 0; i < len; i++) {
    uint64_t r = rnd64();
    if (ties && is_float)
      tset(t, b.host, i, r % 9 == 0 ? NAN : (double)(int)(r % 7) - 3.0 + (r % 5 == 0 ? 0.5 : 0));
    else if (ties && t == ACCEL_I32)
      ((int32_t *)(void *)b.host)[i] = r % 4 == 0 ? (int32_t)(r >> 32) : (int32_t)(r % 7) - 3;
    else if (ties)
      ((uint32_t *)(void *)b.host)[i] = r % 4 == 0 ? (uint32_t)(r >> 32) : (uint32_t)(r % 7);
    else
      memcpy(b.host + i * b.es, &r, b.es);
  }
  return b;
}

/* The value of element i of an I32 or U32 buffer, exactly. */
static int64_t iget(uint32_t t, const uint8_t *p, size_t i) {
  uint32_t u;
  memcpy(&u, p + 4 * i, 4);
  return t == ACCEL_I32 ? (int64_t)(int32_t)u : (int64_t)u;
}

/* a op b for I32 or U32 in 64 bits, then reduced mod 2^32 (the wrap numpy's int32 makes). */
static uint32_t int_ref(be_binary_op op, int64_t x, int64_t y) {
  switch (op) {
  case BE_ADD:
    return (uint32_t)(uint64_t)(x + y);
  case BE_SUB:
    return (uint32_t)(uint64_t)(x - y);
  case BE_MUL:
    return (uint32_t)((uint64_t)x * (uint64_t)y);
  case BE_MAXIMUM:
    return (uint32_t)(x > y ? x : y);
  default:
    return (uint32_t)(x < y ? x : y);
  }
}

static void int_binary_case(fx *f, uint32_t t, be_binary_op op, bcast ha, bcast hb, bool in_place) {
  uint64_t rows = rnd_range(1, 70), cols = rnd_range(1, 90);
  be_binary_args g = {.op = op, .rows = rows, .cols = cols};
  size_t la, lb, ao = rnd_range(0, 7), bo = rnd_range(0, 7), n = rows * cols;
  strides_of(ha, rows, cols, &g.a_rs, &g.a_cs, &la);
  strides_of(hb, rows, cols, &g.b_rs, &g.b_cs, &lb);
  tbuf a = tbuf_bits(f, t, ao + la + 3, rnd64() & 1), b = tbuf_bits(f, t, bo + lb + 3, false);
  size_t dof = in_place ? ao : rnd_range(0, 7);
  tbuf dst = in_place ? a : tbuf_bits(f, t, dof + n + 3, false);
  tbuf_put(f, &a);
  tbuf_put(f, &b);
  if (!in_place)
    tbuf_put(f, &dst);
  CHECK_OK(B->nn->binary(f->q, t, &g, dst.m, dof, a.m, ao, b.m, bo));
  uint8_t *got = tbuf_read(f, &dst);
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t c = 0; c < cols; c++) {
      int64_t x = iget(t, a.host, ao + r * g.a_rs + c * g.a_cs);
      int64_t y = iget(t, b.host, bo + r * g.b_rs + c * g.b_cs);
      uint32_t want = int_ref(op, x, y), have = (uint32_t)iget(t, got, dof + r * cols + c);
      if (have != want)
        TEST_FAIL("%s %s[%llu, %llu]: %lld, %lld gave %u, want %u", dt_name(t), binary_name[op],
                  (unsigned long long)r, (unsigned long long)c, (long long)x, (long long)y, have,
                  want);
    }
  tcheck_outside(got, &dst, dof, n);
  free(got);
  tbuf_free(f, &b);
  tbuf_free(f, &a);
  if (!in_place)
    tbuf_free(f, &dst);
}

static void kernel_binary_int_dev(void) {
  fx f = fx_open();
  static const uint32_t ints[] = {ACCEL_I32, ACCEL_U32};
  tbuf m = tbuf_bits(&f, ACCEL_I32, 64, false);
  tbuf_put(&f, &m);
  be_binary_args g = {
      .op = BE_DIV, .rows = 4, .cols = 4, .a_rs = 4, .a_cs = 1, .b_rs = 4, .b_cs = 1};
  for (int k = 0; k < 2; k++) { /* integer division: refused, nothing written */
    CHECK_ERR(B->nn->binary(f.q, ints[k], &g, m.m, 0, m.m, 16, m.m, 32), ACCEL_EINVAL);
    g.op = BE_ADD; /* and at the limit and one past, in 4-byte elements */
    CHECK_OK(B->nn->binary(f.q, ints[k], &g, m.m, 48, m.m, 0, m.m, 0));
    CHECK_ERR(B->nn->binary(f.q, ints[k], &g, m.m, 49, m.m, 0, m.m, 0), ACCEL_EINVAL);
    g.op = BE_DIV;
  }
  uint8_t *got = tbuf_read(&f, &m);
  for (size_t i = 48; i < 64; i++) /* what the accepted adds wrote: a + a of [0, 16), in U32 */
    memcpy(m.host + 4 * i, &(uint32_t){(uint32_t)(2 * (uint64_t)iget(ACCEL_U32, m.host, i - 48))},
           4);
  tcheck_outside(got, &m, 0, 0);
  free(got);
  tbuf_free(&f, &m);
  for (int k = 0; k < 2; k++) {
    uint32_t t = ints[k];
    printf("    add, subtract, multiply, maximum, minimum %s\n", dt_name(t));
    for (be_binary_op op = BE_ADD; op <= BE_BINARY_ARITH_LAST; op++) {
      if (op == BE_DIV)
        continue;
      int_binary_case(&f, t, op, B_FULL, B_FULL, false);
      int_binary_case(&f, t, op, B_FULL, B_SCALAR, false);
      int_binary_case(&f, t, op, B_ROW, B_COLUMN, false);
      int_binary_case(&f, t, op, B_TRANSPOSED, B_FULL, false);
      int_binary_case(&f, t, op, B_FULL, B_ROW, true);
    }
  }
  fx_close(&f);
}

TEST(kernel_binary_int) {
  each_device(kernel_binary_int_dev);
}

static const char *const compare_name[] = {"equal",      "not_equal", "less",
                                           "less_equal", "greater",   "greater_equal"};

/* x op y as IEEE says: every comparison with a NaN false, but not_equal. */
static bool compare_ref(be_binary_op op, long double x, long double y) {
  switch (op) {
  case BE_EQUAL:
    return x == y;
  case BE_NOT_EQUAL:
    return x != y;
  case BE_LESS:
    return x < y;
  case BE_LESS_EQUAL:
    return x <= y;
  case BE_GREATER:
    return x > y;
  default:
    return x >= y;
  }
}

static long double value_of(uint32_t t, const uint8_t *p, size_t i) {
  return t == ACCEL_I32 || t == ACCEL_U32 ? (long double)iget(t, p, i) : tget(t, p, i);
}

static void compare_case(fx *f, uint32_t t, be_binary_op op, bcast ha, bcast hb) {
  uint64_t rows = rnd_range(1, 70), cols = rnd_range(1, 90);
  be_binary_args g = {.op = op, .rows = rows, .cols = cols};
  size_t la, lb, ao = rnd_range(0, 7), bo = rnd_range(0, 7), n = rows * cols;
  strides_of(ha, rows, cols, &g.a_rs, &g.a_cs, &la);
  strides_of(hb, rows, cols, &g.b_rs, &g.b_cs, &lb);
  tbuf a = tbuf_bits(f, t, ao + la + 3, true), b = tbuf_bits(f, t, bo + lb + 3, true);
  size_t dof = rnd_range(0, 7);
  tbuf dst = tbuf_bits(f, ACCEL_BOOL, dof + n + 3, false);
  tbuf_put(f, &a);
  tbuf_put(f, &b);
  tbuf_put(f, &dst);
  CHECK_OK(B->nn->binary(f->q, t, &g, dst.m, dof, a.m, ao, b.m, bo));
  uint8_t *got = tbuf_read(f, &dst);
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t c = 0; c < cols; c++) {
      long double x = value_of(t, a.host, ao + r * g.a_rs + c * g.a_cs);
      long double y = value_of(t, b.host, bo + r * g.b_rs + c * g.b_cs);
      uint8_t want = compare_ref(op, x, y), have = got[dof + r * cols + c];
      if (have != want)
        TEST_FAIL("%s %s[%llu, %llu]: %Lg, %Lg gave %u, want %u", dt_name(t),
                  compare_name[op - BE_EQUAL], (unsigned long long)r, (unsigned long long)c, x, y,
                  have, want);
    }
  tcheck_outside(got, &dst, dof, n);
  free(got);
  tbuf_free(f, &dst);
  tbuf_free(f, &b);
  tbuf_free(f, &a);
}

/* NaN against NaN, against itself and against numbers, and infinities, each way round. */
static void compare_nan_edges(fx *f, uint32_t t) {
  static const double v[] = {NAN, 1.0, -INFINITY, INFINITY, 0.0, -0.0};
  enum { K = sizeof v / sizeof v[0] };
  tbuf a = tbuf_bits(f, t, K, false), d = tbuf_bits(f, ACCEL_BOOL, K * K, false);
  for (size_t i = 0; i < K; i++)
    tset(t, a.host, i, v[i]);
  tbuf_put(f, &a);
  for (be_binary_op op = BE_EQUAL; op <= BE_BINARY_COMPARE_LAST; op++) {
    be_binary_args g = {.op = op, .rows = K, .cols = K, .a_rs = 1, .a_cs = 0, .b_rs = 0, .b_cs = 1};
    CHECK_OK(B->nn->binary(f->q, t, &g, d.m, 0, a.m, 0, a.m, 0)); /* a column against a row */
    uint8_t *got = tbuf_read(f, &d);
    for (size_t r = 0; r < K; r++)
      for (size_t c = 0; c < K; c++)
        if (got[r * K + c] != compare_ref(op, v[r], v[c]))
          TEST_FAIL("%s %s(%g, %g) gave %u", dt_name(t), compare_name[op - BE_EQUAL], v[r], v[c],
                    got[r * K + c]);
    free(got);
  }
  tbuf_free(f, &d);
  tbuf_free(f, &a);
}

/* dst of bytes: at the limit and one past; the op one past the last refused. */
static void compare_refusals(fx *f) {
  tbuf m = tbuf_bits(f, ACCEL_F32, 64, false), d = tbuf_bits(f, ACCEL_BOOL, 20, false);
  tbuf_put(f, &m);
  tbuf_put(f, &d);
  be_binary_args g = {.op = BE_LESS, .rows = 4, .cols = 4, .a_rs = 4, .a_cs = 1};
  CHECK_OK(B->nn->binary(f->q, ACCEL_F32, &g, d.m, 4, m.m, 48, m.m, 0)); /* 4 + 16 = 20 */
  CHECK_ERR(B->nn->binary(f->q, ACCEL_F32, &g, d.m, 5, m.m, 0, m.m, 0), ACCEL_EINVAL);
  CHECK_ERR(B->nn->binary(f->q, ACCEL_F32, &g, d.m, 0, m.m, 49, m.m, 0), ACCEL_EINVAL);
  g.op = (be_binary_op)(BE_BINARY_OP_LAST + 1);
  CHECK_ERR(B->nn->binary(f->q, ACCEL_F32, &g, d.m, 0, m.m, 0, m.m, 0), ACCEL_EINVAL);
  tbuf_free(f, &d);
  tbuf_free(f, &m);
}

static void kernel_compare_dev(void) {
  fx f = fx_open();
  uint32_t set = B->nn->dtypes(f.d) | ACCEL_DTYPE_BIT(ACCEL_I32) | ACCEL_DTYPE_BIT(ACCEL_U32);
  compare_refusals(&f);
  for (size_t x = 0; x < N_DTYPES; x++) {
    uint32_t t = all_dtypes[x];
    if (!in_set(set, t))
      continue;
    printf("    equal .. greater_equal %s\n", dt_name(t));
    if (t != ACCEL_I32 && t != ACCEL_U32)
      compare_nan_edges(&f, t);
    for (be_binary_op op = BE_EQUAL; op <= BE_BINARY_COMPARE_LAST; op++) {
      compare_case(&f, t, op, B_FULL, B_FULL);
      compare_case(&f, t, op, B_FULL, B_SCALAR);
      compare_case(&f, t, op, B_ROW, B_COLUMN);
      compare_case(&f, t, op, B_TRANSPOSED, B_FULL);
    }
  }
  fx_close(&f);
}

TEST(kernel_compare) {
  each_device(kernel_compare_dev);
}

/* ---- logical ops: BOOL (on each byte's truth), I32 and U32 (bitwise) ---- */

static const char *const logical_name[] = {"bitwise_and", "bitwise_or", "bitwise_xor"};

/* Random elements; BOOL bytes 0, 1 and others (true too), a third each. */
static tbuf tbuf_logic(fx *f, uint32_t t, size_t len) {
  tbuf b = tbuf_bits(f, t, len, false);
  for (size_t i = 0; t == ACCEL_BOOL && i < len; i++) {
    uint64_t r = rnd64();
    b.host[i] = r % 3 == 0 ? 0 : r % 3 == 1 ? 1 : (uint8_t)((r >> 8) | 2);
  }
  return b;
}

/* The reference in 64-bit integers: BOOL's truth values, the integers' 32 bits. */
static uint64_t logical_ref(be_binary_op op, uint64_t x, uint64_t y) {
  return op == BE_BITAND ? (x & y) : op == BE_BITOR ? (x | y) : (x ^ y);
}

static uint64_t logic_get(uint32_t t, const uint8_t *p, size_t i, bool truth) {
  if (t == ACCEL_BOOL)
    return truth ? p[i] != 0 : p[i];
  return (uint32_t)iget(t, p, i);
}

static void logical_case(fx *f, uint32_t t, be_binary_op op, bcast ha, bcast hb, bool in_place) {
  uint64_t rows = rnd_range(1, 70), cols = rnd_range(1, 90);
  be_binary_args g = {.op = op, .rows = rows, .cols = cols};
  size_t la, lb, ao = rnd_range(0, 7), bo = rnd_range(0, 7), n = rows * cols;
  strides_of(ha, rows, cols, &g.a_rs, &g.a_cs, &la);
  strides_of(hb, rows, cols, &g.b_rs, &g.b_cs, &lb);
  tbuf a = tbuf_logic(f, t, ao + la + 3), b = tbuf_logic(f, t, bo + lb + 3);
  size_t dof = in_place ? ao : rnd_range(0, 7);
  tbuf dst = in_place ? a : tbuf_logic(f, t, dof + n + 3);
  tbuf_put(f, &a);
  tbuf_put(f, &b);
  if (!in_place)
    tbuf_put(f, &dst);
  CHECK_OK(B->nn->binary(f->q, t, &g, dst.m, dof, a.m, ao, b.m, bo));
  uint8_t *got = tbuf_read(f, &dst);
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t c = 0; c < cols; c++) {
      uint64_t x = logic_get(t, a.host, ao + r * g.a_rs + c * g.a_cs, true);
      uint64_t y = logic_get(t, b.host, bo + r * g.b_rs + c * g.b_cs, true);
      uint64_t want = logical_ref(op, x, y), have = logic_get(t, got, dof + r * cols + c, false);
      if (have != want)
        TEST_FAIL("%s %s[%llu, %llu]: %llu, %llu gave %llu, want %llu", dt_name(t),
                  logical_name[op - BE_BITAND], (unsigned long long)r, (unsigned long long)c,
                  (unsigned long long)x, (unsigned long long)y, (unsigned long long)have,
                  (unsigned long long)want);
    }
  tcheck_outside(got, &dst, dof, n);
  free(got);
  tbuf_free(f, &b);
  tbuf_free(f, &a);
  if (!in_place)
    tbuf_free(f, &dst);
}

/* Floats take no logical op, BOOL no arithmetic nor comparison: refused, nothing written; the
 * bytes of dst at the limit and one past. */
static void logical_refusals(fx *f) {
  tbuf m = tbuf_bits(f, ACCEL_F32, 64, false), d = tbuf_logic(f, ACCEL_BOOL, 20);
  tbuf_put(f, &m);
  tbuf_put(f, &d);
  be_binary_args g = {.op = BE_BITAND, .rows = 4, .cols = 4, .a_rs = 4, .a_cs = 1};
  CHECK_ERR(B->nn->binary(f->q, ACCEL_F32, &g, m.m, 0, m.m, 16, m.m, 32), ACCEL_EINVAL);
  g.op = BE_ADD;
  CHECK_ERR(B->nn->binary(f->q, ACCEL_BOOL, &g, d.m, 0, d.m, 0, d.m, 0), ACCEL_EINVAL);
  g.op = BE_LESS;
  CHECK_ERR(B->nn->binary(f->q, ACCEL_BOOL, &g, d.m, 0, d.m, 0, d.m, 0), ACCEL_EINVAL);
  g = (be_binary_args){.op = BE_BITXOR, .rows = 4, .cols = 4, .a_rs = 0, .a_cs = 0};
  CHECK_ERR(B->nn->binary(f->q, ACCEL_BOOL, &g, d.m, 5, d.m, 0, d.m, 0), ACCEL_EINVAL);
  CHECK_OK(B->nn->binary(f->q, ACCEL_BOOL, &g, d.m, 4, d.m, 0, d.m, 1)); /* 4 + 16 = 20 */
  uint8_t *got = tbuf_read(f, &d);
  uint8_t want = (uint8_t)((d.host[0] != 0) ^ (d.host[1] != 0));
  for (size_t i = 4; i < 20; i++)
    d.host[i] = want;
  tcheck_outside(got, &d, 0, 0);
  free(got);
  uint8_t *floats = tbuf_read(f, &m);
  tcheck_outside(floats, &m, 0, 0);
  free(floats);
  tbuf_free(f, &d);
  tbuf_free(f, &m);
}

static void kernel_logical_dev(void) {
  fx f = fx_open();
  static const uint32_t types[] = {ACCEL_BOOL, ACCEL_I32, ACCEL_U32};
  logical_refusals(&f);
  for (int k = 0; k < 3; k++) {
    printf("    bitwise_and, bitwise_or, bitwise_xor %s\n", dt_name(types[k]));
    for (be_binary_op op = BE_BITAND; op <= BE_BITXOR; op++) {
      logical_case(&f, types[k], op, B_FULL, B_FULL, false);
      logical_case(&f, types[k], op, B_FULL, B_SCALAR, false);
      logical_case(&f, types[k], op, B_ROW, B_COLUMN, false);
      logical_case(&f, types[k], op, B_TRANSPOSED, B_FULL, false);
      logical_case(&f, types[k], op, B_FULL, B_ROW, true);
    }
  }
  fx_close(&f);
}

TEST(kernel_logical) {
  each_device(kernel_logical_dev);
}

/* dst = cond ? a : b with every input read its own way (dst is a when in_place), bit for bit;
 * cond holds bytes above 1 too (true). */
static void where_case(fx *f, uint32_t t, bcast hc, bcast ha, bcast hb, bool in_place) {
  uint64_t rows = rnd_range(1, 70), cols = rnd_range(1, 90);
  be_where_args g = {.rows = rows, .cols = cols};
  size_t lc, la, lb, co = rnd_range(0, 7), ao = rnd_range(0, 7), bo = rnd_range(0, 7);
  size_t n = rows * cols;
  strides_of(hc, rows, cols, &g.c_rs, &g.c_cs, &lc);
  strides_of(ha, rows, cols, &g.a_rs, &g.a_cs, &la);
  strides_of(hb, rows, cols, &g.b_rs, &g.b_cs, &lb);
  tbuf c = tbuf_bits(f, ACCEL_BOOL, co + lc + 3, false);
  for (size_t i = 0; i < c.len; i++)
    c.host[i] = c.host[i] % 3 == 0 ? 0 : c.host[i] % 3 == 1 ? 1 : c.host[i];
  tbuf a = tbuf_bits(f, t, ao + la + 3, false), b = tbuf_bits(f, t, bo + lb + 3, false);
  size_t dof = in_place ? ao : rnd_range(0, 7);
  tbuf dst = in_place ? a : tbuf_bits(f, t, dof + n + 3, false);
  tbuf_put(f, &c);
  tbuf_put(f, &a);
  tbuf_put(f, &b);
  if (!in_place)
    tbuf_put(f, &dst);
  CHECK_OK(B->nn->where(f->q, t, &g, dst.m, dof, c.m, co, a.m, ao, b.m, bo));
  uint8_t *got = tbuf_read(f, &dst);
  size_t es = a.es;
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t k = 0; k < cols; k++) {
      bool pick = c.host[co + r * g.c_rs + k * g.c_cs] != 0;
      const uint8_t *want = pick ? a.host + (ao + r * g.a_rs + k * g.a_cs) * es
                                 : b.host + (bo + r * g.b_rs + k * g.b_cs) * es;
      if (memcmp(got + (dof + r * cols + k) * es, want, es) != 0)
        TEST_FAIL("where %s[%llu, %llu]: not the %s element", dt_name(t), (unsigned long long)r,
                  (unsigned long long)k, pick ? "a" : "b");
    }
  tcheck_outside(got, &dst, dof, n);
  free(got);
  tbuf_free(f, &b);
  tbuf_free(f, &a);
  tbuf_free(f, &c);
  if (!in_place)
    tbuf_free(f, &dst);
}

/* Each buffer's span at the limit and one element past. */
static void where_refusals(fx *f) {
  tbuf m = tbuf_bits(f, ACCEL_F32, 64, false), c = tbuf_bits(f, ACCEL_BOOL, 20, false);
  tbuf_put(f, &m);
  tbuf_put(f, &c);
  be_where_args g = {
      .rows = 4, .cols = 4, .c_rs = 4, .c_cs = 1, .a_rs = 4, .a_cs = 1, .b_rs = 16, .b_cs = 1};
  /* b spans 3 * 16 + 4 = 52 elements: at offset 12 it ends at the buffer's end */
  CHECK_OK(B->nn->where(f->q, ACCEL_F32, &g, m.m, 48, c.m, 4, m.m, 0, m.m, 12));
  CHECK_ERR(B->nn->where(f->q, ACCEL_F32, &g, m.m, 49, c.m, 0, m.m, 0, m.m, 0), ACCEL_EINVAL);
  CHECK_ERR(B->nn->where(f->q, ACCEL_F32, &g, m.m, 0, c.m, 5, m.m, 0, m.m, 0), ACCEL_EINVAL);
  CHECK_ERR(B->nn->where(f->q, ACCEL_F32, &g, m.m, 0, c.m, 0, m.m, 49, m.m, 0), ACCEL_EINVAL);
  CHECK_ERR(B->nn->where(f->q, ACCEL_F32, &g, m.m, 0, c.m, 0, m.m, 0, m.m, 13), ACCEL_EINVAL);
  tbuf_free(f, &c);
  tbuf_free(f, &m);
}

static void kernel_where_dev(void) {
  fx f = fx_open();
  static const uint32_t every[] = {ACCEL_F32,  ACCEL_U32, ACCEL_F64, ACCEL_F16,
                                   ACCEL_BF16, ACCEL_I32, ACCEL_BOOL};
  where_refusals(&f);
  for (size_t x = 0; x < sizeof every / sizeof every[0]; x++) {
    uint32_t t = every[x];
    printf("    where %s\n", dt_name(t));
    where_case(&f, t, B_FULL, B_FULL, B_FULL, false);
    where_case(&f, t, B_FULL, B_SCALAR, B_FULL, false);
    where_case(&f, t, B_ROW, B_COLUMN, B_SCALAR, false);
    where_case(&f, t, B_COLUMN, B_TRANSPOSED, B_ROW, false);
    where_case(&f, t, B_TRANSPOSED, B_FULL, B_COLUMN, true);
  }
  fx_close(&f);
}

TEST(kernel_where) {
  each_device(kernel_where_dev);
}

/* ---- convert between dtypes: exact answers ---- */

/* d rounded to nearest even with `mant` bits after the point, exponents down to emin
 * (subnormals below), overflowing to infinity above `max`: an independent reference for
 * F32, F16 and BF16 (rint on a power-of-two scaling, exact in double). */
static double round_to(double d, int mant, int emin, double max) {
  if (d != d || isinf(d) || d == 0.0)
    return d;
  int e;
  (void)frexp(d, &e); /* |d| in [2^(e-1), 2^e) */
  e -= 1;
  if (e < emin)
    e = emin;
  double q = ldexp(1.0, e - mant), r = rint(d / q) * q;
  if (fabs(r) > max)
    return d > 0 ? INFINITY : -INFINITY;
  return r;
}

/* The element's value exactly: a double for the floats, *is_int and *iv for the others. */
static double conv_src(uint32_t t, const uint8_t *p, size_t i, bool *is_int, int64_t *iv) {
  *is_int = t == ACCEL_I32 || t == ACCEL_U32 || t == ACCEL_BOOL;
  if (t == ACCEL_BOOL)
    *iv = p[i] != 0;
  else if (*is_int)
    *iv = iget(t, p, i);
  return *is_int ? (double)*iv : tget(t, p, i);
}

/* Whether dst element i (dtype dt) is what converting the value gives: ints exact, floats bit
 * for bit (any NaN for a NaN). */
static bool conv_ok(uint32_t dt, const uint8_t *got, size_t i, double v, bool is_int, int64_t iv) {
  if (dt == ACCEL_BOOL)
    return got[i] == (is_int ? iv != 0 : v != 0.0);
  if (dt == ACCEL_I32 || dt == ACCEL_U32) {
    int64_t want;
    if (is_int)
      want = dt == ACCEL_I32 ? (int64_t)(int32_t)(uint32_t)iv : (int64_t)(uint32_t)iv;
    else if (v != v)
      want = 0;
    else {
      double lo = dt == ACCEL_I32 ? -2147483648.0 : 0.0;
      double hi = dt == ACCEL_I32 ? 2147483647.0 : 4294967295.0;
      want = (int64_t)(v < lo ? lo : v > hi ? hi : trunc(v));
    }
    return iget(dt, got, i) == want;
  }
  double want = dt == ACCEL_F64   ? v
                : dt == ACCEL_F32 ? round_to(v, 23, -126, 0x1.fffffep127)
                : dt == ACCEL_F16 ? round_to(v, 10, -14, 65504.0)
                                  : round_to(v, 7, -126, 0x1.fep127);
  double g = tget(dt, got, i);
  if (want != want)
    return g != g;
  return g == want && signbit(g) == signbit(want);
}

/* Values that meet every rule: specials, truncation, the integer limits, f16/bf16 ties. */
static const double conv_specials[] = {
    0.0,           -0.0,         0.5,           -0.5,
    2.5,           -1.0,         -0.99,         1e-40,
    -3e-8,         2147483647.5, 2147483648.0,  -2147483648.5,
    -2147483649.0, 4294967295.9, 4294967296.0,  65519.99,
    65520.0,       1.0009765625, 1.00048828125, 1.0 + 0x1p-11 + 0x1p-40,
    1.0 + 0x1p-8,  3e38,         3.4e38,        1e300,
    -1e300,        16777217.0,   0x1p-24,       0x1p-25,
    0x1.8p-25,     INFINITY,     -INFINITY,     NAN};

/* src of dtype st read as `how` at a random offset into a dst of dtype dt; every element
 * against the reference, nothing else written. */
static void convert_case(fx *f, uint32_t dt, uint32_t st, bcast how) {
  uint64_t rows = rnd_range(1, 40), cols = rnd_range(1, 60);
  be_convert_args g = {.rows = rows, .cols = cols};
  size_t len, so = rnd_range(0, 7), dof = rnd_range(0, 7), n = rows * cols;
  strides_of(how, rows, cols, &g.rs, &g.cs, &len);
  bool is_float = st == ACCEL_F32 || st == ACCEL_F64 || st == ACCEL_F16 || st == ACCEL_BF16;
  tbuf s = tbuf_bits(f, st, so + len + 3, false);
  size_t nspec = sizeof conv_specials / sizeof conv_specials[0];
  for (size_t i = 0; is_float && i < s.len; i++) {
    uint64_t r = rnd64();
    double mag = ldexp(1.0 + (double)(r >> 11) * 0x1p-53, (int)(r % 80) - 40);
    tset(st, s.host, i, r % 3 == 0 ? conv_specials[(r >> 8) % nspec] : (r & 16) ? -mag : mag);
  }
  tbuf d = tbuf_bits(f, dt, dof + n + 3, false);
  tbuf_put(f, &s);
  tbuf_put(f, &d);
  CHECK_OK(B->nn->convert(f->q, dt, st, &g, d.m, dof, s.m, so));
  uint8_t *got = tbuf_read(f, &d);
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t k = 0; k < cols; k++) {
      size_t si = so + r * g.rs + k * g.cs, di = dof + r * cols + k;
      bool is_int;
      int64_t iv = 0;
      double v = conv_src(st, s.host, si, &is_int, &iv);
      bool ok = dt == st ? memcmp(got + di * d.es, s.host + si * s.es, s.es) == 0
                         : conv_ok(dt, got, di, v, is_int, iv);
      if (!ok)
        TEST_FAIL("convert %s -> %s [%llu, %llu]: %.17g gave %.17g", dt_name(st), dt_name(dt),
                  (unsigned long long)r, (unsigned long long)k, v,
                  dt == ACCEL_BOOL                     ? (double)got[di]
                  : dt == ACCEL_I32 || dt == ACCEL_U32 ? (double)iget(dt, got, di)
                                                       : tget(dt, got, di));
    }
  tcheck_outside(got, &d, dof, n);
  free(got);
  tbuf_free(f, &d);
  tbuf_free(f, &s);
}

/* dst and src at the limit and one element past; a dtype outside the list. */
static void convert_refusals(fx *f) {
  tbuf m = tbuf_bits(f, ACCEL_F32, 64, false), o = tbuf_bits(f, ACCEL_F16, 64, false);
  tbuf_put(f, &m);
  tbuf_put(f, &o);
  be_convert_args g = {.rows = 4, .cols = 4, .rs = 16, .cs = 1}; /* src spans 52 elements */
  CHECK_OK(B->nn->convert(f->q, ACCEL_F16, ACCEL_F32, &g, o.m, 48, m.m, 12));
  CHECK_ERR(B->nn->convert(f->q, ACCEL_F16, ACCEL_F32, &g, o.m, 49, m.m, 0), ACCEL_EINVAL);
  CHECK_ERR(B->nn->convert(f->q, ACCEL_F16, ACCEL_F32, &g, o.m, 0, m.m, 13), ACCEL_EINVAL);
  CHECK_ERR(B->nn->convert(f->q, ACCEL_F16, 0, &g, o.m, 0, m.m, 0), ACCEL_ENOTSUP);
  CHECK_ERR(B->nn->convert(f->q, ACCEL_DTYPE_MAX_ + 1, ACCEL_F32, &g, o.m, 0, m.m, 0),
            ACCEL_ENOTSUP);
  tbuf_free(f, &o);
  tbuf_free(f, &m);
}

static void kernel_convert_dev(void) {
  fx f = fx_open();
  static const uint32_t every[] = {ACCEL_F32,  ACCEL_U32, ACCEL_F64, ACCEL_F16,
                                   ACCEL_BF16, ACCEL_I32, ACCEL_BOOL};
  bool f64 = in_set(B->nn->dtypes(f.d), ACCEL_F64);
  convert_refusals(&f);
  for (size_t x = 0; x < sizeof every / sizeof every[0]; x++)
    for (size_t y = 0; y < sizeof every / sizeof every[0]; y++) {
      uint32_t dt = every[x], st = every[y];
      if (!f64 && (dt == ACCEL_F64 || st == ACCEL_F64)) {
        be_convert_args g = {.rows = 1, .cols = 1, .rs = 1, .cs = 1};
        tbuf a = tbuf_bits(&f, dt, 1, false), b = tbuf_bits(&f, st, 1, false);
        CHECK_ERR(B->nn->convert(f.q, dt, st, &g, a.m, 0, b.m, 0), ACCEL_ENOTSUP);
        tbuf_free(&f, &b);
        tbuf_free(&f, &a);
        continue;
      }
      convert_case(&f, dt, st, B_FULL);
      convert_case(&f, dt, st, B_TRANSPOSED);
      convert_case(&f, dt, st, B_ROW);
    }
  fx_close(&f);
}

TEST(kernel_convert) {
  each_device(kernel_convert_dev);
}

/* ---- reductions of a strided view ---- */

static const char *const red_name[] = {"sum", "max", "min", "mean"};
static const char *const axis_name[] = {"all", "rows", "cols"};

/* How a case lays out its view: row-major, the transpose of a cols x rows matrix, rows with a
 * gap of 3 elements after each (a slice of a wider matrix). */
typedef enum { V_FULL, V_TRANSPOSED, V_PADDED } view;

/* op over the view's elements whose (r, c) satisfy the axis and output o, in long double:
 * the value, and the sum of magnitudes (the error bound of a sum scales with it). NaN in,
 * NaN out for every op. */
static long double red_ref(const be_reduction_args *g, uint32_t t, const uint8_t *x, size_t xo,
                           uint64_t o, long double *mag) {
  uint64_t r0 = 0, r1 = g->rows, c0 = 0, c1 = g->cols;
  if (g->axis == BE_AXIS_ROWS)
    c0 = o, c1 = o + 1;
  else if (g->axis == BE_AXIS_COLS)
    r0 = o, r1 = o + 1;
  long double acc = g->op == BE_RED_MAX ? -INFINITY : g->op == BE_RED_MIN ? INFINITY : 0;
  bool nan = false;
  *mag = 0;
  for (uint64_t r = r0; r < r1; r++)
    for (uint64_t c = c0; c < c1; c++) {
      long double v = tget(t, x, xo + r * g->rs + c * g->cs);
      nan |= isnan(v);
      *mag += fabsl(v);
      acc = g->op == BE_RED_MAX   ? (v > acc ? v : acc)
            : g->op == BE_RED_MIN ? (v < acc ? v : acc)
                                  : acc + v;
    }
  uint64_t len = (r1 - r0) * (c1 - c0);
  if (nan)
    return NAN;
  return g->op == BE_RED_MEAN ? acc / (long double)len : acc;
}

/* The bound a reduction is held to: max and min exact; a sum within len eps of its
 * accumulator (f32 for every type but F64) times the sum of magnitudes, plus the output's own
 * rounding; a mean that over len. */
static double red_tol(uint32_t t, const be_reduction_args *g, double want, long double mag) {
  if (g->op == BE_RED_MAX || g->op == BE_RED_MIN)
    return 0;
  double len = (double)be_reduction_length(g);
  double acc = t == ACCEL_F64 ? DBL_EPSILON : FLT_EPSILON;
  double bound = len * acc * (double)mag / (g->op == BE_RED_MEAN && len > 0 ? len : 1);
  return bound + 2 * dt_u(t) * fabs(want) + dt_tiny(t);
}

/* One reduction of a random rows x cols view at random offsets against the reference, NaN
 * planted at one element when `nan`; nothing of dst past the outputs written. */
static void reduce_dt_case(fx *f, uint32_t t, be_reduction_op op, be_reduction_axis axis, view v,
                           uint64_t rows, uint64_t cols, bool nan) {
  be_reduction_args g = {.op = op, .axis = axis, .rows = rows, .cols = cols};
  g.rs = v == V_FULL ? cols : v == V_PADDED ? cols + 3 : 1;
  g.cs = v == V_TRANSPOSED ? rows : 1;
  size_t so = rnd_range(0, 7), dof = rnd_range(0, 7), span = (size_t)be_reduction_span(&g);
  size_t nout = (size_t)be_reduction_outputs(&g);
  tbuf src = tbuf_new(f, t, so + span + 3, 0.5, 4), dst = tbuf_new(f, t, dof + nout + 3, 1, 2);
  if (nan && span > 0) {
    uint64_t r = rnd_range(0, rows - 1), c = rnd_range(0, cols - 1);
    tset(t, src.host, so + r * g.rs + c * g.cs, NAN);
  }
  tbuf_put(f, &src);
  tbuf_put(f, &dst);
  CHECK_OK(B->nn->reduce(f->q, t, &g, dst.m, dof, src.m, so));
  uint8_t *got = tbuf_read(f, &dst);
  for (uint64_t o = 0; o < nout; o++) {
    long double mag;
    double want = (double)red_ref(&g, t, src.host, so, o, &mag);
    double have = tget(t, got, dof + o);
    if (isnan(want) || isnan(have)) {
      if (isnan(want) != isnan(have))
        TEST_FAIL("%s %s %s[%llu] of %llu x %llu: got %g, want %g", red_name[op], dt_name(t),
                  axis_name[axis], (unsigned long long)o, (unsigned long long)rows,
                  (unsigned long long)cols, have, want);
      continue;
    }
    check_close(have, want, red_tol(t, &g, want, mag), red_name[op], o);
  }
  tcheck_outside(got, &dst, dof, nout);
  free(got);
  tbuf_free(f, &dst);
  tbuf_free(f, &src);
}

/* Empty views: sum 0 and mean NaN of no elements; max and min refused where an output would
 * fold nothing, accepted where there is no output. */
static void reduce_empty(fx *f) {
  tbuf d = tbuf_new(f, ACCEL_F32, 6, 1, 2), s = tbuf_new(f, ACCEL_F32, 4, 1, 2);
  tbuf_put(f, &d);
  tbuf_put(f, &s);
  be_reduction_args g = {.op = BE_RED_SUM, .axis = BE_AXIS_ALL, .rows = 0, .cols = 5, .cs = 1};
  CHECK_OK(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 0, s.m, 0));
  g.op = BE_RED_MEAN;
  CHECK_OK(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 1, s.m, 0));
  g.axis = BE_AXIS_ROWS; /* 3 outputs, each of 0 rows: sums 0 into d[2..5) */
  g.op = BE_RED_SUM;
  g.cols = 3;
  CHECK_OK(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 2, s.m, 0));
  uint8_t *got = tbuf_read(f, &d);
  CHECK(tget(ACCEL_F32, got, 0) == 0 && isnan(tget(ACCEL_F32, got, 1)));
  for (size_t i = 2; i < 5; i++)
    CHECK(tget(ACCEL_F32, got, i) == 0);
  tcheck_outside(got, &d, 0, 5);
  free(got);
  for (be_reduction_op op = BE_RED_MAX; op <= BE_RED_MIN; op++) {
    be_reduction_args e = {.op = op, .axis = BE_AXIS_ALL, .rows = 3, .cols = 0, .rs = 1};
    CHECK_ERR(B->nn->reduce(f->q, ACCEL_F32, &e, d.m, 0, s.m, 0), ACCEL_EINVAL);
    e.axis = BE_AXIS_COLS; /* three rows of nothing */
    CHECK_ERR(B->nn->reduce(f->q, ACCEL_F32, &e, d.m, 0, s.m, 0), ACCEL_EINVAL);
    e.axis = BE_AXIS_ROWS; /* no column: no output */
    CHECK_OK(B->nn->reduce(f->q, ACCEL_F32, &e, d.m, 0, s.m, 0));
  }
  tbuf_free(f, &s);
  tbuf_free(f, &d);
}

/* Refused before anything runs: outputs past dst's end, the view past src's end (each at the
 * limit, then one element past), an unknown op or axis, a dtype the device does not run. */
static void reduce_refusals(fx *f, uint32_t set) {
  tbuf m = tbuf_new(f, ACCEL_F32, 64, 1, 2), d = tbuf_new(f, ACCEL_F32, 64, 1, 2);
  tbuf_put(f, &m);
  be_reduction_args g = {.op = BE_RED_SUM,
                         .axis = BE_AXIS_COLS,
                         .rows = 4,
                         .cols = 4,
                         .rs = 16,
                         .cs = 1}; /* spans 3 * 16 + 3 + 1 = 52 elements, 4 outputs */
  CHECK_OK(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 60, m.m, 12));
  CHECK_ERR(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 61, m.m, 0), ACCEL_EINVAL);
  CHECK_ERR(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 0, m.m, 13), ACCEL_EINVAL);
  g.rs = 17; /* 55 elements */
  CHECK_OK(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 0, m.m, 9));
  CHECK_ERR(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 0, m.m, 10), ACCEL_EINVAL);
  g.axis = BE_AXIS_ALL;
  CHECK_OK(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 63, m.m, 0));
  CHECK_ERR(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 64, m.m, 0), ACCEL_EINVAL);
  g.op = (be_reduction_op)(BE_REDUCTION_OP_LAST + 1);
  CHECK_ERR(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 0, m.m, 0), ACCEL_EINVAL);
  g.op = BE_RED_SUM;
  g.axis = (be_reduction_axis)(BE_REDUCTION_AXIS_LAST + 1);
  CHECK_ERR(B->nn->reduce(f->q, ACCEL_F32, &g, d.m, 0, m.m, 0), ACCEL_EINVAL);
  g.axis = BE_AXIS_ALL;
  for (size_t x = 0; x < N_DTYPES; x++)
    if (!in_set(set, all_dtypes[x]))
      CHECK_ERR(B->nn->reduce(f->q, all_dtypes[x], &g, d.m, 0, m.m, 0), ACCEL_ENOTSUP);
  tbuf_free(f, &d);
  tbuf_free(f, &m);
}

static void kernel_reduce_dev(void) {
  fx f = fx_open();
  uint32_t set = B->nn->dtypes(f.d);
  reduce_refusals(&f, set);
  reduce_empty(&f);
  for (size_t x = 0; x < N_DTYPES; x++) {
    uint32_t t = all_dtypes[x];
    if (!in_set(set, t))
      continue;
    printf("    sum, max, min, mean %s: all, rows, cols; full, transposed, padded; NaN\n",
           dt_name(t));
    for (be_reduction_op op = BE_RED_SUM; op <= BE_REDUCTION_OP_LAST; op++)
      for (be_reduction_axis ax = BE_AXIS_ALL; ax <= BE_REDUCTION_AXIS_LAST; ax++) {
        for (view v = V_FULL; v <= V_PADDED; v++)
          reduce_dt_case(&f, t, op, ax, v, rnd_range(1, 70), rnd_range(1, 90), false);
        reduce_dt_case(&f, t, op, ax, V_FULL, rnd_range(1, 40), rnd_range(1, 40), true);
        reduce_dt_case(&f, t, op, ax, V_TRANSPOSED, 1, rnd_range(1, 300), false);
      }
    /* Long ones: the whole of 300000 elements (several blocks' partials on a GPU), and the
     * columns of a tall matrix (a thread per output), each at the tolerance above. */
    reduce_dt_case(&f, t, BE_RED_SUM, BE_AXIS_ALL, V_FULL, 300, 1000, false);
    reduce_dt_case(&f, t, BE_RED_MAX, BE_AXIS_ALL, V_PADDED, 300, 1000, true);
    reduce_dt_case(&f, t, BE_RED_MEAN, BE_AXIS_ROWS, V_FULL, 500, 700, false);
    reduce_dt_case(&f, t, BE_RED_MIN, BE_AXIS_COLS, V_TRANSPOSED, 700, 500, false);
  }
  fx_close(&f);
}

TEST(kernel_reduce) {
  each_device(kernel_reduce_dev);
}

static void kernel_nn_dtypes_dev(void) {
  fx f = fx_open();
  uint32_t set = B->nn->dtypes(f.d);
  tbuf m = tbuf_new(&f, ACCEL_F64, 64, 1, 2);
  tbuf_put(&f, &m);
  for (size_t x = 0; x < N_DTYPES; x++) {
    uint32_t t = all_dtypes[x];
    if (!in_set(set, t)) {
      CHECK_ERR(B->nn->unary(f.q, t, BE_TANH, m.m, 0, m.m, 16, 4), ACCEL_ENOTSUP);
      CHECK_ERR(B->nn->softmax(f.q, t, m.m, 0, m.m, 16, 2, 2), ACCEL_ENOTSUP);
      continue;
    }
    printf("    sigmoid, relu, tanh, exp, log, sqrt, abs, softmax %s\n", dt_name(t));
    for (be_unary_op op = BE_SIGMOID; op <= BE_UNARY_OP_LAST; op++) {
      unary_dt_case(&f, t, op, false);
      unary_dt_case(&f, t, op, true);
    }
    softmax_dt_case(&f, t, false);
    softmax_dt_case(&f, t, true);
  }
  uint8_t *got = tbuf_read(&f, &m);
  tcheck_outside(got, &m, 0, 0);
  free(got);
  tbuf_free(&f, &m);
  fx_close(&f);
}

TEST(kernel_nn_dtypes) {
  each_device(kernel_nn_dtypes_dev);
}

/* ---- rng into every dtype: against an independent computation from the block function ---- */

/* Word j of the stream of `seed` (philox.h), straight from be_cpu_philox4x32_10. */
static uint32_t philox_word(uint64_t seed, uint64_t j) {
  uint32_t ctr[4] = {(uint32_t)(j / 4), (uint32_t)((j / 4) >> 32), 0, 0};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
  be_cpu_philox4x32_10(ctr, key, out);
  return out[j % 4];
}

static float uniform_f32_ref(uint32_t w) {
  return (float)w * 0x1p-32f + 0x1p-33f;
}

static double uniform53_ref(uint32_t w0, uint32_t w1, double scale) {
  uint64_t z = (uint64_t)w0 ^ ((uint64_t)w1 << 21);
  return (double)z * scale + scale / 2;
}

/* Uniform element e of a fill at offset o, as the bits the dtype stores. */
static void uniform_ref(uint32_t t, uint64_t seed, uint64_t e, void *out, size_t i) {
  if (t == ACCEL_F64) {
    ((double *)out)[i] = uniform53_ref(philox_word(seed, 2 * e), philox_word(seed, 2 * e + 1),
                                       0x1p-53);
    return;
  }
  float u = uniform_f32_ref(philox_word(seed, e));
  if (t == ACCEL_F32)
    ((float *)out)[i] = u;
  else
    ((uint16_t *)out)[i] = t == ACCEL_F16 ? be_f32_to_f16(u) : be_f32_to_bf16(u);
}

/* Normal element e (unscaled) in long double: F64 by cuRAND's double Box-Muller, the others by
 * the float one (philox.h). */
static long double normal_ref(uint32_t t, uint64_t seed, uint64_t e) {
  uint64_t p = e / 2;
  if (t == ACCEL_F64) {
    double u = uniform53_ref(philox_word(seed, 4 * p), philox_word(seed, 4 * p + 1), 0x1p-53);
    double v = uniform53_ref(philox_word(seed, 4 * p + 2), philox_word(seed, 4 * p + 3), 0x1p-52);
    long double s = sqrtl(-2 * logl(u)), a = 3.141592653589793238462643383279503L * v;
    return s * (e % 2 == 0 ? sinl(a) : cosl(a));
  }
  float u = uniform_f32_ref(philox_word(seed, 2 * p));
  float v = (float)philox_word(seed, 2 * p + 1) * (0x1p-32f * 6.2831855f) +
            (0x1p-32f * 6.2831855f) / 2.0f;
  float r = sqrtf(-2.0f * logf(u));
  return e % 2 == 0 ? sinf(v) * r : cosf(v) * r;
}

static void rng_dt_case(fx *f, uint32_t t, be_rng_dist dist, bool standard) {
  size_t n = rnd_range(1, 30000), off = rnd_range(0, 63);
  be_rng_args r = {.dist = dist,
                   .seed = rnd64(),
                   .offset = rnd64() >> rnd_range(20, 63),
                   .mean = standard ? 0 : rnd_nz(0.5f, 3),
                   .stddev = standard ? 1 : fabsf(rnd_nz(0.5f, 3))};
  if (dist == BE_RNG_NORMAL)
    r.offset &= ~(uint64_t)1;
  tbuf d = tbuf_new(f, t, off + n + 5, 1, 2);
  tbuf_put(f, &d);
  CHECK_OK(B->rng->fill(f->q, t, d.m, off, n, &r));
  uint8_t *got = tbuf_read(f, &d), *want = xcalloc(1, d.es);
  double mean = t == ACCEL_F64 ? r.mean : (float)r.mean;
  double sd = t == ACCEL_F64 ? r.stddev : (float)r.stddev;
  for (size_t i = 0; i < n; i++) {
    if (dist == BE_RNG_UNIFORM) {
      uniform_ref(t, r.seed, r.offset + i, want, 0);
      if (memcmp(got + (off + i) * d.es, want, d.es) != 0)
        TEST_FAIL("uniform %s: element %zu (stream element %" PRIu64 ") differs", dt_name(t), i,
                  r.offset + i);
      continue;
    }
    double z = (double)normal_ref(t, r.seed, r.offset + i), w = z * sd + mean;
    /* F64: 8 ulps of |z| sd + |mean| (and of 1e-3 near zeros of sin, cos, where the long
     * double reference itself is only good to ~1e-19); the others as kernel_rng_fill's F32
     * normal, plus the rounding to t. */
    double tol = t == ACCEL_F64 ? 8 * DBL_EPSILON * (fabs(z) * sd + fabs(mean) + 1e-3)
                                : 16 * FLT_EPSILON * (fabs(w) + 1) * sd +
                                      (t == ACCEL_F32 ? 0 : dt_u(t) * fabs(w) + dt_tiny(t));
    check_close(tget(t, got, off + i), w, tol, "normal", i);
  }
  tcheck_outside(got, &d, off, n);
  free(got);
  free(want);
  tbuf_free(f, &d);
}

static void kernel_rng_dtypes_dev(void) {
  fx f = fx_open();
  uint32_t set = B->rng->dtypes(f.d);
  tbuf m = tbuf_new(&f, ACCEL_F64, 64, 1, 2);
  be_rng_args uni = {.dist = BE_RNG_UNIFORM, .seed = 1};
  be_rng_args nor = {.dist = BE_RNG_NORMAL, .seed = 1, .stddev = 1};
  be_rng_args odd = {.dist = BE_RNG_NORMAL, .seed = 1, .offset = 3, .stddev = 1};
  for (size_t x = 0; x < N_DTYPES; x++) {
    uint32_t t = all_dtypes[x];
    if (!in_set(set, t)) {
      CHECK_ERR(B->rng->fill(f.q, t, m.m, 0, 4, &uni), ACCEL_ENOTSUP);
      CHECK_ERR(B->rng->fill(f.q, t, m.m, 0, 4, &nor), ACCEL_ENOTSUP);
      continue;
    }
    printf("    uniform, normal %s\n", dt_name(t));
    CHECK_ERR(B->rng->fill(f.q, t, m.m, 0, 2, &odd), ACCEL_EINVAL);
    for (int i = 0; i < 2; i++) {
      rng_dt_case(&f, t, BE_RNG_UNIFORM, false);
      rng_dt_case(&f, t, BE_RNG_NORMAL, false);
      rng_dt_case(&f, t, BE_RNG_NORMAL, true);
    }
  }
  tbuf_free(&f, &m);
  fx_close(&f);
}

TEST(kernel_rng_dtypes) {
  each_device(kernel_rng_dtypes_dev);
}

/* ---- the core fill in every element size ---- */

static void kernel_fill_sizes_dev(void) {
  fx f = fx_open();
  static const uint32_t sizes[] = {1, 2, 4, 8};
  for (size_t s = 0; s < 4; s++) {
    uint32_t es = sizes[s];
    size_t n = rnd_range(1, 50000), off = rnd_range(0, 99), len = off + n + 9;
    uint64_t value = rnd64() | 0x0101010101010101ull; /* no zero byte */
    uint8_t *host = xcalloc(len, es), *got = xcalloc(len, es);
    rnd_bytes(host, len * es);
    be_mem m = mem_new(f.d, len * es);
    put(&f, m, 0, host, len * es);
    CHECK_OK(B->fill(f.q, m, off, n, es, value));
    get(&f, got, m, 0, len * es);
    for (size_t i = 0; i < len; i++) {
      bool inside = i >= off && i < off + n;
      /* Little-endian: the low es bytes of value are its first es bytes in memory. */
      if (memcmp(got + i * es, inside ? (const void *)&value : host + i * es, es) != 0)
        TEST_FAIL("fill of %u-byte elements: element %zu (%s) wrong", es, i,
                  inside ? "inside" : "outside");
    }
    CHECK_ERR(B->fill(f.q, m, len - 1, 2, es, value), ACCEL_EINVAL);
    B->mem_free(f.d, &m);
    free(host);
    free(got);
  }
  fx_close(&f);
}

TEST(kernel_fill_sizes) {
  each_device(kernel_fill_sizes_dev);
}

/* 4- and 8-byte fills on both sides of where a backend may switch between a memset and a
 * kernel (CUDA: 64 KiB, kernels.c), each at an offset, with a value of equal halves (zeros
 * among them: a 32-bit pattern twice as long on CUDA) and one of distinct halves. */
static void fill_case(fx *f, uint32_t es, size_t n, uint64_t value) {
  size_t off = rnd_range(0, 9), len = off + n + 3;
  uint8_t *host = xcalloc(len, es), *got = xcalloc(len, es);
  rnd_bytes(host, len * es);
  be_mem m = mem_new(f->d, len * es);
  put(f, m, 0, host, len * es);
  CHECK_OK(B->fill(f->q, m, off, n, es, value));
  get(f, got, m, 0, len * es);
  for (size_t i = 0; i < len; i++) {
    bool inside = i >= off && i < off + n;
    if (memcmp(got + i * es, inside ? (const void *)&value : host + i * es, es) != 0)
      TEST_FAIL("fill of %zu %u-byte elements with %#" PRIx64 ": element %zu (%s) wrong", n, es,
                value, i, inside ? "inside" : "outside");
  }
  B->mem_free(f->d, &m);
  free(host);
  free(got);
}

static void kernel_fill_memset_edges_dev(void) {
  fx f = fx_open();
  uint32_t half = (uint32_t)rnd64() | 1;
  const uint64_t values[] = {0, (uint64_t)half << 32 | half, rnd64() | 1};
  for (uint32_t es = 4; es <= 8; es += 4) {
    size_t at = ((size_t)64 << 10) / es; /* 64 KiB of elements */
    const size_t counts[] = {1, 3, at - 1, at, at + 1};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      for (size_t v = 0; v < 3; v++)
        fill_case(&f, es, counts[c], values[v]);
  }
  fx_close(&f);
}

TEST(kernel_fill_memset_edges) {
  each_device(kernel_fill_memset_edges_dev);
}

/* What the cpu backend runs, exactly (packages.c); other backends say their own. */
static void cpu_dtype_sets_dev(void) {
  if (strcmp(B->name, "cpu") != 0)
    return;
  fx f = fx_open();
  uint32_t floats = ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64) |
                    ACCEL_DTYPE_BIT(ACCEL_F16) | ACCEL_DTYPE_BIT(ACCEL_BF16);
  CHECK_EQ(B->blas->vector_dtypes(f.d), ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64));
  CHECK_EQ(B->rng->dtypes(f.d), floats);
  CHECK_EQ(B->nn->dtypes(f.d), floats);
  for (size_t x = 0; x < N_DTYPES; x++)
    for (size_t y = 0; y < N_DTYPES; y++)
      for (size_t mi = 0; mi < 4; mi++) {
        uint32_t ab = all_dtypes[x], ct = all_dtypes[y], math = gemm_maths[mi];
        bool runs = be_gemm_combo_ok(ab, ct, math) && math != BE_GEMM_MATH_TF32;
        CHECK_ERR(B->blas->gemm_supports(f.d, ab, ct, math), runs ? 0 : ACCEL_ENOTSUP);
      }
  be_mem m = mem_new(f.d, 256);
  be_gemm_args tf32 = {.m = 2,
                       .n = 2,
                       .k = 2,
                       .alpha = 1,
                       .lda = 2,
                       .ldb = 2,
                       .ldc = 2,
                       .ab_type = ACCEL_F32,
                       .c_type = ACCEL_F32,
                       .math = BE_GEMM_MATH_TF32,
                       .batch = 1};
  be_rng_args bits = {.dist = BE_RNG_BITS, .seed = 1};
  CHECK_ERR(B->blas->gemm(f.q, &tf32, m, 0, m, 4, m, 8), ACCEL_ENOTSUP);
  CHECK_ERR(B->blas->axpy(f.q, ACCEL_F16, 4, 2, m, 0, m, 8), ACCEL_ENOTSUP);
  CHECK_ERR(B->blas->dot(f.q, ACCEL_BF16, 4, m, 0, m, 8, m, 16), ACCEL_ENOTSUP);
  CHECK_ERR(B->blas->scal(f.q, ACCEL_F16, 4, 2, m, 0), ACCEL_ENOTSUP);
  CHECK_ERR(B->rng->fill(f.q, ACCEL_F32, m, 0, 4, &bits), ACCEL_ENOTSUP);
  CHECK_ERR(B->nn->unary(f.q, ACCEL_U32, BE_RELU, m, 0, m, 8, 4), ACCEL_ENOTSUP);
  B->mem_free(f.d, &m);
  fx_close(&f);
}

TEST(cpu_dtype_sets) {
  each_device(cpu_dtype_sets_dev);
}

/* ---- argument errors ----------------------------------------------------------------- */

/* Every entry with a range past a buffer's end (or another bad argument) fails with
 * ACCEL_EINVAL; nothing runs: the buffer is unchanged, no callback is called, and the queue
 * still works (no error left behind for later events or callbacks). */
static void bad_ranges(fx *f, be_mem m, size_t len, void *host) {
  be_queue *q = f->q;
  size_t bytes = len * 4;
  be_sgemm_args g = {.m = 4, .n = 4, .k = 4, .alpha = 1, .beta = 1, .lda = 4, .ldb = 4, .ldc = 4};
  be_rng_args odd = {.dist = BE_RNG_NORMAL, .seed = 1, .offset = 3, .stddev = 1};
  be_rng_args bits = {.dist = BE_RNG_BITS, .seed = 1};
  CHECK_ERR(B->copy_h2d(q, m, bytes + 1, host, 0), ACCEL_EINVAL);
  CHECK_ERR(B->copy_h2d(q, m, 1, host, bytes), ACCEL_EINVAL);
  CHECK_ERR(B->copy_h2d(q, m, SIZE_MAX, host, 2), ACCEL_EINVAL);
  CHECK_ERR(B->copy_h2d(q, m, 0, NULL, 4), ACCEL_EINVAL);
  CHECK_ERR(B->copy_d2h(q, host, m, bytes - 3, 4), ACCEL_EINVAL);
  CHECK_ERR(B->copy_d2d(q, m, bytes - 4, m, 0, 8), ACCEL_EINVAL);
  CHECK_ERR(B->copy_d2d(q, m, 0, m, bytes - 4, 8), ACCEL_EINVAL);
  CHECK_ERR(be_fill_u32(B, q, m, len - 1, 2, 7), ACCEL_EINVAL);
  CHECK_ERR(be_fill_u32(B, q, m, SIZE_MAX, 1, 7), ACCEL_EINVAL);
  CHECK_ERR(be_fill_u32(B, q, m, 1, SIZE_MAX, 7), ACCEL_EINVAL);
  CHECK_ERR(be_rng_fill(B, q, m, 0, len + 1, &bits), ACCEL_EINVAL);
  CHECK_ERR(be_rng_fill(B, q, m, 0, 2, &odd), ACCEL_EINVAL);
  CHECK_ERR(be_saxpy(B, q, len, 2, m, 1, m, 0), ACCEL_EINVAL);
  CHECK_ERR(be_sdot(B, q, 4, m, 0, m, 4, m, len), ACCEL_EINVAL);
  CHECK_ERR(be_unary(B, q, (be_unary_op)99, m, 0, m, 0, 4), ACCEL_EINVAL);
  CHECK_ERR(be_unary(B, q, BE_RELU, m, len - 3, m, 0, 4), ACCEL_EINVAL);
  CHECK_ERR(be_softmax(B, q, m, 0, m, 1, 1, len), ACCEL_EINVAL);
  CHECK_ERR(be_softmax(B, q, m, 0, m, 0, SIZE_MAX / 2, 3), ACCEL_EINVAL);
  CHECK_ERR(be_sgemm(B, q, &g, m, 0, m, 16, m, len - 15), ACCEL_EINVAL);
  g.lda = 3; /* < m */
  CHECK_ERR(be_sgemm(B, q, &g, m, 0, m, 16, m, 32), ACCEL_EINVAL);
  CHECK_ERR(B->host_callback(q, NULL, NULL), ACCEL_EINVAL);
  CHECK_ERR(B->host_notify(q, NULL, NULL), ACCEL_EINVAL);
}

static void argument_errors_dev(void) {
  fx f = fx_open();
  size_t len = 64;
  fbuf b = fbuf_new(&f, len, 1, 2);
  float *host = xcalloc(len + 1, 4);
  rnd_floats(host, len + 1, 1, 2);
  be_mem none = {0};
  CHECK_ERR(B->mem_alloc(f.d, 0, &none), ACCEL_EINVAL);
  atomic_int next = 0;
  cb_rec *r = cb_recs(2, &next);
  CHECK_OK(B->host_callback(f.q, cb_fn, &r[0]));
  bad_ranges(&f, b.m, len, host);
  CHECK_OK(B->host_callback(f.q, cb_fn, &r[1]));
  float *got = fbuf_read(&f, &b);
  check_outside(got, &b, 0, 0);
  cb_wait(r, 2);
  CHECK_OK(atomic_load(&r[1].status));
  CHECK_EQ(atomic_load(&r[1].order), 1); /* nothing called in between */
  free(got);
  free(host);
  free(r);
  fbuf_free(&f, &b);
  fx_close(&f);
}

TEST(argument_errors) {
  each_device(argument_errors_dev);
}

/* ---- faults -------------------------------------------------------------------------- */

static void fault_not_permitted_dev(void) {
  be_device *d = dev_open(0);
  CHECK_ERR(B->inject_fault(d), ACCEL_EPERM);
  CHECK_OK(B->status(d));
  be_queue *q = queue_new(d);
  finish(d, q);
  B->queue_destroy(q);
  B->close(d);
}

TEST(fault_injection_not_permitted) {
  each_device(fault_not_permitted_dev);
}

/* After a fault every submission fails with ACCEL_EDEVLOST and queues nothing. */
static void submissions_fail(be_device *d, be_queue *q, be_mem m, void *host) {
  be_sgemm_args g = {.m = 2, .n = 2, .k = 2, .alpha = 1, .lda = 2, .ldb = 2, .ldc = 2};
  be_rng_args bits = {.dist = BE_RNG_BITS};
  be_event *ev = NULL;
  be_queue *q2 = NULL;
  be_mem m2 = {0};
  atomic_int calls = 0;
  cb_rec r = {.next = &calls};
  CHECK_ERR(B->copy_h2d(q, m, 0, host, 16), ACCEL_EDEVLOST);
  CHECK_ERR(B->copy_d2h(q, host, m, 0, 16), ACCEL_EDEVLOST);
  CHECK_ERR(B->copy_d2d(q, m, 0, m, 16, 16), ACCEL_EDEVLOST);
  CHECK_ERR(be_fill_u32(B, q, m, 0, 4, 1), ACCEL_EDEVLOST);
  CHECK_ERR(be_rng_fill(B, q, m, 0, 4, &bits), ACCEL_EDEVLOST);
  CHECK_ERR(be_saxpy(B, q, 4, 1, m, 0, m, 4), ACCEL_EDEVLOST);
  CHECK_ERR(be_sdot(B, q, 4, m, 0, m, 4, m, 8), ACCEL_EDEVLOST);
  CHECK_ERR(be_unary(B, q, BE_TANH, m, 0, m, 4, 4), ACCEL_EDEVLOST);
  CHECK_ERR(be_softmax(B, q, m, 0, m, 4, 2, 2), ACCEL_EDEVLOST);
  CHECK_ERR(be_sgemm(B, q, &g, m, 0, m, 4, m, 8), ACCEL_EDEVLOST);
  CHECK_ERR(B->host_callback(q, cb_fn, &r), ACCEL_EDEVLOST);
  CHECK_ERR(B->host_notify(q, cb_fn, &r), ACCEL_EDEVLOST);
  CHECK_ERR(B->mem_alloc(d, 64, &m2), ACCEL_EDEVLOST);
  CHECK_ERR(B->queue_create(d, &q2), ACCEL_EDEVLOST);
  CHECK_ERR(B->event_create(d, &ev), ACCEL_EDEVLOST);
  test_sleep_ms(5);
  CHECK_EQ(atomic_load(&r.calls), 0);
}

typedef struct fault_scene {
  be_device *d;
  be_queue *qa, *qb;
  be_mem buf;
  be_event *done, *mid, *pending;
  gate g;
  atomic_int next;
  cb_rec *r;
} fault_scene;

/* Few enough pairs behind a gate that a driver does not block the submitting thread: CUDA
 * blocks once about 56 fill + callback pairs wait behind a callback that has not returned. */
enum { FAULT_N = 24 };

/* Work held behind a gate on qa; qb waits for qa's middle; callbacks everywhere. */
static void fault_scene_start(fault_scene *s) {
  s->d = dev_open(1);
  s->qa = queue_new(s->d);
  s->qb = queue_new(s->d);
  s->buf = mem_new(s->d, 1 << 16);
  s->done = event_new(s->d);
  s->mid = event_new(s->d);
  s->pending = event_new(s->d);
  s->r = cb_recs(2 * FAULT_N, &s->next);
  CHECK_OK(be_fill_u32(B, s->qa, s->buf, 0, 1 << 14, 5));
  CHECK_OK(B->event_record(s->done, s->qa));
  CHECK_OK(B->event_sync(s->done));
  CHECK_OK(B->host_callback(s->qa, gate_fn, &s->g));
  for (size_t i = 0; i < FAULT_N; i++) {
    CHECK_OK(be_fill_u32(B, s->qa, s->buf, 0, 1 << 13, (uint32_t)i + 1));
    CHECK_OK(B->host_callback(s->qa, cb_fn, &s->r[i]));
    if (i == FAULT_N / 2)
      CHECK_OK(B->event_record(s->mid, s->qa));
  }
  CHECK_OK(B->queue_wait(s->qb, s->mid));
  for (size_t i = 0; i < FAULT_N; i++) {
    CHECK_OK(be_fill_u32(B, s->qb, s->buf, 1 << 13, 1 << 13, (uint32_t)i + 1));
    CHECK_OK(B->host_callback(s->qb, cb_fn, &s->r[FAULT_N + i]));
  }
  CHECK_OK(B->event_record(s->pending, s->qb));
  gate_wait_entered(&s->g);
}

static void fault_reports_lost(fault_scene *s) {
  CHECK_ERR(B->status(s->d), ACCEL_EDEVLOST);
  CHECK_ERR(B->event_query(s->done), ACCEL_EDEVLOST); /* complete before the fault */
  CHECK_ERR(B->event_sync(s->done), ACCEL_EDEVLOST);
  CHECK_ERR(B->event_query(s->pending), ACCEL_EDEVLOST);
  CHECK_ERR(B->event_query(s->mid), ACCEL_EDEVLOST);
  uint32_t host[16] = {1};
  submissions_fail(s->d, s->qa, s->buf, host);
  atomic_store(&s->g.open, 1);
  CHECK_ERR(B->event_sync(s->pending), ACCEL_EDEVLOST);
  cb_wait(s->r, 2 * FAULT_N);
  for (size_t i = 0; i < 2 * FAULT_N; i++)
    CHECK_ERR(atomic_load(&s->r[i].status), ACCEL_EDEVLOST);
  CHECK_OK(atomic_load(&s->g.status));
}

/* After reset: the device works again; the event kept across it can still be destroyed. */
static void fault_after_reset(fault_scene *s) {
  CHECK_OK(B->reset(s->d));
  CHECK_OK(B->status(s->d));
  B->event_destroy(s->pending);
  fx f = {s->d, queue_new(s->d)};
  size_t n = rnd_range(1, 1 << 16);
  uint8_t *data = xcalloc(n, 1), *got = xcalloc(n, 1);
  rnd_bytes(data, n);
  be_mem m = mem_new(f.d, n);
  put(&f, m, 0, data, n);
  get(&f, got, m, 0, n);
  CHECK(memcmp(got, data, n) == 0);
  atomic_int next = 0;
  cb_rec r = {.next = &next};
  CHECK_OK(B->host_callback(f.q, cb_fn, &r));
  cb_wait(&r, 1);
  CHECK_OK(atomic_load(&r.status));
  B->mem_free(f.d, &m);
  fx_close(&f);
  free(data);
  free(got);
}

static void fault_in_flight_dev(void) {
  fault_scene s = {0};
  fault_scene_start(&s);
  CHECK_ERR(B->event_query(s.pending), RT_PENDING);
  CHECK_OK(B->inject_fault(s.d));
  fault_reports_lost(&s);
  B->mem_free(s.d, &s.buf); /* works on a faulted device */
  B->queue_destroy(s.qa);
  B->queue_destroy(s.qb);
  B->event_destroy(s.done);
  B->event_destroy(s.mid);
  fault_after_reset(&s); /* closes the device */
  for (size_t i = 0; i < 2 * FAULT_N; i++)
    CHECK_EQ(atomic_load(&s.r[i].calls), 1);
  free(s.r);
}

TEST(fault_in_flight_and_reset) {
  each_device(fault_in_flight_dev);
}

/* ---- destroying queues and devices with work pending --------------------------------- */

/* A gate, then n fills and callbacks; opened by a thread later. */
static pthread_t pending_work(be_queue *q, be_mem m, gate *g, cb_rec *r, size_t n) {
  CHECK_OK(B->host_callback(q, gate_fn, g));
  for (size_t i = 0; i < n; i++) {
    CHECK_OK(be_fill_u32(B, q, m, 0, m.bytes / 4, (uint32_t)i + 1));
    CHECK_OK(B->host_callback(q, cb_fn, &r[i]));
  }
  gate_wait_entered(g);
  return open_later(g, 30);
}

/* Each called exactly once; 0 (ran) or ACCEL_ECANCELED (dropped), and once one is dropped
 * all later ones are too. */
static void check_drained(cb_rec *r, size_t n) {
  bool canceled = false;
  for (size_t i = 0; i < n; i++) {
    int st = atomic_load(&r[i].status);
    CHECK_EQ(atomic_load(&r[i].calls), 1);
    CHECK(st == 0 || st == ACCEL_ECANCELED);
    CHECK(!canceled || st == ACCEL_ECANCELED);
    canceled = st == ACCEL_ECANCELED;
  }
}

static void destroy_pending_dev(void) {
  enum { N = 24 }; /* see FAULT_N */
  be_device *d = dev_open(1);
  be_mem m = mem_new(d, 1 << 16);
  atomic_int next = 0;
  cb_rec *r = cb_recs(2 * N, &next);
  gate g = {0}, g2 = {0};
  be_queue *q = queue_new(d);
  pthread_t t = pending_work(q, m, &g, r, N);
  B->queue_destroy(q); /* every callback is called by the time it returns */
  check_drained(r, N);
  pthread_join(t, NULL);
  q = queue_new(d);
  t = pending_work(q, m, &g2, r + N, N);
  CHECK_OK(B->inject_fault(d));
  B->queue_destroy(q);
  for (size_t i = N; i < 2 * N; i++) {
    CHECK_EQ(atomic_load(&r[i].calls), 1);
    CHECK_ERR(atomic_load(&r[i].status), ACCEL_EDEVLOST);
  }
  pthread_join(t, NULL);
  B->mem_free(d, &m);
  B->close(d);
  free(r);
}

TEST(queue_destroy_with_pending_work) {
  each_device(destroy_pending_dev);
}

typedef struct syncer {
  be_event *ev;
  atomic_int started;
  int status;
} syncer;

static void *sync_thread(void *arg) {
  syncer *s = arg;
  atomic_store(&s->started, 1);
  s->status = B->event_sync(s->ev);
  return NULL;
}

/* close() with queues never destroyed and work pending: every callback called by the time it
 * returns; a thread blocked in event_sync meanwhile comes back; the event may still be
 * destroyed after close. */
static void close_pending_dev(void) {
  enum { N = 24 }; /* see FAULT_N */
  be_device *d = dev_open(1);
  be_mem m = mem_new(d, 1 << 16);
  be_mem leak = mem_new(d, 4096); /* close frees what was not freed */
  (void)leak;
  atomic_int next = 0;
  cb_rec *r = cb_recs(N, &next);
  gate g = {0};
  be_queue *q = queue_new(d);
  syncer s = {.ev = event_new(d)};
  pthread_t t = pending_work(q, m, &g, r, N), ts;
  CHECK_OK(B->event_record(s.ev, q));
  CHECK_EQ(pthread_create(&ts, NULL, sync_thread, &s), 0);
  while (!atomic_load(&s.started))
    test_sleep_ms(1);
  B->close(d);
  check_drained(r, N);
  pthread_join(ts, NULL);
  CHECK(s.status == 0 || s.status == ACCEL_ECANCELED || s.status == ACCEL_EDEVLOST);
  B->event_destroy(s.ev);
  pthread_join(t, NULL);
  free(r);
}

TEST(close_with_pending_work) {
  each_device(close_pending_dev);
}

/* ---- several threads ----------------------------------------------------------------- */

/* T threads, a queue each, in rounds: each fills its slot r with a value, records its event;
 * after a barrier each queue waits on its neighbour's event and copies the neighbour's slot
 * into its log. The log shows every neighbour fill, which holds only if the cross-queue waits
 * work while everything runs at once. Memory and events come and go concurrently too. */
enum { T_THREADS = 4, T_ROUNDS = 150, T_SLOT = 256 };

typedef struct stress {
  be_device *d;
  pthread_barrier_t bar;
  be_event *ev[T_THREADS];
  be_mem data[T_THREADS];
} stress;

typedef struct stress_arg {
  stress *s;
  int t;
} stress_arg;

static uint32_t stress_value(int t, int r) {
  return (uint32_t)(t + 1) * 100000u + (uint32_t)r + 1;
}

static void stress_round(stress *s, be_queue *q, be_mem log, int t, int r) {
  be_mem scratch = mem_new(s->d, 4096);
  CHECK_OK(be_fill_u32(B, q, s->data[t], (size_t)r * T_SLOT, T_SLOT, stress_value(t, r)));
  CHECK_OK(be_fill_u32(B, q, scratch, 0, 1024, (uint32_t)r));
  CHECK_OK(B->event_record(s->ev[t], q));
  pthread_barrier_wait(&s->bar);
  int n = (t + 1) % T_THREADS;
  CHECK_OK(B->queue_wait(q, s->ev[n]));
  int st = B->event_query(s->ev[n]);
  CHECK(st == 0 || st == RT_PENDING);
  CHECK_OK(
      B->copy_d2d(q, log, (size_t)r * T_SLOT * 4, s->data[n], (size_t)r * T_SLOT * 4, T_SLOT * 4));
  finish(s->d, q); /* scratch is no longer used */
  B->mem_free(s->d, &scratch);
  pthread_barrier_wait(&s->bar); /* nobody records again before everyone has waited */
}

static void *stress_thread(void *arg) {
  stress_arg *a = arg;
  stress *s = a->s;
  be_queue *q = queue_new(s->d);
  be_mem log = mem_new(s->d, (size_t)T_ROUNDS * T_SLOT * 4);
  for (int r = 0; r < T_ROUNDS; r++)
    stress_round(s, q, log, a->t, r);
  uint32_t *got = xcalloc((size_t)T_ROUNDS * T_SLOT, 4);
  CHECK_OK(B->copy_d2h(q, got, log, 0, (size_t)T_ROUNDS * T_SLOT * 4));
  finish(s->d, q);
  for (int r = 0; r < T_ROUNDS; r++)
    for (int i = 0; i < T_SLOT; i++)
      CHECK_EQ(got[r * T_SLOT + i], stress_value((a->t + 1) % T_THREADS, r));
  free(got);
  B->mem_free(s->d, &log);
  B->queue_destroy(q);
  return NULL;
}

static void threads_stress_dev(void) {
  stress s = {.d = dev_open(1)};
  pthread_t th[T_THREADS];
  stress_arg args[T_THREADS];
  CHECK_EQ(pthread_barrier_init(&s.bar, NULL, T_THREADS), 0);
  for (int t = 0; t < T_THREADS; t++) {
    s.ev[t] = event_new(s.d);
    s.data[t] = mem_new(s.d, (size_t)T_ROUNDS * T_SLOT * 4);
  }
  for (int t = 0; t < T_THREADS; t++) {
    args[t] = (stress_arg){&s, t};
    CHECK_EQ(pthread_create(&th[t], NULL, stress_thread, &args[t]), 0);
  }
  for (int t = 0; t < T_THREADS; t++)
    pthread_join(th[t], NULL);
  for (int t = 0; t < T_THREADS; t++) {
    B->event_destroy(s.ev[t]);
    B->mem_free(s.d, &s.data[t]);
  }
  pthread_barrier_destroy(&s.bar);
  B->close(s.d);
}

TEST(threads_and_cross_waits) {
  each_device(threads_stress_dev);
}

/* ---- main ---------------------------------------------------------------------------- */

static const test_case tests[] = {
    TEST_CASE(registry_lists_backends),
    TEST_CASE(probe_open_info_close),
    TEST_CASE(mem_alloc_free),
    TEST_CASE(copy_h2d_d2h_round_trip),
    TEST_CASE(copy_d2d),
    TEST_CASE(in_order_on_one_queue),
    TEST_CASE(host_callbacks_once_in_order),
    TEST_CASE(host_notify_once_in_order_after_work),
    TEST_CASE(host_notify_pending_and_fault),
    TEST_CASE(cpu_tiny_work_on_an_idle_queue_runs_at_once),
    TEST_CASE(cross_queue_event_wait),
    TEST_CASE(queue_wait_captures_point),
    TEST_CASE(event_query_sync),
    TEST_CASE(kernel_sgemm),
    TEST_CASE(kernel_saxpy),
    TEST_CASE(kernel_sdot),
    TEST_CASE(kernel_fill_u32),
    TEST_CASE(kernel_rng_fill),
    TEST_CASE(kernel_unary),
    TEST_CASE(kernel_softmax),
    TEST_CASE(kernel_gemm_dtypes),
    TEST_CASE(kernel_vector_dtypes),
    TEST_CASE(kernel_nn_dtypes),
    TEST_CASE(kernel_binary),
    TEST_CASE(kernel_binary_int),
    TEST_CASE(kernel_compare),
    TEST_CASE(kernel_logical),
    TEST_CASE(kernel_where),
    TEST_CASE(kernel_convert),
    TEST_CASE(kernel_reduce),
    TEST_CASE(kernel_rng_dtypes),
    TEST_CASE(kernel_fill_sizes),
    TEST_CASE(kernel_fill_memset_edges),
    TEST_CASE(cpu_dtype_sets),
    TEST_CASE(argument_errors),
    TEST_CASE(fault_injection_not_permitted),
    TEST_CASE(fault_in_flight_and_reset),
    TEST_CASE(queue_destroy_with_pending_work),
    TEST_CASE(close_with_pending_work),
    TEST_CASE(threads_and_cross_waits),
};

int main(int argc, char **argv) {
  const char *env = getenv("ACCEL_TEST_SEED");
  base_seed = env != NULL ? strtoull(env, NULL, 0) : test_now_ns() ^ ((uint64_t)getpid() << 32);
  printf("# seed %" PRIu64 " (rerun with ACCEL_TEST_SEED=%" PRIu64 ")\n", base_seed, base_seed);
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
