#include "cq/wc_mapping.h"

#include <arpa/inet.h>
#include <rdma/fi_errno.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace uroce::cq {
namespace {

ibv_wc Wc(ibv_wc_opcode opcode, ibv_wc_status status = IBV_WC_SUCCESS) {
  ibv_wc wc;
  std::memset(&wc, 0, sizeof(wc));
  wc.opcode = opcode;
  wc.status = status;
  return wc;
}

TEST(WcMapping, OpcodeToCompletionFlags) {
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_SEND)), FI_SEND | FI_MSG);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_RECV)), FI_RECV | FI_MSG);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_RDMA_WRITE)), FI_RMA | FI_WRITE);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_RDMA_READ)), FI_RMA | FI_READ);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_COMP_SWAP)), FI_ATOMIC | FI_READ);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_FETCH_ADD)), FI_ATOMIC | FI_READ);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_ATOMIC_WRITE)), FI_ATOMIC | FI_WRITE);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_RECV_RDMA_WITH_IMM)),
            FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_LOCAL_INV)), 0u);
  EXPECT_EQ(CompletionFlags(Wc(IBV_WC_BIND_MW)), 0u);
}

TEST(WcMapping, ImmediateDataIsRemoteCqDataInHostOrder) {
  ibv_wc wc = Wc(IBV_WC_RECV);
  wc.wc_flags = IBV_WC_WITH_IMM;
  wc.imm_data = htonl(0xdeadbeef);
  EXPECT_EQ(CompletionFlags(wc), FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(RemoteData(wc), 0xdeadbeefu);
  wc.wc_flags = 0;
  EXPECT_EQ(RemoteData(wc), 0u);  // no immediate, no data
}

TEST(WcMapping, LengthOnlyForReceives) {
  ibv_wc wc = Wc(IBV_WC_RECV);
  wc.byte_len = 1500;
  EXPECT_EQ(ReceivedLength(wc), 1500u);
  wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  EXPECT_EQ(ReceivedLength(wc), 1500u);
  wc.opcode = IBV_WC_RDMA_READ;
  EXPECT_EQ(ReceivedLength(wc), 0u);
}

TEST(WcMapping, EntriesOfEachFormat) {
  ibv_wc wc = Wc(IBV_WC_RECV);
  wc.wr_id = 0x1000;
  wc.byte_len = 12;
  fi_cq_tagged_entry tagged;
  std::memset(&tagged, 0xff, sizeof(tagged));
  ToCqEntry(wc, &tagged);
  EXPECT_EQ(tagged.op_context, reinterpret_cast<void*>(0x1000));
  EXPECT_EQ(tagged.len, 12u);
  EXPECT_EQ(tagged.buf, nullptr);
  EXPECT_EQ(tagged.data, 0u);
  EXPECT_EQ(tagged.tag, 0u);
  EXPECT_EQ(CqEntrySize(FI_CQ_FORMAT_CONTEXT), sizeof(fi_cq_entry));
  EXPECT_EQ(CqEntrySize(FI_CQ_FORMAT_MSG), sizeof(fi_cq_msg_entry));
  EXPECT_EQ(CqEntrySize(FI_CQ_FORMAT_DATA), sizeof(fi_cq_data_entry));
  EXPECT_EQ(CqEntrySize(FI_CQ_FORMAT_TAGGED), sizeof(fi_cq_tagged_entry));
  EXPECT_EQ(CqEntrySize(FI_CQ_FORMAT_UNSPEC), 0u);
}

TEST(WcMapping, StatusToPositiveFabricErrno) {
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_SUCCESS), 0);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_LOC_LEN_ERR), FI_ETRUNC);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_LOC_QP_OP_ERR), FI_EINVAL);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_LOC_PROT_ERR), FI_EACCES);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_WR_FLUSH_ERR), FI_ECANCELED);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_LOC_ACCESS_ERR), FI_EACCES);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_REM_INV_REQ_ERR), FI_EREMOTEIO);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_REM_ACCESS_ERR), FI_EACCES);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_REM_OP_ERR), FI_EREMOTEIO);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_RETRY_EXC_ERR), FI_ETIMEDOUT);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_RNR_RETRY_EXC_ERR), FI_ENORX);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_REM_ABORT_ERR), FI_ECONNABORTED);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_RESP_TIMEOUT_ERR), FI_ETIMEDOUT);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_BAD_RESP_ERR), FI_EIO);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_FATAL_ERR), FI_EIO);
  EXPECT_EQ(FabricErrnoForStatus(IBV_WC_GENERAL_ERR), FI_EIO);
  EXPECT_EQ(FabricErrnoForStatus(999), FI_EIO);
  for (int status = IBV_WC_LOC_LEN_ERR; status <= IBV_WC_TM_RNDV_INCOMPLETE;
       ++status) {
    EXPECT_GT(FabricErrnoForStatus(status), 0) << status;
  }
}

TEST(WcMapping, EveryStatusHasText) {
  for (int status = IBV_WC_SUCCESS; status <= IBV_WC_TM_RNDV_INCOMPLETE;
       ++status) {
    const std::string text = CompletionStatusText(status);
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(text.find("unknown"), std::string::npos) << status;
  }
  EXPECT_NE(std::string(CompletionStatusText(-1)).find("unknown"),
            std::string::npos);
}

TEST(WcMapping, ErrorEntry) {
  ibv_wc wc = Wc(IBV_WC_RECV, IBV_WC_LOC_LEN_ERR);
  wc.wr_id = 7;
  wc.byte_len = 64;
  wc.vendor_err = 36;
  fi_cq_err_entry entry;
  std::memset(&entry, 0, sizeof(entry));
  FillCqErrEntry(wc, &entry);
  EXPECT_EQ(entry.op_context, reinterpret_cast<void*>(7));
  EXPECT_EQ(entry.flags, FI_RECV | FI_MSG);
  EXPECT_EQ(entry.len, 64u);
  EXPECT_EQ(entry.olen, 36u);
  EXPECT_EQ(entry.err, FI_ETRUNC);
  EXPECT_EQ(entry.prov_errno, IBV_WC_LOC_LEN_ERR);
  wc.status = IBV_WC_REM_ACCESS_ERR;
  FillCqErrEntry(wc, &entry);
  EXPECT_EQ(entry.olen, 0u);  // only truncation has an overflow length
}

}  // namespace
}  // namespace uroce::cq
