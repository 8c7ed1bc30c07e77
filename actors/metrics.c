/* Operational metrics (metrics.h): recording, on the loop thread. */
#include <stdlib.h>
#include <uv.h>

#include "actors/metrics.h"

#include "actors/device.h"
#include "runtime/alloc.h"

const double dev_metrics_bucket_le[DEV_METRICS_BUCKETS] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
                                                           1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
                                                           0.1,  0.25,   1.0,  10.0};

int dev_metrics_enable(dev_world *w) {
  if (w->metrics == NULL && (w->metrics = rt_calloc(1, sizeof *w->metrics)) == NULL)
    return ACCEL_ENOMEM;
  return 0;
}

void dev_metrics_free(dev_world *w) {
  rt_free(w->metrics);
  w->metrics = NULL;
}

void dev_metrics_record(dev_world *w, const dev_call *call, int status) {
  dev_metrics *m = w->metrics;
  const dev_op *op = &call->op;
  if (m == NULL || dev_op_info_of(op->h.kind) == NULL)
    return;
  unsigned node = call->ran_on < DEV_METRICS_NODE_SLOTS ? call->ran_on : 0;
  unsigned st = status <= 0 && status > ACCEL_ERRNO_MIN_ ? (unsigned)-status
                                                         : DEV_METRICS_STATUS_SLOTS - 1;
  m->ops[node][op->h.kind][st]++;
  double s = call->t_issued_ns ? (double)(uv_hrtime() - call->t_issued_ns) * 1e-9 : 0.0;
  unsigned b = 0;
  while (b < DEV_METRICS_BUCKETS && s > dev_metrics_bucket_le[b])
    b++;
  m->hist[node][op->h.kind][b]++;
  m->sum_s[node][op->h.kind] += s;
}
