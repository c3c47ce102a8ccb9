// Every CUDA paged_attention implementation in the registry (cuda.native from the plugin,
// cuda.torch) on a GPU: the bridge checks the CPU tests run (test/ops/attention/bridge_checks.h,
// where bad values give NaN rows on CUDA instead of raising), CUDA-graph capture of cuda.native
// replaying to the bits of an eager call with other lengths between capture and replay (the
// workspace comes from the shapes), batch invariance of the implementations that declare it, and
// selection through initialize("cuda"), and paged_attention_quant (float8_e4m3fn and int8 caches) of
// cuda.native and its batch-invariant variant within the tolerance of the CPU's. Every test skips,
// saying why, where no usable GPU is.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "test/cuda/cuda_test_support.h"
#include "test/ops/attention/bridge_checks.h"

namespace xllm_kernel::testing {
namespace {

using namespace attention;  // NOLINT: the shared bodies of the bridge checks

const at::Device kGpu(at::kCUDA, 0);

class CudaAttentionImpl : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaAttentionImpl, BridgeChecks) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  check_bridge(GetParam(), kGpu);
}

// Few long sequences (split over blocks and merged) and many short ones give the reference.
TEST_P(CudaAttentionImpl, SplitAndManySequencesGiveTheReference) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  for (const Batch& b : {Batch{{8000}, {1}, 32, 8, 128}, Batch{{3000, 17}, {1, 17}, 16, 1, 256},
                         Batch{std::vector<int64_t>(64, 300), std::vector<int64_t>(64, 1), 32, 8, 128}}) {
    const Call c = make_call(b, at::kBFloat16, kContiguous, kGpu);
    expect_close(call(GetParam(), c), reference(c), at::kBFloat16);
  }
}

// A call captured into a CUDA graph, replayed after the lengths changed in place, gives what an
// eager call with those lengths gives (cuda.torch is eager only).
TEST_P(CudaAttentionImpl, CapturedCallEqualsEager) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  if (!registry().find(GetParam())->spec.supports(ExecutionMode::kGraph)) GTEST_SKIP() << "eager only";
  auto fn = function_of<PagedAttentionFn>(GetParam());
  Call c = make_call({std::vector<int64_t>(16, 900), std::vector<int64_t>(16, 1), 32, 8, 128}, at::kBFloat16,
                     kContiguous, kGpu);
  at::Tensor out;
  at::cuda::CUDAGraph graph;
  c10::cuda::device_synchronize();
  {
    const c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
    fn(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens, c.scale, 0, 0);
    c10::cuda::getCurrentCUDAStream().synchronize();
    graph.capture_begin();
    out = fn(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens, c.scale, 0, 0);
    graph.capture_end();
  }
  c10::cuda::device_synchronize();
  c.seq_lens.copy_(at::arange(100, 100 + 16 * 50, 50, at::kInt));  // shorter contexts, every row still valid
  graph.replay();
  c10::cuda::device_synchronize();
  const at::Tensor eager = fn(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens,
                              c.scale, 0, 0);
  EXPECT_TRUE(at::equal(out, eager));
  expect_close(out, reference(c), at::kBFloat16);
}

// The CUDA implementations that declare batch invariance (cuda.native.paged_attention.batch_invariant):
// every sequence of a mixed batch alone and in the reversed batch gives the same bits.
TEST(CudaAttention, BatchInvariantRowsAreTheSameAloneAndInAnyBatch) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  int checked = 0;
  for (const auto& name : cuda_implementations_of(kOperation)) {
    if (!registry().find(name)->spec.batch_invariant) continue;
    check_batch_invariance(name, kGpu);
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no CUDA paged_attention implementation declares batch invariance";
}

// Quantized copies of a call's caches, on the CPU: fp8 with one scale per cache (q = e4m3(x /
// scale), the rows no sequence owns NaN codes), int8 per (block, row, head) (a NaN row: scale NaN,
// codes 0). {key_cache, value_cache, key_scale, value_scale}.
std::vector<at::Tensor> quantize_caches(const Call& c, at::ScalarType cache_dtype) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& cache : {c.key_cache, c.value_cache}) {
    const at::Tensor x = cache.to(at::kCPU, at::kFloat);
    if (cache_dtype == at::kFloat8_e4m3fn) {
      const at::Tensor scale = at::full({1}, 4.0f / 448);
      const at::Tensor t = x.div(scale);
      at::Tensor q = t.clamp(-448, 448).to(at::kFloat8_e4m3fn);
      q.view(at::kByte).masked_fill_(t.isnan(), 0x7F);
      out.push_back(q);
      out.push_back(scale);
    } else {
      const at::Tensor amax = x.abs().amax(-1, /*keepdim=*/true);
      const at::Tensor m = at::where(amax.eq(0), at::zeros_like(amax), at::full_like(amax, 127.0f).div(amax));
      out.push_back(x.mul(m).nan_to_num(0.0, 0.0, 0.0).clamp(-128, 127).round().to(at::kChar));
      out.push_back(amax.div(127.0f).squeeze(-1).contiguous());
    }
  }
  return {out[0], out[2], out[1], out[3]};
}

// cuda.native.paged_attention_quant (and .batch_invariant) within the tolerance of
// cpu.native.paged_attention_quant over the same quantized caches: decode, prefill, mixed batches,
// GQA, soft cap and window, head sizes on the vector and the element path, split plans.
TEST(CudaAttentionQuant, NativeMatchesTheCpuWithinTolerance) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  const Batch batches[] = {
      {{37, 16, 1, 70}, {1, 1, 1, 1}, 8, 2},     // decode, GQA
      {{50, 40, 9}, {12, 1, 9}, 16, 1, 128, 32},  // chunk + decode + prefill, MQA
      {{0, 21, 0, 5}, {0, 3, 0, 1}, 9, 3, 67, 16, 2},  // padding sequences and rows, a tail
      {{3000}, {1}, 32, 8, 128, 16},              // one long decode (split over blocks)
  };
  auto fn = [](const std::string& impl) { return function_of<PagedAttentionQuantFn>(impl); };
  for (const at::ScalarType cache_dtype : {at::kFloat8_e4m3fn, at::kChar}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (size_t i = 0; i < std::size(batches); ++i) {
        for (const auto& [soft_cap, window] : {std::pair<double, int64_t>{0, 0}, {20, 7}}) {
          SCOPED_TRACE(std::string(c10::toString(cache_dtype)) + " " + c10::toString(dtype) + " batch " +
                       std::to_string(i) + " soft_cap " + std::to_string(soft_cap) + " window " + std::to_string(window));
          const Call c = make_call(batches[i], dtype, kContiguous, at::kCPU, 5);
          const std::vector<at::Tensor> q = quantize_caches(c, cache_dtype);
          const at::Tensor want = fn("cpu.native.paged_attention_quant")(
              c.query, q[0], q[1], q[2], q[3], c.block_tables, c.query_start_loc, c.seq_lens, c.scale, soft_cap, window);
          const at::Tensor want64 = want.to(at::kDouble);
          for (const char* impl : {"cuda.native.paged_attention_quant", "cuda.native.paged_attention_quant.batch_invariant"}) {
            SCOPED_TRACE(impl);
            const at::Tensor got = fn(impl)(c.query.to(kGpu), q[0].to(kGpu), q[1].to(kGpu), q[2].to(kGpu), q[3].to(kGpu),
                                            c.block_tables.to(kGpu), c.query_start_loc.to(kGpu), c.seq_lens.to(kGpu),
                                            c.scale, soft_cap, window);
            expect_close(got, want64, dtype);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, CudaAttentionImpl, ::testing::ValuesIn(cuda_implementations_of(kOperation)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '.' ? '_' : c;
                           return n;
                         });

class CudaAttentionSelection : public ::testing::Test {
 protected:
  void SetUp() override { runtime().reset_for_testing(); }
  void TearDown() override { runtime().reset_for_testing(); }
};

TEST_F(CudaAttentionSelection, InitializePicksNativeAndThePublicApiReachesIt) {
  XLLM_SKIP_WITHOUT_CUDA_DEVICE();
  auto b = initialize("cuda", {"paged_attention"});
  EXPECT_EQ(b->at(kOperation).spec().name, "cuda.native.paged_attention");
  const Call c = make_call({{33, 5}, {2, 1}, 8, 2, 64}, at::kHalf, kContiguous, kGpu);
  expect_close(ops::paged_attention(c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens,
                                    c.scale, 0, 0),
               reference(c), at::kHalf);
}

}  // namespace
}  // namespace xllm_kernel::testing
