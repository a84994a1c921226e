// The environment variables that only ddp.cpp's own programs read, named once as
// include/ddp/environment.h names the library's: ddp-train's fault injection and the checkpoint
// fuzzer's seed folder. tests/shape/check_shape.py allows a name as a literal only in the two.
#pragma once

namespace ddp::env {

/// ddp-train's fault injection for reliability tests: KIND@STEP[:RANK] (nan, throw, hang, exit)
/// or slow@STEP:RANK:MS; see apps/ddp-train/train/fault.h.
inline constexpr char kFault[] = "DDP_FAULT";
/// Where the checkpoint fuzzer (fuzz/checkpoint_fuzz.cpp) first writes its seed inputs.
inline constexpr char kFuzzSeedDir[] = "DDP_FUZZ_SEED_DIR";

}  // namespace ddp::env
