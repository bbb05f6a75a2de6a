"""Tests of hccl_py.tiling: byte layout, the Mc2CcTilingConfig builder and the helpers."""

from __future__ import annotations

import ctypes
import struct

import pytest
import torch
from expect import expects_warning

import hccl_py as hp
from hccl_py.core.constants import HcclCMDType, HcclDataType, HcclReduceOp
from hccl_py.tiling import (
    GET_TILING_DATA_WITH_STRUCT,
    TILING_FAILED,
    TILING_SUCCESS,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    cc_alg_config,
    cc_group_name,
    offsetof,
    read_cc_tiling,
    tiling_bytes,
)

ALLGATHER = HcclCMDType.HCCL_CMD_ALLGATHER
ALLREDUCE = HcclCMDType.HCCL_CMD_ALLREDUCE
AG_ALG = "AllGather=level0:doublering"
AR_ALG = "AllReduce=level0:doublering"
GROUP = "hccl_world_group"
#: Setter tests change the op type or the algConfig alone: the mismatch warning is expected.
EXPECTS_ALG_CONFIG = expects_warning("alg-config")


class TwoCcTiling(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("a", Mc2CcTiling),
        ("b", Mc2CcTiling),
    ]


class OneCcTiling(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("cc", Mc2CcTiling),
        ("myField", ctypes.c_uint32),
    ]


class NineCcTiling(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling)] + [(f"cc{i}", Mc2CcTiling) for i in range(9)]


def u32(raw: bytes, offset: int) -> int:
    return struct.unpack_from("<I", raw, offset)[0]


def u16(raw: bytes, offset: int) -> int:
    return struct.unpack_from("<H", raw, offset)[0]


def fill(obj: ctypes.Structure, byte: int) -> None:
    ctypes.memset(ctypes.addressof(obj), byte, ctypes.sizeof(obj))


def build(cfg: Mc2CcTilingConfig) -> OneCcTiling:
    """A fresh {init; cc; myField} tiling filled by cfg (both GetTiling calls must succeed)."""
    tiling = OneCcTiling()
    assert cfg.GetTiling(tiling.mc2InitTiling) == TILING_SUCCESS, cfg.last_error
    assert cfg.GetTiling(tiling.cc) == TILING_SUCCESS, cfg.last_error
    return tiling


# ---------------------------------------------------------------- layout


INIT_LAYOUT = [
    ("version", 0, 4),
    ("mc2HcommCnt", 4, 4),
    ("offset", 8, 32),
    ("debugMode", 40, 1),
    ("preparePosition", 41, 1),
    ("queueNum", 42, 2),
    ("commBlockNum", 44, 2),
    ("devType", 46, 1),
    ("reserved", 47, 17),
]

CC_LAYOUT = [
    ("skipLocalRankCopy", 0, 1),
    ("skipBufferWindowCopy", 1, 1),
    ("stepSize", 2, 1),
    ("version", 3, 1),
    ("reserved", 4, 9),
    ("commEngine", 13, 1),
    ("srcDataType", 14, 1),
    ("dstDataType", 15, 1),
    ("groupName", 16, 128),
    ("algConfig", 144, 128),
    ("opType", 272, 4),
    ("reduceType", 276, 4),
    ("reserved2", 280, 232),
]


@pytest.mark.parametrize(
    ("struct_type", "size", "layout"),
    [(Mc2InitTiling, 64, INIT_LAYOUT), (Mc2CcTiling, 512, CC_LAYOUT)],
)
def test_struct_layout_byte_for_byte(struct_type, size, layout):
    assert ctypes.sizeof(struct_type) == size
    assert [f[0] for f in struct_type._fields_] == [name for name, _, _ in layout]
    for name, offset, nbytes in layout:
        field = getattr(struct_type, name)
        assert (field.offset, field.size) == (offset, nbytes), name
    last_name, last_offset, last_size = layout[-1]
    assert last_offset + last_size == size


def test_tiling_structs_have_alignment_one_like_the_cpp_types():
    assert ctypes.alignment(Mc2InitTiling) == 1
    assert ctypes.alignment(Mc2CcTiling) == 1

    class OddTiling(TilingData):
        _fields_ = [("init", Mc2InitTiling), ("flag", ctypes.c_uint8), ("cc", Mc2CcTiling)]

    assert OddTiling.cc.offset == 65
    assert ctypes.sizeof(OddTiling) == 64 + 1 + 512


def test_tiling_data_members_follow_c_layout():
    assert TwoCcTiling.a.offset == 64
    assert TwoCcTiling.b.offset == 576
    assert ctypes.sizeof(TwoCcTiling) == 1088
    assert OneCcTiling.myField.offset == 576
    assert ctypes.sizeof(OneCcTiling) == 580

    class Natural(TilingData):
        _fields_ = [("flag", ctypes.c_uint8), ("value", ctypes.c_uint32)]

    assert Natural.value.offset == 4
    assert ctypes.sizeof(Natural) == 8


def test_bytes_of_a_tiling_data_instance_is_the_c_struct():
    tiling = OneCcTiling()
    tiling.mc2InitTiling.version = 0x01020304
    tiling.cc.opType = 0x0A0B0C0D
    tiling.myField = 0xDEADBEEF
    raw = bytes(tiling)
    assert len(raw) == 580
    assert raw[0:4] == b"\x04\x03\x02\x01"
    assert raw[64 + 272 : 64 + 276] == b"\x0d\x0c\x0b\x0a"
    assert u32(raw, 576) == 0xDEADBEEF
    assert raw.count(0) == 580 - 12


# ---------------------------------------------------------------- GetTiling


def test_get_tiling_writes_the_documented_bytes():
    tiling = TwoCcTiling()
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.GetTiling(tiling.mc2InitTiling) == TILING_SUCCESS
    assert cfg.GetTiling(tiling.a) == TILING_SUCCESS
    assert cfg.SetOpType(ALLREDUCE) == 0
    assert cfg.SetAlgConfig(AR_ALG) == 0
    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_MAX) == 0
    assert cfg.GetTiling(tiling.b) == TILING_SUCCESS
    assert cfg.last_error is None

    raw = bytes(tiling)
    assert u32(raw, 0) == 100
    assert u32(raw, 4) == 2
    assert [u32(raw, 8 + 4 * i) for i in range(8)] == [64, 576, 0, 0, 0, 0, 0, 0]
    assert raw[40] == 0 and raw[41] == 0
    assert u16(raw, 42) == 0 and u16(raw, 44) == 0
    assert raw[46] == 255

    for base, name, alg, op, red in [
        (64, GROUP, AG_ALG, 6, 0),
        (576, GROUP, AR_ALG, 2, 2),
    ]:
        assert raw[base + 3] == 1
        assert raw[base + 16 : base + 16 + len(name) + 1] == name.encode() + b"\0"
        assert raw[base + 144 : base + 144 + len(alg) + 1] == alg.encode() + b"\0"
        assert u32(raw, base + 272) == op
        assert u32(raw, base + 276) == red
    assert cc_group_name(tiling.b) == GROUP
    assert cc_alg_config(tiling.b) == AR_ALG


def test_get_tiling_init_writes_config_values_and_resets_the_table():
    init = Mc2InitTiling()
    fill(init, 0xAB)
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG, devType=5)
    assert cfg.SetDebugMode(2) == 0
    assert cfg.SetQueueNum(3) == 0
    assert cfg.SetCommBlockNum(0x1234) == 0
    assert cfg.GetTiling(init) == TILING_SUCCESS
    raw = bytes(init)
    assert u32(raw, 0) == 100
    assert u32(raw, 4) == 0
    assert raw[8:40] == bytes(32)
    assert (raw[40], raw[41]) == (2, 0)
    assert u16(raw, 42) == 3
    assert u16(raw, 44) == 0x1234
    assert raw[46] == 5


def test_get_tiling_cc_writes_every_field_and_clears_old_bytes():
    cfg = Mc2CcTilingConfig(
        GROUP,
        ALLGATHER,
        AG_ALG,
        dstDataType=HcclDataType.HCCL_DATA_TYPE_FP16,
        srcDataType=HcclDataType.HCCL_DATA_TYPE_FP32,
        commEngine=3,
    )
    assert cfg.SetSkipLocalRankCopy(1) == 0
    assert cfg.SetSkipBufferWindowCopy(2) == 0
    assert cfg.SetStepSize(7) == 0
    tiling = OneCcTiling()
    fill(tiling.cc, 0xCD)
    assert cfg.GetTiling(tiling.mc2InitTiling) == 0
    assert cfg.GetTiling(tiling.cc) == 0
    raw = bytes(tiling.cc)
    assert list(raw[0:4]) == [1, 2, 7, 1]
    assert raw[4:13] == bytes(9)
    assert list(raw[13:16]) == [3, 4, 3]
    assert raw[16:144] == GROUP.encode().ljust(128, b"\0")
    assert raw[144:272] == AG_ALG.encode().ljust(128, b"\0")
    assert u32(raw, 272) == 6
    assert u32(raw, 276) == 0


@EXPECTS_ALG_CONFIG
def test_names_of_127_bytes_fill_the_array_up_to_its_nul():
    name, alg = "g" * 127, "a" * 127
    tiling = build(Mc2CcTilingConfig(name, ALLGATHER, alg))
    raw = bytes(tiling.cc)
    assert raw[16:144] == name.encode() + b"\0"
    assert raw[144:272] == alg.encode() + b"\0"
    assert cc_group_name(tiling.cc) == name
    assert cc_alg_config(tiling.cc) == alg


@pytest.mark.parametrize("field", ["groupName", "algConfig"])
def test_names_of_exactly_128_bytes_pass_the_setter_but_fail_cc_tiling(field):
    # hccl_tiling.cpp, Mc2CcTilingConfig::GetTiling: length <= 128 passes, strcpy_s into char[128] fails
    kwargs = {"groupName": GROUP, "opType": ALLGATHER, "algConfig": AG_ALG}
    cfg = Mc2CcTilingConfig(**kwargs)
    assert getattr(cfg, f"Set{field[0].upper()}{field[1:]}")("x" * 128) == TILING_SUCCESS
    tiling = OneCcTiling()
    assert cfg.GetTiling(tiling.mc2InitTiling) == TILING_SUCCESS
    assert cfg.GetTiling(tiling.cc) == TILING_FAILED
    assert cfg.last_error == (
        f"GetTiling(Mc2CcTiling): {field} is 128 bytes long; it passes the length check "
        "(<= 128), but the C++ GetTiling copies it with strcpy_s into a 128-byte array, which "
        "fails without room for the terminating NUL: at most 127 bytes fit"
    )
    assert tiling.mc2InitTiling.mc2HcommCnt == 0
    assert tiling.cc.opType == 0  # not written (what is: the next test)


@pytest.mark.parametrize("field", ["groupName", "algConfig"])
def test_a_name_without_room_for_its_nul_leaves_what_the_cpp_get_tiling_wrote(field):
    """hccl_tiling.cpp writes skipLocalRankCopy, skipBufferWindowCopy, stepSize, version and the
    reserved bytes, then strcpy_s's the names: securec's strcpy_s, for a name with no room for
    its NUL, writes a NUL at the array's start and GetTiling returns 1. Until 2026-12-01
    hccl_py wrote nothing (the fields, a groupName copied before, the NUL)."""
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.SetSkipLocalRankCopy(1) == 0
    assert cfg.SetStepSize(5) == 0
    getattr(cfg, f"Set{field[0].upper()}{field[1:]}")("x" * 128)
    tiling = OneCcTiling()
    fill(tiling.cc, 0xCD)
    assert cfg.GetTiling(tiling.mc2InitTiling) == TILING_SUCCESS
    assert cfg.GetTiling(tiling.cc) == TILING_FAILED
    raw = bytes(tiling.cc)
    assert list(raw[0:4]) == [1, 0, 5, 1]
    assert raw[4:13] == bytes(9)
    assert raw[13:16] == b"\xcd" * 3  # commEngine, srcDataType, dstDataType: not reached
    if field == "groupName":
        assert raw[16:18] == b"\0\xcd"
        assert raw[144:] == b"\xcd" * (512 - 144)
    else:
        assert raw[16:144] == GROUP.encode().ljust(128, b"\0")
        assert raw[144:146] == b"\0\xcd"
        assert raw[272:] == b"\xcd" * (512 - 272)  # opType, reduceType: not reached
    assert tiling.mc2InitTiling.mc2HcommCnt == 0


@EXPECTS_ALG_CONFIG  # the algConfig "ab" names no op
@pytest.mark.parametrize("field", ["groupName", "algConfig"])
def test_a_name_is_copied_up_to_its_first_nul_as_strcpy_s_does(field):
    """The C++ length check counts the whole std::string (<= 128), strcpy_s copies its c_str():
    a 128-byte name with a NUL inside fits. Until 2026-12-01 GetTiling returned 1 for it."""
    name = "ab\0" + "x" * 125
    kwargs = {"groupName": GROUP, "opType": ALLGATHER, "algConfig": AG_ALG, field: name}
    cfg = Mc2CcTilingConfig(**kwargs)
    tiling = build(cfg)
    start = 16 if field == "groupName" else 144
    assert bytes(tiling.cc)[start : start + 128] == b"ab".ljust(128, b"\0")
    assert (cc_group_name if field == "groupName" else cc_alg_config)(tiling.cc) == "ab"
    assert cfg.GetTiling(tiling.cc) == TILING_SUCCESS  # 129 bytes with the NUL still fail
    assert getattr(cfg, f"Set{field[0].upper()}{field[1:]}")(name + "x") == TILING_FAILED


def test_get_tiling_cc_before_init_fails_and_writes_nothing():
    tiling = OneCcTiling()
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.GetTiling(tiling.cc) == TILING_FAILED
    assert "Mc2InitTiling" in cfg.last_error
    assert bytes(tiling) == bytes(ctypes.sizeof(tiling))


def test_init_from_another_config_does_not_count():
    tiling = OneCcTiling()
    assert Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG).GetTiling(tiling.mc2InitTiling) == 0
    other = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert other.GetTiling(tiling.cc) == TILING_FAILED
    assert tiling.mc2InitTiling.mc2HcommCnt == 0


def test_ninth_cc_tiling_fails_after_writing_its_fields():
    tiling = NineCcTiling()
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.GetTiling(tiling.mc2InitTiling) == 0
    for i in range(8):
        assert cfg.GetTiling(getattr(tiling, f"cc{i}")) == 0, cfg.last_error
    assert cfg.GetTiling(tiling.cc8) == TILING_FAILED
    assert "8" in cfg.last_error
    assert tiling.mc2InitTiling.mc2HcommCnt == 8
    assert list(tiling.mc2InitTiling.offset) == [64 + 512 * i for i in range(8)]
    # hccl_tiling.cpp writes the ninth tiling's fields before UpdateMc2InitTiling counts
    assert (tiling.cc8.version, tiling.cc8.opType) == (1, ALLGATHER)
    assert bytes(tiling.cc8.groupName).rstrip(b"\0") == GROUP.encode()


@expects_warning("cc-tiling-offset")
def test_cc_tiling_before_the_init_tiling_gets_a_wrapped_offset():
    """As hccl_tiling.cpp's UpdateMc2InitTiling: the distance is stored as a uint32 and
    GetTiling returns 0; hccl_py warns (the offset leads nowhere)."""

    class Backwards(TilingData):
        _fields_ = [("cc", Mc2CcTiling), ("init", Mc2InitTiling)]

    tiling = Backwards()
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.GetTiling(tiling.init) == 0
    with pytest.warns(hp.HcclWarning, match=r"-512 bytes from the Mc2InitTiling.*4294966784"):
        assert cfg.GetTiling(tiling.cc) == 0
    assert tiling.init.mc2HcommCnt == 1
    assert tiling.init.offset[0] == 2**32 - 512
    assert (tiling.cc.version, tiling.cc.opType) == (1, ALLGATHER)


@pytest.mark.parametrize("op_type", [0, 21, -1, 256])
def test_bad_op_type_fails_cc_tiling(op_type):
    tiling = OneCcTiling()
    cfg = Mc2CcTilingConfig(GROUP, op_type, AG_ALG)
    assert cfg.GetTiling(tiling.mc2InitTiling) == 0
    assert cfg.GetTiling(tiling.cc) == TILING_FAILED
    assert "opType" in cfg.last_error
    assert tiling.mc2InitTiling.mc2HcommCnt == 0
    assert bytes(tiling.cc) == bytes(512)


@pytest.mark.parametrize(
    "op_type",
    [
        HcclCMDType.HCCL_CMD_ALLREDUCE,
        HcclCMDType.HCCL_CMD_REDUCE,
        HcclCMDType.HCCL_CMD_REDUCE_SCATTER,
    ],
)
def test_reserved_reduce_type_fails_init_tiling_of_reduce_ops(op_type):
    init = Mc2InitTiling()
    cfg = Mc2CcTilingConfig(GROUP, op_type, AR_ALG, HcclReduceOp.HCCL_REDUCE_RESERVED)
    assert cfg.GetTiling(init) == TILING_FAILED
    assert "reduceType" in cfg.last_error
    assert bytes(init) == bytes(64)
    assert cfg.GetTiling(Mc2CcTiling()) == TILING_FAILED
    assert "Mc2InitTiling" in cfg.last_error


def test_reserved_reduce_type_passes_init_but_fails_cc_for_other_ops():
    tiling = OneCcTiling()
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG, HcclReduceOp.HCCL_REDUCE_RESERVED)
    assert cfg.GetTiling(tiling.mc2InitTiling) == TILING_SUCCESS
    assert cfg.GetTiling(tiling.cc) == TILING_FAILED
    assert "reduceType" in cfg.last_error
    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_SUM) == 0
    assert cfg.GetTiling(tiling.cc) == TILING_SUCCESS


@pytest.mark.parametrize("field", ["groupName", "algConfig"])
def test_names_of_129_bytes_fail_cc_tiling(field):
    kwargs = {"groupName": GROUP, "opType": ALLGATHER, "algConfig": AG_ALG}
    kwargs[field] = "x" * 129
    tiling = OneCcTiling()
    cfg = Mc2CcTilingConfig(**kwargs)
    assert cfg.GetTiling(tiling.mc2InitTiling) == 0
    assert cfg.GetTiling(tiling.cc) == TILING_FAILED
    assert field in cfg.last_error and "129" in cfg.last_error
    assert bytes(tiling.cc) == bytes(512)


@pytest.mark.parametrize("field", ["groupName", "algConfig"])
def test_names_that_are_not_utf8_encodable_fail_with_a_reason(field):
    """A lone surrogate (a byte name decoded with surrogateescape): before 2026-11-30 Python's
    UnicodeEncodeError came out of the setter and of GetTiling."""
    bad = "grp\udcff"
    setter = getattr(
        Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG), f"Set{field[0].upper()}{field[1:]}"
    )
    assert setter(bad) == TILING_FAILED
    assert setter.__self__.last_error == (
        f"Set{field[0].upper()}{field[1:]}: {field} 'grp\\udcff' is not UTF-8 encodable "
        "(surrogates not allowed at 3)"
    )
    tiling = OneCcTiling()
    cfg = Mc2CcTilingConfig(
        **{"groupName": GROUP, "opType": ALLGATHER, "algConfig": AG_ALG, field: bad}
    )
    assert cfg.GetTiling(tiling.mc2InitTiling) == TILING_SUCCESS
    assert cfg.GetTiling(tiling.cc) == TILING_FAILED
    assert f"{field} 'grp\\udcff' is not UTF-8 encodable" in cfg.last_error
    assert bytes(tiling.cc) == bytes(512)


@pytest.mark.parametrize("field", ["dstDataType", "srcDataType"])
@pytest.mark.parametrize(("value", "expected"), [(254, TILING_SUCCESS), (255, TILING_FAILED)])
def test_data_type_bounds_in_cc_tiling(field, value, expected):
    tiling = OneCcTiling()
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG, **{field: value})
    assert cfg.GetTiling(tiling.mc2InitTiling) == 0
    assert cfg.GetTiling(tiling.cc) == expected
    if expected == TILING_FAILED:
        assert field in cfg.last_error
        assert bytes(tiling.cc) == bytes(512)
    else:
        assert getattr(tiling.cc, field) == value


def test_get_tiling_rejects_other_objects():
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.GetTiling(OneCcTiling()) == TILING_FAILED
    assert "OneCcTiling" in cfg.last_error
    assert cfg.GetTiling(bytearray(64)) == TILING_FAILED


@pytest.mark.parametrize("cls", [Mc2InitTiling, Mc2CcTiling])
def test_get_tiling_of_the_class_itself_names_the_class(cls):
    """GetTiling(Mc2InitTiling) without the call parentheses: the message names the class the
    caller passed, not its ctypes metaclass (PyCStructType)."""
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.GetTiling(cls) == TILING_FAILED
    assert f"the class {cls.__name__}" in cfg.last_error and "PyCStruct" not in cfg.last_error


def test_last_error_is_cleared_by_a_successful_call():
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.SetDebugMode(0) == TILING_FAILED
    assert cfg.last_error
    assert cfg.SetDebugMode(1) == TILING_SUCCESS
    assert cfg.last_error is None


# ---------------------------------------------------------------- setters


def _cc(name):
    return lambda t: getattr(t.cc, name)


def _init(name):
    return lambda t: getattr(t.mc2InitTiling, name)


SETTER_CASES = [
    ("SetOpType", [1, 2, 19, 20], [0, 21, -1, 2**32, "6", 2.0], _cc("opType")),
    (
        "SetGroupName",
        ["", "g", "g" * 127, "é" * 63 + "g"],  # 128 bytes pass the setter, not GetTiling
        ["g" * 129, "é" * 65, 5],
        lambda t: cc_group_name(t.cc),
    ),
    ("SetAlgConfig", ["", AR_ALG, "a" * 127], ["a" * 129, None], lambda t: cc_alg_config(t.cc)),
    ("SetReduceType", [0, 1, 2, 3], [4, -1, 2**32, 1.0], _cc("reduceType")),
    ("SetStepSize", [0, 1, 255], [-1, 256], _cc("stepSize")),
    ("SetSkipLocalRankCopy", [0, 1], [2, -1, 255], _cc("skipLocalRankCopy")),
    ("SetSkipBufferWindowCopy", [0, 1, 2], [3, -1], _cc("skipBufferWindowCopy")),
    ("SetDebugMode", [1, 2, 4, 250, 255], [0, 5, 100, 249, 256, -1], _init("debugMode")),
    ("SetQueueNum", [0, 1, 65535], [-1, 65536], _init("queueNum")),
    ("SetCommBlockNum", [0, 1, 65535], [-1, 65536], _init("commBlockNum")),
    ("SetCommEngine", [0, 1, 255], [-1, 256], _cc("commEngine")),
]


@EXPECTS_ALG_CONFIG
@pytest.mark.parametrize(
    ("setter", "good", "bad", "observe"), SETTER_CASES, ids=[c[0] for c in SETTER_CASES]
)
def test_setter_accepts_its_range(setter, good, bad, observe):
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    for value in good:
        assert getattr(cfg, setter)(value) == TILING_SUCCESS, (value, cfg.last_error)
        assert cfg.last_error is None
        assert observe(build(cfg)) == value


@EXPECTS_ALG_CONFIG
@pytest.mark.parametrize(
    ("setter", "good", "bad", "observe"), SETTER_CASES, ids=[c[0] for c in SETTER_CASES]
)
def test_setter_rejects_out_of_range_without_changing_state(setter, good, bad, observe):
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    kept = good[-1]
    assert getattr(cfg, setter)(kept) == TILING_SUCCESS
    for value in bad:
        assert getattr(cfg, setter)(value) == TILING_FAILED, value
        assert isinstance(cfg.last_error, str) and setter in cfg.last_error
        assert observe(build(cfg)) == kept


def test_set_reduce_type_sets_data_types_all_or_nothing():
    fp16, fp32 = HcclDataType.HCCL_DATA_TYPE_FP16, HcclDataType.HCCL_DATA_TYPE_FP32
    cfg = Mc2CcTilingConfig(GROUP, ALLREDUCE, AR_ALG)
    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_MIN, fp16, fp32) == 0
    cc = build(cfg).cc
    assert (cc.reduceType, cc.dstDataType, cc.srcDataType) == (3, fp16, fp32)

    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_SUM, 255, fp16) == TILING_FAILED
    assert "dstDataType" in cfg.last_error
    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_SUM, fp16, 255) == TILING_FAILED
    assert "srcDataType" in cfg.last_error
    cc = build(cfg).cc
    assert (cc.reduceType, cc.dstDataType, cc.srcDataType) == (3, fp16, fp32)

    assert cfg.SetReduceType(HcclReduceOp.HCCL_REDUCE_MAX) == 0
    cc = build(cfg).cc
    assert (cc.reduceType, cc.dstDataType, cc.srcDataType) == (2, 0, 0)


@EXPECTS_ALG_CONFIG
def test_setters_accept_enum_members():
    cfg = Mc2CcTilingConfig(GROUP, ALLREDUCE, AR_ALG)
    assert cfg.SetOpType(HcclCMDType.HCCL_CMD_REDUCE_SCATTER) == 0
    assert cfg.SetOpType(HcclCMDType.HCCL_CMD_ALL) == TILING_FAILED
    assert cfg.SetOpType(HcclCMDType.HCCL_CMD_INVALID) == TILING_FAILED
    assert build(cfg).cc.opType == 7


# ---------------------------------------------------------------- offsetof


def test_offsetof_matches_ctypes_offsets():
    assert offsetof(TwoCcTiling, "mc2InitTiling") == 0
    assert offsetof(TwoCcTiling, "a") == TwoCcTiling.a.offset == 64
    assert offsetof(TwoCcTiling, "b") == 576
    assert offsetof(TwoCcTiling(), "b") == 576
    assert offsetof(TwoCcTiling, "b.opType") == 576 + 272
    assert offsetof(Mc2InitTiling, "devType") == 46

    class Extended(TwoCcTiling):
        _fields_ = [("extra", ctypes.c_uint64)]

    assert offsetof(Extended, "a") == 64
    assert offsetof(Extended, "extra") == 1088


@pytest.mark.parametrize("member", ["nope", "b.nope", "myField.x", ""])
def test_offsetof_unknown_member(member):
    if not member:
        with pytest.raises(TypeError):
            offsetof(TwoCcTiling, member)
        return
    with pytest.raises(AttributeError) as excinfo:
        offsetof(TwoCcTiling, member)
    assert "TwoCcTiling" in str(excinfo.value)
    assert repr(member) in str(excinfo.value)
    with pytest.raises(ValueError):
        offsetof(TwoCcTiling, member)


def test_offsetof_needs_a_struct():
    with pytest.raises(TypeError):
        offsetof(int, "real")


# ---------------------------------------------------------------- GET_TILING_DATA_WITH_STRUCT


class FakeGm:
    """A duck-typed global-memory address: only read_bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.requests: list[int] = []

    def read_bytes(self, nbytes: int) -> bytes:
        self.requests.append(nbytes)
        return self.data[:nbytes]


def _filled_tiling() -> OneCcTiling:
    tiling = build(Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG))
    tiling.myField = 1234
    return tiling


def test_get_tiling_data_from_an_instance_copies():
    tiling = _filled_tiling()
    copy = GET_TILING_DATA_WITH_STRUCT(OneCcTiling, tiling)
    assert isinstance(copy, OneCcTiling)
    assert copy is not tiling
    assert bytes(copy) == bytes(tiling)
    copy.myField = 99
    assert tiling.myField == 1234
    assert cc_group_name(copy.cc) == GROUP
    assert copy.mc2InitTiling.offset[0] == 64


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_get_tiling_data_from_bytes_like(wrap):
    raw = bytes(_filled_tiling())
    copy = GET_TILING_DATA_WITH_STRUCT(OneCcTiling, wrap(raw + b"\xff" * 8))
    assert bytes(copy) == raw
    assert copy.myField == 1234


def test_get_tiling_data_from_read_bytes_source():
    raw = bytes(_filled_tiling())
    gm = FakeGm(raw + bytes(100))
    copy = GET_TILING_DATA_WITH_STRUCT(OneCcTiling, gm)
    assert gm.requests == [ctypes.sizeof(OneCcTiling)]
    assert bytes(copy) == raw


@pytest.mark.parametrize("source", [bytes(579), FakeGm(bytes(10)), Mc2CcTiling()])
def test_get_tiling_data_too_short(source):
    with pytest.raises(ValueError, match="580"):
        GET_TILING_DATA_WITH_STRUCT(OneCcTiling, source)


def test_get_tiling_data_from_a_gm_tensor_too_small_names_the_call():
    """Before 2026-11-30 only the GM view's bytes were named, not the macro."""

    def main() -> None:
        hp.launch(lambda t: GET_TILING_DATA_WITH_STRUCT(OneCcTiling, t), torch.zeros(16))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=1)
    error = info.value.failures[0]
    assert isinstance(error, hp.HcclBoundsError)
    assert "GET_TILING_DATA_WITH_STRUCT(OneCcTiling) reads 580 bytes: GM view" in str(error)


def test_get_tiling_data_bad_arguments():
    with pytest.raises(TypeError):
        GET_TILING_DATA_WITH_STRUCT(OneCcTiling, 12345)
    with pytest.raises(TypeError):
        GET_TILING_DATA_WITH_STRUCT(int, bytes(600))


def test_tiling_bytes_sources_and_lengths():
    tiling = _filled_tiling()
    assert tiling_bytes(tiling) == bytes(tiling)
    assert tiling_bytes(tiling, 64) == bytes(tiling)[:64]
    assert tiling_bytes(bytearray(b"abc")) == b"abc"
    assert tiling_bytes(FakeGm(b"abcdef"), 4) == b"abcd"
    with pytest.raises(ValueError, match="nbytes"):
        tiling_bytes(FakeGm(b"abcdef"))
    with pytest.raises(ValueError):
        tiling_bytes(b"abc", 4)
    with pytest.raises(ValueError):
        tiling_bytes(b"abc", -1)


# ---------------------------------------------------------------- read_cc_tiling


def test_read_cc_tiling_parses_at_an_offset():
    tiling = TwoCcTiling()
    cfg = Mc2CcTilingConfig(GROUP, ALLGATHER, AG_ALG)
    assert cfg.GetTiling(tiling.mc2InitTiling) == 0
    assert cfg.GetTiling(tiling.a) == 0
    assert cfg.SetOpType(ALLREDUCE) == 0
    assert cfg.SetAlgConfig(AR_ALG) == 0
    assert cfg.GetTiling(tiling.b) == 0
    raw = bytes(tiling)
    a = read_cc_tiling(raw, 64)
    b = read_cc_tiling(raw, 576)
    assert isinstance(b, Mc2CcTiling)
    assert (a.opType, b.opType) == (6, 2)
    assert cc_group_name(b) == GROUP
    assert bytes(b) == raw[576:1088]


@pytest.mark.parametrize(("offset", "reason"), [(63, "Mc2InitTiling"), (-1, "Mc2InitTiling")])
def test_read_cc_tiling_rejects_offsets_inside_the_header(offset, reason):
    with pytest.raises(ValueError, match=reason):
        read_cc_tiling(bytes(1088), offset)


def test_read_cc_tiling_rejects_offsets_past_the_end():
    assert read_cc_tiling(bytes(1088), 576).version == 0
    with pytest.raises(ValueError, match="past the end"):
        read_cc_tiling(bytes(1088), 577)
    with pytest.raises(ValueError, match="past the end"):
        read_cc_tiling(bytes(575), 64)
