#include "ddp/process_group.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "ddp/environment.h"
#include "ddp/error.h"
#include "process_group/backends.h"
#include "process_group/rendezvous_wait.h"
#include "process_group/tcp_store.h"
#include "torch_compat.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// Python's names for the dtypes collectives move ("float32"), for the flight record.
std::string dtype_name(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Byte:
      return "uint8";
    default:
      return c10::toString(type);
  }
}

// Records collective `seq`'s end when the backend finishes it, not when this rank waits for
// it: the record (and --trace) then shows how far it ran alongside backward.
void record_completion(c10d::Work& work, const std::shared_ptr<FlightRecorder>& recorder,
                       int64_t seq) {
  try {
    std::weak_ptr<FlightRecorder> weak = recorder;
    work.getFuture()->addCallback([weak, seq](c10::ivalue::Future& future) {
      if (auto r = weak.lock()) {
        if (future.hasError()) {
          r->fail(seq, first_line(future.tryRetrieveErrorMessage()));
        } else {
          r->complete(seq);
        }
      }
    });
  } catch (const std::exception&) {
    // A backend whose Work has no future: Work::wait() records the completion instead.
  }
}

// The debugging options the environment asks for (ProcessGroupOptions), on top of the code's.
ProcessGroupOptions with_debug_environment(ProcessGroupOptions o) {
  const char* dir = std::getenv(env::kDebugDir);
  if (o.debug_dir().empty() && dir != nullptr) o.debug_dir(dir);
  const char* check = std::getenv(env::kDebugCollectives);
  if (check != nullptr && *check != '\0' && std::string(check) != "0") o.debug_collectives(true);
  if (const char* n = std::getenv(env::kFlightRecords); n != nullptr && *n != '\0')
    o.flight_records(parse_int(n, env::kFlightRecords, 0, 10000000));
  return o;
}

}  // namespace

void parse_tcp_url(const std::string& url, std::string& host, int& port) {
  const std::string scheme = "tcp://";
  const size_t colon = url.rfind(':');
  if (url.rfind(scheme, 0) != 0 || colon == std::string::npos || colon < scheme.size()) {
    throw InvalidArgument(concat("init method '", url, "' is not of the form tcp://HOST:PORT"));
  }
  host = url.substr(scheme.size(), colon - scheme.size());
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) throw InvalidArgument(concat("init method '", url, "' has no host"));
  port = parse_int(url.substr(colon + 1), concat("init method '", url, "': the port"), 1, 65535);
}

// ---------------------------------------------------------------------------------------------

struct GroupAbort {
  std::atomic<bool> set{false};
  mutable std::mutex mutex;
  std::string reason;  // under `mutex`, written once before `set`

  std::string why() const {
    std::lock_guard<std::mutex> lock(mutex);
    return reason;
  }
};

struct ProcessGroup::Backend {
  c10::intrusive_ptr<compat::CollectiveBackend> group;  // gloo, nccl or mpi
  bool reduces_bfloat16 = true;                         // its BackendEntry's
};

Work::Work(c10::intrusive_ptr<c10d::Work> work, std::string what, int rank,
           std::chrono::microseconds spin_before_sleep, std::shared_ptr<FlightRecorder> recorder,
           int64_t seq, std::shared_ptr<const GroupAbort> abort)
    : work_(std::move(work)),
      recorder_(std::move(recorder)),
      seq_(seq),
      what_(std::move(what)),
      rank_(rank),
      spin_before_sleep_(spin_before_sleep),
      abort_(std::move(abort)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::~Work() = default;

void Work::wait() {
  if (!work_) return;
  if (abort_) {
    // Poll, so that an abort ends the wait; 100 us adds little to a step's few waits.
    while (!work_->isCompleted()) {
      if (abort_->set) {
        failed(PeerFailure(concat("rank ", rank_, ": ", what_, " abandoned: ", abort_->why())));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  try {
    // Poll first (see ProcessGroupOptions::spin_before_sleep); sched_yield() lets any other
    // runnable thread of this core go first, so the poll takes no time from ranks sharing it.
    const auto spin_until = Clock::now() + spin_before_sleep_;
    while (!work_->isCompleted() && Clock::now() < spin_until) sched_yield();
    work_->wait();
  } catch (const c10::Error& e) {
    failed(PeerFailure(concat("rank ", rank_, ": ", what_,
                              " failed: ", first_line(e.what_without_backtrace()),
                              " (a peer rank exited, or stopped answering within the timeout)")));
  } catch (const std::exception& e) {
    if (backends::is_broken_connection(e)) {
      failed(PeerFailure(concat("rank ", rank_, ": ", what_, " failed: ", first_line(e.what()),
                                " (a peer rank exited or its connection broke)")));
    }
    failed(
        DistributedError(concat("rank ", rank_, ": ", what_, " failed: ", first_line(e.what()))));
  }
  if (recorder_) recorder_->complete(seq_);  // where the backend's future did not already
  work_.reset();
  if (finish_) {
    auto finish = std::move(finish_);
    finish_ = nullptr;
    finish();
  }
}

template <typename E>
void Work::failed(const E& error) {
  if (recorder_) {
    recorder_->fail(seq_, error.what());  // the whole message stays in the record
    recorder_->dump(concat(what_, " #", seq_, " failed"));
  }
  throw error;
}

Work Work::then(std::function<void()> finish) && {
  if (finish_) {  // after the step already there
    finish = [first = std::move(finish_), then = std::move(finish)] {
      first();
      then();
    };
  }
  finish_ = std::move(finish);
  return std::move(*this);
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::abort(const std::string& reason) {
  if (!abort_) throw InvalidArgument("ProcessGroup::abort() needs ProcessGroupOptions::abortable");
  std::lock_guard<std::mutex> lock(abort_->mutex);
  if (abort_->set) return;  // the first reason stays
  abort_->reason = reason;
  abort_->set = true;
}

bool ProcessGroup::aborted() const { return abort_ && abort_->set; }

bool ProcessGroup::has_backend(const std::string& backend) {
  for (const auto& entry : backends::all()) {
    if (entry.name == backend) return entry.compiled;
  }
  return false;
}

std::shared_ptr<ProcessGroup> ProcessGroup::init(const ProcessGroupOptions& options,
                                                 const WorldInfo& world) {
  const int rank = options.rank() >= 0 ? options.rank() : world.rank;
  const int size = options.world_size() >= 0 ? options.world_size() : world.world_size;
  if (size < 1) throw InvalidArgument(concat("world size ", size, " must be at least 1"));
  if (rank < 0 || rank >= size) {
    throw InvalidArgument(
        concat("rank ", rank, " is not in [0, ", size, ") for world size ", size));
  }
  const std::string& url = options.init_method();
  c10::intrusive_ptr<c10d::Store> store;
  std::string master_host = world.master_addr;
  try {
    if (url == "env://" && !world.store_file.empty()) {
      // A launcher on one node: a FileStore in its private directory, so no port is
      // opened at all (LibTorch 1.13's TCPStore server listens on every interface).
      store = c10::make_intrusive<c10d::FileStore>(world.store_file, size);
      store->setTimeout(options.rendezvous_timeout());
      master_host = "127.0.0.1";
    } else if (url == "env://") {
      if (size > 1 && !world.master_port_set) {
        throw InvalidArgument(concat("init method env:// needs ", env::kMasterAddr, " and ",
                                     env::kMasterPort,
                                     " (set by the launcher, or by you), or init method "
                                     "tcp://HOST:PORT"));
      }
      // Under torchrun the agent hosts the store and every worker, rank 0 too, is a client.
      const bool server = rank == 0 && !world.agent_store;
      if (!server) {
        wait_for_store_server(master_host, world.master_port, options.rendezvous_timeout(), rank);
      }
      store = tcp_store(master_host, world.master_port, server, size, options.rendezvous_timeout());
      if (!world.store_prefix.empty())
        store = c10::make_intrusive<c10d::PrefixStore>(world.store_prefix, store);
    } else if (url.rfind("tcp://", 0) == 0) {
      int port = 0;
      parse_tcp_url(url, master_host, port);
      if (rank != 0) wait_for_store_server(master_host, port, options.rendezvous_timeout(), rank);
      store = tcp_store(master_host, port, rank == 0, size, options.rendezvous_timeout());
    } else if (url.rfind("file://", 0) == 0) {
      const std::string path = url.substr(7);
      if (path.empty()) throw InvalidArgument("init method file:// needs a path: file:///tmp/x");
      store = c10::make_intrusive<c10d::FileStore>(path, size);
      store->setTimeout(options.rendezvous_timeout());
      master_host = "127.0.0.1";
    } else {
      throw InvalidArgument(concat(
          "init method '", url, "' is not supported; use env://, tcp://HOST:PORT or file:///PATH"));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // c10d reports store failures as c10::Error or its own exception types, by version.
    const std::string msg = first_line(e.what());
    const bool in_use =
        msg.find("in use") != std::string::npos || msg.find("EADDRINUSE") != std::string::npos;
    if (in_use) {
      throw DistributedError(concat("rank 0: cannot host the store for ", url,
                                    ": the port is in use (", msg, "); choose another port (",
                                    env::kMasterPort, ", or the init method's)"));
    }
    throw DistributedError(concat("rank ", rank, ": cannot reach the store for ", url, " within ",
                                  seconds(options.rendezvous_timeout()), " s: ", msg,
                                  "; check that rank 0 is running and the address is right"));
  }
  return init_with_store(store, rank, size,
                         backends::with_bind_address(options, master_host, world.master_port));
}

std::shared_ptr<ProcessGroup> ProcessGroup::init_with_store(c10::intrusive_ptr<c10d::Store> store,
                                                            int rank, int world_size,
                                                            const ProcessGroupOptions& given) {
  const ProcessGroupOptions options = with_debug_environment(given);
  if (options.flight_records() < 0)
    throw InvalidArgument(concat("flight_records ", options.flight_records(), " must be >= 0"));
  std::shared_ptr<ProcessGroup> group(new ProcessGroup());
  group->store_ = c10::make_intrusive<c10d::PrefixStore>("ddp", store);
  group->rank_ = rank;
  group->size_ = world_size;
  group->backend_ = options.backend();
  group->timeout_ = options.timeout();
  group->spin_before_sleep_ = options.spin_before_sleep();
  group->device_ = options.device();
  if (options.abortable()) group->abort_ = std::make_shared<GroupAbort>();
  group->backend_impl_ = std::make_unique<Backend>();
  for (const auto& entry : backends::all()) {
    if (entry.name != options.backend()) continue;
    backends::ConnectArgs args{c10::make_intrusive<c10d::PrefixStore>(entry.name, store), rank,
                               world_size, options,
                               [&] { group->check_rendezvous(options.rendezvous_timeout()); }};
    group->backend_impl_->group = entry.connect(args);
    group->backend_impl_->reduces_bfloat16 = entry.reduces_bfloat16;
    group->start_recorder(options);
    return group;
  }
  throw InvalidArgument(
      concat("unknown backend '", options.backend(), "'; use gloo, nccl (CUDA builds) or mpi"));
}

void ProcessGroup::start_recorder(const ProcessGroupOptions& options) {
  // A job id that tells this group's records from an earlier job's in the same directory.
  const std::string key = "flight/job";
  if (rank_ == 0) {
    const std::string id = concat(unix_microseconds(), "-", ::getpid());
    store_->set(key, std::vector<uint8_t>(id.begin(), id.end()));
  }
  const std::vector<uint8_t> id = store_->get(key);
  recorder_ = std::make_shared<FlightRecorder>(
      RecorderIdentity{rank_, size_, backend_, std::string(id.begin(), id.end()),
                       options.description()},
      size_t(options.flight_records()));
  // With a debug directory, SIGTERM (a launcher stopping a hung job) writes the record too.
  recorder_->dump_to(options.debug_dir(), /*on_sigterm=*/true);
  debug_collectives_ = options.debug_collectives();
}

// NCCL moves device tensors only; the CPU tensors ddp.cpp exchanges (flags, counts, fingerprints)
// go through a device copy. Gloo and MPI take CPU tensors as they are.
bool ProcessGroup::needs_device_copy(const torch::Tensor& tensor) const {
  return device_.is_cuda() && tensor.device() != device_;
}

Work ProcessGroup::through_device(torch::Tensor& tensor,
                                  const std::function<Work(torch::Tensor&)>& collective) {
  torch::Tensor on_device = tensor.to(device_);
  Work work = collective(on_device);
  return std::move(work).then([tensor, on_device]() mutable { tensor.copy_(on_device); });
}

Work ProcessGroup::allreduce(torch::Tensor& tensor, CollectiveTag tag) {
  if (needs_device_copy(tensor)) {
    return through_device(tensor, [this, tag](torch::Tensor& t) { return allreduce(t, tag); });
  }
  if (tensor.scalar_type() == torch::kBFloat16 && !backend_impl_->reduces_bfloat16) {
    // Gather every rank's bfloat16 bits (seen as half: a backend that cannot reduce bfloat16
    // may not move it either, as Gloo 1.13 moves neither bfloat16 nor int16, and a gather only
    // copies the bytes) and sum locally in float; for two ranks the same bytes on the wire as a
    // ring all-reduce.
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(torch::empty_like(tensor));
    std::vector<at::Tensor> bits{tensor.contiguous().view(torch::kHalf)};
    std::vector<std::vector<at::Tensor>> output_bits(1);
    for (auto& o : outputs[0]) output_bits[0].push_back(o.view(torch::kHalf));
    const int64_t seq = begin("all-reduce", tensor, tag);
    auto work = backend_impl_->group->allgather(output_bits, bits);
    return track(std::move(work), "all-reduce(bfloat16)", seq).then([outputs, tensor]() mutable {
      torch::Tensor sum = outputs[0][0].to(torch::kFloat);
      for (size_t r = 1; r < outputs[0].size(); ++r) sum.add_(outputs[0][r]);
      tensor.copy_(sum);
    });
  }
  const int64_t seq = begin("all-reduce", tensor, tag);
  std::vector<at::Tensor> tensors{tensor};
  return track(backend_impl_->group->allreduce(tensors), "all-reduce", seq);
}

Work ProcessGroup::allreduce_max(torch::Tensor& tensor) {
  if (needs_device_copy(tensor)) {
    return through_device(tensor, [this](torch::Tensor& t) { return allreduce_max(t); });
  }
  const int64_t seq = begin("all-reduce(max)", tensor);
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  return track(backend_impl_->group->allreduce(tensors, opts), "all-reduce(max)", seq);
}

Work ProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  if (needs_device_copy(tensor)) {
    return through_device(tensor, [this, root](torch::Tensor& t) { return broadcast(t, root); });
  }
  const int64_t seq = begin(concat("broadcast(root ", root, ")"), tensor);
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  return track(backend_impl_->group->broadcast(tensors, opts), "broadcast", seq);
}

std::vector<torch::Tensor> ProcessGroup::allgather(const torch::Tensor& tensor) {
  if (needs_device_copy(tensor)) {
    std::vector<torch::Tensor> gathered = allgather(tensor.to(device_));
    for (auto& t : gathered) t = t.to(tensor.device());
    return gathered;
  }
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size_; ++r) outputs[0].push_back(torch::empty_like(tensor));
  const int64_t seq = begin("all-gather", tensor);
  std::vector<at::Tensor> inputs{tensor};
  track(backend_impl_->group->allgather(outputs, inputs), "all-gather", seq).wait();
  return outputs[0];
}

void ProcessGroup::barrier() {
  const int64_t seq = begin("barrier", torch::Tensor());
  track(backend_impl_->group->barrier(), "barrier", seq).wait();
}

int64_t ProcessGroup::begin(const std::string& op, const torch::Tensor& tensor, CollectiveTag tag) {
  if (aborted())
    throw PeerFailure(concat("rank ", rank_, ": ", op, " on an aborted group: ", abort_->why()));
  std::string dtype = "none";
  std::vector<int64_t> shape;
  if (tensor.defined()) {
    dtype = dtype_name(tensor.scalar_type());
    shape = tensor.sizes().vec();
  }
  const int64_t seq = recorder_->issue(op, dtype, shape, tag.bucket);
  if (debug_collectives_) {
    CollectiveRecord call;
    call.op = op;
    call.dtype = dtype;
    call.shape = shape;
    try {
      check_same_collective(seq, call.signature());
    } catch (const std::exception& e) {
      recorder_->fail(seq, e.what());
      recorder_->dump(concat("collective #", seq, " failed the check across ranks"));
      throw;
    }
  }
  return seq;
}

Work ProcessGroup::track(c10::intrusive_ptr<c10d::Work> work, std::string what, int64_t seq) const {
  if (recorder_->keeps_records()) record_completion(*work, recorder_, seq);
  return Work(std::move(work), std::move(what), rank_, spin_before_sleep_, recorder_, seq, abort_);
}

std::string ProcessGroup::unique_prefix(const std::string& what) {
  return concat(what, "/", prefix_counter_++, "/");
}

}  // namespace ddp
