/* Plain tcp:// addresses and the client's connect (proto/tcp.h). */
#include "proto/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "accel/error.h"

static const char *after_scheme(const char *url, int *family) {
  static const struct {
    const char *scheme;
    int family;
  } schemes[] = {{"tcp://", AF_UNSPEC}, {"tcp4://", AF_INET}, {"tcp6://", AF_INET6}};
  for (size_t i = 0; url != NULL && i < sizeof schemes / sizeof schemes[0]; i++)
    if (strncmp(url, schemes[i].scheme, strlen(schemes[i].scheme)) == 0) {
      *family = schemes[i].family;
      return url + strlen(schemes[i].scheme);
    }
  return NULL;
}

bool proto_tcp_url(const char *url) {
  int family;
  return after_scheme(url, &family) != NULL;
}

static bool valid_port(const char *p) {
  size_t n = strspn(p, "0123456789");
  if (n == 0 || n >= PROTO_TCP_PORT_MAX || p[n] != '\0')
    return false;
  long v = strtol(p, NULL, 10);
  return v >= 1 && v <= 65535;
}

int proto_tcp_parse(const char *url, proto_tcp_addr *out) {
  int family;
  const char *host = after_scheme(url, &family), *end, *port;
  if (host == NULL)
    return ACCEL_EINVAL;
  if (*host == '[') { /* [IPV6]:PORT */
    end = strchr(++host, ']');
    if (end == NULL || end[1] != ':')
      return ACCEL_EINVAL;
    port = end + 2;
  } else { /* a colon in the host only between brackets */
    end = strchr(host, ':');
    if (end == NULL)
      return ACCEL_EINVAL;
    port = end + 1;
  }
  size_t hlen = (size_t)(end - host);
  if (hlen >= PROTO_TCP_HOST_MAX || memchr(host, '/', hlen) != NULL || !valid_port(port))
    return ACCEL_EINVAL;
  if (hlen == 1 && host[0] == '*')
    hlen = 0;
  memcpy(out->host, host, hlen);
  out->host[hlen] = '\0';
  strcpy(out->port, port);
  out->family = family;
  return 0;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* connect(2) by deadline_ms (CLOCK_MONOTONIC), the socket left blocking: 0 or errno. A signal
 * that interrupts the wait does not restart its time. */
static int connect_by(int fd, const struct addrinfo *a, int64_t deadline_ms) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return errno;
  int err = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n;
    do {
      int64_t left = deadline_ms - now_ms();
      n = left > 0 ? poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left) : 0;
    } while (n < 0 && errno == EINTR);
    socklen_t len = sizeof err;
    if (n == 0)
      err = ETIMEDOUT;
    else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = errno;
  }
  if (err == 0 && fcntl(fd, F_SETFL, flags) != 0)
    err = errno;
  return err;
}

int proto_tcp_connect(const char *url, int timeout_ms, const char **why) {
  proto_tcp_addr a;
  *why = "not tcp://HOST:PORT";
  if (proto_tcp_parse(url, &a) != 0 || a.host[0] == '\0')
    return ACCEL_EINVAL;
  struct addrinfo hints = {.ai_family = a.family,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV},
                  *list = NULL;
  int gai = getaddrinfo(a.host, a.port, &hints, &list);
  if (gai != 0) {
    *why = gai_strerror(gai);
    return ACCEL_ECLOSED;
  }
  int err = ECONNREFUSED, one = 1;
  int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0); /* for all addresses */
  for (const struct addrinfo *ai = list; ai != NULL; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    err = fd < 0 ? errno : connect_by(fd, ai, deadline);
    if (err == 0) {
      freeaddrinfo(list);
      /* frames are written whole: none should wait for the next one (Nagle) */
      (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    if (fd >= 0)
      close(fd);
  }
  freeaddrinfo(list);
  *why = strerror(err);
  errno = err;
  return ACCEL_ECLOSED;
}
