"""One thread that executes the large rounds of an emulated world, as the AI CPU server would.

torch runs a large copy or reduction on a team of worker threads that belongs
to the thread that started it, and a team keeps spinning for a while after
its work. If every rank thread executed rounds itself, a world of N ranks
would keep N teams spinning on the same cores and every copy would run at
half speed or worse. Large rounds therefore run on this one lane; the rank
that releases a round still blocks until it finished, so when its Commit
returns the round is done, exactly as when it runs the round itself.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

#: Rounds that move at least this many bytes (all ranks' sources) run on the lane.
LANE_BYTES = 1 << 20
#: Seconds :meth:`Lane.close` waits for the thread to end.
CLOSE_WAIT_S = 5.0


class Lane:
    """A worker thread, started on first use, that runs one job at a time for its callers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the lane and return when it finished (re-raising its error)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        done = threading.Event()
        failed: list[BaseException] = []
        self._jobs.put((fn, args, done, failed))
        done.wait()
        if failed:
            raise failed[0]

    def run_sized(self, nbytes: int, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the lane when it moves at least :data:`LANE_BYTES`, else here."""
        if nbytes >= LANE_BYTES:
            self.run(fn, *args)
        else:
            fn(*args)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, args, done, failed = job
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                failed.append(exc)
            finally:
                done.set()

    def close(self) -> None:
        """End the thread (if it was started)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join(CLOSE_WAIT_S)
