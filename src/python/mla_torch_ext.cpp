// mla._torch_ext: the eager hot path of a decode on torch CUDA tensors, in C++.
//
// mla._ext reads a torch tensor through Python attributes (five per tensor); on a
// decode call that is most of the host cost. Built against one torch version
// (scripts/build_torch_ext.sh, beside libmla.so), this module reads at::Tensor
// directly, allocates out / lse with at::empty, takes the current CUDA stream from
// c10, keeps one workspace per (device, stream) outside graph capture, and calls
// the C ABI: the same checks, in one C++ pass. mla/_call.py uses it when it was
// built for the running torch's major.minor, and mla._ext otherwise.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/masked_fill.h>
#include <ATen/ops/nan_to_num.h>
#include <Python.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>
#include <torch/version.h>

#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "ext_common.hpp"
#include "mla/c_api.h"

namespace {

using DecodeFn = int32_t (*)(const mla_tensor*, const mla_tensor*, int32_t, const mla_tensor*,
                             const mla_tensor*, float, int32_t, const mla_tensor*,
                             const mla_tensor*, int32_t, void*, size_t, void*);
using DecodeSizeFn = int32_t (*)(const mla_tensor*, const mla_tensor*, int32_t, const mla_tensor*,
                                 const mla_tensor*, float, int32_t, const mla_tensor*,
                                 const mla_tensor*, int32_t, size_t*);
using SparseFn = int32_t (*)(const mla_tensor*, const mla_tensor*, int32_t, const mla_tensor*,
                             const mla_tensor*, float, const mla_tensor*, const mla_tensor*, void*,
                             size_t, void*);
using SparseSizeFn = int32_t (*)(const mla_tensor*, const mla_tensor*, int32_t, const mla_tensor*,
                                 const mla_tensor*, float, const mla_tensor*, const mla_tensor*,
                                 size_t*);
using DecodePlannedFn = int32_t (*)(const mla_tensor*, const mla_tensor*, int32_t,
                                    const mla_tensor*, const mla_tensor*, float, int32_t,
                                    const mla_tensor*, const mla_tensor*, int32_t,
                                    const mla_decode_plan_info*, void*, size_t, void*);
using SparsePlannedFn = int32_t (*)(const mla_tensor*, const mla_tensor*, int32_t,
                                    const mla_tensor*, const mla_tensor*, float, const mla_tensor*,
                                    const mla_tensor*, const mla_decode_plan_info*, void*, size_t,
                                    void*);
using LastErrorFn = const char* (*)();

DecodeFn g_decode = nullptr;
DecodeSizeFn g_decode_size = nullptr;
DecodePlannedFn g_decode_planned = nullptr;  // null with an older libmla
SparseFn g_sparse = nullptr;
SparseSizeFn g_sparse_size = nullptr;
SparsePlannedFn g_sparse_planned = nullptr;  // null with an older libmla
LastErrorFn g_last_error = nullptr;

// at::ScalarType -> MLA_DTYPE_*, or -1.
int32_t dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MLA_DTYPE_F32;
    case at::kDouble: return MLA_DTYPE_F64;
    case at::kBFloat16: return MLA_DTYPE_BF16;
    case at::kHalf: return MLA_DTYPE_F16;
    case at::kFloat8_e4m3fn: return MLA_DTYPE_E4M3;
    case at::kByte: return MLA_DTYPE_U8;
    case at::kInt: return MLA_DTYPE_I32;
    case at::kLong: return MLA_DTYPE_I64;
    default: return -1;
  }
}

// Shape, strides and data pointer of t (ndim <= MLA_MAX_DIMS) into *out.
void fill_layout(const at::Tensor& t, mla_tensor* out) {
  const int64_t nd = t.dim();
  out->ndim = int32_t(nd);
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (int64_t i = 0; i < nd; ++i) {
    out->shape[i] = sizes[i];
    out->strides[i] = strides[i];
  }
  out->data = t.numel() == 0 ? nullptr : const_cast<void*>(t.const_data_ptr());
}

// An output this module allocated (a CUDA tensor of a supported dtype).
void fill(const at::Tensor& t, mla_tensor* out) {
  out->dtype = dtype_code(t.scalar_type());
  out->device_type = MLA_DEVICE_CUDA;
  out->device_id = t.device().index();
  fill_layout(t, out);
}

// A failed check or C ABI status: the mla.errors class of `code` in Python.
struct MlaFailure {
  int code;
  std::string message;
};

[[noreturn]] void fail(int code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(int code, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  throw MlaFailure{code, msg};
}

// A tensor argument -> *out, or MlaFailure naming it.
void view(const at::Tensor& t, const char* name, mla_tensor* out) {
  const int64_t nd = t.dim();
  if (nd > MLA_MAX_DIMS)
    fail(MLA_ERR_INVALID_SHAPE, "%s: ndim = %lld is more than mla's %d", name, (long long)nd,
         MLA_MAX_DIMS);
  out->dtype = dtype_code(t.scalar_type());
  if (out->dtype < 0)
    fail(MLA_ERR_INVALID_DTYPE, "%s: dtype %s has no mla equivalent", name,
         c10::toString(t.scalar_type()));
  const c10::Device d = t.device();
  if (d.is_cuda()) {
    out->device_type = MLA_DEVICE_CUDA;
    out->device_id = d.index();
  } else if (d.is_cpu()) {
    out->device_type = MLA_DEVICE_CPU;
    out->device_id = 0;
  } else {
    fail(MLA_ERR_INVALID_DEVICE, "%s: device %s is neither CPU nor CUDA", name, d.str().c_str());
  }
  fill_layout(t, out);
}

// Workspace bytes per argument metadata (shapes, dtypes, devices, scalars): the size
// function is pure in them, so a decode loop asks once per shape.
struct Key {
  std::array<int64_t, 48> v{};
  bool operator<(const Key& o) const { return v < o.v; }
};
std::map<Key, size_t> g_sizes;
// One workspace per (device, stream) for calls outside graph capture.
std::map<std::pair<int, cudaStream_t>, at::Tensor> g_workspaces;
std::mutex g_mutex;  // guards g_sizes and g_workspaces

void add_key(Key& k, int& n, const mla_tensor& t) {
  k.v[n++] = (int64_t(t.dtype) << 40) | (int64_t(t.device_id) << 8) | t.ndim;
  for (int i = 0; i < t.ndim; ++i) k.v[n++] = t.shape[i];
}

// The workspace of one call (none when `need` is 0): with `keep`, the kept one of
// (device, stream) outside graph capture (grown when too small); else a new one, freed
// after the call (under capture: from the graph's pool). The torch.ops kernels never keep
// one: torch.compile's CUDA-graph trees run them in the graph's pool outside capture too
// (warm-up), where a kept tensor would be a live allocation the graph does not own.
at::Tensor workspace_for(const at::Tensor& q, cudaStream_t stream, size_t need, bool keep) {
  if (need == 0) return {};
  auto alloc = [&] { return at::empty({int64_t(need)}, q.options().dtype(at::kByte)); };
  if (!keep || c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None)
    return alloc();
  at::Tensor& kept = g_workspaces[{int(q.device().index()), stream}];
  if (!kept.defined() || size_t(kept.numel()) < need) kept = alloc();
  return kept;
}

// The workspace bytes of the call whose metadata is `key`: remembered, else asked once of
// `size` (a C size function bound to the call's arguments, taking the size_t* out). Call
// with g_mutex held. Throws MlaFailure.
template <class SizeFn>
size_t remembered_size(const Key& key, SizeFn&& size) {
  if (auto it = g_sizes.find(key); it != g_sizes.end()) return it->second;
  size_t need = 0;
  const int32_t st = size(&need);
  if (st != MLA_OK) fail(st, "%s", g_last_error());
  if (g_sizes.size() > 4096) g_sizes.clear();
  g_sizes.emplace(key, need);
  return need;
}

// kv_format -1: from kv's dtype (u8 or e4m3 bytes: fp8_ds_mla, else bf16); an fp8_ds_mla
// cache viewed as e4m3 is passed on as its u8 bytes. Throws MlaFailure.
int64_t resolve_kv_format(int64_t fmt, mla_tensor* kv) {
  if (fmt < INT32_MIN || fmt > INT32_MAX)
    fail(MLA_ERR_OUT_OF_RANGE, "kv_format = %lld does not fit in int32", (long long)fmt);
  if (fmt == -1) fmt = (kv->dtype == MLA_DTYPE_U8 || kv->dtype == MLA_DTYPE_E4M3) ? 1 : 0;
  if (fmt == MLA_KV_FP8_DS_MLA && kv->dtype == MLA_DTYPE_E4M3) kv->dtype = MLA_DTYPE_U8;
  return fmt;
}

// q of an absorbed decode: a CUDA tensor [B, s_q, h_q, 576] (the C ABI checks the rest).
void expect_cuda_query(const mla_tensor& q) {
  if (q.ndim != 4 || q.device_type != MLA_DEVICE_CUDA)
    fail(MLA_ERR_INVALID_SHAPE, "q: a CUDA tensor [B, s_q, h_q, 576] is expected (ndim %d)",
         q.ndim);
}

// The outputs of an absorbed decode, allocated on q's device: out [B, s_q, h_q, 512] in
// q's dtype when floating (bf16/f32/f64, else f32), lse [B, h_q, s_q] f32 (f64 beside f64).
std::tuple<at::Tensor, at::Tensor> decode_outputs(const at::Tensor& tq, const mla_tensor& q,
                                                  mla_tensor* out_t, mla_tensor* lse_t) {
  const at::ScalarType qt = tq.scalar_type();
  const at::ScalarType ot =
      (qt == at::kBFloat16 || qt == at::kFloat || qt == at::kDouble) ? qt : at::kFloat;
  const at::ScalarType lt = ot == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t B = q.shape[0], s_q = q.shape[1], h_q = q.shape[2];
  const auto opts = tq.options();
  at::Tensor out = at::empty({B, s_q, h_q, 512}, opts.dtype(ot));
  at::Tensor lse = at::empty({B, h_q, s_q}, opts.dtype(lt));
  fill(out, out_t);
  fill(lse, lse_t);
  return {std::move(out), std::move(lse)};
}

// The decode of one call: outputs allocated, workspace sized (remembered) and
// taken, the C ABI called on torch's current stream. kv_format -1: from kv's dtype;
// pos_inf: FlashMLA's +inf lse for a query with no key. Throws MlaFailure.
std::tuple<at::Tensor, at::Tensor> decode_core(const at::Tensor& tq, const at::Tensor& tkv,
                                               const at::Tensor& tbt, const at::Tensor& tsl,
                                               double scale, bool causal, int64_t fmt,
                                               bool invariant, bool pos_inf, bool keep,
                                               const mla_decode_plan_info* plan = nullptr,
                                               const at::Tensor* plan_ws = nullptr) {
  if (g_decode == nullptr) fail(MLA_ERR_INTERNAL, "mla._torch_ext: bind() was not called");
  mla_tensor q{}, kv{}, bt{}, sl{}, out_t{}, lse_t{};
  view(tq, "q", &q);
  view(tkv, "kv", &kv);
  view(tbt, "block_table", &bt);
  view(tsl, "cache_seqlens", &sl);
  fmt = resolve_kv_format(fmt, &kv);
  expect_cuda_query(q);
  const c10::cuda::CUDAGuard guard(tq.device());
  auto [out, lse] = decode_outputs(tq, q, &out_t, &lse_t);
  if (plan != nullptr) {
    // A plan (mla.decode_plan): its workspace is this call's scratch too, sized
    // for these shapes when the plan was made (the C call checks the shapes).
    if (g_decode_planned == nullptr)
      fail(MLA_ERR_UNSUPPORTED, "mla_decode_planned: not in the loaded libmla");
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(tq.device().index()).stream();
    const int32_t st =
        g_decode_planned(&q, &kv, int32_t(fmt), &bt, &sl, float(scale), causal, &out_t, &lse_t,
                         invariant, plan, plan_ws->data_ptr(), size_t(plan_ws->numel()), stream);
    if (st != MLA_OK) fail(st, "%s", g_last_error());
    if (pos_inf) at::nan_to_num_(lse, NAN, INFINITY, INFINITY);
    return {std::move(out), std::move(lse)};
  }
  // Workspace size: remembered per argument metadata.
  Key key;
  int n = 0;
  for (const mla_tensor* t : {&q, &kv, &bt, &sl}) add_key(key, n, *t);
  key.v[n++] = (fmt << 4) | (int64_t(causal) << 1) | int64_t(invariant);
  std::lock_guard<std::mutex> lock(g_mutex);  // the op path may run without the GIL
  const size_t need = remembered_size(key, [&](size_t* bytes) {
    return g_decode_size(&q, &kv, int32_t(fmt), &bt, &sl, float(scale), causal, &out_t, &lse_t,
                         invariant, bytes);
  });
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(tq.device().index()).stream();
  const at::Tensor ws = workspace_for(tq, stream, need, keep);
  const int32_t st = g_decode(&q, &kv, int32_t(fmt), &bt, &sl, float(scale), causal, &out_t, &lse_t,
                              invariant, ws.defined() ? ws.data_ptr() : nullptr, need, stream);
  if (st != MLA_OK) fail(st, "%s", g_last_error());
  if (pos_inf) at::nan_to_num_(lse, NAN, INFINITY, INFINITY);  // one kernel: -inf -> +inf
  return {std::move(out), std::move(lse)};
}

// decode(q, kv, kv_format, block_table, cache_seqlens, softmax_scale, causal,
//        batch_invariant, lse_pos_inf) -> (out, lse), or NotImplemented when an array
// argument is not a torch tensor (the caller's generic path then reads and names it).
// A plan's two trailing arguments (mla/plans.py): its workspace (a torch tensor)
// and its record (the bytes of an mla_decode_plan_info). 1: read; 0: the
// workspace is not a torch tensor (NotImplemented); -1: a Python error is set.
int plan_args(PyObject* ws_obj, PyObject* record, mla_decode_plan_info* plan, at::Tensor* ws) {
  if (!THPVariable_Check(ws_obj)) return 0;
  char* buf = nullptr;
  Py_ssize_t len = 0;
  if (PyBytes_AsStringAndSize(record, &buf, &len) < 0) return -1;
  if (size_t(len) != sizeof(*plan)) {
    PyErr_SetString(PyExc_ValueError, "plan: not an mla_decode_plan_info record");
    return -1;
  }
  std::memcpy(plan, buf, sizeof(*plan));
  *ws = THPVariable_Unpack(ws_obj);
  return 1;
}

// A call's optional plan (the last two arguments of a planned call).
struct OptionalPlan {
  mla_decode_plan_info info{};
  at::Tensor ws;
  bool given = false;
  const mla_decode_plan_info* record() const { return given ? &info : nullptr; }
  const at::Tensor* workspace() const { return given ? &ws : nullptr; }
};

// The arguments decode and sparse_decode share: args[i] for i in `tensors` must be
// torch tensors, and a call of plan_at + 2 arguments ends with a plan's two
// (plan_args). Returns as plan_args: 1 read, 0 NotImplemented, -1 a Python error.
int tensors_and_plan(PyObject* const* args, Py_ssize_t nargs, std::initializer_list<int> tensors,
                     Py_ssize_t plan_at, OptionalPlan* plan) {
  for (int i : tensors)
    if (!THPVariable_Check(args[i])) return 0;
  if (nargs != plan_at + 2) return 1;
  plan->given = true;
  return plan_args(args[plan_at], args[plan_at + 1], &plan->info, &plan->ws);
}

// (out, lse) as a Python tuple (null with a Python error set).
PyObject* wrap_outputs(std::tuple<at::Tensor, at::Tensor> outputs) {
  auto& [out, lse] = outputs;
  Ref o, l;
  o.p = THPVariable_Wrap(std::move(out));
  l.p = THPVariable_Wrap(std::move(lse));
  if (!o.p || !l.p) return nullptr;
  return PyTuple_Pack(2, o.p, l.p);
}

// With 11 arguments, the last two are a plan's (tensors_and_plan).
PyObject* decode_impl(PyObject* const* args, Py_ssize_t nargs) {
  OptionalPlan plan;
  const int r = tensors_and_plan(args, nargs, {0, 1, 3, 4}, 9, &plan);
  if (r < 0) return nullptr;
  if (r == 0) Py_RETURN_NOTIMPLEMENTED;
  int64_t fmt = 0;
  if (!int_arg(args[2], "kv_format", INT32_MIN, INT32_MAX, &fmt)) return nullptr;
  const double scale = PyFloat_AsDouble(args[5]);
  if (scale == -1.0 && PyErr_Occurred()) return nullptr;
  const int causal = PyObject_IsTrue(args[6]);
  const int invariant = PyObject_IsTrue(args[7]);
  const int pos_inf = PyObject_IsTrue(args[8]);
  if (causal < 0 || invariant < 0 || pos_inf < 0) return nullptr;
  return wrap_outputs(decode_core(THPVariable_Unpack(args[0]), THPVariable_Unpack(args[1]),
                                  THPVariable_Unpack(args[3]), THPVariable_Unpack(args[4]), scale,
                                  causal != 0, fmt, invariant != 0, pos_inf != 0, /*keep=*/true,
                                  plan.record(), plan.workspace()));
}

// The sparse decode of one call (mla.sparse_decode): indices [B, s_q, topk] int32
// slots; with invalid_from > 0, entries >= invalid_from become -1 first (FlashMLA's
// other spelling of "none"). Throws MlaFailure.
std::tuple<at::Tensor, at::Tensor> sparse_core(const at::Tensor& tq, const at::Tensor& tkv,
                                               at::Tensor indices, const at::Tensor* topk_length,
                                               double scale, int64_t fmt, bool pos_inf,
                                               int64_t invalid_from, bool keep,
                                               const mla_decode_plan_info* plan = nullptr,
                                               const at::Tensor* plan_ws = nullptr) {
  if (g_sparse == nullptr) fail(MLA_ERR_INTERNAL, "mla._torch_ext: bind() was not called");
  const c10::cuda::CUDAGuard guard(tq.device());
  if (invalid_from > 0) indices = at::masked_fill(indices, at::ge(indices, invalid_from), -1);
  mla_tensor q{}, kv{}, idx{}, tl{}, out_t{}, lse_t{};
  view(tq, "q", &q);
  view(tkv, "kv", &kv);
  view(indices, "indices", &idx);
  if (topk_length) view(*topk_length, "topk_length", &tl);
  fmt = resolve_kv_format(fmt, &kv);
  expect_cuda_query(q);
  auto [out, lse] = decode_outputs(tq, q, &out_t, &lse_t);
  const mla_tensor* tlp = topk_length ? &tl : nullptr;
  if (plan != nullptr) {  // as in decode_core: the plan's workspace is the scratch
    if (g_sparse_planned == nullptr)
      fail(MLA_ERR_UNSUPPORTED, "mla_sparse_decode_planned: not in the loaded libmla");
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(tq.device().index()).stream();
    const int32_t st =
        g_sparse_planned(&q, &kv, int32_t(fmt), &idx, tlp, float(scale), &out_t, &lse_t, plan,
                         plan_ws->data_ptr(), size_t(plan_ws->numel()), stream);
    if (st != MLA_OK) fail(st, "%s", g_last_error());
    if (pos_inf) at::nan_to_num_(lse, NAN, INFINITY, INFINITY);
    return {std::move(out), std::move(lse)};
  }
  Key key;
  int n = 0;
  key.v[n++] = -2;  // sparse, apart from dense keys
  for (const mla_tensor* t : {&q, &kv, &idx}) add_key(key, n, *t);
  if (tlp) add_key(key, n, tl);
  key.v[n++] = fmt;
  std::lock_guard<std::mutex> lock(g_mutex);
  const size_t need = remembered_size(key, [&](size_t* bytes) {
    return g_sparse_size(&q, &kv, int32_t(fmt), &idx, tlp, float(scale), &out_t, &lse_t, bytes);
  });
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(tq.device().index()).stream();
  const at::Tensor ws = workspace_for(tq, stream, need, keep);
  const int32_t st = g_sparse(&q, &kv, int32_t(fmt), &idx, tlp, float(scale), &out_t, &lse_t,
                              ws.defined() ? ws.data_ptr() : nullptr, need, stream);
  if (st != MLA_OK) fail(st, "%s", g_last_error());
  if (pos_inf) at::nan_to_num_(lse, NAN, INFINITY, INFINITY);
  return {std::move(out), std::move(lse)};
}

// sparse_decode(q, kv, kv_format, indices, topk_length, softmax_scale, lse_pos_inf,
//               invalid_from[, plan_workspace, plan_record]) -> (out, lse), or
// NotImplemented (as decode).
PyObject* sparse_impl(PyObject* const* args, Py_ssize_t nargs) {
  OptionalPlan plan;
  const int r = tensors_and_plan(args, nargs, {0, 1, 3}, 8, &plan);
  if (r < 0) return nullptr;
  if (r == 0) Py_RETURN_NOTIMPLEMENTED;
  if (args[4] != Py_None && !THPVariable_Check(args[4])) Py_RETURN_NOTIMPLEMENTED;
  int64_t fmt = 0, invalid_from = 0;
  if (!int_arg(args[2], "kv_format", INT32_MIN, INT32_MAX, &fmt)) return nullptr;
  if (!int_arg(args[7], "invalid_from", 0, INT64_MAX, &invalid_from)) return nullptr;
  const double scale = PyFloat_AsDouble(args[5]);
  if (scale == -1.0 && PyErr_Occurred()) return nullptr;
  const int pos_inf = PyObject_IsTrue(args[6]);
  if (pos_inf < 0) return nullptr;
  const at::Tensor* tl = args[4] == Py_None ? nullptr : &THPVariable_Unpack(args[4]);
  return wrap_outputs(sparse_core(THPVariable_Unpack(args[0]), THPVariable_Unpack(args[1]),
                                  THPVariable_Unpack(args[3]), tl, scale, fmt, pos_inf != 0,
                                  invalid_from,
                                  /*keep=*/true, plan.record(), plan.workspace()));
}

// A METH_FASTCALL entry: `impl` on `want` arguments (or `want` + 2 with a plan), its C++ failures
// raised as Python exceptions (MlaFailure as its mla.errors class; torch's own errors, c10::Error:
// out of memory..., as RuntimeError).
PyObject* fastcall(const char* name, Py_ssize_t want,
                   PyObject* (*impl)(PyObject* const*, Py_ssize_t), PyObject* const* args,
                   Py_ssize_t nargs) {
  if (nargs != want && nargs != want + 2) {  // + a plan's workspace and record
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, or %zd with a plan", name, want,
                 want + 2);
    return nullptr;
  }
  if (g_decode == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "mla._torch_ext: bind() was not called");
    return nullptr;
  }
  try {
    return impl(args, nargs);
  } catch (const MlaFailure& f) {
    raise_code(f.code, f.message.c_str());
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* decode(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return fastcall("decode", 9, decode_impl, args, nargs);
}

PyObject* sparse_decode(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return fastcall("sparse_decode", 8, sparse_impl, args, nargs);
}

void register_cuda_impls();

// bind(dlopen_handle, errors_by_code, base_error): the C ABI functions, the exception
// classes, and the CUDA kernels of torch.ops.mla.decode / sparse_decode.
PyObject* bind(PyObject*, PyObject* args) {
  unsigned long long handle = 0;
  PyObject* by_code = nullptr;
  PyObject* base = nullptr;
  if (!PyArg_ParseTuple(args, "KO!O", &handle, &PyDict_Type, &by_code, &base)) return nullptr;
  void* h = reinterpret_cast<void*>(uintptr_t(handle));
  g_decode = reinterpret_cast<DecodeFn>(dlsym(h, "mla_decode"));
  g_decode_size = reinterpret_cast<DecodeSizeFn>(dlsym(h, "mla_decode_workspace_size"));
  g_decode_planned = reinterpret_cast<DecodePlannedFn>(dlsym(h, "mla_decode_planned"));
  g_last_error = reinterpret_cast<LastErrorFn>(dlsym(h, "mla_last_error_message"));
  g_sparse = reinterpret_cast<SparseFn>(dlsym(h, "mla_sparse_decode_ws"));
  g_sparse_size = reinterpret_cast<SparseSizeFn>(dlsym(h, "mla_sparse_decode_workspace_size"));
  g_sparse_planned = reinterpret_cast<SparsePlannedFn>(dlsym(h, "mla_sparse_decode_planned"));
  if (!g_decode || !g_decode_size || !g_last_error || !g_sparse || !g_sparse_size) {
    PyErr_SetString(PyExc_ImportError, "mla._torch_ext: the C ABI is missing from the library");
    return nullptr;
  }
  bind_error_classes(by_code, base);
  try {
    register_cuda_impls();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ImportError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

// kept_workspaces() -> {(device, stream): tensor}
PyObject* kept(PyObject*, PyObject*) {
  Ref d;
  d.p = PyDict_New();
  if (!d.p) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [k, t] : g_workspaces) {
    Ref key, value;
    key.p = Py_BuildValue("(iK)", k.first, (unsigned long long)uintptr_t(k.second));
    value.p = THPVariable_Wrap(t);
    if (!key.p || !value.p || PyDict_SetItem(d.p, key.p, value.p) < 0) return nullptr;
  }
  return d.release();
}

// release_workspaces(): drops the kept workspaces.
PyObject* release(PyObject*, PyObject*) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_workspaces.clear();
  Py_RETURN_NONE;
}

// torch.ops.mla.decode's CUDA kernel (the schema is defined by mla/torch_ops.py):
// the dispatcher calls it directly, without the Python implementation. A failure is
// a RuntimeError whose message starts with the mla error's name.
std::tuple<at::Tensor, at::Tensor> decode_op(const at::Tensor& q, const at::Tensor& kv,
                                             const at::Tensor& block_table,
                                             const at::Tensor& cache_seqlens, double softmax_scale,
                                             bool causal, int64_t kv_format, bool batch_invariant) {
  try {
    return decode_core(q, kv, block_table, cache_seqlens, softmax_scale, causal, kv_format,
                       batch_invariant, false, /*keep=*/false);
  } catch (const MlaFailure& f) {
    const char* name = f.code == MLA_ERR_INTERNAL ? "internal" : "mla";
    TORCH_CHECK(false, name, " error ", f.code, ": ", f.message);
  }
}

// torch.ops.mla.sparse_decode's CUDA kernel, likewise.
std::tuple<at::Tensor, at::Tensor> sparse_decode_op(const at::Tensor& q, const at::Tensor& kv,
                                                    const at::Tensor& indices,
                                                    const std::optional<at::Tensor>& topk_length,
                                                    double softmax_scale, int64_t kv_format) {
  try {
    return sparse_core(q, kv, indices, topk_length ? &*topk_length : nullptr, softmax_scale,
                       kv_format, false, 0, /*keep=*/false);
  } catch (const MlaFailure& f) {
    TORCH_CHECK(false, "mla error ", f.code, ": ", f.message);
  }
}

// The CUDA kernels are registered by bind(), which mla/_call.py calls only after
// checking that this module was built for the running torch (a static
// TORCH_LIBRARY_IMPL would register them at load, before that check).
std::unique_ptr<torch::Library> g_cuda_impls;

void register_cuda_impls() {
  if (g_cuda_impls) return;
  g_cuda_impls = std::make_unique<torch::Library>(torch::Library::IMPL, "mla",
                                                  c10::DispatchKey::CUDA, __FILE__, __LINE__);
  g_cuda_impls->impl("decode", &decode_op);
  g_cuda_impls->impl("sparse_decode", &sparse_decode_op);
}

PyMethodDef g_methods[] = {
    {"decode", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&decode)), METH_FASTCALL,
     "decode(q, kv, kv_format, block_table, cache_seqlens, softmax_scale, causal, "
     "batch_invariant, lse_pos_inf[, plan_workspace, plan_record]) -> (out, lse)"},
    {"sparse_decode", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&sparse_decode)),
     METH_FASTCALL,
     "sparse_decode(q, kv, kv_format, indices, topk_length, softmax_scale, lse_pos_inf, "
     "invalid_from[, plan_workspace, plan_record]) -> (out, lse)"},
    {"bind", bind, METH_VARARGS, "bind(dlopen_handle, errors_by_code, base_error)"},
    {"release_workspaces", release, METH_NOARGS, "drops the kept workspaces"},
    {"kept_workspaces", kept, METH_NOARGS, "{(device, stream): workspace tensor}"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module = module_def(
    "_torch_ext", "The torch CUDA decode hot path of mla (see mla/_call.py).", g_methods);

}  // namespace

PyMODINIT_FUNC PyInit__torch_ext(void) {
  PyObject* m = PyModule_Create(&g_module);
  if (m == nullptr) return nullptr;
  PyModule_AddStringConstant(m, "TORCH_VERSION", TORCH_VERSION);
  return m;
}
