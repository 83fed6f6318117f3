// Seeded random data shared by the library's self check (src/check) and the CPU and
// GPU tests: dense buffers (f32/f64/bf16), poisoned outputs, and random paged latent
// caches with shuffled page ids, padded page strides and garbage in every byte the
// operation must not read.
//
// Everything is deterministic in the seed, so a failure reproduces. Values are
// never all zero (the standards forbid zero inputs: they hide missing terms).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/element.hpp"
#include "mla/kv_cache.hpp"
#include "mla/numeric.hpp"
#include "mla/tensor.hpp"

namespace mla::testing {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform(double lo = -1.0, double hi = 1.0) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  double normal(double mean = 0.0, double stddev = 1.0) {
    return std::normal_distribution<double>(mean, stddev)(gen_);
  }
  // Uniform integer in [lo, hi], both ends included.
  int64_t randint(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  template <class T>
  void shuffle(std::vector<T>& v) {
    std::shuffle(v.begin(), v.end(), gen_);
  }
  std::mt19937_64& engine() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

inline std::vector<float> random_f32(Rng& rng, size_t n, double lo = -1.0, double hi = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.uniform(lo, hi));
  return v;
}
inline std::vector<double> random_f64(Rng& rng, size_t n, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}
inline std::vector<bf16> random_bf16(Rng& rng, size_t n, double lo = -1.0, double hi = 1.0) {
  std::vector<bf16> v(n);
  for (auto& x : v) x = float_to_bf16(static_cast<float>(rng.uniform(lo, hi)));
  return v;
}
// f32 values that are exactly representable in bf16 (so a bf16 and an f32 path
// see the same numbers).
inline std::vector<float> random_bf16_valued_f32(Rng& rng, size_t n, double lo = -1.0,
                                                 double hi = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = round_to_bf16(static_cast<float>(rng.uniform(lo, hi)));
  return v;
}
inline std::vector<float> to_f32(const std::vector<bf16>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_float(v[i]);
  return r;
}

// Poison an output before a run: a value the operation must overwrite.
inline void poison(std::vector<float>& v) {
  std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN());
}
inline void poison(std::vector<double>& v) {
  std::fill(v.begin(), v.end(), std::numeric_limits<double>::quiet_NaN());
}
inline void poison(std::vector<bf16>& v) {
  std::fill(v.begin(), v.end(), bf16{0x7fc0});
}  // NaN
inline void poison_bytes(void* p, size_t n) {
  std::memset(p, 0xff, n);
}

// ---- owned host tensors -----------------------------------------------------

// A dense row-major host buffer of any dtype, with element access as double
// (rounded to the dtype on write: bf16 by RNE, f32 by a cast). Storage is
// 8-byte aligned (enough for every dtype; CUDA-style 16-byte checks need
// with_offset_bytes(0) on a 16-aligned allocation, which std::vector gives).
struct HostTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;

  HostTensor() = default;
  HostTensor(DType dt, std::vector<int64_t> shp) : dtype(dt), shape(std::move(shp)) {
    storage.assign((numel() * dtype_size(dtype) + 7) / 8 + 1, 0);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  void* data() { return storage.data(); }
  TensorView view(Device dev = Device::cpu()) const {
    TensorView t;
    t.data = const_cast<uint64_t*>(storage.data());
    t.dtype = dtype;
    t.device = dev;
    t.ndim = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      t.shape[i] = shape[i];
      t.strides[i] = stride;
      stride *= shape[i];
    }
    return t;
  }
  double get(int64_t i) const {
    return detail::load_element(
        dtype, reinterpret_cast<const uint8_t*>(storage.data()) + i * dtype_size(dtype));
  }
  void set(int64_t i, double v) {
    detail::store_element(dtype, reinterpret_cast<uint8_t*>(storage.data()) + i * dtype_size(dtype),
                          v);
  }
  // NaN in every float dtype (0xff bytes: NaN for f32/f64/bf16/e4m3, -1 for ints).
  void poison() { std::memset(storage.data(), 0xff, storage.size() * 8); }
};

// Random values in [lo, hi], rounded to the dtype.
inline HostTensor random_tensor(Rng& rng, DType dt, std::vector<int64_t> shape, double lo = -1.0,
                                double hi = 1.0) {
  HostTensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(lo, hi));
  return t;
}
// Same values in another dtype (exact when the target is at least as wide).
inline HostTensor convert(const HostTensor& src, DType dt) {
  HostTensor t(dt, src.shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, src.get(i));
  return t;
}

// ---- paged latent caches -------------------------------------------------

struct PagedCacheSpec {
  KvFormat format = KvFormat::bf16;
  int64_t page_size = 64;
  // Extra elements (bf16 values, or bytes for fp8) between the end of one page
  // and the start of the next; filled with NaN bytes, so reading them shows.
  int64_t page_pad = 0;
  // Pages in the pool beyond those the requests use (never referenced).
  int64_t spare_pages = 3;
  // Extra block_table columns past the last page any request needs; they and
  // the unused tail of every row hold garbage page ids that must not be read.
  int64_t spare_columns = 1;
  // fp8 scales are 2^e with e uniform in [min_scale_exp, max_scale_exp].
  int min_scale_exp = -8;
  int max_scale_exp = -2;
  // fp8_e4m3: the cache's one scale (not a power of two on purpose: the
  // kernels fold it into the softmax and output scales, rounding once more).
  float e4m3_scale = 0.0173f;
};

// A pool of pages plus the block table and lengths of a batch. Every page a
// request touches holds random valid entries; pages are handed out in random
// order (shuffled ids), so page p of request b is not b's p-th page in memory.
struct PagedCache {
  PagedCacheSpec spec;
  int64_t num_pages = 0;
  int64_t max_pages = 0;             // block_table columns
  std::vector<uint64_t> storage;     // 8-byte aligned backing of the pool
  std::vector<int32_t> block_table;  // [B, max_pages]
  std::vector<int32_t> seqlens;      // [B]
  int64_t batch() const { return static_cast<int64_t>(seqlens.size()); }

  // Elements (of the cache dtype) per entry, and between consecutive pages.
  int64_t entry_elems() const {
    return spec.format == KvFormat::bf16 ? kDqk : kv_entry_bytes(spec.format);
  }
  // fp8_e4m3: the scale's storage (view() points at it; a device copy of the
  // cache copies it too).
  float scale = 0.f;
  int64_t page_stride() const { return spec.page_size * entry_elems() + spec.page_pad; }
  DType dtype() const { return spec.format == KvFormat::bf16 ? DType::bf16 : DType::u8; }

  KvCacheView view(Device dev = Device::cpu()) const {
    KvCacheView v;
    v.format = spec.format;
    v.data = TensorView::make(const_cast<uint64_t*>(storage.data()), dtype(),
                              {num_pages, spec.page_size, 1, entry_elems()}, dev);
    v.data.strides[0] = page_stride();
    if (spec.format == KvFormat::fp8_e4m3)
      v.scale = TensorView::make(const_cast<float*>(&scale), DType::f32, {1}, dev);
    return v;
  }
  TensorView block_table_view(Device dev = Device::cpu()) const {
    return TensorView::make(const_cast<int32_t*>(block_table.data()), DType::i32,
                            {batch(), max_pages}, dev);
  }
  TensorView seqlens_view(Device dev = Device::cpu()) const {
    return TensorView::make(const_cast<int32_t*>(seqlens.data()), DType::i32, {batch()}, dev);
  }
  // Byte address of the entry of token `pos` of request b.
  const uint8_t* entry(int64_t b, int64_t pos) const {
    const int64_t page = block_table[b * max_pages + pos / spec.page_size];
    const int64_t elem = page * page_stride() + (pos % spec.page_size) * entry_elems();
    const int64_t esz = spec.format == KvFormat::bf16 ? 2 : 1;
    return reinterpret_cast<const uint8_t*>(storage.data()) + elem * esz;
  }
  uint8_t* entry_mut(int64_t b, int64_t pos) { return const_cast<uint8_t*>(entry(b, pos)); }
  // Global slot (page * page_size + offset) of token `pos` of request b.
  int64_t slot(int64_t b, int64_t pos) const {
    return int64_t(block_table[b * max_pages + pos / spec.page_size]) * spec.page_size +
           pos % spec.page_size;
  }
};

// Writes one random, valid entry: bf16 values in [-1, 1], or an fp8_ds_mla
// entry of random finite e4m3 codes (never NaN), random power-of-two scales
// and a random bf16 rope part.
inline void fill_random_entry(Rng& rng, const PagedCacheSpec& spec, uint8_t* e) {
  if (spec.format == KvFormat::bf16) {
    for (int i = 0; i < kDqk; ++i) {
      const bf16 h = float_to_bf16(static_cast<float>(rng.uniform()));
      std::memcpy(e + 2 * i, &h.bits, 2);
    }
    return;
  }
  if (spec.format == KvFormat::fp8_e4m3) {  // any code but NaN (0x7f, 0xff)
    for (int i = 0; i < kDqk; ++i) {
      uint8_t c;
      do c = static_cast<uint8_t>(rng.randint(0, 255));
      while ((c & 0x7f) == 0x7f);
      e[i] = c;
    }
    return;
  }
  using L = Fp8DsMlaLayout;
  for (int i = 0; i < L::kNopeBytes; ++i) {
    uint8_t c;
    do c = static_cast<uint8_t>(rng.randint(0, 255));
    while ((c & 0x7f) == 0x7f);
    e[i] = c;
  }
  for (int g = 0; g < L::kNumScales; ++g) {
    const float s =
        std::ldexp(1.0f, static_cast<int>(rng.randint(spec.min_scale_exp, spec.max_scale_exp)));
    std::memcpy(e + L::kScaleOffset + 4 * g, &s, 4);
  }
  for (int i = 0; i < kDr; ++i) {
    const bf16 h = float_to_bf16(static_cast<float>(rng.uniform()));
    std::memcpy(e + L::kRopeOffset + 2 * i, &h.bits, 2);
  }
}

// A random paged cache for requests of the given lengths. Bytes that no
// request's tokens cover (pads, tails of last pages, spare pages) are 0xff:
// NaN in bf16, NaN in e4m3, NaN as an fp8 scale.
inline PagedCache make_paged_cache(Rng& rng, const std::vector<int32_t>& lengths,
                                   const PagedCacheSpec& spec) {
  PagedCache c;
  c.spec = spec;
  c.scale = spec.e4m3_scale;
  const int64_t B = static_cast<int64_t>(lengths.size());
  int64_t used = 0, widest = 0;
  for (int32_t L : lengths) {
    const int64_t p = (int64_t(L) + spec.page_size - 1) / spec.page_size;
    used += p;
    widest = std::max(widest, p);
  }
  c.num_pages = used + spec.spare_pages;
  c.max_pages = widest + spec.spare_columns;
  c.seqlens = lengths;
  const int64_t esz = spec.format == KvFormat::bf16 ? 2 : 1;
  const int64_t bytes = std::max<int64_t>(1, c.num_pages * c.page_stride() * esz);
  c.storage.assign((bytes + 7) / 8, ~uint64_t(0));

  std::vector<int32_t> ids(c.num_pages);
  std::iota(ids.begin(), ids.end(), 0);
  rng.shuffle(ids);
  c.block_table.assign(B * c.max_pages, 0);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t p = (int64_t(lengths[b]) + spec.page_size - 1) / spec.page_size;
    for (int64_t j = 0; j < c.max_pages; ++j) {
      // Columns past the request's pages: ids far out of range, or -1.
      c.block_table[b * c.max_pages + j] =
          j < p ? ids[next++]
                : static_cast<int32_t>(rng.randint(0, 1) ? -1 : c.num_pages + 1000 + j);
    }
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lengths[b]; ++t) fill_random_entry(rng, spec, c.entry_mut(b, t));
  return c;
}

}  // namespace mla::testing
