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

#endif
