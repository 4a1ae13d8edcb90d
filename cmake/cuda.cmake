# The CUDA backend's build (docs/backends/cuda.md, "Building").
#
# In:  _with_cuda (AUTO / ON / OFF, normalized from WITH_CUDA), TORCH_CUDA_VERSION
#      (torch.version.cuda, empty for a CPU torch), Python_EXECUTABLE.
# Out: POLYOPS_BUILD_CUDA, the CUDA language enabled, and
#      polyops_add_cuda_backend(<extension target>), which builds the static
#      library polyops_cuda from the generated cuda_<op>.cu TUs plus
#      src/cuda/runtime/*.cu and src/cuda/kernels/*/*.cu and links it into
#      the extension.
#      polyops::cublas: an INTERFACE target with cuBLAS + cuBLASLt (headers,
#      libraries, POLYOPS_WITH_CUBLAS), present when they were found.
#      POLYOPS_BUILD_FLASHINFER (cmake/flashinfer.cmake): the FlashInfer
#      attention slots, compiled into polyops_cuda when on.

include(CheckLanguage)

set(POLYOPS_BUILD_CUDA OFF)
if(_with_cuda STREQUAL "AUTO")
  if(TORCH_CUDA_VERSION STREQUAL "")
    message(STATUS "polyops: CUDA backend off (WITH_CUDA=AUTO and torch has no CUDA; "
      "-DWITH_CUDA=ON compiles it anyway)")
  else()
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(POLYOPS_BUILD_CUDA ON)
    else()
      message(STATUS "polyops: CUDA backend off (WITH_CUDA=AUTO: torch has CUDA "
        "${TORCH_CUDA_VERSION} but no nvcc was found; set CUDACXX or put nvcc on PATH)")
    endif()
  endif()
elseif(_with_cuda)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "WITH_CUDA=ON needs nvcc, which was not found: install the CUDA "
      "toolkit and put nvcc on PATH, or set CUDACXX / CMAKE_CUDA_COMPILER")
  endif()
  set(POLYOPS_BUILD_CUDA ON)
else()
  message(STATUS "polyops: CUDA backend off (WITH_CUDA=OFF)")
endif()

if(NOT POLYOPS_BUILD_CUDA)
  return()
endif()

# Ampere and Hopper unless the caller chose (-DCMAKE_CUDA_ARCHITECTURES or
# CUDAARCHS). Must be set before enable_language, which otherwise picks the
# compiler's default.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
# Shared cudart: the process then has one CUDA runtime, the one CUDA torch
# already loaded (libcudart.so.13 from the nvidia-cuda-runtime wheel).
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
find_package(CUDAToolkit REQUIRED)
message(STATUS "polyops: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
  "architectures ${CMAKE_CUDA_ARCHITECTURES})")

# Two CUDA runtimes of different major versions in one process do not share
# a context; a build for CUDA torch must use torch's major version.
if(NOT TORCH_CUDA_VERSION STREQUAL "")
  string(REGEX MATCH "^[0-9]+" _torch_cuda_major "${TORCH_CUDA_VERSION}")
  if(NOT _torch_cuda_major STREQUAL CUDAToolkit_VERSION_MAJOR)
    message(FATAL_ERROR "torch is built with CUDA ${TORCH_CUDA_VERSION} but nvcc is "
      "${CUDAToolkit_VERSION}: use a CUDA ${_torch_cuda_major}.x toolkit (CUDACXX=...)")
  endif()
endif()

# --- cuBLAS / cuBLASLt ---------------------------------------------------------
# The toolkit may lack them (a compile-only machine with nvcc + cudart); CUDA
# torch depends on the nvidia-cublas wheel, which puts headers and
# libcublas.so.13 / libcublasLt.so.13 (no unversioned names) under
# site-packages/nvidia/cu13. Found in that order: POLYOPS_CUBLAS_ROOT, the
# wheel, the toolkit.
set(POLYOPS_CUBLAS_ROOT "" CACHE PATH "Directory with include/cublasLt.h and lib/libcublas*")
# CUDA 13 wheels: nvidia/cu13/{include,lib}; CUDA 12 (nvidia-cublas-cu12):
# nvidia/cublas/{include,lib}.
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import importlib\nfor name in ('nvidia.cu13', 'nvidia.cublas'):\n  try: print(list(importlib.import_module(name).__path__)[0])\n  except ImportError: pass"
  OUTPUT_VARIABLE _nvidia_wheel_dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
string(REPLACE "\n" ";" _nvidia_wheel_dirs "${_nvidia_wheel_dirs}")
set(_cublas_hints ${POLYOPS_CUBLAS_ROOT} ${_nvidia_wheel_dirs} ${CUDAToolkit_LIBRARY_ROOT})
find_path(POLYOPS_CUBLAS_INCLUDE_DIR cublasLt.h
  HINTS ${_cublas_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(POLYOPS_CUBLAS_LIBRARY NAMES cublas libcublas.so.13 libcublas.so.12
  HINTS ${_cublas_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
find_library(POLYOPS_CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.13 libcublasLt.so.12
  HINTS ${_cublas_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
if(POLYOPS_CUBLAS_INCLUDE_DIR AND POLYOPS_CUBLAS_LIBRARY AND POLYOPS_CUBLASLT_LIBRARY)
  add_library(polyops_cublas INTERFACE)
  add_library(polyops::cublas ALIAS polyops_cublas)
  target_include_directories(polyops_cublas INTERFACE ${POLYOPS_CUBLAS_INCLUDE_DIR})
  target_link_libraries(polyops_cublas INTERFACE ${POLYOPS_CUBLASLT_LIBRARY}
    ${POLYOPS_CUBLAS_LIBRARY})
  target_compile_definitions(polyops_cublas INTERFACE POLYOPS_WITH_CUBLAS)
  message(STATUS "polyops: cuBLAS ${POLYOPS_CUBLAS_LIBRARY}")
elseif(NOT TORCH_CUDA_VERSION STREQUAL "")
  message(FATAL_ERROR "polyops: cuBLAS/cuBLASLt not found (CUDA torch normally brings "
    "them: pip install 'nvidia-cublas>=13,<14', or set POLYOPS_CUBLAS_ROOT)")
else()
  message(STATUS "polyops: cuBLAS not found; the cuBLAS slots are left out of this "
    "compile-only build (pip install nvidia-cublas==13.1.1.3 to compile them)")
endif()

# --- FlashInfer (attention slots) ------------------------------------------
include(${CMAKE_CURRENT_LIST_DIR}/flashinfer.cmake)

# Links the CUDA backend into `target` (the Python extension) and extends
# POLYOPS_RPATH (in the caller's scope) so the installed module finds
# libcudart.so.13 / libcublas*.so.13.
function(polyops_add_cuda_backend target)
  file(GLOB _support CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/cuda/runtime/*.cu
    ${CMAKE_SOURCE_DIR}/src/cuda/kernels/*/*.cu)
  add_library(polyops_cuda STATIC ${POLYOPS_CUDA_SOURCES} ${_support})
  target_compile_features(polyops_cuda PUBLIC cuda_std_17 cxx_std_17)
  set_target_properties(polyops_cuda PROPERTIES CUDA_EXTENSIONS OFF CXX_EXTENSIONS OFF)
  target_compile_definitions(polyops_cuda PUBLIC POLYOPS_WITH_CUDA)
  # No --use_fast_math: results must stay within the parity tolerances of the
  # CPU slots (IEEE division, sqrt and exp). nvcc contracts a*b+c into FMA by
  # default (--fmad=true), as torch's own CUDA kernels do.
  target_compile_options(polyops_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-O3 --expt-relaxed-constexpr -Xcompiler=-Wall>
    $<$<COMPILE_LANGUAGE:CXX>:-O3 -Wall -Wextra>)
  target_link_libraries(polyops_cuda PUBLIC polyops_kernels CUDA::cudart)
  if(TARGET polyops_cublas)
    target_link_libraries(polyops_cuda PUBLIC polyops_cublas)
  endif()
  if(POLYOPS_BUILD_FLASHINFER)
    polyops_add_flashinfer(polyops_cuda)
  endif()
  target_link_libraries(${target} PRIVATE polyops_cuda)

  # torch's CUDA wheels put libcudart.so.13 / libcublas*.so.13 in
  # site-packages/nvidia/cu13/lib (torch's own libraries use
  # $ORIGIN/../../nvidia/cu13/lib); CUDA torch has loaded them before
  # polyops._C anyway. A compile-only build (CPU torch) also records the
  # toolkit's and the found cuBLAS's directories so the module imports here.
  set(_rpath "${POLYOPS_RPATH};$ORIGIN/../nvidia/cu13/lib")
  if(TORCH_CUDA_VERSION STREQUAL "")
    list(APPEND _rpath ${CUDAToolkit_LIBRARY_DIR})
    if(TARGET polyops_cublas)
      get_filename_component(_cublas_dir ${POLYOPS_CUBLAS_LIBRARY} DIRECTORY)
      list(APPEND _rpath ${_cublas_dir})
    endif()
  endif()
  list(REMOVE_DUPLICATES _rpath)
  set(POLYOPS_RPATH "${_rpath}" PARENT_SCOPE)
endfunction()
