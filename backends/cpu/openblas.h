/* OpenBLAS's own entry points, for the cpu backend's kernels.
 *
 * Why not call cblas_sgemm directly: the dynamic linker binds that name to the first library
 * in the process that exports it. A process that also loads another BLAS (Debian's reference
 * libblas.so.3 exports cblas_* too) or defines its own sgemm_ would then run that library's
 * code on accel's worker threads: wrong results, or a deadlock when it calls back into the
 * application. So the table below is looked up in the OpenBLAS file itself: the file that
 * holds openblas_get_config (a name only OpenBLAS exports) is opened again with dlopen
 * (RTLD_NOLOAD: the copy already mapped) and each function taken from that handle with dlsym.
 * Not RTLD_DEEPBIND: AddressSanitizer refuses it. OpenBLAS stays linked as usual; cblas.h
 * still gives the types (blasint, the CBLAS_ enums). */
#ifndef BE_CPU_OPENBLAS_H
#define BE_CPU_OPENBLAS_H

#include <cblas.h>
#include <stdint.h>

/* The entries every OpenBLAS exports; the table is not handed out without all of them. */
/* clang-format off */
#define BE_OPENBLAS_FUNCS(X)                                                               \
  X(cblas_sgemm) X(cblas_dgemm) X(cblas_saxpy) X(cblas_daxpy) X(cblas_sdot) X(cblas_ddot) \
  X(cblas_sscal) X(cblas_dscal)
/* clang-format on */

/* cblas_sbgemm (bfloat16 A and B as raw uint16_t, float C) exists only in OpenBLAS built with
 * BUILD_BFLOAT16, and cblas.h declares it only then (Debian 12's 0.3.21 has neither). */
typedef void be_openblas_sbgemm_fn(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE trans_a,
                                   enum CBLAS_TRANSPOSE trans_b, blasint m, blasint n, blasint k,
                                   float alpha, const uint16_t *a, blasint lda, const uint16_t *b,
                                   blasint ldb, float beta, float *c, blasint ldc);

#define BE_OPENBLAS_FIELD_(fn) __typeof__(&fn) fn;

typedef struct be_openblas_api {
  BE_OPENBLAS_FUNCS(BE_OPENBLAS_FIELD_)
  be_openblas_sbgemm_fn *cblas_sbgemm; /* NULL when this OpenBLAS has no bfloat16 gemm */
} be_openblas_api;

/* The table, or NULL if OpenBLAS's file or one of its required functions could not be found;
 * then the reason is printed to stderr once, and be_openblas_error() returns it. Resolved on
 * the first call (thread-safe, pthread_once); afterwards a plain load. The kernels answer
 * ACCEL_ENOTSUP when it is NULL. */
const be_openblas_api *be_openblas(void);

/* Why be_openblas() returns NULL; "" when it does not. Resolves first, like be_openblas(). */
const char *be_openblas_error(void);

#endif
