#include "host/frame_switch.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <variant>

#include "cm/cm_mad.h"
#include "host/frame_inspect.h"
#include "host/neighbor_frames.h"
#include "transport/opcode.h"
#include "transport/packet_builder.h"
#include "transport/wire_types.h"

namespace uroce::host {

using transport::Gid;
using transport::LoadBe16;
using transport::LoadBe24;

FrameSwitch::FrameSwitch(const Options& options) : options_(options), burst_(options.burst) {
  attached_.reserve(kPorts);
  ports_[kUplink].io = options.uplink;
}

FrameSwitch::~FrameSwitch() {
  for (Port& p : ports_) {
    rte_pktmbuf_free_bulk(p.stage, p.staged);
    p.staged = 0;
  }
}

static_assert(kSwitchCmKinds == std::variant_size_v<cm::CmMessage>, "one counter per CM message kind");

const char* SwitchCmKindName(size_t kind) {
  static constexpr const char* kNames[kSwitchCmKinds] = {"req", "mra", "rej", "rep", "rtu", "dreq", "drep"};
  return kind < kSwitchCmKinds ? kNames[kind] : "?";
}

Status FrameSwitch::Attach(uint32_t slot, transport::PacketIo* io) {
  if (slot < kSwitchFirstSlot || slot > kSwitchLastSlot) return InvalidArgument("switch slot out of range");
  if (io == nullptr) return InvalidArgument("switch port without I/O");
  if (ports_[slot].io != nullptr) return AlreadyExists("switch slot in use");
  ports_[slot].counters = {};
  ports_[slot].io = io;
  attached_.push_back(slot);
  return Status::Ok();
}

Status FrameSwitch::Listen(uint16_t port, uint32_t slot) {
  if (!attached(slot) || slot == kUplink) return InvalidArgument("no such switch slot");
  if (listeners_[port] != 0 && listeners_[port] != slot) {
    return AlreadyExists("port " + std::to_string(port) + " is listened on by another process on this host");
  }
  listeners_[port] = static_cast<uint8_t>(slot);
  return Status::Ok();
}

void FrameSwitch::Unlisten(uint16_t port, uint32_t slot) {
  if (listeners_[port] == slot) listeners_[port] = 0;
}

void FrameSwitch::Detach(uint32_t slot) {
  if (slot < kSwitchFirstSlot || slot > kSwitchLastSlot || ports_[slot].io == nullptr) return;
  for (uint8_t& owner : listeners_) {
    if (owner == slot) owner = 0;
  }
  for (RoutedRequest& r : routed_requests_) {
    if (r.slot == slot) r = {};  // its requests died with it
  }
  Port& p = ports_[slot];
  rte_pktmbuf_free_bulk(p.stage, p.staged);
  p.staged = 0;
  p.io = nullptr;
  // Its pairs may be asked for again by whoever takes the slot next, and
  // requests not taken yet are void.
  asked_[slot] = {};
  for (auto& row : asked_) row[slot / 64] &= ~(uint64_t{1} << (slot % 64));
  sent_[slot] = {};
  for (auto& row : sent_) row[slot / 64] &= ~(uint64_t{1} << (slot % 64));
  size_t kept = 0;
  for (size_t i = 0; i < link_requests_; ++i) {
    const LinkRequest& r = link_request_queue_[i];
    if (r.a != slot && r.b != slot) link_request_queue_[kept++] = r;
  }
  link_requests_ = kept;
  attached_.erase(std::remove(attached_.begin(), attached_.end(), slot), attached_.end());
}

bool FrameSwitch::IsOurs(const Gid& gid) const {
  for (const Gid& own : options_.gids) {
    if (own == gid) return true;
  }
  return false;
}

bool FrameSwitch::IsHostAddress(const Gid& gid) const {
  if (IsOurs(gid)) return true;
  for (const FrameSwitch* sibling : siblings_) {
    if (sibling->IsOurs(gid)) return true;
  }
  return false;
}

unsigned FrameSwitch::Poll() {
  unsigned moved = 0;
  // The uplink, then every process: one burst each, so no port starves
  // another.
  const uint16_t n = ports_[kUplink].io->RxBurst(burst_.data(), static_cast<uint16_t>(burst_.size()));
  for (uint16_t i = 0; i < n; ++i) FromUplink(burst_[i]);
  moved += n;
  for (size_t k = 0; k < attached_.size(); ++k) {
    const uint32_t slot = attached_[k];
    const uint16_t got = ports_[slot].io->RxBurst(burst_.data(), static_cast<uint16_t>(burst_.size()));
    for (uint16_t i = 0; i < got; ++i) FromProcess(slot, burst_[i]);
    moved += got;
  }
  FlushAll();
  return moved;
}

void FrameSwitch::FromUplink(rte_mbuf* m) {
  Port& up = ports_[kUplink];
  up.counters.rx_frames++;
  up.counters.rx_bytes += rte_pktmbuf_pkt_len(m);
  FrameInfo info;
  if (!InspectFrame(m, &info)) return Drop(kUplink, m, &counters_.malformed);
  const uint8_t* eth_src = rte_pktmbuf_mtod_offset(m, const uint8_t*, 6);
  switch (info.kind) {
    case FrameInfo::Kind::kRoce:
      // The destination first: an af_packet port shows us our own frames
      // to other hosts too, and those are not attacks.
      if (!IsOurs(info.dst_ip)) return Drop(kUplink, m, &counters_.not_for_us);
      // Nothing on the wire may speak as the host. Attached processes run
      // with loopback = no (their configuration from the daemon), so their
      // engines' own check, which drops a frame from the port that claims
      // one of their GIDs, is off: for them the host's addresses are also
      // their peers' on this host. A frame from the wire with the host's
      // source would then pass the path check of a connection between two
      // local processes and reach their QPs and CM as if local. Frames
      // between processes never come from the uplink; the switch moves
      // them.
      if (IsHostAddress(info.src_ip)) return Drop(kUplink, m, &counters_.wire_own_source);
      // Martian sources (RFC 1122 3.2.1.3, RFC 4291 2.5 and 2.7), and an
      // Ethernet source that is a group address or our own MAC.
      if (UnusableSourceAddress(info.src_ip, info.ipv6_header) || GroupMacAddress(eth_src) ||
          std::memcmp(eth_src, options_.mac.data(), 6) == 0) {
        return Drop(kUplink, m, &counters_.wire_bad_source);
      }
      return ToRoceOwner(kUplink, info, m, this);
    case FrameInfo::Kind::kNeighbor:
      // A kernel uplink: the kernel answers for its addresses (an af_packet
      // port shows us its traffic too).
      if (options_.kernel_neighbors) return Drop(kUplink, m, &counters_.not_for_us);
      return AnswerNeighbor(m);
    case FrameInfo::Kind::kOther:
      return Drop(kUplink, m, &counters_.not_for_us);
  }
}

void FrameSwitch::FromProcess(uint32_t slot, rte_mbuf* m) {
  Port& port = ports_[slot];
  port.counters.rx_frames++;
  port.counters.rx_bytes += rte_pktmbuf_pkt_len(m);
  FrameInfo info;
  if (!InspectFrame(m, &info)) return Drop(slot, m, &counters_.malformed);
  // A process speaks as the host only: the uplink's MAC as the source.
  const uint8_t* eth = rte_pktmbuf_mtod(m, const uint8_t*);
  if (std::memcmp(eth + 6, options_.mac.data(), 6) != 0) return Drop(slot, m, &counters_.spoofed);
  switch (info.kind) {
    case FrameInfo::Kind::kRoce: {
      if (!IsOurs(info.src_ip)) return Drop(slot, m, &counters_.spoofed);
      // UD carries its source QPN (DETH): it must be one the process leased,
      // or QP 1, its own GSI QP. RC and UC name no source QPN on the wire.
      if (info.ud && info.src_qpn != 1 && SlotOfQpn(info.src_qpn) != slot) return Drop(slot, m, &counters_.spoofed);
      // QP 1 is shared by name by every process: whatever goes to it must
      // come from it (a CM MAD from a leased QPN would otherwise pass the
      // check above), and whatever comes from it must be a CM MAD that
      // speaks for the process's own connections.
      if (info.ud && (info.src_qpn == 1 || info.dest_qpn == 1)) {
        size_t kind = 0;
        if (info.src_qpn != 1 || !SpeaksForSlot(slot, info, m, &kind)) return Drop(slot, m, &counters_.spoofed);
        port.counters.cm_sent[kind]++;
      }
      if (IsOurs(info.dst_ip)) {
        counters_.local_frames++;
        return ToRoceOwner(slot, info, m, this);
      }
      for (FrameSwitch* sibling : siblings_) {
        if (!sibling->IsOurs(info.dst_ip)) continue;
        // Checked here as ours; the process has the same slot there.
        counters_.local_frames++;
        counters_.cross_frames++;
        return sibling->ToRoceOwner(slot, info, m, this);
      }
      return StageTo(kUplink, m);
    }
    case FrameInfo::Kind::kNeighbor: {
      // Only the process's own ARP requests and neighbour solicitations go
      // out; answers for the host's addresses are the switch's.
      const NeighborMessage msg = ParseNeighborMessage(eth, rte_pktmbuf_data_len(m));
      if (msg.kind != NeighborMessageKind::kArpRequest && msg.kind != NeighborMessageKind::kNeighborSolicitation) {
        return Drop(slot, m, &counters_.not_for_us);
      }
      if (!IsOurs(msg.sender_ip)) return Drop(slot, m, &counters_.spoofed);
      if (options_.kernel_neighbors) return AskNeighbor(slot, msg, m);
      return AskTheWire(slot, msg, m);
    }
    case FrameInfo::Kind::kOther:
      return Drop(slot, m, &counters_.not_for_us);
  }
}

void FrameSwitch::ToRoceOwner(uint32_t from, const FrameInfo& info, rte_mbuf* m, FrameSwitch* origin) {
  if (info.dest_qpn == 1) return ToCmOwner(from, info, m, origin);
  const uint32_t slot = SlotOfQpn(info.dest_qpn);
  if (slot < kSwitchFirstSlot || slot > kSwitchLastSlot || ports_[slot].io == nullptr) {
    return origin->Drop(from, m, &counters_.unknown_qpn);
  }
  // A link joins two processes on one uplink; across two, the switches
  // carry the frames.
  if (origin == this && from != kUplink && from != slot) NoteLocalPair(from, slot);
  StageTo(slot, m);
}

// A link costs both processes a mapped file and a place among their few
// links, so it is asked for only once frames went both ways: one process
// sending to every other's QPNs (which their engines drop) links nobody.
void FrameSwitch::NoteLocalPair(uint32_t from, uint32_t to) {
  sent_[from][to / 64] |= uint64_t{1} << (to % 64);
  if ((sent_[to][from / 64] & (uint64_t{1} << (from % 64))) == 0) return;
  const uint32_t a = std::min(from, to), b = std::max(from, to);
  uint64_t& word = asked_[a][b / 64];
  const uint64_t bit = uint64_t{1} << (b % 64);
  if ((word & bit) != 0 || link_requests_ == kLinkRequests) return;
  word |= bit;
  link_request_queue_[link_requests_++] = {a, b};
}

size_t FrameSwitch::TakeLinkRequests(LinkRequest* out, size_t max) {
  const size_t n = std::min(max, link_requests_);
  std::copy(link_request_queue_.begin(), link_request_queue_.begin() + n, out);
  std::copy(link_request_queue_.begin() + n, link_request_queue_.begin() + link_requests_, link_request_queue_.begin());
  link_requests_ -= n;
  return n;
}

// Every process sends its CM MADs from QP 1, so the source QPN says nothing:
// a MAD must be a CM message whose sender's communication ID (every CM
// message carries it, IBTA 12.6) is one of the process's, so that no process
// can disconnect, reject or answer for another's connection. That includes
// a REJ: uroce's CM puts an ID of its own in every REJ it sends, also for a
// REQ it keeps no state for (IBTA 12.6.7 asks for the sender's ID), so a
// REJ with ID 0 is nobody's. Only the switch's own REJ (RejectRequest) has
// none, and it does not pass here.
bool FrameSwitch::SpeaksForSlot(uint32_t slot, const FrameInfo& info, const rte_mbuf* m, size_t* kind) const {
  cm::CmMad mad;
  if (cm::DecodeCmMad(rte_pktmbuf_mtod_offset(m, const uint8_t*, info.payload), info.payload_length, &mad) !=
      cm::CmMadError::kOk) {
    return false;
  }
  *kind = mad.message.index();
  const uint32_t local_comm_id = std::visit([](const auto& message) { return message.local_comm_id; }, mad.message);
  return local_comm_id != 0 && local_comm_id >> kSwitchCommIdShift == slot;
}

// A CM MAD (IBTA 12.6) to the process it is for. Only well-formed CM MADs
// are routed: DecodeCmMad checks the header and every field the CM reads.
void FrameSwitch::ToCmOwner(uint32_t from, const FrameInfo& info, rte_mbuf* m, FrameSwitch* origin) {
  cm::CmMad mad;
  // The GSI QP speaks only to the GSI QP (IBTA 13.5.1): a frame to QP 1
  // from any other QP (from the wire; processes are checked before) is no
  // CM message.
  if (!info.ud || info.src_qpn != 1) return origin->Drop(from, m, &counters_.cm_bad_qp);
  if (cm::DecodeCmMad(rte_pktmbuf_mtod_offset(m, const uint8_t*, info.payload), info.payload_length, &mad) !=
          cm::CmMadError::kOk) {
    return origin->Drop(from, m, &counters_.cm_unrouted);
  }
  uint32_t slot = 0;
  if (const auto* req = std::get_if<cm::CmReq>(&mad.message)) {
    if ((req->service_id & ~uint64_t{0xFFFF}) != cm::kRdmaIpServiceIdBase) {
      RejectRequest(from, info, mad.header.transaction_id, req->local_comm_id, m, origin);
      return origin->Drop(from, m, &counters_.cm_no_listener);
    }
    slot = listeners_[req->service_id & 0xFFFF];
    if (slot == 0) {
      RejectRequest(from, info, mad.header.transaction_id, req->local_comm_id, m, origin);
      return origin->Drop(from, m, &counters_.cm_no_listener);
    }
    NoteRoutedRequest(info.src_ip, req->local_comm_id, slot);
  } else if (const auto* rej = std::get_if<cm::CmRej>(&mad.message);
             rej != nullptr && rej->remote_comm_id == 0 && rej->message_rejected == cm::CmMessageKind::kReq) {
    // The caller's REJ of its own REQ (it gave up, or closed its endpoint,
    // before any answer): to whoever that REQ went to.
    slot = SlotOfRequest(info.src_ip, rej->local_comm_id);
  } else {
    // Every other CM message names the receiver's communication ID as its
    // remote one.
    const uint32_t remote_comm_id =
        std::visit([](const auto& message) -> uint32_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(message)>, cm::CmReq>) {
            return 0;
          } else {
            return message.remote_comm_id;
          }
        }, mad.message);
    slot = remote_comm_id >> kSwitchCommIdShift;
  }
  if (slot < kSwitchFirstSlot || slot > kSwitchLastSlot || ports_[slot].io == nullptr) {
    return origin->Drop(from, m, &counters_.cm_unrouted);
  }
  counters_.cm_routed++;
  ports_[slot].counters.cm_received[mad.message.index()]++;
  StageTo(slot, m);
}

void FrameSwitch::NoteRoutedRequest(const transport::Gid& caller, uint32_t caller_id, uint32_t slot) {
  if (caller_id == 0) return;
  for (RoutedRequest& r : routed_requests_) {
    if (r.caller_id == caller_id && r.caller == caller) {
      r.slot = slot;  // a resend
      return;
    }
  }
  routed_requests_[next_routed_request_] = {caller, caller_id, slot};
  next_routed_request_ = (next_routed_request_ + 1) % kRoutedRequests;
}

uint32_t FrameSwitch::SlotOfRequest(const transport::Gid& caller, uint32_t caller_id) const {
  if (caller_id == 0) return 0;
  for (const RoutedRequest& r : routed_requests_) {
    if (r.caller_id == caller_id && r.caller == caller) return r.slot;
  }
  return 0;
}

// REJ "invalid service ID" (IBTA 12.6.7, table 112) for a REQ nobody on the
// host listens for, as a connection manager would answer it: to the REQ's
// Ethernet and IP source, from QP 1 to QP 1 with the GSI Q_Key (13.5.1),
// naming the caller's communication ID. The caller fails at once instead of
// retrying into a timeout.
void FrameSwitch::RejectRequest(uint32_t from, const FrameInfo& info, uint64_t transaction_id, uint32_t caller_id,
                                const rte_mbuf* request, FrameSwitch* origin) {
  constexpr uint32_t kGsiQkey = 0x80010000;
  const uint8_t* eth = rte_pktmbuf_mtod(request, const uint8_t*);
  cm::CmMad mad;
  mad.header.transaction_id = transaction_id;
  cm::CmRej rej;
  rej.remote_comm_id = caller_id;
  rej.message_rejected = cm::CmMessageKind::kReq;
  rej.reason = cm::kRejInvalidServiceId;
  mad.message = rej;
  uint8_t payload[cm::kMadBytes];
  cm::EncodeCmMad(mad, payload);
  transport::PacketFields f;
  std::memcpy(f.dst_mac.data(), eth + 6, 6);
  f.src_mac = options_.mac;
  f.ip_version = transport::IsIpv4MappedGid(info.dst_ip) ? transport::IpVersion::kIpv4 : transport::IpVersion::kIpv6;
  f.src_gid = info.dst_ip;
  f.dst_gid = info.src_ip;
  f.udp_src_port = 0xC000;
  f.bth.opcode = static_cast<uint8_t>(transport::Opcode::kUdSendOnly);
  f.bth.dest_qp = 1;
  f.deth.qkey = kGsiQkey;
  f.deth.src_qp = 1;
  f.payload_length = cm::kMadBytes;
  rte_mbuf* answer = rte_pktmbuf_alloc(options_.pool);
  if (answer == nullptr) {
    counters_.alloc_failures++;
    return;
  }
  if (transport::BuildPacket(f, payload, answer) != transport::BuildError::kOk) {
    rte_pktmbuf_free(answer);
    counters_.alloc_failures++;
    return;
  }
  counters_.cm_rejects++;
  origin->StageTo(from, answer);
}

void FrameSwitch::AnswerNeighbor(rte_mbuf* m) {
  const NeighborMessage msg = ParseNeighborMessage(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m));
  switch (msg.kind) {
    case NeighborMessageKind::kArpRequest:
    case NeighborMessageKind::kNeighborSolicitation: {
      if (!IsOurs(msg.target_ip) || !msg.has_sender_mac) return Drop(kUplink, m, &counters_.not_for_us);
      // Answer in place: the request's buffer is big enough for the answer.
      uint8_t frame[kMaxNeighborFrame];
      const size_t len = msg.kind == NeighborMessageKind::kArpRequest
                             ? BuildArpReply(frame, options_.mac, msg.target_ip, msg.sender_mac, msg.sender_ip)
                             : BuildNeighborAdvertisement(frame, options_.mac, msg.target_ip, msg.sender_mac,
                                                          msg.sender_ip);
      rte_pktmbuf_free(m);
      counters_.neighbor_answers++;
      return StageNeighborFrame(kUplink, frame, len);
    }
    case NeighborMessageKind::kArpReply:
    case NeighborMessageKind::kNeighborAdvertisement: {
      // An answer unicast to another station is not ours to learn from; it
      // is also how an af_packet port shows us our own answers again.
      const uint8_t* eth = rte_pktmbuf_mtod(m, const uint8_t*);
      if (!GroupMacAddress(eth) && std::memcmp(eth, options_.mac.data(), 6) != 0) {
        return Drop(kUplink, m, &counters_.not_for_us);
      }
      // An answer binds its sender's address to a MAC (RFC 826; RFC 4861
      // 7.2.5: the NA's target). The host's addresses are this switch's and
      // its siblings' to answer for, and every process knows them from its
      // configuration: an answer for one of them from the wire is a claim
      // on the host's address, never copied (the engines' own check does
      // not apply to attached processes; see FromUplink).
      if (IsHostAddress(msg.sender_ip)) return Drop(kUplink, m, &counters_.wire_own_source);
      if (GroupMacAddress(msg.eth_src.data()) || msg.eth_src == options_.mac) {
        return Drop(kUplink, m, &counters_.wire_bad_source);
      }
      return CopyToProcesses(m);
    }
    case NeighborMessageKind::kNone:
      return Drop(kUplink, m, &counters_.not_for_us);
  }
}

// A DPDK uplink: the switch asks the wire itself. A neighbour learns the
// asker's address and MAC from a request (RFC 826's merge step; RFC 4861
// 7.2.3 for the source link-layer option), so a process's own bytes (its
// ARP sender hardware address, its NS option, a gratuitous request, a
// unicast destination) would let it tell the LAN that the host's address is
// at another MAC. The question is rebuilt from the target alone
// (BuildNeighborQuestion); the sender address was checked above. One of the
// host's own addresses is answered at once (the switch reaches them), never
// asked on the wire.
void FrameSwitch::AskTheWire(uint32_t slot, const NeighborMessage& msg, rte_mbuf* m) {
  uint8_t frame[kMaxNeighborFrame];
  NeighborRefusal why = NeighborRefusal::kNone;
  const size_t len = BuildNeighborQuestion(frame, msg, options_.mac, msg.sender_ip, &why);
  if (len == 0) return Drop(slot, m, &counters_.neighbor_refused);
  if (IsHostAddress(msg.target_ip)) return AskNeighbor(slot, msg, m);
  rte_pktmbuf_free(m);
  counters_.neighbor_rebuilt++;
  StageNeighborFrame(kUplink, frame, len);
}

// Kernel mode: the answer would reach the kernel, not the process, so the
// question goes to the daemon. One of the host's own addresses is answered
// at once (the switch reaches them). The answer goes to the uplink's MAC,
// the only one a process may send from, whatever the request said.
void FrameSwitch::AskNeighbor(uint32_t slot, const NeighborMessage& msg, rte_mbuf* m) {
  NeighborQuestion q;
  q.slot = slot;
  q.ipv6 = msg.kind == NeighborMessageKind::kNeighborSolicitation;
  q.target = msg.target_ip;
  q.sender_ip = msg.sender_ip;
  q.sender_mac = options_.mac;
  rte_pktmbuf_free(m);
  if (IsHostAddress(q.target)) return AnswerNeighborQuestion(q, options_.mac);
  if (questions_of_[slot] >= kQuestionsPerProcess) {
    counters_.neighbor_over_quota++;
    return;
  }
  if (questions_ == kQuestions) {
    counters_.neighbor_questions_dropped++;
    return;
  }
  counters_.neighbor_questions++;
  questions_of_[slot]++;
  question_queue_[questions_++] = q;
}

size_t FrameSwitch::TakeNeighborQuestions(NeighborQuestion* out, size_t max) {
  const size_t n = std::min(max, questions_);
  std::copy(question_queue_.begin(), question_queue_.begin() + static_cast<long>(n), out);
  for (size_t i = 0; i < n; ++i) questions_of_[out[i].slot]--;
  std::copy(question_queue_.begin() + static_cast<long>(n), question_queue_.begin() + static_cast<long>(questions_),
            question_queue_.begin());
  questions_ -= n;
  return n;
}

void FrameSwitch::AnswerNeighborQuestion(const NeighborQuestion& q, const transport::MacAddress& mac) {
  if (q.slot < kSwitchFirstSlot || q.slot > kSwitchLastSlot || ports_[q.slot].io == nullptr) return;
  uint8_t frame[kMaxNeighborFrame];
  const size_t len = q.ipv6 ? BuildNeighborAdvertisement(frame, mac, q.target, q.sender_mac, q.sender_ip)
                            : BuildArpReply(frame, mac, q.target, q.sender_mac, q.sender_ip);
  counters_.neighbor_answers++;
  StageNeighborFrame(q.slot, frame, len);
}

void FrameSwitch::StageNeighborFrame(uint32_t slot, const uint8_t* frame, size_t length) {
  rte_mbuf* answer = rte_pktmbuf_alloc(options_.pool);
  if (answer == nullptr) {
    counters_.alloc_failures++;
    return;
  }
  char* data = rte_pktmbuf_append(answer, static_cast<uint16_t>(length));
  if (data == nullptr) {
    rte_pktmbuf_free(answer);
    counters_.alloc_failures++;
    return;
  }
  std::memcpy(data, frame, length);
  StageTo(slot, answer);
}

void FrameSwitch::CopyToProcesses(rte_mbuf* m) {
  for (const uint32_t slot : attached_) {
    rte_mbuf* copy = rte_pktmbuf_copy(m, options_.pool, 0, UINT32_MAX);
    if (copy == nullptr) {
      counters_.alloc_failures++;
      continue;
    }
    counters_.neighbor_copies++;
    StageTo(slot, copy);
  }
  rte_pktmbuf_free(m);
}

void FrameSwitch::StageTo(uint32_t slot, rte_mbuf* m) {
  Port& p = ports_[slot];
  if (p.staged == kStage) {
    p.counters.tx_full++;
    rte_pktmbuf_free(m);
    return;
  }
  p.stage[p.staged++] = m;
}

void FrameSwitch::Drop(uint32_t from, rte_mbuf* m, uint64_t* reason) {
  ++*reason;
  ports_[from].counters.rx_dropped++;
  rte_pktmbuf_free(m);
}

void FrameSwitch::FlushAll() {
  auto flush = [](Port& p) {
    if (p.staged == 0) return;
    uint64_t bytes = 0;
    for (uint16_t i = 0; i < p.staged; ++i) bytes += rte_pktmbuf_pkt_len(p.stage[i]);
    const uint16_t sent = p.io->TxBurst(p.stage, p.staged);
    // A switch does not hold frames for a slow port: what its queue cannot
    // take is dropped (the transport's retransmission recovers it).
    for (uint16_t i = sent; i < p.staged; ++i) {
      bytes -= rte_pktmbuf_pkt_len(p.stage[i]);
      rte_pktmbuf_free(p.stage[i]);
    }
    p.counters.tx_full += p.staged - sent;
    p.counters.tx_frames += sent;
    p.counters.tx_bytes += bytes;
    p.staged = 0;
  };
  flush(ports_[kUplink]);
  for (const uint32_t slot : attached_) flush(ports_[slot]);
}

}  // namespace uroce::host
