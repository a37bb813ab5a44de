// For tests of libfabric objects whose wait object is an fd (fi_cq(3),
// fi_eq(3) FI_WAIT_UNSPEC as uroce resolves it; fi_poll(3)): the fd in an
// epoll set of its own, the way ofi_rxm and applications watch it. Libfabric
// headers and gtest only, so that the provider's own tests and programs on
// the public libfabric API both use it.
#pragma once

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <sys/epoll.h>
#include <unistd.h>

namespace uroce::testing {

// Checks that `object` (a CQ or EQ) reports FI_WAIT_FD, takes the fd
// (FI_GETWAIT) and adds it, for EPOLLIN, to a new epoll set. Returns the
// epoll fd for the caller to close; -1 after a test failure.
inline int EpollOnWaitFd(fid* object) {
  fi_wait_obj kind = FI_WAIT_NONE;
  EXPECT_EQ(fi_control(object, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, FI_WAIT_FD);
  int fd = -1;
  EXPECT_EQ(fi_control(object, FI_GETWAIT, &fd), 0);
  if (fd < 0) {
    ADD_FAILURE() << "FI_GETWAIT gave no fd";
    return -1;
  }
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    ADD_FAILURE() << "epoll_create1 failed";
    return -1;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ADD_FAILURE() << "epoll_ctl(EPOLL_CTL_ADD) on the wait fd failed";
    close(ep);
    return -1;
  }
  return ep;
}

}  // namespace uroce::testing
