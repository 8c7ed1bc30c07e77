/* Operational metrics of a world, for acceld's Prometheus endpoint (metrics.c).
 *
 * Recorded on the loop thread as each client op finishes (dev_op_finished): a counter per
 * device, op kind and status, and a latency histogram per device and op kind (from the op's
 * arrival at its session to its end). Off until dev_metrics_enable (embedded contexts never
 * pay for it). acceld renders them (server/render.h) with the world's gauges and its own
 * counters. */
#ifndef DEV_METRICS_H
#define DEV_METRICS_H

#include <stdint.h>

#include "actors/world.h"
#include "runtime/attr.h"

#define DEV_METRICS_BUCKETS 16                           /* latency buckets, +Inf aside */
#define DEV_METRICS_NODE_SLOTS (DEV_MAX_NODES + 1)       /* 0: never placed; n + 1: node n */
#define DEV_METRICS_STATUS_SLOTS (-ACCEL_ERRNO_MIN_ + 1) /* -status, then "unknown" */

/* The buckets' upper bounds, in seconds. */
extern const double dev_metrics_bucket_le[DEV_METRICS_BUCKETS];

struct dev_metrics {
  uint64_t ops[DEV_METRICS_NODE_SLOTS][DEV_OP_KIND_COUNT_][DEV_METRICS_STATUS_SLOTS];
  /* per bucket, not cumulative; the last is past every bound */
  uint64_t hist[DEV_METRICS_NODE_SLOTS][DEV_OP_KIND_COUNT_][DEV_METRICS_BUCKETS + 1];
  double sum_s[DEV_METRICS_NODE_SLOTS][DEV_OP_KIND_COUNT_];
};

/* Allocates the counters; 0 or ACCEL_ENOMEM. Idempotent. */
RT_MUST_USE int dev_metrics_enable(dev_world *w);
/* One client op finished with `status` (dev_op_finished). */
void dev_metrics_record(dev_world *w, const dev_call *call, int status);
void dev_metrics_free(dev_world *w);

#endif
