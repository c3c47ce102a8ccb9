// Token sampling from logits: sample, the last step of every decode step, one token per row with
// its own temperature, top-k, top-p, min-p, seed and offset.
//
//   xllm_kernel::initialize("cpu");
//   // logits [batch, vocab] float32, bfloat16 or float16; per-row parameters, each [batch]:
//   // temperature float32 (0: greedy), top_k int32 (<= 0 or >= vocab: off), top_p float32 in
//   // (0, 1] (1: off), min_p float32 in [0, 1) (0: off), seeds and offsets int64
//   at::Tensor tokens = xllm_kernel::ops::sample(logits, temperature, top_k, top_p, min_p, seeds, offsets);
//
// Semantics (csrc/common/sampling.h has them in full, docs/operators.md too): tokens are ordered
// by logit descending, then index ascending. temperature 0: the first token of that order (the
// argmax, ties to the lowest index). Otherwise w = exp((l - l_max) / T) (float32): keep the first K
// tokens (top-k), then the shortest prefix of them whose mass is >= top_p of theirs (top-p), then
// drop those with w < min_p (p < min_p * p_max); the token is the kept one with the largest
// w / E, E = -log(u), u the Philox4x32-10 uniform of (seed, offset, token index): an exponential
// race, so the draw follows the renormalized distribution, is the same for every batch size and
// device, and is never outside the kept set.
//
// Arguments: logits float32, bfloat16 or float16, [batch, vocab], 1 <= vocab < 2^31, rows with any
// stride, a contiguous last dimension; the parameters 1-D [batch] of their dtypes on logits'
// device, any stride. The result is a new int64 [batch] tensor.
//
// Values. On the CPU, before a token is returned: temperature >= 0 and finite, top_p in (0, 1],
// min_p in [0, 1), no NaN logit and a logit above -inf in every row, else an error naming the row;
// +inf logits take the softmax's limit (the draw is among the +inf tokens). On CUDA, where checking
// would cost a synchronization, a NaN counts as -inf, and a row with invalid parameters or no logit
// above -inf gets -1.
#pragma once

#include <ATen/core/Tensor.h>

#include "xllm_kernel/catalog.h"

namespace xllm_kernel {

using SampleFn = at::Tensor(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& top_k,
                            const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seeds,
                            const at::Tensor& offsets);

const OpContract& sample_contract();
const TypedOperation<SampleFn>& sample_operation();

// The family's group (its operations and backend modules), registered in the catalog.
const Group& sampling_group();

namespace ops {

// One token per row of logits; returns a new int64 [batch] tensor.
at::Tensor sample(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& top_k,
                  const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seeds, const at::Tensor& offsets);

}  // namespace ops
}  // namespace xllm_kernel
