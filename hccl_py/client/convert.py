"""Argument converters, and the one parameter object every Prepare call fills.

Each Prepare method of :class:`~hccl_py.client.Hccl` stores its raw arguments in
a :class:`PrepareParam` (the official client's ``CommonPrepareParam``);
:func:`task_fields` validates it once, in a fixed order, against the op
table's facts for that op, and returns the task's fields. A bad argument
raises :class:`~hccl_py.core.errors.InvalidCall` naming the rule that refused it.
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch

from ..core import layout
from ..core.config import as_index, c_int
from ..core.constants import (
    DTYPE_INFO,
    HCCL_MAX_HANDLE_ID,
    KERNEL_REDUCE_OPS,
    MAX_REPEAT,
    HcclCMDType,
    HcclDataType,
    HcclReduceOp,
    hccl_dtype_of,
)
from ..core.errors import HcclBoundsError, InvalidCall
from ..core.gm import GmAddr, what_is
from ..core.platform import Platform
from ..core.task import Task
from ..ops import OpSpec

E = TypeVar("E", bound=enum.IntEnum)


@dataclass
class PrepareParam:
    """The raw arguments of one Prepare call, whatever the op."""

    spec: OpSpec
    send_buf: Any
    recv_buf: Any
    data_type: Any
    repeat: Any
    count: Any = None
    reduce_op: Any = None
    stride: Any = 0
    recv_type: Any = None
    send_counts: Any = None
    sdispls: Any = None
    recv_counts: Any = None
    rdispls: Any = None


class Limits(NamedTuple):
    """What the preparing object allows now (platform, tilings, handles used)."""

    platform: Platform
    kernel_api: bool
    has_tiling: bool
    handles_used: int
    #: InterHcclGroupSync messages sent: they share the domain's message slots with Prepares.
    syncs_used: int
    rank_dim: int
    #: The global rank that prepares (whose memory the buffers must be).
    rank: int
    #: Whether the server reads strideCount 0 of a repeated AllGather or ReduceScatter as
    #: count * repeat (the Ascend 950 AI CPU server), not as count.
    zero_stride_spans_repeats: bool = False
    #: Whether the object is the CCU client (Ascend 950).
    ccu: bool = False


#: Ranks whose AlltoAllV counts the CCU client holds: ``AlltoAllVParamCcu``'s arrays have
#: ``HCCL_MAX_RANK_NUM`` (32) entries (hccl_inner_def.h), and ``CommonPrepareImpl`` copies
#: ``rankNum`` entries into each (hccl_ccu_v0.h), so a 33rd overwrites the next array.
CCU_ALLTOALLV_MAX_RANKS = 32

#: The ops whose strideCount 0 spans every round on the Ascend 950 AI CPU server.
_SPANS_REPEATS = (HcclCMDType.HCCL_CMD_ALLGATHER, HcclCMDType.HCCL_CMD_REDUCE_SCATTER)


def _spanning_stride(fields: dict[str, Any]) -> int:
    """strideCount 0 as the Ascend 950 AI CPU server reads it: count * repeat when repeat > 1,
    so that each rank's rounds lie side by side (comm_kfc_open_kernel_adapter.cc,
    CreateOpParamByBaseOpParam), else 0 (count)."""
    return fields["count"] * fields["repeat"] if fields["repeat"] > 1 else 0


def task_fields(p: PrepareParam, limits: Limits) -> dict[str, Any]:
    """Validate ``p`` against the op table and ``limits``; return the Task fields."""
    spec = p.spec
    dtype = _common(p, limits)
    fields: dict[str, Any] = dict(
        send=p.send_buf, recv=p.recv_buf, dtype=dtype, repeat=int(p.repeat)
    )
    recv_type = as_enum(HcclDataType, p.recv_type) if spec.pairwise_counts else dtype
    if recv_type != dtype:
        raise InvalidCall(
            "bad-argument",
            "recvType must equal sendType",
            expected=dtype.name,
            actual=p.recv_type if recv_type is None else recv_type.name,
        )
    if spec.count_arg is not None:
        # count 0 is the kernel API's rule; framework collectives of empty tensors may move nothing
        fields["count"] = count(spec.count_arg, p.count, spec.zero_count or not limits.kernel_api)
    if spec.reduces:
        fields["reduce_op"] = reduce_op(p.reduce_op)
    if spec.strided:
        fields["stride"] = count("strideCount", p.stride)
        if limits.zero_stride_spans_repeats and spec.cmd in _SPANS_REPEATS:
            fields["stride"] = fields["stride"] or _spanning_stride(fields)
    if spec.pairwise_counts:
        for name, key in (
            ("sendCounts", "send_counts"),
            ("sdispls", "sdispls"),
            ("recvCounts", "recv_counts"),
            ("rdispls", "rdispls"),
        ):
            fields[key] = array(name, getattr(p, key), limits.rank_dim)
    # hccl_py's own refusals, which the official client does not make: decided here, from
    # the arguments, on every core, so that every core refuses the same call and the cores'
    # handle ids stay equal in a lenient run (only the sending core builds the task)
    me = limits.rank
    if p.send_buf.alloc.rank != me or p.recv_buf.alloc.rank != me:
        _foreign(p, me)
    platform = limits.platform
    if limits.kernel_api:
        limit = platform.max_alltoall_ranks
        if limit and limits.rank_dim > limit and spec.name in ("AlltoAll", "AlltoAllV"):
            raise InvalidCall(
                "platform-limit",
                f"{platform.name} allows at most {limit} ranks in {spec.name}",
                actual=limits.rank_dim,
            )
        if limits.ccu and spec.pairwise_counts and limits.rank_dim > CCU_ALLTOALLV_MAX_RANKS:
            raise InvalidCall(
                "platform-limit",
                f"the CCU client's {spec.name} holds the counts of at most "
                f"{CCU_ALLTOALLV_MAX_RANKS} ranks (AlltoAllVParamCcu, hccl_inner_def.h): on "
                "more, each rank's entries overwrite another array's and the data moves wrong",
                actual=limits.rank_dim,
            )
        cap = platform.max_task_bytes
        if cap and (p.send_buf.alloc.nbytes > cap or p.recv_buf.alloc.nbytes > cap):
            _task_bytes(spec, fields, limits)
    return fields


def _foreign(p: PrepareParam, me: int) -> None:
    """A send or receive buffer in another rank's memory (hccl_py's refusal, not the client's)."""
    for side, addr in (("send", p.send_buf), ("recv", p.recv_buf)):
        owner = addr.alloc.rank
        if owner is not None and owner != me:
            raise InvalidCall(
                "foreign-memory", f"{side}Buf points into rank {owner}'s memory, not this rank's"
            )


def _task_bytes(spec: OpSpec, fields: dict[str, Any], limits: Limits) -> None:
    """Ascend 950: one task moves at most ``max_task_bytes`` of data on a side.

    A documented limit that no client Prepare checks (docs/notes/official-client.md,
    section f); hccl_py refuses it. A side's bytes lie inside its allocation (the
    sending core's bounds check says so, in every run), so only an allocation
    larger than the limit can hold too much: :func:`task_fields` calls this for
    such a (rare) one, and the extent is computed from the layout, with a
    throwaway Task that is never sent.
    """
    cap = limits.platform.max_task_bytes
    shape = Task(
        op=spec.cmd, domain=None, rank=limits.rank, rank_dim=limits.rank_dim, handle=-1,
        seq=-1, **fields,
    )  # fmt: skip
    for side in ("send", "recv"):
        nbytes = fields[side].alloc.nbytes
        extent = layout.span(layout.all_blocks(shape, side)) if nbytes > cap else None
        if extent is None:
            continue
        lo, hi = extent
        # a range outside the allocation is the bounds check's (an error in every run)
        if lo >= 0 and hi <= nbytes and hi - lo > cap:
            raise InvalidCall(
                "platform-limit",
                f"one task's data exceeds {cap} bytes on {limits.platform.name}",
                actual=hi - lo,
            )


def _common(p: PrepareParam, limits: Limits) -> HcclDataType:
    """The checks every Prepare makes, in the official client's order."""
    spec, platform = p.spec, limits.platform
    if limits.kernel_api and not platform.supports(spec.cmd):
        raise InvalidCall("unsupported", f"{spec.name} is not supported on {platform.name}")
    if not limits.has_tiling:
        raise no_tiling(spec.name, spec.cmd)
    number = c_int(p.repeat)
    if number is None or not 1 <= number <= MAX_REPEAT:
        raise InvalidCall(
            "bad-argument", _bad_repeat(p.repeat, number), expected="1..255", actual=p.repeat
        )
    dtype = enum_arg(HcclDataType, p.data_type, "the data type")
    if dtype is None or dtype is HcclDataType.HCCL_DATA_TYPE_RESERVED:
        raise InvalidCall(
            "bad-argument",
            "data type out of range (the official client checks INT8 <= type < RESERVED)",
            actual=p.data_type if dtype is None else dtype.name,
        )
    if dtype not in spec.dtypes:
        allowed = ", ".join(t.name.removeprefix("HCCL_DATA_TYPE_") for t in spec.dtypes)
        raise InvalidCall(
            "bad-argument",
            f"data type {dtype.name} is not among the data types the kernel API documents for "
            f"{spec.name} ({allowed}); the official client checks only INT8 <= type < RESERVED "
            "and would send it, hccl_py keeps the documented list",
            expected=allowed,
            actual=dtype.name.removeprefix("HCCL_DATA_TYPE_"),
        )
    checked_gm(p.send_buf, "sendBuf")
    checked_gm(p.recv_buf, "recvBuf")
    if limits.handles_used >= HCCL_MAX_HANDLE_ID:
        raise InvalidCall(
            "handle-limit",
            f"the domain already used its {HCCL_MAX_HANDLE_ID} handles",
            expected=f"< {HCCL_MAX_HANDLE_ID} tasks",
        )
    if limits.handles_used + limits.syncs_used >= HCCL_MAX_HANDLE_ID:
        raise InvalidCall(
            "handle-limit",
            slots_used(limits.handles_used, limits.syncs_used),
            expected=f"<= {HCCL_MAX_HANDLE_ID} Prepare and InterHcclGroupSync calls",
        )
    return dtype


def _bad_repeat(value: Any, number: int | None) -> str:
    """Why ``value`` is no repeat, and what the C++ client makes of it (its ``uint8_t repeat``
    takes any integer modulo 256, a bool as 0 or 1; repeat 0 returns -1, hccl_aicpu_impl.h)."""
    head = f"repeat must be 1..{MAX_REPEAT}"
    if isinstance(value, (bool, np.bool_)):
        return (
            f"{head}, an int, not a bool: C++ converts {bool(value)} to {int(value)}; hccl_py "
            f"refuses bools for integer arguments, pass {int(value)}"
        )
    if number is None:
        return f"{head}, an int (uint8_t), not {what_is(value)}"
    if number == 0:
        return f"{head}: with repeat 0 the official client returns -1 and sends nothing"
    wrapped = number % 256
    then = "its Prepare returns -1" if wrapped == 0 else f"{wrapped} rounds would run, not {number}"
    return f"{head} (a uint8_t): C++ converts {number} to {wrapped}, so {then}"


def _same_type(data_type: HcclDataType, dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` may hold elements of ``data_type``.

    A ``torch.uint8`` tensor is untyped GM (raw bytes, like a ``GM_ADDR``) and holds
    any type; bool counts as UINT8; byte-only types (HIF8, FP8E8M0, MXFP8) have no
    torch dtype, so any 1-byte tensor holds them.
    """
    info = DTYPE_INFO[data_type]
    if dtype == torch.uint8:
        return True
    if info.torch_dtype is None:
        return torch.empty((), dtype=dtype).element_size() == info.size
    return dtype == info.torch_dtype or (
        dtype == torch.bool and data_type == HcclDataType.HCCL_DATA_TYPE_UINT8
    )


def dtype_mismatch(p: PrepareParam, data_type: HcclDataType) -> str | None:
    """Why ``p``'s buffers do not hold ``data_type`` elements (tensors of another dtype), or None.

    Only buffers that are (addresses into) a typed tensor given to ``hp.launch`` have
    a dtype to compare; windows and uint8 tensors are raw GM. Hardware reinterprets
    the bytes.
    """
    found = {}
    for name, buf in (("sendBuf", p.send_buf), ("recvBuf", p.recv_buf)):
        dtype = buf.alloc.dtype if isinstance(buf, GmAddr) and buf.alloc is not None else None
        if dtype is not None and not _same_type(data_type, dtype):
            found[f"{name} ({buf.alloc.name})"] = dtype
    if not found:
        return None
    what = " and ".join(f"{where} is a {dtype} tensor" for where, dtype in found.items())
    short = data_type.name.removeprefix("HCCL_DATA_TYPE_")
    dtypes = set(found.values())
    declare = ""
    if len(dtypes) == 1:
        with contextlib.suppress(TypeError):  # a torch dtype with no HcclDataType
            declare = f"declare {hccl_dtype_of(dtypes.pop()).name} or "
    return (
        f"dataType {data_type.name} ({DTYPE_INFO[data_type].size}-byte elements), but {what}: "
        f"the bytes are reinterpreted as {short}, as hardware does; {declare}pass a tensor of "
        "the declared type"
    )


def as_enum(cls: type[E], value: Any) -> E | None:
    """``value`` as a member of the C enum ``cls``, or None (out of range, not an integer)."""
    number = c_int(value)
    # the enum's own table of members by value: what cls(value) finds, without its two frames
    return None if number is None else cls._value2member_map_.get(number)


def enum_arg(cls: type[E], value: Any, name: str) -> E | None:
    """Argument ``name`` of the C enum type ``cls`` as its member, None when out of range; one
    that is no int is a ``bad-argument`` that says so, rather than that its value is out of
    range."""
    member = as_enum(cls, value)
    if member is None and c_int(value) is None:
        raise InvalidCall(
            "bad-argument", f"{name} must be an int (an {cls.__name__})", actual=what_is(value)
        )
    return member


def slots_used(prepares: int, syncs: int) -> str:
    """Why no message slot is left: a domain's queue has 64, and Finalize needs the last one."""
    return (
        f"the domain already used {prepares + syncs} of its {HCCL_MAX_HANDLE_ID + 1} message "
        f"slots ({prepares} Prepare, {syncs} InterHcclGroupSync or QueueBarrier); the last one "
        "is Finalize's"
    )


def count(name: str, value: Any, allow_zero: bool = True) -> int:
    """A count or stride argument: a non-negative int (and not 0 unless ``allow_zero``)."""
    number = c_int(value)
    if number is None or number < 0:
        raise InvalidCall("bad-argument", f"{name} must be a non-negative int", actual=value)
    if not allow_zero and number == 0:
        raise InvalidCall("bad-argument", f"{name} must not be 0", actual=value)
    return number


def reduce_op(value: Any) -> HcclReduceOp:
    """A reduce op the kernel API supports (SUM, MAX, MIN)."""
    op = enum_arg(HcclReduceOp, value, "the reduce op")
    if op is None:
        raise InvalidCall("bad-argument", "reduce op out of range", actual=value)
    if op not in KERNEL_REDUCE_OPS:
        raise InvalidCall(
            "bad-argument",
            f"reduce op {op.name} is not supported by the kernel API",
            actual=op.name,
        )
    return op


def array(name: str, values: Any, n: int) -> tuple[int, ...]:
    """The first ``n`` entries of a per-peer uint64 array (``n`` = rankDim, or twice it).

    The official client takes a pointer and reads the first ``n`` entries
    (``AssembleHcclMsgExt`` in hccl_aicpu_common.h, the CCU client's loops over
    ``rankNum``), so a longer sequence, numpy array, tensor or GM allocation is
    valid; fewer entries are an error that says how many were given.
    """
    if values is None or (isinstance(values, GmAddr) and values.is_null):
        raise InvalidCall("bad-argument", f"{name} is missing")
    if isinstance(values, GmAddr):
        try:
            raw = values.read_bytes(8 * n)
        except HcclBoundsError as exc:
            raise InvalidCall(
                "bounds",
                f"{name} must hold at least {n} uint64 entries: {exc.reason}",
            ) from None
        values = np.frombuffer(raw, dtype="<u8")
    width = _entry_bytes(values)
    if width not in (None, 8):
        raise InvalidCall(
            "bad-argument",
            f"{name} is an array of {values.dtype} ({width}-byte entries): the official "
            "client casts the pointer to uint64_t* and reads 8-byte entries; pass 64-bit "
            "integers (or a list)",
        )
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
    items = values.tolist() if hasattr(values, "tolist") else values
    if not isinstance(items, (list, tuple)):
        raise InvalidCall(
            "bad-argument",
            f"{name} must be a sequence or GM address of at least {n} integers, "
            f"not {what_is(values)}",
        )
    if len(items) < n:
        raise InvalidCall(
            "bad-argument",
            f"{name} must hold at least {n} integers (rankDim {n}), {len(items)} given",
            expected=f">= {n}",
            actual=len(items),
        )
    numbers = [as_index(v) for v in items[:n]]  # numpy integers too (list(np.cumsum(...)))
    if None in numbers:
        raise InvalidCall("bad-argument", f"{name} must hold integers", actual=list(items[:n]))
    if any(v < 0 for v in numbers):
        raise InvalidCall("bad-argument", f"{name} must be non-negative", actual=numbers)
    return tuple(numbers)


def _entry_bytes(values: Any) -> int | None:
    """The size of one entry of a numpy array or tensor (None for a Python sequence)."""
    if isinstance(values, torch.Tensor):
        return values.element_size()
    if isinstance(values, np.ndarray):
        return values.itemsize
    return None


def checked_gm(value: Any, name: str) -> GmAddr:
    """``value`` as a GM address argument ``name`` of a client call: not null, not anything
    else (an InvalidCall ``bad-argument`` that says what it is and what to pass)."""
    address = isinstance(value, GmAddr)
    if value is None or (address and value.is_null):
        raise InvalidCall("bad-argument", f"{name} is null", actual=value)
    if not address:
        raise InvalidCall(
            "bad-argument",
            f"{name} must be a GM address (a tensor argument of hp.launch, an address "
            f"computed from one, or hp.gm_tensor's source), not {what_is(value)}"
            + (
                ": pass torch.from_numpy(array) to hp.launch"
                if hasattr(value, "__array__") and not isinstance(value, torch.Tensor)
                else ""
            ),
        )
    return value


def no_tiling(name: str, cmd: HcclCMDType) -> InvalidCall:
    """The refusal of a call ``name`` whose object has no cc tiling of type ``cmd``."""
    return InvalidCall(
        "no-tiling",
        f"no tiling set for {name}: call SetCcTilingV2 with the offset of an Mc2CcTiling whose "
        f"opType is {cmd.name}",
    )
