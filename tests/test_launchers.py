"""Launching one process per rank: hccl_py's runner, torchrun and MindSpore's msrun.

Each launch is a subprocess with a time limit. A small job script (written to
a temporary directory) all-gathers twice in two ``hp.run`` calls, the second
on a group from ``hp.new_group``, and can make rank 1 fail. The real msrun
comes from the PyPI package ``mindspore``, installed once into a virtual
environment outside the repository (see :func:`msrun`).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from launch_helpers import (
    FOREIGN_ENV,
    JOB_TIMEOUT,
    ROOT,
    SLOW,
    free_port,
    launch,
    start,
    torchrun,
)

import hccl_py as hp
from hccl_py import runtime
from hccl_py.__main__ import main as cli
from hccl_py.launcher import sealed
from hccl_py.launcher import store as kv
from hccl_py.launcher.spec import STORE_HOSTED_ENV, LaunchError, RankSpec, spec_from_env

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

SAMPLE = ROOT / "samples" / "all_gather_custom.py"
#: Where the msrun virtual environment lives (override: HCCL_PY_MSRUN_VENV; or HCCL_PY_MSRUN=<msrun>).
MSRUN_VENV = Path(
    os.environ.get("HCCL_PY_MSRUN_VENV", Path.home() / ".cache" / "hccl_py" / "msrun-venv")
)
MSRUN_INSTALL_TIMEOUT = 900

JOB = """
import os, signal, sys, time
import torch
import hccl_py as hp
from hccl_py import Hccl, HcclCMDType, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling
from hccl_py import TilingData, offsetof


class Tiling(TilingData):
    _fields_ = [("init", Mc2InitTiling), ("ag", Mc2CcTiling)]


def kernel(xGM, yGM, tilingGM):
    hccl = Hccl()
    hccl.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM))
    hccl.SetCcTilingV2(offsetof(Tiling, "ag"))
    handle = hccl.AllGather[True](xGM, yGM, 2, hp.HCCL_DATA_TYPE_FP32, 0)
    hccl.Wait(handle)
    hccl.Finalize()


def gather(group):
    tiling = Tiling()
    cfg = Mc2CcTilingConfig(group.name, HcclCMDType.HCCL_CMD_ALLGATHER, "")
    cfg.GetTiling(tiling.init)
    cfg.GetTiling(tiling.ag)
    x = torch.full((2,), float(hp.get_rank()))
    y = torch.zeros(2 * group.size)
    hp.launch(kernel, x, y, tiling, groups={0: group})
    return [int(v) for v in y[::2].tolist()]


def main(mode):
    print(f"fn runs as rank {hp.get_rank()} of {hp.get_world_size()}", flush=True)
    if mode == "hold":  # rank 0 waits in a gather for the others, which sleep
        print(f"READY {os.environ['MASTER_PORT']}", flush=True)
        if hp.get_rank() != 0:
            time.sleep(60)
    first = gather(hp.world_group())
    if hp.get_rank() == 1 and mode == "raise":
        raise ValueError("rank 1 gives up")
    if hp.get_rank() == 1 and mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    return first, gather(hp.world_group())


def reversed_group():
    group = hp.new_group(list(reversed(range(hp.get_world_size()))))
    return gather(group)


if __name__ == "__main__":
    results = hp.run(main, args=(sys.argv[1],))
    again = hp.run(reversed_group)
    print(f"RESULT {results} {again}", flush=True)
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("job") / "job.py"
    path.write_text(JOB)
    return path


def expected_result(n: int) -> str:
    """The RESULT line of a successful job on ``n`` ranks."""
    ranks = list(range(n))
    return f"RESULT {[(ranks, ranks)] * n} {[ranks[::-1]] * n}"


# ------------------------------------------------------------------ environment parsing
def test_msrun_worker_and_scheduler_variables() -> None:
    common = {"MS_WORKER_NUM": "4", "MS_SCHED_HOST": "10.0.0.1", "MS_SCHED_PORT": "8118"}
    worker = spec_from_env(
        {**common, "MS_ROLE": "MS_WORKER", "MS_NODE_ID": "3", "RANK_ID": "3", "DEVICE_ID": "1"}
    )
    assert worker == RankSpec("msrun", "worker", 3, 4, 1, "10.0.0.1", 8118, False)
    # several hosts without --node_rank: no MS_NODE_ID; msrun leaks the scheduler's RANK_ID=0
    dynamic = spec_from_env({**common, "MS_ROLE": "MS_WORKER", "RANK_ID": "0", "DEVICE_ID": "0"})
    assert dynamic.rank is None and not dynamic.host_store
    scheduler = spec_from_env({**common, "MS_ROLE": "MS_SCHED", "RANK_ID": "0"})
    assert (scheduler.role, scheduler.host_store, scheduler.port) == ("scheduler", True, 8118)


def test_torchrun_and_plain_variables() -> None:
    torchrun = {
        "RANK": "2",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "node0",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "x",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }
    assert spec_from_env(torchrun) == RankSpec("torchrun", "worker", 2, 4, 0, "node0", 29500, False)
    plain = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    assert spec_from_env(plain).host_store, "without an agent store rank 0 hosts it"
    hosted = {**plain, STORE_HOSTED_ENV: "1"}
    assert spec_from_env(hosted) == RankSpec("hccl_py", "worker", 0, 2, 0, "h", 1, False)


@pytest.mark.parametrize(
    "env, missing",
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_PORT"),
        ({"RANK": "0", "MASTER_PORT": "1"}, "WORLD_SIZE or RANK_SIZE"),
        ({"MS_ROLE": "MS_WORKER", "MS_WORKER_NUM": "2"}, "MS_SCHED_PORT"),
    ],
)
def test_missing_variables_are_named(env: dict[str, str], missing: str) -> None:
    with pytest.raises(LaunchError, match=missing):
        spec_from_env(env)


@pytest.mark.parametrize("port", ["0", "65536", "-1"])
def test_a_port_no_rank_can_meet_at_is_refused(port: str) -> None:
    """torchrun --master-port 0 chooses a port for its own store but tells its workers 0:
    before 2026-11-30 they waited to connect to port 0, silently, past the run's timeout."""
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": port, "TORCHELASTIC_RUN_ID": "x"}
    with pytest.raises(LaunchError) as info:
        spec_from_env(env)
    assert str(info.value).startswith(
        f"torchrun: MASTER_PORT={port} is no port the ranks can meet at (their store needs a port "
        "from 1 to 65535"
    )


@pytest.mark.parametrize(
    "env, said",
    [
        ({"RANK": "3", "WORLD_SIZE": "2"}, "env: rank 3 is outside 0..1 of a world of 2"),
        ({"RANK": "-1", "WORLD_SIZE": "1"}, "env: rank -1 is outside 0..0 of a world of 1"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "env: the world size must be at least 1, not 0"),
        (
            {"MS_ROLE": "MS_WORKER", "MS_SCHED_PORT": "1", "MS_WORKER_NUM": "2", "MS_NODE_ID": "a"},
            "environment variable MS_NODE_ID='a' is not an integer",
        ),
    ],
)
def test_a_rank_outside_its_world_is_refused(env: dict[str, str], said: str) -> None:
    """Before 2026-11-30 such a rank waited for peers that never come, past every timeout (or
    got torch's bare AssertionError, or int()'s ValueError)."""
    with pytest.raises(LaunchError) as info:
        spec_from_env({"MASTER_PORT": "1", **env})
    assert str(info.value).startswith(said), info.value


# ------------------------------------------------------------------ hccl_py's runner
def _runner(job: Path, mode: str, n: int = 3) -> subprocess.CompletedProcess:
    return launch(
        [sys.executable, "-m", "hccl_py", "run", "-n", str(n), "--backend", "gloo", str(job), mode]
    )


def test_runner_prefixes_output_and_reuses_the_world(job: Path) -> None:
    """Two hp.run calls per process (the second on a reversed new_group); output per rank."""
    out = _runner(job, "ok")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for rank in range(3):
        assert f"[rank {rank}] fn runs as rank {rank} of 3" in lines
        assert f"[rank {rank}] {expected_result(3)}" in lines


@pytest.mark.parametrize(
    "mode, why", [("raise", "ValueError: rank 1 gives up"), ("kill", "was killed by SIGKILL")]
)
def test_runner_stops_every_rank_when_one_fails(job: Path, mode: str, why: str) -> None:
    out = _runner(job, mode)
    assert out.returncode != 0
    assert "first failure: rank 1: " in out.stderr and why in out.stderr, out.stderr
    assert "RESULT" not in out.stdout
    # the others stopped because of rank 1, not on a timeout: told by the runner, or (a killed
    # rank) seeing its process gone first, whichever the OS's timing gives
    because = "stopped because rank 1 failed"
    if mode == "kill":
        because = rf"({because}|rank 1 exited \(killed or crashed\))"
    for rank in (0, 2):
        assert re.search(rf"\[rank {rank}\].*{because}", out.stderr), out.stderr


def test_runner_on_two_hosts(
    job: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """--nnodes 2: node 0's runner hosts the store, node 1's joins it (here both on loopback).

    Every host needs the same HCCL_PY_SECRET: without one the runner refuses to start (asked
    in this process: it refuses before it starts anything), and a runner with another secret
    is refused by node 0's store (it belongs to another run).
    """
    port = str(free_port())
    base = [sys.executable, "-m", "hccl_py", "run", "-n", "1", "--backend", "gloo", "--nnodes", "2"]
    tail = ["--master-port", port, str(job), "ok"]
    for name in [n for n in os.environ if n.startswith(FOREIGN_ENV)]:  # as launch() leaves it
        monkeypatch.delenv(name)
    monkeypatch.setenv(runtime.BACKEND_ENV, "gloo")  # main sets it from --backend: undone after
    assert cli([*base[3:], "--node-rank", "1", *tail]) == 2
    unkeyed = capsys.readouterr().err
    assert "needs HCCL_PY_SECRET" in unkeyed, unkeyed
    monkeypatch.undo()
    node0 = start([*base, "--node-rank", "0", *tail], HCCL_PY_SECRET="two-hosts")
    try:
        stranger = launch([*base, "--node-rank", "1", *tail], HCCL_PY_SECRET="another run")
        assert stranger.returncode == 2, stranger.stderr
        assert f"the store at 127.0.0.1:{port} belongs to another run" in stranger.stderr
        node1 = launch([*base, "--node-rank", "1", *tail], HCCL_PY_SECRET="two-hosts")
        out0 = node0.communicate(timeout=JOB_TIMEOUT)[0]
    finally:
        node0.kill()
    assert (node0.returncode, node1.returncode) == (0, 0), out0 + node1.stderr
    assert f"[rank 0] {expected_result(2)}" in out0.splitlines()
    assert f"[rank 1] {expected_result(2)}" in node1.stdout.splitlines()


# ------------------------------------------------------------------ torchrun
# A sample under torchrun: tests/test_samples.py (all_gather_custom-torchrun and others, one
# torchrun launch for all of them).


@SLOW
def test_torchrun_names_the_failed_rank(job: Path) -> None:
    out = torchrun(job, "raise")
    assert out.returncode != 0
    summary = out.stderr.split("Root Cause", 1)[-1]
    assert "rank 1: ValueError: rank 1 gives up" in summary, out.stderr


# ------------------------------------------------------------------ msrun
def _install_msrun(venv: Path) -> None:
    """Create ``venv`` and pip-install mindspore into it (marked complete only when it worked)."""
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--no-compile", "mindspore"]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=MSRUN_INSTALL_TIMEOUT)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        pytest.skip(f"pip install mindspore (for msrun) failed here: {' | '.join(tail)}")
    # Bytecode for what msrun imports only (about a third of pip's compile of every module).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    warm = [python, "-c", "import mindspore.parallel.cluster.run"]
    subprocess.run(warm, check=True, capture_output=True, env=env, timeout=MSRUN_INSTALL_TIMEOUT)
    (venv / ".complete").touch()


@pytest.fixture(scope="session")
def msrun() -> Path:
    """MindSpore's msrun: ``$HCCL_PY_MSRUN``, or a cached venv, installed from PyPI when absent."""
    if os.environ.get("HCCL_PY_MSRUN"):
        return Path(os.environ["HCCL_PY_MSRUN"])
    MSRUN_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(MSRUN_VENV.parent / "msrun-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time across test sessions
        if not (MSRUN_VENV / ".complete").exists():
            try:
                _install_msrun(MSRUN_VENV)
            except (subprocess.SubprocessError, OSError) as exc:
                pytest.skip(f"could not install mindspore (for msrun): {exc}")
    return MSRUN_VENV / "bin" / "msrun"


def _msrun(msrun: Path, tmp_path: Path, script: Path, *args: str, n: int = 2) -> tuple:
    logs = tmp_path / "logs"
    command = [
        str(msrun),
        f"--worker_num={n}",
        f"--local_worker_num={n}",
        f"--master_port={free_port()}",
        "--join=True",
        f"--log_dir={logs}",
        str(script),
        *args,
    ]
    out = launch(command, HCCL_PY_BACKEND="gloo")
    read = lambda name: (logs / name).read_text() if (logs / name).exists() else ""  # noqa: E731
    return out, read("scheduler.log"), [read(f"worker_{r}.log") for r in range(n)]


@SLOW
def test_sample_under_msrun(msrun: Path, tmp_path: Path) -> None:
    out, scheduler, workers = _msrun(msrun, tmp_path, SAMPLE)
    assert out.returncode == 0, out.stdout + out.stderr + scheduler
    assert "msrun scheduler hosts the rendezvous store" in scheduler
    assert "PASS" not in scheduler, "the scheduler process must not run the function"
    for rank in range(2):
        for case in ("non-tiled", "multi-round"):
            assert re.search(
                rf"^rank {rank}: {case} +PASS received blocks from ranks \[0, 1\]$",
                workers[0],
                re.M,
            )


@SLOW
def test_msrun_names_the_killed_rank(msrun: Path, tmp_path: Path, job: Path) -> None:
    started = time.monotonic()
    out, scheduler, workers = _msrun(msrun, tmp_path, job, "kill")
    assert out.returncode != 0
    assert "rank(s) [1] ended without finishing" in scheduler, scheduler
    assert "rank(s) [1] ended without finishing" in out.stdout + out.stderr, (
        "msrun shows the scheduler's errors"
    )
    assert "fn runs as rank" not in scheduler
    assert time.monotonic() - started < JOB_TIMEOUT


# ------------------------------------------------------------------ msrun without node ranks
@SLOW
def test_msrun_style_hosts_without_node_rank_get_ranks_from_the_store(job: Path) -> None:
    """Two "hosts" with one worker each and no MS_NODE_ID: ranks come from the scheduler's store."""
    port = str(free_port())
    common = dict(
        MS_WORKER_NUM="2",
        MS_SCHED_HOST="127.0.0.1",
        MS_SCHED_PORT=port,
        RANK_ID="0",
        HCCL_PY_BACKEND="gloo",
    )
    procs = [
        start([sys.executable, str(job), "ok"], **common, MS_ROLE=role, DEVICE_ID="0")
        for role in ("MS_SCHED", "MS_WORKER", "MS_WORKER")
    ]
    try:
        outputs = [p.communicate(timeout=JOB_TIMEOUT)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert "fn runs" not in outputs[0] and "RESULT" not in outputs[0]
    ranks = sorted(int(re.search(r"fn runs as rank (\d) of 2", o)[1]) for o in outputs[1:])
    assert ranks == [0, 1]
    for output in outputs[1:]:
        assert expected_result(2) in output


# ------------------------------------------------------------------ torch_npu availability
def test_hccl_backend_explains_a_missing_torch_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch_npu" else real(name, *a),
    )
    with pytest.raises(RuntimeError, match="needs torch_npu, which is not installed"):
        hp.run(lambda: 0, world_size=1, backend="hccl")


def test_broken_torch_npu_is_explained_and_launchers_fall_back_to_gloo(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """torch_npu installed without CANN: its import fails; say how to fix it, and use gloo."""
    package = tmp_path / "torch_npu"
    package.mkdir()
    (package / "__init__.py").write_text(
        'raise ImportError("libhccl.so: cannot open shared object file")'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="installed but cannot be imported") as info:
        hp.run(lambda: 0, world_size=1, backend="hccl")
    assert "libhccl.so" in str(info.value) and "set_env.sh" in str(info.value)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv(runtime.BACKEND_ENV, raising=False)
    with pytest.warns(UserWarning, match="falling back to backend 'gloo'"):
        assert runtime.default_backend() == "gloo"


# ------------------------------------------------------------------ store security (issue 23)
class _Pwn:
    """Unpickling this creates ``path``: proof that a process loaded the forged value."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def _wait_for_line(proc: subprocess.Popen, pattern: str) -> tuple[re.Match, list[str]]:
    """Read ``proc``'s output until a line matches ``pattern``; the match and the lines read.

    ``proc`` is killed if that takes longer than :data:`JOB_TIMEOUT` (the loop then ends).
    """
    seen = []
    guard = threading.Timer(JOB_TIMEOUT, proc.kill)
    guard.start()
    try:
        for line in proc.stdout:
            seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found, seen
    finally:
        guard.cancel()
    raise AssertionError(f"the job ended before printing {pattern!r}:\n{''.join(seen)}")


def _listen_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp shows them) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in Path(table).read_text().splitlines()[1:]:
                address, state = line.split()[1], line.split()[3]
                if state == "0A" and int(address.rsplit(":", 1)[1], 16) == port:
                    found.add(address.rsplit(":", 1)[0])
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads /proc/net/tcp")
@pytest.mark.parametrize(
    "scope, key",
    [("", kv.ABORT), ("run0/", "final/hccl_world_group/1")],
    ids=["abort", "finalize count"],
)
def test_forged_pickles_in_the_store_are_refused(
    job: Path, tmp_path: Path, scope: str, key: str
) -> None:
    """A process that reaches the runner's store writes a crafted pickle where ranks read.

    The store listens on loopback only; no rank and no runner loads the pickle
    (it would create a file), and the run fails naming the key and the value.
    """
    marker = tmp_path / "pwned"
    forged = pickle.dumps(_Pwn(marker))
    runner = start(
        [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "gloo"]
        + [str(job), "hold"]
    )
    try:
        port = int(_wait_for_line(runner, r"\[rank 0\] READY (\d+)")[0][1])
        assert _listen_addresses(port) == {"0100007F"}, "the store listens on 127.0.0.1 only"
        client = kv.scoped(kv.connect("127.0.0.1", port, is_master=False, timeout=30.0), kv.PREFIX)
        (kv.scoped(client, scope) if scope else client).set(key, forged)
        out = runner.communicate(timeout=JOB_TIMEOUT)[0]
    finally:
        runner.kill()
    assert not marker.exists(), "a process unpickled the forged value"
    assert runner.returncode != 0
    summary = [line for line in out.splitlines() if line.startswith("hccl_py: ")]
    refusal = f"refused the value of store key {key!r}"
    assert any(
        "first failure: rank" in line
        and "ForgedValueError: " in line
        and refusal in line
        and repr(forged[:80]) in line
        for line in summary
    ), out


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "inf"])
def test_a_bad_store_answer_wait_is_named(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kv.ANSWER_ENV, raw)
    with pytest.raises(ValueError, match=f"{kv.ANSWER_ENV} must be a positive number .*{raw!r}"):
        kv.answer_s()


def test_runner_names_what_holds_its_port(job: Path) -> None:
    """--master-port in use: a clear error naming the port and its holder, no traceback."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = launch(
            [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "gloo"]
            + ["--master-port", str(port), str(job), "ok"]
        )
    assert out.returncode == 2, out.stderr
    assert f"cannot host the rendezvous store on 127.0.0.1:{port}: Address already in use" in (
        out.stderr
    )
    assert f"port {port} is held by pid {os.getpid()}" in out.stderr
    assert "Traceback" not in out.stderr


def plain_ranks(job: Path, mode: str, *envs: dict[str, str]) -> tuple[list[int], list[str]]:
    """``job`` in ``mode`` as one process per ``envs`` (RANK, MASTER_* ...), started together:
    each process's exit code and output (every process is killed when this returns)."""
    ranks = [start([sys.executable, str(job), mode], **env) for env in envs]
    try:
        outputs = [p.communicate(timeout=JOB_TIMEOUT)[0] for p in ranks]
    finally:
        for p in ranks:
            p.kill()
    return [p.returncode for p in ranks], outputs


@pytest.mark.parametrize("holder", ["another run's store", "a silent listener"])
def test_plain_ranks_never_join_what_holds_master_port(
    job: Path, holder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks started from RANK/MASTER_* while MASTER_PORT is taken: every rank fails, clearly.

    Rank 0 cannot host the store and says who holds the port; rank 1 refuses
    another run's store (signed with another secret) or a listener that is no store.
    """
    if holder == "a silent listener":
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port, keep = sock.getsockname()[1], sock
        refusal = "the rendezvous store at {} does not answer: something accepts connections"
    else:
        monkeypatch.setenv(sealed.SECRET_ENV, "another run's secret")
        keep, port = kv.host_store("127.0.0.1", 0, timeout=60.0)
        kv.mark_run(kv.scoped(keep, kv.PREFIX), 2)
        refusal = "the store at {} belongs to another run"
    common = dict(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    common[kv.ANSWER_ENV] = "0.5"  # the listener never answers: no need to wait 2 x 5 s
    codes, outputs = plain_ranks(job, "ok", *(dict(RANK=str(r), **common) for r in (0, 1)))
    del keep
    assert all(code != 0 for code in codes), outputs
    assert f"cannot host the rendezvous store on 127.0.0.1:{port}" in outputs[0], outputs[0]
    assert f"held by pid {os.getpid()}" in outputs[0]
    assert refusal.format(f"127.0.0.1:{port}") in outputs[1], outputs[1]


def test_ranks_whose_settings_differ_say_so_at_the_start(job: Path) -> None:
    """Rank 1 reduces natively, rank 0 exactly: their AllReduces would call different
    collectives (rank 0 hung until its timeout). Rank 1 names the setting at the run's start,
    and rank 0 stops with it."""
    common = dict(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    codes, outputs = plain_ranks(
        job, "ok", dict(RANK="0", **common), dict(RANK="1", HCCL_PY_REDUCE="native", **common)
    )
    assert all(code != 0 for code in codes), outputs
    said = "rank 1's hccl_py settings differ from rank 0's (HCCL_PY_REDUCE: rank 1 native, rank 0 exact)"
    assert all(said in output for output in outputs), outputs
    assert "HcclMismatchError" in outputs[1], outputs[1]


def test_a_plain_rank_whose_peer_failed_mid_call_exits_cleanly(job: Path) -> None:
    """Rank 1 raises while rank 0 waits in a gather: rank 0 reports it and leaves with exit code
    1. Its abandoned call fails once rank 1's process ends; rank 0 lets it fail before it shuts
    down (gloo aborted the process at exit: rc 134, "terminate called")."""
    common = dict(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    codes, outputs = plain_ranks(job, "raise", *(dict(RANK=str(r), **common) for r in (0, 1)))
    assert codes == [1, 1], outputs
    assert "rank 1 gives up" in outputs[0], outputs[0]
    assert "terminate called" not in outputs[0], outputs[0]


@pytest.mark.parametrize(
    ("stored", "error", "said"),
    [
        (b"[1]", hp.HcclUsageError, "rank 1 cannot read rank 0's settings"),
        (b"\xff", hp.HcclUsageError, "rank 1 cannot read rank 0's settings"),
        pytest.param(  # nested deeper than Python recurses: RecursionError, not ValueError
            b"[" * 100_000, hp.HcclUsageError, "rank 1 cannot read rank 0's settings", id="deep"
        ),
        (
            b'{"HCCL_PY_REDUCE": "exact"}',
            hp.HcclMismatchError,
            "differ from rank 0's (HCCL_PY_CHECK_TASKS: rank 1 1, rank 0 None",
        ),
    ],
)
def test_rank_0s_settings_are_compared_as_read(stored: bytes, error: type, said: str) -> None:
    """What rank 1 finds in the store's settings key: not a record is named as unreadable;
    a record that lacks a setting differs from rank 1's in it."""
    from torch.distributed import HashStore

    from hccl_py.backends.dist.settings import KEY, Settings

    store = HashStore()
    store.set(KEY, stored)
    with pytest.raises(error) as info:
        Settings(check_tasks=True, carry=True, exact=True).check_same(
            1, store, store.set, 5.0, lambda: None
        )
    assert said in str(info.value), info.value


def test_sigterm_stops_every_rank_and_says_so(job: Path) -> None:
    runner = start(
        [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "gloo"]
        + [str(job), "hold"]
    )
    try:
        _, seen = _wait_for_line(runner, r"\[rank 1\] READY")
        runner.send_signal(signal.SIGTERM)
        out = "".join(seen) + runner.communicate(timeout=JOB_TIMEOUT)[0]
    finally:
        runner.kill()
    assert runner.returncode == 128 + signal.SIGTERM, out
    assert "hccl_py: received SIGTERM; stopping every rank" in out
    stopped = re.search(r"hccl_py: stopped: (.*)", out)
    assert stopped and all(f"rank {r} (pid " in stopped[1] for r in (0, 1)), out


def test_runner_summary_quotes_a_silent_rank_error(tmp_path: Path) -> None:
    """Every rank fails before joining (its script raises before hp.run): the summary says
    why, not just "code 1"."""
    script = tmp_path / "early.py"
    script.write_text(
        "import os\nraise ValueError(f\"rank {os.environ['RANK']} gives up early\")\n"
    )
    out = launch(
        [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "gloo", str(script)]
    )
    assert out.returncode != 0
    summary = "\n".join(line for line in out.stderr.splitlines() if line.startswith("hccl_py: "))
    assert "first failure: rank" in summary, out.stderr
    assert "gives up early" in summary.split("first failure:")[1]
    assert (
        "exit codes: rank 0 exited with code 1 (its last output: ValueError: rank 0 gives up"
        in (summary)
    )
