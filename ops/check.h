/* Validation of op envelopes (check.c). */
#ifndef OPS_CHECK_H
#define OPS_CHECK_H

#include "ops/op.h"
#include "runtime/attr.h"

/* What the checker needs to know of each buffer an op names, in the op's order. */
typedef struct dev_buf_info {
  accel_dtype dtype;
  uint64_t count;
} dev_buf_info;

/* The kind, its number of buffers and its enums: what can be checked without the buffers. */
RT_MUST_USE int dev_op_check_shape(const dev_op *op);

/* Everything, against the buffers; on success each buffer's access mode and range are set
 * from the op. ACCEL_EINVAL otherwise. */
RT_MUST_USE int dev_op_check(dev_op *op, const dev_buf_info *bufs);

#endif
