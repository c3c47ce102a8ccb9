// A C++ engine's view: find_package(xllm_kernel), initialize, call an op through its binding.
#include <ATen/ATen.h>
#include <xllm_kernel/xllm_kernel.h>

#include <iostream>

int main() {
  auto bindings = xllm_kernel::initialize("cpu", {"rms_norm"});
  at::Tensor x = at::ones({2, 8}, at::kFloat) * 3;
  at::Tensor w = at::full({8}, 2.0f);
  at::Tensor y = xllm_kernel::ops::rms_norm(x, w, 0.0);
  // rms of a constant row of 3 is 3, so every output is 3 / 3 * 2 = 2.
  const bool ok = at::allclose(y, at::full({2, 8}, 2.0f));
  std::cout << "consumer: rms_norm via " << bindings->at("rms_norm").spec().name << (ok ? " ok" : " WRONG") << "\n";
  return ok ? 0 : 1;
}
