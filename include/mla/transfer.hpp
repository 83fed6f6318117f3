// Moving a request's paged caches between two pools (prefill/decode
// disaggregation, docs/multi-gpu.md): the latent cache (bf16 or fp8_ds_mla)
// and the indexer key cache, from the pages the source gave the request to the
// pages the destination gave it (other page ids, possibly another page size,
// padded page strides, one pool per layer or all layers in one allocation).
//
// Two layers:
//   plan_transfer      pure host code: the request's token range becomes a list
//                      of byte copies (CopyRun) with adjacent pages coalesced;
//   execute_copy_plan  a memcpy executor over host buffers (tests, CPU pools);
//   nccl_transfer_*    grouped ncclSend/ncclRecv of a plan between two ranks
//                      (libmla_transfer_nccl, built when CUDA and NCCL are found).
// Both ends of a transfer build the same plan from the same description (the
// decode side tells the prefill side its page ids), so the byte streams match
// without any metadata on the wire.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

enum class TransferCache : int32_t {
  latent = 0,   // [c_kv ; k_rope] entries, token-major inside a page
  indexer = 1,  // 64-token pages: 64x128 e4m3 codes, then 64 fp32 scales
};
const char* transfer_cache_name(TransferCache c) noexcept;

// One side (source or destination) of one cache kind.
//   pages        the request's block_table row: page ids in token order
//                (token t lives in pages[t / page_size]); only the pages the
//                token range touches are read and checked.
//   num_pages    pages in the pool (of one layer).
//   page_size    tokens per page; the indexer cache has 64 (its fixed layout).
//   page_stride  bytes from one page to the next; 0 = dense (page_size * entry
//                bytes, or 8448 for the indexer). Engines pad pages; a larger
//                stride is honoured.
//   layer_stride bytes from layer l's pool to layer l+1's when all layers live
//                in one allocation (layer-major [L, pages, ...]: num_pages *
//                page_stride; page-major [pages, L, ...]: page_size * entry with
//                page_stride = L * page_size * entry). 0 = each layer its own
//                allocation: runs then never span two layers.
struct TransferSide {
  std::span<const int32_t> pages;
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t page_stride = 0;
  int64_t layer_stride = 0;
};

enum class TransferOrder : int32_t {
  // Runs grouped by layer (layer 0 first, latent then indexer inside a layer),
  // never spanning two layers: the sender can start a layer as soon as prefill
  // has written it (TransferPlan::layer_begin marks the groups).
  by_layer = 0,
  // All runs of a cache kind sorted by source address and coalesced across
  // layers where both sides are contiguous (page-major pools): fewest runs,
  // for a cache that is complete before sending starts.
  whole = 1,
};

// The request: tokens [first_token, first_token + num_tokens) of every layer.
// A chunked prefill sends each chunk's range as soon as it is written.
// The plan holds runs per layer before any is copied: a layer count past any
// model's (DeepSeek-V3: 61) is a caller's mistake, rejected before it sizes
// billions of runs.
inline constexpr int32_t kMaxTransferLayers = 1024;

struct TransferRequest {
  int64_t first_token = 0;
  int64_t num_tokens = 0;
  int32_t num_layers = 1;                // 1 to kMaxTransferLayers
  KvFormat src_format = KvFormat::bf16;  // must equal dst_format: the transfer
  KvFormat dst_format = KvFormat::bf16;  // moves bytes, it does not convert
  TransferSide src_latent;
  TransferSide dst_latent;
  bool with_indexer = false;  // DSA models: move the indexer key cache too
  TransferSide src_indexer;
  TransferSide dst_indexer;
  TransferOrder order = TransferOrder::by_layer;
};

// One contiguous copy. Offsets are bytes from the base of `layer`'s pool of
// `cache` on each side (with a layer_stride, a run coalesced across layers
// starts in `layer` and runs on into the next ones).
struct CopyRun {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t bytes = 0;
  int32_t layer = 0;
  TransferCache cache = TransferCache::latent;
  friend bool operator==(const CopyRun&, const CopyRun&) = default;
};

struct TransferPlan {
  std::vector<CopyRun> runs;
  // by_layer: the runs of layer l are [layer_begin[l], layer_begin[l + 1]);
  // num_layers + 1 entries. whole: {0, runs.size()} (one group).
  std::vector<size_t> layer_begin;
  int64_t total_bytes = 0;
  int64_t largest_run = 0;
  TransferOrder order = TransferOrder::by_layer;
};

// Builds the plan. Errors name the argument and the value, e.g.
//   "src_latent.pages[3] = 912 is past num_pages = 900",
//   "first_token + num_tokens = 5000 is past the capacity of dst_latent: 4 pages * 1024 = 4096".
Status plan_transfer(const TransferRequest& req, TransferPlan* plan);

// Base addresses of every layer's pool of each cache kind on one side
// (latent.size() == num_layers; indexer empty unless with_indexer).
struct TransferBuffers {
  std::span<void* const> latent;
  std::span<void* const> indexer;
};
// Per-layer bases of pools that share one allocation: base + l * layer_stride.
std::vector<void*> layer_bases(void* base, int64_t layer_stride, int32_t num_layers);

// Copies every run with memcpy (host memory). The reference executor: the NCCL
// executor must move exactly these bytes.
Status execute_copy_plan(const TransferPlan& plan, const TransferBuffers& src,
                         const TransferBuffers& dst);

// --- Launch conventions ---------------------------------------------------------
// torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT) or explicit values. Errors name the variable and its value.
struct LaunchInfo {
  int rank = -1;
  int world_size = 0;
  int local_rank = -1;  // the GPU this process uses; RANK when LOCAL_RANK is unset
  std::string master_addr;
  int master_port = 0;
};
// lookup is injectable for tests; nullptr reads the process environment.
Status launch_info_from_env(LaunchInfo* out,
                            const std::function<const char*(const char*)>& lookup = nullptr);

// Bootstrap: rank 0 serves `bytes` (NCCL's unique id) over TCP at
// master_addr:master_port to the other world_size - 1 ranks, which receive
// them (retrying the connection for up to timeout_ms while rank 0 starts).
Status exchange_bytes_tcp(const LaunchInfo& who, void* bytes, size_t size, int timeout_ms = 60000);
// The same through a file (a shared filesystem, or one host): rank 0 writes it
// atomically (write + rename), the others wait for it.
Status exchange_bytes_file(const LaunchInfo& who, const std::string& path, void* bytes, size_t size,
                           int timeout_ms = 60000);

// --- NCCL executor (libmla_transfer_nccl) ---------------------------------------
// Handles are passed as void* so this header needs neither nccl.h nor the CUDA
// runtime: comm is an ncclComm_t, stream a cudaStream_t, events cudaEvent_t.
struct NcclTransferOptions {
  void* comm = nullptr;
  int peer = -1;           // the rank on the other end
  void* stream = nullptr;  // the transfer's own stream (overlaps with compute)
  // Device scratch for packing small runs into one message; at least
  // nccl_transfer_staging_bytes(). Empty: every run is sent on its own.
  Workspace staging{};
  // Runs of at least this many bytes are sent directly from (received directly
  // into) the cache; smaller ones are packed into the staging buffer by one
  // kernel and sent as one message.
  int64_t direct_min_bytes = int64_t{1} << 20;
  // A second stream (a cudaStream_t) for the pack/unpack kernel. When set, the
  // staging buffer is used as two halves: the pack of round k+1 (sender) and
  // the unpack of round k-1 (receiver) run on it while round k is on the wire,
  // instead of in series with it on `stream`. Null: one buffer, in series.
  // Everything still ends on `stream` (it waits for pack_stream at the end).
  void* pack_stream = nullptr;
  // Pack small runs of several layers into one message until the staging
  // buffer (slot) is full: few large messages, for a whole-request transfer
  // (NCCL's rate grows with the message size). Not with layer_ready/layer_done:
  // a message would then wait for, or signal, several layers at once.
  bool messages_span_layers = false;
  // by_layer plans: the sender waits for layer_ready[l] (recorded by prefill
  // on its compute stream after writing layer l) before sending layer l; the
  // receiver records layer_done[l] once layer l has landed. Either may be
  // empty; otherwise it has one event per layer.
  std::span<void* const> layer_ready;
  std::span<void* const> layer_done;
};
// Staging bytes the executor can use well for this plan (the small runs of the
// largest layer group, 16-byte aligned each); 0 when every run is direct.
int64_t nccl_transfer_staging_bytes(const TransferPlan& plan, int64_t direct_min_bytes);

// Enqueue the sends (recvs) of every run on options.stream; returns at once.
// Both ends must call with the same plan, direct_min_bytes, staging.bytes,
// messages_span_layers and pack_stream set or not: those fix how runs are
// grouped into messages.
Status nccl_transfer_send(const TransferPlan& plan, const TransferBuffers& src,
                          const NcclTransferOptions& options);
Status nccl_transfer_recv(const TransferPlan& plan, const TransferBuffers& dst,
                          const NcclTransferOptions& options);

// Creates this rank's NCCL communicator (comm: an ncclComm_t): selects GPU
// who.local_rank, rank 0 makes the unique id, which reaches the others over
// TCP at master_addr:master_port, or through id_file when it is not empty.
// NCCL's own environment (NCCL_NVLS_ENABLE and the other multicast switches)
// is left exactly as the machine sets it.
Status nccl_comm_init(const LaunchInfo& who, const std::string& id_file, void** comm);
Status nccl_comm_destroy(void* comm);

}  // namespace mla
