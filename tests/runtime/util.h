/* Helpers shared by the runtime tests: messages and refs, a gate for waiting across threads,
 * an event log for hook order, counted payloads, and runtimes set up and torn down with
 * checks. Everything here fails the test (CHECK) rather than returning errors, except where a
 * return code is the point. */
#ifndef ACCEL_TESTS_RUNTIME_UTIL_H
#define ACCEL_TESTS_RUNTIME_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../test.h"
#include "accel/runtime.h"

/* Message types shared by the tests; each file adds its own from MSG_FIRST_LOCAL. */
enum {
  MSG_KICK = ACCEL_MSG_USER, /* a driver's first message to itself: the scenario starts */
  MSG_TICK,                  /* timer ticks */
  MSG_FIRST_LOCAL = ACCEL_MSG_USER + 16
};

accel_msg msg_make(uint32_t type, uint64_t arg);
int ref_eq(accel_ref a, accel_ref b);
int tell_arg(accel_runtime *rt, accel_ref to, uint32_t type, uint64_t arg);
/* From inside an actor's callback: a message to itself (CHECKed). */
void tell_self(accel_actor *self, uint32_t type, uint64_t arg);
/* From a thread other than the loop: sends, retrying while the mailbox is full. Returns the
 * first code other than ACCEL_EBUSY; adds the refusals to *busy when busy is not NULL. */
int tell_retry(accel_runtime *rt, accel_ref to, const accel_msg *m, uint64_t *busy);
/* Yields after a refusal; sleeps a little after many in a row (so the loop thread gets the
 * CPU on a small machine). */
void pause_after_busy(unsigned *streak);

/* A count and a condition variable: threads signal, one waits for the count to reach n. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned count;
} gate;

void gate_init(gate *g);
void gate_destroy(gate *g);
void gate_signal(gate *g);
/* 0 once count >= n, -1 after timeout_ms. */
int gate_wait(gate *g, unsigned n, unsigned timeout_ms);

/* An event log: one space-separated string of events, appended from any thread. */
void events_reset(void);
void events_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The log (valid until the next events_ call). */
const char *events_get(void);
/* The events that start with `prefix`, in order, space-separated (static buffer). */
const char *events_with_prefix(const char *prefix);

/* A heap payload whose frees are counted: counted_new() then counted_drop() (as a message's
 * drop function) or counted_free() (by a receiver that took it). */
typedef struct counted {
  uint64_t value;
} counted;

counted *counted_new(uint64_t value);
void counted_drop(void *data);
void counted_free(void *data);
void counted_reset(void);
long counted_live(void);    /* allocated and not yet freed */
long counted_dropped(void); /* freed through counted_drop */

/* Runtimes. */
accel_runtime *runtime_new(void);
/* accel_runtime_run on the calling thread until something stops it; then stats (out may be
 * NULL) and destroy. */
void runtime_run_then_destroy(accel_runtime *rt, accel_runtime_stats *out);
/* A runtime running on its own thread. */
accel_runtime *runtime_started(void);
/* accel_runtime_stop, join, stats (out may be NULL), destroy. */
void runtime_stop_then_destroy(accel_runtime *rt, accel_runtime_stats *out);
accel_ref spawn_ok(accel_runtime *rt, accel_actor *parent, const accel_behavior *b, void *arg,
                   const accel_spawn_opts *opts);
accel_runtime_stats stats_of(accel_runtime *rt);
/* Stops the runtime from inside an actor's callback. */
void stop_runtime_from(accel_actor *self);

#endif
