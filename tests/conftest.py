"""Shared fixtures of the test suite.

Semantic tests (worked examples, AlltoAllV, random ops, call rules) take the
``backend`` fixture and pass it to ``hp.run``; they run once per backend listed
in :data:`SEMANTIC_BACKENDS`. Hypothesis-driven tests run many small worlds and
need a backend in :data:`FAST_BACKENDS`; a seeded batch variant covers the rest.
The race and window tests (modules marked ``runner_kinds``) run once per kind of
the emulator's runners (``emu_runners``): threads and greenlets.

Under pytest-xdist (``--dist loadgroup``) a test file is one unit of work, as with
``loadfile``, unless the module is marked ``spread``: then each of its tests is a unit of its
own, so that one long file no longer runs on one worker while the others idle. The units
start longest first (:data:`LONGEST_FIRST`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import bytecode
import pytest
import torch
from hccl_py.backends.emu.runners import RUNNER_KINDS, RUNNERS_ENV
from temp_dirs import owned_temp

from hccl_py.launcher.torch_env import THREADS_ENV

#: Test files whose units xdist hands out first, longest first (seconds measured alone on a
#: 2-core machine): a long unit that started last would run alone at the end of the suite.
#: Within a ``spread`` file its ``slow`` tests go first. Every other file follows in
#: collection order.
LONGEST_FIRST = (
    # 33 s, one unit, mostly waiting on timeouts of gloo ranks: started last, it ran alone
    # for its last 20 s with the machine 90% idle; first, it waits beside the CPU-bound units
    "test_framework_errors.py",
    "test_mutations.py",  # 117 s; its four explored mc2_allto_all mutants 15-25 s each
    "test_npu_standin.py",  # 112 s, one unit: its jobs start together (module fixture)
    "test_launchers.py",  # 187 s over 30 tests
    "test_reliability.py",  # 109 s
    "test_launch_memory.py",
    "test_samples.py",  # 65 s, one unit: its jobs start together (module fixture)
    "test_a2_layered.py",  # 35 s: 16-rank worlds
    "test_rules.py",
    "test_trace.py",
    "test_random_ops.py",
    "test_shm_windows.py",
    "test_cli.py",
    "test_soak.py",
    "test_window_races.py",
    "test_gloo_backend.py",
    "test_gloo_memory.py",
)

#: The checkout: where the suite's own bytecode goes (:mod:`bytecode`).
ROOT = Path(__file__).resolve().parent.parent
_WRITTEN: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    """Where no interpreter writes bytecode, the session writes it once, before workers start.
    Refuses, before any worker starts, a pytest-xdist that cannot group this suite's files."""
    if config.getvalue("dist") == "loadgroup" and _xdist_cannot_group():
        raise pytest.UsageError(UNGROUPED.format(pytest.__version__))
    _one_tree()
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        _WRITTEN.extend(bytecode.write_missing(ROOT))
        if (config.getoption("numprocesses", None) or 0) > 1:  # workers that would each rewrite
            modules = bytecode.test_modules(config.args, config.invocation_params.dir)
            _WRITTEN.extend(bytecode.write_rewritten(config, modules))
    _one_intra_op_thread()
    _ctrl_c_reaches_the_tests()


def _one_tree() -> None:
    """Refuse a session whose emulator comes from another tree than its ``hccl_py``.

    ``emu/`` is installed as ``hccl_py.backends.emu`` (pyproject's package-dir); an editable
    install of one checkout maps it there for good. A copy of the checkout run with that
    install imports its own ``hccl_py`` (the working directory comes first) and the other
    checkout's emulator: its tests then run against another tree's code, and fail or pass by
    what that tree holds at the moment.
    """
    emu = Path(sys.modules["hccl_py.backends.emu"].__file__).resolve().parent
    package = Path(sys.modules["hccl_py"].__file__).resolve().parent
    if emu not in {package.parent / "emu", package / "backends" / "emu"}:
        raise pytest.UsageError(
            f"hccl_py comes from {package} but hccl_py.backends.emu from {emu}: another "
            "checkout's editable install; run `pip install -e '.[test]'` in this one"
        )


def _ctrl_c_reaches_the_tests() -> None:
    """A suite started in the background of a shell without job control (``pytest &``, a
    script's ``( ... ) &``) inherits SIGINT ignored, and so would every process a test starts:
    the tests of Ctrl-C then saw ranks carry on and waited out their bounds (120 s). Python's
    own handler is put back, as an interpreter started in the foreground has it."""
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _one_intra_op_thread() -> None:
    """The session's processes (workers, and the ranks and scripts they start) use one torch
    intra-op thread each unless the user chose a number, as rank processes sharing a host do.

    The workers share the machine's cores: with torch's default (a thread per core) the
    OpenMP threads of one worker's operations spin while the other worker holds the cores:
    an emulated kernel's small matmuls took 4x their time beside one busy process, and a
    mutation test 13.5 s instead of 0.7 s in the suite.
    """
    if THREADS_ENV not in os.environ:
        os.environ[THREADS_ENV] = "1"
        torch.set_num_threads(1)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the bytecode the session wrote: the checkout is left as it was."""
    bytecode.remove(_WRITTEN)
    _WRITTEN.clear()


#: Backends every semantic test runs on.
SEMANTIC_BACKENDS = ["emu", "gloo"]
#: Backends cheap enough to start one world per hypothesis example.
FAST_BACKENDS = {"emu"}


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A fresh empty folder right under the machine's temporary folder, removed after the test.

    For a launched job's TMPDIR: pytest's ``tmp_path`` grows with its run counter and worker
    (``pytest-of-USER/pytest-123/popen-gw3/<test name>``), and multiprocessing's fork server
    socket under it can exceed the 107 characters a Unix socket path may have.
    """
    path = Path(owned_temp("hccl_py-t-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", params=SEMANTIC_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend name to pass to ``hp.run``."""
    return request.param


@pytest.fixture(scope="session")
def fast_backend(backend: str) -> str:
    """``backend`` if it can start a world per hypothesis example, else skip the test."""
    if backend not in FAST_BACKENDS:
        pytest.skip(f"hypothesis needs a fast backend; the seeded batch test covers {backend}")
    return backend


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests of a module marked ``runner_kinds`` run once per emulator runner kind.

    A test marked ``one_runner_kind`` (one that starts its own processes) runs once.
    """
    node = metafunc.definition
    if node.get_closest_marker("runner_kinds") and not node.get_closest_marker("one_runner_kind"):
        metafunc.parametrize("emu_runners", RUNNER_KINDS, indirect=True)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: two workers more than the cores this process may use (``--maxprocesses``
    caps it: 4 on 2 cores). Part of the suite's time is spent waiting (launched jobs, timeouts
    of their own): with three workers on 2 cores the machine still stood idle 7% of a run, with
    four 3% (docs/performance.md, stop 68). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` and ``-n logical``
    keep pytest-xdist's meaning."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.option.numprocesses == "logical":
        return None
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()
    return (len(usable) or os.cpu_count() or 1) + 2


def _start_order(item: pytest.Item) -> tuple[int, int]:
    name = item.path.name
    first = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
    spread_slow = item.get_closest_marker("spread") and item.get_closest_marker("slow")
    return first, 0 if spread_slow else 1


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long units first; every test of a module not marked ``spread`` in the file's xdist group."""
    items.sort(key=_start_order)  # stable: a file's tests keep their order (slow ones aside)
    for item in items:
        if not item.get_closest_marker("spread"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


#: Why the suite refuses to run where pytest-xdist cannot group a file's tests.
UNGROUPED = (
    "pytest {} with this pytest-xdist does not group tests by xdist_group "
    "(pytest-dev/pytest-xdist#1386): a module's jobs would start once per worker; install "
    "pytest<9.2, as pip install -e '.[test]' does"
)


def _xdist_cannot_group() -> bool:
    """pytest 9.2 derives node ids from a structured id: pytest-xdist 3.8's grouping, which
    appends the group to ``_nodeid``, no longer takes (pytest-dev/pytest-xdist#1386)."""
    version = getattr(sys.modules.get("xdist"), "__version__", "0")
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
    return "_nodeid" not in getattr(pytest.Item, "__slots__", ("_nodeid",)) and release <= (3, 8, 0)


@pytest.hookimpl(specname="pytest_collection_modifyitems", trylast=True)
def pytest_check_grouping(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker, after xdist's own hook put each test's group in its node id: stop if it did
    not. A module's start-them-all fixture would start its jobs on every worker, and a file's
    tests would be dealt out one by one (pytest 9.2 with pytest-xdist 3.8,
    pytest-dev/pytest-xdist#1386: xdist's node id change no longer takes)."""
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        return
    grouped = [item for item in items if item.get_closest_marker("xdist_group")]
    if grouped and "@" not in grouped[0].nodeid:
        raise pytest.UsageError(UNGROUPED.format(pytest.__version__))


@pytest.fixture(autouse=True)
def emu_runners(request: pytest.FixtureRequest) -> str | None:
    """The emulator's runner kind that a ``runner_kinds`` test runs under (None elsewhere)."""
    kind = getattr(request, "param", None)
    if kind is not None:
        request.getfixturevalue("monkeypatch").setenv(RUNNERS_ENV, kind)
    return kind
