"""The in-process emulation backend: N ranks as runners of one process, one at a time.

- :mod:`.world`: the emulated server, shared by all ranks (task matching,
  scheduling, deadlock-aware waiting).
- :mod:`.executor`: moves the data of one round with vectorised torch ops.
- :mod:`.backend`: starts the ranks and collects their results.
- :mod:`.scheduler`: runs one rank or core at a time, in a fixed or seeded order.
"""

from .backend import EmuBackend
from .scheduler import wait_until
from .world import EmuWorld

__all__ = ["EmuBackend", "EmuWorld", "wait_until"]
