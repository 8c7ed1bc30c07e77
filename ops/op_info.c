/* The table's rows for code that asks at run time (op.h: dev_op_info_of). */
#include "ops/op.h"

#define NBUFS_OF_OWN DEV_NBUFS_OWN
#define NBUFS_OF(n) NBUFS_OF_##n
#define NBUFS_OF_1 1u
#define NBUFS_OF_2 2u
#define NBUFS_OF_3 3u
#define NBUFS_OF_4 4u
#define PKG_CORE 0u
#define PKG_BLAS ACCEL_PKG_BLAS
#define PKG_RNG ACCEL_PKG_RNG
#define PKG_NN ACCEL_PKG_NN
#define PKG_MODULE ACCEL_PKG_MODULE
#define PKG_COLLECTIVE ACCEL_PKG_COLLECTIVE

#define INFO_ROW(K, name, label, nbufs, dtypes, package, queue, runs)                              \
  [DEV_OP_##K] = {label, NBUFS_OF(nbufs), DEV_DT_##dtypes, PKG_##package, DEV_RUNS_##runs},

static const dev_op_info rows[DEV_OP_KIND_COUNT_] = {DEV_OP_TABLE(INFO_ROW)};

const char *dev_dtype_name(uint32_t dtype) {
  static const char *const names[ACCEL_DTYPE_MAX_ + 1] = {
      [ACCEL_F32] = "f32",   [ACCEL_U32] = "u32", [ACCEL_F64] = "f64",  [ACCEL_F16] = "f16",
      [ACCEL_BF16] = "bf16", [ACCEL_I32] = "i32", [ACCEL_BOOL] = "bool"};
  return dtype <= ACCEL_DTYPE_MAX_ && names[dtype] ? names[dtype] : "?";
}

const dev_op_info *dev_op_info_of(uint32_t kind) {
  return kind > 0 && kind < DEV_OP_KIND_COUNT_ ? &rows[kind] : NULL;
}
