// The attention layer's GPU composition (src/cuda/layer) against the CPU
// reference (src/reference/layer_ref.*) on the same bf16 weights, bf16 hidden
// states and caches: absorbed prefill chunks and decode steps, and DSA with
// top-k covering every key, on a small config (16 heads) and on V3.2's real
// dimensions (128 heads, hidden 7168) at a short context.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/random.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/layer.hpp"
#include "mla/numeric.hpp"

namespace mla::testing {
namespace {

// One weight in bf16 (matrices) or f32 (norm vectors), on host and device.
struct Weight {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  DeviceBuffer dev;
  TensorView view(bool on_gpu) const {
    const void* host = dtype == DType::bf16 ? static_cast<const void*>(bf16.data()) : f32.data();
    TensorView v;
    if (shape.size() == 1) v = TensorView::make(const_cast<void*>(host), dtype, {shape[0]});
    if (shape.size() == 2)
      v = TensorView::make(const_cast<void*>(host), dtype, {shape[0], shape[1]});
    if (shape.size() == 3)
      v = TensorView::make(const_cast<void*>(host), dtype, {shape[0], shape[1], shape[2]});
    return on_gpu ? on_device(v, dev) : v;
  }
};

struct Weights {
  std::vector<Weight> w;
  Weights(const LayerConfig& c, uint64_t seed) : w(kLayerWeightCount) {
    LayerWeightShape shapes[kLayerWeightCount];
    EXPECT_TRUE(layer_weight_shapes(c, shapes).ok());
    for (int i = 0; i < kLayerWeightCount; ++i) {
      Weight& x = w[i];
      int64_t n = 1;
      for (int d = 0; d < shapes[i].ndim; ++d) {
        x.shape.push_back(shapes[i].shape[d]);
        n *= shapes[i].shape[d];
      }
      x.dtype = shapes[i].ndim == 1 ? DType::f32 : DType::bf16;
      if (x.dtype == DType::bf16)
        x.bf16.resize(n);
      else
        x.f32.resize(n);
    }
    LayerWeights host = views(false);
    const Status st = init_layer_weights(c, seed, host);  // rounds into bf16 / f32 directly
    EXPECT_TRUE(st.ok()) << st.to_string();
    for (Weight& x : w) {
      const void* p =
          x.dtype == DType::bf16 ? static_cast<const void*>(x.bf16.data()) : x.f32.data();
      const size_t bytes = x.dtype == DType::bf16 ? x.bf16.size() * 2 : x.f32.size() * 4;
      x.dev = DeviceBuffer(p, bytes);
    }
  }
  LayerWeights views(bool on_gpu) const {
    LayerWeights v;
    for (int i = 0; i < kLayerWeightCount; ++i) layer_weight(v, i) = w[i].view(on_gpu);
    return v;
  }
};

// The same paged caches on host and device (identical poisoned bytes at start).
struct Caches {
  int64_t B, page, num_pages;
  KvFormat format;
  std::vector<uint8_t> kv, index;
  std::vector<int32_t> table;
  DeviceBuffer kv_dev, index_dev, table_dev;
  Caches(int64_t B_, int64_t max_len, KvFormat f) : B(B_), page(64), format(f) {
    const int64_t per = (max_len + page - 1) / page;
    num_pages = B * per + 1;
    kv.assign(num_pages * page * kv_entry_bytes(f), 0xff);
    index.assign(num_pages * IndexerCacheLayout::kPageBytes, 0xff);
    table.resize(B * per);
    std::iota(table.begin(), table.end(), 0);
    std::reverse(table.begin(), table.end());  // pages not in token order
    kv_dev = DeviceBuffer(kv.data(), kv.size());
    index_dev = DeviceBuffer(index.data(), index.size());
    table_dev = DeviceBuffer(table.data(), table.size() * 4);
  }
  int64_t per() const { return int64_t(table.size()) / B; }
  KvCacheView kv_view(bool gpu) const {
    KvCacheView v;
    const int64_t e = kv_entry_bytes(format);
    v.data = format == KvFormat::bf16 ? TensorView::make(const_cast<uint8_t*>(kv.data()),
                                                         DType::bf16, {num_pages, page, 1, kDqk})
                                      : TensorView::make(const_cast<uint8_t*>(kv.data()), DType::u8,
                                                         {num_pages, page, 1, e});
    v.format = format;
    if (gpu) v.data = on_device(v.data, kv_dev);
    return v;
  }
  IndexerCacheView index_view(bool gpu) const {
    IndexerCacheView v;
    v.data = TensorView::make(const_cast<uint8_t*>(index.data()), DType::u8,
                              {num_pages, IndexerCacheLayout::kPageBytes});
    if (gpu) v.data = on_device(v.data, index_dev);
    return v;
  }
  TensorView table_view(bool gpu) const {
    TensorView v = TensorView::make(const_cast<int32_t*>(table.data()), DType::i32, {B, per()});
    return gpu ? on_device(v, table_dev) : v;
  }
};

// One step on both backends; returns max |gpu - cpu| / max |cpu|.
double step(const LayerConfig& c, const Weights& w, Caches& caches,
            const std::vector<uint16_t>& hidden, int64_t L, int64_t t0, int64_t s_q,
            LayerAttention att) {
  const int64_t B = caches.B, D = c.hidden;
  std::vector<uint16_t> x(B * s_q * D);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(hidden.begin() + (b * L + t0) * D, s_q * D, x.begin() + b * s_q * D);
  std::vector<int32_t> lens(B, int32_t(t0 + s_q));
  std::vector<float> ref(B * s_q * D), got(B * s_q * D);
  DeviceBuffer x_dev(x.data(), x.size() * 2), lens_dev(lens.data(), lens.size() * 4),
      out_dev(got.size() * 4);
  out_dev.poison();

  LayerForwardArgs a;
  a.config = c;
  a.attention = att;
  a.weights = w.views(false);
  a.hidden = TensorView::make(x.data(), DType::bf16, {B, s_q, D});
  a.kv = caches.kv_view(false);
  a.index_cache = caches.index_view(false);
  a.block_table = caches.table_view(false);
  a.cache_seqlens = TensorView::make(lens.data(), DType::i32, {B});
  a.out = TensorView::make(ref.data(), DType::f32, {B, s_q, D});
  Status st = layer_forward(a);
  EXPECT_TRUE(st.ok()) << st.to_string();

  LayerForwardArgs g = a;
  g.weights = w.views(true);
  g.hidden = on_device(a.hidden, x_dev);
  g.kv = caches.kv_view(true);
  g.index_cache = caches.index_view(true);
  g.block_table = caches.table_view(true);
  g.cache_seqlens = on_device(a.cache_seqlens, lens_dev);
  g.out = on_device(a.out, out_dev);
  size_t ws_bytes = 0;
  st = layer_workspace_size(g, &ws_bytes);
  EXPECT_TRUE(st.ok()) << st.to_string();
  DeviceBuffer ws(ws_bytes);
  ws.poison();
  st = layer_forward(g, Workspace{ws.get(), ws_bytes});
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  got = out_dev.download<float>(got.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num = std::max(num, double(std::abs(got[i] - ref[i])));
    den = std::max(den, double(std::abs(ref[i])));
  }
  return num / den;
}

// Bound: the GPU rounds the activations the model rounds in bf16 (q latent, q,
// the absorbed query, the latent output, o) where the reference keeps fp64;
// each is 2^-9 relative, five in series through sums of O(1) terms: a few
// 1e-3 of max |out|. 2e-2 leaves margin; a wrong head, rope pair, norm or
// slot gives O(1).
constexpr double kTol = 2e-2;

void run(const LayerConfig& c, int64_t B, int64_t L, const std::vector<int64_t>& chunks,
         LayerAttention att, KvFormat f, uint64_t seed) {
  const Weights w(c, seed);
  Rng rng(seed + 1);
  std::vector<uint16_t> hidden(B * L * c.hidden);
  for (uint16_t& h : hidden) h = float_to_bf16(float(rng.uniform(-1.7, 1.7))).bits;
  Caches caches(B, L, f);
  int64_t t0 = 0;
  for (int64_t s_q : chunks) {
    SCOPED_TRACE(::testing::Message() << layer_attention_name(att) << " " << kv_format_name(f)
                                      << " tokens [" << t0 << ", " << t0 + s_q << ")");
    EXPECT_LT(step(c, w, caches, hidden, L, t0, s_q, att), kTol);
    t0 += s_q;
  }
}

TEST(LayerGpu, SmallConfigMatchesReference) {
  LayerConfig c = small_test_layer();
  c.heads = 16;  // the CUDA attention kernels take 16, 32, 64 or 128 heads
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
    run(c, 2, 60, {40, 1, 2, 17}, LayerAttention::absorbed, f, 3);
    // top-k 64 >= every length: DSA selects every key and must match exactly the
    // same function as the reference's sparse path.
    run(c, 2, 60, {40, 1, 2, 17}, LayerAttention::sparse, f, 4);
  }
}

TEST(LayerGpu, RealDimensionsMatchReference) {
  const LayerConfig c = deepseek_v32_layer();
  // Short: the fp64 reference reads all 201M weights once per token batch.
  run(c, 1, 8, {5, 1, 2}, LayerAttention::absorbed, KvFormat::bf16, 5);
}

}  // namespace
}  // namespace mla::testing
