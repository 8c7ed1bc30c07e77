/* Transfers larger than one wire frame, through libaccel's remote transport (clients/chunk.c):
 * split into chunks of at most max_op_bytes, streamed with a window, one future for the
 * whole. Small cases run against an acceld with a 64 KiB max_message (a chunk is 60 KiB), so
 * many chunks cost little; the 4 GiB cases use the defaults, over the local socket (ipc://)
 * and over plain tcp:// (acceld's own stream over TCP), one after the other (each holds 4 GiB here
 * and 4 GiB in the daemon: meson runs this test alone). */
#include <signal.h>
#include <sys/mman.h>

#include "accel/accel.h"
#include "clients/chunk.h"
#include "clients/ctx.h"
#include "util.h"

#define SMALL_CONFIG "[limits]\nmax_message = 64K\n"

/* ---- data ---- */

/* Element i of the test pattern: never 0 (a buffer that was never written reads as zeros),
 * different in neighbouring elements and chunks. */
static float pattern(uint64_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return (float)(uint32_t)(h >> 41) + 0.5f; /* 23 bits + 0.5: exact in f32 */
}

static void fill_pattern(float *a, size_t n, uint64_t base) {
  for (size_t i = 0; i < n; i++)
    a[i] = pattern(base + i);
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Position-sensitive: a value moved to another element changes the sum. */
static uint64_t checksum(const float *a, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++)
    s += (uint64_t)bits_of(a[i]) * (2 * (uint64_t)i + 1);
  return s;
}

static void check_same(const float *got, const float *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (bits_of(got[i]) != bits_of(want[i]))
      TEST_FAIL("%s: element %zu is %g, expected %g", what, i, (double)got[i], (double)want[i]);
}

static float *alloc_floats(size_t n) {
  float *a = calloc(n ? n : 1, sizeof *a);
  CHECK(a != NULL);
  return a;
}

/* ---- the daemon and contexts ---- */

static accel_ctx *open_ctx(const char *url) {
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, url));
  return ctx;
}

static void start_small(td_daemon *d, const char *config) {
  td_prepare(d);
  td_write_config(d, config);
  td_start(d, NULL);
}

/* Ops the daemon has finished (each chunk is one). */
static long ops_completed(td_daemon *d) {
  return td_status_field(d, "ops_completed");
}

/* The op count of one call: f waited for, then the daemon's count compared. */
static long ops_of(td_daemon *d, accel_ctx *ctx, long before, accel_future *f) {
  CHECK_OK(accel_future_wait(f, 60000));
  accel_future_release(f);
  CHECK_OK(accel_finish(ctx, 60000));
  return ops_completed(d) - before;
}

static size_t max_elems(accel_ctx *ctx) {
  CHECK_GT(ctx->max_op_bytes, 0);
  CHECK_EQ(ctx->max_op_bytes % 4, 0);
  return ctx->max_op_bytes / 4;
}

/* The daemon's peak resident memory (VmHWM), in MiB; -1 if unknown. */
static long daemon_peak_mib(td_daemon *d) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)d->pid);
  FILE *f = fopen(path, "r");
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
      break;
  if (f)
    fclose(f);
  return kib < 0 ? -1 : kib / 1024;
}

/* ---- small cases ---- */

/* max_op_bytes of data is one op; one element more is two chunks; offsets land where they
 * should, reads of any sub-range across chunk boundaries come back whole. */
TEST(one_op_up_to_the_limit_then_chunks) {
  td_daemon d;
  start_small(&d, SMALL_CONFIG);
  accel_ctx *ctx = open_ctx(d.url);
  size_t m = max_elems(ctx), n = 4 * m + 10;
  CHECK_LT(ctx->max_op_bytes, 64 * 1024); /* the daemon's max_message, less room for heads */
  float *expect = alloc_floats(n), *src = alloc_floats(n), *got = alloc_floats(n);
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &b));
  CHECK_OK(accel_finish(ctx, 60000));
  accel_future *f;

  fill_pattern(src, m, 100);
  long before = ops_completed(&d);
  CHECK_OK(accel_write(ctx, b, 5, src, m, &f));
  CHECK_EQ(ops_of(&d, ctx, before, f), 1);
  memcpy(expect + 5, src, m * 4);

  fill_pattern(src, m + 1, 7000);
  before = ops_completed(&d);
  CHECK_OK(accel_write(ctx, b, 2 * m + 3, src, m + 1, &f));
  CHECK_EQ(ops_of(&d, ctx, before, f), 2);
  memcpy(expect + 2 * m + 3, src, (m + 1) * 4);

  before = ops_completed(&d);
  CHECK_OK(accel_read(ctx, b, 5, got, m, &f));
  CHECK_EQ(ops_of(&d, ctx, before, f), 1);
  check_same(got, expect + 5, m, "read of max_op_bytes");

  before = ops_completed(&d);
  CHECK_OK(accel_read(ctx, b, 2 * m + 3, got, m + 1, &f));
  CHECK_EQ(ops_of(&d, ctx, before, f), 2);
  check_same(got, expect + 2 * m + 3, m + 1, "read of max_op_bytes + 1 element");

  /* a sub-range starting inside the first write, across the unwritten gap and both writes */
  before = ops_completed(&d);
  CHECK_OK(accel_read(ctx, b, m - 3, got, 2 * m + 10, &f));
  CHECK_EQ(ops_of(&d, ctx, before, f), 3);
  check_same(got, expect + m - 3, 2 * m + 10, "read of a sub-range");

  CHECK_OK(accel_read(ctx, b, 0, got, n, &f)); /* the whole buffer, zeros included */
  CHECK_OK(accel_future_wait(f, 60000));
  accel_future_release(f);
  check_same(got, expect, n, "read of the whole buffer");
  CHECK_OK(accel_finish(ctx, 60000));
  accel_close(ctx);
  free(expect);
  free(src);
  free(got);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Ops issued right after a chunked write (no wait) must follow all of its chunks: a small
 * write over its last element, a chunked read, a fire-and-forget chunked write, then a
 * destroy of the buffer (which, sent too early, would make chunks fail ACCEL_ESTALE). */
TEST(later_ops_follow_every_chunk) {
  td_daemon d;
  start_small(&d, SMALL_CONFIG);
  accel_ctx *ctx = open_ctx(d.url);
  size_t n = 40 * max_elems(ctx) + 3;
  float *src = alloc_floats(n), *src2 = alloc_floats(n), *got = alloc_floats(n);
  fill_pattern(src, n, 1);
  fill_pattern(src2, n, 99);
  float last = -1.0f, tail[2];
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &b));
  accel_future *w, *small, *r, *r2;
  CHECK_OK(accel_write(ctx, b, 0, src, n, &w));
  CHECK_OK(accel_write(ctx, b, n - 1, &last, 1, &small));
  CHECK_OK(accel_read(ctx, b, 0, got, n, &r));
  CHECK_OK(accel_write(ctx, b, 0, src2, n - 1, NULL));
  CHECK_OK(accel_read(ctx, b, n - 2, tail, 2, &r2)); /* not chunked, after them all */
  CHECK_OK(accel_buffer_destroy(ctx, b));
  CHECK_OK(accel_future_wait(w, 60000));
  CHECK_OK(accel_future_wait(small, 60000));
  CHECK_OK(accel_future_wait(r, 60000));
  CHECK_OK(accel_future_wait(r2, 60000));
  CHECK_OK(accel_finish(ctx, 60000));
  check_same(got, src, n - 1, "read after the write, before the second");
  CHECK_EQ(bits_of(got[n - 1]), bits_of(last));     /* the small write after every chunk */
  CHECK_EQ(bits_of(tail[0]), bits_of(src2[n - 2])); /* the second write before r2 */
  CHECK_EQ(bits_of(tail[1]), bits_of(last));
  accel_future_release(w);
  accel_future_release(small);
  accel_future_release(r);
  accel_future_release(r2);
  accel_close(ctx);
  free(src);
  free(src2);
  free(got);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The daemon never holds more than a window of a transfer's chunks: sampled while a few
 * thousand chunks stream (the daemon would take them all at once: they fit its budget). */
TEST(the_window_bounds_chunks_in_flight) {
  td_daemon d;
  start_small(&d, SMALL_CONFIG);
  accel_ctx *ctx = open_ctx(d.url);
  size_t n = (size_t)test_scaled(64l << 20, 4l << 20);
  float *src = alloc_floats(n);
  fill_pattern(src, n, 11);
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &b));
  CHECK_OK(accel_finish(ctx, 60000));
  accel_future *f;
  CHECK_OK(accel_write(ctx, b, 0, src, n, &f));
  long most = 0, samples = 0;
  while (accel_future_poll(f) == ACCEL_EAGAIN) {
    long now = td_status_field(&d, "ops_in_flight");
    most = now > most ? now : most;
    samples += now > 0;
  }
  CHECK_OK(accel_future_wait(f, 0));
  accel_future_release(f);
  printf("# %ld samples with chunks in flight, at most %ld at once\n", samples, most);
  CHECK_LE(most, CHUNK_WINDOW);
  CHECK_OK(accel_finish(ctx, 60000));
  accel_close(ctx);
  free(src);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A chunk that fails fails the whole transfer with its status, and the chunks after it are
 * not sent. The daemon refuses to create a buffer past the session's max_memory (creates are
 * pipelined: the client learns it from the create's reply), so every chunk to that handle
 * fails there with the create's error, ACCEL_ENOMEM; the context goes on. */
TEST(a_failed_chunk_fails_the_transfer) {
  td_daemon d;
  start_small(&d, SMALL_CONFIG "max_memory = 1M\n");
  accel_ctx *ctx = open_ctx(d.url);
  size_t n = 200 * 1024, chunks = (n + max_elems(ctx) - 1) / max_elems(ctx);
  CHECK_GT(chunks, 2 * CHUNK_WINDOW);
  float *src = alloc_floats(n), *got = alloc_floats(n);
  fill_pattern(src, n, 5);
  accel_buffer fits, refused;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &fits));
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &refused)); /* ENOMEM in the daemon */
  CHECK_ERR(accel_finish(ctx, 60000), ACCEL_ENOMEM);
  long failed = td_status_field(&d, "ops_failed");
  accel_future *f;
  CHECK_OK(accel_write(ctx, refused, 0, src, n, &f));
  CHECK_ERR(accel_future_wait(f, 60000), ACCEL_ENOMEM);
  accel_future_release(f);
  CHECK_OK(accel_read(ctx, refused, 0, got, n, &f));
  CHECK_ERR(accel_future_wait(f, 60000), ACCEL_ENOMEM);
  accel_future_release(f);
  CHECK_ERR(accel_finish(ctx, 60000), ACCEL_ENOMEM);
  long sent = td_status_field(&d, "ops_failed") - failed; /* both transfers' chunks */
  printf("# %zu chunks per transfer; %ld chunks sent (and failed) for the two\n", chunks, sent);
  CHECK_GE(sent, 2);
  CHECK_LE(sent, 2 * CHUNK_WINDOW);
  CHECK_OK(accel_write(ctx, fits, 0, src, n, NULL));
  CHECK_OK(accel_read(ctx, fits, 0, got, n, &f));
  CHECK_OK(accel_future_wait(f, 60000));
  accel_future_release(f);
  check_same(got, src, n, "the context after a failed transfer");
  CHECK_OK(accel_finish(ctx, 60000));
  accel_close(ctx);
  free(src);
  free(got);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The daemon dies while chunks stream: the transfer's future and an op queued behind it
 * complete with ACCEL_ECLOSED, accel_finish returns, accel_close does not hang. With
 * `stop_first` the daemon is stopped before it is killed, so that the sender is blocked in
 * a send (16 MiB chunks fill the socket) when it dies. False, having checked nothing, when
 * the transfer was done before the daemon died: the status polls that watch its progress
 * wait behind the chunks, and a busy machine can make them that late. */
typedef enum { OVER_IPC, OVER_TCP, OVER_NNG } over;

/* A daemon with `config` and the URL to reach it by: its local socket, tcp:// (its own
 * stream over TCP) or tls+tcp:// (nng's). */
static const char *start_over(td_daemon *d, over how, const char *config, char *url, size_t len) {
  if (how == OVER_NNG) {
    td_start_nng(d, config, url, len);
    return url;
  }
  td_prepare(d);
  td_write_config(d, config);
  snprintf(url, len, "tcp://127.0.0.1:%d", td_free_port());
  if (how == OVER_TCP)
    td_start(d, "--listen", url, "--allow-plain-tcp", NULL);
  else
    td_start(d, NULL);
  return how == OVER_TCP ? url : d->url;
}

static bool death_mid_stream(over how, const char *config, size_t n, long ops, bool stop_first) {
  td_daemon d;
  char tcp[64];
  accel_ctx *ctx = open_ctx(start_over(&d, how, config, tcp, sizeof tcp));
  float *src = alloc_floats(n), small[4];
  fill_pattern(src, n, 3);
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &b));
  accel_future *w, *r;
  CHECK_OK(accel_write(ctx, b, 0, src, n, &w));
  CHECK_OK(accel_read(ctx, b, 0, small, 4, &r));
  TEST_WAIT_FOR(ops_completed(&d) >= ops, 2);
  if (stop_first) {
    td_signal(&d, SIGSTOP);
    test_sleep_ms(300);
  }
  bool mid_stream = accel_future_poll(w) == ACCEL_EAGAIN;
  td_signal(&d, SIGKILL);
  td_wait(&d);
  if (!mid_stream) {
    CHECK_OK(accel_future_wait(w, -1));
    accel_future_release(w);
    accel_future_wait(r, -1); /* done or closed: either way not the case under test */
    accel_future_release(r);
    accel_close(ctx);
    free(src);
    td_cleanup(&d);
    return false;
  }
  CHECK_ERR(accel_future_wait(w, 30000), ACCEL_ECLOSED);
  CHECK_ERR(accel_future_wait(r, 30000), ACCEL_ECLOSED);
  CHECK_ERR(accel_finish(ctx, 30000), ACCEL_ECLOSED);
  accel_future_release(w);
  accel_future_release(r);
  CHECK_ERR(accel_write(ctx, b, 0, small, 4, NULL), ACCEL_ECLOSED); /* sent at once */
  int rc = accel_write(ctx, b, 0, src, n, NULL); /* queued for its sender, or refused */
  CHECK(rc == 0 || rc == ACCEL_ECLOSED);
  CHECK_ERR(accel_finish(ctx, 30000), rc == 0 ? ACCEL_ECLOSED : 0);
  accel_close(ctx); /* returns though its senders were blocked: else the watchdog fails it */
  free(src);
  td_cleanup(&d);
  return true;
}

/* death_mid_stream until the daemon dies mid-stream (a few tries). */
static void death_mid_stream_tries(over how, const char *config, size_t n, long ops,
                                   bool stop_first) {
  for (int i = 0; i < 5; i++) {
    if (death_mid_stream(how, config, n, ops, stop_first))
      return;
    printf("# the transfer was done before the daemon died: again\n");
  }
  TEST_FAIL("the daemon never died mid-stream in 5 tries");
}

/* 64 chunks of 16 MiB, the sender blocked in write() when the daemon dies. */
TEST(daemon_death_mid_stream_ipc) {
  death_mid_stream_tries(OVER_IPC, "", (size_t)test_scaled(256l << 20, 16l << 20), 3, true);
}

/* About 4000 chunks of 60 KiB over tcp:// (the same stream over TCP); killed after 20. */
TEST(daemon_death_mid_stream_tcp) {
  death_mid_stream_tries(OVER_TCP, SMALL_CONFIG, (size_t)test_scaled(64l << 20, 4l << 20), 20,
                         false);
}

/* Over nng (tls+tcp://), about 4000 chunks of 60 KiB; killed after 20 (sends to nng are short:
 * the sender waits for the window, not in nng, when the daemon dies). */
TEST(daemon_death_mid_stream_nng) {
  death_mid_stream_tries(OVER_NNG, SMALL_CONFIG, (size_t)test_scaled(64l << 20, 4l << 20), 20,
                         false);
}

/* As above with the sender blocked in the nng link (waiting for room behind 16 MiB chunks)
 * when the daemon dies: it is released when the link hears the pipe go, or by accel_close;
 * remote_free() waits for the sender to leave before freeing (it crashed about 2 runs in 3
 * before it did). The queued ops fail without the sender (chunk.c's flush). */
TEST(daemon_death_with_a_stuck_nng_send) {
  death_mid_stream_tries(OVER_NNG, "", (size_t)test_scaled(256l << 20, 16l << 20), 3, true);
}

/* ---- 4 GiB ---- */

static double gbps(size_t bytes, uint64_t ns) {
  return (double)bytes / (double)(ns ? ns : 1);
}

static uint64_t write_all(accel_ctx *ctx, accel_buffer b, const float *a, size_t n) {
  accel_future *f;
  uint64_t t0 = test_now_ns();
  CHECK_OK(accel_write(ctx, b, 0, a, n, &f));
  CHECK_OK(accel_future_wait(f, -1));
  accel_future_release(f);
  return test_now_ns() - t0;
}

/* An array of 4 GiB in transparent huge pages where the kernel allows them: touching it in 4 KiB
 * pages cost 10 s and more of faults under a hypervisor. */
static float *big_array(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint */
  return p;
}

/* Writes n pattern elements twice (the first write also waits for acceld to zero-fill the
 * new buffer), frees the source, reads them back into a fresh array whose pages are touched
 * first (so that the read's time is the transfer's): one array of 4 GiB at a time here. */
static void round_trip(accel_ctx *ctx, size_t n, const char *kind) {
  size_t bytes = n * sizeof(float);
  float *a = big_array(bytes);
  fill_pattern(a, n, 0);
  uint64_t want = checksum(a, n);
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &b));
  uint64_t first = write_all(ctx, b, a, n), again = write_all(ctx, b, a, n);
  CHECK_EQ(munmap(a, bytes), 0);
  a = big_array(bytes);
  memset(a, 0xff, bytes); /* touched before the read: its time is the transfer's */
  accel_future *f;
  uint64_t t0 = test_now_ns();
  CHECK_OK(accel_read(ctx, b, 0, a, n, &f));
  CHECK_OK(accel_future_wait(f, -1));
  uint64_t read = test_now_ns() - t0;
  accel_future_release(f);
  uint64_t got = checksum(a, n);
  if (got != want)
    for (size_t i = 0; i < n; i++)
      if (bits_of(a[i]) != bits_of(pattern(i)))
        TEST_FAIL("%s: element %zu is %g, expected %g", kind, i, (double)a[i], (double)pattern(i));
  CHECK_EQ(got, want);
  CHECK_EQ(munmap(a, bytes), 0);
  CHECK_OK(accel_buffer_destroy(ctx, b));
  CHECK_OK(accel_finish(ctx, 60000));
  printf("# %s, %.2f GiB: first write %.2f s (%.2f GB/s, with acceld's zero-fill), "
         "write %.2f s (%.2f GB/s), read %.2f s (%.2f GB/s)\n",
         kind, (double)bytes / (1 << 30), (double)first / 1e9, gbps(bytes, first),
         (double)again / 1e9, gbps(bytes, again), (double)read / 1e9, gbps(bytes, read));
}

static void four_gib(bool over_tcp) {
  td_daemon d;
  char tcp[64];
  accel_ctx *ctx = open_ctx(start_over(&d, over_tcp ? OVER_TCP : OVER_IPC, "", tcp, sizeof tcp));
  CHECK_GT(ctx->max_op_bytes, CHUNK_MAX_BYTES);       /* the defaults: 16 MiB chunks */
  size_t n = (size_t)test_scaled(1l << 30, 1l << 20); /* 4 GiB; 1 GiB under a sanitizer */
  round_trip(ctx, n, over_tcp ? "tcp" : "ipc");
  accel_close(ctx);
  printf("# acceld's peak resident memory: %ld MiB\n", daemon_peak_mib(&d));
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(four_gib_over_ipc) {
  four_gib(false);
}
TEST(four_gib_over_tcp) {
  four_gib(true);
}

/* A transfer of 256 MiB or more inside acceld logs its start and its end with the time it took;
 * one element less is not logged. The write lands in host memory, the copy on device 0 brings
 * it over: one transfer task of the buffer's size. */
static void copy_to_device(accel_ctx *ctx, size_t count) {
  accel_buffer src, dst;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_U32, count, &src));
  CHECK_OK(accel_buffer_create(ctx, ACCEL_U32, 1, &dst));
  uint32_t *host = calloc(count, sizeof *host);
  CHECK(host != NULL);
  accel_future *f;
  CHECK_OK(accel_write(ctx, src, 0, host, count, &f));
  CHECK_OK(accel_future_wait(f, -1));
  accel_future_release(f);
  CHECK_OK(accel_copy(ctx, 0, dst, 0, src, 0, 1, &f));
  CHECK_OK(accel_future_wait(f, -1));
  accel_future_release(f);
  free(host);
  CHECK_OK(accel_buffer_destroy(ctx, src));
  CHECK_OK(accel_buffer_destroy(ctx, dst));
  CHECK_OK(accel_finish(ctx, 60000));
}

TEST(large_transfers_are_logged) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--backends", "cpu", NULL);
  char url[200];
  snprintf(url, sizeof url, "%s?name=mover", d.url);
  accel_ctx *ctx = open_ctx(url);
  copy_to_device(ctx, (256u << 20) / 4 - 1); /* one element under the threshold */
  CHECK(strstr(td_log(&d), "copy host to device of") == NULL);
  copy_to_device(ctx, (256u << 20) / 4);
  const char *log = td_log(&d);
  CHECK(strstr(log, "device 0: copy host to device of 0.25 GiB started (client mover)") != NULL);
  CHECK(strstr(log, "device 0: copy host to device of 0.25 GiB done in ") != NULL);
  CHECK(strstr(log, " GB/s)") != NULL);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(one_op_up_to_the_limit_then_chunks),
    TEST_CASE(later_ops_follow_every_chunk),
    TEST_CASE(the_window_bounds_chunks_in_flight),
    TEST_CASE(a_failed_chunk_fails_the_transfer),
    TEST_CASE(daemon_death_mid_stream_ipc),
    TEST_CASE(daemon_death_mid_stream_tcp),
    TEST_CASE(daemon_death_mid_stream_nng),
    TEST_CASE(daemon_death_with_a_stuck_nng_send),
    TEST_CASE(large_transfers_are_logged),
    TEST_CASE(four_gib_over_ipc),
    TEST_CASE(four_gib_over_tcp),
};

TEST_MAIN(tests)
