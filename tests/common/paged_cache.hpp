// A caller-owned paged latent cache for tests: its own byte buffer (poisoned so
// a stray read or write shows), an optional padding between pages (engines pad),
// and the KvCacheView over it.
#pragma once
#include <cstdint>
#include <vector>

#include "mla/kv_cache.hpp"

namespace mla::testing {

inline constexpr uint8_t kCachePoison = 0x5a;

struct PagedCache {
  std::vector<uint8_t> bytes;
  KvCacheView view;

  // page_pad_entries: extra entries' worth of elements between pages.
  PagedCache(KvFormat format, int64_t num_pages, int64_t page_size, int64_t page_pad_entries = 0) {
    const int64_t entry_elems = format == KvFormat::bf16 ? kDqk : Fp8DsMlaLayout::kEntryBytes;
    const DType dt = format == KvFormat::bf16 ? DType::bf16 : DType::u8;
    const int64_t page_stride = (page_size + page_pad_entries) * entry_elems;
    bytes.assign(
        static_cast<size_t>(std::max<int64_t>(num_pages, 1) * page_stride * dtype_size(dt)),
        kCachePoison);
    view.format = format;
    view.data = TensorView::make(bytes.data(), dt, {num_pages, page_size, 1, entry_elems});
    view.data.strides[0] = page_stride;
  }
  int64_t capacity() const { return view.num_pages() * view.page_size(); }
};

}  // namespace mla::testing
