// GPU tests of the lightning indexer (src/cuda/indexer) against the CPU
// reference: key append and query quantisation (bytes identical), logits of
// the decode form (paged cache, s_q 1-13, invalid pages, runs of pages that
// wrap the kernel's ring) and of the prefill form (flat keys, per-query
// ranges: random, causal, blocks of tokens without keys), token and key
// counts off the kernels' blocks and tiles. Every indexer::Kernel value runs
// on its form of the keys and is refused with a clear error on the other.
// Fresh random inputs, outputs poisoned before every run, repeated calls
// bit-identical.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/indexer/indexer_cuda.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/indexer.hpp"

namespace mla {
namespace {

using cuda::indexer::Kernel;
using cuda::indexer::kernel_name;
using cuda::indexer::LogitsOptions;
using testing::DeviceBuffer;
using testing::HostTensor;
using testing::random_tensor;
using testing::Rng;

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  const size_t n = size_t(a.numel()) * dtype_size(a.dtype);
  return std::memcmp(a.storage.data(), b.storage.data(), n) == 0;
}

// A random indexer cache: `pages` pages of 8448 B with poisoned (0xff) bytes,
// and random keys appended through the CPU reference.
HostTensor random_indexer_cache(Rng& rng, int64_t pages) {
  HostTensor cache(DType::u8, {pages, IndexerCacheLayout::kPageBytes});
  cache.poison();
  const int64_t T = pages * 64;
  HostTensor keys = random_tensor(rng, DType::f32, {T, 128}, -3, 3);
  HostTensor slots(DType::i64, {T});
  for (int64_t t = 0; t < T; ++t) slots.set(t, double(t));
  AppendIndexerKeysArgs a{keys.view(), slots.view(), IndexerCacheView{cache.view()}};
  Status st = append_indexer_keys(a);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return cache;
}

TEST(IndexerGpu, AppendMatchesReferenceBytes) {
  Rng rng(101);
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t pages = 7, T = 300;
    HostTensor keys = random_tensor(rng, dt, {T, 128}, -5, 5);
    for (int64_t i = 0; i < 128; ++i)
      keys.set(5 * 128 + i, 0.0);  // an all-zero key: the 1e-4 floor
    for (int64_t i = 0; i < 128; ++i)
      keys.set(6 * 128 + i, keys.get(6 * 128 + i) * 1e6);  // clamps nothing, big scale
    HostTensor slots(DType::i64, {T});
    std::vector<int64_t> perm(pages * 64);
    std::iota(perm.begin(), perm.end(), 0);
    rng.shuffle(perm);
    for (int64_t t = 0; t < T; ++t) slots.set(t, t % 9 == 4 ? -1.0 : double(perm[t]));
    HostTensor ref(DType::u8, {pages, IndexerCacheLayout::kPageBytes});
    ref.poison();
    HostTensor got = ref;
    ASSERT_MLA_OK(append_indexer_keys({keys.view(), slots.view(), IndexerCacheView{ref.view()}}));
    DeviceBuffer dk(keys), ds(slots), dc(got);
    ASSERT_MLA_OK(cuda::append_indexer_keys(
        {dk.view(keys), ds.view(slots), IndexerCacheView{dc.view(got)}}, {}));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dc.to_host(got);
    EXPECT_TRUE(same_bytes(ref, got)) << "dtype " << dtype_name(dt);
  }
}

TEST(IndexerGpu, QueryQuantisationMatchesReference) {
  Rng rng(102);
  for (DType dt : {DType::f32, DType::bf16}) {
    HostTensor q = random_tensor(rng, dt, {3, 2, 64, 128}, -4, 4);
    HostTensor w = random_tensor(rng, DType::f32, {3, 2, 64}, -1, 1);
    HostTensor q8r(DType::e4m3, {3, 2, 64, 128}), wfr(DType::f32, {3, 2, 64});
    q8r.poison(), wfr.poison();
    HostTensor q8g = q8r, wfg = wfr;
    ASSERT_MLA_OK(quantize_indexer_query({q.view(), w.view(), q8r.view(), wfr.view()}));
    DeviceBuffer dq(q), dw(w), dq8(q8g), dwf(wfg);
    ASSERT_MLA_OK(
        cuda::quantize_indexer_query({dq.view(q), dw.view(w), dq8.view(q8g), dwf.view(wfg)}, {}));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dq8.to_host(q8g), dwf.to_host(wfg);
    EXPECT_TRUE(same_bytes(q8r, q8g));
    EXPECT_TRUE(same_bytes(wfr, wfg));
  }
}

// Both logits kernels run on FP8 wgmma, whose accumulator keeps about 14
// mantissa bits inside each k32 step (DeepSeek-V3 report, section 3.3.2: the
// reason DeepGEMM promotes to fp32 every 128 of K; our K is 128, so this is the
// whole dot). Its error therefore scales with the sum of |terms|, not with the
// result: we bound |got - ref| by 2^-10 times the logit computed on |q|, |w|,
// |k| (every product positive: the magnitudes the accumulator saw), ten times
// the worst error seen on random data (~1e-4 of that sum).
void expect_logits_close_abs(const HostTensor& ref, const HostTensor& absref, const HostTensor& got,
                             const char* what) {
  ASSERT_EQ(ref.numel(), got.numel());
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.get(i), g = got.get(i);
    const bool ok = std::isinf(r)
                        ? (r == g)
                        : (std::isfinite(g) && std::fabs(g - r) <= 0x1p-10 * absref.get(i) + 1e-30);
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << r;
  }
  EXPECT_EQ(bad, 0) << what;
}

// |x| of every e4m3 code and fp32 scale / weight (the sign bit cleared).
HostTensor abs_copy(const HostTensor& t) {
  HostTensor a = t;
  if (t.dtype == DType::e4m3) {
    auto* b = static_cast<uint8_t*>(a.data());
    for (int64_t i = 0; i < a.numel(); ++i) b[i] &= 0x7f;
  } else {
    for (int64_t i = 0; i < a.numel(); ++i) a.set(i, std::fabs(a.get(i)));
  }
  return a;
}
HostTensor abs_indexer_cache(const HostTensor& cache) {
  HostTensor a = cache;
  auto* b = static_cast<uint8_t*>(a.data());
  for (int64_t pg = 0; pg < cache.shape[0]; ++pg) {
    uint8_t* page = b + pg * IndexerCacheLayout::kPageBytes;
    for (int i = 0; i < 64 * 128; ++i) page[i] &= 0x7f;
    for (int i = 0; i < 64; ++i)
      page[64 * 128 + 4 * i + 3] &= 0x7f;  // fp32 sign bit (little-endian)
  }
  return a;
}

// The fp64 reference logits of a decode problem, and the same computed on
// |q|, |w|, |k| (the magnitudes the accumulator sees: the error bound's scale).
void decode_references(const HostTensor& q8, const HostTensor& w, const HostTensor& cache,
                       const HostTensor& bt, const HostTensor& lens, int max_len, HostTensor* ref,
                       HostTensor* absref) {
  *ref = HostTensor(DType::f32, {q8.shape[0], q8.shape[1], max_len});
  ref->poison();
  *absref = *ref;
  ASSERT_MLA_OK(indexer_logits_decode(
      {q8.view(), w.view(), IndexerCacheView{cache.view()}, bt.view(), lens.view(), ref->view()}));
  const HostTensor aq = abs_copy(q8), aw = abs_copy(w), ac = abs_indexer_cache(cache);
  ASSERT_MLA_OK(indexer_logits_decode(
      {aq.view(), aw.view(), IndexerCacheView{ac.view()}, bt.view(), lens.view(), absref->view()}));
}

// The paged kernel against one fp64 reference per s_q, in runs of each of
// `ppcs` pages per CTA (LogitsOptions::pages_per_cta; 0 = sized from the
// problem): the sized runs are 4 pages here, fewer than the ring holds, so
// only the small runs make a CTA refill its stages and wait on later phases of
// its barriers (25: a request of 1500 keys in one CTA). The flat kernel is
// refused. A second call is bit-identical.
void run_indexer_decode_cases(Rng& rng, std::initializer_list<int> s_qs,
                              std::initializer_list<int> ppcs) {
  for (int s_q : s_qs) {
    const std::vector<int> lens = {0, 1, 63, 64, 65, 700, s_q == 4 ? 2 : 1500};
    const int B = int(lens.size());
    const int max_len = 1600, pages_per = (max_len + 63) / 64;
    const int64_t pool = int64_t(B) * pages_per + 2;
    HostTensor cache = random_indexer_cache(rng, pool);
    HostTensor bt(DType::i32, {B, pages_per});
    std::vector<int64_t> ids(pool);
    std::iota(ids.begin(), ids.end(), 0);
    rng.shuffle(ids);
    for (int64_t i = 0; i < B * pages_per; ++i) bt.set(i, double(ids[i]));
    HostTensor lens_t(DType::i32, {B});
    for (int b = 0; b < B; ++b) lens_t.set(b, lens[b]);
    HostTensor q8 = random_tensor(rng, DType::e4m3, {B, s_q, 64, 128}, -448, 448);
    HostTensor w = random_tensor(rng, DType::f32, {B, s_q, 64}, -1, 1);
    HostTensor ref, absref;
    decode_references(q8, w, cache, bt, lens_t, max_len, &ref, &absref);
    DeviceBuffer dq(q8), dw(w), dc(cache), dbt(bt), dl(lens_t);
    for (Kernel kernel : cuda::indexer::kAllKernels)
      for (int ppc : ppcs) {
        const std::string what = std::string("decode ") + kernel_name(kernel) + " s_q " +
                                 std::to_string(s_q) + " pages/CTA " + std::to_string(ppc);
        LogitsOptions opt;
        opt.kernel = kernel;
        opt.pages_per_cta = ppc;
        HostTensor got = ref, again = ref;
        DeviceBuffer dout(got), dout2(again);
        dout.poison(), dout2.poison();
        const IndexerLogitsDecodeArgs args{
            dq.view(q8),  dw.view(w),      IndexerCacheView{dc.view(cache)},
            dbt.view(bt), dl.view(lens_t), dout.view(got)};
        if (!cuda::indexer::serves_paged(kernel)) {
          const Status st = cuda::indexer_logits_decode(args, {}, opt);
          EXPECT_EQ(st.code(), Errc::unsupported) << what << ": " << st.to_string();
          EXPECT_NE(st.message().find(kernel_name(kernel)), std::string::npos) << st.message();
          continue;
        }
        ASSERT_MLA_OK(cuda::indexer_logits_decode(args, {}, opt));
        IndexerLogitsDecodeArgs args2 = args;
        args2.logits = dout2.view(again);
        ASSERT_MLA_OK(cuda::indexer_logits_decode(args2, {}, opt));
        MLA_CUDA_CHECK(cudaDeviceSynchronize());
        dout.to_host(got);
        dout2.to_host(again);
        expect_logits_close_abs(ref, absref, got, what.c_str());
        EXPECT_EQ(std::memcmp(got.data(), again.data(), size_t(got.numel()) * 4), 0)
            << what << ": a second call differs";
      }
  }
}

// s_q 1-4 (decode), then 7 and 13: chunks of 4 launched one after another,
// whose causal limits count the request's later tokens (a prefill chunk).
TEST(IndexerGpu, LogitsDecodeMatchesReference) {
  Rng rng(103);
  run_indexer_decode_cases(rng, {1, 2, 3, 4, 7, 13}, {0, 2, 25});
}

// A few cases (few launches: the one compute-sanitizer runs).
TEST(IndexerGpu, LogitsDecodeSmall) {
  Rng rng(104);
  run_indexer_decode_cases(rng, {1, 7}, {0, 25});
}

// Block-table entries outside the cache (-1, past the pool) are never read:
// the kernel gives logit 0 for their keys (zero codes and scale) and the
// reference's values elsewhere (the reference sees valid ids in their place).
// In runs of 2 pages too (a stage is refilled with such a page).
TEST(IndexerGpu, LogitsDecodeSkipsInvalidPages) {
  Rng rng(105);
  const int B = 2, pages_per = 5, max_len = pages_per * 64;
  const std::vector<int> lens = {300, 200};
  const int64_t pool = B * pages_per;
  HostTensor cache = random_indexer_cache(rng, pool);
  HostTensor bt(DType::i32, {B, pages_per}), bt_bad(DType::i32, {B, pages_per});
  for (int64_t i = 0; i < B * pages_per; ++i) bt.set(i, double(i)), bt_bad.set(i, double(i));
  bt_bad.set(1, -1.0);                        // request 0, keys 64-127
  bt_bad.set(3, double(pool + 1000));         // request 0, keys 192-255
  const std::set<int64_t> bad_cols = {1, 3};  // pages of request 0
  HostTensor lens_t(DType::i32, {B});
  for (int b = 0; b < B; ++b) lens_t.set(b, lens[b]);
  HostTensor q8 = random_tensor(rng, DType::e4m3, {B, 1, 64, 128}, -448, 448);
  HostTensor w = random_tensor(rng, DType::f32, {B, 1, 64}, -1, 1);
  HostTensor ref, absref;
  decode_references(q8, w, cache, bt, lens_t, max_len, &ref, &absref);
  DeviceBuffer dq(q8), dw(w), dc(cache), dbt(bt_bad), dl(lens_t);
  for (int ppc : {0, 2}) {
    const std::string what = "invalid pages, pages/CTA " + std::to_string(ppc);
    LogitsOptions opt;
    opt.pages_per_cta = ppc;
    HostTensor got = ref;
    DeviceBuffer dout(got);
    dout.poison();
    ASSERT_MLA_OK(
        cuda::indexer_logits_decode({dq.view(q8), dw.view(w), IndexerCacheView{dc.view(cache)},
                                     dbt.view(bt_bad), dl.view(lens_t), dout.view(got)},
                                    {}, opt));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dout.to_host(got);
    for (int64_t col = 0; col < max_len; ++col)
      if (bad_cols.count(col / 64)) {
        EXPECT_EQ(got.get(col), 0.0) << what << ": column " << col;
        got.set(col, ref.get(col));  // compared above; the rest against the reference
      }
    expect_logits_close_abs(ref, absref, got, what.c_str());
  }
}

// A cache without pages (accepted by the API): every block-table entry is
// outside it, so each key inside a request's length gets logit 0 (zero codes
// and scale, as for any page outside the cache) and the rest -inf.
TEST(IndexerGpu, LogitsDecodeEmptyCache) {
  Rng rng(106);
  const int B = 2, s_q = 2, pages_per = 3, max_len = pages_per * 64;
  const std::vector<int> lens = {130, 0};
  HostTensor cache(DType::u8, {0, IndexerCacheLayout::kPageBytes});
  HostTensor bt(DType::i32, {B, pages_per});
  for (int64_t i = 0; i < bt.numel(); ++i) bt.set(i, double(i));
  HostTensor lens_t(DType::i32, {B});
  for (int b = 0; b < B; ++b) lens_t.set(b, lens[b]);
  HostTensor q8 = random_tensor(rng, DType::e4m3, {B, s_q, 64, 128}, -448, 448);
  HostTensor w = random_tensor(rng, DType::f32, {B, s_q, 64}, -1, 1);
  HostTensor got(DType::f32, {B, s_q, max_len});
  DeviceBuffer dq(q8), dw(w), dbt(bt), dl(lens_t), dout(got);
  dout.poison();
  TensorView cv =
      TensorView::make(nullptr, DType::u8, {0, IndexerCacheLayout::kPageBytes}, dq.view(q8).device);
  ASSERT_MLA_OK(cuda::indexer_logits_decode({dq.view(q8), dw.view(w), IndexerCacheView{cv},
                                             dbt.view(bt), dl.view(lens_t), dout.view(got)},
                                            {}));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dout.to_host(got);
  int64_t bad = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < s_q; ++i)
      for (int col = 0; col < max_len; ++col) {
        const int64_t seen = lens[b] - (s_q - 1 - i);  // query i sees keys [0, seen)
        const double want = col < seen ? 0.0 : -INFINITY;
        const double g = got.get((int64_t(b) * s_q + i) * max_len + col);
        if (g != want && bad++ < 5)
          ADD_FAILURE() << "b " << b << " i " << i << " col " << col << " got " << g;
      }
  EXPECT_EQ(bad, 0);
}

// A prefill problem: T tokens' q8 [T, 64, 128] and weights over N flat keys
// with power-of-two scales, and each token's key range [kst, ken).
struct PrefillCase {
  HostTensor q8, w, k8, ks, kst, ken;
};
// How the ranges are drawn: random (a seventh of them empty), causal (the last
// T tokens of an N-token prompt: token t sees [0, N - T + t + 1)), or causal
// with the tokens of blocks [8, 16) and [24, 32) seeing nothing (a CTA of the
// wgmma kernel without a key) and token 3 seeing one key.
enum class Ranges { random, causal, causal_gaps };
PrefillCase random_prefill_case(Rng& rng, int T, int N, Ranges kind) {
  PrefillCase c;
  c.q8 = random_tensor(rng, DType::e4m3, {T, 64, 128}, -448, 448);
  c.w = random_tensor(rng, DType::f32, {T, 64}, -1, 1);
  c.k8 = random_tensor(rng, DType::e4m3, {N, 128}, -448, 448);
  c.ks = HostTensor(DType::f32, {N});
  for (int64_t i = 0; i < N; ++i) c.ks.set(i, std::ldexp(1.0, int(rng.randint(-12, -4))));
  c.kst = HostTensor(DType::i32, {T}), c.ken = HostTensor(DType::i32, {T});
  for (int t = 0; t < T; ++t) {
    int a = 0, b = N - T + t + 1;
    if (kind == Ranges::random) {
      a = int(rng.randint(0, N)), b = int(rng.randint(0, N));
      if (t % 7 == 3) b = a;  // empty range
    } else if (kind == Ranges::causal_gaps) {
      if ((t / 8) % 2 == 1) a = b = int(rng.randint(0, N));  // empty, anywhere
      if (t == 3) a = b - 1;
    }
    c.kst.set(t, std::min(a, b)), c.ken.set(t, std::max(a, b));
  }
  return c;
}

// The fp64 reference logits of a prefill case, and the same computed on |q|,
// |w|, |k|, |scale| (the error bound's scale for the wgmma kernel).
void prefill_references(const PrefillCase& c, HostTensor* ref, HostTensor* absref) {
  const int64_t T = c.q8.shape[0], N = c.k8.shape[0];
  *ref = HostTensor(DType::f32, {T, N});
  ref->poison();
  *absref = *ref;
  ASSERT_MLA_OK(indexer_logits_prefill({c.q8.view(), c.w.view(), c.k8.view(), c.ks.view(),
                                        c.kst.view(), c.ken.view(), ref->view()}));
  const HostTensor aq = abs_copy(c.q8), aw = abs_copy(c.w), ak = abs_copy(c.k8),
                   aks = abs_copy(c.ks);
  ASSERT_MLA_OK(indexer_logits_prefill(
      {aq.view(), aw.view(), ak.view(), aks.view(), c.kst.view(), c.ken.view(), absref->view()}));
}

// Every kernel on a prefill case (the paged one refused), in chunks of each of
// `keys_per_cta` keys for flat_tma_wgmma (0 = sized from the problem), outputs
// poisoned; `repeats` calls (into a second poisoned buffer) bit-identical to
// the first, made with the automatic choice where the chunks are sized (so
// they also show that it picks flat_tma_wgmma). Error bound: fp8 wgmma keeps
// ~14 accumulator bits inside its 4 k32 steps, as in the decode kernel
// (expect_logits_close_abs). (flat_mma_sync, the mma.sync kernel it replaced,
// kept fp32 sums and was held to 2e-5 of the largest logit; the two differed
// by ~2.5e-4 of it on the 4096 x 32K bench inputs, with identical masks.)
void run_indexer_prefill_case(const PrefillCase& c, std::initializer_list<int64_t> keys_per_cta,
                              int repeats, const std::string& name) {
  HostTensor ref, absref;
  prefill_references(c, &ref, &absref);
  DeviceBuffer dq(c.q8), dw(c.w), dk(c.k8), dks(c.ks), dst(c.kst), den(c.ken);
  for (Kernel kernel : cuda::indexer::kAllKernels)
    for (int64_t kpc : keys_per_cta) {
      if (kernel == Kernel::paged_tma_wgmma && kpc != *keys_per_cta.begin()) continue;
      const std::string what =
          "prefill " + name + " " + kernel_name(kernel) + " keys/CTA " + std::to_string(kpc);
      LogitsOptions opt;
      opt.kernel = kernel;
      opt.keys_per_cta = kpc;
      HostTensor got = ref, again = ref;
      DeviceBuffer dout(got), dout2(again);
      dout.poison();
      const IndexerLogitsPrefillArgs args{dq.view(c.q8),  dw.view(c.w),    dk.view(c.k8),
                                          dks.view(c.ks), dst.view(c.kst), den.view(c.ken),
                                          dout.view(got)};
      const Status st = cuda::indexer_logits_prefill(args, {}, opt);
      if (cuda::indexer::serves_paged(kernel)) {
        EXPECT_EQ(st.code(), Errc::unsupported) << what << ": " << st.to_string();
        EXPECT_NE(st.message().find(kernel_name(kernel)), std::string::npos) << st.message();
        continue;
      }
      ASSERT_MLA_OK(st);
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(got);
      expect_logits_close_abs(ref, absref, got, what.c_str());
      IndexerLogitsPrefillArgs args2 = args;
      args2.logits = dout2.view(again);
      LogitsOptions again_opt = opt;
      if (kpc == 0) again_opt.kernel.reset();  // the automatic choice
      for (int r = 0; r < repeats; ++r) {
        dout2.poison();
        ASSERT_MLA_OK(cuda::indexer_logits_prefill(args2, {}, again_opt));
        MLA_CUDA_CHECK(cudaDeviceSynchronize());
        dout2.to_host(again);
        ASSERT_EQ(std::memcmp(got.data(), again.data(), size_t(got.numel()) * 4), 0)
            << what << ": call " << r + 2 << " differs from the first";
      }
    }
}

TEST(IndexerGpu, LogitsPrefillMatchesReference) {
  Rng rng(104);
  // Random ranges; token counts not multiples of 8 (the wgmma kernel's block)
  // and key counts not multiples of 64 (its tile); chunks of 1-3 tiles and
  // sized ones; the ring of 8 tiles wraps at 1500 keys in one chunk.
  run_indexer_prefill_case(random_prefill_case(rng, 37, 333, Ranges::random), {0, 64, 128}, 1,
                           "random 37x333");
  run_indexer_prefill_case(random_prefill_case(rng, 45, 1500, Ranges::random), {0, 192}, 1,
                           "random 45x1500");
  // Causal (the bench's shape, small): ranges ending inside a tile and a chunk.
  run_indexer_prefill_case(random_prefill_case(rng, 45, 1500, Ranges::causal), {0, 320, 64}, 1,
                           "causal 45x1500");
  run_indexer_prefill_case(random_prefill_case(rng, 200, 200, Ranges::causal), {0, 128}, 1,
                           "causal 200x200");
  run_indexer_prefill_case(random_prefill_case(rng, 40, 777, Ranges::causal_gaps), {0, 256}, 1,
                           "causal with empty blocks 40x777");
  // One token, one key.
  run_indexer_prefill_case(random_prefill_case(rng, 1, 1, Ranges::causal), {0}, 1, "1x1");
}

// 100 calls bit-identical (the wgmma kernel's turns and ring must not change
// the result's bits: each sum has one fixed order).
TEST(IndexerGpu, LogitsPrefillRepeatable) {
  Rng rng(107);
  run_indexer_prefill_case(random_prefill_case(rng, 67, 2100, Ranges::causal), {0, 640}, 99,
                           "causal 67x2100");
}

// A few cases (few launches: the one compute-sanitizer runs).
TEST(IndexerGpu, LogitsPrefillSmall) {
  Rng rng(108);
  run_indexer_prefill_case(random_prefill_case(rng, 13, 700, Ranges::causal_gaps), {128}, 1,
                           "small 13x700");
}

}  // namespace
}  // namespace mla
