// Token ids for training a language model, memory-mapped from disk, and the random windows
// nanoGPT's train.py trains on (block_size + 1 consecutive tokens: the input and, one to the
// right, the targets). Two layouts of a data directory are read:
// - nanoGPT's: train.bin and val.bin, raw little-endian uint16 tokens;
// - llm.c's: shards named *train*.bin and *val*.bin, each a header of 256 int32 (magic
//   20240520, version 1, the token count) and then the uint16 tokens; a split is its shards in
//   name order, one after the other.
// The vocabulary size comes from DIR/meta.json ({"vocab_size": N}, which make-data --tokens
// writes), else GPT-2's (50257 for llm.c's shards; nanoGPT's 50304 for raw files, as its
// train.py defaults).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace ddp::data {

class MappedFile;

/// One split (train or val) of a token data set.
class TokenSplit {
 public:
  /// Maps `files` (their layout told by each one's first bytes). Throws IoError naming a
  /// missing file, DataError naming a truncated one or a bad header.
  explicit TokenSplit(const std::vector<std::string>& files);
  ~TokenSplit();
  TokenSplit(TokenSplit&&) noexcept;
  TokenSplit& operator=(TokenSplit&&) noexcept;

  int64_t size() const { return size_; }
  /// Tokens [start, start + length) as int64.
  torch::Tensor slice(int64_t start, int64_t length) const;
  /// The largest token id (a scan of the whole split).
  int64_t max_token() const;
  const std::vector<std::string>& files() const { return names_; }

 private:
  struct Part {
    std::unique_ptr<MappedFile> file;
    const uint16_t* tokens = nullptr;
    int64_t size = 0;
  };
  std::vector<Part> parts_;
  std::vector<std::string> names_;
  int64_t size_ = 0;
};

/// A token data directory: its splits and vocabulary.
struct TokenDataset {
  TokenSplit train, val;
  int64_t vocab_size = 0;
  std::string format;  ///< "nanoGPT" or "llm.c"

  /// Opens DIR (see the top of this file). Throws IoError when DIR has neither layout, naming
  /// what it looked for; DataError when a token is outside the vocabulary.
  static TokenDataset open(const std::string& dir);
};

/// Random windows of one split for one rank: batch k's B windows start at
/// torch::randint(size - block_size, {B}) drawn from a CPU generator seeded with
/// seed + 1000003·rank + 7919·k, so a batch depends only on (seed, rank, k): the same whatever
/// ran before, exact on resume, and the same in bench/nanogpt_reference.py.
class TokenWindows {
 public:
  /// Throws DataError when the split is not longer than `block_size`.
  TokenWindows(const TokenSplit& split, int64_t block_size, int64_t batch_size, uint64_t seed,
               int rank);
  /// Batch k: inputs and targets, each [B, block_size] int64.
  std::pair<torch::Tensor, torch::Tensor> batch(int64_t k) const;

 private:
  const TokenSplit& split_;
  int64_t block_size_, batch_size_;
  uint64_t seed_;
  int rank_;
};

/// make-data --tokens: `text_file`'s bytes as tokens (vocabulary 256), the first 90% to
/// DIR/train.bin and the rest to DIR/val.bin, and DIR/meta.json. Returns the token counts.
std::pair<int64_t, int64_t> write_byte_tokens(const std::string& text_file, const std::string& dir,
                                              double val_fraction = 0.1);

}  // namespace ddp::data
