"""hccl_py's HCCL path without an NPU, on the torch_npu test stand-in.

Where torch_npu is not installed, every job started here has ``tests/standin``
on its ``PYTHONPATH``, so that ``import torch_npu`` finds the stand-in
(``tests/standin/torch_npu``: NPU tensors kept in CPU memory, the "hccl"
process group over gloo, the MC2 operators in plain torch; see
docs/testing-without-npu.md). Where the real torch_npu is installed it is
imported first: the directory stays off the path, the jobs run on the real
package, and the checks that need the stand-in's knobs are skipped. The test
process itself never imports torch_npu.

The jobs run the HCCL code path as users start it: ``python -m hccl_py run
--backend hccl``, torchrun and msrun-style workers choosing the backend
themselves (hccl where torch_npu sees NPUs), the samples' torch_npu checks,
and the device binding. They all start at once; each test waits for its own.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from batch_runs import run_batch
from launch_helpers import (
    JOB_TIMEOUT,
    ROOT,
    RUNNER_PREFIX,
    SLOW,
    assert_no_warning,
    check_run,
    free_port,
    launch,
    selected_jobs,
    start,
    torchrun,
)

#: The stand-in registers torch_npu's device through torch's accelerator hooks (torch 2.10+).
pytestmark = pytest.mark.skipif(
    not hasattr(torch._C, "_acc"),
    reason="the torch_npu stand-in needs torch._C._acc (accelerator hooks), which this torch lacks",
)

STANDIN_DIR = ROOT / "tests" / "standin"
#: tests/pg_counter.py, which PG_CALLS_JOB imports.
COUNTER = ROOT / "tests" / "pg_counter.py"
#: The stand-in goes on the jobs' path only where no torch_npu is installed.
USES_STANDIN = importlib.util.find_spec("torch_npu") is None
standin_only = pytest.mark.skipif(
    not USES_STANDIN, reason="the real torch_npu is installed; this checks the stand-in"
)
SMOKE = "samples/npu_smoke.py"
AG_MATMUL = "samples/all_gather_matmul.py"
#: torchrun of two ranks, naming no backend: they choose hccl (all_gather_matmul's torch_npu
#: cases pass only there), and the smoke test of the same processes runs on it too.
NPU_TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
#: Runs that share one launch of their launcher (tests/sample_batch.py): run id -> batch job.
#: The process-group counts go first, before any other collective of their processes.
BATCHED = {
    "pg-calls-hccl": "runner-hccl",
    "smoke-runner": "runner-hccl",
    "smoke-torchrun": "torchrun-hccl",
    "all_gather_matmul-torchrun": "torchrun-hccl",
}

#: Ranks 0 and 1 call hp.run; with one NPU, local rank 1 has no device.
BIND_JOB = "import hccl_py as hp\nhp.run(lambda: 0)\n"

#: Which backend hp.run picks under each launcher's variables and NPU count.
SELECTION_CASES = {
    "torchrun, 2 NPUs": ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "2", "hccl"),
    "torchrun, no NPU": ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "0", "gloo"),
    "msrun, 8 NPUs": ({"MS_ROLE": "MS_WORKER", "RANK_ID": "1", "DEVICE_ID": "1"}, "8", "hccl"),
    "msrun, no NPU": ({"MS_ROLE": "MS_WORKER", "RANK_ID": "1", "DEVICE_ID": "1"}, "0", "gloo"),
    "no launcher": ({}, "8", "emu"),
}
SELECTION_JOB = """
import json, os, sys
from hccl_py import runtime
chosen = {}
for name, (env, npus, _) in json.loads(sys.argv[1]).items():
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MS_ROLE", "RANK_ID", "DEVICE_ID"):
        os.environ.pop(key, None)
    os.environ.update(env, HCCL_PY_STANDIN_NPUS=npus)
    chosen[name] = runtime.default_backend()
print(json.dumps(chosen))
"""

#: The stand-in behaves as a device would where hccl_py relies on it.
DEVICE_JOB = """
import tempfile
import torch, torch.distributed as dist
import torch_npu
from hccl_py.core.gm import Allocation, shift_between

assert torch_npu.STANDIN
a = torch.zeros(4, dtype=torch.int32, device="npu:1")
assert a.device == torch.device("npu", 1) and torch.ones(2, device="npu").device.index == 0
a[1:].fill_(5)  # views alias their base
assert a.cpu().tolist() == [0, 5, 5, 5], a
assert a[1:].data_ptr() == a.data_ptr() + 4
assert shift_between(Allocation(a, 0), Allocation(a[1:], 0)) == -4  # hccl_py sees the shared bytes
for mixed in (lambda: a + torch.ones(4, dtype=torch.int32), lambda: a + torch.zeros(4, device="npu:0")):
    try:
        mixed()
        raise AssertionError("an operation mixing devices ran")
    except RuntimeError as exc:
        assert "same device" in str(exc), exc
dist.init_process_group("hccl", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1)
group = dist.distributed_c10d._get_default_group()
try:
    dist.all_reduce(torch.ones(2))
    raise AssertionError("the hccl group took a CPU tensor")
except RuntimeError as exc:
    assert "NPU" in str(exc), exc
x = torch.full((3,), 2, dtype=torch.int16, device="npu:0")
dist.all_reduce(x, dist.ReduceOp.MAX)
assert x.cpu().tolist() == [2, 2, 2]
hcom = group._get_backend(torch.device("npu")).get_hccl_comm_name(0)
x1, x2 = torch.ones(4, 256, dtype=torch.float16, device="npu:0"), torch.ones(256, 8, device="npu:0")
try:
    torch_npu.npu_all_gather_base_mm(x1, x2.half(), hcom + "?", 2)
    raise AssertionError("an unknown hcom was accepted")
except RuntimeError as exc:
    assert "unknown hcom" in str(exc), exc
dist.destroy_process_group()
print("STANDIN OK")
"""

#: Counts, per framework collective, the process-group calls that hccl_py's rounds make
#: (the calls that rounds.py reaches through its ``dist`` module and its two aliases).
PG_CALLS_JOB = """
import json
import torch
import hccl_py as hp
from pg_counter import count_calls


def collectives(dev, n):
    x = torch.arange(1024 * n, dtype=torch.float32).to(dev)
    yield "all_gather_into_tensor", lambda: hp.all_gather_into_tensor(
        torch.zeros(1024 * n * n, device=dev), x)
    yield "all_gather_into_tensor-again", lambda: hp.all_gather_into_tensor(
        torch.zeros(1024 * n * n, device=dev), x)
    yield "all_reduce", lambda: hp.all_reduce(x.clone())
    yield "all_reduce-int32", lambda: hp.all_reduce(x.to(torch.int32))
    yield "reduce_scatter_tensor", lambda: hp.reduce_scatter_tensor(
        torch.zeros(1024, device=dev), x)
    yield "alltoall_single", lambda: hp.alltoall_single(torch.zeros_like(x), x)


def main():
    calls = count_calls()
    out = {}
    for name, call in collectives(hp.device(), hp.get_world_size()):
        calls.clear()
        call()
        out[name] = list(calls)
    return out


if __name__ == "__main__":
    print("PG CALLS " + json.dumps(hp.run(main)))
"""


def npu_env(**extra: str) -> dict[str, str]:
    """``extra`` plus, without a real torch_npu, the stand-in first on ``PYTHONPATH``."""
    if USES_STANDIN:
        path = [str(STANDIN_DIR), os.environ.get("PYTHONPATH", "")]
        extra = {"PYTHONPATH": os.pathsep.join(p for p in path if p), **extra}
    return extra


def msrun_style(script: str, n: int = 2) -> subprocess.CompletedProcess:
    """``script`` on an msrun-style world: a scheduler and ``n`` workers on device ``rank``.

    The result has the highest exit status, worker 0's output as stdout and
    the others' as stderr.
    """
    common = dict(MS_WORKER_NUM=str(n), MS_SCHED_HOST="127.0.0.1", MS_SCHED_PORT=str(free_port()))
    roles = [dict(MS_ROLE="MS_SCHED", RANK_ID="0")] + [
        dict(MS_ROLE="MS_WORKER", MS_NODE_ID=str(r), RANK_ID=str(r), DEVICE_ID=str(r))
        for r in range(n)
    ]
    procs = [start([sys.executable, script], **npu_env(**common, **role)) for role in roles]
    try:
        outputs = [p.communicate(timeout=JOB_TIMEOUT)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    status = max(abs(p.returncode) for p in procs)
    return subprocess.CompletedProcess(
        script, status, outputs[1], outputs[0] + "".join(outputs[2:])
    )


def _jobs(tmp: Path) -> dict[str, Callable[[], subprocess.CompletedProcess]]:
    bind_job = tmp / "bind.py"
    bind_job.write_text(BIND_JOB)
    runner = [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "hccl"]
    pg_calls_job = tmp / "pg_calls.py"
    pg_calls_job.write_text(PG_CALLS_JOB)
    shutil.copy(COUNTER, tmp / COUNTER.name)  # the job imports it from its own folder
    gloo_runner = [*runner[:-1], "gloo"]
    python = [sys.executable, "-c"]
    on_runner = {"pg-calls-hccl": str(pg_calls_job), "smoke-runner": SMOKE}
    on_torchrun = {"smoke-torchrun": SMOKE, "all_gather_matmul-torchrun": AG_MATMUL}
    jobs = {
        "runner-hccl": lambda: run_batch(tuple(runner[1:]), on_runner, **npu_env()),
        "torchrun-hccl": lambda: run_batch(NPU_TORCHRUN, on_torchrun, **npu_env()),
        "matmul_reduce_scatter-msrun": lambda: msrun_style("samples/matmul_reduce_scatter.py"),
        "pg-calls-gloo": lambda: launch([*gloo_runner, pg_calls_job], HCCL_PY_REDUCE="native"),
    }
    if USES_STANDIN:
        jobs["bind"] = lambda: torchrun(bind_job, **npu_env(HCCL_PY_STANDIN_NPUS="1"))
        cases = json.dumps(SELECTION_CASES)
        jobs["selection"] = lambda: launch([*python, SELECTION_JOB, cases], **npu_env())
        jobs["device"] = lambda: launch([*python, DEVICE_JOB], **npu_env())
    return jobs


class _BatchRun:
    """One run of a batch job, read like a job of its own: ``result()`` is its result."""

    def __init__(self, batch: concurrent.futures.Future, run_id: str) -> None:
        self.batch, self.run_id = batch, run_id

    def result(self) -> subprocess.CompletedProcess:
        return self.batch.result()[self.run_id]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start every job that a selected test reads at once; tests wait for the one they check
    (a run of a batch: for its part of the batch's output)."""
    jobs = _jobs(tmp_path_factory.mktemp("npu"))
    chosen = selected_jobs(request, [*jobs, *BATCHED])
    started = [job for job in jobs if job in chosen or job in {BATCHED.get(c) for c in chosen}]
    # a few at a time: all at once (up to 27 processes) starved ranks on 2 cores
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {job: pool.submit(jobs[job]) for job in started}
        yield {
            name: _BatchRun(futures[BATCHED[name]], name) if name in BATCHED else futures[name]
            for name in chosen
        }


def _output(proc: subprocess.CompletedProcess) -> str:
    return f"exit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


@pytest.mark.parametrize("run_id", ["smoke-runner", pytest.param("smoke-torchrun", marks=SLOW)])
def test_npu_smoke_passes_on_backend_hccl(runs, run_id: str) -> None:
    """samples/npu_smoke.py: every case of its table passes (or is skipped as on Atlas A2)."""
    proc = runs[run_id].result()
    out = _output(proc)
    assert proc.returncode == 0, out
    table = [re.sub(r"^\[rank \d+\] ", "", line) for line in proc.stdout.splitlines()]
    assert "all cases passed on 2 ranks (A2)" in table, out
    rows = [line.split() for line in table if re.match(r"^\S+ +(PASS|FAIL|SKIP) +\S+ *$", line)]
    verdicts = {name: words for name, *words in rows}
    assert len(verdicts) >= 20 and not any("FAIL" in words for words in verdicts.values()), out
    for case in ("AllReduce-INT16-SUM", "AllReduce-BFP16-MAX", "ReduceScatter-tiled"):
        assert verdicts.get(case) == ["PASS", "PASS"], out
    assert_no_warning(proc)


@SLOW
@pytest.mark.parametrize(
    "run_id, expected",
    [
        (
            "all_gather_matmul-torchrun",
            {"gather_out": "PASS", "output": "PASS", "npu_gather": "PASS", "npu_output": "PASS"},
        ),
        ("matmul_reduce_scatter-msrun", {"output": "PASS", "npu_output": "PASS"}),
    ],
)
def test_mc2_samples_check_torch_npu(runs, run_id: str, expected: dict[str, str]) -> None:
    """Launched without a backend, the ranks choose hccl (their device is an NPU), so the
    samples compare their result with torch_npu's fused operator instead of skipping it."""
    check_run(runs[run_id].result(), 2, expected)


@SLOW
@standin_only
@pytest.mark.jobs("bind")
def test_local_rank_without_an_npu_is_named(runs) -> None:
    proc = runs["bind"].result()
    out = _output(proc)
    assert proc.returncode != 0, out
    assert "local rank 1 has no NPU: this host shows 1 NPU(s)" in proc.stderr, out
    assert "check LOCAL_RANK / DEVICE_ID" in proc.stderr, out
    assert "local rank 0 has no NPU" not in proc.stderr, out


@standin_only
@pytest.mark.jobs("selection")
@pytest.mark.parametrize("case", sorted(SELECTION_CASES))
def test_launchers_choose_hccl_where_torch_npu_sees_npus(runs, case: str) -> None:
    proc = runs["selection"].result()
    assert proc.returncode == 0, _output(proc)
    assert json.loads(proc.stdout.splitlines()[-1])[case] == SELECTION_CASES[case][2]


@standin_only
@pytest.mark.jobs("device")
def test_standin_behaves_like_a_device(runs) -> None:
    """Views alias, mixed devices raise, the hccl group refuses CPU tensors, hcom names a group."""
    proc = runs["device"].result()
    assert proc.returncode == 0 and "STANDIN OK" in proc.stdout, _output(proc)


def test_a_real_torch_npu_further_down_the_path_wins(tmp_path: Path) -> None:
    """Even with the stand-in first on the path, ``import torch_npu`` loads a real one."""
    real = tmp_path / "torch_npu"
    real.mkdir()
    (real / "__init__.py").write_text("REAL = True\n")
    path = os.pathsep.join([str(STANDIN_DIR), str(tmp_path)])
    check = "import torch_npu; print(torch_npu.REAL, hasattr(torch_npu, 'STANDIN'))"
    proc = launch([sys.executable, "-c", check], PYTHONPATH=path)
    assert proc.stdout.split() == ["True", "False"], _output(proc)


def _pg_calls(proc: subprocess.CompletedProcess) -> dict[str, list[str]]:
    """Rank 0's process-group calls per collective, from a PG_CALLS_JOB run."""
    assert proc.returncode == 0, _output(proc)
    lines = [RUNNER_PREFIX.sub("", line) for line in proc.stdout.splitlines()]
    found = [line for line in lines if line.startswith("PG CALLS ")]
    assert found, _output(proc)
    return json.loads(found[0].removeprefix("PG CALLS "))[0]


@pytest.mark.jobs("pg-calls-hccl", "pg-calls-gloo")
def test_hccl_issues_the_process_group_calls_of_gloo(runs) -> None:
    """The HCCL path runs the code of the gloo path with HCCL's defaults (native reductions,
    no task check): per collective the same process-group calls, so gloo's ratios to plain
    torch.distributed transfer to HCCL. Each framework collective is one exchange of its
    arguments (one small all-gather) and the op's own call; an all_gather_into_tensor called
    again rides in its exchange (hccl_py/framework/_carry.py), one call in all."""
    hccl = _pg_calls(runs["pg-calls-hccl"].result())
    assert hccl == _pg_calls(runs["pg-calls-gloo"].result())
    own = {
        "all_gather_into_tensor": "all_gather_single",
        "all_reduce": "all_reduce",
        "all_reduce-int32": "all_reduce",
        "reduce_scatter_tensor": "reduce_scatter_single",
        "alltoall_single": "all_to_all_single",
    }
    want = {name: ["all_gather_single", call] for name, call in own.items()}
    assert hccl == want | {"all_gather_into_tensor-again": ["all_gather_single"]}
