// Records (dicts of feature name to value, as a service's JSON bodies are parsed) read into
// rows in C++, value by value, without Python objects made on the way.
//
// Why: read in Python, a list of records costs many times the model's own call (4,096 records
// of 28 values: 7 ms of taking each record's values in the model's order, asking each value's
// type and converting them through NumPy, against 0.4 ms for the model), because every value is
// touched by the interpreter three times.  Here each record's items are walked in its own order
// (a record's keys are mostly the same objects, in the same order, as the record before it: a
// pointer compared, not a key looked up) and each value converted where it lies.  Built by
// silvanforge.inputs.records through silvanforge.inputs.native, against Python alone.
//
// A plan (a capsule made by `plan`) holds the model's feature names in its order and, for each
// categorical feature, its labels' codes: labels that are strings by their UTF-8 bytes, labels
// that are numbers by their float64 value (where the model's labels are all numbers).  `read`
// writes the rows into a float32 or float64 array and answers 0, or 1 where it vouches for
// nothing: anything the Python reader decides otherwise than plainly (a record that is not a
// dict, a key missing or unknown, a value of another type, a label the model does not know, an
// integer past float64), which the caller then reads in Python, with its errors.
//
// What is read, as silvanforge.inputs.records reads it: a number feature's value a float, an int
// or a bool (exactly those types), None missing; a categorical feature's value a str label (its
// code), a number where the labels are numbers (its code; NaN missing), None missing.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

// (a label's code, -1 where a value is not one of the model's)
struct Labelled {
  std::unordered_map<std::string_view, double> strings;
  std::unordered_map<double, double> numbers;
  bool reads_numbers = false;  // (the labels are all numbers: a number value is looked up)
};

struct Plan {
  Py_ssize_t width = 0;
  std::vector<std::string> storage;  // (the names' and labels' bytes, which the maps view: reserved, never moved)
  std::unordered_map<std::string_view, Py_ssize_t> features;  // a name's UTF-8 -> its feature
  std::vector<std::string_view> names;  // a feature's name's UTF-8
  std::vector<int> labelled;  // feature -> index in `labels`, -1 for a number feature
  std::vector<Labelled> labels;
};

const char* const CAPSULE = "silvanforge.record_rows.plan";

void free_plan(PyObject* capsule) { delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, CAPSULE)); }

bool utf8(PyObject* text, std::string_view& out) {
  Py_ssize_t size;
  const char* data = PyUnicode_AsUTF8AndSize(text, &size);
  if (!data) {
    PyErr_Clear();  // (a lone surrogate: the Python reader decides)
    return false;
  }
  out = std::string_view(data, static_cast<size_t>(size));
  return true;
}

double zero_signless(double x) { return x == 0.0 ? 0.0 : x; }  // (-0.0 and 0.0 one key, as Python's dict has them)

// plan(names, labelled) -> a plan, or None where the names repeat or a name or label is no UTF-8
// (a lone surrogate): the Python reader decides.
// `names`: the model's feature names in its order (str); `labelled`: (feature, {str label: code},
// {float label: code} or None) for each categorical feature, None where a number value is never
// a label.
PyObject* plan(PyObject*, PyObject* args) {
  PyObject *names, *labelled;
  if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &names, &PyList_Type, &labelled)) return nullptr;
  auto* p = new Plan();
  const Py_ssize_t width = PyTuple_GET_SIZE(names);
  p->width = width;
  Py_ssize_t strings = width;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(labelled); i++) {
    PyObject* item = PyList_GET_ITEM(labelled, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3 || !PyDict_Check(PyTuple_GET_ITEM(item, 1))) {
      delete p;
      return PyErr_Format(PyExc_TypeError, "labelled: (feature, {label: code}, {number: code} or None) tuples");
    }
    strings += PyDict_GET_SIZE(PyTuple_GET_ITEM(item, 1));
  }
  p->storage.reserve(static_cast<size_t>(strings));
  p->labelled.assign(static_cast<size_t>(width), -1);
  for (Py_ssize_t f = 0; f < width; f++) {
    PyObject* name = PyTuple_GET_ITEM(names, f);
    std::string_view bytes;
    if (!PyUnicode_CheckExact(name)) {
      delete p;
      return PyErr_Format(PyExc_TypeError, "names: a tuple of str");
    }
    if (!utf8(name, bytes)) {  // (a lone surrogate: no record's key is read as it here)
      delete p;
      Py_RETURN_NONE;
    }
    p->storage.emplace_back(bytes);
    p->names.emplace_back(p->storage.back());
    if (!p->features.emplace(p->names.back(), f).second) {  // (a name twice)
      delete p;
      Py_RETURN_NONE;
    }
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(labelled); i++) {
    PyObject* item = PyList_GET_ITEM(labelled, i);
    const Py_ssize_t feature = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
    if (feature < 0 || feature >= width) {
      delete p;
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "labelled: a feature out of range");
      return nullptr;
    }
    p->labelled[static_cast<size_t>(feature)] = static_cast<int>(p->labels.size());
    Labelled& l = p->labels.emplace_back();
    PyObject *key, *value;
    Py_ssize_t at = 0;
    while (PyDict_Next(PyTuple_GET_ITEM(item, 1), &at, &key, &value)) {
      std::string_view bytes;
      const double code = PyFloat_AsDouble(value);
      if (!PyUnicode_CheckExact(key) || (code == -1.0 && PyErr_Occurred())) {
        delete p;
        PyErr_Clear();
        return PyErr_Format(PyExc_TypeError, "labelled: str labels and number codes");
      }
      if (!utf8(key, bytes)) {  // (a label with a lone surrogate: the Python reader's records)
        delete p;
        Py_RETURN_NONE;
      }
      p->storage.emplace_back(bytes);
      l.strings.emplace(std::string_view(p->storage.back()), code);
    }
    PyObject* numbers = PyTuple_GET_ITEM(item, 2);
    if (numbers != Py_None) {
      if (!PyDict_Check(numbers)) {
        delete p;
        return PyErr_Format(PyExc_TypeError, "labelled: the number labels a dict or None");
      }
      l.reads_numbers = true;
      at = 0;
      while (PyDict_Next(numbers, &at, &key, &value)) {
        const double label = PyFloat_AsDouble(key), code = PyFloat_AsDouble(value);
        if (PyErr_Occurred()) {
          delete p;
          return nullptr;
        }
        l.numbers.emplace(zero_signless(label), code);
      }
    }
  }
  return PyCapsule_New(p, CAPSULE, free_plan);
}

// A number feature's value as float64; false where the Python reader decides it.
inline bool number(PyObject* v, double& x) {
  if (PyFloat_CheckExact(v)) {
    x = PyFloat_AS_DOUBLE(v);
    return true;
  }
  if (v == Py_None) {
    x = NAN;
    return true;
  }
  if (PyLong_CheckExact(v)) {
    x = PyLong_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {  // (past float64: the Python reader names it)
      PyErr_Clear();
      return false;
    }
    return true;
  }
  if (v == Py_True || v == Py_False) {
    x = v == Py_True ? 1.0 : 0.0;
    return true;
  }
  return false;
}

// A categorical feature's value as its code; false where the Python reader decides it.
inline bool label(const Labelled& l, PyObject* v, double& x) {
  if (v == Py_None) {
    x = NAN;
    return true;
  }
  if (PyUnicode_CheckExact(v)) {
    std::string_view bytes;
    if (!utf8(v, bytes)) return false;
    const auto found = l.strings.find(bytes);
    if (found == l.strings.end()) return false;  // (a label the model does not know: missing, or refused)
    x = found->second;
    return true;
  }
  if (!l.reads_numbers) return false;
  double value;
  if (PyFloat_CheckExact(v)) {
    value = PyFloat_AS_DOUBLE(v);
  } else if (PyLong_CheckExact(v)) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || i > (1LL << 53) || i < -(1LL << 53)) {  // (as Python ints past 2**53 compare: there)
      PyErr_Clear();
      return false;
    }
    value = static_cast<double>(i);
  } else {
    return false;
  }
  if (value != value) {
    x = NAN;
    return true;
  }
  const auto found = l.numbers.find(zero_signless(value));
  if (found == l.numbers.end()) return false;
  x = found->second;
  return true;
}

template <typename T>
bool read_rows(const Plan& p, PyObject* const* records, Py_ssize_t n, T* out) {
  const Py_ssize_t width = p.width;
  // A record's keys as the last record had them, by position (objects alive for the whole call,
  // held by their records: a pointer compared is the same key).  A dict's keys are distinct
  // strings and the names are, so `width` keys that are all names give each feature once.
  std::vector<PyObject*> key_at(static_cast<size_t>(width), nullptr);
  std::vector<Py_ssize_t> feature_at(static_cast<size_t>(width), -1);
  for (Py_ssize_t r = 0; r < n; r++) {
    PyObject* record = records[r];
    if (!PyDict_CheckExact(record) || PyDict_GET_SIZE(record) != width) return false;
    T* row = out + r * width;
    PyObject *key, *value;
    Py_ssize_t at = 0;
    for (size_t j = 0; PyDict_Next(record, &at, &key, &value); j++) {
      Py_ssize_t f;
      if (key == key_at[j]) {
        f = feature_at[j];
      } else {
        std::string_view bytes;
        if (!PyUnicode_CheckExact(key) || !utf8(key, bytes)) return false;
        f = feature_at[j];
        if (f < 0 || bytes != p.names[static_cast<size_t>(f)]) {
          // (not the name the last record had here: records parsed one by one, JSON Lines,
          // hold the same names as other objects, compared above without a lookup)
          const auto found = p.features.find(bytes);
          if (found == p.features.end()) return false;  // (a key the model does not have)
          f = feature_at[j] = found->second;
        }
        key_at[j] = key;
      }
      double x;
      const int l = p.labelled[static_cast<size_t>(f)];
      if (!(l < 0 ? number(value, x) : label(p.labels[static_cast<size_t>(l)], value, x))) return false;
      row[f] = static_cast<T>(x);
    }
  }
  return true;
}

// read(plan, records, out) -> 0 (the rows written) or 1 (left to the Python reader; `out` may be
// written in part).  `records`: a list of dicts, or one dict; `out`: a C-ordered (len(records),
// width) float32 or float64 array.
PyObject* read(PyObject*, PyObject* args) {
  PyObject *capsule, *records, *out;
  Py_buffer view;
  if (!PyArg_ParseTuple(args, "OOO", &capsule, &records, &out)) return nullptr;
  if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return nullptr;
  const Plan* p = static_cast<const Plan*>(PyCapsule_GetPointer(capsule, CAPSULE));
  const bool single = PyDict_Check(records);
  if (!p || (!single && !PyList_CheckExact(records))) {
    PyBuffer_Release(&view);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "records: a list of dicts, or a dict");
    return nullptr;
  }
  PyObject* const* items = single ? &records : reinterpret_cast<PyListObject*>(records)->ob_item;
  const Py_ssize_t n = single ? 1 : PyList_GET_SIZE(records);
  // (NumPy's format of its native floats: "f" and "d", "<"/"=" before them where it says the order)
  std::string_view format(view.format ? view.format : "B");
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) format.remove_prefix(1);
  const bool f32 = view.itemsize == 4 && format == "f", f64 = view.itemsize == 8 && format == "d";
  if (!(f32 || f64) || view.len != n * p->width * view.itemsize) {
    PyBuffer_Release(&view);
    return PyErr_Format(PyExc_ValueError, "out: a C-ordered float32 or float64 array of (%zd, %zd)", n, p->width);
  }
  const bool done = f32 ? read_rows(*p, items, n, static_cast<float*>(view.buf))
                        : read_rows(*p, items, n, static_cast<double*>(view.buf));
  PyBuffer_Release(&view);
  return PyLong_FromLong(done ? 0 : 1);
}

PyMethodDef methods[] = {
    {"plan", plan, METH_VARARGS, "plan(names, labelled) -> a plan, or None where the Python reader decides"},
    {"read", read, METH_VARARGS, "read(plan, records, out) -> 0 read, 1 left to the Python reader"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_rows", "Records read into rows in C++.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__record_rows() { return PyModule_Create(&module); }
