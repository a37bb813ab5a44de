// A verbs program for tests:port_state_test: opens the first device, prints
// how long that took and its port's state, then waits for the port events
// asked for (ibv_get_async_event(3)), printing each with the state after it.
//
//   port_state_check TIMEOUT_S [EVENT...]     EVENT: active | err
//
// Exit 0 when every event came in order within TIMEOUT_S each; 1 otherwise.
#include <infiniband/verbs.h>
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

const char* StateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    default:
      return "OTHER";
  }
}

ibv_port_state PortState(ibv_context* ctx) {
  ibv_port_attr attr;
  if (ibv_query_port(ctx, 1, &attr) != 0) return IBV_PORT_NOP;
  return attr.state;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: port_state_check TIMEOUT_S [active|err]...\n");
    return 2;
  }
  const int timeout_ms = std::atoi(argv[1]) * 1000;
  const auto start = std::chrono::steady_clock::now();
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    std::printf("no device\n");
    return 1;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == nullptr) {
    std::printf("cannot open %s\n", ibv_get_device_name(list[0]));
    return 1;
  }
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("opened %s in %.3f s, port %s\n", ibv_get_device_name(list[0]), open_s, StateName(PortState(ctx)));
  std::fflush(stdout);
  for (int i = 2; i < argc; ++i) {
    const std::string want = argv[i];
    const ibv_event_type want_type = want == "active" ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    pollfd pfd{ctx->async_fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, timeout_ms);
    if (ready != 1) {
      std::printf("no event within %d s (want %s), port %s\n", timeout_ms / 1000, want.c_str(),
                  StateName(PortState(ctx)));
      return 1;
    }
    ibv_async_event event;
    if (ibv_get_async_event(ctx, &event) != 0) {
      std::printf("ibv_get_async_event failed\n");
      return 1;
    }
    const ibv_event_type got = event.event_type;
    const int port = event.element.port_num;
    ibv_ack_async_event(&event);
    std::printf("event %s port %d, port %s\n", ibv_event_type_str(got), port, StateName(PortState(ctx)));
    std::fflush(stdout);
    if (got != want_type || port != 1) return 1;
  }
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
