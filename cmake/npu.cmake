# The Ascend NPU side, included from the top-level CMakeLists.txt after the xllm_kernel target.
#
#   libxllm_kernel_npu.so        the npu.torch.* bridges (src/ops/<family>/npu/*.cpp). They call
#                                torch_npu's vendor operators through the PyTorch dispatcher by schema,
#                                so they need libtorch only and build everywhere; initialize("npu")
#                                loads the plugin once torch_npu is loaded in the process.
#   libxllm_kernel_npu_graph.so  ACLGraph capture and replay for the NPU DeviceApi (src/npu/aclgraph.cpp),
#                                over torch_npu's NPUGraph: built only against the torch-npu wheel's
#                                headers and libtorch_npu.so (the DeviceApi dlopens it on first use).
#
#   -DXLLM_KERNEL_NPU=ON|OFF          build the plugin (default ON)
#   -DXLLM_KERNEL_TORCH_NPU_DIR=DIR   the directory holding the wheel's torch_npu/ (site-packages, or
#                                     a `pip install --no-deps --target DIR torch-npu==X` directory);
#                                     default: torch_npu's location in the Python environment, if any.
#                                     Empty and not found: no ACLGraph library (graph mode on npu is
#                                     then unsupported, with that reason).
#
# Output: XLLM_KERNEL_NPU_BUILT, XLLM_KERNEL_NPU_GRAPH_BUILT (ON/OFF).
option(XLLM_KERNEL_NPU "Build the NPU plugin libxllm_kernel_npu.so (torch_npu's vendor operators by schema)" ON)
set(XLLM_KERNEL_TORCH_NPU_DIR "" CACHE PATH "Directory holding the torch-npu wheel's torch_npu/ package (for ACLGraph)")
set(XLLM_KERNEL_NPU_BUILT OFF)
set(XLLM_KERNEL_NPU_GRAPH_BUILT OFF)
if(NOT XLLM_KERNEL_NPU)
  message(STATUS "xllm_kernel: NPU plugin not built (XLLM_KERNEL_NPU=OFF)")
  return()
endif()

file(GLOB XK_NPU_BRIDGE_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/ops/*/npu/*.cpp")
add_library(xllm_kernel_npu SHARED ${XK_NPU_BRIDGE_SOURCES})
target_include_directories(xllm_kernel_npu PRIVATE "${PROJECT_SOURCE_DIR}")
target_link_libraries(xllm_kernel_npu PRIVATE xllm_kernel)
target_compile_options(xllm_kernel_npu PRIVATE -Wall -Wextra -Wno-unused-parameter)
# The runtime dlopens exactly "libxllm_kernel_npu.so" beside libxllm_kernel.so: no version suffix.
set_target_properties(xllm_kernel_npu PROPERTIES INSTALL_RPATH "$ORIGIN")
install(TARGETS xllm_kernel_npu LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(XLLM_KERNEL_NPU_BUILT ON)

# ACLGraph: the wheel's headers and libtorch_npu.so.
set(_xk_npu_dir "${XLLM_KERNEL_TORCH_NPU_DIR}")
if(NOT _xk_npu_dir)
  # find_spec locates the package without importing it (importing needs the CANN runtime).
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c
            "import importlib.util, os; s = importlib.util.find_spec('torch_npu'); print(os.path.dirname(os.path.dirname(s.origin)) if s and s.origin else '')"
    OUTPUT_VARIABLE _xk_npu_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
set(_xk_npu_include "${_xk_npu_dir}/torch_npu/include")
set(_xk_npu_library "${_xk_npu_dir}/torch_npu/lib/libtorch_npu.so")
if(NOT _xk_npu_dir OR NOT EXISTS "${_xk_npu_include}/torch_npu/csrc/core/npu/NPUGraph.h"
   OR NOT EXISTS "${_xk_npu_library}")
  if(XLLM_KERNEL_TORCH_NPU_DIR)
    message(FATAL_ERROR "xllm_kernel: XLLM_KERNEL_TORCH_NPU_DIR=${XLLM_KERNEL_TORCH_NPU_DIR} holds no torch_npu/ with "
                        "include/torch_npu/csrc/core/npu/NPUGraph.h and lib/libtorch_npu.so")
  endif()
  message(STATUS "xllm_kernel: NPU plugin built; ACLGraph library not built (no torch-npu wheel found: set "
                 "XLLM_KERNEL_TORCH_NPU_DIR)")
  return()
endif()
execute_process(COMMAND "${Python3_EXECUTABLE}" -c
                        "import re; print(re.search(r\"__version__\\s*=\\s*'([^']+)'\", open('${_xk_npu_dir}/torch_npu/version.py').read()).group(1))"
                OUTPUT_VARIABLE _xk_npu_version OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
add_library(xllm_kernel_npu_graph SHARED "${PROJECT_SOURCE_DIR}/src/npu/aclgraph.cpp")
target_include_directories(xllm_kernel_npu_graph PRIVATE "${PROJECT_SOURCE_DIR}")
target_include_directories(xllm_kernel_npu_graph SYSTEM PRIVATE "${_xk_npu_include}"
                           "${_xk_npu_include}/third_party/acl/inc")
# libtorch_npu.so's own dependencies (CANN: libascendcl, libhccl, ...) exist only on NPU machines;
# a shared library may leave them unresolved at link time.
target_link_libraries(xllm_kernel_npu_graph PRIVATE xllm_kernel_torch "${_xk_npu_library}")
target_link_options(xllm_kernel_npu_graph PRIVATE "-Wl,--allow-shlib-undefined")
target_compile_options(xllm_kernel_npu_graph PRIVATE -Wall -Wextra -Wno-unused-parameter)
set_target_properties(xllm_kernel_npu_graph PROPERTIES INSTALL_RPATH "$ORIGIN")
install(TARGETS xllm_kernel_npu_graph LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(XLLM_KERNEL_NPU_GRAPH_BUILT ON)
message(STATUS "xllm_kernel: NPU plugin and ACLGraph library (torch_npu ${_xk_npu_version} at ${_xk_npu_dir})")
