/* Helpers of the daemon tests: start the real acceld on a socket in a fresh temporary
 * directory, run accelctl, and speak the wire protocol directly (nng + proto/).
 *
 * The binaries come from the environment (ACCELD, ACCELCTL: meson sets them). A daemon started
 * here dies with the test process (PR_SET_PDEATHSIG), so a failed check never leaves one
 * behind; td_stop() ends it normally. */
#ifndef TESTS_DAEMON_UTIL_H
#define TESTS_DAEMON_UTIL_H

#include <nng/nng.h>
#include <stdbool.h>
#include <sys/types.h>

#include "proto/wire.h"
#include "runtime/shm_ring.h"
#include "test.h"

typedef struct td_daemon {
  pid_t pid;
  char dir[64];   /* the temporary directory: socket, config, log */
  char url[128];  /* ipc://DIR/acceld.sock */
  char log[128];  /* the daemon's stderr */
  char conf[128]; /* the config file passed with --config (empty unless written first) */
} td_daemon;

/* Makes the directory and an empty config file; the daemon is not started yet. */
void td_prepare(td_daemon *d);
/* Writes `text` as the config file. */
void td_write_config(td_daemon *d, const char *text);
/* Starts acceld --foreground --config CONF --listen URL plus the NULL-terminated extra
 * arguments, and waits until `accelctl ping` answers (fails the test after 10 s). */
void td_start(td_daemon *d, ...);
/* Like td_start but waits for the daemon to exit and returns its exit status: for
 * configurations that must be refused (a daemon that serves instead hangs the test until the
 * watchdog ends it). */
int td_start_expect_exit(td_daemon *d, ...);
/* SIGTERM, then td_wait; returns the exit status (128 + signal if killed by one). */
int td_stop(td_daemon *d);
/* Waits for the daemon to exit by itself, for as long as it takes (the watchdog ends a hang;
 * the daemon's log is shown after 15 s); returns the status as td_stop. */
int td_wait(td_daemon *d);
/* Sends a signal to the daemon. */
void td_signal(td_daemon *d, int sig);
/* The daemon's log so far (static buffer). */
const char *td_log(td_daemon *d);
/* Removes the temporary directory. */
void td_cleanup(td_daemon *d);

/* Runs accelctl with the NULL-terminated arguments; its stdout and stderr into `out` (NUL
 * terminated, cut at len). Returns its exit status. */
int td_ctl(char *out, size_t len, const char *arg, ...);
/* accelctl --url URL status --json, then the value of the integer field `key` of the top
 * object (-1 if absent). */
long td_status_field(td_daemon *d, const char *key);

/* A full round by a fresh client: HELLO, create, write, read back (checked). Tests that hold
 * connections the daemon must not block on check with it that others are still served; how
 * fast does not matter. */
void td_served(td_daemon *d);

/* How many descriptors process `pid` holds now (its /proc/PID/fd). */
int td_open_fds(pid_t pid);

/* A TCP port nothing listens on now (the kernel's pick; free again once closed). */
int td_free_port(void);
/* GET path from 127.0.0.1:port (acceld's metrics endpoint): the response's body, in a static
 * buffer (1 MiB) the next call reuses. */
const char *td_http_get(int port, const char *path);

/* ---- the wire protocol by hand ---- */

typedef struct td_client {
  int fd;          /* >= 0: the daemon's own stream (ipc://, tcp://) */
  nng_socket sock; /* else nng (tls+tcp://) */
  uint64_t next_id;
  uint8_t *rbuf; /* local: the frame being read */
  size_t rcap;
  uint8_t *rings; /* local, after td_hello_rings took: frames through shared rings */
  rt_ring up, down;
} td_client;

/* TLS: a CA (ca), another CA nobody trusts (other-ca), a server certificate for localhost and
 * 127.0.0.1 signed by ca (server), client certificates signed by ca (client) and by other-ca
 * (rogue), each NAME.pem with its key NAME.key, made once per process with the openssl CLI
 * in a temporary directory (removed at exit). */
void td_tls_certs(void);
/* The path of one of those files (td_tls_certs first). */
const char *td_tls_pem(const char *file);
/* A daemon on the CPU backend listening on tls+tcp:// (written to url: nng's transport) with
 * `config` and the server certificate; libaccel clients opened afterwards trust the CA
 * (ACCEL_TLS_CA, ACCEL_TLS_SERVER_NAME set in this process's environment). */
void td_start_nng(td_daemon *d, const char *config, char *url, size_t len);

void td_client_open(td_client *c, const char *url);
void td_client_close(td_client *c);
/* Sends raw bytes as one frame (nng request id = id | 0x80000000). */
void td_send_raw(td_client *c, const void *bytes, size_t len, uint64_t id);
/* Receives one frame; 0, or NNG_ETIMEDOUT, or NNG_ECLOSED (the daemon closed a local
 * connection) / another nng error. timeout_ms TD_FOREVER: for a frame or an end that must
 * come, with no limit but the watchdog's (TEST_WAIT_FOR says why). */
#define TD_FOREVER (-1)
int td_recv(td_client *c, nng_msg **m, int timeout_ms);
/* Decodes a REPLY: the status; *data (may be NULL) points into m. Fails the test if the
 * frame is not a well-formed reply to `id`. */
int td_reply_status(nng_msg *m, uint64_t id, proto_bytes *data);
/* Sends a frame and returns the status of its reply (fails the test after 10 s). */
int td_call(td_client *c, proto_out *frame, uint64_t id);

int td_hello(td_client *c, proto_welcome *w);
/* HELLO announcing capabilities (PROTO_CAP_*); the WELCOME says which were granted. */
int td_hello_caps(td_client *c, uint32_t caps, proto_welcome *w);
/* As td_hello_caps, naming the client `name` (what `accelctl clients` and /metrics show). */
int td_hello_as(td_client *c, uint32_t caps, const char *name, proto_welcome *w);
/* A HELLO offering shared rings with `fd` passed (a region, or not one, to see it refused):
 * the WELCOME's capabilities. td_hello_rings offers a region of its own, and from the
 * WELCOME that takes it the client's frames go through it (td_send_raw, td_recv). */
uint32_t td_hello_passing(td_client *c, int fd);
uint32_t td_hello_rings(td_client *c);
/* On rings: the frame's bytes into the up ring, published once each `piece` bytes (0: once,
 * at the end; a frame larger than the ring goes in as room comes). */
void td_send_rings(td_client *c, const void *bytes, size_t len, size_t piece);
int td_control(td_client *c, uint32_t command, uint64_t arg);
/* As td_control, with the reply's data copied into out (cut at cap - 1, NUL-terminated; *len
 * its length there). */
int td_control_data(td_client *c, uint32_t command, uint64_t arg, char *out, size_t cap,
                    size_t *len);
int td_create(td_client *c, uint64_t handle, accel_dtype dtype, uint64_t count);
int td_destroy(td_client *c, uint64_t handle);
int td_write_u32(td_client *c, uint64_t handle, const uint32_t *src, uint64_t count);
int td_read_u32(td_client *c, uint64_t handle, uint32_t *dst, uint64_t count);
int td_fill(td_client *c, uint64_t handle, uint32_t value);
/* An encoded OP frame for a fill of `handle` (for pipelining tests). */
void td_encode_fill(proto_out *o, uint64_t id, uint64_t handle, uint32_t value);
/* An encoded OP frame for c += a * b, f32 gemm of n x n on device 0 (work that takes a
 * while: drain tests). */
void td_encode_sgemm(proto_out *o, uint64_t id, uint64_t a, uint64_t b, uint64_t c, int64_t n);
/* Reads the answers to `ops` requests sent on c: each must be OK or ACCEL_ECLOSED (sent
 * after a drain began); how many were OK. */
int td_answers_ok_or_closed(td_client *c, int ops);
/* max_connections = `max` in d's config, d started with no connection left: max clients are
 * served, the next hears ACCEL_EBUSY in a REPLY about the connection (request id 0) and is
 * closed; once they have all gone, a new connection is served again. */
void td_check_max_connections(td_daemon *d, int max);

/* A handle as libaccel makes them: slot in bits 0-31, generation in 32-47. */
static inline uint64_t td_handle(uint32_t slot, uint32_t gen) {
  return (uint64_t)gen << 32 | slot;
}

#endif
