# The FlashInfer slots of flash_attention and paged_attention on CUDA
# (docs/backends/cuda.md, "FlashInfer"). Included by cmake/cuda.cmake once the CUDA
# backend is on.
#
# In:  POLYOPS_FLASHINFER (AUTO / ON / OFF), POLYOPS_FLASHINFER_INCLUDE_DIR,
#      POLYOPS_FLASHINFER_DTYPES, POLYOPS_FLASHINFER_HEAD_DIMS,
#      POLYOPS_FLASHINFER_ARCHITECTURES, TORCH_CUDA_VERSION.
# Out: POLYOPS_BUILD_FLASHINFER and polyops_add_flashinfer(<target>), which
#      compiles one instantiation TU per (kv kind, dtype, head size) into
#      <target> and gives the slots' TUs POLYOPS_WITH_FLASHINFER plus one
#      POLYOPS_FLASHINFER_<DTYPE>_<D> definition per compiled pair
#      (cuda/kernels/flashinfer/flashinfer_plan.h dispatches on them).
#
# The headers are FlashInfer's FA2 templates from the flashinfer-python 0.5.3
# wheel (flashinfer/data/include), never committed. Found in this order:
# POLYOPS_FLASHINFER_INCLUDE_DIR (no network needed: the way to build on an
# offline GPU machine), third_party/flashinfer/include (what
# scripts/fetch_flashinfer.py writes), else fetched at configure time into the
# build folder by that script (pip download, 7 MB).

set(POLYOPS_FLASHINFER AUTO CACHE STRING
  "FlashInfer attention slots on CUDA: AUTO (with a CUDA torch), ON or OFF")
set_property(CACHE POLYOPS_FLASHINFER PROPERTY STRINGS AUTO ON OFF)
set(POLYOPS_FLASHINFER_INCLUDE_DIR "" CACHE PATH
  "Folder holding flashinfer/attention/prefill.cuh (flashinfer-python 0.5.3's flashinfer/data/include)")
set(POLYOPS_FLASHINFER_DTYPES "float16;bfloat16" CACHE STRING
  "dtypes the FlashInfer slots compile kernels for (float16, bfloat16)")
set(POLYOPS_FLASHINFER_HEAD_DIMS "64;128;256" CACHE STRING
  "Head sizes the FlashInfer slots compile kernels for (64, 128, 256)")
set(POLYOPS_FLASHINFER_ARCHITECTURES "" CACHE STRING
  "CUDA architectures of the FlashInfer kernels (default: CMAKE_CUDA_ARCHITECTURES)")

set(POLYOPS_BUILD_FLASHINFER OFF)
string(TOUPPER "${POLYOPS_FLASHINFER}" _flashinfer)
if(_flashinfer MATCHES "^(ON|TRUE|YES|Y|1)$")
  set(_flashinfer ON)
elseif(_flashinfer MATCHES "^(OFF|FALSE|NO|N|0)$")
  set(_flashinfer OFF)
elseif(NOT _flashinfer STREQUAL "AUTO")
  message(FATAL_ERROR "POLYOPS_FLASHINFER=${POLYOPS_FLASHINFER}: expected AUTO, ON or OFF")
endif()

# Refuses (ON) or explains (AUTO) a missing prerequisite; the arguments are
# the pieces of the reason.
macro(_polyops_flashinfer_missing)
  string(CONCAT _why ${ARGV})
  if(_flashinfer STREQUAL "ON")
    message(FATAL_ERROR "polyops: POLYOPS_FLASHINFER=ON but ${_why}")
  endif()
  message(STATUS "polyops: FlashInfer slots off (${_why})")
  return()
endmacro()

if(_flashinfer STREQUAL "OFF")
  message(STATUS "polyops: FlashInfer slots off (POLYOPS_FLASHINFER=OFF)")
  return()
endif()
if(_flashinfer STREQUAL "AUTO" AND TORCH_CUDA_VERSION STREQUAL "")
  message(STATUS "polyops: FlashInfer slots off (POLYOPS_FLASHINFER=AUTO and torch has "
    "no CUDA: a compile-only build; -DPOLYOPS_FLASHINFER=ON compiles them)")
  return()
endif()

set(_marker flashinfer/attention/prefill.cuh)
set(_fetched ${CMAKE_BINARY_DIR}/flashinfer/include)
if(NOT POLYOPS_FLASHINFER_INCLUDE_DIR STREQUAL "")
  if(NOT EXISTS ${POLYOPS_FLASHINFER_INCLUDE_DIR}/${_marker})
    _polyops_flashinfer_missing("POLYOPS_FLASHINFER_INCLUDE_DIR=${POLYOPS_FLASHINFER_INCLUDE_DIR} "
      "has no ${_marker}")
  endif()
  set(_flashinfer_include ${POLYOPS_FLASHINFER_INCLUDE_DIR})
elseif(EXISTS ${CMAKE_SOURCE_DIR}/third_party/flashinfer/include/${_marker})
  set(_flashinfer_include ${CMAKE_SOURCE_DIR}/third_party/flashinfer/include)
else()
  if(NOT EXISTS ${_fetched}/${_marker})
    message(STATUS "polyops: fetching the FlashInfer headers (scripts/fetch_flashinfer.py)")
    execute_process(
      COMMAND "${Python_EXECUTABLE}" ${CMAKE_SOURCE_DIR}/scripts/fetch_flashinfer.py
        --dest ${_fetched}
      RESULT_VARIABLE _fetch_status OUTPUT_QUIET ERROR_VARIABLE _fetch_error
      TIMEOUT 300)
    if(NOT _fetch_status EQUAL 0)
      string(STRIP "${_fetch_error}" _fetch_error)
      _polyops_flashinfer_missing("the FlashInfer headers could not be fetched: "
        "${_fetch_error}; run scripts/fetch_flashinfer.py where PyPI is reachable or set "
        "POLYOPS_FLASHINFER_INCLUDE_DIR")
    endif()
  endif()
  set(_flashinfer_include ${_fetched})
endif()

set(_flashinfer_pairs)
foreach(dtype IN LISTS POLYOPS_FLASHINFER_DTYPES)
  if(NOT dtype MATCHES "^(float16|bfloat16)$")
    message(FATAL_ERROR "POLYOPS_FLASHINFER_DTYPES: ${dtype} is not float16 or bfloat16 "
      "(FlashInfer's FA2 kernels have no float32)")
  endif()
  foreach(dim IN LISTS POLYOPS_FLASHINFER_HEAD_DIMS)
    if(NOT dim MATCHES "^(64|128|256)$")
      message(FATAL_ERROR "POLYOPS_FLASHINFER_HEAD_DIMS: ${dim} is not 64, 128 or 256")
    endif()
    list(APPEND _flashinfer_pairs ${dtype}_${dim})
  endforeach()
endforeach()
if(NOT _flashinfer_pairs)
  _polyops_flashinfer_missing("POLYOPS_FLASHINFER_DTYPES or POLYOPS_FLASHINFER_HEAD_DIMS is empty")
endif()
set(POLYOPS_FLASHINFER_ARCHS ${POLYOPS_FLASHINFER_ARCHITECTURES})
if(NOT POLYOPS_FLASHINFER_ARCHS)
  set(POLYOPS_FLASHINFER_ARCHS ${CMAKE_CUDA_ARCHITECTURES})
endif()
set(POLYOPS_BUILD_FLASHINFER ON)
list(LENGTH _flashinfer_pairs _pair_count)
message(STATUS "polyops: FlashInfer slots on (headers ${_flashinfer_include}; "
  "${_flashinfer_pairs}; architectures ${POLYOPS_FLASHINFER_ARCHS}; "
  "${_pair_count} x 2 instantiation TUs)")

function(polyops_add_flashinfer target)
  set(_dir ${CMAKE_BINARY_DIR}/flashinfer/generated)
  set(_sources)
  set(_definitions POLYOPS_WITH_FLASHINFER)
  foreach(pair IN LISTS _flashinfer_pairs)
    string(REPLACE "_" ";" _parts ${pair})
    list(GET _parts 0 _dtype)
    list(GET _parts 1 _dim)
    if(_dtype STREQUAL "float16")
      set(_type __half)
    else()
      set(_type __nv_bfloat16)
    endif()
    string(TOUPPER ${pair} _upper)
    list(APPEND _definitions POLYOPS_FLASHINFER_${_upper})
    foreach(kind IN ITEMS Ragged Paged)
      set(_file ${_dir}/flashinfer_${kind}_${pair}.cu)
      file(CONFIGURE OUTPUT ${_file} CONTENT
"// Generated by cmake/flashinfer.cmake: FlashInfer launchers for ${_dtype}, head size ${_dim}.
#include \"cuda/kernels/flashinfer/flashinfer_kernels.cuh\"
POLYOPS_FLASHINFER_INSTANTIATE(${kind}, ${_type}, ${_dim})
")
      list(APPEND _sources ${_file})
    endforeach()
  endforeach()
  add_library(polyops_flashinfer OBJECT ${_sources})
  set_target_properties(polyops_flashinfer PROPERTIES
    CUDA_ARCHITECTURES "${POLYOPS_FLASHINFER_ARCHS}" CUDA_EXTENSIONS OFF
    POSITION_INDEPENDENT_CODE ON)
  target_compile_features(polyops_flashinfer PRIVATE cuda_std_17)
  target_include_directories(polyops_flashinfer SYSTEM PRIVATE ${_flashinfer_include})
  target_include_directories(polyops_flashinfer PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(polyops_flashinfer PRIVATE ${_definitions})
  # Same numerics policy as the other CUDA TUs: no --use_fast_math.
  target_compile_options(polyops_flashinfer PRIVATE -O3 --expt-relaxed-constexpr)
  target_link_libraries(polyops_flashinfer PRIVATE CUDA::cudart)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:polyops_flashinfer>)
  # Only the TUs that hold the slots see the definitions: the other CUDA TUs
  # keep their flags, so turning the slots on or off rebuilds three files.
  set_property(SOURCE ${CMAKE_BINARY_DIR}/generated/cuda_flash_attention.cu
    ${CMAKE_BINARY_DIR}/generated/cuda_paged_attention.cu
    ${CMAKE_SOURCE_DIR}/src/cuda/kernels/flashinfer/flashinfer_plan.cu
    APPEND PROPERTY COMPILE_DEFINITIONS ${_definitions})
endfunction()
