/* The leveled logger: one line per call on stderr, written with one fputs so lines from
 * different threads do not interleave.
 *
 * When stderr is the systemd journal's stream ($JOURNAL_STREAM names its device and inode, as
 * sd_journal_stream_fd(3) describes), each line starts with the syslog priority ("<3>" ...
 * "<7>") and carries no time: journald records the level and adds its own timestamp.
 * Elsewhere a line starts with the UTC date and time (ISO 8601, milliseconds) and the level's
 * name. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/rt.h"

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
static atomic_int current_level = ACCEL_LOG_WARN;
static atomic_bool env_read = false;
static atomic_int to_journal = -1; /* unknown until the first line */

const char *accel_log_level_name(accel_log_level level) {
  return level >= ACCEL_LOG_ERROR && level <= ACCEL_LOG_TRACE ? level_names[level] : "unknown";
}

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

/* Whether stderr is the stream $JOURNAL_STREAM ("DEV:INODE") names. Checked once: the
 * variable is inherited, so a daemon whose stderr was redirected elsewhere compares. */
static bool stderr_is_journal(void) {
  int known = atomic_load(&to_journal);
  if (known >= 0)
    return known == 1;
  const char *env = getenv("JOURNAL_STREAM");
  unsigned long long dev, ino;
  struct stat st;
  bool yes = env != NULL && sscanf(env, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
             (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
  atomic_store(&to_journal, yes ? 1 : 0);
  return yes;
}

static int format_prefix(char *line, size_t len, accel_log_level level, const char *component) {
  static const char priority[] = {'3', '4', '6', '7', '7'}; /* syslog: err ... debug */
  if (component == NULL)
    component = "-";
  if (stderr_is_journal())
    return snprintf(line, len, "<%c>%s: ", priority[level], component);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  return snprintf(line, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s: ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                  level_names[level], component);
}

void accel_log(accel_log_level level, const char *component, const char *fmt, ...) {
  if ((int)level > (int)accel_log_get_level() || level < ACCEL_LOG_ERROR)
    return;
  char line[1024];
  int n = format_prefix(line, sizeof line, level, component);
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
