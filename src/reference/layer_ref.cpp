#include "reference/layer_ref.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/layer_shape.hpp"
#include "common/validate.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"
#include "mla/indexer.hpp"
#include "mla/kv_cache.hpp"
#include "mla/prefill.hpp"
#include "mla/rope.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"
#include "reference/tensor_read.hpp"

namespace mla::reference {

void linear(const TensorView& w, const double* x, int64_t n_rows, double* y) {
  const int64_t out = w.shape[0], in = w.shape[1];
  std::fill(y, y + n_rows * out, 0.0);
  // Each weight is read once and applied to every row (the slow part is the
  // strided, dtype-generic load, not the multiply).
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const double wv = load_at(w, o * w.strides[0] + i * w.strides[1]);
      for (int64_t n = 0; n < n_rows; ++n) y[n * out + o] += wv * x[n * in + i];
    }
}

void rms_norm(double* x, int64_t n_rows, int64_t dim, const TensorView& weight, double eps) {
  for (int64_t n = 0; n < n_rows; ++n) {
    double* r = x + n * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += r[i] * r[i];
    const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) r[i] = r[i] * inv * read(weight, {i});
  }
}

void layer_norm(double* x, int64_t n_rows, int64_t dim, const TensorView& weight,
                const TensorView& bias, double eps) {
  for (int64_t n = 0; n < n_rows; ++n) {
    double* r = x + n * dim;
    double mean = 0;
    for (int64_t i = 0; i < dim; ++i) mean += r[i];
    mean /= double(dim);
    double var = 0;
    for (int64_t i = 0; i < dim; ++i) var += (r[i] - mean) * (r[i] - mean);
    const double inv = 1.0 / std::sqrt(var / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i)
      r[i] = (r[i] - mean) * inv * read(weight, {i}) + read(bias, {i});
  }
}

void hadamard_rotate(double* x, int n) {
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const double a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const double s = 1.0 / std::sqrt(double(n));
  for (int i = 0; i < n; ++i) x[i] *= s;
}

namespace {

TensorView f64_view(std::vector<double>& v, std::initializer_list<int64_t> shape) {
  return TensorView::make(v.data(), DType::f64, shape);
}
TensorView f32_view(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::make(v.data(), DType::f32, shape);
}
std::vector<float> to_f32(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Rotates the `dim` dims starting at `offset` of each of `heads` vectors of
// width `width` per token, in place, by the library's apply_rope.
Status rope_slice(double* x, int64_t n_tokens, int64_t heads, int64_t width, int64_t offset,
                  const std::vector<int64_t>& positions, const RopeConfig& rope,
                  RopeLayout layout) {
  const int64_t d = rope.dim;
  std::vector<double> part(n_tokens * heads * d);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(x + (t * heads + h) * width + offset, d, part.data() + (t * heads + h) * d);
  std::vector<int64_t> pos = positions;
  ApplyRopeArgs a;
  a.x = f64_view(part, {n_tokens, heads, d});
  a.out = a.x;
  a.positions = TensorView::make(pos.data(), DType::i64, {n_tokens});
  a.config = rope;
  a.layout = layout;
  MLA_TRY(apply_rope(a));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(part.data() + (t * heads + h) * d, d, x + (t * heads + h) * width + offset);
  return Status::Ok();
}

// Everything the attention paths share: the step's shapes, token positions and
// cache slots, the projected and rotated queries, and the query latent.
struct Step : detail::LayerShape {
  int64_t dc = 0;
  int64_t page = 0;
  std::vector<int64_t> lens;       // [B]
  std::vector<int64_t> positions;  // [N]
  std::vector<int64_t> slots;      // [N]
  std::vector<double> x;           // [N, hidden]
  std::vector<double> q_lat;       // [N, q_lora_rank]
  std::vector<double> q;           // [N, H, dn + dr], rope part rotated
};

int64_t slot_of(const TensorView& block_table, int64_t b, int64_t pos, int64_t page) {
  return read_int(block_table, {b, pos / page}) * page + pos % page;
}

// The lightning indexer keys of the step's tokens, written to the indexer cache.
Status write_indexer_keys(const LayerForwardArgs& a, const Step& s) {
  const LayerWeights& w = a.weights;
  std::vector<double> k(s.N * kIndexerDim);
  linear(w.idx_wk, s.x.data(), s.N, k.data());
  layer_norm(k.data(), s.N, kIndexerDim, w.idx_k_norm_w, w.idx_k_norm_b, a.config.norm_eps);
  MLA_TRY(rope_slice(k.data(), s.N, 1, kIndexerDim, 0, s.positions, a.config.rope,
                     RopeLayout::half_split));
  for (int64_t t = 0; t < s.N; ++t) hadamard_rotate(k.data() + t * kIndexerDim, kIndexerDim);
  std::vector<float> kf = to_f32(k);
  std::vector<int64_t> slots = s.slots;
  AppendIndexerKeysArgs ap;
  ap.keys = f32_view(kf, {s.N, kIndexerDim});
  ap.slots = TensorView::make(slots.data(), DType::i64, {s.N});
  ap.cache = a.index_cache;
  return append_indexer_keys(ap);
}

// Top-k cache slots per new token from the indexer: [B, s_q, k] i32.
Status indexer_topk(const LayerForwardArgs& a, const Step& s, std::vector<int32_t>* indices) {
  const LayerWeights& w = a.weights;
  std::vector<double> qi(s.N * kIndexerHeads * kIndexerDim);
  linear(w.idx_wq_b, s.q_lat.data(), s.N, qi.data());
  MLA_TRY(rope_slice(qi.data(), s.N, kIndexerHeads, kIndexerDim, 0, s.positions, a.config.rope,
                     RopeLayout::half_split));
  for (int64_t r = 0; r < s.N * kIndexerHeads; ++r)
    hadamard_rotate(qi.data() + r * kIndexerDim, kIndexerDim);
  std::vector<double> wt(s.N * kIndexerHeads);
  linear(w.idx_w_proj, s.x.data(), s.N, wt.data());

  std::vector<float> qf = to_f32(qi), wf = to_f32(wt), w_folded(s.N * kIndexerHeads);
  std::vector<uint8_t> q8(qi.size());
  QuantizeIndexerQueryArgs qa;
  qa.q = f32_view(qf, {s.B, s.s_q, kIndexerHeads, kIndexerDim});
  qa.weights = f32_view(wf, {s.B, s.s_q, kIndexerHeads});
  qa.q8 = TensorView::make(q8.data(), DType::e4m3, {s.B, s.s_q, kIndexerHeads, kIndexerDim});
  qa.w_folded = f32_view(w_folded, {s.B, s.s_q, kIndexerHeads});
  MLA_TRY(quantize_indexer_query(qa));

  const int64_t max_len = *std::max_element(s.lens.begin(), s.lens.end());
  std::vector<float> logits(s.N * max_len);
  IndexerLogitsDecodeArgs la;
  la.q8 = qa.q8;
  la.w_folded = qa.w_folded;
  la.cache = a.index_cache;
  la.block_table = a.block_table;
  la.cache_seqlens = a.cache_seqlens;
  la.logits = f32_view(logits, {s.B, s.s_q, max_len});
  MLA_TRY(indexer_logits_decode(la));

  const int32_t k = a.config.index_topk;
  indices->assign(s.N * k, -1);
  TopkArgs ta;
  ta.logits = f32_view(logits, {s.N, max_len});
  ta.k = k;
  ta.indices = TensorView::make(indices->data(), DType::i32, {s.N, int64_t(k)});
  ta.block_table = a.block_table;
  ta.page_size = int32_t(s.page);
  ta.rows_per_request = int32_t(s.s_q);
  ta.num_pages = a.kv.num_pages();
  return topk_indices(ta);
}

// q~ = [W_UK[h]^T q_nope_h ; q_rope_h] per token and head: [N, H, 576] f64.
std::vector<double> absorbed_queries(const LayerForwardArgs& a, const Step& s) {
  std::vector<double> qa(s.N * s.H * kDqk, 0.0);
  const int64_t w = s.dn + s.dr;
  for (int64_t t = 0; t < s.N; ++t)
    for (int64_t h = 0; h < s.H; ++h) {
      const double* q = s.q.data() + (t * s.H + h) * w;
      double* o = qa.data() + (t * s.H + h) * kDqk;
      for (int64_t d = 0; d < s.dn; ++d)
        for (int64_t c = 0; c < s.dc; ++c) o[c] += read(a.weights.w_uk, {h, d, c}) * q[d];
      std::copy_n(q + s.dn, s.dr, o + s.dc);
    }
  return qa;
}

// o[t, h, :] = W_UV[h] o_lat[t, h, :]: latent outputs [N, H, 512] -> [N, H, dv].
std::vector<double> apply_w_uv(const LayerForwardArgs& a, const Step& s,
                               const std::vector<double>& o_lat) {
  std::vector<double> o(s.N * s.H * s.dv, 0.0);
  for (int64_t t = 0; t < s.N; ++t)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t d = 0; d < s.dv; ++d) {
        double acc = 0;
        for (int64_t c = 0; c < s.dc; ++c)
          acc += read(a.weights.w_uv, {h, d, c}) * o_lat[(t * s.H + h) * s.dc + c];
        o[(t * s.H + h) * s.dv + d] = acc;
      }
  return o;
}

Status attend_absorbed(const LayerForwardArgs& a, const Step& s, std::vector<double>* o) {
  // mla_decode's CPU path takes f32 queries; the sparse path below takes f64.
  std::vector<float> qf = to_f32(absorbed_queries(a, s));
  std::vector<float> out(s.N * s.H * kDv), lse(s.N * s.H);
  DecodeArgs d;
  d.q = f32_view(qf, {s.B, s.s_q, s.H, kDqk});
  d.kv = a.kv;
  d.block_table = a.block_table;
  d.cache_seqlens = a.cache_seqlens;
  d.softmax_scale = float(layer_softmax_scale(a.config));
  d.causal = true;
  d.out = f32_view(out, {s.B, s.s_q, s.H, kDv});
  d.lse = f32_view(lse, {s.B, s.H, s.s_q});
  MLA_TRY(mla_decode(d));
  *o = apply_w_uv(a, s, std::vector<double>(out.begin(), out.end()));
  return Status::Ok();
}

Status attend_sparse(const LayerForwardArgs& a, const Step& s, std::vector<double>* o) {
  std::vector<int32_t> indices;
  MLA_TRY(indexer_topk(a, s, &indices));
  std::vector<double> qa = absorbed_queries(a, s);
  std::vector<double> out(s.N * s.H * kDv), lse(s.N * s.H);
  SparseDecodeArgs d;
  d.q = f64_view(qa, {s.B, s.s_q, s.H, kDqk});
  d.kv = a.kv;
  d.indices = TensorView::make(indices.data(), DType::i32, {s.B, s.s_q, a.config.index_topk});
  d.softmax_scale = float(layer_softmax_scale(a.config));
  d.out = f64_view(out, {s.B, s.s_q, s.H, kDv});
  d.lse = f64_view(lse, {s.B, s.H, s.s_q});
  MLA_TRY(sparse_decode(d));
  *o = apply_w_uv(a, s, out);
  return Status::Ok();
}

Status attend_non_absorbed(const LayerForwardArgs& a, const Step& s, std::vector<double>* o) {
  // Every cached key of every request, read back as the cache stores it.
  std::vector<int32_t> cu_q(s.B + 1), cu_k(s.B + 1);
  std::vector<int64_t> key_slots;
  for (int64_t b = 0; b < s.B; ++b) {
    cu_q[b + 1] = int32_t((b + 1) * s.s_q);
    cu_k[b + 1] = int32_t(cu_k[b] + s.lens[b]);
    for (int64_t p = 0; p < s.lens[b]; ++p)
      key_slots.push_back(slot_of(a.block_table, b, p, s.page));
  }
  const int64_t Tk = int64_t(key_slots.size());
  std::vector<float> c_kv(Tk * kDc), k_rope(Tk * kDr);
  ReadKvArgs r;
  r.cache = a.kv;
  r.slots = TensorView::make(key_slots.data(), DType::i64, {Tk});
  r.c_kv = f32_view(c_kv, {Tk, kDc});
  r.k_rope = f32_view(k_rope, {Tk, kDr});
  MLA_TRY(read_kv(r));

  std::vector<double> c64(c_kv.begin(), c_kv.end()), k_nope(Tk * s.H * s.dn), v(Tk * s.H * s.dv);
  DecompressKvArgs dk;
  dk.c_kv = f64_view(c64, {Tk, kDc});
  dk.w_uk = a.weights.w_uk;
  dk.w_uv = a.weights.w_uv;
  dk.k_nope = f64_view(k_nope, {Tk, s.H, s.dn});
  dk.v = f64_view(v, {Tk, s.H, s.dv});
  MLA_TRY(decompress_kv(dk));

  const int64_t dqk = s.dn + s.dr;
  std::vector<double> k(Tk * s.H * dqk);
  for (int64_t j = 0; j < Tk; ++j)
    for (int64_t h = 0; h < s.H; ++h) {
      double* kr = k.data() + (j * s.H + h) * dqk;
      std::copy_n(k_nope.data() + (j * s.H + h) * s.dn, s.dn, kr);
      std::copy_n(k_rope.data() + j * kDr, s.dr, kr + s.dn);  // shared by every head
    }
  std::vector<double> q = s.q;  // already [nope ; rope] per head
  o->assign(s.N * s.H * s.dv, 0.0);
  std::vector<double> lse(s.H * s.N);
  MhaPrefillArgs m;
  m.q = f64_view(q, {s.N, s.H, dqk});
  m.k = f64_view(k, {Tk, s.H, dqk});
  m.v = f64_view(v, {Tk, s.H, s.dv});
  m.cu_seqlens_q = TensorView::make(cu_q.data(), DType::i32, {s.B + 1});
  m.cu_seqlens_k = TensorView::make(cu_k.data(), DType::i32, {s.B + 1});
  m.softmax_scale = float(layer_softmax_scale(a.config));
  m.causal = true;
  m.out = f64_view(*o, {s.N, s.H, s.dv});
  m.lse = f64_view(lse, {s.H, s.N});
  return mha_prefill(m);
}

}  // namespace

Status layer_forward(const LayerForwardArgs& a) {
  const LayerConfig& c = a.config;
  const LayerWeights& w = a.weights;
  Step s;
  static_cast<detail::LayerShape&>(s) = detail::layer_shape(a);
  s.dc = c.kv_lora_rank;
  s.page = a.kv.page_size();
  const int64_t D = c.hidden;

  s.x.resize(s.N * D);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.s_q; ++i)
      for (int64_t j = 0; j < D; ++j) s.x[(b * s.s_q + i) * D + j] = read(a.hidden, {b, i, j});
  for (int64_t b = 0; b < s.B; ++b) {
    s.lens.push_back(read_int(a.cache_seqlens, {b}));
    for (int64_t i = 0; i < s.s_q; ++i) {
      const int64_t pos = s.lens[b] - s.s_q + i;
      s.positions.push_back(pos);
      s.slots.push_back(slot_of(a.block_table, b, pos, s.page));
    }
  }

  // Queries: down-projection, RMSNorm, up-projection, RoPE on the rope part.
  s.q_lat.resize(s.N * c.q_lora_rank);
  linear(w.wq_a, s.x.data(), s.N, s.q_lat.data());
  rms_norm(s.q_lat.data(), s.N, c.q_lora_rank, w.q_norm, c.norm_eps);
  s.q.resize(s.N * s.H * (s.dn + s.dr));
  linear(w.wq_b, s.q_lat.data(), s.N, s.q.data());
  MLA_TRY(rope_slice(s.q.data(), s.N, s.H, s.dn + s.dr, s.dn, s.positions, c.rope,
                     RopeLayout::interleaved));

  // Keys: down-projection to [c_kv ; k_rope], RMSNorm on c_kv, RoPE on k_rope.
  std::vector<double> kv(s.N * (s.dc + s.dr));
  linear(w.wkv_a, s.x.data(), s.N, kv.data());
  std::vector<double> c_kv(s.N * s.dc), k_rope(s.N * s.dr);
  for (int64_t t = 0; t < s.N; ++t) {
    std::copy_n(kv.data() + t * (s.dc + s.dr), s.dc, c_kv.data() + t * s.dc);
    std::copy_n(kv.data() + t * (s.dc + s.dr) + s.dc, s.dr, k_rope.data() + t * s.dr);
  }
  rms_norm(c_kv.data(), s.N, s.dc, w.kv_norm, c.norm_eps);
  MLA_TRY(rope_slice(k_rope.data(), s.N, 1, s.dr, 0, s.positions, c.rope, RopeLayout::interleaved));

  // Cache append (the cache format rounds or quantises here).
  {
    std::vector<float> cf = to_f32(c_kv), kf = to_f32(k_rope);
    std::vector<int64_t> slots = s.slots;
    AppendKvArgs ap;
    ap.c_kv = f32_view(cf, {s.N, s.dc});
    ap.k_rope = f32_view(kf, {s.N, s.dr});
    ap.slots = TensorView::make(slots.data(), DType::i64, {s.N});
    ap.cache = a.kv;
    MLA_TRY(append_kv(ap));
  }
  if (a.index_cache.data.defined()) MLA_TRY(write_indexer_keys(a, s));

  std::vector<double> o;  // [N, H, dv]
  switch (a.attention) {
    case LayerAttention::absorbed: MLA_TRY(attend_absorbed(a, s, &o)); break;
    case LayerAttention::sparse: MLA_TRY(attend_sparse(a, s, &o)); break;
    case LayerAttention::non_absorbed: MLA_TRY(attend_non_absorbed(a, s, &o)); break;
  }

  std::vector<double> y(s.N * D);
  linear(w.wo, o.data(), s.N, y.data());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.s_q; ++i)
      for (int64_t j = 0; j < D; ++j) write(a.out, {b, i, j}, y[(b * s.s_q + i) * D + j]);
  return Status::Ok();
}

}  // namespace mla::reference
