// The dense-decode reference (mla_decode on CPU tensors) against a second,
// independently written computation: gather each request's keys densely
// straight from the cache bytes, then a textbook softmax. Plus the split-KV
// partials and their log-sum-exp merge against the unsplit result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/decode_problem.hpp"
#include "common/random.hpp"
#include "mla/decode.hpp"

namespace mla {
namespace {

using testing::DecodeProblem;
using testing::DecodeShape;
using testing::HostTensor;
using testing::Rng;

constexpr double kU = 0x1p-53;  // unit roundoff of double
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---- the naive oracle ------------------------------------------------------

// Token `pos` of request b, decoded from its bytes here (not through the
// library's load_kv_entry): bf16 values, or e4m3 * scale[i / 128] and bf16 rope.
std::vector<double> naive_entry(const testing::PagedCache& c, int64_t b, int64_t pos) {
  const uint8_t* e = c.entry(b, pos);
  std::vector<double> v(kDqk);
  auto bf = [](const uint8_t* p) {
    bf16 h;
    std::memcpy(&h.bits, p, 2);
    return double(bf16_to_float(h));
  };
  if (c.spec.format == KvFormat::bf16) {
    for (int i = 0; i < kDqk; ++i) v[i] = bf(e + 2 * i);
    return v;
  }
  for (int i = 0; i < 512; ++i) {
    float scale;
    std::memcpy(&scale, e + 512 + 4 * (i / 128), 4);
    v[i] = double(e4m3_to_float(e[i])) * scale;
  }
  for (int i = 0; i < 64; ++i) v[512 + i] = bf(e + 528 + 2 * i);
  return v;
}

// Outputs with a per-element error bound. The bound: each logit is a 576-term
// dot product; both sides compute it in double, so each is off by at most
// 576 u sum_c |q_c k_c| (Higham's gamma_n), times the scale: E per logit.
// Logits off by <= 2E (both sides) move every probability by a relative
// <= 4E, so out (a convex combination of values |v| <= vmax) moves by
// <= 4E vmax and lse by <= 2E. The softmax's own sums of n terms add
// n u vmax (out) and n u (lse). Bounds are doubled for slack.
struct Oracle {
  std::vector<double> out, out_tol;  // [B, s_q, h_q, 512] and one bound per row
  std::vector<double> lse, lse_tol;  // [B, h_q, s_q]
};

Oracle naive_decode(const DecodeProblem& p) {
  const int64_t B = p.batch(), s_q = p.shape.s_q, h_q = p.shape.h_q;
  const double scale = p.shape.softmax_scale;
  Oracle o;
  o.out.assign(B * s_q * h_q * 512, 0.0);
  o.out_tol.assign(B * s_q * h_q, 0.0);
  o.lse.assign(B * h_q * s_q, 0.0);
  o.lse_tol.assign(B * h_q * s_q, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = p.shape.lengths[b];
    std::vector<std::vector<double>> K;
    double vmax = 0;
    for (int64_t t = 0; t < len; ++t) {
      K.push_back(naive_entry(p.cache, b, t));
      for (int c = 0; c < 512; ++c) vmax = std::max(vmax, std::fabs(K.back()[c]));
    }
    for (int64_t i = 0; i < s_q; ++i) {
      int64_t n = p.shape.causal ? len - (s_q - 1 - i) : len;
      n = std::max<int64_t>(n, 0);
      for (int64_t h = 0; h < h_q; ++h) {
        std::vector<double> qv(kDqk);
        for (int c = 0; c < kDqk; ++c) qv[c] = p.q.get(((b * s_q + i) * h_q + h) * kDqk + c);
        const int64_t row = (b * s_q + i) * h_q + h, lrow = (b * h_q + h) * s_q + i;
        if (n == 0) {
          o.lse[lrow] = kNegInf;
          continue;
        }
        std::vector<double> logit(n);
        double E = 0;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0, mag = 0;
          for (int c = 0; c < kDqk; ++c) {
            dot += qv[c] * K[j][c];
            mag += std::fabs(qv[c] * K[j][c]);
          }
          logit[j] = scale * dot;
          E = std::max(E, 576 * kU * scale * mag);
        }
        const double mx = *std::max_element(logit.begin(), logit.end());
        double Z = 0;
        for (double l : logit) Z += std::exp(l - mx);
        for (int64_t j = 0; j < n; ++j) {
          const double pj = std::exp(logit[j] - mx) / Z;  // normalise first, then sum
          for (int c = 0; c < 512; ++c) o.out[row * 512 + c] += pj * K[j][c];
        }
        o.lse[lrow] = mx + std::log(Z);
        o.out_tol[row] = 2 * (4 * E * vmax + (n + 8) * kU * vmax);
        o.lse_tol[lrow] = 2 * (2 * E + (n + 8) * kU * (1 + std::fabs(o.lse[lrow])));
      }
    }
  }
  return o;
}

// out/lse of the library against the oracle; `rel` is the relative rounding
// of the output dtype (0 for f64; 2^-24 for f32; 2^-8 + 2^-24 for bf16, which
// the reference reaches through f32).
void expect_matches(const DecodeProblem& p, const Oracle& o, const HostTensor& out,
                    const HostTensor& lse, double out_rel, double lse_rel) {
  const int64_t rows = p.batch() * p.shape.s_q * p.shape.h_q;
  int bad = 0;
  for (int64_t r = 0; r < rows && bad < 5; ++r)
    for (int c = 0; c < 512; ++c) {
      const double want = o.out[r * 512 + c], got = out.get(r * 512 + c);
      const double tol = o.out_tol[r] + out_rel * std::fabs(want) + 1e-300;
      if (!(std::fabs(got - want) <= tol)) {
        ADD_FAILURE() << "out row " << r << " col " << c << ": got " << got << " want " << want
                      << " tol " << tol;
        ++bad;
        break;
      }
    }
  for (int64_t r = 0; r < rows; ++r) {
    const double want = o.lse[r], got = lse.get(r);
    if (want == kNegInf) {
      EXPECT_EQ(got, kNegInf) << "lse " << r;
      continue;
    }
    EXPECT_NEAR(got, want, o.lse_tol[r] + lse_rel * std::fabs(want)) << "lse " << r;
  }
}

// Runs mla_decode with f64 q/out/lse and checks against the oracle.
void check_f64(const DecodeProblem& p, const Oracle& o) {
  HostTensor out = p.make_out(DType::f64), lse = p.make_lse(DType::f64);
  Status st = mla_decode(p.args(p.q, out, lse));
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_matches(p, o, out, lse, 0.0, 0.0);
}

// Lengths covering the edges for a page size: empty, one token, fewer than s_q
// (early queries see nothing), less than a page, not a multiple of the page,
// several pages.
std::vector<int32_t> edge_lengths(int64_t page, int64_t s_q) {
  const int64_t several = page == 1 ? 9 : 2 * page + page / 3 + 1;
  return {0,
          1,
          int32_t(s_q - 1),
          int32_t(std::max<int64_t>(page - 1, 2)),
          int32_t(page + page / 2 + 1),
          int32_t(several)};
}

TEST(DecodeRef, MatchesNaiveOverPageSizesLengthsFormatsAndPadding) {
  Rng rng(1234);
  int case_id = 0;
  for (int64_t page : {1, 16, 37, 64, 128})
    for (KvFormat fmt : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
      DecodeShape s;
      s.s_q = 1 + case_id % 4;
      s.h_q = 16;
      s.lengths = edge_lengths(page, s.s_q);
      s.cache.format = fmt;
      s.cache.page_size = page;
      s.cache.page_pad = (case_id % 2) ? 40 : 0;  // padded page strides every other case
      s.cache.min_scale_exp = -9;
      s.cache.max_scale_exp = -7;
      ++case_id;
      SCOPED_TRACE(::testing::Message() << "page " << page << " format " << kv_format_name(fmt)
                                        << " s_q " << s.s_q << " pad " << s.cache.page_pad);
      DecodeProblem p = testing::make_decode_problem(rng, s);
      check_f64(p, naive_decode(p));
    }
}

TEST(DecodeRef, MatchesNaiveOverHeadCountsAndNewTokens) {
  Rng rng(99);
  const std::pair<int64_t, int64_t> heads_sq[] = {{16, 4}, {32, 3}, {64, 2}, {128, 1}, {128, 4}};
  int case_id = 0;
  for (auto [h, sq] : heads_sq) {
    DecodeShape s;
    s.h_q = h;
    s.s_q = sq;
    s.lengths = {3, 0, 70, 2};
    s.cache.format = (case_id++ % 2) ? KvFormat::fp8_ds_mla : KvFormat::bf16;
    s.cache.page_size = 64;
    s.cache.page_pad = 8;
    s.cache.min_scale_exp = -9;
    s.cache.max_scale_exp = -7;
    SCOPED_TRACE(::testing::Message() << "h_q " << h << " s_q " << sq);
    DecodeProblem p = testing::make_decode_problem(rng, s);
    check_f64(p, naive_decode(p));
  }
}

TEST(DecodeRef, NonCausalSeesEveryKey) {
  Rng rng(7);
  const DecodeShape s{.lengths = {2, 0, 45}, .s_q = 3, .cache = {.page_size = 16}, .causal = false};
  DecodeProblem p = testing::make_decode_problem(rng, s);
  check_f64(p, naive_decode(p));
}

// q as bf16/f32 holds the same numbers as the f64 q (they are bf16 values), so
// results must be bit-identical; f32 and bf16 outputs are the f64 result
// rounded once (bf16 through f32).
TEST(DecodeRef, InputAndOutputDtypes) {
  Rng rng(11);
  const DecodeShape s{.lengths = {1, 33, 0},
                      .s_q = 2,
                      .cache = {.format = KvFormat::fp8_ds_mla,
                                .page_size = 16,
                                .min_scale_exp = -9,
                                .max_scale_exp = -7}};
  DecodeProblem p = testing::make_decode_problem(rng, s);
  const Oracle o = naive_decode(p);

  HostTensor ref_out = p.make_out(DType::f64), ref_lse = p.make_lse(DType::f64);
  ASSERT_TRUE(mla_decode(p.args(p.q, ref_out, ref_lse)).ok());
  for (DType qt : {DType::bf16, DType::f32}) {
    HostTensor q = testing::convert(p.q, qt);
    HostTensor out = p.make_out(DType::f64), lse = p.make_lse(DType::f64);
    Status st = mla_decode(p.args(q, out, lse));
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(0, std::memcmp(out.storage.data(), ref_out.storage.data(), out.numel() * 8));
    EXPECT_EQ(0, std::memcmp(lse.storage.data(), ref_lse.storage.data(), lse.numel() * 8));
  }
  {
    HostTensor out = p.make_out(DType::f32), lse = p.make_lse(DType::f32);
    ASSERT_TRUE(mla_decode(p.args(p.q, out, lse)).ok());
    expect_matches(p, o, out, lse, 0x1p-24, 0x1p-24);
  }
  {
    HostTensor out = p.make_out(DType::bf16), lse = p.make_lse(DType::f32);
    ASSERT_TRUE(mla_decode(p.args(p.q, out, lse)).ok());
    expect_matches(p, o, out, lse, 0x1p-8 + 0x1p-24, 0x1p-24);
  }
}

// A q view with padded strides (rows of a larger buffer) reads the same values.
TEST(DecodeRef, StridedQuery) {
  Rng rng(5);
  const DecodeShape s{.lengths = {20, 9}, .s_q = 2, .cache = {.page_size = 8}};
  DecodeProblem p = testing::make_decode_problem(rng, s);
  HostTensor wide(DType::f64, {2, 2, 16, 640});  // 64 extra values per head row
  wide.poison();
  for (int64_t r = 0; r < 2 * 2 * 16; ++r)
    for (int c = 0; c < kDqk; ++c) wide.set(r * 640 + c, p.q.get(r * kDqk + c));
  HostTensor out = p.make_out(DType::f64), lse = p.make_lse(DType::f64);
  DecodeArgs a = p.args(p.q, out, lse);
  a.q = wide.view();
  a.q.shape[3] = kDqk;
  ASSERT_TRUE(mla_decode(a).ok());
  expect_matches(p, naive_decode(p), out, lse, 0, 0);
}

// ---- split-KV partials + merge ------------------------------------------------

// Random ranges [cut_k, cut_k+1) partition each request's keys (empty ranges
// included). The merge must give the unsplit result to 1e-12 relative: both
// paths compute every logit by the same code in the same order, so the only
// differences are the regrouped sums of n <= ~600 positive terms (relative
// n u ~ 7e-14) and exp/log of arguments |lse| < ~20 (relative ~20 u ~ 2e-15),
// propagated to a convex combination of values |v| <= vmax. 1e-12 vmax is a
// 10x margin over that worst case.
void check_split(KvFormat fmt, bool causal, uint64_t seed) {
  Rng rng(seed);
  DecodeShape s;
  s.s_q = 3;
  s.h_q = 16;
  s.causal = causal;
  s.lengths = {0, 37, 100, 2, 200};
  s.cache.format = fmt;
  s.cache.page_size = 16;
  s.cache.page_pad = 24;
  s.cache.min_scale_exp = -9;
  s.cache.max_scale_exp = -7;
  DecodeProblem p = testing::make_decode_problem(rng, s);
  const int64_t B = p.batch(), sq = s.s_q, h = s.h_q, S = 4;

  HostTensor full_out = p.make_out(DType::f64), full_lse = p.make_lse(DType::f64);
  ASSERT_TRUE(mla_decode(p.args(p.q, full_out, full_lse)).ok());

  HostTensor pout(DType::f64, {S, B, sq, h, kDv}), plse(DType::f64, {S, B, h, sq});
  pout.poison();
  plse.poison();
  std::vector<std::vector<int32_t>> cuts(B);
  for (int64_t b = 0; b < B; ++b) {
    cuts[b] = {0, int32_t(s.lengths[b])};
    for (int k = 0; k < S - 1; ++k) cuts[b].push_back(int32_t(rng.randint(0, s.lengths[b])));
    std::sort(cuts[b].begin(), cuts[b].end());
  }
  for (int64_t k = 0; k < S; ++k) {
    HostTensor begin(DType::i32, {B}), end(DType::i32, {B});
    for (int64_t b = 0; b < B; ++b) {
      begin.set(b, cuts[b][k]);
      end.set(b, cuts[b][k + 1]);
    }
    DecodePartialArgs pa;
    pa.base = p.args(p.q, full_out, full_lse);
    pa.base.out = pout.view();
    pa.base.out.ndim = 4;
    for (int d = 0; d < 4; ++d) {
      pa.base.out.shape[d] = pout.shape[d + 1];
      pa.base.out.strides[d] = pout.view().strides[d + 1];
    }
    pa.base.out.data = static_cast<double*>(pout.data()) + k * B * sq * h * kDv;
    pa.base.lse = TensorView::make(static_cast<double*>(plse.data()) + k * B * h * sq, DType::f64,
                                   {B, h, sq});
    pa.kv_begin = begin.view();
    pa.kv_end = end.view();
    Status st = mla_decode_partial(pa);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }

  // Rows (b, i, h) in out's order; the lse tensors are [.., h, s_q], so their
  // views over the rows are permuted (strided) views.
  HostTensor mout = p.make_out(DType::f64), mlse = p.make_lse(DType::f64);
  MergeArgs m;
  m.partial_out = pout.view();
  m.partial_lse = TensorView::make(plse.data(), DType::f64, {S, B, sq, h});
  m.partial_lse.strides[2] = 1;
  m.partial_lse.strides[3] = sq;
  m.out = mout.view();
  m.lse = TensorView::make(mlse.data(), DType::f64, {B, sq, h});
  m.lse.strides[1] = 1;
  m.lse.strides[2] = sq;
  Status st = merge_attn_partials(m);
  ASSERT_TRUE(st.ok()) << st.to_string();

  double vmax = 0;
  for (int64_t i = 0; i < full_out.numel(); ++i) vmax = std::max(vmax, std::fabs(full_out.get(i)));
  for (int64_t i = 0; i < full_out.numel(); ++i)
    ASSERT_NEAR(mout.get(i), full_out.get(i), 1e-12 * vmax) << "out element " << i;
  for (int64_t i = 0; i < full_lse.numel(); ++i) {
    if (full_lse.get(i) == kNegInf) {
      EXPECT_EQ(mlse.get(i), kNegInf);
      continue;
    }
    EXPECT_NEAR(mlse.get(i), full_lse.get(i), 1e-12 * (1 + std::fabs(full_lse.get(i))))
        << "lse " << i;
  }
}

TEST(DecodeSplit, RandomRangesMergeToUnsplitBf16Causal) {
  check_split(KvFormat::bf16, true, 21);
}
TEST(DecodeSplit, RandomRangesMergeToUnsplitFp8Causal) {
  check_split(KvFormat::fp8_ds_mla, true, 22);
}
TEST(DecodeSplit, RandomRangesMergeToUnsplitNonCausal) {
  check_split(KvFormat::bf16, false, 23);
}

// The merge alone, on f32 partials as GPU kernels write them, against the
// same merge written out here; an all--inf row gives 0 and -inf even when its
// partial outputs are garbage (NaN).
TEST(DecodeSplit, MergeF32PartialsAndEmptyRows) {
  Rng rng(3);
  const int64_t S = 3, R = 5, D = 7;
  HostTensor po = testing::random_tensor(rng, DType::f32, {S, R, D});
  HostTensor pl = testing::random_tensor(rng, DType::f32, {S, R}, -3, 3);
  for (int64_t s = 0; s < S; ++s) {
    pl.set(s * R + 2, kNegInf);  // row 2: no keys anywhere
    for (int64_t c = 0; c < D; ++c) po.set((s * R + 2) * D + c, NAN);
  }
  pl.set(1 * R + 4, kNegInf);  // row 4: one empty partial with garbage out
  for (int64_t c = 0; c < D; ++c) po.set((1 * R + 4) * D + c, NAN);
  HostTensor out(DType::f32, {R, D}), lse(DType::f32, {R});
  out.poison();
  lse.poison();
  Status st = merge_attn_partials({po.view(), pl.view(), out.view(), lse.view()});
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int64_t r = 0; r < R; ++r) {
    double Z = 0;
    std::vector<double> acc(D, 0.0);
    for (int64_t s = 0; s < S; ++s) {
      const double l = pl.get(s * R + r);
      if (l == kNegInf) continue;
      Z += std::exp(l);
      for (int64_t c = 0; c < D; ++c) acc[c] += std::exp(l) * po.get((s * R + r) * D + c);
    }
    if (Z == 0) {
      EXPECT_EQ(lse.get(r), kNegInf);
      for (int64_t c = 0; c < D; ++c) EXPECT_EQ(out.get(r * D + c), 0.0);
      continue;
    }
    // f32 output: one rounding (2^-24 relative) of an fp64 result.
    EXPECT_NEAR(lse.get(r), std::log(Z), 1e-6 * (1 + std::fabs(std::log(Z))));
    for (int64_t c = 0; c < D; ++c) EXPECT_NEAR(out.get(r * D + c), acc[c] / Z, 1e-6);
  }
}

}  // namespace
}  // namespace mla
