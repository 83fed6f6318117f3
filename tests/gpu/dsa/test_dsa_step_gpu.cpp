// The DSA decode step (mla/dsa.hpp) on the GPU against the CPU step on the
// same inputs (tests/common/dsa_step_problem.hpp):
//  - k >= L: the dense path and the forced sparse path equal the CPU step to
//    bf16 rounding (every key is selected, so the lists cannot differ);
//  - L > k: the CUDA step equals the CUDA pipeline run op by op bit for bit
//    (same kernels, same inputs); its attention equals the CPU sparse attention
//    over the lists the GPU chose; its lists agree with the CPU step's (recall
//    >= 0.99: the FP8 indexer accumulates differently, near-ties may swap), and
//    rows whose lists are the same set equal the CPU step's rows;
//  - the workspace check on CUDA tensors.
// Outputs and the workspace are poisoned before every run.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "common/dsa_step_problem.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/dsa.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"

namespace mla {
namespace {

using testing::DeviceBuffer;
using testing::DsaStepProblem;
using testing::DsaStepShape;
using testing::HostTensor;
using testing::Rng;

size_t nbytes(const HostTensor& t) {
  return size_t(t.numel()) * dtype_size(t.dtype);
}

// A HostTensor's dense copy on the GPU and the view over it.
struct Mirror {
  DeviceBuffer buf;
  TensorView view;
  explicit Mirror(const HostTensor& t)
      : buf(t), view(t.view(Device::cuda(0))) {  // copies exactly the tensor's bytes
    view.data = buf.get();
  }
  void to_host(HostTensor& t) const {
    cudaMemcpy(t.storage.data(), buf.get(), nbytes(t), cudaMemcpyDeviceToHost);
  }
};

// The problem's tensors on the GPU: q as bf16, out bf16, lse f32 (the kernels' dtypes).
struct DeviceStep {
  const DsaStepProblem& p;
  HostTensor q_bf16, out, lse;
  Mirror q, bt, lens, q8, wf, icache, ibt, dout, dlse;
  DeviceBuffer kv;
  explicit DeviceStep(const DsaStepProblem& pr)
      : p(pr),
        q_bf16(testing::convert(pr.dense.q, DType::bf16)),
        out(pr.dense.make_out(DType::bf16)),
        lse(pr.dense.make_lse(DType::f32)),
        q(q_bf16),
        bt(HostTensor(DType::i32, {pr.dense.batch(), pr.dense.cache.max_pages})),
        lens(HostTensor(DType::i32, {pr.dense.batch()})),
        q8(pr.index_q8),
        wf(pr.index_w_folded),
        icache(pr.index_cache),
        ibt(pr.shared_table ? HostTensor(DType::i32, {1, 1}) : pr.index_block_table),
        dout(out),
        dlse(lse),
        kv(pr.dense.cache.storage.data(), pr.dense.cache.storage.size() * 8) {
    bt.buf.upload(pr.dense.cache.block_table.data(), pr.dense.cache.block_table.size() * 4);
    lens.buf.upload(pr.dense.cache.seqlens.data(), pr.dense.cache.seqlens.size() * 4);
  }
  DsaDecodeArgs args(int64_t max_seqlen) const {
    DsaDecodeArgs a = p.args(q_bf16, out, lse, max_seqlen, Device::cuda(0));
    a.q.data = q.buf.get();
    a.kv.data.data = kv.get();
    a.block_table.data = bt.buf.get();
    a.cache_seqlens.data = lens.buf.get();
    a.index_q8.data = q8.buf.get();
    a.index_w_folded.data = wf.buf.get();
    a.index_cache.data.data = icache.buf.get();
    if (!p.shared_table) a.index_block_table.data = ibt.buf.get();
    a.out.data = dout.buf.get();
    a.lse.data = dlse.buf.get();
    return a;
  }
  // Runs the step on a poisoned workspace of the size it asks for; outputs back on the host.
  Status run(int64_t max_seqlen, const DsaPolicy& pol) {
    const DsaDecodeArgs a = args(max_seqlen);
    size_t bytes = 0;
    MLA_TRY(dsa_decode_workspace_size(a, pol, &bytes));
    DeviceBuffer ws(std::max<size_t>(bytes, 1));
    ws.poison();
    dout.buf.poison();
    dlse.buf.poison();
    MLA_TRY(dsa_decode(a, pol, Workspace{ws.get(), bytes}, {}));
    if (cudaDeviceSynchronize() != cudaSuccess) return Status(Errc::cuda_error, "sync failed");
    dout.to_host(out);
    dlse.to_host(lse);
    return Status::Ok();
  }
};

struct Cpu {
  HostTensor out, lse;
};

Cpu cpu_step(const DsaStepProblem& p, int64_t max_seqlen, const DsaPolicy& pol) {
  Cpu c{p.dense.make_out(DType::f64), p.dense.make_lse(DType::f64)};
  const DsaDecodeArgs a = p.args(p.dense.q, c.out, c.lse, max_seqlen);
  size_t bytes = 0;
  Status st = dsa_decode_workspace_size(a, pol, &bytes);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<uint8_t> ws(bytes + 1);
  st = dsa_decode(a, pol, Workspace{ws.data(), bytes});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return c;
}

// bf16 P and bf16 output: the error of a (b, i) row's 512 * h_q outputs relative
// to its norm stays under 1e-2 (~2^-9 per element), lse (fp32) within 1e-3, as
// in test_dsa_gpu.cpp. rows: which (b, i) to compare (empty: all).
void expect_rows_close(const DsaStepProblem& p, const HostTensor& got_out,
                       const HostTensor& got_lse, const HostTensor& ref_out,
                       const HostTensor& ref_lse, const std::vector<bool>& rows, const char* what) {
  const int64_t B = p.dense.batch(), s_q = p.dense.shape.s_q, h = p.dense.shape.h_q;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < s_q; ++i) {
      if (!rows.empty() && !rows[b * s_q + i]) continue;
      double err2 = 0, ref2 = 0;
      for (int64_t e = (b * s_q + i) * h * kDv; e < (b * s_q + i + 1) * h * kDv; ++e) {
        const double g = got_out.get(e), r = ref_out.get(e);
        err2 += std::isfinite(g) ? (g - r) * (g - r) : 1e9;
        ref2 += r * r;
      }
      EXPECT_LE(std::sqrt(err2), 1e-2 * std::sqrt(ref2) + 1e-30)
          << what << ": request " << b << " token " << i;
      for (int64_t hh = 0; hh < h; ++hh) {
        const double g = got_lse.get((b * h + hh) * s_q + i),
                     r = ref_lse.get((b * h + hh) * s_q + i);
        if (std::isinf(r))
          EXPECT_TRUE(std::isinf(g) && g < 0) << what << ": lse " << b << "," << hh << "," << i;
        else
          EXPECT_NEAR(g, r, 1e-3) << what << ": lse " << b << "," << hh << "," << i;
      }
    }
}

DsaStepShape gpu_shape(std::vector<int32_t> lengths, int64_t s_q, int64_t h_q, KvFormat fmt,
                       int64_t page_size, bool shared) {
  return testing::dsa_step_shape(std::move(lengths), s_q, h_q, page_size, fmt, shared);
}

TEST(DsaStepGpu, TopkAtLeastLengthMatchesCpuStep) {
  Rng rng(401);
  for (KvFormat fmt : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (int64_t h : {16, 128})
      for (int64_t s_q : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << kv_format_name(fmt) << " h " << h << " s_q " << s_q);
        const DsaStepProblem p = make_dsa_step_problem(
            rng, gpu_shape({256, 5, 77, 0, 1, 64, 200}, s_q, h, fmt, 64, true));
        DsaPolicy pol;
        pol.topk = 256;
        const Cpu ref = cpu_step(p, 256, pol);
        DeviceStep d(p);
        ASSERT_MLA_OK(d.run(256, pol));  // dense path
        expect_rows_close(p, d.out, d.lse, ref.out, ref.lse, {}, "dense path");
        pol.path = DsaPath::sparse;
        ASSERT_MLA_OK(d.run(256, pol));
        expect_rows_close(p, d.out, d.lse, ref.out, ref.lse, {}, "forced sparse path");
      }
}

TEST(DsaStepGpu, EndToEndMatchesCpuStep) {
  Rng rng(402);
  for (KvFormat fmt : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (int64_t s_q : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << kv_format_name(fmt) << " s_q " << s_q);
      const bool shared = s_q != 2;  // s_q 2: latent pages of 32, indexer table of its own
      const DsaStepProblem p = make_dsa_step_problem(
          rng,
          gpu_shape({3000, 0, 3, 512, 513, 700, 1500}, s_q, 64, fmt, shared ? 64 : 32, shared));
      const int64_t B = p.dense.batch(), R = B * s_q, max_seqlen = 3008;  // a loose bound
      DsaPolicy pol;
      pol.topk = 512;
      pol.dense_below = 0;
      DeviceStep d(p);
      ASSERT_MLA_OK(d.run(max_seqlen, pol));

      // The pipeline op by op on the GPU, buffers of its own.
      const DsaDecodeArgs a = d.args(max_seqlen);
      HostTensor logits(DType::f32, {B, s_q, max_seqlen}), idx(DType::i32, {B, s_q, pol.topk});
      HostTensor out2 = p.dense.make_out(DType::bf16), lse2 = p.dense.make_lse(DType::f32);
      Mirror dlog(logits), didx(idx), dout2(out2), dlse2(lse2);
      dlog.buf.poison(), didx.buf.poison(), dout2.buf.poison(), dlse2.buf.poison();
      ASSERT_MLA_OK(indexer_logits_decode({a.index_q8, a.index_w_folded, a.index_cache,
                                           shared ? a.block_table : a.index_block_table,
                                           a.cache_seqlens, dlog.view}));
      TopkArgs tk;
      tk.logits = dlog.view;
      tk.logits.ndim = 2, tk.logits.shape[0] = R, tk.logits.shape[1] = max_seqlen;
      tk.logits.strides[0] = max_seqlen, tk.logits.strides[1] = 1;
      tk.k = pol.topk;
      tk.indices = didx.view;
      tk.indices.ndim = 2, tk.indices.shape[0] = R, tk.indices.shape[1] = pol.topk;
      tk.indices.strides[0] = pol.topk, tk.indices.strides[1] = 1;
      tk.block_table = a.block_table;
      tk.page_size = static_cast<int32_t>(p.dense.shape.cache.page_size);
      tk.rows_per_request = static_cast<int32_t>(s_q);
      tk.order = TopkOrder::by_position;  // as the step asks (sparse attention takes any order)
      ASSERT_MLA_OK(topk_indices(tk));
      SparseDecodeArgs sd{a.q, a.kv, didx.view, {}, a.softmax_scale, dout2.view, dlse2.view};
      size_t need = 0;
      ASSERT_MLA_OK(sparse_workspace_size(sd, &need));
      DeviceBuffer ws(std::max<size_t>(need, 1));
      ASSERT_MLA_OK(sparse_decode(sd, Workspace{ws.get(), need}));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      didx.to_host(idx), dout2.to_host(out2), dlse2.to_host(lse2);
      EXPECT_EQ(std::memcmp(out2.storage.data(), d.out.storage.data(), nbytes(out2)), 0)
          << "the step differs from its own ops run one by one (out)";
      EXPECT_EQ(std::memcmp(lse2.storage.data(), d.lse.storage.data(), nbytes(lse2)), 0)
          << "the step differs from its own ops run one by one (lse)";

      // Attention over the GPU's lists, on the CPU.
      HostTensor ro = p.dense.make_out(DType::f64), rl = p.dense.make_lse(DType::f64);
      SparseDecodeArgs cs{p.dense.q.view(),
                          p.dense.cache.view(),
                          idx.view(),
                          {},
                          p.dense.shape.softmax_scale,
                          ro.view(),
                          rl.view()};
      ASSERT_MLA_OK(sparse_decode(cs));
      expect_rows_close(p, d.out, d.lse, ro, rl, {}, "attention over the GPU's lists");

      // The CPU step: its lists (CPU ops by hand) against the GPU's, and the rows
      // whose lists hold the same set.
      const Cpu ref = cpu_step(p, max_seqlen, pol);
      HostTensor clog(DType::f32, {B, s_q, max_seqlen}), cidx(DType::i32, {R, pol.topk});
      HostTensor lens(DType::i32, {R});
      for (int64_t r = 0; r < R; ++r) lens.set(r, p.dense.shape.lengths[r / s_q]);
      ASSERT_MLA_OK(indexer_logits_decode(
          {p.index_q8.view(), p.index_w_folded.view(), IndexerCacheView{p.index_cache.view()},
           shared ? p.dense.cache.block_table_view() : p.index_block_table.view(),
           p.dense.cache.seqlens_view(), clog.view()}));
      TopkArgs ct = tk;
      ct.logits = TensorView::make(clog.data(), DType::f32, {R, max_seqlen});
      ct.lengths = lens.view();
      ct.indices = cidx.view();
      ct.block_table = p.dense.cache.block_table_view();
      ASSERT_MLA_OK(topk_indices(ct));
      int64_t common = 0, total = 0;
      std::vector<bool> same(R);
      for (int64_t r = 0; r < R; ++r) {
        std::set<int32_t> g, c;
        for (int64_t j = 0; j < pol.topk; ++j) {
          if (idx.get(r * pol.topk + j) >= 0) g.insert(int32_t(idx.get(r * pol.topk + j)));
          if (cidx.get(r * pol.topk + j) >= 0) c.insert(int32_t(cidx.get(r * pol.topk + j)));
        }
        int64_t both = 0;
        for (int32_t s : c) both += g.count(s);
        common += both, total += int64_t(c.size());
        same[r] = g == c;
      }
      const double recall = total ? double(common) / double(total) : 1.0;
      EXPECT_GE(recall, 0.99) << "GPU lists vs CPU lists";
      expect_rows_close(p, d.out, d.lse, ref.out, ref.lse, same, "rows with the same lists");
    }
}

TEST(DsaStepGpu, WorkspaceTooSmall) {
  Rng rng(403);
  const DsaStepProblem p =
      make_dsa_step_problem(rng, gpu_shape({900, 10}, 1, 16, KvFormat::bf16, 64, true));
  DeviceStep d(p);
  DsaPolicy pol;
  pol.topk = 128;
  pol.dense_below = 0;
  const DsaDecodeArgs a = d.args(900);
  size_t bytes = 0;
  ASSERT_MLA_OK(dsa_decode_workspace_size(a, pol, &bytes));
  ASSERT_GT(bytes, size_t(900 * 4));  // at least the logits
  DeviceBuffer ws(bytes);
  const Status st = dsa_decode(a, pol, Workspace{ws.get(), bytes - 1});
  EXPECT_EQ(st.code(), Errc::insufficient_workspace) << st.to_string();
  EXPECT_NE(st.message().find(std::to_string(bytes)), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mla
