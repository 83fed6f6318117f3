// GPU table of the planner. Dense (non-sparse) tensor-core peaks per GPU; SI units.
// Each row names its source. Our own measurements (docs/benchmarks.md) sit beside the
// datasheet and win where present.
#include <fmt/format.h>

#include <array>

#include "mla/plan.hpp"
#include "plan/lookup.hpp"

namespace mla::plan {
namespace {

constexpr double GB = 1e9, TB = 1e12, TF = 1e12, MiB = 1024.0 * 1024.0;

constexpr std::array<GpuSpec, 6> kGpus = {{
    // NVIDIA H100 Tensor Core GPU datasheet, SXM5 column (BF16 1,979 and FP8 3,958 TFLOPS
    // are quoted with sparsity: dense is half); SMs and L2 from the NVIDIA H100 whitepaper.
    {"h100", "NVIDIA H100 SXM5 80GB", "hopper", 80 * GB, 3.35 * TB, 989.4 * TF, 1978.9 * TF, 0,
     900 * GB, 132, 50 * MiB,
     "NVIDIA H100 Tensor Core GPU datasheet (SXM5); H100 architecture whitepaper (SMs, L2)", 0, 0,
     0, 0, ""},
    // The H800 is the H100 SXM5 with NVLink cut to 400 GB/s (NVIDIA H800 product brief);
    // memory and tensor throughput are the H100's.
    {"h800", "NVIDIA H800 SXM5 80GB", "hopper", 80 * GB, 3.35 * TB, 989.4 * TF, 1978.9 * TF, 0,
     400 * GB, 132, 50 * MiB, "NVIDIA H800 SXM5 product brief (H100 compute, 400 GB/s NVLink)", 0,
     0, 0, 0, ""},
    // NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e at 4.8 TB/s, H100 compute.
    // L2: the datasheet does not list it; 60 MB is what our H200 reports (docs/benchmarks.md).
    {"h200", "NVIDIA H200 SXM 141GB", "hopper", 141 * GB, 4.8 * TB, 989.4 * TF, 1978.9 * TF, 0,
     900 * GB, 132, 60e6,
     "NVIDIA H200 Tensor Core GPU datasheet (SXM); L2 as reported by our H200 (docs/benchmarks.md)",
     // docs/benchmarks.md, measured 2026-11-29 on the H200 we are lent.
     4391 * GB, 4284 * GB, 792 * TF, 1447 * TF,
     "docs/benchmarks.md (our H200): read pass 4391 GB/s, copy 4284 GB/s, bf16 matmul 792 TFLOP/s, "
     "fp8 matmul 1447 TFLOP/s"},
    // NVIDIA H20 product brief (export part for China): 96 GB HBM3, 4.0 TB/s, BF16 148 and
    // FP8 296 TFLOPS dense, NVLink 900 GB/s. SM count 78 and L2 60 MB from public reports
    // (not in the brief).
    {"h20", "NVIDIA H20 96GB", "hopper", 96 * GB, 4.0 * TB, 148 * TF, 296 * TF, 0, 900 * GB, 78,
     60e6, "NVIDIA H20 product brief; SMs and L2 from public reports (not in the brief)", 0, 0, 0,
     0, ""},
    // NVIDIA HGX/DGX B200 datasheet: per GPU 1/8 of the 8-GPU figures; 1,440 GB total ->
    // 180 GB usable (192 GB physical, as announced); 8 TB/s; BF16 4.5, FP8 9, FP4 18 PFLOPS
    // quoted with sparsity (FP4 dense 9 PFLOPS); NVLink 5 1.8 TB/s. 148 SMs, L2 ~126 MB from
    // public microbenchmark reports (not in the datasheet).
    {"b200", "NVIDIA B200 (HGX) 180GB", "blackwell", 180 * GB, 8.0 * TB, 2250 * TF, 4500 * TF,
     9000 * TF, 1800 * GB, 148, 126e6,
     "NVIDIA HGX B200 / DGX B200 datasheet (per GPU = 8-GPU figure / 8); SMs, L2 from public "
     "reports",
     0, 0, 0, 0, ""},
    // NVIDIA HGX B300 datasheet: 2.3 TB total -> 288 GB per GPU, 8 TB/s, BF16 and FP8 as the
    // B200, dense FP4 105 PFLOPS per 8 GPUs -> 13.1 PFLOPS (Blackwell Ultra's gain), NVLink 5
    // 1.8 TB/s. 160 SMs and L2 ~126 MB from public reports (not in the datasheet).
    {"b300", "NVIDIA B300 (HGX, Blackwell Ultra) 288GB", "blackwell", 288 * GB, 8.0 * TB, 2250 * TF,
     4500 * TF, 13125 * TF, 1800 * GB, 160, 126e6,
     "NVIDIA HGX B300 datasheet (per GPU = 8-GPU figure / 8); SMs, L2 from public reports", 0, 0, 0,
     0, ""},
}};

}  // namespace

std::span<const GpuSpec> known_gpus() {
  return kGpus;
}

Status find_gpu(std::string_view name, const GpuSpec** out) {
  return detail::find_by_name(known_gpus(), name, "gpu", out);
}

Ceilings ceilings_for(const GpuSpec& g) {
  Ceilings c{};
  c.read_bw_measured = g.measured_read_bw > 0;
  c.bf16_measured = g.measured_bf16_flops > 0;
  c.fp8_measured = g.measured_fp8_flops > 0;
  c.read_bw = c.read_bw_measured ? g.measured_read_bw : g.hbm_bw;
  c.bf16_flops = c.bf16_measured ? g.measured_bf16_flops : g.bf16_flops;
  c.fp8_flops = c.fp8_measured ? g.measured_fp8_flops : g.fp8_flops;
  c.fp4_flops = g.fp4_flops;  // never measured yet: no FP4 GPU in our hands
  auto tag = [](bool measured) { return measured ? "measured" : "datasheet"; };
  c.source = fmt::format(
      "HBM read {:.0f} GB/s ({}), bf16 {:.0f} TFLOP/s ({}), fp8 {:.0f} TFLOP/s ({}){}",
      c.read_bw / 1e9, tag(c.read_bw_measured), c.bf16_flops / 1e12, tag(c.bf16_measured),
      c.fp8_flops / 1e12, tag(c.fp8_measured),
      c.fp4_flops > 0 ? fmt::format(", fp4 {:.0f} TFLOP/s (datasheet)", c.fp4_flops / 1e12)
                      : std::string());
  return c;
}

}  // namespace mla::plan
