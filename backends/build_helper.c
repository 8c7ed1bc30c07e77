/* The helper's side of a compile out of the daemon (build_child.h): accel-build BACKEND
 * MEMORY_MB limits itself, reads one request from stdin, runs the backend's compile entry and
 * writes one answer to stdout. It trusts its input no more than the daemon trusts a client:
 * every length is checked before it is used. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "accel/error.h"
#include "backends/backend.h"
#include "backends/build_child.h"
#include "runtime/alloc.h"

/* The cap is RLIMIT_DATA, the memory the process may write (heap, anonymous mappings,
 * stacks), not RLIMIT_AS: GPU drivers reserve far more address space than they use (CUDA's
 * unified addressing), which an address-space cap would refuse. A sanitizer's shadow memory
 * is writable and takes terabytes before main(): such builds (tests) rely on the deadline
 * alone. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HELPER_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define HELPER_SANITIZED 1
#endif
#endif

/* The compile is the daemon's background work: it yields the CPU to the daemon's loop. */
#define HELPER_NICE 10

static void limit_self(void) {
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* the daemon's thread that spawned it went: so does it */
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none); /* no core file of gigabytes when the cap ends it */
  (void)setpriority(PRIO_PROCESS, 0, HELPER_NICE);
}

#ifndef HELPER_SANITIZED
/* The process's writable memory now (VmData of /proc/self/status), in bytes; 0 if unknown. */
static uint64_t data_now(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[128];
  unsigned long long kb = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmData: %llu kB", &kb) == 1)
      break;
  if (f != NULL)
    fclose(f);
  return (uint64_t)kb << 10;
}
#endif

/* Caps what the compile may add to what the process holds now (the platforms' libraries,
 * loaded before: see warm_up) at memory_mb. */
static void cap_data(uint32_t memory_mb) {
#ifndef HELPER_SANITIZED
  if (memory_mb > 0) {
    rlim_t cap = (rlim_t)data_now() + ((rlim_t)memory_mb << 20);
    struct rlimit data = {cap, cap};
    setrlimit(RLIMIT_DATA, &data);
  }
#else
  (void)memory_mb;
#endif
}

/* Loads what the backend's compile needs before the cap, so that the cap bounds the compile
 * and not the libraries: OpenCL's ICD loader opens every platform's library at its first
 * call (NVIDIA's takes more than a gigabyte of writable memory; with the cap set first, a
 * 1 GiB cap found no platform at all, PoCL's included). */
static void warm_up(const char *backend) {
  if (strcmp(backend, "opencl") != 0)
    return; /* CUDA's compile is NVRTC alone, loaded by the compile itself */
  for (const be_entry *e = be_registry(); e->name != NULL; e++)
    if (strcmp(e->name, backend) == 0 && e->ops && e->ops->probe) {
      int count;
      char why[128];
      (void)e->ops->probe(&count, why, sizeof why);
    }
}

static bool read_all(int fd, void *p, size_t n) {
  char *s = p;
  while (n > 0) {
    ssize_t r = read(fd, s, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    s += r;
    n -= (size_t)r;
  }
  return true;
}

bool be_child_write_all(int fd, const void *p, size_t n) {
  const char *s = p;
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    s += w;
    n -= (size_t)w;
  }
  return true;
}

/* A string of n bytes from fd, NUL-terminated (malloc'd), or NULL. */
static char *read_string(int fd, size_t n) {
  char *s = rt_malloc(n + 1);
  if (s == NULL || !read_all(fd, s, n)) {
    rt_free(s);
    return NULL;
  }
  s[n] = '\0';
  return s;
}

typedef struct request {
  be_child_req h;
  char *target, *options, *code;
} request;

static bool read_request(request *r) {
  if (!read_all(0, &r->h, sizeof r->h) || memcmp(r->h.magic, BE_CHILD_MAGIC, 8) != 0 ||
      r->h.target_len > BE_CHILD_MAX_TARGET || r->h.code_len > BE_CHILD_MAX_CODE ||
      (r->h.options_len != UINT32_MAX && r->h.options_len > BE_CHILD_MAX_OPTIONS))
    return false;
  r->target = read_string(0, r->h.target_len);
  if (r->h.options_len != UINT32_MAX)
    r->options = read_string(0, r->h.options_len);
  r->code = read_string(0, (size_t)r->h.code_len);
  return r->target && r->code && (r->h.options_len == UINT32_MAX || r->options);
}

static const be_module_pkg *package(const char *backend) {
  for (const be_entry *e = be_registry(); e->name != NULL; e++)
    if (strcmp(e->name, backend) == 0 && e->ops && e->ops->module)
      return e->ops->module->compile ? e->ops->module : NULL;
  return NULL;
}

static bool answer(int status, const char *log, const void *image, size_t image_len) {
  size_t log_len = log ? strlen(log) : 0;
  if (log_len > BE_CHILD_MAX_LOG) { /* the end says most: where it stopped */
    log += log_len - BE_CHILD_MAX_LOG;
    log_len = BE_CHILD_MAX_LOG;
  }
  be_child_answer h = {.status = status, .log_len = (uint32_t)log_len, .image_len = image_len};
  memcpy(h.magic, BE_CHILD_MAGIC, sizeof h.magic);
  return be_child_write_all(1, &h, sizeof h) && be_child_write_all(1, log, log_len) &&
         be_child_write_all(1, image, image_len);
}

int be_child_main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: accel-build BACKEND MEMORY_MB < request (acceld runs it)\n");
    return 1;
  }
  limit_self();
  if (getppid() == 1)
    _exit(1); /* the daemon went before the death signal was armed */
  request r = {0};
  const be_module_pkg *pkg = package(argv[1]);
  if (pkg == NULL || !read_request(&r)) {
    fprintf(stderr, "accel-build: no such backend, or a malformed request\n");
    _exit(1);
  }
  warm_up(argv[1]);
  cap_data((uint32_t)strtoul(argv[2], NULL, 10));
  void *image = NULL;
  size_t image_len = 0;
  char *log = NULL;
  int rc = pkg->compile(r.target, r.h.source, r.code, (size_t)r.h.code_len, r.options, &image,
                        &image_len, &log);
  if (rc == 0 && image_len == 0)
    rc = ACCEL_EBUILD;
  bool ok = answer(rc, log, rc == 0 ? image : NULL, rc == 0 ? image_len : 0);
  /* _exit: no driver teardown (it may take long, or leak on purpose), no leak report. */
  _exit(ok ? 0 : 1);
}
