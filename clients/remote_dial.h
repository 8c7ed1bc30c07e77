/* Dialing acceld over nng: tcp:// and tls+tcp:// (the client's half of server/server_tls.c). */
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

#endif
