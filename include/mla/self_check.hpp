// The self check (`mla check`, `python -m mla check`, mla_self_check): a new machine's first
// question, "do the kernels work here?". Each kernel family runs on GPU 0 and, on the same
// fresh random inputs, as the exact CPU reference; the answers are compared with the error
// bounds of the GPU tests. Small shapes with the edges the kernels must handle.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mla {

// SelfCheckResult::status, also the exit code of `mla check` and `python -m mla check`.
inline constexpr int kSelfCheckPassed = 0;  // every check passed
inline constexpr int kSelfCheckFailed = 1;  // a check failed, or the GPU cannot run the kernels
// Nothing to check here: no CUDA GPU, or a build without CUDA kernels (77 is the "skipped"
// code ctest and automake know).
inline constexpr int kSelfCheckNoGpu = 77;

// One kernel family's check.
struct SelfCheckItem {
  std::string name;   // "dense decode, bf16 cache"
  std::string shape;  // the inputs, "B4 h16 s_q2, lengths 1/37/64/300, page 64" (may be empty)
  bool ok = false;
  std::string detail;  // what was compared and how close, or what differed
  // The report line: "  ok   <name> <shape>: <detail>" ("FAIL" for a failed check).
  std::string line() const;
};

struct SelfCheckResult {
  int status = kSelfCheckNoGpu;       // kSelfCheck*
  std::string header;                 // the GPU and seed, or why nothing runs
  std::vector<SelfCheckItem> checks;  // in the order they ran (none when nothing ran)
  std::string summary;                // the verdict ("" when nothing ran)
  // The report: header, one line per check, summary; each line ends in '\n'.
  std::string text() const;
};

// Runs the checks with inputs drawn from `seed`. `on_line`, when given, receives each line
// of the report (without '\n') as soon as it is known, so a caller can show progress. Uses
// GPU 0: allocates device memory and synchronises the device. Failures of the kernels or
// the CUDA runtime are failed checks, never exceptions (only std::bad_alloc can escape).
SelfCheckResult self_check(uint64_t seed = 1,
                           const std::function<void(const std::string&)>& on_line = {});

}  // namespace mla
