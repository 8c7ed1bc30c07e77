/* A growable string for the reports (sbuf.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/alloc.h"
#include "server/sbuf.h"

bool sb_reserve(sbuf *b, size_t extra) {
  if (b->oom)
    return false;
  if (b->len + extra + 1 <= b->cap)
    return true;
  size_t cap = b->cap ? b->cap : 512;
  while (cap < b->len + extra + 1)
    cap *= 2;
  char *p = rt_realloc(b->s, cap);
  if (p == NULL) {
    b->oom = true;
    return false;
  }
  b->s = p;
  b->cap = cap;
  return true;
}

void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !sb_reserve(b, (size_t)n))
    return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* A JSON string literal: quotes, backslashes and control characters escaped. */
void sb_json_str(sbuf *b, const char *s) {
  sb_printf(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      sb_printf(b, "\\%c", *p);
    else if (*p < 0x20)
      sb_printf(b, "\\u%04x", *p);
    else
      sb_printf(b, "%c", *p);
  }
  sb_printf(b, "\"");
}

void sb_label_value(sbuf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '\\' || *s == '"')
      sb_printf(b, "\\%c", *s);
    else if (*s == '\n')
      sb_printf(b, "\\n");
    else
      sb_printf(b, "%c", *s);
  }
}

char *sb_finish(sbuf *b) {
  if (b->oom || !sb_reserve(b, 0)) {
    rt_free(b->s);
    return NULL;
  }
  b->s[b->len] = '\0';
  return b->s;
}

/* 1536 -> "1.5 KiB": binary units, three significant digits; bytes below 1 KiB exact. */
void sb_human_bytes(uint64_t n, char *out, size_t len) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (n < 1024) {
    snprintf(out, len, "%llu B", (unsigned long long)n);
    return;
  }
  double v = (double)n / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1024;
    u++;
  }
  snprintf(out, len, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
}
