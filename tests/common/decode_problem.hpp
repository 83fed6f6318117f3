// A random dense-decode problem (paged cache, block table, lengths, queries)
// and the DecodeArgs over it, for the CPU reference tests and the GPU tests
// that compare kernels with the reference.
#pragma once
#include <vector>

#include "common/random.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"

namespace mla::testing {

struct DecodeShape {
  std::vector<int32_t> lengths;  // cache_seqlens, one per request
  int64_t s_q = 1;
  int64_t h_q = 16;
  PagedCacheSpec cache;
  bool causal = true;
  float softmax_scale = static_cast<float>(deepseek_v32_softmax_scale());
};

struct DecodeProblem {
  DecodeShape shape;
  PagedCache cache;
  HostTensor q;  // [B, s_q, h_q, 576], f64 holding bf16-representable values
  int64_t batch() const { return static_cast<int64_t>(shape.lengths.size()); }

  // Fresh, poisoned outputs of the requested dtypes.
  HostTensor make_out(DType dt) const {
    HostTensor t(dt, {batch(), shape.s_q, shape.h_q, kDv});
    t.poison();
    return t;
  }
  HostTensor make_lse(DType dt) const {
    HostTensor t(dt, {batch(), shape.h_q, shape.s_q});
    t.poison();
    return t;
  }
  // Views over q (in the given storage, e.g. convert(q, DType::bf16)), the
  // cache and the outputs.
  DecodeArgs args(const HostTensor& q_in, const HostTensor& out, const HostTensor& lse,
                  Device dev = Device::cpu()) const {
    DecodeArgs a;
    a.q = q_in.view(dev);
    a.kv = cache.view(dev);
    a.block_table = cache.block_table_view(dev);
    a.cache_seqlens = cache.seqlens_view(dev);
    a.softmax_scale = shape.softmax_scale;
    a.causal = shape.causal;
    a.out = out.view(dev);
    a.lse = lse.view(dev);
    return a;
  }
};

// Queries are bf16-representable so that bf16, f32 and f64 q mean the same
// numbers. Scale of the values: q in [-1, 1], cache entries in [-1, 1] (bf16)
// or e4m3 codes times 2^[min_scale_exp, max_scale_exp] (fp8).
inline DecodeProblem make_decode_problem(Rng& rng, const DecodeShape& s) {
  DecodeProblem p;
  p.shape = s;
  p.cache = make_paged_cache(rng, s.lengths, s.cache);
  p.q = HostTensor(DType::f64, {p.batch(), s.s_q, s.h_q, kDqk});
  for (int64_t i = 0; i < p.q.numel(); ++i)
    p.q.set(i, round_to_bf16(static_cast<float>(rng.uniform())));
  return p;
}

}  // namespace mla::testing
