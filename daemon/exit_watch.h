/* A bound on acceld's exit. Once the daemon has decided to stop (drained after SIGTERM, or a
 * second signal), it must be gone within [daemon] exit_timeout_ms: nng 1.5.2 can hang for ever
 * closing a socket whose peer dropped a connection with sends in flight (a known bug of that
 * release; libaccel works around it on the client side, clients/remote_nng.c), and a daemon
 * that never exits holds its devices and its socket. */
#ifndef ACD_EXIT_WATCH_H
#define ACD_EXIT_WATCH_H

#include <stdint.h>

/* Starts a thread that logs and ends the process with `status` (_exit) if it is still alive
 * timeout_ms from now. Once per process (later calls do nothing); timeout_ms 0: no bound.
 * 0, or an accel error if the thread could not be made (the exit is then unbounded). */
int acd_exit_watch_start(uint32_t timeout_ms, int status);

#endif
