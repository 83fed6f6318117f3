// GPU cache append (src/cuda/kv_cache) against the CPU reference append
// (src/reference/kv_cache_ref.*): every byte of the cache must be identical
// afterwards, the untouched ones included (pads, other pages, skipped slots).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/random.hpp"
#include "cuda/kv_cache/kv_cache_cuda.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/kv_cache.hpp"

namespace mla::testing {
namespace {

// Values that exercise the quantiser: ordinary [-1,1], groups far below the
// 1e-4 scale floor, values past 448 * 2^k boundaries, negative tiny values
// that round to -0, and exact powers of two times 448.
HostTensor tricky_values(Rng& rng, DType dt, int64_t T, int64_t width) {
  HostTensor t(dt, {T, width});
  for (int64_t i = 0; i < T; ++i) {
    const int kind = int(i % 5);
    for (int64_t d = 0; d < width; ++d) {
      double v = rng.uniform(-1, 1);
      if (kind == 1) v *= 1e-7;                           // below the scale floor
      if (kind == 2) v *= 3000.0;                         // large groups
      if (kind == 3 && d % 7 == 0) v = -1e-9;             // rounds to -0
      if (kind == 4 && d % 128 == 5) v = 448.0 * 0.0625;  // amax exactly 448 * 2^-4
      t.set(i * width + d, v);
    }
  }
  return t;
}

void run_case(KvFormat f, DType in, int64_t page, int64_t pad, uint64_t seed) {
  Rng rng(seed);
  PagedCacheSpec spec;
  spec.format = f;
  spec.page_size = page;
  spec.page_pad = pad;
  spec.spare_pages = 2;
  PagedCache cache = make_paged_cache(rng, {100, 37, 260}, spec);  // random prior contents
  const int64_t T = 150;
  HostTensor c_kv = tricky_values(rng, in, T, kDc), k_rope = random_tensor(rng, in, {T, kDr});
  // Distinct random slots in the pool, some -1 (padding tokens).
  std::vector<int64_t> all(cache.num_pages * page);
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  rng.shuffle(all);
  HostTensor slots(DType::i64, {T});
  for (int64_t t = 0; t < T; ++t) slots.set(t, t % 11 == 3 ? -1.0 : double(all[t]));

  // CPU reference on a copy of the cache.
  PagedCache ref = cache;
  AppendKvArgs ca;
  ca.c_kv = c_kv.view();
  ca.k_rope = k_rope.view();
  ca.slots = slots.view();
  ca.cache = ref.view();
  Status st = append_kv(ca);
  ASSERT_TRUE(st.ok()) << st.to_string();

  // GPU, plus one slot past the pool (skipped by the kernel, not written).
  HostTensor slots_gpu = slots;
  slots_gpu.set(5, double(cache.num_pages * page + 3));
  const size_t bytes = cache.storage.size() * 8;
  DeviceBuffer d_cache(cache.storage.data(), bytes);
  DeviceBuffer d_ckv(c_kv.storage.data(), c_kv.storage.size() * 8);
  DeviceBuffer d_rope(k_rope.storage.data(), k_rope.storage.size() * 8);
  DeviceBuffer d_slots(slots_gpu.storage.data(), slots_gpu.storage.size() * 8);
  AppendKvArgs ga;
  ga.c_kv = on_device(c_kv.view(), d_ckv);
  ga.k_rope = on_device(k_rope.view(), d_rope);
  ga.slots = on_device(slots_gpu.view(), d_slots);
  ga.cache = cache.view(Device::cuda(0));
  ga.cache.data.data = d_cache.get();
  DeviceBuffer d_scale;
  if (f == KvFormat::fp8_e4m3) {  // the per-tensor scale (0.0173: the division rounds)
    d_scale = DeviceBuffer(&cache.scale, 4);
    ga.cache.scale.data = d_scale.get();
  }
  st = cuda::append_kv(ga, {});
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = d_cache.download<uint8_t>(bytes);

  // Expected: the reference, except token 5's slot which the GPU skipped.
  std::vector<uint8_t> want(bytes);
  std::memcpy(want.data(), ref.storage.data(), bytes);
  {
    const int64_t s5 = int64_t(slots.get(5));
    if (s5 >= 0) {
      const uint8_t* old = reinterpret_cast<const uint8_t*>(cache.storage.data());
      const int64_t esz = f == KvFormat::bf16 ? 2 : 1;
      const int64_t off =
          ((s5 / page) * cache.page_stride() + (s5 % page) * cache.entry_elems()) * esz;
      std::memcpy(want.data() + off, old + off, kv_entry_bytes(f));
    }
  }
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < bytes; ++i)
    if (got[i] != want[i] && diffs++ == 0) first = i;
  EXPECT_EQ(diffs, 0u) << kv_format_name(f) << " in " << dtype_name(in) << " page " << page
                       << ": first differing byte " << first << " got " << int(got[first])
                       << " want " << int(want[first]);
}

TEST(AppendGpu, BytesIdenticalToTheReference) {
  uint64_t seed = 1;
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla, KvFormat::fp8_e4m3})
    for (DType in : {DType::f32, DType::bf16})
      for (int64_t page : {1, 16, 64, 128}) {
        run_case(f, in, page, (seed % 2) ? (f == KvFormat::bf16 ? 8 : 16) : 0, seed);
        ++seed;
      }
}

TEST(AppendGpu, RejectsHostTensorsAndMixedDtypes) {
  Rng rng(3);
  PagedCacheSpec spec;
  PagedCache cache = make_paged_cache(rng, {10}, spec);
  HostTensor c_kv = random_tensor(rng, DType::f32, {2, kDc});
  HostTensor k_rope = random_tensor(rng, DType::bf16, {2, kDr});
  HostTensor slots(DType::i64, {2});
  DeviceBuffer d_cache(cache.storage.data(), cache.storage.size() * 8);
  DeviceBuffer d_ckv(c_kv.storage.data(), c_kv.storage.size() * 8);
  DeviceBuffer d_rope(k_rope.storage.data(), k_rope.storage.size() * 8);
  DeviceBuffer d_slots(slots.storage.data(), slots.storage.size() * 8);
  AppendKvArgs a;
  a.c_kv = c_kv.view();  // host tensor with a CUDA cache
  a.k_rope = on_device(k_rope.view(), d_rope);
  a.slots = on_device(slots.view(), d_slots);
  a.cache = cache.view(Device::cuda(0));
  a.cache.data.data = d_cache.get();
  Status st = cuda::append_kv(a, {});
  EXPECT_EQ(st.code(), Errc::invalid_device) << st.to_string();
  EXPECT_NE(st.message().find("c_kv"), std::string::npos) << st.to_string();
  a.c_kv = on_device(c_kv.view(), d_ckv);
  st = cuda::append_kv(a, {});
  EXPECT_EQ(st.code(), Errc::invalid_dtype) << st.to_string();
  EXPECT_NE(st.message().find("k_rope"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace mla::testing
