"""Bad input to the framework collectives: clear errors naming the ranks and values.

Each case is a bad call made on every rank of a 2-rank world (or a bad call on
one rank beside a good one on the other). The rank catches what it raises and
returns it with its output tensors, so the tests check that every rank failed
with the expected error and that no output was written: a disagreement is
detected before any data moves, never as a hang or a partial result.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from test_framework_examples import BACKENDS, TIMEOUT

import hccl_py as hp

SENTINEL = -5.0
I64 = torch.int64


def filled(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.full(shape, SENTINEL, dtype=dtype)


def counts(*values: int, dtype: torch.dtype = I64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


Case = Callable[[int], tuple[Callable[[], Any], list[torch.Tensor]]]


def ag_output_not_tensor(r: int):
    return lambda: hp.all_gather_into_tensor([0.0] * 4, torch.ones(2)), []


def ag_group_wrong_type(r: int):
    out = filled(4, 8)
    return lambda: hp.all_gather_into_tensor(out, torch.ones(2, 8), group=5), [out]


def ag_async_not_bool(r: int):
    out = filled(4, 8)
    return lambda: hp.all_gather_into_tensor(out, torch.ones(2, 8), async_op=1), [out]


def ag_shapes_disagree(r: int):
    out = filled(4, 8) if r == 0 else filled(8, 4)
    x = torch.ones(2, 8) if r == 0 else torch.ones(4, 4)
    return lambda: hp.all_gather_into_tensor(out, x), [out]


def ag_output_too_small(r: int):
    out = filled(4 if r == 0 else 3, 8)
    return lambda: hp.all_gather_into_tensor(out, torch.ones(2, 8)), [out]


def ag_dtypes_disagree(r: int):
    dtype = torch.float32 if r == 0 else torch.float64
    out = filled(4, 8, dtype=dtype)
    return lambda: hp.all_gather_into_tensor(out, torch.ones(2, 8, dtype=dtype)), [out]


def ag_in_out_dtypes_differ(r: int):
    out = filled(4, 8, dtype=torch.float64)
    return lambda: hp.all_gather_into_tensor(out, torch.ones(2, 8)), [out]


def ag_complex_dtype(r: int):
    out = torch.zeros(4, dtype=torch.complex64)
    return lambda: hp.all_gather_into_tensor(out, torch.ones(2, dtype=torch.complex64)), []


def a2a_splits_disagree(r: int):
    """Rank 0 sends 2 rows to rank 1, which expects 1 from it."""
    out = filled(3, 2)
    outs = [1, 2] if r == 1 else [1, 1]
    out = filled(sum(outs), 2)
    data = torch.ones(3, 2) * r
    return lambda: hp.alltoall_single(data, out, [1, 2], outs, sync_op=False), [out]


def a2a_split_length(r: int):
    out = filled(3, 2)
    return lambda: hp.alltoall_single(torch.ones(3, 2), out, [1, 1, 1], [1, 2]), [out]


#: One split size per row, a mistake whose list alone is longer than an exchange may carry.
ROWS_PER_ROW_SPLIT = 300_000


def a2a_split_per_row(r: int):
    rows = ROWS_PER_ROW_SPLIT
    out = filled(rows, 1)
    splits = [1] * rows if r == 0 else None
    return lambda: hp.alltoall_single(torch.ones(rows, 1), out, splits, None), [out]


def a2a_split_sum(r: int):
    out = filled(2, 2)
    return lambda: hp.alltoall_single(torch.ones(3, 2), out, [1, 1], [1, 1]), [out]


def a2a_split_negative(r: int):
    out = filled(2, 2)  # -1 + 3 is the 2 rows: only the sign check refuses it
    return lambda: hp.alltoall_single(torch.ones(2, 2), out, [-1, 3], [1, 1]), [out]


def a2a_scalar_output(r: int):
    out = torch.full((), SENTINEL)
    return lambda: hp.alltoall_single(torch.ones(2), out), [out]


def a2a_row_shapes_differ(r: int):
    out = filled(2, 3)
    return lambda: hp.alltoall_single(torch.ones(2, 2), out), [out]


def a2a_indivisible(r: int):
    out = filled(3, 2)
    return lambda: hp.alltoall_single(torch.ones(3, 2), out), [out]


def a2a_split_floats(r: int):
    out = filled(2, 2)
    return lambda: hp.alltoall_single(torch.ones(2, 2), out, [1.0, 1.0]), [out]


def a2a_sync_op_not_bool(r: int):
    out = filled(2, 2)
    return lambda: hp.alltoall_single(torch.ones(2, 2), out, sync_op="no"), [out]


def a2a_row_shapes_disagree(r: int):
    out = filled(2, 2 + r)
    return lambda: hp.alltoall_single(torch.ones(2, 2 + r), out), [out]


# global_gather's example counts (2 cards, 2 experts): x has 5 rows on both ranks.
EXAMPLE = {0: (2, 1, 1, 1), 1: (1, 1, 2, 1)}


def gs_counts_int32(r: int):
    c = counts(*EXAMPLE[r], dtype=torch.int32)
    return lambda: hp.global_scatter(torch.ones(5, 2), c, c), []


def gs_counts_list(r: int):
    return lambda: hp.global_scatter(torch.ones(5, 2), list(EXAMPLE[r]), counts(*EXAMPLE[r])), []


def gs_counts_length(r: int):
    c = counts(2, 1, 2)
    return lambda: hp.global_scatter(torch.ones(5, 2), c, c), []


def gs_counts_disagree(r: int):
    """Rank 1 claims 2 rows from rank 0 for its expert 0; rank 0 sends 1."""
    local = counts(*EXAMPLE[r])
    glob = counts(2, 1, 2, 1) if r == 1 else counts(*EXAMPLE[r])
    return lambda: hp.global_scatter(torch.ones(5, 2), local, glob), []


def gg_counts_disagree(r: int):
    local = counts(*EXAMPLE[r])
    glob = counts(2, 1, 2, 1) if r == 1 else counts(*EXAMPLE[r])
    x = torch.ones(int(glob.sum()), 2)
    return lambda: hp.global_gather(x, local, glob), []


def gs_rows_disagree_with_counts(r: int):
    c = counts(*EXAMPLE[r])
    return lambda: hp.global_scatter(torch.ones(4, 2), c, c), []


def gs_negative_count(r: int):
    c = counts(2, -1, 1, 1) if r == 0 else counts(*EXAMPLE[r])
    return lambda: hp.global_scatter(torch.ones(int(c.sum()), 2), c, c), []


def different_ops(r: int):
    t = filled(3)
    return (lambda: hp.all_reduce(t)) if r == 0 else (lambda: hp.barrier()), [t]


def reduce_prod(r: int):
    t = filled(3)
    return lambda: hp.all_reduce(t, op="prod"), [t]


def reduce_ops_disagree(r: int):
    t = filled(3)
    return lambda: hp.all_reduce(t, op="sum" if r == 0 else "max"), [t]


def rs_input_shape(r: int):
    out = filled(2)
    return lambda: hp.reduce_scatter_tensor(out, torch.ones(3)), [out]


def rs_output_0d(r: int):
    out = filled()
    return lambda: hp.reduce_scatter_tensor(out, torch.ones(3)), [out]


def unknown_group_name(r: int):
    out = filled(4)
    return lambda: hp.all_gather_into_tensor(out, torch.ones(2), group="tp_group"), [out]


def group_name_for_a_group(r: int):
    name = hp.new_group([0, 1]).name
    out = filled(4)
    return lambda: hp.all_gather_into_tensor(out, torch.ones(2), group=name), [out]


CASES: dict[str, tuple[Case, type[BaseException], list[str]]] = {
    "ag_output_not_tensor": (
        ag_output_not_tensor,
        TypeError,
        ["output_tensor must be a torch.Tensor, not list"],
    ),
    "ag_group_wrong_type": (ag_group_wrong_type, TypeError, ["group must be", "not int"]),
    "ag_async_not_bool": (ag_async_not_bool, TypeError, ["async_op must be True or False, not 1"]),
    "ag_shapes_disagree": (
        ag_shapes_disagree,
        hp.HcclMismatchError,
        ["input_tensor's shape must be the same", "rank 0 [2, 8], rank 1 [4, 4]"],
    ),
    "ag_output_too_small": (
        ag_output_too_small,
        ValueError,
        ["rank 1: output_tensor has shape [3, 8], expected [4, 8]"],
    ),
    "ag_dtypes_disagree": (
        ag_dtypes_disagree,
        hp.HcclMismatchError,
        ["rank 0 torch.float32, rank 1 torch.float64"],
    ),
    "ag_in_out_dtypes_differ": (
        ag_in_out_dtypes_differ,
        TypeError,
        ["output_tensor is torch.float64, input_tensor is torch.float32"],
    ),
    "ag_complex_dtype": (ag_complex_dtype, TypeError, ["torch.complex64 cannot be communicated"]),
    "a2a_splits_disagree": (
        a2a_splits_disagree,
        hp.HcclMismatchError,
        [
            "rank 0 sends 2 rows to rank 1 (its in_split_sizes[1]), "
            "but rank 1 expects 1 from rank 0 (its out_split_sizes[0])"
        ],
    ),
    "a2a_split_length": (
        a2a_split_length,
        ValueError,
        [
            "in_split_sizes has 3 entries, expected one per rank (2): [1, 1, 1]",
            "rank 0:",
            "rank 1:",
        ],
    ),
    "a2a_split_per_row": (
        a2a_split_per_row,
        ValueError,
        [
            f"rank 0: in_split_sizes has {ROWS_PER_ROW_SPLIT} entries, expected one per rank (2): "
            f"[1, 1, 1, 1, 1, 1, 1, 1, ..., 1, 1, 1, 1, 1, 1, 1, 1] ({ROWS_PER_ROW_SPLIT} entries)"
        ],
    ),
    "a2a_split_sum": (
        a2a_split_sum,
        ValueError,
        ["in_split_sizes [1, 1] sums to 2, but in_tensor has 3 rows"],
    ),
    "a2a_split_negative": (
        a2a_split_negative,
        ValueError,
        ["in_split_sizes must be non-negative: [-1, 3]"],
    ),
    "a2a_scalar_output": (  # only out_tensor without a dim: its shape[0] was read
        a2a_scalar_output,
        ValueError,
        ["in_tensor and out_tensor must have at least one dimension"],
    ),
    "a2a_row_shapes_differ": (
        a2a_row_shapes_differ,
        ValueError,
        ["in_tensor [2, 2] and out_tensor [2, 3] must have the same shape after dim 0"],
    ),
    "a2a_indivisible": (a2a_indivisible, ValueError, ["dim 0 (3) must be divisible by the 2"]),
    "a2a_split_floats": (a2a_split_floats, TypeError, ["in_split_sizes must hold ints"]),
    "a2a_sync_op_not_bool": (
        a2a_sync_op_not_bool,
        TypeError,
        ["sync_op must be True or False, not 'no'"],
    ),
    "a2a_row_shapes_disagree": (
        a2a_row_shapes_disagree,
        hp.HcclMismatchError,
        ["shape after dim 0 must be the same", "rank 0 [2], rank 1 [3]"],
    ),
    "gs_counts_int32": (
        gs_counts_int32,
        TypeError,
        ["local_count must be an int64 tensor, not torch.int32"],
    ),
    "gs_counts_list": (gs_counts_list, TypeError, ["local_count must be a torch.Tensor, not list"]),
    "gs_counts_length": (gs_counts_length, ValueError, ["a positive multiple of 2); got 3 and 3"]),
    "gs_counts_disagree": (
        gs_counts_disagree,
        hp.HcclMismatchError,
        [
            "rank 0 sends 1 row to expert 0 of rank 1 (local_count[2] = 1 on rank 0), "
            "but rank 1 expects 2 (global_count[0] = 2 on rank 1)"
        ],
    ),
    "gg_counts_disagree": (
        gg_counts_disagree,
        hp.HcclMismatchError,
        ["rank 1 returns 2 rows of its expert 0 to rank 0 (global_count[0] = 2 on rank 1)"],
    ),
    "gs_rows_disagree_with_counts": (
        gs_rows_disagree_with_counts,
        ValueError,
        ["x has 4 rows, but local_count [2, 1, 1, 1] sums to 5"],
    ),
    "gs_negative_count": (gs_negative_count, ValueError, ["rank 0: counts must be non-negative"]),
    "different_ops": (
        different_ops,
        hp.HcclMismatchError,
        ["called different collectives at the same point: rank 0 all_reduce, rank 1 barrier"],
    ),
    "reduce_prod": (reduce_prod, ValueError, ["reduce op 'prod' is not supported"]),
    "reduce_ops_disagree": (
        reduce_ops_disagree,
        hp.HcclMismatchError,
        ["rank 0 HCCL_REDUCE_SUM, rank 1 HCCL_REDUCE_MAX"],
    ),
    "rs_input_shape": (rs_input_shape, ValueError, ["input has shape [3] and output [2]"]),
    "rs_output_0d": (rs_output_0d, ValueError, ["output must have at least one dimension"]),
    "unknown_group_name": (unknown_group_name, ValueError, ["unknown group name 'tp_group'"]),
    "group_name_for_a_group": (
        group_name_for_a_group,
        ValueError,
        ["is a group's name; the only name taken is 'hccl_world_group': pass the group object"],
    ),
}


def attempt(name: str) -> tuple[BaseException | None, list[torch.Tensor]]:
    """Make case ``name``'s call on this rank; return what it raised and the outputs after it."""
    call, outputs = CASES[name][0](hp.get_rank())
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc, outputs
    return None, outputs


def check_failed_everywhere(name: str, results: list) -> None:
    _, kind, fragments = CASES[name]
    for rank, (exc, outputs) in enumerate(results):
        assert isinstance(exc, kind), f"rank {rank}: {exc!r}"
        assert re.search(r"\brank \d", str(exc)), f"rank {rank}: no rank named in {exc}"
        for fragment in fragments:
            assert fragment in str(exc), f"rank {rank}: {fragment!r} not in {exc}"
        for out in outputs:
            assert (out == SENTINEL).all(), f"rank {rank}: output written: {out}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_a_clear_error(name: str) -> None:
    check_failed_everywhere(name, hp.run(attempt, world_size=2, timeout=TIMEOUT, args=(name,)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "name",
    ["a2a_splits_disagree", "gs_counts_disagree", "ag_output_too_small", "a2a_split_per_row"],
)
def test_disagreement_is_reported_on_every_backend(name: str, backend: str) -> None:
    """The same report on every backend; a split list per row (longer than a gloo exchange may
    carry) is the local problem it is there too, not an error of the exchange."""
    results = hp.run(attempt, world_size=2, backend=backend, timeout=TIMEOUT, args=(name,))
    check_failed_everywhere(name, results)


def test_errors_raise_without_strict_mode() -> None:
    results = hp.run(
        attempt, world_size=2, timeout=TIMEOUT, strict=False, args=("a2a_splits_disagree",)
    )
    check_failed_everywhere("a2a_splits_disagree", results)


def not_a_member() -> BaseException | None:
    group = hp.new_group([0])
    try:
        hp.barrier(group=group)
    except ValueError as exc:
        return exc
    return None


def test_rank_outside_the_group_is_an_error() -> None:
    ok, exc = hp.run(not_a_member, world_size=2, timeout=TIMEOUT)
    assert ok is None
    assert isinstance(exc, ValueError)
    assert "barrier: rank 1 is not a member of Group('group_0', ranks=[0])" in str(exc)


def one_rank_wrong_type() -> None:
    out = torch.zeros(4, 8)
    x = torch.ones(2, 8)
    hp.all_gather_into_tensor(out, x.tolist() if hp.get_rank() == 0 else x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_failing_rank_does_not_hang_the_others(backend: str) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(one_rank_wrong_type, world_size=2, backend=backend, timeout=TIMEOUT)
    failures = info.value.failures
    assert isinstance(failures[0], TypeError)
    assert isinstance(failures[1], hp.HcclError)


def test_outside_hp_run_is_a_runtime_error() -> None:
    with pytest.raises(RuntimeError, match="no rank is running in this thread"):
        hp.all_gather_into_tensor(torch.zeros(2), torch.ones(1))


def test_a_rank_that_skips_a_framework_collective_is_named() -> None:
    """Emulated ranks exchange their call descriptions directly: a missing rank is a deadlock."""

    def main() -> None:
        if hp.get_rank() != 1:
            hp.all_reduce(torch.ones(4))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=3, timeout=TIMEOUT)
    text = str(info.value)
    assert isinstance(info.value.failures[0], hp.HcclDeadlockError), text
    assert (
        "ranks 0, 2: wait in all_reduce (framework collective #0 of hccl_world_group) for "
        "ranks [1], which have not called it" in text
    )


@pytest.mark.parametrize(
    "raw, op",
    [
        (b'{"op":"all_reduce","problem":null}', "all_reduce"),
        (
            b'{"op":"kernel task #3 (AllGather)","problem":null,"task":{}}\x00\x01\xff',
            "kernel task #3",
        ),
        (b"\xff\xfe\x00{", "something unreadable (b'\\xff\\xfe\\x00{')"),
        (b"[1, 2]", "something unreadable (b'[1, 2]')"),
    ],
    ids=["arguments", "task-with-round-bytes", "not-utf8", "not-a-record"],
)
def test_a_peers_exchanged_record_is_read_up_to_a_nul(raw: bytes, op: str) -> None:
    """What a peer sent in an argument exchange: its op (a kernel task's descriptor is read
    up to the NUL that round 0's bytes follow), or what it sent, for the mismatch report."""
    from hccl_py.framework._common import _record

    record = _record(raw)
    assert record["op"].startswith(op) and record["problem"] is None, record


def _groups_in_another_order() -> list[int]:
    first, second = ([0, 1], [2, 3]) if hp.get_rank() == 0 else ([2, 3], [0, 1])
    hp.new_group(first)
    hp.new_group(second)
    return [hp.get_rank()]


def _groups_of_members_only() -> list[int]:
    """Each rank creates only its own pair's group (torch.distributed needs every rank in it)."""
    mine = [0, 1] if hp.get_rank() < 2 else [2, 3]
    if hp.get_rank() in (0, 3):  # the other two are done before these two create theirs
        hp.barrier()
    hp.new_group(mine)
    if hp.get_rank() in (1, 2):
        hp.barrier()
    return [hp.get_rank()]


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_groups_created_in_another_order_are_named(backend: str) -> None:
    """Before, the emulator ran on (each rank's groups were its own), while gloo ranks waited in
    new_group until the run's timeout."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_groups_in_another_order, world_size=4, backend=backend, timeout=TIMEOUT)
    error = info.value.failures[1]
    assert isinstance(error, hp.HcclMismatchError)
    assert str(error).startswith(
        "[rank 1] new_group([2, 3]) is group #1 of rank 1, but rank 0's group #1 is "
        "new_group([0, 1]): every rank of the world calls new_group for every group"
    )


def test_a_group_only_its_members_create_is_named_on_the_emulator() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(_groups_of_members_only, world_size=4, timeout=TIMEOUT)
    causes = {type(e).__name__ for e in info.value.root_causes.values()}
    assert causes == {"HcclMismatchError"}, info.value
    assert "every rank of the world calls new_group" in str(info.value)


def _pair_created_by_its_members() -> list[int]:
    """Ranks 2 and 3 return first (the default schedule runs rank 0 first); only 0 and 1 call
    new_group."""
    if hp.get_rank() < 2:
        hp.new_group([0, 1])
    return [hp.get_rank()]


def test_a_rank_that_returns_without_a_group_the_others_created_is_named() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(_pair_created_by_its_members, world_size=4, timeout=TIMEOUT)
    assert sorted(info.value.root_causes) == [2, 3]
    assert str(info.value.failures[2]).startswith(
        "[rank 2] rank 2 returned after 0 group(s), but rank 0 created new_group([0, 1]) as "
        "group #1: every rank of the world calls new_group"
    )


def test_a_rank_that_returns_without_a_group_is_named_on_gloo() -> None:
    """Before, ranks 0 and 1 waited in torch's new_group until the run's timeout."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_pair_created_by_its_members, world_size=4, backend="gloo", timeout=TIMEOUT)
    causes = info.value.root_causes  # 0, 1 or both: one that saw the other's report first stops
    assert causes and set(causes) <= {0, 1}, info.value
    for rank, error in causes.items():
        assert isinstance(error, hp.HcclMismatchError)
        assert re.match(  # which of 2 and 3 had returned when the rank looked
            rf"\[rank {rank}\] new_group\(\[0, 1\]\) is group #1 of rank {rank}, but rank\(s\) "
            r"\[(2|3|2, 3)\] returned from their function without creating it: every rank of the "
            "world calls new_group",
            str(error),
        ), error


@pytest.mark.parametrize(
    ("ranks", "name"), [(None, "g"), (["a"], "g"), ([0, True], "g"), ([0], None), ([0], 5)]
)
def test_a_group_needs_int_ranks_and_a_name(ranks: object, name: object) -> None:
    """Before 2026-11-30 ``hp.Group(None, "g")`` raised Python's own "'NoneType' object is not
    iterable" and ``hp.Group([0], None)`` was accepted."""
    with pytest.raises(TypeError) as info:
        hp.Group(ranks, name)
    assert str(info.value) == (
        f"Group needs a sequence of int ranks and a str name, not ranks={ranks!r}, name={name!r}"
    )
    assert hp.Group(torch.arange(2), "g").ranks == (0, 1)


def _hand_made_group(where: str) -> list[float]:
    """A Group built by hand with the world's name and other ranks: it names no communicator."""
    group = hp.Group([1, 0], "hccl_world_group")
    out = torch.zeros(2)
    if where == "framework":
        hp.all_gather_into_tensor(out, torch.full((1,), float(hp.get_rank())), group=group)
    elif where == "channel":
        hp.HcclGetHcclBuffer(group)
    else:
        hp.launch(lambda: None, groups={0: group})
    return out.tolist()


@pytest.mark.parametrize("backend", ["emu", "gloo"])
@pytest.mark.parametrize("where", ["framework", "launch", "channel"])
def test_a_hand_made_group_is_refused(backend: str, where: str) -> None:
    """Before, the emulator gathered in the hand-made order ([1, 0]) while gloo used the world's
    process group ([0, 1]), or failed with another error."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_hand_made_group, args=(where,), world_size=2, backend=backend, timeout=TIMEOUT)
    assert sorted(info.value.root_causes) == [0, 1]
    for error in info.value.failures.values():
        assert isinstance(error, hp.HcclUsageError if where == "channel" else ValueError)
        assert "is not a group this rank created: pass the object hccl_py.new_group" in str(error)


def _collectives_on_other_groups(kernel: bool) -> list[float]:
    """Rank 0 reduces on a group of both ranks, rank 1 on the world: neither can go on."""
    pair = hp.new_group([1, 0])
    group = pair if hp.get_rank() == 0 else hp.world_group()
    t = torch.ones(2)
    if kernel:
        hp.all_gather_into_tensor(torch.zeros(4), t, group=group, async_op=True).wait()
    else:
        hp.all_reduce(t, group=group)
    return t.tolist()


@pytest.mark.parametrize("backend", ["emu", "gloo"])
@pytest.mark.parametrize("kernel", [False, True], ids=["sync", "async"])
def test_collectives_on_other_groups_are_a_deadlock_on_every_backend(
    backend: str, kernel: bool
) -> None:
    """Before, gloo ranks waited until the run's timeout (120 s by default) and then failed
    with gloo's own timeout error; now they read each other's waits in the store."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(
            _collectives_on_other_groups, args=(kernel,), world_size=2, backend=backend,
            timeout=TIMEOUT,
        )  # fmt: skip
    causes = info.value.root_causes
    assert causes and all(isinstance(e, hp.HcclDeadlockError) for e in causes.values())
    text = str(next(iter(causes.values())))
    assert "rank 0 waits in" in text and "rank 1 waits in" in text, text
    assert "group_1_0" in text and "hccl_world_group" in text, text


def _one_rank_late() -> list[float]:
    """Rank 0 waits in the pair's all_reduce while rank 1 computes for a while, then joins."""
    pair = hp.new_group([0, 1])
    t = torch.ones(2)
    if hp.get_rank() == 1:
        time.sleep(1.5)  # not a timing assertion: any delay must pass
    if hp.get_rank() < 2:
        hp.all_reduce(t, group=pair)
    return t.tolist()


def test_a_wait_for_a_rank_that_is_busy_elsewhere_is_no_deadlock() -> None:
    """The board holds rank 0's wait only: rank 1 waits in no collective, so it may come."""
    got = hp.run(_one_rank_late, world_size=3, backend="gloo", timeout=TIMEOUT)
    assert got == [[2.0, 2.0], [2.0, 2.0], [1.0, 1.0]]


def test_the_stuck_waits_are_the_closed_set_of_cross_domain_waits() -> None:
    from hccl_py.backends.dist.waits import stuck

    def wait(domain: str, *ranks: int, **marks: bool) -> list[dict]:
        return [{"domain": domain, "ranks": list(ranks), **marks}]

    cycle = {0: wait("a", 0, 1), 1: wait("b", 1, 2), 2: wait("c", 2, 0)}
    assert stuck(cycle) == [0, 1, 2]
    assert stuck({0: wait("a", 0, 1), 1: wait("b", 1, 2)}) == []  # rank 2 may still come
    assert stuck({0: wait("a", 0, 1), 1: wait("a", 0, 1)}) == []  # both arrived: it ends
    # rank 2 waits in the world for rank 0, which waits in a pair for rank 1, itself in the world
    world = {0: wait("pair", 0, 1), 1: wait("w", 0, 1, 2), 2: wait("w", 0, 1, 2)}
    assert stuck(world) == [0, 1, 2]
    assert stuck({**world, 3: wait("x", 3, 4)}) == [0, 1, 2]  # rank 3's wait may still end
    # a core's wait, a failed one or a second wait of a rank: that rank may go on
    assert stuck({**cycle, 1: wait("b", 1, 2, core=True)}) == []
    assert stuck({**cycle, 1: wait("b", 1, 2, failed=True)}) == []
    assert stuck({**cycle, 1: wait("b", 1, 2) + wait("a", 0, 1)}) == []


def _kernel_on_two_domains(xGM, yGM, zGM, tilingGM, rank: int) -> None:
    from cases import init_hccl

    world = init_hccl(hp.Hccl(), tilingGM, index=0, ops=("AllReduce",))
    pair = init_hccl(hp.Hccl(), tilingGM, index=1, ops=("AllReduce",))
    fp32, add = hp.HCCL_DATA_TYPE_FP32, hp.HcclReduceOp.HCCL_REDUCE_SUM
    first, second = (world, pair) if rank == 0 else (pair, world)
    a = first.AllReduce[True](xGM, yGM if rank == 0 else zGM, 4, fp32, add, 1)
    time.sleep(1.5)  # the core computes (not a timing assertion: any delay must pass)
    b = second.AllReduce[True](xGM, zGM if rank == 0 else yGM, 4, fp32, add, 1)
    first.Wait(a)
    second.Wait(b)
    world.Finalize()
    pair.Finalize()


def _tasks_of_two_domains_in_other_orders() -> list[float]:
    """Rank 0 commits the world's task, computes, then the pair's; rank 1 the other way round.
    Each domain has one task on each rank: valid, though each rank's first task check waits
    for a rank that is computing."""
    from cases import make_tiling

    pair = hp.new_group([0, 1])
    groups = {0: hp.world_group(), 1: pair}
    x, y, z = torch.full((4,), hp.get_rank() + 1.0), torch.zeros(4), torch.zeros(4)
    hp.launch(
        _kernel_on_two_domains, x, y, z, make_tiling(groups=groups), hp.get_rank(), groups=groups
    )
    return y.tolist() + z.tolist()


def test_task_checks_of_two_domains_in_other_orders_are_no_deadlock() -> None:
    """A kernel task's check waits on its domain's thread while the kernel goes on: it is not
    on the board of waits (the first version of the board called this program a deadlock)."""
    got = hp.run(
        _tasks_of_two_domains_in_other_orders, world_size=2, backend="gloo", timeout=TIMEOUT
    )
    assert got == [[3.0] * 8] * 2


def _fails_while_rank_0_creates_a_group() -> int:
    if hp.get_rank() == 1:
        time.sleep(0.5)  # rank 0 waits in new_group meanwhile (any delay must pass)
        raise ValueError("rank 1's own bug")
    hp.new_group([0, 1])
    return 0


def test_a_rank_that_failed_is_not_named_as_skipping_a_group() -> None:
    """Before, rank 0 saw rank 1 return (in its failure) before its abort and reported it as a
    rank that returned without the group: two root causes where the emulator names one."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_fails_while_rank_0_creates_a_group, world_size=2, backend="gloo", timeout=TIMEOUT)
    assert sorted(info.value.root_causes) == [1]
    assert isinstance(info.value.failures[0], hp.HcclPeerError)


def test_the_board_leaves_out_what_is_not_a_wait() -> None:
    """A record of another shape in a rank's key (anyone who reaches the store can write
    one) is left out, not a raw KeyError or TypeError."""
    from hccl_py.backends.dist.waits import READ_EVERY, WaitBoard, Waiting

    class Store(dict):
        def set(self, key: str, value: bytes) -> None:
            self[key] = value

        def check(self, keys: list[str]) -> bool:
            return all(k in self for k in keys)

    for forged in ({"ranks": [0, 1]}, {"ranks": [[0]], "domain": "x", "op": "y"}, [1]):
        store = Store()
        store["waiting/1"] = json.dumps(forged).encode()
        waiting = Waiting(WaitBoard(store, 0, 2), "all_reduce", "d", (0, 1))
        for _ in range(2 * READ_EVERY):
            waiting.look()
        assert WaitBoard(store, 0, 2).read().keys() == {0}
        waiting.close()
        # overwritten, never deleted: a peer's get never blocks
        assert json.loads(store["waiting/0"]) == {"run": 0, "waits": []}


def _one_rank_stuck_in_its_own_code() -> None:
    if hp.get_rank() == 1:
        time.sleep(60)  # pure Python: never calls the collective (stopped by the run)
    if hp.get_rank() == 2:  # from a kernel's core: a wait of the rank all the same
        hp.launch(lambda: hp.all_reduce(torch.ones(2)))
    else:
        hp.all_reduce(torch.ones(2))


def test_a_timeout_names_the_ranks_that_wait_in_no_collective() -> None:
    """Before, the report said only that rank 0 waited for "the other ranks", and gloo's own
    process-group timeout (as long as hccl_py's) sometimes fired first with its raw error. Rank
    2 waits from a kernel's core, which a first version left off the board (named absent)."""
    with pytest.raises(hp.WorldError) as info:
        # 5 s: rank 2's kernel must have posted its wait by rank 0's timeout, on a loaded machine
        hp.run(_one_rank_stuck_in_its_own_code, world_size=3, backend="gloo", timeout=5)
    timeouts = {r: e for r, e in info.value.failures.items() if isinstance(e, hp.HcclTimeoutError)}
    assert timeouts and set(timeouts) <= {0, 2}, info.value  # the other may stop as a peer first
    for rank, error in timeouts.items():
        assert str(error).endswith(
            f"rank {rank} waits in all_reduce for the other ranks of domain hccl_world_group to "
            "call it; ranks [1] do not wait in any collective of it"
        ), error


def _goes_on_after_a_caught_timeout(flag: str) -> tuple:
    pair = hp.new_group([0, 1])
    t = torch.ones(2)
    if hp.get_rank() == 0:
        with contextlib.suppress(hp.HcclTimeoutError):  # rank 1 never calls it
            hp.all_reduce(t, group=pair)
        Path(flag).touch()
        time.sleep(1.5)  # computes (the board reads twice meanwhile), then joins
    else:
        deadline = time.monotonic() + 60.0  # a bound: the flag comes after rank 0's timeout
        while not Path(flag).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    hp.all_reduce(t)
    return tuple(t.tolist())


def test_a_caught_failed_wait_blocks_nobody_on_the_board(tmp_path: Path) -> None:
    """A wait that failed stays on the board marked as failed: rank 1, waiting in the world's
    all_reduce for rank 0 (which timed out in the pair's and computes), was told of a
    deadlock with rank 0's old wait. Rank 1 starts its wait once rank 0's failed: its 1.5 s
    wait is the only time that counts, against a 7 s timeout (rank 0's first wait takes all
    of it: 4 s left a loaded machine only 2.5 s to spare)."""
    flag = str(tmp_path / "timed_out")
    got = hp.run(
        _goes_on_after_a_caught_timeout, args=(flag,), world_size=2, backend="gloo", timeout=7
    )
    assert got == [(2.0, 2.0), (2.0, 2.0)], got


def _collectives_of_two_cores() -> list[float]:
    pair, rank = hp.new_group([0, 1]), hp.get_rank()
    a, b = torch.ones(2), torch.ones(2)

    def kernel() -> None:
        core = hp.GetBlockIdx()
        if core == 1 - rank:
            time.sleep(2.0)  # each rank's other core comes late (any delay must pass)
        hp.all_reduce(a) if core == 0 else hp.all_reduce(b, group=pair)

    hp.launch(kernel, block_dim=2)
    return a.tolist() + b.tolist()


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_framework_collectives_of_two_cores_are_no_deadlock(backend: str) -> None:
    """Two cores of a rank wait at once: the board holds both on the rank's list, marked as
    cores' (one record per rank held only one of them, and the board called this valid
    program a deadlock), and a rank with such waits is never counted stuck."""
    got = hp.run(_collectives_of_two_cores, world_size=2, backend=backend, timeout=TIMEOUT)
    assert got == [[2.0] * 4] * 2


def test_every_rank_creating_every_group_in_order_passes() -> None:
    def both() -> list[int]:
        hp.new_group([0, 1])
        hp.new_group([2, 3])
        return [hp.get_rank()]

    assert hp.run(both, world_size=4, timeout=TIMEOUT) == [[0], [1], [2], [3]]
