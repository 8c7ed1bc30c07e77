/* Dialing acceld over nng (clients/remote_dial.h). Placeholder until TLS lands. */
#include "clients/remote_dial.h"

#include "accel/error.h"

int client_nng_dial(nng_socket sock, const char *url) {
  return nng_dial(sock, url, NULL, 0) == 0 ? 0 : ACCEL_ECLOSED;
}
