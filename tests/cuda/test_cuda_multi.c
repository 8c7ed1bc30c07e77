/* cuda-multi: what spans several devices of the cuda backend, through be_ops on real GPUs:
 *   - peer copies (can_peer, copy_peer) between two opens of GPU 0 (the backend allows one
 *     index opened twice: two contexts of one GPU), both ways, at odd offsets, checked byte
 *     for byte; a lost source device refuses them (ACCEL_EDEVLOST) until it is reset;
 *   - the collective package over one device (all-reduce is then the identity for every
 *     operator, broadcast the identity, all-gather a copy), every dtype, checked byte for byte
 *     against the input; what supports() refuses (one GPU twice, devices in contexts of their
 *     own) and, in a child process with ACCEL_NCCL_LIBRARY=/nonexistent, a machine without
 *     NCCL: supports() answers ACCEL_ENOTSUP and the device works on;
 *   - with two GPUs or more (skipped, saying so, with one): peer copies both ways between GPU 0
 *     and 1, and over every GPU an all-reduce sum of F32 against a float64 host reference
 *     (tolerance: ndev * FLT_EPSILON * sum |x_i| per element, the rounding of ndev - 1 float
 *     additions in any order), broadcast from the last device and all-gather, exactly.
 * Collectives need the devices in their primary contexts (collective.c says why): those tests
 * set ACCEL_CUDA_CONTEXT=primary around their opens. Without a CUDA device it exits 77. */
#include <execinfo.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/cuda/backend_cuda.h"
#include "cuda_test.h"

static const be_ops *B = &be_cuda_ops;
static int ngpu;
static const char *self_path;

typedef struct dq {
  be_device *d;
  be_queue *q;
} dq;

static dq dq_open(int index, bool primary, int fault_injection) {
  const char *was = getenv("ACCEL_CUDA_CONTEXT");
  char saved[32] = "";
  if (was != NULL)
    snprintf(saved, sizeof saved, "%s", was);
  if (primary)
    setenv("ACCEL_CUDA_CONTEXT", "primary", 1);
  else
    unsetenv("ACCEL_CUDA_CONTEXT");
  be_open_opts o = {.fault_injection = fault_injection};
  dq x = {0};
  CHECK_OK(B->open(index, &o, &x.d));
  CHECK_OK(B->queue_create(x.d, &x.q));
  if (was != NULL)
    setenv("ACCEL_CUDA_CONTEXT", saved, 1);
  else
    unsetenv("ACCEL_CUDA_CONTEXT");
  return x;
}

static void dq_close(dq *x) {
  B->queue_destroy(x->q);
  B->close(x->d);
}

static void sync_q(be_queue *q, be_device *d) {
  be_event *ev = NULL;
  CHECK_OK(B->event_create(d, &ev));
  CHECK_OK(B->event_record(ev, q));
  CHECK_OK(B->event_sync(ev));
  B->event_destroy(ev);
}

static be_mem mem_new(be_device *d, size_t bytes) {
  be_mem m = {0};
  CHECK_OK(B->mem_alloc(d, bytes, &m));
  return m;
}

static void fill_random(void *p, size_t n) {
  uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)cuda_rnd64();
}

/* ---- peer copies -------------------------------------------------------------------------- */

/* bytes from src (on from) at src_off into dst (on to) at dst_off, by to's queue: exact. */
static void peer_case(dq *to, dq *from, size_t bytes, size_t dst_off, size_t src_off) {
  uint8_t *in = cuda_xmalloc(bytes), *out = cuda_xmalloc(bytes);
  fill_random(in, bytes);
  memset(out, 0, bytes);
  be_mem src = mem_new(from->d, src_off + bytes), dst = mem_new(to->d, dst_off + bytes);
  CHECK_OK(B->copy_h2d(from->q, src, src_off, in, bytes));
  sync_q(from->q, from->d);
  CHECK(B->can_peer(to->d, from->d));
  CHECK_OK(B->copy_peer(to->q, dst, dst_off, from->d, src, src_off, bytes));
  CHECK_OK(B->copy_d2h(to->q, out, dst, dst_off, bytes));
  sync_q(to->q, to->d);
  CHECK(memcmp(in, out, bytes) == 0);
  B->mem_free(from->d, &src);
  B->mem_free(to->d, &dst);
  free(in);
  free(out);
}

static void peer_both_ways(dq *a, dq *b) {
  size_t sizes[] = {1, 4093, (size_t)8 << 20, ((size_t)64 << 20) + 5};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    peer_case(a, b, sizes[i], cuda_rnd_range(0, 64), cuda_rnd_range(0, 64));
    peer_case(b, a, sizes[i], cuda_rnd_range(0, 64), cuda_rnd_range(0, 64));
  }
}

TEST(peer_one_gpu_opened_twice) {
  dq a = dq_open(0, false, 0), b = dq_open(0, false, 1);
  CHECK(B->can_peer(a.d, b.d));
  CHECK(B->can_peer(b.d, a.d));
  CHECK(!B->can_peer(a.d, a.d));
  CHECK_EQ(be_cuda_peer_direct(a.d, b.d), 0); /* one GPU: no peer access to enable */
  peer_both_ways(&a, &b);
  /* Out of range, then a lost source: refused, nothing queued. */
  be_mem src = mem_new(b.d, 64), dst = mem_new(a.d, 64);
  CHECK_ERR(B->copy_peer(a.q, dst, 1, b.d, src, 0, 64), ACCEL_EINVAL);
  CHECK_OK(B->inject_fault(b.d));
  CHECK(!B->can_peer(a.d, b.d));
  CHECK_ERR(B->copy_peer(a.q, dst, 0, b.d, src, 0, 64), ACCEL_EDEVLOST);
  B->mem_free(b.d, &src);
  B->queue_destroy(b.q);
  CHECK_OK(B->reset(b.d));
  CHECK_OK(B->queue_create(b.d, &b.q));
  CHECK(B->can_peer(a.d, b.d));
  B->mem_free(a.d, &dst);
  peer_case(&a, &b, 4096, 3, 5);
  dq_close(&b);
  dq_close(&a);
}

TEST(peer_between_gpus) {
  if (ngpu < 2)
    TEST_SKIP("one GPU: peer copies between two GPUs need two");
  dq a = dq_open(0, false, 0), b = dq_open(1, false, 0);
  printf("    cuda:0 <-> cuda:1: %s\n",
         be_cuda_peer_direct(a.d, b.d) == 1 && be_cuda_peer_direct(b.d, a.d) == 1
             ? "direct (peer access)"
             : "staged by the driver");
  peer_both_ways(&a, &b);
  dq_close(&b);
  dq_close(&a);
}

/* ---- collectives over one device ---------------------------------------------------------- */

static const uint32_t coll_types[] = {ACCEL_F32, ACCEL_F64, ACCEL_F16, ACCEL_BF16, ACCEL_U32};

static size_t esize(uint32_t dtype) {
  return dtype == ACCEL_F64 ? 8 : dtype == ACCEL_F16 || dtype == ACCEL_BF16 ? 2 : 4;
}

/* Random elements of the dtype, finite (exponent bits never all ones). */
static void fill_values(uint32_t dtype, void *p, size_t count) {
  fill_random(p, count * esize(dtype));
  for (size_t i = 0; i < count; i++) {
    if (dtype == ACCEL_F32)
      ((uint32_t *)p)[i] &= ~((uint32_t)1 << 30);
    else if (dtype == ACCEL_F64)
      ((uint64_t *)p)[i] &= ~((uint64_t)1 << 62);
    else if (dtype == ACCEL_F16)
      ((uint16_t *)p)[i] &= (uint16_t) ~(1u << 14);
    else if (dtype == ACCEL_BF16)
      ((uint16_t *)p)[i] &= (uint16_t) ~(1u << 14);
  }
}

static be_coll_call call_one(be_coll_kind kind, uint32_t dtype, size_t count, dq *x, be_mem buf,
                             be_mem recv) {
  be_coll_call c = {.kind = kind, .dtype = dtype, .ndev = 1, .count = count};
  c.dev[0] = x->d;
  c.queue[0] = x->q;
  c.buf[0] = buf;
  c.recv[0] = recv;
  return c;
}

/* One collective over x alone on count random elements: the output equals the input. */
static void one_device_case(dq *x, be_coll_kind kind, be_reduce_op op, uint32_t dtype,
                            size_t count) {
  size_t bytes = count * esize(dtype);
  uint8_t *in = cuda_xmalloc(bytes), *out = cuda_xmalloc(bytes);
  fill_values(dtype, in, count);
  be_mem buf = mem_new(x->d, bytes), recv = {0};
  if (kind == BE_COLL_ALL_GATHER) {
    recv = mem_new(x->d, bytes);
    CHECK_OK(B->fill(x->q, recv, 0, bytes, 1, 0xA5));
  }
  CHECK_OK(B->copy_h2d(x->q, buf, 0, in, bytes));
  be_coll_call c = call_one(kind, dtype, count, x, buf, recv);
  c.reduce = op;
  int rc = B->collective->run(&c);
  if (dtype == ACCEL_U32 && kind == BE_COLL_ALL_REDUCE && op == BE_REDUCE_PROD) {
    CHECK_ERR(rc, ACCEL_ENOTSUP);
  } else {
    CHECK_OK(rc);
    CHECK_OK(B->copy_d2h(x->q, out, kind == BE_COLL_ALL_GATHER ? recv : buf, 0, bytes));
    sync_q(x->q, x->d);
    CHECK(memcmp(in, out, bytes) == 0);
  }
  B->mem_free(x->d, &buf);
  if (recv.handle != 0)
    B->mem_free(x->d, &recv);
  free(in);
  free(out);
}

TEST(collective_one_device) {
  CHECK(B->collective != NULL);
  dq x = dq_open(0, true, 0);
  be_device *devs[1] = {x.d};
  if (B->collective->supports(devs, 1) != 0)
    TEST_SKIP("no NCCL here (the log line above says why)");
  CHECK_EQ(B->collective->dtypes(x.d),
           ACCEL_DTYPE_BIT(ACCEL_F32) | ACCEL_DTYPE_BIT(ACCEL_F64) | ACCEL_DTYPE_BIT(ACCEL_F16) |
               ACCEL_DTYPE_BIT(ACCEL_BF16) | ACCEL_DTYPE_BIT(ACCEL_U32));
  for (size_t t = 0; t < sizeof coll_types / sizeof coll_types[0]; t++) {
    size_t count = cuda_rnd_range(1, 1 << 20);
    for (int op = BE_REDUCE_SUM; op <= BE_REDUCE_MAX; op++)
      one_device_case(&x, BE_COLL_ALL_REDUCE, (be_reduce_op)op, coll_types[t], count);
    one_device_case(&x, BE_COLL_BROADCAST, BE_REDUCE_SUM, coll_types[t], count);
    one_device_case(&x, BE_COLL_ALL_GATHER, BE_REDUCE_SUM, coll_types[t], count);
  }
  /* Checked arguments: nothing is queued. */
  be_mem buf = mem_new(x.d, 64);
  be_coll_call c = call_one(BE_COLL_BROADCAST, ACCEL_F32, 17, &x, buf, (be_mem){0});
  CHECK_ERR(B->collective->run(&c), ACCEL_EINVAL); /* 17 floats in 64 bytes */
  c.count = 16;
  c.root = 1;
  CHECK_ERR(B->collective->run(&c), ACCEL_EINVAL);
  c.root = 0;
  c.dtype = ACCEL_I32;
  CHECK_ERR(B->collective->run(&c), ACCEL_ENOTSUP);
  B->mem_free(x.d, &buf);
  dq_close(&x);
}

TEST(collective_refusals) {
  dq own = dq_open(0, false, 0), p1 = dq_open(0, true, 0), p2 = dq_open(0, true, 0);
  be_device *one_own[1] = {own.d}, *twice[2] = {p1.d, p2.d};
  CHECK_ERR(B->collective->supports(one_own, 1), ACCEL_ENOTSUP); /* a context of its own */
  CHECK_EQ(B->collective->dtypes(own.d), 0);
  CHECK_ERR(B->collective->supports(twice, 2), ACCEL_ENOTSUP); /* one GPU twice */
  dq_close(&p2);
  dq_close(&p1);
  dq_close(&own);
}

/* In a child process (NCCL is looked for once per process): with ACCEL_NCCL_LIBRARY naming a
 * file that does not exist, supports() and run() answer ACCEL_ENOTSUP, dtypes() none, and the
 * device works on. */
TEST(collective_without_nccl) {
  if (getenv("ACCEL_NCCL_LIBRARY") == NULL) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      setenv("ACCEL_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
      execl(self_path, self_path, "collective_without_nccl", (char *)NULL);
      _exit(127);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    return;
  }
  dq x = dq_open(0, true, 0);
  be_device_info info;
  CHECK_OK(B->info(x.d, &info));
  CHECK(info.name[0] != '\0');
  be_device *devs[1] = {x.d};
  CHECK_ERR(B->collective->supports(devs, 1), ACCEL_ENOTSUP);
  CHECK_EQ(B->collective->dtypes(x.d), 0);
  be_mem buf = mem_new(x.d, 64);
  be_coll_call c = call_one(BE_COLL_ALL_REDUCE, ACCEL_F32, 16, &x, buf, (be_mem){0});
  CHECK_ERR(B->collective->run(&c), ACCEL_ENOTSUP);
  CHECK_OK(B->fill(x.q, buf, 0, 16, 4, 7)); /* the device works on */
  sync_q(x.q, x.d);
  B->mem_free(x.d, &buf);
  dq_close(&x);
}

/* ---- collectives over every GPU ----------------------------------------------------------- */

typedef struct multi {
  uint32_t n;
  dq x[BE_COLL_MAX_DEVICES];
  be_coll_call c;
} multi;

static void multi_open(multi *m, be_coll_kind kind, size_t count) {
  m->n = ngpu < (int)BE_COLL_MAX_DEVICES ? (uint32_t)ngpu : BE_COLL_MAX_DEVICES;
  m->c = (be_coll_call){.kind = kind, .dtype = ACCEL_F32, .ndev = m->n, .count = count};
  for (uint32_t i = 0; i < m->n; i++) {
    m->x[i] = dq_open((int)i, true, 0);
    m->c.dev[i] = m->x[i].d;
    m->c.queue[i] = m->x[i].q;
    m->c.buf[i] = mem_new(m->x[i].d, count * 4);
    if (kind == BE_COLL_ALL_GATHER)
      m->c.recv[i] = mem_new(m->x[i].d, m->n * count * 4);
  }
}

static void multi_close(multi *m) {
  for (uint32_t i = 0; i < m->n; i++) {
    B->mem_free(m->x[i].d, &m->c.buf[i]);
    if (m->c.recv[i].handle != 0)
      B->mem_free(m->x[i].d, &m->c.recv[i]);
    dq_close(&m->x[i]);
  }
}

static float *random_floats(size_t count) {
  float *v = cuda_xmalloc(count * sizeof *v);
  for (size_t i = 0; i < count; i++)
    v[i] = cuda_rnd_nz(0.0f, 1.0f);
  return v;
}

TEST(all_reduce_sum_over_every_gpu) {
  if (ngpu < 2)
    TEST_SKIP("one GPU: a collective over several GPUs needs two");
  size_t count = ((size_t)1 << 22) + 3;
  multi m;
  multi_open(&m, BE_COLL_ALL_REDUCE, count);
  double *sum = calloc(count, sizeof *sum), *abs_sum = calloc(count, sizeof *abs_sum);
  CHECK(sum != NULL && abs_sum != NULL);
  for (uint32_t i = 0; i < m.n; i++) {
    float *v = random_floats(count);
    for (size_t k = 0; k < count; k++) {
      sum[k] += v[k];
      abs_sum[k] += fabs(v[k]);
    }
    CHECK_OK(B->copy_h2d(m.x[i].q, m.c.buf[i], 0, v, count * 4));
    sync_q(m.x[i].q, m.x[i].d);
    free(v);
  }
  CHECK_OK(B->collective->run(&m.c));
  float *out = cuda_xmalloc(count * 4);
  for (uint32_t i = 0; i < m.n; i++) {
    CHECK_OK(B->copy_d2h(m.x[i].q, out, m.c.buf[i], 0, count * 4));
    sync_q(m.x[i].q, m.x[i].d);
    for (size_t k = 0; k < count; k++)
      if (fabs(out[k] - sum[k]) > m.n * FLT_EPSILON * abs_sum[k])
        TEST_FAIL("device %u element %zu: %.9g, want %.9g", i, k, out[k], sum[k]);
  }
  free(out);
  free(sum);
  free(abs_sum);
  multi_close(&m);
}

TEST(broadcast_and_all_gather_over_every_gpu) {
  if (ngpu < 2)
    TEST_SKIP("one GPU: a collective over several GPUs needs two");
  size_t count = ((size_t)1 << 20) + 7;
  multi m;
  multi_open(&m, BE_COLL_BROADCAST, count);
  m.c.root = m.n - 1;
  float *v[BE_COLL_MAX_DEVICES], *out = cuda_xmalloc(m.n * count * 4);
  for (uint32_t i = 0; i < m.n; i++) {
    v[i] = random_floats(count);
    CHECK_OK(B->copy_h2d(m.x[i].q, m.c.buf[i], 0, v[i], count * 4));
    sync_q(m.x[i].q, m.x[i].d);
  }
  CHECK_OK(B->collective->run(&m.c));
  for (uint32_t i = 0; i < m.n; i++) {
    CHECK_OK(B->copy_d2h(m.x[i].q, out, m.c.buf[i], 0, count * 4));
    sync_q(m.x[i].q, m.x[i].d);
    CHECK(memcmp(out, v[m.n - 1], count * 4) == 0);
  }
  multi_close(&m);
  multi_open(&m, BE_COLL_ALL_GATHER, count);
  for (uint32_t i = 0; i < m.n; i++) {
    CHECK_OK(B->copy_h2d(m.x[i].q, m.c.buf[i], 0, v[i], count * 4));
    sync_q(m.x[i].q, m.x[i].d);
  }
  CHECK_OK(B->collective->run(&m.c));
  for (uint32_t i = 0; i < m.n; i++) {
    CHECK_OK(B->copy_d2h(m.x[i].q, out, m.c.recv[i], 0, m.n * count * 4));
    sync_q(m.x[i].q, m.x[i].d);
    for (uint32_t j = 0; j < m.n; j++)
      CHECK(memcmp(out + j * count, v[j], count * 4) == 0);
  }
  for (uint32_t i = 0; i < m.n; i++)
    free(v[i]);
  free(out);
  multi_close(&m);
}

static const test_case tests[] = {
    TEST_CASE(peer_one_gpu_opened_twice),
    TEST_CASE(peer_between_gpus),
    TEST_CASE(collective_one_device),
    TEST_CASE(collective_refusals),
    TEST_CASE(collective_without_nccl),
    TEST_CASE(all_reduce_sum_over_every_gpu),
    TEST_CASE(broadcast_and_all_gather_over_every_gpu),
};

/* A crash prints its stack (binary(+offset) frames: addr2line -e <binary> <offset>). */
static void on_crash(int sig) {
  void *frames[64];
  int n = backtrace(frames, 64);
  (void)!write(2, "crash: stack:\n", 14);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

int main(int argc, char **argv) {
  char why[128] = "";
  self_path = "/proc/self/exe";
  signal(SIGSEGV, on_crash);
  signal(SIGBUS, on_crash);
  if (B->probe(&ngpu, why, sizeof why) != 0 || ngpu == 0)
    return cuda_test_skip(why[0] ? why : "no device");
  printf("# %d GPU(s)\n", ngpu);
  cuda_test_seed();
  return test_main_(argc, argv, tests, sizeof tests / sizeof tests[0]);
}
