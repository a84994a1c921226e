// Reference files from PIL for the image tests: tests/python/image_reference.py, run once per
// test binary into a temporary folder (removed at exit) through the reference Python
// (DDP_PYTHON). Torch-free, so the image tests build without LibTorch too.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::test {

/// A file's bytes ("" when it cannot be read).
inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

/// The files image_reference.py writes for `mode` ("decode" or "resize").
class PilReference {
 public:
  explicit PilReference(const std::string& mode) {
    char tmpl[] = "/tmp/ddp-image-reference-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    const std::string command = std::string("'") + DDP_PYTHON + "' '" + DDP_SOURCE_DIR +
                                "/tests/python/image_reference.py' " + mode + " '" + dir_ +
                                "' > '" + dir_ + "/log.txt' 2>&1";
    if (std::system(command.c_str()) != 0) {
      const std::vector<uint8_t> log = read_bytes(dir_ + "/log.txt");
      error_ = command + " failed:\n" + std::string(log.begin(), log.end());
      return;
    }
    std::ifstream manifest(dir_ + "/manifest.txt");
    for (std::string line; std::getline(manifest, line);) {
      if (!line.empty()) lines_.push_back(line);
    }
    if (lines_.empty()) error_ = "image_reference.py wrote no cases into " + dir_;
    std::ifstream(dir_ + "/pillow.txt") >> pillow_major_;
  }
  ~PilReference() {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  PilReference(const PilReference&) = delete;
  PilReference& operator=(const PilReference&) = delete;

  /// What went wrong making the files; "" when they are there.
  const std::string& error() const { return error_; }
  /// The manifest's lines (see image_reference.py).
  const std::vector<std::string>& lines() const { return lines_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  /// The major version of the Pillow that wrote the files (0 when unknown).
  int pillow_major() const { return pillow_major_; }

 private:
  std::string dir_;
  std::string error_;
  std::vector<std::string> lines_;
  int pillow_major_ = 0;
};

/// The largest |a - b| over two byte vectors of the same size, and how many bytes differ.
struct ByteDiff {
  int max = 0;
  size_t count = 0;
};
inline ByteDiff byte_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  ByteDiff d;
  for (size_t i = 0; i < n; ++i) {
    const int diff = std::abs(int(a[i]) - int(b[i]));
    if (diff > d.max) d.max = diff;
    d.count += diff != 0;
  }
  return d;
}

}  // namespace ddp::test
