// The wgmma decode kernel's layout and descriptors on their own (before the
// pipeline around them): S = A . B[32:64]^T (K-major operands, 9 swizzled
// blocks) and O = A[:, :64] . B[:, 256:512] (B as V, MN-major, transposed)
// against an fp64 host product of the same bf16 values, and the same with f16
// values (the fp8 caches' MMA element type); the narrow kernel's transposed
// products (S^T, O^T with the stage read MN-major as A) the same way.
// Bound: products of bf16 values are exact in fp32, the fp32 sum of <= 576 of
// them has relative error <= ~576 * 2^-24 of the sum of |terms|: 1e-4 of that
// sum is far above rounding and far below any misplaced element (O(1)).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/random.hpp"
#include "gpu/decode/wgmma_probe.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/numeric.hpp"

namespace mla::testing {
namespace {

// A random normal f16 value with |x| in [2^-5, 2^2): its bits and value.
uint16_t random_f16(Rng& rng, double* value) {
  const int sign = int(rng.randint(0, 1)), e = int(rng.randint(10, 16)),
            m = int(rng.randint(0, 1023));
  *value = (sign ? -1.0 : 1.0) * (1.0 + m / 1024.0) * std::ldexp(1.0, e - 15);
  return uint16_t(sign << 15 | e << 10 | m);
}

constexpr int R = 64, D = 576;

// Two random [64][576] matrices: their 16-bit bits (bf16, or f16) and values.
struct Operands {
  std::vector<uint16_t> a, b;
  std::vector<double> fa, fb;
};
Operands random_operands(bool f16, uint64_t seed) {
  Rng rng(seed);
  Operands m{std::vector<uint16_t>(R * D), std::vector<uint16_t>(R * D), std::vector<double>(R * D),
             std::vector<double>(R * D)};
  for (int i = 0; i < R * D; ++i) {
    if (f16) {  // products of f16 values are exact in fp32 too
      m.a[i] = random_f16(rng, &m.fa[i]);
      m.b[i] = random_f16(rng, &m.fb[i]);
      continue;
    }
    const bf16 x = float_to_bf16(float(rng.uniform(-1.0, 1.0)));
    const bf16 y = float_to_bf16(float(rng.uniform(-1.0, 1.0)));
    m.a[i] = x.bits;
    m.b[i] = y.bits;
    m.fa[i] = bf16_to_float(x);
    m.fb[i] = bf16_to_float(y);
  }
  return m;
}

void probe_matches_host_product(bool f16) {
  const Operands m = random_operands(f16, f16 ? 4243 : 4242);
  const std::vector<double>&fa = m.fa, &fb = m.fb;
  DeviceBuffer da(m.a.data(), m.a.size() * 2), db(m.b.data(), m.b.size() * 2);
  DeviceBuffer ds(R * 32 * 4), dout(R * 256 * 4);
  ds.poison();
  dout.poison();
  ASSERT_EQ(run_wgmma_probe(static_cast<const uint16_t*>(da.get()),
                            static_cast<const uint16_t*>(db.get()), static_cast<float*>(ds.get()),
                            static_cast<float*>(dout.get()), f16),
            cudaSuccess);
  const auto s = ds.download<float>(R * 32);
  const auto o = dout.download<float>(R * 256);
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < 32; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < D; ++k) {
        ref += fa[r * D + k] * fb[(32 + n) * D + k];
        mag += std::fabs(fa[r * D + k] * fb[(32 + n) * D + k]);
      }
      ASSERT_NEAR(s[r * 32 + n], ref, 1e-4 * mag) << "S row " << r << " key " << n;
    }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < 256; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < 64; ++k) {
        ref += fa[r * D + k] * fb[k * D + 256 + n];
        mag += std::fabs(fa[r * D + k] * fb[k * D + 256 + n]);
      }
      ASSERT_NEAR(o[r * 256 + n], ref, 1e-4 * mag) << "O row " << r << " col " << n;
    }
}

// The narrow kernel's products: S^T (m64n16, K-major stage and Q rows 0-15)
// and O^T (the stage read MN-major as A, P^T as B), f16, same bound.
TEST(WgmmaGpu, F16NarrowTransposedProductsMatchTheHostProduct) {
  const Operands m = random_operands(/*f16=*/true, 4244);
  const std::vector<double>&fa = m.fa, &fb = m.fb;
  DeviceBuffer da(m.a.data(), m.a.size() * 2), db(m.b.data(), m.b.size() * 2);
  DeviceBuffer dst(R * 16 * 4), dot(R * 16 * 4);
  dst.poison();
  dot.poison();
  ASSERT_EQ(run_wgmma_narrow_probe(static_cast<const uint16_t*>(da.get()),
                                   static_cast<const uint16_t*>(db.get()),
                                   static_cast<float*>(dst.get()), static_cast<float*>(dot.get())),
            cudaSuccess);
  const auto st = dst.download<float>(R * 16);
  const auto ot = dot.download<float>(R * 16);
  for (int m = 0; m < R; ++m)
    for (int n = 0; n < 16; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < D; ++k) {
        ref += fa[m * D + k] * fb[n * D + k];
        mag += std::fabs(fa[m * D + k] * fb[n * D + k]);
      }
      ASSERT_NEAR(st[m * 16 + n], ref, 1e-4 * mag) << "S^T key " << m << " row " << n;
      ref = mag = 0;
      for (int k = 0; k < 64; ++k) {
        ref += fa[k * D + 256 + m] * fb[n * D + k];
        mag += std::fabs(fa[k * D + 256 + m] * fb[n * D + k]);
      }
      ASSERT_NEAR(ot[m * 16 + n], ref, 1e-4 * mag) << "O^T dim " << 256 + m << " row " << n;
    }
}

TEST(WgmmaGpu, DecodeLayoutsAndDescriptorsMatchTheHostProduct) {
  probe_matches_host_product(false);
}

TEST(WgmmaGpu, F16DecodeLayoutsAndDescriptorsMatchTheHostProduct) {
  probe_matches_host_product(true);
}

}  // namespace
}  // namespace mla::testing
