"""Several runs of scripts in one process or one launch (``tests/sample_batch.py``), split by run.

One batch pays for starting Python and importing torch once (per rank under a
launcher) instead of once per script; :func:`run_batch` gives each run back as
if it had had a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys

import sample_batch
from launch_helpers import RUNNER_PREFIX, launch

#: Seconds one batch may take (a sample inside times out after 120 s).
RUN_TIMEOUT = 600


def run_batch(
    args: tuple[str, ...], runs: dict[str, str], **extra: str
) -> dict[str, subprocess.CompletedProcess]:
    """Run ``runs`` (run id -> script) in one batch (tests/sample_batch.py), split by sample.

    Each run's result reads like its own process: the lines its sample printed,
    its exit code (the highest any rank reported; 1 if none did), and the
    batch's unprefixed output (launcher messages) as its stderr. When the batch
    itself fails (a rank died or was stopped, a launcher error), a sample that
    every process of the batch had finished keeps its own exit code; the others
    (the one the batch failed in, those it never reached) get the batch's, so
    that one failure reads as one, not as every run of the batch; a batch that
    failed after its last sample fails every run. ``extra``: variables added to the
    batch's environment (:func:`launch_helpers.launch_env`).
    """
    run_ids, paths = list(runs), list(runs.values())
    command = [sys.executable, *args, "tests/sample_batch.py", *paths]
    try:
        proc = launch(command, timeout=RUN_TIMEOUT, **extra)
    except subprocess.TimeoutExpired as exc:  # killed: its output so far says where it stopped
        out, err = (text_of(part) for part in (exc.stdout, exc.stderr))
        proc = subprocess.CompletedProcess(command, -9, out, err)
        proc.timed_out = True
    names = {os.path.basename(p) for p in paths}
    lines: dict[str, list[str]] = {name: [] for name in names}
    codes: dict[str, int] = {}
    ends: dict[str, int] = {}  # how many of the batch's processes printed the sample's exit
    rest = []
    for line in (proc.stdout + proc.stderr).splitlines():
        name, sep, text = RUNNER_PREFIX.sub("", line).partition(sample_batch.SEPARATOR)
        if not sep or name not in names:
            rest.append(line)
        elif text.startswith("exit ") and text[5:].isdigit():
            codes[name] = max(codes.get(name, 0), int(text[5:]))
            ends[name] = ends.get(name, 0) + 1
        else:
            lines[name].append(text)
    every = processes(args)
    finished = {name for name in names if ends.get(name, 0) == every}
    if proc.returncode != 0 and finished == names:  # it failed after its last sample
        finished = set()
    results = {}
    for run_id, path in zip(run_ids, paths, strict=True):
        name = os.path.basename(path)
        if proc.returncode == 0:
            code, why = codes.get(name, 1), []
        elif name in finished:
            code, why = codes[name], []
        else:
            code = proc.returncode
            why = [
                f"(the batch was killed after {RUN_TIMEOUT} s)"
                if getattr(proc, "timed_out", False)
                else f"(the batch exited with code {code} before every process finished {name})"
            ]
        results[run_id] = subprocess.CompletedProcess(
            command, code, "\n".join(lines[name]), "\n".join([*rest, *why])
        )
    return results


def text_of(output: bytes | str | None) -> str:
    """Output a TimeoutExpired kept (bytes even under ``text=True``) as text."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def processes(args: tuple[str, ...]) -> int:
    """How many processes of a batch started with ``args`` run each of its samples: one per
    rank under a launcher of rank processes (``hccl_py run --backend gloo``, torchrun), else one."""
    if "torch.distributed.run" in args:
        return int(args[args.index("--nproc-per-node") + 1])
    if "--backend" in args and args[args.index("--backend") + 1] != "emu":
        return int(args[args.index("-n") + 1])
    return 1
