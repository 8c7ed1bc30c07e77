/* The device layer's shared state: memory nodes (the host and each device), buffers with a
 * replica per node, and the task graph that orders work on buffers.
 *
 * Everything here is touched on the runtime's loop thread only (the session, device and kernel
 * actors all run there), so it needs no locks. Other threads see it only through messages and
 * futures, and through the atomic transfer counters. */
#ifndef DEV_WORLD_H
#define DEV_WORLD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "accel/accel.h"
#include "actors/mem_cache.h"
#include "backends/backend.h"
#include "ops/call.h"
#include "runtime/attr.h"
#include "runtime/list.h"

#define DEV_MAX_NODES 16 /* node 0 is the host */
#define DEV_HOST_NODE 0

typedef struct dev_task dev_task;
typedef struct dev_module dev_module;
typedef struct dev_buffer dev_buffer;
typedef struct dev_world dev_world;
typedef struct dev_metrics dev_metrics;

/* The kernel actors of a device, one backend queue each. */
typedef enum dev_queue_class {
  DEV_Q_MEM = 0,
  DEV_Q_BLAS,
  DEV_Q_RNG,
  DEV_Q_NN,
  DEV_Q_MOD,  /* user kernels: only on devices whose backend has the module package */
  DEV_Q_COLL, /* collectives: only on devices whose backend has the collective package */
  DEV_Q_COUNT
} dev_queue_class;

/* What a device runs, read from its backend's packages when it opens (support.c), so that
 * placement and device info need not ask the backend (or a device between incarnations). */
typedef struct dev_caps {
  bool read;                                     /* false until the device first opened */
  uint32_t packages;                             /* ACCEL_PKG_* bits */
  uint32_t gemm[ACCEL_DTYPE_MAX_ + 1];           /* per A/B dtype: bit c_type * 4 + math */
  uint32_t vector_dtypes, rng_dtypes, nn_dtypes; /* ACCEL_DTYPE_BIT sets */
  uint32_t sources;                              /* module package: 1u << accel_source */
  be_launch_limits limits;                       /* module package */
  uint32_t coll_dtypes;                          /* collective package */
} dev_caps;

typedef enum dev_node_state {
  DEV_NODE_SERVING = 0,
  DEV_NODE_RESTARTING,
  DEV_NODE_QUARANTINED
} dev_node_state;

typedef struct dev_node {
  dev_world *world;
  int index;           /* node index; 0 is the host */
  accel_device device; /* the client's device index, or -1 for the host */
  const be_ops *be;
  be_device *dev;  /* the open device of the current incarnation; NULL between them */
  accel_ref actor; /* the current DeviceActor */
  accel_ref kernel[DEV_Q_COUNT];
  be_queue *queue[DEV_Q_COUNT]; /* owned by the kernel actors; NULL when not running */
  dev_node_state state;
  uint32_t restarts;
  uint32_t generation;         /* bumped per incarnation: tasks and replicas remember it */
  accel_completion completion; /* default strategy */
  be_device_info info;
  dev_caps caps;
  int backend_index; /* which device of its backend */
  int backend_pref;  /* its backend's place in the world's backend list (placement) */
  struct dev_kernel_spawn {
    struct dev_node *node;
    dev_queue_class qclass;
  } kernel_args[DEV_Q_COUNT]; /* spawn arguments of the kernel actors (outlive them) */
  /* Module builds on workers (module.c): build_mu guards `dev` and `generation` as the
   * workers read them, `builds` (builds in progress, which hold no lock while the driver
   * compiles) and the builds' results. The device actor waits (build_cv) for builds in
   * progress before it closes the device, so none meets a closing device; after an abort (a
   * kernel that never ends, behind which a load may block for good) it waits a short while
   * only, and the backend keeps the device's memory for such a build. */
  pthread_mutex_t build_mu;
  pthread_cond_t build_cv;
  uint32_t builds;
  uint32_t modules_building;  /* module builds running now (reports) */
  uint64_t building_since_ms; /* when the first of them began */
  bool aborted; /* this incarnation's work was abandoned at a deadline (loop thread) */
  /* Ready tasks that met a full kernel mailbox, in order; the kernel actor drains them. */
  struct dev_overflow {
    dev_task *head, *tail;
  } overflow[DEV_Q_COUNT];
  /* Free blocks of device memory (mem_cache.h); workers that allocate or free for it count
   * in `builds` while they use the device, as module builds do. */
  dev_mem_cache cache;
  /* Tasks planned on this node and not done yet (ops and transfers): its load, for placement
   * on ACCEL_DEVICE_ANY. */
  uint32_t queued;
  /* Busy time, measured here for every backend (loop thread; query.c reads it): the time
   * work of this node was submitted and not yet complete, on any of its queues. */
  struct kernel_state *kstate[DEV_Q_COUNT]; /* each running queue's actor (reports) */
  uint32_t busy_running;
  uint64_t busy_since_ns, busy_ns;
  uint64_t busy_window_at_ns, busy_window_ns; /* the previous reading (dev_node_busy_share) */
  double busy_share;                          /* over the last window of at least a second */
} dev_node;

typedef enum dev_replica_state { DEV_INVALID = 0, DEV_SHARED, DEV_OWNER } dev_replica_state;

typedef struct dev_replica {
  uint8_t state; /* dev_replica_state */
  bool allocated;
  uint32_t node_gen; /* the node incarnation that allocated mem */
  be_mem mem;
} dev_replica;

struct dev_buffer {
  dev_world *world;
  rt_list link; /* in the world's list of every buffer */
  accel_dtype dtype;
  size_t count, bytes;
  dev_replica rep[DEV_MAX_NODES];
  dev_task *last_writer; /* not done yet, or NULL */
  dev_task **readers;    /* not done yet, issued after last_writer */
  uint32_t nreaders, readers_cap;
  bool lost;      /* its only valid replica died with a device */
  bool destroyed; /* the handle is gone: free when no task uses it */
  uint32_t users; /* tasks that name it */
  /* Shared with other libraries of the process (accel_buffer_export, accel_buffer_import):
   * the node whose replica is pinned (-1: none; every op on the buffer runs there, session.c),
   * the exports holding the pin, and an imported replica's node (-1: none) with the release
   * its importer gave, called once when that replica goes (replica_free). */
  int pin_node;
  uint32_t exports;
  int foreign_node;
  void (*release)(void *arg);
  void *release_arg;
};

typedef struct dev_edge {
  dev_task *to;
  bool satisfied;
} dev_edge;

typedef enum dev_task_state {
  DEV_TASK_WAITING = 0,
  DEV_TASK_SUBMITTED,
  DEV_TASK_DONE
} dev_task_state;

typedef enum dev_task_kind {
  DEV_TASK_OP = 0,   /* a client op (op != NULL) */
  DEV_TASK_TRANSFER, /* brings a valid copy of `buf[0]` to `node` from `src_node` */
  DEV_TASK_RELEASE   /* frees a destroyed buffer's replicas after its last user */
} dev_task_kind;

struct dev_task {
  dev_task_kind kind;
  dev_world *world;
  dev_call *call;    /* owned, for DEV_TASK_OP */
  dev_node *node;    /* where it runs */
  uint32_t node_gen; /* node incarnation it was planned for */
  dev_queue_class qclass;
  dev_buffer *buf[DEV_OP_MAX_BUFS];
  uint32_t reader_pos[DEV_OP_MAX_BUFS]; /* index in buf[i]'s reader list, or UINT32_MAX */
  uint32_t nbufs;
  int src_node; /* DEV_TASK_TRANSFER: where the valid copy is */
  /* The incarnations whose memory it was planned to use on other nodes: a peer copy's source
   * (src_gen), a collective's members (member_gen[i], devices[i]). A node that restarted
   * since has new memory there, not the data: the task then fails (ACCEL_EDATALOST). */
  uint32_t src_gen;
  uint32_t member_gen[BE_COLL_MAX_DEVICES];
  uint32_t deps;         /* edges not yet satisfied */
  uint32_t preds_alive;  /* predecessors not done yet: they still point here */
  struct dev_edge *succ; /* tasks that wait for this one */
  uint32_t nsucc, succ_cap;
  dev_task **same_node_deps; /* predecessors on this node, not done: wait on their events */
  uint32_t nsame, same_cap;
  dev_task_state state;
  bool dispatched; /* sent to its kernel actor */
  bool counted;    /* a transfer the client counts in flight (on_transfer) until it is done */
  uint8_t lane;    /* its session's lane in its kernel actor (lanes.h) */
  dev_task *overflow_next;
  int status;
  be_event *event; /* made when another queue first waits for this task; owned */
  accel_completion completion;
  struct dev_session_acct *acct; /* the session whose op made it (held), for its counters */
  /* Memory of other nodes this task's queue touches (a peer copy's source, a collective's
   * other devices): bit n for node n. While such a task is in flight it is in the world's
   * `foreign` list, and `foreign_ev` (on this task's queue, after its work) tells when that
   * memory is no longer used: a node that stops waits for it before its memory goes. */
  uint32_t foreign_mask;
  be_event *foreign_ev;
  rt_list foreign_link;
};

struct dev_world {
  accel_runtime *rt;
  dev_node nodes[DEV_MAX_NODES];
  int nnodes;           /* host + devices */
  rt_list buffers;      /* every live buffer (dev_buffer.link) */
  rt_list modules;      /* every live user module (dev_module.link, module.c) */
  rt_list foreign;      /* tasks in flight that use other nodes' memory (dev_task.foreign_link) */
  rt_list foreign_left; /* dev_foreign_left: such tasks that ended before their work did */
  bool fault_injection;
  bool tf32;
  bool cuda_primary;   /* be_open_opts.primary_context */
  uint64_t pinned_max; /* be_open_opts.pinned_max */
  uint32_t max_restarts, restart_window_ms;
  uint32_t loop, worker_link; /* dev_world_opts' */
  atomic_ullong h2d, d2h, d2d, written, read;
  void (*on_op_done)(void *arg, int status); /* every client op, once, on the loop */
  void *on_op_done_arg;
  /* A transfer task planned for a client op begins (+1) or ends (-1), on the loop, with
   * on_op_done_arg; may be NULL. An op may complete before a transfer it waited for reaches the
   * loop (the device ran them in order, the completions came back in any order): counted, the
   * transfer keeps accel_finish waiting until the loop knows it is done, which placement reads. */
  void (*on_transfer)(void *arg, int delta);
  /* A device was quarantined (past its restart limit); on the loop. May be NULL. */
  void (*on_quarantine)(void *arg, accel_device device);
  void *on_quarantine_arg;
  struct dev_metrics *metrics;     /* acceld's op counters (metrics.c); NULL: not recorded */
  struct dev_telemetry *telemetry; /* GPU telemetry (telemetry.c); NULL: off */
  struct dev_trace *trace;         /* the trace being recorded (trace.c); NULL: off */
  uint32_t next_session_id;        /* numbers sessions for traces (loop thread) */
  /* Free lists of the per-op objects made and freed on the loop (malloc was a quarter of
   * the cost of a tiny op). */
  dev_task *task_pool;
  uint32_t task_pool_len;
  void *inflight_pool;
  uint32_t inflight_pool_len;
};

#define DEV_POOL_MAX 4096

/* Runs fn(task) on the world's loop: the one its options named, else (placed as usual, in a
 * runtime of one loop) the caller's loop or loop 0 (accel_post). From backends' threads. */
void dev_world_post(dev_world *w, accel_task *task, void (*fn)(accel_task *task));

/* Frees what the world keeps after its devices and sessions have stopped (the pools). */
void dev_world_fini(dev_world *w);

/* mem_cache.c: a worker thread takes node's device to use it (node->dev, node->be): false if
 * the incarnation `gen` is gone. The device actor waits for every taker to leave before it
 * closes the device. */
bool dev_node_enter(dev_node *node, uint32_t gen);
void dev_node_leave(dev_node *node);

/* buffer.c */
RT_MUST_USE dev_buffer *dev_buffer_create(dev_world *w, accel_dtype dtype, size_t count);
/* The handle went away: freed once no task uses it. */
void dev_buffer_destroy(dev_buffer *b);
/* Memory for b's replica on node: 0 if it has some (now from the node's cache),
 * DEV_ALLOC_MISS if it must be allocated (on a worker: mem_cache.h), ACCEL_EDEVLOST. */
#define DEV_ALLOC_MISS 1
RT_MUST_USE int dev_replica_ensure_alloc(dev_buffer *b, dev_node *node);
void dev_buffer_drop_node(dev_world *w, dev_node *node);
int dev_buffer_valid_node(const dev_buffer *b, int prefer);
void dev_buffer_unuse(dev_buffer *b);
/* An import's buffer: foreign memory `mem` (a mem_wrap of node's backend) is its replica on
 * node, valid there and pinned; release(arg) runs once when it goes. */
RT_MUST_USE dev_buffer *dev_buffer_import(dev_world *w, accel_dtype dtype, size_t count,
                                          dev_node *node, be_mem mem, void (*release)(void *),
                                          void *arg);

/* task.c */
RT_MUST_USE dev_task *dev_task_create(dev_world *w, dev_task_kind kind, dev_node *node,
                                      dev_queue_class q);
/* The bytes t moves count for the session of `op` too (t holds its counters). */
void dev_task_count_for(dev_task *t, const dev_call *call);
void dev_task_pool_free(dev_world *w);
RT_MUST_USE int dev_task_use(dev_task *t, dev_buffer *b, uint32_t access);
void dev_task_ready_check(dev_task *t);
void dev_task_submitted(dev_task *t);
void dev_task_complete(dev_task *t, int status);
/* The task ended: out of the world's `foreign` list. If its work may still run (it failed
 * while queued), its event stays in `foreign_left` until the work has passed it. */
void dev_task_foreign_end(dev_task *t);

/* What a task that ended before its work left behind: the event after that work, on `node`'s
 * queue, and the nodes whose memory it uses. */
typedef struct dev_foreign_left {
  rt_list link;
  dev_node *node;
  be_event *ev;
  uint32_t mask;
} dev_foreign_left;

/* Frees the records of foreign_left whose work has passed (all of them with `all`). */
void dev_foreign_left_sweep(dev_world *w, bool all);

/* plan.c */
/* The node where the op uses its i-th buffer: the op's node, but a collective's buffers each
 * live on their own device. */
dev_node *dev_op_buf_node(dev_world *w, const dev_op *op, uint32_t i, dev_node *node);
/* Where a valid copy of b for `dst` comes from: a device that dst copies from directly (a
 * peer: another GPU before the host), else the host, else any device through the host
 * (*via_host). -1 if b is valid nowhere (never written: zeros). */
int dev_copy_source(dev_world *w, const dev_buffer *b, const dev_node *dst, bool *via_host);
bool dev_nodes_peer(const dev_node *dst, const dev_node *src);
/* Whether b, not valid on dst, would come there through a host replica. */
bool dev_copy_via_host(dev_world *w, const dev_buffer *b, const dev_node *dst);
RT_MUST_USE int dev_plan_op(dev_world *w, dev_call *call, dev_buffer *bufs[DEV_OP_MAX_BUFS],
                            dev_node *node);

#endif
