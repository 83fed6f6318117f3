#include "reference/indexer_ref.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mla/numeric.hpp"
#include "reference/fp8_quant.hpp"
#include "reference/tensor_read.hpp"

namespace mla::reference {

namespace {
using L = IndexerCacheLayout;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

uint8_t* page_ptr(const IndexerCacheView& c, int64_t page) {
  return static_cast<uint8_t*>(c.data.data) + page * c.data.strides[0];  // u8/e4m3: 1 B elements
}
}  // namespace

uint8_t* indexer_key_codes_mut(const IndexerCacheView& c, int64_t slot) {
  return page_ptr(c, slot / L::kPageTokens) + (slot % L::kPageTokens) * kIndexerDim;
}
const uint8_t* indexer_key_codes(const IndexerCacheView& c, int64_t slot) {
  return indexer_key_codes_mut(c, slot);
}
float indexer_key_scale(const IndexerCacheView& c, int64_t slot) {
  float s;
  std::memcpy(
      &s, page_ptr(c, slot / L::kPageTokens) + L::kScaleOffset + 4 * (slot % L::kPageTokens), 4);
  return s;
}
void store_indexer_key_scale(const IndexerCacheView& c, int64_t slot, float s) {
  std::memcpy(page_ptr(c, slot / L::kPageTokens) + L::kScaleOffset + 4 * (slot % L::kPageTokens),
              &s, 4);
}

double indexer_logit(const double* q8, const double* w, const double* k8, double k_scale) {
  double acc = 0.0;
  for (int h = 0; h < kIndexerHeads; ++h) {
    double dot = 0.0;
    for (int d = 0; d < kIndexerDim; ++d) dot += q8[h * kIndexerDim + d] * k8[d];
    // ReLU as the kernels' fmaxf: a NaN dot counts 0. NaN keys and queries are
    // dropped through their NaN scale instead (mla/indexer.hpp).
    acc += w[h] * (dot > 0.0 ? dot : 0.0);
  }
  return k_scale * acc;
}

Status append_indexer_keys(const AppendIndexerKeysArgs& a) {
  float v[kIndexerDim];
  for (int64_t t = 0; t < a.slots.shape[0]; ++t) {
    const int64_t slot = read_int(a.slots, {t});
    if (slot < 0) continue;  // -1: padding token
    read_row_f32(a.keys, t, v, kIndexerDim);
    float s;
    quantize_indexer_vector(v, indexer_key_codes_mut(a.cache, slot), &s);
    store_indexer_key_scale(a.cache, slot, s);
  }
  return Status::Ok();
}

Status quantize_indexer_query(const QuantizeIndexerQueryArgs& a) {
  // Rows are the leading dims flattened; the views were checked to share them.
  const int lead = a.q.ndim - 2;
  int64_t rows = 1;
  for (int d = 0; d < lead; ++d) rows *= a.q.shape[d];
  const double fold = 1.0 / std::sqrt(double(kIndexerHeads)) / std::sqrt(double(kIndexerDim));
  float v[kIndexerDim];
  uint8_t codes[kIndexerDim];
  for (int64_t r = 0; r < rows; ++r) {
    // Offsets of row r in each view (row-major over the leading dims).
    int64_t oq = 0, ow = 0, o8 = 0, of = 0, rem = r;
    for (int d = lead - 1; d >= 0; --d) {
      const int64_t i = rem % a.q.shape[d];
      rem /= a.q.shape[d];
      oq += i * a.q.strides[d];
      o8 += i * a.q8.strides[d];
      ow += i * a.weights.strides[d];
      of += i * a.w_folded.strides[d];
    }
    for (int h = 0; h < kIndexerHeads; ++h) {
      for (int d = 0; d < kIndexerDim; ++d)
        v[d] = float(load_at(a.q, oq + h * a.q.strides[lead] + d * a.q.strides[lead + 1]));
      float s;
      quantize_indexer_vector(v, codes, &s);
      for (int d = 0; d < kIndexerDim; ++d)
        static_cast<uint8_t*>(a.q8.data)[o8 + h * a.q8.strides[lead] + d * a.q8.strides[lead + 1]] =
            codes[d];
      const double w = load_at(a.weights, ow + h * a.weights.strides[lead]);
      store_at(a.w_folded, of + h * a.w_folded.strides[lead], w * fold * double(s));
    }
  }
  return Status::Ok();
}

namespace {
// The 64 x 128 query codes of one token as values, and its 64 weights.
void load_query(const TensorView& q8, const TensorView& w, std::initializer_list<int64_t> lead_q,
                std::initializer_list<int64_t> lead_w, double* qv, double* wv) {
  const int64_t oq = q8.offset(lead_q), ow = w.offset(lead_w);
  const int lq = static_cast<int>(lead_q.size());
  for (int h = 0; h < kIndexerHeads; ++h) {
    for (int d = 0; d < kIndexerDim; ++d)
      qv[h * kIndexerDim + d] = load_at(q8, oq + h * q8.strides[lq] + d * q8.strides[lq + 1]);
    wv[h] = load_at(w, ow + h * w.strides[lq]);
  }
}
void load_key_values(const uint8_t* codes, double* kv) {
  for (int d = 0; d < kIndexerDim; ++d) kv[d] = e4m3_to_float(codes[d]);
}
}  // namespace

Status indexer_logits_decode(const IndexerLogitsDecodeArgs& a) {
  const int64_t B = a.q8.shape[0], s_q = a.q8.shape[1], max_len = a.logits.shape[2];
  std::vector<double> qv(kIndexerHeads * kIndexerDim), wv(kIndexerHeads), kv(kIndexerDim);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = read_int(a.cache_seqlens, {b});
    for (int64_t i = 0; i < s_q; ++i) {
      load_query(a.q8, a.w_folded, {b, i}, {b, i}, qv.data(), wv.data());
      const int64_t limit = std::max<int64_t>(len - (s_q - 1 - i), 0);  // causal
      for (int64_t pos = 0; pos < max_len; ++pos) {
        double logit = kNegInf;
        if (pos < limit) {
          const int64_t slot = read_int(a.block_table, {b, pos / L::kPageTokens}) * L::kPageTokens +
                               pos % L::kPageTokens;
          load_key_values(indexer_key_codes(a.cache, slot), kv.data());
          logit = indexer_logit(qv.data(), wv.data(), kv.data(), indexer_key_scale(a.cache, slot));
        }
        write(a.logits, {b, i, pos}, logit);
      }
    }
  }
  return Status::Ok();
}

Status indexer_logits_prefill(const IndexerLogitsPrefillArgs& a) {
  const int64_t T = a.q8.shape[0], N = a.k8.shape[0];
  std::vector<double> qv(kIndexerHeads * kIndexerDim), wv(kIndexerHeads), kv(kIndexerDim);
  for (int64_t t = 0; t < T; ++t) {
    load_query(a.q8, a.w_folded, {t}, {t}, qv.data(), wv.data());
    const int64_t lo = read_int(a.k_start, {t}), hi = read_int(a.k_end, {t});
    for (int64_t s = 0; s < N; ++s) {
      double logit = kNegInf;
      if (s >= lo && s < hi) {
        for (int d = 0; d < kIndexerDim; ++d) kv[d] = read(a.k8, {s, d});
        logit = indexer_logit(qv.data(), wv.data(), kv.data(), read(a.k_scale, {s}));
      }
      write(a.logits, {t, s}, logit);
    }
  }
  return Status::Ok();
}

}  // namespace mla::reference
