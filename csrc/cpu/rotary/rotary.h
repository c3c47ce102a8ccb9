// Torch-free CPU kernel of the rotary position embedding (Highway, runtime ISA dispatch), vLLM's
// rotary_embedding: query and key rotated in place, token by token, with the cos/sin row of the
// token's position.
//
// For a head x (head_size elements) of token t, with half = rot_dim / 2, c = cos_sin_cache[pos][i],
// s = cos_sin_cache[pos][half + i], pos = positions[t], for 0 <= i < half:
//   NeoX (is_neox):    (x[i], x[half + i])     <- (x[i] c - x[half + i] s, x[half + i] c + x[i] s)
//   GPT-J (!is_neox):  (x[2i], x[2i + 1])      <- (x[2i] c - x[2i + 1] s,  x[2i + 1] c + x[2i] s)
// Elements rot_dim <= j < head_size are neither read nor written.
//
// The at::Tensor side (a bridge) checks every argument (positions in range included), fills a
// RotaryParams (csrc/common/rotary.h) and splits the tokens over threads. Kernels assume valid
// arguments; a status other than ok names what a buggy bridge got wrong.
//
//   xllm_kernel::cpu::RotaryParams p;  // the fields as in csrc/common/rotary.h
//   xllm_kernel::cpu::rotary_embedding(p, 0, tokens);
//
// Numerics. query and key share the dtype (float32, bfloat16 or float16); the cache is float32
// or that dtype. All arithmetic is in float32 with fused multiply-adds where the target has them
// (x1 c - x2 s is MulSub(x1, c, x2 s)), rounded once to the dtype (round to nearest even): the
// float32 value is within 2 * 2^-24 (|x1 c| + |x2 s|) of the exact one (two roundings at most),
// then one rounding to the dtype. NaN and infinity propagate as IEEE arithmetic makes them.
//
// Positions. A token whose position is outside [0, max_position) is skipped (its rows are left
// unchanged): the kernel never reads outside the cache. The CPU bridges reject such positions with
// an error before calling, so this is a defence, not a semantics.
#pragma once

#include <cstdint>

#include "csrc/common/rotary.h"
#include "csrc/common/rows.h"

namespace xllm_kernel::cpu {

using kernels::DType;
using kernels::Status;

// The parameters, shared with the CUDA launcher (csrc/common/rotary.h).
using kernels::RotaryParams;

// Rotates tokens [token_begin, token_end); may run concurrently on disjoint ranges. Pointers may be
// null when the range is empty.
Status rotary_embedding(const RotaryParams& p, int64_t token_begin, int64_t token_end);

}  // namespace xllm_kernel::cpu
