// mla._ext: the compiled half of the Python package's call machinery.
//
// One pass over a call's arguments: each array (torch tensor, NumPy array, or
// any DLPack producer) becomes an mla_tensor, each Python int is range-checked
// into its C type, and the C ABI function runs; a non-zero status raises the
// mla.errors class of its code with the library's message.
//
// Built against CPython's limited API (abi3, Python 3.10+), so one binary
// serves every Python version from 3.10 on. It links to nothing: the C ABI
// functions are looked up with dlsym in the libmla.so that mla._lib loaded
// (bind()), so the compiled and the ctypes paths share one library instance
// and one per-thread error message.
#define Py_LIMITED_API 0x030A0000
#include <Python.h>
#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ext_common.hpp"
#include "mla/c_api.h"

namespace {

// ---- Python objects this module keeps --------------------------------------

// Interned attribute / method names.
struct Names {
  PyObject *dtype, *shape, *stride, *strides, *data_ptr, *is_cuda, *is_cpu, *get_device, *device,
      *array_interface, *dlpack, *dlpack_device, *name, *byteorder, *max_version, *stream, *module,
      *data, *typestr, *type;
};
Names g_names;

void* g_lib = nullptr;
using LastErrorFn = const char* (*)();
LastErrorFn g_last_error = nullptr;

enum class Framework : int { unknown = 0, torch, numpy, dlpack, array_interface, none };

// Types seen before, with their framework (strong references; a handful at most).
struct TypeEntry {
  PyObject* type;
  Framework fw;
};
std::array<TypeEntry, 16> g_types{};
int g_num_types = 0;

// dtype objects seen before (torch.float32, numpy.dtype('float32'), ...) -> MLA_DTYPE_*.
struct DTypeEntry {
  PyObject* dtype;
  int32_t code;
};
std::array<DTypeEntry, 32> g_dtypes{};
int g_num_dtypes = 0;

// ---- small helpers -----------------------------------------------------------

bool int64_of(PyObject* o, int64_t* v) {
  long long x = PyLong_AsLongLong(o);
  if (x == -1 && PyErr_Occurred()) return false;
  *v = x;
  return true;
}

// Reads a tuple of ints (a shape or strides) into out[0..n). -1 + error on failure.
int int_tuple(PyObject* t, int64_t* out, int max_n, const char* name, const char* what) {
  if (!PyTuple_Check(t)) {
    raise_fmt(MLA_ERR_INVALID_VALUE, "%s: %s is not a tuple", name, what);
    return -1;
  }
  const Py_ssize_t n = PyTuple_Size(t);
  if (n > max_n) {
    raise_fmt(MLA_ERR_INVALID_SHAPE, "%s: ndim = %zd is more than mla's %d", name, n, max_n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!int64_of(PyTuple_GetItem(t, i), &out[i])) {
      PyErr_Clear();
      raise_fmt(MLA_ERR_INVALID_SHAPE, "%s: %s[%zd] is not a 64-bit integer", name, what, i);
      return -1;
    }
  }
  return int(n);
}

// Our dtype code for a framework's dtype name ("float32", "bfloat16", ...), or -1.
int32_t dtype_code_of_name(const char* s) {
  static const struct {
    const char* name;
    int32_t code;
  } table[] = {{"float32", MLA_DTYPE_F32},        {"float64", MLA_DTYPE_F64},
               {"bfloat16", MLA_DTYPE_BF16},      {"float16", MLA_DTYPE_F16},
               {"float8_e4m3fn", MLA_DTYPE_E4M3}, {"uint8", MLA_DTYPE_U8},
               {"int32", MLA_DTYPE_I32},          {"int64", MLA_DTYPE_I64}};
  for (const auto& e : table)
    if (std::strcmp(e.name, s) == 0) return e.code;
  return -1;
}

int64_t dtype_size(int32_t code) {
  switch (code) {
    case MLA_DTYPE_F64:
    case MLA_DTYPE_I64: return 8;
    case MLA_DTYPE_F32:
    case MLA_DTYPE_I32: return 4;
    case MLA_DTYPE_BF16:
    case MLA_DTYPE_F16: return 2;
    default: return 1;
  }
}

// The dtype code of a dtype object; remembered by identity. torch dtypes print as
// "torch.float32", NumPy's (and ml_dtypes') have .name; a NumPy dtype that is not
// in native (little-endian) byte order is refused.
int32_t dtype_code(PyObject* dt, Framework fw, const char* arg) {
  for (int i = 0; i < g_num_dtypes; ++i)
    if (g_dtypes[i].dtype == dt) return g_dtypes[i].code;
  Ref name;
  if (fw == Framework::numpy) {
    Ref order(PyObject_GetAttr(dt, g_names.byteorder));
    if (order) {
      const char* o = PyUnicode_AsUTF8AndSize(order.p, nullptr);
      if (o && o[0] == '>') {
        Repr r(dt);
        raise_fmt(MLA_ERR_INVALID_DTYPE, "%s: dtype %s is big-endian", arg, r.c);
        return -1;
      }
    }
    PyErr_Clear();
    name.p = PyObject_GetAttr(dt, g_names.name);
  } else {
    name.p = PyObject_Str(dt);
  }
  const char* s = name ? PyUnicode_AsUTF8AndSize(name.p, nullptr) : nullptr;
  if (s == nullptr) {
    PyErr_Clear();
    raise_fmt(MLA_ERR_INVALID_DTYPE, "%s: unreadable dtype", arg);
    return -1;
  }
  if (std::strncmp(s, "torch.", 6) == 0) s += 6;
  const int32_t code = dtype_code_of_name(s);
  if (code < 0) {
    raise_fmt(MLA_ERR_INVALID_DTYPE, "%s: dtype %s has no mla equivalent", arg, s);
    return -1;
  }
  if (g_num_dtypes < int(g_dtypes.size())) {
    Py_INCREF(dt);
    g_dtypes[g_num_dtypes++] = {dt, code};
  }
  return code;
}

// The framework of an object, by its type (remembered by type identity).
Framework framework_of(PyObject* o) {
  if (o == Py_None) return Framework::none;
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(o));
  for (int i = 0; i < g_num_types; ++i)
    if (g_types[i].type == type) return g_types[i].fw;
  Framework fw = Framework::unknown;
  Ref mod(PyObject_GetAttr(type, g_names.module));
  const char* m = mod ? PyUnicode_AsUTF8AndSize(mod.p, nullptr) : nullptr;
  PyErr_Clear();
  if (m && (std::strncmp(m, "torch", 5) == 0) && PyObject_HasAttr(o, g_names.data_ptr))
    fw = Framework::torch;
  else if (m && std::strcmp(m, "numpy") == 0 && PyObject_HasAttr(o, g_names.array_interface))
    fw = Framework::numpy;
  else if (PyObject_HasAttr(o, g_names.dlpack))
    fw = Framework::dlpack;
  else if (PyObject_HasAttr(o, g_names.array_interface))
    fw = Framework::array_interface;
  if (fw != Framework::unknown && g_num_types < int(g_types.size())) {
    Py_INCREF(type);
    g_types[g_num_types++] = {type, fw};
  }
  return fw;
}

void contiguous_strides(const int64_t* shape, int ndim, int64_t* strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d] > 0 ? shape[d] : 1;
  }
}

// ---- arrays in -----------------------------------------------------------------

// What one array argument needs kept alive through the C call (a DLPack capsule,
// a NumPy view of an __array_interface__ object).
struct Keep {
  std::array<PyObject*, 24> objs{};
  int n = 0;
  void add(PyObject* o) {  // steals o
    if (n < int(objs.size()))
      objs[n++] = o;
    else
      Py_DECREF(o);
  }
  ~Keep() {
    for (int i = 0; i < n; ++i) Py_DECREF(objs[i]);
  }
};

// x.name() with no arguments. PyObject_VectorcallMethod (CPython 3.9+) skips the
// bound-method object, but joined the limited API only in 3.12: it is looked up
// in the running interpreter at import, with the limited-API call as fallback.
using VectorcallMethodFn = PyObject* (*)(PyObject*, PyObject* const*, size_t, PyObject*);
VectorcallMethodFn g_vectorcall_method = nullptr;

PyObject* call_method0(PyObject* x, PyObject* name) {
  if (g_vectorcall_method != nullptr) {
    PyObject* args[1] = {x};
    return g_vectorcall_method(name, args, 1, nullptr);
  }
  return PyObject_CallMethodObjArgs(x, name, nullptr);
}

// x.dtype as t->dtype (an error naming the argument when mla has no such dtype).
bool read_dtype(PyObject* x, Framework fw, const char* name, mla_tensor* t) {
  Ref dt(PyObject_GetAttr(x, g_names.dtype));
  if (!dt) return false;
  t->dtype = dtype_code(dt.p, fw, name);
  return t->dtype >= 0;
}

bool from_torch(PyObject* x, const char* name, mla_tensor* t) {
  if (!read_dtype(x, Framework::torch, name, t)) return false;
  Ref cuda(PyObject_GetAttr(x, g_names.is_cuda));
  if (!cuda) return false;
  if (cuda.p == Py_True) {
    Ref dev(call_method0(x, g_names.get_device));
    if (!dev) return false;
    t->device_type = MLA_DEVICE_CUDA;
    t->device_id = int32_t(PyLong_AsLong(dev.p));
  } else {
    Ref cpu(PyObject_GetAttr(x, g_names.is_cpu));
    if (!cpu) return false;
    if (cpu.p != Py_True) {
      Ref dev(PyObject_GetAttr(x, g_names.device));
      Repr r(dev.p ? dev.p : Py_None);
      PyErr_Clear();
      raise_fmt(MLA_ERR_INVALID_DEVICE, "%s: device %s is neither CPU nor CUDA", name, r.c);
      return false;
    }
    t->device_type = MLA_DEVICE_CPU;
    t->device_id = 0;
  }
  Ref shape(PyObject_GetAttr(x, g_names.shape));
  if (!shape) return false;
  const int nd = int_tuple(shape.p, t->shape, MLA_MAX_DIMS, name, "shape");
  if (nd < 0) return false;
  t->ndim = nd;
  Ref strides(call_method0(x, g_names.stride));
  if (!strides || int_tuple(strides.p, t->strides, MLA_MAX_DIMS, name, "stride") < 0) return false;
  Ref ptr(call_method0(x, g_names.data_ptr));
  if (!ptr) return false;
  t->data = PyLong_AsVoidPtr(ptr.p);
  return !PyErr_Occurred();
}

bool from_numpy(PyObject* x, const char* name, bool writable, mla_tensor* t) {
  if (!read_dtype(x, Framework::numpy, name, t)) return false;
  Ref ai(PyObject_GetAttr(x, g_names.array_interface));
  if (!ai) return false;
  PyObject* data = PyDict_GetItemString(ai.p, "data");        // borrowed
  PyObject* shape = PyDict_GetItemString(ai.p, "shape");      // borrowed
  PyObject* strides = PyDict_GetItemString(ai.p, "strides");  // borrowed (None: contiguous)
  if (!data || !shape || !PyTuple_Check(data) || PyTuple_Size(data) != 2) {
    raise_fmt(MLA_ERR_INVALID_VALUE, "%s: malformed __array_interface__", name);
    return false;
  }
  if (writable && PyObject_IsTrue(PyTuple_GetItem(data, 1)) == 1) {
    raise_fmt(MLA_ERR_INVALID_VALUE, "%s: the array is read-only, but it is an output", name);
    return false;
  }
  t->data = PyLong_AsVoidPtr(PyTuple_GetItem(data, 0));
  if (PyErr_Occurred()) return false;
  const int nd = int_tuple(shape, t->shape, MLA_MAX_DIMS, name, "shape");
  if (nd < 0) return false;
  t->ndim = nd;
  t->device_type = MLA_DEVICE_CPU;
  t->device_id = 0;
  if (strides == nullptr || strides == Py_None) {
    contiguous_strides(t->shape, nd, t->strides);
    return true;
  }
  int64_t bytes[MLA_MAX_DIMS];
  if (int_tuple(strides, bytes, MLA_MAX_DIMS, name, "strides") < 0) return false;
  const int64_t item = dtype_size(t->dtype);
  for (int d = 0; d < nd; ++d) {
    if (bytes[d] % item != 0) {
      raise_fmt(MLA_ERR_INVALID_STRIDE,
                "%s: stride %lld B of dim %d is not a multiple of the element size %lld", name,
                (long long)bytes[d], d, (long long)item);
      return false;
    }
    t->strides[d] = bytes[d] / item;
  }
  return true;
}

// ---- DLPack (dlpack.h v0.x and v1.x layouts) -----------------------------------
struct DLDevice {
  int32_t device_type, device_id;
};
struct DLDataType {
  uint8_t code, bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLPackVersion {
  uint32_t major, minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned*);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr uint64_t kDLReadOnly = 1, kDLIsCopied = 2;
constexpr int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;

int32_t dl_dtype(const DLDataType& d) {
  if (d.lanes != 1) return -1;
  const int key = d.code * 256 + d.bits;
  switch (key) {
    case 2 * 256 + 32: return MLA_DTYPE_F32;
    case 2 * 256 + 64: return MLA_DTYPE_F64;
    case 4 * 256 + 16: return MLA_DTYPE_BF16;
    case 2 * 256 + 16: return MLA_DTYPE_F16;
    case 10 * 256 + 8: return MLA_DTYPE_E4M3;
    case 1 * 256 + 8: return MLA_DTYPE_U8;
    case 0 * 256 + 32: return MLA_DTYPE_I32;
    case 0 * 256 + 64: return MLA_DTYPE_I64;
    default: return -1;
  }
}

// Calls x.__dlpack__(max_version=(1, 0)[, stream=...]); retries without keywords
// for producers older than DLPack 1.0.
PyObject* dlpack_capsule(PyObject* x, PyObject* stream) {
  Ref method(PyObject_GetAttr(x, g_names.dlpack));
  if (!method) return nullptr;
  Ref args(PyTuple_New(0));
  Ref kw(PyDict_New());
  Ref ver(Py_BuildValue("(ii)", 1, 0));
  if (!args || !kw || !ver) return nullptr;
  PyDict_SetItem(kw.p, g_names.max_version, ver.p);
  if (stream) PyDict_SetItem(kw.p, g_names.stream, stream);
  PyObject* cap = PyObject_Call(method.p, args.p, kw.p);
  if (cap || !PyErr_ExceptionMatches(PyExc_TypeError)) return cap;
  PyErr_Clear();
  PyDict_DelItem(kw.p, g_names.max_version);
  return PyObject_Call(method.p, args.p, kw.p);
}

bool dlpack_is_cuda(PyObject* x) {
  Ref dev(PyObject_CallMethodObjArgs(x, g_names.dlpack_device, nullptr));
  if (!dev) {
    PyErr_Clear();
    return false;
  }
  Ref kind(PySequence_GetItem(dev.p, 0));
  if (!kind) {
    PyErr_Clear();
    return false;
  }
  const long k = PyLong_AsLong(kind.p);
  PyErr_Clear();
  return k == kDLCUDA || k == kDLCUDAManaged;
}

bool from_dlpack(PyObject* x, const char* name, bool writable, int64_t stream, mla_tensor* t,
                 Keep* keep) {
  Ref st;
  if (stream >= 0 && dlpack_is_cuda(x))  // DLPack: 1 is CUDA's legacy default stream, 0 illegal
    st.p = PyLong_FromLongLong(stream == 0 ? 1 : stream);
  PyObject* cap = dlpack_capsule(x, st.p);
  if (cap == nullptr) return false;
  keep->add(cap);  // unconsumed: its destructor releases the tensor after the call
  const DLTensor* dl = nullptr;
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    auto* m =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
    if (m->version.major > 1) {
      raise_fmt(MLA_ERR_UNSUPPORTED, "%s: DLPack version %u.%u is newer than 1.x", name,
                m->version.major, m->version.minor);
      return false;
    }
    if (writable && (m->flags & kDLReadOnly)) {
      raise_fmt(MLA_ERR_INVALID_VALUE, "%s: the array is read-only, but it is an output", name);
      return false;
    }
    if (writable && (m->flags & kDLIsCopied)) {
      raise_fmt(MLA_ERR_INVALID_VALUE,
                "%s: DLPack gave a copy, so results written to it would be lost", name);
      return false;
    }
    dl = &m->dl_tensor;
  } else if (PyCapsule_IsValid(cap, "dltensor")) {
    dl = &static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"))->dl_tensor;
  } else {
    raise_fmt(MLA_ERR_INVALID_VALUE, "%s: __dlpack__ did not return a DLPack capsule", name);
    return false;
  }
  t->dtype = dl_dtype(dl->dtype);
  if (t->dtype < 0) {
    raise_fmt(MLA_ERR_INVALID_DTYPE,
              "%s: DLPack dtype (code %d, bits %d, lanes %d) has no mla equivalent", name,
              dl->dtype.code, dl->dtype.bits, dl->dtype.lanes);
    return false;
  }
  if (dl->ndim < 0 || dl->ndim > MLA_MAX_DIMS) {
    raise_fmt(MLA_ERR_INVALID_SHAPE, "%s: ndim = %d is more than mla's %d", name, dl->ndim,
              MLA_MAX_DIMS);
    return false;
  }
  t->ndim = dl->ndim;
  for (int d = 0; d < dl->ndim; ++d) t->shape[d] = dl->shape[d];
  if (dl->strides)
    for (int d = 0; d < dl->ndim; ++d) t->strides[d] = dl->strides[d];
  else
    contiguous_strides(t->shape, t->ndim, t->strides);
  const int32_t dev = dl->device.device_type;
  if (dev == kDLCPU || dev == kDLCUDAHost) {
    t->device_type = MLA_DEVICE_CPU;
    t->device_id = 0;
  } else if (dev == kDLCUDA || dev == kDLCUDAManaged) {
    t->device_type = MLA_DEVICE_CUDA;
    t->device_id = dl->device.device_id;
  } else {
    raise_fmt(MLA_ERR_INVALID_DEVICE, "%s: DLPack device type %d is neither CPU nor CUDA", name,
              dev);
    return false;
  }
  const int64_t item = dtype_size(t->dtype);
  if (dl->byte_offset % uint64_t(item) != 0) {
    raise_fmt(MLA_ERR_MISALIGNED,
              "%s: DLPack byte_offset %llu is not a multiple of the element size %lld", name,
              (unsigned long long)dl->byte_offset, (long long)item);
    return false;
  }
  t->data = static_cast<char*>(dl->data) + dl->byte_offset;
  return true;
}

// Any supported array -> *t. `stream` (>= 0) is handed to a CUDA DLPack producer
// so that it orders its pending work before ours; -1: none given.
bool to_tensor(PyObject* x, const char* name, bool writable, int64_t stream, mla_tensor* t,
               Keep* keep) {
  std::memset(t, 0, sizeof *t);
  switch (framework_of(x)) {
    case Framework::torch: return from_torch(x, name, t);
    case Framework::numpy: return from_numpy(x, name, writable, t);
    case Framework::dlpack: return from_dlpack(x, name, writable, stream, t, keep);
    case Framework::array_interface: {  // an array-like NumPy can view without a copy
      Ref np(PyImport_ImportModule("numpy"));
      if (!np) return false;
      PyObject* arr = PyObject_CallMethod(np.p, "asarray", "O", x);
      if (arr == nullptr) return false;
      keep->add(arr);
      return from_numpy(arr, name, writable, t);
    }
    default: {
      Ref type(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(x)), "__name__"));
      Repr r(type.p ? type.p : Py_None);
      raise_fmt(MLA_ERR_INVALID_DTYPE,
                "%s: %s is not an array (no __dlpack__ or __array_interface__)", name, r.c);
      return false;
    }
  }
}

// ---- the generic binder of C ABI functions ----------------------------------------

// One op: its C name and the Python-visible argument names, space separated, in C
// order (out-parameters such as `size_t* bytes` have no name: they are returned).
// Name marks: "!" an output array (must be writable), "@" a paged cache whose
// format is the "kv_format" argument (-1 there: from the cache's dtype and width, u8/e4m3
// -> fp8_ds_mla, else bf16; an fp8 cache given as e4m3 bytes is passed as u8).
struct OpSpec {
  const char* c_name;
  const char* args;
};

enum class Kind { tensor, i32, i64, f32, size, ptr, out_size };

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, const mla_tensor*>)
    return Kind::tensor;
  else if constexpr (std::is_same_v<T, int32_t>)
    return Kind::i32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return Kind::i64;
  else if constexpr (std::is_same_v<T, float>)
    return Kind::f32;
  else if constexpr (std::is_same_v<T, size_t>)
    return Kind::size;
  else if constexpr (std::is_same_v<T, void*>)
    return Kind::ptr;
  else if constexpr (std::is_same_v<T, size_t*>)
    return Kind::out_size;
  else
    static_assert(sizeof(T) == 0, "a C ABI argument type the binder does not know");
}

union Slot {
  const mla_tensor* tensor;
  int32_t i32;
  int64_t i64;
  float f32;
  size_t size;
  void* ptr;
  size_t* out_size;
};

template <class T>
T slot_get(const Slot& s) {
  if constexpr (std::is_same_v<T, const mla_tensor*>)
    return s.tensor;
  else if constexpr (std::is_same_v<T, int32_t>)
    return s.i32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return s.i64;
  else if constexpr (std::is_same_v<T, float>)
    return s.f32;
  else if constexpr (std::is_same_v<T, size_t>)
    return s.size;
  else if constexpr (std::is_same_v<T, void*>)
    return s.ptr;
  else
    return s.out_size;
}

constexpr int kMaxArgs = 24;

struct ArgName {
  char text[40];
  bool writable = false, cache = false;
};

// Splits an OpSpec's names once (at bind time).
int parse_names(const char* spec, ArgName* out) {
  int n = 0;
  const char* p = spec;
  while (*p) {
    while (*p == ' ') ++p;
    if (!*p) break;
    ArgName& a = out[n++];
    int len = 0;
    for (; *p && *p != ' '; ++p) {
      if (*p == '!')
        a.writable = true;
      else if (*p == '@')
        a.cache = true;
      else if (len < int(sizeof a.text) - 1)
        a.text[len++] = *p;
    }
    a.text[len] = '\0';
  }
  return n;
}

// A converted call: the C arguments and the storage they point into.
struct Converted {
  std::array<Slot, kMaxArgs> slots{};
  std::array<mla_tensor, kMaxArgs> tensors{};
  size_t out_size = 0;
  Keep keep;
  int32_t first_device = 0;  // device type of the first array argument (0: none)

  // CPU work (the reference) may take long: the GIL is released around it. CUDA
  // calls only queue work, shorter than the release would cost.
  bool on_cpu() const { return first_device != MLA_DEVICE_CUDA; }
};

struct OpState {
  const OpSpec* spec = nullptr;
  void* fn = nullptr;
  ArgName names[kMaxArgs];
  int num_names = 0;
  int format_arg = -1;  // index among the Python args of "kv_format", -1 if none
  int stream_arg = -1;  // index of "stream", -1 if none
};

bool size_arg(PyObject* o, const char* name, size_t* v) {
  int64_t x = 0;
  if (!int_arg(o, name, 0, INT64_MAX, &x)) return false;
  *v = size_t(x);
  return true;
}

bool ptr_arg(PyObject* o, const char* name, void** v) {
  if (o == Py_None) {
    *v = nullptr;
    return true;
  }
  if (!PyLong_Check(o)) {
    Repr r(o, false);
    raise_fmt(MLA_ERR_INVALID_VALUE, "%s = %s is not an address (int or None)", name, r.c);
    return false;
  }
  const unsigned long long x = PyLong_AsUnsignedLongLong(o);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    Repr r(o);
    raise_fmt(MLA_ERR_OUT_OF_RANGE, "%s = %s is not a 64-bit address", name, r.c);
    return false;
  }
  *v = reinterpret_cast<void*>(uintptr_t(x));
  return true;
}

// fp8 bytes of 576-wide entries: fp8_e4m3; other fp8 bytes: fp8_ds_mla.
int32_t format_from_dtype(const mla_tensor& t) {
  if (t.dtype != MLA_DTYPE_U8 && t.dtype != MLA_DTYPE_E4M3) return MLA_KV_BF16;
  return t.ndim > 0 && t.shape[t.ndim - 1] == 576 ? MLA_KV_FP8_E4M3 : MLA_KV_FP8_DS_MLA;
}

// `stream` is the call's stream for a function that takes none itself (the
// workspace-size half of an auto call), handed to DLPack producers; else -1.
template <class... A>
bool convert(const OpState& op, PyObject* const* args, Py_ssize_t nargs, Converted* c,
             int64_t stream = -1) {
  constexpr Kind kinds[] = {kind_of<A>()...};
  constexpr int n_c = int(sizeof...(A));
  static_assert(n_c <= kMaxArgs);
  int n_py = 0;
  for (Kind k : kinds) n_py += k != Kind::out_size;
  if (nargs != n_py) {
    raise_fmt(MLA_ERR_INVALID_VALUE, "%s takes %d arguments (%zd given)", op.spec->c_name, n_py,
              nargs);
    return false;
  }
  // The stream first: a DLPack producer is handed it.
  if (op.stream_arg >= 0 && args[op.stream_arg] != Py_None) {
    void* s = nullptr;
    if (!ptr_arg(args[op.stream_arg], "stream", &s)) return false;
    stream = int64_t(uintptr_t(s));
  }
  int cache_slot = -1, format_slot = -1;
  int py = 0;
  for (int i = 0; i < n_c; ++i) {
    Slot& s = c->slots[i];
    if (kinds[i] == Kind::out_size) {
      s.out_size = &c->out_size;
      continue;
    }
    const ArgName& an = op.names[py];
    PyObject* o = args[py++];
    switch (kinds[i]) {
      case Kind::tensor:
        if (o == Py_None) {
          s.tensor = nullptr;
        } else {
          if (!to_tensor(o, an.text, an.writable, stream, &c->tensors[i], &c->keep)) return false;
          s.tensor = &c->tensors[i];
          if (c->first_device == 0) c->first_device = c->tensors[i].device_type;
          if (an.cache) cache_slot = i;
        }
        break;
      case Kind::i32: {
        int64_t v = 0;
        if (!int_arg(o, an.text, INT32_MIN, INT32_MAX, &v)) return false;
        s.i32 = int32_t(v);
        if (py - 1 == op.format_arg) format_slot = i;
        break;
      }
      case Kind::i64:
        if (!int_arg(o, an.text, INT64_MIN, INT64_MAX, &s.i64)) return false;
        break;
      case Kind::f32: {
        const double v = PyFloat_AsDouble(o);
        if (v == -1.0 && PyErr_Occurred()) {
          PyErr_Clear();
          Repr r(o, false);
          raise_fmt(MLA_ERR_INVALID_VALUE, "%s = %s is not a number", an.text, r.c);
          return false;
        }
        s.f32 = float(v);
        break;
      }
      case Kind::size:
        if (!size_arg(o, an.text, &s.size)) return false;
        break;
      case Kind::ptr:
        if (!ptr_arg(o, an.text, &s.ptr)) return false;
        break;
      case Kind::out_size: break;
    }
  }
  // The cache's format: -1 asks for the one its dtype implies; an fp8 cache may
  // come as e4m3 bytes, which the C ABI takes as u8.
  if (cache_slot >= 0 && format_slot >= 0) {
    mla_tensor& t = c->tensors[cache_slot];
    int32_t& fmt = c->slots[format_slot].i32;
    if (fmt == -1) fmt = format_from_dtype(t);
    if (fmt == MLA_KV_FP8_DS_MLA && t.dtype == MLA_DTYPE_E4M3) t.dtype = MLA_DTYPE_U8;
  } else if (format_slot >= 0 && c->slots[format_slot].i32 == -1) {
    c->slots[format_slot].i32 = MLA_KV_BF16;
  }
  return true;
}

PyObject* finish(int32_t status, const Converted& c, bool has_out_size) {
  if (status != MLA_OK) {
    raise_code(status, g_last_error ? g_last_error() : "mla call failed");
    return nullptr;
  }
  if (has_out_size) return PyLong_FromSize_t(c.out_size);
  Py_RETURN_NONE;
}

template <class... A, size_t... I>
int32_t invoke(void* fn, const Converted& c, std::index_sequence<I...>) {
  auto f = reinterpret_cast<int32_t (*)(A...)>(fn);
  return f(slot_get<A>(c.slots[I])...);
}

// The C function `fn` of signature int32_t(A...) on the converted arguments; without the
// GIL for CPU arrays (the reference runs there), with it for CUDA ones (a launch is short).
template <class... A>
int32_t call_c(void* fn, const Converted& c) {
  if (!c.on_cpu()) return invoke<A...>(fn, c, std::index_sequence_for<A...>{});
  int32_t status;
  Py_BEGIN_ALLOW_THREADS;
  status = invoke<A...>(fn, c, std::index_sequence_for<A...>{});
  Py_END_ALLOW_THREADS;
  return status;
}

template <class Sig>
struct Binder;

template <class... A>
struct Binder<int32_t(A...)> {
  static constexpr bool has_out_size = ((kind_of<A>() == Kind::out_size) || ...);
  static PyObject* call(const OpState& op, PyObject* const* args, Py_ssize_t nargs) {
    if (op.fn == nullptr) {
      raise_fmt(MLA_ERR_UNSUPPORTED, "%s: not in the loaded libmla (built from an older tree?)",
                op.spec->c_name);
      return nullptr;
    }
    Converted c;
    if (!convert<A...>(op, args, nargs, &c)) return nullptr;
    return finish(call_c<A...>(op.fn, c), c, has_out_size);
  }
};

// The tensor-only functions of the C ABI (structs stay with ctypes, in mla._lib).
#define MLA_OPS(X)                                                                              \
  X(mla_validate_kv_cache, "cache@ kv_format")                                                  \
  X(mla_append_kv, "c_kv k_rope slots cache@! kv_format stream")                                \
  X(mla_read_kv, "cache@ kv_format slots c_kv! k_rope! stream")                                 \
  X(mla_decode_workspace_size,                                                                  \
    "q kv@ kv_format block_table cache_seqlens softmax_scale causal out! lse! batch_invariant") \
  X(mla_decode,                                                                                 \
    "q kv@ kv_format block_table cache_seqlens softmax_scale causal out! lse! batch_invariant " \
    "workspace workspace_bytes stream")                                                         \
  X(mla_decode_partial,                                                                         \
    "q kv@ kv_format block_table cache_seqlens softmax_scale causal kv_begin kv_end out! lse! " \
    "stream")                                                                                   \
  X(mla_merge_attn_partials, "partial_out partial_lse out! lse! stream")                        \
  X(mla_validate_indexer_cache, "cache")                                                        \
  X(mla_append_indexer_keys, "keys slots cache! stream")                                        \
  X(mla_quantize_indexer_query, "q weights q8! w_folded! stream")                               \
  X(mla_indexer_logits_decode, "q8 w_folded cache block_table cache_seqlens logits! stream")    \
  X(mla_indexer_logits_prefill, "q8 w_folded k8 k_scale k_start k_end logits! stream")          \
  X(mla_indexer_select_prefill_workspace_size,                                                  \
    "q8 w_folded k8 k_scale k_start k_end k order path capacity indices!")                      \
  X(mla_indexer_select_prefill,                                                                 \
    "q8 w_folded k8 k_scale k_start k_end k order path capacity indices! workspace "            \
    "workspace_bytes stream")                                                                   \
  X(mla_topk_indices,                                                                           \
    "logits lengths k indices! block_table page_size rows_per_request num_pages stream")        \
  X(mla_sparse_decode_workspace_size,                                                           \
    "q kv@ kv_format indices topk_length softmax_scale out! lse!")                              \
  X(mla_sparse_decode_ws,                                                                       \
    "q kv@ kv_format indices topk_length softmax_scale out! lse! workspace workspace_bytes "    \
    "stream")                                                                                   \
  X(mla_sparse_prefill_workspace_size,                                                          \
    "q kv@ kv_format indices topk_length softmax_scale out! lse!")                              \
  X(mla_sparse_prefill_ws,                                                                      \
    "q kv@ kv_format indices topk_length softmax_scale out! lse! workspace workspace_bytes "    \
    "stream")                                                                                   \
  X(mla_decompress_kv, "c_kv w_uk w_uv k_nope! v! stream")                                      \
  X(mla_mha_prefill, "q k v cu_seqlens_q cu_seqlens_k softmax_scale causal out! lse! stream")

enum OpId {
#define MLA_OP_ID(fn, args) op_##fn,
  MLA_OPS(MLA_OP_ID)
#undef MLA_OP_ID
      kNumOps
};

const OpSpec kSpecs[kNumOps] = {
#define MLA_OP_SPEC(fn, args) {#fn, args},
    MLA_OPS(MLA_OP_SPEC)
#undef MLA_OP_SPEC
};

OpState g_ops[kNumOps];

template <int Id, class Sig>
PyObject* op_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return Binder<Sig>::call(g_ops[Id], args, nargs);
}

// ---- calls that need scratch: size, allocate, run in one pass --------------------

// Workspace sizes already asked for, by the metadata of the arguments (every field
// of every array but its data pointer, and every scalar): the size functions are
// pure functions of these, so a hot loop asks once per shape.
struct SizeMemo {
  static constexpr int kCapacity = 256;
  struct Entry {
    std::array<unsigned char, kMaxArgs * sizeof(mla_tensor)> key;
    size_t key_len = 0, bytes = 0;
  };
  std::array<Entry, kCapacity> entries{};
  int used = 0, next = 0, last = 0;

  static size_t make_key(const Converted& c, int n, unsigned char* key) {
    size_t len = 0;
    for (int i = 0; i < n; ++i) {
      if (c.slots[i].tensor == &c.tensors[i]) {
        mla_tensor t = c.tensors[i];
        t.data = nullptr;
        std::memcpy(key + len, &t, sizeof t);
        len += sizeof t;
      } else {
        std::memcpy(key + len, &c.slots[i], sizeof(Slot));
        len += sizeof(Slot);
      }
    }
    return len;
  }
  // The last hit first: a decode loop repeats one shape for every layer of a step.
  const size_t* find(const unsigned char* key, size_t len) {
    auto same = [&](int i) {
      return entries[i].key_len == len && std::memcmp(entries[i].key.data(), key, len) == 0;
    };
    if (last < used && same(last)) return &entries[last].bytes;
    for (int i = 0; i < used; ++i)
      if (same(i)) {
        last = i;
        return &entries[i].bytes;
      }
    return nullptr;
  }
  void add(const unsigned char* key, size_t len, size_t bytes) {
    Entry& e = entries[next];
    std::memcpy(e.key.data(), key, len);
    e.key_len = len;
    e.bytes = bytes;
    next = (next + 1) % kCapacity;
    used = used < kCapacity ? used + 1 : used;
  }
};

// The Python arguments: those of the size function, then workspace (an array or
// None), stream, alloc (a callable alloc(nbytes, like) -> array, like = the first
// argument, or None). With alloc, a missing or too small workspace is replaced by
// a new one. Returns the workspace used (None when the call needed none), which
// the caller may keep and pass back.
template <int RunId, class RunSig, int SizeId, class SizeSig>
struct AutoBinder;

template <int RunId, class... R, int SizeId, class... S>
struct AutoBinder<RunId, int32_t(R...), SizeId, int32_t(S...)> {
  static constexpr int kPrefix = int(sizeof...(S)) - 1;  // the size function's inputs
  static_assert(sizeof...(R) == size_t(kPrefix) + 3, "run = size inputs + ws, bytes, stream");
  static_assert(std::is_same_v<std::tuple_element_t<kPrefix, std::tuple<S...>>, size_t*>,
                "the size function ends with its size_t* result");
  static_assert(std::is_same_v<std::tuple_element_t<kPrefix, std::tuple<R...>>, void*> &&
                    std::is_same_v<std::tuple_element_t<kPrefix + 1, std::tuple<R...>>, size_t> &&
                    std::is_same_v<std::tuple_element_t<kPrefix + 2, std::tuple<R...>>, void*>,
                "the run function ends with workspace, workspace_bytes, stream");
  inline static SizeMemo memo;

  static PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    const OpState& run = g_ops[RunId];
    const OpState& size = g_ops[SizeId];
    if (run.fn == nullptr || size.fn == nullptr) {
      raise_fmt(MLA_ERR_UNSUPPORTED, "%s: not in the loaded libmla (built from an older tree?)",
                run.spec->c_name);
      return nullptr;
    }
    if (nargs != kPrefix + 3) {
      raise_fmt(MLA_ERR_INVALID_VALUE, "%s (auto) takes %d arguments (%zd given)", run.spec->c_name,
                kPrefix + 3, nargs);
      return nullptr;
    }
    PyObject* ws_obj = args[kPrefix];
    PyObject* stream_obj = args[kPrefix + 1];
    PyObject* alloc = args[kPrefix + 2];
    void* stream = nullptr;
    if (!ptr_arg(stream_obj, "stream", &stream)) return nullptr;
    const int64_t dl_stream = stream_obj == Py_None ? -1 : int64_t(uintptr_t(stream));
    Converted c;
    if (!convert<S...>(size, args, kPrefix, &c, dl_stream)) return nullptr;
    size_t need = 0;
    unsigned char key[sizeof(SizeMemo::Entry::key)];
    const size_t key_len = SizeMemo::make_key(c, kPrefix, key);
    if (const size_t* hit = memo.find(key, key_len)) {
      need = *hit;
    } else {
      c.slots[kPrefix].out_size = &c.out_size;
      int32_t st;
      Py_BEGIN_ALLOW_THREADS;
      st = invoke<S...>(size.fn, c, std::index_sequence_for<S...>{});
      Py_END_ALLOW_THREADS;
      if (st != MLA_OK) return finish(st, c, false);
      need = c.out_size;
      memo.add(key, key_len, need);
    }
    // The workspace: the caller's, or one allocated by its framework beside arg 0
    // (alloc None: never; a workspace too small is then the C++ check's to refuse).
    Ref owned;
    PyObject* ws = ws_obj;
    void* ws_ptr = nullptr;
    size_t ws_bytes = 0;
    if (ws != Py_None) {
      mla_tensor t;
      if (!to_tensor(ws, "workspace", true, dl_stream, &t, &c.keep)) return nullptr;
      int64_t n = dtype_size(t.dtype);
      for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
      ws_ptr = t.data;
      ws_bytes = size_t(n);
      if (ws_bytes < need && alloc != Py_None) ws = Py_None;  // outgrown: a new one
    }
    if (ws == Py_None && need > 0 && alloc != Py_None) {
      Ref n(PyLong_FromSize_t(need));
      if (!n) return nullptr;
      owned.p = PyObject_CallFunctionObjArgs(alloc, n.p, args[0], nullptr);
      if (!owned) return nullptr;
      ws = owned.p;
      mla_tensor t;
      if (!to_tensor(ws, "workspace", true, dl_stream, &t, &c.keep)) return nullptr;
      ws_ptr = t.data;
      ws_bytes = need;
    } else if (ws == Py_None) {
      ws_ptr = nullptr;
      ws_bytes = 0;
    }
    c.slots[kPrefix].ptr = ws_ptr;
    c.slots[kPrefix + 1].size = ws_bytes;
    c.slots[kPrefix + 2].ptr = stream;
    const int32_t st = call_c<R...>(run.fn, c);
    if (st != MLA_OK) return finish(st, c, false);
    if (ws == Py_None) Py_RETURN_NONE;
    Py_INCREF(ws);
    return ws;
  }
};

#define MLA_AUTO_OPS(X)                                                           \
  X(mla_decode, mla_decode, mla_decode_workspace_size)                            \
  X(mla_sparse_decode, mla_sparse_decode_ws, mla_sparse_decode_workspace_size)    \
  X(mla_sparse_prefill, mla_sparse_prefill_ws, mla_sparse_prefill_workspace_size) \
  X(mla_indexer_select_prefill, mla_indexer_select_prefill,                       \
    mla_indexer_select_prefill_workspace_size)

PyMethodDef g_auto_methods[] = {
#define MLA_AUTO_DEF(name, run, size)                                            \
  {#name "_auto",                                                                \
   reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(                   \
       &AutoBinder<op_##run, std::remove_pointer_t<decltype(&::run)>, op_##size, \
                   std::remove_pointer_t<decltype(&::size)>>::call)),            \
   METH_FASTCALL,                                                                \
   #name "_auto(<" #size                                                         \
         " inputs>, workspace, stream, alloc): sizes (once per shape), "         \
         "allocates when workspace is None, runs; returns the workspace used."},
    MLA_AUTO_OPS(MLA_AUTO_DEF)
#undef MLA_AUTO_DEF
        {nullptr, nullptr, 0, nullptr}};

PyMethodDef g_op_methods[kNumOps + 1] = {
#define MLA_OP_DEF(fn, args)                                                                      \
  {#fn,                                                                                           \
   reinterpret_cast<PyCFunction>(                                                                 \
       reinterpret_cast<void (*)()>(&op_entry<op_##fn, std::remove_pointer_t<decltype(&::fn)>>)), \
   METH_FASTCALL, "C ABI " #fn "(" args "): arrays of any framework."},
    MLA_OPS(MLA_OP_DEF)
#undef MLA_OP_DEF
        {nullptr, nullptr, 0, nullptr}};

// ---- module functions ------------------------------------------------------------

// bind(handle, errors_by_code, base_error): looks up the C ABI in the library that
// ctypes loaded (its dlopen handle) and records the exception classes.
PyObject* bind(PyObject*, PyObject* args) {
  unsigned long long handle = 0;
  PyObject* by_code = nullptr;
  PyObject* base = nullptr;
  if (!PyArg_ParseTuple(args, "KOO", &handle, &by_code, &base)) return nullptr;
  if (!PyDict_Check(by_code)) {
    PyErr_SetString(PyExc_TypeError, "bind: errors_by_code must be a dict");
    return nullptr;
  }
  void* h = reinterpret_cast<void*>(uintptr_t(handle));
  auto last = reinterpret_cast<LastErrorFn>(dlsym(h, "mla_last_error_message"));
  if (last == nullptr) {
    PyErr_SetString(PyExc_ImportError, "bind: mla_last_error_message not found in the library");
    return nullptr;
  }
  bind_error_classes(by_code, base);
  g_lib = h;
  g_last_error = last;
  for (int i = 0; i < kNumOps; ++i) g_ops[i].fn = dlsym(h, kSpecs[i].c_name);
  Py_RETURN_NONE;
}

// tensor(x, name, writable, stream) -> (data, dtype, device_type, device_id, shape, strides,
// hold):
// what a C call would see for x (tests; the ctypes path's struct-taking functions).
PyObject* tensor(PyObject*, PyObject* args) {
  PyObject* x = nullptr;
  const char* name = nullptr;
  int writable = 0;
  long long stream = -1;
  if (!PyArg_ParseTuple(args, "Osp|L", &x, &name, &writable, &stream)) return nullptr;
  mla_tensor t;
  Keep keep;
  if (!to_tensor(x, name, writable != 0, stream, &t, &keep)) return nullptr;
  Ref shape(PyTuple_New(t.ndim));
  Ref strides(PyTuple_New(t.ndim));
  if (!shape || !strides) return nullptr;
  for (int d = 0; d < t.ndim; ++d) {
    PyTuple_SetItem(shape.p, d, PyLong_FromLongLong(t.shape[d]));
    PyTuple_SetItem(strides.p, d, PyLong_FromLongLong(t.strides[d]));
  }
  // What the view points into when x is not the owner (a DLPack capsule, a NumPy
  // view of an __array_interface__ object): the caller keeps it through the call.
  PyObject* hold = keep.n > 0 ? keep.objs[keep.n - 1] : Py_None;
  return Py_BuildValue("(KiiiOOO)", (unsigned long long)uintptr_t(t.data), t.dtype, t.device_type,
                       t.device_id, shape.p, strides.p, hold);
}

PyMethodDef g_methods[] = {
    {"bind", bind, METH_VARARGS, "bind(dlopen_handle, errors_by_code, base_error)"},
    {"tensor", tensor, METH_VARARGS,
     "tensor(x, name, writable, stream=-1) -> (data, dtype, device_type, device_id, shape, "
     "strides, hold)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module =
    module_def("_ext", "The compiled half of mla's call machinery (see mla/_call.py).", g_methods);

bool intern_names() {
  struct {
    PyObject** slot;
    const char* text;
  } all[] = {{&g_names.dtype, "dtype"},
             {&g_names.shape, "shape"},
             {&g_names.stride, "stride"},
             {&g_names.strides, "strides"},
             {&g_names.data_ptr, "data_ptr"},
             {&g_names.is_cuda, "is_cuda"},
             {&g_names.is_cpu, "is_cpu"},
             {&g_names.get_device, "get_device"},
             {&g_names.device, "device"},
             {&g_names.array_interface, "__array_interface__"},
             {&g_names.dlpack, "__dlpack__"},
             {&g_names.dlpack_device, "__dlpack_device__"},
             {&g_names.name, "name"},
             {&g_names.byteorder, "byteorder"},
             {&g_names.max_version, "max_version"},
             {&g_names.stream, "stream"},
             {&g_names.module, "__module__"},
             {&g_names.data, "data"},
             {&g_names.typestr, "typestr"},
             {&g_names.type, "type"}};
  for (auto& n : all) {
    *n.slot = PyUnicode_InternFromString(n.text);
    if (*n.slot == nullptr) return false;
  }
  return true;
}

}  // namespace

PyMODINIT_FUNC PyInit__ext(void) {
  if (!intern_names()) return nullptr;
  g_vectorcall_method =
      reinterpret_cast<VectorcallMethodFn>(dlsym(RTLD_DEFAULT, "PyObject_VectorcallMethod"));
  for (int i = 0; i < kNumOps; ++i) {
    g_ops[i].spec = &kSpecs[i];
    g_ops[i].num_names = parse_names(kSpecs[i].args, g_ops[i].names);
    for (int a = 0; a < g_ops[i].num_names; ++a) {
      if (std::strcmp(g_ops[i].names[a].text, "kv_format") == 0) g_ops[i].format_arg = a;
      if (std::strcmp(g_ops[i].names[a].text, "stream") == 0) g_ops[i].stream_arg = a;
    }
  }
  PyObject* m = PyModule_Create(&g_module);
  if (m == nullptr) return nullptr;
  if (PyModule_AddFunctions(m, g_op_methods) < 0 || PyModule_AddFunctions(m, g_auto_methods) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
