#include "ddp/data/idx.h"

#include "ddp_build_config.h"

#if defined(DDP_HAVE_GZIP)
#include <zlib.h>
#endif

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr int kMaxSide = 4096;

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// The file of `base` in `dir`, preferring the gzip one as the downloads ship it.
std::string find_idx_file(const std::string& dir, const std::string& base,
                          const std::string& what) {
  for (const std::string& candidate : {dir + "/" + base + ".gz", dir + "/" + base}) {
    if (std::FILE* f = std::fopen(candidate.c_str(), "rb")) {
      std::fclose(f);
      return candidate;
    }
  }
  throw IoError(c10::str(what, " not found: neither ", dir, "/", base, ".gz nor ", dir, "/", base,
                         " exists; point the data directory at the one holding the IDX files"));
}

}  // namespace

#if !defined(DDP_HAVE_GZIP)

// Without zlib (DDP_WITH_GZIP=OFF): plain files only, and a gzip'd one is named as such.
std::vector<uint8_t> read_maybe_gzip(const std::string& path, size_t max_bytes) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!file) throw IoError(c10::str("cannot open ", path, ": ", std::strerror(errno)));
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  while (const size_t n = std::fread(chunk.data(), 1, chunk.size(), file.get())) {
    if (out.size() + n > max_bytes) {
      throw DataError(
          c10::str(path, ": more than ", max_bytes, " bytes, larger than its header says"));
    }
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  if (std::ferror(file.get())) throw IoError(c10::str("cannot read ", path));
  if (out.size() >= 2 && out[0] == 0x1f && out[1] == 0x8b) {
    throw DataError(c10::str(path,
                             " is gzip-compressed, and this build has no zlib "
                             "(DDP_WITH_GZIP=OFF): gunzip it, or rebuild with zlib"));
  }
  return out;
}

#else

std::vector<uint8_t> read_maybe_gzip(const std::string& path, size_t max_bytes) {
  gzFile gz = gzopen(path.c_str(), "rb");  // reads plain files unchanged
  if (gz == nullptr) throw IoError(c10::str("cannot open ", path, ": ", std::strerror(errno)));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> closer(gz, gzclose_r);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    const int n = gzread(gz, chunk.data(), unsigned(chunk.size()));
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(gz, &code);
      throw DataError(c10::str(path, ": cannot decompress (", msg, "); the gzip file is corrupt"));
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > max_bytes) {
      throw DataError(
          c10::str(path, ": more than ", max_bytes, " bytes, larger than its header says"));
    }
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  // gzread returns 0 at a truncated stream too; gzerror tells them apart.
  int code = Z_OK;
  const char* msg = gzerror(gz, &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    throw DataError(c10::str(path, ": truncated or corrupt gzip data (", msg, ")"));
  }
  gzFile raw = closer.release();
  if (gzclose_r(raw) == Z_BUF_ERROR) {
    throw DataError(c10::str(path, ": truncated gzip file (ends in the middle of the stream)"));
  }
  return out;
}

#endif  // DDP_HAVE_GZIP

const char* IdxDataset::file_prefix(Split split) {
  return split == Split::kTrain ? "train" : "t10k";
}

IdxDataset::IdxDataset(const std::string& dir, Split split, const std::string& name) {
  const std::string prefix = file_prefix(split);
  const std::string images_path =
      find_idx_file(dir, prefix + "-images-idx3-ubyte", name + " images");
  const std::string labels_path =
      find_idx_file(dir, prefix + "-labels-idx1-ubyte", name + " labels");

  // Labels first: their count bounds what the image file may hold.
  labels_ = read_maybe_gzip(labels_path, size_t(1) << 31);
  if (labels_.size() < 8 || read_be32(labels_.data()) != kLabelsMagic) {
    throw DataError(c10::str(labels_path, ": not an IDX label file (expected magic 0x00000801)"));
  }
  const size_t count = read_be32(labels_.data() + 4);
  if (labels_.size() - 8 != count) {
    throw DataError(c10::str(labels_path, ": header says ", count, " labels but the file holds ",
                             labels_.size() - 8, "; the file is truncated or corrupt"));
  }
  labels_.erase(labels_.begin(), labels_.begin() + 8);
  for (size_t i = 0; i < labels_.size(); ++i) {
    if (labels_[i] >= 10) {
      throw DataError(c10::str(labels_path, ": label ", i, " is ", int(labels_[i]),
                               ", but this data set has 10 classes (0-9)"));
    }
  }

  std::vector<uint8_t> raw = read_maybe_gzip(images_path, 16 + count * size_t(kMaxSide) * kMaxSide);
  if (raw.size() < 16 || read_be32(raw.data()) != kImagesMagic) {
    throw DataError(c10::str(images_path, ": not an IDX image file (expected magic 0x00000803)"));
  }
  const size_t n = read_be32(raw.data() + 4);
  const size_t rows = read_be32(raw.data() + 8);
  const size_t cols = read_be32(raw.data() + 12);
  if (n != count) {
    throw DataError(c10::str(images_path, ": ", n, " images but ", labels_path, " has ", count,
                             " labels; the two files do not belong together"));
  }
  if (rows == 0 || cols == 0 || rows > kMaxSide || cols > kMaxSide) {
    throw DataError(
        c10::str(images_path, ": image dimensions ", rows, "x", cols, " are not plausible"));
  }
  if (raw.size() - 16 != n * rows * cols) {
    throw DataError(c10::str(images_path, ": header says ", n, " images of ", rows, "x", cols,
                             " = ", n * rows * cols, " bytes, but the file holds ", raw.size() - 16,
                             "; the file is truncated or corrupt"));
  }
  raw.erase(raw.begin(), raw.begin() + 16);
  images_ = std::move(raw);
  shape_ = {1, int(rows), int(cols)};
  description_ = c10::str(name, " ", split_name(split), ", ", count, " images from ", dir);
}

}  // namespace ddp::data
