// Rows of a pyarrow Table (or of a pandas frame of Arrow-backed columns) read where arrow keeps
// them: the C++ objects behind the Python ones.
//
// Why: a request's table is made anew for each call, and every way pyarrow offers to hand its
// columns over costs more than the compiled model's whole call for a few rows (a one-row table
// of 28 columns: `to_batches` and `to_tensor` 3.5 us, the C data export 6 us; the model 2 us).
// Here the Table is unwrapped (pyarrow's own exported `pyarrow_unwrap_table`) and each column's
// buffers are read in place: 0.5 us for 28 columns.  Built by silvanforge.inputs.arrow_native
// against the installed pyarrow's headers and libarrow (their ABI changes every release, so it
// is compiled on the user's machine, never shipped).
//
// A plan (a capsule made by `plan`) says which column holds which feature: number columns (of
// integer or float types) and dictionary columns, whose indices map through a code table of the
// model's (`set_labels`: the dictionary the table was made for, its float64 codes with a last
// entry for a missing value, and which categories the model refuses).  `read` writes the rows
// into a float32 or float64 array and answers 0, or 1 where it read nothing it can vouch for
// (a dictionary other than the one registered, a category the model refuses, a type other than
// the plan's): the caller then reads the table as it would without this module, which raises
// its errors and registers the new dictionary's codes; or 2, reading nothing, where it was asked
// to compare the table's columns with the plan's first and they differ (`read_blocks` likewise
// for a pandas frame's blocks).  A dictionary other than the registered one is read through the
// model's codes of its string labels where the plan has them (`set_label_codes`), and number
// columns on features whose labels are numbers through those (`set_number_codes`).
//
// `read_stream` reads an Arrow C stream (the Arrow PyCapsule Interface: polars' frames) the same
// way, from the C data interface's structs as they lie, without arrow's import of them.
//
// `read_blocks` reads a pandas frame's blocks in one walk: its Arrow-backed columns as above,
// and, given by `set_frame` and `set_categories`, its NumPy blocks of numbers, its object
// columns and its Categorical columns (`frame_blocks` says what each block is).  They live here
// because a frame mixes them: pandas 3 holds strings in arrow beside NumPy numbers, and a
// request's frame is read in one call or not at all.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arrow/array/array_base.h>
#include <arrow/array/data.h>
#include <arrow/buffer.h>
#include <arrow/c/abi.h>
#include <arrow/c/bridge.h>
#include <arrow/chunked_array.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>
#include <arrow/type.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace {

using Type = arrow::Type;
typedef std::shared_ptr<arrow::Table> (*UnwrapTable)(PyObject*);
typedef std::shared_ptr<arrow::Array> (*UnwrapArray)(PyObject*);
typedef std::shared_ptr<arrow::ChunkedArray> (*UnwrapChunkedArray)(PyObject*);
typedef PyObject* (*WrapTable)(const std::shared_ptr<arrow::Table>&);
UnwrapTable unwrap_table;
WrapTable wrap_table;
UnwrapArray unwrap_array;
UnwrapChunkedArray unwrap_chunked_array;

const char kPlanName[] = "silvanforge.arrow_rows.plan";

struct Number {
  int column, feature, type;
};

// The model's codes of its string labels (a repeated label: its first code), by which a
// dictionary other than the registered one is read without Python (polars' Categorical columns
// and tables encoded for each request hold only the labels they use, in their own order), and a
// column of strings value by value.  An open-addressed table of a few labels, a label's first 8
// bytes kept beside it: a lookup of a short value is a hash of one word and one comparison of it
// (a value's tail copied by a copy of its length and compared as a std::string: 25 ns a value
// against 8).
struct LabelCodes {
  std::vector<std::string> labels;
  std::vector<uint64_t> heads;  // (each label's first 8 bytes, zero-padded: most labels whole)
  std::vector<double> codes;
  std::vector<int32_t> slots;  // (a power of two of them, -1 empty, else an index into labels)
  uint64_t mask = 0;
  bool unseen_error = false;  // (a label outside them refused: the caller raises its error)

  // A string's first 8 bytes, zero-padded (a byte at a time past its end: a value may end its
  // buffer).
  static uint64_t head(std::string_view s) {
    uint64_t word = 0;
    if (s.size() >= 8) {
      std::memcpy(&word, s.data(), 8);
    } else {
      for (size_t i = 0; i < s.size(); i++) word |= static_cast<uint64_t>(static_cast<uint8_t>(s[i])) << (8 * i);
    }
    return word;
  }

  static uint64_t hash(std::string_view s, uint64_t first) {
    uint64_t h = (s.size() + 1) * 0x9E3779B97F4A7C15ULL;
    h = (h ^ first) * 0xBF58476D1CE4E5B9ULL;
    for (size_t i = 8; i < s.size(); i += 8) {
      const uint64_t word = head(s.substr(i, 8));
      h = ((h ^ (h >> 31)) ^ word) * 0xBF58476D1CE4E5B9ULL;
    }
    h = (h ^ (h >> 31)) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
  }

  const double* find(std::string_view s) const {
    if (slots.empty()) return nullptr;
    const uint64_t first = head(s);
    for (uint64_t at = hash(s, first) & mask;; at = (at + 1) & mask) {
      const int32_t k = slots[at];
      if (k < 0) return nullptr;
      const std::string& label = labels[k];
      if (heads[k] == first && label.size() == s.size() &&
          (s.size() <= 8 || std::memcmp(label.data() + 8, s.data() + 8, s.size() - 8) == 0))
        return &codes[k];
    }
  }

  // The labels, a label's code its position (a repeated one keeps its first).
  void build(std::vector<std::string> given) {
    size_t size = 8;
    while (size < 2 * given.size() + 2) size *= 2;
    slots.assign(size, -1);
    mask = size - 1;
    for (size_t i = 0; i < given.size(); i++) {
      if (find(given[i])) continue;
      uint64_t at = hash(given[i], head(given[i])) & mask;
      while (slots[at] >= 0) at = (at + 1) & mask;
      slots[at] = static_cast<int32_t>(labels.size());
      heads.push_back(head(given[i]));
      labels.push_back(std::move(given[i]));
      codes.push_back(static_cast<double>(i));
    }
  }
};

// A column of strings (or their views) on a feature whose labels are strings: JSON rows made a
// table, polars' String columns, pandas' str columns held by arrow.
struct StringColumn {
  int column, feature, type;
  std::shared_ptr<const LabelCodes> codes;  // (set_string_codes; null until given)
};

struct Dictionary {
  int column, feature, index_type, value_type;
  std::shared_ptr<arrow::ArrayData> labels;  // the dictionary the codes were made for
  Py_buffer lut{}, unseen{};                 // float64 codes (last: missing); bools or empty
  bool has_lut = false, has_unseen = false;
  std::shared_ptr<const LabelCodes> label_codes;  // (set_label_codes; null where none given)

  void release() {
    if (has_lut) PyBuffer_Release(&lut);
    if (has_unseen) PyBuffer_Release(&unseen);
    has_lut = has_unseen = false;
    labels.reset();
  }
};

// A number column on a feature whose labels are numbers (pandas' integer categories, which
// polars.from_pandas and arrow make plain integers): each value is a label, mapped to its code.
struct NumberLabels {
  std::unordered_map<double, double> codes;  // (a repeated label: its first code)
  bool unseen_error = false;  // (a value outside them refused by the caller; else missing)
};

struct Labelled {
  int column, feature, type;
  std::shared_ptr<const NumberLabels> labels;  // (set_number_codes; null until given)
};

// A pandas block of NumPy numbers (pandas holds a frame's columns of one dtype as one 2-D array,
// a column a row of it): its rows `rows[k]` are the features `features[k]` (`set_frame`), read as
// the labels `labels[k]` where it is given (a feature whose labels are numbers: pandas' integer
// categories, which records hold as plain integers), else as numbers.
struct NumpyBlock {
  int block, kind;
  std::vector<int> rows, features;
  std::vector<std::shared_ptr<const NumberLabels>> labels;
};

// A column of Python objects (pandas' object dtype: records that mix None with numbers, or
// labels): row `row` of block `block`; `codes` the model's string labels where the feature has
// them, else null (numbers).
struct ObjectColumn {
  int block, row, feature;
  std::shared_ptr<const LabelCodes> codes;
};

// A pandas Categorical column (a block of its own) read through the code table of the categories
// last registered for it (`set_categories`): its codes (NumPy integers, -1 missing) through `lut`
// (a code a category, a last one for -1); categories other than the registered ones (compared by
// value: a request's frame holds them anew), or a category the model refuses (`unseen`), leave
// the rows to the caller, which registers the new ones.
struct CategoricalColumn {
  int block, feature;
  std::shared_ptr<arrow::ArrayData> labels;  // the registered categories, where arrow holds them
  std::string numbers, format;               // ... else their NumPy values' bytes and format
  std::vector<double> lut;
  std::vector<uint8_t> unseen;  // (empty: none refused)
  bool registered = false;
};

struct Plan {
  int width;
  std::vector<Number> numbers;
  std::vector<Dictionary> dictionaries;
  std::vector<Labelled> labelled;
  std::vector<StringColumn> strings;
  // A pandas frame's NumPy and object blocks (`set_frame`), read by `read_blocks` beside its
  // Arrow-backed columns (the `numbers` and `strings` above, whose column is their block), and
  // the value an object column holds for a missing one besides None and NaN (pandas' NA).
  std::vector<NumpyBlock> numpy_blocks;
  std::vector<ObjectColumn> objects;
  std::vector<CategoricalColumn> categoricals;
  PyObject* missing = nullptr;
  // The table's columns as `matches` compares them: names, and kinds (type id, and a dictionary's
  // index and label type ids; -1 where none), three a column.
  std::vector<std::string> names;
  std::vector<int> kinds;
  // The schema a table last matched by (held: its address is no other schema's while it is
  // kept; set and read with the GIL held): a table of that same schema object, the same table
  // again or a service's tables made with one schema, is not compared field by field (28 names
  // compared were a sixth of a one-row read).
  std::shared_ptr<arrow::Schema> matched;
  ~Plan() {
    for (auto& d : dictionaries) d.release();
    Py_XDECREF(missing);  // (a capsule's destructor runs with the GIL held)
  }
};

const uint8_t* buffer(const arrow::ArrayData& data, size_t i) {
  if (data.buffers.size() <= i || !data.buffers[i]) return nullptr;
  return data.buffers[i]->data();  // (null where the buffer is not in host memory)
}

bool valid(const uint8_t* bits, int64_t i) { return !bits || ((bits[i >> 3] >> (i & 7)) & 1); }

bool has_nulls(const arrow::ArrayData& data) {
  return data.buffers.size() > 0 && data.buffers[0] && data.null_count.load() != 0;
}

int byte_width(int type) {
  switch (type) {
    case Type::INT8: case Type::UINT8: return 1;
    case Type::INT16: case Type::UINT16: return 2;
    case Type::INT32: case Type::UINT32: case Type::FLOAT: return 4;
    case Type::INT64: case Type::UINT64: case Type::DOUBLE: return 8;
    default: return 0;
  }
}

// An array where its buffers lie, as the readers below take it: made from arrow's C++ ArrayData
// (a pyarrow table's chunk) or from the C data interface's ArrowArray (a stream's, whose type the
// stream's schema told), so that both are read by one code.
struct Span {
  int type = 0;
  int64_t length = 0, offset = 0;
  const uint8_t* validity = nullptr;  // (null where no value is null)
  const uint8_t* const* buffers = nullptr;  // (validity first, as arrow numbers them)
  int64_t n_buffers = 0;
  const uint8_t* own[4] = {};           // (an ArrayData's buffers, where it has at most 4)
  std::vector<const uint8_t*> more;     // (and where it has more: string views' data)
  // (Copied, a copy points at its own `own`.)

  explicit Span(const arrow::ArrayData& data) : type(data.type->id()), length(data.length), offset(data.offset) {
    n_buffers = static_cast<int64_t>(data.buffers.size());
    if (n_buffers <= 4) {
      for (int64_t i = 0; i < n_buffers; i++) own[i] = buffer(data, i);
      buffers = own;
    } else {
      for (int64_t i = 0; i < n_buffers; i++) more.push_back(buffer(data, i));
      buffers = more.data();
    }
    validity = has_nulls(data) ? buffers[0] : nullptr;
  }
  Span(const ArrowArray& array, int array_type)
      : type(array_type), length(array.length), offset(array.offset),
        buffers(reinterpret_cast<const uint8_t* const*>(array.buffers)), n_buffers(array.n_buffers) {
    validity = n_buffers > 0 && array.null_count != 0 ? buffers[0] : nullptr;
  }
  Span(const Span& o)
      : type(o.type), length(o.length), offset(o.offset), validity(o.validity), n_buffers(o.n_buffers), more(o.more) {
    std::memcpy(own, o.own, sizeof own);
    buffers = o.buffers == o.own ? own : o.buffers == o.more.data() ? more.data() : o.buffers;
  }
  Span& operator=(const Span&) = delete;

  const uint8_t* at(int64_t i) const { return i < n_buffers ? buffers[i] : nullptr; }
};

// A span narrowed to `count` of its values from `start` while it lives (a tile of rows).
struct Window {
  Span& span;
  const int64_t offset, length;
  Window(Span& s, int64_t start, int64_t count) : span(s), offset(s.offset), length(s.length) {
    s.offset += start;
    s.length = count;
  }
  ~Window() {
    span.offset = offset;
    span.length = length;
  }
};

// For each byte of a validity bitmap, its 8 values' masks (all ones where valid), as words of
// `Bits` (the width of a float or a double): a column's nulls are made NaN 8 values at a time by
// and/or with its row of masks, which the compiler vectorises with any SSE, without a branch.
template <typename Bits>
const Bits (&valid_masks())[256][8] {
  static const auto table = [] {
    struct Table { Bits rows[256][8]; } t{};
    for (int byte = 0; byte < 256; byte++)
      for (int k = 0; k < 8; k++) t.rows[byte][k] = (byte >> k) & 1 ? ~Bits(0) : Bits(0);
    return t;
  }();
  return table.rows;
}

// The values of a column in column order (contiguous) with its nulls made NaN, 8 at a time:
// 4096 rows of 28 float32 columns, 5% null, read in 27 us against 75 (a select a value, a
// branch a byte) and 12 without nulls.
template <typename Out>
void nulls_as_nan_contiguous(const uint8_t* bits, int64_t offset, Out* out, int64_t i, int64_t n) {
  typedef typename std::conditional<sizeof(Out) == 4, uint32_t, uint64_t>::type Bits;
  const Out nan_value = static_cast<Out>(NAN);
  Bits nan;
  std::memcpy(&nan, &nan_value, sizeof nan);
  const auto& masks = valid_masks<Bits>();
  for (; i + 8 <= n; i += 8) {
    const Bits* m = masks[bits[(offset + i) >> 3]];
    Bits word[8];
    std::memcpy(word, out + i, sizeof word);
    for (int k = 0; k < 8; k++) word[k] = (word[k] & m[k]) | (nan & ~m[k]);
    std::memcpy(out + i, word, sizeof word);
  }
  for (; i < n; i++)
    if (!valid(bits, offset + i)) out[i] = nan_value;
}

// Every value goes through float64, as the column path converts them: an integer of 64 bits
// rounds twice on its way to float32 there, so here too.  The values are copied in one loop
// (contiguous where the rows are in column order: vectorised), then the nulls made NaN, a
// byte of the validity bitmap at a time where it has one (in column order by its masks).
template <typename T, typename Out>
void copy_numbers(const Span& data, const uint8_t* values, Out* out, int64_t row_stride) {
  const T* v = reinterpret_cast<const T*>(values) + data.offset;
  const int64_t n = data.length;
  if (row_stride == 1) {
    for (int64_t i = 0; i < n; i++) out[i] = static_cast<Out>(static_cast<double>(v[i]));
  } else {
    for (int64_t i = 0; i < n; i++) out[i * row_stride] = static_cast<Out>(static_cast<double>(v[i]));
  }
  const uint8_t* bits = data.validity;
  if (!bits) return;
  const Out nan = static_cast<Out>(NAN);
  int64_t i = 0;
  for (; i < n && ((data.offset + i) & 7); i++)
    if (!valid(bits, data.offset + i)) out[i * row_stride] = nan;
  if (row_stride == 1) {
    nulls_as_nan_contiguous(bits, data.offset, out, i, n);
    return;
  }
  for (; i + 8 <= n; i += 8) {  // (a byte's 8 values chosen without branches: nulls fall anywhere)
    const unsigned byte = bits[(data.offset + i) >> 3];
    if (byte == 0xFF) continue;
    Out* at = out + i * row_stride;
    for (int k = 0; k < 8; k++) at[k * row_stride] = (byte >> k) & 1 ? at[k * row_stride] : nan;
  }
  for (; i < n; i++)
    if (!valid(bits, data.offset + i)) out[i * row_stride] = nan;
}

template <typename Out>
bool read_numbers(const Span& data, Out* out, int64_t row_stride) {
  if (data.type == Type::NA) {  // (a column of nulls alone, as records missing a value in every row make: missing)
    for (int64_t i = 0; i < data.length; i++) out[i * row_stride] = static_cast<Out>(NAN);
    return true;
  }
  const uint8_t* values = data.at(1);
  if (!values && data.length) return false;
  switch (data.type) {
    case Type::INT8: copy_numbers<int8_t>(data, values, out, row_stride); break;
    case Type::UINT8: copy_numbers<uint8_t>(data, values, out, row_stride); break;
    case Type::INT16: copy_numbers<int16_t>(data, values, out, row_stride); break;
    case Type::UINT16: copy_numbers<uint16_t>(data, values, out, row_stride); break;
    case Type::INT32: copy_numbers<int32_t>(data, values, out, row_stride); break;
    case Type::UINT32: copy_numbers<uint32_t>(data, values, out, row_stride); break;
    case Type::INT64: copy_numbers<int64_t>(data, values, out, row_stride); break;
    case Type::UINT64: copy_numbers<uint64_t>(data, values, out, row_stride); break;
    case Type::FLOAT: copy_numbers<float>(data, values, out, row_stride); break;
    case Type::DOUBLE: copy_numbers<double>(data, values, out, row_stride); break;
    default: return false;
  }
  return true;
}

// Values of a number column read as labels (`NumberLabels`): missing where null or NaN.  False
// where the caller must read the column, which raises its error: a value the model refuses, an
// integer float64 cannot hold exactly.  `found` and `unseen`: whether a value was a label, and
// one was not (the caller refuses a column none of whose values is a label: codes, not labels).
template <typename T, typename Out>
bool copy_labelled(const Span& data, const uint8_t* values, const NumberLabels& labels, Out* out,
                   int64_t row_stride, bool& found, bool& unseen) {
  const T* v = reinterpret_cast<const T*>(values) + data.offset;
  const Out nan = static_cast<Out>(NAN);
  for (int64_t i = 0; i < data.length; i++, out += row_stride) {
    if (!valid(data.validity, data.offset + i)) {
      *out = nan;
      continue;
    }
    if constexpr (std::is_integral<T>::value && sizeof(T) == 8) {  // (past 2**53: the caller's exact lookup)
      if (v[i] > static_cast<T>(9007199254740992LL)) return false;
      if constexpr (std::is_signed<T>::value)
        if (v[i] < -static_cast<T>(9007199254740992LL)) return false;
    }
    const double x = static_cast<double>(v[i]);
    if (x != x) {
      *out = nan;
      continue;
    }
    const auto code = labels.codes.find(x);
    if (code == labels.codes.end()) {
      if (labels.unseen_error) return false;
      unseen = true;
      *out = nan;
    } else {
      found = true;
      *out = static_cast<Out>(code->second);
    }
  }
  return true;
}

template <typename Out>
bool read_labelled(const Span& data, const NumberLabels& labels, Out* out, int64_t row_stride, bool& found,
                   bool& unseen) {
  const uint8_t* values = data.at(1);
  if (!values && data.length) return false;
  switch (data.type) {
    case Type::INT8: return copy_labelled<int8_t>(data, values, labels, out, row_stride, found, unseen);
    case Type::UINT8: return copy_labelled<uint8_t>(data, values, labels, out, row_stride, found, unseen);
    case Type::INT16: return copy_labelled<int16_t>(data, values, labels, out, row_stride, found, unseen);
    case Type::UINT16: return copy_labelled<uint16_t>(data, values, labels, out, row_stride, found, unseen);
    case Type::INT32: return copy_labelled<int32_t>(data, values, labels, out, row_stride, found, unseen);
    case Type::UINT32: return copy_labelled<uint32_t>(data, values, labels, out, row_stride, found, unseen);
    case Type::INT64: return copy_labelled<int64_t>(data, values, labels, out, row_stride, found, unseen);
    case Type::UINT64: return copy_labelled<uint64_t>(data, values, labels, out, row_stride, found, unseen);
    case Type::FLOAT: return copy_labelled<float>(data, values, labels, out, row_stride, found, unseen);
    case Type::DOUBLE: return copy_labelled<double>(data, values, labels, out, row_stride, found, unseen);
    default: return false;
  }
}

// Label `i` of an array of strings (or binaries) in any of arrow's layouts: offsets and data, or
// views (16 bytes a value, its length first; up to 12 bytes inline after it, else the index of
// a data buffer and an offset in it), as polars hands its strings over.  False where a buffer
// is missing or the value lies outside it.
bool label_value(const Span& a, int64_t i, std::string_view& value) {
  switch (a.type) {
    case Type::STRING: case Type::BINARY: case Type::LARGE_STRING: case Type::LARGE_BINARY: {
      const uint8_t* offsets = a.at(1);
      const uint8_t* data = a.at(2);
      if (!offsets) return false;
      int64_t start, end;
      if (a.type == Type::LARGE_STRING || a.type == Type::LARGE_BINARY) {
        start = reinterpret_cast<const int64_t*>(offsets)[a.offset + i];
        end = reinterpret_cast<const int64_t*>(offsets)[a.offset + i + 1];
      } else {
        start = reinterpret_cast<const int32_t*>(offsets)[a.offset + i];
        end = reinterpret_cast<const int32_t*>(offsets)[a.offset + i + 1];
      }
      if (end < start || (end > start && !data)) return false;
      value = std::string_view(reinterpret_cast<const char*>(data) + start, end - start);
      return true;
    }
    case Type::STRING_VIEW: case Type::BINARY_VIEW: {
      const uint8_t* views = a.at(1);
      if (!views) return false;
      const uint8_t* v = views + (a.offset + i) * 16;
      int32_t size, index, offset;
      std::memcpy(&size, v, 4);
      if (size < 0) return false;
      if (size <= 12) {
        value = std::string_view(reinterpret_cast<const char*>(v + 4), size);
        return true;
      }
      std::memcpy(&index, v + 8, 4);
      std::memcpy(&offset, v + 12, 4);
      const uint8_t* data = index >= 0 ? a.at(2 + static_cast<int64_t>(index)) : nullptr;
      if (!data || offset < 0) return false;
      value = std::string_view(reinterpret_cast<const char*>(data + offset), size);
      return true;
    }
    default: return false;
  }
}

// Whether two dictionaries hold the same labels in the same order (a request's table holds its
// dictionary anew: compared by value, a few bytes).  Labels with nulls never compare equal here.
bool same_labels(const Span& a, const Span& b) {
  if (a.length != b.length || a.type != b.type || a.validity || b.validity) return false;
  const int width = byte_width(a.type);
  if (width) {
    const uint8_t* va = a.at(1);
    const uint8_t* vb = b.at(1);
    return va && vb && std::memcmp(va + a.offset * width, vb + b.offset * width, a.length * width) == 0;
  }
  std::string_view la, lb;
  for (int64_t i = 0; i < a.length; i++)
    if (!label_value(a, i, la) || !label_value(b, i, lb) || la != lb) return false;
  return true;
}

struct Codes {
  int feature = 0, index_type = 0, value_type = 0;
  std::shared_ptr<arrow::ArrayData> labels;
  const double* lut = nullptr;
  int64_t count = 0;  // labels (the lut's last entry, past them: missing)
  const uint8_t* unseen = nullptr;
  std::shared_ptr<const LabelCodes> label_codes;
  PyObject* keep[2] = {nullptr, nullptr};

  explicit Codes(const Dictionary& d)
      : feature(d.feature), index_type(d.index_type), value_type(d.value_type), labels(d.labels),
        label_codes(d.label_codes) {
    if (d.has_lut) {
      lut = static_cast<const double*>(d.lut.buf);
      count = d.lut.len / static_cast<Py_ssize_t>(sizeof(double)) - 1;
      keep[0] = d.lut.obj;
      Py_XINCREF(keep[0]);
    }
    if (d.has_unseen) {
      unseen = static_cast<const uint8_t*>(d.unseen.buf);
      keep[1] = d.unseen.obj;
      Py_XINCREF(keep[1]);
    }
  }
  Codes(const Codes&) = delete;
  Codes& operator=(const Codes&) = delete;
  ~Codes() {  // (with the GIL held: a read drops its Codes before it returns to Python)
    Py_XDECREF(keep[0]);
    Py_XDECREF(keep[1]);
  }
};

// The codes of a column's own labels (a lut as set_labels gives: one a label, then missing) from
// the model's codes of its labels, and which of them the model refuses (`unseen`: a row holding
// one leaves the read to the caller, which raises its error; else such a label is missing).
// False where a label is missing or not a string (bytes are not the model's str labels).
bool codes_of_labels(const Span& dictionary, const LabelCodes& known, std::vector<double>& lut,
                     std::vector<uint8_t>& unseen) {
  if (dictionary.validity ||
      (dictionary.type != Type::STRING && dictionary.type != Type::LARGE_STRING && dictionary.type != Type::STRING_VIEW))
    return false;
  lut.resize(dictionary.length + 1);
  if (known.unseen_error) unseen.assign(dictionary.length + 1, 0);
  std::string_view label;
  for (int64_t i = 0; i < dictionary.length; i++) {
    if (!label_value(dictionary, i, label)) return false;
    const double* code = known.find(label);
    lut[i] = code ? *code : NAN;
    if (!code && known.unseen_error) unseen[i] = 1;
  }
  lut[dictionary.length] = NAN;
  return true;
}

// A column of strings read as labels: each value's code, missing where null or a label the model
// does not know; false where it refuses that label (the caller raises its error) or a value lies
// outside its buffers.
template <typename Out>
bool read_strings(const Span& data, const LabelCodes& known, Out* out, int64_t row_stride) {
  const Out nan = static_cast<Out>(NAN);
  std::string_view value;
  for (int64_t i = 0; i < data.length; i++, out += row_stride) {
    if (!valid(data.validity, data.offset + i)) {
      *out = nan;
      continue;
    }
    if (!label_value(data, i, value)) return false;
    const double* code = known.find(value);
    if (!code && known.unseen_error) return false;
    *out = code ? static_cast<Out>(*code) : nan;
  }
  return true;
}

template <typename Index, typename Out>
bool copy_codes(const Span& data, const double* lut, int64_t count, const uint8_t* unseen, Out* out,
                int64_t row_stride) {
  const Index* index = reinterpret_cast<const Index*>(data.at(1));
  if (!index && data.length) return false;
  index += data.offset;
  const uint8_t* bits = data.validity;
  for (int64_t i = 0; i < data.length; i++, out += row_stride) {
    int64_t own = count;
    if (valid(bits, data.offset + i)) {
      own = static_cast<int64_t>(index[i]);
      if (own < 0 || own >= count || (unseen && unseen[own])) return false;
    }
    *out = static_cast<Out>(lut[own]);
  }
  return true;
}

// The lut a chunk's indices are read through: the registered dictionary's where the chunk's
// dictionary holds those labels, else one made from the model's codes of its labels where the
// plan has them (false: neither).  Found once a chunk (or a stream's batch), not once a tile.
struct Lut {
  const double* lut = nullptr;
  int64_t count = 0;
  const uint8_t* unseen = nullptr;
  std::vector<double> own;  // (the chunk's own, where its labels are not the registered ones)
  std::vector<uint8_t> own_unseen;
};

bool find_lut(const Span& dictionary, const Codes& d, Lut& found) {
  if (d.lut && d.labels && dictionary.type == d.value_type && same_labels(Span(*d.labels), dictionary)) {
    found.lut = d.lut;
    found.count = d.count;
    found.unseen = d.unseen;
    return true;
  }
  if (!d.label_codes || !codes_of_labels(dictionary, *d.label_codes, found.own, found.own_unseen)) return false;
  found.lut = found.own.data();
  found.count = static_cast<int64_t>(found.own.size()) - 1;
  found.unseen = found.own_unseen.empty() ? nullptr : found.own_unseen.data();
  return true;
}

// A chunk's codes (its indices, of the plan's index type) through `lut`.
template <typename Out>
bool read_indices(const Span& data, int index_type, const Lut& l, Out* out, int64_t row_stride) {
  switch (index_type) {
    case Type::INT8: return copy_codes<int8_t>(data, l.lut, l.count, l.unseen, out, row_stride);
    case Type::UINT8: return copy_codes<uint8_t>(data, l.lut, l.count, l.unseen, out, row_stride);
    case Type::INT16: return copy_codes<int16_t>(data, l.lut, l.count, l.unseen, out, row_stride);
    case Type::UINT16: return copy_codes<uint16_t>(data, l.lut, l.count, l.unseen, out, row_stride);
    case Type::INT32: return copy_codes<int32_t>(data, l.lut, l.count, l.unseen, out, row_stride);
    case Type::UINT32: return copy_codes<uint32_t>(data, l.lut, l.count, l.unseen, out, row_stride);
    case Type::INT64: return copy_codes<int64_t>(data, l.lut, l.count, l.unseen, out, row_stride);
    case Type::UINT64: return copy_codes<uint64_t>(data, l.lut, l.count, l.unseen, out, row_stride);
    default: return false;
  }
}

template <typename Out>
bool read_codes(const Span& data, const Span& dictionary, const Codes& d, Out* out, int64_t row_stride) {
  Lut l;
  return find_lut(dictionary, d, l) && read_indices(data, d.index_type, l, out, row_stride);
}

// (Pointers, not shared_ptrs: the table or the caller's list holds the columns while they are
// read, and a shared_ptr copied and dropped a column cost a third of a one-row read.)
typedef std::vector<const arrow::ChunkedArray*> ColumnList;

// What one read reads, gathered with the GIL held: the plan's columns (a Table's, or those of a
// list of ChunkedArrays: the columns of a pandas frame of Arrow-backed dtypes; null where there
// is no such column) and the dictionaries' codes.  Then the copy needs no Python object.
struct Reading {
  ColumnList numbers, dictionaries, labelled, strings;
  std::vector<std::unique_ptr<Codes>> codes;
  std::vector<std::shared_ptr<const NumberLabels>> labels;  // (each labelled column's, held by the read)
  std::vector<std::shared_ptr<const LabelCodes>> string_codes;  // (each string column's)
  int64_t rows = -1;  // (a list's: found from its columns)
  std::vector<std::shared_ptr<arrow::ChunkedArray>> held;  // (a list's columns, unwrapped: held by the read)
};

const arrow::ChunkedArray* column_of(const std::vector<std::shared_ptr<arrow::ChunkedArray>>* columns,
                                     PyObject* list, int i, Reading& r) {
  if (columns) return i < static_cast<int>(columns->size()) ? (*columns)[i].get() : nullptr;
  if (i >= PyList_GET_SIZE(list)) return nullptr;
  std::shared_ptr<arrow::ChunkedArray> column = unwrap_chunked_array(PyList_GET_ITEM(list, i));
  if (!column) return nullptr;  // (not one)
  r.held.push_back(std::move(column));
  return r.held.back().get();
}

// The plan's codes as a read holds them (another thread's set_labels meanwhile frees nothing
// it reads); false where one is not given yet.
bool gather_codes(const Plan& plan, Reading& r) {
  for (const Dictionary& d : plan.dictionaries) {
    if (!d.has_lut && !d.label_codes) return false;
    r.codes.emplace_back(new Codes(d));
  }
  for (const Labelled& l : plan.labelled) {
    if (!l.labels) return false;
    r.labels.push_back(l.labels);
  }
  for (const StringColumn& c : plan.strings) {
    if (!c.codes) return false;
    r.string_codes.push_back(c.codes);
  }
  return true;
}

// False where the read is the caller's (a dictionary without codes yet, a labelled column
// without its labels' codes).
bool gather(const Plan& plan, const arrow::Table* table, PyObject* list, Reading& r) {
  r.numbers.reserve(plan.numbers.size());
  r.dictionaries.reserve(plan.dictionaries.size());
  r.codes.reserve(plan.dictionaries.size());
  const auto* columns = table ? &table->columns() : nullptr;
  for (const Number& n : plan.numbers) r.numbers.push_back(column_of(columns, list, n.column, r));
  if (!gather_codes(plan, r)) return false;
  for (const Dictionary& d : plan.dictionaries) r.dictionaries.push_back(column_of(columns, list, d.column, r));
  for (const Labelled& l : plan.labelled) r.labelled.push_back(column_of(columns, list, l.column, r));
  for (const StringColumn& c : plan.strings) r.strings.push_back(column_of(columns, list, c.column, r));
  return true;
}

// The spans of one stretch of rows (a stream's batch, or a table's columns each of one chunk):
// the plan's number columns, dictionary columns and their dictionaries, labelled columns.
struct Spans {
  std::vector<Span> numbers, codes, dictionaries, labelled, strings;
};

// Rows per tile where rows are written in row order: a tile of rows is written by every column
// before the next, so that its rows stay in the first cache while the columns are written into
// them (a column written down 1,024 rows at once, 112 bytes apart, touched as many lines:
// 1,024 rows of 28 float32 columns took 41 us so, 15 in column order).
template <typename Out>
int64_t tile_rows(int64_t row_stride, int64_t length) {
  if (row_stride == 1) return length > 0 ? length : 1;
  return std::max<int64_t>(8, ((16 << 10) / (row_stride * static_cast<int64_t>(sizeof(Out)))) & ~int64_t(7));
}

// `length` rows of `s` written from row `row` of the rows at `base`; `found` and `unseen` each
// labelled column's (copy_labelled), over all the stretches of a read.
template <typename Out>
bool read_spans(const Plan& plan, const Reading& r, Spans& s, int64_t length, char* base, int64_t row,
                int64_t rs, int64_t cs, std::vector<uint8_t>& found, std::vector<uint8_t>& unseen) {
  const int64_t tile = tile_rows<Out>(rs, length);
  std::vector<Lut> luts(s.codes.size());
  for (size_t k = 0; k < s.codes.size(); k++)
    if (!find_lut(s.dictionaries[k], *r.codes[k], luts[k])) return false;
  for (int64_t start = 0; start < length; start += tile) {
    const int64_t count = std::min(tile, length - start);
    Out* rows = reinterpret_cast<Out*>(base) + (row + start) * rs;
    for (size_t k = 0; k < s.numbers.size(); k++) {
      Window window(s.numbers[k], start, count);
      if (!read_numbers(s.numbers[k], rows + plan.numbers[k].feature * cs, rs)) return false;
    }
    for (size_t k = 0; k < s.codes.size(); k++) {
      Window window(s.codes[k], start, count);
      if (!read_indices(s.codes[k], r.codes[k]->index_type, luts[k], rows + plan.dictionaries[k].feature * cs, rs))
        return false;
    }
    for (size_t k = 0; k < s.labelled.size(); k++) {
      Window window(s.labelled[k], start, count);
      bool any = false, other = false;
      if (!read_labelled(s.labelled[k], *r.labels[k], rows + plan.labelled[k].feature * cs, rs, any, other))
        return false;
      found[k] |= any;
      unseen[k] |= other;
    }
    for (size_t k = 0; k < s.strings.size(); k++) {
      Window window(s.strings[k], start, count);
      if (!read_strings(s.strings[k], *r.string_codes[k], rows + plan.strings[k].feature * cs, rs)) return false;
    }
  }
  return true;
}

// Whether no labelled column holds values none of which is a label (codes: the caller refuses them).
bool labels_found(const std::vector<uint8_t>& found, const std::vector<uint8_t>& unseen) {
  for (size_t k = 0; k < found.size(); k++)
    if (unseen[k] && !found[k]) return false;
  return true;
}

template <typename Out>
bool read_columns(const Plan& plan, const Reading& r, char* base, int64_t row_stride, int64_t column_stride) {
  std::vector<uint8_t> found(plan.labelled.size()), unseen(plan.labelled.size());
  // Columns of one chunk each (a request's table): as one stretch, in tiles of rows.
  bool single = true;
  for (const auto& column : r.numbers) single = single && column && column->num_chunks() == 1;
  for (const auto& column : r.dictionaries) single = single && column && column->num_chunks() == 1;
  for (const auto& column : r.labelled) single = single && column && column->num_chunks() == 1;
  for (const auto& column : r.strings) single = single && column && column->num_chunks() == 1;
  if (single) {
    Spans s;  // (room made first: a Span copied as a vector grows costs as much as reading it)
    s.numbers.reserve(r.numbers.size());
    s.codes.reserve(r.dictionaries.size());
    s.dictionaries.reserve(r.dictionaries.size());
    s.labelled.reserve(r.labelled.size());
    s.strings.reserve(r.strings.size());
    for (size_t k = 0; k < r.numbers.size(); k++) {
      s.numbers.emplace_back(*r.numbers[k]->chunk(0)->data());
      if (s.numbers.back().type != plan.numbers[k].type || s.numbers.back().length != r.rows) return false;
    }
    for (const auto& column : r.dictionaries) {
      const arrow::ArrayData& chunk = *column->chunk(0)->data();
      if (chunk.type->id() != Type::DICTIONARY || !chunk.dictionary || chunk.length != r.rows) return false;
      s.codes.emplace_back(chunk);
      s.dictionaries.emplace_back(*chunk.dictionary);
    }
    for (size_t k = 0; k < r.labelled.size(); k++) {
      s.labelled.emplace_back(*r.labelled[k]->chunk(0)->data());
      if (s.labelled.back().type != plan.labelled[k].type || s.labelled.back().length != r.rows) return false;
    }
    for (size_t k = 0; k < r.strings.size(); k++) {
      s.strings.emplace_back(*r.strings[k]->chunk(0)->data());
      if (s.strings.back().type != plan.strings[k].type || s.strings.back().length != r.rows) return false;
    }
    return read_spans<Out>(plan, r, s, r.rows, base, 0, row_stride, column_stride, found, unseen) &&
           labels_found(found, unseen);
  }
  // Columns of several chunks: each read a chunk at a time by `read` (k, the chunk, where it goes).
  auto by_chunks = [&](const auto& planned, const ColumnList& columns, auto read) {
    for (size_t k = 0; k < columns.size(); k++) {
      const auto& column = columns[k];
      if (!column || column->length() != r.rows) return false;
      Out* out = reinterpret_cast<Out*>(base) + planned[k].feature * column_stride;
      for (int c = 0; c < column->num_chunks(); c++) {
        const Span data(*column->chunk(c)->data());
        if (data.type != planned[k].type || !read(k, data, out)) return false;
        out += data.length * row_stride;
      }
    }
    return true;
  };
  if (!by_chunks(plan.numbers, r.numbers, [&](size_t, const Span& data, Out* out) {
        return read_numbers(data, out, row_stride);
      }))
    return false;
  for (size_t k = 0; k < r.codes.size(); k++) {
    const Codes& d = *r.codes[k];
    const auto& column = r.dictionaries[k];
    if (!column || column->length() != r.rows) return false;
    Out* out = reinterpret_cast<Out*>(base) + d.feature * column_stride;
    for (int c = 0; c < column->num_chunks(); c++) {
      const arrow::ArrayData& chunk = *column->chunk(c)->data();
      if (chunk.type->id() != Type::DICTIONARY || !chunk.dictionary) return false;
      const Span data(chunk);
      if (!read_codes(data, Span(*chunk.dictionary), d, out, row_stride)) return false;
      out += data.length * row_stride;
    }
  }
  if (!by_chunks(plan.labelled, r.labelled, [&](size_t k, const Span& data, Out* out) {
        bool any = false, other = false;
        const bool read = read_labelled(data, *r.labels[k], out, row_stride, any, other);
        found[k] |= any;
        unseen[k] |= other;
        return read;
      }))
    return false;
  if (!by_chunks(plan.strings, r.strings, [&](size_t k, const Span& data, Out* out) {
        return read_strings(data, *r.string_codes[k], out, row_stride);
      }))
    return false;
  return labels_found(found, unseen);
}

// Values from which a read lets other threads run (its copy touches no Python object): below
// it, releasing and taking the GIL back costs more than the copy.
const int64_t kFreeThreadsValues = 1 << 16;

Plan* get_plan(PyObject* capsule) {
  return static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanName));
}

void drop_plan(PyObject* capsule) {
  delete get_plan(capsule);
}

// plan(width, numbers, dictionaries[, columns[, labelled[, strings]]]): numbers a sequence of (column, feature,
// arrow type id), dictionaries of (column, feature, index type id, value type id), columns (what
// `matches` compares) of (name, type id, index type id, value type id), -1 where a column has
// none; labelled (number columns read as labels: set_number_codes) and strings (string columns
// read as labels: set_string_codes) of (column, feature, type id).
// A sequence of (column, feature, type id) into `into` (Numbers, Labelled or StringColumns): false
// with an error set where an item is not such a triple or its feature lies outside `width`.
template <typename Column>
bool column_triples(PyObject* sequence, const char* what, int width, std::vector<Column>& into) {
  if (!sequence || sequence == Py_None) return true;
  PyObject* items = PySequence_Fast(sequence, what);
  if (!items) return false;
  bool ok = true;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items) && ok; i++) {
    Column c{};
    ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "iii", &c.column, &c.feature, &c.type);
    if (ok && (c.feature < 0 || c.feature >= width || c.column < 0)) {
      PyErr_SetString(PyExc_ValueError, "feature out of range");
      ok = false;
    }
    if (ok) into.push_back(c);
  }
  Py_DECREF(items);
  return ok;
}

PyObject* make_plan(PyObject*, PyObject* args) {
  int width;
  PyObject *numbers, *dictionaries, *columns = nullptr, *labelled = nullptr, *strings = nullptr;
  if (!PyArg_ParseTuple(args, "iOO|OOO", &width, &numbers, &dictionaries, &columns, &labelled, &strings))
    return nullptr;
  std::unique_ptr<Plan> plan(new Plan());
  plan->width = width;
  if (!column_triples(numbers, "numbers: a sequence", width, plan->numbers) ||
      !column_triples(labelled, "labelled: a sequence", width, plan->labelled) ||
      !column_triples(strings, "strings: a sequence", width, plan->strings))
    return nullptr;
  for (const StringColumn& c : plan->strings)
    if (c.type != Type::STRING && c.type != Type::LARGE_STRING && c.type != Type::STRING_VIEW)
      return PyErr_Format(PyExc_ValueError, "strings: a string type");
  PyObject* items = PySequence_Fast(dictionaries, "dictionaries: a sequence");
  if (!items) return nullptr;
  plan->dictionaries.resize(PySequence_Fast_GET_SIZE(items));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++) {
    Dictionary& d = plan->dictionaries[i];
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "iiii", &d.column, &d.feature, &d.index_type,
                          &d.value_type)) {
      Py_DECREF(items);
      return nullptr;
    }
  }
  Py_DECREF(items);
  if (columns && columns != Py_None) {
    items = PySequence_Fast(columns, "columns: a sequence");
    if (!items) return nullptr;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++) {
      const char* name;
      Py_ssize_t size;
      int kind[3];
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "s#iii", &name, &size, &kind[0], &kind[1],
                            &kind[2])) {
        Py_DECREF(items);
        return nullptr;
      }
      plan->names.emplace_back(name, size);
      plan->kinds.insert(plan->kinds.end(), kind, kind + 3);
    }
    Py_DECREF(items);
  }
  for (const Dictionary& d : plan->dictionaries)
    if (d.feature < 0 || d.feature >= width || d.column < 0) return PyErr_Format(PyExc_ValueError, "feature out of range");
  PyObject* capsule = PyCapsule_New(plan.get(), kPlanName, drop_plan);
  if (capsule) plan.release();
  return capsule;
}

// set_labels(plan, k, dictionary, lut, unseen): dictionary column k's codes, for tables whose
// dictionary holds the labels of `dictionary` (a pyarrow Array).
PyObject* set_labels(PyObject*, PyObject* args) {
  PyObject *capsule, *dictionary, *lut, *unseen;
  Py_ssize_t k;
  if (!PyArg_ParseTuple(args, "OnOOO", &capsule, &k, &dictionary, &lut, &unseen)) return nullptr;
  Plan* plan = get_plan(capsule);
  if (!plan) return nullptr;
  if (k < 0 || k >= static_cast<Py_ssize_t>(plan->dictionaries.size()))
    return PyErr_Format(PyExc_IndexError, "no dictionary column %zd", k);
  const std::shared_ptr<arrow::Array> labels = unwrap_array(dictionary);
  if (!labels) return PyErr_Format(PyExc_TypeError, "dictionary: not a pyarrow Array");
  Py_buffer codes, refused;
  if (PyObject_GetBuffer(lut, &codes, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return nullptr;
  if (std::strcmp(codes.format, "d") != 0 || codes.len != (labels->length() + 1) * 8) {
    PyBuffer_Release(&codes);
    return PyErr_Format(PyExc_ValueError, "lut: float64, one code a label and one for missing");
  }
  const bool has_unseen = unseen != Py_None;
  if (has_unseen) {
    if (PyObject_GetBuffer(unseen, &refused, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
      PyBuffer_Release(&codes);
      return nullptr;
    }
    if (refused.itemsize != 1 || refused.len != codes.len / 8) {
      PyBuffer_Release(&codes);
      PyBuffer_Release(&refused);
      return PyErr_Format(PyExc_ValueError, "unseen: a bool a code");
    }
  }
  Dictionary& d = plan->dictionaries[k];
  d.release();
  d.labels = labels->data();
  d.lut = codes;
  d.has_lut = true;
  if (has_unseen) {
    d.unseen = refused;
    d.has_unseen = true;
  }
  Py_RETURN_NONE;
}

// The model's string labels as LabelCodes, or null with an error set (not a sequence of str), or
// null without one (a label UTF-8 cannot hold: the column is left to the caller).
std::shared_ptr<LabelCodes> label_codes_of(PyObject* labels, int unseen_error) {
  PyObject* items = PySequence_Fast(labels, "labels: a sequence of str");
  if (!items) return nullptr;
  std::vector<std::string> given;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(items, i);
    if (!PyUnicode_Check(item)) {
      Py_DECREF(items);
      PyErr_SetString(PyExc_TypeError, "labels: a sequence of str");
      return nullptr;
    }
    Py_ssize_t size;
    const char* label = PyUnicode_AsUTF8AndSize(item, &size);
    if (!label) {  // (a lone surrogate: no UTF-8 value of a column equals it)
      Py_DECREF(items);
      PyErr_Clear();
      return nullptr;
    }
    given.emplace_back(label, size);
  }
  Py_DECREF(items);
  auto known = std::make_shared<LabelCodes>();
  known->unseen_error = unseen_error;
  known->build(std::move(given));
  return known;
}

// The model's number labels as NumberLabels (a label's code its position; a repeated one keeps
// its first; NaN never a label), or null with an error set.
std::shared_ptr<NumberLabels> number_labels_of(PyObject* labels, int unseen_error) {
  PyObject* items = PySequence_Fast(labels, "labels: a sequence of floats");
  if (!items) return nullptr;
  auto known = std::make_shared<NumberLabels>();
  known->unseen_error = unseen_error;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++) {
    const double label = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(items, i));
    if (label == -1.0 && PyErr_Occurred()) {
      Py_DECREF(items);
      return nullptr;
    }
    if (label == label) known->codes.emplace(label, static_cast<double>(i));
  }
  Py_DECREF(items);
  return known;
}

// Which of a plan's columns a setter below gives the model's labels of.
enum class Coded { dictionary, string, number };

// The setters: (plan, k, labels, unseen_error), the model's labels of the plan's k-th column of
// that kind.
PyObject* set_codes(PyObject* args, Coded what) {
  PyObject *capsule, *labels;
  Py_ssize_t k;
  int unseen_error;
  if (!PyArg_ParseTuple(args, "OnOp", &capsule, &k, &labels, &unseen_error)) return nullptr;
  Plan* plan = get_plan(capsule);
  if (!plan) return nullptr;
  const size_t count = what == Coded::dictionary ? plan->dictionaries.size()
                       : what == Coded::string   ? plan->strings.size()
                                                 : plan->labelled.size();
  if (k < 0 || k >= static_cast<Py_ssize_t>(count))
    return PyErr_Format(PyExc_IndexError, "no %s column %zd",
                        what == Coded::dictionary ? "dictionary" : what == Coded::string ? "string" : "labelled", k);
  if (what == Coded::number) {
    std::shared_ptr<NumberLabels> known = number_labels_of(labels, unseen_error);
    if (!known) return nullptr;
    plan->labelled[k].labels = std::move(known);
    Py_RETURN_NONE;
  }
  std::shared_ptr<LabelCodes> known = label_codes_of(labels, unseen_error);
  if (!known && PyErr_Occurred()) return nullptr;
  (what == Coded::string ? plan->strings[k].codes : plan->dictionaries[k].label_codes) = std::move(known);
  Py_RETURN_NONE;
}

// set_label_codes(plan, k, labels, unseen_error): the model's labels of dictionary column k (a
// sequence of str, a label's code its position), by which a column holding other labels than the
// registered dictionary is read here; `unseen_error`: a label outside them leaves the read to the
// caller (which refuses it), else it is missing.
PyObject* set_label_codes(PyObject*, PyObject* args) { return set_codes(args, Coded::dictionary); }

// set_string_codes(plan, k, labels, unseen_error): the model's labels of string column k, as
// set_label_codes takes them (until given, a read of the plan is left to the caller).
PyObject* set_string_codes(PyObject*, PyObject* args) { return set_codes(args, Coded::string); }

// set_number_codes(plan, k, labels, unseen_error): labelled column k's labels (a sequence of
// floats, a label's code its position; a repeated one keeps its first), which its values are;
// `unseen_error`: a value outside them leaves the read to the caller (which refuses it), else
// it is missing.
PyObject* set_number_codes(PyObject*, PyObject* args) { return set_codes(args, Coded::number); }

// Whether the table's columns are the plan's (names and kinds, in order): what its schema's
// `equals` tells, without the fingerprint arrow computes a new schema first (10 us for 28
// columns: a request's table is new each call).
bool table_matches(Plan& plan, const arrow::Table& table) {
  if (plan.matched && plan.matched == table.schema()) return true;
  const arrow::Schema& schema = *table.schema();
  if (plan.names.empty() || schema.num_fields() != static_cast<int>(plan.names.size())) return false;
  for (int i = 0; i < schema.num_fields(); i++) {
    const arrow::Field& field = *schema.field(i);
    const arrow::DataType& type = *field.type();
    const int* kind = &plan.kinds[3 * i];
    if (field.name() != plan.names[i] || type.id() != kind[0]) return false;
    if (type.id() == Type::DICTIONARY) {
      const auto& dictionary = static_cast<const arrow::DictionaryType&>(type);
      if (dictionary.index_type()->id() != kind[1] || dictionary.value_type()->id() != kind[2]) return false;
    } else if (kind[1] != -1 || kind[2] != -1) {
      return false;
    }
  }
  plan.matched = table.schema();
  return true;
}

// matches(plan, table): whether the table's columns are the plan's.
PyObject* matches(PyObject*, PyObject* args) {
  PyObject *capsule, *table_object;
  if (!PyArg_ParseTuple(args, "OO", &capsule, &table_object)) return nullptr;
  Plan* plan = get_plan(capsule);
  if (!plan) return nullptr;
  const std::shared_ptr<arrow::Table> table = unwrap_table(table_object);
  if (!table) return PyErr_Format(PyExc_TypeError, "not a pyarrow Table");
  if (table_matches(*plan, *table)) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

// Rows gathered in `r` written to `out` (as `read` takes it): 0, or 1 where they were not all read
// (`done` false: nothing read).  `sized`: `r.rows` is the source's, which `out` must have.
template <typename Read>
PyObject* write_out(const Plan& plan, int64_t rows, bool done, PyObject* out, bool sized, Read read) {
  Py_buffer view;
  if (PyObject_GetBuffer(out, &view, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) return nullptr;
  const bool is_float = std::strcmp(view.format, "f") == 0, is_double = std::strcmp(view.format, "d") == 0;
  if (view.ndim != 2 || view.shape[1] != plan.width || !(is_float || is_double) || view.strides[0] % view.itemsize ||
      view.strides[1] % view.itemsize || (view.shape[0] != rows && (sized || rows >= 0))) {
    PyBuffer_Release(&view);
    return PyErr_Format(PyExc_ValueError, "out: float32 or float64 rows of the table, the plan's width");
  }
  if (done) {
    const int64_t rs = view.strides[0] / view.itemsize, cs = view.strides[1] / view.itemsize;
    char* base = static_cast<char*>(view.buf);
    const bool free_threads =
        rows * static_cast<int64_t>(plan.numbers.size() + plan.dictionaries.size() + plan.labelled.size() +
                                    plan.strings.size()) >=
        kFreeThreadsValues;
    PyThreadState* state = free_threads ? PyEval_SaveThread() : nullptr;
    done = read(base, rs, cs, is_float);
    if (state) PyEval_RestoreThread(state);
  }
  PyBuffer_Release(&view);
  return PyLong_FromLong(done ? 0 : 1);
}

PyObject* write_rows(const Plan& plan, const Reading& r, bool done, PyObject* out, bool sized) {
  return write_out(plan, r.rows, done, out, sized, [&](char* base, int64_t rs, int64_t cs, bool is_float) {
    return is_float ? read_columns<float>(plan, r, base, rs, cs) : read_columns<double>(plan, r, base, rs, cs);
  });
}

// read(plan, source, out[, check]): 0 where the rows are in `out` (a 2-D float32 or float64
// array of the source's rows and the plan's width, in any strides; only the plan's features
// written), 1 where the caller must read them.  `source`: a pyarrow Table, or a list of
// ChunkedArrays of equal lengths (the plan's column numbers index it).  `check`: a table's
// columns compared with the plan's first (`matches`), 2 where they differ (nothing read): a
// request's table read in one call (0.15 us of a one-row call's 3.5 sooner than two).
PyObject* read(PyObject*, PyObject* args) {
  PyObject *capsule, *source, *out;
  int check = 0;
  if (!PyArg_ParseTuple(args, "OOO|p", &capsule, &source, &out, &check)) return nullptr;
  Plan* plan = get_plan(capsule);
  if (!plan) return nullptr;
  Reading r;
  std::shared_ptr<arrow::Table> table;
  PyObject* list = nullptr;
  if (PyList_Check(source)) {
    list = source;
  } else {
    table = unwrap_table(source);
    if (!table) return PyErr_Format(PyExc_TypeError, "not a pyarrow Table");
    if (check && !table_matches(*plan, *table)) return PyLong_FromLong(2);
    r.rows = table->num_rows();
  }
  bool done = gather(*plan, table.get(), list, r);
  if (list) {  // (the rows: the first of the plan's columns' length; each is checked against it)
    for (const auto& column : r.numbers)
      if (column && r.rows < 0) r.rows = column->length();
    for (const ColumnList* columns : {&r.dictionaries, &r.labelled, &r.strings})
      for (const auto& column : *columns)
        if (column && r.rows < 0) r.rows = column->length();
    if (r.rows < 0) done = false;
  }
  return write_rows(*plan, r, done, out, table != nullptr);
}

// Arrow's type id of a C data interface format string, of the types read here (-2 for others,
// which match no plan's).
int format_type(const char* format) {
  if (!format || !format[0]) return -2;
  if (!format[1]) {
    switch (format[0]) {
      case 'n': return Type::NA;
      case 'c': return Type::INT8;
      case 'C': return Type::UINT8;
      case 's': return Type::INT16;
      case 'S': return Type::UINT16;
      case 'i': return Type::INT32;
      case 'I': return Type::UINT32;
      case 'l': return Type::INT64;
      case 'L': return Type::UINT64;
      case 'f': return Type::FLOAT;
      case 'g': return Type::DOUBLE;
      case 'u': return Type::STRING;
      case 'U': return Type::LARGE_STRING;
      case 'z': return Type::BINARY;
      case 'Z': return Type::LARGE_BINARY;
      default: return -2;
    }
  }
  if (std::strcmp(format, "vu") == 0) return Type::STRING_VIEW;
  if (std::strcmp(format, "vz") == 0) return Type::BINARY_VIEW;
  return -2;
}

// Whether a stream's schema (a struct of its columns) has the plan's columns, as table_matches.
bool schema_matches(const Plan& plan, const ArrowSchema& schema) {
  if (plan.names.empty() || !schema.format || std::strcmp(schema.format, "+s") != 0 ||
      schema.n_children != static_cast<int64_t>(plan.names.size()))
    return false;
  for (int64_t i = 0; i < schema.n_children; i++) {
    const ArrowSchema& field = *schema.children[i];
    const int* kind = &plan.kinds[3 * i];
    if (!field.name || plan.names[i] != field.name) return false;
    if (field.dictionary) {
      if (kind[0] != Type::DICTIONARY || format_type(field.format) != kind[1] ||
          format_type(field.dictionary->format) != kind[2])
        return false;
    } else if (format_type(field.format) != kind[0] || kind[1] != -1 || kind[2] != -1) {
      return false;
    }
  }
  return true;
}

// A stream's schema and batches, released with it (the C data interface's structs may be moved).
struct Stream {
  ArrowArrayStream* stream;
  ArrowSchema schema{};
  std::vector<ArrowArray> batches;
  explicit Stream(ArrowArrayStream* s) : stream(s) {}
  ~Stream() {
    for (ArrowArray& batch : batches)
      if (batch.release) batch.release(&batch);
    if (schema.release) schema.release(&schema);
    if (stream->release) stream->release(stream);
  }
  PyObject* error(const char* what) {
    const char* message = stream->get_last_error ? stream->get_last_error(stream) : nullptr;
    return PyErr_Format(PyExc_ValueError, "an Arrow stream's %s: %s", what, message ? message : "failed");
  }
};

// Whether a stream's batches are laid out as read_batches reads them (each a struct of the
// schema's columns of its length, at no offset; dictionaries where the plan has them).
bool batches_readable(const Plan& plan, const Stream& s) {
  for (const ArrowArray& batch : s.batches) {
    if (batch.offset != 0 || batch.n_children != s.schema.n_children || !batch.children) return false;
    for (int64_t i = 0; i < batch.n_children; i++)
      if (!batch.children[i] || batch.children[i]->length != batch.length) return false;
    for (const Number& n : plan.numbers)
      if (n.column >= batch.n_children || (n.type != Type::NA && batch.children[n.column]->n_buffers < 2)) return false;
    for (const Dictionary& d : plan.dictionaries)
      if (d.column >= batch.n_children || batch.children[d.column]->n_buffers < 2 || !batch.children[d.column]->dictionary)
        return false;
    for (const Labelled& l : plan.labelled)
      if (l.column >= batch.n_children || batch.children[l.column]->n_buffers < 2) return false;
    for (const StringColumn& c : plan.strings)
      if (c.column >= batch.n_children || batch.children[c.column]->n_buffers < 2) return false;
  }
  return true;
}

template <typename Out>
bool read_batches(const Plan& plan, const Stream& s, const Reading& r, char* base, int64_t rs, int64_t cs) {
  int64_t row = 0;
  std::vector<uint8_t> found(plan.labelled.size()), unseen(plan.labelled.size());
  Spans spans;  // (room made first, as read_columns makes it)
  spans.numbers.reserve(plan.numbers.size());
  spans.codes.reserve(plan.dictionaries.size());
  spans.dictionaries.reserve(plan.dictionaries.size());
  spans.labelled.reserve(plan.labelled.size());
  spans.strings.reserve(plan.strings.size());
  for (const ArrowArray& batch : s.batches) {
    spans.numbers.clear();
    spans.codes.clear();
    spans.dictionaries.clear();
    spans.labelled.clear();
    spans.strings.clear();
    for (const Number& n : plan.numbers) spans.numbers.emplace_back(*batch.children[n.column], n.type);
    for (const Dictionary& d : plan.dictionaries) {
      const ArrowArray& column = *batch.children[d.column];
      spans.codes.emplace_back(column, d.index_type);
      spans.dictionaries.emplace_back(*column.dictionary, d.value_type);
    }
    for (const Labelled& l : plan.labelled) spans.labelled.emplace_back(*batch.children[l.column], l.type);
    for (const StringColumn& c : plan.strings) spans.strings.emplace_back(*batch.children[c.column], c.type);
    if (!read_spans<Out>(plan, r, spans, batch.length, base, row, rs, cs, found, unseen)) return false;
    row += batch.length;
  }
  return labels_found(found, unseen);
}

// The stream's batches as a pyarrow Table (arrow's own import: 40 us for 28 columns, so only
// where the caller reads them), or None where arrow cannot import them (a type it does not
// know, such as polars' 128-bit integers): the caller reads the frame its own way.
PyObject* stream_table(Stream& s) {
  arrow::Result<std::shared_ptr<arrow::Schema>> schema = arrow::ImportSchema(&s.schema);
  if (!schema.ok()) Py_RETURN_NONE;
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  for (ArrowArray& batch : s.batches) {
    arrow::Result<std::shared_ptr<arrow::RecordBatch>> imported = arrow::ImportRecordBatch(&batch, *schema);
    if (!imported.ok()) Py_RETURN_NONE;
    batches.push_back(*imported);
  }
  arrow::Result<std::shared_ptr<arrow::Table>> table = arrow::Table::FromRecordBatches(*schema, batches);
  if (!table.ok()) Py_RETURN_NONE;
  return wrap_table(*table);
}

// read_stream(plan, stream, out): the rows of an Arrow C stream (a PyCapsule of the Arrow
// PyCapsule Interface, as `__arrow_c_stream__` gives: polars' frames) read as `read` reads a
// table of the plan's columns, from the C data interface's structs where they lie: 0 where they
// are in `out` (the stream's rows), else the stream's rows as a pyarrow Table, for the caller to
// read as it reads any (its columns not the plan's, a dictionary the read leaves to it; `plan`
// None: no plan yet), or None where arrow cannot import them.  Why: polars hands its columns over no faster (its `to_numpy` with nulls
// 10 us for 64 rows of 28 columns, a categorical column's `to_arrow` 4-25 us), and arrow's import
// of a stream (pyarrow's or its C++ one) took 40 us of it.
PyObject* read_stream(PyObject*, PyObject* args) {
  PyObject *capsule, *stream_capsule, *out;
  if (!PyArg_ParseTuple(args, "OOO", &capsule, &stream_capsule, &out)) return nullptr;
  const Plan* plan = capsule == Py_None ? nullptr : get_plan(capsule);
  if (!plan && capsule != Py_None) return nullptr;
  auto* stream = static_cast<ArrowArrayStream*>(PyCapsule_GetPointer(stream_capsule, "arrow_array_stream"));
  if (!stream) return nullptr;
  if (!stream->release) return PyErr_Format(PyExc_ValueError, "the stream was read already");
  Stream s(stream);
  if (stream->get_schema(stream, &s.schema) != 0) return s.error("schema");
  while (true) {
    ArrowArray batch{};
    if (stream->get_next(stream, &batch) != 0) return s.error("batch");
    if (!batch.release) break;
    s.batches.push_back(batch);
  }
  if (plan && schema_matches(*plan, s.schema) && batches_readable(*plan, s)) {
    Reading r;
    r.rows = 0;
    for (const ArrowArray& batch : s.batches) r.rows += batch.length;
    const bool done = gather_codes(*plan, r);
    PyObject* result = write_out(*plan, r.rows, done, out, true, [&](char* base, int64_t rs, int64_t cs, bool is_float) {
      return is_float ? read_batches<float>(*plan, s, r, base, rs, cs) : read_batches<double>(*plan, s, r, base, rs, cs);
    });
    if (!result || PyLong_AsLong(result) == 0) return result;  // (read, or an error)
    Py_DECREF(result);
  }
  return stream_table(s);
}

// One chunk's data of a pyarrow ChunkedArray or Array, or null (another object, other chunks).
std::shared_ptr<arrow::ArrayData> only_chunk(PyObject* object) {
  const std::shared_ptr<arrow::ChunkedArray> chunked = unwrap_chunked_array(object);
  if (chunked) return chunked->num_chunks() == 1 ? chunked->chunk(0)->data() : nullptr;
  const std::shared_ptr<arrow::Array> array = unwrap_array(object);
  return array ? array->data() : nullptr;
}

// same_values(a, b): whether two arrays of labels (pyarrow ChunkedArrays of one chunk, or Arrays)
// hold the same values in the same order, or None where this cannot tell (nulls, other types,
// several chunks): the caller asks arrow.  Why: a pandas frame made for each request holds its
// categories anew, and arrow's `equals` first computes its type's fingerprint (1.6 us a column).
PyObject* same_values(PyObject*, PyObject* args) {
  PyObject *a, *b;
  if (!PyArg_ParseTuple(args, "OO", &a, &b)) return nullptr;
  const std::shared_ptr<arrow::ArrayData> da = only_chunk(a), db = only_chunk(b);
  if (!da || !db || da->type->id() != db->type->id() || has_nulls(*da) || has_nulls(*db)) Py_RETURN_NONE;
  const int type = da->type->id();
  if (!byte_width(type) && type != Type::STRING && type != Type::LARGE_STRING && type != Type::BINARY &&
      type != Type::LARGE_BINARY && type != Type::STRING_VIEW && type != Type::BINARY_VIEW)
    Py_RETURN_NONE;
  if (same_labels(Span(*da), Span(*db))) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

// Attribute names, made once (a name made from a C string a lookup cost as much as the lookup).
struct Names {
  PyObject *values, *pa_array, *mgr_locs, *own_mgr_locs, *indexer, *own_ndarray, *own_dtype, *own_categories,
      *own_values;
} names;

// Whether an arrow type id is one `read` reads as a number column.
bool number_type(int id) {
  return byte_width(id) > 0;
}

// Whether an arrow type id is one `read` reads as a column of strings (labels).
bool string_type(int id) {
  return id == Type::STRING || id == Type::LARGE_STRING || id == Type::STRING_VIEW;
}

// A column's labels as `index_codes` finds them: a LabelCodes whose codes are the caller's, held
// by a capsule.  Why: a model that hashes its categories (CatBoost's) reads a column of strings
// as its codes of the values it has seen, and arrow's dictionary_encode with the Python around it
// took 25 us a column of 512 strings, this 4.
const char kIndexName[] = "silvanforge.label_index";

std::shared_ptr<const LabelCodes>* get_index(PyObject* capsule) {
  return static_cast<std::shared_ptr<const LabelCodes>*>(PyCapsule_GetPointer(capsule, kIndexName));
}

void drop_index(PyObject* capsule) {
  delete get_index(capsule);
}

// label_index(labels, codes): `labels` (a sequence of str) found by `index_codes` as `codes` (a
// sequence of as many ints: label k's code codes[k]; a repeated label keeps its first); None
// where a label is no UTF-8 (a lone surrogate: no column's value equals it).
PyObject* label_index(PyObject*, PyObject* args) {
  PyObject *labels, *codes;
  if (!PyArg_ParseTuple(args, "OO", &labels, &codes)) return nullptr;
  std::shared_ptr<LabelCodes> known = label_codes_of(labels, 0);
  if (!known) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NONE;
  }
  PyObject* items = PySequence_Fast(codes, "codes: a sequence of ints");
  if (!items) return nullptr;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
  for (double& code : known->codes) {  // (build gave each label its position: the caller's code in its place)
    const Py_ssize_t k = static_cast<Py_ssize_t>(code);
    const long long value = k < count ? PyLong_AsLongLong(PySequence_Fast_GET_ITEM(items, k)) : -1;
    if (k >= count || (value == -1 && PyErr_Occurred())) {
      Py_DECREF(items);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "codes: an int a label");
      return nullptr;
    }
    code = static_cast<double>(value);
  }
  Py_DECREF(items);
  auto* held = new std::shared_ptr<const LabelCodes>(std::move(known));
  PyObject* capsule = PyCapsule_New(held, kIndexName, drop_index);
  if (!capsule) delete held;
  return capsule;
}

// index_codes(index, array, out): each value of `array` (a pyarrow ChunkedArray or Array of
// strings or binaries, in any of arrow's layouts) as its code in `index` (label_index), -1 where
// null, written to `out` (a writable C-contiguous buffer of int64, one a value).  0 where every
// value was null or found; 1 where one was not (`out` then partly written: the caller reads the
// column otherwise); -1 where `array` is none of those.
PyObject* index_codes(PyObject*, PyObject* args) {
  PyObject *capsule, *array, *out;
  if (!PyArg_ParseTuple(args, "OOO", &capsule, &array, &out)) return nullptr;
  std::shared_ptr<const LabelCodes>* known = get_index(capsule);
  if (!known) return nullptr;
  std::vector<std::shared_ptr<arrow::ArrayData>> chunks;
  int64_t total = 0;
  if (const std::shared_ptr<arrow::ChunkedArray> chunked = unwrap_chunked_array(array)) {
    for (const std::shared_ptr<arrow::Array>& chunk : chunked->chunks()) chunks.push_back(chunk->data());
  } else if (const std::shared_ptr<arrow::Array> one = unwrap_array(array)) {
    chunks.push_back(one->data());
  } else {
    PyErr_Clear();
    return PyLong_FromLong(-1);
  }
  for (const auto& data : chunks) {
    const int type = data->type->id();
    if (!string_type(type) && type != Type::BINARY && type != Type::LARGE_BINARY && type != Type::BINARY_VIEW)
      return PyLong_FromLong(-1);
    total += data->length;
  }
  Py_buffer view;
  if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return nullptr;
  const char* format = view.format ? view.format : "B";
  if (format[0] == '<' || format[0] == '=' || format[0] == '@') format++;
  if (view.itemsize != 8 || view.len != total * 8 || (std::strcmp(format, "l") != 0 && std::strcmp(format, "q") != 0)) {
    PyBuffer_Release(&view);
    return PyErr_Format(PyExc_ValueError, "out: int64, one a value of the array (%lld)", static_cast<long long>(total));
  }
  int64_t* o = static_cast<int64_t*>(view.buf);
  long result = 0;
  std::string_view value;
  for (size_t c = 0; c < chunks.size() && result == 0; c++) {
    const Span span(*chunks[c]);
    for (int64_t i = 0; i < span.length; i++, o++) {
      if (!valid(span.validity, span.offset + i)) {
        *o = -1;
        continue;
      }
      const double* code = label_value(span, i, value) ? (*known)->find(value) : nullptr;
      if (!code) {
        result = 1;
        break;
      }
      *o = static_cast<int64_t>(*code);
    }
  }
  PyBuffer_Release(&view);
  return PyLong_FromLong(result);
}

// An attribute or null, without the AttributeError a missing one raises (building and clearing
// it cost 0.4 us a block of another kind); null with an error set only where the lookup failed so.
PyObject* optional_attr(PyObject* object, PyObject* name) {
  PyObject* found = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  PyObject_GetOptionalAttr(object, name, &found);
#else
  _PyObject_LookupAttr(object, name, &found);
#endif
  return found;
}

// An attribute that a C class computes (a getset descriptor: Cython's properties, as pandas'
// Block keeps `values` and `_mgr_locs` and its BlockPlacement `indexer`), its getter found once a
// type and called directly: what PyObject_GetAttr returns, without its lookup through the type's
// bases and the descriptor's check of the object's type (a fifth of a walk of 28 blocks).  The
// type's version tag tells a type changed since (CPython gives a modified type another); where
// the attribute is not such a getter, or the type looks attributes up otherwise, it is looked up
// as any is.  (Run with the GIL held: the cache is the interpreter's to share.)
struct DirectAttr {
  PyObject* name = nullptr;
  PyTypeObject* type = nullptr;
  unsigned int version = 0;
  getter get = nullptr;
  void* closure = nullptr;

  // A new reference, or null (an error set only where the lookup failed otherwise than as missing).
  PyObject* operator()(PyObject* object) {
    PyTypeObject* t = Py_TYPE(object);
    if (t != type || !version || t->tp_version_tag != version) find(t);
    return get ? get(object, closure) : optional_attr(object, name);
  }

  void find(PyTypeObject* t) {
    type = t;
    get = nullptr;
    closure = nullptr;
    version = PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG) ? t->tp_version_tag : 0;
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
    if (!version || t->tp_getattro != PyObject_GenericGetAttr) return;
    PyObject* found = _PyType_Lookup(t, name);  // (borrowed; the first along the type's bases, as a lookup finds)
    if (found && Py_IS_TYPE(found, &PyGetSetDescr_Type)) {
      const PyGetSetDef* def = reinterpret_cast<PyGetSetDescrObject*>(found)->d_getset;
      if (def->get) {
        get = def->get;
        closure = def->closure;
      }
    }
#endif
  }
};

DirectAttr block_values, block_placement, placement_indexer;

// An error cleared where one is set: PyErr_Clear restores the thread's error state even where none
// is, which a walk of 28 blocks did four times a block.
inline void clear_error() {
  if (PyErr_Occurred()) PyErr_Clear();
}

// A slice's start, stop and step as PySlice_Unpack gives them, read from the slice's own ints
// where they are exact ints that fit (a step of None: 1), as a block's placement holds them:
// PySlice_Unpack converts each through the index protocol (a seventh of a walk of 28 blocks).
bool slice_bounds(PyObject* slice, Py_ssize_t& start, Py_ssize_t& stop, Py_ssize_t& step) {
  const auto* s = reinterpret_cast<const PySliceObject*>(slice);
  if (PyLong_CheckExact(s->start) && PyLong_CheckExact(s->stop) && (s->step == Py_None || PyLong_CheckExact(s->step))) {
    start = PyLong_AsSsize_t(s->start);
    stop = PyLong_AsSsize_t(s->stop);
    step = s->step == Py_None ? 1 : PyLong_AsSsize_t(s->step);
    if (!PyErr_Occurred() && step != 0) return true;
    PyErr_Clear();  // (past Py_ssize_t, or a step of 0: as PySlice_Unpack answers them)
  }
  return PySlice_Unpack(slice, &start, &stop, &step) == 0;
}

// The one frame column a pandas block holds, or -1 (several, or a placement read otherwise).
long single_column(PyObject* block) {
  // (pandas' Block keeps its placement in a C attribute, _mgr_locs, that its Python property
  // mgr_locs returns: read so, a frame of 28 such blocks walks 0.8 us sooner)
  PyObject* placement = block_placement(block);
  if (!placement && !PyErr_Occurred()) placement = PyObject_GetAttr(block, names.mgr_locs);
  PyObject* indexer = placement ? placement_indexer(placement) : nullptr;
  Py_XDECREF(placement);
  Py_ssize_t start, stop, step;
  long column = -1;
  if (indexer && PySlice_Check(indexer) && slice_bounds(indexer, start, stop, step) && step == 1 && stop == start + 1)
    column = static_cast<long>(start);
  Py_XDECREF(indexer);
  clear_error();
  return column;
}

// A pandas block's kind as `arrow_blocks` answers it: the arrow type id where it is one column
// of Arrow-backed numbers (`chunked` its ChunkedArray, `array` a new reference to its pyarrow
// object), -2 where it is one column whose values are of class `categorical`, else -1; `column`
// the frame column (-1 for kind -1).  No error left set.
// (`values`: the block's, where the caller has them)
int block_kind(PyObject* block, PyObject* categorical, std::shared_ptr<arrow::ChunkedArray>& chunked,
               PyObject*& array, long& column, bool strings = false, PyObject* values = nullptr) {
  array = nullptr;
  column = -1;
  chunked.reset();
  if (values) {
    Py_INCREF(values);
  } else if (!(values = block_values(block))) {
    PyErr_Clear();
    return -1;
  }
  const bool is_categorical = categorical && reinterpret_cast<PyObject*>(Py_TYPE(values)) == categorical;
  if (!is_categorical) array = optional_attr(values, names.pa_array);
  Py_DECREF(values);
  clear_error();  // (not Arrow-backed: keyed by the caller)
  if (array) chunked = unwrap_chunked_array(array);
  if (is_categorical || (chunked && (number_type(chunked->type()->id()) || (strings && string_type(chunked->type()->id())))))
    column = single_column(block);
  if (column < 0) {
    Py_XDECREF(array);
    array = nullptr;
    chunked.reset();
    return -1;
  }
  return is_categorical ? -2 : chunked->type()->id();
}

// arrow_blocks(blocks[, categorical]): a pandas frame's blocks as its key and reader take them,
// walked here because a frame of Arrow-backed numbers has a block a column and reading 28 blocks'
// dtypes and arrays in Python cost 8-10 us a call.  For each block: the arrow type id where it
// is one column of Arrow-backed numbers (its `values._pa_array` a ChunkedArray of a number
// type), -2 where its values are of class `categorical` (pandas' Categorical: one column whose
// categories the caller's plan checks), else -1; the frame column it holds (-1 where it is not
// one such column); its ChunkedArray or None.  Answers (kinds: bytes of int32, columns: bytes of
// int32, arrays: list, others: the indices of the blocks of kind -1, for the caller to key as
// it keys any block).
PyObject* arrow_blocks(PyObject*, PyObject* args) {
  PyObject* blocks;
  PyObject* categorical = nullptr;
  if (!PyArg_ParseTuple(args, "O|O", &blocks, &categorical)) return nullptr;
  // (a tuple of its own: the attribute reads below run Python code, which could change a list)
  PyObject* items = PySequence_Tuple(blocks);
  if (!items) return nullptr;
  const Py_ssize_t count = PyTuple_GET_SIZE(items);
  std::vector<int32_t> kinds(count, -1), columns(count, -1);
  PyObject* arrays = PyList_New(count);
  PyObject* others = PyList_New(0);
  bool failed = !arrays || !others;
  for (Py_ssize_t i = 0; i < count && !failed; i++) {
    std::shared_ptr<arrow::ChunkedArray> chunked;
    PyObject* array;
    long column;
    const int kind = block_kind(PyTuple_GET_ITEM(items, i), categorical, chunked, array, column);
    kinds[i] = kind;
    columns[i] = static_cast<int32_t>(column);
    if (kind >= 0) {
      PyList_SET_ITEM(arrays, i, array);  // (the list takes the reference)
    } else {
      Py_INCREF(Py_None);
      PyList_SET_ITEM(arrays, i, Py_None);
    }
    if (kind == -1) {
      PyObject* index = PyLong_FromSsize_t(i);
      failed = !index || PyList_Append(others, index) < 0;
      Py_XDECREF(index);
    }
  }
  Py_DECREF(items);
  if (failed) {
    Py_XDECREF(arrays);
    Py_XDECREF(others);
    return nullptr;
  }
  const Py_ssize_t size = count * static_cast<Py_ssize_t>(sizeof(int32_t));
  return Py_BuildValue("(NNNN)", PyBytes_FromStringAndSize(reinterpret_cast<const char*>(kinds.data()), size),
                       PyBytes_FromStringAndSize(reinterpret_cast<const char*>(columns.data()), size), arrays, others);
}

// A pandas block of NumPy values by its buffer's format: kNumpyKind - k for format k of
// kNumpyFormats (the native byte order; NumPy's int64 is "l" on Linux), else -1 (another dtype:
// float16, dates, strings of fixed width, another byte order).
const char kNumpyFormats[] = "fdbhilqBHILQ?O";
const int kNumpySizes[] = {4, 8, 1, 2, 4, 8, 8, 1, 2, 4, 8, 8, 1, static_cast<int>(sizeof(PyObject*))};
const int kNumpyKind = -10;
const int kObjectKind = kNumpyKind - 13;

int numpy_kind(const Py_buffer& view) {
  const char* format = view.format;
  if (!format || view.ndim != 2) return -1;
  if (format[0] == '@' || format[0] == '=' || format[0] == '<') format++;  // (x86-64 and arm64 are little-endian)
  const char* at = format[0] ? std::strchr(kNumpyFormats, format[0]) : nullptr;
  if (!at || format[1]) return -1;
  const int k = static_cast<int>(at - kNumpyFormats);
  return kNumpySizes[k] == view.itemsize ? kNumpyKind - k : -1;
}

// A block's kind as `frame_blocks` answers it: `block_kind`'s (arrow numbers and strings,
// categorical), or a NumPy block's (numpy_kind: `view` holds its values' buffer, to be released
// by the caller where `viewed`), else -1.
int frame_kind(PyObject* block, PyObject* categorical, PyObject* ndarray, std::shared_ptr<arrow::ChunkedArray>& chunked,
               PyObject*& array, long& column, Py_buffer& view, bool& viewed) {
  viewed = false;
  PyObject* values = block_values(block);
  if (!values) {
    PyErr_Clear();
    return -1;
  }
  if (reinterpret_cast<PyObject*>(Py_TYPE(values)) != ndarray) {
    const int kind = block_kind(block, categorical, chunked, array, column, true, values);
    Py_DECREF(values);
    return kind;
  }
  array = nullptr;
  column = -1;
  chunked.reset();
  const bool got = PyObject_GetBuffer(values, &view, PyBUF_RECORDS_RO) == 0;  // (the view holds the array)
  Py_DECREF(values);
  if (!got) {
    PyErr_Clear();
    return -1;
  }
  const int kind = numpy_kind(view);
  if (kind == -1) {
    PyBuffer_Release(&view);
    return -1;
  }
  viewed = true;
  return kind;
}

// A block's placement (the frame columns it holds) as `frame_blocks` gives it: (start, stop,
// step) where it is a slice, else the bytes of its array of positions; null with no error where
// it is read otherwise.
PyObject* placement_of(PyObject* block) {
  PyObject* placement = block_placement(block);
  if (!placement && !PyErr_Occurred()) placement = PyObject_GetAttr(block, names.mgr_locs);
  PyObject* indexer = placement ? placement_indexer(placement) : nullptr;
  Py_XDECREF(placement);
  PyObject* found = nullptr;
  Py_ssize_t start, stop, step;
  if (indexer && PySlice_Check(indexer)) {
    if (PySlice_Unpack(indexer, &start, &stop, &step) == 0) found = Py_BuildValue("(nnn)", start, stop, step);
  } else if (indexer) {
    Py_buffer view;
    if (PyObject_GetBuffer(indexer, &view, PyBUF_C_CONTIGUOUS) == 0) {
      found = PyBytes_FromStringAndSize(static_cast<const char*>(view.buf), view.len);
      PyBuffer_Release(&view);
    }
  }
  Py_XDECREF(indexer);
  PyErr_Clear();
  return found;
}

// Whether a block's placement is `expected` (as placement_of gives it), compared without making it.
bool placement_is(PyObject* block, PyObject* expected) {
  PyObject* placement = block_placement(block);
  if (!placement && !PyErr_Occurred()) placement = PyObject_GetAttr(block, names.mgr_locs);
  PyObject* indexer = placement ? placement_indexer(placement) : nullptr;
  Py_XDECREF(placement);
  bool same = false;
  Py_ssize_t start, stop, step;
  if (indexer && PySlice_Check(indexer)) {
    same = PyTuple_Check(expected) && PyTuple_GET_SIZE(expected) == 3 &&
           slice_bounds(indexer, start, stop, step) &&
           PyLong_AsSsize_t(PyTuple_GET_ITEM(expected, 0)) == start &&
           PyLong_AsSsize_t(PyTuple_GET_ITEM(expected, 1)) == stop &&
           PyLong_AsSsize_t(PyTuple_GET_ITEM(expected, 2)) == step;
  } else if (indexer && PyBytes_Check(expected)) {
    Py_buffer view;
    if (PyObject_GetBuffer(indexer, &view, PyBUF_C_CONTIGUOUS) == 0) {
      same = view.len == PyBytes_GET_SIZE(expected) &&
             std::memcmp(view.buf, PyBytes_AS_STRING(expected), static_cast<size_t>(view.len)) == 0;
      PyBuffer_Release(&view);
    }
  }
  Py_XDECREF(indexer);
  PyErr_Clear();
  return same;
}

// frame_blocks(blocks, categorical, ndarray): a pandas frame's blocks as `read_blocks` checks
// them, for a frame whose plan reads NumPy and object blocks too: (kinds, columns, placements):
// each block's kind (an arrow type id: one column of Arrow-backed numbers or strings; -2: of
// class `categorical`; kNumpyKind - k: a 2-D array of class `ndarray` of NumPy's format k; -1:
// another), its frame column (one-column blocks of the first kinds, else -1), and its placement
// (placement_of) where it is a NumPy block, else None.
PyObject* frame_blocks(PyObject*, PyObject* args) {
  PyObject *blocks, *categorical, *ndarray;
  if (!PyArg_ParseTuple(args, "OOO", &blocks, &categorical, &ndarray)) return nullptr;
  PyObject* items = PySequence_Tuple(blocks);  // (as arrow_blocks: its own tuple)
  if (!items) return nullptr;
  const Py_ssize_t count = PyTuple_GET_SIZE(items);
  std::vector<int32_t> kinds(count, -1), columns(count, -1);
  PyObject* placements = PyList_New(count);
  if (!placements) {
    Py_DECREF(items);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < count; i++) {
    std::shared_ptr<arrow::ChunkedArray> chunked;
    PyObject* array = nullptr;
    long column = -1;
    Py_buffer view;
    bool viewed;
    PyObject* block = PyTuple_GET_ITEM(items, i);
    kinds[i] = frame_kind(block, categorical, ndarray, chunked, array, column, view, viewed);
    Py_XDECREF(array);
    columns[i] = static_cast<int32_t>(column);
    PyObject* placement = nullptr;
    if (viewed) {
      PyBuffer_Release(&view);
      placement = placement_of(block);
      if (!placement) kinds[i] = -1;
    }
    if (!placement) {
      placement = Py_None;
      Py_INCREF(placement);
    }
    PyList_SET_ITEM(placements, i, placement);
  }
  Py_DECREF(items);
  const Py_ssize_t size = count * static_cast<Py_ssize_t>(sizeof(int32_t));
  return Py_BuildValue("(NNN)", PyBytes_FromStringAndSize(reinterpret_cast<const char*>(kinds.data()), size),
                       PyBytes_FromStringAndSize(reinterpret_cast<const char*>(columns.data()), size), placements);
}

// set_frame(plan, numpy_blocks, objects, missing[, categoricals]): what the plan reads of a pandas frame's NumPy
// blocks: (block, kind, [(row in the block, feature[, labels])]) each (`labels`: the floats a
// feature's number labels are, a label's code its position), and of its object columns:
// (block, row, feature, labels or None) each, `labels` the model's string labels of a
// categorical feature (a label's code its position); `missing`: pandas' NA, missing in an
// object column as None and NaN are; `categoricals`: (block, feature) of each Categorical column
// read here (its categories given by `set_categories`).
PyObject* set_frame(PyObject*, PyObject* args) {
  PyObject *capsule, *blocks, *objects, *missing, *categoricals = nullptr;
  if (!PyArg_ParseTuple(args, "OO!O!O|O!", &capsule, &PyList_Type, &blocks, &PyList_Type, &objects, &missing,
                        &PyList_Type, &categoricals))
    return nullptr;
  Plan* plan = get_plan(capsule);
  if (!plan) return nullptr;
  std::vector<NumpyBlock> numpy_blocks;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(blocks); i++) {
    NumpyBlock b;
    PyObject* pairs;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(blocks, i), "iiO!", &b.block, &b.kind, &PyList_Type, &pairs)) return nullptr;
    if (b.kind > kNumpyKind || b.kind < kObjectKind + 1 || b.block < 0)
      return PyErr_Format(PyExc_ValueError, "numpy_blocks: a block's kind of NumPy numbers");
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(pairs); k++) {
      int row, feature;
      PyObject* labels = Py_None;
      if (!PyArg_ParseTuple(PyList_GET_ITEM(pairs, k), "ii|O", &row, &feature, &labels)) return nullptr;
      if (row < 0 || feature < 0 || feature >= plan->width) return PyErr_Format(PyExc_ValueError, "feature out of range");
      b.rows.push_back(row);
      b.features.push_back(feature);
      std::shared_ptr<const NumberLabels> known;
      if (labels != Py_None && !(known = number_labels_of(labels, 0))) return nullptr;
      b.labels.push_back(std::move(known));
    }
    numpy_blocks.push_back(std::move(b));
  }
  std::vector<ObjectColumn> columns;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objects); i++) {
    ObjectColumn c;
    PyObject* labels;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(objects, i), "iiiO", &c.block, &c.row, &c.feature, &labels)) return nullptr;
    if (c.block < 0 || c.row < 0 || c.feature < 0 || c.feature >= plan->width)
      return PyErr_Format(PyExc_ValueError, "feature out of range");
    if (labels != Py_None) {
      c.codes = label_codes_of(labels, 0);
      if (!c.codes) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "objects: labels UTF-8 holds");
        return nullptr;
      }
    }
    columns.push_back(std::move(c));
  }
  std::vector<CategoricalColumn> categorical;
  for (Py_ssize_t i = 0; categoricals && i < PyList_GET_SIZE(categoricals); i++) {
    CategoricalColumn c;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(categoricals, i), "ii", &c.block, &c.feature)) return nullptr;
    if (c.block < 0 || c.feature < 0 || c.feature >= plan->width) return PyErr_Format(PyExc_ValueError, "feature out of range");
    categorical.push_back(std::move(c));
  }
  plan->numpy_blocks = std::move(numpy_blocks);
  plan->objects = std::move(columns);
  plan->categoricals = std::move(categorical);
  Py_INCREF(missing);
  Py_XSETREF(plan->missing, missing);
  Py_RETURN_NONE;
}

// The categories a pandas Index holds (its `_values`) as `CategoricalColumn` keeps them: arrow's
// array (pandas 3's strings), or a NumPy array's bytes and format; false where they are neither.
bool categories_of(PyObject* values, std::shared_ptr<arrow::ArrayData>& labels, std::string& numbers,
                   std::string& format) {
  PyObject* array = optional_attr(values, names.pa_array);
  PyErr_Clear();
  if (array) {
    labels = only_chunk(array);
    Py_DECREF(array);
    return labels && !has_nulls(*labels);
  }
  Py_buffer view;
  if (PyObject_GetBuffer(values, &view, PyBUF_ND | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
    PyErr_Clear();
    return false;
  }
  const bool number = view.ndim == 1 && view.format && std::strchr("bhilqBHILQfd", view.format[0]) && !view.format[1];
  if (number) {
    numbers.assign(static_cast<const char*>(view.buf), static_cast<size_t>(view.len));
    format = view.format;
  }
  PyBuffer_Release(&view);
  return number;
}

// set_categories(plan, k, categories, lut, unseen): the code table of categorical column k: its
// categories (a pandas Index's `_values`), `lut` (float64: a model code a category and a last one
// for a missing value) and `unseen` (bools of the categories refused, or None).  False where the
// categories are held otherwise than `categories_of` reads (the column is the caller's).
PyObject* set_categories(PyObject*, PyObject* args) {
  PyObject *capsule, *categories, *lut, *unseen;
  Py_ssize_t k;
  if (!PyArg_ParseTuple(args, "OnOOO", &capsule, &k, &categories, &lut, &unseen)) return nullptr;
  Plan* plan = get_plan(capsule);
  if (!plan) return nullptr;
  if (k < 0 || k >= static_cast<Py_ssize_t>(plan->categoricals.size()))
    return PyErr_Format(PyExc_IndexError, "no categorical column %zd", k);
  CategoricalColumn& c = plan->categoricals[k];
  c.registered = false;
  c.labels.reset();
  c.numbers.clear();
  if (!categories_of(categories, c.labels, c.numbers, c.format)) Py_RETURN_FALSE;
  const int64_t count = c.labels ? c.labels->length : static_cast<int64_t>(c.numbers.size()) / [&] {
    switch (c.format[0]) {
      case 'b': case 'B': return 1;
      case 'h': case 'H': return 2;
      case 'i': case 'I': case 'f': return 4;
      default: return 8;
    }
  }();
  Py_buffer view;
  if (PyObject_GetBuffer(lut, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return nullptr;
  const bool doubles = view.format && std::string_view(view.format) == "d" && view.len == (count + 1) * 8;
  if (doubles) c.lut.assign(static_cast<const double*>(view.buf), static_cast<const double*>(view.buf) + count + 1);
  PyBuffer_Release(&view);
  if (!doubles) return PyErr_Format(PyExc_ValueError, "lut: float64, a code a category and one more");
  c.unseen.clear();
  if (unseen != Py_None) {
    if (PyObject_GetBuffer(unseen, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return nullptr;
    const bool bools = view.format && std::string_view(view.format) == "?" && view.len >= count;
    if (bools) c.unseen.assign(static_cast<const uint8_t*>(view.buf), static_cast<const uint8_t*>(view.buf) + count);
    PyBuffer_Release(&view);
    if (!bools) return PyErr_Format(PyExc_ValueError, "unseen: bools, one a category");
  }
  c.registered = true;
  Py_RETURN_TRUE;
}

// A Categorical column's codes written to the rows at `base` through its registered table;
// false where its categories are not the registered ones, a code is out of range or refused, or
// pandas holds it otherwise (the caller's).
template <typename Out>
bool read_categorical(const CategoricalColumn& c, PyObject* block, int64_t rows, Out* base, int64_t rs, int64_t cs) {
  if (!c.registered) return false;
  PyObject* values = block_values(block);
  PyObject* codes = values ? optional_attr(values, names.own_ndarray) : nullptr;
  PyObject* dtype = values ? optional_attr(values, names.own_dtype) : nullptr;
  Py_XDECREF(values);
  PyObject* categories = dtype ? optional_attr(dtype, names.own_categories) : nullptr;
  Py_XDECREF(dtype);
  PyObject* labels = categories ? optional_attr(categories, names.own_values) : nullptr;
  Py_XDECREF(categories);
  PyErr_Clear();
  bool same = false;
  if (labels) {
    std::shared_ptr<arrow::ArrayData> now;
    std::string numbers, format;
    same = categories_of(labels, now, numbers, format) &&
           (c.labels ? now && same_labels(Span(*c.labels), Span(*now)) : !now && format == c.format && numbers == c.numbers);
    Py_DECREF(labels);
  }
  Py_buffer view;
  if (!same || !codes || PyObject_GetBuffer(codes, &view, PyBUF_ND | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
    Py_XDECREF(codes);
    PyErr_Clear();
    return false;
  }
  Py_DECREF(codes);  // (the view holds the array)
  const int64_t count = static_cast<int64_t>(c.lut.size()) - 1;
  const char f = view.format ? view.format[0] : 0;
  bool read = view.ndim == 1 && view.shape[0] == rows && view.format && !view.format[1] &&
              (f == 'b' || f == 'h' || f == 'i' || f == 'l' || f == 'q');
  Out* to = base + c.feature * cs;
  auto write = [&](auto* own) {
    for (int64_t r = 0; r < rows && read; r++) {
      const int64_t code = own[r];
      const int64_t at = code == -1 ? count : code;
      read = at >= 0 && at <= count && (c.unseen.empty() || at == count || !c.unseen[at]);
      if (read) to[r * rs] = static_cast<Out>(c.lut[at]);
    }
  };
  if (read) {
    switch (f) {
      case 'b': write(static_cast<const int8_t*>(view.buf)); break;
      case 'h': write(static_cast<const int16_t*>(view.buf)); break;
      case 'i': write(static_cast<const int32_t*>(view.buf)); break;
      default: write(static_cast<const int64_t*>(view.buf)); break;
    }
  }
  PyBuffer_Release(&view);
  return read;
}

// A NumPy block's values (`view`: the (columns, rows) array) written to the rows at `base`; false
// where a value on a feature of number labels is none of them (or an integer past 2**53, which
// float64 would round onto another): the Python reader decides it.
template <typename T, typename Out, bool Bools = false>
bool copy_block(const NumpyBlock& b, const Py_buffer& view, Out* base, int64_t rs, int64_t cs) {
  const int64_t n = view.shape[1], s0 = view.strides[0], s1 = view.strides[1];
  for (size_t k = 0; k < b.rows.size(); k++) {
    const char* from = static_cast<const char*>(view.buf) + b.rows[k] * s0;
    Out* to = base + b.features[k] * cs;
    const NumberLabels* labels = b.labels[k].get();
    if (!labels && !Bools && s1 == static_cast<int64_t>(sizeof(T)) &&
        reinterpret_cast<uintptr_t>(from) % alignof(T) == 0) {
      // A block's row of plain numbers as NumPy lays it out, read in one loop without the labels'
      // check (a memcpy where the rows are in column order and of its type; a loop the compiler
      // vectorises where they are converted): the loop below, a value at a time through that
      // check, took 40% of reading 4096 rows of 24 float64 and 4 string columns.
      const T* values = reinterpret_cast<const T*>(from);
      if constexpr (std::is_same_v<T, Out>) {
        if (rs == 1) {
          std::memcpy(to, values, static_cast<size_t>(n) * sizeof(T));
          continue;
        }
      }
      for (int64_t r = 0; r < n; r++) to[r * rs] = static_cast<Out>(static_cast<double>(values[r]));
      continue;
    }
    for (int64_t r = 0; r < n; r++) {
      T value;
      std::memcpy(&value, from + r * s1, sizeof(T));
      // (through float64, as the Python reader converts 64-bit integers for float32 rows; a bool
      // any nonzero byte, as NumPy reads one, read as a byte: a C++ bool of another is undefined)
      double x = Bools ? (value != 0 ? 1.0 : 0.0) : static_cast<double>(value);
      if (labels && x == x) {
        if (std::is_integral_v<T> && (x > 9007199254740992.0 || x < -9007199254740992.0)) return false;
        const auto found = labels->codes.find(x == 0.0 ? 0.0 : x);
        if (found == labels->codes.end()) return false;
        x = found->second;
      }
      to[r * rs] = static_cast<Out>(x);
    }
  }
  return true;
}

template <typename Out>
bool read_numpy_block(const NumpyBlock& b, const Py_buffer& view, Out* base, int64_t rs, int64_t cs) {
  switch (kNumpyKind - b.kind) {
    case 0: return copy_block<float>(b, view, base, rs, cs);
    case 1: return copy_block<double>(b, view, base, rs, cs);
    case 2: return copy_block<int8_t>(b, view, base, rs, cs);
    case 3: return copy_block<int16_t>(b, view, base, rs, cs);
    case 4: return copy_block<int32_t>(b, view, base, rs, cs);
    case 5:
    case 6: return copy_block<int64_t>(b, view, base, rs, cs);
    case 7: return copy_block<uint8_t>(b, view, base, rs, cs);
    case 8: return copy_block<uint16_t>(b, view, base, rs, cs);
    case 9: return copy_block<uint32_t>(b, view, base, rs, cs);
    case 10:
    case 11: return copy_block<uint64_t>(b, view, base, rs, cs);
    case 12: return copy_block<uint8_t, Out, true>(b, view, base, rs, cs);
  }
  return false;
}

// An object column's values written to the rows at `base`; false where one is not plain (the
// Python reader decides it: another type, a label the model does not know, an int past float64).
template <typename Out>
bool read_objects(const ObjectColumn& c, const Py_buffer& view, PyObject* missing, Out* base, int64_t rs, int64_t cs) {
  const int64_t n = view.shape[1];
  const char* from = static_cast<const char*>(view.buf) + c.row * view.strides[0];
  Out* to = base + c.feature * cs;
  for (int64_t r = 0; r < n; r++) {
    PyObject* v;
    std::memcpy(&v, from + r * view.strides[1], sizeof(v));
    double x;
    if (v == Py_None || v == missing) {
      x = NAN;
    } else if (PyFloat_CheckExact(v)) {
      x = PyFloat_AS_DOUBLE(v);
      if (c.codes && x == x) return false;  // (a number where the labels are strings: the Python reader's)
    } else if (c.codes) {
      Py_ssize_t size;
      const char* text = PyUnicode_CheckExact(v) ? PyUnicode_AsUTF8AndSize(v, &size) : nullptr;
      if (!text) {
        PyErr_Clear();
        return false;
      }
      const double* code = c.codes->find(std::string_view(text, static_cast<size_t>(size)));
      if (!code) return false;  // (a label the model does not know: missing, or refused)
      x = *code;
    } else if (PyLong_CheckExact(v)) {
      x = PyLong_AsDouble(v);
      if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
    } else {
      return false;
    }
    to[r * rs] = static_cast<Out>(x);
  }
  return true;
}

// read_blocks(plan, blocks, kinds, columns, categorical, out[, ndarray, placements, left]): a pandas
// frame's rows read as `read` reads a list of its blocks' ChunkedArrays, the blocks walked as
// `arrow_blocks` walks them and checked against what it answered for the frame the plan was made
// for (`kinds` and `columns`): 2 where a block differs (nothing read), else as `read`.  A
// request's frame made anew is so read in one call, not a walk, a key and a read (one row of 28
// columns: 5.1 -> 4.0 us before the kernel).  With `ndarray` (NumPy's array class) and
// `placements`, the frame's NumPy and object blocks too, as `frame_blocks` answered for the frame
// the plan was made for and `set_frame` gave their reads: a frame of records (a float block, an
// object block and pandas' str columns) read in one call too.  `left`: a list, to which the
// index of each categorical column not read (other categories than the registered ones, a
// refused one) is appended for the caller to read, the rest read (without it: 1).
// Blocks of kind -1 (others, which the caller keys) are never read here: 2.
PyObject* read_blocks(PyObject*, PyObject* args) {
  PyObject *capsule, *blocks, *categorical, *out, *ndarray = nullptr, *placements = nullptr, *left = nullptr;
  Py_buffer kinds, columns;
  if (!PyArg_ParseTuple(args, "OOy*y*OO|OOO", &capsule, &blocks, &kinds, &columns, &categorical, &out, &ndarray,
                        &placements, &left))
    return nullptr;
  if (left && !PyList_Check(left)) {
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&columns);
    return PyErr_Format(PyExc_TypeError, "left: a list");
  }
  const Py_ssize_t count = kinds.len / static_cast<Py_ssize_t>(sizeof(int32_t));
  std::vector<int32_t> kind(count), column(count);
  if (count) std::memcpy(kind.data(), kinds.buf, count * sizeof(int32_t));
  if (count && columns.len == kinds.len) std::memcpy(column.data(), columns.buf, count * sizeof(int32_t));
  const bool sizes = columns.len == kinds.len;
  PyBuffer_Release(&kinds);
  PyBuffer_Release(&columns);
  const Plan* plan = get_plan(capsule);
  if (!plan) return nullptr;
  if (!sizes) return PyErr_Format(PyExc_ValueError, "kinds and columns: int32 bytes of one length");
  const bool frames = ndarray && placements;
  if (frames && (!PyList_Check(placements) || PyList_GET_SIZE(placements) != count))
    return PyErr_Format(PyExc_ValueError, "placements: a list, one a block");
  PyObject* items = PySequence_Tuple(blocks);  // (as arrow_blocks: its own tuple)
  if (!items) return nullptr;
  bool same = PyTuple_GET_SIZE(items) == count;
  std::vector<std::shared_ptr<arrow::ChunkedArray>> found(same ? count : 0);
  // (each NumPy block's buffer, held until its values are read)
  std::vector<Py_buffer> views(same ? count : 0);
  std::vector<uint8_t> viewed(same ? count : 0);
  auto release = [&]() {
    for (size_t i = 0; i < viewed.size(); i++)
      if (viewed[i]) PyBuffer_Release(&views[i]);
    Py_DECREF(items);
  };
  for (Py_ssize_t i = 0; i < count && same; i++) {
    if (kind[i] == -1 || (kind[i] <= kNumpyKind && !frames)) {  // (a block the caller keys: not this walk's)
      same = false;
      break;
    }
    PyObject* array = nullptr;
    long at;
    PyObject* block = PyTuple_GET_ITEM(items, i);
    bool got = false;
    const int k = frames ? frame_kind(block, categorical, ndarray, found[i], array, at, views[i], got)
                         : block_kind(block, categorical, found[i], array, at);
    viewed[i] = got;
    same = k == kind[i] && at == column[i] && (!got || placement_is(block, PyList_GET_ITEM(placements, i)));
    Py_XDECREF(array);
  }
  if (!same) {
    release();
    return PyLong_FromLong(2);
  }
  Reading r;
  bool done = gather_codes(*plan, r);
  r.numbers.reserve(plan->numbers.size());
  r.strings.reserve(plan->strings.size());
  for (const Number& n : plan->numbers) {
    r.numbers.push_back(n.column < count ? found[n.column].get() : nullptr);
    if (r.numbers.back() && r.rows < 0) r.rows = r.numbers.back()->length();
  }
  for (const StringColumn& c : plan->strings) {
    r.strings.push_back(c.column < count ? found[c.column].get() : nullptr);
    if (r.strings.back() && r.rows < 0) r.rows = r.strings.back()->length();
  }
  // The NumPy blocks read: each of the plan's, of its kind and the frame's rows
  for (const NumpyBlock& b : plan->numpy_blocks) {
    if (b.block >= count || !viewed[b.block] || kind[b.block] != b.kind) done = false;
    if (!done) break;
    if (r.rows < 0) r.rows = views[b.block].shape[1];
    for (int row : b.rows) done = done && row < views[b.block].shape[0];
    done = done && views[b.block].shape[1] == r.rows;
  }
  for (const ObjectColumn& c : plan->objects) {
    if (c.block >= count || !viewed[c.block] || kind[c.block] != kObjectKind) done = false;
    if (!done) break;
    if (r.rows < 0) r.rows = views[c.block].shape[1];
    done = c.row < views[c.block].shape[0] && views[c.block].shape[1] == r.rows;
  }
  if (!plan->dictionaries.empty() || !plan->labelled.empty() || r.rows < 0) done = false;
  PyObject* result = write_rows(*plan, r, done, out, false);
  if (done && result && PyLong_AsLong(result) == 0 &&
      (!plan->numpy_blocks.empty() || !plan->objects.empty() || !plan->categoricals.empty())) {
    Py_buffer view;  // (write_rows checked its shape and format)
    if (PyObject_GetBuffer(out, &view, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
      Py_DECREF(result);
      release();
      return nullptr;
    }
    const int64_t rs = view.strides[0] / view.itemsize, cs = view.strides[1] / view.itemsize;
    const bool is_float = std::strcmp(view.format, "f") == 0;
    bool read = true;
    for (const NumpyBlock& b : plan->numpy_blocks) {
      read = read && (is_float ? read_numpy_block(b, views[b.block], static_cast<float*>(view.buf), rs, cs)
                               : read_numpy_block(b, views[b.block], static_cast<double*>(view.buf), rs, cs));
    }
    for (const ObjectColumn& c : plan->objects) {
      read = read && (is_float ? read_objects(c, views[c.block], plan->missing, static_cast<float*>(view.buf), rs, cs)
                               : read_objects(c, views[c.block], plan->missing, static_cast<double*>(view.buf), rs, cs));
    }
    for (size_t k = 0; k < plan->categoricals.size() && read; k++) {
      const CategoricalColumn& c = plan->categoricals[k];
      if (c.block >= count || kind[c.block] != -2) {
        read = false;
        break;
      }
      PyObject* block = PyTuple_GET_ITEM(items, c.block);
      if (is_float ? read_categorical(c, block, r.rows, static_cast<float*>(view.buf), rs, cs)
                   : read_categorical(c, block, r.rows, static_cast<double*>(view.buf), rs, cs))
        continue;
      // (other categories than the registered ones, a refused one: the column the caller's, where
      // it takes such columns; else the whole read)
      PyObject* index = left ? PyLong_FromSize_t(k) : nullptr;
      read = index && PyList_Append(left, index) == 0;
      Py_XDECREF(index);
      if (PyErr_Occurred()) {
        PyBuffer_Release(&view);
        Py_DECREF(result);
        release();
        return nullptr;
      }
    }
    PyBuffer_Release(&view);
    if (!read) {
      Py_DECREF(result);
      result = PyLong_FromLong(1);
    }
  }
  release();
  return result;
}

PyMethodDef methods[] = {
    {"arrow_blocks", arrow_blocks, METH_VARARGS, "arrow_blocks(blocks[, categorical]) -> (kinds, columns, arrays, others)"},
    {"same_values", same_values, METH_VARARGS, "same_values(a, b) -> True, False, or None: arrow's equals tells"},
    {"label_index", label_index, METH_VARARGS, "label_index(labels, codes) -> an index of labels, or None"},
    {"index_codes", index_codes, METH_VARARGS, "index_codes(index, array, out) -> 0 found, 1 a value not, -1 not strings"},
    {"matches", matches, METH_VARARGS, "matches(plan, table) -> whether the table's columns are the plan's"},
    {"plan", make_plan, METH_VARARGS, "plan(width, numbers, dictionaries[, columns]) -> a plan"},
    {"set_labels", set_labels, METH_VARARGS, "set_labels(plan, k, dictionary, lut, unseen)"},
    {"set_label_codes", set_label_codes, METH_VARARGS, "set_label_codes(plan, k, labels, unseen_error)"},
    {"set_number_codes", set_number_codes, METH_VARARGS, "set_number_codes(plan, k, labels, unseen_error)"},
    {"set_string_codes", set_string_codes, METH_VARARGS, "set_string_codes(plan, k, labels, unseen_error)"},
    {"read_stream", read_stream, METH_VARARGS,
     "read_stream(plan or None, stream capsule, out) -> 0 read, a Table, or None (arrow cannot import it)"},
    {"read_blocks", read_blocks, METH_VARARGS,
     "read_blocks(plan, blocks, kinds, columns, categorical, out[, ndarray, placements, left]) -> 0 read, 1 left to the "
     "caller, 2 other blocks"},
    {"frame_blocks", frame_blocks, METH_VARARGS, "frame_blocks(blocks, categorical, ndarray) -> (kinds, columns, placements)"},
    {"set_frame", set_frame, METH_VARARGS, "set_frame(plan, numpy_blocks, objects, missing[, categoricals])"},
    {"set_categories", set_categories, METH_VARARGS, "set_categories(plan, k, categories, lut, unseen) -> whether read here"},
    {"read", read, METH_VARARGS,
     "read(plan, table or list of ChunkedArrays, out[, check]) -> 0 read, 1 left to the caller, 2 other columns"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_arrow_rows", "Rows of pyarrow Tables read in place.", -1, methods};

void* exported(PyObject* capi, const char* name) {
  PyObject* capsule = PyDict_GetItemString(capi, name);  // (borrowed)
  return capsule ? PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule)) : nullptr;
}

}  // namespace

PyMODINIT_FUNC PyInit__arrow_rows(void) {
  PyObject* lib = PyImport_ImportModule("pyarrow.lib");
  if (!lib) return nullptr;
  PyObject* capi = PyObject_GetAttrString(lib, "__pyx_capi__");
  Py_DECREF(lib);
  if (!capi) return nullptr;
  unwrap_table = reinterpret_cast<UnwrapTable>(exported(capi, "pyarrow_unwrap_table"));
  unwrap_array = reinterpret_cast<UnwrapArray>(exported(capi, "pyarrow_unwrap_array"));
  unwrap_chunked_array = reinterpret_cast<UnwrapChunkedArray>(exported(capi, "pyarrow_unwrap_chunked_array"));
  wrap_table = reinterpret_cast<WrapTable>(exported(capi, "pyarrow_wrap_table"));
  Py_DECREF(capi);
  if (!unwrap_table || !unwrap_array || !unwrap_chunked_array || !wrap_table) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "pyarrow exports no pyarrow_unwrap_table");
    return nullptr;
  }
  names.values = PyUnicode_InternFromString("values");
  names.pa_array = PyUnicode_InternFromString("_pa_array");
  names.mgr_locs = PyUnicode_InternFromString("mgr_locs");
  names.own_mgr_locs = PyUnicode_InternFromString("_mgr_locs");
  names.indexer = PyUnicode_InternFromString("indexer");
  names.own_ndarray = PyUnicode_InternFromString("_ndarray");
  names.own_dtype = PyUnicode_InternFromString("_dtype");
  names.own_categories = PyUnicode_InternFromString("_categories");
  names.own_values = PyUnicode_InternFromString("_values");
  if (!names.values || !names.pa_array || !names.mgr_locs || !names.own_mgr_locs || !names.indexer ||
      !names.own_ndarray || !names.own_dtype || !names.own_categories || !names.own_values)
    return nullptr;
  block_values.name = names.values;
  block_placement.name = names.own_mgr_locs;
  placement_indexer.name = names.indexer;
  return PyModule_Create(&module);
}
