"""Every sample runs in one command and reports PASS on every rank.

Each sample runs as a user would run it (``python samples/X.py``, and for a
few ``python -m hccl_py run -n N ...``, on gloo processes, or under torchrun),
as a fresh ``__main__``; runs with the same launcher share one process or one
launch (``tests/sample_batch.py``), which imports torch once. The batches go in
parallel and each test checks one run's exit code and its verdict lines
``rank R: <case> PASS|FAIL|SKIP ...``.
In-process, every sample also passes under the late schedule with poisoned
receive buffers, which exposes reads of data whose Wait has not returned.
"""

from __future__ import annotations

import ast
import concurrent.futures
import ctypes
import functools
import importlib.util
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from batch_runs import RUN_TIMEOUT, run_batch
from expect import expects_warning
from launch_helpers import SLOW, VERDICT, check_run, launch_env, selected_jobs

import hccl_py as hp

ROOT = Path(__file__).resolve().parent.parent
SAMPLES_DIR = ROOT / "samples"
#: How long a batch may take to start and show a sample's first line (Python, torch).
FIRST_LINE_TIMEOUT = 60

NPU_SKIP = {"torch_npu": "SKIP"}
#: sample file -> {case: verdict expected on every rank of a 4-rank emulated run}
SAMPLES: dict[str, dict[str, str]] = {
    "all_gather_custom.py": {"non-tiled": "PASS", "multi-round": "PASS"},
    "all_reduce_custom.py": {"non-tiled": "PASS", "multi-round": "PASS"},
    "reduce_scatter_custom.py": {"three-prepares": "PASS", "repeat-3": "PASS"},
    "alltoall_custom.py": {"non-tiled": "PASS", "multi-round": "PASS"},
    "alltoallv_custom.py": {"equal-count": "PASS", "uneven": "PASS"},
    "alltoall_allgather_custom.py": {"alltoall": "PASS", "allgather": "PASS"},
    "compute_then_allreduce.py": {"matmul": "PASS", "allreduce": "PASS"},
    "all_gather_matmul.py": {"gather_out": "PASS", "output": "PASS", **NPU_SKIP},
    "matmul_reduce_scatter.py": {"output": "PASS", **NPU_SKIP},
    "mc2_matmul_reduce_scatter_full_mesh.py": {"output": "PASS"},
    "mc2_matmul_all_reduce.py": {"output": "PASS"},
    "mc2_matmul_all_reduce_add_rms_norm.py": {"arn1": "PASS", "arn2": "PASS"},
    "mc2_all_gather_matmul_full_mesh.py": {"gather_out": "PASS", "output": "PASS"},
    "mc2_moe_distribute_dispatch_v2_950.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_moe_distribute_combine_v2_950.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_allto_all_all_gather_batch_mat_mul.py": {"y1": "PASS", "y2": "PASS"},
    "mc2_batch_mat_mul_reduce_scatter_allto_all.py": {"y": "PASS"},
    "mc2_allto_all_matmul.py": {"all2all_out": "PASS", "y": "PASS"},
    "mc2_allto_all_matmul_950.py": {
        f"{case}-{mode}": "PASS" for mode in ("ccu", "ai_cpu") for case in ("all2all_out", "y")
    },
    "mc2_allto_allv_grouped_mat_mul.py": {"permuteOut": "PASS", "gmmY": "PASS", "mmY": "PASS"},
    "mc2_allto_allv_grouped_mat_mul_2026.py": {
        "permuteOut": "PASS",
        "gmmY": "PASS",
        "mmY": "PASS",
    },
    "mc2_allto_allv_quant_grouped_mat_mul.py": {"permuteOut": "PASS", "gmmY": "PASS"},
    "mc2_matmul_allto_all.py": {"y": "PASS"},
    "mc2_grouped_mat_mul_allto_allv.py": {"y": "PASS", "mmY": "PASS"},
    "mc2_quant_grouped_mat_mul_allto_allv.py": {"y": "PASS"},
    "mc2_matmul_reduce_scatter_v2_950.py": {"y": "PASS"},
    "mc2_matmul_a2a_vec_reduce_950.py": {"y": "PASS"},
    "mc2_matmul_all_reduce_950.py": {"ccu": "PASS", "ai_cpu": "PASS"},
    "mc2_all_gather_matmul_v2_950.py": {"gather_out": "PASS", "y-ccu": "PASS", "y-ai_cpu": "PASS"},
    "mc2_moe_distribute_dispatch_v2_full_mesh.py": {
        f"{entry}-{launch}": "PASS" for launch in (1, 2) for entry in ("launch", "v3")
    },
    "mc2_moe_distribute_combine_v2.py": {
        f"{entry}-{launch}": "PASS" for launch in (1, 2) for entry in ("launch", "v3")
    },
    "mc2_moe_distribute_combine_setup.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_moe_ep_dispatch.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_moe_ep_combine.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_moe_update_expert.py": {
        **{case: "PASS" for case in ("rank", "token", "half", "bf16")},
        "eplb-1": "PASS",
        "eplb-2": "PASS",
    },
    "mc2_moe_distribute_dispatch_setup.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_engram_fetch.py": {f"round-{r}": "PASS" for r in (1, 2, 3)},
    "mc2_moe_distribute_a2.py": {
        f"{op}-{launch}": "PASS" for launch in (1, 2) for op in ("dispatch", "combine")
    },
    "mc2_attention_ffn.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_mega_moe.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_mega_moe_a3.py": {"launch-1": "PASS", "launch-2": "PASS"},
    "mc2_distribute_barrier.py": {
        f"{case}-{launch}": "PASS" for launch in range(1, 9) for case in ("rows", "state")
    },
    "mc2_moe_distribute_combine_v2_950_mte.py": {"v3-1": "PASS", "v3-2": "PASS"},
    "mc2_context_950.py": {
        f"{op}-{launch}": "PASS" for op in ("barrier", "dispatch") for launch in (1, 2)
    },
    "mc2_quant_all_reduce.py": {"launch-1": "PASS", "launch-2": "PASS", "launch-3": "PASS"},
    "mc2_quant_reduce_scatter.py": {
        "launch-1": "PASS",
        "launch-2": "PASS",
        "launch-3": "PASS",
        "mx": "PASS",
    },
    "moe_distribute_window.py": {
        "dispatch-direct": "PASS",
        "combine-direct": "PASS",
        "dispatch-a2": "PASS",
        "combine-a2": "PASS",
    },
}
#: sample file -> the HcclWarning kinds every run of it gives (what its source does), and no other
WARNINGS: dict[str, tuple[str, ...]] = {
    # Finalize right after the last Wait, no SyncAll: the source's race (docs/emulator.md)
    "mc2_batch_mat_mul_reduce_scatter_allto_all.py": ("finalize-unordered",),
}
UNEVEN_SKIPPED = {"equal-count": "PASS", "uneven": "SKIP"}
#: sample file -> the error the late schedule ends in, because of a race of its source
LATE_SCHEDULE_FAILS: dict[str, str] = {
    # the ARN loop's round count: block 0 publishes the last count before the other AIV cores
    # read the one before, they leave the loop a SyncAll early (docs/notes/mc2-kernels.md, 28)
    "mc2_matmul_all_reduce_add_rms_norm.py": "HcclDeadlockError",
}


def _gloo(sample: str, n: int = 2) -> tuple[list[str], int, dict[str, str]]:
    """A run of ``samples/<sample>.py`` on ``n`` gloo processes (``hccl_py run``)."""
    return (["-m", "hccl_py", "run", "-n", str(n), "--backend", "gloo"], n, SAMPLES[f"{sample}.py"])


def _torchrun(sample: str) -> tuple[list[str], int, dict[str, str]]:
    """A run of ``samples/<sample>.py`` under torchrun, 2 processes."""
    cmd = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return (cmd, 2, SAMPLES[f"{sample}.py"])


#: run id -> (python arguments, ranks, expected verdicts) for runs other than ``python X.py``.
OTHER_RUNS: dict[str, tuple[list[str], int, dict[str, str]]] = {
    "alltoallv_custom-n8": (["-m", "hccl_py", "run", "-n", "8"], 8, UNEVEN_SKIPPED),
    "all_gather_matmul-n2": (
        ["-m", "hccl_py", "run", "-n", "2"],
        2,
        SAMPLES["all_gather_matmul.py"],
    ),
    "alltoall_allgather_custom-gloo": _gloo("alltoall_allgather_custom"),
    "mc2_matmul_reduce_scatter_full_mesh-gloo": _gloo("mc2_matmul_reduce_scatter_full_mesh"),
    "mc2_matmul_all_reduce-gloo": _gloo("mc2_matmul_all_reduce"),
    "all_gather_custom-torchrun": _torchrun("all_gather_custom"),
    "mc2_all_gather_matmul_full_mesh-torchrun": _torchrun("mc2_all_gather_matmul_full_mesh"),
    "mc2_matmul_reduce_scatter_full_mesh-torchrun": _torchrun(
        "mc2_matmul_reduce_scatter_full_mesh"
    ),
    "mc2_moe_distribute_dispatch_v2_950-gloo": _gloo("mc2_moe_distribute_dispatch_v2_950"),
    "mc2_moe_distribute_combine_v2_950-gloo": _gloo("mc2_moe_distribute_combine_v2_950"),
    "mc2_moe_distribute_dispatch_v2_full_mesh-gloo": _gloo(
        "mc2_moe_distribute_dispatch_v2_full_mesh"
    ),
    "mc2_moe_distribute_combine_v2-gloo": _gloo("mc2_moe_distribute_combine_v2"),
    "mc2_moe_ep_dispatch-gloo": _gloo("mc2_moe_ep_dispatch"),
    "mc2_moe_ep_dispatch-torchrun": _torchrun("mc2_moe_ep_dispatch"),
    "mc2_moe_ep_combine-gloo": _gloo("mc2_moe_ep_combine"),
    "mc2_moe_ep_combine-torchrun": _torchrun("mc2_moe_ep_combine"),
    "mc2_moe_update_expert-gloo": _gloo("mc2_moe_update_expert"),
    "mc2_engram_fetch-gloo": _gloo("mc2_engram_fetch"),
    "mc2_moe_distribute_dispatch_setup-gloo": _gloo("mc2_moe_distribute_dispatch_setup"),
    "mc2_moe_distribute_dispatch_setup-torchrun": _torchrun("mc2_moe_distribute_dispatch_setup"),
    "mc2_engram_fetch-torchrun": _torchrun("mc2_engram_fetch"),
    "mc2_attention_ffn-gloo": _gloo("mc2_attention_ffn"),
    "mc2_attention_ffn-torchrun": _torchrun("mc2_attention_ffn"),
    "mc2_moe_distribute_a2-gloo": _gloo("mc2_moe_distribute_a2"),
    "mc2_moe_distribute_a2-torchrun": _torchrun("mc2_moe_distribute_a2"),
    "mc2_moe_distribute_combine_v2-torchrun": _torchrun("mc2_moe_distribute_combine_v2"),
    # 2 ranks: AIV cores 2 and 3 of the setup have no peer (Finalize<false> without a task)
    "mc2_moe_distribute_combine_setup-gloo": _gloo("mc2_moe_distribute_combine_setup"),
    "mc2_moe_distribute_combine_setup-torchrun": _torchrun("mc2_moe_distribute_combine_setup"),
    # two ranks: no fourth or eighth launch (their elastic info leaves one rank of three or
    # more out)
    "mc2_distribute_barrier-gloo": (
        ["-m", "hccl_py", "run", "-n", "2", "--backend", "gloo"],
        2,
        {f"{c}-{launch}": "PASS" for launch in (1, 2, 3, 5, 6, 7) for c in ("rows", "state")},
    ),
    "mc2_distribute_barrier-torchrun": (
        ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"],
        2,
        {f"{c}-{launch}": "PASS" for launch in (1, 2, 3, 5, 6, 7) for c in ("rows", "state")},
    ),
    "mc2_context_950-gloo": _gloo("mc2_context_950"),
    "mc2_moe_distribute_combine_v2_950_mte-gloo": _gloo("mc2_moe_distribute_combine_v2_950_mte"),
    "mc2_quant_all_reduce-gloo": _gloo("mc2_quant_all_reduce"),
    "mc2_quant_all_reduce-torchrun": _torchrun("mc2_quant_all_reduce"),
    "mc2_quant_reduce_scatter-gloo": _gloo("mc2_quant_reduce_scatter"),
    "mc2_quant_reduce_scatter-torchrun": _torchrun("mc2_quant_reduce_scatter"),
    "mc2_allto_all_all_gather_batch_mat_mul-gloo": _gloo(
        "mc2_allto_all_all_gather_batch_mat_mul", 4
    ),
    # ep = 4: AllGather<true> and InterHcclGroupSync both ways instead of AllGather<false> + Commit
    "mc2_allto_all_all_gather_batch_mat_mul-n8": (
        ["-m", "hccl_py", "run", "-n", "8"],
        8,
        SAMPLES["mc2_allto_all_all_gather_batch_mat_mul.py"],
    ),
    "mc2_batch_mat_mul_reduce_scatter_allto_all-gloo": _gloo(
        "mc2_batch_mat_mul_reduce_scatter_allto_all", 4
    ),
    # ep = 4: three peers per AlltoAllV, two of them skipped in the transposes
    "mc2_batch_mat_mul_reduce_scatter_allto_all-n8": (
        ["-m", "hccl_py", "run", "-n", "8"],
        8,
        SAMPLES["mc2_batch_mat_mul_reduce_scatter_allto_all.py"],
    ),
    "mc2_allto_all_matmul-gloo": _gloo("mc2_allto_all_matmul"),
    "mc2_allto_all_matmul-torchrun": _torchrun("mc2_allto_all_matmul"),
    # comm_mode "ccu" (the CCU client) and "ai_cpu" (the 950 AI CPU client), one launch each
    "mc2_allto_all_matmul_950-gloo": _gloo("mc2_allto_all_matmul_950"),
    "mc2_allto_allv_grouped_mat_mul-gloo": _gloo("mc2_allto_allv_grouped_mat_mul"),
    "mc2_allto_allv_grouped_mat_mul-torchrun": _torchrun("mc2_allto_allv_grouped_mat_mul"),
    "mc2_allto_allv_grouped_mat_mul_2026-gloo": _gloo("mc2_allto_allv_grouped_mat_mul_2026"),
    "mc2_allto_allv_grouped_mat_mul_2026-torchrun": _torchrun(
        "mc2_allto_allv_grouped_mat_mul_2026"
    ),
    "mc2_allto_allv_quant_grouped_mat_mul-gloo": _gloo("mc2_allto_allv_quant_grouped_mat_mul"),
    "mc2_matmul_allto_all-gloo": _gloo("mc2_matmul_allto_all"),
    "mc2_matmul_allto_all-torchrun": _torchrun("mc2_matmul_allto_all"),
    "mc2_grouped_mat_mul_allto_allv-gloo": _gloo("mc2_grouped_mat_mul_allto_allv"),
    "mc2_grouped_mat_mul_allto_allv-torchrun": _torchrun("mc2_grouped_mat_mul_allto_allv"),
    # comm_mode "ccu" on the 950: the CCU client; modes 0 and 2 of the cross-core flags
    "mc2_quant_grouped_mat_mul_allto_allv-gloo": _gloo("mc2_quant_grouped_mat_mul_allto_allv"),
    # 2 ranks: comm_mode "ccu", the CCU client (4 ranks, in-process, run the 950 AI CPU one)
    "mc2_matmul_reduce_scatter_v2_950-gloo": _gloo("mc2_matmul_reduce_scatter_v2_950"),
    "mc2_matmul_reduce_scatter_v2_950-torchrun": _torchrun("mc2_matmul_reduce_scatter_v2_950"),
    # comm_mode "ccu" on 4 ranks: the A2A path (its entry's other kernel runs above)
    "mc2_matmul_a2a_vec_reduce_950-gloo": _gloo("mc2_matmul_a2a_vec_reduce_950", 4),
    # 2 ranks: the AllReduce path (4 ranks, in-process, run AlltoAll + reduce + AllGather)
    "mc2_matmul_all_reduce_950-gloo": _gloo("mc2_matmul_all_reduce_950"),
    "mc2_all_gather_matmul_v2_950-gloo": _gloo("mc2_all_gather_matmul_v2_950"),
    "mc2_all_gather_matmul_v2_950-torchrun": _torchrun("mc2_all_gather_matmul_v2_950"),
    "moe_distribute_window-gloo": _gloo("moe_distribute_window", 4),
    "mc2_mega_moe_a3-gloo": _gloo("mc2_mega_moe_a3", 4),
    "moe_distribute_window-n16": (
        ["-m", "hccl_py", "run", "-n", "16"],
        16,
        SAMPLES["moe_distribute_window.py"],
    ),
    "moe_distribute_window-torchrun": _torchrun("moe_distribute_window"),
    "moe_distribute_window-n2": (
        ["-m", "hccl_py", "run", "-n", "2"],
        2,
        SAMPLES["moe_distribute_window.py"],
    ),
    "alltoallv_custom-torchrun": (
        ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"],
        2,
        UNEVEN_SKIPPED,
    ),
}


def _batches(wanted: list[str]) -> dict[tuple[str, ...], list[str]]:
    """The wanted runs grouped by launcher: one process (or one launch) runs each group."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for run_id in wanted:
        args = tuple(OTHER_RUNS[run_id][0]) if run_id in OTHER_RUNS else ()
        groups.setdefault(args, []).append(run_id)
    return groups


def _sample_path(run_id: str) -> str:
    return f"samples/{run_id if run_id in SAMPLES else run_id.rsplit('-', 1)[0] + '.py'}"


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest):
    """Start every selected batch of sample runs at once: run id -> its batch's future, whose
    result maps each run id of the batch to its run's result."""
    batches = _batches(selected_jobs(request, [*SAMPLES, *OTHER_RUNS]))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {
            args: pool.submit(run_batch, args, {r: _sample_path(r) for r in ids})
            for args, ids in batches.items()
        }
        yield {run_id: futures[args] for args, ids in batches.items() for run_id in ids}


def _warnings_of(run_id: str) -> tuple[str, ...]:
    return WARNINGS.get(os.path.basename(_sample_path(run_id)), ())


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_passes_on_4_emulated_ranks(runs, name: str) -> None:
    check_run(runs[name].result()[name], 4, SAMPLES[name], _warnings_of(name))


@pytest.mark.parametrize(
    "run_id",
    [pytest.param(r, marks=[SLOW] if r.endswith("-torchrun") else []) for r in sorted(OTHER_RUNS)],
)
def test_sample_through_cli_and_launcher(runs, run_id: str) -> None:
    _, ranks, expected = OTHER_RUNS[run_id]
    check_run(runs[run_id].result()[run_id], ranks, expected, _warnings_of(run_id))


def test_batch_keeps_samples_apart(tmp_path: Path) -> None:
    """A batch reports each sample's own lines and exit code, as separate processes would."""
    failing = tmp_path / "failing_sample.py"
    failing.write_text('print("rank 0: case           FAIL")\nraise SystemExit(1)\n')
    runs = {"all_reduce_custom.py": "samples/all_reduce_custom.py", "failing": str(failing)}
    runs["alltoall_custom.py"] = "samples/alltoall_custom.py"
    results = run_batch((), runs)
    for name in ("all_reduce_custom.py", "alltoall_custom.py"):
        check_run(results[name], 4, SAMPLES[name])  # exactly its own 8 verdicts, exit 0
    assert results["failing"].returncode == 1
    assert results["failing"].stdout == "rank 0: case           FAIL"


def test_a_batch_that_dies_fails_the_sample_it_died_in_not_those_it_finished(
    tmp_path: Path,
) -> None:
    """A batch whose process ends in a sample (a rank killed, a launcher stopping the ranks):
    the samples finished before keep their own results; that sample and those after it fail
    with the batch's exit code."""
    dying = tmp_path / "dying_sample.py"
    dying.write_text("import os\nos._exit(3)\n")
    runs = {"all_reduce_custom.py": "samples/all_reduce_custom.py", "dying": str(dying)}
    runs["alltoall_custom.py"] = "samples/alltoall_custom.py"
    results = run_batch((), runs)
    check_run(results["all_reduce_custom.py"], 4, SAMPLES["all_reduce_custom.py"])
    assert results["dying"].returncode == 3
    assert results["alltoall_custom.py"].returncode == 3
    assert (
        "before every process finished alltoall_custom.py" in results["alltoall_custom.py"].stderr
    )


def test_a_batch_that_times_out_keeps_the_samples_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch killed at its time limit: the samples it finished keep their results, the one it
    hung in fails with the limit named (not a bare TimeoutExpired
    in every run of the batch).

    The limit is not waited for: the last sample prints a line and returns, and the batch's
    output, less that sample's exit line, comes back as subprocess.run gives the output of a
    process it killed at its timeout (as bytes)."""
    quick, hung = tmp_path / "quick_sample.py", tmp_path / "hung_sample.py"
    quick.write_text('print("rank 0: case           PASS")\n')
    hung.write_text('print("rank 0: started")\n')
    real_run = subprocess.run

    def killed_in_the_last_sample(command: list[str], **options: Any) -> None:
        done = real_run(command, **options)
        assert done.returncode == 0, done.stderr
        printed = [
            line for line in done.stdout.splitlines(True) if "hung_sample.py| exit" not in line
        ]
        output, errors = "".join(printed).encode(), done.stderr.encode()
        raise subprocess.TimeoutExpired(command, options["timeout"], output, errors)

    monkeypatch.setattr(subprocess, "run", killed_in_the_last_sample)
    results = run_batch((), {"quick": str(quick), "hung": str(hung)})
    check_run(results["quick"], 1, {"case": "PASS"})
    assert results["hung"].returncode == -9
    assert results["hung"].stdout == "rank 0: started"  # what it printed before the limit
    assert f"(the batch was killed after {RUN_TIMEOUT} s)" in results["hung"].stderr


def test_a_batch_splits_a_sample_s_lines_as_python_reads_them(tmp_path: Path) -> None:
    """A progress line ended by a carriage return is a line of its own, as the run's reader
    (universal newlines) splits it: the verdict after it keeps its sample's prefix."""
    progress = tmp_path / "progress_sample.py"
    progress.write_text('print("10%", end="\\r")\nprint("rank 0: case           PASS")\n')
    result = run_batch((), {"progress": str(progress)})["progress"]
    check_run(result, 1, {"case": "PASS"})
    assert result.stdout.splitlines() == ["10%", "rank 0: case           PASS"]


def test_a_batch_shows_each_line_of_a_sample_as_soon_as_it_is_printed(tmp_path: Path) -> None:
    """So that a batch killed in a sample (at its time limit) keeps what that sample printed:
    before, a sample's lines came out only when it ended."""
    waiting = tmp_path / "waiting_sample.py"
    waiting.write_text('import sys\nprint("rank 0: case           PASS")\nsys.stdin.read()\n')
    command = [sys.executable, "tests/sample_batch.py", str(waiting)]
    with subprocess.Popen(
        command, cwd=ROOT, env=launch_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        try:
            shown, _, _ = select.select([proc.stdout], [], [], FIRST_LINE_TIMEOUT)
            first = proc.stdout.readline() if shown else b""
        finally:
            proc.stdin.close()  # the sample ends
            rest = proc.stdout.read()
    assert first == b"waiting_sample.py| rank 0: case           PASS\n"
    assert rest == b"waiting_sample.py| exit 0\n"
    assert proc.returncode == 0


def _load(name: str):
    """Import a sample (or ``_common``) from samples/ as a module."""
    spec = importlib.util.spec_from_file_location(name, SAMPLES_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=expects_warning(*WARNINGS[n])) if n in WARNINGS else n
        for n in sorted(SAMPLES)
    ],
)
def test_sample_waits_before_reading(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Late schedule + poison: a round runs only when waited for, its target is NaN till then."""
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    sample = _load(name.removesuffix(".py"))
    run = functools.partial(
        hp.run,
        sample.main,
        world_size=4,
        backend="emu",
        platform=getattr(sample, "PLATFORM", "A2"),
        **getattr(sample, "RUN_KWARGS", {}),
        schedule="late",
        poison=True,
        timeout=20,
    )
    if name in LATE_SCHEDULE_FAILS:
        with pytest.raises(hp.WorldError) as err:
            run()
        roots = (err.value.root_causes or err.value.failures).values()
        assert {type(e).__name__ for e in roots} == {LATE_SCHEDULE_FAILS[name]}
        return
    per_rank = run()
    verdicts = {(int(m[1]), m[2]): m[3] for line in sum(per_rank, []) if (m := VERDICT.match(line))}
    assert verdicts == {(r, c): v for r in range(4) for c, v in SAMPLES[name].items()}


def _quant_reduce_scatter_tail(sample, pad: int) -> list[str]:
    """One launch with a short tail block (H = 1152: a slice of 1024 + 128 elements), the scales
    given in an allocation ``pad`` floats longer than the tensor."""
    n, rank = hp.get_world_size(), hp.get_rank()
    bs, h = n, 1152
    x, scales = sample.inputs(rank, 1, bs, h)
    scalesGM = torch.zeros(scales.size + pad, dtype=torch.float32, device=hp.device())
    scalesGM[: scales.size] = torch.from_numpy(scales.reshape(-1))
    out = torch.zeros(bs // n, h, dtype=torch.float16, device=hp.device())
    tiling = sample.QuantReduceScatterTilingFunc(bs, h, n, torch.float32)
    args = (torch.from_numpy(x), scalesGM, out, None, tiling)
    kernel = sample.QuantReduceScatterKernel(*sample.KG)
    hp.launch(kernel, *args, block_dim=sample.AIV_NUM, kernel_type="aiv")
    return [sample.compare("tail", out, sample.reference(rank, n, 1, bs, h))]


def test_quant_reduce_scatter_tail_block_reads_past_the_scales(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel's CopyDataBlock copies a whole block's scales (8) for the tail block (1 scale):
    the last rank's slice reads 7 scales past the end of the scales tensor (docs/notes/mc2-kernels.md,
    section 18). With room after the tensor the result is right."""
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    sample = _load("mc2_quant_reduce_scatter")
    kwargs = dict(world_size=2, backend="emu", platform="950", **sample.RUN_KWARGS, timeout=20)
    with pytest.raises(hp.WorldError) as err:
        hp.run(functools.partial(_quant_reduce_scatter_tail, sample, 0), **kwargs)
    roots = list((err.value.root_causes or err.value.failures).values())
    assert [type(e).__name__ for e in roots] == ["HcclBoundsError"]
    assert "bytes [68, 100) of scales fall outside its 72 bytes" in str(roots[0])
    padded = hp.run(functools.partial(_quant_reduce_scatter_tail, sample, 8), **kwargs)
    assert [line.split()[3] for lines in padded for line in lines] == ["PASS", "PASS"]


def test_a2a_vec_reduce_unaligned_slice_over_reads_the_next_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ReduceSumForAlltoAll reads its last block 32-byte aligned and writes only the slice's
    bytes: with N = 4097 a tile's slice (4 x 4097 FP16) ends mid-block, so the read reaches the
    next round's receive range, still pending (docs/fidelity.md; the sample keeps N aligned)."""
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    sample = _load("mc2_matmul_a2a_vec_reduce_950")
    monkeypatch.setattr(sample, "N", 4097)
    with pytest.raises(hp.WorldError) as err:
        hp.run(sample.main, world_size=4, backend="emu", platform="950", timeout=20)
    roots = list((err.value.root_causes or err.value.failures).values())
    assert [type(e).__name__ for e in roots] == ["HcclRaceError"]
    assert "(ReadDataBlockReduceSum) before the Wait of round 0 of handle 1" in str(roots[0])


@pytest.mark.parametrize("sanitized", [False, True])
def test_moe_distribute_a2_multi_server_runs_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, sanitized: bool
) -> None:
    """With 16 ranks (two servers of 8) the A2 kernels BatchWrite one item to every rank, the
    own one and those of the own server included, which BatchWrite.md forbids on Atlas A2 while
    the op's documentation lists fullmesh at 16 to 384 ranks (docs/notes/mc2-kernels.md,
    section 25): every rank warns once and the items land; the outputs match numpy under
    the default schedule and under the late one with poison (an A2 item keeps its old bytes
    until it lands: its status and flag are -1 when set, the poison's pattern). Before
    2026-11-28 core 0's BatchWrite was refused, and poison made every pending flag look set."""
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    sample = _load("mc2_moe_distribute_a2")
    extra = {"schedule": "late", "poison": True} if sanitized else {}
    kwargs = dict(world_size=16, backend="emu", platform="A2", **sample.RUN_KWARGS, timeout=60)
    with pytest.warns(hp.HcclWarning, match=r"\[batch-write-server\]") as seen:
        out = hp.run(sample.main, **kwargs, **extra)
    assert [line.split()[3] for lines in out for line in lines] == ["PASS"] * 64
    assert sorted(w.message.facts()["rank"] for w in seen) == list(range(16))  # once per rank
    first = [str(w.message) for w in seen if "[rank 0," in str(w.message)]
    assert "BatchWrite: item 0: remoteRankId 0 names this rank" in first[0]


def test_moe_distribute_a2_combine_reads_past_ep_send_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The combine copies RoundUp(moeExpertNum, 8) counts of epSendCount, a tensor of
    moeExpertNum: with 2 ranks of 2 experts it reads 16 bytes past its end (section 25)."""
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    sample = _load("mc2_moe_distribute_a2")
    monkeypatch.setattr(sample, "LOCAL_EXPERTS", 2)
    kwargs = dict(world_size=2, backend="emu", platform="A2", **sample.RUN_KWARGS, timeout=20)
    with pytest.raises(hp.WorldError) as err:
        hp.run(sample.main, **kwargs)
    roots = list((err.value.root_causes or err.value.failures).values())
    assert {type(e).__name__ for e in roots} == {"HcclBoundsError"}
    assert "bytes [0, 32) of epSendCount fall outside its 16 bytes" in str(roots[0])


def _mega_moe_run(monkeypatch: pytest.MonkeyPatch, spare: int, seed: int) -> list:
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    sample = _load("mc2_mega_moe")
    kwargs = dict(world_size=2, backend="emu", platform=sample.PLATFORM, **sample.RUN_KWARGS)
    return hp.run(functools.partial(sample.main, spare), seed=seed, timeout=60, **kwargs)


def test_mega_moe_sync_hangs_when_a_peer_is_one_barrier_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CrossRankSyncInWorldSize polls its word for ``count`` exactly; a peer already past this
    barrier has reached the next one and written ``count + 1`` there, so the poll never ends
    (docs/notes/mc2-kernels.md, section 29). Seed 3 is such a schedule."""
    with pytest.raises(hp.WorldError) as err:
        _mega_moe_run(monkeypatch, 0, 3)
    assert isinstance(err.value.failures[0], hp.HcclDeadlockError)
    text = str(err.value)
    assert "rank 0 AIV core 1 polls bytes [64, 68) of WindowsIn of rank 0" in text, text
    assert "which keep the value 2" in text, text


def test_mega_moe_spare_weights_leave_a_send_count_flag_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ResetFlagList clears ``moeExpertPerRank * (16 + slots + 16 * aicNum)`` words from the
    first flag array, but the arrays are laid out by ``expertPerRank``: with one spare weight
    per rank the last AI cores' send-count flags of the last routed expert keep launch 1's
    value, and launch 2 reads that expert's count before it is written (section 29): on seed 7
    a wrong result (on most other seeds a hang). The same schedule without the spare weight
    passes."""
    assert all("PASS" in line for lines in _mega_moe_run(monkeypatch, 0, 7) for line in lines)
    lines = sum(_mega_moe_run(monkeypatch, 1, 7), [])
    assert any("launch-2" in line and "FAIL" in line for line in lines), lines
    assert all("PASS" in line for line in lines if "launch-1" in line), lines


# ---------------------------------------------------------------- the verdict helpers
def _common():
    return _load("_common")


def test_compare_names_the_first_wrong_element() -> None:
    common = _common()
    got = torch.tensor([1.0, 2.0, 5.0, 7.0], dtype=torch.float16)

    def main() -> list[str]:
        return [
            common.compare("same", got, np.array([1, 2, 5, 7], dtype=np.float16), "ok"),
            common.compare("diff", got, np.array([1, 2, 3, 4], dtype=np.float16)),
            common.compare("shape", got, np.zeros(3, dtype=np.float16)),
        ]

    lines = hp.run(main, world_size=2, backend="emu", timeout=5)[1]
    assert lines == [
        "rank 1: same           PASS ok",
        "rank 1: diff           FAIL 2 wrong elements; first at 2: 5.0 != 3.0",
        "rank 1: shape          FAIL 4 elements, expected 3",
    ]


def test_run_sample_exits_1_on_any_fail(capsys: pytest.CaptureFixture[str]) -> None:
    common = _common()

    def main() -> list[str]:
        ok = hp.get_rank() != 1
        return [common.verdict("case", ok), common.skip("other", "not here")]

    with pytest.raises(SystemExit) as exc:
        common.run_sample(main, world_size=3, backend="emu", timeout=5)
    assert exc.value.code == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[2] == "rank 1: case           FAIL"
    assert common.failed(printed) == ["rank 1: case           FAIL"]


def test_run_sample_exits_0_when_all_pass_or_skip() -> None:
    common = _common()

    def main() -> list[str]:
        return [common.verdict("case", True), common.skip("other", "not here")]

    with pytest.raises(SystemExit) as exc:
        common.run_sample(main, world_size=2, backend="emu", timeout=5)
    assert exc.value.code == 0


def _alg_configs(tree: ast.AST) -> list[tuple[str, str]]:
    """``(HCCL_CMD_ name, algConfig literal)`` of every host tiling in a sample.

    Read from ``Mc2CcTilingConfig(group, HCCL_CMD_X, "alg", ...)`` and from a
    ``SetAlgConfig("alg")`` after a ``SetOpType(HCCL_CMD_X)``.
    """
    # a sample may name the op type as its source does (``OP_TYPE_ALL_TO_ALL = 8``)
    consts = {
        t.id: node.value.value
        for node in getattr(tree, "body", [])
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and type(node.value.value) is int
        for t in node.targets
        if isinstance(t, ast.Name)
    }

    def cmd_name(name: str) -> str:
        if name in hp.HcclCMDType.__members__ or name not in consts:
            return name
        return hp.HcclCMDType(consts[name]).name

    found, op = [], None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        args = node.args
        if name == "Mc2CcTilingConfig" and len(args) >= 3 and isinstance(args[1], ast.Name):
            op = cmd_name(args[1].id)
            if isinstance(args[2], ast.Constant):
                found.append((op, args[2].value))
        elif name == "SetOpType" and args and isinstance(args[0], ast.Name):
            op = cmd_name(args[0].id)
        elif name == "SetAlgConfig" and args and isinstance(args[0], ast.Constant) and op:
            found.append((op, args[0].value))
    return found


def test_sample_alg_configs_match_the_op_table() -> None:
    """Samples spell algConfig strings as their originals; each names the op the op table
    names for that op type (AlltoAllV uses AlltoAll's) and is well formed. The documentation
    ports use exactly the table's default."""
    from hccl_py.tiling.config import check_alg_config

    seen = 0
    for path in sorted(SAMPLES_DIR.glob("*.py")):
        for op, alg in _alg_configs(ast.parse(path.read_text())):
            spec = hp.ops.OPS[hp.HcclCMDType[op]]
            assert check_alg_config(alg, spec.cmd) is None, f"{path.name}: {alg!r}"
            if path.name.endswith("_custom.py"):
                assert alg == spec.alg_config, (
                    f"{path.name}: {op} uses {alg!r}, not {spec.alg_config!r}"
                )
            seen += 1
    assert seen >= 10, f"only {seen} algConfig strings found in the samples"


def test_mc2_moe_context_has_the_layout_of_the_cpp_struct(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Mc2Aclnn::Mc2MoeContext``: two uint32, a uint64, two uint64[1024]; the kernels read
    ``epRankId`` at 0 and ``epHcclBuffer_`` at 16, and aclnn passes 4100 int32 elements."""
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    context = _load("_mc2_context")
    struct = context.Mc2MoeContext
    assert (struct.epRankId.offset, struct.kfcContextAddr.offset) == (0, 8)
    assert context.EP_HCCL_BUFFER == 16
    assert struct.hcommHandle_.offset == 16 + 8 * 1024
    assert ctypes.sizeof(struct) // 4 == 4100


def test_a2a_vec_reduce_on_other_rank_counts_skips_with_a_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host takes the A2A path on 4 or 8 ranks only: on 2 ranks the sample says so in a
    SKIP line (until stop 65 an AssertionError ended the run)."""
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    sample = _load("mc2_matmul_a2a_vec_reduce_950")
    out = hp.run(sample.main, world_size=2, backend="emu", platform="950", timeout=20)
    for rank, lines in enumerate(out):
        assert [line.split()[2:4] for line in lines] == [["y", "SKIP"]]
        assert lines[0].endswith("the host takes the A2A path on 4 or 8 ranks, not 2"), lines
        assert lines[0].startswith(f"rank {rank}:")
