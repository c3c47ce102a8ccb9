# Compares docs/operators.md with what `xllm-kernel-info --operators-doc` generates from the contracts.
execute_process(COMMAND "${TOOL}" --operators-doc OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "xllm-kernel-info --operators-doc failed with ${rc}")
endif()
file(READ "${EXPECTED}" expected)
if(NOT generated STREQUAL expected)
  message(FATAL_ERROR "docs/operators.md is out of date with the contracts; regenerate it:\n"
                      "  build/xllm-kernel-info --write-docs .")
endif()
