# LibTorch's CPU part (libtorch_cpu, libc10) from PyPI's aarch64 torch wheel, for the arm64 build
# (aarch64-linux-gnu.cmake). Workaround, torch 2.15.0's aarch64 wheel: it is a CUDA build, and
# its own TorchConfig.cmake enables CMake's CUDA language, which needs an arm64 CUDA toolkit that
# a cross build does not have; ddp.cpp on arm64 uses LibTorch's CPU ops and Gloo only.
# scripts/arm64-check.sh puts this file where the wheel's was.
get_filename_component(TORCH_INSTALL_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
file(STRINGS "${TORCH_INSTALL_PREFIX}/version.py" _torch_version REGEX "^__version__")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" Torch_VERSION "${_torch_version}")
set(TORCH_INCLUDE_DIRS "${TORCH_INSTALL_PREFIX}/include"
                       "${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include")
if(NOT TARGET torch_cpu)
  add_library(c10 SHARED IMPORTED)
  set_target_properties(c10 PROPERTIES IMPORTED_LOCATION "${TORCH_INSTALL_PREFIX}/lib/libc10.so")
  add_library(torch_cpu SHARED IMPORTED)
  set_target_properties(torch_cpu PROPERTIES
    IMPORTED_LOCATION "${TORCH_INSTALL_PREFIX}/lib/libtorch_cpu.so"
    INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO"
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "c10")
  # --no-as-needed, as LibTorch's own config does: the ops register themselves when it loads.
  add_library(torch INTERFACE IMPORTED)
  set_target_properties(torch PROPERTIES
    INTERFACE_LINK_LIBRARIES "-Wl,--no-as-needed,${TORCH_INSTALL_PREFIX}/lib/libtorch_cpu.so -Wl,--as-needed;torch_cpu"
    INTERFACE_COMPILE_OPTIONS "-D_GLIBCXX_USE_CXX11_ABI=1")
endif()
set(TORCH_LIBRARY "${TORCH_INSTALL_PREFIX}/lib/libtorch_cpu.so")
set(TORCH_LIBRARIES torch)
set(Torch_FOUND TRUE)
