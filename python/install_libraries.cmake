# Install-time part of python/CMakeLists.txt's wheel layout (run by `cmake --install --component
# xllm_kernel_python`): copies _C, the libraries it needs and the device plugins the build produced
# into <prefix>/xllm_kernel/, each as one file, with RPATH $ORIGIN (torch's own libraries are
# already loaded by `import torch`, which the package does first).
#
# In: XK_LIBRARIES (list of <built file>=<installed name>), XK_NOT_PLUGINS (file names in
# XK_PLUGIN_DIR that match the plugin pattern but are not plugins), XK_PLUGIN_DIR.
set(_dest "${CMAKE_INSTALL_PREFIX}/xllm_kernel")
file(MAKE_DIRECTORY "${_dest}")

function(_xk_install_library source name)
  file(REAL_PATH "${source}" _real)
  message(STATUS "Installing: ${_dest}/${name}")
  file(COPY_FILE "${_real}" "${_dest}/${name}")
  file(RPATH_SET FILE "${_dest}/${name}" NEW_RPATH "$ORIGIN")
endfunction()

foreach(pair IN LISTS XK_LIBRARIES)
  string(REPLACE "=" ";" pair "${pair}")
  list(GET pair 0 _source)
  list(GET pair 1 _name)
  _xk_install_library("${_source}" "${_name}")
endforeach()

# Plugins (libxllm_kernel_cuda.so, libxllm_kernel_npu.so, ...) are built only where their SDK
# exists; initialize() loads them from the directory of libxllm_kernel.
file(GLOB _plugins "${XK_PLUGIN_DIR}/libxllm_kernel_*.so")
foreach(_plugin IN LISTS _plugins)
  get_filename_component(_name "${_plugin}" NAME)
  list(FIND XK_NOT_PLUGINS "${_name}" _index)  # not IN_LIST: install scripts run under old policies
  if(_index EQUAL -1)
    _xk_install_library("${_plugin}" "${_name}")
  endif()
endforeach()
