/* The server actor: acceld's side of the wire (docs/PROTOCOL.md).
 *
 * One nng rep0 socket in raw mode, listening on every URL given. Its receive and send file
 * descriptors are watched with uv_poll on the runtime's own loop, so a frame goes from nng's
 * queue to a SessionActor's mailbox, and a finished op's reply back to nng, on the loop thread
 * with no hand-off of our own. Raw mode keeps each request's routing header (pipe id and the
 * peer's request id) in the message; the reply carries it back, so replies leave in completion
 * order, with as many requests in flight per client as its session allows.
 *
 * Per client connection (nng pipe) the server spawns one SessionActor, as its child, on the
 * client's HELLO, and stops it when the pipe goes away; the session's stop frees the client's
 * buffers. Ops still running then finish normally and their replies are dropped. A client
 * that asks for them (HELLO capabilities) gets its replies batched per loop iteration and
 * held to an acknowledged window: nng's raw rep0 drops replies past 64 queued per pipe.
 * The server never closes a pipe itself (nng 1.5.2 can deadlock doing so): a peer that is
 * not speaking accel is refused, its later frames dropped unread (docs/PROTOCOL.md).
 *
 * Spawn it with accel_spawn(rt, parent, &srv_behavior, args, opts); `args` must outlive it,
 * and opts' supervision should say ACCEL_LIMIT_STOP_CHILD, so that a session that fails past
 * its restarts is stopped rather than failing the server. Everything here runs on the loop
 * thread. */
#ifndef SRV_SERVER_H
#define SRV_SERVER_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stdint.h>

#include "actors/world.h"
#include "proto/wire.h"
#include "runtime/attr.h"

/* Where clients may load their own kernels (accel_module_load): code a client sends runs on
 * the daemon's devices, as the daemon's user. */
typedef enum srv_user_kernels {
  SRV_USER_KERNELS_LOCAL = 0, /* local connections (ipc://, unix://) only: the default */
  SRV_USER_KERNELS_ALL,       /* every listener, tcp:// and tls+tcp:// too */
  SRV_USER_KERNELS_NONE       /* nowhere */
} srv_user_kernels;

/* Who may talk to the daemon (filled from acceld's config; server/server_tls.c applies the
 * nng half, server/server_local.c the local half). */
typedef struct srv_security {
  /* Local peers, by the credentials of their Unix socket (SO_PEERCRED). A peer is allowed if
   * its uid is 0 or the daemon's own, or in allow_uids, or it is a member (primary or
   * supplementary) of a group in allow_gids. With both lists empty the socket's group
   * (srv_args.ipc_gid, else the daemon's own group) is the one allowed group. */
  const uint32_t *allow_uids;
  uint32_t nallow_uids;
  const uint32_t *allow_gids;
  uint32_t nallow_gids;
  bool allow_any_local; /* every local peer (the socket file's mode still applies) */
  /* Remote peers (nng). Plain tcp:// listeners are refused unless this is set. */
  bool allow_plain_tcp;
  /* tls+tcp:// listeners: PEM files; ca (optional) verifies client certificates, which are
   * then required when verify_clients is set. */
  const char *tls_cert, *tls_key, *tls_ca;
  bool tls_verify_clients;
  /* Module loads on a connection where this refuses them fail with ACCEL_EPERM (its
   * session's dev_session_args.forbid_modules); read when the session starts. */
  srv_user_kernels user_kernels;
} srv_security;

/* The HTTP endpoint's limits against hostile clients (server/server_http.c); a field that
 * is 0 takes its default (SRV_HTTP_DEFAULT_*). */
typedef struct srv_http_limits {
  uint32_t max_connections;   /* open at once; past it a new one is closed as it comes */
  uint32_t header_timeout_ms; /* a request's head must be whole this long after connecting */
  uint32_t write_timeout_ms;  /* the response must be taken this long after the request */
  uint32_t max_header_bytes;  /* a request's head (request line to empty line); past it 431 */
} srv_http_limits;

#define SRV_HTTP_DEFAULT_MAX_CONNECTIONS 64u
#define SRV_HTTP_DEFAULT_HEADER_TIMEOUT_MS 5000u
#define SRV_HTTP_DEFAULT_WRITE_TIMEOUT_MS 10000u
#define SRV_HTTP_DEFAULT_MAX_HEADER_BYTES 8192u

typedef struct srv_http_addr {
  char host[256]; /* "" when none was given (127.0.0.1), else as written (no brackets) */
  uint16_t port;
} srv_http_addr;

/* A daemon's servers when it runs several (server/server_shards.h): shards, each on a loop of
 * its own with a world of its own; shard 0 listens and hands connections out. */
#define SRV_SHARDS_MAX 16
typedef struct srv_shards srv_shards;

/* [daemon] shards = auto: SRV_SHARDS_AUTO_CORES cores a shard, at most SRV_SHARDS_AUTO_MAX
 * (docs/DECISIONS.md "Shards": on 32 cores 2 shards gave waiting GPU clients 1.3-1.5x one
 * shard; on 16 cores 2 cost them a quarter, and a light client's p99 beside a flood). */
#define SRV_SHARDS_AUTO UINT32_MAX
#define SRV_SHARDS_AUTO_CORES 16
#define SRV_SHARDS_AUTO_MAX 4
/* The shards `auto` means on a machine of this many cores (1 at least). */
static inline uint32_t srv_shards_for_cores(long cores) {
  long n = cores / SRV_SHARDS_AUTO_CORES;
  return n < 1 ? 1 : n > SRV_SHARDS_AUTO_MAX ? SRV_SHARDS_AUTO_MAX : (uint32_t)n;
}
/* n shards (1 .. SRV_SHARDS_MAX, else ACCEL_EINVAL); ACCEL_ENOMEM. Spawn shard 0 last: it
 * hands connections to the others from its start on. */
RT_MUST_USE int srv_shards_create(uint32_t n, srv_shards **out);
/* After every shard's server has stopped. */
void srv_shards_destroy(srv_shards *sh);

typedef struct srv_args {
  dev_world *world; /* the devices (dev_world_spawn'ed by the caller) */
  /* Several servers of one daemon: this one's index and what they share (the same object for
   * all; it must outlive them). NULL: the only server. Only shard 0 uses `listen`, serves
   * nng's transports and the HTTP endpoint, and takes SRV_MSG_DRAIN and SRV_MSG_LIMITS for
   * them all; each shard serves the local connections handed to it with its own world, loop
   * and I/O threads (io_threads / shards of them, at least one if io_threads is not 0). */
  srv_shards *shards;
  uint32_t shard;
  const char *const *listen; /* URLs: ipc://PATH, tcp://HOST:PORT */
  uint32_t nlisten;
  proto_limits limits;       /* per session; max_message per frame */
  int ipc_mode;              /* permissions of ipc:// socket files; < 0: nng's default */
  int ipc_gid;               /* group of ipc:// socket files; < 0: unchanged */
  uint32_t drain_timeout_ms; /* SRV_MSG_DRAIN gives up after this; 0: 10 s */
  /* A local connection with no whole frame this long after connecting is closed (a peer
   * that connects and never speaks holds a descriptor); 0: 10 s. */
  uint32_t first_frame_timeout_ms;
  uint32_t max_connections; /* local connections at once, past it refused; 0: 1024 */
  /* Threads that read and write local connections' sockets (server/io_pool.h), at most 64;
   * 0: the loop thread does; SRV_IO_THREADS_AUTO: none below 8 cores, else an eighth of
   * them, at most 8. */
  uint32_t io_threads;
  /* Local connections, what a peer that sends slowly or stops mid-frame can hold
   * (server/server_local.c says why these): bytes of frames over 64 KiB being received, all
   * connections together; past it a connection waits, unread, for its turn, and a frame
   * larger than all of it is ACCEL_ELIMIT. 0: 1 GiB or a quarter of the machine's memory if
   * less, never below two max_message frames. */
  uint64_t max_partial_bytes;
  /* A local connection inside a frame that sends no byte (and takes no reply) for this long
   * is closed; 0: 30 s. */
  uint32_t frame_idle_timeout_ms;
  /* Bytes per second a frame over 64 KiB must arrive at, at least, measured over each
   * frame_idle_timeout_ms; slower, the connection is closed. 0: 1 MiB/s;
   * SRV_MIN_FRAME_RATE_OFF: no minimum. */
  uint32_t min_frame_rate;
  /* Bytes of clients' shared memory (server_shm.c) mapped at once, per connection and in all;
   * an attach past either is ACCEL_ELIMIT. 0: the machine's RAM and twice that. */
  uint64_t max_shared_bytes, max_shared_bytes_total;
  srv_security sec;
  /* http://HOST:PORT for GET /metrics (Prometheus) and /healthz; NULL: not served. */
  const char *metrics_listen;
  srv_http_limits metrics;
} srv_args;

/* [metrics] listen, parsed (server/http_url.c): PORT, :PORT, http://:PORT (host "": bound to
 * 127.0.0.1), http://HOST:PORT, http://[IPV6]:PORT. 0, or ACCEL_EINVAL (out untouched). */
RT_MUST_USE int srv_http_addr_parse(const char *url, srv_http_addr *out);

/* Sets up an nng listener for its URL before it starts (server/server_tls.c): tls+tcp://
 * gets the certificate, key and client verification of `sec`; plain tcp:// is refused
 * (ACCEL_EPERM, logged) unless sec->allow_plain_tcp. 0 or a negative accel error. */
RT_MUST_USE int srv_nng_listener_setup(nng_listener l, const char *url, const srv_security *sec);
/* Whether acceld may listen on url at all: ipc:// and tls+tcp:// yes, plain tcp:// only with
 * sec->allow_plain_tcp (else ACCEL_EPERM), anything else nng knows not (ACCEL_ENOTSUP); a
 * refusal is logged with what to change. */
RT_MUST_USE int srv_listen_allowed(const char *url, const srv_security *sec);

enum {
  /* ask: stop listening, refuse new sessions and ops (ACCEL_ECLOSED), and complete the
   * future once every op in flight has finished and its reply has been handed to nng (0),
   * or after drain_timeout_ms (ACCEL_ETIMEDOUT). */
  SRV_MSG_DRAIN = ACCEL_MSG_USER + 300,
  /* tell: data = a malloc'd proto_limits (taken). max_in_flight and max_memory apply to
   * existing sessions at once; max_buffers to new sessions; max_message to new frames. */
  SRV_MSG_LIMITS,
  SRV_MSG_SHM_REGISTERED, /* internal: a shared region's DMA registration finished */
  SRV_MSG_SHM_UNMAPPED,   /* internal: a region was unregistered and unmapped */
  SRV_MSG_ADOPT,          /* internal: shard 0 hands this shard an accepted connection */
  SRV_MSG_PARK,           /* internal: shard 0 reads this shard's state for a report */
};

#define SRV_IO_THREADS_AUTO UINT32_MAX

extern const accel_behavior srv_behavior;

/* The defaults acceld uses when nothing is configured. */
#define SRV_DEFAULT_MAX_MESSAGE (64u << 20)
#define SRV_DEFAULT_MAX_IN_FLIGHT 8192u
#define SRV_DEFAULT_MAX_BUFFERS 65536u
#define SRV_DEFAULT_MAX_MEMORY 0u /* no limit */
#define SRV_DEFAULT_FRAME_IDLE_TIMEOUT_MS 30000u
#define SRV_DEFAULT_MIN_FRAME_RATE (1u << 20)
#define SRV_MIN_FRAME_RATE_OFF UINT32_MAX

#endif
