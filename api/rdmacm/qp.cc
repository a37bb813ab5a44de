// QPs and SRQs made on an rdma_cm id (rdma_create_qp(3), rdma_create_srq(3),
// rdma_init_qp_attr(3)). They are ordinary uroce verbs objects; the id
// remembers them so the connection manager can drive the QP.
#include <algorithm>
#include <cerrno>
#include <mutex>

#include "api/rdmacm/entry_points.h"
#include "api/rdmacm/objects.h"
#include "pmd/log.h"

namespace uroce::rdmacm {
namespace {

// Every remote access a connection may need: the MRs' own access flags
// decide what a peer may really do (IBTA 10.6.3.2). The kernel's rdma_cm
// grants the same through rdma_init_qp_attr's RTR step.
constexpr int kConnectedQpAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// librdmacm's default PD: one per device, made when an id first needs one
// and kept for the life of the process.
ibv_pd* DefaultPd(CmId* id) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  ibv_pd*& pd = registry.default_pds[static_cast<size_t>(id->device)];
  if (pd == nullptr) pd = ibv_alloc_pd(id->id.verbs);
  return pd;
}

// librdmacm makes the CQs the application did not give, one per direction,
// each with its own completion channel (id->send_cq_channel, ...).
int MakeCqs(CmId* id, ibv_qp_init_attr* attr) {
  rdma_cm_id& cm = id->id;
  if (attr->send_cq == nullptr) {
    cm.send_cq_channel = ibv_create_comp_channel(cm.verbs);
    if (cm.send_cq_channel == nullptr) return -1;
    cm.send_cq = ibv_create_cq(cm.verbs, static_cast<int>(std::max(attr->cap.max_send_wr, 1u)), &cm,
                               cm.send_cq_channel, 0);
    if (cm.send_cq == nullptr) return -1;
    attr->send_cq = cm.send_cq;
  }
  if (attr->recv_cq == nullptr) {
    cm.recv_cq_channel = ibv_create_comp_channel(cm.verbs);
    if (cm.recv_cq_channel == nullptr) return -1;
    cm.recv_cq = ibv_create_cq(cm.verbs, static_cast<int>(std::max(attr->cap.max_recv_wr, 1u)), &cm,
                               cm.recv_cq_channel, 0);
    if (cm.recv_cq == nullptr) return -1;
    attr->recv_cq = cm.recv_cq;
  }
  id->owns_cqs = true;
  return 0;
}

void FreeCqs(CmId* id) {
  rdma_cm_id& cm = id->id;
  if (cm.send_cq != nullptr) ibv_destroy_cq(cm.send_cq);
  if (cm.send_cq_channel != nullptr) ibv_destroy_comp_channel(cm.send_cq_channel);
  if (cm.recv_cq != nullptr) ibv_destroy_cq(cm.recv_cq);
  if (cm.recv_cq_channel != nullptr) ibv_destroy_comp_channel(cm.recv_cq_channel);
  cm.send_cq = cm.recv_cq = nullptr;
  cm.send_cq_channel = cm.recv_cq_channel = nullptr;
  id->owns_cqs = false;
}

// INIT at once, as librdmacm's rdma_create_qp does, so receives can be
// posted before the connection is made (rping does); the connection manager
// takes it on from INIT.
int ToInit(ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = kConnectedQpAccess;
  const int error = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  return error == 0 ? 0 : Fail(error);
}

}  // namespace

namespace api {

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr) return Fail(EINVAL);
  CmId* ours = CmId::From(id);
  if (id->verbs == nullptr || id->qp != nullptr) return Fail(EINVAL);  // no device yet, or a QP already
  if (qp_init_attr->qp_type != IBV_QPT_RC) {
    UROCE_LOG(ERR, kApi, "rdma_create_qp: RDMA_PS_TCP ids carry RC QPs only\n");
    return Fail(EOPNOTSUPP);
  }
  if (pd == nullptr) pd = DefaultPd(ours);
  if (pd == nullptr) return -1;
  if (pd->context != id->verbs) return Fail(EINVAL);
  if ((qp_init_attr->send_cq == nullptr || qp_init_attr->recv_cq == nullptr) && MakeCqs(ours, qp_init_attr) != 0) {
    const int error = errno;
    FreeCqs(ours);
    return Fail(error);
  }
  if (qp_init_attr->srq == nullptr) qp_init_attr->srq = id->srq;
  ibv_qp* qp = ibv_create_qp(pd, qp_init_attr);
  if (qp == nullptr || ToInit(qp) != 0) {
    const int error = errno;
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (ours->owns_cqs) FreeCqs(ours);
    return Fail(error);
  }
  id->qp = qp;
  id->pd = pd;
  id->qp_type = IBV_QPT_RC;
  return 0;
}

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr) return Fail(EINVAL);
  // The extended attributes beyond the PD (create flags, send_ops_flags for
  // ibv_wr_*, RSS, ...) are not offered here.
  if ((qp_init_attr->comp_mask & ~static_cast<uint32_t>(IBV_QP_INIT_ATTR_PD)) != 0) return Fail(EOPNOTSUPP);
  ibv_qp_init_attr attr{};
  attr.qp_context = qp_init_attr->qp_context;
  attr.send_cq = qp_init_attr->send_cq;
  attr.recv_cq = qp_init_attr->recv_cq;
  attr.srq = qp_init_attr->srq;
  attr.cap = qp_init_attr->cap;
  attr.qp_type = qp_init_attr->qp_type;
  attr.sq_sig_all = qp_init_attr->sq_sig_all;
  const ibv_pd* pd = (qp_init_attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? qp_init_attr->pd : nullptr;
  if (api::rdma_create_qp(id, const_cast<ibv_pd*>(pd), &attr) != 0) return -1;
  qp_init_attr->cap = attr.cap;
  return 0;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  if (id == nullptr || id->qp == nullptr) return;
  ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  CmId* ours = CmId::From(id);
  if (ours->owns_cqs) FreeCqs(ours);
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return Fail(EINVAL);
  if (qp_attr->qp_state != IBV_QPS_INIT) {
    // RTR and RTS need the peer's QPN and PSN, which stay inside the
    // connection manager: QPs made by rdma_create_qp are moved by it.
    UROCE_LOG(ERR, kApi, "rdma_init_qp_attr: only IBV_QPS_INIT is supported\n");
    return Fail(EOPNOTSUPP);
  }
  qp_attr->pkey_index = 0;
  qp_attr->port_num = 1;
  qp_attr->qp_access_flags = kConnectedQpAccess;
  *qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return 0;
}

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (id == nullptr || attr == nullptr || id->verbs == nullptr || id->srq != nullptr) return Fail(EINVAL);
  if (pd == nullptr) pd = DefaultPd(CmId::From(id));
  if (pd == nullptr) return -1;
  ibv_srq* srq = ibv_create_srq(pd, attr);
  if (srq == nullptr) return -1;
  id->srq = srq;
  id->pd = pd;
  return 0;
}

int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr) return Fail(EINVAL);
  // A basic SRQ only (no XRC, no tag matching).
  const uint32_t allowed = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
  if ((attr->comp_mask & ~allowed) != 0) return Fail(EOPNOTSUPP);
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC) return Fail(EOPNOTSUPP);
  ibv_srq_init_attr basic{};
  basic.srq_context = attr->srq_context;
  basic.attr = attr->attr;
  ibv_pd* pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : nullptr;
  if (api::rdma_create_srq(id, pd, &basic) != 0) return -1;
  attr->attr = basic.attr;
  return 0;
}

void rdma_destroy_srq(rdma_cm_id* id) {
  if (id == nullptr || id->srq == nullptr) return;
  ibv_destroy_srq(id->srq);
  id->srq = nullptr;
}

}  // namespace api
}  // namespace uroce::rdmacm
