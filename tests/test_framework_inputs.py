"""Arguments torch.distributed accepts, which the framework collectives accept too.

- Tensors that torch calls contiguous although their last stride is not 1: a
  one-element slice of a column (``holder[0:1, 1]`` of a 3x4 ``holder``: shape
  ``(1,)``, stride ``(4,)``) and an empty tensor from numpy (stride ``(0,)``), as
  input and as output, sync and async, where only one rank passes one, and as what
  a gloo rank returns. Before, their bytes were taken with ``.view(-1)`` and
  ``.view(torch.uint8)`` refused them (a raw RuntimeError, after the agreement).
- ``torch.distributed.ReduceOp`` objects (``ReduceOp(ReduceOp.MAX)``), by their op.

Every expected value is computed here from the ranks' inputs, with numpy.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from test_framework_examples import BACKENDS, TIMEOUT

import hccl_py as hp
from hccl_py.launcher import wire

SENTINEL = -5.0
I64 = torch.int64
WORLD = 2


def column(value: float, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``value`` in a one-element slice of a 3x4 holder of SENTINELs (stride ``(4,)``), and
    the holder, whose other elements show any write outside the slice."""
    holder = torch.full((3, 4), SENTINEL, dtype=dtype)
    holder[0, 1] = value
    odd = holder[0:1, 1]
    assert odd.is_contiguous() and odd.stride() == (4,)
    return odd, holder


def empty_from_numpy() -> torch.Tensor:
    """An empty float32 tensor made from numpy: stride ``(0,)``."""
    empty = torch.from_numpy(np.zeros(0)).float()
    assert empty.is_contiguous() and empty.stride() == (0,)
    return empty


def value(rank: int) -> float:
    """Rank ``rank``'s one input element."""
    return 10.0 * rank + 1


def rs_input(rank: int) -> list[float]:
    """Rank ``rank``'s reduce-scatter input, one element per rank."""
    return [rank + 1.0, 10.0 * (rank + 1)]


def _wait(work: Any) -> None:
    if work is not None:
        work.wait()


def _all_gather(r: int, async_op: bool) -> torch.Tensor:
    x, _ = column(value(r))
    out = torch.full((WORLD,), SENTINEL)
    _wait(hp.all_gather_into_tensor(out, x, async_op=async_op))
    return out


def _all_gather_empty(r: int, async_op: bool) -> torch.Tensor:
    out = empty_from_numpy()
    _wait(hp.all_gather_into_tensor(out, empty_from_numpy(), async_op=async_op))
    return out


def _all_reduce(r: int, async_op: bool) -> torch.Tensor:
    t, holder = column(value(r))
    _wait(hp.all_reduce(t, async_op=async_op))
    return holder


def _reduce_scatter(r: int, async_op: bool) -> torch.Tensor:
    out, holder = column(SENTINEL)
    _wait(hp.reduce_scatter_tensor(out, torch.tensor(rs_input(r)), async_op=async_op))
    return holder


def _alltoall(r: int, async_op: bool) -> torch.Tensor:
    """Each rank sends its one row to the other rank, into a one-element slice."""
    x, _ = column(value(r))
    out, holder = column(SENTINEL)
    splits = [0, 1] if r == 0 else [1, 0]
    _wait(hp.alltoall_single(x, out, splits, splits, sync_op=not async_op))
    return holder


def _alltoall_empty(r: int, async_op: bool) -> torch.Tensor:
    out = empty_from_numpy()
    _wait(hp.alltoall_single(empty_from_numpy(), out, [0, 0], [0, 0], sync_op=not async_op))
    return out


def _global_scatter(r: int, async_op: bool) -> torch.Tensor:
    """Each rank sends its one row to the other rank's expert (one expert per rank)."""
    x, _ = column(value(r))
    counts = torch.tensor([0, 1] if r == 0 else [1, 0], dtype=I64)
    return hp.global_scatter(x, counts, counts.clone()).detach()


def _global_scatter_empty(r: int, async_op: bool) -> torch.Tensor:
    zero = torch.zeros(WORLD, dtype=I64)
    return hp.global_scatter(empty_from_numpy(), zero, zero.clone()).detach()


def _global_gather_empty(r: int, async_op: bool) -> torch.Tensor:
    zero = torch.zeros(WORLD, dtype=I64)
    return hp.global_gather(empty_from_numpy(), zero, zero.clone()).detach()


ODD_OPS = {
    "all_gather": _all_gather,
    "all_gather_empty": _all_gather_empty,
    "all_reduce": _all_reduce,
    "reduce_scatter": _reduce_scatter,
    "alltoall": _alltoall,
    "alltoall_empty": _alltoall_empty,
    "global_scatter": _global_scatter,
    "global_scatter_empty": _global_scatter_empty,
    "global_gather_empty": _global_gather_empty,
}
#: Ops without an asynchronous form.
SYNC_ONLY = {"global_scatter", "global_scatter_empty", "global_gather_empty"}


def in_holder(element: float) -> np.ndarray:
    """A 3x4 holder of SENTINELs with ``element`` at [0, 1]: an output slice written alone."""
    want = np.full((3, 4), SENTINEL, dtype=np.float32)
    want[0, 1] = element
    return want


def expected(name: str, rank: int) -> np.ndarray:
    values = np.array([value(r) for r in range(WORLD)], dtype=np.float32)
    other = values[1 - rank]
    return {
        "all_gather": values,
        "all_reduce": in_holder(values.sum()),
        "reduce_scatter": in_holder(np.array([rs_input(r) for r in range(WORLD)]).sum(0)[rank]),
        "alltoall": in_holder(other),
        "global_scatter": np.array([other], dtype=np.float32),
    }.get(name, np.zeros(0, dtype=np.float32))


def odd_stride_ops(async_op: bool) -> dict[str, Any]:
    """Every op of :data:`ODD_OPS` on this rank: its output, or what it raised (as text)."""
    results: dict[str, Any] = {}
    for name, call in ODD_OPS.items():
        if async_op and name in SYNC_ONLY:
            continue
        try:
            results[name] = call(hp.get_rank(), async_op)
        except Exception as exc:  # noqa: BLE001 - the test reports it
            results[name] = f"{type(exc).__name__}: {exc}"
    return results


def check_ops(results: list[dict[str, Any]], async_op: bool) -> None:
    names = [n for n in ODD_OPS if not (async_op and n in SYNC_ONLY)]
    for rank, got in enumerate(results):
        assert list(got) == names, got
        for name in names:
            assert isinstance(got[name], torch.Tensor), f"rank {rank}, {name}: {got[name]}"
            want = expected(name, rank)
            np.testing.assert_array_equal(got[name].numpy(), want, err_msg=f"{rank=} {name}")


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_odd_stride_inputs_and_outputs(backend: str, async_op: bool) -> None:
    """Sync calls ride in their argument exchange, async ones keep their task: both read
    and write such tensors."""
    results = hp.run(
        odd_stride_ops, world_size=WORLD, backend=backend, timeout=TIMEOUT, args=(async_op,)
    )
    check_ops(results, async_op)


def odd_output_on_rank_0(async_op: bool) -> torch.Tensor:
    """Only rank 0's output is a one-element slice: rank 0 receives its own row 0, rank 1
    rank 0's row 1 and its own two rows."""
    r = hp.get_rank()
    data = torch.arange(2.0) + 10 * r + 1
    if r == 0:
        out, holder = column(SENTINEL)
        ins, outs = [1, 1], [1, 0]
    else:
        out = holder = torch.full((3,), SENTINEL)
        ins, outs = [0, 2], [1, 2]
    _wait(hp.alltoall_single(data, out, ins, outs, sync_op=not async_op))
    return holder


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_odd_output_on_one_rank(backend: str, async_op: bool) -> None:
    """Before, only rank 0 failed, after the agreement, and rank 1 returned a result."""
    r0, r1 = hp.run(
        odd_output_on_rank_0, world_size=WORLD, backend=backend, timeout=TIMEOUT, args=(async_op,)
    )
    rows = [np.arange(2.0, dtype=np.float32) + 10 * r + 1 for r in range(WORLD)]
    np.testing.assert_array_equal(r0.numpy(), in_holder(rows[0][0]))
    np.testing.assert_array_equal(r1.numpy(), np.concatenate([rows[0][1:], rows[1]]))


def odd_results() -> list[torch.Tensor]:
    """One-element slices (a dtype plain pickle carries, and one that travels as bytes) and
    an empty tensor from numpy, as the rank's result."""
    r = hp.get_rank()
    wide = column(value(r))[0]
    as_bytes = column(r + 7, dtype=torch.int32)[1].to(torch.uint16)[0:1, 1]
    assert as_bytes.stride() == (4,) and wire._needs_bytes(torch.uint16)
    return [wide, as_bytes, torch.from_numpy(np.zeros(0, dtype=np.uint16))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rank_may_return_a_one_element_slice(backend: str) -> None:
    results = hp.run(odd_results, world_size=WORLD, backend=backend, timeout=TIMEOUT)
    for r, (wide, as_bytes, empty) in enumerate(results):
        assert wide.tolist() == [value(r)]
        assert as_bytes.dtype == torch.uint16 and as_bytes.to(torch.int32).tolist() == [r + 7]
        assert empty.dtype == torch.uint16 and empty.shape == (0,)


def test_wire_carries_a_one_element_slice() -> None:
    odd = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32).to(torch.uint16)[0:1, 1]
    assert odd.stride() == (2,)
    back = wire.loads(wire.dumps(odd))
    assert back.dtype == torch.uint16 and back.to(torch.int32).tolist() == [2]


# ------------------------------------------------------------------ ReduceOp objects

REDUCE_OPS = {
    "SUM": (dist.ReduceOp.SUM, np.sum),
    "MAX": (dist.ReduceOp.MAX, np.max),
    "MIN": (dist.ReduceOp.MIN, np.min),
}


def rank_values(rank: int) -> list[float]:
    return [rank + 1.0, 5.0 - 3 * rank, -2.0 * rank]


def reduce_with_objects(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """all_reduce and reduce_scatter_tensor with ``ReduceOp(ReduceOp.<name>)``."""
    op = dist.ReduceOp(REDUCE_OPS[name][0])
    assert not isinstance(op, dist.ReduceOp.RedOpType)
    t = torch.tensor(rank_values(hp.get_rank()))
    hp.all_reduce(t, op=op)
    out = torch.full((1,), SENTINEL)
    hp.reduce_scatter_tensor(out, torch.tensor(rank_values(hp.get_rank())[:WORLD]), op=op)
    return t, out


@pytest.mark.parametrize("name", sorted(REDUCE_OPS))
def test_a_reduce_op_object_is_its_op(name: str) -> None:
    results = hp.run(reduce_with_objects, world_size=WORLD, timeout=TIMEOUT, args=(name,))
    reduce = REDUCE_OPS[name][1]
    want = reduce(np.array([rank_values(r) for r in range(WORLD)], dtype=np.float32), axis=0)
    for r, (t, out) in enumerate(results):
        np.testing.assert_array_equal(t.numpy(), want)
        np.testing.assert_array_equal(out.numpy(), want[r : r + 1])


def refused_objects() -> list[str]:
    """What all_reduce says to ReduceOp objects of ops it does not support."""
    said = []
    for op in (
        dist.ReduceOp(dist.ReduceOp.PRODUCT),
        dist.ReduceOp(dist.ReduceOp.AVG),
        dist._make_nccl_premul_sum(2.0),
    ):
        t = torch.full((2,), SENTINEL)
        try:
            hp.all_reduce(t, op=op)
            said.append("accepted")
        except ValueError as exc:
            said.append(str(exc))
        assert (t == SENTINEL).all()
    return said


def test_an_unsupported_reduce_op_object_is_refused() -> None:
    for r, said in enumerate(hp.run(refused_objects, world_size=WORLD, timeout=TIMEOUT)):
        assert said == [
            f"all_reduce on rank {r}: reduce op {op!r} is not supported; use SUM, MAX or MIN"
            for op in (dist.ReduceOp.PRODUCT, dist.ReduceOp.AVG, dist.ReduceOp.PREMUL_SUM)
        ]


def test_flat_elements_is_the_same_memory_with_stride_1() -> None:
    from hccl_py.core.gm import flat_elements

    odd, holder = column(3.0)
    flat = flat_elements(odd)
    assert flat.stride() == (1,) and flat.data_ptr() == odd.data_ptr()
    flat.view(torch.uint8)[:] = 0
    assert holder[0, 1] == 0 and (holder != 0).sum() == 11
    assert flat_elements(empty_from_numpy()).view(torch.uint8).shape == (0,)
    with pytest.raises(ValueError, match="needs a contiguous tensor"):
        flat_elements(holder.t())


#: Each rank's four values per dtype torch cannot add to int64 or compare (rank r gets row r):
#: unsigned values near the top of their range (sums wrap; uint64's top bit must order as
#: unsigned), float8 values whose sums are exact in float8.
NO_TORCH_ORDER = {
    torch.uint16: (np.uint16, [[65535, 1, 40000, 7], [2, 65535, 30000, 7], [9, 0, 1, 8]]),
    torch.uint32: (np.uint32, [[2**32 - 1, 1, 3 << 30, 5], [4, 2**31, 1 << 30, 5], [1, 0, 9, 6]]),
    torch.uint64: (
        np.uint64,
        [[2**64 - 1, 1, 2**63, 3], [5, 2**63 + 1, 2**62, 3], [2, 0, 2**63 - 1, 4]],
    ),
    torch.float8_e4m3fn: (
        np.float64,
        [[0.5, -2.0, 4.0, 1.0], [1.0, 3.0, -4.0, 1.0], [2.0, 1.0, 0.5, 1.0]],
    ),
    torch.float8_e5m2: (
        np.float64,
        [[0.5, -2.0, 8.0, 1.0], [1.0, 4.0, -4.0, 1.0], [2.0, 1.0, 4.0, 1.0]],
    ),
}
#: numpy's reductions, each in the element type (np.sum would widen uint16 and uint32: no wrap).
NUMPY_REDUCE = {
    "sum": lambda a, axis: np.sum(a, axis=axis, dtype=a.dtype),
    "max": np.max,
    "min": np.min,
}


def _reduced_in_a_torch_less_dtype(dtype: torch.dtype, op: str, scatter: bool) -> list[float]:
    np_type, rows = NO_TORCH_ORDER[dtype]
    mine = torch.from_numpy(np.array(rows[hp.get_rank()], dtype=np_type)).to(dtype)
    if scatter:  # 2 ranks: each gets 2 of the 4 reduced elements
        out = torch.zeros(2, dtype=dtype)
        hp.reduce_scatter_tensor(out, mine, op=op)
    else:
        out = mine
        hp.all_reduce(out, op=op)
    return out.to(torch.float64).tolist() if dtype.is_floating_point else out.tolist()


@pytest.mark.parametrize("scatter", [False, True], ids=["all_reduce", "reduce_scatter_tensor"])
@pytest.mark.parametrize("op", sorted(NUMPY_REDUCE))
@pytest.mark.parametrize("dtype", list(NO_TORCH_ORDER), ids=str)
def test_dtypes_torch_cannot_order_reduce_as_numpy_does(
    dtype: torch.dtype, op: str, scatter: bool
) -> None:
    """uint16/32/64 and float8 reduce in rank order (before: torch's raw "Promotion for uint16
    ... is not supported" or "maximum_cpu not implemented for 'UInt16'", after the agreement)."""
    np_type, rows = NO_TORCH_ORDER[dtype]
    ranks = 2 if scatter else 3
    with np.errstate(over="ignore"):
        want = NUMPY_REDUCE[op](np.array(rows[:ranks], dtype=np_type), axis=0).tolist()
    got = hp.run(
        _reduced_in_a_torch_less_dtype, world_size=ranks, args=(dtype, op, scatter), timeout=TIMEOUT
    )
    if scatter:
        assert got == [want[:2], want[2:]]
    else:
        assert got == [want] * ranks


def _overlapping(n: int) -> torch.Tensor:
    """``n`` elements in a (2, n / 2) view of strides (1, 1): rows overlap but for one element."""
    return torch.zeros(n).as_strided((2, n // 2), (1, 1))


#: A call per (op, argument) that gets a tensor the op cannot use: before, torch's raw
#: RuntimeError or NotImplementedError deep inside the op, after the ranks had agreed.
UNUSABLE = {
    "all_gather_into_tensor output expanded": (
        lambda: hp.all_gather_into_tensor(torch.zeros(1).expand(4), torch.ones(2)),
        ValueError,
        "all_gather_into_tensor on rank {r}: output_tensor (shape (4,), strides (0,)) has "
        "elements that share memory",
    ),
    "all_reduce tensor expanded": (
        lambda: hp.all_reduce(torch.zeros(1).expand(3)),
        ValueError,
        "all_reduce on rank {r}: tensor (shape (3,), strides (0,)) has elements that share",
    ),
    "reduce_scatter_tensor output overlapping": (
        lambda: hp.reduce_scatter_tensor(_overlapping(8).t(), torch.ones(8, 2)),
        ValueError,
        "reduce_scatter_tensor on rank {r}: output (shape (4, 2), strides (1, 1)) has elements",
    ),
    "alltoall_single output expanded": (
        lambda: hp.alltoall_single(torch.ones(2), torch.zeros(1).expand(2)),
        ValueError,
        "alltoall_single on rank {r}: out_tensor (shape (2,), strides (0,)) has elements that",
    ),
    "all_gather_into_tensor input sparse": (
        lambda: hp.all_gather_into_tensor(torch.zeros(4), torch.ones(2).to_sparse()),
        TypeError,
        "all_gather_into_tensor on rank {r}: input_tensor is a torch.sparse_coo tensor; pass a "
        "dense one",
    ),
    # before 2026-11-30: torch's "Cannot copy out of meta tensor; no data!"
    "all_reduce tensor meta": (
        lambda: hp.all_reduce(torch.ones(4, device="meta")),
        ValueError,
        "all_reduce on rank {r}: tensor (shape (4,)) is on the meta device, which holds no data",
    ),
    "alltoall_single input meta": (
        lambda: hp.alltoall_single(torch.ones(2, device="meta"), torch.zeros(2)),
        ValueError,
        "alltoall_single on rank {r}: in_tensor (shape (2,)) is on the meta device, which holds",
    ),
    "global_scatter local_count meta": (
        lambda: hp.global_scatter(
            torch.ones(2, 3), torch.ones(2, dtype=torch.int64, device="meta"), torch.ones(2)
        ),
        ValueError,
        "global_scatter on rank {r}: local_count (shape (2,)) is on the meta device, which",
    ),
}


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_tensors_an_op_cannot_use_are_refused_before_it_runs(case: str) -> None:
    call, error, message = UNUSABLE[case]
    with pytest.raises(hp.WorldError) as info:
        hp.run(call, world_size=WORLD, timeout=TIMEOUT)
    for rank, exc in info.value.failures.items():
        assert type(exc) is error and str(exc).startswith(message.format(r=rank)), exc


def test_non_contiguous_outputs_whose_elements_are_apart_are_written() -> None:
    """Strides that skip memory or run backwards over a transpose are no overlap."""

    def gather() -> list[list[float]]:
        holder = torch.full((4, 2), SENTINEL)
        hp.all_gather_into_tensor(holder.t()[0], torch.full((2,), float(hp.get_rank())))
        return holder.tolist()

    want = [[0.0, SENTINEL], [0.0, SENTINEL], [1.0, SENTINEL], [1.0, SENTINEL]]
    assert hp.run(gather, world_size=WORLD, timeout=TIMEOUT) == [want] * WORLD


def paddle_min_as_an_int(op: object) -> str:
    try:
        hp.all_reduce(torch.tensor([float(hp.get_rank())]), op)  # paddle.distributed.ReduceOp.MIN
    except ValueError as exc:
        return str(exc)
    return "ran"


@pytest.mark.parametrize("op", [2, np.int64(2)], ids=["int", "numpy"])
def test_a_plain_int_reduce_op_is_refused_since_frameworks_number_them_differently(
    op: object,
) -> None:
    """Paddle's ReduceOp.MIN is the int 2, HCCL's 2 is MAX: it ran as MAX without a word (a
    framework engineer's trial). A numpy integer is a plain int too."""
    said = hp.run(paddle_min_as_an_int, world_size=2, args=(op,))
    told = f"reduce op {op!r} is a plain int, which frameworks number differently"
    assert all(told in s for s in said), said
    assert all("'max'" in s for s in said), said


class _PaddleLikeOp(enum.IntEnum):
    """A framework's IntEnum of reduce ops, numbered as Paddle numbers them."""

    SUM = 0
    MAX = 1
    MIN = 2


def reduce_by_a_named_int_enum() -> list[float]:
    t = torch.tensor([float(hp.get_rank())])
    hp.all_reduce(t, _PaddleLikeOp.MIN)
    return t.tolist()


def test_a_framework_int_enum_member_goes_by_its_name() -> None:
    """A review: refusing plain ints must not refuse an IntEnum member, which has a name."""
    assert hp.run(reduce_by_a_named_int_enum, world_size=2) == [[0.0], [0.0]]


def _write_leaves(n: int) -> list[float]:
    """Each way a collective writes a leaf that requires grad (or a view of one): the carried
    exchange, the kernel, a local reduction (FP64: gathered, then reduced), a staged copy; the
    sums of what landed, and whether each still requires grad."""
    carried = torch.ones(4, dtype=torch.float64, requires_grad=True)
    hp.all_reduce(carried)
    kernel = torch.ones(4, requires_grad=True)
    hp.all_reduce(kernel, async_op=True).wait()
    got = [float(carried.detach().sum()), float(kernel.detach().sum())]
    t = torch.ones(4, dtype=torch.float64, requires_grad=True)  # local reduction, async
    hp.all_reduce(t, async_op=True).wait()
    big = torch.ones(20000, dtype=torch.float64, requires_grad=True)  # local reduction, sync
    hp.all_reduce(big)
    out = torch.zeros(5000, dtype=torch.float64, requires_grad=True)
    hp.reduce_scatter_tensor(out, torch.ones(n * 5000, dtype=torch.float64))
    view = torch.ones(8, 2000, requires_grad=True).t()  # staged: a view of a leaf
    hp.all_reduce(view)
    gathered = torch.zeros(3, 2 * n, requires_grad=True).t()
    hp.all_gather_into_tensor(gathered, torch.ones(2, 3), async_op=True).wait()
    got += [float(x.detach().sum()) for x in (t, big, out, view, gathered)]
    return got + [all(x.requires_grad for x in (t, big, out, view, gathered))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_leaf_that_requires_grad_receives_the_result_on_every_path(backend: str) -> None:
    """Until stop 64 an FP64 reduction reduced after gathering, and a non-contiguous output's
    staged copy, raised torch's "a leaf Variable that requires grad is being used in an in-place
    operation" where the other paths wrote such a tensor, as torch.distributed does."""
    n = 2
    want = [4.0 * n, 4.0 * n, 4.0 * n, 20000.0 * n, 5000.0 * n, 16000.0 * n, 6.0 * n, True]
    got = hp.run(_write_leaves, world_size=n, backend=backend, args=(n,), timeout=TIMEOUT)
    assert got == [want] * n


def test_a_wait_that_raised_is_no_collective_left_unwaited() -> None:
    """A wait whose copy into the caller's tensor raised was a wait: until stop 64 the op stayed
    listed as never waited, and the rank that caught the error then failed with
    HcclUnfinishedError."""
    from hccl_py.framework._kernel import Work

    def main():
        out = torch.zeros(2, 4).t()  # staged: the copy happens in wait()
        work = hp.all_gather_into_tensor(out, torch.ones(2, 2), async_op=True)
        boom = RuntimeError("the copy failed")

        def failing() -> None:
            raise boom

        work._finish = failing
        raised = []
        for _ in range(2):
            try:
                work.wait()
            except RuntimeError as exc:
                raised.append(exc is boom)
        return raised, work.is_completed(), isinstance(work, Work)

    assert hp.run(main, world_size=2, timeout=TIMEOUT) == [([True, True], False, True)] * 2


def test_messages_list_up_to_16_values_in_full() -> None:
    """Split sizes and counts in a message: all of up to 16 values, else the first and last 8."""
    from hccl_py.framework._common import listed

    assert listed(list(range(16))) == str(list(range(16)))
    assert listed(list(range(17))) == (
        "[0, 1, 2, 3, 4, 5, 6, 7, ..., 9, 10, 11, 12, 13, 14, 15, 16] (17 entries)"
    )
