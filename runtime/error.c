/* The error table's strings (see include/accel/error.h for the single source). */
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
