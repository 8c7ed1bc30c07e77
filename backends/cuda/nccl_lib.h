/* NCCL, loaded at run time like the driver (driver.h): the first device open dlopen()s
 * "libnccl.so.2" (ACCEL_NCCL_LIBRARY names another file, and nothing else is tried then: a
 * file that does not exist simulates a machine without NCCL). Nothing links it; without it
 * the devices work and the `collective` package answers ACCEL_ENOTSUP, said once on stderr.
 *
 * The types below are NCCL's (nccl.h, 2.x; the same since 2.4), declared here so that the
 * backend builds where nccl.h is not installed: an opaque communicator, a 128-byte unique id
 * and the numbering of results, data types and reduction operators, which NCCL keeps stable
 * across its 2.x releases.
 *
 * Before loading, NCCL_NVLS_ENABLE is forced to "0" in the environment: NVLink SHARP
 * (multicast) objects must never be made (on a shared host they can take GPUs out of
 * service), whatever the caller's environment said. */
#ifndef BE_CUDA_NCCL_LIB_H
#define BE_CUDA_NCCL_LIB_H

#include <cuda.h>
#include <stddef.h>

typedef struct ncclComm *ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
} ncclResult_t;
typedef enum {
  ncclUint32 = 3,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3 } ncclRedOp_t;

/* The entry points (cudaStream_t is a CUstream: the runtime's and the driver's stream handles
 * are one type). */
typedef struct be_nccl_api {
  ncclResult_t (*ncclGetVersion)(int *version);
  const char *(*ncclGetErrorString)(ncclResult_t r);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *id);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t comm);
  ncclResult_t (*ncclCommAbort)(ncclComm_t comm);
  ncclResult_t (*ncclGroupStart)(void);
  ncclResult_t (*ncclGroupEnd)(void);
  ncclResult_t (*ncclAllReduce)(const void *send, void *recv, size_t count, ncclDataType_t type,
                                ncclRedOp_t op, ncclComm_t comm, CUstream stream);
  ncclResult_t (*ncclBroadcast)(const void *send, void *recv, size_t count, ncclDataType_t type,
                                int root, ncclComm_t comm, CUstream stream);
  ncclResult_t (*ncclAllGather)(const void *send, void *recv, size_t count, ncclDataType_t type,
                                ncclComm_t comm, CUstream stream);
  /* Optional (2.14 on): NULL when missing. */
  ncclResult_t (*ncclCommFinalize)(ncclComm_t comm);
  int version; /* ncclGetVersion's: 22804 for 2.28.4 */
} be_nccl_api;

/* The loaded table, or NULL if NCCL is missing (loaded once, thread-safe; may block the first
 * time: call it where blocking is allowed, as open does). */
const be_nccl_api *be_nccl(void);
/* Why be_nccl() is NULL ("" when it is not). Static storage. */
const char *be_nccl_why(void);

/* accel's code for an NCCL result (ACCEL_EIO for CUDA and system errors: the caller asks the
 * driver whether a context broke). */
int be_nccl_err(ncclResult_t r);

#endif
