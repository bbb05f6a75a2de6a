"""The client's hot path keeps its checks: op lookups, task copies, descriptors, agreement.

The gloo backend's task descriptors are decoded with one type check of all
fields at once; every malformed field must still be refused, naming the field,
and a decoded descriptor must be the task it describes. ``spec_of`` looks an
op up in one dict lookup and must answer as ``HcclCMDType(int(op))`` does. The
framework collectives' finished tasks are forgotten, as a kernel launch's are.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import hccl_py as hp
from hccl_py.backends.dist import descriptors, first_round
from hccl_py.backends.dist.descriptors import (
    decode_all,
    decode_descriptor,
    encode_descriptor,
    final_key,
    final_value,
    read_final,
    stub,
)
from hccl_py.core.constants import HcclCMDType, HcclDataType, HcclReduceOp
from hccl_py.core.gm import NULL, Allocation, GmAddr
from hccl_py.core.group import Group
from hccl_py.core.task import Task
from hccl_py.kernel.context import current_rank_context
from hccl_py.launcher.sealed import ForgedValueError
from hccl_py.ops import OPS, op_name, spec_of
from hccl_py.server.agreement import mismatch
from hccl_py.server.protocol import record_length


def _task(rank: int = 1, **changes: object) -> Task:
    buf = GmAddr(Allocation(torch.zeros(64, dtype=torch.uint8), rank))
    fields: dict[str, object] = dict(
        op=HcclCMDType.HCCL_CMD_ALLREDUCE,
        domain=Group((0, 1), "world"),
        rank=rank,
        rank_dim=2,
        handle=0,
        seq=3,
        send=buf,
        recv=buf,
        dtype=HcclDataType.HCCL_DATA_TYPE_FP32,
        count=4,
        reduce_op=HcclReduceOp.HCCL_REDUCE_SUM,
        caller=None,
    )
    return Task(**(fields | changes))


def _raw(**changes: object) -> bytes:
    """The descriptor of ``_task()`` with some JSON values replaced (or removed: ...)."""
    record = json.loads(encode_descriptor(_task()))
    record["task"].update(changes)
    record["task"] = {k: v for k, v in record["task"].items() if v is not ...}
    return json.dumps(record).encode()


def test_a_decoded_descriptor_is_the_task_without_memory() -> None:
    task = _task(send_counts=None, caller="all_reduce")
    task.layout_cache["send"] = "cached"
    back = decode_descriptor(encode_descriptor(task), _task(rank=0), 1)
    assert back.signature() == task.signature()
    assert (back.rank, back.seq, back.caller, back.launch) == (1, 3, "all_reduce", 0)
    assert back.op is HcclCMDType.HCCL_CMD_ALLREDUCE
    assert back.dtype is HcclDataType.HCCL_DATA_TYPE_FP32
    assert back.reduce_op is HcclReduceOp.HCCL_REDUCE_SUM
    assert (back.send, back.recv, back.deps, back.layout_cache) == (NULL, NULL, (), {})


_A2AV = HcclCMDType.HCCL_CMD_ALLTOALLV


@pytest.mark.parametrize(
    "changes",
    [{}, {"seq": 7, "launch": 3}, {"seq": 5, "launch": 5, "handle": 5, "count": 5},
     {"caller": "a %d %(seq)d \"seq\":3,"}, {"count": 1}, {"count": True}, {"skip_local": 1},
     {"op": _A2AV, "send_counts": (1, 2), "recv_counts": (3, 4), "sdispls": (0, 1),
      "rdispls": (0, 3), "reduce_op": None}],
    ids=["plain", "later", "same-numbers", "odd-caller", "count-1", "count-True", "int-flag",
         "pairwise"],
)  # fmt: skip
def test_a_descriptor_made_from_its_template_is_the_one_made_field_by_field(
    changes: dict,
) -> None:
    """encode_descriptor keeps one template per kind of task and fills in its position and
    launch: every descriptor must be, byte for byte, what encoding the fields gives, for a
    task met first and for the same task at other positions and launches (values equal but
    of other types, 1 and True, are other kinds)."""
    for moved in ({}, {"seq": 1234, "launch": 99}, {"seq": 3, "launch": 0}):
        task = _task(**(changes | moved))
        assert encode_descriptor(task) == descriptors._encode(task)
        assert encode_descriptor(task) == descriptors._encode(task)


def test_counts_come_back_as_tuples_of_int() -> None:
    counts = [1, 2]
    raw = _raw(op=int(HcclCMDType.HCCL_CMD_ALLTOALLV), send_counts=counts, sdispls=counts,
               recv_counts=counts, rdispls=counts, reduce_op=None)  # fmt: skip
    back = decode_descriptor(raw, _task(), 1)
    assert back.send_counts == (1, 2) and type(back.send_counts) is tuple
    assert back.reduce_op is None


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        (dict(count=True), "count: True is not of type int"),
        (dict(count="4"), "count: '4' is not of type int"),
        (dict(handle=None), "handle: None is not of type int"),
        (dict(skip_local=0), "skip_local: 0 is not of type bool"),
        (dict(op=99), "op: 99 is not a valid HcclCMDType"),
        (dict(dtype=13), "dtype: 13 is not a valid HcclDataType"),
        (dict(reduce_op=7), "reduce_op: 7 is not a valid HcclReduceOp"),
        (dict(send_counts=[1, "2"]), "send_counts: [1, '2'] is not a list of int"),
        (dict(caller=5), "caller: 5 is not of type str"),
        (dict(rank=0), "it described domain rank 0, not 1"),
        (dict(extra=1), "whose fields are not a task descriptor's"),
        (dict(launch=...), "whose fields are not a task descriptor's"),
    ],
)
def test_a_malformed_field_is_refused_by_name(changes: dict, why: str) -> None:
    with pytest.raises(hp.HcclMismatchError) as refused:
        decode_descriptor(_raw(**changes), _task(rank=0), 1)
    text = str(refused.value)
    assert "rank 0 compares kernel task #3 (handle 0, AllReduce(FP32, count=4" in text
    assert "rank 1 did not: " in text and text.endswith(why), text


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"op":"all_reduce","problem":null,"tensor":[4]}', "it called all_reduce"),
        (b"\x80\x04K\x01.", "it sent b'\\x80\\x04K\\x01.'"),
        (b"[1, 2]", "it sent b'[1, 2]'"),
    ],
)
def test_what_a_peer_sent_instead_of_a_descriptor_is_named(raw: bytes, why: str) -> None:
    """A framework collective's arguments (the peer called another collective) or bytes
    that are no JSON record: a mismatch naming both sides, never a raw KeyError."""
    with pytest.raises(hp.HcclMismatchError) as refused:
        decode_descriptor(raw, _task(rank=0), 1)
    assert str(refused.value).endswith(f"rank 1 did not: {why}")


def _domain_of(n: int, **per_rank: list[object]) -> list[Task]:
    """The tasks of ranks 0..n-1 of one domain; ``per_rank`` gives a field's value per rank."""
    group = Group(tuple(range(n)), "world")
    return [
        _task(rank=r, domain=group, rank_dim=n, **{k: v[r] for k, v in per_rank.items()})
        for r in range(n)
    ]


@pytest.mark.parametrize("me", [0, 2])
def test_descriptors_equal_to_this_ranks_own_are_the_tasks_a_full_decode_gives(me: int) -> None:
    """The shortcut for a peer whose descriptor is this rank's but for the rank must give
    what decoding gives; a descriptor that differs in any field is decoded and checked."""
    for tasks in (
        _domain_of(3),
        _domain_of(3, count=[4, 4, 5]),
        _domain_of(3, caller=[None, None, 'x "rank":0,']),
        _domain_of(3, op=[HcclCMDType.HCCL_CMD_ALLTOALLV] * 3, reduce_op=[None] * 3,
                   send_counts=[(1, 2, 3)] * 3, recv_counts=[(1, 2, 3)] * 3,
                   sdispls=[(0, 1, 3)] * 3, rdispls=[(0, 1, 3)] * 3),
    ):  # fmt: skip
        payloads = [encode_descriptor(t) for t in tasks]
        fast = decode_all(tasks[me], payloads[me], payloads)
        full = [
            tasks[me] if i == me else decode_descriptor(raw, tasks[me], i)
            for i, raw in enumerate(payloads)
        ]
        assert [t.rank for t in fast] == [0, 1, 2]
        assert [t.signature() for t in fast] == [t.signature() for t in full]
        assert [(t.caller, t.send_counts, t.seq) for t in fast] == [
            (t.caller, t.send_counts, t.seq) for t in full
        ]
        assert (mismatch(fast) is None) == (mismatch(full) is None)
    # equal descriptors still go through the pairwise check: each rank sends 1, 2, 3 elements
    # to ranks 0, 1, 2 but expects 1, 2, 3 from them, so rank 0 sends 2 to rank 1, which
    # expects 1
    same_counts = tasks
    error = mismatch(decode_all(same_counts[0], payloads[0], payloads))
    assert error is not None and "sendCounts_0[1] != recvCounts_1[0]" in str(error)
    with pytest.raises(
        hp.HcclMismatchError, match="rank 1 did not: count: True is not of type int"
    ):
        decode_all(_task(rank=0), encode_descriptor(_task(rank=0)), [b"", _raw(count=True)])


def test_descriptors_equal_to_this_ranks_own_are_not_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks = _domain_of(3)
    payloads = [encode_descriptor(t) for t in tasks]
    monkeypatch.setattr(descriptors, "decode_descriptor", lambda *a: pytest.fail("parsed"))
    assert [t.rank for t in decode_all(tasks[1], payloads[1], payloads)] == [0, 1, 2]


def _full_received(task: Task, mine: bytes, payloads: list[bytes]) -> tuple:
    """What :func:`first_round.received` gave before it compared bytes: every payload split at
    its record's end, every descriptor through :func:`decode_all`."""
    ends = [record_length(raw) for raw in payloads]
    tasks = decode_all(task, mine, [raw[:end] for raw, end in zip(payloads, ends, strict=True)])
    rows = [
        bytes(raw[end + 1 :]) for raw, end in zip(payloads, ends, strict=True) if end < len(raw)
    ]
    return tasks, (rows if len(rows) == len(payloads) else None), max(ends)


def _payloads(tasks: list[Task], data: bytes | None) -> list[bytes]:
    return [encode_descriptor(t) + (b"" if data is None else b"\0" + data) for t in tasks]


@pytest.mark.parametrize("data", [None, b"", b"\0\1rows"])
def test_descriptors_alike_as_bytes_give_what_decoding_gives_without_tasks(
    data: bytes | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rank's descriptor this rank's but for the rank (12 ranks: ranks 10 and 11 write a
    longer one) is compared as bytes: no task is made, the rows and the longest descriptor are
    the full decode's, and the tasks it would make agree."""
    tasks = _domain_of(12)
    payloads = _payloads(tasks, data)
    for me in (0, 11):
        mine = encode_descriptor(tasks[me])
        full_tasks, full_rows, full_longest = _full_received(tasks[me], mine, payloads)
        assert mismatch(full_tasks) is None
        with monkeypatch.context() as patch:
            patch.setattr(first_round, "decode_all", lambda *a: pytest.fail("decoded"))
            got, rows, longest = first_round.received(
                tasks[me], mine, list(map(memoryview, payloads))
            )
        assert got is None and longest == full_longest
        assert (rows if rows is None else [bytes(r) for r in rows]) == full_rows


def _differing() -> list[tuple[list[Task], list[bytes]]]:
    """Domains whose payloads are not all this rank's descriptor but for the rank."""
    tasks, alltoallv = _domain_of(3), _domain_of(
        3, op=[HcclCMDType.HCCL_CMD_ALLTOALLV] * 3, reduce_op=[None] * 3,
        send_counts=[(1, 2, 3)] * 3, recv_counts=[(1, 2, 3)] * 3,
        sdispls=[(0, 1, 3)] * 3, rdispls=[(0, 1, 3)] * 3,
    )  # fmt: skip
    same = _payloads(tasks, b"ab")
    counted = _domain_of(3, count=[4, 4, 5])
    return [
        (counted, _payloads(counted, b"ab")),
        (tasks, [*same[:2], same[2].replace(b"\0", b" ", 1)]),  # no NUL after the record
        (tasks, [*same[:2], encode_descriptor(tasks[2]) + b"x"]),
        (tasks, [*same[:2], same[1]]),  # rank 2 describes rank 1
        (tasks, [*same[:2], b'{"op":"all_reduce","problem":null}']),
        (alltoallv, _payloads(alltoallv, None)),  # alike, but AlltoAllV's counts go pairwise
    ]


@pytest.mark.parametrize("case", range(6))
def test_descriptors_not_alike_are_decoded_and_reported_as_before(case: int) -> None:
    tasks, payloads = _differing()[case]
    mine = encode_descriptor(tasks[0])
    try:
        want = _full_received(tasks[0], mine, payloads)
    except hp.HcclMismatchError as error:
        with pytest.raises(hp.HcclMismatchError) as info:
            first_round.received(tasks[0], mine, list(map(memoryview, payloads)))
        assert str(info.value) == str(error)
        return
    got = first_round.received(tasks[0], mine, list(map(memoryview, payloads)))
    assert got[0] is not None and got[2] == want[2]
    assert [(t.rank, t.signature(), t.send_counts) for t in got[0]] == [
        (t.rank, t.signature(), t.send_counts) for t in want[0]
    ]
    assert str(mismatch(got[0])) == str(mismatch(want[0]))
    assert (got[1] if got[1] is None else [bytes(r) for r in got[1]]) == want[1]


class _Store:
    """The part of a torch.distributed store that :func:`read_final` uses."""

    def __init__(self, **values: bytes) -> None:
        self.values = values

    def check(self, keys: list[str]) -> bool:
        return all(k in self.values for k in keys)

    def get(self, key: str) -> bytes:
        return self.values[key]


def test_the_finalize_count_is_read_back_and_anything_else_is_refused() -> None:
    key = final_key("world", 1)
    assert read_final(_Store(), key) is None
    assert read_final(_Store(**{key: final_value(7, 3)}), key) == (7, 3)
    for forged in (b"\x80\x04K\x01.", b"7", b"7 3 1", b"-1 3", b"7 x", b"9" * 5000 + b" 1"):
        with pytest.raises(ForgedValueError, match=f"refused the value of store key '{key}'"):
            read_final(_Store(**{key: forged}), key)


def test_stub_and_replaced_copy_fields_with_a_fresh_layout_cache() -> None:
    task = _task()
    task.layout_cache["recv"] = "cached"
    copy = stub(task)
    assert (copy.send, copy.recv, copy.deps, copy.layout_cache) == (NULL, NULL, (), {})
    assert copy.commit_notes is task.commit_notes and copy.count == task.count
    assert task.layout_cache == {"recv": "cached"}
    with pytest.raises(TypeError, match="bogus"):
        task.replaced(bogus=1)


@pytest.mark.parametrize(
    "op",
    [HcclCMDType.HCCL_CMD_ALLGATHER, 6, np.int64(6), np.int32(6), 6.0, "6", torch.tensor(6),
     np.array(6), True, 0, 1, 99, -1, 2**70, None, "x", [6], 6.5],
)  # fmt: skip
def test_spec_of_answers_as_the_enum_does(op: object) -> None:
    try:
        want = OPS.get(HcclCMDType(int(op)))
    except (ValueError, TypeError):
        want = None
    assert spec_of(op) is want
    assert op_name(op) == (want.name if want else op_name(op))


def test_tasks_that_differ_in_a_raw_field_are_reported_by_that_field() -> None:
    a, b = _task(rank=0), _task(rank=1, count=5)
    assert mismatch([a, _task(rank=1)]) is None
    error = mismatch([a, b])
    assert error is not None and "disagree on the count" in str(error)
    reduce = mismatch([a, _task(rank=1, reduce_op=HcclReduceOp.HCCL_REDUCE_MAX)])
    assert reduce is not None and "reduce op" in str(reduce)


def _positions_after_collectives(n: int) -> int:
    out = torch.empty(8)
    for _ in range(n):
        hp.all_gather_into_tensor(out, torch.ones(4))
    hp.barrier()
    board = current_rank_context().server.board
    return sum(len(domain.positions) for domain in board.domains.values())


def test_framework_collectives_forget_their_finished_tasks() -> None:
    """Each collective's tasks are forgotten once every rank returned from it, as a launch's are.

    Kept, they would hold every collective's buffers and make each task-queue
    scan of the gloo backend longer with every collective of the run.
    """
    assert max(hp.run(_positions_after_collectives, 2, args=(12,))) <= 1
