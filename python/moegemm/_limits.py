"""Limits of the contract that both front ends check before any op runs (docs/ops.md section 0)."""

MAX_EXPERTS = 1024  # the contract's kMaxExperts
MAX_OFFSET_ROWS = 2**31 - 1  # the last row an int32 offset can end at
MAX_OPERAND_BYTES = 2**62  # the contract's kMaxOperandBytes: no operand spans more
