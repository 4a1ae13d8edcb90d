# oneDNN's matmul as a CPU matrix-product path (src/cpu/kernels/gemm/onednn*.cc,
# docs/backends/cpu_gemm.md). polyops never links oneDNN: only its headers are needed
# at build time; libdnnl.so.3 is opened with dlopen at run time.
#
# In:  POLYOPS_ONEDNN (AUTO / ON / OFF), POLYOPS_ONEDNN_INCLUDE_DIR (the
#      directory holding oneapi/dnnl/dnnl.h; empty: the installed
#      onednn-devel-cpu-gomp wheel, found through Python_EXECUTABLE's
#      importlib.metadata, so pip's isolated build env finds its build
#      requirement), the polyops_kernels target.
# Out: POLYOPS_WITH_ONEDNN defined for src/cpu/kernels/gemm/onednn*.cc alone when the headers
#      are found; without them (AUTO) the path is compiled out.
set(POLYOPS_ONEDNN AUTO CACHE STRING "oneDNN matmul path: AUTO, ON or OFF")
set_property(CACHE POLYOPS_ONEDNN PROPERTY STRINGS AUTO ON OFF)
set(POLYOPS_ONEDNN_INCLUDE_DIR "" CACHE PATH
  "Directory with oneapi/dnnl/dnnl.h (empty: the onednn-devel-cpu-gomp wheel)")

string(TOUPPER "${POLYOPS_ONEDNN}" _onednn)
if(_onednn MATCHES "^(ON|TRUE|YES|Y|1)$")
  set(_onednn ON)
elseif(_onednn MATCHES "^(OFF|FALSE|NO|N|0)$")
  set(_onednn OFF)
elseif(NOT _onednn STREQUAL "AUTO")
  message(FATAL_ERROR "POLYOPS_ONEDNN=${POLYOPS_ONEDNN}: expected AUTO, ON or OFF")
endif()

set(_onednn_include "")
if(NOT _onednn STREQUAL "OFF")
  set(_onednn_include "${POLYOPS_ONEDNN_INCLUDE_DIR}")
  if(NOT _onednn_include)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c [=[
import importlib.metadata as m
try:
    files = m.distribution("onednn-devel-cpu-gomp").files or []
except m.PackageNotFoundError:
    files = []
for f in files:
    if str(f).replace("\\", "/").endswith("include/oneapi/dnnl/dnnl.h"):
        print(f.locate().resolve().parent.parent.parent)
        break
]=]
      OUTPUT_VARIABLE _onednn_include OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _onednn_result)
  endif()
  if(_onednn_include AND EXISTS "${_onednn_include}/oneapi/dnnl/dnnl.h")
    message(STATUS "polyops: oneDNN matmul path, headers in ${_onednn_include} (run-time dlopen)")
    # Only the onednn*.cc files see the headers and the macro.
    set_source_files_properties(src/cpu/kernels/gemm/onednn.cc
      src/cpu/kernels/gemm/onednn_library.cc src/cpu/kernels/gemm/onednn_primitive.cc PROPERTIES
      INCLUDE_DIRECTORIES "${_onednn_include}" COMPILE_DEFINITIONS POLYOPS_WITH_ONEDNN)
    target_link_libraries(polyops_kernels PUBLIC ${CMAKE_DL_LIBS})
  elseif(_onednn STREQUAL "ON")
    message(FATAL_ERROR "POLYOPS_ONEDNN=ON but oneapi/dnnl/dnnl.h was not found "
      "(pip install onednn-devel-cpu-gomp==2023.2.0, or set POLYOPS_ONEDNN_INCLUDE_DIR)")
  else()
    message(STATUS "polyops: oneDNN headers not found: the oneDNN matmul path is compiled out")
  endif()
endif()
