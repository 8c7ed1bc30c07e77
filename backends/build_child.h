/* Compiling a client's code in a helper process of its own (accel-build, daemon/accel_build.c):
 * the compile step of a user module (be_compiler, backend.h) with a memory cap and a deadline.
 *
 * Why a process: an OpenCL C front end (PoCL's compiles in the caller's process) and NVRTC run
 * on a client's code for as long, and with as much memory, as that code makes them: 1.3 KB of
 * nested macros took 23.6 GiB in two minutes and the kernel killed acceld. Neither can be
 * stopped inside the process. The helper is spawned fresh (posix_spawn, never a fork of the
 * multi-threaded daemon with its driver state), gets the request on stdin (a memfd: no pipe
 * to fill), caps the memory its compile may add (RLIMIT_DATA over what the platforms'
 * libraries took), and writes the image and the log to stdout. The daemon kills it (SIGKILL) at the
 * deadline, when the build is cancelled, or when it says more than an image and a log may hold.
 *
 * The wire between the two is this header's two structs, host byte order (one machine, one
 * build), each followed by its strings: request: target, options, code; answer: log, image. */
#ifndef BE_BUILD_CHILD_H
#define BE_BUILD_CHILD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/attr.h"

#define BE_CHILD_MAGIC "ACCBLD1"    /* 8 bytes with its NUL */
#define BE_CHILD_MAX_TARGET 4096u   /* bytes of a target text */
#define BE_CHILD_MAX_OPTIONS 65536u /* bytes of an options string */
#define BE_CHILD_MAX_CODE ((uint64_t)256 << 20)
#define BE_CHILD_MAX_IMAGE ((uint64_t)256 << 20)
#define BE_CHILD_MAX_LOG ((uint32_t)1 << 20)

typedef struct be_child_req {
  char magic[8];
  uint32_t source;
  uint32_t target_len;
  uint32_t options_len; /* UINT32_MAX: no options (NULL) */
  uint32_t reserved;
  uint64_t code_len;
} be_child_req;

typedef struct be_child_answer {
  char magic[8];
  int32_t status; /* the backend's compile: 0 or an accel error */
  uint32_t log_len;
  uint64_t image_len;
} be_child_answer;

/* What a helper may use, and where it is. */
typedef struct be_child_limits {
  const char *helper;  /* the accel-build executable */
  uint32_t timeout_ms; /* from the spawn to the answer: then SIGKILL, ACCEL_ETIMEDOUT */
  uint32_t memory_mb;  /* the helper's writable memory (RLIMIT_DATA); 0: not limited */
} be_child_limits;

/* A build's running helper, for cancelling it from another thread. */
typedef struct be_child_slot {
  pthread_mutex_t mu;
  pid_t pid;      /* the helper now running (not yet reaped), 0 if none */
  bool cancelled; /* no helper starts any more; a running one was killed */
} be_child_slot;

void be_child_slot_init(be_child_slot *s);
void be_child_slot_fini(be_child_slot *s);
/* Any thread: kills the slot's running helper (SIGKILL) and keeps new ones from starting. */
void be_child_slot_cancel(be_child_slot *s);

/* Runs the helper for `backend` on the request and waits for it (blocks: a thread of the
 * caller's, never the loop). 0 with *image (malloc'd) and *image_len; else the backend's
 * compile error, or ACCEL_ETIMEDOUT (the deadline passed: killed), ACCEL_ECANCELED (the slot
 * was cancelled), ACCEL_EBUILD (the helper died: killed by a signal, out of its memory cap,
 * or it answered nonsense), ACCEL_ESYS (it could not be started). *log gets the compiler's
 * output and, where accel stopped or lost the helper, a line saying why (malloc'd or NULL;
 * appended to what *log held). */
RT_MUST_USE int be_child_compile(const be_child_limits *l, be_child_slot *slot, const char *backend,
                                 const char *target, uint32_t source, const void *code, size_t len,
                                 const char *options, void **image, size_t *image_len, char **log);

/* The helper's main(): accel-build BACKEND MEMORY_MB, the request on stdin, the answer on
 * stdout (build_helper.c). Exits 0 when it answered (whatever the compile said), else 1. */
int be_child_main(int argc, char **argv);

/* Writes all n bytes of p to fd (retrying short writes and EINTR): false on an error or a
 * closed pipe. Both sides of the helper's pipe use it. */
bool be_child_write_all(int fd, const void *p, size_t n);

#endif
