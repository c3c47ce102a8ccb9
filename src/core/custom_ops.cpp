// torch.ops.xllm_kernel.*: every catalog operation's schema, defined once from its contract when
// its group registers (a library fragment per group, so the order in which the library's files
// initialize does not matter). The contract is checked first (src/core/contract_check.h: among
// others, `mutates` must be exactly the schema's Tensor(a!) arguments). Each declared operation
// then registers its Meta (fake) kernel and its CPU and CUDA kernels calling the device's prepared
// binding into the fragment (Operation::dispatcher_kernels, set by src/ops/common/family.h); the
// PrivateUse1 (npu) kernel of every operation is registered here, boxed
// (src/core/prepared_dispatch.h). A family needs no TORCH_LIBRARY_IMPL block.
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/library.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <variant>
#include <vector>

#include "src/core/contract_check.h"
#include "src/core/prepared_dispatch.h"
#include "src/core/strings.h"
#include "xllm_kernel/catalog.h"

namespace xllm_kernel::detail {

namespace {

bool is_identifier(const std::string& name) {
  if (name.empty() || !(std::islower(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

void check_contract(const OpContract& contract) {
  const std::string who = "operation '" + contract.operation + "'";
  if (!is_identifier(contract.operation)) {
    throw std::invalid_argument(who + ": the name must be lower_snake_case ([a-z_][a-z0-9_]*), as torch.ops and the "
                                "implementation names <device>.<solution>.<operation> need");
  }
  if (contract.version < 1) {
    throw std::invalid_argument(who + ": version must be >= 1, got " + std::to_string(contract.version));
  }
  std::variant<c10::OperatorName, c10::FunctionSchema> parsed = c10::OperatorName("", "");
  try {
    parsed = torch::jit::parseSchemaOrName(contract.schema);
  } catch (const std::exception& e) {
    throw std::invalid_argument(who + ": schema '" + contract.schema + "' does not parse: " + e.what());
  }
  if (!std::holds_alternative<c10::FunctionSchema>(parsed)) {
    throw std::invalid_argument(who + ": schema '" + contract.schema +
                                "' has no argument list; expected e.g. '" + contract.operation +
                                "(Tensor input) -> Tensor'");
  }
  const auto& schema = std::get<c10::FunctionSchema>(parsed);
  if (schema.name() != contract.operation || !schema.overload_name().empty()) {
    throw std::invalid_argument(who + ": the schema must be named '" + contract.operation + "' (no namespace, no "
                                "overload), got '" + schema.name() +
                                (schema.overload_name().empty() ? "" : "." + schema.overload_name()) + "'");
  }
  std::vector<std::string> written;
  for (const auto& argument : schema.arguments()) {
    if (argument.alias_info() != nullptr && argument.alias_info()->isWrite()) written.push_back(argument.name());
  }
  std::vector<std::string> declared = contract.mutates;
  std::sort(written.begin(), written.end());
  std::sort(declared.begin(), declared.end());
  if (written != declared) {
    throw std::invalid_argument(who + ": mutates [" + detail::join(contract.mutates, ", ") +
                                "] disagrees with the schema, which writes [" + detail::join(written, ", ") +
                                "] (mark each mutated tensor Tensor(a!) in the schema and list it in mutates)");
  }
  for (const auto& ret : schema.returns()) {
    if (ret.alias_info() != nullptr && !contract.aliases_inputs) {
      throw std::invalid_argument(who + ": the schema returns an alias of an input; declare aliases_inputs=true");
    }
  }
}


void define_schemas(const Group& group) {
  for (const Operation* op : group.operations) check_contract(op->contract());
  static std::mutex mutex;
  static auto* fragments = new std::vector<std::unique_ptr<torch::Library>>();  // kept until exit
  std::lock_guard<std::mutex> lock(mutex);
  auto fragment = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "xllm_kernel", std::nullopt, __FILE__,
                                                   __LINE__);
  for (const Operation* op : group.operations) {
    fragment->def(torch::schema(op->contract().schema.c_str()));
    if (op->dispatcher_kernels() != nullptr) op->dispatcher_kernels()(*op, *fragment);
    fragment->impl(op->name().c_str(),
                   torch::dispatch(c10::DispatchKey::PrivateUse1,
                                   torch::CppFunction::makeFromBoxedFunctor(
                                       std::make_unique<PreparedDispatch>(*op, Device::kNpu))));
  }
  fragments->push_back(std::move(fragment));
}

}  // namespace xllm_kernel::detail

// The namespace's one library; the schemas come in fragments, one per group.
TORCH_LIBRARY(xllm_kernel, m) {}
