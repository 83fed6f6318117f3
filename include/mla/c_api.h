/* The stable C ABI of mla: what the Python package (ctypes) and any other
 * language binds to. Pure C (C99), no C++ types cross it, no exception escapes it.
 *
 * Conventions
 *  - Every operation returns an int32_t status: MLA_OK (0) or one of the
 *    MLA_ERR_* codes, which mirror mla::Errc value for value. On failure,
 *    mla_last_error_message() returns the C++ message for the calling thread
 *    (it names the argument and the bad value); it stays valid until the next
 *    mla_* call on the same thread.
 *  - Tensors are described by mla_tensor, a POD mirror of mla::TensorView
 *    (DLPack-like: data pointer, dtype code, device, shape, strides counted in
 *    elements). A NULL mla_tensor pointer means "argument not given" (optional
 *    arguments only).
 *  - Nothing here allocates device memory or synchronises: scratch memory comes
 *    from the caller (the *_workspace_size functions say how much), and CUDA
 *    work is queued on the stream passed as `stream` (a cudaStream_t; NULL is
 *    the legacy default stream). CPU tensors run the exact CPU reference.
 *  - The ABI is versioned: MLA_C_ABI_VERSION changes whenever a signature or a
 *    struct layout changes; bindings check mla_abi_version() at load time. */
#ifndef MLA_C_API_H_
#define MLA_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MLA_C_EXPORT __declspec(dllexport)
#else
#define MLA_C_EXPORT __attribute__((visibility("default")))
#endif

#define MLA_C_ABI_VERSION 3

/* ---- status codes (values of mla::Errc, plus MLA_ERR_INTERNAL) ------------ */
enum {
  MLA_OK = 0,
  MLA_ERR_INVALID_SHAPE = 1,
  MLA_ERR_INVALID_DTYPE = 2,
  MLA_ERR_INVALID_STRIDE = 3,
  MLA_ERR_INVALID_DEVICE = 4,
  MLA_ERR_OUT_OF_RANGE = 5,
  MLA_ERR_MISALIGNED = 6,
  MLA_ERR_INVALID_VALUE = 7,
  MLA_ERR_UNSUPPORTED = 8,
  MLA_ERR_INSUFFICIENT_WORKSPACE = 9,
  MLA_ERR_CUDA = 10,
  /* Not an Errc: a C++ exception (e.g. std::bad_alloc) was caught at the ABI
   * boundary. The message says which. */
  MLA_ERR_INTERNAL = 100
};

/* ---- element types (values of mla::DType) --------------------------------- */
enum {
  MLA_DTYPE_F32 = 0,
  MLA_DTYPE_F64 = 1,
  MLA_DTYPE_BF16 = 2,
  MLA_DTYPE_F16 = 3,
  MLA_DTYPE_E4M3 = 4, /* float8_e4m3fn */
  MLA_DTYPE_U8 = 5,
  MLA_DTYPE_I32 = 6,
  MLA_DTYPE_I64 = 7
};

/* ---- devices (DLPack's device type codes, as mla::DeviceType) ------------- */
enum { MLA_DEVICE_CPU = 1, MLA_DEVICE_CUDA = 2 };

/* ---- paged latent cache formats (values of mla::KvFormat) ----------------- */
/* MLA_KV_FP8_E4M3: vLLM's dense fp8 layout (576 e4m3 per token, one per-tensor
 * scale, mla/kv_cache.hpp); its scale is given by mla_set_kv_scale. */
enum { MLA_KV_BF16 = 0, MLA_KV_FP8_DS_MLA = 1, MLA_KV_FP8_E4M3 = 2 };

#define MLA_MAX_DIMS 6

/* A non-owning view of a strided array (mirror of mla::TensorView). The rules
 * of mla/tensor.hpp hold for every view: its element count, offsets and byte
 * extent must fit 64-bit arithmetic (else MLA_ERR_INVALID_SHAPE naming it);
 * empty views (a dim of 0) may have any strides and a NULL data pointer, and
 * an op whose outputs are empty does nothing; an output may not overlap an
 * input or another output; an input is only read (read-only memory is fine),
 * even though `data` is not const. */
typedef struct mla_tensor {
  void* data;
  int32_t dtype;       /* MLA_DTYPE_* */
  int32_t device_type; /* MLA_DEVICE_* */
  int32_t device_id;
  int32_t ndim; /* 0..MLA_MAX_DIMS */
  int64_t shape[MLA_MAX_DIMS];
  int64_t strides[MLA_MAX_DIMS]; /* in elements, not bytes */
} mla_tensor;

/* ---- library ---------------------------------------------------------------- */
MLA_C_EXPORT int32_t mla_abi_version(void);
MLA_C_EXPORT const char* mla_version(void);
/* 1 when the library was built with the CUDA kernels. */
MLA_C_EXPORT int32_t mla_built_with_cuda(void);
/* Checked mode for this thread (mla::ExecContext::check_device_values): when on,
 * calls on CUDA tensors copy the small index tensors they read (block tables,
 * lengths, slots, index lists) to the host, synchronise the stream and check
 * their values as the CPU path does, so a bad page id or length is an error
 * (MLA_ERR_OUT_OF_RANGE naming it) instead of a guarded kernel's NaN rows or
 * skipped tokens. Off by default: it costs a copy and a sync per call. */
MLA_C_EXPORT void mla_set_check_device_values(int32_t on);
MLA_C_EXPORT int32_t mla_check_device_values(void);
/* The message of the last failed call on this thread ("" if none). */
MLA_C_EXPORT const char* mla_last_error_message(void);
/* "invalid_shape", ...: the name of a status code. */
MLA_C_EXPORT const char* mla_status_name(int32_t status);
/* Bytes of one cache entry for a MLA_KV_* format (1152, 656, 576), -1 if unknown. */
MLA_C_EXPORT int32_t mla_kv_entry_bytes(int32_t kv_format);
/* The per-tensor scale of MLA_KV_FP8_E4M3 caches (mla::KvCacheView::scale: one
 * f32 on the cache's device, value = code * scale) for every later call on this
 * thread that takes such a cache; NULL clears it. The view is copied, not the
 * value: the memory must hold the scale while those calls run (a CUDA graph
 * captured meanwhile reads it at replay). A call on an MLA_KV_FP8_E4M3 cache
 * with no scale set fails with MLA_ERR_INVALID_VALUE naming it; the other
 * formats ignore it. Per thread, as mla_set_check_device_values: the cache
 * arguments of the C functions stay (tensor, format) for every format. */
MLA_C_EXPORT int32_t mla_set_kv_scale(const mla_tensor* scale);

/* ---- capability probe (mla/support.hpp) ------------------------------------ */
/* Operation families (values of mla::OpFamily). */
enum {
  MLA_FAMILY_DECODE = 0,
  MLA_FAMILY_SPARSE_DECODE = 1,
  MLA_FAMILY_SPARSE_PREFILL = 2,
  MLA_FAMILY_INDEXER = 3,
  MLA_FAMILY_TOPK = 4,
  MLA_FAMILY_PREFILL = 5,
  MLA_FAMILY_KV_CACHE = 6,
  MLA_NUM_FAMILIES = 7
};
/* *supported = 1 when `family` can run on cuda:device_id (device_id >= 0) with this
 * build and this machine, or on the CPU reference (device_id < 0: always 1); else 0,
 * with the reason written snprintf-style into (reason, reason_size), its full length
 * in *reason_length ("" when supported; reason may be NULL when reason_size is 0). */
MLA_C_EXPORT int32_t mla_is_supported(int32_t family, int32_t device_id, int32_t* supported,
                                      char* reason, size_t reason_size, size_t* reason_length);
/* "decode", "sparse_decode", ...; NULL for an unknown family. */
MLA_C_EXPORT const char* mla_family_name(int32_t family);

/* ---- self check (mla/self_check.hpp; `mla check`) ----------------------------- */
/* Runs each kernel family on GPU 0 against the CPU reference on small random inputs drawn
 * from `seed` and stores the verdict in *result: 0 every check passed, 1 a check failed (or
 * the GPU cannot run the kernels), 77 nothing to check (no CUDA GPU, or a build without
 * CUDA kernels); the exit codes of `mla check`. The report is written snprintf-style into
 * (buf, buf_size), its full length in *length (buf may be NULL when buf_size is 0; a retry
 * with a larger buffer runs the checks again): JSON {"status", "header", "checks": [{"name",
 * "shape", "ok", "detail", "line"}], "summary", "text"}, where "text" is what `mla check`
 * prints. Returns MLA_OK whatever the verdict (a failed check is *result 1, not an error);
 * an error status only for a bad argument or an internal error. Unlike the operations,
 * it allocates device memory and synchronises the device. */
MLA_C_EXPORT int32_t mla_self_check(uint64_t seed, int32_t* result, char* buf, size_t buf_size,
                                    size_t* length);

/* ---- paged latent cache (mla/kv_cache.hpp) ---------------------------------- */
/* cache: [num_pages, page_size, 1, 576] bf16 or [num_pages, page_size, 1, 656] u8. */
MLA_C_EXPORT int32_t mla_validate_kv_cache(const mla_tensor* cache, int32_t kv_format);

/* c_kv [T, 512], k_rope [T, 64] (f32 or bf16), slots [T] i64 (-1 skips a token). */
MLA_C_EXPORT int32_t mla_append_kv(const mla_tensor* c_kv, const mla_tensor* k_rope,
                                   const mla_tensor* slots, const mla_tensor* cache,
                                   int32_t kv_format, void* stream);

/* slots [T] i64 -> c_kv [T, 512] f32, k_rope [T, 64] f32 (dequantised). */
MLA_C_EXPORT int32_t mla_read_kv(const mla_tensor* cache, int32_t kv_format,
                                 const mla_tensor* slots, const mla_tensor* c_kv,
                                 const mla_tensor* k_rope, void* stream);

/* ---- absorbed decode (mla/decode.hpp) --------------------------------------- */
/* q [B, s_q, h_q, 576], block_table [B, max_pages] i32, cache_seqlens [B] i32,
 * out [B, s_q, h_q, 512] (bf16/f32), lse [B, h_q, s_q] f32. */
MLA_C_EXPORT int32_t mla_decode_workspace_size(const mla_tensor* q, const mla_tensor* kv,
                                               int32_t kv_format, const mla_tensor* block_table,
                                               const mla_tensor* cache_seqlens, float softmax_scale,
                                               int32_t causal, const mla_tensor* out,
                                               const mla_tensor* lse, int32_t batch_invariant,
                                               size_t* bytes);

MLA_C_EXPORT int32_t mla_decode(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                                const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                                float softmax_scale, int32_t causal, const mla_tensor* out,
                                const mla_tensor* lse, int32_t batch_invariant, void* workspace,
                                size_t workspace_bytes, void* stream);

/* Plan reuse (mla::DecodePlan, mla/decode.hpp): mla_decode_plan runs the split
 * schedule of these lengths into the start of `workspace` (the same size as
 * mla_decode's) and fills *plan; every later mla_decode_planned with the same
 * shapes, batch_invariant and cache_seqlens values skips the schedule. A plan
 * made for other shapes gives MLA_ERR_INVALID_VALUE naming both. */
typedef struct mla_decode_plan_info {
  const void* data; /* device: the schedule (may be re-pointed at a copy of its bytes) */
  size_t bytes;
  int32_t device; /* -1: CPU */
  int32_t num_workers;
  int64_t batch, s_q, h_q;
  int32_t batch_invariant;
  int32_t sparse; /* made by mla_sparse_decode_plan */
  int64_t topk;
  int64_t capacity; /* dense: max_pages * page_size of the plan's block table */
} mla_decode_plan_info;

MLA_C_EXPORT int32_t mla_decode_plan(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                                     const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                                     float softmax_scale, int32_t causal, const mla_tensor* out,
                                     const mla_tensor* lse, int32_t batch_invariant,
                                     void* workspace, size_t workspace_bytes, void* stream,
                                     mla_decode_plan_info* plan);
MLA_C_EXPORT int32_t mla_decode_planned(const mla_tensor* q, const mla_tensor* kv,
                                        int32_t kv_format, const mla_tensor* block_table,
                                        const mla_tensor* cache_seqlens, float softmax_scale,
                                        int32_t causal, const mla_tensor* out,
                                        const mla_tensor* lse, int32_t batch_invariant,
                                        const mla_decode_plan_info* plan, void* workspace,
                                        size_t workspace_bytes, void* stream);

/* Attention over keys [kv_begin[b], kv_end[b]) only; out f32. */
MLA_C_EXPORT int32_t mla_decode_partial(const mla_tensor* q, const mla_tensor* kv,
                                        int32_t kv_format, const mla_tensor* block_table,
                                        const mla_tensor* cache_seqlens, float softmax_scale,
                                        int32_t causal, const mla_tensor* kv_begin,
                                        const mla_tensor* kv_end, const mla_tensor* out,
                                        const mla_tensor* lse, void* stream);

/* partial_out [S, R, D] f32, partial_lse [S, R] f32 -> out [R, D], lse [R]. */
MLA_C_EXPORT int32_t mla_merge_attn_partials(const mla_tensor* partial_out,
                                             const mla_tensor* partial_lse, const mla_tensor* out,
                                             const mla_tensor* lse, void* stream);

/* ---- lightning indexer (mla/indexer.hpp) ------------------------------------ */
/* cache: [num_pages, 8448] u8 (64 tokens a page: 64x128 e4m3, then 64 fp32 scales). */
MLA_C_EXPORT int32_t mla_validate_indexer_cache(const mla_tensor* cache);

/* keys [T, 128] f32/bf16, slots [T] i64 (-1 skips). */
MLA_C_EXPORT int32_t mla_append_indexer_keys(const mla_tensor* keys, const mla_tensor* slots,
                                             const mla_tensor* cache, void* stream);

/* q [.., 64, 128] f32/bf16, weights [.., 64] f32 -> q8 [.., 64, 128] e4m3, w_folded [.., 64]. */
MLA_C_EXPORT int32_t mla_quantize_indexer_query(const mla_tensor* q, const mla_tensor* weights,
                                                const mla_tensor* q8, const mla_tensor* w_folded,
                                                void* stream);

/* q8 [B, s_q, 64, 128] e4m3, w_folded [B, s_q, 64] f32, block_table [B, max_pages] i32,
 * cache_seqlens [B] i32 -> logits [B, s_q, max_len] f32. */
MLA_C_EXPORT int32_t mla_indexer_logits_decode(const mla_tensor* q8, const mla_tensor* w_folded,
                                               const mla_tensor* cache,
                                               const mla_tensor* block_table,
                                               const mla_tensor* cache_seqlens,
                                               const mla_tensor* logits, void* stream);

/* q8 [T, 64, 128], w_folded [T, 64], k8 [N, 128] e4m3, k_scale [N] f32,
 * k_start/k_end [T] i32 -> logits [T, N] f32. */
MLA_C_EXPORT int32_t mla_indexer_logits_prefill(const mla_tensor* q8, const mla_tensor* w_folded,
                                                const mla_tensor* k8, const mla_tensor* k_scale,
                                                const mla_tensor* k_start, const mla_tensor* k_end,
                                                const mla_tensor* logits, void* stream);

/* The prefill select (mla::indexer_select_prefill): the logits of
 * mla_indexer_logits_prefill and the top-k of each row in one call, inputs as
 * there -> indices [T, k] i32 positions (-1 padded). order: MLA_TOPK_* (values of
 * mla::TopkOrder); path: MLA_INDEXER_SELECT_* (values of mla::IndexerSelectPath;
 * AUTOMATIC runs UNFUSED, the faster; FUSED never holds the [T, N] logits, and
 * synchronises `stream` once); capacity: FUSED's candidate entries per row (0:
 * 8 k). CUDA needs `workspace` of mla_indexer_select_prefill_workspace_size
 * bytes (0 on CPU). */
enum { MLA_TOPK_BEST_FIRST = 0, MLA_TOPK_BY_POSITION = 1 };
enum {
  MLA_INDEXER_SELECT_AUTOMATIC = 0,
  MLA_INDEXER_SELECT_UNFUSED = 1,
  MLA_INDEXER_SELECT_FUSED = 2
};
MLA_C_EXPORT int32_t mla_indexer_select_prefill_workspace_size(
    const mla_tensor* q8, const mla_tensor* w_folded, const mla_tensor* k8,
    const mla_tensor* k_scale, const mla_tensor* k_start, const mla_tensor* k_end, int32_t k,
    int32_t order, int32_t path, int64_t capacity, const mla_tensor* indices, size_t* bytes);
MLA_C_EXPORT int32_t mla_indexer_select_prefill(const mla_tensor* q8, const mla_tensor* w_folded,
                                                const mla_tensor* k8, const mla_tensor* k_scale,
                                                const mla_tensor* k_start, const mla_tensor* k_end,
                                                int32_t k, int32_t order, int32_t path,
                                                int64_t capacity, const mla_tensor* indices,
                                                void* workspace, size_t workspace_bytes,
                                                void* stream);

/* ---- rotary position embedding (mla/rope.hpp) ------------------------------- */
enum { MLA_ROPE_INTERLEAVED = 0, MLA_ROPE_HALF_SPLIT = 1 };

/* Mirror of mla::RopeConfig (YaRN parameters, named as in the model configs). */
typedef struct mla_rope_config {
  int32_t dim;
  int32_t reserved; /* 0 */
  double theta;
  double factor;
  int64_t original_max_position;
  double beta_fast;
  double beta_slow;
  double mscale;
  double mscale_all_dim;
} mla_rope_config;

/* DeepSeek-V3/V3.2's configuration. */
MLA_C_EXPORT void mla_rope_default_config(mla_rope_config* config);
/* inv_freq [dim/2] f32/f64, CPU. */
MLA_C_EXPORT int32_t mla_rope_inv_freq(const mla_rope_config* config, const mla_tensor* inv_freq);
MLA_C_EXPORT int32_t mla_rope_attention_factor(const mla_rope_config* config, double* factor);
/* x, out [T, heads, dim] (out may alias x), positions [T] i32/i64. */
MLA_C_EXPORT int32_t mla_apply_rope(const mla_tensor* x, const mla_tensor* positions,
                                    const mla_tensor* out, const mla_rope_config* config,
                                    int32_t layout, void* stream);

/* ---- the whole DeepSeek-V3.2 attention layer (mla/layer.hpp) -------------- */
enum { MLA_LAYER_ABSORBED = 0, MLA_LAYER_NON_ABSORBED = 1, MLA_LAYER_SPARSE = 2 };
#define MLA_LAYER_WEIGHT_COUNT 13

/* Mirror of mla::LayerConfig. */
typedef struct mla_layer_config {
  int64_t hidden;
  int32_t q_lora_rank;
  int32_t kv_lora_rank; /* 512 */
  int32_t heads;
  int32_t d_nope;
  int32_t d_rope; /* 64 */
  int32_t d_v;
  int32_t index_topk;
  int32_t reserved; /* 0 */
  double norm_eps;
  double softmax_scale; /* 0: V3.2's rule */
  mla_rope_config rope;
} mla_layer_config;

/* DeepSeek-V3.2's layer (hidden 7168, 128 heads, ...) and the small test layer. */
MLA_C_EXPORT void mla_layer_default_config(mla_layer_config* config);
MLA_C_EXPORT void mla_layer_small_test_config(mla_layer_config* config);
MLA_C_EXPORT int32_t mla_layer_softmax_scale(const mla_layer_config* config, double* scale);
/* Weight i (0 .. MLA_LAYER_WEIGHT_COUNT-1, mla::LayerWeights' order): its name (a
 * static string), rank and shape (shape[3]; unused dims 0). */
MLA_C_EXPORT int32_t mla_layer_weight_shape(const mla_layer_config* config, int32_t i,
                                            const char** name, int32_t* ndim, int64_t* shape);
/* weights: MLA_LAYER_WEIGHT_COUNT tensor pointers in that order (the indexer's,
 * 8..12, may be NULL unless the sparse path runs). Seeded synthetic values, CPU. */
MLA_C_EXPORT int32_t mla_layer_init_weights(const mla_layer_config* config, uint64_t seed,
                                            const mla_tensor* const* weights);
/* hidden, out [B, s_q, hidden] (CPU f32/f64/bf16; CUDA hidden bf16, out bf16/f32);
 * kv paged cache (kv_format); index_cache [num_pages, 8448] u8 or NULL; block_table
 * [B, max_pages] i32; cache_seqlens [B] i32 (new tokens included); attention
 * MLA_LAYER_*. CUDA needs `workspace` of mla_layer_workspace_size bytes (0 on CPU). */
MLA_C_EXPORT int32_t mla_layer_workspace_size(const mla_layer_config* config,
                                              const mla_tensor* const* weights,
                                              const mla_tensor* hidden, const mla_tensor* kv,
                                              int32_t kv_format, const mla_tensor* index_cache,
                                              const mla_tensor* block_table,
                                              const mla_tensor* cache_seqlens, int32_t attention,
                                              const mla_tensor* out, size_t* bytes);
MLA_C_EXPORT int32_t mla_layer_forward(const mla_layer_config* config,
                                       const mla_tensor* const* weights, const mla_tensor* hidden,
                                       const mla_tensor* kv, int32_t kv_format,
                                       const mla_tensor* index_cache, const mla_tensor* block_table,
                                       const mla_tensor* cache_seqlens, int32_t attention,
                                       const mla_tensor* out, void* workspace,
                                       size_t workspace_bytes, void* stream);

/* ---- token top-k (mla/topk.hpp) --------------------------------------------- */
/* logits [R, N] f32, lengths [R] i32 (NULL: N) -> indices [R, k] i32 (-1 padded);
 * with block_table [B, max_pages] (may be NULL) positions become global slots. */
MLA_C_EXPORT int32_t mla_topk_indices(const mla_tensor* logits, const mla_tensor* lengths,
                                      int32_t k, const mla_tensor* indices,
                                      const mla_tensor* block_table, int32_t page_size,
                                      int32_t rows_per_request, int64_t num_pages, void* stream);

/* ---- sparse attention (mla/sparse.hpp) -------------------------------------- */
/* q [B, s_q, h_q, 576], indices [B, s_q, topk] i32 slots (-1 none), topk_length [B] (NULL ok)
 * -> out [B, s_q, h_q, 512], lse [B, h_q, s_q]. */
MLA_C_EXPORT int32_t mla_sparse_decode(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                                       const mla_tensor* indices, const mla_tensor* topk_length,
                                       float softmax_scale, const mla_tensor* out,
                                       const mla_tensor* lse, void* stream);
/* q [s_q, h_q, 576], kv [s_kv, 576] bf16/f32 rows (kv_format MLA_KV_BF16) or
 * [s_kv, 656] u8 fp8_ds_mla entries (MLA_KV_FP8_DS_MLA, read dequantised),
 * indices [s_q, topk] i32 rows of kv (-1 none), topk_length [s_q] (NULL ok:
 * entries j >= topk_length[i] of token i ignored) -> out [s_q, h_q, 512], lse [s_q, h_q]. */
MLA_C_EXPORT int32_t mla_sparse_prefill(const mla_tensor* q, const mla_tensor* kv,
                                        int32_t kv_format, const mla_tensor* indices,
                                        const mla_tensor* topk_length, float softmax_scale,
                                        const mla_tensor* out, const mla_tensor* lse, void* stream);

/* With caller-owned scratch (mla_sparse_*_workspace_size says how much; CUDA
 * only, 0 on CPU). The plain forms above pass none: on CUDA they answer
 * MLA_ERR_INSUFFICIENT_WORKSPACE when the call needs scratch. */
MLA_C_EXPORT int32_t mla_sparse_decode_workspace_size(const mla_tensor* q, const mla_tensor* kv,
                                                      int32_t kv_format, const mla_tensor* indices,
                                                      const mla_tensor* topk_length,
                                                      float softmax_scale, const mla_tensor* out,
                                                      const mla_tensor* lse, size_t* bytes);
MLA_C_EXPORT int32_t mla_sparse_decode_ws(const mla_tensor* q, const mla_tensor* kv,
                                          int32_t kv_format, const mla_tensor* indices,
                                          const mla_tensor* topk_length, float softmax_scale,
                                          const mla_tensor* out, const mla_tensor* lse,
                                          void* workspace, size_t workspace_bytes, void* stream);
/* Plan reuse for sparse decode (mla::sparse_decode_plan); workspace: as for
 * mla_sparse_decode_ws. */
MLA_C_EXPORT int32_t mla_sparse_decode_plan(const mla_tensor* q, const mla_tensor* kv,
                                            int32_t kv_format, const mla_tensor* indices,
                                            const mla_tensor* topk_length, float softmax_scale,
                                            const mla_tensor* out, const mla_tensor* lse,
                                            void* workspace, size_t workspace_bytes, void* stream,
                                            mla_decode_plan_info* plan);
MLA_C_EXPORT int32_t mla_sparse_decode_planned(const mla_tensor* q, const mla_tensor* kv,
                                               int32_t kv_format, const mla_tensor* indices,
                                               const mla_tensor* topk_length, float softmax_scale,
                                               const mla_tensor* out, const mla_tensor* lse,
                                               const mla_decode_plan_info* plan, void* workspace,
                                               size_t workspace_bytes, void* stream);
MLA_C_EXPORT int32_t mla_sparse_prefill_workspace_size(const mla_tensor* q, const mla_tensor* kv,
                                                       int32_t kv_format, const mla_tensor* indices,
                                                       const mla_tensor* topk_length,
                                                       float softmax_scale, const mla_tensor* out,
                                                       const mla_tensor* lse, size_t* bytes);
MLA_C_EXPORT int32_t mla_sparse_prefill_ws(const mla_tensor* q, const mla_tensor* kv,
                                           int32_t kv_format, const mla_tensor* indices,
                                           const mla_tensor* topk_length, float softmax_scale,
                                           const mla_tensor* out, const mla_tensor* lse,
                                           void* workspace, size_t workspace_bytes, void* stream);

/* ---- the DSA decode step (mla/dsa.hpp) ------------------------------------- */
/* Indexer logits -> top-k -> sparse attention, or dense decode when
 * max_seqlen <= max(topk, dense_below). Arguments as mla_decode, plus:
 * max_seqlen (host upper bound of cache_seqlens), index_q8 [B, s_q, 64, 128] e4m3,
 * index_w_folded [B, s_q, 64] f32, index_cache [pages, 8448] u8, index_block_table
 * [B, max_index_pages] i32 (NULL: block_table, which then needs pages of 64). */
enum { MLA_DSA_PATH_AUTOMATIC = 0, MLA_DSA_PATH_DENSE = 1, MLA_DSA_PATH_SPARSE = 2 };
/* Mirror of mla::DsaPolicy (dense_options.batch_invariant flattened). */
typedef struct mla_dsa_policy {
  int32_t topk;
  int32_t path; /* MLA_DSA_PATH_* */
  int64_t dense_below;
  int32_t batch_invariant;
} mla_dsa_policy;
MLA_C_EXPORT void mla_dsa_default_policy(mla_dsa_policy* policy);
/* The path a step with this max_seqlen and cache format (MLA_KV_*: the default
 * policy's measured crossover depends on it) takes (MLA_DSA_PATH_DENSE or _SPARSE). */
MLA_C_EXPORT int32_t mla_dsa_decode_path(int64_t max_seqlen, int32_t kv_format,
                                         const mla_dsa_policy* policy, int32_t* path);
MLA_C_EXPORT int32_t mla_dsa_decode_workspace_size(
    const mla_tensor* q, const mla_tensor* kv, int32_t kv_format, const mla_tensor* block_table,
    const mla_tensor* cache_seqlens, int64_t max_seqlen, const mla_tensor* index_q8,
    const mla_tensor* index_w_folded, const mla_tensor* index_cache,
    const mla_tensor* index_block_table, float softmax_scale, const mla_tensor* out,
    const mla_tensor* lse, const mla_dsa_policy* policy, size_t* bytes);
MLA_C_EXPORT int32_t mla_dsa_decode(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                                    const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                                    int64_t max_seqlen, const mla_tensor* index_q8,
                                    const mla_tensor* index_w_folded, const mla_tensor* index_cache,
                                    const mla_tensor* index_block_table, float softmax_scale,
                                    const mla_tensor* out, const mla_tensor* lse,
                                    const mla_dsa_policy* policy, void* workspace,
                                    size_t workspace_bytes, void* stream);
/* The planner's dense/DSA crossover in tokens (0: DSA never cheaper). model NULL:
 * "deepseek-v3.2"; kv "bf16"/"fp8" (NULL: bf16); calibration_json: file text or NULL. */
MLA_C_EXPORT int32_t mla_dsa_dense_threshold(const char* gpu, const char* calibration_json,
                                             const char* model, const char* kv, int32_t heads,
                                             int32_t new_tokens, int32_t topk, int32_t batch,
                                             int64_t* tokens);

/* ---- block-sparse selection (mla/block_sparse.hpp) -------------------------- */
/* Mirror of mla::BlockSparseParams (NSA's selection parameters). */
typedef struct mla_block_sparse_params {
  int32_t block_size;          /* tokens mean-pooled into one compressed key */
  int32_t stride;              /* distance between compressed blocks */
  int32_t selected_block_size; /* tokens per selection block */
  int32_t num_selected_blocks; /* blocks chosen, initial and local included */
  int32_t initial_blocks;      /* always chosen: the start of the prompt */
  int32_t local_blocks;        /* always chosen: the newest blocks */
  int32_t sliding_window;      /* newest tokens always attended */
} mla_block_sparse_params;

/* The C++ defaults (NSA's). A NULL params pointer means these in every function below. */
MLA_C_EXPORT void mla_block_sparse_default_params(mla_block_sparse_params* params);
MLA_C_EXPORT int32_t mla_validate_block_sparse_params(const mla_block_sparse_params* params);
/* Entries an index list needs (validates the parameters first). */
MLA_C_EXPORT int32_t mla_block_sparse_capacity(const mla_block_sparse_params* params,
                                               int64_t* capacity);
/* The presets: how many, the i-th (name and source are static strings), one by name. */
MLA_C_EXPORT int32_t mla_block_sparse_num_presets(void);
MLA_C_EXPORT int32_t mla_block_sparse_preset_at(int32_t i, const char** name,
                                                mla_block_sparse_params* params,
                                                const char** source);
MLA_C_EXPORT int32_t mla_block_sparse_preset(const char* name, mla_block_sparse_params* params);
/* q [B, s_q, h_q, 576], block_table [B, max_pages] i32, cache_seqlens [B] i32 ->
 * indices [B, s_q, C] i32 (C >= capacity; global slots, -1 padded), num_selected [B, s_q]
 * i32 (may be NULL). CPU only for now (CUDA: MLA_ERR_UNSUPPORTED). */
MLA_C_EXPORT int32_t mla_block_sparse_select(const mla_tensor* q, const mla_tensor* kv,
                                             int32_t kv_format, const mla_tensor* block_table,
                                             const mla_tensor* cache_seqlens,
                                             const mla_block_sparse_params* params,
                                             const mla_tensor* indices,
                                             const mla_tensor* num_selected, void* stream);

/* ---- the planner (mla/plan.hpp) ---------------------------------------------- */
/* Text results are written snprintf-style: at most buf_size - 1 characters and a NUL
 * into buf (which may be NULL when buf_size is 0); *length receives the full length
 * (without the NUL), so a caller whose buffer was too small (*length >= buf_size)
 * calls again with a larger one. */

/* Mirror of mla::plan::Workload. The names (model, gpu, phase "decode"/"prefill",
 * kv "bf16"/"fp8"/"fp4") are NUL-terminated strings; batch 0 = auto. */
typedef struct mla_plan_workload {
  const char* model;
  const char* gpu;
  const char* phase;
  const char* kv;
  int64_t batch;
  int64_t context;
  int32_t new_tokens;
  int32_t tp;
  int32_t weight_shards;
  int32_t topk;
  double mem_util;
} mla_plan_workload;

/* The C++ defaults (strings point to static storage). */
MLA_C_EXPORT void mla_plan_default_workload(mla_plan_workload* workload);
/* The plan as JSON (render_json; as_text != 0: the readable table of render_text).
 * calibration_json: the text of a calibration file (docs/planner.md), or NULL. */
MLA_C_EXPORT int32_t mla_plan(const mla_plan_workload* workload, const char* calibration_json,
                              int32_t as_text, char* buf, size_t buf_size, size_t* length);
/* Seed 000/004's claims checked against our numbers: JSON array (as_text: a table). */
MLA_C_EXPORT int32_t mla_plan_seed_check(int32_t as_text, char* buf, size_t buf_size,
                                         size_t* length);
/* {"gpus": [...], "models": [...]}: every field of known_gpus() and known_models(). */
MLA_C_EXPORT int32_t mla_plan_catalog(char* buf, size_t buf_size, size_t* length);

/* ---- non-absorbed prefill (mla/prefill.hpp) --------------------------------- */
MLA_C_EXPORT int32_t mla_decompress_kv(const mla_tensor* c_kv, const mla_tensor* w_uk,
                                       const mla_tensor* w_uv, const mla_tensor* k_nope,
                                       const mla_tensor* v, void* stream);
/* q [T, h, d_qk], k [Tk, h, d_qk], v [Tk, h, d_v], cu_seqlens_q/k [B+1] i32
 * -> out [T, h, d_v], lse [h, T]. */
MLA_C_EXPORT int32_t mla_mha_prefill(const mla_tensor* q, const mla_tensor* k, const mla_tensor* v,
                                     const mla_tensor* cu_seqlens_q, const mla_tensor* cu_seqlens_k,
                                     float softmax_scale, int32_t causal, const mla_tensor* out,
                                     const mla_tensor* lse, void* stream);

/* ---- KV transfer plans (mla/transfer.hpp) ------------------------------------ */
/* Host-side planning of a request's move between two paged pools (prefill/decode
 * disaggregation, docs/multi-gpu.md) and the memcpy executor over host buffers.
 * The NCCL executor (nccl_transfer_*) lives in the optional library
 * libmla_transfer_nccl and is not part of this ABI.
 * Arrays of results are written like text: at most `capacity` entries into the
 * caller's array (which may be NULL when capacity is 0); the full count comes back,
 * so a caller whose array was too small calls again with a larger one. */
enum { MLA_TRANSFER_LATENT = 0, MLA_TRANSFER_INDEXER = 1 }; /* mla::TransferCache */
enum { MLA_TRANSFER_BY_LAYER = 0, MLA_TRANSFER_WHOLE = 1 }; /* mla::TransferOrder */

/* Mirror of mla::TransferSide; pages[0 .. num_page_ids) is the request's block_table row. */
typedef struct mla_transfer_side {
  const int32_t* pages;
  int64_t num_page_ids;
  int64_t num_pages;    /* pages in the pool (of one layer) */
  int64_t page_size;    /* tokens per page; 64 for the indexer cache */
  int64_t page_stride;  /* bytes; 0 = dense */
  int64_t layer_stride; /* bytes; 0 = one allocation per layer */
} mla_transfer_side;

/* Mirror of mla::TransferRequest. */
typedef struct mla_transfer_request {
  int64_t first_token;
  int64_t num_tokens;
  int32_t num_layers;
  int32_t src_format; /* MLA_KV_*; must equal dst_format */
  int32_t dst_format;
  int32_t with_indexer; /* 0 or 1 */
  int32_t order;        /* MLA_TRANSFER_BY_LAYER / MLA_TRANSFER_WHOLE */
  int32_t reserved;     /* 0 */
  mla_transfer_side src_latent;
  mla_transfer_side dst_latent;
  mla_transfer_side src_indexer; /* read only when with_indexer */
  mla_transfer_side dst_indexer;
} mla_transfer_request;

/* Mirror of mla::CopyRun: bytes from the base of `layer`'s pool of `cache` on each side. */
typedef struct mla_copy_run {
  int64_t src_offset;
  int64_t dst_offset;
  int64_t bytes;
  int32_t layer;
  int32_t cache; /* MLA_TRANSFER_LATENT / MLA_TRANSFER_INDEXER */
} mla_copy_run;

/* The scalars of mla::TransferPlan and the full lengths of its arrays. */
typedef struct mla_transfer_plan_info {
  int64_t num_runs;
  int64_t num_layer_begin; /* by_layer: num_layers + 1; whole: 2 */
  int64_t total_bytes;
  int64_t largest_run;
  int32_t order;
  int32_t reserved;
} mla_transfer_plan_info;

/* Base addresses of every layer's pool on one side (mirror of mla::TransferBuffers). */
typedef struct mla_transfer_buffers {
  void* const* latent;
  int64_t num_latent;
  void* const* indexer;
  int64_t num_indexer;
} mla_transfer_buffers;

/* "latent" / "indexer" ("?" for another code). */
MLA_C_EXPORT const char* mla_transfer_cache_name(int32_t cache);
/* plan_transfer: runs[0 .. min(num_runs, runs_capacity)), layer_begin likewise; info
 * receives the full counts and the totals. */
MLA_C_EXPORT int32_t mla_plan_transfer(const mla_transfer_request* request, mla_copy_run* runs,
                                       size_t runs_capacity, int64_t* layer_begin,
                                       size_t layer_begin_capacity, mla_transfer_plan_info* info);
/* layer_bases: out[l] = base + l * layer_stride for l < min(num_layers, capacity). */
MLA_C_EXPORT int32_t mla_layer_bases(void* base, int64_t layer_stride, int32_t num_layers,
                                     void** out, size_t capacity);
/* execute_copy_plan over host memory: memcpy of every run (all bases checked first). */
MLA_C_EXPORT int32_t mla_execute_copy_plan(const mla_copy_run* runs, size_t num_runs,
                                           const mla_transfer_buffers* src,
                                           const mla_transfer_buffers* dst);

/* Launch conventions (torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
 * and the bootstrap byte exchange (host code in libmla, used to start the NCCL executor). */
#define MLA_MASTER_ADDR_MAX 256
/* Mirror of mla::LaunchInfo; master_addr is NUL-terminated. */
typedef struct mla_launch_info {
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;
  int32_t master_port;
  char master_addr[MLA_MASTER_ADDR_MAX];
} mla_launch_info;
/* lookup(name, user) -> value or NULL (unset). A NULL lookup reads the process environment. */
typedef const char* (*mla_env_lookup_fn)(const char* name, void* user);
typedef mla_env_lookup_fn mla_getenv_fn; /* the name of ABI version 2 and before */
MLA_C_EXPORT int32_t mla_launch_info_from_env(mla_launch_info* out, mla_env_lookup_fn lookup,
                                              void* user);
/* Rank 0 serves bytes[0 .. size) to the other ranks (over TCP at master_addr:master_port,
 * or through the file at path), which receive them into bytes. */
MLA_C_EXPORT int32_t mla_exchange_bytes_tcp(const mla_launch_info* who, void* bytes, size_t size,
                                            int32_t timeout_ms);
MLA_C_EXPORT int32_t mla_exchange_bytes_file(const mla_launch_info* who, const char* path,
                                             void* bytes, size_t size, int32_t timeout_ms);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MLA_C_API_H_ */
