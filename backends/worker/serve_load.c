/* Module loads in the worker: each on a thread of its own (a build takes seconds; the main
 * thread keeps submitting other clients' work meanwhile). Where acceld compiles the client's
 * code itself (its build helper, with a memory cap and a deadline: backends/build_child.h),
 * the backend's load_with asks for the compile through acceld: a BW_COMPILE note, answered by
 * BW_COMPILED on the call channel, which the main thread hands to the waiting load. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/worker/serve.h"

typedef struct ws_load {
  ws_state *link; /* whose call it is */
  uint64_t tag;   /* the load's call */
  bw_hdr h;
  void *body; /* the call: bw_load, options, code */
  struct ws_load *next;
  void *answer; /* BW_COMPILED's body, when it came */
  uint32_t answer_len;
  bool answered;
} ws_load_t;

/* ---- the compile through acceld ---- */

typedef struct relay_compiler {
  be_compiler base;
  ws_load_t *load;
} relay_compiler;

/* Sends the target and waits for acceld's answer (never long past acceld's own deadline:
 * acceld answers every BW_COMPILE, or goes, and the worker with it). */
static void *ask_compile(ws_load_t *l, const char *target, uint32_t *len) {
  pthread_mutex_lock(&ws.note_mu);
  bool ok = bw_chan_send(&ws.note, BW_COMPILE, l->tag, target, strlen(target), NULL, 0, NULL, 0);
  pthread_mutex_unlock(&ws.note_mu);
  if (!ok)
    _exit(0);
  pthread_mutex_lock(&ws.mu);
  while (!l->answered)
    pthread_cond_wait(&ws.cv, &ws.mu);
  l->answered = false;
  void *a = l->answer;
  *len = l->answer_len;
  pthread_mutex_unlock(&ws.mu);
  return a;
}

static int relay(const be_compiler *c, const char *target, uint32_t source, const void *code,
                 size_t len, const char *options, void **image, size_t *image_len, char **log) {
  (void)source, (void)code, (void)len, (void)options; /* acceld has them: the load's own */
  ws_load_t *l = ((const relay_compiler *)c)->load;
  uint32_t n = 0;
  bw_compiled *a = ask_compile(l, target, &n);
  int rc = ACCEL_EPROTO;
  if (a != NULL && n >= sizeof *a && a->image_len <= n - sizeof *a &&
      a->log_len <= n - sizeof *a - a->image_len) {
    rc = a->status;
    const char *p = (const char *)(a + 1);
    if (a->log_len > 0 && (*log = malloc(a->log_len + 1u)) != NULL) {
      memcpy(*log, p, a->log_len);
      (*log)[a->log_len] = '\0';
    }
    if (rc == 0 && (*image = malloc(a->image_len ? a->image_len : 1)) == NULL)
      rc = ACCEL_ENOMEM;
    else if (rc == 0) {
      memcpy(*image, p + a->log_len, a->image_len);
      *image_len = a->image_len;
    }
  }
  free(a);
  return rc;
}

/* ---- the load ---- */

static void unlink_load(ws_load_t *l) {
  pthread_mutex_lock(&ws.mu);
  for (ws_load_t **p = &ws.loads; *p; p = &(*p)->next)
    if (*p == l) {
      *p = l->next;
      break;
    }
  pthread_mutex_unlock(&ws.mu);
}

static int run_load(ws_load_t *l, be_module **m, char **log) {
  const bw_load *b = l->body;
  uint64_t opt_len = b->options_len == UINT32_MAX ? 0 : b->options_len;
  be_device *d = ws_device(b->dev);
  const be_module_pkg *pkg = ws.be->module;
  uint64_t room = l->h.len - sizeof *b; /* ws_load checked h.len >= sizeof *b */
  if (d == NULL || pkg == NULL || opt_len > room || b->code_len != room - opt_len ||
      (b->options_len != UINT32_MAX && opt_len == 0))
    return ACCEL_EINVAL;
  const char *opt = (const char *)(b + 1);
  const void *code = opt + opt_len;
  char *options = NULL;
  if (b->options_len != UINT32_MAX) {
    if ((options = malloc(opt_len + 1)) == NULL)
      return ACCEL_ENOMEM;
    memcpy(options, opt, opt_len);
    options[opt_len] = '\0';
  }
  relay_compiler rc = {.base = {.compile = relay}, .load = l};
  int status = b->use_compiler && pkg->load_with
                   ? pkg->load_with(d, b->source, code, b->code_len, options, &rc.base, m, log)
                   : pkg->load(d, b->source, code, b->code_len, options, m, log);
  free(options);
  return status;
}

static void *load_thread(void *arg) {
  ws_load_t *l = arg;
  ws_self = l->link;
  be_module *m = NULL;
  char *log = NULL;
  int rc = run_load(l, &m, &log);
  if (rc == 0) {
    pthread_mutex_lock(&ws.mu);
    if (!ws_put(&ws.modules, ((const bw_load *)l->body)->module, m))
      rc = ACCEL_ENOMEM;
    pthread_mutex_unlock(&ws.mu);
    if (rc != 0)
      ws.be->module->unload(m);
  }
  unlink_load(l);
  bw_loaded out = {.status = rc, .log_len = log ? (uint32_t)strlen(log) : 0};
  ws_reply(l->tag, 0, &out, sizeof out, log, out.log_len);
  free(log);
  free(l->body);
  free(l);
  return NULL;
}

void ws_load(const bw_hdr *h, void *body) {
  ws_load_t *l = calloc(1, sizeof *l);
  pthread_t t;
  pthread_attr_t a;
  if (l == NULL || h->len < sizeof(bw_load)) {
    free(l);
    free(body);
    {
      ws_reply(h->tag, ACCEL_EPROTO, NULL, 0, NULL, 0);
      return;
    }
  }
  *l = (ws_load_t){.link = ws_self, .tag = h->tag, .h = *h, .body = body};
  pthread_mutex_lock(&ws.mu);
  l->next = ws.loads;
  ws.loads = l;
  pthread_mutex_unlock(&ws.mu);
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &a, load_thread, l);
  pthread_attr_destroy(&a);
  if (rc != 0) {
    unlink_load(l);
    free(l->body);
    free(l);
    ws_reply(h->tag, 0, &(bw_loaded){.status = ACCEL_ESYS}, sizeof(bw_loaded), NULL, 0);
  }
}

void ws_compiled(const bw_hdr *h, void *body) {
  pthread_mutex_lock(&ws.mu);
  ws_load_t *l = ws.loads;
  while (l != NULL && l->tag != h->tag)
    l = l->next;
  if (l != NULL) {
    l->answer = body;
    l->answer_len = h->len;
    l->answered = true;
    pthread_cond_broadcast(&ws.cv);
  }
  pthread_mutex_unlock(&ws.mu);
  if (l == NULL)
    free(body);
}
