/* Dialing acceld: its local socket (ipc://, unix://), and nng for tcp:// and tls+tcp:// (the
 * client's half of server/server_tls.c). libaccel and accelctl both dial through here, and a
 * dial that fails records why (accel_last_error_detail, include/accel/error.h): the URL, the
 * system call or nng's reason. */
#ifndef CLIENT_REMOTE_DIAL_H
#define CLIENT_REMOTE_DIAL_H

#include <nng/nng.h>

#include "runtime/attr.h"

/* Dials `url` on `sock` (synchronously: for tls+tcp:// until the TLS handshake is done). The
 * TLS settings come from the environment (ACCEL_TLS_*, documented at accel_open in
 * include/accel/accel.h). 0; ACCEL_ECLOSED when nothing answers; ACCEL_EPERM when the TLS
 * handshake fails on a certificate (the daemon's not trusted, ours refused) or no CA is set;
 * ACCEL_EINVAL for unusable settings (logged). */
RT_MUST_USE int client_nng_dial(nng_socket sock, const char *url);

/* Connects to the local socket of `url` (ipc:// or unix://): the descriptor, or ACCEL_ECLOSED
 * when no acceld listens there (no socket file, or nobody behind it), ACCEL_EPERM (not allowed
 * to), ACCEL_EINVAL (path too long), ACCEL_ESYS. */
RT_MUST_USE int client_local_connect(const char *url);
/* Connects to tcp://HOST:PORT within timeout_ms (< 0: 10 s) (TCP_NODELAY, blocking): the
 * descriptor, or ACCEL_ECLOSED when nothing answers there in time, ACCEL_EINVAL for a URL
 * without host or port. */
RT_MUST_USE int client_tcp_connect(const char *url, int timeout_ms);

#endif
