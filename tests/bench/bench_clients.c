/* accel — many client processes sharing a device (docs/PERFORMANCE.md, "Many clients"): the
 * table of the issue on acceld's scale, in one run. For each N (default 1, 8, 32) N processes
 * start at once and, for --seconds, each does:
 *   tiny       a fill of its own 1-element buffer and a wait on its future, in a loop;
 *   pipelined  fills issued back to back, 256 per accel_finish;
 * through one acceld (a private ipc:// socket; --workers is passed on) and embedded (one
 * context per process). With --device cuda, built with the CUDA backend, also the raw floor:
 *   raw        cuMemsetD32Async of 1 element and cuStreamSynchronize, a context per process,
 *              time-sliced by the driver, and the same under MPS (--mps: the bench starts and
 *              stops nvidia-cuda-mps-control with directories of its own).
 * Rows: aggregate ops/s of all clients, and the median of the clients' median latencies (tiny
 * rows). Ratios printed: acceld ÷ MPS per N (GPU), and each mode's N ÷ 1 scaling.
 * --acceld-only: the rows through acceld alone (no embedded or raw rows): quicker runs.
 * Under each row through acceld: how busy acceld's busiest loop (--shards N: one per shard) and
 * the busiest of the worker's link threads were while
 * the clients ran (acceld's /metrics: accel_loop_busy_seconds_total and
 * accel_worker_link_busy_seconds_total): each op crosses both, one at a time, and one near
 * 100 % is what limits the row; and the link's completions per event recorded for them (the
 * worker's grouping: accel_worker_completions_total ÷ accel_worker_completion_events_total).
 * --fairness F: instead, one light client (tiny + wait) alone, then the same client while F
 * others flood the same device through the same acceld (pipelined); its p50 and p99 latency in
 * both, and the p99 ratio (target: at most 5); --rounds R (1..16, default 1) measures R such
 * pairs in turn and prints their median too.
 *
 * Usage: bench-clients [--device cpu|cuda] [--clients 1,8,32] [--seconds S] [--acceld PATH]
 *                      [--workers LIST] [--mps] [--quick] [--fairness F] [--rounds R]
 *                      [--acceld-only] [--io-threads N|auto] [--shards N]
 * Exit status 0 unless a benchmark itself broke (a failed call, a client that died). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#ifdef BENCH_RAW_CUDA
#include "backends/cuda/driver.h"
#endif

#define MAX_CLIENTS 64
#define MAX_SAMPLES (1 << 18)

typedef struct opts {
  const char *device; /* backend name of the device: "cpu" or "cuda" */
  int clients[8], nclients;
  double seconds;
  const char *acceld, *workers;
  const char *io_threads; /* acceld's [daemon] io_threads, or NULL: its default */
  const char *shards;     /* acceld's [daemon] shards, or NULL: its default */
  int mps;
  int fairness;     /* flooders beside the light client; 0: the scaling table */
  int rounds;       /* fairness pairs measured in turn (1..16) */
  bool acceld_only; /* no embedded or raw rows */
} opts;

typedef enum mode { TINY = 0, PIPELINED, RAW } mode;

/* What one client sends back. */
typedef struct result {
  int ok;
  int mode;
  uint64_t ops;
  double median_us, p99_us;
} result;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median_of(double *v, size_t n) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* v sorted (median_of sorts it). */
static double p99_of(const double *v, size_t n) {
  return n == 0 ? 0 : v[(size_t)((double)(n - 1) * 0.99)];
}

/* ---- one client process ---- */

static int find_device(accel_ctx *ctx, const char *backend) {
  for (int d = 0; d < accel_device_count(ctx); d++) {
    struct accel_device_info info;
    if (accel_device_info(ctx, d, &info) == 0 && strcmp(info.backend, backend) == 0)
      return d;
  }
  return -1;
}

/* Waits for the parent's go (one byte on `go`), then runs `m` until `seconds` have passed. */
static result run_api(const char *url, mode m, const opts *o, int ready, int go) {
  result r = {.mode = m};
  accel_ctx *ctx;
  if (accel_open(&ctx, url) != 0)
    return r;
  int dev = find_device(ctx, o->device);
  accel_buffer b;
  if (dev < 0 || accel_buffer_create(ctx, ACCEL_U32, 1, &b) != 0)
    return r;
  for (int i = 0; i < 50; i++) /* warm-up: placement, kernels built */
    (void)accel_fill_u32(ctx, dev, b, (uint32_t)i, NULL);
  (void)accel_finish(ctx, -1);
  static double lat[MAX_SAMPLES];
  size_t n = 0;
  char c = 'r';
  if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1)
    return r;
  double t0 = now_s(), end = t0 + o->seconds;
  int rc = 0;
  while (rc == 0 && now_s() < end) {
    if (m == PIPELINED) {
      for (int i = 0; rc == 0 && i < 256; i++)
        rc = accel_fill_u32(ctx, dev, b, (uint32_t)i, NULL);
      rc = rc ? rc : accel_finish(ctx, -1);
      r.ops += 256;
      continue;
    }
    double s = now_s();
    accel_future *f;
    rc = accel_fill_u32(ctx, dev, b, (uint32_t)r.ops, &f);
    if (rc == 0) {
      rc = accel_future_wait(f, -1);
      accel_future_release(f);
    }
    if (n < MAX_SAMPLES)
      lat[n++] = (now_s() - s) * 1e6;
    r.ops++;
  }
  r.ok = rc == 0;
  r.median_us = median_of(lat, n);
  r.p99_us = p99_of(lat, n);
  accel_buffer_destroy(ctx, b);
  accel_close(ctx);
  return r;
}

#ifdef BENCH_RAW_CUDA
#define CU_OK(x) ((x) == CUDA_SUCCESS)

/* The raw floor: a context of its own, a 1-element memset and a stream sync, in a loop. */
static result run_raw(const opts *o, int ready, int go) {
  result r = {0};
  char why[128];
  CUdevice d;
  CUcontext ctx;
  CUstream s;
  CUdeviceptr p;
  if (be_cuda_driver_load(why, sizeof why) != 0 || !CU_OK(be_cu.cuDeviceGet(&d, 0)) ||
      !CU_OK(be_cu.cuCtxCreate(&ctx, NULL, 0, d)) || !CU_OK(be_cu.cuStreamCreate(&s, 0)) ||
      !CU_OK(be_cu.cuMemAlloc(&p, 4)))
    return r;
  static double lat[MAX_SAMPLES];
  size_t n = 0;
  char c = 'r';
  if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1)
    return r;
  double end = now_s() + o->seconds;
  bool ok = true;
  while (ok && now_s() < end) {
    double t = now_s();
    ok = CU_OK(be_cu.cuMemsetD32Async(p, (unsigned)r.ops, 1, s)) &&
         CU_OK(be_cu.cuStreamSynchronize(s));
    if (n < MAX_SAMPLES)
      lat[n++] = (now_s() - t) * 1e6;
    r.ops++;
  }
  r.ok = ok;
  r.median_us = median_of(lat, n);
  be_cu.cuMemFree(p);
  be_cu.cuCtxDestroy(ctx);
  return r;
}
#endif

static void client_main(const char *url, mode m, const opts *o, int ready, int go, int out) {
  result r = {0};
#ifdef BENCH_RAW_CUDA
  if (m == RAW)
    r = run_raw(o, ready, go);
  else
#endif
    r = run_api(url, m, o, ready, go);
  if (write(out, &r, sizeof r) != (ssize_t)sizeof r)
    _exit(2);
  _exit(r.ok ? 0 : 1);
}

/* ---- the parent ---- */

typedef struct row {
  double kops, median_us;
  bool ok;
  double loop_busy, link_busy; /* fractions of the run; < 0: not known */
  double per_event;            /* the busiest link's completions per event; < 0: not known */
} row;

/* ---- acceld's busy times, from its /metrics ---- */

static int metrics_port; /* acceld's metrics listener, on 127.0.0.1 */

/* A port nobody listens on now (the kernel's pick: acceld binds it right after). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                     getsockname(fd, (struct sockaddr *)&a, &len) == 0
                 ? ntohs(a.sin_port)
                 : 0;
  if (fd >= 0)
    close(fd);
  return port;
}

/* GET /metrics into buf; false if it did not come. */
static bool get_metrics(char *buf, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)metrics_port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1);
  size_t got = 0;
  while (ok && got < cap - 1) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t k = poll(&p, 1, 5000) == 1 ? recv(fd, buf + got, cap - 1 - got, 0) : -1;
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  if (fd >= 0)
    close(fd);
  buf[got] = '\0';
  return ok && got > 0;
}

enum { MAX_LINKS = 16, MAX_LOOPS = 16 };

typedef struct busy_read {
  double loop[MAX_LOOPS], at; /* seconds, per loop of acceld (a shard's each); at: when read */
  int nlinks;                 /* the worker's links: their labels and busy seconds */
  char label[MAX_LINKS][96];
  double link[MAX_LINKS];
  double done[MAX_LINKS], events[MAX_LINKS]; /* the link's completions and their events */
  bool ok;
} busy_read;

/* The value of `name` with the labels of busy series `label` (its name, then {...}) in m. */
static double link_counter(const char *m, const char *name, const char *label) {
  const char *labels = strchr(label, '{');
  char key[160];
  snprintf(key, sizeof key, "\n%s%s} ", name, labels ? labels : "");
  const char *v = strstr(m, key);
  return v ? strtod(v + strlen(key), NULL) : 0;
}

/* backend: the device's (its worker's links only). */
static busy_read read_busy(const char *backend) {
  static char m[1 << 17];
  busy_read b = {.at = now_s()};
  if (metrics_port == 0 || !get_metrics(m, sizeof m))
    return b;
  const char *s = NULL;
  for (int i = 0; i < MAX_LOOPS; i++) {
    char loop[64];
    snprintf(loop, sizeof loop, "accel_loop_busy_seconds_total{loop=\"%d\"} ", i);
    s = strstr(m, loop);
    b.ok |= s != NULL;
    b.loop[i] = s ? strtod(s + strlen(loop), NULL) : 0;
  }
  char link[96];
  snprintf(link, sizeof link, "\naccel_worker_link_busy_seconds_total{backend=\"%s\"", backend);
  for (s = strstr(m, link); s != NULL && b.nlinks < MAX_LINKS; s = strstr(s + 1, link)) {
    const char *v = strstr(s, "} ");
    if (v == NULL || v - s >= (long)sizeof b.label[0])
      break;
    snprintf(b.label[b.nlinks], sizeof b.label[0], "%.*s", (int)(v - s), s);
    b.link[b.nlinks] = strtod(v + 2, NULL);
    b.done[b.nlinks] = link_counter(m, "accel_worker_completions_total", b.label[b.nlinks]);
    b.events[b.nlinks] = link_counter(m, "accel_worker_completion_events_total", b.label[b.nlinks]);
    b.nlinks++;
  }
  return b;
}

/* The fractions of [from, to] acceld's loop and the busiest of the worker's links (the same
 * labels, so the same process and link, in both reads) were busy. */
static void busy_between(const busy_read *from, const busy_read *to, row *w) {
  double t = to->at - from->at;
  bool ok = from->ok && to->ok && t > 0;
  w->loop_busy = -1; /* the busiest loop's */
  for (int i = 0; ok && i < MAX_LOOPS; i++)
    if ((to->loop[i] - from->loop[i]) / t > w->loop_busy)
      w->loop_busy = (to->loop[i] - from->loop[i]) / t;
  w->link_busy = w->per_event = -1;
  for (int i = 0; ok && i < to->nlinks; i++)
    for (int k = 0; k < from->nlinks; k++)
      if (strcmp(to->label[i], from->label[k]) == 0 &&
          (to->link[i] - from->link[k]) / t > w->link_busy) {
        w->link_busy = (to->link[i] - from->link[k]) / t;
        double events = to->events[i] - from->events[k];
        w->per_event = events > 0 ? (to->done[i] - from->done[k]) / events : -1;
      }
}

/* N clients at once, the first in mode m and the others in `others`; the row of their
 * aggregate, and the first client's own result in *first (if given). */
static row run_mixed(const char *url, mode m, mode others, int n, const opts *o, result *first);

static row run_clients(const char *url, mode m, int n, const opts *o) {
  return run_mixed(url, m, m, n, o, NULL);
}

static row run_mixed(const char *url, mode m, mode others, int n, const opts *o, result *first) {
  int ready[2], go[2], out[2];
  row w = {.loop_busy = -1, .link_busy = -1, .per_event = -1};
  bool through_acceld = url != NULL && strncmp(url, "embedded:", 9) != 0;
  static busy_read began, ended; /* large: not on the stack */
  if (pipe(ready) != 0 || pipe(go) != 0 || pipe(out) != 0)
    return w;
  pid_t pids[MAX_CLIENTS];
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(ready[0]), close(go[1]), close(out[0]);
      client_main(url, i == 0 ? m : others, o, ready[1], go[0], out[1]);
    }
  }
  close(ready[1]), close(go[0]), close(out[1]);
  char c;
  int up = 0;
  while (up < n && read(ready[0], &c, 1) == 1)
    up++;
  if (through_acceld)
    began = read_busy(o->device);
  for (int i = 0; i < n; i++) /* every client starts at once */
    (void)!write(go[1], "g", 1);
  double medians[MAX_CLIENTS];
  uint64_t ops = 0;
  int got = 0;
  result r;
  while (got < n && read(out[0], &r, sizeof r) == (ssize_t)sizeof r) {
    if (got == 0 && through_acceld) { /* the first client is done: the run is over */
      ended = read_busy(o->device);
      busy_between(&began, &ended, &w);
    }
    w.ok = got == 0 ? r.ok : w.ok && r.ok;
    if (first && (int)r.mode == (int)m && (m != others || got == 0))
      *first = r;
    ops += r.ops;
    medians[got++] = r.median_us;
  }
  for (int i = 0; i < n; i++)
    waitpid(pids[i], NULL, 0);
  close(ready[0]), close(go[1]), close(out[0]);
  w.ok = w.ok && up == n && got == n;
  w.kops = (double)ops / o->seconds / 1e3;
  w.median_us = median_of(medians, (size_t)got);
  return w;
}

static pid_t start_acceld(const opts *o, char *url, size_t len) {
  static char dir[] = "/tmp/accel-bench-clients-XXXXXX";
  if (mkdtemp(dir) == NULL)
    exit(1);
  snprintf(url, len, "ipc://%s/acceld.sock", dir);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char log[128];
    snprintf(log, sizeof log, "%s/acceld.log", dir);
    if (freopen(log, "w", stderr) == NULL)
      _exit(127);
    const char *argv[14] = {o->acceld, "--foreground", "--listen", url, "--log-level", "warn"};
    int a = 6;
    if (o->workers)
      argv[a++] = "--workers", argv[a++] = o->workers;
    char conf[128];
    snprintf(conf, sizeof conf, "%s/acceld.conf", dir);
    FILE *f = fopen(conf, "w");
    if (f) {
      fprintf(f, "[daemon]\n");
      if (o->io_threads)
        fprintf(f, "io_threads = %s\n", o->io_threads);
      if (o->shards)
        fprintf(f, "shards = %s\n", o->shards);
      if (metrics_port != 0)
        fprintf(f, "[metrics]\nlisten = http://127.0.0.1:%d\n", metrics_port);
      fclose(f);
      argv[a++] = "--config", argv[a++] = conf;
    }
    execv(o->acceld, (char *const *)argv);
    _exit(127);
  }
  /* Waits for the socket file; the parent never opens a context itself (it forks clients,
   * and a fork of a process with libaccel's threads could inherit a held lock). */
  char path[200];
  snprintf(path, sizeof path, "%s/acceld.sock", dir);
  for (int i = 0; i < 3000; i++) { /* 60 s: a cold host takes seconds to bring up CUDA */
    struct stat st;
    if (stat(path, &st) == 0) {
      nanosleep(&(struct timespec){0, 300000000}, NULL);
      return pid;
    }
    nanosleep(&(struct timespec){0, 20000000}, NULL);
  }
  fprintf(stderr, "bench-clients: acceld did not start (log in %s)\n", dir);
  exit(1);
}

static void print_row(const char *what, int n, row w, bool latency) {
  printf("| %3d | %-28s | %10.1f | ", n, what, w.kops);
  if (latency)
    printf("%10.1f |%s\n", w.median_us, w.ok ? "" : " (FAILED)");
  else
    printf("%10s |%s\n", "-", w.ok ? "" : " (FAILED)");
  if (w.loop_busy >= 0 && w.link_busy >= 0 && w.per_event > 0)
    printf("|     | busy meanwhile: acceld's loop %.0f %%, the worker's link thread %.0f %% "
           "(%.1f completions per event) |\n",
           100 * w.loop_busy, 100 * w.link_busy, w.per_event);
  else if (w.loop_busy >= 0 && w.link_busy >= 0)
    printf("|     | busy meanwhile: acceld's loop %.0f %%, the worker's link thread %.0f %% |\n",
           100 * w.loop_busy, 100 * w.link_busy);
  else if (w.loop_busy >= 0)
    printf("|     | busy meanwhile: acceld's loop %.0f %% |\n", 100 * w.loop_busy);
}

#ifdef BENCH_RAW_CUDA
/* nvidia-cuda-mps-control -d with directories of our own; false if it would not start. */
static bool mps(bool on) {
  static char dir[] = "/tmp/accel-bench-mps-XXXXXX";
  static bool made;
  if (!made && !(made = mkdtemp(dir) != NULL))
    return false;
  /* Set for each round (the clients it starts inherit them), unset after: the next rows'
   * clients must not look for the control daemon. */
  char p[128];
  snprintf(p, sizeof p, "%s/pipe", dir);
  setenv("CUDA_MPS_PIPE_DIRECTORY", p, 1);
  snprintf(p, sizeof p, "%s/log", dir);
  setenv("CUDA_MPS_LOG_DIRECTORY", p, 1);
  const char *cmd = on ? "mkdir -p \"$CUDA_MPS_PIPE_DIRECTORY\" \"$CUDA_MPS_LOG_DIRECTORY\" && "
                         "nvidia-cuda-mps-control -d"
                       : "echo quit | nvidia-cuda-mps-control";
  bool ok = system(cmd) == 0;
  if (!on) {
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    unsetenv("CUDA_MPS_LOG_DIRECTORY");
  }
  sleep(1);
  return ok;
}
#endif

static void parse_clients(opts *o, const char *list) {
  o->nclients = 0;
  for (const char *p = list; *p && o->nclients < 8;) {
    int v = atoi(p);
    if (v >= 1 && v <= MAX_CLIENTS)
      o->clients[o->nclients++] = v;
    p += strcspn(p, ",");
    p += *p == ',';
  }
}

static void parse(int argc, char **argv, opts *o) {
  *o = (opts){.device = "cpu", .seconds = 5, .acceld = getenv("ACCELD")};
  parse_clients(o, "1,8,32");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--device") && v)
      o->device = v, i++;
    else if (!strcmp(a, "--clients") && v)
      parse_clients(o, v), i++;
    else if (!strcmp(a, "--seconds") && v)
      o->seconds = atof(v), i++;
    else if (!strcmp(a, "--acceld") && v)
      o->acceld = v, i++;
    else if (!strcmp(a, "--workers") && v)
      o->workers = v, i++;
    else if (!strcmp(a, "--io-threads") && v)
      o->io_threads = v, i++;
    else if (!strcmp(a, "--shards") && v)
      o->shards = v, i++;
    else if (!strcmp(a, "--mps"))
      o->mps = 1;
    else if (!strcmp(a, "--fairness") && v)
      o->fairness = atoi(v), i++;
    else if (!strcmp(a, "--rounds") && v)
      o->rounds = atoi(v), i++;
    else if (!strcmp(a, "--acceld-only"))
      o->acceld_only = true;
    else if (!strcmp(a, "--quick"))
      o->seconds = 1, parse_clients(o, "1,4");
  }
  if (o->seconds <= 0 || o->nclients == 0 || o->acceld == NULL) {
    fprintf(stderr, "usage: bench-clients [--device cpu|cuda] [--clients 1,8,32] [--seconds S] "
                    "[--acceld PATH] [--workers LIST] [--io-threads N|auto] [--mps] [--quick] "
                    "[--fairness F] [--rounds R] [--acceld-only] (or ACCELD)\n");
    exit(2);
  }
}

/* The light client alone, then beside `o->fairness` flooders, `o->rounds` times in turn (the
 * ratio moves several-fold between runs of one build: one pair says little); each pair's
 * ratio, then their median. */
static bool fairness(const char *url, const opts *o) {
  printf("| round | clients | light client p50 us | light client p99 us | flood kops/s "
         "|\n|---|---|---|---|---|\n");
  double ratio[16];
  int rounds = o->rounds < 1 ? 1 : o->rounds > 16 ? 16 : o->rounds;
  bool ok = true;
  for (int r = 0; r < rounds; r++) {
    result alone = {0}, beside = {0};
    row a = run_mixed(url, TINY, TINY, 1, o, &alone);
    row b = run_mixed(url, TINY, PIPELINED, 1 + o->fairness, o, &beside);
    ok = ok && a.ok && b.ok;
    printf("| %d | light alone | %.1f | %.1f | - |\n", r + 1, alone.median_us, alone.p99_us);
    printf("| %d | light + %d flooding | %.1f | %.1f | %.1f |\n", r + 1, o->fairness,
           beside.median_us, beside.p99_us, b.kops - (double)beside.ops / o->seconds / 1e3);
    ratio[r] = alone.p99_us > 0 ? beside.p99_us / alone.p99_us : 0.0;
  }
  for (int r = 0; r < rounds; r++)
    printf("light client's p99 beside the flood ÷ alone, round %d: %.2f\n", r + 1, ratio[r]);
  double sorted[16];
  memcpy(sorted, ratio, sizeof ratio);
  qsort(sorted, (size_t)rounds, sizeof *sorted, cmp_double);
  double median = rounds % 2 ? sorted[rounds / 2]
                             : (sorted[rounds / 2 - 1] + sorted[rounds / 2]) / 2;
  printf("median of %d: %.2f (target <= 5)\n", rounds, median);
  return ok;
}

int main(int argc, char **argv) {
  opts o;
  parse(argc, argv, &o);
  setvbuf(stdout, NULL, _IOLBF, 0); /* each row as it is measured, even into a pipe */
  char url[160];
  metrics_port = free_port();
  pid_t daemon = start_acceld(&o, url, sizeof url);
  if (o.fairness > 0) {
    printf("# bench-clients --fairness %d: device %s, %.1f s per row\n", o.fairness, o.device,
           o.seconds);
    bool ok = fairness(url, &o);
    kill(daemon, SIGTERM);
    waitpid(daemon, NULL, 0);
    return ok ? 0 : 1;
  }
  printf("# bench-clients: device %s, %.1f s per row, acceld workers %s\n", o.device, o.seconds,
         o.workers ? o.workers : "(default)");
  printf("| N | mode | aggregate kops/s | client median us |\n|---|---|---|---|\n");
  bool ok = true;
  row first[4] = {{0}};
  for (int i = 0; i < o.nclients; i++) {
    int n = o.clients[i];
    bool emb = !o.acceld_only;
    row none = {.ok = true, .loop_busy = -1, .link_busy = -1, .per_event = -1};
    row rows[4] = {run_clients(url, TINY, n, &o),
                   emb ? run_clients("embedded:", TINY, n, &o) : none,
                   run_clients(url, PIPELINED, n, &o),
                   emb ? run_clients("embedded:", PIPELINED, n, &o) : none};
    static const char *const names[4] = {"through acceld, tiny + wait", "embedded, tiny + wait",
                                         "through acceld, pipelined", "embedded, pipelined"};
    for (int k = 0; k < 4; k++) {
      if (!emb && (k == 1 || k == 3))
        continue;
      print_row(names[k], n, rows[k], k < 2);
      ok = ok && rows[k].ok;
      if (i == 0)
        first[k] = rows[k];
      else if (first[k].kops > 0)
        printf("|     | %s: %d clients %.2f× the aggregate of %d |\n", names[k], n,
               rows[k].kops / first[k].kops, o.clients[0]);
    }
#ifdef BENCH_RAW_CUDA
    if (emb && strcmp(o.device, "cuda") == 0) {
      row raw = run_clients(NULL, RAW, n, &o);
      print_row("raw CUDA, time-sliced", n, raw, true);
      if (o.mps && mps(true)) {
        row m = run_clients(NULL, RAW, n, &o);
        mps(false);
        print_row("raw CUDA under MPS", n, m, true);
        printf("|     | acceld ÷ MPS: %.2f× ops/s, %.2f× latency |\n", rows[0].kops / m.kops,
               rows[0].median_us / m.median_us);
      }
    }
#endif
  }
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
  return ok ? 0 : 1;
}
