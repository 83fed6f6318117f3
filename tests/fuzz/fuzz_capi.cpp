// Fuzz target of the C ABI and the validation layer behind it (issue 20).
//
// Each input is a byte string that picks an operation and builds its
// arguments: shapes near the operation's own (so checks past the shapes are
// reached) with, now and then, one dim, stride, dtype or device changed, a
// null data pointer, an output placed over another buffer, and int tensors
// (block tables, lengths, slots, index lists) filled with anything from random
// bytes to nearly valid values. Every buffer is allocated to the extent its
// view describes (views too large for that get a null pointer), so the
// library is never handed memory it may not touch: any sanitizer finding is a
// library bug. Return codes are not checked: every call must simply return.
//
// Two drivers, one target:
//  - libFuzzer (clang -fsanitize=fuzzer): LLVMFuzzerTestOneInput below;
//  - any compiler: main() feeds pseudo-random byte strings from a seed for a
//    bounded time (mla_fuzz_capi [seconds] [seed]), for CI's ASan+UBSan build.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "mla/c_api.h"

namespace {

class Bytes {
 public:
  Bytes(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }
  uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  // An integer in [0, n).
  uint32_t below(uint32_t n) { return n == 0 ? 0 : byte() % n; }
  bool one_in(uint32_t n) { return below(n) == 0; }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

constexpr int64_t kMaxBufferBytes = 1 << 20;

int dtype_size(int32_t dt) {
  switch (dt) {
    case MLA_DTYPE_F32: return 4;
    case MLA_DTYPE_F64: return 8;
    case MLA_DTYPE_BF16: return 2;
    case MLA_DTYPE_F16: return 2;
    case MLA_DTYPE_E4M3: return 1;
    case MLA_DTYPE_U8: return 1;
    case MLA_DTYPE_I32: return 4;
    case MLA_DTYPE_I64: return 8;
  }
  return 1;
}

// A tensor argument and the buffer behind it.
struct Arg {
  mla_tensor t{};
  std::shared_ptr<std::vector<uint64_t>> buf;
  int64_t bytes = 0;  // what buf holds (0: no buffer, data null or borrowed)
  const mla_tensor* ptr() const { return &t; }
};

class Builder {
 public:
  // Half the inputs are "clean": shapes as the op wants them and int tensors
  // mostly in range, so the calls get past the checks into the references;
  // the other half change dims, strides, dtypes and pointers.
  explicit Builder(Bytes& b) : b_(b), clean_(b.one_in(2)) {}

  // A dim: usually `typical`, sometimes an edge or a hostile value.
  int64_t dim(int64_t typical) {
    if (clean_ || !b_.one_in(6)) return typical;
    static const int64_t edges[] = {0,
                                    1,
                                    2,
                                    3,
                                    63,
                                    64,
                                    65,
                                    576,
                                    int64_t(1) << 31,
                                    int64_t(1) << 32,
                                    -1,
                                    INT64_MAX,
                                    int64_t(1) << 62,
                                    INT64_MIN};
    const uint32_t i = b_.below(sizeof(edges) / sizeof(edges[0]) + 1);
    return i < sizeof(edges) / sizeof(edges[0]) ? edges[i] : int64_t(b_.u64());
  }

  // A contiguous view of `shape` and `dtype`, then perhaps mutated; filled
  // per `fill` (ints: 0 random bytes, 1 small values, 2 values below `hi`).
  Arg tensor(std::initializer_list<int64_t> shape, int32_t dtype, int64_t hi = 64) {
    Arg a;
    a.t.dtype = dtype;
    a.t.device_type = MLA_DEVICE_CPU;
    a.t.ndim = static_cast<int32_t>(shape.size());
    int d = 0;
    for (int64_t s : shape) a.t.shape[d++] = dim(s);
    int64_t stride = 1;
    for (int i = a.t.ndim - 1; i >= 0; --i) {
      a.t.strides[i] = stride;
      if (__builtin_mul_overflow(stride, a.t.shape[i] > 0 ? a.t.shape[i] : 1, &stride)) stride = 1;
    }
    if (!clean_ && b_.one_in(8)) mutate(a.t);
    allocate(a, hi);
    return a;
  }

  // Places `out` over `over`'s buffer when it fits there (an overlap the
  // library must reject; it stays inside memory the caller owns).
  void maybe_alias(Arg& out, const Arg& over) {
    if (!b_.one_in(10) || over.bytes == 0) return;
    const int64_t need = extent_bytes(out.t);
    if (need < 0 || need > over.bytes) return;
    out.t.data = over.buf->data();
    out.buf = over.buf;
    out.bytes = over.bytes;
  }

  int32_t kv_format() {
    return !clean_ && b_.one_in(16) ? int32_t(b_.byte()) : int32_t(b_.below(2));
  }
  float scale() {
    if (clean_) return 0.0625f;
    switch (b_.below(8)) {
      case 0: return 0.f;
      case 1: return -1.f;
      case 2: return __builtin_nanf("");
      case 3: return __builtin_inff();
      default: return 0.0625f;
    }
  }
  Bytes& bytes() { return b_; }
  bool clean() const { return clean_; }

 private:
  void mutate(mla_tensor& t) {
    switch (b_.below(7)) {
      case 0: t.dtype = b_.one_in(4) ? int32_t(b_.byte()) : int32_t(b_.below(8)); break;
      case 1: t.device_type = b_.one_in(2) ? MLA_DEVICE_CUDA : int32_t(b_.byte()); break;
      case 2: t.ndim = b_.one_in(2) ? int32_t(b_.below(8)) - 1 : t.ndim; break;
      case 3:
        if (t.ndim > 0) t.strides[b_.below(uint32_t(t.ndim))] = 0;
        break;
      case 4:
        if (t.ndim > 0) t.strides[b_.below(uint32_t(t.ndim))] = int64_t(b_.u64());
        break;
      case 5:
        if (t.ndim > 0) t.strides[b_.below(uint32_t(t.ndim))] *= -1;
        break;
      default: t.device_id = int32_t(b_.byte());
    }
  }

  // Bytes from the lowest to the highest element the view reaches, or -1 when
  // that does not fit (overflow, negative dims, rank past 6, negative offsets:
  // such a view gets a null pointer).
  static int64_t extent_bytes(const mla_tensor& t) {
    if (t.ndim < 0 || t.ndim > MLA_MAX_DIMS) return -1;
    int64_t hi = 0;
    for (int d = 0; d < t.ndim; ++d) {
      if (t.shape[d] < 0) return -1;
      if (t.shape[d] == 0) return 0;
    }
    for (int d = 0; d < t.ndim; ++d) {
      int64_t span;
      if (t.strides[d] < 0 || __builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &span) ||
          __builtin_add_overflow(hi, span, &hi))
        return -1;
    }
    int64_t count, bytes;
    if (__builtin_add_overflow(hi, int64_t(1), &count) ||
        __builtin_mul_overflow(count, int64_t(dtype_size(t.dtype)), &bytes))
      return -1;
    return bytes;
  }

  void allocate(Arg& a, int64_t hi) {
    const int64_t bytes = extent_bytes(a.t);
    if (bytes < 0 || bytes > kMaxBufferBytes || (!clean_ && b_.one_in(32))) {
      a.t.data = nullptr;
      return;
    }
    a.buf = std::make_shared<std::vector<uint64_t>>(size_t(bytes / 8 + 2));
    a.bytes = bytes;
    a.t.data = a.buf->data();
    auto* p = reinterpret_cast<uint8_t*>(a.buf->data());
    const bool is_int = a.t.dtype == MLA_DTYPE_I32 || a.t.dtype == MLA_DTYPE_I64;
    const uint32_t mode = clean_ && !b_.one_in(4) ? 2 : b_.below(3);
    uint64_t s = b_.u64() | 1;
    auto next = [&] {  // xorshift: cheap filler, seeded from the input
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      return s;
    };
    if (!is_int || mode == 0) {
      for (int64_t i = 0; i < bytes; ++i) p[i] = uint8_t(next());
      if (!is_int && a.t.dtype != MLA_DTYPE_U8 && mode != 0) {
        // Floats: mostly small finite values (random bytes are often NaN/huge).
        const int es = dtype_size(a.t.dtype);
        for (int64_t i = 0; i + es <= bytes; i += es) {
          const float f = float(int64_t(next() % 2001) - 1000) / 1000.f;
          if (a.t.dtype == MLA_DTYPE_F32) std::memcpy(p + i, &f, 4);
          if (a.t.dtype == MLA_DTYPE_F64) {
            const double v = f;
            std::memcpy(p + i, &v, 8);
          }
          if (a.t.dtype == MLA_DTYPE_BF16) {
            uint32_t u;
            std::memcpy(&u, &f, 4);
            const uint16_t h = uint16_t(u >> 16);
            std::memcpy(p + i, &h, 2);
          }
        }
      }
      return;
    }
    const int es = dtype_size(a.t.dtype);
    for (int64_t i = 0; i + es <= bytes; i += es) {
      const int64_t v = mode == 1 ? int64_t(next() % 131) - 2 : int64_t(next() % uint64_t(hi + 1));
      if (es == 4) {
        const int32_t w = int32_t(v);
        std::memcpy(p + i, &w, 4);
      } else {
        std::memcpy(p + i, &v, 8);
      }
    }
  }

  Bytes& b_;
  bool clean_;
};

constexpr int32_t F32 = MLA_DTYPE_F32, BF16 = MLA_DTYPE_BF16, I32 = MLA_DTYPE_I32,
                  I64 = MLA_DTYPE_I64, U8 = MLA_DTYPE_U8, E4M3 = MLA_DTYPE_E4M3;

// The paged latent cache of `fmt` ([pages, page, 1, 576] bf16 or [.., 656] u8).
Arg cache(Builder& g, int32_t fmt, int64_t pages, int64_t page) {
  return fmt == MLA_KV_FP8_DS_MLA ? g.tensor({pages, page, 1, 656}, U8)
                                  : g.tensor({pages, page, 1, 576}, BF16);
}

constexpr int kOps = 18;
// Per operation: inputs run, and how many of them the last call accepted (a
// fuzzer that never gets past the checks tests only the checks).
uint64_t g_runs[kOps], g_accepted[kOps];

uint32_t run_one(Bytes& in) {
  Builder g(in);
  Bytes& b = g.bytes();
  const uint32_t op = b.below(kOps);
  const int64_t B = 1 + b.below(3), s_q = 1 + b.below(2), h = 1 + b.below(4);
  const int64_t pages = 1 + b.below(4), page = 1 + b.below(64), mp = 1 + b.below(3);
  const int32_t fmt = g.kv_format();
  switch (op) {
    case 0:
    case 1: {  // dense decode and its workspace size
      Arg q = g.tensor({B, s_q, h, 576}, b.one_in(2) ? F32 : BF16);
      Arg kv = cache(g, fmt, pages, page);
      Arg bt = g.tensor({B, mp}, I32, pages);
      Arg sl = g.tensor({B}, I32, mp * page);
      Arg out = g.tensor({B, s_q, h, 512}, F32), lse = g.tensor({B, h, s_q}, F32);
      g.maybe_alias(out, kv);
      g.maybe_alias(lse, out);
      size_t bytes = 0;
      if (op == 0)
        mla_decode_workspace_size(q.ptr(), kv.ptr(), fmt, bt.ptr(), sl.ptr(), g.scale(),
                                  b.byte() & 1, out.ptr(), lse.ptr(), 0, &bytes);
      else
        mla_decode(q.ptr(), kv.ptr(), fmt, bt.ptr(), sl.ptr(), g.scale(), b.byte() & 1, out.ptr(),
                   lse.ptr(), 0, nullptr, 0, nullptr);
      break;
    }
    case 2: {  // partial decode
      Arg q = g.tensor({B, s_q, h, 576}, F32);
      Arg kv = cache(g, fmt, pages, page);
      Arg bt = g.tensor({B, mp}, I32, pages);
      Arg sl = g.tensor({B}, I32, mp * page);
      Arg lo = g.tensor({B}, I32, page), hi = g.tensor({B}, I32, mp * page);
      Arg out = g.tensor({B, s_q, h, 512}, F32), lse = g.tensor({B, h, s_q}, F32);
      g.maybe_alias(out, q);
      mla_decode_partial(q.ptr(), kv.ptr(), fmt, bt.ptr(), sl.ptr(), g.scale(), 1, lo.ptr(),
                         hi.ptr(), out.ptr(), lse.ptr(), nullptr);
      break;
    }
    case 3: {  // merge
      const int64_t S = 1 + b.below(3), R = 1 + b.below(8), D = 1 + b.below(64);
      Arg po = g.tensor({S, R, D}, F32), pl = g.tensor({S, R}, F32);
      Arg out = g.tensor({R, D}, F32), lse = g.tensor({R}, F32);
      g.maybe_alias(out, po);
      g.maybe_alias(lse, out);
      mla_merge_attn_partials(po.ptr(), pl.ptr(), out.ptr(), lse.ptr(), nullptr);
      break;
    }
    case 4: {  // sparse decode
      const int64_t k = 1 + b.below(80);
      Arg q = g.tensor({B, s_q, h, 576}, F32);
      Arg kv = cache(g, fmt, pages, page);
      Arg idx = g.tensor({B, s_q, k}, I32, pages * page);
      Arg tl = g.tensor({B}, I32, k);
      Arg out = g.tensor({B, s_q, h, 512}, F32), lse = g.tensor({B, h, s_q}, F32);
      g.maybe_alias(out, kv);
      mla_sparse_decode(q.ptr(), kv.ptr(), fmt, idx.ptr(), b.one_in(2) ? tl.ptr() : nullptr,
                        g.scale(), out.ptr(), lse.ptr(), nullptr);
      break;
    }
    case 5: {  // sparse prefill
      const int64_t sq = b.below(5), skv = b.below(70), k = 1 + b.below(70);
      Arg q = g.tensor({sq, h, 576}, F32), kv = g.tensor({skv, 576}, F32);
      Arg idx = g.tensor({sq, k}, I32, skv);
      Arg out = g.tensor({sq, h, 512}, F32), lse = g.tensor({sq, h}, F32);
      g.maybe_alias(out, kv);
      mla_sparse_prefill(q.ptr(), kv.ptr(), MLA_KV_BF16, idx.ptr(), nullptr, g.scale(), out.ptr(),
                         lse.ptr(), nullptr);
      break;
    }
    case 6: {  // top-k
      const int64_t R = b.below(6), N = b.below(300);
      const int32_t k = b.one_in(8) ? int32_t(b.u64()) : 64 * int32_t(1 + b.below(3));
      Arg lg = g.tensor({R, N}, F32), len = g.tensor({R}, I32, N);
      Arg idx = g.tensor({R, k}, I32);
      Arg bt = g.tensor({R, mp}, I32, pages);
      g.maybe_alias(idx, lg);
      const bool tr = b.one_in(2);
      mla_topk_indices(lg.ptr(), b.one_in(2) ? len.ptr() : nullptr, k, idx.ptr(),
                       tr ? bt.ptr() : nullptr, int32_t(g.dim(page)), int32_t(g.dim(1)),
                       b.one_in(2) ? -1 : g.dim(pages), nullptr);
      break;
    }
    case 7: {  // indexer logits, decode
      const int64_t ip = 1 + b.below(3), ml = b.below(200);
      Arg q8 = g.tensor({B, s_q, 64, 128}, E4M3), w = g.tensor({B, s_q, 64}, F32);
      Arg c = g.tensor({ip, 8448}, U8);
      Arg bt = g.tensor({B, mp}, I32, ip), sl = g.tensor({B}, I32, ml);
      Arg lg = g.tensor({B, s_q, ml}, F32);
      g.maybe_alias(lg, c);
      mla_indexer_logits_decode(q8.ptr(), w.ptr(), c.ptr(), bt.ptr(), sl.ptr(), lg.ptr(), nullptr);
      break;
    }
    case 8: {  // indexer logits, prefill
      const int64_t T = b.below(3), N = b.below(100);
      Arg q8 = g.tensor({T, 64, 128}, E4M3), w = g.tensor({T, 64}, F32);
      Arg k8 = g.tensor({N, 128}, E4M3), ks = g.tensor({N}, F32);
      Arg k0 = g.tensor({T}, I32, N), k1 = g.tensor({T}, I32, N);
      Arg lg = g.tensor({T, N}, F32);
      g.maybe_alias(lg, k8);
      mla_indexer_logits_prefill(q8.ptr(), w.ptr(), k8.ptr(), ks.ptr(), k0.ptr(), k1.ptr(),
                                 lg.ptr(), nullptr);
      break;
    }
    case 9:
    case 10: {  // append / read the latent cache
      const int64_t T = b.below(5);
      Arg kv = cache(g, fmt, pages, page);
      Arg sl = g.tensor({T}, I64, pages * page);
      Arg c = g.tensor({T, 512}, F32), r = g.tensor({T, 64}, F32);
      if (op == 9) {
        g.maybe_alias(kv, c);
        mla_append_kv(c.ptr(), r.ptr(), sl.ptr(), kv.ptr(), fmt, nullptr);
      } else {
        g.maybe_alias(c, kv);
        mla_read_kv(kv.ptr(), fmt, sl.ptr(), c.ptr(), r.ptr(), nullptr);
      }
      break;
    }
    case 11: {  // indexer keys and queries
      const int64_t T = b.below(5), ip = 1 + b.below(2);
      Arg keys = g.tensor({T, 128}, F32), sl = g.tensor({T}, I64, ip * 64);
      Arg c = g.tensor({ip, 8448}, U8);
      mla_append_indexer_keys(keys.ptr(), sl.ptr(), c.ptr(), nullptr);
      Arg q = g.tensor({T, 64, 128}, F32), w = g.tensor({T, 64}, F32);
      Arg q8 = g.tensor({T, 64, 128}, E4M3), wf = g.tensor({T, 64}, F32);
      g.maybe_alias(wf, w);
      mla_quantize_indexer_query(q.ptr(), w.ptr(), q8.ptr(), wf.ptr(), nullptr);
      break;
    }
    case 12:
    case 13: {  // the DSA step
      const int64_t ip = 1 + b.below(3);
      const int64_t max_seqlen = b.one_in(4) ? int64_t(b.u64()) : int64_t(b.below(200));
      Arg q = g.tensor({B, s_q, 16, 576}, F32);
      Arg kv = cache(g, fmt, pages, 64);
      Arg bt = g.tensor({B, mp}, I32, pages), sl = g.tensor({B}, I32, 64 * mp);
      Arg q8 = g.tensor({B, s_q, 64, 128}, E4M3), w = g.tensor({B, s_q, 64}, F32);
      Arg c = g.tensor({ip, 8448}, U8), ibt = g.tensor({B, mp}, I32, ip);
      Arg out = g.tensor({B, s_q, 16, 512}, F32), lse = g.tensor({B, 16, s_q}, F32);
      g.maybe_alias(out, c);
      mla_dsa_policy pol;
      mla_dsa_default_policy(&pol);
      pol.topk = b.one_in(4) ? int32_t(b.u64()) : 64;
      pol.path = int32_t(b.below(4));
      pol.dense_below = b.one_in(4) ? int64_t(b.u64()) : 0;
      size_t bytes = 0;
      const int32_t rc = mla_dsa_decode_workspace_size(
          q.ptr(), kv.ptr(), fmt, bt.ptr(), sl.ptr(), max_seqlen, q8.ptr(), w.ptr(), c.ptr(),
          b.one_in(2) ? ibt.ptr() : nullptr, g.scale(), out.ptr(), lse.ptr(), &pol, &bytes);
      std::vector<uint8_t> ws(rc == MLA_OK && bytes <= size_t(kMaxBufferBytes) ? bytes : 64);
      if (op == 13)
        mla_dsa_decode(q.ptr(), kv.ptr(), fmt, bt.ptr(), sl.ptr(), max_seqlen, q8.ptr(), w.ptr(),
                       c.ptr(), b.one_in(2) ? ibt.ptr() : nullptr, g.scale(), out.ptr(), lse.ptr(),
                       &pol, ws.data(), ws.size(), nullptr);
      break;
    }
    case 14: {  // non-absorbed prefill
      const int64_t T = b.below(6), Tk = b.below(8), d = 1 + b.below(16), dv = 1 + b.below(16);
      Arg q = g.tensor({T, h, d}, F32), k = g.tensor({Tk, h, d}, F32),
          v = g.tensor({Tk, h, dv}, F32);
      Arg cq = g.tensor({2}, I32, T), ck = g.tensor({2}, I32, Tk);
      Arg out = g.tensor({T, h, dv}, F32), lse = g.tensor({h, T}, F32);
      g.maybe_alias(out, v);
      mla_mha_prefill(q.ptr(), k.ptr(), v.ptr(), cq.ptr(), ck.ptr(), g.scale(), b.byte() & 1,
                      out.ptr(), lse.ptr(), nullptr);
      break;
    }
    case 15: {  // rope, block-sparse selection
      const int64_t T = b.below(5);
      Arg x = g.tensor({T, h, 64}, F32), pos = g.tensor({T}, I64, 100000);
      Arg out = g.tensor({T, h, 64}, F32);
      g.maybe_alias(out, x);
      mla_rope_config rc;
      mla_rope_default_config(&rc);
      if (b.one_in(4)) rc.factor = double(int64_t(b.u64()));
      mla_apply_rope(x.ptr(), pos.ptr(), out.ptr(), &rc, int32_t(b.below(3)), nullptr);
      mla_block_sparse_params p;
      mla_block_sparse_default_params(&p);
      if (!g.clean() && b.one_in(2)) {
        p.initial_blocks = int32_t(b.u64());
        p.num_selected_blocks = int32_t(b.u64());
      }
      Arg q = g.tensor({B, s_q, h, 576}, F32);
      Arg kv = cache(g, fmt, pages, page);
      Arg bt = g.tensor({B, mp}, I32, pages), sl = g.tensor({B}, I32, mp * page);
      Arg idx = g.tensor({B, s_q, 2048}, I32), ns = g.tensor({B, s_q}, I32);
      g.maybe_alias(idx, kv);
      mla_block_sparse_select(q.ptr(), kv.ptr(), fmt, bt.ptr(), sl.ptr(), &p, idx.ptr(), ns.ptr(),
                              nullptr);
      break;
    }
    case 16: {  // the prefill select (indexer + top-k) and its workspace size
      const int64_t T = b.below(3), N = b.below(100);
      const int32_t k = b.one_in(8) ? int32_t(b.u64()) : 64 * int32_t(1 + b.below(2));
      const int32_t order = b.one_in(8) ? int32_t(b.u64()) : int32_t(b.below(2));
      const int32_t path = b.one_in(8) ? int32_t(b.u64()) : int32_t(b.below(3));
      const int64_t capacity = b.one_in(8) ? int64_t(b.u64()) : int64_t(b.below(300));
      Arg q8 = g.tensor({T, 64, 128}, E4M3), w = g.tensor({T, 64}, F32);
      Arg k8 = g.tensor({N, 128}, E4M3), ks = g.tensor({N}, F32);
      Arg k0 = g.tensor({T}, I32, N), k1 = g.tensor({T}, I32, N);
      Arg idx = g.tensor({T, k}, I32);
      g.maybe_alias(idx, k8);
      size_t bytes = 0;
      mla_indexer_select_prefill_workspace_size(q8.ptr(), w.ptr(), k8.ptr(), ks.ptr(), k0.ptr(),
                                                k1.ptr(), k, order, path, capacity, idx.ptr(),
                                                &bytes);
      mla_indexer_select_prefill(q8.ptr(), w.ptr(), k8.ptr(), ks.ptr(), k0.ptr(), k1.ptr(), k,
                                 order, path, capacity, idx.ptr(), nullptr, 0, nullptr);
      break;
    }
    default: {  // plain structs: layer shapes, transfer plans
      mla_layer_config c;
      mla_layer_small_test_config(&c);
      if (b.one_in(2)) c.heads = int32_t(b.u64());
      if (b.one_in(2)) c.d_nope = int32_t(b.u64());
      if (b.one_in(2)) c.hidden = int64_t(b.u64());
      const char* name = nullptr;
      int32_t nd = 0;
      int64_t shape[3];
      mla_layer_weight_shape(&c, int32_t(b.below(14)), &name, &nd, shape);
      int32_t ids[4] = {0, 1, 2, 3};
      for (int32_t& v : ids) v = b.one_in(4) ? int32_t(b.u64()) : v;
      mla_transfer_request r{};
      r.first_token = b.one_in(4) ? int64_t(b.u64()) : b.below(100);
      r.num_tokens = b.one_in(4) ? int64_t(b.u64()) : b.below(200);
      r.num_layers = b.one_in(4) ? int32_t(b.u64()) : int32_t(1 + b.below(3));
      for (mla_transfer_side* s : {&r.src_latent, &r.dst_latent}) {
        s->pages = ids;
        s->num_page_ids = 4;
        s->num_pages = g.dim(4);
        s->page_size = g.dim(64);
        s->page_stride = b.one_in(4) ? int64_t(b.u64()) : 0;
        s->layer_stride = b.one_in(4) ? int64_t(b.u64()) : 0;
      }
      mla_copy_run runs[8];
      int64_t lb[8];
      mla_transfer_plan_info info;
      mla_plan_transfer(&r, runs, 8, lb, 8, &info);
      break;
    }
  }
  return op;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  const uint32_t op = run_one(in);
  ++g_runs[op];
  if (mla_last_error_message()[0] == '\0') ++g_accepted[op];
  return 0;
}

#ifndef MLA_LIBFUZZER
// mla_fuzz_capi [seconds = 60] [seed = 1]: random inputs for a bounded time.
int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 60.0;
  uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> input(256);
  uint64_t runs = 0;
  for (;;) {
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (t >= seconds) break;
    for (uint8_t& c : input) {  // splitmix64 bytes
      uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      c = uint8_t(z ^ (z >> 31));
    }
    const auto t0 = std::chrono::steady_clock::now();
    LLVMFuzzerTestOneInput(input.data(), input.size());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > 1.0)  // a slow input is a finding too (a size the checks let through)
      std::printf("mla_fuzz_capi: input %llu (op byte %u) took %.1f s\n",
                  static_cast<unsigned long long>(runs), unsigned(input[0]), dt);
    ++runs;
  }
  std::printf("mla_fuzz_capi: %llu inputs in %.0f s, no sanitizer finding; accepted/run by op:",
              static_cast<unsigned long long>(runs), seconds);
  for (int op = 0; op < kOps; ++op)
    std::printf(" %d:%llu/%llu", op, static_cast<unsigned long long>(g_accepted[op]),
                static_cast<unsigned long long>(g_runs[op]));
  std::printf("\n");
  return 0;
}
#endif
