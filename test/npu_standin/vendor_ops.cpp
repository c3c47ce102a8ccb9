// torch_npu's vendor norms and npu_quant_matmul, defined with torch_npu 2.14.0's schemas and computed
// on the host the way the vendor documents them (norms: float32 compute, one rounding to the input
// dtype; npu_quant_matmul: out = (x1 @ x2 + bias) * scale * pertoken_scale + offset over the exact
// int32 product), with the vendor's argument constraints; plus per-op call counters
// (npu_standin::calls / reset_calls) so tests can tell that a call went through the vendor op.
#include "npu_standin.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>

namespace xllm_kernel::npu_standin {
namespace {

struct Counters {
  std::atomic<int64_t> rms_norm{0};
  std::atomic<int64_t> add_rms_norm{0};
  std::atomic<int64_t> quant_matmul{0};
};

Counters& counters() {
  static Counters c;
  return c;
}

std::string shape(c10::IntArrayRef sizes) {
  std::ostringstream s;
  s << sizes;
  return s.str();
}

void check_on_npu(const char* op, const char* name, const at::Tensor& t, std::optional<c10::Device>& device) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op, ": ", name, " must be on npu, got ",
              t.device());
  TORCH_CHECK(!device || *device == t.device(), op, ": all tensors must be on one npu device, got ", *device,
              " and ", t.device(), " (", name, ")");
  device = t.device();
}

void check_dtype(const char* op, const char* name, const at::Tensor& t) {
  const auto dtype = t.scalar_type();
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat, op, ": ", name,
              " dtype must be float16, bfloat16 or float32, got ", dtype);
}

// gamma: the vendor's rules (same dtype as the input, its shape the input's trailing dims).
void check_gamma(const char* op, const char* input_name, const at::Tensor& input, const at::Tensor& gamma) {
  TORCH_CHECK(gamma.scalar_type() == input.scalar_type(), op, ": gamma dtype must equal ", input_name,
              " dtype ", input.scalar_type(), ", got ", gamma.scalar_type());
  TORCH_CHECK(input.dim() >= 1 && input.dim() <= 8, op, ": ", input_name, " must have 1 to 8 dims, got ",
              input.dim());
  TORCH_CHECK(gamma.dim() >= 1 && gamma.dim() <= input.dim(), op, ": gamma must have 1 to ", input.dim(),
              " dims (", input_name, " has ", input.dim(), "), got shape ", shape(gamma.sizes()));
  const auto trailing = input.sizes().slice(input.dim() - gamma.dim());
  TORCH_CHECK(gamma.sizes() == trailing, op, ": gamma shape ", shape(gamma.sizes()), " must equal the last ",
              gamma.dim(), " dims of ", input_name, " ", shape(input.sizes()), ", i.e. ", shape(trailing));
}

// x.shape[:-gamma.dim()] + [1] * gamma.dim()
template <typename Size>
std::vector<Size> rstd_shape(c10::ArrayRef<Size> input, int64_t gamma_dim) {
  std::vector<Size> out(input.begin(), input.end());
  for (size_t i = out.size() - static_cast<size_t>(gamma_dim); i < out.size(); ++i) {
    out[i] = 1;
  }
  return out;
}

template <typename T>
float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}

// One row: y = x * rstd * gamma in float32, rounded once; x1 + x2 first when adding (rounded to T,
// as the vendor writes x out and normalizes what it wrote).
template <typename T>
void norm_rows(const T* x1, const T* x2, const T* gamma, T* y, T* x_out, float* rstd, int64_t rows,
               int64_t hidden, float epsilon) {
  std::vector<float> x(static_cast<size_t>(hidden));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * hidden;
    float sum = 0.0f;
    for (int64_t i = 0; i < hidden; ++i) {
      float v = load(x1, base + i);
      if (x2 != nullptr) {
        const T rounded = static_cast<T>(v + load(x2, base + i));
        x_out[base + i] = rounded;
        v = static_cast<float>(rounded);
      }
      x[static_cast<size_t>(i)] = v;
      sum += v * v;
    }
    const float r_std = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + epsilon);
    rstd[r] = r_std;
    for (int64_t i = 0; i < hidden; ++i) {
      y[base + i] = static_cast<T>(x[static_cast<size_t>(i)] * r_std * load(gamma, i));
    }
  }
}

// Computes on host views of contiguous copies of the inputs, writing the npu outputs' memory.
void norm(const at::Tensor& x1, const at::Tensor* x2, const at::Tensor& gamma, double epsilon, const at::Tensor& y,
          const at::Tensor* x_out, const at::Tensor& rstd) {
  HostAliases aliases;
  const at::Tensor a = aliases.of(x1).contiguous();
  const at::Tensor b = x2 != nullptr ? aliases.of(*x2).contiguous() : at::Tensor();
  const at::Tensor g = aliases.of(gamma).contiguous();
  const int64_t hidden = gamma.numel();
  const int64_t rows = hidden == 0 ? 0 : x1.numel() / hidden;
  if (rows == 0) {
    return;
  }
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    norm_rows<T>(a.const_data_ptr<T>(), x2 != nullptr ? b.const_data_ptr<T>() : nullptr, g.const_data_ptr<T>(),
                 y.mutable_data_ptr<T>(), x_out != nullptr ? x_out->mutable_data_ptr<T>() : nullptr,
                 rstd.mutable_data_ptr<float>(), rows, hidden, static_cast<float>(epsilon));
  };
  switch (x1.scalar_type()) {
    case at::kHalf: return run(c10::Half());
    case at::kBFloat16: return run(c10::BFloat16());
    case at::kFloat: return run(float());
    default: TORCH_CHECK(false, "npu stand-in: norm: unchecked dtype ", x1.scalar_type());
  }
}

std::tuple<at::Tensor, at::Tensor> npu_rms_norm(const at::Tensor& self, const at::Tensor& gamma, double epsilon) {
  constexpr const char* op = "npu_rms_norm";
  std::optional<c10::Device> device;
  check_on_npu(op, "self", self, device);
  check_on_npu(op, "gamma", gamma, device);
  check_dtype(op, "self", self);
  check_gamma(op, "self", self, gamma);
  const c10::DeviceGuard guard(*device);
  at::Tensor y = at::empty(self.sizes(), self.options());
  at::Tensor rstd = at::empty(rstd_shape(self.sizes(), gamma.dim()), self.options().dtype(at::kFloat));
  norm(self, nullptr, gamma, epsilon, y, nullptr, rstd);
  counters().rms_norm.fetch_add(1);
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> npu_add_rms_norm(const at::Tensor& x1, const at::Tensor& x2,
                                                                const at::Tensor& gamma, double epsilon) {
  constexpr const char* op = "npu_add_rms_norm";
  std::optional<c10::Device> device;
  check_on_npu(op, "x1", x1, device);
  check_on_npu(op, "x2", x2, device);
  check_on_npu(op, "gamma", gamma, device);
  check_dtype(op, "x1", x1);
  TORCH_CHECK(x2.scalar_type() == x1.scalar_type(), op, ": x2 dtype must equal x1 dtype ", x1.scalar_type(),
              ", got ", x2.scalar_type());
  TORCH_CHECK(x2.sizes() == x1.sizes(), op, ": x2 shape must equal x1 shape ", shape(x1.sizes()), ", got ",
              shape(x2.sizes()));
  check_gamma(op, "x1", x1, gamma);
  const c10::DeviceGuard guard(*device);
  at::Tensor y = at::empty(x1.sizes(), x1.options());
  at::Tensor x = at::empty(x1.sizes(), x1.options());
  at::Tensor rstd = at::empty(rstd_shape(x1.sizes(), gamma.dim()), x1.options().dtype(at::kFloat));
  norm(x1, &x2, gamma, epsilon, y, &x, rstd);
  counters().add_rms_norm.fetch_add(1);
  return {y, rstd, x};
}

// Meta: shapes and dtypes only, as torch_npu's meta registrations (no argument checks).
std::tuple<at::Tensor, at::Tensor> npu_rms_norm_meta(const at::Tensor& self, const at::Tensor& gamma,
                                                     double /*epsilon*/) {
  TORCH_CHECK(gamma.dim() <= self.dim(), "npu_rms_norm: gamma has more dims than self");
  return {at::empty_symint(self.sym_sizes(), self.options()),
          at::empty_symint(rstd_shape(self.sym_sizes(), gamma.dim()), self.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> npu_add_rms_norm_meta(const at::Tensor& x1, const at::Tensor& /*x2*/,
                                                                     const at::Tensor& gamma, double /*epsilon*/) {
  TORCH_CHECK(gamma.dim() <= x1.dim(), "npu_add_rms_norm: gamma has more dims than x1");
  return {at::empty_symint(x1.sym_sizes(), x1.options()),
          at::empty_symint(rstd_shape(x1.sym_sizes(), gamma.dim()), x1.options().dtype(at::kFloat)),
          at::empty_symint(x1.sym_sizes(), x1.options())};
}

// npu_quant_matmul: the documented formula for int8 x1 [M, K] and x2 [K, N] (any strides, as the
// vendor takes a transposed x2), 2-D only here:
//   acc = x1 @ x2, exact (int64 sums of the int8 products; |acc| < 2^31 for K <= 65535)
//   int32 bias: acc + bias, exact; then v = acc * scale[n] (* pertoken_scale[m]) (+ offset[n])
//   (+ a float bias: v + bias[n]), computed in double, rounded once to output_dtype (int8: saturated,
//   int32: rounded to nearest even, so scale 1 gives the accumulator itself).
// Refused, in the vendor's words: other dtypes, K > 65535, a scale that is not float32/bfloat16 with
// an int32 output, shapes that do not match; and the arguments the stand-in does not model (int4 in
// int32, x1_dtype, x2_dtype, scale_dtype, pertoken_scale_dtype, group_sizes, y_scale, int64 scales).
constexpr int64_t kInt8 = static_cast<int64_t>(at::kChar);
constexpr int64_t kInt32 = static_cast<int64_t>(at::kInt);
constexpr int64_t kHalf = static_cast<int64_t>(at::kHalf);
constexpr int64_t kBFloat16 = static_cast<int64_t>(at::kBFloat16);

at::ScalarType quant_matmul_out_dtype(std::optional<int64_t> output_dtype) {
  const int64_t d = output_dtype.value_or(kInt8);
  TORCH_CHECK(d == kInt8 || d == kInt32 || d == kHalf || d == kBFloat16,
              "npu_quant_matmul: output_dtype must be torch.int8, torch.float16, torch.bfloat16 or torch.int32, got ",
              d);
  return static_cast<at::ScalarType>(d);
}

// A 1-D float tensor of t = 1 or `n` elements (the vendor's (t,) shapes), as float64 on the host.
at::Tensor per_column(const char* name, const at::Tensor& t, int64_t n, HostAliases& aliases) {
  TORCH_CHECK(t.dim() == 1 && (t.size(0) == 1 || t.size(0) == n), "npu_quant_matmul: ", name,
              " shape must be 1-D (t,) with t = 1 or n = ", n, ", got ", shape(t.sizes()));
  return aliases.of(t).to(at::kDouble).contiguous();
}

at::Tensor npu_quant_matmul(const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& scale,
                            const std::optional<at::Tensor>& offset, const std::optional<at::Tensor>& pertoken_scale,
                            const std::optional<at::Tensor>& bias, std::optional<int64_t> output_dtype,
                            std::optional<int64_t> x1_dtype, std::optional<int64_t> x2_dtype,
                            std::optional<int64_t> pertoken_scale_dtype, std::optional<int64_t> scale_dtype,
                            at::OptionalIntArrayRef group_sizes, const std::optional<at::Tensor>& y_scale) {
  constexpr const char* op = "npu_quant_matmul";
  TORCH_CHECK(!x1_dtype && !x2_dtype && !pertoken_scale_dtype && !scale_dtype && !group_sizes.has_value() &&
                  !(y_scale && y_scale->defined()),
              op, ": x1_dtype, x2_dtype, pertoken_scale_dtype, scale_dtype, group_sizes and y_scale are not "
              "modelled by the npu stand-in");
  std::optional<c10::Device> device;
  check_on_npu(op, "x1", x1, device);
  check_on_npu(op, "x2", x2, device);
  check_on_npu(op, "scale", scale, device);
  const bool has_offset = offset.has_value() && offset->defined();
  const bool has_pertoken = pertoken_scale.has_value() && pertoken_scale->defined();
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_offset) check_on_npu(op, "offset", *offset, device);
  if (has_pertoken) check_on_npu(op, "pertoken_scale", *pertoken_scale, device);
  if (has_bias) check_on_npu(op, "bias", *bias, device);
  TORCH_CHECK(x1.scalar_type() == at::kChar && x2.scalar_type() == at::kChar, op,
              ": x1 and x2 dtype must be int8 (int4 in int32 is not modelled by the npu stand-in), got ",
              x1.scalar_type(), " and ", x2.scalar_type());
  TORCH_CHECK(x1.dim() == 2 && x2.dim() == 2, op, ": the npu stand-in models 2-D x1 and x2 only, got shapes ",
              shape(x1.sizes()), " and ", shape(x2.sizes()));
  const int64_t m = x1.size(0), k = x1.size(1), n = x2.size(1);
  TORCH_CHECK(x2.size(0) == k, op, ": x1 [m, k] and x2 [k, n] must share k, got ", shape(x1.sizes()), " and ",
              shape(x2.sizes()));
  TORCH_CHECK(m > 0 && k > 0 && n > 0, op, ": empty tensors are not supported, got ", shape(x1.sizes()), " and ",
              shape(x2.sizes()));
  TORCH_CHECK(k <= 65535, op, ": the last dim of x1 and x2 must not exceed 65535, got ", k);
  const at::ScalarType out_dtype = quant_matmul_out_dtype(output_dtype);
  TORCH_CHECK(scale.scalar_type() == at::kFloat || scale.scalar_type() == at::kBFloat16, op,
              ": scale dtype must be float32 or bfloat16 (int64 from npu_trans_quant_param is not modelled by the "
              "npu stand-in), got ", scale.scalar_type());
  TORCH_CHECK(scale.scalar_type() != at::kBFloat16 || out_dtype == at::kBFloat16 || out_dtype == at::kInt, op,
              ": When scale's dtype is bfloat16, output_dtype must be bfloat16 or int32");
  TORCH_CHECK(!has_offset || out_dtype == at::kChar, op, ": offset is supported with an int8 output only");
  HostAliases aliases;
  // The exact product: every int8 product and partial sum is an integer below 2^53 in float64.
  const at::Tensor a = aliases.of(x1).to(at::kDouble);
  const at::Tensor b = aliases.of(x2).to(at::kDouble);
  at::Tensor v = at::matmul(a, b);  // [m, n], exact integers
  if (has_bias && bias->scalar_type() == at::kInt) v = v.add(per_column("bias", *bias, n, aliases).view({1, -1}));
  v = v.mul(per_column("scale", scale, n, aliases).view({1, -1}));
  if (has_pertoken) {
    TORCH_CHECK(pertoken_scale->scalar_type() == at::kFloat && pertoken_scale->dim() == 1 &&
                    pertoken_scale->size(0) == m,
                op, ": pertoken_scale must be float32 (m,) with m = ", m, ", got ", pertoken_scale->scalar_type(), " ",
                shape(pertoken_scale->sizes()));
    v = v.mul(aliases.of(*pertoken_scale).to(at::kDouble).view({-1, 1}));
  }
  if (has_offset) v = v.add(per_column("offset", *offset, n, aliases).view({1, -1}));
  if (has_bias && bias->scalar_type() != at::kInt) v = v.add(per_column("bias", *bias, n, aliases).view({1, -1}));
  at::Tensor host;
  if (out_dtype == at::kChar) {
    host = v.round().clamp(-128, 127).to(at::kChar);
  } else if (out_dtype == at::kInt) {
    host = v.round().clamp(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()).to(at::kInt);
  } else {
    host = v.to(out_dtype);
  }
  const c10::DeviceGuard guard(*device);
  at::Tensor out = at::empty({m, n}, x1.options().dtype(out_dtype));
  aliases.of(out).copy_(host);
  counters().quant_matmul.fetch_add(1);
  return out;
}

at::Tensor npu_quant_matmul_meta(const at::Tensor& x1, const at::Tensor& x2, const at::Tensor& /*scale*/,
                                 const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                                 const std::optional<at::Tensor>&, std::optional<int64_t> output_dtype,
                                 std::optional<int64_t>, std::optional<int64_t>, std::optional<int64_t>,
                                 std::optional<int64_t>, at::OptionalIntArrayRef, const std::optional<at::Tensor>&) {
  TORCH_CHECK(x1.dim() == 2 && x2.dim() == 2, "npu_quant_matmul: the npu stand-in models 2-D x1 and x2 only");
  return at::empty_symint({x1.sym_size(0), x2.sym_size(1)}, x1.options().dtype(quant_matmul_out_dtype(output_dtype)));
}

int64_t calls(c10::string_view name) {
  if (name == "npu_rms_norm") {
    return counters().rms_norm.load();
  }
  if (name == "npu_add_rms_norm") {
    return counters().add_rms_norm.load();
  }
  if (name == "npu_quant_matmul") {
    return counters().quant_matmul.load();
  }
  TORCH_CHECK(false, "npu_standin::calls: no counter for '", name,
              "'; counted: npu_rms_norm, npu_add_rms_norm, npu_quant_matmul");
}

void reset_calls() {
  counters().rms_norm.store(0);
  counters().add_rms_norm.store(0);
  counters().quant_matmul.store(0);
}

// torch_npu 2.14.0's schemas (torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml).
TORCH_LIBRARY(npu, m) {
  m.def("npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)");
  m.def("npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor, Tensor)");
  m.def("npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, Tensor? pertoken_scale=None, "
        "Tensor? bias=None, int? output_dtype=None, int? x1_dtype=None, int? x2_dtype=None, "
        "int? pertoken_scale_dtype=None, int? scale_dtype=None, int[]? group_sizes=None, Tensor? y_scale=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) {
  m.impl("npu_rms_norm", &npu_rms_norm);
  m.impl("npu_add_rms_norm", &npu_add_rms_norm);
  m.impl("npu_quant_matmul", &npu_quant_matmul);
}

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_rms_norm", &npu_rms_norm_meta);
  m.impl("npu_add_rms_norm", &npu_add_rms_norm_meta);
  m.impl("npu_quant_matmul", &npu_quant_matmul_meta);
}

TORCH_LIBRARY_FRAGMENT(npu_standin, m) {
  m.def("calls(str name) -> int", &calls);
  m.def("reset_calls() -> ()", &reset_calls);
}

}  // namespace
}  // namespace xllm_kernel::npu_standin
