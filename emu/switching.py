"""The world lock of a seeded schedule: entering it (and, for some, leaving it) is a switch point."""

from __future__ import annotations

from typing import Any


class SwitchingLock:
    """The world lock as a switch point: a seeded schedule may switch at every hccl_py call."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.lock = scheduler.cond
        #: The end of an hccl_py call is a switch point too (the fixed-priority schedules).
        self.at_return = scheduler.policy.point_at_return

    def __enter__(self) -> None:
        outer = not self.lock._is_owned()
        try:
            self.lock.acquire()
            if outer:
                self.scheduler.point()
        except BaseException:  # a runner stopped by the run's timeout (it is stopped only
            if outer and self.lock._is_owned():  # while it holds no lock, so the stop lands
                self.lock.release()  # as it took this one): no __exit__ follows
            raise

    def __exit__(self, *exc: object) -> None:
        self.lock.release()
        if self.at_return and not self.lock._is_owned():
            self.scheduler.point()

    def _is_owned(self) -> bool:
        return self.lock._is_owned()
