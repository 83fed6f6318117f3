// Prefill/decode disaggregation on two GPUs, one process each (docs/multi-gpu.md):
//   rank 0 (prefill): chunked prefill of one request through every layer; each
//     (chunk, layer) appends its entries to the paged cache (mla::append_kv,
//     and the indexer keys with --indexer), runs the chunk's attention over the
//     cache (non-absorbed chunked prefill), records an event; the transfer
//     stream sends that layer's new tokens as soon as the event fires;
//   rank 1 (decode): receives into its own pages (other ids, another page size
//     if asked), then decodes the first token of every layer (mla::mla_decode).
// Checks: rank 0 decodes the same queries over its own cache (single-GPU
// decode); the two outputs must be equal bit for bit. The whole cache (latent
// + indexer, every layer) is gathered on both ranks and compared byte for byte.
// Reports: the GPU-to-GPU bandwidth measured in this run with one big
// ncclSend, the transfer's GB/s against it, TTFT, and how much of the transfer
// hid behind prefill compute. Start with torchrun-style variables or flags:
//   torchrun --nproc-per-node 2 build/mla_disagg --tokens 16384
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "examples/common/launch_flags.hpp"
#include "examples/common/random_fill.hpp"
#include "mla/decode.hpp"
#include "mla/indexer.hpp"
#include "mla/kv_cache.hpp"
#include "mla/prefill.hpp"
#include "mla/support.hpp"
#include "mla/transfer.hpp"

namespace {

using namespace mla;

[[noreturn]] void die(const std::string& what) {
  fmt::print(stderr, "mla_disagg: {}\n", what);
  std::exit(1);
}
void check(const Status& s, const char* what) {
  if (!s.ok()) die(fmt::format("{}: {}", what, s.to_string()));
}
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  // No GPU or no driver reads "CUDA driver version is insufficient": say which.
  const Support s = is_supported(OpFamily::kv_cache, 0);
  if ((e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) && !s.supported)
    die(fmt::format("{}: {}", what, s.reason));
  die(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(fmt::format("{}: {}", what, ncclGetErrorString(r)));
}

template <class T>
T* device_alloc(int64_t count, const char* what) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<int64_t>(count, 1) * sizeof(T)), what);
  return static_cast<T*>(p);
}

struct Options {
  int64_t tokens = 16384;
  int layers = 61;
  int64_t chunk = 4096;
  std::string format = "bf16";
  int64_t src_page = 64, dst_page = 64;
  bool src_scattered = false, dst_scattered = true, indexer = false;
  bool pack_stream = true;    // pack/unpack on a second stream, under the wire
  bool span_layers = true;    // the whole-request transfer: messages span layers
  int64_t staging_mib = 256;  // staging at least this big (spanning messages; best measured)
  int64_t direct_min = int64_t{1} << 20;
  int64_t bw_mib = 1024;
  std::string id_file, json;
  LaunchInfo who;
};

// One rank's layer-major paged pool (layer l at base + l * layer_stride) and
// the request's page ids in it. Both ranks build both geometries and page
// lists from the same seeds (in an engine the decode server sends its page
// ids with the request); each allocates only its own.
struct Pool {
  int64_t num_pages = 0, page_size = 0, page_stride = 0, layer_stride = 0;
  std::vector<int32_t> pages;
  char* base = nullptr;
  int32_t* pages_dev = nullptr;

  Pool(int64_t need, int64_t page_size_, int64_t page_bytes, bool scattered, uint64_t seed)
      : num_pages(need + need / 4 + 3), page_size(page_size_), page_stride(page_bytes) {
    layer_stride = num_pages * page_stride;
    std::vector<int32_t> all(num_pages);
    std::iota(all.begin(), all.end(), 0);
    if (scattered) std::shuffle(all.begin(), all.end(), std::mt19937_64(seed));
    pages.assign(all.begin(), all.begin() + need);
  }
  void allocate(int layers) {
    base = device_alloc<char>(layers * layer_stride, "cudaMalloc(pool)");
    check(cudaMemset(base, 0xff, layers * layer_stride), "cudaMemset(pool)");  // NaN poison
    pages_dev = device_alloc<int32_t>(pages.size(), "cudaMalloc(pages)");
    check(cudaMemcpy(pages_dev, pages.data(), pages.size() * 4, cudaMemcpyHostToDevice),
          "upload pages");
  }
  TransferSide side() const { return {pages, num_pages, page_size, page_stride, layer_stride}; }
  std::vector<void*> bases(int layers) const { return layer_bases(base, layer_stride, layers); }
  char* layer(int l) const { return base + l * layer_stride; }
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { check(cudaEventCreate(&e), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  void record(cudaStream_t s) { check(cudaEventRecord(e, s), "cudaEventRecord"); }
  float ms_since(const Event& start) const {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.e, e), "cudaEventElapsedTime");
    return ms;
  }
};

// The random bf16 inputs of the timed loops (uniform in [-1, 1)): one pool made once on
// the host (examples/common/random_fill.hpp, the same on both ranks), and each input a
// copy of `n` values from an offset picked by its seed, on the stream: the timed loops do
// no host work, and every layer and chunk gets its own data.
class RandomPool {
 public:
  void allocate(int64_t n) {
    n_ = n;
    pool_ = device_alloc<uint16_t>(n, "random pool");
    check(examples::fill_uniform_bf16(pool_, n, -1.f, 1.f, 1), "fill_uniform_bf16");
  }
  void fill(void* p, int64_t n, uint64_t seed, cudaStream_t s) const {
    if (n > n_) die(fmt::format("random pool: {} values asked of a pool of {}", n, n_));
    const int64_t offset = int64_t(examples::splitmix64(seed) % uint64_t(n_ - n + 1));
    check(cudaMemcpyAsync(p, pool_ + offset, size_t(n) * 2, cudaMemcpyDeviceToDevice, s),
          "random fill");
  }

 private:
  uint16_t* pool_ = nullptr;
  int64_t n_ = 0;
};

class Disagg {
 public:
  explicit Disagg(const Options& o);
  int run();

 private:
  const Options& o_;
  int rank_, peer_;
  Device dev_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t compute_ = nullptr, xfer_ = nullptr, pack_ = nullptr;
  KvFormat format_;
  int64_t entry_;
  Pool src_, dst_, isrc_, idst_;  // latent and indexer pools of both ranks
  Pool &mine_, &imine_;
  // Prefill inputs and scratch (rank 0).
  int64_t* slots_dev_ = nullptr;   // [T] source-cache slots, latent
  int64_t* islots_dev_ = nullptr;  // [T] indexer slots
  void *ckv_ = nullptr, *rope_ = nullptr, *ikeys_ = nullptr, *pq_ = nullptr, *pout_ = nullptr;
  void *w_uk_ = nullptr, *w_uv_ = nullptr, *ws_ = nullptr, *staging_ = nullptr;
  size_t ws_bytes_ = 0;
  int64_t staging_bytes_ = 0;
  RandomPool random_;

  void barrier();
  double measure_bandwidth(size_t bytes, int reps);
  TransferRequest request(int64_t first, int64_t n) const;
  void setup_prefill();
  void prefill(bool send);  // every chunk through every layer, optionally sending as it goes
  void decode(const Pool& p, void* out);
  std::vector<uint8_t> gather(const Pool& lat, const Pool& idx);
  NcclTransferOptions xfer_options(std::span<void* const> ready, std::span<void* const> done);
  // The whole request at once (no layer events): messages may span layers.
  NcclTransferOptions whole_options() {
    NcclTransferOptions x = xfer_options({}, {});
    x.messages_span_layers = o_.span_layers;
    return x;
  }
};

Disagg::Disagg(const Options& o)
    : o_(o),
      rank_(o.who.rank),
      peer_(1 - o.who.rank),
      dev_(Device::cuda(o.who.local_rank)),
      format_(o.format == "fp8" ? KvFormat::fp8_ds_mla : KvFormat::bf16),
      entry_(kv_entry_bytes(format_)),
      src_((o.tokens + o.src_page - 1) / o.src_page, o.src_page, o.src_page * entry_,
           o.src_scattered, 1),
      dst_((o.tokens + o.dst_page - 1) / o.dst_page, o.dst_page, o.dst_page * entry_,
           o.dst_scattered, 2),
      isrc_((o.tokens + 63) / 64, 64, IndexerCacheLayout::kPageBytes, o.src_scattered, 3),
      idst_((o.tokens + 63) / 64, 64, IndexerCacheLayout::kPageBytes, o.dst_scattered, 4),
      mine_(rank_ == 0 ? src_ : dst_),
      imine_(rank_ == 0 ? isrc_ : idst_) {}

void Disagg::barrier() {
  float* x = device_alloc<float>(1, "barrier");
  check(ncclAllReduce(x, x, 1, ncclFloat, ncclSum, comm_, compute_), "ncclAllReduce (barrier)");
  check(cudaStreamSynchronize(compute_), "barrier sync");
  check(cudaFree(x), "barrier free");
}

// One big ncclSend rank 0 -> rank 1 (median of 10 after 3 warm-ups): the
// GPU-to-GPU ceiling the transfer is judged against, measured in this run.
double Disagg::measure_bandwidth(size_t bytes, int reps) {
  char* buf = device_alloc<char>(bytes, "cudaMalloc(bandwidth buffer)");
  check(cudaMemset(buf, 0x5a, bytes), "cudaMemset");
  std::vector<float> ms;
  for (int i = 0; i < reps + 3; ++i) {
    barrier();
    Event t0, t1;
    t0.record(xfer_);
    if (rank_ == 0)
      check(ncclSend(buf, bytes, ncclChar, peer_, comm_, xfer_), "ncclSend (bandwidth)");
    else
      check(ncclRecv(buf, bytes, ncclChar, peer_, comm_, xfer_), "ncclRecv (bandwidth)");
    t1.record(xfer_);
    check(cudaStreamSynchronize(xfer_), "sync");
    if (i >= 3) ms.push_back(t1.ms_since(t0));
  }
  check(cudaFree(buf), "cudaFree");
  std::sort(ms.begin(), ms.end());
  return double(bytes) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

TransferRequest Disagg::request(int64_t first, int64_t n) const {
  TransferRequest r;
  r.first_token = first;
  r.num_tokens = n;
  r.num_layers = o_.layers;
  r.src_format = r.dst_format = format_;
  r.src_latent = src_.side();
  r.dst_latent = dst_.side();
  r.with_indexer = o_.indexer;
  r.src_indexer = isrc_.side();
  r.dst_indexer = idst_.side();
  return r;
}

NcclTransferOptions Disagg::xfer_options(std::span<void* const> ready,
                                         std::span<void* const> done) {
  NcclTransferOptions x;
  x.comm = comm_;
  x.peer = peer_;
  x.stream = xfer_;
  x.staging = {staging_, size_t(staging_bytes_)};
  x.direct_min_bytes = o_.direct_min;
  x.pack_stream = o_.pack_stream ? pack_ : nullptr;
  x.layer_ready = ready;
  x.layer_done = done;
  return x;
}

constexpr int kHeads = 128;
constexpr float kPrefillScale = 0.1352f;  // 192^-0.5 * mscale^2 (docs/design.md section 1)

void Disagg::setup_prefill() {
  const int64_t T = o_.tokens, C = o_.chunk;
  std::vector<int64_t> slots(T), islots(T);
  for (int64_t t = 0; t < T; ++t) {
    slots[t] = int64_t(src_.pages[t / src_.page_size]) * src_.page_size + t % src_.page_size;
    islots[t] = int64_t(isrc_.pages[t / 64]) * 64 + t % 64;
  }
  slots_dev_ = device_alloc<int64_t>(T, "slots");
  islots_dev_ = device_alloc<int64_t>(T, "indexer slots");
  check(cudaMemcpy(slots_dev_, slots.data(), T * 8, cudaMemcpyHostToDevice), "upload slots");
  check(cudaMemcpy(islots_dev_, islots.data(), T * 8, cudaMemcpyHostToDevice), "upload slots");
  ckv_ = device_alloc<uint16_t>(C * 512, "c_kv");
  rope_ = device_alloc<uint16_t>(C * 64, "k_rope");
  ikeys_ = device_alloc<uint16_t>(C * 128, "indexer keys");
  pq_ = device_alloc<uint16_t>(C * kHeads * 192, "prefill q");
  pout_ = device_alloc<uint16_t>(C * kHeads * 128, "prefill out");
  w_uk_ = device_alloc<uint16_t>(kHeads * 128 * 512, "w_uk");
  w_uv_ = device_alloc<uint16_t>(kHeads * 128 * 512, "w_uv");
  // Made once, before any timing: straight from the host.
  check(examples::fill_uniform_bf16(pq_, C * kHeads * 192, -1.f, 1.f, 11), "fill q");
  check(examples::fill_uniform_bf16(w_uk_, kHeads * 128 * 512, -1.f, 1.f, 12), "fill w_uk");
  check(examples::fill_uniform_bf16(w_uv_, kHeads * 128 * 512, -1.f, 1.f, 13), "fill w_uv");
}

// Chunk c of layer l: its c_kv/k_rope (and indexer keys) are random with seed
// (l, c), written into the layer's cache, then the chunk's attention reads
// the whole cache so far. The q of the chunk's attention is random: the
// example checks the cache and decode, not prefill outputs.
void Disagg::prefill(bool send) {
  const int64_t T = o_.tokens, C = o_.chunk, chunks = (T + C - 1) / C;
  std::vector<Event> ready(size_t(chunks) * o_.layers);
  std::vector<void*> ready_h(ready.size());
  for (size_t i = 0; i < ready.size(); ++i) ready_h[i] = ready[i].e;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t c0 = c * C, n = std::min(C, T - c0);
    for (int l = 0; l < o_.layers; ++l) {
      const uint64_t seed = 1000003ull * l + c;
      random_.fill(ckv_, n * 512, 3 * seed, compute_);
      random_.fill(rope_, n * 64, 3 * seed + 1, compute_);
      KvCacheView cache;
      cache.format = format_;
      const int64_t ew = format_ == KvFormat::bf16 ? 576 : 656;
      cache.data =
          TensorView::make(src_.layer(l), format_ == KvFormat::bf16 ? DType::bf16 : DType::u8,
                           {src_.num_pages, src_.page_size, 1, ew}, dev_);
      AppendKvArgs a;
      a.c_kv = TensorView::make(ckv_, DType::bf16, {n, 512}, dev_);
      a.k_rope = TensorView::make(rope_, DType::bf16, {n, 64}, dev_);
      a.slots = TensorView::make(slots_dev_ + c0, DType::i64, {n}, dev_);
      a.cache = cache;
      check(append_kv(a, {compute_}), "append_kv");
      if (o_.indexer) {
        random_.fill(ikeys_, n * 128, 3 * seed + 2, compute_);
        AppendIndexerKeysArgs ia;
        ia.keys = TensorView::make(ikeys_, DType::bf16, {n, 128}, dev_);
        ia.slots = TensorView::make(islots_dev_ + c0, DType::i64, {n}, dev_);
        ia.cache.data = TensorView::make(isrc_.layer(l), DType::u8,
                                         {isrc_.num_pages, IndexerCacheLayout::kPageBytes}, dev_);
        check(append_indexer_keys(ia, {compute_}), "append_indexer_keys");
      }
      ChunkedPrefillArgs p;
      p.q = TensorView::make(pq_, DType::bf16, {n, kHeads, 192}, dev_);
      p.cache = cache;
      p.block_table =
          TensorView::make(src_.pages_dev, DType::i32, {int64_t(src_.pages.size())}, dev_);
      p.seqlen = c0 + n;
      p.w_uk = TensorView::make(w_uk_, DType::bf16, {kHeads, 128, 512}, dev_);
      p.w_uv = TensorView::make(w_uv_, DType::bf16, {kHeads, 128, 512}, dev_);
      p.softmax_scale = kPrefillScale;
      p.out = TensorView::make(pout_, DType::bf16, {n, kHeads, 128}, dev_);
      size_t need = 0;
      check(chunked_prefill_workspace_size(p, &need), "chunked_prefill_workspace_size");
      if (need > ws_bytes_) {
        check(cudaStreamSynchronize(compute_), "sync");
        if (ws_) check(cudaFree(ws_), "cudaFree");
        ws_ = device_alloc<char>(need, "prefill workspace");
        ws_bytes_ = need;
      }
      check(chunked_prefill(p, {ws_, ws_bytes_}, {compute_}), "chunked_prefill");
      ready[c * o_.layers + l].record(compute_);
    }
    if (send) {  // this chunk's tokens, layer by layer as each layer's event fires
      TransferPlan plan;
      check(plan_transfer(request(c0, n), &plan), "plan_transfer (chunk)");
      const auto bases = src_.bases(o_.layers), ibases = isrc_.bases(o_.layers);
      std::span<void* const> ev(ready_h.data() + c * o_.layers, o_.layers);
      check(nccl_transfer_send(plan, {bases, o_.indexer ? ibases : std::vector<void*>{}},
                               xfer_options(ev, {})),
            "nccl_transfer_send");
    }
  }
}

// The first decode token of every layer: q random with seed l, the same on both ranks.
void Disagg::decode(const Pool& p, void* out) {
  const int64_t T = o_.tokens, ew = format_ == KvFormat::bf16 ? 576 : 656;
  uint16_t* q = device_alloc<uint16_t>(kHeads * 576, "decode q");
  float* lse = device_alloc<float>(kHeads, "decode lse");
  int32_t* seqlen = device_alloc<int32_t>(1, "seqlen");
  const int32_t len = int32_t(T);
  check(cudaMemcpy(seqlen, &len, 4, cudaMemcpyHostToDevice), "seqlen");
  for (int l = 0; l < o_.layers; ++l) {
    random_.fill(q, kHeads * 576, 777 + l, compute_);
    DecodeArgs d;
    d.q = TensorView::make(q, DType::bf16, {1, 1, kHeads, 576}, dev_);
    d.kv.format = format_;
    d.kv.data = TensorView::make(p.layer(l), format_ == KvFormat::bf16 ? DType::bf16 : DType::u8,
                                 {p.num_pages, p.page_size, 1, ew}, dev_);
    d.block_table = TensorView::make(p.pages_dev, DType::i32, {1, int64_t(p.pages.size())}, dev_);
    d.cache_seqlens = TensorView::make(seqlen, DType::i32, {1}, dev_);
    d.softmax_scale = kPrefillScale;
    d.out = TensorView::make(static_cast<char*>(out) + size_t(l) * kHeads * 512 * 2, DType::bf16,
                             {1, 1, kHeads, 512}, dev_);
    d.lse = TensorView::make(lse, DType::f32, {1, kHeads, 1}, dev_);
    DecodeOptions opts;
    opts.batch_invariant = true;
    size_t need = 0;
    check(decode_workspace_size(d, opts, &need), "decode_workspace_size");
    if (need > ws_bytes_) {
      check(cudaStreamSynchronize(compute_), "sync");
      if (ws_) check(cudaFree(ws_), "cudaFree");
      ws_ = device_alloc<char>(need, "decode workspace");
      ws_bytes_ = need;
    }
    check(mla_decode(d, opts, {ws_, ws_bytes_}, {compute_}), "mla_decode");
  }
  check(cudaStreamSynchronize(compute_), "decode sync");
  cudaFree(q);
  cudaFree(lse);
  cudaFree(seqlen);
}

// Every byte of the request (all layers, latent then indexer) in token order,
// copied to the host through a plan to a dense layout: the same bytes on both
// ranks if and only if the transfer was exact.
std::vector<uint8_t> Disagg::gather(const Pool& lat, const Pool& idx) {
  const int64_t T = o_.tokens;
  Pool dense_l(lat.pages.size(), lat.page_size, lat.page_stride, false, 0);
  Pool dense_i(idx.pages.size(), 64, IndexerCacheLayout::kPageBytes, false, 0);
  dense_l.num_pages = lat.pages.size();
  dense_i.num_pages = idx.pages.size();
  TransferRequest r;
  r.num_tokens = T;
  r.num_layers = o_.layers;
  r.src_format = r.dst_format = format_;
  r.src_latent = lat.side();
  r.dst_latent = dense_l.side();
  r.dst_latent.layer_stride = 0;
  r.with_indexer = o_.indexer;
  r.src_indexer = idx.side();
  r.dst_indexer = dense_i.side();
  r.dst_indexer.layer_stride = 0;
  TransferPlan plan;
  check(plan_transfer(r, &plan), "plan_transfer (gather)");
  std::vector<uint8_t> host;
  const int64_t lat_bytes = int64_t(lat.pages.size()) * lat.page_stride;
  const int64_t idx_bytes = int64_t(idx.pages.size()) * IndexerCacheLayout::kPageBytes;
  std::vector<uint8_t> page_l(lat_bytes), page_i(idx_bytes);
  for (int l = 0; l < o_.layers; ++l) {
    std::fill(page_l.begin(), page_l.end(), 0);
    std::fill(page_i.begin(), page_i.end(), 0);
    for (size_t i = plan.layer_begin[l]; i < plan.layer_begin[l + 1]; ++i) {
      const CopyRun& run = plan.runs[i];
      const Pool& from = run.cache == TransferCache::latent ? lat : idx;
      uint8_t* to = (run.cache == TransferCache::latent ? page_l : page_i).data();
      check(cudaMemcpy(to + run.dst_offset, from.layer(l) + run.src_offset, run.bytes,
                       cudaMemcpyDeviceToHost),
            "gather copy");
    }
    host.insert(host.end(), page_l.begin(), page_l.end());
    if (o_.indexer) host.insert(host.end(), page_i.begin(), page_i.end());
  }
  return host;
}

int Disagg::run() {
  if (o_.who.world_size != 2)
    die(fmt::format("WORLD_SIZE = {}: this example runs on exactly 2 ranks", o_.who.world_size));
  void* comm = nullptr;
  check(nccl_comm_init(o_.who, o_.id_file, &comm), "nccl_comm_init");
  comm_ = static_cast<ncclComm_t>(comm);
  check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&xfer_, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&pack_, cudaStreamNonBlocking), "stream");
  mine_.allocate(o_.layers);
  if (o_.indexer) imine_.allocate(o_.layers);

  const double link_gbs = measure_bandwidth(size_t(o_.bw_mib) << 20, 10);
  // NCCL's rate against the message size: what a transfer's messages can reach.
  std::string by_size;
  for (int mib : {1, 4, 16, 64, 256})
    by_size += fmt::format("{}{} MiB {:.0f}", by_size.empty() ? "" : ", ", mib,
                           measure_bandwidth(size_t(mib) << 20, 10));

  // The whole-request plan: bytes, runs, staging.
  TransferPlan whole;
  check(plan_transfer(request(0, o_.tokens), &whole), "plan_transfer");
  staging_bytes_ = 0;
  for (int64_t c0 = 0; c0 < o_.tokens; c0 += o_.chunk) {
    TransferPlan p;
    check(plan_transfer(request(c0, std::min(o_.chunk, o_.tokens - c0)), &p), "plan_transfer");
    staging_bytes_ = std::max(staging_bytes_, nccl_transfer_staging_bytes(p, o_.direct_min));
  }
  staging_bytes_ = std::max(staging_bytes_, nccl_transfer_staging_bytes(whole, o_.direct_min));
  if (o_.span_layers) staging_bytes_ = std::max(staging_bytes_, o_.staging_mib << 20);
  if (staging_bytes_) staging_ = device_alloc<char>(staging_bytes_, "staging");
  // The largest input of the timed loops: a chunk's c_kv (or a decode q); twice that
  // leaves room for the offsets.
  random_.allocate(2 * std::max<int64_t>(o_.chunk * 512, kHeads * 576));
  if (rank_ == 0) setup_prefill();
  check(cudaDeviceSynchronize(), "setup");

  const auto dbases = dst_.bases(o_.layers), dibases = idst_.bases(o_.layers);
  const TransferBuffers dst_bufs{
      dbases, o_.indexer ? std::span<void* const>(dibases) : std::span<void* const>()};
  const auto sbases = src_.bases(o_.layers), sibases = isrc_.bases(o_.layers);
  const TransferBuffers src_bufs{
      sbases, o_.indexer ? std::span<void* const>(sibases) : std::span<void* const>()};
  const int64_t chunks = (o_.tokens + o_.chunk - 1) / o_.chunk;

  // (1) prefill alone, (2) transfer alone, (3) pipelined + decode; twice,
  // the second time measured (the first warms NCCL's connections and cuBLAS).
  double prefill_ms = 0, xfer_ms = 0, pipe_prefill_ms = 0, pipe_recv_ms = 0, ttft_ms = 0;
  std::vector<uint16_t> out_host(size_t(o_.layers) * kHeads * 512);
  uint16_t* out = device_alloc<uint16_t>(out_host.size(), "decode out");
  for (int rep = 0; rep < 2; ++rep) {
    barrier();
    if (rank_ == 0) {  // (1)
      Event t0, t1;
      t0.record(compute_);
      prefill(false);
      t1.record(compute_);
      check(cudaStreamSynchronize(compute_), "sync");
      prefill_ms = t1.ms_since(t0);
    }
    barrier();  // (2)
    {
      Event t0, t1;
      t0.record(xfer_);
      if (rank_ == 0)
        check(nccl_transfer_send(whole, src_bufs, whole_options()), "send");
      else
        check(nccl_transfer_recv(whole, dst_bufs, whole_options()), "recv");
      t1.record(xfer_);
      check(cudaStreamSynchronize(xfer_), "sync");
      xfer_ms = t1.ms_since(t0);
    }
    if (rank_ == 1) check(cudaMemset(dst_.base, 0xff, o_.layers * dst_.layer_stride), "re-poison");
    check(cudaDeviceSynchronize(), "sync");
    barrier();  // (3): both clocks start here
    Event t0, t_prefill, t_recv, t_decode;
    t0.record(compute_);
    check(cudaStreamWaitEvent(xfer_, t0.e), "wait");
    if (rank_ == 0) {
      prefill(true);
      t_prefill.record(compute_);
      check(cudaDeviceSynchronize(), "sync");
      pipe_prefill_ms = t_prefill.ms_since(t0);
    } else {
      std::vector<Event> done(size_t(chunks) * o_.layers);
      std::vector<void*> done_h(done.size());
      for (size_t i = 0; i < done.size(); ++i) done_h[i] = done[i].e;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t c0 = c * o_.chunk, n = std::min(o_.chunk, o_.tokens - c0);
        TransferPlan plan;
        check(plan_transfer(request(c0, n), &plan), "plan_transfer (chunk)");
        std::span<void* const> ev(done_h.data() + c * o_.layers, o_.layers);
        check(nccl_transfer_recv(plan, dst_bufs, xfer_options({}, ev)), "nccl_transfer_recv");
      }
      t_recv.record(xfer_);
      check(cudaStreamWaitEvent(compute_, t_recv.e), "wait");
      decode(dst_, out);
      t_decode.record(compute_);
      check(cudaDeviceSynchronize(), "sync");
      pipe_recv_ms = t_recv.ms_since(t0);
      ttft_ms = t_decode.ms_since(t0);
    }
  }
  // Rank 0: single-GPU decode over its own cache; its output and timings go to rank 1.
  double r0[2] = {prefill_ms, pipe_prefill_ms};
  double* r0_dev = device_alloc<double>(2, "timings");
  uint16_t* ref = device_alloc<uint16_t>(out_host.size(), "reference out");
  if (rank_ == 0) {
    decode(src_, ref);
    check(cudaMemcpy(r0_dev, r0, 16, cudaMemcpyHostToDevice), "timings");
  }
  check(ncclGroupStart(), "group");
  if (rank_ == 0) {
    check(ncclSend(ref, out_host.size() * 2, ncclChar, 1, comm_, compute_), "send reference");
    check(ncclSend(r0_dev, 16, ncclChar, 1, comm_, compute_), "send timings");
  } else {
    check(ncclRecv(ref, out_host.size() * 2, ncclChar, 0, comm_, compute_), "recv reference");
    check(ncclRecv(r0_dev, 16, ncclChar, 0, comm_, compute_), "recv timings");
  }
  check(ncclGroupEnd(), "group");
  check(cudaStreamSynchronize(compute_), "sync");
  // The cache, byte for byte: rank 0 sends its gathered bytes to rank 1.
  const std::vector<uint8_t> mine = gather(mine_, imine_);
  uint8_t* other = device_alloc<uint8_t>(mine.size(), "gathered cache");
  if (rank_ == 0) check(cudaMemcpy(other, mine.data(), mine.size(), cudaMemcpyHostToDevice), "up");
  if (rank_ == 0)
    check(ncclSend(other, mine.size(), ncclChar, 1, comm_, compute_), "send gathered cache");
  else
    check(ncclRecv(other, mine.size(), ncclChar, 0, comm_, compute_), "recv gathered cache");
  check(cudaStreamSynchronize(compute_), "sync");
  if (rank_ == 0) return 0;

  std::vector<uint16_t> ref_host(out_host.size());
  std::vector<uint8_t> other_host(mine.size());
  check(cudaMemcpy(out_host.data(), out, out_host.size() * 2, cudaMemcpyDeviceToHost), "down");
  check(cudaMemcpy(ref_host.data(), ref, ref_host.size() * 2, cudaMemcpyDeviceToHost), "down");
  check(cudaMemcpy(other_host.data(), other, mine.size(), cudaMemcpyDeviceToHost), "down");
  check(cudaMemcpy(r0, r0_dev, 16, cudaMemcpyDeviceToHost), "down");
  size_t out_diff = 0, cache_diff = 0;
  for (size_t i = 0; i < out_host.size(); ++i) out_diff += out_host[i] != ref_host[i];
  for (size_t i = 0; i < mine.size(); ++i) cache_diff += mine[i] != other_host[i];
  prefill_ms = r0[0];
  pipe_prefill_ms = r0[1];

  const double gb = whole.total_bytes / 1e9;
  const double xfer_gbs = gb / (xfer_ms * 1e-3);
  // Exposed: how long the last byte landed after prefill finished (both clocks
  // start at the same barrier); hidden: the rest of the stand-alone transfer time.
  const double exposed_ms = std::max(0.0, pipe_recv_ms - pipe_prefill_ms);
  const double hidden = xfer_ms > 0 ? std::clamp(1.0 - exposed_ms / xfer_ms, 0.0, 1.0) : 1.0;
  fmt::print(
      "mla_disagg: {} tokens x {} layers, {} cache{}, pages {} -> {} ({} -> {}), chunk {}, "
      "staging {}{}, {} MiB\n"
      "  request bytes           {:.3f} GB in {} runs (largest {:.2f} MB)\n"
      "  GPU->GPU ncclSend       {:.1f} GB/s ({} MiB message, median of 10); GB/s by size: {}\n"
      "  transfer alone          {:.3f} ms = {:.1f} GB/s = {:.0f}% of the link\n"
      "  prefill alone           {:.3f} ms;  pipelined prefill {:.3f} ms\n"
      "  last byte after prefill {:.3f} ms exposed -> {:.0f}% of the transfer hidden\n"
      "  TTFT (prefill + transfer + first decode, 2 GPUs) {:.3f} ms\n"
      "  decode outputs vs single-GPU decode: {} of {} bf16 values differ\n"
      "  cache bytes vs source: {} of {} differ\n",
      o_.tokens, o_.layers, kv_format_name(format_), o_.indexer ? " + indexer" : "", o_.src_page,
      o_.dst_page, o_.src_scattered ? "scattered" : "contiguous",
      o_.dst_scattered ? "scattered" : "contiguous", o_.chunk,
      o_.pack_stream ? "pipelined (pack stream)" : "serial",
      o_.span_layers ? ", messages span layers" : "", staging_bytes_ >> 20, gb, whole.runs.size(),
      whole.largest_run / 1e6, link_gbs, o_.bw_mib, by_size, xfer_ms, xfer_gbs,
      100 * xfer_gbs / link_gbs, prefill_ms, pipe_prefill_ms, exposed_ms, 100 * hidden, ttft_ms,
      out_diff, out_host.size(), cache_diff, mine.size());
  if (!o_.json.empty()) {
    std::ofstream(o_.json) << fmt::format(
        "{{\"tokens\": {}, \"layers\": {}, \"format\": \"{}\", \"indexer\": {}, "
        "\"src_page\": {}, \"dst_page\": {}, \"chunk\": {}, \"pack_stream\": {}, "
        "\"direct_min_bytes\": {}, \"span_layers\": {}, \"staging_bytes\": {}, "
        "\"link_by_size\": \"{}\", \"request_bytes\": {}, \"runs\": {}, "
        "\"link_gbs\": {:.2f}, \"transfer_ms\": {:.4f}, \"transfer_gbs\": {:.2f}, "
        "\"prefill_ms\": {:.4f}, \"pipelined_prefill_ms\": {:.4f}, \"exposed_ms\": {:.4f}, "
        "\"hidden_fraction\": {:.4f}, \"ttft_ms\": {:.4f}, \"decode_values_differing\": {}, "
        "\"cache_bytes_differing\": {}}}\n",
        o_.tokens, o_.layers, kv_format_name(format_), o_.indexer, o_.src_page, o_.dst_page,
        o_.chunk, o_.pack_stream, o_.direct_min, o_.span_layers, staging_bytes_, by_size,
        whole.total_bytes, whole.runs.size(), link_gbs, xfer_ms, xfer_gbs, prefill_ms,
        pipe_prefill_ms, exposed_ms, hidden, ttft_ms, out_diff, cache_diff);
  }
  check(nccl_comm_destroy(comm_), "nccl_comm_destroy");
  return out_diff == 0 && cache_diff == 0 ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"MLA prefill/decode disaggregation over NCCL (2 GPUs, one process each)"};
  app.add_option("--tokens", o.tokens, "prompt length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--layers", o.layers, "layers (DeepSeek-V3: 61)")->check(CLI::Range(1, 256));
  app.add_option("--chunk", o.chunk, "prefill chunk (tokens)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--format", o.format, "cache format")->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--src-page", o.src_page, "prefill page size")->check(CLI::Range(1, 1024));
  app.add_option("--dst-page", o.dst_page, "decode page size")->check(CLI::Range(1, 1024));
  app.add_flag("--src-scattered,!--src-contiguous", o.src_scattered, "prefill page ids shuffled");
  app.add_flag("--dst-scattered,!--dst-contiguous", o.dst_scattered, "decode page ids shuffled");
  app.add_flag("--indexer", o.indexer, "also move the indexer key cache (DSA)");
  app.add_option("--direct-min-bytes", o.direct_min, "runs at least this big go without staging");
  app.add_flag("--pack-stream,!--serial-staging", o.pack_stream,
               "pack/unpack on a second stream under the wire (default) or in series");
  app.add_flag("--span-layers,!--per-layer-messages", o.span_layers,
               "whole-request transfer: small runs of several layers per message (default)");
  app.add_option("--staging-mib", o.staging_mib,
                 "staging buffer at least this big with --span-layers")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  app.add_option("--bw-mib", o.bw_mib, "message size of the bandwidth measurement");
  app.add_option("--id-file", o.id_file, "exchange NCCL's id through this file instead of TCP");
  app.add_option("--json", o.json, "write the results here (rank 1)");
  examples::LaunchFlags launch;
  examples::add_launch_flags(app, launch);
  CLI11_PARSE(app, argc, argv);
  check(examples::resolve_launch(launch, 29511, &o.who), "launch flags / environment");
  Disagg d(o);
  return d.run();
}
