// Thin PTX wrappers for Hopper's warpgroup MMA (wgmma, sm_90a), the
// 128-byte-swizzled shared-memory descriptors they read, the fences around
// them, and setmaxnreg. One home for every kernel family (decode, prefill, DSA
// indexer). MMAs: 16-bit inputs (bf16 or f16) m64nNk16 for N = 16..256 with A
// from shared memory or registers (mma_ss / mma_rs), and e4m3 m64nNk32 for
// N = 64..256 with both operands in shared memory (mma_ss_e4m3: the indexer).
//
// Accumulator layout of m64nN (warp w of the warpgroup, g = lane / 4,
// c = lane % 4): d[i][0..1] = row 16w + g, columns 8i + 2c, +1;
// d[i][2..3] = row 16w + g + 8, same columns. That is mma.sync's m16n8 C
// layout stacked over n, so row statistics reduce over the 4 lanes of a quad.
//
// Shared-memory layout the descriptors describe (128-byte swizzle, "SW128"):
// a matrix is stored as blocks of 64 bf16 along its contiguous dimension; a
// block holds rows of 128 bytes, and the 16-byte chunk j of row r sits at
// chunk j ^ (r % 8) (the hardware applies this XOR on address bits [4,7) with
// bits [7,10), so every block must be 1024-byte aligned).
//   K-major operand (the K dim is contiguous: Q, K, P): one block covers 64 K
//     values of every row; 8-row groups are 1024 B apart (SBO); the k16 step
//     inside a block moves the start address by 32 B; LBO is unused.
//   MN-major operand (the N dim is contiguous: V as the B of P.V): one block
//     covers 64 N values; K rows are 128 B apart, 8-row groups 1024 B apart
//     (SBO); the next 64 N values are LBO bytes away (the block size).
#pragma once
#include <cstdint>

namespace mla::cuda::wgmma {

__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                               uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= uint64_t((smem_byte_addr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= uint64_t(1) << 62;  // layout type 1 = 128-byte swizzle (base offset 0: 1024-aligned blocks)
  return d;
}

// A descriptor moved by `bytes` along its operand: the start address is the
// low 14 bits (address / 16), and a shared window below 256 KB never carries
// out of them. Kernels build one descriptor per tile and step it with
// compile-time offsets, so each wgmma costs one add instead of the masks and
// shifts of desc_sw128.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// Issue order and completion: fence before the first wgmma that reads
// registers written by ordinary instructions (the accumulators), commit to
// close a group, wait until at most N groups are pending.
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across wgmma
// issue/wait (the asm above does not name the registers).
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
// Orders this thread's generic-proxy shared-memory writes (st.shared and
// cp.async, once completed) before later async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Register budget per thread of the executing warpgroup (sm_90a); the kernel
// needs __launch_bounds__(threads, 1) so that the budget can be moved.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- 16-bit MMAs: D[64xN] (+)= A[64x16] * B[16xN], fp32 accumulate ----
// One wrapper per operand source, generic over the element type and N (32,
// 64, 128, 256): bf16 for the bf16 caches and prefill, f16 for the fp8 caches
// (every e4m3 value is an f16, so their tiles convert exactly). Inline PTX
// takes neither a type name nor an operand list from a template argument, so
// the macros below spell each instruction out from one pattern; the register
// lists were generated (one operand per fp32 accumulator: inline asm takes no
// arrays). kTransB: B is MN-major (the N dim contiguous: V of P.V).
enum class Elem { kBf16, kF16 };

#define MLA_WGMMA_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define MLA_WGMMA_OUT2 MLA_WGMMA_D4(0), MLA_WGMMA_D4(1)
#define MLA_WGMMA_OUT4 MLA_WGMMA_D4(0), MLA_WGMMA_D4(1), MLA_WGMMA_D4(2), MLA_WGMMA_D4(3)
#define MLA_WGMMA_OUT8 \
  MLA_WGMMA_OUT4, MLA_WGMMA_D4(4), MLA_WGMMA_D4(5), MLA_WGMMA_D4(6), MLA_WGMMA_D4(7)
#define MLA_WGMMA_OUT16                                                                 \
  MLA_WGMMA_OUT8, MLA_WGMMA_D4(8), MLA_WGMMA_D4(9), MLA_WGMMA_D4(10), MLA_WGMMA_D4(11), \
      MLA_WGMMA_D4(12), MLA_WGMMA_D4(13), MLA_WGMMA_D4(14), MLA_WGMMA_D4(15)
#define MLA_WGMMA_OUT32                                                                         \
  MLA_WGMMA_OUT16, MLA_WGMMA_D4(16), MLA_WGMMA_D4(17), MLA_WGMMA_D4(18), MLA_WGMMA_D4(19),      \
      MLA_WGMMA_D4(20), MLA_WGMMA_D4(21), MLA_WGMMA_D4(22), MLA_WGMMA_D4(23), MLA_WGMMA_D4(24), \
      MLA_WGMMA_D4(25), MLA_WGMMA_D4(26), MLA_WGMMA_D4(27), MLA_WGMMA_D4(28), MLA_WGMMA_D4(29), \
      MLA_WGMMA_D4(30), MLA_WGMMA_D4(31)
// Per R = N / 8 rows of d: the accumulator list, then the operand numbers
// that follow it. _SS: desc_a, desc_b, the tnspA and tnspB immediates; _RS:
// the four A registers, desc_b, tnspB; _P: the accumulate flag.
#define MLA_WGMMA_REGS2 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define MLA_WGMMA_SS2 "%8, %9, p, 1, 1, %11, %12"
#define MLA_WGMMA_SS_P2 "%10"
#define MLA_WGMMA_RS2 "{%8, %9, %10, %11}, %12, p, 1, 1, %14"
#define MLA_WGMMA_RS_P2 "%13"
#define MLA_WGMMA_REGS4 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define MLA_WGMMA_SS4 "%16, %17, p, 1, 1, %19, %20"
#define MLA_WGMMA_SS_P4 "%18"
#define MLA_WGMMA_RS4 "{%16, %17, %18, %19}, %20, p, 1, 1, %22"
#define MLA_WGMMA_RS_P4 "%21"
#define MLA_WGMMA_REGS8                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MLA_WGMMA_SS8 "%32, %33, p, 1, 1, %35, %36"
#define MLA_WGMMA_SS_P8 "%34"
#define MLA_WGMMA_RS8 "{%32, %33, %34, %35}, %36, p, 1, 1, %38"
#define MLA_WGMMA_RS_P8 "%37"
#define MLA_WGMMA_REGS16                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define MLA_WGMMA_SS16 "%64, %65, p, 1, 1, %67, %68"
#define MLA_WGMMA_SS_P16 "%66"
#define MLA_WGMMA_RS16 "{%64, %65, %66, %67}, %68, p, 1, 1, %70"
#define MLA_WGMMA_RS_P16 "%69"
#define MLA_WGMMA_REGS32                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "    \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "     \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "     \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "     \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "     \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, " \
  "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "     \
  "%124, %125, %126, %127}"
#define MLA_WGMMA_SS32 "%128, %129, p, 1, 1, %131, %132"
#define MLA_WGMMA_SS_P32 "%130"
#define MLA_WGMMA_RS32 "{%128, %129, %130, %131}, %132, p, 1, 1, %134"
#define MLA_WGMMA_RS_P32 "%133"

#define MLA_WGMMA_ASM(INSTR, REGS, OPS, PRED, OUTS, ...)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " PRED ", 0;\n" INSTR " " REGS ", " OPS ";\n}\n" \
               : OUTS                                                                             \
               : __VA_ARGS__)
#define MLA_WGMMA_INSTR(NN, TY) "wgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." TY "." TY
// One (N, type) instruction with A from shared memory / from registers.
#define MLA_WGMMA_SS(R, NN, TY)                                                                 \
  MLA_WGMMA_ASM(MLA_WGMMA_INSTR(NN, TY), MLA_WGMMA_REGS##R, MLA_WGMMA_SS##R, MLA_WGMMA_SS_P##R, \
                MLA_WGMMA_OUT##R, "l"(desc_a), "l"(desc_b), "r"(int(accumulate)),               \
                "n"(int(kTransA)), "n"(int(kTransB)))
#define MLA_WGMMA_RS(R, NN, TY)                                                                 \
  MLA_WGMMA_ASM(MLA_WGMMA_INSTR(NN, TY), MLA_WGMMA_REGS##R, MLA_WGMMA_RS##R, MLA_WGMMA_RS_P##R, \
                MLA_WGMMA_OUT##R, "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b),      \
                "r"(int(accumulate)), "n"(int(kTransB)))
// The type (compile-time branch) and the N dispatch, for OP = SS or RS.
#define MLA_WGMMA_TYPED(OP, R, NN) \
  if constexpr (T == Elem::kF16)   \
    MLA_WGMMA_##OP(R, NN, "f16");  \
  else                             \
    MLA_WGMMA_##OP(R, NN, "bf16")
#define MLA_WGMMA_DISPATCH(OP)                                                              \
  static_assert(N == 16 || N == 32 || N == 64 || N == 128 || N == 256, "wgmma N: 16..256"); \
  if constexpr (N == 16) {                                                                  \
    MLA_WGMMA_TYPED(OP, 2, 16);                                                             \
  } else if constexpr (N == 32) {                                                           \
    MLA_WGMMA_TYPED(OP, 4, 32);                                                             \
  } else if constexpr (N == 64) {                                                           \
    MLA_WGMMA_TYPED(OP, 8, 64);                                                             \
  } else if constexpr (N == 128) {                                                          \
    MLA_WGMMA_TYPED(OP, 16, 128);                                                           \
  } else {                                                                                  \
    MLA_WGMMA_TYPED(OP, 32, 256);                                                           \
  }

// A from shared memory (K-major, or kTransA: MN-major, the M dim contiguous),
// B from shared memory.
template <Elem T, int N, bool kTransB = false, bool kTransA = false>
__device__ __forceinline__ void mma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b,
                                       bool accumulate) {
  MLA_WGMMA_DISPATCH(SS)
}

// A from registers: the m16n8k16 A fragment of each warp's 16 rows (two
// 16-bit values per register), B from shared memory.
template <Elem T, int N, bool kTransB = false>
__device__ __forceinline__ void mma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4],
                                       uint64_t desc_b, bool accumulate){MLA_WGMMA_DISPATCH(RS)}

// The bf16 shapes by their callers' names.
__device__ __forceinline__ void m64n32k16_ss(float (&d)[4][4], uint64_t a, uint64_t b, bool acc) {
  mma_ss<Elem::kBf16, 32>(d, a, b, acc);
}
__device__ __forceinline__ void m64n64k16_ss(float (&d)[8][4], uint64_t a, uint64_t b, bool acc) {
  mma_ss<Elem::kBf16, 64>(d, a, b, acc);
}
__device__ __forceinline__ void m64n128k16_ss(float (&d)[16][4], uint64_t a, uint64_t b, bool acc) {
  mma_ss<Elem::kBf16, 128>(d, a, b, acc);
}
__device__ __forceinline__ void m64n256k16_ss_tb(float (&d)[32][4], uint64_t a, uint64_t b,
                                                 bool acc) {
  mma_ss<Elem::kBf16, 256, true>(d, a, b, acc);
}
__device__ __forceinline__ void m64n128k16_rs_tb(float (&d)[16][4], const uint32_t (&a)[4],
                                                 uint64_t b, bool acc) {
  mma_rs<Elem::kBf16, 128, true>(d, a, b, acc);
}
__device__ __forceinline__ void m64n256k16_rs_tb(float (&d)[32][4], const uint32_t (&a)[4],
                                                 uint64_t b, bool acc) {
  mma_rs<Elem::kBf16, 256, true>(d, a, b, acc);
}

// ---- e4m3 MMAs: D[64xN] (+)= A[64x32] (smem) * B[32xN] (smem), fp32 accumulate ----
// fp8 wgmma takes no transpose immediates (both operands K-major), so its
// operand list ends after the two scale immediates: "desc_a, desc_b, p, 1, 1".
// The DSA indexer: N = 64 (decode, one query's heads), N = 256 (prefill, four
// queries' heads).
#define MLA_WGMMA_F8_SS8 "%32, %33, p, 1, 1"
#define MLA_WGMMA_F8_SS16 "%64, %65, p, 1, 1"
#define MLA_WGMMA_F8_SS32 "%128, %129, p, 1, 1"
#define MLA_WGMMA_F8(R, NN)                                                                        \
  MLA_WGMMA_ASM("wgmma.mma_async.sync.aligned.m64n" #NN "k32.f32.e4m3.e4m3", MLA_WGMMA_REGS##R,    \
                MLA_WGMMA_F8_SS##R, MLA_WGMMA_SS_P##R, MLA_WGMMA_OUT##R, "l"(desc_a), "l"(desc_b), \
                "r"(int(accumulate)))
template <int N>
__device__ __forceinline__ void mma_ss_e4m3(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b,
                                            bool accumulate) {
  static_assert(N == 64 || N == 128 || N == 256, "e4m3 wgmma N: 64, 128, 256");
  if constexpr (N == 64) {
    MLA_WGMMA_F8(8, 64);
  } else if constexpr (N == 128) {
    MLA_WGMMA_F8(16, 128);
  } else {
    MLA_WGMMA_F8(32, 256);
  }
}
__device__ __forceinline__ void m64n64k32_e4m3_ss(float (&d)[8][4], uint64_t desc_a,
                                                  uint64_t desc_b, bool accumulate) {
  mma_ss_e4m3<64>(d, desc_a, desc_b, accumulate);
}

#undef MLA_WGMMA_F8
#undef MLA_WGMMA_F8_SS8
#undef MLA_WGMMA_F8_SS16
#undef MLA_WGMMA_F8_SS32
#undef MLA_WGMMA_ASM
#undef MLA_WGMMA_D4
#undef MLA_WGMMA_DISPATCH
#undef MLA_WGMMA_INSTR
#undef MLA_WGMMA_OUT16
#undef MLA_WGMMA_OUT2
#undef MLA_WGMMA_OUT32
#undef MLA_WGMMA_OUT4
#undef MLA_WGMMA_OUT8
#undef MLA_WGMMA_REGS16
#undef MLA_WGMMA_REGS2
#undef MLA_WGMMA_REGS32
#undef MLA_WGMMA_REGS4
#undef MLA_WGMMA_REGS8
#undef MLA_WGMMA_RS
#undef MLA_WGMMA_RS16
#undef MLA_WGMMA_RS2
#undef MLA_WGMMA_RS32
#undef MLA_WGMMA_RS4
#undef MLA_WGMMA_RS8
#undef MLA_WGMMA_RS_P16
#undef MLA_WGMMA_RS_P2
#undef MLA_WGMMA_RS_P32
#undef MLA_WGMMA_RS_P4
#undef MLA_WGMMA_RS_P8
#undef MLA_WGMMA_SS
#undef MLA_WGMMA_SS16
#undef MLA_WGMMA_SS2
#undef MLA_WGMMA_SS32
#undef MLA_WGMMA_SS4
#undef MLA_WGMMA_SS8
#undef MLA_WGMMA_SS_P16
#undef MLA_WGMMA_SS_P2
#undef MLA_WGMMA_SS_P32
#undef MLA_WGMMA_SS_P4
#undef MLA_WGMMA_SS_P8
#undef MLA_WGMMA_TYPED

}  // namespace mla::cuda::wgmma
