// The self check (mla/self_check.hpp), behind `mla check`, `python -m mla check` and
// mla_self_check. Each kernel family runs on the local GPU and, on the same fresh random
// inputs (never zeros), as the exact CPU reference (the same public call with CPU tensors);
// the answers are compared with the error bounds of the GPU tests (tests/gpu), outputs
// poisoned with NaN bytes before every GPU run. Small shapes with the edges the kernels must
// handle: a request of length 1, lengths not a multiple of the page, s_q 2, -1 entries in
// index lists.
#include "mla/self_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#ifdef MLA_HAS_CUDA
#include <cuda_runtime.h>

#include <cstring>

#include "common/random.hpp"
#include "cuda/common/device_support.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"
#include "mla/prefill.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"
#endif

namespace mla {
namespace {

// printf into a std::string (the report's lines).
template <class... A>
std::string strf(const char* fmt, A... a) {
  const int n = std::snprintf(nullptr, 0, fmt, a...);
  std::string s(size_t(std::max(n, 0)), '\0');
  std::snprintf(s.data(), s.size() + 1, fmt, a...);
  return s;
}

#ifdef MLA_HAS_CUDA
using testing::HostTensor;
using testing::Rng;

// What one check found: passed, and a line saying what was compared.
struct Outcome {
  bool ok = true;
  std::string detail;
};

// Device memory with the bytes of a host tensor (or poisoned with 0xff, NaN in every
// float type), freed on scope exit.
class DevMem {
 public:
  explicit DevMem(size_t bytes) : bytes_(std::max<size_t>(bytes, 16)) {
    if (cudaMalloc(&p_, bytes_) != cudaSuccess) p_ = nullptr;
    if (p_) cudaMemset(p_, 0xff, bytes_);
  }
  DevMem(const void* host, size_t bytes) : DevMem(bytes) {
    if (p_ && bytes) cudaMemcpy(p_, host, bytes, cudaMemcpyHostToDevice);
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() {
    if (p_) cudaFree(p_);
  }
  void* get() const { return p_; }
  void to_host(void* dst, size_t bytes) const {
    cudaMemcpy(dst, p_, bytes, cudaMemcpyDeviceToHost);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

size_t nbytes(const HostTensor& t) {
  return size_t(t.numel()) * dtype_size(t.dtype);
}

// A host tensor's copy on the GPU, with its view re-pointed there.
struct Mirror {
  DevMem mem;
  TensorView view;
  explicit Mirror(const HostTensor& t) : mem(t.storage.data(), nbytes(t)), view(t.view()) {
    view.data = mem.get();
    view.device = Device::cuda(0);
  }
};

Outcome fail(std::string what) {
  return {false, std::move(what)};
}

// Row-wise comparison of [rows, width] outputs: max |gpu - ref| <= rel * max |ref| of the
// row; a row the reference leaves at exactly zero (no key seen) must be exactly zero.
Outcome compare_rows(const HostTensor& gpu, const HostTensor& ref, int64_t width, double rel,
                     const char* what) {
  double worst = 0;
  const int64_t rows = ref.numel() / width;
  for (int64_t r = 0; r < rows; ++r) {
    double rmax = 0, err = 0;
    for (int64_t i = 0; i < width; ++i) {
      const double g = gpu.get(r * width + i), f = ref.get(r * width + i);
      rmax = std::max(rmax, std::fabs(f));
      err = std::max(err, std::isfinite(g) ? std::fabs(g - f) : INFINITY);
    }
    const double e = rmax > 0 ? err / rmax : err;
    if (!(rmax > 0 ? e <= rel : err == 0))
      return fail(std::string(what) + ": row " + std::to_string(r) + " differs by " +
                  std::to_string(e) + (rmax > 0 ? " of its largest value" : " (must be 0)"));
    worst = std::max(worst, e);
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s within %.1e of each row's max (bound %.0e)", what, worst, rel);
  return {true, buf};
}

// lse: |gpu - ref| <= tol, and -inf exactly where the reference has -inf.
Outcome compare_lse(const HostTensor& gpu, const HostTensor& ref, double tol) {
  double worst = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = gpu.get(i), f = ref.get(i);
    if (std::isinf(f) && f < 0) {
      if (!(std::isinf(g) && g < 0))
        return fail("lse: entry " + std::to_string(i) + " must be -inf");
      continue;
    }
    const double e = std::isfinite(g) ? std::fabs(g - f) : INFINITY;
    if (!(e <= tol))
      return fail("lse: entry " + std::to_string(i) + " differs by " + std::to_string(e));
    worst = std::max(worst, e);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "lse within %.1e", worst);
  return {true, buf};
}

#define CHECK_OK(expr)                                        \
  do {                                                        \
    const Status st_ = (expr);                                \
    if (!st_.ok()) return fail(#expr ": " + st_.to_string()); \
  } while (0)

// Waits for the GPU: an error of the launch or the kernel fails the check.
Outcome sync_gpu() {
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return fail(std::string("CUDA: ") + cudaGetErrorString(e));
  return {};
}

// The outputs of one attention check: the reference's (f64) and the GPU's (bf16 out, f32
// lse, on the host and mirrored on the GPU), all poisoned first (NaN bytes: a row the
// kernel does not write cannot pass).
struct AttnOutputs {
  HostTensor ref_out, ref_lse, out, lse;
  std::unique_ptr<Mirror> dout, dlse;
  AttnOutputs(const std::vector<int64_t>& out_shape, const std::vector<int64_t>& lse_shape)
      : ref_out(DType::f64, out_shape),
        ref_lse(DType::f64, lse_shape),
        out(DType::bf16, out_shape),
        lse(DType::f32, lse_shape) {
    for (HostTensor* t : {&ref_out, &ref_lse, &out, &lse}) t->poison();
    dout = std::make_unique<Mirror>(out);
    dlse = std::make_unique<Mirror>(lse);
  }
  // The reference run's outputs and the GPU run's.
  template <class Args>
  void to_reference(Args& a) const {
    a.out = ref_out.view();
    a.lse = ref_lse.view();
  }
  template <class Args>
  void to_gpu(Args& a) const {
    a.out = dout->view;
    a.lse = dlse->view;
  }
};

// After the GPU run: the outputs back on the host and compared with the reference. Bounds
// of the GPU tests: out 1e-2 of the row's max (P and the output are rounded to bf16), lse
// 1e-3 (fp32 scores).
Outcome compare_attention(AttnOutputs& o, int64_t width) {
  if (Outcome s = sync_gpu(); !s.ok) return s;
  o.dout->mem.to_host(o.out.storage.data(), nbytes(o.out));
  o.dlse->mem.to_host(o.lse.storage.data(), nbytes(o.lse));
  Outcome r = compare_rows(o.out, o.ref_out, width, 1e-2, "out");
  if (!r.ok) return r;
  Outcome l = compare_lse(o.lse, o.ref_lse, 1e-3);
  return {l.ok, r.detail + ", " + l.detail};
}

// `run` (taking a Workspace) with the device workspace `size` (taking a size_t*) asks for.
template <class Size, class Run>
Status with_workspace(Size&& size, Run&& run) {
  size_t bytes = 0;
  MLA_TRY(size(&bytes));
  DevMem ws(bytes);
  return run(Workspace{ws.get(), bytes});
}

// A random paged cache of `lengths` (page 64) on the host, and its copy on the GPU.
struct PagedKv {
  testing::PagedCache cache;
  DevMem mem;
  KvCacheView gpu;
  PagedKv(Rng& rng, const std::vector<int32_t>& lengths, KvFormat format)
      : cache(make(rng, lengths, format)),
        mem(cache.storage.data(), cache.storage.size() * 8),
        gpu(cache.view(Device::cuda(0))) {
    gpu.data.data = mem.get();
  }
  static testing::PagedCache make(Rng& rng, const std::vector<int32_t>& lengths, KvFormat format) {
    testing::PagedCacheSpec spec;
    spec.format = format;
    spec.page_size = 64;
    return testing::make_paged_cache(rng, lengths, spec);
  }
};

// Dense decode (mla_decode), bf16 or fp8_ds_mla cache; the bounds of compare_attention
// (tests/gpu/decode/test_decode_gpu.cpp).
Outcome check_decode(KvFormat format, uint64_t seed) {
  Rng rng(seed);
  const int64_t B = 4, s_q = 2, h = 16;
  const PagedKv kv(rng, {1, 37, 64, 300}, format);
  const testing::PagedCache& cache = kv.cache;
  const HostTensor q = testing::random_tensor(rng, DType::bf16, {B, s_q, h, kDqk});
  AttnOutputs o({B, s_q, h, kDv}, {B, h, s_q});
  DecodeArgs a;
  a.q = q.view();
  a.kv = cache.view();
  a.block_table = cache.block_table_view();
  a.cache_seqlens = cache.seqlens_view();
  a.softmax_scale = float(deepseek_v32_softmax_scale());
  o.to_reference(a);
  CHECK_OK(mla_decode(a));

  Mirror dq(q), dbt(HostTensor(DType::i32, {B, cache.max_pages})),
      dlen(HostTensor(DType::i32, {B}));
  cudaMemcpy(dbt.mem.get(), cache.block_table.data(), cache.block_table.size() * 4,
             cudaMemcpyHostToDevice);
  cudaMemcpy(dlen.mem.get(), cache.seqlens.data(), B * 4, cudaMemcpyHostToDevice);
  DecodeArgs g = a;
  g.q = dq.view;
  g.kv = kv.gpu;
  g.block_table = dbt.view;
  g.cache_seqlens = dlen.view;
  o.to_gpu(g);
  CHECK_OK(with_workspace([&](size_t* bytes) { return decode_workspace_size(g, {}, bytes); },
                          [&](Workspace ws) { return mla_decode(g, {}, ws); }));
  return compare_attention(o, kDv);
}

// Sparse decode over index lists naming tokens of each request (and -1 entries); the
// bounds of compare_attention (the roundings of dense decode).
Outcome check_sparse_decode(KvFormat format, uint64_t seed) {
  Rng rng(seed);
  const std::vector<int32_t> lengths = {1, 100, 300};
  const int64_t B = 3, s_q = 2, h = 16, topk = 128;
  const PagedKv kv(rng, lengths, format);
  const testing::PagedCache& cache = kv.cache;
  const HostTensor q = testing::random_tensor(rng, DType::bf16, {B, s_q, h, kDqk});
  HostTensor idx(DType::i32, {B, s_q, topk});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < s_q; ++i)
      for (int64_t j = 0; j < topk; ++j) {
        const bool none = j % 7 == 3 || j >= 2 * lengths[b];  // -1 entries, short lists
        idx.set((b * s_q + i) * topk + j,
                none ? -1.0 : double(cache.slot(b, rng.randint(0, lengths[b] - 1))));
      }
  AttnOutputs o({B, s_q, h, kDv}, {B, h, s_q});
  SparseDecodeArgs a;
  a.q = q.view();
  a.kv = cache.view();
  a.indices = idx.view();
  a.softmax_scale = float(deepseek_v32_softmax_scale());
  o.to_reference(a);
  CHECK_OK(sparse_decode(a));

  Mirror dq(q), didx(idx);
  SparseDecodeArgs g = a;
  g.q = dq.view;
  g.kv = kv.gpu;
  g.indices = didx.view;
  o.to_gpu(g);
  CHECK_OK(with_workspace([&](size_t* bytes) { return sparse_workspace_size(g, bytes); },
                          [&](Workspace ws) { return sparse_decode(g, ws); }));
  return compare_attention(o, kDv);
}

// Top-k over random logits: the GPU's lists must equal the reference's exactly (the order
// and tie rule are part of the contract, mla/topk.hpp). Rows shorter than k, an empty row.
Outcome check_topk(uint64_t seed) {
  Rng rng(seed);
  const int64_t R = 4, N = 3000;
  const int32_t k = 128;
  const HostTensor logits = testing::random_tensor(rng, DType::f32, {R, N}, -4, 4);
  HostTensor lens(DType::i32, {R});
  const int32_t L[R] = {3000, 100, 0, 2999};
  for (int64_t r = 0; r < R; ++r) lens.set(r, L[r]);
  HostTensor ref(DType::i32, {R, k}), got(DType::i32, {R, k});
  ref.poison();
  for (int64_t i = 0; i < got.numel(); ++i) got.set(i, -7);  // no legal entry is -7
  TopkArgs a;
  a.logits = logits.view();
  a.lengths = lens.view();
  a.k = k;
  a.indices = ref.view();
  CHECK_OK(topk_indices(a));
  Mirror dl(logits), dlen(lens), dout(got);
  TopkArgs g = a;
  g.logits = dl.view;
  g.lengths = dlen.view;
  g.indices = dout.view;
  CHECK_OK(topk_indices(g));
  if (Outcome s = sync_gpu(); !s.ok) return s;
  dout.mem.to_host(got.storage.data(), nbytes(got));
  for (int64_t i = 0; i < ref.numel(); ++i)
    if (got.get(i) != ref.get(i))
      return fail("indices: entry " + std::to_string(i) + " is " + std::to_string(got.get(i)) +
                  ", the reference says " + std::to_string(ref.get(i)));
  return {true, "4 rows x 3000 (lengths 3000, 100, 0, 2999), k 128: lists identical"};
}

// Causal prefill attention (mha_prefill, d 192/128), two sequences of 130 and 70 tokens
// (not multiples of the 128-key tile); the bounds of compare_attention.
Outcome check_prefill(uint64_t seed) {
  Rng rng(seed);
  const int64_t T = 200, h = 16, dqk = 192, dv = 128;
  const HostTensor q = testing::random_tensor(rng, DType::bf16, {T, h, dqk});
  const HostTensor k = testing::random_tensor(rng, DType::bf16, {T, h, dqk});
  const HostTensor v = testing::random_tensor(rng, DType::bf16, {T, h, dv});
  HostTensor cu(DType::i32, {3});
  cu.set(0, 0), cu.set(1, 130), cu.set(2, T);
  AttnOutputs o({T, h, dv}, {h, T});
  MhaPrefillArgs a;
  a.q = q.view(), a.k = k.view(), a.v = v.view();
  a.cu_seqlens_q = cu.view(), a.cu_seqlens_k = cu.view();
  a.softmax_scale = float(1.0 / std::sqrt(double(dqk)));
  o.to_reference(a);
  CHECK_OK(mha_prefill(a));
  Mirror dq(q), dk(k), dv_(v), dcu(cu);
  MhaPrefillArgs g = a;
  g.q = dq.view, g.k = dk.view, g.v = dv_.view;
  g.cu_seqlens_q = dcu.view, g.cu_seqlens_k = dcu.view;
  o.to_gpu(g);
  CHECK_OK(mha_prefill(g));
  return compare_attention(o, dv);
}

// The report, line by line: each line goes to the result and to `on_line`.
struct Report {
  SelfCheckResult& r;
  const std::function<void(const std::string&)>& on_line;
  void header(std::string l) {
    r.header = std::move(l);
    if (on_line) on_line(r.header);
  }
  void check(SelfCheckItem c) {
    r.checks.push_back(std::move(c));
    if (on_line) on_line(r.checks.back().line());
  }
  void summary(std::string l) {
    r.summary = std::move(l);
    if (on_line) on_line(r.summary);
  }
};

void run(uint64_t seed, Report& rep) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    rep.r.status = kSelfCheckNoGpu;
    // In words (cuda::no_gpu_reason), never the runtime's "driver version is insufficient".
    const char* why = e != cudaSuccess ? cuda::no_gpu_reason(e) : "no CUDA GPU: no device";
    cudaGetLastError();
    rep.header(why ? strf("mla check: %s: nothing to check; the CPU reference needs none", why)
                   : strf("mla check: no CUDA GPU (%s): nothing to check; the CPU reference "
                          "needs none",
                          cudaGetErrorString(e)));
    return;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  rep.header(strf("mla check on GPU 0: %s (sm_%d%d, %d SMs), seed %llu", prop.name, prop.major,
                  prop.minor, prop.multiProcessorCount, (unsigned long long)seed));
  if (prop.major != 9) {
    rep.r.status = kSelfCheckFailed;
    rep.summary(
        strf("mla check: the kernels are built for sm_90a (Hopper); this GPU is sm_%d%d, so "
             "they cannot run here",
             prop.major, prop.minor));
    return;
  }
  struct Check {
    const char* name;
    const char* shape;
    Outcome (*fn)(uint64_t);
  };
  const Check checks[] = {
      {"dense decode, bf16 cache", "B4 h16 s_q2, lengths 1/37/64/300, page 64",
       [](uint64_t s) { return check_decode(KvFormat::bf16, s); }},
      {"dense decode, fp8 cache", "B4 h16 s_q2, lengths 1/37/64/300, page 64",
       [](uint64_t s) { return check_decode(KvFormat::fp8_ds_mla, s); }},
      {"sparse decode, bf16 cache", "B3 h16 s_q2 top-128 with -1 entries",
       [](uint64_t s) { return check_sparse_decode(KvFormat::bf16, s); }},
      {"sparse decode, fp8 cache", "B3 h16 s_q2 top-128 with -1 entries",
       [](uint64_t s) { return check_sparse_decode(KvFormat::fp8_ds_mla, s); }},
      {"top-k", "", check_topk},
      {"prefill attention", "2 sequences (130, 70 tokens) h16 d192/128 causal", check_prefill},
  };
  int failed = 0;
  for (const Check& c : checks) {
    const Outcome r = c.fn(seed);
    failed += !r.ok;
    rep.check({c.name, c.shape, r.ok, r.detail});
  }
  const int total = int(sizeof checks / sizeof checks[0]);
  rep.r.status = failed ? kSelfCheckFailed : kSelfCheckPassed;
  if (failed)
    rep.summary(strf("mla check: %d of %d checks FAILED on %s", failed, total, prop.name));
  else
    rep.summary(
        strf("mla check: all %d checks passed: the kernels agree with the CPU reference on %s",
             total, prop.name));
}
#endif

}  // namespace

std::string SelfCheckItem::line() const {
  return strf("  %-4s %-26s %s%s%s", ok ? "ok" : "FAIL", name.c_str(), shape.c_str(),
              shape.empty() ? "" : ": ", detail.c_str());
}

std::string SelfCheckResult::text() const {
  std::string t = header + "\n";
  for (const SelfCheckItem& c : checks) t += c.line() + "\n";
  if (!summary.empty()) t += summary + "\n";
  return t;
}

SelfCheckResult self_check(uint64_t seed, const std::function<void(const std::string&)>& on_line) {
  SelfCheckResult r;
#ifdef MLA_HAS_CUDA
  Report rep{r, on_line};
  run(seed, rep);
#else
  (void)seed;
  r.status = kSelfCheckNoGpu;
  r.header =
      "mla check: no CUDA GPU support in this build (configured with CUDA off or without nvcc): "
      "nothing to check; the CPU reference needs none";
  if (on_line) on_line(r.header);
#endif
  return r;
}

}  // namespace mla
