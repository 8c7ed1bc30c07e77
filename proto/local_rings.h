/* The local link's shared rings: a local client's frames to acceld, and acceld's replies, go
 * through two byte rings in a sealed memfd the client makes and passes with its HELLO
 * (PROTO_CAP_RINGS, docs/PROTOCOL.md "Shared rings"); the socket then carries only bells for a
 * side that sleeps, descriptors (sent, and counted in the ring's `passes`, before the frame
 * they go with is written) and the end. Why: a frame through the socket costs a system call
 * on each side and often a wake-up; through memory that a polling thread watches, a copy
 * (runtime/shm_ring.h).
 *
 * The region: the two directions' positions on the first page, then the client's ring (up)
 * and acceld's (down). acceld trusts nothing in it: it copies frames out before it reads
 * them and checks every position (runtime/shm_ring.h), and the region is sealed against
 * shrinking (a mapping that shrinks turns an access into SIGBUS). */
#ifndef PROTO_LOCAL_RINGS_H
#define PROTO_LOCAL_RINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/attr.h"
#include "runtime/shm_ring.h"

#define PROTO_RINGS_CTL_BYTES 4096u
#define PROTO_RINGS_UP_BYTES (256u << 10)   /* client -> acceld: requests */
#define PROTO_RINGS_DOWN_BYTES (256u << 10) /* acceld -> client: replies */
#define PROTO_RINGS_BYTES (PROTO_RINGS_CTL_BYTES + PROTO_RINGS_UP_BYTES + PROTO_RINGS_DOWN_BYTES)

/* The client: a new region, sealed and mapped (*base, PROTO_RINGS_BYTES); its descriptor
 * (close-on-exec) or ACCEL_ESYS/ACCEL_ENOMEM. Both readers start as sleepers: the first
 * write rings. The up ring's `passes` counts every descriptor the client sent on the
 * connection, the region's own (with the HELLO) included: it starts at 1. */
RT_MUST_USE int proto_rings_create(uint8_t **base);
/* The two directions of a mapped region, positions 0, as one side sees them: the client
 * writes `out` = up and reads `in` = down; acceld (client = false) the other way round. */
void proto_rings_view(uint8_t *base, bool client, rt_ring *out, rt_ring *in);

#endif
