// The CPU quantization kernels by operation (csrc/cpu/quantization/operations.h): each entry point
// takes its operation's scheme and runs the shared body of its producer (bit for bit the same
// outputs), and rejects every other scheme before writing anything.
#include "csrc/cpu/quantization/operations.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace xllm_kernel::cpu {
namespace {

using Entry = Status (*)(const QuantParams&, int64_t, int64_t);

struct ByOperation {
  const char* name;
  Entry entry;
  Entry body;  // the shared body it runs
  QuantScheme scheme;
  bool norm, residual, gated;
};

const ByOperation kOperations[] = {
    {"per_token_quant", &per_token_quant, &quant, QuantScheme::kPerToken, false, false, false},
    {"per_token_quant_int8_azp", &per_token_quant_int8_azp, &quant, QuantScheme::kPerTokenAzp, false, false, false},
    {"static_quant", &static_quant, &quant, QuantScheme::kStatic, false, false, false},
    {"rms_norm_per_token_quant", &rms_norm_per_token_quant, &rms_norm_quant, QuantScheme::kPerToken, true, false,
     false},
    {"rms_norm_static_quant", &rms_norm_static_quant, &rms_norm_quant, QuantScheme::kStatic, true, false, false},
    {"fused_add_rms_norm_per_token_quant", &fused_add_rms_norm_per_token_quant, &fused_add_rms_norm_quant,
     QuantScheme::kPerToken, true, true, false},
    {"fused_add_rms_norm_static_quant", &fused_add_rms_norm_static_quant, &fused_add_rms_norm_quant,
     QuantScheme::kStatic, true, true, false},
    {"silu_and_mul_per_token_quant", &silu_and_mul_per_token_quant, &silu_and_mul_quant, QuantScheme::kPerToken,
     false, false, true},
};

constexpr int64_t kRows = 3, kHidden = 40;

// float32 rows in, int8 out; what a call writes (out, scale, azp, residual).
struct Buffers {
  std::vector<float> input, residual, weight = std::vector<float>(kHidden, 1.25f);
  std::vector<int8_t> out = std::vector<int8_t>(kRows * kHidden, 0x55);
  std::vector<float> scale = std::vector<float>(kRows, -1.0f);
  std::vector<int32_t> azp = std::vector<int32_t>(kRows, -7);
  float static_scale = 0.05f;

  explicit Buffers(const ByOperation& op) {
    const int64_t width = op.gated ? 2 * kHidden : kHidden;
    for (int64_t i = 0; i < kRows * width; ++i) input.push_back(static_cast<float>((i * 37) % 23) / 7.0f - 1.5f);
    for (int64_t i = 0; i < kRows * kHidden; ++i) residual.push_back(static_cast<float>((i * 11) % 13) / 5.0f - 1.0f);
  }

  QuantParams params(const ByOperation& op, QuantScheme scheme) {
    QuantParams p;
    p.dtype = DType::kFloat32;
    p.qdtype = QuantDType::kInt8;
    p.scheme = scheme;
    p.hidden = kHidden;
    p.shape.rows = kRows;
    p.shape.ndim = 1;
    p.shape.sizes[0] = kRows;
    p.input = input.data();
    p.input_strides.s[0] = op.gated ? 2 * kHidden : kHidden;
    p.out = out.data();
    p.out_strides.s[0] = kHidden;
    p.scale_out = scale.data();
    p.scale_strides.s[0] = 1;
    p.azp_out = azp.data();
    p.azp_strides.s[0] = 1;
    p.static_scale = &static_scale;
    if (op.norm) {
      p.weight = weight.data();
      p.eps = 1e-6;
    }
    if (op.residual) {
      p.residual = residual.data();
      p.residual_strides.s[0] = kHidden;
    }
    return p;
  }
};

// The operation table the CPU and CUDA entry points, the bridges and the suites follow
// (csrc/common/quantization.h) says what the list above says, operation by operation.
TEST(QuantOperations, TheSharedTableIsTheFamilysOperations) {
  using kernels::QuantProducer;
  ASSERT_EQ(std::size(kernels::kQuantOperations), std::size(kOperations));
  for (const ByOperation& op : kOperations) {
    const int i = kernels::quant_operation_index(op.name);
    ASSERT_GE(i, 0) << op.name;
    const kernels::QuantOperation& t = kernels::kQuantOperations[i];
    EXPECT_EQ(t.scheme, op.scheme) << op.name;
    const QuantProducer want = op.gated      ? QuantProducer::kSiluAndMul
                               : op.residual ? QuantProducer::kFusedAddRmsNorm
                               : op.norm     ? QuantProducer::kRmsNorm
                                             : QuantProducer::kInput;
    EXPECT_EQ(t.producer, want) << op.name;
    EXPECT_EQ(std::string(t.wrong_scheme).rfind(op.name, 0), 0u) << t.wrong_scheme;
  }
  EXPECT_EQ(kernels::quant_operation_index("no_such_quant"), -1);
}

TEST(QuantOperations, EachRunsItsProducersBodyWithItsScheme) {
  for (const ByOperation& op : kOperations) {
    Buffers by_operation(op), by_body(op);
    ASSERT_EQ(op.entry(by_operation.params(op, op.scheme), 0, kRows), Status::kOk) << op.name;
    ASSERT_EQ(op.body(by_body.params(op, op.scheme), 0, kRows), Status::kOk) << op.name;
    EXPECT_EQ(by_operation.out, by_body.out) << op.name;
    EXPECT_EQ(std::memcmp(by_operation.scale.data(), by_body.scale.data(), kRows * sizeof(float)), 0) << op.name;
    EXPECT_EQ(by_operation.azp, by_body.azp) << op.name;
    EXPECT_EQ(std::memcmp(by_operation.residual.data(), by_body.residual.data(), kRows * kHidden * sizeof(float)), 0)
        << op.name;
    EXPECT_NE(by_operation.out, std::vector<int8_t>(kRows * kHidden, 0x55)) << op.name << " wrote nothing";
  }
}

TEST(QuantOperations, AnotherSchemeIsRejectedBeforeAnythingIsWritten) {
  for (const ByOperation& op : kOperations) {
    for (QuantScheme scheme : {QuantScheme::kPerToken, QuantScheme::kPerTokenAzp, QuantScheme::kStatic}) {
      if (scheme == op.scheme) continue;
      Buffers run(op);
      const Buffers untouched(op);
      const Status s = op.entry(run.params(op, scheme), 0, kRows);
      EXPECT_EQ(s, Status::kInvalidArgument) << op.name;
      EXPECT_EQ(std::string(s.reason).rfind(op.name, 0), 0u) << s.reason;
      EXPECT_EQ(run.out, untouched.out) << op.name;
      EXPECT_EQ(run.residual, untouched.residual) << op.name;
    }
  }
}

}  // namespace
}  // namespace xllm_kernel::cpu
