/* The service actor: acceld as a system service (service.c). It owns the process's signal
 * handlers and the systemd notifications: READY once started (the server listens by then),
 * WATCHDOG from a timer on the loop (so a stuck loop stops feeding it), STOPPING on SIGTERM,
 * which drains the server and then stops the runtime; SIGHUP re-reads the configuration on a
 * worker and applies what can change live. Spawn it after the server. */
#ifndef ACD_SERVICE_H
#define ACD_SERVICE_H

#include "accel/runtime.h"
#include "daemon/config.h"

typedef struct acd_service_args {
  accel_ref server;
  acd_config *config;       /* the configuration in force; reloads update its live parts */
  const acd_flags *flags;   /* re-applied over the file on every reload */
  int ready_fd;             /* a byte is written here once ready, then it is closed; -1: none */
  int (*exit_status)(void); /* what main() will return once stopped (for the exit's bound) */
} acd_service_args;

extern const accel_behavior acd_service_behavior;

#endif
