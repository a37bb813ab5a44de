#include "pmd/neighbor_resolver.h"

#include <chrono>
#include <thread>

#include "pmd/config.h"
#include "pmd/neighbor_frames.h"

namespace uroce::pmd {
namespace {

using transport::Gid;
using transport::MacAddress;

void Bump(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

NeighborResolver::NeighborResolver(const Options& options) : options_(options) {}

void NeighborResolver::Attach(transport::Engine* engine, std::function<void()> progress) {
  engine_ = engine;
  progress_ = std::move(progress);
}

bool NeighborResolver::IsOurs(const Gid& ip) const {
  for (const Gid& a : options_.addresses) {
    if (a == ip) return true;
  }
  return false;
}

// Our first address of the same IP version as `ip`.
const Gid* NeighborResolver::SourceFor(const Gid& ip) const {
  const bool v4 = transport::IsIpv4MappedGid(ip);
  for (const Gid& a : options_.addresses) {
    if (transport::IsIpv4MappedGid(a) == v4) return &a;
  }
  return nullptr;
}

void NeighborResolver::Learn(const Gid& ip, const MacAddress& mac) {
  for (const Learned& r : recent_) {
    if (r.ip == ip && r.mac == mac) return;
  }
  if (!learned_.TryPush(Learned{ip, mac})) return;  // full: the next request asks again
  recent_[recent_next_++ % (sizeof(recent_) / sizeof(recent_[0]))] = Learned{ip, mac};
  Bump(counters_.learned);
}

void NeighborResolver::Answer(rte_mbuf* m) {
  if (engine_->QueueRawFrame(m)) return;
  Bump(counters_.tx_queue_full);
  rte_pktmbuf_free(m);
}

void NeighborResolver::HandleFrame(rte_mbuf* m) {
  NeighborMessage msg;
  if (rte_pktmbuf_is_contiguous(m)) {
    msg = ParseNeighborMessage(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m));
  }
  // RFC 826: the sender's pair is merged when we are the target; answers to
  // our own requests carry the pair we asked for.
  switch (msg.kind) {
    case NeighborMessageKind::kArpRequest:
    case NeighborMessageKind::kNeighborSolicitation: {
      const bool arp = msg.kind == NeighborMessageKind::kArpRequest;
      Bump(arp ? counters_.arp_requests_received : counters_.nd_solicitations_received);
      // A solicitation without a source link-layer option (duplicate address
      // detection, or a sender that wants a multicast answer) is not answered.
      if (!IsOurs(msg.target_ip) || !msg.has_sender_mac) break;
      Learn(msg.sender_ip, msg.sender_mac);
      // The answer reuses the request's buffer: no allocation on this thread.
      rte_pktmbuf_reset(m);
      uint8_t* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, kMaxNeighborFrame));
      if (out == nullptr) break;
      const size_t length = arp ? BuildArpReply(out, options_.mac, msg.target_ip, msg.sender_mac, msg.sender_ip)
                                : BuildNeighborAdvertisement(out, options_.mac, msg.target_ip, msg.sender_mac,
                                                             msg.sender_ip);
      rte_pktmbuf_trim(m, static_cast<uint16_t>(kMaxNeighborFrame - length));
      Bump(arp ? counters_.arp_replies_sent : counters_.nd_advertisements_sent);
      Answer(m);
      return;
    }
    case NeighborMessageKind::kArpReply:
    case NeighborMessageKind::kNeighborAdvertisement: {
      const bool arp = msg.kind == NeighborMessageKind::kArpReply;
      Bump(arp ? counters_.arp_replies_received : counters_.nd_advertisements_received);
      // An ARP reply must be addressed to one of our addresses; an
      // advertisement names its own target.
      if (msg.has_sender_mac && (!arp || IsOurs(msg.target_ip))) Learn(msg.sender_ip, msg.sender_mac);
      break;
    }
    case NeighborMessageKind::kNone:
      Bump(counters_.ignored);
      break;
  }
  rte_pktmbuf_free(m);
}

void NeighborResolver::DrainLearned() {
  Learned l;
  while (learned_.TryPop(&l)) engine_->AddNeighbor(l.ip, l.mac);
}

bool NeighborResolver::SendRequest(const Gid& ip, const Gid& source) {
  rte_mbuf* m = rte_pktmbuf_alloc(options_.pool);
  if (m == nullptr) return false;
  uint8_t* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, kMaxNeighborFrame));
  if (out == nullptr) {
    rte_pktmbuf_free(m);
    return false;
  }
  const bool v4 = transport::IsIpv4MappedGid(ip);
  const size_t length = v4 ? BuildArpRequest(out, options_.mac, source, ip)
                           : BuildNeighborSolicitation(out, options_.mac, source, ip);
  rte_pktmbuf_trim(m, static_cast<uint16_t>(kMaxNeighborFrame - length));
  if (!engine_->QueueRawFrame(m)) {
    Bump(counters_.tx_queue_full);
    rte_pktmbuf_free(m);
    return false;
  }
  Bump(v4 ? counters_.arp_requests_sent : counters_.nd_solicitations_sent);
  return true;
}

Status NeighborResolver::Resolve(const Gid& ip, unsigned timeout_ms) {
  if (timeout_ms == 0) timeout_ms = options_.timeout_ms;
  if (engine_ == nullptr) return Internal("neighbour resolver used before Attach");
  const bool v4 = transport::IsIpv4MappedGid(ip);
  const char* protocol = v4 ? "ARP" : "neighbour discovery";
  if (IsOurs(ip)) {
    return InvalidArgument(GidToString(ip) + " is this port's own address; uroce does not loop frames back");
  }
  const Gid* source = SourceFor(ip);
  if (source == nullptr) {
    return InvalidArgument(std::string("no local ") + (v4 ? "IPv4" : "IPv6") + " address to send " + protocol +
                           " from for " + GidToString(ip));
  }
  std::lock_guard<std::mutex> lock(resolve_mutex_);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  auto next_request = start;
  unsigned sent = 0;
  for (;;) {
    DrainLearned();
    if (engine_->LookupNeighbor(ip, nullptr)) return Status::Ok();
    const auto now = Clock::now();
    if (now >= deadline) break;
    if (now >= next_request) {
      if (SendRequest(ip, *source)) ++sent;
      next_request = now + std::chrono::milliseconds(options_.retry_ms);
    }
    if (progress_) {
      progress_();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  Bump(counters_.resolve_timeouts);
  return Unavailable(std::string("no ") + protocol + " answer for " + GidToString(ip) + " within " +
                     std::to_string(timeout_ms) + " ms (" + std::to_string(sent) +
                     " requests sent from " + GidToString(*source) + " " + MacToString(options_.mac) +
                     "); is the peer up and on this link?");
}

NeighborCounters NeighborResolver::counters() const {
  NeighborCounters c;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  c.arp_requests_received = get(counters_.arp_requests_received);
  c.arp_replies_sent = get(counters_.arp_replies_sent);
  c.arp_requests_sent = get(counters_.arp_requests_sent);
  c.arp_replies_received = get(counters_.arp_replies_received);
  c.nd_solicitations_received = get(counters_.nd_solicitations_received);
  c.nd_advertisements_sent = get(counters_.nd_advertisements_sent);
  c.nd_solicitations_sent = get(counters_.nd_solicitations_sent);
  c.nd_advertisements_received = get(counters_.nd_advertisements_received);
  c.learned = get(counters_.learned);
  c.ignored = get(counters_.ignored);
  c.tx_queue_full = get(counters_.tx_queue_full);
  c.resolve_timeouts = get(counters_.resolve_timeouts);
  return c;
}

}  // namespace uroce::pmd
