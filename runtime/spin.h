/* How long a thread that has just worked polls for more before it sleeps (the loops, future
 * waiters, and outside the runtime acceld's I/O threads and the device workers' link
 * readers): one rule for every thread a small op crosses. */
#ifndef RT_SPIN_H
#define RT_SPIN_H

#include <stdint.h>

/* ACCEL_SPIN_US if set (0: never), else 50 us on machines of 8 cores or more and 0 below
 * (worth it only with spare cores). Read once. */
uint64_t rt_spin_ns(void);

/* A hint to the CPU inside a polling loop. */
static inline void rt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ __volatile__("pause");
#endif
}

#endif
