#include "reference/decode_ref.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "mla/dims.hpp"
#include "reference/kv_cache_ref.hpp"
#include "reference/softmax_ref.hpp"
#include "reference/tensor_read.hpp"

namespace mla::reference {

double attend_row(const double* q, const double* keys, int64_t n, double scale, double* scores,
                  double* out512) {
  return softmax_attend(
      n, kDv,
      [&](int64_t j) {
        const double* k = keys + j * kDqk;
        double dot = 0.0;
        for (int c = 0; c < kDqk; ++c) dot += q[c] * k[c];
        return scale * dot;
      },
      [&](int64_t j, int64_t c) { return keys[j * kDqk + c]; },  // V = the entry's c_kv
      scores, out512);
}

namespace {

// Attention of every query of every request over its keys [begin(b), end(b))
// (clipped to the request's length and to the causal limit).
template <class Range>
Status decode_ranges(const DecodeArgs& a, Range range) {
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1], h_q = a.q.shape[2];
  const int64_t page = a.kv.page_size();
  std::vector<double> keys;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = read_int(a.cache_seqlens, {b});
    auto [lo, hi] = range(b, len);
    lo = std::max<int64_t>(lo, 0);
    hi = std::min(hi, len);
    const int64_t n = std::max<int64_t>(hi - lo, 0);
    // Dequantise the request's keys once; every query and head reads them.
    keys.resize(std::max<int64_t>(n, 1) * kDqk);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = lo + j;
      const int64_t slot = read_int(a.block_table, {b, pos / page}) * page + pos % page;
      load_kv_entry(a.kv, slot, keys.data() + j * kDqk);
    }
    // Rows (i, h) are independent: spread them over threads when the request
    // is big (GPU tests check long contexts against this). Each row is computed
    // by the same code whichever thread runs it, so results are bit-identical.
    const int64_t rows = s_q * h_q;
    auto run_rows = [&](int64_t r0, int64_t r1) {
      std::vector<double> q(kDqk), o(kDv), scores(std::max<int64_t>(n, 1));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r / h_q, h = r % h_q;
        const int64_t ni = std::clamp<int64_t>(visible_keys(len, s_q, i, a.causal) - lo, 0, n);
        for (int c = 0; c < kDqk; ++c) q[c] = read(a.q, {b, i, h, c});
        const double lse =
            attend_row(q.data(), keys.data(), ni, a.softmax_scale, scores.data(), o.data());
        for (int c = 0; c < kDv; ++c) write(a.out, {b, i, h, c}, o[c]);
        write(a.lse, {b, h, i}, lse);
      }
    };
    constexpr int64_t kWorkPerThread = int64_t(1) << 22;  // multiply-adds; below: one thread
    const int64_t threads = std::clamp<int64_t>(
        rows * n * kDqk / kWorkPerThread, 1,
        std::min<int64_t>(rows, std::max(1u, std::thread::hardware_concurrency())));
    if (threads == 1) {
      run_rows(0, rows);
      continue;
    }
    std::vector<std::thread> pool;
    for (int64_t t = 0; t < threads; ++t)
      pool.emplace_back(run_rows, rows * t / threads, rows * (t + 1) / threads);
    for (auto& th : pool) th.join();
  }
  return Status::Ok();
}

}  // namespace

Status mla_decode(const DecodeArgs& args) {
  return decode_ranges(args, [](int64_t, int64_t len) {
    return std::pair<int64_t, int64_t>{0, len};
  });
}

Status mla_decode_partial(const DecodePartialArgs& args) {
  return decode_ranges(args.base, [&](int64_t b, int64_t) {
    return std::pair<int64_t, int64_t>{read_int(args.kv_begin, {b}), read_int(args.kv_end, {b})};
  });
}

}  // namespace mla::reference
