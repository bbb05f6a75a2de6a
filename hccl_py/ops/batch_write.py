"""BatchWrite: one-sided copies described by ``itemNum`` items in GM (spec section 6).

Unlike the collectives, a BatchWrite is not matched across ranks: the server
of the preparing rank reads the items and copies each source range into a
(usually remote) window. Its Prepare lives in
:mod:`hccl_py.client.onesided`; this module holds its op-table entry and the
two item formats:

- Atlas A2, 32 bytes: ``{u64 localBuf, u64 remoteBuf, u64 count, u32 dataType,
  u32 remoteRankId}``: ``count`` elements of ``dataType`` from ``localBuf`` to
  ``remoteBuf`` in rank ``remoteRankId``'s window;
- Atlas A3, 64 bytes: ``{u64 type, u32 res1[5], u32 length, u32 srcLow,
  srcHigh, dstLow, dstHigh, u32 res2[4]}``: ``length`` bytes from ``src`` to ``dst``.
  ``type`` is a reserved field (documented value 0) that hccl_py does not read: the
  shipping A3 MoE setup kernels (ops-transformer ``moe_distribute_dispatch_setup`` and
  ``moe_distribute_combine_setup``, arch22) write an HcclDataType there, and nothing in
  the client reads items, so no source says the server refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core.constants import DTYPE_INFO, MOVE_DTYPES, HcclCMDType, HcclDataType
from .spec import OpSpec, no_blocks

if TYPE_CHECKING:
    pass

#: The item layouts of each platform's BatchWrite (little-endian, packed).
ITEM_DTYPES: dict[str, np.dtype] = {
    "A2": np.dtype(
        [
            ("localBuf", "<u8"),
            ("remoteBuf", "<u8"),
            ("count", "<u8"),
            ("dataType", "<u4"),
            ("remoteRankId", "<u4"),
        ]
    ),
    "A3": np.dtype(
        [
            ("type", "<u8"),
            ("res1", "<u4", (5,)),
            ("length", "<u4"),
            ("srcLow", "<u4"),
            ("srcHigh", "<u4"),
            ("dstLow", "<u4"),
            ("dstHigh", "<u4"),
            ("res2", "<u4", (4,)),
        ]
    ),
}
#: The largest byte count a uint64 holds (an A2 item's ``count * size`` beyond it wraps).
_MAX_BYTES = np.uint64(2**64 - 1)
#: Element size of every HcclDataType value 0..255 (0: not a data type BatchWrite can move).
_SIZES = np.zeros(256, dtype=np.uint64)
for _t in MOVE_DTYPES:
    _SIZES[int(_t)] = DTYPE_INFO[HcclDataType(_t)].size


@dataclass(frozen=True)
class Items:
    """The decoded items of one BatchWrite, one entry per item (numpy arrays)."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    #: A2: the destination rank each item names (None on A3, whose items carry no rank).
    remote_rank: np.ndarray | None
    #: Index and reason of the first malformed item, or None.
    problem: tuple[int, str] | None


def decode_items(raw: bytes, fmt: str) -> Items:
    """Decode ``raw`` (``itemNum`` items of format ``fmt``, "A2" or "A3") without copying data."""
    items = np.frombuffer(raw, dtype=ITEM_DTYPES[fmt])
    problem = None
    if fmt == "A2":
        dtypes = items["dataType"].astype(np.int64)
        sizes = _SIZES[np.clip(dtypes, 0, 255)] * (dtypes < 256)
        bad = np.flatnonzero(sizes == 0)
        if bad.size:
            k = int(bad[0])
            problem = (k, f"dataType {int(dtypes[k])} is not a data type BatchWrite can move")
        counts = items["count"]
        nbytes = counts * sizes  # uint64: wraps where count * size is 2**64 or more
        over = np.flatnonzero(counts > _MAX_BYTES // np.maximum(sizes, 1))
        if over.size:  # the exact size, which no window holds (a bounds report, not a wrap)
            nbytes = nbytes.astype(object)
            for k in over:
                nbytes[k] = int(counts[k]) * int(sizes[k])
        return Items(
            src=items["localBuf"],
            dst=items["remoteBuf"],
            nbytes=nbytes,
            remote_rank=items["remoteRankId"].astype(np.int64),
            problem=problem,
        )
    high = np.uint64(32)
    return Items(
        src=(items["srcHigh"].astype(np.uint64) << high) | items["srcLow"],
        dst=(items["dstHigh"].astype(np.uint64) << high) | items["dstLow"],
        nbytes=items["length"].astype(np.uint64),
        remote_rank=None,
        problem=problem,
    )


SPEC = OpSpec(
    cmd=HcclCMDType.HCCL_CMD_BATCH_WRITE,
    name="BatchWrite",
    count_arg="itemNum",
    reduces=False,
    dtypes=MOVE_DTYPES,
    zero_count=False,
    alg_config="BatchWrite=level0:fullmesh",
    layout=no_blocks,
    in_place=lambda rank: (0, 0),
    platforms=frozenset({"A2", "A3"}),
    executable=False,
    lifecycle="batch-write",
)
