// The Gloo backend: CPU tensors (and, in CUDA builds, GPU ones through host copies) over TCP.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstdlib>

#include <c10/util/StringUtil.h>
#include <gloo/common/error.h>

#include "ddp/environment.h"
#include "ddp/error.h"
#include "message_text.h"
#include "process_group/backends.h"
#include "unique_fd.h"

namespace ddp::backends {
namespace {

// Gloo's TCP transport (Debian 12's libgloo-dev, which LibTorch 1.13 uses) sends with writev(),
// which cannot pass MSG_NOSIGNAL: a write to a peer that has just exited raises SIGPIPE, whose
// default action kills this whole process before Gloo can report the broken connection. Python
// ignores SIGPIPE, so PyTorch's ranks never see this. While it lives, this scope blocks SIGPIPE
// in the calling thread, and the threads Gloo starts meanwhile (its socket loop and collective
// workers, the only ones that write) inherit the mask: their writes then fail with EPIPE and the
// collective with a PeerFailure naming the rank. The process's disposition is left alone.
class SigpipeBlockedForNewThreads {
 public:
  SigpipeBlockedForNewThreads() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeBlockedForNewThreads() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SigpipeBlockedForNewThreads(const SigpipeBlockedForNewThreads&) = delete;
  SigpipeBlockedForNewThreads& operator=(const SigpipeBlockedForNewThreads&) = delete;

 private:
  sigset_t old_;
};

// The local address the kernel would use to reach `host` (connecting a UDP socket sends nothing).
std::string route_address_to(const std::string& host, int port) {
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(uint16_t(port));
  if (inet_pton(AF_INET, host.c_str(), &target.sin_addr) != 1) return "";
  const UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return "";
  std::string result;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&target), sizeof target) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf)) {
      result = buf;
    }
  }
  return result;
}

bool is_loopback_address(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

ProcessGroupOptions with_bind_address(ProcessGroupOptions options, const std::string& master_host,
                                      int master_port) {
  if (options.bind_address().empty() && !is_loopback_address(master_host) &&
      std::getenv(env::kGlooSocketIfname) == nullptr) {
    options.bind_address(route_address_to(master_host, master_port));
  }
  return options;
}

bool is_broken_connection(const std::exception& error) {
  // Gloo's own error, thrown as it is when the failure surfaces in the collective itself (a
  // c10::Error when c10d notices first).
  return dynamic_cast<const gloo::IoException*>(&error) != nullptr;
}

Connected connect_gloo(const ConnectArgs& args) {
  args.rendezvous();
  const ProcessGroupOptions& o = args.options;
  const std::string host = o.bind_address().empty() ? "127.0.0.1" : o.bind_address();
  const char* ifname = std::getenv(env::kGlooSocketIfname);
  const bool by_interface = o.bind_address().empty() && ifname != nullptr;
  try {
    SigpipeBlockedForNewThreads no_sigpipe;
    return compat::make_gloo(args.store, args.rank, args.size, o.timeout(), host,
                             by_interface ? ifname : "");
  } catch (const std::exception& e) {
    throw DistributedError(c10::str("rank ", args.rank,
                                    ": cannot connect the gloo process group (bound to ",
                                    by_interface ? ifname : host, "): ", first_line(e.what())));
  }
}

}  // namespace ddp::backends
