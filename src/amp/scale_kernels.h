// The two kernels a GradScaler runs, LibTorch's where it has them for the tensors' device, else
// the same arithmetic from plain tensor ops: LibTorch before 2.3 (Debian 12's 1.13.1) has
// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_ for CUDA only.
#pragma once

#include <cmath>
#include <vector>

#include <ATen/ATen.h>

#include "torch_compat.h"

namespace ddp::amp {

// Each of `grads` times `inv_scale` in place; `found_inf` (0-dim float) set to 1 when any of
// them held an inf or NaN before.
inline void unscale_composite(std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                              const at::Tensor& inv_scale) {
  for (at::Tensor& g : grads) {
    if (!at::isfinite(g).all().item<bool>()) found_inf.fill_(1.0);
    g.mul_(inv_scale);
  }
}

// After a step: `scale` times `backoff` when `found_inf`, else times `growth` once `interval`
// clean steps have passed (if that stays finite); `tracker` counts the clean steps.
inline void update_scale_composite(at::Tensor& scale, at::Tensor& tracker,
                                   const at::Tensor& found_inf, double growth, double backoff,
                                   int64_t interval) {
  const float current = scale.item<float>();
  if (found_inf.item<float>() != 0) {
    scale.fill_(double(float(current * backoff)));
    tracker.fill_(0);
    return;
  }
  const int64_t clean = tracker.item<int64_t>() + 1;
  if (clean == interval) {
    const float grown = float(current * growth);
    if (std::isfinite(grown)) scale.fill_(double(grown));
    tracker.fill_(0);
  } else {
    tracker.fill_(clean);
  }
}

inline bool has_kernels(const at::Device& device) {
  return !device.is_cpu() || DDP_TORCH_AT_LEAST(2, 3);
}

inline void unscale(std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                    const at::Tensor& inv_scale) {
  if (has_kernels(found_inf.device())) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  } else {
    unscale_composite(grads, found_inf, inv_scale);
  }
}

inline void update_scale(at::Tensor& scale, at::Tensor& tracker, const at::Tensor& found_inf,
                         double growth, double backoff, int64_t interval) {
  if (has_kernels(scale.device())) {
    at::_amp_update_scale_(scale, tracker, found_inf, growth, backoff, interval);
  } else {
    update_scale_composite(scale, tracker, found_inf, growth, backoff, interval);
  }
}

}  // namespace ddp::amp
