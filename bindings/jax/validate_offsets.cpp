// C ABI for Python (ctypes): the opt-in host check of offsets values behind the ops' validate=True
// (docs/ops.md §0 "offsets"), on offsets the caller has already read to the host.
#include <cstdint>
#include <exception>
#include <string>

#include "messages.hpp"
#include "moegemm/ops.hpp"

/// Checks host offsets `offsets` (count int32 values) of op `op` against the `rows` rows they split, as the
/// C++ ops' validate=true does: each in [0, rows] and non-decreasing. Returns 0 when they are; else 1 and
/// the message "<op>: offsets: expected ..., got offsets[i] = v" for the first bad index (also for a count
/// outside [1, 1024] or rows < 0), nul-terminated and truncated to err_len.
extern "C" int moegemm_jax_validate_offsets(const char* op, const int32_t* offsets, int64_t count, int64_t rows,
                                            char* err, std::size_t err_len) {
  using namespace moegemm;
  using jax_binding::write_message;
  try {
    TensorView view;
    view.data = const_cast<int32_t*>(offsets);
    view.dtype = DType::i32;
    view.device = Device::host;
    view.rank = 1;
    view.shape[0] = count;
    view.strides[0] = 1;
    validate_offsets(view, rows);
    return 0;
  } catch (const Error& e) {
    // validate_offsets names itself; the caller's op is the one to blame.
    std::string message = jax_binding::jax_message(e);
    const std::string own = "validate_offsets: ";
    if (message.rfind(own, 0) == 0) message = std::string(op ? op : "") + ": " + message.substr(own.size());
    write_message(err, err_len, message);
    return e.code() == ErrorCode::invalid_argument ? 1 : 2;
  } catch (const std::exception& e) {
    write_message(err, err_len, e.what());
    return 2;
  }
}
