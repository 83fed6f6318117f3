// CUDA backends of the lightning-indexer API (mla/indexer.hpp). Called by
// src/api/indexer.cpp after its device-independent validation, for CUDA tensors.
// Values that live on the device (slots, block_table, lengths) cannot be checked
// on the host without a copy: the kernels skip any slot or page outside the
// cache instead of reading it. The logits calls take internal options (the
// kernel, the pages per CTA): the tests and the benchmark set them.
#pragma once
#include "cuda/indexer/indexer_params.hpp"
#include "mla/indexer.hpp"
#include "mla/indexer_select.hpp"

namespace mla::cuda {
Status append_indexer_keys(const AppendIndexerKeysArgs& args, const ExecContext& ctx);
Status quantize_indexer_query(const QuantizeIndexerQueryArgs& args, const ExecContext& ctx);
Status indexer_logits_decode(const IndexerLogitsDecodeArgs& args, const ExecContext& ctx,
                             const indexer::LogitsOptions& opt = {});
Status indexer_logits_prefill(const IndexerLogitsPrefillArgs& args, const ExecContext& ctx,
                              const indexer::LogitsOptions& opt = {});
// The prefill select (indexer_select.hpp) of a validated public call; the
// size is that of its internal workspace, the call checks ws against it.
Status indexer_select_prefill_workspace_size(const IndexerSelectPrefillArgs& args,
                                             const IndexerSelectOptions& opts, size_t* bytes);
Status indexer_select_prefill(const IndexerSelectPrefillArgs& args,
                              const IndexerSelectOptions& opts, Workspace ws,
                              const ExecContext& ctx);
}  // namespace mla::cuda
