// CUDA backends of the lightning-indexer API (mla/indexer.hpp). Called by
// src/api/indexer.cpp after its device-independent validation, for CUDA tensors.
// Values that live on the device (slots, block_table, lengths) cannot be checked
// on the host without a copy: the kernels skip any slot or page outside the
// cache instead of reading it. The logits calls take internal options (the
// kernel, the pages per CTA): the tests and the benchmark set them.
#pragma once
#include "cuda/indexer/indexer_params.hpp"
#include "mla/indexer.hpp"

namespace mla::cuda {
Status append_indexer_keys(const AppendIndexerKeysArgs& args, const ExecContext& ctx);
Status quantize_indexer_query(const QuantizeIndexerQueryArgs& args, const ExecContext& ctx);
Status indexer_logits_decode(const IndexerLogitsDecodeArgs& args, const ExecContext& ctx,
                             const indexer::LogitsOptions& opt = {});
Status indexer_logits_prefill(const IndexerLogitsPrefillArgs& args, const ExecContext& ctx,
                              const indexer::LogitsOptions& opt = {});
}  // namespace mla::cuda
