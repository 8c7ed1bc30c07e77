/* Philox4x32-10 on the CPU, in cuRAND's device-API stream convention (defined below).
 *
 * The stream for a 64-bit seed s is an array of 32-bit words indexed from 0. Word j is word
 * (j mod 4) of philox4x32_10(counter = {q mod 2^32, q >> 32, 0, 0}, key = {s mod 2^32, s >> 32})
 * with q = j div 4. A fill of `count` elements "at offset o" returns words o .. o+count-1: this
 * is exactly what cuRAND returns after curand_init(s, 0, o, &state) followed by `count` calls of
 * curand(&state). So a fill is the same whatever the split into pieces: fill(o, n) equals the
 * slice [o, o+n) of fill(0, o+n), on every backend.
 *
 * Other dtypes (the same rules on every backend; uniforms bit for bit, normals to a few ulp):
 *   UNIFORM F16, BF16  the F32 uniform of the same word, rounded to nearest even
 *                      (be_f32_to_f16, be_f32_to_bf16 of ops/dtype_conv.h).
 *   UNIFORM F64        cuRAND's double convention: element e of a fill at offset o (stream
 *                      element o + e) takes words w0 = 2(o + e) and w1 = 2(o + e) + 1:
 *                      z = w0 ^ (w1 << 21) in 64 bits, value = z * 2^-53 + 2^-54, in (0, 1).
 *   NORMAL F16, BF16   the F32 normal of the same element (z * stddev + mean in float, with
 *                      mean and stddev rounded to float first), rounded to nearest even.
 *   NORMAL F64         offset even; stream elements 2j, 2j + 1 take words 4j .. 4j + 3 (block
 *                      j): u = (w0 ^ (w1 << 21)) * 2^-53 + 2^-54, v = (w2 ^ (w3 << 21)) *
 *                      2^-52 + 2^-53, s = sqrt(-2 log u); element 2j = s sin(pi v), element
 *                      2j + 1 = s cos(pi v) (cuRAND's _curand_box_muller_double); then
 *                      z * stddev + mean in double.
 *
 * Pure functions: no state, no allocation, thread-safe, never block. Every fill returns 0 or
 * ACCEL_EINVAL (NULL dst with count > 0; odd offset for normals), or ACCEL_ENOTSUP (the _as
 * fills, for a dtype they do not fill). On error dst is untouched.
 */
#ifndef BE_CPU_PHILOX_H
#define BE_CPU_PHILOX_H

#include <stddef.h>
#include <stdint.h>

/* One block: out = philox4x32_10(ctr, key), words in cuRAND's order (x, y, z, w). Known-answer
 * vectors: Random123's tests/kat_vectors, lines "philox4x32 10". */
void be_cpu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* cuRAND's _curand_uniform: x * 2^-32 + 2^-33, each step rounded to float. In (0, 1]; the top
 * words round to exactly 1.0f, x = 0 gives 2^-33. */
float be_cpu_philox_uniform(uint32_t x);

/* cuRAND's _curand_box_muller on the word pair (x, y), host branch: u = x * 2^-32 + 2^-33,
 * v = y * K + K/2 with K = 2^-32 * 2pi in float, r = sqrtf(-2 logf(u)); out[0] = r * sinf(v)
 * (the even element of a fill), out[1] = r * cosf(v) (the odd one). The GPU's device branch
 * uses __sincosf and its own logf, so normals agree across backends to a few ulp, not bit for
 * bit (u32 and uniform fills are bit-exact). */
void be_cpu_philox_box_muller(uint32_t x, uint32_t y, float out[2]);

/* dst[i] = word (offset + i) of the stream, i < count. */
int be_cpu_philox_fill_u32(uint32_t *dst, size_t count, uint64_t seed, uint64_t offset);

/* dst[i] = be_cpu_philox_uniform(word (offset + i)): what curand_uniform() returns. */
int be_cpu_philox_fill_uniform(float *dst, size_t count, uint64_t seed, uint64_t offset);

/* dst[i] = mean + stddev * z(offset + i), where element j of the normal stream is
 * out[j mod 2] of be_cpu_philox_box_muller(word 2(j div 2), word 2(j div 2) + 1): what
 * curand_normal() returns after curand_init(seed, 0, offset). The offset must be even (an odd
 * one would split a Box-Muller pair, and cuRAND's pairing after such an offset is not a slice
 * of the stream): ACCEL_EINVAL otherwise. Any count, odd included. Scaled as z * stddev + mean
 * in float. Bit-exact with cuRAND's host branch only without fused multiply-add contraction
 * (the ISO -std=c11 default in GCC). */
int be_cpu_philox_fill_normal(float *dst, size_t count, uint64_t seed, uint64_t offset, float mean,
                              float stddev);

/* UNIFORM F64 from its two words (above): in (0, 1). */
double be_cpu_philox_uniform_f64(uint32_t w0, uint32_t w1);

/* NORMAL F64 from the four words of its pair (above): out[0] the even element, out[1] the odd
 * one, unscaled. sin(pi v) and cos(pi v) are reduced exactly to [0, pi/4] first, so they keep
 * their relative accuracy near their zeros. */
void be_cpu_philox_box_muller_f64(const uint32_t w[4], double out[2]);

/* count elements of dtype (accel_dtype: ACCEL_F32, F64, F16 or BF16; 16-bit ones as their
 * raw bits) at stream offset `offset`, by the conventions above. The F32 fills are the ones
 * above; the normal's mean and stddev are rounded to float first except for F64. */
int be_cpu_philox_fill_uniform_as(uint32_t dtype, void *dst, size_t count, uint64_t seed,
                                  uint64_t offset);
int be_cpu_philox_fill_normal_as(uint32_t dtype, void *dst, size_t count, uint64_t seed,
                                 uint64_t offset, double mean, double stddev);

#endif
