/* The device worker process (worker.h): its links' channels, id tables and completions. A
 * thread per link (the main thread for the first) reads its calls from acceld in order and
 * submits them (serve_calls.c); completions come back from the backend's threads; an ack
 * thread per link lets host callbacks that hold their queue go on once acceld has run its
 * function. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/worker/serve.h"
#include "backends/worker/worker.h"

_Thread_local ws_state *ws_self;

static void link_init(ws_state *l) {
  pthread_mutex_init(&l->note_mu, NULL);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  pthread_cond_init(&l->poll_cv, NULL);
  l->cmd = bw_chan_socket(-1);
  l->note = bw_chan_socket(-1);
  l->ack = l->rings.fd = -1;
}

ws_state *ws_link_new(const ws_state *from) {
  ws_state *l = calloc(1, sizeof *l);
  if (l == NULL)
    return NULL;
  link_init(l);
  l->be = from->be;
  l->probe_rc = from->probe_rc;
  l->probe_count = from->probe_count;
  memcpy(l->probe_why, from->probe_why, sizeof l->probe_why);
  return l;
}

/* ---- notes to acceld ---- */

void ws_reply(uint64_t tag, int status, const void *a, size_t alen, const void *b, size_t blen) {
  bw_reply r = {.status = status};
  pthread_mutex_lock(&ws.note_mu);
  bool ok = bw_chan_send(&ws.note, BW_REPLY, tag, &r, sizeof r, a, alen, b, blen);
  pthread_mutex_unlock(&ws.note_mu);
  if (!ok)
    _exit(0); /* acceld went: so does its worker */
}

void ws_done(uint64_t tag, int status) {
  bw_reply r = {.status = status};
  pthread_mutex_lock(&ws.note_mu);
  bool ok = bw_chan_send(&ws.note, BW_DONE, tag, &r, sizeof r, NULL, 0, NULL, 0);
  pthread_mutex_unlock(&ws.note_mu);
  if (!ok)
    _exit(0);
}

/* ---- tables: ids acceld chose, indexes into growing arrays ---- */

void *ws_get(ws_table *t, uint64_t id) {
  return id < t->cap ? t->slot[id] : NULL;
}

bool ws_put(ws_table *t, uint64_t id, void *p) {
  if (id >= BW_MAX_IDS)
    return false;
  if (id >= t->cap) {
    size_t cap = t->cap ? t->cap : 64;
    while (cap <= id)
      cap *= 2;
    void **s = realloc(t->slot, cap * sizeof *s);
    if (s == NULL)
      return false;
    memset(s + t->cap, 0, (cap - t->cap) * sizeof *s);
    t->slot = s;
    t->cap = cap;
  }
  t->slot[id] = p;
  return true;
}

be_device *ws_device(uint32_t dev) {
  return dev < BW_MAX_DEVICES ? ws.dev[dev] : NULL;
}

void *ws_stage_at(uint64_t off, uint64_t bytes) {
  if (off > ws.stage_bytes || bytes > ws.stage_bytes - off)
    return NULL;
  return ws.stage + off;
}

/* ---- the ack channel ---- */

static void *ack_thread(void *arg) {
  ws_self = arg;
  pthread_setname_np(pthread_self(), "accel-dev-ack"); /* seen in top -H, gdb, perf */
  bw_hdr h;
  char buf[64];
  void *body;
  while (bw_recv(ws.ack, &h, buf, sizeof buf, &body)) {
    if (body != buf)
      free(body);
    pthread_mutex_lock(&ws.mu);
    if (ws.nacked == ws.acked_cap) {
      size_t cap = ws.acked_cap ? ws.acked_cap * 2 : 64;
      uint64_t *a = realloc(ws.acked, cap * sizeof *a);
      if (a == NULL)
        _exit(1);
      ws.acked = a;
      ws.acked_cap = cap;
    }
    ws.acked[ws.nacked++] = h.tag;
    pthread_cond_broadcast(&ws.cv);
    pthread_mutex_unlock(&ws.mu);
  }
  _exit(0); /* acceld went */
}

/* ---- the process ---- */

static const be_ops *backend_named(const char *name) {
  for (const be_entry *e = be_registry(); e->name; e++)
    if (strcmp(e->name, name) == 0)
      return e->ops;
  return NULL;
}

bool ws_use_rings(ws_state *l, int fd) {
  if (!bw_rings_map(&l->rings, fd))
    return false;
  bw_chan_ring(&l->cmd, &l->rings, false);
  bw_chan_ring(&l->note, &l->rings, true);
  return true;
}

bool ws_map_stage(ws_state *l, int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0)
    return false;
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return false;
  l->stage = p;
  l->stage_bytes = (size_t)st.st_size;
  return true;
}

void ws_serve(ws_state *link) {
  ws_self = link;
  pthread_t t;
  if (pthread_create(&t, NULL, ack_thread, link) != 0 || !ws_completions_start(link))
    _exit(1);
  _Alignas(16) char buf[4096];
  bw_hdr h;
  void *body;
  int passed;
  bw_reader cmds; /* the calls that bring a descriptor: BW_SHARE, BW_ATTACH (first link) */
  uint64_t fd_types = BW_TYPE_BIT(BW_SHARE) | (link->index == 0 ? BW_TYPE_BIT(BW_ATTACH) : 0);
  if (!bw_reader_init_chan(&cmds, &ws.cmd, fd_types))
    _exit(1);
  for (;;) {
    if (!bw_reader_ready(&cmds))
      ws_groups_flush(); /* the calls ran out: this thread may wait for the next now */
    if (!bw_reader_next(&cmds, &h, buf, sizeof buf, &body, &passed, BW_MAX_FRAME))
      break;
    bool passes = ws_group_passes(&h, body);
    if (!passes)
      ws_groups_flush(); /* it may wait, or take long: nothing held behind it */
    if (h.type == BW_SHARE || h.type == BW_ATTACH) {
      if (h.type == BW_SHARE)
        ws_share(&h, body, passed);
      else
        ws_attach(&h, passed);
      if (body != buf)
        free(body);
      continue;
    }
    if (h.type == BW_LOAD || h.type == BW_COMPILED) { /* they keep the body: on the heap */
      if (body == buf && (body = malloc(h.len ? h.len : 1)) != NULL)
        memcpy(body, buf, h.len);
      if (body == NULL)
        _exit(1);
      (h.type == BW_LOAD ? ws_load : ws_compiled)(&h, body);
      continue;
    }
    ws_handle(&h, body);
    if (body != buf)
      free(body);
    if (passes)
      ws_groups_after_call();
  }
  _exit(0); /* acceld closed the channel (or went): nothing here outlives it */
}

int bw_worker_main(int argc, char **argv) {
  static ws_state first;
  link_init(&first);
  ws_self = &first;
  if (argc != 2 || (ws.be = backend_named(argv[1])) == NULL) {
    fprintf(stderr, "accel-device: usage: accel-device BACKEND (started by acceld)\n");
    return 2;
  }
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none); /* a faulting kernel is an expected event, not a core file */
  signal(SIGPIPE, SIG_IGN);
  ws.cmd = bw_chan_socket(BW_FD_CMD);
  ws.note = bw_chan_socket(BW_FD_NOTE);
  ws.ack = BW_FD_ACK;
  /* acceld writes to the rings it passed: a worker that cannot use them must not start. */
  if (!ws_use_rings(&first, BW_FD_RINGS)) {
    fprintf(stderr, "accel-device: fd %d is not a link's rings\n", BW_FD_RINGS);
    return 2;
  }
  if (!ws_map_stage(&first, BW_FD_STAGE)) {
    fprintf(stderr, "accel-device: no staging region on fd %d\n", BW_FD_STAGE);
    return 2;
  }
  char why[128] = "";
  ws.probe_rc = ws.be->probe(&ws.probe_count, why, sizeof why); /* devices are numbered here */
  snprintf(ws.probe_why, sizeof ws.probe_why, "%s", why);
  ws_serve(&first); /* never returns */
}
