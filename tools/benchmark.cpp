// xllm-kernel-benchmark: see xllm_kernel/tools.h and `--help`.
#include "xllm_kernel/tools.h"

int main(int argc, char** argv) { return xllm_kernel::tools::benchmark_main({argv, argv + argc}); }
