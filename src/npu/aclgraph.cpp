// libxllm_kernel_npu_graph.so: ACLGraph capture and replay for the NPU DeviceApi, over torch_npu's
// c10_npu::NPUGraph (the interface: src/npu/graph_abi.h). Built by cmake/npu.cmake only against
// the torch-npu wheel's headers; it links libtorch_npu.so, so it loads only where torch_npu and
// the CANN runtime do. Capture runs on a pool stream ordered after the current stream, as CUDA
// graphs need (a graph cannot be captured on the default stream).
#include <c10/core/DeviceGuard.h>

#include <cstdio>
#include <exception>
#include <memory>

#include "src/npu/graph_abi.h"
#include "torch_npu/csrc/core/npu/NPUEvent.h"
#include "torch_npu/csrc/core/npu/NPUGraph.h"
#include "torch_npu/csrc/core/npu/NPUGuard.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace {

struct Graph {
  int index = 0;
  c10_npu::NPUGraph graph;
};

void set_error(char* error, size_t size, const char* message) {
  if (error != nullptr && size > 0) std::snprintf(error, size, "%s", message);
}

}  // namespace

extern "C" {

int xllm_kernel_npu_graph_abi(void) { return XLLM_KERNEL_NPU_GRAPH_ABI; }

void* xllm_kernel_npu_graph_capture(int index, void (*enqueue)(void*), void* context, int calls, char* error,
                                    size_t error_size) {
  try {
    const auto device = static_cast<c10::DeviceIndex>(index);
    c10_npu::NPUGuard guard(device);
    auto graph = std::make_unique<Graph>();
    graph->index = index;
    c10_npu::NPUStream current = c10_npu::getCurrentNPUStream(device);
    c10_npu::NPUStream side = c10_npu::getStreamFromPool(false, device);
    c10_npu::NPUEvent ready;
    ready.record(current);
    ready.block(side);
    {
      c10_npu::NPUStreamGuard stream_guard(side);
      graph->graph.capture_begin();
      for (int i = 0; i < calls; ++i) enqueue(context);
      graph->graph.capture_end();
    }
    side.synchronize();
    return graph.release();
  } catch (const std::exception& e) {
    set_error(error, error_size, e.what());
  } catch (...) {
    set_error(error, error_size, "unknown error");
  }
  return nullptr;
}

int xllm_kernel_npu_graph_replay(void* graph, char* error, size_t error_size) {
  try {
    auto* g = static_cast<Graph*>(graph);
    c10_npu::NPUGuard guard(static_cast<c10::DeviceIndex>(g->index));
    g->graph.replay();
    return 0;
  } catch (const std::exception& e) {
    set_error(error, error_size, e.what());
  } catch (...) {
    set_error(error, error_size, "unknown error");
  }
  return 1;
}

void xllm_kernel_npu_graph_destroy(void* graph) {
  try {
    delete static_cast<Graph*>(graph);
  } catch (...) {
  }
}
}
