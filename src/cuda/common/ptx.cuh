// Thin wrappers over the Hopper (sm_80+ subset) instructions the kernels use:
// asynchronous global->shared copies, ldmatrix, the bf16 tensor-core MMA
// m16n8k16, and packing helpers. Each is one instruction; the comments give the
// fragment layouts the callers rely on (PTX ISA, "Warp-level matrix fragment
// for mma.m16n8k16"), with g = lane / 4 and t = lane % 4.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace mla::cuda::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy global -> shared, bypassing L1 (.cg): the cache
// stream is read once per CTA. When `valid` is false nothing is read and the
// 16 shared bytes are zero-filled (src-size 0), so masked keys hold zeros,
// never stale or NaN bytes that 0 * NaN would spread through P.V.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_size)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix: each of the 4 (or 2) 8x8 b16 matrices is addressed by 8 lanes
// (lanes 8i..8i+7 give the 8 row addresses of matrix i); lane l receives row
// l/4, elements 2(l%4), 2(l%4)+1 of every matrix (.trans: column l/4 instead).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
// stmatrix (sm_90): the store of ldmatrix_x4's layout: lanes 8i..8i+7 give the
// row addresses of matrix i, and lane l's r[i] holds row l/4, elements
// 2(l%4), 2(l%4)+1 of matrix i (an mma / wgmma accumulator pair, packed).
__device__ __forceinline__ void stmatrix_x4(void* smem, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_addr(smem)),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

// The operands of the two mma.sync below: c accumulated in place, a's four and b's two registers.
#define MLA_MMA_16X8_F32(instr)                                                 \
  asm volatile(instr " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

// D = A * B + D, bf16 inputs, fp32 accumulators.
//   A 16x16 row-major: a[0] (g, 2t..), a[1] (g+8, 2t..), a[2] (g, 2t+8..), a[3] (g+8, 2t+8..)
//   B 16x8 (k x n):    b[0] (k 2t.., n g), b[1] (k 2t+8.., n g)
//   C 16x8:            c[0..1] (g, 2t..2t+1), c[2..3] (g+8, 2t..2t+1)
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  MLA_MMA_16X8_F32("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
}

#undef MLA_MMA_16X8_F32

// Two floats -> packed bf16x2 (round to nearest even), low half = lo.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two floats -> packed f16x2 (round to nearest even), low half = lo.
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// exp2 with the hardware approximation (ex2.approx.ftz): the softmax runs in
// the log2 domain (scores pre-multiplied by log2(e)); its relative error
// (~2^-22) is far below the bf16 rounding of P.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Prefetch of the 128-byte line holding a global address into L2; nothing
// to wait for.
__device__ __forceinline__ void prefetch_l2(const void* gmem) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
}

// The SM's 64-bit cycle counter (diagnostic phase stamps); volatile, so
// stamps keep their place among the other volatile asm.
__device__ __forceinline__ unsigned long long clock64_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t));
  return t;
}

// cp.async without the "memory" clobber, for the kernels (prefill, DSA) that
// order their copies against ordinary shared accesses only through the
// __syncthreads after cp_async_wait. The clobbered versions above would let
// the compiler reorder less around them (different code), hence two sets.
namespace noclobber {
// 16 bytes global -> shared (.cg); when `valid` is false nothing is read and
// the destination is zero-filled. `smem_dst` is a shared-window address.
__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem),
               "r"(src_size));
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  cp_async_16(smem_addr(smem), gmem, valid);
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// A ring of S shared-memory stages filled by cp.async, one commit group per
// tile (issue(t) commits even when it copies nothing, so the wait counts stay
// uniform). Before the loop: tiles 0..S-2 in flight.
template <int S, class Issue>
__device__ __forceinline__ void pipeline_prime(Issue&& issue) {
#pragma unroll
  for (int t = 0; t < S - 1; ++t) issue(t);
}
// Step `it` of the loop: tile it has landed and is visible to the CTA, and
// every thread is done with tile it - 1, whose stage tile it + S - 1 refills.
template <int S, class Issue>
__device__ __forceinline__ void pipeline_step(int it, Issue&& issue) {
  cp_async_wait<S - 2>();
  __syncthreads();
  issue(it + S - 1);
}
}  // namespace noclobber

}  // namespace mla::cuda::ptx
