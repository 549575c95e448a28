# Decides whether the CUDA backend is built. MBKIT_CUDA defaults to ON only when both nvcc
# (the CUDA toolkit) and cuDNN are found; a user can force it either way with -DMBKIT_CUDA=ON|OFF.
find_package(CUDAToolkit QUIET)
set(_mbkit_cudnn_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR} /usr/local/cuda)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_mbkit_cudnn_hints}
          PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${_mbkit_cudnn_hints}
             PATH_SUFFIXES lib64 lib)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_mbkit_cudnn_hints}
          PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${_mbkit_cudnn_hints}
             PATH_SUFFIXES lib64 lib)

set(_mbkit_cuda_default OFF)
if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
  set(_mbkit_cuda_default ON)
endif()
option(MBKIT_CUDA "Build the CUDA backend (cuDNN, cuBLAS, NCCL); default ON when nvcc and cuDNN are found"
       ${_mbkit_cuda_default})

if(MBKIT_CUDA)
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR "MBKIT_CUDA=ON but the CUDA toolkit was not found (set CUDAToolkit_ROOT)")
  endif()
  if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
    message(FATAL_ERROR "MBKIT_CUDA=ON but cuDNN (cudnn.h, libcudnn) was not found")
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  enable_language(CUDA)
  # C++20 for .cu files as for the rest. CMake 3.25 (Debian 12) does not know nvcc's flag for it
  # (nvcc has had -std=c++20 since CUDA 12.0) and would refuse the standard at generation.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # CMake fills the cache with nvcc's own default when none is given: 52 (CUDA 12), 75 (CUDA 13).
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES MATCHES "^(52|75)$")
    # Hopper first (the GPUs we measure on), plus PTX so newer devices JIT.
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  add_library(mbkit_cudnn INTERFACE)
  target_include_directories(mbkit_cudnn SYSTEM INTERFACE ${CUDNN_INCLUDE_DIR})
  target_link_libraries(mbkit_cudnn INTERFACE ${CUDNN_LIBRARY})
  set(MBKIT_HAVE_NCCL OFF)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(MBKIT_HAVE_NCCL ON)
    add_library(mbkit_nccl INTERFACE)
    target_include_directories(mbkit_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(mbkit_nccl INTERFACE ${NCCL_LIBRARY})
  endif()
endif()
