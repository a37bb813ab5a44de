#include "pmd/memif_hangup_guard.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <mutex>

#include "pmd/log.h"
#include "pmd/memif_import.h"

namespace uroce::pmd {
namespace {

std::atomic<uint64_t> g_sends_to_gone_peers{0};

// What net_memif calls instead of sendmsg once the guard is installed. Only
// memif's control channel sends (a few messages per connection), on EAL's
// interrupt thread or the thread that stops a port.
ssize_t HangupTolerantSendmsg(int fd, const msghdr* message, int flags) {
  const ssize_t sent = sendmsg(fd, message, flags | MSG_NOSIGNAL);
  if (sent >= 0 || (errno != EPIPE && errno != ECONNRESET)) return sent;
  g_sends_to_gone_peers.fetch_add(1, std::memory_order_relaxed);
  size_t length = 0;
  for (size_t i = 0; i < message->msg_iovlen; ++i) length += message->msg_iov[i].iov_len;
  return static_cast<ssize_t>(length);
}

}  // namespace

Status InstallMemifHangupGuard() {
  static std::once_flag once;
  static Status result = Status::Ok();
  std::call_once(once, [] {
    result = RedirectMemifImport("sendmsg", reinterpret_cast<void*>(&HangupTolerantSendmsg));
    if (!result.ok()) {
      UROCE_LOG(WARNING, kPmd, "memif runs unguarded against a peer that hangs up before the handshake: %s\n",
                result.ToString().c_str());
    }
  });
  return result;
}

uint64_t MemifSendsToGonePeers() { return g_sends_to_gone_peers.load(std::memory_order_relaxed); }

}  // namespace uroce::pmd
