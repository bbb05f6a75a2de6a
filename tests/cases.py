"""Shared helpers of the kernel API tests: tilings, picklable op cases, and the code every rank runs.

A semantic test describes what to run as :class:`OpCase` values (plain,
picklable data), runs :func:`run_cases` on every rank inside ``hp.run`` (on any
backend: threads of this process or one process per rank), and compares each
rank's :class:`CaseResult` with the independent oracle in :mod:`reference`
(:func:`check_case`). Buffers are filled from a seed, so every rank and the
test itself can rebuild the same inputs. Random cases come from
:func:`draw_case`, which takes any integer source: hypothesis strategies and
numpy's RNG share it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import reference as ref
import torch

import hccl_py as hp
from hccl_py import (
    Hccl,
    HcclDataType,
    HcclReduceOp,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

#: Seconds any blocking call of a test run may wait (nothing in these tests should wait long).
RUN_TIMEOUT = 20.0

#: The kernel ops the cases cover, with their facts from the op table.
_SPECS = {name: spec for name, spec in hp.ops.BY_NAME.items() if spec.executable}
OPS = tuple(_SPECS)
REDUCING = tuple(name for name, spec in _SPECS.items() if spec.reduces)
CMD = {name: spec.cmd for name, spec in _SPECS.items()}
ALG_CONFIG = {name: spec.alg_config for name, spec in _SPECS.items()}
#: How a case commits: ``[True]`` template flag, ``commit=True``, one Commit before each
#: Wait, or every Commit before the first Wait.
COMMIT_MODES = ("template", "kwarg", "each", "all")
#: How AlltoAllV count and displacement arrays are passed.
ARRAY_KINDS = ("list", "tuple", "numpy", "torch")
WORLD_GROUP = "hccl_world_group"


#: The ops whose cc tilings a :class:`KernelTiling` holds per context (``GetHcclContext``
#: index), each naming that context's domain: every op on context 0, the ops the two-domain
#: tests run on context 1 (an Mc2InitTiling registers at most 8 cc tilings).
CONTEXT_OPS = {0: OPS, 1: ("AllReduce", "AllGather")}


def cc_member(op: str, index: int = 0) -> str:
    """The field of context ``index``'s cc tiling of ``op`` (``allGatherCcTiling``, ``...1``)."""
    base = f"{op[0].lower()}{op[1:]}CcTiling"
    return base if index == 0 else f"{base}{index}"


class KernelTiling(TilingData):
    """The test kernels' tiling: the init header and the cc tilings of :data:`CONTEXT_OPS`."""

    _fields_ = [("mc2InitTiling", Mc2InitTiling)] + [
        (cc_member(op, index), Mc2CcTiling) for index, ops in CONTEXT_OPS.items() for op in ops
    ]


def make_tiling(skip_local: bool = False, groups: dict[int, Any] | None = None) -> KernelTiling:
    """Host side: fill the init tiling and every op's cc tiling (skipLocalRankCopy optional).

    ``groups`` is what the launch passes as ``groups=`` (context index -> domain):
    each context's cc tilings name its domain, as a host builds them; contexts
    it leaves out name the world group. Every cc tiling names FP32 and SUM, the test
    kernels' types, which the Ascend 950 CCU client moves and reduces by.
    """
    tiling = KernelTiling()
    names = {index: WORLD_GROUP for index in CONTEXT_OPS}
    names.update({index: group.name for index, group in (groups or {}).items()})
    cfg = Mc2CcTilingConfig(WORLD_GROUP, CMD["AllGather"], ALG_CONFIG["AllGather"])
    results = [cfg.GetTiling(tiling.mc2InitTiling)]
    for index, ops in CONTEXT_OPS.items():
        results.append(cfg.SetGroupName(names[index]))
        for op in ops:
            results += [
                cfg.SetOpType(CMD[op]),
                cfg.SetAlgConfig(ALG_CONFIG[op]),
                cfg.SetSkipLocalRankCopy(int(skip_local and op in ("AllGather", "AlltoAll"))),
                cfg.SetReduceType(
                    HcclReduceOp.HCCL_REDUCE_SUM,
                    HcclDataType.HCCL_DATA_TYPE_FP32,
                    HcclDataType.HCCL_DATA_TYPE_FP32,
                ),
                cfg.GetTiling(getattr(tiling, cc_member(op, index))),
            ]
    if any(results):
        raise AssertionError(f"building the test tiling failed: {cfg.last_error}")
    return tiling


def cc_offset(op: str, index: int = 0) -> int:
    """``offsetof(KernelTiling, <op>CcTiling)`` of context ``index``."""
    return offsetof(KernelTiling, cc_member(op, index))


def init_hccl(hccl: Hccl, tilingGM: Any, index: int = 0, ops: Sequence[str] | None = None) -> Hccl:
    """Inside a kernel: ``InitV2`` on context ``index`` and ``SetCcTilingV2`` for each op
    (default: every op that context has cc tilings for)."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(KernelTiling, tilingGM)
    hccl.InitV2(hp.GetHcclContext(index), tiling)
    chosen = CONTEXT_OPS[index] if ops is None else ops
    codes = {op: hccl.SetCcTilingV2(cc_offset(op, index)) for op in chosen}
    if any(codes.values()):
        raise AssertionError(f"SetCcTilingV2 failed: {codes} ({hccl.last_error})")
    return hccl


def probe(
    kernel: Callable[..., Any],
    *extra: Any,
    block_dim: int = 1,
    kernel_type: str = "aiv",
    domains: int = 1,
    nbytes: int = 1024,
) -> tuple[list[Any], np.ndarray]:
    """Per rank: launch ``kernel(xGM, yGM, tilingGM, record, *extra)``; return (record, y bytes).

    ``x`` holds float32 ``rank + 1`` everywhere, ``y`` is zero. With
    ``domains=2`` context 1 is a second domain over all ranks (from
    ``hp.new_group``). The kernel appends what it observed to ``record``.
    """
    n = nbytes // 4
    x = torch.full((n,), float(hp.get_rank() + 1), device=hp.device())
    y = torch.zeros(n, device=hp.device())
    groups = {0: hp.world_group()}
    if domains == 2:
        groups[1] = hp.new_group(range(hp.get_world_size()))
    record: list[Any] = []
    hp.launch(
        kernel,
        x,
        y,
        make_tiling(groups=groups),
        record,
        *extra,
        block_dim=block_dim,
        kernel_type=kernel_type,
        groups=groups,
    )
    return record, y.cpu().numpy()


# ------------------------------------------------------------------ op cases


@dataclass(frozen=True)
class OpCase:
    """One collective to run on ``world_size`` ranks and check against the reference.

    Per-rank tuples are indexed by rank; AlltoAllV arrays by ``[rank][peer]``.
    ``send_offsets``/``recv_offsets`` are the (element-aligned) byte offsets the
    kernel adds to its buffer addresses; ``*_slack`` bytes follow the needed
    range. Every byte outside the written ranges is a guard that must survive.
    ``values`` (per rank, optional) replaces the random send data of a
    reducing op with these numbers.
    """

    op: str
    world_size: int
    dtype: int
    repeat: int = 1
    count: int = 0
    stride: int = 0
    reduce_op: int = ref.SUM
    send_counts: tuple[tuple[int, ...], ...] = ()
    sdispls: tuple[tuple[int, ...], ...] = ()
    recv_counts: tuple[tuple[int, ...], ...] = ()
    rdispls: tuple[tuple[int, ...], ...] = ()
    send_offsets: tuple[int, ...] = ()
    recv_offsets: tuple[int, ...] = ()
    send_slack: tuple[int, ...] = ()
    recv_slack: tuple[int, ...] = ()
    commit: str = "template"
    dtype_as_int: bool = False
    array_kind: str = "list"
    block_dim: int = 1
    skip_local: bool = False
    seed: int = 0
    values: tuple[tuple[float, ...], ...] = ()

    @property
    def elem_size(self) -> int:
        """Element size in bytes."""
        return ref.ELEM_SIZE[self.dtype]

    def offset(self, side: str, rank: int) -> int:
        """Byte offset added to ``rank``'s send or recv address."""
        offsets = self.send_offsets if side == "send" else self.recv_offsets
        return offsets[rank] if offsets else 0

    def extent(self, side: str, rank: int) -> int:
        """Elements from the (offset) address to the end of the last block touched."""
        if self.op == "AlltoAllV":
            counts = (self.send_counts if side == "send" else self.recv_counts)[rank]
            displs = (self.sdispls if side == "send" else self.rdispls)[rank]
            return max(
                (d + self.repeat * c for d, c in zip(displs, counts, strict=True)), default=0
            )
        rounds = self.repeat * self.count
        per_peer = self.op == "AlltoAll" or (self.op, side) in (
            ("AllGather", "recv"),
            ("ReduceScatter", "send"),
        )
        step = self.stride or self.count
        return (self.world_size - 1) * step + rounds if per_peer else rounds

    def nbytes(self, side: str, rank: int) -> int:
        """Size of ``rank``'s send or recv allocation."""
        slack = self.send_slack if side == "send" else self.recv_slack
        return (
            self.offset(side, rank)
            + self.extent(side, rank) * self.elem_size
            + (slack[rank] if slack else 0)
        )


@dataclass
class CaseResult:
    """What one rank saw: its buffers afterwards and, per core, (block, handle, waits, query)."""

    send: np.ndarray
    recv: np.ndarray
    cores: tuple[tuple[int, int, tuple[int, ...], int], ...] = field(default_factory=tuple)


def _random_values(rng: np.random.Generator, dtype: int, n: int) -> np.ndarray:
    """Finite values of a reducible float type (varied magnitudes), as bytes."""
    values = (rng.standard_normal(n) * 10.0 ** rng.uniform(-2, 3, n)).astype(np.float32)
    if dtype == ref.FP16:
        return values.astype(np.float16).view(np.uint8)
    if dtype == ref.BFP16:
        return (values.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(np.uint8)
    return values.view(np.uint8)


def rank_buffers(case: OpCase, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """``rank``'s initial send and recv bytes: random, reproducible from the case's seed."""
    rng = np.random.default_rng([case.seed, rank])
    send = rng.integers(0, 256, case.nbytes("send", rank), dtype=np.uint8)
    recv = rng.integers(0, 256, case.nbytes("recv", rank), dtype=np.uint8)
    if case.op in REDUCING and case.dtype in (ref.FP16, ref.FP32, ref.BFP16):
        send = _random_values(rng, case.dtype, len(send) // case.elem_size)
    if case.values:
        data = ref.encode(np.asarray(case.values[rank], dtype=np.float32), case.dtype)
        start = case.offset("send", rank)
        send[start : start + len(data)] = data
    return send, recv


def as_array(values: Sequence[int], kind: str) -> Any:
    """AlltoAllV counts or displacements as a list, tuple, numpy uint64 array or torch tensor."""
    if kind == "tuple":
        return tuple(values)
    if kind == "numpy":
        return np.array(values, dtype=np.uint64)
    if kind == "torch":
        return torch.tensor(values, dtype=torch.int64)
    return list(values)


def prepare_args(case: OpCase, rank: int, send: Any, recv: Any) -> tuple:
    """The positional arguments of the case's Prepare call on ``rank`` (AscendC order).

    Data type and reduce op are passed as enum members, or as plain ints with
    ``dtype_as_int``.
    """
    dtype = case.dtype if case.dtype_as_int else HcclDataType(case.dtype)
    reduce_op = case.reduce_op if case.dtype_as_int else HcclReduceOp(case.reduce_op)
    c, s, r = case.count, case.stride, case.repeat
    if case.op == "AllReduce":
        return send, recv, c, dtype, reduce_op, r
    if case.op == "ReduceScatter":
        return send, recv, c, dtype, reduce_op, s, r
    if case.op in ("AllGather", "AlltoAll"):
        return send, recv, c, dtype, s, r
    sc, sd, rc, rd = (
        as_array(arrays[rank], case.array_kind)
        for arrays in (case.send_counts, case.sdispls, case.recv_counts, case.rdispls)
    )
    return send, sc, sd, dtype, recv, rc, rd, dtype, r


def prepare(hccl: Hccl, case: OpCase, rank: int, send: Any, recv: Any) -> int:
    """Issue the case's Prepare call with its commit style; return the handle."""
    method = getattr(hccl, case.op)
    args = prepare_args(case, rank, send, recv)
    if case.commit == "template":
        return method[True](*args)
    if case.commit == "kwarg":
        return method(*args, commit=True)
    return method(*args)


def _case_kernel(
    sendGM: Any, recvGM: Any, tilingGM: Any, case: OpCase, rank: int, record: list
) -> None:
    """Every core: prepare, commit and wait the case's task, query it, finalize."""
    hccl = init_hccl(Hccl(), tilingGM, ops=(case.op,))
    handle = prepare(
        hccl, case, rank, sendGM + case.offset("send", rank), recvGM + case.offset("recv", rank)
    )
    if case.commit == "all":
        for _ in range(case.repeat):
            hccl.Commit(handle)
    waits = []
    for _ in range(case.repeat):
        if case.commit == "each":
            hccl.Commit(handle)
        waits.append(hccl.Wait(handle))
    query = hccl.Query(handle)
    hp.SyncAll()
    hccl.Finalize()
    record.append((hp.GetBlockIdx(), handle, tuple(waits), query))


def run_cases(cases: Sequence[OpCase]) -> list[CaseResult | None]:
    """Run on every rank: each case in turn on the domain of its first ``world_size`` ranks.

    Ranks outside a case's domain take part in creating it and report None.
    """
    rank, world = hp.get_rank(), hp.get_world_size()
    results: list[CaseResult | None] = []
    for case in cases:
        if case.world_size > world:
            raise ValueError(f"case needs {case.world_size} ranks, the world has {world}")
        groups = {
            0: hp.world_group()
            if case.world_size == world
            else hp.new_group(range(case.world_size))
        }
        if rank >= case.world_size:
            results.append(None)
            continue
        send_np, recv_np = rank_buffers(case, rank)
        send = torch.from_numpy(send_np.copy()).to(hp.device())
        recv = torch.from_numpy(recv_np.copy()).to(hp.device())
        record: list = []
        hp.launch(
            _case_kernel,
            send,
            recv,
            make_tiling(case.skip_local, groups),
            case,
            rank,
            record,
            block_dim=case.block_dim,
            groups=groups,
        )
        results.append(CaseResult(send.cpu().numpy(), recv.cpu().numpy(), tuple(sorted(record))))
    return results


# ------------------------------------------------------------------ checking


def expected_recvs(
    case: OpCase, sends: list[np.ndarray], recvs: list[np.ndarray], platform: str = "A3"
) -> list:
    """The reference's receive buffers for a case, given every rank's initial buffers.

    ``skip_local`` leaves the own block unwritten on Atlas A2 only (SetSkipLocalRankCopy.md:
    a reserved field without effect on A3)."""
    n = case.world_size
    skip = case.skip_local and platform == "A2"
    common = dict(
        dtype=case.dtype,
        repeat=case.repeat,
        send_offsets=[case.offset("send", r) for r in range(n)],
        recv_offsets=[case.offset("recv", r) for r in range(n)],
    )
    c, s = case.count, case.stride
    if case.op == "AllReduce":
        return ref.all_reduce(sends, recvs, count=c, reduce_op=case.reduce_op, **common)
    if case.op == "AllGather":
        return ref.all_gather(sends, recvs, count=c, stride=s, skip_local=skip, **common)
    if case.op == "ReduceScatter":
        return ref.reduce_scatter(
            sends, recvs, count=c, stride=s, reduce_op=case.reduce_op, **common
        )
    if case.op == "AlltoAll":
        return ref.all_to_all(sends, recvs, count=c, stride=s, skip_local=skip, **common)
    return ref.all_to_all_v(
        sends,
        recvs,
        send_counts=case.send_counts,
        sdispls=case.sdispls,
        recv_counts=case.recv_counts,
        rdispls=case.rdispls,
        **common,
    )


def assert_bytes_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Byte-exact comparison with a message naming the first differing bytes."""
    got, want = np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8)
    if got.shape == want.shape and np.array_equal(got, want):
        return
    if got.shape != want.shape:
        raise AssertionError(f"{what}: {got.size} bytes, expected {want.size}")
    bad = np.flatnonzero(got != want)
    raise AssertionError(
        f"{what}: {len(bad)} of {got.size} bytes differ, first at byte {bad[0]}: "
        f"got {got[bad[:8]].tolist()}, expected {want[bad[:8]].tolist()} "
        f"(at bytes {bad[:8].tolist()})"
    )


def check_case(case: OpCase, results: Sequence[CaseResult | None], platform: str = "A3") -> None:
    """Compare every rank's result of ``case`` with the reference (buffers, handles, codes)."""
    n = case.world_size
    inputs = [rank_buffers(case, r) for r in range(n)]
    sends = [s for s, _ in inputs]
    want = expected_recvs(case, sends, [r for _, r in inputs], platform)
    for rank in range(n):
        res = results[rank]
        label = f"{case} rank {rank}"
        assert_bytes_equal(res.recv, want[rank], f"{label}: recvBuf")
        assert_bytes_equal(res.send, sends[rank], f"{label}: sendBuf must stay unmodified")
        expected_cores = tuple(
            (block, 0, (0,) * case.repeat, case.repeat) for block in range(case.block_dim)
        )
        assert res.cores == expected_cores, f"{label}: (block, handle, waits, query) per core"
    for res in results[n:]:
        assert res is None


def run_and_check(
    cases: Sequence[OpCase],
    backend: str,
    platform: str = "A3",
    schedule: str = "eager",
    world_size: int | None = None,
) -> None:
    """Run ``cases`` in ONE ``hp.run`` (world = the largest case unless given) and check them."""
    world = world_size or max(c.world_size for c in cases)
    per_rank = hp.run(
        run_cases,
        world_size=world,
        backend=backend,
        platform=platform,
        timeout=RUN_TIMEOUT,
        schedule=schedule,
        args=(list(cases),),
    )
    for i, case in enumerate(cases):
        check_case(case, [results[i] for results in per_rank], platform)


# ------------------------------------------------------------- random cases

#: ``draw(lo, hi)`` returns an int in ``[lo, hi]`` (hypothesis or numpy behind it).
Draw = Callable[[int, int], int]


def _pick(draw: Draw, options: Sequence[Any]) -> Any:
    return options[draw(0, len(options) - 1)]


def _draw_stride(draw: Draw, op: str, n: int, count: int, repeat: int) -> int:
    """0, the smallest non-overlapping strideCount, or more.

    With repeat > 1, AllGather and AlltoAll need strideCount >= repeat * count
    (spec section 4); ReduceScatter's strided side is read, so count suffices.
    """
    spread = op in ("AllGather", "AlltoAll") and repeat > 1 and n > 1
    minimum = repeat * count if spread else count
    kind = draw(0, 2)
    if kind == 0 and minimum == count:
        return 0
    return minimum + (draw(1, 8) if kind == 2 else 0)


def _draw_displs(draw: Draw, counts: Sequence[int], repeat: int, may_overlap: bool) -> tuple:
    """Displacements: disjoint blocks (of repeat * count) in random order with gaps.

    Send blocks (``may_overlap``) are sometimes placed anywhere, overlapping:
    reading the same bytes twice is allowed.
    """
    n = len(counts)
    if may_overlap and draw(0, 3) == 0:
        return tuple(draw(0, 12) for _ in range(n))
    remaining = list(range(n))
    order = [remaining.pop(draw(0, len(remaining) - 1)) for _ in range(n)]
    displs = [0] * n
    pos = 0
    for peer in order:
        pos += draw(0, 3)
        displs[peer] = pos
        pos += repeat * counts[peer]
    return tuple(displs)


def _draw_v_layout(draw: Draw, n: int, repeat: int) -> dict:
    zero = draw(0, 9) == 0
    counts = [[0 if zero else draw(0, 6) for _ in range(n)] for _ in range(n)]
    recv_counts = [[counts[i][j] for i in range(n)] for j in range(n)]
    return dict(
        send_counts=tuple(map(tuple, counts)),
        recv_counts=tuple(map(tuple, recv_counts)),
        sdispls=tuple(_draw_displs(draw, c, repeat, True) for c in counts),
        rdispls=tuple(_draw_displs(draw, c, repeat, False) for c in recv_counts),
        array_kind=_pick(draw, ARRAY_KINDS),
    )


def draw_case(draw: Draw, op: str | None = None, world_size: int | None = None) -> OpCase:
    """A random valid case of ``op`` (any op if None) on ``world_size`` (1..8 if None) ranks."""
    op = op or _pick(draw, OPS)
    n = world_size or draw(1, 8)
    dtype = _pick(draw, ref.REDUCE_TYPES if op in REDUCING else ref.MOVE_TYPES)
    size = ref.ELEM_SIZE[dtype]
    repeat = draw(1, 4)
    fields: dict[str, Any] = dict(
        op=op,
        world_size=n,
        dtype=dtype,
        repeat=repeat,
        send_offsets=tuple(draw(0, 4) * size for _ in range(n)),
        recv_offsets=tuple(draw(0, 4) * size for _ in range(n)),
        send_slack=tuple(draw(0, 3) * size for _ in range(n)),
        recv_slack=tuple(draw(0, 3) * size for _ in range(n)),
        commit=_pick(draw, COMMIT_MODES),
        dtype_as_int=bool(draw(0, 1)),
        block_dim=draw(1, 2),
        seed=draw(0, 2**32 - 1),
    )
    if op == "AlltoAllV":
        return OpCase(**fields, **_draw_v_layout(draw, n, repeat))
    count = draw(0 if _SPECS[op].zero_count else 1, 24)
    fields["count"] = count
    if op != "AllReduce":
        fields["stride"] = _draw_stride(draw, op, n, count, repeat)
    if op in REDUCING:
        fields["reduce_op"] = _pick(draw, (ref.SUM, ref.MAX, ref.MIN))
    return OpCase(**fields)


def numpy_cases(seed: int, n_cases: int, op: str | None = None) -> list[OpCase]:
    """``n_cases`` random cases drawn with numpy's RNG (same generator as the hypothesis one)."""
    rng = np.random.default_rng(seed)

    def draw(lo: int, hi: int) -> int:
        return int(rng.integers(lo, hi + 1))

    return [draw_case(draw, op) for _ in range(n_cases)]
