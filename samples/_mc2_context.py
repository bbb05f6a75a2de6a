"""The ``mc2Context`` kernel input of the v3 / extend entries, host and kernel side.

Source: ops-transformer, ``mc2/common/op_kernel/mc2_moe_context.h`` (``Mc2Aclnn::Mc2MoeContext``),
the host ``Mc2Context::GetMc2ContextTensor`` / ``CreatMc2Context`` / ``GetHcclCommResource`` /
``CreatMc2ContextTensor`` of ``mc2/common/op_api/mc2_context.cpp``, and the kernel's
``Mc2MoeContextHolder`` of ``mc2/moe_distribute_dispatch_v2/op_kernel/mc2_moe_context_holder.h``.

The host fills the struct (this rank's id; every rank's HCCL buffer, rank ``i``'s shifted by
``i * EP_RANK_OFFSET_STEP``), copies it into device memory (``HcclEngineCtxCopy``) and passes
that memory as an int32 tensor of ``sizeof(Mc2MoeContext) / 4`` elements. The kernel reads
the fields from GM: the addresses are uint64 values (``int(GmAddr)``, read back with
``hp.GmAddr.from_int``). Stand-ins: ``rankSizePerServer`` is the world size (one server);
``kfcContextAddr`` and ``hcommHandle_``, which ``CreatMc2Context`` leaves as they were on the
host stack, are zero (no v3 kernel reads them); the channels are acquired with protocol
UB_MEM as ``GetCommProtocol`` picks it, on the A3 platform's windows (the HCCL buffers).
"""

from __future__ import annotations

from ctypes import Structure, c_uint32, c_uint64, sizeof

import torch

import hccl_py as hp

HCCL_MAX_RANK_SIZE = 1024
EP_RANK_OFFSET_STEP = 1024  # mc2_context.cpp
STATE_SIZE = 1024 * 1024  # moe_distribute_v2_constant.h: the state area before the data
MB_SIZE = 1024 * 1024


class Mc2MoeContext(Structure):
    """``Mc2Aclnn::Mc2MoeContext``, field for field."""

    _fields_ = [
        ("epRankId", c_uint32),
        ("rankSizePerServer", c_uint32),
        ("kfcContextAddr", c_uint64),
        ("epHcclBuffer_", c_uint64 * HCCL_MAX_RANK_SIZE),
        ("hcommHandle_", c_uint64 * HCCL_MAX_RANK_SIZE),
    ]


EP_HCCL_BUFFER = Mc2MoeContext.epHcclBuffer_.offset


def GetMc2ContextTensor(groupEp: hp.Group) -> tuple[torch.Tensor, int]:
    """Host: the context tensor and the HCCL buffer size. The C++ caches it per
    ``groupEp + opName`` (``CheckContextCache``); the samples call this once per run."""
    return CreatMc2Context(groupEp)


def CreatMc2Context(hcclHandle: hp.Group) -> tuple[torch.Tensor, int]:
    """``CreatMc2Context`` + ``CreatMc2ContextTensor`` on communicator ``hcclHandle``."""
    mc2ContextStruct = Mc2MoeContext()
    mc2ContextStruct.epRankId = hcclHandle.rank_of(hp.get_rank())  # HcclGetRankId
    epRankSize = hcclHandle.size  # HcclGetRankSize
    hcclBuffSize = GetHcclCommResource(hcclHandle, mc2ContextStruct, epRankSize)
    raw = bytearray(bytes(mc2ContextStruct))  # HcclEngineCtxCopy: host struct to device
    ctx = torch.frombuffer(raw, dtype=torch.int32).to(hp.device())
    assert ctx.numel() == sizeof(Mc2MoeContext) // 4  # the shape CreatMc2ContextTensor gives
    return ctx, hcclBuffSize


def GetHcclCommResource(
    hcclHandle: hp.Group, mc2ContextStruct: Mc2MoeContext, epRankSize: int
) -> int:
    """A channel to every peer, then every rank's HCCL buffer, shifted by its rank's step."""
    rankId = mc2ContextStruct.epRankId
    descs = [
        hp.HcclChannelDesc(r, hp.CommProtocol.COMM_PROTOCOL_UB_MEM)
        for r in range(epRankSize)
        if r != rankId
    ]
    channels = hp.HcclChannelAcquire(hcclHandle, hp.COMM_ENGINE_AIV, descs, len(descs))
    mc2ContextStruct.rankSizePerServer = epRankSize  # HcclRankGraphGetRankSizeByLayer
    hcclBuffSize = 0
    for i in range(epRankSize):
        if i == rankId:
            tempBuffer, hcclBuffSize = hp.HcclGetHcclBuffer(hcclHandle)
        else:
            idx = i if i < rankId else i - 1
            tempBuffer, _ = hp.HcclChannelGetHcclBuffer(hcclHandle, channels[idx])
        mc2ContextStruct.epHcclBuffer_[i] = int(tempBuffer) + i * EP_RANK_OFFSET_STEP
    return hcclBuffSize


class Mc2MoeContextHolder:
    """mc2_moe_context_holder.h: the EP context read from the ``mc2Context`` input."""

    def InitAndCheck(self, ctxPtr: hp.GmAddr, epWorldSize: int, totalWinSize: int) -> None:
        """No window-size check on this path; the world size comes from the tiling."""
        self.mc2Context_ = ctxPtr
        self.epWorldSize_ = epWorldSize

    def epHcclBuffer(self, rankId: int) -> hp.GmAddr:
        """``mc2Context_->epHcclBuffer_[rankId]``, a uint64 in GM."""
        at = self.mc2Context_ + EP_HCCL_BUFFER + 8 * rankId
        return hp.GmAddr.from_int(int(hp.gm_tensor(at, torch.int64, 1)[0]))

    def GetStatusDataSpaceGm(self) -> hp.GmAddr:
        return self.epHcclBuffer(self.GetEpRankId())

    def GetEpRankId(self) -> int:
        return int(hp.gm_tensor(self.mc2Context_, torch.int32, 1)[0])

    def GetEpWorldSize(self) -> int:
        return self.epWorldSize_

    def GetWindAddrByRankId(self, rankId: int, curRankId: int) -> hp.GmAddr:
        """The data area: after the state area."""
        return self.epHcclBuffer(rankId) + STATE_SIZE

    def GetWindStateAddrByRankId(self, rankId: int, curRankId: int) -> hp.GmAddr:
        """The state area: the buffer's start."""
        return self.epHcclBuffer(rankId)
