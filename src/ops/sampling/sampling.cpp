// The sampling group: the sample contract, the declared operation (with its fake kernel), the
// module table and the public API. torch.ops.xllm_kernel.sample reaches the prepared bindings
// through the declared operation (src/ops/common/family.h); the argument checks are in checks.cpp.
#include "xllm_kernel/ops/sampling.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "src/ops/common/family.h"
#include "src/ops/sampling/internal.h"

namespace xllm_kernel {

const OpContract& sample_contract() {
  static const OpContract contract{
      .operation = "sample",
      .version = 1,
      .schema = "sample(Tensor logits, Tensor temperature, Tensor top_k, Tensor top_p, Tensor min_p, Tensor seeds, "
                "Tensor offsets) -> Tensor",
      .mutates = {},
      // exact: the result is a token, which must be one the float64 reference allows (no tolerance).
      .numerical_mode = NumericalMode::kExact,
      .semantics =
          "One token per row of logits [batch, vocab], each row with its own temperature, top_k, top_p, min_p, "
          "seed and offset ([batch] tensors); a row's token never depends on another row. Tokens are ordered by "
          "logit descending, then index ascending. temperature 0: the first token of the order (the argmax, ties "
          "to the lowest index). Otherwise, in float32, w = exp((l - l_max) / temperature); keep the first K "
          "tokens of the order (K = top_k if 0 < top_k < vocab, else vocab), then the shortest prefix of them "
          "whose sum of w is >= top_p times theirs (top_p 1: all), then drop those with w < min_p (p < min_p * "
          "p_max; 0: off). The token is the kept one with the largest w / E, E = -log(u), u = (word >> 9 + 1/2) "
          "2^-23 with word i % 4 of Philox4x32-10 under key (seed low, seed high) of counter (i / 4, 0, offset "
          "low, offset high): an exponential race, P(token) = its renormalized probability, the same token for "
          "every batch size and device wherever float rounding does not separate two quotients or move a mass "
          "across the top_p boundary; ties go to the lower index. Never a token outside the kept set. On the CPU, "
          "temperature >= 0 finite, top_p in (0, 1], min_p in [0, 1), no NaN logit and a logit above -inf in "
          "every row, else an error naming the row; +inf logits take the softmax's limit (the draw is among the "
          "+inf tokens). On CUDA (no synchronization) a NaN counts as -inf and a row with invalid parameters or no "
          "logit above -inf gets -1. Returns a new int64 [batch] tensor.",
      .dtypes = "logits float32, bfloat16, float16; temperature, top_p, min_p float32; top_k int32; seeds, "
                "offsets int64; result int64"};
  return contract;
}

namespace sampling {
namespace {

// The fake checks what metadata can tell (shapes and dtypes) and gives the output's metadata.
at::Tensor sample_fake(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& top_k,
                       const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seeds,
                       const at::Tensor& offsets) {
  TORCH_CHECK(logits.dim() == 2, op_name(), ": logits must be [batch, vocab], got shape ", logits.sizes());
  const auto check = [&](const char* arg, const at::Tensor& t) {
    TORCH_CHECK(t.dim() == 1 && t.size(0) == logits.size(0), op_name(), ": ", arg, " must be [batch] with logits' batch ",
                logits.size(0), ", got shape ", t.sizes());
  };
  check("temperature", temperature);
  check("top_k", top_k);
  check("top_p", top_p);
  check("min_p", min_p);
  check("seeds", seeds);
  check("offsets", offsets);
  return new_output(logits);
}

// The tensor whose device picks the binding: logits (argument 0).
const family::DeclaredOperation<SampleFn>& declared() {
  static const family::DeclaredOperation<SampleFn> operation(sample_contract(), &sample_fake);
  return operation;
}

}  // namespace

const family::StandardModules& modules() {
  static const family::StandardModules modules = family::standard_modules(
      {.family = "sampling",
       .operations = {&sample_operation()},
       .domain = "float32/bfloat16/float16 logits [batch, vocab] (any row stride, vocab < 2^31), per-row float32 "
                 "temperature/top_p/min_p, int32 top_k, int64 seeds/offsets",
         .batch_invariant = {.torch_cpu = true, .native_cpu = true, .torch_cuda = true, .native_cuda = true}});
  return modules;
}

}  // namespace sampling

const TypedOperation<SampleFn>& sample_operation() { return sampling::declared(); }

const Group& sampling_group() {
  static const Group group = sampling::modules().group();
  return group;
}
XLLM_REGISTER_GROUP(sampling_group);

namespace ops {

at::Tensor sample(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& top_k,
                  const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seeds, const at::Tensor& offsets) {
  return sampling::declared()(logits, temperature, top_k, top_p, min_p, seeds, offsets);
}

}  // namespace ops
}  // namespace xllm_kernel
