// Mixed precision: Python's `with torch.autocast(device_type, dtype):` for C++, which the C++
// API lacks. Inside an Autocast scope, the ops autocast lists (convolutions, linear, matmul)
// run in the lower precision on their device while the parameters, their gradients and the
// optimizer stay fp32, so DDP reduces fp32 gradients as usual.
#pragma once

#include <string>

#include <torch/types.h>

namespace ddp {

/// The numeric format of the forward pass: "fp32" (no autocast), "bf16" (autocast to bfloat16
/// on the CPU or a GPU; needs no loss scaling) or "fp16" (autocast to float16; its small
/// gradients need loss scaling: ddp::GradScaler, amp/grad_scaler.h).
enum class Precision { kFp32, kBf16, kFp16 };

/// Parses "fp32", "bf16" or "fp16"; throws InvalidArgument starting with `what` otherwise
/// ("precision: unknown precision 'fp8'; use fp32, bf16 or fp16").
Precision parse_precision(const std::string& text, const std::string& what = "precision");
std::string to_string(Precision precision);

/// Enables autocast for `device`'s type in `precision` until destroyed, then restores the
/// previous state (scopes nest; the cast-weights cache is cleared when the outermost ends).
/// With kFp32 it does nothing. Autocast state is per thread, like Python's. Throws
/// InvalidArgument for fp16 on the CPU with a LibTorch older than 2.4, whose CPU autocast
/// knows bf16 only.
class Autocast {
 public:
  Autocast(torch::Device device, Precision precision);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_;
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

}  // namespace ddp
