/* A worker process and its channels (proxy.h): started from a fresh executable (posix_spawn,
 * never a fork of the multi-threaded daemon with its driver state), its notes read by a
 * thread of acceld's, its death turned into ACCEL_EDEVLOST for everything pending. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/runtime.h"
#include "backends/worker/proxy.h"
#include "runtime/deadline.h"

extern char **environ;

bw_options bw_opts;
static char helper_path[4096];
static pthread_mutex_t links_mu = PTHREAD_MUTEX_INITIALIZER;
static bw_proc *procs; /* workers devices may join */

void bw_configure(const bw_options *o) {
  pthread_mutex_lock(&links_mu);
  bw_opts = *o;
  snprintf(helper_path, sizeof helper_path, "%s", o->helper ? o->helper : "");
  bw_opts.helper = helper_path;
  pthread_mutex_unlock(&links_mu);
}

/* ---- pending completions ---- */

static bw_pending *find(bw_link *l, uint64_t tag) {
  uint32_t i = (uint32_t)(tag & 0xffffffffu);
  if (i == 0 || i > l->npend)
    return NULL;
  bw_pending *p = &l->pend[i - 1];
  return p->in_use && p->gen == (uint32_t)(tag >> 32) ? p : NULL;
}

uint64_t bw_pending_add(bw_link *l, const bw_pending *p) {
  if (l->dead)
    return 0;
  if (l->free_head == 0) {
    if (l->npend == l->pend_cap) {
      uint32_t cap = l->pend_cap ? l->pend_cap * 2 : 256;
      bw_pending *n = realloc(l->pend, cap * sizeof *n);
      if (n == NULL)
        return 0;
      l->pend = n;
      l->pend_cap = cap;
    }
    l->pend[l->npend] = (bw_pending){0};
    l->free_head = ++l->npend;
  }
  uint32_t i = l->free_head;
  bw_pending *slot = &l->pend[i - 1];
  uint32_t gen = slot->gen + 1;
  l->free_head = slot->next_free;
  *slot = *p;
  slot->gen = gen;
  slot->in_use = true;
  return ((uint64_t)gen << 32) | i;
}

static void pending_free(bw_link *l, bw_pending *p) {
  p->in_use = false;
  p->next_free = l->free_head;
  l->free_head = (uint32_t)(p - l->pend) + 1;
}

bool bw_pending_drop(bw_link *l, uint64_t tag) {
  bw_pending *p = find(l, tag);
  if (p != NULL) {
    free(p->body);
    p->body = NULL;
    pending_free(l, p);
  }
  return p != NULL;
}

/* ---- ids ---- */

uint64_t bw_id_take(bw_link *l, bw_kind k) {
  bw_ids_pool *p = &l->ids[k];
  pthread_mutex_lock(&l->mu);
  uint64_t id = p->nfree ? p->free[--p->nfree] : p->next++;
  pthread_mutex_unlock(&l->mu);
  return id;
}

void bw_id_give(bw_link *l, bw_kind k, uint64_t id) {
  bw_ids_pool *p = &l->ids[k];
  pthread_mutex_lock(&l->mu);
  if (p->nfree == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    uint64_t *n = realloc(p->free, cap * sizeof *n);
    if (n == NULL) { /* the id is not used again: the worker's table only grows */
      pthread_mutex_unlock(&l->mu);
      return;
    }
    p->free = n;
    p->cap = cap;
  }
  p->free[p->nfree++] = id;
  pthread_mutex_unlock(&l->mu);
}

/* ---- completions (the reader thread) ---- */

static void event_unref(bw_event *e) { /* under mu */
  if (--e->refs == 0)
    free(e);
}

/* ---- host functions (the caller thread) ---- */

/* The caller thread sends acks, and the reader when it ran a function itself (no memory for
 * the caller's queue): one frame at a time. */
static void send_ack(bw_link *l, uint64_t tag) {
  pthread_mutex_lock(&l->ack_mu);
  (void)bw_send(l->ack, BW_ACK, tag, NULL, 0, NULL, 0, NULL, 0);
  pthread_mutex_unlock(&l->ack_mu);
}

static void *caller(void *arg) {
  bw_link *l = arg;
  pthread_setname_np(pthread_self(), "accel-link-call"); /* seen in top -H, gdb, perf */
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (l->cb_head == NULL && !l->cb_end)
      pthread_cond_wait(&l->cb_cv, &l->mu);
    bw_cb *c = l->cb_head;
    if (c == NULL)
      break;
    l->cb_head = c->next;
    if (l->cb_head == NULL)
      l->cb_tail = NULL;
    pthread_mutex_unlock(&l->mu);
    c->fn(c->arg, c->status);
    if (c->hold && c->status == 0) /* the worker's queue waits for this one */
      send_ack(l, c->tag);
    free(c);
    pthread_mutex_lock(&l->mu);
    l->cb_ran++;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* Queues a host function for the caller thread (mu not held). Without memory for the entry
 * it runs here: late, but exactly once. */
static void call_later(bw_link *l, const bw_pending *p, int status) {
  bw_cb *c = malloc(sizeof *c);
  if (c == NULL) { /* counted as queued and run at once */
    p->fn(p->arg, status);
    if (p->hold && status == 0)
      send_ack(l, p->seq);
    return;
  }
  *c = (bw_cb){p->fn, p->arg, status, p->hold, p->seq, NULL};
  pthread_mutex_lock(&l->mu);
  l->cb_queued++;
  if (l->cb_tail)
    l->cb_tail->next = c;
  else
    l->cb_head = c;
  l->cb_tail = c;
  pthread_cond_signal(&l->cb_cv);
  pthread_mutex_unlock(&l->mu);
}

/* The caller runs what is queued, then ends (drains waiting for it stop waiting). */
static void caller_end(bw_link *l) {
  pthread_mutex_lock(&l->mu);
  l->cb_end = true;
  pthread_cond_broadcast(&l->cb_cv);
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  if (l->has_caller)
    pthread_join(l->caller, NULL);
  l->has_caller = false;
}

/* What a completion does once it is out of the table (mu not held; `p` a copy). */
static void finish(bw_link *l, bw_pending *p, int status) {
  if (p->kind == BW_P_CALLBACK && !p->hold) {
    p->fn(p->arg, status); /* host_notify's are quick by contract: no thread hop */
    return;
  }
  if (p->kind == BW_P_CALLBACK) {
    call_later(l, p, status);
    return;
  }
  if (p->kind == BW_P_D2H && status == 0 && !p->direct)
    memcpy(p->dst, l->stage + p->stage_off, p->bytes);
  pthread_mutex_lock(&l->mu);
  if (p->kind == BW_P_EVENT) {
    bw_event *e = p->event;
    if (p->seq >= e->done) {
      e->done = p->seq;
      e->status = status;
    }
    event_unref(e);
  } else if (!p->direct) {
    bw_stage_give(l, p->stage_off, p->stage_len);
  }
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

static void on_done(bw_link *l, uint64_t tag, int status) {
  pthread_mutex_lock(&l->mu);
  bw_pending *p = find(l, tag);
  if (p == NULL || p->kind == BW_P_CALL) {
    pthread_mutex_unlock(&l->mu);
    return;
  }
  bw_pending copy = *p;
  copy.seq = copy.kind == BW_P_CALLBACK ? tag : copy.seq;
  pending_free(l, p);
  if (status == ACCEL_EDEVLOST && copy.dev < BW_LINK_DEVICES)
    __atomic_store_n(&l->lost[copy.dev], true, __ATOMIC_RELAXED); /* read without mu */
  pthread_mutex_unlock(&l->mu);
  finish(l, &copy, status);
}

/* A reply or a compile request: the waiting caller takes it. */
static void on_answer(bw_link *l, const bw_hdr *h, void *body) {
  pthread_mutex_lock(&l->mu);
  bw_pending *p = find(l, h->tag);
  if (p != NULL && p->kind == BW_P_CALL) {
    free(p->body);
    p->body = body;
    p->body_len = h->len;
    p->compile = h->type == BW_COMPILE;
    p->answered = h->type == BW_REPLY;
    body = NULL;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  free(body);
}

/* The worker went: every completion reports ACCEL_EDEVLOST, every call is answered so. */
void bw_link_mark_dead(bw_link *l) {
  __atomic_store_n(&l->dead, true, __ATOMIC_RELAXED); /* dead and lost are read without mu */
  for (uint32_t d = 0; d < BW_LINK_DEVICES; d++)
    __atomic_store_n(&l->lost[d], true, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&l->cv); /* calls waiting for an answer give up */
}

static void on_death(bw_link *l) {
  pthread_mutex_lock(&l->mu);
  bw_link_mark_dead(l);
  for (uint32_t i = 0; i < l->npend; i++) {
    bw_pending *p = &l->pend[i];
    if (!p->in_use || p->kind == BW_P_CALL)
      continue;
    bw_pending copy = *p;
    pending_free(l, p);
    pthread_mutex_unlock(&l->mu);
    finish(l, &copy, ACCEL_EDEVLOST);
    pthread_mutex_lock(&l->mu);
  }
  l->reader_done = true;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

void bw_link_drain(bw_link *l) {
  bw_link_flush(l); /* the host functions waited for may come after frames in the cork */
  pthread_mutex_lock(&l->mu);
  while (l->dead && !l->reader_done && l->has_reader)
    pthread_cond_wait(&l->cv, &l->mu);
  uint64_t target = l->cb_queued;
  while (l->cb_ran < target && !l->cb_end)
    pthread_cond_wait(&l->cv, &l->mu);
  pthread_mutex_unlock(&l->mu);
}

static void *reader(void *arg) {
  bw_link *l = arg;
  pthread_setname_np(pthread_self(), "accel-link-read"); /* seen in top -H, gdb, perf */
  _Alignas(16) char buf[256];
  bw_hdr h;
  void *body;
  int passed;
  bw_reader notes; /* no descriptors come this way */
  bool ok = bw_reader_init_chan(&notes, &l->note, 0);
  /* A frame past BW_MAX_NOTE ends the worker's link, as its death would. */
  while (ok && bw_reader_next(&notes, &h, buf, sizeof buf, &body, &passed, BW_MAX_NOTE)) {
    if (h.type == BW_DONE) {
      int status = h.len >= sizeof(bw_reply) ? ((bw_reply *)body)->status : ACCEL_EPROTO;
      on_done(l, h.tag, status);
    } else if (h.type == BW_REPLY || h.type == BW_COMPILE) {
      void *copy = malloc(h.len + 1u); /* room for the NUL of a target text */
      if (copy != NULL)
        memcpy(copy, body, h.len);
      if (body != buf)
        free(body);
      body = copy;
      if (body != NULL && h.type == BW_COMPILE)
        ((char *)body)[h.len] = '\0'; /* room: bw_recv's and the copy's are h.len + 1 */
      on_answer(l, &h, body);
      continue;
    }
    if (body != buf)
      free(body);
  }
  bw_reader_fini(&notes);
  on_death(l);
  return NULL;
}

/* ---- calls ---- */

/* A frame on cmd, after what the cork holds; `cork`: it may wait in the cork instead. */
static bool send_frame(bw_link *l, bool cork, uint16_t type, uint64_t tag, const void *a,
                       size_t alen, const void *b, size_t blen, const void *c, size_t clen) {
  pthread_mutex_lock(&l->send_mu);
  bool dead = __atomic_load_n(&l->dead, __ATOMIC_RELAXED);
  bool ok = !dead &&
            ((cork && bw_cork_frame(l, type, tag, a, alen, b, blen, c, clen)) ||
             (bw_cork_flush(l) && bw_chan_send(&l->cmd, type, tag, a, alen, b, blen, c, clen)));
  if (!ok && !dead)
    bw_link_fail(l); /* corked frames reported sent may be lost with it */
  pthread_mutex_unlock(&l->send_mu);
  return ok;
}

bool bw_link_send(bw_link *l, uint16_t type, uint64_t tag, const void *a, size_t alen,
                  const void *b, size_t blen, const void *c, size_t clen) {
  return send_frame(l, true, type, tag, a, alen, b, blen, c, clen);
}

/* Runs the compile a load asked for and sends its answer (mu not held). */
static void answer_compile(bw_link *l, uint64_t tag, char *target, bw_compile_fn fn, void *arg) {
  void *ans = NULL;
  size_t len = 0;
  bw_compiled fail = {.status = ACCEL_ENOTSUP};
  if (fn == NULL || fn(arg, target, &ans, &len) != 0 || ans == NULL)
    (void)send_frame(l, false, BW_COMPILED, tag, &fail, sizeof fail, NULL, 0, NULL, 0);
  else
    (void)send_frame(l, false, BW_COMPILED, tag, ans, len, NULL, 0, NULL, 0);
  free(ans);
  free(target);
}

static int call(bw_link *l, uint16_t type, const void *a, size_t alen, const void *b, size_t blen,
                const void *c, size_t clen, int pass, void **body, uint32_t *body_len,
                bw_compile_fn compile, void *compile_arg) {
  *body = NULL;
  pthread_mutex_lock(&l->mu);
  uint64_t tag = bw_pending_add(l, &(bw_pending){.kind = BW_P_CALL});
  pthread_mutex_unlock(&l->mu);
  if (tag == 0)
    return ACCEL_EDEVLOST;
  bool sent;
  if (pass >= 0) {
    pthread_mutex_lock(&l->send_mu);
    bool dead = __atomic_load_n(&l->dead, __ATOMIC_RELAXED);
    sent = !dead && bw_cork_flush(l) && bw_chan_send_fd(&l->cmd, type, tag, a, alen, pass);
    if (!sent && !dead)
      bw_link_fail(l);
    pthread_mutex_unlock(&l->send_mu);
  } else { /* never corked: this thread waits for the reply, the loop's thread too */
    sent = send_frame(l, false, type, tag, a, alen, b, blen, c, clen);
  }
  pthread_mutex_lock(&l->mu);
  bw_pending *p;
  while (sent && (p = find(l, tag)) != NULL && !p->answered && !l->dead) {
    if (!p->compile) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    char *target = p->body;
    p->body = NULL;
    p->compile = false;
    pthread_mutex_unlock(&l->mu);
    answer_compile(l, tag, target, compile, compile_arg);
    pthread_mutex_lock(&l->mu);
  }
  p = find(l, tag);
  int rc = ACCEL_EDEVLOST;
  if (p != NULL && p->answered && p->body != NULL && p->body_len >= sizeof(bw_reply)) {
    rc = 0;
    *body = p->body;
    *body_len = p->body_len;
    p->body = NULL;
  }
  bw_pending_drop(l, tag);
  pthread_mutex_unlock(&l->mu);
  return rc;
}

int bw_link_call(bw_link *l, uint16_t type, const void *a, size_t alen, const void *b, size_t blen,
                 const void *c, size_t clen, void **body, uint32_t *body_len, bw_compile_fn compile,
                 void *compile_arg) {
  return call(l, type, a, alen, b, blen, c, clen, -1, body, body_len, compile, compile_arg);
}

int bw_link_call_fd(bw_link *l, uint16_t type, const void *a, size_t alen, int pass, void **body,
                    uint32_t *body_len) {
  return call(l, type, a, alen, NULL, 0, NULL, 0, pass, body, body_len, NULL, NULL);
}

int bw_link_create(bw_link *l, uint32_t dev, bw_kind k, uint16_t type, uint64_t *id) {
  *id = bw_id_take(l, k);
  bw_ids b = {.dev = dev, .id = *id};
  if (bw_link_send(l, type, 0, &b, sizeof b, NULL, 0, NULL, 0))
    return 0;
  bw_id_give(l, k, *id);
  return ACCEL_EDEVLOST;
}

bool bw_link_lost(bw_link *l, uint32_t dev) {
  return __atomic_load_n(&l->lost[dev], __ATOMIC_RELAXED);
}

/* Guards every worker pid kill(2) is given: a pid is forgotten under it before the process is
 * reaped (reap below), so a kill never meets a reused pid (an event or a device's deadline
 * that outlives its worker still holds the link and may kill it). */
static pthread_mutex_t pid_mu = PTHREAD_MUTEX_INITIALIZER;

static void kill_pid(const pid_t *pid) {
  pthread_mutex_lock(&pid_mu);
  if (*pid > 0)
    kill(*pid, SIGKILL);
  pthread_mutex_unlock(&pid_mu);
}

void bw_link_kill(bw_link *l) {
  kill_pid(&l->pid);
}

/* ---- the process ---- */

/* An fd above the ones the worker gets, close-on-exec (dup2 onto itself would keep it). */
static int high(int fd) {
  int h = fcntl(fd, F_DUPFD_CLOEXEC, 16);
  close(fd);
  return h;
}

static bool pair(int *mine, int *theirs) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return false;
  *mine = sv[0];
  *theirs = high(sv[1]);
  return *theirs >= 0;
}

/* The channels' sockets, staging region and rings of a new link; theirs: the worker's ends
 * (cmd, note, ack, staging, rings). */
static bool channels(bw_link *l, size_t stage_bytes, int theirs[5]) {
  if (!pair(&l->cmd.fd, &theirs[0]) || !pair(&l->note.fd, &theirs[1]) ||
      !pair(&l->ack, &theirs[2]) || !bw_stage_init(l, stage_bytes) ||
      (theirs[3] = fcntl(l->stage_fd, F_DUPFD_CLOEXEC, 16)) < 0)
    return false;
  if (!bw_rings_create(&l->rings) || (theirs[4] = fcntl(l->rings.fd, F_DUPFD_CLOEXEC, 16)) < 0)
    return false;
  bw_chan_ring(&l->cmd, &l->rings, false);
  bw_chan_ring(&l->note, &l->rings, true);
  return true;
}

static int spawn(bw_link *l) {
  int theirs[5] = {-1, -1, -1, -1, -1};
  int rc = ACCEL_ESYS;
  if (!channels(l, bw_opts.stage_bytes ? bw_opts.stage_bytes : BW_STAGE_DEFAULT, theirs))
    goto out;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (int i = 0; i < 5; i++)
    posix_spawn_file_actions_adddup2(&fa, theirs[i], BW_FD_CMD + i);
  char *argv[] = {(char *)"accel-device", (char *)l->real->name, NULL};
  int err = posix_spawn(&l->pid, bw_opts.helper, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) {
    l->pid = 0;
    accel_log(ACCEL_LOG_ERROR, "device", "cannot start the device worker %s: %s", bw_opts.helper,
              strerror(err));
    goto out;
  }
  l->has_caller = pthread_create(&l->caller, NULL, caller, l) == 0;
  l->has_reader = l->has_caller && pthread_create(&l->reader, NULL, reader, l) == 0;
  rc = l->has_reader ? 0 : ACCEL_ESYS;
out:
  for (int i = 0; i < 5; i++)
    if (theirs[i] >= 0)
      close(theirs[i]);
  return rc;
}

static void close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

/* Their sockets and rings (the reader has ended). Under send_mu: a sender inside a write
 * (waiting for room, say: the shutdown ends that wait) finishes before the rings go. */
static void close_channels(bw_link *l) {
  pthread_mutex_lock(&l->send_mu);
  bw_chan_close(&l->cmd);
  l->cmd.ring.ctl = NULL;
  bw_chan_close(&l->note);
  l->note.ring.ctl = NULL;
  close_fd(&l->ack);
  bw_rings_unmap(&l->rings);
  pthread_mutex_unlock(&l->send_mu);
}

/* Whether pid has exited, not reaped (WNOWAIT); *ours false when it is not a child to wait
 * for any more (someone else reaped it: an embedding program's own waitpid(-1)). */
static bool exited(pid_t pid, int flags, bool *ours) {
  siginfo_t si = {0};
  int rc;
  while ((rc = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | flags)) != 0 && errno == EINTR) {
  }
  *ours = rc == 0;
  return rc != 0 || si.si_pid == pid;
}

/* Waits for the worker to exit after its channel closed: a kernel still running there may
 * keep it, so after `grace_ms` it is killed. Then every copy of its pid in `pids` is
 * forgotten under pid_mu, and only then is it reaped. */
static void reap(pid_t pid, int grace_ms, pid_t *const *pids, size_t npids) {
  bool gone = false, ours = true;
  for (int waited = 0; waited < grace_ms && !(gone = exited(pid, WNOHANG, &ours)); waited++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (!gone) {
    kill(pid, SIGKILL); /* not reaped yet: still ours */
    exited(pid, 0, &ours);
  }
  pthread_mutex_lock(&pid_mu);
  for (size_t i = 0; i < npids; i++)
    *pids[i] = 0;
  pthread_mutex_unlock(&pid_mu);
  while (ours && waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  } /* not ours any more: the pid may be another child of the program's by now */
}

static void link_memory_free(bw_link *l) {
  bw_cork_free(l);
  for (int k = 0; k < BW_K_COUNT; k++)
    free(l->ids[k].free);
  for (uint32_t i = 0; i < l->npend; i++)
    free(l->pend[i].body);
  free(l->pend);
  pthread_mutex_destroy(&l->send_mu);
  pthread_mutex_destroy(&l->ack_mu);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  pthread_cond_destroy(&l->cb_cv);
  free(l);
}

void bw_link_hold(bw_link *l) {
  pthread_mutex_lock(&links_mu);
  l->objs++;
  pthread_mutex_unlock(&links_mu);
}

void bw_link_release(bw_link *l) {
  pthread_mutex_lock(&links_mu);
  bool last = --l->objs == 0 && l->torn;
  pthread_mutex_unlock(&links_mu);
  if (last)
    link_memory_free(l);
}

/* The channels stop: no frame goes out any more, the worker's thread serving the link sees
 * the end of its calls. */
static void link_stop(bw_link *l) {
  /* Through rings the cork is empty and the worker still reads what the ring holds after the
   * end: shut first, so that a sender waiting for room (a hung worker) lets send_mu go. */
  if (l->cmd.ring.ctl != NULL)
    bw_chan_shutdown(&l->cmd, SHUT_RDWR);
  bw_cork_close(l); /* before cmd closes: a flush after would write to a closed descriptor */
  bw_chan_shutdown(&l->cmd, SHUT_RDWR);
}

/* After the process is over: the threads end, the channels close; the memory goes with the
 * last object holding it. */
static void link_finish(bw_link *l) {
  if (l->has_reader)
    pthread_join(l->reader, NULL); /* its note channel closed with the process */
  caller_end(l);
  close_channels(l);
  pthread_mutex_lock(&l->mu);
  __atomic_store_n(&l->dead, true, __ATOMIC_RELAXED);
  bw_stage_fini(l);
  pthread_mutex_unlock(&l->mu);
  pthread_mutex_lock(&links_mu);
  l->torn = true;
  bool unheld = l->objs == 0;
  pthread_mutex_unlock(&links_mu);
  if (unheld)
    link_memory_free(l);
}

/* A link with a process of its own (a probe's, tests'): both end. */
static void link_free(bw_link *l, bool kill_it) {
  if (kill_it)
    bw_link_kill(l);
  link_stop(l);
  if (l->pid > 0)
    reap(l->pid, kill_it ? 0 : 2000, (pid_t *const[]){&l->pid}, 1);
  link_finish(l);
}

/* A worker process ends with all its links. */
static void proc_free(bw_proc *p, bool kill_it) {
  if (kill_it)
    kill_pid(&p->pid);
  pid_t *pids[BW_MAX_LINKS + 1] = {&p->pid};
  size_t npids = 1;
  for (uint32_t i = 0; i < BW_MAX_LINKS; i++)
    if (p->link[i] != NULL) {
      link_stop(p->link[i]);
      pids[npids++] = &p->link[i]->pid;
    }
  if (p->pid > 0)
    reap(p->pid, kill_it ? 0 : 2000, pids, npids);
  for (uint32_t i = 0; i < BW_MAX_LINKS; i++)
    if (p->link[i] != NULL)
      link_finish(p->link[i]);
  free(p);
}

static bw_link *link_alloc(const be_ops *real) {
  bw_link *l = calloc(1, sizeof *l);
  if (l == NULL)
    return NULL;
  l->real = real;
  l->began_ns = rt_mono_ns();
  l->cmd = bw_chan_socket(-1);
  l->note = bw_chan_socket(-1);
  l->ack = l->stage_fd = l->rings.fd = -1;
  pthread_mutex_init(&l->send_mu, NULL);
  pthread_mutex_init(&l->ack_mu, NULL);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  pthread_cond_init(&l->cb_cv, NULL);
  return l;
}

/* A link that never served (its threads not started, or ended): its channels close. */
static void link_discard(bw_link *l) {
  caller_end(l);
  close_channels(l);
  bw_stage_fini(l);
  link_memory_free(l);
}

static int link_new(const be_ops *real, bw_link **out) {
  bw_link *l = link_alloc(real);
  if (l == NULL)
    return ACCEL_ENOMEM;
  int rc = spawn(l);
  if (rc != 0) {      /* links_mu may be held: not link_free */
    if (l->pid > 0) { /* started, but no thread could read it */
      kill(l->pid, SIGKILL);
      waitpid(l->pid, NULL, 0);
    }
    link_discard(l);
    return rc;
  }
  *out = l;
  return 0;
}

static uint64_t stage_size(void) {
  return bw_opts.stage_bytes ? bw_opts.stage_bytes : BW_STAGE_DEFAULT;
}

/* The worker's end of the new link's channels: its note, ack, staging region and rings go as
 * the first frame on its cmd, then cmd itself through the first link; 0 once the worker serves
 * it. */
static int hand_over(bw_proc *p, bw_link *l, int *theirs) {
  if (!bw_send_fds(l->cmd.fd, BW_CHANNELS, 0, NULL, 0, theirs + 1, 4))
    return ACCEL_ESYS;
  void *body = NULL;
  uint32_t len = 0;
  int rc = bw_link_call_fd(p->link[0], BW_ATTACH, NULL, 0, theirs[0], &body, &len);
  if (rc == 0)
    rc = ((bw_reply *)body)->status;
  free(body);
  return rc;
}

/* Link n of a running worker: channels of its own, served by a thread of its own there. Called
 * without links_mu (bw_link_get says why); p is pinned by the caller's reference. Its threads
 * start before the handshake, so that nothing can fail once the worker serves the link (a
 * link closed then would end the worker's process, and every world's devices with it). */
static int link_attach(bw_proc *p, bw_link **out) {
  bw_link *l = link_alloc(p->real);
  if (l == NULL)
    return ACCEL_ENOMEM;
  int theirs[5] = {-1, -1, -1, -1, -1}; /* cmd, note, ack, staging, rings */
  int rc = ACCEL_ESYS;
  if (channels(l, stage_size(), theirs) &&
      (l->has_caller = pthread_create(&l->caller, NULL, caller, l) == 0) &&
      (l->has_reader = pthread_create(&l->reader, NULL, reader, l) == 0))
    rc = hand_over(p, l, theirs);
  for (int i = 0; i < 5; i++)
    if (theirs[i] >= 0)
      close(theirs[i]);
  if (rc != 0) {
    if (l->note.fd >= 0) /* the reader ends whether or not the worker took it */
      bw_chan_shutdown(&l->note, SHUT_RDWR);
    link_free(l, false);
    return rc;
  }
  l->proc = p;
  l->pid = p->pid;
  *out = l;
  return 0;
}

static int proc_new(const be_ops *real, int group, bw_proc **out) {
  bw_proc *p = calloc(1, sizeof *p);
  if (p == NULL)
    return ACCEL_ENOMEM;
  int rc = link_new(real, &p->link[0]);
  if (rc != 0) {
    free(p);
    return rc;
  }
  p->real = real;
  p->group = group;
  p->pid = p->link[0]->pid;
  p->link[0]->proc = p;
  *out = p;
  return 0;
}

int bw_link_adopt(const be_ops *real, int cmd, int note, int ack, int rings, size_t stage_bytes,
                  bw_link **out) {
  bw_link *l = link_alloc(real);
  if (l == NULL)
    return ACCEL_ENOMEM;
  l->cmd = bw_chan_socket(cmd);
  l->note = bw_chan_socket(note);
  l->ack = ack;
  if (rings >= 0) { /* else the sockets carry the frames */
    if (!bw_rings_map(&l->rings, dup(rings))) {
      l->cmd.fd = l->note.fd = l->ack = -1;
      link_discard(l);
      return ACCEL_EINVAL;
    }
    bw_chan_ring(&l->cmd, &l->rings, false);
    bw_chan_ring(&l->note, &l->rings, true);
  }
  if (!bw_stage_init(l, stage_bytes) ||
      !(l->has_caller = pthread_create(&l->caller, NULL, caller, l) == 0) ||
      !(l->has_reader = pthread_create(&l->reader, NULL, reader, l) == 0)) {
    l->cmd.fd = l->note.fd = l->ack = -1; /* the caller's */
    link_free(l, false);
    return ACCEL_ESYS;
  }
  *out = l;
  return 0;
}

void bw_link_end(bw_link *l) {
  link_free(l, false);
}

/* Devices that work together (peer copies, collectives) share their backend's worker. */
static int group_of(const be_ops *real, uint32_t index) {
  return real->can_peer || real->collective ? -1 : (int)index;
}

static bool link_dead(const bw_link *l) {
  return l != NULL && __atomic_load_n(&l->dead, __ATOMIC_RELAXED);
}

/* A worker of real's group that new devices may join. One whose link ended while the process
 * lives (its reader refused what the worker sent) is killed instead: every world then restarts
 * its devices on a fresh one. Under links_mu. */
static bool proc_joinable(bw_proc *p, const be_ops *real, int group) {
  if (p->real != real || p->group != group || p->dead)
    return false;
  for (uint32_t i = 0; i < BW_MAX_LINKS; i++)
    if (link_dead(p->link[i])) {
      p->dead = true;
      kill_pid(&p->pid);
      return false;
    }
  return true;
}

static void proc_unlist(bw_proc *p) { /* under links_mu */
  for (bw_proc **at = &procs; *at; at = &(*at)->next)
    if (*at == p) {
      *at = p->next;
      break;
    }
}

static pthread_cond_t links_cv = PTHREAD_COND_INITIALIZER; /* an attach ended */

/* The link's busy time now, under links_mu: its age less the worker's waits (the worker's
 * word, bounded by the age), never less than it last said, whatever the worker wrote (a wait
 * that ended after `now` was read, or a hostile worker's numbers). */
static uint64_t link_busy(bw_link *l, uint64_t now) {
  uint64_t up = now > l->began_ns ? now - l->began_ns : 0;
  uint64_t idle = bw_rings_reader_idle_ns(&l->rings, false, now);
  uint64_t busy = idle < up ? up - idle : 0;
  if (busy > l->busy_shown)
    l->busy_shown = busy;
  return l->busy_shown;
}

/* The worker's completion counts, under links_mu, never lower than last reported. */
static void link_done_counts(bw_link *l, uint64_t *completions, uint64_t *events) {
  bw_done_counts *d = bw_rings_done_counts(&l->rings);
  uint64_t c = atomic_load_explicit(&d->completions, memory_order_relaxed);
  uint64_t e = atomic_load_explicit(&d->events, memory_order_relaxed);
  if (c > l->completions_shown)
    l->completions_shown = c;
  if (e > l->events_shown)
    l->events_shown = e;
  *completions = l->completions_shown;
  *events = l->events_shown;
}

size_t bw_links_busy(bw_link_busy *out, size_t max) {
  size_t n = 0;
  pthread_mutex_lock(&links_mu);
  uint64_t now = rt_mono_ns(); /* after the lock: every listed link began before it */
  for (bw_proc *p = procs; p != NULL; p = p->next)
    for (uint32_t i = 0; i < BW_MAX_LINKS && !p->dead; i++) {
      bw_link *l = p->link[i];
      if (l == NULL || l->rings.base == NULL || link_dead(l))
        continue;
      if (n < max) {
        out[n] = (bw_link_busy){.backend = p->real->name,
                                .pid = p->pid, /* zeroed only once unlisted (reap) */
                                .link = i,
                                .busy_ns = link_busy(l, now)};
        link_done_counts(l, &out[n].completions, &out[n].events);
      }
      n++;
    }
  pthread_mutex_unlock(&links_mu);
  return n;
}

/* Link n of p, attached if need be. links_mu is let go during the handshake: it waits for the
 * worker (behind link 0's earlier calls), and a loop thread corking a frame on link 0 takes
 * links_mu under link 0's send_mu (bw_link_hold), so holding it across the call would deadlock.
 * The slot is reserved meanwhile; another open of the same link waits for the outcome. */
static int link_of(bw_proc *p, uint32_t n) {
  while (p->link[n] == NULL && p->attaching[n])
    pthread_cond_wait(&links_cv, &links_mu);
  if (p->link[n] != NULL)
    return 0;
  p->attaching[n] = true;
  pthread_mutex_unlock(&links_mu);
  bw_link *l = NULL;
  int rc = link_attach(p, &l);
  pthread_mutex_lock(&links_mu);
  p->attaching[n] = false;
  if (rc == 0) {
    l->index = n;
    p->link[n] = l;
  }
  pthread_cond_broadcast(&links_cv);
  return rc;
}

int bw_link_get(const be_ops *real, uint32_t index, uint32_t link, bw_link **out) {
  *out = NULL;
  if (link >= BW_MAX_LINKS)
    return ACCEL_EINVAL;
  int group = group_of(real, index);
  pthread_mutex_lock(&links_mu);
  bw_proc *p = procs;
  while (p != NULL && !proc_joinable(p, real, group))
    p = p->next;
  int rc = 0;
  if (p == NULL && (rc = proc_new(real, group, &p)) == 0) {
    p->next = procs;
    procs = p;
  }
  bool last = false;
  if (rc == 0) {
    p->refs++; /* the open's, pinning p while links_mu is let go */
    rc = link_of(p, link);
    if (rc == 0)
      *out = p->link[link];
    else if ((last = --p->refs == 0))
      proc_unlist(p);
  }
  pthread_mutex_unlock(&links_mu);
  if (last)
    proc_free(p, false);
  return rc;
}

int bw_link_probe(const be_ops *real, int *count, char *why, size_t why_len) {
  bw_link *l;
  *count = 0;
  int rc = link_new(real, &l); /* its own: never joined by a device */
  if (rc != 0) {
    snprintf(why, why_len, "the device worker did not start");
    return ACCEL_ENOTSUP;
  }
  void *body = NULL;
  uint32_t len = 0;
  rc = bw_link_call(l, BW_PROBE, NULL, 0, NULL, 0, NULL, 0, &body, &len, NULL, NULL);
  const bw_probed *p = body ? bw_answer(body) : NULL;
  if (rc == 0 && len >= sizeof(bw_reply) + sizeof *p) {
    rc = p->rc;
    *count = p->count;
    if (why_len)
      snprintf(why, why_len, "%.*s", (int)sizeof p->why, p->why);
  } else if (rc == 0) {
    rc = ACCEL_EPROTO;
  }
  free(body);
  if (rc != 0 && rc != ACCEL_ENOTSUP && why_len && why[0] == '\0')
    snprintf(why, why_len, "the device worker's probe: %s", accel_err_name(rc));
  link_free(l, false);
  return rc == 0 ? 0 : ACCEL_ENOTSUP;
}

void bw_link_put(bw_link *l, bool kill_it) {
  bw_proc *p = l->proc;
  pthread_mutex_lock(&links_mu);
  if (kill_it) {
    bw_link_kill(l); /* its other devices see their work fail: a fresh worker serves them */
    p->dead = true;  /* no new device joins it */
  }
  bool last = --p->refs == 0;
  if (last)
    proc_unlist(p);
  pthread_mutex_unlock(&links_mu);
  if (last)
    proc_free(p, kill_it);
}
