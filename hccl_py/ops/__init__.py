"""The op table: one module per collective, each holding every fact about it.

``OPS`` maps each ``HcclCMDType`` the kernel API can Prepare to its
:class:`OpSpec`. Adding an op means adding one module here (and listing it in
``_MODULES``) plus its entries in the executors of the backends that run it;
``tests/test_op_table.py`` checks that every backend covers what it claims.
"""

from __future__ import annotations

from ..core.constants import HcclCMDType
from . import (
    all_gather,
    all_reduce,
    all_to_all,
    all_to_all_v,
    batch_write,
    half_all_to_all_v,
    reduce_scatter,
)
from .spec import OpSpec, stride

_MODULES = (
    all_reduce,
    all_gather,
    reduce_scatter,
    all_to_all,
    all_to_all_v,
    batch_write,
    half_all_to_all_v,
)

#: Every op of the kernel API, by command type, in the order of the AscendC documentation.
OPS: dict[HcclCMDType, OpSpec] = {m.SPEC.cmd: m.SPEC for m in _MODULES}
#: The same specs by AscendC name (``"AllGather"``).
BY_NAME: dict[str, OpSpec] = {s.name: s for s in OPS.values()}
#: The ops whose data the executors' rounds move (BatchWrite and AlltoAllvWrite go to windows).
EXECUTABLE: frozenset[HcclCMDType] = frozenset(c for c, s in OPS.items() if s.executable)


def spec_of(op: object) -> OpSpec | None:
    """The spec of an op type (an ``HcclCMDType`` or its int value), or None if not a kernel op.

    An ``HcclCMDType``, an int or a numpy integer is one lookup in ``OPS`` (they hash
    and compare as their value); anything else (a string of digits, a tensor ...) goes through ``int``.
    """
    try:
        spec = OPS.get(op)
    except TypeError:  # unhashable
        spec = None
    if spec is not None:
        return spec
    try:
        return OPS.get(HcclCMDType(int(op)))
    except (ValueError, TypeError):
        return None


def op_name(op: object) -> str:
    """The AscendC method name of an op type (``AllGather`` for HCCL_CMD_ALLGATHER).

    An op type with no call here (``HCCL_CMD_BROADCAST``, which SetCcTiling accepts)
    is named by its ``HcclCMDType`` member, any other value by its number.
    """
    spec = spec_of(op)
    if spec is not None:
        return spec.name
    try:
        value = int(op)
    except (ValueError, TypeError):
        return f"op{op!r}"
    member = HcclCMDType._value2member_map_.get(value)
    return member.name if member is not None else f"op{value}"


__all__ = ["BY_NAME", "EXECUTABLE", "OPS", "OpSpec", "op_name", "spec_of", "stride"]
