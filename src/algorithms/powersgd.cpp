#include "ddp/algorithms/powersgd.h"

#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "ddp/process_group.h"
#include "ddp/world.h"
#include "message_text.h"

namespace ddp {

void orthogonalize_columns(torch::Tensor& matrix, double epsilon) {
  torch::NoGradGuard no_grad;
  const int64_t cols = matrix.size(1);
  for (int64_t i = 0; i < cols; ++i) {
    torch::Tensor col = matrix.narrow(1, i, 1);
    torch::Tensor norm = col.norm();
    // A zero column (a gradient that is all zeros) stays zero instead of becoming NaN.
    col.div_(epsilon > 0 ? norm + epsilon : norm.clamp_min(1e-30));
    if (i + 1 < cols) {
      torch::Tensor rest = matrix.narrow(1, i + 1, cols - i - 1);
      rest.sub_((col * rest).sum(0, /*keepdim=*/true) * col);
    }
  }
}

// What one bucket keeps between steps: the residual and the Qs.
struct PowerSGDHook::BucketState {
  int64_t numel = -1;  // of the bucket this state was made for (buckets are rebuilt once)
  torch::Tensor error;
  torch::Tensor q_flat;  // every compressed gradient's Q, back to back
  bool q_ready = false;
};

namespace {

using BucketState = PowerSGDHook::BucketState;

// One gradient compressed as an n x m matrix with rank-r factors P (n x r) and Q (m x r).
struct Factorised {
  torch::Tensor grad;    // the bucket's view, shaped like the parameter
  torch::Tensor matrix;  // n x m (a copy when the gradient is not contiguous)
  torch::Tensor p, q;    // views into the flat P and Q
};

// One bucket's reduction as start() leaves it for wait().
struct Compression {
  int bucket = 0;
  std::vector<Factorised> factors;   // the gradients worth a low-rank approximation
  std::vector<torch::Tensor> plain;  // the others, all-reduced as they are
  int64_t p_numel = 0, q_numel = 0;
  torch::Tensor p_flat, q_flat, plain_flat;
  std::optional<Work> p_work, plain_work;
  torch::Tensor buffer;
  torch::Tensor input_copy;  // with error feedback: what this rank meant to send
  std::shared_ptr<BucketState> state;
};

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * int64_t(t.element_size()); }

int64_t approximation_rank(int64_t n, int64_t m, const PowerSGDOptions& o) {
  return std::min<int64_t>({n, m, o.matrix_approximation_rank()});
}

class PendingPowerSGD : public PendingReduction {
 public:
  PendingPowerSGD(int64_t payload, ProcessGroup& group, Compression c, double epsilon)
      : PendingReduction(payload), group_(group), c_(std::move(c)), epsilon_(epsilon) {}

  void wait() override {
    torch::NoGradGuard no_grad;
    const double world = group_.size();
    if (c_.p_work) {
      c_.p_work->wait();
      for (auto& f : c_.factors) {
        orthogonalize_columns(f.p, epsilon_);
        torch::mm_out(f.q, f.matrix.t(), f.p);
      }
      group_.allreduce(c_.q_flat, CollectiveTag{c_.bucket}).wait();
      c_.q_flat.div_(world);
      for (auto& f : c_.factors) f.grad.copy_(torch::mm(f.p, f.q.t()).view(f.grad.sizes()));
    }
    if (c_.plain_work) {
      c_.plain_work->wait();
      c_.plain_flat.div_(world);
      int64_t offset = 0;
      for (auto& g : c_.plain) {
        g.copy_(c_.plain_flat.narrow(0, offset, g.numel()).view(g.sizes()));
        offset += g.numel();
      }
    }
    // What this rank meant to send minus what everyone applied: added back next step.
    if (c_.input_copy.defined()) c_.state->error = c_.input_copy.sub_(c_.buffer);
  }

 private:
  ProcessGroup& group_;
  Compression c_;
  double epsilon_;
};

// Which gradients are worth a low-rank approximation, and the sizes of their flat P and Q.
void split_by_worth(const std::vector<torch::Tensor>& gradients, const PowerSGDOptions& o,
                    Compression& c) {
  for (const auto& g : gradients) {
    const int64_t n = g.dim() > 1 ? g.size(0) : 0;
    const int64_t m = n > 0 ? g.numel() / n : 0;
    const int64_t r = approximation_rank(n, m, o);
    if (n > 0 && double((n + m) * r) * o.min_compression_rate() < double(n * m)) {
      c.factors.push_back({g, g.reshape({n, m}), {}, {}});
      c.p_numel += n * r;
      c.q_numel += m * r;
    } else {
      c.plain.push_back(g);
    }
  }
}

// Each factor's P and Q as views into the flat P (new each step) and the flat Q (kept in the
// bucket's state for the warm start).
void lay_out_factors(const PowerSGDOptions& o, torch::TensorOptions options, Compression& c) {
  BucketState& state = *c.state;
  c.p_flat = torch::empty({c.p_numel}, options);
  if (!state.q_ready || state.q_flat.numel() != c.q_numel) {
    state.q_flat = torch::empty({c.q_numel}, options);
    state.q_ready = false;
  }
  c.q_flat = state.q_flat;
  int64_t p_offset = 0, q_offset = 0;
  for (auto& f : c.factors) {
    const int64_t n = f.matrix.size(0), m = f.matrix.size(1);
    const int64_t r = approximation_rank(n, m, o);
    f.p = c.p_flat.narrow(0, p_offset, n * r).view({n, r});
    f.q = c.q_flat.narrow(0, q_offset, m * r).view({m, r});
    p_offset += n * r;
    q_offset += m * r;
  }
}

// Random orthogonal Qs, the same numbers on every rank: a generator seeded from the options,
// the bucket and (without warm start) the step.
void initialise_qs(const PowerSGDOptions& o, int64_t iteration, torch::TensorOptions options,
                   Compression& c) {
  auto generator =
      at::make_generator<at::CPUGeneratorImpl>(o.seed() * 1000003u + uint64_t(c.bucket) * 7919u +
                                               (o.warm_start() ? 0u : uint64_t(iteration)));
  for (auto& f : c.factors) {
    f.q.copy_(torch::randn(f.q.sizes(), generator, options));
    orthogonalize_columns(f.q, o.orthogonalization_epsilon());
  }
  c.state->q_ready = true;
}

// The all-reduces that can start now: P = M Q of every factorised gradient, and the plain
// gradients flattened into one tensor. Returns the bytes handed to collectives (Q's included).
int64_t start_allreduces(ProcessGroup& group, Compression& c) {
  const CollectiveTag tag{c.bucket};
  if (!c.factors.empty()) {
    for (auto& f : c.factors) torch::mm_out(f.p, f.matrix, f.q);
    c.p_work.emplace(group.allreduce(c.p_flat, tag));
  }
  if (!c.plain.empty()) {
    std::vector<torch::Tensor> parts;
    for (const auto& g : c.plain) parts.push_back(g.reshape({-1}));
    c.plain_flat = torch::cat(parts);
    c.plain_work.emplace(group.allreduce(c.plain_flat, tag));
  }
  return bytes_of(c.p_flat) + bytes_of(c.q_flat) +
         (c.plain_flat.defined() ? bytes_of(c.plain_flat) : 0);
}

}  // namespace

PowerSGDHook::PowerSGDHook(PowerSGDOptions options) : options_(options) {
  if (options.matrix_approximation_rank() < 1) {
    throw InvalidArgument(c10::str("PowerSGD: the approximation rank must be at least 1, got ",
                                   options.matrix_approximation_rank()));
  }
  if (options.start_iter() < 0 || !(options.min_compression_rate() > 0)) {
    throw InvalidArgument("PowerSGD: start_iter must be >= 0 and min_compression_rate > 0");
  }
}

PowerSGDHook::~PowerSGDHook() = default;

std::string PowerSGDHook::name() const {
  return c10::str("powersgd:", options_.matrix_approximation_rank());
}

torch::Tensor PowerSGDHook::error(int index) const {
  if (index < 0 || size_t(index) >= buckets_.size() || !buckets_[size_t(index)]) return {};
  return buckets_[size_t(index)]->error;
}

std::shared_ptr<PowerSGDHook::BucketState> PowerSGDHook::state_of(const GradBucket& bucket) {
  if (buckets_.size() <= size_t(bucket.index)) buckets_.resize(size_t(bucket.index) + 1);
  auto& slot = buckets_[size_t(bucket.index)];
  if (!slot || slot->numel != bucket.buffer.numel()) {
    slot = std::make_shared<BucketState>();  // new, or the buckets were rebuilt
    slot->numel = bucket.buffer.numel();
  }
  return slot;
}

std::unique_ptr<PendingReduction> PowerSGDHook::start(GradBucket& bucket, ProcessGroup& group) {
  const bool compress = iteration_ >= options_.start_iter();
  if (bucket.is_last) ++iteration_;
  if (!compress) return AllReduceHook().start(bucket, group);

  torch::NoGradGuard no_grad;
  Compression c;
  c.bucket = bucket.index;
  c.buffer = bucket.buffer;
  c.state = state_of(bucket);
  if (options_.use_error_feedback()) {
    if (c.state->error.defined()) bucket.buffer.add_(c.state->error);
    c.input_copy = bucket.buffer.clone();
  }
  split_by_worth(bucket.gradients, options_, c);
  const auto tensor_options = bucket.buffer.options();
  lay_out_factors(options_, tensor_options, c);
  if (!c.state->q_ready || !options_.warm_start()) {
    initialise_qs(options_, iteration_, tensor_options, c);
  }
  const int64_t payload = start_allreduces(group, c);
  return std::make_unique<PendingPowerSGD>(payload, group, std::move(c),
                                           options_.orthogonalization_epsilon());
}

PowerSGDOptions powersgd_options_from_spec(const std::string& arguments) {
  PowerSGDOptions options;
  // By name, compression starts after 100 steps rather than PyTorch's 1000, which is more than
  // two epochs of the examples here.
  options.start_iter(100);
  if (arguments.empty()) return options;
  const size_t colon = arguments.find(':');
  const std::string what = c10::str("comm hook 'powersgd:", arguments, "'");
  options.matrix_approximation_rank(
      parse_int(arguments.substr(0, colon), what + " (rank)", 1, 1 << 16));
  if (colon != std::string::npos) {
    options.start_iter(parse_int(arguments.substr(colon + 1), what + " (start step)", 0, 1 << 30));
  }
  return options;
}

}  // namespace ddp
