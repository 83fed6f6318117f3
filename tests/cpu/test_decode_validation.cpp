// Every bad input of the dense-decode entry points gives the right Errc and a
// message naming the argument and the bad value.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/decode_problem.hpp"
#include "common/expect_status.hpp"
#include "common/random.hpp"
#include "mla/decode.hpp"

namespace mla {
namespace {

using testing::expect_error;
using Row = testing::BadRow<DecodeArgs>;

using testing::DecodeProblem;
using testing::DecodeShape;
using testing::HostTensor;
using testing::Rng;

// A valid problem and its outputs; each test breaks one thing.
struct Fixture {
  DecodeProblem p;
  HostTensor out, lse;
  explicit Fixture(DecodeShape s = default_shape()) {
    Rng rng(42);
    p = testing::make_decode_problem(rng, s);
    out = p.make_out(DType::f32);
    lse = p.make_lse(DType::f32);
  }
  static DecodeShape default_shape() {
    DecodeShape s;
    s.s_q = 2;
    s.h_q = 16;
    s.lengths = {5, 40, 0};
    s.cache.page_size = 16;
    return s;
  }
  DecodeArgs args() const { return p.args(p.q, out, lse); }
};

// Each row against a fresh Fixture's valid arguments.
void expect_decode_errors(const std::vector<Row>& rows) {
  Fixture f;
  testing::expect_errors(
      f.args(), [](const DecodeArgs& a) { return mla_decode(a); }, rows);
}

TEST(DecodeValidation, ValidInputPasses) {
  Fixture f;
  Status st = mla_decode(f.args());
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(DecodeValidation, QueryShapeDtypeStride) {
  expect_decode_errors({
      Row(Errc::invalid_shape, {"q", "512", "576"}, [](auto& a) { a.q.shape[3] = 512; }),
      // a valid empty step (test_bad_inputs.cpp), but out is not [B, 0, ...]
      Row(Errc::invalid_shape, {"out", "dim 1 is 2, expected 0"},
          [](auto& a) { a.q.shape[1] = 0; }),
      Row(Errc::invalid_shape, {"q", "3 dims"}, [](auto& a) { a.q.ndim = 3; }),
      Row(Errc::invalid_dtype, {"q", "i32"}, [](auto& a) { a.q.dtype = DType::i32; }),
      Row(Errc::invalid_stride, {"q", "stride of dim 3 is 2"}, [](auto& a) { a.q.strides[3] = 2; }),
      Row(Errc::invalid_shape, {"q", "not given"}, [](auto& a) { a.q = TensorView{}; }),
  });
}

TEST(DecodeValidation, OutputShapesAndDtypes) {
  expect_decode_errors({
      Row(Errc::invalid_shape, {"out", "576"}, [](auto& a) { a.out.shape[3] = 576; }),
      Row(Errc::invalid_dtype, {"out", "i32"}, [](auto& a) { a.out.dtype = DType::i32; }),
      // [B, s_q, h_q] instead of [B, h_q, s_q]
      Row(Errc::invalid_shape, {"lse", "[3, 2, 16]", "h_q"},
          [](auto& a) {
            a.lse.shape[1] = 2;
            a.lse.shape[2] = 16;
          }),
      Row(Errc::invalid_dtype, {"lse", "bf16"}, [](auto& a) { a.lse.dtype = DType::bf16; }),
  });
}

TEST(DecodeValidation, BlockTableAndSeqlensShapes) {
  expect_decode_errors({
      Row(Errc::invalid_shape, {"block_table", "4"}, [](auto& a) { a.block_table.shape[0] = 4; }),
      Row(Errc::invalid_dtype, {"block_table", "i64"},
          [](auto& a) { a.block_table.dtype = DType::i64; }),
      Row(Errc::invalid_shape, {"cache_seqlens", "[2]"},
          [](auto& a) { a.cache_seqlens.shape[0] = 2; }),
      Row(Errc::invalid_dtype, {"cache_seqlens", "f32"},
          [](auto& a) { a.cache_seqlens.dtype = DType::f32; }),
  });
}

TEST(DecodeValidation, CacheIsValidated) {
  expect_decode_errors({
      // bf16 format over byte data
      Row(Errc::invalid_dtype, {"kv", "u8"}, [](auto& a) { a.kv.data.dtype = DType::u8; }),
      Row(Errc::invalid_shape, {"kv", "656"}, [](auto& a) { a.kv.data.shape[3] = 656; }),
  });
}

TEST(DecodeValidation, SoftmaxScale) {
  Fixture f;
  for (float bad : {0.f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    DecodeArgs a = f.args();
    a.softmax_scale = bad;
    expect_error(mla_decode(a), Errc::invalid_value,
                 {"softmax_scale", fmt::format("{}", bad).c_str()});
  }
}

TEST(DecodeValidation, DevicesMustMatch) {
  expect_decode_errors({
      Row(Errc::invalid_device, {"out", "cuda:0", "cpu:0"},
          [](auto& a) { a.out.device = Device::cuda(0); }),
      Row(Errc::invalid_device, {"block_table", "cuda:1"},
          [](auto& a) { a.block_table.device = Device::cuda(1); }),
      Row(Errc::invalid_device, {"q", "7"},
          [](auto& a) { a.q.device.type = static_cast<DeviceType>(7); }),
  });
}

// The example of the standards, verbatim: a page id past the pool.
TEST(DecodeValidation, BlockTableEntryPastThePool) {
  DecodeShape s = Fixture::default_shape();
  s.cache.page_size = 1;
  s.lengths = {1, 2, 3, 8};
  s.cache.spare_pages = 900 - 14;  // 14 pages in use: the pool holds 900
  Fixture f(s);
  ASSERT_EQ(f.p.cache.num_pages, 900);
  f.p.cache.block_table[3 * f.p.cache.max_pages + 7] = 912;
  expect_error(mla_decode(f.args()), Errc::out_of_range,
               {"block_table[3][7] = 912 is past num_pages = 900"});
  f.p.cache.block_table[3 * f.p.cache.max_pages + 7] = 900;
  expect_error(mla_decode(f.args()), Errc::out_of_range, {"block_table[3][7] = 900"});
  f.p.cache.block_table[3 * f.p.cache.max_pages + 7] = -1;
  expect_error(mla_decode(f.args()), Errc::out_of_range, {"block_table[3][7] = -1 is negative"});
}

// Entries past the pages a request reads are never looked at (engines leave
// garbage there): the fixture's block tables hold -1 and huge ids in them.
TEST(DecodeValidation, UnusedBlockTableEntriesAreIgnored) {
  Fixture f;
  const auto& c = f.p.cache;
  ASSERT_TRUE(c.block_table[2 * c.max_pages + 0] < 0 ||
              c.block_table[2 * c.max_pages + 0] >= c.num_pages)
      << "request 2 has length 0: its row must hold only garbage";
  Status st = mla_decode(f.args());
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(DecodeValidation, SeqlensNegativeOrPastCapacity) {
  Fixture f;
  f.p.cache.seqlens[1] = -3;
  expect_error(mla_decode(f.args()), Errc::out_of_range, {"cache_seqlens[1] = -3 is negative"});
  const int64_t cap = f.p.cache.max_pages * 16;
  f.p.cache.seqlens[1] = int32_t(cap + 1);
  expect_error(mla_decode(f.args()), Errc::out_of_range,
               {fmt::format("cache_seqlens[1] = {} is past the capacity", cap + 1).c_str(),
                fmt::format("= {}", cap).c_str()});
}

// CUDA tensors: the checks that need no data still run (the kernel's
// constraints), and fail before anything touches the (host) pointers.
TEST(DecodeValidation, CudaConstraints) {
  DecodeShape s = Fixture::default_shape();
  s.h_q = 24;
  Fixture f(s);
  HostTensor qb = testing::convert(f.p.q, DType::bf16);
  DecodeArgs a = f.p.args(qb, f.out, f.lse, Device::cuda(0));
  expect_error(mla_decode(a), Errc::unsupported, {"h_q = 24"});
  Fixture g;
  HostTensor qg = testing::convert(g.p.q, DType::bf16);
  a = g.p.args(qg, g.out, g.lse, Device::cuda(0));
  a.q.shape[1] = kCudaDecodeMaxSq + 1;
  a.out.shape[1] = kCudaDecodeMaxSq + 1;
  a.lse.shape[2] = kCudaDecodeMaxSq + 1;
  const std::string too_many = "s_q = " + std::to_string(kCudaDecodeMaxSq + 1);
  expect_error(mla_decode(a), Errc::unsupported, {too_many.c_str()});
  a = g.p.args(g.p.q, g.out, g.lse, Device::cuda(0));  // f64 q: CPU only
  expect_error(mla_decode(a), Errc::invalid_dtype, {"q", "f64"});
  a = g.p.args(qg, g.out, g.lse, Device::cuda(0));
  a.q.data = static_cast<char*>(a.q.data) + 2;
  expect_error(mla_decode(a), Errc::misaligned, {"q", "16-byte"});
}

TEST(DecodeValidation, WorkspaceSize) {
  Fixture f;
  size_t bytes = 123;
  DecodeArgs a = f.args();
  a.q.data = nullptr;  // the query reads shapes only
  a.out.data = nullptr;
  Status st = decode_workspace_size(a, {}, &bytes);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(bytes, 0u);
  expect_error(decode_workspace_size(a, {}, nullptr), Errc::invalid_value, {"bytes"});
  a.q.shape[3] = 100;
  expect_error(decode_workspace_size(a, {}, &bytes), Errc::invalid_shape, {"q", "100"});
}

TEST(DecodeValidation, PartialRanges) {
  Fixture f;
  HostTensor begin(DType::i32, {3}), end(DType::i32, {3});
  for (int b = 0; b < 3; ++b) end.set(b, f.p.shape.lengths[b]);
  DecodePartialArgs pa;
  pa.base = f.args();
  pa.kv_begin = begin.view();
  pa.kv_end = end.view();
  Status st = mla_decode_partial(pa);
  ASSERT_TRUE(st.ok()) << st.to_string();

  end.set(1, 41);
  expect_error(mla_decode_partial(pa), Errc::out_of_range,
               {"kv_end[1] = 41 is past cache_seqlens[1] = 40"});
  end.set(1, 10);
  begin.set(1, 11);
  expect_error(mla_decode_partial(pa), Errc::out_of_range,
               {"kv_end[1] = 10 is before kv_begin[1] = 11"});
  begin.set(1, -2);
  expect_error(mla_decode_partial(pa), Errc::out_of_range, {"kv_begin[1] = -2 is negative"});
  begin.set(1, 0);
  HostTensor out_bf16 = f.p.make_out(DType::bf16);
  pa.base.out = out_bf16.view();
  expect_error(mla_decode_partial(pa), Errc::invalid_dtype, {"out", "bf16"});
  pa.base = f.args();
  pa.kv_end.shape[0] = 2;
  expect_error(mla_decode_partial(pa), Errc::invalid_shape, {"kv_end", "[2]"});
}

TEST(DecodeValidation, MergeShapes) {
  Rng rng(1);
  HostTensor po = testing::random_tensor(rng, DType::f32, {2, 4, 8});
  HostTensor pl = testing::random_tensor(rng, DType::f32, {2, 4});
  HostTensor out(DType::f32, {4, 8}), lse(DType::f32, {4});
  MergeArgs m{po.view(), pl.view(), out.view(), lse.view()};
  EXPECT_TRUE(merge_attn_partials(m).ok());

  const std::vector<testing::BadRow<MergeArgs>> rows = {
      testing::BadRow<MergeArgs>(Errc::invalid_shape, {"out", "[4, 9]", "[4, 8]"},
                                 [](auto& b) { b.out.shape[1] = 9; }),
      testing::BadRow<MergeArgs>(Errc::invalid_shape, {"partial_lse", "S = 0"},
                                 [](auto& b) {
                                   b.partial_lse.shape[0] = 0;
                                   b.partial_out.shape[0] = 0;
                                 }),
      testing::BadRow<MergeArgs>(Errc::invalid_shape, {"partial_out", "[2, 3, 8]"},
                                 [](auto& b) { b.partial_out.shape[1] = 3; }),
      testing::BadRow<MergeArgs>(Errc::invalid_dtype, {"partial_lse", "bf16"},
                                 [](auto& b) { b.partial_lse.dtype = DType::bf16; }),
      testing::BadRow<MergeArgs>(Errc::invalid_device, {"lse"},
                                 [](auto& b) { b.lse.device = Device::cuda(0); }),
      testing::BadRow<MergeArgs>(Errc::invalid_stride, {"partial_out", "-1"},
                                 [](auto& b) { b.partial_out.strides[2] = -1; }),
  };
  testing::expect_errors(
      m, [](const MergeArgs& b) { return merge_attn_partials(b); }, rows);
}

}  // namespace
}  // namespace mla

// ---- DecodePlan (plan reuse): the host-visible misuse checks ----
namespace mla {
namespace {

TEST(DecodePlanValidation, CpuPlanIsARecordAndIsReused) {
  Fixture f;
  DecodePlan plan;
  Status st = decode_plan(f.args(), {}, {}, &plan);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(plan.device, -1);
  EXPECT_EQ(plan.batch, 3);
  EXPECT_EQ(plan.s_q, 2);
  EXPECT_EQ(plan.h_q, 16);
  EXPECT_FALSE(plan.sparse);
  EXPECT_EQ(plan.data, nullptr);
  EXPECT_EQ(plan.capacity, f.args().block_table.shape[1] * 16);
  DecodeOptions o;
  o.plan = &plan;
  st = mla_decode(f.args(), o);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(DecodePlanValidation, PlanForOtherShapesOrModeIsRefused) {
  Fixture f;
  DecodePlan plan;
  ASSERT_TRUE(decode_plan(f.args(), {}, {}, &plan).ok());
  DecodeOptions o;
  o.plan = &plan;
  DecodeShape s = Fixture::default_shape();
  s.lengths = {5, 40};
  Fixture g(s);
  expect_error(mla_decode(g.args(), o), Errc::invalid_value, {"opts.plan", "B 3", "B 2"});
  s = Fixture::default_shape();
  s.h_q = 32;
  Fixture h(s);
  expect_error(mla_decode(h.args(), o), Errc::invalid_value, {"opts.plan", "h_q 16", "h_q 32"});
  s = Fixture::default_shape();
  s.s_q = 1;
  Fixture k(s);
  expect_error(mla_decode(k.args(), o), Errc::invalid_value, {"opts.plan", "s_q 2", "s_q 1"});
  o.batch_invariant = true;
  expect_error(mla_decode(f.args(), o), Errc::invalid_value, {"opts.plan", "batch_invariant"});
  DecodePlan sparse = plan;
  sparse.sparse = true;
  DecodeOptions so;
  so.plan = &sparse;
  expect_error(mla_decode(f.args(), so), Errc::invalid_value, {"opts.plan", "sparse"});
  DecodePlan gpu = plan;
  gpu.device = 0;
  so.plan = &gpu;
  expect_error(mla_decode(f.args(), so), Errc::invalid_value, {"opts.plan", "cuda:0", "CPU"});
  // A narrower block table than the plan's: a planned length could be past it.
  DecodeArgs narrow = f.args();
  narrow.block_table.shape[1] -= 1;
  o.batch_invariant = false;
  expect_error(mla_decode(narrow, o), Errc::invalid_value, {"opts.plan", "block table"});
  // A plan is made without one, and into a non-null record.
  DecodeOptions with;
  with.plan = &plan;
  DecodePlan again;
  expect_error(decode_plan(f.args(), with, {}, &again), Errc::invalid_value, {"opts.plan"});
  expect_error(decode_plan(f.args(), {}, {}, nullptr), Errc::invalid_value, {"plan"});
}

}  // namespace
}  // namespace mla
