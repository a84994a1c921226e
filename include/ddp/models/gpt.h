// GPT-2's architecture as nanoGPT writes it (model.py): learned positions, pre-LayerNorm blocks,
// causal self-attention through scaled_dot_product_attention, a GELU (tanh) MLP, and an lm_head
// tied to the token embedding. Parameter names are nanoGPT's ("transformer.h.0.attn.c_attn.weight",
// "lm_head.weight"), so its state dicts load here and ours load there; built after
// torch::manual_seed(s), the weights equal nanoGPT's built after the same seed, bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace ddp::models {

struct GPTConfig {
  int64_t block_size = 256;  ///< the longest context
  int64_t vocab_size = 256;
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;

  /// "gpt-nano" (nanoGPT's shakespeare-char: 6 layers, 6 heads, 384 wide, context 256), "gpt2"
  /// (124M: 12, 12, 768, 1024) or "gpt2-medium" (350M: 24, 16, 1024, 1024), for `vocab_size`
  /// tokens. Throws InvalidArgument for another name.
  static GPTConfig named(const std::string& name, int64_t vocab_size);
  /// The names named() knows.
  static std::vector<std::string> names();
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GPTConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};

 private:
  int64_t n_head_, n_embd_;
};
TORCH_MODULE(CausalSelfAttention);

class GPTMLPImpl : public torch::nn::Module {
 public:
  explicit GPTMLPImpl(const GPTConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(GPTMLP);

class GPTBlockImpl : public torch::nn::Module {
 public:
  explicit GPTBlockImpl(const GPTConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  GPTMLP mlp{nullptr};
};
TORCH_MODULE(GPTBlock);

/// nanoGPT's `transformer` ModuleDict.
class GPTTransformerImpl : public torch::nn::Module {
 public:
  explicit GPTTransformerImpl(const GPTConfig& config);

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<GPTBlock> h;  // registered as the ModuleList `h`
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(GPTTransformer);

/// The output layer, whose weight is the token embedding's (registered here too, as nanoGPT's
/// lm_head.weight, so the state dict has both names).
class TiedLinearImpl : public torch::nn::Module {
 public:
  explicit TiedLinearImpl(torch::Tensor tied_weight);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;
};
TORCH_MODULE(TiedLinear);

/// What generate() samples with.
struct SamplingOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  ///< > 0; below 1 sharper, above 1 flatter
  int64_t top_k = 0;         ///< > 0: only the k likeliest tokens
  uint64_t seed = 0;
};

class GPTImpl : public torch::nn::Module {
 public:
  /// The modules in nanoGPT's order, then its initialisation: N(0, 0.02) for every Linear and
  /// Embedding weight, zero biases, N(0, 0.02/√(2·n_layer)) for the residual projections.
  explicit GPTImpl(const GPTConfig& config);

  /// Token ids [B, T ≤ block_size] → logits [B, T, vocab]. The blocks run through ddp::call, so
  /// that a FullyShardedDataParallel sees each one begin.
  torch::Tensor forward(const torch::Tensor& tokens);

  /// The blocks, the units FullyShardedDataParallel shards one by one.
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() const;

  /// Parameters without the tied duplicate; with `non_embedding`, without the positions either
  /// (nanoGPT's count).
  int64_t num_parameters(bool non_embedding = true) const;

  const GPTConfig& config() const { return config_; }

  GPTTransformer transformer{nullptr};
  TiedLinear lm_head{nullptr};

 private:
  GPTConfig config_;
};
TORCH_MODULE(GPT);

/// Continues every row of `tokens` [B, T] by `options.max_new_tokens` tokens sampled from
/// `forward`'s logits (nanoGPT's generate: the last block_size tokens as context, temperature,
/// top-k). `forward` is a model's forward, sharded or not.
torch::Tensor generate(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                       torch::Tensor tokens, int64_t block_size, const SamplingOptions& options);

}  // namespace ddp::models
