// Decode attention over several GPUs, one process each, the two splits side
// by side (docs/multi-gpu.md section 4; host arithmetic in mla/attn_split.hpp):
//   heads: rank r holds the latent cache of all B requests (MLA has one KV
//     head, so it cannot be split by head) and runs mla::mla_decode with
//     h_q = H / world on its heads; then the per-head W_UV + o_proj partial
//     products are summed across ranks. That sum is modelled as what it is in
//     a tensor-parallel layer: ncclAllReduce of the [B, hidden] bf16 output
//     (the projection GEMMs themselves are left out of both splits). Not an
//     all-gather of [B, H / world, 512]: that moves 4.6x the bytes for V3 and
//     would make every rank hold all of W_UV and o_proj and repeat the whole
//     projection.
//   batch: rank r holds the caches of its B / world requests only and runs all
//     H heads over them; nothing is exchanged inside attention.
// Each split: warm-up steps, then N steps back to back on one stream, each
// timed with CUDA events; the median per rank, the slowest rank's median
// reported (in a model the next collective waits for it). One step is one
// layer's attention; tokens/s counts `--layers` of them (attention only).
// Check: both splits compute requests of the rank's batch slice x heads of
// its head slice from the same data; they must agree to --tol.
//   torchrun --standalone --nproc-per-node 2 --no-python build/mla_attn_split --batch 64
#include "mla/attn_split.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "examples/common/check.hpp"
#include "examples/common/launch_flags.hpp"
#include "examples/common/random_fill.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"
#include "mla/kv_cache.hpp"
#include "mla/numeric.hpp"
#include "mla/transfer.hpp"

namespace {

using namespace mla;
using parallel::AttnSplit;

struct Options {
  int64_t batch = 64, context = 32768, page = 64;
  std::string format = "bf16";
  int heads = 128, layers = 61, hidden = 7168, steps = 50, warmup = 10;
  double kv_budget_gib = 0, tol = 1.0 / 128;
  std::string id_file, json;
  LaunchInfo who;
};

// Medians over the measured steps of one split, then the slowest rank's.
struct Timing {
  double attn_ms = 0, comm_ms = 0, step_ms = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class AttnSplitBench {
 public:
  explicit AttnSplitBench(const Options& o) : o_(o), dev_(Device::cuda(o.who.local_rank)) {}
  int run();

 private:
  const Options& o_;
  Device dev_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  KvFormat format_ = KvFormat::bf16;
  parallel::RankSlice hs_, rs_;  // this rank's heads (head split), requests (batch split)
  int64_t pages_per_request_ = 0;
  bool full_cache_ = false;  // this rank holds every request (head split can run)
  char* cache_ = nullptr;
  int64_t cache_pages_ = 0;
  int32_t *bt_heads_ = nullptr, *bt_batch_ = nullptr, *seqlens_ = nullptr;
  uint16_t *q_full_ = nullptr, *q_heads_ = nullptr, *out_heads_ = nullptr, *out_batch_ = nullptr;
  float *lse_heads_ = nullptr, *lse_batch_ = nullptr;
  uint16_t *ar_send_ = nullptr, *ar_recv_ = nullptr;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  double* scratch_ = nullptr;  // device doubles for cross-rank reductions

  template <class T>
  T* alloc(int64_t count) {
    void* p = nullptr;
    EXAMPLE_CHECK(cudaMalloc(&p, std::max<int64_t>(count, 1) * sizeof(T)));
    return static_cast<T*>(p);
  }
  void reduce(double* v, int n, ncclRedOp_t op);  // in place, across ranks
  void barrier() {
    double x = 0;
    reduce(&x, 1, ncclSum);
  }
  void setup();
  DecodeArgs args(AttnSplit s) const;
  Timing time(AttnSplit s);
};

void AttnSplitBench::reduce(double* v, int n, ncclRedOp_t op) {
  EXAMPLE_CHECK(cudaMemcpyAsync(scratch_, v, n * sizeof(double), cudaMemcpyHostToDevice, stream_));
  EXAMPLE_CHECK(ncclAllReduce(scratch_, scratch_, n, ncclDouble, op, comm_, stream_));
  EXAMPLE_CHECK(cudaMemcpyAsync(v, scratch_, n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
  EXAMPLE_CHECK(cudaStreamSynchronize(stream_));
}

// The cache: pages_per_request_ contiguous pages per request, filled from a
// seed of the request's global index, so both splits (and every rank) see the
// same keys for request b. Every rank tries to hold all B requests (head
// split); when that does not fit on some rank, head split is skipped
// everywhere and each rank holds only its batch-split requests.
void AttnSplitBench::setup() {
  const int64_t B = o_.batch, H = o_.heads, h = hs_.count, n = rs_.count;
  const int64_t entry = kv_entry_bytes(format_), page_bytes = o_.page * entry;
  pages_per_request_ = std::max<int64_t>(1, (o_.context + o_.page - 1) / o_.page);
  void* p = nullptr;
  full_cache_ = cudaMalloc(&p, B * pages_per_request_ * page_bytes) == cudaSuccess;
  double fits = full_cache_ ? 1 : 0;
  reduce(&fits, 1, ncclMin);
  if (!full_cache_) (void)cudaGetLastError();  // the failed allocation's error, consumed
  if (full_cache_ && fits == 0) {
    EXAMPLE_CHECK(cudaFree(p));
    full_cache_ = false;
  }
  cache_pages_ = (full_cache_ ? B : n) * pages_per_request_;
  if (full_cache_)
    cache_ = static_cast<char*>(p);
  else
    cache_ = alloc<char>(cache_pages_ * page_bytes);
  const int64_t first = full_cache_ ? 0 : rs_.begin, held = full_cache_ ? B : n;
  for (int64_t i = 0; i < held; ++i) {
    char* region = cache_ + i * pages_per_request_ * page_bytes;
    const int64_t tokens = pages_per_request_ * o_.page;
    const uint64_t seed = 1000 + uint64_t(first + i);
    if (format_ == KvFormat::bf16)
      EXAMPLE_CHECK(examples::fill_uniform_bf16(region, tokens * kDqk, -1.f, 1.f, seed));
    else
      EXAMPLE_CHECK(examples::fill_fp8_ds_mla(region, tokens, entry, seed));
  }
  // Block tables: row i lists the pages of the i-th request this split runs.
  auto table = [&](int64_t first_request, int64_t rows) {
    std::vector<int32_t> t(std::max<int64_t>(rows, 1) * pages_per_request_);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < pages_per_request_; ++j)
        t[i * pages_per_request_ + j] =
            int32_t((first_request + i - first) * pages_per_request_ + j);
    int32_t* d = alloc<int32_t>(t.size());
    EXAMPLE_CHECK(cudaMemcpy(d, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
    return d;
  };
  if (full_cache_) bt_heads_ = table(0, B);
  bt_batch_ = table(rs_.begin, n);
  const std::vector<int32_t> lens(B, int32_t(o_.context));
  seqlens_ = alloc<int32_t>(B);
  EXAMPLE_CHECK(cudaMemcpy(seqlens_, lens.data(), B * 4, cudaMemcpyHostToDevice));
  // Queries: [B, 1, H, 576], the same on every rank; head split takes its heads.
  q_full_ = alloc<uint16_t>(B * H * kDqk);
  EXAMPLE_CHECK(examples::fill_uniform_bf16(q_full_, B * H * kDqk, -1.f, 1.f, 7));
  q_heads_ = alloc<uint16_t>(B * h * kDqk);
  EXAMPLE_CHECK(cudaMemcpy2DAsync(q_heads_, h * kDqk * 2, q_full_ + hs_.begin * kDqk, H * kDqk * 2,
                                  h * kDqk * 2, B, cudaMemcpyDeviceToDevice, stream_));
  out_heads_ = alloc<uint16_t>(B * h * kDv);
  lse_heads_ = alloc<float>(B * h);
  out_batch_ = alloc<uint16_t>(n * H * kDv);
  lse_batch_ = alloc<float>(n * H);
  EXAMPLE_CHECK(cudaMemsetAsync(out_heads_, 0xff, B * h * kDv * 2, stream_));  // NaN poison
  EXAMPLE_CHECK(cudaMemsetAsync(out_batch_, 0xff, n * H * kDv * 2, stream_));
  ar_send_ = alloc<uint16_t>(B * o_.hidden);
  ar_recv_ = alloc<uint16_t>(B * o_.hidden);
  EXAMPLE_CHECK(examples::fill_uniform_bf16(ar_send_, B * o_.hidden, -1.f, 1.f, 8));
  for (AttnSplit s : {AttnSplit::heads, AttnSplit::batch}) {
    if (s == AttnSplit::heads ? !full_cache_ : n == 0) continue;
    size_t need = 0;
    EXAMPLE_CHECK(decode_workspace_size(args(s), {}, &need));
    ws_bytes_ = std::max(ws_bytes_, need);
  }
  ws_ = alloc<char>(ws_bytes_);
  EXAMPLE_CHECK(cudaStreamSynchronize(stream_));
}

DecodeArgs AttnSplitBench::args(AttnSplit s) const {
  const bool heads = s == AttnSplit::heads;
  const int64_t rows = heads ? o_.batch : rs_.count, h = heads ? hs_.count : o_.heads;
  uint16_t* q = heads ? q_heads_ : q_full_ + rs_.begin * o_.heads * kDqk;
  DecodeArgs d;
  d.q = TensorView::make(q, DType::bf16, {rows, 1, h, kDqk}, dev_);
  d.kv.format = format_;
  d.kv.data = TensorView::make(
      cache_, format_ == KvFormat::bf16 ? DType::bf16 : DType::u8,
      {cache_pages_, o_.page, 1,
       format_ == KvFormat::bf16 ? int64_t{kDqk} : int64_t{Fp8DsMlaLayout::kEntryBytes}},
      dev_);
  d.block_table =
      TensorView::make(heads ? bt_heads_ : bt_batch_, DType::i32, {rows, pages_per_request_}, dev_);
  d.cache_seqlens = TensorView::make(seqlens_, DType::i32, {rows}, dev_);
  d.softmax_scale = float(deepseek_v32_softmax_scale());
  d.out = TensorView::make(heads ? out_heads_ : out_batch_, DType::bf16, {rows, 1, h, kDv}, dev_);
  d.lse = TensorView::make(heads ? lse_heads_ : lse_batch_, DType::f32, {rows, h, 1}, dev_);
  return d;
}

// warm-up + steps, back to back on one stream; per step: attention, then (head
// split) the all-reduce of the projected output.
Timing AttnSplitBench::time(AttnSplit s) {
  const bool heads = s == AttnSplit::heads;
  const bool attend = heads || rs_.count > 0;
  const bool reduce_out = heads && o_.who.world_size > 1;
  const DecodeArgs d = args(s);
  const int total = o_.warmup + o_.steps;
  std::vector<cudaEvent_t> ev(3 * total);
  for (auto& e : ev) EXAMPLE_CHECK(cudaEventCreate(&e));
  barrier();
  for (int i = 0; i < total; ++i) {
    EXAMPLE_CHECK(cudaEventRecord(ev[3 * i], stream_));
    if (attend) EXAMPLE_CHECK(mla_decode(d, {}, {ws_, ws_bytes_}, {stream_}));
    EXAMPLE_CHECK(cudaEventRecord(ev[3 * i + 1], stream_));
    if (reduce_out)
      EXAMPLE_CHECK(ncclAllReduce(ar_send_, ar_recv_, o_.batch * o_.hidden, ncclBfloat16, ncclSum,
                                  comm_, stream_));
    EXAMPLE_CHECK(cudaEventRecord(ev[3 * i + 2], stream_));
  }
  EXAMPLE_CHECK(cudaStreamSynchronize(stream_));
  std::vector<double> attn, comm, step;
  for (int i = o_.warmup; i < total; ++i) {
    float a = 0, c = 0, t = 0;
    EXAMPLE_CHECK(cudaEventElapsedTime(&a, ev[3 * i], ev[3 * i + 1]));
    EXAMPLE_CHECK(cudaEventElapsedTime(&c, ev[3 * i + 1], ev[3 * i + 2]));
    EXAMPLE_CHECK(cudaEventElapsedTime(&t, ev[3 * i], ev[3 * i + 2]));
    attn.push_back(a), comm.push_back(c), step.push_back(t);
  }
  for (auto& e : ev) EXAMPLE_CHECK(cudaEventDestroy(e));
  double m[3] = {median(attn), median(comm), median(step)};
  reduce(m, 3, ncclMax);  // the slowest rank sets the step
  return {m[0], m[1], m[2]};
}

int AttnSplitBench::run() {
  const int world = o_.who.world_size, rank = o_.who.rank;
  format_ = o_.format == "fp8" ? KvFormat::fp8_ds_mla : KvFormat::bf16;
  EXAMPLE_CHECK(parallel::split_heads(o_.heads, world, rank, &hs_));
  EXAMPLE_CHECK(parallel::split_requests(o_.batch, world, rank, &rs_));
  parallel::AttnSplitShape shape;
  shape.world_size = world;
  shape.num_heads = o_.heads;
  shape.batch = o_.batch;
  shape.context = o_.context;
  shape.format = format_;
  shape.page_size = o_.page;
  shape.layers = o_.layers;
  shape.hidden = o_.hidden;
  parallel::AttnSplitCost cost[2];
  EXAMPLE_CHECK(parallel::attn_split_cost(shape, AttnSplit::heads, &cost[0]));
  EXAMPLE_CHECK(parallel::attn_split_cost(shape, AttnSplit::batch, &cost[1]));

  void* comm = nullptr;
  EXAMPLE_CHECK(nccl_comm_init(o_.who, o_.id_file, &comm));  // selects GPU LOCAL_RANK
  comm_ = static_cast<ncclComm_t>(comm);
  EXAMPLE_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  scratch_ = alloc<double>(4);
  // The cache budget per GPU (weights are not counted: an engine subtracts them).
  size_t free_b = 0, total_b = 0;
  EXAMPLE_CHECK(cudaMemGetInfo(&free_b, &total_b));
  double budget = o_.kv_budget_gib > 0 ? o_.kv_budget_gib * double(1 << 30) : 0.9 * total_b;
  reduce(&budget, 1, ncclMin);
  parallel::AttnSplitCapacity cap[2];
  EXAMPLE_CHECK(parallel::attn_split_capacity(shape, AttnSplit::heads, int64_t(budget), &cap[0]));
  EXAMPLE_CHECK(parallel::attn_split_capacity(shape, AttnSplit::batch, int64_t(budget), &cap[1]));

  setup();
  Timing t[2];
  if (full_cache_) t[0] = time(AttnSplit::heads);
  t[1] = time(AttnSplit::batch);

  // Agreement on the overlap: requests [rs.begin, +n) x heads [hs.begin, +h).
  double check[2] = {0, 0};  // largest |diff| / largest |value|, values differing
  if (full_cache_ && rs_.count > 0) {
    const int64_t n = rs_.count, h = hs_.count, row = h * kDv;
    std::vector<uint16_t> a(n * row), b(n * row);
    EXAMPLE_CHECK(
        cudaMemcpy(a.data(), out_heads_ + rs_.begin * row, n * row * 2, cudaMemcpyDeviceToHost));
    EXAMPLE_CHECK(cudaMemcpy2D(b.data(), row * 2, out_batch_ + hs_.begin * kDv, o_.heads * kDv * 2,
                               row * 2, n, cudaMemcpyDeviceToHost));
    double diff = 0, big = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = bf16_to_float(bf16{a[i]}), y = bf16_to_float(bf16{b[i]});
      const double d = std::isfinite(x) && std::isfinite(y) ? std::abs(x - y) : INFINITY;
      diff = std::max(diff, d);
      big = std::max(big, std::abs(y));
      check[1] += a[i] != b[i];
    }
    check[0] = big > 0 ? diff / big : diff;
  }
  reduce(&check[0], 1, ncclMax);  // the worst rank's ratio
  reduce(&check[1], 1, ncclSum);  // differing values over all ranks
  const bool agree = !full_cache_ || check[0] <= o_.tol;

  if (rank == 0) {
    const char* name[2] = {"heads", "batch"};
    const bool ran[2] = {full_cache_, true};
    nlohmann::json j = {{"world_size", world},
                        {"batch", o_.batch},
                        {"context", o_.context},
                        {"format", kv_format_name(format_)},
                        {"page_size", o_.page},
                        {"heads", o_.heads},
                        {"layers", o_.layers},
                        {"hidden", o_.hidden},
                        {"steps", o_.steps},
                        {"warmup", o_.warmup},
                        {"kv_budget_bytes_per_gpu", int64_t(budget)},
                        {"communication", "ncclAllReduce of [batch, hidden] bf16 (head split)"},
                        {"check_max_rel_diff", check[0]},
                        {"check_values_differing", int64_t(check[1])},
                        {"check_ok", agree}};
    fmt::print(
        "mla_attn_split: {} GPUs, batch {} x context {}, {} cache (pages of {}), {} heads; "
        "median of {} steps after {} warm-up, slowest rank; one step = one layer's attention\n"
        "| split | heads/GPU | requests/GPU | attention us | all-reduce us | step us | "
        "tokens/s ({} layers, attention only) | KV GB/GPU (1 layer) | KV GB/GPU ({} layers) | "
        "max requests/GPU | max batch served |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|\n",
        world, o_.batch, o_.context, kv_format_name(format_), o_.page, o_.heads, o_.steps,
        o_.warmup, o_.layers, o_.layers);
    for (int s = 0; s < 2; ++s) {
      const double tps =
          ran[s] && t[s].step_ms > 0 ? o_.batch / (t[s].step_ms * 1e-3 * o_.layers) : 0;
      const double kv1 = double(cost[s].kv_bytes_per_gpu) / o_.layers / 1e9;
      if (ran[s])
        fmt::print(
            "| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f} | {:.3f} | {:.2f} | {} | {} |\n",
            name[s], cost[s].heads_per_gpu, cost[s].requests_per_gpu, 1e3 * t[s].attn_ms,
            1e3 * t[s].comm_ms, 1e3 * t[s].step_ms, tps, kv1, cost[s].kv_bytes_per_gpu / 1e9,
            cap[s].requests_per_gpu, cap[s].total_batch);
      else
        fmt::print("| {} | {} | {} | does not fit | | | | {:.3f} | {:.2f} | {} | {} |\n", name[s],
                   cost[s].heads_per_gpu, cost[s].requests_per_gpu, kv1,
                   cost[s].kv_bytes_per_gpu / 1e9, cap[s].requests_per_gpu, cap[s].total_batch);
      j[name[s]] = {{"ran", ran[s]},
                    {"heads_per_gpu", cost[s].heads_per_gpu},
                    {"requests_per_gpu", cost[s].requests_per_gpu},
                    {"attention_us", 1e3 * t[s].attn_ms},
                    {"allreduce_us", 1e3 * t[s].comm_ms},
                    {"step_us", 1e3 * t[s].step_ms},
                    {"tokens_per_s_attention_only", tps},
                    {"kv_bytes_per_gpu_one_layer", cost[s].kv_bytes_per_gpu / o_.layers},
                    {"kv_bytes_per_gpu_all_layers", cost[s].kv_bytes_per_gpu},
                    {"kv_bytes_read_per_layer", cost[s].kv_bytes_read_per_layer},
                    {"allreduce_payload_bytes", cost[s].allreduce_payload_bytes},
                    {"allreduce_wire_bytes_per_gpu", cost[s].allreduce_wire_bytes},
                    {"allgather_alternative_wire_bytes_per_gpu", cost[s].allgather_wire_bytes},
                    {"max_requests_per_gpu", cap[s].requests_per_gpu},
                    {"max_batch_served", cap[s].total_batch}};
    }
    fmt::print(
        "head split's output sum: ncclAllReduce of [{}, {}] bf16 = {:.2f} MB/layer ({:.2f} MB "
        "sent per GPU); an all-gather of [B, {}, 512] would send {:.2f} MB per GPU\n",
        o_.batch, o_.hidden, cost[0].allreduce_payload_bytes / 1e6,
        cost[0].allreduce_wire_bytes / 1e6, hs_.count, cost[0].allgather_wire_bytes / 1e6);
    if (full_cache_) {
      fmt::print(
          "check (overlap of both splits): max |diff| / max |value| = {:.2e} (tol {:.2e}), "
          "{} bf16 values differ: {}\n",
          check[0], o_.tol, int64_t(check[1]), agree ? "ok" : "FAILED");
      const double ratio = t[1].step_ms > 0 ? t[0].step_ms / t[1].step_ms : 0;
      j["head_over_batch_step_ratio"] = ratio;
      fmt::print("head / batch step time: {:.2f}; batch split serves {}x the requests\n", ratio,
                 world);
    }
    if (!o_.json.empty()) std::ofstream(o_.json) << j.dump(2) << "\n";
  }
  EXAMPLE_CHECK(nccl_comm_destroy(comm_));
  return agree ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"MLA decode attention over GPUs: head split vs batch split (one process per GPU)"};
  app.add_option("--batch", o.batch, "requests in all (B)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--context", o.context, "tokens in each request's cache (L)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--format", o.format, "cache format")->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--page", o.page, "page size (tokens)")->check(CLI::Range(1, 1024));
  app.add_option("--heads", o.heads, "query heads in all (DeepSeek-V3: 128)")
      ->check(CLI::Range(16, 1024));
  app.add_option("--layers", o.layers, "layers for tokens/s and cache bytes")
      ->check(CLI::Range(1, 256));
  app.add_option("--hidden", o.hidden, "model width of the all-reduced output")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--steps", o.steps, "measured steps (median)")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "warm-up steps")->check(CLI::Range(0, 100000));
  app.add_option("--kv-budget-gib", o.kv_budget_gib,
                 "cache memory per GPU for the capacity columns (default 90% of the GPU)");
  app.add_option("--tol", o.tol, "largest |head - batch| / largest |value| accepted");
  app.add_option("--id-file", o.id_file, "exchange NCCL's id through this file instead of TCP");
  app.add_option("--json", o.json, "write the results here (rank 0)");
  examples::LaunchFlags launch;
  examples::add_launch_flags(app, launch);
  CLI11_PARSE(app, argc, argv);
  EXAMPLE_CHECK(examples::resolve_launch(launch, 29512, &o.who));
  AttnSplitBench b(o);
  return b.run();
}
