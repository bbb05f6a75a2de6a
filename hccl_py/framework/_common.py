"""Argument checks shared by the framework collectives, and the agreement step.

Every framework op first checks its arguments' types on the calling rank
(a :class:`TypeError`, as MindSpore documents), then runs :func:`agree`: the
ranks of the group exchange a small record of what they were asked to do
(op, dtype, shapes, split sizes or counts, and any local problem such as an
output that is too small). Every rank then holds every rank's record, so all
of them raise the same clear error, naming the ranks and values, before any
data moves: no rank hangs and no partial result is presented as success.
The exchange is a meeting of the server (``meet`` at ``EXCHANGE``: emulated
ranks hand their records to each other, gloo ranks all-gather them on the
domain's process group); where the server cannot meet, it costs two small
AllGathers (record lengths, then the records).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..core.config import c_int, checked_flag
from ..core.constants import HcclCMDType, HcclDataType, HcclReduceOp, hccl_dtype_of
from ..core.current import off_device
from ..core.errors import HcclMismatchError
from ..core.gm import strided_offsets
from ..core.group import WORLD_GROUP_NAME, Group
from ..core.plain import json_or
from ..kernel.context import current_rank_context
from ..server.protocol import EXCHANGE, Outgoing, Payload, put, record_length
from ._kernel import FrameworkKernel

_INT64 = HcclDataType.HCCL_DATA_TYPE_INT64
_UINT8 = HcclDataType.HCCL_DATA_TYPE_UINT8


def where(op: str) -> str:
    """``op`` and the calling rank, for messages about this rank's own arguments."""
    ctx = current_rank_context(required=False)
    return op if ctx is None else f"{op} on rank {ctx.rank}"


def check_tensor(op: str, name: str, value: Any, written: bool = False) -> torch.Tensor:
    """``value`` if it is a dense torch tensor with data (and, ``written`` by the op, one whose
    elements each have memory of their own), else a TypeError (ValueError for a meta tensor or
    shared elements)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where(op)}: {name} must be a torch.Tensor, not {type(value).__name__}")
    if value.layout != torch.strided:
        raise TypeError(
            f"{where(op)}: {name} is a {value.layout} tensor; pass a dense one (.to_dense())"
        )
    if value.is_meta:
        raise ValueError(
            f"{where(op)}: {name} (shape {tuple(value.shape)}) is on the meta device, which "
            "holds no data; create it on hp.device()"
        )
    elsewhere = off_device(value, current_rank_context())
    if elsewhere is not None:
        raise ValueError(f"{where(op)}: {name} (shape {tuple(value.shape)}) {elsewhere}")
    if written and _shares_elements(value):
        raise ValueError(
            f"{where(op)}: {name} (shape {tuple(value.shape)}, strides {value.stride()}) has "
            "elements that share memory (an expand or as_strided view), which the op would "
            "write more than once; pass a tensor with memory of its own (.clone())"
        )
    return value


def _shares_elements(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` are the same memory: never for a contiguous tensor or
    strides that each step over the span of the smaller ones; else counted exactly."""
    if t.is_contiguous() or t.numel() < 2:
        return False
    dims = sorted(
        (stride, size) for size, stride in zip(t.shape, t.stride(), strict=True) if size > 1
    )
    span = 0
    for stride, size in dims:
        if stride <= span:
            return len(np.unique(strided_offsets(t.shape, t.stride()))) < t.numel()
        span += (size - 1) * stride
    return False


def check_bool(op: str, name: str, value: Any) -> bool:
    """``value`` as a bool if it is one (or a numpy bool), else a TypeError (its message names
    the rank only then: every call passes a flag)."""
    if type(value) is bool:
        return value
    return checked_flag(f"{where(op)}: {name}", value)


def check_same_dtype(op: str, **tensors: torch.Tensor) -> None:
    """A TypeError unless every named tensor has the same dtype."""
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{name} is {dtype}" for name, dtype in dtypes.items())
        raise TypeError(f"{where(op)}: the tensors must have the same dtype: {listed}")


def hccl_dtype(op: str, tensor: torch.Tensor) -> HcclDataType:
    """The HcclDataType the tensor's elements travel as (bool as UINT8); TypeError if none."""
    try:
        return hccl_dtype_of(tensor.dtype)
    except TypeError:
        raise TypeError(f"{where(op)}: dtype {tensor.dtype} cannot be communicated") from None


def resolve_group(op: str, group: Any) -> Group:
    """The Group a ``group=`` argument names; the calling rank must be a member.

    None and ``"hccl_world_group"`` mean every rank; otherwise pass the object
    :func:`hccl_py.new_group` returned.
    """
    ctx = current_rank_context()
    if group is None or (isinstance(group, str) and group == WORLD_GROUP_NAME):
        return ctx.world_group
    if isinstance(group, str) and group in ctx.groups:
        raise ValueError(
            f"{where(op)}: group {group!r} is a group's name; the only name taken is "
            f"{WORLD_GROUP_NAME!r}: pass the group object that hccl_py.new_group returned"
        )
    if isinstance(group, str):
        raise ValueError(
            f"{where(op)}: unknown group name {group!r}; pass {WORLD_GROUP_NAME!r}, None or the "
            "group object that hccl_py.new_group returned"
        )
    if not isinstance(group, Group):
        raise TypeError(
            f"{where(op)}: group must be a group from hccl_py.new_group, {WORLD_GROUP_NAME!r} or "
            f"None, not {type(group).__name__}"
        )
    ctx.check_group(group, op)
    return group


def split_sizes(op: str, name: str, value: Any) -> list[int] | None:
    """A split-size argument (None, or a sequence of ints) as a list; TypeError otherwise."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().tolist()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise TypeError(
            f"{where(op)}: {name} must be a list of ints or None, not {type(value).__name__}"
        )
    bad = [v for v in value if c_int(v) is None]
    if bad:
        raise TypeError(f"{where(op)}: {name} must hold ints, got {list(value)}")
    return [int(v) for v in value]


def reduce_op_of(op: str, value: Any) -> HcclReduceOp:
    """A reduce operator from an HcclReduceOp, a name such as "sum", any object whose name
    ends in SUM, MAX or MIN (torch.distributed.ReduceOp.MAX), or a torch.distributed.ReduceOp
    object (``ReduceOp(ReduceOp.MAX)``: by its ``op``). A plain int is refused: frameworks
    number their operators differently (Paddle's ReduceOp.MIN is 2, HCCL's 2 is MAX)."""
    allowed = (
        HcclReduceOp.HCCL_REDUCE_SUM,
        HcclReduceOp.HCCL_REDUCE_MAX,
        HcclReduceOp.HCCL_REDUCE_MIN,
    )
    dist = torch.distributed
    if dist.is_available() and isinstance(getattr(value, "op", None), dist.ReduceOp.RedOpType):
        value = value.op  # a ReduceOp object: its RedOpType member, named like ReduceOp.MAX
    if isinstance(value, HcclReduceOp):
        chosen = value
    elif type(value) is int or isinstance(value, np.integer):  # an IntEnum goes by its name
        raise ValueError(
            f"{where(op)}: reduce op {value!r} is a plain int, which frameworks number "
            "differently (Paddle's ReduceOp.MIN is 2, HCCL's HCCL_REDUCE_MAX is 2): pass "
            "hp.HcclReduceOp.HCCL_REDUCE_MAX, torch.distributed.ReduceOp.MAX or a name such as "
            "'max'"
        )
    else:
        name = value if isinstance(value, str) else getattr(value, "name", str(value))
        key = str(name).rsplit(".", 1)[-1].upper().removeprefix("HCCL_REDUCE_")
        chosen = HcclReduceOp.__members__.get(f"HCCL_REDUCE_{key}")
    if chosen not in allowed:
        raise ValueError(f"{where(op)}: reduce op {value!r} is not supported; use SUM, MAX or MIN")
    return chosen


def rows(k: int) -> str:
    """``"1 row"``, ``"3 rows"``."""
    return f"{k} row" if k == 1 else f"{k} rows"


def who(group: Group, index: int) -> str:
    """How messages name the rank with index ``index`` in ``group``."""
    return f"rank {group.ranks[index]}"


def writable(out: torch.Tensor) -> torch.Tensor:
    """``out`` as a collective writes its result: detached, so that a leaf that requires grad
    (or a view of one) may be written, as the op's task writes it in place; the version
    counter, which the detached view shares, still moves on."""
    return out.detach()


def staged(out: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None] | None]:
    """A contiguous buffer to receive into, and what copies it into ``out`` afterwards."""
    if out.is_contiguous():
        return out, None
    buf = torch.empty(out.shape, dtype=out.dtype, device=out.device)
    return buf, lambda: writable(out).copy_(buf)


def source(tensor: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``tensor``'s values, contiguous, in memory that ``out`` does not share.

    In-place calls (the input a view of the output) and ``all_reduce`` send a
    copy, so the result never depends on when the output is written.
    """
    if tensor.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
        return tensor.clone(memory_format=torch.contiguous_format)
    return tensor.contiguous()


def exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """``[0, v0, v0 + v1, ...]`` without the total (displacements from sizes)."""
    values = np.asarray(values, dtype=np.int64)
    return np.cumsum(values) - values


def exchange(group: Group, op: str, payload: Outgoing) -> list[Payload]:
    """Every group rank's payload, in group rank order: AllGather the lengths, then the bytes."""
    ctx = current_rank_context()
    direct = ctx.server.meet(group, group.rank_of(ctx.rank), EXCHANGE, op, payload)
    if direct is not None:
        return direct
    n = group.size
    kernel = FrameworkKernel(group, HcclCMDType.HCCL_CMD_ALLGATHER, op)
    dev = ctx.device  # the hccl process group takes NPU tensors only
    length = torch.tensor([len(payload)], dtype=torch.int64).to(dev)
    lengths = torch.zeros(n, dtype=torch.int64, device=dev)
    handle = kernel.all_gather(length, lengths, _INT64, ("record_length", "record_lengths"))
    kernel.wait(handle)
    sizes = lengths.cpu().tolist()
    width = max(sizes)
    mine = torch.zeros(width, dtype=torch.uint8)
    put(payload, mine.numpy())
    every = torch.empty(n * width, dtype=torch.uint8, device=dev)
    kernel.all_gather(mine.to(dev), every, _UINT8, ("record", "records"))
    kernel.complete()
    rows = every.view(n, width).cpu().numpy()
    return [rows[i, : sizes[i]].tobytes() for i in range(n)]


def mismatch(op: str, reason: str) -> HcclMismatchError:
    """The error every rank raises when the ranks' arguments disagree."""
    return HcclMismatchError(reason, rank=current_rank_context().rank, op=op)


def agree(group: Group, op: str, problem: str | None, **facts: Any) -> list[dict[str, Any]]:
    """Exchange what every rank was asked to do; return every rank's ``facts``.

    Raises on every rank alike: :class:`HcclMismatchError` when ranks called
    different ops, ValueError when some rank reported a local ``problem``.
    """
    return records_of(group, op, exchange(group, op, record(op, problem, facts)))


#: ``json.dumps(..., separators=(",", ":"))`` with its encoder made once.
_compact = json.JSONEncoder(separators=(",", ":")).encode


def record(op: str, problem: str | None, facts: dict[str, Any]) -> bytes:
    """What this rank sends in its argument exchange: JSON text, which never holds a NUL byte
    (data that rides along follows one, :mod:`._carry`). A rank with a ``problem`` sends no
    facts: every rank raises on the problem before reading any (:func:`records_of`), and facts
    built from unusable arguments may be too long to exchange (a split list per row)."""
    body = (
        {"op": op, "problem": problem, **facts}
        if problem is None
        else {"op": op, "problem": problem}
    )
    return _compact(body).encode()


def listed(values: Sequence[Any], most: int = 16) -> str:
    """``values`` for a message (each as its repr: a string "3" is not the number 3): all of
    them, or the first and last few and how many there are."""
    if len(values) <= most:
        return str(list(values))
    half = most // 2
    shown = ", ".join([*map(repr, values[:half]), "...", *map(repr, values[-half:])])
    return f"[{shown}] ({len(values)} entries)"


#: Records read lately, by their bytes (read-only: every holder shares one): ranks that agree
#: send the same records, and a loop of calls sends the same ones again.
_DECODED: dict[bytes, dict[str, Any]] = {}
_DECODED_MOST = 256


def records_of(
    group: Group, op: str, raw: Sequence[Payload], heads: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """Every rank's record out of the exchanged payloads (:func:`agree` says what it raises);
    ``heads``: their :func:`~hccl_py.server.protocol.record_length`, where the caller has them."""
    records = []
    if heads is None:
        heads = [record_length(r) for r in raw]
    for r, length in zip(raw, heads, strict=True):
        head = bytes(r[:length])
        found = _DECODED.get(head)
        if found is None:
            if len(_DECODED) >= _DECODED_MOST:
                _DECODED.clear()
            found = _DECODED[head] = _record(
                r if isinstance(r, bytes) else bytes(r[: len(head) + 40])
            )
        records.append(found)
    ops = [r["op"] for r in records]
    if len(set(ops)) > 1:
        listed = ", ".join(f"{who(group, i)} {name}" for i, name in enumerate(ops))
        raise mismatch(
            op, f"ranks of {group.name} called different collectives at the same point: {listed}"
        )
    problems = [(i, r["problem"]) for i, r in enumerate(records) if r["problem"]]
    if problems:
        listed = "; ".join(f"{who(group, i)}: {text}" for i, text in problems)
        raise ValueError(f"{op}: {listed}")
    return records


def _record(raw: bytes) -> dict[str, Any]:
    """A peer's exchanged arguments; what a peer that prepared a kernel task sent there (its
    descriptor, up to a NUL byte: round 0's bytes may follow) reads as that task's op."""
    found = json_or(raw[: record_length(raw)])
    if not isinstance(found, dict) or not isinstance(found.get("op"), str | int):
        return {"op": f"something unreadable ({raw[:40]!r})", "problem": None}
    return {"problem": None, **found}


def require_same(
    group: Group, op: str, records: list[dict[str, Any]], *keys: tuple[str, str]
) -> None:
    """HcclMismatchError unless, for each ``(key, label)``, every rank's ``records[i][key]`` is
    the same (``label`` names the value in the message)."""
    for key, label in keys:
        values = [r[key] for r in records]
        if values.count(values[0]) != len(values):
            listed = ", ".join(f"{who(group, i)} {v}" for i, v in enumerate(values))
            raise mismatch(op, f"{label} must be the same on every rank of {group.name}: {listed}")
