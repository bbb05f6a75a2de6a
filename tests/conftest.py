"""Shared fixtures of the test suite.

Semantic tests (worked examples, AlltoAllV, random ops, call rules) take the
``backend`` fixture and pass it to ``hp.run``; they run once per backend listed
in :data:`SEMANTIC_BACKENDS`. Hypothesis-driven tests run many small worlds and
need a backend in :data:`FAST_BACKENDS`; a seeded batch variant covers the rest.
The race and window tests (modules marked ``runner_kinds``) run once per kind of
the emulator's runners (``emu_runners``): threads and greenlets.
"""

from __future__ import annotations

import pytest
from hccl_py.backends.emu.runners import RUNNER_KINDS, RUNNERS_ENV

#: Backends every semantic test runs on.
SEMANTIC_BACKENDS = ["emu", "gloo"]
#: Backends cheap enough to start one world per hypothesis example.
FAST_BACKENDS = {"emu"}


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


@pytest.fixture(autouse=True)
def emu_runners(request: pytest.FixtureRequest) -> str | None:
    """The emulator's runner kind that a ``runner_kinds`` test runs under (None elsewhere)."""
    kind = getattr(request, "param", None)
    if kind is not None:
        request.getfixturevalue("monkeypatch").setenv(RUNNERS_ENV, kind)
    return kind
