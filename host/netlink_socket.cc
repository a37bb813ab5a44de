#include "host/netlink_socket.h"

#include <errno.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace uroce::host {

NetlinkSocket::~NetlinkSocket() {
  if (fd_ >= 0) close(fd_);
}

Status NetlinkSocket::Open(uint32_t groups) {
  fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd_ < 0) return IoError(std::string("netlink socket: ") + std::strerror(errno));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = groups;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    return IoError(std::string("netlink bind: ") + std::strerror(errno));
  }
  // Dumps of a host's addresses or neighbours fit easily; the kernel sizes
  // each datagram to at most a page or 32 KiB.
  buffer_.resize(64 * 1024);
  return Status::Ok();
}

Status NetlinkSocket::Request(nlmsghdr* request, const std::function<void(const nlmsghdr&)>& on_message) {
  if (fd_ < 0) return FailedPrecondition("netlink socket not open");
  request->nlmsg_seq = ++sequence_;
  request->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd_, request, request->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return IoError(std::string("netlink send: ") + std::strerror(errno));
  }
  const bool dump = (request->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
  // The kernel answers at once (the request is handled in sendto's context);
  // a bounded wait covers a busy machine without hanging on a lost answer.
  for (int empty_reads = 0; empty_reads < 1000;) {
    const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        ++empty_reads;
        usleep(100);
        continue;
      }
      return IoError(std::string("netlink receive: ") + std::strerror(errno));
    }
    size_t left = static_cast<size_t>(n);
    for (const nlmsghdr* h = reinterpret_cast<const nlmsghdr*>(buffer_.data()); NLMSG_OK(h, left);
         h = NLMSG_NEXT(h, left)) {
      // Events of subscribed groups (sequence 0) and stale answers are not ours.
      if (h->nlmsg_seq != sequence_) continue;
      if (h->nlmsg_type == NLMSG_DONE) return Status::Ok();
      if (h->nlmsg_type == NLMSG_ERROR) {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) return IoError("netlink: short error message");
        const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        if (err->error == 0) {
          if (!dump) return Status::Ok();  // the ACK after the answer
          continue;
        }
        const int code = -err->error;
        if (code == ENOENT || code == ESRCH || code == ENODEV || code == ENETUNREACH || code == EHOSTUNREACH) {
          return NotFound(std::strerror(code));
        }
        return IoError(std::string("netlink: ") + std::strerror(code));
      }
      on_message(*h);
    }
  }
  return IoError("netlink: no answer from the kernel");
}

void NetlinkSocket::Drain(const std::function<void(const nlmsghdr&)>& on_message) {
  if (fd_ < 0) return;
  for (;;) {
    const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
    if (n <= 0) return;  // nothing more (or an overrun: the caller re-asks anyway)
    size_t left = static_cast<size_t>(n);
    for (const nlmsghdr* h = reinterpret_cast<const nlmsghdr*>(buffer_.data()); NLMSG_OK(h, left);
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) continue;
      on_message(*h);
    }
  }
}

void ParseAttributes(const nlmsghdr& message, size_t fixed, const void** table, size_t max, uint16_t* lengths) {
  for (size_t i = 0; i <= max; ++i) {
    table[i] = nullptr;
    if (lengths != nullptr) lengths[i] = 0;
  }
  const size_t header = NLMSG_LENGTH(fixed);
  if (message.nlmsg_len < header) return;
  size_t left = message.nlmsg_len - NLMSG_ALIGN(header);
  const rtattr* a = reinterpret_cast<const rtattr*>(reinterpret_cast<const char*>(&message) + NLMSG_ALIGN(header));
  for (; RTA_OK(a, left); a = RTA_NEXT(a, left)) {
    if (a->rta_type > max) continue;
    table[a->rta_type] = RTA_DATA(a);
    if (lengths != nullptr) lengths[a->rta_type] = static_cast<uint16_t>(RTA_PAYLOAD(a));
  }
}

}  // namespace uroce::host
