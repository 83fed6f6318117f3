// GPU tests of the sparse prefill kernel (src/cuda/sparse/sparse_prefill_*),
// the default of mla::sparse_prefill on CUDA, against the fp64 CPU reference
// (the same API on CPU tensors), and the kernel on 1 and 3 persistent CTAs
// against its default grid (bit-identical). Fresh random inputs, outputs poisoned before
// every run. Index lists per token cycle through the edges: random rows with
// -1 entries and rows past s_kv (skipped by the kernel; the reference, which
// rejects them, gets -1 there), an all -1 list (out 0, lse -inf), one row
// repeated (duplicates count), three valid entries, topk_length 0, a random
// topk_length whose tail holds garbage (never read). fp8 cases: kv holds
// random fp8_ds_mla entries (mla/kv_cache.hpp), and the reference reads the
// same bytes (dequantised exactly; the kernel's bf16 keys are then exact too,
// so the bounds are the bf16 ones).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/sparse/sparse_prefill_launch.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/sparse.hpp"

namespace mla {
namespace {

using testing::DeviceBuffer;
using testing::HostTensor;
using testing::random_tensor;
using testing::Rng;

struct Case {
  int h, s_q;
  int64_t s_kv;
  int topk;
  bool topk_length;
  bool fp8 = false;  // kv: [s_kv, 656] fp8_ds_mla entries
};

// Random keys: bf16 rows in [-2, 2], or fp8_ds_mla entries whose values stay
// within a few units (scales 2^-10 .. 2^-7 times e4m3 codes up to 448).
HostTensor random_keys(Rng& rng, const Case& c) {
  if (!c.fp8) return random_tensor(rng, DType::bf16, {c.s_kv, 576}, -2, 2);
  HostTensor kv(DType::u8, {c.s_kv, Fp8DsMlaLayout::kEntryBytes});
  testing::PagedCacheSpec spec;
  spec.format = KvFormat::fp8_ds_mla, spec.min_scale_exp = -10, spec.max_scale_exp = -7;
  for (int64_t r = 0; r < c.s_kv; ++r)
    testing::fill_random_entry(rng, spec,
                               static_cast<uint8_t*>(kv.data()) + r * Fp8DsMlaLayout::kEntryBytes);
  return kv;
}

// The lists the GPU gets (raw) and the reference gets (entries the kernel
// skips written as -1; the tail past topk_length is not read by either).
struct Lists {
  HostTensor raw, ref, len;
};

Lists make_lists(Rng& rng, const Case& c) {
  Lists l{HostTensor(DType::i32, {c.s_q, c.topk}), HostTensor(DType::i32, {c.s_q, c.topk}),
          HostTensor(DType::i32, {c.s_q})};
  for (int i = 0; i < c.s_q; ++i) {
    const int kind = c.s_q == 1 ? 0 : i % 6;
    int n = c.topk;
    if (c.topk_length) n = kind == 4 ? 0 : kind == 5 ? int(rng.randint(1, c.topk)) : c.topk;
    l.len.set(i, n);
    const int64_t dup = rng.randint(0, c.s_kv - 1);
    for (int j = 0; j < c.topk; ++j) {
      int64_t v = rng.randint(0, c.s_kv - 1);
      const int64_t roll = rng.randint(0, 15);
      if (roll == 0) v = -1;
      if (roll == 1) v = c.s_kv + rng.randint(0, 1000);  // past the keys: skipped
      if (roll == 2) v = -1 - rng.randint(0, 1000);      // negative: skipped
      if (kind == 1) v = -1;
      if (kind == 2) v = dup;
      if (kind == 3 && j >= 3) v = -1;
      if (j >= n) v = rng.randint(INT32_MIN, INT32_MAX);  // garbage, never read
      l.raw.set(int64_t(i) * c.topk + j, double(int32_t(v)));
      const bool skipped = j >= n || v < 0 || v >= c.s_kv;
      l.ref.set(int64_t(i) * c.topk + j, skipped ? -1.0 : double(v));
    }
  }
  return l;
}

struct Result {
  HostTensor out, lse;
};

// One call of mla::sparse_prefill on the GPU (the default kernel) into *r.
void run_gpu(const Case& c, const HostTensor& q, const HostTensor& kv, const Lists& l, float scale,
             Result* r) {
  r->out = HostTensor(DType::bf16, {c.s_q, c.h, 512});
  r->lse = HostTensor(DType::f32, {c.s_q, c.h});
  DeviceBuffer dq(q), dkv(kv), didx(l.raw), dlen(l.len), dout(r->out), dlse(r->lse);
  dout.poison(), dlse.poison();
  SparsePrefillArgs a;
  a.q = dq.view(q), a.kv = dkv.view(kv), a.indices = didx.view(l.raw);
  a.kv_format = c.fp8 ? KvFormat::fp8_ds_mla : KvFormat::bf16;
  if (c.topk_length) a.topk_length = dlen.view(l.len);
  a.softmax_scale = scale, a.out = dout.view(r->out), a.lse = dlse.view(r->lse);
  size_t need = 1;
  ASSERT_MLA_OK(sparse_workspace_size(a, &need));
  EXPECT_EQ(need, 0u) << "the sparse prefill kernel needs no workspace";
  ASSERT_MLA_OK(sparse_prefill(a));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dout.to_host(r->out), dlse.to_host(r->lse);
  // The kernel itself with 1 and 3 persistent CTAs: every item runs through a
  // few CTAs' rings (Q reloads, the ring across items); same bits.
  cuda::sparse::SparsePrefillParams p;
  p.q = dq.get(), p.q_ss = int64_t(c.h) * 576, p.q_sh = 576, p.s_q = c.s_q, p.h_q = c.h;
  p.indices = static_cast<const int32_t*>(didx.get()), p.idx_ss = c.topk, p.topk = c.topk;
  p.topk_length = c.topk_length ? static_cast<const int32_t*>(dlen.get()) : nullptr;
  p.kv = dkv.get(), p.fp8 = c.fp8, p.kv_row_stride = c.fp8 ? Fp8DsMlaLayout::kEntryBytes : 576;
  p.s_kv = c.s_kv, p.softmax_scale = scale;
  p.out = dout.get(), p.out_ss = int64_t(c.h) * 512, p.out_sh = 512;
  p.lse = static_cast<float*>(dlse.get()), p.lse_ss = c.h, p.lse_sh = 1;
  for (int ctas : {1, 3}) {
    dout.poison(), dlse.poison();
    p.max_ctas = ctas;
    ASSERT_MLA_OK(cuda::sparse::launch_sparse_prefill(p, nullptr));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    HostTensor out(DType::bf16, {c.s_q, c.h, 512}), lse(DType::f32, {c.s_q, c.h});
    dout.to_host(out), dlse.to_host(lse);
    EXPECT_EQ(std::memcmp(out.storage.data(), r->out.storage.data(), size_t(out.numel()) * 2), 0)
        << ctas << " CTAs: out differs from the default grid";
    EXPECT_EQ(std::memcmp(lse.storage.data(), r->lse.storage.data(), size_t(lse.numel()) * 4), 0)
        << ctas << " CTAs: lse differs from the default grid";
  }
}

void check_case(Rng& rng, const Case& c) {
  SCOPED_TRACE(::testing::Message()
               << "h " << c.h << " s_q " << c.s_q << " s_kv " << c.s_kv << " topk " << c.topk
               << " topk_length " << c.topk_length << " fp8 " << c.fp8);
  const float scale = 0.0625f;
  HostTensor q = random_tensor(rng, DType::bf16, {c.s_q, c.h, 576}, -2, 2);
  HostTensor kv = random_keys(rng, c);
  const Lists l = make_lists(rng, c);
  HostTensor ro(DType::f64, {c.s_q, c.h, 512}), rl(DType::f64, {c.s_q, c.h});
  SparsePrefillArgs ra;
  ra.q = q.view(), ra.kv = kv.view(), ra.indices = l.ref.view(), ra.softmax_scale = scale;
  ra.kv_format = c.fp8 ? KvFormat::fp8_ds_mla : KvFormat::bf16;
  if (c.topk_length) ra.topk_length = l.len.view();
  ra.out = ro.view(), ra.lse = rl.view();
  ASSERT_MLA_OK(sparse_prefill(ra));
  Result g;
  run_gpu(c, q, kv, l, scale, &g);
  {
    // Per (token, head) row: the error relative to the row's norm. bf16 P (8
    // bits) and bf16 output give ~2^-9 per element, averaged over 512 columns;
    // 1e-2 leaves room without hiding a wrong key (a missing or extra key of
    // 2048 moves a row by ~1e-2 only at the flattest softmax, which random
    // scores at this scale are far from). lse: fp32 sums of <= 8192 terms, 1e-3.
    double worst = 0, lse_err = 0;
    int bad_inf = 0, bad_zero = 0;
    for (int64_t row = 0; row < int64_t(c.s_q) * c.h; ++row) {
      const double rlse = rl.get(row), glse = g.lse.get(row);
      if (std::isinf(rlse)) {
        bad_inf += !(std::isinf(glse) && glse < 0);
        for (int d = 0; d < 512; ++d) bad_zero += g.out.get(row * 512 + d) != 0.0;
        continue;
      }
      lse_err = std::max(lse_err, std::isfinite(glse) ? std::fabs(glse - rlse) : 1e9);
      double e2 = 0, r2 = 0;
      for (int d = 0; d < 512; ++d) {
        const double diff = g.out.get(row * 512 + d) - ro.get(row * 512 + d);
        e2 += std::isfinite(diff) ? diff * diff : 1e9;
        r2 += ro.get(row * 512 + d) * ro.get(row * 512 + d);
      }
      worst = std::max(worst, std::sqrt(e2 / std::max(r2, 1e-30)));
    }
    EXPECT_LT(worst, 1e-2) << "worst row error relative to its norm";
    EXPECT_LT(lse_err, 1e-3) << "lse";
    EXPECT_EQ(bad_inf, 0) << "rows with no valid key must give lse -inf";
    EXPECT_EQ(bad_zero, 0) << "rows with no valid key must give out 0";
  }
}

TEST(SparsePrefillGpu, MatchesReferenceHeads) {
  Rng rng(161);
  for (int h : {16, 32, 64, 128}) {
    check_case(rng, {h, 12, 3000, 512, false});
    check_case(rng, {h, 7, 5000, 512, true});
  }
}

TEST(SparsePrefillGpu, MatchesReferenceTopk) {
  Rng rng(162);
  check_case(rng, {128, 6, 70000, 2048, true});  // DeepSeek-V3.2's top-2048, rows past 65536
  check_case(rng, {64, 3, 20000, 2048, false});
  check_case(rng, {16, 6, 9000, 8192, true});  // the longest list, every edge kind
  check_case(rng, {32, 2, 9000, 8192, false});
}

TEST(SparsePrefillGpu, MatchesReferenceEdges) {
  Rng rng(163);
  check_case(rng, {128, 1, 4096, 2048, false});  // s_q 1
  check_case(rng, {64, 1, 1000, 512, true});
  check_case(rng, {16, 6, 1, 64, true});      // a one-row kv: every valid entry is row 0
  check_case(rng, {64, 6, 50, 64, false});    // s_kv below topk: repeats
  check_case(rng, {128, 6, 300, 100, true});  // topk not a multiple of the 64-key tile
  check_case(rng, {32, 6, 300, 7, false});    // a list shorter than one tile
}

// fp8_ds_mla keys (a cached prefix read by prefill): every head count, edges
// (s_q 1, one-row kv, topk not a multiple of 64, a list shorter than a tile),
// the longest list; 1 and 3 CTAs bit-identical to the default grid (run_gpu).
TEST(SparsePrefillGpu, Fp8KeysMatchReference) {
  Rng rng(166);
  for (int h : {16, 32, 64, 128}) check_case(rng, {h, 7, 3000, 512, true, true});
  check_case(rng, {128, 1, 4096, 2048, false, true});
  check_case(rng, {64, 6, 1, 64, true, true});
  check_case(rng, {128, 6, 300, 100, true, true});
  check_case(rng, {32, 6, 300, 7, false, true});
  check_case(rng, {16, 3, 9000, 8192, true, true});
}

// The small shapes for compute-sanitizer (racecheck, memcheck, synccheck):
// every path of the kernel in a few launches. h_q 64 and 128 (one and two
// head blocks, so two CTAs share a token), 16 (padded rows), six tokens per
// case (random lists with -1 and rows past s_kv, an all -1 list, duplicates,
// three entries, topk_length 0, a random topk_length), 3 pairs of tiles per
// list and a partial last tile, bf16 and fp8 keys, s_q 1; run_gpu also runs 1
// and 3 CTAs (items through one CTA's ring, Q reloads; every hand-over
// mbarrier through many phases).
TEST(SparsePrefillGpu, SanitizerShapes) {
  Rng rng(167);
  for (bool fp8 : {false, true}) {
    check_case(rng, {64, 6, 700, 320, true, fp8});
    check_case(rng, {128, 6, 700, 320, true, fp8});
    check_case(rng, {16, 6, 700, 100, false, fp8});
    check_case(rng, {128, 1, 700, 200, false, fp8});  // s_q 1: two items, two CTAs
  }
}

// An engine's chunked prefill: the chunk's queries select among the cached
// prefix and the chunk's own keys, i.e. kv = prefix rows + chunk rows. Each
// token lists prefix rows and chunk rows up to itself (a causal selection).
TEST(SparsePrefillGpu, ChunkOverPrefixAndOwnKeys) {
  Rng rng(164);
  const int64_t prefix = 6000;
  const Case c{128, 24, prefix + 24, 512, true};
  HostTensor q = random_tensor(rng, DType::bf16, {c.s_q, c.h, 576}, -2, 2);
  HostTensor kv = random_tensor(rng, DType::bf16, {c.s_kv, 576}, -2, 2);
  Lists l{HostTensor(DType::i32, {c.s_q, c.topk}), HostTensor(DType::i32, {c.s_q, c.topk}),
          HostTensor(DType::i32, {c.s_q})};
  for (int i = 0; i < c.s_q; ++i) {
    const int own = i + 1;  // chunk rows prefix .. prefix + i
    const int n = int(rng.randint(own, c.topk));
    l.len.set(i, n);
    for (int j = 0; j < c.topk; ++j) {
      const int64_t v = j < own ? prefix + j : j < n ? rng.randint(0, prefix - 1) : -7;
      l.raw.set(int64_t(i) * c.topk + j, double(v));
      l.ref.set(int64_t(i) * c.topk + j, j < n ? double(v) : -1.0);
    }
  }
  HostTensor ro(DType::f64, {c.s_q, c.h, 512}), rl(DType::f64, {c.s_q, c.h});
  SparsePrefillArgs ra;
  ra.q = q.view(), ra.kv = kv.view(), ra.indices = l.ref.view(), ra.topk_length = l.len.view();
  ra.softmax_scale = 0.0625f, ra.out = ro.view(), ra.lse = rl.view();
  ASSERT_MLA_OK(sparse_prefill(ra));
  Result g;
  run_gpu(c, q, kv, l, 0.0625f, &g);
  double e2 = 0, r2 = 0, lse_err = 0;
  for (int64_t i = 0; i < ro.numel(); ++i) {
    const double d = g.out.get(i) - ro.get(i);
    e2 += std::isfinite(d) ? d * d : 1e9, r2 += ro.get(i) * ro.get(i);
  }
  for (int64_t i = 0; i < rl.numel(); ++i)
    lse_err = std::max(lse_err, std::fabs(g.lse.get(i) - rl.get(i)));
  EXPECT_LT(std::sqrt(e2 / r2), 1e-2);
  EXPECT_LT(lse_err, 1e-3);
}

// 100 calls in a row give the same bits (no atomics, no split: nothing
// depends on timing).
TEST(SparsePrefillGpu, RepeatedCallsBitIdentical) {
  Rng rng(165);
  const Case c{128, 64, 40000, 2048, true};
  HostTensor q = random_tensor(rng, DType::bf16, {c.s_q, c.h, 576}, -2, 2);
  HostTensor kv = random_tensor(rng, DType::bf16, {c.s_kv, 576}, -2, 2);
  const Lists l = make_lists(rng, c);
  HostTensor out(DType::bf16, {c.s_q, c.h, 512}), lse(DType::f32, {c.s_q, c.h});
  DeviceBuffer dq(q), dkv(kv), didx(l.raw), dlen(l.len), dout(out), dlse(lse);
  SparsePrefillArgs a;
  a.q = dq.view(q), a.kv = dkv.view(kv), a.indices = didx.view(l.raw),
  a.topk_length = dlen.view(l.len);
  a.softmax_scale = 0.0625f, a.out = dout.view(out), a.lse = dlse.view(lse);
  std::vector<uint8_t> first_out, first_lse;
  int differ = 0;
  for (int it = 0; it < 100; ++it) {
    dout.poison(), dlse.poison();
    ASSERT_MLA_OK(sparse_prefill(a));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> o = dout.download<uint8_t>(dout.bytes()),
                               s = dlse.download<uint8_t>(dlse.bytes());
    if (it == 0)
      first_out = o, first_lse = s;
    else
      differ += o != first_out || s != first_lse;
  }
  EXPECT_EQ(differ, 0) << "calls differing from the first";
}

// What the kernel cannot take is an error naming the argument and the value.
TEST(SparsePrefillGpu, KernelRejectsMisalignedRows) {
  DeviceBuffer buf(size_t(1) << 20);
  cuda::sparse::SparsePrefillParams p;
  p.q = buf.get(), p.q_ss = 576, p.q_sh = 576, p.s_q = 1, p.h_q = 16;
  p.indices = static_cast<const int32_t*>(buf.get()), p.idx_ss = 64, p.topk = 64;
  p.kv = buf.get(), p.kv_row_stride = 577, p.s_kv = 4;
  p.out = buf.get(), p.lse = static_cast<float*>(buf.get());
  Status st = cuda::sparse::launch_sparse_prefill(p, nullptr);
  EXPECT_EQ(st.code(), Errc::misaligned) << st.to_string();
  EXPECT_NE(st.message().find("kv: "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("577"), std::string::npos) << st.message();
  p.kv_row_stride = 576, p.q_sh = 580;
  st = cuda::sparse::launch_sparse_prefill(p, nullptr);
  EXPECT_EQ(st.code(), Errc::misaligned) << st.to_string();
  EXPECT_NE(st.message().find("q: "), std::string::npos) << st.message();
  // The kernel takes row maxima before scaling: the scale must be > 0.
  p.q_sh = 576, p.softmax_scale = -0.5f;
  st = cuda::sparse::launch_sparse_prefill(p, nullptr);
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("softmax_scale = -0.5"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mla
