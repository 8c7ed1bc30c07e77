/* The local link's shared rings (local_rings.h). */
#include "proto/local_rings.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "accel/error.h"

#define CTL_DOWN 256u

_Static_assert(sizeof(rt_ring_ctl) <= CTL_DOWN, "a direction's positions fit their slot");

int proto_rings_create(uint8_t **base) {
  int fd = memfd_create("accel-client-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return ACCEL_ESYS;
  if (ftruncate(fd, PROTO_RINGS_BYTES) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return ACCEL_ESYS;
  }
  void *p = mmap(NULL, PROTO_RINGS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return ACCEL_ENOMEM;
  }
  *base = p;
  rt_ring up, down;
  proto_rings_view(p, true, &up, &down);
  atomic_store(&up.ctl->reader_sleeps, 1);
  atomic_store(&down.ctl->reader_sleeps, 1);
  atomic_store(&up.ctl->passes, 1); /* the region's own descriptor, passed with the HELLO */
  return fd;
}

void proto_rings_view(uint8_t *base, bool client, rt_ring *out, rt_ring *in) {
  rt_ring up = {.ctl = (rt_ring_ctl *)(void *)base,
                .data = base + PROTO_RINGS_CTL_BYTES,
                .size = PROTO_RINGS_UP_BYTES};
  rt_ring down = {.ctl = (rt_ring_ctl *)(void *)(base + CTL_DOWN),
                  .data = base + PROTO_RINGS_CTL_BYTES + PROTO_RINGS_UP_BYTES,
                  .size = PROTO_RINGS_DOWN_BYTES};
  *out = client ? up : down;
  *in = client ? down : up;
}
