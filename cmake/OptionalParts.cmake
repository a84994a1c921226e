# The optional parts of ddp.cpp (included by CMakeLists.txt before LibTorch). Each has a cache
# variable DDP_WITH_<PART>: AUTO (the default: built where its dependencies are found), ON
# (required: configuring fails, saying what to install, when they are missing) or OFF (not
# built; what needs it says so at run time). scripts/setup.sh asks for every part (ON); a build
# against nothing but LibTorch and GoogleTest turns them all OFF. Each part sets DDP_HAVE_<PART>,
# which cmake/build_config.h.in hands to the code, and the summary is printed at configure time.

set(DDP_OPTIONAL_PARTS "")

# ddp_optional_part(PART "what it is for"): the cache variable DDP_WITH_<PART>.
function(ddp_optional_part part doc)
  set(DDP_WITH_${part} AUTO CACHE STRING "${doc}: AUTO, ON or OFF")
  set_property(CACHE DDP_WITH_${part} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${DDP_WITH_${part}}" value)
  if(NOT value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "DDP_WITH_${part} is '${DDP_WITH_${part}}'; it takes AUTO, ON or OFF")
  endif()
  set(DDP_WANT_${part} ${value} PARENT_SCOPE)
endfunction()

# ddp_decide_part(PART FOUND "what is missing and how to get it"): sets DDP_HAVE_<PART>.
function(ddp_decide_part part found missing)
  if(DDP_WANT_${part} STREQUAL "OFF")
    set(have OFF)
  elseif(found)
    set(have ON)
  elseif(DDP_WANT_${part} STREQUAL "ON")
    message(FATAL_ERROR "DDP_WITH_${part}=ON, but ${missing}; or configure with "
                        "-DDDP_WITH_${part}=OFF (or AUTO) to build without it")
  else()
    set(have OFF)
  endif()
  set(DDP_HAVE_${part} ${have} PARENT_SCOPE)
  set(DDP_OPTIONAL_PARTS "${DDP_OPTIONAL_PARTS} ${part}=${have}" PARENT_SCOPE)
endfunction()

ddp_optional_part(GZIP "gzip'd IDX files (MNIST, Fashion-MNIST) through zlib")
if(NOT DDP_WANT_GZIP STREQUAL "OFF")
  find_package(ZLIB QUIET)
endif()
ddp_decide_part(GZIP "${ZLIB_FOUND}" "zlib was not found (Debian: zlib1g-dev)")

# JPEG and PNG decoding (ddp/data/image.h) through pkg-config, the way Debian ships both.
ddp_optional_part(JPEG "JPEG decoding through libjpeg-turbo's TurboJPEG")
ddp_optional_part(PNG "PNG decoding through libspng")
if(NOT DDP_WANT_JPEG STREQUAL "OFF" OR NOT DDP_WANT_PNG STREQUAL "OFF")
  find_package(PkgConfig QUIET)
endif()
if(PkgConfig_FOUND AND NOT DDP_WANT_JPEG STREQUAL "OFF")
  pkg_check_modules(TURBOJPEG QUIET IMPORTED_TARGET libturbojpeg)
endif()
if(NOT TURBOJPEG_FOUND AND NOT DDP_WANT_JPEG STREQUAL "OFF")
  # Without pkg-config's file (a machine without pkg-config, or a copy of the library given as
  # -DDDP_TURBOJPEG_INCLUDE_DIR=… -DDDP_TURBOJPEG_LIBRARY=…, as scripts/gpu-check.sh does): the
  # header and the library themselves, under the same target name.
  find_path(DDP_TURBOJPEG_INCLUDE_DIR turbojpeg.h)
  find_library(DDP_TURBOJPEG_LIBRARY NAMES turbojpeg)
  if(DDP_TURBOJPEG_INCLUDE_DIR AND DDP_TURBOJPEG_LIBRARY)
    add_library(PkgConfig::TURBOJPEG INTERFACE IMPORTED)
    target_include_directories(PkgConfig::TURBOJPEG INTERFACE "${DDP_TURBOJPEG_INCLUDE_DIR}")
    target_link_libraries(PkgConfig::TURBOJPEG INTERFACE "${DDP_TURBOJPEG_LIBRARY}")
    set(TURBOJPEG_FOUND ON)
  endif()
endif()
ddp_decide_part(JPEG "${TURBOJPEG_FOUND}"
                "libturbojpeg was not found through pkg-config (Debian: pkg-config, libturbojpeg0-dev)")
if(PkgConfig_FOUND AND NOT DDP_WANT_PNG STREQUAL "OFF")
  pkg_check_modules(SPNG QUIET IMPORTED_TARGET spng)
endif()
ddp_decide_part(PNG "${SPNG_FOUND}"
                "libspng was not found through pkg-config (Debian: pkg-config, libspng-dev)")

ddp_optional_part(DOWNLOAD "ddp-train --download: libcurl, libarchive and OpenSSL's MD5")
if(NOT DDP_WANT_DOWNLOAD STREQUAL "OFF")
  find_package(CURL QUIET)
  find_package(LibArchive QUIET)
  find_package(OpenSSL QUIET COMPONENTS Crypto)
endif()
set(_ddp_found OFF)
if(CURL_FOUND AND LibArchive_FOUND AND OpenSSL_FOUND)
  set(_ddp_found ON)
endif()
ddp_decide_part(DOWNLOAD ${_ddp_found}
                "libcurl, libarchive or OpenSSL was not found (Debian: libcurl4-openssl-dev, libarchive-dev, libssl-dev)")

ddp_optional_part(TOML "ddp-train --config FILE.toml through toml++")
if(NOT DDP_WANT_TOML STREQUAL "OFF")
  find_package(tomlplusplus QUIET)
endif()
ddp_decide_part(TOML "${tomlplusplus_FOUND}" "toml++ was not found (Debian: libtomlplusplus-dev)")

# Before LibTorch: PyPI's torch's CMake package defines protobuf::libprotobuf as an empty dummy
# target unless it exists already, and the TensorBoard writer would then link no protobuf.
ddp_optional_part(TENSORBOARD "ddp-train --tensorboard: event files through protobuf")
if(NOT DDP_WANT_TENSORBOARD STREQUAL "OFF")
  find_package(Protobuf QUIET)
endif()
set(_ddp_found OFF)
if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE)
  set(_ddp_found ON)
endif()
ddp_decide_part(TENSORBOARD ${_ddp_found}
                "protobuf or protoc was not found (Debian: libprotobuf-dev, protobuf-compiler)")

# Through pkg-config: Debian 12's PLplot 5.15.0 CMake package fails unless the Tcl bindings
# (libtclmatrix) are installed as well.
ddp_optional_part(PLOT "ddp-train plot: PNG and SVG curves through PLplot")
if(NOT DDP_WANT_PLOT STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(PLPLOT QUIET IMPORTED_TARGET plplot)
  endif()
endif()
ddp_decide_part(PLOT "${PLPLOT_FOUND}"
                "PLplot was not found through pkg-config (Debian: pkg-config, libplplot-dev, plplot-driver-cairo)")

ddp_optional_part(CAIRO "ddp-train preview: image grids with class names as PNG through cairo")
if(NOT DDP_WANT_CAIRO STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(CAIRO QUIET IMPORTED_TARGET cairo)
  endif()
endif()
ddp_decide_part(CAIRO "${CAIRO_FOUND}"
                "cairo was not found through pkg-config (Debian: pkg-config, libcairo2-dev)")

# oneDNN's own API, version 2.x (Debian 12's libdnnl-dev, whose CMake package needs OpenCL's:
# ocl-icd-opencl-dev), for the Winograd convolutions LibTorch never asks for and the blocked
# layers (models/onednn_conv2d.h, models/onednn_max_pool2d.h); without it Net runs on LibTorch's
# own convolutions and pools. oneDNN 3.0 replaced the API these layers are written against.
ddp_optional_part(ONEDNN "Net's Winograd and blocked layers through oneDNN 2.x's own API")
if(NOT DDP_WANT_ONEDNN STREQUAL "OFF")
  find_package(dnnl CONFIG QUIET)
endif()
set(_ddp_found OFF)
if(dnnl_FOUND AND dnnl_VERSION VERSION_LESS 3)
  set(_ddp_found ON)
endif()
ddp_decide_part(ONEDNN ${_ddp_found}
                "oneDNN 2.x was not found (Debian 12: libdnnl-dev and ocl-icd-opencl-dev; found: '${dnnl_VERSION}')")
