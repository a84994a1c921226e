// The TCPStore a rendezvous meets in: rank 0's (process_group.cpp) or an elastic agent's
// (elastic/rendezvous.cpp), its server bound to the given address only where LibTorch allows it.
// Internal to libddp; header-only, so that it adds no translation unit of c10d headers.
#pragma once

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "torch_compat.h"
#include "unique_fd.h"

namespace ddp {

/// A store server's socket, bound to `host` only (not every interface), for LibTorch versions
/// whose TCPStore takes it (compat::kTcpStoreTakesListenFd); -1 on the others, whose server
/// binds by itself. Throws with strerror's words ("Address already in use") on failure.
inline int store_listen_socket(const std::string& host, int port) {
  if (!compat::kTcpStoreTakesListenFd) return -1;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found))
    throw std::runtime_error(c10::str("cannot resolve ", host, ": ", gai_strerror(rc)));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  UniqueFd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  if (!fd.valid() || ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      ::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(fd.get(), SOMAXCONN) != 0) {
    throw std::runtime_error(
        c10::str("cannot listen on ", host, ":", port, ": ", std::strerror(errno)));
  }
  return fd.release();  // the store owns it from here
}

// LibTorch 2.14's TCPStore client waits for an answer without a time limit (recv() on a blocking
// socket; its timeout applies to waiting for keys only), so a node whose link is cut would hang
// in its next store call for good. A client's socket gets a receive and send limit instead
// (limit_socket_waits): a call then fails with c10d's "Socket Timeout" after it. The sockets are
// found by their peer's port (what the server accepted has the port as its own, not its peer's):
// store_sockets() lists this process's; a new client's is what it adds.
inline std::set<int> store_sockets(int port) {
  std::set<int> found;
  DIR* fds = ::opendir("/proc/self/fd");
  if (fds == nullptr) return found;
  while (const dirent* entry = ::readdir(fds)) {
    const int fd = std::atoi(entry->d_name);
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (entry->d_name[0] == '.' || ::getpeername(fd, (sockaddr*)&peer, &len) != 0) continue;
    const int peer_port = peer.ss_family == AF_INET    ? ntohs(((sockaddr_in*)&peer)->sin_port)
                          : peer.ss_family == AF_INET6 ? ntohs(((sockaddr_in6*)&peer)->sin6_port)
                                                       : -1;
    if (peer_port == port) found.insert(fd);
  }
  ::closedir(fds);
  return found;
}

/// Gives each socket in `fds` (and no other) a receive and send limit of `limit`.
inline void limit_socket_waits(const std::set<int>& fds, std::chrono::milliseconds limit) {
  const timeval tv{time_t(limit.count() / 1000), suseconds_t(limit.count() % 1000 * 1000)};
  for (const int fd : fds) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
}

/// Whether `host` names one of this machine's addresses (a socket can be bound to it).
inline bool is_local_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "0", &hints, &found) != 0) return false;
  bool local = false;
  for (addrinfo* a = found; a != nullptr && !local; a = a->ai_next) {
    const UniqueFd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    local = fd.valid() && ::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0;
  }
  ::freeaddrinfo(found);
  return local;
}

/// A TCPStore server on host:port, or a client of one.
inline c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, int port, bool is_server,
                                                 int world_size,
                                                 std::chrono::milliseconds timeout) {
  return compat::make_tcp_store(host, port, is_server, world_size, timeout,
                                is_server ? store_listen_socket(host, port) : -1);
}

/// A client of the store at host:port whose calls fail after `limit` rather than hang.
inline c10::intrusive_ptr<c10d::Store> store_client(const std::string& host, int port,
                                                    std::chrono::milliseconds limit) {
  const std::set<int> before = store_sockets(port);
  c10::intrusive_ptr<c10d::Store> store = tcp_store(host, port, false, 1, limit);
  std::set<int> added;
  for (const int fd : store_sockets(port)) {
    if (before.count(fd) == 0) added.insert(fd);
  }
  limit_socket_waits(added, limit);
  return store;
}

}  // namespace ddp
