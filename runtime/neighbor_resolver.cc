#include "runtime/neighbor_resolver.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "runtime/config.h"
#include "host/neighbor_frames.h"
#include "transport/address_text.h"

namespace uroce::runtime {

using host::BuildArpReply;
using host::BuildArpRequest;
using host::BuildNeighborAdvertisement;
using host::BuildNeighborSolicitation;
using transport::GidToString;
using transport::MacToString;
using host::NeighborMessage;
using host::NeighborMessageKind;
using host::ParseNeighborMessage;
using host::kMaxNeighborFrame;

namespace {

using transport::Gid;
using transport::MacAddress;

void Bump(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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
  const std::optional<size_t> index = transport::SourceGidFor(options_.addresses, ip);
  return index ? &options_.addresses[*index] : nullptr;
}

uint64_t NeighborResolver::PendingBit(const Gid& ip) {
  // FNV-1a over the address: cheap, and spreads IPv4-mapped addresses (whose
  // first 12 bytes are all the same) over the 64 bits.
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : ip) h = (h ^ b) * 1099511628211ull;
  return uint64_t{1} << (h % 64);
}

void NeighborResolver::PassOn(const Gid& ip, const MacAddress& mac, Heard heard) {
  if (heard == Heard::kAnswer) {
    // Not for an address we are asking about: refused here, without
    // taking a ring slot. (A hash: the control path checks exactly.)
    if ((pending_bits_.load(std::memory_order_acquire) & PendingBit(ip)) == 0) {
      Bump(counters_.refused);
      return;
    }
  } else {
    for (const Learned& r : recent_) {
      if (r.heard == Heard::kRequest && r.ip == ip && r.mac == mac) return;
    }
  }
  const Learned l{ip, mac, heard, NowNs()};
  if (!learned_.TryPush(l)) return;  // full: the resolver asks again
  if (heard == Heard::kRequest) recent_[recent_next_++ % (sizeof(recent_) / sizeof(recent_[0]))] = l;
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
  // What may be learned from each is decided on the control path
  // (DrainLearned; the rule is in neighbor_resolver.h).
  switch (msg.kind) {
    case NeighborMessageKind::kArpRequest:
    case NeighborMessageKind::kNeighborSolicitation: {
      const bool arp = msg.kind == NeighborMessageKind::kArpRequest;
      Bump(arp ? counters_.arp_requests_received : counters_.nd_solicitations_received);
      // A solicitation without a source link-layer option (duplicate address
      // detection, or a sender that wants a multicast answer) is not answered.
      if (!IsOurs(msg.target_ip) || !msg.has_sender_mac) break;
      PassOn(msg.sender_ip, msg.sender_mac, Heard::kRequest);  // a refresh at most
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
      // advertisement names its own target and, as an answer, carries the
      // Solicited flag (RFC 4861 7.2.4). Anything else answers nobody.
      if (msg.has_sender_mac && (arp ? IsOurs(msg.target_ip) : msg.solicited)) {
        PassOn(msg.sender_ip, msg.sender_mac, Heard::kAnswer);
      } else {
        Bump(counters_.refused);
      }
      break;
    }
    case NeighborMessageKind::kNone:
      Bump(counters_.ignored);
      break;
  }
  rte_pktmbuf_free(m);
}

void NeighborResolver::DrainLearned() {
  const auto now = Clock::now();
  bool pending_changed = false;
  Learned l;
  while (learned_.TryPop(&l)) {
    MacAddress held;
    const bool holds = engine_->LookupNeighbor(l.ip, &held);
    if (l.heard == Heard::kRequest) {
      // RFC 826 / RFC 4861 7.2.3 would add or replace; the strict rule:
      // only an entry we hold with this very MAC is refreshed.
      if (holds && held == l.mac) {
        engine_->AddNeighbor(l.ip, l.mac);
      } else {
        Bump(counters_.refused);
      }
      continue;
    }
    // An answer: to an outstanding request of ours, received after we asked.
    auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) {
      return p.ip == l.ip && l.at_ns >= p.asked_ns && now < p.expires;
    });
    if (it == pending_.end() || (holds && held != l.mac)) {
      Bump(counters_.refused);
      continue;
    }
    engine_->AddNeighbor(l.ip, l.mac);
    Bump(counters_.learned);
    // Answered: a second answer (another MAC for the same address) is
    // unsolicited.
    pending_.erase(it);
    pending_changed = true;
  }
  if (pending_changed) PublishPending();
}

void NeighborResolver::Prune(Clock::time_point now) {
  const size_t pending_before = pending_.size();
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [now](const Pending& p) { return now >= p.expires; }),
                 pending_.end());
  failures_.erase(
      std::remove_if(failures_.begin(), failures_.end(), [now](const Failure& f) { return now >= f.until; }),
      failures_.end());
  if (pending_.size() != pending_before) PublishPending();
}

void NeighborResolver::PublishPending() {
  uint64_t bits = 0;
  for (const Pending& p : pending_) bits |= PendingBit(p.ip);
  pending_bits_.store(bits, std::memory_order_release);
}

size_t NeighborResolver::pending_entries() {
  std::lock_guard<std::mutex> lock(resolve_mutex_);
  return pending_.size();
}

size_t NeighborResolver::failure_entries() {
  std::lock_guard<std::mutex> lock(resolve_mutex_);
  return failures_.size();
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
    // Our own address: the engine's loopback (or, attached to a daemon, the
    // static entry that sends it through the daemon's switch) needs no ARP.
    if (engine_->LookupNeighbor(ip, nullptr)) return Status::Ok();
    return InvalidArgument(GidToString(ip) + " is this port's own address, and its loopback is off");
  }
  const Gid* source = SourceFor(ip);
  if (source == nullptr) {
    return InvalidArgument(std::string("no local ") + (v4 ? "IPv4" : "IPv6") + " address to send " + protocol +
                           " from for " + GidToString(ip));
  }
  std::lock_guard<std::mutex> lock(resolve_mutex_);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  const auto linger = std::chrono::milliseconds(options_.failure_cache_ms);
  Prune(start);
  // What arrived before this call is judged against the requests outstanding
  // before it (an answer that came before we asked is not an answer).
  DrainLearned();
  if (engine_->LookupNeighbor(ip, nullptr)) return Status::Ok();
  for (const Failure& f : failures_) {
    if (f.ip == ip) {
      Bump(counters_.resolve_cached_failures);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(f.until - start).count();
      return Unavailable(std::string("no ") + protocol + " answer for " + GidToString(ip) +
                         " (it went unanswered moments ago; not asking again for " + std::to_string(left) +
                         " ms); is the peer up and on this link?");
    }
  }
  // Outstanding from now until a while after the deadline, so that a late
  // answer still counts.
  auto pending = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.ip == ip; });
  if (pending == pending_.end()) {
    if (pending_.size() >= kMaxPending) {
      pending_.erase(std::min_element(pending_.begin(), pending_.end(),
                                      [](const Pending& a, const Pending& b) { return a.expires < b.expires; }));
    }
    pending_.push_back(Pending{ip, NowNs(), deadline + linger});
  } else {
    pending->expires = std::max(pending->expires, deadline + linger);
  }
  PublishPending();
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
  if (failures_.size() >= kMaxFailures) {
    failures_.erase(std::min_element(failures_.begin(), failures_.end(),
                                     [](const Failure& a, const Failure& b) { return a.until < b.until; }));
  }
  failures_.push_back(Failure{ip, Clock::now() + linger});
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
  c.refused = get(counters_.refused);
  c.resolve_cached_failures = get(counters_.resolve_cached_failures);
  return c;
}

}  // namespace uroce::runtime
