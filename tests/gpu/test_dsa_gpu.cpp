// GPU tests of DeepSeek Sparse Attention (src/cuda/dsa) against the CPU
// reference: indexer quantisation (bytes identical), indexer logits (decode
// and prefill), top-k (identical lists, any cluster split), sparse attention
// (bf16 and fp8 caches, -1 entries, all-invalid rows, topk_length, splits),
// sparse == dense when the list holds every key, and the recall of the FP8
// indexer's top-k against an exact fp64 indexer. Fresh random inputs, outputs
// poisoned before every run.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/decode/decode_sparse.hpp"
#include "cuda/dsa/indexer_cuda.hpp"
#include "cuda/dsa/sparse_launch.hpp"
#include "cuda/dsa/topk_cuda.hpp"
#include "cuda/dsa/topk_launch.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/decode.hpp"
#include "mla/indexer.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"
#include "reference/decode_ref.hpp"
#include "reference/fp8_quant.hpp"

namespace mla {
namespace {

using testing::HostTensor;
using testing::random_tensor;
using testing::Rng;
namespace dsa = mla::cuda::dsa;

using testing::DeviceBuffer;

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  const size_t n = size_t(a.numel()) * dtype_size(a.dtype);
  return std::memcmp(a.storage.data(), b.storage.data(), n) == 0;
}

// ---------------------------------------------------------------- indexer ----

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

TEST(DsaGpu, IndexerAppendMatchesReferenceBytes) {
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

TEST(DsaGpu, IndexerQueryQuantisationMatchesReference) {
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

// Logits agree with the fp64 reference to fp32 accumulation error: each of the
// 64 heads' dots is exact in the tensor core up to its fp32 accumulation
// (about 2^-22 relative per add), so we bound |got - ref| by 1e-5 times the
// sum of |w| * |dot| terms, estimated from the row scale below.
void expect_logits_close(const HostTensor& ref, const HostTensor& got, const char* what) {
  ASSERT_EQ(ref.numel(), got.numel());
  double scale = 1e-30;
  for (int64_t i = 0; i < ref.numel(); ++i)
    if (std::isfinite(ref.get(i))) scale = std::max(scale, std::fabs(ref.get(i)));
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.get(i), g = got.get(i);
    const bool ok =
        std::isinf(r) ? (r == g) : (std::isfinite(g) && std::fabs(g - r) <= 2e-5 * scale);
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << r;
  }
  EXPECT_EQ(bad, 0) << what;
}

// The decode kernel runs on FP8 wgmma, whose accumulator keeps about 14
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

// The decode kernels named in `kernels` (MLA_INDEXER_KERNEL: v1, and v2, the
// default) against one fp64 reference per s_q, each also in runs of the pages
// per CTA in `ppcs` (MLA_INDEXER_PAGES_PER_CTA; "" = the kernels' own): the
// default runs are 4 pages here, fewer than the kernels' rings hold, so only
// the knob makes a CTA refill its stages and wait on later phases of its
// barriers (25: a request of 1500 keys in one CTA). A second call is
// bit-identical.
void run_indexer_decode_cases(Rng& rng, std::initializer_list<int> s_qs,
                              std::initializer_list<const char*> kernels,
                              std::initializer_list<const char*> ppcs) {
  struct EnvReset {  // an ASSERT leaving early must not leave a kernel forced for later tests
    ~EnvReset() { unsetenv("MLA_INDEXER_KERNEL"), unsetenv("MLA_INDEXER_PAGES_PER_CTA"); }
  } env_reset;
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
    HostTensor ref(DType::f32, {B, s_q, max_len});
    ref.poison();
    ASSERT_MLA_OK(indexer_logits_decode({q8.view(), w.view(), IndexerCacheView{cache.view()},
                                         bt.view(), lens_t.view(), ref.view()}));
    HostTensor absref = ref;
    const HostTensor aq = abs_copy(q8), aw = abs_copy(w), ac = abs_indexer_cache(cache);
    ASSERT_MLA_OK(indexer_logits_decode({aq.view(), aw.view(), IndexerCacheView{ac.view()},
                                         bt.view(), lens_t.view(), absref.view()}));
    DeviceBuffer dq(q8), dw(w), dc(cache), dbt(bt), dl(lens_t);
    for (const char* kernel : kernels)
      for (const char* ppc : ppcs) {
        const std::string what = std::string("decode ") + kernel + " s_q " + std::to_string(s_q) +
                                 " pages/CTA '" + ppc + "'";
        ASSERT_EQ(setenv("MLA_INDEXER_KERNEL", kernel, 1), 0);
        if (*ppc)
          ASSERT_EQ(setenv("MLA_INDEXER_PAGES_PER_CTA", ppc, 1), 0);
        else
          unsetenv("MLA_INDEXER_PAGES_PER_CTA");
        HostTensor got = ref, again = ref;
        DeviceBuffer dout(got), dout2(again);
        dout.poison(), dout2.poison();
        for (DeviceBuffer* d : {&dout, &dout2})
          ASSERT_MLA_OK(cuda::indexer_logits_decode(
              {dq.view(q8), dw.view(w), IndexerCacheView{dc.view(cache)}, dbt.view(bt),
               dl.view(lens_t), d->view(got)},
              {}));
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
TEST(DsaGpu, IndexerLogitsDecodeMatchesReference) {
  Rng rng(103);
  run_indexer_decode_cases(rng, {1, 2, 3, 4, 7, 13}, {"v1", "v2"}, {"", "2", "25"});
}

// v2 alone on a few cases (few launches: the one compute-sanitizer runs).
TEST(DsaGpu, IndexerLogitsDecodeV2Small) {
  Rng rng(104);
  run_indexer_decode_cases(rng, {1, 7}, {"v2"}, {"", "25"});
}

// Block-table entries outside the cache (-1, past the pool) are never read:
// both kernels give logit 0 for their keys (zero codes and scale) and the
// reference's values elsewhere (the reference sees valid ids in their place).
// In runs of 2 pages too (v2 refills a stage with such a page).
TEST(DsaGpu, IndexerLogitsDecodeSkipsInvalidPages) {
  struct EnvReset {
    ~EnvReset() { unsetenv("MLA_INDEXER_KERNEL"), unsetenv("MLA_INDEXER_PAGES_PER_CTA"); }
  } env_reset;
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
  HostTensor ref(DType::f32, {B, 1, max_len});
  ref.poison();
  ASSERT_MLA_OK(indexer_logits_decode(
      {q8.view(), w.view(), IndexerCacheView{cache.view()}, bt.view(), lens_t.view(), ref.view()}));
  HostTensor absref = ref;
  const HostTensor aq = abs_copy(q8), aw = abs_copy(w), ac = abs_indexer_cache(cache);
  ASSERT_MLA_OK(indexer_logits_decode({aq.view(), aw.view(), IndexerCacheView{ac.view()}, bt.view(),
                                       lens_t.view(), absref.view()}));
  DeviceBuffer dq(q8), dw(w), dc(cache), dbt(bt_bad), dl(lens_t);
  for (const char* kernel : {"v1", "v2"})
    for (const char* ppc : {"", "2"}) {
      const std::string what = std::string("invalid pages ") + kernel + " pages/CTA '" + ppc + "'";
      ASSERT_EQ(setenv("MLA_INDEXER_KERNEL", kernel, 1), 0);
      if (*ppc)
        ASSERT_EQ(setenv("MLA_INDEXER_PAGES_PER_CTA", ppc, 1), 0);
      else
        unsetenv("MLA_INDEXER_PAGES_PER_CTA");
      HostTensor got = ref;
      DeviceBuffer dout(got);
      dout.poison();
      ASSERT_MLA_OK(
          cuda::indexer_logits_decode({dq.view(q8), dw.view(w), IndexerCacheView{dc.view(cache)},
                                       dbt.view(bt_bad), dl.view(lens_t), dout.view(got)},
                                      {}));
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

TEST(DsaGpu, IndexerLogitsPrefillMatchesReference) {
  Rng rng(104);
  const int T = 37, N = 333;
  HostTensor q8 = random_tensor(rng, DType::e4m3, {T, 64, 128}, -448, 448);
  HostTensor w = random_tensor(rng, DType::f32, {T, 64}, -1, 1);
  HostTensor k8 = random_tensor(rng, DType::e4m3, {N, 128}, -448, 448);
  HostTensor ks = random_tensor(rng, DType::f32, {N}, 0.5, 2);
  for (int64_t i = 0; i < N; ++i) ks.set(i, std::ldexp(1.0, int(rng.randint(-12, -4))));
  HostTensor kst(DType::i32, {T}), ken(DType::i32, {T});
  for (int t = 0; t < T; ++t) {
    int a = int(rng.randint(0, N)), b = int(rng.randint(0, N));
    if (t % 7 == 3) b = a;  // empty range
    kst.set(t, std::min(a, b)), ken.set(t, std::max(a, b));
  }
  HostTensor ref(DType::f32, {T, N});
  ref.poison();
  HostTensor got = ref;
  ASSERT_MLA_OK(indexer_logits_prefill(
      {q8.view(), w.view(), k8.view(), ks.view(), kst.view(), ken.view(), ref.view()}));
  DeviceBuffer dq(q8), dw(w), dk(k8), dks(ks), dst(kst), den(ken), dout(got);
  dout.poison();
  ASSERT_MLA_OK(cuda::indexer_logits_prefill({dq.view(q8), dw.view(w), dk.view(k8), dks.view(ks),
                                              dst.view(kst), den.view(ken), dout.view(got)},
                                             {}));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dout.to_host(got);
  expect_logits_close(ref, got, "prefill");
}

// ------------------------------------------------------------------ top-k ----

// The top-k versions a test runs: `all`, or only MLA_TEST_TOPK_ALGO when set
// (compute-sanitizer runs force one version at a time; a test left with none
// fails rather than passing empty).
std::vector<int> topk_algos(std::initializer_list<int> all) {
  const char* env = std::getenv("MLA_TEST_TOPK_ALGO");
  if (env == nullptr) return std::vector<int>(all);
  std::vector<int> v;
  for (int a : all)
    if (a == std::atoi(env)) v.push_back(a);
  EXPECT_FALSE(v.empty()) << "MLA_TEST_TOPK_ALGO=" << env << " is not among this test's versions";
  return v;
}

// ties: 21 levels (many equal keys); heavy_ties: 3 levels (more ties than
// the sort buffer's slack: the ordered fallback). algo: TopkParams::algo.
void run_topk_case(Rng& rng, int R, int N, int k, int cluster, bool ties, bool translate,
                   bool heavy_ties = false, int algo = 2) {
  HostTensor logits = random_tensor(rng, DType::f32, {R, N}, -10, 10);
  for (int64_t i = 0; i < logits.numel(); ++i) {
    if (ties) logits.set(i, std::round(logits.get(i)));
    if (heavy_ties) logits.set(i, std::round(logits.get(i) / 8));
    const int64_t m = rng.randint(0, 99);
    if (m == 0) logits.set(i, -INFINITY);
    if (m == 1) logits.set(i, NAN);
    if (m == 2) logits.set(i, -0.0);
    if (m == 3) logits.set(i, 0.0);
  }
  HostTensor lens(DType::i32, {R});
  for (int r = 0; r < R; ++r) {
    const int choice = r % 5;
    lens.set(r, choice == 0   ? 0
                : choice == 1 ? std::min(N, k / 2)
                : choice == 2 ? std::min(N, k)
                : choice == 3 ? N
                              : int(rng.randint(0, N)));
  }
  const int page = 16, rpr = R % 2 == 0 ? 2 : 1, B = R / rpr, maxp = (N + page - 1) / page;
  HostTensor bt(DType::i32, {B, maxp});
  for (int64_t i = 0; i < bt.numel(); ++i) bt.set(i, double(rng.randint(0, 5000)));
  HostTensor ref(DType::i32, {R, k});
  ref.poison();
  HostTensor got = ref;
  TopkArgs a;
  a.logits = logits.view(), a.lengths = lens.view(), a.k = k, a.indices = ref.view();
  if (translate) a.block_table = bt.view(), a.page_size = page, a.rows_per_request = rpr;
  ASSERT_MLA_OK(topk_indices(a));
  DeviceBuffer dl(logits), dlen(lens), dbt(bt), dout(got);
  dout.poison();
  dsa::TopkParams p;
  p.logits = static_cast<const float*>(dl.get()), p.logits_stride = N, p.num_rows = R, p.width = N,
  p.k = k;
  p.lengths = static_cast<const int32_t*>(dlen.get());
  if (translate)
    p.block_table = static_cast<const int32_t*>(dbt.get()), p.block_table_stride = maxp,
    p.page_size = page, p.rows_per_request = rpr;
  p.out = static_cast<int32_t*>(dout.get()), p.out_stride = k, p.cluster = cluster, p.algo = algo;
  ASSERT_MLA_OK(dsa::launch_topk(p, nullptr));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dout.to_host(got);
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    if (ref.get(i) != got.get(i) && bad++ < 5)
      ADD_FAILURE() << "algo " << algo << " R " << R << " N " << N << " k " << k << " cluster "
                    << cluster << " ties " << ties << ": row " << i / k << " entry " << i % k
                    << " got " << got.get(i) << " want " << ref.get(i);
  EXPECT_EQ(bad, 0);
}

// Every kernel (algo 3, 2 and 1) on the same cases.
TEST(DsaGpu, TopkMatchesReferenceExactly) {
  for (int algo : topk_algos({4, 3, 2, 1})) {
    Rng rng(105);
    for (int cluster : {1, 2, 4, 8}) {
      run_topk_case(rng, 7, 5000, 64, cluster, false, false, false, algo);
      run_topk_case(rng, 6, 9000, 2048, cluster, true, true, false, algo);
      run_topk_case(rng, 3, 70000, 2048, cluster, false, true, false,
                    algo);  // candidates overflow shared memory? checked both ways
      run_topk_case(rng, 3, 40000, 8192, cluster, true, false, false, algo);
      run_topk_case(rng, 5, 4099, 128, cluster, false, false, false,
                    algo);  // odd rows: unaligned vectors
      run_topk_case(rng, 4, 20001, 2048, cluster, false, true, true, algo);
      // 30% of the row on one value: more than any pool holds (algo 2 and 3 fall back)
      run_topk_case(rng, 2, 60000, 2048, cluster, false, false, true, algo);
    }
    run_topk_case(rng, 300, 3000, 512, 0, false, true, false, algo);  // automatic cluster choice
  }
}

// algo 2 and 3 on the benchmark's data (uniform logits in [-1, 1), 1/32 of a
// row in the top 12-bit bucket: the pool paths, no fallback), one and several CTAs
// per row, rows long enough for many ring chunks per CTA and a row stride
// that is not a multiple of 4 floats.
TEST(DsaGpu, TopkStreamingPoolMatchesReference) {
  Rng rng(107);
  for (const auto& [R, N, k, cluster] : {std::array<int, 4>{4, 131072, 2048, 2},
                                         {3, 131071, 2048, 1},
                                         {2, 262144, 2048, 8},
                                         {5, 65541, 4096, 4},
                                         {2, 100000, 64, 2}}) {
    HostTensor logits = random_tensor(rng, DType::f32, {R, N}, -1, 1);
    HostTensor ref(DType::i32, {R, k});
    ref.poison();
    HostTensor got = ref;
    TopkArgs a;
    a.logits = logits.view(), a.k = k, a.indices = ref.view();
    ASSERT_MLA_OK(topk_indices(a));
    for (int algo : topk_algos({2, 3, 4})) {
      DeviceBuffer dl(logits), dout(got);
      dout.poison();
      dsa::TopkParams p;
      p.logits = static_cast<const float*>(dl.get()), p.logits_stride = N, p.num_rows = R,
      p.width = N, p.k = k;
      p.out = static_cast<int32_t*>(dout.get()), p.out_stride = k, p.cluster = cluster;
      p.algo = algo;
      ASSERT_MLA_OK(dsa::launch_topk(p, nullptr));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(got);
      EXPECT_TRUE(same_bytes(ref, got))
          << "algo " << algo << " R " << R << " N " << N << " k " << k << " cluster " << cluster;
    }
  }
}

TEST(DsaGpu, TopkCandidateOverflowFallsBackCorrectly) {
  // Every logit in one 12-bit bucket (values in [1, 1.0001)): the candidate
  // buffer overflows and later rounds re-read the row.
  Rng rng(106);
  const int R = 2, N = 60000, k = 1024;
  HostTensor logits(DType::f32, {R, N});
  for (int64_t i = 0; i < logits.numel(); ++i) logits.set(i, 1.0 + rng.uniform(0, 1e-4));
  HostTensor ref(DType::i32, {R, k});
  HostTensor got = ref;
  TopkArgs a;
  a.logits = logits.view(), a.k = k, a.indices = ref.view();
  ASSERT_MLA_OK(topk_indices(a));
  for (int algo : topk_algos({4, 3, 2, 1}))  // algo 2 falls back to algo 1 here (3, 4 need not)
    for (int cluster : {1, 4}) {
      DeviceBuffer dl(logits), dout(got);
      dout.poison();
      dsa::TopkParams p;
      p.logits = static_cast<const float*>(dl.get()), p.logits_stride = N, p.num_rows = R,
      p.width = N, p.k = k;
      p.out = static_cast<int32_t*>(dout.get()), p.out_stride = k, p.cluster = cluster,
      p.algo = algo;
      ASSERT_MLA_OK(dsa::launch_topk(p, nullptr));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(got);
      EXPECT_TRUE(same_bytes(ref, got)) << "algo " << algo << " cluster " << cluster;
    }
}

TEST(DsaGpu, TopkRejectsBadK) {
  dsa::TopkParams p;
  p.num_rows = 1, p.k = 100;
  Status st = dsa::launch_topk(p, nullptr);
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("100"), std::string::npos) << st.message();
}

// ------------------------------------------------------- sparse attention ----

// Oracle for one query row: the dense CPU decode over a cache made of just
// the listed entries (page size 1; -1 and out-of-range entries dropped).
void sparse_oracle(const testing::PagedCache& cache, const std::vector<int32_t>& list,
                   const HostTensor& q, int64_t qoff, int h, float scale, std::vector<double>* out,
                   std::vector<double>* lse) {
  const int64_t esz = cache.spec.format == KvFormat::bf16 ? 2 : 1;
  const int64_t ebytes = cache.entry_elems() * esz;
  const int64_t cap = cache.num_pages * cache.spec.page_size;
  std::vector<const uint8_t*> ents;
  for (int32_t s : list)
    if (s >= 0 && s < cap) {
      const int64_t page = s / cache.spec.page_size, off = s % cache.spec.page_size;
      ents.push_back(reinterpret_cast<const uint8_t*>(cache.storage.data()) +
                     (page * cache.page_stride() + off * cache.entry_elems()) * esz);
    }
  out->assign(size_t(h) * 512, 0.0);
  lse->assign(h, -INFINITY);
  if (ents.empty()) return;
  const int64_t n = int64_t(ents.size());
  std::vector<uint64_t> store((n * ebytes + 7) / 8 + 1);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(reinterpret_cast<uint8_t*>(store.data()) + i * ebytes, ents[i], ebytes);
  KvCacheView kv;
  kv.format = cache.spec.format;
  kv.data = TensorView::make(store.data(), cache.dtype(), {n, 1, 1, cache.entry_elems()});
  HostTensor qq(DType::f32, {1, 1, h, 576});
  for (int64_t i = 0; i < h * 576; ++i) qq.set(i, q.get(qoff + i));
  HostTensor bt(DType::i32, {1, n}), len(DType::i32, {1});
  for (int64_t i = 0; i < n; ++i) bt.set(i, double(i));
  len.set(0, double(n));
  HostTensor o(DType::f32, {1, 1, h, 512}), l(DType::f32, {1, h, 1});
  DecodeArgs a;
  a.q = qq.view(), a.kv = kv, a.block_table = bt.view(), a.cache_seqlens = len.view();
  a.softmax_scale = scale, a.causal = false, a.out = o.view(), a.lse = l.view();
  Status st = reference::mla_decode(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int64_t i = 0; i < h * 512; ++i) (*out)[i] = o.get(i);
  for (int i = 0; i < h; ++i) (*lse)[i] = l.get(i);
}

struct SparseCase {
  KvFormat format;
  int B, s_q, h, topk, page;
  bool use_topk_length, split;
  bool via_api = false;  // through mla::sparse_decode (workspace from sparse_workspace_size)
  bool wgmma = false;    // kernel level: the wgmma decode kernel (sparse v2), not sparse_attn.cu
};

void run_sparse_case(Rng& rng, const SparseCase& c) {
  std::vector<int32_t> lens(c.B);
  for (auto& L : lens) L = int32_t(rng.randint(c.topk / 2, c.topk * 3));
  testing::PagedCacheSpec spec;
  spec.format = c.format, spec.page_size = c.page,
  spec.page_pad = c.format == KvFormat::bf16 ? 8 : 16;
  testing::PagedCache cache = testing::make_paged_cache(rng, lens, spec);
  const int64_t cap = cache.num_pages * c.page;
  HostTensor q = random_tensor(rng, DType::bf16, {c.B, c.s_q, c.h, 576}, -2, 2);
  HostTensor idx(DType::i32, {c.B, c.s_q, c.topk});
  HostTensor tl(DType::i32, {c.B});
  for (int b = 0; b < c.B; ++b) {
    tl.set(b, double(b == 0 ? 0 : rng.randint(1, c.topk)));
    for (int i = 0; i < c.s_q; ++i)
      for (int j = 0; j < c.topk; ++j) {
        const int64_t m = rng.randint(0, 9);
        int64_t v = cache.slot(b, rng.randint(0, lens[b] - 1));
        if (m == 0) v = -1;
        if (m == 1 && j % 2) v = cap + 5;    // outside the cache: skipped, never read
        if (b == c.B - 1 && i == 0) v = -1;  // an all-invalid row
        idx.set((int64_t(b) * c.s_q + i) * c.topk + j, double(v));
      }
  }
  const float scale = 0.1352f;
  // device
  void* dkv = nullptr;
  const size_t kv_bytes = cache.storage.size() * 8;
  MLA_CUDA_CHECK(cudaMalloc(&dkv, kv_bytes));
  MLA_CUDA_CHECK(cudaMemcpy(dkv, cache.storage.data(), kv_bytes, cudaMemcpyHostToDevice));
  DeviceBuffer dq(q), didx(idx), dtl(tl);
  HostTensor out(DType::bf16, {c.B, c.s_q, c.h, 512}), lse(DType::f32, {c.B, c.h, c.s_q});
  DeviceBuffer dout(out), dlse(lse);
  dout.poison(), dlse.poison();
  dsa::SparseAttnParams p;
  p.q = dq.get(), p.q_sb = int64_t(c.s_q) * c.h * 576, p.q_ss = int64_t(c.h) * 576, p.q_sh = 576;
  p.batch = c.B, p.s_q = c.s_q, p.h_q = c.h;
  p.indices = static_cast<const int32_t*>(didx.get()), p.idx_sb = int64_t(c.s_q) * c.topk,
  p.idx_ss = c.topk;
  p.topk = c.topk;
  p.topk_length = c.use_topk_length ? static_cast<const int32_t*>(dtl.get()) : nullptr;
  p.kv = static_cast<const uint8_t*>(dkv), p.fp8 = c.format == KvFormat::fp8_ds_mla;
  const int64_t esz = p.fp8 ? 1 : 2;
  p.page_stride = cache.page_stride() * esz, p.token_stride = cache.entry_elems() * esz,
  p.page_size = c.page;
  p.num_slots = cap, p.softmax_scale = scale;
  p.out = dout.get(), p.out_sb = int64_t(c.s_q) * c.h * 512, p.out_ss = int64_t(c.h) * 512,
  p.out_sh = 512;
  p.lse = static_cast<float*>(dlse.get()), p.lse_sb = int64_t(c.h) * c.s_q, p.lse_sh = c.s_q,
  p.lse_ss = 1;
  void* ws = nullptr;
  if (c.via_api) {
    SparseDecodeArgs a;
    a.q = dq.view(q);
    a.kv = cache.view(Device::cuda(0));
    a.kv.data.data = dkv;
    a.indices = didx.view(idx);
    if (c.use_topk_length) a.topk_length = dtl.view(tl);
    a.softmax_scale = scale, a.out = dout.view(out), a.lse = dlse.view(lse);
    size_t need = 0;
    ASSERT_MLA_OK(sparse_workspace_size(a, &need));
    size_t kernel_need = dsa::sparse_attn_workspace_size(p);
    if (mla::cuda::decode::sparse_wgmma_chosen(p))
      ASSERT_MLA_OK(mla::cuda::decode::sparse_wgmma_workspace_size(p, &kernel_need));
    EXPECT_EQ(need, kernel_need) << "the API sizes what the kernel uses";
    if (need) {
      MLA_CUDA_CHECK(cudaMalloc(&ws, need));
      const Status st = sparse_decode(a, Workspace{ws, need - 1});
      EXPECT_EQ(st.code(), Errc::insufficient_workspace) << st.to_string();
      EXPECT_NE(st.message().find(std::to_string(need)), std::string::npos) << st.message();
    }
    ASSERT_MLA_OK(sparse_decode(a, Workspace{ws, need}));
  } else if (c.wgmma) {
    size_t ws_bytes = 0;
    ASSERT_MLA_OK(mla::cuda::decode::sparse_wgmma_workspace_size(p, &ws_bytes));
    MLA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    ASSERT_MLA_OK(mla::cuda::decode::launch_sparse_wgmma(p, ws, ws_bytes, nullptr));
  } else {
    const size_t ws_bytes = c.split ? dsa::sparse_attn_workspace_size(p) : 0;
    if (ws_bytes) MLA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    ASSERT_MLA_OK(dsa::launch_sparse_attn(p, ws, ws_bytes, nullptr));
  }
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dout.to_host(out), dlse.to_host(lse);
  cudaFree(ws);
  cudaFree(dkv);
  // compare: bf16 P and bf16 output; error of the output relative to its norm
  double err2 = 0, ref2 = 0, lse_err = 0;
  int bad_inf = 0;
  for (int b = 0; b < c.B; ++b)
    for (int i = 0; i < c.s_q; ++i) {
      std::vector<int32_t> list;
      const int n = c.use_topk_length ? int(tl.get(b)) : c.topk;
      for (int j = 0; j < std::min(n, c.topk); ++j)
        list.push_back(int32_t(idx.get((int64_t(b) * c.s_q + i) * c.topk + j)));
      std::vector<double> ro, rl;
      sparse_oracle(cache, list, q, (int64_t(b) * c.s_q + i) * c.h * 576, c.h, scale, &ro, &rl);
      for (int h = 0; h < c.h; ++h) {
        const double gl = lse.get((int64_t(b) * c.h + h) * c.s_q + i);
        if (std::isinf(rl[h])) {
          bad_inf += !(std::isinf(gl) && gl < 0);
        } else {
          lse_err = std::max(lse_err, std::isfinite(gl) ? std::fabs(gl - rl[h]) : 1e9);
        }
        for (int d = 0; d < 512; ++d) {
          const double g = out.get(((int64_t(b) * c.s_q + i) * c.h + h) * 512 + d),
                       r = ro[h * 512 + d];
          err2 += std::isfinite(g) ? (g - r) * (g - r) : 1e9;
          ref2 += r * r;
        }
      }
    }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  // bf16 P (8 bits) and bf16 output rounding: ~2^-9 per element -> 1e-2 norm bound
  EXPECT_LT(rel, 1e-2) << kv_format_name(c.format) << " h " << c.h << " s_q " << c.s_q << " topk "
                       << c.topk;
  EXPECT_LT(lse_err, 1e-3) << "lse";
  EXPECT_EQ(bad_inf, 0) << "rows with no key must give lse -inf";
}

TEST(DsaGpu, SparseAttentionMatchesReference) {
  Rng rng(107);
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (int h : {16, 32, 64, 128}) {
      run_sparse_case(rng, {f, 3, 2, h, 128, 64, true, false});
      run_sparse_case(rng, {f, 2, 1, h, 192, 16, false, true});
    }
  run_sparse_case(rng, {KvFormat::bf16, 2, 4, 64, 64, 1, true, true});
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 3, 128, 256, 128, false, true});
}

// Sparse v2: the same grid on the wgmma decode kernel with the Indexed key
// source (src/cuda/decode/decode_sparse.hpp), heads 16/32 as masked rows of a
// 64-row CTA; topk not a multiple of the 64-key tile; s_q 1 to 4; pages 1 to 128.
TEST(DsaGpu, SparseWgmmaMatchesReference) {
  Rng rng(112);
  auto run = [&](SparseCase c) {
    c.wgmma = true;
    run_sparse_case(rng, c);
  };
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (int h : {16, 32, 64, 128}) {
      run({f, 3, 2, h, 128, 64, true, true});
      run({f, 2, 1, h, 200, 16, false, true});
    }
  run({KvFormat::bf16, 2, 4, 64, 64, 1, true, true});
  run({KvFormat::fp8_ds_mla, 2, 3, 128, 256, 128, false, true});
  run({KvFormat::bf16, 150, 1, 128, 100, 64, true, true});  // more tokens than workers
}

// The API forced onto each kernel (MLA_SPARSE_KERNEL), 16 to 128 heads.
TEST(DsaGpu, SparseDecodeApiForcedKernels) {
  Rng rng(113);
  for (const char* k : {"wgmma", "mma"}) {
    ASSERT_EQ(setenv("MLA_SPARSE_KERNEL", k, 1), 0);
    run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 4, 16, 128, 128, true, true, true});
    run_sparse_case(rng, {KvFormat::bf16, 40, 3, 32, 64, 16, true, true, true});
    run_sparse_case(rng, {KvFormat::bf16, 2, 1, 128, 256, 64, true, true, true});
  }
  unsetenv("MLA_SPARSE_KERNEL");
}

// The public API (mla::sparse_decode) on CUDA tensors: page sizes 1 to 128,
// few rows (split over CTAs: needs the workspace) and many.
TEST(DsaGpu, SparseDecodeApiMatchesReference) {
  Rng rng(110);
  run_sparse_case(rng, {KvFormat::bf16, 2, 1, 128, 256, 64, true, true, true});
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 3, 2, 64, 192, 1, false, true, true});
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 4, 16, 128, 128, true, true, true});
  run_sparse_case(rng, {KvFormat::bf16, 40, 3, 32, 64, 16, true, true, true});
}

// mla::sparse_prefill on CUDA tensors against the same API on CPU tensors
// (the fp64 reference). Index lists: random rows of kv with 1 in 8 entries -1,
// row 1 all -1 (out 0, lse -inf), row 2 with only its first 3 entries valid,
// row 3 holding one row of kv `topk` times (duplicates count, as in the
// reference). The kernel is the API's default (the sparse prefill kernel,
// src/cuda/sparse) or forced through MLA_SPARSE_KERNEL ("mma": sparse_attn.cu's
// kernel); each also
// in launches of 3 query tokens (MLA_SPARSE_PREFILL_CHUNK: the path of s_q past
// 65535, whose chunk offsets and workspace sizing a real s_q that long would
// need > 1 GB of q to test).
struct PrefillCase {
  int h, s_q, s_kv, topk;
};

// The reference runs once per case; every kernel is checked against it.
void run_prefill_case(Rng& rng, const PrefillCase& c) {
  struct EnvReset {  // an ASSERT leaving early must not leave a kernel forced for later tests
    ~EnvReset() { unsetenv("MLA_SPARSE_KERNEL"), unsetenv("MLA_SPARSE_PREFILL_CHUNK"); }
  } env_reset;
  const int h = c.h, s_q = c.s_q, s_kv = c.s_kv, topk = c.topk;
  HostTensor q = random_tensor(rng, DType::bf16, {s_q, h, 576}, -2, 2);
  HostTensor kv = random_tensor(rng, DType::bf16, {s_kv, 576}, -2, 2);
  HostTensor idx(DType::i32, {s_q, topk});
  for (int i = 0; i < s_q; ++i)
    for (int j = 0; j < topk; ++j) {
      double v = double(rng.randint(0, s_kv - 1));
      if (i == 1 || (i == 2 && j >= 3) || rng.randint(0, 7) == 0) v = -1.0;
      if (i == 3) v = double(s_kv - 1);
      idx.set(int64_t(i) * topk + j, v);
    }
  HostTensor ro(DType::f64, {s_q, h, 512}), rl(DType::f64, {s_q, h});
  SparsePrefillArgs ra;
  ra.q = q.view(), ra.kv = kv.view(), ra.indices = idx.view(), ra.softmax_scale = 0.0625f;
  ra.out = ro.view(), ra.lse = rl.view();
  ASSERT_MLA_OK(sparse_prefill(ra));
  for (const char* kernel : {"default", "mma"})
    for (const char* chunk : {"", "3"}) {  // "3": launches of 3 query tokens (the chunked path)
      SCOPED_TRACE(::testing::Message() << "kernel " << kernel << " chunk '" << chunk << "' h " << h
                                        << " s_q " << s_q << " s_kv " << s_kv << " topk " << topk);
      if (std::string(kernel) == "default")
        unsetenv("MLA_SPARSE_KERNEL");
      else
        ASSERT_EQ(setenv("MLA_SPARSE_KERNEL", kernel, 1), 0);
      if (*chunk)
        ASSERT_EQ(setenv("MLA_SPARSE_PREFILL_CHUNK", chunk, 1), 0);
      else
        unsetenv("MLA_SPARSE_PREFILL_CHUNK");
      HostTensor out(DType::bf16, {s_q, h, 512}), lse(DType::f32, {s_q, h});
      DeviceBuffer dq(q), dkv(kv), didx(idx), dout(out), dlse(lse);
      dout.poison(), dlse.poison();
      SparsePrefillArgs a = ra;
      a.q = dq.view(q), a.kv = dkv.view(kv), a.indices = didx.view(idx), a.out = dout.view(out),
      a.lse = dlse.view(lse);
      size_t need = 0;
      ASSERT_MLA_OK(sparse_workspace_size(a, &need));
      void* ws = nullptr;
      if (need) MLA_CUDA_CHECK(cudaMalloc(&ws, need));
      if (need) {  // the size is what the call uses: one byte less is an error, before any launch
        const Status st = sparse_prefill(a, Workspace{ws, need - 1});
        EXPECT_EQ(st.code(), Errc::insufficient_workspace) << st.to_string();
      }
      ASSERT_MLA_OK(sparse_prefill(a, Workspace{ws, need}));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(out), dlse.to_host(lse);
      // A second call gives the same bits (no split depends on timing).
      HostTensor out2(DType::bf16, {s_q, h, 512}), lse2(DType::f32, {s_q, h});
      dout.poison(), dlse.poison();
      ASSERT_MLA_OK(sparse_prefill(a, Workspace{ws, need}));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      cudaFree(ws);
      dout.to_host(out2), dlse.to_host(lse2);
      EXPECT_TRUE(same_bytes(out, out2) && same_bytes(lse, lse2)) << "a second call differs";
      double err2 = 0, ref2 = 0, lerr = 0;
      int bad_inf = 0, bad_zero = 0;
      for (int64_t i = 0; i < out.numel(); ++i) {
        const double d = out.get(i) - ro.get(i);
        err2 += std::isfinite(d) ? d * d : 1e9, ref2 += ro.get(i) * ro.get(i);
      }
      if (s_q > 1)
        for (int64_t i = 0; i < int64_t(h) * 512; ++i)
          bad_zero += out.get(int64_t(h) * 512 + i) != 0.0;
      for (int64_t i = 0; i < lse.numel(); ++i) {
        if (std::isinf(rl.get(i)))
          bad_inf += !(std::isinf(lse.get(i)) && lse.get(i) < 0);
        else
          lerr =
              std::max(lerr, std::isfinite(lse.get(i)) ? std::fabs(lse.get(i) - rl.get(i)) : 1e9);
      }
      // bf16 P and bf16 output (as the decode cases): 1e-2 of the norm; lse is
      // accumulated in f32 over <= 2048 terms.
      EXPECT_LT(std::sqrt(err2 / ref2), 1e-2);
      EXPECT_LT(lerr, 1e-3);
      EXPECT_EQ(bad_inf, 0) << "the all-invalid row must give lse -inf";
      EXPECT_EQ(bad_zero, 0) << "the all-invalid row must give out 0";
    }
}

TEST(DsaGpu, SparsePrefillApiMatchesReference) {
  Rng rng(111);
  const PrefillCase cases[] = {
      {16, 300, 777, 192},   // more tokens than workers, topk a multiple of 64
      {64, 5, 777, 192},     // few tokens: split over workers (fp32 partials)
      {128, 5, 777, 192},    // two row blocks of 64 heads
      {128, 6, 40, 100},     // s_kv below topk (repeats), topk not a multiple of 64
      {32, 4, 1, 7},         // a one-row kv, a list shorter than one tile
      {64, 8, 70000, 2048},  // DeepSeek-V3.2's top-2048, kv rows past 65536
      {128, 150, 4096, 64},  // one tile per token, 150 tokens > 66 workers
  };
  for (const PrefillCase& c : cases) run_prefill_case(rng, c);
}

// What the CUDA path cannot take is an error naming the argument, before any launch.
TEST(DsaGpu, SparseApiRejectsWhatTheKernelCannotTake) {
  HostTensor q(DType::bf16, {1, 20, 576}), kv(DType::bf16, {8, 576}), idx(DType::i32, {1, 4});
  HostTensor out(DType::bf16, {1, 20, 512}), lse(DType::f32, {1, 20});
  DeviceBuffer dq(q), dkv(kv), didx(idx), dout(out), dlse(lse);
  SparsePrefillArgs a;
  a.q = dq.view(q), a.kv = dkv.view(kv), a.indices = didx.view(idx), a.softmax_scale = 0.1f;
  a.out = dout.view(out), a.lse = dlse.view(lse);
  Status st = sparse_prefill(a);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("h_q = 20"), std::string::npos) << st.message();
  HostTensor q16(DType::bf16, {1, 16, 576}), out16(DType::f32, {1, 16, 512}),
      lse16(DType::f32, {1, 16});
  DeviceBuffer dq16(q16), dout16(out16), dlse16(lse16);
  a.q = dq16.view(q16), a.out = dout16.view(out16), a.lse = dlse16.view(lse16);
  st = sparse_prefill(a);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("out: dtype f32"), std::string::npos) << st.message();
}

TEST(DsaGpu, SparseRejectsHeadsNotMultipleOf16) {
  dsa::SparseAttnParams p;
  p.batch = 1, p.h_q = 20;
  Status st = dsa::launch_sparse_attn(p, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
}

// Sparse attention with a list holding every key equals dense decode.
TEST(DsaGpu, SparseWithAllKeysEqualsDenseDecode) {
  Rng rng(108);
  for (bool wgmma : {false, true})  // sparse_attn.cu's kernel, then the wgmma decode kernel
    for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
      const int B = 2, h = 64, L = 300, topk = 320;
      testing::PagedCacheSpec spec;
      spec.format = f, spec.page_size = 64;
      testing::PagedCache cache = testing::make_paged_cache(rng, {L, L - 17}, spec);
      HostTensor q = random_tensor(rng, DType::bf16, {B, 1, h, 576}, -2, 2);
      HostTensor idx(DType::i32, {B, 1, topk});
      for (int b = 0; b < B; ++b)
        for (int j = 0; j < topk; ++j)
          idx.set(b * topk + j, j < cache.seqlens[b] ? double(cache.slot(b, j)) : -1.0);
      HostTensor dense_o(DType::f32, {B, 1, h, 512}), dense_l(DType::f32, {B, h, 1});
      DecodeArgs a;
      a.q = q.view(), a.kv = cache.view(), a.block_table = cache.block_table_view(),
      a.cache_seqlens = cache.seqlens_view();
      a.softmax_scale = 0.1352f, a.causal = true, a.out = dense_o.view(), a.lse = dense_l.view();
      ASSERT_MLA_OK(reference::mla_decode(a));
      void* dkv = nullptr;
      MLA_CUDA_CHECK(cudaMalloc(&dkv, cache.storage.size() * 8));
      MLA_CUDA_CHECK(
          cudaMemcpy(dkv, cache.storage.data(), cache.storage.size() * 8, cudaMemcpyHostToDevice));
      DeviceBuffer dq(q), didx(idx);
      HostTensor out(DType::bf16, {B, 1, h, 512}), lse(DType::f32, {B, h, 1});
      DeviceBuffer dout(out), dlse(lse);
      dout.poison(), dlse.poison();
      dsa::SparseAttnParams p;
      p.q = dq.get(), p.q_sb = h * 576, p.q_ss = h * 576, p.q_sh = 576, p.batch = B, p.s_q = 1,
      p.h_q = h;
      p.indices = static_cast<const int32_t*>(didx.get()), p.idx_sb = topk, p.idx_ss = topk,
      p.topk = topk;
      p.kv = static_cast<const uint8_t*>(dkv), p.fp8 = f == KvFormat::fp8_ds_mla;
      const int64_t esz = p.fp8 ? 1 : 2;
      p.page_stride = cache.page_stride() * esz, p.token_stride = cache.entry_elems() * esz,
      p.page_size = 64;
      p.num_slots = cache.num_pages * 64, p.softmax_scale = 0.1352f;
      p.out = dout.get(), p.out_sb = h * 512, p.out_ss = h * 512, p.out_sh = 512;
      p.lse = static_cast<float*>(dlse.get()), p.lse_sb = h, p.lse_sh = 1, p.lse_ss = 1;
      void* ws = nullptr;
      if (wgmma) {
        size_t ws_bytes = 0;
        ASSERT_MLA_OK(mla::cuda::decode::sparse_wgmma_workspace_size(p, &ws_bytes));
        MLA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
        ASSERT_MLA_OK(mla::cuda::decode::launch_sparse_wgmma(p, ws, ws_bytes, nullptr));
      } else {
        ASSERT_MLA_OK(dsa::launch_sparse_attn(p, nullptr, 0, nullptr));
      }
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(out), dlse.to_host(lse);
      cudaFree(dkv);
      cudaFree(ws);
      double err2 = 0, ref2 = 0, lerr = 0;
      for (int64_t i = 0; i < out.numel(); ++i) {
        const double d = out.get(i) - dense_o.get(i);
        err2 += std::isfinite(d) ? d * d : 1e9, ref2 += dense_o.get(i) * dense_o.get(i);
      }
      for (int64_t i = 0; i < lse.numel(); ++i)
        lerr = std::max(lerr, std::fabs(lse.get(i) - dense_l.get(i)));
      EXPECT_LT(std::sqrt(err2 / ref2), 1e-2) << kv_format_name(f) << (wgmma ? " wgmma" : " mma");
      EXPECT_LT(lerr, 1e-3) << kv_format_name(f) << (wgmma ? " wgmma" : " mma");
    }
}

// ------------------------------------------------------------------ recall ---

// The FP8 indexer + GPU top-k against the exact indexer (fp64 over the
// unquantised q, k, w) on random data: the fraction of the exact top-k that
// the FP8 pipeline finds. Reported; DeepSeek's target is >= 0.99.
TEST(DsaGpu, Fp8IndexerTopkRecall) {
  Rng rng(109);
  const int T = 4, N = 8192, k = 2048;
  HostTensor qf = random_tensor(rng, DType::f32, {T, 64, 128}, -1, 1);
  HostTensor wf = random_tensor(rng, DType::f32, {T, 64}, -1, 1);
  HostTensor kf = random_tensor(rng, DType::f32, {N, 128}, -1, 1);
  // exact logits: sum_h w * 64^-0.5 * 128^-0.5 * relu(q . k)
  std::vector<double> exact(size_t(T) * N);
  const double fold = 1.0 / 8.0 / std::sqrt(128.0);
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < N; ++s) {
      double acc = 0;
      for (int h = 0; h < 64; ++h) {
        double d = 0;
        for (int i = 0; i < 128; ++i)
          d += double(qf.get((t * 64 + h) * 128 + i)) * kf.get(int64_t(s) * 128 + i);
        acc += wf.get(t * 64 + h) * fold * std::max(d, 0.0);
      }
      exact[size_t(t) * N + s] = acc;
    }
  // FP8 pipeline on the GPU: quantise q (API), keys (reference quantiser), logits, top-k
  HostTensor q8(DType::e4m3, {T, 64, 128}), wfold(DType::f32, {T, 64});
  DeviceBuffer dqf(qf), dwf(wf), dq8(q8), dwfold(wfold);
  ASSERT_MLA_OK(cuda::quantize_indexer_query(
      {dqf.view(qf), dwf.view(wf), dq8.view(q8), dwfold.view(wfold)}, {}));
  HostTensor k8(DType::e4m3, {N, 128}), ksc(DType::f32, {N});
  for (int s = 0; s < N; ++s) {
    float v[128], sc;
    uint8_t codes[128];
    for (int i = 0; i < 128; ++i) v[i] = float(kf.get(int64_t(s) * 128 + i));
    reference::quantize_indexer_vector(v, codes, &sc);
    std::memcpy(reinterpret_cast<uint8_t*>(k8.storage.data()) + int64_t(s) * 128, codes, 128);
    ksc.set(s, sc);
  }
  HostTensor kst(DType::i32, {T}), ken(DType::i32, {T});
  for (int t = 0; t < T; ++t) kst.set(t, 0), ken.set(t, N);
  HostTensor logits(DType::f32, {T, N}), idx(DType::i32, {T, k});
  DeviceBuffer dk8(k8), dks(ksc), dst(kst), den(ken), dlog(logits), didx(idx);
  ASSERT_MLA_OK(
      cuda::indexer_logits_prefill({dq8.view(q8), dwfold.view(wfold), dk8.view(k8), dks.view(ksc),
                                    dst.view(kst), den.view(ken), dlog.view(logits)},
                                   {}));
  TopkArgs ta;
  ta.logits = dlog.view(logits), ta.k = k, ta.indices = didx.view(idx);
  ASSERT_MLA_OK(cuda::topk_indices(ta, {}));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  didx.to_host(idx);
  double hits = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<int> order(N);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return exact[size_t(t) * N + a] > exact[size_t(t) * N + b];
    });
    std::set<int> best(order.begin(), order.begin() + k);
    for (int j = 0; j < k; ++j) hits += best.count(int(idx.get(int64_t(t) * k + j)));
  }
  const double recall = hits / (double(T) * k);
  std::printf("[ recall ] FP8 indexer top-%d of %d vs exact fp64 indexer: %.4f\n", k, N, recall);
  RecordProperty("fp8_indexer_recall", std::to_string(recall));
  EXPECT_GE(recall, 0.95) << "recall far below DeepSeek's 0.99 target";
}

}  // namespace
}  // namespace mla
