"""Fine-grained AlltoAllV (tiling stepSize > 0) and Iterate on Atlas A3 (issue 13, item 4).

The slice orders and return values are the spec's examples, verbatim; the data
is checked against a numpy all-to-all.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from expect import expects_warning
from hccl_py.backends.emu import wait_until

import hccl_py as hp
from hccl_py import Hccl, HcclCMDType, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling

FP32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32


class A2avTiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("a2av", Mc2CcTiling)]


def tiling(step: int) -> A2avTiling:
    t = A2avTiling()
    cfg = Mc2CcTilingConfig(
        "hccl_world_group",
        HcclCMDType.HCCL_CMD_ALLTOALLV,
        "AlltoAll=level0:fullmesh;level1:pairwise",
    )
    assert cfg.SetStepSize(step) == 0
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.a2av) == 0
    return t


def client(tilingGM) -> Hccl:
    """Inside a kernel: an Hccl object initialised with the A2av tiling's AlltoAllV cc tiling."""
    h = Hccl()
    h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(A2avTiling, tilingGM))
    h.SetCcTilingV2(hp.offsetof(A2avTiling, "a2av"))
    return h


def iterate_run(step: int, repeat: int, per_call: int, sync: bool = True, n: int = 8):
    """Every rank's list of (Iterate result, slices) until it returns 0, and its recv buffer."""
    c = 2

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        dim = h.GetRankDim()
        counts = [c] * dim
        displs = [c * repeat * j for j in range(dim)]
        handle = h.AlltoAllV[True](x, counts, displs, FP32, y, counts, displs, FP32, repeat)
        calls = []
        slices = torch.zeros(per_call, dtype=torch.int32)
        while True:
            got = h.Iterate[sync](handle, slices, per_call)
            calls.append((got, slices.tolist() if got > 0 else []))
            if got == 0:
                break
        hp.SyncAll()
        h.Finalize()
        return calls

    def main():
        me = hp.get_rank()
        x = (torch.arange(n * c * repeat, dtype=torch.float32) + 1000 * me).contiguous()
        y = torch.zeros(n * c * repeat)
        calls = []
        hp.launch(lambda *a: calls.append(kernel(*a)), x, y, tiling(step))
        return calls[0], y.tolist()

    return hp.run(main, world_size=n, platform="A3")


def test_iterate_step_1_sync_gives_the_spec_order() -> None:
    results = iterate_run(step=1, repeat=1, per_call=1)
    calls, _ = results[0]
    assert calls == [
        (1, [0]),
        (1, [7]),
        (1, [6]),
        (1, [5]),
        (1, [4]),
        (1, [3]),
        (1, [2]),
        (1, [1]),
        (0, []),
    ]


def test_iterate_step_4_repeat_8_gives_the_spec_order_and_the_data() -> None:
    n, c, repeat = 8, 2, 8
    results = iterate_run(step=4, repeat=repeat, per_call=4)
    calls, _ = results[0]
    assert calls == [(4, [0, 7, 6, 5]), (4, [4, 3, 2, 1])] * repeat + [(0, [])]
    x = np.stack([np.arange(n * c * repeat) + 1000 * r for r in range(n)]).reshape(n, n, repeat * c)
    for j, (_, y) in enumerate(results):
        np.testing.assert_array_equal(np.array(y).reshape(n, repeat * c), x[:, j])


def test_iterate_without_sync_goes_forward() -> None:
    results = iterate_run(step=2, repeat=1, per_call=4, sync=False, n=4)
    for rank, (calls, _) in enumerate(results):
        want = [(rank + k) % 4 for k in range(4)]
        assert calls == [(4, want), (0, [])]


@pytest.mark.parametrize("platform", ["A2", "A3"])
def test_iterate_on_a_handle_that_is_not_fine_grained(platform: str) -> None:
    def kernel(tilingGM):
        h = Hccl()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(A2avTiling, tilingGM))
        result = h.Iterate[True](0, [0], 1)
        return result, h.last_error

    def main():
        out = []
        hp.launch(lambda t: out.append(kernel(t)), tiling(0))
        return out[0]

    result, reason = hp.run(main, world_size=2, platform=platform, strict=False)[0]
    assert result == -1
    if platform == "A2":
        assert reason.endswith("Iterate is not supported on Atlas A2")
    else:
        assert "handle 0 is not a fine-grained AlltoAllV (tiling stepSize > 0)" in reason


@pytest.mark.parametrize(
    ("handle", "said"),
    [
        (5, "Iterate: handle 5 is not a fine-grained AlltoAllV"),
        ("0", "Iterate: the handle must be an int, the id that Prepare returned, not a str ('0')"),
        (
            torch.tensor(0),
            "Iterate: the handle must be an int, the id that Prepare returned, not a torch.Tensor "
            "of shape () and dtype torch.int64",
        ),
    ],
)
def test_iterate_names_a_handle_that_is_no_int_as_such(handle, said: str) -> None:
    """Until stop 64 a handle ``"0"`` or ``tensor(0)`` of a fine-grained AlltoAllV read "handle 0
    is not a fine-grained AlltoAllV": false of handle 0, which is one."""

    for real, result, reason, _ in _refused_iterate(handle, [0], 1):
        assert (real, result) == (0, -1)
        assert said in reason, reason


def _refused_iterate(handle: Any, slices: Any, length: Any) -> list:
    """Per rank of a fine-grained AlltoAllV on 2 ranks: its handle, what one
    ``Iterate[True](handle, slices, length)`` returned (``handle`` None: the real one) and its
    ``last_error``, and the receive buffer once every step ran through valid Iterates."""

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        real = h.AlltoAllV[True](x, [4, 4], [0, 4], FP32, y, [4, 4], [0, 4], FP32)
        asked = real if handle is None else handle
        refused = (real, h.Iterate[True](asked, slices, length), h.last_error)
        while h.Iterate[True](real, [0], 1) > 0:
            pass
        hp.SyncAll()
        h.Finalize()
        return refused

    def main():
        out = []
        y = torch.zeros(8)
        x = torch.arange(8.0) + 100 * hp.get_rank()
        hp.launch(lambda *a: out.append(kernel(*a)), x, y, tiling(1))
        return (*out[0], y.tolist())

    return hp.run(main, world_size=2, platform="A3", strict=False)


def test_iterate_on_a_one_rank_domain_is_minus_one() -> None:
    """The client's steps per repeat are rankDim, and Iterate wants more than 1
    (platform_v220/hccl_aicpu.h: ``stepSize > 0U && stepsPerRepeat > 1U``): on one rank every
    call is -1, so the documented ``while (Iterate(...))`` loop never ends on hardware."""

    def kernel(x, y, tilingGM, out):
        h = client(tilingGM)
        handle = h.AlltoAllV[True](x, [2], [0], FP32, y, [2], [0], FP32)
        out += [h.Iterate[True](handle, [0], 1) for _ in range(2)]
        h.Wait(handle)
        h.Finalize()

    def main():
        out: list = []
        hp.launch(kernel, torch.ones(2), torch.zeros(2), tiling(1), out)
        return out

    assert hp.run(main, world_size=1, platform="A3", strict=False) == [[-1, -1]]


@pytest.mark.parametrize(
    ("slices", "length", "got"),
    [
        (3, 1, "an int (3)"),
        ("ab", 1, "a str ('ab')"),
        ((0,), 1, "a tuple ((0,))"),
        (None, 1, ""),
        ([0], 2, "a list ([0])"),
        ([0], 0, "an int (0)"),
        ([0], "1", "a str ('1')"),
        (torch.tensor(0, dtype=torch.uint8), 1, "a torch.Tensor of shape () and dtype torch.uint8"),
        (np.zeros((), dtype=np.uint8), 1, "a numpy.ndarray of shape () and dtype uint8"),
        (torch.zeros(2, 3), 1, "a torch.Tensor of shape (2, 3) and dtype torch.float32"),
        (np.zeros((2, 3)), 1, "a numpy.ndarray of shape (2, 3) and dtype float64"),
        (torch.zeros(2, dtype=torch.bool), 1, "a torch.Tensor of shape (2,) and dtype torch.bool"),
        (
            torch.zeros(2, requires_grad=True),
            1,
            "a torch.Tensor of shape (2,) and dtype torch.float32",
        ),
    ],
)
def test_iterate_refuses_what_it_cannot_fill_before_it_waits(slices, length, got: str) -> None:
    """Before 2026-11-30 an int, str or tuple for seqSlices raised Python's own TypeError from
    ``len()`` or the item assignment, after the synchronous Iterate had already waited; a 0-d
    tensor or numpy array did until stop 64, a 2-d one or a tensor requiring grad until stop 65
    (a bool tensor took the peers as True/False)."""
    if slices is None:  # a read-only numpy array (setflags returns None: build it here)
        slices = np.zeros(4, dtype=np.uint8)
        slices.setflags(write=False)
        got = "a numpy.ndarray of shape (4,) and dtype uint8"
    for rank, (_, result, reason, y) in enumerate(_refused_iterate(None, slices, length)):
        assert result == -1
        what = (
            "seqSliceLen must be an int > 0" if length in (0, "1") else "seqSlices must be a list"
        )
        assert what in reason and f"(got {got})" in reason, reason
        assert y == [4.0 * rank + i + src for src in (0, 100) for i in range(4)]


@expects_warning("extra-commit")
def test_extra_commit_of_a_fine_grained_handle_counts_commits() -> None:
    # hccl_aicpu_impl.h, Commit: the limit is repeat * rankDim steps, stepSize per Commit
    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        dim = h.GetRankDim()
        handle = h.AlltoAllV(
            x, [1] * dim, list(range(dim)), FP32, y, [1] * dim, list(range(dim)), FP32
        )
        for _ in range(4):  # 2 Commits of 2 steps cover the 4 steps; the 3rd and 4th are extra
            h.Commit(handle)
        errors.append(h.last_error)
        assert [h.Wait(handle), h.Wait(handle)] == [0, 0]
        h.Finalize()

    errors: list = []

    def main():
        hp.launch(kernel, torch.zeros(4), torch.zeros(4), tiling(2))

    hp.run(main, world_size=4, platform="A3", strict=False)
    assert sorted(errors) == [
        f"[rank {rank}, domain hccl_world_group, handle 0, op AlltoAllV, round 1] extra Commit: "
        "all 1 rounds (4 steps, 2 per Commit) are already committed; the official client "
        "ignores it (and logs an error) (expected <= 2 commits, got 4) [extra-commit]"
        for rank in range(4)
    ]


def _per_step_kernel(x, y, tilingGM, n: int, c: int, tiles: int, seen: list) -> None:
    """A Commit, a Wait and a Query per step; each step's received block read at its Wait."""
    h = client(tilingGM)
    me = h.GetRankId()
    counts, displs = [c] * n, [c * tiles * j for j in range(n)]
    handle = h.AlltoAllV(x, counts, displs, FP32, y, counts, displs, FP32, tiles)
    ys = hp.gm_tensor(y, torch.float32, n * c * tiles)
    for step in range(tiles * n):
        h.Commit(handle)
        assert h.Wait(handle) == 0
        assert h.Query(handle) == step + 1
        at = (me - step) % n * c * tiles + step // n * c  # the block this step received
        seen.append(ys[at : at + c].tolist())
    h.Finalize()


def _per_step_main(n: int, c: int, tiles: int) -> tuple[list, list[float]]:
    me = hp.get_rank()
    x = torch.arange(n * c * tiles, dtype=torch.float32) + 1000 * me
    y = torch.full((n * c * tiles,), -1.0)
    seen: list = []
    hp.launch(lambda *a: _per_step_kernel(*a, n, c, tiles, seen), x, y, tiling(1))
    return seen, y.tolist()


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_each_step_runs_once_committed_a_wait_between_commits_returns(backend: str) -> None:
    """The official server runs each fine-grained step once it is committed: a Commit and a
    Wait per step (Query counting finished steps) moves each step's pair of blocks, step k
    of a round sending rank i's block for peer i + k. Until 2026-11-28 a round ran only
    once all its steps were committed, and this kernel was a false deadlock report."""
    n, c, tiles = (4, 2, 2) if backend == "emu" else (2, 2, 2)
    got = hp.run(_per_step_main, args=(n, c, tiles), world_size=n, platform="A3", backend=backend)
    for me, (seen, y) in enumerate(got):
        want = np.full(n * c * tiles, -1.0)
        for step in range(tiles * n):
            src, r = (me - step) % n, step // n
            block = 1000 * src + me * c * tiles + r * c + np.arange(c)
            at = src * c * tiles + r * c
            want[at : at + c] = block
            assert seen[step] == block.tolist()  # in place when its own Wait returned
        np.testing.assert_array_equal(np.array(y), want)


def test_a_step_is_not_run_before_every_rank_committed_it() -> None:
    """A rank that commits fewer steps than its peers leaves the step it did not commit
    unrun: a Wait for it is a deadlock report naming the step (the server's round)."""
    n, c = 2, 2

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        counts, displs = [c] * n, [c * j for j in range(n)]
        handle = h.AlltoAllV(x, counts, displs, FP32, y, counts, displs, FP32, 1)
        h.Commit(handle)
        h.Wait(handle)
        if h.GetRankId() == 0:
            h.Commit(handle)
            h.Wait(handle)
        else:  # never commits step 1: blocks where no hccl_py call will release it
            wait_until(lambda: False)

    def main() -> None:
        hp.launch(kernel, torch.zeros(n * c), torch.zeros(n * c), tiling(1))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=n, platform="A3", timeout=30)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError)
    assert "rank 0 waits for round 1 of handle 0 AlltoAllV" in str(err)
    assert "repeat=1 in 2 fine-grained steps, the rounds that reports count" in str(err)
    assert "ranks [1] have not committed round 1" in str(err)


def test_commits_of_every_step_before_the_waits_run_as_the_iterate_example() -> None:
    """The AscendC Iterate example's compute-first form: Iterate<false> and a Commit per step,
    then a Wait per step; each step's input slice is written just before its Commit."""
    n, c, tiles = 4, 2, 2

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        counts, displs = [c] * n, [c * tiles * j for j in range(n)]
        handle = h.AlltoAllV(x, counts, displs, FP32, y, counts, displs, FP32, tiles)
        xs = hp.gm_tensor(x, torch.float32, n * c * tiles)
        peer = torch.zeros(1, dtype=torch.int32)
        for i in range(tiles):
            for _ in range(n):
                assert h.Iterate[False](handle, peer, 1) == 1
                at = int(peer[0]) * c * tiles + i * c
                xs[at : at + c] = torch.arange(c) + 100 * me + 10 * int(peer[0]) + i
                h.Commit(handle)
        for _ in range(tiles * n):
            assert h.Wait(handle) == 0
        hp.SyncAll()
        h.Finalize()

    def main() -> list[float]:
        x, y = torch.zeros(n * c * tiles), torch.zeros(n * c * tiles)
        hp.launch(kernel, x, y, tiling(1))
        return y.tolist()

    got = np.array(hp.run(main, world_size=n, platform="A3"))
    src, i, k = np.meshgrid(np.arange(n), np.arange(tiles), np.arange(c), indexing="ij")
    for me in range(n):
        want = (k + 100 * src + 10 * me + i).reshape(-1)
        np.testing.assert_array_equal(got[me], want)


def test_a_wait_past_the_last_step_is_an_error_as_it_hangs_on_the_device() -> None:
    """stepSize 2 on 3 ranks: 3 steps, so the second Wait asks for a 4th step (the official
    client's waitCnt += stepSize) that no Commit can start: it hangs there; an error here."""
    n, c = 3, 2

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        counts, displs = [c] * n, [c * j for j in range(n)]
        handle = h.AlltoAllV[True](x, counts, displs, FP32, y, counts, displs, FP32, 1)
        assert h.Wait(handle) == 0
        h.Wait(handle)

    def main() -> None:
        hp.launch(kernel, torch.zeros(n * c), torch.zeros(n * c), tiling(2))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=n, platform="A3", timeout=30, strict=False)
    causes = info.value.root_causes or info.value.failures
    assert {type(e).__name__ for e in causes.values()} == {"HcclUsageError"}
    err = causes[0]
    assert (err.handle, err.round, err.actual) == (0, 1, 4)
    assert "Wait of steps [2, 4) of handle 0, which has 3 steps (1 x 3 peers)" in str(err)


def test_iterate_true_waits_past_the_last_step_within_a_call_and_says_so() -> None:
    """The official Iterate<true> loops seqSliceLen times and Waits at every stepSize-th slice,
    past the last step too: stepSize 2, 3 ranks and 2 slices a call make the second call's
    Wait ask for a 4th step. The advice said "or let Iterate[True] wait" to the very call."""
    n, c = 3, 2

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        counts, displs = [c] * n, [c * j for j in range(n)]
        handle = h.AlltoAllV[True](x, counts, displs, FP32, y, counts, displs, FP32, 1)
        slices = [0, 0]
        while h.Iterate[True](handle, slices, 2) > 0:
            pass

    def main() -> None:
        hp.launch(kernel, torch.zeros(n * c), torch.zeros(n * c), tiling(2))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=n, platform="A3", timeout=30)
    text = str((info.value.root_causes or info.value.failures)[0])
    assert "Wait of steps [2, 4) of handle 0, which has 3 steps" in text
    assert "Iterate[True] Waits at every stepSize-th slice of a call" in text
    assert "let Iterate[True] wait" not in text


@pytest.mark.parametrize("step", [0, 1])
def test_an_overlap_report_names_the_kernel_s_rounds_fine_grained_or_not(step: int) -> None:
    """Receive ranges of two rounds that overlap: the report names rounds 0 and 1 and the
    peers, whether the task runs step by step or not (its server rounds are steps)."""
    n, c, rounds = 2, 2, 2

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        counts, sdispls = [c] * n, [c * rounds * j for j in range(n)]
        rdispls = [c * j for j in range(n)]  # too close: round 1 of peer 0 meets peer 1
        h.AlltoAllV(x, counts, sdispls, FP32, y, counts, rdispls, FP32, rounds)

    def main() -> None:
        hp.launch(kernel, torch.zeros(n * c * rounds), torch.zeros(n * c * rounds), tiling(step))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=n, platform="A3", strict=False)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclOverlapError)
    assert "round 0 block 1 and round 1 block 0 write the same bytes of y" in str(err)
    assert err.round == 1


class GatherTiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("gather", Mc2CcTiling)]


@expects_warning("wait-not-committed")
def test_a_step_size_in_another_op_s_tiling_changes_nothing() -> None:
    """Only AlltoAllV runs step by step (its Commits and Waits count steps): an AllGather whose
    cc tiling has stepSize 1 commits and waits its 2 rounds as any other; a third Wait is one
    too many."""
    n = 4

    def kernel(x, y, tilingGM):
        h = Hccl()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(GatherTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(GatherTiling, "gather"))
        handle = h.AllGather[True](x, y, 2, FP32, 4, 2)
        got = [h.Wait(handle), h.Wait(handle), h.Wait(handle), h.last_error]
        h.Finalize()
        return got

    def main():
        t = GatherTiling()
        cfg = Mc2CcTilingConfig("hccl_world_group", HcclCMDType.HCCL_CMD_ALLGATHER, "")
        assert cfg.SetStepSize(1) == 0
        assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.gather) == 0
        x = torch.arange(4, dtype=torch.float32) + 10 * hp.get_rank()
        y = torch.zeros(4 * n)
        got = []
        hp.launch(lambda *a: got.append(kernel(*a)), x, y, t)
        return got[0], y.tolist()

    out = hp.run(main, world_size=n, platform="A3", strict=False)
    for rank, (got, y) in enumerate(out):
        assert got == [0, 0, -1, f"[rank {rank}, domain hccl_world_group, handle 0, op AllGather] "
                       "Wait returns -1 at once: Wait 3 of a handle of 2 round(s), all of which "
                       "this core already waited; one Wait per round (expected <= 2 Waits, got "
                       "3) [wait-not-committed]"]  # fmt: skip
        assert y == [10.0 * r + k for r in range(n) for k in range(4)]


def _a2av_args(h: Hccl, c: int) -> tuple:
    dim = h.GetRankDim()
    counts, displs = [c] * dim, [c * j for j in range(dim)]
    return counts, displs, FP32, counts, displs, FP32


@expects_warning("wait-not-committed")
def test_a_fine_grained_wait_of_a_step_not_committed_returns_at_once() -> None:
    """One Commit of stepSize 1: the first Wait waits for step 0; the second, of step 1, which
    this core did not commit, returns -1 at once (hccl_aicpu_impl.h, Wait) and names the
    steps."""

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        counts, displs, _, _, _, _ = _a2av_args(h, 1)
        handle = h.AlltoAllV(x, counts, displs, FP32, y, counts, displs, FP32, 1)
        h.Commit(handle)
        got = [h.Wait(handle), h.Wait(handle), h.last_error]
        h.Commit(handle)
        got.append(h.Wait(handle))
        h.Finalize()
        return got

    def main():
        got = []
        hp.launch(lambda *a: got.append(kernel(*a)), torch.zeros(2), torch.zeros(2), tiling(1))
        return got[0]

    for rank, got in enumerate(hp.run(main, world_size=2, platform="A3", strict=False)):
        assert got == [0, -1, f"[rank {rank}, domain hccl_world_group, handle 0, op AlltoAllV] "
                       "Wait returns -1 at once: this core waited 1 and committed 1 steps of "
                       "handle 0 [wait-not-committed]", 0]  # fmt: skip


def test_a_fine_grained_wait_past_the_last_step_names_the_round_of_its_last_step() -> None:
    """stepSize 4 on 2 ranks, repeat 1: the first Wait asks for steps [0, 4) of 2; its last
    step, 3, would be in round 1 (the report's round, past the task's last)."""

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        counts, displs, _, _, _, _ = _a2av_args(h, 1)
        h.Wait(h.AlltoAllV[True](x, counts, displs, FP32, y, counts, displs, FP32, 1))

    def main() -> None:
        hp.launch(kernel, torch.zeros(2), torch.zeros(2), tiling(4))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="A3", timeout=30, strict=False)
    err = (info.value.root_causes or info.value.failures)[0]
    assert "Wait of steps [0, 4) of handle 0, which has 2 steps (1 x 2 peers)" in str(err)
    assert (err.handle, err.round, err.actual) == (0, 1, 4)


class TwoOpTiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("a2av", Mc2CcTiling), ("gather", Mc2CcTiling)]


@expects_warning("wait-order")
def test_a_wait_after_one_step_of_a_later_fine_grained_handle_is_out_of_order() -> None:
    """Wait(handle 1), a fine-grained AlltoAllV, for its first step of 4, then Wait(handle 0):
    the Waits do not follow Prepare order, though not one round of handle 1 is complete."""

    def kernel(x, y, z, tilingGM):
        h = Hccl()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(TwoOpTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(TwoOpTiling, "a2av"))
        h.SetCcTilingV2(hp.offsetof(TwoOpTiling, "gather"))
        h0 = h.AllGather[True](x, z, 1, FP32, 0, 1)
        counts, displs, _, _, _, _ = _a2av_args(h, 1)
        h1 = h.AlltoAllV[True](x, counts, displs, FP32, y, counts, displs, FP32, 1)
        got = [h.Wait(h1), h.Wait(h0), h.Wait(h1), h.Wait(h1), h.Wait(h1)]
        h.Finalize()
        return got

    def main():
        t = TwoOpTiling()
        cfg = Mc2CcTilingConfig("hccl_world_group", HcclCMDType.HCCL_CMD_ALLTOALLV, "")
        assert cfg.SetStepSize(1) == 0
        assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.a2av) == 0
        assert cfg.SetOpType(HcclCMDType.HCCL_CMD_ALLGATHER) == 0 and cfg.SetStepSize(0) == 0
        assert cfg.GetTiling(t.gather) == 0, cfg.last_error
        got = []
        hp.launch(lambda *a: got.append(kernel(*a)), torch.zeros(4), torch.zeros(4),
                  torch.zeros(4), t)  # fmt: skip
        return got[0]

    out = hp.run(main, world_size=4, platform="A3", strict=False)
    assert list(out) == [[0] * 5] * 4
    assert {(w.kind, w.handle, w.op) for ws in out.warnings.values() for w in ws} == {
        ("wait-order", 0, "AllGather")
    }


def test_iterate_true_waits_after_every_step_size_th_slice() -> None:
    """stepSize 2 on 3 ranks, one slice a call: Iterate[True] Waits after the 2nd slice only
    (hccl_aicpu.h, Iterate: a Wait at every stepSize-th slice), so no Wait asks past the
    task's 3 steps."""
    results = iterate_run(step=2, repeat=1, per_call=1, n=3)
    for rank, (calls, _) in enumerate(results):
        assert calls == [(1, [rank]), (1, [(rank - 1) % 3]), (1, [(rank - 2) % 3]), (0, [])]


@expects_warning("wait-not-committed")
def test_a_step_size_on_a_platform_without_iterate_changes_nothing() -> None:
    """Ascend 950 has no fine-grained AlltoAllV: with stepSize 1 in the tiling, AlltoAllV[True]
    commits its one round, one Wait waits for all of it and a second Wait is one too many."""

    def kernel(x, y, tilingGM):
        h = Hccl(hp.HCCL_SERVER_TYPE_AICPU)
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(A2avTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(A2avTiling, "a2av"))
        counts, displs, _, _, _, _ = _a2av_args(h, 1)
        handle = h.AlltoAllV[True](x, counts, displs, FP32, y, counts, displs, FP32, 1)
        got = [h.Wait(handle), h.Wait(handle)]
        h.Finalize()
        return got

    def main():
        t = A2avTiling()
        cfg = Mc2CcTilingConfig("hccl_world_group", HcclCMDType.HCCL_CMD_ALLTOALLV, "")
        assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.a2av) == 0
        t.a2av.stepSize = 1  # the 950's tiling API has no SetStepSize: as an A3 host writes it
        got = []
        y = torch.zeros(2)
        hp.launch(lambda *a: got.append(kernel(*a)), torch.arange(2.0) + 10 * hp.get_rank(), y, t)
        return got[0], y.tolist()

    out = hp.run(main, world_size=2, platform="950", strict=False)
    for rank, (got, y) in enumerate(out):
        assert got == [0, -1] and y == [rank, 10.0 + rank]
