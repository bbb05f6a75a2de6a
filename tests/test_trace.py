"""See what the kernel did: the timeline (Chrome trace), the summary and the layout picture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import hccl_py as hp
from hccl_py.trace import chrome, hooks, picture, recorder, summary

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

ROOT = Path(__file__).resolve().parent.parent
F16 = hp.HCCL_DATA_TYPE_FP16
ELEMS, TILE = 300, 128


class Tiling(hp.TilingData):
    _fields_ = [("init", hp.Mc2InitTiling), ("cc", hp.Mc2CcTiling)]


def _tiling(cmd: int = hp.HCCL_CMD_ALLGATHER) -> Tiling:
    tiling = Tiling()
    cfg = hp.Mc2CcTilingConfig("hccl_world_group", cmd, "")
    cfg.GetTiling(tiling.init)
    cfg.GetTiling(tiling.cc)
    return tiling


def multi_round(xGM: Any, yGM: Any, tilingGM: Any, tail_stride: int = ELEMS) -> None:
    """The documentation's multi-round AllGather: tiles 128, 128 (repeat 2), tail 44."""
    hccl = hp.Hccl()
    hccl.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM))
    hccl.SetCcTilingV2(hp.offsetof(Tiling, "cc"))
    handle = hccl.AllGather[True](xGM, yGM, TILE, F16, ELEMS, 2)
    tail = hccl.AllGather[True](xGM + 2 * TILE * 2, yGM + 2 * TILE * 2, 44, F16, tail_stride, 1)
    hccl.Wait(handle)
    hccl.Wait(handle)
    hccl.Wait(tail)
    hp.SyncAll()  # every core's Waits before Finalize (block_dim > 1)
    hccl.Finalize()


def main(tail_stride: int = ELEMS) -> None:
    x = torch.full((ELEMS,), float(hp.get_rank()), dtype=torch.float16)
    y = torch.zeros(ELEMS * hp.get_world_size(), dtype=torch.float16)
    hp.launch(multi_round, x, y, _tiling(), tail_stride)


def _events(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ms"
    return data["traceEvents"]


def _check_flows(events: list[dict]) -> dict[str, dict]:
    """Every flow has exactly one start and one end, the start first; returns the starts."""
    ends: dict[str, list[dict]] = {"s": [], "f": []}
    for e in events:
        if e["ph"] in ends:
            ends[e["ph"]].append(e)
    starts = {e["id"]: e for e in ends["s"]}
    finishes = {e["id"]: e for e in ends["f"]}
    assert len(starts) == len(ends["s"]) and len(finishes) == len(ends["f"]), "a repeated flow id"
    assert starts and set(starts) == set(finishes)
    late = [i for i in starts if finishes[i]["ts"] < starts[i]["ts"]]
    assert not late, late
    return starts


def _check_timeline(events: list[dict], ranks: int) -> None:
    calls = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in calls} == set(range(ranks))
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in calls)
    names = {p: [e["name"] for e in calls if e["pid"] == p and e["tid"] < recorder.SERVER_TID]
             for p in range(ranks)}  # fmt: skip
    for rank in range(ranks):
        assert names[rank] == [
            "InitV2", "SetCcTilingV2", "AllGather[True]", "Commit", "Commit",
            "AllGather[True]", "Commit", "Wait", "Wait", "Wait", "SyncAll", "Finalize",
        ], names[rank]  # fmt: skip
        rounds = [e for e in calls if e["pid"] == rank and e.get("cat") == "round"]
        assert [(e["args"]["task"], e["args"]["round"]) for e in rounds] == [(0, 0), (0, 1), (1, 0)]
        assert [e["args"]["bytes"] for e in rounds] == [256 * ranks, 256 * ranks, 88 * ranks]
        ts = [e["ts"] for e in calls if e["pid"] == rank and e["tid"] < recorder.SERVER_TID]
        assert ts == sorted(ts)
    meta = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert meta[(0, recorder.AIV_TID)] == "AIV core 0"
    assert meta[(0, recorder.SERVER_TID)] == "server (rounds)"
    starts = _check_flows(events)
    for rank in range(ranks):  # every Commit flows into a round, every round into a Wait
        kinds = defaultdict(int)
        for i in starts:
            if starts[i]["pid"] == rank:
                kinds[i.split("/", 1)[0]] += 1
        assert kinds == {"commit": 3, "wait": 3}, kinds


@pytest.mark.parametrize(("backend", "ranks"), [("emu", 4), ("gloo", 2)])
def test_trace_records_every_call_round_and_flow(tmp_path: Path, backend: str, ranks: int) -> None:
    path = tmp_path / "trace.json"
    result = hp.run(main, world_size=ranks, backend=backend, trace=path)
    _check_timeline(_events(path), ranks)
    assert set(result.traces) == set(range(ranks))


def test_call_texts_name_no_address(tmp_path: Path) -> None:
    """A tiling object's default repr holds its address, which no two runs share: the trace
    (and the debug log) show it without (the same program gives the same trace texts)."""
    path = tmp_path / "trace.json"
    hp.run(main, world_size=2, trace=path)
    inits = [e["args"]["call"] for e in _events(path) if e.get("name") == "InitV2"]
    assert len(inits) == 2
    for call in inits:
        assert call.startswith("InitV2(HcclContext(0, hccl_world_group), <"), call
        assert " at 0x" not in call, call
        assert call.endswith(".Tiling object>)"), call


def _every_core(tail_stride: int = ELEMS) -> None:
    x = torch.full((ELEMS,), float(hp.get_rank()), dtype=torch.float16)
    y = torch.zeros(ELEMS * hp.get_world_size(), dtype=torch.float16)
    hp.launch(multi_round, x, y, _tiling(), tail_stride, block_dim=4)


def test_one_flow_per_round_when_every_core_commits(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    hp.run(_every_core, world_size=4, trace=path)
    events = _events(path)
    commits = [e for e in events if e.get("name") == "Commit" and e["ph"] == "X"]
    assert len(commits) == 4 * 4 * 3  # ranks x cores x Commits per core
    starts = _check_flows(events)
    assert sum(i.startswith("commit/") for i in starts) == 4 * 3  # one per rank and round
    assert sum(i.startswith("wait/") for i in starts) == 4 * 4 * 3  # one per core's Wait


def test_core_tracks_never_meet_each_other_or_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """AIV core 900 had track 1000, the server's, and AIC core 100 AIV core 0's track 100."""
    tids = {}
    for kind, idx in (("AIC", 100), ("AIV", 0), ("AIV", 900), ("AIV", 2 * 65535 - 1)):
        core = SimpleNamespace(kind=SimpleNamespace(name=kind), block_idx=idx)
        monkeypatch.setattr(hooks, "current_core_context", lambda core=core: core)
        tids[(kind, idx)] = hooks.core_tid()
        assert chrome._track_name(tids[(kind, idx)]) == f"{kind} core {idx}"
    assert len({*tids.values(), recorder.SERVER_TID}) == 5


def test_tracing_off_records_nothing() -> None:
    result = hp.run(main, world_size=2)
    assert result.traces == {}
    assert recorder.of_rank(0) is None


def test_summary_counts_tasks_rounds_bytes(capsys: pytest.CaptureFixture) -> None:
    hp.run(main, world_size=4, summary=True)
    lines = [ln.split() for ln in capsys.readouterr().err.splitlines() if "hccl_world_group" in ln]
    assert [(int(r[0]), r[2], r[3], r[4], r[5]) for r in lines] == [
        (rank, "2", "3", "0", str(2 * ELEMS * 4)) for rank in range(4)
    ]


def _skip_local_all_to_all() -> None:
    """An A2 AlltoAll with skipLocalRankCopy: each rank's own block is left unwritten."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        hccl = hp.Hccl()
        hccl.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM))
        hccl.SetCcTilingV2(hp.offsetof(Tiling, "cc"))
        hccl.Wait(hccl.AlltoAll[True](xGM, yGM, 4, hp.HCCL_DATA_TYPE_FP32))
        hccl.Finalize()

    tiling = Tiling()
    cfg = hp.Mc2CcTilingConfig("hccl_world_group", hp.HCCL_CMD_ALLTOALL, "")
    cfg.GetTiling(tiling.init)
    cfg.SetSkipLocalRankCopy(1)
    cfg.GetTiling(tiling.cc)
    n = hp.get_world_size()
    hp.launch(kernel, torch.ones(4 * n), torch.zeros(4 * n), tiling)


def test_summary_bytes_leave_out_a_skipped_local_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The summary and the round's bytes counted the own block that skipLocalRankCopy leaves
    unwritten (the layout picture showed it unwritten): 2 peers x 16 bytes, not 3."""
    trace = tmp_path / "t.json"
    result = hp.run(_skip_local_all_to_all, world_size=3, platform="A2", summary=True, trace=trace)
    lines = [ln.split() for ln in capsys.readouterr().err.splitlines() if "hccl_world_group" in ln]
    assert [(int(r[0]), r[5]) for r in lines] == [(rank, "32") for rank in range(3)]
    rounds = [e for e in _events(trace) if e.get("cat") == "round"]
    assert [e["args"]["bytes"] for e in rounds] == [32, 32, 32]
    strips = picture.LayoutPicture(result.traces).strips
    written = [sum(s.end - s.start for s in strip.segments) for strip in strips]
    assert written == [32, 32, 32]


def test_summary_wait_time_counts_cores_that_wait_together_once() -> None:
    """Wait ms was the sum over the rank's cores: 8 cores waiting together made a rank blocked
    8 times longer than it ran. Now it is the time in which some core was blocked."""
    waits = [(0.0, 10.0), (5.0, 20.0), (5.0, 8.0), (30.0, 35.0)]  # (start, end) in us
    events = [{"name": "Wait", "ph": "X", "ts": a, "dur": b - a, "tid": 100 + i,
               "args": {"domain": "w"}} for i, (a, b) in enumerate(waits)]  # fmt: skip
    (row,) = summary.rows({0: {"layouts": [], "events": events}}, {})
    assert row["wait_us"] == 25.0


def _carried_calls() -> None:
    out = torch.zeros(2 * hp.get_world_size())
    hp.all_gather_into_tensor(out, torch.ones(2))
    hp.all_reduce(torch.ones(3))


def test_framework_calls_without_a_task_are_counted_and_named(
    capsys: pytest.CaptureFixture,
) -> None:
    """Small framework calls run in their argument exchange: before, the summary showed no row
    and the layout picture nothing, for a program that had moved data twice."""
    hp.run(_carried_calls, world_size=2, summary=True)
    lines = [ln.split() for ln in capsys.readouterr().err.splitlines() if "hccl_world_group" in ln]
    # tasks, rounds, carried, bytes (16 gathered + 12 reduced)
    assert [r[2:6] for r in lines] == [["0", "0", "2", "28"]] * 2
    text = hp.explain_layout(_carried_calls, world_size=2).text()
    assert text.endswith(
        "not drawn: framework calls that ran in their argument exchange, without a task "
        "(all_gather_into_tensor x2, all_reduce x2; counted over all ranks)"
    )


def test_summary_from_the_environment(capsys: pytest.CaptureFixture, monkeypatch: Any) -> None:
    monkeypatch.setenv("HCCL_PY_SUMMARY", "1")
    hp.run(main, world_size=2)
    assert "hccl_py summary" in capsys.readouterr().err


def test_layout_picture_of_the_multi_round_all_gather(tmp_path: Path) -> None:
    png = tmp_path / "layout.png"
    picture = hp.explain_layout(main, world_size=4, png=png)
    assert png.read_bytes()[:4] == b"\x89PNG"
    text = picture.text()
    assert "rank 2 yGM (2400 bytes) |" + "0" * 16 + "1" * 16 + "2" * 16 + "3" * 16 + "|" in text
    for line in (
        "[0, 256) <- rank 0: AllGather handle 0 round 0",
        "[256, 512) <- rank 0: AllGather handle 0 round 1",
        "[512, 600) <- rank 0: AllGather handle 1 round 0",
        "[2312, 2400) <- rank 3: AllGather handle 1 round 0",
    ):
        assert line in text
    assert "unwritten" not in text.split("\n", 1)[1] and "more than once" not in text
    assert all(not s.gaps() and not s.overlaps() for s in picture.strips)


def test_layout_picture_select_keeps_ranks_buffers_and_handles() -> None:
    picture = hp.explain_layout(main, world_size=4)
    tail = picture.select(ranks=[1, 3], buffers=["yGM"], handles=[1])
    assert [(s.rank, s.buffer) for s in tail.strips] == [(1, "yGM"), (3, "yGM")]
    strip = tail.strips[0]
    assert {s.handle for s in strip.segments} == {1}
    assert [(s.start, s.end, s.source) for s in strip.segments] == [
        (512 + 600 * r, 600 + 600 * r, r) for r in range(4)
    ]
    assert strip.gaps()[:2] == [(0, 512), (600, 1112)]  # handle 0's rounds are left out
    assert "rank 1 yGM (2400 bytes) |" in tail.text() and "rank 0 " not in tail.text()
    assert picture.select(buffers=["no such buffer"]).strips == []
    assert len(picture.select().strips) == len(picture.strips) == 4


def test_layout_picture_names_gaps_and_double_writes() -> None:
    picture = hp.explain_layout(main, TILE, world_size=4)
    strip = picture.strips[0]
    assert strip.gaps() == [(1112, 1200), (1712, 1800), (2312, 2400)]
    assert strip.overlaps() == [(768, 856), (1024, 1112), (1280, 1368)]
    assert "[768, 856) written more than once" in picture.text()
    receives = picture.select(buffers=["yGM"])
    labels = [label for label, _ in receives.legend(lambda r: f"C{r}")]
    assert labels == [*(f"from rank {r}" for r in range(4)), "unwritten", "written more than once"]
    assert dict(picture.legend(str))["written more than once"]["hatch"] == "xxx"


def reduce_scatter(xGM: Any, yGM: Any, tilingGM: Any, stride: int) -> None:
    """ReduceScatter of 4 FP32 values per tile, repeat 3, strideCount ``stride``."""
    hccl = hp.Hccl()
    hccl.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM))
    hccl.SetCcTilingV2(hp.offsetof(Tiling, "cc"))
    handle = hccl.ReduceScatter(xGM, yGM, 4, hp.HCCL_DATA_TYPE_FP32, hp.HCCL_REDUCE_SUM, stride, 3)
    for _ in range(3):
        hccl.Commit(handle)
        hccl.Wait(handle)
    hccl.Finalize()


def reduce_scatter_main(stride: int) -> None:
    n = hp.get_world_size()
    x, y = torch.ones(n * 12), torch.zeros(12)
    hp.launch(reduce_scatter, x, y, _tiling(hp.HCCL_CMD_REDUCE_SCATTER), stride)


def test_send_strips_name_unread_bytes_and_double_reads() -> None:
    """strideCount 4 instead of 12: round r reads block p at (r + p) * 16 bytes, not r * 16 +
    p * 48, so blocks overlap, the last half is never read and the receive side looks right."""
    picture = hp.explain_layout(reduce_scatter_main, 4, world_size=4)
    assert all(not s.gaps() and not s.overlaps() for s in picture.strips)
    assert [(s.rank, s.buffer, s.nbytes, s.side) for s in picture.send_strips] == [
        (rank, "xGM", 192, "send") for rank in range(4)
    ]
    strip = picture.send_strips[2]
    assert sorted((s.start, s.end, s.source, s.label) for s in strip.segments) == sorted(
        ((r + p) * 16, (r + p + 1) * 16, p, f"ReduceScatter handle 0 round {r}")
        for r in range(3)
        for p in range(4)
    )
    assert strip.gaps() == [(96, 192)]
    assert strip.overlaps() == [(16, 80)]
    text = picture.text()
    assert "rank 2 xGM (send) (192 bytes) |" in text
    for line in (
        "[16, 32) -> rank 1: ReduceScatter handle 0 round 0",
        "[16, 32) -> rank 0: ReduceScatter handle 0 round 1",
        "[96, 192) unread",
        "[16, 80) read more than once",
    ):
        assert f"    {line}" in text
    legend = dict(picture.legend(lambda r: f"C{r}"))
    assert legend["to rank 3"] == {"facecolor": "C3", "hatch": "///", "edgecolor": "white"}
    assert "unread" in legend and legend["read more than once"]["hatch"]

    fixed = hp.explain_layout(reduce_scatter_main, 12, world_size=4)
    strip = fixed.send_strips[0]
    assert sorted((s.start, s.end, s.source) for s in strip.segments) == sorted(
        (r * 16 + p * 48, r * 16 + p * 48 + 16, p) for r in range(3) for p in range(4)
    )
    assert strip.gaps() == [] and strip.overlaps() == []
    assert ") unread" not in fixed.text() and ") read more than once" not in fixed.text()


def test_send_strips_of_an_all_gather_go_to_every_rank(tmp_path: Path) -> None:
    picture = hp.explain_layout(main, world_size=2, png=tmp_path / "layout.png")
    assert [(s.rank, s.buffer) for s in picture.send_strips] == [(0, "xGM"), (1, "xGM")]
    strip = picture.send_strips[1]
    assert [(s.start, s.end, s.source, s.handle) for s in strip.segments] == [
        (0, 256, -1, 0), (256, 512, -1, 0), (512, 600, -1, 1)
    ]  # fmt: skip
    assert "[512, 600) -> every rank: AllGather handle 1 round 0" in picture.text()
    assert "rank 1 xGM (send) (600 bytes) |" + "*" * 64 + "|" in picture.text()
    assert "to every rank" in dict(picture.legend(str))
    sends = picture.select(ranks=[1], buffers=["xGM"], handles=[1])
    assert sends.strips == [] and len(sends.send_strips) == 1
    assert [(s.start, s.end) for s in sends.send_strips[0].segments] == [(512, 600)]
    assert sends.send_strips[0].gaps() == [(0, 512)]
    assert (tmp_path / "layout.png").read_bytes()[:4] == b"\x89PNG"


def test_the_send_stride_sample_and_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """samples/debug_send_stride_mistake.py fails on ranks 1-3; its send strips show why."""
    monkeypatch.syspath_prepend(str(ROOT / "samples"))
    import debug_send_stride_mistake as sample

    wrong = ([(1200, 2400)], [(200, 1000)])
    for fixed, verdicts, marks in (
        (False, ["PASS", *["FAIL"] * 3], wrong),
        (True, ["PASS"] * 4, ([], [])),
    ):
        monkeypatch.setattr(sample, "FIXED", fixed)
        result = hp.run(sample.main, world_size=4, record=True)
        assert [lines[0].split()[3] for lines in result] == verdicts
        strip = hp.explain_layout(sample.main, world_size=4).send_strips[0]
        assert (strip.gaps(), strip.overlaps()) == marks
        if not fixed:
            assert result[3][1] == (
                "rank 3: rounds 0..2 summed send elements [300, 400) [400, 500) [500, 600); "
                "expected [900, 1000) [1000, 1100) [1100, 1200)"
            )


def test_alltoallv_and_reduced_blocks() -> None:
    def kernel(xGM: Any, yGM: Any, zGM: Any, tilingGM: Any) -> None:
        hccl = hp.Hccl()
        hccl.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM))
        hccl.SetCcTilingV2(hp.offsetof(Tiling, "cc"))
        h = hccl.AllReduce[True](xGM, zGM, 4, hp.HCCL_DATA_TYPE_FP32, hp.HCCL_REDUCE_SUM)
        hccl.Wait(h)
        hccl.Finalize()

    def run() -> None:
        x, z = torch.ones(4), torch.zeros(6)
        tiling = Tiling()
        cfg = hp.Mc2CcTilingConfig("hccl_world_group", hp.HCCL_CMD_ALLREDUCE, "")
        cfg.GetTiling(tiling.init)
        cfg.GetTiling(tiling.cc)
        hp.launch(kernel, x, None, z, tiling)

    picture = hp.explain_layout(run, world_size=2)
    assert "[0, 16) <- every rank (reduced): AllReduce handle 0 round 0" in picture.text()
    assert "reduced over ranks" in [label for label, _ in picture.legend(str)]
    assert picture.strips[0].gaps() == [(16, 24)]


def _cli_here(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    """``python -m hccl_py ARGV`` on the emulator, in this process: main() runs the script here
    (runpy), as the command line does; what main and the script change in the environment,
    sys.argv and sys.path is undone."""
    from hccl_py.__main__ import main

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    saved = dict(os.environ)
    try:
        return main(list(argv))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_cli_run_trace_summary_and_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The command line's run and layout, in this process (the emulator runs the script here)."""
    trace, png = tmp_path / "t.json", tmp_path / "l.png"
    sample = str(ROOT / "samples" / "debug_stride_mistake.py")
    code = _cli_here(monkeypatch, "run", "-n", "2", "--trace", str(trace), "--summary", sample,
                     "--fixed")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert "hccl_py summary" in err
    assert {e["pid"] for e in _events(trace)} == {0, 1}
    code = _cli_here(monkeypatch, "layout", "-n", "4", "--png", str(png), sample)
    assert code == 1  # the sample's check fails on purpose
    assert "[768, 856) written more than once" in capsys.readouterr().err
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_two_processes_give_the_same_timeline_but_its_times(tmp_path: Path) -> None:
    """The default schedule is fixed: a run in another process (another hash seed, other
    addresses, the other kind of runner, another torch thread count) records the same
    events in the same order, with the same texts; only the times differ."""
    sample = str(ROOT / "samples" / "debug_stride_mistake.py")
    runs = []
    for i, (seed, runners, threads) in enumerate((("0", "threads", 1), ("4321", "greenlets", 3))):
        trace = tmp_path / f"t{i}.json"
        code = (
            f"import runpy, sys, torch; torch.set_num_threads({threads}); sys.argv = sys.argv[1:]; "
        )
        code += "runpy.run_module('hccl_py', run_name='__main__', alter_sys=True)"
        env = {**os.environ, "PYTHONHASHSEED": seed, "HCCL_PY_EMU_RUNNERS": runners}
        out = subprocess.run([sys.executable, "-c", code, "hccl_py", "run", "-n", "2", "--trace",
                              str(trace), sample, "--fixed"], capture_output=True, text=True,
                             timeout=300, env=env)  # fmt: skip
        assert out.returncode == 0, out.stderr
        events = [{k: v for k, v in e.items() if k not in ("ts", "dur")} for e in _events(trace)]
        runs.append((out.stdout, events))
    assert runs[0][1] and runs[0] == runs[1]


def test_cli_layout_draws_send_strips(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    sample = str(ROOT / "samples" / "debug_send_stride_mistake.py")
    code = _cli_here(monkeypatch, "layout", "-n", "4", sample)
    out = capsys.readouterr()
    assert code == 1  # the sample's check fails on purpose
    assert "send buffers: digit = rank the bytes go to" in out.err
    strip = "rank 1 xGM (send) (2400 bytes) |00000" + "!" * 21 + "333333" + "." * 32 + "|"
    assert strip in out.err
    assert "    [1200, 2400) unread\n    [200, 1000) read more than once" in out.err
    assert "rank 1 yGM (600 bytes) |" + "*" * 64 + "|" in out.err
    assert "rank 3: rounds 0..2 summed send elements" in out.out


def test_a_failed_run_still_writes_its_timeline(tmp_path: Path) -> None:
    """A deadlock is what one debugs most: the timeline shows the Wait that never returned."""

    def lone(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        hccl = hp.Hccl()
        hccl.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM))
        hccl.SetCcTilingV2(hp.offsetof(Tiling, "cc"))
        hccl.Wait(hccl.AllGather[True](xGM, yGM, ELEMS, F16, ELEMS))

    def run() -> None:
        x = torch.zeros(ELEMS, dtype=torch.float16)
        y = torch.zeros(ELEMS * hp.get_world_size(), dtype=torch.float16)
        if hp.get_rank() == 0:
            hp.launch(lone, x, y, _tiling())

    path = tmp_path / "failed.json"
    with pytest.raises(hp.WorldError):
        hp.run(run, world_size=2, trace=path, timeout=5)
    events = _events(path)
    names = [e["name"] for e in events if e["ph"] == "X" and e["pid"] == 0]
    assert names == ["InitV2", "SetCcTilingV2", "AllGather[True]", "Commit", "Wait"]
    wait = [e for e in events if e.get("name") == "Wait"][0]
    assert wait["args"]["domain"] == "hccl_world_group" and wait["dur"] >= 0


def _sync_kernel(tilingGM: Any) -> None:
    """Core 1 arrives 0.2 s late at the barrier, so core 0 waits there that long."""
    if hp.GetBlockIdx() == 1:
        time.sleep(0.2)
    hp.SyncAll()
    hp.SyncAll()


def _sync_main() -> None:
    hp.launch(_sync_kernel, _tiling(), block_dim=2)


def test_sync_all_shows_on_each_core_track_as_long_as_it_waited(tmp_path: Path) -> None:
    path = tmp_path / "sync.json"
    hp.run(_sync_main, world_size=2, trace=path)
    syncs = [e for e in _events(path) if e["ph"] == "X" and e["name"] == "SyncAll"]
    for rank in range(2):
        mine = sorted((e for e in syncs if e["pid"] == rank), key=lambda e: (e["tid"], e["ts"]))
        core0, core1 = recorder.AIV_TID, recorder.AIV_TID + 1
        assert [(e["tid"], e["args"]["call"]) for e in mine] == [
            (core0, "SyncAll()"), (core0, "SyncAll()"),
            (core1, "SyncAll()"), (core1, "SyncAll()"),
        ]  # fmt: skip
        first_wait: dict[int, float] = {}
        for e in mine:  # sorted by track and time: each core's first barrier
            first_wait.setdefault(e["tid"], e["dur"])
        assert first_wait[core0] >= 150_000 > first_wait[core1], first_wait


def _fine_grained() -> None:
    from test_iterate import _per_step_main

    _per_step_main(2, 2, 2)


def test_fine_grained_flows_follow_the_server_steps(tmp_path: Path) -> None:
    """A fine-grained AlltoAllV's server rounds are its steps: each step's Commit flows into
    that step's round and the round into its Wait (2 ranks x 2 rounds x 2 steps)."""
    path = tmp_path / "trace.json"
    hp.run(_fine_grained, world_size=2, platform="A3", trace=path)
    events = _events(path)
    starts = _check_flows(events)
    for rank in range(2):
        commits = sorted(i for i in starts if i.startswith(f"commit/{rank}/"))
        waits = [i for i in starts if i.startswith("wait/") and starts[i]["pid"] == rank]
        assert len(commits) == 4 and len(set(commits)) == 4, commits
        assert len(waits) == 4, waits
    rounds = [e for e in events if e.get("cat") == "round" and e["pid"] == 0]
    assert [e["args"]["round"] for e in rounds] == [0, 1, 2, 3]
