#include "testing/lossy_link.h"

namespace uroce::transport {

// The decisions and the hold queues are ImpairmentStage's
// (transport/impairment.h): the same code impairs real ports.
LossyLink::LossyLink(rte_mempool* copy_pool, uint64_t seed, const LinkImpairments& impairments, uint32_t capacity)
    : copy_pool_(copy_pool), generator_(seed), impairments_(impairments), capacity_(capacity) {}

LossyLink::~LossyLink() = default;

}  // namespace uroce::transport
