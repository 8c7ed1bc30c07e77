/* Loopback TCP listeners for tests of connects: one that takes connections, and one whose
 * accept queue is full, so that the kernel drops further SYNs and a connect hangs as toward a
 * host that vanished (tests/proto/tcp_connect.c, tests/daemon/cli.c). */
#ifndef TEST_TCP_LISTENER_H
#define TEST_TCP_LISTENER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

/* A listener on 127.0.0.1 with the given backlog; its port in *port. */
static inline int tcp_listener(int backlog, int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  CHECK_EQ(listen(fd, backlog), 0);
  socklen_t len = sizeof a;
  CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

/* Fills the accept queue of a backlog-0 listener on port with n held connections (backlog 0
 * takes one): later SYNs are dropped. */
static inline void tcp_fill_queue(int port, int *held, int n) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  for (int i = 0; i < n; i++) {
    held[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK(held[i] >= 0);
    int rc = connect(held[i], (struct sockaddr *)&a, sizeof a);
    CHECK(rc == 0 || errno == EINPROGRESS);
  }
  usleep(100 * 1000); /* the handshakes the queue has room for complete */
}

#endif
