// The provider's connection-management side: it consumes the events of the
// process's connection managers (runtime::ConnectionManagers: one per uroce
// device, shared with librdmacm, polled every millisecond by one thread) and
// turns them into EQ events (fi_cm(3), fi_eq(3)):
//   kConnectRequest -> FI_CONNREQ on the passive endpoint's EQ, with a new
//                      fi_info whose handle is the request
//   kEstablished    -> FI_CONNECTED on the endpoint's EQ (data: the REP's)
//   kRejected       -> error event FI_ECONNREFUSED (err_data: the REJ's data)
//   kUnreachable    -> error event FI_ETIMEDOUT
//   kDisconnected   -> FI_SHUTDOWN
// Endpoints register under a key (the CM's "tag") and unregister before they
// are freed; events for a key that is gone are dropped (and a request for a
// passive endpoint that is gone is rejected). Control path only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "api/fabric/objects.h"
#include "common/status.h"

namespace uroce::fabric {

class CmService {
 public:
  static CmService& Get();

  // The CM of runtime endpoint `index`; the runtime must be running.
  StatusOr<cm::ConnectionManager*> ForDevice(size_t index);

  // The returned key is the tag to give the connection manager.
  uint64_t Register(PassiveEndpoint* pep);
  uint64_t Register(Endpoint* ep);
  // After this returns no event is delivered to the object any more.
  void Unregister(uint64_t key);

  // fi_connect to a peer whose MAC the neighbour table lacks: resolves it
  // (ARP/ND, up to the resolver's timeout) on the service's own thread, so
  // that neither the caller nor the connection managers' Poll waits, then
  // sends the REQ for endpoint `key` (registered, ep->resolving set). If it
  // does not resolve, the endpoint's EQ gets an FI_EHOSTUNREACH error event.
  void ResolveThenConnect(uint64_t key, transport::Engine* engine, transport::PdHandle pd,
                          cm::ConnectionManager* cm, const cm::CmConnectParams& params);

 private:
  CmService();
  // pthread_atfork(3)'s child handler: the endpoints and the resolver
  // thread are the parent's; the child starts with none (its connection
  // managers are its own, runtime::ConnectionManagers).
  void ForgetParentAfterFork();
  void Dispatch(cm::ConnectionManager* cm, cm::CmEvent& event);

  struct ResolveJob {
    uint64_t key = 0;
    transport::Engine* engine = nullptr;
    transport::PdHandle pd = 0;
    cm::ConnectionManager* cm = nullptr;
    cm::CmConnectParams params;
  };
  void ResolverLoop();
  void FinishConnect(ResolveJob& job, bool resolved, const transport::MacAddress& mac);
  std::mutex jobs_mutex_;  // jobs_, resolver_started_
  std::condition_variable jobs_ready_;
  std::deque<ResolveJob> jobs_;
  bool resolver_started_ = false;

  struct Target {
    PassiveEndpoint* pep = nullptr;
    Endpoint* ep = nullptr;
  };

  uint16_t sink_ = 0;  // our number among runtime::ConnectionManagers' consumers
  std::mutex mutex_;   // everything below; held while an event is delivered
  std::map<uint64_t, Target> targets_;  // by tag
  uint64_t next_key_ = 1;
};

}  // namespace uroce::fabric
