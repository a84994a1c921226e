// The GPU path: NCCL process groups on a CUDA device, CPU-side tensors moved through the device,
// and DistributedDataParallel with its buckets on the GPU. Skipped where LibTorch has no CUDA or
// no GPU is visible (Debian's 1.13 here); scripts/gpu-check.sh runs them on a GPU machine. With
// one GPU the world is one rank (NCCL refuses two ranks on one device), which still goes through
// every NCCL call.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "ddp/ddp.h"
#include "ddp/error.h"
#include "ddp/process_group.h"
#include "support/net_copy.h"

namespace ddp {
namespace {

bool gpu_with_nccl() { return torch::cuda::is_available() && ProcessGroup::has_backend("nccl"); }

std::shared_ptr<ProcessGroup> nccl_world_of_one() {
  ProcessGroupOptions options;
  options.backend("nccl");
  options.device(torch::Device(torch::kCUDA, 0));
  return ProcessGroup::init_with_store(c10::make_intrusive<c10d::HashStore>(), 0, 1, options);
}

TEST(Gpu, NcclNeedsAGpuDevice) {
  ProcessGroupOptions options;
  options.backend("nccl");  // device left at the CPU
  try {
    ProcessGroup::init_with_store(c10::make_intrusive<c10d::HashStore>(), 0, 1, options);
    FAIL() << "nccl on the CPU was accepted";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    // Without NCCL in this LibTorch the backend itself is refused; with it, the CPU device.
    EXPECT_NE(message.find(ProcessGroup::has_backend("nccl") ? "moves GPU tensors only"
                                                             : "built without CUDA/NCCL"),
              std::string::npos)
        << message;
  }
}

TEST(Gpu, NcclMovesCpuTensorsThroughTheDevice) {
  if (!gpu_with_nccl()) GTEST_SKIP() << "needs a GPU and a LibTorch with NCCL";
  auto group = nccl_world_of_one();
  EXPECT_EQ(group->device(), torch::Device(torch::kCUDA, 0));
  torch::Tensor flags = torch::tensor({int64_t(3), int64_t(4)});
  group->allreduce(flags).wait();
  EXPECT_TRUE(flags.device().is_cpu());
  EXPECT_TRUE(torch::equal(flags, torch::tensor({int64_t(3), int64_t(4)})));
  torch::Tensor value = torch::tensor({2.5});
  group->broadcast(value, 0).wait();
  group->allreduce_max(value).wait();
  EXPECT_EQ(value.item<double>(), 2.5);
  const auto gathered = group->allgather(torch::tensor({int32_t(7)}));
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(gathered[0].device().is_cpu());
  EXPECT_EQ(gathered[0].item<int32_t>(), 7);
  group->barrier();
}

TEST(Gpu, DdpOnNcclGivesTheLocalGradientsWithBucketsOnTheGpu) {
  if (!gpu_with_nccl()) GTEST_SKIP() << "needs a GPU and a LibTorch with NCCL";
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(0);
  const models::Net initial(1, 16, 10);
  models::Net wrapped = test::copy_of(initial), local = test::copy_of(initial);
  wrapped->to(gpu);
  local->to(gpu);
  DistributedDataParallel ddp(wrapped, nccl_world_of_one(), DDPOptions().first_bucket_cap_mb(0.01));
  const torch::Tensor x = torch::rand({8, 1, 16, 16}).to(gpu);
  const torch::Tensor y = torch::randint(10, {8}, torch::kLong).to(gpu);
  torch::nn::functional::cross_entropy(ddp.forward(x), y).backward();
  torch::nn::functional::cross_entropy(local->forward(x), y).backward();
  for (size_t i = 0; i < local->parameters().size(); ++i) {
    const torch::Tensor g = wrapped->parameters()[i].grad();
    EXPECT_TRUE(g.is_cuda()) << "parameter " << i;
    EXPECT_TRUE(torch::allclose(g, local->parameters()[i].grad(), 1e-5, 1e-6)) << "parameter " << i;
  }
  EXPECT_GT(ddp.stats().bytes_communicated_per_iteration, 0);
}

}  // namespace
}  // namespace ddp
