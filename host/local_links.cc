#include "host/local_links.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "host/frame_inspect.h"
#include "host/shm_channel.h"
#include "host/stream_copy.h"
#include "transport/link_frame.h"
#include "transport/pull_descriptor.h"
#include "pmd/log.h"

namespace uroce::host {
namespace {

constexpr uint32_t kQpnShift = 16;  // a slot's lease: slot << 16 .. + 0xFFFF (daemon_protocol.h)

uint32_t SlotOf(uint32_t qpn) { return qpn >> kQpnShift; }

// A RoCEv2 frame's addresses and destination QP read at fixed offsets:
// untagged, IPv4 with a 20-byte header and no fragment or IPv6, UDP to 4791
// with the IP and UDP lengths within the frame and agreeing (RFC 791,
// RFC 8200, RFC 768, IBTA A17.2), then the BTH (IBTA 9.2: the opcode in
// byte 0, the destination QP in bytes 5-7). False for any other shape,
// which InspectFrame then reads whole. So the engine's parser reads these
// same bytes as these same fields, takes the frame as RoCE, and refuses it
// as a RoCE packet (counted, before any QP) if the rest is not right.
struct RocePeek {
  transport::Gid src_ip, dst_ip;
  uint32_t dest_qpn = 0;
  uint8_t opcode = 0;
};

bool PeekRoce(const rte_mbuf* m, RocePeek* peek) {
  constexpr size_t kEthernet = 14, kIpv4 = 20, kIpv6 = 40, kUdp = 8, kBthQpnEnd = 8;
  const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
  const size_t length = rte_pktmbuf_data_len(m);
  if (length < kEthernet + kIpv4 + kUdp + kBthQpnEnd) return false;
  const uint16_t ether_type = static_cast<uint16_t>(f[12] << 8 | f[13]);
  size_t udp = 0;
  auto load16 = [f](size_t at) { return static_cast<size_t>(f[at] << 8 | f[at + 1]); };
  size_t ip_end = 0;
  if (ether_type == transport::kEtherTypeIpv4) {
    // Version 4, IHL 5; total length (bytes 2-3); no fragment (bytes 6-7:
    // MF and the offset); protocol (byte 9) UDP; addresses at bytes 12-19.
    if (f[kEthernet] != 0x45 || f[kEthernet + 9] != transport::kIpProtocolUdp ||
        (load16(kEthernet + 6) & 0x3FFF) != 0) {
      return false;
    }
    ip_end = kEthernet + load16(kEthernet + 2);
    peek->src_ip = transport::Ipv4MappedGid(f + kEthernet + 12);
    peek->dst_ip = transport::Ipv4MappedGid(f + kEthernet + 16);
    udp = kEthernet + kIpv4;
  } else if (ether_type == transport::kEtherTypeIpv6) {
    // Version 6; payload length (bytes 4-5); next header (byte 6) UDP;
    // addresses at bytes 8-39.
    if (length < kEthernet + kIpv6 + kUdp + kBthQpnEnd || (f[kEthernet] >> 4) != 6 ||
        f[kEthernet + 6] != transport::kIpProtocolUdp) {
      return false;
    }
    ip_end = kEthernet + kIpv6 + load16(kEthernet + 4);
    std::memcpy(peek->src_ip.data(), f + kEthernet + 8, peek->src_ip.size());
    std::memcpy(peek->dst_ip.data(), f + kEthernet + 24, peek->dst_ip.size());
    udp = kEthernet + kIpv6;
  } else {
    return false;
  }
  // The UDP datagram (its length, bytes 4-5) is the rest of the IP packet,
  // which lies within the frame and holds the UDP header and a BTH's QP.
  if (ip_end > length || ip_end < udp + kUdp + kBthQpnEnd || load16(udp + 4) != ip_end - udp ||
      load16(udp + 2) != transport::kRoceV2UdpPort) {
    return false;
  }
  const uint8_t* bth = f + udp + kUdp;
  peek->opcode = bth[0];
  peek->dest_qpn = static_cast<uint32_t>(bth[5]) << 16 | static_cast<uint32_t>(bth[6]) << 8 | bth[7];
  return true;
}

// IBTA 9.2: an opcode's top three bits are its transport service; 011 is UD.
bool UdOpcode(uint8_t opcode) { return opcode >> 5 == 0x3; }

}  // namespace

LocalLinks::LocalLinks(const Options& options) : options_(options), current_(std::make_unique<Table>()) {
  table_.store(current_.get());
}

LocalLinks::~LocalLinks() {
  // Frames still looping are ours to free; the links unmap with links_.
  while (loop_head_ != loop_tail_) rte_pktmbuf_free(loop_[loop_head_++ % kLoopCapacity]);
}

bool LocalLinks::IsHost(const transport::Gid& gid) const {
  for (const transport::Gid& own : options_.gids) {
    if (transport::SameGid(own, gid)) return true;
  }
  return false;
}

uint16_t LocalLinks::Route(const rte_mbuf* m, const Table* table) {
  // Our own engine's frames: the common shapes need no parse (whoever
  // receives one checks all of it: Acceptable, the engine's parser).
  RocePeek peek;
  if (!PeekRoce(m, &peek)) {
    FrameInfo info;
    if (!InspectFrame(m, &info) || info.kind != FrameInfo::Kind::kRoce) return kToDaemon;
    peek.dst_ip = info.dst_ip;
    peek.dest_qpn = info.dest_qpn;
  }
  if (!IsHost(peek.dst_ip)) return kToDaemon;
  const uint32_t slot = SlotOf(peek.dest_qpn);
  // QP 1 (slot 0) is every process's: the daemon routes CM MADs.
  if (slot == 0 || slot >= kSlots) return kToDaemon;
  if (slot == options_.own_slot) return kToLoop;
  const ShmChannel* link = table->by_slot[slot];
  if (link == nullptr || link->closed()) return kToDaemon;
  if (in_use_[slot] != table->generation[slot]) {
    // A new link: not before the switch has taken what we sent it (order).
    if (options_.daemon_channel != nullptr && !options_.daemon_channel->SendDrained()) return kToDaemon;
    in_use_[slot] = table->generation[slot];
  }
  return static_cast<uint16_t>(slot);
}

void LocalLinks::WriteLeftOutIcrcs(rte_mbuf** pkts, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    if (m->hash.usr != transport::kIcrcLeftOut) continue;
    if (m->nb_segs == 1) transport::WriteIcrc(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_data_len(m));
    m->hash.usr = 0;
  }
}

uint16_t LocalLinks::SendRun(uint16_t destination, const Table* table, rte_mbuf** pkts, uint16_t n) {
  if (destination == kToDaemon || destination == kToLoop) {
    // Built for a link that is not taking them (closed, or not yet in
    // use): they leave in wire form, which has an ICRC.
    WriteLeftOutIcrcs(pkts, n);
  }
  if (destination == kToDaemon) {
    const uint16_t sent = options_.daemon->TxBurst(pkts, n);
    Bump(daemon_tx_frames_, sent);
    return sent;
  }
  if (destination == kToLoop) {
    const uint16_t room = static_cast<uint16_t>(std::min<uint32_t>(n, kLoopCapacity - (loop_tail_ - loop_head_)));
    for (uint16_t i = 0; i < room; ++i) loop_[loop_tail_++ % kLoopCapacity] = pkts[i];
    Bump(loop_frames_, room);
    return room;
  }
  ShmChannel* link = table->by_slot[destination];
  const uint16_t sent = options_.link_frames ? link->SendLinkFrames(pkts, n) : link->Send(pkts, n);
  if (sent != 0) {
    stalled_[destination] = 0;
    Bump(link_tx_frames_, sent);
    return sent;
  }
  if (++stalled_[destination] < kStallLimit) return 0;
  // Its process has not read for a long time: do not let it hold up the
  // rest of our traffic.
  rte_pktmbuf_free_bulk(pkts, n);
  Bump(tx_stalled_drops_, n);
  return n;
}

uint16_t LocalLinks::TxBurst(rte_mbuf** pkts, uint16_t n) {
  const Table* table = table_.load(std::memory_order_seq_cst);
  uint16_t done = 0;
  // Runs of frames to the same place, in order: what one destination cannot
  // take now stops the burst there (the caller keeps the rest, in order).
  uint16_t next_route = n != 0 ? Route(pkts[0], table) : kToDaemon;
  while (done < n) {
    const uint16_t destination = next_route;
    uint16_t end = done + 1;
    while (end < n && (next_route = Route(pkts[end], table)) == destination) ++end;
    const uint16_t run = static_cast<uint16_t>(end - done);
    const uint16_t sent = SendRun(destination, table, pkts + done, run);
    done = static_cast<uint16_t>(done + sent);
    if (sent < run) break;
  }
  EndBurst();
  return done;
}

bool LocalLinks::Acceptable(uint32_t from_slot, const rte_mbuf* m) const {
  if (m->hash.usr == kLinkFrameMark) {
    // The link form (transport/link_frame.h): a connected service's
    // packet, between two of the host's addresses, to a QP of our lease;
    // the engine parses the rest (ParseLinkFrame) and refuses a UD opcode.
    const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
    uint32_t dest_qpn = 0;
    if (m->nb_segs != 1 || !transport::LinkFrameDestQp(f, rte_pktmbuf_data_len(m), &dest_qpn)) return false;
    transport::Gid src, dst;
    std::memcpy(src.data(), f + transport::kLinkSrcGidOffset, src.size());
    std::memcpy(dst.data(), f + transport::kLinkDstGidOffset, dst.size());
    return IsHost(src) && IsHost(dst) && dest_qpn != 1 && SlotOf(dest_qpn) == options_.own_slot;
  }
  // The common shapes of a connected service's frame are read at fixed
  // offsets: the engine's parser reads the same bytes as the same fields
  // and refuses the frame if the rest is wrong. UD (its DETH names the
  // sender's QP) and every other shape are parsed here.
  RocePeek peek;
  FrameInfo info;
  if (PeekRoce(m, &peek) && !UdOpcode(peek.opcode)) {
    info.src_ip = peek.src_ip;
    info.dst_ip = peek.dst_ip;
    info.dest_qpn = peek.dest_qpn;
  } else if (!InspectFrame(m, &info) || info.kind != FrameInfo::Kind::kRoce) {
    return false;
  }
  const uint8_t* eth = rte_pktmbuf_mtod(m, const uint8_t*);
  if (!transport::SameMac(eth + 6, options_.mac.data())) return false;
  if (!IsHost(info.src_ip) || !IsHost(info.dst_ip)) return false;
  if (info.dest_qpn == 1 || SlotOf(info.dest_qpn) != options_.own_slot) return false;
  if (info.ud && SlotOf(info.src_qpn) != from_slot) return false;
  return true;
}

uint16_t LocalLinks::ReceiveFromLink(uint32_t slot, ShmChannel* link, uint32_t tag, rte_mbuf** pkts, uint16_t n) {
  const uint16_t got = link->Receive(pkts, n, options_.pool);
  uint16_t kept = 0;
  for (uint16_t i = 0; i < got; ++i) {
    if (Acceptable(slot, pkts[i])) {
      // The link it came by (PullSource), and its form (LinkFrame).
      pkts[i]->hash.usr = tag | (pkts[i]->hash.usr & kLinkFrameMark);
      pkts[kept++] = pkts[i];
    } else {
      rte_pktmbuf_free(pkts[i]);
      Bump(rx_refused_);
    }
  }
  Bump(link_rx_frames_, kept);
  return kept;
}

uint16_t LocalLinks::RxBurst(rte_mbuf** pkts, uint16_t n) {
  const Table* table = table_.load(std::memory_order_seq_cst);
  uint16_t got = 0;
  while (got < n && loop_head_ != loop_tail_) pkts[got++] = loop_[loop_head_++ % kLoopCapacity];
  if (got < n) got = static_cast<uint16_t>(got + options_.daemon->RxBurst(pkts + got, static_cast<uint16_t>(n - got)));
  // Not from a link: no process's memory may be read for them.
  for (uint16_t i = 0; i < got; ++i) pkts[i]->hash.usr = 0;
  // The links round robin, so that no process starves another.
  const uint32_t count = table->count;
  for (uint32_t i = 0; i < count && got < n; ++i) {
    const uint32_t slot = table->slots[(next_link_ + i) % count];
    got = static_cast<uint16_t>(got + ReceiveFromLink(slot, table->by_slot[slot], Tag(slot, table->generation[slot]),
                                                      pkts + got, static_cast<uint16_t>(n - got)));
  }
  if (count != 0) next_link_ = (next_link_ + 1) % count;
  EndBurst();
  return got;
}

// ------------------------------------------------- reading a linked process

bool LocalLinks::TakesPulls(uint32_t dest_qpn, const transport::Gid& dest_gid) {
  const Table* table = table_.load(std::memory_order_seq_cst);
  const uint32_t slot = SlotOf(dest_qpn);
  if (slot == 0 || slot >= kSlots || slot == options_.own_slot || table->pull_pid[slot] == 0) return false;
  // A QPN of that slot on another host (every host's daemon leases the
  // same ranges): Route sends it to the daemon, not over the link.
  if (!IsHost(dest_gid)) return false;
  const ShmChannel* link = table->by_slot[slot];
  // Only where Route sends it over this link: a descriptor through the
  // switch would be dropped by the receiver.
  return link != nullptr && !link->closed() && in_use_[slot] == table->generation[slot] && link->PeerReadsUs();
}

const ShmChannel* LocalLinks::PullLink(const Table* table, uint32_t tag) const {
  const uint32_t slot = tag & 0xFF;
  if (slot == 0 || slot >= kSlots || table->pull_pid[slot] == 0) return nullptr;
  if (TagGeneration(table->generation[slot]) != (tag >> 8)) return nullptr;  // a link that was replaced since
  // A closed link's process has ended: its pid may soon be another's.
  const ShmChannel* link = table->by_slot[slot];
  return link != nullptr && !link->closed() && link->PeerReadsUs() ? link : nullptr;
}

ShmChannel* LocalLinks::LinkTo(uint32_t peer_qpn, const transport::Gid& peer_gid) {
  if (!options_.link_frames) return nullptr;
  const Table* table = table_.load(std::memory_order_seq_cst);
  const uint32_t slot = SlotOf(peer_qpn);
  if (slot == 0 || slot >= kSlots || slot == options_.own_slot || !IsHost(peer_gid)) return nullptr;
  // Where Route sends it over the link now (as TakesPulls).
  ShmChannel* link = table->by_slot[slot];
  return link != nullptr && !link->closed() && in_use_[slot] == table->generation[slot] ? link : nullptr;
}

// If what LinkFrameTo said changes before the frame is sent, SendRun writes
// its ICRC.
bool LocalLinks::LinkFrameTo(uint32_t dest_qpn, const transport::Gid& dest_gid) {
  return LinkTo(dest_qpn, dest_gid) != nullptr;
}

// The link is the one frames to the peer go over now, and the words are
// read and written within this call: a link being removed is unmapped only
// after the polling side's next burst (Reclaim).
bool LocalLinks::WriteLinkAck(uint32_t peer_qpn, const transport::Gid& peer_gid, uint32_t index_qpn, uint64_t word) {
  ShmChannel* link = LinkTo(peer_qpn, peer_gid);
  if (link == nullptr || link->ack_entries() == 0) return false;
  link->StoreOwnAck(index_qpn, word);
  return true;
}

bool LocalLinks::ReadOwnLinkAck(uint32_t peer_qpn, const transport::Gid& peer_gid, uint32_t index_qpn,
                                uint64_t* word) {
  const ShmChannel* link = LinkTo(peer_qpn, peer_gid);
  if (link == nullptr || link->ack_entries() == 0) return false;
  *word = link->LoadOwnAck(index_qpn);
  return true;
}

// The word first, then the frames' index (both acquire loads): every frame
// the other process put into the link before it stored the word is below
// that index. read_to: the link's generation and the index.
bool LocalLinks::ReadLinkAck(uint32_t peer_qpn, const transport::Gid& peer_gid, uint32_t index_qpn, uint64_t* word,
                             uint64_t* read_to) {
  const ShmChannel* link = LinkTo(peer_qpn, peer_gid);
  if (link == nullptr || link->ack_entries() == 0) return false;
  *word = link->LoadPeerAck(index_qpn);
  const uint32_t generation = table_.load(std::memory_order_seq_cst)->generation[SlotOf(peer_qpn)];
  *read_to = uint64_t{generation} << 32 | link->PeerProduced();
  return true;
}

bool LocalLinks::LinkReadPast(uint32_t peer_qpn, const transport::Gid& /*peer_gid*/, uint64_t read_to) {
  const Table* table = table_.load(std::memory_order_seq_cst);
  const uint32_t slot = SlotOf(peer_qpn);
  if (slot == 0 || slot >= kSlots) return true;
  const ShmChannel* link = table->by_slot[slot];
  // A link removed or replaced since: nothing more comes from it, and what
  // its ring still held is lost (the requester recovers it as a loss).
  if (link == nullptr || table->generation[slot] != (read_to >> 32)) return true;
  return static_cast<int32_t>(link->consumed() - static_cast<uint32_t>(read_to)) >= 0;
}

uint32_t LocalLinks::PullSource(const rte_mbuf* m) {
  const uint32_t tag = m->hash.usr & ~kLinkFrameMark;
  return PullLink(table_.load(std::memory_order_seq_cst), tag) != nullptr ? tag : 0;
}

bool LocalLinks::Pull(uint32_t source, const iovec* local, uint32_t local_count, const iovec* remote,
                      uint32_t remote_count) {
  const Table* table = table_.load(std::memory_order_seq_cst);
  if (PullLink(table, source) == nullptr) return false;
  size_t want = 0;
  for (uint32_t i = 0; i < local_count; ++i) want += local[i].iov_len;
  // The pid is the daemon's word (SO_PEERCRED), never the frame's.
  const ssize_t got = process_vm_readv(table->pull_pid[source & 0xFF], local, local_count, remote, remote_count, 0);
  return got >= 0 && static_cast<size_t>(got) == want;
}

bool LocalLinks::Stage(uint32_t dest_qpn, const transport::Gid& dest_gid, const iovec* pieces, uint32_t count,
                       transport::StageTicket* ticket, transport::StageCopy copy) {
  const Table* table = table_.load(std::memory_order_seq_cst);
  const uint32_t slot = SlotOf(dest_qpn);
  if (slot == 0 || slot >= kSlots || slot == options_.own_slot || !IsHost(dest_gid)) return false;
  ShmChannel* link = table->by_slot[slot];
  // Only where Route sends the descriptor over this link (as TakesPulls).
  const uint32_t generation = table->generation[slot];
  if (link == nullptr || link->closed() || link->stage_chunks() == 0 || in_use_[slot] != generation) return false;
  size_t bytes = 0;
  for (uint32_t i = 0; i < count; ++i) bytes += pieces[i].iov_len;
  if (bytes == 0 || bytes > transport::kStagedChunkBytes) return false;
  Stager& stager = stagers_[slot];
  if (stager.generation != generation) stager = {generation, 0};  // a new link: its area is all free
  const uint32_t chunks = link->stage_chunks();
  const uint64_t all = chunks >= 64 ? ~uint64_t{0} : (uint64_t{1} << chunks) - 1;
  uint64_t free = all & ~stager.in_use;
  if (free == 0) {
    // Chunks of READ responses the reader has taken are free; their QPs
    // find them so later (StageTaken) and their Unstage is then ignored.
    for (uint64_t held = stager.in_use; held != 0; held &= held - 1) {
      const uint32_t chunk = static_cast<uint32_t>(__builtin_ctzll(held));
      if (link->TookLastFill(chunk)) free |= uint64_t{1} << chunk;
    }
    if (free == 0) return false;
  }
  const uint32_t chunk = static_cast<uint32_t>(__builtin_ctzll(free));
  stager.in_use |= uint64_t{1} << chunk;
  uint8_t* dest = link->BeginStage(chunk);
  for (uint32_t i = 0; i < count; ++i) {
    if (copy == transport::StageCopy::kStreaming) {
      StreamCopy(dest, static_cast<const uint8_t*>(pieces[i].iov_base), pieces[i].iov_len);
    } else {
      std::memcpy(dest, pieces[i].iov_base, pieces[i].iov_len);
    }
    dest += pieces[i].iov_len;
  }
  if (copy == transport::StageCopy::kStreaming) StreamFence();  // before EndStage publishes the chunk
  *ticket = {Tag(slot, generation), chunk, link->EndStage(chunk)};
  return true;
}

void LocalLinks::Unstage(const transport::StageTicket& ticket) {
  const uint32_t slot = ticket.link & 0xFF;
  if (slot == 0 || slot >= kSlots || ticket.chunk >= 64) return;
  Stager& stager = stagers_[slot];
  // A link replaced since: its area went with it.
  if (TagGeneration(stager.generation) != (ticket.link >> 8)) return;
  // A chunk filled again since (a READ response's, taken and reused): it is
  // someone else's now.
  const ShmChannel* link = TaggedLink(table_.load(std::memory_order_seq_cst), ticket.link);
  if (link != nullptr && !link->Holds(ticket.chunk, ticket.sequence)) return;
  stager.in_use &= ~(uint64_t{1} << ticket.chunk);
}

const ShmChannel* LocalLinks::TaggedLink(const Table* table, uint32_t tag) const {
  const uint32_t slot = tag & 0xFF;
  if (slot == 0 || slot >= kSlots || TagGeneration(table->generation[slot]) != (tag >> 8)) return nullptr;
  return table->by_slot[slot];
}

uint32_t LocalLinks::LinkSource(const rte_mbuf* m) {
  const uint32_t tag = m->hash.usr & ~kLinkFrameMark;
  return TaggedLink(table_.load(std::memory_order_seq_cst), tag) != nullptr ? tag : 0;
}

const uint8_t* LocalLinks::StagedData(uint32_t link, uint32_t chunk, uint64_t sequence, uint32_t length) {
  const ShmChannel* channel = TaggedLink(table_.load(std::memory_order_seq_cst), link);
  return channel != nullptr ? channel->StagedData(chunk, sequence, length) : nullptr;
}

bool LocalLinks::StagedIntact(uint32_t link, uint32_t chunk, uint64_t sequence) {
  const ShmChannel* channel = TaggedLink(table_.load(std::memory_order_seq_cst), link);
  return channel != nullptr && channel->StagedIntact(chunk, sequence);
}

void LocalLinks::TakeStaged(uint32_t link, uint32_t chunk, uint64_t sequence) {
  const ShmChannel* channel = TaggedLink(table_.load(std::memory_order_seq_cst), link);
  if (channel != nullptr) channel->MarkTaken(chunk, sequence);
}

bool LocalLinks::StageTaken(const transport::StageTicket& ticket) {
  // A link replaced since has no chunk of ours to keep, and a chunk filled
  // again since was reclaimed (Stage): taken, either.
  const ShmChannel* channel = TaggedLink(table_.load(std::memory_order_seq_cst), ticket.link);
  return channel == nullptr || !channel->Holds(ticket.chunk, ticket.sequence) ||
         channel->Taken(ticket.chunk, ticket.sequence);
}

void LocalLinks::VerifyPulls() {
  std::unique_ptr<Table> table;  // made only when a link is verified
  for (uint32_t i = 0; i < current_->count; ++i) {
    const uint32_t slot = current_->slots[i];
    if (pull_check_[slot] != PullCheck::kPending) continue;
    const ShmChannel* link = links_[slot].get();
    uint64_t address = 0, cookie = 0;
    if (link == nullptr || !link->PeerPullProbe(&address, &cookie)) continue;  // not offered yet: next time
    // Read its cookie where it says it is, from the pid the daemon named:
    // that this works proves the pid is that process in our pid namespace
    // and that the kernel lets us read it (ptrace rules: same user, no
    // Yama restriction, not undumpable).
    uint64_t value = 0;
    iovec here{&value, sizeof(value)};
    iovec there{reinterpret_cast<void*>(address), sizeof(value)};
    const ssize_t got = process_vm_readv(static_cast<pid_t>(peer_pid_[slot]), &here, 1, &there, 1, 0);
    if (got != static_cast<ssize_t>(sizeof(value)) || value != cookie) {
      pull_check_[slot] = PullCheck::kNone;
      UROCE_LOG(INFO, kHost, "local link to slot %u: large messages go as frames (the process's memory cannot "
                   "be read: %s)\n", slot, got < 0 ? std::strerror(errno) : "not the process it says it is");
      continue;
    }
    pull_check_[slot] = PullCheck::kVerified;
    links_[slot]->SetReadsPeer();
    if (table == nullptr) table = std::make_unique<Table>(*current_);
    table->pull_pid[slot] = static_cast<int32_t>(peer_pid_[slot]);
  }
  if (table == nullptr) return;
  uint32_t verified = 0;
  for (uint32_t i = 0; i < table->count; ++i) verified += table->pull_pid[table->slots[i]] != 0;
  pull_link_count_.store(verified, std::memory_order_relaxed);
  Publish(std::move(table), nullptr);
}

// ---------------------------------------------------------------- control path

void LocalLinks::Publish(std::unique_ptr<Table> table, std::unique_ptr<ShmChannel> retired) {
  link_count_.store(table->count, std::memory_order_relaxed);
  table_.store(table.get(), std::memory_order_seq_cst);
  // Whatever burst holds the old table ends by moving the epoch past this.
  const uint64_t epoch = epoch_.load(std::memory_order_seq_cst);
  retired_.push_back({epoch, std::move(current_), std::move(retired)});
  current_ = std::move(table);
}

Status LocalLinks::Add(uint32_t peer_slot, int fd, int64_t peer_pid, uint32_t peer_uid) {
  if (peer_slot == 0 || peer_slot >= kSlots - 1 || peer_slot == options_.own_slot) {
    return InvalidArgument("local link to slot " + std::to_string(peer_slot) + ": not another process's slot");
  }
  const ShmChannel::Side side = peer_slot > options_.own_slot ? ShmChannel::Side::kDaemon : ShmChannel::Side::kProcess;
  auto link = ShmChannel::Map(fd, side);
  if (!link.ok()) return link.status();
  std::lock_guard<std::mutex> lock(control_mutex_);
  auto table = std::make_unique<Table>(*current_);
  if (table->by_slot[peer_slot] == nullptr) table->slots[table->count++] = static_cast<uint8_t>(peer_slot);
  table->by_slot[peer_slot] = link->get();
  table->generation[peer_slot] = ++generations_;  // never 0: in_use_ starts there
  table->pull_pid[peer_slot] = 0;
  // Our cookie for the other process to read; its memory is read only once
  // VerifyPulls has read its cookie, and only if it is of our own uid.
  (*link)->OfferPullProbe();
  (*link)->TakeLinkFrames();  // both ends are processes: the link form (transport/link_frame.h)
  peer_pid_[peer_slot] = peer_pid;
  peer_uid_[peer_slot] = peer_uid;
  pull_check_[peer_slot] = peer_pid > 0 && peer_pid <= INT32_MAX && peer_uid == geteuid() ? PullCheck::kPending
                                                                                             : PullCheck::kNone;
  std::unique_ptr<ShmChannel> old = std::move(links_[peer_slot]);
  links_[peer_slot] = std::move(*link);
  Publish(std::move(table), std::move(old));
  return Status::Ok();
}

void LocalLinks::Remove(uint32_t peer_slot) {
  if (peer_slot >= kSlots) return;
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (links_[peer_slot] == nullptr) return;
  auto table = std::make_unique<Table>();
  for (uint32_t i = 0; i < current_->count; ++i) {
    const uint32_t slot = current_->slots[i];
    if (slot == peer_slot) continue;
    table->slots[table->count++] = static_cast<uint8_t>(slot);
    table->by_slot[slot] = current_->by_slot[slot];
    table->generation[slot] = current_->generation[slot];
    table->pull_pid[slot] = current_->pull_pid[slot];
  }
  pull_check_[peer_slot] = PullCheck::kNone;
  Publish(std::move(table), std::move(links_[peer_slot]));
}

void LocalLinks::Reclaim() {
  std::lock_guard<std::mutex> lock(control_mutex_);
  const uint64_t epoch = epoch_.load(std::memory_order_seq_cst);
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(), [epoch](const Retired& r) { return epoch > r.epoch; }),
                 retired_.end());
  VerifyPulls();
}

LocalLinkCounters LocalLinks::counters() const {
  LocalLinkCounters c;
  c.loop_frames = loop_frames_.load(std::memory_order_relaxed);
  c.link_tx_frames = link_tx_frames_.load(std::memory_order_relaxed);
  c.link_rx_frames = link_rx_frames_.load(std::memory_order_relaxed);
  c.daemon_tx_frames = daemon_tx_frames_.load(std::memory_order_relaxed);
  c.rx_refused = rx_refused_.load(std::memory_order_relaxed);
  c.tx_stalled_drops = tx_stalled_drops_.load(std::memory_order_relaxed);
  c.links = link_count_.load(std::memory_order_relaxed);
  c.pull_links = pull_link_count_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace uroce::host
