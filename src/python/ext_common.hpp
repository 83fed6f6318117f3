// What the two compiled Python modules (mla._ext, mla._torch_ext) share: the mla.errors
// classes by status code and raising them, owned references, and the range-checked
// conversion of a Python integer argument.
//
// Each module includes this header once, into its own shared object: the definitions
// have internal linkage, so each module holds its own error table (bound by its own
// bind()) and nothing is exported. Only CPython's limited API (3.10) is used, which
// mla._ext is built against.
#pragma once
#include <Python.h>

#include <cstdint>
#include <cstdio>
#include <utility>

#include "mla/c_api.h"

namespace {

PyObject* g_errors[128] = {};  // status code -> exception class (bind_error_classes)
PyObject* g_base_error = nullptr;

// Raises the mla.errors class for `code` (MlaError for a code without its own class;
// RuntimeError before bind()).
void raise_code(int code, const char* msg) {
  PyObject* cls = (code >= 0 && code < 128 && g_errors[code]) ? g_errors[code] : g_base_error;
  if (cls == nullptr) cls = PyExc_RuntimeError;
  PyErr_SetString(cls, msg);
}

template <class... A>
void raise_fmt(int code, const char* fmt, A... a) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, a...);
  raise_code(code, buf);
}

// bind()'s error classes: `by_code` a dict {status code: class}, `base` MlaError.
// Codes outside [0, 128) are ignored.
void bind_error_classes(PyObject* by_code, PyObject* base) {
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(by_code, &pos, &key, &value)) {
    const long code = PyLong_AsLong(key);
    if (code < 0 || code >= 128) continue;
    Py_INCREF(value);
    Py_XDECREF(g_errors[code]);
    g_errors[code] = value;
  }
  PyErr_Clear();
  Py_INCREF(base);
  Py_XDECREF(g_base_error);
  g_base_error = base;
}

// A str() (or repr()) of an object for messages (never fails: "?" instead).
struct Repr {
  PyObject* s = nullptr;
  const char* c = "?";
  explicit Repr(PyObject* o, bool use_str = true) {
    s = use_str ? PyObject_Str(o) : PyObject_Repr(o);
    if (s) {
      const char* u = PyUnicode_AsUTF8AndSize(s, nullptr);
      if (u) c = u;
    }
    PyErr_Clear();
  }
  Repr(const Repr&) = delete;
  Repr& operator=(const Repr&) = delete;
  ~Repr() { Py_XDECREF(s); }
};

// An owned reference that releases itself.
struct Ref {
  PyObject* p = nullptr;
  Ref() = default;
  explicit Ref(PyObject* o) : p(o) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  ~Ref() { Py_XDECREF(p); }
  explicit operator bool() const { return p != nullptr; }
  PyObject* release() { return std::exchange(p, nullptr); }
};

// A Python integer (anything with __index__, not a float) in [lo, hi] as *v; else the
// invalid_value or out_of_range error naming the argument, and false.
bool int_arg(PyObject* o, const char* name, int64_t lo, int64_t hi, int64_t* v) {
  if (PyFloat_Check(o) || !PyIndex_Check(o)) {
    Repr r(o, false);
    raise_fmt(MLA_ERR_INVALID_VALUE, "%s = %s is not an integer", name, r.c);
    return false;
  }
  Ref idx(PyNumber_Index(o));
  if (!idx) return false;
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(idx.p, &overflow);
  if (x == -1 && PyErr_Occurred()) return false;
  if (overflow != 0 || x < lo || x > hi) {
    Repr r(idx.p);
    raise_fmt(MLA_ERR_OUT_OF_RANGE, "%s = %s does not fit in [%lld, %lld]", name, r.c,
              (long long)lo, (long long)hi);
    return false;
  }
  *v = x;
  return true;
}

// A single-phase module definition: `methods` and no per-module state.
PyModuleDef module_def(const char* name, const char* doc, PyMethodDef* methods) {
  PyModuleDef d = {
      PyModuleDef_HEAD_INIT, name, doc, -1, methods, nullptr, nullptr, nullptr, nullptr};
  return d;
}

}  // namespace
