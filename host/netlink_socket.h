// A route netlink socket (rtnetlink(7)) for the daemon's questions to the
// kernel about the interface it shares: its addresses, routes and
// neighbours. Control path only: every call is a system call.
//
// Threads: one at a time.
#pragma once

#include <linux/netlink.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"

namespace uroce::host {

class NetlinkSocket {
 public:
  NetlinkSocket() = default;
  ~NetlinkSocket();
  NetlinkSocket(const NetlinkSocket&) = delete;
  NetlinkSocket& operator=(const NetlinkSocket&) = delete;

  // A NETLINK_ROUTE socket; `groups` (RTMGRP_* bits) subscribes to events.
  Status Open(uint32_t groups = 0);
  int fd() const { return fd_; }

  // Sends `request` (its nlmsg_len, type and flags set; sequence number and
  // NLM_F_REQUEST/ACK filled in here) and hands every answering message to
  // `on_message` until the kernel's final answer (NLMSG_DONE for a dump, the
  // message or NLMSG_ERROR otherwise). An NLMSG_ERROR with an error code
  // becomes the returned status (its errno in the message).
  Status Request(nlmsghdr* request, const std::function<void(const nlmsghdr&)>& on_message);

  // Event sockets: every message already queued, without waiting.
  void Drain(const std::function<void(const nlmsghdr&)>& on_message);

 private:
  int fd_ = -1;
  uint32_t sequence_ = 0;
  std::vector<char> buffer_;
};

// The attributes of a netlink message after its fixed header of `fixed`
// bytes: `table[type]` points at attribute `type` (up to `max`), or null.
void ParseAttributes(const nlmsghdr& message, size_t fixed, const void** table, size_t max,
                     uint16_t* lengths = nullptr);

}  // namespace uroce::host
