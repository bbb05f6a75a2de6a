"""The command line reads like a mature tool's: --version, plain help, every default shown."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

import pytest

import hccl_py as hp
from hccl_py.__main__ import main
from hccl_py.__main__ import main as cli

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hccl_py", *args], capture_output=True, text=True, timeout=60
    )


def _help(*args: str) -> str:
    """``python -m hccl_py ARGS --help``'s text, from the same parser in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        cli([*args, "--help"])
    assert exit_info.value.code == 0
    return out.getvalue()


def test_version() -> None:
    out = _cli("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"hccl_py {hp.__version__}"


@pytest.mark.parametrize("args", [(), ("run",), ("bench",)])
def test_help_is_plain_words(args: tuple[str, ...]) -> None:
    text = _help(*args)
    assert "usage: python -m hccl_py" in text
    assert "``" not in text and ":mod:" not in text, text


def test_a_clone_folder_shadowing_the_package_is_named(tmp_path) -> None:
    (tmp_path / "hccl_py").mkdir()  # a clone's root: a folder without __init__.py
    out = subprocess.run(
        [sys.executable, "-m", "hccl_py", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 1
    assert "ImportError" not in out.stderr, out.stderr
    assert "a folder without __init__.py" in out.stderr and "from another folder" in out.stderr


def test_run_help_lists_every_option_with_its_default() -> None:
    text = " ".join(_help("run").split())
    for option, default in (
        ("--nproc", "None"),
        ("--backend", "None"),
        ("--platform", "None"),
        ("--nnodes", "1"),
        ("--node-rank", "0"),
        ("--master-addr", "127.0.0.1"),
        ("--master-port", "None"),
    ):
        assert option in text
        after = text[text.index(option) :]
        assert f"(default: {default})" in after, (option, default)


def test_run_help_names_the_platform_variable() -> None:
    # --platform left out leaves HCCL_PY_PLATFORM in force (hp.run reads it), as --backend's
    # help says for HCCL_PY_BACKEND; the help said "(None: A2)"
    for command in ("run", "layout"):
        text = " ".join(_help(command).split())
        assert "the platform (None: $HCCL_PY_PLATFORM, else A2)" in text, command


def test_run_and_bench_help_say_what_n_means_in_each() -> None:
    run_help = " ".join(_help("run").split())
    bench_help = " ".join(_help("bench").split())
    assert "in bench, -n is hccl_test's iteration count" in run_help
    assert "-b -e -f -i -o -d -n -w -c are hccl_test's flags" in bench_help
    assert "The ranks are --nproc, as in 'run'" in bench_help
    assert "None: $HCCL_PY_WORLD_SIZE over --nnodes hosts, else 4" in run_help
    assert "None: $HCCL_PY_WORLD_SIZE, else 4" in bench_help


def test_bench_help_lists_every_option_with_its_default() -> None:
    text = " ".join(_help("bench").split())
    for option, default in (
        ("--op", "allgather"),
        ("--nproc", "None"),
        ("--platform", "None"),
        ("--backend", "None"),
        ("--api", "kernel"),
        ("--minbytes", "1K"),
        ("--maxbytes", "1M, --quick 64K"),
        ("--stepfactor", "2, --quick 8"),
        ("--stepbytes", "0"),
        ("--iters", "20, --quick 2"),
        ("--warmup-iters", "5, --quick 1"),
        ("--check", "1"),
        ("--repeat", "1"),
        ("--block-dim", "1"),
        ("--json", "None"),
        ("--plot", "None"),
    ):
        assert option in text
        after = text[text.index(option) :]
        assert f"(default: {default})" in after, (option, default)
    assert "(default: None)" not in text.split("--minbytes", 1)[1].split("--op-reduce")[0]


SCRIPT = """
import hccl_py as hp
from hccl_py.__main__ import main


def main():
    return hp.get_world_size()


if __name__ == "__main__":
    print(hp.run(main{kwargs}))
"""


@pytest.mark.parametrize(
    ("kwargs", "nproc", "ok"),
    [("", 3, True), (", world_size=3", 3, True), (", world_size=4", 8, False)],
)
def test_run_n_runs_n_ranks_or_says_why_not(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, kwargs: str,
    nproc: int, ok: bool,
) -> None:  # fmt: skip
    """On the emulator ``run`` runs the script in its own process (runpy): main() here runs
    what ``python -m hccl_py run`` runs; what it and the script change is undone after."""
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(kwargs=kwargs))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    saved = dict(os.environ)
    try:
        if ok:
            assert main(["run", "-n", str(nproc), str(script)]) == 0, capsys.readouterr().err
            assert capsys.readouterr().out.strip() == str([nproc] * nproc)
        else:  # Python prints this uncaught error and exits 1
            with pytest.raises(ValueError) as info:
                main(["run", "-n", str(nproc), str(script)])
            said = str(info.value)
            assert "-n 8 asked for 8 ranks" in said and "world_size=4" in said, said
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.parametrize("backend", ["emu", "gloo"])
@pytest.mark.parametrize(
    ("name", "what"),
    [("nonexist.py", "does not exist"), (".", "is a directory without __main__.py")],
)
def test_run_of_a_missing_script_says_what_to_change(
    tmp_path, monkeypatch, capsys, backend: str, name: str, what: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--backend", backend, name]) == 2
    err = capsys.readouterr().err
    assert f"error: the script {name!r} {what}; give the path of a Python file" in err
    assert "Traceback" not in err
