/* accel — error codes.
 *
 * Every accel function that can fail returns 0 on success or one of these negative codes.
 * The table below is the single source: it generates the enum, accel_strerror() and
 * accel_err_name(). Codes are stable: they also travel on the wire, so never renumber one.
 */
#ifndef ACCEL_ERROR_H
#define ACCEL_ERROR_H

#include "accel/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value, message) */
#define ACCEL_ERRNO_MAP(X)                                                                         \
  X(EINVAL, -1, "invalid argument")                                                                \
  X(ESTALE, -2, "stale or foreign handle")                                                         \
  X(ENOMEM, -3, "out of memory")                                                                   \
  X(ETIMEDOUT, -4, "timed out")                                                                    \
  X(EAGAIN, -5, "not ready yet, try again")                                                        \
  X(EBUSY, -6, "busy: queue or mailbox full")                                                      \
  X(EDEVLOST, -7, "device lost while the operation was in flight")                                 \
  X(EDATALOST, -8, "data lost: the buffer's only valid copy was on a lost device")                 \
  X(ENOTSUP, -9, "not supported on this backend")                                                  \
  X(EPERM, -10, "operation not permitted")                                                         \
  X(ECANCELED, -11, "canceled")                                                                    \
  X(ECLOSED, -12, "closed or shutting down")                                                       \
  X(EDEADLK, -13, "would deadlock: blocking call on the loop thread")                              \
  X(EALREADY, -14, "already done")                                                                 \
  X(ELIMIT, -15, "limit exceeded")                                                                 \
  X(EFAILED, -16, "actor failed")                                                                  \
  X(EPROTO, -17, "protocol error")                                                                 \
  X(EIO, -18, "input/output error")                                                                \
  X(ENOENT, -19, "no such entry")                                                                  \
  X(ESYS, -20, "system call failed")                                                               \
  X(EBUILD, -21, "the kernel source did not build: see the module's build log")

typedef enum accel_errno {
#define ACCEL_ERR_ENUM_(name, value, msg) ACCEL_##name = (value),
  ACCEL_ERRNO_MAP(ACCEL_ERR_ENUM_)
#undef ACCEL_ERR_ENUM_
      ACCEL_ERRNO_MIN_ = -22 /* one below the lowest code; not an error */
} accel_errno;

/* A human-readable message for `err` ("success" for 0, "unknown error" for codes not in the
 * table). The string is static; never free it. Thread-safe. */
ACCEL_API const char *accel_strerror(int err);

/* The code's symbolic name without the prefix ("EINVAL", "OK" for 0, "UNKNOWN" otherwise).
 * Static string; thread-safe. */
ACCEL_API const char *accel_err_name(int err);

/* Why the calling thread's last failed call failed, where the code alone cannot say: which
 * argument or address, which values, which system call and its errno. For example
 * "no acceld at ipc:///run/acceld/acceld.sock (connect: No such file or directory)". Never
 * NULL; "" when there is nothing to add.
 *
 * accel_open clears it when it starts and, when it fails to reach acceld, records why; the op
 * calls (accel_write ... accel_binary) clear it too and, when they refuse an op's arguments,
 * say which (a range past a buffer's end, mixed or unfit dtypes); other calls leave it as it
 * was, so read it right after the call that failed. Per thread: a
 * failure on one thread never shows on another. The string belongs to libaccel; the thread's
 * next accel_open rewrites it (copy it to keep it). */
ACCEL_API const char *accel_last_error_detail(void);

#ifdef __cplusplus
}
#endif
#endif
