// Checkpoint formats into the linear family's canonical form (include/xllm_kernel/ops/linear.h):
// GPTQ, AWQ, GGUF Q8_0 / Q4_0 and fp8 with block scales. ATen operations on the tensors' own device;
// Python reaches them through torch.ops.xllm_kernel_formats.* (xllm_kernel.ops.linear.formats).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>
#include <tuple>

#include "src/ops/common/bridge.h"
#include "src/ops/linear/internal.h"
#include "xllm_kernel/ops/linear.h"

namespace xllm_kernel::ops {
namespace {

using linear::check_scale_dtype;
using linear::shape_string;

void check_matrix(const char* fn, const char* arg, const at::Tensor& t, at::ScalarType dtype) {
  TORCH_CHECK(t.defined(), fn, ": ", arg, " must be a defined tensor");
  TORCH_CHECK(t.scalar_type() == dtype, fn, ": ", arg, " must be ", bridge::dtype_name(dtype), ", got ",
              bridge::dtype_name(t.scalar_type()));
  TORCH_CHECK(t.dim() == 2, fn, ": ", arg, " must be 2-D, got shape ", shape_string(t));
}

// The unsigned fields of `bits` bits of int32 words, low bits first: [..., W] -> [..., W, 32 / bits]
// (int32).
at::Tensor unpack_fields(const at::Tensor& words, int64_t bits) {
  const at::Tensor shifts = at::arange(0, 32, bits, words.options());
  return words.unsqueeze(-1).bitwise_right_shift(shifts).bitwise_and((int64_t{1} << bits) - 1);
}

// int4 in groups from unsigned q [N, K] in [0, 15], zeros [N, G] and scales [N, G]: symmetric
// (q - 8, no zeros) when every zero is 8, the same W with a smaller packed weight.
LinearWeight int4_in_groups(const at::Tensor& q, const at::Tensor& zeros, const at::Tensor& scales, int64_t group) {
  LinearWeight w;
  w.scheme = "int4";
  w.group_size = group;
  w.scales = scales.contiguous();
  if (zeros.eq(8).all().item<bool>()) {
    w.weight = (q - 8).to(at::kChar);
  } else {
    w.weight = q.to(at::kChar);
    w.zeros = zeros.to(at::kInt).contiguous();
  }
  return w;
}

// The group of each input channel (g_idx) against contiguous groups of `group`: an identity
// leaves K as it is; any other order sorts K by group (the weight's columns and, through
// input_permutation, the input's), and each group must then hold `group` channels.
void apply_group_index(const char* fn, const at::Tensor& g_idx, int64_t k, int64_t groups, LinearWeight& w) {
  TORCH_CHECK(g_idx.scalar_type() == at::kInt || g_idx.scalar_type() == at::kLong, fn,
              ": g_idx must be int32 or int64, got ", bridge::dtype_name(g_idx.scalar_type()));
  TORCH_CHECK(g_idx.dim() == 1 && g_idx.size(0) == k, fn, ": g_idx must be [K] = [", k, "], got shape ",
              shape_string(g_idx));
  const at::Tensor g = g_idx.to(at::kLong);
  const int64_t lo = g.min().item<int64_t>(), hi = g.max().item<int64_t>();
  TORCH_CHECK(lo >= 0 && hi < groups, fn, ": g_idx must hold groups in [0, ", groups - 1, "], got values in [", lo, ", ",
              hi, "]");
  const at::Tensor contiguous = at::arange(k, g.options()).div(k / groups, "floor");
  if (g.equal(contiguous)) return;
  const at::Tensor perm = std::get<1>(g.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  TORCH_CHECK(g.index_select(0, perm).equal(contiguous), fn, ": g_idx must give every group K / G = ", k / groups,
              " input channels (GPTQ's act-order does), got groups of other sizes");
  w.weight = w.weight.index_select(1, perm).contiguous();
  w.input_permutation = perm;
}

using WeightTuple = std::tuple<at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>, std::string, int64_t,
                               std::optional<at::Tensor>>;

WeightTuple as_tuple(const LinearWeight& w) {
  return {w.weight, w.scales, w.zeros, w.scheme, w.group_size, w.input_permutation};
}

}  // namespace

at::Tensor LinearWeight::permute_input(const at::Tensor& x) const {
  if (!input_permutation.has_value()) return x;
  return x.index_select(-1, input_permutation->to(x.device()));
}

LinearWeight linear_weight_from_gptq(const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales,
                                     const std::optional<at::Tensor>& g_idx, int64_t bits, const std::string& format) {
  const char* fn = "linear_weight_from_gptq";
  TORCH_CHECK(bits == 4 || bits == 8, fn, ": bits must be 4 or 8, got ", bits);
  TORCH_CHECK(format == "v1" || format == "v2", fn,
              ": format must be 'v1' (AutoGPTQ: zero - 1 stored) or 'v2' (GPTQModel: the zero stored), got '", format,
              "'");
  check_matrix(fn, "qweight", qweight, at::kInt);
  check_matrix(fn, "qzeros", qzeros, at::kInt);
  const int64_t per = 32 / bits, n = qweight.size(1), k = qweight.size(0) * per;
  TORCH_CHECK(n >= 1 && k >= 1, fn, ": qweight [K * bits / 32, N] must not be empty, got shape ", shape_string(qweight));
  TORCH_CHECK(scales.defined() && scales.dim() == 2 && scales.size(1) == n && scales.size(0) >= 1 &&
                  k % scales.size(0) == 0,
              fn, ": scales must be [G, N] with N = ", n, " (qweight's columns) and G dividing K = ", k,
              " (qweight's rows * ", per, "), got shape ", scales.defined() ? shape_string(scales) : "undefined");
  const int64_t groups = scales.size(0), group = k / groups;
  check_scale_dtype(fn, "scales", scales);
  TORCH_CHECK(n % per == 0 && qzeros.size(0) == groups && qzeros.size(1) == n / per, fn,
              ": qzeros must be [G, N * bits / 32] = [", groups, ", ", n / per, "] (N = ", n, " a multiple of ", per,
              "), got shape ", shape_string(qzeros));
  // q[n, k]: field k % per of word k / per in column n.
  const at::Tensor q = unpack_fields(qweight, bits).permute({1, 0, 2}).reshape({n, k});
  at::Tensor z = unpack_fields(qzeros, bits).reshape({groups, n}).t();  // [N, G]
  const int64_t top = (int64_t{1} << bits) - 1;
  if (format == "v1") {
    z = z + 1;
    TORCH_CHECK(z.max().item<int64_t>() <= top, fn, ": a v1 zero field of ", top, " stands for the zero ", top + 1,
                ", outside [0, ", top, "] (v1 cannot store the zero 0)");
  }
  const at::Tensor s = scales.t();
  LinearWeight w;
  if (bits == 4) {
    w = int4_in_groups(q, z, s, group);
  } else {
    TORCH_CHECK(z.eq(128).all().item<bool>(), fn,
                ": 8-bit GPTQ maps to int8 only when symmetric (every zero 128), got zeros in [",
                z.min().item<int64_t>(), ", ", z.max().item<int64_t>(), "]");
    w.scheme = "int8";
    w.weight = (q - 128).to(at::kChar);
    w.group_size = groups == 1 ? 0 : group;  // one group: one scale per channel
    w.scales = groups == 1 ? s.reshape({n}).contiguous() : s.contiguous();
  }
  if (g_idx.has_value() && g_idx->defined()) apply_group_index(fn, *g_idx, k, groups, w);
  return w;
}

LinearWeight linear_weight_from_awq(const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales) {
  const char* fn = "linear_weight_from_awq";
  check_matrix(fn, "qweight", qweight, at::kInt);
  check_matrix(fn, "qzeros", qzeros, at::kInt);
  const int64_t k = qweight.size(0), n = qweight.size(1) * 8;
  TORCH_CHECK(n >= 1 && k >= 1, fn, ": qweight [K, N / 8] must not be empty, got shape ", shape_string(qweight));
  TORCH_CHECK(scales.defined() && scales.dim() == 2 && scales.size(1) == n && scales.size(0) >= 1 &&
                  k % scales.size(0) == 0,
              fn, ": scales must be [G, N] with N = ", n, " (qweight's columns * 8) and G dividing K = ", k,
              " (qweight's rows), got shape ", scales.defined() ? shape_string(scales) : "undefined");
  const int64_t groups = scales.size(0);
  check_scale_dtype(fn, "scales", scales);
  TORCH_CHECK(qzeros.size(0) == groups && qzeros.size(1) == n / 8, fn, ": qzeros must be [G, N / 8] = [", groups, ", ",
              n / 8, "], got shape ", shape_string(qzeros));
  // Column 8 c + j of a word sits in its field {0, 4, 1, 5, 2, 6, 3, 7}[j].
  const at::Tensor field_of_column = at::tensor({0, 4, 1, 5, 2, 6, 3, 7}, qweight.options().dtype(at::kLong));
  auto columns = [&](const at::Tensor& words, int64_t rows) {
    return unpack_fields(words, 4).index_select(2, field_of_column).reshape({rows, n}).t();
  };
  return int4_in_groups(columns(qweight, k), columns(qzeros, groups), scales.t(), k / groups);
}

LinearWeight linear_weight_from_gguf(const at::Tensor& data, const std::string& type, int64_t n, int64_t k) {
  const char* fn = "linear_weight_from_gguf";
  TORCH_CHECK(type == "Q8_0" || type == "Q4_0", fn, ": type must be Q8_0 or Q4_0, got '", type, "'");
  constexpr int64_t kBlock = 32;
  const int64_t block_bytes = type == "Q8_0" ? 2 + kBlock : 2 + kBlock / 2;
  TORCH_CHECK(n >= 1 && k >= 1 && k % kBlock == 0, fn, ": the shape [N, K] needs N >= 1 and K a multiple of ", kBlock,
              " (", type, " blocks), got [", n, ", ", k, "]");
  TORCH_CHECK(data.defined() && data.scalar_type() == at::kByte, fn, ": data must be uint8 (the tensor's bytes), got ",
              data.defined() ? bridge::dtype_name(data.scalar_type()) : "undefined");
  TORCH_CHECK(data.numel() == n * (k / kBlock) * block_bytes, fn, ": data must hold N * K / 32 * ", block_bytes,
              " = ", n * (k / kBlock) * block_bytes, " bytes for ", type, " [", n, ", ", k, "], got ", data.numel(),
              " (shape ", shape_string(data), ")");
  const at::Tensor blocks = data.contiguous().view({n, k / kBlock, block_bytes});
  // The little-endian f16 scale of each block.
  const at::Tensor d = blocks.narrow(2, 0, 2).contiguous().view(at::kHalf).reshape({n, k / kBlock});
  LinearWeight w;
  w.group_size = kBlock;
  w.scales = d;
  if (type == "Q8_0") {
    w.scheme = "int8";
    w.weight = blocks.narrow(2, 2, kBlock).contiguous().view(at::kChar).reshape({n, k});
  } else {
    const at::Tensor bytes = blocks.narrow(2, 2, kBlock / 2);
    w.scheme = "int4";
    w.weight = at::cat({bytes.bitwise_and(0xF), bytes.bitwise_right_shift(4)}, 2).reshape({n, k}).to(at::kChar) - 8;
  }
  return w;
}

LinearWeight linear_weight_from_fp8_blocks(const at::Tensor& weight, const at::Tensor& weight_scale_inv) {
  const char* fn = "linear_weight_from_fp8_blocks";
  check_matrix(fn, "weight", weight, at::kFloat8_e4m3fn);
  constexpr int64_t kBlock = 128;
  const int64_t n = weight.size(0), k = weight.size(1);
  const int64_t rows = (n + kBlock - 1) / kBlock, cols = (k + kBlock - 1) / kBlock;
  TORCH_CHECK(weight_scale_inv.defined(), fn, ": weight_scale_inv must be a defined tensor");
  check_scale_dtype(fn, "weight_scale_inv", weight_scale_inv);
  TORCH_CHECK(weight_scale_inv.dim() == 2 && weight_scale_inv.size(0) == rows && weight_scale_inv.size(1) == cols, fn,
              ": weight_scale_inv must be [ceil(N / 128), ceil(K / 128)] (128 x 128 blocks) = [", rows, ", ", cols,
              "], got shape ", shape_string(weight_scale_inv));
  LinearWeight w;
  w.scheme = "fp8";
  w.weight = weight;
  w.scales = weight_scale_inv;
  return w;
}

at::Tensor linear_pack(const LinearWeight& weight) {
  return linear_pack(weight.weight, weight.scales, weight.zeros, weight.scheme, weight.group_size);
}

}  // namespace xllm_kernel::ops

// Each returns (weight, scales, zeros, scheme, group_size, input_permutation).
TORCH_LIBRARY(xllm_kernel_formats, m) {
  using namespace xllm_kernel::ops;
  constexpr const char* kReturns = " -> (Tensor, Tensor?, Tensor?, str, int, Tensor?)";
  m.def((std::string("gptq(Tensor qweight, Tensor qzeros, Tensor scales, Tensor? g_idx, int bits, str format)") +
         kReturns).c_str(),
        [](const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales,
           const std::optional<at::Tensor>& g_idx, int64_t bits, std::string format) {
          return as_tuple(linear_weight_from_gptq(qweight, qzeros, scales, g_idx, bits, format));
        });
  m.def((std::string("awq(Tensor qweight, Tensor qzeros, Tensor scales)") + kReturns).c_str(),
        [](const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales) {
          return as_tuple(linear_weight_from_awq(qweight, qzeros, scales));
        });
  m.def((std::string("gguf(Tensor data, str type, int n, int k)") + kReturns).c_str(),
        [](const at::Tensor& data, std::string type, int64_t n, int64_t k) {
          return as_tuple(linear_weight_from_gguf(data, type, n, k));
        });
  m.def((std::string("fp8_blocks(Tensor weight, Tensor weight_scale_inv)") + kReturns).c_str(),
        [](const at::Tensor& weight, const at::Tensor& weight_scale_inv) {
          return as_tuple(linear_weight_from_fp8_blocks(weight, weight_scale_inv));
        });
}
