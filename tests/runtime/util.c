/* Helpers shared by the runtime tests (see util.h). */
#include "util.h"
#include "runtime/deadline.h"

#include <errno.h>
#include <sched.h>

accel_msg msg_make(uint32_t type, uint64_t arg) {
  accel_msg m;
  memset(&m, 0, sizeof m);
  m.type = type;
  m.arg = arg;
  return m;
}

int ref_eq(accel_ref a, accel_ref b) {
  return a.slot == b.slot && a.gen == b.gen;
}

int tell_arg(accel_runtime *rt, accel_ref to, uint32_t type, uint64_t arg) {
  accel_msg m = msg_make(type, arg);
  return accel_tell(rt, to, &m);
}

void tell_self(accel_actor *self, uint32_t type, uint64_t arg) {
  CHECK_OK(tell_arg(accel_actor_runtime(self), accel_self(self), type, arg));
}

void pause_after_busy(unsigned *streak) {
  if (++*streak % 64 == 0)
    test_sleep_ms(1);
  else
    sched_yield();
}

int tell_retry(accel_runtime *rt, accel_ref to, const accel_msg *m, uint64_t *busy) {
  unsigned streak = 0;
  for (;;) {
    int rc = accel_tell(rt, to, m);
    if (rc != ACCEL_EBUSY)
      return rc;
    if (busy != NULL)
      (*busy)++;
    pause_after_busy(&streak);
  }
}

/* ---- gate ---- */

void gate_init(gate *g) {
  pthread_mutex_init(&g->mu, NULL);
  CHECK_EQ(rt_cond_init_monotonic(&g->cv), 0); /* gate_wait's deadline is monotonic */
  g->count = 0;
}

void gate_destroy(gate *g) {
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
}

void gate_signal(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->count++;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

int gate_wait(gate *g, unsigned n, unsigned timeout_ms) {
  struct timespec deadline = rt_deadline_after(timeout_ms);
  int rc = 0;
  pthread_mutex_lock(&g->mu);
  while (g->count < n && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&g->cv, &g->mu, &deadline);
  int ok = g->count >= n;
  pthread_mutex_unlock(&g->mu);
  return ok ? 0 : -1;
}

/* ---- event log ---- */

static pthread_mutex_t events_mu = PTHREAD_MUTEX_INITIALIZER;
static char events_buf[16384];
static size_t events_len;

void events_reset(void) {
  pthread_mutex_lock(&events_mu);
  events_len = 0;
  events_buf[0] = '\0';
  pthread_mutex_unlock(&events_mu);
}

void events_add(const char *fmt, ...) {
  char one[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(one, sizeof one, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&events_mu);
  int n = snprintf(events_buf + events_len, sizeof events_buf - events_len, "%s%s",
                   events_len ? " " : "", one);
  if (n < 0 || (size_t)n >= sizeof events_buf - events_len)
    TEST_FAIL("event log full");
  events_len += (size_t)n;
  pthread_mutex_unlock(&events_mu);
}

const char *events_get(void) {
  return events_buf;
}

const char *events_with_prefix(const char *prefix) {
  static char out[sizeof events_buf];
  char copy[sizeof events_buf];
  size_t len = 0, plen = strlen(prefix);
  char *save = NULL;
  pthread_mutex_lock(&events_mu);
  memcpy(copy, events_buf, events_len + 1);
  pthread_mutex_unlock(&events_mu);
  out[0] = '\0';
  for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    if (strncmp(tok, prefix, plen) != 0)
      continue;
    len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", len ? " " : "", tok);
  }
  return out;
}

/* ---- counted payloads ---- */

static atomic_long counted_allocs, counted_frees, counted_drops;

counted *counted_new(uint64_t value) {
  counted *c = malloc(sizeof *c);
  CHECK(c != NULL);
  c->value = value;
  atomic_fetch_add(&counted_allocs, 1);
  return c;
}

void counted_free(void *data) {
  CHECK(data != NULL);
  atomic_fetch_add(&counted_frees, 1);
  free(data);
}

void counted_drop(void *data) {
  atomic_fetch_add(&counted_drops, 1);
  counted_free(data);
}

void counted_reset(void) {
  atomic_store(&counted_allocs, 0);
  atomic_store(&counted_frees, 0);
  atomic_store(&counted_drops, 0);
}

long counted_live(void) {
  return atomic_load(&counted_allocs) - atomic_load(&counted_frees);
}

long counted_dropped(void) {
  return atomic_load(&counted_drops);
}

/* ---- runtimes ---- */

accel_runtime *runtime_new(void) {
  accel_runtime *rt = NULL;
  CHECK_OK(accel_runtime_create(&rt, NULL));
  CHECK(rt != NULL);
  return rt;
}

void runtime_run_then_destroy(accel_runtime *rt, accel_runtime_stats *out) {
  CHECK_OK(accel_runtime_run(rt));
  if (out != NULL)
    accel_runtime_get_stats(rt, out);
  accel_runtime_destroy(rt);
}

accel_runtime *runtime_started(void) {
  accel_runtime *rt = runtime_new();
  CHECK_OK(accel_runtime_start(rt));
  return rt;
}

void runtime_stop_then_destroy(accel_runtime *rt, accel_runtime_stats *out) {
  accel_runtime_stop(rt);
  CHECK_OK(accel_runtime_join(rt));
  if (out != NULL)
    accel_runtime_get_stats(rt, out);
  accel_runtime_destroy(rt);
}

accel_ref spawn_ok(accel_runtime *rt, accel_actor *parent, const accel_behavior *b, void *arg,
                   const accel_spawn_opts *opts) {
  accel_ref ref = ACCEL_REF_NONE;
  CHECK_OK(accel_spawn(rt, parent, b, arg, opts, &ref));
  CHECK_NE(ref.gen, 0);
  return ref;
}

accel_runtime_stats stats_of(accel_runtime *rt) {
  accel_runtime_stats s;
  memset(&s, 0, sizeof s);
  accel_runtime_get_stats(rt, &s);
  return s;
}

void stop_runtime_from(accel_actor *self) {
  accel_runtime_stop(accel_actor_runtime(self));
}
