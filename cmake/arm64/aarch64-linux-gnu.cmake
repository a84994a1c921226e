# CMake toolchain: ddp.cpp for arm64 Linux (AWS Graviton, NVIDIA Grace), built on an x86-64
# machine by Debian's g++-aarch64-linux-gnu against a Debian arm64 root (-DDDP_ARM64_ROOT=...)
# that holds the arm64 libraries and, under opt/torch, the CPU part of PyPI's aarch64 torch
# wheel. Test programs run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR, and binfmt for the
# processes they start). scripts/arm64-check.sh makes the root and uses this file.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# try_compile() projects read this file again: hand them the root too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES DDP_ARM64_ROOT)
if(NOT DDP_ARM64_ROOT OR NOT EXISTS "${DDP_ARM64_ROOT}/usr/include/aarch64-linux-gnu")
  message(FATAL_ERROR "DDP_ARM64_ROOT ('${DDP_ARM64_ROOT}') is not a Debian arm64 root with "
                      "libc6-dev: scripts/arm64-check.sh makes one")
endif()
set(CMAKE_SYSROOT "${DDP_ARM64_ROOT}")
set(CMAKE_FIND_ROOT_PATH "${DDP_ARM64_ROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # cmake, protoc, python: the build machine's
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${DDP_ARM64_ROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${DDP_ARM64_ROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${DDP_ARM64_ROOT}/usr/share/pkgconfig")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L "${DDP_ARM64_ROOT}")  # QEMU_CPU: which CPU
set(Torch_DIR "${DDP_ARM64_ROOT}/opt/torch/share/cmake/Torch" CACHE PATH "")
