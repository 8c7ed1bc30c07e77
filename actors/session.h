/* The SessionActor: a client's buffers and ops (see session.c). */
#ifndef DEV_SESSION_H
#define DEV_SESSION_H

#include "actors/world.h"

typedef struct dev_session_args {
  dev_world *world;
  uint32_t max_buffers;   /* size of the handle table; slot 0 is never used */
  uint32_t max_in_flight; /* ops at once (0: no limit); past it ops fail with ACCEL_EBUSY */
  uint64_t max_memory;    /* bytes of buffers (0: no limit); past it ACCEL_ENOMEM */
  /* Module loads (user kernels) are refused with ACCEL_EPERM when set (acceld's
   * [security] user_kernels for the connection's listener). */
  bool forbid_modules;
  /* Who the client is, for traces (acceld: the name from HELLO; it must outlive the session's
   * last op). NULL: "session". */
  const char *name;
  /* Called on the loop when the session ends (client gone, shutdown); may be NULL. */
  void (*on_stop)(void *arg, accel_ref session);
  void *on_stop_arg;
  /* Set by the session while it lives (its counters, for the server's per-session transfer
   * statistics); NULL before it starts and after it stops. Loop thread. */
  struct dev_session_acct *acct;
} dev_session_args;

/* A session's counters; ops in flight hold a reference, so they may outlive the session. */
typedef struct dev_session_acct {
  uint32_t refs;
  uint32_t in_flight;
  uint64_t memory;
  uint32_t buffers;
  accel_transfer_stats moved; /* bytes this session's ops moved (loop thread) */
  uint32_t id;                /* the session's number in traces (1, 2, ... per world) */
  const char *name;           /* dev_session_args.name */
} dev_session_acct;

/* Drops a reference to a; the last one frees it (loop thread). */
void dev_session_acct_release(dev_session_acct *a);

extern const accel_behavior dev_session_behavior;

/* The message that carries `call` to a session (its drop completes its op with ACCEL_ECLOSED if
 * the session ends first). */
void dev_session_op_msg(accel_msg *m, dev_call *call);

#endif
