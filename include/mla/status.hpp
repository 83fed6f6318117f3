// Typed errors returned by every mla entry point. No exceptions cross the API:
// engines embed us in C++ servers and Python via a C ABI, and both want a code
// plus a message that names the argument and the bad value.
#pragma once
#include <string>
#include <utility>

namespace mla {

enum class Errc : int {
  ok = 0,
  invalid_shape = 1,     // a dimension does not match what the operation needs
  invalid_dtype = 2,     // element type not accepted for this argument
  invalid_stride = 3,    // a layout the kernel cannot address (e.g. inner dim not contiguous)
  invalid_device = 4,    // tensors on different devices, or a device we have no backend for
  out_of_range = 5,      // an index, page, length or slot outside its valid range
  misaligned = 6,        // a pointer or stride breaks the alignment the kernel loads with
  invalid_value = 7,     // a scalar argument outside its domain (k, scale, page size...)
  unsupported = 8,       // valid input that this build or backend does not implement
  insufficient_workspace = 9,
  cuda_error = 10,       // the CUDA runtime reported an error
};

const char* errc_name(Errc c) noexcept;

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Errc code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  bool ok() const noexcept { return code_ == Errc::ok; }
  explicit operator bool() const noexcept { return ok(); }
  Errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  std::string to_string() const;

 private:
  Errc code_ = Errc::ok;
  std::string message_;
};

// Propagate a non-ok Status to the caller.
#define MLA_TRY(expr)                 \
  do {                                \
    ::mla::Status mla_st_ = (expr);   \
    if (!mla_st_.ok()) return mla_st_; \
  } while (0)

}  // namespace mla
