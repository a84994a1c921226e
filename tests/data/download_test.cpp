// --download: a file:// URL to an archive the test builds stands in for the official one.
#include <gtest/gtest.h>

#include "ddp/atomic_file.h"
#include "ddp/data/cifar10.h"
#include "ddp/data/download.h"
#include "ddp/data/synthetic.h"
#include "ddp/error.h"
#include "support/parts.h"
#include "support/process.h"

namespace ddp::data {
namespace {

std::string make_archive(const test::TempDir& dir) {
  write_synthetic_cifar10(dir / "src", SyntheticOptions(20, 5).seed(2));
  const auto tar = test::run({"/bin/tar", "-C", dir / "src", "-czf", dir / "cifar-10-binary.tar.gz",
                              "cifar-10-batches-bin"});
  EXPECT_EQ(tar.exit_code, 0) << tar.output;
  return dir / "cifar-10-binary.tar.gz";
}

TEST(Download, FetchesVerifiesAndUnpacks) {
  DDP_SKIP_WITHOUT(kDownload);
  test::TempDir dir;
  const std::string archive = make_archive(dir);
  DownloadOptions options;
  options.url("file://" + archive);
  options.md5(md5_file(archive));
  download_cifar10(dir / "data", options);
  Cifar10Dataset train(dir / "data", Split::kTrain);
  EXPECT_EQ(train.size(), 20u);
  // Already there: nothing is fetched (a bad URL would fail otherwise).
  options.url("file:///nonexistent.tar.gz");
  EXPECT_NO_THROW(download_cifar10(dir / "data", options));
}

TEST(Download, ChecksumMismatchLeavesNothingBehind) {
  DDP_SKIP_WITHOUT(kDownload);
  test::TempDir dir;
  DownloadOptions options;
  options.url("file://" + make_archive(dir));  // official MD5 expected: it cannot match
  try {
    download_cifar10(dir / "data", options);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("expected c32a1d4ab5d03f1284b67883e8d87530"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(path_exists(dir / "data/cifar-10-batches-bin"));
  const auto ls = test::run({"/bin/sh", "-c", "ls -A " + dir / "data"});
  EXPECT_EQ(ls.output, "");
}

TEST(Download, UnreachableUrlIsAnIoError) {
  DDP_SKIP_WITHOUT(kDownload);
  test::TempDir dir;
  DownloadOptions options;
  options.url("file:///nonexistent/cifar.tar.gz");
  EXPECT_THROW(download_cifar10(dir / "data", options), IoError);
}

TEST(Download, Md5OfKnownBytes) {
  DDP_SKIP_WITHOUT(kDownload);
  test::TempDir dir;
  write_file_atomic(dir / "abc", std::string("abc"));
  EXPECT_EQ(md5_file(dir / "abc"), "900150983cd24fb0d6963f7d28e17f72");
}

}  // namespace
}  // namespace ddp::data
