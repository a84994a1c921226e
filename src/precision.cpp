#include "ddp/precision.h"

#include <ATen/autocast_mode.h>
#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "torch_compat.h"

namespace ddp {

Precision parse_precision(const std::string& text, const std::string& flag) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "bf16") return Precision::kBf16;
  if (text == "fp16") return Precision::kFp16;
  throw InvalidArgument(c10::str(flag, ": unknown precision '", text, "'; use fp32, bf16 or fp16"));
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp32:
      break;
  }
  return "fp32";
}

Autocast::Autocast(torch::Device device, Precision precision) : device_type_(device.type()) {
  if (precision == Precision::kFp32) return;
  if (precision == Precision::kFp16 && device.is_cpu() && !DDP_TORCH_AT_LEAST(2, 4)) {
    throw InvalidArgument(
        "precision fp16 on the CPU needs LibTorch 2.4 or later (this one's CPU autocast knows "
        "bf16 only): use bf16, or a GPU");
  }
  const at::ScalarType dtype = precision == Precision::kFp16 ? at::kHalf : at::kBFloat16;
  active_ = true;
  was_enabled_ = compat::autocast_enabled(device_type_);
  previous_dtype_ = compat::autocast_dtype(device_type_);
  compat::set_autocast(device_type_, true, dtype);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!active_) return;
  // Casts of the weights are cached for the scope (one cast per weight per forward); drop them
  // when the outermost scope ends, as torch.autocast does, or they pin stale copies.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast(device_type_, was_enabled_, previous_dtype_);
}

}  // namespace ddp
