/* User modules (the `module` op package): a client's code, built for one or more devices,
 * and the kernels looked up in it (module.c). A module belongs to a session (its handle is in
 * the session's table) and lives until its handle is gone and no launch uses it. Loop thread,
 * except where a function says otherwise. */
#ifndef DEV_MODULE_H
#define DEV_MODULE_H

#include "actors/world.h"
#include "runtime/attr.h"

typedef struct dev_module_kernel {
  char name[BE_KERNEL_NAME_MAX + 1];
  be_kernel *kernel;
  be_kernel_info info;
} dev_module_kernel;

/* The module's build on one device. `mod` and `lost` are written under the node's build_mu
 * (by a worker when its build is done, and by the device actor dropping the node's
 * modules). */
typedef struct dev_module_build {
  be_module *mod;             /* NULL: not built there (or lost) */
  bool lost;                  /* it was built, and the device restarted since */
  dev_module_kernel *kernels; /* looked up so far */
  uint32_t nkernels, kernels_cap;
} dev_module_build;

struct dev_module {
  dev_world *world;
  rt_list link;  /* in the world's list */
  uint32_t refs; /* the handle, each launch in flight, a build in progress */
  int status;    /* the build's: 0, or why it failed (launches meet it) */
  dev_module_build per[DEV_MAX_NODES];
};

RT_MUST_USE dev_module *dev_module_create(dev_world *w);
void dev_module_ref(dev_module *m);
/* Frees it (and its builds) with the last reference. */
void dev_module_unref(dev_module *m);

/* The device restarts: its builds of every module are freed and marked lost. The caller
 * holds node->build_mu. */
void dev_modules_drop_node(dev_world *w, dev_node *node);

/* A module's build in flight (module.c). */
typedef struct dev_module_job dev_module_job;

/* Builds code for every node of `nodes` (node indexes, each with the module package and the
 * source kind) on a build thread (build.h), now or after the builds queued before it; the
 * answer comes to `self` as a message of msg_type, for dev_module_build_done. The code and
 * options are copied. 0 (*out names the build until its answer is taken), ACCEL_EBUSY (as
 * many builds as the process allows run, and as many wait), ACCEL_ENOMEM, ACCEL_ESYS. */
RT_MUST_USE int dev_module_build_start(accel_actor *self, uint32_t msg_type, dev_module *m,
                                       const int *nodes, int nnodes, uint32_t source,
                                       const void *code, size_t len, const char *options,
                                       dev_module_job **out);
/* The session goes before the answer came: a queued build is dropped, a running one's
 * compiler (in the build helper) killed. The answer still comes (or meets a stale ref and is
 * dropped). */
void dev_module_build_cancel(dev_module_job *j);
/* The worker's answer: 0 if every build succeeded, else the first failure; *log gets the
 * compilers' output (malloc'd, NUL-terminated, or NULL), headed per device when there are
 * several. */
int dev_module_build_done(accel_msg *msg, char **log);

/* The kernel `name` of m's build on node: 0, ACCEL_ENOENT (no such kernel), ACCEL_ENOTSUP
 * (the module was not built for that device), ACCEL_EDATALOST (its build died with the
 * device). */
RT_MUST_USE int dev_module_kernel_get(dev_module *m, dev_node *node, const char *name,
                                      const dev_module_kernel **out);

/* Checks a launch (geometry, arguments) against the kernel and the device's limits. */
RT_MUST_USE int dev_module_launch_check(const dev_node *node, const dev_module_kernel *k,
                                        const dev_launch *l);

#endif
