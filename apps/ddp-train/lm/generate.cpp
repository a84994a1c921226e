// ddp-train generate: samples text from a GPT's exported weights (--export of a training run,
// or nanoGPT's state dict), as nanoGPT's sample.py. The model's size comes from the weights;
// only the number of heads, which they do not show, from --model.
#include "lm/generate.h"

#include <cstdio>
#include <set>
#include <sstream>

#include <c10/util/StringUtil.h>

#include "ddp/checkpoint/checkpoint.h"
#include "ddp/error.h"
#include "ddp/models/gpt.h"
#include "flags.h"

namespace ddp::train {
namespace {

struct GenerateOptions {
  std::string weights;
  std::string model = "gpt-nano";
  std::string prompt = "\n";
  int64_t samples = 1;
  int64_t max_new_tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 200;
  int64_t seed = 1337;
};

const cli::FlagTable<GenerateOptions>& table() {
  using O = GenerateOptions;
  static const cli::FlagTable<O> flags(
      "generate",
      {
          cli::text_flag<O>("--init-from", "FILE",
                            "the weights: a training run's --export, or nanoGPT's state dict "
                            "(required)",
                            &O::weights),
          cli::text_flag<O>("--model", "NAME",
                            "gpt-nano (default), gpt2 or gpt2-medium: the heads (the rest of "
                            "the shape is read from the weights)",
                            &O::model),
          cli::text_flag<O>("--prompt", "TEXT",
                            "the text to continue, as bytes (default a newline); with a "
                            "vocabulary other than bytes', token ids separated by spaces",
                            &O::prompt),
          cli::int_flag<O>("--samples", "N", "samples to draw (default 1)", &O::samples, 1, 1000),
          cli::int_flag<O>("--max-new-tokens", "N", "tokens per sample (default 200)",
                           &O::max_new_tokens, 1, 1 << 20),
          cli::real_flag<O>("--temperature", "X",
                            "below 1 sharper, above 1 more random (default 0.8)", &O::temperature,
                            1e-6, 100),
          cli::int_flag<O>("--top-k", "K", "sample among the K likeliest tokens (default 200)",
                           &O::top_k, 0, 1 << 20),
          cli::int_flag<O>("--seed", "N", "seed of the sampling (default 1337)", &O::seed, 0,
                           int64_t(1) << 62),
      });
  return flags;
}

// The configuration the weights were trained with.
models::GPTConfig config_of(const std::map<std::string, torch::Tensor>& state,
                            const std::string& model, const std::string& path) {
  auto get = [&](const std::string& name) {
    auto it = state.find(name);
    if (it == state.end()) {
      throw DataError(c10::str(path, ": no ", name, "; is it a GPT's state dict?"));
    }
    return it->second;
  };
  models::GPTConfig config = models::GPTConfig::named(model, 1);
  config.vocab_size = get("transformer.wte.weight").size(0);
  config.n_embd = get("transformer.wte.weight").size(1);
  config.block_size = get("transformer.wpe.weight").size(0);
  std::set<std::string> layers;
  for (const auto& [name, tensor] : state) {
    if (name.rfind("transformer.h.", 0) == 0) {
      layers.insert(name.substr(14, name.find('.', 14) - 14));
    }
  }
  config.n_layer = int64_t(layers.size());
  return config;
}

}  // namespace

int run_generate(const std::vector<std::string>& args) {
  GenerateOptions o;
  bool help = false;
  table().parse(args, o, help);
  if (help) {
    std::printf(
        "usage: ddp-train generate --init-from FILE [FLAGS]\n\nContinues --prompt with tokens "
        "sampled from a GPT (nanoGPT's sample.py).\n\nflags:\n%s",
        table().help().c_str());
    return 0;
  }
  if (o.weights.empty()) throw InvalidArgument("generate: --init-from FILE is required");
  const auto state = read_state_dict(o.weights);
  const models::GPTConfig config = config_of(state, o.model, o.weights);
  models::GPT gpt(config);
  load_state_dict(*gpt, state, o.weights);
  gpt->eval();

  const bool bytes = config.vocab_size == 256;
  std::vector<int64_t> prompt;
  if (bytes) {
    for (unsigned char c : o.prompt) prompt.push_back(c);
  } else {
    std::istringstream words(o.prompt);
    std::string word;
    while (words >> word) {
      prompt.push_back(cli::parse_int64("--prompt", word, 0, config.vocab_size - 1));
    }
  }
  if (prompt.empty()) throw InvalidArgument("generate: --prompt is empty");
  models::SamplingOptions sampling;
  sampling.max_new_tokens = o.max_new_tokens;
  sampling.temperature = o.temperature;
  sampling.top_k = o.top_k;
  for (int64_t k = 0; k < o.samples; ++k) {
    sampling.seed = uint64_t(o.seed + k);
    const torch::Tensor start = torch::tensor(prompt, torch::kLong).unsqueeze(0);
    const torch::Tensor out =
        models::generate([&gpt](const torch::Tensor& x) { return gpt->forward(x); }, start,
                         config.block_size, sampling)[0];
    std::string text;
    for (int64_t i = 0; i < out.size(0); ++i) {
      const int64_t token = out[i].item<int64_t>();
      text += bytes ? std::string(1, char(token)) : c10::str(i ? " " : "", token);
    }
    std::printf("%s\n%s", text.c_str(), k + 1 < o.samples ? "---------------\n" : "");
  }
  return 0;
}

}  // namespace ddp::train
