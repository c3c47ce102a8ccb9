// The argument checks every sampling bridge shares (src/ops/sampling/internal.h).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdint>

#include "src/ops/sampling/internal.h"
#include "xllm_kernel/ops/sampling.h"

namespace xllm_kernel::sampling {
namespace {

// A per-row parameter: defined, on logits' device, of its dtype, [batch]; returned contiguous.
at::Tensor row_parameter(const char* arg, const at::Tensor& t, at::ScalarType dtype, const at::Tensor& logits) {
  TORCH_CHECK(t.defined(), op_name(), ": ", arg, " must be a defined tensor, got an undefined one");
  TORCH_CHECK(t.device() == logits.device(), op_name(), ": ", arg, " must be on logits' device ", logits.device(),
              ", got ", t.device());
  TORCH_CHECK(t.scalar_type() == dtype, op_name(), ": ", arg, " must be ", bridge::dtype_name(dtype), ", got ",
              bridge::dtype_name(t.scalar_type()));
  TORCH_CHECK(t.dim() == 1 && t.size(0) == logits.size(0), op_name(), ": ", arg, " must be [batch] with logits' batch ",
              logits.size(0), ", got shape ", t.sizes());
  return t.contiguous();
}

}  // namespace

RowParameters check_arguments(const Call& call) {
  const at::Tensor& logits = call.logits;
  bridge::check_floating_tensor(op_name(), "logits", logits, call.device);
  TORCH_CHECK(logits.dim() == 2, op_name(), ": logits must be [batch, vocab], got shape ", logits.sizes());
  TORCH_CHECK(logits.size(1) >= 1 && logits.size(1) <= INT32_MAX - 1, op_name(),
              ": logits' vocab (last dimension) must be in [1, 2^31 - 1), got shape ", logits.sizes());
  RowParameters r;
  r.temperature = row_parameter("temperature", call.temperature, at::kFloat, logits);
  r.top_k = row_parameter("top_k", call.top_k, at::kInt, logits);
  r.top_p = row_parameter("top_p", call.top_p, at::kFloat, logits);
  r.min_p = row_parameter("min_p", call.min_p, at::kFloat, logits);
  r.seeds = row_parameter("seeds", call.seeds, at::kLong, logits);
  r.offsets = row_parameter("offsets", call.offsets, at::kLong, logits);
  return r;
}

void check_parameters_cpu(const RowParameters& r) {
  const float* t = r.temperature.const_data_ptr<float>();
  const float* p = r.top_p.const_data_ptr<float>();
  const float* m = r.min_p.const_data_ptr<float>();
  for (int64_t i = 0; i < r.temperature.size(0); ++i) {
    TORCH_CHECK(std::isfinite(t[i]) && t[i] >= 0, op_name(), ": temperature[", i,
                "] must be >= 0 and finite (0: greedy), got ", t[i]);
    TORCH_CHECK(p[i] > 0 && p[i] <= 1, op_name(), ": top_p[", i, "] must be in (0, 1] (1: off), got ", p[i]);
    TORCH_CHECK(m[i] >= 0 && m[i] < 1, op_name(), ": min_p[", i, "] must be in [0, 1) (0: off), got ", m[i]);
  }
}

void check_results_cpu(const at::Tensor& tokens, const at::Tensor& row_nan) {
  const int64_t* out = tokens.const_data_ptr<int64_t>();
  const uint8_t* nan = row_nan.const_data_ptr<uint8_t>();
  for (int64_t i = 0; i < tokens.size(0); ++i) {
    TORCH_CHECK(nan[i] == 0, op_name(), ": logits row ", i, " must not hold NaN, got a NaN logit");
    TORCH_CHECK(out[i] != kernels::kInvalidRow, op_name(), ": logits row ", i,
                " must hold a logit above -inf, got none (every logit -inf)");
  }
}

at::Tensor new_output(const at::Tensor& logits) {
  return at::empty({logits.size(0)}, logits.options().dtype(at::kLong));
}

}  // namespace xllm_kernel::sampling
