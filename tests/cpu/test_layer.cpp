// The whole V3.2 attention layer (mla/layer.hpp) on a small config against an
// independent fp64 evaluation written here with straight loops (no library
// op), for both attention forms; cache consistency (decode after prefill =
// one long prefill); DSA with top-k >= L equal to dense; argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "common/expect_status.hpp"
#include "common/random.hpp"
#include "mla/layer.hpp"
#include "mla/numeric.hpp"
#include "mla/rope.hpp"

namespace mla {
namespace {

using testing::expect_error;
using testing::Rng;

// Owns one layer's weights as contiguous f64 arrays.
struct OwnedWeights {
  std::vector<std::vector<double>> data;
  LayerWeights views;
  LayerWeightShape shapes[kLayerWeightCount];
  OwnedWeights(const LayerConfig& c, uint64_t seed) {
    EXPECT_TRUE(layer_weight_shapes(c, shapes).ok());
    data.resize(kLayerWeightCount);
    for (int i = 0; i < kLayerWeightCount; ++i) {
      const LayerWeightShape& s = shapes[i];
      int64_t n = 1;
      for (int d = 0; d < s.ndim; ++d) n *= s.shape[d];
      data[i].assign(n, std::nan(""));  // poison: init must write every value
      TensorView& v = layer_weight(views, i);
      if (s.ndim == 1) v = TensorView::make(data[i].data(), DType::f64, {s.shape[0]});
      if (s.ndim == 2) v = TensorView::make(data[i].data(), DType::f64, {s.shape[0], s.shape[1]});
      if (s.ndim == 3)
        v = TensorView::make(data[i].data(), DType::f64, {s.shape[0], s.shape[1], s.shape[2]});
    }
    const Status st = init_layer_weights(c, seed, views);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  const double* w(int i) const { return data[i].data(); }
};

// Paged caches for B requests, pages handed out in a scrambled order.
struct Caches {
  int64_t B, page, pages_per_req;
  KvFormat format;
  std::vector<uint16_t> bf16;  // bf16 cache storage
  std::vector<uint8_t> bytes;  // fp8 cache storage
  std::vector<uint8_t> index;  // indexer cache
  std::vector<int32_t> table;
  KvCacheView kv;
  IndexerCacheView index_cache;
  TensorView block_table;
  Caches(int64_t B_, int64_t page_, int64_t max_len, KvFormat f, bool with_index)
      : B(B_), page(page_), pages_per_req((max_len + page_ - 1) / page_), format(f) {
    const int64_t num_pages = B * pages_per_req + 3;  // spare pages nobody owns
    const int64_t entry = kv_entry_bytes(f);
    if (f == KvFormat::bf16) {
      bf16.assign(num_pages * page * kDqk, 0x7FC1);  // NaN poison
      kv.data = TensorView::make(bf16.data(), DType::bf16, {num_pages, page, 1, kDqk});
    } else {
      bytes.assign(num_pages * page * entry, 0xFF);
      kv.data = TensorView::make(bytes.data(), DType::u8, {num_pages, page, 1, entry});
    }
    kv.format = f;
    table.resize(B * pages_per_req);
    int64_t step = 7;  // a stride coprime with num_pages makes i -> (i * step + 2) a permutation
    while (std::gcd(step, num_pages) != 1) ++step;
    for (int64_t i = 0; i < B * pages_per_req; ++i) table[i] = int32_t((i * step + 2) % num_pages);
    block_table = TensorView::make(table.data(), DType::i32, {B, pages_per_req});
    if (with_index) {
      index.assign(num_pages * IndexerCacheLayout::kPageBytes, 0xFF);
      index_cache.data =
          TensorView::make(index.data(), DType::u8, {num_pages, IndexerCacheLayout::kPageBytes});
    }
  }
};

// hidden states of B requests x L tokens, O(1) values.
std::vector<double> random_hidden(Rng& rng, int64_t B, int64_t L, int64_t D) {
  std::vector<double> h(B * L * D);
  for (double& x : h) x = rng.uniform(-1.7, 1.7);  // unit variance
  return h;
}

// A small-config layer: seeded weights (seed) and random hidden states (seed + 1) of
// B requests x L tokens of width D.
struct LayerProblem {
  LayerConfig c = small_test_layer();
  OwnedWeights w;
  int64_t B, L, D;
  std::vector<double> hidden;
  LayerProblem(int64_t B_, int64_t L_, uint64_t seed) : w(c, seed), B(B_), L(L_), D(c.hidden) {
    Rng rng(seed + 1);
    hidden = random_hidden(rng, B, L, D);
  }
};

// Runs the layer on tokens [t0, t0 + s_q) of every request (lengths t0 + s_q).
std::vector<double> run_layer(const LayerConfig& c, const OwnedWeights& w, Caches& caches,
                              const std::vector<double>& hidden, int64_t L, int64_t t0, int64_t s_q,
                              LayerAttention attention) {
  const int64_t B = caches.B, D = c.hidden;
  std::vector<double> x(B * s_q * D), out(B * s_q * D, std::nan(""));
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(hidden.data() + (b * L + t0) * D, s_q * D, x.data() + b * s_q * D);
  std::vector<int32_t> lens(B, int32_t(t0 + s_q));
  LayerForwardArgs a;
  a.config = c;
  a.weights = w.views;
  a.hidden = TensorView::make(x.data(), DType::f64, {B, s_q, D});
  a.kv = caches.kv;
  a.index_cache = caches.index_cache;
  a.block_table = caches.block_table;
  a.cache_seqlens = TensorView::make(lens.data(), DType::i32, {B});
  a.attention = attention;
  a.out = TensorView::make(out.data(), DType::f64, {B, s_q, D});
  const Status st = layer_forward(a);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// ---- The independent evaluation: the layer's formula, token by token --------

std::vector<double> matvec(const double* W, int64_t out, int64_t in, const double* x) {
  std::vector<double> y(out, 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) y[o] += W[o * in + i] * x[i];
  return y;
}
void rmsnorm(std::vector<double>& x, const double* g, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1 / std::sqrt(ss / x.size() + eps);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= r * g[i];
}
// Interleaved pairs (2i, 2i+1) rotated by pos * inv_freq[i] (MLA's layout).
void rope_interleaved(double* x, int64_t pos, const std::vector<double>& inv_freq) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double th = double(pos) * inv_freq[i], cs = std::cos(th), sn = std::sin(th);
    const double a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cs - b * sn;
    x[2 * i + 1] = a * sn + b * cs;
  }
}
double bf16_round(double v) {
  return round_to_bf16(float(v));
}

// out [L, hidden] of one request whose L tokens all attend causally, with the
// cache's bf16 rounding of c_kv and k_rope (the only rounding the stored
// precision imposes; everything else exact).
std::vector<double> naive_layer(const LayerConfig& c, const OwnedWeights& w, const double* hidden,
                                int64_t L) {
  const int64_t D = c.hidden, H = c.heads, dn = c.d_nope, dr = c.d_rope, dv = c.d_v, dc = kDc;
  const int64_t qr = c.q_lora_rank;
  std::vector<double> inv_freq(dr / 2);
  EXPECT_TRUE(rope_inv_freq(c.rope, TensorView::make(inv_freq.data(), DType::f64, {dr / 2})).ok());
  EXPECT_EQ(rope_attention_factor(c.rope), 1.0);  // V3's config: cos/sin unscaled
  std::vector<std::vector<double>> q(L), ckv(L), kr(L);
  for (int64_t t = 0; t < L; ++t) {
    std::vector<double> ql = matvec(w.w(0), qr, D, hidden + t * D);
    rmsnorm(ql, w.w(1), c.norm_eps);
    q[t] = matvec(w.w(2), H * (dn + dr), qr, ql.data());
    for (int64_t h = 0; h < H; ++h) rope_interleaved(q[t].data() + h * (dn + dr) + dn, t, inv_freq);
    std::vector<double> kv = matvec(w.w(3), dc + dr, D, hidden + t * D);
    ckv[t].assign(kv.begin(), kv.begin() + dc);
    kr[t].assign(kv.begin() + dc, kv.end());
    rmsnorm(ckv[t], w.w(4), c.norm_eps);
    rope_interleaved(kr[t].data(), t, inv_freq);
    for (double& v : ckv[t]) v = bf16_round(v);
    for (double& v : kr[t]) v = bf16_round(v);
  }
  const double* wuk = w.w(5);
  const double* wuv = w.w(6);
  const double scale = layer_softmax_scale(c);
  std::vector<double> out(L * D);
  for (int64_t t = 0; t < L; ++t) {
    std::vector<double> o(H * dv, 0.0);
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> s(t + 1);
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < dn; ++d) {
          double k = 0;
          for (int64_t cc = 0; cc < dc; ++cc) k += wuk[(h * dn + d) * dc + cc] * ckv[j][cc];
          dot += q[t][h * (dn + dr) + d] * k;
        }
        for (int64_t d = 0; d < dr; ++d) dot += q[t][h * (dn + dr) + dn + d] * kr[j][d];
        s[j] = scale * dot;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - m));
      for (int64_t d = 0; d < dv; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double v = 0;
          for (int64_t cc = 0; cc < dc; ++cc) v += wuv[(h * dv + d) * dc + cc] * ckv[j][cc];
          acc += s[j] / z * v;
        }
        o[h * dv + d] = acc;
      }
    }
    std::vector<double> y = matvec(w.w(7), D, H * dv, o.data());
    std::copy(y.begin(), y.end(), out.begin() + t * D);
  }
  return out;
}

// Max |a - b| over max |b|: one number per comparison.
double rel_err(const double* a, const double* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(std::isfinite(a[i])) << "entry " << i;
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

// Bound: the layer keeps everything in fp64 except the absorbed query q~ and
// the latent output, which mla_decode takes and returns in f32 (relative
// 2^-24 each, amplified by at most the softmax's logit sensitivity ~ |logit|
// ~ 10 here) and the f32 hand-off of c_kv / k_rope before the bf16 cache
// rounding (a double rounding that can flip a bf16 tie: 2^-8 relative on that
// one value, which never happens on random data in practice). 1e-5 leaves
// 10x margin over the f32 terms; a wrong rope pair, norm, mask or head mix
// gives O(1) errors.
constexpr double kTol = 1e-5;

TEST(Layer, ConfigsHaveTheRealDimensions) {
  const LayerConfig v = deepseek_v32_layer();
  EXPECT_EQ(v.hidden, 7168);
  EXPECT_EQ(v.q_lora_rank, 1536);
  EXPECT_EQ(v.kv_lora_rank, 512);
  EXPECT_EQ(v.heads, 128);
  EXPECT_EQ(v.d_nope + v.d_rope, 192);
  EXPECT_EQ(v.index_topk, 2048);
  EXPECT_NEAR(layer_softmax_scale(v), 0.135234, 1e-6);
  LayerWeightShape s[kLayerWeightCount];
  ASSERT_TRUE(layer_weight_shapes(v, s).ok());
  EXPECT_EQ(s[2].shape[0], 128 * 192);  // wq_b
  EXPECT_EQ(s[3].shape[0], 576);        // wkv_a
  EXPECT_EQ(s[7].shape[1], 128 * 128);  // wo
  EXPECT_EQ(s[8].shape[0], 64 * 128);   // indexer wq_b
}

TEST(Layer, SeededWeightsAreDeterministicAndScaled) {
  const LayerConfig c = small_test_layer();
  OwnedWeights a(c, 7), b(c, 7), d(c, 8);
  for (int i = 0; i < kLayerWeightCount; ++i) {
    EXPECT_EQ(a.data[i], b.data[i]) << a.shapes[i].name;
    EXPECT_NE(a.data[i], d.data[i]) << a.shapes[i].name;
  }
  // wq_a [64, 256]: uniform in +-sqrt(3/256): variance 1/256 per weight.
  double ss = 0;
  for (double v : a.data[0]) ss += v * v;
  EXPECT_NEAR(ss / a.data[0].size(), 1.0 / 256, 0.1 / 256);
}

TEST(Layer, PrefillAndDecodeEqualTheNaiveLayer) {
  const LayerProblem p(2, 22, 11);
  const auto& [c, w, B, L, D, hidden] = p;
  std::vector<std::vector<double>> naive(B);
  for (int64_t b = 0; b < B; ++b) naive[b] = naive_layer(c, w, hidden.data() + b * L * D, L);

  for (LayerAttention first : {LayerAttention::non_absorbed, LayerAttention::absorbed}) {
    SCOPED_TRACE(layer_attention_name(first));
    // Page 16: the chunks cross page boundaries (6, 12, 18 tokens).
    Caches caches(B, 16, L, KvFormat::bf16, false);
    int64_t t0 = 0;
    for (int64_t s_q : {6, 6, 6, 1, 2, 1}) {
      // Prefill chunks in the form under test, then decode steps absorbed.
      const LayerAttention att = s_q > 2 ? first : LayerAttention::absorbed;
      const std::vector<double> out = run_layer(c, w, caches, hidden, L, t0, s_q, att);
      for (int64_t b = 0; b < B; ++b) {
        SCOPED_TRACE(::testing::Message()
                     << "b " << b << " tokens [" << t0 << ", " << t0 + s_q << ")");
        EXPECT_LT(rel_err(out.data() + b * s_q * D, naive[b].data() + t0 * D, s_q * D), kTol);
      }
      t0 += s_q;
    }
    ASSERT_EQ(t0, L);
  }
}

TEST(Layer, DecodeAfterPrefillEqualsOneLongPrefill) {
  const LayerProblem p(2, 37, 21);
  const auto& [c, w, B, L, D, hidden] = p;
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
    SCOPED_TRACE(kv_format_name(f));
    Caches step(B, 32, L, f, false), whole(B, 32, L, f, false);
    run_layer(c, w, step, hidden, L, 0, L - 1, LayerAttention::non_absorbed);
    const std::vector<double> last =
        run_layer(c, w, step, hidden, L, L - 1, 1, LayerAttention::absorbed);
    const std::vector<double> all =
        run_layer(c, w, whole, hidden, L, 0, L, LayerAttention::non_absorbed);
    for (int64_t b = 0; b < B; ++b)
      EXPECT_LT(rel_err(last.data() + b * D, all.data() + (b * L + L - 1) * D, D), kTol);
    // The two caches hold the same bytes for the written tokens (same values,
    // same slots): the step-wise path wrote nothing different.
    const TensorView& a = step.kv.data;
    const size_t n = size_t(a.numel()) * dtype_size(a.dtype);
    EXPECT_EQ(std::memcmp(step.kv.data.data, whole.kv.data.data, n), 0);
  }
}

TEST(Layer, SparseWithTopkCoveringEveryKeyEqualsDense) {
  // top-k 64 >= every length here, so the indexer selects every causal key
  // and DSA must equal dense absorbed attention (the order of the selected
  // keys differs; the result is a sum).
  const LayerProblem p(2, 60, 31);
  const auto& [c, w, B, L, D, hidden] = p;
  ASSERT_EQ(c.index_topk, 64);
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
    SCOPED_TRACE(kv_format_name(f));
    Caches sparse(B, 64, L, f, true), dense(B, 64, L, f, true);
    int64_t t0 = 0;
    for (int64_t s_q : {40, 3, 1, 16}) {
      const std::vector<double> s =
          run_layer(c, w, sparse, hidden, L, t0, s_q, LayerAttention::sparse);
      const std::vector<double> d =
          run_layer(c, w, dense, hidden, L, t0, s_q, LayerAttention::absorbed);
      EXPECT_LT(rel_err(s.data(), d.data(), B * s_q * D), kTol) << "tokens from " << t0;
      t0 += s_q;
    }
    // Both wrote the same indexer keys.
    EXPECT_EQ(sparse.index, dense.index);
  }
}

TEST(Layer, SparseWithFewerKeysThanContextDiffersFromDense) {
  // Past top-k (64) keys the indexer must drop some: the output must move
  // (a DSA path that silently attended to everything would pass the test above).
  const LayerProblem p(1, 130, 41);
  const auto& [c, w, B, L, D, hidden] = p;
  Caches sparse(B, 64, L, KvFormat::bf16, true), dense(B, 64, L, KvFormat::bf16, true);
  run_layer(c, w, sparse, hidden, L, 0, L - 1, LayerAttention::absorbed);
  run_layer(c, w, dense, hidden, L, 0, L - 1, LayerAttention::absorbed);
  const std::vector<double> s =
      run_layer(c, w, sparse, hidden, L, L - 1, 1, LayerAttention::sparse);
  const std::vector<double> d =
      run_layer(c, w, dense, hidden, L, L - 1, 1, LayerAttention::absorbed);
  EXPECT_GT(rel_err(s.data(), d.data(), D), 1e-3);
}

// ---- errors ------------------------------------------------------------------

struct ErrorSetup {
  LayerConfig c = small_test_layer();
  OwnedWeights w{c, 51};
  Caches caches{1, 64, 64, KvFormat::bf16, true};
  std::vector<double> x = std::vector<double>(2 * c.hidden, 0.25),
                      out = std::vector<double>(2 * c.hidden);
  std::vector<int32_t> lens{2};
  LayerForwardArgs args() {
    LayerForwardArgs a;
    a.config = c;
    a.weights = w.views;
    a.hidden = TensorView::make(x.data(), DType::f64, {1, 2, c.hidden});
    a.kv = caches.kv;
    a.index_cache = caches.index_cache;
    a.block_table = caches.block_table;
    a.cache_seqlens = TensorView::make(lens.data(), DType::i32, {1});
    a.attention = LayerAttention::sparse;
    a.out = TensorView::make(out.data(), DType::f64, {1, 2, c.hidden});
    return a;
  }
};

TEST(Layer, ErrorsNameTheArgument) {
  ErrorSetup e;
  ASSERT_TRUE(layer_forward(e.args()).ok());
  {
    LayerForwardArgs a = e.args();
    a.config.kv_lora_rank = 256;
    expect_error(layer_forward(a), Errc::invalid_value, {"config.kv_lora_rank = 256"});
  }
  {
    LayerForwardArgs a = e.args();
    a.config.index_topk = 100;
    expect_error(layer_forward(a), Errc::invalid_value, {"config.index_topk = 100"});
  }
  {
    LayerForwardArgs a = e.args();
    a.hidden.shape[2] = 255;
    expect_error(layer_forward(a), Errc::invalid_shape, {"hidden"});
  }
  {
    LayerForwardArgs a = e.args();
    a.weights.wo.shape[1] = 7;
    expect_error(layer_forward(a), Errc::invalid_shape, {"weights.wo"});
  }
  {
    LayerForwardArgs a = e.args();
    a.weights.idx_wk = TensorView{};
    expect_error(layer_forward(a), Errc::invalid_shape, {"weights.idx_wk"});
    a.attention = LayerAttention::absorbed;  // still needed: the indexer cache is written
    expect_error(layer_forward(a), Errc::invalid_shape, {"weights.idx_wk"});
    // the indexer's weights are optional for dense attention...
    a.index_cache = IndexerCacheView{};  // ...when no indexer keys are written
    EXPECT_TRUE(layer_forward(a).ok());
  }
  {
    LayerForwardArgs a = e.args();
    a.index_cache = IndexerCacheView{};
    expect_error(layer_forward(a), Errc::invalid_value, {"index_cache"});
  }
  {
    LayerForwardArgs a = e.args();
    e.lens[0] = 1;  // fewer than the 2 new tokens
    expect_error(layer_forward(a), Errc::out_of_range, {"cache_seqlens[0] = 1", "s_q = 2"});
    e.lens[0] = 65;
    expect_error(layer_forward(a), Errc::out_of_range, {"cache_seqlens[0] = 65"});
    e.lens[0] = 2;
  }
  {
    LayerForwardArgs a = e.args();
    const int32_t saved = e.caches.table[0];
    e.caches.table[0] = 1000;
    expect_error(layer_forward(a), Errc::out_of_range, {"block_table[0][0] = 1000"});
    e.caches.table[0] = saved;
  }
  {
    LayerForwardArgs a = e.args();
    a.attention = LayerAttention(9);
    expect_error(layer_forward(a), Errc::invalid_value, {"attention = 9"});
  }
  {
    // CUDA tensors on the non-absorbed path: unsupported in every build (no
    // CUDA backend at all, or no GPU composition of that path yet).
    LayerForwardArgs a = e.args();
    a.attention = LayerAttention::non_absorbed;
    auto cuda = [](TensorView& t) { t.device = Device::cuda(0); };
    cuda(a.hidden);
    cuda(a.out);
    cuda(a.kv.data);
    cuda(a.index_cache.data);
    cuda(a.block_table);
    cuda(a.cache_seqlens);
    for (int i = 0; i < kLayerWeightCount; ++i) cuda(layer_weight(a.weights, i));
    expect_error(layer_forward(a), Errc::unsupported, {"layer_forward"});
  }
}

}  // namespace
}  // namespace mla
