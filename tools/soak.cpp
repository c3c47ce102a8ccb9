// xllm-kernel-soak: see src/tools/soak.h and `--help`.
#include "src/tools/soak.h"

int main(int argc, char** argv) { return xllm_kernel::tools::soak::soak_main({argv, argv + argc}); }
