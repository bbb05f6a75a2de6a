"""Enumerations and constants of spec section 2: the C++ (ABI) values and the Python surface."""

from __future__ import annotations

import enum

import pytest
import torch

import hccl_py as hp
from hccl_py import (
    CoreType,
    HcclCMDType,
    HcclDataType,
    HcclReduceOp,
    HcclServerConfig,
    HcclServerType,
)
from hccl_py.core.constants import DTYPE_INFO, hccl_dtype_of, torch_dtype_of

DATA_TYPES = {
    "INT8": 0,
    "INT16": 1,
    "INT32": 2,
    "FP16": 3,
    "FP32": 4,
    "INT64": 5,
    "UINT64": 6,
    "UINT8": 7,
    "UINT16": 8,
    "UINT32": 9,
    "FP64": 10,
    "BFP16": 11,
    "INT128": 12,
    "HIF8": 14,
    "FP8E4M3": 15,
    "FP8E5M2": 16,
    "FP8E8M0": 17,
    "MXFP8": 18,
    "RESERVED": 255,
}
REDUCE_OPS = {"SUM": 0, "PROD": 1, "MAX": 2, "MIN": 3, "RESERVED": 4}
CMD_TYPES = {
    "INVALID": 0,
    "BROADCAST": 1,
    "ALLREDUCE": 2,
    "REDUCE": 3,
    "SEND": 4,
    "RECEIVE": 5,
    "ALLGATHER": 6,
    "REDUCE_SCATTER": 7,
    "ALLTOALLV": 8,
    "ALLTOALLVC": 9,
    "ALLTOALL": 10,
    "GATHER": 11,
    "SCATTER": 12,
    "BATCH_SEND_RECV": 13,
    "BATCH_PUT": 14,
    "BATCH_GET": 15,
    "ALLGATHER_V": 16,
    "REDUCE_SCATTER_V": 17,
    "BATCH_WRITE": 18,
    "HALF_ALLTOALLV": 20,
    "ALL": 21,
}
SERVER_TYPES = {"AICPU": 0, "CCU": 5, "END": 6}

ENUMS = [
    (HcclDataType, "HCCL_DATA_TYPE_", DATA_TYPES),
    (HcclReduceOp, "HCCL_REDUCE_", REDUCE_OPS),
    (HcclCMDType, "HCCL_CMD_", CMD_TYPES),
    (HcclServerType, "HCCL_SERVER_TYPE_", SERVER_TYPES),
    (CoreType, "", {"DEFAULT": 0, "ON_AIV": 1, "ON_AIC": 2}),
]
ENUM_IDS = [e.__name__ for e, _, _ in ENUMS]


@pytest.mark.parametrize(("enum_type", "prefix", "values"), ENUMS, ids=ENUM_IDS)
def test_enum_values_are_the_cpp_ones(enum_type, prefix, values) -> None:
    assert issubclass(enum_type, enum.IntEnum)
    assert {m.name: m.value for m in enum_type} == {prefix + k: v for k, v in values.items()}


@pytest.mark.parametrize(("enum_type", "prefix", "values"), ENUMS, ids=ENUM_IDS)
def test_enum_members_are_exported_at_module_level(enum_type, prefix, values) -> None:
    for name, value in values.items():
        member = getattr(hp, prefix + name)
        assert member is enum_type(value)
        assert member == value and isinstance(member, int)
        assert prefix + name in hp.__all__


def test_named_examples_of_the_public_surface() -> None:
    assert hp.HCCL_DATA_TYPE_FP16 is HcclDataType.HCCL_DATA_TYPE_FP16 == 3
    assert hp.HCCL_REDUCE_SUM is HcclReduceOp.HCCL_REDUCE_SUM == 0
    assert hp.HCCL_CMD_ALLGATHER is HcclCMDType.HCCL_CMD_ALLGATHER == 6
    with pytest.raises(ValueError):
        HcclDataType(13)  # no type has the value 13
    with pytest.raises(ValueError):
        HcclCMDType(19)


def test_return_codes_and_handle_limits() -> None:
    assert (hp.HCCL_SUCCESS, hp.HCCL_FAILED) == (0, -1)
    assert hp.INVALID_HANDLE_ID == -1
    assert hp.HCCL_MAX_HANDLE_ID == 63


def test_server_config_default_and_fields() -> None:
    default = HcclServerConfig()
    assert (default.type, default.blockId) == (CoreType.DEFAULT, 0)
    cfg = HcclServerConfig(CoreType.ON_AIV, 10)
    assert (cfg.type, cfg.blockId) == (CoreType.ON_AIV, 10)
    assert cfg == HcclServerConfig(CoreType.ON_AIV, 10) != default


D = HcclDataType
EXPECTED_INFO = {
    D.HCCL_DATA_TYPE_INT8: (1, torch.int8),
    D.HCCL_DATA_TYPE_INT16: (2, torch.int16),
    D.HCCL_DATA_TYPE_INT32: (4, torch.int32),
    D.HCCL_DATA_TYPE_FP16: (2, torch.float16),
    D.HCCL_DATA_TYPE_FP32: (4, torch.float32),
    D.HCCL_DATA_TYPE_INT64: (8, torch.int64),
    D.HCCL_DATA_TYPE_UINT64: (8, torch.uint64),
    D.HCCL_DATA_TYPE_UINT8: (1, torch.uint8),
    D.HCCL_DATA_TYPE_UINT16: (2, torch.uint16),
    D.HCCL_DATA_TYPE_UINT32: (4, torch.uint32),
    D.HCCL_DATA_TYPE_FP64: (8, torch.float64),
    D.HCCL_DATA_TYPE_BFP16: (2, torch.bfloat16),
    D.HCCL_DATA_TYPE_INT128: (16, None),
    D.HCCL_DATA_TYPE_HIF8: (1, None),
    D.HCCL_DATA_TYPE_FP8E4M3: (1, torch.float8_e4m3fn),
    D.HCCL_DATA_TYPE_FP8E5M2: (1, torch.float8_e5m2),
    D.HCCL_DATA_TYPE_FP8E8M0: (1, None),
    D.HCCL_DATA_TYPE_MXFP8: (1, None),
}


def test_dtype_info_sizes_and_torch_dtypes() -> None:
    assert {t: (i.size, i.torch_dtype) for t, i in DTYPE_INFO.items()} == EXPECTED_INFO
    assert D.HCCL_DATA_TYPE_RESERVED not in DTYPE_INFO


@pytest.mark.parametrize("data_type", list(EXPECTED_INFO), ids=lambda t: t.name)
def test_dtype_helpers(data_type: HcclDataType) -> None:
    size, tdtype = EXPECTED_INFO[data_type]
    assert hp.dtype_size(data_type) == hp.dtype_size(int(data_type)) == size
    assert torch_dtype_of(int(data_type)) == tdtype
    if tdtype is not None:
        assert torch.empty((), dtype=tdtype).element_size() == size
        assert hccl_dtype_of(tdtype) is data_type


def test_hccl_dtype_of_special_cases() -> None:
    assert hccl_dtype_of(torch.bool) is D.HCCL_DATA_TYPE_UINT8
    with pytest.raises(TypeError, match="complex64"):
        hccl_dtype_of(torch.complex64)
    with pytest.raises(ValueError):
        hp.dtype_size(99)
