/* Single-core fill rates of the cpu backend's Philox kernels, next to memset on the same buffer
 * (the floor a fill can approach). Best of several runs; the machines are noisy VMs.
 *   meson test -C <build> --benchmark --suite backends -v
 * or run bench_cpu_rng [MiB] directly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_kernels.h"

#define REPEATS 7

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef void run_fn(void *buf, size_t words, uint64_t offset);

static void run_u32(void *buf, size_t words, uint64_t offset) {
  be_cpu_philox_fill_u32(buf, words, 42, offset);
}

static void run_uniform(void *buf, size_t words, uint64_t offset) {
  be_cpu_philox_fill_uniform(buf, words, 42, offset);
}

static void run_normal(void *buf, size_t words, uint64_t offset) {
  be_cpu_philox_fill_normal(buf, words, 42, offset * 2, 0.0f, 1.0f);
}

static void run_memset(void *buf, size_t words, uint64_t offset) {
  memset(buf, (int)offset, words * 4);
}

/* Words per second, best of REPEATS. */
static double rate(run_fn *fn, void *buf, size_t words) {
  double best = 0;
  for (int r = 0; r < REPEATS; r++) {
    double t = now();
    fn(buf, words, (uint64_t)r * words);
    double w = (double)words / (now() - t);
    best = w > best ? w : best;
  }
  return best;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 64;
  size_t words = mib * 1024 * 1024 / 4;
  uint32_t *buf = malloc(words * 4);
  if (buf == NULL || words == 0)
    return 1;
  run_memset(buf, words, 1); /* fault the pages in */
  struct {
    const char *name;
    run_fn *fn;
  } runs[] = {
      {"memset", run_memset},
      {"philox u32", run_u32},
      {"philox uniform", run_uniform},
      {"philox normal", run_normal},
  };
  double floor = 0;
  printf("buffer %zu MiB, one thread, best of %d\n", mib, REPEATS);
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    double w = rate(runs[i].fn, buf, words);
    floor = i == 0 ? w : floor;
    printf("%-16s %8.3g words/s  %6.2f GB/s  %5.1f%% of memset\n", runs[i].name, w, w * 4 / 1e9,
           100 * w / floor);
  }
  free(buf);
  return 0;
}
