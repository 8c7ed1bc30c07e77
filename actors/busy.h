/* How busy each device is, measured by accel itself for every backend (busy.c). */
#ifndef DEV_BUSY_H
#define DEV_BUSY_H

#include <stdint.h>

#include "actors/world.h"

/* Busy time (dev_node's busy_*): work of the node was submitted and not yet complete. Loop
 * thread. begin/end: the kernel actors, around each piece of work on a queue. */
void dev_node_busy_begin(dev_node *node, uint64_t now_ns);
void dev_node_busy_end(dev_node *node, uint64_t now_ns);
/* Nanoseconds the node has been busy in all, up to now. */
uint64_t dev_node_busy_total_ns(const dev_node *node, uint64_t now_ns);
/* Moves every node's window on where the last one is at least a second old: busy_share is then
 * the share of that window the node was busy (what `accelctl top` shows, refreshed each
 * second). Called by reports before they read busy_share. */
void dev_busy_roll(dev_world *w, uint64_t now_ns);

/* What a task does, in words: its op's label, or "copy host to device", "copy device to host",
 * "copy device to device", "release". A static string. */
const char *dev_task_label(const dev_task *t);

/* The name of the client whose op made the task ("?" unknown). */
const char *dev_task_client(const dev_task *t);

/* Work that has been on a device queue for at least min_ns (long kernels, large transfers):
 * for `accelctl top` and the status JSON. */
typedef struct dev_work_report {
  int device;
  const char *queue; /* "mem", "blas", ... */
  const char *what;  /* dev_task_label */
  uint64_t bytes;    /* a transfer's */
  double seconds;    /* on the queue so far */
  const char *client;
} dev_work_report;

extern const char *const dev_queue_names[DEV_Q_COUNT];

/* Module builds running on node n now, and for how long the first of them has run. */
uint32_t dev_node_builds_running(dev_node *node, double *seconds);

/* kernel_actor.c: up to max reports, oldest first per queue; how many. */
int dev_work_in_progress(const dev_world *w, uint64_t now_ns, uint64_t min_ns,
                         dev_work_report out[], int max);

#endif
