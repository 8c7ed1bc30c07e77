/* The worker's handlers, one per call of wire.h (module loads: serve_load.c). Each checks
 * what it is given (ids, lengths, staging ranges) before the backend sees it. Calls acceld
 * waits for get a reply; the others report a failed submission through the queue's next
 * completion (ws_queue.pending). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/worker/serve.h"

static void bad(const bw_hdr *h) {
  fprintf(stderr, "accel-device: malformed call %u (%u bytes)\n", h->type, h->len);
  if (h->tag != 0)
    ws_reply(h->tag, ACCEL_EPROTO, NULL, 0, NULL, 0);
}

static ws_queue *queue_of(uint64_t id) {
  return ws_get(&ws.queues, id);
}

/* A submission's result: an error waits for the queue's next completion. */
static void submitted(ws_queue *q, int rc) {
  if (rc != 0 && q->pending == 0)
    q->pending = rc;
}

/* The queue a call names, usable; else NULL, its error kept for its next completion. */
static ws_queue *usable(uint64_t id) {
  ws_queue *q = queue_of(id);
  if (q == NULL)
    fprintf(stderr, "accel-device: no queue %llu\n", (unsigned long long)id);
  else if (q->q == NULL)
    submitted(q, q->error);
  return q != NULL && q->q != NULL ? q : NULL;
}

/* ---- devices ---- */

static void read_caps(be_device *d, bw_caps *c) {
  const be_ops *be = ws.be;
  memset(c, 0, sizeof *c);
  be->info(d, &c->info);
  c->sticky_errors = be->sticky_errors;
  if (be->blas) {
    c->blas_vector = be->blas->vector_dtypes(d);
    for (uint32_t ab = 0; ab < 16; ab++)
      for (uint32_t ct = 0; ct < 16; ct++)
        for (uint32_t m = 0; m < 4; m++)
          c->gemm[ab][ct][m] = be->blas->gemm_supports(d, ab, ct, m) == 0;
  }
  if (be->rng)
    c->rng = be->rng->dtypes(d);
  if (be->nn)
    c->nn = be->nn->dtypes(d);
  if (be->module) {
    c->sources = be->module->sources(d);
    be->module->limits(d, &c->limits);
  }
  if (be->collective)
    c->coll = be->collective->dtypes(d);
}

static void open_device(const bw_hdr *h, const bw_open *o) {
  be_device *d = NULL;
  if (o->dev >= BW_MAX_DEVICES || ws.dev[o->dev] != NULL) {
    ws_reply(h->tag, o->dev >= BW_MAX_DEVICES ? ACCEL_ENOENT : ACCEL_EBUSY, NULL, 0, NULL, 0);
    return;
  }
  int rc = ws.be->open((int)o->dev, &o->opts, &d);
  if (rc != 0 && (int)o->dev < ws.probe_count) /* a device the probe found would not open */
    fprintf(stderr, "accel-device: %s device %u: %s (the worker's probe found %d device(s)%s%s)\n",
            ws.be->name, o->dev, accel_err_name(rc), ws.probe_count, ws.probe_why[0] ? ": " : "",
            ws.probe_why);
  if (rc != 0) {
    ws_reply(h->tag, rc, NULL, 0, NULL, 0);
    return;
  }
  ws.dev[o->dev] = d;
  /* Copies through the staging region at the device's DMA speed (CUDA: pinned). Where it
   * is refused (registered already for another device of the worker), copies still work. */
  if (ws.be->host_register && !ws.stage_registered)
    ws.stage_registered = ws.be->host_register(d, ws.stage, ws.stage_bytes) == 0;
  bw_opened out;
  read_caps(d, &out.caps);
  ws_reply(h->tag, 0, &out, sizeof out, NULL, 0);
}

static void probe(const bw_hdr *h) {
  bw_probed out = {.rc = ws.probe_rc, .count = ws.probe_count};
  snprintf(out.why, sizeof out.why, "%s", ws.probe_why);
  ws_reply(h->tag, 0, &out, sizeof out, NULL, 0);
}

static void close_device(const bw_hdr *h, const bw_dev *b) {
  be_device *d = ws_device(b->dev);
  if (d != NULL) {
    ws_unshare_device(d);
    ws.be->close(d);
    ws.dev[b->dev] = NULL;
  }
  ws_reply(h->tag, d ? 0 : ACCEL_EINVAL, NULL, 0, NULL, 0);
}

static void inject(const bw_hdr *h, const bw_dev *b) {
  be_device *d = ws_device(b->dev);
  int rc = d == NULL ? ACCEL_EINVAL : ws.be->inject_fault(d);
  ws_reply(h->tag, rc, NULL, 0, NULL, 0);
}

static void can_peer(const bw_hdr *h, const bw_ids *b) {
  be_device *dst = ws_device(b->dev), *src = ws_device((uint32_t)b->id);
  bool yes = dst && src && ws.be->can_peer && ws.be->can_peer(dst, src);
  ws_reply(h->tag, yes ? 1 : 0, NULL, 0, NULL, 0);
}

/* ---- queues and events ---- */

static void queue_create(const bw_ids *b) {
  be_device *d = ws_device(b->dev);
  ws_queue *q = calloc(1, sizeof *q);
  if (q == NULL || !ws_put(&ws.queues, b->id, q)) {
    free(q);
    fprintf(stderr, "accel-device: queue %llu not made\n", (unsigned long long)b->id);
    return;
  }
  q->dev = b->dev;
  q->link = ws_self;
  ws_queue_init(q);
  q->error = d == NULL ? ACCEL_EINVAL : ws.be->queue_create(d, &q->q);
}

static void queue_destroy(const bw_hdr *h, const bw_ids *b) {
  ws_queue *q = queue_of(b->id);
  if (q != NULL) {
    if (q->q != NULL)
      ws.be->queue_destroy(q->q);
    ws_queue_fini(q); /* after the queue's work: its completions are all sent */
    free(q);
    ws_put(&ws.queues, b->id, NULL);
  }
  ws_reply(h->tag, 0, NULL, 0, NULL, 0);
}

static void event_create(const bw_ids *b) {
  be_device *d = ws_device(b->dev);
  be_event *e = NULL;
  if (d == NULL || ws.be->event_create(d, &e) != 0)
    e = NULL; /* its records then fail */
  if (!ws_put(&ws.events, b->id, e) && e != NULL)
    ws.be->event_destroy(e);
}

static void event_destroy(const bw_ids *b) {
  be_event *e = ws_get(&ws.events, b->id);
  if (e != NULL) {
    ws_event_forget(e);
    ws.be->event_destroy(e);
  }
  ws_put(&ws.events, b->id, NULL);
}

static void event_record(const bw_hdr *h, const bw_ids *b) {
  ws_queue *q = queue_of(b->id2);
  if (q == NULL) {
    ws_done(h->tag, ACCEL_EINVAL);
    return;
  }
  be_event *e = ws_get(&ws.events, b->id);
  int rc = q->q == NULL ? q->error : e == NULL ? ACCEL_ENOMEM : ws.be->event_record(e, q->q);
  submitted(q, rc);
  ws_complete_event_after(q, h->tag, rc == 0 ? e : NULL);
}

static void queue_wait(const bw_ids *b) {
  ws_queue *q = usable(b->id);
  be_event *e = ws_get(&ws.events, b->id2);
  if (q != NULL) {
    submitted(q, e == NULL ? ACCEL_EINVAL : ws.be->queue_wait(q->q, e));
    q->waited = true;
  }
}

static void callback(const bw_hdr *h, const bw_ids *b) {
  ws_queue *q = queue_of(b->id);
  if (q == NULL) {
    ws_done(h->tag, ACCEL_EINVAL);
    return;
  }
  ws_complete_after(q, h->tag, b->dev != 0, true);
}

/* ---- memory and copies ---- */

static void mem_alloc(const bw_hdr *h, const bw_mem_op *m) {
  be_device *d = ws_device(m->dev);
  bw_mem_op out = *m;
  int rc = d == NULL ? ACCEL_EINVAL : ws.be->mem_alloc(d, m->bytes, &out.mem);
  ws_reply(h->tag, rc, &out, sizeof out, NULL, 0);
}

static void mem_free(const bw_mem_op *m) {
  be_device *d = ws_device(m->dev);
  be_mem mem = m->mem;
  if (d != NULL)
    ws.be->mem_free(d, &mem);
}

/* H2D and D2H: their completion gives acceld the staging pages back (and, for D2H, the
 * data), whatever the copy's fate. */
static void copy_host(const bw_hdr *h, const bw_copy *c) {
  ws_queue *q = queue_of(c->queue);
  if (q == NULL) {
    ws_done(h->tag, ACCEL_EINVAL);
    return;
  }
  void *host = c->region ? ws_region_at(c->region, c->stage_off, c->bytes)
                         : ws_stage_at(c->stage_off, c->bytes);
  if (c->bytes >= (64u << 20) && getenv("ACCEL_WORKER_TRACE"))
    fprintf(stderr, "accel-device: %s of %llu bytes from %s\n", h->type == BW_H2D ? "H2D" : "D2H",
            (unsigned long long)c->bytes, c->region ? "a shared region" : "staging");
  if (q->q != NULL) {
    int rc = host == NULL        ? ACCEL_EINVAL
             : h->type == BW_H2D ? ws.be->copy_h2d(q->q, c->dst, c->dst_off, host, c->bytes)
                                 : ws.be->copy_d2h(q->q, host, c->src, c->src_off, c->bytes);
    submitted(q, rc);
  }
  ws_complete_after(q, h->tag, false, false);
}

static void copy_dev(const bw_hdr *h, const bw_copy *c) {
  ws_queue *q = usable(c->queue);
  if (q == NULL)
    return;
  if (h->type == BW_D2D) {
    submitted(q, ws.be->copy_d2d(q->q, c->dst, c->dst_off, c->src, c->src_off, c->bytes));
    return;
  }
  be_device *src = ws_device(c->src_dev);
  submitted(q, src == NULL || ws.be->copy_peer == NULL
                   ? ACCEL_EINVAL
                   : ws.be->copy_peer(q->q, c->dst, c->dst_off, src, c->src, c->src_off, c->bytes));
}

static void fill(const bw_fill *f) {
  ws_queue *q = usable(f->queue);
  if (q != NULL)
    submitted(q, ws.be->fill(q->q, f->dst, f->off, f->count, f->esize, f->value));
}

/* ---- packages ---- */

static int missing(const void *pkg) {
  return pkg == NULL ? ACCEL_ENOTSUP : 0;
}

static void gemm(const bw_gemm *g) {
  ws_queue *q = usable(g->queue);
  if (q != NULL)
    submitted(q, missing(ws.be->blas) ? ACCEL_ENOTSUP
                                      : ws.be->blas->gemm(q->q, &g->g, g->a, g->a_off, g->b,
                                                          g->b_off, g->c, g->c_off));
}

static void vector(uint16_t type, const bw_vec *v) {
  ws_queue *q = usable(v->queue);
  if (q == NULL)
    return;
  const be_blas_pkg *b = ws.be->blas;
  int rc = missing(b);
  if (rc == 0 && type == BW_AXPY)
    rc = b->axpy(q->q, v->dtype, v->n, v->alpha, v->x, v->x_off, v->y, v->y_off);
  else if (rc == 0 && type == BW_DOT)
    rc = b->dot(q->q, v->dtype, v->n, v->x, v->x_off, v->y, v->y_off, v->r, v->r_off);
  else if (rc == 0)
    rc = b->scal(q->q, v->dtype, v->n, v->alpha, v->x, v->x_off);
  submitted(q, rc);
}

static void rng(const bw_rng *r) {
  ws_queue *q = usable(r->queue);
  if (q != NULL)
    submitted(q, missing(ws.be->rng)
                     ? ACCEL_ENOTSUP
                     : ws.be->rng->fill(q->q, r->dtype, r->dst, r->off, r->count, &r->r));
}

static void nn(uint16_t type, const bw_nn *n) {
  ws_queue *q = usable(n->queue);
  if (q == NULL)
    return;
  const be_nn_pkg *p = ws.be->nn;
  int rc = missing(p);
  if (rc == 0 && type == BW_UNARY)
    rc = p->unary(q->q, n->dtype, (be_unary_op)n->op, n->dst, n->dst_off, n->src, n->src_off,
                  n->count);
  else if (rc == 0)
    rc = p->softmax(q->q, n->dtype, n->dst, n->dst_off, n->src, n->src_off, n->rows, n->cols);
  submitted(q, rc);
}

static void binary(const bw_binary *m) {
  ws_queue *q = usable(m->queue);
  if (q != NULL)
    submitted(q, missing(ws.be->nn) ? ACCEL_ENOTSUP
                                    : ws.be->nn->binary(q->q, m->dtype, &m->g, m->dst, m->dst_off,
                                                        m->a, m->a_off, m->b, m->b_off));
}

static void reduce(const bw_reduce *m) {
  ws_queue *q = usable(m->queue);
  if (q != NULL)
    submitted(q, missing(ws.be->nn) ? ACCEL_ENOTSUP
                                    : ws.be->nn->reduce(q->q, m->dtype, &m->g, m->dst, m->dst_off,
                                                        m->src, m->src_off));
}

static void convert(const bw_convert *m) {
  ws_queue *q = usable(m->queue);
  if (q != NULL)
    submitted(q, missing(ws.be->nn) ? ACCEL_ENOTSUP
                                    : ws.be->nn->convert(q->q, m->dst_dtype, m->src_dtype, &m->g,
                                                         m->dst, m->dst_off, m->src, m->src_off));
}

static void where(const bw_where *m) {
  ws_queue *q = usable(m->queue);
  if (q != NULL)
    submitted(q, missing(ws.be->nn)
                     ? ACCEL_ENOTSUP
                     : ws.be->nn->where(q->q, m->dtype, &m->g, m->dst, m->dst_off, m->cond,
                                        m->c_off, m->a, m->a_off, m->b, m->b_off));
}

/* ---- modules ---- */

static void unload(const bw_ids *b) {
  pthread_mutex_lock(&ws.mu);
  be_module *m = ws_get(&ws.modules, b->id);
  ws_put(&ws.modules, b->id, NULL);
  pthread_mutex_unlock(&ws.mu);
  for (size_t i = 0; i < ws.kernel_module.cap; i++) /* its kernels go with it */
    if ((uintptr_t)ws.kernel_module.slot[i] == b->id + 1) {
      ws_put(&ws.kernels, i, NULL);
      ws_put(&ws.kernel_module, i, NULL);
    }
  if (m != NULL && ws.be->module)
    ws.be->module->unload(m);
}

static void kernel(const bw_hdr *h, const bw_ids *b) {
  char name[BE_KERNEL_NAME_MAX + 1];
  size_t len = h->len - sizeof *b;
  if (len > BE_KERNEL_NAME_MAX || ws.be->module == NULL) {
    ws_reply(h->tag, ACCEL_EINVAL, NULL, 0, NULL, 0);
    return;
  }
  memcpy(name, b + 1, len);
  name[len] = '\0';
  pthread_mutex_lock(&ws.mu);
  be_module *m = ws_get(&ws.modules, b->id);
  pthread_mutex_unlock(&ws.mu);
  be_kernel *k = NULL;
  be_kernel_info info = {0};
  int rc = m == NULL ? ACCEL_ENOENT : ws.be->module->kernel(m, name, &k, &info);
  if (rc == 0 && (!ws_put(&ws.kernels, b->id2, k) ||
                  !ws_put(&ws.kernel_module, b->id2, (void *)(uintptr_t)(b->id + 1))))
    rc = ACCEL_ENOMEM;
  ws_reply(h->tag, rc, &info, sizeof info, NULL, 0);
}

static void launch(const bw_hdr *h, const bw_launch *l) {
  ws_queue *q = usable(l->queue);
  if (q == NULL)
    return;
  be_kernel *k = ws_get(&ws.kernels, l->kernel);
  if (l->nargs > BE_LAUNCH_MAX_ARGS ||
      h->len != sizeof *l + (size_t)l->nargs * sizeof(be_kernel_arg) || k == NULL ||
      ws.be->module == NULL) {
    submitted(q, ACCEL_EINVAL);
    return;
  }
  be_launch x = {
      .shared_bytes = l->shared_bytes, .nargs = l->nargs, .args = (const be_kernel_arg *)(l + 1)};
  memcpy(x.grid, l->grid, sizeof x.grid);
  memcpy(x.block, l->block, sizeof x.block);
  submitted(q, ws.be->module->launch(q->q, k, &x));
}

/* ---- collectives ---- */

/* c's devices and queues as the backend's; false if one is not there. */
static bool coll_call(const bw_coll *b, be_coll_call *c) {
  if (b->ndev == 0 || b->ndev > BE_COLL_MAX_DEVICES || ws.be->collective == NULL)
    return false;
  *c = (be_coll_call){.kind = (be_coll_kind)b->kind,
                      .dtype = b->dtype,
                      .reduce = (be_reduce_op)b->reduce,
                      .root = b->root,
                      .ndev = b->ndev,
                      .count = b->count};
  for (uint32_t i = 0; i < b->ndev; i++) {
    ws_queue *q = queue_of(b->queue[i]);
    c->dev[i] = ws_device(b->dev[i]);
    c->queue[i] = q ? q->q : NULL;
    c->buf[i] = b->buf[i];
    c->recv[i] = b->recv[i];
    if (c->dev[i] == NULL)
      return false;
  }
  return true;
}

static void coll_ok(const bw_hdr *h, const bw_coll *b) {
  be_coll_call c;
  int rc = coll_call(b, &c) ? ws.be->collective->supports(c.dev, c.ndev) : ACCEL_ENOTSUP;
  ws_reply(h->tag, rc, NULL, 0, NULL, 0);
}

static void coll_run(const bw_coll *b) {
  be_coll_call c;
  ws_queue *lead = b->ndev ? usable(b->queue[0]) : NULL;
  if (lead == NULL)
    return;
  bool ok = coll_call(b, &c);
  for (uint32_t i = 0; ok && i < c.ndev; i++)
    ok = c.queue[i] != NULL;
  submitted(lead, ok ? ws.be->collective->run(&c) : ACCEL_EINVAL);
}

/* ---- dispatch ---- */

/* The least body of each call. */
static const size_t body_size[BW_REPLY] = {
    [BW_OPEN] = sizeof(bw_open),        [BW_CLOSE] = sizeof(bw_dev),
    [BW_INJECT] = sizeof(bw_dev),       [BW_Q_CREATE] = sizeof(bw_ids),
    [BW_Q_DESTROY] = sizeof(bw_ids),    [BW_EV_CREATE] = sizeof(bw_ids),
    [BW_EV_DESTROY] = sizeof(bw_ids),   [BW_EV_RECORD] = sizeof(bw_ids),
    [BW_Q_WAIT] = sizeof(bw_ids),       [BW_CALLBACK] = sizeof(bw_ids),
    [BW_MEM_ALLOC] = sizeof(bw_mem_op), [BW_MEM_FREE] = sizeof(bw_mem_op),
    [BW_H2D] = sizeof(bw_copy),         [BW_D2H] = sizeof(bw_copy),
    [BW_D2D] = sizeof(bw_copy),         [BW_PEER] = sizeof(bw_copy),
    [BW_CAN_PEER] = sizeof(bw_ids),     [BW_FILL] = sizeof(bw_fill),
    [BW_GEMM] = sizeof(bw_gemm),        [BW_AXPY] = sizeof(bw_vec),
    [BW_DOT] = sizeof(bw_vec),          [BW_SCAL] = sizeof(bw_vec),
    [BW_RNG] = sizeof(bw_rng),          [BW_UNARY] = sizeof(bw_nn),
    [BW_SOFTMAX] = sizeof(bw_nn),       [BW_UNLOAD] = sizeof(bw_ids),
    [BW_KERNEL] = sizeof(bw_ids),       [BW_LAUNCH] = sizeof(bw_launch),
    [BW_COLL_OK] = sizeof(bw_coll),     [BW_COLL_RUN] = sizeof(bw_coll),
    [BW_UNSHARE] = sizeof(bw_share),    [BW_BINARY] = sizeof(bw_binary),
    [BW_REDUCE] = sizeof(bw_reduce),    [BW_WHERE] = sizeof(bw_where),
    [BW_CONVERT] = sizeof(bw_convert),
};

static void handle_ids(const bw_hdr *h, const bw_ids *b) {
  switch (h->type) {
  case BW_Q_CREATE:
    queue_create(b);
    break;
  case BW_Q_DESTROY:
    queue_destroy(h, b);
    break;
  case BW_EV_CREATE:
    event_create(b);
    break;
  case BW_EV_DESTROY:
    event_destroy(b);
    break;
  case BW_EV_RECORD:
    event_record(h, b);
    break;
  case BW_Q_WAIT:
    queue_wait(b);
    break;
  case BW_CALLBACK:
    callback(h, b);
    break;
  case BW_CAN_PEER:
    can_peer(h, b);
    break;
  case BW_UNLOAD:
    unload(b);
    break;
  default:
    kernel(h, b);
    break;
  }
}

static void handle_work(const bw_hdr *h, const void *body) {
  switch (h->type) {
  case BW_FILL:
    fill(body);
    break;
  case BW_GEMM:
    gemm(body);
    break;
  case BW_AXPY:
  case BW_DOT:
  case BW_SCAL:
    vector(h->type, body);
    break;
  case BW_RNG:
    rng(body);
    break;
  case BW_UNARY:
  case BW_SOFTMAX:
    nn(h->type, body);
    break;
  case BW_BINARY:
    binary(body);
    break;
  case BW_REDUCE:
    reduce(body);
    break;
  case BW_WHERE:
    where(body);
    break;
  case BW_CONVERT:
    convert(body);
    break;
  case BW_LAUNCH:
    launch(h, body);
    break;
  case BW_COLL_OK:
    coll_ok(h, body);
    break;
  default:
    coll_run(body);
    break;
  }
}

void ws_handle(const bw_hdr *h, void *body) {
  if (h->type == BW_PROBE) {
    probe(h);
    return;
  }
  size_t need = h->type < BW_REPLY ? body_size[h->type] : 0;
  if (need == 0 || h->len < need) {
    bad(h);
    return;
  }
  switch (h->type) {
  case BW_OPEN:
    open_device(h, body);
    break;
  case BW_CLOSE:
    close_device(h, body);
    break;
  case BW_INJECT:
    inject(h, body);
    break;
  case BW_UNSHARE:
    ws_unshare(h, body);
    break;
  case BW_MEM_ALLOC:
    mem_alloc(h, body);
    break;
  case BW_MEM_FREE:
    mem_free(body);
    break;
  case BW_H2D:
  case BW_D2H:
    copy_host(h, body);
    break;
  case BW_D2D:
  case BW_PEER:
    copy_dev(h, body);
    break;
  case BW_FILL:
  case BW_GEMM:
  case BW_AXPY:
  case BW_DOT:
  case BW_SCAL:
  case BW_RNG:
  case BW_UNARY:
  case BW_SOFTMAX:
  case BW_BINARY:
  case BW_REDUCE:
  case BW_WHERE:
  case BW_CONVERT:
  case BW_LAUNCH:
  case BW_COLL_OK:
  case BW_COLL_RUN:
    handle_work(h, body);
    break;
  default:
    handle_ids(h, body);
    break;
  }
}
