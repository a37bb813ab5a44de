#include "runtime/runtime.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_mempool.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "pmd/eal.h"
#include "pmd/log.h"
#include "pmd/memif_unmap_guard.h"
#include "pmd/port.h"
#include "pmd/port_setup.h"
#include "runtime/telemetry.h"

namespace uroce::runtime {

using pmd::AvailableMbufs;
using pmd::CheckAfPacketFrameSize;
using pmd::ClosePort;
using pmd::CreatePktPool;
using pmd::CreateRingPair;
using host::DaemonSession;
using pmd::DataRoomFor;
using pmd::DeriveSeed;
using pmd::DestroyRingPair;
using pmd::EalRunning;
using runtime::EndpointConfig;
using pmd::BurstFence;
using pmd::BurstScope;
using pmd::EthPortIo;
using pmd::MemifBurstFence;
using runtime::ImpairConfig;
using pmd::ImpairedPortIo;
using pmd::ImpairmentSummary;
using host::LinkChange;
using host::LocalLinks;
using pmd::PortByName;
using pmd::PortConfig;
using pmd::PortImpairment;
using runtime::PortKind;
using runtime::ProgressMode;
using pmd::RunOnInterruptThread;
using host::ShmChannel;
using host::ShmPortIo;
using pmd::StartPort;
using runtime::UroceConfig;
using pmd::VdevArg;

namespace {

using transport::Engine;
using transport::EngineConfig;

}  // namespace

std::string ShutdownReport::Summary() const {
  return "mbufs back in the pools: " + std::to_string(mbufs_in_pools) + " of " + std::to_string(mbufs_total) +
         "; QPs flushed: " + std::to_string(qps_flushed) + (impairments.empty() ? "" : "\n" + impairments) +
         (congestion.empty() ? "" : "\n" + congestion) + (pulls.empty() ? "" : "\n" + pulls);
}

StatusOr<std::unique_ptr<Runtime>> Runtime::Start(const UroceConfig& config) {
  if (!EalRunning()) return FailedPrecondition("start EAL (StartEalFor) before the runtime");
  std::unique_ptr<Runtime> rt(new Runtime(config));
  // Ring pairs first: both sides must exist before either port starts.
  for (const EndpointConfig& ec : config.endpoints) {
    if (ec.kind != PortKind::kRingPair) continue;
    const bool have = std::any_of(rt->ring_pairs_.begin(), rt->ring_pairs_.end(),
                                  [&](const auto& p) { return p.first == ec.ring_pair; });
    if (have) continue;
    auto pair = CreateRingPair(ec.ring_pair, 1024);
    if (!pair.ok()) return pair.status();
    rt->ring_pairs_.emplace_back(ec.ring_pair, *pair);
  }
  for (const EndpointConfig& ec : config.endpoints) {
    Status s = rt->StartDevice(ec);
    if (!s.ok()) return Status(s.code(), "[endpoint." + ec.name + "] " + s.message());
  }
  if (std::any_of(rt->devices_.begin(), rt->devices_.end(), [](const auto& e) { return e->memif_client; })) {
    Runtime* r = rt.get();
    rt->connector_ = std::thread([r] { r->ConnectMemifClients(); });
  }
  if (config.telemetry) {
    RegisterTelemetryCommands();
    std::vector<TelemetryEndpoint> published;
    for (const auto& e : rt->devices_) {
      TelemetryEndpoint t;
      t.name = e->name;
      t.port_id = e->port_id;
      t.port = e->config.port;
      t.driver = e->driver;
      t.mac = e->side.mac;
      t.gids = e->config.gids;
      t.engine = e->side.engine.get();
      t.neighbors = e->neighbors.get();
      t.impaired = e->impaired.get();
      published.push_back(t);
    }
    rt->telemetry_handle_ =
        PublishTelemetry(published, config.progress == ProgressMode::kEngine ? "engine" : "inline");
  }
  if (config.progress == ProgressMode::kEngine) {
    std::vector<std::pair<unsigned, Engine*>> assignments;
    for (const auto& e : rt->devices_) {
      assignments.emplace_back(static_cast<unsigned>(e->config.lcore), e->side.engine.get());
    }
    UROCE_RETURN_IF_ERROR(rt->lcores_.Launch(assignments));
  }
  return rt;
}

Status Runtime::StartDevice(const EndpointConfig& ec) {
  auto e = std::make_unique<Device>();
  e->name = ec.name;
  e->config = ec;
  switch (ec.kind) {
    case PortKind::kRingPair: {
      for (const auto& [name, pair] : ring_pairs_) {
        if (name == ec.ring_pair) e->port_id = ec.ring_side == 'a' ? pair.port_a : pair.port_b;
      }
      break;
    }
    case PortKind::kVdev:
    case PortKind::kPci: {
      auto id = PortByName(ec.device_name);
      if (!id.ok()) {
        return NotFound("port '" + ec.port + "': EAL made no port " + ec.device_name +
                        " (is its driver installed? for af_packet, does the interface exist?)");
      }
      e->port_id = *id;
      break;
    }
    case PortKind::kShm:
      return StartShmDevice(ec);
    case PortKind::kKernel:
      // The kernel owns the interface's addresses and answers ARP/ND for
      // them: only the daemon, which asks the kernel for neighbours on
      // behalf of every process, can share it.
      return InvalidArgument("port '" + ec.port + "' shares a kernel interface: run `uroce daemon` with it and attach "
                             "programs to the daemon (no UROCE_CONFIG)");
  }
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(e->port_id, &info) == 0 && info.driver_name != nullptr) e->driver = info.driver_name;
  if (ec.kind == PortKind::kVdev && ec.port.rfind("net_af_packet", 0) == 0) {
    UROCE_RETURN_IF_ERROR(CheckAfPacketFrameSize(ec.port, ec.mtu));
  }

  UROCE_RETURN_IF_ERROR(CreatePool(e.get(), ec));

  PortConfig port = host::PortConfigFor(ec, e->pool.get());
  // A memif client connects when its port starts, and only once: started
  // before the server listens, the start fails (EPERM); connected before the
  // server's port started, the handshake is refused and nobody retries. So
  // the connector thread starts it, and restarts it, until its link is up
  // (ConnectMemifClients); Start does not wait for that (a device
  // opens at once, whether or not its peer exists yet).
  const bool memif_client = ec.kind == PortKind::kVdev && ec.port.rfind("net_memif", 0) == 0 &&
                            VdevArg(ec.port, "role") == "client";
  port.start = !memif_client;
  UROCE_RETURN_IF_ERROR(StartPort(e->port_id, port));
  // From here on the port is set up: keep the endpoint so Shutdown closes it.
  Device* ep = e.get();
  ep->port_started = port.start;
  ep->memif_client = memif_client;
  ep->link_ready.store(!memif_client, std::memory_order_release);
  devices_.push_back(std::move(e));

  if (ec.mac_from_port) {
    rte_ether_addr mac;
    if (rte_eth_macaddr_get(ep->port_id, &mac) != 0) return IoError("cannot read the port's MAC");
    if (rte_is_zero_ether_addr(&mac) || !rte_is_unicast_ether_addr(&mac)) {
      // net_ring ports have no address (all zeros). ARP needs one: a locally
      // administered unicast MAC (IEEE 802 bit 1 of the first byte), unique
      // per process (pid) and port.
      const unsigned pid = static_cast<unsigned>(getpid());
      const uint8_t made[6] = {0x02, 0x75, 0x72, static_cast<uint8_t>(pid >> 8), static_cast<uint8_t>(pid),
                               static_cast<uint8_t>(ep->port_id)};
      std::memcpy(mac.addr_bytes, made, 6);
      rte_eth_dev_default_mac_addr_set(ep->port_id, &mac);
    }
    std::memcpy(ep->side.mac.data(), mac.addr_bytes, 6);
  } else {
    ep->side.mac = ec.mac;  // the port took it, or is promiscuous (StartPort)
  }

  ep->io = std::make_unique<EthPortIo>(ep->port_id, 0, memif_client ? &ep->link_ready : nullptr);
  return StartEngine(ep, ec);
}

// The endpoint's packet pool: its port's receive buffers and every frame
// its engine builds. With a per-lcore cache: the polling lcore
// gets back the buffers it freed last, still in its CPU cache; without one
// the pool's FIFO ring hands out the buffer freed `mbufs` allocations ago,
// and the first store into each new mbuf misses the cache (27 % of
// send_lat's CPU). Threads that are not EAL lcores (an application's own,
// the provider's progress thread) have no cache and use the ring.
// DPDK allows a cache of at most mbufs / 1.5.
Status Runtime::CreatePool(Device* e, const EndpointConfig& ec) {
  // EAL's names are the process's: a forked child's EAL still lists the
  // pools of the runtime its parent started (runtime/process.h,
  // ForgetParentAfterFork), which the child's own runtime must not take.
  std::string name = "uroce_" + ec.name;
  for (unsigned n = 1; rte_mempool_lookup(name.c_str()) != nullptr; ++n) {
    name = "uroce_" + ec.name + "_" + std::to_string(n);
  }
  auto pool = CreatePktPool({.name = name,
                             .mbufs = ec.mbufs,
                             .per_core_cache = std::min(256u, ec.mbufs / 8),
                             .data_room = DataRoomFor(ec.mtu)});
  if (!pool.ok()) return pool.status();
  e->pool = std::move(*pool);
  e->pool_size = ec.mbufs;
  return Status::Ok();
}

// A process attached to `uroce daemon`: its port is the shared memory the
// daemon sent (no DPDK device, no link to wait for), its MAC the uplink's.
Status Runtime::StartShmDevice(const EndpointConfig& ec) {
  if (ec.shm_fd < 0) return InvalidArgument("port shm:daemon:K comes only from uroce daemon (attach to one)");
  if (ec.mac_from_port) return InvalidArgument("port shm:daemon:K needs the uplink's mac");
  auto e = std::make_unique<Device>();
  e->name = ec.name;
  e->config = ec;
  e->port_id = RTE_MAX_ETHPORTS;
  e->driver = "uroce_daemon_shm";
  auto shm = ShmChannel::Map(ec.shm_fd);
  if (!shm.ok()) return shm.status();
  e->shm = std::move(*shm);
  if (e->shm->max_frame() < ec.mtu + RTE_ETHER_HDR_LEN) {
    return InvalidArgument("the daemon's port holds frames of " + std::to_string(e->shm->max_frame()) +
                           " bytes, less than mtu " + std::to_string(ec.mtu) + " needs");
  }
  UROCE_RETURN_IF_ERROR(CreatePool(e.get(), ec));
  e->shm_io = std::make_unique<ShmPortIo>(e->shm.get(), e->pool.get());
  // Straight to the other processes on the host once the daemon links us
  // (host/local_links.h); our lease says our slot.
  LocalLinks::Options lo;
  lo.daemon = e->shm_io.get();
  lo.daemon_channel = e->shm.get();
  lo.pool = e->pool.get();
  lo.own_slot = ec.qpn_base >> 16;
  lo.mac = ec.mac;
  lo.gids = ec.gids;
  // Frames damaged on purpose need the wire form's ICRC to be caught.
  lo.link_frames = config_.impair.corrupt == 0;
  auto links = std::make_unique<LocalLinks>(lo);
  e->links = links.get();
  e->io = std::move(links);
  e->side.mac = ec.mac;
  Device* ep = e.get();
  devices_.push_back(std::move(e));
  return StartEngine(ep, ec);
}

Status Runtime::ChangeLocalLink(const LinkChange& change, int fd) {
  for (auto& e : devices_) {
    if (e->links == nullptr || e->config.shm_index != change.uplink) continue;
    if (!change.add) {
      e->links->Remove(change.slot);
      return Status::Ok();
    }
    return e->links->Add(change.slot, fd, change.pid, change.uid);
  }
  return NotFound("no port of uplink " + std::to_string(change.uplink));
}

void Runtime::ApplyLinkChanges(DaemonSession* session) {
  for (const DaemonSession::QueuedLinkChange& q : session->TakeLinkChanges()) {
    const Status s = ChangeLocalLink(q.change, q.fd);
    if (q.fd >= 0) close(q.fd);
    if (!s.ok() && q.change.add) {
      UROCE_LOG(ERR, kRuntime, "no direct link to the process of slot %u (its frames keep going through the "
                   "daemon): %s\n", q.change.slot, s.ToString().c_str());
      // The other side may have mapped it already: the daemon closes it for
      // both, or that side would send into a ring nobody reads.
      session->DeclineLink(q.change.uplink, q.change.slot);
    }
  }
  ReclaimLocalLinks();
}

void Runtime::ReclaimLocalLinks() {
  for (auto& e : devices_) {
    if (e->links != nullptr) e->links->Reclaim();
  }
}

Status Runtime::StartEngine(Device* ep, const EndpointConfig& ec) {
  NeighborResolver::Options nopt;
  nopt.mac = ep->side.mac;
  nopt.addresses = ec.gids;
  nopt.pool = ep->pool.get();
  nopt.timeout_ms = ec.resolve_timeout_ms;
  ep->neighbors = std::make_unique<NeighborResolver>(nopt);

  EngineConfig cfg;
  cfg.mac = ep->side.mac;
  cfg.gids = ec.gids;
  cfg.port_mtu = ec.mtu;
  cfg.tx_pool = ep->pool.get();
  cfg.io = ep->io.get();
  cfg.max_qps = config_.engine.max_qps;
  cfg.ack_request_every = config_.engine.ack_request_every;
  cfg.max_unacked_packets = config_.engine.max_unacked_packets;
  cfg.rx_burst = config_.engine.rx_burst;
  cfg.per_qp_packet_budget = config_.engine.per_qp_packet_budget;
  cfg.retransmit.rto_min_ns = uint64_t{config_.engine.rto_min_us} * 1000;
  cfg.retransmit.rto_initial_ns = uint64_t{config_.engine.rto_initial_us} * 1000;
  cfg.retransmit.tail_probe_min_ns = uint64_t{config_.engine.tail_probe_us} * 1000;
  cfg.selective_retransmission = config_.engine.selective_retransmission;
  cfg.reorder_windows = config_.engine.reorder_windows;
  cfg.reorder_max_held = config_.engine.reorder_max_held;
  // Large messages to the processes our local links allow it with are read
  // by the receiver from the sender's memory (transport/peer_memory.h).
  if (ep->links != nullptr) {
    cfg.peer_memory = ep->links;
    cfg.pull_min_bytes = config_.engine.pull_min_bytes;  // 0: sends none
  }
  const CongestionSection& cs = config_.congestion;
  cfg.congestion.algorithm = ec.congestion.empty() ? cs.algorithm : ec.congestion;
  cfg.congestion.algorithm_by_sl = cs.algorithm_by_sl;
  cfg.congestion.params.line_rate_mbps = cs.line_rate_mbps;
  cfg.congestion.params.min_rate_mbps = cs.min_rate_mbps;
  cfg.congestion.params.target_delay_ns = uint64_t{cs.target_delay_us} * 1000;
  cfg.congestion.cnp_interval_ns = uint64_t{cs.cnp_interval_us} * 1000;
  cfg.congestion.cnp_dscp = static_cast<uint8_t>(cs.cnp_dscp);
  cfg.loopback = ec.loopback;
  cfg.qpn_base = ec.qpn_base;
  cfg.qpn_count = ec.qpn_count;
  // [impair]: every endpoint and direction draws its own stream of the one
  // seed, so that its faults follow its own frames only.
  const ImpairConfig& im = config_.impair;
  const uint64_t index = static_cast<uint64_t>(devices_.size() - 1);
  if (im.frame_faults()) {
    PortImpairment pi = PortImpairmentFor(im);
    pi.seed = DeriveSeed(im.seed, 2 * index);
    pi.link_frames = ep->links;
    ep->impaired = std::make_unique<ImpairedPortIo>(ep->io.get(), ep->pool.get(), pi);
    cfg.io = ep->impaired.get();
  }
  cfg.rnr_storm = im.rnr_storm;
  cfg.rnr_storm_seed = DeriveSeed(im.seed, 2 * index + 1);
  NeighborResolver* resolver = ep->neighbors.get();
  cfg.non_roce_handler = [resolver](rte_mbuf* m) { resolver->HandleFrame(m); };
  cfg.resolve_neighbor = [resolver](const transport::Gid& ip) { return resolver->Resolve(ip); };
  ep->side.engine = std::make_unique<Engine>(cfg);
  std::function<void()> progress;
  if (config_.progress == ProgressMode::kInline) progress = [this] { Progress(); };
  resolver->Attach(ep->side.engine.get(), progress);
  for (const auto& [ip, mac] : ec.neighbors) ep->side.engine->AddNeighbor(ip, mac);

  ep->side.gid = ec.gids.front();
  auto pd = ep->side.engine->AllocPd();
  if (!pd.ok()) return pd.status();
  ep->side.pd = *pd;
  auto cq = ep->side.engine->CreateCq(4096);
  if (!cq.ok()) return cq.status();
  ep->side.cq = *cq;
  return Status::Ok();
}

Runtime::Device* Runtime::Find(const std::string& name) {
  for (auto& e : devices_) {
    if (e->name == name) return e.get();
  }
  return nullptr;
}

unsigned Runtime::Progress() {
  if (config_.progress != ProgressMode::kInline) return 0;
  unsigned moved = 0;
  for (auto& e : devices_) {
    if (e->side.engine) moved += e->side.engine->Poll();
  }
  return moved;
}

unsigned Runtime::Progress(const transport::Engine* polled) {
  if (config_.progress != ProgressMode::kInline) return 0;
  if (polled == nullptr) return Progress();
  const uint32_t calls = progress_calls_.load(std::memory_order_relaxed) + 1;
  progress_calls_.store(calls, std::memory_order_relaxed);
  const bool others_too = calls % kOtherEnginesEvery == 0;
  unsigned moved = 0;
  for (auto& e : devices_) {
    Engine* engine = e->side.engine.get();
    if (engine != nullptr && (engine == polled || others_too)) moved += engine->Poll();
  }
  return moved;
}

unsigned Runtime::FlushQueuePairs() {
  if (flushed_) return report_.qps_flushed;
  flushed_ = true;
  // No engine thread from here on: this thread polls.
  lcores_.Stop();
  // Every QP to the error state; the next polls flush its work
  // (IBTA 10.3.1.8) and whatever the engines staged leaves, if it can.
  for (auto& e : devices_) {
    Engine* engine = e->side.engine.get();
    if (engine == nullptr) continue;
    for (transport::QueuePair* qp : engine->QueuePairs()) {
      if (qp->state.load(std::memory_order_acquire) == IBV_QPS_ERR) continue;
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      if (engine->ModifyQp(qp, attr, IBV_QP_STATE).ok()) report_.qps_flushed++;
    }
  }
  for (int round = 0; round < 64; ++round) {
    for (auto& e : devices_) {
      if (e->side.engine) e->side.engine->Poll();
    }
  }
  return report_.qps_flushed;
}

bool Runtime::LinkUp(const Device& e) const {
  if (e.config.kind == PortKind::kShm) return true;  // up while attached to the daemon
  if (e.port_id >= RTE_MAX_ETHPORTS || !e.link_ready.load(std::memory_order_acquire)) return false;
  rte_eth_link link;
  return rte_eth_link_get_nowait(e.port_id, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

void Runtime::ConnectMemifClients() {
  // memif logs every refused connect; one line from us says it instead.
  const int memif_log = rte_log_register("pmd.net.memif");
  const int memif_level = memif_log >= 0 ? rte_log_get_level(memif_log) : -1;
  bool told = false;
  for (;;) {
    bool waiting = false;
    for (auto& e : devices_) {
      if (!e->memif_client || e->link_ready.load(std::memory_order_relaxed)) continue;
      rte_eth_link link;
      if (e->port_started && rte_eth_link_get_nowait(e->port_id, &link) == 0 && link.link_status == RTE_ETH_LINK_UP) {
        e->link_ready.store(true, std::memory_order_release);  // the engine's bursts may begin
        continue;
      }
      waiting = true;
      // On EAL's interrupt thread, where memif runs the handshake this may
      // interrupt: a stop beside it would free the regions it is setting up
      // (see ClosePort).
      Device* ep = e.get();
      RunOnInterruptThread([ep] {
        if (ep->port_started) rte_eth_dev_stop(ep->port_id);
        ep->port_started = rte_eth_dev_start(ep->port_id) == 0;
      });
      if (!e->port_started && !told) {
        UROCE_LOG(INFO, kRuntime, "%s: waiting for the memif server\n", e->config.port.c_str());
        told = true;
        if (memif_log >= 0) rte_log_set_level(memif_log, RTE_LOG_EMERG);
      }
    }
    if (!waiting) break;
    // Give the handshake (EAL's interrupt thread) a moment before trying again.
    for (int i = 0; i < 100 && !stop_connecting_.load(std::memory_order_acquire); ++i) {
      bool all_up = true;
      for (auto& e : devices_) {
        rte_eth_link link;
        if (e->memif_client && !e->link_ready.load(std::memory_order_relaxed) &&
            !(e->port_started && rte_eth_link_get_nowait(e->port_id, &link) == 0 &&
              link.link_status == RTE_ETH_LINK_UP)) {
          all_up = false;
        }
      }
      if (all_up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (stop_connecting_.load(std::memory_order_acquire)) break;
  }
  if (memif_log >= 0 && memif_level >= 0) rte_log_set_level(memif_log, static_cast<uint32_t>(memif_level));
}

void Runtime::StopConnector() {
  stop_connecting_.store(true, std::memory_order_release);
  if (connector_.joinable()) connector_.join();
}

Status Runtime::WaitForLinks() {
  using Clock = std::chrono::steady_clock;
  for (auto& e : devices_) {
    if (e->config.link_timeout_ms == 0) continue;
    const auto deadline = Clock::now() + std::chrono::milliseconds(e->config.link_timeout_ms);
    while (!LinkUp(*e)) {
      if (Clock::now() >= deadline) {
        const std::string why = e->memif_client ? "memif link not up (no memif server connected)" : "link still down";
        return Unavailable("[endpoint." + e->name + "] port " + e->config.port + ": " + why + " after " +
                           std::to_string(e->config.link_timeout_ms) +
                           " ms (for memif: is the peer process running with the same socket?)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return Status::Ok();
}

PortImpairment PortImpairmentFor(const ImpairConfig& im) {
  PortImpairment pi;
  pi.faults.loss = im.loss;
  pi.faults.duplicate = im.duplicate;
  pi.faults.reorder = im.reorder;
  pi.faults.corrupt = im.corrupt;
  pi.faults.max_delay = im.delay_us;
  pi.faults.reorder_delay = im.reorder_us;
  pi.faults.rate = double(im.rate_mbps) / 8.0;  // bytes per microsecond, the port's unit
  pi.faults.queue_frames = im.queue_frames;
  pi.faults.ecn_frames = im.ecn_frames;
  pi.faults.spare_acks = im.spare_acks;
  pi.tx = im.tx;
  pi.rx = im.rx;
  pi.seed = im.seed;
  pi.hold_frames = im.hold_frames;
  return pi;
}

ShutdownReport Runtime::Shutdown() {
  if (shut_down_) return report_;
  StopConnector();  // before anything else touches the ports
  FlushQueuePairs();
  shut_down_ = true;
  if (telemetry_handle_ != 0) UnpublishTelemetry(telemetry_handle_);
  telemetry_handle_ = 0;
  report_.impairments = ImpairmentReport();  // while the engines still count
  report_.congestion = CongestionReport();
  report_.pulls = PullReport();
  // 3. Engines (they free what they still staged), then QPs die with them.
  for (auto& e : devices_) {
    if (e->side.engine) {
      for (transport::QueuePair* qp : e->side.engine->QueuePairs()) {
        (void)e->side.engine->DestroyQp(qp);
      }
    }
    e->side.engine.reset();
    e->side.cq = nullptr;
  }
  // What [impair] held back (delayed, reordered) goes back to the pools.
  for (auto& e : devices_) {
    if (e->impaired) e->impaired->FreeHeld();
  }
  // 4. Ports: what is still queued for us is received and freed, then the
  //    port stops (a NIC returns the buffers of its RX ring then).
  for (auto& e : devices_) {
    if (e->shm) {
      rte_mbuf* burst[64];
      for (int i = 0; i < 1024; ++i) {
        const uint16_t n = e->io->RxBurst(burst, 64);
        if (n == 0) break;
        rte_pktmbuf_free_bulk(burst, n);
      }
      e->links = nullptr;
      e->io.reset();
      e->shm_io.reset();
      e->shm.reset();
      continue;
    }
    if (!e->port_started) continue;  // ethdev refuses (and logs) a burst on a stopped port
    rte_mbuf* burst[64];
    BurstFence* const unmap_fence = MemifBurstFence(e->port_id);  // the peer may be leaving too
    for (int i = 0; i < 1024; ++i) {
      uint16_t n;
      {
        BurstScope marked(unmap_fence);
        n = rte_eth_rx_burst(e->port_id, 0, burst, 64);
      }
      if (n == 0) break;
      rte_pktmbuf_free_bulk(burst, n);
    }
  }
  for (auto& e : devices_) {
    if (e->config.kind != PortKind::kRingPair && e->config.kind != PortKind::kShm) {
      Status s = ClosePort(e->port_id);
      if (!s.ok()) UROCE_LOG(WARNING, kRuntime, "%s\n", s.ToString().c_str());
    }
  }
  for (auto& [name, pair] : ring_pairs_) {
    Status s = DestroyRingPair(pair);
    if (!s.ok()) UROCE_LOG(WARNING, kRuntime, "%s\n", s.ToString().c_str());
  }
  ring_pairs_.clear();
  // 5. Count, then free the pools.
  for (auto& e : devices_) {
    if (!e->pool) continue;
    report_.mbufs_in_pools += AvailableMbufs(e->pool.get());
    report_.mbufs_total += e->pool_size;
  }
  devices_.clear();
  return report_;
}

std::string Runtime::ImpairmentReport() {
  if (!config_.impair.any()) return "";
  std::string out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const Device& e = *devices_[i];
    std::string line = "uroce" + std::to_string(i) + " (" + e.name + ") impairments, seed " +
                       std::to_string(config_.impair.seed) + ": ";
    if (e.impaired) line += ImpairmentSummary(e.impaired->counters());
    if (config_.impair.rnr_storm > 0) {
      const uint64_t naks = e.side.engine ? e.side.engine->counters().rnr_storm_naks : 0;
      line += std::string(e.impaired ? "; " : "") + "RNR storm NAKs " + std::to_string(naks);
    }
    out += (out.empty() ? "" : "\n") + line;
  }
  return out;
}

std::string Runtime::CongestionReport() const {
  std::string out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const Device& e = *devices_[i];
    if (!e.side.engine) continue;
    const transport::EngineCounters c = e.side.engine->counters();
    if (c.rx_ce_marked + c.cnps_sent + c.cnps_received + c.cnps_ignored + c.paced_waits == 0) continue;
    out += (out.empty() ? "" : "\n") + std::string("uroce") + std::to_string(i) + " (" + e.name +
           ") congestion: CE-marked frames received " + std::to_string(c.rx_ce_marked) + ", CNPs sent " +
           std::to_string(c.cnps_sent) + ", received " + std::to_string(c.cnps_received) + ", ignored " +
           std::to_string(c.cnps_ignored) + ", paced waits " + std::to_string(c.paced_waits);
  }
  return out;
}

std::string Runtime::PullReport() const {
  std::string out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const Device& e = *devices_[i];
    if (!e.side.engine) continue;
    const transport::EngineCounters c = e.side.engine->counters();
    const std::string device = std::string("uroce") + std::to_string(i) + " (" + e.name + ")";
    if (c.pulls_sent + c.pulls_received + c.pulls_refused + c.pull_failures != 0) {
      out += (out.empty() ? "" : "\n") + device + " messages read from another process's memory: sent " +
             std::to_string(c.pulls_sent) + ", received " + std::to_string(c.pulls_received) + " (" +
             std::to_string(c.pull_bytes) + " bytes), refused " + std::to_string(c.pulls_refused) + ", failed " +
             std::to_string(c.pull_failures);
    }
    if (c.staged_sent + c.staged_received + c.staged_refused + c.staged_failures != 0) {
      out += (out.empty() ? "" : "\n") + device + " chunks through a link's payload area: sent " +
             std::to_string(c.staged_sent) + ", received " + std::to_string(c.staged_received) + " (" +
             std::to_string(c.staged_bytes) + " bytes), refused " + std::to_string(c.staged_refused) + ", failed " +
             std::to_string(c.staged_failures) + ", waits for a free chunk " + std::to_string(c.stage_waits);
    }
  }
  return out;
}

Runtime::~Runtime() { Shutdown(); }

}  // namespace uroce::runtime
