#include "host/local_link_pair.h"

#include <unistd.h>

#include "transport/headers.h"

namespace uroce::host {

StatusOr<std::unique_ptr<LocalLinkPair>> LocalLinkPair::Create(rte_mempool* pool, uint32_t max_frame,
                                                               uint32_t stage_chunks) {
  std::unique_ptr<LocalLinkPair> pair(new LocalLinkPair());
  auto file = ShmChannel::Create(1024, max_frame, stage_chunks, kLinkAckEntries);
  if (!file.ok()) return file.status();
  pair->file_ = std::move(*file);
  // The host the two speak as (EnginePair's host 1 when it runs over these).
  const uint8_t ip[4] = {10, 0, 0, 1};
  transport::Gid gid6{0xfd, 0x00};
  gid6[15] = 1;
  auto make = [&](uint32_t slot, Nowhere* daemon) {
    LocalLinks::Options o;
    o.daemon = daemon;
    o.pool = pool;
    o.own_slot = slot;
    o.mac = {0x02, 0, 0, 0, 0, 1};
    o.gids = {transport::Ipv4MappedGid(ip), gid6};
    return std::make_unique<LocalLinks>(o);
  };
  pair->a_ = make(kSlotA, &pair->nowhere_a_);
  pair->b_ = make(kSlotB, &pair->nowhere_b_);
  UROCE_RETURN_IF_ERROR(pair->a_->Add(kSlotB, pair->file_->fd(), getpid(), geteuid()));
  UROCE_RETURN_IF_ERROR(pair->b_->Add(kSlotA, pair->file_->fd(), getpid(), geteuid()));
  // Each reads the other's cookie (both offered theirs in Add).
  pair->a_->Reclaim();
  pair->b_->Reclaim();
  return pair;
}

}  // namespace uroce::host
