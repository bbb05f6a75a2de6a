"""Randomised tests of every op against the numpy reference (tests/reference.py).

Cases come from :func:`cases.draw_case`: world sizes 1..8, every allowed
dtype, counts (0 included where valid), strides (0, minimal, larger), repeats
1..4, aligned random buffer offsets, guard bytes around every written range,
all commit styles, one or two cores. Hypothesis drives it on fast backends; a
seeded numpy batch runs ~20 cases in one ``hp.run`` on every backend.
"""

from __future__ import annotations

import cases
import numpy as np
import pytest
import reference as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hccl_py as hp

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

#: Examples per op (keep all hypothesis tests together well under 30 s).
EXAMPLES = 80
BATCH = 20


@st.composite
def op_cases(draw: st.DrawFn, op: str) -> cases.OpCase:
    """Hypothesis strategy over :func:`cases.draw_case`."""
    return cases.draw_case(lambda lo, hi: draw(st.integers(lo, hi)), op)


@pytest.mark.parametrize("op", cases.OPS)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_op_matches_reference(fast_backend: str, op: str, data: st.DataObject) -> None:
    case = data.draw(op_cases(op), label="case")
    schedule = data.draw(st.sampled_from(["eager", "late"]), label="schedule")
    cases.run_and_check([case], fast_backend, schedule=schedule)


@pytest.mark.parametrize("seed", [0, 1])
def test_seeded_batch_in_one_run(backend: str, seed: int) -> None:
    """~20 random cases of all ops, each on its own sub-domain, in ONE hp.run of 8 ranks."""
    batch = cases.numpy_cases(seed, BATCH)
    assert {c.op for c in batch} == set(cases.OPS), "the batch should cover every op"
    cases.run_and_check(batch, backend, world_size=8)


def test_generator_covers_the_documented_space() -> None:
    """The shared case generator reaches every dtype, stride kind, commit mode and size."""
    drawn = cases.numpy_cases(124, 600)
    assert {c.world_size for c in drawn} == set(range(1, 9))
    assert {c.repeat for c in drawn} == {1, 2, 3, 4}
    assert {c.commit for c in drawn} == set(cases.COMMIT_MODES)
    for op in cases.OPS:
        mine = [c for c in drawn if c.op == op]
        types = ref.REDUCE_TYPES if op in cases.REDUCING else ref.MOVE_TYPES
        assert {c.dtype for c in mine} == set(types), op
    strided = [c for c in drawn if c.op in ("AllGather", "AlltoAll", "ReduceScatter")]
    assert any(c.stride == 0 for c in strided)
    assert any(c.stride > c.count * c.repeat for c in strided)
    assert all(c.count >= 1 for c in drawn if c.op != "AlltoAllV")  # count 0 is refused
    assert any(c.count == 1 for c in drawn if c.op == "AllGather")
    assert any(c.send_offsets and max(c.send_offsets) > 0 for c in drawn)
    for c in drawn:
        if c.op in ("AllGather", "AlltoAll") and c.repeat > 1 and c.world_size > 1:
            assert (c.stride or c.count) >= c.repeat * c.count, c


# ------------------------------------------------------- precision rule


@pytest.mark.parametrize(
    ("dtype", "values", "expected"),
    [
        # FP16: 2048 + 1 + 1 is 2048 step by step in half, 2050 when widened to float32.
        (ref.FP16, [[2048.0], [1.0], [1.0]], 2050.0),
        # FP32 in rank order: (1e8 + 1) - 1e8 + 1 = 1; another order would give 0 or 2.
        (ref.FP32, [[1e8], [1.0], [-1e8], [1.0]], 1.0),
        # BF16: 256 + 1 + 1 is 256 step by step in bf16, 258 (exact in bf16) via float32.
        (ref.BFP16, [[256.0], [1.0], [1.0]], 258.0),
        # BF16 rounds once, to nearest even: 256 + 1 = 257 lies between 256 and 258 -> 256.
        (ref.BFP16, [[256.0], [1.0]], 256.0),
    ],
    ids=["fp16", "fp32", "bf16", "bf16-tie"],
)
def test_float_sum_accumulates_in_float32_in_rank_order(
    backend: str, dtype: int, values: list, expected: float
) -> None:
    n = len(values)
    case = cases.OpCase(
        op="AllReduce",
        world_size=n,
        dtype=dtype,
        count=1,
        values=tuple(map(tuple, values)),
        recv_offsets=(ref.ELEM_SIZE[dtype],) * n,
        recv_slack=(4,) * n,
    )
    sends = [cases.rank_buffers(case, r)[0] for r in range(n)]
    zeros = [np.zeros(case.nbytes("recv", r), np.uint8) for r in range(n)]
    want = cases.expected_recvs(case, sends, zeros)
    size = ref.ELEM_SIZE[dtype]
    assert ref.decode(want[0][size : 2 * size], dtype).tolist() == [expected], "oracle"
    cases.run_and_check([case], backend)


def test_integer_sum_wraps(backend: str) -> None:
    """INT8 SUM adds in int64 and wraps to int8 (random full-range inputs, 8 ranks)."""
    case = cases.OpCase(
        op="AllReduce", world_size=8, dtype=ref.INT8, count=200, reduce_op=ref.SUM, seed=4
    )
    sends = [cases.rank_buffers(case, r)[0].view(np.int8) for r in range(8)]
    total = np.sum([s.astype(np.int64) for s in sends], axis=0)
    assert (np.abs(total) > 127).any(), "the inputs must overflow int8 somewhere"
    assert np.array_equal(total.astype(np.int8), ((total + 128) % 256 - 128).astype(np.int8))
    cases.run_and_check([case], backend)


@pytest.mark.parametrize("dtype", [ref.FP16, ref.FP32, ref.BFP16], ids=["fp16", "fp32", "bf16"])
@pytest.mark.parametrize("reduce_op", [ref.MAX, ref.MIN], ids=["max", "min"])
def test_max_min_propagate_nan(backend: str, dtype: int, reduce_op: int) -> None:
    """MAX and MIN are exact, and a NaN in any rank gives NaN (hccl_py/server/reduce.py's rule)."""
    nan = float("nan")
    values = ((1.0, nan, 3.0, -2.0), (nan, 5.0, -1.0, 4.0), (2.0, 0.5, nan, 8.0))
    case = cases.OpCase(
        op="AllReduce", world_size=3, dtype=dtype, count=4, reduce_op=reduce_op, values=values
    )
    per_rank = hp.run(
        cases.run_cases, world_size=3, backend=backend, timeout=cases.RUN_TIMEOUT, args=([case],)
    )
    pick = max if reduce_op == ref.MAX else min
    for rank, [result] in enumerate(per_rank):
        got = ref.decode(result.recv[: 4 * case.elem_size], dtype)
        assert np.isnan(got[:3]).all(), (rank, got)
        assert got[3] == pick(v[3] for v in values), (rank, got)
