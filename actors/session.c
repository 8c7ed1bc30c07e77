/* SessionActor: one per client. Owns the client's buffers (handle -> buffer), checks every op
 * again against its own table (the daemon trusts no client), enforces the session's limits,
 * places the op on a device and plans it. A handle is {slot, generation} chosen by the client
 * in its own table; a destroyed or foreign one resolves to nothing and the op fails with
 * ACCEL_ESTALE. Creates are pipelined (the client does not wait for them): one that fails
 * (out of memory, the session's memory limit) leaves its handle marked with the error, and
 * every later op on it fails with that error, until the client destroys the handle. When the
 * session ends, every buffer it owns is destroyed (freed once its last
 * task is done); ops still in flight finish normally. */
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "actors/device.h"
#include "actors/metrics.h"
#include "actors/module.h"
#include "actors/session.h"
#include "actors/trace.h"
#include "ops/check.h"
#include "runtime/alloc.h"
#include "runtime/error_detail.h"

/* A handle names a buffer or a user module (one table, one generation scheme). */
typedef struct session_entry {
  uint32_t gen;
  dev_buffer *buf;
  dev_module *mod;
  int failed; /* the error of a create that failed for this gen, else 0 */
} session_entry;

/* Ops that came while a module was being built, in order: they run after it, so that issue
 * order holds for them (a launch of that module, a write its launch reads) without holding
 * other sessions. */
typedef struct op_fifo {
  dev_call **items;
  uint32_t head, len, cap;
} op_fifo;

typedef struct session_state {
  dev_session_args *args;
  accel_actor *self;
  session_entry *table;
  dev_session_acct *acct;
  dev_call *building;        /* the module load being built, or NULL */
  dev_module_job *build_job; /* its build, until the answer comes (cancelled at the end) */
  dev_call *allocating;      /* the op whose memory a worker allocates (mem_cache.h), or NULL */
  bool alloc_retried;        /* its allocation failed once and the caches were emptied */
  op_fifo held;
} session_state;

static uint32_t handle_slot(uint64_t h) {
  return (uint32_t)(h & 0xffffffffu);
}

static uint32_t handle_gen(uint64_t h) {
  return (uint32_t)(h >> 32);
}

static session_entry *entry_of(session_state *s, uint64_t handle) {
  uint32_t slot = handle_slot(handle);
  if (slot == 0 || slot >= s->args->max_buffers)
    return NULL;
  session_entry *e = &s->table[slot];
  return e->gen == handle_gen(handle) ? e : NULL;
}

static dev_buffer *resolve(session_state *s, uint64_t handle) {
  session_entry *e = entry_of(s, handle);
  return e ? e->buf : NULL;
}

static dev_module *resolve_module(session_state *s, uint64_t handle) {
  session_entry *e = entry_of(s, handle);
  return e ? e->mod : NULL;
}

static bool slot_free(session_state *s, uint64_t handle) {
  uint32_t slot = handle_slot(handle);
  return slot != 0 && slot < s->args->max_buffers && handle_gen(handle) != 0 &&
         s->table[slot].buf == NULL && s->table[slot].mod == NULL; /* a failed create's too */
}

void dev_session_acct_release(dev_session_acct *a) {
  if (--a->refs == 0)
    rt_free(a);
}

/* Completes the op's future; the status the op ends with: the future's own if it had
 * completed already. A future completed early (in a backend's callback, a worker's wait or
 * a waiting client's) may have answered before the loop learned otherwise (the device was
 * lost meanwhile): the client saw that answer, so accel_finish and the metrics count it. */
static int settle_future(dev_call *call, int status) {
  char *result = call->result; /* a build log: the future's value, freed with it */
  call->result = NULL;
  if (accel_future_complete(call->future, status, result, rt_free) == 0)
    return status;
  rt_free(result); /* completed already (never for ops with a result) */
  return accel_future_poll(call->future);
}

static void export_unpin(dev_buffer *b);

void dev_op_finished(dev_world *w, dev_call *call, int status) {
  if (call->future && call->done == NULL)
    status = settle_future(call, status);
  if (call->op.h.kind == DEV_OP_EXPORT && call->op.u.xport.pinned) {
    dev_buffer *b = call->op.u.xport.pinned; /* held since the pin (users) */
    call->op.u.xport.pinned = NULL;
    if (status != 0) /* the caller sees the error: no export to release */
      export_unpin(b);
    dev_buffer_unuse(b);
  }
  dev_session_acct *acct = call->acct;
  if (call->mod) {
    dev_module_unref(call->mod);
    call->mod = NULL;
  }
  if (acct) {
    acct->in_flight--;
    dev_session_acct_release(acct);
  }
  dev_metrics_record(w, call, status);
  if (w->trace)
    dev_trace_op_end(w, call, status, uv_hrtime());
  if (w->on_op_done)
    w->on_op_done(w->on_op_done_arg, status);
  if (call->done) {
    call->done(call, status);
    return;
  }
  if (call->future)
    accel_future_release(call->future);
  rt_free(call->result);
  dev_call_free(call);
}

/* ---- placement ---- */

/* Whether every buffer the op reads is valid on node already (and it reads one). */
static bool all_inputs_on(const dev_op *op, dev_buffer *bufs[], const dev_node *node) {
  bool any = false;
  for (uint32_t i = 0; i < op->nbufs; i++) {
    if (!(op->bufs[i].access & DEV_READ))
      continue;
    if (bufs[i]->rep[node->index].state == DEV_INVALID)
      return false;
    any = true;
  }
  return any;
}

/* How eager placement is to pick a device on its own (lower first): GPUs and accelerators,
 * then the native CPU backend's devices; a CPU seen through another backend (PoCL's OpenCL
 * device) only when an op names it (-1). Parenchyma's "most potent device first". */
static int potency(const dev_node *node) {
  if (node->info.kind == BE_KIND_GPU || node->info.kind == BE_KIND_ACCELERATOR)
    return 0;
  return strcmp(node->be->name, "cpu") == 0 ? 1 : -1;
}

/* What running the op on `node` costs, in bytes: those of its buffers that would have to be
 * brought there (host staging counts twice), plus PLACE_TASK_BYTES for each task already
 * queued there and not done. A queued task weighs as much as moving 1 MiB: about a small op's
 * time at peer or PCIe speed, so a busy device's ops spill onto an idle one, while data larger
 * than a few queued ops keeps the op where its data is. */
#define PLACE_TASK_BYTES (1u << 20)

static uint64_t place_cost(dev_world *w, const dev_op *op, dev_buffer *bufs[], dev_node *node) {
  uint64_t cost = (uint64_t)node->queued * PLACE_TASK_BYTES;
  for (uint32_t i = 0; i < op->nbufs; i++) {
    dev_buffer *b = bufs[i];
    bool reads = (op->bufs[i].access & DEV_READ) || op->bufs[i].access == DEV_WRITE;
    if (!reads || b->rep[node->index].state != DEV_INVALID || dev_buffer_valid_node(b, -1) < 0)
      continue;
    cost += dev_copy_via_host(w, b, node) ? 2 * b->bytes : b->bytes;
  }
  return cost;
}

/* Placement on ACCEL_DEVICE_ANY: among the most potent devices serving that run the op, the
 * one where it costs least (place_cost: its inputs already there, a short queue); among
 * equals, the earlier backend of the world's list (CUDA before OpenCL by default), then the
 * lower index. A caller that wants one device names it. */
static dev_node *default_device(dev_world *w, const dev_op *op, dev_buffer *bufs[]) {
  dev_node *best = NULL;
  uint64_t best_cost = 0;
  for (int n = 1; n < w->nnodes; n++) {
    dev_node *node = &w->nodes[n];
    if (node->state != DEV_NODE_SERVING || potency(node) < 0 ||
        dev_node_supports(node, op, bufs) != 0)
      continue;
    uint64_t cost = place_cost(w, op, bufs, node);
    if (best == NULL || potency(node) < potency(best) ||
        (potency(node) == potency(best) &&
         (cost < best_cost || (cost == best_cost && node->backend_pref < best->backend_pref)))) {
      best = node;
      best_cost = cost;
    }
  }
  return best;
}

/* Whether any device (serving or not) runs the op: if none does, the op is not supported
 * here at all, rather than waiting for a device to come back. */
static bool any_runs(dev_world *w, const dev_op *op, dev_buffer *bufs[]) {
  for (int n = 1; n < w->nnodes; n++)
    if (potency(&w->nodes[n]) >= 0 &&
        dev_node_supports(&w->nodes[n], op, bufs) != ACCEL_ENOTSUP) /* runs, or may */
      return true;
  return false;
}

/* A launch runs where its module was built: on a device where an input already is, else on
 * the most potent of them (a CPU seen through OpenCL too: a user kernel may run nowhere
 * else). */
static int launch_rank(const dev_node *node) {
  int p = potency(node);
  return p < 0 ? 2 : p;
}

static dev_node *place_launch(dev_world *w, dev_op *op, dev_buffer *bufs[], dev_module *m) {
  if (op->h.device != ACCEL_DEVICE_ANY)
    return op->h.device >= 0 && op->h.device < w->nnodes - 1 ? &w->nodes[op->h.device + 1] : NULL;
  for (uint32_t i = 0; i < op->nbufs; i++) {
    int n = dev_buffer_valid_node(bufs[i], -1);
    if (n > DEV_HOST_NODE && w->nodes[n].state == DEV_NODE_SERVING && m->per[n].mod)
      return &w->nodes[n];
  }
  dev_node *best = NULL;
  for (int n = 1; n < w->nnodes; n++) {
    dev_node *node = &w->nodes[n];
    if (node->state != DEV_NODE_SERVING || m->per[n].mod == NULL)
      continue;
    if (best == NULL || launch_rank(node) < launch_rank(best) ||
        (launch_rank(node) == launch_rank(best) && node->backend_pref < best->backend_pref))
      best = node;
  }
  return best;
}

/* Where a write lands: on a serving device that holds a valid copy of the buffer, a GPU or
 * accelerator first, straight from the caller's memory (one copy; at pinned speed from memory
 * registered for DMA); else on the host. Data that a device holds is used there next, as far
 * as we can tell: landing on the host instead made each later use on a GPU pay for a memcpy on
 * the host (about 6.5 GB/s on one thread) and then the copy across (bench-spread, two H200s:
 * 2 GiB of writes took 300 ms per repetition). GPUs first: landing on a CPU device would leave
 * a GPU's copy stale, to be brought over again through the host. */
static dev_node *write_node(dev_world *w, const dev_buffer *b) {
  dev_node *first = NULL;
  for (int n = 1; n < w->nnodes; n++) {
    dev_node *node = &w->nodes[n];
    if (b->rep[n].state == DEV_INVALID || node->state != DEV_NODE_SERVING)
      continue;
    if (potency(node) == 0)
      return node;
    if (first == NULL)
      first = node;
  }
  return first != NULL ? first : &w->nodes[DEV_HOST_NODE];
}

/* Where an op runs: writes land where write_node says; reads run where a valid copy is; compute
 * runs on the named device, or for ANY on the most potent device that runs it, where its inputs
 * already are and its queue is short (default_device); a CPU device that is not the most
 * potent still runs an op whose inputs are all there already. */
static dev_node *place(dev_world *w, dev_op *op, dev_buffer *bufs[]) {
  for (uint32_t i = 0; i < op->nbufs; i++) /* shared with another library: it stays there */
    if (bufs[i]->pin_node >= 0 && (op->h.device == ACCEL_DEVICE_ANY || op->h.kind == DEV_OP_WRITE ||
                                   op->h.kind == DEV_OP_READ))
      return &w->nodes[bufs[i]->pin_node];
  if (op->h.kind == DEV_OP_WRITE)
    return write_node(w, bufs[0]);
  if (op->h.kind == DEV_OP_READ) {
    int n = dev_buffer_valid_node(bufs[0], DEV_HOST_NODE);
    return &w->nodes[n < 0 ? DEV_HOST_NODE : n];
  }
  if (op->h.device != ACCEL_DEVICE_ANY) /* compared before adding: no overflow */
    return op->h.device >= 0 && op->h.device < w->nnodes - 1 ? &w->nodes[op->h.device + 1] : NULL;
  dev_node *best = default_device(w, op, bufs);
  if (best != NULL && all_inputs_on(op, bufs, best))
    return best;
  for (int n = 1; n < w->nnodes; n++) {
    dev_node *node = &w->nodes[n];
    if (node != best && node->state == DEV_NODE_SERVING && potency(node) >= 0 &&
        (best == NULL || potency(node) > potency(best)) && all_inputs_on(op, bufs, node) &&
        dev_node_supports(node, op, bufs) == 0)
      return node;
  }
  return best;
}

/* A collective runs on its devices (all serving, of one backend, that run it together); its
 * task on the first. 0 or ACCEL_EINVAL, ACCEL_EDEVLOST, ACCEL_ENOTSUP. */
static int place_collective(dev_world *w, const dev_op *op, dev_buffer *bufs[], dev_node **at) {
  be_device *devs[BE_COLL_MAX_DEVICES];
  uint32_t n = op->u.coll.ndev;
  const be_ops *be = NULL;
  bool down = false;
  for (uint32_t i = 0; i < n; i++) {
    if (op->u.coll.devices[i] >= w->nnodes - 1)
      return ACCEL_EINVAL;
    dev_node *node = &w->nodes[op->u.coll.devices[i] + 1];
    if (be != NULL && node->be != be)
      return ACCEL_ENOTSUP; /* one backend's devices only */
    be = node->be;
    int rc = dev_node_supports(node, op, bufs);
    if (rc == ACCEL_ENOTSUP)
      return rc;
    down = down || rc != 0 || node->state != DEV_NODE_SERVING || node->dev == NULL;
    devs[i] = node->dev;
  }
  if (down)
    return ACCEL_EDEVLOST;
  int rc = be->collective->supports(devs, n);
  *at = &w->nodes[op->u.coll.devices[0] + 1];
  return rc;
}

/* ---- buffers ---- */

static int create_buffer(session_state *s, const dev_op *op) {
  uint64_t handle = op->bufs[0].handle, count = op->bufs[0].count;
  uint32_t slot = handle_slot(handle);
  uint64_t bytes = count * dev_dtype_size((accel_dtype)op->u.create.dtype);
  if (!slot_free(s, handle) || count > (UINT64_MAX >> 4))
    return ACCEL_EINVAL;
  dev_buffer *b = NULL;
  if (!s->args->max_memory || s->acct->memory + bytes <= s->args->max_memory)
    b = dev_buffer_create(s->args->world, (accel_dtype)op->u.create.dtype, count);
  if (b == NULL) { /* the client goes on with the handle: its ops get this error */
    s->table[slot] = (session_entry){.gen = handle_gen(handle), .failed = ACCEL_ENOMEM};
    return ACCEL_ENOMEM;
  }
  s->table[slot] = (session_entry){.gen = handle_gen(handle), .buf = b};
  s->acct->memory += bytes;
  s->acct->buffers++;
  return 0;
}

static void forget_buffer(session_state *s, uint32_t slot) {
  dev_buffer *b = s->table[slot].buf;
  s->table[slot].buf = NULL;
  s->acct->memory -= b->bytes;
  s->acct->buffers--;
  dev_buffer_destroy(b);
}

/* The error of a handle whose create failed (0 if it did not). */
static int create_failure(session_state *s, uint64_t handle) {
  session_entry *e = entry_of(s, handle);
  return e && e->buf == NULL && e->mod == NULL ? e->failed : 0;
}

static int destroy_buffer(session_state *s, uint64_t handle) {
  if (create_failure(s, handle) != 0) {
    s->table[handle_slot(handle)].failed = 0;
    return 0;
  }
  if (resolve(s, handle) == NULL)
    return ACCEL_ESTALE;
  forget_buffer(s, handle_slot(handle));
  return 0;
}

/* ---- memory shared with other libraries of the process ---- */

/* Every buffer the op names is used where it is pinned, if it is: else ACCEL_EBUSY. */
static int check_pins(dev_world *w, const dev_op *op, dev_buffer *bufs[], dev_node *node) {
  for (uint32_t i = 0; i < op->nbufs; i++) {
    int at = dev_op_buf_node(w, op, i, node)->index;
    if (bufs[i]->pin_node >= 0 && bufs[i]->pin_node != at)
      return rt_error_detail(ACCEL_EBUSY,
                             "a buffer of this op is %s device %d: its ops run there, not on "
                             "device %d",
                             bufs[i]->foreign_node >= 0 ? "imported on" : "exported from",
                             bufs[i]->pin_node - 1, at - 1);
  }
  return 0;
}

static int share_check(dev_node *node) {
  char why[160] = "";
  if (node->be->mem_share == NULL || node->be->mem_address == NULL)
    return rt_error_detail(ACCEL_ENOTSUP, "the %s backend's memory cannot be shared",
                           node->be->name);
  if (node->dev == NULL || node->state != DEV_NODE_SERVING)
    return ACCEL_EDEVLOST;
  int rc = node->be->mem_share(node->dev, why, sizeof why);
  return rc == 0 ? 0 : rt_error_detail(rc, "%s", why);
}

/* The export's pin, held (with the buffer: users) until the op finishes, and kept past it
 * unless the op failed. Taken once: an op whose memory was allocated first comes again. */
static void export_pin(dev_op *op, dev_buffer *b, dev_node *node) {
  if (op->u.xport.pinned)
    return;
  b->exports++;
  b->pin_node = node->index;
  b->users++;
  op->u.xport.pinned = b;
}

static void export_unpin(dev_buffer *b) {
  if (b->exports > 0 && --b->exports == 0)
    b->pin_node = b->foreign_node; /* an import stays pinned */
}

static int export_end(session_state *s, uint64_t handle) {
  dev_buffer *b = resolve(s, handle);
  if (b == NULL)
    return ACCEL_ESTALE;
  if (b->exports == 0)
    return rt_error_detail(ACCEL_EINVAL, "export_release: the buffer is not exported");
  export_unpin(b);
  return 0;
}

/* An export of a buffer whose copy on node is valid and that no task uses now (no writer, no
 * reader in flight) needs no device work: answered here, without a round trip through the
 * device's queue (a CUDA host callback alone costs tens of microseconds). The importer may
 * write: the copy becomes the only valid one, as the task's planning would make it. */
static bool export_now(dev_world *w, dev_op *op, dev_buffer *b, dev_node *node) {
  dev_replica *r = &b->rep[node->index];
  if (b->last_writer != NULL || b->nreaders != 0 || r->state == DEV_INVALID || !r->allocated ||
      b->lost || dev_export_info(node, b, op->u.xport.out) != 0)
    return false;
  for (int i = 0; i < w->nnodes; i++)
    b->rep[i].state = DEV_INVALID;
  r->state = DEV_OWNER;
  op->u.xport.now = true;
  return true;
}

/* A buffer over the importer's memory on the op's device. Nothing of it is kept on failure
 * (the importer's release never runs then). */
static int import_buffer(session_state *s, const dev_op *op) {
  dev_world *w = s->args->world;
  uint64_t handle = op->bufs[0].handle, bytes = op->u.import.bytes;
  if (!slot_free(s, handle) || op->h.device < 0 || op->h.device >= w->nnodes - 1)
    return ACCEL_EINVAL;
  dev_node *node = &w->nodes[op->h.device + 1];
  int rc = share_check(node);
  if (rc != 0)
    return rc;
  if (s->args->max_memory && s->acct->memory + bytes > s->args->max_memory)
    return ACCEL_ENOMEM;
  be_mem mem;
  rc = node->be->mem_wrap(node->dev, op->u.import.address, bytes, &mem);
  if (rc != 0)
    return rc;
  dev_buffer *b = dev_buffer_import(w, (accel_dtype)op->u.import.dtype, op->bufs[0].count, node,
                                    mem, op->u.import.release, op->u.import.arg);
  if (b == NULL) {
    node->be->mem_unwrap(node->dev, &mem);
    return ACCEL_ENOMEM;
  }
  s->table[handle_slot(handle)] = (session_entry){.gen = handle_gen(handle), .buf = b};
  s->acct->memory += bytes;
  s->acct->buffers++;
  return 0;
}

/* ---- user modules ---- */

/* The devices a module load builds for: the named one, or every serving device that takes the
 * source. 0, ACCEL_ENOTSUP (none takes it), ACCEL_EDEVLOST (those that would are down). */
static int module_targets(dev_world *w, const dev_op *op, int nodes[], int *n) {
  uint32_t bit = 1u << op->u.module.source;
  bool any = op->h.device == ACCEL_DEVICE_ANY, down = false;
  *n = 0;
  if (!any && (op->h.device < 0 || op->h.device >= w->nnodes - 1))
    return ACCEL_EINVAL;
  for (int i = 1; i < w->nnodes; i++) {
    dev_node *node = &w->nodes[i];
    if (!any && i != op->h.device + 1)
      continue;
    if (!node->caps.read || node->state != DEV_NODE_SERVING) {
      down = down || !node->caps.read || (node->caps.sources & bit);
      continue;
    }
    if (node->caps.sources & bit)
      nodes[(*n)++] = i;
  }
  return *n > 0 ? 0 : down ? ACCEL_EDEVLOST : ACCEL_ENOTSUP;
}

/* Starts building a module: the op finishes when the worker answers (module_built). */
static int module_load(session_state *s, dev_call *call) {
  const dev_op *op = &call->op;
  dev_world *w = s->args->world;
  uint64_t handle = op->bufs[0].handle;
  int nodes[DEV_MAX_NODES], n;
  if (s->args->forbid_modules)
    return ACCEL_EPERM;
  if (!slot_free(s, handle))
    return ACCEL_EINVAL;
  int rc = module_targets(w, op, nodes, &n);
  if (rc != 0)
    return rc;
  dev_module *m = dev_module_create(w);
  if (m == NULL)
    return ACCEL_ENOMEM;
  rc = dev_module_build_start(s->self, DEV_MSG_BUILT, m, nodes, n, op->u.module.source,
                              op->u.module.code, op->u.module.len, op->u.module.options,
                              &s->build_job);
  if (rc != 0) {
    dev_module_unref(m);
    return rc;
  }
  s->table[handle_slot(handle)] = (session_entry){.gen = handle_gen(handle), .mod = m};
  s->building = call;
  return 0;
}

static int module_unload(session_state *s, uint64_t handle) {
  dev_module *m = resolve_module(s, handle);
  if (m == NULL)
    return ACCEL_ESTALE;
  s->table[handle_slot(handle)].mod = NULL;
  dev_module_unref(m); /* launches in flight hold theirs */
  return 0;
}

/* Resolves the module and kernel, checks the launch against them and the device. */
static int launch_prepare(session_state *s, dev_call *call, dev_buffer *bufs[], dev_node **at) {
  dev_world *w = s->args->world;
  dev_op *op = &call->op;
  if (call->mod != NULL) { /* prepared before its memory was allocated: again now */
    dev_module_unref(call->mod);
    call->mod = NULL;
  }
  dev_module *m = resolve_module(s, op->u.launch.module);
  if (m == NULL)
    return ACCEL_ESTALE;
  dev_node *node = place_launch(w, op, bufs, m);
  if (node == NULL)
    return m->status != 0                     ? m->status
           : op->h.device == ACCEL_DEVICE_ANY ? ACCEL_EDEVLOST
                                              : ACCEL_EINVAL;
  if (node->state != DEV_NODE_SERVING)
    return ACCEL_EDEVLOST;
  const dev_module_kernel *k;
  int rc = dev_module_kernel_get(m, node, op->u.launch.name, &k);
  if (rc == ACCEL_ENOTSUP && m->status != 0)
    rc = m->status; /* its build failed there */
  if (rc == 0)
    rc = dev_module_launch_check(node, k, &op->u.launch);
  if (rc != 0)
    return rc;
  dev_module_ref(m);
  call->mod = m;
  call->kernel = k->kernel;
  *at = node;
  return 0;
}

/* ---- ops ---- */

static int resolve_all(session_state *s, dev_op *op, dev_buffer *bufs[]) {
  dev_buf_info info[DEV_OP_MAX_BUFS];
  for (uint32_t i = 0; i < op->nbufs; i++) {
    bufs[i] = resolve(s, op->bufs[i].handle);
    if (bufs[i] == NULL) {
      int failed = create_failure(s, op->bufs[i].handle);
      return failed != 0 ? failed : ACCEL_ESTALE;
    }
    info[i] = (dev_buf_info){bufs[i]->dtype, bufs[i]->count};
  }
  return dev_op_check(op, info);
}

/* Plans the op, or has the memory it lacks allocated on a worker first (the loop never calls
 * the backend's mem_alloc: it may block every client): the session holds the op, and the ops
 * after it, until the job answers (mem_allocated). */
static int plan_or_allocate(session_state *s, dev_call *call, dev_buffer *bufs[], dev_node *node) {
  dev_mem_need needs[2 * DEV_OP_MAX_BUFS];
  uint32_t n = dev_mem_needs(node, &call->op, bufs, needs);
  if (n == 0)
    return dev_plan_op(s->args->world, call, bufs, node);
  int rc = dev_mem_job_submit(s->self, needs, n, DEV_MSG_ALLOCATED);
  if (rc == 0)
    s->allocating = call;
  return rc;
}

static int run_op(session_state *s, dev_call *call) {
  dev_world *w = s->args->world;
  dev_op *op = &call->op;
  int rc = dev_op_check_shape(op);
  if (rc != 0)
    return rc;
  if (op->h.kind == DEV_OP_BUFFER_CREATE)
    return create_buffer(s, op);
  if (op->h.kind == DEV_OP_BUFFER_DESTROY)
    return destroy_buffer(s, op->bufs[0].handle);
  if (op->h.kind == DEV_OP_MODULE_LOAD)
    return module_load(s, call);
  if (op->h.kind == DEV_OP_MODULE_UNLOAD)
    return module_unload(s, op->bufs[0].handle);
  if (op->h.kind == DEV_OP_IMPORT)
    return import_buffer(s, op);
  if (op->h.kind == DEV_OP_EXPORT_END)
    return export_end(s, op->bufs[0].handle);
  dev_buffer *bufs[DEV_OP_MAX_BUFS] = {0};
  rc = resolve_all(s, op, bufs);
  if (rc != 0)
    return rc;
  if (op->h.kind == DEV_OP_LAUNCH) {
    dev_node *at;
    rc = launch_prepare(s, call, bufs, &at);
    if (rc == 0)
      rc = check_pins(w, op, bufs, at);
    return rc != 0 ? rc : plan_or_allocate(s, call, bufs, at);
  }
  if (op->h.kind == DEV_OP_COLLECTIVE) {
    dev_node *leader;
    rc = place_collective(w, op, bufs, &leader);
    if (rc == 0)
      rc = check_pins(w, op, bufs, leader);
    return rc != 0 ? rc : plan_or_allocate(s, call, bufs, leader);
  }
  dev_node *node = place(w, op, bufs);
  if (node == NULL) /* no device serving that runs the op */
    return any_runs(w, op, bufs) ? ACCEL_EDEVLOST : ACCEL_ENOTSUP;
  rc = op->h.kind == DEV_OP_EXPORT ? share_check(node) : dev_node_supports(node, op, bufs);
  if (rc == 0)
    rc = check_pins(w, op, bufs, node);
  if (rc == 0 && op->h.kind == DEV_OP_EXPORT) {
    export_pin(op, bufs[0], node); /* undone as the op finishes if it fails */
    if (export_now(w, op, bufs[0], node))
      return 0;
  }
  return rc != 0 ? rc : plan_or_allocate(s, call, bufs, node);
}

static void handle_op(session_state *s, dev_call *call) {
  dev_session_acct *a = s->acct;
  call->acct = a;
  call->t_issued_ns = uv_hrtime();
  call->trace_id = 0;
  if (s->args->world->trace)
    dev_trace_op_begin(s->args->world, call);
  a->refs++;
  a->in_flight++;
  uint32_t kind = call->op.h.kind; /* a planned op may be done, and freed, when run_op returns */
  int rc = s->args->max_in_flight && a->in_flight > s->args->max_in_flight ? ACCEL_EBUSY
                                                                           : run_op(s, call);
  bool finished_now = rc != 0 || kind == DEV_OP_BUFFER_CREATE || kind == DEV_OP_BUFFER_DESTROY ||
                      kind == DEV_OP_MODULE_UNLOAD || kind == DEV_OP_IMPORT ||
                      kind == DEV_OP_EXPORT_END || (kind == DEV_OP_EXPORT && call->op.u.xport.now);
  if (finished_now)
    dev_op_finished(s->args->world, call, rc);
}

static int fifo_push(op_fifo *q, dev_call *call) {
  if (q->len == q->cap) {
    uint32_t cap = q->cap ? 2 * q->cap : 64;
    dev_call **p = rt_malloc(cap * sizeof *p);
    if (p == NULL)
      return ACCEL_ENOMEM;
    for (uint32_t i = 0; i < q->len; i++)
      p[i] = q->items[(q->head + i) % q->cap];
    rt_free(q->items);
    *q = (op_fifo){p, 0, q->len, cap};
  }
  q->items[(q->head + q->len++) % q->cap] = call;
  return 0;
}

static dev_call *fifo_pop(op_fifo *q) {
  if (q->len == 0)
    return NULL;
  dev_call *call = q->items[q->head];
  q->head = (q->head + 1) % q->cap;
  q->len--;
  return call;
}

/* Ops wait behind a module being built and an op whose memory is being allocated. */
static bool holding(const session_state *s) {
  return s->building != NULL || s->allocating != NULL;
}

static void run_held(session_state *s) {
  dev_call *next;
  while (!holding(s) && (next = fifo_pop(&s->held)) != NULL)
    handle_op(s, next);
}

/* An op arrives: it runs now, or after the module being built or the memory allocated. */
static void take_op(session_state *s, dev_call *call) {
  if (!holding(s)) {
    handle_op(s, call);
    return;
  }
  if (fifo_push(&s->held, call) != 0) { /* cannot keep it in order: fail it */
    call->acct = s->acct;
    s->acct->refs++;
    s->acct->in_flight++;
    dev_op_finished(s->args->world, call, ACCEL_ENOMEM);
  }
}

/* The worker built the module (or did not): the load finishes, held ops run in order. */
static void module_built(session_state *s, accel_msg *msg) {
  char *log = NULL;
  int status = dev_module_build_done(msg, &log);
  dev_call *call = s->building;
  s->building = NULL;
  s->build_job = NULL;
  if (call == NULL) {
    rt_free(log);
    return;
  }
  dev_module *m = resolve_module(s, call->op.bufs[0].handle);
  if (m) /* still there: an unload is held behind the load */
    m->status = status;
  call->result = log;
  dev_op_finished(s->args->world, call, status);
  run_held(s);
}

/* Out of device memory: every node's cached blocks are freed (on workers), once per op. */
static bool empty_caches_once(session_state *s, int status) {
  if (status != ACCEL_ENOMEM || s->alloc_retried)
    return false;
  dev_world *w = s->args->world;
  for (int n = 0; n < w->nnodes; n++)
    dev_mem_cache_flush(&w->nodes[n]);
  s->alloc_retried = true;
  return true;
}

/* The worker allocated the op's memory (or did not): the op is planned from the start (a
 * device may have restarted meanwhile), then the held ops run in order. */
static void mem_allocated(session_state *s, accel_msg *msg) {
  int status = dev_mem_job_done(msg);
  dev_call *call = s->allocating;
  s->allocating = NULL;
  if (call == NULL)
    return;
  if (status == 0 || empty_caches_once(s, status))
    status = run_op(s, call);
  if (s->allocating == NULL) {
    s->alloc_retried = false;
    if (status != 0)
      dev_op_finished(s->args->world, call, status);
  }
  run_held(s);
}

/* ---- fault injection (tests) ---- */

static void forward_status(accel_future *f, int status, void *arg) {
  accel_future_complete(arg, status, NULL, NULL);
  accel_future_release(arg);
}

/* Asks the device actor to fault; the asker's future follows the device's answer. */
static int inject_fault(session_state *s, accel_msg *msg) {
  dev_world *w = s->args->world;
  int n = (int)msg->arg + 1;
  if (n < 1 || n >= w->nnodes)
    return ACCEL_EINVAL;
  accel_future *reply = accel_msg_take_reply(msg), *g;
  accel_msg m = {.type = DEV_MSG_INJECT_FAULT};
  int rc = accel_ask(w->rt, w->nodes[n].actor, &m, &g);
  if (rc != 0) {
    if (reply) {
      accel_future_complete(reply, rc, NULL, NULL);
      accel_future_release(reply);
    }
    return 0;
  }
  if (reply)
    accel_future_then(g, forward_status, reply);
  accel_future_release(g);
  return 0;
}

static int session_receive(accel_actor *self, void *state, accel_msg *msg) {
  session_state *s = state;
  switch (msg->type) {
  case DEV_MSG_OP: {
    dev_call *call = msg->data;
    msg->data = NULL;
    take_op(s, call);
    return 0;
  }
  case DEV_MSG_BUILT:
    module_built(s, msg);
    return 0;
  case DEV_MSG_ALLOCATED:
    mem_allocated(s, msg);
    return 0;
  case DEV_MSG_INJECT_FAULT:
    return inject_fault(s, msg);
  default:
    return 0;
  }
}

static void op_drop(void *data) {
  dev_call *call = data; /* the session ended before taking it */
  if (call->done) {
    call->done(call, ACCEL_ECLOSED);
    return;
  }
  if (call->future) {
    accel_future_complete(call->future, ACCEL_ECLOSED, NULL, NULL);
    accel_future_release(call->future);
  }
  dev_call_free(call);
}

void dev_session_op_msg(accel_msg *m, dev_call *call) {
  *m = (accel_msg){.type = DEV_MSG_OP, .data = call, .drop = op_drop};
}

static int session_start(accel_actor *self, void *state, void *arg) {
  session_state *s = state;
  s->args = arg;
  s->self = self;
  s->acct = rt_calloc(1, sizeof *s->acct);
  if (s->acct == NULL)
    return ACCEL_ENOMEM;
  s->acct->refs = 1; /* session_stop releases it, also after a start that failed below */
  s->acct->id = ++s->args->world->next_session_id;
  s->acct->name = s->args->name;
  s->table = rt_calloc(s->args->max_buffers, sizeof *s->table);
  if (s->table == NULL)
    return ACCEL_ENOMEM;
  s->args->acct = s->acct;
  return 0;
}

static void session_stop(accel_actor *self, void *state) {
  session_state *s = state;
  dev_call *held;
  while ((held = fifo_pop(&s->held)) != NULL)
    op_drop(held);
  rt_free(s->held.items);
  if (s->build_job) /* queued: dropped; running: its compiler killed (acceld) */
    dev_module_build_cancel(s->build_job);
  if (s->building) { /* the build's answer will meet a stale ref and be dropped */
    dev_op_finished(s->args->world, s->building, ACCEL_ECLOSED);
    s->building = NULL;
  }
  if (s->allocating) { /* the same: the job gives its memory back (mem_cache.c) */
    dev_op_finished(s->args->world, s->allocating, ACCEL_ECLOSED);
    s->allocating = NULL;
  }
  if (s->table) {
    for (uint32_t i = 0; i < s->args->max_buffers; i++) {
      if (s->table[i].buf)
        forget_buffer(s, i);
      if (s->table[i].mod)
        dev_module_unref(s->table[i].mod);
    }
    rt_free(s->table);
  }
  s->args->acct = NULL;
  if (s->acct)
    dev_session_acct_release(s->acct);
  if (s->args->on_stop)
    s->args->on_stop(s->args->on_stop_arg, accel_self(self));
}

const accel_behavior dev_session_behavior = {
    .name = "session",
    .state_size = sizeof(session_state),
    .start = session_start,
    .receive = session_receive,
    .stop = session_stop,
};
