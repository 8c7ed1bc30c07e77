/* The arguments ops carry that the backends take as they are: element-wise functions, random
 * distributions, a launch's limits and parameter kinds, collectives. They belong to the op
 * vocabulary (the wire codec and the checker read them) and keep the be_ prefix because the
 * backend contract (backends/backend.h) passes them on unchanged. */
#ifndef OPS_ARGS_H
#define OPS_ARGS_H

#include <stdint.h>

typedef enum be_unary_op { BE_SIGMOID = 0, BE_RELU, BE_TANH } be_unary_op;

typedef enum be_rng_dist { BE_RNG_BITS = 0, BE_RNG_UNIFORM, BE_RNG_NORMAL } be_rng_dist;

typedef struct be_rng_args {
  be_rng_dist dist;
  uint64_t seed, offset; /* Philox4x32-10 stream position, in elements of the output */
  double mean, stddev;   /* NORMAL only; rounded to the output's type first for F32 and below */
} be_rng_args;

#define BE_KERNEL_NAME_MAX 127u
#define BE_LAUNCH_MAX_ARGS 32u

typedef enum be_param_kind {
  BE_PARAM_UNKNOWN = 0, /* the driver cannot tell: any argument of the right size */
  BE_PARAM_BUFFER,      /* a device pointer (CUDA: 8 bytes), a __global/__constant buffer */
  BE_PARAM_SCALAR,      /* by value, `size` bytes */
  BE_PARAM_LOCAL        /* OpenCL __local pointer: the launch gives its size */
} be_param_kind;

#define BE_COLL_MAX_DEVICES 8u

typedef enum be_coll_kind {
  BE_COLL_ALL_REDUCE = 0, /* every buf[i] = reduce(buf[0..n)) element-wise, in place */
  BE_COLL_BROADCAST,      /* every buf[i] = buf[root] */
  BE_COLL_ALL_GATHER      /* every recv[i] = send[0] ++ send[1] ++ ... ++ send[n-1] */
} be_coll_kind;

typedef enum be_reduce_op {
  BE_REDUCE_SUM = 0,
  BE_REDUCE_PROD,
  BE_REDUCE_MIN,
  BE_REDUCE_MAX
} be_reduce_op;

#endif
