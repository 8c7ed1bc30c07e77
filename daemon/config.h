/* acceld's configuration: defaults, then the INI file, then the command line (config.c). */
#ifndef ACD_CONFIG_H
#define ACD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "accel/accel.h"
#include "proto/wire.h"
#include "runtime/attr.h"

#define ACD_DEFAULT_URL "ipc:///run/acceld/acceld.sock"
#define ACD_DEFAULT_CONFIG "/etc/acceld/acceld.conf"
#define ACD_MAX_LISTEN 16

#define ACD_DEFAULT_WORKERS "cuda,opencl"

typedef struct acd_config {
  char *listen[ACD_MAX_LISTEN]; /* owned; none: ACD_DEFAULT_URL */
  uint32_t nlisten;
  accel_log_level log_level;
  int socket_mode;    /* permissions of ipc socket files */
  char *socket_group; /* owned; NULL: the daemon's own group */
  bool fault_injection;
  uint32_t cpu_devices;
  char backends[64]; /* [devices] backends: dev_world_opts.backends ("": all) */
  /* [devices] workers: backends whose devices run in worker processes (dev_world_opts.workers;
   * default ACD_DEFAULT_WORKERS, "" none); [devices] worker_helper: the accel-device file. */
  char workers[64];
  char *device_helper;
  accel_completion completion;
  uint32_t max_restarts, restart_window_ms;
  uint32_t telemetry_interval_ms; /* [devices]: GPU telemetry (actors/telemetry.h); 0 off */
  bool tf32;         /* sgemm on TF32 tensor cores by default, where devices have them */
  bool cuda_primary; /* [devices] cuda_context = primary: collectives through NCCL */
  /* [devices] pinned_max: bytes of clients' memory CUDA devices may keep registered for DMA
   * (dev_world_opts.pinned_max: 0 the default, BE_PINNED_OFF when the file says 0). */
  uint64_t pinned_max;
  /* Exit (status 3, after a drain) when a device is quarantined, so that the service manager
   * restarts the daemon: a CUDA device broken by a sticky error only comes back in a new
   * process. */
  bool exit_on_quarantine;
  uint32_t drain_timeout_ms;
  /* After a SIGTERM, acceld is gone within drain_timeout_ms + exit_timeout_ms even if a
   * library hangs in its teardown (daemon/exit_watch.h); 0: no bound. */
  uint32_t exit_timeout_ms;
  /* Local connections: closed when no whole frame arrived within this long of connecting;
   * more than max_connections at once are refused. */
  uint32_t first_frame_timeout_ms, max_connections;
  /* Threads that read and write local connections' sockets (srv_args.io_threads): 0 none,
   * "auto" (SRV_IO_THREADS_AUTO) by the cores. */
  uint32_t io_threads;
  /* Servers, each on a loop of its own with a device world of its own (srv_args.shards):
   * 1 to SRV_SHARDS_MAX; "auto" (SRV_SHARDS_AUTO) by the cores, resolved by
   * acd_config_read (srv_shards_for_cores). */
  uint32_t shards;
  proto_limits limits;
  /* [limits] max_partial_bytes (0: automatic), frame_idle_timeout_ms, min_frame_rate (bytes
   * per second, 0: none): local frames being received (srv_args in server/server.h). */
  uint64_t max_partial_bytes;
  uint32_t frame_idle_timeout_ms, min_frame_rate;
  /* [limits] max_shared_bytes, max_shared_bytes_total: shared memory mapped for clients, per
   * connection and in all (srv_args); 0: the machine's RAM and twice that. */
  uint64_t max_shared_bytes, max_shared_bytes_total;
  /* [security]: who may connect (srv_security in server/server.h says what each means).
   * User and group names are resolved to ids when the file is read. Owned. */
  uint32_t *allow_uids, *allow_gids;
  uint32_t nallow_uids, nallow_gids;
  bool allow_any_local;
  bool allow_plain_tcp;
  char *tls_cert, *tls_key, *tls_ca; /* PEM files; NULL: not set */
  bool tls_verify_clients;
  uint32_t user_kernels; /* srv_user_kernels: local (default), all, none */
  char *metrics_listen;  /* [metrics] listen: http://HOST:PORT; NULL: off. Owned */
  /* [metrics] max_connections, header_timeout_ms, write_timeout_ms, max_header_bytes: the
   * HTTP endpoint's limits (srv_http_limits in server/server.h). */
  uint32_t metrics_max_connections, metrics_header_timeout_ms, metrics_write_timeout_ms;
  uint32_t metrics_max_header_bytes;
  /* [builds]: user-module builds (actors/build.h): the compile's deadline and memory cap in
   * the build helper, builds at once (0: the CPUs, at most 4) and builds waiting; the
   * helper's path (owned; NULL: beside acceld, else the installed one). */
  uint32_t build_timeout_ms, build_memory_mb, max_builds, max_queued_builds;
  char *build_helper;
} acd_config;

/* What the command line said; it overrides the file, at start and on every reload. */
typedef struct acd_flags {
  const char *config_path; /* NULL: ACD_DEFAULT_CONFIG if it exists */
  const char *listen[ACD_MAX_LISTEN];
  uint32_t nlisten;
  const char *log_level;
  bool fault_injection;
  long cpu_devices;     /* < 0: not given */
  const char *backends; /* --backends LIST; NULL: not given */
  const char *workers;  /* --workers LIST; NULL: not given */
  bool foreground;
  bool allow_plain_tcp;       /* --allow-plain-tcp: as [security] allow_plain_tcp = true */
  const char *user_kernels;   /* --user-kernels local|all|none; NULL: not given */
  const char *metrics_listen; /* --metrics URL; NULL: not given */
} acd_flags;

struct srv_security;
struct dev_build_opts;

void acd_config_defaults(acd_config *c);
void acd_config_free(acd_config *c);
/* Reads the INI file over *c; a missing default file is fine, any other problem is an error
 * with a message in err ("file:line: what"). */
RT_MUST_USE int acd_config_load(acd_config *c, const acd_flags *f, char *err, size_t err_len);
/* Applies the flags over *c (after the file). */
RT_MUST_USE int acd_config_apply_flags(acd_config *c, const acd_flags *f, char *err,
                                       size_t err_len);
/* Defaults + file + flags in one go. */
RT_MUST_USE int acd_config_read(acd_config *c, const acd_flags *f, char *err, size_t err_len);
/* The gid of socket_group (a name or a number); -1 for none; ACCEL_ENOENT if unknown. */
RT_MUST_USE int acd_config_gid(const acd_config *c, int *gid);
/* The server's view of [security]: its pointers point into *c, which must outlive it. */
void acd_config_security(const acd_config *c, struct srv_security *out);
/* The device workers' options (backends/worker/worker.h) from [devices]. */
struct bw_options;
void acd_config_workers(const acd_config *c, struct bw_options *out);
/* The build options of [builds] (out->helper points into *c or a static buffer). */
void acd_config_builds(const acd_config *c, struct dev_build_opts *out);
/* Whether two configurations say the same in [security] (a reload compares them). */
bool acd_config_security_same(const acd_config *a, const acd_config *b);

#endif
