/* The logger: level parsing, set/get, the ACCEL_LOG variable, filtering by level, one line per
 * call from many threads at once. */
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>

#include "../test.h"
#include "accel/runtime.h"

extern char **environ;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
enum { N_LEVELS = 5 };

/* What the level must be in a fresh process: ACCEL_LOG when valid, else warn. */
static accel_log_level level_expected_from_env(void) {
  const char *env = getenv("ACCEL_LOG");
  for (int i = 0; env != NULL && i < N_LEVELS; i++)
    if (strcmp(env, level_names[i]) == 0)
      return (accel_log_level)i;
  return ACCEL_LOG_WARN;
}

/* Runs first, before anything sets the level. */
TEST(level_matches_environment) {
  CHECK_EQ(accel_log_get_level(), level_expected_from_env());
}

static int run_self_with_env(const char *test_name, const char *log_env) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  CHECK_GT(n, 0);
  exe[n] = '\0';
  char env_var[64];
  snprintf(env_var, sizeof env_var, "ACCEL_LOG=%s", log_env);
  char *child_env[] = {env_var, NULL};
  char *child_argv[] = {exe, (char *)test_name, NULL};
  posix_spawn_file_actions_t quiet;
  pid_t pid;
  CHECK_EQ(posix_spawn_file_actions_init(&quiet), 0);
  CHECK_EQ(posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0), 0);
  CHECK_EQ(posix_spawn(&pid, exe, &quiet, NULL, child_argv, child_env), 0);
  posix_spawn_file_actions_destroy(&quiet);
  int status = 0;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(accel_log_variable_sets_the_level) {
  for (int i = 0; i < N_LEVELS; i++)
    CHECK_EQ(run_self_with_env("level_matches_environment", level_names[i]), 0);
}

TEST(parse_accepts_every_level) {
  for (int i = 0; i < N_LEVELS; i++) {
    accel_log_level got = (accel_log_level)99;
    CHECK_OK(accel_log_parse_level(level_names[i], &got));
    CHECK_EQ(got, i);
  }
  CHECK_EQ(ACCEL_LOG_ERROR, 0);
  CHECK_EQ(ACCEL_LOG_TRACE, 4);
}

TEST(parse_refuses_other_words) {
  static const char *const bad[] = {"", "bogus", "5", "warnx", "inf", "error ", " debug", "tracee"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    accel_log_level got = ACCEL_LOG_WARN;
    CHECK_ERR(accel_log_parse_level(bad[i], &got), ACCEL_EINVAL);
  }
}

TEST(set_then_get_round_trips) {
  accel_log_level before = accel_log_get_level();
  for (int i = 0; i < N_LEVELS; i++) {
    accel_log_set_level((accel_log_level)i);
    CHECK_EQ(accel_log_get_level(), i);
  }
  accel_log_set_level(before);
  CHECK_EQ(accel_log_get_level(), before);
}

/* Runs fn() with stderr redirected to a temporary file; returns what was written (malloc'd). */
static char *capture_stderr(void (*fn)(void)) {
  FILE *tmp = tmpfile();
  CHECK(tmp != NULL);
  fflush(stderr);
  int saved = dup(2);
  CHECK(saved >= 0);
  CHECK(dup2(fileno(tmp), 2) >= 0);
  fn();
  fflush(stderr);
  CHECK(dup2(saved, 2) >= 0);
  close(saved);
  long len = lseek(fileno(tmp), 0, SEEK_END);
  CHECK(len >= 0);
  char *text = calloc(1, (size_t)len + 1);
  CHECK(text != NULL);
  CHECK_EQ(pread(fileno(tmp), text, (size_t)len, 0), len);
  fclose(tmp);
  return text;
}

static int count_lines(const char *text) {
  int n = 0;
  for (; *text; text++)
    n += *text == '\n';
  return n;
}

static void log_at_every_level_with_warn(void) {
  accel_log_set_level(ACCEL_LOG_WARN);
  accel_log(ACCEL_LOG_ERROR, "tst", "shown-error %d", 1);
  accel_log(ACCEL_LOG_WARN, "tst", "shown-warn %s", "two");
  accel_log(ACCEL_LOG_INFO, "tst", "hidden-info");
  accel_log(ACCEL_LOG_DEBUG, "tst", "hidden-debug");
  accel_log(ACCEL_LOG_TRACE, "tst", "hidden-trace");
}

TEST(level_filters_lines) {
  accel_log_level before = accel_log_get_level();
  char *text = capture_stderr(log_at_every_level_with_warn);
  accel_log_set_level(before);
  CHECK(strstr(text, "shown-error 1") != NULL);
  CHECK(strstr(text, "shown-warn two") != NULL);
  CHECK(strstr(text, "tst") != NULL);
  CHECK(strstr(text, "hidden") == NULL);
  CHECK_EQ(count_lines(text), 2);
  free(text);
}

static void log_everything_at_trace(void) {
  accel_log_set_level(ACCEL_LOG_TRACE);
  for (int i = 0; i < N_LEVELS; i++)
    accel_log((accel_log_level)i, "tst", "line-%d", i);
}

TEST(trace_shows_every_level) {
  accel_log_level before = accel_log_get_level();
  char *text = capture_stderr(log_everything_at_trace);
  accel_log_set_level(before);
  CHECK_EQ(count_lines(text), N_LEVELS);
  for (int i = 0; i < N_LEVELS; i++) {
    char want[16];
    snprintf(want, sizeof want, "line-%d", i);
    CHECK(strstr(text, want) != NULL);
  }
  free(text);
}

enum { LOG_THREADS = 4, LINES_PER_THREAD = 200 };

static void *log_many_lines(void *arg) {
  int t = (int)(intptr_t)arg;
  for (int i = 0; i < LINES_PER_THREAD; i++)
    accel_log(ACCEL_LOG_ERROR, "tst", "<t%d-i%03d-%s>", t, i, "abcdefghijklmnopqrstuvwxyz");
  return NULL;
}

static void log_from_threads(void) {
  pthread_t th[LOG_THREADS];
  accel_log_set_level(ACCEL_LOG_WARN);
  for (int t = 0; t < LOG_THREADS; t++)
    CHECK_EQ(pthread_create(&th[t], NULL, log_many_lines, (void *)(intptr_t)t), 0);
  for (int t = 0; t < LOG_THREADS; t++)
    CHECK_EQ(pthread_join(th[t], NULL), 0);
}

/* Every line holds exactly one whole record: lines from threads never interleave. */
static void check_whole_lines(char *text) {
  int seen[LOG_THREADS][LINES_PER_THREAD] = {{0}};
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char *open = strchr(line, '<');
    int t = -1, i = -1, used = 0;
    CHECK(open != NULL);
    CHECK(strchr(open + 1, '<') == NULL);
    CHECK_EQ(sscanf(open, "<t%d-i%d-abcdefghijklmnopqrstuvwxyz>%n", &t, &i, &used), 2);
    CHECK(used > 0);
    CHECK(t >= 0 && t < LOG_THREADS && i >= 0 && i < LINES_PER_THREAD);
    seen[t][i]++;
  }
  for (int t = 0; t < LOG_THREADS; t++)
    for (int i = 0; i < LINES_PER_THREAD; i++)
      CHECK_EQ(seen[t][i], 1);
}

TEST(lines_from_many_threads_stay_whole) {
  accel_log_level before = accel_log_get_level();
  char *text = capture_stderr(log_from_threads);
  accel_log_set_level(before);
  CHECK_EQ(count_lines(text), LOG_THREADS * LINES_PER_THREAD);
  check_whole_lines(text);
  free(text);
}

static const test_case tests[] = {
    TEST_CASE(level_matches_environment), TEST_CASE(accel_log_variable_sets_the_level),
    TEST_CASE(parse_accepts_every_level), TEST_CASE(parse_refuses_other_words),
    TEST_CASE(set_then_get_round_trips),  TEST_CASE(level_filters_lines),
    TEST_CASE(trace_shows_every_level),   TEST_CASE(lines_from_many_threads_stay_whole),
};

TEST_MAIN(tests)
