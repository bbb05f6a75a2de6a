"""Port of ops-transformer's BatchMatMulReduceScatterAlltoAll (Atlas A3, two domains), call for call.

Source: ops-transformer, ``mc2/batch_mat_mul_reduce_scatter_allto_all/``: the kernel entry
``op_kernel/arch22/batch_mat_mul_reduce_scatter_allto_all.cpp`` (lines 52-78, template
``YShard = 1``: the output is cut along C), the class ``BatchMatMulReduceScatterAlltoAll`` of
``op_kernel/batch_mat_mul_reduce_scatter_allto_all.h`` (``Init`` 252-309, ``InitTilingData``
311-349, ``InitOffset`` 351-458, ``Process`` 482-492, ``NonLocalCommunicationAndCal``
494-587, ``BmmNonLocalCal`` 589-629, ``LocalCommunicationAndCal`` 631-723, ``BmmLocalCal``
725-755, ``OnNonLocalReduceScatterFinished`` 757-779, ``OnLocalReduceScatterFinished``
781-798, ``AddTransposeBeforeAlltoAll`` 800-855, ``AddTranspose`` 857-941, ``AlltoAll``
943-966, ``WaitAllAlltoAll`` 968-975, ``TransposeAroundBMM`` 977-1058), the tiling struct of
``op_kernel/batch_mat_mul_reduce_scatter_allto_all_tiling_struct.h`` (24-72) and the host
tiling ``op_host/op_tiling/batch_matmul_reduce_scatter_all_to_all_tiling.cpp``
(``InitTileInfo`` 160-190, ``CalculateMaxSplitUB`` 192-223, ``MC2SetWorkspaceShard``
706-743, ``CalculateTensorInfo`` 775-826, ``SetHcclTiling`` 828-863).

What runs unchanged: domain 0 is the EP group (AlltoAllV), domain 1 the TP group
(ReduceScatter); ``Init`` + ``SetCcTiling`` with the tilings' addresses on every core, one
``Mc2CcTilingConfig`` filling the init tiling and both cc tilings (``SetGroupName``,
``SetOpType``, ``SetAlgConfig``; the first cc tiling's opType is 8, which the host code
names ``OP_TYPE_ALL_TO_ALL`` but is ``HCCL_CMD_ALLTOALLV``). On the AIV cores only, per
non-local C tile: one ReduceScatter (``ReduceScatter<false>`` committed after the first
tile's batch matmul; every later one ``ReduceScatter<true>`` behind an
``InterHcclGroupSync`` on the last AlltoAllV of the tile before) and ``tileLenE``
``AlltoAllV<false>``, committed once the tile's ReduceScatter was waited for and its output
moved into the AlltoAllV input (``AddTransposeBeforeAlltoAll``, then ``SyncAll<true>``);
the local ReduceScatter (``ReduceScatter<true>`` behind an ``InterHcclGroupSync`` on the
last non-local AlltoAllV) writes this rank's own experts of ``y`` directly, after every
AlltoAllV was waited for (they also write this rank's block of ``y``, from a hole of the
AlltoAllV input that nothing fills). The ``SyncAll<false>`` barriers around the
transposes and the batch matmul (template ``IS_LITE``: the host picks it when
``C / tp <= 640``), the transposes' split of rows over ``aivCoreNum`` cores with their
index arithmetic and Unified Buffer sized pieces, the workspace layout, and ``Finalize``
of both domains on the AIV cores right after the last Wait, without a ``SyncAll``: every
run reports that race as a ``finalize-unordered`` warning (docs/emulator.md, "Scheduling"),
and ``explore=`` finds the schedule in which it hangs. Each ``ReduceScatter<true>`` is
committed at its Prepare, before the batch matmul writes its input: the server cannot
start it before the AlltoAllV it waits for is committed, which is where hccl_py's buffer
race check takes its bytes as pending (docs/sanitizer.md#buffer-races).

Stand-ins: FP16, no bias (template ``IsBias = false``, so ``AddTranspose`` is a copy),
weight not transposed; the batch matmul (``Mc2BatchMatMulCommonKernel``) is a torch matmul
on the AIC cores, each core a share of the experts, and the four ``BMM_Mc2MatmulTilingData``
members are left out of the tiling struct; of ``BmmNonLocalCal`` and ``BmmLocalCal`` only
the ``IS_LITE`` branch is ported (the other, for ``C / tp > 640``, multiplies block by
block straight from x into the ReduceScatter input); the C cut (``domesticTileC``: two tiles of 2
rows and a tail of 1) is fixed here rather than computed by the formulaic tiling; the
Unified Buffer size is the A3 vector core's 192 KiB; the queues and ``pipe->Reset`` that
only manage Unified Buffer are left out, and each piece is copied straight from GM to GM;
the workspace handed to the kernel is the user workspace (no ``GetUserWorkspace``).

Run: ``python samples/mc2_batch_mat_mul_reduce_scatter_allto_all.py`` (4 emulated ranks:
ep = tp = 2), ``python -m hccl_py run -n 8 samples/mc2_batch_mat_mul_reduce_scatter_allto_all.py``
(ep = 4), ``python -m hccl_py run -n 4 --backend gloo
samples/mc2_batch_mat_mul_reduce_scatter_allto_all.py``.
"""

from ctypes import Structure, c_bool, c_uint32, c_uint64

import numpy as np
from _common import compare, on_device, random_ints, run_sample, skip, zeros
from _mc2 import (
    SIZEOF_HALF,
    BMM_TileInfo,
    batch_matmul,
    data_copy,
    ep_tp_domains,
    ep_tp_groups,
    member_addresses,
    set_ep_tp_hccl_tiling,
    tile_info,
)
from _mc2 import typed_fields as _fields

import hccl_py as hp
from hccl_py import (
    AIC,
    AIV,
    HCCL_CMD_REDUCE_SCATTER,
    HCCL_DATA_TYPE_FP16,
    HCCL_REDUCE_SUM,
    Hccl,
    Mc2CcTiling,
    Mc2InitTiling,
    TilingData,
)

PLATFORM = "A3"  # the kernel's AlltoAllV and InterHcclGroupSync exist on A3 only
TP = 2  # tp_world_size (its ep_world_size is the world size // TP)
E_OVER_EP, C, M, H = 2, 5, 8, 16  # experts per EP rank, C/tp, M/tp (the bmm's K), H (its N)
C_TILE = 2  # domesticTileC: tiles of 2 rows of C/tp, then a tail of 1 row
BLOCK_DIM = 2  # KERNEL_TYPE_MIX_AIC_1_2: 2 AIC + 4 AIV cores
UB_SIZE = 192 * 1024  # GetCoreMemSize(UB) of an A3 vector core
LITE_THRESHOLD = 640  # the host's: C/tp at most this (and YShard 1) -> template IS_LITE
dataLen = SIZEOF_HALF
MIN = min
IS_LITE = C <= LITE_THRESHOLD  # the template this port instantiates: YShard 1, no bias, lite
ALIGN16 = SIXTEEN_ALIGN = 16


class Mc2RSATATiling(Structure):
    """optiling::Mc2RSATATiling, member for member."""

    _fields_ = [
        *_fields(c_uint32, "epGroupSize", "tpGroupSize"),
        *_fields(c_uint64, "expert", "EOverEp", "C", "COverTp", "H", "HOverTp", "MOverTp"),
        *_fields(c_uint32, "aivCoreNum", "inputDatasize", "biasDatasize"),
        *_fields(c_uint64, "ubCapacityForAdd", "totalUbSize"),
        *_fields(c_bool, "isBias", "isWeightTrans"),
        *_fields(BMM_TileInfo, "localTileE", "domesticTileE", "localTileC", "domesticTileC"),
        ("yShardFlag", c_uint32),
    ]


class BatchMatMulReduceScatterAlltoAllTilingData(TilingData):
    """The tiling struct without its four BMM_Mc2MatmulTilingData members (the bmm is torch)."""

    _fields_ = [
        ("hcclInitTiling", Mc2InitTiling),
        ("alltoAllCcTiling", Mc2CcTiling),
        ("reduceScatterCcTiling", Mc2CcTiling),
        ("commonTiling", Mc2RSATATiling),
    ]


class BatchMatMulReduceScatterAlltoAll:
    """``BatchMatMulReduceScatterAlltoAll<BMMRSATAType<half, half, false, 1, false, true>>``."""

    def Init(
        self,
        x,
        weight,
        bias,
        y,
        workspace,
        tiling,
        hcclInitTiling,
        reduceScatterCcTiling,
        alltoAllCcTiling,
    ):
        self.tmpBlockIdx = hp.GetBlockIdx()  # for the split of rows over the AIV cores
        self.tilingData = tiling
        self.InitTilingData()

        # HCCL, on every core (the AIC cores need epRankId too)
        self.hcclAlltoAll, self.hcclReduceScatter = Hccl(), Hccl()
        contextGM0 = hp.GetHcclContext(0)  # HCCL_GROUP_ID_0
        contextGM1 = hp.GetHcclContext(1)
        self.hcclAlltoAll.Init(contextGM0, hcclInitTiling)
        self.hcclAlltoAll.SetCcTiling(alltoAllCcTiling)
        self.hcclReduceScatter.Init(contextGM1, hcclInitTiling)
        self.hcclReduceScatter.SetCcTiling(reduceScatterCcTiling)
        self.epRankId = self.hcclAlltoAll.GetRankId()
        self.InitOffset()

        self.xGM, self.weightGM, self.yGM = x, weight, y
        E_ep, C_tp, H, tp, ep = self.E_ep, self.C_tp, self.H, self.tpRankSize, self.epRankSize
        # IS_LITE: the transposes around the batch matmul go through two more buffers
        localC, nonLocalC = self.localC, self.nonLocalC
        localE, nonLocalE = self.localE, self.nonLocalE
        localMaxCBlock = max(localC.tileLen, localC.tailLen) * localE.tileLen * tp
        nonLocalMaxCBlock = max(nonLocalC.tileLen, nonLocalC.tailLen) * nonLocalE.tileLen * tp
        nonLocalMaxCBlock *= ep - 1
        localTransBefore, nonLocalTransBefore = (
            localMaxCBlock * self.M_tp,
            nonLocalMaxCBlock * self.M_tp,
        )
        localTransAfter, nonLocalTransAfter = localMaxCBlock * H, nonLocalMaxCBlock * H
        self.transBeforeBMMGM = workspace
        self.sharedBMMOutGM = self.transBeforeBMMGM + dataLen * max(
            localTransBefore, nonLocalTransBefore
        )
        self.localMMOutGM = self.sharedBMMOutGM + dataLen * max(localTransAfter, nonLocalTransAfter)
        self.nonLocalMMOutGM = self.localMMOutGM + dataLen * (tp * E_ep * C_tp * H)
        self.reduceScatterLocalOut = self.nonLocalMMOutGM + dataLen * (
            tp * (ep - 1) * E_ep * C_tp * H
        )
        self.reduceScatterNonLocalOut = self.reduceScatterLocalOut + dataLen * (E_ep * C_tp * H)
        self.transposeOutGM = self.reduceScatterNonLocalOut + dataLen * ((ep - 1) * E_ep * C_tp * H)

        self.rsDoneCnt = self.allToAllDoneCnt = 0
        self.reduceScatterHandleList = [0] * 32  # MAX_HCCL_HANDLE
        self.alltoallList = [0] * 32

    def InitTilingData(self):
        common = self.tilingData.commonTiling
        self.E_ep, self.C_tp, self.H, self.M_tp = (
            common.EOverEp,
            common.COverTp,
            common.H,
            common.MOverTp,
        )
        self.alignedH = (self.H + SIXTEEN_ALIGN - 1) // SIXTEEN_ALIGN * SIXTEEN_ALIGN
        self.epRankSize, self.tpRankSize = common.epGroupSize, common.tpGroupSize
        self.aivNum = common.aivCoreNum
        self.ubCapacity, self.ubSize = common.ubCapacityForAdd, common.totalUbSize
        self.localE, self.localC = common.localTileE, common.localTileC
        self.nonLocalE, self.nonLocalC = common.domesticTileE, common.domesticTileC
        self.hcclDataType = HCCL_DATA_TYPE_FP16

    def InitOffset(self):
        """The element offsets and strides of the source's InitOffset (as it names them)."""
        ep, tp, H, M_tp, C_tp = self.epRankSize, self.tpRankSize, self.H, self.M_tp, self.C_tp
        localE, localC, nonLocalE, nonLocalC = (
            self.localE,
            self.localC,
            self.nonLocalE,
            self.nonLocalC,
        )
        self.nonLocalCCnt = nonLocalC.tileCnt + nonLocalC.tailCnt
        self.localCCnt = localC.tileCnt + localC.tailCnt
        self.nonLocalRSoffset = nonLocalE.tileCnt * self.nonLocalCCnt
        # common to local and non-local
        self.aTpBlock = C_tp * M_tp
        self.aEpBlock = tp * self.aTpBlock
        self.aTileEBlock = ep * self.aEpBlock
        self.bTileEBlock = H * M_tp
        # local batch matmul and ReduceScatter
        self.aLocalECntBlock = localE.tileLen * self.aTileEBlock
        self.aLocalCCntBlock = localC.tileLen * M_tp
        self.aLocalCTileOffset = localC.tileCnt * self.aLocalCCntBlock
        self.aLocalCTailBlock = localC.tailLen * M_tp
        self.bLocalECntBlock = localE.tileLen * self.bTileEBlock
        localRSCommonBlock = localE.tileLen * H
        self.localRSECntBlock = C_tp * localRSCommonBlock
        self.cLocalECntBlock = tp * self.localRSECntBlock
        self.cLocalTileEBlock = localC.tileLen * H
        self.cLocalTpBlock = localE.tileLen * self.cLocalTileEBlock
        self.cLocalCCntBlock = tp * self.cLocalTpBlock
        self.cLocalCTileOffset = localC.tileCnt * self.cLocalCCntBlock
        self.cLocalTileECTailBlock = localC.tailLen * H
        self.cLocalTpCTailBlock = localE.tileLen * self.cLocalTileECTailBlock
        self.cLocalCTailBlock = tp * self.cLocalTpCTailBlock
        # non-local batch matmul
        self.aNonLocalECntBlock = nonLocalE.tileLen * self.aTileEBlock
        self.aNonLocalCCntBlock = nonLocalC.tileLen * M_tp
        self.aNonLocalCTileOffset = nonLocalC.tileCnt * self.aNonLocalCCntBlock
        self.aNonLocalCTailBlock = nonLocalC.tailLen * M_tp
        self.bNonLocalECntBlock = nonLocalE.tileLen * self.bTileEBlock
        nonLocalRSCommonBlock = (ep - 1) * nonLocalE.tileLen * H
        self.nonLocalRSECntBlock = C_tp * nonLocalRSCommonBlock
        self.cNonLocalECntBlock = tp * self.nonLocalRSECntBlock
        self.cNonLocalTileEBlock = nonLocalC.tileLen * H
        self.cNonLocalEpBlock = nonLocalE.tileLen * self.cNonLocalTileEBlock
        self.cNonLocalTpBlock = (ep - 1) * self.cNonLocalEpBlock
        self.cNonLocalCCntBlock = tp * self.cNonLocalTpBlock
        self.cNonLocalCTileOffset = nonLocalC.tileCnt * self.cNonLocalCCntBlock
        self.cNonLocalTileECTailBlock = nonLocalC.tailLen * H
        self.cNonLocalEpCTailBlock = nonLocalE.tileLen * self.cNonLocalTileECTailBlock
        self.cNonLocalTpCTailBlock = (ep - 1) * self.cNonLocalEpCTailBlock
        self.cNonLocalCTailBlock = tp * self.cNonLocalTpCTailBlock
        # ReduceScatter
        self.LocalRSRecvCount = self.cLocalTpBlock
        self.LocalRSRecvTailCount = self.cLocalTpCTailBlock
        self.nonLocalRSRecvCount = self.cNonLocalTpBlock
        self.nonLocalRSRecvTailCount = self.cNonLocalTpCTailBlock
        self.localRSCCntBlock = localC.tileLen * localRSCommonBlock
        self.localRSCTileOffset = localC.tileCnt * self.localRSCCntBlock
        self.localRSCTailBlock = localC.tailLen * localRSCommonBlock
        self.nonLocalRSCCntBlock = nonLocalC.tileLen * nonLocalRSCommonBlock
        self.nonLocalRSCTileOffset = nonLocalC.tileCnt * self.nonLocalRSCCntBlock
        self.nonLocalRSCTailBlock = nonLocalC.tailLen * nonLocalRSCommonBlock
        # non-local transpose before the AlltoAllV
        nonLocalTransCommonBlock = ep * nonLocalE.tileLen * H
        self.nonLocalTransECntBlock = C_tp * nonLocalTransCommonBlock
        self.nonLocalTransCCntBlock = nonLocalC.tileLen * nonLocalTransCommonBlock
        self.nonLocalTransCTileOffset = nonLocalC.tileCnt * self.nonLocalTransCCntBlock
        self.nonLocalTransCTailBlock = nonLocalC.tailLen * nonLocalTransCommonBlock
        # bias and y
        self.nonLocalBiasECntBlock = nonLocalE.tileLen * H
        self.nonLocalYOutECntBlock = C_tp * self.nonLocalBiasECntBlock
        self.nonLocalYOutCCntBlock = nonLocalC.tileLen * H
        self.nonLocalYOutCTailBlock = nonLocalC.tailLen * H
        self.nonLocalYOutCTileOffset = nonLocalC.tileCnt * self.nonLocalYOutCCntBlock
        self.localBiasECntBlock = localE.tileLen * H
        self.localYOutEpOffset = self.epRankId * self.E_ep * C_tp * H
        self.localYOutTileCOffset = localC.tileCnt * self.cLocalTileEBlock
        # rows of the transposes before the AlltoAllV, split over the AIV cores
        rows = {
            "NonLocalTile": (ep - 1) * nonLocalE.tileLen * nonLocalC.tileLen,
            "NonLocalTail": (ep - 1) * nonLocalE.tileLen * nonLocalC.tailLen,
            "LocalTile": localE.tileLen * localC.tileLen,
            "LocalTail": localE.tileLen * localC.tailLen,
        }
        self.start, self.end = {}, {}
        for name, maxRows in rows.items():
            rowsPerCore = (maxRows + self.aivNum - 1) // self.aivNum
            self.start[name] = self.tmpBlockIdx * rowsPerCore  # a row; times H, its offset
            self.end[name] = MIN(H * (self.tmpBlockIdx + 1) * rowsPerCore, maxRows * H)
        self.rowsPerLoop = self.ubCapacity // self.alignedH
        # non-local AlltoAllV
        self.alltoallInTileEBlock = nonLocalC.tileLen * H
        self.alltoallInTileECTailBlock = nonLocalC.tailLen * H
        self.alltoallSendCount = self.alltoallInTileEBlock
        self.alltoallSendTailCount = self.alltoallInTileECTailBlock
        self.alltoallSendStride = nonLocalE.tileLen * self.alltoallInTileEBlock
        self.alltoallSendTailStride = nonLocalE.tileLen * self.alltoallInTileECTailBlock
        self.alltoallOutTileEBlock = C_tp * H
        self.alltoallRecvStride = nonLocalE.tileCnt * nonLocalE.tileLen * self.alltoallOutTileEBlock

    def Process(self):
        self.NonLocalCommunicationAndCal()
        self.LocalCommunicationAndCal()
        if hp.g_coreType == AIV:
            self.hcclReduceScatter.Finalize()
            self.hcclAlltoAll.Finalize()

    def NonLocalCommunicationAndCal(self):
        nonLocalE, nonLocalC = self.nonLocalE, self.nonLocalC
        isAiv = hp.g_coreType == AIV
        for eIdx in range(nonLocalE.tileCnt):
            aCalcOffset = eIdx * self.aNonLocalECntBlock
            bCalcOffset = eIdx * self.bNonLocalECntBlock
            cCalcOffset = eIdx * self.cNonLocalECntBlock
            reduceScatterOutOffset = eIdx * self.nonLocalRSECntBlock
            rsEIdx = eIdx * self.nonLocalCCnt
            transOutEOffset = eIdx * self.nonLocalTransECntBlock
            yOutEOffset = eIdx * self.nonLocalYOutECntBlock
            for cIdx in range(self.nonLocalCCnt):
                isCTail = cIdx >= nonLocalC.tileCnt
                aAddrCOffset = aCalcOffset + cIdx * self.aNonLocalCCntBlock
                cAddrCOffset = cCalcOffset + cIdx * self.cNonLocalCCntBlock
                reduceScatterOutCOffset = reduceScatterOutOffset + cIdx * self.nonLocalRSCCntBlock
                transOutOffset = transOutEOffset + cIdx * self.nonLocalTransCCntBlock
                yOutOffset = yOutEOffset + cIdx * self.nonLocalYOutCCntBlock
                if isCTail:
                    tailCIdx = cIdx - nonLocalC.tileCnt
                    aAddrCOffset = (
                        aCalcOffset
                        + tailCIdx * self.aNonLocalCTailBlock
                        + self.aNonLocalCTileOffset
                    )
                    cAddrCOffset = (
                        cCalcOffset
                        + tailCIdx * self.cNonLocalCTailBlock
                        + self.cNonLocalCTileOffset
                    )
                    reduceScatterOutCOffset = (
                        reduceScatterOutOffset
                        + tailCIdx * self.nonLocalRSCTailBlock
                        + self.nonLocalRSCTileOffset
                    )
                    transOutOffset = (
                        transOutEOffset
                        + tailCIdx * self.nonLocalTransCTailBlock
                        + self.nonLocalTransCTileOffset
                    )
                    yOutOffset = (
                        yOutEOffset
                        + tailCIdx * self.nonLocalYOutCTailBlock
                        + self.nonLocalYOutCTileOffset
                    )
                reduceScatterInOffset = cAddrCOffset

                if isAiv:  # ReduceScatter prepare
                    recvCount = (
                        self.nonLocalRSRecvTailCount if isCTail else self.nonLocalRSRecvCount
                    )
                    sendBuf = self.nonLocalMMOutGM + reduceScatterInOffset * dataLen
                    recvBuf = self.reduceScatterNonLocalOut + reduceScatterOutCOffset * dataLen
                    if eIdx + cIdx == 0:
                        self.PrepareReduceScatter(False, rsEIdx + cIdx, sendBuf, recvBuf, recvCount)
                    else:
                        self.hcclReduceScatter.InterHcclGroupSync(
                            0, self.alltoallList[(self.rsDoneCnt + 1) * nonLocalE.tileLen - 1]
                        )  # HCCL_GROUP_ID_0
                        self.PrepareReduceScatter(True, rsEIdx + cIdx, sendBuf, recvBuf, recvCount)

                if isAiv:  # AlltoAllV prepare
                    self.AlltoAll(transOutOffset, yOutOffset, isCTail, rsEIdx + cIdx)

                self.AroundBmm(False, isCTail, aAddrCOffset, bCalcOffset, cAddrCOffset)

                if isAiv:
                    if eIdx + cIdx == 0:  # the first ReduceScatter goes out
                        self.hcclReduceScatter.Commit(self.reduceScatterHandleList[rsEIdx + cIdx])
                    else:  # wait for the one before: add, transpose, AlltoAllV
                        self.hcclReduceScatter.Wait(self.reduceScatterHandleList[self.rsDoneCnt])
                        self.OnNonLocalReduceScatterFinished()
                        self.rsDoneCnt += 1

    def PrepareReduceScatter(self, commit, index, sendBuf, recvBuf, recvCount):
        """``reduceScatterHandleList[index] = ReduceScatter<commit>(...)``: SUM, one round."""
        self.reduceScatterHandleList[index] = self.hcclReduceScatter.ReduceScatter[commit](
            sendBuf, recvBuf, recvCount, self.hcclDataType, HCCL_REDUCE_SUM, 0, 1
        )

    def AroundBmm(self, isLocal, isCTail, aAddrCOffset, bCalcOffset, cAddrCOffset):
        """IS_LITE: transpose x in, the batch matmul, transpose its output out, with the
        source's ``SyncAll<false>`` after each (its ``AllocBuf`` only sets up Unified Buffer)."""
        if hp.g_coreType == AIV:
            self.TransposeAroundBMM(aAddrCOffset, isLocal, isCTail, True)
        hp.SyncAll[False]()  # the AIC cores wait for the AIV transposes
        if hp.g_coreType == AIC:
            self.Bmm(isLocal, isCTail, bCalcOffset)
        hp.SyncAll[False]()  # wait for the batch matmul
        if hp.g_coreType == AIV:
            self.TransposeAroundBMM(cAddrCOffset, isLocal, isCTail, False)
        hp.SyncAll[False]()

    def Bmm(self, isLocal, isCTail, bCalcAddr):
        """BmmNonLocalCal / BmmLocalCal, IS_LITE: one batch matmul of the transposed tile."""
        if isLocal:
            tileLenE, factor = self.localE.tileLen, self.tpRankSize
            tileLenC = self.localC.tailLen if isCTail else self.localC.tileLen
        else:
            tileLenE, factor = self.nonLocalE.tileLen, self.tpRankSize * (self.epRankSize - 1)
            tileLenC = self.nonLocalC.tailLen if isCTail else self.nonLocalC.tileLen
        batch_matmul(
            self.transBeforeBMMGM,
            self.weightGM + bCalcAddr * dataLen,
            self.sharedBMMOutGM,
            tileLenE,
            tileLenC * factor,
            self.M_tp,
            self.H,
        )

    def LocalCommunicationAndCal(self):
        localE, localC, nonLocalE = self.localE, self.localC, self.nonLocalE
        isAiv = hp.g_coreType == AIV
        aCalcOffset = 0  # IS_LITE: TransposeAroundBMM finds the local block itself
        for eIdx in range(localE.tileCnt):
            aAddrEOffset = aCalcOffset + eIdx * self.aLocalECntBlock
            bCalcOffset = eIdx * self.bLocalECntBlock
            cCalcOffset = eIdx * self.cLocalECntBlock
            reduceScatterOut = eIdx * self.localRSECntBlock
            rsEIdx = self.nonLocalRSoffset + eIdx * self.localCCnt
            for cIdx in range(self.localCCnt):
                isCTail = cIdx >= localC.tileCnt
                aAddrCOffset = aAddrEOffset + cIdx * self.aLocalCCntBlock
                cAddrCOffset = cCalcOffset + cIdx * self.cLocalCCntBlock
                reduceScatterOutCOffset = reduceScatterOut + cIdx * self.localRSCCntBlock
                if isCTail:  # the local C is never cut (the source says so too)
                    tailCIdx = cIdx - localC.tileCnt
                    aAddrCOffset = (
                        aAddrEOffset + tailCIdx * self.aLocalCTailBlock + self.aLocalCTileOffset
                    )
                    cAddrCOffset = (
                        cCalcOffset + tailCIdx * self.cLocalCTailBlock + self.cLocalCTileOffset
                    )
                    reduceScatterOutCOffset = (
                        reduceScatterOut + cIdx * self.localRSCTailBlock + self.localRSCTileOffset
                    )
                reduceScatterInOffset = cAddrCOffset

                if isAiv:  # ReduceScatter prepare
                    recvCount = self.LocalRSRecvTailCount if isCTail else self.LocalRSRecvCount
                    sendBuf = self.localMMOutGM + reduceScatterInOffset * dataLen
                    recvBuf = self.reduceScatterLocalOut + reduceScatterOutCOffset * dataLen
                    if eIdx + cIdx == 0:
                        self.hcclReduceScatter.InterHcclGroupSync(
                            0, self.alltoallList[(self.rsDoneCnt + 1) * nonLocalE.tileLen - 1]
                        )  # HCCL_GROUP_ID_0
                        self.PrepareReduceScatter(True, rsEIdx + cIdx, sendBuf, recvBuf, recvCount)
                    else:
                        self.PrepareReduceScatter(False, rsEIdx + cIdx, sendBuf, recvBuf, recvCount)

                self.AroundBmm(True, isCTail, aAddrCOffset, bCalcOffset, cAddrCOffset)

                if isAiv:
                    if eIdx + cIdx != 0:  # this tile's ReduceScatter goes out
                        self.hcclReduceScatter.Commit(self.reduceScatterHandleList[rsEIdx + cIdx])
                    # wait for the one before
                    self.hcclReduceScatter.Wait(self.reduceScatterHandleList[self.rsDoneCnt])
                    if eIdx + cIdx == 0:  # the last non-local ReduceScatter
                        self.OnNonLocalReduceScatterFinished()
                    else:
                        if eIdx + cIdx == 1:  # every AlltoAllV before the first local y rows
                            self.WaitAllAlltoAll()
                        self.OnLocalReduceScatterFinished()
                    self.rsDoneCnt += 1
        if isAiv:
            self.WaitAllAlltoAll()  # with one local tile, the AlltoAllVs are waited for here
            self.hcclReduceScatter.Wait(self.reduceScatterHandleList[self.rsDoneCnt])
            self.OnLocalReduceScatterFinished()  # the last local ReduceScatter

    def OnNonLocalReduceScatterFinished(self):
        isCTail = False
        eIdx, cIdx = divmod(self.rsDoneCnt, self.nonLocalCCnt)
        transInEOffset = eIdx * self.nonLocalRSECntBlock
        transOutEOffset = eIdx * self.nonLocalTransECntBlock
        transInOffset = transInEOffset + cIdx * self.nonLocalRSCCntBlock
        transOutOffset = transOutEOffset + cIdx * self.nonLocalTransCCntBlock
        if cIdx >= self.nonLocalC.tileCnt:
            isCTail = True
            tailCIdx = cIdx - self.nonLocalC.tileCnt
            transInOffset = transInEOffset + tailCIdx * self.nonLocalRSCTailBlock
            transInOffset += self.nonLocalRSCTileOffset
            transOutOffset = transOutEOffset + tailCIdx * self.nonLocalTransCTailBlock
            transOutOffset += self.nonLocalTransCTileOffset
        self.AddTransposeBeforeAlltoAll(
            False, isCTail, eIdx * self.nonLocalBiasECntBlock, transInOffset, transOutOffset
        )
        hp.SyncAll[True]()  # the AIV cores
        for k in range(self.nonLocalE.tileLen):  # the AlltoAllVs go out
            self.hcclAlltoAll.Commit(self.alltoallList[self.rsDoneCnt * self.nonLocalE.tileLen + k])

    def OnLocalReduceScatterFinished(self):
        isCTail = False
        eIdx, cIdx = divmod(self.rsDoneCnt - self.nonLocalRSoffset, self.localCCnt)
        transInEOffset = eIdx * self.localRSECntBlock
        transOutEOffset = eIdx * self.localRSECntBlock + self.localYOutEpOffset
        transInOffset = transInEOffset + cIdx * self.localRSCCntBlock
        transOutOffset = transOutEOffset + cIdx * self.cLocalTileEBlock
        if cIdx >= self.localC.tileCnt:
            isCTail = True
            tailCIdx = cIdx - self.localC.tileCnt
            transInOffset = (
                transInEOffset + tailCIdx * self.localRSCTailBlock + self.localRSCTileOffset
            )
            transOutOffset = (
                transOutEOffset + tailCIdx * self.cLocalTileECTailBlock + self.localYOutTileCOffset
            )
        self.AddTransposeBeforeAlltoAll(
            True, isCTail, eIdx * self.localBiasECntBlock, transInOffset, transOutOffset
        )

    def AddTransposeBeforeAlltoAll(self, isLocal, isCTail, biasOffset, rsOutGM, transOutOffset):
        """Copy this core's rows of a ReduceScatter output out, leaving a hole at this rank's
        own block (non-local) or into y (local), in pieces of at most ``rowsPerLoop`` rows that
        end at a C block's end, as the source cuts them (the last piece may run past the
        core's rows into the next core's: both cores copy the same bytes)."""
        H = self.H
        if isLocal:
            cLength = self.localC.tailLen if isCTail else self.localC.tileLen
            eLength = self.localE.tileLen
            name = "LocalTail" if isCTail else "LocalTile"
        else:
            eLength = self.nonLocalE.tileLen
            cLength = self.nonLocalC.tailLen if isCTail else self.nonLocalC.tileLen
            name = "NonLocalTail" if isCTail else "NonLocalTile"
        startRow = self.start[name]
        startDataOffset, endDataOffset = H * startRow, self.end[name]
        curDataOffset, curRow = startDataOffset, startRow
        curBlockMaxRow = (curRow // cLength + 1) * cLength
        while curDataOffset < endDataOffset:
            transOutTmpOffset = transOutOffset
            curEpIdx = curRow // (eLength * cLength)
            if not isLocal and curEpIdx >= self.epRankId:  # skip the local block
                transOutTmpOffset += cLength * self.nonLocalBiasECntBlock
            curTileEIdx = curRow % (eLength * cLength) // cLength
            if self.rowsPerLoop == 0:  # H too large: pieces of a row
                if (curRow + 1) * H - curDataOffset > self.ubCapacity:
                    dataCnt = self.ubCapacity
                else:
                    dataCnt = (curRow + 1) * H - curDataOffset
                    curRow += 1
            elif curBlockMaxRow * H - curDataOffset > self.rowsPerLoop * H:
                dataCnt = self.rowsPerLoop * H
                curRow += self.rowsPerLoop
            else:  # up to the end of the C block
                dataCnt = curBlockMaxRow * H - curDataOffset
                curBlockMaxRow += cLength
                curRow += (dataCnt + H - 1) // H
            self.AddTranspose(
                rsOutGM + curDataOffset,
                biasOffset + curTileEIdx * H + (curDataOffset - startDataOffset) % H,
                transOutTmpOffset + curDataOffset,
                dataCnt,
                isLocal,
            )
            curDataOffset += dataCnt

    def AddTranspose(self, rsOutOffset, biasOffset, transOutOffset, dataCnt, isLocal):
        """No bias: DataCopyPad of ``dataCnt`` elements in and out (through GM here)."""
        rsOutStartGM = self.reduceScatterLocalOut if isLocal else self.reduceScatterNonLocalOut
        transOutGM = self.yGM if isLocal else self.transposeOutGM
        data_copy(
            transOutGM + transOutOffset * dataLen, rsOutStartGM + rsOutOffset * dataLen, dataCnt
        )

    def AlltoAll(self, alltoallInOffset, alltoallOutOffset, isCTail, loop):
        alltoallInTmp, alltoallOutTmp = alltoallInOffset, alltoallOutOffset
        ep = self.epRankSize
        count = self.alltoallSendTailCount if isCTail else self.alltoallSendCount
        stride = self.alltoallSendTailStride if isCTail else self.alltoallSendStride
        alltoallVSendCount = [count] * ep
        alltoallVSendStride = [i * stride for i in range(ep)]
        alltoallVRecvStride = [i * self.alltoallRecvStride for i in range(ep)]
        # each ReduceScatter tile has nonLocalE.tileLen AlltoAllVs
        for k in range(self.nonLocalE.tileLen):
            self.alltoallList[loop * self.nonLocalE.tileLen + k] = self.hcclAlltoAll.AlltoAllV[
                False
            ](
                self.transposeOutGM + alltoallInTmp * dataLen,
                alltoallVSendCount,
                alltoallVSendStride,
                self.hcclDataType,
                self.yGM + alltoallOutTmp * dataLen,
                alltoallVSendCount,
                alltoallVRecvStride,
                self.hcclDataType,
                1,
            )
            alltoallInTmp += (
                self.alltoallInTileECTailBlock if isCTail else self.alltoallInTileEBlock
            )
            alltoallOutTmp += self.alltoallOutTileEBlock

    def WaitAllAlltoAll(self):
        while self.allToAllDoneCnt < self.nonLocalRSoffset * self.nonLocalE.tileLen:
            self.hcclAlltoAll.Wait(self.alltoallList[self.allToAllDoneCnt])
            self.allToAllDoneCnt += 1

    def TransposeAroundBMM(self, dataCopyInOffset, isLocal, isCTail, isBefore):
        """IS_LITE: x rows [k][e][t][c] -> the batch matmul's input (isBefore), or its output
        [k][e][t][c] -> [t][e][k][c] of the ReduceScatter input; this core's rows, in pieces
        that end at a C block's end or at the core's last row."""
        tp, H = self.tpRankSize, self.H
        col = self.M_tp if isBefore else H
        if isLocal:
            tileLenC = self.localC.tailLen if isCTail else self.localC.tileLen
            tileLenE, factorOut = self.localE.tileLen, 1
        else:
            tileLenC = self.nonLocalC.tailLen if isCTail else self.nonLocalC.tileLen
            tileLenE, factorOut = self.nonLocalE.tileLen, self.epRankSize - 1
        totalM = tp * tileLenE * factorOut * tileLenC
        tileLen = (totalM + self.aivNum - 1) // self.aivNum
        curRow = tileLen * self.tmpBlockIdx
        curDataOffset = curRow * col
        endDataOffset = MIN(tileLen * col * (self.tmpBlockIdx + 1), totalM * col)
        endRow = MIN(tileLen * (self.tmpBlockIdx + 1), totalM)
        curBlockMaxRow = MIN((curRow // tileLenC + 1) * tileLenC, endRow)
        transUbCapacity = self.ubSize // dataLen
        perMaxRow = transUbCapacity // col
        while curDataOffset < endDataOffset:
            k = curRow // (tp * factorOut * tileLenC)
            t = curRow % (tp * tileLenC) // tileLenC
            blockInnerOffset = curDataOffset % (tileLenC * col)
            eOut = curRow % (tp * factorOut * tileLenC) // (tp * tileLenC)
            eIn = eOut + 1 if eOut >= self.epRankId else eOut  # only the transpose before uses it
            eIn = self.epRankId if isLocal else eIn
            if not isBefore and isLocal:
                eOut = 0
            if perMaxRow == 0:  # col too large: pieces of a row
                if (curRow + 1) * col - curDataOffset > transUbCapacity:
                    dataCnt = transUbCapacity
                else:
                    dataCnt = (curRow + 1) * col - curDataOffset
                    curRow += 1
            else:
                if curBlockMaxRow * col - curDataOffset > perMaxRow * col:
                    dataCnt = perMaxRow * col
                else:
                    dataCnt = curBlockMaxRow * col - curDataOffset
                    curBlockMaxRow = MIN(curBlockMaxRow + tileLenC, endRow)
                curRow += dataCnt // col
            if isBefore:
                dataCopyInGM = self.xGM
                inOffset = dataCopyInOffset + k * self.aTileEBlock + eIn * self.aEpBlock
                inOffset += t * self.aTpBlock + blockInnerOffset
                dataCopyOutGM, outOffset = self.transBeforeBMMGM, curDataOffset
            else:
                dataCopyInGM, inOffset = self.sharedBMMOutGM, curDataOffset
                dataCopyOutGM = self.localMMOutGM if isLocal else self.nonLocalMMOutGM
                outOffset = (
                    dataCopyInOffset
                    + t * (tileLenE * factorOut * tileLenC * H)
                    + eOut * (tileLenE * tileLenC * H)
                    + k * (tileLenC * H)
                    + blockInnerOffset
                )
            data_copy(
                dataCopyOutGM + outOffset * dataLen, dataCopyInGM + inOffset * dataLen, dataCnt
            )
            curDataOffset += dataCnt


def batch_mat_mul_reduce_scatter_allto_all(xGM, weightGM, biasGM, yGM, workspaceGM, tilingGM):
    """The kernel entry, template ``YShard = 1``: the tilings' addresses, Init, Process."""
    if not IS_LITE:  # the host's tiling key would pick the other template
        raise NotImplementedError("only the lite template (C/tp <= 640) is ported")
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(
        BatchMatMulReduceScatterAlltoAllTilingData, tilingGM
    )
    hcclInitTiling, reduceScatterCcTiling, alltoAllCcTiling = member_addresses(
        tilingGM,
        BatchMatMulReduceScatterAlltoAllTilingData,
        "hcclInitTiling",
        "reduceScatterCcTiling",
        "alltoAllCcTiling",
    )
    op = BatchMatMulReduceScatterAlltoAll()
    op.Init(
        xGM,
        weightGM,
        biasGM,
        yGM,
        workspaceGM,
        tilingData,
        hcclInitTiling,
        reduceScatterCcTiling,
        alltoAllCcTiling,
    )
    op.Process()


def make_tiling(ep: int, epGroup: str, tpGroup: str) -> BatchMatMulReduceScatterAlltoAllTilingData:
    """Host side: the common tiling (InitTileInfo, then the non-local C cut), the Unified
    Buffer share of the transposes (CalculateMaxSplitUB) and SetHcclTiling."""
    tiling = BatchMatMulReduceScatterAlltoAllTilingData()
    common = tiling.commonTiling
    common.COverTp, common.C, common.epGroupSize, common.tpGroupSize = C, C * TP, ep, TP
    common.expert, common.EOverEp = E_OVER_EP * ep, E_OVER_EP
    common.H, common.HOverTp, common.MOverTp, common.yShardFlag = H, H // TP, M, 1
    common.inputDatasize = common.biasDatasize = SIZEOF_HALF
    common.aivCoreNum, common.totalUbSize = 2 * BLOCK_DIM, UB_SIZE
    # InitTileInfo (YShard 1): every E and C uncut
    common.localTileC = common.domesticTileC = tile_info(1, C)
    common.localTileE = common.domesticTileE = tile_info(1, E_OVER_EP)
    tile_cnt, tail = divmod(C, C_TILE)  # the formulaic tiling's cut of the non-local C
    common.domesticTileC = tile_info(tile_cnt, C_TILE, int(tail > 0), tail)
    # CalculateMaxSplitUB: no bias, no casts -> the add's left operand only (2 bytes)
    common.ubCapacityForAdd = UB_SIZE // 2 // ALIGN16 * ALIGN16

    set_ep_tp_hccl_tiling(
        tiling.hcclInitTiling,
        tiling.alltoAllCcTiling,
        tiling.reduceScatterCcTiling,
        epGroup,
        tpGroup,
        HCCL_CMD_REDUCE_SCATTER,
        "ReduceScatter=level0:doublering",
    )
    return tiling


def workspace_elements(ep: int) -> int:
    """FP16 elements of MC2SetWorkspaceShard (IS_LITE) less its 16 MiB: the batch matmul
    outputs, ReduceScatter outputs, AlltoAllV input and the lite transposes' buffers."""
    E = E_OVER_EP * ep
    commOut = 2 * E * C * H + E * C * TP * H
    localMaxCBlock = C * E_OVER_EP * TP
    nonLocalMaxCBlock = C_TILE * E_OVER_EP * TP * (ep - 1)
    return commOut + max(localMaxCBlock, nonLocalMaxCBlock) * (M + H)


def inputs(rank: int, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """x (E/ep, ep * C, M/tp) and weight (E/ep, M/tp, H) of ``rank``: small integers, exact."""
    return random_ints(rank, (E_OVER_EP, ep * TP * C, M)), random_ints(
        1000 + rank, (E_OVER_EP, M, H)
    )


def reference(rank: int, n: int) -> np.ndarray:
    """numpy, as the source's formula: bmm, ReduceScatter in TP (along C), AlltoAll in EP.

    Rank (e, t) (EP index e, TP index t) gets, for the experts of EP rank i, the sum over
    the TP group of i of ``x[k, C block (e, t)] @ w[k]``: y is (E, C/tp, H).
    """
    ep = n // TP
    _, tp_groups = ep_tp_groups(n, TP)
    e_me, t_me = rank // TP, rank % TP
    rows = slice((e_me * TP + t_me) * C, (e_me * TP + t_me + 1) * C)
    blocks = []
    for i in range(ep):
        total = np.zeros((E_OVER_EP, C, H), dtype=np.float32)
        for p in tp_groups[i]:
            x, w = inputs(p, ep)
            total += x[:, rows].astype(np.float32) @ w.astype(np.float32)
        blocks.append(total.astype(np.float16))
    return np.concatenate(blocks)


def main() -> list[str]:
    """One launch on every rank; y against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    ep = n // TP
    if n % TP or ep not in (2, 4, 8, 16):
        return [skip("y", f"needs ep, tp in 2/4/8/16 and {n} ranks = ep * tp")]
    ep_group, tp_group = ep_tp_domains(TP)
    x, w = inputs(rank, ep)
    y = zeros(E_OVER_EP * ep, C, H)
    hp.launch(
        batch_mat_mul_reduce_scatter_allto_all,
        on_device(x),
        on_device(w),
        None,
        y,
        zeros(workspace_elements(ep)),
        make_tiling(ep, ep_group.name, tp_group.name),
        block_dim=BLOCK_DIM,
        kernel_type="mix_aic_1_2",
        groups={0: ep_group, 1: tp_group},
    )
    return [compare("y", y, reference(rank, n), f"ep={ep} tp={TP}")]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
