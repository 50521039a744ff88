// OperandCursor: ordered access to the operands of one call.
#include "binding_call.hpp"

namespace moegemm::jax_binding {

namespace {

[[noreturn]] void missing(const char* op, const char* kind, const char* name, std::size_t given) {
  throw Error(ErrorCode::internal, std::string(op) + ": " + kind + " '" + name +
                                       "' is missing: the call passes only " + std::to_string(given) + " " +
                                       kind + "s");
}

}  // namespace

const TensorView& OperandCursor::input(const char* name) {
  if (next_in_ >= ops_.in.size()) missing(op_, "input", name, ops_.in.size());
  return ops_.in[next_in_++];
}

const TensorView& OperandCursor::output(const char* name) {
  if (next_out_ >= ops_.out.size()) missing(op_, "output", name, ops_.out.size());
  return ops_.out[next_out_++];
}

TensorView OperandCursor::input_if(bool present, const char* name) {
  return present ? input(name) : TensorView{};
}

TensorView OperandCursor::output_if(bool present, const char* name) {
  return present ? output(name) : TensorView{};
}

void OperandCursor::finish() const {
  if (next_in_ != ops_.in.size() || next_out_ != ops_.out.size()) {
    throw Error(ErrorCode::internal,
                std::string(op_) + ": the call passes " + std::to_string(ops_.in.size()) + " inputs and " +
                    std::to_string(ops_.out.size()) + " outputs (plus workspace), the op takes " +
                    std::to_string(next_in_) + " and " + std::to_string(next_out_));
  }
}

}  // namespace moegemm::jax_binding
