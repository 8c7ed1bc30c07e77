/* accelctl: acceld's admin tool. It speaks the wire protocol (docs/PROTOCOL.md) directly: one
 * connection (the local socket, or an nng req0 socket for tcp:// and tls+tcp://), one
 * CONTROL frame, one REPLY.
 *
 *   accelctl [--url URL] [--timeout MS] [--json] status | devices | tree | clients | ping
 *                                              | inject-fault --device N
 *                                              | top [--interval MS] [--count N]
 *                                              | trace [--seconds N] [--output FILE]
 *   accelctl --version
 *
 * `devices --json` asks for the status JSON and prints only its "devices", "backends" and
 * "telemetry" members, so both commands describe a device with the same object.
 *
 * The URL defaults to $ACCEL_URL, else ipc:///run/acceld/acceld.sock. Exit status: 0 on
 * success, 1 on any error (with a message on stderr), 2 for a usage error. */
#include <errno.h>
#include <getopt.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clients/remote_dial.h"
#include "proto/local.h"
#include "proto/tcp.h"
#include "proto/wire.h"
#include "runtime/alloc.h"
#include "runtime/deadline.h"

#define DEFAULT_URL "ipc:///run/acceld/acceld.sock"
#define REPLY_MAX (256u << 20) /* the largest reply accelctl accepts */

typedef struct ctl_args {
  const char *url;
  int timeout_ms;
  const char *command;
  bool json;
  long device;
  long interval_ms, count; /* top */
  long seconds;            /* trace */
  const char *output;      /* trace: the file (NULL: stdout) */
} ctl_args;

static void usage(FILE *to) {
  fprintf(to, "usage: accelctl [--url URL] [--timeout MS] [--json] COMMAND\n"
              "commands:\n"
              "  status                   the daemon, its devices and clients\n"
              "  devices                  each device with its op packages and dtypes,\n"
              "                           then each backend without a device and why\n"
              "  tree                     the supervision tree with states and restarts,\n"
              "                           then every device (quarantined ones too)\n"
              "  clients                  each client session: pid, uid, name, buffers,\n"
              "                           memory, ops in flight\n"
              "  top [--interval MS] [--count N]\n"
              "                           status and clients, refreshed in place every MS\n"
              "                           (default 1000) until Ctrl-C, or N times\n"
              "  trace [--seconds N] [--output FILE]\n"
              "                           record what every client's ops do for N seconds\n"
              "                           (default 5) as Chrome trace-event JSON (open it\n"
              "                           in Perfetto), to FILE or the standard output\n"
              "  ping                     round trip to the daemon\n"
              "  inject-fault --device N  make device N fault (needs acceld\n"
              "                           --enable-fault-injection)\n"
              "  --json                   any command: JSON (exact byte counts) instead of\n"
              "                           text (top: one JSON object per refresh)\n"
              "  --version                print accelctl's version\n"
              "URL: --url, else $ACCEL_URL, else " DEFAULT_URL "\n");
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
    return false;
  *out = v;
  return true;
}

/* A usage error: what was wrong, named, then where the usage is; exit status 2. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("accelctl: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nusage: accelctl [--url URL] [--timeout MS] [--json] COMMAND (accelctl --help "
        "lists the commands)\n",
        stderr);
  return 2;
}

/* The CONTROL request of a command; 2 if there is no such command. */
static int command_of(const ctl_args *a, proto_control_req *req) {
  static const struct {
    const char *name;
    uint32_t command;
  } table[] = {{"ping", PROTO_CTL_PING},
               {"status", PROTO_CTL_STATUS},
               {"devices", PROTO_CTL_DEVICES},
               {"tree", PROTO_CTL_TREE},
               {"clients", PROTO_CTL_CLIENTS},
               {"top", PROTO_CTL_STATUS},
               {"inject-fault", PROTO_CTL_INJECT_FAULT},
               {"trace", PROTO_CTL_TRACE_START}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(a->command, table[i].name)) {
      /* devices --json: the status JSON, of which print_devices_json keeps two members */
      req->command = table[i].command == PROTO_CTL_DEVICES && a->json ? PROTO_CTL_STATUS
                                                                      : table[i].command;
      /* arg: the device; the text (1) or JSON (0) of STATUS and CLIENTS; TREE the other way
       * round (its text came first) */
      req->arg = req->command == PROTO_CTL_INJECT_FAULT ? (uint64_t)a->device
                 : req->command == PROTO_CTL_TREE       ? (a->json ? 1 : 0)
                 : req->command == PROTO_CTL_STATUS || req->command == PROTO_CTL_CLIENTS
                     ? (a->json ? 0 : 1)
                     : 0;
      return 0;
    }
  return 2;
}

/* A numeric option's value into *out, within [lo, hi]. */
static int number(const char *option, long lo, long hi, long *out) {
  if (parse_long(optarg, lo, hi, out))
    return 0;
  return usage_error("--%s: '%s' is not a whole number from %ld to %ld", option, optarg, lo, hi);
}

static int take_option(int c, const char *option, ctl_args *a) {
  long v = 0;
  int rc = 0;
  switch (c) {
  case 'h':
    usage(stdout);
    exit(0);
  case 'V':
    printf("accelctl %s\n", ACCEL_VERSION_STRING);
    exit(0);
  case 'u':
    a->url = optarg;
    return 0;
  case 't':
    rc = number(option, 1, 3600000, &v);
    a->timeout_ms = (int)v;
    return rc;
  case 'j':
    a->json = true;
    return 0;
  case 'd':
    return number(option, 0, 1 << 20, &a->device);
  case 'i':
    return number(option, 50, 3600000, &a->interval_ms);
  case 'n':
    return number(option, 1, 1L << 30, &a->count);
  case 's':
    return number(option, 1, 3600, &a->seconds);
  case 'o':
    a->output = optarg;
    return 0;
  default:
    return 2;
  }
}

/* getopt_long's complaint (c '?' or ':') about `arg`, the argument it stopped at. For a long
 * option it sets optopt only when the option exists but was given a value it does not take. */
static int option_error(int c, const char *arg) {
  bool is_long = strncmp(arg, "--", 2) == 0;
  const char *eq = strchr(arg, '=');
  if (c == ':')
    return usage_error("option '%s' needs a value", arg);
  if (is_long && optopt != 0 && eq != NULL)
    return usage_error("option '%.*s' takes no value", (int)(eq - arg), arg);
  if (!is_long && optopt != 0)
    return usage_error("unknown option '-%c'", optopt);
  return usage_error("unknown option '%s'", arg);
}

/* The command and the options that belong to it agree. */
static int check_command(const ctl_args *a, proto_control_req *req) {
  if (command_of(a, req) != 0)
    return usage_error("unknown command '%s'", a->command);
  bool top = !strcmp(a->command, "top"), inject = !strcmp(a->command, "inject-fault");
  if ((a->count || a->interval_ms != 1000) && !top)
    return usage_error("--interval and --count are options of top, not of %s", a->command);
  bool trace = !strcmp(a->command, "trace");
  if ((a->seconds || a->output) && !trace)
    return usage_error("--seconds and --output are options of trace, not of %s", a->command);
  if (inject && a->device < 0)
    return usage_error("inject-fault needs --device N");
  if (!inject && a->device >= 0)
    return usage_error("--device is an option of inject-fault, not of %s", a->command);
  return 0;
}

/* Options anywhere (getopt_long: --url URL and --url=URL), one command; its request. */
static int parse_args(int argc, char **argv, ctl_args *a, proto_control_req *req) {
  static const struct option opts[] = {
      {"url", required_argument, NULL, 'u'},
      {"timeout", required_argument, NULL, 't'},
      {"json", no_argument, NULL, 'j'},
      {"device", required_argument, NULL, 'd'},
      {"interval", required_argument, NULL, 'i'},
      {"count", required_argument, NULL, 'n'},
      {"seconds", required_argument, NULL, 's'},
      {"output", required_argument, NULL, 'o'},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0},
  };
  const char *env = getenv("ACCEL_URL");
  *a = (ctl_args){.url = env && *env ? env : DEFAULT_URL,
                  .timeout_ms = 5000,
                  .device = -1,
                  .interval_ms = 1000};
  opterr = 0; /* the errors are ours, with the option named */
  for (int c, at = 0; (c = getopt_long(argc, argv, ":h", opts, &at)) != -1;) {
    if (c == '?' || c == ':')
      return option_error(c, argv[optind - 1]);
    if (take_option(c, opts[at].name, a) != 0)
      return 2;
  }
  if (optind == argc)
    return usage_error("no command given");
  a->command = argv[optind];
  if (optind + 1 < argc)
    return usage_error("unexpected argument '%s' after %s", argv[optind + 1], a->command);
  return check_command(a, req);
}

/* ---- one request, one reply ---- */

/* A connection: the daemon's local socket (ipc://, unix://) or an nng req0 socket. */
typedef struct ctl_conn {
  int fd; /* >= 0: acceld's own stream (ipc://, tcp://) */
  nng_socket sock;
  uint8_t *reply;
  size_t reply_len, reply_cap;
} ctl_conn;

/* Why the dial failed: what it recorded (clients/remote_dial.c: "no acceld at URL (connect:
 * No such file or directory)"), else the code's message. */
static void unreachable(const ctl_args *a, int rc) {
  const char *why = accel_last_error_detail();
  if (*why != '\0')
    fprintf(stderr, "accelctl: %s\n", why);
  else
    fprintf(stderr, "accelctl: cannot reach acceld at %s: %s\n", a->url, accel_strerror(rc));
}

static int dial_nng(const ctl_args *a, ctl_conn *c) {
  int rv = nng_req0_open(&c->sock);
  if (rv != 0) {
    fprintf(stderr, "accelctl: cannot open a socket: %s\n", nng_strerror(rv));
    return 1;
  }
  /* Without its timeouts accelctl could wait for ever, and without the size limit a reply
   * could be of any size: a socket that refuses one of them is not used. */
  if ((rv = nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, a->timeout_ms)) != 0 ||
      (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, a->timeout_ms)) != 0 ||
      (rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, REPLY_MAX)) != 0) {
    fprintf(stderr, "accelctl: cannot set up the socket: %s\n", nng_strerror(rv));
    nng_close(c->sock);
    nng_fini();
    return 1;
  }
  if ((rv = client_nng_dial(c->sock, a->url)) == 0)
    return 0;
  unreachable(a, rv);
  nng_close(c->sock);
  nng_fini();
  return 1;
}

static int dial(const ctl_args *a, ctl_conn *c) {
  memset(c, 0, sizeof *c);
  c->fd = -1;
  if (proto_local_path(a->url) == NULL && !proto_tcp_url(a->url))
    return dial_nng(a, c); /* tls+tcp:// */
  /* --timeout bounds the connect too (the name's lookup included): a host that drops SYNs, or
   * a resolver that does not answer, must not hold accelctl 10 s. */
  c->fd = proto_tcp_url(a->url) ? client_tcp_connect(a->url, a->timeout_ms)
                                : client_local_connect(a->url);
  if (c->fd >= 0)
    return 0;
  unreachable(a, c->fd);
  return 1;
}

static void hang_up(ctl_conn *c) {
  rt_free(c->reply);
  if (c->fd >= 0) {
    close(c->fd);
    return;
  }
  nng_close(c->sock);
  nng_fini(); /* nng's threads end here, not after exit (valgrind counts them otherwise) */
}

/* Checks the reply frame; on success *data points into it. */
static int decode_reply(const ctl_conn *c, uint64_t request_id, int32_t *status,
                        proto_bytes *data) {
  proto_header h;
  int rc = proto_decode_header(c->reply, c->reply_len, REPLY_MAX, &h);
  if (rc == 0 && (h.type != PROTO_REPLY || h.request_id != request_id))
    rc = ACCEL_EPROTO;
  if (rc == 0)
    rc = proto_decode_reply(c->reply + PROTO_HEADER_SIZE, h.body_len, status, data);
  return rc;
}

static int exchange_nng(ctl_conn *c, const proto_out *o) {
  nng_msg *m;
  int rv = nng_send(c->sock, o->data, o->len, 0);
  if (rv == 0)
    rv = nng_recvmsg(c->sock, &m, 0);
  if (rv != 0)
    return rv == NNG_ETIMEDOUT ? ACCEL_ETIMEDOUT : ACCEL_ECLOSED;
  c->reply_len = nng_msg_len(m);
  c->reply = rt_malloc(c->reply_len ? c->reply_len : 1);
  if (c->reply)
    memcpy(c->reply, nng_msg_body(m), c->reply_len);
  nng_msg_free(m);
  return c->reply ? 0 : ACCEL_ENOMEM;
}

static int exchange_local(ctl_conn *c, const ctl_args *a, const proto_out *o) {
  int rc = proto_local_send(c->fd, o->data, o->len, -1);
  long long n = rc == 0 ? proto_local_recv_frame(c->fd, &c->reply, &c->reply_cap,
                                                 REPLY_MAX - PROTO_HEADER_SIZE, a->timeout_ms)
                        : rc;
  if (n < 0)
    return (int)n;
  c->reply_len = (size_t)n;
  return 0;
}

static int roundtrip(ctl_conn *c, const ctl_args *a, const proto_control_req *req) {
  proto_out o;
  proto_out_init(&o);
  int rc = proto_encode_control(&o, 1, req);
  if (rc == 0)
    rc = c->fd >= 0 ? exchange_local(c, a, &o) : exchange_nng(c, &o);
  proto_out_free(&o);
  if (rc == 0)
    return 0;
  fprintf(stderr, "accelctl: %s: no answer from acceld at %s: %s\n", a->command, a->url,
          accel_strerror(rc));
  return 1;
}

static const char *explain(const ctl_args *a, int status) {
  if (status == ACCEL_EPERM && !strcmp(a->command, "inject-fault"))
    return "refused: acceld runs without --enable-fault-injection";
  if (status == ACCEL_EINVAL && !strcmp(a->command, "inject-fault"))
    return "no such device";
  return accel_strerror(status);
}

/* ---- devices --json: two members of the status JSON ---- */

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
    p++;
  return p;
}

/* Past the JSON string that starts at p (a '"'), or NULL if it does not end before `end`. */
static const char *skip_string(const char *p, const char *end) {
  for (p++; p < end; p++) {
    if (*p == '\\')
      p++;
    else if (*p == '"')
      return p + 1;
  }
  return NULL;
}

/* Past the JSON value that starts at p, or NULL if it does not end before `end`. Strings and
 * brackets are followed, not validated: the reply is bounded, not trusted to be well formed,
 * so a malformed one ends in NULL or in a member that is not found, never past `end`. */
static const char *skip_value(const char *p, const char *end) {
  if (p < end && *p != '"' && *p != '[' && *p != '{') {
    while (p < end && *p != ',' && *p != '}' && *p != ']')
      p++;
    return p;
  }
  int depth = 0;
  do {
    if (p == NULL || p >= end)
      return NULL;
    if (*p == '"') {
      p = skip_string(p, end);
    } else {
      depth += (*p == '[' || *p == '{') - (*p == ']' || *p == '}');
      p++;
    }
  } while (depth > 0);
  return p;
}

/* The value of member `key` of the JSON object in [p, end): false if there is none. */
static bool json_member(const char *p, const char *end, const char *key, proto_bytes *val) {
  p = skip_ws(p, end);
  if (p == end || *p != '{')
    return false;
  for (p = skip_ws(p + 1, end); p < end && *p == '"'; p = skip_ws(p + 1, end)) {
    const char *k = p + 1, *v = skip_string(p, end);
    if (v == NULL)
      return false;
    size_t klen = (size_t)(v - 1 - k);
    v = skip_ws(v, end);
    if (v == end || *v != ':')
      return false;
    v = skip_ws(v + 1, end);
    const char *after = skip_value(v, end);
    if (after == NULL)
      return false;
    if (klen == strlen(key) && !memcmp(k, key, klen)) {
      *val = (proto_bytes){.data = (const uint8_t *)v, .len = (size_t)(after - v)};
      return true;
    }
    p = skip_ws(after, end);
    if (p == end || *p != ',')
      return false;
  }
  return false;
}

/* {"devices":[...],"backends":[...],"telemetry":{...}} out of the status JSON; 1 if devices or
 * backends are missing (telemetry is left out where an older acceld has none). */
static int print_devices_json(const ctl_args *a, proto_bytes status) {
  const char *p = (const char *)status.data, *end = p + status.len;
  proto_bytes dev, be, tel;
  if (!json_member(p, end, "devices", &dev) || !json_member(p, end, "backends", &be) ||
      dev.data[0] != '[' || be.data[0] != '[') {
    fprintf(stderr, "accelctl: %s: the status from %s has no devices and backends\n", a->command,
            a->url);
    return 1;
  }
  printf("{\"devices\":%.*s,\"backends\":%.*s", (int)dev.len, (const char *)dev.data, (int)be.len,
         (const char *)be.data);
  if (json_member(p, end, "telemetry", &tel) && tel.data[0] == '{')
    printf(",\"telemetry\":%.*s", (int)tel.len, (const char *)tel.data);
  printf("}");
  return 0;
}

static int print_reply(const ctl_args *a, const ctl_conn *c, double us) {
  int32_t status;
  proto_bytes data;
  if (decode_reply(c, 1, &status, &data) != 0) {
    fprintf(stderr, "accelctl: %s: malformed reply from %s\n", a->command, a->url);
    return 1;
  }
  if (status != 0) {
    fprintf(stderr, "accelctl: %s: %s (%s)\n", a->command, explain(a, status),
            accel_err_name(status));
    return 1;
  }
  if (!strcmp(a->command, "ping") && a->json)
    printf("{\"alive\":true,\"round_trip_us\":%.1f}", us);
  else if (!strcmp(a->command, "ping"))
    printf("acceld at %s: alive, round trip %.0f us\n", a->url, us);
  else if (!strcmp(a->command, "inject-fault") && a->json)
    printf("{\"device\":%ld,\"fault_injected\":true}", a->device);
  else if (!strcmp(a->command, "inject-fault"))
    printf("device %ld: fault injected\n", a->device);
  else if (a->json && !strcmp(a->command, "devices")) {
    if (print_devices_json(a, data) != 0)
      return 1;
  } else {
    fwrite(data.data, 1, data.len, stdout);
  }
  if (a->json)
    putchar('\n');
  return 0;
}

static double now_us(void) {
  return (double)rt_mono_ns() / 1e3;
}

/* The reply's data as a NUL-terminated string (malloc'd), or NULL with a message. */
static char *fetch_text(ctl_conn *c, const ctl_args *a, uint32_t command, uint64_t arg) {
  proto_control_req req = {.command = command, .arg = arg};
  int32_t status = 0;
  proto_bytes data;
  if (roundtrip(c, a, &req) != 0)
    return NULL;
  if (decode_reply(c, 1, &status, &data) != 0 || status != 0) {
    fprintf(stderr, "accelctl: %s: %s from %s\n", a->command,
            status != 0 ? accel_strerror(status) : "malformed reply", a->url);
    return NULL;
  }
  char *text = rt_malloc(data.len + 1);
  if (text == NULL)
    return NULL;
  memcpy(text, data.data, data.len);
  text[data.len] = '\0';
  return text;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* ---- trace ---- */

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

/* The trace's JSON to the file or stdout; its event count (from otherData) to stderr. */
static int write_trace(const ctl_args *a, const char *json, double seconds) {
  FILE *f = a->output ? fopen(a->output, "w") : stdout;
  if (f == NULL) {
    fprintf(stderr, "accelctl: trace: cannot write %s: %s\n", a->output, strerror(errno));
    return 1;
  }
  size_t len = strlen(json);
  bool ok = fwrite(json, 1, len, f) == len;
  if (f != stdout)
    ok = fclose(f) == 0 && ok;
  else
    ok = fflush(f) == 0 && ok;
  if (!ok) {
    fprintf(stderr, "accelctl: trace: writing %s failed: %s\n", a->output ? a->output : "stdout",
            strerror(errno));
    return 1;
  }
  const char *events = strstr(json, "\"events\":");
  fprintf(stderr, "accelctl: trace of %.1f s: %ld events%s%s (open it in Perfetto)\n", seconds,
          events ? strtol(events + 9, NULL, 10) : 0L, a->output ? " in " : "",
          a->output ? a->output : "");
  return 0;
}

/* trace: starts the daemon's trace, waits (Ctrl-C ends the wait early, not the trace's
 * collection), stops it and writes what it holds. */
static int trace(ctl_conn *c, const ctl_args *a) {
  proto_control_req start = {.command = PROTO_CTL_TRACE_START, .arg = 0};
  int32_t status = 0;
  proto_bytes data;
  if (roundtrip(c, a, &start) != 0)
    return 1;
  if (decode_reply(c, 1, &status, &data) != 0 || status != 0) {
    fprintf(stderr, "accelctl: trace: %s from %s\n",
            status != 0 ? accel_strerror(status) : "malformed reply", a->url);
    return 1;
  }
  struct sigaction sa = {.sa_handler = on_interrupt};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  double t0 = now_us();
  long ms = (a->seconds ? a->seconds : 5) * 1000;
  for (long waited = 0; waited < ms && !interrupted; waited += 50)
    sleep_ms(50);
  char *json = fetch_text(c, a, PROTO_CTL_TRACE_STOP, 0);
  if (json == NULL)
    return 1;
  int rc = write_trace(a, json, (now_us() - t0) / 1e6);
  rt_free(json);
  return rc;
}

/* top: status and clients, refreshed in place (a terminal: cursor home, clear to the end) or
 * one after the other (a pipe; with --json, one object per line), every interval. */
static int top(ctl_conn *c, const ctl_args *a) {
  bool tty = isatty(STDOUT_FILENO);
  for (long n = 0; a->count == 0 || n < a->count; n++) {
    if (n > 0)
      sleep_ms(a->interval_ms);
    char *status = fetch_text(c, a, PROTO_CTL_STATUS, a->json ? 0 : 1);
    char *clients = status ? fetch_text(c, a, PROTO_CTL_CLIENTS, a->json ? 0 : 1) : NULL;
    if (clients == NULL) {
      rt_free(status);
      return 1;
    }
    if (a->json) {
      printf("{\"status\":%s,\"clients\":%s}\n", status, clients);
    } else {
      time_t now = time(NULL);
      char when[32];
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
      printf("%saccelctl top: %s, %s, every %ld ms (Ctrl-C to quit)\n\n%s\n%s%s",
             tty ? "\033[H\033[J" : "", a->url, when, a->interval_ms, status, clients,
             tty ? "" : "\n");
    }
    fflush(stdout);
    rt_free(status);
    rt_free(clients);
  }
  return 0;
}

int main(int argc, char **argv) {
  ctl_args a;
  proto_control_req req;
  if (parse_args(argc, argv, &a, &req) != 0)
    return 2;
  ctl_conn c;
  if (dial(&a, &c) != 0)
    return 1;
  if (!strcmp(a.command, "top") || !strcmp(a.command, "trace")) {
    int rc = !strcmp(a.command, "top") ? top(&c, &a) : trace(&c, &a);
    hang_up(&c);
    return rc;
  }
  double t0 = now_us();
  int rc = roundtrip(&c, &a, &req);
  double us = now_us() - t0;
  if (rc == 0)
    rc = print_reply(&a, &c, us);
  hang_up(&c);
  return rc;
}
