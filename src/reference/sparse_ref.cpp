#include "reference/sparse_ref.hpp"

#include <algorithm>
#include <vector>

#include "mla/dims.hpp"
#include "reference/decode_ref.hpp"
#include "reference/kv_cache_ref.hpp"
#include "reference/tensor_read.hpp"

namespace mla::reference {

namespace {

// Attends every head of one query token (q at q_lead in a [..., h_q, 576] view)
// over the gathered keys, writing out [..., h_q, 512] and lse via callbacks.
template <class WriteOut, class WriteLse>
void attend_heads(const TensorView& q, std::initializer_list<int64_t> q_lead, int64_t h_q,
                  const std::vector<double>& keys, int64_t n, double scale, WriteOut write_out,
                  WriteLse write_lse) {
  std::vector<double> qv(kDqk), o(kDv), scores(std::max<int64_t>(n, 1));
  const int lead = static_cast<int>(q_lead.size());
  const int64_t base = q.offset(q_lead);
  for (int64_t h = 0; h < h_q; ++h) {
    for (int c = 0; c < kDqk; ++c)
      qv[c] = load_at(q, base + h * q.strides[lead] + c * q.strides[lead + 1]);
    const double lse = attend_row(qv.data(), keys.data(), n, scale, scores.data(), o.data());
    write_out(h, o);
    write_lse(h, lse);
  }
}

}  // namespace

Status sparse_decode(const SparseDecodeArgs& a) {
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2];
  const int64_t topk = a.indices.shape[2];
  std::vector<double> keys;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n_list = a.topk_length.defined() ? read_int(a.topk_length, {b}) : topk;
    for (int64_t i = 0; i < s_q; ++i) {
      keys.clear();
      for (int64_t j = 0; j < n_list; ++j) {
        const int64_t slot = read_int(a.indices, {b, i, j});
        if (slot < 0) continue;  // -1: no token
        keys.resize(keys.size() + kDqk);
        load_kv_entry(a.kv, slot, keys.data() + keys.size() - kDqk);
      }
      const int64_t n = static_cast<int64_t>(keys.size()) / kDqk;
      attend_heads(
          a.q, {b, i}, h_q, keys, n, a.softmax_scale,
          [&](int64_t h, const std::vector<double>& o) {
            for (int c = 0; c < kDv; ++c) write(a.out, {b, i, h, c}, o[c]);
          },
          [&](int64_t h, double lse) {
            write(a.lse, {b, h, i}, lse);
          });
    }
  }
  return Status::Ok();
}

Status sparse_prefill(const SparsePrefillArgs& a) {
  const int64_t s_q = a.q.shape[0], h_q = a.q.shape[1], topk = a.indices.shape[1];
  const bool fp8 = a.kv_format == KvFormat::fp8_ds_mla;
  const KvCacheView cache = fp8 ? prefill_fp8_cache(a.kv) : KvCacheView{};
  std::vector<double> keys;
  for (int64_t i = 0; i < s_q; ++i) {
    keys.clear();
    const int64_t n_i = a.topk_length.defined() ? read_int(a.topk_length, {i}) : topk;
    for (int64_t j = 0; j < n_i; ++j) {
      const int64_t row = read_int(a.indices, {i, j});
      if (row < 0) continue;
      if (fp8) {
        keys.resize(keys.size() + kDqk);
        load_kv_entry(cache, row, keys.data() + keys.size() - kDqk);
        continue;
      }
      for (int c = 0; c < kDqk; ++c) keys.push_back(read(a.kv, {row, c}));
    }
    const int64_t n = static_cast<int64_t>(keys.size()) / kDqk;
    attend_heads(
        a.q, {i}, h_q, keys, n, a.softmax_scale,
        [&](int64_t h, const std::vector<double>& o) {
          for (int c = 0; c < kDv; ++c) write(a.out, {i, h, c}, o[c]);
        },
        [&](int64_t h, double lse) {
          write(a.lse, {i, h}, lse);
        });
  }
  return Status::Ok();
}

}  // namespace mla::reference
