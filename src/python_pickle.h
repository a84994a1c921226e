// Python's pickle of a value (dicts, lists, tuples, strings, numbers, None), as
// plain Python objects: LibTorch's pickler with typed dicts left untagged, so that pickle.load
// reads it without importing torch's helpers. Checkpoints wrap it in torch.save's zip archive;
// PyTorch's flight-recorder dumps are this alone.
#pragma once

#include <vector>

#include <ATen/core/ivalue.h>

namespace ddp {

/// With `tensors`, a value may hold tensors too: the pickle then refers to them by index, and
/// `tensors` receives their data, for torch.save's archive (checkpoint.cpp).
std::vector<char> python_pickle(const c10::IValue& value,
                                std::vector<at::Tensor>* tensors = nullptr);

}  // namespace ddp
