// The checkpoint files' format: torch.save's zip archive around a pickle of plain dicts, read back
// with LibTorch's unpickler behind pickle_guard's checks, with LibTorch 1.13's gaps made up for.
#include "checkpoint/pickle_format.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <tuple>

#include <c10/util/StringUtil.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include "checkpoint/pickle_guard.h"
#include "ddp/error.h"
#include "message_text.h"

namespace ddp {

std::vector<char> python_pickle(const c10::IValue& value, std::vector<at::Tensor>* tensors) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { pickled.insert(pickled.end(), bytes, bytes + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  if (tensors != nullptr) *tensors = pickler.tensorData();
  return pickled;
}

namespace {

// LibTorch 1.13's unpickler turns collections.OrderedDict into None (it expects one only as a
// tensor's backward hooks) and has no SETITEM, so Python's torch.save(module.state_dict()) —
// an OrderedDict with a _metadata attribute — does not load with torch::pickle_load. This
// rewrites that one, well-known shape of pickle: the OrderedDict constructions become plain
// empty dicts and the trailing BUILD of _metadata is dropped. Returns "" when it is not that
// shape.
std::string rewrite_python_state_dict_pickle(std::string pkl) {
  const std::string head = std::string(
      "\x80\x02"
      "ccollections\nOrderedDict\nq\x00)R",
      31);
  if (pkl.compare(0, head.size(), head) != 0) return "";
  const size_t meta = pkl.rfind(std::string("X\x09\x00\x00\x00_metadata", 14));
  if (meta != std::string::npos) {
    size_t start = std::string::npos;
    if (meta >= 3 && pkl[meta - 3] == '}' && pkl[meta - 2] == 'q') start = meta - 3;
    if (meta >= 6 && pkl[meta - 6] == '}' && pkl[meta - 5] == 'r') start = meta - 6;
    if (start == std::string::npos) return "";
    pkl.resize(start);
    pkl += '.';  // STOP: the dict of tensors is the result
  }
  pkl.replace(2, head.size() - 2, 1, '}');
  const std::string again("h\x00)R", 4);  // BINGET 0 (the OrderedDict class), (), REDUCE
  for (size_t at = pkl.find(again); at != std::string::npos; at = pkl.find(again, at + 1)) {
    pkl.replace(at, again.size(), 1, '}');
  }
  return pkl;
}

// LibTorch 1.13's unpickler sizes each storage by the element count the pickle states, not by
// the record it read from the zip, so a forged count gives a tensor that reads past its buffer
// (found by fuzz/checkpoint_fuzz.cpp: a read of the null page inside copy_ for an empty record).
// `record_bytes` maps each buffer read from the archive to its size; a storage the unpickler
// allocated itself is not in it and is sized right.
void check_storages_fit_records(const c10::IValue& value,
                                const std::map<const void*, size_t>& record_bytes) {
  value.visit([&](const c10::IValue& v) {
    if (!v.isTensor()) return false;  // look inside
    const torch::Tensor& t = v.toTensor();
    if (!t.defined() || !t.has_storage()) return true;
    const auto record = record_bytes.find(t.storage().data_ptr().get());
    if (record != record_bytes.end() && record->second < t.storage().nbytes()) {
      throw Error(c10::str("a tensor's storage claims ", t.storage().nbytes(),
                           " bytes but its record in the archive holds ", record->second));
    }
    return true;
  });
}

// Unpickles the archive at `path` (a torch.save / pickle_save zip: data.pkl, tensors under
// data/), after `rewrite` of the pickle bytes ("" from it: not readable this way).
// Read from the file, not through torch::pickle_load(bytes): in LibTorch 1.13 that one reads
// the zip through an in-memory adapter without bounds checks, and a forged zip header makes it
// read past the buffer (found by fuzz/checkpoint_fuzz.cpp); the file adapter clamps every read.
c10::IValue unpickle_archive(const std::string& path,
                             const std::function<std::string(std::string)>& rewrite) {
  caffe2::serialize::PyTorchStreamReader zip(path);
  at::DataPtr data;
  size_t size = 0;
  std::tie(data, size) = zip.getRecord("data.pkl");
  const std::string pkl = rewrite(std::string(static_cast<const char*>(data.get()), size));
  if (pkl.empty()) throw Error("not a torch.save'd state_dict");
  const std::string problem = pickle_framing_problem(pkl);
  if (!problem.empty()) throw Error("data.pkl is damaged: " + problem);
  size_t pos = 0;
  std::map<const void*, size_t> record_bytes;
  torch::jit::Unpickler unpickler(
      [&](char* buf, size_t len) {
        const size_t n = std::min(len, pkl.size() - pos);
        std::memcpy(buf, pkl.data() + pos, n);
        pos += n;
        return n;
      },
      nullptr, nullptr,
      [&](const std::string& name) {
        at::DataPtr record;
        size_t record_size = 0;
        std::tie(record, record_size) = zip.getRecord("data/" + name);
        record_bytes[record.get()] = record_size;
        return record;
      },
      c10::nullopt);
  c10::IValue value = unpickler.parse_ivalue();
  check_storages_fit_records(value, record_bytes);
  return value;
}

}  // namespace

// Any pickled file: ours (pickle_for_python), or Python's torch.save of a dict or state_dict.
c10::IValue load_pickle(const std::string& path) {
  if (!std::ifstream(path))
    throw IoError(c10::str("cannot open ", path, ": ", std::strerror(errno)));
  try {
    return unpickle_archive(path, [](std::string pkl) { return pkl; });
  } catch (const std::exception& first) {
    try {
      return unpickle_archive(path, rewrite_python_state_dict_pickle);
    } catch (const std::exception&) {
      throw DataError(
          c10::str(path, ": not a readable checkpoint or state dict (", first_line(first.what()),
                   "); the file is truncated or was not written by ddp.cpp or torch.save"));
    }
  }
}

// A tensor whose sizes and strides reach past its storage (a forged file: the unpickler takes
// them as written) would be read out of bounds; refuse it.
void check_fits_storage(const torch::Tensor& t, const std::string& path, const std::string& name) {
  if (!t.has_storage() || t.numel() == 0) return;
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0)
      throw DataError(c10::str(path, ": tensor ", name, " has a negative stride"));
    last += (t.size(d) - 1) * t.stride(d);
  }
  const auto needed = uint64_t(last + 1) * uint64_t(t.element_size());
  if (t.storage_offset() < 0 || needed > t.storage().nbytes()) {
    throw DataError(c10::str(path, ": tensor ", name, " of shape ", t.sizes(), " needs ", needed,
                             " bytes but its storage holds ", t.storage().nbytes(),
                             "; the file is damaged"));
  }
}

std::map<std::string, torch::Tensor> tensors_of(const c10::IValue& value, const std::string& path,
                                                const std::string& what) {
  if (!value.isGenericDict())
    throw DataError(c10::str(path, ": ", what, " is not a dict of tensors"));
  std::map<std::string, torch::Tensor> out;
  for (const auto& kv : value.toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor()) {
      throw DataError(c10::str(path, ": ", what, " holds something other than named tensors"));
    }
    const torch::Tensor& t = kv.value().toTensor();
    check_fits_storage(t, path, kv.key().toStringRef());
    out[kv.key().toStringRef()] = t;
  }
  return out;
}

// torch::pickle_save's zip archive, but with plain dicts: pickle_save tags each typed dict with
// torch.jit._pickle.restore_type_tag, a global that Python's torch.load refuses by default from
// 2.6 on (weights_only=True). Untagged, the file is only dicts, strings, ints and tensors, which
// every torch.load accepts. The same calls exist in LibTorch 1.13 and 2.x.
std::vector<char> pickle_for_python(const c10::IValue& value) {
  std::vector<at::Tensor> tensors;
  const std::vector<char> pickled = python_pickle(value, &tensors);
  std::vector<char> archive;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
      const char* b = static_cast<const char*>(bytes);
      archive.insert(archive.end(), b, b + size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), tensors, writer);
  }  // the writer's destructor writes the zip's central directory
  return archive;
}

}  // namespace ddp
