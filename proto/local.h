/* The local transport's stream, client side (the daemon's side is server/server_local.c).
 *
 * A local connection is a Unix stream socket carrying whole frames back to back: a frame is
 * self-delimiting (its header's body_len), so the stream needs no framing of its own and no
 * routing header. This replaces nng 1.5.2's ipc:// transport, which one stray connect can lock
 * and dying clients can wedge (docs/DECISIONS.md, "A local transport of our own"). The socket
 * also carries descriptors (SCM_RIGHTS) for the shared-memory data plane.
 *
 * Blocking calls for clients (libaccel's remote transport, accelctl, tests); thread-safe as
 * far as the kernel's socket calls are (one writer at a time per socket is the caller's
 * job). */
#ifndef PROTO_LOCAL_H
#define PROTO_LOCAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/attr.h"
#include "runtime/shm_ring.h"

/* The socket path of a local URL ("ipc://PATH" or "unix://PATH"), or NULL if `url` is not
 * local. Points into url. */
const char *proto_local_path(const char *url);

/* Connects to the daemon's socket. The descriptor (close-on-exec) or ACCEL_ECLOSED (nothing
 * listens there), ACCEL_EINVAL (path too long), ACCEL_EPERM (no permission), ACCEL_ESYS (no
 * socket); on failure errno says why (connect's, or ENAMETOOLONG). */
RT_MUST_USE int proto_local_connect(const char *path);

/* Writes all `len` bytes (retrying short writes and EINTR; SIGPIPE never raised). 0 or
 * ACCEL_ECLOSED. If `fd_pass` >= 0, that descriptor travels with the first byte
 * (SCM_RIGHTS). */
RT_MUST_USE int proto_local_send(int fd, const void *bytes, size_t len, int fd_pass);

/* Writes head_len bytes then tail_len bytes as one stream of bytes (one frame's head and a
 * write's data, taken where they are: nothing is copied), as proto_local_send does. */
RT_MUST_USE int proto_local_send_gather(int fd, const void *head, size_t head_len, const void *tail,
                                        size_t tail_len);

/* Reads one whole frame into *buf (grown with realloc as needed, *cap its size; the
 * caller frees it). A frame whose header is not ours or whose body exceeds `max_body` is
 * ACCEL_EPROTO (the stream cannot be resynchronised: close it). `timeout_ms` < 0 waits for
 * ever. Returns the frame's length, or ACCEL_ECLOSED (end of stream or error),
 * ACCEL_ETIMEDOUT, ACCEL_ENOMEM. */
RT_MUST_USE long long proto_local_recv_frame(int fd, uint8_t **buf, size_t *cap, uint32_t max_body,
                                             int timeout_ms);

/* A buffered reader of frames: one recv() takes as many frames as the socket holds, so a
 * burst of small replies costs one system call, not two per frame. */
typedef struct proto_reader {
  uint8_t *buf;
  size_t len, cap; /* bytes in buf; its size */
  size_t at;       /* the start of the next frame */
} proto_reader;

/* The next whole frame, without waiting: *frame points into the reader's buffer until the
 * next call; ACCEL_EAGAIN while the socket holds no whole frame (the part that came is kept
 * for the next call); else the returns and rules of proto_local_recv_frame.
 * proto_reader_free frees. */
RT_MUST_USE long long proto_reader_try_next(proto_reader *rd, int fd, uint32_t max_body,
                                            const uint8_t **frame);
/* The same, the frames' bytes taken from a shared ring (proto/local_rings.h) instead of the
 * socket; a writer waiting for room is rung on fd. ACCEL_EAGAIN while the ring holds no whole
 * frame; ACCEL_EPROTO also for a ring position the writer cannot have reached. */
RT_MUST_USE long long proto_reader_try_next_from(proto_reader *rd, int fd, rt_ring *in,
                                                 uint32_t max_body, const uint8_t **frame);
/* Sleeps until fd has bytes to read (or its end), in poll(2) for POLLIN alone: a reader asleep
 * in recv(2) is also woken, for nothing, each time the peer takes bytes this socket sent (the
 * kernel tells a Unix socket's waiters it has room to write again), one more wake-up per op
 * on a socket that carries requests one way and replies the other. timeout_ms < 0: none.
 * 0, ACCEL_ETIMEDOUT, or ACCEL_ECLOSED on an error (a reader may leave it to its next read). */
int proto_wait_readable(int fd, int timeout_ms);
void proto_reader_free(proto_reader *rd);

#endif
