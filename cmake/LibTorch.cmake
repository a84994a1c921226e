# Finds LibTorch and adapts the build to it (included by CMakeLists.txt): which LibTorch, the C++
# standard its headers need, what it lacks and how that is made up for, and which c10d backends
# it has. Sets DDP_PYTHON, DDP_NEEDS_MPI, DDP_EXTRA_LIBRARIES, DDP_GLOO_INCLUDE_DIR and
# DDP_TORCH_LINK_OPTIONS, and DDP_NCCL_INCLUDE_DIR where LibTorch has c10d's NCCL backend.

# By default PyPI's torch in the project's .venv (scripts/setup.sh installs it there);
# -DTorch_DIR=... or -DCMAKE_PREFIX_PATH=/path/to/libtorch (pytorch.org's zip) win over it, and
# -DDDP_LIBTORCH_FROM_VENV=OFF leaves it out (Debian's libtorch-dev: setup.sh --libtorch debian).
set(DDP_VENV_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python)
if(EXISTS ${DDP_VENV_PYTHON})
  option(DDP_LIBTORCH_FROM_VENV "Look for LibTorch in .venv's torch" ON)
else()
  option(DDP_LIBTORCH_FROM_VENV "Look for LibTorch in .venv's torch" OFF)
endif()
if(DDP_LIBTORCH_FROM_VENV AND NOT Torch_DIR)
  execute_process(COMMAND ${DDP_VENV_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE _ddp_venv_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _ddp_venv_result ERROR_QUIET)
  if(_ddp_venv_result EQUAL 0)
    list(APPEND CMAKE_PREFIX_PATH ${_ddp_venv_prefix})
  endif()
endif()
# A CUDA build of LibTorch enables CMake's CUDA language, which needs a toolkit with nvcc: the one
# NVIDIA's wheels put beside torch (scripts/setup.sh installs it, matched to torch's CUDA), else
# the machine's. -DCMAKE_CUDA_COMPILER=... wins over both.
include(${CMAKE_CURRENT_LIST_DIR}/WheelCudaToolkit.cmake)
if(NOT CMAKE_CUDA_COMPILER)
  if(Torch_DIR)
    ddp_wheel_cuda_toolkit("${Torch_DIR}" "${PROJECT_BINARY_DIR}/cuda-toolkit")
  elseif(_ddp_venv_prefix)
    ddp_wheel_cuda_toolkit("${_ddp_venv_prefix}/Torch" "${PROJECT_BINARY_DIR}/cuda-toolkit")
  endif()
endif()
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
find_package(Torch REQUIRED)
message(STATUS "ddp: LibTorch ${Torch_VERSION} from ${Torch_DIR}")

# The Python whose torch the tests and benches compare against: .venv's with LibTorch from there,
# else python3 (Debian's, with python3-torch).
if(DDP_LIBTORCH_FROM_VENV)
  set(_ddp_default_python ${DDP_VENV_PYTHON})
else()
  find_program(_ddp_default_python NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
endif()
set(DDP_PYTHON ${_ddp_default_python} CACHE FILEPATH "Python with torch: the reference implementation")

# C++17, or C++20 where LibTorch's headers demand it (PyTorch 2.10 and later refuse anything
# older in torch/all.h); asked of the headers themselves rather than by version number.
set(CMAKE_CXX_STANDARD 17)
find_file(DDP_TORCH_ALL_H torch/csrc/api/include/torch/all.h PATHS ${TORCH_INCLUDE_DIRS}
          NO_DEFAULT_PATH)
if(DDP_TORCH_ALL_H)
  file(STRINGS ${DDP_TORCH_ALL_H} _ddp_cxx20 REGEX "__cplusplus < 202002L")
  if(_ddp_cxx20)
    set(CMAKE_CXX_STANDARD 20)
  endif()
endif()
message(STATUS "ddp: C++${CMAKE_CXX_STANDARD}")

# Whatever links libddp (DDP_TORCH_LINK_OPTIONS) finds the wheels' NCCL first (WheelCudaToolkit).
ddp_wheel_link_options("${TORCH_INSTALL_PREFIX}" DDP_TORCH_LINK_OPTIONS)

# Workaround, PyPI's torch wheels (2.11 and 2.14.1 at least): c10d's ProcessGroupGloo.hpp
# includes Gloo's headers, which the wheel does not ship. Gloo's headers from elsewhere (Debian's
# libgloo-dev) serve: ddp.cpp names Gloo's types only through shared_ptr and calls LibTorch's
# functions, so it depends on no Gloo internals; Gloo's library is not linked.
find_path(DDP_GLOO_INCLUDE_DIR gloo/algorithm.h HINTS ${TORCH_INCLUDE_DIRS}
          DOC "Gloo's headers, for c10d's ProcessGroupGloo.hpp")
if(NOT DDP_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "LibTorch at ${Torch_DIR} ships no Gloo headers (gloo/algorithm.h), which "
                      "c10d's ProcessGroupGloo.hpp includes: install Debian's libgloo-dev "
                      "(scripts/setup.sh does) or pass -DDDP_GLOO_INCLUDE_DIR=/dir/with/gloo")
endif()

# A LibTorch built with c10d's MPI backend (Debian 13's 2.6 is) declares USE_C10D_MPI, and its
# ProcessGroupMPI.hpp includes <mpi.h>: then MPI's headers are needed (Debian: mpi-default-dev).
set(DDP_EXTRA_LIBRARIES "")
set(DDP_NEEDS_MPI OFF)
if(TARGET torch_cpu)
  get_target_property(_ddp_torch_definitions torch_cpu INTERFACE_COMPILE_DEFINITIONS)
  if("USE_C10D_MPI" IN_LIST _ddp_torch_definitions)
    find_package(MPI COMPONENTS CXX)
    if(NOT MPI_CXX_FOUND)
      message(FATAL_ERROR "LibTorch was built with the MPI backend, so MPI's headers are needed: "
                          "install mpi-default-dev (scripts/setup.sh does)")
    endif()
    list(APPEND DDP_EXTRA_LIBRARIES MPI::MPI_CXX)
    set(DDP_NEEDS_MPI ON)
    message(STATUS "ddp: LibTorch has c10d's MPI backend (--backend mpi)")
  endif()
endif()

# A CUDA build of LibTorch (an official CUDA download, or the torch Python package's) has the
# torch_cuda target, which declares USE_C10D_NCCL to whatever links it: then the NCCL code paths
# (src/torch_compat.h, src/process_group/) are compiled, and --device cuda / --backend nccl work.
if(TARGET torch_cuda)
  get_target_property(_ddp_cuda_definitions torch_cuda INTERFACE_COMPILE_DEFINITIONS)
  if("USE_C10D_NCCL" IN_LIST _ddp_cuda_definitions)
    message(STATUS "ddp: LibTorch has CUDA and c10d's NCCL backend (--device cuda, --backend nccl)")
    # Workaround, PyPI's torch wheels (2.14.1): c10d's ProcessGroupNCCL.hpp includes <nccl.h>,
    # which torch/include lacks but the nvidia-nccl wheel beside torch has: the NCCL LibTorch runs
    # with (a CUDA toolkit's own nccl.h can be older), and the only one where there is no toolkit.
    find_path(DDP_NCCL_INCLUDE_DIR nccl.h HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include"
              DOC "NCCL's header, for c10d's ProcessGroupNCCL.hpp")
    if(NOT DDP_NCCL_INCLUDE_DIR)
      message(FATAL_ERROR "LibTorch at ${Torch_DIR} has c10d's NCCL backend, but no nccl.h was "
                          "found: pass -DDDP_NCCL_INCLUDE_DIR=/dir/with/nccl.h")
    endif()
  else()
    message(STATUS "ddp: LibTorch has CUDA but not c10d's NCCL backend (--device cuda with gloo)")
  endif()
else()
  message(STATUS "ddp: LibTorch is CPU-only (gloo)")
endif()
