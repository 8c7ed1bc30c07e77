/* The exchange between acceld and a device worker (worker.h): frames over a Unix stream
 * socket, bulk data through a shared staging region.
 *
 * Both ends are one build on one machine, so structs travel in host byte order, as they are.
 * The worker still checks every id, length and count it is given (it trusts acceld, but a
 * bug there must end in an error, not in the worker writing anywhere).
 *
 * Three channels, each a socketpair end the worker gets at spawn (fds 3, 4, 5):
 *   cmd    acceld -> worker: every call, in the order acceld made it. The worker's thread
 *          serving the link reads it and submits each call to its backend in that order, so
 *          work on one queue keeps its order with no sequence numbers.
 *   note   worker -> acceld: replies to calls acceld waits for (tag: the call), completions
 *          (tag: what acceld keeps pending), a compile the worker asks acceld for.
 *   ack    acceld -> worker: "the host function is done" for host_callback, whose queue must
 *          wait for it. A channel of its own: the link's thread in the worker may be blocked
 *          submitting behind that very callback, so acks must not queue behind calls.
 * The staging region (fd 6) is a memfd both map: host data of copies travels through it in
 * pages acceld hands out and takes back when the copy's completion comes. The rings (fd 7,
 * ring.h) carry the bytes of cmd and note through memory both map, the sockets then only
 * bells, descriptors and the end; a link without them (tests') uses the sockets alone.
 *
 * These channels and region are the worker's first link. acceld attaches more links (one per
 * world of its that opens devices there: each loop submits through its own, and the worker
 * serves each on a thread of its own): BW_ATTACH on the first link's cmd passes the new cmd
 * socket, whose first frame, BW_CHANNELS, passes the new note, ack, staging region and rings. Calls
 * of one link name only that link's devices, queues, events and memory. */
#ifndef BW_WIRE_H
#define BW_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/worker/ring.h"

#define BW_FD_CMD 3
#define BW_FD_NOTE 4
#define BW_FD_ACK 5
#define BW_FD_STAGE 6
#define BW_FD_RINGS 7 /* the cmd and note rings (ring.h) */

#define BW_MAX_FRAME ((uint32_t)600 << 20) /* a module's code or image (256 MiB) and more */
#define BW_MAX_IDS (1u << 22)              /* live queues, events, modules, kernels each */
/* The longest frame a worker may send (a module's build log is at most 1 MiB): a worker runs
 * clients' kernels, so acceld reads what it sends as it reads a client's bytes. */
#define BW_MAX_NOTE ((uint32_t)4 << 20)

typedef struct bw_hdr {
  uint32_t len;  /* bytes after the header */
  uint16_t type; /* bw_type */
  uint16_t pad;
  uint64_t tag; /* a call or a pending completion of acceld's; 0 for none */
} bw_hdr;

typedef enum bw_type {
  /* ---- acceld -> worker (cmd) ---- */
  BW_OPEN = 1,   /* bw_open; reply bw_opened */
  BW_CLOSE,      /* bw_dev; reply (empty) once closed */
  BW_INJECT,     /* bw_dev; reply (empty) */
  BW_Q_CREATE,   /* bw_ids {dev, id}: no reply (a failure fails the queue's work) */
  BW_Q_DESTROY,  /* bw_ids {id}; reply (empty) once its work is over */
  BW_EV_CREATE,  /* bw_ids {dev, id} */
  BW_EV_DESTROY, /* bw_ids {id} */
  BW_EV_RECORD,  /* bw_ids {id: event, id2: queue}; tag: the completion */
  BW_Q_WAIT,     /* bw_ids {id: queue, id2: event} */
  BW_CALLBACK,   /* bw_ids {id: queue, dev: 1 hold the queue (host_callback), 0 notify} */
  BW_MEM_ALLOC,  /* bw_mem_op {dev, bytes}; reply bw_mem_op {mem} */
  BW_MEM_FREE,   /* bw_mem_op {dev, mem} */
  BW_H2D,        /* bw_copy; tag: the completion (staging pages go back) */
  BW_D2H,        /* bw_copy; tag: the completion (acceld copies the data out) */
  BW_D2D,        /* bw_copy */
  BW_PEER,       /* bw_copy (src_dev) */
  BW_CAN_PEER,   /* bw_ids {dev: dst, id: src dev}; reply status 1 or 0 */
  BW_FILL,       /* bw_fill */
  BW_GEMM,       /* bw_gemm */
  BW_AXPY,       /* bw_vec */
  BW_DOT,        /* bw_vec */
  BW_SCAL,       /* bw_vec */
  BW_RNG,        /* bw_rng */
  BW_UNARY,      /* bw_nn */
  BW_SOFTMAX,    /* bw_nn */
  BW_LOAD,       /* bw_load + options + code; reply bw_loaded + log */
  BW_UNLOAD,     /* bw_ids {id} */
  BW_KERNEL,     /* bw_ids {id: module, id2: kernel} + name; reply be_kernel_info */
  BW_LAUNCH,     /* bw_launch + be_kernel_arg[nargs] */
  BW_COMPILED,   /* bw_compiled + log + image: the answer to a BW_COMPILE (tag: the load) */
  BW_COLL_OK,    /* bw_coll; reply status */
  BW_COLL_RUN,   /* bw_coll */
  BW_SHARE,      /* bw_share, with the memfd (SCM_RIGHTS); reply status */
  BW_UNSHARE,    /* bw_share {id} */
  BW_PROBE,      /* empty; reply bw_probed: what the backend found in the worker */
  BW_BINARY,     /* bw_binary */
  BW_REDUCE,     /* bw_reduce */
  BW_WHERE,      /* bw_where */
  BW_CONVERT,    /* bw_convert */
  BW_ATTACH,     /* with a new link's cmd socket (SCM_RIGHTS); reply status once it is served */
  BW_CHANNELS,   /* a new link's first frame on its cmd: note, ack, staging (SCM_RIGHTS) */
  /* ---- worker -> acceld (note) ---- */
  BW_REPLY = 64, /* bw_reply + the call's answer; tag: the call */
  BW_DONE,       /* bw_reply; tag: the completion */
  BW_COMPILE,    /* target text; tag: the load that needs it compiled by acceld's compiler */
  /* ---- acceld -> worker (ack) ---- */
  BW_ACK = 96 /* tag: the host_callback's completion */
} bw_type;

typedef struct bw_ids {
  uint32_t dev;
  uint32_t pad;
  uint64_t id, id2;
} bw_ids;

typedef struct bw_dev {
  uint32_t dev;
} bw_dev;

/* What acceld keeps of a device from its open: every answer of the entries that must not
 * block (package tables, limits), asked once. */
typedef struct bw_caps {
  be_device_info info;
  uint32_t blas_vector, rng, nn, sources, coll;
  uint32_t sticky_errors;
  be_launch_limits limits;
  /* gemm_supports(ab, c, math) == 0, for every ab, c <= 15 and math <= 3 */
  uint8_t gemm[16][16][4];
} bw_caps;

typedef struct bw_open {
  uint32_t dev; /* the backend's device index */
  uint32_t pad;
  be_open_opts opts;
  uint64_t stage_bytes; /* the staging region's size, to register for DMA once */
} bw_open;

typedef struct bw_probed {
  int32_t rc, count;
  char why[128];
} bw_probed;

typedef struct bw_opened {
  bw_caps caps;
} bw_opened;

typedef struct bw_reply {
  int32_t status;
  uint32_t pad;
} bw_reply;

typedef struct bw_mem_op {
  uint32_t dev;
  uint32_t pad;
  uint64_t bytes;
  be_mem mem;
} bw_mem_op;

typedef struct bw_copy {
  uint64_t queue;
  be_mem dst, src; /* device memory (dst for H2D, D2D, PEER; src for D2H, D2D, PEER) */
  uint64_t dst_off, src_off, bytes;
  uint64_t stage_off; /* H2D, D2H: where the host side is: in the staging region, or */
  uint64_t region;    /* (not 0) in this shared region (BW_SHARE), from its start */
  uint32_t src_dev;   /* PEER */
  uint32_t pad;
} bw_copy;

/* A client's memfd that acceld maps (server_shm.c), mapped by the worker too: copies between
 * it and the devices need no staging (backend.h: host_register_shared). */
typedef struct bw_share {
  uint32_t dev, pad;
  uint64_t id; /* not 0 */
  uint64_t bytes;
} bw_share;

typedef struct bw_fill {
  uint64_t queue;
  be_mem dst;
  uint64_t off, count, value;
  uint32_t esize, pad;
} bw_fill;

typedef struct bw_gemm {
  uint64_t queue;
  be_gemm_args g;
  be_mem a, b, c;
  uint64_t a_off, b_off, c_off;
} bw_gemm;

typedef struct bw_vec {
  uint64_t queue;
  uint32_t dtype, pad;
  uint64_t n;
  double alpha;
  be_mem x, y, r;
  uint64_t x_off, y_off, r_off;
} bw_vec;

typedef struct bw_rng {
  uint64_t queue;
  uint32_t dtype, pad;
  be_mem dst;
  uint64_t off, count;
  be_rng_args r;
} bw_rng;

typedef struct bw_nn {
  uint64_t queue;
  uint32_t dtype, op; /* op: be_unary_op */
  be_mem dst, src;
  uint64_t dst_off, src_off, count, rows, cols;
} bw_nn;

typedef struct bw_binary {
  uint64_t queue;
  uint32_t dtype, pad;
  be_binary_args g;
  be_mem dst, a, b;
  uint64_t dst_off, a_off, b_off;
} bw_binary;

typedef struct bw_reduce {
  uint64_t queue;
  uint32_t dtype, pad;
  be_reduction_args g;
  be_mem dst, src;
  uint64_t dst_off, src_off;
} bw_reduce;

typedef struct bw_where {
  uint64_t queue;
  uint32_t dtype, pad;
  be_where_args g;
  be_mem dst, cond, a, b;
  uint64_t dst_off, c_off, a_off, b_off;
} bw_where;

typedef struct bw_convert {
  uint64_t queue;
  uint32_t dst_dtype, src_dtype;
  be_convert_args g;
  be_mem dst, src;
  uint64_t dst_off, src_off;
} bw_convert;

typedef struct bw_load {
  uint32_t dev, source;
  uint64_t module;       /* the id the module gets */
  uint32_t options_len;  /* UINT32_MAX: none */
  uint32_t use_compiler; /* 1: load_with, compiling through acceld (BW_COMPILE) */
  uint64_t code_len;
} bw_load;

typedef struct bw_loaded {
  int32_t status;
  uint32_t log_len;
} bw_loaded;

typedef struct bw_compiled {
  int32_t status;
  uint32_t log_len;
  uint64_t image_len;
} bw_compiled;

typedef struct bw_launch {
  uint64_t queue, kernel;
  uint32_t grid[3], block[3];
  uint32_t shared_bytes, nargs;
} bw_launch;

typedef struct bw_coll {
  uint32_t kind, dtype, reduce, root, ndev, pad;
  uint64_t count;
  uint32_t dev[BE_COLL_MAX_DEVICES];
  uint64_t queue[BE_COLL_MAX_DEVICES];
  be_mem buf[BE_COLL_MAX_DEVICES], recv[BE_COLL_MAX_DEVICES];
} bw_coll;

/* ---- framing (wire.c): both ends ---- */

/* Writes the header and the parts (NULL-terminated pairs of pointer and length) as one frame;
 * false on an error (the peer went). Callers serialise writers of one channel. */
bool bw_send(int fd, uint16_t type, uint64_t tag, const void *a, size_t alen, const void *b,
             size_t blen, const void *c, size_t clen);

/* As bw_send, on a channel: through its ring if it has one (ring.h), else its socket. */
bool bw_chan_send(bw_chan *ch, uint16_t type, uint64_t tag, const void *a, size_t alen,
                  const void *b, size_t blen, const void *c, size_t clen);
bool bw_chan_send_fd(bw_chan *ch, uint16_t type, uint64_t tag, const void *a, size_t alen,
                     int pass);
/* Writes bytes that are whole frames already (bw_frame_put's); false on an error. */
bool bw_send_bytes(bw_chan *ch, const void *p, size_t len);

/* The bytes of the frame bw_send would write, into `to` (bw_frame_len(...) of room). */
size_t bw_frame_len(size_t alen, size_t blen, size_t clen);
void bw_frame_put(uint8_t *to, uint16_t type, uint64_t tag, const void *a, size_t alen,
                  const void *b, size_t blen, const void *c, size_t clen);

/* As bw_send, with a descriptor passed along (SCM_RIGHTS); bw_send_fds with npass of them
 * (1..BW_MAX_PASS). */
#define BW_MAX_PASS BW_RING_MAX_PASS
bool bw_send_fd(int fd, uint16_t type, uint64_t tag, const void *a, size_t alen, int pass);
bool bw_send_fds(int fd, uint16_t type, uint64_t tag, const void *a, size_t alen, const int *pass,
                 int npass);
/* Reads a frame of `type` with no body and exactly n descriptors (n <= BW_MAX_PASS) into fds;
 * false (nothing kept) otherwise. For a channel's first frame, read before any other. */
bool bw_recv_fds(int fd, uint16_t type, int *fds, int n);

/* Reads one frame: the header, then len bytes into *body (malloc'd when longer than `room`,
 * else `buf`); false at the end of the stream, on an error, or past BW_MAX_FRAME. bw_recv_fd's
 * `passed` (not NULL) gets a descriptor that came with the frame, else -1; bw_recv closes any. */
bool bw_recv(int fd, bw_hdr *h, void *buf, size_t room, void **body);
bool bw_recv_fd(int fd, bw_hdr *h, void *buf, size_t room, void **body, int *passed);

/* A channel's frames read through a buffer: one read takes what the socket holds (a cork of
 * commands, several completions) where bw_recv makes two system calls per frame. A descriptor
 * goes to the frame of a type in `fd_types` whose header the read that brought it ended in (the
 * kernel ends a read with the message a descriptor travelled with, and bw_send_fd sends the
 * header alone with it); one no frame takes is closed, as are descriptors past
 * BW_READER_FDS. One thread reads a reader. */
#define BW_READER_BYTES ((size_t)64 << 10)
#define BW_READER_FDS 16

typedef struct bw_reader {
  int fd;
  bw_chan *chan;     /* a channel with a ring: bytes from there, descriptors from the channel */
  uint64_t fd_types; /* BW_TYPE_BIT of each frame type that takes a descriptor; 0: none */
  uint8_t *buf;
  size_t head, tail; /* bytes read and not taken: buf[head..tail) */
  uint64_t base;     /* the stream offset of buf[0] */
  struct bw_reader_fd {
    int fd;
    uint64_t from, to; /* the stream bytes of the read it came with */
  } fds[BW_READER_FDS];
  uint32_t nfds;
} bw_reader;

#define BW_TYPE_BIT(t) (UINT64_C(1) << (t)) /* t < 64: acceld's calls */
bool bw_reader_init(bw_reader *r, int fd, uint64_t fd_types);
/* The same over a channel (its ring, if it has one; one thread reads it). */
bool bw_reader_init_chan(bw_reader *r, bw_chan *chan, uint64_t fd_types);
void bw_reader_fini(bw_reader *r); /* closes the descriptors it holds, not fd */
/* As bw_recv_fd, refusing (false) a frame longer than max: the body is copied to `buf` when it
 * fits `room` (aligned for the frame's structs), else malloc'd; `passed` is -1 unless the frame
 * is of a type in fd_types and a descriptor came. */
bool bw_reader_next(bw_reader *r, bw_hdr *h, void *buf, size_t room, void **body, int *passed,
                    uint32_t max);
/* Whether bytes wait to be read (in the buffer, or in the channel's ring): the next
 * bw_reader_next need not wait for the peer. A socket's bytes not read yet are not seen. */
bool bw_reader_ready(const bw_reader *r);

/* Reads of this process that found bytes while polling, before the reader would have slept
 * (the spin of rt_spin_ns): none when the spin is 0. A bw_reader's read may bring several
 * frames, or the rest of one. For tests and diagnostics. */
uint64_t bw_frames_caught_polling(void);

#endif
