/* The SessionActor: a client's buffers and ops (see session.c). */
#ifndef DEV_SESSION_H
#define DEV_SESSION_H

#include "actors/world.h"

typedef struct dev_session_args {
  dev_world *world;
  uint32_t max_buffers; /* size of the handle table; slot 0 is never used */
} dev_session_args;

/* DEV_MSG_BUFFER_CREATE's payload (msg.arg is the handle). */
typedef struct dev_buffer_spec {
  accel_dtype dtype;
  size_t count;
} dev_buffer_spec;

extern const accel_behavior dev_session_behavior;

#endif
