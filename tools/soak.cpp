// xllm-kernel-soak: see src/numerics/soak.h and `--help`.
#include "src/numerics/soak.h"

int main(int argc, char** argv) { return xllm_kernel::tools::soak::soak_main({argv, argv + argc}); }
