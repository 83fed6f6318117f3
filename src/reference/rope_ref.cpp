#include "reference/rope_ref.hpp"

#include <cmath>

#include "common/rope_freq.hpp"
#include "reference/tensor_read.hpp"

namespace mla::reference {
Status apply_rope(const ApplyRopeArgs& a) {
  const std::vector<double> inv_freq = detail::yarn_inv_freq(a.config);
  const double m = rope_attention_factor(a.config);
  const int64_t T = a.x.shape[0], H = a.x.shape[1], D = a.x.shape[2], half = D / 2;
  std::vector<double> row(D);
  for (int64_t t = 0; t < T; ++t) {
    const double pos = double(read_int(a.positions, {t}));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) row[d] = read(a.x, {t, h, d});  // read all: out may alias x
      for (int64_t i = 0; i < half; ++i) {
        const int64_t ia = a.layout == RopeLayout::interleaved ? 2 * i : i;
        const int64_t ib = a.layout == RopeLayout::interleaved ? 2 * i + 1 : i + half;
        const double angle = pos * inv_freq[i], cs = m * std::cos(angle), sn = m * std::sin(angle);
        write(a.out, {t, h, ia}, row[ia] * cs - row[ib] * sn);
        write(a.out, {t, h, ib}, row[ia] * sn + row[ib] * cs);
      }
    }
  }
  return Status::Ok();
}

}  // namespace mla::reference
