/* The proxy's packages (worker.h): what a device runs comes from the capabilities its worker
 * sent at open (asked once: these entries must not block); kernels are sent as submissions;
 * module loads and kernel lookups wait for the worker. */
#include <stdlib.h>
#include <string.h>

#include "backends/worker/proxy.h"
#include "ops/dtype_conv.h"

static bw_pdev *D(be_device *d) {
  return (bw_pdev *)d;
}

static bw_pqueue *Q(be_queue *q) {
  return (bw_pqueue *)q;
}

static int send_on(be_queue *queue, uint16_t type, const void *a, size_t alen, const void *b,
                   size_t blen) {
  bw_pqueue *q = Q(queue);
  if (bw_link_lost(q->link, q->dev->index))
    return ACCEL_EDEVLOST;
  return bw_link_send(q->link, type, 0, a, alen, b, blen, NULL, 0) ? 0 : ACCEL_EDEVLOST;
}

/* ---- blas ---- */

static int gemm_supports(be_device *dev, uint32_t ab, uint32_t c, uint32_t math) {
  if (ab >= 16 || c >= 16 || math >= 4)
    return ACCEL_ENOTSUP;
  return D(dev)->caps.gemm[ab][c][math] ? 0 : ACCEL_ENOTSUP;
}

static uint32_t vector_dtypes(be_device *dev) {
  return D(dev)->caps.blas_vector;
}

static int gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b, size_t b_off,
                be_mem c, size_t c_off) {
  int rc = bw_check_gemm(Q(q)->dev, g, a, a_off, b, b_off, c, c_off);
  if (rc != 0)
    return rc;
  bw_gemm m = {.queue = Q(q)->id,
               .g = *g,
               .a = a,
               .b = b,
               .c = c,
               .a_off = a_off,
               .b_off = b_off,
               .c_off = c_off};
  return send_on(q, BW_GEMM, &m, sizeof m, NULL, 0);
}

static int axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off,
                be_mem y, size_t y_off) {
  int rc = bw_check_vec(Q(q)->dev, dtype, n, x, x_off, &y, y_off);
  if (rc != 0)
    return rc;
  bw_vec v = {.queue = Q(q)->id,
              .dtype = dtype,
              .n = n,
              .alpha = alpha,
              .x = x,
              .y = y,
              .x_off = x_off,
              .y_off = y_off};
  return send_on(q, BW_AXPY, &v, sizeof v, NULL, 0);
}

static int dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
               size_t y_off, be_mem r, size_t r_off) {
  int rc = bw_check_vec(Q(q)->dev, dtype, n, x, x_off, &y, y_off);
  if (rc == 0)
    rc = bw_check_span(r, r_off, 1, be_dtype_size(dtype));
  if (rc != 0)
    return rc;
  bw_vec v = {.queue = Q(q)->id,
              .dtype = dtype,
              .n = n,
              .x = x,
              .y = y,
              .r = r,
              .x_off = x_off,
              .y_off = y_off,
              .r_off = r_off};
  return send_on(q, BW_DOT, &v, sizeof v, NULL, 0);
}

static int scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off) {
  int rc = bw_check_vec(Q(q)->dev, dtype, n, x, x_off, NULL, 0);
  if (rc != 0)
    return rc;
  bw_vec v = {.queue = Q(q)->id, .dtype = dtype, .n = n, .alpha = alpha, .x = x, .x_off = x_off};
  return send_on(q, BW_SCAL, &v, sizeof v, NULL, 0);
}

/* ---- rng and nn ---- */

static uint32_t rng_dtypes(be_device *dev) {
  return D(dev)->caps.rng;
}

static int rng_fill(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                    const be_rng_args *r) {
  int rc = bw_check_rng(Q(q)->dev, dtype, dst, off, count, r);
  if (rc != 0)
    return rc;
  bw_rng m = {.queue = Q(q)->id, .dtype = dtype, .dst = dst, .off = off, .count = count, .r = *r};
  return send_on(q, BW_RNG, &m, sizeof m, NULL, 0);
}

static uint32_t nn_dtypes(be_device *dev) {
  return D(dev)->caps.nn;
}

static int unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                 be_mem src, size_t src_off, size_t count) {
  int rc = op > BE_UNARY_OP_LAST ? ACCEL_EINVAL
                                 : bw_check_nn(Q(q)->dev, dtype, dst, dst_off, src, src_off, count);
  if (rc != 0)
    return rc;
  bw_nn m = {.queue = Q(q)->id,
             .dtype = dtype,
             .op = op,
             .dst = dst,
             .src = src,
             .dst_off = dst_off,
             .src_off = src_off,
             .count = count};
  return send_on(q, BW_UNARY, &m, sizeof m, NULL, 0);
}

static int binary(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst, size_t dst_off,
                  be_mem a, size_t a_off, be_mem b, size_t b_off) {
  int rc = bw_check_binary(Q(q)->dev, dtype, g, dst, dst_off, a, a_off, b, b_off);
  if (rc != 0)
    return rc;
  bw_binary m = {.queue = Q(q)->id,
                 .dtype = dtype,
                 .g = *g,
                 .dst = dst,
                 .a = a,
                 .b = b,
                 .dst_off = dst_off,
                 .a_off = a_off,
                 .b_off = b_off};
  return send_on(q, BW_BINARY, &m, sizeof m, NULL, 0);
}

static int reduce(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                  size_t dst_off, be_mem src, size_t src_off) {
  int rc = bw_check_reduce(Q(q)->dev, dtype, g, dst, dst_off, src, src_off);
  if (rc != 0)
    return rc;
  bw_reduce m = {.queue = Q(q)->id,
                 .dtype = dtype,
                 .g = *g,
                 .dst = dst,
                 .src = src,
                 .dst_off = dst_off,
                 .src_off = src_off};
  return send_on(q, BW_REDUCE, &m, sizeof m, NULL, 0);
}

static int convert(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype, const be_convert_args *g,
                   be_mem dst, size_t dst_off, be_mem src, size_t src_off) {
  int rc = bw_check_convert(Q(q)->dev, dst_dtype, src_dtype, g, dst, dst_off, src, src_off);
  if (rc != 0)
    return rc;
  bw_convert m = {.queue = Q(q)->id,
                  .dst_dtype = dst_dtype,
                  .src_dtype = src_dtype,
                  .g = *g,
                  .dst = dst,
                  .src = src,
                  .dst_off = dst_off,
                  .src_off = src_off};
  return send_on(q, BW_CONVERT, &m, sizeof m, NULL, 0);
}

static int where(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst, size_t dst_off,
                 be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b, size_t b_off) {
  int rc = bw_check_where(Q(q)->dev, dtype, g, dst, dst_off, cond, c_off, a, a_off, b, b_off);
  if (rc != 0)
    return rc;
  bw_where m = {.queue = Q(q)->id,
                .dtype = dtype,
                .g = *g,
                .dst = dst,
                .cond = cond,
                .a = a,
                .b = b,
                .dst_off = dst_off,
                .c_off = c_off,
                .a_off = a_off,
                .b_off = b_off};
  return send_on(q, BW_WHERE, &m, sizeof m, NULL, 0);
}

static int softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                   size_t src_off, size_t rows, size_t cols) {
  int rc = cols != 0 && rows > SIZE_MAX / cols
               ? ACCEL_EINVAL
               : bw_check_nn(Q(q)->dev, dtype, dst, dst_off, src, src_off, rows * cols);
  if (rc != 0)
    return rc;
  bw_nn m = {.queue = Q(q)->id,
             .dtype = dtype,
             .dst = dst,
             .src = src,
             .dst_off = dst_off,
             .src_off = src_off,
             .rows = rows,
             .cols = cols};
  return send_on(q, BW_SOFTMAX, &m, sizeof m, NULL, 0);
}

/* ---- modules ---- */

static uint32_t sources(be_device *dev) {
  return D(dev)->caps.sources;
}

static void limits(be_device *dev, be_launch_limits *out) {
  *out = D(dev)->caps.limits;
}

typedef struct compile_ctx {
  const be_compiler *c;
  uint32_t source;
  const void *code;
  size_t len;
  const char *options;
} compile_ctx;

/* A BW_COMPILE from the worker: acceld's compiler (its build helper) runs the compile; the
 * answer is bw_compiled, the log, the image. */
static int compile_for_worker(void *arg, const char *target, void **answer, size_t *len) {
  compile_ctx *x = arg;
  void *image = NULL;
  size_t image_len = 0;
  char *log = NULL;
  int rc = x->c->compile(x->c, target, x->source, x->code, x->len, x->options, &image, &image_len,
                         &log);
  bw_compiled h = {.status = rc,
                   .log_len = log ? (uint32_t)strlen(log) : 0,
                   .image_len = rc == 0 ? image_len : 0};
  *len = sizeof h + h.log_len + h.image_len;
  char *a = malloc(*len);
  if (a != NULL) {
    memcpy(a, &h, sizeof h);
    if (h.log_len)
      memcpy(a + sizeof h, log, h.log_len);
    if (h.image_len)
      memcpy(a + sizeof h + h.log_len, image, h.image_len);
  }
  free(image);
  free(log);
  *answer = a;
  return a ? 0 : ACCEL_ENOMEM;
}

static char *copy_log(const bw_loaded *r, const char *text, uint32_t room) {
  if (r->log_len == 0 || r->log_len > room)
    return NULL;
  char *log = malloc(r->log_len + 1u);
  if (log != NULL) {
    memcpy(log, text, r->log_len);
    log[r->log_len] = '\0';
  }
  return log;
}

static int load_any(be_device *dev, uint32_t source, const void *code, size_t len,
                    const char *options, const be_compiler *c, be_module **out, char **log) {
  bw_pdev *d = D(dev);
  bw_pmodule *m = calloc(1, sizeof *m);
  if (m == NULL)
    return ACCEL_ENOMEM;
  size_t opt_len = options ? strlen(options) : 0;
  uint64_t id = bw_id_take(d->link, BW_K_MODULE);
  bw_load b = {.dev = d->index,
               .source = source,
               .module = id,
               .options_len = options ? (uint32_t)opt_len : UINT32_MAX,
               .use_compiler = c != NULL,
               .code_len = len};
  compile_ctx x = {c, source, code, len, options};
  void *body = NULL;
  uint32_t blen = 0;
  int rc = bw_link_call(d->link, BW_LOAD, &b, sizeof b, options, opt_len, code, len, &body, &blen,
                        c ? compile_for_worker : NULL, &x);
  const bw_loaded *r = body ? bw_answer(body) : NULL;
  if (rc == 0 && blen < sizeof(bw_reply) + sizeof *r)
    rc = ACCEL_EPROTO;
  if (rc == 0) {
    rc = r->status;
    *log = copy_log(r, (const char *)(r + 1), blen - (uint32_t)(sizeof(bw_reply) + sizeof *r));
  }
  free(body);
  if (rc != 0) {
    bw_id_give(d->link, BW_K_MODULE, id);
    free(m);
    return rc;
  }
  *m = (bw_pmodule){.dev = d, .link = d->link, .id = id};
  pthread_mutex_init(&m->mu, NULL);
  *out = (be_module *)m;
  return 0;
}

static int load(be_device *dev, uint32_t source, const void *code, size_t len, const char *options,
                be_module **out, char **log) {
  return load_any(dev, source, code, len, options, NULL, out, log);
}

static int load_with(be_device *dev, uint32_t source, const void *code, size_t len,
                     const char *options, const be_compiler *c, be_module **out, char **log) {
  return load_any(dev, source, code, len, options, c, out, log);
}

static void unload(be_module *module) {
  bw_pmodule *m = (bw_pmodule *)module;
  bw_ids b = {.id = m->id};
  if (bw_link_send(m->link, BW_UNLOAD, 0, &b, sizeof b, NULL, 0, NULL, 0)) {
    bw_id_give(m->link, BW_K_MODULE, m->id);
    for (bw_pkernel *k = m->kernels; k; k = k->next)
      bw_id_give(m->link, BW_K_KERNEL, k->id);
  }
  while (m->kernels) {
    bw_pkernel *k = m->kernels;
    m->kernels = k->next;
    free(k);
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
}

static bw_pkernel *known(bw_pmodule *m, const char *name) {
  for (bw_pkernel *k = m->kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0)
      return k;
  return NULL;
}

static int ask_kernel(bw_pmodule *m, const char *name, bw_pkernel *k) {
  bw_link *l = m->link;
  k->id = bw_id_take(l, BW_K_KERNEL);
  bw_ids b = {.id = m->id, .id2 = k->id};
  void *body = NULL;
  uint32_t len = 0;
  int rc = bw_link_call(l, BW_KERNEL, &b, sizeof b, name, strlen(name), NULL, 0, &body, &len, NULL,
                        NULL);
  if (rc == 0)
    rc = ((bw_reply *)body)->status;
  if (rc == 0 && len >= sizeof(bw_reply) + sizeof k->info)
    memcpy(&k->info, (char *)body + sizeof(bw_reply), sizeof k->info);
  else if (rc == 0)
    rc = ACCEL_EPROTO;
  if (k->info.nparams > BE_LAUNCH_MAX_ARGS) /* a worker's answer is checked as a client's */
    k->info.nparams = UINT32_MAX;
  free(body);
  if (rc != 0)
    bw_id_give(l, BW_K_KERNEL, k->id);
  return rc;
}

static int kernel(be_module *module, const char *name, be_kernel **out, be_kernel_info *info) {
  bw_pmodule *m = (bw_pmodule *)module;
  if (strlen(name) > BE_KERNEL_NAME_MAX)
    return ACCEL_ENOENT;
  pthread_mutex_lock(&m->mu);
  bw_pkernel *k = known(m, name);
  int rc = 0;
  if (k == NULL && (k = calloc(1, sizeof *k)) == NULL)
    rc = ACCEL_ENOMEM;
  else if (k->name[0] == '\0' && (rc = ask_kernel(m, name, k)) != 0)
    free(k);
  else if (k->name[0] == '\0') {
    strcpy(k->name, name);
    k->next = m->kernels;
    m->kernels = k;
  }
  pthread_mutex_unlock(&m->mu);
  if (rc != 0)
    return rc == ACCEL_EDEVLOST || rc == ACCEL_ENOMEM ? rc : ACCEL_ENOENT;
  *out = (be_kernel *)k;
  *info = k->info;
  return 0;
}

static int launch(be_queue *q, be_kernel *kernel_, const be_launch *l) {
  bw_pkernel *k = (bw_pkernel *)kernel_;
  if (l->nargs > BE_LAUNCH_MAX_ARGS)
    return ACCEL_EINVAL;
  bw_launch b = {
      .queue = Q(q)->id, .kernel = k->id, .shared_bytes = l->shared_bytes, .nargs = l->nargs};
  memcpy(b.grid, l->grid, sizeof b.grid);
  memcpy(b.block, l->block, sizeof b.block);
  return send_on(q, BW_LAUNCH, &b, sizeof b, l->args, l->nargs * sizeof *l->args);
}

/* ---- collectives: devices of one worker ---- */

static uint32_t coll_dtypes(be_device *dev) {
  return D(dev)->caps.coll;
}

static bool coll_devices(bw_coll *b, be_device *const dev[], uint32_t n) {
  if (n == 0 || n > BE_COLL_MAX_DEVICES)
    return false;
  b->ndev = n;
  for (uint32_t i = 0; i < n; i++) {
    if (D(dev[i])->link == NULL || D(dev[i])->link != D(dev[0])->link)
      return false;
    b->dev[i] = D(dev[i])->index;
  }
  return true;
}

static int coll_supports(be_device *const dev[], uint32_t ndev) {
  bw_coll b = {0};
  if (!coll_devices(&b, dev, ndev))
    return ACCEL_ENOTSUP;
  void *body = NULL;
  uint32_t len = 0;
  int rc = bw_link_call(D(dev[0])->link, BW_COLL_OK, &b, sizeof b, NULL, 0, NULL, 0, &body, &len,
                        NULL, NULL);
  if (rc == 0)
    rc = ((bw_reply *)body)->status;
  free(body);
  return rc;
}

static int coll_run(const be_coll_call *c) {
  bw_coll b = {
      .kind = c->kind, .dtype = c->dtype, .reduce = c->reduce, .root = c->root, .count = c->count};
  if (!coll_devices(&b, c->dev, c->ndev))
    return ACCEL_EINVAL;
  for (uint32_t i = 0; i < c->ndev; i++) {
    b.queue[i] = Q(c->queue[i])->id;
    b.buf[i] = c->buf[i];
    b.recv[i] = c->recv[i];
  }
  return send_on(c->queue[0], BW_COLL_RUN, &b, sizeof b, NULL, 0);
}

void bw_pkgs_fill(const be_ops *real, be_blas_pkg *blas, be_rng_pkg *rng, be_nn_pkg *nn,
                  be_module_pkg *module, be_coll_pkg *coll) {
  *blas = (be_blas_pkg){BE_BLAS_VERSION, gemm_supports, vector_dtypes, gemm, axpy, dot, scal};
  *rng = (be_rng_pkg){BE_RNG_VERSION, rng_dtypes, rng_fill};
  *nn = (be_nn_pkg){BE_NN_VERSION, nn_dtypes, unary, softmax, binary, reduce, where, convert};
  *module = (be_module_pkg){.version = BE_MODULE_VERSION,
                            .sources = sources,
                            .limits = limits,
                            .load = load,
                            .unload = unload,
                            .kernel = kernel,
                            .launch = launch,
                            .load_with = real->module && real->module->load_with ? load_with
                                                                                 : NULL};
  *coll = (be_coll_pkg){BE_COLL_VERSION, coll_dtypes, coll_supports, coll_run};
}
