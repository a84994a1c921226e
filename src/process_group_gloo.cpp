// The Gloo backend: CPU tensors (and, in CUDA builds, GPU ones through host copies) over TCP.
#include <signal.h>

#include <cstdlib>

#include "ddp/environment.h"
#include "ddp/error.h"
#include "process_group_backends.h"

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

}  // namespace

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
    throw DistributedError(concat("rank ", args.rank,
                                  ": cannot connect the gloo process group (bound to ",
                                  by_interface ? ifname : host, "): ", first_line(e.what())));
  }
}

}  // namespace ddp::backends
