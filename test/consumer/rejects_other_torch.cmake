# cmake -DBUILD_DIR=... -DSOURCE_DIR=test/consumer -DWORK_DIR=... -DPYTHON_SHIM=... -DBUILT_TORCH=... -P this
#
# The installed package records the torch it was built with and refuses another release: a consumer
# configured with a Python whose torch is 2.99.0 (PYTHON_SHIM, a stand-in) must fail with the
# package's message. CMake wraps that message at spaces where the line grows too long, and the line
# holds the Python's path, so the words are matched across any whitespace; the shim is run from
# folders of several name lengths, which moves where the wraps fall.
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix"
                OUTPUT_QUIET ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}): ${err}")
endif()
file(GLOB_RECURSE config "${WORK_DIR}/prefix/*/xllm_kernelConfig.cmake")
file(READ "${config}" text)
string(FIND "${text}" "set(xllm_kernel_TORCH_VERSION \"${BUILT_TORCH}\")" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${config} does not record torch ${BUILT_TORCH}")
endif()
foreach(pad 0 3 6 9 12 40 80)
  string(REPEAT "p" ${pad} padding)
  set(dir "${WORK_DIR}/python${padding}")
  file(COPY "${PYTHON_SHIM}" DESTINATION "${dir}")
  get_filename_component(name "${PYTHON_SHIM}" NAME)
  execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G Ninja
                          "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DPython3_EXECUTABLE=${dir}/${name}"
                  OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
  if(rc EQUAL 0)
    message(FATAL_ERROR "the consumer configured against torch 2.99.0 (Python ${dir}/${name}):\n${out}")
  endif()
  string(REGEX REPLACE "[ \t\r\n]+" " " words "${out}")
  set(want "xllm_kernel was built against torch ${BUILT_TORCH}, but ${dir}/${name} has torch 2.99.0")
  string(FIND "${words}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the consumer's configuration failed without saying\n  ${want}\nit said:\n${out}")
  endif()
  string(REGEX MATCHALL "\n" lines "${out}")
  list(LENGTH lines count)
  message(STATUS "Python path of ${pad} more characters: refused with the package's message (${count} lines)")
endforeach()
