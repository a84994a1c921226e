// FullyShardedDataParallel against DistributedDataParallel on the same ranks and data: the same
// losses and final weights with AdamW and clipping, for a model with tied weights, an unused
// parameter and rows that do not divide by the ranks; gradient accumulation without
// communication; mixed precision; and the memory each rank holds, 1/N of DDP's.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <optional>

#include "ddp/ddp.h"
#include "ddp/error.h"
#include "ddp/fsdp/fully_shard.h"
#include "ddp/models/gpt.h"
#include "ddp/optim/zero.h"
#include "support/error_of.h"
#include "support/process.h"

namespace ddp {
namespace {

constexpr int64_t kVocab = 11;  // rows of the tied embedding: 6 + 5 on 2 ranks, 3+3+3+2 on 4
constexpr int64_t kWidth = 10;

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width, int64_t hidden)
      : ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        fc(register_module("fc", torch::nn::Linear(width, hidden))),
        proj(register_module("proj", torch::nn::Linear(hidden, width))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + proj(torch::gelu(fc(ln(x)), "tanh")); }
  torch::nn::LayerNorm ln;
  torch::nn::Linear fc, proj;
};
TORCH_MODULE(Block);

// Token embedding, blocks, a head tied to the embedding, and a parameter nothing uses.
struct ToyImpl : torch::nn::Module {
  explicit ToyImpl(int64_t width = kWidth, int64_t hidden = 9, int blocks = 2) {
    wte = register_module("wte", torch::nn::Embedding(kVocab, width));
    for (int i = 0; i < blocks; ++i) {
      this->blocks.push_back(register_module(c10::str("h", i), Block(width, hidden)));
    }
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    unused = register_parameter("unused", torch::randn({5}));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor x = wte(tokens);
    for (auto& block : blocks) x = ddp::call(block, x);
    return torch::nn::functional::linear(ln_f(x), wte->weight);  // tied head
  }
  std::vector<std::shared_ptr<torch::nn::Module>> block_modules() const {
    std::vector<std::shared_ptr<torch::nn::Module>> out;
    for (const auto& block : blocks) out.push_back(block.ptr());
    return out;
  }
  torch::nn::Embedding wte{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::Tensor unused;
};
TORCH_MODULE(Toy);

// A copy of `source`'s parameters in a fresh model of the same shape.
Toy copy_of(const Toy& source, int64_t width = kWidth, int64_t hidden = 9, int blocks = 2) {
  Toy toy(width, hidden, blocks);
  torch::NoGradGuard no_grad;
  auto from = source->named_parameters();
  for (auto& p : toy->named_parameters()) p.value().copy_(from[p.key()]);
  return toy;
}

struct Batches {
  std::vector<torch::Tensor> tokens, targets;  // [steps][world × 3, 4]
};

Batches make_batches(int steps, int world) {
  Batches b;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  for (int s = 0; s < steps; ++s) {
    b.tokens.push_back(torch::randint(kVocab, {world * 3, 4}, generator, torch::kLong));
    b.targets.push_back(torch::randint(kVocab, {world * 3, 4}, generator, torch::kLong));
  }
  return b;
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}).to(torch::kFloat),
                                              targets.reshape({-1}));
}

torch::Tensor rows_of(const torch::Tensor& t, int rank) { return t.narrow(0, rank * 3, 3); }

// AdamW with clipping (how transformers train), or SGD with momentum and no clipping, whose
// steps, unlike Adam's, are proportional to the gradients: a sum where an average belongs shows.
enum class Optim { kAdamWClipped, kSgd };

std::unique_ptr<torch::optim::Optimizer> make_optimizer(Optim kind,
                                                        std::vector<torch::Tensor> params) {
  if (kind == Optim::kSgd) {
    return std::make_unique<torch::optim::SGD>(std::move(params),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  return std::make_unique<torch::optim::AdamW>(std::move(params),
                                               torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
}

torch::optim::AdamW adamw(std::vector<torch::Tensor> params) {
  return torch::optim::AdamW(std::move(params), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> weights;
};

Trained train_ddp(const Toy& initial, const Batches& b, int rank,
                  std::shared_ptr<ProcessGroup> group, Optim kind = Optim::kAdamWClipped) {
  Toy toy = copy_of(initial);
  DistributedDataParallel<ToyImpl> model(toy, group, DDPOptions().find_unused_parameters(true));
  auto opt = make_optimizer(kind, model.parameters());
  Trained run;
  for (size_t s = 0; s < b.tokens.size(); ++s) {
    opt->zero_grad();
    auto loss = loss_of(model.forward(rows_of(b.tokens[s], rank)), rows_of(b.targets[s], rank));
    loss.backward();
    if (kind == Optim::kAdamWClipped) torch::nn::utils::clip_grad_norm_(model.parameters(), 0.5);
    opt->step();
    run.losses.push_back(loss.item<double>());
  }
  for (const auto& p : toy->named_parameters()) run.weights[p.key()] = p.value().detach().clone();
  return run;
}

Trained train_fsdp(const Toy& initial, const Batches& b, int rank,
                   std::shared_ptr<ProcessGroup> group, FSDPOptions options,
                   Optim kind = Optim::kAdamWClipped) {
  Toy toy = copy_of(initial);
  FullyShardedDataParallel<ToyImpl> model(toy.ptr(), toy->block_modules(), group,
                                          options.find_unused_parameters(true));
  auto opt = make_optimizer(kind, model.parameters());
  Trained run;
  for (size_t s = 0; s < b.tokens.size(); ++s) {
    opt->zero_grad();
    auto loss = loss_of(model.forward(rows_of(b.tokens[s], rank)), rows_of(b.targets[s], rank));
    loss.backward();
    if (kind == Optim::kAdamWClipped) model.clip_grad_norm_(0.5);
    opt->step();
    run.losses.push_back(loss.item<double>());
  }
  for (const auto& p : model.full_state_dict()) run.weights[p.key()] = p.value();
  return run;
}

void expect_same(const Trained& fsdp, const Trained& ddp, double tolerance) {
  ASSERT_EQ(fsdp.losses.size(), ddp.losses.size());
  for (size_t s = 0; s < ddp.losses.size(); ++s) {
    EXPECT_NEAR(fsdp.losses[s], ddp.losses[s], tolerance) << "step " << s;
  }
  ASSERT_EQ(fsdp.weights.size(), ddp.weights.size());
  for (const auto& [name, w] : ddp.weights) {
    ASSERT_TRUE(fsdp.weights.count(name)) << name;
    EXPECT_TRUE(torch::allclose(fsdp.weights.at(name), w, 0, tolerance))
        << name << ": largest difference "
        << (fsdp.weights.at(name) - w).abs().max().item<double>();
  }
}

void expect_same_as_ddp(int world, FSDPOptions options, Optim kind) {
  torch::manual_seed(0);
  const Toy initial;
  const Batches batches = make_batches(6, world);
  std::vector<Trained> ddp(world), fsdp(world);
  const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    ddp[size_t(rank)] = train_ddp(initial, batches, rank, group, kind);
    fsdp[size_t(rank)] = train_fsdp(initial, batches, rank, group, options, kind);
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  for (int r = 0; r < world; ++r) expect_same(fsdp[size_t(r)], ddp[size_t(r)], 1e-5);
  // The unused parameter got no gradient anywhere, so AdamW left it alone, as in DDP.
  EXPECT_TRUE(torch::equal(fsdp[0].weights.at("unused"), initial->unused));
}

TEST(FullyShard, SameLossesAndWeightsAsDdpOnTwoRanks) {
  expect_same_as_ddp(2, FSDPOptions(), Optim::kAdamWClipped);
  expect_same_as_ddp(2, FSDPOptions(), Optim::kSgd);
}

TEST(FullyShard, SameLossesAndWeightsAsDdpOnFourRanks) {
  expect_same_as_ddp(4, FSDPOptions(), Optim::kAdamWClipped);
  expect_same_as_ddp(4, FSDPOptions(), Optim::kSgd);
}

TEST(FullyShard, SameWithoutReshardingOrPrefetch) {
  expect_same_as_ddp(2, FSDPOptions().reshard_after_forward(false).prefetch(false), Optim::kSgd);
}

TEST(FullyShard, ShardsAreTorchChunksRows) {
  torch::manual_seed(0);
  const Toy initial;
  const auto errors = test::run_ranks(4, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    Toy toy = copy_of(initial);
    FullyShardedDataParallel<ToyImpl> model(toy.ptr(), toy->block_modules(), group);
    const auto names = model.state().unit_parameter_names();
    ASSERT_EQ(names.size(), 3u);  // two blocks, then the root
    EXPECT_EQ(names[0].first, "h0");
    EXPECT_EQ(names[2].first, "(root)");
    EXPECT_EQ(names[2].second,
              (std::vector<std::string>{"unused", "wte.weight", "ln_f.weight", "ln_f.bias"}));
    for (const auto& [name, shard] : model.named_parameters()) {
      const torch::Tensor whole = initial->named_parameters()[name];
      auto chunks = whole.chunk(4, 0);
      const torch::Tensor expected =
          size_t(rank) < chunks.size() ? chunks[size_t(rank)] : whole.narrow(0, 0, 0);
      EXPECT_TRUE(torch::equal(shard, expected)) << name << " on rank " << rank;
    }
    // The module's own tensors hold nothing while sharded.
    EXPECT_EQ(toy->blocks[0]->fc->weight.storage().nbytes(), 0u);
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
}

TEST(FullyShard, AccumulatesWithoutCommunicationUntilSyncIsBack) {
  const int world = 2;
  torch::manual_seed(0);
  const Toy initial;
  const Batches b = make_batches(2, world);
  const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    Toy plain = copy_of(initial);
    DistributedDataParallel<ToyImpl> ddp(plain, group, DDPOptions().find_unused_parameters(true));
    {
      auto guard = ddp.no_sync();
      loss_of(ddp.forward(rows_of(b.tokens[0], rank)), rows_of(b.targets[0], rank)).backward();
    }
    loss_of(ddp.forward(rows_of(b.tokens[1], rank)), rows_of(b.targets[1], rank)).backward();

    Toy toy = copy_of(initial);
    FullyShardedDataParallel<ToyImpl> fsdp(toy.ptr(), toy->block_modules(), group,
                                           FSDPOptions().find_unused_parameters(true));
    fsdp.set_requires_gradient_sync(false);
    const int64_t before = group->recorder().issued();
    loss_of(fsdp.forward(rows_of(b.tokens[0], rank)), rows_of(b.targets[0], rank)).backward();
    const int64_t gathers = 3;  // one per unit in forward; the root stays gathered for backward
    const int64_t regathers = 2;
    EXPECT_EQ(group->recorder().issued() - before, gathers + regathers);  // no reduce-scatter
    for (const auto& shard : fsdp.parameters()) EXPECT_FALSE(shard.grad().defined());
    fsdp.set_requires_gradient_sync(true);
    loss_of(fsdp.forward(rows_of(b.tokens[1], rank)), rows_of(b.targets[1], rank)).backward();

    const auto reference = plain->named_parameters();
    for (const auto& [name, shard] : fsdp.named_parameters()) {
      if (name == "unused") continue;
      const torch::Tensor grad = reference[name].grad().reshape({reference[name].size(0), -1});
      const auto rows = grad.chunk(world, 0);
      EXPECT_TRUE(torch::allclose(shard.grad().reshape({shard.size(0), -1}), rows[size_t(rank)],
                                  1e-5, 1e-6))
          << name;
    }
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
}

TEST(FullyShard, MixedPrecisionGathersInBfloat16AndKeepsFloat32Shards) {
  const int world = 2;
  torch::manual_seed(0);
  const Toy initial;
  const Batches b = make_batches(3, world);
  for (auto reduce : {torch::kFloat, torch::kHalf}) {
    std::vector<Trained> ddp(world), fsdp(world);
    const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
      ddp[size_t(rank)] = train_ddp(initial, b, rank, group);
      const auto policy = MixedPrecisionPolicy().param_dtype(torch::kBFloat16).reduce_dtype(reduce);
      {
        // Gathered (the module's tensors) in bf16; the shards the optimizer steps in fp32.
        Toy toy = copy_of(initial);
        FullyShardedDataParallel<ToyImpl> model(toy.ptr(), toy->block_modules(), group,
                                                FSDPOptions().mixed_precision(policy));
        model.unshard();
        EXPECT_EQ(toy->blocks[0]->fc->weight.scalar_type(), torch::kBFloat16);
        EXPECT_EQ(model.parameters()[0].scalar_type(), torch::kFloat);
        model.reshard();
      }
      fsdp[size_t(rank)] =
          train_fsdp(initial, b, rank, group, FSDPOptions().mixed_precision(policy));
    });
    for (const auto& e : errors) ASSERT_EQ(e, "");
    // bfloat16 keeps 8 bits of mantissa: the same training to about 1%.
    expect_same(fsdp[0], ddp[0], 3e-2);
    EXPECT_EQ(fsdp[0].weights.at("wte.weight").scalar_type(), torch::kFloat);
  }
}

TEST(FullyShard, EachRankHoldsAQuarterOfTheStateOnFourRanks) {
  const int64_t width = 64, hidden = 256;
  torch::manual_seed(0);
  const Toy initial(width, hidden, 4);
  const Batches b = make_batches(1, 4);
  struct Held {
    int64_t state = 0;  // parameters + gradients + AdamW's state
    int64_t peak_unsharded = 0;
  };
  std::vector<Held> ddp(4), fsdp(4);
  const auto errors = test::run_ranks(4, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    auto step = [&](std::vector<torch::Tensor> params, auto forward) {
      auto opt = adamw(params);
      loss_of(forward(rows_of(b.tokens[0], rank)), rows_of(b.targets[0], rank)).backward();
      opt.step();
      int64_t bytes = optimizer_state_bytes(opt);
      for (const auto& p : params) {
        bytes += p.numel() * p.element_size();
        if (p.grad().defined()) bytes += p.grad().numel() * p.grad().element_size();
      }
      return bytes;
    };
    Toy plain = copy_of(initial, width, hidden, 4);
    DistributedDataParallel<ToyImpl> d(plain, group, DDPOptions().find_unused_parameters(true));
    ddp[size_t(rank)].state =
        step(d.parameters(), [&](const torch::Tensor& x) { return d.forward(x); });

    Toy toy = copy_of(initial, width, hidden, 4);
    FullyShardedDataParallel<ToyImpl> f(toy.ptr(), toy->block_modules(), group,
                                        FSDPOptions().find_unused_parameters(true));
    fsdp[size_t(rank)].state =
        step(f.parameters(), [&](const torch::Tensor& x) { return f.forward(x); });
    fsdp[size_t(rank)].peak_unsharded = f.memory().peak_unsharded_bytes;
    EXPECT_EQ(f.memory().unsharded_bytes, 0);  // all freed at the end of backward
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  // A quarter, but for padding (a shard has at most one row more than a quarter of the rows:
  // 1,363 elements of rows here, in four tensors of 4 bytes) and the optimizer's per-tensor
  // overhead (its step counts, the serialised headers optimizer_state_bytes includes).
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) {
    total += fsdp[size_t(r)].state;
    EXPECT_LE(fsdp[size_t(r)].state, ddp[size_t(r)].state / 4 + 64 * 1024) << "rank " << r;
  }
  EXPECT_LE(total, ddp[0].state + 4 * 64 * 1024);
  // At most the root and two blocks are gathered at once (the one running and the prefetched
  // one), never the whole model.
  const int64_t block_bytes = (2 * width * hidden + hidden + 3 * width) * 4;
  EXPECT_LT(fsdp[0].peak_unsharded, ddp[0].state / 3);
  EXPECT_GE(fsdp[0].peak_unsharded, 2 * block_bytes);
}

TEST(FullyShard, RefusesUnitsOutsideTheModelListedTwiceOrShardedAgain) {
  const auto errors = test::run_ranks(1, [&](int, std::shared_ptr<ProcessGroup> group) {
    Toy toy;
    Block stranger(kWidth, 9);
    EXPECT_NE(test::error_of<InvalidArgument>([&] {
                FullyShardedDataParallel<ToyImpl>(toy.ptr(), {stranger.ptr()}, group);
              }).find("unit 0 is not a submodule"),
              std::string::npos);
    {
      FullyShardedDataParallel<ToyImpl> first(toy.ptr(), toy->block_modules(), group);
      EXPECT_NE(test::error_of<InvalidArgument>([&] {
                  FullyShardedDataParallel<ToyImpl>(toy.ptr(), toy->block_modules(), group);
                }).find("is sharded already"),
                std::string::npos);
      // ... and the first still works.
      torch::NoGradGuard no_grad;
      EXPECT_EQ(first.forward(torch::zeros({1, 3}, torch::kLong)).size(2), kVocab);
    }
    auto units = toy->block_modules();
    units.push_back(units[0]);
    EXPECT_NE(test::error_of<InvalidArgument>([&] {
                FullyShardedDataParallel<ToyImpl>(toy.ptr(), units, group);
              }).find("unit h0 is listed twice"),
              std::string::npos);
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
}

// Frozen weights (as under LoRA) have no gradient to wait for, but their unit's backward still
// multiplies by them: the unit must stay gathered until backward has left it.
TEST(FullyShard, FrozenParametersStayGatheredUntilBackwardHasLeftTheirUnit) {
  const int world = 2;
  torch::manual_seed(0);
  const Toy initial;
  const Batches b = make_batches(3, world);
  auto freeze = [](Toy& toy) {
    toy->blocks[0]->fc->weight.set_requires_grad(false);
    // h1 trains its output projection only: its gradients are all in before backward reaches
    // fc, whose input gradient still needs fc's weight.
    for (auto* p : {&toy->blocks[1]->ln->weight, &toy->blocks[1]->ln->bias,
                    &toy->blocks[1]->fc->weight, &toy->blocks[1]->fc->bias}) {
      p->set_requires_grad(false);
    }
  };
  std::vector<Trained> ddp(world), fsdp(world);
  const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    for (bool sharded : {false, true}) {
      Toy toy = copy_of(initial);
      freeze(toy);
      std::optional<DistributedDataParallel<ToyImpl>> d;
      std::optional<FullyShardedDataParallel<ToyImpl>> f;
      if (sharded) {
        f.emplace(toy.ptr(), toy->block_modules(), group,
                  FSDPOptions().find_unused_parameters(true));
      } else {
        d.emplace(toy, group, DDPOptions().find_unused_parameters(true));
      }
      std::vector<torch::Tensor> params;
      for (const auto& p : sharded ? f->parameters() : d->parameters()) {
        if (p.requires_grad()) params.push_back(p);
      }
      torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1).momentum(0.9));
      Trained& run = (sharded ? fsdp : ddp)[size_t(rank)];
      for (size_t s = 0; s < b.tokens.size(); ++s) {
        opt.zero_grad();
        const torch::Tensor x = rows_of(b.tokens[s], rank);
        auto loss = loss_of(sharded ? f->forward(x) : d->forward(x), rows_of(b.targets[s], rank));
        loss.backward();
        opt.step();
        run.losses.push_back(loss.item<double>());
      }
      if (sharded) {
        for (const auto& p : f->full_state_dict()) run.weights[p.key()] = p.value();
      } else {
        for (const auto& p : toy->named_parameters())
          run.weights[p.key()] = p.value().detach().clone();
      }
    }
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  expect_same(fsdp[0], ddp[0], 1e-5);
  EXPECT_TRUE(torch::equal(fsdp[0].weights.at("h0.fc.weight"), initial->blocks[0]->fc->weight));
}

TEST(FullyShard, RefusesAWeightTiedAcrossUnitsAndUnitsListedTopDown) {
  const auto errors = test::run_ranks(1, [&](int, std::shared_ptr<ProcessGroup> group) {
    models::GPTConfig config;
    config.vocab_size = 16, config.block_size = 8, config.n_layer = 2, config.n_head = 2,
    config.n_embd = 8;
    models::GPT gpt(config);
    auto units = gpt->blocks();
    units.push_back(gpt->transformer->wte.ptr());  // lm_head, in the root, holds its weight too
    EXPECT_NE(test::error_of<InvalidArgument>([&] {
                FullyShardedDataParallel<models::GPTImpl>(gpt.ptr(), units, group);
              }).find("lm_head.weight of lm_head is tied to one of unit transformer.wte"),
              std::string::npos);
    EXPECT_NE(test::error_of<InvalidArgument>([&] {
                FullyShardedDataParallel<models::GPTImpl>(
                    gpt.ptr(), {gpt->blocks()[0], gpt->transformer->h[0]->mlp.ptr()}, group);
              }).find("list the units bottom-up"),
              std::string::npos);
    // Nothing was touched: the model still runs unsharded.
    EXPECT_EQ(gpt->forward(torch::zeros({1, 4}, torch::kLong)).size(2), 16);
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
}

TEST(FullyShard, ParametersWithoutGradientAreNamedUnlessUnusedAreExpected) {
  const auto errors = test::run_ranks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    torch::manual_seed(0);
    Toy toy;
    FullyShardedDataParallel<ToyImpl> model(toy.ptr(), toy->block_modules(), group);
    const Batches b = make_batches(1, 2);
    const std::string error = test::error_of<InvalidArgument>([&] {
      loss_of(model.forward(rows_of(b.tokens[0], rank)), rows_of(b.targets[0], rank)).backward();
    });
    EXPECT_NE(error.find("these parameters received no gradient: unused"), std::string::npos)
        << error;
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
}

}  // namespace
}  // namespace ddp
