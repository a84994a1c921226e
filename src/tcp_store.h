// The TCPStore a rendezvous meets in: rank 0's (process_group.cpp) or an elastic agent's
// (elastic_rendezvous.cpp), its server bound to the given address only where LibTorch allows it.
// Internal to libddp; header-only, so that it adds no translation unit of c10d headers.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

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
    throw std::runtime_error(concat("cannot resolve ", host, ": ", gai_strerror(rc)));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  UniqueFd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  if (!fd.valid() || ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      ::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(fd.get(), SOMAXCONN) != 0) {
    throw std::runtime_error(
        concat("cannot listen on ", host, ":", port, ": ", std::strerror(errno)));
  }
  return fd.release();  // the store owns it from here
}

/// A TCPStore server on host:port, or a client of one.
inline c10::intrusive_ptr<c10d::Store> tcp_store(const std::string& host, int port, bool is_server,
                                                 int world_size,
                                                 std::chrono::milliseconds timeout) {
  return compat::make_tcp_store(host, port, is_server, world_size, timeout,
                                is_server ? store_listen_socket(host, port) : -1);
}

}  // namespace ddp
