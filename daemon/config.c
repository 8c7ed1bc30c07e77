/* acceld's configuration file (INI, parsed by inih) and flags. Sections and keys are listed in
 * packaging/acceld.conf. Unknown keys are errors: a misspelt limit should not pass silently. */
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "actors/build.h"
#include "actors/world_init.h"
#include "backends/backend.h"
#include "backends/worker/worker.h"
#include "daemon/config.h"
#include "runtime/alloc.h"
#include "server/io_pool.h"
#include "server/server.h"

void acd_config_defaults(acd_config *c) {
  memset(c, 0, sizeof *c);
  c->log_level = ACCEL_LOG_INFO;
  c->socket_mode = 0660;
  c->cpu_devices = 1;
  snprintf(c->workers, sizeof c->workers, "%s", ACD_DEFAULT_WORKERS);
  c->completion = ACCEL_COMPLETION_CALLBACK;
  c->max_restarts = 3;
  c->restart_window_ms = 10000;
  c->telemetry_interval_ms = 1000;
  c->drain_timeout_ms = 10000;
  c->exit_timeout_ms = 5000;
  c->first_frame_timeout_ms = 10000;
  c->max_connections = 1024;
  c->io_threads = SRV_IO_THREADS_AUTO;
  c->shards = SRV_SHARDS_AUTO;
  c->metrics_max_connections = SRV_HTTP_DEFAULT_MAX_CONNECTIONS;
  c->metrics_header_timeout_ms = SRV_HTTP_DEFAULT_HEADER_TIMEOUT_MS;
  c->metrics_write_timeout_ms = SRV_HTTP_DEFAULT_WRITE_TIMEOUT_MS;
  c->metrics_max_header_bytes = SRV_HTTP_DEFAULT_MAX_HEADER_BYTES;
  c->build_timeout_ms = DEV_BUILD_TIMEOUT_MS;
  c->build_memory_mb = DEV_BUILD_MEMORY_MB;
  c->max_queued_builds = DEV_BUILD_MAX_QUEUED;
  c->frame_idle_timeout_ms = SRV_DEFAULT_FRAME_IDLE_TIMEOUT_MS;
  c->min_frame_rate = SRV_DEFAULT_MIN_FRAME_RATE;
  c->limits = (proto_limits){
      .max_message = SRV_DEFAULT_MAX_MESSAGE,
      .max_in_flight = SRV_DEFAULT_MAX_IN_FLIGHT,
      .max_buffers = SRV_DEFAULT_MAX_BUFFERS,
      .max_memory = SRV_DEFAULT_MAX_MEMORY,
  };
}

void acd_config_free(acd_config *c) {
  for (uint32_t i = 0; i < c->nlisten; i++)
    rt_free(c->listen[i]);
  rt_free(c->socket_group);
  rt_free(c->allow_uids);
  rt_free(c->allow_gids);
  rt_free(c->tls_cert);
  rt_free(c->tls_key);
  rt_free(c->tls_ca);
  rt_free(c->metrics_listen);
  rt_free(c->build_helper);
  rt_free(c->device_helper);
  memset(c, 0, sizeof *c);
}

/* ---- values ---- */

/* A decimal number (or 0-prefixed octal when base is 0) with an optional binary suffix K, M, G,
 * T; within [lo, hi]. */
static bool parse_u64(const char *v, int base, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  if (*v == '-' || *v == '\0')
    return false;
  unsigned long long n = strtoull(v, &end, base);
  int shift = 0;
  switch (*end) {
  case 'K':
  case 'k':
    shift = 10;
    end++;
    break;
  case 'M':
  case 'm':
    shift = 20;
    end++;
    break;
  case 'G':
  case 'g':
    shift = 30;
    end++;
    break;
  case 'T':
  case 't':
    shift = 40;
    end++;
    break;
  default:
    break;
  }
  if (errno != 0 || *end != '\0' || n > (hi >> shift))
    return false;
  n <<= shift;
  if (n < lo)
    return false;
  *out = n;
  return true;
}

static bool parse_u32(const char *v, uint64_t lo, uint64_t hi, uint32_t *out) {
  uint64_t n;
  if (!parse_u64(v, 10, lo, hi, &n))
    return false;
  *out = (uint32_t)n;
  return true;
}

static bool parse_bool(const char *v, bool *out) {
  if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
      !strcasecmp(v, "on"))
    *out = true;
  else if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
           !strcasecmp(v, "off"))
    *out = false;
  else
    return false;
  return true;
}

static bool parse_completion(const char *v, accel_completion *out) {
  static const char *const names[] = {"default", "callback", "sync", "poll"};
  for (int i = 0; i < 4; i++)
    if (strcasecmp(v, names[i]) == 0) {
      *out = (accel_completion)i;
      return true;
    }
  return false;
}

/* [devices] cuda_context: own (a restart replaces it without touching anyone else's) or
 * primary (the GPU's primary context, where NCCL's collectives work). */
static bool parse_cuda_context(const char *v, bool *primary) {
  if (strcmp(v, "own") != 0 && strcmp(v, "primary") != 0)
    return false;
  *primary = strcmp(v, "primary") == 0;
  return true;
}

/* [devices] pinned_max: a size (K, M, G, T); 0 turns the pin cache off. */
static bool parse_pinned_max(const char *v, uint64_t *out) {
  if (!parse_u64(v, 10, 0, UINT64_MAX - 1, out))
    return false;
  if (*out == 0)
    *out = BE_PINNED_OFF;
  return true;
}

/* [security] user_kernels: where clients may load their own kernels. */
static bool parse_user_kernels(const char *v, uint32_t *out) {
  static const struct {
    const char *name;
    srv_user_kernels value;
  } names[] = {{"local", SRV_USER_KERNELS_LOCAL},
               {"all", SRV_USER_KERNELS_ALL},
               {"none", SRV_USER_KERNELS_NONE}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcasecmp(v, names[i].name) == 0) {
      *out = names[i].value;
      return true;
    }
  return false;
}

static bool add_listen(acd_config *c, const char *url) {
  if (c->nlisten == ACD_MAX_LISTEN || strstr(url, "://") == NULL)
    return false;
  char *dup = rt_strdup(url);
  if (dup == NULL)
    return false;
  c->listen[c->nlisten++] = dup;
  return true;
}

static bool set_string(char **field, const char *v) {
  char *dup = rt_strdup(v);
  if (dup == NULL)
    return false;
  rt_free(*field);
  *field = dup;
  return true;
}

/* A path to a file; an empty value unsets it. */
static bool set_path(char **field, const char *v) {
  if (*v != '\0')
    return set_string(field, v);
  rt_free(*field);
  *field = NULL;
  return true;
}

/* ---- reading the file ---- */

typedef struct load_ctx {
  acd_config *c;
  char *err; /* the first error's message (inih reports the first error's line) */
  size_t err_len;
} load_ctx;

static void __attribute__((format(printf, 2, 3))) fail(load_ctx *x, const char *fmt, ...) {
  if (x->err[0] != '\0')
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->err, x->err_len, fmt, ap);
  va_end(ap);
}

/* ---- user and group names ---- */

/* The reentrant lookups: a reload reads the file on a worker thread. 0, ENOENT (no such
 * name), or another errno (ERANGE: buf too small). */
static int user_id(const char *name, char *buf, size_t len, uint32_t *id) {
  struct passwd pw, *res = NULL;
  int rc = getpwnam_r(name, &pw, buf, len, &res);
  if (rc == 0 && res != NULL)
    *id = (uint32_t)pw.pw_uid;
  return rc == 0 && res == NULL ? ENOENT : rc;
}

static int group_id(const char *name, char *buf, size_t len, uint32_t *id) {
  struct group gr, *res = NULL;
  int rc = getgrnam_r(name, &gr, buf, len, &res);
  if (rc == 0 && res != NULL)
    *id = (uint32_t)gr.gr_gid;
  return rc == 0 && res == NULL ? ENOENT : rc;
}

typedef int (*id_lookup)(const char *name, char *buf, size_t len, uint32_t *id);

/* Retries with a larger buffer while the entry does not fit (a group with many members). */
static int lookup_id(id_lookup fn, const char *name, uint32_t *id) {
  for (size_t len = 4096; len <= (1u << 22); len *= 2) {
    char *buf = rt_malloc(len);
    if (buf == NULL)
      return ENOMEM;
    int rc = fn(name, buf, len, id);
    rt_free(buf);
    if (rc != ERANGE)
      return rc;
  }
  return ERANGE;
}

/* One list item: all digits is a numeric id (it need not exist), anything else a name. */
static bool resolve_id(load_ctx *x, const char *key, id_lookup fn, const char *item, uint32_t *id) {
  const char *kind = fn == user_id ? "user" : "group";
  uint64_t n;
  if (strspn(item, "0123456789") == strlen(item)) {
    if (parse_u64(item, 10, 0, UINT32_MAX - 1, &n)) {
      *id = (uint32_t)n;
      return true;
    }
    fail(x, "[security] %s: %s id %s is out of range", key, kind, item);
    return false;
  }
  int rc = lookup_id(fn, item, id);
  if (rc == ENOENT || rc == ESRCH)
    fail(x, "[security] %s: no such %s '%s'", key, kind, item);
  else if (rc != 0)
    fail(x, "[security] %s: cannot look up %s '%s': %s", key, kind, item, strerror(rc));
  return rc == 0;
}

static bool push_id(uint32_t **ids, uint32_t *n, uint32_t id) {
  uint32_t *grown = rt_realloc(*ids, ((size_t)*n + 1) * sizeof *grown);
  if (grown == NULL)
    return false;
  grown[(*n)++] = id;
  *ids = grown;
  return true;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
    s[--n] = '\0';
  return s;
}

/* allow_users, allow_groups: names or ids separated by commas. The key may repeat: each adds
 * to the list. */
static bool add_ids(load_ctx *x, const char *key, const char *v, id_lookup fn, uint32_t **ids,
                    uint32_t *n) {
  char *copy = rt_strdup(v);
  bool ok = copy != NULL;
  char *save = NULL;
  for (char *item = ok ? strtok_r(copy, ",", &save) : NULL; ok && item != NULL;
       item = strtok_r(NULL, ",", &save)) {
    uint32_t id;
    item = trim(item);
    if (*item != '\0')
      ok = resolve_id(x, key, fn, item, &id) && push_id(ids, n, id);
  }
  rt_free(copy);
  return ok;
}

/* ---- sections ---- */

static bool daemon_key(acd_config *c, const char *k, const char *v) {
  uint64_t n;
  if (!strcmp(k, "listen"))
    return add_listen(c, v);
  if (!strcmp(k, "log_level"))
    return accel_log_parse_level(v, &c->log_level) == 0;
  if (!strcmp(k, "socket_mode") && parse_u64(v, 8, 0, 0777, &n)) {
    c->socket_mode = (int)n;
    return true;
  }
  if (!strcmp(k, "socket_group"))
    return set_string(&c->socket_group, v);
  if (!strcmp(k, "fault_injection"))
    return parse_bool(v, &c->fault_injection);
  if (!strcmp(k, "drain_timeout_ms"))
    return parse_u32(v, 0, 3600000, &c->drain_timeout_ms);
  if (!strcmp(k, "exit_timeout_ms"))
    return parse_u32(v, 0, 3600000, &c->exit_timeout_ms);
  if (!strcmp(k, "first_frame_timeout_ms"))
    return parse_u32(v, 1, 3600000, &c->first_frame_timeout_ms);
  if (!strcmp(k, "max_connections"))
    return parse_u32(v, 1, 1u << 20, &c->max_connections);
  if (!strcmp(k, "shards")) {
    c->shards = SRV_SHARDS_AUTO;
    return !strcmp(v, "auto") || parse_u32(v, 1, SRV_SHARDS_MAX, &c->shards);
  }
  if (!strcmp(k, "io_threads")) {
    c->io_threads = SRV_IO_THREADS_AUTO;
    return !strcmp(v, "auto") || parse_u32(v, 0, SRV_IOPOOL_THREADS_MAX, &c->io_threads);
  }
  return false;
}

/* The backends to open, in order (dev_world_opts.backends). */
static bool set_backends(acd_config *c, const char *v) {
  if (strlen(v) >= sizeof c->backends || dev_backends_check(v, NULL, 0) != 0)
    return false;
  strcpy(c->backends, v);
  return true;
}

/* The backends whose devices run in worker processes ("" none; cpu's stay in acceld). */
static bool set_workers(acd_config *c, const char *v) {
  if (strlen(v) >= sizeof c->workers || dev_backends_check(v, NULL, 0) != 0)
    return false;
  strcpy(c->workers, v);
  return true;
}

static bool devices_key(acd_config *c, const char *k, const char *v) {
  if (!strcmp(k, "workers"))
    return set_workers(c, v);
  if (!strcmp(k, "worker_helper"))
    return set_path(&c->device_helper, v);
  if (!strcmp(k, "cpu_devices"))
    return parse_u32(v, 0, 8, &c->cpu_devices);
  if (!strcmp(k, "backends"))
    return set_backends(c, v);
  if (!strcmp(k, "completion"))
    return parse_completion(v, &c->completion);
  if (!strcmp(k, "max_restarts"))
    return parse_u32(v, 1, 1000, &c->max_restarts);
  if (!strcmp(k, "tf32"))
    return parse_bool(v, &c->tf32);
  if (!strcmp(k, "cuda_context"))
    return parse_cuda_context(v, &c->cuda_primary);
  if (!strcmp(k, "pinned_max"))
    return parse_pinned_max(v, &c->pinned_max);
  if (!strcmp(k, "exit_on_quarantine"))
    return parse_bool(v, &c->exit_on_quarantine);
  if (!strcmp(k, "restart_window_ms"))
    return parse_u32(v, 1, 86400000, &c->restart_window_ms);
  if (!strcmp(k, "telemetry_interval_ms")) /* 0 (off) or 100 ms to an hour */
    return parse_u32(v, 0, 3600000, &c->telemetry_interval_ms) &&
           (c->telemetry_interval_ms == 0 || c->telemetry_interval_ms >= 100);
  return false;
}

/* [limits] max_partial_bytes: 0 (automatic) or at least 1 MiB. */
static bool parse_partial_bytes(const char *v, uint64_t *out) {
  return parse_u64(v, 10, 0, UINT64_MAX, out) && (*out == 0 || *out >= (1u << 20));
}

/* The local transport's limits on frames being received (srv_args says what each means). */
static bool frame_key(acd_config *c, const char *k, const char *v) {
  if (!strcmp(k, "max_partial_bytes"))
    return parse_partial_bytes(v, &c->max_partial_bytes);
  if (!strcmp(k, "frame_idle_timeout_ms"))
    return parse_u32(v, 1, 3600000, &c->frame_idle_timeout_ms);
  if (!strcmp(k, "min_frame_rate")) /* bytes per second; 0: no minimum */
    return parse_u32(v, 0, UINT32_MAX - 1, &c->min_frame_rate);
  return false;
}

static bool limits_key(acd_config *c, const char *k, const char *v) {
  proto_limits *l = &c->limits;
  if (frame_key(c, k, v))
    return true;
  if (!strcmp(k, "max_message"))
    return parse_u32(v, 4096, UINT32_MAX, &l->max_message);
  if (!strcmp(k, "max_in_flight"))
    return parse_u32(v, 1, 1u << 20, &l->max_in_flight);
  if (!strcmp(k, "max_buffers"))
    return parse_u32(v, 2, 1u << 24, &l->max_buffers);
  if (!strcmp(k, "max_memory"))
    return parse_u64(v, 10, 0, UINT64_MAX, &l->max_memory);
  if (!strcmp(k, "max_shared_bytes"))
    return parse_u64(v, 10, 0, UINT64_MAX, &c->max_shared_bytes);
  if (!strcmp(k, "max_shared_bytes_total"))
    return parse_u64(v, 10, 0, UINT64_MAX, &c->max_shared_bytes_total);
  return false;
}

static bool security_key(load_ctx *x, const char *k, const char *v) {
  acd_config *c = x->c;
  if (!strcmp(k, "allow_users"))
    return add_ids(x, k, v, user_id, &c->allow_uids, &c->nallow_uids);
  if (!strcmp(k, "allow_groups"))
    return add_ids(x, k, v, group_id, &c->allow_gids, &c->nallow_gids);
  if (!strcmp(k, "allow_any_local"))
    return parse_bool(v, &c->allow_any_local);
  if (!strcmp(k, "allow_plain_tcp"))
    return parse_bool(v, &c->allow_plain_tcp);
  if (!strcmp(k, "tls_cert"))
    return set_path(&c->tls_cert, v);
  if (!strcmp(k, "tls_key"))
    return set_path(&c->tls_key, v);
  if (!strcmp(k, "tls_ca"))
    return set_path(&c->tls_ca, v);
  if (!strcmp(k, "tls_verify_clients"))
    return parse_bool(v, &c->tls_verify_clients);
  if (!strcmp(k, "user_kernels"))
    return parse_user_kernels(v, &c->user_kernels);
  return false;
}

/* [metrics] listen = http://HOST:PORT, http://:PORT or PORT (no host: 127.0.0.1); "" or
 * "off": not served. */
static bool set_metrics_listen(acd_config *c, const char *v) {
  srv_http_addr a;
  if (!strcmp(v, "") || !strcmp(v, "off")) {
    rt_free(c->metrics_listen);
    c->metrics_listen = NULL;
    return true;
  }
  return srv_http_addr_parse(v, &a) == 0 && set_path(&c->metrics_listen, v);
}

static bool metrics_key(acd_config *c, const char *k, const char *v) {
  if (!strcmp(k, "listen"))
    return set_metrics_listen(c, v);
  if (!strcmp(k, "max_connections"))
    return parse_u32(v, 1, 4096, &c->metrics_max_connections);
  if (!strcmp(k, "header_timeout_ms"))
    return parse_u32(v, 1, 600000, &c->metrics_header_timeout_ms);
  if (!strcmp(k, "write_timeout_ms"))
    return parse_u32(v, 1, 600000, &c->metrics_write_timeout_ms);
  if (!strcmp(k, "max_header_bytes"))
    return parse_u32(v, 64, 1u << 20, &c->metrics_max_header_bytes);
  return false;
}

/* [builds]: where and how user modules are built (actors/build.h). */
static bool builds_key(acd_config *c, const char *k, const char *v) {
  if (!strcmp(k, "timeout_ms"))
    return parse_u32(v, 100, 3600000, &c->build_timeout_ms);
  if (!strcmp(k, "memory_mb"))
    return parse_u32(v, 64, 1u << 24, &c->build_memory_mb);
  if (!strcmp(k, "max_builds"))
    return parse_u32(v, 0, 1024, &c->max_builds);
  if (!strcmp(k, "max_queued"))
    return parse_u32(v, 0, 1u << 16, &c->max_queued_builds);
  if (!strcmp(k, "helper"))
    return set_path(&c->build_helper, v);
  return false;
}

/* meson passes the installed path to acceld's sources; others (tests) that compile this file
 * get the usual one. */
#ifndef ACD_BUILD_HELPER
#define ACD_BUILD_HELPER "/usr/libexec/accel/accel-build"
#endif

#ifndef ACD_DEVICE_HELPER
#define ACD_DEVICE_HELPER "/usr/libexec/accel/accel-device"
#endif

/* The helper `name` beside acceld's own file (the build tree), else the installed one. */
static const char *helper_path(char *path, size_t size, const char *name, const char *installed) {
  ssize_t n = readlink("/proc/self/exe", path, size - 1);
  char *slash = n > 0 ? memrchr(path, '/', (size_t)n) : NULL;
  size_t len = strlen(name);
  if (slash != NULL && (size_t)(slash - path) + len + 2 <= size) {
    slash[0] = '/';
    memcpy(slash + 1, name, len + 1);
    if (access(path, X_OK) == 0)
      return path;
  }
  return installed;
}

static const char *default_helper(void) {
  static char path[PATH_MAX];
  return helper_path(path, sizeof path, "accel-build", ACD_BUILD_HELPER);
}

void acd_config_workers(const acd_config *c, bw_options *out) {
  static char path[PATH_MAX];
  *out = (bw_options){.helper = c->device_helper ? c->device_helper
                                                 : helper_path(path, sizeof path, "accel-device",
                                                               ACD_DEVICE_HELPER)};
}

void acd_config_builds(const acd_config *c, struct dev_build_opts *out) {
  *out = (dev_build_opts){.sandbox = true,
                          .helper = c->build_helper ? c->build_helper : default_helper(),
                          .timeout_ms = c->build_timeout_ms,
                          .memory_mb = c->build_memory_mb,
                          .max_builds = c->max_builds,
                          .max_queued = c->max_queued_builds};
}

static int on_key(void *user, const char *section, const char *key, const char *value) {
  load_ctx *x = user;
  bool ok = !strcmp(section, "daemon")     ? daemon_key(x->c, key, value)
            : !strcmp(section, "devices")  ? devices_key(x->c, key, value)
            : !strcmp(section, "limits")   ? limits_key(x->c, key, value)
            : !strcmp(section, "security") ? security_key(x, key, value)
            : !strcmp(section, "metrics")  ? metrics_key(x->c, key, value)
            : !strcmp(section, "builds")   ? builds_key(x->c, key, value)
                                           : false;
  if (!ok) /* a specific message, if the key's parser wrote one, stays */
    fail(x, "[%s] %s = %s: unknown key or bad value", section, key, value);
  return ok;
}

int acd_config_load(acd_config *c, const acd_flags *f, char *err, size_t err_len) {
  const char *path = f->config_path ? f->config_path : ACD_DEFAULT_CONFIG;
  if (f->config_path == NULL && access(path, F_OK) != 0)
    return 0; /* no file: the defaults */
  char what[200] = "";
  load_ctx x = {c, what, sizeof what};
  int rc = ini_parse(path, on_key, &x);
  if (rc == 0)
    return 0;
  if (rc == -1)
    snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
  else if (rc == -2)
    snprintf(err, err_len, "%s: out of memory", path);
  else
    snprintf(err, err_len, "%s:%d: %s", path, rc, what[0] ? what : "syntax error");
  return ACCEL_EINVAL;
}

int acd_config_apply_flags(acd_config *c, const acd_flags *f, char *err, size_t err_len) {
  if (f->nlisten > 0) { /* the command line's URLs replace the file's */
    for (uint32_t i = 0; i < c->nlisten; i++)
      rt_free(c->listen[i]);
    c->nlisten = 0;
    for (uint32_t i = 0; i < f->nlisten; i++)
      if (!add_listen(c, f->listen[i])) {
        snprintf(err, err_len, "--listen %s: not a URL", f->listen[i]);
        return ACCEL_EINVAL;
      }
  }
  if (f->log_level && accel_log_parse_level(f->log_level, &c->log_level) != 0) {
    snprintf(err, err_len, "--log-level %s: error, warn, info, debug or trace", f->log_level);
    return ACCEL_EINVAL;
  }
  if (f->fault_injection)
    c->fault_injection = true;
  if (f->cpu_devices >= 0)
    c->cpu_devices = (uint32_t)f->cpu_devices;
  if (f->backends && !set_backends(c, f->backends)) {
    char why[96] = "too long";
    dev_backends_check(f->backends, why, sizeof why);
    snprintf(err, err_len, "--backends %s: %s", f->backends, why);
    return ACCEL_EINVAL;
  }
  if (f->workers && !set_workers(c, f->workers)) {
    char why[96] = "too long";
    dev_backends_check(f->workers, why, sizeof why);
    snprintf(err, err_len, "--workers %s: %s", f->workers, why);
    return ACCEL_EINVAL;
  }
  if (f->allow_plain_tcp)
    c->allow_plain_tcp = true;
  if (f->user_kernels && !parse_user_kernels(f->user_kernels, &c->user_kernels)) {
    snprintf(err, err_len, "--user-kernels %s: local, all or none", f->user_kernels);
    return ACCEL_EINVAL;
  }
  if (f->metrics_listen && !set_metrics_listen(c, f->metrics_listen)) {
    snprintf(err, err_len, "--metrics %s: http://HOST:PORT, http://:PORT or PORT, or off",
             f->metrics_listen);
    return ACCEL_EINVAL;
  }
  if (c->nlisten == 0 && !add_listen(c, ACD_DEFAULT_URL)) {
    snprintf(err, err_len, "out of memory");
    return ACCEL_ENOMEM;
  }
  return 0;
}

/* The cores acceld may run on (its affinity: a cpuset or systemd's CPUAffinity= gives fewer
 * than the machine has), else the machine's. */
static long usable_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  return sysconf(_SC_NPROCESSORS_ONLN);
}

int acd_config_read(acd_config *c, const acd_flags *f, char *err, size_t err_len) {
  acd_config_defaults(c);
  int rc = acd_config_load(c, f, err, err_len);
  if (rc == 0)
    rc = acd_config_apply_flags(c, f, err, err_len);
  if (rc != 0)
    acd_config_free(c);
  else if (c->shards == SRV_SHARDS_AUTO)
    c->shards = srv_shards_for_cores(usable_cores());
  return rc;
}

int acd_config_gid(const acd_config *c, int *gid) {
  *gid = -1;
  if (c->socket_group == NULL || c->socket_group[0] == '\0')
    return 0;
  char *end;
  long n = strtol(c->socket_group, &end, 10);
  if (*end == '\0' && n >= 0) {
    *gid = (int)n;
    return 0;
  }
  struct group *g = getgrnam(c->socket_group);
  if (g == NULL)
    return ACCEL_ENOENT;
  *gid = (int)g->gr_gid;
  return 0;
}

void acd_config_security(const acd_config *c, srv_security *out) {
  *out = (srv_security){.allow_uids = c->allow_uids,
                        .nallow_uids = c->nallow_uids,
                        .allow_gids = c->allow_gids,
                        .nallow_gids = c->nallow_gids,
                        .allow_any_local = c->allow_any_local,
                        .allow_plain_tcp = c->allow_plain_tcp,
                        .tls_cert = c->tls_cert,
                        .tls_key = c->tls_key,
                        .tls_ca = c->tls_ca,
                        .tls_verify_clients = c->tls_verify_clients,
                        .user_kernels = (srv_user_kernels)c->user_kernels};
}

static bool same_ids(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb) {
  return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static bool same_string(const char *a, const char *b) {
  return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool acd_config_security_same(const acd_config *a, const acd_config *b) {
  return same_ids(a->allow_uids, a->nallow_uids, b->allow_uids, b->nallow_uids) &&
         same_ids(a->allow_gids, a->nallow_gids, b->allow_gids, b->nallow_gids) &&
         a->allow_any_local == b->allow_any_local && a->allow_plain_tcp == b->allow_plain_tcp &&
         same_string(a->tls_cert, b->tls_cert) && same_string(a->tls_key, b->tls_key) &&
         same_string(a->tls_ca, b->tls_ca) && a->tls_verify_clients == b->tls_verify_clients &&
         a->user_kernels == b->user_kernels;
}
