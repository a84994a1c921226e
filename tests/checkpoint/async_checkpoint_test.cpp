// The background checkpoint writer: the file holds the state as it was at write(), not as
// training changed it afterwards; a write that fails is reported by wait(); the previous file
// is never left half-written.
#include <gtest/gtest.h>

#include <filesystem>

#include <torch/torch.h>

#include "ddp/checkpoint/async_checkpoint.h"
#include "ddp/error.h"
#include "support/process.h"

namespace ddp {
namespace {

TEST(AsyncCheckpointWriter, WritesTheStateAsItWasAtWrite) {
  test::TempDir dir;
  torch::nn::Linear model(4, 3);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  model(torch::ones({2, 4})).sum().backward();
  optimizer.step();
  const torch::Tensor before = model->weight.detach().clone();
  AsyncCheckpointWriter writer(/*keep=*/2);
  CheckpointState state;
  state.epoch = 1;
  state.step_in_epoch = 7;
  writer.write(checkpoint_path(dir.path(), 1, 7), *model, optimizer, state);
  {
    torch::NoGradGuard no_grad;
    model->weight.add_(1);  // training goes on while the file is written
  }
  writer.wait();
  torch::nn::Linear loaded(4, 3);
  torch::optim::SGD reloaded(loaded->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const CheckpointState read =
      load_checkpoint(checkpoint_path(dir.path(), 1, 7), *loaded, &reloaded);
  EXPECT_TRUE(torch::equal(loaded->weight, before));
  EXPECT_EQ(read.step_in_epoch, 7);
  EXPECT_EQ(latest_checkpoint(dir.path()), checkpoint_path(dir.path(), 1, 7));
  // Newer: the epoch's end, then a step of the next epoch; --keep 2 leaves the last two.
  writer.write(checkpoint_path(dir.path(), 2), *model, optimizer, {});
  writer.write(checkpoint_path(dir.path(), 2, 3), *model, optimizer, {});
  writer.wait();
  EXPECT_FALSE(std::filesystem::exists(checkpoint_path(dir.path(), 1, 7)));
  EXPECT_EQ(latest_checkpoint(dir.path()), checkpoint_path(dir.path(), 2, 3));
}

TEST(AsyncCheckpointWriter, AFailedWriteIsReportedByWait) {
  test::TempDir dir;
  torch::nn::Linear model(2, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  AsyncCheckpointWriter writer;
  writer.write(dir / "missing/folder/c.pt", *model, optimizer, {});
  EXPECT_THROW(writer.wait(), IoError);
  writer.wait();  // reported once
}

}  // namespace
}  // namespace ddp
