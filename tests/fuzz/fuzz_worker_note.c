/* libFuzzer target for what acceld reads from a device worker (backends/worker/proxy_link.c):
 * a worker runs clients' kernels, so its notes are read as a client's bytes are. The target
 * plays the worker: it adopts a link over socketpairs, keeps completions of every kind pending
 * (host functions that hold their queue or not, an event record, a copy to the device, a copy
 * back, a call), then writes frames built from the input into the note channel and hangs up.
 *   - Each input record is a frame: a type (DONE, REPLY, COMPILE or any), a tag (one of the
 *     pending ones, or arbitrary), a length, a body; a first byte with its top bit set sends
 *     the rest of the input raw instead. A type byte of 0xfe sends the frame's header with a
 *     descriptor (acceld expects none: it must close it); 0xfd claims 64 times the length, up
 *     to 4 MiB, its body the record's bytes repeated (past the reader's 64 KiB buffer).
 *   - A first byte with bit 0x40 set (and the top bit clear) writes the frames through the
 *     note ring (ring.h) instead of the socket, at most what the ring holds; with 0x20 as well,
 *     the ring's write position is then set from the input, sane or not.
 *   - Whatever comes, when the link has ended: every host function ran exactly once, the event
 *     is done, every staging page came back, and nothing leaked or crashed.
 * Linked with replay.c it is a plain program that runs the seed corpus through the target. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/cpu/backend_cpu.h"
#include "backends/worker/proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_worker_note: %s\n", what);
    abort();
  }
}

enum { CALLBACKS = 3, TAGS = CALLBACKS + 4 };

static atomic_int calls[CALLBACKS];

static void counted(void *arg, int status) {
  (void)status;
  atomic_fetch_add(&calls[(intptr_t)arg], 1);
}

/* Completions of every kind, pending on l; their tags in tags[]. */
static void add_pending(bw_link *l, bw_event *ev, char *dst, uint64_t tags[TAGS]) {
  pthread_mutex_lock(&l->mu);
  for (intptr_t i = 0; i < CALLBACKS; i++)
    tags[i] = bw_pending_add(
        l, &(bw_pending){.kind = BW_P_CALLBACK, .fn = counted, .arg = (void *)i, .hold = i == 1});
  ev->refs++; /* the record's */
  ev->recorded = 1;
  tags[CALLBACKS] = bw_pending_add(l, &(bw_pending){.kind = BW_P_EVENT, .event = ev, .seq = 1});
  size_t off_in = 0, off_out = 0;
  check(bw_stage_take(l, 100, &off_in) && bw_stage_take(l, 64, &off_out), "staging pages");
  tags[CALLBACKS + 1] =
      bw_pending_add(l, &(bw_pending){.kind = BW_P_H2D, .stage_off = off_in, .stage_len = 100});
  tags[CALLBACKS + 2] = bw_pending_add(
      l, &(bw_pending){
             .kind = BW_P_D2H, .stage_off = off_out, .stage_len = 64, .dst = dst, .bytes = 64});
  tags[CALLBACKS + 3] = bw_pending_add(l, &(bw_pending){.kind = BW_P_CALL});
  pthread_mutex_unlock(&l->mu);
}

static int stray_fd = -1; /* a pipe's end a hostile worker passes along */

/* Where the worker's bytes go: the note socket, or the note ring (`ring` not NULL) with at
 * most `left` bytes more, so that a reader that stopped reading never leaves us waiting. */
typedef struct sink {
  int fd;
  bw_chan *ring;
  size_t left;
} sink;

static bool put(sink *s, const void *p, size_t n) {
  if (s->ring == NULL)
    return write(s->fd, p, n) == (ssize_t)n;
  if (n > s->left)
    return false;
  s->left -= n;
  struct iovec v = {(void *)p, n};
  return bw_chan_write(s->ring, &v, 1);
}

/* len bytes of body: p[0..n) repeated. */
static bool send_body(sink *s, const uint8_t *p, size_t n, size_t len) {
  for (size_t done = 0; done < len;) {
    size_t k = len - done < n ? len - done : n;
    if (!put(s, p, k))
      return false;
    done += k;
  }
  return true;
}

/* One frame from the input: 1 byte type, 1 byte tag, 2 bytes length, then the body. */
static size_t send_record(sink *s, const uint8_t *p, size_t n, const uint64_t tags[TAGS]) {
  if (n < 4)
    return n;
  static const uint16_t types[] = {BW_DONE, BW_REPLY, BW_COMPILE};
  uint16_t type = p[0] < 3 * 80 ? types[p[0] % 3] : p[0];
  uint64_t tag = p[1] < 2 * TAGS ? tags[p[1] % TAGS] : (uint64_t)p[1] << 32 | p[1];
  size_t len = (size_t)(p[2] | p[3] << 8);
  len = len <= n - 4 ? len : n - 4;
  size_t claimed = p[0] == 0xfd && len > 0 ? len * 64 : len;
  bw_hdr h = {.len = (uint32_t)claimed, .type = type, .tag = tag};
  bool ok = p[0] == 0xfe ? s->ring ? bw_chan_send_fd(s->ring, BW_DONE, tag, p + 4, len, stray_fd)
                                   : bw_send_fd(s->fd, BW_DONE, tag, p + 4, len, stray_fd)
                         : put(s, &h, sizeof h) && (!claimed || send_body(s, p + 4, len, claimed));
  if (!ok)
    return n; /* the reader stopped reading (it refused a frame): the rest is moot */
  return 4 + len;
}

static void send_input(sink *s, const uint8_t *data, size_t size, const uint64_t tags[TAGS]) {
  if (size > 0 && (data[0] & 0x80)) {
    (void)put(s, data + 1, size - 1);
    return;
  }
  for (size_t at = size ? 1 : 0; at < size;)
    at += send_record(s, data + at, size - at, tags);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int cmd[2], note[2], ack[2];
  check(socketpair(AF_UNIX, SOCK_STREAM, 0, cmd) == 0 &&
            socketpair(AF_UNIX, SOCK_STREAM, 0, note) == 0 &&
            socketpair(AF_UNIX, SOCK_STREAM, 0, ack) == 0,
        "socketpairs");
  bool ring = size > 0 && (data[0] & 0xc0) == 0x40;
  bw_rings rings = {.fd = -1};
  check(!ring || bw_rings_create(&rings), "rings");
  bw_link *l;
  check(bw_link_adopt(&be_cpu_ops, cmd[0], note[0], ack[0], rings.fd, 4 * BW_STAGE_PAGE, &l) == 0,
        "adopt");
  bw_chan worker_note = bw_chan_socket(note[1]);
  if (ring)
    bw_chan_ring(&worker_note, &rings, true);
  sink s = {.fd = note[1], .ring = ring ? &worker_note : NULL, .left = BW_RING_NOTE_BYTES};
  for (int i = 0; i < CALLBACKS; i++)
    atomic_store(&calls[i], 0);
  bw_event *ev = calloc(1, sizeof *ev);
  char *dst = malloc(64);
  check(ev != NULL && dst != NULL, "memory");
  *ev = (bw_event){.link = l, .refs = 1};
  uint64_t tags[TAGS];
  add_pending(l, ev, dst, tags);
  fcntl(note[1], F_SETFL, O_NONBLOCK); /* a reader that stopped reading must not hang us */
  int pipefd[2];
  check(pipe(pipefd) == 0, "pipe");
  stray_fd = pipefd[1];
  send_input(&s, data, size, tags);
  if (ring && (data[0] & 0x20) && size >= 9) { /* a position the worker made up */
    uint64_t tail;
    memcpy(&tail, data + size - 8, sizeof tail);
    atomic_store(&worker_note.ring.ctl->tail, tail);
  }
  close(note[1]); /* the worker hangs up: whatever is pending fails with ACCEL_EDEVLOST */
  pthread_mutex_lock(&l->mu);
  while (!l->reader_done)
    pthread_cond_wait(&l->cv, &l->mu);
  bool event_done = ev->done >= ev->recorded && ev->refs == 1;
  bool pages_back = true;
  for (size_t i = 0; i < l->stage_pages; i++)
    pages_back = pages_back && !l->page_used[i];
  pthread_mutex_unlock(&l->mu);
  bw_link_drain(l);
  for (int i = 0; i < CALLBACKS; i++)
    check(atomic_load(&calls[i]) == 1, "a host function did not run exactly once");
  check(event_done, "the event record never completed");
  check(pages_back, "a staging page never came back");
  bw_link_end(l);
  if (ring)
    bw_rings_unmap(&rings);
  free(ev);
  free(dst);
  close(cmd[1]);
  close(ack[1]);
  close(pipefd[0]);
  close(pipefd[1]);
  return 0;
}
