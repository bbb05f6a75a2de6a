"""Port of ops-transformer's AlltoAllAllGatherBatchMatMul (Atlas A3, two domains), call for call.

Source: ops-transformer, ``mc2/allto_all_all_gather_batch_mat_mul/``: the kernel entry
``op_kernel/arch22/allto_all_all_gather_batch_mat_mul.cpp`` (lines 62-82, template
``XShard = 1``: the AllGather runs along C), the class ``AlltoAllAllGatherBatchMatMul`` of
``op_kernel/allto_all_all_gather_batch_mat_mul.h`` (``Init`` 164-229, ``GetTilingData``
265-301, ``Process`` 303-312, ``LocalCommunication`` 314-332, ``LocalCalculation`` 334-413,
``NonLocalCommunication`` 415-563, ``NonLocalCalculation`` 565-660,
``TransposeAllGatherInput`` 662-739, ``TransposeBeforeBMMShardC`` 772-884,
``TransposeAfterBMMShardC`` 886-1118), the tiling struct of
``op_kernel/allto_all_all_gather_batch_mat_mul_tiling_struct.h`` (24-86) and the host tiling
``op_host/op_tiling/allto_all_all_gather_batch_mat_mul_tiling.cpp`` (``SetHcclTiling``
1121-1156, ``InitTileInfoInCommonTiling`` 201-231).

What runs unchanged: domain 0 is the EP group (AlltoAllV), domain 1 the TP group
(AllGather); ``Init`` + ``SetCcTiling`` with the tilings' addresses on every core, one
``Mc2CcTilingConfig`` filling the init tiling and both cc tilings (``SetGroupName``,
``SetOpType``, ``SetAlgConfig``; the first cc tiling's opType is 8, which the host code
names ``OP_TYPE_ALL_TO_ALL`` but is ``HCCL_CMD_ALLTOALLV``); on the AIV cores only,
``AllGather<true>`` of this rank's own experts, then per C tile ``tileLenE``
``AlltoAllV<true>`` (the tail tile with ``repeat = 1``) and one AllGather per tile. With
``ep == 2`` (4 ranks) the AllGathers are ``AllGather<false>``, committed later by every AIV
core once it has waited for the tile's AlltoAllVs, copied their output without this
rank's own block (``TransposeAllGatherInput``) and passed a ``SyncAll<true>``; with ``ep > 2`` (8 ranks) the AllGathers are ``AllGather<true>`` and the
domains order each other with ``InterHcclGroupSync`` both ways (AlltoAllV after the last
AllGather, including the source's ``InterHcclGroupSync(1, handleIdx - 1)`` for the tail,
and AllGather after its tile's last AlltoAllV). The workspace layout, the per-tile Wait
on the AIV cores, the ``SyncAll<false>`` barriers around the transposes and the batch
matmul, the transposes' split of rows over ``aivCoreNum`` cores and their index
arithmetic, ``y1`` and ``y2``, and ``Finalize`` of both domains on the AIV cores.

Stand-ins: FP16, no bias, no activation, ``y3`` not produced (template
``IsBias = Y3Need = false``, ``Y2Need = true``), weight not transposed; the batch matmul
(``Mc2BatchMatMulCommonKernel``) is a torch matmul on the AIC cores, each core a share of
the experts, and the five ``BMM_Mc2MatmulTilingData`` members are left out of the tiling
struct; the C cut (``domesticTileC``: two tiles of 2 rows and a tail of 1) is fixed here
rather than computed by the formulaic tiling; each core copies its rows of a transpose in
one vectorised copy rather than in Unified Buffer sized pieces; ``NonLocalCalculation``
calls ``TransposeBeforeBMM`` on every core (line 618) but the port runs it on the AIV cores
only, as the AIC cores have no Unified Buffer to copy through.

Run: ``python samples/mc2_allto_all_all_gather_batch_mat_mul.py`` (4 emulated ranks:
ep = tp = 2), ``python -m hccl_py run -n 8 samples/mc2_allto_all_all_gather_batch_mat_mul.py``
(ep = 4: InterHcclGroupSync), ``python -m hccl_py run -n 4 --backend gloo
samples/mc2_allto_all_all_gather_batch_mat_mul.py``.
"""

from ctypes import Structure, c_bool, c_uint32, c_uint64

import numpy as np
from _common import compare, on_device, random_ints, run_sample, skip, zeros
from _mc2 import (
    SIZEOF_HALF,
    BMM_TileInfo,
    batch_matmul,
    copy_rows,
    core_rows,
    ep_tp_domains,
    ep_tp_groups,
    member_addresses,
    set_ep_tp_hccl_tiling,
    tile_info,
)
from _mc2 import typed_fields as _fields

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_CMD_ALLGATHER,
    HCCL_DATA_TYPE_FP16,
    Hccl,
    Mc2CcTiling,
    Mc2InitTiling,
    TilingData,
)

PLATFORM = "A3"  # AlltoAllV and InterHcclGroupSync are A3 calls
TP = 2  # tpWorldSize; epWorldSize is the world size / TP
E_OVER_EP, C, H, M = 2, 5, 16, 8  # experts per EP rank, C/tp, H, M/tp
C_TILE = 2  # domesticTileC.tileLen: two tiles of 2 rows and a tail of 1
BLOCK_DIM = 2  # mix_aic_1_2: 2 AIC and 4 AIV cores
dataLen1 = SIZEOF_HALF
IsNeedY2 = True  # the template arguments this port instantiates: XShard 1, Y2Need


class Mc2CommonTiling(Structure):
    """optiling::Mc2CommonTiling, member for member."""

    _fields_ = [
        *_fields(c_uint32, "epGroupSize", "tpGroupSize"),
        *_fields(c_uint64, "expert", "EOverEp", "C", "COverTp", "H", "HOverTp", "MOverTp"),
        *_fields(c_uint32, "aivCoreNum", "inputDatasize", "biasDatasize"),
        *_fields(c_uint64, "ubCapacityForTrans", "ubCapacityForAddActivate"),
        *_fields(c_bool, "isBias", "y2Flag", "y3Flag", "isWeightTrans"),
        *_fields(
            BMM_TileInfo,
            "localTileE",
            "domesticTileE",
            "localTileC",
            "domesticTileC",
            "localUbTranspose",
            "localTailUbTranspose",
            "domesticUbTranspose",
            "domesticTailUbTranspose",
            "localUbAdd",
            "localTailUbAdd",
            "domesticUbAdd",
            "domesticTailUbAdd",
        ),
        *_fields(c_uint32, "activateType", "xShardFlag", "fastGeluBuffer"),
        ("totalUbSize", c_uint64),
    ]


class AlltoAllAllGatherBatchMatMulTilingData(TilingData):
    """The tiling struct without its five BMM_Mc2MatmulTilingData members (the bmm is torch)."""

    _fields_ = [
        ("hcclInitTiling", Mc2InitTiling),
        ("alltoAllCcTiling", Mc2CcTiling),
        ("allGatherCcTiling", Mc2CcTiling),
        ("commonTiling", Mc2CommonTiling),
    ]


class AlltoAllAllGatherBatchMatMul:
    """``AlltoAllAllGatherBatchMatMul<half, half, 1, false, false, true, false>``."""

    def Init(
        self,
        xGM,
        weightGM,
        y1GM,
        y2GM,
        workspaceGM,
        tilingData,
        hcclInitTiling,
        allGatherCcTiling,
        alltoAllCcTiling,
    ):
        self.GetTilingData(tilingData)
        self.shardFactor = self.tpRankSize  # ShardType 1
        self.xGM, self.weightGM, self.y1GM, self.y2GM = xGM, weightGM, y1GM, y2GM
        E, C, H = self.E, self.C, self.H
        maxLenNonLocalC = max(self.nonLocalC.tileLen, self.nonLocalC.tailLen)
        self.alltoallNonLocalOutGM = workspaceGM
        self.allgatherLocalOutGM = self.alltoallNonLocalOutGM + E * C * H * dataLen1
        self.allgatherNonLocalInGM = (
            self.allgatherLocalOutGM + self.expertOverEp * C * H * self.tpRankSize * dataLen1
        )
        self.allgatherNonLocalOutGM = (
            self.allgatherNonLocalInGM + self.expertOverEp * C * H * self.epRankSize * dataLen1
        )
        self.transposeOutGM = self.allgatherNonLocalOutGM + E * C * H * self.tpRankSize * dataLen1
        self.bmmOutGM = self.transposeOutGM + dataLen1 * max(
            self.localE.tileLen * self.localC.tileLen * H * self.tpRankSize,
            (self.epRankSize - 1) * self.nonLocalE.tileLen * maxLenNonLocalC * H * self.tpRankSize,
        )

        self.hcclAlltoall, self.hcclAllgather = Hccl(), Hccl()
        contextGM0, contextGM1 = hp.GetHcclContext(0), hp.GetHcclContext(1)
        self.hcclAlltoall.Init(contextGM0, hcclInitTiling)
        self.hcclAlltoall.SetCcTiling(alltoAllCcTiling)
        self.hcclAllgather.Init(contextGM1, hcclInitTiling)
        self.hcclAllgather.SetCcTiling(allGatherCcTiling)
        self.hcclDataType = HCCL_DATA_TYPE_FP16

        self.epRankId = self.hcclAlltoall.GetRankId()
        self.tpRankId = self.hcclAllgather.GetRankId()

        self.allgatherRecvBufOffset = self.localE.tileLen * C * H * self.tpRankSize * dataLen1
        self.handleIdx = self.localE.tileCnt + self.localE.tailCnt
        self.handleOffset = self.nonLocalC.tileCnt + self.nonLocalC.tailCnt
        self.allgatherHandleList = [0] * 32  # MAX_HCCL_HANDLE

    def GetTilingData(self, tilingData):
        common = tilingData.commonTiling
        self.E, self.C, self.H, self.M = common.expert, common.COverTp, common.H, common.MOverTp
        self.expertOverEp = common.EOverEp
        self.tpRankSize, self.epRankSize = common.tpGroupSize, common.epGroupSize
        self.vecCoreNum = common.aivCoreNum
        self.localE, self.localC = common.localTileE, common.localTileC
        self.nonLocalE, self.nonLocalC = common.domesticTileE, common.domesticTileC

    def Process(self):
        self.LocalCommunication()
        self.NonLocalCommunication()
        self.LocalCalculation()
        self.NonLocalCalculation()

    def LocalCommunication(self):
        C, H = self.C, self.H
        allgatherSendBuf = self.xGM + self.expertOverEp * self.epRankId * C * H * dataLen1
        allgatherRecvBuf = self.allgatherLocalOutGM
        allGatherSendCount = self.localE.tileLen * C * H
        allgatherSendBufOffset = self.localE.tileLen * C * H * dataLen1
        for e_idx in range(self.localE.tileCnt):
            if hp.g_coreType == AIV:
                self.allgatherHandleList[e_idx] = self.hcclAllgather.AllGather[True](
                    allgatherSendBuf, allgatherRecvBuf, allGatherSendCount, self.hcclDataType, 0
                )
            allgatherSendBuf += allgatherSendBufOffset
            allgatherRecvBuf += self.allgatherRecvBufOffset

    def LocalCalculation(self):
        wGM = self.weightGM
        weightOffset = self.localE.tileLen * self.H * self.M * dataLen1
        y1, y2 = (
            self.y1GM,
            self.y2GM + self.epRankId * self.C * self.H * self.shardFactor * dataLen1,
        )
        allgatherRecvTensor = self.allgatherLocalOutGM
        y1Offset = self.localE.tileLen * self.epRankSize * self.C * self.M * self.shardFactor
        y2Offset = self.localE.tileLen * self.epRankSize * self.C * self.H * self.shardFactor
        self.allgatherRecvBufOffset = self.localE.tileLen * self.C * self.H * self.tpRankSize
        for e_idx in range(self.localE.tileCnt):
            if hp.g_coreType == AIV:
                self.hcclAllgather.Wait(self.allgatherHandleList[e_idx])
            hp.SyncAll[False]()
            transpose = self.localE.tileLen != 1 or IsNeedY2
            if hp.g_coreType == AIV and transpose:
                self.TransposeBeforeBMMShardC(True, False, allgatherRecvTensor, y2)
            hp.SyncAll[False]()
            bmmInGm = self.transposeOutGM if transpose else allgatherRecvTensor
            allgatherRecvTensor += self.allgatherRecvBufOffset * dataLen1
            self.BatchMatMul(bmmInGm, wGM, self.localE.tileLen, self.tpRankSize * self.C)
            hp.SyncAll[False]()
            wGM += weightOffset
            if hp.g_coreType == AIV:
                self.TransposeAfterBMMShardC(True, False, y1)
            y1 += y1Offset * dataLen1
            y2 += y2Offset * dataLen1

    def NonLocalCommunication(self):
        ep, H, C = self.epRankSize, self.H, self.C
        nonLocalC, nonLocalE = self.nonLocalC, self.nonLocalE
        tempDataPiece = H * dataLen1
        alltoallSendBufOffsetBase = C * tempDataPiece
        alltoallSendBufOffsetTile = nonLocalC.tileLen * tempDataPiece
        alltoallRecvBufOffsetTile = ep * nonLocalC.tileLen * tempDataPiece
        alltoallRecvBufOffsetTail = ep * nonLocalC.tailLen * tempDataPiece
        dataCountsTileTemp, dataCountsTailTemp = nonLocalC.tileLen * H, nonLocalC.tailLen * H
        alltoallDataCountsTile = [dataCountsTileTemp] * ep
        alltoallDataCountsTail = [dataCountsTailTemp] * ep
        alltoallSdispls = [i * self.expertOverEp * C * H for i in range(ep)]
        alltoallRdisplsTile = [i * dataCountsTileTemp for i in range(ep)]
        alltoallRdisplsTail = [i * dataCountsTailTemp for i in range(ep)]

        alltoallRecvBuf = self.alltoallNonLocalOutGM
        allgatherRecvBuf = self.allgatherNonLocalOutGM
        allgatherSendBuf = self.alltoallNonLocalOutGM
        allgatherSendBufOffsetCalcTemp = nonLocalE.tileLen * ep * H * dataLen1
        allgatherRecvBufOffsetTile = (
            allgatherSendBufOffsetCalcTemp * nonLocalC.tileLen * self.tpRankSize
        )
        allgatherRecvBufOffsetTail = (
            allgatherSendBufOffsetCalcTemp * nonLocalC.tailLen * self.tpRankSize
        )
        allgatherSendBufOffsetTile = allgatherSendBufOffsetCalcTemp * nonLocalC.tileLen
        allgatherSendBufOffsetTail = allgatherSendBufOffsetCalcTemp * nonLocalC.tailLen
        allGatherSendCountTile = nonLocalE.tileLen * ep * nonLocalC.tileLen * H
        allGatherSendCountTail = nonLocalE.tileLen * ep * nonLocalC.tailLen * H
        if ep == 2:
            allgatherSendBuf = self.allgatherNonLocalInGM
            allGatherSendCountTile //= ep
            allGatherSendCountTail //= ep

        alltoallHandleList = []
        isAiv = hp.g_coreType == AIV
        tile = (alltoallDataCountsTile, alltoallRdisplsTile, alltoallRecvBufOffsetTile)
        tail = (alltoallDataCountsTail, alltoallRdisplsTail, alltoallRecvBufOffsetTail)
        for e_idx in range(nonLocalE.tileCnt):
            for c_idx in range(nonLocalC.tileCnt):
                alltoallSendBuf = (
                    self.xGM
                    + e_idx * nonLocalE.tileLen * alltoallSendBufOffsetBase
                    + c_idx * alltoallSendBufOffsetTile
                )
                if isAiv:
                    allgatherHandleId = self.allgatherHandleList[self.handleIdx - 1]
                    alltoallRecvBuf = self.CommunicateTile(
                        allgatherHandleId,
                        alltoallSendBuf,
                        alltoallRecvBuf,
                        *tile,
                        alltoallSdispls,
                        alltoallSendBufOffsetBase,
                        alltoallHandleList,
                        allgatherSendBuf,
                        allgatherRecvBuf,
                        allGatherSendCountTile,
                    )
                allgatherSendBuf += allgatherSendBufOffsetTile
                allgatherRecvBuf += allgatherRecvBufOffsetTile

            if nonLocalC.tailCnt == 1 and isAiv:  # the C tail (AIV cores only)
                alltoallSendBuf = (
                    self.xGM
                    + e_idx * nonLocalE.tileLen * alltoallSendBufOffsetBase
                    + nonLocalC.tileCnt * alltoallSendBufOffsetTile
                )
                # the source syncs on handleIdx - 1 itself here: the same number, as
                # this object's handles are 0, 1, 2, ... in allgatherHandleList
                alltoallRecvBuf = self.CommunicateTile(
                    self.handleIdx - 1,
                    alltoallSendBuf,
                    alltoallRecvBuf,
                    *tail,
                    alltoallSdispls,
                    alltoallSendBufOffsetBase,
                    alltoallHandleList,
                    allgatherSendBuf,
                    allgatherRecvBuf,
                    allGatherSendCountTail,
                )
                allgatherSendBuf += allgatherSendBufOffsetTail
                allgatherRecvBuf += allgatherRecvBufOffsetTail

        if ep == 2:
            self.handleIdx = self.localE.tileCnt + self.localE.tailCnt
            alltoallHandleIndex = 0
            allgatherSendBufOffsetTile //= dataLen1
            allgatherSendBufOffsetTail //= dataLen1
            alltoallOut, allgatherIn = self.alltoallNonLocalOutGM, self.allgatherNonLocalInGM
            for _e_idx in range(nonLocalE.tileCnt):
                for c_idx in range(nonLocalC.tileCnt + nonLocalC.tailCnt):
                    isCTail = c_idx == nonLocalC.tileCnt
                    if isAiv:
                        for _k in range(nonLocalE.tileLen):
                            self.hcclAlltoall.Wait(alltoallHandleList[alltoallHandleIndex])
                            alltoallHandleIndex += 1
                        hp.SyncAll[True]()
                        self.TransposeAllGatherInput(isCTail, alltoallOut, allgatherIn)
                        hp.SyncAll[True]()
                        self.hcclAllgather.Commit(self.allgatherHandleList[self.handleIdx])
                        self.handleIdx += 1
                        step = allgatherSendBufOffsetTail if isCTail else allgatherSendBufOffsetTile
                        alltoallOut += step * dataLen1
                        allgatherIn += step * dataLen1

    def CommunicateTile(
        self,
        allgatherHandleId,
        alltoallSendBuf,
        alltoallRecvBuf,
        counts,
        rdispls,
        recvStep,
        sdispls,
        sendStep,
        alltoallHandleList,
        allgatherSendBuf,
        allgatherRecvBuf,
        count,
    ):
        """One C tile (or the tail) of NonLocalCommunication on an AIV core: its tileLenE
        AlltoAllVs, then its AllGather. Returns the next AlltoAllV receive address."""
        if self.epRankSize != 2:
            self.hcclAlltoall.InterHcclGroupSync(1, allgatherHandleId)
        for _k in range(self.nonLocalE.tileLen):
            alltoallHandle = self.hcclAlltoall.AlltoAllV[True](
                alltoallSendBuf,
                counts,
                sdispls,
                self.hcclDataType,
                alltoallRecvBuf,
                counts,
                rdispls,
                self.hcclDataType,
                1,
            )
            alltoallSendBuf += sendStep
            alltoallRecvBuf += recvStep
            alltoallHandleList.append(alltoallHandle)
        if self.epRankSize == 2:
            handle = self.hcclAllgather.AllGather[False](
                allgatherSendBuf, allgatherRecvBuf, count, self.hcclDataType, 0
            )
        else:
            self.hcclAllgather.InterHcclGroupSync(0, alltoallHandle)  # HCCL_GROUP_ID_0
            handle = self.hcclAllgather.AllGather[True](
                allgatherSendBuf, allgatherRecvBuf, count, self.hcclDataType, 0
            )
        self.allgatherHandleList[self.handleIdx] = handle
        self.handleIdx += 1
        return alltoallRecvBuf

    def NonLocalCalculation(self):
        ep, tp, C, H, M = self.epRankSize, self.tpRankSize, self.C, self.H, self.M
        nonLocalC, nonLocalE = self.nonLocalC, self.nonLocalE
        wGM = self.weightGM
        weightOffset = nonLocalE.tileLen * H * M * dataLen1
        isCTail = False
        self.handleIdx = self.localE.tileCnt + self.localE.tailCnt
        allgatherRecvTensor = self.allgatherNonLocalOutGM
        y1OffsetBase = nonLocalE.tileLen * ep * C * M * self.shardFactor
        y1Offset = nonLocalC.tileLen * M
        allgatherRecvBufOffsetTile = nonLocalE.tileLen * ep * nonLocalC.tileLen * H * tp
        allgatherRecvBufOffsetTail = nonLocalE.tileLen * ep * nonLocalC.tailLen * H * tp
        y2OffsetBase = nonLocalE.tileLen * ep * C * H * self.shardFactor
        y2Offset = nonLocalC.tileLen * H
        for e_idx in range(nonLocalE.tileCnt):
            y1 = self.y1GM + e_idx * y1OffsetBase * dataLen1
            y2 = self.y2GM + e_idx * y2OffsetBase * dataLen1
            for c_idx in range(nonLocalC.tileCnt + nonLocalC.tailCnt):
                if c_idx == nonLocalC.tileCnt:
                    isCTail = True
                if hp.g_coreType == AIV:
                    self.hcclAllgather.Wait(self.allgatherHandleList[self.handleIdx + c_idx])
                hp.SyncAll[False]()
                if hp.g_coreType == AIV:  # the source runs it on every core (see the docstring)
                    self.TransposeBeforeBMMShardC(False, isCTail, allgatherRecvTensor, y2)
                hp.SyncAll[False]()
                step = allgatherRecvBufOffsetTail if isCTail else allgatherRecvBufOffsetTile
                allgatherRecvTensor += step * dataLen1
                tileLenC = nonLocalC.tailLen if isCTail else nonLocalC.tileLen
                self.BatchMatMul(
                    self.transposeOutGM, wGM, nonLocalE.tileLen, (ep - 1) * tp * tileLenC
                )
                hp.SyncAll[False]()
                if hp.g_coreType == AIV:
                    self.TransposeAfterBMMShardC(False, isCTail, y1)
                y1 += y1Offset * dataLen1
                y2 += y2Offset * dataLen1
            self.handleIdx += self.handleOffset
            wGM += weightOffset
        if hp.g_coreType == AIV:
            self.hcclAlltoall.Finalize()
            self.hcclAllgather.Finalize()

    def BatchMatMul(self, aGM, bGM, batch: int, rows: int) -> None:
        """Mc2BatchMatMulCommonKernel (stand-in): bmmOut[e] = a[e] @ w[e], experts split over AIC."""
        batch_matmul(aGM, bGM, self.bmmOutGM, batch, rows, self.H, self.M)

    def TransposeAllGatherInput(self, isCTail, dataCopyInBaseGM, dataCopyOutBaseGM):
        """Drop this rank's own block: [k][ep][c] -> [k][ep - 1][c]."""
        tileLenC = self.nonLocalC.tailLen if isCTail else self.nonLocalC.tileLen
        tileLenE, H = self.nonLocalE.tileLen, self.H
        factorIn, factorOut = self.epRankSize, self.epRankSize - 1
        rows = core_rows(tileLenE * factorOut * tileLenC, self.vecCoreNum, hp.GetBlockIdx())
        k, eOut, c = np.unravel_index(rows, (tileLenE, factorOut, tileLenC))
        eIn = eOut + (eOut >= self.epRankId)
        copy_rows(
            dataCopyOutBaseGM,
            k * (factorOut * tileLenC * H) + eOut * (tileLenC * H) + c * H,
            dataCopyInBaseGM,
            k * (factorIn * tileLenC * H) + eIn * (tileLenC * H) + c * H,
            H,
        )

    def TransposeBeforeBMMShardC(self, isLocal, isCTail, dataCopyInBaseGM, y2BaseGM):
        """[t][k][e][c] of the AllGather output -> [k][e][t][c] of transposeOut and y2."""
        ep, tp, C, H = self.epRankSize, self.tpRankSize, self.C, self.H
        if isLocal:
            tileLenC = self.localC.tailLen if isCTail else self.localC.tileLen
            tileLenE, factorIn, factorOut = self.localE.tileLen, 1, 1
        else:
            tileLenC = self.nonLocalC.tailLen if isCTail else self.nonLocalC.tileLen
            tileLenE, factorIn, factorOut = self.nonLocalE.tileLen, ep, ep - 1
            if ep == 2:
                factorIn = ep - 1
        rows = core_rows(tp * tileLenE * factorOut * tileLenC, self.vecCoreNum, hp.GetBlockIdx())
        t, k, eOut, c = np.unravel_index(rows, (tp, tileLenE, factorOut, tileLenC))
        eIn = eOut + (eOut >= self.epRankId)
        eY2 = eIn
        if isLocal:
            eOut, eIn, eY2 = 0 * eOut, 0 * eIn, 0 * eY2
        elif ep == 2:
            eIn = eOut
        src = (
            t * (tileLenE * factorIn * tileLenC * H)
            + k * (factorIn * tileLenC * H)
            + eIn * (tileLenC * H)
            + c * H
        )
        out = k * (factorOut * tp * tileLenC * H) + eOut * (tp * tileLenC * H) + t * (tileLenC * H)
        copy_rows(self.transposeOutGM, out + c * H, dataCopyInBaseGM, src, H)
        if IsNeedY2:
            y2Out = k * (ep * tp * C * H) + eY2 * (tp * C * H) + t * (C * H) + c * H
            copy_rows(y2BaseGM, y2Out, dataCopyInBaseGM, src, H)

    def TransposeAfterBMMShardC(self, isLocal, isCTail, dataCopyOutBaseGM):
        """[k][e][t][c] of bmmOut -> y1; no bias, no activation: a copy."""
        ep, tp, C, M = self.epRankSize, self.tpRankSize, self.C, self.M
        if isLocal:
            tileLenE = self.localE.tileLen
            tileLenC = self.localC.tailLen if isCTail else self.localC.tileLen
            factorIn = 1
        else:
            tileLenE = self.nonLocalE.tileLen
            tileLenC = self.nonLocalC.tailLen if isCTail else self.nonLocalC.tileLen
            factorIn = ep - 1
        rows = core_rows(tp * tileLenE * factorIn * tileLenC, self.vecCoreNum, hp.GetBlockIdx())
        k, eIn, t, c = np.unravel_index(rows, (tileLenE, factorIn, tp, tileLenC))
        if isLocal:
            eOut, eIn = np.full_like(eIn, self.epRankId), 0 * eIn
        else:
            eOut = eIn + (eIn >= self.epRankId)
        copy_rows(
            dataCopyOutBaseGM,
            k * (ep * tp * C * M) + eOut * (tp * C * M) + t * (C * M) + c * M,
            self.bmmOutGM,
            k * (factorIn * tp * tileLenC * M)
            + eIn * (tp * tileLenC * M)
            + t * (tileLenC * M)
            + c * M,
            M,
        )


def allto_all_all_gather_batch_mat_mul(
    xGM, weightGM, biasGM, y1GM, y2GM, y3GM, workspaceGM, tilingGM
):
    """The kernel entry, template ``XShard = 1``: the tilings' addresses, Init, Process."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllAllGatherBatchMatMulTilingData, tilingGM)
    hcclInitTiling, allGatherCcTiling, alltoAllCcTiling = member_addresses(
        tilingGM,
        AlltoAllAllGatherBatchMatMulTilingData,
        "hcclInitTiling",
        "allGatherCcTiling",
        "alltoAllCcTiling",
    )
    op = AlltoAllAllGatherBatchMatMul()
    op.Init(
        xGM,
        weightGM,
        y1GM,
        y2GM,
        workspaceGM,
        tilingData,
        hcclInitTiling,
        allGatherCcTiling,
        alltoAllCcTiling,
    )
    op.Process()


def make_tiling(ep: int, epGroup: str, tpGroup: str) -> AlltoAllAllGatherBatchMatMulTilingData:
    """Host side: the common tiling (E and the local C uncut, the non-local C cut) and SetHcclTiling."""
    tiling = AlltoAllAllGatherBatchMatMulTilingData()
    common = tiling.commonTiling
    common.epGroupSize, common.tpGroupSize = ep, TP
    common.expert, common.EOverEp = E_OVER_EP * ep, E_OVER_EP
    common.C, common.COverTp, common.H, common.HOverTp, common.MOverTp = C * TP, C, H, H, M
    common.aivCoreNum, common.inputDatasize = 2 * BLOCK_DIM, SIZEOF_HALF
    common.y2Flag, common.xShardFlag = True, 1
    common.localTileE = common.domesticTileE = tile_info(1, E_OVER_EP)
    common.localTileC = tile_info(1, C)
    tile_cnt, tail = divmod(C, C_TILE)
    common.domesticTileC = tile_info(tile_cnt, C_TILE, int(tail > 0), tail)

    set_ep_tp_hccl_tiling(
        tiling.hcclInitTiling,
        tiling.alltoAllCcTiling,
        tiling.allGatherCcTiling,
        epGroup,
        tpGroup,
        HCCL_CMD_ALLGATHER,
        "AllGather=level0:doublering",
    )
    return tiling


def inputs(rank: int, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """x (E, C/tp, H) and weight (E/ep, H, M/tp) of ``rank``: small integers, exact products."""
    return random_ints(rank, (E_OVER_EP * ep, C, H)), random_ints(1000 + rank, (E_OVER_EP, H, M))


def reference(rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy, as the source's golden.py: AlltoAll in EP, AllGather in TP, permute, bmm."""
    ep = n // TP
    ep_groups, tp_groups = ep_tp_groups(n, TP)
    e_r = rank // TP
    a2a = {
        r: np.stack(
            [inputs(s, ep)[0][e_r * E_OVER_EP : (e_r + 1) * E_OVER_EP] for s in ep_groups[r % TP]]
        )
        for r in tp_groups[e_r]
    }  # [ep][E/ep][C][H]
    gathered = np.stack([a2a[r].transpose(1, 0, 2, 3) for r in tp_groups[e_r]])  # [tp][E/ep][ep]
    y2 = gathered.transpose(1, 2, 0, 3, 4).reshape(E_OVER_EP, ep * TP * C, H)
    y1 = (y2.astype(np.float32) @ inputs(rank, ep)[1].astype(np.float32)).astype(np.float16)
    return y1, y2


def workspace_elements(ep: int) -> int:
    """FP16 elements of the workspace that Init lays out: AlltoAllV output, AllGather buffers,
    transpose output and batch matmul output, each as large as the source makes it."""
    E, rows_local, rows_non_local = E_OVER_EP * ep, TP * C, (ep - 1) * TP * C_TILE
    buffers = E * C * H + E_OVER_EP * C * H * (TP + ep) + E * C * H * TP
    transpose = E_OVER_EP * max(rows_local, rows_non_local) * H
    return buffers + transpose + E_OVER_EP * max(rows_local, rows_non_local) * M


def main() -> list[str]:
    """One launch on every rank; y1 and y2 against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    ep = n // TP
    if n % TP or ep not in (2, 4, 8, 16, 32):
        why = f"needs ep, tp in 2/4/8/16/32 and {n} ranks = ep * tp"
        return [skip(case, why) for case in ("y1", "y2")]
    ep_group, tp_group = ep_tp_domains(TP)
    x, w = inputs(rank, ep)
    y1, y2 = zeros(E_OVER_EP, ep * TP * C, M), zeros(E_OVER_EP, ep * TP * C, H)
    workspace = zeros(workspace_elements(ep))
    hp.launch(
        allto_all_all_gather_batch_mat_mul,
        on_device(x),
        on_device(w),
        None,
        y1,
        y2,
        None,
        workspace,
        make_tiling(ep, ep_group.name, tp_group.name),
        block_dim=BLOCK_DIM,
        kernel_type="mix_aic_1_2",
        groups={0: ep_group, 1: tp_group},
    )
    y1_ref, y2_ref = reference(rank, n)
    detail = f"ep={ep} tp={TP}"
    return [compare("y1", y1, y1_ref, detail), compare("y2", y2, y2_ref, detail)]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
