// GPT as nanoGPT builds it. The weights match nanoGPT's bit for bit because the random numbers
// are drawn in the same order: each module's default initialisation as it is constructed (in
// nanoGPT's order), then _init_weights in the order Module.apply visits modules (children
// before their parent), then the residual projections again.
#include "ddp/models/gpt.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "ddp/fsdp/module_call.h"
#include "torch_compat.h"

namespace ddp::models {

GPTConfig GPTConfig::named(const std::string& name, int64_t vocab_size) {
  GPTConfig c;
  c.vocab_size = vocab_size;
  if (name == "gpt-nano") {
    c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.block_size = 256;
  } else if (name == "gpt2") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.block_size = 1024;
  } else if (name == "gpt2-medium") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024, c.block_size = 1024;
  } else {
    throw InvalidArgument(
        c10::str("unknown GPT configuration '", name, "': gpt-nano, gpt2 or gpt2-medium"));
  }
  return c;
}

std::vector<std::string> GPTConfig::names() { return {"gpt-nano", "gpt2", "gpt2-medium"}; }

namespace {

torch::nn::LayerNorm layer_norm(int64_t width) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}));
}

// Causal attention; LibTorch before 2.0 has no scaled_dot_product_attention (Debian 12's 1.13).
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v) {
#if DDP_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  const int64_t t = q.size(-2);
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  torch::Tensor future = torch::ones({t, t}, torch::kBool).triu(1).to(q.device());
  return torch::matmul(torch::softmax(scores.masked_fill(future, -INFINITY), -1), v);
#endif
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& config)
    : n_head_(config.n_head), n_embd_(config.n_embd) {
  if (config.n_embd % config.n_head != 0) {
    throw InvalidArgument(c10::str("GPT: the width (", config.n_embd,
                                   ") must be a multiple of the heads (", config.n_head, ")"));
  }
  c_attn = register_module("c_attn", torch::nn::Linear(config.n_embd, 3 * config.n_embd));
  c_proj = register_module("c_proj", torch::nn::Linear(config.n_embd, config.n_embd));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1);
  auto heads = [&](const torch::Tensor& part) {
    return part.view({b, t, n_head_, n_embd_ / n_head_}).transpose(1, 2);
  };
  const auto qkv = c_attn(x).split(n_embd_, 2);
  torch::Tensor y = causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
  return c_proj(y.transpose(1, 2).contiguous().view({b, t, n_embd_}));
}

GPTMLPImpl::GPTMLPImpl(const GPTConfig& config) {
  c_fc = register_module("c_fc", torch::nn::Linear(config.n_embd, 4 * config.n_embd));
  c_proj = register_module("c_proj", torch::nn::Linear(4 * config.n_embd, config.n_embd));
}

torch::Tensor GPTMLPImpl::forward(const torch::Tensor& x) {
  return c_proj(torch::gelu(c_fc(x), "tanh"));
}

GPTBlockImpl::GPTBlockImpl(const GPTConfig& config) {
  ln_1 = register_module("ln_1", layer_norm(config.n_embd));
  attn = register_module("attn", CausalSelfAttention(config));
  ln_2 = register_module("ln_2", layer_norm(config.n_embd));
  mlp = register_module("mlp", GPTMLP(config));
}

torch::Tensor GPTBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = x + attn(ln_1(x));
  return y + mlp(ln_2(y));
}

GPTTransformerImpl::GPTTransformerImpl(const GPTConfig& config) {
  wte = register_module("wte", torch::nn::Embedding(config.vocab_size, config.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(config.block_size, config.n_embd));
  blocks = register_module("h", torch::nn::ModuleList());  // its children are named 0, 1, ...
  for (int64_t i = 0; i < config.n_layer; ++i) {
    h.push_back(GPTBlock(config));
    blocks->push_back(h.back());
  }
  ln_f = register_module("ln_f", layer_norm(config.n_embd));
}

TiedLinearImpl::TiedLinearImpl(torch::Tensor tied_weight) {
  weight = register_parameter("weight", std::move(tied_weight));
}

torch::Tensor TiedLinearImpl::forward(const torch::Tensor& x) {
  return torch::nn::functional::linear(x, weight);
}

GPTImpl::GPTImpl(const GPTConfig& config) : config_(config) {
  if (config.vocab_size < 1 || config.block_size < 1 || config.n_layer < 1 || config.n_head < 1) {
    throw InvalidArgument(c10::str("GPT: vocabulary, context, layers and heads must be positive"));
  }
  transformer = register_module("transformer", GPTTransformer(config));
  {
    // nanoGPT's lm_head is a Linear without bias, whose construction draws a kaiming-uniform
    // initialisation before the tie replaces the embedding's weight with it: draw the same.
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(torch::empty({config.vocab_size, config.n_embd}),
                                      std::sqrt(5.0));
  }
  lm_head = register_module("lm_head", TiedLinear(transformer->wte->weight));

  torch::NoGradGuard no_grad;
  auto linear = [](torch::nn::Linear& l) {
    torch::nn::init::normal_(l->weight, 0.0, 0.02);
    torch::nn::init::zeros_(l->bias);
  };
  torch::nn::init::normal_(transformer->wte->weight, 0.0, 0.02);
  torch::nn::init::normal_(transformer->wpe->weight, 0.0, 0.02);
  for (auto& block : transformer->h) {
    linear(block->attn->c_attn);
    linear(block->attn->c_proj);
    linear(block->mlp->c_fc);
    linear(block->mlp->c_proj);
  }
  torch::nn::init::normal_(lm_head->weight, 0.0, 0.02);  // the tied weight, drawn again
  const double residual_std = 0.02 / std::sqrt(2.0 * double(config.n_layer));
  for (auto& block : transformer->h) {
    torch::nn::init::normal_(block->attn->c_proj->weight, 0.0, residual_std);
    torch::nn::init::normal_(block->mlp->c_proj->weight, 0.0, residual_std);
  }
}

torch::Tensor GPTImpl::forward(const torch::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  if (t > config_.block_size) {
    throw InvalidArgument(c10::str("GPT: a sequence of ", t, " tokens is longer than the context (",
                                   config_.block_size, ")"));
  }
  torch::Tensor positions = torch::arange(t, tokens.options().dtype(torch::kLong));
  torch::Tensor x = transformer->wte(tokens) + transformer->wpe(positions);
  for (auto& block : transformer->h) x = ddp::call(block, x);
  return lm_head(transformer->ln_f(x));
}

std::vector<std::shared_ptr<torch::nn::Module>> GPTImpl::blocks() const {
  std::vector<std::shared_ptr<torch::nn::Module>> out;
  for (const auto& block : transformer->h) out.push_back(block.ptr());
  return out;
}

int64_t GPTImpl::num_parameters(bool non_embedding) const {
  int64_t n = 0;
  for (const auto& p : named_parameters()) {
    if (p.key() == "lm_head.weight") continue;  // the embedding, counted once
    n += p.value().numel();
  }
  return non_embedding ? n - transformer->wpe->weight.numel() : n;
}

torch::Tensor generate(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                       torch::Tensor tokens, int64_t block_size, const SamplingOptions& options) {
  if (!(options.temperature > 0)) {
    throw InvalidArgument(
        c10::str("generate: the temperature must be positive, got ", options.temperature));
  }
  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int64_t t = tokens.size(1);
    torch::Tensor context = t > block_size ? tokens.narrow(1, t - block_size, block_size) : tokens;
    torch::Tensor logits = forward(context).select(1, -1).to(torch::kFloat) / options.temperature;
    if (options.top_k > 0 && options.top_k < logits.size(-1)) {
      const torch::Tensor kth = std::get<0>(logits.topk(options.top_k)).narrow(-1, -1, 1);
      logits = logits.masked_fill(logits < kth, -INFINITY);
    }
    torch::Tensor probs = torch::softmax(logits, -1).cpu();
    torch::Tensor next = torch::multinomial(probs, 1, false, generator).to(tokens.device());
    tokens = torch::cat({tokens, next}, 1);
  }
  return tokens;
}

}  // namespace ddp::models
