// Which optional parts this build has (cmake/OptionalParts.cmake), for tests of those parts:
// DDP_SKIP_WITHOUT(kGzip) at the top of a test skips it, naming the part, where it is not built.
#pragma once

#include <gtest/gtest.h>

#include "ddp_build_config.h"

namespace ddp::test::parts {

#if defined(DDP_HAVE_GZIP)
inline constexpr bool kGzip = true;
#else
inline constexpr bool kGzip = false;
#endif
#if defined(DDP_HAVE_DOWNLOAD)
inline constexpr bool kDownload = true;
#else
inline constexpr bool kDownload = false;
#endif
#if defined(DDP_HAVE_TOML)
inline constexpr bool kToml = true;
#else
inline constexpr bool kToml = false;
#endif
#if defined(DDP_HAVE_TENSORBOARD)
inline constexpr bool kTensorBoard = true;
#else
inline constexpr bool kTensorBoard = false;
#endif
#if defined(DDP_HAVE_PLOT)
inline constexpr bool kPlot = true;
#else
inline constexpr bool kPlot = false;
#endif
#if defined(DDP_HAVE_CAIRO)
inline constexpr bool kCairo = true;
#else
inline constexpr bool kCairo = false;
#endif
#if defined(DDP_HAVE_JPEG)
inline constexpr bool kJpeg = true;
#else
inline constexpr bool kJpeg = false;
#endif
#if defined(DDP_HAVE_PNG)
inline constexpr bool kPng = true;
#else
inline constexpr bool kPng = false;
#endif
#if defined(DDP_HAVE_ONEDNN)
inline constexpr bool kOnednn = true;
#else
inline constexpr bool kOnednn = false;
#endif

}  // namespace ddp::test::parts

#define DDP_SKIP_WITHOUT(part)                                                 \
  if (!::ddp::test::parts::part) {                                             \
    GTEST_SKIP() << "this build has no " #part " (cmake/OptionalParts.cmake)"; \
  }
