/* The trace (trace.h): events in an array on the loop thread, rendered to Chrome's
 * trace-event JSON when the trace stops.
 *
 * Tracks: pid 1 holds the ops, one async span each (cat "op", id the op's trace id) with a
 * nested "queued" span; pid 2 + n is device node n, tid 1 + its queue class (traces of
 * several shards rendered together: pid 2 + 16 k + n for shard k's node n, ids and session
 * tracks offset by k, dev_trace_render_all). A queue runs its
 * work in order, so a task's span there starts when the one before it on that queue ended or
 * when it was submitted, whichever is later: spans on a track never overlap, and show what
 * the device did as the loop learnt it (completions reach the loop a few microseconds late). */
#include "actors/trace.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/busy.h"
#include "actors/device.h"
#include "actors/session.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"

enum ev_type { EV_OP_BEGIN, EV_OP_END, EV_QUEUED, EV_TASK };

typedef struct ev {
  uint64_t ts_ns, dur_ns, id, bytes;
  const char *label; /* tasks: dev_task_label's */
  uint32_t session;
  int32_t status;
  uint16_t kind; /* the op's kind (DEV_OP_*) */
  uint8_t type;  /* enum ev_type */
  uint8_t qclass, task_kind;
  int8_t node;
} ev;

#define MAX_SESSIONS 1024

struct dev_trace {
  uint64_t t0_ns;
  ev *ev;
  uint32_t n, max;
  uint64_t dropped;
  uint64_t next_id;
  uint64_t track_end[DEV_MAX_NODES][DEV_Q_COUNT];
  struct {
    uint32_t id;
    char name[64];
  } sessions[MAX_SESSIONS];
  uint32_t nsessions;
  char *path; /* ACCEL_TRACE: written by dev_trace_finish */
  /* The world's nodes as the trace stopped: rendering reads nothing of the world, so it may
   * run on another thread while the world goes on (dev_trace_detach). */
  int nnodes;
  char node_names[DEV_MAX_NODES][160];
};

void dev_trace_free(dev_trace *t) {
  if (t) {
    rt_free(t->ev);
    rt_free(t->path);
    rt_free(t);
  }
}

int dev_trace_start(dev_world *w, uint32_t max_events) {
  max_events = max_events ? max_events : DEV_TRACE_MAX_EVENTS_DEFAULT;
  dev_trace *t = rt_calloc(1, sizeof *t);
  ev *events = rt_malloc((size_t)max_events * sizeof *events);
  if (t == NULL || events == NULL) {
    rt_free(t);
    rt_free(events);
    return ACCEL_ENOMEM;
  }
  t->ev = events;
  t->max = max_events;
  t->t0_ns = rt_mono_ns();
  t->next_id = 1;
  if (w->trace) { /* a restart keeps where the file goes */
    t->path = w->trace->path;
    w->trace->path = NULL;
    dev_trace_free(w->trace);
  }
  w->trace = t;
  return 0;
}

static ev *add(dev_trace *t) {
  if (t->n == t->max) {
    t->dropped++;
    return NULL;
  }
  return &t->ev[t->n++];
}

/* The session's number, its name remembered the first time it is seen. */
static uint32_t session_of(dev_trace *t, const dev_session_acct *a) {
  if (a == NULL)
    return 0;
  for (uint32_t i = t->nsessions; i-- > 0;) /* newest first: a session's ops come together */
    if (t->sessions[i].id == a->id)
      return a->id;
  if (t->nsessions < MAX_SESSIONS) {
    t->sessions[t->nsessions].id = a->id;
    snprintf(t->sessions[t->nsessions].name, sizeof t->sessions[0].name, "%s",
             a->name && *a->name ? a->name : "session");
    t->nsessions++;
  }
  return a->id;
}

void dev_trace_op_begin(dev_world *w, dev_call *call) {
  dev_trace *t = w->trace;
  call->trace_id = t->next_id++;
  ev *e = add(t);
  if (e)
    *e = (ev){.type = EV_OP_BEGIN,
              .ts_ns = call->t_issued_ns,
              .id = call->trace_id,
              .session = session_of(t, call->acct),
              .kind = (uint16_t)call->op.h.kind};
}

void dev_trace_op_end(dev_world *w, const dev_call *call, int status, uint64_t now_ns) {
  ev *e = call->trace_id ? add(w->trace) : NULL;
  if (e)
    *e = (ev){.type = EV_OP_END,
              .ts_ns = now_ns,
              .id = call->trace_id,
              .session = session_of(w->trace, call->acct),
              .kind = (uint16_t)call->op.h.kind,
              .status = status};
}

void dev_trace_submitted(dev_world *w, const dev_task *task, uint64_t submit_ns) {
  const dev_call *call = task->kind == DEV_TASK_OP ? task->call : NULL;
  if (call == NULL || call->trace_id == 0 || submit_ns < call->t_issued_ns)
    return;
  ev *e = add(w->trace);
  if (e)
    *e = (ev){.type = EV_QUEUED,
              .ts_ns = call->t_issued_ns,
              .dur_ns = submit_ns - call->t_issued_ns,
              .id = call->trace_id,
              .session = session_of(w->trace, call->acct),
              .kind = (uint16_t)call->op.h.kind};
}

void dev_trace_task(dev_world *w, const dev_task *task, uint64_t submit_ns, uint64_t end_ns,
                    int status) {
  dev_trace *t = w->trace;
  int node = task->node->index;
  uint64_t *track_end = &t->track_end[node][task->qclass];
  uint64_t start = submit_ns > *track_end ? submit_ns : *track_end;
  if (start < t->t0_ns || end_ns < start) /* submitted before the trace began */
    return;
  *track_end = end_ns;
  const dev_call *call = task->kind == DEV_TASK_OP ? task->call : NULL;
  ev *e = add(t);
  if (e)
    *e = (ev){.type = EV_TASK,
              .ts_ns = start,
              .dur_ns = end_ns - start,
              .id = call ? call->trace_id : 0,
              .session = session_of(t, task->acct),
              .kind = call ? (uint16_t)call->op.h.kind : 0,
              .task_kind = (uint8_t)task->kind,
              .label = dev_task_label(task),
              .qclass = (uint8_t)task->qclass,
              .node = (int8_t)node,
              .bytes = task->kind == DEV_TASK_OP || task->buf[0] == NULL ? 0 : task->buf[0]->bytes,
              .status = status};
}

/* ---- rendering ---- */

/* The JSON as it is written: a block of accel's allocator, grown by doubling (a large block
 * grows by remapping, without a copy) and handed to the caller as it is. open_memstream, used
 * before, zeroed every growth and was copied once more at the end: with the reply's own copy,
 * most of a render's time went to copying and faulting in memory, not to formatting. */
typedef struct out {
  char *p;
  size_t len, cap;
  bool oom;
} out;

static bool out_room(out *o, size_t n) {
  if (o->oom)
    return false;
  if (o->len + n < o->cap) /* and its NUL */
    return true;
  size_t cap = o->cap ? o->cap : 4096;
  while (cap <= o->len + n)
    cap *= 2;
  char *p = rt_realloc(o->p, cap);
  if (p == NULL) {
    o->oom = true;
    return false;
  }
  o->p = p;
  o->cap = cap;
  return true;
}

static void out_putc(out *o, char c) {
  if (out_room(o, 1))
    o->p[o->len++] = c;
}

/* Formats in place; only a text longer than the room left is formatted twice. */
__attribute__((format(printf, 2, 3))) static void out_printf(out *o, const char *fmt, ...) {
  if (!out_room(o, 0))
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
  va_end(ap);
  if (n < 0) {
    o->oom = true;
    return;
  }
  if ((size_t)n >= o->cap - o->len) {
    if (!out_room(o, (size_t)n))
      return;
    va_start(ap, fmt);
    vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
  }
  o->len += (size_t)n;
}

static void json_str(out *f, const char *s) {
  out_putc(f, '"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      out_printf(f, "\\%c", c);
    else if (c < 0x20)
      out_printf(f, "\\u%04x", c);
    else
      out_putc(f, (char)c);
  }
  out_putc(f, '"');
}

/* One trace among those rendered together (acceld's shards: a trace per world): its index k
 * of n and the time zero they share. Part k's device tracks are processes of their own, its
 * ops' ids and session threads kept apart from the other parts' (the same numbers recur in
 * each world); one part renders as it always did. */
typedef struct part {
  const dev_trace *t;
  uint32_t k, n;
  uint64_t t0_ns;
} part;

#define PART_ID_SHIFT 48      /* an op's id: its part's index above its world's number */
#define PART_SESSION_SHIFT 32 /* a session's track on the ops' process, the same way */

static double us(const part *p, uint64_t ns) {
  return ns >= p->t0_ns ? (double)(ns - p->t0_ns) / 1000.0 : 0.0;
}

static unsigned long long op_id(const part *p, uint64_t id) {
  return (unsigned long long)(id + ((uint64_t)p->k << PART_ID_SHIFT));
}

/* Session numbers count a world's sessions for the daemon's life: a track above them. */
static unsigned long long session_track(const part *p, uint32_t session) {
  return (unsigned long long)session + ((unsigned long long)p->k << PART_SESSION_SHIFT);
}

static int node_pid(const part *p, int node) {
  return 2 + (int)p->k * DEV_MAX_NODES + node;
}

static const char *session_name(const dev_trace *t, uint32_t id) {
  for (uint32_t i = 0; i < t->nsessions; i++)
    if (t->sessions[i].id == id)
      return t->sessions[i].name;
  return "";
}

static const char *op_name(uint16_t kind) {
  const dev_op_info *info = dev_op_info_of(kind);
  return info ? info->label : "op";
}

static void name_nodes(dev_trace *t, const dev_world *w) {
  t->nnodes = w->nnodes;
  for (int n = 0; n < w->nnodes; n++) {
    const dev_node *node = &w->nodes[n];
    if (n == DEV_HOST_NODE)
      snprintf(t->node_names[n], sizeof t->node_names[n], "host memory");
    else
      snprintf(t->node_names[n], sizeof t->node_names[n], "device %d: %s (%s)", node->device,
               node->info.name, node->be->name);
  }
}

static void metadata(out *f, const part *p) {
  const dev_trace *t = p->t;
  bool used[DEV_MAX_NODES][DEV_Q_COUNT] = {{false}};
  for (uint32_t i = 0; i < t->n; i++)
    if (t->ev[i].type == EV_TASK)
      used[t->ev[i].node][t->ev[i].qclass] = true;
  for (int n = 0; n < t->nnodes; n++) {
    int pid = node_pid(p, n);
    out_printf(
        f,
        ",\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", pid);
    char name[sizeof t->node_names[0] + 32];
    if (p->n > 1)
      snprintf(name, sizeof name, "%s, shard %u", t->node_names[n], p->k);
    else
      snprintf(name, sizeof name, "%s", t->node_names[n]);
    json_str(f, name);
    out_printf(f,
               "}},\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"sort_index\":%d}}",
               pid, pid);
    for (int q = 0; q < DEV_Q_COUNT; q++)
      if (used[n][q])
        out_printf(f,
                   ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"%s queue\"}}",
                   pid, 1 + q, dev_queue_names[q]);
  }
}

static void op_args(out *f, const part *p, const ev *e) {
  out_printf(f, "\"args\":{\"op\":%llu,\"session\":%u,\"client\":", op_id(p, e->id), e->session);
  json_str(f, session_name(p->t, e->session));
  if (p->n > 1)
    out_printf(f, ",\"shard\":%u", p->k);
}

static void event(out *f, const part *p, const ev *e) {
  switch (e->type) {
  case EV_OP_BEGIN:
  case EV_OP_END:
    out_printf(f,
               ",\n{\"ph\":\"%c\",\"cat\":\"op\",\"id\":%llu,\"pid\":1,\"tid\":%llu,\"ts\":%.3f,"
               "\"name\":",
               e->type == EV_OP_BEGIN ? 'b' : 'e', op_id(p, e->id), session_track(p, e->session),
               us(p, e->ts_ns));
    json_str(f, op_name(e->kind));
    out_putc(f, ',');
    op_args(f, p, e);
    if (e->type == EV_OP_END)
      out_printf(f, ",\"status\":\"%s\"", e->status == 0 ? "ok" : accel_err_name(e->status));
    out_printf(f, "}}");
    return;
  case EV_QUEUED:
    for (int end = 0; end < 2; end++)
      out_printf(f,
                 ",\n{\"ph\":\"%c\",\"cat\":\"op\",\"id\":%llu,\"pid\":1,\"tid\":%llu,"
                 "\"ts\":%.3f,\"name\":\"queued\"}",
                 end ? 'e' : 'b', op_id(p, e->id), session_track(p, e->session),
                 us(p, e->ts_ns + (end ? e->dur_ns : 0)));
    return;
  case EV_TASK:
    out_printf(f,
               ",\n{\"ph\":\"X\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
               "\"name\":",
               e->task_kind == DEV_TASK_OP ? "exec" : "transfer", node_pid(p, e->node),
               1 + e->qclass, us(p, e->ts_ns), (double)e->dur_ns / 1000.0);
    json_str(f, e->label);
    out_putc(f, ',');
    op_args(f, p, e);
    if (e->bytes)
      out_printf(f, ",\"bytes\":%llu", (unsigned long long)e->bytes);
    out_printf(f, ",\"status\":\"%s\"}}", e->status == 0 ? "ok" : accel_err_name(e->status));
    return;
  }
}

/* The JSON, in a block of accel's allocator (the caller frees it with rt_free, whatever
 * allocator the program installed). Room for about 150 bytes an event is made first. */
int dev_trace_render_all(const dev_trace *const *traces, uint32_t n, char **json, size_t *len) {
  uint64_t events = 0, dropped = 0, t0_ns = UINT64_MAX;
  for (uint32_t k = 0; k < n; k++) {
    if (traces[k] == NULL)
      continue;
    events += traces[k]->n;
    dropped += traces[k]->dropped;
    t0_ns = traces[k]->t0_ns < t0_ns ? traces[k]->t0_ns : t0_ns;
  }
  out o = {0};
  (void)out_room(&o, 4096 + (size_t)events * 160);
  out_printf(&o,
             "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"accel\","
             "\"events\":%llu,\"dropped\":%llu},\n\"traceEvents\":[\n",
             (unsigned long long)events, (unsigned long long)dropped);
  out_printf(&o, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,"
                 "\"args\":{\"name\":\"accel ops\"}}");
  for (uint32_t k = 0; k < n; k++)
    if (traces[k] != NULL)
      metadata(&o, &(part){.t = traces[k], .k = k, .n = n, .t0_ns = t0_ns});
  for (uint32_t k = 0; k < n && !o.oom; k++) {
    if (traces[k] == NULL)
      continue;
    part p = {.t = traces[k], .k = k, .n = n, .t0_ns = t0_ns};
    for (uint32_t i = 0; i < p.t->n && !o.oom; i++)
      event(&o, &p, &p.t->ev[i]);
  }
  out_printf(&o, "\n]}\n");
  if (o.oom) {
    rt_free(o.p);
    return ACCEL_ENOMEM;
  }
  o.p[o.len] = '\0';
  *json = o.p;
  *len = o.len;
  return 0;
}

int dev_trace_render(const dev_trace *t, char **json, size_t *len) {
  return dev_trace_render_all(&t, 1, json, len);
}

dev_trace *dev_trace_detach(dev_world *w) {
  dev_trace *t = w->trace;
  if (t != NULL)
    name_nodes(t, w);
  w->trace = NULL;
  return t;
}

int dev_trace_stop(dev_world *w, char **json, size_t *len) {
  dev_trace *t = dev_trace_detach(w);
  if (t == NULL)
    return ACCEL_EINVAL;
  int rc = dev_trace_render(t, json, len);
  dev_trace_free(t);
  return rc;
}

void dev_trace_from_env(dev_world *w) {
  const char *path = getenv("ACCEL_TRACE");
  if (path == NULL || *path == '\0')
    return;
  char *copy = rt_malloc(strlen(path) + 1);
  if (copy == NULL || dev_trace_start(w, 0) != 0) {
    rt_free(copy);
    accel_log(ACCEL_LOG_ERROR, "trace", "ACCEL_TRACE=%s: out of memory: no trace", path);
    return;
  }
  strcpy(copy, path);
  w->trace->path = copy;
}

void dev_trace_finish(dev_world *w) {
  dev_trace *t = w->trace;
  if (t == NULL)
    return;
  char *path = t->path;
  t->path = NULL;
  char *json = NULL;
  size_t len = 0;
  int rc = dev_trace_stop(w, &json, &len);
  if (path == NULL) {
    rt_free(json);
    return;
  }
  FILE *f = rc == 0 ? fopen(path, "w") : NULL;
  bool ok = f != NULL && fwrite(json, 1, len, f) == len;
  if (f != NULL && fclose(f) != 0)
    ok = false;
  if (!ok)
    accel_log(ACCEL_LOG_ERROR, "trace", "ACCEL_TRACE=%s: %s", path,
              rc != 0 ? "out of memory" : "could not be written");
  rt_free(json);
  rt_free(path);
}
