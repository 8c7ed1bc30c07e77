/* The proxy's be_ops (worker.h): devices, queues, events, memory, copies and host functions
 * of a backend served by worker processes. Calls that need an answer (open, mem_alloc,
 * queue_destroy) wait for the worker; submissions are sent and return: an error the worker
 * finds on submission comes back through the queue's next completion, as errors found while
 * running do. Host data of copies goes through the staging region in chunks of at most a
 * quarter of it. */
#include <stdlib.h>
#include <string.h>

#include "backends/worker/proxy.h"
#include "runtime/status.h"

#define PROXY_TABLES 4

typedef struct proxy_table {
  const be_ops *real;
  be_ops ops;
  be_blas_pkg blas;
  be_rng_pkg rng;
  be_nn_pkg nn;
  be_module_pkg module;
  be_coll_pkg coll;
} proxy_table;

static proxy_table tables[PROXY_TABLES];
static pthread_mutex_t tables_mu = PTHREAD_MUTEX_INITIALIZER;

static bw_pdev *D(be_device *d) {
  return (bw_pdev *)d;
}

static bw_pqueue *Q(be_queue *q) {
  return (bw_pqueue *)q;
}

static bw_event *E(be_event *e) {
  return (bw_event *)e;
}

/* ACCEL_EDEVLOST once the device (or its worker) is lost: sticky, as the contract says. */
static int lost(bw_link *l, uint32_t dev) {
  return bw_link_lost(l, dev) ? ACCEL_EDEVLOST : 0;
}

/* ---- devices ---- */

/* Asked of a worker: the devices are numbered as workers see them (an OpenCL platform may
 * show more devices in a process where CUDA is initialised than in a fresh one). */
static int proxy_probe(int t, int *count, char *why, size_t why_len) {
  return bw_link_probe(tables[t].real, count, why, why_len);
}
static int probe0(int *c, char *w, size_t n) {
  return proxy_probe(0, c, w, n);
}
static int probe1(int *c, char *w, size_t n) {
  return proxy_probe(1, c, w, n);
}
static int probe2(int *c, char *w, size_t n) {
  return proxy_probe(2, c, w, n);
}
static int probe3(int *c, char *w, size_t n) {
  return proxy_probe(3, c, w, n);
}
static int (*const probes[PROXY_TABLES])(int *, char *, size_t) = {probe0, probe1, probe2, probe3};

/* Opens device `index` of real in a worker (joining the backend's, or a fresh one). */
static int attach(bw_pdev *d, const be_open_opts *opts) {
  int rc = bw_link_get(d->real, d->index, opts->worker_link, &d->link);
  if (rc != 0)
    return rc;
  bw_open o = {.dev = d->index, .opts = *opts, .stage_bytes = d->link->stage_bytes};
  void *body = NULL;
  uint32_t len = 0;
  rc = bw_link_call(d->link, BW_OPEN, &o, sizeof o, NULL, 0, NULL, 0, &body, &len, NULL, NULL);
  if (rc == 0)
    rc = ((bw_reply *)body)->status;
  if (rc == 0 && len < sizeof(bw_reply) + sizeof(bw_opened))
    rc = ACCEL_EPROTO;
  if (rc == 0) {
    memcpy(&d->caps, (char *)body + sizeof(bw_reply), sizeof d->caps);
    d->caps.info.name[sizeof d->caps.info.name - 1] = '\0'; /* the worker's word, checked */
    d->caps.info.pci_bus_id[sizeof d->caps.info.pci_bus_id - 1] = '\0';
    pthread_mutex_lock(&d->link->mu);
    if (!d->link->dead) /* a worker that died after answering stays lost */
      __atomic_store_n(&d->link->lost[d->index], false, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&d->link->mu);
  }
  free(body);
  if (rc != 0) {
    bw_link_put(d->link, false);
    d->link = NULL;
  }
  return rc;
}

/* Closes the device in its worker. A lost device's worker is killed: CUDA allows no new
 * context in a process whose context broke, and a kernel that never ends ends with it. */
static void detach(bw_pdev *d) {
  bw_link *l = d->link;
  if (l == NULL)
    return;
  bool faulted = bw_link_lost(l, d->index);
  if (!faulted) {
    void *body = NULL;
    uint32_t len = 0;
    bw_dev b = {d->index};
    if (bw_link_call(l, BW_CLOSE, &b, sizeof b, NULL, 0, NULL, 0, &body, &len, NULL, NULL) != 0)
      faulted = true;
    free(body);
  }
  bw_link_drain(l); /* every host function of the device has run when close returns */
  bw_link_put(l, faulted);
  d->link = NULL;
}

static int proxy_open_real(const be_ops *real, int index, const be_open_opts *opts,
                           be_device **out) {
  if (index < 0 || (uint32_t)index >= BW_LINK_DEVICES)
    return ACCEL_ENOENT;
  bw_pdev *d = calloc(1, sizeof *d);
  if (d == NULL)
    return ACCEL_ENOMEM;
  d->real = real;
  d->index = (uint32_t)index;
  pthread_mutex_init(&d->qmu, NULL);
  d->opts = opts ? *opts : (be_open_opts){0};
  memset(d->peer, -1, sizeof d->peer);
  int rc = attach(d, &d->opts);
  if (rc != 0) {
    pthread_mutex_destroy(&d->qmu);
    free(d);
    return rc;
  }
  *out = (be_device *)d;
  return 0;
}

static int open0(int i, const be_open_opts *o, be_device **d) {
  return proxy_open_real(tables[0].real, i, o, d);
}
static int open1(int i, const be_open_opts *o, be_device **d) {
  return proxy_open_real(tables[1].real, i, o, d);
}
static int open2(int i, const be_open_opts *o, be_device **d) {
  return proxy_open_real(tables[2].real, i, o, d);
}
static int open3(int i, const be_open_opts *o, be_device **d) {
  return proxy_open_real(tables[3].real, i, o, d);
}
static int (*const opens[PROXY_TABLES])(int, const be_open_opts *, be_device **) = {open0, open1,
                                                                                    open2, open3};

/* Closing frees what the caller did not: the device's queues (their worker side goes with the
 * device's close there). */
static void proxy_close(be_device *dev) {
  bw_pdev *d = D(dev);
  detach(d);
  while (d->queues) {
    bw_pqueue *q = d->queues;
    d->queues = q->next;
    free(q);
  }
  pthread_mutex_destroy(&d->qmu);
  free(d);
}

static int proxy_info(be_device *dev, be_device_info *out) {
  *out = D(dev)->caps.info;
  return 0;
}

static int proxy_status(be_device *dev) {
  bw_pdev *d = D(dev);
  return d->link == NULL ? ACCEL_EDEVLOST : lost(d->link, d->index);
}

/* A fresh context: in a fresh worker if the device was lost (its old one is killed). */
static int proxy_reset(be_device *dev) {
  bw_pdev *d = D(dev);
  detach(d);
  return attach(d, &d->opts);
}

static int proxy_inject(be_device *dev) {
  bw_pdev *d = D(dev);
  void *body = NULL;
  uint32_t len = 0;
  bw_dev b = {d->index};
  int rc = bw_link_call(d->link, BW_INJECT, &b, sizeof b, NULL, 0, NULL, 0, &body, &len, NULL,
                        NULL);
  if (rc == 0)
    rc = ((bw_reply *)body)->status;
  free(body);
  if (rc == 0) {
    pthread_mutex_lock(&d->link->mu);
    __atomic_store_n(&d->link->lost[d->index], true, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&d->link->mu);
  }
  return rc;
}

/* The work ran past its deadline: the worker is killed, which stops it (no driver can stop a
 * kernel inside a process); every pending completion then reports ACCEL_EDEVLOST. */
static void proxy_abort(be_device *dev) {
  bw_pdev *d = D(dev);
  if (d->link != NULL)
    bw_link_kill(d->link);
}

/* ---- queues ---- */

static int proxy_queue_create(be_device *dev, be_queue **out) {
  bw_pdev *d = D(dev);
  int rc = lost(d->link, d->index);
  bw_pqueue *q = rc ? NULL : calloc(1, sizeof *q);
  if (rc != 0 || q == NULL)
    return rc ? rc : ACCEL_ENOMEM;
  *q = (bw_pqueue){.dev = d, .link = d->link};
  if (bw_link_create(d->link, d->index, BW_K_QUEUE, BW_Q_CREATE, &q->id) != 0) {
    free(q);
    return ACCEL_EDEVLOST;
  }
  pthread_mutex_lock(&d->qmu);
  q->next = d->queues;
  if (d->queues)
    d->queues->prev = q;
  d->queues = q;
  pthread_mutex_unlock(&d->qmu);
  *out = (be_queue *)q;
  return 0;
}

static void unlink_queue(bw_pqueue *q) {
  bw_pdev *d = q->dev;
  pthread_mutex_lock(&d->qmu);
  if (q->prev)
    q->prev->next = q->next;
  else
    d->queues = q->next;
  if (q->next)
    q->next->prev = q->prev;
  pthread_mutex_unlock(&d->qmu);
}

static void proxy_queue_destroy(be_queue *queue) {
  bw_pqueue *q = Q(queue);
  unlink_queue(q);
  bw_ids b = {.id = q->id};
  void *body = NULL;
  uint32_t len = 0;
  if (bw_link_call(q->link, BW_Q_DESTROY, &b, sizeof b, NULL, 0, NULL, 0, &body, &len, NULL,
                   NULL) == 0)
    bw_id_give(q->link, BW_K_QUEUE, q->id);
  free(body);
  bw_link_drain(q->link); /* its host functions have all run when this returns */
  free(q);
}

/* Sends a submission on q: 0, or ACCEL_EDEVLOST (the device or its worker is gone). */
static int submit(bw_pqueue *q, uint16_t type, uint64_t tag, const void *a, size_t alen,
                  const void *b, size_t blen) {
  int rc = lost(q->link, q->dev->index);
  if (rc == 0 && !bw_link_send(q->link, type, tag, a, alen, b, blen, NULL, 0))
    rc = ACCEL_EDEVLOST;
  return rc;
}

/* A submission with a completion: the pending record, then the frame. */
static int submit_pending(bw_pqueue *q, const bw_pending *p, uint16_t type, const void *a,
                          size_t alen) {
  int rc = lost(q->link, q->dev->index);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&q->link->mu);
  uint64_t tag = bw_pending_add(q->link, p);
  pthread_mutex_unlock(&q->link->mu);
  if (tag == 0)
    return ACCEL_EDEVLOST;
  if (submit(q, type, tag, a, alen, NULL, 0) == 0)
    return 0;
  pthread_mutex_lock(&q->link->mu);
  bool dropped = bw_pending_drop(q->link, tag); /* never sent: nothing will complete it */
  pthread_mutex_unlock(&q->link->mu);
  /* Not there any more: the worker's end completed it (ACCEL_EDEVLOST) between the two, so
   * it counts as submitted; failing the call too would complete it twice. */
  return dropped ? ACCEL_EDEVLOST : 0;
}

/* ---- memory and copies ---- */

static int proxy_mem_alloc(be_device *dev, size_t bytes, be_mem *out) {
  bw_pdev *d = D(dev);
  bw_mem_op m = {.dev = d->index, .bytes = bytes};
  void *body = NULL;
  uint32_t len = 0;
  int rc = lost(d->link, d->index);
  if (rc == 0)
    rc = bw_link_call(d->link, BW_MEM_ALLOC, &m, sizeof m, NULL, 0, NULL, 0, &body, &len, NULL,
                      NULL);
  if (rc == 0)
    rc = ((bw_reply *)body)->status;
  if (rc == 0 && len >= sizeof(bw_reply) + sizeof m)
    *out = ((bw_mem_op *)bw_answer(body))->mem;
  else if (rc == 0)
    rc = ACCEL_EPROTO;
  free(body);
  return rc;
}

static void proxy_mem_free(be_device *dev, be_mem *mem) {
  bw_pdev *d = D(dev);
  bw_mem_op m = {.dev = d->index, .mem = *mem};
  if (d->link != NULL && !bw_link_lost(d->link, d->index))
    (void)bw_link_send(d->link, BW_MEM_FREE, 0, &m, sizeof m, NULL, 0, NULL, 0);
  *mem = (be_mem){0};
}

/* One chunk of a host copy: staging pages, the data in (H2D), the call. */
static int host_chunk(bw_pqueue *q, bool h2d, bw_copy *c, char *host) {
  bw_link *l = q->link;
  size_t off;
  pthread_mutex_lock(&l->mu);
  bool ok = bw_stage_take(l, c->bytes, &off);
  pthread_mutex_unlock(&l->mu);
  if (!ok)
    return ACCEL_EDEVLOST;
  if (h2d)
    memcpy(l->stage + off, host, c->bytes);
  c->stage_off = off;
  bw_pending p = {.kind = h2d ? BW_P_H2D : BW_P_D2H,
                  .dev = q->dev->index,
                  .stage_off = off,
                  .stage_len = c->bytes,
                  .dst = host,
                  .bytes = c->bytes};
  int rc = submit_pending(q, &p, h2d ? BW_H2D : BW_D2H, c, sizeof *c);
  if (rc != 0) {
    pthread_mutex_lock(&l->mu);
    bw_stage_give(l, off, c->bytes);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
  }
  return rc;
}

/* A host copy from or into a client's shared region that the worker maps: one call, no
 * staging, no copy here. */
static int direct_copy(bw_pqueue *q, bool h2d, bw_copy *c, uint64_t region, uint64_t off) {
  c->region = region;
  c->stage_off = off;
  bw_pending p = {.kind = h2d ? BW_P_H2D : BW_P_D2H, .dev = q->dev->index, .direct = true};
  return submit_pending(q, &p, h2d ? BW_H2D : BW_D2H, c, sizeof *c);
}

static int host_copy(bw_pqueue *q, bool h2d, be_mem mem, size_t mem_off, char *host, size_t bytes) {
  uint64_t region, region_off;
  if (bytes > 0 && bw_share_find(q->link, host, bytes, &region, &region_off)) {
    bw_copy c = {.queue = q->id, .bytes = bytes};
    if (h2d)
      c.dst = mem, c.dst_off = mem_off;
    else
      c.src = mem, c.src_off = mem_off;
    return direct_copy(q, h2d, &c, region, region_off);
  }
  size_t chunk = q->link->stage_bytes / 4;
  int rc = 0;
  for (size_t done = 0; rc == 0 && done < bytes; done += chunk) {
    size_t n = bytes - done < chunk ? bytes - done : chunk;
    bw_copy c = {.queue = q->id, .bytes = n};
    if (h2d) {
      c.dst = mem;
      c.dst_off = mem_off + done;
    } else {
      c.src = mem;
      c.src_off = mem_off + done;
    }
    rc = host_chunk(q, h2d, &c, host + done);
  }
  return rc;
}

static int proxy_h2d(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes) {
  int rc = bw_check_host(src, bytes);
  if (rc == 0)
    rc = bw_check_span(dst, dst_off, bytes, 1);
  if (rc != 0)
    return rc;
  return host_copy(Q(q), true, dst, dst_off, (char *)src, bytes);
}

static int proxy_d2h(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes) {
  int rc = bw_check_host(dst, bytes);
  if (rc == 0)
    rc = bw_check_span(src, src_off, bytes, 1);
  if (rc != 0)
    return rc;
  return host_copy(Q(q), false, src, src_off, dst, bytes);
}

static int proxy_d2d(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                     size_t bytes) {
  if (bw_check_span(dst, dst_off, bytes, 1) != 0 || bw_check_span(src, src_off, bytes, 1) != 0)
    return ACCEL_EINVAL;
  bw_copy c = {.queue = Q(q)->id,
               .dst = dst,
               .src = src,
               .dst_off = dst_off,
               .src_off = src_off,
               .bytes = bytes};
  return submit(Q(q), BW_D2D, 0, &c, sizeof c, NULL, 0);
}

/* Peers only within one worker (the backend's, for backends that have peers). */
static bool proxy_can_peer(be_device *dst, be_device *src) {
  bw_pdev *d = D(dst), *s = D(src);
  if (d->link == NULL || d->link != s->link)
    return false;
  if (d->peer[s->index] < 0) {
    bw_ids b = {.dev = d->index, .id = s->index};
    void *body = NULL;
    uint32_t len = 0;
    int rc = bw_link_call(d->link, BW_CAN_PEER, &b, sizeof b, NULL, 0, NULL, 0, &body, &len, NULL,
                          NULL);
    d->peer[s->index] = rc == 0 && ((bw_reply *)body)->status == 1;
    free(body);
  }
  return d->peer[s->index] == 1;
}

static int proxy_copy_peer(be_queue *q, be_mem dst, size_t dst_off, be_device *src_dev, be_mem src,
                           size_t src_off, size_t bytes) {
  bw_pdev *s = D(src_dev);
  if (s == NULL || s->link != Q(q)->link || bw_check_span(dst, dst_off, bytes, 1) != 0 ||
      bw_check_span(src, src_off, bytes, 1) != 0)
    return ACCEL_EINVAL;
  bw_copy c = {.queue = Q(q)->id,
               .dst = dst,
               .src = src,
               .dst_off = dst_off,
               .src_off = src_off,
               .bytes = bytes,
               .src_dev = s->index};
  return submit(Q(q), BW_PEER, 0, &c, sizeof c, NULL, 0);
}

static int proxy_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize,
                      uint64_t value) {
  if ((esize != 1 && esize != 2 && esize != 4 && esize != 8) ||
      bw_check_span(dst, off, count, esize) != 0)
    return ACCEL_EINVAL;
  bw_fill f = {
      .queue = Q(q)->id, .dst = dst, .off = off, .count = count, .value = value, .esize = esize};
  return submit(Q(q), BW_FILL, 0, &f, sizeof f, NULL, 0);
}

/* ---- events ---- */

static int proxy_event_create(be_device *dev, be_event **out) {
  bw_pdev *d = D(dev);
  int rc = lost(d->link, d->index);
  bw_event *e = rc ? NULL : calloc(1, sizeof *e);
  if (rc != 0 || e == NULL)
    return rc ? rc : ACCEL_ENOMEM;
  *e = (bw_event){.link = d->link, .dev = d->index, .refs = 1};
  if (bw_link_create(d->link, d->index, BW_K_EVENT, BW_EV_CREATE, &e->id) != 0) {
    free(e);
    return ACCEL_EDEVLOST;
  }
  bw_link_hold(d->link);
  *out = (be_event *)e;
  return 0;
}

static void proxy_event_destroy(be_event *ev) {
  bw_event *e = E(ev);
  bw_link *l = e->link;
  bw_ids b = {.id = e->id};
  /* Only while the worker that has it is alive: ids die with their worker. The link outlives
   * its events (close destroys them first, as the contract asks of queues). */
  if (bw_link_send(l, BW_EV_DESTROY, 0, &b, sizeof b, NULL, 0, NULL, 0))
    bw_id_give(l, BW_K_EVENT, e->id);
  pthread_mutex_lock(&l->mu);
  if (--e->refs == 0)
    free(e);
  pthread_mutex_unlock(&l->mu);
  bw_link_release(l);
}

static int proxy_event_record(be_event *ev, be_queue *queue) {
  bw_event *e = E(ev);
  bw_pqueue *q = Q(queue);
  pthread_mutex_lock(&e->link->mu);
  uint64_t seq = ++e->recorded;
  e->refs++;
  pthread_mutex_unlock(&e->link->mu);
  bw_pending p = {.kind = BW_P_EVENT, .dev = e->dev, .event = e, .seq = seq};
  bw_ids b = {.id = e->id, .id2 = q->id};
  int rc = submit_pending(q, &p, BW_EV_RECORD, &b, sizeof b);
  if (rc != 0) {
    pthread_mutex_lock(&e->link->mu);
    e->done = seq; /* the record never happened: nothing to wait for, and it failed */
    e->status = rc;
    e->refs--;
    pthread_mutex_unlock(&e->link->mu);
  }
  return rc;
}

/* Under mu: 0, < 0, or RT_PENDING while pending. */
static int event_state(bw_event *e) {
  if (e->link->lost[e->dev])
    return ACCEL_EDEVLOST; /* sticky: even for work that completed before the fault */
  return e->done >= e->recorded ? e->status : RT_PENDING;
}

static int proxy_event_query(be_event *ev) {
  bw_event *e = E(ev);
  pthread_mutex_lock(&e->link->mu);
  int rc = event_state(e);
  pthread_mutex_unlock(&e->link->mu);
  return rc;
}

static int proxy_event_sync(be_event *ev) {
  bw_event *e = E(ev);
  bw_link_flush(e->link); /* the record waited for may still be in the cork */
  pthread_mutex_lock(&e->link->mu);
  uint64_t want = e->recorded;
  int rc;
  while ((rc = event_state(e)) == RT_PENDING && e->done < want)
    pthread_cond_wait(&e->link->cv, &e->link->mu);
  pthread_mutex_unlock(&e->link->mu);
  return rc == RT_PENDING ? 0 : rc;
}

static int proxy_queue_wait(be_queue *queue, be_event *ev) {
  bw_ids b = {.id = Q(queue)->id, .id2 = E(ev)->id};
  if (E(ev)->link != Q(queue)->link)
    return ACCEL_EINVAL;
  return submit(Q(queue), BW_Q_WAIT, 0, &b, sizeof b, NULL, 0);
}

/* ---- host functions ---- */

static int host_fn(be_queue *queue, be_host_fn fn, void *arg, bool hold) {
  bw_pqueue *q = Q(queue);
  if (fn == NULL)
    return ACCEL_EINVAL;
  bw_pending p = {.kind = BW_P_CALLBACK, .dev = q->dev->index, .fn = fn, .arg = arg, .hold = hold};
  bw_ids b = {.dev = hold, .id = q->id};
  return submit_pending(q, &p, BW_CALLBACK, &b, sizeof b);
}

static int proxy_host_callback(be_queue *q, be_host_fn fn, void *arg) {
  return host_fn(q, fn, arg, true);
}

static int proxy_host_notify(be_queue *q, be_host_fn fn, void *arg) {
  return host_fn(q, fn, arg, false);
}

/* ---- clients' shared memory ---- */

static int proxy_register_shared(be_device *dev, void *p, size_t bytes, int fd) {
  bw_pdev *d = D(dev);
  if (d->link == NULL || bw_link_lost(d->link, d->index))
    return ACCEL_EDEVLOST;
  return bw_share_register(d, p, bytes, fd);
}

static void proxy_unregister(be_device *dev, void *p) {
  (void)dev; /* may be closed by now: the region is found by its address */
  bw_share_unregister(p);
}

/* ---- the tables ---- */

static void fill_table(proxy_table *t, int index, const be_ops *real) {
  t->real = real;
  t->ops = (be_ops){
      .abi_version = BE_ABI_VERSION,
      .name = real->name,
      .probe = probes[index],
      .open = opens[index],
      .close = proxy_close,
      .info = proxy_info,
      .status = proxy_status,
      .reset = proxy_reset,
      .inject_fault = proxy_inject,
      .abort = proxy_abort,
      .queue_create = proxy_queue_create,
      .queue_destroy = proxy_queue_destroy,
      .mem_alloc = proxy_mem_alloc,
      .mem_free = proxy_mem_free,
      .copy_h2d = proxy_h2d,
      .copy_d2h = proxy_d2h,
      .copy_d2d = proxy_d2d,
      .can_peer = real->can_peer ? proxy_can_peer : NULL,
      .host_register_shared = proxy_register_shared,
      .host_unregister = proxy_unregister,
      .copy_peer = real->copy_peer ? proxy_copy_peer : NULL,
      .event_create = proxy_event_create,
      .event_destroy = proxy_event_destroy,
      .event_record = proxy_event_record,
      .event_query = proxy_event_query,
      .event_sync = proxy_event_sync,
      .queue_wait = proxy_queue_wait,
      .host_callback = proxy_host_callback,
      .sticky_errors = real->sticky_errors,
      .late_callbacks = true, /* they cross a process */
      .any_thread = true,     /* no thread state of acceld's is involved */
      .host_notify = proxy_host_notify,
      .fill = proxy_fill,
  };
  bw_pkgs_fill(real, &t->blas, &t->rng, &t->nn, &t->module, &t->coll);
  t->ops.blas = real->blas ? &t->blas : NULL;
  t->ops.rng = real->rng ? &t->rng : NULL;
  t->ops.nn = real->nn ? &t->nn : NULL;
  t->ops.module = real->module ? &t->module : NULL;
  t->ops.collective = real->collective ? &t->coll : NULL;
}

static const proxy_table *table_of(const be_ops *real) {
  for (int i = 0; i < PROXY_TABLES; i++)
    if (tables[i].real == real)
      return &tables[i];
  return NULL;
}

const be_ops *bw_proxy_ops(const be_ops *real) {
  if (real == NULL)
    return NULL;
  pthread_mutex_lock(&tables_mu);
  const proxy_table *t = table_of(real);
  for (int i = 0; t == NULL && i < PROXY_TABLES; i++)
    if (tables[i].real == NULL) {
      fill_table(&tables[i], i, real);
      t = &tables[i];
    }
  pthread_mutex_unlock(&tables_mu);
  return t ? &t->ops : NULL;
}
