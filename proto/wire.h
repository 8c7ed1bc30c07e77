/* The wire format between libaccel's remote client and acceld (see docs/PROTOCOL.md).
 *
 * One nng message is one frame: a 24-byte header, then a body whose layout depends on the
 * frame type. Every integer is little-endian, written and read byte by byte (no struct
 * overlays), so the format does not depend on the host. The decoder takes untrusted bytes:
 * every length, count and enum is checked against the limits before anything is allocated
 * or used, and any violation is ACCEL_EPROTO (or ACCEL_ELIMIT for a legal but too large
 * value). It is fuzzed (tests/fuzz/).
 *
 * Pure functions: no allocation except where stated, thread-safe. */
#ifndef PROTO_WIRE_H
#define PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"
#include "ops/op.h"
#include "runtime/attr.h"

#define PROTO_MAGIC 0x31434341u /* the bytes 'A' 'C' 'C' '1' */
#define PROTO_VERSION 3u
#define PROTO_HEADER_SIZE 24u
#define PROTO_NAME_MAX 64u
#define PROTO_DEVICE_SIZE 164u /* one device in a WELCOME */
#define PROTO_BUF_SIZE 32u     /* one buffer reference in an OP */
#define PROTO_OP_HEAD_SIZE 32u /* an OP body before its buffers */
#define PROTO_MAX_DEVICES 16u
/* The last values of a device's state (serving, restarting, quarantined) and kind (CPU, GPU,
 * accelerator): a client may index tables with them, so larger ones are refused. */
#define PROTO_DEVICE_STATE_MAX 2u
#define PROTO_DEVICE_KIND_MAX 2u
#define PROTO_OPTIONS_MAX 4096u /* a MODULE_LOAD's compiler options, bytes (no NUL) */
/* The most bytes of a build log a MODULE_LOAD's REPLY carries (and never more than fits in
 * max_message): the daemon cuts a longer log there. */
#define PROTO_BUILD_LOG_MAX (1u << 20)

typedef enum proto_type {
  PROTO_HELLO = 1,   /* client -> daemon: version, capabilities, name */
  PROTO_WELCOME = 2, /* daemon -> client: version, limits, devices */
  PROTO_OP = 3,      /* client -> daemon: one op envelope (+ a write's bytes, a module's code) */
  PROTO_REPLY = 4,   /* daemon -> client: status (+ data: reads, controls, build logs) */
  PROTO_CONTROL = 5, /* client -> daemon: status, devices, tree, ping, inject-fault */
  PROTO_TYPE_MAX_
} proto_type;

typedef enum proto_control {
  PROTO_CTL_PING = 1,
  PROTO_CTL_STATUS = 2,         /* reply: one JSON object */
  PROTO_CTL_DEVICES = 3,        /* reply: text, one line per device and backend */
  PROTO_CTL_TREE = 4,           /* reply: text, the supervision tree */
  PROTO_CTL_INJECT_FAULT = 5,   /* arg: device index; refused unless the daemon allows it */
  PROTO_CTL_DEVICE_INFO = 6,    /* arg: device index; reply: one device (PROTO_DEVICE_SIZE) */
  PROTO_CTL_TRANSFER_STATS = 7, /* reply: 5 x u64: h2d, d2h, d2d, written, read */
  PROTO_CTL_ACK = 8,            /* arg: messages received so far (mod 2^32); never answered */
  PROTO_CTL_SHM_ATTACH = 9,     /* arg: region id; the frame carries a sealed memfd (SCM_RIGHTS) */
  PROTO_CTL_SHM_DETACH = 10,    /* arg: region id; unmapped once no op uses it */
  PROTO_CTL_CLIENTS = 11,       /* arg 1: text, else JSON; reply: the client sessions */
  PROTO_CTL_TRACE_START = 12,   /* arg: events to keep at most (0: the default); restarts one */
  PROTO_CTL_TRACE_STOP = 13,    /* reply: the trace since TRACE_START, Chrome trace-event JSON */
  PROTO_CTL_MAX_
} proto_control;

/* Capabilities (HELLO: what the client can do; WELCOME: what the daemon will do). */
enum {
  /* One nng message may carry several whole frames back to back, both ways (the daemon
   * batches the replies of a connection per loop iteration; a client may batch requests):
   * split them with proto_next_frame(). */
  PROTO_CAP_BATCH = 1u << 0,
  /* The client sends PROTO_CTL_ACK with its count of received messages at least every
   * PROTO_ACK_EVERY messages; the daemon then keeps at most PROTO_ACK_WINDOW messages
   * unacknowledged per connection, so nng's per-pipe send queue (64) never overflows (nng's
   * raw rep0 drops replies past it). */
  PROTO_CAP_ACK = 1u << 1,
  /* Local links: the HELLO passes a region of shared rings (proto/local_rings.h, its
   * descriptor with the HELLO's first byte); in the WELCOME, the daemon took it, and every
   * later frame both ways goes through it. A WELCOME without it: the socket, as before. */
  PROTO_CAP_RINGS = 1u << 2,
};
#define PROTO_ACK_WINDOW 48u
#define PROTO_ACK_EVERY 16u

typedef struct proto_header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;       /* proto_type */
  uint32_t flags;      /* none defined: must be 0 */
  uint32_t body_len;   /* bytes after the header; must match the frame */
  uint64_t request_id; /* chosen by the client, echoed in the reply */
} proto_header;

/* What the daemon accepts; sent in WELCOME, enforced by the decoder and the session. */
typedef struct proto_limits {
  uint32_t max_message;   /* bytes per frame, both ways */
  uint32_t max_in_flight; /* ops per session */
  uint32_t max_buffers;   /* live handles per session */
  uint64_t max_memory;    /* bytes of buffers per session */
} proto_limits;

typedef struct proto_hello {
  uint16_t version;
  uint32_t capabilities;
  char name[PROTO_NAME_MAX + 1]; /* NUL-terminated */
} proto_hello;

typedef struct proto_welcome {
  uint16_t version;
  uint32_t capabilities;
  proto_limits limits;
  uint32_t device_count;
  struct accel_device_info devices[PROTO_MAX_DEVICES];
} proto_welcome;

typedef struct proto_control_req {
  uint32_t command; /* proto_control */
  uint64_t arg;
} proto_control_req;

/* A write's bytes or a reply's data point into the frame: borrowed, valid while it is. */
typedef struct proto_bytes {
  const uint8_t *data;
  size_t len;
} proto_bytes;

/* ---- a growable byte buffer for encoding (the one place that allocates) ---- */
typedef struct proto_out {
  uint8_t *data;
  size_t len, cap;
  int err; /* first error (ACCEL_ENOMEM); later puts do nothing */
} proto_out;

void proto_out_init(proto_out *o);
void proto_out_free(proto_out *o);

/* ---- encoding: each appends one whole frame to o; 0 or o->err ---- */
RT_MUST_USE int proto_encode_hello(proto_out *o, uint64_t request_id, const proto_hello *h);
RT_MUST_USE int proto_encode_welcome(proto_out *o, uint64_t request_id, const proto_welcome *w);
/* `data` is a write's bytes (NULL otherwise). A MODULE_LOAD's code and options are taken from
 * op->u.module: ACCEL_ELIMIT if its options are longer than PROTO_OPTIONS_MAX. A LAUNCH of
 * more than BE_LAUNCH_MAX_ARGS arguments is ACCEL_EINVAL. */
RT_MUST_USE int proto_encode_op(proto_out *o, uint64_t request_id, const dev_op *op,
                                proto_bytes data);
/* A WRITE's frame without its bytes: what proto_encode_op appends before them, its header
 * counting data_len more, which the caller sends right after (a gathered send, one copy less). */
RT_MUST_USE int proto_encode_write_head(proto_out *o, uint64_t request_id, const dev_op *op,
                                        uint64_t data_len);
RT_MUST_USE int proto_encode_control(proto_out *o, uint64_t request_id, const proto_control_req *c);
RT_MUST_USE int proto_encode_reply(proto_out *o, uint64_t request_id, int32_t status,
                                   proto_bytes data);
/* The first PROTO_REPLY_HEAD_SIZE bytes of a REPLY frame whose `data_len` bytes of data the
 * caller places right after them (the daemon reads a buffer straight into its reply frame).
 * ACCEL_ELIMIT if the frame would not fit a 32-bit body length. */
#define PROTO_REPLY_HEAD_SIZE (PROTO_HEADER_SIZE + 8u)
RT_MUST_USE int proto_encode_reply_head(uint8_t out[PROTO_REPLY_HEAD_SIZE], uint64_t request_id,
                                        int32_t status, size_t data_len);

/* One device as in WELCOME (PROTO_DEVICE_SIZE bytes), for PROTO_CTL_DEVICE_INFO replies. */
RT_MUST_USE int proto_encode_device(proto_out *o, const struct accel_device_info *d);
RT_MUST_USE int proto_decode_device(const uint8_t *p, size_t len, struct accel_device_info *d);
RT_MUST_USE int proto_encode_transfer_stats(proto_out *o, const accel_transfer_stats *t);
RT_MUST_USE int proto_decode_transfer_stats(const uint8_t *p, size_t len, accel_transfer_stats *t);

/* ---- the shared-memory data plane (local transport) ---- */
/* OP head flag: a WRITE's bytes or a READ's destination are in a region of memory the client
 * shared with the daemon (PROTO_CTL_SHM_ATTACH), not in the frames. WRITE payload: u64
 * data_len, u64 region, u64 offset; READ payload: u64 region, u64 offset (the REPLY carries
 * no data: the bytes are in the region when it says 0). */
#define PROTO_OPF_SHM 1u
typedef struct proto_shm_ref {
  uint64_t region; /* the client's id for the region */
  uint64_t offset; /* bytes from the region's start */
} proto_shm_ref;
RT_MUST_USE int proto_encode_op_shm(proto_out *o, uint64_t request_id, const dev_op *op,
                                    proto_shm_ref ref);

/* ---- decoding untrusted bytes ---- */
/* The length of the first frame of a message that may hold several (PROTO_CAP_BATCH): its
 * header's body length + the header, if the header is whole and that fits in `len`; else 0.
 * Decode the frame itself with proto_decode_header() on exactly that many bytes. */
size_t proto_next_frame(const uint8_t *p, size_t len);
RT_MUST_USE int proto_decode_header(const uint8_t *frame, size_t len, uint32_t max_message,
                                    proto_header *h);
RT_MUST_USE int proto_decode_hello(const uint8_t *body, size_t len, proto_hello *h);
RT_MUST_USE int proto_decode_welcome(const uint8_t *body, size_t len, proto_welcome *w);
/* What an OP carries besides its envelope, borrowed from the body (valid while it is). */
typedef struct proto_op_data {
  proto_bytes bytes; /* a WRITE's data, a MODULE_LOAD's code (both also in *op) */
  /* A MODULE_LOAD's options (len 0: none). They have no NUL on the wire, so the decoder
   * leaves op->u.module.options NULL: the caller points it at a NUL-terminated copy that
   * lives as long as the op (it holds no NUL byte and at most PROTO_OPTIONS_MAX bytes). */
  proto_bytes options;
  proto_shm_ref shm; /* a PROTO_OPF_SHM op: where its data is */
} proto_op_data;

/* Fills *op (no future, no owner) and *data (a write's bytes or a module's code, borrowed
 * from body). Checks the kind, the buffer count and access modes the kind needs, the
 * payload's enums and lengths (docs/PROTOCOL.md). A MODULE_LOAD's options are not given:
 * use proto_decode_op_ex to submit one. */
RT_MUST_USE int proto_decode_op(const uint8_t *body, size_t len, dev_op *op, proto_bytes *data);
/* The same, with a MODULE_LOAD's options, and taking PROTO_OPF_SHM ops when `shm` is set
 * (their reference in out->shm; out->bytes stays empty). proto_decode_op refuses those
 * (ACCEL_EPROTO). */
RT_MUST_USE int proto_decode_op_ex(const uint8_t *body, size_t len, bool shm, dev_op *op,
                                   proto_op_data *out);
RT_MUST_USE int proto_decode_control(const uint8_t *body, size_t len, proto_control_req *c);
RT_MUST_USE int proto_decode_reply(const uint8_t *body, size_t len, int32_t *status,
                                   proto_bytes *data);

#endif
