/* The error table's strings (see include/accel/error.h for the single source), and the
 * calling thread's last error detail (runtime/error_detail.h). */
#include "runtime/error_detail.h"

#include <stdarg.h>
#include <stdio.h>

#include "accel/error.h"

const char *accel_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define ACCEL_ERR_MSG_(name, value, msg)                                                           \
  case value:                                                                                      \
    return msg;
    ACCEL_ERRNO_MAP(ACCEL_ERR_MSG_)
#undef ACCEL_ERR_MSG_
  default:
    return "unknown error";
  }
}

const char *accel_err_name(int err) {
  switch (err) {
  case 0:
    return "OK";
#define ACCEL_ERR_NAME_(name, value, msg)                                                          \
  case value:                                                                                      \
    return #name;
    ACCEL_ERRNO_MAP(ACCEL_ERR_NAME_)
#undef ACCEL_ERR_NAME_
  default:
    return "UNKNOWN";
  }
}

/* Long enough for a URL or path and a system call's message; longer details are cut. */
static _Thread_local char last_detail[512];

int rt_error_detail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_detail, sizeof last_detail, fmt, ap);
  va_end(ap);
  return err;
}

void rt_error_detail_clear(void) {
  last_detail[0] = '\0';
}

const char *accel_last_error_detail(void) {
  return last_detail;
}
