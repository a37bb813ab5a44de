// A process's port when attached to `uroce daemon`: the shared-memory port to
// the daemon's switch, plus direct links to the other processes on the host
// that this one talks to, plus a loop for frames between two of its own QPs.
//
// Why: through the daemon, every frame between two processes on the host
// crosses three busy-polling threads (sender, switch, receiver). On a machine
// with fewer cores than spinners each frame waits for the scheduler (80 us
// for 64 B on a 2-core VM against 2 us process to process). So the switch
// only sees the first frames between two processes: it notes the pair
// (FrameSwitch::TakeLinkRequests), the daemon makes a shared-memory file for
// the two (a ShmChannel, the lower slot maps it as kDaemon) and hands it to
// both (LINK, host/daemon_protocol.h); from then on their frames go straight
// from one process's engine to the other's. The daemon stays the control
// plane: it makes and closes links, routes CM MADs (QP 1), ARP/ND and
// everything to other hosts, and its switch still handles frames to a
// process with no link yet.
//
// Routing on send (first segment only, as the switch reads it,
// host/frame_inspect.h): a RoCEv2 frame to one of the host's addresses whose
// destination QPN is of our own lease goes round the loop; one of another
// slot's lease goes to that slot's link if there is one and it is not
// closed; everything else, QP 1 included, goes to the daemon.
//
// Isolation, as the switch enforces it (frame_switch.h): a frame from the
// link to slot S is taken only if it speaks as the host (the uplink's MAC,
// source and destination one of the host's addresses), is RoCEv2 to a QPN of
// our lease other than QP 1, and, for UD, comes from a QPN of S's lease
// (DETH). Anything else is counted (rx_refused) and freed. The shared memory
// itself is read as ShmChannel reads it (never trusted).
//
// Order: frames to a process went through the switch until the link came.
// A new link carries nothing until everything we sent to the daemon before
// it has been taken by the switch (ShmChannel::SendDrained), and the
// receiver reads its port to the daemon before its links in each burst, so
// the first frames over the link do not overtake the last ones through the
// switch (RC would recover by a NAK, UC would lose a message). What remains
// is the few microseconds between the switch taking frames and putting
// them into the receiver's port, within one switch poll.
//
// Back-pressure: a full link takes nothing; the engine keeps the frames and
// sends them on its next poll (transport/packet_io.h). A link that takes
// nothing for kStallLimit sends in a row (its process stopped polling, or
// was stopped) has its frames dropped instead, so that it cannot stall our
// traffic to everyone else; RC recovers them by retransmission.
//
// Large messages (transport/peer_memory.h): each link's file has a payload
// area each way. The sending engine copies a message chunk by chunk into its
// area and sends a small descriptor per chunk; the receiving engine copies
// the chunk out, each on its own core, so the two copies overlap (staged
// chunks, transport/pull_descriptor.h). Where no chunk is free, the engine
// reads a SEND or WRITE
// from a linked process's memory (process_vm_readv(2)) when both processes
// found they can read each other's (VerifyPulls: the other's pid from the
// daemon, SO_PEERCRED; its uid ours; a random cookie it published in the
// link's file read back from its memory at the address it gave) and each
// told the other so in the file. A frame from a link carries that link in
// its mbuf (hash.usr: slot and generation), so a descriptor is read only
// from the process whose link it came by, and not after the link was
// replaced.
//
// Threads: RxBurst/TxBurst on the engine's polling thread (one at a time;
// transport/packet_io.h). Add, Remove and Reclaim on the control path, any
// thread (serialized here). The link table is published by pointer; a
// removed link's memory is unmapped only once the polling side has finished
// a burst since (its epoch moved), by Reclaim.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "host/shm_channel.h"
#include "transport/headers.h"
#include "transport/packet_io.h"
#include "transport/peer_memory.h"

namespace uroce::host {

struct LocalLinkCounters {
  uint64_t loop_frames = 0;     // between two of our own QPs
  uint64_t link_tx_frames = 0;  // straight to another process
  uint64_t link_rx_frames = 0;  // straight from another process
  uint64_t daemon_tx_frames = 0;
  uint64_t rx_refused = 0;      // from a link, not what that process may send us
  uint64_t tx_stalled_drops = 0;  // to a link that took nothing for too long
  uint64_t links = 0;           // links in use now
  uint64_t pull_links = 0;      // of them, with processes whose memory we read (and they ours)
};

class LocalLinks final : public transport::PacketIo, public transport::PeerMemory {
 public:
  static constexpr uint32_t kSlots = 256;  // slots 1..254 (the daemon's leases)
  static constexpr uint32_t kLoopCapacity = 1024;
  static constexpr uint32_t kStallLimit = 1u << 20;

  struct Options {
    transport::PacketIo* daemon = nullptr;  // the port to the switch
    // Its shared-memory channel, to know when the switch has taken all we
    // sent (order, above); null: a new link is used at once.
    const ShmChannel* daemon_channel = nullptr;
    rte_mempool* pool = nullptr;            // receive buffers
    uint32_t own_slot = 0;                  // our lease: QPNs own_slot << 16 ..
    transport::MacAddress mac{};            // the uplink's (the host's)
    std::vector<transport::Gid> gids;       // the host's addresses
    // Connected services' frames cross links in their link form
    // (transport/link_frame.h): no Ethernet, IP, UDP or ICRC. False: wire
    // frames, for a port whose frames are corrupted on purpose
    // ([impair] corrupt), which only an ICRC catches.
    bool link_frames = true;
  };

  explicit LocalLinks(const Options& options);
  ~LocalLinks() override;
  LocalLinks(const LocalLinks&) = delete;
  LocalLinks& operator=(const LocalLinks&) = delete;

  uint16_t RxBurst(rte_mbuf** pkts, uint16_t n) override;
  uint16_t TxBurst(rte_mbuf** pkts, uint16_t n) override;

  // transport::PeerMemory, on the polling thread.
  bool TakesPulls(uint32_t dest_qpn, const transport::Gid& dest_gid) override;
  bool LinkFrameTo(uint32_t dest_qpn, const transport::Gid& dest_gid) override;
  bool WriteLinkAck(uint32_t peer_qpn, const transport::Gid& peer_gid, uint32_t index_qpn, uint64_t word) override;
  bool ReadOwnLinkAck(uint32_t peer_qpn, const transport::Gid& peer_gid, uint32_t index_qpn, uint64_t* word) override;
  bool ReadLinkAck(uint32_t peer_qpn, const transport::Gid& peer_gid, uint32_t index_qpn, uint64_t* word,
                   uint64_t* read_to) override;
  bool LinkReadPast(uint32_t peer_qpn, const transport::Gid& peer_gid, uint64_t read_to) override;
  uint32_t PullSource(const rte_mbuf* m) override;
  bool Pull(uint32_t source, const iovec* local, uint32_t local_count, const iovec* remote,
            uint32_t remote_count) override;
  bool Stage(uint32_t dest_qpn, const transport::Gid& dest_gid, const iovec* pieces, uint32_t count,
             transport::StageTicket* ticket, transport::StageCopy copy) override;
  void Unstage(const transport::StageTicket& ticket) override;
  uint32_t LinkSource(const rte_mbuf* m) override;
  bool LinkFrame(const rte_mbuf* m) override { return (m->hash.usr & kLinkFrameMark) != 0; }
  const uint8_t* StagedData(uint32_t link, uint32_t chunk, uint64_t sequence, uint32_t length) override;
  bool StagedIntact(uint32_t link, uint32_t chunk, uint64_t sequence) override;
  void TakeStaged(uint32_t link, uint32_t chunk, uint64_t sequence) override;
  bool StageTaken(const transport::StageTicket& ticket) override;

  // Control path. A link to `peer_slot` (one not ours, 1..254), mapped from
  // the daemon's file: the lower of the two slots is the kDaemon side. A
  // link that replaces an older one to the same slot retires it.
  // `peer_pid`, `peer_uid`: the other process as the daemon knows it
  // (LINK's pid= uid=; pid 0: unknown, its memory is never read).
  Status Add(uint32_t peer_slot, int fd, int64_t peer_pid = 0, uint32_t peer_uid = 0);
  void Remove(uint32_t peer_slot);
  // Unmaps the links removed before the polling side's last finished burst,
  // and checks the links whose processes' memory may be read (VerifyPulls).
  void Reclaim();

  // Any thread; counts may be a little behind.
  LocalLinkCounters counters() const;

 private:
  struct Table {
    uint32_t count = 0;
    std::array<uint8_t, kSlots> slots{};              // the linked slots, count of them
    std::array<ShmChannel*, kSlots> by_slot{};        // slot -> its link
    std::array<uint32_t, kSlots> generation{};         // slot -> which Add made its link
    std::array<int32_t, kSlots> pull_pid{};            // slot -> its process, once we read its memory; else 0
  };
  // A received frame's link (mbuf hash.usr): slot | generation << 8, the
  // generation's low 23 bits (bit 31 is kLinkFrameMark).
  static uint32_t TagGeneration(uint32_t generation) { return generation & 0x7FFFFF; }
  static uint32_t Tag(uint32_t slot, uint32_t generation) { return slot | (TagGeneration(generation) << 8); }
  const ShmChannel* PullLink(const Table* table, uint32_t tag) const;
  // The link a tag names, if it is still that link (any link, for staged
  // chunks: its area is the two processes' alone).
  const ShmChannel* TaggedLink(const Table* table, uint32_t tag) const;
  void VerifyPulls();  // control path, under control_mutex_
  static constexpr uint16_t kToDaemon = 0;  // Route's answer; else a slot
  static constexpr uint16_t kToLoop = 0xFFFF;

  uint16_t Route(const rte_mbuf* m, const Table* table);
  uint16_t SendRun(uint16_t destination, const Table* table, rte_mbuf** pkts, uint16_t n);
  // The link frames to `peer_qpn` at `peer_gid` go over now, in link form
  // (LinkFrameTo); null for any other.
  ShmChannel* LinkTo(uint32_t peer_qpn, const transport::Gid& peer_gid);
  // Frames built without an ICRC for a link (transport::kIcrcLeftOut) that
  // leave in wire form after all: their ICRC.
  static void WriteLeftOutIcrcs(rte_mbuf** pkts, uint16_t n);
  uint16_t ReceiveFromLink(uint32_t slot, ShmChannel* link, uint32_t tag, rte_mbuf** pkts, uint16_t n);
  bool Acceptable(uint32_t from_slot, const rte_mbuf* m) const;
  bool IsHost(const transport::Gid& gid) const;
  void Publish(std::unique_ptr<Table> table, std::unique_ptr<ShmChannel> retired);
  void EndBurst() { epoch_.store(epoch_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  static void Bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  const Options options_;
  // Polling side.
  std::atomic<const Table*> table_;
  std::atomic<uint64_t> epoch_{0};
  std::array<rte_mbuf*, kLoopCapacity> loop_{};
  uint32_t loop_head_ = 0, loop_tail_ = 0;
  uint32_t next_link_ = 0;  // round robin over the links on receive
  std::array<uint32_t, kSlots> stalled_{};  // sends in a row a link took nothing
  std::array<uint32_t, kSlots> in_use_{};   // the generation of the link we send on (order, above)
  // Our payload area on each link: which chunks hold staged data not yet
  // acknowledged (bit i: chunk i), for the link of that generation.
  struct Stager {
    uint32_t generation = 0;
    uint64_t in_use = 0;
  };
  std::array<Stager, kSlots> stagers_{};
  std::atomic<uint64_t> loop_frames_{0}, link_tx_frames_{0}, link_rx_frames_{0}, daemon_tx_frames_{0};
  std::atomic<uint64_t> rx_refused_{0}, tx_stalled_drops_{0};
  std::atomic<uint32_t> link_count_{0};  // for counters(), which may not touch a table
  std::atomic<uint32_t> pull_link_count_{0};

  // Control side.
  std::mutex control_mutex_;
  std::array<std::unique_ptr<ShmChannel>, kSlots> links_{};  // owned; the table points into them
  struct Retired {
    uint64_t epoch;  // unmap once the polling side's epoch is past this
    std::unique_ptr<Table> table;
    std::unique_ptr<ShmChannel> link;
  };
  std::unique_ptr<Table> current_;
  std::vector<Retired> retired_;
  uint32_t generations_ = 0;
  // Reading a linked process's memory: the daemon's word on who it is, and
  // where the check stands.
  enum class PullCheck : uint8_t { kNone, kPending, kVerified };
  std::array<int64_t, kSlots> peer_pid_{};
  std::array<uint32_t, kSlots> peer_uid_{};
  std::array<PullCheck, kSlots> pull_check_{};
};

}  // namespace uroce::host
