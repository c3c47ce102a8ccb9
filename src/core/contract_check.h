// The check every operation's contract gets when its group registers (the library's groups, in
// src/core/custom_ops.cpp) or when it is made at run time (make_boxed_operation): not public.
#pragma once

#include "xllm_kernel/contract.h"

namespace xllm_kernel::detail {

// Throws std::invalid_argument naming the operation unless: the name is lower_snake_case, the
// version >= 1, the schema parses and is named after the operation (no namespace, no overload),
// `mutates` lists exactly the arguments the schema marks written (Tensor(a!)), and a returned
// alias of an input is declared (aliases_inputs).
void check_contract(const OpContract& contract);

}  // namespace xllm_kernel::detail
