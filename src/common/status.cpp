#include "mla/status.hpp"

namespace mla {

const char* errc_name(Errc c) noexcept {
  switch (c) {
    case Errc::ok: return "ok";
    case Errc::invalid_shape: return "invalid_shape";
    case Errc::invalid_dtype: return "invalid_dtype";
    case Errc::invalid_stride: return "invalid_stride";
    case Errc::invalid_device: return "invalid_device";
    case Errc::out_of_range: return "out_of_range";
    case Errc::misaligned: return "misaligned";
    case Errc::invalid_value: return "invalid_value";
    case Errc::unsupported: return "unsupported";
    case Errc::insufficient_workspace: return "insufficient_workspace";
    case Errc::cuda_error: return "cuda_error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(errc_name(code_)) + ": " + message_;
}

}  // namespace mla
