#include "ddp/powersgd.h"

#include <optional>

#include <ATen/CPUGeneratorImpl.h>

#include "ddp/error.h"
#include "ddp/process_group.h"
#include "ddp/world.h"

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

// One gradient compressed as an n x m matrix with rank-r factors P (n x r) and Q (m x r).
struct Factorised {
  torch::Tensor grad;    // the bucket's view, shaped like the parameter
  torch::Tensor matrix;  // n x m (a copy when the gradient is not contiguous)
  torch::Tensor p, q;    // views into the flat P and Q
};

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * int64_t(t.element_size()); }

class PendingPowerSGD : public PendingReduction {
 public:
  PendingPowerSGD(int64_t payload, ProcessGroup& group, std::vector<Factorised> factors,
                  torch::Tensor p_flat, torch::Tensor q_flat, std::optional<Work> p_work,
                  std::vector<torch::Tensor> plain, torch::Tensor plain_flat,
                  std::optional<Work> plain_work, torch::Tensor buffer, torch::Tensor input_copy,
                  std::shared_ptr<PowerSGDHook::BucketState> state, double epsilon)
      : PendingReduction(payload),
        group_(group),
        factors_(std::move(factors)),
        p_flat_(std::move(p_flat)),
        q_flat_(std::move(q_flat)),
        p_work_(std::move(p_work)),
        plain_(std::move(plain)),
        plain_flat_(std::move(plain_flat)),
        plain_work_(std::move(plain_work)),
        buffer_(std::move(buffer)),
        input_copy_(std::move(input_copy)),
        state_(std::move(state)),
        epsilon_(epsilon) {}

  void wait() override {
    torch::NoGradGuard no_grad;
    const double world = group_.size();
    if (p_work_) {
      p_work_->wait();
      for (auto& f : factors_) {
        orthogonalize_columns(f.p, epsilon_);
        torch::mm_out(f.q, f.matrix.t(), f.p);
      }
      group_.allreduce(q_flat_).wait();
      q_flat_.div_(world);
      for (auto& f : factors_) f.grad.copy_(torch::mm(f.p, f.q.t()).view(f.grad.sizes()));
    }
    if (plain_work_) {
      plain_work_->wait();
      plain_flat_.div_(world);
      int64_t offset = 0;
      for (auto& g : plain_) {
        g.copy_(plain_flat_.narrow(0, offset, g.numel()).view(g.sizes()));
        offset += g.numel();
      }
    }
    // What this rank meant to send minus what everyone applied: added back next step.
    if (input_copy_.defined()) state_->error = input_copy_.sub_(buffer_);
  }

 private:
  ProcessGroup& group_;
  std::vector<Factorised> factors_;
  torch::Tensor p_flat_, q_flat_;
  std::optional<Work> p_work_;
  std::vector<torch::Tensor> plain_;
  torch::Tensor plain_flat_;
  std::optional<Work> plain_work_;
  torch::Tensor buffer_, input_copy_;
  std::shared_ptr<PowerSGDHook::BucketState> state_;
  double epsilon_;
};

}  // namespace

PowerSGDHook::PowerSGDHook(PowerSGDOptions options) : options_(options) {
  if (options.matrix_approximation_rank() < 1) {
    throw InvalidArgument(concat("PowerSGD: the approximation rank must be at least 1, got ",
                                 options.matrix_approximation_rank()));
  }
  if (options.start_iter() < 0 || !(options.min_compression_rate() > 0)) {
    throw InvalidArgument("PowerSGD: start_iter must be >= 0 and min_compression_rate > 0");
  }
}

PowerSGDHook::~PowerSGDHook() = default;

std::string PowerSGDHook::name() const {
  return concat("powersgd:", options_.matrix_approximation_rank());
}

torch::Tensor PowerSGDHook::error(int index) const {
  if (index < 0 || size_t(index) >= buckets_.size() || !buckets_[size_t(index)]) return {};
  return buckets_[size_t(index)]->error;
}

std::unique_ptr<PendingReduction> PowerSGDHook::start(GradBucket& bucket, ProcessGroup& group) {
  const bool compress = iteration_ >= options_.start_iter();
  if (bucket.is_last) ++iteration_;
  if (!compress) return AllReduceHook().start(bucket, group);

  torch::NoGradGuard no_grad;
  if (buckets_.size() <= size_t(bucket.index)) buckets_.resize(size_t(bucket.index) + 1);
  auto& slot = buckets_[size_t(bucket.index)];
  if (!slot || slot->numel != bucket.buffer.numel()) {
    slot = std::make_shared<BucketState>();  // new, or the buckets were rebuilt
    slot->numel = bucket.buffer.numel();
  }
  BucketState& state = *slot;

  torch::Tensor input_copy;
  if (options_.use_error_feedback()) {
    if (state.error.defined()) bucket.buffer.add_(state.error);
    input_copy = bucket.buffer.clone();
  }

  // Which gradients are worth a low-rank approximation.
  std::vector<Factorised> factors;
  std::vector<torch::Tensor> plain;
  int64_t p_numel = 0, q_numel = 0;
  for (const auto& g : bucket.gradients) {
    const int64_t n = g.dim() > 1 ? g.size(0) : 0;
    const int64_t m = n > 0 ? g.numel() / n : 0;
    const int64_t r = std::min<int64_t>({n, m, options_.matrix_approximation_rank()});
    if (n > 0 && double((n + m) * r) * options_.min_compression_rate() < double(n * m)) {
      factors.push_back({g, g.reshape({n, m}), {}, {}});
      p_numel += n * r;
      q_numel += m * r;
    } else {
      plain.push_back(g);
    }
  }

  const auto options = bucket.buffer.options();
  torch::Tensor p_flat = torch::empty({p_numel}, options);
  if (!state.q_ready || state.q_flat.numel() != q_numel) {
    state.q_flat = torch::empty({q_numel}, options);
    state.q_ready = false;
  }
  int64_t p_offset = 0, q_offset = 0;
  for (auto& f : factors) {
    const int64_t n = f.matrix.size(0), m = f.matrix.size(1);
    const int64_t r = std::min<int64_t>({n, m, options_.matrix_approximation_rank()});
    f.p = p_flat.narrow(0, p_offset, n * r).view({n, r});
    f.q = state.q_flat.narrow(0, q_offset, m * r).view({m, r});
    p_offset += n * r;
    q_offset += m * r;
  }
  if (!state.q_ready || !options_.warm_start()) {
    // The same numbers on every rank: a generator seeded from the options, bucket and step.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(
        options_.seed() * 1000003u + uint64_t(bucket.index) * 7919u +
        (options_.warm_start() ? 0u : uint64_t(iteration_)));
    for (auto& f : factors) {
      f.q.copy_(torch::randn(f.q.sizes(), generator, options));
      orthogonalize_columns(f.q, options_.orthogonalization_epsilon());
    }
    state.q_ready = true;
  }
  std::optional<Work> p_work;
  if (!factors.empty()) {
    for (auto& f : factors) torch::mm_out(f.p, f.matrix, f.q);
    p_work.emplace(group.allreduce(p_flat));
  }

  torch::Tensor plain_flat;
  std::optional<Work> plain_work;
  if (!plain.empty()) {
    std::vector<torch::Tensor> parts;
    for (const auto& g : plain) parts.push_back(g.reshape({-1}));
    plain_flat = torch::cat(parts);
    plain_work.emplace(group.allreduce(plain_flat));
  }
  const int64_t payload =
      bytes_of(p_flat) + bytes_of(state.q_flat) + (plain_flat.defined() ? bytes_of(plain_flat) : 0);
  return std::make_unique<PendingPowerSGD>(
      payload, group, std::move(factors), std::move(p_flat), state.q_flat, std::move(p_work),
      std::move(plain), std::move(plain_flat), std::move(plain_work), bucket.buffer,
      std::move(input_copy), slot, options_.orthogonalization_epsilon());
}

PowerSGDOptions powersgd_options_from_spec(const std::string& arguments) {
  PowerSGDOptions options;
  // By name, compression starts after 100 steps rather than PyTorch's 1000, which is more than
  // two epochs of the examples here.
  options.start_iter(100);
  if (arguments.empty()) return options;
  const size_t colon = arguments.find(':');
  const std::string what = concat("comm hook 'powersgd:", arguments, "'");
  options.matrix_approximation_rank(
      parse_int(arguments.substr(0, colon), what + " (rank)", 1, 1 << 16));
  if (colon != std::string::npos) {
    options.start_iter(parse_int(arguments.substr(colon + 1), what + " (start step)", 0, 1 << 30));
  }
  return options;
}

}  // namespace ddp
