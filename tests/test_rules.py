"""Handle and return-code rules of spec section 4, in strict and in non-strict mode.

Every rule in :data:`RULES` is a short kernel script with one *probed* call
that the C++ client rejects. In non-strict mode (``hp.run(..., strict=False)``)
the probed call must return the C++ value and set ``hccl.last_error``, and the
script's later calls must behave as recorded (a rejected Prepare sends
nothing, so the next one still gets handle 0). In strict mode the probed call
must raise the rule's :class:`hp.HcclError` subclass. Either way the reason
must name the facts listed with the rule (and the rank).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cases
import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT, init_hccl
from expect import expects_warning

import hccl_py as hp
from hccl_py import HCCL_FAILED, HCCL_SUCCESS, Hccl, HcclDataType, HcclReduceOp

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

DT = HcclDataType
FP32 = DT.HCCL_DATA_TYPE_FP32
SUM = HcclReduceOp.HCCL_REDUCE_SUM
WORLD = 2
COUNT = 4  # floats per AllGather block
STRIDE = 32  # strideCount that keeps up to 8 rounds apart
PROBE = "probe"
HUGE = np.array([2**63, 0], dtype=np.uint64)  # uint64 counts that int64 cannot hold


class Env:
    """What a rule script sees inside the kernel: buffers, tiling, the record."""

    def __init__(self, x: Any, y: Any, tiling: Any, record: list, null: Any) -> None:
        self.x, self.y, self.tiling, self.record, self.null = x, y, tiling, record, null

    def probe(self, hccl: Hccl, ret: Any) -> None:
        """Record the probed call's result and reason (reached in non-strict mode only)."""
        self.record.append((PROBE, ret, hccl.last_error))

    def add(self, *values: Any) -> None:
        """Record what later calls returned."""
        self.record.extend(values)

    def gather(self, hccl: Hccl, commit: bool = True, repeat: int = 1) -> int:
        """A valid AllGather of COUNT floats (rounds STRIDE apart)."""
        return hccl.AllGather[commit](self.x, self.y, COUNT, FP32, STRIDE, repeat)


Script = Callable[[Hccl, Env], None]


@dataclass(frozen=True)
class Rule:
    """A rejected call: its C++ result, the facts its reason names, what the script records."""

    script: Script
    ret: Any
    facts: tuple[str, ...]
    record: tuple = (PROBE,)
    platform: str = "A2"
    cls: type[hp.HcclError] = hp.HcclUsageError
    #: A call the official client logs and returns from: never raised, in any mode. The
    #: HcclWarning kind it gives ("" for none); warnings_as_errors turns it into an error.
    carries_on: str | None = None


def _init(h: Hccl, e: Env, ops: tuple[str, ...] = ("AllGather",)) -> None:
    init_hccl(h, e.tiling, ops=ops)


def _valid_after(h: Hccl, e: Env) -> None:
    """A valid Prepare after the rejected one: handle 0, Wait 0, no error left."""
    hd = e.gather(h)
    e.add(hd, h.Wait(hd), h.last_error)
    h.Finalize()


AFTER = (PROBE, 0, HCCL_SUCCESS, None)


def bad_prepare(call: Callable[[Hccl, Env], int], ops: tuple[str, ...] = ("AllGather",)) -> Script:
    """Script: initialise, probe an invalid Prepare, then prepare a valid one."""

    def script(h: Hccl, e: Env) -> None:
        _init(h, e, ops)
        e.probe(h, call(h, e))
        _valid_after(h, e)

    return script


def after_one_gather(probe: Callable[[Hccl, Env, int], Any], commit: bool = True) -> Script:
    """Script: one AllGather (handle 0), the probed call, then Commit if needed and Wait."""

    def script(h: Hccl, e: Env) -> None:
        _init(h, e)
        hd = e.gather(h, commit)
        e.probe(h, probe(h, e, hd))
        if not commit:
            h.Commit(hd)
        e.add(h.Wait(hd))
        h.Finalize()

    return script


def uninitialised(call: Callable[[Hccl, Env], Any]) -> Script:
    """Script: the probed call on an Hccl object that was never initialised."""
    return lambda h, e: e.probe(h, call(h, e))


def _commit_unknown(h: Hccl, e: Env) -> None:
    _init(h, e)
    hd = e.gather(h, commit=False)
    e.probe(h, h.Commit(hd + 1))
    e.add(h.Query(hd))  # nothing was committed, nothing ran
    h.Commit(hd)
    e.add(h.Wait(hd))
    h.Finalize()


def _commit_before_prepare(h: Hccl, e: Env) -> None:
    _init(h, e)
    e.probe(h, h.Commit(0))
    _valid_after(h, e)


def _extra_commit(h: Hccl, e: Env) -> None:
    _init(h, e)
    hd = e.gather(h, repeat=2)
    e.probe(h, h.Commit(hd))
    e.add(h.Wait(hd), h.Wait(hd), h.Query(hd))
    h.Finalize()


def _wait_too_often(h: Hccl, e: Env) -> None:
    _init(h, e)
    hd = e.gather(h)
    e.add(h.Wait(hd))
    e.probe(h, h.Wait(hd))
    h.Finalize()


def _wait_uncommitted_round(h: Hccl, e: Env) -> None:
    _init(h, e)
    hd = e.gather(h, commit=False, repeat=2)
    h.Commit(hd)
    e.add(h.Wait(hd))
    e.probe(h, h.Wait(hd))
    h.Commit(hd)
    e.add(h.Wait(hd))
    h.Finalize()


def _prepare_after_finalize(h: Hccl, e: Env) -> None:
    _init(h, e)
    hd = e.gather(h)
    e.add(h.Wait(hd))
    h.Finalize()
    e.probe(h, e.gather(h))
    e.add(h.Query(hd))


def _finalize_async(h: Hccl, e: Env) -> None:
    _init(h, e)
    hd = e.gather(h)
    e.add(h.Wait(hd))
    e.probe(h, h.Finalize[False]())
    h.Finalize()
    e.add(e.gather(h))  # finalized now: -1


def _set_cc(offset: Callable[[], int]) -> Script:
    """Script: InitV2, the probed SetCcTilingV2(offset), then the right offset and a Prepare."""

    def script(h: Hccl, e: Env) -> None:
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(cases.KernelTiling, e.tiling))
        e.probe(h, h.SetCcTilingV2(offset()))
        e.add(h.SetCcTilingV2(cases.cc_offset("AllGather")))
        _valid_after(h, e)

    return script


def _init_with_tiling_without_set(h: Hccl, e: Env) -> None:
    h.Init(hp.GetHcclContext(0), e.tiling)
    e.probe(h, e.gather(h))
    e.add(h.SetCcTiling(e.tiling + cases.cc_offset("AllGather")))
    _valid_after(h, e)


def _set_cc_tiling_after(init: str) -> Script:
    """Script: SetCcTiling (V1) after InitV2 or after Init without tiling: rejected."""

    def script(h: Hccl, e: Env) -> None:
        if init == "InitV2":
            _init(h, e)
        else:
            h.Init(hp.GetHcclContext(0))
        e.probe(h, h.SetCcTiling(e.tiling + cases.cc_offset("AllGather")))
        _valid_after(h, e)

    return script


def _probe_ccu_init(e: Env) -> None:
    """InitV2 of a client for the CCU server, which the platform (A2) does not have."""
    ccu = Hccl(hp.HCCL_SERVER_TYPE_CCU)
    e.probe(ccu, ccu.InitV2(hp.GetHcclContext(0), e.tiling))


def _query_on_ccu(h: Hccl, e: Env) -> None:
    """Query on the CCU client of Ascend 950, which has none (the 950 AI CPU client has it)."""
    ccu = Hccl(hp.HCCL_SERVER_TYPE_CCU)
    _init(ccu, e)
    hd = e.gather(ccu)
    e.probe(ccu, ccu.Query(hd))
    e.add(ccu.Wait(hd))
    ccu.Finalize()


def _second_init(h: Hccl, e: Env) -> None:
    """InitV2 twice: the second one is ignored (the first stays in force), then a valid task."""
    _init(h, e)
    e.probe(h, h.InitV2(hp.GetHcclContext(0), e.tiling))
    _valid_after(h, e)


def _set_cc_v2_after_init_with_tiling(h: Hccl, e: Env) -> None:
    """Init(context, tiling) then SetCcTilingV2: the two styles do not mix (-1), SetCcTiling works."""
    h.Init(hp.GetHcclContext(0), e.tiling)
    e.probe(h, h.SetCcTilingV2(cases.cc_offset("AllGather")))
    h.SetCcTiling(e.tiling + cases.cc_offset("AllGather"))
    _valid_after(h, e)


def _alltoallv_missing(name: str) -> Callable[[Hccl, Env], int]:
    arrays = {"sendCounts": [1, 1], "sdispls": [0, 1], "recvCounts": [1, 1], "rdispls": [0, 1]}
    arrays[name] = None

    def call(h: Hccl, e: Env) -> int:
        a = arrays
        return h.AlltoAllV(
            e.x, a["sendCounts"], a["sdispls"], FP32, e.y, a["recvCounts"], a["rdispls"], FP32
        )

    return call


ALL_OPS = ("AllGather", "AllReduce", "ReduceScatter", "AlltoAll", "AlltoAllV")
INVALID_HANDLE = ("out of range", "never returned")

RULES: dict[str, Rule] = {
    # ------------------------------------------------------------ Prepare
    "prepare/not-initialised": Rule(
        uninitialised(lambda h, e: e.gather(h)), -1, ("AllGather", "not initialised")
    ),
    "prepare/no-tiling-for-op": Rule(
        bad_prepare(lambda h, e: h.AllReduce(e.x, e.y, COUNT, FP32, SUM)),
        -1,
        ("AllReduce", "no tiling", "HCCL_CMD_ALLREDUCE"),
        AFTER,
    ),
    "prepare/repeat-0": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, FP32, STRIDE, 0)),
        -1,
        ("AllGather", "repeat must be 1..255", "repeat 0 the official client returns -1", "got 0"),
        AFTER,
    ),
    "prepare/repeat-256": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, FP32, STRIDE, 256)),
        -1,
        ("repeat must be 1..255", "C++ converts 256 to 0, so its Prepare returns -1", "got 256"),
        AFTER,
    ),
    "prepare/repeat-300": Rule(  # a uint8_t: C++ runs 300 % 256 rounds (until stop 65: "1..255")
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, FP32, STRIDE, 300)),
        -1,
        ("repeat must be 1..255 (a uint8_t)", "44 rounds would run, not 300", "got 300"),
        AFTER,
    ),
    "prepare/dtype-99": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, 99)),
        -1,
        ("data type out of range", "99"),
        AFTER,
    ),
    "prepare/repeat-True": Rule(  # a bool is no repeat count (until stop 64: read as 1)
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, FP32, STRIDE, True)),
        -1,
        ("repeat must be 1..255, an int, not a bool", "C++ converts True to 1", "got True"),
        AFTER,
    ),
    "prepare/dtype-tensor": Rule(  # until stop 64: "data type out of range (got tensor(3))"
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, torch.tensor(3))),
        -1,
        ("the data type must be an int (an HcclDataType) (got a torch.Tensor of shape ()",),
        AFTER,
    ),
    "prepare/dtype-13-unassigned": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, 13)),
        -1,
        ("data type out of range", "13"),
        AFTER,
    ),
    "prepare/dtype-RESERVED": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, DT.HCCL_DATA_TYPE_RESERVED)),
        -1,
        (
            "data type out of range (the official client checks INT8 <= type < RESERVED)",
            "HCCL_DATA_TYPE_RESERVED",
        ),
        AFTER,
    ),
    "prepare/dtype-INT128": Rule(
        bad_prepare(lambda h, e: h.AlltoAll(e.x, e.y, COUNT, 12), ("AllGather", "AlltoAll")),
        -1,
        (
            "HCCL_DATA_TYPE_INT128 is not among the data types the kernel API documents for AlltoAll",
            "would send it",
        ),
        AFTER,
    ),
    "prepare/dtype-FP64-AllReduce": Rule(
        bad_prepare(
            lambda h, e: h.AllReduce(e.x, e.y, COUNT, DT.HCCL_DATA_TYPE_FP64, SUM),
            ("AllGather", "AllReduce"),
        ),
        -1,
        (
            "HCCL_DATA_TYPE_FP64 is not among the data types the kernel API documents for AllReduce",
            "would send it",
        ),
        AFTER,
    ),
    "prepare/dtype-UINT8-ReduceScatter": Rule(
        bad_prepare(
            lambda h, e: h.ReduceScatter(e.x, e.y, COUNT, DT.HCCL_DATA_TYPE_UINT8, SUM),
            ("AllGather", "ReduceScatter"),
        ),
        -1,
        (
            "HCCL_DATA_TYPE_UINT8 is not among the data types the kernel API documents for ReduceScatter",
            "would send it",
        ),
        AFTER,
    ),
    "prepare/reduce-PROD": Rule(
        bad_prepare(
            lambda h, e: h.AllReduce(e.x, e.y, COUNT, FP32, HcclReduceOp.HCCL_REDUCE_PROD),
            ("AllGather", "AllReduce"),
        ),
        -1,
        ("HCCL_REDUCE_PROD", "not supported"),
        AFTER,
    ),
    "prepare/reduce-RESERVED": Rule(
        bad_prepare(
            lambda h, e: h.ReduceScatter(e.x, e.y, COUNT, FP32, 4), ("AllGather", "ReduceScatter")
        ),
        -1,
        ("HCCL_REDUCE_RESERVED", "ReduceScatter"),
        AFTER,
    ),
    "prepare/reduce-9": Rule(
        bad_prepare(lambda h, e: h.AllReduce(e.x, e.y, COUNT, FP32, 9), ("AllGather", "AllReduce")),
        -1,
        ("reduce op out of range", "9"),
        AFTER,
    ),
    "prepare/reduce-str": Rule(
        bad_prepare(
            lambda h, e: h.AllReduce(e.x, e.y, COUNT, FP32, "sum"), ("AllGather", "AllReduce")
        ),
        -1,
        ("the reduce op must be an int (an HcclReduceOp) (got a str ('sum'))",),
        AFTER,
    ),
    "prepare/null-sendBuf": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.null, e.y, COUNT, FP32)),
        -1,
        ("AllGather", "sendBuf is null"),
        AFTER,
    ),
    "prepare/null-recvBuf": Rule(
        bad_prepare(
            lambda h, e: h.AllReduce(e.x, e.null, COUNT, FP32, SUM), ("AllGather", "AllReduce")
        ),
        -1,
        ("AllReduce", "recvBuf is null"),
        AFTER,
    ),
    "prepare/numpy-sendBuf": Rule(
        bad_prepare(lambda h, e: h.AllGather(np.zeros(COUNT, np.float32), e.y, COUNT, FP32)),
        -1,
        ("sendBuf must be a GM address", "numpy.ndarray of shape (4,)", "torch.from_numpy"),
        AFTER,
    ),
    "prepare/AlltoAll-dataCount-0": Rule(
        bad_prepare(lambda h, e: h.AlltoAll(e.x, e.y, 0, FP32), ("AllGather", "AlltoAll")),
        -1,
        ("AlltoAll", "dataCount must not be 0"),
        AFTER,
    ),
    "prepare/AllGather-sendCount-0": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, 0, FP32)),
        -1,
        ("AllGather", "sendCount must not be 0"),
        AFTER,
    ),
    "prepare/AllReduce-count-0": Rule(
        bad_prepare(lambda h, e: h.AllReduce(e.x, e.y, 0, FP32, SUM), ("AllGather", "AllReduce")),
        -1,
        ("AllReduce", "count must not be 0"),
        AFTER,
    ),
    "prepare/ReduceScatter-recvCount-0": Rule(
        bad_prepare(
            lambda h, e: h.ReduceScatter(e.x, e.y, 0, FP32, SUM), ("AllGather", "ReduceScatter")
        ),
        -1,
        ("ReduceScatter", "recvCount must not be 0"),
        AFTER,
    ),
    **{
        f"prepare/AlltoAllV-{name}-missing": Rule(
            bad_prepare(_alltoallv_missing(name), ("AllGather", "AlltoAllV")),
            -1,
            ("AlltoAllV", f"{name} is missing"),
            AFTER,
            platform="A3",
        )
        for name in ("sendCounts", "sdispls", "recvCounts", "rdispls")
    },
    "prepare/AlltoAllV-on-A2": Rule(
        bad_prepare(_alltoallv_missing("none"), ALL_OPS),
        -1,
        ("AlltoAllV", "not supported on Atlas A2"),
        AFTER,
    ),
    "prepare/overlapping-rounds": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, COUNT, FP32, 0, 2)),
        -1,
        ("receive ranges overlap", "strideCount >= repeat * count"),
        AFTER,
        cls=hp.HcclOverlapError,
    ),
    "prepare/out-of-bounds": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, 200, FP32)),
        -1,
        ("recv range of round 0, block 1", "bytes [800, 1600)", "outside its 1024 bytes"),
        AFTER,
        cls=hp.HcclBoundsError,
    ),
    # counts and strides so large that int64 byte offsets would wrap: still a bounds error
    "prepare/count-beyond-int64": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, 2**62, FP32)),
        -1,
        ("send range of round 0, block 0", "bytes [0, 18446744073709551616)", "1024 bytes"),
        AFTER,
        cls=hp.HcclBoundsError,
    ),
    "prepare/stride-beyond-int64": Rule(
        bad_prepare(lambda h, e: h.AllGather(e.x, e.y, 1, FP32, 2**62)),
        -1,
        ("recv range of round 0, block 1", "outside its 1024 bytes"),
        AFTER,
        cls=hp.HcclBoundsError,
    ),
    "prepare/AlltoAllV-uint64-counts-beyond-int64": Rule(
        bad_prepare(
            lambda h, e: h.AlltoAllV(e.x, HUGE, [0, 0], FP32, e.y, HUGE, [0, 4], FP32),
            ("AllGather", "AlltoAllV"),
        ),
        -1,
        ("send range of round 0, block 0", "outside its 1024 bytes"),
        AFTER,
        platform="A3",
        cls=hp.HcclBoundsError,
    ),
    "prepare/after-Finalize": Rule(
        _prepare_after_finalize, -1, ("AllGather", "finalized"), (0, PROBE, 0)
    ),
    "prepare/Init-with-tiling-needs-SetCcTiling": Rule(
        _init_with_tiling_without_set, -1, ("AllGather", "no tiling"), (PROBE, 0, *AFTER[1:])
    ),
    # ------------------------------------------------------------- Commit
    "commit/unknown-handle": Rule(
        _commit_unknown, None, ("handle 1", "never returned"), (PROBE, 0, 0)
    ),
    "commit/before-any-prepare": Rule(
        _commit_before_prepare, None, ("handle 0", "never returned"), AFTER
    ),
    "commit/extra": Rule(
        _extra_commit,
        None,
        ("extra Commit", "2 rounds", "handle 0"),
        (PROBE, 0, 0, 2),
        carries_on="extra-commit",
    ),
    "commit/not-initialised": Rule(
        uninitialised(lambda h, e: h.Commit(0)), None, ("Commit", "not initialised")
    ),
    # --------------------------------------------------------------- Wait
    "wait/-1": Rule(
        after_one_gather(lambda h, e, hd: h.Wait(-1)),
        -1,
        ("handle -1", *INVALID_HANDLE),
        (PROBE, 0),
    ),
    "wait/63": Rule(after_one_gather(lambda h, e, hd: h.Wait(63)), -1, ("handle 63",), (PROBE, 0)),
    "wait/never-returned": Rule(
        after_one_gather(lambda h, e, hd: h.Wait(hd + 1)), -1, ("handle 1",), (PROBE, 0)
    ),
    "wait/not-initialised": Rule(
        uninitialised(lambda h, e: h.Wait(0)), -1, ("Wait", "not initialised")
    ),
    "wait/before-Commit": Rule(
        after_one_gather(lambda h, e, hd: h.Wait(hd), commit=False),
        -1,
        ("round 0", "not committed", "handle 0", "AllGather"),
        (PROBE, 0),
        carries_on="wait-not-committed",
    ),
    "wait/uncommitted-second-round": Rule(
        _wait_uncommitted_round,
        -1,
        ("round 1", "not committed"),
        (0, PROBE, 0),
        carries_on="wait-not-committed",
    ),
    "wait/more-than-repeat": Rule(
        _wait_too_often, -1, ("already waited",), (0, PROBE), carries_on="wait-not-committed"
    ),
    # -------------------------------------------------------------- Query
    "query/-1": Rule(
        after_one_gather(lambda h, e, hd: h.Query(-1)), -1, ("handle -1",), (PROBE, 0)
    ),
    "query/63": Rule(
        after_one_gather(lambda h, e, hd: h.Query(63)), -1, ("handle 63",), (PROBE, 0)
    ),
    "query/never-returned": Rule(
        after_one_gather(lambda h, e, hd: h.Query(hd + 1)), -1, ("handle 1",), (PROBE, 0)
    ),
    "query/not-initialised": Rule(
        uninitialised(lambda h, e: h.Query(0)), -1, ("Query", "not initialised")
    ),
    # ----------------------------------------------------------- Finalize
    "finalize/async-on-A2": Rule(
        _finalize_async, None, ("Finalize<false>", "Atlas A2"), (0, PROBE, -1)
    ),
    "finalize/async-on-A3-without-BatchWrite": Rule(
        _finalize_async, None, ("Finalize<false>", "BatchWrite"), (0, PROBE, -1), platform="A3"
    ),
    "finalize/not-initialised": Rule(
        uninitialised(lambda h, e: h.Finalize()), None, ("Finalize", "not initialised")
    ),
    "GetRankId/not-initialised": Rule(
        uninitialised(lambda h, e: h.GetRankId()), 0xFFFFFFFF, ("GetRankId", "not initialised")
    ),
    "GetRankDim/not-initialised": Rule(
        uninitialised(lambda h, e: h.GetRankDim()), 0xFFFFFFFF, ("GetRankDim", "not initialised")
    ),
    # ----------------------------------------------------------- tilings
    "SetCcTilingV2/offset-0": Rule(
        _set_cc(lambda: 0), HCCL_FAILED, ("SetCcTilingV2(0)", "bad offset"), (PROBE, 0, *AFTER[1:])
    ),
    "SetCcTilingV2/past-the-end": Rule(
        _set_cc(lambda: ctypes.sizeof(cases.KernelTiling)),
        HCCL_FAILED,
        ("SetCcTilingV2", "bad offset"),
        (PROBE, 0, *AFTER[1:]),
    ),
    "SetCcTilingV2/not-a-cc-tiling": Rule(
        _set_cc(lambda: cases.cc_offset("AllGather") + 256),
        HCCL_FAILED,
        ("opType 1818452840", "not below HCCL_CMD_ALL (21)"),
        (PROBE, 0, *AFTER[1:]),
    ),
    "SetCcTilingV2/not-initialised": Rule(
        uninitialised(lambda h, e: h.SetCcTilingV2(cases.cc_offset("AllGather"))),
        HCCL_FAILED,
        ("SetCcTilingV2", "not initialised"),
    ),
    "SetCcTiling/after-InitV2": Rule(
        _set_cc_tiling_after("InitV2"),
        HCCL_FAILED,
        ("SetCcTiling", "Init(context, initTiling)"),
        AFTER,
    ),
    "SetCcTilingV2/after-Init-with-tiling": Rule(
        _set_cc_v2_after_init_with_tiling,
        HCCL_FAILED,
        ("SetCcTilingV2", "InitV2", "do not mix"),
        AFTER,
    ),
    "Query/on-950-CCU": Rule(
        _query_on_ccu,
        -1,
        ("Query", "CCU client", "Ascend 950"),
        (PROBE, 0),
        platform="950",
    ),
    "InitV2/CCU-server-on-A2": Rule(
        lambda h, e: _probe_ccu_init(e),
        None,
        ("InitV2", "HCCL_SERVER_TYPE_CCU", "Atlas A2"),
        (PROBE,),
    ),
    "InitV2/second": Rule(
        _second_init,
        None,
        ("already initialised", "Init repeatedly is not allowed", "keeps the first Init"),
        AFTER,
        carries_on="repeated-init",
    ),
    "SetCcTiling/after-Init-without-tiling": Rule(
        _set_cc_tiling_after("Init"), HCCL_FAILED, ("SetCcTiling", "must not be mixed"), AFTER
    ),
}


def _rule_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list, name: str, nullGM: Any) -> None:
    RULES[name].script(Hccl(), Env(xGM, yGM, tilingGM, record, nullGM))


def run_rule(backend: str, name: str, strict: bool, **options: Any) -> list:
    """Run rule ``name`` on WORLD ranks; per rank (record, y)."""
    return hp.run(
        cases.probe,
        world_size=WORLD,
        backend=backend,
        platform=RULES[name].platform,
        timeout=RUN_TIMEOUT,
        strict=strict,
        args=(_rule_kernel, name, None),
        **options,
    )


def assert_facts(text: str, facts: tuple[str, ...], rank: int) -> None:
    """The reason names every fact and the rank."""
    for fact in (*facts, f"rank {rank}"):
        assert fact in text, f"{fact!r} missing from {text!r}"


def assert_raised(rule: Rule, world_error: hp.WorldError) -> None:
    """Every rank that failed first raised the rule's error naming its facts; others stopped."""
    roots = world_error.root_causes
    assert roots, world_error
    for rank, err in world_error.failures.items():
        if rank not in roots:
            assert isinstance(err, hp.HcclPeerError), (rank, err)
            continue
        assert type(err) is rule.cls, (rank, type(err), err)
        assert_facts(str(err), rule.facts, rank)
        assert err.rank == rank


def _rule_params() -> list[Any]:
    """Every rule; one that carries on with a warning expects that warning kind."""
    return [
        pytest.param(name, marks=[expects_warning(rule.carries_on)] if rule.carries_on else [])
        for name, rule in RULES.items()
    ]


@pytest.mark.parametrize("name", _rule_params())
def test_rule_returns_cpp_code_when_not_strict(backend: str, name: str) -> None:
    rule = RULES[name]
    if rule.cls.always_raise:  # memory-corrupting misuse raises in every mode
        with pytest.raises(hp.WorldError) as info:
            run_rule(backend, name, strict=False)
        assert_raised(rule, info.value)
        return
    assert_cpp_result(rule, run_rule(backend, name, strict=False))


def assert_cpp_result(rule: Rule, out: list) -> None:
    """Every rank recorded the C++ results the rule expects, and the reason for the probe."""
    for rank, (record, _) in enumerate(out):
        assert len(record) == len(rule.record), (rank, record)
        for got, want in zip(record, rule.record, strict=True):
            if want == PROBE:
                tag, ret, reason = got
                assert (tag, ret) == (PROBE, rule.ret), (rank, got)
                assert reason is not None, "last_error must say why"
                assert_facts(reason, rule.facts, rank)
            else:
                assert got == want, (rank, record)


@pytest.mark.parametrize("name", _rule_params())
def test_rule_raises_when_strict(backend: str, name: str) -> None:
    rule = RULES[name]
    if rule.carries_on is not None:  # the official client logs and returns: so do we
        out = run_rule(backend, name, strict=True)
        assert_cpp_result(rule, out)
        kinds = {w.kind for w in out.all_warnings()}
        assert kinds == ({rule.carries_on} if rule.carries_on else set()), kinds
        for rank, found in out.warnings.items():  # every report names rank and domain
            assert all(w.rank == rank and w.domain == "hccl_world_group" for w in found)
            if "handle 0" in rule.facts:
                assert all(w.op == "AllGather" and w.handle == 0 for w in found)
        if rule.carries_on:
            with pytest.raises(hp.WorldError) as info:
                run_rule(backend, name, strict=True, warnings_as_errors={rule.carries_on})
            assert_raised(rule, info.value)
            assert rule.carries_on in str(info.value)
        return
    with pytest.raises(hp.WorldError) as info:
        run_rule(backend, name, strict=True)
    assert_raised(rule, info.value)


# ------------------------------------------------------------ handle limit


def _limit_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list, syncs: int) -> None:
    """Domain 1 prepares one task; domain 0 syncs on it ``syncs`` times, then prepares until -1.
    The domains write different bytes of y: with no sync nothing orders their tasks."""
    h0 = init_hccl(Hccl(), tilingGM, 0, ("AllReduce",))
    h1 = init_hccl(Hccl(), tilingGM, 1, ("AllReduce",))
    src = h1.AllReduce[True](xGM, yGM + 8, 1, FP32, SUM)
    for _ in range(syncs):
        h0.InterHcclGroupSync(1, src)
    handles = []
    while len(handles) < 70:
        hd = h0.AllReduce[True](xGM, yGM, 1, FP32, SUM)
        if hd < 0:
            break
        handles.append(hd)
    record.append((handles, h0.last_error))
    h0.InterHcclGroupSync(1, src)
    record.append(h0.last_error)
    record.append(h1.AllReduce[True](xGM + 4, yGM + 4, 1, FP32, SUM))  # domain 1 has room
    record.append([h0.Wait(hd) for hd in handles] + [h1.Wait(src), h1.Wait(1)])
    hp.SyncAll()
    try:  # the official client counted the refused Prepare: its Finalize never returns
        h0.Finalize()
    except hp.HcclUnfinishedError as exc:
        record.append(str(exc))
    h1.Finalize()


@expects_warning("message-slots")
@pytest.mark.parametrize(
    ("platform", "syncs", "n_handles"),
    [("A2", 0, 63), ("A2", 1, 62), ("A2", 63, 0), ("A3", 0, 63), ("A3", 1, 62), ("A3", 5, 58)],
)
def test_63_task_limit(backend: str, platform: str, syncs: int, n_handles: int) -> None:
    """63 handles per domain; every InterHcclGroupSync takes a message slot too (64 per queue,
    the last one Finalize's): the official client's code is the same on A2 and A3."""
    out = hp.run(
        limit_rank,
        world_size=WORLD,
        backend=backend,
        platform=platform,
        timeout=RUN_TIMEOUT,
        strict=False,
        args=(syncs,),
    )
    for rank, (record, y) in enumerate(out):
        (handles, reason), sync_error, other, waits, finalize_error = record
        assert_facts(finalize_error, ("Finalize after a Prepare was refused", "never return"), rank)
        assert handles == list(range(n_handles)), rank
        assert_facts(reason, ("63",), rank)
        # the domain is full: the sync itself is ignored (a warning; it returns nothing)
        assert_facts(sync_error, ("InterHcclGroupSync", "63", "message slots"), rank)
        assert other == 1, "domain 1 counts its own handles"
        assert waits == [0] * (n_handles + 2)
        total = WORLD * (WORLD + 1) / 2
        assert y[1] == total and y[2] == total and y[0] == (total if n_handles else 0)


def limit_rank(syncs: int) -> tuple[list, np.ndarray]:
    """Per rank: the handle-limit kernel on two domains."""
    return cases.probe(_limit_kernel, syncs, domains=2)


def _limit_strict_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    h0 = init_hccl(Hccl(), tilingGM, 0, ("AllReduce",))
    for _ in range(64):
        h0.AllReduce[True](xGM, yGM, 1, FP32, SUM)


def test_64th_prepare_raises_when_strict(backend: str) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(
            cases.probe,
            world_size=WORLD,
            backend=backend,
            timeout=RUN_TIMEOUT,
            args=(_limit_strict_kernel,),
        )
    for rank, err in info.value.root_causes.items():
        assert isinstance(err, hp.HcclUsageError)
        assert_facts(str(err), ("AllReduce", "63 handles"), rank)


# ------------------------------------------------------------ valid flows


def _sequence_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Handles 0, 1, 2 in Prepare order across op kinds, each result in its own part of y."""
    hccl = init_hccl(Hccl(), tilingGM)
    n = hccl.GetRankDim()
    handles = [
        hccl.AllReduce[True](xGM, yGM, COUNT, FP32, SUM),
        hccl.AllGather[True](xGM, yGM + 16 * 4, COUNT, FP32),
        hccl.ReduceScatter[True](xGM, yGM + 64 * 4, 2, FP32, SUM),
    ]
    record.append((handles, [hccl.Wait(h) for h in handles], hccl.GetRankId(), n))
    hccl.Finalize()


def test_handles_are_sequential_and_results_land(backend: str) -> None:
    out = hp.run(
        cases.probe, world_size=3, backend=backend, timeout=RUN_TIMEOUT, args=(_sequence_kernel,)
    )
    n = 3
    total = n * (n + 1) / 2
    for rank, (record, y) in enumerate(out):
        assert record == [([0, 1, 2], [0, 0, 0], rank, n)]
        np.testing.assert_array_equal(y[:COUNT], [total] * COUNT)
        np.testing.assert_array_equal(y[16 : 16 + COUNT * n], np.repeat(np.arange(1, n + 1), COUNT))
        np.testing.assert_array_equal(y[64:66], [total, total])
        assert not y[COUNT:16].any() and not y[16 + COUNT * n : 64].any() and not y[66:].any()


def _commit_styles_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """The same AllGather with [True], commit=True, explicit Commits; dtype as enum or int."""
    hccl = init_hccl(Hccl(), tilingGM)
    region = 32 * 4  # bytes between the parts of y
    handles = [
        hccl.AllGather[True](xGM, yGM, COUNT, FP32, 0, 1),
        hccl.AllGather(xGM, yGM + region, COUNT, int(FP32), 0, 1, commit=True),
        hccl.AllGather[False](xGM, yGM + 2 * region, COUNT, FP32, 2 * COUNT, 2),
        hccl.AllGather(xGM, yGM + 4 * region, COUNT, 4),
    ]
    for hd in (handles[2], handles[2], handles[3]):
        hccl.Commit(hd)
    record.append((handles, [hccl.Wait(h) for h in (0, 1, 2, 2, 3)]))
    hccl.Finalize()


def test_commit_styles_and_dtype_forms_agree(backend: str) -> None:
    out = hp.run(
        cases.probe,
        world_size=WORLD,
        backend=backend,
        timeout=RUN_TIMEOUT,
        args=(_commit_styles_kernel,),
    )
    block = np.repeat(np.arange(1, WORLD + 1, dtype=np.float32), COUNT)
    two_rounds = np.repeat(np.arange(1, WORLD + 1, dtype=np.float32), 2 * COUNT)
    for record, y in out:
        assert record == [([0, 1, 2, 3], [0] * 5)]
        for part in (0, 1, 4):
            np.testing.assert_array_equal(y[part * 32 : part * 32 + COUNT * WORLD], block)
        np.testing.assert_array_equal(y[64 : 64 + 2 * COUNT * WORLD], two_rounds)


def _query_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Query before any Commit, after each Commit, after the Waits."""
    hccl = init_hccl(Hccl(), tilingGM)
    hd = hccl.AllGather(xGM, yGM, COUNT, FP32, STRIDE, 3)
    seen = [hccl.Query(hd)]
    for _ in range(3):
        hccl.Commit(hd)
        seen.append(hccl.Query(hd))
    waits = [hccl.Wait(hd) for _ in range(3)]
    seen.append(hccl.Query(hd))
    record.append((seen, waits))
    hccl.Finalize()


@pytest.mark.parametrize("schedule", ["eager", "late"])
@pytest.mark.parametrize("world", [1, WORLD])
def test_query_counts_finished_rounds(backend: str, schedule: str, world: int) -> None:
    out = hp.run(
        cases.probe,
        world_size=world,
        backend=backend,
        schedule=schedule,
        timeout=RUN_TIMEOUT,
        args=(_query_kernel,),
    )
    for record, _ in out:
        [(seen, waits)] = record
        assert waits == [0, 0, 0]
        assert seen[0] == 0 and seen[-1] == 3, seen
        assert seen == sorted(seen) and all(0 <= q <= 3 for q in seen), seen
        if world == 1:  # only this rank commits: each Commit lets exactly one round run
            assert seen == [0, 1, 2, 3, 3]


def _init_v1_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list, with_tiling: bool) -> None:
    """Deprecated Init: without tiling no SetCcTiling is needed; with it, SetCcTiling(address)."""
    hccl = Hccl()
    if with_tiling:
        hccl.Init(hp.GetHcclContext(0), tilingGM)
        record.append(hccl.SetCcTiling(tilingGM + cases.cc_offset("AllReduce")))
    else:
        hccl.Init(hp.GetHcclContext(0))
    hd = hccl.AllReduce[True](xGM, yGM, COUNT, FP32, SUM)
    record.append((hd, hccl.Wait(hd)))
    hccl.Finalize()


@pytest.mark.parametrize("with_tiling", [False, True], ids=["no-tiling", "SetCcTiling"])
def test_deprecated_init(backend: str, with_tiling: bool) -> None:
    out = hp.run(
        cases.probe,
        world_size=WORLD,
        backend=backend,
        timeout=RUN_TIMEOUT,
        args=(_init_v1_kernel, with_tiling),
    )
    for record, y in out:
        assert record == ([HCCL_SUCCESS] if with_tiling else []) + [(0, 0)]
        np.testing.assert_array_equal(y[:COUNT], [WORLD * (WORLD + 1) / 2] * COUNT)
        assert not y[COUNT:].any()


def _no_wait_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Compute-then-communicate: Prepare early, Commit later, no Wait; Finalize waits."""
    hccl = init_hccl(Hccl(), tilingGM, ops=("AllReduce",))
    hd = hccl.AllReduce(xGM, yGM, COUNT, FP32, SUM, 2)
    hccl.Commit(hd)
    hccl.Commit(hd)
    hccl.Finalize()
    record.append(hd)


@pytest.mark.parametrize("schedule", ["eager", "late"])
def test_finalize_waits_for_the_last_task(backend: str, schedule: str) -> None:
    out = hp.run(
        cases.probe,
        world_size=WORLD,
        backend=backend,
        schedule=schedule,
        timeout=RUN_TIMEOUT,
        args=(_no_wait_kernel,),
    )
    for record, y in out:
        assert record == [0]
        np.testing.assert_array_equal(y[: 2 * COUNT], [WORLD * (WORLD + 1) / 2] * (2 * COUNT))
        assert not y[2 * COUNT :].any()
