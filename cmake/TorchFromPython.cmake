# Finds libtorch inside the `torch` wheel of a Python environment and defines the INTERFACE
# target xllm_kernel_torch (headers, libraries and the ABI flag torch was built with).
#
# Input: Python3_EXECUTABLE (defaults to the python3 on PATH).
# Output: XLLM_TORCH_DIR, XLLM_TORCH_VERSION, XLLM_TORCH_CUDA (libtorch_cuda.so where the wheel is a
# CUDA build, else empty), target xllm_kernel_torch.
#
# Any torch from 2.10 (its headers need C++20) builds; CI pins one 2.14.x (scripts/setup.sh), and
# the GPU test machines bring their own (2.11). Newer than the newest tested minor only warns.
if(TARGET xllm_kernel_torch)
  return()
endif()
if(NOT Python3_EXECUTABLE)
  find_program(Python3_EXECUTABLE NAMES python3 python REQUIRED)
endif()
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c
          "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  OUTPUT_VARIABLE _xk_torch_out
  ERROR_VARIABLE _xk_torch_err
  RESULT_VARIABLE _xk_torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _xk_torch_rc EQUAL 0)
  message(FATAL_ERROR "xllm_kernel: cannot import torch with ${Python3_EXECUTABLE}: ${_xk_torch_err}\n"
                      "Run scripts/setup.sh, or pass -DPython3_EXECUTABLE=<python with torch>.")
endif()
string(REPLACE "\n" ";" _xk_torch_out "${_xk_torch_out}")
list(GET _xk_torch_out 0 XLLM_TORCH_DIR)
list(GET _xk_torch_out 1 XLLM_TORCH_VERSION)
list(GET _xk_torch_out 2 _xk_torch_abi)
set(XLLM_TORCH_MIN_VERSION 2.10)
set(XLLM_TORCH_TESTED_VERSION 2.14)  # the newest minor CI has built and tested
if(XLLM_TORCH_VERSION VERSION_LESS XLLM_TORCH_MIN_VERSION)
  message(FATAL_ERROR "xllm_kernel: needs torch >= ${XLLM_TORCH_MIN_VERSION}, found ${XLLM_TORCH_VERSION} at "
                      "${XLLM_TORCH_DIR} (with ${Python3_EXECUTABLE})")
endif()
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _xk_torch_minor "${XLLM_TORCH_VERSION}")
if(_xk_torch_minor VERSION_GREATER XLLM_TORCH_TESTED_VERSION)
  message(WARNING "xllm_kernel: torch ${XLLM_TORCH_VERSION} is newer than the newest tested "
                  "(${XLLM_TORCH_TESTED_VERSION}.x); building anyway")
endif()
message(STATUS "xllm_kernel: torch ${XLLM_TORCH_VERSION} at ${XLLM_TORCH_DIR} (cxx11 abi ${_xk_torch_abi})")

add_library(xllm_kernel_torch INTERFACE IMPORTED GLOBAL)
target_include_directories(xllm_kernel_torch SYSTEM INTERFACE
  "${XLLM_TORCH_DIR}/include" "${XLLM_TORCH_DIR}/include/torch/csrc/api/include")
# libstdc++ ahead of libtorch: torch 2.11's libtorch.so exports its own copy of std::filesystem
# (whose remove_all crashes), and a binary linking libtorch first would bind to it.
target_link_libraries(xllm_kernel_torch INTERFACE "$<$<CXX_COMPILER_ID:GNU>:stdc++>"
  "${XLLM_TORCH_DIR}/lib/libtorch.so" "${XLLM_TORCH_DIR}/lib/libtorch_cpu.so" "${XLLM_TORCH_DIR}/lib/libc10.so")
target_compile_definitions(xllm_kernel_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${_xk_torch_abi})
set_target_properties(xllm_kernel_torch PROPERTIES INTERFACE_LINK_OPTIONS "-Wl,-rpath,${XLLM_TORCH_DIR}/lib")

# A CUDA build of torch registers its CUDA backend (at::hasCUDA(), the CUDA dispatch keys) from
# libtorch_cuda.so's static initializers. Nothing we link calls into it, so a linker that drops
# unused libraries (--as-needed, the default of Ubuntu's toolchain) would leave it out of every
# binary, and cuda.torch.* would find "torch without CUDA". Keep it, and only it, needed.
set(XLLM_TORCH_CUDA "")
if(EXISTS "${XLLM_TORCH_DIR}/lib/libtorch_cuda.so")
  set(XLLM_TORCH_CUDA "${XLLM_TORCH_DIR}/lib/libtorch_cuda.so")
  target_link_libraries(xllm_kernel_torch INTERFACE
    "-Wl,--push-state,--no-as-needed" "${XLLM_TORCH_CUDA}" "-Wl,--pop-state")
endif()

# An OpenMP build of torch (ATen/Config.h: AT_PARALLEL_OPENMP 1) runs at::parallel_for's body
# as a `#pragma omp parallel` compiled into the caller, so callers need -fopenmp and must share
# torch's OpenMP runtime (the wheel ships libgomp.so.1 in torch/lib). XLLM_TORCH_OPENMP_LIBRARY
# is that runtime, or empty when torch uses its native thread pool.
set(XLLM_TORCH_OPENMP_LIBRARY "")
file(STRINGS "${XLLM_TORCH_DIR}/include/ATen/Config.h" _xk_torch_openmp REGEX "^#define AT_PARALLEL_OPENMP 1")
if(_xk_torch_openmp)
  file(GLOB _xk_torch_gomp "${XLLM_TORCH_DIR}/lib/libgomp*.so*")
  if(_xk_torch_gomp)
    list(GET _xk_torch_gomp 0 XLLM_TORCH_OPENMP_LIBRARY)
  else()
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    set(XLLM_TORCH_OPENMP_LIBRARY "${OpenMP_CXX_LIBRARIES}")
  endif()
  message(STATUS "xllm_kernel: torch parallelizes with OpenMP (${XLLM_TORCH_OPENMP_LIBRARY})")
endif()

# Precompiled <ATen/ATen.h> for the targets with many torch translation units: parsing ATen's
# headers is about 5 s of every such translation unit's compile (g++ 12), a third of the build's
# compile time on an empty compiler cache. Each target gets its own header, built with its flags.
# What a translation unit includes is still checked without it: the compile guard
# (scripts/compile_guard.py) drops the precompiled header from the commands it replays.
option(XLLM_KERNEL_TORCH_PCH "Precompile <ATen/ATen.h> for the targets with many torch translation units" ON)
function(xllm_kernel_torch_pch target)
  if(XLLM_KERNEL_TORCH_PCH)
    target_precompile_headers(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:<ATen/ATen.h$<ANGLE-R>>")
  endif()
endfunction()
