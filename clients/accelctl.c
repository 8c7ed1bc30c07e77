/* accelctl: acceld's admin tool. It speaks the wire protocol (docs/PROTOCOL.md) directly: one
 * nng req0 socket, one CONTROL frame, one REPLY.
 *
 *   accelctl [--url URL] [--timeout MS] status [--json] | devices | tree | ping
 *                                       | inject-fault --device N
 *
 * The URL defaults to $ACCEL_URL, else ipc:///run/acceld/acceld.sock. Exit status: 0 on
 * success, 1 on any error (with a message on stderr), 2 for a usage error. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/wire.h"

#define DEFAULT_URL "ipc:///run/acceld/acceld.sock"
#define REPLY_MAX (256u << 20) /* the largest reply accelctl accepts */

typedef struct ctl_args {
  const char *url;
  int timeout_ms;
  const char *command;
  bool json;
  long device;
} ctl_args;

static void usage(FILE *to) {
  fprintf(to, "usage: accelctl [--url URL] [--timeout MS] COMMAND\n"
              "commands:\n"
              "  status [--json]          the daemon, its devices and clients\n"
              "  devices                  one line per device and per missing backend\n"
              "  tree                     the supervision tree with states and restarts\n"
              "  ping                     round trip to the daemon\n"
              "  inject-fault --device N  make device N fault (needs acceld\n"
              "                           --enable-fault-injection)\n"
              "URL: --url, else $ACCEL_URL, else " DEFAULT_URL "\n");
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi)
    return false;
  *out = v;
  return true;
}

static int parse_args(int argc, char **argv, ctl_args *a) {
  const char *env = getenv("ACCEL_URL");
  *a = (ctl_args){.url = env && *env ? env : DEFAULT_URL, .timeout_ms = 5000, .device = -1};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    long v;
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(arg, "--url") && next) {
      a->url = next;
      i++;
    } else if (!strcmp(arg, "--timeout") && next && parse_long(next, 1, 3600000, &v)) {
      a->timeout_ms = (int)v;
      i++;
    } else if (!strcmp(arg, "--json")) {
      a->json = true;
    } else if (!strcmp(arg, "--device") && next && parse_long(next, 0, 1 << 20, &v)) {
      a->device = v;
      i++;
    } else if (a->command == NULL && arg[0] != '-') {
      a->command = arg;
    } else {
      return 2;
    }
  }
  if (a->command == NULL)
    return 2;
  if (a->json && strcmp(a->command, "status") != 0)
    return 2;
  if ((a->device >= 0) != !strcmp(a->command, "inject-fault"))
    return 2;
  return 0;
}

/* ---- one request, one reply ---- */

static int dial(const ctl_args *a, nng_socket *s) {
  int rv = nng_req0_open(s);
  if (rv != 0) {
    fprintf(stderr, "accelctl: cannot open a socket: %s\n", nng_strerror(rv));
    return 1;
  }
  nng_socket_set_ms(*s, NNG_OPT_SENDTIMEO, a->timeout_ms);
  nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, a->timeout_ms);
  nng_socket_set_size(*s, NNG_OPT_RECVMAXSZ, REPLY_MAX);
  rv = nng_dial(*s, a->url, NULL, 0);
  if (rv != 0) {
    fprintf(stderr, "accelctl: cannot reach acceld at %s: %s (is acceld running?)\n", a->url,
            nng_strerror(rv));
    nng_close(*s);
    nng_fini();
    return 1;
  }
  return 0;
}

/* Checks the reply frame; on success *data points into m's body. */
static int decode_reply(nng_msg *m, uint64_t request_id, int32_t *status, proto_bytes *data) {
  proto_header h;
  const uint8_t *p = nng_msg_body(m);
  int rc = proto_decode_header(p, nng_msg_len(m), REPLY_MAX, &h);
  if (rc == 0 && (h.type != PROTO_REPLY || h.request_id != request_id))
    rc = ACCEL_EPROTO;
  if (rc == 0)
    rc = proto_decode_reply(p + PROTO_HEADER_SIZE, h.body_len, status, data);
  return rc;
}

static int roundtrip(nng_socket s, const ctl_args *a, const proto_control_req *req,
                     nng_msg **reply) {
  proto_out o;
  proto_out_init(&o);
  int rc = proto_encode_control(&o, 1, req);
  int rv = rc == 0 ? nng_send(s, o.data, o.len, 0) : NNG_ENOMEM;
  proto_out_free(&o);
  if (rv == 0)
    rv = nng_recvmsg(s, reply, 0);
  if (rv == 0)
    return 0;
  fprintf(stderr, "accelctl: %s: no answer from acceld at %s: %s\n", a->command, a->url,
          nng_strerror(rv));
  return 1;
}

static const char *explain(const ctl_args *a, int status) {
  if (status == ACCEL_EPERM && !strcmp(a->command, "inject-fault"))
    return "refused: acceld runs without --enable-fault-injection";
  if (status == ACCEL_EINVAL && !strcmp(a->command, "inject-fault"))
    return "no such device";
  return accel_strerror(status);
}

static int print_reply(const ctl_args *a, nng_msg *m, double us) {
  int32_t status;
  proto_bytes data;
  if (decode_reply(m, 1, &status, &data) != 0) {
    fprintf(stderr, "accelctl: %s: malformed reply from %s\n", a->command, a->url);
    return 1;
  }
  if (status != 0) {
    fprintf(stderr, "accelctl: %s: %s (%s)\n", a->command, explain(a, status),
            accel_err_name(status));
    return 1;
  }
  if (!strcmp(a->command, "ping"))
    printf("acceld at %s: alive, round trip %.0f us\n", a->url, us);
  else if (!strcmp(a->command, "inject-fault"))
    printf("device %ld: fault injected\n", a->device);
  else
    fwrite(data.data, 1, data.len, stdout);
  if (a->json)
    putchar('\n');
  return 0;
}

static int command_of(const ctl_args *a, proto_control_req *req) {
  static const struct {
    const char *name;
    uint32_t command;
  } table[] = {{"ping", PROTO_CTL_PING},
               {"status", PROTO_CTL_STATUS},
               {"devices", PROTO_CTL_DEVICES},
               {"tree", PROTO_CTL_TREE},
               {"inject-fault", PROTO_CTL_INJECT_FAULT}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(a->command, table[i].name)) {
      req->command = table[i].command;
      req->arg = req->command == PROTO_CTL_INJECT_FAULT ? (uint64_t)a->device
                 : req->command == PROTO_CTL_STATUS     ? (a->json ? 0 : 1)
                                                        : 0;
      return 0;
    }
  return 2;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  ctl_args a;
  proto_control_req req;
  if (parse_args(argc, argv, &a) != 0 || command_of(&a, &req) != 0) {
    usage(stderr);
    return 2;
  }
  nng_socket s;
  if (dial(&a, &s) != 0)
    return 1;
  nng_msg *reply = NULL;
  double t0 = now_us();
  int rc = roundtrip(s, &a, &req, &reply);
  double us = now_us() - t0;
  if (rc == 0) {
    rc = print_reply(&a, reply, us);
    nng_msg_free(reply);
  }
  nng_close(s);
  nng_fini(); /* nng's threads end here, not after exit (valgrind counts them otherwise) */
  return rc;
}
