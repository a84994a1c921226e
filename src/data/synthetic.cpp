#include "ddp/data/synthetic.h"

#include "ddp_build_config.h"

#if defined(DDP_HAVE_GZIP)
#include <zlib.h>
#endif

#include <array>
#include <random>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/atomic_file.h"
#include "ddp/data/cifar10.h"
#include "ddp/error.h"

namespace ddp::data {
namespace {

constexpr int kClasses = 10;

// Class prototypes and a sample generator shared by both formats.
class SampleMaker {
 public:
  SampleMaker(size_t image_bytes, const SyntheticOptions& options)
      : bytes_(image_bytes), signal_(options.signal()), rng_(options.seed()) {
    if (options.signal() <= 0 || options.signal() > 1) {
      throw InvalidArgument(
          c10::str("synthetic data: signal ", options.signal(), " must be in (0, 1]"));
    }
    for (auto& proto : prototypes_) {
      proto.resize(bytes_);
      for (auto& p : proto) p = uint8_t(rng_() & 0xff);
    }
  }

  // Appends one sample of class `label` to `out`.
  void append(int label, std::string& out) {
    const auto& proto = prototypes_[size_t(label)];
    for (size_t i = 0; i < bytes_; ++i) {
      const double noise = double(rng_() & 0xff);
      out.push_back(char(uint8_t(signal_ * proto[i] + (1 - signal_) * noise + 0.5)));
    }
  }

  int next_label() { return int(rng_() % kClasses); }

 private:
  size_t bytes_;
  double signal_;
  std::mt19937_64 rng_;
  std::array<std::vector<uint8_t>, kClasses> prototypes_;
};

void put_be32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char((v >> shift) & 0xff));
}

void write_idx_split(const std::string& dir, const std::string& prefix, size_t count,
                     SampleMaker& maker) {
  std::string images, labels;
  put_be32(images, 0x00000803);
  put_be32(images, uint32_t(count));
  put_be32(images, 28);
  put_be32(images, 28);
  put_be32(labels, 0x00000801);
  put_be32(labels, uint32_t(count));
  for (size_t i = 0; i < count; ++i) {
    const int label = maker.next_label();
    labels.push_back(char(label));
    maker.append(label, images);
  }
#if defined(DDP_HAVE_GZIP)
  write_file_atomic(dir + "/" + prefix + "-images-idx3-ubyte.gz", gzip_bytes(images));
  write_file_atomic(dir + "/" + prefix + "-labels-idx1-ubyte.gz", gzip_bytes(labels));
#else  // no zlib: the plain files, which the reader takes as well
  write_file_atomic(dir + "/" + prefix + "-images-idx3-ubyte", images);
  write_file_atomic(dir + "/" + prefix + "-labels-idx1-ubyte", labels);
#endif
}

}  // namespace

#if !defined(DDP_HAVE_GZIP)
std::string gzip_bytes(const std::string&) {
  throw Error("gzip: this build has no zlib (DDP_WITH_GZIP=OFF)");
}
#else
std::string gzip_bytes(const std::string& bytes) {
  z_stream zs{};
  // windowBits 15 + 16 asks zlib for a gzip header and trailer.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw Error("zlib: deflateInit2 failed");
  }
  std::string out(deflateBound(&zs, uLong(bytes.size())) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = uInt(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = uInt(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw Error("zlib: deflate did not finish");
  out.resize(zs.total_out);
  return out;
}
#endif  // DDP_HAVE_GZIP

void write_synthetic_cifar10(const std::string& dir, const SyntheticOptions& options) {
  const std::string root = dir + "/cifar-10-batches-bin";
  make_directories(root);
  SampleMaker maker(kCifarRecordBytes - 1, options);
  const auto train_files = Cifar10Dataset::file_names(Split::kTrain);
  const size_t per_file = (options.train_size() + train_files.size() - 1) / train_files.size();
  size_t written = 0;
  for (const std::string& name : train_files) {
    std::string records;
    const size_t count = std::min(per_file, options.train_size() - written);
    if (count == 0) throw InvalidArgument("synthetic CIFAR-10 needs at least 5 training images");
    for (size_t i = 0; i < count; ++i) {
      const int label = maker.next_label();
      records.push_back(char(label));
      maker.append(label, records);
    }
    written += count;
    write_file_atomic(root + "/" + name, records);
  }
  std::string test;
  for (size_t i = 0; i < options.test_size(); ++i) {
    const int label = maker.next_label();
    test.push_back(char(label));
    maker.append(label, test);
  }
  write_file_atomic(root + "/test_batch.bin", test);
}

void write_synthetic_idx(const std::string& dir, const SyntheticOptions& options) {
  make_directories(dir);
  SampleMaker maker(28 * 28, options);
  write_idx_split(dir, "train", options.train_size(), maker);
  write_idx_split(dir, "t10k", options.test_size(), maker);
}

}  // namespace ddp::data
