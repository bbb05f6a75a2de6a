"""Starting jobs the way users do, for the tests that launch processes.

Every job runs from the repository root, with a clean launcher environment
(none of the variables that would make it think it is already one rank) and a
time limit; :func:`check_run` reads the samples' verdict lines.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from temp_dirs import owned_temp

ROOT = Path(__file__).resolve().parent.parent
#: Seconds any launched job may take (start-up of 3-4 Python processes with torch included).
JOB_TIMEOUT = 300
#: hccl_py's timeout inside launched jobs: only a hang reaches it, and a loaded 2-core machine
#: running several jobs at once may keep a rank's cores from the CPU for tens of seconds.
JOB_HCCL_TIMEOUT = 120
#: Variables that would make a launched script think it is already one rank of a world.
FOREIGN_ENV = ("HCCL_PY_", "MS_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "TORCHELASTIC")
#: A sample's verdict line: ``rank R: <case> PASS|FAIL|SKIP <detail>``.
VERDICT = re.compile(r"^rank (\d+): (\S+) +(PASS|FAIL|SKIP)\b")
#: What hp.run's end-of-run summary of warnings says (hccl_py.kernel.outcome.summarize).
WARNING_SUMMARY = " warning(s) on "
#: ``python -m hccl_py run --backend gloo`` prefixes each line with the rank that printed it.
RUNNER_PREFIX = re.compile(r"^\[rank \d+\] ")


#: The soak and the torchrun / msrun matrix: run by default (CI runs them), ``-m "not slow"``
#: leaves them out for a quick round (README.md says how long each set takes).
SLOW = pytest.mark.slow


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def selected_jobs(request: pytest.FixtureRequest, jobs: Iterable[str]) -> list[str]:
    """The ``jobs`` that the selected tests of the requesting module check.

    A module fixture that starts every job at once starts only these: a job is
    wanted when a selected test that uses the fixture has a parameter value
    naming it, or names it in ``@pytest.mark.jobs(...)``. So ``-k`` and
    ``-m "not slow"`` start no process that no selected test reads.
    """
    wanted: set[str] = set()
    for item in request.session.items:
        if item.module is not request.module or request.fixturename not in item.fixturenames:
            continue
        callspec = getattr(item, "callspec", None)
        wanted.update(str(v) for v in (callspec.params.values() if callspec else ()))
        for mark in item.iter_markers("jobs"):
            wanted.update(mark.args)
    return [job for job in jobs if job in wanted]


@functools.cache
def job_temp() -> str:
    """The TMPDIR of launched jobs, removed when the test session ends.

    torchrun's agent keeps a ``torchelastic_*`` folder per job in TMPDIR; the
    jobs' leftovers go here instead of into the machine's temporary folder.
    """
    path = owned_temp("hccl_py-jobs-")
    atexit.register(shutil.rmtree, path, True)
    return path


def launch_env(**extra: str) -> dict[str, str]:
    """This environment without launcher variables, with a 30 s hccl_py timeout, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_ENV)}
    env["TMPDIR"] = job_temp()
    # msrun starts "python": make it this interpreter
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["HCCL_PY_TIMEOUT"] = str(JOB_HCCL_TIMEOUT)
    env.update(extra)
    return env


def launch(
    command: list[str], timeout: float = JOB_TIMEOUT, **extra: str
) -> subprocess.CompletedProcess:
    """Run ``command`` to completion within ``timeout`` seconds (see :func:`launch_env` for
    ``extra``)."""
    return subprocess.run(
        command,
        cwd=ROOT,
        env=launch_env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start(command: list[str], **extra: str) -> subprocess.Popen:
    """Start ``command`` in the background; its stdout and stderr come together."""
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=launch_env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def torchrun(
    script: Path | str, *args: str, n: int = 2, **extra: str
) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node n script args`` on a free port."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n)]
    return launch([*command, "--master-port", str(free_port()), str(script), *args], **extra)


def check_run(
    proc: subprocess.CompletedProcess,
    ranks: int,
    expected: dict[str, str],
    warnings: tuple[str, ...] = (),
) -> None:
    """Exit code 0 and exactly one line with the expected verdict per (rank, case); no
    HcclWarning, or (``warnings``) warnings of exactly those kinds."""
    out = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, out
    lines = [RUNNER_PREFIX.sub("", line) for line in proc.stdout.splitlines()]
    verdicts = [(int(m[1]), m[2], m[3]) for m in map(VERDICT.match, lines) if m]
    want = [(r, case, v) for r in range(ranks) for case, v in expected.items()]
    assert sorted(verdicts) == sorted(want), out
    if warnings:
        assert warning_kinds(proc) == set(warnings), out
    else:
        assert_no_warning(proc)


def assert_no_warning(proc: subprocess.CompletedProcess) -> None:
    """Our samples are warning-free: no HcclWarning, no end-of-run warning summary."""
    text = proc.stdout + proc.stderr
    assert "HcclWarning" not in text and WARNING_SUMMARY not in text, text


#: The end-of-run summary's kinds: ``hccl_py: 8 warning(s) on 4 rank(s): kind x8, other x2``.
_SUMMARY_KINDS = re.compile(r" warning\(s\) on \d+ rank\(s\): (.*)$")


def warning_kinds(proc: subprocess.CompletedProcess) -> set[str]:
    """The kinds of the HcclWarnings a run printed: each warning's ``[kind]`` and the summary's."""
    kinds = set()
    for line in (proc.stdout + proc.stderr).splitlines():
        if "HcclWarning" in line:
            kinds.update(re.findall(r"\[([a-z0-9-]+)\]$", line.rstrip()))
        if found := _SUMMARY_KINDS.search(line):
            kinds.update(part.rsplit(" x", 1)[0] for part in found[1].split(", "))
    return kinds
