// A uroce process's DPDK side, built from a UroceConfig: for every
// [endpoint.NAME], a packet pool, a started port (ring pair side, vdev or PCI
// NIC), an engine on that port with ARP/ND, a PD and a CQ; telemetry; and in
// engine progress mode the engine lcores. Shutdown takes it all down again in
// order and checks that every packet buffer is back in its pool.
//
// Lifetime: EAL first (StartEalFor), then Runtime::Start; Shutdown (or the
// destructor) before StopEal. Several runtimes may live one after another in
// a process (tests), each with its own ring pair names and devices.
//
// Threads: Start, Shutdown and endpoint() are control path (the main lcore).
// Progress() is for inline mode: whoever polls drives (never two threads on
// one engine at once; Engine::Poll lets only one in anyway).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "runtime/config.h"
#include "host/daemon_client.h"
#include "host/daemon_protocol.h"
#include "pmd/engine_lcores.h"
#include "pmd/eth_port_io.h"
#include "pmd/impaired_port_io.h"
#include "host/local_links.h"
#include "pmd/mempool.h"
#include "runtime/neighbor_resolver.h"
#include "pmd/ring_pair.h"
#include "host/shm_channel.h"
#include "transport/engine_side.h"
#include "transport/engine.h"

namespace uroce::runtime {

// The [impair] section as one port's faults (seed: the section's; a port
// derives its own stream from it, pmd::DeriveSeed).
pmd::PortImpairment PortImpairmentFor(const ImpairConfig& im);

struct ShutdownReport {
  unsigned qps_flushed = 0;   // QPs moved to the error state (work flushed)
  unsigned mbufs_in_pools = 0;
  unsigned mbufs_total = 0;
  // [impair]: what was injected, one line per endpoint ("" without faults).
  std::string impairments;
  // Congestion signals, one line per endpoint that saw or sent any (CE-marked
  // frames received, CNPs sent, received and ignored, paced waits); "" if
  // none did.
  std::string congestion;
  // Messages read from another process's memory (transport/peer_memory.h),
  // one line per endpoint that sent or received any ("" if none did).
  std::string pulls;
  bool pools_full() const { return mbufs_in_pools == mbufs_total; }
  std::string Summary() const;  // "mbufs back in the pools: N of N; QPs flushed: Q", then the lines above
};

class Runtime {
 public:
  // One uroce device (uroce0, uroce1, ... in its order): a configuration's
  // [endpoint.NAME], with its port, buffers, ARP/ND and engine.
  struct Device {
    std::string name;
    runtime::EndpointConfig config;
    uint16_t port_id = 0;  // RTE_MAX_ETHPORTS (none) for a daemon's shared-memory port
    std::string driver;
    pmd::MempoolPtr pool;
    unsigned pool_size = 0;
    bool port_started = false;  // false: a memif client that never connected
    // A memif client's port is started (and restarted) by the connector
    // thread until its link is up; until then nobody else touches the port.
    bool memif_client = false;
    std::atomic<bool> link_ready{true};
    std::unique_ptr<host::ShmChannel> shm;  // kShm: the port's shared memory
    std::unique_ptr<host::ShmPortIo> shm_io;  // kShm: the port to the daemon's switch
    host::LocalLinks* links = nullptr;      // kShm: io, as what it is (host/local_links.h)
    std::unique_ptr<transport::PacketIo> io;
    // [impair] with frame faults: between the engine and `io` (pmd/impaired_port_io.h).
    std::unique_ptr<pmd::ImpairedPortIo> impaired;
    std::unique_ptr<NeighborResolver> neighbors;
    transport::EngineSide side;  // engine, pd, cq, gid (the first), mac
  };

  // EAL must be running with what config.eal asks for (StartEalFor).
  static StatusOr<std::unique_ptr<Runtime>> Start(const runtime::UroceConfig& config);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  size_t device_count() const { return devices_.size(); }
  Device& device(size_t i) { return *devices_[i]; }
  // The device of [endpoint.`name`], or null.
  Device* Find(const std::string& name);

  bool inline_progress() const { return config_.progress == runtime::ProgressMode::kInline; }
  // Inline mode: one Poll of every engine, returns the packets moved. Engine
  // mode: nothing to do (the lcores poll), returns 0.
  unsigned Progress();
  // Inline mode, from a poll of a CQ of `polled`'s (ibv_poll_cq, fi_cq_read):
  // one Poll of that engine, and of the others only every
  // kOtherEnginesEvery calls: if a poll of one device's CQ drove every
  // engine of the process (a then b), what one engine sent would wait a
  // whole round of the others. The others still move (a process
  // that polls only uroce0 while a peer talks to uroce1, the CM's MADs),
  // at a lower rate. Null `polled`: every engine.
  unsigned Progress(const transport::Engine* polled);
  static constexpr uint32_t kOtherEnginesEvery = 16;

  // Waits until every device's link is up, each for at most its
  // link_timeout_ms (0: not waited for). For uroce's own tools, which
  // measure or demonstrate over the link; Start itself never waits (a verbs
  // or libfabric program opens its device at once). Control path.
  Status WaitForLinks();
  // Whether the device's port moves frames over an up link now. Any thread.
  bool LinkUp(const Device& e) const;

  // The first half of Shutdown: stops the engine lcores (this thread polls
  // from now on), moves every QP to the error state and polls until their
  // work is flushed (IBV_WC_WR_FLUSH_ERR in the CQs, which stay readable
  // until Shutdown). Returns the QPs it moved.
  unsigned FlushQueuePairs();

  // FlushQueuePairs if not done yet, then destroys the engines, drains and
  // closes the ports, and counts the mbufs in the pools. Idempotent;
  // QueuePair and CompletionQueue pointers die with it.
  ShutdownReport Shutdown();

  const runtime::UroceConfig& config() const { return config_; }

  // [impair]: the faults injected so far, one line per endpoint ("uroce0:
  // seed 7; tx: frames N, dropped N, ...; rx: ...; RNR storm NAKs N"), or ""
  // without [impair]. Control path (reads the engines' counters).
  std::string ImpairmentReport();
  // Congestion signals per endpoint (ShutdownReport::congestion).
  std::string CongestionReport() const;
  std::string PullReport() const;

  // Attached to a daemon: a LINK (file `fd`, not taken over) or UNLINK for
  // the endpoint of uplink change.uplink (host/local_links.h). Control path,
  // any thread. kNotFound if no endpoint is that uplink's port.
  Status ChangeLocalLink(const host::LinkChange& change, int fd);
  // Unmaps the links removed since, once the engines have moved on.
  void ReclaimLocalLinks();
  // Both for what `session` received so far (its LINK files closed here);
  // a link that cannot be made is said on stderr and the switch carries
  // that traffic. For the thread that watches the daemon.
  void ApplyLinkChanges(host::DaemonSession* session);

 private:
  explicit Runtime(const runtime::UroceConfig& config) : config_(config) {}
  Status StartDevice(const runtime::EndpointConfig& ec);
  // The rest of StartDevice once the port moves frames: neighbours, engine.
  Status StartEngine(Device* ep, const runtime::EndpointConfig& ec);
  Status StartShmDevice(const runtime::EndpointConfig& ec);
  Status CreatePool(Device* e, const runtime::EndpointConfig& ec);
  // The connector thread: starts every memif client port, and restarts it,
  // until its link is up or Shutdown stops it.
  void ConnectMemifClients();
  void StopConnector();

  runtime::UroceConfig config_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::pair<std::string, pmd::RingPair>> ring_pairs_;
  pmd::EngineLcores lcores_;
  int telemetry_handle_ = 0;
  bool flushed_ = false;
  bool shut_down_ = false;
  ShutdownReport report_;
  // Progress(polled) calls; several application threads may poll: a plain
  // relaxed load and store (a lost count only shifts the cadence).
  std::atomic<uint32_t> progress_calls_{0};
  std::thread connector_;
  std::atomic<bool> stop_connecting_{false};
};

}  // namespace uroce::runtime
