/* Plain tcp:// listeners for acceld's own stream transport (server_priv.h, srv_tcp_*): the
 * addresses, the listening socket and what an accepted connection needs. The connections
 * themselves are served exactly as local ones (server_local.c): the same framing, flow
 * control, limits and I/O threads; only peer credentials and descriptors do not cross TCP.
 *
 * Why not nng's tcp://: nng's messages cost a zeroed allocation and a copy on each side, and
 * a pipe cannot be paused alone, so a client had to keep an acknowledgement window and split
 * large transfers; 1 GiB moved at about half of what a raw TCP socket moves on the same host
 * (docs/DECISIONS.md, "tcp:// on acceld's own stream"). tls+tcp:// stays on nng. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "accel/runtime.h"
#include "proto/tcp.h"
#include "runtime/error_detail.h"
#include "server/server_priv.h"

/* Whether a socket for a binds: an IPv6 one for every address also takes IPv4 (dual
 * stack), so that a listener on every address serves both. */
static int bind_one(const struct addrinfo *a, bool any, int *fd) {
  int s = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1, zero = 0;
  if (s < 0)
    return errno;
  /* A restarted daemon binds its port again at once, whatever its last connections left in
   * TIME_WAIT. */
  bool ok = setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            (!any || a->ai_family != AF_INET6 ||
             setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) == 0) &&
            bind(s, a->ai_addr, a->ai_addrlen) == 0;
  int err = ok ? 0 : errno;
  if (ok)
    *fd = s;
  else
    close(s);
  return err;
}

/* The first address of url's host and port that a socket binds to: its listening socket.
 * For every address of the host (`any`, and no family asked for) IPv6 goes first. */
static int bind_first(const char *url, const struct addrinfo *list, bool any, int *fd) {
  int err = EADDRNOTAVAIL;
  for (int pass = 0; pass < 2; pass++)
    for (const struct addrinfo *a = list; a != NULL; a = a->ai_next) {
      if (any && (pass == 0) != (a->ai_family == AF_INET6))
        continue;
      if (!any && pass == 1)
        break;
      if ((err = bind_one(a, any, fd)) == 0)
        return 0;
    }
  accel_log(ACCEL_LOG_ERROR, "server", "cannot listen on %s: bind: %s", url, strerror(err));
  return rt_error_detail(err == EADDRINUSE ? ACCEL_EBUSY : ACCEL_ESYS, "%s: bind: %s", url,
                         strerror(err));
}

int srv_tcp_bind(const char *url, int *fd) {
  proto_tcp_addr a;
  if (proto_tcp_parse(url, &a) != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "cannot listen on %s: not tcp://HOST:PORT", url);
    return rt_error_detail(ACCEL_EINVAL, "%s: not tcp://HOST:PORT", url);
  }
  struct addrinfo hints = {.ai_family = a.family,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                  *list = NULL;
  int gai = getaddrinfo(a.host[0] ? a.host : NULL, a.port, &hints, &list); /* "": any */
  if (gai != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "cannot listen on %s: %s", url, gai_strerror(gai));
    return rt_error_detail(ACCEL_EINVAL, "%s: %s", url, gai_strerror(gai));
  }
  int rc = bind_first(url, list, a.host[0] == '\0' && a.family == AF_UNSPEC, fd);
  freeaddrinfo(list);
  return rc;
}

/* Keepalive: a client whose host vanished (no FIN ever comes) is found out within about
 * two minutes, and its session ends, instead of holding its buffers until the daemon stops. */
#define KEEPALIVE_IDLE_S 60
#define KEEPALIVE_INTERVAL_S 10
#define KEEPALIVE_PROBES 6

void srv_tcp_accepted(int fd) {
  int one = 1, idle = KEEPALIVE_IDLE_S, interval = KEEPALIVE_INTERVAL_S, probes = KEEPALIVE_PROBES;
  /* replies are written whole: none should wait for the next one (Nagle) */
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

void srv_tcp_peer_name(int fd, char *buf, size_t len) {
  struct sockaddr_storage sa;
  socklen_t sl = sizeof sa;
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getpeername(fd, (struct sockaddr *)&sa, &sl) != 0 ||
      getnameinfo((struct sockaddr *)&sa, sl, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    snprintf(buf, len, "?");
  else if (sa.ss_family == AF_INET6)
    snprintf(buf, len, "[%s]:%s", host, port);
  else
    snprintf(buf, len, "%s:%s", host, port);
}
