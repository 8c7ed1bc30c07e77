/* The worker process's side (worker.h): its state, shared by serve.c (channels, tables,
 * completions) and serve_calls.c (one handler per call).
 *
 * A worker serves one or more links, each a set of channels of its own (wire.h): the one it
 * was started with and those acceld attaches later (BW_ATTACH), one per acceld world that
 * uses the devices. Each link has its own state (ws_state: devices opened through it, ids,
 * tables, completions) and its own thread reading its calls; nothing of one link's is
 * named by another's calls. `ws` is the state of the link the running thread serves: each
 * thread of a link sets ws_self when it starts, a backend's host function when it runs. */
#ifndef BW_SERVE_H
#define BW_SERVE_H

#include <pthread.h>
#include <stdatomic.h>

#include "backends/worker/wire.h"

#define BW_MAX_DEVICES 64u

/* A completion the queue's completer thread waits for (serve_complete.c). */
typedef struct ws_cdone {
  uint64_t tag, seq;
  be_event *e;
  int error;
  bool event, flush;
  bool covered; /* e NULL: done when the event of the group's first was (serve_group.c) */
  struct ws_cdone *next;
} ws_cdone;

/* A queue: its backend queue (NULL where creating it failed: `error` then fails its work)
 * and the error of a call that failed on submission, which the next completion queued
 * behind it reports (an op's error is found where acceld no longer waits for the call). */
typedef struct ws_state ws_state;

typedef struct ws_queue {
  ws_state *link; /* the link whose calls made it */
  be_queue *q;
  uint32_t dev;
  int error;
  int pending;
  bool waited; /* a queue_wait since its last completion was queued */
  /* The completer (backends whose host functions come late: CUDA, OpenCL): a thread that
   * waits on an event recorded behind each completion, in order, and sends it. */
  pthread_mutex_t cmu;
  pthread_cond_t ccv;
  pthread_t thread;
  bool has_thread, stop;
  ws_cdone *head, *tail;
  _Atomic uint64_t pushed; /* completions put in head..tail ever: what a polling completer reads */
  uint64_t queued, sent;   /* completions given to the completer, and sent by it */
  be_event **pool;         /* recorded-and-done events, used again */
  size_t npool, pool_cap;
  /* Completions the link's thread holds back while its calls keep coming (serve_group.c):
   * the link's thread only. */
  ws_cdone *ghead, *gtail;
  uint32_t ngrouped;
  bool in_grouping; /* in the link's `grouping` list */
  struct ws_queue *gnext;
} ws_queue;

typedef struct ws_table {
  void **slot;
  size_t cap;
} ws_table;

struct ws_state {
  const be_ops *be;
  uint32_t index;            /* 0: the link the worker was started with */
  int probe_rc, probe_count; /* what the backend's probe found here */
  char probe_why[128];
  be_device *dev[BW_MAX_DEVICES];
  bw_chan cmd, note; /* through `rings` (acceld's region) when acceld passed one */
  bw_rings rings;
  int ack;
  char *stage;
  size_t stage_bytes;
  bool stage_registered;
  pthread_mutex_t note_mu; /* one frame at a time on `note` */
  pthread_mutex_t mu;      /* the tables below, acks and loads */
  pthread_cond_t cv;
  ws_table queues, events, modules, kernels, regions;
  ws_table kernel_module; /* each kernel's module id + 1: an unload forgets its kernels */
  uint64_t *acked;        /* tags acked and not yet taken */
  size_t nacked, acked_cap;
  struct ws_load *loads;   /* loads waiting for acceld's compiler */
  struct ws_evrec *evrecs; /* event records whose completion acceld has not heard of */
  ws_queue *grouping;      /* queues holding completions back (serve_group.c): its thread's */
  uint32_t group_calls;    /* calls since the first of them held one */
  /* The poller (serve_complete.c): flushes asked from inside host functions, under mu. */
  pthread_cond_t poll_cv;
  uint64_t poll_asked, poll_done;
};

extern _Thread_local ws_state *ws_self;
#define ws (*ws_self)

/* serve.c: a fresh link's state (the backend and its probe as in `from`), or NULL. */
ws_state *ws_link_new(const ws_state *from);
/* Reads the link's calls and submits them in order, until its channel ends (then the
 * process ends). */
_Noreturn void ws_serve(ws_state *link);
/* Maps the staging region on fd for the link; false if it cannot. */
bool ws_map_stage(ws_state *l, int fd);
/* Frames of cmd and note through the rings of the region on fd (ring.h), which the link then
 * keeps (and closes); false if fd is not such a region. */
bool ws_use_rings(ws_state *l, int fd);

/* serve.c */
void ws_reply(uint64_t tag, int status, const void *a, size_t alen, const void *b, size_t blen);
void ws_done(uint64_t tag, int status);
/* Under ws.mu. */
void *ws_get(ws_table *t, uint64_t id);
bool ws_put(ws_table *t, uint64_t id, void *p);
/* The open device `dev`, else NULL. */
be_device *ws_device(uint32_t dev);
/* serve_complete.c: a completion of `tag` queued on q behind its work (hold: the queue waits
 * for acceld's ack); if it cannot be queued, it is sent at once with the error. */
void ws_complete_after(ws_queue *q, uint64_t tag, bool hold, bool clear_pending);
/* serve_complete.c, for serve_group.c: the completions first..last (in q's order, none sent)
 * go to q's completer behind one event recorded now (on first; the others `covered`); false
 * if there is no event or completer for them (nothing taken). */
bool ws_completer_take(ws_queue *q, ws_cdone *first, ws_cdone *last);
/* Sends a completion through a host function behind q's work (the fallback). */
void ws_complete_by_host(ws_queue *q, uint64_t tag, int error, uint64_t seq);
/* serve_group.c: a completion of q queued behind its work, held back until the link's
 * calls run out (ws_groups_flush), so one event covers the completions of a burst of calls
 * rather than one each; false if it cannot be held (the caller queues it as before). */
bool ws_group_hold(ws_queue *q, uint64_t tag, int error, uint64_t seq);
#define WS_GROUP_MAX 8            /* completions of a queue behind one event at most */
#define WS_GROUP_CALLS 16         /* calls a held completion may wait behind at most */
#define WS_GROUP_FILL_BYTES 65536 /* a fill this small may pass held completions */
/* q's held completions go to its completer now (before a completion that is not held). */
void ws_group_flush(ws_queue *q);
/* Every queue's of the link (when its calls run out, and before a call that may wait). */
void ws_groups_flush(void);
/* Whether the call (its header and body) only queues work so short that held completions
 * may stay behind it: a notification, a fill of at most WS_GROUP_FILL_BYTES. */
bool ws_group_passes(const bw_hdr *h, const void *body);
/* After a call that passed: past WS_GROUP_CALLS since the link first held a completion,
 * every queue's held ones go. */
void ws_groups_after_call(void);
bool ws_completions_start(ws_state *link);
void ws_queue_init(ws_queue *q);
/* After the backend's queue_destroy: the completer sends what it has, ends, and its events
 * are freed. */
void ws_queue_fini(ws_queue *q);
/* An event record's completion (tag; e: the event recorded, NULL if the record failed). Also
 * sent, in its queue's turn, by the first completion of another queue that waited for it:
 * acceld must not hear of that queue's work done before the event. */
void ws_complete_event_after(ws_queue *q, uint64_t tag, be_event *e);
/* The event is being destroyed: its records are no longer queried. */
void ws_event_forget(be_event *e);
/* The host side of a copy in the staging region, or NULL if [off, off + bytes) is outside. */
void *ws_stage_at(uint64_t off, uint64_t bytes);

/* serve_calls.c: handles one call from `cmd` (body: h->len bytes). */
void ws_handle(const bw_hdr *h, void *body);
/* serve_attach.c: BW_ATTACH with the new link's call channel (taken): its other channels
 * are the first frame there; a thread of its own then serves it. */
void ws_attach(const bw_hdr *h, int fd);
/* serve_share.c: BW_SHARE with its descriptor (taken), BW_UNSHARE; a copy's host side in a
 * shared region, or NULL if [off, off + bytes) is not in region `id`. */
void ws_share(const bw_hdr *h, const void *body, int fd);
void ws_unshare(const bw_hdr *h, const void *body);
/* Before device d closes: the regions registered with it are unregistered (copies from them
 * then run at pageable speed). */
void ws_unshare_device(be_device *d);
void *ws_region_at(uint64_t id, uint64_t off, uint64_t bytes);
/* serve_load.c: both take the body (malloc'd) */
void ws_load(const bw_hdr *h, void *body);
void ws_compiled(const bw_hdr *h, void *body);

#endif
