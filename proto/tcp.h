/* Plain tcp:// addresses and the client's connect (the daemon listens in
 * server/server_tcp.c). tcp:// carries acceld's own stream of frames, as a local socket does
 * (proto/local.h), over TCP: no descriptors pass, so no shared memory either. */
#ifndef PROTO_TCP_H
#define PROTO_TCP_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/attr.h"

#define PROTO_TCP_HOST_MAX 256 /* bytes of a host name or address, NUL included */
#define PROTO_TCP_PORT_MAX 8

typedef struct proto_tcp_addr {
  char host[PROTO_TCP_HOST_MAX]; /* brackets of an IPv6 address removed; "" for any ("*") */
  char port[PROTO_TCP_PORT_MAX]; /* digits, 1 to 65535 */
  int family;                    /* AF_INET (tcp4://), AF_INET6 (tcp6://), AF_UNSPEC */
} proto_tcp_addr;

/* Whether url is tcp://, tcp4:// or tcp6://. */
bool proto_tcp_url(const char *url);
/* Splits SCHEME://HOST:PORT, SCHEME://[IPV6]:PORT or SCHEME://ANY:PORT (ANY: an asterisk,
 * every address of the host), nothing after the port: 0, or ACCEL_EINVAL (out untouched). */
RT_MUST_USE int proto_tcp_parse(const char *url, proto_tcp_addr *out);
/* Connects to url's host and port (the name's lookup, then each address it has in turn, all
 * within timeout_ms; signals that interrupt the wait do not extend it; a lookup still running
 * at the deadline finishes on its own thread, and its result is dropped):
 * the descriptor (blocking, close-on-exec, TCP_NODELAY), or ACCEL_EINVAL (not a tcp:// URL
 * with a host) or ACCEL_ECLOSED (nothing answered); *why then says what failed (static text:
 * the resolver's or the system's words). */
RT_MUST_USE int proto_tcp_connect(const char *url, int timeout_ms, const char **why);

struct addrinfo;
/* Tests: the lookup proto_tcp_connect uses instead of getaddrinfo/freeaddrinfo (NULL: those
 * again; not while a connect runs), how many lookups' threads have not yet ended, and how many
 * have started. */
void proto_tcp_set_resolver(int (*fn)(const char *, const char *, const struct addrinfo *,
                                      struct addrinfo **),
                            void (*free_fn)(struct addrinfo *));
int proto_tcp_lookups_running(void);
int proto_tcp_lookups_started(void);

#endif
