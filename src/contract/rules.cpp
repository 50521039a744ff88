#include "contract/rules.hpp"

#include "contract/overlap.hpp"

#include <cstdio>
#include <limits>
#include <string>

// GCC 12 reports a false -Wrestrict in operator+(const char*, std::string&&) (GCC bug 105651).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace moegemm::contract {
namespace {

const char* device_name(Device d) { return d == Device::host ? "host" : "cuda"; }

std::string address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

bool is_8bit(DType t) { return t == DType::e4m3 || t == DType::e5m2; }

/// " (N bytes)": `count` elements of `dtype` in bytes, or "" where that product would not fit in int64.
std::string bytes_text(int64_t count, DType dtype) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<int64_t>(dtype_size(dtype)), &bytes)) return "";
  return " (" + std::to_string(bytes) + " bytes)";
}

/// The largest operand, in bytes: 2^62, far past any memory, so that sums of two spans still fit in int64.
constexpr int64_t kMaxOperandBytes = int64_t{1} << 62;

/// Whether the tensor's extents times its element size stay within `limit` bytes (negative extents, which the
/// shape rules refuse, count as 0 here).
bool spans_at_most(const TensorView& t, int64_t limit) {
  int64_t bytes = static_cast<int64_t>(dtype_size(t.dtype));
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] <= 0) return true;
    if (__builtin_mul_overflow(bytes, t.shape[i], &bytes) || bytes > limit) return false;
  }
  return true;
}

/// Whether the tensor's strides reach at most `limit` bytes past its first element: the sum over its dims of
/// (extent - 1) x |stride| x element size. An empty tensor reaches nothing.
bool reaches_at_most(const TensorView& t, int64_t limit) {
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] <= 0) return true;
  }
  const auto size = static_cast<int64_t>(dtype_size(t.dtype));
  int64_t reach = 0;
  for (int i = 0; i < t.rank; ++i) {
    int64_t step = 0;
    if (t.shape[i] == 1) continue;  // a stride that no index steps is free, whatever its value (INT64_MIN too)
    if (t.strides[i] == std::numeric_limits<int64_t>::min() ||
        __builtin_mul_overflow(t.shape[i] - 1, t.strides[i] < 0 ? -t.strides[i] : t.strides[i], &step) ||
        __builtin_mul_overflow(step, size, &step) || __builtin_add_overflow(reach, step, &reach) || reach > limit) {
      return false;
    }
  }
  return true;
}

/// "a, b or c" of the items' names.
template <class T, class Name>
std::string or_list(std::initializer_list<T> items, Name name) {
  std::string s;
  std::size_t i = 0;
  for (const T& t : items) {
    if (i > 0) s += (i + 1 == items.size()) ? " or " : ", ";
    s += name(t);
    ++i;
  }
  return s;
}

std::string dtype_list(std::initializer_list<DType> ts) { return or_list(ts, dtype_name); }

}  // namespace

std::string format_shape(const TensorView& t) {
  if (!t.defined()) return "none";
  if (t.rank > TensorView::kMaxRank || t.rank < 0) return "rank " + std::to_string(t.rank);
  std::string s = "(";
  bool negative = false;
  for (int i = 0; i < t.rank; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(t.shape[i]);
    negative = negative || t.shape[i] < 0;
  }
  if (t.rank == 1) s += ",";
  return s + ")" + (negative ? " (a negative extent)" : "");
}

std::string format_strides(const TensorView& t) {
  std::string s = "(";
  for (int i = 0; i < t.rank; ++i) s += (i > 0 ? ", " : "") + std::to_string(t.strides[i]);
  return s + (t.rank == 1 ? ",)" : ")");
}

std::string format_dims(std::initializer_list<Dim> dims) {
  std::string s = "(";
  std::string sources;
  int i = 0;
  for (const Dim& d : dims) {
    if (i++ > 0) s += ", ";
    if (d.symbol[0] == '\0') {
      s += std::to_string(d.value);  // a literal size, e.g. amax's (2,)
      continue;
    }
    s += d.symbol;
    if (d.value >= 0) s += "=" + std::to_string(d.value);
    if (d.from != nullptr) {
      sources += sources.empty() ? " with " : ", ";
      sources += std::string(d.symbol) + " from " + d.from;
    }
  }
  if (dims.size() == 1) s += ",";
  return s + ")" + sources;
}

void Rules::place(std::initializer_list<Operand> operands) {
  for (const Operand& o : operands) {
    const TensorView& t = *o.view;
    if (!t.defined()) continue;
    // Before anything reads its shape: a view holds at most 4 extents, and a negative rank none (a hand-set
    // rank of -1 would otherwise pass for an absent operand, and a given prob or c be dropped).
    if (t.rank > TensorView::kMaxRank || t.rank < 0) {
      fail(ErrorCode::invalid_argument, o.name, "a tensor of rank 1 to " + std::to_string(TensorView::kMaxRank),
           "rank " + std::to_string(t.rank));
    }
    if (t.device != Device::host && t.device != Device::cuda) {  // a value cast from outside the enum
      fail(ErrorCode::invalid_argument, o.name, "a host or cuda tensor",
           "device value " + std::to_string(static_cast<int>(t.device)));
    }
    if (count_ == kMaxOperands) {
      throw Error(ErrorCode::internal, std::string(op_) + ": more operands than the contract check holds");
    }
    operands_[count_++] = o;
  }
}

Device Rules::settle() {
  if (count_ == 0) return backend_ = Device::host;
  // No byte span or offset computed from the sizes or the strides may wrap. An input is named before any
  // output, whose size follows from the inputs.
  auto first_misfit = [this](bool (*fits)(const TensorView&, int64_t)) -> const Operand* {
    const Operand* misfit = nullptr;
    for (int i = 0; i < count_; ++i) {
      const Operand& o = operands_[i];
      if (fits(*o.view, kMaxOperandBytes)) continue;
      if (o.role == Role::input) return &o;
      if (!misfit) misfit = &o;
    }
    return misfit;
  };
  if (const Operand* o = first_misfit(spans_at_most)) {
    fail(ErrorCode::invalid_argument, o->name, "at most 2^62 bytes (its sizes multiplied)",
         "shape " + format_shape(*o->view) + " of " + dtype_name(o->view->dtype));
  }
  if (const Operand* o = first_misfit(reaches_at_most)) {
    fail(ErrorCode::invalid_argument, o->name,
         "strides that reach at most 2^62 bytes past its first element (the extents less one times the strides)",
         "strides " + format_strides(*o->view) + " with shape " + format_shape(*o->view) + " of " +
             dtype_name(o->view->dtype));
  }
  int on_host = 0;
  for (int i = 0; i < count_; ++i) on_host += operands_[i].view->device == Device::host;
  const int on_cuda = count_ - on_host;
  backend_ = on_host > on_cuda ? Device::host : on_cuda > on_host ? Device::cuda : operands_[0].view->device;
  for (int i = 0; i < count_; ++i) {
    const Device device = operands_[i].view->device;
    if (device != backend_) {
      fail(ErrorCode::invalid_argument, operands_[i].name,
           std::string("a ") + device_name(backend_) + " tensor like the other operands (every tensor of a "
               "call on one device)",
           std::string("a ") + device_name(device) + " tensor");
    }
  }
  return backend_;
}

void Rules::fail(ErrorCode code, const char* operand, const std::string& expected,
                 const std::string& got) const {
  throw Error(code, std::string(op_) + ": " + operand + ": expected " + expected + ", got " + got);
}

void Rules::present(const char* name, const TensorView& t, std::initializer_list<Dim> dims) const {
  if (!t.defined()) fail(ErrorCode::invalid_argument, name, "a tensor of shape " + format_dims(dims), "none");
}

void Rules::shape(const char* name, const TensorView& t, std::initializer_list<Dim> dims) const {
  bool ok = t.defined() && t.rank == static_cast<int>(dims.size());
  if (ok) {
    int i = 0;
    for (const Dim& d : dims) {
      if ((d.value >= 0 && t.shape[i] != d.value) || t.shape[i] < 0) ok = false;
      ++i;
    }
  }
  if (!ok) fail(ErrorCode::invalid_argument, name, "shape " + format_dims(dims), format_shape(t));
}

void Rules::positive(const char* name, const char* symbol, int64_t value) const {
  if (value <= 0) {
    fail(ErrorCode::invalid_argument, name, std::string(symbol) + " > 0",
         std::string(symbol) + "=" + std::to_string(value));
  }
}

void Rules::input_dtype(const char* name, DType t) const {
  const bool host = backend_ == Device::host;
  if (t == DType::bf16) return;
  if (host && (t == DType::f16 || t == DType::f32 || t == DType::f64)) return;
  // What this backend takes, as the start of every message below.
  const std::string taken = host ? "bf16, f16, f32 or f64" : "bf16";
  if (is_8bit(t)) {
    fail(ErrorCode::unsupported, name,
         taken + " (8-bit inputs are not supported yet: the FP8 path with per-block scales is a later milestone)",
         dtype_name(t));
  }
  if (t == DType::e2m1) {
    fail(ErrorCode::unsupported, name,
         taken + " (FP4 has no tensor-core path on sm_90: Hopper has no block-scaled or 4-bit MMA)", dtype_name(t));
  }
  if (t == DType::f16 || t == DType::f32 || t == DType::f64) {
    // Refused here, not by the launcher, so that the workspace query and `validate` refuse it too.
    fail(ErrorCode::unsupported, name,
         "bf16 on the cuda backend (the sm_90a kernels take bf16 inputs; f16, f32 and f64 inputs are accepted "
         "only when every tensor is on the host)",
         dtype_name(t));
  }
  fail(ErrorCode::invalid_argument, name, "dtype " + taken, dtype_name(t));
}

void Rules::same_dtype(const char* name, DType t, const char* ref_name, DType ref) const {
  if (t != ref) {
    fail(ErrorCode::invalid_argument, name,
         std::string("dtype ") + dtype_name(ref) + " (the dtype of " + ref_name + ")", dtype_name(t));
  }
}

void Rules::output_dtype(const char* name, DType t) const {
  if (t == DType::bf16 || t == DType::f16 || t == DType::f32) return;
  if (t == DType::f64 && backend_ == Device::host) return;
  fail(ErrorCode::invalid_argument, name,
       "dtype " + (backend_ == Device::host ? dtype_list({DType::bf16, DType::f16, DType::f32, DType::f64})
                                            : dtype_list({DType::bf16, DType::f16, DType::f32})) +
           (t == DType::f64 ? " (f64 only on the host backend)" : ""),
       dtype_name(t));
}

void Rules::bias_dtype(const char* name, DType t) const {
  if (t == DType::bf16 || t == DType::f32) return;
  if (t == DType::f64 && backend_ == Device::host) return;
  fail(ErrorCode::invalid_argument, name,
       "dtype " + (backend_ == Device::host ? dtype_list({DType::bf16, DType::f32, DType::f64})
                                            : dtype_list({DType::bf16, DType::f32})),
       dtype_name(t));
}

void Rules::dtype_is(const char* name, DType t, DType expected) const {
  if (t != expected) {
    fail(ErrorCode::invalid_argument, name, std::string("dtype ") + dtype_name(expected), dtype_name(t));
  }
}

void Rules::dtype_in(const char* name, DType t, DType first, DType second) const {
  if (t != first && t != second) {
    fail(ErrorCode::invalid_argument, name, "dtype " + dtype_list({first, second}), dtype_name(t));
  }
}

void Rules::row_bytes(const char* name, const char* symbol, int64_t value, DType dtype) const {
  // Every element size divides 16: the count is checked in elements, so that no product can overflow.
  const int64_t multiple = 16 / static_cast<int64_t>(dtype_size(dtype));
  if (value % multiple == 0) return;
  fail(ErrorCode::invalid_argument, name,
       std::string(symbol) + " * sizeof(" + dtype_name(dtype) + ") a multiple of 16 bytes (16-byte alignment "
           "rule: " + symbol + " % " + std::to_string(multiple) + " == 0 for " + dtype_name(dtype) + ")",
       std::string(symbol) + "=" + std::to_string(value) + bytes_text(value, dtype));
}

void Rules::table_matrices(const char* name, const char* row_symbol, int64_t rows, const char* col_symbol,
                           int64_t cols, DType dtype) const {
  if (rows <= 0 || cols <= 0) return;
  if (spans_at_most(TensorView::contiguous(nullptr, dtype, {rows, cols}), kMaxOperandBytes)) return;
  fail(ErrorCode::invalid_argument, name,
       std::string("each matrix it points to, (") + row_symbol + ", " + col_symbol + ") of " + dtype_name(dtype) +
           ", at most 2^62 bytes (its sizes multiplied)",
       "(" + std::string(row_symbol) + "=" + std::to_string(rows) + ", " + col_symbol + "=" + std::to_string(cols) +
           ")");
}

void Rules::kernel_extent(const char* name, const char* symbol, int64_t value) const {
  if (backend_ != Device::cuda || value <= std::numeric_limits<int32_t>::max()) return;
  fail(ErrorCode::unsupported, name,
       std::string(symbol) + " <= 2147483647 on the cuda backend (the sm_90a kernels index it with 32-bit integers)",
       std::string(symbol) + "=" + std::to_string(value));
}

void Rules::contiguous_rows_on_device(const char* name, const TensorView& t, const char* cols) const {
  if (backend_ != Device::cuda || t.shape[0] <= 1 || t.strides[0] == t.shape[1]) return;
  fail(ErrorCode::unsupported, name,
       "contiguous rows on the cuda backend (stride(0) == " + std::string(cols) + "=" + std::to_string(t.shape[1]) +
           "; the sm_90a kernels read its rows without a row stride)",
       "stride(0)=" + std::to_string(t.strides[0]));
}

void Rules::option(const char* name, int value, std::initializer_list<const char*> names) const {
  if (value >= 0 && value < static_cast<int>(names.size())) return;
  fail(ErrorCode::invalid_argument, name, or_list(names, [](const char* n) { return n; }),
       "value " + std::to_string(value));
}

void Rules::aligned_base(const char* name, const TensorView& t) const {
  if (t.data == nullptr) fail(ErrorCode::invalid_argument, name, "a non-null data pointer", "nullptr");
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    fail(ErrorCode::invalid_argument, name, "a 16-byte aligned base address (16-byte alignment rule)",
         address(t.data) + "; pass a copy of the operand, which starts aligned");
  }
}

void Rules::matrix(const char* name, const TensorView& t, const char* cols) const {
  const int64_t rows = t.shape[0], ncols = t.shape[1];
  if (rows > 0 && t.strides[1] != 1) {  // no rows: nothing is read, any strides (torch's empty gradients)
    fail(ErrorCode::invalid_argument, name,
         "a row-major matrix with unit column stride (stride(1) == 1; transposed or permuted views are not "
         "read)",
         "strides (" + std::to_string(t.strides[0]) + ", " + std::to_string(t.strides[1]) + ")");
  }
  if (rows > 1 && t.strides[0] < ncols) {  // one row: no second row to overlap, any stride (docs/ops.md §0)
    fail(ErrorCode::invalid_argument, name,
         "row stride stride(0) >= " + std::string(cols) + "=" + std::to_string(ncols) +
             " (rows must not overlap)",
         "stride(0)=" + std::to_string(t.strides[0]));
  }
  row_bytes(name, cols, ncols, t.dtype);
  if (rows > 1 && t.strides[0] % (16 / static_cast<int64_t>(dtype_size(t.dtype))) != 0) {
    fail(ErrorCode::invalid_argument, name, "a row stride that is a multiple of 16 bytes (16-byte alignment rule)",
         "stride(0)=" + std::to_string(t.strides[0]) + " elements" + bytes_text(t.strides[0], t.dtype));
  }
  if (!reads_pointer(t) || rows == 0 || ncols == 0) return;
  aligned_base(name, t);
}

void Rules::matrix_either_order(const char* name, const TensorView& t, const char* rows, const char* cols) const {
  const int64_t nrows = t.shape[0], ncols = t.shape[1];
  if (!t.is_column_major()) {
    if (nrows > 0 && ncols > 1 && t.strides[1] != 1) {  // neither order (a single row is read row-major)
      fail(ErrorCode::invalid_argument, name,
           "a row-major matrix (stride(1) == 1) or, with more than one row, a column-major one (stride(0) == 1)",
           "strides (" + std::to_string(t.strides[0]) + ", " + std::to_string(t.strides[1]) + ")");
    }
    return matrix(name, t, cols);
  }
  if (t.strides[1] < nrows) {
    fail(ErrorCode::invalid_argument, name,
         "column stride stride(1) >= " + std::string(rows) + "=" + std::to_string(nrows) +
             " for a column-major matrix (columns must not overlap)",
         "stride(1)=" + std::to_string(t.strides[1]));
  }
  row_bytes(name, cols, ncols, t.dtype);  // rule 6 holds for K in either order: named here, as for a row-major A
  if (t.strides[1] % (16 / static_cast<int64_t>(dtype_size(t.dtype))) != 0) {
    fail(ErrorCode::invalid_argument, name,
         "a column stride that is a multiple of 16 bytes for a column-major matrix (16-byte alignment rule)",
         "stride(1)=" + std::to_string(t.strides[1]) + " elements" + bytes_text(t.strides[1], t.dtype));
  }
  if (reads_pointer(t)) aligned_base(name, t);
}

bool Rules::reads_pointer(const TensorView& t) const {
  if (pointers_ != Pointers::given) return pointers_ == Pointers::check;
  if (t.data != nullptr) return true;
  for (int i = 0; i < count_; ++i) {  // null data: skipped only for an output still to be allocated
    if (operands_[i].view == &t) return operands_[i].role != Role::output;
  }
  return true;
}

void Rules::stacked_matrices(const char* name, const TensorView& t, const char* cols) const {
  if (!t.is_contiguous()) {
    fail(ErrorCode::invalid_argument, name,
         "a contiguous row-major tensor (packed, experts outermost: no gap between rows or experts, no "
         "transposed or permuted view)",
         "strides " + format_strides(t));
  }
  row_bytes(name, cols, t.shape[t.rank - 1], t.dtype);
  if (!reads_pointer(t) || t.numel() == 0) return;
  aligned_base(name, t);
}

void Rules::expert_matrices(const char* name, const TensorView& t, const char* cols) const {
  row_bytes(name, cols, t.shape[2], t.dtype);
  if (t.numel() == 0) return;  // nothing is read: any strides (torch's empty slices keep their parent's)
  auto strides_text = [&] {
    return "strides (" + std::to_string(t.strides[0]) + ", " + std::to_string(t.strides[1]) + ", " +
           std::to_string(t.strides[2]) + ")";
  };
  if (t.shape[2] > 1 && t.strides[2] != 1) {
    fail(ErrorCode::invalid_argument, name,
         "unit stride in its last dim (stride(2) == 1: rows of " + std::string(cols) +
             " contiguous elements; a view whose last dim is strided, such as experts innermost, is not read)",
         strides_text());
  }
  const int64_t multiple = 16 / static_cast<int64_t>(dtype_size(t.dtype));
  // The tensor map holds each stride in bytes below 2^40 (cuTensorMapEncodeTiled).
  const int64_t map_limit = (int64_t{1} << 40) / static_cast<int64_t>(dtype_size(t.dtype));
  auto stride_rule = [&](int dim, const char* what) {
    const int64_t s = t.strides[dim];
    if (s > 0 && s % multiple == 0 && (backend_ != Device::cuda || s < map_limit)) return;
    const std::string got = "stride(" + std::to_string(dim) + ")=" + std::to_string(s) + " elements" +
                            bytes_text(s, t.dtype);
    if (s > 0 && s % multiple == 0) {
      fail(ErrorCode::unsupported, name,
           std::string(what) + " below 2^40 bytes on the cuda backend (the tensor map's stride limit)", got);
    }
    fail(ErrorCode::invalid_argument, name,
         std::string("a positive ") + what + " that is a multiple of 16 bytes (16-byte alignment rule)", got);
  };
  if (t.shape[1] > 1) {
    if (t.strides[1] < t.shape[2]) {
      fail(ErrorCode::invalid_argument, name,
           "row stride stride(1) >= " + std::string(cols) + "=" + std::to_string(t.shape[2]) +
               " (rows must not overlap)",
           strides_text());
    }
    stride_rule(1, "row stride");
  }
  if (t.shape[0] > 1) stride_rule(0, "expert stride");
  if (!reads_pointer(t)) return;
  aligned_base(name, t);
}

void Rules::vector(const char* name, const TensorView& t) const {
  if (t.shape[0] > 1 && t.strides[0] != 1) {
    fail(ErrorCode::invalid_argument, name, "a contiguous vector (stride(0) == 1)",
         "stride(0)=" + std::to_string(t.strides[0]));
  }
  if (!reads_pointer(t) || t.shape[0] == 0) return;
  if (t.data == nullptr) fail(ErrorCode::invalid_argument, name, "a non-null data pointer", "nullptr");
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
    fail(ErrorCode::invalid_argument, name,
         "a base address aligned to " + std::to_string(dtype_size(t.dtype)) + " bytes (its element size)",
         address(t.data));
  }
}

void Rules::pointer_table(const char* name, const TensorView& t) const {
  if (!reads_pointer(t) || backend_ != Device::host) return;  // device tables cannot be read without a sync
  const auto* entries = t.ptr<const int64_t>();
  for (int64_t g = 0; g < t.shape[0]; ++g) {
    const auto p = static_cast<uint64_t>(entries[g]);
    if (p == 0 || p % 16 != 0) {
      fail(ErrorCode::invalid_argument, name,
           "a non-null, 16-byte aligned address in every entry (16-byte alignment rule)",
           std::string(name) + "[" + std::to_string(g) + "] = " +
               address(reinterpret_cast<const void*>(static_cast<uintptr_t>(p))));
    }
  }
}

void Rules::disjoint() const {
  for (int i = 0; i < count_; ++i) {
    const Operand& out = operands_[i];
    if (out.role == Role::input || !reads_pointer(*out.view)) continue;
    const auto overlapping = [&](const Operand& other) {
      if (!reads_pointer(*other.view) || !views_overlap(*out.view, *other.view)) return;
      fail(ErrorCode::invalid_argument, out.name,
           "memory that no other operand of the call uses (outputs overlap neither each other nor the inputs)",
           std::string("memory overlapping ") + other.name + " (at " + address(out.view->data) + " and " +
               address(other.view->data) + ")");
    };
    // Every input, and the outputs placed after this one (an earlier output has met this one already).
    for (int j = 0; j < count_; ++j) {
      if (operands_[j].role == Role::input || j > i) overlapping(operands_[j]);
    }
  }
}

}  // namespace moegemm::contract
