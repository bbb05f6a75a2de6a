"""Command-line mistakes end in one argparse-style line and exit status 2, before anything runs.

``run``, ``layout`` and ``bench`` check their own inputs up front: numbers
against hp.run's limits, the script path, the environment variables that stand
in for options, output files, the emulator's refusal of the options of several
hosts, and a benchmark too big for this host. The script's own errors are not
theirs to check. Most cases call :func:`hccl_py.__main__.main` in this process;
one runs the command line itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hccl_py as hp
from hccl_py.__main__ import build_parser, main
from hccl_py.core.constants import MAX_BLOCK_DIM, MAX_REPEAT, MAX_WORLD_SIZE
from hccl_py.core.errors import UnknownBackendError

#: What the script leaves behind when it ran: none of the mistakes below may let it run.
SCRIPT = "from pathlib import Path\nPath(__file__).with_suffix('.ran').write_text('ran')\n"
#: The environment variables that stand in for options (unset in every test unless set there).
ENV = (
    "HCCL_PY_BACKEND",
    "HCCL_PY_PLATFORM",
    "HCCL_PY_SCHEDULE",
    "HCCL_PY_SEED",
    "HCCL_PY_EXPLORE",
    "HCCL_PY_WORLD_SIZE",
    "HCCL_PY_RUNNER_NPROC",
    "HCCL_PY_TRACE",
    "HCCL_PY_LAYOUT",
    "HCCL_PY_POISON",
    "HCCL_PY_SUMMARY",
    "HCCL_PY_TIMEOUT",
    "HCCL_PY_RANKS_PER_SERVER",
    "HCCL_BUFFSIZE",
    "HCCL_PY_SECRET",  # several hosts need it: without it, a runner refuses them at least
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start without the variables above; whatever a test or main sets is undone after it."""
    saved = dict(os.environ)
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A script that marks that it ran (``job.ran``), in the current folder."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "job.py"
    path.write_text(SCRIPT)
    return path


def _error(capsys: pytest.CaptureFixture, command: str, argv: list[str]) -> str:
    """``main(argv)``'s error line, after checking that it is one line of exit status 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    prefix = f"python -m hccl_py {command}: error: "
    assert lines[0].startswith(prefix), err
    return lines[0][len(prefix) :]


GLOO = ["--backend", "gloo", "-n", "1"]
TOO_MANY = str(MAX_WORLD_SIZE + 1)
RUN_CASES = {
    "explore 0": (["--explore", "0"], "--explore must be >= 1 (a number of schedules), not 0"),
    "explore -3": (["--explore", "-3"], "--explore must be >= 1 (a number of schedules), not -3"),
    "seed -1": (["--seed", "-1"], "--seed must be >= 0 (a schedule's number), not -1"),
    "n 0": (["-n", "0"], "-n/--nproc must be >= 1, not 0"),
    "n too many": (
        ["-n", TOO_MANY],
        f"-n/--nproc must be <= {MAX_WORLD_SIZE} (the most ranks of one run), not {TOO_MANY}",
    ),
    "nnodes 0": ([*GLOO, "--nnodes", "0"], "--nnodes must be >= 1, not 0"),
    "hosts too many": (
        ["--backend", "gloo", "-n", "40000", "--nnodes", "2", "--master-port", "29500"],
        f"--nnodes 2 hosts of -n 40000 ranks are 80000 ranks; a run has at most {MAX_WORLD_SIZE}",
    ),
    "node-rank 3 of 2": (
        [*GLOO, "--nnodes", "2", "--node-rank", "3", "--master-port", "29500"],
        "--node-rank must be <= 1 (the hosts of --nnodes 2 are 0..1), not 3",
    ),
    "node-rank -1": ([*GLOO, "--node-rank", "-1"], "--node-rank must be >= 0, not -1"),
    "port 70000": ([*GLOO, "--master-port", "70000"], "--master-port must be <= 65535, not 70000"),
    "port -1": ([*GLOO, "--master-port", "-1"], "--master-port must be >= 0 (0: a free port)"),
    "port 0 on 2 hosts": (
        [*GLOO, "--nnodes", "2", "--master-port", "0"],
        "--nnodes 2 needs --master-port P with P in 1..65535",
    ),
    "seed on gloo": ([*GLOO, "--seed", "0"], "--seed picks schedules of the emulator"),
    "seed and explore": (  # until stop 64: hp.run's ValueError, a traceback
        ["--seed", "1", "--explore", "2"],
        "--seed replays one schedule and --explore runs the default one and seeds 1 to N - 1: "
        "give one of them",
    ),
}


@pytest.mark.parametrize("case", RUN_CASES)
def test_bad_numbers_are_refused_before_the_script_runs(
    case: str, script: Path, capsys: pytest.CaptureFixture
) -> None:
    options, message = RUN_CASES[case]
    assert message in _error(capsys, "run", ["run", *options, str(script)])
    assert not script.with_suffix(".ran").exists()


@pytest.mark.parametrize(
    "option",
    [
        ["--nnodes", "2"],
        ["--node-rank", "1"],
        ["--master-addr", "10.0.0.1"],
        ["--master-port", "29500"],
        ["--listen-addr", "0.0.0.0"],
    ],
)
def test_the_emulator_refuses_the_options_of_several_hosts(
    option: list[str], script: Path, capsys: pytest.CaptureFixture
) -> None:
    message = _error(capsys, "run", ["run", "-n", "2", *option, str(script)])
    assert message.startswith(f"{option[0]} applies to the gloo and hccl backends only"), message
    assert not script.with_suffix(".ran").exists()


@pytest.mark.parametrize("backend", ["emu", "gloo"])
@pytest.mark.parametrize(
    "content",
    [b"\x7fELF\x02\x01\x01\x00\x00\x00", b'print("caf\xe9")\n', b"\xff\xfe\xc3(\x9f"],
    ids=["NUL bytes", "latin-1 without a coding line", "no UTF-8"],
)
def test_a_binary_script_is_named(
    backend: str, content: bytes, script: Path, capsys: pytest.CaptureFixture
) -> None:
    """Text that is no UTF-8 (nor its coding line's encoding) raised a UnicodeDecodeError
    traceback on the emulator until stop 64."""
    script.write_bytes(content)
    message = _error(capsys, "run", ["run", "-n", "1", "--backend", backend, str(script)])
    assert message.startswith(f"the script {str(script)!r} is not a Python source file"), message


def test_a_script_in_the_encoding_its_coding_line_names_runs(
    script: Path, capsys: pytest.CaptureFixture
) -> None:
    script.write_bytes(script.read_bytes().replace(b"\n", b"\n# caf\xe9\n", 1))
    script.write_bytes(b"# -*- coding: latin-1 -*-\n" + script.read_bytes())
    assert main(["run", "-n", "1", str(script)]) == 0, capsys.readouterr().err
    assert script.with_suffix(".ran").exists()


ENV_CASES = {
    "platform": (
        {"HCCL_PY_PLATFORM": "A9"},
        "environment variable HCCL_PY_PLATFORM: unknown platform 'A9'; choose one of",
    ),
    "backend": (
        {"HCCL_PY_BACKEND": "nosuch"},
        "environment variable HCCL_PY_BACKEND: unknown backend 'nosuch'; choose one of",
    ),
    "schedule": (
        {"HCCL_PY_SCHEDULE": "soon"},
        "environment variable HCCL_PY_SCHEDULE must be one of eager, late, not 'soon'",
    ),
    "seed": (
        {"HCCL_PY_SEED": "-1"},
        "environment variable HCCL_PY_SEED must be a non-negative int",
    ),
    "explore": (
        {"HCCL_PY_EXPLORE": "x"},
        "environment variable HCCL_PY_EXPLORE must be an integer, not 'x'",
    ),
    "poison": (
        {"HCCL_PY_POISON": "y"},
        "environment variable HCCL_PY_POISON must be 1 or 0 (or true/false, yes/no, on/off), "
        "not 'y'",
    ),
    "summary": ({"HCCL_PY_SUMMARY": "nope"}, "environment variable HCCL_PY_SUMMARY must be 1"),
    "timeout": ({"HCCL_PY_TIMEOUT": "abc"}, "environment variable HCCL_PY_TIMEOUT must be a"),
    "ranks per server": (
        {"HCCL_PY_RANKS_PER_SERVER": "0"},
        "environment variable HCCL_PY_RANKS_PER_SERVER must be a positive int, not '0'",
    ),
    "buffsize": ({"HCCL_BUFFSIZE": "lots"}, "environment variable HCCL_BUFFSIZE"),
    "trace folder": ({"HCCL_PY_TRACE": "."}, "environment variable HCCL_PY_TRACE '.' is a folder"),
    "seed on gloo": (
        {"HCCL_PY_BACKEND": "gloo", "HCCL_PY_SEED": "3"},
        "environment variable HCCL_PY_SEED picks schedules of the emulator",
    ),
    "seed and explore": (
        {"HCCL_PY_SEED": "1", "HCCL_PY_EXPLORE": "2"},
        "environment variable HCCL_PY_SEED replays one schedule and environment variable "
        "HCCL_PY_EXPLORE runs the default one",
    ),
}


@pytest.mark.parametrize("case", ENV_CASES)
def test_bad_environment_variables_are_refused(
    case: str, script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    variables, message = ENV_CASES[case]
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert message in _error(capsys, "run", ["run", "-n", "1", str(script)])
    assert not script.with_suffix(".ran").exists()


def test_hccl_without_torch_npu_is_refused(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # find_spec: not installed
    message = _error(capsys, "run", ["run", "-n", "1", "--backend", "hccl", str(script)])
    assert message.startswith("--backend hccl needs torch_npu"), message
    message = _error(capsys, "bench", ["bench", "--backend", "hccl"])
    assert message.startswith("--backend hccl needs torch_npu"), message


def test_output_files_are_checked_before_the_run(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    folder = script.parent
    argv = ["run", "-n", "1", "--trace", str(folder), str(script)]
    assert _error(capsys, "run", argv) == (
        f"--trace {str(folder)!r} is a folder; give the path of a file to write"
    )
    under_a_file = str(script / "t.json")
    argv = ["run", "-n", "1", "--trace", under_a_file, str(script)]
    assert (
        _error(capsys, "run", argv) == f"--trace {under_a_file!r}: {str(script)!r} is not a folder"
    )
    argv = ["layout", "-n", "1", "--png", str(folder), str(script)]
    assert _error(capsys, "layout", argv).startswith(f"--png {str(folder)!r} is a folder")
    assert not script.with_suffix(".ran").exists()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec: not installed
    argv = ["layout", "-n", "1", "--png", "new/p.png", str(script)]
    assert _error(capsys, "layout", argv) == "--png needs matplotlib: pip install 'hccl_py[bench]'"
    assert not (folder / "new").exists() and not script.with_suffix(".ran").exists()


@pytest.mark.parametrize("kind", ["file", "link", "dangling link"])
def test_output_files_are_created_new(
    script: Path, kind: str, capsys: pytest.CaptureFixture
) -> None:
    """Before, --trace, --png and bench --json overwrote a file, and wrote through a link
    (a dangling one made its target)."""
    victim, out = script.parent / "victim.txt", script.parent / "out.json"
    if kind == "file":
        out.write_text("kept")
    else:
        if kind == "link":
            victim.write_text("kept")
        out.symlink_to(victim)
    for argv in (
        ["run", "-n", "1", "--trace", str(out), str(script)],
        ["layout", "-n", "1", "--png", str(out), str(script)],
        ["bench", "--quick", "--json", str(out)],
    ):
        assert _error(capsys, argv[0], argv) == (
            f"{argv[argv.index(str(out)) - 1]} {str(out)!r} exists; hccl_py creates its output "
            "files new (it never overwrites a file or writes through a link): remove it or "
            "choose another path"
        )
    assert not script.with_suffix(".ran").exists()
    kept = out if kind == "file" else victim
    assert kept.read_text() == "kept" if kind != "dangling link" else not victim.exists()


def test_a_file_that_appears_before_the_write_is_not_overwritten(tmp_path: Path) -> None:
    """The writers create their file with O_EXCL | O_NOFOLLOW: one made after the check stays."""
    from hccl_py.core.newfile import write_new

    path = tmp_path / "t.json"
    path.write_text("theirs")
    with pytest.raises(FileExistsError, match="exists; hccl_py creates its output files new"):
        write_new(path, b"ours", "--trace")
    assert path.read_text() == "theirs"
    write_new(tmp_path / "new" / "t.json", b"ours")
    assert (tmp_path / "new" / "t.json").read_bytes() == b"ours"


def test_two_outputs_at_one_path_are_refused(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Before, ``HCCL_PY_TRACE=x.json ... bench --json x.json`` wrote the trace, then replaced
    it with the table (a file of this process may be written again), saying nothing."""
    monkeypatch.setenv("HCCL_PY_TRACE", "x.json")
    assert _error(capsys, "bench", ["bench", "--quick", "--json", "./x.json"]) == (
        "environment variable HCCL_PY_TRACE 'x.json' names the same file as --json: the second "
        "written would replace the first; give each output a path of its own"
    )
    monkeypatch.delenv("HCCL_PY_TRACE")
    monkeypatch.setenv("HCCL_PY_LAYOUT", "x.png")
    with pytest.raises(ValueError, match="HCCL_PY_LAYOUT 'x.png' names the same file as trace"):
        hp.run(lambda: None, world_size=1, trace="x.png")
    argv = ["run", "-n", "1", "--trace", "x.png", str(script)]
    assert "HCCL_PY_LAYOUT 'x.png' names the same file as --trace" in _error(capsys, "run", argv)
    assert not script.with_suffix(".ran").exists() and not (script.parent / "x.png").exists()
    assert not (script.parent / "x.json").exists()


def test_a_write_that_fails_leaves_no_truncated_file(tmp_path: Path) -> None:
    """Before, a failed write (a full disk, Ctrl-C) left the truncated file under the user's
    name, which the next run then refused; a file that replaced it meanwhile stays."""
    from hccl_py.core.newfile import create_new, write_new

    path = tmp_path / "t.json"
    with pytest.raises(OSError, match="No space"), create_new(path) as f:
        f.write(b'{"traceEvents": [')
        raise OSError(28, "No space left on device")
    assert not path.exists()
    write_new(path, b"ours")  # the path is free again, and then this process's own file
    with pytest.raises(KeyboardInterrupt), create_new(path) as f:
        f.write(b"part")
        raise KeyboardInterrupt
    assert not path.exists()
    with pytest.raises(RuntimeError), create_new(path) as f:
        path.unlink()
        path.write_text("theirs")
        raise RuntimeError
    assert path.read_text() == "theirs"


def test_a_trace_the_disk_cannot_hold_is_not_left_truncated(tmp_path: Path) -> None:
    """A file size limit stands for a full disk: the run says "not written", and no half
    trace is left at the path (before, one of exactly the limit's size was)."""
    path = str(tmp_path / "t.json")
    code = (
        "import resource, signal, hccl_py as hp\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))\n"
        f"print(hp.run(lambda: hp.barrier() or hp.get_rank(), world_size=2, trace={path!r}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0 and out.stdout == "[0, 1]\n", out.stderr
    assert "File too large; not written" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_file_this_process_created_is_written_again(tmp_path: Path) -> None:
    """A second hp.run with the same trace path (HCCL_PY_TRACE, or --trace of a script that
    calls hp.run twice) replaces the file the first one created; the first version of the
    exclusive creation refused it, and bench with HCCL_PY_TRACE stopped after one sweep."""
    path = tmp_path / "t.json"
    for n in (1, 2):
        hp.run(lambda: hp.barrier(), world_size=2, trace=str(path))
        assert json.loads(path.read_text())["traceEvents"], n
    path.unlink()
    path.write_text("theirs")  # another file at the path now: refused again
    with pytest.raises(ValueError, match="exists; hccl_py creates its output files new"):
        hp.run(lambda: None, world_size=1, trace=str(path))
    assert path.read_text() == "theirs"


def test_a_trace_that_appears_during_the_run_keeps_the_runs_outcome(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Before, the writer's FileExistsError replaced the run's result (or its WorldError)."""
    path = tmp_path / "t.json"

    def main() -> int:
        if hp.get_rank() == 0:
            path.write_text("theirs")
        return hp.get_rank()

    assert hp.run(main, world_size=2, trace=str(path)) == [0, 1]
    assert path.read_text() == "theirs"
    assert "exists; hccl_py creates its output files new" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", ["txt", "pgf"])
def test_a_picture_in_a_format_matplotlib_cannot_write_is_refused_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """Before, the run went on, an empty file stayed and matplotlib's raw error came after
    the run (pgf: matplotlib knows it, but needs LaTeX to write it)."""
    pytest.importorskip("matplotlib")
    path = tmp_path / f"layout.{suffix}"
    monkeypatch.setenv("HCCL_PY_LAYOUT", str(path))
    with pytest.raises(ValueError, match=f"hccl_py draws no '{suffix}' files"):
        hp.run(lambda: None, world_size=1)
    assert not path.exists()


BENCH_CASES = {
    "ranks": (["--nproc", "70000"], "--nproc/--ranks must be <= 65536"),
    "block dim": (
        ["--block-dim", str(MAX_BLOCK_DIM + 1)],
        f"--block-dim must be <= {MAX_BLOCK_DIM}, not {MAX_BLOCK_DIM + 1}",
    ),
    "repeat": (["--repeat", "300"], f"--repeat must be <= {MAX_REPEAT}, not 300"),
    "json folder": (["--json", "."], "--json '.' is a folder"),
    "plot under a file": (["--plot", "job.py/bw.png"], "/job.py' is not a folder"),
}


@pytest.mark.parametrize("case", BENCH_CASES)
def test_bench_options_are_checked_before_the_sweep(
    case: str, script: Path, capsys: pytest.CaptureFixture
) -> None:
    options, message = BENCH_CASES[case]
    assert message in _error(capsys, "bench", ["bench", "--no-progress", *options])


def test_bench_refuses_sizes_beyond_this_hosts_memory(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr("hccl_py.bench.cli.host_memory", lambda: 8 << 30)
    argv = ["bench", "--no-progress", "-b", "1K", "-e", "5G", "-f", "1024"]  # the last: 1G
    assert _error(capsys, "bench", argv) == (
        "-b/-e: the size 1073741824 bytes of allgather needs 20.0 GiB of send and receive "
        "buffers on this host's 4 ranks, more than its 8.0 GiB of memory; choose a smaller "
        "-e/--maxbytes or fewer ranks"
    )
    monkeypatch.setenv("HCCL_PY_PLATFORM", "A9")
    message = _error(capsys, "bench", ["bench", "--no-progress"])
    assert message.startswith("environment variable HCCL_PY_PLATFORM: unknown platform 'A9'")


def test_what_runs_today_still_passes_the_checks(script: Path, tmp_path: Path) -> None:
    """Boundary values, the defaults and scripts Python runs (a .pyc, a zip) are not refused."""
    from hccl_py.__main__ import _checked
    from hccl_py.launcher.script_checks import script_problem

    parse = build_parser().parse_args
    assert _checked(parse(["run", "-n", str(MAX_WORLD_SIZE), str(script)])) == "emu"
    os.environ["HCCL_PY_PLATFORM"] = "a3"  # hp.run takes any case
    os.environ["HCCL_PY_SEED"] = ""  # empty: unset, as hp.run reads it
    gloo = ["run", "--backend", "gloo", "--master-port", "0", "--nnodes", "1", str(script)]
    assert _checked(parse(gloo)) == "gloo"
    compiled, archive = tmp_path / "job.pyc", tmp_path / "job.pyz"
    compiled.write_bytes(importlib.util.MAGIC_NUMBER + b"\0" * 12)
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("__main__.py", SCRIPT)
    assert script_problem(str(compiled)) is None and script_problem(str(archive)) is None
    assert "does not exist" in script_problem("missing.py")


def test_the_command_line_says_it_in_one_line(script: Path) -> None:
    """Without the check every rank process died of the unknown backend; now none starts."""
    out = subprocess.run(
        [sys.executable, "-m", "hccl_py", "run", "-n", "2", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HCCL_PY_BACKEND": "nosuch"},
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        "python -m hccl_py run: error: environment variable HCCL_PY_BACKEND: unknown backend "
        "'nosuch'; choose one of ['emu', 'gloo', 'hccl']"
    ]
    assert not script.with_suffix(".ran").exists()


@pytest.mark.parametrize(
    ("code", "said", "status"),
    [("'a message'", "a message\n", 1), ("3", "", 3), ("None", "", 0), ("[1, 2]", "[1, 2]\n", 1)],
)
def test_a_script_exit_on_the_emulator_ends_as_python_and_gloo_end_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], code: str, said: str, status: int
) -> None:
    """Before, sys.exit("a message") in the script exited 1 without printing the message on
    the emulator (gloo's ranks, real scripts, print it as Python does)."""
    script = tmp_path / "job.py"
    script.write_text(f"import sys\nsys.exit({code})\n")
    assert main(["run", "-n", "2", str(script)]) == status
    assert capsys.readouterr().err == said


def test_a_folder_with_a_main_module_runs_as_python_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python and runpy run a folder holding __main__.py; the script check refused it."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "__main__.py").write_text(
        "import hccl_py as hp\nif __name__ == '__main__':\n    print(list(hp.run(hp.get_rank)))\n"
    )
    assert main(["run", "-n", "3", str(folder)]) == 0
    assert capsys.readouterr().out == "[0, 1, 2]\n"
    assert main(["run", "-n", "3", str(tmp_path)]) == 2
    assert "is a directory without __main__.py" in capsys.readouterr().err


def test_an_option_given_makes_its_variable_unread(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The options overwrite their variables (--poison sets HCCL_PY_POISON=1): a bad value
    under a given option is not read, as hp.run reads no variable whose argument it is given."""
    monkeypatch.setenv("HCCL_PY_POISON", "y")
    monkeypatch.setenv("HCCL_PY_PLATFORM", "A9")
    monkeypatch.setenv("HCCL_PY_SEED", "-1")
    argv = ["run", "-n", "1", "--poison", "--platform", "a3", "--seed", "2", str(script)]
    assert main(argv) == 0, capsys.readouterr().err
    assert script.with_suffix(".ran").exists()


BENCH_ENV_CASES = {
    "seed": ({"HCCL_PY_SEED": "x"}, "environment variable HCCL_PY_SEED must be an integer"),
    "explore": (
        {"HCCL_PY_EXPLORE": "0"},
        "environment variable HCCL_PY_EXPLORE must be a positive int, not 0",
    ),
    "summary": ({"HCCL_PY_SUMMARY": "nope"}, "environment variable HCCL_PY_SUMMARY must be 1"),
    "seed on gloo": (
        {"HCCL_PY_SEED": "3", "BACKEND": "gloo"},
        "environment variable HCCL_PY_SEED picks schedules of the emulator",
    ),
    "trace folder": ({"HCCL_PY_TRACE": "."}, "environment variable HCCL_PY_TRACE '.' is a folder"),
}


@pytest.mark.parametrize("case", BENCH_ENV_CASES)
def test_bench_reads_the_environment_before_the_sweep(
    case: str, script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Before, these came out of hp.run as tracebacks, once per sweep or rank."""
    variables, message = BENCH_ENV_CASES[case]
    backend = variables.pop("BACKEND", "emu")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    argv = ["bench", "--no-progress", "--backend", backend]
    assert message in _error(capsys, "bench", argv)


@pytest.mark.parametrize(
    ("backend", "launcher", "here"),
    [
        ("gloo", {}, 16),
        ("gloo", {"LOCAL_WORLD_SIZE": "1"}, 1),
        ("gloo", {"LOCAL_WORLD_SIZE": ""}, None),
        ("emu", {}, 16),
        ("emu", {"LOCAL_WORLD_SIZE": "1"}, 16),
        ("emu", {"LOCAL_WORLD_SIZE": ""}, None),
    ],
)
def test_bench_counts_the_memory_of_this_hosts_ranks(
    monkeypatch: pytest.MonkeyPatch, backend: str, launcher: dict[str, str], here: int | None
) -> None:
    """Under a launcher the other hosts' gloo ranks are not here (16 one-rank hosts fit where
    16 ranks on one host do not), while each emulator process holds all its ranks; a launcher
    that does not say how many processes are here is not judged."""
    from hccl_py.bench import cli as bench_cli

    if launcher:
        for name, value in {"RANK": "0", "WORLD_SIZE": "16", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": "1", **launcher}.items():  # fmt: skip
            monkeypatch.setenv(name, value)
    assert bench_cli._ranks_here(16, backend) == here
    monkeypatch.setattr(bench_cli, "host_memory", lambda: 8 << 30)
    opts = build_parser().parse_args(["bench", "-b", "256M", "-e", "256M", "--nproc", "16"])
    (sweep,) = [bench_cli._options(opts, op) for op in bench_cli._ops(opts.op)]
    if here == 16:
        with pytest.raises(ValueError, match="on this host's 16 ranks"):
            bench_cli._check_memory(sweep, 16, backend)
    else:
        bench_cli._check_memory(sweep, 16, backend)


@pytest.mark.parametrize(
    ("variables", "options", "refused"),
    [
        ({"HCCL_PY_REDUCE": "bogus"}, [], None),  # a gloo setting: the emulator never reads it
        ({"HCCL_PY_REDUCE": "bogus"}, GLOO, "environment variable HCCL_PY_REDUCE must be"),
        ({"HCCL_PY_REDUCE": ""}, GLOO, None),  # empty is unset, as for every variable
        ({"HCCL_PY_EMU_RUNNERS": "bogus"}, [], "environment variable HCCL_PY_EMU_RUNNERS must"),
        ({"HCCL_PY_EMU_RUNNERS": "greenlets", "HCCL_PY_SAME_CPU": "2"}, [], None),
        ({"HCCL_PY_SAME_CPU": "2"}, [], "environment variable HCCL_PY_SAME_CPU must be 1 or 0"),
        # how gloo ranks start and how long their store may take: read on gloo only
        ({"HCCL_PY_START_METHOD": "nosuch"}, [], None),
        (
            {"HCCL_PY_START_METHOD": "nosuch"},
            GLOO,
            "environment variable HCCL_PY_START_METHOD must be one of forkserver, spawn, fork, "
            "not 'nosuch'",
        ),
        ({"HCCL_PY_START_METHOD": "spawn"}, GLOO, None),
        ({"HCCL_PY_STORE_ANSWER_S": "0"}, [], None),
        (
            {"HCCL_PY_STORE_ANSWER_S": "0"},
            GLOO,
            "environment variable HCCL_PY_STORE_ANSWER_S must be a positive number of seconds",
        ),
    ],
)
def test_each_backend_is_checked_for_what_it_reads(
    script: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    variables: dict[str, str],
    options: list[str],
    refused: str | None,
) -> None:
    """The command line refuses only what the chosen backend would refuse: the gloo settings on
    gloo, the runner settings (HCCL_PY_SAME_CPU with thread runners only) on the emulator."""
    from hccl_py.__main__ import _checked

    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    opts = build_parser().parse_args(["run", "-n", "1", *options, str(script)])
    if refused is None:
        assert _checked(opts) == ("gloo" if options else "emu")
    else:
        assert refused in _error(capsys, "run", ["run", "-n", "1", *options, str(script)])


def test_layout_sets_its_picture_itself_and_a_trace_named_dash_is_a_file(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """layout replaces HCCL_PY_LAYOUT with --png (or "-", text only), so the variable is not
    read; "-" means text only for the picture, not for --trace (a file named "-")."""
    from hccl_py.__main__ import _checked

    monkeypatch.setenv("HCCL_PY_LAYOUT", str(script / "x.png"))  # under a file: unwritable
    assert _checked(build_parser().parse_args(["layout", "-n", "1", str(script)])) == "emu"
    (script.parent / "-").mkdir()
    argv = ["run", "-n", "1", "--trace", "-", str(script)]
    assert (
        _error(capsys, "run", argv) == "--trace '-' is a folder; give the path of a file to write"
    )


def test_bench_reads_the_backend_and_schedule_variables_as_run_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`HCCL_PY_BACKEND=gloo python -m hccl_py bench` ran on the emulator, and a bad
    HCCL_PY_SCHEDULE went unread: bench's options had defaults of their own (an audit)."""
    from hccl_py.bench.cli import _checked as bench_checked
    from hccl_py.launcher.cli_checks import UsageError

    monkeypatch.setenv("HCCL_PY_BACKEND", "gloo")
    opts = build_parser().parse_args(["bench", "-n", "2", "-b", "1K", "-e", "1K"])
    bench_checked(opts)
    assert opts.backend == "gloo"
    monkeypatch.delenv("HCCL_PY_BACKEND")
    monkeypatch.setenv("WORLD_SIZE", "2")  # a stray launcher variable: bench stays on the emulator
    opts = build_parser().parse_args(["bench", "-n", "2", "-b", "1K", "-e", "1K"])
    bench_checked(opts)
    assert opts.backend == "emu"
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("HCCL_PY_SCHEDULE", "lazy")
    with pytest.raises(UsageError, match="HCCL_PY_SCHEDULE must be one of"):
        bench_checked(build_parser().parse_args(["bench", "-n", "2", "--backend", "emu"]))


@pytest.mark.parametrize(
    ("given", "error", "said"),
    [
        ({"backend": ""}, UnknownBackendError, "unknown backend ''"),
        ({"backend": []}, UnknownBackendError, "unknown backend []"),
        ({"platform": []}, ValueError, "unknown platform []"),
        ({"schedule": []}, ValueError, "schedule must be 'eager' or 'late', not []"),
    ],
    ids=["backend-empty", "backend-list", "platform-list", "schedule-list"],
)
def test_hp_run_refuses_an_empty_value_instead_of_running_the_default(
    given: dict, error: type, said: str
) -> None:
    """A value read empty from a configuration ran silently on the default backend, platform or
    schedule (an audit's probes); backend=[] raised a raw TypeError besides."""
    with pytest.raises(error) as info:
        hp.run(hp.get_rank, world_size=1, **given)
    assert said in str(info.value)


def test_no_caller_branches_on_a_backends_name() -> None:
    """Backend differences live in the registry (hccl_py/core/backend_info.py) and behind the
    server protocol: nothing compares a backend's name with a literal."""
    name = r"""["'](emu|gloo|hccl)["']"""
    pattern = re.compile(rf"[!=]=\s*{name}|{name}\s*[!=]=|\bin\s*[(\[{{][^)\]}}]*{name}")
    root = Path(hp.__file__).parent
    found = [
        f"{path.relative_to(root.parent)}:{n}"
        for folder in (root, root.parent / "emu")
        for path in folder.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


WORLD_SCRIPT = (
    "import hccl_py as hp\nfrom pathlib import Path\n\n"
    "Path(__file__).with_suffix('.ran').write_text(str(hp.run(hp.get_world_size)))\n"
)


@pytest.mark.parametrize(
    ("env", "options", "world"), [(None, [], 4), ("3", [], 3), ("3", ["-n", "2"], 2)]
)
def test_run_takes_its_ranks_from_n_else_hccl_py_world_size_else_4(
    script: Path, monkeypatch: pytest.MonkeyPatch, env: str | None, options: list, world: int
) -> None:
    """Until stop 65, ``run`` without -n ran 4 ranks whatever HCCL_PY_WORLD_SIZE said (it set
    the variable from -n's default), though hp.run and the docs read the variable."""
    if env is not None:
        monkeypatch.setenv("HCCL_PY_WORLD_SIZE", env)
    script.write_text(WORLD_SCRIPT)
    assert main(["run", *options, str(script)]) == 0
    assert script.with_suffix(".ran").read_text() == str([world] * world)


def test_bench_takes_its_ranks_from_hccl_py_world_size_when_nproc_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hccl_py.bench.cli import _checked as bench_checked

    monkeypatch.setenv("HCCL_PY_WORLD_SIZE", "3")
    opts = build_parser().parse_args(["bench", "--quick"])
    bench_checked(opts)
    assert opts.ranks == 3
    opts = build_parser().parse_args(["bench", "--quick", "--nproc", "2"])
    bench_checked(opts)
    assert opts.ranks == 2


@pytest.mark.parametrize(
    ("value", "options", "message"),
    [
        ("0", [], "environment variable HCCL_PY_WORLD_SIZE must be an int in 1..65536, not 0"),
        (
            "3",
            ["--backend", "gloo", "--nnodes", "2", "--master-port", "29500"],
            "environment variable HCCL_PY_WORLD_SIZE=3 ranks do not share evenly over --nnodes "
            "2 hosts: give -n/--nproc, the ranks per host",
        ),
        # the emulator refuses --nnodes before the variable is shared over its hosts
        ("3", ["--nnodes", "2"], "--nnodes applies to the gloo and hccl backends only"),
        ("3", ["--backend", "gloo", "--nnodes", "-2"], "--nnodes must be >= 1, not -2"),
    ],
)
def test_a_world_size_variable_that_cannot_stand_in_for_n_is_refused(
    script: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    value: str,
    options: list,
    message: str,
) -> None:
    monkeypatch.setenv("HCCL_PY_WORLD_SIZE", value)
    assert message in _error(capsys, "run", ["run", *options, str(script)])
    assert not script.with_suffix(".ran").exists()
