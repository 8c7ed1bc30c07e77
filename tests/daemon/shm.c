/* The shared-memory data plane of the local transport: data written from and read into
 * accel_host_alloc memory (zero copy) and from ordinary memory (staging) matches, with the
 * daemon's transfer counters exact; and the daemon refuses regions it must not map (not
 * sealed, not a file, no descriptor, unknown region, out of bounds) with clear errors. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include "accel/accel.h"
#include "proto/local.h"
#include "util.h"

static uint32_t pattern(size_t i, uint32_t seed) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
  return (uint32_t)(x ^ x >> 29);
}

static void fill_pattern(uint32_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = pattern(i, seed);
}

static size_t mismatches(const uint32_t *p, size_t n, uint32_t seed) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += p[i] != pattern(i, seed);
  return bad;
}

/* n elements through host memory: written from `src`, read back into `dst`. */
static void round_trip(accel_ctx *ctx, uint32_t *src, uint32_t *dst, size_t n, uint32_t seed) {
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_U32, n, &b));
  fill_pattern(src, n, seed);
  memset(dst, 0, n * 4);
  CHECK_OK(accel_write(ctx, b, 0, src, n, NULL));
  CHECK_OK(accel_read(ctx, b, 0, dst, n, NULL));
  CHECK_OK(accel_finish(ctx, 30000));
  CHECK_EQ(mismatches(dst, n, seed), 0);
  CHECK_OK(accel_buffer_destroy(ctx, b));
}

/* How many of the client's shared regions the daemon has mapped now. */
static int daemon_regions(td_daemon *d) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)d->pid);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  int n = 0;
  while (fgets(line, sizeof line, f))
    n += strstr(line, "memfd:accel-shm") != NULL;
  fclose(f);
  return n;
}

TEST(host_alloc_memory_round_trips_without_copies) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  accel_ctx *ctx;
  CHECK_OK(accel_open(&ctx, d.url));
  size_t n = 8u << 20; /* 32 MiB */
  uint32_t *src, *dst;
  CHECK_OK(accel_host_alloc(ctx, n * 4, (void **)&src));
  CHECK_OK(accel_host_alloc(ctx, n * 4, (void **)&dst));
  CHECK_EQ(daemon_regions(&d), 2); /* both mapped by the daemon: the data never crosses */
  accel_transfer_stats t0, t1;
  CHECK_OK(accel_transfer_stats_get(ctx, &t0));
  round_trip(ctx, src, dst, n, 1);
  CHECK_OK(accel_transfer_stats_get(ctx, &t1));
  CHECK_EQ(t1.written - t0.written, n * 4);
  CHECK_EQ(t1.read - t0.read, n * 4);
  /* A sub-range in the middle of a region: offsets into it. */
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_U32, 1 << 20, &b));
  CHECK_OK(accel_write(ctx, b, 0, src + 12345, 1 << 20, NULL));
  CHECK_OK(accel_read(ctx, b, 0, dst + 777, 1 << 20, NULL));
  CHECK_OK(accel_finish(ctx, 30000));
  CHECK_EQ(memcmp(src + 12345, dst + 777, 4u << 20), 0);
  CHECK_OK(accel_host_free(ctx, src));
  CHECK_OK(accel_host_free(ctx, dst));
  /* detached: unmapped (on a worker, after unregistering, where a GPU registered them) */
  TEST_WAIT_FOR(daemon_regions(&d) == 0, 20);
  CHECK_ERR(accel_host_free(ctx, src), ACCEL_EINVAL); /* freed already */
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(ordinary_memory_goes_through_staging) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  accel_ctx *ctx;
  CHECK_OK(accel_open(&ctx, d.url));
  size_t n = 3u << 20;
  uint32_t *src = malloc(n * 4), *dst = malloc(n * 4);
  CHECK(src && dst);
  for (uint32_t seed = 1; seed <= 4; seed++) /* the staging regions are reused */
    round_trip(ctx, src, dst, n - seed * 1000, seed);
  round_trip(ctx, src, dst, 1000, 9); /* small: inline */
  CHECK_GE(daemon_regions(&d), 1);    /* staging regions, kept for reuse */
  CHECK_LE(daemon_regions(&d), 2);    /* reused, not one per transfer */
  free(src);
  free(dst);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* ---- refusals, on the wire ---- */

static int attach(td_client *c, uint64_t region, int fd) {
  proto_out o;
  proto_control_req req = {PROTO_CTL_SHM_ATTACH, region};
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, id, &req));
  CHECK_OK(proto_local_send(c->fd, o.data, o.len, fd));
  proto_out_free(&o);
  nng_msg *m;
  CHECK_EQ(td_recv(c, &m, TD_FOREVER), 0);
  int status = td_reply_status(m, id, NULL);
  nng_msg_free(m);
  return status;
}

static int memfd(size_t len, unsigned seals) {
  int fd = memfd_create("test", MFD_ALLOW_SEALING);
  CHECK(fd >= 0);
  CHECK_EQ(ftruncate(fd, (off_t)len), 0);
  if (seals)
    CHECK_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  return fd;
}

static int shm_write(td_client *c, uint64_t handle, uint64_t count, proto_shm_ref ref) {
  dev_op op = {.h = {.kind = DEV_OP_WRITE, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle, .count = count};
  op.u.write.bytes = count * 4;
  proto_out o;
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op_shm(&o, id, &op, ref));
  return td_call(c, &o, id);
}

TEST(regions_the_daemon_must_not_map_are_refused) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  int fd = memfd(4096, 0); /* could shrink under the daemon */
  CHECK_ERR(attach(&c, 1, fd), ACCEL_EPERM);
  close(fd);
  int sv[2]; /* not a file */
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_ERR(attach(&c, 2, sv[0]), ACCEL_EINVAL);
  close(sv[0]);
  close(sv[1]);
  CHECK_ERR(attach(&c, 3, -1), ACCEL_EPROTO); /* no descriptor came with it */
  fd = memfd(4096, F_SEAL_SHRINK);
  CHECK_ERR(attach(&c, 0, fd), ACCEL_EINVAL); /* region 0 is not an id */
  CHECK_OK(attach(&c, 4, fd));
  CHECK_ERR(attach(&c, 4, fd), ACCEL_EINVAL); /* taken */
  close(fd);
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 1024));
  CHECK_OK(shm_write(&c, td_handle(1, 1), 1024, (proto_shm_ref){4, 0})); /* at the limit */
  CHECK_ERR(shm_write(&c, td_handle(1, 1), 1024, (proto_shm_ref){4, 1}), ACCEL_EINVAL);
  CHECK_ERR(shm_write(&c, td_handle(1, 1), 1024, (proto_shm_ref){4, UINT64_MAX}), ACCEL_EINVAL);
  CHECK_ERR(shm_write(&c, td_handle(1, 1), 1024, (proto_shm_ref){5, 0}), ACCEL_ESTALE);
  CHECK_OK(td_control(&c, PROTO_CTL_SHM_DETACH, 4));
  CHECK_ERR(shm_write(&c, td_handle(1, 1), 16, (proto_shm_ref){4, 0}), ACCEL_ESTALE);
  CHECK_ERR(td_control(&c, PROTO_CTL_SHM_DETACH, 4), ACCEL_EINVAL);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Through acceld, accel_transfer_stats_get counts the caller's session only: another
 * client's traffic never shows (nor leaks how much it moved). */
TEST(transfer_stats_are_per_session) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  accel_ctx *a, *b;
  CHECK_OK(accel_open(&a, d.url));
  CHECK_OK(accel_open(&b, d.url));
  accel_transfer_stats sa0, sb0, sa1, sb1;
  CHECK_OK(accel_transfer_stats_get(a, &sa0));
  CHECK_OK(accel_transfer_stats_get(b, &sb0));
  size_t n = 1u << 18;
  uint32_t *src = malloc(n * 4), *dst = malloc(n * 4);
  CHECK(src && dst);
  round_trip(a, src, dst, n, 3);
  CHECK_OK(accel_transfer_stats_get(a, &sa1));
  CHECK_OK(accel_transfer_stats_get(b, &sb1));
  CHECK_EQ(sa1.written - sa0.written, n * 4);
  CHECK_EQ(sa1.read - sa0.read, n * 4);
  CHECK_EQ(sb1.written, sb0.written);
  CHECK_EQ(sb1.read, sb0.read);
  CHECK_EQ(sb1.host_to_device + sb1.device_to_host + sb1.device_to_device,
           sb0.host_to_device + sb0.device_to_host + sb0.device_to_device);
  free(src);
  free(dst);
  accel_close(a);
  accel_close(b);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The first device of `backend`, or -1. */
static int device_of(accel_ctx *ctx, const char *backend) {
  for (int i = 0; i < accel_device_count(ctx); i++) {
    struct accel_device_info info;
    if (accel_device_info(ctx, i, &info) == 0 && strcmp(info.backend, backend) == 0)
      return i;
  }
  return -1;
}

/* Host memory in the daemon that goes to the GPU again and again is registered by the CUDA
 * backend's pin cache (status shows it), and the results stay right. The memory is a buffer's
 * copy on the daemon's cpu device, filled there each round and read by the GPU: a client's
 * write would land on the GPU directly once the GPU holds the buffer (from the message that
 * brought it, new memory each time). Needs a GPU (scripts/gpu-run runs this suite there). */
TEST(the_pin_cache_registers_a_host_copy_used_again) {
  td_daemon d;
  td_prepare(&d);
  /* The GPU in acceld: in a worker process (the default), the daemon's host memory reaches
   * the GPU through the worker's staging region, which is registered once at its start. */
  td_start(&d, "--workers", "", NULL);
  accel_ctx *ctx;
  CHECK_OK(accel_open(&ctx, d.url));
  int gpu = device_of(ctx, "cuda"), cpu = device_of(ctx, "cpu");
  if (gpu < 0) {
    accel_close(ctx);
    CHECK_EQ(td_stop(&d), 0);
    td_cleanup(&d);
    TEST_SKIP("no CUDA device: the daemon keeps no pin cache");
  }
  CHECK_GE(cpu, 0);
  CHECK_EQ(td_status_field(&d, "hits"), 0);
  size_t n = 1u << 20; /* 4 MiB */
  float *got = malloc(n * 4);
  CHECK(got != NULL);
  accel_buffer b, c;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &b));
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, n, &c));
  CHECK_OK(accel_fill_f32(ctx, gpu, c, 0, NULL));
  int rounds = 0;
  long hits = 0;
  /* Each round: b filled with the round's number on the cpu device (the GPU's copy goes
   * stale), then added to c on the GPU (from the cpu device's copy: a staged copy twice, then
   * by DMA once registered, in the background). */
  while (hits == 0 && rounds < 50) {
    rounds++;
    CHECK_OK(accel_fill_f32(ctx, cpu, b, (float)rounds, NULL));
    CHECK_OK(accel_saxpy(ctx, gpu, n, 1.0f, b, c, NULL));
    CHECK_OK(accel_finish(ctx, 30000));
    hits = td_status_field(&d, "hits");
  }
  CHECK_GT(hits, 0);
  CHECK_GE(rounds, 3); /* nothing is registered before its second copy */
  CHECK_GT(td_status_field(&d, "pinned_bytes"), 0);
  CHECK_OK(accel_read(ctx, c, 0, got, n, NULL));
  CHECK_OK(accel_finish(ctx, 30000));
  float want = (float)rounds * (float)(rounds + 1) / 2; /* exact: at most 1275 */
  for (size_t i = 0; i < n; i++)
    if (got[i] != want)
      TEST_FAIL("c[%zu] = %g after %d rounds, want %g", i, (double)got[i], rounds, (double)want);
  free(got);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A daemon started with the failpoint `var` = `value` in its environment (not in ours). */
static void start_with_failpoint(td_daemon *d, const char *var, const char *value) {
  td_prepare(d);
  CHECK_EQ(setenv(var, value, 1), 0);
  td_start(d, NULL);
  CHECK_EQ(unsetenv(var), 0);
}

/* At most 1024 regions per connection: the 1025th is ACCEL_ELIMIT; a detach makes room. */
TEST(regions_at_the_limit_and_one_past) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  int fd = memfd(4096, F_SEAL_SHRINK); /* the same file, mapped once per region */
  for (uint64_t id = 1; id <= 1024; id++)
    CHECK_OK(attach(&c, id, fd));
  CHECK_ERR(attach(&c, 1025, fd), ACCEL_ELIMIT);
  CHECK_OK(td_control(&c, PROTO_CTL_SHM_DETACH, 7));
  CHECK_OK(attach(&c, 1025, fd));
  close(fd);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A region's registration for DMA runs on a worker after its attach is answered, counted
 * among the connection's ops meanwhile. With each registration made to take 50 ms, 64
 * attaches one after another get 32 registrations pending, and the connection's reading
 * pauses (server_local.c, LINK_MAX_OPS); each registration that ends must let it resume, or
 * the next attach is never read (it hung: only ops that finished resumed reading). Stopped
 * with registrations pending, the daemon ends at once (their outcomes dropped, the server's
 * references went with them: it ran into its 15 s exit watchdog). */
TEST(attaches_beyond_32_pending_registrations_are_answered) {
  td_daemon d;
  start_with_failpoint(&d, "ACCEL_TEST_SHM_REGISTER_DELAY_US", "50000");
  td_client c;
  td_client_open(&c, d.url);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  bool dma = false;
  for (uint32_t i = 0; i < w.device_count; i++)
    dma |= strcmp(w.devices[i].backend, "cpu") != 0; /* CUDA and OpenCL register host memory */
  if (!dma) {
    td_client_close(&c);
    CHECK_EQ(td_stop(&d), 0);
    td_cleanup(&d);
    TEST_SKIP("no CUDA or OpenCL device: no region is registered for DMA");
  }
  int fd = memfd(4096, F_SEAL_SHRINK);
  for (uint64_t id = 1; id <= 64; id++)
    CHECK_OK(attach(&c, id, fd));
  close(fd);
  td_client_close(&c);
  int status = td_stop(&d); /* registrations still pending: dropped, and the server ends */
  if (status != 0 || strstr(td_log(&d), "still running") != NULL)
    TEST_FAIL("acceld exited with %d:\n%s", status, td_log(&d));
  td_cleanup(&d);
}

/* Descriptors that no attach announces pile up in the daemon: past 8 the peer is closed. */
TEST(unannounced_descriptors_close_the_connection) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  int fd = memfd(4096, F_SEAL_SHRINK);
  proto_out o;
  proto_control_req ping = {PROTO_CTL_PING, 0};
  for (uint64_t id = 1; id <= 8; id++) { /* a ping carrying a descriptor: answered, kept */
    proto_out_init(&o);
    CHECK_OK(proto_encode_control(&o, id, &ping));
    CHECK_OK(proto_local_send(c.fd, o.data, o.len, fd));
    proto_out_free(&o);
    nng_msg *m;
    CHECK_EQ(td_recv(&c, &m, TD_FOREVER), 0);
    CHECK_OK(td_reply_status(m, id, NULL));
    nng_msg_free(m);
  }
  proto_out_init(&o); /* the ninth is one too many */
  CHECK_OK(proto_encode_control(&o, 9, &ping));
  if (proto_local_send(c.fd, o.data, o.len, fd) != 0) {
    /* the daemon may have cut the connection for the count already: checked below */
  }
  proto_out_free(&o);
  nng_msg *m;
  int rv = td_recv(&c, &m, TD_FOREVER);
  if (rv == 0) { /* its answer may have been written before the count was checked */
    nng_msg_free(m);
    rv = td_recv(&c, &m, TD_FOREVER);
  }
  CHECK_EQ(rv, NNG_ECLOSED);
  close(fd);
  td_client_close(&c);
  TEST_WAIT_FOR(strstr(td_log(&d), "descriptors it did not announce") != NULL, 20);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* ---- what a hostile client tries ---- */

static int shm_read(td_client *c, uint64_t handle, uint64_t count, proto_shm_ref ref,
                    int32_t device) {
  dev_op op = {.h = {.kind = DEV_OP_READ, .device = device}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = handle, .count = count};
  op.u.read.bytes = count * 4;
  proto_out o;
  uint64_t id = c->next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op_shm(&o, id, &op, ref));
  return td_call(c, &o, id);
}

static bool daemon_alive(td_daemon *d) {
  return waitpid(d->pid, NULL, WNOHANG) == 0;
}

/* The racer: shrinks the file to nothing and seals it as soon as it is told to, after a
 * short random spin, so that over many tries its two calls land between the daemon's own
 * two checks of the descriptor (the size, the seals). */
typedef struct racer {
  pthread_t thread;
  atomic_int go; /* the descriptor to shrink; -1: wait; -2: stop */
} racer;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *race(void *arg) {
  racer *r = arg;
  uint64_t x = 88172645463325252ull;
  for (;;) {
    int fd = atomic_load(&r->go);
    if (fd == -2)
      return NULL;
    if (fd < 0)
      continue;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    uint64_t until = now_ns() + x % 600000; /* 0-600 us: the frame's way, and the gap */
    while (now_ns() < until) {
    }
    if (ftruncate(fd, 0) == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0)
      atomic_store(&r->go, -1);
  }
}

/* A region whose file the client shrinks to nothing and seals WHILE the daemon checks it:
 * the daemon read the size first and the seals second, so a file shrunk in between passed
 * both checks at its old size and the next READ into it killed acceld with SIGBUS (the
 * probe won within 3.3 s in 7 of 7 tries). Now the seals are read first: the attach is
 * refused, or it maps a region the READ can write. The daemon's failpoint widens the gap
 * between its two checks to 300 us, so the racer lands in it often; tries for 3 s. */
TEST(a_region_shrunk_during_its_checks_never_faults_the_daemon) {
  td_daemon d;
  start_with_failpoint(&d, "ACCEL_TEST_SHM_CHECK_GAP_US", "300");
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 4096));
  CHECK_OK(td_fill(&c, td_handle(1, 1), 7));
  racer r = {.go = -1};
  CHECK_EQ(pthread_create(&r.thread, NULL, race, &r), 0);
  int tries = 0, mapped = 0, refusals[2] = {0, 0};
  for (uint64_t t0 = test_now_ms(); test_now_ms() - t0 < 3000 && daemon_alive(&d); tries++) {
    int fd = memfd(1u << 20, 0);
    atomic_store(&r.go, fd);
    uint64_t id = (uint64_t)tries + 1;
    int rc = attach(&c, id, fd);
    while (atomic_load(&r.go) >= 0) { /* the racer is done with it before it is closed */
    }
    close(fd);
    if (rc != 0) {
      refusals[rc == ACCEL_EPERM]++;
      continue;
    }
    mapped++; /* whatever it mapped must take the READ (or refuse it), never fault */
    int rd = shm_read(&c, td_handle(1, 1), 4096, (proto_shm_ref){id, 0}, ACCEL_DEVICE_ANY);
    if (rd != 0)
      CHECK_ERR(rd, ACCEL_EINVAL);
    CHECK_OK(td_control(&c, PROTO_CTL_SHM_DETACH, id));
  }
  atomic_store(&r.go, -2);
  pthread_join(r.thread, NULL);
  if (!daemon_alive(&d))
    TEST_FAIL("acceld died after %d tries (%d mapped):\n%s", tries, mapped, td_log(&d));
  printf("# %d attaches raced: %d mapped, %d refused unsealed, %d refused empty\n", tries, mapped,
         refusals[1], refusals[0]);
  CHECK_GT(tries, 50);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* An attach that may meet ACCEL_ELIMIT until bytes given back are counted: tried for 5 s. */
static int attach_soon(td_client *c, uint64_t region, int fd) {
  int rc = ACCEL_ELIMIT;
  for (uint64_t t0 = test_now_ms(); rc == ACCEL_ELIMIT && test_now_ms() - t0 < 5000;)
    if ((rc = attach(c, region, fd)) == ACCEL_ELIMIT)
      test_sleep_ms(10);
  return rc;
}

/* Mapped bytes are capped per connection and in all ([limits] max_shared_bytes and
 * max_shared_bytes_total): at each cap an attach passes, one page past it is ACCEL_ELIMIT; a
 * detach, or a connection's end, gives its bytes back. Sparse files cost the client nothing,
 * so without the caps one client mapped 127 TiB and every other HELLO failed. */
TEST(shared_bytes_at_the_caps_and_one_past) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[limits]\nmax_shared_bytes = 3M\nmax_shared_bytes_total = 5M\n");
  td_start(&d, NULL);
  td_client a, b;
  td_client_open(&a, d.url);
  td_client_open(&b, d.url);
  CHECK_OK(td_hello(&a, NULL));
  CHECK_OK(td_hello(&b, NULL));
  int mib = memfd(1u << 20, F_SEAL_SHRINK), page = memfd(4096, F_SEAL_SHRINK);
  int two = memfd(2u << 20, F_SEAL_SHRINK);
  CHECK_OK(attach(&a, 1, two));
  CHECK_OK(attach(&a, 2, mib)); /* a: 3 MiB, at its cap */
  CHECK_ERR(attach(&a, 3, page), ACCEL_ELIMIT);
  CHECK_OK(attach(&b, 1, two)); /* in all: 5 MiB, at the daemon's cap */
  CHECK_ERR(attach(&b, 2, page), ACCEL_ELIMIT);
  CHECK_OK(td_control(&a, PROTO_CTL_SHM_DETACH, 2));
  /* b: 3 MiB; in all 5 again (with a GPU the detached region is unmapped once its
   * registration for DMA has finished, on a worker: its bytes come back a little later) */
  CHECK_OK(attach_soon(&b, 2, mib));
  CHECK_ERR(attach(&a, 3, page), ACCEL_ELIMIT);
  td_client_close(&b); /* its 3 MiB come back when its record goes (soon after) */
  CHECK_OK(attach_soon(&a, 3, mib));
  CHECK_ERR(attach(&a, 4, page), ACCEL_ELIMIT);
  /* a 1 TiB sparse file: far past both */
  int huge = memfd(1ull << 40, F_SEAL_SHRINK);
  CHECK_ERR(attach(&a, 5, huge), ACCEL_ELIMIT);
  close(huge);
  close(two);
  close(mib);
  close(page);
  td_client_close(&a);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The daemon's descriptors once they stop changing (an accepted attach keeps a copy of its
 * memfd until the region is registered for DMA, on a worker thread, perhaps in a device
 * worker process). */
static int settled_fds(pid_t pid) {
  int n = td_open_fds(pid);
  for (uint64_t t0 = test_now_ms(); test_now_ms() - t0 < 5000;) {
    test_sleep_ms(100);
    int m = td_open_fds(pid);
    if (m == n)
      return n;
    n = m;
  }
  return n;
}

/* Every refused attach closes the descriptor it brought: 300 refusals of each kind leave
 * the daemon with the descriptors it had (a leak of one per refusal ran acceld out of them). */
TEST(refused_attaches_leave_no_descriptor_behind) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[limits]\nmax_shared_bytes = 1M\n");
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  int unsealed = memfd(4096, 0), sealed = memfd(4096, F_SEAL_SHRINK);
  int big = memfd(2u << 20, F_SEAL_SHRINK);
  CHECK_OK(attach(&c, 1, sealed));
  int before = settled_fds(d.pid);
  for (int i = 0; i < 300; i++) {
    CHECK_ERR(attach(&c, 2, unsealed), ACCEL_EPERM); /* could shrink */
    CHECK_ERR(attach(&c, 1, sealed), ACCEL_EINVAL);  /* id taken */
    CHECK_ERR(attach(&c, 0, sealed), ACCEL_EINVAL);  /* not an id */
    CHECK_ERR(attach(&c, 3, big), ACCEL_ELIMIT);     /* past the cap */
  }
  CHECK_EQ(td_open_fds(d.pid), before);
  close(unsealed);
  close(sealed);
  close(big);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A shared-memory READ or WRITE names its device like any op: one the daemon does not have
 * is ACCEL_EINVAL (it was accepted, where the same op inline was refused). */
TEST(shared_memory_ops_on_a_device_that_does_not_exist) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  int fd = memfd(1u << 16, F_SEAL_SHRINK);
  CHECK_OK(attach(&c, 1, fd));
  close(fd);
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 16));
  CHECK_OK(td_fill(&c, td_handle(1, 1), 5));
  int32_t last = (int32_t)w.device_count - 1;
  CHECK_OK(shm_read(&c, td_handle(1, 1), 16, (proto_shm_ref){1, 0}, last)); /* at the limit */
  CHECK_ERR(shm_read(&c, td_handle(1, 1), 16, (proto_shm_ref){1, 0}, last + 1), ACCEL_EINVAL);
  CHECK_ERR(shm_read(&c, td_handle(1, 1), 16, (proto_shm_ref){1, 0}, 1000), ACCEL_EINVAL);
  CHECK_ERR(shm_read(&c, td_handle(1, 1), 16, (proto_shm_ref){1, 0}, -5), ACCEL_EPROTO);
  dev_op op = {.h = {.kind = DEV_OP_WRITE, .device = 1000}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = td_handle(1, 1), .count = 16};
  op.u.write.bytes = 64;
  proto_out o;
  uint64_t id = c.next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op_shm(&o, id, &op, (proto_shm_ref){1, 0}));
  CHECK_ERR(td_call(&c, &o, id), ACCEL_EINVAL);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(host_alloc_memory_round_trips_without_copies),
    TEST_CASE(ordinary_memory_goes_through_staging),
    TEST_CASE(regions_the_daemon_must_not_map_are_refused),
    TEST_CASE(transfer_stats_are_per_session),
    TEST_CASE(the_pin_cache_registers_a_host_copy_used_again),
    TEST_CASE(regions_at_the_limit_and_one_past),
    TEST_CASE(attaches_beyond_32_pending_registrations_are_answered),
    TEST_CASE(unannounced_descriptors_close_the_connection),
    TEST_CASE(a_region_shrunk_during_its_checks_never_faults_the_daemon),
    TEST_CASE(shared_bytes_at_the_caps_and_one_past),
    TEST_CASE(refused_attaches_leave_no_descriptor_behind),
    TEST_CASE(shared_memory_ops_on_a_device_that_does_not_exist),
};

TEST_MAIN(tests)
