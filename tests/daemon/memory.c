/* Device memory through acceld (actors/mem_cache.h): a freed buffer's memory is kept and
 * given to the next buffer of its size class, so a loop of create, use, destroy allocates from
 * the backend once (the rest are hits of the cache); the cache stays within its bound (an
 * eighth of the device's memory, at most 1 GiB) and is not counted as memory used; blocks are
 * cached at their size class, and out of device memory the cache is emptied. The tests
 * also run with the loop's blocking check on (ACCEL_CHECK_LOOP_BLOCKING=1, set by meson for
 * every test): the daemon aborts if it allocates on its loop. */
#include <sys/resource.h>

#include "accel/accel.h"
#include "util.h"

static accel_ctx *open_ctx(td_daemon *d) {
  td_prepare(d);
  td_write_config(d, "[devices]\nbackends = cpu\n");
  td_start(d, NULL);
  accel_ctx *ctx = NULL;
  CHECK_OK(accel_open(&ctx, d->url));
  return ctx;
}

/* A buffer of `count` floats made, filled on device 0 (its replica there needs memory), read
 * back and checked, destroyed. */
static void use_once(accel_ctx *ctx, size_t count, float value) {
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, count, &b));
  CHECK_OK(accel_fill(ctx, 0, b, value, NULL));
  float last = 0;
  accel_future *f;
  CHECK_OK(accel_read(ctx, b, count - 1, &last, 1, &f));
  CHECK_OK(accel_future_wait(f, 60000));
  accel_future_release(f);
  CHECK(last == value);
  CHECK_OK(accel_buffer_destroy(ctx, b));
}

TEST(freed_memory_is_reused) {
  td_daemon d;
  accel_ctx *ctx = open_ctx(&d);
  long misses0 = td_status_field(&d, "alloc_cache_misses");
  long hits0 = td_status_field(&d, "alloc_cache_hits");
  for (int i = 0; i < 50; i++)
    /* 4 MiB + 4000 i bytes: one size class in 2 MiB steps (50 classes in 512 B steps) */
    use_once(ctx, (1u << 20) + 1000 * (size_t)i, (float)i);
  CHECK_OK(accel_finish(ctx, 60000));
  long misses = td_status_field(&d, "alloc_cache_misses") - misses0;
  long hits = td_status_field(&d, "alloc_cache_hits") - hits0;
  printf("# 50 buffers of one size class on device 0: %ld allocated, %ld from the cache\n", misses,
         hits);
  /* The first allocates; a destroy frees once its last op is done, so a later create may
   * come first now and then: a few more, never one per buffer. */
  CHECK_GE(misses, 1);
  CHECK_LE(misses, 5);
  CHECK_GE(hits, 45);
  CHECK_EQ(td_status_field(&d, "mem_used"), 0); /* cached is not used */
  CHECK_GT(td_status_field(&d, "mem_cached"), 0);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* 40 buffers of 32 MiB live at once, then all freed: 1.25 GiB come back, and the cache keeps
 * at most its bound (1 GiB on a machine of 8 GiB or more), the rest freed. */
TEST(the_cache_is_bounded) {
  td_daemon d;
  accel_ctx *ctx = open_ctx(&d);
  enum { NBUF = 40 };
  size_t count = (32u << 20) / 4;
  accel_buffer b[NBUF];
  for (int i = 0; i < NBUF; i++) {
    CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, count, &b[i]));
    CHECK_OK(accel_fill(ctx, 0, b[i], 1.0, NULL));
  }
  CHECK_OK(accel_finish(ctx, 120000));
  long total = td_status_field(&d, "mem_total");
  long bound = total / 8 < (1l << 30) ? total / 8 : (1l << 30);
  CHECK_EQ(td_status_field(&d, "mem_used"), (long)NBUF * (32l << 20));
  for (int i = 0; i < NBUF; i++)
    CHECK_OK(accel_buffer_destroy(ctx, b[i]));
  CHECK_OK(accel_finish(ctx, 120000));
  long cached = td_status_field(&d, "mem_cached");
  printf("# 40 x 32 MiB freed: %ld MiB cached (bound %ld MiB)\n", cached >> 20, bound >> 20);
  CHECK_EQ(td_status_field(&d, "mem_used"), 0);
  CHECK_LE(cached, bound);
  CHECK_GT(cached, bound - (32l << 20)); /* trimmed to the bound, not emptied */
  use_once(ctx, count, 2.0f);            /* served again, from the cache */
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Device 0's cached bytes (the first "mem_cached" of the status). */
static long cached(td_daemon *d) {
  return td_status_field(d, "mem_cached");
}

/* A buffer of `bytes` made, filled on device 0 (a block there), destroyed: its block goes to
 * the cache. Returns how much the cache grew. */
static long cache_one(td_daemon *d, accel_ctx *ctx, size_t bytes) {
  long before = cached(d);
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, bytes / 4, &b));
  CHECK_OK(accel_fill(ctx, 0, b, 1.0, NULL));
  CHECK_OK(accel_buffer_destroy(ctx, b));
  CHECK_OK(accel_finish(ctx, 60000));
  TEST_WAIT_FOR(cached(d) != before, 20); /* freed once its last op is done */
  return cached(d) - before;
}

/* Blocks are allocated and cached at their size class: 512-byte steps up to 1 MiB (1 MiB
 * itself included), 2 MiB steps above; a size on a step is its own class. A buffer of a
 * cached class takes its block back, and the cache shrinks by it. */
TEST(blocks_are_cached_at_their_size_class) {
  td_daemon d;
  accel_ctx *ctx = open_ctx(&d);
  CHECK_EQ(cache_one(&d, ctx, 1000), 1024);
  CHECK_EQ(cache_one(&d, ctx, 1u << 20), 1l << 20);
  CHECK_EQ(cache_one(&d, ctx, (3u << 20) + 4), 4l << 20);
  long before = cached(&d);
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, (1u << 20) / 4, &b));
  CHECK_OK(accel_fill(ctx, 0, b, 2.0, NULL));
  CHECK_OK(accel_finish(ctx, 60000)); /* its block was taken when the fill was planned */
  CHECK_EQ(cached(&d), before - (1l << 20));
  CHECK_OK(accel_buffer_destroy(ctx, b));
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The daemon's address space (VmSize), in bytes. */
static unsigned long long vm_size(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  unsigned long long kib = 0;
  while (fgets(line, sizeof line, f) && sscanf(line, "VmSize: %llu kB", &kib) != 1) {
  }
  fclose(f);
  CHECK_GT(kib, 0);
  return kib << 10;
}

/* Out of device memory, the caches are emptied (every block) and the allocation is tried once
 * more (actors/session.c). The CPU device's memory is the daemon's, so its address space is
 * limited to what it maps now plus 256 MiB: with 64 MiB cached, 288 MiB do not fit. After
 * that fill nothing is cached, whether the retry fitted or not. */
TEST(out_of_device_memory_the_cache_is_emptied) {
  td_daemon d;
  accel_ctx *ctx = open_ctx(&d);
  CHECK_EQ(cache_one(&d, ctx, 64u << 20), 64l << 20);
  struct rlimit old, lim;
  CHECK_EQ(prlimit(d.pid, RLIMIT_AS, NULL, &old), 0);
  lim = (struct rlimit){vm_size(d.pid) + (256ull << 20), old.rlim_max};
  CHECK_EQ(prlimit(d.pid, RLIMIT_AS, &lim, NULL), 0);
  accel_buffer b;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, (288u << 20) / 4, &b));
  accel_future *f;
  CHECK_OK(accel_fill(ctx, 0, b, 1.0, &f));
  int rc = accel_future_wait(f, -1);
  accel_future_release(f);
  printf("# 288 MiB asked beside 64 MiB cached, 256 MiB of room: the fill %s\n",
         accel_err_name(rc));
  CHECK(rc == 0 || rc == ACCEL_ENOMEM);
  CHECK_EQ(cached(&d), 0);
  CHECK_EQ(prlimit(d.pid, RLIMIT_AS, &old, NULL), 0);
  CHECK_OK(accel_buffer_destroy(ctx, b));
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(freed_memory_is_reused),
    TEST_CASE(the_cache_is_bounded),
    TEST_CASE(blocks_are_cached_at_their_size_class),
    TEST_CASE(out_of_device_memory_the_cache_is_emptied),
};

TEST_MAIN(tests)
