/* The cpu backend: its ops table (for the registry) and the entry points the table points at,
 * one file per idea (backend_cpu.c: devices; memory.c; event.c; ops.c: copies, kernels and
 * callbacks; queue.c: the worker). Contracts: backends/backend.h. */
#ifndef BE_CPU_BACKEND_CPU_H
#define BE_CPU_BACKEND_CPU_H

#include "backends/backend.h"
#include "runtime/attr.h"

extern const be_ops be_cpu_ops;

/* memory.c */
RT_MUST_USE int be_cpu_mem_alloc(be_device *dev, size_t bytes, be_mem *out);
void be_cpu_mem_free(be_device *dev, be_mem *mem);
int be_cpu_mem_share(be_device *dev, char *why, size_t why_len);
int be_cpu_mem_address(be_device *dev, be_mem mem, uint64_t *out);
int be_cpu_mem_wrap(be_device *dev, uint64_t addr, size_t bytes, be_mem *out);
void be_cpu_mem_unwrap(be_device *dev, be_mem *mem);

/* event.c */
RT_MUST_USE int be_cpu_event_create(be_device *dev, be_event **out);
void be_cpu_event_destroy(be_event *ev);
int be_cpu_event_record(be_event *ev, be_queue *q);
int be_cpu_event_query(be_event *ev);
int be_cpu_event_sync(be_event *ev);
int be_cpu_queue_wait_event(be_queue *q, be_event *ev);

/* packages.c */
extern const be_blas_pkg be_cpu_blas;
extern const be_rng_pkg be_cpu_rng;
extern const be_nn_pkg be_cpu_nn;
extern const be_coll_pkg be_cpu_collective;

/* ops.c */
int be_cpu_submit_h2d(be_queue *q, be_mem dst, size_t dst_off, const void *src, size_t bytes);
int be_cpu_submit_d2h(be_queue *q, void *dst, be_mem src, size_t src_off, size_t bytes);
int be_cpu_submit_d2d(be_queue *q, be_mem dst, size_t dst_off, be_mem src, size_t src_off,
                      size_t bytes);
int be_cpu_submit_callback(be_queue *q, be_host_fn fn, void *arg);
int be_cpu_submit_notify(be_queue *q, be_host_fn fn, void *arg);
/* Any two devices of the backend share the address space: a peer copy is a d2d copy. */
bool be_cpu_can_peer(be_device *dst, be_device *src);
int be_cpu_submit_peer(be_queue *q, be_mem dst, size_t dst_off, be_device *src_dev, be_mem src,
                       size_t src_off, size_t bytes);
/* Kernels: dtype is an accel_dtype the package accepted (packages.c); sizes and offsets in
 * its elements. */
int be_cpu_submit_gemm(be_queue *q, const be_gemm_args *g, be_mem a, size_t a_off, be_mem b,
                       size_t b_off, be_mem c, size_t c_off);
int be_cpu_submit_axpy(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off,
                       be_mem y, size_t y_off);
int be_cpu_submit_dot(be_queue *q, uint32_t dtype, size_t n, be_mem x, size_t x_off, be_mem y,
                      size_t y_off, be_mem result, size_t result_off);
int be_cpu_submit_scal(be_queue *q, uint32_t dtype, size_t n, double alpha, be_mem x, size_t x_off);
int be_cpu_submit_fill(be_queue *q, be_mem dst, size_t off, size_t count, uint32_t esize,
                       uint64_t value);
int be_cpu_submit_rng(be_queue *q, uint32_t dtype, be_mem dst, size_t off, size_t count,
                      const be_rng_args *r);
int be_cpu_submit_unary(be_queue *q, uint32_t dtype, be_unary_op op, be_mem dst, size_t dst_off,
                        be_mem src, size_t src_off, size_t count);
int be_cpu_submit_softmax(be_queue *q, uint32_t dtype, be_mem dst, size_t dst_off, be_mem src,
                          size_t src_off, size_t rows, size_t cols);
int be_cpu_submit_binary(be_queue *q, uint32_t dtype, const be_binary_args *g, be_mem dst,
                         size_t dst_off, be_mem a, size_t a_off, be_mem b, size_t b_off);
int be_cpu_submit_where(be_queue *q, uint32_t dtype, const be_where_args *g, be_mem dst,
                        size_t dst_off, be_mem cond, size_t c_off, be_mem a, size_t a_off, be_mem b,
                        size_t b_off);
int be_cpu_submit_convert(be_queue *q, uint32_t dst_dtype, uint32_t src_dtype,
                          const be_convert_args *g, be_mem dst, size_t dst_off, be_mem src,
                          size_t src_off);
int be_cpu_submit_reduce(be_queue *q, uint32_t dtype, const be_reduction_args *g, be_mem dst,
                         size_t dst_off, be_mem src, size_t src_off);

#endif
