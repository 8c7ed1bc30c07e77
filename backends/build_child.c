/* The daemon's side of a compile in the helper process (build_child.h): spawn, feed, wait
 * with a deadline, read the answer, reap. */
#include "backends/build_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/error.h"
#include "runtime/alloc.h"

#define STDERR_KEEP 4096 /* the helper's last words kept for the log when it dies */

extern char **environ;

void be_child_slot_init(be_child_slot *s) {
  pthread_mutex_init(&s->mu, NULL);
  s->pid = 0;
  s->cancelled = false;
}

void be_child_slot_fini(be_child_slot *s) {
  pthread_mutex_destroy(&s->mu);
}

/* The pid stays valid until the waiter has seen the helper end (waitid with WNOWAIT) and
 * cleared it under the lock: a kill never meets a reused pid. */
void be_child_slot_cancel(be_child_slot *s) {
  pthread_mutex_lock(&s->mu);
  s->cancelled = true;
  if (s->pid > 0)
    kill(s->pid, SIGKILL);
  pthread_mutex_unlock(&s->mu);
}

/* ---- the log ---- */

static void log_add(char **log, const char *text, size_t n) {
  size_t old = *log ? strlen(*log) : 0;
  if (n == 0)
    return;
  bool sep = old > 0 && (*log)[old - 1] != '\n';
  char *p = rt_realloc(*log, old + sep + n + 1);
  if (p == NULL)
    return; /* the log is information: the status says what happened */
  if (sep)
    p[old++] = '\n';
  memcpy(p + old, text, n);
  p[old + n] = '\0';
  *log = p;
}

static void log_line(char **log, const char *text) {
  log_add(log, text, strlen(text));
}

/* ---- the request, in a memfd that becomes the helper's stdin ---- */

static int request_fd(const char *target, uint32_t source, const void *code, size_t len,
                      const char *options) {
  be_child_req h = {.source = source,
                    .target_len = (uint32_t)strlen(target),
                    .options_len = options ? (uint32_t)strlen(options) : UINT32_MAX,
                    .code_len = len};
  memcpy(h.magic, BE_CHILD_MAGIC, sizeof h.magic);
  int fd = memfd_create("accel-build-request", MFD_CLOEXEC);
  if (fd < 0)
    return -1;
  bool ok = be_child_write_all(fd, &h, sizeof h) && be_child_write_all(fd, target, h.target_len) &&
            (options == NULL || be_child_write_all(fd, options, h.options_len)) &&
            be_child_write_all(fd, code, len) && lseek(fd, 0, SEEK_SET) == 0;
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- spawning ---- */

typedef struct child {
  pid_t pid;
  int out, err; /* the read ends of its stdout and stderr, -1 once at their end */
  int pidfd;    /* readable once it has exited; -1 once seen (or where the kernel has none) */
} child;

static int spawn_with(const be_child_limits *l, const char *backend, int in, int out[2], int err[2],
                      pid_t *pid) {
  char mem[24];
  snprintf(mem, sizeof mem, "%u", l->memory_mb);
  char *argv[] = {(char *)l->helper, (char *)backend, mem, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_adddup2(&fa, in, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  /* Nothing else of the daemon's (a client's socket kept open would outlive its session). */
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int rc = posix_spawn(pid, l->helper, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  return rc;
}

/* Starts the helper unless the slot is cancelled (under its lock, so a cancel either comes
 * before, and nothing starts, or sees the pid). */
static int spawn(const be_child_limits *l, be_child_slot *slot, const char *backend, int in,
                 child *c, char **log) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    return ACCEL_ESYS;
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return ACCEL_ESYS;
  }
  int rc = 0;
  pthread_mutex_lock(&slot->mu);
  if (slot->cancelled)
    rc = ACCEL_ECANCELED;
  else if ((rc = spawn_with(l, backend, in, out, err, &c->pid)) != 0) {
    char line[600];
    snprintf(line, sizeof line, "accel: the build helper %s did not start: %s", l->helper,
             strerror(rc));
    log_line(log, line);
    rc = ACCEL_ESYS;
  } else {
    slot->pid = c->pid;
  }
  pthread_mutex_unlock(&slot->mu);
  close(out[1]);
  close(err[1]);
  c->out = out[0];
  c->err = err[0];
  c->pidfd = -1;
  if (rc != 0) {
    close(c->out);
    close(c->err);
    return rc;
  }
  /* Not reaped before the waiter sees it end: the pid is still the helper's. */
  c->pidfd = (int)syscall(SYS_pidfd_open, c->pid, 0);
  return 0;
}

/* ---- waiting ---- */

typedef struct answer {
  unsigned char *buf; /* stdout as it came */
  size_t len, cap, limit;
  char tail[STDERR_KEEP]; /* stderr's last bytes */
  size_t tail_len;
  bool too_long;
} answer;

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static bool take_out(answer *a, int fd) {
  if (a->len == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 65536;
    cap = cap > a->limit + 1 ? a->limit + 1 : cap; /* one byte past the limit tells */
    unsigned char *p = cap > a->cap ? rt_realloc(a->buf, cap) : NULL;
    if (p == NULL) {
      a->too_long = true;
      return false;
    }
    a->buf = p;
    a->cap = cap;
  }
  ssize_t n = read(fd, a->buf + a->len, a->cap - a->len);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return true;
  if (n <= 0)
    return false;
  a->len += (size_t)n;
  a->too_long = a->len > a->limit;
  return !a->too_long;
}

static bool take_err(answer *a, int fd) {
  char chunk[1024];
  ssize_t n = read(fd, chunk, sizeof chunk);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return true;
  if (n <= 0)
    return false;
  size_t k = (size_t)n;
  if (a->tail_len + k > sizeof a->tail) { /* keep the end */
    size_t drop = a->tail_len + k - sizeof a->tail;
    drop = drop > a->tail_len ? a->tail_len : drop;
    memmove(a->tail, a->tail + drop, a->tail_len - drop);
    a->tail_len -= drop;
  }
  k = k > sizeof a->tail - a->tail_len ? sizeof a->tail - a->tail_len : k;
  memcpy(a->tail + a->tail_len, chunk + (size_t)n - k, k);
  a->tail_len += k;
  return true;
}

static void end_fd(int *fd) {
  close(*fd);
  *fd = -1;
}

/* Reads until the helper has exited and both pipes are at their end, the deadline passes
 * (returns false) or the answer grows past its limit. */
static bool read_until_end(child *c, answer *a, uint64_t deadline) {
  while (c->out >= 0 || c->err >= 0 || c->pidfd >= 0) {
    uint64_t t = now_ms();
    if (t >= deadline)
      return false;
    struct pollfd p[3] = {{c->out, POLLIN, 0}, {c->err, POLLIN, 0}, {c->pidfd, POLLIN, 0}};
    int n = poll(p, 3, (int)(deadline - t > 1000 ? 1000 : deadline - t));
    if (n < 0 && errno != EINTR)
      return true; /* cannot wait: taken as the end, the wait status says what happened */
    if (c->out >= 0 && p[0].revents && !take_out(a, c->out)) {
      end_fd(&c->out);
      if (a->too_long)
        return true;
    }
    if (c->err >= 0 && p[1].revents && !take_err(a, c->err))
      end_fd(&c->err);
    if (c->pidfd >= 0 && p[2].revents)
      end_fd(&c->pidfd);
  }
  return true;
}

/* Waits for the helper's end without reaping it, forgets its pid under the slot's lock, then
 * reaps it: the wait status, and whether the slot was cancelled. */
static int reap(be_child_slot *slot, pid_t pid, bool *cancelled) {
  siginfo_t si;
  while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) != 0 && errno == EINTR)
    ;
  pthread_mutex_lock(&slot->mu);
  slot->pid = 0;
  *cancelled = slot->cancelled;
  pthread_mutex_unlock(&slot->mu);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  return st;
}

/* ---- the answer ---- */

static int decode(const answer *a, void **image, size_t *image_len, char **log) {
  be_child_answer h;
  if (a->len < sizeof h)
    return ACCEL_EPROTO;
  memcpy(&h, a->buf, sizeof h);
  if (memcmp(h.magic, BE_CHILD_MAGIC, sizeof h.magic) != 0 || h.log_len > BE_CHILD_MAX_LOG ||
      h.image_len > BE_CHILD_MAX_IMAGE || h.status > 0 ||
      (uint64_t)sizeof h + h.log_len + h.image_len != a->len ||
      (h.status == 0) != (h.image_len > 0))
    return ACCEL_EPROTO;
  log_add(log, (const char *)a->buf + sizeof h, h.log_len);
  if (h.status != 0)
    return h.status;
  void *p = rt_malloc(h.image_len);
  if (p == NULL)
    return ACCEL_ENOMEM;
  memcpy(p, a->buf + sizeof h + h.log_len, h.image_len);
  *image = p;
  *image_len = h.image_len;
  return 0;
}

/* Why the helper gave no answer, for the log. */
static void death_note(const be_child_limits *l, int st, const answer *a, char **log) {
  char line[256];
  if (WIFSIGNALED(st))
    snprintf(line, sizeof line,
             "accel: the compiler died (signal %d)%s; its memory cap is %u MiB (acceld's "
             "[builds] memory_mb)",
             WTERMSIG(st),
             WTERMSIG(st) == SIGABRT || WTERMSIG(st) == SIGSEGV ? ", likely out of memory" : "",
             l->memory_mb);
  else
    snprintf(line, sizeof line, "accel: the compiler exited with status %d and no answer",
             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  log_add(log, a->tail, a->tail_len);
  log_line(log, line);
}

static int outcome(const be_child_limits *l, int st, bool in_time, bool cancelled, const answer *a,
                   void **image, size_t *image_len, char **log) {
  char line[256];
  if (cancelled)
    return ACCEL_ECANCELED;
  if (!in_time) {
    snprintf(line, sizeof line,
             "accel: the build ran past its deadline of %u ms and was stopped (acceld's "
             "[builds] timeout_ms)",
             l->timeout_ms);
    log_line(log, line);
    return ACCEL_ETIMEDOUT;
  }
  if (a->too_long) {
    log_line(log, "accel: the compiler's answer was larger than a module may be");
    return ACCEL_EBUILD;
  }
  int rc = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? decode(a, image, image_len, log) : ACCEL_EPROTO;
  if (rc == ACCEL_EPROTO) {
    death_note(l, st, a, log);
    rc = ACCEL_EBUILD;
  }
  return rc;
}

int be_child_compile(const be_child_limits *l, be_child_slot *slot, const char *backend,
                     const char *target, uint32_t source, const void *code, size_t len,
                     const char *options, void **image, size_t *image_len, char **log) {
  if (len > BE_CHILD_MAX_CODE || strlen(target) > BE_CHILD_MAX_TARGET ||
      (options && strlen(options) > BE_CHILD_MAX_OPTIONS))
    return ACCEL_ELIMIT;
  int in = request_fd(target, source, code, len, options);
  if (in < 0)
    return ACCEL_ESYS;
  child c;
  uint64_t deadline = now_ms() + l->timeout_ms;
  int rc = spawn(l, slot, backend, in, &c, log);
  close(in);
  if (rc != 0)
    return rc;
  answer a = {.limit = sizeof(be_child_answer) + BE_CHILD_MAX_LOG + BE_CHILD_MAX_IMAGE};
  bool in_time = read_until_end(&c, &a, deadline);
  if (!in_time || a.too_long)
    kill(c.pid, SIGKILL); /* not reaped yet: the pid is still the helper's */
  bool cancelled = false;
  int st = reap(slot, c.pid, &cancelled);
  if (c.out >= 0)
    close(c.out);
  if (c.err >= 0)
    close(c.err);
  if (c.pidfd >= 0)
    close(c.pidfd);
  rc = outcome(l, st, in_time, cancelled, &a, image, image_len, log);
  rt_free(a.buf);
  return rc;
}
