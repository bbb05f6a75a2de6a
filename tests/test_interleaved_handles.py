"""Several handles in one kernel: Commits interleaved across handles, Waits in Prepare order
(fewer Waits than rounds too), Query before a handle's first Commit and after its last Wait,
one or two cores, and a second domain whose tasks wait for the first's through
InterHcclGroupSync. Every task's bytes are checked against the numpy oracle (tests/reference.py)
on every backend.

A differential hunt (2026-12-01) ran some 10^4 such programs on the emulator (three schedules)
and on gloo processes, 2 to 4 ranks, and found them alike; tests/test_random_ops.py runs one
handle per kernel, so these seeds keep the shapes only that hunt covered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import cases
import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT

import hccl_py as hp
from hccl_py import Hccl

N_RANKS = 3
PROGRAMS = 8


@dataclass(frozen=True)
class Program:
    """What every rank of one launch runs (tasks by Prepare order, each with its context)."""

    tasks: tuple[tuple[int, cases.OpCase], ...]
    #: (task, context, source task): before that task's Prepare, the context's
    #: InterHcclGroupSync on the source task, which the other context prepared earlier
    syncs: tuple[tuple[int, int, int], ...]
    #: ("c" | "w" | "q", task); a core's Wait follows the Commits that make its round ready
    actions: tuple[tuple[str, int], ...]
    block_dim: int


def _actions(rng: np.random.Generator, tasks: list, deps: dict[int, list[int]]) -> list:
    """Commits in a random interleaving, each Wait once its round and every earlier one it
    depends on are committed, Waits in Prepare order; some rounds never waited."""
    repeat = [case.repeat for _, case in tasks]
    committed, waited = [0] * len(tasks), [0] * len(tasks)
    wanted = [int(rng.integers(0, r + 1)) if rng.random() < 0.3 else r for r in repeat]

    def done(k: int) -> bool:  # every round of k and of what k runs behind is committed
        earlier = [j for j in range(k) if tasks[j][0] == tasks[k][0]]
        return committed[k] == repeat[k] and all(done(j) for j in earlier + deps[k])

    def ready(k: int) -> bool:
        earlier = [j for j in range(k) if tasks[j][0] == tasks[k][0]]
        return committed[k] > waited[k] and all(done(j) for j in earlier + deps[k])

    actions: list = []
    order = [k for k, r in enumerate(repeat) for _ in range(r)]
    rng.shuffle(order)
    for k in order:
        if committed[k] == 0 and rng.random() < 0.4:
            actions.append(("q", k))
        actions.append(("c", k))
        committed[k] += 1
        for j in range(len(tasks)):  # the next Wait in Prepare order, if its round is ready
            if waited[j] < wanted[j]:
                if ready(j) and rng.random() < 0.6:
                    actions.append(("w", j))
                    waited[j] += 1
                break
    for j in range(len(tasks)):
        actions += [("w", j)] * (wanted[j] - waited[j])
        if wanted[j] == repeat[j] and rng.random() < 0.5:
            actions.append(("q", j))
    return actions


def draw_program(seed: int) -> Program:
    """Two to five tasks; context 1 (a permuted domain) runs AllReduce and AllGather only."""
    rng = np.random.default_rng(seed)

    def draw(lo: int, hi: int) -> int:
        return int(rng.integers(lo, hi + 1))

    tasks: list = []
    syncs: list = []
    deps: dict[int, list[int]] = {}
    for k in range(draw(2, 5)):
        index = draw(0, 1)
        ops = cases.CONTEXT_OPS[index]
        case = cases.draw_case(draw, ops[draw(0, len(ops) - 1)], N_RANKS)
        others = [j for j, (i, _) in enumerate(tasks) if i != index]
        if others and rng.random() < 0.5:
            syncs.append((k, index, others[draw(0, len(others) - 1)]))
        deps[k] = [src for _, i, src in syncs if i == index]
        tasks.append((index, replace(case, commit="each", block_dim=1)))
    return Program(tuple(tasks), tuple(syncs), tuple(_actions(rng, tasks, deps)), draw(1, 2))


def _kernel(tilingGM: Any, prog: Program, ranks: list[int], record: list, *bufs: Any) -> None:
    """Every core: Prepare in order (with the syncs), then the actions; block 0 records."""
    ops = [sorted({c.op for i, c in prog.tasks if i == index}) for index in (0, 1)]
    hccl = [cases.init_hccl(Hccl(), tilingGM, index, ops[index]) for index in (0, 1)]
    handles: list[int] = []
    for k, (index, case) in enumerate(prog.tasks):
        for _, sync_index, src in (s for s in prog.syncs if s[0] == k):
            hccl[sync_index].InterHcclGroupSync(1 - sync_index, handles[src])
        send, recv = bufs[2 * k], bufs[2 * k + 1]
        rank = ranks[index]
        send, recv = send + case.offset("send", rank), recv + case.offset("recv", rank)
        handles.append(cases.prepare(hccl[index], case, rank, send, recv))
    seen = []
    for what, k in prog.actions:
        client = hccl[prog.tasks[k][0]]
        call = {"c": client.Commit, "w": client.Wait, "q": client.Query}[what]
        seen.append((what, k, call(handles[k])))
    hp.SyncAll()
    for client in hccl:
        client.Finalize()
    if hp.GetBlockIdx() == 0:
        record.append(seen)


def run_programs(programs: list[Program]) -> list[tuple[list, list[np.ndarray]]]:
    """On every rank: each program in its own launch; (what block 0 saw, receive buffers)."""
    me = hp.get_rank()
    out = []
    for seed, prog in enumerate(programs):
        perm = [int(r) for r in np.random.default_rng(seed).permutation(N_RANKS)]
        groups = {0: hp.world_group(), 1: hp.new_group(perm)}
        ranks = [me, perm.index(me)]
        bufs = []
        for index, case in prog.tasks:
            bufs += [torch.from_numpy(b.copy()) for b in cases.rank_buffers(case, ranks[index])]
        record: list = []
        tiling = cases.make_tiling(groups=groups)
        hp.launch(_kernel, tiling, prog, ranks, record, *bufs, block_dim=prog.block_dim,
                  groups=groups)  # fmt: skip
        out.append((record[0], [b.numpy() for b in bufs[1::2]]))
    return out


def _expected_calls(prog: Program) -> list:
    """Commits return None, Waits 0, a Query before the first Commit 0 and after the last Wait
    the handle's repeat."""
    calls = []
    for what, k in prog.actions:
        value = {"c": None, "w": 0}.get(what)
        if what == "q":
            value = 0 if ("c", k) not in prog.actions[: len(calls)] else prog.tasks[k][1].repeat
        calls.append((what, k, value))
    return calls


@pytest.mark.parametrize("seed", [0, 1])
def test_interleaved_handles_match_the_oracle(backend: str, seed: int) -> None:
    programs = [draw_program(1000 * seed + i) for i in range(PROGRAMS)]
    per_rank = hp.run(
        run_programs, world_size=N_RANKS, backend=backend, platform="A3", timeout=RUN_TIMEOUT,
        args=(programs,),
    )  # fmt: skip
    for p, prog in enumerate(programs):
        perm = [int(r) for r in np.random.default_rng(p).permutation(N_RANKS)]
        for k, (index, case) in enumerate(prog.tasks):
            start = [cases.rank_buffers(case, r) for r in range(N_RANKS)]
            want = cases.expected_recvs(case, [s for s, _ in start], [r for _, r in start], "A3")
            for rank in range(N_RANKS):
                calls, recvs = per_rank[rank][p]
                assert calls == _expected_calls(prog), (p, rank)
                domain_rank = rank if index == 0 else perm.index(rank)
                cases.assert_bytes_equal(recvs[k], want[domain_rank], f"{p}/{k} {case} r{rank}")
