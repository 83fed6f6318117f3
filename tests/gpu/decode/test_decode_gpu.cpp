// GPU dense decode (src/cuda/decode) against the fp64 CPU reference. Every
// test runs once per decode::Kernel value: automatic through the public API
// (mla::mla_decode, which runs the reference for CPU tensors), the others
// forced through the CUDA backend; a case a forced kernel cannot run must be
// refused with an error naming the kernel. Fresh random inputs per case,
// outputs and workspace poisoned with NaN bytes before every run.
//
// Error bounds and why:
//  * out: per query row, max |gpu - ref| <= 1e-2 * max |ref| of the row. The
//    kernel rounds P to bf16 for the P.V product (relative 2^-9 per weight)
//    and rounds the output to bf16 (relative 2^-9 of each element); fp32
//    accumulation over <= 64K keys adds far less. The P rounding is an
//    absolute error of ~2^-9 * mean|v| while max|out| shrinks as a row averages
//    more keys, so rows over hundreds of keys show the most: the largest seen
//    on the H200 is 5.8e-3 (fp8, h64 s_q3, L 777). 1e-2 still
//    catches a wrong key, a lost tile or a mis-scaled row, which move a row by
//    O(max|ref|).
//  * lse: |gpu - ref| <= 1e-3. Scores are fp32 sums of exact bf16 products
//    (relative ~1e-6 of |q.k| <= ~40) and exp2/log2 approximations (~1e-7).
//  * rows that see no key: out exactly 0 and lse exactly -inf.
//  * fp8 caches: the same bounds. Their MMAs run in f16 with power-of-two
//    shifts that keep every value in f16's range (decode_kernel.cuh): the
//    dequantised keys and Q are exact as before (scores are exact products
//    summed in fp32), P rounds to f16 (relative 2^-12 against bf16's 2^-9),
//    so the fp8 path is at least as precise as the bf16 dequantisation it
//    replaced. Fp8ValuesAtTheF16RangeEdges puts values where the shifts act.
//  * fp8_e4m3 (vLLM's layout, one scale d_k = 0.0173, not a power of two):
//    the same bounds. K/V are the bare codes in f16 (exact, |code| <= 448),
//    S = (Q.codes) summed in fp32 then times d_k * scale (two more f32
//    roundings, relative 2^-23, against the reference's exact code * d_k in
//    double), O = (P.codes) d_k / l (one more, relative 2^-24): far below the
//    P and output roundings above.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/decode/decode_config.hpp"
#include "cuda/decode/decode_cuda.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"

namespace mla::testing {
namespace {

using cuda::decode::Kernel;

struct Case {
  Kernel kernel = Kernel::automatic;
  std::vector<int32_t> lengths;
  int h_q = 16, s_q = 1;
  int64_t page_size = 64;
  KvFormat format = KvFormat::bf16;
  int64_t page_pad = 0;
  bool invariant = false;
  bool causal = true;
  bool out_f32 = false;
  uint64_t seed = 1;
  // fp8 cases: scale exponents of the cache, and a change of the cache's
  // entries and q after the random fill (before the reference); `values`
  // names it.
  int min_scale_exp = -8, max_scale_exp = -2;
  std::function<void(Rng&, PagedCache&, HostTensor&)> shape_values;
  std::string values;
  std::string name() const {
    std::string s = "h" + std::to_string(h_q) + " s_q" + std::to_string(s_q) + " page" +
                    std::to_string(page_size) + " " + kv_format_name(format) + " " +
                    cuda::decode::kernel_name(kernel) + " pad" + std::to_string(page_pad) +
                    (invariant ? " invariant" : "") + (causal ? "" : " noncausal") +
                    (values.empty() ? "" : " " + values) + " L[";
    for (size_t i = 0; i < lengths.size(); ++i) s += (i ? "," : "") + std::to_string(lengths[i]);
    return s + "]";
  }
};

// Whether c.kernel can run c (the test caches' layouts all encode as TMA maps).
bool kernel_takes(const Case& c) {
  const bool fp8 = kv_format_is_fp8(c.format);
  return cuda::decode::kernel_takes(c.kernel, {.fp8 = fp8,
                                               .page_size = c.page_size,
                                               .tma_map = !fp8 && c.page_size % 64 == 0,
                                               .rows = int64_t(c.s_q) * c.h_q});
}

bool narrow_kernel(Kernel k) {
  return k == Kernel::wgmma_fp8_narrow;
}
// c's rows made 16 (h16 s_q1) for the narrow kernels, which run nothing else.
Case with_narrow_rows(Case c) {
  if (narrow_kernel(c.kernel)) {
    c.h_q = 16;
    c.s_q = 1;
  }
  return c;
}

// c on kernel k, its cache format, page size and rows changed to ones k runs
// (a one-way form takes what its seesaw kernel takes).
Case on_kernel(Case c, Kernel k) {
  c.kernel = k;
  c = with_narrow_rows(c);
  const Kernel s = cuda::decode::producer_of(k);
  if (s == Kernel::wgmma_fp8 && !kv_format_is_fp8(c.format)) c.format = KvFormat::fp8_ds_mla;
  if (s == Kernel::wgmma_tma || s == Kernel::wgmma_cp_async) c.format = KvFormat::bf16;
  if (s == Kernel::wgmma_tma && c.page_size % 64 != 0) c.page_size = 64;
  return c;
}

class DecodeGpu : public ::testing::TestWithParam<Kernel> {};
INSTANTIATE_TEST_SUITE_P(Kernels, DecodeGpu, ::testing::ValuesIn(cuda::decode::kKernels),
                         [](const ::testing::TestParamInfo<Kernel>& info) {
                           return std::string(cuda::decode::kernel_name(info.param));
                         });

// Inputs on the host and the device, and the reference result.
struct Problem {
  Case c;
  PagedCache cache;
  HostTensor q;
  std::vector<double> ref_out, ref_lse;
  DeviceBuffer d_q, d_kv, d_bt, d_len, d_out, d_lse, d_ws, d_scale;
  DecodeArgs dev_args;
  float scale = float(deepseek_v32_softmax_scale());
  int64_t B() const { return int64_t(c.lengths.size()); }
  int64_t out_elems() const { return B() * c.s_q * c.h_q * kDv; }
  int64_t lse_elems() const { return B() * c.h_q * c.s_q; }
};

void reference(Problem& P) {
  const int64_t B = P.B();
  HostTensor out(DType::f64, {B, P.c.s_q, P.c.h_q, kDv}), lse(DType::f64, {B, P.c.h_q, P.c.s_q});
  out.poison();
  lse.poison();
  DecodeArgs a;
  a.q = P.q.view();
  a.kv = P.cache.view();
  a.block_table = P.cache.block_table_view();
  a.cache_seqlens = P.cache.seqlens_view();
  a.softmax_scale = P.scale;
  a.causal = P.c.causal;
  a.out = out.view();
  a.lse = lse.view();
  const Status st = mla_decode(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  P.ref_out.resize(out.numel());
  P.ref_lse.resize(lse.numel());
  for (int64_t i = 0; i < out.numel(); ++i) P.ref_out[i] = out.get(i);
  for (int64_t i = 0; i < lse.numel(); ++i) P.ref_lse[i] = lse.get(i);
}

void setup(Problem& P, const Case& c, bool with_reference = true) {
  P.c = c;
  Rng rng(c.seed);
  PagedCacheSpec spec;
  spec.format = c.format;
  spec.page_size = c.page_size;
  spec.page_pad = c.page_pad;
  spec.min_scale_exp = c.min_scale_exp;
  spec.max_scale_exp = c.max_scale_exp;
  P.cache = make_paged_cache(rng, c.lengths, spec);
  P.q = random_tensor(rng, DType::bf16, {P.B(), c.s_q, c.h_q, kDqk});
  if (c.shape_values) c.shape_values(rng, P.cache, P.q);
  if (with_reference) {
    reference(P);
    if (::testing::Test::HasFatalFailure()) return;
  }
  const size_t kv_bytes = P.cache.storage.size() * 8;
  P.d_q = DeviceBuffer(P.q.storage.data(), P.q.numel() * 2);
  P.d_kv = DeviceBuffer(P.cache.storage.data(), kv_bytes);
  P.d_bt = DeviceBuffer(P.cache.block_table.data(), P.cache.block_table.size() * 4);
  P.d_len = DeviceBuffer(P.cache.seqlens.data(), P.cache.seqlens.size() * 4);
  P.d_out = DeviceBuffer(P.out_elems() * (c.out_f32 ? 4 : 2));
  P.d_lse = DeviceBuffer(P.lse_elems() * 4);
  DecodeArgs& a = P.dev_args;
  a.q = on_device(P.q.view(), P.d_q);
  a.kv = P.cache.view(Device::cuda(0));
  a.kv.data.data = P.d_kv.get();
  if (c.format == KvFormat::fp8_e4m3) {  // the per-tensor scale lives on the device
    P.d_scale = DeviceBuffer(&P.cache.scale, 4);
    a.kv.scale.data = P.d_scale.get();
  }
  a.block_table = on_device(P.cache.block_table_view(), P.d_bt);
  a.cache_seqlens = on_device(P.cache.seqlens_view(), P.d_len);
  a.softmax_scale = P.scale;
  a.causal = c.causal;
  a.out = TensorView::make(P.d_out.get(), c.out_f32 ? DType::f32 : DType::bf16,
                           {P.B(), c.s_q, c.h_q, kDv}, Device::cuda(0));
  a.lse = TensorView::make(P.d_lse.get(), DType::f32, {P.B(), c.h_q, c.s_q}, Device::cuda(0));
  DecodeOptions opts;
  opts.batch_invariant = c.invariant;
  size_t ws = 0;
  const Status st = decode_workspace_size(a, opts, &ws);
  ASSERT_TRUE(st.ok()) << st.to_string();
  P.d_ws = DeviceBuffer(ws);
  ASSERT_TRUE(P.d_ws.get() != nullptr || ws == 0);
}

Status run(Problem& P, cudaStream_t stream = nullptr, bool poison = true) {
  if (poison) {
    P.d_out.poison();
    P.d_lse.poison();
    P.d_ws.poison();
  }
  DecodeOptions opts;
  opts.batch_invariant = P.c.invariant;
  ExecContext ctx;
  ctx.stream = stream;
  const Workspace ws{P.d_ws.get(), P.d_ws.bytes()};
  if (P.c.kernel == Kernel::automatic) return mla_decode(P.dev_args, opts, ws, ctx);
  return cuda::mla_decode(P.dev_args, opts, ws, ctx, P.c.kernel);
}

struct Result {
  std::vector<float> out, lse;
};
Result fetch(const Problem& P) {
  Result r;
  cudaDeviceSynchronize();
  r.lse = P.d_lse.download<float>(P.lse_elems());
  if (P.c.out_f32) {
    r.out = P.d_out.download<float>(P.out_elems());
  } else {
    auto raw = P.d_out.download<uint16_t>(P.out_elems());
    r.out.resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) r.out[i] = bf16_to_float(bf16{raw[i]});
  }
  return r;
}

struct Errors {
  double out_rel = 0, lse_abs = 0;
};

// Compares against the reference; `nan_requests` must come out NaN instead.
void check(const Problem& P, const Result& r, const std::vector<bool>& nan_requests = {},
           Errors* errors = nullptr) {
  Errors local;
  Errors& e = errors ? *errors : local;
  const int s_q = P.c.s_q, h_q = P.c.h_q;
  for (int64_t b = 0; b < P.B(); ++b)
    for (int i = 0; i < s_q; ++i)
      for (int h = 0; h < h_q; ++h) {
        const int64_t row = ((b * s_q + i) * h_q + h) * kDv;
        const int64_t li = (b * h_q + h) * s_q + i;
        const float lse = r.lse[li];
        const std::string where = "b " + std::to_string(b) + " i " + std::to_string(i) + " h " +
                                  std::to_string(h) + " (" + P.c.name() + ")";
        if (!nan_requests.empty() && nan_requests[b]) {
          EXPECT_TRUE(std::isnan(lse)) << "lse should be NaN at " << where;
          EXPECT_TRUE(std::isnan(r.out[row])) << "out should be NaN at " << where;
          continue;
        }
        const double ref_lse = P.ref_lse[li];
        if (std::isinf(ref_lse)) {
          ASSERT_TRUE(std::isinf(lse) && lse < 0)
              << "lse " << lse << " should be -inf at " << where;
          for (int d = 0; d < kDv; ++d)
            ASSERT_EQ(r.out[row + d], 0.f) << "out should be 0 (no key) at " << where;
          continue;
        }
        ASSERT_TRUE(std::isfinite(lse)) << "lse " << lse << " at " << where;
        e.lse_abs = std::max(e.lse_abs, std::fabs(lse - ref_lse));
        ASSERT_LE(std::fabs(lse - ref_lse), 1e-3) << "lse at " << where;
        double mref = 0, merr = 0;
        for (int d = 0; d < kDv; ++d) {
          ASSERT_TRUE(std::isfinite(r.out[row + d])) << "out[" << d << "] at " << where;
          mref = std::max(mref, std::fabs(P.ref_out[row + d]));
          merr = std::max(merr, std::fabs(r.out[row + d] - P.ref_out[row + d]));
        }
        const double rel = merr / std::max(mref, 1e-30);
        e.out_rel = std::max(e.out_rel, rel);
        ASSERT_LE(rel, 1e-2) << "out at " << where << " max err " << merr << " max ref " << mref;
      }
}

// A case the forced kernel cannot run: refused with an error naming it.
void expect_refused(const Case& c) {
  Problem P;
  setup(P, c, /*with_reference=*/false);
  if (::testing::Test::HasFatalFailure()) return;
  const Status st = run(P);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string() << " (" << c.name() << ")";
  EXPECT_NE(st.message().find(cuda::decode::kernel_name(c.kernel)), std::string::npos)
      << st.to_string();
}

void run_and_check(const Case& c) {
  if (!kernel_takes(c)) return expect_refused(c);
  Problem P;
  setup(P, c);
  if (::testing::Test::HasFatalFailure()) return;
  const Status st = run(P);
  ASSERT_TRUE(st.ok()) << st.to_string() << " (" << c.name() << ")";
  Errors e;
  check(P, fetch(P), {}, &e);
  std::printf("  %-70s out rel %.2e  lse abs %.2e\n", c.name().c_str(), e.out_rel, e.lse_abs);
}

// Lengths with every edge: 0, 1, < page, page +- 1, not a multiple of the
// 64-key tile, several tiles.
const std::vector<int32_t> kEdgeLengths = {0, 1, 5, 63, 64, 65, 200, 777};

TEST_P(DecodeGpu, GridOfEdges) {
  const std::pair<int, int> heads_sq[] = {{16, 1}, {32, 2}, {64, 3}, {128, 4}, {16, 4}, {128, 1}};
  uint64_t seed = 100;
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla, KvFormat::fp8_e4m3})
    for (int64_t page : {1, 16, 32, 64, 128})
      for (int k = 0; k < 6; ++k) {
        // Every (heads, s_q) with page 64 (the fast path); two per other page.
        if (page != 64 && k % 3 != int(page) % 3) continue;
        Case c;
        c.kernel = GetParam();
        c.lengths = kEdgeLengths;
        c.h_q = heads_sq[k].first;
        c.s_q = heads_sq[k].second;
        c.page_size = page;
        c.format = f;
        c.page_pad = (seed % 2) ? (f == KvFormat::bf16 ? 8 : 16) : 0;  // padded page strides
        c.seed = seed++;
        run_and_check(c);
        if (HasFatalFailure()) return;
      }
}

// More new tokens than the decode suite's 1-4 (speculative drafts, small
// chunks of prefill through the absorbed form, the layer's CUDA path): query
// rows span many 64-row blocks and the causal limit differs per block; lengths
// below s_q leave the first tokens without keys.
TEST_P(DecodeGpu, ManyNewTokensUpToTheLimit) {
  const std::pair<int, int> heads_sq[] = {
      {16, 5}, {16, 17}, {64, 9}, {128, 40}, {32, kCudaDecodeMaxSq}};
  uint64_t seed = 300;
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (auto [h, sq] : heads_sq) {
      Case c;
      c.kernel = GetParam();
      c.lengths = {0, 3, 40, 65, 777};
      c.h_q = h;
      c.s_q = sq;
      c.page_size = seed % 2 ? 64 : 16;
      c.format = f;
      c.seed = seed++;
      run_and_check(c);
      if (HasFatalFailure()) return;
    }
}

TEST_P(DecodeGpu, LongRequestsSplitAcrossWorkers) {
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (bool inv : {false, true}) {
      Case c;
      c.kernel = GetParam();
      c.lengths = {20000, 33, 4097, 1};
      c.h_q = 32;
      c.s_q = 2;
      c.format = f;
      c.invariant = inv;
      c.seed = 7 + inv;
      run_and_check(c);
      if (HasFatalFailure()) return;
    }
  Case one;  // one long request: all workers share it, many partials
  one.lengths = {65536};
  one.h_q = 16;
  one.seed = 9;
  run_and_check(on_kernel(one, GetParam()));
}

// 16 query rows per request (h16 s_q1: wgmma_fp8_narrow's shape) on every
// page size, with 0 / 1 / < page / page +- 1 / not a multiple of 64 / many
// tiles, odd and even tile counts (the narrow math alternates tiles between
// its warpgroups), padded page strides, non-causal and f32 out, and one long
// request split over every worker (partials).
TEST_P(DecodeGpu, SixteenRowsEveryPageSize) {
  uint64_t seed = 1500;
  for (KvFormat f : {KvFormat::fp8_ds_mla, KvFormat::fp8_e4m3, KvFormat::bf16})
    for (int64_t page : {1, 16, 32, 48, 64, 128}) {
      Case c;
      c.lengths = {0, 1, 5, 47, 63, 64, 65, 128, 200, 777, 2049};
      c.page_size = page;
      c.format = f;
      c.causal = seed % 3 != 0;
      c.out_f32 = seed % 4 == 1;
      c.seed = seed++;
      c = on_kernel(c, GetParam());
      // 16 bytes of padding per page (in elements of the format on_kernel chose)
      c.page_pad = (seed % 2) ? (c.format == KvFormat::bf16 ? 8 : 16) : 0;
      run_and_check(c);
      if (HasFatalFailure()) return;
    }
  Case one;  // one request over every worker: split pieces of both tile parities
  one.lengths = {20000};
  one.format = KvFormat::fp8_e4m3;
  one.seed = 1600;
  run_and_check(on_kernel(one, GetParam()));
}

TEST_P(DecodeGpu, BatchInvariantModeAndNonCausalAndF32Out) {
  Case c = on_kernel({.lengths = kEdgeLengths, .h_q = 64, .s_q = 2, .invariant = true, .seed = 11},
                     GetParam());
  run_and_check(c);
  c.invariant = false;
  c.causal = false;
  c.seed = 12;
  run_and_check(c);
  c.causal = true;
  c.out_f32 = true;
  c.seed = 13;
  run_and_check(c);
}

// batch_invariant: request 0's bits are the same alone and inside a batch.
TEST_P(DecodeGpu, BatchInvariantBitsDoNotDependOnTheBatch) {
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
    Case big;
    big.lengths = {9000, 30000, 12, 5000, 17000, 64};
    big.h_q = 64;
    big.format = f;
    big.invariant = true;
    big.seed = 21;
    big.kernel = GetParam();
    big = with_narrow_rows(big);
    if (!kernel_takes(big)) continue;  // run_and_check covers the refusal
    Problem P;
    setup(P, big, /*with_reference=*/false);
    ASSERT_TRUE(run(P).ok());
    const Result rb = fetch(P);
    // The same request 0 alone: same q rows and cache bytes (copied over).
    Case one = big;
    one.lengths = {9000};
    Problem Q;
    setup(Q, one, /*with_reference=*/false);
    // Request 0 of the batch: its q and its pages, through Q's own block table.
    std::vector<uint8_t> kv(Q.cache.storage.size() * 8);
    std::memcpy(kv.data(), Q.cache.storage.data(), kv.size());
    for (int64_t t = 0; t < 9000; ++t)
      std::memcpy(const_cast<uint8_t*>(Q.cache.entry(0, t)), P.cache.entry(0, t),
                  kv_entry_bytes(f));
    Q.d_kv.upload(Q.cache.storage.data(), Q.cache.storage.size() * 8);
    Q.d_q.upload(P.q.storage.data(), int64_t(big.h_q) * kDqk * 2);
    ASSERT_TRUE(run(Q).ok());
    const Result r1 = fetch(Q);
    ASSERT_EQ(std::memcmp(r1.out.data(), rb.out.data(), r1.out.size() * 4), 0)
        << "out of request 0 differs between batch and alone (" << kv_format_name(f) << ")";
    ASSERT_EQ(std::memcmp(r1.lse.data(), rb.lse.data(), r1.lse.size() * 4), 0);
  }
}

// Runs P once, then 100 times reusing the buffers without clearing them: every
// call leaves the first call's bits.
void expect_repeats_bitwise(Problem& P) {
  ASSERT_TRUE(run(P).ok());
  const Result first = fetch(P);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(run(P, nullptr, /*poison=*/false).ok());
  const Result last = fetch(P);
  ASSERT_EQ(std::memcmp(first.out.data(), last.out.data(), first.out.size() * 4), 0);
  ASSERT_EQ(std::memcmp(first.lse.data(), last.lse.data(), first.lse.size() * 4), 0);
}

// 100 calls reusing the buffers without clearing them: identical bits.
TEST_P(DecodeGpu, RepeatedCallsAreBitwiseIdentical) {
  const Case c =
      on_kernel({.lengths = {3000, 70, 9000, 0, 1, 4100}, .h_q = 128, .seed = 31}, GetParam());
  Problem P;
  setup(P, c, /*with_reference=*/false);
  expect_repeats_bitwise(P);
}

// The same on the fp8_e4m3 cache (the kernels that run it).
TEST_P(DecodeGpu, Fp8E4m3RepeatedCallsAreBitwiseIdentical) {
  Case c{.lengths = {3000, 70, 9000, 0, 1, 4100}, .h_q = 128, .seed = 32};
  c.kernel = GetParam();
  c.format = KvFormat::fp8_e4m3;
  c = with_narrow_rows(c);
  if (!kernel_takes(c)) GTEST_SKIP() << "the kernel does not run fp8 caches";
  Problem P;
  setup(P, c, /*with_reference=*/false);
  expect_repeats_bitwise(P);
}

// The whole step captured once in a CUDA graph, replayed with new lengths.
TEST_P(DecodeGpu, GraphCaptureAndReplayWithNewLengths) {
  // capacity: the block table covers these lengths
  const Case c =
      on_kernel({.lengths = {5000, 800, 20000, 64}, .h_q = 64, .s_q = 2, .seed = 41}, GetParam());
  Problem P;
  setup(P, c);
  ASSERT_FALSE(HasFatalFailure());
  cudaStream_t stream;
  MLA_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  P.d_out.poison();
  P.d_lse.poison();
  cudaDeviceSynchronize();
  MLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status st = run(P, stream, /*poison=*/false);
  MLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  MLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
  check(P, fetch(P));
  // New lengths (within the same block table): shorter, longer-split, zero.
  const std::vector<std::vector<int32_t>> next = {{4999, 1, 19000, 0}, {2, 799, 64, 63}};
  for (const auto& lens : next) {
    P.cache.seqlens = lens;
    reference(P);
    ASSERT_FALSE(HasFatalFailure());
    P.d_len.upload(lens.data(), lens.size() * 4);
    P.d_out.poison();
    P.d_lse.poison();
    MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
    check(P, fetch(P));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Device-side values the host cannot check: a page id outside [0, num_pages),
// a length past the block table's capacity, a negative length. The kernel
// never reads through them and the request's rows come out NaN; the other
// requests are unaffected.
TEST_P(DecodeGpu, BadDeviceValuesGiveNanRowsNotCrashes) {
  const Case c = on_kernel({.lengths = {300, 300, 300, 300}, .h_q = 16, .seed = 51}, GetParam());
  Problem P;
  setup(P, c);
  ASSERT_FALSE(HasFatalFailure());
  std::vector<int32_t> bt = P.cache.block_table;
  bt[1 * P.cache.max_pages + 2] = int32_t(P.cache.num_pages) + 5;  // request 1: page past the pool
  bt[3 * P.cache.max_pages + 0] = -7;                              // request 3: negative page id
  P.d_bt.upload(bt.data(), bt.size() * 4);
  std::vector<int32_t> lens = c.lengths;
  lens[2] = int32_t(P.cache.max_pages * c.page_size + 1);  // request 2: past capacity
  P.d_len.upload(lens.data(), lens.size() * 4);
  ASSERT_TRUE(run(P).ok());
  check(P, fetch(P), {false, true, true, true});
  lens[2] = -5;  // negative length
  P.d_len.upload(lens.data(), lens.size() * 4);
  ASSERT_TRUE(run(P).ok());
  check(P, fetch(P), {false, true, true, true});
}

// ---- fp8 values at the edges of the f16 path ----
// Helpers that change a cache's entries in place (fp8_ds_mla layout).
void scale_q(HostTensor& q, int from, int to, int exp2) {
  for (int64_t i = 0; i < q.numel(); ++i)
    if (int(i % kDqk) >= from && int(i % kDqk) < to) q.set(i, std::ldexp(q.get(i), exp2));
}
template <class F>
void each_entry(PagedCache& cache, F&& f) {
  for (int64_t b = 0; b < cache.batch(); ++b)
    for (int64_t t = 0; t < cache.seqlens[b]; ++t) f(cache.entry_mut(b, t), b, t);
}
void set_scales(uint8_t* e, float s) {
  for (int g = 0; g < Fp8DsMlaLayout::kNumScales; ++g)
    std::memcpy(e + Fp8DsMlaLayout::kScaleOffset + 4 * g, &s, 4);
}
void scale_rope(uint8_t* e, int exp2) {
  for (int i = 0; i < kDr; ++i) {
    bf16 h;
    std::memcpy(&h.bits, e + Fp8DsMlaLayout::kRopeOffset + 2 * i, 2);
    h = float_to_bf16(std::ldexp(bf16_to_float(h), exp2));
    std::memcpy(e + Fp8DsMlaLayout::kRopeOffset + 2 * i, &h.bits, 2);
  }
}
// e4m3 subnormal: exponent field 0 (sign and 3 mantissa bits kept).
void subnormal_codes(Rng& rng, uint8_t* e, int one_in) {
  for (int i = 0; i < Fp8DsMlaLayout::kNopeBytes; ++i)
    if (rng.randint(0, one_in - 1) == 0) e[i] &= 0x87;
}

// fp8_ds_mla keys shifted and unshifted in the same tiles: a quarter of the
// keys get block scales 2^10 and subnormal codes (|k| <= 14, like the others),
// so the kernel stores them shifted by 2^-e_key and scales S and P back.
void mixed_shifts(Case& c) {
  c.values = "mixed shifts";
  c.shape_values = [](Rng& rng, PagedCache& cache, HostTensor&) {
    each_entry(cache, [&](uint8_t* e, int64_t, int64_t) {
      if (rng.randint(0, 3) != 0) return;
      set_scales(e, 1024.f);
      subnormal_codes(rng, e, 1);
    });
  };
}

// Each case puts values where a shift of the f16 path acts; q is scaled so
// that scores stay O(1-10) (a meaningful softmax), and the reference runs on
// the same cache and q. Lengths cross tiles and pages; h 16 and 128 (one and
// two row blocks), s_q 1 and 2.
TEST_P(DecodeGpu, Fp8ValuesAtTheF16RangeEdges) {
  std::vector<Case> cases;
  {  // every key shifted: block scales 2^6..2^10 (|k| up to 448 * 2^10)
    Case c;
    c.values = "scales 2^6..2^10";
    c.min_scale_exp = 6;
    c.max_scale_exp = 10;
    c.shape_values = [](Rng&, PagedCache&, HostTensor& q) { scale_q(q, 0, kDqk, -12); };
    cases.push_back(c);
  }
  {  // the rope alone decides the shift: |rope| up to 2^20, q's rope part small
    Case c;
    c.values = "rope 2^20";
    c.shape_values = [](Rng&, PagedCache& cache, HostTensor& q) {
      each_entry(cache, [](uint8_t* e, int64_t, int64_t) { scale_rope(e, 20); });
      scale_q(q, kDc, kDqk, -18);
    };
    cases.push_back(c);
  }
  {  // shifted and unshifted keys in the same tiles (mixed_shifts)
    Case c;
    mixed_shifts(c);
    cases.push_back(c);
  }
  {  // the smallest scale (2^-13) with half the codes subnormal: products in
     // f16's subnormal range (exact); q scaled up (Q's upward shift)
    Case c;
    c.values = "scale 2^-13 subnormal codes";
    c.min_scale_exp = c.max_scale_exp = -13;
    c.shape_values = [](Rng& rng, PagedCache& cache, HostTensor& q) {
      each_entry(cache, [&](uint8_t* e, int64_t, int64_t) { subnormal_codes(rng, e, 2); });
      scale_q(q, 0, kDqk, 8);
    };
    cases.push_back(c);
  }
  uint64_t seed = 1000;
  for (Case c : cases)
    for (auto [h, s] : {std::pair{16, 1}, std::pair{128, 2}}) {
      c.kernel = GetParam();
      c.format = KvFormat::fp8_ds_mla;
      c.lengths = {1, 70, 129, 777};
      c.h_q = h;
      c.s_q = s;
      c.page_size = 64;
      c.seed = seed++;
      if (!kernel_takes(c)) continue;  // bf16-only kernels: their refusal is tested elsewhere
      run_and_check(c);
      if (HasFatalFailure()) return;
    }
}

// A key that no shift brings into f16's range (block scale 2^30: 448 * 2^30
// needs 2^23 > the largest key shift) makes its request's rows NaN, never a
// wrong finite answer; the other requests are unaffected.
TEST_P(DecodeGpu, Fp8KeyPastTheF16GuardGivesNanRows) {
  Case c;
  c.kernel = GetParam();
  c.format = KvFormat::fp8_ds_mla;
  c.lengths = {300, 300, 300};
  c.h_q = 16;
  c.seed = 1100;
  c.values = "one key scale 2^30";
  if (!kernel_takes(c)) return;
  Problem P;
  setup(P, c, /*with_reference=*/false);
  ASSERT_FALSE(HasFatalFailure());
  set_scales(P.cache.entry_mut(1, 150), std::ldexp(1.f, 30));
  reference(P);
  ASSERT_FALSE(HasFatalFailure());
  P.d_kv.upload(P.cache.storage.data(), P.cache.storage.size() * 8);
  ASSERT_TRUE(run(P).ok());
  check(P, fetch(P), {false, true, false});
}

TEST(DecodeGpuArgs, InvalidArgumentsAreErrorsNamingTheArgument) {
  Case c;
  c.lengths = {100, 200};
  c.h_q = 16;
  Problem P;
  setup(P, c, /*with_reference=*/false);
  auto expect_error = [&](DecodeArgs a, Errc code, const char* needle, size_t ws_bytes = 0) {
    const Status st =
        mla_decode(a, {}, Workspace{P.d_ws.get(), ws_bytes ? ws_bytes : P.d_ws.bytes()});
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
  };
  DecodeArgs a = P.dev_args;
  a.out.device = Device::cpu();
  expect_error(a, Errc::invalid_device, "out");
  a = P.dev_args;
  a.q.data = static_cast<char*>(a.q.data) + 2;  // 2-byte offset: not 16-byte aligned
  expect_error(a, Errc::misaligned, "q");
  a = P.dev_args;
  a.out.dtype = DType::f16;
  expect_error(a, Errc::invalid_dtype, "out");
  a = P.dev_args;
  a.lse.dtype = DType::bf16;
  expect_error(a, Errc::invalid_dtype, "lse");
  a = P.dev_args;
  expect_error(a, Errc::insufficient_workspace, "workspace", 16);
  // Head counts and s_q outside the kernels' range (the shape is what is read).
  size_t ws = 0;
  DecodeArgs a8 = P.dev_args;
  a8.q.shape[2] = 8;
  Status st = decode_workspace_size(a8, {}, &ws);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("h_q = 8"), std::string::npos) << st.to_string();
  DecodeArgs a5 = P.dev_args;
  a5.q.shape[1] = kCudaDecodeMaxSq + 1;
  st = decode_workspace_size(a5, {}, &ws);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("s_q = " + std::to_string(kCudaDecodeMaxSq + 1)), std::string::npos)
      << st.to_string();
}

// The automatic choice, and a forced kernel that cannot run the call: an
// unsupported error naming the kernel, before any launch.
TEST(DecodeGpuArgs, KernelChoiceAndImpossibleForcedKernels) {
  using cuda::decode::choose_kernel;
  // More than 16 rows (or not known): the one-way form of each producer.
  for (int64_t rows : {0, 32, 128, 512}) {
    EXPECT_EQ(choose_kernel({.fp8 = false, .page_size = 64, .tma_map = true, .rows = rows}),
              Kernel::wgmma_tma_oneway);
    EXPECT_EQ(choose_kernel({.fp8 = false, .page_size = 128, .tma_map = false, .rows = rows}),
              Kernel::wgmma_cp_async_oneway);
    EXPECT_EQ(choose_kernel({.fp8 = false, .page_size = 16, .tma_map = false, .rows = rows}),
              Kernel::wgmma_cp_async_oneway);
    EXPECT_EQ(choose_kernel({.fp8 = true, .page_size = 64, .tma_map = false, .rows = rows}),
              Kernel::wgmma_fp8_oneway_sp);  // the sector-pair loads
  }
  // Up to 16 rows: the seesaw for bf16, the narrow math for fp8.
  for (int64_t rows : {1, 16}) {
    EXPECT_EQ(choose_kernel({.fp8 = false, .page_size = 64, .tma_map = true, .rows = rows}),
              Kernel::wgmma_tma);
    EXPECT_EQ(choose_kernel({.fp8 = false, .page_size = 16, .tma_map = false, .rows = rows}),
              Kernel::wgmma_cp_async);
    EXPECT_EQ(choose_kernel({.fp8 = true, .page_size = 64, .tma_map = false, .rows = rows}),
              cuda::decode::kChooseNarrow ? Kernel::wgmma_fp8_narrow : Kernel::wgmma_fp8);
  }
  const struct {
    Kernel kernel;
    KvFormat format;
    int64_t page_size;
    int h_q = 16, s_q = 1;
  } impossible[] = {{Kernel::wgmma_fp8_narrow, KvFormat::bf16, 64},
                    {Kernel::wgmma_fp8_narrow, KvFormat::fp8_ds_mla, 64, 16, 2},
                    {Kernel::wgmma_fp8_narrow, KvFormat::fp8_e4m3, 16, 32, 1},
                    {Kernel::wgmma_fp8_narrow, KvFormat::fp8_e4m3, 64, 64, 1},
                    {Kernel::wgmma_tma, KvFormat::bf16, 16},
                    {Kernel::wgmma_tma, KvFormat::fp8_ds_mla, 64},
                    {Kernel::wgmma_cp_async, KvFormat::fp8_ds_mla, 64},
                    {Kernel::wgmma_tma, KvFormat::fp8_e4m3, 64},
                    {Kernel::wgmma_cp_async, KvFormat::fp8_e4m3, 16},
                    {Kernel::wgmma_fp8, KvFormat::bf16, 64},
                    {Kernel::wgmma_tma_oneway, KvFormat::bf16, 16},
                    {Kernel::wgmma_cp_async_oneway, KvFormat::fp8_ds_mla, 64},
                    {Kernel::wgmma_fp8_oneway, KvFormat::bf16, 64},
                    {Kernel::wgmma_fp8_oneway_sp, KvFormat::bf16, 64}};
  for (const auto& x : impossible) {
    Case c;
    c.lengths = {100, 200};
    c.kernel = x.kernel;
    c.format = x.format;
    c.page_size = x.page_size;
    c.h_q = x.h_q;
    c.s_q = x.s_q;
    ASSERT_FALSE(kernel_takes(c)) << c.name();
    expect_refused(c);
  }
}

}  // namespace
}  // namespace mla::testing

namespace mla::testing {
namespace {
// Small cases for compute-sanitizer (memcheck, racecheck): direct and split
// pieces, both formats, one and two row blocks, masked tails, empty requests,
// in a few tiles. Page 16: the cp.async and fp8 producers (SanitizerSmallTma
// covers wgmma_tma).
TEST_P(DecodeGpu, SanitizerSmall) {
  const std::pair<int, int> heads_sq[] = {{16, 1}, {16, 2}, {64, 2}};
  uint64_t seed = 900;
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla, KvFormat::fp8_e4m3})
    for (auto [h, s] : heads_sq) {
      Case c;
      c.kernel = GetParam();
      c.lengths = {0, 1, 70, 300};
      c.h_q = h;
      c.s_q = s;
      c.page_size = 16;
      c.format = f;
      c.seed = seed++;
      run_and_check(c);
      if (HasFatalFailure()) return;
    }
}

// Page 64 for the sanitizers: the TMA tiles (automatic and wgmma_tma on a
// bf16 cache). Tile counts 0, 1, 2, 3 and 5: full tiles by TMA, partial last
// tiles by cp.async, odd and even counts; h128 has two row blocks.
TEST_P(DecodeGpu, SanitizerSmallTma) {
  const std::pair<int, int> heads_sq[] = {{16, 1}, {128, 1}, {64, 2}};
  uint64_t seed = 950;
  for (auto [h, s] : heads_sq) {
    Case c;
    c.lengths = {0, 1, 70, 129, 300};
    c.h_q = h;
    c.s_q = s;
    c.page_size = 64;
    c.seed = seed++;
    run_and_check(on_kernel(c, GetParam()));
    if (HasFatalFailure()) return;
  }
}

// h128 requests long enough to be split over the workers: pieces start on
// odd and even tiles and hold odd and even tile counts (the two stages' parity),
// with both row blocks, s_q 1 and 2.
TEST_P(DecodeGpu, SplitPiecesAtH128) {
  for (int s_q : {1, 2}) {
    Case c;
    c.lengths = {4097, 3000, 65, 1, 2049};
    c.h_q = 128;
    c.s_q = s_q;
    c.seed = 960 + s_q;
    run_and_check(on_kernel(c, GetParam()));
    if (HasFatalFailure()) return;
  }
}

// Many split requests in balanced mode: the combine's one-warp-per-row layout
// (8 rows per CTA, taken where those CTAs fill the GPU) with 2-3 pieces per
// request; the other tests reach it only in batch-invariant mode.
TEST_P(DecodeGpu, ManySplitRequestsCombinedPerWarp) {
  Case c;
  c.lengths.assign(24, 2100);
  c.lengths[3] = 1;
  c.lengths[17] = 4097;
  c.h_q = 128;
  c.seed = 970;
  run_and_check(on_kernel(c, GetParam()));
}
}  // namespace
}  // namespace mla::testing

// ---- plan reuse (DecodePlan): one schedule per step, every layer reads it ----
namespace mla::testing {
namespace {

// Layers of one step: the same lengths and shapes, their own q and cache.
std::vector<std::unique_ptr<Problem>> layers_of(const Case& c, int n) {
  std::vector<std::unique_ptr<Problem>> L;
  for (int i = 0; i < n; ++i) {
    Case ci = c;
    ci.seed = c.seed + 1000 * uint64_t(i);
    L.push_back(std::make_unique<Problem>());
    setup(*L.back(), ci);
    if (::testing::Test::HasFatalFailure()) return {};
  }
  return L;
}

// P's call reading `plan`, with P's workspace as scratch unless `ws` is given.
Status run_planned(Problem& P, const DecodePlan& plan, cudaStream_t stream = nullptr,
                   const DeviceBuffer* ws = nullptr) {
  DecodeOptions opts;
  opts.batch_invariant = P.c.invariant;
  opts.plan = &plan;
  ExecContext ctx;
  ctx.stream = stream;
  const DeviceBuffer& scratch = ws != nullptr ? *ws : P.d_ws;
  const Workspace w{scratch.get(), scratch.bytes()};
  if (P.c.kernel == Kernel::automatic) return mla_decode(P.dev_args, opts, w, ctx);
  return cuda::mla_decode(P.dev_args, opts, w, ctx, P.c.kernel);
}

void expect_same_bits(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.out.size(), b.out.size());
  EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 4), 0) << what << ": out";
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0) << what << ": lse";
}

// Plan once, run three layers (different q and cache, same lengths): every
// layer bit-identical to its call without a plan, and to the reference. The
// plan's bytes copied to another buffer (a graph buffer) serve the same.
TEST_P(DecodeGpu, PlanReusedAcrossLayersIsBitIdentical) {
  for (bool invariant : {false, true}) {
    Case c;
    c.lengths = {3000, 70, 9000, 0, 1, 4100, 20000};
    c.h_q = 64;
    c.s_q = 2;
    c.invariant = invariant;
    c.seed = 61;
    c = on_kernel(c, GetParam());
    if (!kernel_takes(c)) return;
    auto L = layers_of(c, 3);
    ASSERT_FALSE(HasFatalFailure());
    std::vector<Result> plain;
    for (auto& P : L) {
      const Status st = run(*P);
      ASSERT_TRUE(st.ok()) << st.to_string();
      plain.push_back(fetch(*P));
      check(*P, plain.back());
      ASSERT_FALSE(HasFatalFailure());
    }
    DeviceBuffer plan_ws(L[0]->d_ws.bytes());
    plan_ws.poison();
    DecodeOptions opts;
    opts.batch_invariant = invariant;
    DecodePlan plan;
    Status st = decode_plan(L[0]->dev_args, opts, Workspace{plan_ws.get(), plan_ws.bytes()}, &plan);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(plan.data, plan_ws.get());
    EXPECT_GT(plan.bytes, 0u);
    EXPECT_LT(plan.bytes, plan_ws.bytes());
    for (size_t i = 0; i < L.size(); ++i) {
      L[i]->d_out.poison();
      L[i]->d_lse.poison();
      L[i]->d_ws.poison();  // the scratch: nothing of the schedule may come from it
      st = run_planned(*L[i], plan);
      ASSERT_TRUE(st.ok()) << st.to_string();
      expect_same_bits(plain[i], fetch(*L[i]), "layer " + std::to_string(i) + " " + c.name());
    }
    // The plan's own workspace as a layer's scratch: its prefix is left alone.
    for (size_t i : {size_t(1), size_t(2)}) {
      L[i]->d_out.poison();
      L[i]->d_lse.poison();
      st = run_planned(*L[i], plan, nullptr, &plan_ws);
      ASSERT_TRUE(st.ok()) << st.to_string();
      expect_same_bits(plain[i], fetch(*L[i]),
                       "layer " + std::to_string(i) + " with its scratch in the plan's workspace");
    }
    // Copied elsewhere (FlashMLA-style metadata copy_ into a graph buffer).
    DeviceBuffer copy(plan.bytes);
    MLA_CUDA_CHECK(cudaMemcpy(copy.get(), plan.data, plan.bytes, cudaMemcpyDeviceToDevice));
    DecodePlan moved = plan;
    moved.data = copy.get();
    plan_ws.poison();
    L[0]->d_out.poison();
    L[0]->d_lse.poison();
    st = run_planned(*L[0], moved);
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_same_bits(plain[0], fetch(*L[0]), "plan copied to another buffer");
  }
}

// One graph: the plan call and three layers. Replayed with new lengths, every
// layer matches the reference of the new lengths.
TEST_P(DecodeGpu, PlanAndLayersInOneGraphReplayWithNewLengths) {
  Case c;
  c.lengths = {5000, 800, 20000, 64};
  c.h_q = 128;
  c.s_q = 1;
  c.seed = 71;
  c = on_kernel(c, GetParam());
  if (!kernel_takes(c)) return;
  auto L = layers_of(c, 3);
  ASSERT_FALSE(HasFatalFailure());
  // Every layer reads the same lengths buffer (as an engine's step does).
  for (auto& P : L) P->dev_args.cache_seqlens = L[0]->dev_args.cache_seqlens;
  DeviceBuffer plan_ws(L[0]->d_ws.bytes());
  cudaStream_t stream;
  MLA_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaDeviceSynchronize();
  DecodePlan plan;
  MLA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ExecContext ctx;
  ctx.stream = stream;
  Status st =
      decode_plan(L[0]->dev_args, {}, Workspace{plan_ws.get(), plan_ws.bytes()}, &plan, ctx);
  for (auto& P : L)
    if (st.ok()) st = run_planned(*P, plan, stream);
  MLA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  MLA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const std::vector<std::vector<int32_t>> lens_seq = {
      c.lengths, {4999, 1, 19000, 0}, {2, 799, 64, 63}, {5000, 800, 20000, 64}};
  for (const auto& lens : lens_seq) {
    for (auto& P : L) {
      P->cache.seqlens = lens;
      reference(*P);
      ASSERT_FALSE(HasFatalFailure());
      P->d_out.poison();
      P->d_lse.poison();
    }
    L[0]->d_len.upload(lens.data(), lens.size() * 4);
    MLA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (auto& P : L) {
      check(*P, fetch(*P));
      ASSERT_FALSE(HasFatalFailure());
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// For compute-sanitizer: the plan call and two layers that read it (the main
// kernel launched right after another main kernel's combine, as programmatic
// dependents), small enough for racecheck.
TEST_P(DecodeGpu, SanitizerSmallPlan) {
  Case c;
  c.lengths = {0, 1, 70, 300, 1000};
  c.h_q = 16;
  c.s_q = 2;
  c.page_size = 64;
  c.seed = 81;
  c = on_kernel(c, GetParam());
  if (!kernel_takes(c)) return;
  auto L = layers_of(c, 2);
  ASSERT_FALSE(HasFatalFailure());
  DeviceBuffer plan_ws(L[0]->d_ws.bytes());
  DecodePlan plan;
  const Status st =
      decode_plan(L[0]->dev_args, {}, Workspace{plan_ws.get(), plan_ws.bytes()}, &plan);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (auto& P : L) {
    P->d_out.poison();
    P->d_lse.poison();
  }
  for (auto& P : L) ASSERT_TRUE(run_planned(*P, plan).ok());
  for (auto& P : L) {
    check(*P, fetch(*P));
    ASSERT_FALSE(HasFatalFailure());
  }
}

// A plan used with other shapes or another mode is refused before any launch.
TEST(DecodeGpuArgs, PlanMadeForOtherShapesIsRefused) {
  Case c;
  c.lengths = {300, 70, 900};
  c.h_q = 64;
  Problem P;
  setup(P, c, /*with_reference=*/false);
  ASSERT_FALSE(HasFatalFailure());
  DecodePlan plan;
  Status st = decode_plan(P.dev_args, {}, Workspace{P.d_ws.get(), P.d_ws.bytes()}, &plan);
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto refused = [&](const Problem& Q, DecodeOptions o, const char* needle) {
    o.plan = &plan;
    const Status s = mla_decode(Q.dev_args, o, Workspace{Q.d_ws.get(), Q.d_ws.bytes()});
    EXPECT_EQ(s.code(), Errc::invalid_value) << s.to_string();
    EXPECT_NE(s.message().find("opts.plan"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  };
  Case other = c;
  other.lengths = {300, 70};  // B 2
  Problem Q;
  setup(Q, other, /*with_reference=*/false);
  ASSERT_FALSE(HasFatalFailure());
  refused(Q, {}, "B 3");
  other = c;
  other.h_q = 128;
  Problem R;
  setup(R, other, /*with_reference=*/false);
  ASSERT_FALSE(HasFatalFailure());
  refused(R, {}, "h_q 64");
  DecodeOptions inv;
  inv.batch_invariant = true;
  refused(P, inv, "batch_invariant");
  DecodePlan sparse = plan;
  sparse.sparse = true;
  DecodeOptions o;
  o.plan = &sparse;
  st = mla_decode(P.dev_args, o, Workspace{P.d_ws.get(), P.d_ws.bytes()});
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  DecodePlan workers = plan;
  workers.num_workers += 1;
  o.plan = &workers;
  st = mla_decode(P.dev_args, o, Workspace{P.d_ws.get(), P.d_ws.bytes()});
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("workers"), std::string::npos) << st.to_string();
  // Making a plan with a plan given is a mistake too.
  o.plan = &plan;
  DecodePlan again;
  st = decode_plan(P.dev_args, o, Workspace{P.d_ws.get(), P.d_ws.bytes()}, &again);
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  cudaDeviceSynchronize();
}

// The one-way math form (wgmma_*_oneway, decode_kernel.cuh) runs the same
// MMAs on the same tiles as the seesaw: S per key is the same 576-term dot
// product (one m64n64 instead of two m64n32 halves), the row maxima, P and
// the rescale factors are the same values, and O[:, 0..256] takes P from
// registers instead of shared memory (the same 16-bit values). Only each
// row's sum l is added in another order (one warpgroup sums all 64 keys of a
// tile, the seesaw adds two 32-key sums at the piece's end), a few fp32 ulps;
// through O / l that moves out by at most one bf16 ulp (relative 2^-8, bound
// 2^-7 to leave room for the f32 output) and lse by ~1e-7 (bound 1e-5).
// Shapes: h 16..128 (one to eight row blocks), s_q 1..4, pages 16 and 64,
// lengths with every tile edge (0, < tile, odd tile counts, a split request),
// both fp8 formats (fp8_ds_mla with a quarter of the keys shifted) and bf16
// (TMA and cp.async tiles).
void expect_close(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.out.size(), b.out.size());
  ASSERT_EQ(a.lse.size(), b.lse.size());
  int bad = 0;
  // Bound per output row (512 values): 2^-7 of the row's largest |out|. The two
  // forms round the same P but rescale and sum a row's P.V in another order,
  // so an output that is a small difference of large terms (round C: 4.2e-6 in
  // a row of ~1e-2) moves relative to its row's scale, not its own.
  constexpr size_t kRow = 512;
  for (size_t r0 = 0; r0 < a.out.size(); r0 += kRow) {
    float scale = 0.f;
    for (size_t i = r0; i < std::min(a.out.size(), r0 + kRow); ++i)
      if (!std::isnan(a.out[i]) && !std::isnan(b.out[i]))
        scale = std::max(scale, std::max(std::fabs(a.out[i]), std::fabs(b.out[i])));
    for (size_t i = r0; i < std::min(a.out.size(), r0 + kRow); ++i) {
      const float x = a.out[i], y = b.out[i];
      const bool same_nan = std::isnan(x) && std::isnan(y);
      if (!same_nan && !(std::fabs(x - y) <= std::ldexp(scale, -7)))
        if (bad++ < 5) ADD_FAILURE() << what << ": out[" << i << "] " << x << " vs " << y;
    }
  }
  for (size_t i = 0; i < a.lse.size(); ++i) {
    const float x = a.lse[i], y = b.lse[i];
    const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
    if (!same && !(std::fabs(x - y) <= 1e-5f + 1e-6f * std::fabs(x)))
      if (bad++ < 10) ADD_FAILURE() << what << ": lse[" << i << "] " << x << " vs " << y;
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(DecodeGpuOneWay, MatchesTheSeesaw) {
  const std::pair<int, int> heads_sq[] = {{16, 1}, {32, 4}, {64, 2}, {128, 1}, {128, 4}};
  const std::pair<Kernel, KvFormat> kernels[] = {{Kernel::wgmma_fp8_oneway, KvFormat::fp8_ds_mla},
                                                 {Kernel::wgmma_fp8_oneway, KvFormat::fp8_e4m3},
                                                 {Kernel::wgmma_tma_oneway, KvFormat::bf16},
                                                 {Kernel::wgmma_cp_async_oneway, KvFormat::bf16}};
  uint64_t seed = 1300;
  for (auto [k, f] : kernels)
    for (auto [h, sq] : heads_sq)
      for (int64_t page : {16, 64}) {
        if (k == Kernel::wgmma_tma_oneway && page != 64) continue;
        Case c;
        c.lengths = {0, 1, 5, 63, 64, 65, 200, 777, 4097, 130};
        c.h_q = h;
        c.s_q = sq;
        c.page_size = page;
        c.format = f;
        c.invariant = seed % 3 == 0;
        c.seed = seed++;
        if (f == KvFormat::fp8_ds_mla && page == 64) mixed_shifts(c);
        c.kernel = cuda::decode::producer_of(k);
        Problem P;
        setup(P, c, /*with_reference=*/false);  // the reference: the DecodeGpu tests of k
        ASSERT_FALSE(HasFatalFailure());
        Status st = run(P);
        ASSERT_TRUE(st.ok()) << st.to_string();
        const Result seesaw = fetch(P);
        P.c.kernel = k;
        st = run(P);
        ASSERT_TRUE(st.ok()) << st.to_string();
        const Result oneway = fetch(P);
        expect_close(seesaw, oneway, "one-way vs seesaw, " + P.c.name());
        ASSERT_FALSE(HasFailure());
        std::printf("  %-70s within 2^-7 / 1e-5\n", P.c.name().c_str());
      }
}

// The fp8 producer's sector-pair loads (wgmma_fp8_oneway_sp, decode_kernel.cuh)
// fill the stages with the same f16 bytes, key factors and flag words as its
// halves layout (wgmma_fp8_oneway), and the math is the same code: out and lse
// must be bit-identical. Both fp8 formats; h 16..128 (one and two row blocks),
// s_q 1..4; pages 1, 16, 64 with and without padded page strides (odd and
// even entries at either half of a sector); lengths with every tile edge and
// split requests; fp8_ds_mla with a quarter of the keys shifted, with every
// key shifted, with the rope deciding the shift; then a page id past the pool
// and a key past the f16 guard (NaN rows) on the same inputs.
TEST(DecodeGpuSectorPairs, BitIdenticalToTheHalves) {
  const std::pair<int, int> heads_sq[] = {{16, 1}, {32, 3}, {64, 2}, {128, 1}, {128, 4}};
  uint64_t seed = 1700;
  auto compare = [&](Problem& P, const char* what) {
    P.c.kernel = Kernel::wgmma_fp8_oneway;
    Status st = run(P);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Result halves = fetch(P);
    P.c.kernel = Kernel::wgmma_fp8_oneway_sp;
    st = run(P);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Result pairs = fetch(P);
    ASSERT_EQ(std::memcmp(halves.out.data(), pairs.out.data(), halves.out.size() * 4), 0)
        << "out differs (" << what << ", " << P.c.name() << ")";
    ASSERT_EQ(std::memcmp(halves.lse.data(), pairs.lse.data(), halves.lse.size() * 4), 0)
        << "lse differs (" << what << ", " << P.c.name() << ")";
    std::printf("  %-70s %s: bit-identical\n", P.c.name().c_str(), what);
  };
  for (KvFormat f : {KvFormat::fp8_ds_mla, KvFormat::fp8_e4m3})
    for (auto [h, sq] : heads_sq)
      for (int64_t page : {1, 16, 64}) {
        Case c;
        c.lengths = {0, 1, 5, 63, 64, 65, 200, 777, 4097, 130};
        c.h_q = h;
        c.s_q = sq;
        c.page_size = page;
        c.page_pad = seed % 2 ? 16 : 0;
        c.format = f;
        c.invariant = seed % 3 == 0;
        c.causal = seed % 4 != 1;
        c.out_f32 = seed % 5 == 2;
        c.seed = seed++;
        if (f == KvFormat::fp8_ds_mla && page == 64) mixed_shifts(c);
        // (q scaled as in Fp8ValuesAtTheF16RangeEdges: scores stay O(1-10))
        if (f == KvFormat::fp8_ds_mla && page == 16 && h == 128) {
          c.values = "scales 2^6..2^10";
          c.min_scale_exp = 6;
          c.max_scale_exp = 10;
          c.shape_values = [](Rng&, PagedCache&, HostTensor& q) { scale_q(q, 0, kDqk, -12); };
        }
        if (f == KvFormat::fp8_ds_mla && page == 1 && h == 64) {
          c.values = "rope 2^20";
          c.shape_values = [](Rng&, PagedCache& cache, HostTensor& q) {
            each_entry(cache, [](uint8_t* e, int64_t, int64_t) { scale_rope(e, 20); });
            scale_q(q, kDc, kDqk, -18);
          };
        }
        Problem P;
        setup(P, c, /*with_reference=*/false);  // the reference: the DecodeGpu tests of both
        ASSERT_FALSE(HasFatalFailure());
        compare(P, "random");
        if (HasFatalFailure()) return;
      }
  // Bad page ids and a key past the f16 guard: NaN rows, the same bits.
  for (KvFormat f : {KvFormat::fp8_ds_mla, KvFormat::fp8_e4m3}) {
    Case c{.lengths = {300, 300, 300, 300}, .h_q = 128, .format = f, .seed = seed++};
    Problem P;
    setup(P, c, /*with_reference=*/false);
    ASSERT_FALSE(HasFatalFailure());
    std::vector<int32_t> bt = P.cache.block_table;
    bt[1 * P.cache.max_pages + 2] = int32_t(P.cache.num_pages) + 5;
    bt[3 * P.cache.max_pages + 0] = -7;
    P.d_bt.upload(bt.data(), bt.size() * 4);
    if (f == KvFormat::fp8_ds_mla) {
      set_scales(P.cache.entry_mut(2, 150), std::ldexp(1.f, 30));
      P.d_kv.upload(P.cache.storage.data(), P.cache.storage.size() * 8);
    }
    compare(P, "bad pages, key past the guard");
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace mla::testing
