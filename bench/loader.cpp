// ddp.cpp's side of bench/loader.sh: images per second through the loader on an image folder.
//   bench-loader --dir DIR --pipeline train|eval|decode|index [--threads N] [--batch-size 64]
//                [--images N] [--warmup-batches 2] [--scaled-decode on|off] [--image-size 224]
// train: DIR/train through RandomResizedCrop(224) + flip + normalise, shuffled; eval: DIR/val
// through Resize(256) + CenterCrop(224) + normalise, in order; decode: the full-size decode alone
// of DIR/train's files, read into memory first (as tjbench decodes from memory), on N threads;
// index: building DIR/train's index alone (what a job pays once at start-up).
// Prints one line: images_per_second=... images=... seconds=... (index: also index_bytes=...)
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "ddp/allocator.h"
#include "ddp/data/image.h"
#include "ddp/data/image_folder.h"
#include "ddp/data/image_pipeline.h"
#include "ddp/data/loader.h"
#include "ddp/data/resample.h"
#include "ddp/error.h"
#include "ddp/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::string dir, pipeline = "train";
  int threads = 1;
  int64_t batch_size = 64, images = 2048, warmup_batches = 2;
  int image_size = 224;
  bool scaled_decode = true;
};

constexpr const char* kUsage =
    "usage: bench-loader --dir DIR --pipeline train|eval|decode|index [--threads N]\n"
    "                    [--batch-size 64]\n"
    "                    [--images N] [--warmup-batches K] [--scaled-decode on|off]\n"
    "                    [--image-size 224]\n";

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw ddp::InvalidArgument(flag + " needs a value");
    const std::string v = argv[i + 1];
    const std::map<std::string, std::function<void()>> setters = {
        {"--dir", [&] { s.dir = v; }},
        {"--pipeline", [&] { s.pipeline = v; }},
        {"--threads", [&] { s.threads = std::stoi(v); }},
        {"--batch-size", [&] { s.batch_size = std::stoll(v); }},
        {"--images", [&] { s.images = std::stoll(v); }},
        {"--warmup-batches", [&] { s.warmup_batches = std::stoll(v); }},
        {"--scaled-decode", [&] { s.scaled_decode = v == "on"; }},
        {"--image-size", [&] { s.image_size = std::stoi(v); }},
    };
    const auto setter = setters.find(flag);
    if (setter == setters.end()) throw ddp::InvalidArgument("unknown flag " + flag + "\n" + kUsage);
    setter->second();
  }
  if (s.dir.empty()) throw ddp::InvalidArgument("--dir DIR is required");
  if (s.pipeline != "train" && s.pipeline != "eval" && s.pipeline != "decode" &&
      s.pipeline != "index") {
    throw ddp::InvalidArgument("--pipeline is train, eval, decode or index");
  }
  return s;
}

void report(int64_t images, double seconds) {
  std::printf("images_per_second=%.1f images=%lld seconds=%.3f\n", double(images) / seconds,
              (long long)images, seconds);
}

void bench_index(const Settings& s) {
  const auto start = Clock::now();
  const ddp::data::ImageFolder folder(s.dir + "/train");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "images_per_second=%.1f images=%zu seconds=%.3f index_bytes=%zu bytes_per_sample=%.1f "
      "resampler=%s\n",
      double(folder.size()) / seconds, folder.size(), seconds, folder.index_bytes(),
      double(folder.index_bytes()) / double(folder.size()), ddp::data::resize_bilinear_kernel());
}

void bench_decode(const Settings& s) {
  const ddp::data::ImageFolder folder(s.dir + "/train");
  const size_t n = std::min<size_t>(folder.size(), size_t(s.images));
  std::vector<std::vector<uint8_t>> files(n);
  for (size_t i = 0; i < n; ++i) {
    std::ifstream in(folder.path(i), std::ios::binary);
    files[i].assign(std::istreambuf_iterator<char>(in), {});
  }
  std::atomic<size_t> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < s.threads; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) {
        ddp::data::decode_image(files[i].data(), files[i].size(), folder.path(i));
      }
    });
  }
  for (auto& t : threads) t.join();
  report(int64_t(n), std::chrono::duration<double>(Clock::now() - start).count());
}

void bench_pipeline(const Settings& s) {
  using Kind = ddp::data::ImagePipelineOptions::Kind;
  const bool train = s.pipeline == "train";
  auto folder = std::make_shared<ddp::data::ImageFolder>(s.dir + (train ? "/train" : "/val"));
  ddp::data::ImagePipelineOptions p;
  p.kind(train ? Kind::kTrain : Kind::kEval).scaled_decode(s.scaled_decode);
  p.size(s.image_size).resize(int(std::lround(s.image_size * 256.0 / 224.0)));
  auto source = std::make_shared<ddp::data::ImageFolderSource>(folder, p);
  ddp::data::Loader loader(
      source, ddp::data::LoaderOptions().batch_size(s.batch_size).threads(s.threads).prefetch(4));
  std::vector<int64_t> order;
  if (train) {
    order = ddp::DistributedSampler(int64_t(folder->size()), 1, 0).indices();
  } else {
    for (int64_t i = 0; i < int64_t(folder->size()); ++i) order.push_back(i);
  }
  int64_t images = 0, batches = 0;
  auto start = Clock::now();
  for (int64_t epoch = 0; images < s.images; ++epoch) {
    loader.start_epoch(order, epoch);
    while (auto batch = loader.next()) {
      if (++batches == s.warmup_batches) start = Clock::now();
      if (batches > s.warmup_batches) images += batch->labels.size(0);
      if (images >= s.images) break;
    }
  }
  report(images, std::chrono::duration<double>(Clock::now() - start).count());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // As ddp-train: freed memory kept for reuse, so a batch's pages are not faulted in anew.
    ddp::retain_freed_memory();
    torch::set_num_threads(1);
    const Settings s = parse(argc, argv);
    if (s.pipeline == "index") {
      bench_index(s);
    } else if (s.pipeline == "decode") {
      bench_decode(s);
    } else {
      bench_pipeline(s);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-loader: error: %s\n", e.what());
    return 1;
  }
}
