// The GPT against nanoGPT's (bench/nanogpt_reference.py, run by tests/python/gpt_golden.py):
// the same initial weights bit for bit after the same seed, the same logits, state dicts that
// load both ways under nanoGPT's names; and the token data sets it trains on.
#include <gtest/gtest.h>

#include <fstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "ddp/checkpoint/checkpoint.h"
#include "ddp/data/tokens.h"
#include "ddp/error.h"
#include "ddp/models/gpt.h"
#include "support/error_of.h"
#include "support/process.h"

namespace ddp {
namespace {

models::GPTConfig tiny_config() {
  models::GPTConfig c;
  c.vocab_size = 67, c.block_size = 12, c.n_layer = 3, c.n_head = 2, c.n_embd = 16;
  return c;
}

torch::Tensor fixed_input(const models::GPTConfig& c) {
  return (torch::arange(2 * c.block_size, torch::kLong) * 7).remainder(c.vocab_size).view({2, -1});
}

std::vector<std::string> config_args(const models::GPTConfig& c) {
  return {std::to_string(c.vocab_size), std::to_string(c.block_size), std::to_string(c.n_layer),
          std::to_string(c.n_head), std::to_string(c.n_embd)};
}

TEST(GPT, InitialWeightsAndLogitsEqualNanoGptsAfterTheSameSeed) {
  const models::GPTConfig config = tiny_config();
  test::TempDir dir;
  std::vector<std::string> args = {"init", dir / "python.pt", "1337"};
  for (const auto& a : config_args(config)) args.push_back(a);
  const auto python = test::run_python("gpt_golden.py", args);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  auto reference = read_state_dict(dir / "python.pt");

  torch::manual_seed(1337);
  models::GPT gpt(config);
  size_t compared = 0;
  for (const auto& p : gpt->named_parameters()) {
    ASSERT_TRUE(reference.count(p.key())) << p.key() << " is not one of nanoGPT's names";
    EXPECT_TRUE(torch::equal(p.value(), reference.at(p.key()))) << p.key();
    ++compared;
  }
  EXPECT_EQ(compared + 1, reference.size());  // every name but "logits"
  EXPECT_EQ(gpt->lm_head->weight.data_ptr(), gpt->transformer->wte->weight.data_ptr());
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = gpt->forward(fixed_input(config));
  EXPECT_TRUE(torch::allclose(logits, reference.at("logits"), 1e-5, 1e-6))
      << (logits - reference.at("logits")).abs().max().item<double>();
}

TEST(GPT, ExportedWeightsLoadIntoNanoGptWithTheSameLogits) {
  const models::GPTConfig config = tiny_config();
  test::TempDir dir;
  torch::manual_seed(3);
  models::GPT gpt(config);
  export_state_dict(dir / "ours.pt", *gpt);
  const auto python = test::run_python(
      "gpt_golden.py", {"load", dir / "ours.pt", dir / "logits.pt", std::to_string(config.n_head)});
  ASSERT_EQ(python.exit_code, 0) << python.output;
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(gpt->forward(fixed_input(config)),
                              read_state_dict(dir / "logits.pt").at("logits"), 1e-5, 1e-6));

  // And back: nanoGPT's state dict (with both tied names) into a fresh model.
  std::vector<std::string> args = {"init", dir / "python.pt", "5"};
  for (const auto& a : config_args(config)) args.push_back(a);
  ASSERT_EQ(test::run_python("gpt_golden.py", args).exit_code, 0);
  auto state = read_state_dict(dir / "python.pt");
  state.erase("logits");
  models::GPT loaded(config);
  load_state_dict(*loaded, state, dir / "python.pt");
  EXPECT_TRUE(torch::equal(loaded->transformer->h[1]->mlp->c_fc->weight,
                           state.at("transformer.h.1.mlp.c_fc.weight")));
  EXPECT_EQ(loaded->lm_head->weight.data_ptr(), loaded->transformer->wte->weight.data_ptr());
}

TEST(GPT, CausalAttentionIgnoresTheFuture) {
  torch::manual_seed(0);
  models::GPT gpt(tiny_config());
  torch::NoGradGuard no_grad;
  torch::Tensor a = fixed_input(tiny_config());
  torch::Tensor b = a.clone();
  b.select(1, 11).fill_(5);  // only the last position differs
  const torch::Tensor la = gpt->forward(a), lb = gpt->forward(b);
  EXPECT_TRUE(torch::equal(la.narrow(1, 0, 11), lb.narrow(1, 0, 11)));
  EXPECT_FALSE(torch::equal(la.narrow(1, 11, 1), lb.narrow(1, 11, 1)));
}

TEST(GPT, NamedConfigurationsAndBadShapesAreChecked) {
  const auto nano = models::GPTConfig::named("gpt-nano", 65);
  EXPECT_EQ(nano.n_layer, 6);
  EXPECT_EQ(nano.n_embd, 384);
  const auto gpt2 = models::GPTConfig::named("gpt2", 50257);
  torch::manual_seed(0);
  EXPECT_EQ(models::GPT(gpt2)->num_parameters(), 123653376);  // nanoGPT prints "123.65M"
  EXPECT_NE(test::error_of<InvalidArgument>([] {
              models::GPTConfig::named("gpt5", 1);
            }).find("gpt-nano, gpt2 or gpt2-medium"),
            std::string::npos);
  models::GPTConfig odd = tiny_config();
  odd.n_head = 3;  // 16 is not a multiple of 3
  EXPECT_NE(test::error_of<InvalidArgument>([&] { models::GPT{odd}; }).find("multiple"),
            std::string::npos);
  models::GPT gpt(tiny_config());
  EXPECT_NE(test::error_of<InvalidArgument>([&] {
              gpt->forward(torch::zeros({1, 13}, torch::kLong));
            }).find("longer than the context (12)"),
            std::string::npos);
}

TEST(GPT, SamplingIsSeededAndKeepsThePrompt) {
  torch::manual_seed(0);
  models::GPT gpt(tiny_config());
  auto forward = [&gpt](const torch::Tensor& x) { return gpt->forward(x); };
  models::SamplingOptions options;
  options.max_new_tokens = 20;  // beyond the context of 12: the window slides
  options.top_k = 5;
  options.seed = 9;
  const torch::Tensor prompt = torch::tensor({{3, 1, 4}}, torch::kLong);
  const torch::Tensor a = models::generate(forward, prompt, 12, options);
  const torch::Tensor b = models::generate(forward, prompt, 12, options);
  ASSERT_EQ(a.size(1), 23);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_TRUE(torch::equal(a.narrow(1, 0, 3), prompt));
  options.seed = 10;
  EXPECT_FALSE(torch::equal(models::generate(forward, prompt, 12, options), a));
}

// --- token data sets ----------------------------------------------------------------------------

void write_raw(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

void write_llmc(const std::string& path, const std::vector<uint16_t>& tokens, int32_t version = 1) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = version, header[2] = int32_t(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

std::vector<uint16_t> counting(uint16_t from, int n) {
  std::vector<uint16_t> t;
  for (int i = 0; i < n; ++i) t.push_back(uint16_t(from + i));
  return t;
}

TEST(Tokens, ReadsNanoGptFilesAndLlmcShardsAsOneSequence) {
  test::TempDir raw;
  write_raw(raw / "train.bin", counting(0, 100));
  write_raw(raw / "val.bin", counting(100, 20));
  std::ofstream(raw / "meta.json") << "{\"vocab_size\": 300}";
  auto d = data::TokenDataset::open(raw.path());
  EXPECT_EQ(d.format, "nanoGPT");
  EXPECT_EQ(d.vocab_size, 300);
  EXPECT_EQ(d.train.size(), 100);
  EXPECT_TRUE(torch::equal(d.val.slice(3, 4), torch::tensor({103, 104, 105, 106}, torch::kLong)));

  test::TempDir llmc;
  write_llmc(llmc / "tiny_train_000001.bin", counting(0, 50));
  write_llmc(llmc / "tiny_train_000002.bin", counting(50, 50));
  write_llmc(llmc / "tiny_val_000000.bin", counting(7, 30));
  auto l = data::TokenDataset::open(llmc.path());
  EXPECT_EQ(l.format, "llm.c");
  EXPECT_EQ(l.vocab_size, 50257);
  EXPECT_EQ(l.train.size(), 100);
  // A window across the two shards reads on from one into the next.
  EXPECT_TRUE(torch::equal(l.train.slice(48, 4), torch::tensor({48, 49, 50, 51}, torch::kLong)));
}

TEST(Tokens, WindowsDependOnSeedRankAndBatchOnly) {
  test::TempDir dir;
  write_raw(dir / "train.bin", counting(0, 1000));
  write_raw(dir / "val.bin", counting(0, 100));
  auto d = data::TokenDataset::open(dir.path());
  const data::TokenWindows rank0(d.train, 16, 4, 1337, 0), rank1(d.train, 16, 4, 1337, 1);
  auto [x, y] = rank0.batch(5);
  EXPECT_TRUE(torch::equal(y, x + 1));  // the targets are the inputs shifted by one
  EXPECT_TRUE(torch::equal(rank0.batch(5).first, x));
  EXPECT_FALSE(torch::equal(rank1.batch(5).first, x));
  EXPECT_FALSE(torch::equal(rank0.batch(6).first, x));
  // Batch k's starts: torch.randint(size - block, (B,)) from a generator seeded
  // seed + 1000003·rank + 7919·k, as bench/nanogpt_reference.py draws them.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1337 + 1000003 * 1 + 7919 * 5);
  const torch::Tensor starts = torch::randint(1000 - 16, {4}, generator, torch::kLong);
  EXPECT_TRUE(torch::equal(rank1.batch(5).first.select(1, 0), starts));
}

TEST(Tokens, BadDataIsNamed) {
  test::TempDir dir;
  EXPECT_NE(test::error_of<IoError>([&] {
              data::TokenDataset::open(dir.path());
            }).find("make-data --tokens"),
            std::string::npos);
  write_llmc(dir / "x_train.bin", counting(0, 50), 2);
  write_llmc(dir / "x_val.bin", counting(0, 50));
  EXPECT_NE(
      test::error_of<DataError>([&] { data::TokenDataset::open(dir.path()); }).find("version 2"),
      std::string::npos);
  test::TempDir odd;
  std::ofstream(odd / "train.bin") << "abc";  // 3 bytes
  write_raw(odd / "val.bin", counting(0, 10));
  EXPECT_NE(test::error_of<DataError>([&] {
              data::TokenDataset::open(odd.path());
            }).find("not a whole number of uint16 tokens"),
            std::string::npos);
  test::TempDir big;
  write_raw(big / "train.bin", counting(250, 10));
  write_raw(big / "val.bin", counting(0, 10));
  std::ofstream(big / "meta.json") << "{\"vocab_size\": 256}";
  EXPECT_NE(
      test::error_of<DataError>([&] { data::TokenDataset::open(big.path()); }).find("token 259"),
      std::string::npos);
  test::TempDir small;
  write_raw(small / "train.bin", counting(0, 10));
  write_raw(small / "val.bin", counting(0, 10));
  auto d = data::TokenDataset::open(small.path());
  EXPECT_NE(test::error_of<DataError>([&] {
              data::TokenWindows(d.train, 10, 2, 0, 0);
            }).find("shorter --block-size"),
            std::string::npos);
}

TEST(Tokens, ByteTokensOfATextFileSplitNinetyTen) {
  test::TempDir dir;
  std::ofstream(dir / "text.txt") << std::string(1000, 'a') + std::string(100, 'z');
  const auto [train, val] = data::write_byte_tokens(dir / "text.txt", dir / "set");
  EXPECT_EQ(train, 990);
  EXPECT_EQ(val, 110);
  auto d = data::TokenDataset::open(dir / "set");
  EXPECT_EQ(d.vocab_size, 256);
  EXPECT_EQ(d.val.slice(109, 1).item<int64_t>(), 'z');
}

}  // namespace
}  // namespace ddp
