// The options of the benchmark suites, shared by `mla bench <suite>` (tools/cmd_bench.cpp)
// and the suite programs it runs (bench/bench_dsa.cu, bench_prefill.cpp, bench_layer.cpp):
// one CLI11 definition each (tools/bench_suites.cpp), so both parse the same flags, give
// the same --help, and the front end hands its parsed options on as arguments. This
// header needs no CLI11, so nvcc-compiled suites can include it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mla::cli {

// Ceilings the fractions are taken of, measured on the machine at the start of a run
// (`mla bench`: a device-to-device copy and a cuBLAS bf16 GEMM); 0 = not given.
struct BenchCeilings {
  double read_gbps = 0;    // HBM bandwidth: bytes a copy reads + writes per second, / 1e9
  double bf16_tflops = 0;  // dense bf16 tensor-core GEMM
  double fp8_tflops = 0;   // fp8: measured bf16 x the datasheet's fp8/bf16 ratio (2)
};

// mla_bench_dsa: the sparse, indexer and top-k suites.
struct DsaBenchOptions {
  std::string json = "bench_dsa.json";
  // Which cases: indexer, topk, sparse-decode, sparse-prefill, dsa-vs-dense,
  // dsa-step, topk-sweep, stages (the planner's calibration grid), all.
  std::string only = "all";
  std::vector<std::string> shape;  // topk-one's R N [k] (read from argv by the program)
  BenchCeilings peaks;
};

// mla_bench_prefill: prefill attention and the decompression GEMMs.
struct PrefillBenchOptions {
  static constexpr const char* kDescription =
      "mla_bench_prefill: prefill attention and the decompression GEMMs on the GPU; "
      "`mla bench prefill` runs it";
  static constexpr const char* kJsonHelp = "write the rows as JSON to this file";
  std::string json;
  bool quick = false;
  bool crossover = false;
  bool attention_only = false;
};

// mla_bench_layer: one DeepSeek-V3.2 attention layer's decode loop.
struct LayerBenchOptions {
  static constexpr const char* kDescription =
      "mla_bench_layer: one DeepSeek-V3.2 attention layer's decode loop on the GPU; "
      "`mla bench layer` runs it";
  static constexpr const char* kJsonHelp = "write the points as JSON to this file";
  std::string json;
  int reps = 30;
  std::string contexts = "8192,32768,65536,131072";
  std::string configs = "mla-bf16,mla-fp8,mla-bf16+dsa,mla-fp8+dsa";
  int64_t batch = 0;
};

// Parse a suite program's command line (exits after --help, or on a bad argument).
DsaBenchOptions parse_dsa_bench(int argc, char** argv);
// PrefillBenchOptions or LayerBenchOptions: --json and the suite's options.
template <class Options>
Options parse_bench(int argc, char** argv);

// The command line that parses back to these options (what `mla bench` passes on).
std::vector<std::string> to_args(const DsaBenchOptions& o);
std::vector<std::string> to_args(const PrefillBenchOptions& o);
std::vector<std::string> to_args(const LayerBenchOptions& o);

}  // namespace mla::cli
