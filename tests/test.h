/* accel — a tiny test harness (no framework).
 *
 * Checks: CHECK(cond), CHECK_EQ/NE/LT/LE/GT/GE(a, b) on integers, CHECK_PTR_EQ, CHECK_STR_EQ,
 * CHECK_ERR(expr, code) and CHECK_OK(expr) on accel error codes. A failed check prints
 * file:line, the expression and its values, then aborts: the executable exits non-zero (and a
 * debugger or core dump shows the stack). Checks are safe from any thread.
 *
 * One executable per area; it lists its test functions and hands them to TEST_MAIN:
 *
 *   TEST(spawn_runs_start) { CHECK_EQ(1 + 1, 2); }
 *   static const test_case tests[] = { TEST_CASE(spawn_runs_start) };
 *   TEST_MAIN(tests)
 *
 * `./test-x` runs every test in order; `./test-x name...` runs the named ones; `--list` prints
 * the names. TEST_SKIP("why") ends a test as skipped (TAP "# SKIP why"); an executable whose
 * tests were all skipped exits 77, which meson counts as skipped. A watchdog names the test that
 * hangs and exits: ACCEL_TEST_TIMEOUT seconds per test (default 30, times 10 under valgrind).
 *
 * Load: ACCEL_TEST_SCALE (a factor, default 1; 0.2 under valgrind unless set) scales the sizes
 * of stress tests through test_scaled().
 */
#ifndef ACCEL_TESTS_TEST_H
#define ACCEL_TESTS_TEST_H

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/error.h"

typedef struct test_case {
  const char *name;
  void (*fn)(void);
} test_case;

#define TEST(name) static void name(void)
/* clang-format off */
#define TEST_CASE(name) {#name, name}
/* clang-format on */
#define TEST_MAIN(table)                                                                           \
  int main(int argc, char **argv) {                                                                \
    return test_main_(argc, argv, table, sizeof(table) / sizeof((table)[0]));                      \
  }

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      test_fail_(__FILE__, __LINE__, "CHECK(%s) failed", #cond);                                   \
  } while (0)

/* Integer comparison: each side is evaluated once, as intmax_t. */
#define CHECK_CMP_(a, op, b)                                                                       \
  do {                                                                                             \
    intmax_t test_lhs_ = (intmax_t)(a), test_rhs_ = (intmax_t)(b);                                 \
    if (!(test_lhs_ op test_rhs_))                                                                 \
      test_fail_(__FILE__, __LINE__, "CHECK(%s %s %s) failed: %jd %s %jd is false", #a, #op, #b,   \
                 test_lhs_, #op, test_rhs_);                                                       \
  } while (0)

#define CHECK_EQ(a, b) CHECK_CMP_(a, ==, b)
#define CHECK_NE(a, b) CHECK_CMP_(a, !=, b)
#define CHECK_LT(a, b) CHECK_CMP_(a, <, b)
#define CHECK_LE(a, b) CHECK_CMP_(a, <=, b)
#define CHECK_GT(a, b) CHECK_CMP_(a, >, b)
#define CHECK_GE(a, b) CHECK_CMP_(a, >=, b)

#define CHECK_PTR_EQ(a, b)                                                                         \
  do {                                                                                             \
    const void *test_lhs_ = (a), *test_rhs_ = (b);                                                 \
    if (test_lhs_ != test_rhs_)                                                                    \
      test_fail_(__FILE__, __LINE__, "CHECK_PTR_EQ(%s, %s) failed: %p != %p", #a, #b, test_lhs_,   \
                 test_rhs_);                                                                       \
  } while (0)

#define CHECK_STR_EQ(a, b)                                                                         \
  do {                                                                                             \
    const char *test_lhs_ = (a), *test_rhs_ = (b);                                                 \
    if (test_lhs_ == NULL || test_rhs_ == NULL || strcmp(test_lhs_, test_rhs_) != 0)               \
      test_fail_(__FILE__, __LINE__, "CHECK_STR_EQ(%s, %s) failed:\n  \"%s\"\n  \"%s\"", #a, #b,   \
                 test_lhs_ ? test_lhs_ : "(null)", test_rhs_ ? test_rhs_ : "(null)");              \
  } while (0)

/* An accel return code: prints both codes by name. */
#define CHECK_ERR(expr, code)                                                                      \
  do {                                                                                             \
    int test_got_ = (expr), test_want_ = (code);                                                   \
    if (test_got_ != test_want_)                                                                   \
      test_fail_(__FILE__, __LINE__, "%s returned %d (%s), expected %d (%s)", #expr, test_got_,    \
                 accel_err_name(test_got_), test_want_, accel_err_name(test_want_));               \
  } while (0)

#define CHECK_OK(expr) CHECK_ERR(expr, 0)

#define TEST_FAIL(...) test_fail_(__FILE__, __LINE__, __VA_ARGS__)

/* The running test's name, shared by every file of an executable (weak: one definition). */
extern const char *test_current_;
__attribute__((weak)) const char *test_current_ = "(none)";
/* What the running test waits for (TEST_WAIT_FOR), for the watchdog to name; NULL if none. */
extern _Atomic(const char *) test_waiting_for_;
__attribute__((weak)) _Atomic(const char *) test_waiting_for_ = NULL;

static inline __attribute__((noreturn, format(printf, 3, 4))) void
test_fail_(const char *file, int line, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fflush(stdout);
  fprintf(stderr, "%s:%d: [%s] %s\n", file, line, test_current_, buf);
  fflush(stderr);
  abort();
}

static inline int test_under_valgrind(void) {
  const char *preload = getenv("LD_PRELOAD");
  return preload != NULL && strstr(preload, "vgpreload") != NULL;
}

/* ACCEL_TEST_SCALE, or 0.2 under valgrind, or 1. */
static inline double test_scale(void) {
  const char *s = getenv("ACCEL_TEST_SCALE");
  double scale = s != NULL ? strtod(s, NULL) : (test_under_valgrind() ? 0.2 : 1.0);
  return scale > 0 ? scale : 1.0;
}

/* `n` scaled by test_scale(), at least `min`. */
static inline long test_scaled(long n, long min) {
  long v = (long)((double)n * test_scale());
  return v < min ? min : v;
}

static inline uint64_t test_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t test_now_ms(void) {
  return test_now_ns() / 1000000u;
}

static inline void test_sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static inline void test_on_watchdog_(int sig) {
  static const char msg1[] = "\nwatchdog: test '";
  static const char msg2[] = "' did not finish in time (ACCEL_TEST_TIMEOUT)\n";
  static const char msg3[] = "watchdog: it was waiting for: ";
  const char *waiting = test_waiting_for_;
  (void)sig;
  (void)!write(2, msg1, sizeof msg1 - 1);
  (void)!write(2, test_current_, strlen(test_current_));
  (void)!write(2, msg2, sizeof msg2 - 1);
  if (waiting != NULL) {
    (void)!write(2, msg3, sizeof msg3 - 1);
    (void)!write(2, waiting, strlen(waiting));
    (void)!write(2, "\n", 1);
  }
  _exit(3);
}

/* Polls `cond` every `ms` until it holds. No time limit of its own: a condition that never
 * comes is a hang, and the test's watchdog (ACCEL_TEST_TIMEOUT) fails it, naming the test and
 * the condition. A tighter limit would test the machine's load, not the code: use this for
 * what must happen eventually, and a bound only where the time itself is the property. */
#define TEST_WAIT_FOR(cond, ms)                                                                    \
  do {                                                                                             \
    test_waiting_for_ = #cond;                                                                     \
    while (!(cond))                                                                                \
      test_sleep_ms(ms);                                                                           \
    test_waiting_for_ = NULL;                                                                      \
  } while (0)

static inline unsigned test_timeout_s_(void) {
  const char *s = getenv("ACCEL_TEST_TIMEOUT");
  long v = s != NULL ? strtol(s, NULL, 10) : 30 * (test_under_valgrind() ? 10 : 1);
  return v > 0 ? (unsigned)v : 30;
}

static const char *test_skip_reason_;
static size_t test_skipped_;

#define TEST_SKIP(why)                                                                             \
  do {                                                                                             \
    test_skip_reason_ = (why);                                                                     \
    return;                                                                                        \
  } while (0)

static inline void test_run_one_(const test_case *t, int index) {
  uint64_t t0 = test_now_ns();
  test_current_ = t->name;
  test_skip_reason_ = NULL;
  printf("# %s\n", t->name);
  fflush(stdout);
  test_waiting_for_ = NULL;
  alarm(test_timeout_s_());
  t->fn();
  alarm(0);
  if (test_skip_reason_) {
    test_skipped_++;
    printf("ok %d - %s # SKIP %s\n", index, t->name, test_skip_reason_);
  } else {
    printf("ok %d - %s (%.1f ms)\n", index, t->name, (double)(test_now_ns() - t0) / 1e6);
  }
  fflush(stdout);
  test_current_ = "(none)";
}

static inline const test_case *test_find_(const test_case *tests, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(tests[i].name, name) == 0)
      return &tests[i];
  return NULL;
}

static inline int test_main_(int argc, char **argv, const test_case *tests, size_t n) {
  signal(SIGALRM, test_on_watchdog_);
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < n; i++)
      printf("%s\n", tests[i].name);
    return 0;
  }
  if (argc == 1) {
    printf("1..%zu\n", n);
    for (size_t i = 0; i < n; i++)
      test_run_one_(&tests[i], (int)i + 1);
    return test_skipped_ == n ? 77 : 0;
  }
  printf("1..%d\n", argc - 1);
  for (int i = 1; i < argc; i++) {
    const test_case *t = test_find_(tests, n, argv[i]);
    if (t == NULL) {
      fprintf(stderr, "no test named '%s' (try --list)\n", argv[i]);
      return 2;
    }
    test_run_one_(t, i);
  }
  return test_skipped_ == (size_t)(argc - 1) ? 77 : 0;
}

#endif
