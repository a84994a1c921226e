// DistributedSampler against torch.utils.data.distributed.DistributedSampler (python3-torch).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "ddp/error.h"
#include "ddp/sampler.h"

#include <torch/torch.h>
#include "support/process.h"

namespace ddp {
namespace {

TEST(DistributedSampler, MatchesPyTorchOverManyCombinations) {
  test::TempDir dir;
  const auto py = test::run_python("sampler_golden.py", {dir / "golden.txt"});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  std::ifstream in(dir / "golden.txt");
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int64_t n, seed, epoch;
    int world, rank, shuffle, drop_last;
    std::string colon;
    fields >> n >> world >> rank >> seed >> epoch >> shuffle >> drop_last >> colon;
    std::vector<int64_t> expected;
    for (int64_t v; fields >> v;) expected.push_back(v);
    DistributedSampler sampler(
        n, world, rank,
        SamplerOptions().shuffle(shuffle != 0).seed(uint64_t(seed)).drop_last(drop_last != 0));
    sampler.set_epoch(epoch);
    ASSERT_EQ(sampler.indices(), expected) << "case: " << line.substr(0, line.find(':'));
    ASSERT_EQ(sampler.num_samples(), int64_t(expected.size()));
    ++cases;
  }
  EXPECT_GT(cases, 1000);
}

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheDataSet) {
  const int64_t n = 103;
  const int world = 4;
  std::vector<int> seen(n, 0);
  for (int r = 0; r < world; ++r) {
    DistributedSampler sampler(n, world, r);
    sampler.set_epoch(5);
    for (int64_t i : sampler.indices()) ++seen[size_t(i)];
  }
  int total = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_GE(seen[size_t(i)], 1) << i;
    total += seen[size_t(i)];
  }
  EXPECT_EQ(total, 104);  // padded by one repeated index
}

TEST(DistributedSampler, WithoutPaddingEveryIndexOnceAndShardsWithinOne) {
  for (const int64_t n : {0, 1, 5, 103, 104}) {
    const int world = 4;
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (int r = 0; r < world; ++r) {
      const auto options = SamplerOptions().pad(false);
      DistributedSampler sampler(n, world, r, options);
      sampler.set_epoch(3);
      const auto mine = sampler.indices();
      EXPECT_EQ(int64_t(mine.size()), sampler.num_samples()) << n << " rank " << r;
      EXPECT_EQ(sampler.num_samples(), n / world + (r < n % world ? 1 : 0)) << n << " rank " << r;
      EXPECT_EQ(sampler.total_size(), n);
      for (int64_t i : mine) ++seen[size_t(i)];
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[size_t(i)], 1) << n << " index " << i;
  }
  // The same order as the padded sampler, only without the repeated tail.
  const auto unpadded = SamplerOptions().pad(false);
  const auto padded = DistributedSampler(103, 4, 3).indices();
  const auto plain = DistributedSampler(103, 4, 3, unpadded).indices();
  ASSERT_EQ(plain.size() + 1, padded.size());
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), padded.begin()));
}

TEST(DistributedSampler, EpochChangesTheOrder) {
  DistributedSampler sampler(1000, 2, 0);
  const auto first = sampler.indices();
  sampler.set_epoch(1);
  EXPECT_NE(sampler.indices(), first);
  sampler.set_epoch(0);
  EXPECT_EQ(sampler.indices(), first);
}

TEST(DistributedSampler, RejectsBadRank) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 0, 0), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 2, -1), InvalidArgument);
}

// LibTorch's own loader with ddp::DistributedSampler: each pass is the next epoch's shard, in
// the sampler's order, and a saved sampler resumes mid-epoch.
TEST(DistributedSampler, DrivesLibTorchsDataLoaderEpochByEpoch) {
  const int64_t n = 23;
  const torch::Tensor values = torch::arange(n, torch::kFloat32).unsqueeze(1);
  auto dataset = torch::data::datasets::TensorDataset(values).map(
      torch::data::transforms::Stack<torch::data::TensorExample>());
  DistributedSampler reference(n, 3, 1, SamplerOptions().seed(7));
  auto loader = torch::data::make_data_loader(std::move(dataset),
                                              DistributedSampler(n, 3, 1, SamplerOptions().seed(7)),
                                              torch::data::DataLoaderOptions().batch_size(4));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    reference.set_epoch(epoch);
    std::vector<int64_t> seen;
    for (auto& batch : *loader) {
      EXPECT_LE(batch.data.size(0), 4);
      for (int64_t i = 0; i < batch.data.size(0); ++i) {
        seen.push_back(int64_t(batch.data[i][0].item<float>()));
      }
    }
    EXPECT_EQ(seen, reference.indices()) << "epoch " << epoch;
  }
}

TEST(DistributedSampler, SetEpochAndSaveLoadThroughTheSamplerInterface) {
  DistributedSampler sampler(50, 2, 0);
  sampler.set_epoch(4);
  sampler.reset();
  EXPECT_EQ(sampler.epoch(), 4);  // chosen, not advanced
  const std::vector<int64_t> order = sampler.indices();
  const auto first = sampler.next(10);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->front(), size_t(order[0]));
  torch::serialize::OutputArchive out;
  sampler.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  DistributedSampler resumed(50, 2, 0);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  resumed.load(in);
  resumed.reset();  // what LibTorch's loader does at its next pass: the saved place is kept
  EXPECT_EQ(resumed.epoch(), 4);
  const auto next = resumed.next(100);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->size(), order.size() - 10);
  EXPECT_EQ(next->front(), size_t(order[10]));
  EXPECT_FALSE(resumed.next(1).has_value());
  sampler.reset();
  EXPECT_EQ(sampler.epoch(), 5);  // advanced by itself
  torch::serialize::InputArchive again;
  std::istringstream read_again(bytes.str());
  again.load_from(read_again);
  DistributedSampler other_rank(50, 2, 1);
  EXPECT_THROW(other_rank.load(again), InvalidArgument);
}

// A run at world size 3 stopped after 2 steps of 4 per rank; the rest of the epoch goes on at
// world size 2: every sample of the epoch is visited once (padding aside), none dropped.
TEST(DistributedSampler, TheRestOfAnEpochIsSharedOutOverANewWorld) {
  const int64_t n = 50, batch = 4, steps = 2;
  for (const bool pad : {true, false}) {
    const SamplerOptions options = SamplerOptions().seed(3).pad(pad);
    std::multiset<int64_t> seen;
    for (int r = 0; r < 3; ++r) {
      DistributedSampler old_rank(n, 3, r, options);
      old_rank.set_epoch(5);
      const std::vector<int64_t> mine = old_rank.indices();
      seen.insert(mine.begin(), mine.begin() + steps * batch);
    }
    const int64_t taken = steps * batch * 3;
    std::multiset<int64_t> rest;
    for (int r = 0; r < 2; ++r) {
      DistributedSampler new_rank(n, 2, r, options);
      new_rank.set_epoch_remainder(5, taken);
      const std::vector<int64_t> mine = new_rank.indices();
      EXPECT_EQ(int64_t(mine.size()), new_rank.num_samples());
      rest.insert(mine.begin(), mine.end());
    }
    EXPECT_EQ(int64_t(rest.size()), n - taken);                // 26 over 2 ranks: no padding needed
    for (int64_t i : rest) EXPECT_EQ(seen.count(i), 0u) << i;  // nothing seen twice
    seen.insert(rest.begin(), rest.end());
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), size_t(n));  // none dropped
    // The next epoch is whole again.
    DistributedSampler next(n, 2, 0, options);
    next.set_epoch_remainder(5, taken);
    next.set_epoch(6);
    EXPECT_EQ(next.num_samples(), 25);
  }
}

}  // namespace
}  // namespace ddp
