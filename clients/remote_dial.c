/* Dialing acceld over nng (clients/remote_dial.h). For tls+tcp:// the client always verifies
 * the daemon's certificate (NNG_TLS_AUTH_MODE_REQUIRED): against ACCEL_TLS_CA, and for the
 * name ACCEL_TLS_SERVER_NAME or else the URL's host. Without ACCEL_TLS_CA no certificate can
 * be verified and the dial fails: there is no unverified mode. */
#include "clients/remote_dial.h"

#include <errno.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/error.h"
#include "accel/runtime.h"
#include "proto/local.h"
#include "proto/tcp.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"
#include "runtime/error_detail.h"

static bool is_tls(const char *url) {
  static const char *const schemes[] = {"tls+tcp://", "tls+tcp4://", "tls+tcp6://"};
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strncmp(url, schemes[i], strlen(schemes[i])) == 0)
      return true;
  return false;
}

/* The detail just recorded (rt_error_detail), in the log too: a setting's mistake is worth a
 * line there even for a program that never reads accel_last_error_detail. */
static void log_detail(int level) {
  accel_log(level, "client", "%s", accel_last_error_detail());
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? v : NULL;
}

/* A PEM file as a NUL-terminated string, or NULL after saying why (bounded: PEM files are a
 * few KiB). */
static char *read_pem(const char *var, const char *path, size_t *len) {
  enum { MAX_PEM = 1 << 20 };
  FILE *f = fopen(path, "r");
  char *buf = f ? rt_malloc(MAX_PEM + 1) : NULL;
  size_t n = buf ? fread(buf, 1, MAX_PEM + 1, f) : 0;
  int err = f == NULL ? errno : buf == NULL ? ENOMEM : ferror(f) ? EIO : n > MAX_PEM ? EFBIG : 0;
  if (f)
    fclose(f);
  if (err != 0) {
    rt_error_detail(0, "%s=%s: %s", var, path, strerror(err));
    log_detail(ACCEL_LOG_ERROR);
    rt_free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* ACCEL_TLS_CERT and ACCEL_TLS_KEY (both or neither): the certificate a daemon with
 * tls_verify_clients asks for. */
static int client_cert(nng_tls_config *cfg) {
  const char *cert_path = env("ACCEL_TLS_CERT"), *key_path = env("ACCEL_TLS_KEY");
  if (cert_path == NULL && key_path == NULL)
    return 0;
  if (cert_path == NULL || key_path == NULL) {
    rt_error_detail(0, "ACCEL_TLS_CERT and ACCEL_TLS_KEY go together");
    log_detail(ACCEL_LOG_ERROR);
    return ACCEL_EINVAL;
  }
  size_t cert_len = 0, key_len = 0;
  char *cert = read_pem("ACCEL_TLS_CERT", cert_path, &cert_len);
  char *key = cert ? read_pem("ACCEL_TLS_KEY", key_path, &key_len) : NULL;
  int rv = key ? nng_tls_config_own_cert(cfg, cert, key, NULL) : NNG_EINVAL;
  if (key && rv != 0) {
    rt_error_detail(0,
                    "ACCEL_TLS_CERT=%s, ACCEL_TLS_KEY=%s: not a usable PEM certificate and "
                    "unencrypted private key: %s",
                    cert_path, key_path, nng_strerror(rv));
    log_detail(ACCEL_LOG_ERROR);
  }
  rt_free(cert);
  if (key)
    explicit_bzero(key, key_len);
  rt_free(key);
  return rv == 0 ? 0 : ACCEL_EINVAL;
}

/* The name the daemon's certificate must carry: ACCEL_TLS_SERVER_NAME, else the URL's host. */
static int server_name(nng_tls_config *cfg, const char *url) {
  const char *name = env("ACCEL_TLS_SERVER_NAME");
  nng_url *u = NULL;
  if (name == NULL && nng_url_parse(&u, url) == 0)
    name = u->u_hostname;
  int rv = name != NULL && *name != '\0' ? nng_tls_config_server_name(cfg, name) : NNG_EINVAL;
  if (rv != 0) {
    rt_error_detail(0, "%s: no server name to verify (ACCEL_TLS_SERVER_NAME)", url);
    log_detail(ACCEL_LOG_ERROR);
  }
  if (u)
    nng_url_free(u);
  return rv == 0 ? 0 : ACCEL_EINVAL;
}

static int trust(nng_tls_config *cfg, const char *url) {
  const char *ca = env("ACCEL_TLS_CA");
  if (ca == NULL) {
    rt_error_detail(0, "%s: set ACCEL_TLS_CA to the CA file that signed the daemon's certificate",
                    url);
    log_detail(ACCEL_LOG_ERROR);
    return ACCEL_EPERM;
  }
  int rv = nng_tls_config_ca_file(cfg, ca);
  if (rv != 0) {
    const char *why = access(ca, R_OK) != 0 ? strerror(errno) : nng_strerror(rv);
    rt_error_detail(0, "ACCEL_TLS_CA=%s: %s", ca, why);
    log_detail(ACCEL_LOG_ERROR);
    return ACCEL_EINVAL;
  }
  rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED);
  return rv == 0 ? 0 : ACCEL_EINVAL;
}

static int client_tls_config(const char *url, nng_tls_config **out) {
  if (nng_tls_config_alloc(out, NNG_TLS_MODE_CLIENT) != 0)
    return ACCEL_ENOTSUP; /* an nng built without TLS */
  int rc = trust(*out, url);
  if (rc == 0)
    rc = server_name(*out, url);
  if (rc == 0)
    rc = client_cert(*out);
  if (rc != 0)
    nng_tls_config_free(*out);
  return rc;
}

/* How long a TLS dial may take (see start_guarded). */
enum { DIAL_TIMEOUT_MS = 10000 };

/* Nothing listening is ECLOSED, as for any dial. A peer that took the connection and then
 * failed the handshake refused it: EPERM. mbed TLS reports a certificate it does not trust
 * (ours or the daemon's) as an error, but a daemon that refuses ours may just hang up (nng:
 * ECONNSHUT), as does a listener that does not speak TLS. */
static int dial_error(const char *url, int rv) {
  bool refused = rv == NNG_EPEERAUTH || rv == NNG_ECRYPTO || rv == NNG_ECONNSHUT ||
                 rv == NNG_ECONNRESET;
  if (rv == NNG_ETIMEDOUT)
    rt_error_detail(0, "%s: no TLS handshake within %d ms", url, DIAL_TIMEOUT_MS);
  else if (refused)
    rt_error_detail(0,
                    "%s: TLS handshake failed (%s): the daemon's certificate is not trusted "
                    "(ACCEL_TLS_CA, ACCEL_TLS_SERVER_NAME), or the daemon refused ours "
                    "(ACCEL_TLS_CERT), or it does not speak TLS there",
                    url, nng_strerror(rv));
  else
    rt_error_detail(0, "no acceld at %s (dial: %s)", url, nng_strerror(rv));
  log_detail(rv == NNG_ETIMEDOUT || refused ? ACCEL_LOG_WARN : ACCEL_LOG_DEBUG);
  if (refused)
    return ACCEL_EPERM;
  return rv == NNG_EADDRINVAL || rv == NNG_EINVAL ? ACCEL_EINVAL : ACCEL_ECLOSED;
}

/* nng 1.5.2 puts no deadline on the TLS handshake: a peer that takes the connection and never
 * answers (a stuck process, a black-holing middlebox) would block nng_dialer_start forever.
 * A guard thread closes the dialer after DIAL_TIMEOUT_MS, which ends the dial (ECLOSED): the
 * same deadline nng gives tcp://'s own negotiation. */
typedef struct dial_guard {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done, fired;
  nng_dialer d;
} dial_guard;

static void *guard_main(void *arg) {
  dial_guard *g = arg;
  struct timespec until = rt_deadline_after(DIAL_TIMEOUT_MS);
  pthread_mutex_lock(&g->mu);
  int rc = 0;
  while (!g->done && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&g->cv, &g->mu, &until);
  g->fired = !g->done;
  pthread_mutex_unlock(&g->mu);
  if (g->fired)
    nng_dialer_close(g->d);
  return NULL;
}

/* nng_dialer_start(d, 0) within DIAL_TIMEOUT_MS; *timed_out says whether the guard ended it. */
static int start_guarded(nng_dialer d, bool *timed_out) {
  dial_guard g = {.d = d};
  pthread_t thread;
  if (rt_cond_init_monotonic(&g.cv) != 0)
    return NNG_ENOMEM;
  pthread_mutex_init(&g.mu, NULL);
  bool guarded = pthread_create(&thread, NULL, guard_main, &g) == 0;
  int rv = nng_dialer_start(d, 0); /* synchronous: returns after the handshake */
  if (guarded) {
    pthread_mutex_lock(&g.mu);
    g.done = true;
    pthread_cond_signal(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(thread, NULL);
  }
  pthread_cond_destroy(&g.cv);
  pthread_mutex_destroy(&g.mu);
  *timed_out = g.fired; /* then the dialer is closed, even if the dial had just succeeded */
  return g.fired ? NNG_ETIMEDOUT : rv;
}

static int dial_tls(nng_socket sock, const char *url) {
  nng_dialer d;
  nng_tls_config *cfg;
  bool timed_out = false;
  int rv = nng_dialer_create(&d, sock, url);
  if (rv != 0)
    return dial_error(url, rv);
  int rc = client_tls_config(url, &cfg);
  if (rc == 0) {
    rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg); /* takes a hold */
    nng_tls_config_free(cfg);
    if (rv == 0)
      rv = start_guarded(d, &timed_out);
    rc = rv == 0 ? 0 : dial_error(url, rv);
  }
  if (rc != 0 && !timed_out)
    nng_dialer_close(d);
  return rc;
}

int client_nng_dial(nng_socket sock, const char *url) {
  if (is_tls(url))
    return dial_tls(sock, url);
  int rv = nng_dial(sock, url, NULL, 0);
  if (rv == 0)
    return 0;
  return rt_error_detail(ACCEL_ECLOSED, "no acceld at %s (nng_dial: %s)", url, nng_strerror(rv));
}

int client_local_connect(const char *url) {
  int fd = proto_local_connect(proto_local_path(url));
  if (fd >= 0)
    return fd;
  const char *why = strerror(errno);
  switch (fd) {
  case ACCEL_ECLOSED: /* ENOENT: no socket file; ECONNREFUSED: nobody behind it */
    return rt_error_detail(fd, "no acceld at %s (connect: %s)", url, why);
  case ACCEL_EPERM:
    return rt_error_detail(fd, "not allowed to connect to %s (connect: %s)", url, why);
  case ACCEL_EINVAL:
    return rt_error_detail(fd, "%s: the socket path is too long (%s)", url, why);
  default:
    return rt_error_detail(fd, "cannot connect to %s (socket: %s)", url, why);
  }
}

int client_tcp_connect(const char *url, int timeout_ms) {
  const char *why = "";
  int fd = proto_tcp_connect(url, timeout_ms < 0 ? DIAL_TIMEOUT_MS : timeout_ms, &why);
  if (fd >= 0)
    return fd;
  if (fd == ACCEL_EINVAL)
    return rt_error_detail(fd, "%s: %s", url, why);
  return rt_error_detail(fd, "no acceld at %s (connect: %s)", url, why);
}
