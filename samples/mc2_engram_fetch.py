"""Port of ops-transformer's EngramFetch and EngramFetchWait (Ascend 950 Hcomm reads), call for call.

Source: ops-transformer, ``mc2/engram_fetch/op_kernel/arch35/engram_fetch_arch35.h``
(``EngramFetchArch35``: ``Init``, ``CopyContextToUb``, ``CopyIndicesToUb``,
``GatherRankTokens``, ``ScatterByRank``, ``Process``, ``LocalFetchTokens``,
``RemoteFetchRank``, ``FetchByRank``, ``LocalCopySlice``), ``arch35/engram_fetch.cpp``,
``engram_fetch_utils.h`` (the constants and ``EngramCommContext``),
``engram_fetch_tiling_data.h``, ``engram_fetch_tiling_key.h`` and the host tiling
``op_host/op_tiling/arch35/engram_fetch_tiling.cpp`` (``CheckTensorDataType``,
``CheckTensorDim``, ``CheckAttrParams``, ``SetPlatformInfo``, ``SetTilingData``);
``mc2/engram_fetch_wait/op_kernel/arch35/engram_fetch_wait_arch35.h``
(``EngramFetchWaitArch35``), ``engram_fetch_wait.cpp`` and its host tiling (block dim, an
empty tiling struct). As of mirror-cann 3a280bcc (2026-07-21; last engram change 0cfa41506).

Each rank owns ``numEntriesPerRank`` rows of a table sharded over the ranks, stored at the
start of its HCCL buffer; global row ``g`` lives on rank ``g // numEntriesPerRank``. The
fetch kernel reads the indices in batches that fit UB, groups each batch by owner rank
(``Div``, ``CompareScalar``, ``GatherMask``), copies the own rank's rows through UB (the
owner core and the cores beyond ``numRanks`` share them) and posts one
``ReadNbi<false>`` per remote row into ``fetched``, ringing the doorbell with ``Commit``
after the first 8 and then every 32 reads, and once for the rest. It does not wait: the
reads are in flight when it returns. The wait kernel, launched next, ``Drain``s every peer's
channel (cores split the channels by rank). Only then may anyone read ``fetched``.

What runs unchanged: the context (``rankId``, ``rankSize``, ``commBuffer[rank]`` and
``hcommHandle[rank]``, both indexed by rank, the own slot of ``hcommHandle`` unused), the
UB budget that sizes the indices batch, the rank split of ``FetchByRank`` and
``ScatterByRank`` (core ``c`` owns ranks ``c, c + blockNum, ...``; a core beyond
``numRanks`` gathers the own rank's tokens and helps copy them), the ``rankIDs`` sentinel
``numRanks`` beyond the batch, the commit thresholds, the wait kernel's rank split.

Stand-ins: FP16 rows (the op takes BF16, FP16 or FP32: only the byte count matters);
six AIV cores (``GetCoreNumAiv``) so that with 2 or 4 ranks some cores are beyond
``numRanks``; a small UB size (``GetCoreMemSize``) so that the indices come in batches of
64; the context is a Python object (the kernel input is an int32 tensor of 4098 words)
filled on the host as the MoE ports fill ``MoeCommContext`` (``hp.HcclChannelAcquire``,
``hp.HcclChannelGetHcclBuffer``, ``hp.HcclGetHcclBuffer``); the vector ops on UB
(``ArithProgression``, ``Duplicate``, ``Div``, ``CompareScalar``, ``GatherMask``) are torch
on UB tensors; intra-core ``SetFlag``/``WaitFlag`` (``SyncFunc``) and ``PipeBarrier`` are
comments; the 16 MiB system workspace is None (the kernels ignore it). How the table gets
into the HCCL buffer is not part of the op: the host writes its shard and ``hp.barrier()``
runs once before the first round. Ascend 950's UBC_CTP runs on the A3 platform's windows.
The wait's empty tiling struct has one uint32 member (ctypes needs one). The wait kernel's
``Drain`` is the only ordering call: without it the host's read of ``fetched`` is an
``HcclRaceError`` on the default schedule (the race check marks a ``ReadNbi``'s plain GM
destination until its channel's ``Drain``, docs/hcomm.md).

Run: ``python samples/mc2_engram_fetch.py`` (4 emulated ranks, three rounds of fetch and
wait), ``python -m hccl_py run -n 2 --backend gloo samples/mc2_engram_fetch.py``.
"""

from ctypes import c_int32, c_int64, c_uint32, c_uint64

import numpy as np
import torch
from _common import Ceil, compare, on_device, run_sample

import hccl_py as hp
from hccl_py import TilingData

PLATFORM = "A3"
RUN_KWARGS = {"buffsize_mb": 1}
HIDDEN_SIZE = 128  # the hidden_size attribute (128-aligned)
NUM_ENTRIES_PER_RANK = 6  # the num_entries_per_rank attribute
TOKENS = {1: 150, 2: 70, 3: 13}  # numTokens of each round
AIV_NUM = 6  # GetCoreNumAiv stand-in
SIZEOF_FETCHED = 2  # FP16

# engram_fetch_utils.h
MAX_QP_SIZE = 1024
UB_ALIGN = 32
TILE_BYTES = 32 * 1024
HCOMM_INIT_SIZE = 512
READ_COMMIT_FIRST_THRESHOLD = 8
READ_COMMIT_THRESHOLD = 32
BITS_PER_BYTE = 8
ALIGNED_LEN_256 = 256
RELAY_BUFFER_NUM = 2
#: GetCoreMemSize(UB) stand-in: the fixed buffers and the 8 KiB reserve, plus 21 bytes for
#: each of 64 indices (so that round 1's 150 tokens take three batches).
UB_SIZE = HCOMM_INIT_SIZE + TILE_BYTES * RELAY_BUFFER_NUM + 4 * UB_ALIGN + 8 * 1024 + 21 * 64
ENGRAM_FETCH_DEFAULT_MODE = 0
HIDDEN_SIZE_ALIGN = 128
SYSTEM_NEED_WORKSPACE = 16 * 1024 * 1024
COMM_CONTEXT_WORDS = (8 + 2 * MAX_QP_SIZE * 8) // 4  # sizeof(EngramCommContext) / 4


class EngramFetchTilingData(TilingData):
    _fields_ = [
        ("numTokens", c_int64),
        ("numEntriesPerRank", c_int32),
        ("hiddenDim", c_int64),
        ("hiddenBytes", c_int64),
        ("aivNum", c_uint32),
        ("ubSize", c_uint64),
    ]


class EngramFetchWaitTilingData(TilingData):
    _fields_ = [("reserved", c_uint32)]  # empty in C++ (sizeof 1); ctypes needs a member


# ---------------------------------------------------------------- host tiling


def EngramFetchTilingFunc(
    commContextShape: tuple, indicesShape: tuple, fetchedShape: tuple, fetchedDtype: torch.dtype,
    hidden_size: int, num_entries_per_rank: int,
) -> tuple[EngramFetchTilingData, int, int, int]:  # fmt: skip
    """The host tiling: tiling data, block dim, tiling key and workspace size."""
    tiling = EngramFetchTilingData()
    # CheckTensorDataType (commContext and indices are int32 in the op)
    assert fetchedDtype in (torch.bfloat16, torch.float16, torch.float32)
    # CheckTensorDim
    assert len(commContextShape) == 1 and commContextShape[0] > 0
    assert len(indicesShape) == 1 and indicesShape[0] >= 0
    numTokens = indicesShape[0]
    assert len(fetchedShape) == 2 and fetchedShape[0] == numTokens
    # CheckAttrParams
    assert hidden_size > 0 and hidden_size % HIDDEN_SIZE_ALIGN == 0
    assert fetchedShape[1] == hidden_size
    assert 0 <= num_entries_per_rank <= 2**31 - 1
    # SetPlatformInfo: CalcTschBlockDim(aivNum, 0, aivNum) of an AIV-only kernel
    aivNum = AIV_NUM
    numBlocks = aivNum
    tiling.aivNum = aivNum
    # SetTilingData
    tiling.numTokens = numTokens
    tiling.hiddenDim = hidden_size
    tiling.numEntriesPerRank = num_entries_per_rank
    tiling.hiddenBytes = tiling.hiddenDim * torch.tensor([], dtype=fetchedDtype).element_size()
    tiling.ubSize = UB_SIZE
    return tiling, numBlocks, ENGRAM_FETCH_DEFAULT_MODE, SYSTEM_NEED_WORKSPACE


def EngramFetchWaitTilingFunc() -> tuple[EngramFetchWaitTilingData, int, int, int]:
    """The wait's host tiling: nothing but the block dim (every AIV core), key 0."""
    return EngramFetchWaitTilingData(), AIV_NUM, 0, SYSTEM_NEED_WORKSPACE


# ---------------------------------------------------------------- the context


class EngramCommContext:
    """``Mc2Kernel::EngramCommContext``: this rank, the ranks, and per rank its HCCL buffer
    and the channel to it (indexed by rank; the own slot of ``hcommHandle`` is unused)."""

    def __init__(self) -> None:
        self.rankId = hp.get_rank()
        self.rankSize = hp.get_world_size()
        assert self.rankSize <= MAX_QP_SIZE
        descs = [hp.HcclChannelDesc(r) for r in range(self.rankSize) if r != self.rankId]
        channels = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, descs, len(descs))
        self.commBuffer = [None] * self.rankSize
        self.hcommHandle = [0] * self.rankSize
        for desc, channel in zip(descs, channels, strict=True):
            self.hcommHandle[desc.remoteRank] = channel
            self.commBuffer[desc.remoteRank] = hp.HcclChannelGetHcclBuffer(None, channel)[0]
        self.commBuffer[self.rankId] = hp.HcclGetHcclBuffer()[0]


# ---------------------------------------------------------------- EngramFetch


class EngramFetchArch35:
    def Init(self, commContext, indices, fetched, workspaceGM, tilingData) -> None:  # noqa: ANN001
        self.indicesGM_ = indices
        self.fetchedGM_ = fetched
        self.aivId_ = hp.GetBlockIdx()
        self.ctxPtr_ = commContext
        self.rankId_ = self.ctxPtr_.rankId
        self.numRanks_ = self.ctxPtr_.rankSize

        self.numEntriesPerRank_ = tilingData.numEntriesPerRank
        self.numTokens_ = tilingData.numTokens
        self.hiddenBytes_ = tilingData.hiddenBytes
        self.ubSize_ = tilingData.ubSize

        self.hcomm_ = hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]()
        hcommTensor = torch.zeros(HCOMM_INIT_SIZE, dtype=torch.uint8)  # hcommBuf_
        self.hcomm_.Init(hcommTensor, HCOMM_INIT_SIZE)

        n = self.numRanks_
        countsBufSize = Ceil(n * 4, UB_ALIGN) * UB_ALIGN
        offsetsBufSize = Ceil(n * 4, UB_ALIGN) * UB_ALIGN
        commBufferBufSize = Ceil(n * 8, UB_ALIGN) * UB_ALIGN
        hcommHandleBufSize = Ceil(n * 8, UB_ALIGN) * UB_ALIGN
        self.rankCountsBuf_ = torch.zeros(countsBufSize // 4, dtype=torch.int32)
        self.rankOffsetsBuf_ = torch.zeros(offsetsBufSize // 4, dtype=torch.int32)

        ubReserved = 8 * 1024
        # indices, tokenIdxInRank, rankIDs, positions, divisor (4 bytes each), mask (~1 byte)
        bytesPerIndice = 4 + 4 + 4 * 3 + 1
        usedUb = (
            HCOMM_INIT_SIZE + TILE_BYTES * RELAY_BUFFER_NUM + countsBufSize + offsetsBufSize
            + commBufferBufSize + hcommHandleBufSize
        )  # fmt: skip
        availableUb = (
            self.ubSize_ - usedUb - ubReserved if self.ubSize_ > usedUb + ubReserved else 0
        )
        maxBatchSize = availableUb // bytesPerIndice
        numTokens = self.numTokens_
        self.indicesBatchSize_ = numTokens if numTokens <= maxBatchSize else maxBatchSize
        if self.indicesBatchSize_ == 0:
            self.indicesBatchSize_ = 1

        self.indicesBuf_ = torch.zeros(self.indicesBatchSize_, dtype=torch.int32)
        self.tokenIdxInRankBuf_ = torch.zeros(self.indicesBatchSize_, dtype=torch.int32)
        compareCntMax = Ceil(self.indicesBatchSize_ * 4, ALIGNED_LEN_256) * ALIGNED_LEN_256 // 4
        self.rankIDsBuf_ = torch.zeros(compareCntMax, dtype=torch.int32)
        self.positionsBuf_ = torch.zeros(compareCntMax, dtype=torch.int32)
        self.divisorBuf_ = torch.zeros(compareCntMax, dtype=torch.int32)
        self.maskBuf_ = torch.zeros(compareCntMax, dtype=torch.bool)  # a bit per element

    def CopyContextToUb(self) -> None:
        n = self.numRanks_
        self.commBufferLocal_ = list(self.ctxPtr_.commBuffer[:n])  # DataCopyPad of n uint64
        self.hcommHandleLocal_ = list(self.ctxPtr_.hcommHandle[:n])

    def CopyIndicesToUb(self, indicesBatchStart: int, indicesBatchLen: int) -> None:
        indicesGlobal = hp.gm_tensor(self.indicesGM_, torch.int32, self.numTokens_)
        self.indicesBuf_[:indicesBatchLen] = indicesGlobal[
            indicesBatchStart : indicesBatchStart + indicesBatchLen
        ]

    def GatherRankTokens(self, ownerRank: int, batchLen: int, compareCntMax: int,
                         runningOffset: int) -> int:  # fmt: skip
        """The batch positions whose rank is ``ownerRank``, appended at ``runningOffset``;
        returns the new running offset (a reference argument in C++)."""
        mask = self.maskBuf_
        mask[:compareCntMax] = self.rankIDsBuf_[:compareCntMax] == ownerRank  # CompareScalar EQ
        # PipeBarrier<PIPE_V>
        kept = self.positionsBuf_[:batchLen][mask[:batchLen]]  # GatherMask, rsvdCnt
        count = kept.numel()
        self.tokenIdxInRankBuf_[runningOffset : runningOffset + count] = kept
        # PipeBarrier<PIPE_V>; SyncFunc<V_S>
        self.rankOffsetsBuf_[ownerRank] = runningOffset
        self.rankCountsBuf_[ownerRank] = count
        return runningOffset + count

    def ScatterByRank(self, batchLen: int) -> None:
        indicesLocal = self.indicesBuf_
        compareCntMax = Ceil(batchLen * 4, ALIGNED_LEN_256) * ALIGNED_LEN_256 // 4
        rankIDs, positions, divisor = self.rankIDsBuf_, self.positionsBuf_, self.divisorBuf_

        positions[:batchLen] = torch.arange(batchLen, dtype=torch.int32)  # ArithProgression
        divisor[:compareCntMax] = self.numEntriesPerRank_  # Duplicate
        rankIDs[:compareCntMax] = self.numRanks_  # Duplicate: the sentinel beyond the batch
        # PipeBarrier<PIPE_V>
        rankIDs[:batchLen] = torch.div(
            indicesLocal[:batchLen], divisor[:batchLen], rounding_mode="trunc"
        )  # Div<int32_t>
        # PipeBarrier<PIPE_V>; SyncFunc<V_S>

        runningOffset = 0
        totalBlocks = hp.GetBlockNum()
        for ownerRank in range(self.aivId_, self.numRanks_, totalBlocks):
            runningOffset = self.GatherRankTokens(ownerRank, batchLen, compareCntMax, runningOffset)

        if self.aivId_ >= self.numRanks_:
            runningOffset = self.GatherRankTokens(
                self.rankId_, batchLen, compareCntMax, runningOffset
            )

    def Process(self) -> None:
        if hp.g_coreType == hp.AIV:
            if self.numEntriesPerRank_ == 0 or self.numTokens_ == 0:
                return
            self.CopyContextToUb()
            # SyncFunc<MTE2_S>
            numTokens = self.numTokens_
            indicesBatchStart = 0
            while indicesBatchStart < numTokens:
                indicesBatchLen = self.indicesBatchSize_
                if indicesBatchStart + indicesBatchLen > numTokens:
                    indicesBatchLen = numTokens - indicesBatchStart
                self.CopyIndicesToUb(indicesBatchStart, indicesBatchLen)
                # SyncFunc<MTE2_S>
                self.ScatterByRank(indicesBatchLen)
                self.FetchByRank(indicesBatchStart)
                indicesBatchStart += indicesBatchLen

    def LocalFetchTokens(self, indicesBatchStart: int) -> None:
        hiddenBytes = self.hiddenBytes_
        numEntriesPerRank = self.numEntriesPerRank_
        totalBlocks = hp.GetBlockNum()
        ownerCore = self.rankId_ % totalBlocks

        numIdleCores = totalBlocks - self.numRanks_ if totalBlocks > self.numRanks_ else 0
        numParticipants = numIdleCores + 1
        participantIdx = 0 if self.aivId_ == ownerCore else self.aivId_ - self.numRanks_ + 1
        localIdxStart = self.rankId_ * numEntriesPerRank
        rankStart = int(self.rankOffsetsBuf_[self.rankId_])
        cnt = int(self.rankCountsBuf_[self.rankId_])
        for b in range(participantIdx, cnt, numParticipants):
            i = int(self.tokenIdxInRankBuf_[rankStart + b])
            globalIdx = int(self.indicesBuf_[i])
            localEntryIdx = (globalIdx - localIdxStart) & 0xFFFFFFFF  # uint32
            globalTokenIdx = indicesBatchStart + i
            dst = self.fetchedGM_ + globalTokenIdx * hiddenBytes
            src = self.commBufferLocal_[self.rankId_] + localEntryIdx * hiddenBytes
            self.LocalCopySlice(dst, src, hiddenBytes)
        # SyncFunc<MTE3_S>

    def RemoteFetchRank(self, ownerRank: int, indicesBatchStart: int) -> None:
        hiddenBytes = self.hiddenBytes_
        idxStart = ownerRank * self.numEntriesPerRank_
        rankStart = int(self.rankOffsetsBuf_[ownerRank])
        cnt = int(self.rankCountsBuf_[ownerRank])
        pendingReadCount = 0
        threshold = READ_COMMIT_FIRST_THRESHOLD
        channel = self.hcommHandleLocal_[ownerRank]

        for b in range(cnt):
            i = int(self.tokenIdxInRankBuf_[rankStart + b])
            globalIdx = int(self.indicesBuf_[i])
            localEntryIdx = (globalIdx - idxStart) & 0xFFFFFFFF  # uint32
            globalTokenIdx = indicesBatchStart + i
            dst = self.fetchedGM_ + globalTokenIdx * hiddenBytes
            remoteSrcAddr = self.commBufferLocal_[ownerRank] + localEntryIdx * hiddenBytes
            ret = self.hcomm_.ReadNbi[False](channel, dst, remoteSrcAddr, hiddenBytes)
            assert ret == 0, f"Urma readNbi failed, ret={ret}, ownerRank={ownerRank}"
            pendingReadCount += 1
            if pendingReadCount >= threshold:
                ret = self.hcomm_.Commit(channel)
                assert ret == 0, f"Urma commit failed, ret={ret}, ownerRank={ownerRank}"
                pendingReadCount = 0
                threshold = READ_COMMIT_THRESHOLD
        if pendingReadCount > 0:
            ret = self.hcomm_.Commit(channel)
            assert ret == 0, f"Urma commit failed, ret={ret}, ownerRank={ownerRank}"

    def FetchByRank(self, indicesBatchStart: int) -> None:
        totalBlocks = hp.GetBlockNum()
        startRank = self.aivId_ if self.aivId_ < self.numRanks_ else self.rankId_
        for ownerRank in range(startRank, self.numRanks_, totalBlocks):
            if ownerRank == self.rankId_:
                self.LocalFetchTokens(indicesBatchStart)
            else:
                self.RemoteFetchRank(ownerRank, indicesBatchStart)

    def LocalCopySlice(self, dst: hp.GmAddr, src: hp.GmAddr, length: int) -> None:
        srcGm = hp.gm_tensor(src, torch.uint8, length)
        dstGm = hp.gm_tensor(dst, torch.uint8, length)
        off = 0
        while off < length:
            thisLen = TILE_BYTES if length - off > TILE_BYTES else length - off
            tmp = srcGm[off : off + thisLen].clone()  # relayQue_: DataCopy in, EnQue, DeQue
            dstGm[off : off + thisLen] = tmp  # DataCopy out, FreeTensor
            off += thisLen


def engram_fetch(commContext, indices, fetched, workspaceGM, tilingGM) -> None:  # noqa: ANN001
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(EngramFetchTilingData, tilingGM)
    op = EngramFetchArch35()  # EngramFetchMode == ENGRAM_FETCH_DEFAULT_MODE
    op.Init(commContext, indices, fetched, workspaceGM, tilingData)
    op.Process()


# ---------------------------------------------------------------- EngramFetchWait


class EngramFetchWaitArch35:
    def Init(self, commContext, workspaceGM) -> None:  # noqa: ANN001
        self.aivId_ = hp.GetBlockIdx()
        self.ctxPtr_ = commContext
        self.rankId_ = self.ctxPtr_.rankId
        self.numRanks_ = self.ctxPtr_.rankSize
        self.hcomm_ = hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]()
        hcommTensor = torch.zeros(HCOMM_INIT_SIZE, dtype=torch.uint8)  # hcommBuf_
        self.hcomm_.Init(hcommTensor, HCOMM_INIT_SIZE)

    def Process(self) -> None:
        if hp.g_coreType == hp.AIV:
            totalBlocks = hp.GetBlockNum()
            for channelIdx in range(self.aivId_, self.numRanks_, totalBlocks):
                if channelIdx == self.rankId_:
                    continue
                ret = self.hcomm_.Drain(self.ctxPtr_.hcommHandle[channelIdx])
                assert ret == 0, f"Urma drain failed, ret={ret}, channelIdx={channelIdx}"


def engram_fetch_wait(commContext, fetched, fetchedOut, workspaceGM, tilingGM) -> None:  # noqa: ANN001
    hp.GET_TILING_DATA_WITH_STRUCT(EngramFetchWaitTilingData, tilingGM)
    op = EngramFetchWaitArch35()
    op.Init(commContext, workspaceGM)
    op.Process()


# ---------------------------------------------------------------- host side and the check


def table(rank: int) -> np.ndarray:
    """Rank ``rank``'s shard: global row g holds g + 64 * (h % 17) (FP16, exact)."""
    g = rank * NUM_ENTRIES_PER_RANK + np.arange(NUM_ENTRIES_PER_RANK)[:, None]
    return (g + 64 * (np.arange(HIDDEN_SIZE)[None, :] % 17)).astype(np.float16)


def indices_of(rank: int, launch: int) -> np.ndarray:
    """The round's indices, repeats included: any row of any rank, except in round 2, which
    reads only the next rank's rows (64 reads on one channel in a batch: Commit after 8,
    after 32 more, then the rest)."""
    n = hp.get_world_size()
    rng = np.random.default_rng(1000 * launch + rank)
    if launch == 2:
        first = (rank + 1) % n * NUM_ENTRIES_PER_RANK
        return rng.integers(first, first + NUM_ENTRIES_PER_RANK, size=TOKENS[launch]).astype(
            np.int32
        )
    return rng.integers(0, n * NUM_ENTRIES_PER_RANK, size=TOKENS[launch]).astype(np.int32)


def reference(rank: int, launch: int) -> np.ndarray:
    """numpy: the rows the indices name, from every rank's shard."""
    full = np.concatenate([table(r) for r in range(hp.get_world_size())])
    return full[indices_of(rank, launch)].astype(np.float64)


def main() -> list[str]:
    rank, dev = hp.get_rank(), hp.device()
    context = EngramCommContext()  # once per communicator
    shard = table(rank)
    hp.gm_tensor(context.commBuffer[rank], torch.float16, shard.size)[:] = torch.from_numpy(
        shard.reshape(-1)
    )  # the table's shard at the start of the HCCL buffer
    hp.barrier()  # every shard is in place before any rank reads
    lines = []
    for launch in (1, 2, 3):  # rounds of (EngramFetch, EngramFetchWait)
        indices = on_device(indices_of(rank, launch))
        fetched = torch.zeros(indices.shape[0], HIDDEN_SIZE, dtype=torch.float16, device=dev)
        tiling, numBlocks, _, _ = EngramFetchTilingFunc(
            (COMM_CONTEXT_WORDS,), tuple(indices.shape), tuple(fetched.shape), fetched.dtype,
            HIDDEN_SIZE, NUM_ENTRIES_PER_RANK,
        )  # fmt: skip
        hp.launch(
            engram_fetch, context, indices, fetched, None, tiling,
            block_dim=numBlocks, kernel_type="aiv",
        )  # fmt: skip
        waitTiling, waitBlocks, _, _ = EngramFetchWaitTilingFunc()
        hp.launch(
            engram_fetch_wait, context, fetched, fetched, None, waitTiling,
            block_dim=waitBlocks, kernel_type="aiv",
        )  # fmt: skip
        lines.append(
            compare(
                f"round-{launch}", fetched.double(), reference(rank, launch),
                f"{TOKENS[launch]} tokens",
            )
        )  # fmt: skip
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
