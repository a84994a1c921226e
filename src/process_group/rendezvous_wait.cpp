#include "process_group/rendezvous_wait.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "unique_fd.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

bool store_accepts(const std::string& host, int port, std::chrono::milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return false;  // a name not (yet) resolvable is waited for like an absent server
  }
  bool ok = false;
  for (addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
      break;
    }
    if (errno != EINPROGRESS) continue;
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, int(limit.count())) != 1) continue;
    int error = 0;
    socklen_t len = sizeof error;
    ok = ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
  }
  ::freeaddrinfo(found);
  return ok;
}

bool wait_with_progress(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                        const std::function<void(double, double)>& progress) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto next_report = start + kRendezvousProgressEvery;
  while (!done()) {
    const auto now = Clock::now();
    if (now >= deadline) return done();
    if (now >= next_report) {
      progress(std::chrono::duration<double>(now - start).count(),
               std::chrono::duration<double>(deadline - now).count());
      next_report += kRendezvousProgressEvery;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

void wait_for_store_server(const std::string& host, int port, std::chrono::milliseconds timeout,
                           int rank) {
  const bool up = wait_with_progress(
      [&] { return store_accepts(host, port, std::chrono::milliseconds(500)); }, timeout,
      [&](double waited, double left) {
        std::fprintf(stderr,
                     "ddp: rank %d: waiting for the rendezvous store at %s:%d (rank 0 hosts it): "
                     "%.0f s so far, %.0f s left\n",
                     rank, host.c_str(), port, waited, left);
      });
  if (!up) {
    throw TimeoutError(c10::str("rank ", rank, ": the rendezvous store at ", host, ":", port,
                                " did not answer within ", timeout.count() / 1000.0,
                                " s; check that rank 0 is running and that this address and port "
                                "reach it"));
  }
}

}  // namespace ddp
