/* Help offered to a future's waiters (runtime/future_help.h): a thread waiting with no timeout
 * runs the helper itself, on its own thread, and only once however many wait; a timed waiter
 * runs only the helper's bounded try_run, within its time (half a millisecond at most), and
 * never `run` (which may block past its timeout); an offer says whether a waiter is already
 * committed; an offer to a completed future, or a second one, is refused and takes
 * nothing; the future's reference to its helper goes when it completes or is freed; a helper
 * that does not complete the future leaves its waiter waiting for whoever does. */
#include <uv.h>

#include "runtime/future_help.h"
#include "util.h"

typedef struct test_helper {
  rt_helper h;
  atomic_int tries;       /* calls of try_run */
  bool try_completes;     /* try_run completes f (else it gives up, as at its time's end) */
  uint64_t try_budget_ns; /* until_ns - now, as try_run saw it (0 if already past) */
  uint64_t try_until_ns;  /* the deadline try_run was given */
  accel_future *f;        /* what run completes (NULL: run completes nothing) */
  int status;             /* with this */
  atomic_int runs;        /* calls of run */
  atomic_int freed;       /* calls of free */
  pthread_t ran_on;       /* the thread of the last run */
  atomic_bool waited;     /* a waiter thread is about to wait */
} test_helper;

static void helper_run(rt_helper *h) {
  test_helper *t = (test_helper *)h;
  t->ran_on = pthread_self();
  atomic_fetch_add(&t->runs, 1);
  test_sleep_ms(5); /* as a device wait would: the other waiters see the helper taken */
  if (t->f)
    CHECK_OK(accel_future_complete(t->f, t->status, NULL, NULL));
}

static bool helper_try(rt_helper *h, uint64_t until_ns) {
  test_helper *t = (test_helper *)h;
  uint64_t now = uv_hrtime();
  t->try_budget_ns = until_ns > now ? until_ns - now : 0;
  t->try_until_ns = until_ns;
  t->ran_on = pthread_self();
  atomic_fetch_add(&t->tries, 1);
  if (t->try_completes && t->f)
    CHECK_OK(accel_future_complete(t->f, t->status, NULL, NULL));
  return t->try_completes;
}

static void helper_free(rt_helper *h) {
  atomic_fetch_add(&((test_helper *)h)->freed, 1);
}

static void helper_init(test_helper *t, accel_future *f, int status) {
  *t = (test_helper){.h = {.run = helper_run, .free = helper_free}, .f = f, .status = status};
  atomic_init(&t->h.refs, 1); /* the test's */
}

static int helper_refs(test_helper *t) {
  return atomic_load(&t->h.refs);
}

typedef struct waiter {
  pthread_t th;
  accel_future *f;
  int64_t timeout_ms;
  test_helper *t;
  int status;
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  atomic_store(&w->t->waited, true);
  w->status = accel_future_wait(w->f, w->timeout_ms);
  return NULL;
}

static void waiter_start(waiter *w, accel_future *f, int64_t timeout_ms, test_helper *t) {
  *w = (waiter){.f = f, .timeout_ms = timeout_ms, .t = t};
  CHECK_EQ(pthread_create(&w->th, NULL, wait_thread, w), 0);
  while (!atomic_load(&t->waited))
    test_sleep_ms(1);
  test_sleep_ms(50); /* from "about to wait" to inside the wait */
}

/* Joins w once f is done; a waiter that does not get it done in 10 s fails the test (its
 * future is completed then, so that it ends). */
static void join_or_fail(waiter *w) {
  if (accel_future_wait(w->f, 10000) == ACCEL_ETIMEDOUT) {
    CHECK_OK(accel_future_complete(w->f, ACCEL_ETIMEDOUT, NULL, NULL));
    CHECK_EQ(pthread_join(w->th, NULL), 0);
    TEST_FAIL("the waiter did not run the help offered");
  }
  CHECK_EQ(pthread_join(w->th, NULL), 0);
}

TEST(an_untimed_waiter_runs_the_help_offered_on_its_own_thread) {
  accel_runtime *rt = runtime_started();
  accel_future *f;
  CHECK_OK(accel_future_create(rt, &f));
  test_helper t;
  helper_init(&t, f, ACCEL_EIO);
  waiter w;
  waiter_start(&w, f, -1, &t);
  CHECK(rt_future_offer_help(f, &t.h)); /* committed: a thread waits with no timeout */
  join_or_fail(&w);
  CHECK_ERR(w.status, ACCEL_EIO);
  CHECK_EQ(atomic_load(&t.runs), 1);
  CHECK(pthread_equal(t.ran_on, w.th));
  CHECK_EQ(helper_refs(&t), 1); /* the waiter took the future's reference and dropped it */
  accel_future_release(f);
  rt_helper_release(&t.h);
  CHECK_EQ(atomic_load(&t.freed), 1);
  runtime_stop_then_destroy(rt, NULL);
}

TEST(help_offered_before_the_wait_is_run_by_it) {
  accel_runtime *rt = runtime_started();
  accel_future *f;
  CHECK_OK(accel_future_create(rt, &f));
  test_helper t;
  helper_init(&t, f, 0);
  CHECK(!rt_future_offer_help(f, &t.h)); /* nobody waits yet */
  CHECK_EQ(helper_refs(&t), 2);
  waiter w;
  waiter_start(&w, f, -1, &t);
  join_or_fail(&w);
  CHECK_OK(w.status);
  CHECK_EQ(atomic_load(&t.runs), 1);
  CHECK(pthread_equal(t.ran_on, w.th));
  CHECK_EQ(helper_refs(&t), 1);
  accel_future_release(f);
  rt_helper_release(&t.h);
  CHECK_EQ(atomic_load(&t.freed), 1);
  runtime_stop_then_destroy(rt, NULL);
}

TEST(a_timed_waiter_never_runs_a_blocking_helper) {
  accel_runtime *rt = runtime_started();
  accel_future *f;
  CHECK_OK(accel_future_create(rt, &f));
  test_helper t;
  helper_init(&t, f, 0); /* no try_run: only `run`, which may block */
  waiter w;
  waiter_start(&w, f, 20000, &t);
  CHECK(rt_future_offer_help(f, &t.h)); /* committed: it takes the offer, and leaves it */
  test_sleep_ms(50);
  CHECK_EQ(atomic_load(&t.runs), 0);
  CHECK_OK(accel_future_complete(f, ACCEL_EPROTO, NULL, NULL));
  CHECK_EQ(pthread_join(w.th, NULL), 0);
  CHECK_ERR(w.status, ACCEL_EPROTO);
  CHECK_EQ(atomic_load(&t.runs), 0);
  CHECK_EQ(helper_refs(&t), 1); /* completing dropped the future's reference */
  CHECK_ERR(accel_future_wait(f, 0), ACCEL_EPROTO);
  CHECK_ERR(accel_future_wait(f, -1), ACCEL_EPROTO);
  CHECK_EQ(atomic_load(&t.runs), 0);
  accel_future_release(f);
  rt_helper_release(&t.h);
  CHECK_EQ(atomic_load(&t.freed), 1);
  runtime_stop_then_destroy(rt, NULL);
}

/* The fast path a timed wait takes, as an untimed one does: it runs the bounded try itself,
 * on its own thread, within half a millisecond and within its own timeout. */
TEST(a_timed_waiter_runs_the_bounded_try_on_its_own_thread) {
  accel_runtime *rt = runtime_started();
  accel_future *f;
  CHECK_OK(accel_future_create(rt, &f));
  test_helper t;
  helper_init(&t, f, ACCEL_EIO);
  t.h.try_run = helper_try;
  t.try_completes = true;
  waiter w;
  waiter_start(&w, f, 20000, &t);
  CHECK(rt_future_offer_help(f, &t.h));
  CHECK_EQ(pthread_join(w.th, NULL), 0); /* no wait here: this thread would take the help */
  CHECK_ERR(w.status, ACCEL_EIO);
  CHECK_EQ(atomic_load(&t.tries), 1);
  CHECK_EQ(atomic_load(&t.runs), 0);
  CHECK(pthread_equal(t.ran_on, w.th));
  /* A deadline was given, at most the help budget away, never the whole timeout (it may be
   * past already when the try starts on a slow machine: valgrind). */
  CHECK_NE(t.try_until_ns, 0);
  CHECK_LE(t.try_budget_ns, 500000);
  accel_future_release(f);
  rt_helper_release(&t.h);
  CHECK_EQ(atomic_load(&t.freed), 1);
  runtime_stop_then_destroy(rt, NULL);
}

/* A try that runs out of time leaves the waiter waiting for the op's own completion, which
 * it still gets within its timeout. */
TEST(a_timed_waiter_whose_try_runs_out_waits_for_the_completion) {
  accel_runtime *rt = runtime_started();
  accel_future *f;
  CHECK_OK(accel_future_create(rt, &f));
  test_helper t;
  helper_init(&t, f, 0);
  t.h.try_run = helper_try; /* gives up without completing */
  waiter w;
  waiter_start(&w, f, 20000, &t);
  CHECK(rt_future_offer_help(f, &t.h));
  for (uint64_t t0 = test_now_ms(); atomic_load(&t.tries) == 0 && test_now_ms() - t0 < 10000;)
    test_sleep_ms(1);
  test_sleep_ms(20);
  CHECK_EQ(atomic_load(&t.tries), 1);            /* once: a try that ran out is not tried again */
  CHECK_ERR(accel_future_poll(f), ACCEL_EAGAIN); /* still waiting: nothing completed it */
  CHECK_OK(accel_future_complete(f, ACCEL_ENOENT, NULL, NULL));
  CHECK_EQ(pthread_join(w.th, NULL), 0);
  CHECK_ERR(w.status, ACCEL_ENOENT);
  CHECK_EQ(atomic_load(&t.tries), 1);
  CHECK_EQ(atomic_load(&t.runs), 0);
  accel_future_release(f);
  rt_helper_release(&t.h);
  runtime_stop_then_destroy(rt, NULL);
}

/* With less time left than the help budget, the try gets only what is left. */
TEST(a_short_timeout_bounds_the_try) {
  accel_runtime *rt = runtime_started();
  accel_future *f;
  CHECK_OK(accel_future_create(rt, &f));
  test_helper t;
  helper_init(&t, f, 0);
  t.h.try_run = helper_try;
  CHECK(!rt_future_offer_help(f, &t.h));               /* before the wait: taken when it starts */
  CHECK_ERR(accel_future_wait(f, 1), ACCEL_ETIMEDOUT); /* 1 ms; the try gives up */
  CHECK_EQ(atomic_load(&t.tries), 1);
  CHECK_LE(t.try_budget_ns, 1000000);
  CHECK_OK(accel_future_complete(f, 0, NULL, NULL));
  accel_future_release(f);
  rt_helper_release(&t.h);
  runtime_stop_then_destroy(rt, NULL);
}

TEST(an_offer_to_a_done_future_or_a_second_offer_is_refused) {
  accel_runtime *rt = runtime_started();
  accel_future *f, *g;
  CHECK_OK(accel_future_create(rt, &f));
  CHECK_OK(accel_future_create(rt, &g));
  test_helper t, u;
  helper_init(&t, NULL, 0);
  helper_init(&u, NULL, 0);
  CHECK_OK(accel_future_complete(f, 0, NULL, NULL));
  CHECK(!rt_future_offer_help(f, &t.h));
  CHECK_EQ(helper_refs(&t), 1);
  CHECK(!rt_future_offer_help(g, &t.h));
  CHECK_EQ(helper_refs(&t), 2);
  CHECK(!rt_future_offer_help(g, &u.h)); /* g has one */
  CHECK_EQ(helper_refs(&u), 1);
  accel_future_release(g); /* pending, freed: its reference goes */
  CHECK_EQ(helper_refs(&t), 1);
  accel_future_release(f);
  rt_helper_release(&t.h);
  rt_helper_release(&u.h);
  CHECK_EQ(atomic_load(&t.freed), 1);
  CHECK_EQ(atomic_load(&u.freed), 1);
  CHECK_EQ(atomic_load(&t.runs) + atomic_load(&u.runs), 0);
  runtime_stop_then_destroy(rt, NULL);
}

TEST(many_untimed_waiters_run_one_help_once) {
  enum { WAITERS = 8 };
  accel_runtime *rt = runtime_started();
  accel_future *f;
  CHECK_OK(accel_future_create(rt, &f));
  test_helper t;
  helper_init(&t, f, 0);
  waiter w[WAITERS];
  for (int i = 0; i < WAITERS; i++) {
    atomic_store(&t.waited, false);
    waiter_start(&w[i], f, -1, &t);
  }
  CHECK(rt_future_offer_help(f, &t.h));
  bool ran_on_a_waiter = false;
  for (int i = 0; i < WAITERS; i++) {
    join_or_fail(&w[i]);
    CHECK_OK(w[i].status);
    ran_on_a_waiter = ran_on_a_waiter || pthread_equal(t.ran_on, w[i].th);
  }
  CHECK_EQ(atomic_load(&t.runs), 1);
  CHECK(ran_on_a_waiter);
  accel_future_release(f);
  rt_helper_release(&t.h);
  CHECK_EQ(atomic_load(&t.freed), 1);
  runtime_stop_then_destroy(rt, NULL);
}

/* A helper whose work somebody else claimed returns without completing: its waiter goes on
 * waiting, asleep, for the completion. */
TEST(help_that_completes_nothing_leaves_the_waiter_waiting) {
  accel_runtime *rt = runtime_started();
  accel_future *f;
  CHECK_OK(accel_future_create(rt, &f));
  test_helper t;
  helper_init(&t, NULL, 0);
  waiter w;
  waiter_start(&w, f, -1, &t);
  CHECK(rt_future_offer_help(f, &t.h));
  while (atomic_load(&t.runs) == 0)
    test_sleep_ms(1);
  test_sleep_ms(50);
  CHECK(accel_future_poll(f) == ACCEL_EAGAIN); /* still waiting */
  CHECK_OK(accel_future_complete(f, ACCEL_ENOMEM, NULL, NULL));
  CHECK_EQ(pthread_join(w.th, NULL), 0);
  CHECK_ERR(w.status, ACCEL_ENOMEM);
  CHECK_EQ(atomic_load(&t.runs), 1);
  accel_future_release(f);
  rt_helper_release(&t.h);
  CHECK_EQ(atomic_load(&t.freed), 1);
  runtime_stop_then_destroy(rt, NULL);
}

static const test_case tests[] = {
    TEST_CASE(an_untimed_waiter_runs_the_help_offered_on_its_own_thread),
    TEST_CASE(help_offered_before_the_wait_is_run_by_it),
    TEST_CASE(a_timed_waiter_never_runs_a_blocking_helper),
    TEST_CASE(a_timed_waiter_runs_the_bounded_try_on_its_own_thread),
    TEST_CASE(a_timed_waiter_whose_try_runs_out_waits_for_the_completion),
    TEST_CASE(a_short_timeout_bounds_the_try),
    TEST_CASE(an_offer_to_a_done_future_or_a_second_offer_is_refused),
    TEST_CASE(many_untimed_waiters_run_one_help_once),
    TEST_CASE(help_that_completes_nothing_leaves_the_waiter_waiting),
};

TEST_MAIN(tests)
