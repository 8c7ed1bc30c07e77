/* Every op kind, one row each: what the rest of the house derives from a kind comes from here.
 *
 *   X(KIND, name, label, nbufs, dtypes, package, queue, runs)
 *
 *   KIND     the kind is DEV_OP_<KIND>; its value is the row's position (1 for the first): it
 *            is on the wire, so rows are only ever appended.
 *   name     the suffix of the kind's own functions, which the files expanding the table must
 *            define: shape_<name> and check_<name> (ops/check.c), put_<name> and get_<name>
 *            (proto/codec.c), exec_<name> for kinds a device task runs (actors/exec.c). A
 *            missing one fails the build.
 *   label    the kind in metrics (accel_ops_total{kind=...}) and logs.
 *   nbufs    the buffers the op names; OWN: the payload says how many (a launch's, a
 *            collective's).
 *   dtypes   the rule over its buffers' element types: ANY (the kind's check decides), SAME
 *            (every buffer has the first one's), FLOAT (SAME, and a floating-point type).
 *   package  the op package a device needs (ACCEL_PKG_<package>), CORE for what every backend
 *            runs.
 *   queue    the kernel actor (backend queue) that runs it: DEV_Q_<queue>.
 *   runs     TASK: planned into a device task, run by exec_<name>; SESSION: the session
 *            carries it out on its own tables (buffers and modules are made and dropped there).
 *
 * EXPORT, EXPORT_END and IMPORT share memory with other libraries of the client's process
 * (accel_buffer_export, accel_buffer_import): embedded contexts only, never on the wire (the
 * codec refuses them).
 *
 * Adding a kind: append its row, write its payload's codec and check, its exec case, and the
 * backends' entry points that run it. */
#ifndef OPS_OP_TABLE_H
#define OPS_OP_TABLE_H

/* clang-format off */
#define DEV_OP_TABLE(X)                                                                       \
  X(WRITE,          write,          "write",          1,   ANY,   CORE,       MEM,  TASK)     \
  X(READ,           read,           "read",           1,   ANY,   CORE,       MEM,  TASK)     \
  X(COPY,           copy,           "copy",           2,   SAME,  CORE,       MEM,  TASK)     \
  X(FILL,           fill,           "fill",           1,   ANY,   CORE,       MEM,  TASK)     \
  X(GEMM,           gemm,           "gemm",           3,   ANY,   BLAS,       BLAS, TASK)     \
  X(AXPY,           axpy,           "axpy",           2,   FLOAT, BLAS,       BLAS, TASK)     \
  X(DOT,            dot,            "dot",            3,   FLOAT, BLAS,       BLAS, TASK)     \
  X(RNG,            rng,            "rng",            1,   ANY,   RNG,        RNG,  TASK)     \
  X(UNARY,          unary,          "elementwise",    2,   FLOAT, NN,         NN,   TASK)     \
  X(SOFTMAX,        softmax,        "softmax",        2,   FLOAT, NN,         NN,   TASK)     \
  X(BUFFER_CREATE,  buffer_create,  "buffer_create",  1,   ANY,   CORE,       MEM,  SESSION)  \
  X(BUFFER_DESTROY, buffer_destroy, "buffer_destroy", 1,   ANY,   CORE,       MEM,  SESSION)  \
  X(SCAL,           scal,           "scal",           1,   FLOAT, BLAS,       BLAS, TASK)     \
  X(MODULE_LOAD,    module_load,    "module_load",    1,   ANY,   CORE,       MEM,  SESSION)  \
  X(MODULE_UNLOAD,  module_unload,  "module_unload",  1,   ANY,   CORE,       MEM,  SESSION)  \
  X(LAUNCH,         launch,         "launch",         OWN, ANY,   MODULE,     MOD,  TASK)     \
  X(COLLECTIVE,     collective,     "collective",     OWN, FLOAT, COLLECTIVE, COLL, TASK)     \
  X(BINARY,         binary,         "binary",         3,   ANY,   NN,         NN,   TASK)     \
  X(REDUCE,         reduce,         "reduce",         2,   FLOAT, NN,         NN,   TASK)     \
  X(WHERE,          where,          "where",          4,   ANY,   NN,         NN,   TASK)     \
  X(CONVERT,        convert,        "convert",        2,   ANY,   NN,         NN,   TASK)     \
  X(EXPORT,         export,         "export",         1,   ANY,   CORE,       MEM,  TASK)     \
  X(EXPORT_END,     export_end,     "export_end",     1,   ANY,   CORE,       MEM,  SESSION)  \
  X(IMPORT,         import,         "import",         1,   ANY,   CORE,       MEM,  SESSION)
/* clang-format on */

#endif
