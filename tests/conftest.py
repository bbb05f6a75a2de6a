"""Shared fixtures of the test suite.

Semantic tests (worked examples, AlltoAllV, random ops, call rules) take the
``backend`` fixture and pass it to ``hp.run``; they run once per backend listed
in :data:`SEMANTIC_BACKENDS`. Hypothesis-driven tests run many small worlds and
need a backend in :data:`FAST_BACKENDS`; a seeded batch variant covers the rest.
"""

from __future__ import annotations

import pytest

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
