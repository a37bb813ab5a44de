// uroce's start-up configuration: an INI file read with DPDK's rte_cfgfile,
// then `--set section.key=value` overrides from the command line. Every key
// is checked; an unknown section or key, or a bad value, is an error that
// names it ("[endpoint.a] ipv4 = '10.0.0.300': not an IPv4 address").
//
//   [eal]                 DPDK's EAL
//   lcores = 0-1          EAL --lcores: the first is the main (application) lcore
//   hugepages = no        no: --no-huge --no-shconf (no hugepages needed)
//   memory = 512          -m, MB
//   file_prefix = NAME    --file-prefix; empty: unique per process
//   log_level = *:warning --log-level
//   telemetry = yes       the DPDK telemetry socket (uroce stats reads it)
//   args = ...            more EAL arguments, split at blanks; -d /
//                         --driver-path (load a shared object: run its code)
//                         only with allow_driver_load = yes
//   allow_driver_load = no   yes: [eal] args may load EAL drivers from files
//
//   [engine]
//   progress = inline     engine: engines poll on their own lcores
//                         inline: no engine thread; whoever polls drives
//   rx_burst, max_qps, ack_request_every, max_unacked_packets,
//   per_qp_packet_budget  the transport engine's knobs
//   rto_min_us = 100, rto_initial_us = 1000, tail_probe_us = 20
//                         retransmission timing: the RTO's floor, the RTO
//                         before an RTT is measured, the tail-loss probe's
//                         shortest delay (0: no probes).
//                         transport/retransmit_timer.h
//   pull_min_bytes = 16384
//                         attached to a daemon: a SEND or WRITE of this size
//                         or more to a process on a local link that allows
//                         it is read by the receiver straight from the
//                         sender's memory (process_vm_readv); 0: never.
//                         transport/peer_memory.h
//   selective_retransmission = yes
//                         with peers that offer it too, packets after a gap
//                         are held and only what is missing is resent;
//                         no: go-back-N with every peer
//   reorder_windows = 64, reorder_max_held = 1024
//                         QPs that may hold packets at once (up to 1024, about
//                         70 KB each), and packets held in all.
//                         transport/reorder_window.h
//   progress_idle_us = 50 verbs library, inline progress: longest idle sleep
//                         of its progress thread (runtime/process.h)
//   helper_cpus =         CPUs for the verbs/libfabric library's helper
//                         threads (progress, connection managers), e.g. 2-3;
//                         empty: where the application's main thread may run
//                         (they sleep while it polls). pmd/threads.h
//
//   [daemon]              `uroce daemon` only
//   socket = /run/uroce/uroce.sock   its control socket (programs: UROCE_DAEMON)
//   idle_us = 1000        the switch's longest sleep while no frame moves (it
//                         sleeps 16 us, then twice as long each time, up to this)
//   max_processes = 64    processes attached at once (at most 254)
//   max_processes_per_uid = 32   processes one uid may attach (root and the
//                         daemon's own uid: no limit)
//   max_listens_per_uid = 256    CM ports one uid may listen on
//   max_peers_per_uid = 65536    PEER records (QPs connected to another
//                         process on this host) of one uid's processes
//   attach_timeout_ms = 5000     a session that has not attached by then is
//                         closed (a STATS or DEVICES query needs less)
//   slot_quarantine_ms = 10000   how long a released slot (its QPNs and CM
//                         IDs) is given to nobody, for peers' late retries
//
//   [impair]              network faults on every port, from a seed (docs/configuration.md,
//                         "[impair]"; pmd/impaired_port_io.h)
//   loss = 0.01           probability a frame is dropped
//   dup = 0.001           probability a frame is delivered twice
//   reorder = 0.01        probability a frame is held back reorder_us
//   reorder_us = 100        behind later frames
//   delay_us = 50         extra delay of every frame, uniform in [0, delay_us]
//   corrupt = 0.0001      probability one bit past the Ethernet header flips
//   rnr_storm = 0.1       probability the responder finds no receive for a
//                         SEND (RNR NAK, IBTA 9.7.5.2.8) while one is posted
//   seed = 1              the same seed and frames: the same faults
//   direction = both      tx, rx or both: where frames leave / enter the engine
//   hold_frames = 1024    frames each direction holds (delayed, reordered)
//   rate_mbps = 10000     a bottleneck: frames leave at this rate (Mbit/s),
//                         behind those queued (0: none)
//   queue_frames = 256      its queue's depth: a frame finding it full is dropped
//   ecn_frames = 64         above this many queued, ECN-capable frames leave
//                         marked CE (0: never)
//   spare_acks = no       yes: loss never takes an ACK, NAK or atomic ACK
//
//   [congestion]          congestion control (docs/congestion.md)
//   algorithm = none      none, dcqcn, swift or fixed_rate: every reliable QP's, unless
//                         its endpoint or service level names another
//   algorithm_sl3 = swift QPs whose address vector has service level 3
//                         (ibv_ah_attr.sl 0..15), as NICs enable DCQCN per
//                         priority
//   line_rate_mbps = 100000   where DCQCN's rate starts and recovers to
//   min_rate_mbps = 10    no algorithm paces a QP below this (fixed_rate: at it)
//   target_delay_us = 50  swift: the round trip it aims for
//   cnp_interval_us = 50  a CE-marked packet is answered with a CNP, at most
//                         one per QP per interval (0: never)
//   cnp_dscp = 48         the DSCP CNPs leave with (0..63)
//
//   [endpoint.NAME]       one port with one engine (any number of them)
//   port = ring:PAIR:a    one side of an in-process net_ring pair
//   port = net_memif0,role=server,socket=/tmp/x.sock   any vdev string
//   port = 0000:00:04.0   a PCI NIC (its address)
//   port = shm:daemon:K   a process's port to `uroce daemon` (its K-th uplink), in the
//                         configuration the daemon hands out (only there)
//   port = kernel:eth0    `uroce daemon` only: the kernel's own interface,
//                         shared with the kernel (its addresses and MAC;
//                         RoCEv2 steered to uroce by an XDP program)
//   kernel_io = auto      kernel ports: af_xdp, af_packet, or auto (af_xdp,
//                         else af_packet)
//   ipv4 = 10.0.0.1       uroce's own IPv4 address (GID 0, IPv4-mapped);
//                         kernel ports: the interface's addresses unless given
//   ipv6 = fd00::1        uroce's own IPv6 address (next GID); an empty
//                         ipv4 or ipv6 means none (--set endpoint.a.ipv4=)
//   gids = ADDR,ADDR      more GIDs (IPv4 or IPv6 text), after those two
//   mac = port            port: the port's own MAC; or xx:xx:xx:xx:xx:xx,
//                         given to the port (or promiscuous: PortConfig::mac)
//   lcore = 1             the engine's lcore (engine progress only)
//   mtu = 1500            Ethernet MTU (path MTU follows, as in rxe)
//   rx_descriptors, tx_descriptors   ring depths of the port's queues
//   mbufs = 8191          packet buffers in this endpoint's pool
//   promiscuous = no
//   link_timeout_ms = 10000     uroce's tools (perf, floor) wait this long
//                               for the link (memif peers); 0: not at all.
//                               Verbs and libfabric programs never wait.
//   active_before_link = auto   yes: the verbs port is ACTIVE while its link
//                               is still down (frames wait in the engine);
//                               no: DOWN until the link is up, then ACTIVE
//                               with IBV_EVENT_PORT_ACTIVE, as a NIC's port;
//                               auto: yes for links to another uroce
//                               process (memif, ring, daemon), no otherwise
//   resolve_timeout_ms = 3000   ARP/ND: give up on a neighbour after this
//   neighbors = IP=MAC,...      static neighbour entries (no ARP for them)
//   loopback = yes        frames to our own GIDs stay in the engine
//   qpn_range = BASE+COUNT      QPNs from this range only (a daemon's lease)
//   congestion = dcqcn    this endpoint's (device's) algorithm, in place of
//                         [congestion] algorithm
//
// Comments start with ';' (rte_cfgfile's default comment character).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "host/daemon_client.h"
#include "host/host_config.h"
#include "pmd/eal.h"
#include "transport/headers.h"

namespace uroce::runtime {

// The host floor's part of the model (host/host_config.h), named here too.
using host::DaemonConfig;
using host::EndpointPortConfig;
using host::KernelIo;
using host::kDaemonMaxProcesses;
using host::PortKind;
using pmd::EalConfig;

enum class ProgressMode { kInline, kEngine };

// One [endpoint.NAME] section: its port and addresses (the part the
// daemon's uplinks have too), and what a process's device adds.
struct EndpointConfig : EndpointPortConfig {
  std::string ring_pair;    // kRingPair: the pair's name
  char ring_side = 'a';     // kRingPair: 'a' or 'b'
  // kShm: the file the daemon sent with its reply (DaemonSession::shm_fd);
  // a configuration text cannot name it, the attaching code sets it.
  int shm_fd = -1;
  unsigned shm_index = 0;  // kShm: `port = shm:daemon:K`, the K-th file
  int lcore = -1;  // engine progress: the engine's lcore
  unsigned link_timeout_ms = 10000;
  enum class ActiveBeforeLink { kAuto, kYes, kNo } active_before_link = ActiveBeforeLink::kAuto;
  // What active_before_link means for this port (auto resolved by kind).
  bool PortActiveBeforeLink() const;
  std::vector<std::pair<transport::Gid, transport::MacAddress>> neighbors;
  // Loopback (transport::EngineConfig::loopback): frames to our own GIDs
  // stay in the engine. A process attached to a daemon sets no: the daemon
  // switches them, since other processes' QPs share the addresses.
  bool loopback = true;
  // QPNs leased from a daemon: qpn_base..qpn_base+qpn_count-1 (0: all).
  uint32_t qpn_base = 0, qpn_count = 0;
  // This device's congestion control; empty: [congestion] algorithm.
  std::string congestion;
};

struct EngineTunables {
  uint16_t rx_burst = 32;
  uint32_t max_qps = 1024;
  uint32_t ack_request_every = 64;
  uint32_t max_unacked_packets = 128;
  uint32_t per_qp_packet_budget = 32;
  uint32_t rto_min_us = 100;
  uint32_t rto_initial_us = 1000;
  uint32_t tail_probe_us = 20;
  bool selective_retransmission = true;
  uint32_t reorder_windows = 64;
  uint32_t reorder_max_held = 1024;
  // A SEND or WRITE of this many bytes or more to another process over a
  // local link that allows it is copied once, by the receiver, from the
  // sender's memory (transport/peer_memory.h); 0: never.
  uint32_t pull_min_bytes = 16384;
  // Verbs library, inline progress: the progress thread's longest sleep when
  // idle (runtime/process.h).
  uint32_t progress_idle_us = 50;
  // CPUs of the helper threads (pmd/threads.h); empty: inherited.
  std::vector<unsigned> helper_cpus;
};

// [impair]: faults injected on every port (pmd/impaired_port_io.h) and the
// responder's RNR storm (transport::EngineConfig::rnr_storm).
struct ImpairConfig {
  double loss = 0, duplicate = 0, reorder = 0, corrupt = 0;
  uint32_t delay_us = 0;
  uint32_t reorder_us = 100;
  double rnr_storm = 0;
  uint64_t seed = 1;
  bool tx = true, rx = true;
  uint32_t hold_frames = 1024;
  // A bottleneck (transport::Impairments::rate): Mbit/s, 0 for none.
  uint64_t rate_mbps = 0;
  uint32_t queue_frames = 0, ecn_frames = 0;
  bool spare_acks = false;  // transport::Impairments::spare_acks
  bool frame_faults() const {
    return loss > 0 || duplicate > 0 || reorder > 0 || corrupt > 0 || delay_us > 0 || rate_mbps > 0;
  }
  bool any() const { return frame_faults() || rnr_storm > 0; }
};

// [congestion]: transport::CongestionConfig, in the units people write.
struct CongestionSection {
  std::string algorithm = "none";
  std::array<std::string, 16> algorithm_by_sl;  // empty: `algorithm`
  uint64_t line_rate_mbps = 100'000, min_rate_mbps = 10;
  uint32_t target_delay_us = 50, cnp_interval_us = 50;
  uint32_t cnp_dscp = 48;
};

struct UroceConfig {
  std::string origin;  // the file (or "built-in ring.ini"), for messages
  EalConfig eal;       // vdevs and PCI allow-list filled from the endpoints
  bool telemetry = true;
  ProgressMode progress = ProgressMode::kInline;
  EngineTunables engine;
  DaemonConfig daemon;
  ImpairConfig impair;
  CongestionSection congestion;
  std::vector<EndpointConfig> endpoints;

  // The endpoint called `name`, or null.
  const EndpointConfig* Find(const std::string& name) const;
};

// One `--set section.key=value` (section is everything before the last dot
// of the left-hand side: "endpoint.a.ipv4=..." sets ipv4 in [endpoint.a]).
struct ConfigOverride {
  std::string section, key, value;
};
StatusOr<ConfigOverride> ParseOverride(const std::string& text);
// `--impair loss=0.01,dup=0.001,seed=7` (and UROCE_IMPAIR): one override
// of [impair] per item; the keys and values are checked here, as the
// section's are.
StatusOr<std::vector<ConfigOverride>> ParseImpairSpec(const std::string& text);

// Reads `path` (an INI file), applies `overrides` in order, checks it all.
StatusOr<UroceConfig> LoadConfigFile(const std::string& path, const std::vector<ConfigOverride>& overrides = {});
// The same for INI text held in memory (the built-in configurations);
// `origin` names it in messages.
StatusOr<UroceConfig> LoadConfigText(const std::string& text, const std::string& origin,
                                     const std::vector<ConfigOverride>& overrides = {});

// The configuration a uroce daemon handed out to `session` (its grant,
// host/daemon_protocol.h), each shared-memory port set to the file that came
// with the reply (they belong to the session), with `overrides`. EAL's main
// lcore runs on any CPU this process may use, unless `overrides` set [eal]
// lcores.
StatusOr<UroceConfig> LoadConfigFromDaemon(const host::DaemonSession& session,
                                           const std::vector<ConfigOverride>& overrides);

// The socket file of a net_memif port that names none: the same for both
// sides of a pair (of one user), different for different pairs:
// $UROCE_PAIR (or Bazel's TEST_TMPDIR) and the memif id pick it, in the
// user's private directory (common/private_dir.h). Fails when that
// directory is not private or the path is too long for a socket.
StatusOr<std::string> DefaultMemifSocket(const std::string& memif_id);

}  // namespace uroce::runtime
