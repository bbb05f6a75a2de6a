"""The in-process emulation backend: N ranks as threads of one process.

- :mod:`.world`: the emulated server, shared by all ranks (task matching,
  scheduling, deadlock-aware waiting).
- :mod:`.executor`: moves the data of one round with vectorised torch ops.
- :mod:`.backend`: starts the rank threads and collects their results.
"""

from .backend import EmuBackend
from .world import EmuWorld

__all__ = ["EmuBackend", "EmuWorld"]
