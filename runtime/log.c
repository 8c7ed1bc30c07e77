/* The leveled logger: one line per call on stderr, written with one fputs so lines from
 * different threads do not interleave. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/rt.h"

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
static atomic_int current_level = ACCEL_LOG_WARN;
static atomic_bool env_read = false;

int accel_log_parse_level(const char *s, accel_log_level *out) {
  if (s == NULL || out == NULL)
    return ACCEL_EINVAL;
  for (int i = 0; i <= ACCEL_LOG_TRACE; i++) {
    if (strcmp(s, level_names[i]) == 0) {
      *out = (accel_log_level)i;
      return 0;
    }
  }
  return ACCEL_EINVAL;
}

void rt_log_init_from_env(void) {
  if (atomic_exchange(&env_read, true))
    return;
  accel_log_level level;
  if (accel_log_parse_level(getenv("ACCEL_LOG"), &level) == 0)
    atomic_store(&current_level, (int)level);
}

void accel_log_set_level(accel_log_level level) {
  atomic_store(&env_read, true); /* an explicit level wins over the environment */
  if (level >= ACCEL_LOG_ERROR && level <= ACCEL_LOG_TRACE)
    atomic_store(&current_level, (int)level);
}

accel_log_level accel_log_get_level(void) {
  rt_log_init_from_env();
  return (accel_log_level)atomic_load(&current_level);
}

void accel_log(accel_log_level level, const char *component, const char *fmt, ...) {
  if ((int)level > (int)accel_log_get_level() || level < ACCEL_LOG_ERROR)
    return;
  char line[1024];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%06ld %-5s %s: ", tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000, level_names[level],
                   component ? component : "-");
  if (n < 0 || (size_t)n >= sizeof line)
    n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = strlen(line);
  line[len] = '\n';
  line[len + 1] = '\0';
  fputs(line, stderr);
}
