// The format of checkpoints and state dicts on disk, as torch.save writes and torch.load reads
// them: Python's pickle of plain values (pickle_format.cpp). PyTorch's flight-recorder dumps are
// the pickle alone (debug/flight_recorder_pytorch.cpp). Internal to libddp.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/torch.h>

namespace ddp {

/// Python's pickle of a value (dicts, lists, tuples, strings, numbers, None), as plain Python
/// objects: LibTorch's pickler with typed dicts left untagged, so that pickle.load reads it
/// without importing torch's helpers. With `tensors`, a value may hold tensors too: the pickle
/// then refers to them by index, and `tensors` receives their data, for torch.save's archive.
std::vector<char> python_pickle(const c10::IValue& value,
                                std::vector<at::Tensor>* tensors = nullptr);

/// torch.save's zip archive of `value`, which every torch.load accepts (weights_only included).
std::vector<char> pickle_for_python(const c10::IValue& value);

/// Any pickled file: ours (pickle_for_python), or Python's torch.save of a dict or state_dict.
/// Throws IoError when it cannot be opened, DataError when it is not such a file.
c10::IValue load_pickle(const std::string& path);

/// Throws DataError, naming `path` and `name`, when `t`'s sizes and strides reach past its
/// storage (a forged file: the unpickler takes them as written).
void check_fits_storage(const torch::Tensor& t, const std::string& path, const std::string& name);

/// `value` as named tensors, each checked to lie within its storage; throws DataError naming
/// `path` and `what` otherwise.
std::map<std::string, torch::Tensor> tensors_of(const c10::IValue& value, const std::string& path,
                                                const std::string& what);

}  // namespace ddp
