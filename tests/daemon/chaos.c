/* Chaos, bounded: one acceld (three CPU devices, fault injection on, restarts allowed often
 * enough that no device is quarantined) serves CHAOS_CLIENTS client processes doing random ops
 * through libaccel on ipc:// (chaos_client.c checks every value), while this process injects
 * device faults at random times, SIGKILLs clients at random (starting new ones) and asks
 * accelctl for its reports now and then.
 *
 * Afterwards: every client stopped cleanly and none saw a wrong value, an unexpected error
 * code or a hang; the daemon is alive, its sessions, buffers, ops in flight, host and device
 * memory and descriptors are back to their baseline; each injected fault restarted its device
 * once and none is quarantined; a fresh client is served right; SIGTERM ends the daemon
 * cleanly. One summary line says what happened.
 *
 * ACCEL_CHAOS_SECONDS sets how long the chaos lasts (default 40, scaled by ACCEL_TEST_SCALE);
 * ACCEL_TEST_SEED replays the choices of this process and of its clients (not their timing). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "accel/accel.h"
#include "chaos.h"
#include "util.h"

extern char **environ;

enum { CHAOS_CLIENTS = 4, CHAOS_DEVICES = 3 };

typedef struct chaos {
  td_daemon d;
  accel_ctx *ctl; /* this process's own connection: it injects the faults */
  uint64_t rng, seed;
  int rfd, wfd; /* the report pipe */
  pid_t kids[CHAOS_CLIENTS];
  uint64_t started, killed, faults, refused, looks;
  chaos_report total;
} chaos;

/* ---- the daemon's figures ---- */

static const char *status_json(td_daemon *d) {
  static char out[1 << 16];
  int rc = td_ctl(out, sizeof out, "--url", d->url, "--timeout", "30000", "status", "--json", NULL);
  if (rc != 0)
    TEST_FAIL("accelctl status exited with %d: %s\nthe daemon's log:\n%s", rc, out, td_log(d));
  return out;
}

/* The sum of every `"key":N` in the text, and how many there were. */
static long sum_field(const char *json, const char *key, int *count) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  long sum = 0;
  *count = 0;
  for (const char *p = json; (p = strstr(p, pat)) != NULL; p += strlen(pat)) {
    sum += strtol(p + strlen(pat), NULL, 10);
    (*count)++;
  }
  return sum;
}

static int count_of(const char *json, const char *text) {
  int n = 0;
  for (const char *p = json; (p = strstr(p, text)) != NULL; p += strlen(text))
    n++;
  return n;
}

static long devices_mem(td_daemon *d) {
  int n;
  long sum = sum_field(status_json(d), "mem_used", &n);
  CHECK_EQ(n, CHAOS_DEVICES);
  return sum;
}

/* Waits (20 s at most) until `key` is at most `want`: sessions and buffers end
 * asynchronously. */
static void wait_field(td_daemon *d, const char *key, long want) {
  long v = -1;
  for (uint64_t t0 = test_now_ms(); (v = td_status_field(d, key)) > want; test_sleep_ms(50))
    if (test_now_ms() - t0 > 20000)
      TEST_FAIL("%s stays at %ld (want <= %ld)\nthe daemon's log:\n%s", key, v, want, td_log(d));
}

static void wait_fds(td_daemon *d, int want) {
  int n = 0;
  for (uint64_t t0 = test_now_ms(); (n = td_open_fds(d->pid)) > want; test_sleep_ms(50))
    if (test_now_ms() - t0 > 10000)
      TEST_FAIL("the daemon holds %d descriptors (baseline %d)", n, want);
}

typedef struct baseline {
  int fds;
  long host_mem, dev_mem;
} baseline;

/* Once no client is connected (accelctl asking is the one connection). */
static baseline measure(td_daemon *d) {
  wait_field(d, "sessions", 0);
  wait_field(d, "connections", 1);
  test_sleep_ms(100);
  return (baseline){td_open_fds(d->pid), td_status_field(d, "host_mem_used"), devices_mem(d)};
}

/* ---- a client of this process, checked here ---- */

/* A fresh connection computes on every device (and on any) and gets the right values back. */
static void served(td_daemon *d) {
  enum { N = 1000 };
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, d->url));
  CHECK_EQ(accel_device_count(ctx), CHAOS_DEVICES);
  static float x[N], y[N];
  for (int i = 0; i < N; i++)
    x[i] = (float)(i - N / 2) / 100.0f;
  accel_buffer bx, by;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, N, &bx));
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, N, &by));
  accel_future *f = NULL;
  CHECK_OK(accel_write(ctx, bx, 0, x, N, NULL));
  for (accel_device dev = ACCEL_DEVICE_ANY; dev < CHAOS_DEVICES; dev++) {
    memset(y, 0, sizeof y);
    CHECK_OK(accel_sigmoid(ctx, dev, by, bx, NULL));
    CHECK_OK(accel_read(ctx, by, 0, y, N, &f));
    CHECK_OK(accel_future_wait(f, 30000));
    accel_future_release(f);
    for (int i = 0; i < N; i++)
      CHECK(fabs(y[i] - 1 / (1 + exp(-(double)x[i]))) <= 1e-6);
  }
  CHECK_OK(accel_finish(ctx, 30000));
  accel_close(ctx);
}

/* ---- client processes ---- */

/* A fresh exec of this executable (libaccel's threads do not survive a fork): between fork and
 * exec the child only calls what is async-signal-safe, so everything is prepared here. */
static void spawn(chaos *ch, int i) {
  static char url[160], seed[64], fd[32];
  snprintf(url, sizeof url, "%s=%s", CHAOS_ENV_URL, ch->d.url);
  snprintf(seed, sizeof seed, "%s=%llu", CHAOS_ENV_SEED, (unsigned long long)chaos_rnd(&ch->rng));
  snprintf(fd, sizeof fd, "%s=%d", CHAOS_ENV_FD, ch->wfd);
  size_t n = 0;
  while (environ[n])
    n++;
  char **envp = calloc(n + 4, sizeof *envp);
  CHECK(envp != NULL);
  memcpy(envp, environ, n * sizeof *envp);
  envp[n] = url;
  envp[n + 1] = seed;
  envp[n + 2] = fd;
  char *argv[] = {"chaos-client", NULL};
  /* The child starts with SIGTERM blocked (the mask survives exec) and unblocks it once its
   * handler is in place: a SIGTERM sent while it starts waits for the handler rather than
   * killing it. */
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  CHECK_EQ(sigprocmask(SIG_BLOCK, &term, &old), 0);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execve("/proc/self/exe", argv, envp);
    _exit(127);
  }
  CHECK_EQ(sigprocmask(SIG_SETMASK, &old, NULL), 0);
  free(envp);
  ch->kids[i] = pid;
  ch->started++;
}

static void add(chaos_report *t, const chaos_report *r) {
  t->ops += r->ops;
  t->checked += r->checked;
  t->devlost += r->devlost;
  t->datalost += r->datalost;
  t->closed += r->closed;
}

/* Reads every report waiting in the pipe; a failed client fails the test (it said why on
 * stderr). */
static void drain(chaos *ch) {
  chaos_report r;
  for (ssize_t n; (n = read(ch->rfd, &r, sizeof r)) == (ssize_t)sizeof r;) {
    if (r.kind == CHAOS_FAILED)
      TEST_FAIL("client %d failed (its message is above); ACCEL_TEST_SEED=%llu", (int)r.pid,
                (unsigned long long)ch->seed);
    add(&ch->total, &r);
  }
}

static void check_daemon_alive(chaos *ch) {
  int status;
  if (waitpid(ch->d.pid, &status, WNOHANG) == ch->d.pid) {
    ch->d.pid = 0;
    TEST_FAIL("acceld died (status 0x%x) under chaos; ACCEL_TEST_SEED=%llu\nits log:\n%s", status,
              (unsigned long long)ch->seed, td_log(&ch->d));
  }
}

/* A client that exited by itself while it should be running failed. */
static void check_kids_running(chaos *ch) {
  for (int i = 0; i < CHAOS_CLIENTS; i++) {
    int status;
    if (waitpid(ch->kids[i], &status, WNOHANG) == ch->kids[i]) {
      drain(ch);
      TEST_FAIL("client %d exited by itself (status 0x%x); ACCEL_TEST_SEED=%llu", (int)ch->kids[i],
                status, (unsigned long long)ch->seed);
    }
  }
}

static void kill_one(chaos *ch) {
  int i = (int)chaos_range(&ch->rng, 0, CHAOS_CLIENTS - 1), status;
  CHECK_EQ(kill(ch->kids[i], SIGKILL), 0);
  CHECK_EQ(waitpid(ch->kids[i], &status, 0), ch->kids[i]);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
    drain(ch);
    TEST_FAIL("client %d ended with status 0x%x before it was killed", (int)ch->kids[i], status);
  }
  ch->killed++;
  spawn(ch, i);
}

/* A fault on a random device. The daemon may refuse one for a device that is restarting
 * still; those are counted apart. */
static void inject(chaos *ch) {
  accel_device dev = (accel_device)chaos_range(&ch->rng, 0, CHAOS_DEVICES - 1);
  int rc = accel_inject_fault(ch->ctl, dev);
  if (rc == 0)
    ch->faults++;
  else if (rc == ACCEL_EDEVLOST || rc == ACCEL_EBUSY)
    ch->refused++;
  else
    TEST_FAIL("accel_inject_fault(%d): %s", (int)dev, accel_err_name(rc));
}

/* What an operator looks at while it happens: the reports walk sessions, buffers and devices
 * as they change. */
static void look(chaos *ch) {
  static const char *const commands[] = {"status", "clients", "tree", "devices"};
  static char out[1 << 16];
  const char *cmd = commands[chaos_range(&ch->rng, 0, 3)];
  int rc = td_ctl(out, sizeof out, "--url", ch->d.url, "--timeout", "30000", "--json", cmd, NULL);
  if (rc != 0)
    TEST_FAIL("accelctl %s exited with %d under chaos: %s", cmd, rc, out);
  ch->looks++;
}

/* SIGTERM: each client finishes its step, closes its context, reports and exits 0. */
static void stop_all(chaos *ch) {
  for (int i = 0; i < CHAOS_CLIENTS; i++)
    CHECK_EQ(kill(ch->kids[i], SIGTERM), 0);
  for (int i = 0; i < CHAOS_CLIENTS; i++) {
    int status;
    for (uint64_t t0 = test_now_ms(); waitpid(ch->kids[i], &status, WNOHANG) != ch->kids[i];
         test_sleep_ms(10)) {
      drain(ch);
      if (test_now_ms() - t0 > 90000)
        TEST_FAIL("client %d did not stop within 90 s of SIGTERM", (int)ch->kids[i]);
    }
    drain(ch);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      TEST_FAIL("client %d ended with status 0x%x after SIGTERM", (int)ch->kids[i], status);
  }
  drain(ch);
}

static uint64_t chaos_ms(void) {
  const char *s = getenv("ACCEL_CHAOS_SECONDS");
  double secs = s != NULL ? strtod(s, NULL) : (double)test_scaled(40, 5);
  return (uint64_t)((secs > 0 ? secs : 40) * 1000);
}

static uint64_t chaos_seed(void) {
  const char *s = getenv("ACCEL_TEST_SEED");
  uint64_t fresh = (uint64_t)time(NULL) * 1000003u ^ test_now_ns() ^ (uint64_t)getpid() << 40;
  return s != NULL ? strtoull(s, NULL, 0) : fresh;
}

/* Faults every 0.1-1.2 s, a kill every 0.5-3 s, an accelctl report every 0.2-2 s, reports
 * drained every 10 ms. */
static void run(chaos *ch, uint64_t ms) {
  uint64_t now = test_now_ms(), end = now + ms;
  uint64_t next_fault = now + chaos_range(&ch->rng, 100, 1200);
  uint64_t next_kill = now + chaos_range(&ch->rng, 500, 3000);
  uint64_t next_look = now + chaos_range(&ch->rng, 200, 2000);
  for (; now < end; now = test_now_ms()) {
    drain(ch);
    check_daemon_alive(ch);
    check_kids_running(ch);
    if (now >= next_fault) {
      inject(ch);
      next_fault = now + chaos_range(&ch->rng, 100, 1200);
    }
    if (now >= next_kill) {
      kill_one(ch);
      next_kill = now + chaos_range(&ch->rng, 500, 3000);
    }
    if (now >= next_look) {
      look(ch);
      next_look = now + chaos_range(&ch->rng, 200, 2000);
    }
    test_sleep_ms(10);
  }
}

/* Every device serving again (restarts finish asynchronously), none quarantined, and as many
 * restarts as faults were injected. */
static void check_devices(chaos *ch) {
  const char *json = NULL;
  for (uint64_t t0 = test_now_ms();; test_sleep_ms(50)) {
    json = status_json(&ch->d);
    if (count_of(json, "\"state\":\"restarting\"") == 0)
      break;
    if (test_now_ms() - t0 > 10000)
      TEST_FAIL("a device stays restarting:\n%s", json);
  }
  CHECK_EQ(count_of(json, "\"state\":\"quarantined\""), 0);
  int n;
  CHECK_EQ(sum_field(json, "restarts", &n), (long)ch->faults);
}

static void check_baseline(chaos *ch, const baseline *b) {
  td_daemon *d = &ch->d;
  wait_field(d, "sessions", 0);
  wait_field(d, "buffers", 0);
  wait_field(d, "connections", 1); /* accelctl asking */
  CHECK_EQ(td_status_field(d, "ops_in_flight"), 0);
  CHECK_EQ(td_status_field(d, "host_mem_used"), b->host_mem);
  CHECK_EQ(devices_mem(d), b->dev_mem);
  int n; /* every task counted for placement has ended: no device looks busy for good */
  CHECK_EQ(sum_field(status_json(d), "tasks_queued", &n), 0);
  CHECK_EQ(n, CHAOS_DEVICES);
  wait_fds(d, b->fds);
}

static void start(chaos *ch) {
  memset(ch, 0, sizeof *ch);
  ch->seed = ch->rng = chaos_seed();
  printf("# seed %llu (rerun with ACCEL_TEST_SEED=%llu)\n", (unsigned long long)ch->seed,
         (unsigned long long)ch->seed);
  fflush(stdout);
  td_prepare(&ch->d);
  td_write_config(&ch->d, "[daemon]\nfault_injection = true\n"
                          "[devices]\ncpu_devices = 3\nmax_restarts = 1000\n");
  td_start(&ch->d, "--backends", "cpu", NULL);
  int fds[2];
  CHECK_EQ(pipe2(fds, O_CLOEXEC), 0);
  ch->rfd = fds[0];
  ch->wfd = fds[1];
  CHECK_EQ(fcntl(ch->rfd, F_SETFL, O_NONBLOCK), 0);
  CHECK_EQ(fcntl(ch->wfd, F_SETFD, 0), 0); /* the clients inherit the write end */
}

static void summary(chaos *ch, uint64_t ms) {
  const chaos_report *t = &ch->total;
  printf("# chaos: %.1f s, %llu ops (%llu checked), %llu device lost, %llu data lost, "
         "%llu closed; %llu faults injected (%llu refused), %llu clients killed, %llu started, "
         "%llu accelctl reports\n",
         (double)ms / 1000, (unsigned long long)t->ops, (unsigned long long)t->checked,
         (unsigned long long)t->devlost, (unsigned long long)t->datalost,
         (unsigned long long)t->closed, (unsigned long long)ch->faults,
         (unsigned long long)ch->refused, (unsigned long long)ch->killed,
         (unsigned long long)ch->started, (unsigned long long)ch->looks);
  fflush(stdout);
}

TEST(chaos_faults_and_kills) {
  static chaos ch;
  start(&ch);
  served(&ch.d); /* anything made on first use is made before the baseline */
  baseline b = measure(&ch.d);
  CHECK_OK(accel_open(&ch.ctl, ch.d.url));
  for (int i = 0; i < CHAOS_CLIENTS; i++)
    spawn(&ch, i);
  uint64_t ms = chaos_ms(), t0 = test_now_ms();
  run(&ch, ms);
  stop_all(&ch);
  accel_close(ch.ctl);
  check_daemon_alive(&ch);
  summary(&ch, test_now_ms() - t0);
  CHECK_GT(ch.total.checked, 0);
  check_devices(&ch);
  check_baseline(&ch, &b);
  served(&ch.d);
  check_baseline(&ch, &b);
  CHECK_EQ(td_stop(&ch.d), 0);
  close(ch.rfd);
  close(ch.wfd);
  td_cleanup(&ch.d);
}

static const test_case tests[] = {
    TEST_CASE(chaos_faults_and_kills),
};

TEST_MAIN(tests)
