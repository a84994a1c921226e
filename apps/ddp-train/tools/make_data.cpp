#include "tools/make_data.h"

#include <cstdio>

#include "ddp/data/synthetic.h"
#include "ddp/data/tokens.h"
#include "ddp/error.h"
#include "flags.h"

namespace ddp::train {
namespace {

enum class DataFormat { kCifar10, kIdx };

struct MakeDataOptions {
  std::string out;
  std::string tokens;  // a text file: a token set of its bytes instead of images
  DataFormat format = DataFormat::kCifar10;
  int64_t train = 5000;
  int64_t test = 1000;
  int64_t seed = 0;
  double signal = 0.5;
};

// The flags, one entry each: a declarative table.
const cli::FlagTable<MakeDataOptions>& table() {
  using O = MakeDataOptions;
  static const cli::FlagTable<O> flags(
      "make-data",
      {
          cli::text_flag<O>("--out", "DIR", "where to write the data set (required)", &O::out),
          cli::text_flag<O>("--tokens", "TEXT_FILE",
                            "instead of images, a token set for the GPTs: the file's bytes as "
                            "tokens (vocabulary 256), 90% to DIR/train.bin and 10% to "
                            "DIR/val.bin (nanoGPT's layout), and DIR/meta.json",
                            &O::tokens),
          cli::choice_flag<O>("--format", "NAME",
                              "cifar10 (default): CIFAR-10 binary files under "
                              "DIR/cifar-10-batches-bin; idx: gzip'd IDX files (28x28, as MNIST) "
                              "in DIR",
                              &O::format, "format",
                              {{DataFormat::kCifar10, "cifar10"}, {DataFormat::kIdx, "idx"}}),
          cli::int_flag<O>("--train", "N", "training images (default 5000)", &O::train, 5, 1 << 24),
          cli::int_flag<O>("--test", "N", "test images (default 1000)", &O::test, 1, 1 << 24),
          cli::int_flag<O>("--seed", "N", "seed of the prototypes and the noise (default 0)",
                           &O::seed, 0, 1 << 30),
          cli::real_flag<O>("--signal", "X",
                            "share of each pixel taken from its class's prototype, the rest "
                            "noise; lower is harder (default 0.5)",
                            &O::signal, 0, 1),
      });
  return flags;
}

std::string help() {
  return "usage: ddp-train make-data --out DIR [FLAGS]\n\n"
         "Writes a synthetic data set with learnable structure (each class a random prototype\n"
         "image blended with noise), or with --tokens a token set of a text file.\n\nflags:\n" +
         table().help();
}

}  // namespace

int run_make_data(const std::vector<std::string>& args) {
  MakeDataOptions o;
  bool want_help = false;
  table().parse(args, o, want_help);
  if (want_help) {
    std::fputs(help().c_str(), stdout);
    return 0;
  }
  if (o.out.empty()) throw InvalidArgument("make-data: --out DIR is required");
  if (!o.tokens.empty()) {
    const auto [train, val] = data::write_byte_tokens(o.tokens, o.out);
    std::printf("wrote %lld train and %lld val tokens (the bytes of %s) to %s\n", (long long)train,
                (long long)val, o.tokens.c_str(), o.out.c_str());
    return 0;
  }
  data::SyntheticOptions options;
  options.train_size(size_t(o.train));
  options.test_size(size_t(o.test));
  options.seed(uint64_t(o.seed));
  options.signal(o.signal);
  switch (o.format) {
    case DataFormat::kCifar10:
      data::write_synthetic_cifar10(o.out, options);
      std::printf("wrote synthetic CIFAR-10 (%zu train, %zu test) to %s/cifar-10-batches-bin\n",
                  options.train_size(), options.test_size(), o.out.c_str());
      break;
    case DataFormat::kIdx:
      data::write_synthetic_idx(o.out, options);
      std::printf("wrote synthetic IDX data (%zu train, %zu test) to %s\n", options.train_size(),
                  options.test_size(), o.out.c_str());
      break;
  }
  return 0;
}

}  // namespace ddp::train
