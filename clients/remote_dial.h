/* Dialing acceld over nng: tcp:// and tls+tcp:// (the client's half of actors/server_tls.c). */
#ifndef CLIENT_REMOTE_DIAL_H
#define CLIENT_REMOTE_DIAL_H

#include <nng/nng.h>

/* Dials `url` on `sock` (synchronously). For tls+tcp:// the TLS settings come from the URL's
 * query or the environment (documented in include/accel/accel.h). 0, or ACCEL_ECLOSED when
 * nothing answers, or another negative accel error. */
int client_nng_dial(nng_socket sock, const char *url);

#endif
