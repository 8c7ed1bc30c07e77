/* A channel of the worker link (wire.h) as a byte ring in memory both processes map, beside
 * its socket. The frames go through the ring: a write is a copy and a store, a read a load and
 * a copy, where the socket cost a system call on each side and often a wake-up (about 2 us a
 * hop on a 16-core host against 0.1 us through memory; PERFORMANCE.md "Rings on the worker
 * link"). The socket stays for what memory cannot do:
 *   - bells: a reader polls the ring for the spin time (rt_spin_ns), then says it sleeps and
 *     sleeps in poll(2) on the socket; a writer that sees that sends a byte. A writer waiting
 *     for room does the same the other way round;
 *   - descriptors (SCM_RIGHTS): a frame that takes one has it sent on the socket first;
 *   - the end: a peer that exits or shuts the channel down ends the socket, and the reader, once
 *     the ring is empty, sees the end as it did with the socket alone.
 * One writer (under the channel's lock) and one reader thread. Each side keeps its own copy of
 * its position and never takes the other side's word beyond a bounds check: a worker runs
 * clients' kernels, so acceld reads its ring as it reads its socket (a position past the ring's
 * size ends the channel, as a malformed frame does). The region is sealed against shrinking. */
#ifndef BW_RING_H
#define BW_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "runtime/shm_ring.h"

#define BW_RING_CMD_BYTES ((uint64_t)1 << 20)    /* acceld -> worker: calls */
#define BW_RING_NOTE_BYTES ((uint64_t)256 << 10) /* worker -> acceld: replies, completions */
#define BW_RING_FDS 16     /* descriptors a reader holds ahead of their frames */
#define BW_RING_MAX_PASS 4 /* descriptors one message may carry */

typedef rt_ring_ctl bw_ring_ctl;

/* A reader's waits, in the region for the other process to read (bw_rings_reader_idle_ns):
 * the time it waited for frames in all, and since when it waits now (0: it does not). */
typedef struct bw_idle {
  _Atomic uint64_t total_ns, since_ns;
} bw_idle;

/* The worker's completions on the link and the events it recorded behind them (the fewer
 * events per completion, the fewer driver calls: serve_group.c), in the region for acceld to
 * read (bw_rings_done_counts): the worker's word. */
typedef struct bw_done_counts {
  _Atomic uint64_t completions, events;
} bw_done_counts;

/* One end of a channel. fd: the socket (without a ring the frames themselves go there). */
typedef struct bw_chan {
  int fd;
  rt_ring ring;         /* ring.ctl NULL: no ring; ring.pos is this side's own count */
  bool eof;             /* reader: the socket ended */
  _Atomic bool closed;  /* shut down on this side (bw_chan_shutdown) */
  bool takes_fds;       /* reader: some frames take a descriptor (else one is an error) */
  int fds[BW_RING_FDS]; /* reader: descriptors that came before their frames, in order */
  uint32_t nfds;
  bw_idle *idle; /* reader, over a region: its waits, where the other process reads them */
} bw_chan;

/* Both channels' rings of a link: one memfd, mapped by both processes. */
typedef struct bw_rings {
  int fd;
  uint8_t *base;
  size_t bytes;
} bw_rings;

/* The descriptors a recvmsg brought (m): the first `max` into fds (their count returned), the
 * rest closed. */
int bw_take_fds(struct msghdr *m, int *fds, int max);
/* One sendmsg of p[0..n) with nfds (1..BW_RING_MAX_PASS) descriptors (SCM_RIGHTS), retried on
 * EINTR: bytes written, or < 0 (errno). */
ssize_t bw_send_with_fds(int fd, const void *p, size_t n, const int *fds, int nfds);

/* A channel over the socket alone. */
bw_chan bw_chan_socket(int fd);

/* acceld: a new sealed region for one link's rings; false on a system error. */
bool bw_rings_create(bw_rings *r);
/* The worker: maps the region acceld passed (its size checked); false if it is not one. */
bool bw_rings_map(bw_rings *r, int fd);
void bw_rings_unmap(bw_rings *r); /* and closes its descriptor */
/* The two ends over the region: cmd (acceld writes) and note (the worker writes). */
void bw_chan_ring(bw_chan *c, const bw_rings *r, bool note);
/* The time the reader of cmd (note: false) or note (true) has waited for frames in
 * bw_chan_read since it began, up to now_ns (CLOCK_MONOTONIC) and the wait it is in, as its
 * process wrote it in the region: the rest of its time it spent on what it read. A worker's
 * word: whoever reads the other process's value bounds it. */
uint64_t bw_rings_reader_idle_ns(const bw_rings *r, bool note, uint64_t now_ns);
/* The link's completion counts in the region; NULL if it is not mapped. */
bw_done_counts *bw_rings_done_counts(const bw_rings *r);

/* Writes the vector's bytes (every byte, waiting for room as long as the peer lives); false if
 * the peer is gone, the channel was shut down here, or its positions are not sane. */
bool bw_chan_write(bw_chan *c, struct iovec *v, int n);
/* Sends descriptors for the frame written next (a ring channel only). */
bool bw_chan_pass(bw_chan *c, const int *fds, int n);

/* Reads what is there, at most n bytes, waiting (polling, then sleeping) until something is:
 * > 0 bytes, 0 at the end, < 0 on an error. *polled: the bytes came while polling. */
long bw_chan_read(bw_chan *c, void *p, size_t n, bool *polled);
/* The next descriptor sent for a frame, waiting for it (it was sent before the frame's bytes);
 * -1 if none came with it or the channel ended. */
int bw_chan_take_fd(bw_chan *c);
/* Ends the channel on this side: a reader or writer waiting or polling here returns. */
void bw_chan_shutdown(bw_chan *c, int how);
/* Closes the descriptors held and the socket. */
void bw_chan_close(bw_chan *c);

#endif
