/* One suite, two transports: with ACCEL_TEST_ACCELD set to the path of the acceld binary,
 * every context a test opens through ctx_open() is a remote one, connected to an acceld
 * started for it with the settings its embedded URL asked for (cpu_devices, fault_injection,
 * completion, max_restarts), on an ipc:// socket in a fresh temporary directory. The daemons
 * are stopped (SIGTERM, then waited for) when the test executable exits.
 * Tests that hold the embedded loop thread to keep ops pending skip themselves here. */
#ifndef ACCEL_TESTS_DAEMON_MODE_H
#define ACCEL_TESTS_DAEMON_MODE_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "accel/accel.h"

#define DAEMON_MODE_MAX 64

static pid_t daemon_pids_[DAEMON_MODE_MAX];
static char daemon_dirs_[DAEMON_MODE_MAX][64];
static int daemon_count_;

static inline bool test_daemon_mode(void) {
  const char *p = getenv("ACCEL_TEST_ACCELD");
  return p != NULL && *p != '\0';
}

#define EMBEDDED_ONLY()                                                                            \
  do {                                                                                             \
    if (test_daemon_mode())                                                                        \
      TEST_SKIP("holds the embedded loop thread: no meaning through the daemon");                  \
  } while (0)

static inline void daemon_mode_stop_all_(void) {
  for (int i = 0; i < daemon_count_; i++) {
    if (daemon_pids_[i] > 0) {
      kill(daemon_pids_[i], SIGTERM);
      int status;
      waitpid(daemon_pids_[i], &status, 0);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/acceld.conf", daemon_dirs_[i]);
    unlink(path);
    snprintf(path, sizeof path, "%s/sock", daemon_dirs_[i]);
    unlink(path);
    rmdir(daemon_dirs_[i]);
  }
  daemon_count_ = 0;
}

/* The value of `key` in an embedded URL's query, or NULL. */
static inline const char *daemon_mode_param_(const char *url, const char *key, char *out,
                                             size_t len) {
  const char *q = url ? strchr(url, '?') : NULL;
  size_t klen = strlen(key);
  for (const char *p = q; p && *p; p = strchr(p + 1, '&')) {
    const char *k = p + 1;
    if (strncmp(k, key, klen) == 0 && k[klen] == '=') {
      size_t n = strcspn(k + klen + 1, "&");
      snprintf(out, len, "%.*s", (int)n, k + klen + 1);
      return out;
    }
  }
  return NULL;
}

static inline void daemon_mode_write_config_(const char *dir, const char *url) {
  char path[128], v[64];
  snprintf(path, sizeof path, "%s/acceld.conf", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  const char *fi = daemon_mode_param_(url, "fault_injection", v, sizeof v);
  fprintf(f, "[daemon]\nlog_level=error\nfault_injection=%s\n",
          fi && strcmp(fi, "0") != 0 ? "true" : "false");
  const char *io = getenv("ACCEL_TEST_IO_THREADS"); /* local sockets on that many I/O threads */
  if (io != NULL && *io != '\0')
    fprintf(f, "io_threads=%s\n", io);
  const char *shards = getenv("ACCEL_TEST_SHARDS"); /* else one, whatever the host's cores */
  fprintf(f, "shards=%s\n", shards != NULL && *shards != '\0' ? shards : "1");
  fprintf(f, "[devices]\ncpu_devices=%s\n",
          daemon_mode_param_(url, "cpu_devices", v, sizeof v) ? v : "1");
  if (daemon_mode_param_(url, "completion", v, sizeof v))
    fprintf(f, "completion=%s\n", v);
  if (daemon_mode_param_(url, "max_restarts", v, sizeof v))
    fprintf(f, "max_restarts=%s\n", v);
  if (daemon_mode_param_(url, "backends", v, sizeof v))
    fprintf(f, "backends=%s\n", v);
  if (daemon_mode_param_(url, "cuda_context", v, sizeof v))
    fprintf(f, "cuda_context=%s\n", v);
  fclose(f);
}

static inline pid_t daemon_mode_spawn_(const char *dir) {
  char conf[128], listen[128];
  snprintf(conf, sizeof conf, "%s/acceld.conf", dir);
  snprintf(listen, sizeof listen, "ipc://%s/sock", dir);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* also when the watchdog ends the test with _exit */
    const char *bin = getenv("ACCEL_TEST_ACCELD");
    execl(bin, bin, "--config", conf, "--listen", listen, "--foreground", (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* Starts an acceld shaped like `url` and connects to it (retrying while it starts). */
static inline accel_ctx *daemon_mode_open(const char *url) {
  CHECK(daemon_count_ < DAEMON_MODE_MAX);
  if (daemon_count_ == 0)
    atexit(daemon_mode_stop_all_);
  char *dir = daemon_dirs_[daemon_count_];
  snprintf(dir, sizeof daemon_dirs_[0], "/tmp/accel-api-XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  daemon_mode_write_config_(dir, url);
  daemon_pids_[daemon_count_++] = daemon_mode_spawn_(dir);
  char remote[128];
  snprintf(remote, sizeof remote, "ipc://%s/sock", dir);
  /* A daemon with OpenCL devices builds its own program at start; under the sanitizers, on
   * a small machine with an empty cache, that takes many seconds. Wait up to a minute, but
   * stop at once if the daemon died. */
  accel_ctx *ctx = NULL;
  int rc = ACCEL_ECLOSED;
  pid_t pid = daemon_pids_[daemon_count_ - 1];
  for (int tries = 0; tries < 6000 && rc == ACCEL_ECLOSED; tries++) {
    rc = accel_open(&ctx, remote);
    if (rc != ACCEL_ECLOSED)
      break;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      fprintf(stderr, "acceld exited before accepting (status 0x%x)\n", (unsigned)status);
      daemon_pids_[daemon_count_ - 1] = -1;
      break;
    }
    usleep(10000);
  }
  CHECK_OK(rc);
  return ctx;
}

#endif
