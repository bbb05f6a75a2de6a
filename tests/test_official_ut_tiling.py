"""The official host tiling unit tests (Mc2CcTilingConfig), case by case, against hccl_py.

asc-devkit (mirror-cann 82b89a15) tests ``Mc2CcTilingConfig``
(``impl/adv_api/tiling/hccl/hccl_tiling.cpp``) in
``tests/api/adv_api/tiling/test_hccl_tiling.cpp``. Each test here is named after the official
case it follows and asserts what hccl_py's builder returns for it (0, or 1 as C++'s
EXIT_FAILURE), and what the tilings it fills hold. The builder is host code: it runs outside
``hp.run`` here, where a failure returns 1 as in C++; inside a strict ``hp.run`` the same
failure raises ``HcclUsageError`` (docs/fidelity.md, "a failed Mc2CcTilingConfig setter"),
and ``SetStepSize`` asks the run's platform, so the cases that touch it run in one.

Not ported: the five ``TestHcclSymbolLoader.Load_*`` cases (``Load_validPath_success``,
``Load_cached_returnsSamePointer``, ``Load_invalidPath_returnsNull``,
``Load_emptyPath_returnsNull``, ``Load_invalidSymbol_returnsNull``) test the dlopen/dlsym
loader of ``libruntime.so``, which hccl_py does not have; ``GetInitTiling_ascendHomeUnset_failure``
and ``GetInitTiling_ascendHomeEmpty_failure`` test that ``SetDevType`` finds no CANN
installation through ``ASCEND_HOME_PATH`` (hccl_tiling.cpp:64-72). hccl_py reads no
installation: ``devType`` is the constructor's keyword (docs/api.md), so there is nothing to
be missing.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
from cases import RUN_TIMEOUT

import hccl_py as hp
from hccl_py import HcclCMDType, HcclDataType, HcclReduceOp, Mc2CcTiling, Mc2InitTiling
from hccl_py.tiling.structs import MAX_CC_TILING_NUM

OK, FAIL = 0, 1  # EXIT_SUCCESS, EXIT_FAILURE
RESERVED_OP = HcclReduceOp.HCCL_REDUCE_RESERVED
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
VALUE128 = "".join(str(i % 10) for i in range(128))  # the UT's value128
VALUE129 = VALUE128 + "8"


class InitAndCc(hp.TilingData):
    """An init tiling followed by one cc tiling, as in a kernel's tiling struct."""

    _fields_ = [("init", Mc2InitTiling), ("cc", Mc2CcTiling)]


def _in_run(fn: Any, platform: str) -> Any:
    """``fn()`` on the one rank of a lenient ``hp.run`` of ``platform``."""
    return hp.run(fn, world_size=1, platform=platform, strict=False, timeout=RUN_TIMEOUT)[0]


def _normal(t: InitAndCc) -> list[int]:
    """Mc2CcTilingConfig_normal's calls, in order, with their results."""
    cfg = hp.Mc2CcTilingConfig("test", 1, "fullmesh", 1)
    got = [cfg.SetDebugMode(1), cfg.SetQueueNum(40), cfg.SetCommBlockNum(48)]
    got += [cfg.GetTiling(t.init), cfg.SetOpType(0), cfg.SetGroupName("test1")]
    got += [cfg.SetAlgConfig("doublering"), cfg.SetReduceType(0), cfg.SetStepSize(1)]
    got += [cfg.SetSkipLocalRankCopy(1), cfg.SetSkipBufferWindowCopy(1), cfg.SetCommEngine(1)]
    return got + [cfg.GetTiling(t.cc)]


@pytest.mark.parametrize("platform", ["A2", "A3"])
def test_Mc2CcTilingConfig_normal(platform: str) -> None:
    """Mc2CcTilingConfig_normal: every setter 0 but SetOpType(0) (0 < opType < HCCL_CMD_ALL);
    SetStepSize 0 on DAV_2201, the arch of A2 and A3 (hccl_tiling.cpp:245-256); both GetTilings
    0. The init tiling holds version 100, debugMode 1, queueNum 40, commBlockNum 48, devType 255
    (the UT's SoC is not 910B; an A2 run's is: 1) and, after the cc tiling, one offset; the cc tiling holds what was
    set, and opType 1 from the constructor."""
    t = InitAndCc()
    got = _in_run(lambda: _normal(t), platform)
    assert got == [OK] * 4 + [FAIL] + [OK] * 8
    init, cc = t.init, t.cc
    assert (init.version, init.mc2HcommCnt, init.offset[0]) == (100, 1, 64)
    dev_type = 1 if platform == "A2" else 255
    assert (init.debugMode, init.queueNum, init.commBlockNum, init.devType) == (1, 40, 48, dev_type)
    assert (cc.groupName, cc.algConfig, cc.opType, cc.reduceType) == (b"test1", b"doublering", 1, 0)
    assert (cc.stepSize, cc.skipLocalRankCopy, cc.skipBufferWindowCopy) == (1, 1, 1)
    assert (cc.commEngine, cc.version) == (1, 1)


def test_Mc2CcTilingConfig_normal_SetStepSize_on_950() -> None:
    """Mc2CcTilingConfig_normal's other branch: on an arch other than DAV_2201 (Ascend 950)
    SetStepSize is 1 and the cc tiling's stepSize stays 0."""
    t = InitAndCc()
    got = _in_run(lambda: _normal(t), "950")
    assert got[8] == FAIL and t.cc.stepSize == 0


def test_Mc2CcTilingConfig_failed1() -> None:
    """Mc2CcTilingConfig_failed1: SetOpType(HCCL_CMD_ALL), 129-byte names, SetReduceType(RESERVED),
    SetSkipLocalRankCopy(2) and SetSkipBufferWindowCopy(3) are 1; 128-byte names pass the
    setters; GetTiling(Mc2CcTiling) before any init tiling is 1. Past the UT: with an init
    tiling it is still 1, since strcpy_s finds no room for the NUL after 128 bytes
    (hccl_tiling.cpp:180-183); with 127-byte names it is 0, and the failed setters changed
    nothing (reduceType 1, skips 0)."""
    t = InitAndCc()
    cfg = hp.Mc2CcTilingConfig("test", 1, "fullmesh", 1)
    got = [cfg.SetOpType(HcclCMDType.HCCL_CMD_ALL), cfg.SetGroupName(VALUE129)]
    got += [cfg.SetGroupName(VALUE128), cfg.SetAlgConfig(VALUE129), cfg.SetAlgConfig(VALUE128)]
    got += [cfg.SetReduceType(RESERVED_OP), cfg.SetSkipLocalRankCopy(2)]
    got += [cfg.SetSkipBufferWindowCopy(3), cfg.GetTiling(t.cc)]
    assert got == [FAIL, FAIL, OK, FAIL, OK, FAIL, FAIL, FAIL, FAIL]
    assert t.cc.version == 0 and t.init.mc2HcommCnt == 0  # nothing written
    assert cfg.GetTiling(t.init) == OK and cfg.GetTiling(t.cc) == FAIL
    assert "strcpy_s" in str(cfg.last_error) and t.init.mc2HcommCnt == 0
    assert cfg.SetGroupName(VALUE128[:127]) == OK and cfg.SetAlgConfig(VALUE128[:127]) == OK
    assert cfg.GetTiling(t.cc) == OK
    assert (t.cc.opType, t.cc.reduceType, t.cc.skipLocalRankCopy, t.cc.skipBufferWindowCopy) == (
        1,
        1,
        0,
        0,
    )


def test_Mc2CcTilingConfig_failed2() -> None:
    """Mc2CcTilingConfig_failed2: an AllReduce config with reduceType RESERVED:
    GetTiling(Mc2InitTiling) is 1 and writes nothing (the check comes first,
    hccl_tiling.cpp:124-131), nor does it count as the init tiling (GetTiling(Mc2CcTiling) is
    then 1). After SetOpType(HCCL_CMD_SEND), not a reduce op, GetTiling(Mc2InitTiling) is 0."""
    t = InitAndCc()
    cfg = hp.Mc2CcTilingConfig("test", HcclCMDType.HCCL_CMD_ALLREDUCE, "fullmesh", RESERVED_OP)
    assert cfg.GetTiling(t.init) == FAIL and t.init.version == 0
    assert cfg.GetTiling(t.cc) == FAIL and "Mc2InitTiling" in str(cfg.last_error)
    assert cfg.SetOpType(HcclCMDType.HCCL_CMD_SEND) == OK
    assert cfg.GetTiling(t.init) == OK and t.init.version == 100


def test_Mc2CcTilingConfig_failed3() -> None:
    """Mc2CcTilingConfig_failed3: GetTiling(Mc2CcTiling) without an init tiling taken by this
    config is 1 ("must be set Mc2InitTiling first", hccl_tiling.cpp:153) and writes nothing."""
    t = InitAndCc()
    cfg = hp.Mc2CcTilingConfig("test", 1, "fullmesh", 1)
    assert cfg.GetTiling(t.cc) == FAIL and t.cc.version == 0 and t.cc.opType == 0


def test_Mc2CcTilingConfig_SetReduceType_ReduceOp() -> None:
    """Mc2CcTilingConfig_SetReduceType_ReduceOp: a ReduceScatter config built with reduceType
    RESERVED: SetReduceType(SUM, FP16, FP16) is 0; a dstDataType or srcDataType of 255 (the UT's
    uint8_t -1, HCCL_DATA_TYPE_RESERVED) is 1 and changes nothing: the cc tiling keeps SUM and
    FP16."""
    t = InitAndCc()
    alg = "ReduceScatter=level0:doublering"
    cfg = hp.Mc2CcTilingConfig("testGroup", HcclCMDType.HCCL_CMD_REDUCE_SCATTER, alg, 4, FP16, FP16)
    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_SUM, FP16, FP16) == OK
    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_SUM, 255, FP16) == FAIL
    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_SUM, FP16, 255) == FAIL
    assert cfg.GetTiling(t.init) == OK and cfg.GetTiling(t.cc) == OK
    assert (t.cc.reduceType, t.cc.dstDataType, t.cc.srcDataType) == (0, FP16, FP16)


def test_Mc2CcTilingConfig_SetReduceType_NotReduceOp() -> None:
    """Mc2CcTilingConfig_SetReduceType_NotReduceOp: an AllGather config built with reduceType
    RESERVED: SetReduceType(SUM, FP16, FP16) is 0. Past the UT: before it, GetTiling(Mc2InitTiling)
    is 0 (only reduce ops check reduceType there) but GetTiling(Mc2CcTiling) is 1 (it checks
    reduceType for every op, hccl_tiling.cpp:164-166); after it, 0."""
    t = InitAndCc()
    alg = "AllGather=level0:doublering"
    cfg = hp.Mc2CcTilingConfig("testGroup", HcclCMDType.HCCL_CMD_ALLGATHER, alg, 4, FP16, FP16)
    assert cfg.GetTiling(t.init) == OK and cfg.GetTiling(t.cc) == FAIL
    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_SUM, FP16, FP16) == OK
    assert cfg.GetTiling(t.cc) == OK and t.cc.reduceType == 0 and t.init.mc2HcommCnt == 1


def test_Mc2CcTilingConfig_multiTiling() -> None:
    """Mc2CcTilingConfig_multiTiling: one init tiling registers 8 cc tilings (MAX_CC_TILING_NUM);
    the 9th GetTiling(Mc2CcTiling) is 1 and the count stays 8 (UpdateMc2InitTiling,
    hccl_tiling.cpp:88-90). Each registration stores the cc tiling's offset from the init."""
    t = InitAndCc()
    cfg = hp.Mc2CcTilingConfig("test", 1, "fullmesh", 1)
    assert cfg.GetTiling(t.init) == OK
    assert [cfg.GetTiling(t.cc) for _ in range(9)] == [OK] * 8 + [FAIL]
    assert MAX_CC_TILING_NUM == 8 and t.init.mc2HcommCnt == 8
    assert list(t.init.offset) == [InitAndCc.cc.offset] * 8 == [ctypes.sizeof(Mc2InitTiling)] * 8


@pytest.mark.parametrize(("dev_type", "written"), [(None, 255), (1, 1)])
def test_GetInitTiling_withValidAscendHome_success(dev_type: int | None, written: int) -> None:
    """GetInitTiling_withValidAscendHome_success: with a CANN installation SetDevType reads the SoC
    and GetTiling(Mc2InitTiling) is 0; it writes devType 1 for an "Ascend910B" SoC, else 255
    (hccl_tiling.cpp:76-80). hccl_py takes the SoC's value from the devType keyword."""
    t = InitAndCc()
    extra = {} if dev_type is None else {"devType": dev_type}
    cfg = hp.Mc2CcTilingConfig("test", 1, "fullmesh", 1, **extra)
    assert cfg.GetTiling(t.init) == OK and t.init.devType == written


@pytest.mark.parametrize(("platform", "written"), [("A2", 1), ("A3", 255), ("950", 255)])
def test_the_default_dev_type_is_the_platform_s(platform: str, written: int) -> None:
    """Not a UT case: inside a run the default devType is what SetDevType writes on that
    platform's SoC: "Ascend910B..." (A2) gives ASCEND910B (1), "Ascend910_93" (A3) and 950 255."""

    def main() -> int:
        t = InitAndCc()
        assert hp.Mc2CcTilingConfig("test", 1, "fullmesh", 1).GetTiling(t.init) == OK
        return t.init.devType

    assert hp.run(main, world_size=1, platform=platform, timeout=RUN_TIMEOUT) == [written]


def test_a_failed_setter_raises_in_a_strict_run() -> None:
    """Not a UT case: Mc2CcTilingConfig_normal's SetOpType(0) inside a strict hp.run raises
    HcclUsageError at the call (docs/fidelity.md, deliberate)."""

    def main() -> None:
        hp.Mc2CcTilingConfig("test", 1, "fullmesh", 1).SetOpType(0)

    with pytest.raises(hp.WorldError, match="HcclUsageError.*SetOpType"):
        hp.run(main, world_size=1, timeout=RUN_TIMEOUT)
