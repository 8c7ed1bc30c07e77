/* Plain tcp:// addresses and the client's connect (proto/tcp.h). */
#include "proto/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "accel/error.h"
#include "runtime/deadline.h"

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

/* ---- the name's lookup, within the deadline ----
 *
 * getaddrinfo(3) cannot be stopped: a resolver that does not answer holds it for its own
 * timeouts and attempts (5 s each by default). A name that is not a numeric address is looked
 * up on a thread of its own; a caller whose deadline passes goes without it, and the thread
 * frees the lookup when the resolver is done. */

typedef struct resolver {
  int (*fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
  void (*free)(struct addrinfo *); /* for what fn found */
} resolver;

typedef struct lookup {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  int refs;          /* the caller's and the thread's */
  bool done;
  int gai, err; /* err: the thread's errno when gai is EAI_SYSTEM */
  resolver r;   /* the thread's own copy: a test may set another meanwhile */
  struct addrinfo hints, *list;
  proto_tcp_addr a;
} lookup;

static resolver current = {getaddrinfo, freeaddrinfo};
static atomic_int lookups_running, lookups_started;

void proto_tcp_set_resolver(int (*fn)(const char *, const char *, const struct addrinfo *,
                                      struct addrinfo **),
                            void (*free_fn)(struct addrinfo *)) {
  current = (resolver){fn ? fn : getaddrinfo, free_fn ? free_fn : freeaddrinfo};
}

int proto_tcp_lookups_running(void) {
  return atomic_load(&lookups_running);
}

int proto_tcp_lookups_started(void) {
  return atomic_load(&lookups_started);
}

static void lookup_put(lookup *l) { /* under l->mu, which it lets go */
  bool last = --l->refs == 0;
  pthread_mutex_unlock(&l->mu);
  if (!last)
    return;
  if (l->list != NULL)
    l->r.free(l->list);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l);
  atomic_fetch_sub(&lookups_running, 1);
}

static void *lookup_main(void *arg) {
  lookup *l = arg;
  struct addrinfo *list = NULL;
  int gai = l->r.fn(l->a.host, l->a.port, &l->hints, &list);
  int err = errno; /* this thread's: the caller's errno says nothing of it */
  pthread_mutex_lock(&l->mu);
  l->gai = gai;
  l->err = gai == EAI_SYSTEM ? err : 0;
  l->list = gai == 0 ? list : NULL;
  l->done = true;
  pthread_cond_signal(&l->cv);
  lookup_put(l);
  return NULL;
}

/* A lookup under way on a thread of its own; NULL if no thread could start (*err says why). */
static lookup *lookup_start(const resolver *r, const proto_tcp_addr *a,
                            const struct addrinfo *hints, int *err) {
  lookup *l = malloc(sizeof *l);
  *err = ENOMEM;
  if (l == NULL)
    return NULL;
  *l = (lookup){.refs = 2, .r = *r, .hints = *hints, .a = *a};
  bool has_cv = (*err = rt_cond_init_monotonic(&l->cv)) == 0;
  pthread_attr_t ta;
  if (has_cv && (*err = pthread_attr_init(&ta)) == 0) {
    pthread_mutex_init(&l->mu, NULL);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    atomic_fetch_add(&lookups_running, 1);
    pthread_t t;
    *err = pthread_create(&t, &ta, lookup_main, l);
    pthread_attr_destroy(&ta);
    if (*err == 0) {
      atomic_fetch_add(&lookups_started, 1);
      return l;
    }
    atomic_fetch_sub(&lookups_running, 1);
    pthread_mutex_destroy(&l->mu);
  }
  if (has_cv)
    pthread_cond_destroy(&l->cv);
  free(l);
  return NULL;
}

/* The addresses of a's host by deadline_ms: 0, or a getaddrinfo error (EAI_SYSTEM with *err the
 * resolver's errno); *timed_out when the deadline passed first. A name that is not an address
 * is looked up on a thread, or here if no thread can start (unbounded then, as before). */
static int lookup_by(const resolver *r, const proto_tcp_addr *a, const struct addrinfo *hints,
                     int64_t deadline_ms, struct addrinfo **out, int *err, bool *timed_out) {
  struct addrinfo numeric = *hints;
  numeric.ai_flags |= AI_NUMERICHOST; /* an address needs no resolver: no thread */
  *timed_out = false;
  int gai = r->fn(a->host, a->port, &numeric, out);
  *err = errno;
  if (gai != EAI_NONAME)
    return gai;
  lookup *l = lookup_start(r, a, hints, err);
  if (l == NULL) {
    gai = r->fn(a->host, a->port, hints, out);
    *err = errno;
    return gai;
  }
  struct timespec until = {(time_t)(deadline_ms / 1000), (long)(deadline_ms % 1000) * 1000000L};
  pthread_mutex_lock(&l->mu);
  int rc = 0;
  while (!l->done && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&l->cv, &l->mu, &until);
  *timed_out = !l->done;
  gai = l->done ? l->gai : EAI_SYSTEM;
  *err = l->done ? l->err : ETIMEDOUT;
  *out = l->list;
  l->list = NULL; /* the caller's now */
  lookup_put(l);
  return gai;
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
  /* one deadline for the lookup and all addresses */
  int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
  resolver r = current;
  int err = 0;
  bool timed_out;
  int gai = lookup_by(&r, &a, &hints, deadline, &list, &err, &timed_out);
  if (gai != 0) {
    *why = timed_out           ? "the name's lookup took past the timeout"
           : gai == EAI_SYSTEM ? strerror(err)
                               : gai_strerror(gai);
    if (list != NULL)
      r.free(list);
    errno = gai == EAI_SYSTEM ? err : ENOENT;
    return ACCEL_ECLOSED;
  }
  int one = 1;
  err = ECONNREFUSED;
  for (const struct addrinfo *ai = list; ai != NULL; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    err = fd < 0 ? errno : connect_by(fd, ai, deadline);
    if (err == 0) {
      r.free(list);
      /* frames are written whole: none should wait for the next one (Nagle) */
      (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    if (fd >= 0)
      close(fd);
  }
  r.free(list);
  *why = strerror(err);
  errno = err;
  return ACCEL_ECLOSED;
}
