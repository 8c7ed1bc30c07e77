/* The chaos test's two halves: the parent (chaos.c: the daemon, faults, kills, the final
 * accounting) and the client processes (chaos_client.c: random ops through libaccel, each
 * result checked against a float64 host reference). A client is a fresh exec of the test
 * executable (libaccel's threads do not survive fork), picked up before main when
 * CHAOS_ENV_URL is set; it reports to the parent through a pipe. */
#ifndef TESTS_DAEMON_CHAOS_H
#define TESTS_DAEMON_CHAOS_H

#include <stdint.h>

#define CHAOS_ENV_URL "ACCEL_CHAOS_URL"   /* the daemon to use: set only in clients */
#define CHAOS_ENV_SEED "ACCEL_CHAOS_SEED" /* the client's random seed */
#define CHAOS_ENV_FD "ACCEL_CHAOS_FD"     /* the write end of the report pipe */

enum chaos_report_kind {
  CHAOS_PROGRESS = 1, /* counts since the client's previous report */
  CHAOS_FAILED = 2    /* a wrong value, an unexpected error code or a hang (on stderr) */
};

/* Smaller than PIPE_BUF: written at once, never interleaved with another client's. */
typedef struct chaos_report {
  int32_t pid;
  uint32_t kind;
  uint64_t ops;      /* ops issued (each with a read-back of what it wrote) */
  uint64_t checked;  /* ops whose result was compared with the reference */
  uint64_t devlost;  /* ACCEL_EDEVLOST seen: a device fault hit the op */
  uint64_t datalost; /* ACCEL_EDATALOST seen: the op used data a fault destroyed */
  uint64_t closed;   /* ACCEL_ECLOSED seen: the connection was lost */
} chaos_report;

/* splitmix64: small, and good enough to pick ops and make data. */
static inline uint64_t chaos_rnd(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static inline uint64_t chaos_range(uint64_t *state, uint64_t lo, uint64_t hi) {
  return lo + chaos_rnd(state) % (hi - lo + 1);
}

/* Uniform double in [lo, hi). */
static inline double chaos_uniform(uint64_t *state, double lo, double hi) {
  return lo + (hi - lo) * (double)(chaos_rnd(state) >> 11) * 0x1p-53;
}

#endif
