/* Where user-module builds run (build.c): threads of their own, never libuv's pool, whose
 * four threads allocate device memory and sync completions for every client (four slow
 * compiles there held another client's buffer write for 11.7 s and its small module load for
 * 60 s). At most max_builds run at once in the process; past that a build waits in a FIFO of
 * at most max_queued; past that it is refused with ACCEL_EBUSY, which the client can retry
 * (a queue is friendlier than a refusal for a burst, a bound keeps the queued code's memory
 * bounded). A session builds one module at a time (its later ops wait behind the build, for
 * issue order: session.c), so one session holds at most one of these.
 *
 * With `sandbox` (acceld) the compile step, the part a client's code can blow up (the OpenCL
 * C or SPIR-V front end, NVRTC), runs in the build helper (backends/build_child.h) with a
 * memory cap and a deadline, and a cancelled build's helper is killed; the caches and the
 * load of the compiled image stay in this process. Without it (a program embedding accel, by
 * default) the backend compiles in this process: no cap, no deadline, and a cancelled build
 * runs to its end. */
#ifndef DEV_BUILD_H
#define DEV_BUILD_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "accel/runtime.h"
#include "backends/backend.h"
#include "backends/build_child.h"
#include "runtime/attr.h"
#include "runtime/list.h"

#define DEV_BUILD_TIMEOUT_MS 60000u /* a compile's deadline in the helper */
#define DEV_BUILD_MEMORY_MB 4096u   /* the helper's memory (RLIMIT_DATA) */
#define DEV_BUILD_MAX_QUEUED 64u

typedef struct dev_build_opts {
  bool sandbox;        /* compile in the helper (acceld); false: in this process */
  const char *helper;  /* the helper's path (copied); NULL or "": keep the one set before */
  uint32_t timeout_ms; /* 0: DEV_BUILD_TIMEOUT_MS */
  uint32_t memory_mb;  /* 0: DEV_BUILD_MEMORY_MB */
  uint32_t max_builds; /* builds at once in the process; 0: the CPUs, at most 4 */
  uint32_t max_queued; /* builds waiting past max_builds; 0: none wait (ACCEL_EBUSY) */
} dev_build_opts;

/* Sets the process's build options (any thread; builds already submitted keep theirs). The
 * defaults until a call: no sandbox, max_builds 0, max_queued DEV_BUILD_MAX_QUEUED. */
void dev_builds_configure(const dev_build_opts *o);

/* One build. The owner embeds it, sets work and finish with dev_build_init, submits it, and
 * frees it (after dev_build_fini) in or after finish. */
typedef struct dev_build dev_build;
struct dev_build {
  int (*work)(dev_build *b);                /* on the build's thread: its status */
  void (*finish)(dev_build *b, int status); /* on the loop, once: work's status, or
                                             * ACCEL_ECANCELED (cancelled while queued),
                                             * ACCEL_ESYS (no thread could be made) */
  /* The place's own. */
  uv_async_t async; /* sent once the build is over; keeps the loop running until then */
  pthread_t thread;
  bool has_thread, queued, done;
  int status;
  rt_list link; /* in the queue while queued */
  be_child_slot slot;
  bool sandbox;
  be_child_limits limits;
  char helper[PATH_MAX];
};

void dev_build_init(dev_build *b, int (*work)(dev_build *), void (*finish)(dev_build *, int));
/* After finish, before the owner frees b. */
void dev_build_fini(dev_build *b);
/* Loop thread: runs b on a thread of its own now, or queues it: 0, or ACCEL_EBUSY (the queue
 * is full), ACCEL_ESYS; on failure finish never runs. */
RT_MUST_USE int dev_build_submit(accel_runtime *rt, dev_build *b);
/* Loop thread, before finish: a queued build leaves the queue (finish with ACCEL_ECANCELED,
 * soon); a running one has its helper killed, and starts no other. */
void dev_build_cancel(dev_build *b);
/* On the build's thread: whether it was cancelled. */
bool dev_build_cancelled(dev_build *b);

/* The compiler a backend's load_with gets for b (its state in *storage), or NULL when the
 * backend should compile in this process (no sandbox, or a backend without load_with). */
typedef struct dev_build_compiler {
  be_compiler base; /* first */
  dev_build *build;
  const char *backend;
} dev_build_compiler;

const be_compiler *dev_build_compiler_for(dev_build *b, const be_ops *be,
                                          dev_build_compiler *storage);

#endif
