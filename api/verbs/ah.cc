// Address handles: ibv_create_ah(3), ibv_destroy_ah(3),
// ibv_init_ah_from_wc(3), ibv_create_ah_from_wc(3). ah->handle is the
// engine's AH handle (Engine::PostSend reads wr.ud.ah->handle).
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "api/verbs/objects.h"

using uroce::verbs::Context;

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  // RoCE needs the GRH: the destination is a GID (ibv_create_ah(3)).
  if (!attr->is_global) {
    errno = EINVAL;
    return nullptr;
  }
  auto handle = Context::From(pd->context)->engine->CreateAh(pd->handle, *attr);
  if (!handle.ok()) {
    errno = handle.status().ToErrno();
    return nullptr;
  }
  auto* ah = new (std::nothrow) ibv_ah{pd->context, pd, *handle};
  if (ah == nullptr) {
    (void)Context::From(pd->context)->engine->DestroyAh(*handle);
    errno = ENOMEM;
  }
  return ah;
}

int ibv_destroy_ah(ibv_ah* ah) {
  uroce::Status s = Context::From(ah->context)->engine->DestroyAh(ah->handle);
  if (!s.ok()) return s.ToErrno();
  delete ah;
  return 0;
}

// ibv_init_ah_from_wc(3): the reply path from a UD receive with a GRH. For
// RoCEv2 over IPv4 the 40-byte GRH area holds 20 unused bytes and then the
// IPv4 header (what rxe and uroce place there); otherwise an IPv6 header.
int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh, ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || ah_attr == nullptr || port_num != 1) {
    errno = EINVAL;
    return -1;
  }
  std::memset(ah_attr, 0, sizeof(*ah_attr));
  ah_attr->dlid = wc->slid;
  // A UD completion's sl is the frame's network type on RoCE (responder.cc),
  // not a service level: the reply goes at the default one.
  ah_attr->sl = 0;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  if (!(wc->wc_flags & IBV_WC_GRH) || grh == nullptr) {
    errno = EINVAL;  // RoCE: no path without the GRH
    return -1;
  }
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  ibv_gid sgid{}, dgid{};
  if ((raw[20] >> 4) == 4) {
    sgid.raw[10] = sgid.raw[11] = 0xff;
    dgid.raw[10] = dgid.raw[11] = 0xff;
    std::memcpy(&sgid.raw[12], raw + 20 + 12, 4);  // IPv4 source address
    std::memcpy(&dgid.raw[12], raw + 20 + 16, 4);  // IPv4 destination address
    ah_attr->grh.hop_limit = 0xff;
    ah_attr->grh.traffic_class = raw[21];
  } else {
    sgid = grh->sgid;
    dgid = grh->dgid;
    const uint32_t vtf = ntohl(grh->version_tclass_flow);
    ah_attr->grh.flow_label = vtf & 0xfffff;
    ah_attr->grh.traffic_class = static_cast<uint8_t>((vtf >> 20) & 0xff);
    ah_attr->grh.hop_limit = 0xff;
  }
  // Our GID the peer sent to is the source GID of the reply.
  Context* ctx = Context::From(context);
  const auto& gids = ctx->engine_config->gids;
  int index = -1;
  for (size_t i = 0; i < gids.size(); ++i) {
    if (std::memcmp(gids[i].data(), dgid.raw, 16) == 0) index = static_cast<int>(i);
  }
  if (index < 0) {
    errno = ENOENT;
    return -1;
  }
  ah_attr->is_global = 1;
  ah_attr->grh.dgid = sgid;
  ah_attr->grh.sgid_index = static_cast<uint8_t>(index);
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

}  // extern "C"
