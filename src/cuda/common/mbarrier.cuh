// Shared-memory barriers of sm_90 for producer/consumer pipelines inside a CTA:
// mbarrier (arrive counts + phase parity) and named barriers (bar.sync on a
// subset of the CTA's warps). One instruction per wrapper.
//
// mbarrier protocol used by the callers: a barrier is initialised with the
// number of arrivals that complete a phase; waiters poll the parity of the
// phase they expect (0, 1, 0, ...). A fresh barrier is in phase 0, and waiting
// for parity 1 returns at once ("the phase before the first has completed"),
// which is how a producer's first pass over its empty barriers goes through.
#pragma once
#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace mla::cuda::ptx {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
// Makes barrier initialisation visible to other threads and to the async
// proxy (required before any other thread uses the barrier).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrive (release semantics at CTA scope): this thread's earlier shared-memory
// writes are visible to threads that see the phase complete.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile(
      "{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar))
      : "memory");
}
// Blocks until the phase of parity `parity` has completed (acquire semantics).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Arrive on `bar` once every cp.async this thread issued so far has landed
// (the thread does not wait). .noinc: the arrival is one of the counts the
// barrier was initialised with, so a phase of N such threads needs count N.
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar))
               : "memory");
}

// Arrive (count 1) and raise the phase's expected transaction bytes by
// `bytes`: the phase completes when the arrivals are in and that many bytes of
// asynchronous copies (cp_async_bulk_g2s) have landed.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// One bulk (TMA, no tensor map) copy of `bytes` contiguous bytes global ->
// this CTA's shared memory, counted on `bar`'s transaction bytes. Both
// addresses 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void cp_async_bulk_g2s(void* smem, const void* gmem, uint32_t bytes,
                                                  uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_addr(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// The same copy with an L2 eviction policy (l2_policy_evict_*) for its lines.
__device__ __forceinline__ void cp_async_bulk_g2s(void* smem, const void* gmem, uint32_t bytes,
                                                  uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;\n" ::"r"(smem_addr(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
// L2 policies for the hinted copy: keep the lines (evict last) or let them
// go first.
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// The cluster barrier in two halves (cluster.sync() is arrive + wait): arrive
// (release: this thread's earlier writes, local or remote, are visible to the
// cluster after the wait) early, do other work, wait (acquire) when needed.
// Every thread of every CTA of the cluster alternates arrive and wait.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a
// multiple of 32), so two warpgroups can meet without stopping the producer.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Named barrier `id` that also ORs `pred` over the `threads` arriving: every
// one of them returns whether any passed true (barrier.cta.red.or).
__device__ __forceinline__ bool named_barrier_sync_or(int id, int threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n"
      " selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(uint32_t(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}
// Arrive at named barrier `id` without waiting: the signalling half of a
// hand-over between warp groups (the others bar.sync on the same id and count;
// the arrive orders this thread's earlier memory accesses before their sync returns).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace mla::cuda::ptx
