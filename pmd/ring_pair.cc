#include "pmd/ring_pair.h"

#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "pmd/port.h"

namespace uroce::pmd {
namespace {

void DrainRing(rte_ring* ring) {
  void* obj = nullptr;
  while (rte_ring_dequeue(ring, &obj) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(obj));
}

}  // namespace

StatusOr<RingPair> CreateRingPair(const std::string& name, unsigned ring_size) {
  if (!rte_is_power_of_2(ring_size)) return InvalidArgument("ring size must be a power of two");
  RingPair pair;
  const std::string ab = "rp_" + name + "_ab", ba = "rp_" + name + "_ba";
  pair.a_to_b = rte_ring_create(ab.c_str(), ring_size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  pair.b_to_a = rte_ring_create(ba.c_str(), ring_size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (pair.a_to_b == nullptr || pair.b_to_a == nullptr) {
    Status s = ResourceExhausted("rte_ring_create for ring pair '" + name + "': " + rte_strerror(rte_errno));
    rte_ring_free(pair.a_to_b);
    rte_ring_free(pair.b_to_a);
    return s;
  }
  const std::string name_a = "net_ring_" + name + "_a", name_b = "net_ring_" + name + "_b";
  int a = rte_eth_from_rings(name_a.c_str(), &pair.b_to_a, 1, &pair.a_to_b, 1, SOCKET_ID_ANY);
  if (a < 0) {
    Status s = IoError("rte_eth_from_rings('" + name_a + "'): " + rte_strerror(rte_errno));
    rte_ring_free(pair.a_to_b);
    rte_ring_free(pair.b_to_a);
    return s;
  }
  int b = rte_eth_from_rings(name_b.c_str(), &pair.a_to_b, 1, &pair.b_to_a, 1, SOCKET_ID_ANY);
  if (b < 0) {
    Status s = IoError("rte_eth_from_rings('" + name_b + "'): " + rte_strerror(rte_errno));
    rte_eth_dev_close(static_cast<uint16_t>(a));
    rte_ring_free(pair.a_to_b);
    rte_ring_free(pair.b_to_a);
    return s;
  }
  pair.port_a = static_cast<uint16_t>(a);
  pair.port_b = static_cast<uint16_t>(b);
  return pair;
}

Status DestroyRingPair(RingPair& pair) {
  Status first;
  for (uint16_t port : {pair.port_a, pair.port_b}) {
    if (!rte_eth_dev_is_valid_port(port)) continue;
    Status s = ClosePort(port);
    if (!s.ok() && first.ok()) first = s;
  }
  for (rte_ring** ring : {&pair.a_to_b, &pair.b_to_a}) {
    if (*ring == nullptr) continue;
    DrainRing(*ring);
    rte_ring_free(*ring);
    *ring = nullptr;
  }
  return first;
}

}  // namespace uroce::pmd
