# Workaround, PyPI's torch wheels (CUDA builds; 2.14.1 on CUDA 13.0): their CMake package
# (Caffe2's public/cuda.cmake) demands a CUDA toolkit, nvcc included, to configure any program
# that links LibTorch, even one with no CUDA code, and most machines have none. NVIDIA ships the
# toolkit's parts as wheels (cuda-toolkit[nvcc,cccl] at the version torch requires, which
# scripts/setup.sh installs beside torch), laid out as site-packages/nvidia/cu13/{bin,include,
# lib,nvvm} (CUDA 13's layout; CUDA 12's wheels had one folder per part, which this does not
# handle) with versioned library names only (libcudart.so.13), where FindCUDA looks for
# lib64/libcudart.so. ddp_wheel_cuda_toolkit() makes a toolkit-shaped folder of links to those
# files and points CMake's CUDA at it. Installed with the package, so a program that
# find_package(ddp)s does the same.

# ddp_wheel_link_options(TORCH_INSTALL_PREFIX OUT_VAR): OUT_VAR = the linker options that make
# whatever links LibTorch, and the program at run time, look for NCCL, cuDNN and the CUDA runtime
# in the nvidia-* wheels beside torch first. Workaround, PyPI's torch wheels (CUDA builds, 2.11
# and 2.14.1 at least): libtorch_cuda.so finds them there through its own RPATH, but the linker
# looks in a CUDA toolkit's folders and finds an older NCCL there (undefined ncclCommGrow).
function(ddp_wheel_link_options torch_install_prefix out_var)
  file(GLOB dirs LIST_DIRECTORIES true "${torch_install_prefix}/../nvidia/*/lib")
  set(options "")
  if(dirs)
    list(JOIN dirs ":" joined)
    set(options "LINKER:-rpath-link,${joined}" "LINKER:-rpath,${joined}")
  endif()
  set(${out_var} "${options}" PARENT_SCOPE)
endfunction()

# ddp_wheel_cuda_toolkit(TORCH_CMAKE_DIR OUT_DIR): where the folder holding TorchConfig.cmake
# (TORCH_CMAKE_DIR) is a wheel's (site-packages/torch/share/cmake/Torch) and the nvcc wheel is
# installed beside it, makes OUT_DIR a toolkit of links and sets CMAKE_CUDA_COMPILER,
# CUDA_TOOLKIT_ROOT_DIR and CUDAToolkit_ROOT in the caller's scope. Does nothing otherwise.
function(ddp_wheel_cuda_toolkit torch_cmake_dir out_dir)
  get_filename_component(site_packages "${torch_cmake_dir}/../../../.." ABSOLUTE)
  file(GLOB wheel_nvcc "${site_packages}/nvidia/cu*/bin/nvcc")
  if(NOT wheel_nvcc)
    return()
  endif()
  list(GET wheel_nvcc 0 wheel_nvcc)
  get_filename_component(wheel_root "${wheel_nvcc}/../.." ABSOLUTE)
  # nvcc finds its own parts relative to the path it was called by (bin/..), so bin/ is a real
  # folder of links; lib64/ gets every library under its unversioned name too.
  file(REMOVE_RECURSE "${out_dir}")
  file(MAKE_DIRECTORY "${out_dir}/bin" "${out_dir}/lib64")
  foreach(sub include nvvm)
    file(CREATE_LINK "${wheel_root}/${sub}" "${out_dir}/${sub}" SYMBOLIC)
  endforeach()
  file(GLOB tools "${wheel_root}/bin/*")
  foreach(tool IN LISTS tools)
    get_filename_component(name "${tool}" NAME)
    file(CREATE_LINK "${tool}" "${out_dir}/bin/${name}" SYMBOLIC)
  endforeach()
  file(GLOB libraries "${wheel_root}/lib/lib*")
  foreach(library IN LISTS libraries)
    get_filename_component(name "${library}" NAME)
    file(CREATE_LINK "${library}" "${out_dir}/lib64/${name}" SYMBOLIC)
    string(REGEX REPLACE "\\.so\\..*$" ".so" unversioned "${name}")
    if(NOT EXISTS "${out_dir}/lib64/${unversioned}")
      file(CREATE_LINK "${library}" "${out_dir}/lib64/${unversioned}" SYMBOLIC)
    endif()
  endforeach()
  # nvcc.profile names $(TOP)/lib (cuda-toolkit 13.2's wheels) where FindCUDA looks in lib64.
  file(CREATE_LINK "lib64" "${out_dir}/lib" SYMBOLIC)
  set(CMAKE_CUDA_COMPILER "${out_dir}/bin/nvcc" PARENT_SCOPE)
  set(CUDA_TOOLKIT_ROOT_DIR "${out_dir}" PARENT_SCOPE)
  set(CUDAToolkit_ROOT "${out_dir}" PARENT_SCOPE)
  message(STATUS "ddp: CUDA toolkit from the wheels beside torch (${wheel_root})")
endfunction()
