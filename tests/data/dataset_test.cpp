// CIFAR-10 binary and IDX readers: good files read back what was written, bad files are
// rejected with a message naming the file and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "ddp/atomic_file.h"
#include "ddp/data/cifar10.h"
#include "ddp/data/idx.h"
#include "ddp/data/synthetic.h"
#include "ddp/error.h"
#include "support/error_of.h"
#include "support/parts.h"
#include "support/process.h"

namespace ddp::data {
namespace {

using test::error_of;

void write(const std::string& path, const std::string& bytes) { write_file_atomic(path, bytes); }

TEST(Cifar10, ReadsWhatTheGeneratorWrote) {
  test::TempDir dir;
  write_synthetic_cifar10(dir.path(), SyntheticOptions(103, 17).seed(1));
  Cifar10Dataset train(dir.path(), Split::kTrain);                  // the parent directory
  Cifar10Dataset test(dir / "cifar-10-batches-bin", Split::kTest);  // the directory itself
  EXPECT_EQ(train.size(), 103u);
  EXPECT_EQ(test.size(), 17u);
  EXPECT_EQ(train.shape().bytes(), 3072u);
  // Record 30 lives in the second file (21 per file): check it byte for byte.
  const std::string second = test::read_file(dir / "cifar-10-batches-bin/data_batch_2.bin");
  const size_t r = 30 - 21;
  EXPECT_EQ(train.label(30), int(uint8_t(second[r * kCifarRecordBytes])));
  EXPECT_EQ(0, std::memcmp(train.image(30), second.data() + r * kCifarRecordBytes + 1, 3072));
  for (size_t i = 0; i < train.size(); ++i) ASSERT_LT(train.label(i), 10);
}

TEST(Cifar10, MissingDirectorySaysWhatToDo) {
  const std::string msg =
      error_of<IoError>([] { Cifar10Dataset("/nonexistent/x", Split::kTrain); });
  EXPECT_NE(msg.find("/nonexistent/x/data_batch_1.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("download_cifar10"), std::string::npos) << msg;
}

TEST(Cifar10, RejectsSizeNotAMultipleOfTheRecord) {
  test::TempDir dir;
  write_synthetic_cifar10(dir.path(), SyntheticOptions(10, 2).seed(1));
  write(dir / "cifar-10-batches-bin/test_batch.bin", std::string(3073 * 2 - 5, '\0'));
  const std::string msg = error_of<DataError>([&] { Cifar10Dataset(dir.path(), Split::kTest); });
  EXPECT_NE(msg.find("test_batch.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("multiple of the CIFAR-10 record size 3073"), std::string::npos) << msg;
}

TEST(Cifar10, RejectsLabelAboveNine) {
  test::TempDir dir;
  write_synthetic_cifar10(dir.path(), SyntheticOptions(10, 2).seed(1));
  std::string records(3073 * 2, '\0');
  records[3073] = char(10);
  write(dir / "cifar-10-batches-bin/test_batch.bin", records);
  const std::string msg = error_of<DataError>([&] { Cifar10Dataset(dir.path(), Split::kTest); });
  EXPECT_NE(msg.find("record 1 has label 10"), std::string::npos) << msg;
}

std::string be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
}

TEST(Idx, ReadsGzipAndPlainFiles) {
  DDP_SKIP_WITHOUT(kGzip);
  test::TempDir dir;
  write_synthetic_idx(dir.path(), SyntheticOptions(50, 20).seed(3));
  IdxDataset train(dir.path(), Split::kTrain, "MNIST");
  EXPECT_EQ(train.size(), 50u);
  EXPECT_EQ(train.shape().height, 28);
  EXPECT_EQ(train.shape().channels, 1);
  // The same data uncompressed reads the same.
  test::TempDir plain;
  for (const std::string name : {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    write(plain / name, [&] {
      auto v = read_maybe_gzip(dir / (name + ".gz"), 1 << 24);
      return std::string(v.begin(), v.end());
    }());
  }
  IdxDataset a(dir.path(), Split::kTest, "MNIST"), b(plain.path(), Split::kTest, "MNIST");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.image(19), b.image(19), 784));
  EXPECT_EQ(a.label(19), b.label(19));
}

TEST(Idx, RejectsBadMagic) {
  DDP_SKIP_WITHOUT(kGzip);
  test::TempDir dir;
  write_synthetic_idx(dir.path(), SyntheticOptions(10, 10).seed(3));
  write(dir / "t10k-images-idx3-ubyte.gz",
        gzip_bytes(be32(0x0803 + 1) + be32(10) + be32(28) + be32(28)));
  const std::string msg =
      error_of<DataError>([&] { IdxDataset(dir.path(), Split::kTest, "MNIST"); });
  EXPECT_NE(msg.find("t10k-images-idx3-ubyte.gz: not an IDX image file"), std::string::npos) << msg;
}

TEST(Idx, RejectsDimensionsThatDoNotMatchTheData) {
  DDP_SKIP_WITHOUT(kGzip);
  test::TempDir dir;
  write_synthetic_idx(dir.path(), SyntheticOptions(10, 10).seed(3));
  write(dir / "t10k-images-idx3-ubyte.gz",
        gzip_bytes(be32(0x0803) + be32(10) + be32(28) + be32(28) + std::string(100, 'x')));
  const std::string msg =
      error_of<DataError>([&] { IdxDataset(dir.path(), Split::kTest, "MNIST"); });
  EXPECT_NE(msg.find("header says 10 images of 28x28"), std::string::npos) << msg;
}

TEST(Idx, ForgedHugeHeaderDoesNotAllocate) {
  DDP_SKIP_WITHOUT(kGzip);
  test::TempDir dir;
  write_synthetic_idx(dir.path(), SyntheticOptions(10, 10).seed(3));
  write(dir / "t10k-images-idx3-ubyte.gz",
        gzip_bytes(be32(0x0803) + be32(10) + be32(4096) + be32(4096)));
  const std::string msg =
      error_of<DataError>([&] { IdxDataset(dir.path(), Split::kTest, "MNIST"); });
  EXPECT_NE(msg.find("header says"), std::string::npos) << msg;
}

TEST(Idx, RejectsTruncatedGzip) {
  DDP_SKIP_WITHOUT(kGzip);
  test::TempDir dir;
  write_synthetic_idx(dir.path(), SyntheticOptions(10, 10).seed(3));
  std::string gz = test::read_file(dir / "t10k-images-idx3-ubyte.gz");
  write(dir / "t10k-images-idx3-ubyte.gz", gz.substr(0, gz.size() / 2));
  const std::string msg =
      error_of<DataError>([&] { IdxDataset(dir.path(), Split::kTest, "MNIST"); });
  EXPECT_NE(msg.find("t10k-images-idx3-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Idx, RejectsLabelCountMismatch) {
  DDP_SKIP_WITHOUT(kGzip);
  test::TempDir dir;
  write_synthetic_idx(dir.path(), SyntheticOptions(10, 10).seed(3));
  write(dir / "t10k-labels-idx1-ubyte.gz",
        gzip_bytes(be32(0x0801) + be32(9) + std::string(9, '\1')));
  const std::string msg =
      error_of<DataError>([&] { IdxDataset(dir.path(), Split::kTest, "MNIST"); });
  EXPECT_NE(msg.find("do not belong together"), std::string::npos) << msg;
}

TEST(Idx, RejectsLabelOutOfRange) {
  DDP_SKIP_WITHOUT(kGzip);
  test::TempDir dir;
  write_synthetic_idx(dir.path(), SyntheticOptions(10, 10).seed(3));
  write(dir / "t10k-labels-idx1-ubyte.gz",
        gzip_bytes(be32(0x0801) + be32(10) + std::string(9, '\1') + "\x0b"));
  const std::string msg =
      error_of<DataError>([&] { IdxDataset(dir.path(), Split::kTest, "MNIST"); });
  EXPECT_NE(msg.find("label 9 is 11"), std::string::npos) << msg;
}

TEST(Idx, RealFashionMnistIsFoundWhereDebianInstallsIt) {
  DDP_SKIP_WITHOUT(kGzip);
  const std::string dir = "/usr/share/datasets/fashion-mnist";  // Debian's dataset-fashion-mnist
  if (!path_exists(dir + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const auto test = open_dataset(DatasetKind::kFashionMnist, dir, Split::kTest);
  EXPECT_EQ(test->size(), 10000u);
  EXPECT_EQ(test->shape().height, 28);
}

TEST(DatasetKind, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_dataset_kind("fashion-mnist"), DatasetKind::kFashionMnist);
  EXPECT_THROW(parse_dataset_kind("imagenet"), InvalidArgument);
}

}  // namespace
}  // namespace ddp::data
