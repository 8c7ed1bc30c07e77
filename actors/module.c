/* User modules: a client's code built for devices, its kernels, and the checks of a launch
 * against them. Builds run on a build thread (build.h: NVRTC or an OpenCL compiler may take
 * seconds; acceld compiles in a helper process with a memory cap and a deadline), counted
 * on the node, so the device actor does not close a device under a build (build_on says how);
 * a device that restarts takes its builds with it (they are marked lost: the source would
 * have to be loaded again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/build.h"
#include "actors/module.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "runtime/loop.h"

dev_module *dev_module_create(dev_world *w) {
  dev_module *m = rt_calloc(1, sizeof *m);
  if (m == NULL)
    return NULL;
  m->world = w;
  m->refs = 1;
  rt_list_push_front(&w->modules, &m->link);
  return m;
}

void dev_module_ref(dev_module *m) {
  m->refs++;
}

static void build_free(dev_node *node, dev_module_build *b) {
  if (b->mod)
    node->be->module->unload(b->mod);
  rt_free(b->kernels);
  *b = (dev_module_build){0};
}

void dev_module_unref(dev_module *m) {
  if (--m->refs > 0)
    return;
  dev_world *w = m->world;
  for (int n = 0; n < w->nnodes; n++)
    if (m->per[n].mod || m->per[n].kernels)
      build_free(&w->nodes[n], &m->per[n]);
  rt_list_remove(&m->link);
  rt_free(m);
}

void dev_modules_drop_node(dev_world *w, dev_node *node) {
  RT_LIST_FOR_EACH(dev_module, m, &w->modules, link) {
    dev_module_build *b = &m->per[node->index];
    if (b->mod == NULL)
      continue;
    build_free(node, b);
    b->lost = true;
  }
}

/* ---- building, on a build thread (build.h) ---- */

struct dev_module_job {
  dev_build build; /* first */
  dev_module *m;
  dev_world *w;
  accel_runtime *rt;
  accel_ref to; /* the session, for the answer */
  uint32_t msg_type;
  int nodes[DEV_MAX_NODES];
  uint32_t gens[DEV_MAX_NODES]; /* the incarnation each build is for */
  int nnodes;
  uint32_t source;
  void *code;
  size_t len;
  char *options;
  char *log;
  size_t log_len;
};

typedef struct dev_module_job build_job;

static void log_append(build_job *j, const dev_node *node, const char *text) {
  if (text == NULL || text[0] == '\0')
    return;
  char head[160] = "";
  if (j->nnodes > 1)
    snprintf(head, sizeof head, "device %d (%s):\n", node->device, node->info.name);
  size_t add = strlen(head) + strlen(text) + 2;
  char *p = rt_realloc(j->log, j->log_len + add);
  if (p == NULL)
    return; /* the log is information: the status still says what happened */
  j->log = p;
  j->log_len += (size_t)snprintf(p + j->log_len, add, "%s%s%s", head, text,
                                 j->nnodes > 1 ? "\n" : "");
}

/* The backend's load, its compile step in the build helper where the build says so. */
static int load_on(build_job *j, dev_node *node, be_device *dev, be_module **mod, char **log) {
  const be_module_pkg *pkg = node->be->module;
  dev_build_compiler storage;
  const be_compiler *c = dev_build_compiler_for(&j->build, node->be, &storage);
  if (c != NULL)
    return pkg->load_with(dev, j->source, j->code, j->len, j->options, c, mod, log);
  return pkg->load(dev, j->source, j->code, j->len, j->options, mod, log);
}

/* Long work is visible: a build says when it starts and how long it took (a compile of a
 * client's code may take minutes; a build found in a cache ends at once). */
static void log_build_start(const build_job *j, const dev_node *node) {
  static const char *const kinds[] = {"?", "CUDA C", "PTX", "OpenCL C", "SPIR-V"};
  accel_log(ACCEL_LOG_INFO, "device", "device %d (%s): building a module from %zu bytes of %s",
            node->device, node->info.name, j->len, kinds[j->source < 5 ? j->source : 0]);
}

static void log_build_end(const dev_node *node, int rc, uint64_t ms) {
  accel_log(rc == 0 ? ACCEL_LOG_INFO : ACCEL_LOG_WARN, "device",
            "device %d (%s): module build %s in %llu.%03llu s", node->device, node->info.name,
            rc == 0 ? "done" : accel_err_name(rc), (unsigned long long)(ms / 1000),
            (unsigned long long)(ms % 1000));
}

/* Builds for one device without holding build_mu while the driver works (a load may block
 * behind a kernel that never ends): `builds` counts it, and the device actor waits for it
 * before closing. A build that finishes for an incarnation already gone is not kept (nor
 * freed: its context may be the abandoned one). */
static int build_on(build_job *j, int i) {
  dev_node *node = &j->w->nodes[j->nodes[i]];
  dev_module_build *b = &j->m->per[node->index];
  char *log = NULL;
  be_module *mod = NULL;
  int rc = ACCEL_EDEVLOST;
  pthread_mutex_lock(&node->build_mu);
  be_device *dev = node->dev && node->generation == j->gens[i] ? node->dev : NULL;
  uint64_t t0 = rt_mono_ms();
  node->builds += dev != NULL;
  if (dev && node->modules_building++ == 0)
    node->building_since_ms = t0;
  pthread_mutex_unlock(&node->build_mu);
  if (dev) {
    log_build_start(j, node);
    rc = load_on(j, node, dev, &mod, &log);
    log_build_end(node, rc, rt_mono_ms() - t0);
  }
  pthread_mutex_lock(&node->build_mu);
  if (dev) {
    node->builds--;
    node->modules_building--;
    pthread_cond_broadcast(&node->build_cv);
  }
  if (rc == 0 && node->dev == dev && node->generation == j->gens[i])
    *b = (dev_module_build){.mod = mod};
  else if (rc == 0)
    rc = ACCEL_EDEVLOST; /* the device restarted meanwhile: mod is left to it */
  pthread_mutex_unlock(&node->build_mu);
  log_append(j, node, log);
  rt_free(log);
  return rc;
}

static int build_work(dev_build *build) {
  build_job *j = (build_job *)build;
  int status = 0;
  for (int i = 0; i < j->nnodes && !dev_build_cancelled(build); i++) {
    int rc = build_on(j, i);
    if (status == 0)
      status = rc;
  }
  return status;
}

static void job_free(build_job *j) {
  dev_module_unref(j->m);
  dev_build_fini(&j->build);
  rt_free(j->code);
  rt_free(j->options);
  rt_free(j->log);
  rt_free(j);
}

static void job_drop(void *data) {
  job_free(data); /* the session ended before the build did */
}

/* The answer to the session: 0 (sent: the job is the message's), ACCEL_EBUSY (its mailbox is
 * full: still ours), or the session is gone (the job is freed). */
static int answer(build_job *j) {
  accel_msg msg = {
      .type = j->msg_type, .arg = (uint64_t)(int64_t)j->build.status, .data = j, .drop = job_drop};
  int rc = accel_tell(j->rt, j->to, &msg);
  if (rc != 0 && rc != ACCEL_EBUSY)
    job_free(j);
  return rc == ACCEL_EBUSY ? rc : 0;
}

/* An answer that met a full mailbox, sent again every millisecond (rare: a session's mailbox
 * holds 16384 messages). The timer is not the job's: the job may be freed before the timer's
 * close is done. */
typedef struct answer_retry {
  uv_timer_t timer;
  build_job *j;
} answer_retry;

static void retry_closed(uv_handle_t *h) {
  rt_free(h->data);
}

static void retry_tick(uv_timer_t *t) {
  answer_retry *r = t->data;
  if (answer(r->j) != ACCEL_EBUSY)
    uv_close((uv_handle_t *)t, retry_closed);
}

static void build_finish(dev_build *build, int status) {
  build_job *j = (build_job *)build;
  build->status = status;
  if (answer(j) != ACCEL_EBUSY)
    return;
  answer_retry *r = rt_malloc(sizeof *r);
  if (r == NULL) { /* nothing to wait with: the session hears of it as of its end */
    job_free(j);
    return;
  }
  r->j = j;
  uv_timer_init(rt_uv_loop(j->rt), &r->timer);
  r->timer.data = r;
  uv_timer_start(&r->timer, retry_tick, 1, 1);
}

int dev_module_build_start(accel_actor *self, uint32_t msg_type, dev_module *m, const int *nodes,
                           int nnodes, uint32_t source, const void *code, size_t len,
                           const char *options, dev_module_job **out) {
  build_job *j = rt_calloc(1, sizeof *j);
  if (j == NULL)
    return ACCEL_ENOMEM;
  dev_build_init(&j->build, build_work, build_finish);
  j->m = m;
  j->w = m->world;
  j->rt = accel_actor_runtime(self);
  j->to = accel_self(self);
  j->msg_type = msg_type;
  j->nnodes = nnodes;
  j->source = source;
  j->len = len;
  j->code = rt_malloc(len ? len : 1);
  j->options = options ? rt_strdup(options) : NULL;
  if (j->code == NULL || (options && j->options == NULL)) {
    dev_build_fini(&j->build);
    rt_free(j->code);
    rt_free(j->options);
    rt_free(j);
    return ACCEL_ENOMEM;
  }
  memcpy(j->code, code, len);
  for (int i = 0; i < nnodes; i++) {
    j->nodes[i] = nodes[i];
    j->gens[i] = m->world->nodes[nodes[i]].generation;
  }
  dev_module_ref(m);
  int rc = dev_build_submit(j->rt, &j->build);
  if (rc != 0)
    job_free(j);
  else
    *out = j;
  return rc;
}

void dev_module_build_cancel(dev_module_job *j) {
  dev_build_cancel(&j->build);
}

int dev_module_build_done(accel_msg *msg, char **log) {
  build_job *j = msg->data;
  msg->data = NULL;
  *log = j->log;
  j->log = NULL;
  job_free(j);
  return (int)(int64_t)msg->arg;
}

/* ---- kernels and launches ---- */

int dev_module_kernel_get(dev_module *m, dev_node *node, const char *name,
                          const dev_module_kernel **out) {
  dev_module_build *b = &m->per[node->index];
  if (b->mod == NULL)
    return b->lost ? ACCEL_EDATALOST : ACCEL_ENOTSUP;
  for (uint32_t i = 0; i < b->nkernels; i++)
    if (strcmp(b->kernels[i].name, name) == 0) {
      *out = &b->kernels[i];
      return 0;
    }
  if (b->nkernels == b->kernels_cap) {
    uint32_t cap = b->kernels_cap ? 2 * b->kernels_cap : 4;
    dev_module_kernel *p = rt_realloc(b->kernels, cap * sizeof *p);
    if (p == NULL)
      return ACCEL_ENOMEM;
    b->kernels = p;
    b->kernels_cap = cap;
  }
  dev_module_kernel *k = &b->kernels[b->nkernels];
  memset(k, 0, sizeof *k);
  int rc = node->be->module->kernel(b->mod, name, &k->kernel, &k->info);
  if (rc != 0)
    return rc;
  snprintf(k->name, sizeof k->name, "%s", name);
  b->nkernels++;
  *out = k;
  return 0;
}

static int geometry_check(const be_launch_limits *lim, const dev_launch *l) {
  uint64_t threads = 1;
  for (int i = 0; i < 3; i++) {
    if (l->block[i] > lim->max_block[i] || l->grid[i] > lim->max_grid[i])
      return ACCEL_EINVAL;
    threads *= l->block[i];
  }
  if (threads > lim->max_threads_per_block || l->shared_bytes > lim->max_shared_bytes)
    return ACCEL_EINVAL;
  return 0;
}

/* Whether an argument fits a parameter, as far as the device can tell. */
static bool arg_fits(const dev_kernel_arg *a, const struct be_param *p) {
  if (p->kind != BE_PARAM_UNKNOWN && p->kind != a->kind)
    return false;
  if (a->kind == BE_PARAM_BUFFER)
    return p->kind == BE_PARAM_BUFFER || p->size == 0 || p->size == sizeof(uint64_t);
  if (a->kind == BE_PARAM_SCALAR)
    return p->size == 0 || p->size == a->size;
  return true; /* LOCAL: its size is the launch's to choose */
}

int dev_module_launch_check(const dev_node *node, const dev_module_kernel *k, const dev_launch *l) {
  int rc = geometry_check(&node->caps.limits, l);
  if (rc != 0)
    return rc;
  const be_kernel_info *info = &k->info;
  if (info->nparams == UINT32_MAX)
    return 0;
  if (info->nparams != l->nargs)
    return ACCEL_EINVAL;
  for (uint32_t i = 0; i < l->nargs; i++)
    if (!arg_fits(&l->args[i], &info->params[i]))
      return ACCEL_EINVAL;
  return 0;
}
