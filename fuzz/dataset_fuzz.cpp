// libFuzzer target for the data set readers: the input becomes a CIFAR-10 test batch, or an IDX
// image file and label file (gzip'd or not), and is opened as a data set. Every outcome must be a
// ddp::Error or a valid data set: no crash, no hang, no allocation a forged header asks for.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "ddp/atomic_file.h"
#include "ddp/data/cifar10.h"
#include "ddp/data/idx.h"
#include "ddp/error.h"

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/ddp-fuzz-XXXXXX";
    return std::string(::mkdtemp(tmpl));
  }();
  return dir;
}

void touch_all_images(const ddp::data::Dataset& data) {
  volatile uint32_t sum = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    sum += uint32_t(data.label(i));
    const uint8_t* pixels = data.image(i);
    sum += pixels[0] + pixels[data.shape().bytes() - 1];
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string& dir = scratch_dir();
  const uint8_t mode = data[0] % 2;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (mode == 0) {
      ddp::write_file_atomic(dir + "/test_batch.bin", body);
      ddp::data::Cifar10Dataset cifar(dir, ddp::data::Split::kTest);
      touch_all_images(cifar);
    } else {
      // The first byte after the mode splits the rest into the label file and the image file.
      const size_t split = std::min(body.size(), size_t(uint8_t(body[0])) + 1);
      ::unlink((dir + "/t10k-images-idx3-ubyte.gz").c_str());
      ::unlink((dir + "/t10k-labels-idx1-ubyte.gz").c_str());
      ddp::write_file_atomic(dir + "/t10k-labels-idx1-ubyte", body.substr(1, split - 1));
      ddp::write_file_atomic(dir + "/t10k-images-idx3-ubyte", body.substr(split));
      ddp::data::IdxDataset idx(dir, ddp::data::Split::kTest, "fuzz");
      touch_all_images(idx);
    }
  } catch (const ddp::Error&) {
    // The expected outcome for almost every input.
  }
  return 0;
}
