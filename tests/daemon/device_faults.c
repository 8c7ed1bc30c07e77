/* Device workers ([devices] workers, backends/worker/worker.h): the devices of the backends
 * named there run in accel-device processes, children of acceld, so that a client's kernel
 * that faults or never ends costs its device a restart on a fresh worker, not the daemon, its
 * other clients or their host data. Tried on PoCL's CPU OpenCL device, where a kernel writing
 * out of bounds hits the host's own memory, and on the first CUDA GPU, where a kernel writing
 * to an illegal address or trapping breaks its context for good. Each test is skipped where
 * acceld has no device of its kind (the executable as a whole only where it has neither).
 *
 * Before workers (devices in acceld), the out-of-bounds kernel below took acceld down with it
 * (every client saw ACCEL_ECLOSED), and the spinning one failed at its deadline but went on
 * using a whole core inside acceld (1000 ms of CPU a second, measured) until acceld exited:
 * no backend can stop a kernel in its own process (accel.h, timeout_ms).
 *
 * CUDA kernels are built from CUDA C where the device lists it in `sources` (NVRTC found),
 * else from PTX; ACCEL_TEST_MODULE_SOURCE=ptx takes the PTX where both are there.
 *
 * Clients use libaccel; the daemon's liveness is checked with a HELLO by hand. The times
 * measured (fault to first served op, error to worker gone) are printed for the log. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accel/accel.h"
#include "util.h"

/* ---- the kernels: one work item, its buffer argument first ---- */

/* A kernel in each language it has (NULL: none in that one), by its name. */
typedef struct kernel_src {
  const char *name;
  const char *opencl, *cuda, *ptx;
} kernel_src;

#define PTX_HEAD ".version 6.0\n.target sm_52\n.address_size 64\n"

/* Writes a byte every page, from just past its 64-byte buffer to 1 GiB beyond: it reaches
 * memory that is not mapped (or not writable) long before the end, whatever lies after the
 * buffer in the worker. */
static const kernel_src out_of_bounds = {"k", .opencl = "__kernel void k(__global uchar *p) {\n"
                                                        "  for (ulong i = 0; i < 262144; i++)\n"
                                                        "    p[64 + i * 4096] = 1;\n"
                                                        "}\n"};

/* Writes 1 TiB past its buffer: no allocation of the context is there, an illegal address. */
static const kernel_src wild_write = {
    "k",
    .cuda = "extern \"C\" __global__ void k(unsigned *p) {\n"
            "  *(volatile unsigned *)((unsigned long long)p + (1ull << 40)) = 1;\n"
            "}\n",
    .ptx = PTX_HEAD ".visible .entry k(.param .u64 p) {\n"
                    "  .reg .b32 %r<2>;\n"
                    "  .reg .b64 %rd<3>;\n"
                    "  ld.param.u64 %rd1, [p];\n"
                    "  add.s64 %rd2, %rd1, 1099511627776;\n"
                    "  mov.u32 %r1, 1;\n"
                    "  st.volatile.u32 [%rd2], %r1;\n"
                    "  ret;\n"
                    "}\n"};

/* Traps: the launch fails and the context is broken for good, like the illegal address. */
static const kernel_src trap = {
    "k", .cuda = "extern \"C\" __global__ void k(unsigned *p) { __trap(); }\n",
    .ptx = PTX_HEAD ".visible .entry k(.param .u64 p) {\n"
                    "  trap;\n"
                    "  ret;\n"
                    "}\n"};

/* Spins while p[0] == 0, which it is: never ends. volatile, so that the compiler reads p[0]
 * each time round instead of deciding the loop ends or is never entered. */
static const kernel_src spin = {
    "spin", .opencl = "__kernel void spin(__global volatile int *p) { while (p[0] == 0) {} }\n",
    .cuda = "extern \"C\" __global__ void spin(unsigned *p) {\n"
            "  while (*(volatile unsigned *)p == 0) {}\n"
            "}\n",
    .ptx = PTX_HEAD ".visible .entry spin(.param .u64 p) {\n"
                    "  .reg .pred %p<2>;\n"
                    "  .reg .b32 %r<2>;\n"
                    "  .reg .b64 %rd<2>;\n"
                    "  ld.param.u64 %rd1, [p];\n"
                    "AGAIN:\n"
                    "  ld.volatile.u32 %r1, [%rd1];\n"
                    "  setp.eq.u32 %p1, %r1, 0;\n"
                    "  @%p1 bra AGAIN;\n"
                    "  ret;\n"
                    "}\n"};

static const kernel_src inc = {
    "inc", .opencl = "__kernel void inc(__global uint *v) { v[get_global_id(0)] += 1; }\n"};

/* ---- the devices ---- */

/* What a test runs on: the first device of `backend` of `kind` (0 CPU, 1 GPU) that builds one
 * of `sources`, served by workers = `workers`; `none` is the skip's reason where there is none. */
typedef struct device_want {
  const char *backend;
  uint32_t kind, sources;
  const char *workers, *none;
} device_want;

static const device_want pocl = {"opencl", 0, 1u << ACCEL_SOURCE_OPENCL, "opencl",
                                 "no OpenCL CPU device"};
static const device_want gpu = {"cuda", 1, (1u << ACCEL_SOURCE_CUDA) | (1u << ACCEL_SOURCE_PTX),
                                "cuda", "no CUDA device"};

enum { MAX_WORKERS = 64 };

/* The daemon of the running test, for its log in failure messages. */
static td_daemon *running;

/* ---- the daemon ---- */

static accel_ctx *connect_to(td_daemon *d) {
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, d->url));
  return ctx;
}

/* The first device that w wants, or ACCEL_DEVICE_ANY. */
static accel_device find_device(accel_ctx *ctx, const device_want *w) {
  int n = accel_device_count(ctx);
  for (accel_device dev = 0; dev < n; dev++) {
    struct accel_device_info info;
    CHECK_OK(accel_device_info(ctx, dev, &info));
    if (strcmp(info.backend, w->backend) == 0 && info.kind == w->kind &&
        (info.sources & w->sources) != 0)
      return dev;
  }
  return ACCEL_DEVICE_ANY;
}

/* Starts acceld with [devices] workers = `workers`; the device that w wants in *dev. False
 * (and the daemon stopped) where it has none. */
static bool start(td_daemon *d, const char *workers, const device_want *w, accel_device *dev) {
  char conf[256];
  td_prepare(d);
  snprintf(conf, sizeof conf, "[devices]\nworkers = %s\n", workers);
  td_write_config(d, conf);
  td_start(d, NULL);
  running = d;
  accel_ctx *ctx = connect_to(d);
  *dev = find_device(ctx, w);
  accel_close(ctx);
  if (*dev != ACCEL_DEVICE_ANY)
    return true;
  CHECK_EQ(td_stop(d), 0);
  td_cleanup(d);
  return false;
}

static void stop(td_daemon *d) {
  char out[256];
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d->url, "ping", NULL), 0);
  CHECK_EQ(td_stop(d), 0);
  td_cleanup(d);
  running = NULL;
}

/* Fails the test, with the daemon's log, if acceld exits within ms (0: has exited). */
static void check_daemon_survives(td_daemon *d, unsigned ms) {
  uint64_t t0 = test_now_ms();
  for (;;) {
    int status = 0;
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
      d->pid = 0;
      TEST_FAIL("acceld died (%s %d); its log:\n%s",
                WIFSIGNALED(status) ? "killed by signal" : "exit status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), td_log(d));
    }
    if (test_now_ms() - t0 >= ms)
      return;
    test_sleep_ms(10);
  }
}

/* The daemon has not exited, and a fresh connection's HELLO is answered. */
static void check_daemon_alive(td_daemon *d) {
  check_daemon_survives(d, 0);
  CHECK_EQ(kill(d->pid, 0), 0);
  td_client c;
  td_client_open(&c, d->url);
  CHECK_OK(td_hello(&c, NULL));
  td_client_close(&c);
}

/* ---- acceld's processes (/proc) ---- */

typedef struct proc_info {
  char comm[32];
  char state;
  int ppid;
  long cpu_ticks; /* utime + stime */
} proc_info;

/* False if the process is gone. */
static bool read_proc(pid_t pid, proc_info *out) {
  char path[64], stat[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return false;
  size_t len = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[len] = '\0';
  const char *open_paren = strchr(stat, '('), *close_paren = strrchr(stat, ')');
  if (open_paren == NULL || close_paren == NULL || close_paren < open_paren)
    return false;
  snprintf(out->comm, sizeof out->comm, "%.*s", (int)(close_paren - open_paren - 1),
           open_paren + 1);
  unsigned long utime = 0, stime = 0;
  if (sscanf(close_paren + 1, " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &out->state,
             &out->ppid, &utime, &stime) != 4)
    return false;
  out->cpu_ticks = (long)(utime + stime);
  return true;
}

/* The live accel-device children of `daemon` (zombies count as gone), at most max. */
static int workers_of(pid_t daemon, pid_t *pids, int max) {
  DIR *dir = opendir("/proc");
  CHECK(dir != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(dir)) != NULL && n < max;) {
    proc_info p;
    pid_t pid = (pid_t)strtol(e->d_name, NULL, 10);
    if (pid > 0 && read_proc(pid, &p) && p.ppid == daemon && p.state != 'Z' &&
        strcmp(p.comm, "accel-device") == 0)
      pids[n++] = pid;
  }
  closedir(dir);
  return n;
}

static bool is_worker(pid_t daemon, pid_t pid) {
  proc_info p;
  return read_proc(pid, &p) && p.ppid == daemon && p.state != 'Z';
}

/* The first of pids[0..n) that is no longer a live child of daemon, or 0. */
static pid_t first_gone(pid_t daemon, const pid_t *pids, int n) {
  for (int i = 0; i < n; i++)
    if (!is_worker(daemon, pids[i]))
      return pids[i];
  return 0;
}

static int workers_before(td_daemon *d, pid_t *pids) {
  int n = workers_of(d->pid, pids, MAX_WORKERS);
  if (n == 0)
    TEST_FAIL("acceld has no accel-device child with workers on; its log:\n%s", td_log(d));
  return n;
}

/* Waits up to bound_ms after `since` for one of the workers listed before to be gone; fails
 * the test if none is. Returns the ms from `since`. */
static uint64_t worker_gone_ms(td_daemon *d, const pid_t *before, int n, uint64_t since,
                               uint64_t bound_ms) {
  pid_t gone;
  while ((gone = first_gone(d->pid, before, n)) == 0) {
    if (test_now_ms() - since > bound_ms)
      TEST_FAIL("all %d accel-device workers of before the fault still run %llu ms after it", n,
                (unsigned long long)bound_ms);
    test_sleep_ms(5);
  }
  uint64_t ms = test_now_ms() - since;
  printf("# worker %d gone %llu ms after the error\n", (int)gone, (unsigned long long)ms);
  return ms;
}

/* CPU time `pid` used since `first` was read, in ms (0 if it is gone by now). */
static long busy_ms_since(pid_t pid, const proc_info *first) {
  proc_info now;
  if (!read_proc(pid, &now))
    return 0;
  return (now.cpu_ticks - first->cpu_ticks) * 1000 / sysconf(_SC_CLK_TCK);
}

/* The most CPU time that acceld or one of its workers used over one second, in ms: a
 * kernel still spinning anywhere holds most of a core. */
static long busiest_over_a_second(pid_t daemon) {
  pid_t pids[MAX_WORKERS + 1];
  proc_info first[MAX_WORKERS + 1];
  int n = workers_of(daemon, pids, MAX_WORKERS);
  pids[n++] = daemon;
  for (int i = 0; i < n; i++)
    if (!read_proc(pids[i], &first[i]))
      first[i].cpu_ticks = -1;
  test_sleep_ms(1000);
  long most = 0;
  for (int i = 0; i < n; i++) {
    long ms = first[i].cpu_ticks < 0 ? 0 : busy_ms_since(pids[i], &first[i]);
    if (ms > most)
      most = ms;
  }
  return most;
}

/* ---- ops ---- */

/* Waits for f (30 s at most: a missing answer fails the test) and releases it: its status.
 * accel_future_wait's own ACCEL_ETIMEDOUT is told from an op's by polling. */
static int outcome(accel_future *f) {
  accel_future_wait(f, 30000);
  int rc = accel_future_poll(f);
  if (rc == ACCEL_EAGAIN)
    TEST_FAIL("an op had no answer in 30 s; acceld's log:\n%s", td_log(running));
  accel_future_release(f);
  return rc;
}

static void write_sync(accel_ctx *ctx, accel_buffer b, const uint32_t *src, size_t n) {
  accel_future *f = NULL;
  CHECK_OK(accel_write(ctx, b, 0, src, n, &f));
  CHECK_OK(outcome(f));
}

static int read_sync(accel_ctx *ctx, accel_buffer b, uint32_t *dst, size_t n) {
  accel_future *f = NULL;
  CHECK_OK(accel_read(ctx, b, 0, dst, n, &f));
  return outcome(f);
}

static accel_buffer new_u32(accel_ctx *ctx, size_t n) {
  accel_buffer b = 0;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_U32, n, &b));
  return b;
}

/* A fresh buffer filled on dev and read back (checked): 0, or the first error. */
static int small_op(accel_ctx *ctx, accel_device dev) {
  enum { N = 256 };
  uint32_t back[N];
  accel_buffer b = new_u32(ctx, N);
  accel_future *f = NULL;
  int rc = accel_fill_u32(ctx, dev, b, 0x5a5a5a5au, &f);
  if (rc == 0)
    rc = outcome(f);
  if (rc == 0)
    rc = read_sync(ctx, b, back, N);
  for (int i = 0; rc == 0 && i < N; i++)
    CHECK_EQ(back[i], 0x5a5a5a5au);
  CHECK_OK(accel_buffer_destroy(ctx, b));
  return rc;
}

/* Tries small ops on dev until one succeeds (10 s at most): the ms from `since`. */
static uint64_t served_again_ms(accel_ctx *ctx, accel_device dev, uint64_t since) {
  int rc, tries = 0;
  while ((rc = small_op(ctx, dev)) != 0) {
    if (rc == ACCEL_ECLOSED)
      check_daemon_survives(running, 1000); /* fails at once, with the log, if acceld died */
    if (test_now_ms() - since > 10000)
      TEST_FAIL("device %d still fails small ops 10 s after the fault (%s); acceld's log:\n%s", dev,
                accel_err_name(rc), td_log(running));
    tries++;
    test_sleep_ms(5);
  }
  uint64_t ms = test_now_ms() - since;
  printf("# recovery: device %d served a small op again %llu ms after the fault (%d failed "
         "tries)\n",
         dev, (unsigned long long)ms, tries);
  return ms;
}

static void check_restarted_once(accel_ctx *ctx, accel_device dev) {
  struct accel_device_info info;
  CHECK_OK(accel_device_info(ctx, dev, &info));
  CHECK_EQ(info.state, 0);
  CHECK_EQ(info.restarts, 1);
}

/* The text of k that dev builds, its kind in *kind: OpenCL C, CUDA C, PTX, in that order
 * (PTX ahead of CUDA C with ACCEL_TEST_MODULE_SOURCE=ptx). Fails the test if none. */
static const char *source_for(accel_ctx *ctx, accel_device dev, const kernel_src *k,
                              accel_source *kind) {
  const char *text[] = {[ACCEL_SOURCE_OPENCL] = k->opencl,
                        [ACCEL_SOURCE_CUDA] = k->cuda,
                        [ACCEL_SOURCE_PTX] = k->ptx};
  accel_source order[] = {ACCEL_SOURCE_OPENCL, ACCEL_SOURCE_CUDA, ACCEL_SOURCE_PTX};
  const char *want = getenv("ACCEL_TEST_MODULE_SOURCE");
  if (want != NULL && strcmp(want, "ptx") == 0) {
    order[1] = ACCEL_SOURCE_PTX;
    order[2] = ACCEL_SOURCE_CUDA;
  }
  struct accel_device_info info;
  CHECK_OK(accel_device_info(ctx, dev, &info));
  for (int i = 0; i < 3; i++)
    if (text[order[i]] != NULL && (info.sources & (1u << order[i]))) {
      *kind = order[i];
      return text[order[i]];
    }
  TEST_FAIL("device %d (%s) builds none of the languages of kernel %s", dev, info.name, k->name);
}

/* Builds k for dev (checked, the build log shown on failure): its kernel. */
static accel_kernel load_kernel(accel_ctx *ctx, accel_device dev, const kernel_src *k) {
  accel_source kind;
  const char *src = source_for(ctx, dev, k, &kind);
  accel_module m = 0;
  accel_future *f = NULL;
  CHECK_OK(accel_module_load(ctx, dev, kind, src, strlen(src), NULL, &m, &f));
  accel_future_wait(f, 120000);
  int rc = accel_future_poll(f);
  if (rc != 0) {
    const char *log = accel_future_value(f);
    TEST_FAIL("building %s: %s\n%s", k->name, accel_err_name(rc), log ? log : "(no log)");
  }
  accel_future_release(f);
  accel_kernel kernel = 0;
  CHECK_OK(accel_kernel_get(ctx, m, k->name, &kernel));
  return kernel;
}

/* One work item of k on b[0 .. count), with the launch deadline timeout_ms (0: default). */
static accel_future *launch_one(accel_ctx *ctx, accel_device dev, accel_kernel k, accel_buffer b,
                                accel_access access, size_t count, uint32_t timeout_ms) {
  accel_launch_dims dims = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .timeout_ms = timeout_ms};
  accel_arg arg = accel_arg_buffer(b, access, 0, count);
  accel_future *f = NULL;
  CHECK_OK(accel_launch(ctx, dev, k, &dims, &arg, 1, &f));
  return f;
}

/* ---- a bystander: another client with host data that was on the device too ---- */

typedef struct bystander {
  accel_ctx *ctx;
  accel_buffer x; /* written by the client, then copied from on the device: host + device */
  accel_buffer y; /* x's copy, made on the device: only there */
  uint32_t *data;
  size_t n;
} bystander;

static void random_words(uint32_t *v, size_t n, uint64_t seed) {
  printf("# bystander data seed %llu\n", (unsigned long long)seed);
  for (size_t i = 0; i < n; i++) { /* xorshift64 */
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    v[i] = (uint32_t)(seed >> 16);
  }
}

/* x's host copy is valid (written, read back once); x and y are on dev. */
static void bystander_start(bystander *a, td_daemon *d, accel_device dev) {
  a->n = (size_t)1 << 20;
  a->data = malloc(a->n * 4);
  uint32_t *back = malloc(a->n * 4);
  CHECK(a->data != NULL && back != NULL);
  random_words(a->data, a->n, test_now_ns() | 1);
  a->ctx = connect_to(d);
  a->x = new_u32(a->ctx, a->n);
  a->y = new_u32(a->ctx, a->n);
  write_sync(a->ctx, a->x, a->data, a->n);
  CHECK_OK(read_sync(a->ctx, a->x, back, a->n));
  CHECK_EQ(memcmp(back, a->data, a->n * 4), 0);
  accel_future *f = NULL;
  CHECK_OK(accel_copy(a->ctx, dev, a->y, 0, a->x, 0, a->n, &f));
  CHECK_OK(outcome(f));
  free(back);
}

/* x reads back exactly (its host copy); y reads back exactly or reports its loss, never wrong
 * data; the session still runs ops on dev. */
static void bystander_check(bystander *a, accel_device dev) {
  uint32_t *back = malloc(a->n * 4);
  CHECK(back != NULL);
  CHECK_OK(read_sync(a->ctx, a->x, back, a->n));
  CHECK_EQ(memcmp(back, a->data, a->n * 4), 0);
  int rc = read_sync(a->ctx, a->y, back, a->n);
  printf("# the bystander's device-only buffer after the fault: %s\n", accel_err_name(rc));
  if (rc == 0)
    CHECK_EQ(memcmp(back, a->data, a->n * 4), 0);
  else
    CHECK_ERR(rc, ACCEL_EDATALOST);
  accel_future *f = NULL;
  CHECK_OK(accel_copy(a->ctx, dev, a->y, 0, a->x, 0, a->n, &f));
  CHECK_OK(outcome(f));
  memset(back, 0, a->n * 4);
  CHECK_OK(read_sync(a->ctx, a->y, back, a->n));
  CHECK_EQ(memcmp(back, a->data, a->n * 4), 0);
  free(back);
}

static void bystander_end(bystander *a) {
  accel_close(a->ctx);
  free(a->data);
}

/* ---- the tests ---- */

/* Runs k on a 64-byte buffer of its own; returns when the fault is reported: by the launch,
 * or else by the next op on the device. */
static uint64_t fault_by(accel_ctx *ctx, accel_device dev, const kernel_src *k) {
  accel_kernel kernel = load_kernel(ctx, dev, k);
  accel_buffer b = new_u32(ctx, 16); /* 64 bytes */
  int rc = outcome(launch_one(ctx, dev, kernel, b, ACCEL_ACCESS_WRITE, 16, 0));
  printf("# the faulting launch: %s\n", accel_err_name(rc));
  if (rc == ACCEL_ECLOSED) /* the connection is gone: acceld too, if the kernel ran in it */
    check_daemon_survives(running, 1000);
  if (rc == 0) { /* its completion came first: the loss must show on the next op */
    accel_future *f = NULL;
    CHECK_OK(accel_fill_u32(ctx, dev, b, 0, &f));
    rc = outcome(f);
    printf("# the op after it: %s\n", accel_err_name(rc));
  }
  CHECK_ERR(rc, ACCEL_EDEVLOST);
  return test_now_ms();
}

/* A fault by k costs the device that w wants one restart on a fresh worker: served again
 * within 1 s, acceld and a bystander's host data untouched. Skipped where there is none. */
static void check_fault_costs_only_its_device(const device_want *w, const kernel_src *k) {
  td_daemon d;
  accel_device dev;
  if (!start(&d, w->workers, w, &dev))
    TEST_SKIP(w->none);
  bystander a;
  bystander_start(&a, &d, dev);
  accel_ctx *b = connect_to(&d);
  pid_t before[MAX_WORKERS];
  int n = workers_before(&d, before);
  uint64_t fault = fault_by(b, dev, k);
  CHECK_LT(served_again_ms(b, dev, fault), 1000);
  check_daemon_alive(&d);
  worker_gone_ms(&d, before, n, fault, 2000); /* the crashed one */
  check_restarted_once(b, dev);
  bystander_check(&a, dev);
  bystander_end(&a);
  accel_close(b);
  check_daemon_alive(&d);
  stop(&d);
}

/* Launches the spinning kernel on dev with a 500 ms deadline: when it failed (checked). */
static uint64_t spin_past_deadline(accel_ctx *ctx, accel_device dev) {
  accel_kernel kernel = load_kernel(ctx, dev, &spin);
  accel_buffer p = new_u32(ctx, 1);
  accel_future *f = NULL;
  CHECK_OK(accel_fill_u32(ctx, dev, p, 0, &f));
  CHECK_OK(outcome(f));
  uint64_t t0 = test_now_ms();
  int rc = outcome(launch_one(ctx, dev, kernel, p, ACCEL_ACCESS_READ, 1, 500));
  uint64_t error = test_now_ms();
  printf("# the spinning launch failed with %s after %llu ms (deadline 500 ms)\n",
         accel_err_name(rc), (unsigned long long)(error - t0));
  CHECK(rc == ACCEL_ETIMEDOUT || rc == ACCEL_EDEVLOST);
  CHECK_GE(error - t0, 490);
  CHECK_LT(error - t0, 5000);
  return error;
}

/* A kernel that never ends, on the device that w wants, fails at its deadline; its worker is
 * gone within 2 s, the device serves again within 1 s and nothing keeps spinning a core. */
static void check_runaway_stopped(const device_want *w) {
  td_daemon d;
  accel_device dev;
  if (!start(&d, w->workers, w, &dev))
    TEST_SKIP(w->none);
  accel_ctx *ctx = connect_to(&d);
  pid_t before[MAX_WORKERS];
  int n = workers_before(&d, before);
  uint64_t error = spin_past_deadline(ctx, dev);
  CHECK_LT(served_again_ms(ctx, dev, error), 1000);
  worker_gone_ms(&d, before, n, error, 2000);
  /* The fresh worker builds its own kernels first (PoCL: most of a second of CPU on 16
   * cores); a kernel left spinning would still be at it two seconds later. */
  test_sleep_ms(2000);
  long busiest = busiest_over_a_second(d.pid);
  printf("# afterwards the busiest of acceld and its workers used %ld ms of CPU in 1 s\n", busiest);
  CHECK_LT(busiest, 500);
  check_restarted_once(ctx, dev);
  check_daemon_alive(&d);
  accel_close(ctx);
  stop(&d);
}

TEST(an_out_of_bounds_kernel_costs_only_its_device) {
  check_fault_costs_only_its_device(&pocl, &out_of_bounds);
}

TEST(a_runaway_kernel_is_stopped_at_its_deadline) {
  check_runaway_stopped(&pocl);
}

TEST(a_cuda_kernel_writing_an_illegal_address_costs_only_its_gpu) {
  check_fault_costs_only_its_device(&gpu, &wild_write);
}

TEST(a_cuda_kernel_that_traps_costs_only_its_gpu) {
  check_fault_costs_only_its_device(&gpu, &trap);
}

TEST(a_runaway_cuda_kernel_is_stopped_at_its_deadline) {
  check_runaway_stopped(&gpu);
}

TEST(with_workers_off_devices_still_serve) {
  td_daemon d;
  accel_device dev;
  if (!start(&d, "", &pocl, &dev))
    TEST_SKIP(pocl.none);
  pid_t pids[MAX_WORKERS];
  CHECK_EQ(workers_of(d.pid, pids, MAX_WORKERS), 0); /* every device in acceld itself */
  accel_ctx *ctx = connect_to(&d);
  CHECK_OK(small_op(ctx, dev));
  accel_kernel k = load_kernel(ctx, dev, &inc);
  uint32_t v[64], back[64];
  for (uint32_t i = 0; i < 64; i++)
    v[i] = i * 3u;
  accel_buffer b = new_u32(ctx, 64);
  write_sync(ctx, b, v, 64);
  accel_launch_dims dims = {.grid = {1, 1, 1}, .block = {64, 1, 1}};
  accel_arg arg = accel_arg_buffer(b, ACCEL_ACCESS_READ_WRITE, 0, 64);
  accel_future *f = NULL;
  CHECK_OK(accel_launch(ctx, dev, k, &dims, &arg, 1, &f));
  CHECK_OK(outcome(f));
  CHECK_OK(read_sync(ctx, b, back, 64));
  for (uint32_t i = 0; i < 64; i++)
    CHECK_EQ(back[i], i * 3u + 1);
  accel_close(ctx);
  stop(&d);
}

static const test_case tests[] = {
    TEST_CASE(an_out_of_bounds_kernel_costs_only_its_device),
    TEST_CASE(a_runaway_kernel_is_stopped_at_its_deadline),
    TEST_CASE(a_cuda_kernel_writing_an_illegal_address_costs_only_its_gpu),
    TEST_CASE(a_cuda_kernel_that_traps_costs_only_its_gpu),
    TEST_CASE(a_runaway_cuda_kernel_is_stopped_at_its_deadline),
    TEST_CASE(with_workers_off_devices_still_serve),
};

TEST_MAIN(tests)
