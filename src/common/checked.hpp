// Overflow-checked 64-bit arithmetic for every size and offset computed from a
// caller's numbers (shapes, max_seqlen, config fields, page counts). A product
// or sum that leaves int64 is an Errc::invalid_value naming the argument and
// the operands as given, before anything is allocated or launched: a wrapped
// size would otherwise size a buffer too small and the op would write past it.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string_view>

#include "mla/status.hpp"

namespace mla::detail {

// a * b and a + b in int64; false (and *r unspecified) on overflow.
inline bool mul_ok(int64_t a, int64_t b, int64_t* r) {
  return !__builtin_mul_overflow(a, b, r);
}
inline bool add_ok(int64_t a, int64_t b, int64_t* r) {
  return !__builtin_add_overflow(a, b, r);
}

// The product of `factors`, or invalid_value:
//   "<what>: 8 * 4611686018427387904 * 4 overflows 64-bit arithmetic".
// `what` names the argument and the quantity, e.g.
//   "max_seqlen = 4611686018427387904: the logits scratch B * s_q * row * 4 bytes".
Status checked_product(std::initializer_list<int64_t> factors, std::string_view what, int64_t* out);
// The sum of `terms`, or invalid_value as above ("a + b + c overflows ...").
Status checked_sum(std::initializer_list<int64_t> terms, std::string_view what, int64_t* out);
// n rounded up to a multiple of `to` (> 0), or invalid_value.
Status checked_round_up(int64_t n, int64_t to, std::string_view what, int64_t* out);
// v as an int32 (the kernels' and the C ABI's index width), or invalid_value.
Status checked_int32(int64_t v, std::string_view what, int32_t* out);

// A scratch layout: regions of count * element bytes, each starting on an
// `align`-byte boundary, from offset 0. Every step is overflow-checked.
class ByteLayout {
 public:
  explicit ByteLayout(int64_t align) : align_(align) {}
  // Appends a region of the product of `factors` bytes; *offset gets its start.
  Status add(std::initializer_list<int64_t> factors, std::string_view what, int64_t* offset);
  // Appends `bytes` unaligned at the end (the last region).
  Status add_bytes(int64_t bytes, std::string_view what, int64_t* offset);
  int64_t bytes() const { return end_; }

 private:
  int64_t align_;
  int64_t end_ = 0;
};

}  // namespace mla::detail
