/* A growable string for the reports built on the loop (render_status.c, render_metrics.c): after
 * the first allocation failure every append is a no-op, and sb_finish returns NULL. */
#ifndef SRV_SBUF_H
#define SRV_SBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/attr.h"

typedef struct sbuf {
  char *s;
  size_t len, cap;
  bool oom;
} sbuf;

bool sb_reserve(sbuf *b, size_t extra);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal: quotes, backslashes and control characters escaped. */
void sb_json_str(sbuf *b, const char *s);
/* A Prometheus label value, without its quotes: backslash, double quote and line feed
 * escaped, as the exposition format asks. */
void sb_label_value(sbuf *b, const char *s);
/* A size for people: "1.50 GiB" (binary units, three significant digits; exact below 1 KiB). */
void sb_human_bytes(uint64_t n, char *out, size_t len);
/* The NUL-terminated string (the caller frees it), or NULL if an append ran out of memory. */
RT_MUST_USE char *sb_finish(sbuf *b);

#endif
