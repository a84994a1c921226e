// The fixture of ddp-train's end-to-end tests: a small synthetic CIFAR-format data set, made once
// for all of them, and a reader of the metrics file.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>

#include "ddp/data/synthetic.h"
#include "support/process.h"

namespace ddp {

/// The value of "key" in the last JSON line of `path` that has it (-1: none).
inline double last_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  double value = -1;
  const std::regex re("\"" + key + "\": ([-0-9.e+]+)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) value = std::stod(m[1]);
  }
  return value;
}

/// 2000 training and 500 test images of 10 learnable classes, in data_->path().
class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    data::write_synthetic_cifar10(data_->path(), data::SyntheticOptions(2000, 500).seed(0));
  }
  static void TearDownTestSuite() { delete data_; }
  static inline test::TempDir* data_ = nullptr;
};

}  // namespace ddp
