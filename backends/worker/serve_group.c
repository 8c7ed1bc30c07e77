/* Completions held back while a link's calls keep coming (serve.h): on backends whose
 * completions go through the completer (an event recorded behind each), recording that event
 * is a driver call on the link's thread, the thread that submits every client's work (about
 * 1.3 us on CUDA, near half of a tiny op's submission). A completion followed at once by
 * more calls is held; the queue's held completions get one event behind all of them when
 * the link's calls run out (its thread would wait for the next), before any call but a
 * small fill or a notification (the event would otherwise come after work that may take
 * long, which a client may even make wait for this completion), before a completion that
 * cannot be held, at WS_GROUP_MAX held on the queue, or after WS_GROUP_CALLS calls since
 * the link first held one (a saturated link's input never runs out). A completion is thus
 * sent after at most WS_GROUP_CALLS small fills behind it, never before its own work.
 *
 * Off unless ACCEL_WORKER_GROUP=1 is in the worker's environment (acceld passes its own on):
 * on the H200 host it raised one pipelining client's ops 1.35x but cost eight and 32 waiting
 * clients a fifth of their aggregate (a completion waited behind the other clients' calls;
 * docs/PERFORMANCE.md "One completion event per burst of calls in the worker"). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/worker/serve.h"

static bool grouping_on(void) {
  static atomic_int on = -1; /* read once; every link's thread may ask */
  int v = atomic_load_explicit(&on, memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("ACCEL_WORKER_GROUP");
    v = e != NULL && strcmp(e, "1") == 0;
    atomic_store_explicit(&on, v, memory_order_relaxed);
  }
  return v;
}

bool ws_group_passes(const bw_hdr *h, const void *body) {
  if (h->type == BW_CALLBACK)
    return true; /* a holding one flushes its queue itself (ws_complete_after) */
  if (h->type != BW_FILL || h->len < sizeof(bw_fill))
    return false;
  bw_fill f;
  memcpy(&f, body, sizeof f);
  return f.esize != 0 && f.count <= WS_GROUP_FILL_BYTES / f.esize;
}

void ws_groups_after_call(void) {
  if (ws.grouping != NULL && ++ws.group_calls >= WS_GROUP_CALLS)
    ws_groups_flush();
}

bool ws_group_hold(ws_queue *q, uint64_t tag, int error, uint64_t seq) {
  if (!grouping_on() || q->q == NULL)
    return false;
  ws_cdone *c = malloc(sizeof *c);
  if (c == NULL)
    return false;
  *c = (ws_cdone){.tag = tag, .seq = seq, .error = error};
  if (q->gtail)
    q->gtail->next = c;
  else
    q->ghead = c;
  q->gtail = c;
  if (!q->in_grouping) {
    q->in_grouping = true;
    q->gnext = ws.grouping;
    ws.grouping = q;
  }
  if (++q->ngrouped >= WS_GROUP_MAX)
    ws_group_flush(q);
  return true;
}

/* Without an event for them: each through a host function, in order. */
static void by_host(ws_queue *q, ws_cdone *c) {
  while (c) {
    ws_cdone *next = c->next;
    ws_complete_by_host(q, c->tag, c->error, c->seq);
    free(c);
    c = next;
  }
}

void ws_group_flush(ws_queue *q) {
  ws_cdone *first = q->ghead, *last = q->gtail;
  if (first == NULL)
    return;
  q->ghead = q->gtail = NULL;
  q->ngrouped = 0;
  if (!ws_completer_take(q, first, last))
    by_host(q, first);
}

void ws_groups_flush(void) {
  ws_queue *q = ws.grouping;
  ws.grouping = NULL;
  ws.group_calls = 0;
  while (q) {
    ws_queue *next = q->gnext;
    q->in_grouping = false;
    q->gnext = NULL;
    ws_group_flush(q);
    q = next;
  }
}
