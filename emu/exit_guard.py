"""``os._exit`` called by an emulated rank: that rank's failure, not the whole program's exit.

In a process of its own (gloo, HCCL) a rank that calls ``os._exit`` ends only itself, and
the run fails ("exited with code 0 inside hp.run"). The emulator's ranks share one process,
which the real ``os._exit`` would end at once with the rank's code: every rank, the report,
and with code 0 a run that looks passed. While an emulated run is active, ``os._exit`` from
one of its runners raises :class:`RankExit` in that runner instead; called from anywhere
else, or in a process forked from a rank (multiprocessing's children end with ``os._exit``),
it is the real one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import NoReturn

from hccl_py.kernel.context import current_rank_context

_REAL_EXIT = os._exit
_lock = threading.Lock()
_active = 0
#: The process whose runs the guard covers (a forked child inherits the guard, not the runs).
_guarded_pid = 0


class RankExit(SystemExit):
    """An emulated rank called ``os._exit``: it ends that rank, as a failure of the run."""


def _rank_exit(code: int) -> NoReturn:
    ctx = current_rank_context(required=False)
    if ctx is None or os.getpid() != _guarded_pid:
        _REAL_EXIT(code)
    raise RankExit(
        f"rank {ctx.rank} called os._exit({code}) inside hp.run: the emulator's ranks share "
        "one process, which it would end for every rank; in a process of its own (gloo, "
        "HCCL) it ends the rank, and the run fails. Return from the rank's function or raise "
        "instead"
    )


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """While the block runs, ``os._exit`` from a rank of an emulated run raises
    :class:`RankExit` in that rank (nested and concurrent runs share one guard)."""
    global _active, _guarded_pid
    with _lock:
        _active += 1
        _guarded_pid = os.getpid()
        os._exit = _rank_exit
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                os._exit = _REAL_EXIT
