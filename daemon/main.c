/* acceld: the accel daemon. Reads its configuration, starts the runtime with the device tree,
 * the server (the wire protocol on every --listen URL) and the service actor (signals,
 * systemd), and runs the loop on the main thread until SIGTERM has drained it.
 *
 *   acceld [--config FILE] [--listen URL]... [--log-level L] [--enable-fault-injection]
 *          [--cpu-devices N] [--backends LIST] [--allow-plain-tcp]
 *          [--user-kernels local|all|none] [--metrics URL] [--foreground]
 *   acceld --version
 *
 * Without --foreground (and outside systemd) it detaches once it serves, so a shell script can
 * start it and use it at once; its stderr stays where it was. Exit status: 0 after a clean
 * stop, 1 if it could not start, 2 for a usage error. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <malloc.h>
#include <nng/nng.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/build.h"
#include "actors/device.h"
#include "actors/telemetry.h"
#include "actors/world_init.h"
#include "backends/worker/worker.h"
#include "daemon/config.h"
#include "daemon/service.h"
#include "runtime/alloc.h"
#include "runtime/error_detail.h"
#include "server/server.h"

static void usage(FILE *to) {
  fprintf(to,
          "usage: acceld [--config FILE] [--listen URL]... [--log-level LEVEL]\n"
          "              [--enable-fault-injection] [--cpu-devices N] [--backends LIST]\n"
          "              [--workers LIST]\n"
          "              [--allow-plain-tcp] [--user-kernels local|all|none]\n"
          "              [--metrics URL] [--foreground]\n"
          "  --config FILE             INI configuration (default %s, if present)\n"
          "  --listen URL              ipc://PATH, tls+tcp://HOST:PORT (TLS settings in the\n"
          "                            config's [security]) or tcp://HOST:PORT, repeatable\n"
          "                            (default %s)\n"
          "  --log-level LEVEL         error, warn, info, debug, trace\n"
          "  --enable-fault-injection  let `accelctl inject-fault` reach devices (tests)\n"
          "  --cpu-devices N           CPU devices to serve (0-8, default 1)\n"
          "  --backends LIST           backends to open, in order (default cpu,cuda,opencl):\n"
          "                            devices are numbered so, and placement prefers earlier\n"
          "                            backends among devices of one kind\n"
          "  --workers LIST            backends whose devices run in worker processes, where\n"
          "                            a fault costs only their devices (default cuda,opencl;\n"
          "                            '' for none)\n"
          "  --allow-plain-tcp         let tcp:// listeners start (no encryption, no\n"
          "                            authentication: trusted networks only)\n"
          "  --user-kernels WHERE      where clients may load their own kernels: local\n"
          "                            (ipc:// only, the default), all, none\n"
          "  --metrics URL             serve GET /metrics (Prometheus) and /healthz on\n"
          "                            http://HOST:PORT, or http://:PORT or PORT on\n"
          "                            127.0.0.1 (default: off)\n"
          "  --foreground              stay attached (systemd, tests)\n"
          "  --version                 print the version and exit\n",
          ACD_DEFAULT_CONFIG, ACD_DEFAULT_URL);
}

static int parse_args(int argc, char **argv, acd_flags *f) {
  static const struct option opts[] = {
      {"config", required_argument, NULL, 'c'},
      {"listen", required_argument, NULL, 'l'},
      {"log-level", required_argument, NULL, 'L'},
      {"enable-fault-injection", no_argument, NULL, 'F'},
      {"cpu-devices", required_argument, NULL, 'n'},
      {"backends", required_argument, NULL, 'b'},
      {"workers", required_argument, NULL, 'w'},
      {"foreground", no_argument, NULL, 'f'},
      {"allow-plain-tcp", no_argument, NULL, 'P'},
      {"user-kernels", required_argument, NULL, 'K'},
      {"metrics", required_argument, NULL, 'M'},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0},
  };
  *f = (acd_flags){.cpu_devices = -1};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    char *end;
    switch (c) {
    case 'c':
      f->config_path = optarg;
      break;
    case 'l':
      if (f->nlisten == ACD_MAX_LISTEN)
        return 2;
      f->listen[f->nlisten++] = optarg;
      break;
    case 'L':
      f->log_level = optarg;
      break;
    case 'F':
      f->fault_injection = true;
      break;
    case 'n':
      f->cpu_devices = strtol(optarg, &end, 10);
      if (*end != '\0' || f->cpu_devices < 0 || f->cpu_devices > 8)
        return 2;
      break;
    case 'b':
      f->backends = optarg;
      break;
    case 'w':
      f->workers = optarg;
      break;
    case 'f':
      f->foreground = true;
      break;
    case 'P':
      f->allow_plain_tcp = true;
      break;
    case 'K':
      f->user_kernels = optarg;
      break;
    case 'M':
      f->metrics_listen = optarg;
      break;
    case 'h':
      usage(stdout);
      exit(0);
    case 'V':
      printf("acceld %s\n", ACCEL_VERSION_STRING);
      exit(0);
    default:
      return 2;
    }
  }
  return optind == argc ? 0 : 2;
}

/* ---- ipc socket directories ---- */

/* mkdir -p of the socket file's directory (systemd's RuntimeDirectory= usually made it). */
static int make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    int rc = mkdir(path, 0755);
    *p = '/';
    if (rc != 0 && errno != EEXIST)
      return -1;
  }
  return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static int prepare_ipc_dirs(const acd_config *c) {
  for (uint32_t i = 0; i < c->nlisten; i++) {
    if (strncmp(c->listen[i], "ipc://", 6) != 0)
      continue;
    char *copy = rt_strdup(c->listen[i] + 6);
    if (copy == NULL)
      return -1;
    char *dir = dirname(copy);
    int rc = strcmp(dir, ".") == 0 ? 0 : make_dirs(dir);
    if (rc != 0)
      fprintf(stderr, "acceld: cannot create %s: %s\n", dir, strerror(errno));
    rt_free(copy);
    if (rc != 0)
      return -1;
  }
  return 0;
}

/* ---- descriptors ---- */

/* Every client connection holds a descriptor: the soft limit (often 1024) is raised to the
 * hard one (the unit's LimitNOFILE=). Past it a new local client hears ACCEL_EBUSY
 * (server/server_local.c). Where the hard limit is unlimited, the kernel's nr_open caps it. */
static rlim_t nr_open(void) {
  unsigned long long n = 0;
  FILE *f = fopen("/proc/sys/fs/nr_open", "r");
  if (f != NULL && fscanf(f, "%llu", &n) != 1)
    n = 0;
  if (f != NULL)
    fclose(f);
  return n ? (rlim_t)n : 1048576;
}

static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  rlim_t soft = rl.rlim_cur, want = rl.rlim_max == RLIM_INFINITY ? nr_open() : rl.rlim_max;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
      soft = rl.rlim_cur;
    else
      accel_log(ACCEL_LOG_WARN, "acceld", "cannot raise the descriptor limit: %s", strerror(errno));
  }
  accel_log(ACCEL_LOG_INFO, "acceld", "descriptors: at most %llu (RLIMIT_NOFILE)",
            (unsigned long long)soft);
}

/* ---- detaching ---- */

/* Forks; the parent waits until the child says it serves (a byte on the pipe) or dies, and
 * exits with 0 or 1. Returns the child's end of the pipe (-1 when not detaching). Done before
 * any thread exists: nng and libuv start threads later. */
static int detach(bool foreground) {
  if (foreground || getenv("NOTIFY_SOCKET") != NULL)
    return -1;
  int fds[2];
  if (pipe(fds) != 0)
    return -1;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid > 0) {
    char b;
    close(fds[1]);
    exit(read(fds[0], &b, 1) == 1 ? 0 : 1);
  }
  close(fds[0]);
  setsid();
  if (freopen("/dev/null", "r", stdin) == NULL)
    return fds[1];
  return fds[1];
}

/* ---- the tree ---- */

typedef struct daemon_ctx {
  acd_flags flags;
  acd_config config;
  /* Per shard (config.shards, each on loop k): a device world and its server. */
  dev_world worlds[SRV_SHARDS_MAX];
  uint32_t nworlds; /* initialized, to be finished */
  srv_args servers[SRV_SHARDS_MAX];
  srv_shards *shards; /* NULL with one */
  accel_runtime *rt;
  acd_service_args service;
} daemon_ctx;

/* Set when a quarantine asked the daemon to exit; main() then returns EXIT_QUARANTINE. */
static volatile sig_atomic_t quarantine_exit;
enum { EXIT_QUARANTINE = 3 };

/* On the loop: the same drain as a SIGTERM, then a failing exit status for the restart. */
static void on_quarantine(void *arg, accel_device device) {
  accel_log(ACCEL_LOG_ERROR, "acceld",
            "device %d quarantined: exiting (status %d) to be restarted (exit_on_quarantine)",
            device, EXIT_QUARANTINE);
  quarantine_exit = 1;
  kill(getpid(), SIGTERM);
}

static int exit_status(void) {
  return quarantine_exit ? EXIT_QUARANTINE : 0;
}

/* World k of config.shards: on loop k and link k into each device worker when there are
 * several (one: placed as usual, on the only loop). */
static int start_world(daemon_ctx *d, uint32_t k) {
  acd_config *c = &d->config;
  dev_world_opts wo = {.cpu_devices = c->cpu_devices,
                       .fault_injection = c->fault_injection,
                       .completion = c->completion,
                       .max_restarts = c->max_restarts,
                       .restart_window_ms = c->restart_window_ms,
                       .tf32 = c->tf32,
                       /* Shards open each CUDA device once per world: contexts of their
                        * own would be time-sliced by the GPU (a client's op 20x slower), so
                        * they share the device's primary context. */
                       .cuda_primary = c->cuda_primary || c->shards > 1,
                       .pinned_max = c->pinned_max,
                       .loop = c->shards > 1 ? k + 1 : 0,
                       .worker_link = k};
  snprintf(wo.backends, sizeof wo.backends, "%s", c->backends);
  snprintf(wo.workers, sizeof wo.workers, "%s", c->workers);
  dev_world *w = &d->worlds[k];
  int rc = dev_world_init(w, d->rt, &wo);
  if (rc != 0)
    return rc;
  d->nworlds++;
  if (c->exit_on_quarantine)
    w->on_quarantine = on_quarantine;
  accel_ref devices;
  return dev_world_spawn(w, NULL, &devices);
}

/* Shard k's server: shard 0 listens and hands connections to the others, spawned first. */
static int start_server(daemon_ctx *d, uint32_t k, int gid, accel_ref *server) {
  acd_config *c = &d->config;
  d->servers[k] = (srv_args){.world = &d->worlds[k],
                             .shards = d->shards,
                             .shard = k,
                             .listen = (const char *const *)c->listen,
                             .nlisten = c->nlisten,
                             .limits = c->limits,
                             .ipc_mode = c->socket_mode,
                             .ipc_gid = gid,
                             .drain_timeout_ms = c->drain_timeout_ms,
                             .first_frame_timeout_ms = c->first_frame_timeout_ms,
                             .max_connections = c->max_connections,
                             .io_threads = c->io_threads,
                             .max_partial_bytes = c->max_partial_bytes,
                             .frame_idle_timeout_ms = c->frame_idle_timeout_ms,
                             .min_frame_rate = c->min_frame_rate ? c->min_frame_rate
                                                                 : SRV_MIN_FRAME_RATE_OFF,
                             .max_shared_bytes = c->max_shared_bytes,
                             .max_shared_bytes_total = c->max_shared_bytes_total,
                             .metrics_listen = c->metrics_listen,
                             .metrics = {.max_connections = c->metrics_max_connections,
                                         .header_timeout_ms = c->metrics_header_timeout_ms,
                                         .write_timeout_ms = c->metrics_write_timeout_ms,
                                         .max_header_bytes = c->metrics_max_header_bytes}};
  acd_config_security(c, &d->servers[k].sec); /* points into d->config, which outlives it */
  /* A session that fails past its restart limit is stopped, never escalated to the server. */
  accel_supervision sup = {.strategy = ACCEL_ONE_FOR_ONE, .on_limit = ACCEL_LIMIT_STOP_CHILD};
  char name[32] = "server";
  if (k > 0)
    snprintf(name, sizeof name, "server-%u", k);
  accel_spawn_opts so = {.name = name,
                         .mailbox_capacity = 1024,
                         .supervision = &sup,
                         .loop = c->shards > 1 ? k + 1 : 0};
  return accel_spawn(d->rt, NULL, &srv_behavior, &d->servers[k], &so, server);
}

static int start_tree(daemon_ctx *d, int gid, int ready_fd) {
  acd_config *c = &d->config;
  bw_options wk;
  acd_config_workers(c, &wk); /* devices in worker processes (backends/worker/worker.h) */
  bw_configure(&wk);
  dev_build_opts bo;
  acd_config_builds(c, &bo); /* compiles of clients' code in the helper (actors/build.h) */
  dev_builds_configure(&bo);
  int rc = c->shards > 1 ? srv_shards_create(c->shards, &d->shards) : 0;
  for (uint32_t k = 0; rc == 0 && k < c->shards; k++)
    rc = start_world(d, k);
  /* NVML's telemetry is the machine's: world 0 samples it for every report. */
  if (rc == 0)
    rc = dev_telemetry_start(&d->worlds[0], c->telemetry_interval_ms);
  accel_ref server = ACCEL_REF_NONE;
  for (uint32_t k = c->shards; rc == 0 && k-- > 0;)
    rc = start_server(d, k, gid, &server);
  if (rc != 0)
    return rc;
  d->service = (acd_service_args){.server = server,
                                  .config = c,
                                  .flags = &d->flags,
                                  .ready_fd = ready_fd,
                                  .exit_status = exit_status};
  accel_spawn_opts vo = {.name = "service", .mailbox_capacity = 64, .loop = c->shards > 1};
  return accel_spawn(d->rt, NULL, &acd_service_behavior, &d->service, &vo, NULL);
}

/* Why the tree did not start, in words: the detail its failing step recorded (a listener's
 * address and the cause: "ipc://PATH: address in use by another acceld (pid N)"), else the
 * code's message. Taken before teardown, which may record details of its own. */
static void say_why(int rc, char *why, size_t len) {
  const char *detail = accel_last_error_detail();
  snprintf(why, len, "%s", *detail != '\0' ? detail : accel_strerror(rc));
}

static int run(daemon_ctx *d, int gid, int ready_fd, char *why, size_t why_len) {
  /* A loop per shard: a server and its device world's actors share libuv handles and state
   * of one loop thread (docs/ARCHITECTURE.md "Threads"), whatever ACCEL_LOOPS says. */
  int rc = accel_runtime_create(&d->rt, &(accel_runtime_opts){.loops = d->config.shards});
  if (rc != 0)
    return rc;
  rt_error_detail_clear();
  rc = start_tree(d, gid, ready_fd);
  if (rc != 0)
    say_why(rc, why, why_len);
  if (rc == 0) {
    accel_log(ACCEL_LOG_INFO, "acceld", "serving %d device(s) (pid %d, %u shard(s))",
              d->worlds[0].nnodes - 1, (int)getpid(), d->config.shards);
    if (d->config.shards > 1 && !d->config.cuda_primary)
      accel_log(ACCEL_LOG_INFO, "acceld",
                "cuda_context = own does not apply with %u shards: CUDA devices use their "
                "primary context, which every shard shares",
                d->config.shards);
    rc = accel_runtime_run(d->rt);
  }
  accel_runtime_destroy(d->rt);
  for (uint32_t k = 0; k < d->nworlds; k++)
    dev_world_fini(&d->worlds[k]);
  if (d->shards)
    srv_shards_destroy(d->shards);
  nng_fini(); /* the server closed its socket when it stopped: end nng's threads too */
  return rc;
}

/* Frames up to 32 MiB (a chunk of a large transfer is 16 MiB) come from the heap and their
 * memory stays mapped when freed, up to 128 MiB of it. By default glibc gives every freed
 * block of that size back to the kernel (munmap) and the next frame faults its pages in
 * again, zeroed: 1 GiB over tcp:// moved at 0.6 GB/s for it on the 2-vCPU VM, 1.5-2.1 GB/s
 * without (docs/PERFORMANCE.md, "tcp:// on acceld's own stream"). */
#define FRAME_HEAP_MAX ((int)32 << 20) /* glibc's ceiling for M_MMAP_THRESHOLD on 64 bits */
#define FREE_HEAP_KEPT ((int)128 << 20)

static void keep_frame_memory(void) {
  if (mallopt(M_MMAP_THRESHOLD, FRAME_HEAP_MAX) != 1 ||
      mallopt(M_TRIM_THRESHOLD, FREE_HEAP_KEPT) != 1)
    accel_log(ACCEL_LOG_DEBUG, "acceld", "mallopt refused: large frames are mapped afresh");
}

int main(int argc, char **argv) {
  static daemon_ctx d; /* the world is large; it lives as long as the process */
  char err[320];
  signal(SIGPIPE, SIG_IGN);
  keep_frame_memory();
  if (parse_args(argc, argv, &d.flags) != 0) {
    usage(stderr);
    return 2;
  }
  if (acd_config_read(&d.config, &d.flags, err, sizeof err) != 0) {
    fprintf(stderr, "acceld: %s\n", err);
    return 1;
  }
  accel_log_set_level(d.config.log_level);
  raise_nofile();
  int gid;
  if (acd_config_gid(&d.config, &gid) != 0) {
    fprintf(stderr, "acceld: socket_group '%s': no such group\n", d.config.socket_group);
    return 1;
  }
  if (prepare_ipc_dirs(&d.config) != 0)
    return 1;
  int ready_fd = detach(d.flags.foreground);
  char why[600] = "";
  int rc = run(&d, gid, ready_fd, why, sizeof why);
  if (rc != 0)
    fprintf(stderr, "acceld: cannot start: %s\n", *why != '\0' ? why : accel_strerror(rc));
  acd_config_free(&d.config);
  if (rc == 0 && quarantine_exit)
    return EXIT_QUARANTINE;
  return rc == 0 ? 0 : 1;
}
