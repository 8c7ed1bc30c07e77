/* The local transport, daemon side: a Unix stream socket carrying whole frames back to back
 * (proto/local.h has the client's side). The protocol runs here, on the runtime's loop; the
 * socket's reads and writes run on acceld's I/O threads (server/io_pool.h), which hand the
 * loop bytes and take its replies.
 *
 * Why not nng's ipc://: with Debian 12's nng 1.5.2 one bare connect and close locks its
 * listener (nng issue 1518) and clients that die with replies in flight wedge its pipe
 * reaper, after which no session is ever freed and nng_close() hangs. Here every connection
 * is a uv_pipe_t of ours: a peer that sends bytes that are not ours, or over the frame limit,
 * or goes away at any point, is closed and its session stopped at once; nothing it does
 * reaches another connection. It also gives the peer's credentials (SO_PEERCRED, checked
 * against the allowlist at accept) and descriptor passing (SCM_RIGHTS: the shared-memory
 * data plane, server/server_shm.c).
 *
 * Flow control: a connection whose requests hold too many bytes (writes waiting for their
 * turn) or whose replies wait to be written (a client that does not read) is not read from
 * until they drain: the kernel's socket buffer then stops the client. Nothing a peer sends
 * is queued without bound.
 *
 * What peers can make the daemon hold while frames arrive. Frames up to LINK_INBUF bytes
 * are read through the connection's staging buffer (allocated with it). A larger frame is
 * read straight into a message of its size, allocated when its header arrives; all
 * connections together may hold max_partial_bytes of such frames. Each is charged whole
 * when it starts, not as its bytes come: a frame that has started can always finish, so
 * connections holding parts of frames can never wait on each other for room (charged as
 * they arrive, N half-received frames could fill the budget and none could complete). A
 * connection whose next frame does not fit waits, unread, in a first-come-first-served
 * queue, and starts when frames that finished or whose peers left release their bytes; a
 * frame larger than the whole budget could never start and is ACCEL_ELIMIT. A peer that
 * holds its place and stops sending is closed after frame_idle_timeout_ms without a byte
 * (or without taking a reply, while its unread replies pause it); one that trickles a large
 * frame below min_frame_rate over such a span is closed too, so a charge is always given
 * back in bounded time. Time the daemon itself pauses a connection (its ops hold too much,
 * or it waits for room) is not counted.
 *
 * Descriptors: the listener accepts by itself rather than through uv_listen, because at the
 * process's descriptor limit libuv's answer (uv__emfile_trick) accepts and closes every
 * waiting connection unanswered. Here a reserve descriptor is given up for a moment, the
 * connection taken, told ACCEL_EBUSY (as past max_connections) and closed, and the reserve
 * taken back; the daemon logs it, at most once a second. Loop thread only. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/local.h"
#include "proto/local_rings.h"
#include "proto/stream.h"
#include "runtime/alloc.h"
#include "runtime/error_detail.h"
#include "runtime/loop.h"
#include "server/io_pool.h"
#include "server/server_shards.h"
#include "server/server_transport.h"

#define LINK_INBUF (64u << 10) /* frames up to this size are read through a staging buffer */
#define LINK_BACKLOG 511
/* Ops in flight per connection before reading pauses (it resumes at half): a client that
 * pipelines freely is slowed by its socket rather than refused (EBUSY), and it holds few ops
 * inside the daemon, where every queue it fills is one another client's op waits in. Enough
 * to keep a device busy: one client pipelining tiny GPU ops moves as much with 32 as with
 * 4096; beside 8 that flood, a light client's p99 was 1.3x lower (docs/PERFORMANCE.md, "A
 * light client beside a flood"). */
#define LINK_MAX_OPS 32u
/* Frames made from one connection's bytes per turn while other connections have ops in
 * flight; the rest waits for a later turn, behind the others' (a flooding client's 256 ops
 * read at once made a light client's frame wait for all of them). Alone, it reads on. One a
 * turn for a connection with several ops in flight while a light client waits
 * (frames_per_turn). */
#define LINK_FRAMES_PER_TURN 4u
#define LINK_ACCEPTS_PER_TURN 64 /* connections taken per wakeup before other handles run */

struct srv_link {
  srv_iost *st;     /* the socket, served by an I/O thread */
  uv_timer_t first; /* closes a peer that sends no whole frame in time */
  uv_timer_t idle;  /* inside a frame: closes a peer that stalls or trickles */
  bool first_open, idle_open, idle_armed;
  int open_handles; /* the socket and timers: freed when all have closed */
  srv_server *s;
  srv_conn *conn; /* NULL once the record went away (the server stopped) */
  uint8_t *in;    /* staging (LINK_INBUF bytes, allocated with the link: reading never
                   * needs memory): in[in_off, in_off + in_len) is the start of the stream
                   * not yet made into frames */
  size_t in_off, in_len;
  uint32_t turn_frames; /* frames made in this turn */
  bool turn_over;       /* LINK_FRAMES_PER_TURN made: the rest waits for a later turn */
  nng_msg *big;         /* a frame larger than the staging buffer, read straight into it */
  size_t big_have;
  bool reading, closing;
  bool flow_paused;     /* link_flow: its requests or unwritten replies hold too much */
  bool queued;          /* waiting for room among the server's partial frames */
  uint64_t charged;     /* bytes of that room it holds: its frame in `big`, or granted */
  uint64_t want;        /* queued: the size of the frame it waits to start */
  srv_link *qnext;      /* the queue, in order of arrival */
  uint64_t progress_ms; /* loop time of the last byte read, or of a reply byte taken */
  uint64_t window_ms;   /* the rate's span: when it began, and bytes of `big` read since */
  uint64_t window_bytes;
  uint64_t out_bytes; /* reply bytes handed to the socket's thread, not yet written */
  char why[64];       /* what ended it, for the log */
};

typedef struct srv_listener {
  uv_poll_t poll;    /* the listening socket: connections are accepted here, not by libuv */
  uv_timer_t retry;  /* accepting again after a connection found no memory */
  uint64_t retry_ms; /* the last delay; 0 after a connection was taken */
  int open_handles;  /* the two handles above: freed when both have closed */
  bool poll_open;
  int fd;         /* the listening socket, -1 until made */
  int pending_fd; /* a connection accepted and not served yet (no memory for it), or -1 */
  int reserve;    /* /dev/null, given up for a moment at the descriptor limit; -1 if lost */
  uint64_t refused_log_ms; /* the last "descriptor limit" line, and refusals since */
  uint32_t refused;
  srv_server *s;
  const srv_transport *tp; /* its connections': local (a Unix socket) or tcp */
  char *name;              /* its URL, for the log */
  char *path;              /* a Unix socket's file; NULL for tcp:// */
  dev_t dev;               /* the socket file we made: unlinked at close only if it is still ours */
  ino_t ino;
} srv_listener;

static void link_close(srv_link *l, const char *why);
static void link_flow(srv_link *l);
static void link_set_reading(srv_link *l);
static void parse(srv_link *l);

static uint64_t loop_now(const srv_link *l) {
  return uv_now(rt_uv_loop(l->s->rt));
}

/* ---- credentials and the allowlist ---- */

static bool in_list(const uint32_t *list, uint32_t n, uint32_t v) {
  for (uint32_t i = 0; i < n; i++)
    if (list[i] == v)
      return true;
  return false;
}

/* Whether uid (primary group gid) belongs to one of the groups: its primary group, or a
 * supplementary one from the group database. */
static bool member_of(uint32_t uid, uint32_t gid, const uint32_t *gids, uint32_t n) {
  if (in_list(gids, n, gid))
    return true;
  struct passwd pw, *res = NULL;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) != 0 || res == NULL)
    return false;
  gid_t groups[256];
  int ng = 256;
  if (getgrouplist(pw.pw_name, gid, groups, &ng) < 0)
    return false;
  for (int i = 0; i < ng; i++)
    if (in_list(gids, n, (uint32_t)groups[i]))
      return true;
  return false;
}

static bool peer_allowed(const srv_server *s, const srv_conn *c) {
  const srv_security *sec = &s->args->sec;
  if (!c->tp->local)
    return true; /* tcp://: listened on only with allow_plain_tcp, which lets anyone in */
  if (sec->allow_any_local || c->peer_uid == 0 || c->peer_uid == (uint32_t)getuid())
    return true;
  if (in_list(sec->allow_uids, sec->nallow_uids, c->peer_uid))
    return true;
  if (sec->nallow_uids == 0 && sec->nallow_gids == 0) { /* default: the socket's group */
    uint32_t g = s->args->ipc_gid >= 0 ? (uint32_t)s->args->ipc_gid : (uint32_t)getgid();
    return member_of(c->peer_uid, c->peer_gid, &g, 1);
  }
  return member_of(c->peer_uid, c->peer_gid, sec->allow_gids, sec->nallow_gids);
}

static void read_credentials(srv_link *l, srv_conn *c) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  c->peer_pid = -1;
  c->peer_uid = c->peer_gid = UINT32_MAX; /* unknown: matches no allowlist but "any" */
  if (c->tp->local && getsockopt(srv_iost_fd(l->st), SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
    c->peer_pid = cr.pid;
    c->peer_uid = cr.uid;
    c->peer_gid = cr.gid;
  }
}

/* ---- writing ---- */

static void on_written(srv_iost *st, void *data, nng_msg *m, int status) {
  srv_link *l = data;
  size_t len = nng_msg_len(m);
  l->out_bytes -= len;
  l->s->local_out_bytes -= len;
  if (l->conn)
    l->conn->out_bytes -= len;
  srv_msg_give(l->s, m);
  if (status < 0 && status != UV_ECANCELED) {
    link_close(l, "write failed (peer gone)");
  } else if (!l->closing) {
    l->progress_ms = loop_now(l); /* the peer takes its replies: not idle */
    link_flow(l);
  }
}

/* Takes m: written now, or queued for the socket's thread, which writes it in order. */
void srv_local_send(srv_server *s, srv_conn *c, nng_msg *m) {
  srv_link *l = c->link;
  size_t len = nng_msg_len(m);
  int rc = l == NULL || l->closing ? ACCEL_ECLOSED : srv_iost_write(l->st, m, 0);
  if (rc != 0) {
    c->out_bytes -= len;
    srv_msg_give(s, m);
    if (rc == ACCEL_ENOMEM)
      link_close(l, "out of memory writing a reply");
    else if (rc == ACCEL_ESYS)
      link_close(l, "write failed (peer gone)");
    return;
  }
  l->out_bytes += len;
  s->local_out_bytes += len;
  link_flow(l);
}

/* ---- the partial-frame budget (all connections together) ---- */

enum { ADMIT_GO, ADMIT_WAIT, ADMIT_CLOSED };

/* 1 GiB, or a quarter of the machine's memory if less; never below two frames of
 * max_message, so that two clients can always send their largest frames at once. */
static uint64_t partial_default(const srv_server *s) {
  uint64_t v = 1ull << 30, ram = srv_ram_bytes();
  if (ram != 0 && ram / 4 < v)
    v = ram / 4;
  uint64_t two = 2ull * s->limits.max_message;
  return v < two ? two : v;
}

static void partial_init(srv_server *s) {
  if (s->partial_max != 0)
    return;
  s->partial_max = s->args->max_partial_bytes ? s->args->max_partial_bytes : partial_default(s);
  if (s->shard == 0)
    accel_log(ACCEL_LOG_INFO, "server", "local frames being received: at most %llu bytes at once",
              (unsigned long long)s->partial_max);
  if (s->partial_max < s->limits.max_message)
    accel_log(ACCEL_LOG_WARN, "server",
              "max_partial_bytes (%llu) is below max_message (%u): local frames larger than it "
              "are refused (ELIMIT)",
              (unsigned long long)s->partial_max, s->limits.max_message);
}

static void queue_push(srv_link *l, uint64_t want) {
  srv_server *s = l->s;
  l->queued = true;
  l->want = want;
  l->qnext = NULL;
  if (s->partial_tail)
    s->partial_tail->qnext = l;
  else
    s->partial_head = l;
  s->partial_tail = l;
}

static void queue_remove(srv_link *l) {
  srv_server *s = l->s;
  srv_link **p = &s->partial_head, *prev = NULL;
  while (*p != NULL && *p != l) {
    prev = *p;
    p = &(*p)->qnext;
  }
  if (*p == l) {
    *p = l->qnext;
    if (s->partial_tail == l)
      s->partial_tail = prev;
  }
  l->queued = false;
  l->qnext = NULL;
}

/* Gives room to the waiting connections, in order, while the first one's frame fits the
 * daemon's budget (every shard's frames count: server_shards.c): each is charged for it and
 * reads again (parsing the frame held in its staging buffer). A connection that closes as it
 * starts gives its room back to this same loop. */
void srv_local_partial_wake(srv_server *s) {
  if (s->stopped) /* its links wait for nothing now: no shard need tell it of room */
    srv_shards_partial_waiting(s, false);
  if (s->partial_waking || s->stopped)
    return;
  s->partial_waking = true;
  /* Said waiting before each try: a shard giving room back after a failed try sees it. */
  srv_shards_partial_waiting(s, s->partial_head != NULL);
  for (srv_link *l; (l = s->partial_head) != NULL && srv_shards_partial_take(s, l->want);) {
    queue_remove(l);
    s->partial_held += l->want;
    l->charged = l->want;
    link_set_reading(l);
  }
  srv_shards_partial_waiting(s, s->partial_head != NULL);
  s->partial_waking = false;
}

/* The link's frame finished, or the link closes: its room (or its place in line) goes. */
static void partial_release(srv_link *l) {
  bool moved = l->queued || l->charged != 0;
  if (l->queued)
    queue_remove(l);
  l->s->partial_held -= l->charged;
  srv_shards_partial_give(l->s, l->charged); /* other shards' waiters are told */
  l->charged = 0;
  if (moved)
    srv_local_partial_wake(l->s);
}

/* Whether a frame of flen bytes (over LINK_INBUF) may start now. It waits, reading paused,
 * behind any connection already waiting or while it does not fit; larger than the whole
 * budget it never could: the peer hears ELIMIT and is closed. */
static int partial_admit(srv_link *l, size_t flen, uint64_t id) {
  srv_server *s = l->s;
  if (l->charged != 0) /* granted while it waited */
    return ADMIT_GO;
  if (flen > s->partial_max) {
    s->frames_bad++;
    srv_conn_status(s, l->conn, id, ACCEL_ELIMIT);
    srv_conn_flush(s, l->conn);
    link_close(l, "frame over max_partial_bytes");
    return ADMIT_CLOSED;
  }
  if (s->partial_head == NULL && srv_shards_partial_take(s, flen)) {
    s->partial_held += flen;
    l->charged = flen;
    return ADMIT_GO;
  }
  queue_push(l, flen);
  /* Said waiting, then tried again: room another shard gave back meanwhile is seen here, or
   * that shard saw this one waiting and tells it (server_shards.c). Only this link is tried
   * here (the parse under way is its own: waking it would parse again inside it). */
  srv_shards_partial_waiting(s, true);
  if (s->partial_head == l && srv_shards_partial_take(s, flen)) {
    queue_remove(l);
    srv_shards_partial_waiting(s, s->partial_head != NULL);
    s->partial_held += flen;
    l->charged = flen;
    return ADMIT_GO;
  }
  link_set_reading(l); /* stops: the rest waits in the kernel's socket buffer */
  return ADMIT_WAIT;
}

/* ---- a peer that stalls or trickles inside a frame ---- */

static uint64_t idle_limit_ms(const srv_server *s) {
  uint32_t ms = s->args->frame_idle_timeout_ms;
  return ms ? ms : SRV_DEFAULT_FRAME_IDLE_TIMEOUT_MS;
}

static uint32_t min_rate(const srv_server *s) {
  uint32_t r = s->args->min_frame_rate;
  return r ? r : SRV_DEFAULT_MIN_FRAME_RATE;
}

/* Whether it is the peer's turn to make progress inside a frame: it is read from and has
 * part of a frame in, or it holds a large frame's room and its unread replies pause it.
 * Pauses of the daemon's own making (its ops hold too much, a wait for room, whole frames
 * waiting for the connection's next turn) are not. */
static bool idle_watched(const srv_link *l) {
  if (l->closing || l->queued)
    return false;
  return (l->reading && !l->turn_over && (l->in_len > 0 || l->big != NULL)) ||
         (l->big != NULL && l->out_bytes > 0);
}

static void on_idle_check(uv_timer_t *t);

/* The watch is armed and disarmed at least once per frame (a frame's op moves the flow
 * control mid-parse): the timer is left running when disarmed, and a check that finds the
 * watch off ends there, so a frame costs two stores, not a timer stop and start. A check that
 * comes early (the timer started for an earlier watch) re-arms it for what is left. */
static void idle_update(srv_link *l) {
  bool want = l->idle_open && idle_watched(l);
  if (want == l->idle_armed)
    return;
  l->idle_armed = want;
  if (!want)
    return;
  l->progress_ms = l->window_ms = loop_now(l);
  l->window_bytes = 0;
  if (!uv_is_active((uv_handle_t *)&l->idle))
    uv_timer_start(&l->idle, on_idle_check, idle_limit_ms(l->s), 0);
}

/* Bytes that arrived and are not read yet: a busy daemon, not an idle peer. */
static size_t bytes_waiting(srv_link *l) {
  if (!l->reading)
    return 0;
  return srv_iost_buffered(l->st) + srv_iost_unread(l->st);
}

/* Whether the frame in `big` came slower than min_frame_rate over the span of reading just
 * ended (at least frame_idle_timeout_ms long); the next span starts. */
static bool too_slow(srv_link *l, uint64_t now, size_t waiting, uint64_t limit) {
  if (l->big == NULL || !l->reading || now - l->window_ms < limit)
    return false;
  uint32_t rate = min_rate(l->s);
  bool slow = rate != SRV_MIN_FRAME_RATE_OFF &&
              (l->window_bytes + waiting) * 1000 < (uint64_t)rate * (now - l->window_ms);
  l->window_ms = now;
  l->window_bytes = 0;
  return slow;
}

static void on_idle_check(uv_timer_t *t) {
  srv_link *l = t->data;
  if (!l->idle_armed)
    return; /* disarmed since it started: it stops here */
  uint64_t now = uv_now(t->loop), limit = idle_limit_ms(l->s);
  size_t waiting = bytes_waiting(l);
  char why[64];
  if (waiting > 0)
    l->progress_ms = now;
  if (now - l->progress_ms >= limit) {
    snprintf(why, sizeof why, "no byte for %llu ms inside a frame: closed",
             (unsigned long long)limit);
    link_close(l, why);
    return;
  }
  if (too_slow(l, now, waiting, limit)) {
    link_close(l, "frame arriving below min_frame_rate: closed");
    return;
  }
  uint64_t next = l->progress_ms + limit;
  if (l->big != NULL && l->reading && l->window_ms + limit < next)
    next = l->window_ms + limit;
  uv_timer_start(t, on_idle_check, next > now ? next - now : 1, 0);
}

/* ---- reading ---- */

/* Where the next bytes go: the large frame being received, else the staging buffer. */
static uint8_t *read_target(srv_link *l, size_t *room) {
  if (l->big) {
    *room = nng_msg_len(l->big) - l->big_have;
    return (uint8_t *)nng_msg_body(l->big) + l->big_have;
  }
  /* What a short turn left moves to the start once the room after it is under half the
   * buffer, not after every turn: then a pipelining client's full buffer cost the loop up to
   * a 64 KiB copy a turn (callgrind: 2,609 of 7,864 instructions per op). */
  if (l->in_off > 0 && LINK_INBUF - l->in_off - l->in_len < LINK_INBUF / 2) {
    memmove(l->in, l->in + l->in_off, l->in_len);
    l->in_off = 0;
  }
  *room = LINK_INBUF - l->in_off - l->in_len;
  return l->in + l->in_off + l->in_len;
}

static void first_frame_seen(srv_link *l) {
  if (l->first_open && uv_is_active((uv_handle_t *)&l->first))
    uv_timer_stop(&l->first);
}

static void deliver(srv_link *l, nng_msg *m) {
  first_frame_seen(l);
  if (l->conn && !l->closing)
    srv_frame_on(l->s, l->conn, m);
  else
    nng_msg_free(m);
}

/* A header that cannot start a frame of ours: the stream cannot be resynchronised, so the
 * connection ends (with an answer first, if the peer speaks accel at all). */
/* The length of the frame starting at p (whole header there) and its request id, or 0 if
 * the connection is closed for it. */
static size_t frame_length(srv_link *l, const uint8_t *p, size_t have, uint64_t *id) {
  size_t flen;
  switch (proto_stream_scan(p, have, l->s->limits.max_message, &flen, id)) {
  case PROTO_SCAN_FRAME:
    return flen;
  case PROTO_SCAN_TOO_BIG:
    l->s->frames_bad++;
    srv_conn_status(l->s, l->conn, *id, ACCEL_ELIMIT);
    srv_conn_flush(l->s, l->conn);
    link_close(l, "frame over max_message");
    return 0;
  default: /* PROTO_SCAN_FOREIGN (the caller has a whole header) */
    l->s->frames_bad++;
    link_close(l, "not an accel frame: closed");
    return 0;
  }
}

/* Starts a frame too large for the staging buffer, once it has room: its `have` bytes so far
 * move into a message of its size and the rest is read straight into it. False if it waits
 * for room or the connection was closed. */
static bool start_big(srv_link *l, const uint8_t *p, size_t have, size_t flen, uint64_t id) {
  if (partial_admit(l, flen, id) != ADMIT_GO)
    return false;
  nng_msg *m;
  if (nng_msg_alloc(&m, flen) != 0) {
    link_close(l, "out of memory for a frame");
    return false;
  }
  memcpy(nng_msg_body(m), p, have);
  l->big = m;
  l->big_have = have;
  l->window_ms = loop_now(l);
  l->window_bytes = 0;
  return true;
}

/* Whether other connections have ops in flight: then a connection's turn is short. */
static bool others_busy(const srv_link *l) {
  return l->conn != NULL && l->s->ops_in_flight > l->conn->ops;
}

/* Frames per turn while others have work: LINK_FRAMES_PER_TURN, or one for a connection with
 * several ops in flight while another waits for the reply to its only one (a light client
 * beside a flood: each of the flood's frames is a turn of the loop the light op waits for). */
static uint32_t frames_per_turn(const srv_link *l) {
  const srv_conn *c = l->conn;
  if (c == NULL || srv_conn_own_ops(c) <= 1)
    return LINK_FRAMES_PER_TURN;
  return l->s->light_conns > 0 ? 1 : LINK_FRAMES_PER_TURN;
}

/* A frame was made: past frames_per_turn in a turn while others have work, the turn ends and
 * the connection asks for another, behind the other connections' (its socket's thread has
 * the rest, or the staging buffer does). */
static void turn_count(srv_link *l) {
  if (++l->turn_frames < frames_per_turn(l) || !others_busy(l))
    return;
  l->turn_over = true;
  srv_iost_read_later(l->st);
}

static void turn_start(srv_link *l) {
  l->turn_frames = 0;
  l->turn_over = false;
}

/* Makes whole frames of the staging buffer. The rest of a frame that fits the buffer is
 * read into it; a larger frame continues in `big`. */
static void parse(srv_link *l) {
  size_t at = 0;
  const uint8_t *in = l->in + l->in_off;
  while (!l->closing && l->reading && !l->turn_over && l->in_len - at >= PROTO_HEADER_SIZE) {
    const uint8_t *p = in + at;
    uint64_t id;
    size_t have = l->in_len - at, flen = frame_length(l, p, have, &id);
    if (flen == 0)
      return;
    if (flen > have) {
      if (flen > LINK_INBUF && start_big(l, p, have, flen, id))
        at = l->in_len; /* those bytes are in `big` now */
      break;
    }
    nng_msg *m = srv_msg_take(l->s, p, flen);
    if (m == NULL) {
      link_close(l, "out of memory for a frame");
      return;
    }
    at += flen;
    deliver(l, m);
    turn_count(l);
    link_flow(l); /* may pause: the rest waits in the staging buffer */
  }
  if (l->closing)
    return;
  l->in_off = at == l->in_len ? 0 : l->in_off + at; /* the rest stays (read_target) */
  l->in_len -= at;
}

#define LINK_MAX_PENDING_FDS 8

/* Descriptors a peer sent beyond the few its attach frames are about to take: a peer that
 * sends them unasked could exhaust the daemon's descriptors, so it is closed. Counted once
 * every byte read was made into frames (descriptors come ahead of their bytes). */
static bool fds_ok(srv_link *l) {
  if (srv_iost_buffered(l->st) > 0 || srv_iost_fds_pending(l->st) <= LINK_MAX_PENDING_FDS ||
      srv_iost_unread(l->st) > 0) /* on rings: their frames may still be in the client's ring */
    return true;
  link_close(l, "descriptors it did not announce");
  return false;
}

/* The descriptor sent with the attach frame being handled: descriptors are queued in the order
 * of their frames, so the first is this frame's. */
int srv_local_take_fd(srv_conn *c) {
  srv_link *l = c->link;
  int fd = l != NULL && l->st != NULL ? srv_iost_take_fd(l->st) : -1;
  return fd >= 0 ? fd : ACCEL_ENOENT;
}

bool srv_local_use_rings(srv_server *s, srv_conn *c, int fd) {
  srv_link *l = c->link;
  size_t len = 0;
  if (l == NULL || l->st == NULL || srv_shm_check_fd(fd, &len) != 0 || len != PROTO_RINGS_BYTES)
    return false;
  void *p = mmap(NULL, PROTO_RINGS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return false;
  if (srv_iost_use_rings(l->st, p))
    return true;
  munmap(p, PROTO_RINGS_BYTES);
  return false;
}

struct srv_iost *srv_local_stream(srv_conn *c) {
  srv_link *l = c->link;
  return l != NULL && !l->closing ? l->st : NULL;
}

/* n bytes came into read_target's place, or the stream ended (n < 0). */
static void on_read(srv_link *l, ssize_t n) {
  if (n < 0) {
    bool partial = l->in_len || l->big; /* a half-written frame counts as a bad one */
    l->s->frames_bad += partial;
    link_close(l, n == UV_EPROTO     ? "descriptors it did not announce"
                  : n == UV_EINVAL   ? "a shared ring position it cannot have written"
                  : n == UV_EMSGSIZE ? "bytes beside its shared rings"
                  : n != UV_EOF      ? "read error"
                  : partial          ? "closed mid-frame"
                                     : "closed");
    return;
  }
  l->progress_ms = loop_now(l);
  if (l->big) {
    l->big_have += (size_t)n;
    l->window_bytes += (size_t)n;
    if (l->big_have == nng_msg_len(l->big)) {
      nng_msg *m = l->big;
      l->big = NULL;
      deliver(l, m);
      partial_release(l);
    }
  } else {
    l->in_len += (size_t)n;
    parse(l);
    if (!l->closing && l->reading && !l->turn_over) /* every whole frame made */
      fds_ok(l);
  }
  if (!l->closing)
    idle_update(l);
}

#define LINK_READS_PER_TURN 32 /* then other connections' bytes get a turn */

/* The socket's thread has bytes (or the end) for us: taken while the link reads, at most
 * LINK_READS_PER_TURN pieces at once (the thread refills the ring meanwhile). */
static void on_readable(srv_iost *st, void *data) {
  srv_link *l = data;
  turn_start(l);
  if (l->in_len > 0 && l->big == NULL && l->reading && !l->closing) {
    parse(l); /* frames a short turn left in the staging buffer */
    if (!l->closing && l->reading && !l->turn_over)
      fds_ok(l);
    if (!l->closing)
      idle_update(l); /* parse's last look was before the staging buffer emptied */
  }
  for (int i = 0; l->reading && !l->closing && !l->turn_over; i++) {
    if (i == LINK_READS_PER_TURN) {
      srv_iost_read_later(st);
      return;
    }
    size_t room;
    uint8_t *at = read_target(l, &room);
    ssize_t n = srv_iost_read(st, at, room);
    if (n == 0) { /* on rings descriptors come without bytes: not more than frames need */
      if (srv_iost_fds_pending(st) > 0)
        fds_ok(l);
      return;
    }
    on_read(l, n);
  }
}

/* ---- flow control ---- */

/* Reads while nothing holds the link back: its own flow control or a wait for room. On
 * resuming, frames that arrived before the pause are parsed. */
static void link_set_reading(srv_link *l) {
  bool want = !l->closing && !l->flow_paused && !l->queued;
  if (want && !l->reading) {
    l->reading = true;
    turn_start(l);
    srv_iost_want_read(l->st, true); /* bytes read ahead meanwhile come in a later callback */
    l->window_ms = loop_now(l);      /* time paused is not the peer's */
    l->window_bytes = 0;
    parse(l);
  } else if (!want && l->reading) {
    srv_iost_want_read(l->st, false);
    l->reading = false;
  }
  if (!l->closing)
    idle_update(l);
}

/* Reading pauses while the connection's requests or unwritten replies hold more than its
 * budget, or it has LINK_MAX_OPS ops in flight, and resumes below half of both (hysteresis:
 * no flapping per op). */
static void link_flow(srv_link *l) {
  srv_conn *c = l->conn;
  if (c == NULL || l->closing)
    return;
  uint64_t budget = srv_conn_budget(l->s), held = c->req_bytes + c->out_bytes;
  if (held > budget || c->ops >= LINK_MAX_OPS)
    l->flow_paused = true;
  else if (held <= budget / 2 && c->ops <= LINK_MAX_OPS / 2)
    l->flow_paused = false;
  link_set_reading(l);
}

/* Ops may finish after the socket closed (link NULL): nothing left to pause then. */
void srv_local_flow(srv_server *s, srv_conn *c) {
  if (c->link)
    link_flow(c->link);
}

/* ---- closing ---- */

/* The socket or a timer closed: the link goes with the last of them. */
static void link_part_closed(srv_link *l) {
  srv_server *s = l->s;
  if (--l->open_handles > 0)
    return;
  if (l->conn) {
    srv_conn *c = l->conn;
    c->link = NULL;
    accel_log(ACCEL_LOG_INFO, "server", "%s %u: %s", c->tp->name, c->pipe, l->why);
    srv_conn_end(s, c);
  }
  if (l->big)
    nng_msg_free(l->big);
  rt_free(l);
  srv_release(s);
}

static void on_timer_closed(uv_handle_t *h) {
  link_part_closed(h->data);
}

static void on_socket_closed(void *data) {
  srv_link *l = data;
  l->st = NULL; /* freed once this returns; the timers may close later */
  link_part_closed(l);
}

/* The socket and timers close in later callbacks; the room its frame held goes at once. */
static void link_close(srv_link *l, const char *why) {
  if (l->closing)
    return;
  l->closing = true;
  snprintf(l->why, sizeof l->why, "%s", why);
  partial_release(l);
  if (l->first_open)
    uv_close((uv_handle_t *)&l->first, on_timer_closed);
  if (l->idle_open)
    uv_close((uv_handle_t *)&l->idle, on_timer_closed);
  srv_iost_close(l->st);
}

/* ---- accepting ---- */

static void on_first_frame_late(uv_timer_t *t) {
  link_close(t->data, "no frame in time: closed");
}

static void start_timers(srv_server *s, srv_link *l) {
  uint32_t ms = s->args->first_frame_timeout_ms ? s->args->first_frame_timeout_ms : 10000;
  uv_timer_init(rt_uv_loop(s->rt), &l->first); /* cannot fail: it only fills the handle */
  uv_timer_init(rt_uv_loop(s->rt), &l->idle);
  l->first.data = l->idle.data = l;
  l->first_open = l->idle_open = true;
  l->open_handles += 2;
  uv_timer_start(&l->first, on_first_frame_late, ms, 0);
}

static void log_peer(const srv_link *l, const char *what) {
  const srv_conn *c = l->conn;
  char peer[80];
  if (c->tp->local) {
    accel_log(ACCEL_LOG_INFO, "server", "local %u: %s (uid %u, gid %u, pid %d)", c->pipe, what,
              c->peer_uid, c->peer_gid, (int)c->peer_pid);
    return;
  }
  srv_tcp_peer_name(srv_iost_fd(l->st), peer, sizeof peer);
  accel_log(ACCEL_LOG_INFO, "server", "tcp %u: %s (%s)", c->pipe, what, peer);
}

/* A refused peer hears why in a REPLY with request id 0 (about the connection itself), then
 * the connection closes. */
static void refuse_peer(srv_server *s, srv_link *l, int status, const char *why) {
  log_peer(l, why);
  srv_conn_status(s, l->conn, 0, status);
  srv_conn_flush(s, l->conn); /* small: the socket takes it at once */
  link_close(l, why);
}

/* Whether the new peer is turned away (it was told why). */
static bool refused(srv_server *s, srv_link *l) {
  uint32_t max = s->args->max_connections ? s->args->max_connections : 1024;
  if (s->draining)
    refuse_peer(s, l, ACCEL_ECLOSED, "refused: draining");
  else if (!peer_allowed(s, l->conn))
    refuse_peer(s, l, ACCEL_EPERM, "refused: not in allow_users/allow_groups");
  else if (srv_shards_conns(s) > max) /* every shard's, this one counted */
    refuse_peer(s, l, ACCEL_EBUSY, "refused: max_connections reached");
  return l->closing;
}

/* Serves the accepted connection fd with l, c and st; the link owns fd from here on. */
static void link_start(srv_server *s, srv_link *l, srv_conn *c, srv_iost *st, int fd) {
  static const srv_iost_ops link_ops = {
      .readable = on_readable, .written = on_written, .closed = on_socket_closed};
  *l = (srv_link){.s = s, .conn = c, .in = (uint8_t *)(l + 1), .open_handles = 1};
  s->refs++; /* released in link_part_closed */
  c->link = l;
  l->st = st;
  srv_iost_start(st, s->io, fd, &link_ops, l);
  read_credentials(l, c);
  if (refused(s, l))
    return;
  log_peer(l, "connected");
  start_timers(s, l);
  link_set_reading(l);
}

/* [daemon] io_threads: a number, or SRV_IO_THREADS_AUTO (srv_iopool_default_threads),
 * shared by the shards: shard k gets its part (the first ones one more where they do not
 * divide evenly), one at least where there are any. */
static uint32_t io_threads_of(const srv_server *s, uint32_t shard) {
  uint32_t n = s->args->io_threads, shards = s->shards->n;
  n = n == SRV_IO_THREADS_AUTO ? srv_iopool_default_threads() : n;
  uint32_t part = n / shards + (shard < n % shards);
  return n == 0 ? 0 : part ? part : 1;
}

/* Every shard's I/O threads, for the log. */
static uint32_t io_threads_all(const srv_server *s) {
  uint32_t all = 0;
  for (uint32_t k = 0; k < s->shards->n; k++)
    all += io_threads_of(s, k);
  return all;
}

int srv_local_start(srv_server *s) {
  partial_init(s);
  if (s->io != NULL)
    return 0;
  int rc = srv_iopool_start(&s->io, rt_uv_loop(s->rt), io_threads_of(s, s->shard));
  if (rc != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "cannot start the I/O threads: %s", accel_strerror(rc));
    return rc;
  }
  srv_iopool_post_through(s->io, s->rt, rt_loop_index(s->rt));
  return 0;
}

/* A local connection's id, unique in the daemon: shard k of n numbers k, k + n, ... */
static uint32_t srv_local_next_id(srv_server *s) {
  uint32_t id = s->next_local_id++ * s->shards->n + s->shard;
  return (id & ~SRV_LOCAL_ID_BIT) | SRV_LOCAL_ID_BIT;
}

static void on_accept_retry(uv_timer_t *t);

static int reserve_open(void) {
  return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static int listener_watch(srv_listener *ls, bool on);

/* No memory for a new connection (or no descriptor to refuse one with): the listener stops
 * watching and tries again from a timer, 1 ms then doubling up to 1 s. A connection already
 * accepted is kept for then; the others wait in the listen queue. Nothing is refused or
 * lost. */
static void accept_later(srv_listener *ls, const char *what) {
  listener_watch(ls, false);
  ls->retry_ms = ls->retry_ms == 0 ? 1 : ls->retry_ms >= 512 ? 1000 : ls->retry_ms * 2;
  accel_log(ACCEL_LOG_WARN, "server", "%s: %s: trying again in %llu ms", ls->name, what,
            (unsigned long long)ls->retry_ms);
  if (uv_timer_start(&ls->retry, on_accept_retry, ls->retry_ms, 0) != 0)
    accel_log(ACCEL_LOG_ERROR, "server",
              "%s: cannot retry: new clients wait for the next connection", ls->name);
}

/* A REPLY with request id 0 (about the connection), as refuse_peer sends, straight to the
 * socket: its buffer is empty, it takes these few bytes at once. */
void srv_local_send_busy(int fd) {
  uint8_t head[PROTO_REPLY_HEAD_SIZE];
  if (proto_encode_reply_head(head, 0, ACCEL_EBUSY, 0) == 0 &&
      send(fd, head, sizeof head, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof head) {
    /* the peer left already: nobody to tell */
  }
}

/* One line a second at most, with the count since the last line. */
static void note_refused(srv_listener *ls) {
  uint64_t now = srv_now_ms(ls->s);
  ls->refused++;
  if (ls->refused_log_ms != 0 && now - ls->refused_log_ms < 1000)
    return;
  struct rlimit rl = {0};
  getrlimit(RLIMIT_NOFILE, &rl);
  accel_log(ACCEL_LOG_WARN, "server",
            "%s: at the descriptor limit (RLIMIT_NOFILE %llu): %u new connection(s) "
            "refused with EBUSY",
            ls->name, (unsigned long long)rl.rlim_cur, ls->refused);
  ls->refused_log_ms = now;
  ls->refused = 0;
}

/* accept() found no descriptor (EMFILE, ENFILE). The reserve makes room for one connection,
 * which hears ACCEL_EBUSY and is closed, and is taken back. True if there may be more to
 * take now. */
static bool refuse_at_fd_limit(srv_listener *ls) {
  if (ls->reserve >= 0)
    close(ls->reserve);
  int fd = accept4(ls->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), err = errno;
  if (fd >= 0) {
    srv_local_send_busy(fd);
    close(fd);
    note_refused(ls);
  }
  ls->reserve = reserve_open();
  if (fd >= 0 && ls->reserve >= 0)
    return true;
  if (fd < 0 && (err == EAGAIN || err == EWOULDBLOCK))
    return false;
  accept_later(ls, "at the descriptor limit, with none to refuse a connection with");
  return false;
}

/* accept() failed: true if the next may succeed at once. */
static bool accept_error(srv_listener *ls, int err) {
  if (err == EINTR || err == ECONNABORTED)
    return true;
  if (err == EMFILE || err == ENFILE)
    return refuse_at_fd_limit(ls);
  if (err != EAGAIN && err != EWOULDBLOCK)
    accept_later(ls, strerror(err));
  return false;
}

/* Takes one connection (the one kept back for lack of memory first): false when there is
 * none now or the listener must wait. */
static bool accept_one(srv_listener *ls) {
  srv_server *s = ls->s;
  int fd = ls->pending_fd;
  ls->pending_fd = -1;
  if (fd < 0)
    fd = accept4(ls->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0)
    return accept_error(ls, errno);
  if (srv_shards_hand_off(s, fd, ls->tp))
    return true;
  srv_link *l = rt_malloc(sizeof *l + LINK_INBUF);
  srv_iost *st = l ? srv_iost_new() : NULL;
  srv_conn *c = st ? srv_conn_new(s, srv_local_next_id(s), ls->tp) : NULL;
  if (c == NULL) {
    if (st)
      srv_iost_discard(st);
    rt_free(l);
    ls->pending_fd = fd;
    accept_later(ls, "out of memory for a new connection");
    return false;
  }
  ls->retry_ms = 0;
  if (!ls->tp->local)
    srv_tcp_accepted(fd);
  link_start(s, l, c, st, fd);
  return true;
}

void srv_local_adopt(srv_server *s, int fd, const srv_transport *tp, _Atomic uint32_t *handed) {
  srv_link *l = s->stopped || srv_local_start(s) != 0 ? NULL : rt_malloc(sizeof *l + LINK_INBUF);
  srv_iost *st = l ? srv_iost_new() : NULL;
  srv_conn *c = st ? srv_conn_new(s, srv_local_next_id(s), tp) : NULL;
  atomic_fetch_sub_explicit(handed, 1, memory_order_relaxed); /* counted here now, or gone */
  if (c == NULL) {
    if (st)
      srv_iost_discard(st);
    rt_free(l);
    if (!s->stopped)
      accel_log(ACCEL_LOG_WARN, "server", "shard %u: no memory for a new connection: refused",
                s->shard);
    srv_local_send_busy(fd);
    close(fd);
    return;
  }
  if (!tp->local)
    srv_tcp_accepted(fd);
  link_start(s, l, c, st, fd);
}

static void accept_some(srv_listener *ls) {
  for (int i = 0; i < LINK_ACCEPTS_PER_TURN && !ls->s->stopped && accept_one(ls); i++) {
  }
}

static void on_listener_ready(uv_poll_t *p, int status, int events) {
  if (status == 0)
    accept_some(p->data);
  else /* libuv stopped watching the socket: watch it again later */
    accept_later(p->data, uv_strerror(status));
}

static int listener_watch(srv_listener *ls, bool on) {
  if (!ls->poll_open)
    return ACCEL_ESYS;
  if (!on)
    return uv_poll_stop(&ls->poll) == 0 ? 0 : ACCEL_ESYS;
  return uv_poll_start(&ls->poll, UV_READABLE, on_listener_ready) == 0 ? 0 : ACCEL_ESYS;
}

static void on_accept_retry(uv_timer_t *t) {
  srv_listener *ls = t->data;
  if (ls->s->stopped)
    return;
  if (ls->reserve < 0)
    ls->reserve = reserve_open();
  if (listener_watch(ls, true) != 0)
    accel_log(ACCEL_LOG_ERROR, "server", "%s: cannot watch for connections", ls->name);
  accept_some(ls);
}

/* ---- listening ---- */

/* Whether a daemon answers on `path` now: a second acceld must not take the socket of a live
 * one (it would cut it off from every new client). A socket file nobody answers is stale.
 * *pid: the one answering, where the kernel says (SO_PEERCRED), else 0. */
static bool path_is_live(const char *path, pid_t *pid) {
  struct ucred cred = {0};
  socklen_t len = sizeof cred;
  int fd = proto_local_connect(path);
  *pid = 0;
  if (fd < 0)
    return fd != ACCEL_ECLOSED; /* EPERM: someone's socket we may not even use */
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    *pid = cred.pid;
  close(fd);
  return true;
}

/* acceld's "cannot start: ..." line ends with these details (daemon/main.c). */
static int prepare_path(const char *path) {
  struct stat st;
  pid_t pid;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? 0 : rt_error_detail(ACCEL_ESYS, "ipc://%s: %s", path, strerror(errno));
  if (!S_ISSOCK(st.st_mode)) {
    accel_log(ACCEL_LOG_ERROR, "server", "%s exists and is not a socket", path);
    return rt_error_detail(ACCEL_EBUSY, "ipc://%s: the file exists and is not a socket", path);
  }
  if (path_is_live(path, &pid)) {
    accel_log(ACCEL_LOG_ERROR, "server", "address in use by another acceld (%s)", path);
    return pid > 0
               ? rt_error_detail(ACCEL_EBUSY, "ipc://%s: address in use by another acceld (pid %d)",
                                 path, (int)pid)
               : rt_error_detail(ACCEL_EBUSY, "ipc://%s: address in use by another acceld", path);
  }
  accel_log(ACCEL_LOG_INFO, "server", "%s: removing a stale socket file", path);
  return unlink(path) == 0 ? 0 : ACCEL_ESYS;
}

/* Mode and group are set before listen(): until then every connect is refused, so no peer
 * ever sees the socket with looser permissions. */
static int set_owner(srv_server *s, srv_listener *ls) {
  const srv_args *a = s->args;
  struct stat st;
  if ((a->ipc_mode >= 0 && chmod(ls->path, (mode_t)a->ipc_mode) != 0) ||
      (a->ipc_gid >= 0 && chown(ls->path, (uid_t)-1, (gid_t)a->ipc_gid) != 0) ||
      stat(ls->path, &st) != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "%s: mode or group: %s", ls->path, strerror(errno));
    return ACCEL_ESYS;
  }
  ls->dev = st.st_dev;
  ls->ino = st.st_ino;
  return 0;
}

static void on_listener_closed(uv_handle_t *h) {
  srv_listener *ls = h->data;
  srv_server *s = ls->s;
  if (--ls->open_handles > 0)
    return;
  int fds[] = {ls->fd, ls->pending_fd, ls->reserve};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  rt_free(ls->path);
  rt_free(ls->name);
  rt_free(ls);
  srv_release(s);
}

static int make_socket(srv_listener *ls) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t len = strlen(ls->path);
  if (len >= sizeof sa.sun_path) {
    accel_log(ACCEL_LOG_ERROR, "server", "cannot bind %s: the path is too long", ls->path);
    return ACCEL_EINVAL;
  }
  memcpy(sa.sun_path, ls->path, len + 1);
  ls->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (ls->fd < 0 || bind(ls->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    const char *why = strerror(errno);
    accel_log(ACCEL_LOG_ERROR, "server", "cannot bind %s: %s", ls->path, why);
    return rt_error_detail(ACCEL_EBUSY, "ipc://%s: bind: %s", ls->path, why);
  }
  return 0;
}

static int bind_unix(srv_server *s, srv_listener *ls) {
  int rc = prepare_path(ls->path);
  if (rc == 0)
    rc = make_socket(ls);
  return rc == 0 ? set_owner(s, ls) : rc;
}

static int bind_listener(srv_server *s, srv_listener *ls) {
  int rc = ls->path ? bind_unix(s, ls) : srv_tcp_bind(ls->name, &ls->fd);
  if (rc == 0 && listen(ls->fd, LINK_BACKLOG) != 0)
    rc = ACCEL_ESYS;
  if (rc != 0 || uv_poll_init(rt_uv_loop(s->rt), &ls->poll, ls->fd) != 0)
    return rc != 0 ? rc : ACCEL_ESYS;
  ls->poll.data = ls;
  ls->poll_open = true;
  ls->open_handles++;
  ls->reserve = reserve_open(); /* none: at the limit, connections wait in the queue */
  return listener_watch(ls, true);
}

/* A listener for `name` (its URL), on the Unix socket file `path` or, with path NULL, on
 * TCP; its connections get `tp`. */
static int listen_on(srv_server *s, const char *name, const char *path, const srv_transport *tp) {
  srv_listener *ls = rt_calloc(1, sizeof *ls);
  char *name_copy = rt_strdup(name), *path_copy = path ? rt_strdup(path) : NULL;
  if (ls == NULL || name_copy == NULL || (path && path_copy == NULL) ||
      s->nlocals == SRV_MAX_LOCAL) {
    rt_free(ls);
    rt_free(name_copy);
    rt_free(path_copy);
    return ACCEL_ENOMEM;
  }
  int rc = srv_local_start(s);
  if (rc != 0) {
    rt_free(ls);
    rt_free(name_copy);
    rt_free(path_copy);
    return rc;
  }
  *ls = (srv_listener){.s = s, .tp = tp, .name = name_copy, .path = path_copy};
  ls->fd = ls->pending_fd = ls->reserve = -1;
  uv_timer_init(rt_uv_loop(s->rt), &ls->retry); /* cannot fail: it only fills the handle */
  ls->retry.data = ls;
  ls->open_handles = 1; /* and the poll handle, once there is a socket to watch */
  s->refs++;
  s->locals[s->nlocals++] = ls;
  rc = bind_listener(s, ls);
  if (rc == 0)
    accel_log(ACCEL_LOG_INFO, "server", "listening on %s (%u I/O threads)%s", name,
              s->shards->n > 1 ? io_threads_all(s) : srv_iopool_threads(s->io),
              s->shards->n > 1 ? ", over the shards" : "");
  return rc;
}

int srv_local_listen(srv_server *s, const char *path) {
  char name[PATH_MAX + 8];
  snprintf(name, sizeof name, "ipc://%s", path);
  return listen_on(s, name, path, &srv_transport_local);
}

int srv_tcp_listen(srv_server *s, const char *url) {
  int rc = srv_listen_allowed(url, &s->args->sec);
  return rc == 0 ? listen_on(s, url, NULL, &srv_transport_tcp) : rc;
}

/* Stops accepting: the socket file goes (if it is still the one we made), so clients see
 * "no daemon" at once rather than a connection that is never answered. */
static void close_listener(srv_listener *ls) {
  struct stat st;
  if (ls->ino && lstat(ls->path, &st) == 0 && st.st_dev == ls->dev && st.st_ino == ls->ino)
    unlink(ls->path);
  if (ls->poll_open)
    uv_close((uv_handle_t *)&ls->poll, on_listener_closed);
  uv_close((uv_handle_t *)&ls->retry, on_listener_closed);
}

void srv_local_stop_listening(srv_server *s) {
  for (uint32_t i = 0; i < s->nlocals; i++)
    close_listener(s->locals[i]);
  s->nlocals = 0;
}

/* The server stops: the socket closes (if it has not yet); the record is freed by the
 * caller, so the link forgets it. */
void srv_local_close(srv_server *s, srv_conn *c) {
  if (c->link == NULL)
    return;
  c->link->conn = NULL;
  link_close(c->link, "server stopped");
  c->link = NULL;
}
