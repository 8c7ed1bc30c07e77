/* acceld's side of device workers (worker.h): a link is one worker process; proxy devices,
 * queues, events and modules name the worker's by ids. proxy_link.c: the process, its
 * channels, calls and completions; proxy_cork.c: commands gathered per loop iteration;
 * proxy_stage.c: the staging region's pages; proxy_ops.c: the be_ops entries; proxy_pkgs.c: the
 * packages. */
#ifndef BW_PROXY_H
#define BW_PROXY_H

#include <pthread.h>
#include <sys/types.h>

#include "backends/worker/wire.h"
#include "backends/worker/worker.h"
#include "runtime/defer.h"

#define BW_LINK_DEVICES 64u
#define BW_STAGE_PAGE ((size_t)64 << 10)

/* Frames a loop thread sends during one iteration of its loop, written at the iteration's
 * end in one system call (proxy_cork.c). Under the link's send_mu. */
typedef struct bw_cork {
  uint8_t *buf;
  size_t len, cap;
  uint32_t frames; /* in buf */
  bool queued;     /* `job` is on a loop's list, holding the link (bw_link_hold) */
  bool off;        /* the link closes: frames go straight out */
  rt_deferred job;
} bw_cork;

typedef enum bw_kind {
  BW_K_QUEUE = 0,
  BW_K_EVENT,
  BW_K_MODULE,
  BW_K_KERNEL,
  BW_K_REGION,
  BW_K_COUNT
} bw_kind;

/* Ids of one kind: freed ones are used again (the worker's tables are arrays). */
typedef struct bw_ids_pool {
  uint64_t next;
  uint64_t *free;
  size_t nfree, cap;
} bw_ids_pool;

typedef enum bw_pending_kind {
  BW_P_CALL = 1, /* a call a thread waits for */
  BW_P_CALLBACK, /* host_callback / host_notify */
  BW_P_EVENT,    /* an event's record */
  BW_P_H2D,      /* staging pages to give back */
  BW_P_D2H       /* staging pages to copy out, then give back */
} bw_pending_kind;

struct bw_event;

typedef struct bw_pending {
  uint32_t gen;
  uint8_t kind;
  bool hold, answered, in_use;
  bool direct; /* H2D, D2H through a shared region: no staging pages, nothing to copy */
  uint32_t dev;
  int status;
  be_host_fn fn;
  void *arg;
  struct bw_event *event;
  uint64_t seq;
  size_t stage_off, stage_len; /* pages */
  void *dst;                   /* D2H */
  size_t bytes;
  void *body; /* CALL: the reply (malloc'd), BW_COMPILE's target while `compile` */
  uint32_t body_len;
  bool compile;
  uint32_t next_free;
} bw_pending;

/* A host function to run on the link's callback thread. */
typedef struct bw_cb {
  be_host_fn fn;
  void *arg;
  int status;
  bool hold;
  uint64_t tag;
  struct bw_cb *next;
} bw_cb;

struct bw_proc;

typedef struct bw_link {
  const be_ops *real;
  struct bw_proc *proc; /* the worker process it reaches (NULL: a link of its own, tests') */
  uint32_t index;       /* its place in the process's links; 0: the one it was started with */
  pid_t pid;
  uint64_t began_ns;   /* when it was made (its worker's busy time counts from there) */
  uint64_t busy_shown; /* the busy time last reported: never less (bw_links_busy) */
  uint64_t completions_shown, events_shown; /* the worker's counts last reported, likewise */
  bw_chan cmd, note; /* through the rings below when the worker was started with them */
  bw_rings rings;
  int ack, stage_fd;
  char *stage;
  size_t stage_bytes, stage_pages;
  uint8_t *page_used;
  pthread_t reader, caller;
  bool has_reader, has_caller;
  /* host_callback's functions run on `caller`, in the order their completions came: one
   * that blocks (tests' gates do) holds the others, never the replies. host_notify's, quick
   * by contract, run on the reader as their completions come. */
  bw_cb *cb_head, *cb_tail;
  pthread_cond_t
      cb_cv; /* the caller waits on it alone: completions others wait for do not wake it */
  bool cb_end;
  uint64_t cb_queued, cb_ran;
  bool reader_done;        /* the worker's end was seen: everything pending was failed */
  pthread_mutex_t send_mu; /* frames on cmd, and the cork below */
  bw_cork cork;
  /* Frames on ack: never under send_mu. A call blocked on a full cmd socket (the worker busy
   * in a driver call that waits for the stream a holding host function keeps) would otherwise
   * keep back the ack that function waits for. */
  pthread_mutex_t ack_mu;
  pthread_mutex_t mu; /* everything below */
  pthread_cond_t cv;
  bool dead;
  int objs;  /* events that may outlive their device: the struct lives while there are */
  bool torn; /* the process is over (refs reached 0) */
  bool lost[BW_LINK_DEVICES];
  bw_ids_pool ids[BW_K_COUNT];
  bw_pending *pend;
  uint32_t npend, pend_cap, free_head;
} bw_link;

/* A worker process and the links acceld reaches it through, one per world of acceld's that
 * opened devices there (be_open_opts.worker_link); link[0] is the one it was started with
 * and carries the attaching of the others. Under proxy_link.c's lock. */
#define BW_MAX_LINKS 16u
typedef struct bw_proc {
  const be_ops *real;
  int group; /* the device index it serves, or -1: every device of the backend */
  pid_t pid;
  int refs;  /* open devices over any of its links: the process lives while there are */
  bool dead; /* killed: no new device joins it */
  bw_link *link[BW_MAX_LINKS];
  bool attaching[BW_MAX_LINKS]; /* a thread is attaching that link, links_mu let go */
  struct bw_proc *next;
} bw_proc;

struct bw_pqueue;

typedef struct bw_pdev {
  bw_link *link;
  pthread_mutex_t qmu;      /* queues */
  struct bw_pqueue *queues; /* those not destroyed: close frees them (backend.h) */
  const be_ops *real;
  uint32_t index;
  be_open_opts opts;
  bw_caps caps;
  int8_t peer[BW_LINK_DEVICES]; /* can_peer answers: -1 not asked */
} bw_pdev;

typedef struct bw_pqueue {
  bw_pdev *dev;
  bw_link *link;
  uint64_t id;
  struct bw_pqueue *prev, *next; /* the device's queues */
} bw_pqueue;

typedef struct bw_event {
  bw_link *link;
  uint32_t dev;
  uint64_t id;
  int refs; /* the owner, and each record in flight (under link->mu) */
  uint64_t recorded, done;
  int status;
} bw_event;

typedef struct bw_pkernel {
  uint64_t id;
  char name[BE_KERNEL_NAME_MAX + 1];
  be_kernel_info info;
  struct bw_pkernel *next;
} bw_pkernel;

typedef struct bw_pmodule {
  bw_pdev *dev;
  bw_link *link;
  uint64_t id;
  pthread_mutex_t mu;
  bw_pkernel *kernels;
} bw_pmodule;

/* The answer after a reply's status (a reply's body is malloc'd: aligned for any type). */
static inline void *bw_answer(void *body) {
  return (char *)body + sizeof(bw_reply);
}

/* proxy_link.c */
extern bw_options bw_opts;
/* Link `link` (< BW_MAX_LINKS) of the live worker for device `index` of `real`, the worker
 * started and the link attached if there are none: one more ref of the worker. */
int bw_link_get(const be_ops *real, uint32_t index, uint32_t link, bw_link **out);
/* The devices of `real` as a worker process sees them (a worker started for the question):
 * device numbers are the workers', whatever acceld's own process would see. */
int bw_link_probe(const be_ops *real, int *count, char *why, size_t why_len);
/* Tests and the fuzzer: a link over channels the caller made, with no process behind it (the
 * other ends play the worker); rings: a region of bw_rings_create's whose rings then carry
 * cmd's and note's frames (the link maps its own), or -1. bw_link_end closes the channels and
 * frees it. */
int bw_link_adopt(const be_ops *real, int cmd, int note, int ack, int rings, size_t stage_bytes,
                  bw_link **out);
void bw_link_end(bw_link *l);
/* One ref less of l's worker; the last one ends it and its links. kill: end it at once
 * (SIGKILL): every link of it fails what it has pending. */
void bw_link_put(bw_link *l, bool kill_it);
/* Sends a frame on cmd; false if the worker is gone. For frames no thread waits on: from a
 * loop thread they go out at the end of its loop's iteration (proxy_cork.c). */
bool bw_link_send(bw_link *l, uint16_t type, uint64_t tag, const void *a, size_t alen,
                  const void *b, size_t blen, const void *c, size_t clen);

/* proxy_cork.c, send_mu held (but bw_cork_close and bw_cork_free): a frame gathered for the end
 * of the calling loop thread's iteration (false: write it now); the cork written now; the link
 * closing; its memory going. */
bool bw_cork_frame(bw_link *l, uint16_t type, uint64_t tag, const void *a, size_t alen,
                   const void *b, size_t blen, const void *c, size_t clen);
bool bw_cork_flush(bw_link *l);
void bw_cork_close(bw_link *l);
void bw_cork_free(bw_link *l);
/* Writes the cork now (send_mu not held): before a thread waits for the worker. */
void bw_link_flush(bw_link *l);
/* A write failed: the worker is ended and everything pending fails (ACCEL_EDEVLOST). */
void bw_link_fail(bw_link *l);
/* mu held: the worker is gone or going; every device of the link is lost, calls give up. */
void bw_link_mark_dead(bw_link *l);
/* Creates an object of kind k on device d's worker (type: BW_Q_CREATE, BW_EV_CREATE): its id in
 * *id; ACCEL_EDEVLOST if the worker is gone (the id is given back). */
int bw_link_create(bw_link *l, uint32_t dev, bw_kind k, uint16_t type, uint64_t *id);
typedef int (*bw_compile_fn)(void *arg, const char *target, void **answer, size_t *len);
/* A call and its reply: 0 with the reply's body (malloc'd: the caller frees) in *body, or
 * ACCEL_EDEVLOST. compile (may be NULL): how to answer a BW_COMPILE on the way. */
int bw_link_call(bw_link *l, uint16_t type, const void *a, size_t alen, const void *b, size_t blen,
                 const void *c, size_t clen, void **body, uint32_t *body_len, bw_compile_fn compile,
                 void *compile_arg);
/* As bw_link_call, the frame (`a` only) with descriptor `pass` (SCM_RIGHTS). */
int bw_link_call_fd(bw_link *l, uint16_t type, const void *a, size_t alen, int pass, void **body,
                    uint32_t *body_len);
/* A pending completion (under l->mu): its tag, or 0 if the worker is gone. */
uint64_t bw_pending_add(bw_link *l, const bw_pending *p);
/* Forgets a pending completion whose call could not be sent (under l->mu): false if it was not
 * there any more (the worker's end completed it with ACCEL_EDEVLOST meanwhile). */
bool bw_pending_drop(bw_link *l, uint64_t tag);
uint64_t bw_id_take(bw_link *l, bw_kind k);
void bw_id_give(bw_link *l, bw_kind k, uint64_t id);
bool bw_link_lost(bw_link *l, uint32_t dev);
/* Keeps the link's memory (not its process) for an object that may outlive its device. */
void bw_link_hold(bw_link *l);
void bw_link_release(bw_link *l);
void bw_link_kill(bw_link *l);
/* Waits until every host function whose completion has come (all of them, if the worker is
 * gone) has run: what "called at the latest in queue_destroy / close" needs. */
void bw_link_drain(bw_link *l);

/* proxy_stage.c (under l->mu): pages for `bytes`, waiting for some to come back; false if
 * the worker went. */
bool bw_stage_take(bw_link *l, size_t bytes, size_t *off);
void bw_stage_give(bw_link *l, size_t off, size_t bytes);
bool bw_stage_init(bw_link *l, size_t bytes);
void bw_stage_fini(bw_link *l);

/* proxy_share.c: clients' memfds the worker maps too (backend.h: host_register_shared) */
int bw_share_register(bw_pdev *d, void *p, size_t bytes, int fd);
void bw_share_unregister(void *p);
/* Whether [p, p + bytes) lies in a region shared with l: its id and offset. */
bool bw_share_find(bw_link *l, const void *p, size_t bytes, uint64_t *id, uint64_t *off);

/* proxy_check.c: 0, ACCEL_EINVAL (out of range, bad shape), ACCEL_ENOTSUP (not run here) */
int bw_check_span(be_mem m, size_t off, size_t count, size_t size);
int bw_check_host(const void *p, size_t bytes);
int bw_check_gemm(const bw_pdev *d, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b,
                  size_t b_off, be_mem c, size_t c_off);
int bw_check_vec(const bw_pdev *d, uint32_t dtype, size_t n, be_mem x, size_t x_off,
                 const be_mem *y, size_t y_off);
int bw_check_rng(const bw_pdev *d, uint32_t dtype, be_mem dst, size_t off, size_t count,
                 const be_rng_args *r);
int bw_check_binary(const bw_pdev *d, uint32_t dtype, const be_binary_args *g, be_mem dst,
                    size_t dst_off, be_mem a, size_t a_off, be_mem b, size_t b_off);
int bw_check_convert(const bw_pdev *d, uint32_t dst_dtype, uint32_t src_dtype,
                     const be_convert_args *g, be_mem dst, size_t dst_off, be_mem src,
                     size_t src_off);
int bw_check_where(const bw_pdev *d, uint32_t dtype, const be_where_args *g, be_mem dst,
                   size_t dst_off, be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b,
                   size_t b_off);
int bw_check_reduce(const bw_pdev *d, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                    size_t dst_off, be_mem src, size_t src_off);
int bw_check_nn(const bw_pdev *d, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                size_t src_off, size_t count);

/* proxy_pkgs.c: fills the packages of a proxy table after those of real. */
void bw_pkgs_fill(const be_ops *real, be_blas_pkg *blas, be_rng_pkg *rng, be_nn_pkg *nn,
                  be_module_pkg *module, be_coll_pkg *coll);

#endif
