/* daemon/exit_watch.c, alone: a process whose teardown hangs is ended with the status it was
 * going to return once the bound has passed, not before; a bound of 0 sets none; only the
 * first call counts. Each case runs in a child process (the watch ends its process). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/exit_watch.h"
#include "test.h"

/* Forks; the child starts the watches given and then sleeps `sleep_ms` (a hang when long) and
 * exits 0. Returns the child's exit status and, in *ms, how long it lived. */
static int run_child(uint32_t t1, int s1, uint32_t t2, int s2, unsigned sleep_ms, uint64_t *ms) {
  uint64_t t0 = test_now_ms();
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    if (acd_exit_watch_start(t1, s1) != 0 || (t2 && acd_exit_watch_start(t2, s2) != 0))
      _exit(99);
    test_sleep_ms(sleep_ms);
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (test_now_ms() - t0 > 20000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      TEST_FAIL("the child was still running after 20 s");
    }
    test_sleep_ms(5);
  }
  *ms = test_now_ms() - t0;
  CHECK(WIFEXITED(status));
  return WEXITSTATUS(status);
}

TEST(a_hang_past_the_bound_ends_with_the_status_given) {
  uint64_t ms;
  CHECK_EQ(run_child(300, 3, 0, 0, 60000, &ms), 3);
  CHECK_GE(ms, 290); /* not before the bound */
  CHECK(ms < 15000);
}

TEST(an_exit_within_the_bound_is_untouched) {
  uint64_t ms;
  CHECK_EQ(run_child(5000, 3, 0, 0, 100, &ms), 0);
}

TEST(a_bound_of_zero_sets_none) {
  uint64_t ms;
  CHECK_EQ(run_child(0, 3, 0, 0, 600, &ms), 0);
  CHECK_GE(ms, 590);
}

TEST(only_the_first_call_counts) {
  uint64_t ms;
  CHECK_EQ(run_child(300, 3, 50, 9, 60000, &ms), 3);
  CHECK_GE(ms, 290);
}

static const test_case tests[] = {
    TEST_CASE(a_hang_past_the_bound_ends_with_the_status_given),
    TEST_CASE(an_exit_within_the_bound_is_untouched),
    TEST_CASE(a_bound_of_zero_sets_none),
    TEST_CASE(only_the_first_call_counts),
};

TEST_MAIN(tests)
