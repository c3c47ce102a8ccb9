// The public operator API: one header per operator group.
#pragma once

#include "xllm_kernel/ops/normalization.h"
