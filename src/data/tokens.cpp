// Token files: nanoGPT's raw uint16 and llm.c's headed shards, mapped; windows drawn per batch
// from a generator of their own, as bench/nanogpt_reference.py draws them.
#include "ddp/data/tokens.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "data/mapped_file.h"
#include "ddp/atomic_file.h"
#include "ddp/error.h"

namespace ddp::data {
namespace {

// llm.c's shard header (dev/data/data_common.py): 256 int32, then the tokens.
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// DIR's *.bin files whose names contain `split`, in name order.
std::vector<std::string> shards(const std::string& dir, const std::string& split) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0 &&
          name.find(split) != std::string::npos) {
        out.push_back(dir + "/" + name);
      }
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool has_llmc_header(const MappedFile& file) {
  int32_t magic = 0;
  if (file.size() >= sizeof magic) std::memcpy(&magic, file.data(), sizeof magic);
  return magic == kLlmcMagic;
}

}  // namespace

TokenSplit::TokenSplit(const std::vector<std::string>& files) : names_(files) {
  for (const auto& path : files) {
    Part part;
    part.file = std::make_unique<MappedFile>(path);
    const MappedFile& f = *part.file;
    size_t offset = 0, bytes = f.size();
    if (has_llmc_header(f)) {
      int32_t header[3] = {};
      if (f.size() < kLlmcHeaderBytes) {
        throw DataError(c10::str(path, ": truncated llm.c header (", f.size(), " bytes)"));
      }
      std::memcpy(header, f.data(), sizeof header);
      if (header[1] != kLlmcVersion) {
        throw DataError(
            c10::str(path, ": llm.c token shard version ", header[1], ", expected ", kLlmcVersion));
      }
      offset = kLlmcHeaderBytes;
      bytes = size_t(header[2]) * sizeof(uint16_t);
      if (f.size() - offset < bytes) {
        throw DataError(c10::str(path, ": its header promises ", header[2],
                                 " tokens, the file holds ", (f.size() - offset) / 2,
                                 "; it is truncated"));
      }
    } else if (f.size() % 2 != 0) {
      throw DataError(c10::str(path, ": ", f.size(),
                               " bytes is not a whole number of uint16 tokens; truncated?"));
    }
    part.tokens = reinterpret_cast<const uint16_t*>(f.data() + offset);
    part.size = int64_t(bytes / sizeof(uint16_t));
    size_ += part.size;
    parts_.push_back(std::move(part));
  }
}

TokenSplit::~TokenSplit() = default;
TokenSplit::TokenSplit(TokenSplit&&) noexcept = default;
TokenSplit& TokenSplit::operator=(TokenSplit&&) noexcept = default;

torch::Tensor TokenSplit::slice(int64_t start, int64_t length) const {
  if (start < 0 || length < 0 || start + length > size_) {
    throw InvalidArgument(c10::str("tokens [", start, ", ", start + length, ") are outside ",
                                   names_.empty() ? std::string("the split") : names_[0], "'s ",
                                   size_));
  }
  torch::Tensor out = torch::empty({length}, torch::kLong);
  int64_t* dst = out.data_ptr<int64_t>();
  for (const Part& part : parts_) {
    if (length == 0) break;
    if (start >= part.size) {
      start -= part.size;
      continue;
    }
    const int64_t n = std::min(length, part.size - start);
    std::copy(part.tokens + start, part.tokens + start + n, dst);
    dst += n;
    length -= n;
    start = 0;
  }
  return out;
}

int64_t TokenSplit::max_token() const {
  int64_t top = 0;
  for (const Part& part : parts_) {
    if (part.size > 0)
      top = std::max<int64_t>(top, *std::max_element(part.tokens, part.tokens + part.size));
  }
  return top;
}

TokenDataset TokenDataset::open(const std::string& dir) {
  std::vector<std::string> train{dir + "/train.bin"}, val{dir + "/val.bin"};
  if (!exists(train[0]) || !exists(val[0])) {
    train = shards(dir, "train");
    val = shards(dir, "val");
  }
  if (train.empty() || val.empty()) {
    const std::string split = train.empty() ? "train" : "val";
    throw IoError(c10::str("token data set ", dir, ": found no ", split, " split: neither ", split,
                           ".bin (nanoGPT) nor *", split,
                           "*.bin shards (llm.c); make a set with ddp-train make-data --tokens "
                           "TEXT_FILE --out ",
                           dir));
  }
  TokenDataset d{TokenSplit(train), TokenSplit(val), 0, "nanoGPT"};
  {
    MappedFile first(train[0]);
    if (has_llmc_header(first)) d.format = "llm.c";
  }
  d.vocab_size = d.format == "llm.c" ? 50257 : 50304;
  const std::string meta = dir + "/meta.json";
  if (exists(meta)) {
    std::ifstream in(meta);
    nlohmann::json j;
    try {
      in >> j;
      d.vocab_size = j.at("vocab_size").get<int64_t>();
    } catch (const std::exception& e) {
      throw DataError(c10::str(meta, ": expected {\"vocab_size\": N}: ", e.what()));
    }
  }
  for (const TokenSplit* split : {&d.train, &d.val}) {
    const int64_t top = split->max_token();
    if (top >= d.vocab_size) {
      throw DataError(c10::str("token data set ", dir, ": token ", top, " in ", split->files()[0],
                               "... is outside the vocabulary of ", d.vocab_size,
                               exists(meta) ? " (meta.json)" : "; give it in DIR/meta.json"));
    }
  }
  return d;
}

TokenWindows::TokenWindows(const TokenSplit& split, int64_t block_size, int64_t batch_size,
                           uint64_t seed, int rank)
    : split_(split), block_size_(block_size), batch_size_(batch_size), seed_(seed), rank_(rank) {
  if (split.size() <= block_size) {
    throw DataError(
        c10::str(split.files().empty() ? std::string("a token split") : split.files()[0], ": ",
                 split.size(), " tokens, not more than the context of ", block_size,
                 "; use a shorter --block-size or more text"));
  }
}

std::pair<torch::Tensor, torch::Tensor> TokenWindows::batch(int64_t k) const {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed_ + 1000003ULL * uint64_t(rank_) +
                                                            7919ULL * uint64_t(k));
  const torch::Tensor starts =
      torch::randint(split_.size() - block_size_, {batch_size_}, generator, torch::kLong);
  torch::Tensor x = torch::empty({batch_size_, block_size_}, torch::kLong);
  torch::Tensor y = torch::empty({batch_size_, block_size_}, torch::kLong);
  for (int64_t b = 0; b < batch_size_; ++b) {
    const torch::Tensor window = split_.slice(starts[b].item<int64_t>(), block_size_ + 1);
    x[b].copy_(window.narrow(0, 0, block_size_));
    y[b].copy_(window.narrow(0, 1, block_size_));
  }
  return {x, y};
}

std::pair<int64_t, int64_t> write_byte_tokens(const std::string& text_file, const std::string& dir,
                                              double val_fraction) {
  std::ifstream in(text_file, std::ios::binary);
  if (!in) throw IoError(c10::str("cannot read ", text_file));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int64_t n = int64_t(text.size());
  const int64_t n_val = int64_t(double(n) * val_fraction);
  if (n - n_val < 2 || n_val < 2) {
    throw DataError(
        c10::str(text_file, ": ", n, " bytes is too little text to split into train and val"));
  }
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    tokens[i] = uint16_t(static_cast<unsigned char>(text[i]));
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw IoError(c10::str("cannot create ", dir, ": ", error.message()));
  write_file_atomic(dir + "/train.bin", tokens.data(), size_t(n - n_val) * sizeof(uint16_t));
  write_file_atomic(dir + "/val.bin", tokens.data() + (n - n_val),
                    size_t(n_val) * sizeof(uint16_t));
  write_file_atomic(dir + "/meta.json",
                    std::string("{\"vocab_size\": 256, \"encoding\": \"bytes\"}\n"));
  return {n - n_val, n_val};
}

}  // namespace ddp::data
