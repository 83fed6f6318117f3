// Handing NCCL's unique id (128 opaque bytes) from rank 0 to the other ranks
// before any communicator exists: over TCP at MASTER_ADDR:MASTER_PORT (what
// torchrun sets), or through a file. Plain POSIX; no NCCL here, so CI tests it.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/validate.hpp"
#include "mla/transfer.hpp"

namespace mla {
namespace {

using detail::error;
using Clock = std::chrono::steady_clock;

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status sys_error(const char* what, const LaunchInfo& who) {
  return error(Errc::invalid_value, "{} {}:{} failed: {}", what, who.master_addr, who.master_port,
               std::strerror(errno));
}

Status check_who(const LaunchInfo& who) {
  if (who.world_size < 1 || who.rank < 0 || who.rank >= who.world_size)
    return error(Errc::out_of_range, "rank = {} is outside [0, world_size = {})", who.rank,
                 who.world_size);
  return Status::Ok();
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

Status send_all(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return error(Errc::invalid_value, "bootstrap send: {}", std::strerror(errno));
    c += k;
    n -= static_cast<size_t>(k);
  }
  return Status::Ok();
}

Status recv_all(int fd, void* p, size_t n, Clock::time_point deadline) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, remaining_ms(deadline)) <= 0)
      return error(Errc::invalid_value, "bootstrap recv: timed out with {} bytes missing", n);
    const ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0)
      return error(Errc::invalid_value, "bootstrap recv: connection closed with {} bytes missing",
                   n);
    c += k;
    n -= static_cast<size_t>(k);
  }
  return Status::Ok();
}

Status resolve(const LaunchInfo& who, sockaddr_storage* addr, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(who.master_port);
  if (int rc = ::getaddrinfo(who.master_addr.c_str(), port.c_str(), &hints, &res); rc != 0)
    return error(Errc::invalid_value, "MASTER_ADDR = \"{}\" does not resolve: {}", who.master_addr,
                 ::gai_strerror(rc));
  std::memcpy(addr, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return Status::Ok();
}

}  // namespace

Status exchange_bytes_tcp(const LaunchInfo& who, void* bytes, size_t size, int timeout_ms) {
  MLA_TRY(check_who(who));
  if (who.world_size == 1) return Status::Ok();
  if (who.master_port < 1 || who.master_port > 65535)
    return error(Errc::out_of_range, "MASTER_PORT = {} is outside [1, 65535]", who.master_port);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  sockaddr_storage addr{};
  socklen_t len = 0;
  MLA_TRY(resolve(who, &addr, &len));
  // The reply from the receiver ("got it") keeps rank 0 from closing before
  // every byte has arrived, and proves both ends agree on the size.
  const uint64_t want = size;
  if (who.rank == 0) {
    Fd s(::socket(addr.ss_family, SOCK_STREAM, 0));
    if (s.fd < 0) return sys_error("socket for", who);
    int one = 1;
    ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) return sys_error("bind", who);
    if (::listen(s.fd, who.world_size) != 0) return sys_error("listen", who);
    for (int served = 1; served < who.world_size; ++served) {
      pollfd pf{s.fd, POLLIN, 0};
      if (::poll(&pf, 1, remaining_ms(deadline)) <= 0)
        return error(Errc::invalid_value,
                     "bootstrap: rank 0 waited {} ms at {}:{} and {} of {} ranks connected",
                     timeout_ms, who.master_addr, who.master_port, served - 1, who.world_size - 1);
      Fd c(::accept(s.fd, nullptr, nullptr));
      if (c.fd < 0) return sys_error("accept on", who);
      MLA_TRY(send_all(c.fd, &want, sizeof want));
      MLA_TRY(send_all(c.fd, bytes, size));
      uint64_t ack = 0;
      MLA_TRY(recv_all(c.fd, &ack, sizeof ack, deadline));
    }
    return Status::Ok();
  }
  // Other ranks: connect, retrying while rank 0 is not listening yet.
  for (;;) {
    Fd c(::socket(addr.ss_family, SOCK_STREAM, 0));
    if (c.fd < 0) return sys_error("socket for", who);
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      uint64_t got = 0;
      MLA_TRY(recv_all(c.fd, &got, sizeof got, deadline));
      if (got != want)
        return error(Errc::invalid_value,
                     "bootstrap: rank 0 sends {} bytes, rank {} expects {} (different builds?)",
                     got, who.rank, want);
      MLA_TRY(recv_all(c.fd, bytes, size, deadline));
      return send_all(c.fd, &got, sizeof got);
    }
    if (remaining_ms(deadline) == 0)
      return error(Errc::invalid_value,
                   "bootstrap: rank {} could not connect to rank 0 at {}:{} within {} ms: {}",
                   who.rank, who.master_addr, who.master_port, timeout_ms, std::strerror(errno));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status exchange_bytes_file(const LaunchInfo& who, const std::string& path, void* bytes, size_t size,
                           int timeout_ms) {
  MLA_TRY(check_who(who));
  if (path.empty()) return error(Errc::invalid_value, "id file path is empty");
  if (who.rank == 0) {
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
      if (!f) return error(Errc::invalid_value, "id file \"{}\": cannot write", tmp);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);  // atomic: readers never see half a file
    if (ec)
      return error(Errc::invalid_value, "id file \"{}\": rename failed: {}", path, ec.message());
    return Status::Ok();
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::ifstream f(path, std::ios::binary);
    if (f) {
      f.read(static_cast<char*>(bytes), static_cast<std::streamsize>(size));
      if (static_cast<size_t>(f.gcount()) == size && f.peek() == EOF) return Status::Ok();
      return error(Errc::invalid_value, "id file \"{}\" does not hold exactly {} bytes", path,
                   size);
    }
    if (remaining_ms(deadline) == 0)
      return error(Errc::invalid_value, "id file \"{}\" did not appear within {} ms", path,
                   timeout_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace mla
