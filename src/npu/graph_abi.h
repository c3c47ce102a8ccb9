// The C interface of libxllm_kernel_npu_graph.so (src/npu/aclgraph.cpp): ACLGraph capture and replay
// through torch_npu's c10_npu::NPUGraph. The library is built only where the torch-npu wheel's
// headers are (cmake/npu.cmake) and links libtorch_npu.so, so the NPU DeviceApi
// (src/core/device_api_npu.cpp) dlopens it on first use: where it is absent or cannot load (no CANN
// runtime), graph mode is unsupported on npu with that reason, and eager mode is unaffected.
// No C++ exception crosses this interface: a failure returns null / non-zero and fills `error`.
#pragma once

#include <cstddef>

extern "C" {

// The interface version the DeviceApi expects.
#define XLLM_KERNEL_NPU_GRAPH_ABI 1
int xllm_kernel_npu_graph_abi(void);

// Captures `calls` invocations of enqueue(context) on a side stream of device `index`, ordered after
// the current stream, into one graph. Null on failure.
void* xllm_kernel_npu_graph_capture(int index, void (*enqueue)(void* context), void* context, int calls, char* error,
                                    size_t error_size);
// Replays the graph on the current stream of its device; 0 on success.
int xllm_kernel_npu_graph_replay(void* graph, char* error, size_t error_size);
void xllm_kernel_npu_graph_destroy(void* graph);
}
