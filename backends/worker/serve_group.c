/* Completions held back while a link's calls keep coming (serve.h): on backends whose
 * completions go through the completer (an event recorded behind each), recording that event
 * is a driver call on the link's thread, the thread that submits every client's work (about
 * 1.3 us on CUDA, near half of a tiny op's submission). A completion whose call is followed
 * at once by more calls is held; when the calls run out (the link's thread would wait for the
 * next), before a call that may wait, before a completion that cannot be held, or at
 * WS_GROUP_MAX, the queue's held completions get one event behind all of them. Each is sent
 * once that event completes: a completion then comes after the work of the calls behind it
 * on its queue too (a tiny op's few microseconds), never before its own.
 *
 * ACCEL_WORKER_GROUP=0 in the worker's environment (acceld passes its own on) holds none:
 * for A/B runs. */
#include <stdlib.h>
#include <string.h>

#include "backends/worker/serve.h"

static bool grouping_on(void) {
  static int on = -1; /* read once; every thread reads the same environment */
  if (on < 0) {
    const char *e = getenv("ACCEL_WORKER_GROUP");
    on = e == NULL || strcmp(e, "0") != 0;
  }
  return on;
}

bool ws_group_passes(uint32_t type) {
  switch (type) {
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
  case BW_D2D:
  case BW_CALLBACK: /* a holding one flushes its queue itself (ws_complete_after) */
    return true;
  default:
    return false;
  }
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
  while (q) {
    ws_queue *next = q->gnext;
    q->in_grouping = false;
    q->gnext = NULL;
    ws_group_flush(q);
    q = next;
  }
}
