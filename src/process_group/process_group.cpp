// Joining the job: the store (env://, tcp://, file://), the backend over it, the flight
// recorder; aborting a group. The collectives are in collectives.cpp.
#include "ddp/process_group.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include <c10/util/StringUtil.h>

#include "ddp/environment.h"
#include "ddp/error.h"
#include "launcher_handshake.h"
#include "message_text.h"
#include "process_group/backends.h"
#include "process_group/group_state.h"
#include "process_group/rendezvous_wait.h"
#include "process_group/tcp_store.h"
#include "torch_compat.h"

namespace ddp {
namespace {

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
    throw InvalidArgument(c10::str("init method '", url, "' is not of the form tcp://HOST:PORT"));
  }
  host = url.substr(scheme.size(), colon - scheme.size());
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) throw InvalidArgument(c10::str("init method '", url, "' has no host"));
  port = parse_int(url.substr(colon + 1), c10::str("init method '", url, "': the port"), 1, 65535);
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
  if (size < 1) throw InvalidArgument(c10::str("world size ", size, " must be at least 1"));
  if (rank < 0 || rank >= size) {
    throw InvalidArgument(
        c10::str("rank ", rank, " is not in [0, ", size, ") for world size ", size));
  }
  const std::string& url = options.init_method();
  c10::intrusive_ptr<c10d::Store> store;
  std::string master_host = world.master_addr;
  const LauncherHandshake& launcher = handshake_of(world);
  try {
    if (url == "env://" && !launcher.store_file.empty()) {
      // A launcher on one node: a FileStore in its private directory, so no port is
      // opened at all (LibTorch 1.13's TCPStore server listens on every interface).
      store = c10::make_intrusive<c10d::FileStore>(launcher.store_file, size);
      store->setTimeout(options.rendezvous_timeout());
      master_host = "127.0.0.1";
    } else if (url == "env://") {
      if (size > 1 && !world.master_port_set) {
        throw InvalidArgument(c10::str("init method env:// needs ", env::kMasterAddr, " and ",
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
      if (!launcher.store_prefix.empty())
        store = c10::make_intrusive<c10d::PrefixStore>(launcher.store_prefix, store);
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
      throw InvalidArgument(c10::str(
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
      throw DistributedError(c10::str("rank 0: cannot host the store for ", url,
                                      ": the port is in use (", msg, "); choose another port (",
                                      env::kMasterPort, ", or the init method's)"));
    }
    throw DistributedError(c10::str("rank ", rank, ": cannot reach the store for ", url, " within ",
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
    throw InvalidArgument(c10::str("flight_records ", options.flight_records(), " must be >= 0"));
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
      c10::str("unknown backend '", options.backend(), "'; use gloo, nccl (CUDA builds) or mpi"));
}

void ProcessGroup::start_recorder(const ProcessGroupOptions& options) {
  // A job id that tells this group's records from an earlier job's in the same directory.
  const std::string key = "flight/job";
  if (rank_ == 0) {
    const std::string id = c10::str(unix_microseconds(), "-", ::getpid());
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

std::string ProcessGroup::unique_prefix(const std::string& what) {
  return c10::str(what, "/", prefix_counter_++, "/");
}

}  // namespace ddp
