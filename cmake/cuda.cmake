# The CUDA plugin libxllm_kernel_cuda.so: torch-free kernels (csrc/cuda, nvcc) and their
# at::Tensor bridges (src/ops/<family>/cuda/*.cpp), loaded by initialize("cuda") from the directory
# of libxllm_kernel.so. Included from the top-level CMakeLists.txt after the xllm_kernel target.
#
#   -DXLLM_KERNEL_CUDA=AUTO   (default) build it when nvcc is found and torch is a CUDA build
#   -DXLLM_KERNEL_CUDA=ON     require it
#   -DXLLM_KERNEL_CUDA=OFF    skip it (cuda.torch.* still works where torch sees a GPU)
#   -DCMAKE_CUDA_ARCHITECTURES="80;90"  (default) SASS for both, plus PTX for newer GPUs
#
# Output: XLLM_KERNEL_CUDA_BUILT (ON/OFF), XLLM_KERNEL_TORCH_CUDART, targets xllm_kernel_cuda_kernels
# (torch-free objects) and xllm_kernel_cuda.
set(XLLM_KERNEL_CUDA AUTO CACHE STRING "Build the CUDA plugin libxllm_kernel_cuda.so: AUTO, ON or OFF")
set_property(CACHE XLLM_KERNEL_CUDA PROPERTY STRINGS AUTO ON OFF)
set(XLLM_KERNEL_CUDA_BUILT OFF)

function(_xk_cuda_unavailable reason)
  if(XLLM_KERNEL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "xllm_kernel: XLLM_KERNEL_CUDA=ON, but ${reason}")
  endif()
  message(STATUS "xllm_kernel: CUDA plugin not built: ${reason}")
endfunction()

if(NOT XLLM_KERNEL_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "xllm_kernel: XLLM_KERNEL_CUDA must be AUTO, ON or OFF, got '${XLLM_KERNEL_CUDA}'")
endif()
if(XLLM_KERNEL_CUDA STREQUAL "OFF")
  message(STATUS "xllm_kernel: CUDA plugin not built (XLLM_KERNEL_CUDA=OFF)")
  return()
endif()

# The torch wheel must be a CUDA build: the bridges use libtorch_cuda and libc10_cuda.
execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch.version.cuda or '')"
                OUTPUT_VARIABLE _xk_torch_cuda OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _xk_rc)
if(NOT _xk_rc EQUAL 0 OR _xk_torch_cuda STREQUAL "" OR NOT EXISTS "${XLLM_TORCH_DIR}/lib/libtorch_cuda.so")
  _xk_cuda_unavailable("torch ${XLLM_TORCH_VERSION} at ${XLLM_TORCH_DIR} is not a CUDA build")
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  _xk_cuda_unavailable("no CUDA compiler (nvcc) found; set CMAKE_CUDA_COMPILER or put nvcc on PATH")
  return()
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;90")
endif()
if(CCACHE_PROGRAM AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${CCACHE_PROGRAM}")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# The plugin shares the process with torch's CUDA runtime; a different major version would load
# a second libcudart beside it.
string(REGEX MATCH "^[0-9]+" _xk_torch_cuda_major "${_xk_torch_cuda}")
if(NOT CUDAToolkit_VERSION_MAJOR STREQUAL _xk_torch_cuda_major)
  message(WARNING "xllm_kernel: CUDA toolkit ${CUDAToolkit_VERSION} differs in major version from torch's CUDA "
                  "${_xk_torch_cuda}; the plugin links libcudart ${CUDAToolkit_VERSION_MAJOR}")
endif()
message(STATUS "xllm_kernel: CUDA plugin with nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
               "architectures ${CMAKE_CUDA_ARCHITECTURES}, torch CUDA ${_xk_torch_cuda}")

# Torch code links the CUDA runtime torch loads (the wheel's nvidia/*/lib), not the toolkit's: the
# toolkit's directory on the link line would also supply libtorch_cuda's other dependencies (an
# older libnccl) when linking executables. Falls back to the toolkit's where torch has no shared one.
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c
          "import torch; print(next((l.split()[-1] for l in open('/proc/self/maps') if 'libcudart.so' in l), ''))"
  OUTPUT_VARIABLE _xk_torch_cudart OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(_xk_torch_cudart AND EXISTS "${_xk_torch_cudart}")
  set(XLLM_KERNEL_TORCH_CUDART "${_xk_torch_cudart}")
else()
  set(XLLM_KERNEL_TORCH_CUDART CUDA::cudart)
endif()

# One CUDA runtime in the process, shared: torch's. A static cudart (CMake's default for targets
# with CUDA code) would give the plugin a runtime of its own: its own view of the current device
# and its own registered kernels, beside torch's. test/CMakeLists.txt checks the plugin's link.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)

# Torch-free kernels: no torch headers reach nvcc.
file(GLOB_RECURSE XK_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/csrc/cuda/*.cu")
file(GLOB XK_CUDA_BRIDGE_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/cuda/*.cpp"
     "${PROJECT_SOURCE_DIR}/src/ops/*/cuda/*.cpp")
add_library(xllm_kernel_cuda_kernels OBJECT ${XK_CUDA_KERNEL_SOURCES})
target_include_directories(xllm_kernel_cuda_kernels PRIVATE "${PROJECT_SOURCE_DIR}")
set_target_properties(xllm_kernel_cuda_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                          POSITION_INDEPENDENT_CODE ON)
target_compile_options(xllm_kernel_cuda_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)

# The plugin: bridges (C++20, torch headers) + kernels. Not exported: engines link
# xllm_kernel::xllm_kernel and the runtime loads this at initialize("cuda").
add_library(xllm_kernel_cuda SHARED ${XK_CUDA_BRIDGE_SOURCES} $<TARGET_OBJECTS:xllm_kernel_cuda_kernels>)
xllm_kernel_torch_pch(xllm_kernel_cuda)
target_include_directories(xllm_kernel_cuda PRIVATE "${PROJECT_SOURCE_DIR}")
target_include_directories(xllm_kernel_cuda SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(xllm_kernel_cuda PRIVATE
  xllm_kernel
  "${XLLM_TORCH_DIR}/lib/libtorch_cuda.so"
  "${XLLM_TORCH_DIR}/lib/libc10_cuda.so"
  ${XLLM_KERNEL_TORCH_CUDART})
target_compile_options(xllm_kernel_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
# The runtime dlopens exactly "libxllm_kernel_cuda.so" beside libxllm_kernel.so: no version suffix.
set_target_properties(xllm_kernel_cuda PROPERTIES INSTALL_RPATH "$ORIGIN")
set_target_properties(xllm_kernel_cuda_kernels xllm_kernel_cuda PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
install(TARGETS xllm_kernel_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(XLLM_KERNEL_CUDA_BUILT ON)
