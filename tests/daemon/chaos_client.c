/* A chaos client (chaos.h): random ops through libaccel on random devices (ACCEL_DEVICE_ANY
 * too), in steps of one to three ops issued back to back under a random completion strategy,
 * each op followed at once by a read of everything it wrote. When the step's futures are in,
 * the ops are checked in issue order against a float64 reference computed from what the
 * previous read-backs said the inputs held; the read-back then becomes the buffer's known
 * contents.
 *
 * Accepted errors: ACCEL_EDEVLOST (a fault hit the op), ACCEL_EDATALOST (it used data a fault
 * destroyed), ACCEL_ECLOSED (the connection was lost: the client reconnects). A buffer whose
 * read-back failed is unknown until a later read-back succeeds, and ops that read unknown
 * buffers are not checked. Any other code, an op that reports success with a value outside the
 * tolerance, or an op not complete within CHAOS_OP_TIMEOUT_MS fails the client: a message on
 * stderr, a CHAOS_FAILED report, exit status 1.
 *
 * Tolerances, with u the unit roundoff of the dtype (2^-24 for F32, 2^-53 for F64): exact for
 * create (zeros), write, read, fill, copy, relu and RNG bits and uniforms (Philox reference,
 * tests/philox_ref.h); axpy and scal 4u of the magnitudes summed; dot and gemm (2k + 8)u of
 * the sum of |products| (plus beta's term); sigmoid and tanh 16u relative + 4u absolute;
 * softmax (4 cols + 4 |x - max| + 32)u relative + 4u absolute; F32 normals
 * 1e-4 stddev (1 + |z|) as in tests/api/rng.c; and arithmetic results 4 times the smallest
 * normal number absolute (subnormal results). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/accel.h"
#include "chaos.h"
#include "philox_ref.h"
#include "test.h"

#define CHAOS_OP_TIMEOUT_MS 60000
#define CHAOS_REPORT_MS 50
#define CHAOS_WILD 1e6 /* contents past this magnitude are not used as arithmetic inputs */
#define CHAOS_SHARED_BYTES (4u << 20)

enum { SLOTS = 8, STEP_MAX = 3 };

typedef struct slot {
  accel_buffer h; /* 0: empty */
  accel_dtype dt;
  size_t n;
  double *v;  /* the contents, as the last read-back said (exact) */
  bool known; /* v is valid */
  bool wild;  /* some |v| > CHAOS_WILD (or not finite) */
} slot;

typedef enum op_kind {
  K_CREATE,
  K_WRITE,
  K_READ,
  K_FILL,
  K_COPY,
  K_AXPY,
  K_DOT,
  K_SCAL,
  K_GEMM,
  K_RNG,
  K_SIGMOID,
  K_RELU,
  K_TANH,
  K_SOFTMAX,
  K_ALL_REDUCE, /* x on one device, dst on another: both become x + dst */
  K_DESTROY,
  K_COUNT
} op_kind;

static const char *const kind_names[K_COUNT] = {"create", "write",   "read",       "fill",
                                                "copy",   "axpy",    "dot",        "scal",
                                                "gemm",   "rng",     "sigmoid",    "relu",
                                                "tanh",   "softmax", "all-reduce", "destroy"};

/* One op of a step: what it was asked, and its futures. */
typedef struct op_rec {
  op_kind kind;
  accel_device dev, dev2;  /* dev2: an all-reduce's second device (dst's) */
  int dst, x, y;           /* slots: what it writes, what it reads (-1: none) */
  size_t off, off2, count; /* write/read/copy ranges; count is n of axpy/dot/scal */
  size_t m, n, k, lda, ldb, ldc, rows, cols;
  accel_trans ta, tb;
  double alpha, beta;
  accel_rng rng;
  void *host; /* a write's source, a read's destination */
  void *back; /* dst read back whole after the op */
  accel_future *f, *fb;
  int rc, rcb; /* the calls' own codes (then no future) */
} op_rec;

typedef struct client {
  accel_ctx *ctx;
  const char *url;
  int ndev, fd;
  uint64_t seed, rng;
  slot s[SLOTS];
  int last; /* the slot the previous op wrote: preferred as the next input */
  bool closed;
  char *shared; /* from accel_host_alloc: mapped by the daemon too */
  size_t shared_used;
  chaos_report rep; /* counts since the last report */
  uint64_t reported_ms;
} client;

static volatile sig_atomic_t stop_requested;

static void on_sigterm(int sig) {
  (void)sig;
  stop_requested = 1;
}

/* ---- reporting ---- */

static void report(client *c, uint32_t kind) {
  chaos_report r = c->rep;
  r.pid = (int32_t)getpid();
  r.kind = kind;
  (void)!write(c->fd, &r, sizeof r);
  memset(&c->rep, 0, sizeof c->rep);
  c->reported_ms = test_now_ms();
}

static __attribute__((noreturn, format(printf, 2, 3))) void fail(client *c, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "chaos client %d (ACCEL_CHAOS_SEED=%llu): %s\n", (int)getpid(),
          (unsigned long long)c->seed, msg);
  fflush(stderr);
  report(c, CHAOS_FAILED);
  _exit(1);
}

/* ---- elements ---- */

static size_t esize(accel_dtype dt) {
  return dt == ACCEL_F64 ? 8 : 4;
}

static bool is_float(accel_dtype dt) {
  return dt == ACCEL_F32 || dt == ACCEL_F64;
}

static double unit(accel_dtype dt) {
  return dt == ACCEL_F64 ? 0x1p-53 : 0x1p-24;
}

static const char *dt_name(accel_dtype dt) {
  return dt == ACCEL_F64 ? "F64" : dt == ACCEL_F32 ? "F32" : "U32";
}

static double elem_get(accel_dtype dt, const void *p, size_t i) {
  if (dt == ACCEL_F64)
    return ((const double *)p)[i];
  if (dt == ACCEL_F32)
    return ((const float *)p)[i];
  return ((const uint32_t *)p)[i];
}

static void elem_set(accel_dtype dt, void *p, size_t i, double v) {
  if (dt == ACCEL_F64)
    ((double *)p)[i] = v;
  else if (dt == ACCEL_F32)
    ((float *)p)[i] = (float)v;
  else
    ((uint32_t *)p)[i] = (uint32_t)v;
}

static void *xalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (p == NULL)
    abort();
  return p;
}

/* Memory for a transfer: half the time from the shared region while it lasts (past 64 KiB
 * the daemon then reads or writes it in place), else the heap. The region is reused from each
 * step's start: every op of a step has completed before the next step. */
static void *io_alloc(client *c, size_t bytes) {
  bytes = (bytes + 63) & ~(size_t)63;
  if (c->shared == NULL || chaos_rnd(&c->rng) % 2 || c->shared_used + bytes > CHAOS_SHARED_BYTES)
    return xalloc(bytes);
  void *p = c->shared + c->shared_used;
  c->shared_used += bytes;
  memset(p, 0, bytes);
  return p;
}

static void io_free(client *c, void *p) {
  char *q = p;
  if (c->shared == NULL || q < c->shared || q >= c->shared + CHAOS_SHARED_BYTES)
    free(p);
}

/* A value as the dtype stores it: F32 rounded, U32 any 32 bits. */
static double rnd_value(client *c, accel_dtype dt) {
  if (dt == ACCEL_U32)
    return (double)(uint32_t)chaos_rnd(&c->rng);
  double v = chaos_uniform(&c->rng, -4, 4);
  return dt == ACCEL_F32 ? (double)(float)v : v;
}

static uint64_t rnd(client *c, uint64_t lo, uint64_t hi) {
  return chaos_range(&c->rng, lo, hi);
}

static accel_device rnd_dev(client *c) {
  int d = (int)rnd(c, 0, (uint64_t)c->ndev);
  return d == c->ndev ? ACCEL_DEVICE_ANY : d;
}

/* ---- picking buffers ---- */

typedef bool (*slot_pred)(const slot *s, const slot *ref);

static bool any_live(const slot *s, const slot *ref) {
  return s->h != 0;
}
static bool live_float(const slot *s, const slot *ref) {
  return s->h != 0 && is_float(s->dt) && !s->wild;
}
static bool same_dtype(const slot *s, const slot *ref) {
  return s->h != 0 && s->dt == ref->dt && !s->wild;
}
static bool same_shape(const slot *s, const slot *ref) {
  return same_dtype(s, ref) && s->n == ref->n;
}

/* A random slot that satisfies pred (the previous op's output half the time, if it does),
 * other than `not1` and `not2`; -1 if none. */
static int pick(client *c, slot_pred pred, const slot *ref, int not1, int not2) {
  bool ok[SLOTS];
  int n = 0;
  for (int i = 0; i < SLOTS; i++) {
    ok[i] = i != not1 && i != not2 && pred(&c->s[i], ref);
    n += ok[i];
  }
  if (n == 0)
    return -1;
  if (c->last >= 0 && ok[c->last] && rnd(c, 0, 1))
    return c->last;
  int k = (int)rnd(c, 0, (uint64_t)n - 1);
  for (int i = 0; i < SLOTS; i++)
    if (ok[i] && k-- == 0)
      return i;
  return -1;
}

static int empty_slot(client *c) {
  for (int i = 0; i < SLOTS; i++)
    if (c->s[i].h == 0)
      return i;
  return -1;
}

/* Sizes: mostly small, sometimes past 64 KiB (shared memory through ipc://). */
static size_t rnd_count(client *c) {
  uint64_t r = rnd(c, 0, 99);
  return r < 70 ? rnd(c, 1, 512) : r < 96 ? rnd(c, 513, 8192) : rnd(c, 16384, 100000);
}

/* ---- issuing ---- */

static void slot_clear(slot *s) {
  free(s->v);
  memset(s, 0, sizeof *s);
}

/* A call's own error: ECLOSED when the connection is gone, nothing else. */
static void call_rc(client *c, int rc, const char *what) {
  if (rc == ACCEL_ECLOSED)
    c->closed = true;
  else if (rc != 0)
    fail(c, "%s returned %s", what, accel_err_name(rc));
}

/* The whole of the op's output, read back right behind it. */
static void read_back(client *c, op_rec *r) {
  slot *d = &c->s[r->dst];
  r->back = io_alloc(c, d->n * esize(d->dt));
  r->rcb = accel_read(c->ctx, d->h, 0, r->back, d->n, &r->fb);
  call_rc(c, r->rcb, "accel_read (read-back)");
  c->last = r->dst;
}

static bool issue_create(client *c, op_rec *r) {
  int i = empty_slot(c);
  if (i < 0)
    return false;
  static const accel_dtype dts[] = {ACCEL_F32, ACCEL_F32, ACCEL_F64, ACCEL_F64, ACCEL_U32};
  slot *s = &c->s[i];
  s->dt = dts[rnd(c, 0, 4)];
  s->n = rnd_count(c);
  int rc = accel_buffer_create(c->ctx, s->dt, s->n, &s->h);
  call_rc(c, rc, "accel_buffer_create");
  if (rc != 0) {
    slot_clear(s);
    return false;
  }
  s->v = xalloc(s->n * sizeof *s->v);
  r->dst = i;
  read_back(c, r);
  return true;
}

/* A range of a buffer: the whole of it half the time. */
static void rnd_span(client *c, size_t n, size_t *off, size_t *count) {
  if (rnd(c, 0, 1)) {
    *off = 0;
    *count = n;
    return;
  }
  *off = rnd(c, 0, n - 1);
  *count = rnd(c, 1, n - *off);
}

static bool issue_write(client *c, op_rec *r) {
  if ((r->dst = pick(c, any_live, NULL, -1, -1)) < 0)
    return false;
  slot *d = &c->s[r->dst];
  rnd_span(c, d->n, &r->off, &r->count);
  r->host = io_alloc(c, r->count * esize(d->dt));
  for (size_t i = 0; i < r->count; i++)
    elem_set(d->dt, r->host, i, rnd_value(c, d->dt));
  r->rc = accel_write(c->ctx, d->h, r->off, r->host, r->count, &r->f);
  call_rc(c, r->rc, "accel_write");
  read_back(c, r);
  return true;
}

/* A read is its own check: no read-back. */
static bool issue_read(client *c, op_rec *r) {
  if ((r->x = pick(c, any_live, NULL, -1, -1)) < 0)
    return false;
  slot *s = &c->s[r->x];
  rnd_span(c, s->n, &r->off, &r->count);
  r->host = io_alloc(c, r->count * esize(s->dt));
  r->rc = accel_read(c->ctx, s->h, r->off, r->host, r->count, &r->f);
  call_rc(c, r->rc, "accel_read");
  return true;
}

static bool issue_fill(client *c, op_rec *r) {
  if ((r->dst = pick(c, any_live, NULL, -1, -1)) < 0)
    return false;
  slot *d = &c->s[r->dst];
  r->alpha = rnd_value(c, d->dt);
  if (d->dt == ACCEL_U32)
    r->rc = accel_fill_u32(c->ctx, r->dev, d->h, (uint32_t)r->alpha, &r->f);
  else
    r->rc = accel_fill(c->ctx, r->dev, d->h, r->alpha, &r->f);
  call_rc(c, r->rc, "accel_fill");
  read_back(c, r);
  return true;
}

static bool ranges_overlap(size_t a, size_t b, size_t n) {
  return a < b + n && b < a + n;
}

static bool issue_copy(client *c, op_rec *r) {
  if ((r->x = pick(c, any_live, NULL, -1, -1)) < 0)
    return false;
  slot *s = &c->s[r->x];
  r->dst = pick(c, same_dtype, s, -1, -1);
  if (r->dst < 0)
    return false;
  slot *d = &c->s[r->dst];
  size_t most = s->n < d->n ? s->n : d->n;
  r->count = rnd(c, 1, most);
  r->off2 = rnd(c, 0, s->n - r->count); /* source */
  r->off = rnd(c, 0, d->n - r->count);  /* destination */
  if (r->dst == r->x && ranges_overlap(r->off, r->off2, r->count))
    return false;
  r->rc = accel_copy(c->ctx, r->dev, d->h, r->off, s->h, r->off2, r->count, &r->f);
  call_rc(c, r->rc, "accel_copy");
  read_back(c, r);
  return true;
}

/* axpy (y = dst) and scal (x = dst): n within the buffers. */
static bool issue_axpy(client *c, op_rec *r) {
  if ((r->x = pick(c, live_float, NULL, -1, -1)) < 0)
    return false;
  if ((r->dst = pick(c, same_dtype, &c->s[r->x], -1, -1)) < 0)
    return false;
  size_t most = c->s[r->x].n < c->s[r->dst].n ? c->s[r->x].n : c->s[r->dst].n;
  r->count = rnd(c, 1, most);
  r->alpha = chaos_uniform(&c->rng, -1, 1);
  r->rc = accel_axpy(c->ctx, r->dev, r->count, r->alpha, c->s[r->x].h, c->s[r->dst].h, &r->f);
  call_rc(c, r->rc, "accel_axpy");
  read_back(c, r);
  return true;
}

static bool issue_scal(client *c, op_rec *r) {
  if ((r->dst = pick(c, live_float, NULL, -1, -1)) < 0)
    return false;
  r->count = rnd(c, 1, c->s[r->dst].n);
  r->alpha = chaos_uniform(&c->rng, -1.5, 1.5);
  r->rc = accel_scal(c->ctx, r->dev, r->count, r->alpha, c->s[r->dst].h, &r->f);
  call_rc(c, r->rc, "accel_scal");
  read_back(c, r);
  return true;
}

static bool issue_dot(client *c, op_rec *r) {
  if ((r->x = pick(c, live_float, NULL, -1, -1)) < 0)
    return false;
  if ((r->y = pick(c, same_dtype, &c->s[r->x], -1, -1)) < 0)
    return false;
  if ((r->dst = pick(c, same_dtype, &c->s[r->x], r->x, r->y)) < 0)
    return false;
  size_t most = c->s[r->x].n < c->s[r->y].n ? c->s[r->x].n : c->s[r->y].n;
  r->count = rnd(c, 1, most);
  r->rc = accel_dot(c->ctx, r->dev, r->count, c->s[r->x].h, c->s[r->y].h, c->s[r->dst].h, &r->f);
  call_rc(c, r->rc, "accel_dot");
  read_back(c, r);
  return true;
}

/* A small gemm whose shape fits the buffers picked (a few tries). */
static bool gemm_shape(client *c, op_rec *r) {
  for (int t = 0; t < 8; t++) {
    r->m = rnd(c, 1, 16);
    r->n = rnd(c, 1, 16);
    r->k = rnd(c, 1, 16);
    r->ta = (accel_trans)rnd(c, 0, 1);
    r->tb = (accel_trans)rnd(c, 0, 1);
    size_t ar = r->ta ? r->k : r->m, ac = r->ta ? r->m : r->k; /* A as stored */
    size_t br = r->tb ? r->n : r->k, bc = r->tb ? r->k : r->n;
    r->lda = ar + rnd(c, 0, 2);
    r->ldb = br + rnd(c, 0, 2);
    r->ldc = r->m + rnd(c, 0, 1);
    if (r->lda * ac <= c->s[r->x].n && r->ldb * bc <= c->s[r->y].n &&
        r->ldc * r->n <= c->s[r->dst].n)
      return true;
  }
  return false;
}

static bool issue_gemm(client *c, op_rec *r) {
  if ((r->x = pick(c, live_float, NULL, -1, -1)) < 0)
    return false;
  if ((r->y = pick(c, same_dtype, &c->s[r->x], -1, -1)) < 0)
    return false;
  if ((r->dst = pick(c, same_dtype, &c->s[r->x], r->x, r->y)) < 0 || !gemm_shape(c, r))
    return false;
  r->alpha = chaos_uniform(&c->rng, -2, 2);
  r->beta = rnd(c, 0, 1) ? 0.0 : chaos_uniform(&c->rng, -1, 1);
  r->rc = accel_gemm(c->ctx, r->dev, r->ta, r->tb, r->m, r->n, r->k, r->alpha, c->s[r->x].h, r->lda,
                     c->s[r->y].h, r->ldb, r->beta, c->s[r->dst].h, r->ldc, ACCEL_MATH_DEFAULT,
                     &r->f);
  call_rc(c, r->rc, "accel_gemm");
  read_back(c, r);
  return true;
}

/* BITS into U32; UNIFORM into F32 and F64; NORMAL into F32 (even offsets). */
static bool issue_rng(client *c, op_rec *r) {
  if ((r->dst = pick(c, any_live, NULL, -1, -1)) < 0)
    return false;
  accel_dtype dt = c->s[r->dst].dt;
  r->rng.seed = chaos_rnd(&c->rng);
  r->rng.offset = rnd(c, 0, 1) ? rnd(c, 0, 100) : chaos_rnd(&c->rng) >> 4;
  r->rng.dist = dt == ACCEL_U32 ? ACCEL_DIST_BITS : ACCEL_DIST_UNIFORM;
  if (dt == ACCEL_F32 && rnd(c, 0, 2) == 0) {
    r->rng.dist = ACCEL_DIST_NORMAL;
    r->rng.offset &= ~(uint64_t)1;
    r->rng.mean = (double)(float)chaos_uniform(&c->rng, -2, 2);
    r->rng.stddev = (double)(float)chaos_uniform(&c->rng, 0.1, 3);
  }
  r->rc = accel_rng_fill(c->ctx, r->dev, c->s[r->dst].h, &r->rng, &r->f);
  call_rc(c, r->rc, "accel_rng_fill");
  read_back(c, r);
  return true;
}

/* dst: a buffer of the source's dtype and length (the source itself: in place), or a new one. */
static int unary_dst(client *c, int src) {
  int d = pick(c, same_shape, &c->s[src], -1, -1);
  int e = empty_slot(c);
  if (e < 0 || rnd(c, 0, 2) != 0)
    return d;
  slot *s = &c->s[e];
  s->dt = c->s[src].dt;
  s->n = c->s[src].n;
  int rc = accel_buffer_create(c->ctx, s->dt, s->n, &s->h);
  call_rc(c, rc, "accel_buffer_create");
  if (rc != 0) {
    slot_clear(s);
    return d;
  }
  s->v = xalloc(s->n * sizeof *s->v); /* never written: zeros */
  s->known = true;
  return e;
}

static bool issue_unary(client *c, op_rec *r) {
  if ((r->x = pick(c, live_float, NULL, -1, -1)) < 0 || (r->dst = unary_dst(c, r->x)) < 0)
    return false;
  accel_buffer d = c->s[r->dst].h, s = c->s[r->x].h;
  if (r->kind == K_SIGMOID)
    r->rc = accel_sigmoid(c->ctx, r->dev, d, s, &r->f);
  else if (r->kind == K_RELU)
    r->rc = accel_relu(c->ctx, r->dev, d, s, &r->f);
  else
    r->rc = accel_tanh(c->ctx, r->dev, d, s, &r->f);
  call_rc(c, r->rc, kind_names[r->kind]);
  read_back(c, r);
  return true;
}

static bool issue_softmax(client *c, op_rec *r) {
  if ((r->x = pick(c, live_float, NULL, -1, -1)) < 0)
    return false;
  if ((r->dst = pick(c, same_dtype, &c->s[r->x], -1, -1)) < 0)
    return false;
  size_t most = c->s[r->x].n < c->s[r->dst].n ? c->s[r->x].n : c->s[r->dst].n;
  r->cols = rnd(c, 1, most < 64 ? most : 64);
  r->rows = rnd(c, 1, most / r->cols);
  r->rc = accel_softmax(c->ctx, r->dev, c->s[r->dst].h, c->s[r->x].h, r->rows, r->cols, &r->f);
  call_rc(c, r->rc, "accel_softmax");
  read_back(c, r);
  return true;
}

/* A buffer destroyed, half the time with an op of its own still in flight (the daemon frees
 * it once that op is done). Only its future's code is checked. */
static bool issue_destroy(client *c, op_rec *r) {
  int i = pick(c, any_live, NULL, -1, -1);
  if (i < 0)
    return false;
  slot *s = &c->s[i];
  if (rnd(c, 0, 1)) {
    r->rc = accel_fill(c->ctx, r->dev, s->h, 1.0, &r->f);
    call_rc(c, r->rc, "accel_fill");
  }
  call_rc(c, accel_buffer_destroy(c->ctx, s->h), "accel_buffer_destroy");
  slot_clear(s);
  if (c->last == i)
    c->last = -1;
  return true;
}

/* A sum of x (on one device) and dst (on another, named): both change; dst is read back, x's
 * contents are unknown from then on (check_op). */
static bool issue_all_reduce(client *c, op_rec *r) {
  if (c->ndev < 2 || (r->x = pick(c, live_float, NULL, -1, -1)) < 0)
    return false;
  if ((r->dst = pick(c, same_shape, &c->s[r->x], r->x, -1)) < 0)
    return false;
  r->dev = (accel_device)rnd(c, 0, (uint64_t)c->ndev - 1);
  r->dev2 = (accel_device)((r->dev + 1 + (int)rnd(c, 0, (uint64_t)c->ndev - 2)) % c->ndev);
  accel_device devs[2] = {r->dev, r->dev2};
  accel_buffer bufs[2] = {c->s[r->x].h, c->s[r->dst].h};
  r->rc = accel_all_reduce(c->ctx, devs, bufs, 2, ACCEL_REDUCE_SUM, &r->f);
  call_rc(c, r->rc, "accel_all_reduce");
  read_back(c, r);
  return true;
}

typedef bool (*issue_fn)(client *c, op_rec *r);

static const struct {
  issue_fn fn;
  int weight;
} issuers[K_COUNT] = {
    [K_CREATE] = {issue_create, 6},
    [K_WRITE] = {issue_write, 8},
    [K_READ] = {issue_read, 6},
    [K_FILL] = {issue_fill, 5},
    [K_COPY] = {issue_copy, 6},
    [K_AXPY] = {issue_axpy, 6},
    [K_DOT] = {issue_dot, 5},
    [K_SCAL] = {issue_scal, 5},
    [K_GEMM] = {issue_gemm, 6},
    [K_RNG] = {issue_rng, 6},
    [K_SIGMOID] = {issue_unary, 4},
    [K_RELU] = {issue_unary, 4},
    [K_TANH] = {issue_unary, 3},
    [K_SOFTMAX] = {issue_softmax, 4},
    [K_ALL_REDUCE] = {issue_all_reduce, 4},
    [K_DESTROY] = {issue_destroy, 3},
};

static op_kind rnd_kind(client *c) {
  int total = 0;
  for (int k = 0; k < K_COUNT; k++)
    total += issuers[k].weight;
  int w = (int)rnd(c, 0, (uint64_t)total - 1);
  for (int k = 0; k < K_COUNT; k++)
    if ((w -= issuers[k].weight) < 0)
      return (op_kind)k;
  return K_WRITE;
}

/* Issues one op (a few tries to find one the buffers allow). */
static bool issue(client *c, op_rec *r, bool alone) {
  for (int t = 0; t < 8; t++) {
    memset(r, 0, sizeof *r);
    r->kind = rnd_kind(c);
    r->dst = r->x = r->y = -1;
    r->dev = rnd_dev(c);
    if (r->kind == K_DESTROY && !alone)
      continue; /* a later op of the step could pick its slot again */
    if (issuers[r->kind].fn(c, r))
      return true;
  }
  return false;
}

/* ---- the reference ---- */

/* want/tol over the whole of dst start as its old contents (exact). */
typedef struct expect {
  double *want, *tol;
} expect;

static const double *in(client *c, int i) {
  return c->s[i].v;
}

static void ref_write(client *c, op_rec *r, expect *e) {
  accel_dtype dt = c->s[r->dst].dt;
  for (size_t i = 0; i < r->count; i++)
    e->want[r->off + i] = elem_get(dt, r->host, i);
}

static void ref_fill(client *c, op_rec *r, expect *e) {
  for (size_t i = 0; i < c->s[r->dst].n; i++)
    e->want[i] = r->alpha;
}

static void ref_copy(client *c, op_rec *r, expect *e) {
  for (size_t i = 0; i < r->count; i++)
    e->want[r->off + i] = in(c, r->x)[r->off2 + i];
}

static void ref_axpy(client *c, op_rec *r, expect *e) {
  double u = unit(c->s[r->dst].dt);
  const double *x = in(c, r->x), *y = in(c, r->dst);
  for (size_t i = 0; i < r->count; i++) {
    double p = r->alpha * x[i];
    e->want[i] = p + y[i];
    e->tol[i] = 4 * u * (fabs(p) + fabs(y[i]));
  }
}

static void ref_scal(client *c, op_rec *r, expect *e) {
  double u = unit(c->s[r->dst].dt);
  for (size_t i = 0; i < r->count; i++) {
    e->want[i] = r->alpha * in(c, r->dst)[i];
    e->tol[i] = 4 * u * fabs(e->want[i]);
  }
}

static void ref_dot(client *c, op_rec *r, expect *e) {
  double s = 0, mag = 0;
  for (size_t i = 0; i < r->count; i++) {
    double p = in(c, r->x)[i] * in(c, r->y)[i];
    s += p;
    mag += fabs(p);
  }
  e->want[0] = s;
  e->tol[0] = (2.0 * (double)r->count + 8) * unit(c->s[r->dst].dt) * mag;
}

static void ref_gemm(client *c, op_rec *r, expect *e) {
  const double *a = in(c, r->x), *b = in(c, r->y), *cc = in(c, r->dst);
  double u = unit(c->s[r->dst].dt);
  for (size_t j = 0; j < r->n; j++)
    for (size_t i = 0; i < r->m; i++) {
      double s = 0, mag = 0;
      for (size_t l = 0; l < r->k; l++) {
        double av = r->ta ? a[l + i * r->lda] : a[i + l * r->lda];
        double bv = r->tb ? b[j + l * r->ldb] : b[l + j * r->ldb];
        s += av * bv;
        mag += fabs(av * bv);
      }
      size_t o = i + j * r->ldc;
      /* beta = 0 ignores C's old contents (BLAS: a NaN there does not propagate) */
      double old = r->beta == 0 ? 0 : r->beta * cc[o];
      e->want[o] = r->alpha * s + old;
      e->tol[o] = (2.0 * (double)r->k + 8) * u * (fabs(r->alpha) * mag + fabs(old));
    }
}

static void ref_rng(client *c, op_rec *r, expect *e) {
  const accel_rng *g = &r->rng;
  accel_dtype dt = c->s[r->dst].dt;
  for (size_t i = 0; i < c->s[r->dst].n; i++) {
    uint64_t j = g->offset + i;
    if (dt == ACCEL_U32) {
      e->want[i] = ref_word(g->seed, j);
    } else if (dt == ACCEL_F64) {
      e->want[i] = ref_uniform_double(g->seed, j);
    } else if (g->dist == ACCEL_DIST_UNIFORM) {
      e->want[i] = ref_uniform(ref_word(g->seed, j));
    } else {
      double z = ref_normal(g->seed, j);
      e->want[i] = g->mean + g->stddev * z;
      e->tol[i] = 1e-4 * g->stddev * (1 + fabs(z)) + 1e-6 * fabs(g->mean);
    }
  }
}

static void ref_all_reduce(client *c, op_rec *r, expect *e) {
  double u = unit(c->s[r->dst].dt);
  const double *x = in(c, r->x), *y = in(c, r->dst);
  for (size_t i = 0; i < c->s[r->dst].n; i++) {
    e->want[i] = x[i] + y[i];
    e->tol[i] = 4 * u * (fabs(x[i]) + fabs(y[i]));
  }
}

static double activation(op_kind k, double x) {
  if (k == K_SIGMOID)
    return 1 / (1 + exp(-x));
  if (k == K_TANH)
    return tanh(x);
  return x > 0 ? x : 0;
}

static void ref_unary(client *c, op_rec *r, expect *e) {
  double u = unit(c->s[r->dst].dt);
  for (size_t i = 0; i < c->s[r->dst].n; i++) {
    e->want[i] = activation(r->kind, in(c, r->x)[i]);
    e->tol[i] = r->kind == K_RELU ? 0 : 16 * u * fabs(e->want[i]) + 4 * u;
  }
}

static void ref_softmax(client *c, op_rec *r, expect *e) {
  double u = unit(c->s[r->dst].dt);
  for (size_t row = 0; row < r->rows; row++) {
    const double *x = in(c, r->x) + row * r->cols;
    double mx = x[0], sum = 0;
    for (size_t j = 1; j < r->cols; j++)
      mx = x[j] > mx ? x[j] : mx;
    for (size_t j = 0; j < r->cols; j++)
      sum += exp(x[j] - mx);
    for (size_t j = 0; j < r->cols; j++) {
      double w = exp(x[j] - mx) / sum, spread = 4.0 * (double)r->cols + 4 * (mx - x[j]) + 32;
      e->want[row * r->cols + j] = w;
      e->tol[row * r->cols + j] = spread * u * w + 4 * u;
    }
  }
}

/* Whether the op's result depends on dst's old contents (a partial or read-modify write). */
static bool reads_dst(client *c, op_rec *r) {
  size_t n = c->s[r->dst].n;
  switch (r->kind) {
  case K_WRITE:
    return r->count != n;
  case K_COPY:
    return r->count != n || r->dst == r->x;
  case K_DOT:
    return n != 1;
  case K_GEMM:
    return true; /* beta, or C's rows and columns outside the m x n block */
  case K_SOFTMAX:
    return r->rows * r->cols != n || r->dst == r->x;
  case K_AXPY:
  case K_SCAL:
  case K_ALL_REDUCE:
    return true;
  default:
    return false;
  }
}

/* Whether every buffer the op reads has known contents. */
static bool inputs_known(client *c, op_rec *r) {
  if (r->x >= 0 && (!c->s[r->x].known || c->s[r->x].wild))
    return false;
  if (r->y >= 0 && (!c->s[r->y].known || c->s[r->y].wild))
    return false;
  return !reads_dst(c, r) || (c->s[r->dst].known && !c->s[r->dst].wild);
}

static void reference(client *c, op_rec *r, expect *e) {
  switch (r->kind) {
  case K_CREATE:
    for (size_t i = 0; i < c->s[r->dst].n; i++)
      e->want[i] = 0;
    break;
  case K_WRITE:
    ref_write(c, r, e);
    break;
  case K_FILL:
    ref_fill(c, r, e);
    break;
  case K_COPY:
    ref_copy(c, r, e);
    break;
  case K_AXPY:
    ref_axpy(c, r, e);
    break;
  case K_SCAL:
    ref_scal(c, r, e);
    break;
  case K_DOT:
    ref_dot(c, r, e);
    break;
  case K_GEMM:
    ref_gemm(c, r, e);
    break;
  case K_RNG:
    ref_rng(c, r, e);
    break;
  case K_SOFTMAX:
    ref_softmax(c, r, e);
    break;
  case K_ALL_REDUCE:
    ref_all_reduce(c, r, e);
    break;
  default:
    ref_unary(c, r, e);
    break;
  }
}

/* ---- checking ---- */

/* Arithmetic results below the smallest normal number carry an absolute error of its order
 * (rounded to subnormal spacing, or flushed to zero by vector code). */
static double subnormal_floor(op_kind k, accel_dtype dt) {
  bool arithmetic = k >= K_AXPY && k != K_RNG && k <= K_ALL_REDUCE;
  if (!arithmetic)
    return 0;
  return dt == ACCEL_F64 ? 4 * 0x1p-1022 : dt == ACCEL_F32 ? 4 * 0x1p-126 : 0;
}

static bool close_enough(double got, double want, double tol) {
  if (got == want || (isnan(got) && isnan(want)))
    return true;
  return fabs(got - want) <= tol;
}

static const char *dev_name(accel_device dev, char *buf, size_t len) {
  if (dev == ACCEL_DEVICE_ANY)
    return "any";
  snprintf(buf, len, "%d", (int)dev);
  return buf;
}

static void describe(client *c, op_rec *r, char *buf, size_t len) {
  char dv[16];
  int i = r->dst >= 0 ? r->dst : r->x;
  const slot none = {0}, *d = i >= 0 ? &c->s[i] : &none; /* a destroyed buffer's op */
  snprintf(buf, len,
           "%s on device %s into slot %d (%s, %zu elements; x %d, y %d): off %zu off2 %zu "
           "count %zu m %zu n %zu k %zu ta %d tb %d lda %zu ldb %zu ldc %zu rows %zu cols %zu "
           "alpha %.17g beta %.17g rng seed %llu offset %llu dist %d dev2 %d",
           kind_names[r->kind], dev_name(r->dev, dv, sizeof dv), r->dst, dt_name(d->dt), d->n, r->x,
           r->y, r->off, r->off2, r->count, r->m, r->n, r->k, (int)r->ta, (int)r->tb, r->lda,
           r->ldb, r->ldc, r->rows, r->cols, r->alpha, r->beta, (unsigned long long)r->rng.seed,
           (unsigned long long)r->rng.offset, (int)r->rng.dist, (int)r->dev2);
}

static void compare(client *c, op_rec *r, const void *got, const double *want, const double *tol,
                    size_t n) {
  accel_dtype dt = c->s[r->dst >= 0 ? r->dst : r->x].dt;
  double floor = subnormal_floor(r->kind, dt);
  for (size_t i = 0; i < n; i++) {
    double g = elem_get(dt, got, i);
    if (close_enough(g, want[i], (tol ? tol[i] : 0) + floor))
      continue;
    char what[1024];
    describe(c, r, what, sizeof what);
    fail(c,
         "wrong value after a successful op: %s: element %zu = %.17g, want %.17g (tolerance "
         "%.3g)",
         what, i, g, want[i], tol ? tol[i] : 0.0);
  }
  c->rep.checked++;
}

/* The future's code; only the accepted ones return. */
static int settle(client *c, op_rec *r, accel_future *f, int rc) {
  if (f != NULL) {
    rc = accel_future_wait(f, CHAOS_OP_TIMEOUT_MS);
    if (rc == ACCEL_ETIMEDOUT) {
      char what[1024];
      describe(c, r, what, sizeof what);
      fail(c, "no completion within %d ms: %s", CHAOS_OP_TIMEOUT_MS, what);
    }
    accel_future_release(f);
  }
  c->rep.devlost += rc == ACCEL_EDEVLOST;
  c->rep.datalost += rc == ACCEL_EDATALOST;
  c->rep.closed += rc == ACCEL_ECLOSED;
  c->closed |= rc == ACCEL_ECLOSED;
  if (rc != 0 && rc != ACCEL_EDEVLOST && rc != ACCEL_EDATALOST && rc != ACCEL_ECLOSED) {
    char what[1024];
    describe(c, r, what, sizeof what);
    fail(c, "unexpected %s: %s", accel_err_name(rc), what);
  }
  return rc;
}

/* The contents the read-back saw become dst's known contents. */
static void adopt(client *c, int i, const void *back) {
  slot *s = &c->s[i];
  s->known = true;
  s->wild = false;
  for (size_t j = 0; j < s->n; j++) {
    s->v[j] = elem_get(s->dt, back, j);
    s->wild |= is_float(s->dt) && !(fabs(s->v[j]) <= CHAOS_WILD);
  }
}

static void check_read(client *c, op_rec *r, int st) {
  slot *s = &c->s[r->x];
  if (st == 0 && s->known)
    compare(c, r, r->host, s->v + r->off, NULL, r->count);
}

static void check_op(client *c, op_rec *r) {
  int st = settle(c, r, r->f, r->rc);
  if (r->kind == K_READ) {
    check_read(c, r, st);
    return;
  }
  if (r->dst < 0)
    return; /* a destroyed buffer's op: its code is all there is */
  int sb = settle(c, r, r->fb, r->rcb);
  slot *d = &c->s[r->dst];
  if (st == 0 && sb == 0 && inputs_known(c, r)) {
    expect e = {xalloc(d->n * sizeof(double)), xalloc(d->n * sizeof(double))};
    memcpy(e.want, d->v, d->n * sizeof(double));
    reference(c, r, &e);
    compare(c, r, r->back, e.want, e.tol, d->n);
    free(e.want);
    free(e.tol);
  }
  if (sb == 0)
    adopt(c, r->dst, r->back);
  else
    d->known = false;
  if (r->kind == K_ALL_REDUCE)
    c->s[r->x].known = false; /* it changed too, and was not read back */
}

/* ---- the loop ---- */

static void step(client *c) {
  op_rec recs[STEP_MAX];
  c->shared_used = 0;
  /* each completion strategy of the devices in turn: DEFAULT, CALLBACK, SYNC, POLL */
  int rc = accel_set_completion(c->ctx, (accel_completion)rnd(c, 0, 3));
  if (rc != 0)
    fail(c, "accel_set_completion: %s", accel_err_name(rc));
  int want = rnd(c, 0, 9) < 6 ? 1 : (int)rnd(c, 2, STEP_MAX), n = 0;
  while (n < want && !c->closed && issue(c, &recs[n], want == 1)) {
    n++;
    c->rep.ops++;
  }
  for (int i = 0; i < n; i++) {
    check_op(c, &recs[i]);
    io_free(c, recs[i].host);
    io_free(c, recs[i].back);
  }
  if (test_now_ms() - c->reported_ms >= CHAOS_REPORT_MS)
    report(c, CHAOS_PROGRESS);
}

static void connect_ctx(client *c) {
  int rc = accel_open(&c->ctx, c->url);
  if (rc != 0)
    fail(c, "accel_open(%s): %s", c->url, accel_err_name(rc));
  c->ndev = accel_device_count(c->ctx);
  if (c->ndev < 1)
    fail(c, "%d devices", c->ndev);
  void *p = NULL;
  if ((rc = accel_host_alloc(c->ctx, CHAOS_SHARED_BYTES, &p)) != 0)
    fail(c, "accel_host_alloc: %s", accel_err_name(rc));
  c->shared = p;
  c->closed = false;
  c->last = -1;
}

/* The buffers go with the connection. */
static void disconnect(client *c) {
  int rc = accel_host_free(c->ctx, c->shared);
  if (rc != 0 && rc != ACCEL_ECLOSED)
    fail(c, "accel_host_free: %s", accel_err_name(rc));
  c->shared = NULL;
  accel_close(c->ctx);
  for (int i = 0; i < SLOTS; i++)
    slot_clear(&c->s[i]);
}

static __attribute__((noreturn)) void client_run(const char *url, uint64_t seed, int fd) {
  static client c;
  c.url = url;
  c.seed = c.rng = seed;
  c.fd = fd;
  c.reported_ms = test_now_ms();
  struct sigaction sa = {.sa_handler = on_sigterm, .sa_flags = SA_RESTART};
  sigaction(SIGTERM, &sa, NULL);
  sigset_t term; /* blocked by the parent until now (spawn in chaos.c) */
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_UNBLOCK, &term, NULL);
  connect_ctx(&c);
  while (!stop_requested) {
    step(&c);
    if (c.closed) { /* a fresh connection, without the buffers of the old one */
      disconnect(&c);
      connect_ctx(&c);
    }
  }
  disconnect(&c);
  report(&c, CHAOS_PROGRESS);
  exit(0);
}

/* A client process runs its loop here, before the test's main, and never returns. */
__attribute__((constructor)) static void chaos_client_entry(void) {
  const char *url = getenv(CHAOS_ENV_URL), *seed = getenv(CHAOS_ENV_SEED);
  const char *fd = getenv(CHAOS_ENV_FD);
  if (url == NULL || seed == NULL || fd == NULL)
    return;
  client_run(url, strtoull(seed, NULL, 10), atoi(fd));
}
