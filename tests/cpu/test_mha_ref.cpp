// The non-absorbed form: causal varlen MHA against a naive masked softmax, and
// the proof that absorbed decode followed by W_UV computes the same function
// as decompression + MHA (docs/design.md section 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/decode_problem.hpp"
#include "common/expect_status.hpp"
#include "common/random.hpp"
#include "mla/decode.hpp"
#include "mla/prefill.hpp"

namespace mla {
namespace {

using testing::expect_error;
using Row = testing::BadRow<MhaPrefillArgs>;

using testing::HostTensor;
using testing::Rng;

constexpr double kU = 0x1p-53;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Varlen {
  std::vector<int32_t> len_q, len_k;
  HostTensor cu_q, cu_k;
  int64_t T = 0, Tk = 0;
  Varlen(std::vector<int32_t> lq, std::vector<int32_t> lk) : len_q(lq), len_k(lk) {
    const int64_t B = lq.size();
    cu_q = HostTensor(DType::i32, {B + 1});
    cu_k = HostTensor(DType::i32, {B + 1});
    for (int64_t b = 0; b < B; ++b) {
      cu_q.set(b, T);
      cu_k.set(b, Tk);
      T += lq[b];
      Tk += lk[b];
    }
    cu_q.set(B, T);
    cu_k.set(B, Tk);
  }
};

// Naive: the full masked score matrix of each sequence, softmax by
// log-sum-exp. Mask (bottom-right): query i of len_q may see key j of len_k
// iff j - i <= len_k - len_q. Bound as in test_decode_ref: each logit is a
// d_qk-term dot product off by <= d_qk u scale sum|q k| on each side (E);
// out moves by <= 4 E vmax + n u vmax, lse by <= 2E + n u; doubled.
void check_against_naive(const Varlen& vl, int64_t H, int64_t d_qk, int64_t d_v, bool causal,
                         uint64_t seed) {
  Rng rng(seed);
  HostTensor q = testing::random_tensor(rng, DType::f64, {vl.T, H, d_qk});
  HostTensor k = testing::random_tensor(rng, DType::f64, {vl.Tk, H, d_qk});
  HostTensor v = testing::random_tensor(rng, DType::f64, {vl.Tk, H, d_v});
  HostTensor out(DType::f64, {vl.T, H, d_v}), lse(DType::f64, {H, vl.T});
  out.poison();
  lse.poison();
  const float scale = 0.3f;
  MhaPrefillArgs a{q.view(), k.view(), v.view(),   vl.cu_q.view(), vl.cu_k.view(),
                   scale,    causal,   out.view(), lse.view()};
  Status st = mha_prefill(a);
  ASSERT_TRUE(st.ok()) << st.to_string();

  int64_t q0 = 0, k0 = 0;
  for (size_t b = 0; b < vl.len_q.size(); ++b) {
    const int64_t Lq = vl.len_q[b], Lk = vl.len_k[b];
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> logit;
        std::vector<int64_t> keys;
        double E = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          if (causal && j - i > Lk - Lq) continue;
          double dot = 0, mag = 0;
          for (int64_t d = 0; d < d_qk; ++d) {
            const double t =
                q.get(((q0 + i) * H + h) * d_qk + d) * k.get(((k0 + j) * H + h) * d_qk + d);
            dot += t;
            mag += std::fabs(t);
          }
          logit.push_back(scale * dot);
          keys.push_back(j);
          E = std::max(E, d_qk * kU * scale * mag);
        }
        const double got_lse = lse.get(h * vl.T + q0 + i);
        if (keys.empty()) {
          EXPECT_EQ(got_lse, kNegInf) << "b " << b << " i " << i;
          for (int64_t d = 0; d < d_v; ++d) EXPECT_EQ(out.get(((q0 + i) * H + h) * d_v + d), 0.0);
          continue;
        }
        const double mx = *std::max_element(logit.begin(), logit.end());
        double Z = 0;
        for (double l : logit) Z += std::exp(l - mx);
        const double want_lse = mx + std::log(Z);
        const double n = double(keys.size());
        EXPECT_NEAR(got_lse, want_lse, 2 * (2 * E + (n + 8) * kU * (1 + std::fabs(want_lse))));
        for (int64_t d = 0; d < d_v; ++d) {
          double want = 0, vmax = 0;
          for (size_t jj = 0; jj < keys.size(); ++jj) {
            const double vv = v.get(((k0 + keys[jj]) * H + h) * d_v + d);
            want += std::exp(logit[jj] - want_lse) * vv;
            vmax = std::max(vmax, std::fabs(vv));
          }
          ASSERT_NEAR(out.get(((q0 + i) * H + h) * d_v + d), want,
                      2 * (4 * E * vmax + (n + 8) * kU * vmax) + 1e-300)
              << "b " << b << " i " << i << " h " << h << " d " << d;
        }
      }
    q0 += Lq;
    k0 += Lk;
  }
}

TEST(MhaRef, MatchesNaiveMaskedSoftmaxVarlen) {
  // Full prefill (len_q == len_k), a chunk after cached tokens (len_q < len_k),
  // more queries than keys (early ones see nothing), and empty sequences.
  Varlen vl({3, 2, 4, 0, 1, 2}, {3, 7, 2, 5, 1, 0});
  check_against_naive(vl, 4, 24, 16, /*causal=*/true, 1);
  check_against_naive(vl, 4, 24, 16, /*causal=*/false, 2);
}

TEST(MhaRef, DeepSeekHeadDims) {
  Varlen vl({5, 1}, {9, 4});
  check_against_naive(vl, 2, 192, 128, true, 3);
}

TEST(MhaRef, DecompressMatchesMatmul) {
  Rng rng(4);
  const int64_t N = 3, H = 2, dc = 512, dn = 128, dv = 128;
  HostTensor c = testing::random_tensor(rng, DType::bf16, {N, dc});
  HostTensor wk = testing::random_tensor(rng, DType::f32, {H, dn, dc});
  HostTensor wv = testing::random_tensor(rng, DType::f32, {H, dv, dc});
  HostTensor kn(DType::f64, {N, H, dn}), v(DType::f32, {N, H, dv});
  kn.poison();
  v.poison();
  Status st = decompress_kv({c.view(), wk.view(), wv.view(), kn.view(), v.view()});
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < dn; ++d) {
        // Summed backwards here: a different order, same products. 512 terms
        // of |w c| <= 1: the two orders differ by <= 2 * 512 u * sum|w c|.
        double k = 0, vv = 0, mk = 0, mv = 0;
        for (int64_t i = dc - 1; i >= 0; --i) {
          k += wk.get((h * dn + d) * dc + i) * c.get(n * dc + i);
          vv += wv.get((h * dv + d) * dc + i) * c.get(n * dc + i);
          mk += std::fabs(wk.get((h * dn + d) * dc + i) * c.get(n * dc + i));
          mv += std::fabs(wv.get((h * dv + d) * dc + i) * c.get(n * dc + i));
        }
        EXPECT_NEAR(kn.get((n * H + h) * dn + d), k, 2 * 512 * kU * mk);
        // v is f32: one more rounding, 2^-24 relative.
        EXPECT_NEAR(v.get((n * H + h) * dv + d), vv, 2 * 512 * kU * mv + 0x1p-24 * std::fabs(vv));
      }
}

// Absorbed vs non-absorbed on the same random inputs, fp64 throughout:
//   absorbed:     q~ = [W_UK[h]^T q_nope ; q_rope], cache entries [c_kv ; k_rope],
//                 mla_decode -> o_lat (512), then o = W_UV[h] o_lat
//   non-absorbed: k_nope, v = decompress_kv(c_kv), k = [k_nope ; k_rope],
//                 q = [q_nope ; q_rope], mha_prefill (bottom-right causal)
// Both evaluate q_nope^T W_UK c = (W_UK^T q_nope) . c in two associations, so
// logits differ by <= E = 2 * 640 u * scale * (|q_nope|_1 max|W_UK| |c|_1 +
// sum|q_rope k_rope|); out by <= 4 E vmax plus the W_UV products on either
// side (<= 2 * 512 u max|W_UV| |c|_1 each way), lse by <= 2E. Doubled.
TEST(MhaRef, AbsorbedDecodeEqualsNonAbsorbedMha) {
  Rng rng(5);
  testing::DecodeShape s;
  s.s_q = 3;
  s.h_q = 16;
  s.lengths = {37, 2, 20};  // request 1: shorter than s_q, its first query sees nothing
  s.cache.page_size = 16;
  s.cache.page_pad = 8;
  testing::DecodeProblem p = testing::make_decode_problem(rng, s);
  const int64_t B = p.batch(), sq = s.s_q, H = s.h_q, dn = 128, dr = 64, dc = 512;
  const double scale = s.softmax_scale;

  HostTensor w_uk = testing::random_tensor(rng, DType::f64, {H, dn, dc}, -0.1, 0.1);
  HostTensor w_uv = testing::random_tensor(rng, DType::f64, {H, dn, dc}, -0.1, 0.1);
  HostTensor q_nope = testing::random_tensor(rng, DType::f64, {B * sq, H, dn});
  HostTensor q_rope = testing::random_tensor(rng, DType::f64, {B * sq, H, dr});

  // The cache's tokens, read from its bf16 bytes, packed as the MHA's keys.
  std::vector<int32_t> lq(B, int32_t(sq));
  Varlen vl(lq, s.lengths);
  HostTensor c_kv(DType::f64, {vl.Tk, dc}), k_rope(DType::f64, {vl.Tk, dr});
  double c_l1 = 0;
  for (int64_t b = 0, t = 0; b < B; ++b)
    for (int64_t pos = 0; pos < s.lengths[b]; ++pos, ++t) {
      const uint8_t* e = p.cache.entry(b, pos);
      double l1 = 0;
      for (int i = 0; i < dc + dr; ++i) {
        bf16 h;
        std::memcpy(&h.bits, e + 2 * i, 2);
        const double x = bf16_to_float(h);
        if (i < dc) {
          c_kv.set(t * dc + i, x);
          l1 += std::fabs(x);
        } else {
          k_rope.set(t * dr + i - dc, x);
        }
      }
      c_l1 = std::max(c_l1, l1);
    }

  // ---- absorbed ----
  HostTensor q_abs(DType::f64, {B, sq, H, 576});
  for (int64_t r = 0; r < B * sq; ++r)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < dc; ++c) {
        double acc = 0;
        for (int64_t d = 0; d < dn; ++d)
          acc += w_uk.get((h * dn + d) * dc + c) * q_nope.get((r * H + h) * dn + d);
        q_abs.set((r * H + h) * 576 + c, acc);
      }
      for (int64_t d = 0; d < dr; ++d)
        q_abs.set((r * H + h) * 576 + dc + d, q_rope.get((r * H + h) * dr + d));
    }
  HostTensor o_lat = p.make_out(DType::f64), lse_abs = p.make_lse(DType::f64);
  Status st = mla_decode(p.args(q_abs, o_lat, lse_abs));
  ASSERT_TRUE(st.ok()) << st.to_string();

  // ---- non-absorbed ----
  HostTensor k_nope(DType::f64, {vl.Tk, H, dn}), v(DType::f64, {vl.Tk, H, dn});
  st = decompress_kv({c_kv.view(), w_uk.view(), w_uv.view(), k_nope.view(), v.view()});
  ASSERT_TRUE(st.ok()) << st.to_string();
  HostTensor q(DType::f64, {vl.T, H, dn + dr}), k(DType::f64, {vl.Tk, H, dn + dr});
  for (int64_t t = 0; t < vl.T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < dn + dr; ++d)
        q.set((t * H + h) * 192 + d,
              d < dn ? q_nope.get((t * H + h) * dn + d) : q_rope.get((t * H + h) * dr + d - dn));
  for (int64_t t = 0; t < vl.Tk; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < dn + dr; ++d)
        k.set((t * H + h) * 192 + d,
              d < dn ? k_nope.get((t * H + h) * dn + d) : k_rope.get(t * dr + d - dn));
  HostTensor out(DType::f64, {vl.T, H, dn}), lse(DType::f64, {H, vl.T});
  out.poison();
  lse.poison();
  st = mha_prefill({q.view(), k.view(), v.view(), vl.cu_q.view(), vl.cu_k.view(), float(scale),
                    true, out.view(), lse.view()});
  ASSERT_TRUE(st.ok()) << st.to_string();

  // ---- compare ----
  double vmax = 0;
  for (int64_t i = 0; i < v.numel(); ++i) vmax = std::max(vmax, std::fabs(v.get(i)));
  int checked_empty = 0;
  double worst = 0;  // largest |error| / bound seen, reported below
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t r = b * sq + i;  // token row in the MHA packing
        double qn_l1 = 0, qr_l1 = 0;
        for (int64_t d = 0; d < dn; ++d) qn_l1 += std::fabs(q_nope.get((r * H + h) * dn + d));
        for (int64_t d = 0; d < dr; ++d) qr_l1 += std::fabs(q_rope.get((r * H + h) * dr + d));
        const double E = 2 * 640 * kU * scale * (qn_l1 * 0.1 * c_l1 + qr_l1 * 1.0);
        const double uv = 2 * 512 * kU * 0.1 * c_l1;
        const double la = lse_abs.get((b * H + h) * sq + i), lm = lse.get(h * vl.T + r);
        if (la == kNegInf) {
          EXPECT_EQ(lm, kNegInf);
          ++checked_empty;
        } else {
          EXPECT_NEAR(lm, la, 2 * (2 * E + 64 * kU * (1 + std::fabs(la))));
        }
        for (int64_t d = 0; d < dn; ++d) {
          double o = 0;  // W_UV applied to the absorbed latent output
          for (int64_t c = 0; c < dc; ++c)
            o += w_uv.get((h * dn + d) * dc + c) * o_lat.get((r * H + h) * dc + c);
          const double bound = 2 * (4 * E * vmax + 2 * uv);
          ASSERT_NEAR(out.get((r * H + h) * dn + d), o, bound)
              << "b " << b << " i " << i << " h " << h << " d " << d;
          worst = std::max(worst, std::fabs(out.get((r * H + h) * dn + d) - o) / bound);
        }
      }
  EXPECT_EQ(checked_empty, H) << "request 1's first query must see no key in both forms";
  RecordProperty("largest_error_over_bound", std::to_string(worst));
  std::printf("absorbed vs non-absorbed: largest |error| is %.3g of the bound\n", worst);
}

TEST(MhaRef, Validation) {
  Rng rng(6);
  Varlen vl({2, 3}, {4, 3});
  HostTensor q = testing::random_tensor(rng, DType::f32, {5, 2, 24});
  HostTensor k = testing::random_tensor(rng, DType::f32, {7, 2, 24});
  HostTensor v = testing::random_tensor(rng, DType::f32, {7, 2, 16});
  HostTensor out(DType::f32, {5, 2, 16}), lse(DType::f32, {2, 5});
  const MhaPrefillArgs good{q.view(), k.view(), v.view(),   vl.cu_q.view(), vl.cu_k.view(),
                            0.2f,     true,     out.view(), lse.view()};
  ASSERT_TRUE(mha_prefill(good).ok());
  const std::vector<Row> rows = {
      Row(Errc::invalid_shape, {"k", "20", "24"}, [](auto& a) { a.k.shape[2] = 20; }),
      Row(Errc::invalid_shape, {"v", "6", "7"}, [](auto& a) { a.v.shape[0] = 6; }),
      Row(Errc::invalid_shape, {"lse", "[5, 2]", "[h, T]"},
          [](auto& a) {
            a.lse.shape[0] = 5;
            a.lse.shape[1] = 2;
          }),
      Row(Errc::invalid_dtype, {"q", "i32"}, [](auto& a) { a.q.dtype = DType::i32; }),
      Row(Errc::invalid_dtype, {"cu_seqlens_k", "i64"},
          [](auto& a) { a.cu_seqlens_k.dtype = DType::i64; }),
      Row(Errc::invalid_shape, {"cu_seqlens_k", "[4]"},
          [](auto& a) { a.cu_seqlens_k.shape[0] = 4; }),
      Row(Errc::invalid_value, {"softmax_scale = -1"}, [](auto& a) { a.softmax_scale = -1.f; }),
      Row(Errc::invalid_device, {"out"}, [](auto& a) { a.out.device = Device::cuda(0); }),
      Row(Errc::unsupported, {"mha_prefill"},
          [](auto& a) {
            a.q.device = a.k.device = a.v.device = a.out.device = a.lse.device =
                a.cu_seqlens_q.device = a.cu_seqlens_k.device = Device::cuda(0);
          }),
  };
  testing::expect_errors(
      good, [](const MhaPrefillArgs& a) { return mha_prefill(a); }, rows);

  vl.cu_q.set(1, 6);  // 0, 6, 5: decreasing
  expect_error(mha_prefill(good), Errc::out_of_range,
               {"cu_seqlens_q[2] = 5 is less than cu_seqlens_q[1] = 6"});
  vl.cu_q.set(1, 2);
  vl.cu_k.set(2, 8);
  expect_error(mha_prefill(good), Errc::out_of_range, {"cu_seqlens_k[2] = 8", "Tk", "7"});
  vl.cu_k.set(2, 7);
  vl.cu_k.set(0, 1);
  expect_error(mha_prefill(good), Errc::invalid_value, {"cu_seqlens_k[0] = 1"});

  HostTensor c = testing::random_tensor(rng, DType::f32, {3, 32});
  HostTensor wk = testing::random_tensor(rng, DType::f32, {2, 8, 32});
  HostTensor wv = testing::random_tensor(rng, DType::f32, {2, 4, 32});
  HostTensor kn(DType::f32, {3, 2, 8}), vv(DType::f32, {3, 2, 4});
  const DecompressKvArgs dgood{c.view(), wk.view(), wv.view(), kn.view(), vv.view()};
  ASSERT_TRUE(decompress_kv(dgood).ok());
  DecompressKvArgs d = dgood;
  d.w_uv.shape[2] = 31;
  expect_error(decompress_kv(d), Errc::invalid_shape, {"w_uv", "31", "32"});
  d = dgood;
  d.v.shape[2] = 8;
  expect_error(decompress_kv(d), Errc::invalid_shape, {"v", "[3, 2, 8]"});
  d = dgood;
  d.k_nope.dtype = DType::u8;
  expect_error(decompress_kv(d), Errc::invalid_dtype, {"k_nope", "u8"});
}

}  // namespace
}  // namespace mla
