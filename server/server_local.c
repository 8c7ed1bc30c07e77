/* The local transport, daemon side: a Unix stream socket served by libuv on the runtime's
 * loop, carrying whole frames back to back (proto/local.h has the client's side).
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
 * is queued without bound. Loop thread only. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/local.h"
#include "proto/stream.h"
#include "runtime/alloc.h"
#include "runtime/loop.h"
#include "server/server_priv.h"

#define LINK_INBUF (64u << 10) /* frames up to this size are read through a staging buffer */
#define LINK_BACKLOG 511
/* Ops in flight per connection before reading pauses: below the session's mailbox (16384),
 * so a client that pipelines freely is slowed by its socket rather than refused (EBUSY). */
#define LINK_MAX_OPS 4096u

typedef struct link_write {
  uv_write_t req;
  srv_link *link;
  nng_msg *m;
  size_t len; /* the bytes this request writes (counted in out_bytes) */
} link_write;

struct srv_link {
  uv_pipe_t pipe;   /* first: the handle's data is the link */
  uv_timer_t first; /* closes a peer that sends no whole frame in time */
  bool first_open;
  int open_handles; /* pipe and timer: freed when both have closed */
  srv_server *s;
  srv_conn *conn; /* NULL once the record went away (the server stopped) */
  uint8_t *in;    /* staging (LINK_INBUF bytes, allocated with the link: reading never
                   * needs memory): the start of the stream not yet made into frames */
  size_t in_len;
  nng_msg *big; /* a frame larger than the staging buffer, read straight into it */
  size_t big_have;
  bool reading, closing;
  uint64_t out_bytes; /* reply bytes handed to uv_write, not yet written */
  link_write spare;   /* the first queued write needs no allocation (one is the usual most) */
  bool spare_busy;
  unsigned fds_owed; /* descriptors of attach frames that could not take theirs (no memory):
                      * still queued ahead of the next frame's, so they are discarded first */
  char why[48];      /* what ended it, for the log */
};

typedef struct srv_listener {
  uv_pipe_t pipe;
  uv_timer_t retry;  /* accepting again after a connection found no memory */
  uint64_t retry_ms; /* the last delay; 0 after a connection was taken */
  int open_handles;  /* the two handles above: freed when both have closed */
  srv_server *s;
  char *path;
  dev_t dev; /* the socket file we made: unlinked at close only if it is still ours */
  ino_t ino;
} srv_listener;

static void link_close(srv_link *l, const char *why);
static void link_flow(srv_link *l);

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
  uv_os_fd_t fd;
  c->peer_pid = -1;
  c->peer_uid = c->peer_gid = UINT32_MAX; /* unknown: matches no allowlist but "any" */
  if (uv_fileno((uv_handle_t *)&l->pipe, &fd) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
    c->peer_pid = cr.pid;
    c->peer_uid = cr.uid;
    c->peer_gid = cr.gid;
  }
}

/* ---- writing ---- */

static void on_written(uv_write_t *req, int status) {
  link_write *w = (link_write *)req;
  srv_link *l = w->link;
  l->out_bytes -= w->len;
  if (l->conn)
    l->conn->out_bytes -= nng_msg_len(w->m);
  nng_msg_free(w->m);
  if (w == &l->spare)
    l->spare_busy = false;
  else
    rt_free(w);
  if (status < 0 && status != UV_ECANCELED)
    link_close(l, "write failed (peer gone)");
  else if (!l->closing)
    link_flow(l);
}

/* Takes m. What the socket takes at once is written now; the rest is queued with libuv. */
void srv_local_send(srv_server *s, srv_conn *c, nng_msg *m) {
  srv_link *l = c->link;
  size_t len = nng_msg_len(m);
  if (l == NULL || l->closing) {
    c->out_bytes -= len;
    nng_msg_free(m);
    return;
  }
  uv_buf_t b = uv_buf_init(nng_msg_body(m), (unsigned)len);
  int n = l->out_bytes == 0 ? uv_try_write((uv_stream_t *)&l->pipe, &b, 1) : UV_EAGAIN;
  if (n == (int)len || (n < 0 && n != UV_EAGAIN)) {
    c->out_bytes -= len;
    nng_msg_free(m);
    if (n < 0)
      link_close(l, "write failed (peer gone)");
    return;
  }
  size_t done = n > 0 ? (size_t)n : 0;
  link_write *w = l->spare_busy ? rt_malloc(sizeof *w) : &l->spare;
  l->spare_busy = true;
  b = uv_buf_init((char *)nng_msg_body(m) + done, (unsigned)(len - done));
  if (w == NULL || uv_write(&w->req, (uv_stream_t *)&l->pipe, &b, 1, on_written) != 0) {
    if (w == &l->spare)
      l->spare_busy = false;
    else
      rt_free(w);
    c->out_bytes -= len;
    nng_msg_free(m);
    link_close(l, w ? "write failed" : "out of memory writing a reply");
    return;
  }
  *w = (link_write){.req = w->req, .link = l, .m = m, .len = len - done};
  l->out_bytes += w->len;
  link_flow(l);
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  srv_link *l = h->data;
  if (l->big) {
    size_t total = nng_msg_len(l->big);
    *buf = uv_buf_init((char *)nng_msg_body(l->big) + l->big_have, (unsigned)(total - l->big_have));
    return;
  }
  *buf = uv_buf_init((char *)l->in + l->in_len, (unsigned)(LINK_INBUF - l->in_len));
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
/* The length of the frame starting at p (whole header there), or 0 if the connection is
 * closed for it. */
static size_t frame_length(srv_link *l, const uint8_t *p, size_t have) {
  size_t flen;
  uint64_t id;
  switch (proto_stream_scan(p, have, l->s->limits.max_message, &flen, &id)) {
  case PROTO_SCAN_FRAME:
    return flen;
  case PROTO_SCAN_TOO_BIG:
    l->s->frames_bad++;
    srv_conn_status(l->s, l->conn, id, ACCEL_ELIMIT);
    srv_conn_flush(l->s, l->conn);
    link_close(l, "frame over max_message");
    return 0;
  default: /* PROTO_SCAN_FOREIGN (the caller has a whole header) */
    l->s->frames_bad++;
    link_close(l, "not an accel frame: closed");
    return 0;
  }
}

/* Makes whole frames of the staging buffer; a frame too large for it continues in `big`. */
static void parse(srv_link *l) {
  size_t at = 0;
  while (!l->closing && l->reading && l->in_len - at >= PROTO_HEADER_SIZE) {
    const uint8_t *p = l->in + at;
    size_t have = l->in_len - at, flen = frame_length(l, p, have);
    if (flen == 0)
      return;
    nng_msg *m;
    if (nng_msg_alloc(&m, flen) != 0) {
      link_close(l, "out of memory for a frame");
      return;
    }
    memcpy(nng_msg_body(m), p, flen < have ? flen : have);
    if (flen > have) { /* the rest arrives straight in the message */
      l->big = m;
      l->big_have = have;
      at = l->in_len;
      break;
    }
    at += flen;
    deliver(l, m);
    link_flow(l); /* may pause: the rest waits in the staging buffer */
  }
  if (l->closing)
    return;
  memmove(l->in, l->in + at, l->in_len - at);
  l->in_len -= at;
}

#define LINK_MAX_PENDING_FDS 8

/* Descriptors a peer sent beyond the few its attach frames are about to take: a peer that
 * sends them unasked could exhaust the daemon's descriptors, so it is closed. */
static bool fds_ok(srv_link *l) {
  if (uv_pipe_pending_count(&l->pipe) <= LINK_MAX_PENDING_FDS)
    return true;
  link_close(l, "descriptors it did not announce");
  return false;
}

/* libuv hands a passed descriptor out only as a handle: a pipe handle is opened over it, the
 * descriptor duplicated, and the handle closed (which closes libuv's copy). */
static void on_fd_handle_closed(uv_handle_t *h) {
  rt_free(h);
}

static int accept_fd(srv_link *l) {
  uv_pipe_t *h = rt_malloc(sizeof *h);
  if (h == NULL)
    return ACCEL_ENOMEM;
  uv_pipe_init(l->pipe.loop, h, 0);
  int fd = -1;
  uv_os_fd_t raw;
  if (uv_accept((uv_stream_t *)&l->pipe, (uv_stream_t *)h) == 0 &&
      uv_fileno((uv_handle_t *)h, &raw) == 0)
    fd = fcntl(raw, F_DUPFD_CLOEXEC, 0);
  uv_close((uv_handle_t *)h, on_fd_handle_closed);
  return fd >= 0 ? fd : ACCEL_ESYS;
}

/* The descriptor sent with the attach frame being handled. Descriptors arrive in the order of
 * their frames; one an earlier attach could not take is still first in line and would be
 * mapped as this frame's region (another region's bytes): it is discarded first. A take that
 * fails for lack of memory leaves this frame's descriptor owed in turn. */
int srv_local_take_fd(srv_conn *c) {
  srv_link *l = c->link;
  if (l == NULL)
    return ACCEL_ENOENT;
  while (l->fds_owed > 0 && uv_pipe_pending_count(&l->pipe) > 0) {
    int stale = accept_fd(l);
    if (stale == ACCEL_ENOMEM)
      break;
    if (stale >= 0)
      close(stale);
    l->fds_owed--;
  }
  if (uv_pipe_pending_count(&l->pipe) == 0) {
    l->fds_owed = 0; /* nothing is queued: none is owed either */
    return ACCEL_ENOENT;
  }
  int fd = l->fds_owed > 0 ? ACCEL_ENOMEM : accept_fd(l);
  if (fd == ACCEL_ENOMEM)
    l->fds_owed++;
  return fd;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  srv_link *l = st->data;
  if (n < 0) {
    bool partial = l->in_len || l->big; /* a half-written frame counts as a bad one */
    l->s->frames_bad += partial;
    link_close(l, n != UV_EOF ? "read error" : partial ? "closed mid-frame" : "closed");
    return;
  }
  if (l->big) {
    l->big_have += (size_t)n;
    if (l->big_have == nng_msg_len(l->big)) {
      nng_msg *m = l->big;
      l->big = NULL;
      deliver(l, m);
    }
    return;
  }
  l->in_len += (size_t)n;
  parse(l);
  if (!l->closing)
    fds_ok(l);
}

/* ---- flow control ---- */

/* Reading pauses while the connection's requests or unwritten replies hold more than its
 * budget, or it has LINK_MAX_OPS ops in flight, and resumes below half of both (hysteresis:
 * no flapping per op). */
static void link_flow(srv_link *l) {
  srv_conn *c = l->conn;
  if (c == NULL || l->closing)
    return;
  uint64_t budget = srv_conn_budget(l->s), held = c->req_bytes + c->out_bytes;
  if (l->reading && (held > budget || c->ops >= LINK_MAX_OPS)) {
    uv_read_stop((uv_stream_t *)&l->pipe);
    l->reading = false;
  } else if (!l->reading && held <= budget / 2 && c->ops <= LINK_MAX_OPS / 2) {
    l->reading = uv_read_start((uv_stream_t *)&l->pipe, on_alloc, on_read) == 0;
    if (l->reading)
      parse(l); /* frames that arrived before the pause */
  }
}

void srv_local_flow(srv_server *s, srv_conn *c) {
  if (c->link)
    link_flow(c->link);
}

/* ---- accepting and closing ---- */

static void on_link_closed(uv_handle_t *h) {
  srv_link *l = h->data;
  srv_server *s = l->s;
  if (--l->open_handles > 0)
    return;
  if (l->conn) {
    srv_conn *c = l->conn;
    c->link = NULL;
    accel_log(ACCEL_LOG_INFO, "server", "local %u: %s", c->pipe, l->why);
    srv_conn_end(s, c);
  }
  if (l->big)
    nng_msg_free(l->big);
  rt_free(l);
  srv_release(s);
}

static void link_close(srv_link *l, const char *why) {
  if (l->closing)
    return;
  l->closing = true;
  snprintf(l->why, sizeof l->why, "%s", why);
  if (l->first_open)
    uv_close((uv_handle_t *)&l->first, on_link_closed);
  uv_close((uv_handle_t *)&l->pipe, on_link_closed);
}

static void on_first_frame_late(uv_timer_t *t) {
  link_close(t->data, "no frame in time: closed");
}

static void start_first_frame_timer(srv_server *s, srv_link *l) {
  uint32_t ms = s->args->first_frame_timeout_ms ? s->args->first_frame_timeout_ms : 10000;
  uv_timer_init(l->pipe.loop, &l->first);
  l->first.data = l;
  l->first_open = true;
  l->open_handles++;
  uv_timer_start(&l->first, on_first_frame_late, ms, 0);
}

static void log_peer(const srv_conn *c, const char *what) {
  accel_log(ACCEL_LOG_INFO, "server", "local %u: %s (uid %u, gid %u, pid %d)", c->pipe, what,
            c->peer_uid, c->peer_gid, (int)c->peer_pid);
}

/* A refused peer hears why in a REPLY with request id 0 (about the connection itself), then
 * the connection closes. */
static void refuse_peer(srv_server *s, srv_link *l, int status, const char *why) {
  log_peer(l->conn, why);
  srv_conn_status(s, l->conn, 0, status);
  srv_conn_flush(s, l->conn); /* small: the socket takes it at once */
  link_close(l, why);
}

static bool accept_link(srv_listener *ls, srv_link *l) {
  srv_server *s = ls->s;
  l->s = s;
  uv_pipe_init(rt_uv_loop(s->rt), &l->pipe, 1); /* ipc: descriptors may come with frames */
  l->pipe.data = l;
  l->open_handles = 1;
  s->refs++; /* released in on_link_closed */
  if (uv_accept((uv_stream_t *)&ls->pipe, (uv_stream_t *)&l->pipe) != 0) {
    link_close(l, "accept failed");
    return false;
  }
  return true;
}

static void accept_connection(srv_listener *ls);

static void on_accept_retry(uv_timer_t *t) {
  srv_listener *ls = t->data;
  if (!ls->s->stopped)
    accept_connection(ls);
}

/* Out of memory for a new connection: it stays in the listen queue and the listener tries
 * again from a timer, 1 ms then doubling up to 1 s. libuv watches no listener whose
 * connection was not accepted, so the clients behind it wait too, and get in once memory is
 * back; nothing is refused or lost. */
static void accept_later(srv_listener *ls) {
  ls->retry_ms = ls->retry_ms == 0 ? 1 : ls->retry_ms >= 512 ? 1000 : ls->retry_ms * 2;
  accel_log(ACCEL_LOG_WARN, "server",
            "ipc://%s: out of memory for a new connection: trying "
            "again in %llu ms",
            ls->path, (unsigned long long)ls->retry_ms);
  if (uv_timer_start(&ls->retry, on_accept_retry, ls->retry_ms, 0) != 0)
    accel_log(ACCEL_LOG_ERROR, "server",
              "ipc://%s: cannot retry: new clients wait for the "
              "next connection",
              ls->path);
}

static void on_connection(uv_stream_t *server, int status) {
  srv_listener *ls = server->data;
  if (status < 0 || ls->s->stopped)
    return;
  accept_connection(ls);
}

static void accept_connection(srv_listener *ls) {
  srv_server *s = ls->s;
  srv_link *l = rt_malloc(sizeof *l + LINK_INBUF);
  if (l != NULL) {
    *l = (srv_link){0};
    l->in = (uint8_t *)(l + 1);
  }
  srv_conn *c = l ? srv_conn_new(s, s->next_local_id++ | SRV_LOCAL_ID_BIT) : NULL;
  if (c == NULL) {
    rt_free(l);
    accept_later(ls);
    return;
  }
  ls->retry_ms = 0;
  if (!accept_link(ls, l)) {
    srv_conn_end(s, c); /* it never carried anything */
    return;
  }
  c->link = l;
  l->conn = c;
  read_credentials(l, c);
  if (s->draining) {
    refuse_peer(s, l, ACCEL_ECLOSED, "refused: draining");
    return;
  }
  if (!peer_allowed(s, c)) {
    refuse_peer(s, l, ACCEL_EPERM, "refused: not in allow_users/allow_groups");
    return;
  }
  uint32_t max = s->args->max_connections ? s->args->max_connections : 1024;
  if (s->nconns > max) {
    refuse_peer(s, l, ACCEL_EBUSY, "refused: max_connections reached");
    return;
  }
  log_peer(c, "connected");
  start_first_frame_timer(s, l);
  l->reading = uv_read_start((uv_stream_t *)&l->pipe, on_alloc, on_read) == 0;
  if (!l->reading)
    link_close(l, "cannot read");
}

/* ---- listening ---- */

/* Whether a daemon answers on `path` now: a second acceld must not take the socket of a live
 * one (it would cut it off from every new client). A socket file nobody answers is stale. */
static bool path_is_live(const char *path) {
  int fd = proto_local_connect(path);
  if (fd < 0)
    return fd != ACCEL_ECLOSED; /* EPERM: someone's socket we may not even use */
  close(fd);
  return true;
}

static int prepare_path(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? 0 : ACCEL_ESYS;
  if (!S_ISSOCK(st.st_mode)) {
    accel_log(ACCEL_LOG_ERROR, "server", "%s exists and is not a socket", path);
    return ACCEL_EBUSY;
  }
  if (path_is_live(path)) {
    accel_log(ACCEL_LOG_ERROR, "server", "address in use by another acceld (%s)", path);
    return ACCEL_EBUSY;
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
  rt_free(ls->path);
  rt_free(ls);
  srv_release(s);
}

static int bind_listener(srv_server *s, srv_listener *ls) {
  int rc = prepare_path(ls->path);
  if (rc != 0)
    return rc;
  if (uv_pipe_bind(&ls->pipe, ls->path) != 0) {
    accel_log(ACCEL_LOG_ERROR, "server", "cannot bind %s: %s", ls->path, strerror(errno));
    return ACCEL_EBUSY;
  }
  rc = set_owner(s, ls);
  if (rc == 0 && uv_listen((uv_stream_t *)&ls->pipe, LINK_BACKLOG, on_connection) != 0)
    rc = ACCEL_ESYS;
  return rc;
}

int srv_local_listen(srv_server *s, const char *path) {
  srv_listener *ls = rt_calloc(1, sizeof *ls);
  char *copy = rt_strdup(path);
  if (ls == NULL || copy == NULL || s->nlocals == SRV_MAX_LOCAL) {
    rt_free(ls);
    rt_free(copy);
    return ACCEL_ENOMEM;
  }
  ls->s = s;
  ls->path = copy;
  uv_pipe_init(rt_uv_loop(s->rt), &ls->pipe, 0);
  uv_timer_init(rt_uv_loop(s->rt), &ls->retry); /* cannot fail: it only fills the handle */
  ls->pipe.data = ls;
  ls->retry.data = ls;
  ls->open_handles = 2;
  s->refs++;
  s->locals[s->nlocals++] = ls;
  int rc = bind_listener(s, ls);
  if (rc == 0)
    accel_log(ACCEL_LOG_INFO, "server", "listening on ipc://%s", path);
  return rc;
}

/* Stops accepting: the socket file goes (if it is still the one we made), so clients see
 * "no daemon" at once rather than a connection that is never answered. */
static void close_listener(srv_listener *ls) {
  struct stat st;
  if (ls->ino && lstat(ls->path, &st) == 0 && st.st_dev == ls->dev && st.st_ino == ls->ino)
    unlink(ls->path);
  uv_close((uv_handle_t *)&ls->pipe, on_listener_closed);
  uv_close((uv_handle_t *)&ls->retry, on_listener_closed);
}

void srv_local_stop_listening(srv_server *s) {
  for (uint32_t i = 0; i < s->nlocals; i++)
    close_listener(s->locals[i]);
  s->nlocals = 0;
}

/* The server stops: every connection closes; the records are freed by the caller. */
void srv_local_close_all(srv_server *s) {
  srv_local_stop_listening(s);
  for (uint32_t b = 0; s->buckets && b < s->nbuckets; b++)
    for (srv_conn *c = s->buckets[b]; c; c = c->hnext)
      if (c->link) {
        c->link->conn = NULL;
        link_close(c->link, "server stopped");
        c->link = NULL;
      }
}
