/* nng listeners' security (server.h, srv_nng_listener_setup): which transports acceld serves,
 * and TLS for tls+tcp://. Runs while the server starts, before each listener starts; every
 * refusal is logged with the URL and what to change, and stops the daemon from starting.
 *
 * - ipc:// (and inproc://): local; who may connect is decided elsewhere (server_local.c).
 * - tls+tcp:// (tls+tcp4://, tls+tcp6://): needs tls_cert and tls_key; with tls_verify_clients
 *   every client must present a certificate signed by tls_ca.
 * - tcp:// (tcp4://, tcp6://): no encryption and no authentication: refused unless
 *   allow_plain_tcp.
 * - anything else nng knows (ws://, wss://, zt://): refused, so that no transport is served
 *   without a decision about who may use it. */
#include <errno.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/runtime.h"
#include "proto/tcp.h"
#include "runtime/alloc.h"
#include "server/server.h"

typedef enum { URL_LOCAL, URL_TLS, URL_PLAIN, URL_OTHER } url_kind;

static bool has_scheme(const char *url, const char *scheme) {
  size_t n = strlen(scheme);
  return strncmp(url, scheme, n) == 0 && strncmp(url + n, "://", 3) == 0;
}

static url_kind classify(const char *url) {
  if (has_scheme(url, "ipc") || has_scheme(url, "inproc"))
    return URL_LOCAL;
  if (has_scheme(url, "tls+tcp") || has_scheme(url, "tls+tcp4") || has_scheme(url, "tls+tcp6"))
    return URL_TLS;
  if (proto_tcp_url(url)) /* tcp://, tcp4://, tcp6:// */
    return URL_PLAIN;
  return URL_OTHER;
}

/* A PEM file as a NUL-terminated string (what nng_tls_config_own_cert takes), or NULL after
 * logging why. PEM files are a few KiB: a large one is a mistake, not a certificate. */
static char *read_pem(const char *url, const char *key, const char *path, size_t *len) {
  enum { MAX_PEM = 1 << 20 };
  FILE *f = fopen(path, "r");
  char *buf = f ? rt_malloc(MAX_PEM + 1) : NULL;
  size_t n = buf ? fread(buf, 1, MAX_PEM + 1, f) : 0;
  int err = f == NULL ? errno : buf == NULL ? ENOMEM : ferror(f) ? EIO : n > MAX_PEM ? EFBIG : 0;
  if (f)
    fclose(f);
  if (err != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "cannot listen on %s: %s %s: %s", url, key, path,
              strerror(err));
    rt_free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

static void free_secret(char *buf, size_t len) {
  if (buf)
    explicit_bzero(buf, len);
  rt_free(buf);
}

/* The daemon's certificate (chain) and private key. They may be one file named twice. */
static int own_cert(nng_tls_config *cfg, const char *url, const srv_security *sec) {
  if (sec->tls_cert == NULL || sec->tls_key == NULL) {
    accel_log(ACCEL_LOG_ERROR, "server",
              "cannot listen on %s: TLS needs tls_cert and tls_key ([security] in the config)",
              url);
    return ACCEL_EINVAL;
  }
  size_t cert_len = 0, key_len = 0;
  char *cert = read_pem(url, "tls_cert", sec->tls_cert, &cert_len);
  char *key = cert ? read_pem(url, "tls_key", sec->tls_key, &key_len) : NULL;
  int rv = key ? nng_tls_config_own_cert(cfg, cert, key, NULL) : NNG_EINVAL;
  if (key && rv != 0)
    accel_log(ACCEL_LOG_ERROR, "server",
              "cannot listen on %s: tls_cert %s and tls_key %s are not a usable PEM "
              "certificate and unencrypted private key: %s",
              url, sec->tls_cert, sec->tls_key, nng_strerror(rv));
  rt_free(cert);
  free_secret(key, key_len);
  return rv == 0 ? 0 : ACCEL_EINVAL;
}

/* The CAs that sign client certificates, and whether a client must present one. */
static int client_auth(nng_tls_config *cfg, const char *url, const srv_security *sec) {
  if (sec->tls_verify_clients && sec->tls_ca == NULL) {
    accel_log(ACCEL_LOG_ERROR, "server",
              "cannot listen on %s: tls_verify_clients needs tls_ca (the CA that signs client "
              "certificates)",
              url);
    return ACCEL_EINVAL;
  }
  int rv = sec->tls_ca ? nng_tls_config_ca_file(cfg, sec->tls_ca) : 0;
  if (rv != 0) {
    const char *why = access(sec->tls_ca, R_OK) != 0 ? strerror(errno) : nng_strerror(rv);
    accel_log(ACCEL_LOG_ERROR, "server", "cannot listen on %s: tls_ca %s: %s", url, sec->tls_ca,
              why);
    return ACCEL_EINVAL;
  }
  rv = nng_tls_config_auth_mode(cfg, sec->tls_verify_clients ? NNG_TLS_AUTH_MODE_REQUIRED
                                                             : NNG_TLS_AUTH_MODE_NONE);
  return rv == 0 ? 0 : ACCEL_EINVAL;
}

static int setup_tls(nng_listener l, const char *url, const srv_security *sec) {
  nng_tls_config *cfg;
  if (strcmp(nng_tls_engine_name(), "none") == 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "cannot listen on %s: this nng has no TLS engine", url);
    return ACCEL_ENOTSUP;
  }
  if (nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER) != 0)
    return ACCEL_ENOMEM;
  int rc = own_cert(cfg, url, sec);
  if (rc == 0)
    rc = client_auth(cfg, url, sec);
  if (rc == 0 && nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg) != 0) /* takes a hold */
    rc = ACCEL_EINVAL;
  nng_tls_config_free(cfg);
  if (rc == 0)
    accel_log(ACCEL_LOG_INFO, "server", "%s: TLS (%s), client certificates %s", url,
              nng_tls_engine_description(), sec->tls_verify_clients ? "required" : "not asked for");
  return rc;
}

int srv_listen_allowed(const char *url, const srv_security *sec) {
  switch (classify(url)) {
  case URL_LOCAL:
  case URL_TLS:
    return 0;
  case URL_PLAIN:
    if (sec->allow_plain_tcp) {
      accel_log(ACCEL_LOG_WARN, "server",
                "%s: plain TCP, no encryption and no authentication (allow_plain_tcp)", url);
      return 0;
    }
    accel_log(ACCEL_LOG_ERROR, "server",
              "cannot listen on %s: plain TCP has no encryption and no authentication; use "
              "tls+tcp://, or set allow_plain_tcp (or --allow-plain-tcp) on a trusted network",
              url);
    return ACCEL_EPERM;
  case URL_OTHER:
  default:
    break;
  }
  accel_log(ACCEL_LOG_ERROR, "server",
            "cannot listen on %s: acceld serves ipc://, tls+tcp:// and tcp:// only", url);
  return ACCEL_ENOTSUP;
}

int srv_nng_listener_setup(nng_listener l, const char *url, const srv_security *sec) {
  int rc = srv_listen_allowed(url, sec);
  return rc == 0 && classify(url) == URL_TLS ? setup_tls(l, url, sec) : rc;
}
