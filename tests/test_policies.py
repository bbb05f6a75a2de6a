"""The seeded schedules' switch decision (emu/policies.py), against its definition.

``SeededPolicy.switch`` asks blocked runners' conditions only as far as its
choice needs them; its choice and its draws must stay those of the definition:
the random kind switches with probability ``SWITCH_P`` to a uniformly chosen
other runnable runner, PCT to the runnable runner of highest priority (the
first in key order among equals) when it is above the current one's.
"""

from __future__ import annotations

import random

import pytest
from hccl_py.backends.emu.policies import (
    PCT_CHANGE_P,
    PCT_CHANGES,
    SWITCH_P,
    Runner,
    SeededPolicy,
)


def _definition(policy: SeededPolicy, current: Runner, runners: list[Runner]) -> Runner | None:
    """The decision as written before it asked conditions lazily, on the same generator."""
    runnable = [r for r in runners if r.runnable()]
    if policy.kind == "pct":
        if policy.changes < PCT_CHANGES and policy.rng.random() < PCT_CHANGE_P:
            policy.changes += 1
            current.priority = PCT_CHANGES - policy.changes
        best = max(runnable, key=lambda r: r.priority)
        return best if best.priority > current.priority else None
    others = [r for r in runnable if r is not current]
    if others and policy.rng.random() < SWITCH_P:
        return policy.rng.choice(others)
    return None


def _world(seed: int, draw: random.Random) -> tuple[SeededPolicy, list[Runner], list[bool]]:
    """12 runners of a seeded policy, a few with tied priorities; runner i waits for ``open[i]``."""
    policy = SeededPolicy(seed)
    runners = [Runner((r, c), f"rank {r} core {c}", r) for r in range(4) for c in range(3)]
    open_ = [False] * len(runners)
    for i, runner in enumerate(runners):
        policy.add(runner)
        if draw.random() < 0.3:  # ties, as PCT's changed priorities make
            runner.priority = float(PCT_CHANGES - draw.randrange(3))
        runner.pred = lambda i=i: open_[i]
    return policy, runners, open_


@pytest.mark.parametrize("seed", range(12))
def test_switch_decides_and_draws_as_its_definition(seed: int) -> None:
    """Same choice, same generator state and priorities after every decision, and fewer
    conditions asked than the definition asks (every other runner's, every time)."""
    steps = random.Random(1000 + seed)
    mine, runners, open_ = _world(seed, random.Random(seed))
    ref, ref_runners, ref_open = _world(seed, random.Random(seed))
    asked = 0

    def counted(pred):  # noqa: ANN001, ANN202
        def ask() -> bool:
            nonlocal asked
            asked += 1
            return pred()

        return ask

    for runner in runners:
        runner.pred = counted(runner.pred)
    for _ in range(300):
        open_[:] = ref_open[:] = [steps.random() < 0.2 for _ in runners]
        current = steps.randrange(len(runners))
        kept = runners[current].pred, ref_runners[current].pred
        runners[current].pred = ref_runners[current].pred = None  # the running one
        got = mine.switch(runners[current], runners, None)
        want = _definition(ref, ref_runners[current], ref_runners)
        runners[current].pred, ref_runners[current].pred = kept
        assert (got and got.key) == (want and want.key)
        assert mine.rng.getstate() == ref.rng.getstate()
        assert [r.priority for r in runners] == [r.priority for r in ref_runners]
    by_definition = 300 * (len(runners) - 1)
    assert asked < 0.9 * by_definition, (asked, by_definition)
